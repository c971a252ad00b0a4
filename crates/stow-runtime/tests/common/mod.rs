//! Shared test helpers: write bundles to temporary files, compile
//! testdata models with the `stow` binary, read a run's outputs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Writes `bytes` to `m.stow` in a fresh temporary directory.
pub fn write(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.stow");
    std::fs::write(&path, bytes).unwrap();
    (dir, path)
}

/// The testdata models that compile without `--dim` (all but
/// `symbolic_batch`).
pub const FIXED_SHAPE_MODELS: [&str; 8] = [
    "mlp",
    "two_branch",
    "residual_cnn",
    "concat_block",
    "mobilenet_block",
    "transformer_block",
    "upsample_block",
    "depthwise_block",
];

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `stow` binary: `$STOW_BIN`, else the one cargo built next to this
/// test (`cargo test --workspace` builds it for stow-cli's tests; with
/// `-p stow-runtime` alone, run `cargo build -p stow-cli` first). `None`,
/// with a note on stderr, when there is none.
pub fn stow_bin(test: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("STOW_BIN") {
        return Some(PathBuf::from(p));
    }
    // target/<profile>/deps/<test exe> -> target/<profile>/stow
    let exe = std::env::current_exe().ok()?;
    let bin = exe
        .parent()?
        .parent()?
        .join(format!("stow{}", std::env::consts::EXE_SUFFIX));
    if bin.is_file() {
        Some(bin)
    } else {
        eprintln!(
            "note: {test} skipped: no stow binary at {} (run `cargo build -p stow-cli` or set STOW_BIN)",
            bin.display()
        );
        None
    }
}

/// Compiles `testdata/<model>.onnx` into `dir/<model>.stow`.
pub fn compile(stow: &Path, model: &str, dir: &Path) -> PathBuf {
    compile_with(stow, model, dir, &[])
}

/// [`compile`] with extra `stow compile` flags.
pub fn compile_with(stow: &Path, model: &str, dir: &Path, flags: &[&str]) -> PathBuf {
    // Models under testdata/regress are named by their directory.
    let out = dir.join(format!("{}.stow", model.replace('/', "_")));
    let o = Command::new(stow)
        .arg("compile")
        .arg(root().join("testdata").join(format!("{model}.onnx")))
        .arg("-o")
        .arg(&out)
        .args(flags)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "stow compile {model} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Every output's bytes as the last run of `session` left them.
pub fn output_bytes(
    bundle: &stow_runtime::Bundle,
    session: &stow_runtime::Session<'_>,
) -> Vec<Vec<u8>> {
    bundle
        .outputs()
        .map(|t| {
            session
                .arena()
                .tensor_bytes(bundle, &t.id)
                .unwrap()
                .to_vec()
        })
        .collect()
}

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

pub fn testdata(name: &str) -> PathBuf {
    repo_root().join("testdata").join(name)
}

/// Every `.onnx` model in testdata/, sorted.
pub fn testdata_models() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo_root().join("testdata"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .collect();
    v.sort();
    assert!(v.len() >= 6, "testdata/ should hold the generated models");
    v
}

/// Extra arguments some testdata models need.
pub fn model_args(model: &Path) -> Vec<String> {
    if model
        .file_name()
        .unwrap()
        .to_string_lossy()
        .contains("symbolic")
    {
        vec!["--dim".into(), "N=2".into()]
    } else {
        vec![]
    }
}

pub fn stow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stow"))
        .args(args)
        .output()
        .expect("run stow")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Compiles `model` into `out` and returns `stow inspect --json` parsed.
pub fn compile_and_inspect(model: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args: Vec<String> = vec![
        "compile".into(),
        model.display().to_string(),
        "-o".into(),
        out.display().to_string(),
    ];
    args.extend(model_args(model));
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let o = stow(&refs);
    assert!(
        o.status.success(),
        "compile {} failed: {}",
        model.display(),
        stderr(&o)
    );
    let o = stow(&["inspect", "--json", &out.display().to_string()]);
    assert!(o.status.success(), "inspect failed: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("inspect --json prints JSON")
}

/// Rewrites a bundle through the library, bypassing the planner's checker.
pub fn rewrite(path: &Path, edit: impl FnOnce(&mut stow_bundle::Contents)) {
    let bytes = std::fs::read(path).unwrap();
    let view = stow_bundle::BundleView::parse(&bytes).unwrap();
    let mut contents = view.contents().clone();
    let weights: Vec<Vec<u8>> = (0..contents.tensors.len())
        .map(|i| {
            view.weight_bytes(i as u32)
                .map(|w| w.to_vec())
                .unwrap_or_default()
        })
        .collect();
    edit(&mut contents);
    let refs: Vec<&[u8]> = weights.iter().map(|w| w.as_slice()).collect();
    std::fs::write(path, stow_bundle::to_bytes(&contents, &refs).unwrap()).unwrap();
}

/// The depth blocks of the packed weights of `stow inspect --json`'s
/// output, in tensor order.
pub fn packed_depth_blocks(json: &serde_json::Value) -> Vec<i64> {
    json["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["packed_depth_block"].as_i64())
        .collect()
}

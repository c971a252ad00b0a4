//! `examples/c/inspect.c` prints the same sections and tensor table as
//! `stow inspect`, from plain C and `stow_bundle.h`. Skipped with a note
//! when there is no C compiler (`$CC` or `cc`) or no `stow` binary.
// Opens bundles from files (`Bundle::open`): a `std` feature API.
#![cfg(feature = "std")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn compile_c(dir: &Path) -> Option<PathBuf> {
    let source = common::root().join("examples/c/inspect.c");
    stow_bundle::testing::compile_c(&source, &dir.join("inspect"))
}

fn run(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// The `sections` line and its indented rows, and from `tensors` to the end
/// (the rows of both tables); what lies between is decoded from the
/// protobuf metadata, which the C program does not read.
fn tables(text: &str) -> (Vec<&str>, Vec<&str>) {
    let lines: Vec<&str> = text.lines().collect();
    let at = |p: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(p))
            .unwrap_or_else(|| panic!("no `{p}` line in:\n{text}"))
    };
    let start = at("sections");
    let sections = lines[start..]
        .iter()
        .enumerate()
        .take_while(|&(i, l)| i == 0 || l.starts_with("  "))
        .map(|(_, l)| *l)
        .collect();
    (sections, lines[at("tensors")..].to_vec())
}

#[test]
fn c_inspect_matches_stow_inspect() {
    let dir = tempfile::tempdir().unwrap();
    let Some(inspect) = compile_c(dir.path()) else {
        return;
    };
    let Some(stow) = common::stow_bin("c_inspect_matches_stow_inspect") else {
        return;
    };
    // Arena and weight tensors, in-place aliases (mlp), concat slices and
    // views (concat_block).
    for model in ["mlp", "concat_block", "transformer_block"] {
        let bundle = common::compile(&stow, model, dir.path());
        let c_out = run(Command::new(&inspect).arg(&bundle));
        let rust_out = run(Command::new(&stow).arg("inspect").arg(&bundle));
        let (c_sections, c_rows) = tables(&c_out);
        let (r_sections, r_rows) = tables(&rust_out);
        assert_eq!(c_sections, r_sections, "{model}: sections");
        assert!(c_rows.len() > 3, "{model}: no tensor rows:\n{c_out}");
        assert_eq!(c_rows.len(), r_rows.len(), "{model}: row count");
        for (c, r) in c_rows.iter().zip(&r_rows) {
            // Which operator reads a weight packed is in the protobuf
            // metadata, which the C reader does not decode.
            let r = match r.find("packed for ") {
                Some(at) => &r[..at],
                None => r,
            };
            assert_eq!(*c, r, "{model}: tensor row differs");
        }
    }
    // A damaged bundle is rejected, not printed.
    let bundle = dir.path().join("mlp.stow");
    let mut bytes = std::fs::read(&bundle).unwrap();
    bytes[40] ^= 1;
    let bad = dir.path().join("bad.stow");
    std::fs::write(&bad, &bytes).unwrap();
    let o = Command::new(&inspect).arg(&bad).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("header checksum"));
}

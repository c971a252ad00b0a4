//! The format is readable from C with `include/stow_bundle.h` alone: a
//! small C program (`tests/c/read_bundle.c`) prints what it finds, and it
//! must agree with the Rust reader. Skipped, with a note, when no C
//! compiler (`$CC` or `cc`) is installed.

use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use stow_bundle::testing::{arb_bundle, compile_c, refs, sample};
use stow_bundle::{crc32, to_bytes, BundleView, Region};

fn compile(dir: &Path) -> Option<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/read_bundle.c");
    compile_c(&source, &dir.join("read_bundle"))
}

/// What the C program must print for `bytes`.
fn expected(bytes: &[u8]) -> String {
    let view = BundleView::parse(bytes).unwrap();
    let h = view.header();
    let mut s = format!("arena {} {}\n", h.arena_bytes, h.arena_align);
    for sec in view.sections() {
        s += &format!("section {} {} {}\n", sec.kind, sec.offset, sec.length);
    }
    for (i, p) in view.contents().pools.iter().enumerate() {
        s += &format!("pool {i} {} {} {}\n", p.name, p.bytes, p.align);
    }
    for (id, t) in view.contents().tensors.iter().enumerate() {
        let (ak, of) = t.alias_of.map_or((0, u32::MAX), |(k, of)| (k as u32, of));
        s += &format!(
            "tensor {id} kind {} dtype {} region {} offset {} size {} steps {} {} alias {ak} {of} name {}:{} dims",
            t.kind as u32, t.dtype as u32, t.region as u32 | t.pool << 16, t.offset, t.size,
            t.first_step, t.last_step, t.name.len(), t.name
        );
        for d in &t.shape {
            s += &format!(" {d}");
        }
        s += "\n";
        if t.region == Region::Weights {
            let w = view.weight_bytes(id as u32).unwrap();
            s += &format!("weight {id} crc {:08x}\n", crc32(w));
        }
    }
    s
}

fn run(exe: &Path, dir: &Path, bytes: &[u8]) -> (bool, String) {
    let file = dir.join("b.stow");
    std::fs::write(&file, bytes).unwrap();
    let out = Command::new(exe).arg(&file).output().unwrap();
    (out.status.success(), String::from_utf8(out.stdout).unwrap())
}

#[test]
fn c_reader_agrees_with_rust_reader() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = compile(dir.path()) else {
        return;
    };
    let (c, w) = sample();
    let bytes = to_bytes(&c, &refs(&w)).unwrap();
    assert_eq!(run(&exe, dir.path(), &bytes), (true, expected(&bytes)));
    // A bundle with memory pools: the C reader finds each tensor's pool.
    let (pc, pw) = stow_bundle::testing::sample_pooled();
    let pooled = to_bytes(&pc, &refs(&pw)).unwrap();
    let (ok, out) = run(&exe, dir.path(), &pooled);
    assert!(out.contains("pool 1 dram 64 64"), "{out}");
    assert_eq!((ok, out), (true, expected(&pooled)));
    // An input written in bands: its record has no bytes to bound, and
    // its bands name it with alias kind 5.
    let (rc, rw) = stow_bundle::testing::sample_rows();
    let rows = to_bytes(&rc, &refs(&rw)).unwrap();
    let (ok, out) = run(&exe, dir.path(), &rows);
    assert!(out.contains("alias 5 0"), "{out}");
    assert_eq!((ok, out), (true, expected(&rows)));
    // And it rejects a corrupted header.
    let mut bad = bytes.clone();
    bad[40] ^= 1;
    assert!(!run(&exe, dir.path(), &bad).0);

    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(32));
    runner
        .run(&arb_bundle(), |(c, w)| {
            let bytes = to_bytes(&c, &refs(&w)).unwrap();
            prop_assert_eq!(run(&exe, dir.path(), &bytes), (true, expected(&bytes)));
            Ok(())
        })
        .unwrap();
}

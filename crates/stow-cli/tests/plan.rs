//! `stow plan` on the shared traces: valid layouts, clear errors.

mod common;

use common::*;
use std::path::PathBuf;

fn shared(rel: &str) -> PathBuf {
    repo_root().join("../shared/data").join(rel)
}

#[test]
fn interval_trace_gets_a_valid_layout() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("a.csv");
    let input = shared("minimalloc-challenging/A.1048576.csv");
    let o = stow(&["plan", input.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("lower bound 1,048,576 B"),
        "{}",
        stdout(&o)
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("id,lower,upper,size,offset"));
    let rows: Vec<Vec<u64>> = lines
        .map(|l| l.split(',').map(|f| f.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 154);
    for (i, a) in rows.iter().enumerate() {
        for b in &rows[i + 1..] {
            let time = a[1] < b[2] && b[1] < a[2];
            let space = a[4] < b[4] + b[3] && b[4] < a[4] + a[3];
            assert!(!(time && space), "buffers {} and {} overlap", a[0], b[0]);
        }
    }
}

#[test]
fn conflict_trace_and_capacity() {
    let input = shared("seed-example/conflicts.csv");
    let o = stow(&["plan", input.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("8 buffers") && stdout(&o).contains("lower bound 43 B"),
        "{}",
        stdout(&o)
    );
    let o = stow(&["plan", input.to_str().unwrap(), "--capacity", "40"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("more than the capacity of 40"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bad_rows_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("bad.csv");
    let out = dir.path().join("out.csv");
    for (body, word) in [
        ("id,lower,upper,size\n0,0,4,16\n1,2,x,8\n", "bad.csv:3"),
        ("id,lower,upper,size\n0,5,4,16\n", "before lower"),
        ("id,size,conflicts\n1,5,2\n", "unknown id 2"),
        ("a,b\n", "neither"),
    ] {
        std::fs::write(&input, body).unwrap();
        let o = stow(&["plan", input.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert!(!o.status.success(), "{body}");
        assert!(stderr(&o).contains(word), "{body}: {}", stderr(&o));
        assert!(!out.exists());
    }
}

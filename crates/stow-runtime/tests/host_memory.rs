//! `Bundle::release_host_pages`: the weight pages leave the resident set,
//! and the weights stay readable and unchanged.
// Opens bundles from files (`Bundle::open`): a `std` feature API.
#![cfg(feature = "std")]

mod common;

use stow_bundle::testing::{refs, sample};
use stow_bundle::to_bytes;
use stow_runtime::Bundle;

/// File-backed resident memory of this process, in KiB (Linux only).
/// Anonymous memory other tests allocate in parallel does not count here.
fn rss_file_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("RssFile:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn released_weights_leave_the_resident_set_and_stay_readable() {
    // The sample with its "w" weight enlarged to 32 MiB.
    let (mut c, mut w) = sample();
    c.tensors[1].shape = vec![2048, 4096];
    c.tensors[1].size = 32 << 20;
    w[1] = (0..32u32 << 20).map(|i| (i % 251) as u8).collect();
    let (_dir, path) = common::write(&to_bytes(&c, &refs(&w)).unwrap());
    let b = Bundle::open(&path).unwrap();
    let weight: &[f32] = b.weight("w").unwrap();
    let bytes = b.weight_bytes(1).unwrap();
    let sum = |s: &[u8]| s.iter().map(|&x| u64::from(x)).sum::<u64>();
    let before_touch = rss_file_kib();
    let expected = sum(&w[1]);
    assert_eq!(sum(bytes), expected);
    let touched = rss_file_kib();
    b.release_host_pages().unwrap();
    let released = rss_file_kib();
    // Still the same bytes (faulted back in from the file).
    assert_eq!(sum(bytes), expected);
    assert_eq!(weight.len(), 8 << 20);
    b.verify_weights().unwrap();

    if let (Some(t0), Some(t1), Some(t2)) = (before_touch, touched, released) {
        eprintln!("RssFile: before touch {t0} KiB, touched {t1} KiB, released {t2} KiB");
        // Touching maps ~32 MiB; releasing gives most of it back.
        assert!(t1 >= t0 + 24 * 1024, "touching did not map the weights");
        assert!(t2 + 24 * 1024 <= t1, "release kept the weights resident");
    } else {
        eprintln!("note: no /proc/self/status RssFile; only correctness checked");
    }
}

#[test]
fn release_of_a_bundle_without_weights_is_a_no_op() {
    let (mut c, mut w) = sample();
    // Turn both weights into zero-element tensors.
    for i in [1, 3] {
        c.tensors[i].shape = vec![0];
        c.tensors[i].size = 0;
        w[i].clear();
    }
    let (_dir, path) = common::write(&to_bytes(&c, &refs(&w)).unwrap());
    let b = Bundle::open(&path).unwrap();
    b.release_host_pages().unwrap();
    assert_eq!(b.weight::<f32, _>("w").unwrap(), &[] as &[f32]);
}

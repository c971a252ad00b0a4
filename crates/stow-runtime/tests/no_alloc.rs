//! After setup, `Session::run` allocates nothing, on one thread or with
//! workers: a counting global allocator (which sees every thread) watches
//! runs of every testdata model, with one arena and with two memory
//! pools. This file holds one
//! test so that no other test thread allocates while it counts.
// Opens bundles from files (`Bundle::open`): a `std` feature API.
#![cfg(feature = "std")]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use stow_runtime::{Bundle, Session};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; the
// counter has no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    f();
    ALLOCATIONS.load(Ordering::SeqCst) - before
}

#[test]
fn a_run_allocates_nothing() {
    // The counter sees allocations (so a zero below means something).
    assert!(allocations_during(|| drop(std::hint::black_box(vec![1u8; 64]))) >= 1);

    let Some(stow) = common::stow_bin("a_run_allocates_nothing") else {
        return;
    };
    let one = tempfile::tempdir().unwrap();
    let two = tempfile::tempdir().unwrap();
    // Each model with one arena, and split across a small fast pool and an
    // unbounded slow one (a run then reads and writes two buffers).
    let variants: [(&std::path::Path, &[&str]); 2] = [
        (one.path(), &[]),
        (two.path(), &["--pool", "sram=16384", "--pool", "dram"]),
    ];
    for (model, (dir, flags)) in common::FIXED_SHAPE_MODELS
        .iter()
        .flat_map(|m| variants.iter().map(move |v| (m, v)))
    {
        let path = common::compile_with(&stow, model, dir, flags);
        let bundle = Bundle::open(&path).unwrap();
        assert_eq!(bundle.contents().pool_count(), 1 + flags.len() / 3);
        for threads in [1, 2] {
            let mut session = Session::with_threads(&bundle, threads).unwrap();
            let ids: Vec<u32> = bundle.inputs().map(|t| t.id).collect();
            for id in ids {
                for (i, b) in session.input_bytes_mut(&id).unwrap().iter_mut().enumerate() {
                    // Small f32 values in every input (any bytes are valid).
                    *b = if i % 4 == 3 { 0x3e } else { (i * 37) as u8 };
                }
            }
            let n = allocations_during(|| session.run().unwrap());
            assert_eq!(
                n, 0,
                "{model} {flags:?}, {threads} threads: {n} allocations during a run"
            );
            let n = allocations_during(|| session.run().unwrap());
            assert_eq!(n, 0, "{model}: {n} allocations during a second run");
        }
    }
}

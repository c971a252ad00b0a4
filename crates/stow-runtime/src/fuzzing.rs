//! Fuzzing harness (feature `fuzzing`): parse arbitrary bytes as a bundle
//! and, when they pass, walk everything the reader promises and check the
//! promises. Shared by the `cargo fuzz` target `fuzz/fuzz_targets/
//! bundle_open.rs` and the bounded mutation test `tests/fuzz_walk.rs`, so
//! the same walk runs on stable in CI.
//!
//! A panic here is a finding: either the reader panicked on hostile bytes,
//! or it accepted bytes that break a documented guarantee.

use crate::lookup::{self, TensorKey};
use alloc::{format, string::ToString};
use stow_bundle::{BundleView, DType, Region};

/// What one walk saw (for tests that want to know a mutation was parsed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Walk {
    /// The bytes parsed as a bundle.
    pub valid: bool,
    /// Tensors walked.
    pub tensors: usize,
    /// The weight checksum matched.
    pub weights_ok: bool,
}

/// The fuzz entry point: walks `data` as given, then (when it holds a
/// header) a copy with every checksum recomputed, so that mutations reach
/// the checks behind the checksums instead of all failing there.
pub fn run(data: &[u8]) -> (Walk, Walk) {
    let raw = open_and_walk(data);
    let mut sealed = data.to_vec();
    if sealed.len() >= stow_bundle::format::HEADER_LEN {
        stow_bundle::testing::reseal(&mut sealed);
    }
    (raw, open_and_walk(&sealed))
}

/// Parses `bytes` and walks every tensor, weight, operator and lookup,
/// asserting the reader's guarantees (FORMAT.md, "Validation").
pub fn open_and_walk(bytes: &[u8]) -> Walk {
    let view = match BundleView::parse(bytes) {
        Ok(v) => v,
        Err(e) => {
            // Error messages are built from hostile fields too.
            let _ = e.to_string();
            return Walk::default();
        }
    };
    let h = view.header();
    let c = view.contents();
    assert_eq!(h.file_len, bytes.len() as u64);
    assert_eq!(h.tensor_count as usize, c.tensors.len());
    assert_eq!(h.op_count as usize, c.ops.len());
    assert_eq!(
        (h.arena_bytes, h.arena_align),
        (c.arena_bytes, c.arena_align)
    );
    assert!(c.arena_align.is_power_of_two());
    let mut end = 0;
    for s in view.sections() {
        assert!(s.offset >= end, "sections overlap");
        end = s.offset + s.length;
        assert!(end <= h.file_len);
        let _ = s.kind_name();
    }
    let weights = view.weight_section_range();
    assert!(weights.end <= bytes.len());
    let exists = |id: u32| (id as usize) < c.tensors.len();
    for (i, t) in c.tensors.iter().enumerate() {
        let id = i as u32;
        assert_eq!(t.shape_bytes(), Some(t.size), "tensor {id}: size");
        assert!(t.first_step <= t.last_step);
        if let Some((_, of)) = t.alias_of {
            assert!(exists(of), "tensor {id}: alias of a missing tensor");
        }
        match t.region {
            Region::Weights => {
                let w = view.weight_bytes(id).expect("a weight has bytes");
                assert_eq!(w.len() as u64, t.size);
                assert_eq!(t.offset % 64, 0);
                typed(w, t.dtype);
            }
            Region::Rows => assert!(view.weight_bytes(id).is_none()),
            Region::Arena => {
                assert!(view.weight_bytes(id).is_none());
                let end = t.offset.checked_add(t.size).expect("offset + size");
                assert!(end <= c.arena_bytes, "tensor {id}: outside the arena");
            }
        }
        // Lookups by id and name never panic; a unique name finds itself.
        assert_eq!(id.resolve(c), Ok(id));
        match t.name.as_str().resolve(c) {
            Ok(found) => assert_eq!(found, id),
            Err(e) => assert!(matches!(e, lookup::LookupError::AmbiguousName { .. })),
        }
    }
    for &id in c.inputs.iter().chain(&c.outputs) {
        assert!(exists(id), "graph input/output {id} missing");
    }
    for op in &c.ops {
        for &id in op.inputs.iter().chain(&op.outputs) {
            assert!(exists(id), "op {} uses missing tensor {id}", op.name);
        }
    }
    let _ = format!("{view:?}");
    Walk {
        valid: true,
        tensors: c.tensors.len(),
        weights_ok: view.verify_weights().is_ok(),
    }
}

/// Views weight bytes as their element type, as `Bundle::weight` does;
/// the buffer may be unaligned here (fuzzers pass any address), which must
/// be an error, not a panic.
fn typed(w: &[u8], dtype: DType) {
    fn sum<T: bytemuck::Pod>(w: &[u8]) -> usize {
        bytemuck::try_cast_slice::<u8, T>(w).map_or(0, |s| s.len())
    }
    let n = match dtype.size_bytes() {
        1 => sum::<u8>(w),
        2 => sum::<u16>(w),
        4 => sum::<f32>(w),
        _ => sum::<u64>(w),
    };
    assert!(n == 0 || n as u64 * dtype.size_bytes() == w.len() as u64);
}

//! Writer → reader round trips: contents and weight bytes come back equal,
//! weights are 64-aligned zero-copy slices, output is deterministic.

use proptest::prelude::*;
use stow_bundle::format::{kind, WEIGHT_ALIGN};
use stow_bundle::testing::{self, arb_bundle, refs, sample, with_assigned_offsets};
use stow_bundle::{to_bytes, BundleView, Contents, OwnedBundle, Region};

fn check_round_trip(c: &Contents, w: &[Vec<u8>]) {
    let bytes = to_bytes(c, &refs(w)).unwrap();
    let view = BundleView::parse(&bytes).unwrap();
    view.verify_weights().unwrap();
    assert_eq!(view.contents(), &with_assigned_offsets(c));
    for (i, t) in c.tensors.iter().enumerate() {
        let got = view.weight_bytes(i as u32);
        match t.region {
            Region::Weights => {
                let got = got.expect("weight bytes");
                assert_eq!(got, &w[i][..]);
                let from_start = got.as_ptr() as usize - bytes.as_ptr() as usize;
                assert_eq!(from_start as u64 % WEIGHT_ALIGN, 0, "tensor {i}");
            }
            Region::Arena | Region::Rows => assert!(got.is_none()),
        }
    }
    assert!(view.weight_bytes(c.tensors.len() as u32).is_none());
    let h = view.header();
    assert_eq!(h.file_len, bytes.len() as u64);
    assert_eq!(h.tensor_count as usize, c.tensors.len());
    assert_eq!(h.op_count as usize, c.ops.len());
    assert_eq!(
        (h.arena_bytes, h.arena_align),
        (c.arena_bytes, c.arena_align)
    );
    let kinds: Vec<u32> = view.sections().iter().map(|s| s.kind).collect();
    if c.pools.is_empty() {
        assert_eq!(kinds, testing::KINDS);
        assert_eq!(h.flags, 0);
    } else {
        // The pool list sits just before the weights, which end the file.
        let mut expected = testing::KINDS.to_vec();
        expected.insert(expected.len() - 1, kind::POOLS);
        assert_eq!(kinds, expected);
        assert_eq!(h.flags, stow_bundle::format::FLAG_POOLS);
    }
    assert_eq!(to_bytes(c, &refs(w)).unwrap(), bytes, "deterministic");
}

#[test]
fn sample_round_trips() {
    let (c, w) = sample();
    check_round_trip(&c, &w);
}

#[test]
fn pooled_sample_round_trips() {
    let (c, w) = testing::sample_pooled();
    check_round_trip(&c, &w);
    let bytes = to_bytes(&c, &refs(&w)).unwrap();
    let view = BundleView::parse(&bytes).unwrap();
    let out = c.outputs[0] as usize;
    assert_eq!(view.contents().tensors[out].pool, 1);
    assert_eq!(view.contents().pool_count(), 2);
    assert_eq!(view.contents().pool_sizes(), vec![(128, 64), (64, 64)]);
    // The record carries the pool in the high half of `region`.
    let records = &bytes[view.sections()[0].offset as usize..];
    let at = out * stow_bundle::format::TENSOR_RECORD_LEN + 12;
    let region = u32::from_le_bytes(records[at..at + 4].try_into().unwrap());
    assert_eq!(region, 1 | 1 << 16);
}

#[test]
fn empty_model_round_trips() {
    let c = Contents {
        arena_align: 1,
        ..Default::default()
    };
    check_round_trip(&c, &[]);
}

#[test]
fn writer_ignores_given_weight_offsets() {
    let (mut c, w) = sample();
    let before = to_bytes(&c, &refs(&w)).unwrap();
    c.tensors[1].offset = 12345;
    c.tensors[3].offset = 7;
    assert_eq!(to_bytes(&c, &refs(&w)).unwrap(), before);
}

#[test]
fn owned_bundle_gives_the_same_view() {
    let bytes = testing::sample_bytes();
    let parsed = BundleView::parse(&bytes).unwrap();
    let owned = OwnedBundle::new(bytes.clone()).unwrap();
    let view = owned.view();
    assert_eq!(view.contents(), parsed.contents());
    assert_eq!(view.sections(), parsed.sections());
    assert_eq!(view.header(), parsed.header());
    assert_eq!(view.weight_bytes(1), parsed.weight_bytes(1));
    assert_eq!(
        view.weight_section_range(),
        testing::section_range(&bytes, kind::WEIGHTS)
    );
    view.verify_weights().unwrap();
    assert!(format!("{owned:?}").contains("tensors: 5"));
    assert_eq!(owned.into_inner(), bytes);
    assert!(OwnedBundle::new(vec![0u8; 10]).is_err());
}

#[test]
fn section_names() {
    let bytes = testing::sample_bytes();
    let view = BundleView::parse(&bytes).unwrap();
    let names: Vec<&str> = view.sections().iter().map(|s| s.kind_name()).collect();
    assert_eq!(
        names,
        ["tensors", "strings", "shapes", "metadata", "weights"]
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_valid_input_round_trips((c, w) in arb_bundle()) {
        check_round_trip(&c, &w);
    }
}

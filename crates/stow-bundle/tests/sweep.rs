//! Hostile bytes in bulk: every truncation and every single-bit flip of a
//! valid bundle is rejected (flips in the weights by `verify_weights`),
//! and no input at all makes the reader panic.

use proptest::prelude::*;
use stow_bundle::format::kind;
use stow_bundle::testing::{self, arb_bundle, refs};
use stow_bundle::{to_bytes, BundleError, BundleView};

/// Every prefix of `bytes` is rejected.
fn check_truncations(bytes: &[u8]) {
    for len in 0..bytes.len() {
        assert!(
            BundleView::parse(&bytes[..len]).is_err(),
            "truncated to {len} of {} bytes was accepted",
            bytes.len()
        );
    }
}

/// Every single-bit flip is rejected: by `parse` outside the weight
/// section (everything there is checksummed or must be zero padding), by
/// `verify_weights` inside it.
fn check_flips(bytes: &[u8]) {
    let weights = testing::section_range(bytes, kind::WEIGHTS);
    let mut b = bytes.to_vec();
    for byte in 0..bytes.len() {
        for bit in 0..8 {
            b[byte] ^= 1 << bit;
            let result = BundleView::parse(&b);
            if weights.contains(&byte) {
                let view = result.unwrap_or_else(|e| {
                    panic!("flip in the weights at {byte}.{bit} failed parse: {e}")
                });
                assert!(
                    matches!(
                        view.verify_weights(),
                        Err(BundleError::Checksum {
                            what: "weights",
                            ..
                        })
                    ),
                    "flip at {byte}.{bit} passed the weight check"
                );
            } else {
                assert!(
                    result.is_err(),
                    "flip at byte {byte} bit {bit} was accepted"
                );
            }
            b[byte] ^= 1 << bit;
        }
    }
}

#[test]
fn every_truncation_of_the_sample_is_rejected() {
    check_truncations(&testing::sample_bytes());
}

#[test]
fn every_bit_flip_of_the_sample_is_rejected() {
    check_flips(&testing::sample_bytes());
}

/// Uses a parsed view the way a caller would, so a view that is wrongly
/// accepted cannot panic later either.
fn exercise(view: &BundleView<'_>) {
    let c = view.contents();
    for id in 0..=c.tensors.len() as u32 {
        let _ = view.weight_bytes(id);
    }
    let _ = (view.header(), view.sections(), view.verify_weights());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn truncations_and_flips_of_any_bundle_are_rejected((c, w) in arb_bundle()) {
        let bytes = to_bytes(&c, &refs(&w)).unwrap();
        check_truncations(&bytes);
        check_flips(&bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        if let Ok(view) = BundleView::parse(&bytes) {
            exercise(&view);
        }
    }

    #[test]
    fn arbitrary_bytes_behind_a_valid_header_never_panic(
        tail in proptest::collection::vec(any::<u8>(), 0..1024),
        sections in 0u32..20,
    ) {
        // A header that passes its own checks, so the section table and
        // everything behind it see random input.
        let mut bytes = testing::sample_bytes()[..64].to_vec();
        bytes.extend_from_slice(&tail);
        let mut h: stow_bundle::format::Header = bytemuck::pod_read_unaligned(&bytes[..64]);
        h.file_len = bytes.len() as u64;
        h.section_count = sections;
        bytes[..64].copy_from_slice(bytemuck::bytes_of(&h));
        testing::reseal(&mut bytes);
        if let Ok(view) = BundleView::parse(&bytes) {
            exercise(&view);
        }
    }

    #[test]
    fn resealed_random_edits_never_panic(
        (c, w) in arb_bundle(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        // Resealing lets random edits past the checksums into the record,
        // metadata and layout checks.
        let mut bytes = to_bytes(&c, &refs(&w)).unwrap();
        for (at, value) in edits {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        testing::reseal(&mut bytes);
        if let Ok(view) = BundleView::parse(&bytes) {
            exercise(&view);
        }
    }
}

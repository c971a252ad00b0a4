//! Damaged models: truncated at many lengths and with single bits flipped.
//! Every load either succeeds or returns an error, no panic escapes, and
//! what loads also plans.

use std::path::Path;
use stow_onnx::{load, LoadOptions};

fn model_bytes(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(name);
    std::fs::read(path).unwrap()
}

/// Loads `bytes` from a file in `dir`; returns whether it loaded.
fn try_load(dir: &Path, bytes: &[u8], what: &str) -> bool {
    let path = dir.join("model.onnx");
    std::fs::write(&path, bytes).unwrap();
    let outcome = std::panic::catch_unwind(|| {
        load(&path, &LoadOptions::default()).map(|graph| {
            let (problem, _) = graph.problem(64);
            let options = stow_plan::PlanOptions {
                strategy: stow_plan::Strategy::GreedySize,
                ..Default::default()
            };
            stow_plan::plan(&problem, &options).map(|_| ())
        })
    });
    match outcome {
        Ok(Ok(planned)) => {
            planned.unwrap_or_else(|e| panic!("{what}: loaded but did not plan: {e}"));
            true
        }
        Ok(Err(e)) => {
            let text = e.to_string();
            assert!(!text.is_empty(), "{what}: empty error");
            false
        }
        Err(_) => panic!("{what}: a panic escaped the frontend"),
    }
}

/// Deterministic positions spread over the file (SplitMix64).
fn positions(len: usize, count: usize, seed: u64) -> Vec<usize> {
    let mut x = seed;
    (0..count)
        .map(|_| {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) % len as u64) as usize
        })
        .collect()
}

#[test]
fn truncated_models_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["mlp.onnx", "two_branch.onnx"] {
        let bytes = model_bytes(name);
        assert!(try_load(dir.path(), &bytes, name), "{name} itself loads");
        for cut in positions(bytes.len(), 48, 1) {
            try_load(dir.path(), &bytes[..cut], &format!("{name} cut at {cut}"));
        }
    }
}

#[test]
fn models_with_a_flipped_bit_load_or_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["mlp.onnx", "two_branch.onnx"] {
        let bytes = model_bytes(name);
        let mut loaded = 0;
        let spots = positions(bytes.len(), 96, 7);
        for (k, &at) in spots.iter().enumerate() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 1 << (k % 8);
            loaded += usize::from(try_load(
                dir.path(),
                &damaged,
                &format!("{name} bit {} of byte {at}", k % 8),
            ));
        }
        // Most flips land in weight bytes, which change values, not structure.
        assert!(loaded > 0, "{name}: no damaged variant loaded at all");
    }
}

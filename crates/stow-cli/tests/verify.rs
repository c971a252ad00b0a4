//! `stow verify` passes on real plans and fails, naming the culprit, on
//! plans and weights that were broken on purpose.

mod common;

use common::*;
use std::path::Path;
use stow_bundle::{BundleView, Region};

fn verify(model: &Path, bundle: &Path) -> std::process::Output {
    let mut args = vec![
        "verify".to_string(),
        model.display().to_string(),
        bundle.display().to_string(),
    ];
    args.extend(model_args(model));
    stow(&args.iter().map(|s| s.as_str()).collect::<Vec<_>>())
}

#[test]
fn every_testdata_model_verifies_bit_exact() {
    let dir = tempfile::tempdir().unwrap();
    for model in testdata_models() {
        for strategy in ["naive", "greedy-size"] {
            let out = dir.path().join("v.stow");
            compile_and_inspect(&model, &out, &["--strategy", strategy]);
            let o = verify(&model, &out);
            assert!(
                o.status.success(),
                "{} ({strategy}): {}",
                model.display(),
                stderr(&o)
            );
            assert!(stdout(&o).starts_with("PASS"), "{}", stdout(&o));
        }
    }
}

/// A weight packed with the shallow depth block of a step with no room
/// for scratch (so the bundle plans no scratch at all) is unpacked with
/// the bundle's depth block, not the usual one.
#[test]
fn packed_weight_of_a_step_without_scratch_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("regress/conv_packed_without_scratch/model.onnx");
    let out = dir.path().join("v.stow");
    let json = compile_and_inspect(&model, &out, &[]);
    // One Conv, its weight packed 64 deep (not 130), and no scratch output.
    let packed = packed_depth_blocks(&json);
    assert_eq!(packed, [64], "{json}");
    assert_eq!(json["ops"][0]["outputs"].as_array().unwrap().len(), 1);
    let o = verify(&model, &out);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("PASS"), "{}", stdout(&o));
}

#[test]
fn overlapping_tensor_is_caught_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("residual_cnn.onnx");
    let out = dir.path().join("bad.stow");
    compile_and_inspect(&model, &out, &[]);
    let mut victim = String::new();
    rewrite(&out, |c| {
        // Two activations of equal size whose lifetimes overlap: put the
        // later one onto the earlier one.
        let arena: Vec<usize> = (0..c.tensors.len())
            .filter(|&i| c.tensors[i].region == Region::Arena)
            .collect();
        let (a, b) = arena
            .iter()
            .flat_map(|&a| arena.iter().map(move |&b| (a, b)))
            .find(|&(a, b)| {
                let (ta, tb) = (&c.tensors[a], &c.tensors[b]);
                a != b
                    && ta.size == tb.size
                    && ta.first_step < tb.first_step
                    && tb.first_step < ta.last_step
                    && ta.offset != tb.offset
            })
            .expect("two overlapping activations");
        victim = c.tensors[a].name.clone();
        c.tensors[b].offset = c.tensors[a].offset;
    });
    let o = verify(&model, &out);
    assert!(!o.status.success(), "verify should fail");
    let err = stderr(&o);
    assert!(
        err.contains("FAIL") && err.contains(&format!("`{victim}`")),
        "should name {victim}: {err}"
    );
    assert!(err.contains("step"), "{err}");
}

#[test]
fn corrupted_weight_byte_is_caught_and_named() {
    corrupted_weight_is_caught("mlp.onnx", false);
}

/// A packed weight is unpacked before it is compared with the model's, so
/// a flipped byte in it is caught and named too.
#[test]
fn corrupted_packed_weight_byte_is_caught_and_named() {
    corrupted_weight_is_caught("transformer_block.onnx", true);
}

fn corrupted_weight_is_caught(model: &str, packed: bool) {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata(model);
    let out = dir.path().join("bad.stow");
    compile_and_inspect(&model, &out, &[]);
    let mut bytes = std::fs::read(&out).unwrap();
    let (range, name) = {
        let view = BundleView::parse(&bytes).unwrap();
        let (id, t) = view
            .contents()
            .tensors
            .iter()
            .enumerate()
            .filter(|(id, t)| {
                t.region == Region::Weights
                    && view.contents().packed_reader(*id as u32).is_some() == packed
            })
            .max_by_key(|(_, t)| t.size)
            .unwrap();
        let start =
            view.weight_bytes(id as u32).unwrap().as_ptr() as usize - bytes.as_ptr() as usize;
        (start..start + t.size as usize, t.name.clone())
    };
    bytes[range.start + 5] ^= 0x10;
    std::fs::write(&out, &bytes).unwrap();
    let o = verify(&model, &out);
    assert!(!o.status.success(), "verify should fail");
    let err = stderr(&o);
    assert!(
        err.contains(&format!("weight `{name}`")),
        "should name {name}: {err}"
    );
    let o = stow(&["inspect", "--check", out.to_str().unwrap()]);
    assert!(
        !o.status.success() && stderr(&o).contains("weights checksum"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bundle_of_another_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mlp.stow");
    compile_and_inspect(&testdata("mlp.onnx"), &out, &[]);
    let o = verify(&testdata("residual_cnn.onnx"), &out);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("does not match the model"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn npz_inputs_are_read_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.stow");
    let model = testdata("two_branch.onnx");
    compile_and_inspect(&model, &out, &[]);
    let npz = testdata("two_branch.inputs.npz");
    let o = stow(&[
        "verify",
        model.to_str().unwrap(),
        out.to_str().unwrap(),
        "--inputs",
        npz.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The mlp expects `features`, which the archive does not hold.
    let mlp = dir.path().join("m.stow");
    compile_and_inspect(&testdata("mlp.onnx"), &mlp, &[]);
    let o = stow(&[
        "verify",
        testdata("mlp.onnx").to_str().unwrap(),
        mlp.to_str().unwrap(),
        "--inputs",
        npz.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no array named `features`"),
        "{}",
        stderr(&o)
    );
}

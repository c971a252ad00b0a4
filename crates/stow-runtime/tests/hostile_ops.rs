//! Setup checks every attribute and shape a kernel relies on: bundles whose
//! operator attributes were altered (valid bundles otherwise) are refused
//! by `Session::new` or run to completion, and a kernel never panics (a
//! panic would surface as `RunError::Panicked`).
// Opens bundles from files (`Bundle::open`): a `std` feature API.
#![cfg(feature = "std")]

mod common;

use stow_bundle::{AttrValue, BundleView, Contents};
use stow_runtime::{Bundle, RunError, Session};

fn write(path: &std::path::Path, contents: &Contents, weights: &[Vec<u8>]) {
    let refs: Vec<&[u8]> = weights.iter().map(|w| w.as_slice()).collect();
    std::fs::write(path, stow_bundle::to_bytes(contents, &refs).unwrap()).unwrap();
}

#[test]
fn altered_attributes_are_refused_or_run_without_panics() {
    let Some(stow) = common::stow_bin("altered_attributes") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let values = [0i64, 1, 2, 3, 7, -1, 1 << 40, i64::MAX];
    let (mut refused, mut ran) = (0, 0);
    for model in common::FIXED_SHAPE_MODELS {
        let path = common::compile(&stow, model, dir.path());
        let bytes = std::fs::read(&path).unwrap();
        let view = BundleView::parse(&bytes).unwrap();
        let original = view.contents().clone();
        let weights: Vec<Vec<u8>> = (0..original.tensors.len() as u32)
            .map(|id| {
                view.weight_bytes(id)
                    .map(|w| w.to_vec())
                    .unwrap_or_default()
            })
            .collect();
        let altered = dir.path().join("altered.stow");
        for (step, op) in original.ops.iter().enumerate() {
            for (a, (name, value)) in op.attributes.iter().enumerate() {
                let slots = match value {
                    AttrValue::Int(_) => 1,
                    AttrValue::Ints(v) => v.len(),
                    _ => 0,
                };
                for slot in 0..slots {
                    for &x in &values {
                        let mut c = original.clone();
                        match &mut c.ops[step].attributes[a].1 {
                            AttrValue::Int(v) => *v = x,
                            AttrValue::Ints(v) => v[slot] = x,
                            _ => unreachable!(),
                        }
                        write(&altered, &c, &weights);
                        let bundle = Bundle::open(&altered).unwrap();
                        let Ok(mut session) = Session::new(&bundle) else {
                            refused += 1;
                            continue;
                        };
                        match session.run() {
                            Err(RunError::Panicked { step, name: op_name }) => panic!(
                                "{model}: attribute `{name}` = {x} (slot {slot}) made step {step} `{op_name}` ({}) panic",
                                op.op_type
                            ),
                            _ => ran += 1,
                        }
                    }
                }
            }
        }
    }
    // Both outcomes occur: the checks refuse some, others still run.
    assert!(refused > 100 && ran > 100, "refused {refused}, ran {ran}");
}

/// A depthwise convolution marked in place whose output no longer starts
/// at its input (or whose input was moved) is refused at setup: the
/// kernel would read input planes it had already overwritten.
#[test]
fn depthwise_in_place_with_moved_output_is_refused() {
    let Some(stow) = common::stow_bin("depthwise_in_place_moved") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = common::compile(&stow, "depthwise_block", dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let view = BundleView::parse(&bytes).unwrap();
    let original = view.contents().clone();
    let weights: Vec<Vec<u8>> = (0..original.tensors.len() as u32)
        .map(|id| {
            view.weight_bytes(id)
                .map(|w| w.to_vec())
                .unwrap_or_default()
        })
        .collect();
    let in_place: Vec<usize> = (0..original.ops.len())
        .filter(|&s| {
            original.ops[s]
                .attributes
                .iter()
                .any(|(k, v)| k == "stow.in_place" && *v == AttrValue::Int(1))
        })
        .collect();
    assert_eq!(in_place.len(), 2, "the model's two in-place steps");
    let altered = dir.path().join("moved.stow");
    for &step in &in_place {
        let out = original.ops[step].outputs[0] as usize;
        let x = original.ops[step].inputs[0] as usize;
        assert_eq!(original.tensors[out].offset, original.tensors[x].offset);
        let mut c = original.clone();
        c.tensors[out].offset += 64;
        write(&altered, &c, &weights);
        let bundle = Bundle::open(&altered).unwrap();
        assert!(Session::new(&bundle).is_err(), "step {step}");
        // The unaltered bundle runs.
        write(&altered, &original, &weights);
        let bundle = Bundle::open(&altered).unwrap();
        Session::new(&bundle).unwrap().run().unwrap();
    }
}

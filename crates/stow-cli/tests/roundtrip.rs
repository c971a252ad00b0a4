//! compile → open: every tensor record matches the planner's output, and
//! weights match what the frontend read from the model.

mod common;

use common::*;
use prost::Message;
use std::collections::HashMap;
use stow_bundle::Region;
use stow_onnx::{load, LoadOptions};
use stow_plan::{plan, PlanOptions, Strategy};

fn initializer_bytes(model: &std::path::Path) -> HashMap<String, Vec<u8>> {
    let proto = tract_onnx::pb::ModelProto::decode(&std::fs::read(model).unwrap()[..]).unwrap();
    let mut out = HashMap::new();
    for init in proto.graph.unwrap().initializer {
        let bytes = if !init.raw_data.is_empty() {
            init.raw_data.to_vec()
        } else if !init.float_data.is_empty() {
            init.float_data
                .iter()
                .flat_map(|f| f.to_le_bytes())
                .collect()
        } else if !init.int64_data.is_empty() {
            init.int64_data
                .iter()
                .flat_map(|f| f.to_le_bytes())
                .collect()
        } else {
            continue;
        };
        out.insert(init.name.clone(), bytes);
    }
    out
}

#[test]
fn bundle_records_match_plan_and_weights_match_model() {
    let dir = tempfile::tempdir().unwrap();
    let mut matched_initializers = 0;
    for model in testdata_models() {
        let out = dir.path().join("r.stow");
        let extra = model_args(&model);
        let mut args = vec![
            "compile".to_string(),
            model.display().to_string(),
            "-o".into(),
            out.display().to_string(),
        ];
        args.extend(extra.iter().cloned());
        args.extend(["--strategy".into(), "greedy-size".into()]);
        let o = stow(&args.iter().map(|s| s.as_str()).collect::<Vec<_>>());
        assert!(o.status.success(), "{}", stderr(&o));

        let dims = if extra.is_empty() {
            vec![]
        } else {
            vec![("N".to_string(), 2)]
        };
        let mut graph = load(
            &model,
            &LoadOptions {
                inputs: vec![],
                dims,
                ..Default::default()
            },
        )
        .unwrap();
        // What `stow compile` plans by default: packed weights and kernel
        // scratch for 1 thread.
        stow_compile::packing::mark_packed_weights(&mut graph).unwrap();
        stow_compile::plan_scratch(&mut graph, 1).unwrap();
        let layouts = stow_compile::packing::packed_layouts(&graph).unwrap();
        let (problem, buffer_of) = graph.problem(64);
        let expected = plan(
            &problem,
            &PlanOptions {
                strategy: Strategy::GreedySize,
                ..Default::default()
            },
        )
        .unwrap();

        let bundle = stow_runtime::Bundle::open(&out).unwrap();
        bundle.verify_weights().unwrap();
        let c = bundle.contents();
        assert_eq!(c.tensors.len(), graph.tensors.len());
        assert_eq!(c.arena_bytes, expected.arena_bytes);
        assert_eq!(c.provenance.lower_bound_bytes, expected.lower_bound);
        for (tid, buffer) in buffer_of.iter().enumerate() {
            let Some(buffer) = *buffer else { continue };
            let rec = &c.tensors[tid];
            let info = &graph.tensors[tid];
            assert_eq!(rec.region, Region::Arena);
            assert_eq!(
                rec.offset,
                expected.offsets[buffer] + graph.offset_in_buffer(tid),
                "{}",
                info.name
            );
            assert_eq!(rec.size, info.bytes);
            assert_eq!(rec.name, info.name);
            assert_eq!(
                (rec.first_step, rec.last_step),
                (info.first_step, info.last_step)
            );
        }
        let inits = initializer_bytes(&model);
        for (tid, info) in graph.tensors.iter().enumerate() {
            if c.tensors[tid].region != Region::Weights {
                continue;
            }
            let in_file = bundle.weight_bytes(tid as u32).unwrap();
            assert_eq!(
                in_file.as_ptr() as usize % 64,
                0,
                "{} is not 64-aligned in the mapping",
                info.name
            );
            // A packed weight is the model's weight permuted.
            let unpacked = layouts[tid]
                .as_ref()
                .map(|layout| stow_compile::packing::unpacked_bytes(in_file, layout).unwrap());
            let stored = unpacked.as_deref().unwrap_or(in_file);
            assert_eq!(stored, graph.weight_bytes(tid).unwrap(), "{}", info.name);
            // tract keeps an initializer's name, sometimes with a `.N` suffix,
            // when it stores the value unchanged.
            let base = info
                .name
                .rsplit_once('.')
                .filter(|(_, n)| n.parse::<u32>().is_ok())
                .map(|(b, _)| b);
            let original = inits
                .get(&info.name)
                .or_else(|| base.and_then(|b| inits.get(b)));
            if let Some(original) = original.filter(|o| o.len() == stored.len()) {
                assert_eq!(
                    stored,
                    &original[..],
                    "{} differs from the ONNX initializer",
                    info.name
                );
                matched_initializers += 1;
            }
        }
    }
    assert!(
        matched_initializers > 0,
        "no weight kept its ONNX initializer name; the comparison tested nothing"
    );
}

/// The runtime's typed view of a compiled weight equals the ONNX
/// initializer it came from (tract keeps `mlp.onnx`'s first Gemm weight
/// `w_1` as is and names it `w_1.0`).
#[test]
fn typed_weight_of_compiled_model_equals_onnx_initializer() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mlp.stow");
    let model = testdata("mlp.onnx");
    let o = stow(&[
        "compile",
        model.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let b = stow_runtime::Bundle::open(&out).unwrap();
    b.verify_weights().unwrap();

    let expected: Vec<f32> = initializer_bytes(&model)["w_1"]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(expected.len(), 128 * 64);
    let w: &[f32] = b.weight("w_1.0").unwrap();
    assert_eq!(w, &expected[..]);
    assert_eq!(b.tensor("w_1.0").unwrap().shape(), &[128, 64]);
}

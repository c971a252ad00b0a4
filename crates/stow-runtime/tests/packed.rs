//! Bundles whose convolution and product weights are stored packed (the
//! default of `stow compile`): each packed weight is its row-major
//! weight permuted, and the bundle runs bit for bit like the same model
//! compiled with `--no-pack-weights`, on one thread and on two.
#![cfg(feature = "std")]

mod common;

use stow_bundle::format::FLAG_PACKED;
use stow_bundle::Region;
use stow_runtime::kernels::prepacked::Side;
use stow_runtime::{Bundle, Session};

fn outputs(bundle: &Bundle, threads: usize) -> Vec<Vec<u8>> {
    let mut session = Session::with_threads(bundle, threads).unwrap();
    let ids: Vec<u32> = bundle.inputs().map(|t| t.id).collect();
    for id in ids {
        for (i, b) in session.input_bytes_mut(&id).unwrap().iter_mut().enumerate() {
            *b = if i % 4 == 3 { 0x3d } else { (i * 53) as u8 };
        }
    }
    session.run().unwrap();
    common::output_bytes(bundle, &session)
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

#[test]
fn packed_bundles_run_bit_for_bit_like_row_major_ones() {
    let Some(stow) = common::stow_bin("packed_bundles_run_bit_for_bit_like_row_major_ones") else {
        return;
    };
    let packed_dir = tempfile::tempdir().unwrap();
    let plain_dir = tempfile::tempdir().unwrap();
    let mut sides = Vec::new();
    for model in common::FIXED_SHAPE_MODELS {
        let packed = Bundle::open(&common::compile(&stow, model, packed_dir.path())).unwrap();
        let plain = Bundle::open(&common::compile_with(
            &stow,
            model,
            plain_dir.path(),
            &["--no-pack-weights"],
        ))
        .unwrap();
        assert_eq!(plain.header().flags & FLAG_PACKED, 0, "{model}");
        let (pc, rc) = (packed.contents(), plain.contents());
        assert_eq!(pc.tensors.len(), rc.tensors.len(), "{model}");
        let mut count = 0;
        for (id, t) in pc.tensors.iter().enumerate() {
            if t.region != Region::Weights {
                continue;
            }
            let id = id as u32;
            let (stored, row_major) = (
                packed.weight_bytes(id).unwrap(),
                plain.weight_bytes(id).unwrap(),
            );
            assert_eq!(stored.len(), row_major.len(), "{model}: weight {}", t.name);
            let Some((op, kc)) = pc.packed_reader(id) else {
                assert_eq!(stored, row_major, "{model}: row-major weight {}", t.name);
                continue;
            };
            count += 1;
            // The stored weight is the row-major one permuted, and the
            // layout the runtime reads takes it back.
            let inputs: Vec<_> = op
                .inputs
                .iter()
                .map(|&i| {
                    (
                        pc.tensors[i as usize].dtype,
                        pc.tensors[i as usize].shape.clone(),
                    )
                })
                .collect();
            // The step's last output is its kernel scratch, if planned.
            let scratch = usize::from(stow_runtime::kernels::planned_scratch_threads(op) > 0);
            let outputs: Vec<_> = op.outputs[..op.outputs.len() - scratch]
                .iter()
                .map(|&i| {
                    (
                        pc.tensors[i as usize].dtype,
                        pc.tensors[i as usize].shape.clone(),
                    )
                })
                .collect();
            let layout = stow_runtime::kernels::packable(op, &inputs, &outputs)
                .unwrap_or_else(|| panic!("{model}: {} is marked packed but not packable", op.name))
                .with_depth_block(kc as usize);
            assert_eq!(layout.kc, kc as usize, "{model}: {}", op.name);
            let back = layout.unpack(&floats(stored)).unwrap();
            assert_eq!(back, floats(row_major), "{model}: weight {}", t.name);
            if layout.rows > 1 && layout.depth > 1 {
                assert_ne!(
                    stored, row_major,
                    "{model}: weight {} is stored unchanged",
                    t.name
                );
            }
            sides.push(layout.side);
        }
        assert_eq!(
            packed.header().flags & FLAG_PACKED != 0,
            count > 0,
            "{model}: flag and packed weights disagree"
        );
        for threads in [1, 2] {
            assert_eq!(
                outputs(&packed, threads),
                outputs(&plain, threads),
                "{model}, {threads} threads: packed and row-major bundles differ"
            );
        }
    }
    // The sample models pack both convolution kernels and product weights.
    assert!(
        sides.contains(&Side::Left) && sides.contains(&Side::Right),
        "{sides:?}"
    );
}

#[test]
fn bundles_without_kernel_scratch_keep_row_major_weights() {
    let Some(stow) = common::stow_bin("bundles_without_kernel_scratch_keep_row_major_weights")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = common::compile_with(&stow, "residual_cnn", dir.path(), &["--threads", "0"]);
    let bundle = Bundle::open(&path).unwrap();
    assert_eq!(bundle.header().flags & FLAG_PACKED, 0);
    let c = bundle.contents();
    assert!((0..c.tensors.len() as u32).all(|id| c.packed_reader(id).is_none()));
}

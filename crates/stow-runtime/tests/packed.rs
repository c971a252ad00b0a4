//! Bundles whose convolution and product weights are stored packed (the
//! default of `stow compile`): each packed weight is its row-major
//! weight permuted, and the bundle runs bit for bit like the same model
//! compiled with `--no-pack-weights`, on one thread and on two.
#![cfg(feature = "std")]

mod common;

use stow_bundle::format::{FLAG_PACKED, FLAG_PACKED_INT8};
use stow_bundle::Region;
use stow_runtime::kernels::prepacked::Side;
use stow_runtime::{Bundle, Session};

/// Quantized models of testdata/regress (made with
/// onnxruntime.quantization by tools/gen_regress.py).
const QUANTIZED_MODELS: [&str; 4] = [
    "regress/qdq_mlp/model",
    "regress/qdq_cnn/model",
    "regress/qoperator_gemm/model",
    "regress/qdq_activations/model",
];

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

/// Compiles `model` (a name under testdata) packed and with
/// `--no-pack-weights`, checks that every packed weight is its row-major
/// weight permuted and that both bundles give the same output bytes on one
/// thread and on two; the sides of the weights it packed.
fn packed_like_row_major(stow: &std::path::Path, model: &str) -> Vec<Side> {
    let packed_dir = tempfile::tempdir().unwrap();
    let plain_dir = tempfile::tempdir().unwrap();
    let mut sides = Vec::new();
    let packed = Bundle::open(&common::compile(stow, model, packed_dir.path())).unwrap();
    let plain = Bundle::open(&common::compile_with(
        stow,
        model,
        plain_dir.path(),
        &["--no-pack-weights"],
    ))
    .unwrap();
    assert_eq!(plain.header().flags & FLAG_PACKED, 0, "{model}");
    let (pc, rc) = (packed.contents(), plain.contents());
    assert_eq!(pc.tensors.len(), rc.tensors.len(), "{model}");
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
        if layout.side == Side::Quads {
            // One byte per element.
            assert_eq!(
                layout.unpack(stored).unwrap(),
                row_major,
                "{model}: {}",
                t.name
            );
        } else {
            let back = layout.unpack(&floats(stored)).unwrap();
            assert_eq!(back, floats(row_major), "{model}: weight {}", t.name);
        }
        // (A single panel as deep as the weight may be its row-major
        // order already.)
        let order: Vec<u32> = (0..layout.len() as u32).collect();
        if layout.pack(&order).unwrap() != order {
            assert_ne!(
                stored, row_major,
                "{model}: weight {} is stored unchanged",
                t.name
            );
        }
        sides.push(layout.side);
    }
    let flags = packed.header().flags;
    assert_eq!(
        flags & FLAG_PACKED != 0,
        !sides.is_empty(),
        "{model}: flag and packed weights disagree"
    );
    assert_eq!(
        flags & FLAG_PACKED_INT8 != 0,
        sides.contains(&Side::Quads),
        "{model}: int8 flag and packed int8 weights disagree"
    );
    for threads in [1, 2] {
        assert_eq!(
            outputs(&packed, threads),
            outputs(&plain, threads),
            "{model}, {threads} threads: packed and row-major bundles differ"
        );
    }
    sides
}

#[test]
fn packed_bundles_run_bit_for_bit_like_row_major_ones() {
    let Some(stow) = common::stow_bin("packed_bundles_run_bit_for_bit_like_row_major_ones") else {
        return;
    };
    let sides: Vec<Side> = common::FIXED_SHAPE_MODELS
        .iter()
        .flat_map(|model| packed_like_row_major(&stow, model))
        .collect();
    // The sample models pack both convolution kernels and product weights.
    assert!(
        sides.contains(&Side::Left) && sides.contains(&Side::Right),
        "{sides:?}"
    );
}

/// The quantized sample models: their products' i8 weights are stored as
/// the int8 kernels' panels, and run bit for bit like row-major ones.
#[test]
fn packed_int8_weights_run_bit_for_bit_like_row_major_ones() {
    let Some(stow) = common::stow_bin("packed_int8_weights_run_bit_for_bit_like_row_major_ones")
    else {
        return;
    };
    let mut packed_int8 = 0;
    for model in QUANTIZED_MODELS {
        let sides = packed_like_row_major(&stow, model);
        packed_int8 += sides.iter().filter(|&&s| s == Side::Quads).count();
    }
    assert!(packed_int8 >= 2, "{packed_int8} int8 weights packed");
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

//! Puts channels first for windowed operators that tract left channels
//! last.
//!
//! Decluttering may turn a 1-d convolution or pool into one on a
//! channels-last (`NHWC`/`HWC`) layout when that saves tract a transpose.
//! Stowage's kernels read channels-first images; rather than a second copy
//! of every window kernel, each such operator becomes a move of the channel
//! axis, the channels-first operator, and a move back. The moves are
//! ordinary steps: the planner places their outputs like any tensor. A
//! move back and the next operator's move forward cancel when only
//! element-wise operators lie between them ([`cancel_moves`]).

use crate::error::{OnnxError, Stage};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_core::ops::cnn::{Conv, Deconv, MaxPool, PoolSpec, SumPool};
use tract_onnx::tract_core::ops::nn::DataFormat;

/// The operator with channels first, or `None` when it already is (or has
/// no image layout).
fn channels_first_op(op: &dyn TypedOp) -> Option<Box<dyn TypedOp>> {
    let first = |spec: &PoolSpec| -> Option<PoolSpec> {
        let data_format = match spec.data_format {
            DataFormat::NHWC => DataFormat::NCHW,
            DataFormat::HWC => DataFormat::CHW,
            _ => return None,
        };
        Some(PoolSpec {
            data_format,
            ..spec.clone()
        })
    };
    let any = op.as_op();
    if let Some(conv) = any.downcast_ref::<Conv>() {
        let pool_spec = first(&conv.pool_spec)?;
        return Some(Box::new(Conv {
            pool_spec,
            ..conv.clone()
        }));
    }
    if let Some(deconv) = any.downcast_ref::<Deconv>() {
        let pool_spec = first(&deconv.pool_spec)?;
        return Some(Box::new(Deconv {
            pool_spec,
            ..deconv.clone()
        }));
    }
    if let Some(pool) = any.downcast_ref::<MaxPool>() {
        // Indices count positions in the input's own layout.
        if pool.with_index_outputs.is_some() {
            return None;
        }
        let pool_spec = first(&pool.pool_spec)?;
        return Some(Box::new(MaxPool {
            pool_spec,
            ..pool.clone()
        }));
    }
    if let Some(pool) = any.downcast_ref::<SumPool>() {
        let pool_spec = first(&pool.pool_spec)?;
        return Some(Box::new(SumPool {
            pool_spec,
            ..pool.clone()
        }));
    }
    None
}

/// Rewrites every channels-last window operator of `model` as
/// move → channels-first operator → move back.
pub(crate) fn channels_first(model: &mut TypedModel) -> Result<(), OnnxError> {
    let err = |e: TractError| OnnxError::tract(Stage::Declutter, e);
    let targets: Vec<usize> = model
        .nodes()
        .iter()
        .filter(|n| channels_first_op(n.op.as_ref()).is_some())
        .map(|n| n.id)
        .collect();
    for id in targets {
        let node = model.node(id).clone();
        let Some(op) = channels_first_op(node.op.as_ref()) else {
            continue;
        };
        let rank = model.outlet_fact(node.inputs[0]).map_err(err)?.rank();
        // Channels move from the last axis to just after the batch axis
        // (or to the front without one).
        let lead = rank
            .saturating_sub(1)
            .min(usize::from(has_batch(op.as_ref())));
        let mut patch = TypedModelPatch::new(format!("channels first {}", node.name));
        let mut inputs: TVec<OutletId> = node
            .inputs
            .iter()
            .map(|o| patch.tap_model(model, *o))
            .collect::<TractResult<_>>()
            .map_err(err)?;
        inputs[0] = patch
            .wire_node(
                format!("{}.channels_first", node.name),
                AxisOp::Move(rank - 1, lead),
                &[inputs[0]],
            )
            .map_err(err)?[0];
        let outputs = patch.wire_node(&node.name, op, &inputs).map_err(err)?;
        for (slot, o) in outputs.iter().enumerate() {
            let out_rank = patch.outlet_fact(*o).map_err(err)?.rank();
            let back = patch
                .wire_node(
                    format!("{}.channels_last.{slot}", node.name),
                    AxisOp::Move(lead, out_rank - 1),
                    &[*o],
                )
                .map_err(err)?[0];
            patch
                .shunt_outside(model, OutletId::new(id, slot), back)
                .map_err(err)?;
        }
        patch.apply(model).map_err(err)?;
    }
    Ok(())
}

fn has_batch(op: &dyn TypedOp) -> bool {
    let any = op.as_op();
    let spec = any
        .downcast_ref::<Conv>()
        .map(|c| &c.pool_spec)
        .or_else(|| any.downcast_ref::<Deconv>().map(|c| &c.pool_spec))
        .or_else(|| any.downcast_ref::<MaxPool>().map(|c| &c.pool_spec))
        .or_else(|| any.downcast_ref::<SumPool>().map(|c| &c.pool_spec));
    spec.is_some_and(|s| s.data_format.has_n())
}

/// Whether `node` (reading the chain at input `slot`) computes each
/// element from the same position of its input alone, whatever the
/// layout: a unary element-wise operator, or a binary one whose other
/// operand is a constant of a single value.
fn layout_free(model: &TypedModel, node: &TypedNode, slot: usize) -> bool {
    use tract_onnx::tract_core::ops::{binary::TypedBinOp, element_wise::ElementWiseOp};
    if node.op_is::<ElementWiseOp>() {
        return node.inputs.len() == 1;
    }
    node.op_is::<TypedBinOp>()
        && node.inputs.len() == 2
        && node.outputs.len() == 1
        && model
            .node(node.inputs[1 - slot].node)
            .op_is::<tract_onnx::tract_core::ops::konst::Const>()
        && model
            .outlet_fact(node.inputs[1 - slot])
            .is_ok_and(|f| f.shape.volume() == 1.to_dim())
}

/// Removes a move of axes and its inverse when only layout-free
/// operators lie between them (the channels-last activation of a
/// channels-first convolution, moved back for the next one): those
/// operators run on the unmoved tensor. Each move copies the whole tensor
/// and, beside its input, doubles what is live at its step.
pub(crate) fn cancel_moves(model: &mut TypedModel) -> Result<(), OnnxError> {
    let err = |e: TractError| OnnxError::tract(Stage::Declutter, e);
    loop {
        let outputs: Vec<OutletId> = model.output_outlets().map_err(err)?.to_vec();
        let mut found = None;
        for node in model.nodes() {
            let Some(&AxisOp::Move(from, to)) = node.op_as::<AxisOp>() else {
                continue;
            };
            let mut chain: Vec<(usize, usize)> = Vec::new();
            let mut at = OutletId::new(node.id, 0);
            let end = loop {
                let successors = &model.node(at.node).outputs[at.slot].successors;
                if successors.len() != 1 || outputs.contains(&at) {
                    break None;
                }
                let next = model.node(successors[0].node);
                if let Some(&AxisOp::Move(a, b)) = next.op_as::<AxisOp>() {
                    break (a == to && b == from).then_some(next.id);
                }
                if !layout_free(model, next, successors[0].slot) {
                    break None;
                }
                chain.push((next.id, successors[0].slot));
                at = OutletId::new(next.id, 0);
            };
            if let Some(end) = end {
                found = Some((node.id, chain, end));
                break;
            }
        }
        let Some((start, chain, end)) = found else {
            return Ok(());
        };
        let mut patch = TypedModelPatch::new(format!("cancel moves {}", model.node(start).name));
        let mut wire = patch
            .tap_model(model, model.node(start).inputs[0])
            .map_err(err)?;
        for (id, slot) in chain {
            let node = model.node(id);
            let mut inputs: TVec<OutletId> = node
                .inputs
                .iter()
                .map(|o| patch.tap_model(model, *o))
                .collect::<TractResult<_>>()
                .map_err(err)?;
            inputs[slot] = wire;
            wire = patch
                .wire_node(&node.name, node.op.clone(), &inputs)
                .map_err(err)?[0];
        }
        patch
            .shunt_outside(model, OutletId::new(end, 0), wire)
            .map_err(err)?;
        patch.apply(model).map_err(err)?;
        model.compact().map_err(err)?;
    }
}

#[cfg(test)]
mod tests {
    use crate::{load_decluttered, LoadOptions};
    use tract_onnx::prelude::*;

    /// testdata/patch_pad.onnx moves its image to channels last around a
    /// Relu and back: only the input's move is left, and the model still
    /// computes what it computes with every move (tract running both).
    #[test]
    fn moves_around_a_relu_cancel() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/patch_pad.onnx");
        let d = load_decluttered(&path, &LoadOptions::default()).unwrap();
        let graph = d.graph(Default::default(), &[]).unwrap();
        let moves = graph
            .ops
            .iter()
            .filter(|op| op.op_type == "MoveAxis")
            .count();
        assert_eq!(
            moves,
            1,
            "{:?}",
            graph.ops.iter().map(|o| &o.op_type).collect::<Vec<_>>()
        );
        let inputs = crate::random_inputs(&graph, 3).unwrap();
        let got = crate::run_reference(&graph, &inputs).unwrap();
        let original = tract_onnx::onnx()
            .model_for_path(&path)
            .unwrap()
            .into_optimized()
            .unwrap()
            .into_runnable()
            .unwrap();
        let want = original
            .run(inputs.iter().map(|t| t.clone().into()).collect())
            .unwrap();
        let (g, w) = (
            got[0].to_plain_array_view::<f32>().unwrap(),
            want[0].to_plain_array_view::<f32>().unwrap(),
        );
        assert_eq!(g.shape(), w.shape());
        for (a, b) in g.iter().zip(w.iter()) {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
        }
    }
}

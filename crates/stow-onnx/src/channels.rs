//! Puts channels first for windowed operators that tract left channels
//! last.
//!
//! Decluttering may turn a 1-d convolution or pool into one on a
//! channels-last (`NHWC`/`HWC`) layout when that saves tract a transpose.
//! Stowage's kernels read channels-first images; rather than a second copy
//! of every window kernel, each such operator becomes a move of the channel
//! axis, the channels-first operator, and a move back. The moves are
//! ordinary steps: the planner places their outputs like any tensor.

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

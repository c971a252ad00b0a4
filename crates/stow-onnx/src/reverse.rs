//! Slices with a negative step become gathers.
//!
//! tract keeps a slice that walks an axis backwards (`x[::-1]`,
//! `x[::-2]`) as a `Downsample` with a negative stride. The runtime's copy
//! kernels walk forwards; a `Gather` of the same positions, listed
//! backwards as a constant, computes the same tensor with a kernel the
//! runtime has.

use crate::error::{OnnxError, Stage};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::DimLike;
use tract_onnx::tract_core::ops::array::Gather;
use tract_onnx::tract_core::ops::konst::Const;
use tract_onnx::tract_core::ops::Downsample;

/// Rewrites every backward `Downsample` of `model` as a `Gather`.
pub(crate) fn backward_slices_as_gathers(model: &mut TypedModel) -> Result<(), OnnxError> {
    let err = |e: TractError| OnnxError::tract(Stage::Declutter, e);
    let targets: Vec<usize> = model
        .nodes()
        .iter()
        .filter(|n| n.op_as::<Downsample>().is_some_and(|d| d.stride < 0))
        .map(|n| n.id)
        .collect();
    for id in targets {
        let node = model.node(id).clone();
        let Some(down) = node.op_as::<Downsample>() else {
            continue;
        };
        let fact = model.outlet_fact(node.inputs[0]).map_err(err)?;
        let Some(length) = fact.shape.get(down.axis).and_then(|d| d.to_usize().ok()) else {
            continue;
        };
        // ndarray's backward step: from the last element of the range
        // `modulo..` toward its first.
        let step = down.stride.unsigned_abs();
        let indices: Vec<i64> = if down.modulo >= length {
            vec![]
        } else {
            (down.modulo..length)
                .rev()
                .step_by(step)
                .map(|i| i as i64)
                .collect()
        };
        let mut patch = TypedModelPatch::new(format!("backward slice {}", node.name));
        let input = patch.tap_model(model, node.inputs[0]).map_err(err)?;
        let table = tensor1(&indices);
        let table = patch
            .wire_node(
                format!("{}.indices", node.name),
                Const::new(table.into_arc_tensor()).map_err(err)?,
                &[],
            )
            .map_err(err)?[0];
        let gathered = patch
            .wire_node(&node.name, Gather::new(down.axis), &[input, table])
            .map_err(err)?[0];
        patch
            .shunt_outside(model, OutletId::new(id, 0), gathered)
            .map_err(err)?;
        patch.apply(model).map_err(err)?;
    }
    Ok(())
}

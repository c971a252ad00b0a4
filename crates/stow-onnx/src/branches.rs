//! Runs an `If` whose condition depends on the data as both branches and a
//! select.
//!
//! An `If` on a constant (or on an input made constant with `--set`) has
//! already folded to one branch. One that stays data-dependent — a
//! detector that runs a second stage only above a threshold — is compiled
//! as: both branches, each planned into the arena like any step, then an
//! element-wise select of each output on the condition. The result is the
//! one branch ONNX would run; the other's work is wasted, which costs time
//! but keeps the bundle a straight line of steps with planned memory.
//! tract requires both branches to produce outputs of the same type and
//! shape, so the select always lines up.

use crate::error::{OnnxError, Stage};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_core::ops::konst::Const;
use tract_onnx::tract_core::ops::logic::{IfThenElse, Iff};

fn refuse(node: &TypedNode, why: impl std::fmt::Display) -> OnnxError {
    OnnxError::Tract {
        stage: Stage::Declutter,
        node: Some(node.name.clone()),
        message: format!(
            "`If` node `{}` depends on the data and cannot run as a select ({why}); \
             if its condition depends only on inputs that are fixed in a deployment, \
             give them with --set NAME=VALUE",
            node.name
        ),
    }
}

/// Rewrites every data-dependent `If` of `model` as both branches and a
/// select, and declutters the result again. Returns whether anything
/// changed.
pub(crate) fn select_branches(model: &mut TypedModel) -> Result<bool, OnnxError> {
    crate::patching::rewrite_each::<IfThenElse>(model, both_branches, refuse)
}

/// Wires `body` into `patch` with its inputs taken from `node`'s inputs
/// through `mapping`; returns the body's outputs.
fn inline(
    patch: &mut TypedModelPatch,
    model: &TypedModel,
    node: &TypedNode,
    body: &TypedModel,
    mapping: &[usize],
    prefix: &str,
) -> TractResult<Vec<OutletId>> {
    let mut wires: std::collections::HashMap<OutletId, OutletId> = Default::default();
    for (&ix, inner) in mapping.iter().zip(body.input_outlets()?) {
        let outer = *node
            .inputs
            .get(ix)
            .ok_or_else(|| TractError::msg(format!("branch input {ix} out of range")))?;
        wires.insert(*inner, patch.tap_model(model, outer)?);
    }
    for id in body.eval_order()? {
        let inner = body.node(id);
        if body.input_outlets()?.iter().any(|o| o.node == id) {
            continue;
        }
        let ins: TVec<OutletId> = inner
            .inputs
            .iter()
            .map(|o| {
                wires
                    .get(o)
                    .copied()
                    .ok_or_else(|| TractError::msg("a branch reads a value it never made"))
            })
            .collect::<TractResult<_>>()?;
        let name = format!("{}.{prefix}.{}", node.name, inner.name);
        let outs = if let Some(k) = inner.op_as::<Const>() {
            patch.wire_node(name, k.clone(), &[])?
        } else {
            patch.wire_node(name, inner.op.clone(), &ins)?
        };
        for (slot, o) in outs.iter().enumerate() {
            wires.insert(OutletId::new(id, slot), *o);
        }
    }
    body.output_outlets()?
        .iter()
        .map(|o| {
            wires
                .get(o)
                .copied()
                .ok_or_else(|| TractError::msg("a branch output is never made"))
        })
        .collect()
}

fn both_branches(model: &TypedModel, node: &TypedNode) -> Result<TypedModelPatch, OnnxError> {
    let Some(ite) = node.op_as::<IfThenElse>() else {
        return Err(refuse(node, "not an If"));
    };
    let err = |e: TractError| refuse(node, format!("{e:#}"));
    let mut patch = TypedModelPatch::new(format!("select branches of {}", node.name));
    let then_out = inline(
        &mut patch,
        model,
        node,
        &ite.then_body,
        &ite.then_input_mapping,
        "then",
    )
    .map_err(err)?;
    let else_out = inline(
        &mut patch,
        model,
        node,
        &ite.else_body,
        &ite.else_input_mapping,
        "else",
    )
    .map_err(err)?;
    // The condition holds one value: drop its axes, then give it as many
    // axes of size 1 as each output has, so it broadcasts to the output
    // unchanged.
    let mut scalar = patch.tap_model(model, node.inputs[0]).map_err(err)?;
    let rank = model.outlet_fact(node.inputs[0]).map_err(err)?.rank();
    for _ in 0..rank {
        scalar = patch
            .wire_node(format!("{}.cond", node.name), AxisOp::Rm(0), &[scalar])
            .map_err(err)?[0];
    }
    for (slot, (t, e)) in then_out.iter().zip(&else_out).enumerate() {
        let (tf, ef) = (
            patch.outlet_fact(*t).map_err(err)?,
            patch.outlet_fact(*e).map_err(err)?,
        );
        if tf.datum_type != ef.datum_type || tf.shape != ef.shape {
            return Err(refuse(
                node,
                format!("output {slot} is {tf:?} in one branch and {ef:?} in the other"),
            ));
        }
        let out_rank = tf.rank();
        let mut cond = scalar;
        for _ in 0..out_rank {
            cond = patch
                .wire_node(format!("{}.cond{slot}", node.name), AxisOp::Add(0), &[cond])
                .map_err(err)?[0];
        }
        let chosen = patch
            .wire_node(format!("{}.select{slot}", node.name), Iff, &[cond, *t, *e])
            .map_err(err)?[0];
        patch
            .shunt_outside(model, OutletId::new(node.id, slot), chosen)
            .map_err(err)?;
    }
    Ok(patch)
}

//! Unrolls loops (`Scan`, which tract makes of ONNX `Scan`, `LSTM`, `GRU`
//! and `RNN`) into straight-line steps.
//!
//! With every input shape fixed, a loop's iteration count is known when the
//! model is compiled. Written out iteration by iteration — each one slicing
//! its share of the scanned inputs, running the body, and handing its state
//! to the next — the loop becomes ordinary operators: the planner places
//! every iteration's tensors in the one arena (an iteration's temporaries
//! reuse the previous one's bytes), and the runtime needs no loop construct.
//! The body's constants (the recurrent weights) are shared by every
//! iteration, not copied.
//!
//! State starts from the loop's inputs on every run, as ONNX specifies:
//! a bundle keeps nothing from one run to the next.

use crate::error::{OnnxError, Stage};
use std::collections::HashMap;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::DimLike;
use tract_onnx::tract_core::ops::array::{Slice, TypedConcat};
use tract_onnx::tract_core::ops::konst::Const;
use tract_onnx::tract_core::ops::scan::{InputMapping, Scan};

/// Most steps a loop may unroll into: past it the model is refused rather
/// than compiled into a bundle nobody wants.
const MAX_UNROLLED_STEPS: usize = 200_000;

fn refuse(node: &TypedNode, why: impl std::fmt::Display) -> OnnxError {
    OnnxError::Tract {
        stage: Stage::Declutter,
        node: Some(node.name.clone()),
        message: format!("cannot unroll loop `{}`: {why}", node.name),
    }
}

fn tract_err(node: &TypedNode, e: impl std::fmt::Display) -> OnnxError {
    refuse(node, format!("{e:#}"))
}

/// Unrolls every `Scan` of `model` (loops in loop bodies too) and
/// declutters the result again. Returns whether anything was unrolled.
pub(crate) fn unroll_loops(model: &mut TypedModel) -> Result<bool, OnnxError> {
    crate::patching::rewrite_each::<Scan>(model, unroll_one, refuse)
}

fn unroll_one(model: &TypedModel, node: &TypedNode) -> Result<TypedModelPatch, OnnxError> {
    let Some(scan) = node.op_as::<Scan>() else {
        return Err(refuse(node, "not a loop"));
    };
    if scan.skip != 0 {
        return Err(refuse(node, format!("it skips {} iterations", scan.skip)));
    }
    let facts: Vec<TypedFact> = node
        .inputs
        .iter()
        .map(|o| model.outlet_fact(*o).cloned())
        .collect::<TractResult<_>>()
        .map_err(|e| tract_err(node, e))?;
    // Every scanned input gives the same number of iterations.
    let mut iterations: Option<usize> = None;
    for (slot, mapping) in scan.input_mapping.iter().enumerate() {
        let InputMapping::Scan(info) = mapping else {
            continue;
        };
        let length = facts[slot]
            .shape
            .get(info.axis)
            .and_then(|d| d.to_usize().ok())
            .ok_or_else(|| refuse(node, "a scanned input has no concrete length"))?;
        let chunk = info.chunk.unsigned_abs();
        if chunk == 0 || !length.is_multiple_of(chunk) {
            return Err(refuse(
                node,
                format!("chunks of {chunk} do not divide a scanned length of {length}"),
            ));
        }
        if info.chunk < 0 && chunk != 1 {
            return Err(refuse(node, "backward scan in chunks of more than one"));
        }
        match iterations {
            Some(n) if n != length / chunk => {
                return Err(refuse(
                    node,
                    "scanned inputs give different iteration counts",
                ))
            }
            _ => iterations = Some(length / chunk),
        }
    }
    let iterations = iterations.ok_or_else(|| refuse(node, "no scanned input"))?;
    let body = &scan.body;
    let order = body.eval_order().map_err(|e| tract_err(node, e))?;
    if iterations.saturating_mul(order.len()) > MAX_UNROLLED_STEPS {
        return Err(refuse(
            node,
            format!(
                "{iterations} iterations of {} operators is more than {MAX_UNROLLED_STEPS} steps",
                order.len()
            ),
        ));
    }
    let body_inputs = body.input_outlets().map_err(|e| tract_err(node, e))?;
    let body_outputs = body.output_outlets().map_err(|e| tract_err(node, e))?;
    if body_inputs.len() != scan.input_mapping.len()
        || body_outputs.len() != scan.output_mapping.len()
    {
        return Err(refuse(
            node,
            "the body's inputs or outputs do not match the loop's",
        ));
    }
    let mut patch = TypedModelPatch::new(format!("unroll {}", node.name));
    let taps: Vec<OutletId> = node
        .inputs
        .iter()
        .map(|o| patch.tap_model(model, *o))
        .collect::<TractResult<_>>()
        .map_err(|e| tract_err(node, e))?;
    // The state carried into the next iteration, in the order of the
    // loop's state inputs; state outputs come in the same order.
    let mut state: Vec<OutletId> = scan
        .input_mapping
        .iter()
        .zip(&taps)
        .filter(|(m, _)| m.is_state())
        .map(|(_, t)| *t)
        .collect();
    let mut constants: HashMap<usize, OutletId> = HashMap::new();
    let mut pieces: Vec<Vec<OutletId>> = vec![Vec::new(); scan.output_mapping.len()];
    let mut last: Vec<Option<OutletId>> = vec![None; scan.output_mapping.len()];
    for i in 0..iterations {
        let mut wires: HashMap<OutletId, OutletId> = HashMap::new();
        let mut states = state.iter();
        for (slot, (mapping, inner)) in scan
            .input_mapping
            .iter()
            .zip(body_inputs.iter())
            .enumerate()
        {
            let outer = match mapping {
                InputMapping::Full => taps[slot],
                InputMapping::State => *states
                    .next()
                    .ok_or_else(|| refuse(node, "state inputs and outputs do not pair"))?,
                InputMapping::Scan(info) => {
                    let chunk = info.chunk.unsigned_abs();
                    let length = facts[slot].shape[info.axis]
                        .to_usize()
                        .map_err(|e| tract_err(node, e))?;
                    let start = if info.chunk > 0 {
                        i * chunk
                    } else {
                        length - 1 - i
                    };
                    patch
                        .wire_node(
                            format!("{}.{i}.in{slot}", node.name),
                            Slice::new(info.axis, start, start + chunk),
                            &[taps[slot]],
                        )
                        .map_err(|e| tract_err(node, e))?[0]
                }
            };
            wires.insert(*inner, outer);
        }
        for &inner_id in &order {
            let inner = body.node(inner_id);
            if body_inputs.iter().any(|o| o.node == inner_id) {
                continue;
            }
            let outlets: TVec<OutletId> = if let Some(konst) = inner.op_as::<Const>() {
                let wire = match constants.get(&inner_id) {
                    Some(w) => *w,
                    None => {
                        let w = patch
                            .wire_node(format!("{}.{}", node.name, inner.name), konst.clone(), &[])
                            .map_err(|e| tract_err(node, e))?[0];
                        constants.insert(inner_id, w);
                        w
                    }
                };
                tvec![wire]
            } else {
                let ins: TVec<OutletId> = inner
                    .inputs
                    .iter()
                    .map(|o| {
                        wires
                            .get(o)
                            .copied()
                            .ok_or_else(|| refuse(node, "the body reads a value it never made"))
                    })
                    .collect::<Result<_, _>>()?;
                patch
                    .wire_node(
                        format!("{}.{i}.{}", node.name, inner.name),
                        inner.op.clone(),
                        &ins,
                    )
                    .map_err(|e| tract_err(node, e))?
            };
            for (slot, o) in outlets.iter().enumerate() {
                wires.insert(OutletId::new(inner_id, slot), *o);
            }
        }
        let mut next_state = Vec::with_capacity(state.len());
        for (ix, (mapping, inner)) in scan
            .output_mapping
            .iter()
            .zip(body_outputs.iter())
            .enumerate()
        {
            let value = *wires
                .get(inner)
                .ok_or_else(|| refuse(node, "a body output is never made"))?;
            if mapping.state {
                next_state.push(value);
            }
            if mapping.scan.is_some() {
                pieces[ix].push(value);
            }
            if i + 1 == iterations {
                last[ix] = Some(value);
            }
        }
        if next_state.len() != state.len() {
            return Err(refuse(node, "state inputs and outputs do not pair"));
        }
        state = next_state;
    }
    for (ix, mapping) in scan.output_mapping.iter().enumerate() {
        if let Some((slot, info)) = mapping.scan {
            let mut parts = std::mem::take(&mut pieces[ix]);
            if info.chunk < 0 {
                parts.reverse();
            }
            let whole = if parts.len() == 1 {
                parts[0]
            } else {
                patch
                    .wire_node(
                        format!("{}.out{slot}", node.name),
                        TypedConcat { axis: info.axis },
                        &parts,
                    )
                    .map_err(|e| tract_err(node, e))?[0]
            };
            patch
                .shunt_outside(model, OutletId::new(node.id, slot), whole)
                .map_err(|e| tract_err(node, e))?;
        }
        if let Some(slot) = mapping.last_value_slot {
            let value = last[ix].ok_or_else(|| refuse(node, "no iteration ran"))?;
            patch
                .shunt_outside(model, OutletId::new(node.id, slot), value)
                .map_err(|e| tract_err(node, e))?;
        }
    }
    Ok(patch)
}

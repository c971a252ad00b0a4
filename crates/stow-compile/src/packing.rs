//! Weights stored in their kernel's panel layout (docs/FORMAT.md, "Packed
//! weights"): which operators get them, the depth block each is packed
//! with, and the packed bytes the bundle holds.
//!
//! The decision depends on the graph alone, so `stow verify` repeats it on
//! the model to line its tensors up with a bundle's.

use crate::contents::{bundle_op, tensor_dtype, ContentsError};
use std::borrow::Cow;
use stow_bundle::DType;
use stow_onnx::{Attr, ModelGraph, TensorRole};
use stow_runtime::kernels::gemm;
use stow_runtime::kernels::prepacked::{Panels, Side, PACKED_ATTR, PACKED_LEFT_ATTR};
use stow_runtime::kernels::SCRATCH_BUDGET_ATTR;

/// Operand element types and shapes of step `step`'s inputs and outputs.
type Shapes = Vec<(DType, Vec<u64>)>;

fn operands(graph: &ModelGraph, step: usize) -> Result<(Shapes, Shapes), ContentsError> {
    let op = &graph.ops[step];
    let list = |ids: &[usize]| -> Result<Shapes, ContentsError> {
        ids.iter()
            .map(|&id| {
                let t = graph
                    .tensors
                    .get(id)
                    .ok_or_else(|| ContentsError::UnknownTensor {
                        step,
                        op: op.name.clone(),
                        tensor: id,
                    })?;
                Ok((tensor_dtype(t)?, t.shape.clone()))
            })
            .collect()
    };
    Ok((list(&op.inputs)?, list(&op.outputs)?))
}

/// The layout step `step`'s weight operand would be packed in: `Some` when
/// its kernel reads packed weights ([`stow_runtime::kernels::packable`])
/// and input 1 is a weight that no other step reads.
fn candidate(graph: &ModelGraph, step: usize) -> Result<Option<Panels>, ContentsError> {
    let op = &graph.ops[step];
    let Some(&weight) = op.inputs.get(1) else {
        return Ok(None);
    };
    // f32 for the float kernels, i8 for the int8 products' lanes.
    let is_weight = graph
        .tensors
        .get(weight)
        .is_some_and(|t| t.role == TensorRole::Weight && (t.dtype == "f32" || t.dtype == "i8"));
    let readers = graph
        .ops
        .iter()
        .flat_map(|o| &o.inputs)
        .filter(|&&id| id == weight)
        .count();
    if !is_weight || readers != 1 || graph.outputs.contains(&weight) {
        return Ok(None);
    }
    let (ins, outs) = operands(graph, step)?;
    Ok(stow_runtime::kernels::packable(&bundle_op(op), &ins, &outs))
}

/// True for the attributes that mark a weight packed.
fn is_packing(name: &str) -> bool {
    name == PACKED_ATTR || name == PACKED_LEFT_ATTR
}

/// Marks step `step`'s weight packed with `attr` and depth block `kc`.
fn set_depth_block(graph: &mut ModelGraph, step: usize, attr: &str, kc: usize) {
    let op = &mut graph.ops[step];
    op.attributes.retain(|(name, _)| !is_packing(name));
    op.attributes.push((
        attr.into(),
        Attr::Int(i64::try_from(kc).unwrap_or(i64::MAX)),
    ));
    op.attributes.sort_by(|a, b| a.0.cmp(&b.0));
}

/// Marks every product and convolution whose weight can be stored packed
/// ([`PACKED_ATTR`], with the usual depth block). Returns how many.
pub fn mark_packed_weights(graph: &mut ModelGraph) -> Result<usize, ContentsError> {
    let mut marked = 0;
    for step in 0..graph.ops.len() {
        if let Some(p) = candidate(graph, step)? {
            let attr = stow_runtime::kernels::packed_attr(&graph.ops[step].op_type, &p);
            set_depth_block(graph, step, attr, p.kc);
            marked += 1;
        }
    }
    Ok(marked)
}

/// Marks the steps a bundle compiled from this graph marked, with the
/// bundle's depth blocks: how `stow verify` lines a model up with a
/// bundle whatever options it was compiled with. Steps beyond the
/// bundle's operators are left alone.
pub fn mark_like(graph: &mut ModelGraph, ops: &[stow_bundle::Op]) {
    for (step, op) in ops.iter().enumerate().take(graph.ops.len()) {
        let marked = op.attributes.iter().find_map(|(name, a)| match a {
            stow_bundle::AttrValue::Int(kc) if is_packing(name) => {
                Some((name.as_str(), usize::try_from(*kc).ok()?))
            }
            _ => None,
        });
        if let Some((attr, kc)) = marked {
            set_depth_block(graph, step, attr, kc);
        }
    }
}

/// The layout of step `step`'s packed weight, if it is marked.
fn marked_layout(graph: &ModelGraph, step: usize) -> Result<Option<Panels>, ContentsError> {
    let op = &graph.ops[step];
    if !op.attributes.iter().any(|(name, _)| is_packing(name)) {
        return Ok(None);
    }
    let (ins, outs) = operands(graph, step)?;
    Ok(stow_runtime::kernels::marked_panels(
        &bundle_op(op),
        &ins,
        &outs,
    ))
}

/// Gives a marked step the depth block its row-major kernel would use
/// with `budget` floats of scratch per thread, when that kernel's usual
/// blocks do not fit the budget: the sums, and so the outputs, stay those
/// of a bundle without packed weights.
pub(crate) fn fit_depth_block(
    graph: &mut ModelGraph,
    step: usize,
    budget: usize,
) -> Result<(), ContentsError> {
    let Some(p) = marked_layout(graph, step)? else {
        return Ok(());
    };
    if p.side == Side::Quads {
        // The int8 panels are never cut into depth blocks; a step whose
        // scratch cannot hold one (nor the kernel's stack) keeps its
        // weight row-major, for the reference loops.
        if !stow_runtime::kernels::qlinear::packed_fits(p.depth, budget) {
            graph.ops[step]
                .attributes
                .retain(|(name, _)| name != PACKED_ATTR);
        }
        return Ok(());
    }
    let mut row_major = bundle_op(&graph.ops[step]);
    row_major
        .attributes
        .retain(|(name, _)| !is_packing(name) && name != SCRATCH_BUDGET_ATTR);
    let (ins, outs) = operands(graph, step)?;
    if stow_runtime::kernels::scratch_floats(&row_major, &ins, &outs) > budget {
        let attr = stow_runtime::kernels::packed_attr(&graph.ops[step].op_type, &p);
        set_depth_block(graph, step, attr, gemm::depth_within(p.depth, budget));
    }
    Ok(())
}

/// The packed layout of each weight tensor, by tensor id (`None` for
/// weights stored row-major).
pub fn packed_layouts(graph: &ModelGraph) -> Result<Vec<Option<Panels>>, ContentsError> {
    let mut layouts = vec![None; graph.tensors.len()];
    for step in 0..graph.ops.len() {
        if let Some(p) = marked_layout(graph, step)? {
            if let Some(slot) = graph.ops[step]
                .inputs
                .get(1)
                .and_then(|&w| layouts.get_mut(w))
            {
                *slot = Some(p);
            }
        }
    }
    Ok(layouts)
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A weight's bytes as the bundle stores them: packed as `layout` says, or
/// unchanged.
pub fn stored_bytes<'a>(raw: &'a [u8], layout: Option<&Panels>) -> Option<Cow<'a, [u8]>> {
    match layout {
        None => Some(Cow::Borrowed(raw)),
        // One byte per element.
        Some(p) if p.side == Side::Quads => Some(Cow::Owned(p.pack(raw)?)),
        Some(p) => Some(Cow::Owned(bytes(&p.pack(&floats(raw))?))),
    }
}

/// A packed weight's bytes back in the model's row-major order.
pub fn unpacked_bytes(stored: &[u8], layout: &Panels) -> Option<Vec<u8>> {
    if layout.side == Side::Quads {
        return layout.unpack(stored);
    }
    Some(bytes(&layout.unpack(&floats(stored))?))
}

//! Element-wise float operators between a DequantizeLinear and a
//! QuantizeLinear (an activation of a QDQ model: HardSwish, Sigmoid,
//! LeakyRelu, ... or a plain requantization), replaced by a look-up table
//! of the 256 values the quantized input can take.
//!
//! With per-tensor parameters, the quantized output is a function of the
//! quantized input alone: the table is that function, computed by
//! evaluating the very operators it replaces (tract's evaluation, the
//! reference `stow verify` compares with) on all 256 inputs, so it is
//! exact by construction. The f32 tensors between the two steps leave the
//! arena and the activation runs as one byte lookup per element.
//!
//! The operators replaced form a graph between the two steps whose every
//! node is element-wise (a unary function, or a binary operator whose
//! other operand is a constant with one value), whose every value is read
//! only inside it (or by the QuantizeLinear), and which reads the one
//! DequantizeLinear (which stays when something else reads it).

use crate::error::{OnnxError, Stage};
use crate::quantize::{Dequantize, Quantize};
use std::collections::{HashMap, HashSet};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::element_wise::ElementWiseOp;
use tract_onnx::tract_hir::internal::*;

/// `table[x − min(type)]` for a u8 or i8 `x` and a 256-entry table of
/// the output's type.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub(crate) struct QLookup {
    /// The output's scale (its bits) and zero point, where known: the
    /// table's own bytes do not tell them, and `stow inspect` shows them.
    pub output: Option<(u32, i32)>,
}

/// The first value of a quantized type, the table's index 0.
fn first(dt: DatumType) -> Option<i32> {
    match dt {
        DatumType::U8 => Some(0),
        DatumType::I8 => Some(-128),
        _ => None,
    }
}

impl Op for QLookup {
    fn name(&self) -> StaticName {
        "QLookup".into()
    }

    op_as_typed_op!();
}

impl EvalOp for QLookup {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let (x, table) = args_2!(inputs);
        let base = first(x.datum_type()).context("QLookup of a type other than u8, i8")?;
        ensure!(
            table.len() == 256,
            "QLookup table of {} entries",
            table.len()
        );
        let index = x.cast_to::<i32>()?;
        let index = index.to_plain_array_view::<i32>()?;
        let out_dt = table.datum_type();
        let table = table.cast_to::<i32>()?;
        let table = table.to_plain_array_view::<i32>()?;
        let y = index.mapv(|v| table[(v - base) as usize]);
        Ok(tvec!(y
            .into_tensor()
            .cast_to_dt(out_dt)?
            .into_owned()
            .into_tvalue()))
    }
}

impl TypedOp for QLookup {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        Ok(tvec!(inputs[1].datum_type.fact(inputs[0].shape.clone())))
    }

    as_op!();
}

/// A constant with one value.
fn scalar_const(model: &TypedModel, o: OutletId) -> Option<Arc<Tensor>> {
    let fact = model.outlet_fact(o).ok()?;
    fact.konst.clone().filter(|k| k.len() == 1)
}

/// The element-wise nodes between a DequantizeLinear and the
/// QuantizeLinear `q` (in node order, which is topological), and the
/// DequantizeLinear, when they can become one table.
fn region(model: &TypedModel, q: &TypedNode) -> Option<(Vec<usize>, usize)> {
    let outputs: HashSet<OutletId> = model.output_outlets().ok()?.iter().copied().collect();
    let mut members: HashSet<usize> = HashSet::new();
    let mut dq: Option<usize> = None;
    let mut stack = vec![*q.inputs.first()?];
    while let Some(o) = stack.pop() {
        let node = model.node(o.node);
        if let Some(d) = node.op_as::<Dequantize>() {
            if d.axis.is_some() || dq.is_some_and(|x| x != node.id) {
                return None;
            }
            dq = Some(node.id);
            continue;
        }
        if members.contains(&node.id) {
            continue;
        }
        let elementwise = node.op_is::<ElementWiseOp>() || node.op_is::<TypedBinOp>();
        if !elementwise || node.outputs.len() != 1 || members.len() >= 64 {
            return None;
        }
        members.insert(node.id);
        for &i in &node.inputs {
            if scalar_const(model, i).is_none() {
                stack.push(i);
            }
        }
    }
    let dq = dq?;
    // Nothing outside reads a value computed inside.
    for &m in &members {
        if outputs.contains(&OutletId::new(m, 0)) {
            return None;
        }
        let inside = model.node(m).outputs[0]
            .successors
            .iter()
            .all(|s| s.node == q.id || members.contains(&s.node));
        if !inside {
            return None;
        }
    }
    let mut order: Vec<usize> = members.into_iter().collect();
    order.sort_unstable();
    Some((order, dq))
}

/// The table of `q` over `nodes`, from the DequantizeLinear `dq`.
fn table(model: &TypedModel, q: &TypedNode, nodes: &[usize], dq: usize) -> Option<Tensor> {
    let dq_node = model.node(dq);
    let x = model.outlet_fact(dq_node.inputs[0]).ok()?;
    let (x_dt, rank) = (x.datum_type, x.rank());
    let base = first(x_dt)?;
    let konst = |o: OutletId| model.outlet_fact(o).ok()?.konst.clone();
    let all: Vec<i32> = (base..base + 256).collect();
    // The 256 values along the last axis of a tensor of x's rank: tract's
    // binary operators broadcast operands of equal rank only.
    let mut shape = vec![1; rank.max(1)];
    shape[rank.max(1) - 1] = 256;
    let all = tensor1(&all)
        .cast_to_dt(x_dt)
        .ok()?
        .into_owned()
        .into_shape(&shape)
        .ok()?;
    let mut values: HashMap<OutletId, TValue> = HashMap::new();
    let eval = |node: &TypedNode, values: &HashMap<OutletId, TValue>| -> Option<TValue> {
        let inputs: TVec<TValue> = node
            .inputs
            .iter()
            .map(|o| {
                values
                    .get(o)
                    .cloned()
                    .or_else(|| konst(*o).map(|k| k.into_tvalue()))
            })
            .collect::<Option<_>>()?;
        node.op.eval_out_of_plan(inputs).ok()??.into_iter().next()
    };
    let scale = konst(dq_node.inputs[1])?;
    let zero = konst(dq_node.inputs[2])?;
    let dequantized = dq_node
        .op
        .eval_out_of_plan(tvec!(
            all.into_tvalue(),
            scale.into_tvalue(),
            zero.into_tvalue()
        ))
        .ok()??
        .into_iter()
        .next()?;
    values.insert(OutletId::new(dq, 0), dequantized);
    for &n in nodes {
        let node = model.node(n);
        let v = eval(node, &values)?;
        values.insert(OutletId::new(n, 0), v);
    }
    let out = eval(q, &values)?.into_tensor();
    (out.len() == 256).then(|| out.into_shape(&[256]).ok())?
}

/// Replaces every such region by a [`QLookup`]. Returns whether anything
/// changed.
pub(crate) fn lookup_tables(model: &mut TypedModel) -> Result<bool, OnnxError> {
    let err = |e: TractError| OnnxError::tract(Stage::Declutter, e);
    let mut changed = false;
    let mut tried: HashSet<usize> = HashSet::new();
    loop {
        let found = model.nodes().iter().find_map(|q| {
            let quantize = q.op_as::<Quantize>()?;
            if quantize.axis.is_some() || first(quantize.to).is_none() || tried.contains(&q.id) {
                return None;
            }
            let (nodes, dq) = region(model, q)?;
            let table = table(model, q, &nodes, dq);
            Some((q.id, dq, table))
        });
        let Some((q, dq, table)) = found else { break };
        tried.insert(q);
        let Some(table) = table else { continue };
        let name = model.node(q).name.clone();
        let mut patch = TypedModelPatch::new(format!("look-up table {name}"));
        let x = patch
            .tap_model(model, model.node(dq).inputs[0])
            .map_err(err)?;
        let t = patch
            .add_const(format!("{name}.table"), table)
            .map_err(err)?;
        let output = crate::qparams::of(model, OutletId::new(q, 0)).map(|(s, z)| (s.to_bits(), z));
        let y = patch
            .wire_node(&name, QLookup { output }, &[x, t])
            .map_err(err)?[0];
        patch
            .shunt_outside(model, OutletId::new(q, 0), y)
            .map_err(err)?;
        patch.apply(model).map_err(err)?;
        changed = true;
    }
    if changed {
        crate::guards::declutter(model)?;
    }
    Ok(changed)
}

/// Where an operand of a quantized binary operator comes from: the
/// quantized tensor it is a function of, and the table between them
/// (none: the tensor itself).
fn source(
    model: &TypedModel,
    o: OutletId,
    reader: usize,
    outputs: &HashSet<OutletId>,
) -> (OutletId, Option<Arc<Tensor>>) {
    let node = model.node(o.node);
    let private =
        !outputs.contains(&o) && node.outputs[0].successors.iter().all(|s| s.node == reader);
    if node.op_is::<QLookup>() && private {
        if let Some(table) = model
            .outlet_fact(node.inputs[1])
            .ok()
            .and_then(|f| f.konst.clone())
        {
            return (node.inputs[0], Some(table));
        }
    }
    (o, None)
}

/// The 256 values of `x`'s type, through `table` when there is one.
fn through(all: &Tensor, table: Option<&Arc<Tensor>>) -> Option<TValue> {
    match table {
        None => Some(all.clone().into_tvalue()),
        Some(t) => QLookup { output: None }
            .eval_out_of_plan(tvec!(all.clone().into_tvalue(), t.clone().into_tvalue()))
            .ok()??
            .into_iter()
            .next(),
    }
}

/// A node that computes a function of one quantized tensor `x` from
/// tables of it: `QLookup(QLookup(x))`, or a `QLinearAdd`/`QLinearMul`
/// whose operands are each `x` or a table of `x` read by it alone —
/// Swish, `x·σ(x)`, in a QDQ model becomes `QLinearMul(x, QLookup(x))`.
/// Returns `x` and the one table of the whole, computed by evaluating
/// the node itself on the 256 values `x` can take (so it is exact by
/// construction, like the tables it is made of).
fn composite(
    model: &TypedModel,
    node: &TypedNode,
    outputs: &HashSet<OutletId>,
) -> Option<(OutletId, Tensor)> {
    /// An input of the node: `x` through a table (or none), or a constant.
    enum Arg {
        OfX(Option<Arc<Tensor>>),
        Const(Option<Arc<Tensor>>),
    }
    let konst = |o: OutletId| Arg::Const(model.outlet_fact(o).ok().and_then(|f| f.konst.clone()));
    let (x, args) = if node.op_is::<QLookup>() {
        let (x, inner) = source(model, node.inputs[0], node.id, outputs);
        inner.as_ref()?;
        (x, vec![Arg::OfX(inner), konst(node.inputs[1])])
    } else if node.op_is::<crate::qops::QLinearBinary>() && node.inputs.len() == 8 {
        let (a, a_table) = source(model, node.inputs[0], node.id, outputs);
        let (b, b_table) = source(model, node.inputs[3], node.id, outputs);
        if a != b {
            return None;
        }
        let mut args = vec![Arg::OfX(a_table)];
        args.extend(node.inputs[1..3].iter().map(|&o| konst(o)));
        args.push(Arg::OfX(b_table));
        args.extend(node.inputs[4..].iter().map(|&o| konst(o)));
        (a, args)
    } else {
        return None;
    };
    let fact = model.outlet_fact(x).ok()?;
    let base = first(fact.datum_type)?;
    let all: Vec<i32> = (base..base + 256).collect();
    let all = tensor1(&all).cast_to_dt(fact.datum_type).ok()?.into_owned();
    let values: TVec<TValue> = args
        .iter()
        .map(|a| match a {
            Arg::OfX(table) => through(&all, table.as_ref()),
            Arg::Const(k) => Some(k.clone()?.into_tvalue()),
        })
        .collect::<Option<_>>()?;
    let out = node.op.eval_out_of_plan(values).ok()??.into_iter().next()?;
    let out = out.into_tensor();
    (out.len() == 256)
        .then(|| out.into_shape(&[256]).ok())?
        .map(|t| (x, t))
}

/// Replaces every node [`composite`] finds by one [`QLookup`] of the
/// tensor it is a function of: the tensors between them leave the arena
/// (Swish's `σ(x)`, as large as `x`) and the element-wise passes become
/// one. Returns whether anything changed.
pub(crate) fn compose_tables(model: &mut TypedModel) -> Result<bool, OnnxError> {
    let err = |e: TractError| OnnxError::tract(Stage::Declutter, e);
    let mut changed = false;
    let mut tried: HashSet<usize> = HashSet::new();
    loop {
        let outputs: HashSet<OutletId> = model
            .output_outlets()
            .map_err(err)?
            .iter()
            .copied()
            .collect();
        let found = model.nodes().iter().find_map(|n| {
            if tried.contains(&n.id) {
                return None;
            }
            let (x, table) = composite(model, n, &outputs)?;
            Some((n.id, x, table))
        });
        let Some((n, x, table)) = found else { break };
        tried.insert(n);
        let name = model.node(n).name.clone();
        let mut patch = TypedModelPatch::new(format!("composed table {name}"));
        let x = patch.tap_model(model, x).map_err(err)?;
        let t = patch
            .add_const(format!("{name}.composed"), table)
            .map_err(err)?;
        let output = crate::qparams::of(model, OutletId::new(n, 0)).map(|(s, z)| (s.to_bits(), z));
        let y = patch
            .wire_node(&name, QLookup { output }, &[x, t])
            .map_err(err)?[0];
        patch
            .shunt_outside(model, OutletId::new(n, 0), y)
            .map_err(err)?;
        patch.apply(model).map_err(err)?;
        crate::guards::declutter(model)?;
        changed = true;
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_i8_input_indexes_from_minus_128() {
        let table: Vec<u8> = (0..=255).map(|i: u8| i.wrapping_mul(3)).collect();
        let x = tensor1(&[-128i8, -1, 0, 127]);
        let out = QLookup { output: None }
            .eval_out_of_plan(tvec!(x.into_tvalue(), tensor1(&table).into_tvalue()))
            .unwrap()
            .unwrap();
        let want: Vec<u8> = [0u8, 127, 128, 255]
            .iter()
            .map(|i| i.wrapping_mul(3))
            .collect();
        assert_eq!(out[0].clone().into_tensor(), tensor1(&want));
    }
}

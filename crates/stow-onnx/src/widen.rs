//! f16 operators without an f16 kernel run in f32 between casts.
//!
//! The runtime computes on f16 only where that is cheap to get right:
//! casts, the unary functions (through f32, rounded once), float tests,
//! and operators that only move elements
//! ([`stow_runtime::kernels::has_f16_kernel`], the one list of them).
//! Every other operator with an f16 operand becomes, here,
//!
//! ```text
//! x: f16 ─ Cast(f32) ─┐
//! w: f16 constant ────┼─ op in f32 ─ Cast(f16) ─ y: f16
//!   (converted now) ──┘
//! ```
//!
//! one operator at a time: each result is rounded to f16 once, as numpy
//! (and the ONNX reference) computes f16 — in f32, then rounded — and the
//! arena holds f16 tensors between operators. Constant f16 inputs
//! (weights) are converted to f32 here, once, rather than cast at every
//! run. Outputs that are not f16 (a comparison's bool, an index) need no
//! cast back.
//!
//! Divisions need one more step, before decluttering: tract rewrites a
//! float `a / b` as `a · recip(b)`, two f16 roundings where numpy has
//! one, unless the `Div` is [`ExactDiv`] ([`keep_f16_divisions`]).
//!
//! Memory: while a widened operator runs, the arena holds its f32 inputs
//! and outputs (twice the bytes of their f16 forms) besides the f16
//! tensors around them; converted weights take twice their f16 bytes (an
//! f16 weight also read by an operator that runs on f16 is kept in both
//! forms).

use crate::error::{OnnxError, Stage};
use std::collections::HashMap;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::{BinMiniOp, TypedBinOp};
use tract_onnx::tract_core::ops::cast::cast;
use tract_onnx::tract_core::ops::konst::Const;
use tract_onnx::tract_core::ops::math::Div;
use tract_onnx::tract_core::ops::source::TypedSource;

/// Division as itself. tract's declutter turns every float `a / b` into
/// `a · recip(b)`, two roundings where ONNX has one: in f16 the
/// reciprocal rounds to f16 before the product (one f16 step off numpy in
/// places; a constant divisor even folds to an f16 reciprocal). An f16
/// `Div` gets this operator instead, which computes the same quotient and
/// which tract leaves alone; its name is `Div`, so the widening below and
/// the runtime treat it as one.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub(crate) struct ExactDiv;

impl BinMiniOp for ExactDiv {
    fn name(&self) -> &'static str {
        "Div"
    }

    fn result_datum_type(&self, a: DatumType, b: DatumType) -> TractResult<DatumType> {
        Div.result_datum_type(a, b)
    }

    fn eval_in_a(&self, a: &mut Tensor, b: &Tensor) -> TractResult<()> {
        Div.eval_in_a(a, b)
    }

    fn eval_out_of_place(&self, c: &mut Tensor, a: &Tensor, b: &Tensor) -> TractResult<()> {
        Div.eval_out_of_place(c, a, b)
    }

    fn neutral_element(&self) -> Option<i64> {
        Some(1)
    }
}

/// Gives every f16 `Div` of `model` the [`ExactDiv`] operator, before
/// tract's declutter would rewrite it. Returns how many.
pub(crate) fn keep_f16_divisions(model: &mut TypedModel) -> usize {
    let mut count = 0;
    for id in 0..model.nodes().len() {
        let node = model.node(id);
        let is_div = node
            .op_as::<TypedBinOp>()
            .is_some_and(|b| b.0.is::<Div>() && b.1.is_none());
        if !is_div || node.outputs[0].fact.datum_type != DatumType::F16 {
            continue;
        }
        model.node_mut(id).op = Box::new(TypedBinOp(Box::new(ExactDiv), None));
        count += 1;
    }
    count
}

/// True when `node` has an f16 operand and the runtime has no f16 kernel
/// for its operator.
fn needs_widening(model: &TypedModel, node: &TypedNode) -> TractResult<bool> {
    if node.op_is::<Const>() || node.op_is::<TypedSource>() {
        return Ok(false);
    }
    if stow_runtime::kernels::has_f16_kernel(&node.op.name()) {
        return Ok(false);
    }
    let mut f16 = node
        .outputs
        .iter()
        .any(|o| o.fact.datum_type == DatumType::F16);
    for input in &node.inputs {
        f16 |= model.outlet_fact(*input)?.datum_type == DatumType::F16;
    }
    Ok(f16)
}

/// True when the operator, given f32 for each f16 input, computes
/// outputs of the same shapes with f32 for each f16 output (an operator
/// that fixes its own element type, such as a quantized one, does not).
fn runs_in_f32(model: &TypedModel, node: &TypedNode) -> TractResult<bool> {
    let mut facts = Vec::with_capacity(node.inputs.len());
    for input in &node.inputs {
        let fact = model.outlet_fact(*input)?;
        facts.push(if fact.datum_type == DatumType::F16 {
            TypedFact::dt_shape(DatumType::F32, fact.shape.clone())
        } else {
            fact.without_value()
        });
    }
    let refs: TVec<&TypedFact> = facts.iter().collect();
    let Ok(widened) = node.op.output_facts(&refs) else {
        return Ok(false);
    };
    Ok(widened.len() == node.outputs.len()
        && widened.iter().zip(&node.outputs).all(|(w, o)| {
            let want = if o.fact.datum_type == DatumType::F16 {
                DatumType::F32
            } else {
                o.fact.datum_type
            };
            w.datum_type == want && w.shape == o.fact.shape
        }))
}

/// Rewrites every f16 operator of `model` that the runtime cannot run on
/// f16 as casts to f32, the operator in f32, and casts back. Returns how
/// many operators were widened.
pub(crate) fn widen_f16(model: &mut TypedModel) -> Result<usize, OnnxError> {
    let err = |e: TractError| OnnxError::tract(Stage::Declutter, e);
    let mut targets = Vec::new();
    for node in model.nodes() {
        if needs_widening(model, node).map_err(err)? && runs_in_f32(model, node).map_err(err)? {
            targets.push(node.id);
        }
    }
    // Each f16 constant converted once, however many operators read it.
    let mut converted: HashMap<OutletId, OutletId> = HashMap::new();
    for &id in &targets {
        let node = model.node(id).clone();
        let mut patch = TypedModelPatch::new(format!("f16 {} in f32", node.name));
        let mut inputs = TVec::new();
        for (slot, &outlet) in node.inputs.iter().enumerate() {
            let fact = model.outlet_fact(outlet).map_err(err)?;
            if fact.datum_type != DatumType::F16 {
                inputs.push(patch.tap_model(model, outlet).map_err(err)?);
                continue;
            }
            let value = model
                .node(outlet.node)
                .op_as::<Const>()
                .map(|k| k.val().clone());
            if let Some(value) = value {
                let wide = match converted.get(&outlet) {
                    Some(w) => *w,
                    None => {
                        let f32_value = value.cast_to_dt(DatumType::F32).map_err(err)?;
                        let name = format!("{}.f32", model.node(outlet.node).name);
                        let w = model.add_const(name, f32_value.into_owned()).map_err(err)?;
                        converted.insert(outlet, w);
                        w
                    }
                };
                inputs.push(patch.tap_model(model, wide).map_err(err)?);
            } else {
                let tap = patch.tap_model(model, outlet).map_err(err)?;
                let wide = patch
                    .wire_node(
                        format!("{}.f32_in.{slot}", node.name),
                        cast(DatumType::F32),
                        &[tap],
                    )
                    .map_err(err)?[0];
                inputs.push(wide);
            }
        }
        let outputs = patch
            .wire_node(format!("{}.f32", node.name), node.op.clone(), &inputs)
            .map_err(err)?;
        for (slot, &wide) in outputs.iter().enumerate() {
            let original = OutletId::new(id, slot);
            let by = if model.outlet_fact(original).map_err(err)?.datum_type == DatumType::F16 {
                let name = if slot == 0 {
                    node.name.clone()
                } else {
                    format!("{}:{slot}", node.name)
                };
                patch
                    .wire_node(name, cast(DatumType::F16), &[wide])
                    .map_err(err)?[0]
            } else {
                wide
            };
            patch.shunt_outside(model, original, by).map_err(err)?;
        }
        patch.apply(model).map_err(err)?;
    }
    // Drop the f16 constants no operator reads any more.
    model.compact().map_err(err)?;
    Ok(targets.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tract_onnx::tract_core::ops::array::Gather;
    use tract_onnx::tract_core::ops::logic::comp_lt;
    use tract_onnx::tract_core::ops::math;
    use tract_onnx::tract_core::ops::nn::{Softmax, SoftmaxKind};

    fn f16s(values: &[f32]) -> Tensor {
        let v: Vec<f16> = values.iter().map(|&x| f16::from_f32(x)).collect();
        tensor1(&v)
    }

    /// `x: f16[3]` → `x + w` (w an f16 constant) → softmax → gather of
    /// indices; also `x < w` into bool.
    fn model() -> TypedModel {
        let mut m = TypedModel::default();
        let x = m.add_source("x", f16::fact([3])).unwrap();
        let w = m.add_const("w", f16s(&[0.5, -1.0, 2.0])).unwrap();
        let sum = m.wire_node("sum", math::add(), &[x, w]).unwrap()[0];
        let soft = m
            .wire_node(
                "soft",
                Softmax::new(tvec![0], None, SoftmaxKind::Softmax),
                &[sum],
            )
            .unwrap()[0];
        let idx = m.add_const("idx", tensor1(&[2i64, 0])).unwrap();
        let picked = m.wire_node("picked", Gather::new(0), &[soft, idx]).unwrap()[0];
        let less = m
            .wire_node("less", TypedBinOp(comp_lt(), None), &[x, w])
            .unwrap()[0];
        m.select_output_outlets(&[picked, less]).unwrap();
        m
    }

    fn run(m: &TypedModel, x: &[f32]) -> TVec<TValue> {
        let plan = m.clone().into_runnable().unwrap();
        plan.run(tvec![f16s(x).into_tvalue()]).unwrap()
    }

    #[test]
    fn f16_operators_without_a_kernel_run_in_f32_between_casts() {
        let mut m = model();
        let x = [1.0, 0.25, -3.0];
        let before = run(&m, &x);
        assert_eq!(widen_f16(&mut m).unwrap(), 3, "add, softmax and less");
        let mut moved = 0;
        for node in m.nodes() {
            let name = node.op.name();
            let facts: Vec<DatumType> = node
                .inputs
                .iter()
                .map(|i| m.outlet_fact(*i).unwrap().datum_type)
                .chain(node.outputs.iter().map(|o| o.fact.datum_type))
                .collect();
            match name.as_ref() {
                "Add" | "Softmax" | "LT" => assert!(
                    facts.iter().all(|t| *t != DatumType::F16),
                    "{name} still on f16: {facts:?}"
                ),
                // Data movement stays on f16.
                "Gather" => {
                    assert_eq!(facts[0], DatumType::F16);
                    moved += 1;
                }
                "Const" => assert_ne!(
                    node.outputs[0].fact.datum_type,
                    DatumType::F16,
                    "the f16 weight is converted, not kept: {}",
                    node.name
                ),
                _ => {}
            }
        }
        assert_eq!(moved, 1);
        // The weight is converted now: the only casts are x's (shared by
        // add and less, or one each) and the two casts back.
        let casts_of_consts = m.nodes().iter().filter(|n| {
            n.op.name() == "Cast" && n.inputs.iter().any(|i| m.node(i.node).op_is::<Const>())
        });
        assert_eq!(casts_of_consts.count(), 0);
        let outputs: Vec<DatumType> = m
            .output_outlets()
            .unwrap()
            .iter()
            .map(|o| m.outlet_fact(*o).unwrap().datum_type)
            .collect();
        assert_eq!(outputs, [DatumType::F16, DatumType::Bool]);
        // The same values within an f16 rounding (tract's own f16 softmax
        // may round differently), the comparison exactly.
        let after = run(&m, &x);
        let values = |t: &TValue| -> Vec<f32> {
            let t = t.cast_to::<f32>().unwrap();
            let v = t.to_plain_array_view::<f32>().unwrap();
            v.iter().copied().collect()
        };
        for (a, b) in values(&before[0]).iter().zip(values(&after[0])) {
            assert!((a - b).abs() <= 1e-3 * a.abs(), "{a} vs {b}");
        }
        assert_eq!(before[1], after[1]);
        // The softmax of x + w, in f32 from the f16 sums, rounded once.
        let sums: Vec<f32> = [1.5f32, -0.75, -1.0].to_vec();
        let total: f32 = sums.iter().map(|s| s.exp()).sum();
        let want = [sums[2].exp() / total, sums[0].exp() / total].map(f16::from_f32);
        let got = after[0].to_plain_array_view::<f16>().unwrap();
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g.to_f32() - w.to_f32()).abs() <= w.to_f32() * 1e-3,
                "{g} vs {w}"
            );
        }
    }

    #[test]
    fn f16_division_stays_a_division_through_declutter() {
        let mut m = TypedModel::default();
        let x = m.add_source("x", f16::fact([3])).unwrap();
        let y = m.add_source("y", f16::fact([3])).unwrap();
        let c = m.add_const("c", f16s(&[3.0, 7.0, 0.1])).unwrap();
        let q = m.wire_node("q", math::div(), &[x, y]).unwrap()[0];
        let r = m.wire_node("r", math::div(), &[q, c]).unwrap()[0];
        m.select_output_outlets(&[r]).unwrap();
        assert_eq!(keep_f16_divisions(&mut m), 2);
        let mut m = m.into_decluttered().unwrap();
        widen_f16(&mut m).unwrap();
        let ops: Vec<String> = m.nodes().iter().map(|n| n.op.name().to_string()).collect();
        assert!(!ops.iter().any(|o| o == "Recip" || o == "Mul"), "{ops:?}");
        assert_eq!(ops.iter().filter(|o| *o == "Div").count(), 2, "{ops:?}");
        // 1/3 and 1/7 are not f16 numbers: x·f16(1/c) would round twice.
        let plan = m.into_runnable().unwrap();
        let xs = [1.0f32, 5.0, 0.3];
        let got = plan
            .run(tvec![
                f16s(&xs).into_tvalue(),
                f16s(&[1.0, 1.0, 1.0]).into_tvalue()
            ])
            .unwrap();
        let got = got[0].to_plain_array_view::<f16>().unwrap();
        for (i, (x, c)) in xs.iter().zip([3.0f32, 7.0, 0.1]).enumerate() {
            let c = f16::from_f32(c).to_f32();
            let want = f16::from_f32(f16::from_f32(*x).to_f32() / c);
            assert_eq!(got[i], want, "{x} / {c}");
        }
    }

    #[test]
    fn operators_with_f16_kernels_are_left_alone() {
        let mut m = TypedModel::default();
        let x = m.add_source("x", f16::fact([4])).unwrap();
        let idx = m.add_const("idx", tensor1(&[3i64, 1])).unwrap();
        let g = m.wire_node("g", Gather::new(0), &[x, idx]).unwrap()[0];
        let e = m.wire_node("e", math::exp(), &[g]).unwrap()[0];
        m.select_output_outlets(&[e]).unwrap();
        assert_eq!(widen_f16(&mut m).unwrap(), 0);
        assert!(m.nodes().iter().all(|n| n.op.name() != "Cast"));
    }
}

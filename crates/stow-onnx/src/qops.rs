//! onnxruntime's quantized contrib operators (domain `com.microsoft`)
//! that Stowage runs on u8/i8 tensors: `QLinearAdd`, `QLinearMul`,
//! `QLinearGlobalAveragePool` as operators of their own ([`QLinearBinary`],
//! [`QLinearGlobalAvgPool`]), and `QGemm` with a quantized output as
//! tract's quantized `EinSum` (the form `QLinearMatMul` takes, with a
//! bias). The other contrib operators become their definition in
//! standard ONNX before tract sees them ([`crate::qoperator`]), and
//! quantize–float operator–dequantize patterns become these
//! ([`crate::qoperator::fuse_qdq`]).
//!
//! Each computes what onnxruntime computes, with the runtime's own
//! functions, so that the runtime's kernel and this evaluation agree bit
//! for bit: QLinearAdd and QLinearMul with MLAS's f32 arithmetic
//! ([`stow_runtime::kernels::qpointwise::Formula`], which says how it
//! differs from the definition's order and why), the average pool as an
//! i32 sum, one combined f32 scale and the requantisation of a product's
//! sums ([`stow_runtime::kernels::qpointwise::pooled`]).

use stow_runtime::kernels::qpointwise::{Combine, Formula};
use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::einsum::EinSum;
use tract_onnx::tract_hir::internal::*;

/// The range of a quantized type.
fn range(dt: DatumType) -> TractResult<(f32, f32)> {
    Ok(match dt {
        DatumType::U8 => (0.0, 255.0),
        DatumType::I8 => (-128.0, 127.0),
        other => bail!("quantized operand of type {other:?}; handled: u8, i8"),
    })
}

/// One parameter (a scale or a zero point) as f32.
fn scalar(t: &Tensor, what: &str) -> TractResult<f32> {
    ensure!(t.len() == 1, "{what} has {} values; handled: one", t.len());
    t.cast_to_scalar::<f32>()
}

/// Which element-wise operator.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub(crate) enum BinaryKind {
    /// `QLinearAdd`.
    Add,
    /// `QLinearMul`.
    Mul,
}

/// `quantize(dequantize(a) ∘ dequantize(b))` in onnxruntime's arithmetic
/// ([`Formula`]) with numpy broadcasting, all
/// parameters per tensor. Inputs: a, a's scale, a's zero point, b, b's
/// scale, b's zero point, the output's scale and zero point (the output
/// has the type of its zero point).
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub(crate) struct QLinearBinary {
    /// Addition or multiplication.
    pub kind: BinaryKind,
}

impl Op for QLinearBinary {
    fn name(&self) -> StaticName {
        match self.kind {
            BinaryKind::Add => "QLinearAdd".into(),
            BinaryKind::Mul => "QLinearMul".into(),
        }
    }

    op_as_typed_op!();
}

impl EvalOp for QLinearBinary {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        ensure!(inputs.len() == 8, "{} takes 8 inputs", self.name());
        let p = |i: usize, what: &str| scalar(&inputs[i], what);
        let (a_s, a_z, b_s, b_z) = (
            p(1, "a scale")?,
            p(2, "a zero")?,
            p(4, "b scale")?,
            p(5, "b zero")?,
        );
        let (c_s, c_z) = (p(6, "output scale")?, p(7, "output zero")?);
        let out_dt = inputs[7].datum_type();
        let bounds = range(out_dt)?;
        let values = |x: &TValue| -> TractResult<tract_ndarray::ArrayD<f32>> {
            range(x.datum_type())?;
            Ok(x.cast_to::<f32>()?.to_plain_array_view::<f32>()?.to_owned())
        };
        let (a, b) = (values(&inputs[0])?, values(&inputs[3])?);
        let shape = tract_onnx::tract_core::broadcast::multi_broadcast(&[a.shape(), b.shape()])?;
        // The runtime's rows run along the output's last axis longer than
        // one; an operand that stays put along it joins the formula's
        // constant part (`Formula::with_a`, `with_b`).
        let last = shape.iter().rposition(|&d| d > 1);
        let put = |x: &tract_ndarray::ArrayD<f32>| {
            last.is_some_and(|k| {
                let lead = shape.len() - x.ndim();
                k < lead || x.shape()[k - lead] == 1
            })
        };
        let (a_put, b_put) = (put(&a), put(&b));
        let (a, b) = (
            a.broadcast(&*shape).context("broadcast a")?,
            b.broadcast(&*shape).context("broadcast b")?,
        );
        let combine = match self.kind {
            BinaryKind::Add => Combine::Add,
            BinaryKind::Mul => Combine::Mul,
        };
        let f = Formula::new(combine, (a_s, a_z), (b_s, b_z), (c_s, c_z), bounds);
        let y = tract_ndarray::Zip::from(&a).and(&b).map_collect(|&x, &w| {
            let g = match (a_put, b_put) {
                (false, true) => f.with_b(w),
                (true, false) => f.with_a(x),
                _ => f,
            };
            g.one(x, w)
        });
        Ok(tvec!(y
            .into_tensor()
            .cast_to_dt(out_dt)?
            .into_owned()
            .into_tvalue()))
    }
}

impl TypedOp for QLinearBinary {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ensure!(inputs.len() == 8, "{} takes 8 inputs", self.name());
        let shape = tract_onnx::tract_core::broadcast::multi_broadcast(&[
            inputs[0].shape.to_tvec(),
            inputs[3].shape.to_tvec(),
        ])?;
        Ok(tvec!(inputs[7].datum_type.fact(shape)))
    }

    as_op!();
}

/// `quantize(mean(dequantize(x)))` over the spatial axes, per tensor
/// parameters. Inputs: x, its scale and zero point, the output's scale
/// and zero point.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub(crate) struct QLinearGlobalAvgPool {
    /// NHWC (channels last) rather than NCHW.
    pub channels_last: bool,
}

impl QLinearGlobalAvgPool {
    /// The spatial axes of a rank `rank` input.
    fn spatial(&self, rank: usize) -> std::ops::Range<usize> {
        if self.channels_last {
            1..rank.saturating_sub(1)
        } else {
            2..rank
        }
    }
}

/// The pooled value of the integer sum of `x − zero` over `count`
/// elements, as onnxruntime's MLAS computes it (the runtime's
/// [`stow_runtime::kernels::qpointwise::pooled`], so that both agree).
pub(crate) fn pooled(
    sum: i64,
    count: usize,
    x_scale: f32,
    y_scale: f32,
    y_zero: f32,
    bounds: (f32, f32),
) -> f32 {
    stow_runtime::kernels::qpointwise::pooled(sum, count, x_scale, y_scale, y_zero, bounds)
}

impl Op for QLinearGlobalAvgPool {
    fn name(&self) -> StaticName {
        "QLinearGlobalAveragePool".into()
    }

    op_as_typed_op!();
}

impl EvalOp for QLinearGlobalAvgPool {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        ensure!(inputs.len() == 5, "QLinearGlobalAveragePool takes 5 inputs");
        let (x_s, x_z) = (
            scalar(&inputs[1], "x scale")?,
            scalar(&inputs[2], "x zero")?,
        );
        let (y_s, y_z) = (
            scalar(&inputs[3], "y scale")?,
            scalar(&inputs[4], "y zero")?,
        );
        let out_dt = inputs[4].datum_type();
        let bounds = range(out_dt)?;
        range(inputs[0].datum_type())?;
        let x = inputs[0].cast_to::<i32>()?;
        let x = x.to_plain_array_view::<i32>()?;
        let spatial = self.spatial(x.ndim());
        let mut shape: Vec<usize> = x.shape().to_vec();
        let count: usize = shape[spatial.clone()].iter().product();
        for d in &mut shape[spatial.clone()] {
            *d = 1;
        }
        let zero = x_z as i64;
        let mut sums = tract_ndarray::ArrayD::<i64>::zeros(shape.clone());
        for (ix, &v) in x.indexed_iter() {
            let mut at = tract_onnx::prelude::tract_ndarray::Dimension::slice(&ix).to_vec();
            for a in spatial.clone() {
                at[a] = 0;
            }
            sums[&*at] += i64::from(v) - zero;
        }
        let y = sums.mapv(|s| pooled(s, count, x_s, y_s, y_z, bounds));
        Ok(tvec!(y
            .into_tensor()
            .cast_to_dt(out_dt)?
            .into_owned()
            .into_tvalue()))
    }
}

impl TypedOp for QLinearGlobalAvgPool {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ensure!(inputs.len() == 5, "QLinearGlobalAveragePool takes 5 inputs");
        let mut shape = inputs[0].shape.to_tvec();
        ensure!(
            shape.len() >= 3,
            "QLinearGlobalAveragePool of a rank {} input",
            shape.len()
        );
        for a in self.spatial(shape.len()) {
            shape[a] = 1.to_dim();
        }
        Ok(tvec!(inputs[4].datum_type.fact(shape)))
    }

    as_op!();
}

/// Which of a node's inputs are given (ONNX marks an absent optional
/// input with an empty name, which tract drops).
fn present(node: &NodeProto, count: usize) -> TVec<bool> {
    (0..count)
        .map(|i| node.input.get(i).is_some_and(|n| !n.is_empty()))
        .collect()
}

/// The wires of all `present.len()` inputs, absent zero points made zero
/// constants of the type of `zero_like[i]`'s input.
fn complete(
    prefix: &str,
    model: &mut TypedModel,
    inputs: &[OutletId],
    present: &[bool],
    zero_like: &[(usize, usize)],
) -> TractResult<TVec<OutletId>> {
    let mut given = inputs.iter();
    let mut wires: TVec<Option<OutletId>> = present
        .iter()
        .map(|&p| if p { given.next().copied() } else { None })
        .collect();
    for &(zero, like) in zero_like {
        if wires[zero].is_none() {
            let like = wires[like].context("the quantized input is missing")?;
            let dt = model.outlet_fact(like)?.datum_type;
            let value = tensor0(0i32).cast_to_dt(dt)?.into_owned();
            wires[zero] = Some(model.add_const(format!("{prefix}.zero_point{zero}"), value)?);
        }
    }
    wires
        .into_iter()
        .enumerate()
        .map(|(i, w)| w.with_context(|| format!("input {i} is missing")))
        .collect()
}

/// `QLinearAdd` / `QLinearMul` before types are known.
#[derive(Debug, Clone)]
struct BinaryExpansion {
    kind: BinaryKind,
    present: TVec<bool>,
}

impl Expansion for BinaryExpansion {
    fn name(&self) -> StaticName {
        QLinearBinary { kind: self.kind }.name()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_output_arity(outputs, 1)?;
        s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?;
        let b = self.present[..3].iter().filter(|p| **p).count();
        s.given_2(&inputs[0].shape, &inputs[b].shape, move |s, a, b| {
            let shape = tract_onnx::tract_core::broadcast::multi_broadcast(&[a, b])?;
            s.equals(&outputs[0].shape, shape)
        })
    }

    fn wire(
        &self,
        prefix: &str,
        model: &mut TypedModel,
        inputs: &[OutletId],
    ) -> TractResult<TVec<OutletId>> {
        let mut wires = complete(
            prefix,
            model,
            inputs,
            &self.present,
            &[(2, 0), (5, 3), (7, 0)],
        )?;
        let ab = tract_onnx::tract_core::ops::change_axes::wire_rank_broadcast(
            prefix,
            model,
            &[wires[0], wires[3]],
        )?;
        wires[0] = ab[0];
        wires[3] = ab[1];
        model.wire_node(prefix, QLinearBinary { kind: self.kind }, &wires)
    }
}

/// `QLinearGlobalAveragePool` before types are known.
#[derive(Debug, Clone)]
struct PoolExpansion {
    channels_last: bool,
}

impl Expansion for PoolExpansion {
    fn name(&self) -> StaticName {
        "QLinearGlobalAveragePool".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 5)?;
        check_output_arity(outputs, 1)?;
        s.equals(&outputs[0].datum_type, &inputs[0].datum_type)?;
        s.equals(&outputs[0].rank, &inputs[0].rank)?;
        let op = QLinearGlobalAvgPool {
            channels_last: self.channels_last,
        };
        s.given(&inputs[0].shape, move |s, shape| {
            let mut shape = shape.clone();
            for a in op.spatial(shape.len()) {
                shape[a] = 1.to_dim();
            }
            s.equals(&outputs[0].shape, shape)
        })
    }

    fn wire(
        &self,
        prefix: &str,
        model: &mut TypedModel,
        inputs: &[OutletId],
    ) -> TractResult<TVec<OutletId>> {
        let op = QLinearGlobalAvgPool {
            channels_last: self.channels_last,
        };
        model.wire_node(prefix, op, inputs)
    }
}

/// `QGemm` with a quantized output, `alpha` 1 and `A` not transposed
/// (others are expanded before parsing): tract's quantized `EinSum`,
/// whose accumulator takes the bias `C` as onnxruntime's does.
#[derive(Debug, Clone)]
struct GemmExpansion {
    trans_b: bool,
    present: TVec<bool>,
}

impl Expansion for GemmExpansion {
    fn name(&self) -> StaticName {
        "QGemm".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_output_arity(outputs, 1)?;
        let y_zero = inputs.len() - 1;
        if self.present[8] {
            s.equals(&outputs[0].datum_type, &inputs[y_zero].datum_type)?;
        } else {
            s.equals(&outputs[0].datum_type, DatumType::U8)?;
        }
        s.equals(&outputs[0].rank, 2)?;
        let trans_b = self.trans_b;
        s.given_2(&inputs[0].shape, &inputs[3].shape, move |s, a, b| {
            if a.len() == 2 && b.len() == 2 {
                let n = if trans_b { b[0].clone() } else { b[1].clone() };
                s.equals(&outputs[0].shape, tvec![a[0].clone(), n])?;
            }
            Ok(())
        })
    }

    fn wire(
        &self,
        prefix: &str,
        model: &mut TypedModel,
        inputs: &[OutletId],
    ) -> TractResult<TVec<OutletId>> {
        ensure!(
            self.present[7],
            "QGemm `{prefix}` without y_scale reaches the int8 import"
        );
        let mut wires = complete(prefix, model, inputs, &self.present, &[(8, 0)])?;
        if !self.present[6] {
            wires[6] = model.add_const(format!("{prefix}.bias"), tensor0(0i32))?;
        }
        let n = {
            let b = model.outlet_fact(wires[3])?;
            ensure!(b.rank() == 2, "QGemm `{prefix}`: B of rank {}", b.rank());
            b.shape[if self.trans_b { 0 } else { 1 }].clone()
        };
        // Parameters with one value, of shape [1], become scalars; longer
        // ones run along the output's columns.
        let mut labels = Vec::new();
        for slot in [6, 1, 2, 4, 5, 7, 8] {
            let fact = model.outlet_fact(wires[slot])?.clone();
            let len = fact
                .shape
                .as_concrete()
                .map(|d| d.iter().product::<usize>());
            let label = match (fact.rank(), len) {
                (0, _) => "",
                (1, Some(1)) => {
                    let name = format!("{prefix}.scalar{slot}");
                    wires[slot] = model.wire_node(name, AxisOp::Rm(0), &[wires[slot]])?[0];
                    ""
                }
                (1, _) if fact.shape[0] == n && [6, 4, 5].contains(&slot) => "n",
                _ => bail!(
                    "QGemm `{prefix}`: input {slot} of shape {:?}; handled: one value, or one per column",
                    fact.shape
                ),
            };
            labels.push((slot, label));
        }
        let label = |slot: usize| labels.iter().find(|l| l.0 == slot).map_or("", |l| l.1);
        let b = if self.trans_b { "nk" } else { "kn" };
        let expr = format!(
            "mk,{b},{},{},{},{},{},{},{}->mn",
            label(6),
            label(2),
            label(1),
            label(5),
            label(4),
            label(8),
            label(7)
        );
        let out_dt = model.outlet_fact(wires[8])?.datum_type;
        let op = EinSum {
            axes: expr.parse()?,
            operating_dt: DatumType::I32,
            q_params: Some(out_dt),
        };
        // tract's order: a, b, bias, a0, a_scale, b0, b_scale, c0, c_scale.
        let ordered = [
            wires[0], wires[3], wires[6], wires[2], wires[1], wires[5], wires[4], wires[8],
            wires[7],
        ];
        model.wire_node(prefix, op, &ordered)
    }
}

/// Registers the operators with tract's ONNX parser.
pub(crate) fn register(onnx: &mut tract_onnx::Onnx) {
    onnx.op_register.insert("QLinearAdd", |_, node| {
        let present = present(node, 8);
        Ok((
            expand(BinaryExpansion {
                kind: BinaryKind::Add,
                present,
            }),
            vec![],
        ))
    });
    onnx.op_register.insert("QLinearMul", |_, node| {
        let present = present(node, 8);
        Ok((
            expand(BinaryExpansion {
                kind: BinaryKind::Mul,
                present,
            }),
            vec![],
        ))
    });
    onnx.op_register
        .insert("QLinearGlobalAveragePool", |_, node| {
            let channels_last = node.get_attr_opt::<i64>("channels_last")?.unwrap_or(0) != 0;
            Ok((expand(PoolExpansion { channels_last }), vec![]))
        });
    onnx.op_register.insert("QGemm", |_, node| {
        let trans_b = node.get_attr_opt::<i64>("transB")?.unwrap_or(0) != 0;
        Ok((
            expand(GemmExpansion {
                trans_b,
                present: present(node, 9),
            }),
            vec![],
        ))
    });
}

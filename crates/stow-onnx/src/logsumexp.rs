//! `ReduceLogSumExp` shifted by its maximum, as onnxruntime computes it.
//!
//! tract-onnx 0.23.9 wires `ln(Σ exp(x))` as written: `exp` overflows
//! to infinity from x ≈ 88.7 on in f32, and for a tiny x the sum rounds
//! to 1 and the result to 0 where it is x (`tools/fuzz_graphs.py`, seed
//! 2027, graph 2239: 0 instead of 9.3e-20). Here it is
//! `m + ln(Σ exp(x − m))` with `m` the maximum over the same axes,
//! clamped to the finite range so that a row of −∞ (or +∞) gives −∞ (or
//! +∞) rather than NaN. Both operator-set forms are read: axes as an
//! attribute (before 18) or as a constant input, with
//! `noop_with_empty_axes`.

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::change_axes::{wire_with_rank_broadcast, AxisOp};
use tract_onnx::tract_core::ops::math;
use tract_onnx::tract_core::ops::nn::{Reduce as TypedReduce, Reducer as TypedReducer};
use tract_onnx::tract_hir::internal::*;
use tract_onnx::tract_hir::ops::nn::{Reduce, Reducer};

#[derive(Debug, Clone)]
struct LogSumExp {
    /// Axes from the attribute (operator sets before 18).
    axes: Option<Vec<i64>>,
    /// Axes from input 1 (operator set 18 on).
    axes_input: bool,
    keep_dims: bool,
    noop_with_empty_axes: bool,
}

impl LogSumExp {
    /// The axes to reduce for a given axes list (empty: all, or none with
    /// `noop_with_empty_axes`).
    fn resolve(&self, axes: Vec<i64>, rank: usize) -> Vec<i64> {
        if !axes.is_empty() || self.noop_with_empty_axes {
            axes
        } else {
            (0..rank as i64).collect()
        }
    }
}

impl Expansion for LogSumExp {
    fn name(&self) -> StaticName {
        "ReduceLogSumExp".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 1 + self.axes_input as usize)?;
        check_output_arity(outputs, 1)?;
        s.equals(&inputs[0].datum_type, &outputs[0].datum_type)?;
        let shape_rule = move |s: &mut Solver<'r>, axes: Vec<i64>| -> InferenceResult {
            let keep = self.keep_dims;
            if keep {
                s.equals(&inputs[0].rank, &outputs[0].rank)?;
            } else {
                s.equals(inputs[0].rank.bex() - axes.len() as i64, &outputs[0].rank)?;
            }
            s.given(&inputs[0].shape, move |s, shape| {
                let op = Reduce::new(Some(axes.clone()), keep, Reducer::LogSumExp);
                s.equals(&outputs[0].shape, op.output_shape(&shape))
            })
        };
        if self.axes_input {
            s.given_2(&inputs[0].rank, &inputs[1].value, move |s, rank, axes| {
                let axes = axes.cast_to::<i64>()?;
                let axes = axes.try_as_plain_ram()?.as_slice::<i64>()?.to_vec();
                shape_rule(s, self.resolve(axes, rank as usize))
            })
        } else {
            s.given(&inputs[0].rank, move |s, rank| {
                let axes = self.axes.clone().unwrap_or_default();
                shape_rule(s, self.resolve(axes, rank as usize))
            })
        }
    }

    fn wire(
        &self,
        prefix: &str,
        model: &mut TypedModel,
        inputs: &[OutletId],
    ) -> TractResult<TVec<OutletId>> {
        let fact = model.outlet_fact(inputs[0])?.clone();
        let rank = fact.rank();
        let given = if self.axes_input {
            let axes = model
                .outlet_fact(inputs[1])?
                .konst
                .clone()
                .context("ReduceLogSumExp: the axes must be a constant")?;
            axes.cast_to::<i64>()?
                .try_as_plain_ram()?
                .as_slice::<i64>()?
                .to_vec()
        } else {
            self.axes.clone().unwrap_or_default()
        };
        let mut axes: Vec<usize> = self
            .resolve(given, rank)
            .into_iter()
            .map(|a| {
                let a = if a < 0 { a + rank as i64 } else { a };
                ensure!(
                    (0..rank as i64).contains(&a),
                    "ReduceLogSumExp axis out of range for rank {rank}"
                );
                Ok(a as usize)
            })
            .collect::<TractResult<_>>()?;
        axes.sort_unstable();
        axes.dedup();
        let x = inputs[0];
        if axes.is_empty() {
            return Ok(tvec!(x));
        }
        let dt = fact.datum_type;
        let max = model.wire_node(
            format!("{prefix}.max"),
            TypedReduce::new(axes.iter().copied().collect(), TypedReducer::Max),
            &[x],
        )?[0];
        let highest = tensor0(f32::MAX).cast_to_dt(dt)?.into_owned();
        let lowest = tensor0(f32::MIN).cast_to_dt(dt)?.into_owned();
        let highest = model.add_const(format!("{prefix}.highest"), highest)?;
        let lowest = model.add_const(format!("{prefix}.lowest"), lowest)?;
        let shift = wire_with_rank_broadcast(
            format!("{prefix}.below"),
            model,
            math::min(),
            &[max, highest],
        )?[0];
        let shift = wire_with_rank_broadcast(
            format!("{prefix}.shift"),
            model,
            math::max(),
            &[shift, lowest],
        )?[0];
        let mut y =
            wire_with_rank_broadcast(format!("{prefix}.centred"), model, math::sub(), &[x, shift])?
                [0];
        y = model.wire_node(format!("{prefix}.exp"), math::exp(), &[y])?[0];
        y = model.wire_node(
            format!("{prefix}.sum"),
            TypedReduce::new(axes.iter().copied().collect(), TypedReducer::Sum),
            &[y],
        )?[0];
        y = model.wire_node(format!("{prefix}.ln"), math::ln(), &[y])?[0];
        y = wire_with_rank_broadcast(format!("{prefix}.unshift"), model, math::add(), &[y, shift])?
            [0];
        if !self.keep_dims {
            for &axis in axes.iter().rev() {
                y = model.wire_node(format!("{prefix}.rm{axis}"), AxisOp::Rm(axis), &[y])?[0];
            }
        }
        Ok(tvec!(y))
    }
}

/// Registers `ReduceLogSumExp` with tract's ONNX parser.
pub(crate) fn register(onnx: &mut tract_onnx::Onnx) {
    onnx.op_register.insert("ReduceLogSumExp", |ctx, node| {
        let axes_input = ctx.onnx_operator_set_version >= 18;
        let op = LogSumExp {
            axes: if axes_input {
                None
            } else {
                node.get_attr_opt_vec("axes")?
            },
            axes_input: axes_input && node.input.get(1).is_some_and(|a| !a.is_empty()),
            keep_dims: node.get_attr_opt("keepdims")?.unwrap_or(1i64) == 1,
            noop_with_empty_axes: node.get_attr_opt("noop_with_empty_axes")?.unwrap_or(0i64) == 1,
        };
        Ok((expand(op), vec![]))
    });
}

//! ONNX operators imported our way instead of tract-onnx 0.23.9's.
//!
//! - `Softplus`: tract expands it into `ln(1 + exp(x))`, which is `inf`
//!   from x ≈ 88.7 on in f32 while the true value is about x (found by
//!   `tools/fuzz_graphs.py`). Here it is one `Softplus` step, computed as
//!   `max(x, 0) + ln(1 + exp(−|x|))`.
//! - `BatchNormalization`: tract accepts only constant scale, bias, mean
//!   and variance. Models exported from TensorFlow compute them (a layer
//!   normalisation becomes `FusedBatchNormV3` over statistics of the
//!   data). Here the affine form `x·slope + intercept` is wired from the
//!   inputs, whatever they are; constant ones fold to the same two
//!   constants tract would make.

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::change_axes::wire_with_rank_broadcast;
use tract_onnx::tract_core::ops::element_wise::{ElementWiseMiniOp, ElementWiseOp};
use tract_onnx::tract_core::ops::math;
use tract_onnx::tract_hir::internal::*;

/// `ln(1 + exp(x))` without overflow.
pub(crate) fn softplus(x: f32) -> f32 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

/// The element-wise operator.
#[derive(Debug, Clone, PartialEq, Eq)]
struct StableSoftplus;

impl ElementWiseMiniOp for StableSoftplus {
    fn name(&self) -> String {
        "Softplus".into()
    }

    fn eval_in_place(&self, t: &mut Tensor, _out_dt: Option<DatumType>) -> TractResult<()> {
        let dt = t.datum_type();
        let mut plain = t.try_as_plain_ram_mut()?;
        match dt {
            DatumType::F32 => plain
                .as_slice_mut::<f32>()?
                .iter_mut()
                .for_each(|x| *x = softplus(*x)),
            DatumType::F64 => plain
                .as_slice_mut::<f64>()?
                .iter_mut()
                .for_each(|x| *x = x.max(0.0) + (-x.abs()).exp().ln_1p()),
            other => bail!("Softplus of {other:?}"),
        }
        Ok(())
    }
}

/// The ONNX operator, typed as [`StableSoftplus`].
#[derive(Debug, Clone)]
struct SoftplusExpansion;

impl Expansion for SoftplusExpansion {
    fn name(&self) -> StaticName {
        "Softplus".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 1)?;
        check_output_arity(outputs, 1)?;
        s.equals(&inputs[0].datum_type, &outputs[0].datum_type)?;
        s.equals(&inputs[0].shape, &outputs[0].shape)?;
        Ok(())
    }

    fn wire(
        &self,
        prefix: &str,
        model: &mut TypedModel,
        inputs: &[OutletId],
    ) -> TractResult<TVec<OutletId>> {
        model.wire_node(
            prefix,
            ElementWiseOp(Box::new(StableSoftplus), None),
            inputs,
        )
    }
}

/// `BatchNormalization` in inference mode, channels on axis 1.
#[derive(Debug, Clone)]
struct BatchNorm {
    epsilon: f32,
}

impl Expansion for BatchNorm {
    fn name(&self) -> StaticName {
        "BatchNormalization".into()
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
        s.equals(&inputs[0].shape, &outputs[0].shape)?;
        for param in &inputs[1..] {
            s.equals(&param.datum_type, &inputs[0].datum_type)?;
            s.equals(&param.rank, 1)?;
        }
        s.given(&inputs[0].shape, move |s, shape| {
            if let Some(channels) = shape.get(1) {
                for param in &inputs[1..] {
                    s.equals(&param.shape[0], channels.clone())?;
                }
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
        let x = model.outlet_fact(inputs[0])?.clone();
        ensure!(
            x.rank() >= 2,
            "BatchNormalization of a rank {} input (channels are axis 1)",
            x.rank()
        );
        let [scale, beta, mean, var] = [inputs[1], inputs[2], inputs[3], inputs[4]];
        let epsilon = tensor0(self.epsilon).cast_to_dt(x.datum_type)?.into_owned();
        let epsilon = model.add_const(format!("{prefix}.epsilon"), epsilon)?;
        let binary = |model: &mut TypedModel, name: &str, op: TypedBinOp, a, b| {
            wire_with_rank_broadcast(format!("{prefix}.{name}"), model, op, &[a, b]).map(|w| w[0])
        };
        let shifted = binary(model, "var_eps", math::add(), var, epsilon)?;
        let deviation = model.wire_node(format!("{prefix}.sqrt"), math::sqrt(), &[shifted])?[0];
        let slope = binary(model, "slope", math::div(), scale, deviation)?;
        let centre = binary(model, "mean_slope", math::mul(), mean, slope)?;
        let intercept = binary(model, "intercept", math::sub(), beta, centre)?;
        // [C] → [1, C, 1, …] so that the products broadcast over axis 1.
        let per_channel = |model: &mut TypedModel, name: &str, mut wire| -> TractResult<_> {
            wire = model.wire_node(format!("{prefix}.{name}.n"), AxisOp::Add(0), &[wire])?[0];
            for axis in 2..x.rank() {
                wire = model.wire_node(
                    format!("{prefix}.{name}.{axis}"),
                    AxisOp::Add(axis),
                    &[wire],
                )?[0];
            }
            Ok(wire)
        };
        let slope = per_channel(model, "slope_axes", slope)?;
        let intercept = per_channel(model, "intercept_axes", intercept)?;
        let scaled = model.wire_node(format!("{prefix}.mul"), math::mul(), &[slope, inputs[0]])?[0];
        model.wire_node(prefix, math::add(), &[intercept, scaled])
    }
}

/// tract's ONNX parser with the operators of this module in place of
/// tract's own.
pub(crate) fn onnx() -> tract_onnx::Onnx {
    let mut onnx = tract_onnx::onnx();
    onnx.op_register
        .insert("Softplus", |_, _| Ok((expand(SoftplusExpansion), vec![])));
    onnx.op_register.insert("BatchNormalization", |_, node| {
        let epsilon = node.get_attr_opt("epsilon")?.unwrap_or(1e-5);
        let spatial: i64 = node.get_attr_opt("spatial")?.unwrap_or(1);
        ensure!(
            spatial == 1,
            "BatchNormalization with spatial=0 (removed in operator set 9)"
        );
        ensure!(
            node.output.len() <= 1 || node.output[1..].iter().all(|o| o.is_empty()),
            "BatchNormalization in training mode (running statistics as outputs)"
        );
        Ok((expand(BatchNorm { epsilon }), vec![]))
    });
    onnx
}

#[cfg(test)]
mod tests {
    use super::softplus;

    #[test]
    fn softplus_is_finite_and_close_to_its_definition() {
        for i in -2000..=2000 {
            let x = i as f32 * 0.05;
            let y = softplus(x);
            let exact = (x as f64).exp().ln_1p();
            assert!(y.is_finite(), "softplus({x}) = {y}");
            assert!(
                ((y as f64) - exact).abs() <= 2e-7 * exact.max(1.0),
                "softplus({x}) = {y}, want {exact}"
            );
        }
        assert_eq!(softplus(1000.0), 1000.0);
        assert!(softplus(-200.0) >= 0.0);
    }
}

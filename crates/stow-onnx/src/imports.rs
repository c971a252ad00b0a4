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
//! - `Celu`: tract's expansion leaves out the multiplication by α of the
//!   negative part (`min(0, exp(x/α) − 1)`), wrong for every negative
//!   input when α ≠ 1 (found by the node suite's `test_celu_float16`;
//!   `test_celu` has positive inputs only). Here it is expanded as ONNX
//!   specifies.
//! - `MaxPool` with its `Indices` output: tract's own conversion of its
//!   indices to ONNX's is a private operator whose attributes cannot be
//!   read back to be recorded in the bundle. Here it is [`MaxPoolIndices`],
//!   which does the same and whose attributes are recorded.
//! - `QuantizeLinear`, `DequantizeLinear`: see [`crate::quantize`].
//! - onnxruntime's `QLinearAdd`, `QLinearMul`, `QLinearGlobalAveragePool`,
//!   `QGemm`: see [`crate::qops`].
//! - `LayerNormalization`: see [`crate::norms`].
//! - `ReduceLogSumExp`: see [`crate::logsumexp`].

use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::change_axes::wire_with_rank_broadcast;
use tract_onnx::tract_core::ops::element_wise::{ElementWiseMiniOp, ElementWiseOp};
use tract_onnx::tract_core::ops::math;
use tract_onnx::tract_hir::internal::*;
use tract_onnx::tract_hir::ops::cnn::{HirMaxPool, PaddingSpec, PoolSpec};
use tract_onnx::tract_hir::ops::nn::DataFormat;

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

/// ONNX `Celu`: `max(0, x) + min(0, α·(exp(x/α) − 1))`, one operator a
/// step in the order the ONNX reference computes it (so f16 rounds where
/// numpy does).
#[derive(Debug, Clone)]
struct CeluExpansion {
    alpha: f32,
}

impl Expansion for CeluExpansion {
    fn name(&self) -> StaticName {
        "Celu".into()
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
        use tract_onnx::tract_hir::ops::activations::broadcast_scalar;
        let mut constant = |name: &str, value: f32| -> TractResult<OutletId> {
            let v = broadcast_scalar(value, model, inputs)?;
            model.add_const(format!("{prefix}.{name}"), v)
        };
        let (zero, one, alpha) = (
            constant("zero", 0.0)?,
            constant("one", 1.0)?,
            constant("alpha", self.alpha)?,
        );
        let x = inputs[0];
        let bin = |model: &mut TypedModel, name: &str, op: TypedBinOp, a, b| {
            model.wire_node(name, op, &[a, b]).map(|w| w[0])
        };
        let scaled = bin(
            model,
            &format!("{prefix}.x_over_alpha"),
            math::div(),
            x,
            alpha,
        )?;
        let exp = model.wire_node(format!("{prefix}.exp"), math::exp(), &[scaled])?[0];
        let minus_one = bin(model, &format!("{prefix}.minus_one"), math::sub(), exp, one)?;
        let times_alpha = bin(
            model,
            &format!("{prefix}.times_alpha"),
            math::mul(),
            alpha,
            minus_one,
        )?;
        let negative = bin(
            model,
            &format!("{prefix}.negative"),
            math::min(),
            zero,
            times_alpha,
        )?;
        let positive = bin(model, &format!("{prefix}.positive"), math::max(), zero, x)?;
        Ok(tvec![bin(model, prefix, math::add(), positive, negative)?])
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

/// `MaxPool` with both outputs: tract's pool, whose indices count within
/// each (image, channel) plane in row-major order, then
/// [`MaxPoolIndices`].
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
struct MaxPoolWithIndices {
    pool: HirMaxPool,
    column_major: bool,
}

impl Expansion for MaxPoolWithIndices {
    fn name(&self) -> StaticName {
        "MaxPool".into()
    }

    fn nboutputs(&self) -> TractResult<usize> {
        Ok(2)
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        self.pool.rules(s, inputs, outputs)
    }

    fn wire(
        &self,
        prefix: &str,
        model: &mut TypedModel,
        inputs: &[OutletId],
    ) -> TractResult<TVec<OutletId>> {
        let shape = model.outlet_fact(inputs[0])?.shape.clone();
        ensure!(
            shape.rank() >= 3,
            "MaxPool of a rank {} input (images, channels, then at least one spatial axis)",
            shape.rank()
        );
        let spatial_dims = shape[2..]
            .iter()
            .map(|d| d.to_usize().ok())
            .collect::<Option<TVec<usize>>>()
            .context("MaxPool indices need the input's spatial dimensions known")?;
        let pooled = self.pool.wire(prefix, model, inputs)?;
        let indices = model.wire_node(
            format!("{prefix}.indices"),
            MaxPoolIndices {
                spatial_dims,
                column_major: self.column_major,
            },
            &[pooled[1]],
        )?[0];
        Ok(tvec!(pooled[0], indices))
    }
}

/// Turns tract's MaxPool indices (within each plane of an NCHW input,
/// row-major) into ONNX's: flattened over the whole input, counting the
/// planes before, with the spatial part column-major for
/// `storage_order = 1`.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub(crate) struct MaxPoolIndices {
    /// Spatial dimensions of the pool's input.
    pub spatial_dims: TVec<usize>,
    /// `storage_order = 1`.
    pub column_major: bool,
}

impl MaxPoolIndices {
    /// The ONNX index of tract's index `within` plane `plane`, `None`
    /// when it lies outside the plane or overflows.
    pub(crate) fn onnx_index(&self, plane: usize, within: i64) -> Option<i64> {
        let plane_len: usize = self.spatial_dims.iter().product();
        let mut within = usize::try_from(within).ok().filter(|&w| w < plane_len)?;
        if self.column_major {
            // Coordinates from the last (fastest) axis, then weighted by
            // the product of the axes before each.
            let mut coords = tvec![0usize; self.spatial_dims.len()];
            for (coord, &dim) in coords.iter_mut().zip(&self.spatial_dims).rev() {
                *coord = within % dim;
                within /= dim;
            }
            let (mut index, mut stride) = (0, 1);
            for (coord, dim) in coords.iter().zip(&self.spatial_dims) {
                index += coord * stride;
                stride *= dim;
            }
            within = index;
        }
        let index = plane.checked_mul(plane_len)?.checked_add(within)?;
        i64::try_from(index).ok()
    }
}

impl Op for MaxPoolIndices {
    fn name(&self) -> StaticName {
        "MaxPoolIndices".into()
    }

    op_as_typed_op!();
}

impl EvalOp for MaxPoolIndices {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let indices = args_1!(inputs);
        let per_plane: usize = indices.shape().get(2..).unwrap_or(&[]).iter().product();
        let mut indices = indices.into_tensor().cast_to::<i64>()?.into_owned();
        for (plane, chunk) in indices
            .try_as_plain_ram_mut()?
            .as_slice_mut::<i64>()?
            .chunks_mut(per_plane.max(1))
            .enumerate()
        {
            for index in chunk {
                *index = self
                    .onnx_index(plane, *index)
                    .with_context(|| format!("MaxPool index {index} outside its plane"))?;
            }
        }
        Ok(tvec!(indices.into_tvalue()))
    }
}

impl TypedOp for MaxPoolIndices {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        Ok(tvec!(i64::fact(inputs[0].shape.clone())))
    }

    as_op!();
}

/// ONNX `MaxPool` as tract-onnx 0.23.9 reads it, but for the indices
/// output (see [`MaxPoolWithIndices`]).
fn max_pool(
    _ctx: &tract_onnx::model::ParsingContext,
    node: &tract_onnx::pb::NodeProto,
) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let kernel_shape: TVec<usize> = node.get_attr_tvec("kernel_shape")?;
    let ceil_mode = node.get_attr_opt::<isize>("ceil_mode")?.unwrap_or(0) == 1;
    let rank = kernel_shape.len();
    let padding = if let Some(pads) = node.get_attr_opt_tvec::<usize>("pads")? {
        ensure!(
            pads.len() == 2 * rank,
            "MaxPool: {} pads for {rank} spatial axes",
            pads.len()
        );
        PaddingSpec::ExplicitOnnxPool(pads[..rank].into(), pads[rank..].into(), ceil_mode)
    } else {
        match node.get_attr_opt::<&str>("auto_pad")?.unwrap_or("NOTSET") {
            "NOTSET" => PaddingSpec::ExplicitOnnxPool(tvec!(0; rank), tvec!(0; rank), ceil_mode),
            "VALID" => PaddingSpec::Valid,
            "SAME_UPPER" => PaddingSpec::SameUpper,
            "SAME_LOWER" => PaddingSpec::SameLower,
            other => bail!("MaxPool: auto_pad {other}"),
        }
    };
    let pool_spec = PoolSpec::new(
        DataFormat::NCHW,
        kernel_shape,
        padding,
        node.get_attr_opt_tvec("dilations")?,
        node.get_attr_opt_tvec("strides")?,
        0,
        0,
    );
    let indices = node.output.get(1).is_some_and(|o| !o.is_empty());
    if indices {
        let column_major = node.get_attr_opt::<i64>("storage_order")?.unwrap_or(0) == 1;
        let pool = HirMaxPool::new(pool_spec, Some(i64::datum_type()));
        Ok((expand(MaxPoolWithIndices { pool, column_major }), vec![]))
    } else {
        Ok((expand(HirMaxPool::new(pool_spec, None)), vec![]))
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
    onnx.op_register.insert("MaxPool", max_pool);
    crate::quantize::register(&mut onnx);
    crate::qops::register(&mut onnx);
    crate::norms::register(&mut onnx);
    crate::logsumexp::register(&mut onnx);
    onnx.op_register.insert("Celu", |_, node| {
        let alpha = node.get_attr_opt("alpha")?.unwrap_or(1.0);
        Ok((expand(CeluExpansion { alpha }), vec![]))
    });
    onnx
}

#[cfg(test)]
mod tests {
    use super::{softplus, MaxPoolIndices};
    use tract_onnx::prelude::tvec;

    #[test]
    fn maxpool_indices_are_onnx_flat_indices() {
        let row = MaxPoolIndices {
            spatial_dims: tvec![2, 3, 4],
            column_major: false,
        };
        let column = MaxPoolIndices {
            column_major: true,
            ..row.clone()
        };
        for d in 0..2 {
            for h in 0..3 {
                for w in 0..4 {
                    let within = ((d * 3 + h) * 4 + w) as i64;
                    assert_eq!(row.onnx_index(2, within), Some(48 + within));
                    let flipped = (d + h * 2 + w * 6) as i64;
                    assert_eq!(column.onnx_index(2, within), Some(48 + flipped));
                }
            }
        }
        assert_eq!(row.onnx_index(0, 24), None);
        assert_eq!(column.onnx_index(0, -1), None);
        assert_eq!(row.onnx_index(usize::MAX, 0), None);
    }

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

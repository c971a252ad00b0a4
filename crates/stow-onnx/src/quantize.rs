//! ONNX `QuantizeLinear` and `DequantizeLinear` imported as one operator
//! each ([`Quantize`], [`Dequantize`]) instead of tract-onnx 0.23.9's.
//!
//! tract quantizes by multiplying with the reciprocal of the scale where
//! ONNX divides by it; the two round some values to different integers
//! (a value at x/scale = k + ½ in exact arithmetic lands on either side).
//! Its per-channel form is a chain of divisions, which tract's own
//! simplification then turns into the same multiplication. Here each is
//! one operator that keeps the scale and zero point as its inputs,
//! per tensor or along one axis, and computes ONNX's formula: the
//! runtime's kernel and this evaluation (the reference of `stow verify`)
//! agree with it bit for bit. One operator per quantization step is
//! also the form that int8 kernels can later recognise around a
//! convolution or product.

use tract_onnx::pb::NodeProto;
use tract_onnx::prelude::*;
use tract_onnx::tract_hir::internal::*;

/// Integer types a quantization maps to.
fn quantized_type(dt: DatumType) -> Option<(f32, f32)> {
    Some(match dt {
        DatumType::U8 => (u8::MIN as f32, u8::MAX as f32),
        DatumType::I8 => (i8::MIN as f32, i8::MAX as f32),
        DatumType::U16 => (u16::MIN as f32, u16::MAX as f32),
        DatumType::I16 => (i16::MIN as f32, i16::MAX as f32),
        _ => return None,
    })
}

/// ONNX's `TensorProto.DataType` codes of the types above.
fn onnx_type(code: i64) -> Option<DatumType> {
    Some(match code {
        2 => DatumType::U8,
        3 => DatumType::I8,
        4 => DatumType::U16,
        5 => DatumType::I16,
        _ => return None,
    })
}

/// `round_half_to_even(x / scale) + zero_point`, saturated to the output
/// type, with scale and zero point per tensor or along `axis`.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub(crate) struct Quantize {
    /// The axis the parameters run along (`None`: one for the tensor).
    pub axis: Option<usize>,
    /// The output's integer type.
    pub to: DatumType,
}

/// `(x − zero_point) · scale` into f32, the parameters per tensor or along
/// `axis`.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub(crate) struct Dequantize {
    /// The axis the parameters run along (`None`: one for the tensor).
    pub axis: Option<usize>,
}

/// The parameter index of each element of a tensor of `shape`.
fn parameter_index(shape: &[usize], axis: Option<usize>) -> impl Fn(usize) -> usize {
    let (n, inner) = match axis {
        Some(a) => (shape[a], shape[a + 1..].iter().product::<usize>()),
        None => (1, 1),
    };
    move |i| (i / inner.max(1)) % n.max(1)
}

fn check_parameters(
    what: &str,
    shape: &[usize],
    axis: Option<usize>,
    params: &[&Tensor],
) -> TractResult<()> {
    let want = axis.map_or(1, |a| shape[a]);
    for p in params {
        ensure!(
            p.len() == want,
            "{what}: {} parameters for {want} along axis {axis:?} of shape {shape:?}",
            p.len()
        );
    }
    Ok(())
}

impl Op for Quantize {
    fn name(&self) -> StaticName {
        "QuantizeLinear".into()
    }

    op_as_typed_op!();
}

impl EvalOp for Quantize {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let (x, scale, zero) = args_3!(inputs);
        let x = x.cast_to::<f32>()?;
        let zero_f = zero.cast_to::<f32>()?;
        check_parameters("QuantizeLinear", x.shape(), self.axis, &[&scale, &zero])?;
        let (lo, hi) = quantized_type(self.to).context("QuantizeLinear output type")?;
        let index = parameter_index(x.shape(), self.axis);
        let (xs, ss, zs) = (
            x.try_as_plain_ram()?.as_slice::<f32>()?.to_vec(),
            scale.try_as_plain_ram()?.as_slice::<f32>()?.to_vec(),
            zero_f.try_as_plain_ram()?.as_slice::<f32>()?.to_vec(),
        );
        let q: Vec<f32> = xs
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let p = index(i);
                ((v / ss[p]).round_ties_even() + zs[p]).clamp(lo, hi)
            })
            .collect();
        let out = tract_ndarray::ArrayD::from_shape_vec(x.shape(), q)?.into_tensor();
        Ok(tvec!(out.cast_to_dt(self.to)?.into_owned().into_tvalue()))
    }
}

impl TypedOp for Quantize {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        Ok(tvec!(self.to.fact(inputs[0].shape.clone())))
    }

    as_op!();
}

impl Op for Dequantize {
    fn name(&self) -> StaticName {
        "DequantizeLinear".into()
    }

    op_as_typed_op!();
}

impl EvalOp for Dequantize {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let (x, scale, zero) = args_3!(inputs);
        let x = x.cast_to::<f32>()?;
        let zero_f = zero.cast_to::<f32>()?;
        check_parameters("DequantizeLinear", x.shape(), self.axis, &[&scale, &zero])?;
        let index = parameter_index(x.shape(), self.axis);
        let (ss, zs) = (
            scale.try_as_plain_ram()?.as_slice::<f32>()?.to_vec(),
            zero_f.try_as_plain_ram()?.as_slice::<f32>()?.to_vec(),
        );
        let y: Vec<f32> = x
            .try_as_plain_ram()?
            .as_slice::<f32>()?
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let p = index(i);
                (v - zs[p]) * ss[p]
            })
            .collect();
        let out = tract_ndarray::ArrayD::from_shape_vec(x.shape(), y)?.into_tensor();
        Ok(tvec!(out.into_tvalue()))
    }
}

impl TypedOp for Dequantize {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        Ok(tvec!(f32::fact(inputs[0].shape.clone())))
    }

    as_op!();
}

/// Either ONNX operator, before the input's rank is known.
#[derive(Debug, Clone)]
struct Linear {
    quantize: bool,
    /// ONNX's `axis` (may be negative).
    axis: i64,
    /// The output type a QuantizeLinear without a zero point gives.
    default_to: DatumType,
}

impl Expansion for Linear {
    fn name(&self) -> StaticName {
        if self.quantize {
            "QuantizeLinear".into()
        } else {
            "DequantizeLinear".into()
        }
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        if inputs.len() != 2 && inputs.len() != 3 {
            bail!("{} takes 2 or 3 inputs, not {}", self.name(), inputs.len());
        }
        check_output_arity(outputs, 1)?;
        s.equals(&inputs[1].datum_type, f32::datum_type())?;
        s.equals(&inputs[0].shape, &outputs[0].shape)?;
        if self.quantize {
            if inputs.len() == 3 {
                s.equals(&outputs[0].datum_type, &inputs[2].datum_type)?;
            } else {
                s.equals(&outputs[0].datum_type, self.default_to)?;
            }
        } else {
            s.equals(&outputs[0].datum_type, f32::datum_type())?;
            if inputs.len() == 3 {
                s.equals(&inputs[0].datum_type, &inputs[2].datum_type)?;
            }
        }
        Ok(())
    }

    fn wire(
        &self,
        prefix: &str,
        model: &mut TypedModel,
        inputs: &[OutletId],
    ) -> TractResult<TVec<OutletId>> {
        let op = self.name();
        let x = model.outlet_fact(inputs[0])?.clone();
        let scale = model.outlet_fact(inputs[1])?.clone();
        // The parameters may be graph inputs or computed (the expanded
        // DynamicQuantizeLinear): only their sizes must be known.
        let length = |fact: &TypedFact, what: &str| -> TractResult<usize> {
            fact.shape
                .as_concrete()
                .map(|d| d.iter().product())
                .with_context(|| format!("{op} `{prefix}`: the {what}'s shape must be known"))
        };
        let scale_len = length(&scale, "scale")?;
        let zero_dt = if self.quantize {
            inputs.get(2).map_or(Ok(self.default_to), |z| {
                model.outlet_fact(*z).map(|f| f.datum_type)
            })?
        } else {
            x.datum_type
        };
        if self.quantize {
            ensure!(
                quantized_type(zero_dt).is_some(),
                "{op} `{prefix}` into {zero_dt:?}: Stowage quantizes to u8, i8, u16 or i16"
            );
            ensure!(
                matches!(
                    x.datum_type,
                    DatumType::F32 | DatumType::F16 | DatumType::I32
                ),
                "{op} `{prefix}` of {:?}",
                x.datum_type
            );
        } else {
            ensure!(
                quantized_type(zero_dt).is_some() || zero_dt == DatumType::I32,
                "{op} `{prefix}` of {zero_dt:?}: Stowage dequantizes u8, i8, u16, i16 and i32"
            );
        }
        let zero = match inputs.get(2) {
            Some(z) => *z,
            None => model.add_const(
                format!("{prefix}.zero_point"),
                tensor0(0i32).cast_to_dt(zero_dt)?.into_owned(),
            )?,
        };
        let zero_len = length(&model.outlet_fact(zero)?.clone(), "zero point")?;
        let axis = if scale_len > 1 || zero_len > 1 {
            let rank = x.rank() as i64;
            ensure!(
                (-rank..rank).contains(&self.axis),
                "{op} `{prefix}`: axis {} of a rank {rank} input",
                self.axis
            );
            let axis = self.axis.rem_euclid(rank) as usize;
            let dim = x.shape[axis].to_usize().ok();
            for (what, len) in [("scale", scale_len), ("zero point", zero_len)] {
                ensure!(
                    dim == Some(len),
                    "{op} `{prefix}`: {len} {what} values along axis {axis} of shape {:?}",
                    x.shape
                );
            }
            Some(axis)
        } else {
            None
        };
        let inputs = [inputs[0], inputs[1], zero];
        if self.quantize {
            model.wire_node(prefix, Quantize { axis, to: zero_dt }, &inputs)
        } else {
            model.wire_node(prefix, Dequantize { axis }, &inputs)
        }
    }
}

fn linear(quantize: bool, node: &NodeProto) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)> {
    let block: i64 = node.get_attr_opt("block_size")?.unwrap_or(0);
    ensure!(
        block == 0,
        "{} with block_size {block}: blocked quantization is not supported",
        node.op_type
    );
    let default_to = match node.get_attr_opt::<i64>("output_dtype")?.unwrap_or(0) {
        0 => DatumType::U8,
        code => {
            onnx_type(code).with_context(|| format!("{} into ONNX type {code}", node.op_type))?
        }
    };
    let axis = node.get_attr_opt("axis")?.unwrap_or(1);
    Ok((
        expand(Linear {
            quantize,
            axis,
            default_to,
        }),
        vec![],
    ))
}

/// Registers both operators with tract's ONNX parser.
pub(crate) fn register(onnx: &mut tract_onnx::Onnx) {
    onnx.op_register
        .insert("QuantizeLinear", |_, node| linear(true, node));
    onnx.op_register
        .insert("DequantizeLinear", |_, node| linear(false, node));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(op: Box<dyn TypedOp>, x: Tensor, scale: Tensor, zero: Tensor) -> Tensor {
        let inputs = tvec!(x.into_tvalue(), scale.into_tvalue(), zero.into_tvalue());
        let out = op.eval_out_of_plan(inputs).unwrap().unwrap();
        out[0].clone().into_tensor()
    }

    #[test]
    fn quantizing_divides_rounds_half_to_even_and_saturates() {
        let x = tensor1(&[0.0f32, 0.5, 1.5, 2.5, -0.5, 300.0, -300.0, 0.3]);
        let op = Box::new(Quantize {
            axis: None,
            to: DatumType::U8,
        });
        let q = run(op, x.clone(), tensor0(1.0f32), tensor0(10u8));
        assert_eq!(q, tensor1(&[10u8, 10, 12, 12, 10, 255, 0, 10]));
        let op = Box::new(Quantize {
            axis: None,
            to: DatumType::I8,
        });
        let q = run(op, x, tensor0(0.1f32), tensor0(0i8));
        assert_eq!(q, tensor1(&[0i8, 5, 15, 25, -5, 127, -128, 3]));
    }

    #[test]
    fn per_axis_parameters_follow_their_axis() {
        // Shape [2, 3]: axis 1 has three scales.
        let x = tensor2(&[[1.0f32, 1.0, 1.0], [2.0, 2.0, 2.0]]);
        let scale = tensor1(&[1.0f32, 0.5, 0.25]);
        let zero = tensor1(&[0i8, 1, 2]);
        let q = run(
            Box::new(Quantize {
                axis: Some(1),
                to: DatumType::I8,
            }),
            x,
            scale.clone(),
            zero.clone(),
        );
        assert_eq!(q, tensor2(&[[1i8, 3, 6], [2, 5, 10]]));
        let back = run(Box::new(Dequantize { axis: Some(1) }), q, scale, zero);
        assert_eq!(back, tensor2(&[[1.0f32, 1.0, 1.0], [2.0, 2.0, 2.0]]));
    }

    #[test]
    fn division_and_reciprocal_disagree_where_onnx_divides() {
        // Find a value where x·(1/s) and x/s round to different integers,
        // and check the operator takes the division's.
        let s = 0.1f32;
        let x = (0..200_000)
            .map(|i| i as f32 * 0.0137)
            .find(|x| {
                let div = (x / s).round_ties_even();
                div <= 65535.0 && div != (x * s.recip()).round_ties_even()
            })
            .expect("a value where the two roundings differ");
        let op = Box::new(Quantize {
            axis: None,
            to: DatumType::U16,
        });
        let q = run(op, tensor1(&[x]), tensor0(s), tensor0(0u16));
        let want = (x / s).round_ties_even() as u16;
        assert_eq!(q, tensor1(&[want]));
    }
}

//! `LayerNormalization` as one operator, its statistics taken in f64.
//!
//! tract-onnx 0.23.9 expands it into a sum, a multiplication by the
//! rounded reciprocal of the count, a subtraction, and so on, all in f32.
//! Over a row whose values are all equal, that mean is one ulp off the
//! value; the difference, divided by √ε, comes out as 0.00255 where
//! onnxruntime and `onnx.reference` give exactly 0
//! (`tools/fuzz_graphs.py`, seed 2026, graph 7153). Summed in f64, a mean
//! of up to 2²⁹ f32 values is exact when they are equal, and the
//! normalised row is exactly zero, as it is in onnxruntime (whose kernel
//! also accumulates in double).
//!
//! [`LayerNorm`] normalises the axes from `axis` on; the scale and bias
//! ride along when each has one value per normalised element (the usual
//! case: the shape of the normalised axes). Any other broadcast (a scale
//! of one value, or one per channel) is applied after it by tract's own
//! multiplication and addition. A scale or bias that does not broadcast
//! to the normalised shape is refused, as onnxruntime refuses it. A node that asks for the
//! `Mean` or `InvStdDev` outputs, or a `stash_type` other than f32, is left
//! to tract's expansion.

use std::sync::OnceLock;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::broadcast::multi_broadcast;
use tract_onnx::tract_core::ops::cast::cast;
use tract_onnx::tract_core::ops::change_axes::wire_with_rank_broadcast;
use tract_onnx::tract_core::ops::math;
use tract_onnx::tract_hir::internal::*;

/// Normalises `x` over its axes from `axis` on: `(x − mean) / √(var + ε)`,
/// then `· scale + bias` when they are given (inputs 1 and 2, one value
/// per normalised element). f32 or f64.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LayerNorm {
    /// The first normalised axis.
    pub axis: usize,
    /// ε.
    pub epsilon: f32,
}

impl std::hash::Hash for LayerNorm {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.axis.hash(state);
        self.epsilon.to_bits().hash(state);
    }
}

impl Eq for LayerNorm {}

/// `(x − mean) / √(var + ε)` of each row of `n` values, statistics in f64.
fn normalised_rows(x: &[f64], n: usize, epsilon: f32) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(n.max(1)) {
        let mean = row.iter().sum::<f64>() / n as f64;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
        let inv = 1.0 / (var + f64::from(epsilon)).sqrt();
        out.extend(row.iter().map(|v| (v - mean) * inv));
    }
    out
}

/// The values of `t`, in row-major order.
fn values<T: Datum + Copy>(t: &TValue) -> TractResult<Vec<T>> {
    Ok(t.to_plain_array_view::<T>()?.iter().copied().collect())
}

impl LayerNorm {
    /// `y` in the input's type, scaled and shifted there (as the runtime
    /// does): the normalised value rounded once, then `· scale + bias`.
    fn eval_f32(&self, inputs: &[TValue], n: usize) -> TractResult<Tensor> {
        let x: Vec<f64> = values::<f32>(&inputs[0])?
            .into_iter()
            .map(f64::from)
            .collect();
        let scale = inputs.get(1).map(values::<f32>).transpose()?;
        let bias = inputs.get(2).map(values::<f32>).transpose()?;
        let y: Vec<f32> = normalised_rows(&x, n, self.epsilon)
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                let y = v as f32 * scale.as_ref().map_or(1.0, |s| s[i % n]);
                y + bias.as_ref().map_or(0.0, |b| b[i % n])
            })
            .collect();
        Ok(tract_ndarray::ArrayD::from_shape_vec(inputs[0].shape(), y)?.into_tensor())
    }

    fn eval_f64(&self, inputs: &[TValue], n: usize) -> TractResult<Tensor> {
        let scale = inputs.get(1).map(values::<f64>).transpose()?;
        let bias = inputs.get(2).map(values::<f64>).transpose()?;
        let y: Vec<f64> = normalised_rows(&values::<f64>(&inputs[0])?, n, self.epsilon)
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                v * scale.as_ref().map_or(1.0, |s| s[i % n])
                    + bias.as_ref().map_or(0.0, |b| b[i % n])
            })
            .collect();
        Ok(tract_ndarray::ArrayD::from_shape_vec(inputs[0].shape(), y)?.into_tensor())
    }
}

impl Op for LayerNorm {
    fn name(&self) -> StaticName {
        "LayerNormalization".into()
    }

    fn info(&self) -> TractResult<Vec<String>> {
        Ok(vec![format!(
            "axis: {}, epsilon: {}",
            self.axis, self.epsilon
        )])
    }

    op_as_typed_op!();
}

impl EvalOp for LayerNorm {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        ensure!(
            (1..=3).contains(&inputs.len()),
            "LayerNormalization takes 1 to 3 inputs"
        );
        let shape = inputs[0].shape();
        let n: usize = shape[self.axis.min(shape.len())..].iter().product();
        for p in &inputs[1..] {
            ensure!(
                p.len() == n,
                "LayerNormalization parameter of {} values for rows of {n}",
                p.len()
            );
        }
        let y = match inputs[0].datum_type() {
            DatumType::F32 => self.eval_f32(&inputs, n)?,
            DatumType::F64 => self.eval_f64(&inputs, n)?,
            dt => bail!("LayerNormalization of {dt:?}"),
        };
        Ok(tvec!(y.into_tvalue()))
    }
}

impl TypedOp for LayerNorm {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ensure!(
            self.axis < inputs[0].rank(),
            "LayerNormalization axis {} of a rank {} input",
            self.axis,
            inputs[0].rank()
        );
        Ok(tvec!(inputs[0].without_value()))
    }

    as_op!();
}

/// The ONNX node's attributes.
#[derive(Debug, Clone)]
struct LayerNormExpansion {
    axis: i64,
    epsilon: f32,
    have_bias: bool,
}

impl LayerNormExpansion {
    /// Whether parameter `fact` holds one value per element of the
    /// normalised axes `normalised`, in their order.
    fn one_per_element(fact: &TypedFact, normalised: &[TDim], dt: DatumType) -> bool {
        let shape = fact.shape.to_tvec();
        if fact.datum_type != dt || shape.len() > normalised.len() {
            return false;
        }
        let pad = normalised.len() - shape.len();
        normalised[..pad].iter().all(|d| *d == 1.to_dim())
            && normalised[pad..].iter().zip(&shape).all(|(a, b)| a == b)
            && shape.iter().all(|d| d.to_usize().is_ok())
    }
}

impl Expansion for LayerNormExpansion {
    fn name(&self) -> StaticName {
        "LayerNormalization".into()
    }

    fn rules<'r, 'p: 'r, 's: 'r>(
        &'s self,
        s: &mut Solver<'r>,
        inputs: &'p [TensorProxy],
        outputs: &'p [TensorProxy],
    ) -> InferenceResult {
        check_input_arity(inputs, 2 + self.have_bias as usize)?;
        check_output_arity(outputs, 1)?;
        s.equals(&inputs[0].datum_type, &inputs[1].datum_type)?;
        s.equals(&inputs[0].datum_type, &outputs[0].datum_type)?;
        if self.have_bias {
            s.equals(&inputs[0].datum_type, &inputs[2].datum_type)?;
        }
        s.equals(&inputs[0].shape, &outputs[0].shape)
    }

    fn wire(
        &self,
        prefix: &str,
        model: &mut TypedModel,
        inputs: &[OutletId],
    ) -> TractResult<TVec<OutletId>> {
        let fact = model.outlet_fact(inputs[0])?.clone();
        let rank = fact.rank() as i64;
        let axis = if self.axis < 0 {
            self.axis + rank
        } else {
            self.axis
        };
        ensure!(
            (0..rank).contains(&axis),
            "LayerNormalization axis {} of a rank {rank} input",
            self.axis
        );
        let axis = axis as usize;
        let dt = fact.datum_type;
        // ONNX computes the statistics in f32 (stash_type 1) whatever the
        // input type; f64 inputs keep their precision here.
        let compute = if dt == DatumType::F64 {
            DatumType::F64
        } else {
            DatumType::F32
        };
        let normalised = fact.shape.to_tvec()[axis..].to_vec();
        let params = &inputs[1..];
        for (&p, what) in params.iter().zip(["scale", "bias"]) {
            let shape = model.outlet_fact(p)?.shape.to_tvec();
            let fits = multi_broadcast(&[&normalised[..], &shape[..]])
                .is_ok_and(|b| b.len() == normalised.len() && b[..] == normalised[..]);
            ensure!(
                fits,
                "LayerNormalization {what} of shape {shape:?} does not broadcast to the normalised \
                 shape {normalised:?} (the input's axes from {axis} on)"
            );
        }
        let fused = dt == compute
            && params.iter().all(|&p| {
                model
                    .outlet_fact(p)
                    .is_ok_and(|f| Self::one_per_element(f, &normalised, dt))
            });
        let op = LayerNorm {
            axis,
            epsilon: self.epsilon,
        };
        if fused {
            let mut wires: TVec<OutletId> = tvec![inputs[0]];
            wires.extend(params.iter().copied());
            return model.wire_node(prefix, op, &wires);
        }
        let mut x = inputs[0];
        if dt != compute {
            x = model.wire_node(format!("{prefix}.cast_in"), cast(compute), &[x])?[0];
        }
        let mut y = model.wire_node(format!("{prefix}.normalised"), op, &[x])?[0];
        if dt != compute {
            y = model.wire_node(format!("{prefix}.cast_out"), cast(dt), &[y])?[0];
        }
        y = wire_with_rank_broadcast(
            format!("{prefix}.scaled"),
            model,
            math::mul(),
            &[y, params[0]],
        )?[0];
        if let Some(&bias) = params.get(1) {
            y = wire_with_rank_broadcast(
                format!("{prefix}.biased"),
                model,
                math::add(),
                &[y, bias],
            )?[0];
        }
        Ok(tvec!(y))
    }
}

type OpBuilder = fn(
    &tract_onnx::model::ParsingContext,
    &tract_onnx::pb::NodeProto,
) -> TractResult<(Box<dyn InferenceOp>, Vec<String>)>;

/// tract's own builder, for the nodes [`LayerNorm`] does not take.
static TRACT_LAYER_NORM: OnceLock<Option<OpBuilder>> = OnceLock::new();

/// Registers `LayerNormalization` with tract's ONNX parser.
pub(crate) fn register(onnx: &mut tract_onnx::Onnx) {
    let tract_own = onnx.op_register.0.get("LayerNormalization").copied();
    TRACT_LAYER_NORM.get_or_init(|| tract_own);
    onnx.op_register.insert("LayerNormalization", |ctx, node| {
        let statistics_wanted = node.output.iter().skip(1).any(|o| !o.is_empty());
        let stash_type: i64 = node.get_attr_opt("stash_type")?.unwrap_or(1);
        if statistics_wanted || stash_type != 1 {
            let tract_own = TRACT_LAYER_NORM
                .get()
                .copied()
                .flatten()
                .ok_or_else(|| format_err!("LayerNormalization has no builder"))?;
            return tract_own(ctx, node);
        }
        let axis = node.get_attr_opt("axis")?.unwrap_or(-1);
        let epsilon = node.get_attr_opt("epsilon")?.unwrap_or(1e-5);
        let have_bias = node.input.get(2).is_some_and(|b| !b.is_empty());
        Ok((
            expand(LayerNormExpansion {
                axis,
                epsilon,
                have_bias,
            }),
            vec![],
        ))
    });
}

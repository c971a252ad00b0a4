//! Keeping tract's optimizer away from rewrites that change what a model
//! computes.
//!
//! tract-onnx 0.23.9 declutters a few patterns into something else (found
//! by `tools/fuzz_graphs.py`, each with a case in `testdata/regress/`):
//!
//! - `c − conv(x)` and `c / conv(x)` are folded into the convolution's
//!   kernel and bias as if they were `conv(x) − c` and `conv(x) / c`;
//! - a stride taken after a `SAME_UPPER`/`SAME_LOWER` convolution is moved
//!   into it, where the padding is then recomputed for the new stride;
//! - a stride taken after a Softmax is moved before it, along the axis the
//!   Softmax normalises;
//! - a strided Slice that does not start at 0, after a convolution, is
//!   moved into the convolution as a stride, losing the start offset;
//! - `Mod` (tract's `Rem`) is taken for commutative, so when its first
//!   operand is the smaller one of a broadcast the operands are swapped:
//!   [`guard`] gives it [`OrderedRem`], the same operation that says it is
//!   not.
//!
//! Before decluttering, [`guard`] makes such padding explicit and puts a
//! [`Barrier`] on the edges where a rewrite must not cross; tract sees
//! through a barrier neither axes nor values. After the last declutter,
//! [`lift`] removes the barriers: they never reach the bundle.
//!
//! One more barrier cannot be placed beforehand, as the edge it guards is
//! made while decluttering: [`declutter`] runs tract's declutter with a pass
//! that keeps axis changes off convolution biases (see [`ConvBiasBarriers`]).

use crate::error::{OnnxError, Stage};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::*;
use tract_onnx::tract_core::ops::array::StridedSlice;
use tract_onnx::tract_core::ops::binary::{BinMiniOp, TypedBinOp};
use tract_onnx::tract_core::ops::cnn::{Conv, PaddingSpec};
use tract_onnx::tract_core::ops::downsample::Downsample;
use tract_onnx::tract_core::ops::konst::Const;
use tract_onnx::tract_core::ops::math::{Div, Rem, Sub};
use tract_onnx::tract_core::ops::nn::Softmax;
use tract_onnx::tract_core::optim::{Optimizer, OptimizerSession, TypedPass};

/// The identity, opaque to tract's optimizer.
#[derive(Debug, Clone, Default, Hash, PartialEq, Eq)]
pub(crate) struct Barrier;

impl Op for Barrier {
    fn name(&self) -> StaticName {
        "StowageBarrier".into()
    }

    op_as_typed_op!();
}

impl EvalOp for Barrier {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        Ok(inputs)
    }
}

impl TypedOp for Barrier {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        Ok(tvec!(inputs[0].without_value()))
    }

    as_op!();
}

/// tract's `Rem`, not commutative: tract 0.23.9 leaves `is_commutative`
/// at its default (true) for `Rem`, and its declutter then swaps the
/// operands of a `Rem` whose first operand is the smaller.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub(crate) struct OrderedRem;

impl BinMiniOp for OrderedRem {
    fn name(&self) -> &'static str {
        Rem.name()
    }

    fn result_datum_type(&self, a: DatumType, b: DatumType) -> TractResult<DatumType> {
        Rem.result_datum_type(a, b)
    }

    fn eval_in_a(&self, a: &mut Tensor, b: &Tensor) -> TractResult<()> {
        Rem.eval_in_a(a, b)
    }

    fn eval_out_of_place(&self, c: &mut Tensor, a: &Tensor, b: &Tensor) -> TractResult<()> {
        Rem.eval_out_of_place(c, a, b)
    }

    fn eval(&self, a: TValue, b: TValue, c_dt: DatumType) -> TractResult<Tensor> {
        Rem.eval(a, b, c_dt)
    }

    fn is_commutative(&self) -> bool {
        false
    }
}

/// Makes the padding of every `SAME_*` convolution explicit and puts a
/// barrier on every edge a wrong rewrite would cross.
pub(crate) fn guard(model: &mut TypedModel) -> Result<(), OnnxError> {
    explicit_conv_padding(model)?;
    for id in 0..model.nodes().len() {
        let node = model.node_mut(id);
        if let Some(bin) = node.op_as::<TypedBinOp>() {
            if bin.0.is::<Rem>() {
                node.op = Box::new(TypedBinOp(Box::new(OrderedRem), bin.1));
            }
        }
    }
    let mut edges: Vec<(usize, usize)> = Vec::new();
    for node in model.nodes() {
        if let Some(bin) = node.op_as::<TypedBinOp>() {
            let inverse = bin.0.is::<Sub>() || bin.0.is::<Div>();
            let divisor = node.inputs.get(1).copied();
            if let (true, Some(outlet)) = (inverse, divisor) {
                let constant = model
                    .outlet_fact(outlet)
                    .map(|f| f.konst.is_some())
                    .unwrap_or(true);
                if !constant {
                    edges.push((node.id, 1));
                }
            }
        }
        // Strided Slices stay where the model takes them: pulled up, a
        // stride can lose the offset the Slice applies first.
        if let Some(slice) = node.op_as::<StridedSlice>() {
            let unit_steps = slice
                .optional_steps_input
                .and_then(|ix| node.inputs.get(ix))
                .and_then(|o| model.outlet_fact(*o).ok()?.konst.clone())
                .and_then(|steps| steps.cast_to::<i64>().ok().map(|s| s.into_owned()))
                .is_some_and(|steps| {
                    steps
                        .try_as_plain_ram()
                        .ok()
                        .and_then(|p| p.as_slice::<i64>().ok().map(|s| s.iter().all(|&s| s == 1)))
                        .unwrap_or(false)
                });
            if slice.optional_steps_input.is_some() && !unit_steps {
                edges.push((node.id, 0));
            }
        }
        if node.op_is::<Downsample>() {
            edges.push((node.id, 0));
        }
        for (slot, input) in node.inputs.iter().enumerate() {
            if model.node(input.node).op_is::<Softmax>() {
                edges.push((node.id, slot));
            }
        }
    }
    edges.sort_unstable();
    edges.dedup();
    for (node, slot) in edges {
        let outlet = model.node(node).inputs[slot];
        let name = format!("{}.barrier{slot}", model.node(node).name);
        let barrier = model
            .wire_node(name, Barrier, &[outlet])
            .map_err(|e| OnnxError::tract(Stage::Declutter, e))?[0];
        model
            .add_edge(barrier, InletId::new(node, slot))
            .map_err(|e| OnnxError::tract(Stage::Declutter, e))?;
    }
    Ok(())
}

/// tract's declutter, with [`ConvBiasBarriers`] run just before each
/// `ChangeAxes` pass.
pub(crate) fn declutter(model: &mut TypedModel) -> Result<(), OnnxError> {
    let mut optimizer = Optimizer::declutter();
    let change_axes = optimizer
        .passes
        .iter()
        .position(|p| format!("{p:?}") == "ChangeAxes")
        .ok_or_else(|| {
            OnnxError::tract(Stage::Declutter, "no ChangeAxes pass in tract's declutter")
        })?;
    optimizer.add_pass(change_axes, Box::new(ConvBiasBarriers));
    optimizer
        .optimize(model)
        .map_err(|e| OnnxError::tract(Stage::Declutter, e))
}

/// Puts a barrier on the bias edge of every convolution whose bias is not a
/// constant.
///
/// tract folds a per-channel `Add`, `Sub`, `Mul` or `Div` after a
/// convolution into its bias: the bias becomes a small chain of reshapes
/// (`RmAxis`) and binary operations on constants, folded into one constant
/// by the next round's `PropConst`. The round's `ChangeAxes` pass runs
/// before that, and each `RmAxis` suggests adding its axis back. That
/// change flows down the chain into the convolution's bias input, which
/// `Conv::change_axes` takes for a change of its data input (it only
/// handles axis removals on the bias): it adds a spatial axis to the
/// convolution and leaves the bias a matrix, and the patch fails (Conv:
/// "Bias should be scalar or a vector"). It is built, and fails, when the
/// data side absorbs the change, as 1x1 convolutions (einsums) on both
/// sides do (open_nsfw).
///
/// The barrier stops the change at the bias. A barrier passes its input's
/// value on when evaluated, so the next `PropConst` folds a constant chain
/// and its barrier into one constant bias, as without the barrier; a bias
/// computed from the model's inputs keeps its barrier until [`lift`].
#[derive(Clone, Debug, Default)]
pub(crate) struct ConvBiasBarriers;

impl TypedPass for ConvBiasBarriers {
    fn reset(&mut self) -> TractResult<()> {
        Ok(())
    }

    fn next(
        &mut self,
        _session: &mut OptimizerSession,
        _model: &TypedModel,
    ) -> TractResult<Option<TypedModelPatch>> {
        Ok(None)
    }

    fn run_direct(&mut self, model: &mut TypedModel) -> TractResult<bool> {
        let unguarded: Vec<(usize, OutletId)> = model
            .nodes()
            .iter()
            .filter(|n| n.op_is::<Conv>())
            .filter_map(|n| Some((n.id, *n.inputs.get(2)?)))
            .filter(|(_, bias)| {
                let source = model.node(bias.node);
                !source.op_is::<Const>() && !source.op_is::<Barrier>()
            })
            .collect();
        for &(conv, bias) in &unguarded {
            // Named as the bias, the name of the constant it folds into.
            let name = model.unique_name(format!("{}.bias", model.node(conv).name));
            let barrier = model.wire_node(name, Barrier, &[bias])?[0];
            model.add_edge(barrier, InletId::new(conv, 2))?;
        }
        Ok(!unguarded.is_empty())
    }
}

/// Removes every barrier, wiring its input to its consumers.
pub(crate) fn lift(model: &mut TypedModel) -> Result<(), OnnxError> {
    while let Some(node) = model.nodes().iter().find(|n| n.op_is::<Barrier>()).cloned() {
        let patch = TypedModelPatch::rewire(model, &node.inputs, &[node.id.into()], &|_, xs| {
            Ok(xs.into())
        })
        .map_err(|e| OnnxError::tract(Stage::Declutter, e))?;
        patch
            .apply(model)
            .map_err(|e| OnnxError::tract(Stage::Declutter, e))?;
    }
    model
        .compact()
        .map_err(|e| OnnxError::tract(Stage::Declutter, e))
}

fn explicit_conv_padding(model: &mut TypedModel) -> Result<(), OnnxError> {
    for id in 0..model.nodes().len() {
        let Some(conv) = model.node(id).op_as::<Conv>() else {
            continue;
        };
        let spec = &conv.pool_spec;
        if !matches!(
            spec.padding,
            PaddingSpec::SameUpper | PaddingSpec::SameLower
        ) {
            continue;
        }
        let input = model.node(id).inputs[0];
        let shape = model
            .outlet_fact(input)
            .map_err(|e| OnnxError::tract(Stage::Declutter, e))?
            .shape
            .to_tvec();
        let data = spec
            .data_format
            .shape(shape)
            .map_err(|e| OnnxError::tract(Stage::Declutter, e))?;
        let computed = spec.computed_padding(data.hw_dims());
        let before = computed.iter().map(|d| d.pad_before.to_usize().ok());
        let after = computed.iter().map(|d| d.pad_after.to_usize().ok());
        let (Some(before), Some(after)) = (
            before.collect::<Option<TVec<usize>>>(),
            after.collect::<Option<TVec<usize>>>(),
        ) else {
            continue;
        };
        let mut explicit = conv.clone();
        explicit.pool_spec.padding = PaddingSpec::Explicit(before, after);
        model.node_mut(id).op = Box::new(explicit);
    }
    Ok(())
}

//! Patch-based execution: a chain of spatial operators run band by band
//! over the rows of its output, so that its large early activations never
//! exist whole.
//!
//! A *stage* runs from one tensor (`from`, kept whole; a graph input is
//! then cut into bands of rows, see `input_rows.rs`) to a later one
//! (`to`, assembled whole at the end) through operators that map rows to
//! rows: convolutions and pools (a window over the rows), and element-wise
//! operators, products that leave the two spatial axes alone and adding
//! leading axes (row for row). The rewrite replaces the stage by steps:
//! step `t` computes rows `[t·rows, (t+1)·rows)` of `to`, and of every
//! tensor inside the stage exactly the rows not computed at an earlier
//! step that this step needs. A row is never computed twice: where a
//! window needs rows of an earlier step (the halo), they are sliced from
//! that step's band and joined to the new rows. The price is copying
//! those joins instead of computing anything again, and the peak falls
//! from whole tensors to bands of a few rows.
//!
//! Every band is an ordinary operator of the rewritten model (a
//! convolution over fewer rows with the padding of the rows it touches,
//! `Slice` and `Concat` on the row axis), so the planner, the runtime and
//! `stow verify` treat it like any other model.

use crate::error::{OnnxError, Stage as ErrorStage};
use std::collections::{HashMap, HashSet};
use stow_bundle::format::PATCH_ATTR;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::{ensure, format_err, InOut};
use tract_onnx::tract_core::ops;
use tract_onnx::tract_core::ops::cnn::{PaddingSpec, PoolSpec};
use tract_onnx::tract_core::ops::konst::Const;
use tract_onnx::tract_core::ops::nn::DataFormat;

/// A stage run in bands of rows: from tensor `from` (kept whole) to
/// tensor `to`, `rows` rows of `to` per step. Tensors are named as
/// `stow inspect` names them (the ONNX value name, or the producing
/// node's name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatchedStage {
    /// The stage's input.
    pub from: String,
    /// The stage's output.
    pub to: String,
    /// Rows of `to` computed per step.
    pub rows: usize,
}

impl PatchedStage {
    /// `FROM:TO:ROWS`, the form `stow compile --patch` takes and the
    /// bundle records.
    pub fn parse(text: &str) -> Result<PatchedStage, OnnxError> {
        let bad = || {
            OnnxError::BadArgument(format!(
                "patched stage `{text}`: expected FROM:TO:ROWS (two tensor names and a row count)"
            ))
        };
        let (rest, rows) = text.rsplit_once(':').ok_or_else(bad)?;
        let rows: usize = rows.trim().parse().map_err(|_| bad())?;
        // Tensor names may hold ':' themselves: the last one separates the
        // two names (ONNX value names are often numbers, `798`; a name
        // with a ':' of its own goes first, or in the recorded form).
        let (from, to) = rest.rsplit_once(':').ok_or_else(bad)?;
        if from.is_empty() || to.is_empty() || rows == 0 {
            return Err(bad());
        }
        Ok(PatchedStage {
            from: from.to_string(),
            to: to.to_string(),
            rows,
        })
    }
}

impl PatchedStage {
    /// The form a bundle records ([`PATCH_ATTR`]): the two names and the
    /// rows on lines of their own, which no name can make ambiguous.
    pub fn to_record(&self) -> String {
        format!("{}\n{}\n{}", self.from, self.to, self.rows)
    }

    /// Reads [`PatchedStage::to_record`]'s form (or `FROM:TO:ROWS`).
    pub fn from_record(text: &str) -> Result<PatchedStage, OnnxError> {
        let parts: Vec<&str> = text.split('\n').collect();
        match parts[..] {
            [from, to, rows] if !from.is_empty() && !to.is_empty() => Ok(PatchedStage {
                from: from.to_string(),
                to: to.to_string(),
                rows: rows.parse().ok().filter(|&r| r > 0).ok_or_else(|| {
                    OnnxError::BadArgument(format!("recorded stage `{text}`: bad row count"))
                })?,
            }),
            [_] => PatchedStage::parse(text),
            _ => Err(OnnxError::BadArgument(format!(
                "recorded stage `{text}`: expected three lines"
            ))),
        }
    }
}

impl std::fmt::Display for PatchedStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.from, self.to, self.rows)
    }
}

/// How an operator's output rows depend on its input rows.
#[derive(Clone, Debug)]
enum RowMap {
    /// Output row `o` reads input row `o` only.
    Same,
    /// Output row `o` reads input rows `o·stride − before` up to
    /// `o·stride − before + span − 1` (span: the dilated kernel height).
    Window {
        span: usize,
        stride: usize,
        before: usize,
        /// The padding of the width axis, unchanged in every band.
        width: (usize, usize),
    },
    /// Output row `o` is input row `o·stride + offset` (a strided slice).
    Sample { stride: usize, offset: usize },
}

impl RowMap {
    /// Input rows `[first, end)` that output rows `[o0, o1)` read, clipped
    /// to the `height` rows the input has, with the padding rows above and
    /// below that the clipping leaves out.
    fn input_rows(&self, o0: usize, o1: usize, height: usize) -> (usize, usize, usize, usize) {
        match *self {
            RowMap::Same => (o0, o1, 0, 0),
            RowMap::Sample { stride, offset } => {
                (o0 * stride + offset, (o1 - 1) * stride + offset + 1, 0, 0)
            }
            RowMap::Window {
                span,
                stride,
                before,
                ..
            } => {
                let start = (o0 * stride) as isize - before as isize;
                let end = ((o1 - 1) * stride + span) as isize - before as isize;
                let first = start.max(0) as usize;
                let last = (end.max(0) as usize).min(height);
                let pad_above = (first as isize - start) as usize;
                let pad_below = (end - last as isize).max(0) as usize;
                (first, last.max(first), pad_above, pad_below)
            }
        }
    }
}

/// Rank of an outlet's shape, and its rows (axis `rank − 2`), if concrete.
fn rows_of(model: &TypedModel, outlet: OutletId) -> Option<(usize, usize)> {
    let fact = model.outlet_fact(outlet).ok()?;
    let shape = fact.shape.as_concrete()?;
    (shape.len() >= 2).then(|| (shape.len(), shape[shape.len() - 2]))
}

fn is_const(model: &TypedModel, outlet: OutletId) -> bool {
    model.node(outlet.node).op_is::<Const>()
}

/// The window of a pool spec over rows, or why it cannot be banded.
fn window(spec: &PoolSpec, input: &[usize]) -> Result<RowMap, String> {
    if !matches!(spec.data_format, DataFormat::NCHW | DataFormat::CHW) || spec.rank() != 2 {
        return Err("not a two-dimensional channels-first window".into());
    }
    if let PaddingSpec::ExplicitOnnxPool(_, _, true) = spec.padding {
        return Err("a pool in ceil mode".into());
    }
    let spatial = &input[input.len() - 2..];
    let padding = spec.computed_padding(spatial);
    Ok(RowMap::Window {
        span: (spec.kernel_shape[0] - 1) * spec.dilation(0) + 1,
        stride: spec.stride(0),
        before: padding[0].pad_before,
        width: (padding[1].pad_before, padding[1].pad_after),
    })
}

/// The same pool spec over a band with explicit padding above and below.
fn banded_spec(spec: &PoolSpec, above: usize, below: usize, width: (usize, usize)) -> PoolSpec {
    let mut spec = spec.clone();
    spec.padding = PaddingSpec::Explicit(tvec!(above, width.0), tvec!(below, width.1));
    spec
}

/// A convolution, pool or padding `op` over a band with explicit padding
/// above and below (the width's padding kept), or `None` for other
/// operators.
fn banded(
    op: &dyn TypedOp,
    above: usize,
    below: usize,
    width: (usize, usize),
) -> Option<Box<dyn TypedOp>> {
    let any = op.as_op();
    let spec = |s: &PoolSpec| banded_spec(s, above, below, width);
    if let Some(conv) = any.downcast_ref::<ops::cnn::Conv>() {
        let mut conv = conv.clone();
        conv.pool_spec = spec(&conv.pool_spec);
        Some(Box::new(conv))
    } else if let Some(pool) = any.downcast_ref::<ops::cnn::MaxPool>() {
        let mut pool = pool.clone();
        pool.pool_spec = spec(&pool.pool_spec);
        Some(Box::new(pool))
    } else if let Some(pool) = any.downcast_ref::<ops::cnn::SumPool>() {
        let mut pool = pool.clone();
        pool.pool_spec = spec(&pool.pool_spec);
        Some(Box::new(pool))
    } else if let Some(pad) = any.downcast_ref::<ops::array::Pad>() {
        let mut pad = pad.clone();
        let rows = pad.pads.len().checked_sub(2)?;
        pad.pads[rows] = (above, below);
        Some(Box::new(pad))
    } else {
        None
    }
}

/// How `node`'s output rows follow from its input `from`'s rows, or why
/// the node cannot run in bands.
fn row_map(
    model: &TypedModel,
    node: &TypedNode,
    from: usize,
    inside: &[bool],
) -> Result<RowMap, String> {
    let out = OutletId::new(node.id, 0);
    let (out_rank, _) = rows_of(model, out).ok_or("an output of unknown or rank < 2 shape")?;
    let input = model
        .outlet_fact(node.inputs[from])
        .map_err(|e| e.to_string())?;
    let input = input
        .shape
        .as_concrete()
        .ok_or("an input of unknown shape")?
        .to_vec();
    if input.len() < 2 {
        return Err("an input of rank < 2".into());
    }
    let op: &dyn TypedOp = node.op.as_ref();
    let any = op.as_op();
    if let Some(conv) = any.downcast_ref::<ops::cnn::Conv>() {
        if from != 0 {
            return Err("a convolution whose weights are computed".into());
        }
        return window(&conv.pool_spec, &input);
    }
    if let Some(pool) = any.downcast_ref::<ops::cnn::MaxPool>() {
        if pool.with_index_outputs.is_some() {
            return Err("a max pool with indices".into());
        }
        return window(&pool.pool_spec, &input);
    }
    if let Some(pool) = any.downcast_ref::<ops::cnn::SumPool>() {
        return window(&pool.pool_spec, &input);
    }
    if let Some(pad) = any.downcast_ref::<ops::array::Pad>() {
        let (top, bottom) = pad.pads.get(input.len() - 2).copied().unwrap_or((0, 0));
        if (top, bottom) == (0, 0) {
            // Each row padded along the width alone.
            return Ok(RowMap::Same);
        }
        // A window of one row; the rows above and below the input are
        // the padding's. Edge and reflecting paddings copy rows at the
        // input's top and bottom, which the bands there hold (checked per
        // band).
        return Ok(RowMap::Window {
            span: 1,
            stride: 1,
            before: top,
            width: (0, 0),
        });
    }
    if let Some(sample) = any.downcast_ref::<ops::Downsample>() {
        if sample.stride <= 0 {
            return Err("a reversing strided slice".into());
        }
        if sample.axis + 2 == input.len() {
            return Ok(RowMap::Sample {
                stride: sample.stride as usize,
                offset: sample.modulo,
            });
        }
        // Along the width or a leading axis, rows pass through.
        return Ok(RowMap::Same);
    }
    // Row for row: the output's last two axes are the input's.
    let out_shape = model
        .outlet_fact(out)
        .ok()
        .and_then(|f| f.shape.as_concrete().map(|s| s.to_vec()))
        .ok_or("an output of unknown shape")?;
    if out_shape[out_rank - 2..] != input[input.len() - 2..] {
        return Err("an operator that changes the spatial size".into());
    }
    if let Some(einsum) = any.downcast_ref::<ops::einsum::EinSum>() {
        for back in 1..=2 {
            let axis = einsum
                .axes
                .axis((InOut::In(from), input.len() - back))
                .map_err(|e| e.to_string())?;
            let alone = axis.inputs.iter().enumerate().all(|(slot, at)| {
                if slot == from {
                    at.len() == 1
                } else {
                    at.is_empty()
                }
            });
            if !alone || axis.outputs[0].as_slice() != [out_rank - back] {
                return Err("a product over a spatial axis".into());
            }
        }
        return Ok(RowMap::Same);
    }
    if any.downcast_ref::<ops::binary::TypedBinOp>().is_some()
        || any.downcast_ref::<ops::logic::Iff>().is_some()
        || any
            .downcast_ref::<ops::element_wise::ElementWiseOp>()
            .is_some()
    {
        // Any other operand is broadcast over the rows: a constant, or a
        // tensor computed whole before the stage (a squeeze-and-excitation
        // gate).
        for (slot, &o) in node.inputs.iter().enumerate() {
            if inside[slot] {
                continue;
            }
            let shape = model
                .outlet_fact(o)
                .map_err(|e| e.to_string())?
                .shape
                .to_tvec();
            if shape.len() >= 2 && shape[shape.len() - 2] != 1.to_dim() {
                return Err(if is_const(model, o) {
                    "a constant that varies along the rows".into()
                } else {
                    format!(
                        "an operator reading `{}`, from outside the stage",
                        model.node(o.node).name
                    )
                });
            }
        }
        return Ok(RowMap::Same);
    }
    // Quantization: parameters per tensor or per channel, constants.
    let per_axis = if let Some(q) = any.downcast_ref::<crate::quantize::Quantize>() {
        Some(q.axis)
    } else {
        any.downcast_ref::<crate::quantize::Dequantize>()
            .map(|q| q.axis)
    };
    if let Some(axis) = per_axis {
        return if axis.is_some_and(|a| a + 2 >= input.len()) {
            Err("a quantization with parameters along a spatial axis".into())
        } else {
            Ok(RowMap::Same)
        };
    }
    if any.downcast_ref::<crate::qops::QLinearBinary>().is_some() {
        return Ok(RowMap::Same);
    }
    // Joining or cutting along another axis than the rows.
    if let Some(concat) = any.downcast_ref::<ops::array::TypedConcat>() {
        return if concat.axis + 2 == input.len() {
            Err("a concatenation along the rows".into())
        } else {
            Ok(RowMap::Same)
        };
    }
    if let Some(slice) = any.downcast_ref::<ops::array::Slice>() {
        return if slice.axis + 2 == input.len() {
            Err("a slice of the rows".into())
        } else {
            Ok(RowMap::Same)
        };
    }
    if let Some(axis_op) = any.downcast_ref::<ops::change_axes::AxisOp>() {
        let leading = input.len() - 2;
        let ok = match *axis_op {
            ops::change_axes::AxisOp::Add(a) => a <= leading,
            ops::change_axes::AxisOp::Rm(a) => a < leading,
            ops::change_axes::AxisOp::Move(a, b) => a < leading && b < leading,
            ops::change_axes::AxisOp::Reshape(at, ref from_dims, _) => {
                at + from_dims.len() <= leading
            }
        };
        return if ok {
            Ok(RowMap::Same)
        } else {
            Err("an axis change that touches the spatial axes".into())
        };
    }
    Err(format!("`{}`, which has no row-by-row form", op.name()))
}

/// One operator of the stage.
struct StageNode {
    id: usize,
    /// Its input inside the stage that sets its rows.
    from: usize,
    /// Which inputs are stage tensors (in bands); the others are constants
    /// or tensors computed whole before the stage, broadcast over rows.
    inside: Vec<bool>,
    map: RowMap,
}

/// A stage's operators, and the reductions over the rows of its tensors.
struct Survey {
    nodes: Vec<StageNode>,
    /// Reductions over the rows of a tensor inside the stage (the global
    /// pool of a squeeze-and-excitation block), in evaluation order. Each
    /// is computed first, over bands of its input, before the stage runs
    /// (see [`reduce_in_bands`]).
    reductions: Vec<usize>,
}

/// Finds the node producing the tensor named `name` (outlet label or node
/// name, as the graph names tensors).
fn outlet_named(model: &TypedModel, name: &str) -> Option<OutletId> {
    for node in model.nodes() {
        for slot in 0..node.outputs.len() {
            let o = OutletId::new(node.id, slot);
            if model.outlet_label(o) == Some(name) {
                return Some(o);
            }
        }
    }
    let (node, slot) = match name.rsplit_once(':') {
        Some((n, s)) if s.parse::<usize>().is_ok() => (n, s.parse().unwrap_or(0)),
        _ => (name, 0),
    };
    let node = model.nodes().iter().find(|n| n.name == node)?;
    (slot < node.outputs.len()).then(|| OutletId::new(node.id, slot))
}

/// A reduction over the rows of its input.
fn row_reduction(model: &TypedModel, node: &TypedNode) -> Option<ops::nn::Reducer> {
    let reduce = node.op_as::<ops::nn::Reduce>()?;
    let (rank, _) = rows_of(model, *node.inputs.first()?)?;
    reduce.axes.contains(&(rank - 2)).then_some(reduce.reducer)
}

/// How partial results of a reduction over bands combine.
fn combining(reducer: ops::nn::Reducer) -> Option<ops::binary::TypedBinOp> {
    match reducer {
        ops::nn::Reducer::Sum => Some(ops::math::add()),
        ops::nn::Reducer::Max => Some(ops::math::max()),
        ops::nn::Reducer::Min => Some(ops::math::min()),
        _ => None,
    }
}

/// Why a reduction of the rows by `reducer` cannot run over bands.
fn uncombined(node: &TypedNode, reducer: ops::nn::Reducer) -> String {
    format!(
        "`{}` is a reduction ({reducer:?}) over the rows that does not combine over bands",
        node.name
    )
}

/// A tensor read from outside the stage that an operator may broadcast
/// over every band: one row (or fewer than two axes).
fn broadcast_over_rows(model: &TypedModel, node: &TypedNode, outlet: OutletId) -> bool {
    node.op_is::<ops::binary::TypedBinOp>()
        && model.outlet_fact(outlet).is_ok_and(|f| {
            let shape = f.shape.to_tvec();
            shape.len() < 2 || shape[shape.len() - 2] == 1.to_dim()
        })
}

/// The stage's operators in evaluation order, checked. Nodes in
/// `excluded` (bands already computed for a reduction) are not part of
/// it. With `shared`, the stage's tensors may also be read outside it:
/// the stage computes a reduction's input again, beside the model's own
/// operators.
fn stage_nodes(
    model: &TypedModel,
    from: OutletId,
    to: OutletId,
    excluded: &HashSet<usize>,
    shared: bool,
) -> Result<Survey, String> {
    let order = model.eval_order().map_err(|e| e.to_string())?;
    // Ancestors of `to` that `from` reaches, up to reductions of the rows.
    let mut reaches: HashSet<usize> = HashSet::new();
    let mut reached: HashSet<OutletId> = HashSet::from([from]);
    let mut reductions: Vec<usize> = Vec::new();
    for &n in &order {
        let node = model.node(n);
        if n == from.node || excluded.contains(&n) {
            continue;
        }
        if node.inputs.iter().any(|i| reached.contains(i)) {
            if row_reduction(model, node).is_some() {
                // Its result is computed whole from bands of its input,
                // before the stage; reducing `from` itself needs nothing.
                if node.inputs[0] != from {
                    reductions.push(n);
                }
                continue;
            }
            reaches.insert(n);
            for slot in 0..node.outputs.len() {
                reached.insert(OutletId::new(n, slot));
            }
        }
    }
    if !reaches.contains(&to.node) {
        // Computed from `from` only through a reduction of the rows?
        let mut through: HashSet<usize> = reductions.iter().copied().collect();
        for &n in &order {
            if model
                .node(n)
                .inputs
                .iter()
                .any(|i| through.contains(&i.node))
            {
                through.insert(n);
            }
        }
        if through.contains(&to.node) {
            if reductions.contains(&to.node) {
                return Err(format!(
                    "`{}` reduces the rows: a stage may run through it, not end at it",
                    model.node(to.node).name
                ));
            }
            // The first reduction on the way (evaluation order).
            let r = reductions.first().copied().unwrap_or(to.node);
            return Err(format!(
                "`{}` reduces the rows, and `{}` is computed from its result alone",
                model.node(r).name,
                model.node(to.node).name
            ));
        }
        return Err(format!(
            "`{}` is not computed from `{}`",
            model.node(to.node).name,
            model.node(from.node).name
        ));
    }
    let mut needed: HashSet<usize> = HashSet::from([to.node]);
    for &n in order.iter().rev() {
        if needed.contains(&n) {
            for i in &model.node(n).inputs {
                if reaches.contains(&i.node) {
                    needed.insert(i.node);
                }
            }
        }
    }
    // Only reductions of the stage's own tensors need bands of their own.
    reductions.retain(|&r| {
        let input = model.node(r).inputs[0];
        needed.contains(&input.node) && input != to
    });
    let outputs: HashSet<OutletId> = model
        .output_outlets()
        .map_err(|e| e.to_string())?
        .iter()
        .copied()
        .collect();
    let mut nodes = Vec::new();
    for &n in &order {
        if !needed.contains(&n) {
            continue;
        }
        let node = model.node(n);
        let why = |reason: String| format!("`{}` is {reason}", node.name);
        if node.outputs.len() != 1 {
            return Err(why("an operator with several outputs".into()));
        }
        let out = OutletId::new(n, 0);
        if out != to && !shared {
            if outputs.contains(&out) {
                return Err(why("a graph output inside the stage".into()));
            }
            if let Some(user) = node.outputs[0].successors.iter().find(|s| {
                !needed.contains(&s.node)
                    && !reductions.contains(&s.node)
                    && !excluded.contains(&s.node)
            }) {
                return Err(format!(
                    "`{}` is also read by `{}`, outside the stage",
                    node.name,
                    model.node(user.node).name
                ));
            }
        }
        let mut from_slot = None;
        let mut inside = vec![false; node.inputs.len()];
        for (slot, &i) in node.inputs.iter().enumerate() {
            if i == from || needed.contains(&i.node) {
                inside[slot] = true;
                if from_slot.replace(slot).is_some() {
                    // Two stage inputs: row for row (a residual addition).
                    if !(node.op_is::<ops::binary::TypedBinOp>()
                        || node.op_is::<ops::logic::Iff>()
                        || node.op_is::<crate::qops::QLinearBinary>()
                        || node.op_is::<ops::array::TypedConcat>())
                    {
                        return Err(why("an operator joining two stage tensors".into()));
                    }
                }
            } else if !is_const(model, i) && !broadcast_over_rows(model, node, i) {
                return Err(why(format!(
                    "an operator reading `{}`, from outside the stage",
                    model.node(i.node).name
                )));
            }
        }
        let from_slot = from_slot.ok_or_else(|| why("an operator without a stage input".into()))?;
        let map = row_map(model, node, from_slot, &inside).map_err(why)?;
        if inside.iter().filter(|&&b| b).count() > 1 {
            // Both operands of a binary operator inside the stage: each must
            // have the output's own rows and width.
            let (_, rows) = rows_of(model, out).ok_or_else(|| why("unknown rows".into()))?;
            for (&i, _) in node.inputs.iter().zip(&inside).filter(|(_, &b)| b) {
                if rows_of(model, i).map(|r| r.1) != Some(rows) {
                    return Err(why("an operator joining tensors of other heights".into()));
                }
            }
        }
        nodes.push(StageNode {
            id: n,
            from: from_slot,
            inside,
            map,
        });
    }
    Ok(Survey { nodes, reductions })
}

/// [`stage_nodes`] on the model as loaded, with each reduction's own
/// bands checked too.
fn survey(model: &TypedModel, from: OutletId, to: OutletId) -> Result<Survey, String> {
    let none = HashSet::new();
    let survey = stage_nodes(model, from, to, &none, false)?;
    for &r in &survey.reductions {
        let node = model.node(r);
        if let Some(reducer) = row_reduction(model, node).filter(|r| combining(*r).is_none()) {
            return Err(uncombined(node, reducer));
        }
        stage_nodes(model, from, node.inputs[0], &none, true)?;
    }
    Ok(survey)
}

/// The rows of each stage tensor every step needs computed by its end:
/// `need[outlet][t]`, non-decreasing in `t`.
fn schedule(
    model: &TypedModel,
    nodes: &[StageNode],
    to: OutletId,
    rows: usize,
) -> Result<(usize, HashMap<OutletId, Vec<usize>>), String> {
    let (_, height) = rows_of(model, to).ok_or("the stage output has no rows")?;
    let steps = height.div_ceil(rows);
    let mut need: HashMap<OutletId, Vec<usize>> = HashMap::new();
    need.insert(
        to,
        (0..steps).map(|t| ((t + 1) * rows).min(height)).collect(),
    );
    for sn in nodes.iter().rev() {
        let node = model.node(sn.id);
        let out = need
            .get(&OutletId::new(sn.id, 0))
            .cloned()
            .unwrap_or_else(|| vec![0; steps]);
        for (slot, &i) in node.inputs.iter().enumerate() {
            if !sn.inside[slot] {
                continue;
            }
            let (_, h_in) = rows_of(model, i).ok_or("an input without rows")?;
            let entry = need.entry(i).or_insert_with(|| vec![0; steps]);
            for t in 0..steps {
                let end = if out[t] == 0 {
                    0
                } else if slot == sn.from || !matches!(sn.map, RowMap::Window { .. }) {
                    sn.map.input_rows(0, out[t], h_in).1
                } else {
                    out[t]
                };
                entry[t] = entry[t].max(end);
            }
        }
    }
    for v in need.values_mut() {
        for t in 1..v.len() {
            v[t] = v[t].max(v[t - 1]);
        }
    }
    Ok((steps, need))
}

/// Bands of each stage tensor: (first row, end row, outlet).
type Bands = HashMap<OutletId, Vec<(usize, usize, OutletId)>>;

/// Outlets already cut from bands, by (tensor, first row, end row).
type Pieces = HashMap<(OutletId, usize, usize), OutletId>;

/// Rewrites `model` so that `stage` runs in bands of rows. Fails, naming
/// the operator, when the stage cannot run in bands.
///
/// A reduction over the rows of a stage tensor (a squeeze-and-excitation
/// block's global pool) needs that whole tensor before the stage can go
/// past the operator reading its result. It is computed first, in a pass
/// of its own: the operators from `from` to its input run again in bands,
/// each band reduced and the partial results combined, so the tensor never
/// exists whole. Those operators compute their rows twice (see
/// [`multiply_adds`]); everything else once.
pub fn apply(model: &mut TypedModel, stage: &PatchedStage) -> Result<(), OnnxError> {
    let refuse =
        |reason: String| OnnxError::BadArgument(format!("patched stage `{stage}`: {reason}"));
    let find = |name: &str| {
        outlet_named(model, name).ok_or_else(|| refuse(format!("the model has no tensor `{name}`")))
    };
    let (from, to) = (find(&stage.from)?, find(&stage.to)?);
    let mut names: HashSet<String> = model.nodes().iter().map(|n| n.name.clone()).collect();
    let mut excluded: HashSet<usize> = HashSet::new();
    let nodes = loop {
        let survey = stage_nodes(model, from, to, &excluded, false).map_err(refuse)?;
        match survey.reductions.first() {
            None => break survey.nodes,
            Some(&r) => reduce_in_bands(model, &mut names, from, r, stage, &mut excluded)?,
        }
    };
    let (steps, need) = schedule(model, &nodes, to, stage.rows).map_err(refuse)?;
    let tract = |e: TractError| OnnxError::tract(ErrorStage::Analysis, e);
    let (bands, mut pieces) = run_in_bands(model, &mut names, &nodes, &need, steps, from, stage)?;
    let (_, height) = rows_of(model, to).ok_or_else(|| refuse("no rows".into()))?;
    let whole = rows_from(model, &mut names, &bands, &mut pieces, to, 0, height).map_err(tract)?;
    replace_outlet(model, to, whole).map_err(tract)?;
    model.compact().map_err(tract)?;
    Ok(())
}

/// Readers of `old` (and the graph outputs) read `new` instead, which
/// takes `old`'s name.
pub(crate) fn replace_outlet(
    model: &mut TypedModel,
    old: OutletId,
    new: OutletId,
) -> TractResult<()> {
    let readers = model.node(old.node).outputs[old.slot].successors.clone();
    for inlet in readers {
        if inlet.node != new.node {
            model.add_edge(new, inlet)?;
        }
    }
    let mut outputs = model.output_outlets()?.to_vec();
    for o in outputs.iter_mut() {
        if *o == old {
            *o = new;
        }
    }
    model.select_output_outlets(&outputs)?;
    if let Some(label) = model.outlet_labels.remove(&old) {
        model.outlet_labels.insert(new, label);
    }
    Ok(())
}

/// Wires the band operators of `nodes`: step by step, each operator's
/// rows that step needs and no earlier step computed.
fn run_in_bands(
    model: &mut TypedModel,
    names: &mut HashSet<String>,
    nodes: &[StageNode],
    need: &HashMap<OutletId, Vec<usize>>,
    steps: usize,
    from: OutletId,
    stage: &PatchedStage,
) -> Result<(Bands, Pieces), OnnxError> {
    let refuse =
        |reason: String| OnnxError::BadArgument(format!("patched stage `{stage}`: {reason}"));
    let tract = |e: TractError| OnnxError::tract(ErrorStage::Analysis, e);
    let mut bands: Bands = HashMap::new();
    let (_, from_rows) = rows_of(model, from).ok_or_else(|| refuse("no rows".into()))?;
    bands.insert(from, vec![(0, from_rows, from)]);
    let mut pieces: Pieces = HashMap::new();
    for t in 0..steps {
        for sn in nodes {
            let out = OutletId::new(sn.id, 0);
            let ends = &need[&out];
            let (o0, o1) = (if t == 0 { 0 } else { ends[t - 1] }, ends[t]);
            if o1 <= o0 {
                continue;
            }
            let node = model.node(sn.id).clone();
            let (_, h_in) =
                rows_of(model, node.inputs[sn.from]).ok_or_else(|| refuse("no rows".into()))?;
            let (first, end, above, below) = sn.map.input_rows(o0, o1, h_in);
            if let Some(why) = padding_unreachable(&node, end - first, above, below) {
                return Err(refuse(format!(
                    "`{}` pads rows {o0}..{o1} from {why}",
                    node.name
                )));
            }
            if first == end {
                // Rows wholly in a padding's rows: a constant band.
                let band = padding_band(model, &node, o1 - o0).ok_or_else(|| {
                    refuse(format!("`{}` reads no rows for {o0}..{o1}", node.name))
                })?;
                let name = unique(names, format!("{}.rows{o0}-{o1}", node.name));
                let wired = model.add_const(name, band).map_err(tract)?;
                bands.entry(out).or_default().push((o0, o1, wired));
                continue;
            }
            let mut inputs = Vec::with_capacity(node.inputs.len());
            for (slot, &i) in node.inputs.iter().enumerate() {
                if !sn.inside[slot] {
                    inputs.push(i);
                    continue;
                }
                let (a, b) = if slot == sn.from {
                    (first, end)
                } else {
                    (o0, o1)
                };
                inputs.push(rows_from(model, names, &bands, &mut pieces, i, a, b).map_err(tract)?);
            }
            let op: Box<dyn TypedOp> = match &sn.map {
                RowMap::Same => node.op.clone(),
                RowMap::Sample { stride, .. } => {
                    // The band starts at the first row sampled.
                    let axis = model
                        .outlet_fact(node.inputs[sn.from])
                        .map_err(tract)?
                        .rank()
                        - 2;
                    Box::new(ops::Downsample::new(axis, *stride as isize, 0))
                }
                RowMap::Window { width, .. } => banded(node.op.as_ref(), above, below, *width)
                    .ok_or_else(|| refuse(format!("`{}` has no banded form", node.name)))?,
            };
            let name = unique(names, format!("{}.rows{o0}-{o1}", node.name));
            let wired = model.wire_node(name, op, &inputs).map_err(tract)?[0];
            let (_, got) = rows_of(model, wired).ok_or_else(|| refuse("no rows".into()))?;
            if got != o1 - o0 {
                return Err(refuse(format!(
                    "`{}` gives {got} rows for rows {o0}..{o1}",
                    node.name
                )));
            }
            bands.entry(out).or_default().push((o0, o1, wired));
        }
    }
    Ok((bands, pieces))
}

/// Why a band of an edge or reflecting padding reading `rows` input rows
/// and adding `above` and `below` cannot copy the rows its padding copies
/// (they lie in other bands), or `None`.
fn padding_unreachable(
    node: &TypedNode,
    rows: usize,
    above: usize,
    below: usize,
) -> Option<String> {
    let pad = node.op_as::<ops::array::Pad>()?;
    let needs = match pad.mode {
        ops::array::PadMode::Constant(_) => return None,
        ops::array::PadMode::Edge => usize::from(above + below > 0),
        ops::array::PadMode::Reflect => above.max(below) + 1,
    };
    (rows < needs).then(|| {
        format!("rows of other bands ({rows} input rows in the band; use more rows per step)")
    })
}

/// `rows` rows of a constant padding's value, as wide as `node`'s output,
/// or `None` when `node` is no constant padding.
fn padding_band(model: &TypedModel, node: &TypedNode, rows: usize) -> Option<Tensor> {
    let pad = node.op_as::<ops::array::Pad>()?;
    let ops::array::PadMode::Constant(value) = &pad.mode else {
        return None;
    };
    let fact = model.outlet_fact(OutletId::new(node.id, 0)).ok()?;
    let mut shape = fact.shape.as_concrete()?.to_vec();
    let axis = shape.len().checked_sub(2)?;
    shape[axis] = rows;
    value
        .cast_to_dt(fact.datum_type)
        .ok()?
        .broadcast_scalar_to_shape(&shape)
        .ok()
}

/// Computes the reduction `reduction` over bands of its input, from
/// `from` in bands of `stage.rows` rows of that input, each band reduced
/// and the partial results combined in row order; its readers read the
/// combined result. The nodes wired, and the reduction, join `excluded`.
fn reduce_in_bands(
    model: &mut TypedModel,
    names: &mut HashSet<String>,
    from: OutletId,
    reduction: usize,
    stage: &PatchedStage,
    excluded: &mut HashSet<usize>,
) -> Result<(), OnnxError> {
    let refuse =
        |reason: String| OnnxError::BadArgument(format!("patched stage `{stage}`: {reason}"));
    let tract = |e: TractError| OnnxError::tract(ErrorStage::Analysis, e);
    let node = model.node(reduction).clone();
    let reducer = row_reduction(model, &node).ok_or_else(|| refuse("no reduction".into()))?;
    let combine = combining(reducer).ok_or_else(|| refuse(uncombined(&node, reducer)))?;
    let input = node.inputs[0];
    let first_new = model.nodes().len();
    let survey = stage_nodes(model, from, input, excluded, true).map_err(refuse)?;
    if let Some(&r) = survey.reductions.first() {
        return Err(refuse(format!(
            "`{}` reduces rows that `{}` reduces again",
            model.node(r).name,
            node.name
        )));
    }
    let (steps, need) = schedule(model, &survey.nodes, input, stage.rows).map_err(refuse)?;
    let (bands, _) = run_in_bands(model, names, &survey.nodes, &need, steps, from, stage)?;
    let mut total: Option<OutletId> = None;
    for &(lo, hi, band) in bands.get(&input).map(Vec::as_slice).unwrap_or(&[]) {
        let part_name = unique(names, format!("{}.rows{lo}-{hi}", node.name));
        let part = model
            .wire_node(part_name, node.op.clone(), &[band])
            .map_err(tract)?[0];
        total = Some(match total {
            None => part,
            Some(sum) => {
                let name = unique(names, format!("{}.to{hi}", node.name));
                model
                    .wire_node(name, combine.clone(), &[sum, part])
                    .map_err(tract)?[0]
            }
        });
    }
    let total = total.ok_or_else(|| refuse(format!("no bands of `{}`", node.name)))?;
    replace_outlet(model, OutletId::new(reduction, 0), total).map_err(tract)?;
    excluded.extend(first_new..model.nodes().len());
    excluded.insert(reduction);
    Ok(())
}

/// `name`, or `name` with a number after it when a node has it already.
pub(crate) fn unique(names: &mut HashSet<String>, name: String) -> String {
    let mut candidate = name.clone();
    let mut n = 1;
    while !names.insert(candidate.clone()) {
        candidate = format!("{name}.{n}");
        n += 1;
    }
    candidate
}

/// An outlet holding rows `[a, b)` of stage tensor `of`: a band itself, a
/// slice of one, or the bands' slices joined along the rows.
fn rows_from(
    model: &mut TypedModel,
    names: &mut HashSet<String>,
    bands: &Bands,
    pieces: &mut Pieces,
    of: OutletId,
    a: usize,
    b: usize,
) -> TractResult<OutletId> {
    if let Some(&done) = pieces.get(&(of, a, b)) {
        return Ok(done);
    }
    let name = model.node(of.node).name.clone();
    let mut parts = Vec::new();
    for &(lo, hi, outlet) in bands.get(&of).map(Vec::as_slice).unwrap_or(&[]) {
        let (s, e) = (lo.max(a), hi.min(b));
        if s >= e {
            continue;
        }
        if (s, e) == (lo, hi) {
            parts.push(outlet);
            continue;
        }
        let (rank, _) = rows_of(model, outlet).ok_or_else(|| format_err!("no rows"))?;
        let slice = ops::array::Slice::new(rank - 2, (s - lo).to_dim(), (e - lo).to_dim());
        let slice_name = unique(names, format!("{name}.rows{s}-{e}"));
        parts.push(model.wire_node(slice_name, slice, &[outlet])?[0]);
    }
    let covered: usize = bands
        .get(&of)
        .map(|v| {
            v.iter()
                .map(|&(lo, hi, _)| hi.min(b).saturating_sub(lo.max(a)))
                .sum()
        })
        .unwrap_or(0);
    ensure!(
        covered == b - a,
        "rows {a}..{b} of `{name}` are not computed in time"
    );
    let outlet = if parts.len() == 1 {
        parts[0]
    } else {
        let (rank, _) = rows_of(model, parts[0]).ok_or_else(|| format_err!("no rows"))?;
        model.wire_node(
            unique(names, format!("{name}.rows{a}-{b}.joined")),
            ops::array::TypedConcat::new(rank - 2),
            &parts,
        )?[0]
    };
    pieces.insert((of, a, b), outlet);
    Ok(outlet)
}

/// Multiply-adds of `model`'s operators, as their cost models count them
/// (convolutions and products); a stage with a reduction of the rows
/// computes some of them twice.
pub(crate) fn multiply_adds(model: &TypedModel) -> u64 {
    let mut total = 0u64;
    for node in model.nodes() {
        let facts: Vec<&TypedFact> = node
            .inputs
            .iter()
            .filter_map(|&i| model.outlet_fact(i).ok())
            .collect();
        if facts.len() != node.inputs.len() {
            continue;
        }
        for (cost, count) in node.op.cost(&facts).unwrap_or_default() {
            if matches!(cost, ops::Cost::FMA(_)) {
                total = total.saturating_add(count.to_i64().unwrap_or(0).max(0) as u64);
            }
        }
    }
    total
}

/// Marks the step that writes `stage`'s output with the stage
/// ([`PATCH_ATTR`]), so that the bundle records it.
pub(crate) fn record(graph: &mut crate::ModelGraph, stage: &PatchedStage) {
    let written = graph
        .ops
        .iter()
        .rposition(|op| {
            op.outputs
                .iter()
                .any(|&t| graph.tensors[t].name == stage.to)
        })
        .or_else(|| {
            // An unnamed output takes its assembling step's name.
            let prefix = format!("{}.rows", stage.to);
            graph
                .ops
                .iter()
                .rposition(|op| op.name.starts_with(&prefix))
        });
    if let Some(step) = written {
        let attrs = &mut graph.ops[step].attributes;
        attrs.retain(|(k, _)| k != PATCH_ATTR);
        attrs.push((PATCH_ATTR.into(), crate::Attr::Text(stage.to_record())));
        attrs.sort_by(|a, b| a.0.cmp(&b.0));
    }
}

/// The stages a bundle's operators record ([`PATCH_ATTR`] values), in
/// step order.
pub fn recorded_stages<'a>(
    attributes: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<PatchedStage>, OnnxError> {
    attributes
        .into_iter()
        .map(PatchedStage::from_record)
        .collect()
}

/// The name the graph gives an outlet: its label, or its node's name.
fn outlet_name(model: &TypedModel, outlet: OutletId) -> String {
    match model.outlet_label(outlet) {
        Some(label) => label.to_string(),
        None if outlet.slot == 0 => model.node(outlet.node).name.clone(),
        None => format!("{}:{}", model.node(outlet.node).name, outlet.slot),
    }
}

/// See [`crate::Decluttered::stage_refusal`].
pub(crate) fn refusal(model: &TypedModel, from: &str, to: &str) -> Option<String> {
    let (Some(f), Some(t)) = (outlet_named(model, from), outlet_named(model, to)) else {
        return Some(format!("no tensor `{from}` or `{to}`"));
    };
    survey(model, f, t).err()
}

/// See [`crate::Decluttered::stage_ends`].
pub(crate) fn ends(model: &TypedModel, from: &str, covering: &str) -> Vec<String> {
    let Some(from) = outlet_named(model, from) else {
        return Vec::new();
    };
    let Some(cover) = model.nodes().iter().position(|n| n.name == covering) else {
        return Vec::new();
    };
    let Ok(order) = model.eval_order() else {
        return Vec::new();
    };
    let Some(start) = order.iter().position(|&n| n == cover) else {
        return Vec::new();
    };
    order[start..]
        .iter()
        .filter(|&&n| model.node(n).outputs.len() == 1)
        .map(|&n| OutletId::new(n, 0))
        .filter(|&to| {
            survey(model, from, to).is_ok_and(|s| s.nodes.iter().any(|sn| sn.id == cover))
        })
        .map(|to| outlet_name(model, to))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{load_decluttered, random_inputs, run_reference, LoadOptions, ModelGraph};

    fn decluttered(name: &str) -> crate::Decluttered {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata")
            .join(name);
        load_decluttered(&path, &LoadOptions::default()).unwrap()
    }

    fn max_relative_error(got: &Tensor, want: &Tensor) -> f32 {
        assert_eq!(got.shape(), want.shape());
        let (g, w) = (
            got.to_plain_array_view::<f32>().unwrap(),
            want.to_plain_array_view::<f32>().unwrap(),
        );
        g.iter()
            .zip(w)
            .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
            .fold(0.0, f32::max)
    }

    /// Output elements written per original operator name: a band's op is
    /// named `{original}.rows{a}-{b}`.
    fn elements_by_op(graph: &ModelGraph) -> HashMap<String, u64> {
        let mut out = HashMap::new();
        for op in &graph.ops {
            let base = op
                .name
                .split(".rows")
                .next()
                .unwrap_or(&op.name)
                .to_string();
            if op.name.ends_with(".joined") || !matches!(op.op_type.as_str(), "Conv" | "EinSum") {
                continue;
            }
            let t = &graph.tensors[op.outputs[0]];
            *out.entry(base).or_insert(0) += t.shape.iter().product::<u64>();
        }
        out
    }

    /// Reductions in the model (a band's partial reduction counts).
    fn reductions(graph: &ModelGraph) -> usize {
        graph
            .ops
            .iter()
            .filter(|op| op.op_type.starts_with("Reduce"))
            .count()
    }

    /// Every tensor of each testdata CNN tried as a stage's end, in bands
    /// of 1, 2, 3 and 5 rows: where the rewrite accepts the stage, the
    /// model computes what it computed whole (tract running both), and no
    /// convolution or product computes more outputs than whole, except
    /// once more per reduction of the rows the stage holds.
    #[test]
    fn every_stage_end_and_band_height_computes_the_model() {
        let mut accepted = 0;
        let mut banded = 0;
        let mut two_pass = 0;
        for model in [
            "patch_chain.onnx",
            "mobilenet_block.onnx",
            "residual_cnn.onnx",
            "depthwise_block.onnx",
            "patch_se.onnx",
            "patch_pad.onnx",
        ] {
            let d = decluttered(model);
            let whole = d.graph(Default::default(), &[]).unwrap();
            let inputs = random_inputs(&whole, 7).unwrap();
            let want = run_reference(&whole, &inputs).unwrap();
            let macs = elements_by_op(&whole);
            let from = d.input_names()[0].clone();
            let names: Vec<String> = whole.tensors.iter().map(|t| t.name.clone()).collect();
            for to in names {
                for rows in [1, 2, 3, 5] {
                    let stage = PatchedStage {
                        from: from.clone(),
                        to: to.clone(),
                        rows,
                    };
                    let patched = match d.graph(Default::default(), std::slice::from_ref(&stage)) {
                        Ok(g) => g,
                        // A stage the rewrite refuses, with its reason;
                        // any other failure is a bug.
                        Err(OnnxError::BadArgument(_)) => continue,
                        Err(e) => panic!("{model} {stage}: {e}"),
                    };
                    accepted += 1;
                    banded += bands_follow_the_format(&patched, model, &stage);
                    let got = run_reference(&patched, &inputs).unwrap();
                    for (g, w) in got.iter().zip(&want) {
                        let e = max_relative_error(g, w);
                        assert!(e <= 1e-5, "{model} {stage}: error {e}");
                    }
                    // Each reduction of the rows inside the stage runs
                    // the operators before it once more; without one,
                    // nothing is computed twice.
                    let passes = 1 + reductions(&patched) - reductions(&whole);
                    if passes > 1 {
                        two_pass += 1;
                    }
                    for (op, n) in elements_by_op(&patched) {
                        assert!(
                            n <= macs[&op] * passes as u64,
                            "{model} {stage}: `{op}` computes {n} outputs in {passes} passes"
                        );
                    }
                    let (mw, mp) = (whole.multiply_adds(), patched.multiply_adds());
                    assert!(
                        if passes == 1 { mp == mw } else { mp > mw },
                        "{model} {stage}: {mp} multiply-adds against {mw}"
                    );
                }
            }
        }
        // The stages the test models hold: enough of them to mean something.
        assert!(accepted >= 40, "{accepted} stages accepted");
        // patch_se's stages across its gate.
        assert!(two_pass >= 4, "{two_pass} stages across a reduction");
        // Stages read the image in bands of rows, not whole.
        assert!(
            banded * 2 >= accepted,
            "{banded} of {accepted} stages read the image in bands"
        );
    }

    /// Where `graph` writes its input in bands: the bands follow the input
    /// in tensor id order, which is their row order (the format's rule),
    /// hold every row once, are arena inputs from step 0, and no step
    /// reads the input itself. Returns the number of banded inputs.
    fn bands_follow_the_format(graph: &ModelGraph, model: &str, stage: &PatchedStage) -> usize {
        for entry in &graph.input_bands {
            let input = &graph.tensors[entry.input];
            assert_eq!(input.role, crate::TensorRole::InputRows, "{model} {stage}");
            let mut next = 0;
            for (k, &(band, a, b)) in entry.bands.iter().enumerate() {
                let t = &graph.tensors[band];
                assert_eq!(
                    band,
                    entry.input + 1 + k,
                    "{model} {stage}: band ids in row order"
                );
                assert_eq!(
                    (a, t.role, t.first_step),
                    (next, crate::TensorRole::Input, 0)
                );
                assert_eq!(t.shape[t.shape.len() - 2], (b - a) as u64);
                next = b;
            }
            assert_eq!(
                next as u64,
                input.shape[input.shape.len() - 2],
                "{model} {stage}"
            );
            assert!(graph.ops.iter().all(|op| !op.inputs.contains(&entry.input)));
        }
        graph.input_bands.len()
    }

    /// A stage of `patch_chain` to its output, one row at a time, lowers
    /// the bound, and the step assembling the output records the stage.
    #[test]
    fn bands_lower_the_bound_and_the_stage_is_recorded() {
        let d = decluttered("patch_chain.onnx");
        let whole = d.graph(Default::default(), &[]).unwrap();
        let stage = PatchedStage::parse("image:stage_out:1").unwrap();
        let patched = d
            .graph(Default::default(), std::slice::from_ref(&stage))
            .unwrap();
        let bound = |g: &ModelGraph| g.order_bounds.iter().map(|b| b.1).min().unwrap();
        assert!(
            bound(&patched) * 2 < bound(&whole),
            "{} vs {}",
            bound(&patched),
            bound(&whole)
        );
        let recorded: Vec<&str> = patched
            .ops
            .iter()
            .flat_map(|op| &op.attributes)
            .filter_map(|(k, v)| match v {
                crate::Attr::Text(t) if k == PATCH_ATTR => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(recorded_stages(recorded).unwrap(), vec![stage]);
    }

    #[test]
    fn refusals_name_the_operator() {
        let d = decluttered("patch_chain.onnx");
        let refuse = |text: &str| {
            d.graph(Default::default(), &[PatchedStage::parse(text).unwrap()])
                .unwrap_err()
                .to_string()
        };
        // The global pool reduces the rows.
        assert!(
            refuse("image:features:1").contains("GlobalAveragePool"),
            "{}",
            refuse("image:features:1")
        );
        assert!(refuse("image:nothing:1").contains("no tensor `nothing`"));
        assert!(refuse("stage_out:image:1").contains("not computed from"));
    }

    #[test]
    fn stage_text_round_trips() {
        for text in ["a:b:3", "x:1:y:7", "/f/x:/g/y:1", "s.silu:798:2"] {
            let stage = PatchedStage::parse(text).unwrap();
            assert_eq!(stage.to_string(), text);
            assert_eq!(
                PatchedStage::from_record(&stage.to_record()).unwrap(),
                stage
            );
        }
        // Names with ':' of their own survive the recorded form.
        let stage = PatchedStage {
            from: "n:1".into(),
            to: "m:2".into(),
            rows: 4,
        };
        assert_eq!(
            PatchedStage::from_record(&stage.to_record()).unwrap(),
            stage
        );
        for bad in ["a:b", "a:b:0", ":b:1", "a::1", "a:b:x"] {
            assert!(PatchedStage::parse(bad).is_err(), "{bad}");
        }
    }
}

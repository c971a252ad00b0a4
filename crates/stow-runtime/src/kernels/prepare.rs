//! Setup: from an operator's recorded attributes and its operands'
//! element types and shapes to a prepared [`Kernel`], or the reason it
//! cannot run. Everything that allocates or can fail on the bundle's
//! contents happens here.

use super::float::Float;
use super::layout::{broadcast_strides, strides_of, Walk};
use super::linalg::ConvShape;
use super::nn::{self, AroundAxis, Reducer};
use super::pool::{self, Pool, Window};
use super::prepacked::{self, Panels, Side, PACKED_ATTR, PACKED_LEFT_ATTR};
use super::{gemm, BinOp, Kernel, Loc, MatMul, Operand, Unary};
use alloc::string::{String, ToString};
use alloc::{format, vec, vec::Vec};
use stow_bundle::{AttrValue, Contents, DType, Op, Region};

/// A strided copy from input 0 (no scratch).
fn copy(walk: Walk<2>, base: [usize; 2]) -> (Kernel, usize) {
    (
        Kernel::Copy {
            walk,
            base,
            fill: None,
        },
        0,
    )
}

fn attr<'a>(op: &'a Op, name: &str) -> Option<&'a AttrValue> {
    op.attributes
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
}

pub(super) fn attr_int(op: &Op, name: &str) -> Result<i64, String> {
    match attr(op, name) {
        Some(AttrValue::Int(i)) => Ok(*i),
        _ => Err(format!("attribute `{name}` (int) is missing")),
    }
}

fn attr_ints(op: &Op, name: &str) -> Result<Vec<usize>, String> {
    match attr(op, name) {
        Some(AttrValue::Ints(v)) => v
            .iter()
            .map(|&x| usize::try_from(x).map_err(|_| format!("attribute `{name}` holds {x}")))
            .collect(),
        _ => Err(format!("attribute `{name}` (ints) is missing")),
    }
}

pub(super) fn attr_text<'a>(op: &'a Op, name: &str) -> Result<&'a str, String> {
    match attr(op, name) {
        Some(AttrValue::Text(t)) => Ok(t),
        _ => Err(format!("attribute `{name}` (text) is missing")),
    }
}

fn attr_float(op: &Op, name: &str) -> Result<f32, String> {
    match attr(op, name) {
        Some(AttrValue::Float(f)) => Ok(*f),
        _ => Err(format!("attribute `{name}` (float) is missing")),
    }
}

/// Builds the operand for tensor `id`.
pub fn operand<'b>(
    contents: &Contents,
    id: u32,
    weight: impl Fn(u32) -> Option<&'b [u8]>,
) -> Result<Operand<'b>, String> {
    let t = contents
        .tensors
        .get(id as usize)
        .ok_or_else(|| format!("tensor {id} does not exist"))?;
    let shape: Vec<usize> = t
        .shape
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("tensor {id} is too large")))
        .collect::<Result<_, _>>()?;
    let len = shape.iter().product();
    let size = t.dtype.size_bytes() as usize;
    let loc = match t.region {
        Region::Rows => {
            return Err(format!(
                "input `{}` is written in bands of rows; no operator may read it whole",
                t.name
            ))
        }
        Region::Weights => {
            Loc::Weight(weight(id).ok_or_else(|| format!("weight {id} has no bytes"))?)
        }
        Region::Arena => {
            let offset =
                usize::try_from(t.offset).map_err(|_| format!("tensor {id} is out of range"))?;
            if offset % size != 0 {
                return Err(format!(
                    "tensor `{}` sits at arena offset {offset}, not a multiple of its element size",
                    t.name
                ));
            }
            // Pools are one address space for the kernels (see `Views`).
            let base = crate::arena::pool_bases(contents)
                .and_then(|b| b.get(t.pool as usize).copied())
                .ok_or_else(|| format!("tensor {id}: its memory pool is out of range"))?;
            Loc::Arena(
                base.checked_add(offset)
                    .ok_or_else(|| format!("tensor {id} is out of range"))?,
            )
        }
    };
    Ok(Operand {
        id,
        dtype: t.dtype,
        shape,
        len,
        loc,
    })
}

pub(super) fn want(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}

fn all_f32(ins: &[Operand<'_>], outs: &[Operand<'_>]) -> Result<(), String> {
    match ins.iter().chain(outs).find(|o| o.dtype != DType::F32) {
        None => Ok(()),
        Some(o) => Err(format!(
            "tensor {} is {}; this kernel handles f32",
            o.id,
            o.dtype.name()
        )),
    }
}

/// Every operand f32, or every operand f64.
fn all_float(ins: &[Operand<'_>], outs: &[Operand<'_>]) -> Result<(), String> {
    let first = ins.first().or(outs.first()).map_or(DType::F32, |o| o.dtype);
    let want = if first == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    match ins.iter().chain(outs).find(|o| o.dtype != want) {
        None => Ok(()),
        Some(o) => Err(format!(
            "tensor {} is {}; this kernel handles f32 or f64 (all operands alike)",
            o.id,
            o.dtype.name()
        )),
    }
}

pub(super) fn arity(ins: &[Operand<'_>], outs: &[Operand<'_>], n_in: usize) -> Result<(), String> {
    want(ins.len() == n_in && outs.len() == 1, || {
        format!(
            "expected {n_in} inputs and 1 output, found {} and {}",
            ins.len(),
            outs.len()
        )
    })
}

fn same_bytes(a: &Operand<'_>, b: &Operand<'_>) -> bool {
    matches!((a.loc, b.loc), (Loc::Arena(x), Loc::Arena(y)) if x == y)
        && a.len * a.dtype.size_bytes() as usize == b.len * b.dtype.size_bytes() as usize
}

/// Floats of scratch the kernel of `op` needs on each thread, for operands
/// of these element types and shapes (0 when it needs none or cannot
/// run). The compiler plans this much into the arena (`stow.scratch`).
pub fn scratch_floats(
    op: &Op,
    inputs: &[(DType, Vec<u64>)],
    outputs: &[(DType, Vec<u64>)],
) -> usize {
    match (shaped(inputs), shaped(outputs)) {
        (Some(ins), Some(outs)) => prepare(op, &ins, &outs).map_or(0, |(_, s)| s),
        _ => 0,
    }
}

/// Operands of these element types and shapes, all at arena offset 0:
/// enough for setup to size a kernel.
fn shaped(list: &[(DType, Vec<u64>)]) -> Option<Vec<Operand<'static>>> {
    list.iter()
        .map(|(dtype, shape)| {
            let shape: Vec<usize> = shape
                .iter()
                .map(|&d| usize::try_from(d).ok())
                .collect::<Option<_>>()?;
            Some(Operand {
                id: 0,
                dtype: *dtype,
                len: shape.iter().product(),
                shape,
                loc: Loc::Arena(0),
            })
        })
        .collect()
}

/// The attribute naming how many threads' scratch the compiler planned
/// into the arena; the step's last output is then that scratch tensor.
pub const SCRATCH_ATTR: &str = "stow.scratch";

/// The attribute (int 1) marking a depthwise convolution whose output the
/// compiler placed over its input (`docs/REUSE.md`): its kernel computes
/// one plane at a time into scratch and copies it into place.
pub const IN_PLACE_ATTR: &str = "stow.in_place";

/// The attribute capping a product's or convolution's scratch (floats per
/// thread) where the arena has less room than its usual blocking needs:
/// the kernel then packs smaller blocks.
pub const SCRATCH_BUDGET_ATTR: &str = "stow.scratch_budget";

/// The scratch `op`'s product kernel takes: `usual`, or less (down to
/// none: it then packs small blocks on the stack) where the compiler set
/// a [`SCRATCH_BUDGET_ATTR`].
pub(super) fn budgeted(op: &Op, usual: usize) -> usize {
    match attr(op, SCRATCH_BUDGET_ATTR) {
        Some(AttrValue::Int(budget)) if *budget >= 0 => {
            usual.min(usize::try_from(*budget).unwrap_or(usize::MAX))
        }
        _ => usual,
    }
}

/// Threads' worth of scratch planned for `op` (0 when none).
pub fn planned_scratch_threads(op: &Op) -> usize {
    match attr(op, SCRATCH_ATTR) {
        Some(AttrValue::Int(t)) => usize::try_from(*t).unwrap_or(0),
        _ => 0,
    }
}

/// Prepares the kernel of `op` over its operands, or says why it cannot.
pub fn prepare(
    op: &Op,
    ins: &[Operand<'_>],
    outs: &[Operand<'_>],
) -> Result<(Kernel, usize), String> {
    let name = op.op_type.as_str();
    if !super::has_f16_kernel(name) {
        if let Some(o) = ins.iter().chain(outs).find(|o| o.dtype == DType::F16) {
            return Err(format!(
                "tensor {} is f16 and `{name}` has no f16 kernel (stow compile runs it in f32)",
                o.id
            ));
        }
    }
    if let Some(f) = Unary::from_name(name) {
        arity(ins, outs, 1)?;
        // f16 through f32: one rounding of a result more accurate than f16.
        if ins[0].dtype != DType::F16 || outs[0].dtype != DType::F16 {
            all_float(ins, outs)?;
        }
        want(ins[0].len == outs[0].len, || {
            "input and output sizes differ".into()
        })?;
        return Ok((Kernel::Unary(f), 0));
    }
    if let Some(b) = BinOp::from_name(name) {
        return binary(b, ins, outs).map(|k| (k, 0));
    }
    match op.op_type.as_str() {
        "AddAxis" | "RmAxis" | "Reshape" | "IntoShape" | "Identity" | "MoveAxis" | "Slice"
        | "MultiBroadcastTo" | "Downsample" | "NearestUpsample" | "Tile" | "Pad" | "Concat"
        | "TypedConcat" | "Gather" => data_movement(op, ins, outs),
        "LeakyRelu" => {
            arity(ins, outs, 1)?;
            all_f32(ins, outs)?;
            want(ins[0].len == outs[0].len, || "sizes differ".into())?;
            Ok((Kernel::LeakyRelu(attr_float(op, "alpha")?), 0))
        }
        "Resize" => resize_kernel(op, ins, outs).map(|k| (k, 0)),
        "Iff" => {
            arity(ins, outs, 3)?;
            want(ins[0].dtype == DType::Bool, || {
                "condition must be bool".into()
            })?;
            want(
                ins[1].dtype == outs[0].dtype && ins[2].dtype == outs[0].dtype,
                || "branch types differ".into(),
            )?;
            let o = &outs[0].shape;
            let st = |x: &Operand<'_>| {
                broadcast_strides(&x.shape, o).ok_or_else(|| "shapes do not broadcast".to_string())
            };
            let (c, a, b) = (st(&ins[0])?, st(&ins[1])?, st(&ins[2])?);
            let walk = Walk::new(o, [&strides_of(o), &c, &a, &b]).ok_or("rank")?;
            Ok((Kernel::Select(walk), 0))
        }
        "GeluApproximate" => {
            arity(ins, outs, 1)?;
            all_f32(ins, outs)?;
            want(ins[0].len == outs[0].len, || "sizes differ".into())?;
            // The fast form squares where the exact one cubes.
            want(attr_int(op, "fast_impl")? == 0, || {
                "the fast tanh approximation of Gelu".into()
            })?;
            Ok((Kernel::Unary(Unary::GeluTanh), 0))
        }
        "PowConst" => {
            arity(ins, outs, 1)?;
            all_f32(ins, outs)?;
            want(ins[0].len == outs[0].len, || "sizes differ".into())?;
            Ok((Kernel::PowConst(attr_float(op, "exponent")?), 0))
        }
        "IsInf" => {
            arity(ins, outs, 1)?;
            want(
                matches!(ins[0].dtype, DType::F16 | DType::F32 | DType::F64)
                    && outs[0].dtype == DType::Bool,
                || "IsInf maps a float to bool".into(),
            )?;
            want(ins[0].len == outs[0].len, || "sizes differ".into())?;
            Ok((
                Kernel::IsInf(
                    attr_int(op, "detect_positive")? != 0,
                    attr_int(op, "detect_negative")? != 0,
                ),
                0,
            ))
        }
        "Not" => {
            arity(ins, outs, 1)?;
            want(
                ins[0].dtype == DType::Bool && outs[0].dtype == DType::Bool,
                || "Not maps bool to bool".into(),
            )?;
            want(ins[0].len == outs[0].len, || "sizes differ".into())?;
            Ok((Kernel::Not, 0))
        }
        "BitNot" => {
            arity(ins, outs, 1)?;
            want(
                integer(ins[0].dtype) && outs[0].dtype == ins[0].dtype,
                || format!("BitNot of {}", ins[0].dtype.name()),
            )?;
            want(ins[0].len == outs[0].len, || "sizes differ".into())?;
            Ok((Kernel::BitNot, 0))
        }
        "QuantizeLinear" | "DequantizeLinear" => {
            super::quant::prepare_linear(name == "QuantizeLinear", attr_int(op, "axis")?, ins, outs)
        }
        "DynamicQuantizeLinearU8" => {
            want(ins.len() == 1 && outs.len() == 3, || {
                "DynamicQuantizeLinear takes 1 input and gives 3 outputs".into()
            })?;
            let types = [ins[0].dtype, outs[0].dtype, outs[1].dtype, outs[2].dtype];
            want(
                types == [DType::F32, DType::U8, DType::F32, DType::U8]
                    && ins[0].len == outs[0].len
                    && outs[1].len == 1
                    && outs[2].len == 1,
                || "DynamicQuantizeLinear maps f32 to u8 with one scale and zero point".into(),
            )?;
            Ok((Kernel::DynamicQuantizeU8, 0))
        }
        "IsNan" => {
            arity(ins, outs, 1)?;
            want(
                matches!(ins[0].dtype, DType::F16 | DType::F32 | DType::F64)
                    && outs[0].dtype == DType::Bool,
                || "IsNan maps a float to bool".into(),
            )?;
            want(ins[0].len == outs[0].len, || "sizes differ".into())?;
            Ok((Kernel::IsNan, 0))
        }
        "Cast" => {
            arity(ins, outs, 1)?;
            want(ins[0].len == outs[0].len, || "cast changes the size".into())?;
            for x in [&ins[0], &outs[0]] {
                want(castable(x.dtype), || format!("cast of {}", x.dtype.name()))?;
            }
            Ok((Kernel::Cast, 0))
        }
        "Softmax" | "LogSoftmax" => {
            arity(ins, outs, 1)?;
            all_float(ins, outs)?;
            let axes = attr_ints(op, "axes")?;
            want(axes.len() == 1, || format!("softmax over axes {axes:?}"))?;
            let kind = attr_text(op, "kind")?;
            want(ins[0].shape == outs[0].shape, || "shape changes".into())?;
            let at = AroundAxis::new(&ins[0].shape, axes[0]).ok_or("bad axis")?;
            Ok((Kernel::Softmax(at, kind.contains("Log")), 0))
        }
        "RmsNorm" => {
            arity(ins, outs, 1)?;
            all_float(ins, outs)?;
            let axis = attr_int(op, "axis")? as usize;
            want(ins[0].shape == outs[0].shape, || "shape changes".into())?;
            let at = AroundAxis::new(&ins[0].shape, axis).ok_or("bad axis")?;
            Ok((Kernel::RmsNorm(at, attr_float(op, "eps")?), 0))
        }
        "LayerNormalization" => {
            want((1..=3).contains(&ins.len()) && outs.len() == 1, || {
                format!(
                    "expected 1 to 3 inputs and 1 output, found {} and {}",
                    ins.len(),
                    outs.len()
                )
            })?;
            all_float(ins, outs)?;
            want(ins[0].shape == outs[0].shape, || "shape changes".into())?;
            let axis = attr_int(op, "axis")? as usize;
            want(axis < ins[0].shape.len(), || format!("axis {axis}"))?;
            let n: usize = ins[0].shape[axis..].iter().product();
            for p in &ins[1..] {
                want(p.len == n, || {
                    format!("a parameter of {} values for rows of {n}", p.len)
                })?;
            }
            Ok((Kernel::LayerNorm(n, attr_float(op, "epsilon")?), 0))
        }
        t if t.starts_with("Reduce") && attr_text(op, "reducer")?.starts_with("Arg") => {
            arity(ins, outs, 1)?;
            let reducer = attr_text(op, "reducer")?;
            let axes = attr_ints(op, "axes")?;
            want(
                ins[0].dtype == DType::F32 && outs[0].dtype == DType::I64,
                || {
                    format!(
                        "{reducer} of {} into {}",
                        ins[0].dtype.name(),
                        outs[0].dtype.name()
                    )
                },
            )?;
            want(axes.len() == 1 && axes[0] < ins[0].shape.len(), || {
                format!("{reducer} over axes {axes:?}")
            })?;
            let mut out_shape = ins[0].shape.clone();
            out_shape[axes[0]] = 1;
            want(out_shape.iter().product::<usize>() == outs[0].len, || {
                "reduce output shape".into()
            })?;
            let at = AroundAxis::new(&ins[0].shape, axes[0]).ok_or("bad axis")?;
            let (max, last) = match reducer {
                "ArgMax(false)" => (true, false),
                "ArgMax(true)" => (true, true),
                "ArgMin(false)" => (false, false),
                "ArgMin(true)" => (false, true),
                other => return Err(format!("reducer {other}")),
            };
            Ok((Kernel::ArgExtreme { max, last, at }, 0))
        }
        t if t.starts_with("Reduce") => {
            arity(ins, outs, 1)?;
            all_float(ins, outs)?;
            let reducer = attr_text(op, "reducer")?;
            let r = Reducer::from_name(reducer).ok_or_else(|| format!("reducer {reducer}"))?;
            let axes = attr_ints(op, "axes")?;
            let shape = &ins[0].shape;
            let mut out_shape = shape.clone();
            for &a in &axes {
                want(a < shape.len(), || "bad reduce axis".into())?;
                out_shape[a] = 1;
            }
            want(out_shape == outs[0].shape, || "reduce output shape".into())?;
            let os = broadcast_strides(&out_shape, shape).ok_or("shape")?;
            let walk = Walk::new(shape, [&os, &strides_of(shape)]).ok_or("rank")?;
            let count = axes.iter().map(|&a| shape[a]).product();
            Ok((Kernel::Reduce(r, walk, count), 0))
        }
        "MaxPool" => {
            want(ins.len() == 1 && (1..=2).contains(&outs.len()), || {
                format!(
                    "expected 1 input and 1 or 2 outputs (values, indices), found {} and {}",
                    ins.len(),
                    outs.len()
                )
            })?;
            let (x, y) = (&ins[0], &outs[0]);
            want(pool::max_pools(x.dtype), || {
                format!(
                    "tensor {} is {}; this kernel handles numbers but f16",
                    x.id,
                    x.dtype.name()
                )
            })?;
            want(y.dtype == x.dtype, || {
                format!("values are {}, input {}", y.dtype.name(), x.dtype.name())
            })?;
            if let Some(ix) = outs.get(1) {
                want(ix.dtype == DType::I64 && ix.shape == y.shape, || {
                    format!(
                        "indices are {} {:?}, values {:?}: want i64 of the values' shape",
                        ix.dtype.name(),
                        ix.shape,
                        y.shape
                    )
                })?;
            }
            let (window, _) = window(op, &x.shape, &y.shape)?;
            Ok((Kernel::Pool(Pool::Max, window), 0))
        }
        "SumPool" => {
            arity(ins, outs, 1)?;
            all_f32(ins, outs)?;
            let (window, _) = window(op, &ins[0].shape, &outs[0].shape)?;
            let kind = Pool::Sum {
                normalize: attr_int(op, "normalize")? != 0,
                count_include_pad: attr_int(op, "count_include_pad")? != 0,
            };
            Ok((Kernel::Pool(kind, window), 0))
        }
        "MaxPoolIndices" => {
            arity(ins, outs, 1)?;
            let (x, y) = (&ins[0], &outs[0]);
            want(
                x.dtype == DType::I64 && y.dtype == DType::I64 && x.shape == y.shape,
                || "MaxPoolIndices maps i64 indices to i64 indices of the same shape".into(),
            )?;
            let spatial = attr_ints(op, "spatial_dims")?;
            let column_major = match attr_int(op, "storage_order")? {
                0 => false,
                1 => true,
                other => return Err(format!("storage_order {other}")),
            };
            // Planes (images × channels) lead; each holds the pooled
            // positions of one input plane.
            want(x.shape.len() >= 2, || "indices of rank < 2".into())?;
            let per_plane = x.shape[2..].iter().product();
            let plane_len = spatial.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            want(
                !spatial.is_empty() && plane_len.is_some_and(|n| n > 0 && n < 1 << 62),
                || format!("input planes of {spatial:?}"),
            )?;
            Ok((
                Kernel::MaxPoolIndices {
                    spatial,
                    per_plane,
                    column_major,
                },
                0,
            ))
        }
        "LstmEpilogue" => {
            let hidden = attr_int(op, "hidden")? as usize;
            want(ins.len() == 2 && outs.len() == 2, || {
                "LstmEpilogue takes 2 inputs and makes 2 outputs".into()
            })?;
            all_f32(ins, outs)?;
            let cells = ins[1].len;
            want(
                hidden > 0
                    && cells.is_multiple_of(hidden)
                    && ins[0].len == cells * 4
                    && outs[0].len == cells
                    && outs[1].len == cells,
                || format!("LstmEpilogue sizes for hidden size {hidden}"),
            )?;
            Ok((Kernel::LstmEpilogue(hidden), 0))
        }
        "GruEpilogue" => {
            let hidden = attr_int(op, "hidden")? as usize;
            arity(ins, outs, 3)?;
            all_f32(ins, outs)?;
            let cells = ins[2].len;
            want(
                hidden > 0
                    && cells.is_multiple_of(hidden)
                    && ins[0].len == cells * 3
                    && ins[1].len == cells * 3
                    && outs[0].len == cells,
                || format!("GruEpilogue sizes for hidden size {hidden}"),
            )?;
            Ok((Kernel::GruEpilogue(hidden), 0))
        }
        "Trilu" => {
            arity(ins, outs, 2)?;
            let shape = &ins[0].shape;
            want(
                shape.len() >= 2 && shape == &outs[0].shape && ins[0].dtype == outs[0].dtype,
                || "Trilu keeps a matrix's shape".into(),
            )?;
            want(ins[1].dtype == DType::I64 && ins[1].len == 1, || {
                "Trilu's k is one i64".into()
            })?;
            let upper = attr_int(op, "upper")? != 0;
            let (rows, cols) = (shape[shape.len() - 2], shape[shape.len() - 1]);
            Ok((Kernel::Trilu { upper, rows, cols }, 0))
        }
        "GatherElements" => {
            arity(ins, outs, 2)?;
            let axis = attr_int(op, "axis")? as usize;
            let (data, idx, out) = (&ins[0].shape, &ins[1].shape, &outs[0].shape);
            want(
                axis < data.len()
                    && idx == out
                    && idx.len() == data.len()
                    && ins[1].dtype == DType::I64
                    && ins[0].dtype == outs[0].dtype,
                || "GatherElements shapes".into(),
            )?;
            want(
                (0..data.len()).all(|d| d == axis || idx[d] <= data[d]),
                || "indices larger than the data".into(),
            )?;
            want(data.len() <= super::layout::MAX_RANK, || {
                "rank too high".into()
            })?;
            Ok((
                Kernel::GatherElements {
                    data_strides: strides_of(data),
                    shape: out.clone(),
                    axis,
                    size: data[axis],
                },
                0,
            ))
        }
        // ONNX MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv.
        "QLinearAdd" | "QLinearMul" => {
            super::qpointwise::prepare_binary(name == "QLinearMul", ins, outs)
        }
        "QLookup" => super::qpointwise::prepare_lookup(ins, outs),
        "QLinearGlobalAveragePool" => {
            super::qpointwise::prepare_pool(attr_int(op, "channels_last")? != 0, ins, outs)
        }
        "EinSum" | "Conv" if attr(op, "q_params").is_some() => {
            want(attr(op, PACKED_LEFT_ATTR).is_none(), || {
                format!("a quantized product carries `{PACKED_LEFT_ATTR}`")
            })?;
            super::qlinear::prepare(op, ins, outs).map(|(k, s)| (k, budgeted(op, s)))
        }
        "Conv" | "Deconv" => conv(op, ins, outs),
        // The plain loop reads its operands row-major: never a weight
        // stored packed.
        "EinSum" if attr(op, PACKED_ATTR).is_some() || attr(op, PACKED_LEFT_ATTR).is_some() => {
            einsum(op, ins, outs)
        }
        "EinSum" => einsum(op, ins, outs).or_else(|product| {
            contraction(op, ins, outs)
                .map(|k| (k, 0))
                .map_err(|other| format!("{product}; {other}"))
        }),
        "GridSample" => super::sample::grid_sample(
            attr_text(op, "mode")?,
            attr_text(op, "padding_mode")?,
            attr_int(op, "align_corners")? != 0,
            ins,
            outs,
        ),
        "Fft" => super::fourier::prepare(
            attr_int(op, "axis")?,
            attr_int(op, "inverse")? != 0,
            ins,
            outs,
        ),
        "Lrn" => super::sample::lrn(
            attr_int(op, "size")?,
            attr_float(op, "alpha")?,
            attr_float(op, "beta")?,
            attr_float(op, "bias")?,
            ins,
            outs,
        ),
        "Onehot" | "ScatterElements" | "ScatterNd" | "GatherNd" => {
            super::indexing::prepare(op, ins, outs)
        }
        other => Err(format!("no kernel for `{other}`")),
    }
}

/// Kernels that only move elements: views, transposes, slices, copies
/// into and out of concats, gathers, pads, tiles, up- and downsampling.
fn data_movement(
    op: &Op,
    ins: &[Operand<'_>],
    outs: &[Operand<'_>],
) -> Result<(Kernel, usize), String> {
    match op.op_type.as_str() {
        "AddAxis" | "RmAxis" | "Reshape" | "IntoShape" | "Identity" => {
            arity(ins, outs, 1)?;
            want(
                ins[0].len == outs[0].len && ins[0].dtype == outs[0].dtype,
                || "a reshape must keep the element count and type".into(),
            )?;
            if same_bytes(&ins[0], &outs[0]) {
                return Ok((Kernel::Nothing, 0));
            }
            let walk = Walk::new(&[outs[0].len], [&[1], &[1]]).ok_or("rank")?;
            Ok(copy(walk, [0, 0]))
        }
        "MultiBroadcastTo" => {
            arity(ins, outs, 1)?;
            want(ins[0].dtype == outs[0].dtype, || "type changes".into())?;
            let o = &outs[0].shape;
            let src = broadcast_strides(&ins[0].shape, o).ok_or("shapes do not broadcast")?;
            let walk = Walk::new(o, [&strides_of(o), &src]).ok_or("rank too high")?;
            Ok(copy(walk, [0, 0]))
        }
        "MoveAxis" => {
            arity(ins, outs, 1)?;
            let mv = attr_ints(op, "move")?;
            let rank = ins[0].shape.len();
            want(mv.len() == 2 && mv[0] < rank && mv[1] < rank, || {
                format!("bad move {mv:?}")
            })?;
            let mut axes: Vec<usize> = (0..rank).collect();
            let a = axes.remove(mv[0]);
            axes.insert(mv[1], a);
            let in_strides = strides_of(&ins[0].shape);
            let src: Vec<usize> = axes.iter().map(|&a| in_strides[a]).collect();
            let dims: Vec<usize> = axes.iter().map(|&a| ins[0].shape[a]).collect();
            want(dims == outs[0].shape, || {
                "output shape is not the moved input".into()
            })?;
            let walk = Walk::new(&dims, [&strides_of(&dims), &src]).ok_or("rank too high")?;
            Ok(copy(walk, [0, 0]))
        }
        "Slice" => {
            arity(ins, outs, 1)?;
            let axis = attr_int(op, "axis")? as usize;
            let start: usize = attr_text(op, "start")?
                .parse()
                .map_err(|_| "symbolic slice start".to_string())?;
            let shape = &ins[0].shape;
            want(
                axis < shape.len() && outs[0].shape.len() == shape.len(),
                || "bad slice axis".into(),
            )?;
            let s = strides_of(shape);
            let same = (0..shape.len()).all(|d| d == axis || outs[0].shape[d] == shape[d]);
            want(same && ins[0].dtype == outs[0].dtype, || {
                "output shape is not a slice of the input".into()
            })?;
            want(
                start <= shape[axis] && outs[0].shape[axis] <= shape[axis] - start,
                || "slice out of range".into(),
            )?;
            let walk =
                Walk::new(&outs[0].shape, [&strides_of(&outs[0].shape), &s]).ok_or("rank")?;
            Ok((
                Kernel::Copy {
                    walk,
                    base: [0, start * s[axis]],
                    fill: None,
                },
                0,
            ))
        }
        "Tile" => {
            arity(ins, outs, 1)?;
            let m = attr_ints(op, "multipliers")?;
            let shape = &ins[0].shape;
            want(
                m.len() == shape.len() && ins[0].dtype == outs[0].dtype,
                || "bad tile".into(),
            )?;
            want(sane(&m), || "multipliers out of range".into())?;
            let tiled: Vec<usize> = shape.iter().zip(&m).map(|(d, k)| d * k).collect();
            want(tiled == outs[0].shape, || {
                "output shape is not the tiled input".into()
            })?;
            let os = strides_of(&outs[0].shape);
            let walk = Walk::new(shape, [&os, &strides_of(shape)]).ok_or("rank")?;
            let mut bases = vec![0usize];
            for (a, &k) in m.iter().enumerate() {
                let step = shape[a] * os[a];
                bases = bases
                    .iter()
                    .flat_map(|&b| (0..k).map(move |i| b + i * step))
                    .collect();
            }
            Ok((
                Kernel::Tile(walk, bases.into_iter().map(|b| [b, 0]).collect()),
                0,
            ))
        }
        "NearestUpsample" => {
            // Each axis of the output seen as (input index, repeat): the
            // repeat has stride 0 in the input, so a strided copy does it.
            arity(ins, outs, 1)?;
            let scales = attr_ints(op, "scales")?;
            let shape = &ins[0].shape;
            want(scales.len() == shape.len() && sane(&scales), || {
                "bad scales".into()
            })?;
            let scaled: Vec<usize> = shape.iter().zip(&scales).map(|(d, s)| d * s).collect();
            want(
                scaled == outs[0].shape && ins[0].dtype == outs[0].dtype,
                || "output shape is not the upsampled input".into(),
            )?;
            let (os, is) = (strides_of(&outs[0].shape), strides_of(shape));
            let mut dims = Vec::new();
            let (mut dst, mut src) = (Vec::new(), Vec::new());
            for a in 0..shape.len() {
                dims.extend([shape[a], scales[a]]);
                dst.extend([os[a] * scales[a], os[a]]);
                src.extend([is[a], 0]);
            }
            let walk = Walk::new(&dims, [&dst, &src]).ok_or("rank too high")?;
            Ok(copy(walk, [0, 0]))
        }
        "Downsample" => {
            arity(ins, outs, 1)?;
            let axis = attr_int(op, "axis")? as usize;
            let stride = attr_int(op, "stride")?;
            let modulo = attr_int(op, "modulo")? as usize;
            let shape = &ins[0].shape;
            want(axis < shape.len() && stride > 0, || "bad downsample".into())?;
            let stride = stride as usize;
            want(modulo < 1 << 31 && stride < 1 << 31, || {
                "downsample out of range".into()
            })?;
            let mut expect = shape.clone();
            expect[axis] = shape[axis].saturating_sub(modulo).div_ceil(stride);
            want(
                expect == outs[0].shape && ins[0].dtype == outs[0].dtype,
                || "output shape is not the downsampled input".into(),
            )?;
            let mut src = strides_of(shape);
            let base = modulo * src[axis];
            src[axis] *= stride;
            let walk =
                Walk::new(&outs[0].shape, [&strides_of(&outs[0].shape), &src]).ok_or("rank")?;
            Ok(copy(walk, [0, base]))
        }
        "Pad" => {
            arity(ins, outs, 1)?;
            let pads = attr_ints(op, "pads")?;
            want(sane(&pads), || "pads out of range".into())?;
            let shape = &ins[0].shape;
            want(pads.len() == 2 * shape.len(), || {
                "pads do not match the rank".into()
            })?;
            let padded: Vec<usize> = (0..shape.len())
                .map(|i| shape[i] + pads[2 * i] + pads[2 * i + 1])
                .collect();
            want(
                padded == outs[0].shape && ins[0].dtype == outs[0].dtype,
                || "output shape is not the padded input".into(),
            )?;
            let mode = attr_text(op, "mode")?;
            if mode == "Reflect" || mode == "Edge" {
                let before: Vec<usize> = (0..shape.len()).map(|i| pads[2 * i]).collect();
                let reflect = mode == "Reflect";
                let fits = (0..shape.len()).all(|i| {
                    shape[i] > 0 && (!reflect || pads[2 * i].max(pads[2 * i + 1]) < shape[i].max(2))
                });
                want(fits, || "padding wider than the input".into())?;
                return Ok((Kernel::PadEdges { reflect, before }, 0));
            }
            want(mode.starts_with("Constant"), || format!("pad mode {mode}"))?;
            let value = attr_float(op, "value").unwrap_or(0.0) as f64;
            let os = strides_of(&outs[0].shape);
            let base: usize = (0..shape.len()).map(|i| pads[2 * i] * os[i]).sum();
            let walk = Walk::new(shape, [&os, &strides_of(shape)]).ok_or("rank")?;
            Ok((
                Kernel::Copy {
                    walk,
                    base: [base, 0],
                    fill: Some(value),
                },
                0,
            ))
        }
        "Concat" | "TypedConcat" => {
            want(outs.len() == 1, || "one output expected".into())?;
            let axis = attr_int(op, "axis")? as usize;
            let out = &outs[0];
            want(axis < out.shape.len(), || "bad concat axis".into())?;
            let os = strides_of(&out.shape);
            let size = out.dtype.size_bytes() as usize;
            let mut parts = Vec::new();
            let mut at = 0;
            for (i, x) in ins.iter().enumerate() {
                want(
                    x.dtype == out.dtype && x.shape.len() == out.shape.len(),
                    || "concat input differs".into(),
                )?;
                let base = at * os[axis];
                let outer: usize = out.shape[..axis].iter().product();
                let in_place = outer == 1
                    && matches!((x.loc, out.loc), (Loc::Arena(a), Loc::Arena(o)) if a == o + base * size);
                if !in_place {
                    let walk = Walk::new(&x.shape, [&os, &strides_of(&x.shape)]).ok_or("rank")?;
                    parts.push((i, walk, [base, 0]));
                }
                at += x.shape[axis];
            }
            want(at == out.shape[axis], || {
                "concat sizes do not add up".into()
            })?;
            Ok((
                if parts.is_empty() {
                    Kernel::Nothing
                } else {
                    Kernel::Concat(parts)
                },
                0,
            ))
        }
        "Gather" => {
            arity(ins, outs, 2)?;
            let axis = attr_int(op, "axis")? as usize;
            let d = &ins[0].shape;
            want(axis < d.len(), || "bad gather axis".into())?;
            want(ins[1].dtype == DType::I64, || {
                "gather indices must be i64".into()
            })?;
            want(ins[0].dtype == outs[0].dtype, || {
                "gather changes the type".into()
            })?;
            let outer: usize = d[..axis].iter().product();
            let inner: usize = d[axis + 1..].iter().product();
            want(outs[0].len == outer * ins[1].len * inner, || {
                "gather output size".into()
            })?;
            Ok((
                Kernel::Gather {
                    outer,
                    axis: d[axis],
                    inner,
                },
                0,
            ))
        }
        other => Err(format!("no kernel for `{other}`")),
    }
}

/// Where tract's coordinate transformation puts output index `x` on an
/// input axis.
/// Where output index `x` samples the input, by ONNX's formula for `mode`.
/// In f64: with a scale from the shapes (7 → 8), f32 puts output 4 at
/// 3.4999998 instead of 3.5, and nearest rounding then picks the other
/// input (onnxruntime and ONNX's reference compute it exactly).
fn source_coordinate(
    mode: &str,
    x: usize,
    scale: f64,
    len_in: usize,
    len_out: usize,
) -> Option<f64> {
    let x = x as f64;
    Some(match mode {
        "half_pixel" => (x + 0.5) / scale - 0.5,
        // The resized length is the output's, not scale × input length.
        "align_corners" if len_out > 1 => x * (len_in as f64 - 1.0) / (len_out as f64 - 1.0),
        "align_corners" => 0.0,
        "asymmetric" => x / scale,
        "pytorch_half_pixel" => {
            if len_out > 1 {
                (x + 0.5) / scale - 0.5
            } else {
                -0.5
            }
        }
        "half_pixel_symmetric" => {
            let adjustment = len_out as f64 / (scale * len_in as f64);
            let offset = len_in as f64 / 2.0 * (1.0 - adjustment);
            offset + (x + 0.5) / scale - 0.5
        }
        "tf_half_pixel_for_nn" => (x + 0.5) / scale,
        _ => return None,
    })
}

fn resize_kernel(op: &Op, ins: &[Operand<'_>], outs: &[Operand<'_>]) -> Result<Kernel, String> {
    want(!ins.is_empty() && outs.len() == 1, || {
        "resize takes an input".into()
    })?;
    want(
        ins[0].dtype == DType::F32 && outs[0].dtype == DType::F32,
        || "resize handles f32".into(),
    )?;
    let (input, output) = (&ins[0].shape, &outs[0].shape);
    want(input.len() == output.len(), || "rank".into())?;
    let mode = attr_text(op, "coordinate_transformation")?;
    let linear = match attr_text(op, "interpolator")? {
        "linear" => true,
        "nearest" => false,
        other => return Err(format!("{other} interpolation")),
    };
    let prefer_ceil = match attr_text(op, "nearest")? {
        "floor" => false,
        "round_prefer_ceil" => true,
        other => return Err(format!("nearest mode {other}")),
    };
    // Scales come from the scales input when it is a constant of one
    // value per axis, else from the shapes.
    let scales_at = attr_int(op, "scales_input")?;
    let given: Option<Vec<f32>> = usize::try_from(scales_at)
        .ok()
        .and_then(|i| ins.get(i))
        .and_then(|t| match t.loc {
            Loc::Weight(bytes) if t.dtype == DType::F32 && t.len == input.len() => {
                bytemuck::try_cast_slice::<u8, f32>(bytes)
                    .ok()
                    .map(|v| v.to_vec())
            }
            _ => None,
        });
    let mut axes = Vec::new();
    for a in 0..input.len() {
        let (len_in, len_out) = (input[a], output[a]);
        let scale = match &given {
            Some(s) => f64::from(s[a]),
            None => len_out as f64 / len_in.max(1) as f64,
        };
        if len_in == len_out && scale == 1.0 {
            continue;
        }
        want(len_in > 0 && scale > 0.0 && scale.is_finite(), || {
            "bad scale".into()
        })?;
        let mut taps = Vec::with_capacity(len_out);
        for x in 0..len_out {
            let x_in = source_coordinate(mode, x, scale, len_in, len_out)
                .ok_or_else(|| format!("coordinate transformation {mode}"))?;
            let cell = Float::ceil(x_in) - 1.0;
            let r = x_in - cell;
            let w = if linear {
                [
                    (1.0 - r).clamp(0.0, 1.0) as f32,
                    (1.0 - (1.0 - r).abs()).clamp(0.0, 1.0) as f32,
                ]
            } else {
                let right = r == 1.0 || (prefer_ceil && r >= 0.5);
                [!right as u8 as f32, right as u8 as f32]
            };
            let clamp = |i: f64| (i.max(0.0) as usize).min(len_in - 1);
            taps.push(([clamp(cell), clamp(cell + 1.0)], w));
        }
        axes.push(nn::ResizeAxis { axis: a, taps });
    }
    want(axes.len() <= 3, || format!("{} resized axes", axes.len()))?;
    Ok(Kernel::Resize(axes))
}

fn castable(d: DType) -> bool {
    matches!(d, DType::F16 | DType::F32 | DType::F64 | DType::Bool) || integer(d)
}

fn integer(d: DType) -> bool {
    matches!(
        d,
        DType::I8
            | DType::I16
            | DType::I32
            | DType::I64
            | DType::U8
            | DType::U16
            | DType::U32
            | DType::U64
    )
}

fn binary(b: BinOp, ins: &[Operand<'_>], outs: &[Operand<'_>]) -> Result<Kernel, String> {
    arity(ins, outs, 2)?;
    let (x, y, o) = (&ins[0], &ins[1], &outs[0]);
    want(x.dtype == y.dtype, || "operand types differ".into())?;
    let ok = match x.dtype {
        DType::F32 | DType::F64 => {
            o.dtype == if b.compares() { DType::Bool } else { x.dtype }
                && !b.logical()
                && !b.bitwise()
        }
        t if integer(t) => {
            o.dtype == if b.compares() { DType::Bool } else { x.dtype } && !b.logical()
        }
        DType::Bool => {
            (b.logical() || matches!(b, BinOp::Eq | BinOp::Ne)) && o.dtype == DType::Bool
        }
        _ => false,
    };
    want(ok, || {
        format!("{b:?} on {} into {}", x.dtype.name(), o.dtype.name())
    })?;
    let st = |t: &Operand<'_>| {
        broadcast_strides(&t.shape, &o.shape).ok_or_else(|| "shapes do not broadcast".to_string())
    };
    let (sa, sb) = (st(x)?, st(y)?);
    let walk = Walk::new(&o.shape, [&strides_of(&o.shape), &sa, &sb]).ok_or("rank too high")?;
    Ok(Kernel::Binary(b, walk))
}

/// Pooling/convolution geometry from the recorded pool attributes. Also
/// returns whether the layout has a batch axis.
/// True when every value is small enough for index arithmetic on any
/// tensor that fits an arena (so no product below can overflow).
fn sane(v: &[usize]) -> bool {
    v.iter().all(|&x| x < 1 << 31)
}

fn window(op: &Op, input: &[usize], output: &[usize]) -> Result<(Window, bool), String> {
    let format = attr_text(op, "data_format")?;
    let batch = match format {
        "NCHW" => true,
        "CHW" => false,
        f => return Err(format!("data format {f}")),
    };
    let kernel = attr_ints(op, "kernel_shape")?;
    let spatial = kernel.len();
    want((1..=3).contains(&spatial), || format!("{spatial}-d window"))?;
    let lead = batch as usize + 1;
    want(
        input.len() == lead + spatial && output.len() == lead + spatial,
        || "rank".into(),
    )?;
    // Images (and, for pools, channels) pass through unchanged.
    let kept = if op.op_type.ends_with("Pool") {
        lead
    } else {
        lead - 1
    };
    want(input[..kept] == output[..kept], || {
        "leading dimensions change".into()
    })?;
    let strides = attr_ints(op, "strides")?;
    let dilations = attr_ints(op, "dilations")?;
    want(sane(&kernel) && sane(&strides) && sane(&dilations), || {
        "window attributes out of range".into()
    })?;
    want(
        strides.len() == spatial && dilations.len() == spatial,
        || "strides".into(),
    )?;
    let pad_before: Vec<usize> = match attr_text(op, "padding")? {
        "explicit" => attr_ints(op, "pads_before")?,
        "valid" => vec![0; spatial],
        same => (0..spatial)
            .map(|i| {
                let need = (output[lead + i].max(1) - 1) * strides[i]
                    + (kernel[i].max(1) - 1) * dilations[i]
                    + 1;
                let total = need.saturating_sub(input[lead + i]);
                if same == "same_upper" {
                    total / 2
                } else {
                    total - total / 2
                }
            })
            .collect(),
    };
    let pad_after: Vec<usize> = match attr_text(op, "padding")? {
        "explicit" => attr_ints(op, "pads_after")?,
        "valid" => vec![0; spatial],
        _ => (0..spatial)
            .map(|i| {
                let need = (output[lead + i].max(1) - 1) * strides[i]
                    + (kernel[i].max(1) - 1) * dilations[i]
                    + 1;
                need.saturating_sub(input[lead + i])
                    .saturating_sub(pad_before.get(i).copied().unwrap_or(0))
            })
            .collect(),
    };
    want(
        pad_before.len() == spatial && pad_after.len() == spatial,
        || "pads".into(),
    )?;
    want(sane(&pad_before) && sane(&pad_after), || {
        "padding out of range".into()
    })?;
    // 1-d and 2-d ops run as 3-d ones with leading dimensions of 1.
    let two = |v: &[usize], one: usize| -> [usize; 3] {
        core::array::from_fn(|a| {
            if a + spatial < 3 {
                one
            } else {
                v[a + spatial - 3]
            }
        })
    };
    let planes: usize = input[..lead].iter().product();
    let w = Window {
        planes,
        input: two(&input[lead..], 1),
        output: two(&output[lead..], 1),
        kernel: two(&kernel, 1),
        strides: two(&strides, 1),
        dilations: two(&dilations, 1),
        pad: two(&pad_before, 0),
        pad_after: two(&pad_after, 0),
    };
    want(w.strides.iter().chain(&w.dilations).all(|&s| s > 0), || {
        "zero stride".into()
    })?;
    Ok((w, batch))
}

/// The geometry of convolution `op` of image `x` by `kernel` (OIHW)
/// into `y`, checked against the operands' shapes.
pub(super) fn conv_shape(
    op: &Op,
    x: &Operand<'_>,
    kernel: &Operand<'_>,
    y: &Operand<'_>,
) -> Result<ConvShape, String> {
    let format = attr_text(op, "kernel_format")?;
    want(format == "OIHW", || format!("kernel format {format}"))?;
    let (window, batch) = window(op, &x.shape, &y.shape)?;
    let groups = attr_int(op, "group")?;
    let lead = batch as usize;
    let (c_in, c_out) = (x.shape[lead], y.shape[lead]);
    let groups = usize::try_from(groups)
        .ok()
        .filter(|&g| g > 0 && c_in % g == 0 && c_out % g == 0)
        .ok_or_else(|| format!("{groups} groups of {c_in} input and {c_out} output channels"))?;
    let s = ConvShape {
        batch: if batch { x.shape[0] } else { 1 },
        groups,
        in_per_group: c_in / groups,
        out_per_group: c_out / groups,
        window,
    };
    want(kernel.len == c_out * s.k(), || {
        "kernel size does not match".into()
    })?;
    Ok(s)
}

fn conv(op: &Op, ins: &[Operand<'_>], outs: &[Operand<'_>]) -> Result<(Kernel, usize), String> {
    let deconv = op.op_type == "Deconv";
    if deconv {
        let padding = attr_text(op, "padding")?;
        want(padding == "explicit" || padding == "valid", || {
            format!("transposed convolution with {padding} padding")
        })?;
    }
    want((2..=3).contains(&ins.len()) && outs.len() == 1, || {
        "conv takes 2 or 3 inputs".into()
    })?;
    all_f32(ins, outs)?;
    let s = conv_shape(op, &ins[0], &ins[1], &outs[0])?;
    let c_out = s.groups * s.out_per_group;
    if let Some(b) = ins.get(2) {
        want(b.len == 1 || b.len == c_out, || "bias size".into())?;
    }
    want(attr(op, PACKED_LEFT_ATTR).is_none(), || {
        format!("a convolution carries `{PACKED_LEFT_ATTR}`")
    })?;
    if deconv {
        want(packed_depth(op)?.is_none(), || {
            "a transposed convolution's kernel cannot be packed".into()
        })?;
        return Ok((Kernel::Deconv(s), 0));
    }
    if let Some(flag) = attr(op, IN_PLACE_ATTR) {
        return in_place(op, flag, s, ins, outs);
    }
    let Some(kc) = packed_depth(op)? else {
        let scratch = budgeted(op, s.scratch_elems());
        return Ok((Kernel::Conv(s, None, Default::default(), false), scratch));
    };
    want(!s.depthwise(), || {
        "a depthwise convolution's kernel cannot be packed".into()
    })?;
    let p = Panels::of_conv(&s, kc);
    let scratch = packed_scratch(op, &p, s.n())?;
    Ok((Kernel::Conv(s, Some(p), Default::default(), false), scratch))
}

/// A depthwise convolution over its own input: refused unless the output
/// starts at the input's first byte and each output plane is no larger
/// than an input plane (the condition under which planes in order only
/// overwrite input already read).
fn in_place(
    op: &Op,
    flag: &AttrValue,
    s: ConvShape,
    ins: &[Operand<'_>],
    outs: &[Operand<'_>],
) -> Result<(Kernel, usize), String> {
    want(matches!(flag, AttrValue::Int(1)), || {
        format!("attribute `{IN_PLACE_ATTR}` is not the int 1")
    })?;
    want(s.depthwise() && packed_depth(op)?.is_none(), || {
        "only an unpacked depthwise convolution runs in place".into()
    })?;
    want(
        matches!((ins[0].loc, outs[0].loc), (Loc::Arena(x), Loc::Arena(y)) if x == y),
        || "a convolution in place must start its output at its input".into(),
    )?;
    want(s.window.output_plane() <= s.window.input_plane(), || {
        "an output plane larger than an input plane cannot be in place".into()
    })?;
    Ok((
        Kernel::DepthwiseInPlace(s, gemm::Finish::Keep),
        super::depthwise_inplace::scratch_elems(&s),
    ))
}

/// The depth block of a weight packed at compile time ([`PACKED_ATTR`]),
/// or `None` for a weight stored row-major.
pub(super) fn packed_depth(op: &Op) -> Result<Option<usize>, String> {
    depth_attr(op, PACKED_ATTR)
}

fn depth_attr(op: &Op, name: &str) -> Result<Option<usize>, String> {
    match attr(op, name) {
        None => Ok(None),
        Some(AttrValue::Int(kc)) if *kc >= 1 => Ok(usize::try_from(*kc).ok()),
        Some(_) => Err(format!("attribute `{name}` is not a positive int")),
    }
}

/// Scratch of a product whose weight is packed as `p`, with `other`
/// lines of the other operand; the depth block must be the product's own
/// and leave room for one panel of the other operand.
fn packed_scratch(op: &Op, p: &Panels, other: usize) -> Result<usize, String> {
    want(p.kc <= p.depth.max(1), || {
        format!(
            "weight packed with depth block {}, deeper than the product ({})",
            p.kc, p.depth
        )
    })?;
    let scratch = budgeted(op, prepacked::scratch_elems(p, other));
    want(prepacked::fits(p, scratch), || {
        format!(
            "weight packed with depth block {}, too deep for {scratch} floats of scratch",
            p.kc
        )
    })?;
    Ok(scratch)
}

/// The layout `op`'s weight operand is stored in as its packing attribute
/// ([`PACKED_ATTR`] or [`PACKED_LEFT_ATTR`]) says, for operands of these
/// element types and shapes: `None` without one, or where setup refuses
/// the operator.
pub fn marked_panels(
    op: &Op,
    inputs: &[(DType, Vec<u64>)],
    outputs: &[(DType, Vec<u64>)],
) -> Option<Panels> {
    let (ins, outs) = (shaped(inputs)?, shaped(outputs)?);
    let mut trial = op.clone();
    trial
        .attributes
        .retain(|(name, _)| name != SCRATCH_BUDGET_ATTR);
    match prepare(&trial, &ins, &outs).ok()?.0 {
        Kernel::Conv(_, Some(p), ..) => Some(p),
        Kernel::MatMul(mm) => mm.packed,
        Kernel::QProduct(q) => q.packed_weight(),
        _ => None,
    }
}

/// The attribute that marks `op_type`'s weight packed as `p` says
/// ([`PACKED_LEFT_ATTR`] for a product's weight packed as the left
/// operand, [`PACKED_ATTR`] otherwise).
pub fn packed_attr(op_type: &str, p: &Panels) -> &'static str {
    if op_type == "EinSum" && p.side == Side::Left {
        PACKED_LEFT_ATTR
    } else {
        PACKED_ATTR
    }
}

/// The layout in which the compiler may store `op`'s weight operand
/// (input 1) packed, for operands of these element types and shapes:
/// `Some` for a convolution that is not depthwise and for a product of
/// more than one row by a weight shared by every batch position. Its depth
/// block is [`gemm::KC`] (at most the depth); see
/// [`gemm::depth_within`] for a kernel short of scratch. For a quantized
/// product, `Some` where an i8 weight gives the lanes of the int8 kernels
/// ([`Side::Quads`], the whole depth in one block).
pub fn packable(
    op: &Op,
    inputs: &[(DType, Vec<u64>)],
    outputs: &[(DType, Vec<u64>)],
) -> Option<Panels> {
    let (ins, outs) = (shaped(inputs)?, shaped(outputs)?);
    let mut trial = op.clone();
    trial.attributes.retain(|(name, _)| {
        name != PACKED_ATTR && name != PACKED_LEFT_ATTR && name != SCRATCH_BUDGET_ATTR
    });
    let kc = match prepare(&trial, &ins, &outs).ok()?.0 {
        Kernel::Conv(s, None, ..) => s.k().clamp(1, gemm::KC),
        Kernel::MatMul(mm) => mm.mnk[2].clamp(1, gemm::KC),
        // The int8 kernels take the whole depth at once.
        Kernel::QProduct(q) => q.lanes_weight(ins.get(1)?)?.kc,
        _ => return None,
    };
    let kc = i64::try_from(kc).ok()?;
    let with = |attr: &str| {
        let mut marked = trial.clone();
        marked.attributes.push((attr.into(), AttrValue::Int(kc)));
        marked.attributes.sort_by(|a, b| a.0.cmp(&b.0));
        match prepare(&marked, &ins, &outs).ok()?.0 {
            Kernel::Conv(_, Some(p), ..) => Some(p),
            Kernel::MatMul(mm) => mm.packed,
            Kernel::QProduct(q) => q.packed_weight(),
            _ => None,
        }
    };
    // A float product that can run transposed takes its weight as the
    // left operand: the image is then packed as contiguous runs and the
    // output written as whole rows.
    match op.op_type.as_str() {
        "EinSum" => with(PACKED_LEFT_ATTR).or_else(|| with(PACKED_ATTR)),
        _ => with(PACKED_ATTR),
    }
    .filter(Panels::is_dense)
}

/// An EinSum that is not a product of two f32 matrices.
fn contraction(op: &Op, ins: &[Operand<'_>], outs: &[Operand<'_>]) -> Result<Kernel, String> {
    want(outs.len() == 1, || "EinSum gives one output".into())?;
    let t = outs[0].dtype;
    want(
        matches!(t, DType::F16 | DType::F32 | DType::F64) && ins.iter().all(|x| x.dtype == t),
        || "EinSum on mixed or non-float types".into(),
    )?;
    let shapes: Vec<&[usize]> = ins.iter().map(|x| x.shape.as_slice()).collect();
    let c = super::contract::Contraction::new(attr_text(op, "expr")?, &shapes, &outs[0].shape)?;
    let work = c.dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    want(work.is_some_and(|w| w < 1 << 40), || {
        "EinSum too large to loop over".into()
    })?;
    Ok(Kernel::Contraction(c))
}

fn einsum(op: &Op, ins: &[Operand<'_>], outs: &[Operand<'_>]) -> Result<(Kernel, usize), String> {
    arity(ins, outs, 2)?;
    all_f32(ins, outs)?;
    let expr = attr_text(op, "expr")?;
    let (lhs, out_axes) = expr.split_once("->").ok_or("no ->")?;
    let (a_axes, b_axes) = lhs.split_once(',').ok_or("not two operands")?;
    let axes = [a_axes, b_axes, out_axes].map(|s| s.chars().collect::<Vec<char>>());
    let ops = [&ins[0], &ins[1], &outs[0]];
    for (ax, o) in axes.iter().zip(ops) {
        want(ax.len() == o.shape.len(), || {
            format!("`{expr}` does not match the ranks")
        })?;
    }
    let strides = ops.map(|o| strides_of(&o.shape));
    let mut size = alloc::collections::BTreeMap::<char, usize>::new();
    for (ax, o) in axes.iter().zip(ops) {
        for (&c, &d) in ax.iter().zip(&o.shape) {
            let e = size.entry(c).or_insert(d);
            if *e == 1 {
                *e = d;
            }
            want(d == 1 || d == *e, || format!("axis {c} has two sizes"))?;
        }
    }
    // Stride of axis `c` in operand `i` (0 when absent or of size 1 there).
    let stride = |i: usize, c: char| -> usize {
        axes[i]
            .iter()
            .position(|&x| x == c)
            .filter(|&p| ops[i].shape[p] > 1)
            .map_or(0, |p| strides[i][p])
    };
    let has = |i: usize, c: char| stride(i, c) != 0 || axes[i].contains(&c) && size[&c] == 1;
    let (mut m, mut n, mut k, mut batch) = (vec![], vec![], vec![], vec![]);
    for (&c, &d) in &size {
        if d == 1 {
            continue;
        }
        match (has(0, c), has(1, c), has(2, c)) {
            (true, false, true) => m.push(c),
            (false, true, true) => n.push(c),
            (true, true, false) => k.push(c),
            (_, _, true) => batch.push(c),
            _ => return Err(format!("`{expr}` sums an axis of one operand")),
        }
    }
    // Each role's innermost axes that merge into one strided dimension
    // become the product's m, n or k; the other axes of the role are
    // walked like batch axes (a k axis has stride 0 in C, so the products
    // along it accumulate into the same C).
    let merge = |role: &mut Vec<char>, by: usize, of: [usize; 2], rest: &mut Vec<char>| {
        role.sort_by_key(|&c| axes[by].iter().position(|&x| x == c));
        let mut d = 1;
        let mut s = [0, 0];
        for (i, &c) in role.iter().enumerate().rev() {
            let cs = [stride(of[0], c), stride(of[1], c)];
            if i + 1 < role.len() && (cs[0] != s[0] * d || cs[1] != s[1] * d) {
                rest.extend_from_slice(&role[..=i]);
                break;
            }
            if i + 1 == role.len() {
                s = cs;
            }
            d *= size[&c];
        }
        (d, s)
    };
    let (mm, [am, cm]) = merge(&mut m, 2, [0, 2], &mut batch);
    let (nn, [bn, cn]) = merge(&mut n, 2, [1, 2], &mut batch);
    let (kk, [ak, bk]) = merge(&mut k, 0, [0, 1], &mut batch);
    let dims: Vec<usize> = batch.iter().map(|c| size[c]).collect();
    let per = |i: usize| batch.iter().map(|&c| stride(i, c)).collect::<Vec<_>>();
    // Output columns contiguous: tiles are written and the image's
    // panels read as whole rows. Unpacked, the swapped product's left
    // operand is packed again for every block of NC columns, so only a
    // weight that is small next to the image is worth it (at most half
    // the image's floats in all). A weight packed as the left operand
    // (`stow.packed_left`) is read from the mapping and always swapped;
    // one packed as the right operand (`stow.packed`) never is.
    let (right_kc, left_kc) = (packed_depth(op)?, depth_attr(op, PACKED_LEFT_ATTR)?);
    want(right_kc.is_none() || left_kc.is_none(), || {
        format!("both `{PACKED_ATTR}` and `{PACKED_LEFT_ATTR}`")
    })?;
    let swappable = mm > 1 && nn > 1 && cm == 1 && cn != 1;
    want(left_kc.is_none() || swappable, || {
        format!("`{PACKED_LEFT_ATTR}` on a product whose output is not transposed")
    })?;
    let swapped = left_kc.is_some()
        || (right_kc.is_none()
            && swappable
            && nn.saturating_mul(mm.div_ceil(gemm::NC)).saturating_mul(2) <= mm);
    let packed_kc = right_kc.or(left_kc);
    let mm_ = if swapped {
        MatMul {
            batch: Walk::new(&dims, [&per(2), &per(1), &per(0)]).ok_or("too many batch axes")?,
            mnk: [nn, mm, kk],
            a: [bn, bk],
            b: [ak, am],
            c: [cn, cm],
            packed: None,
            swapped,
            finish: gemm::Finish::Keep,
            residual: false,
        }
    } else {
        MatMul {
            batch: Walk::new(&dims, [&per(2), &per(0), &per(1)]).ok_or("too many batch axes")?,
            mnk: [mm, nn, kk],
            a: [am, ak],
            b: [bk, bn],
            c: [cm, cn],
            packed: None,
            swapped,
            finish: gemm::Finish::Keep,
            residual: false,
        }
    };
    let [rows, cols, _] = mm_.mnk;
    // One-row products run without packing (`gemv`).
    let Some(kc) = packed_kc else {
        let scratch = if rows == 1 {
            0
        } else {
            budgeted(op, gemm::scratch_elems(rows, cols, kk))
        };
        return Ok((Kernel::MatMul(mm_), scratch));
    };
    // A packed weight is one matrix that every batch position reads, in
    // a product of more than one row (one row runs unpacked, `gemv`).
    want(rows > 1 && per(1).iter().all(|&s| s == 0), || {
        "only a weight shared by a product of several rows is packed".into()
    })?;
    want(ins[1].len == kk * nn, || {
        "the packed weight is not the product's k × n matrix".into()
    })?;
    let p = Panels {
        side: if swapped { Side::Left } else { Side::Right },
        matrices: 1,
        rows: nn,
        depth: kk,
        strides: [0, bn, bk],
        kc,
    };
    let scratch = packed_scratch(op, &p, mm)?;
    Ok((
        Kernel::MatMul(MatMul {
            packed: Some(p),
            ..mm_
        }),
        scratch,
    ))
}

//! CPU kernels that run a bundle's operators inside its arena, and the
//! setup that turns each operator's recorded attributes and tensor shapes
//! into a prepared [`Kernel`].
//!
//! Setup ([`prepare`]) does all the work that allocates or can fail on
//! the bundle's contents: it reads attributes, checks element types and
//! shapes, merges dimensions, and sizes the scratch each kernel needs.
//! Running a prepared kernel allocates nothing.

// Operands are read through `Load` (a weight slice or arena cells), which
// is indexed, not iterated: index loops are the natural form here.
#![allow(clippy::needless_range_loop)]

pub mod cells;
pub mod elementwise;
pub mod gemm;
pub mod layout;
pub mod linalg;
pub mod movement;
pub mod nn;

use cells::{typed, Src};
use elementwise::Unary;
use layout::{broadcast_strides, strides_of, Walk};
use linalg::ConvShape;
use nn::{AroundAxis, Pool, Reducer, Window};
use std::cell::Cell;
use stow_bundle::{AttrValue, Contents, DType, Op, Region};

/// Where an operand's bytes are.
#[derive(Clone, Copy, Debug)]
pub enum Loc<'b> {
    /// A weight in the mapping.
    Weight(&'b [u8]),
    /// An arena tensor at this byte offset.
    Arena(usize),
}

/// One operand of a step.
#[derive(Clone, Debug)]
pub struct Operand<'b> {
    /// Tensor id.
    pub id: u32,
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<usize>,
    /// Elements.
    pub len: usize,
    /// Bytes.
    pub loc: Loc<'b>,
}

/// A binary operation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BinOp {
    /// +
    Add,
    /// −
    Sub,
    /// ×
    Mul,
    /// ÷
    Div,
    /// x^y
    Pow,
    /// max
    Max,
    /// min
    Min,
    /// ==
    Eq,
    /// !=
    Ne,
    /// <
    Lt,
    /// >
    Gt,
    /// <=
    Le,
    /// >=
    Ge,
    /// logical and
    And,
    /// logical or
    Or,
    /// logical xor
    Xor,
}

impl BinOp {
    fn from_name(name: &str) -> Option<BinOp> {
        use BinOp::*;
        Some(match name {
            "Add" => Add,
            "Sub" => Sub,
            "Mul" => Mul,
            "Div" => Div,
            "Pow" => Pow,
            "Max" => Max,
            "Min" => Min,
            "Eq" => Eq,
            "NE" => Ne,
            "LT" => Lt,
            "GT" => Gt,
            "LTE" => Le,
            "GTE" => Ge,
            "And" => And,
            "Or" => Or,
            "Xor" => Xor,
            _ => return None,
        })
    }

    fn compares(self) -> bool {
        use BinOp::*;
        matches!(self, Eq | Ne | Lt | Gt | Le | Ge)
    }

    /// The comparison's result as a bool byte (for a comparing op).
    #[inline(always)]
    fn compare<T: PartialOrd>(self, a: T, c: T) -> u8 {
        use BinOp::*;
        (match self {
            Eq => a == c,
            Ne => a != c,
            Lt => a < c,
            Gt => a > c,
            Le => a <= c,
            _ => a >= c,
        }) as u8
    }

    fn logical(self) -> bool {
        matches!(self, BinOp::And | BinOp::Or | BinOp::Xor)
    }
}

/// A product of the EinSum forms that are (batched) matrix products.
#[derive(Clone, Debug)]
pub struct MatMul {
    /// Batch walk, operands (output, a, b).
    pub batch: Walk<3>,
    /// Rows, columns, depth.
    pub mnk: [usize; 3],
    /// A's strides along m and k.
    pub a: [usize; 2],
    /// B's strides along k and n.
    pub b: [usize; 2],
    /// C's strides along m and n.
    pub c: [usize; 2],
}

/// A prepared operator.
#[derive(Clone, Debug)]
pub enum Kernel {
    /// The plan already put the output where it belongs (a view, or a
    /// concat whose inputs were written into their slices).
    Nothing,
    /// Element-wise unary f32 function.
    Unary(Unary),
    /// Binary op with broadcasting.
    Binary(BinOp, Walk<3>),
    /// `cond ? a : b` with broadcasting.
    Select(Walk<4>),
    /// Element type conversion.
    Cast,
    /// f32 → bool: is the value NaN.
    IsNan,
    /// Copies from input 0 through a walk (destination, source) with base
    /// offsets; `fill` first writes a constant (pad) over the output.
    Copy {
        /// The walk.
        walk: Walk<2>,
        /// Base offsets (destination, source).
        base: [usize; 2],
        /// Pad value written over the output before the copy.
        fill: Option<f64>,
    },
    /// Concat: each listed input copied through its walk.
    Concat(Vec<(usize, Walk<2>, [usize; 2])>),
    /// Gather along an axis.
    Gather {
        /// Product of the dimensions before the axis.
        outer: usize,
        /// The axis' dimension.
        axis: usize,
        /// Product of the dimensions after it.
        inner: usize,
    },
    /// Softmax or log-softmax.
    Softmax(AroundAxis, bool),
    /// RMS normalisation.
    RmsNorm(AroundAxis, f32),
    /// Reduction.
    Reduce(Reducer, Walk<2>, usize),
    /// Pooling.
    Pool(Pool, Window),
    /// Convolution.
    Conv(ConvShape),
    /// Transposed convolution.
    Deconv(ConvShape),
    /// `x < 0 ? alpha·x : x`.
    LeakyRelu(f32),
    /// Pad by reflection (`true`) or by repeating the edge.
    PadEdges {
        /// Reflect rather than repeat.
        reflect: bool,
        /// Padding before each axis.
        before: Vec<usize>,
    },
    /// Linear or nearest resampling.
    Resize(Vec<nn::ResizeAxis>),
    /// Repeats of the input at these output offsets (destination, source).
    Tile(Walk<2>, Vec<[usize; 2]>),
    /// Matrix product.
    MatMul(MatMul),
}

/// A prepared step: the kernel, its operands and its scratch size.
#[derive(Clone, Debug)]
pub struct Step<'b> {
    /// The kernel.
    pub kernel: Kernel,
    /// Inputs in operand order.
    pub inputs: Vec<Operand<'b>>,
    /// Outputs.
    pub outputs: Vec<Operand<'b>>,
    /// Scratch floats the kernel needs per thread.
    pub scratch: usize,
    /// Scratch planned in the arena: byte offset of thread 0's share and
    /// the number of threads' shares there.
    pub planned: Option<(usize, usize)>,
}

fn attr<'a>(op: &'a Op, name: &str) -> Option<&'a AttrValue> {
    op.attributes
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
}

fn attr_int(op: &Op, name: &str) -> Result<i64, String> {
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

fn attr_text<'a>(op: &'a Op, name: &str) -> Result<&'a str, String> {
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
            Loc::Arena(offset)
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

fn want(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
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

fn arity(ins: &[Operand<'_>], outs: &[Operand<'_>], n_in: usize) -> Result<(), String> {
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
    let operands = |list: &[(DType, Vec<u64>)]| -> Option<Vec<Operand<'static>>> {
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
    };
    match (operands(inputs), operands(outputs)) {
        (Some(ins), Some(outs)) => prepare(op, &ins, &outs).map_or(0, |(_, s)| s),
        _ => 0,
    }
}

/// The attribute naming how many threads' scratch the compiler planned
/// into the arena; the step's last output is then that scratch tensor.
pub const SCRATCH_ATTR: &str = "stow.scratch";

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
    if let Some(f) = Unary::from_name(name) {
        arity(ins, outs, 1)?;
        all_f32(ins, outs)?;
        want(ins[0].len == outs[0].len, || {
            "input and output sizes differ".into()
        })?;
        return Ok((Kernel::Unary(f), 0));
    }
    if let Some(b) = BinOp::from_name(name) {
        return binary(b, ins, outs).map(|k| (k, 0));
    }
    match op.op_type.as_str() {
        "AddAxis" | "RmAxis" | "Reshape" | "IntoShape" => {
            arity(ins, outs, 1)?;
            want(
                ins[0].len == outs[0].len && ins[0].dtype == outs[0].dtype,
                || "a reshape must keep the element count and type".into(),
            )?;
            if same_bytes(&ins[0], &outs[0]) {
                return Ok((Kernel::Nothing, 0));
            }
            let walk = Walk::new(&[outs[0].len], [&[1], &[1]]).ok_or("rank")?;
            Ok((
                Kernel::Copy {
                    walk,
                    base: [0, 0],
                    fill: None,
                },
                0,
            ))
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
            Ok((
                Kernel::Copy {
                    walk,
                    base: [0, 0],
                    fill: None,
                },
                0,
            ))
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
        "LeakyRelu" => {
            arity(ins, outs, 1)?;
            all_f32(ins, outs)?;
            want(ins[0].len == outs[0].len, || "sizes differ".into())?;
            Ok((Kernel::LeakyRelu(attr_float(op, "alpha")?), 0))
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
        "Resize" => resize_kernel(op, ins, outs).map(|k| (k, 0)),
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
            Ok((
                Kernel::Copy {
                    walk,
                    base: [0, 0],
                    fill: None,
                },
                0,
            ))
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
            Ok((
                Kernel::Copy {
                    walk,
                    base: [0, base],
                    fill: None,
                },
                0,
            ))
        }
        "Pad" => {
            arity(ins, outs, 1)?;
            let pads = attr_ints(op, "pads")?;
            want(sane(&pads), || "pads out of range".into())?;
            let shape = &ins[0].shape;
            want(pads.len() == 2 * shape.len(), || {
                "pads do not match the rank".into()
            })?;
            let mode = attr_text(op, "mode")?;
            if mode == "Reflect" || mode == "Edge" {
                let before: Vec<usize> = (0..shape.len()).map(|i| pads[2 * i]).collect();
                let padded: Vec<usize> = (0..shape.len())
                    .map(|i| shape[i] + pads[2 * i] + pads[2 * i + 1])
                    .collect();
                want(
                    padded == outs[0].shape && ins[0].dtype == outs[0].dtype,
                    || "output shape is not the padded input".into(),
                )?;
                let reflect = mode == "Reflect";
                let fits = (0..shape.len()).all(|i| {
                    shape[i] > 0 && (!reflect || pads[2 * i].max(pads[2 * i + 1]) < shape[i].max(2))
                });
                want(fits, || "padding wider than the input".into())?;
                return Ok((Kernel::PadEdges { reflect, before }, 0));
            }
            want(mode.starts_with("Constant"), || format!("pad mode {mode}"))?;
            let value = attr_float(op, "value").unwrap_or(0.0) as f64;
            let padded: Vec<usize> = (0..shape.len())
                .map(|i| shape[i] + pads[2 * i] + pads[2 * i + 1])
                .collect();
            want(
                padded == outs[0].shape && ins[0].dtype == outs[0].dtype,
                || "output shape is not the padded input".into(),
            )?;
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
        "IsNan" => {
            arity(ins, outs, 1)?;
            want(
                ins[0].dtype == DType::F32 && outs[0].dtype == DType::Bool,
                || "IsNan maps f32 to bool".into(),
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
        "Softmax" => {
            arity(ins, outs, 1)?;
            all_f32(ins, outs)?;
            let axes = attr_ints(op, "axes")?;
            want(axes.len() == 1, || format!("softmax over axes {axes:?}"))?;
            let kind = attr_text(op, "kind")?;
            want(ins[0].shape == outs[0].shape, || "shape changes".into())?;
            let at = AroundAxis::new(&ins[0].shape, axes[0]).ok_or("bad axis")?;
            Ok((Kernel::Softmax(at, kind.contains("Log")), 0))
        }
        "RmsNorm" => {
            arity(ins, outs, 1)?;
            all_f32(ins, outs)?;
            let axis = attr_int(op, "axis")? as usize;
            want(ins[0].shape == outs[0].shape, || "shape changes".into())?;
            let at = AroundAxis::new(&ins[0].shape, axis).ok_or("bad axis")?;
            Ok((Kernel::RmsNorm(at, attr_float(op, "eps")?), 0))
        }
        t if t.starts_with("Reduce") => {
            arity(ins, outs, 1)?;
            all_f32(ins, outs)?;
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
        "MaxPool" | "SumPool" => {
            arity(ins, outs, 1)?;
            all_f32(ins, outs)?;
            let (window, _) = window(op, &ins[0].shape, &outs[0].shape)?;
            let kind = if op.op_type == "MaxPool" {
                Pool::Max
            } else {
                Pool::Sum {
                    normalize: attr_int(op, "normalize")? != 0,
                    count_include_pad: attr_int(op, "count_include_pad")? != 0,
                }
            };
            Ok((Kernel::Pool(kind, window), 0))
        }
        "Conv" | "Deconv" => conv(op, ins, outs),
        "EinSum" => einsum(op, ins, outs),
        other => Err(format!("no kernel for `{other}`")),
    }
}

/// Where tract's coordinate transformation puts output index `x` on an
/// input axis.
fn source_coordinate(
    mode: &str,
    x: usize,
    scale: f32,
    len_in: usize,
    len_out: usize,
) -> Option<f32> {
    let x = x as f32;
    Some(match mode {
        "half_pixel" => (x + 0.5) / scale - 0.5,
        "align_corners" => {
            let width = scale * len_in as f32;
            if width == 1.0 {
                0.0
            } else {
                x * (len_in as f32 - 1.0) / (width - 1.0)
            }
        }
        "asymmetric" => x / scale,
        "pytorch_half_pixel" => {
            if len_out > 1 {
                (x + 0.5) / scale - 0.5
            } else {
                -0.5
            }
        }
        "half_pixel_symmetric" => {
            let adjustment = len_out as f32 / (scale * len_in as f32);
            let offset = len_in as f32 / 2.0 * (1.0 - adjustment);
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
            Some(s) => s[a],
            None => len_out as f32 / len_in.max(1) as f32,
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
            let cell = x_in.ceil() - 1.0;
            let r = x_in - cell;
            let w = if linear {
                [
                    (1.0 - r).clamp(0.0, 1.0),
                    (1.0 - (1.0 - r).abs()).clamp(0.0, 1.0),
                ]
            } else {
                let right = r == 1.0 || (prefer_ceil && r >= 0.5);
                [!right as u8 as f32, right as u8 as f32]
            };
            let clamp = |i: f32| (i.max(0.0) as usize).min(len_in - 1);
            taps.push(([clamp(cell), clamp(cell + 1.0)], w));
        }
        axes.push(nn::ResizeAxis { axis: a, taps });
    }
    want(axes.len() <= 3, || format!("{} resized axes", axes.len()))?;
    Ok(Kernel::Resize(axes))
}

fn castable(d: DType) -> bool {
    matches!(
        d,
        DType::F32 | DType::F64 | DType::I64 | DType::I32 | DType::I8 | DType::U8 | DType::Bool
    )
}

fn binary(b: BinOp, ins: &[Operand<'_>], outs: &[Operand<'_>]) -> Result<Kernel, String> {
    arity(ins, outs, 2)?;
    let (x, y, o) = (&ins[0], &ins[1], &outs[0]);
    want(x.dtype == y.dtype, || "operand types differ".into())?;
    let ok = match x.dtype {
        DType::F32 | DType::F64 => {
            o.dtype == if b.compares() { DType::Bool } else { x.dtype } && !b.logical()
        }
        DType::I64 => {
            o.dtype
                == if b.compares() {
                    DType::Bool
                } else {
                    DType::I64
                }
                && !b.logical()
                && b != BinOp::Pow
        }
        DType::Bool => b.logical() && o.dtype == DType::Bool,
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
    want(pad_before.len() == spatial, || "pads".into())?;
    want(sane(&pad_before), || "padding out of range".into())?;
    // 1-d and 2-d ops run as 3-d ones with leading dimensions of 1.
    let two = |v: &[usize], one: usize| -> [usize; 3] {
        std::array::from_fn(|a| {
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
    };
    want(w.strides.iter().chain(&w.dilations).all(|&s| s > 0), || {
        "zero stride".into()
    })?;
    Ok((w, batch))
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
    want(attr_text(op, "kernel_format")? == "OIHW", || {
        "kernel format".into()
    })?;
    let (window, batch) = window(op, &ins[0].shape, &outs[0].shape)?;
    let groups = attr_int(op, "group")? as usize;
    let lead = batch as usize;
    let (c_in, c_out) = (ins[0].shape[lead], outs[0].shape[lead]);
    want(
        groups > 0 && c_in % groups == 0 && c_out % groups == 0,
        || "groups".into(),
    )?;
    let s = ConvShape {
        batch: if batch { ins[0].shape[0] } else { 1 },
        groups,
        in_per_group: c_in / groups,
        out_per_group: c_out / groups,
        window,
    };
    want(ins[1].len == c_out * s.k(), || {
        "kernel size does not match".into()
    })?;
    if let Some(b) = ins.get(2) {
        want(b.len == 1 || b.len == c_out, || "bias size".into())?;
    }
    if deconv {
        return Ok((Kernel::Deconv(s), 0));
    }
    Ok((Kernel::Conv(s), s.scratch_elems()))
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
    let mut size = std::collections::BTreeMap::<char, usize>::new();
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
    let walk = Walk::new(&dims, [&per(2), &per(0), &per(1)]).ok_or("too many batch axes")?;
    let mm_ = MatMul {
        batch: walk,
        mnk: [mm, nn, kk],
        a: [am, ak],
        b: [bk, bn],
        c: [cm, cn],
    };
    // One-row products run without packing (`gemv`).
    let scratch = if mm == 1 {
        0
    } else {
        gemm::scratch_elems(mm, nn, kk)
    };
    Ok((Kernel::MatMul(mm_), scratch))
}

/// Why a step failed while running.
#[derive(Debug)]
pub enum Failure {
    /// A tensor view did not fit the arena or its alignment (a bundle
    /// that passed setup cannot cause this).
    View(u32),
    /// A gather index out of range.
    Index(i64),
}

/// The arena as shared cells, plus typed views of operands.
pub struct Views<'a> {
    /// The arena bytes.
    pub arena: &'a [Cell<u8>],
}

impl<'a> Views<'a> {
    /// A read-only view of `o` as `T`.
    pub fn src<T: bytemuck::Pod>(&self, o: &Operand<'a>) -> Result<Src<'a, T>, Failure> {
        match o.loc {
            Loc::Weight(bytes) => bytemuck::try_cast_slice(bytes)
                .ok()
                .filter(|s: &&[T]| s.len() == o.len)
                .map(Src::Weight)
                .ok_or(Failure::View(o.id)),
            Loc::Arena(off) => typed(self.arena, off, o.len)
                .map(Src::Arena)
                .ok_or(Failure::View(o.id)),
        }
    }

    /// A writable view of arena operand `o` as `T`.
    pub fn dst<T: bytemuck::Pod>(&self, o: &Operand<'_>) -> Result<&'a [Cell<T>], Failure> {
        match o.loc {
            Loc::Arena(off) => typed(self.arena, off, o.len).ok_or(Failure::View(o.id)),
            Loc::Weight(_) => Err(Failure::View(o.id)),
        }
    }
}

macro_rules! by_size {
    ($size:expr, |$t:ident| $body:expr) => {
        match $size {
            1 => {
                type $t = u8;
                $body
            }
            2 => {
                type $t = u16;
                $body
            }
            4 => {
                type $t = u32;
                $body
            }
            _ => {
                type $t = u64;
                $body
            }
        }
    };
}

fn read_num(v: &Views<'_>, o: &Operand<'_>, i: usize) -> Result<f64, Failure> {
    Ok(match o.dtype {
        DType::F32 => v.src::<f32>(o)?.at(i) as f64,
        DType::F64 => v.src::<f64>(o)?.at(i),
        DType::I64 => v.src::<i64>(o)?.at(i) as f64,
        DType::I32 => v.src::<i32>(o)?.at(i) as f64,
        DType::I8 => v.src::<i8>(o)?.at(i) as f64,
        _ => v.src::<u8>(o)?.at(i) as f64,
    })
}

fn cast(v: &Views<'_>, x: &Operand<'_>, o: &Operand<'_>) -> Result<(), Failure> {
    macro_rules! into {
        ($t:ty, $conv:expr) => {{
            let out = v.dst::<$t>(o)?;
            for (i, c) in out.iter().enumerate() {
                c.set($conv(read_num(v, x, i)?));
            }
        }};
    }
    match o.dtype {
        DType::F32 => into!(f32, |f: f64| f as f32),
        DType::F64 => into!(f64, |f: f64| f),
        DType::I64 => into!(i64, |f: f64| f as i64),
        DType::I32 => into!(i32, |f: f64| f as i32),
        DType::I8 => into!(i8, |f: f64| f as i8),
        DType::Bool => into!(u8, |f: f64| (f != 0.0) as u8),
        _ => into!(u8, |f: f64| f as u8),
    }
    Ok(())
}

fn float_binary<F>(
    v: &Views<'_>,
    b: BinOp,
    walk: &Walk<3>,
    x: &Operand<'_>,
    y: &Operand<'_>,
    o: &Operand<'_>,
    pow: fn(F, F) -> F,
) -> Result<(), Failure>
where
    F: bytemuck::Pod
        + PartialOrd
        + std::ops::Add<Output = F>
        + std::ops::Sub<Output = F>
        + std::ops::Mul<Output = F>
        + std::ops::Div<Output = F>,
{
    use elementwise::binary as run;
    use BinOp::*;
    let (p, q) = (v.src::<F>(x)?, v.src::<F>(y)?);
    if b.compares() {
        let out = v.dst::<u8>(o)?;
        run(walk, p, q, out, move |a: F, c: F| b.compare(a, c));
        return Ok(());
    }
    let out = v.dst::<F>(o)?;
    // max/min as IEEE maxNum/minNum: a NaN operand yields the other one.
    let nan = |c: F| c.partial_cmp(&c).is_none();
    let max = move |a: F, c: F| if a >= c || nan(c) { a } else { c };
    let min = move |a: F, c: F| if a <= c || nan(c) { a } else { c };
    match b {
        Add => run(walk, p, q, out, |a, c| a + c),
        Sub => run(walk, p, q, out, |a, c| a - c),
        Mul => run(walk, p, q, out, |a, c| a * c),
        Div => run(walk, p, q, out, |a, c| a / c),
        Pow => run(walk, p, q, out, pow),
        Max => run(walk, p, q, out, max),
        _ => run(walk, p, q, out, min),
    }
    Ok(())
}

fn binary_run(
    v: &Views<'_>,
    b: BinOp,
    walk: &Walk<3>,
    x: &Operand<'_>,
    y: &Operand<'_>,
    o: &Operand<'_>,
) -> Result<(), Failure> {
    use elementwise::binary as run;
    use BinOp::*;
    match x.dtype {
        DType::F32 => float_binary::<f32>(v, b, walk, x, y, o, f32::powf)?,
        DType::F64 => float_binary::<f64>(v, b, walk, x, y, o, f64::powf)?,
        DType::I64 => {
            let (p, q) = (v.src::<i64>(x)?, v.src::<i64>(y)?);
            if b.compares() {
                let out = v.dst::<u8>(o)?;
                run(walk, p, q, out, move |a: i64, c: i64| b.compare(a, c));
            } else {
                let out = v.dst::<i64>(o)?;
                match b {
                    Add => run(walk, p, q, out, i64::wrapping_add),
                    Sub => run(walk, p, q, out, i64::wrapping_sub),
                    Mul => run(walk, p, q, out, i64::wrapping_mul),
                    Div => run(
                        walk,
                        p,
                        q,
                        out,
                        |a, c| if c == 0 { 0 } else { a.wrapping_div(c) },
                    ),
                    Max => run(walk, p, q, out, i64::max),
                    _ => run(walk, p, q, out, i64::min),
                }
            }
        }
        _ => {
            let (p, q) = (v.src::<u8>(x)?, v.src::<u8>(y)?);
            let out = v.dst::<u8>(o)?;
            match b {
                And => run(walk, p, q, out, |a, c| ((a != 0) && (c != 0)) as u8),
                Or => run(walk, p, q, out, |a, c| ((a != 0) || (c != 0)) as u8),
                _ => run(walk, p, q, out, |a, c| ((a != 0) != (c != 0)) as u8),
            }
        }
    }
    Ok(())
}

/// True for kernels that split their work between threads
/// ([`run_part`]); the others run whole on one thread.
pub fn splits(k: &Kernel) -> bool {
    matches!(k, Kernel::Conv(_) | Kernel::MatMul(_))
}

/// Runs one prepared step over the arena views, with `scratch` (at least
/// `step.scratch` floats).
pub fn run(step: &Step<'_>, v: &Views<'_>, scratch: &[Cell<f32>]) -> Result<(), Failure> {
    run_part(step, v, scratch, 0, 1)
}

/// Runs share `part` of `parts` of a step that [`splits`] (shares write
/// disjoint parts of the output and read nothing another share writes);
/// any other step runs whole as part 0.
pub fn run_part(
    step: &Step<'_>,
    v: &Views<'_>,
    scratch: &[Cell<f32>],
    part: usize,
    parts: usize,
) -> Result<(), Failure> {
    let (ins, outs) = (&step.inputs, &step.outputs);
    if !splits(&step.kernel) && part != 0 {
        return Ok(());
    }
    match &step.kernel {
        Kernel::Nothing => {}
        Kernel::Unary(f) => elementwise::unary(*f, v.src(&ins[0])?, v.dst(&outs[0])?),
        Kernel::Binary(b, walk) => binary_run(v, *b, walk, &ins[0], &ins[1], &outs[0])?,
        Kernel::Select(walk) => {
            let cond = v.src::<u8>(&ins[0])?;
            by_size!(outs[0].dtype.size_bytes(), |T| elementwise::select::<T>(
                walk,
                cond,
                v.src(&ins[1])?,
                v.src(&ins[2])?,
                v.dst(&outs[0])?
            ))
        }
        Kernel::Cast => cast(v, &ins[0], &outs[0])?,
        Kernel::IsNan => {
            elementwise::convert(v.src::<f32>(&ins[0])?, v.dst::<u8>(&outs[0])?, |x| {
                x.is_nan() as u8
            })
        }
        Kernel::Copy { walk, base, fill } => {
            let o = &outs[0];
            if let Some(value) = fill {
                fill_value(v, o, *value)?;
            }
            by_size!(o.dtype.size_bytes(), |T| movement::copy::<T>(
                walk,
                *base,
                v.src(&ins[0])?,
                v.dst(o)?
            ))
        }
        Kernel::Concat(parts) => {
            let o = &outs[0];
            for (i, walk, base) in parts {
                by_size!(o.dtype.size_bytes(), |T| movement::copy::<T>(
                    walk,
                    *base,
                    v.src(&ins[*i])?,
                    v.dst(o)?
                ))
            }
        }
        Kernel::Gather { outer, axis, inner } => {
            let idx = v.src::<i64>(&ins[1])?;
            by_size!(outs[0].dtype.size_bytes(), |T| movement::gather::<T>(
                *outer,
                *axis,
                *inner,
                v.src(&ins[0])?,
                idx,
                v.dst(&outs[0])?
            ))
            .map_err(Failure::Index)?
        }
        Kernel::Softmax(at, log) => nn::softmax(*at, *log, v.src(&ins[0])?, v.dst(&outs[0])?),
        Kernel::RmsNorm(at, eps) => nn::rms_norm(*at, *eps, v.src(&ins[0])?, v.dst(&outs[0])?),
        Kernel::Reduce(r, walk, count) => {
            nn::reduce(*r, walk, *count, v.src(&ins[0])?, v.dst(&outs[0])?)
        }
        Kernel::Pool(kind, w) => nn::pool(*kind, w, v.src(&ins[0])?, v.dst(&outs[0])?),
        Kernel::Conv(s) => {
            let bias = match ins.get(2) {
                Some(b) => Some(v.src(b)?),
                None => None,
            };
            linalg::conv(
                s,
                v.src(&ins[0])?,
                v.src(&ins[1])?,
                bias,
                v.dst(&outs[0])?,
                scratch,
                part,
                parts,
            )
        }
        Kernel::Deconv(s) => {
            let bias = match ins.get(2) {
                Some(b) => Some(v.src(b)?),
                None => None,
            };
            linalg::deconv(s, v.src(&ins[0])?, v.src(&ins[1])?, bias, v.dst(&outs[0])?)
        }
        Kernel::LeakyRelu(alpha) => {
            let a = *alpha;
            crate::with_load!(v.src::<f32>(&ins[0])?, |x| cells::map_row(
                v.dst(&outs[0])?,
                x,
                |x: f32| if x < 0.0 { a * x } else { x }
            ))
        }
        Kernel::PadEdges { reflect, before } => {
            let o = &outs[0];
            by_size!(o.dtype.size_bytes(), |T| movement::pad_edges::<T>(
                *reflect,
                before,
                &ins[0].shape,
                &o.shape,
                v.src(&ins[0])?,
                v.dst(o)?
            ))
        }
        Kernel::Resize(axes) => nn::resize(
            &ins[0].shape,
            &outs[0].shape,
            axes,
            v.src(&ins[0])?,
            v.dst(&outs[0])?,
        ),
        Kernel::Tile(walk, bases) => {
            let o = &outs[0];
            for base in bases {
                by_size!(o.dtype.size_bytes(), |T| movement::copy::<T>(
                    walk,
                    *base,
                    v.src(&ins[0])?,
                    v.dst(o)?
                ))
            }
        }
        Kernel::MatMul(mm) => matmul(
            mm,
            v.src(&ins[0])?,
            v.src(&ins[1])?,
            v.dst(&outs[0])?,
            scratch,
            part,
            parts,
        ),
    }
    Ok(())
}

fn fill_value(v: &Views<'_>, o: &Operand<'_>, value: f64) -> Result<(), Failure> {
    match o.dtype {
        DType::F32 => v.dst::<f32>(o)?.iter().for_each(|c| c.set(value as f32)),
        DType::F64 => v.dst::<f64>(o)?.iter().for_each(|c| c.set(value)),
        DType::I64 => v.dst::<i64>(o)?.iter().for_each(|c| c.set(value as i64)),
        DType::I32 => v.dst::<i32>(o)?.iter().for_each(|c| c.set(value as i32)),
        _ => by_size!(o.dtype.size_bytes(), |T| v
            .dst::<T>(o)?
            .iter()
            .for_each(|c| c.set(bytemuck::Zeroable::zeroed()))),
    }
    Ok(())
}

/// One row times a matrix, `c[j] += Σ_p a[p] · b[p, j]` for `j` in `cols`:
/// a product with one row gains nothing from packing. Contiguous rows of
/// `b` (or columns) are read as slices, 8 partial sums at a time, so the
/// loops vectorise.
fn gemv<A: cells::Load<f32>, B: cells::Load<f32>>(
    k: usize,
    (a, oa, sa): (A, usize, usize),
    (b, ob, [bk, bn]): (B, usize, [usize; 2]),
    c: &gemm::Dst<'_>,
    cols: std::ops::Range<usize>,
) {
    const W: usize = 8;
    if sa == 1 && bk == 1 {
        // Each output is a dot product of two contiguous vectors.
        let row = a.sub(oa, k);
        for j in cols {
            let col = b.sub(ob + j * bn, k);
            let mut acc = [0f32; W];
            let mut p = 0;
            while p + W <= k {
                let (x, y) = (row.sub(p, W), col.sub(p, W));
                for l in 0..W {
                    acc[l] += x.load(l) * y.load(l);
                }
                p += W;
            }
            let mut sum: f32 = acc.iter().sum();
            for q in p..k {
                sum += row.load(q) * col.load(q);
            }
            let cell = &c.data[c.offset + j * c.cs];
            cell.set(cell.get() + sum);
        }
    } else if bn == 1 && c.cs == 1 && !cols.is_empty() {
        // Rows of b are contiguous: accumulate a[p] · b[p, cols] in c.
        let out = &c.data[c.offset + cols.start..c.offset + cols.end];
        for p in 0..k {
            let x = a.load(oa + p * sa);
            let r = b.sub(ob + p * bk + cols.start, cols.len());
            cells::zip_row(out, out, r, |o, y| o + x * y);
        }
    } else {
        for j in cols {
            let sum = (0..k)
                .map(|p| a.load(oa + p * sa) * b.load(ob + p * bk + j * bn))
                .sum();
            c.data[c.offset + j * c.cs].set(sum);
        }
    }
}

fn matmul(
    mm: &MatMul,
    a: Src<'_, f32>,
    b: Src<'_, f32>,
    c: &[Cell<f32>],
    scratch: &[Cell<f32>],
    part: usize,
    parts: usize,
) {
    let [m, n, k] = mm.mnk;
    let cols = gemm::share(n, part, parts);
    let (len, [sc, sa, sb]) = mm.batch.inner();
    // Zero this share's columns everywhere first: batch positions that
    // walk a k axis accumulate into the same C.
    mm.batch.rows([0, 0, 0], |[oc, _, _]| {
        for j in 0..len {
            for i in 0..m {
                for col in cols.clone() {
                    c[oc + j * sc + i * mm.c[0] + col * mm.c[1]].set(0.0);
                }
            }
        }
    });
    mm.batch.rows([0, 0, 0], |[oc, oa, ob]| {
        for j in 0..len {
            let dst = gemm::Dst {
                data: c,
                offset: oc + j * sc,
                rs: mm.c[0],
                cs: mm.c[1],
            };
            if m == 1 {
                crate::with_load!(a, |a| crate::with_load!(b, |b| gemv(
                    k,
                    (a, oa + j * sa, mm.a[1]),
                    (b, ob + j * sb, mm.b),
                    &dst,
                    cols.clone()
                )));
                continue;
            }
            crate::with_load!(a, |a| crate::with_load!(b, |b| {
                let pa = gemm::Strided {
                    data: a,
                    offset: oa + j * sa,
                    rs: mm.a[0],
                    cs: mm.a[1],
                    rows: m,
                    cols: k,
                };
                let pb = gemm::Strided {
                    data: b,
                    offset: ob + j * sb,
                    rs: mm.b[0],
                    cs: mm.b[1],
                    rows: k,
                    cols: n,
                };
                gemm::gemm_cols(m, n, k, &pa, &pb, &dst, scratch, cols.clone())
            }))
        }
    });
}

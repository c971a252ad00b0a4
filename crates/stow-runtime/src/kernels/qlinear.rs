//! Quantized matrix products and convolutions: tract's `EinSum` and `Conv`
//! with `q_params` (what ONNX MatMulInteger, QLinearMatMul, ConvInteger
//! and QLinearConv become). This is the reference path: plain loops over
//! u8 or i8 operands in any combination, accumulating in i32, then
//! requantised as ONNX specifies. Faster kernels are to match it bit for
//! bit.
//!
//! Both operators take nine inputs, in tract's order:
//!
//! | # | input | element type | values |
//! |---|---|---|---|
//! | 0 | a (a convolution's image) | u8, i8 | |
//! | 1 | b (a convolution's kernel, OIHW) | u8, i8 | |
//! | 2 | bias, added to the accumulator | i32 | one, or one per channel |
//! | 3 | a's zero point | u8, i8, i32 | one |
//! | 4 | a's scale | f32 | one |
//! | 5 | b's zero point | u8, i8, i32 | one, or one per channel |
//! | 6 | b's scale | f32 | one, or one per channel |
//! | 7 | the output's zero point | u8, i8, i32 | one |
//! | 8 | the output's scale | f32 | one |
//!
//! A channel is a column of b: an axis of b that the output keeps and a
//! does not have (for a convolution, an output channel). Each output
//! element is, for its channel `ch`,
//!
//! ```text
//! acc = Σ (a − a0)·(b − b0[ch]) + bias[ch]                        (i32)
//! y   = round_half_even(clip(f32(acc) · scale[ch])) + c0,  scale[ch] = a_scale·b_scale[ch] / c_scale
//! ```
//!
//! with the accumulation wrapping on overflow (ONNX leaves overflow of a
//! 32-bit accumulator to the implementation) and everything after it in
//! f32 as onnxruntime's MLAS computes it ([`requantize`]: the clip to the
//! output's range less c0 before the rounding, c0 added after it). An i32
//! output (MatMulInteger, ConvInteger: unit scales) is `acc` exactly
//! ([`requantize_wide`]). A convolution's padding contributes
//! nothing to the sum: it holds a's zero point. Anything else (a
//! parameter with one value per row of a, or per output channel of the
//! result, other element types) is refused at setup.
//!
//! The loops below are the reference. Where the step has its scratch,
//! the same sums come from packed panels and the integer kernels of
//! [`igemm`] (AVX-512 VNNI, AVX2 or portable, chosen at run time) through
//! [`fast`], which gives the reference's results bit for bit; the step's
//! output is then split between threads by panels of output positions or
//! columns.

use super::cells::Src;
use super::contract::{self, Contraction};
use super::layout::strides_of;
use super::linalg::ConvShape;
use super::prepacked::Panels;
use super::prepare::{attr_text, budgeted, conv_shape, packed_depth, want};
use super::run::{Failure, Views};
use super::{Kernel, Loc, Operand};
use alloc::{boxed::Box, format, string::String, vec::Vec};
use core::cell::Cell;
use stow_bundle::{DType, Op};

mod depthwise;
mod epilogue;
mod fast;
pub mod igemm;

/// The nine inputs, in tract's order.
const A: usize = 0;
const B: usize = 1;
const BIAS: usize = 2;
const A0: usize = 3;
const A_SCALE: usize = 4;
const B0: usize = 5;
const B_SCALE: usize = 6;
const C0: usize = 7;
const C_SCALE: usize = 8;

/// What each input is, for messages.
const NAMES: [&str; 9] = [
    "a",
    "b",
    "the bias",
    "a's zero point",
    "a's scale",
    "b's zero point",
    "b's scale",
    "the output's zero point",
    "the output's scale",
];

/// The inputs that may hold one value per channel.
const PER_CHANNEL: [usize; 3] = [BIAS, B0, B_SCALE];

/// Where a parameter's value for output element `o` sits: at
/// `(o / div) % len`. A parameter with one value for all has `len` 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Along {
    div: usize,
    len: usize,
}

impl Along {
    /// One value for every output element.
    pub const ALL: Along = Along { div: 1, len: 1 };

    #[inline]
    fn at(self, o: usize) -> usize {
        // One value for all (per-tensor parameters) is common: no
        // division for it.
        if self.len == 1 {
            0
        } else {
            o / self.div % self.len
        }
    }
}

/// Where the parameters that may vary by channel are read.
#[derive(Clone, Copy, Debug)]
pub struct Channels {
    bias: Along,
    b0: Along,
    b_scale: Along,
}

/// A quantized product: tract's `EinSum` with `q_params`.
#[derive(Clone, Debug)]
pub struct QProduct {
    /// The summation of a and b (the parameters are not in it).
    sum: Contraction,
    channels: Channels,
    /// How the packed path walks it, if it can.
    packed: Option<fast::Plan>,
    /// The layout of b when the compiler stored it packed: the panels the
    /// packed path reads, which the reference loops cannot. (Boxed: most
    /// kernels are smaller.)
    weight: Option<Box<Panels>>,
    /// The packed path's row sums where its rows are an i8 weight of the
    /// mapping read in place (a 1×1 convolution's kernel), taken at setup
    /// as [`QConv`]'s.
    row_sums: Option<Box<[i32]>>,
    /// Each lane's sum of the packed weight's bytes as i8, where b is one
    /// (constant, so taken at setup: summing each panel again at every
    /// run was the first read of every weight byte, and a third of
    /// bert_base's int8 run waited on it).
    lane_sums: Option<Box<[i32]>>,
    /// The f32 output of steps merged into the product at setup (boxed:
    /// most products have none).
    dequantized: Option<Box<Dequantized>>,
}

/// A quantized convolution: tract's `Conv` with `q_params`.
#[derive(Clone, Debug)]
pub struct QConv {
    shape: ConvShape,
    channels: Channels,
    /// Each output channel's sum of its kernel bytes as i8, where the
    /// kernel is an i8 weight of the mapping: constant, so taken once at
    /// setup rather than at every run (2 % of an int8 resnet50's run).
    row_sums: Option<Vec<i32>>,
}

/// Prepares a quantized `EinSum` or `Conv` (its `q_params` attribute
/// names the output type), or says why it cannot run; with the scratch
/// floats per thread its packed path takes (0: it has none).
pub(super) fn prepare(
    op: &Op,
    ins: &[Operand<'_>],
    outs: &[Operand<'_>],
) -> Result<(Kernel, usize), String> {
    want(ins.len() == 9 && outs.len() == 1, || {
        format!(
            "a quantized {} takes 9 inputs and gives 1 output, found {} and {}",
            op.op_type,
            ins.len(),
            outs.len()
        )
    })?;
    types(op, ins, &outs[0])?;
    if op.op_type == "Conv" {
        conv(op, ins, &outs[0])
    } else {
        product(op, ins, &outs[0])
    }
}

/// Checks the element types (and that every parameter has a value).
fn types(op: &Op, ins: &[Operand<'_>], out: &Operand<'_>) -> Result<(), String> {
    let wanted = |i: usize, ok: fn(DType) -> bool, what: &str| {
        want(ok(ins[i].dtype), || {
            format!(
                "{} (tensor {}) is {}; handled: {what}",
                NAMES[i],
                ins[i].id,
                ins[i].dtype.name()
            )
        })
    };
    for i in [A, B] {
        wanted(i, |d| matches!(d, DType::U8 | DType::I8), "u8, i8")?;
    }
    wanted(BIAS, |d| d == DType::I32, "i32")?;
    for i in [A0, B0, C0] {
        wanted(
            i,
            |d| matches!(d, DType::U8 | DType::I8 | DType::I32),
            "u8, i8, i32",
        )?;
    }
    for i in [A_SCALE, B_SCALE, C_SCALE] {
        wanted(i, |d| d == DType::F32, "f32")?;
    }
    for i in BIAS..=C_SCALE {
        want(ins[i].len > 0, || format!("{} has no value", NAMES[i]))?;
    }
    let q = attr_text(op, "q_params")?;
    let dtype = match q {
        "U8" => DType::U8,
        "I8" => DType::I8,
        "I32" => DType::I32,
        other => return Err(format!("quantized output of type {other}")),
    };
    want(out.dtype == dtype, || {
        format!("output is {}, q_params says {q}", out.dtype.name())
    })
}

/// Refuses what this path does not handle: a parameter with more than
/// one value that is not one per channel.
fn refuse(i: usize, x: &Operand<'_>, channel: &str) -> String {
    let allowed = if PER_CHANNEL.contains(&i) {
        format!("one value, or one per {channel}")
    } else {
        "one value".into()
    };
    format!(
        "{} has {} values (shape {:?}); handled: {allowed}",
        NAMES[i], x.len, x.shape
    )
}

fn product(op: &Op, ins: &[Operand<'_>], out: &Operand<'_>) -> Result<(Kernel, usize), String> {
    let expr = attr_text(op, "expr")?;
    let (lhs, out_axes) = expr.split_once("->").ok_or("no -> in the expression")?;
    let parts: Vec<&str> = lhs.split(',').collect();
    want(parts.len() == 9, || {
        format!("`{expr}` does not have 9 operands")
    })?;
    let labels: Vec<Vec<char>> = parts.iter().map(|s| s.chars().collect()).collect();
    let pair = format!("{},{}->{out_axes}", parts[A], parts[B]);
    let sum = Contraction::new(&pair, &[&ins[A].shape, &ins[B].shape], &out.shape)?;
    want(sum.dims[..sum.kept] == out.shape[..], || {
        format!("`{expr}` does not give the output's shape {:?}", out.shape)
    })?;
    let work = sum.dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    want(work.is_some_and(|w| w < 1 << 40), || {
        "EinSum too large to loop over".into()
    })?;
    let out_axes: Vec<char> = out_axes.chars().collect();
    let strides = strides_of(&out.shape);
    // A channel: an axis of b that the output keeps and a does not have.
    let along = |i: usize| -> Result<Along, String> {
        let x = &ins[i];
        want(labels[i].len() == x.shape.len(), || {
            format!("`{expr}` does not match the rank of {}", NAMES[i])
        })?;
        if x.len == 1 {
            return Ok(Along::ALL);
        }
        let label = match labels[i][..] {
            [c] if PER_CHANNEL.contains(&i)
                && labels[B].contains(&c)
                && !labels[A].contains(&c) =>
            {
                Some(c)
            }
            _ => None,
        };
        match label.and_then(|c| out_axes.iter().position(|&o| o == c)) {
            Some(p) if out.shape[p] == x.len => Ok(Along {
                div: strides[p].max(1),
                len: x.len,
            }),
            _ => Err(refuse(i, x, "column of b")),
        }
    };
    for i in [A0, A_SCALE, C0, C_SCALE] {
        along(i)?;
    }
    let channels = Channels {
        bias: along(BIAS)?,
        b0: along(B0)?,
        b_scale: along(B_SCALE)?,
    };
    let packed = fast::Plan::of(&sum, &channels);
    let scratch = packed.as_ref().map_or(0, fast::Plan::scratch_floats);
    let (weight, scratch) = match packed_depth(op)? {
        None => (None, scratch),
        // A packed weight's panels are read in place but for a short last
        // one: one panel of scratch, and the rows.
        Some(kc) => {
            let one = packed
                .as_ref()
                .map_or(0, |p| fast::scratch_floats(p.depth(), 1));
            let scratch = scratch.min(one);
            let p = packed_weight(op, ins, packed.as_ref(), kc, scratch)?;
            (Some(Box::new(p)), scratch)
        }
    };
    let row_sums = match (&ins[B].loc, &packed) {
        (Loc::Weight(b), Some(plan)) if ins[B].dtype == DType::I8 => {
            plan.weight_row_sums(b).map(Vec::into_boxed_slice)
        }
        _ => None,
    };
    let lane_sums = match (&ins[B].loc, &weight) {
        (Loc::Weight(b), Some(w)) => fast::packed_lane_sums(w, b).map(Vec::into_boxed_slice),
        _ => None,
    };
    let kernel = QProduct {
        sum,
        channels,
        packed,
        weight,
        row_sums,
        lane_sums,
        dequantized: None,
    };
    Ok((Kernel::QProduct(kernel), scratch))
}

/// The layout of a product's weight (b) that the compiler stored packed
/// with depth block `kc`: the lanes' panels of the packed path, which must
/// then always run (with `scratch` floats, or on its stack), since the
/// reference loops read b row-major.
fn packed_weight(
    op: &Op,
    ins: &[Operand<'_>],
    plan: Option<&fast::Plan>,
    kc: usize,
    scratch: usize,
) -> Result<Panels, String> {
    let p = plan
        .and_then(|plan| plan.lanes_weight(ins[B].len))
        .ok_or("a weight packed where b does not give the product's lanes")?;
    want(ins[B].dtype == DType::I8, || {
        format!(
            "a packed weight of type {}; handled: i8",
            ins[B].dtype.name()
        )
    })?;
    want(kc == p.kc, || {
        format!(
            "weight packed with depth block {kc}; an int8 weight's is the whole depth, {}",
            p.kc
        )
    })?;
    want(packed_fits(p.depth, budgeted(op, scratch)), || {
        format!(
            "weight packed with depth {}, too deep for the scratch planned",
            p.depth
        )
    })?;
    Ok(p)
}

fn conv(op: &Op, ins: &[Operand<'_>], out: &Operand<'_>) -> Result<(Kernel, usize), String> {
    want(packed_depth(op)?.is_none(), || {
        "a quantized convolution's kernel is never packed".into()
    })?;
    let shape = conv_shape(op, &ins[A], &ins[B], out)?;
    let c_out = shape.groups * shape.out_per_group;
    // Output element o is in channel (o / plane) % c_out (NCHW or CHW).
    let channel = Along {
        div: shape.window.output_plane().max(1),
        len: c_out,
    };
    let along = |i: usize| -> Result<Along, String> {
        let x = &ins[i];
        if x.len == 1 {
            Ok(Along::ALL)
        } else if PER_CHANNEL.contains(&i) && x.shape.len() == 1 && x.len == c_out {
            Ok(channel)
        } else {
            Err(refuse(i, x, "output channel"))
        }
    };
    for i in [A0, A_SCALE, C0, C_SCALE] {
        along(i)?;
    }
    let channels = Channels {
        bias: along(BIAS)?,
        b0: along(B0)?,
        b_scale: along(B_SCALE)?,
    };
    let scratch = fast::scratch_floats(shape.k(), shape.n());
    let row_sums = match &ins[B].loc {
        Loc::Weight(w) if ins[B].dtype == DType::I8 && shape.k() > 0 => {
            fast::kernel_row_sums(w, shape.k(), c_out)
        }
        _ => None,
    };
    Ok((
        Kernel::QConv(QConv {
            shape,
            channels,
            row_sums,
        }),
        scratch,
    ))
}

/// True when a product whose i8 weight is packed as its lanes' panels,
/// of depth `depth`, runs with `floats` of scratch per thread: the packed
/// path must (the reference loops read the weight row-major), in that
/// scratch or on its stack.
pub fn packed_fits(depth: usize, floats: usize) -> bool {
    fast::runs_in(depth, floats)
}

/// onnxruntime's requantisation of accumulator `acc` (bias included)
/// with the combined scale `a_scale·b_scale / c_scale`, for a u8 or i8
/// output (`lo..=hi` its range): MLAS's `MlasRequantizeOutput` and the
/// post-processing of its QLinearConv and QGemm kernels, step for step:
///
/// ```text
/// y = f32(acc) · scale                       (two f32 roundings, to nearest even)
/// y = max(y, lo − zero), then min(y, hi − zero)   (as MAXPS/MINPS: NaN → lo − zero)
/// r = round_half_even(y) + zero, saturated to lo..=hi
/// ```
///
/// The zero point is added after the rounding, so a tie rounds to the
/// even integer before it is shifted: with an odd zero point that is the
/// other neighbour than ONNX's reference implementation picks (it rounds
/// `acc·scale + zero` in f64), and the f32 product can round a value
/// across a half. Both are one step at most; onnxruntime is the runtime
/// quantized models are calibrated and checked against, so its bytes are
/// the ones to give. An i32 output (MatMulInteger, ConvInteger: unit
/// scales, no zero point) has no MLAS requantisation and an f32 would
/// round sums beyond 2²⁴: it keeps the exact [`requantize_wide`].
#[inline]
pub fn requantize(acc: i32, scale: f32, zero: i32, (lo, hi): (i32, i32)) -> i32 {
    if (lo, hi) == (i32::MIN, i32::MAX) {
        return requantize_wide(acc, scale, zero, (lo, hi));
    }
    let (min, max) = clip_bounds(zero, (lo, hi));
    let y = acc as f32 * scale;
    // MAXPS/MINPS return their second operand when either is NaN.
    let y = if y > min { y } else { min };
    let y = if y < max { y } else { max };
    let r = round_clamped(f64::from(y), i32::MIN, i32::MAX);
    // Saturated as MLAS's packs do (a no-op for a zero point inside the
    // output's range, as ONNX's always is).
    (i64::from(r) + i64::from(zero)).clamp(lo.into(), hi.into()) as i32
}

/// MLAS's clipping bounds of [`requantize`]: the output's range shifted
/// by its zero point, in f32.
#[inline]
pub(super) fn clip_bounds(zero: i32, (lo, hi): (i32, i32)) -> (f32, f32) {
    let shift = |b: i32| (i64::from(b) - i64::from(zero)) as f32;
    (shift(lo), shift(hi))
}

/// The requantisation of an i32 output, as ONNX's reference computes it:
/// `f64(acc)·f64(scale) + f64(zero)` rounded half to even and saturated
/// to `lo..=hi`; exactly `acc` at unit scale and no zero point. A NaN
/// scale (a zero output scale over a zero product) gives 0.
#[inline]
pub fn requantize_wide(acc: i32, scale: f32, zero: i32, (lo, hi): (i32, i32)) -> i32 {
    let y = f64::from(acc) * f64::from(scale) + f64::from(zero);
    round_clamped(y, lo, hi)
}

/// `round_ties_even(y)` saturated to `lo..=hi` (NaN: 0), without a call
/// to libm's `rint` per element (the baseline x86-64 target has no SSE4.1
/// `roundsd`). Clamping first changes nothing, the bounds being integers,
/// and leaves `|y| ≤ 2³¹`, where adding and subtracting 1.5·2⁵² rounds to
/// the nearest integer, ties to even: IEEE arithmetic rounds the sum so.
#[inline]
fn round_clamped(y: f64, lo: i32, hi: i32) -> i32 {
    const SHIFT: f64 = 6_755_399_441_055_744.0; // 1.5·2⁵²
    let y = y.clamp(lo.into(), hi.into());
    ((y + SHIFT) - SHIFT) as i32
}

/// The combined scale, in f32 as ONNX's reference computes it.
#[inline]
fn combined(a_scale: f32, b_scale: f32, c_scale: f32) -> f32 {
    a_scale * b_scale / c_scale
}

/// Elements of a and b.
trait Narrow: bytemuck::Pod {
    fn wide(self) -> i32;
}

impl Narrow for u8 {
    #[inline(always)]
    fn wide(self) -> i32 {
        self.into()
    }
}

impl Narrow for i8 {
    #[inline(always)]
    fn wide(self) -> i32 {
        self.into()
    }
}

/// A u8, i8 or i32 operand (quantized values, zero points) read as i32.
#[derive(Clone, Copy)]
pub(super) enum IntSrc<'a> {
    U8(Src<'a, u8>),
    I8(Src<'a, i8>),
    I32(Src<'a, i32>),
}

impl<'a> IntSrc<'a> {
    pub(super) fn of(v: &Views<'a>, o: &Operand<'a>) -> Result<Self, Failure> {
        Ok(match o.dtype {
            DType::U8 => IntSrc::U8(v.src(o)?),
            DType::I8 => IntSrc::I8(v.src(o)?),
            DType::I32 => IntSrc::I32(v.src(o)?),
            // Refused at setup.
            _ => return Err(Failure::View(o.id)),
        })
    }

    #[inline]
    pub(super) fn at(self, i: usize) -> i32 {
        match self {
            IntSrc::U8(s) => s.at(i).into(),
            IntSrc::I8(s) => s.at(i).into(),
            IntSrc::I32(s) => s.at(i),
        }
    }
}

/// The output, of any handled type.
enum Out<'a> {
    U8(&'a [Cell<u8>]),
    I8(&'a [Cell<i8>]),
    I32(&'a [Cell<i32>]),
    /// The i32 output converted to f32 and scaled, by the steps setup
    /// merged into the product ([`Dequantized`]).
    F32(Floats<'a>),
}

/// Where a product merged with the steps after it at setup
/// (`fuse::fuse_dequantized`) finds what they read: its i32 output `y`
/// becomes `f32(y)·scale`, then `+ bias[column]` where there was an
/// `Add`, the steps' own f32 operations in their order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dequantized {
    /// The scale's factors among the step's inputs: one value, or two
    /// multiplied in this order (a scale computed after the product by a
    /// step of its own, from values that exist before it).
    pub scale: (usize, Option<usize>),
    /// The bias among the step's inputs (an f32 weight, one value per
    /// element of the output's last axis), and whether the `Add` had it
    /// as its first operand.
    pub bias: Option<(usize, bool)>,
}

/// An f32 output of a [`Dequantized`] product.
#[derive(Clone, Copy)]
pub(super) struct Floats<'a> {
    cells: &'a [Cell<f32>],
    scale: f32,
    bias: Option<&'a [f32]>,
    bias_first: bool,
}

impl<'a> Floats<'a> {
    fn of(
        v: &Views<'a>,
        ins: &[Operand<'a>],
        d: Dequantized,
        o: &Operand<'_>,
    ) -> Result<Self, Failure> {
        let factor = |i: usize| -> Result<f32, Failure> {
            let x = ins.get(i).ok_or(Failure::View(o.id))?;
            Ok(v.src::<f32>(x)?.at(0))
        };
        let scale = match d.scale {
            (a, None) => factor(a)?,
            (a, Some(b)) => factor(a)? * factor(b)?,
        };
        let bias = match d.bias {
            None => None,
            Some((i, _)) => match v.src::<f32>(ins.get(i).ok_or(Failure::View(o.id))?)? {
                Src::Weight(w) if !w.is_empty() => Some(w),
                _ => return Err(Failure::View(ins[i].id)),
            },
        };
        Ok(Floats {
            cells: v.dst(o)?,
            scale,
            bias,
            bias_first: d.bias.is_some_and(|(_, first)| first),
        })
    }

    /// Outputs `o..o + n` as one row (lane `l` is output `o + l`, its
    /// bias element `l` of the row's), when their biases are consecutive
    /// (the row does not wrap past the last axis).
    #[inline]
    fn row(&self, o: usize, n: usize) -> Option<Floats<'a>> {
        let bias = match self.bias {
            None => None,
            Some(b) => {
                let c = o % b.len();
                Some(b.get(c..c + n)?)
            }
        };
        Some(Floats {
            cells: self.cells.get(o..o + n)?,
            bias,
            ..*self
        })
    }

    /// Lane `l`'s output, of a [`Floats::row`], from its i32 value: the
    /// merged steps' operations in their order, never fused.
    #[inline]
    fn value(&self, l: usize, y: i32) -> f32 {
        let x = y as f32 * self.scale;
        match self.bias {
            None => x,
            Some(b) if self.bias_first => b[l] + x,
            Some(b) => x + b[l],
        }
    }
}

impl<'a> Out<'a> {
    fn of(v: &Views<'a>, o: &Operand<'_>) -> Result<Self, Failure> {
        Ok(match o.dtype {
            DType::U8 => Out::U8(v.dst(o)?),
            DType::I8 => Out::I8(v.dst(o)?),
            DType::I32 => Out::I32(v.dst(o)?),
            _ => return Err(Failure::View(o.id)),
        })
    }

    fn len(&self) -> usize {
        match self {
            Out::U8(c) => c.len(),
            Out::I8(c) => c.len(),
            Out::I32(c) => c.len(),
            Out::F32(f) => f.cells.len(),
        }
    }

    /// The values the type holds.
    fn range(&self) -> (i32, i32) {
        match self {
            Out::U8(_) => (0, 255),
            Out::I8(_) => (-128, 127),
            Out::I32(_) | Out::F32(_) => (i32::MIN, i32::MAX),
        }
    }

    /// Writes `y` (already within [`Out::range`]) at `o`.
    #[inline]
    fn set(&self, o: usize, y: i32) {
        match self {
            Out::U8(c) => c[o].set(y as u8),
            Out::I8(c) => c[o].set(y as i8),
            Out::I32(c) => c[o].set(y),
            Out::F32(f) => {
                if let Some(r) = f.row(o, 1) {
                    r.cells[0].set(r.value(0, y));
                }
            }
        }
    }
}

/// The parameters, read from their tensors when the step runs (they may
/// be arena tensors), and the requantisation of one output element.
struct Requant<'a> {
    channels: Channels,
    bias: Src<'a, i32>,
    a0: i32,
    a_scale: f32,
    b0: IntSrc<'a>,
    b_scale: Src<'a, f32>,
    c0: i32,
    c_scale: f32,
    range: (i32, i32),
}

impl<'a> Requant<'a> {
    fn load(
        v: &Views<'a>,
        ins: &[Operand<'a>],
        channels: Channels,
        out: &Out<'_>,
    ) -> Result<Self, Failure> {
        Ok(Requant {
            channels,
            bias: v.src(&ins[BIAS])?,
            a0: IntSrc::of(v, &ins[A0])?.at(0),
            a_scale: v.src::<f32>(&ins[A_SCALE])?.at(0),
            b0: IntSrc::of(v, &ins[B0])?,
            b_scale: v.src(&ins[B_SCALE])?,
            c0: IntSrc::of(v, &ins[C0])?.at(0),
            c_scale: v.src::<f32>(&ins[C_SCALE])?.at(0),
            range: out.range(),
        })
    }

    /// b's zero point for output element `o`.
    #[inline]
    fn b0(&self, o: usize) -> i32 {
        self.b0.at(self.channels.b0.at(o))
    }

    /// Output element `o` from its sum of products.
    #[inline]
    fn output(&self, o: usize, sum: i32) -> i32 {
        let (bias, scale, _) = self.channel(o);
        self.finish(sum, bias, scale)
    }

    /// The bias, the combined scale and b's zero point of output element
    /// `o`'s channel.
    #[inline]
    fn channel(&self, o: usize) -> (i32, f32, i32) {
        let bias = self.bias.at(self.channels.bias.at(o));
        let b_scale = self.b_scale.at(self.channels.b_scale.at(o));
        let scale = combined(self.a_scale, b_scale, self.c_scale);
        (bias, scale, self.b0(o))
    }

    /// [`Requant::channel`] of elements `o..o + lanes` when they share one
    /// channel.
    #[inline]
    fn row(&self, o: usize, lanes: usize) -> Option<(i32, f32, i32)> {
        let last = o + lanes.max(1) - 1;
        let c = self.channels;
        [c.bias, c.b0, c.b_scale]
            .iter()
            .all(|a| a.len == 1 || o / a.div == last / a.div)
            .then(|| self.channel(o))
    }

    /// The [`epilogue::Line`] of a row of channel bias `bias` and combined
    /// scale `scale` whose sums are `raw − m·lane_sum + c`.
    #[inline]
    fn line(&self, bias: i32, scale: f32, m: i32, c: i32) -> epilogue::Line {
        epilogue::Line {
            m,
            c: c.wrapping_add(bias),
            scale,
            zero: self.c0,
            range: self.range,
        }
    }

    /// An output from its sum of products and its channel's bias and
    /// combined scale ([`Requant::channel`]).
    #[inline]
    fn finish(&self, sum: i32, bias: i32, scale: f32) -> i32 {
        requantize(sum.wrapping_add(bias), scale, self.c0, self.range)
    }
}

/// Runs `$body` with `$x` and `$y` the typed views of operands `$a` and
/// `$b` (each u8 or i8).
macro_rules! narrow_pair {
    ($v:expr, $a:expr, $b:expr, |$x:ident, $y:ident| $body:expr) => {
        match ($a.dtype, $b.dtype) {
            (DType::U8, DType::U8) => {
                let ($x, $y) = ($v.src::<u8>($a)?, $v.src::<u8>($b)?);
                $body
            }
            (DType::U8, DType::I8) => {
                let ($x, $y) = ($v.src::<u8>($a)?, $v.src::<i8>($b)?);
                $body
            }
            (DType::I8, DType::U8) => {
                let ($x, $y) = ($v.src::<i8>($a)?, $v.src::<u8>($b)?);
                $body
            }
            (DType::I8, DType::I8) => {
                let ($x, $y) = ($v.src::<i8>($a)?, $v.src::<i8>($b)?);
                $body
            }
            // Refused at setup.
            _ => return Err(Failure::View($a.id)),
        }
    };
}

/// True where a test asks for the reference loops alone (to compare the
/// other paths with them).
#[cfg(test)]
fn reference_only() -> bool {
    tests::REFERENCE_ONLY.with(Cell::get)
}

#[cfg(not(test))]
#[inline(always)]
fn reference_only() -> bool {
    false
}

/// Whether operand `o` (u8 or i8) is i8.
fn signed(o: &Operand<'_>) -> bool {
    o.dtype == DType::I8
}

impl QProduct {
    /// The layout b would be packed in, if it is an i8 weight (`b`) that
    /// gives the lanes of the packed path and that path can always run.
    pub(super) fn lanes_weight(&self, b: &Operand<'_>) -> Option<Panels> {
        let plan = self.packed.as_ref()?;
        let p = plan.lanes_weight(b.len)?;
        (b.dtype == DType::I8 && packed_fits(p.depth, plan.scratch_floats())).then_some(p)
    }

    /// The layout of b, when the bundle stores it packed.
    pub(super) fn packed_weight(&self) -> Option<Panels> {
        self.weight.as_deref().copied()
    }

    /// True when the product gives an i32 output of its own.
    pub(super) fn gives_i32(&self) -> bool {
        self.dequantized.is_none()
    }

    /// Makes the product write f32 outputs as `d` says (setup's merge;
    /// the step's output then is the f32 tensor).
    pub(super) fn dequantize(&mut self, d: Dequantized) {
        self.dequantized = Some(Box::new(d));
    }

    /// Runs share `part` of `parts` of the product of `ins` into `out`:
    /// packed through `scratch` where it suffices, else the reference
    /// loops on share 0 alone.
    pub fn run(
        &self,
        v: &Views<'_>,
        ins: &[Operand<'_>],
        out: &Operand<'_>,
        scratch: &[Cell<f32>],
        (part, parts): (usize, usize),
    ) -> Result<(), Failure> {
        let out = match self.dequantized.as_deref() {
            Some(&d) => Out::F32(Floats::of(v, ins, d, out)?),
            None => Out::of(v, out)?,
        };
        let q = Requant::load(v, ins, self.channels, &out)?;
        let (a, b) = (v.src::<u8>(&ins[A])?, v.src::<u8>(&ins[B])?);
        let dom = fast::Domains::new(signed(&ins[A]), signed(&ins[B]));
        let isa = igemm::Isa::detect();
        // A packed weight is only read by the packed path, which setup
        // checked has room.
        let fast = !reference_only() || self.weight.is_some();
        let done = fast && self.run_packed(isa, a, b, dom, &q, &out, scratch, part, parts);
        if done || part != 0 {
            return Ok(());
        }
        if self.weight.is_some() {
            return Err(Failure::View(ins[B].id));
        }
        narrow_pair!(v, &ins[A], &ins[B], |a, b| product_loop(
            &self.sum, a, b, &q, &out
        ));
        Ok(())
    }
}

fn product_loop<X: Narrow, Y: Narrow>(
    c: &Contraction,
    a: Src<'_, X>,
    b: Src<'_, Y>,
    q: &Requant<'_>,
    out: &Out<'_>,
) {
    let (kept, summed) = c.dims.split_at(c.kept);
    let count: usize = summed.iter().product();
    for o in 0..out.len() {
        let base = contract::offsets(kept, &c.strides, 0, o);
        let b0 = q.b0(o);
        let mut acc = 0i32;
        for s in 0..count {
            let more = contract::offsets(summed, &c.strides, c.kept, s);
            let x = a.at(base[0] + more[0]).wide().wrapping_sub(q.a0);
            let y = b.at(base[1] + more[1]).wide().wrapping_sub(b0);
            acc = acc.wrapping_add(x.wrapping_mul(y));
        }
        out.set(o, q.output(o, acc));
    }
}

impl QConv {
    /// Runs share `part` of `parts` of the convolution of `ins` into
    /// `out`, as [`QProduct::run`].
    pub fn run(
        &self,
        v: &Views<'_>,
        ins: &[Operand<'_>],
        out: &Operand<'_>,
        scratch: &[Cell<f32>],
        (part, parts): (usize, usize),
    ) -> Result<(), Failure> {
        let out = Out::of(v, out)?;
        let q = Requant::load(v, ins, self.channels, &out)?;
        let (x, w) = (v.src::<u8>(&ins[A])?, v.src::<u8>(&ins[B])?);
        let dom = fast::Domains::new(signed(&ins[A]), signed(&ins[B]));
        let isa = igemm::Isa::detect();
        let fast = !reference_only();
        if fast
            && (self.run_depthwise(isa, x, w, dom, &q, &out, part, parts)
                || self.run_packed(isa, x, w, dom, &q, &out, scratch, part, parts))
            || part != 0
        {
            return Ok(());
        }
        narrow_pair!(v, &ins[A], &ins[B], |x, w| conv_loop(
            &self.shape,
            x,
            w,
            &q,
            &out
        ));
        Ok(())
    }
}

fn conv_loop<X: Narrow, W: Narrow>(
    s: &ConvShape,
    x: Src<'_, X>,
    w: Src<'_, W>,
    q: &Requant<'_>,
    out: &Out<'_>,
) {
    let win = &s.window;
    let [_, ih, iw] = win.input;
    let [_, oh, ow] = win.output;
    let [_, kh, kw] = win.kernel;
    let taps: usize = win.kernel.iter().product();
    let (plane_in, plane_out) = (win.input_plane(), win.output_plane());
    let (c_in, c_out) = (s.groups * s.in_per_group, s.groups * s.out_per_group);
    for image in 0..s.batch {
        for cout in 0..c_out {
            let group = cout / s.out_per_group;
            for pos in 0..plane_out {
                let o = (image * c_out + cout) * plane_out + pos;
                let at = [pos / (oh * ow), pos / ow % oh, pos % ow];
                // Taps that land inside the image; the padding holds a's
                // zero point and adds nothing.
                let span: [(usize, usize); 3] = core::array::from_fn(|d| win.taps(d, at[d]));
                let b0 = q.b0(o);
                let mut acc = 0i32;
                for ic in 0..s.in_per_group {
                    let xb = (image * c_in + group * s.in_per_group + ic) * plane_in;
                    let wb = (cout * s.in_per_group + ic) * taps;
                    for tz in span[0].0..span[0].1 {
                        let z = win.input_at(0, at[0], tz);
                        for ty in span[1].0..span[1].1 {
                            let y = win.input_at(1, at[1], ty);
                            for tx in span[2].0..span[2].1 {
                                let xx = win.input_at(2, at[2], tx);
                                let xv = x.at(xb + (z * ih + y) * iw + xx).wide();
                                let wv = w.at(wb + (tz * kh + ty) * kw + tx).wide();
                                let p = xv.wrapping_sub(q.a0).wrapping_mul(wv.wrapping_sub(b0));
                                acc = acc.wrapping_add(p);
                            }
                        }
                    }
                }
                out.set(o, q.output(o, acc));
            }
        }
    }
}

#[cfg(test)]
mod tests;

//! Quantized element-wise and pooling operators on u8/i8 tensors:
//! onnxruntime's `QLinearAdd`, `QLinearMul` and
//! `QLinearGlobalAveragePool` (also what the compiler makes of a
//! DequantizeLinear → Add/Mul/GlobalAveragePool → QuantizeLinear
//! pattern), every parameter per tensor; and `QLookup`, a 256-entry
//! table the compiler computed for an activation between a
//! DequantizeLinear and a QuantizeLinear.
//!
//! Each computes what onnxruntime computes, and the compiler's
//! evaluation calls the same functions, so the two agree bit for bit:
//! the binary operators with MLAS's f32 arithmetic ([`Formula`]), the
//! pool as MLAS's ([`pooled`]), the table by looking up.
//!
//! | # | binary input | pool input |
//! |---|---|---|
//! | 0 | a (u8, i8) | x (u8, i8) |
//! | 1 | a's scale (f32) | x's scale |
//! | 2 | a's zero point (a's type) | x's zero point |
//! | 3 | b (u8, i8) | the output's scale |
//! | 4 | b's scale | the output's zero point (the output's type) |
//! | 5 | b's zero point | |
//! | 6 | the output's scale | |
//! | 7 | the output's zero point (the output's type) | |

use super::cells::{map_row, Load, Src};
use super::float::Float;
use super::layout::{broadcast_strides, strides_of, Share, Walk};
use super::prepare::want;
use super::qlinear::IntSrc;
use super::run::{Failure, Views};
use super::{Kernel, Operand};
use alloc::{format, string::String};
use core::cell::Cell;
use stow_bundle::DType;

/// Addition or multiplication of the dequantized values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// `QLinearAdd`.
    Add,
    /// `QLinearMul`.
    Mul,
}

/// A prepared `QLinearAdd` or `QLinearMul`.
#[derive(Clone, Debug)]
pub struct QBinary {
    combine: Combine,
    /// Over the output, with the output's, a's and b's strides.
    walk: Walk<3>,
}

/// A prepared `QLinearGlobalAveragePool`.
#[derive(Clone, Debug)]
pub struct QGlobalPool {
    /// Images.
    batch: usize,
    /// Channels.
    channels: usize,
    /// Elements of one channel's plane.
    plane: usize,
    /// NHWC rather than NCHW.
    channels_last: bool,
}

fn narrow(d: DType) -> bool {
    matches!(d, DType::U8 | DType::I8)
}

/// Checks a per-tensor (scale, zero point) pair for a quantized operand
/// of type `dt`.
fn parameters(
    ins: &[Operand<'_>],
    scale: usize,
    zero: usize,
    dt: DType,
    what: &str,
) -> Result<(), String> {
    want(
        ins[scale].dtype == DType::F32 && ins[scale].len == 1,
        || format!("{what}'s scale must be one f32"),
    )?;
    want(ins[zero].dtype == dt && ins[zero].len == 1, || {
        format!("{what}'s zero point must be one {}", dt.name())
    })
}

/// Prepares `QLinearAdd` (`mul` false) or `QLinearMul`.
pub(super) fn prepare_binary(
    mul: bool,
    ins: &[Operand<'_>],
    outs: &[Operand<'_>],
) -> Result<(Kernel, usize), String> {
    want(ins.len() == 8 && outs.len() == 1, || {
        "a quantized Add or Mul takes 8 inputs and gives 1 output".into()
    })?;
    let (a, b, out) = (&ins[0], &ins[3], &outs[0]);
    for (o, what) in [(a, "a"), (b, "b"), (out, "the output")] {
        want(narrow(o.dtype), || {
            format!("{what} is {}; handled: u8, i8", o.dtype.name())
        })?;
    }
    parameters(ins, 1, 2, a.dtype, "a")?;
    parameters(ins, 4, 5, b.dtype, "b")?;
    parameters(ins, 6, 7, out.dtype, "the output")?;
    let o = &out.shape;
    let st = |x: &Operand<'_>| {
        broadcast_strides(&x.shape, o)
            .ok_or_else(|| format!("{:?} does not broadcast to the output {o:?}", x.shape))
    };
    let walk = Walk::new(o, [&strides_of(o), &st(a)?, &st(b)?]).ok_or("rank too large")?;
    let combine = if mul { Combine::Mul } else { Combine::Add };
    Ok((Kernel::QBinary(QBinary { combine, walk }), 0))
}

/// Prepares `QLinearGlobalAveragePool`.
pub(super) fn prepare_pool(
    channels_last: bool,
    ins: &[Operand<'_>],
    outs: &[Operand<'_>],
) -> Result<(Kernel, usize), String> {
    want(ins.len() == 5 && outs.len() == 1, || {
        "a quantized global average pool takes 5 inputs and gives 1 output".into()
    })?;
    let (x, out) = (&ins[0], &outs[0]);
    want(narrow(x.dtype) && narrow(out.dtype), || {
        format!(
            "{} into {}; handled: u8, i8",
            x.dtype.name(),
            out.dtype.name()
        )
    })?;
    parameters(ins, 1, 2, x.dtype, "x")?;
    parameters(ins, 3, 4, out.dtype, "the output")?;
    let s = &x.shape;
    want(s.len() >= 3, || format!("input of rank {}", s.len()))?;
    let (batch, channels) = if channels_last {
        (s[0], s[s.len() - 1])
    } else {
        (s[0], s[1])
    };
    let plane = x.len / (batch * channels).max(1);
    want(out.len == batch * channels, || {
        format!(
            "output of {} elements from {batch}×{channels} planes",
            out.len
        )
    })?;
    Ok((
        Kernel::QGlobalPool(QGlobalPool {
            batch,
            channels,
            plane,
            channels_last,
        }),
        0,
    ))
}

/// Prepares `QLookup`: inputs x (u8, i8) and a table of 256 outputs.
pub(super) fn prepare_lookup(
    ins: &[Operand<'_>],
    outs: &[Operand<'_>],
) -> Result<(Kernel, usize), String> {
    want(ins.len() == 2 && outs.len() == 1, || {
        "a look-up table takes 2 inputs and gives 1 output".into()
    })?;
    let (x, table, out) = (&ins[0], &ins[1], &outs[0]);
    want(narrow(x.dtype) && narrow(out.dtype), || {
        format!(
            "{} into {}; handled: u8, i8",
            x.dtype.name(),
            out.dtype.name()
        )
    })?;
    want(table.len == 256 && table.dtype == out.dtype, || {
        format!(
            "a table of {} {} for a {} output; expected 256",
            table.len,
            table.dtype.name(),
            out.dtype.name()
        )
    })?;
    want(x.len == out.len, || "input and output sizes differ".into())?;
    Ok((Kernel::QLookup, 0))
}

/// Runs `QLookup`: the table's entry at the input's offset from its
/// type's first value. Bytes move as they are: the table holds the
/// output's bytes. The table is first arranged by the input's raw byte (an
/// i8's offset from −128 is its byte with the top bit flipped), so each
/// element is one look-up of its byte: 64 at a time with AVX-512 VBMI's
/// byte permutes, where the CPU has them.
pub(super) fn lookup(v: &Views<'_>, ins: &[Operand<'_>], out: &Operand<'_>) -> Result<(), Failure> {
    let flip = match ins[0].dtype {
        DType::I8 => 0x80,
        _ => 0,
    };
    let table = v.src::<u8>(&ins[1])?;
    let mut by_byte = [0u8; 256];
    for (b, e) in by_byte.iter_mut().enumerate() {
        *e = table.at(b ^ flip);
    }
    let y = v.dst::<u8>(out)?;
    match v.src::<u8>(&ins[0])? {
        Src::Arena(x) => look_up(x, y, &by_byte),
        Src::Weight(x) => {
            for (c, &b) in y.iter().zip(x) {
                c.set(by_byte[b as usize]);
            }
        }
    }
    Ok(())
}

/// `y[i] = table[x[i]]`; `y` may be `x` (planned in place).
fn look_up(x: &[Cell<u8>], y: &[Cell<u8>], table: &[u8; 256]) {
    let n = x.len().min(y.len());
    #[cfg(target_arch = "x86_64")]
    if has_vbmi() {
        // SAFETY: the CPU has AVX-512 F, BW and VBMI (checked above).
        #[allow(unsafe_code)]
        unsafe {
            x86::look_up_vbmi(&x[..n], &y[..n], table)
        };
        return;
    }
    for (c, b) in y[..n].iter().zip(&x[..n]) {
        c.set(table[b.get() as usize]);
    }
}

/// Whether the CPU has AVX-512 F, BW and VBMI: detected with `std`;
/// without it, what the crate is compiled for.
#[cfg(target_arch = "x86_64")]
fn has_vbmi() -> bool {
    #[cfg(feature = "std")]
    {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vbmi")
    }
    #[cfg(not(feature = "std"))]
    {
        cfg!(all(
            target_feature = "avx512f",
            target_feature = "avx512bw",
            target_feature = "avx512vbmi"
        ))
    }
}

/// The output, u8 or i8, written from values already in its range.
enum NarrowOut<'a> {
    U8(&'a [Cell<u8>]),
    I8(&'a [Cell<i8>]),
}

impl<'a> NarrowOut<'a> {
    fn of(v: &Views<'a>, o: &Operand<'_>) -> Result<Self, Failure> {
        Ok(match o.dtype {
            DType::U8 => NarrowOut::U8(v.dst(o)?),
            DType::I8 => NarrowOut::I8(v.dst(o)?),
            _ => return Err(Failure::View(o.id)),
        })
    }

    fn range(&self) -> (f32, f32) {
        match self {
            NarrowOut::U8(_) => (0.0, 255.0),
            NarrowOut::I8(_) => (-128.0, 127.0),
        }
    }

    #[inline]
    fn set(&self, i: usize, y: f32) {
        match self {
            NarrowOut::U8(c) => c[i].set(y as u8),
            NarrowOut::I8(c) => c[i].set(y as i8),
        }
    }
}

/// One per-tensor (scale, zero point) pair.
fn pair(v: &Views<'_>, ins: &[Operand<'_>], scale: usize) -> Result<(f32, f32), Failure> {
    let s = v.src::<f32>(&ins[scale])?.at(0);
    let z = IntSrc::of(v, &ins[scale + 1])?.at(0);
    Ok((s, z as f32))
}

/// The arithmetic of a `QLinearAdd` or `QLinearMul`, all parameters per
/// tensor: onnxruntime's (MLAS's kernels on x86-64), so that a QDQ model
/// gives onnxruntime's bytes. Both are f32 evaluations of the exact
/// formula `quantize(dequantize(a) ∘ dequantize(b))`; the definition's
/// own order (dequantize each, combine, divide by the output scale) rounds
/// a few values in a million to the neighbouring integer, and a model
/// whose next layer has a tiny scale magnifies that into several steps
/// (efficientnet_b0 with per-channel weights: 5 steps at its output).
///
/// - Add: the operands' scales over the output's, `ra = sa/sc`,
///   `rb = sb/sc`; a constant part `zc − (ra·za + rb·zb)` (the sum fused,
///   as onnxruntime's build compiles it); then `fma(a, ra, fma(b, rb,
///   constant))` per element. Where an operand is constant along a row
///   (a per-channel or single operand: onnxruntime's "scalar" spans) its
///   term joins the constant part first, multiplied and added apart.
/// - Mul: the product `(a − za)·(b − zb)` (exact in f32), times the
///   combined scale `sa·sb/sc`, plus `zc`.
///
/// Then round half to even and saturate. Measured against onnxruntime
/// 1.31's `QLinearAdd`/`QLinearMul` on every pair of u8 inputs under 40
/// random parameter sets each: no difference (the definition's order: 9
/// and 5 values differ).
#[derive(Clone, Copy, Debug)]
pub struct Formula {
    combine: Combine,
    /// Add: `sa/sc`; Mul: `sa·sb/sc`.
    ra: f32,
    /// Add: `sb/sc`, or 0 where b's term is in `constant`; Mul: unused.
    rb: f32,
    /// Add: `zc − (ra·za + rb·zb)` (plus a row's constant term); Mul: `zc`.
    constant: f32,
    za: f32,
    zb: f32,
    bounds: (f32, f32),
}

/// `x` rounded half to even, for `|x| <= 2²²` (or NaN, kept): the sum
/// with 1.5·2²³ lies where f32 holds only integers, so the addition
/// rounds (half to even, the default rounding) and the subtraction is
/// exact.
#[inline(always)]
fn small_round_even(x: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0; // 1.5·2²³
    (x + SHIFT) - SHIFT
}

/// Bounds [`small_round_even`] rounds within.
const SMALL: f32 = 4_194_304.0; // 2²²

impl Formula {
    /// The formula of `combine` with a's, b's and the output's (scale,
    /// zero point), and the output type's range (integers within ±2²²:
    /// a byte type's).
    pub fn new(
        combine: Combine,
        (sa, za): (f32, f32),
        (sb, zb): (f32, f32),
        (sc, zc): (f32, f32),
        bounds: (f32, f32),
    ) -> Formula {
        let (ra, rb, constant) = match combine {
            Combine::Add => {
                let (ra, rb) = (sa / sc, sb / sc);
                (ra, rb, zc - Float::mul_add(ra, za, rb * zb))
            }
            Combine::Mul => (sa * sb / sc, 0.0, zc),
        };
        debug_assert!(
            bounds.0.abs() <= SMALL && bounds.1.abs() <= SMALL,
            "bounds past exact rounding"
        );
        Formula {
            combine,
            ra,
            rb,
            constant,
            za,
            zb,
            bounds: (bounds.0.max(-SMALL), bounds.1.min(SMALL)),
        }
    }

    /// The formula for a row along which b is `xb` throughout.
    #[inline]
    pub fn with_b(&self, xb: f32) -> Formula {
        match self.combine {
            Combine::Add => Formula {
                rb: 0.0,
                constant: self.constant + xb * self.rb,
                ..*self
            },
            Combine::Mul => *self,
        }
    }

    /// The formula for a row along which a is `xa` throughout.
    #[inline]
    pub fn with_a(&self, xa: f32) -> Formula {
        match self.combine {
            Combine::Add => Formula {
                ra: 0.0,
                constant: self.constant + xa * self.ra,
                ..*self
            },
            Combine::Mul => *self,
        }
    }

    /// The formula for a row along which a and b advance by `sa` and
    /// `sb`: an operand that stays put (stride 0) joins the constant part,
    /// as in onnxruntime's spans of a per-channel operand.
    #[inline(always)]
    fn along_row(
        &self,
        sa: usize,
        sb: usize,
        xa: impl FnOnce() -> f32,
        xb: impl FnOnce() -> f32,
    ) -> Formula {
        match (sa, sb) {
            (0, 0) => *self,
            (_, 0) => self.with_b(xb()),
            (0, _) => self.with_a(xa()),
            _ => *self,
        }
    }

    /// The output value of one pair of inputs (already in range).
    #[inline(always)]
    pub fn one(&self, xa: f32, xb: f32) -> f32 {
        let v = match self.combine {
            // With a term moved into `constant` its factor is 0 and the
            // inner fma gives `constant` exactly.
            Combine::Add => Float::mul_add(xa, self.ra, Float::mul_add(xb, self.rb, self.constant)),
            Combine::Mul => (xa - self.za) * (xb - self.zb) * self.ra + self.constant,
        };
        // Clamped first, then rounded: the bounds are integers (a byte
        // type's range), which rounding keeps, and rounding is monotone,
        // so the order gives the same value (NaN stays NaN). Within
        // ±2²² a value is rounded half to even by adding and taking away
        // 1.5·2²³ in f32, which vectorises where the general rounding
        // went through f64 (half the element-wise add's instructions).
        small_round_even(v.clamp(self.bounds.0, self.bounds.1))
    }
}

impl QBinary {
    /// Runs share `part` of `parts` of the operator over `ins` into `out`
    /// (`plane` as [`Share::plane`]).
    pub fn run(
        &self,
        v: &Views<'_>,
        ins: &[Operand<'_>],
        out: &Operand<'_>,
        (part, parts, plane): (usize, usize, usize),
    ) -> Result<(), Failure> {
        let share = Share {
            walk: &self.walk,
            part,
            parts,
            plane,
        };
        let (a, b) = (IntSrc::of(v, &ins[0])?, IntSrc::of(v, &ins[3])?);
        let y = NarrowOut::of(v, out)?;
        let f = Formula::new(
            self.combine,
            pair(v, ins, 1)?,
            pair(v, ins, 4)?,
            pair(v, ins, 6)?,
            y.range(),
        );
        // u8 and i8 operands (all that QDQ models give) run with their
        // types known, so that contiguous rows vectorise; the same
        // operations on the same values as the general loop below.
        macro_rules! typed {
            ($s:expr, |$x:ident| $body:expr) => {
                match $s {
                    NarrowSrc::U8(s) => crate::with_load!(s, |$x| $body),
                    NarrowSrc::I8(s) => crate::with_load!(s, |$x| $body),
                }
            };
        }
        if let (Some(a), Some(b)) = (NarrowSrc::of(a), NarrowSrc::of(b)) {
            let isa = super::qlinear::igemm::Isa::detect();
            typed!(a, |a| typed!(b, |b| match &y {
                NarrowOut::U8(c) => typed_rows(isa, share, a, b, c, &f),
                NarrowOut::I8(c) => typed_rows(isa, share, a, b, c, &f),
            }));
            return Ok(());
        }
        let (_, [so, sa, sb]) = self.walk.inner();
        share.rows([0; 3], |[o, ia, ib], len| {
            let g = f.along_row(sa, sb, || a.at(ia) as f32, || b.at(ib) as f32);
            for k in 0..len {
                let (xa, xb) = (a.at(ia + k * sa) as f32, b.at(ib + k * sb) as f32);
                y.set(o + k * so, g.one(xa, xb));
            }
        });
        Ok(())
    }
}

/// A u8 or i8 operand of [`QBinary::run`].
enum NarrowSrc<'a> {
    U8(Src<'a, u8>),
    I8(Src<'a, i8>),
}

impl<'a> NarrowSrc<'a> {
    fn of(s: IntSrc<'a>) -> Option<Self> {
        match s {
            IntSrc::U8(s) => Some(NarrowSrc::U8(s)),
            IntSrc::I8(s) => Some(NarrowSrc::I8(s)),
            IntSrc::I32(_) => None,
        }
    }
}

/// An output element type of [`QBinary::run`]: u8 or i8, from a value
/// already in its range.
trait Narrow: Copy {
    fn of(v: f32) -> Self;
}

/// `v as i32` for a `v` that is an integer within −128..=255 or NaN (0,
/// as the saturating cast gives), without the saturating cast's scalar
/// code per lane: NaN (and anything else out of that range, which the
/// formula never gives) becomes 0 first, and the plain conversion of the
/// rest vectorises.
#[inline(always)]
fn small_int(v: f32) -> i32 {
    let v = if (-128.0..=255.0).contains(&v) {
        v
    } else {
        0.0
    };
    // SAFETY: `v` is finite and within i32's range.
    #[allow(unsafe_code)]
    unsafe {
        v.to_int_unchecked::<i32>()
    }
}

impl Narrow for u8 {
    #[inline(always)]
    fn of(v: f32) -> u8 {
        small_int(v) as u8
    }
}

impl Narrow for i8 {
    #[inline(always)]
    fn of(v: f32) -> i8 {
        small_int(v) as i8
    }
}

/// [`QBinary::run`]'s loop over typed operands, each row compiled for
/// the best vector width the CPU has: the same operations per element in
/// the same order (Rust never fuses a multiply and an add), so the same
/// bytes. The walk over rows stays outside the compiled-for-a-width
/// function: its loop is a function of its own that the vector body would
/// otherwise be inlined into, compiled for the baseline (SSE2).
#[inline(always)]
fn typed_rows<XA, XB, Y>(
    isa: super::qlinear::igemm::Isa,
    share: Share<'_, 3>,
    a: impl Load<XA>,
    b: impl Load<XB>,
    y: &[Cell<Y>],
    f: &Formula,
) where
    XA: Copy + Into<f32>,
    XB: Copy + Into<f32>,
    Y: Narrow,
{
    let (_, strides) = share.walk.inner();
    share.rows([0; 3], |at, len| {
        typed_row(isa, at, len, strides, a, b, y, f)
    });
}

/// One piece of a row of [`typed_rows`], compiled for `isa`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn typed_row<XA, XB, Y>(
    isa: super::qlinear::igemm::Isa,
    at: [usize; 3],
    len: usize,
    strides: [usize; 3],
    a: impl Load<XA>,
    b: impl Load<XB>,
    y: &[Cell<Y>],
    f: &Formula,
) where
    XA: Copy + Into<f32>,
    XB: Copy + Into<f32>,
    Y: Narrow,
{
    use super::qlinear::igemm::Isa;
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Vnni => {
            // SAFETY: `Isa::Vnni` is only chosen where the CPU has
            // AVX-512 F and BW (`Isa::detect`).
            #[allow(unsafe_code)]
            unsafe {
                x86::row_avx512(at, len, strides, a, b, y, f)
            }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: `Isa::Avx2` is only chosen where the CPU has AVX2
            // and FMA.
            #[allow(unsafe_code)]
            unsafe {
                x86::row_avx2(at, len, strides, a, b, y, f)
            }
        }
        _ => row(at, len, strides, a, b, y, f),
    }
}

/// One row of [`typed_rows`]: `len` elements from offsets `o`, `ia`,
/// `ib` with strides `so`, `sa`, `sb`; contiguous rows in chunks read
/// before they are written ([`pairs`]: the output may be an input,
/// planned in place), which lets them vectorise.
#[inline(always)]
fn row<XA, XB, Y>(
    [o, ia, ib]: [usize; 3],
    len: usize,
    [so, sa, sb]: [usize; 3],
    a: impl Load<XA>,
    b: impl Load<XB>,
    y: &[Cell<Y>],
    f: &Formula,
) where
    XA: Copy + Into<f32>,
    XB: Copy + Into<f32>,
    Y: Narrow,
{
    if so == 1 && sa == 1 && sb == 1 {
        let (a, b, y) = (a.sub(ia, len), b.sub(ib, len), &y[o..o + len]);
        pairs(y, a, b, |xa: XA, xb: XB| Y::of(f.one(xa.into(), xb.into())));
    } else if so == 1 && sa == 1 && sb == 0 {
        // b broadcast along the row (a per-channel or scalar operand).
        let xb = b.load(ib).into();
        let g = f.with_b(xb);
        map_row(&y[o..o + len], a.sub(ia, len), |xa: XA| {
            Y::of(g.one(xa.into(), xb))
        });
    } else if so == 1 && sa == 0 && sb == 1 {
        let xa = a.load(ia).into();
        let g = f.with_a(xa);
        map_row(&y[o..o + len], b.sub(ib, len), |xb: XB| {
            Y::of(g.one(xa, xb.into()))
        });
    } else {
        let g = f.along_row(sa, sb, || a.load(ia).into(), || b.load(ib).into());
        for k in 0..len {
            let (xa, xb) = (a.load(ia + k * sa).into(), b.load(ib + k * sb).into());
            y[o + k * so].set(Y::of(g.one(xa, xb)));
        }
    }
}

/// `y[j] = f(a[j], b[j])` over one row, as `cells::zip_row` but for operands of
/// two types: each chunk read in full before any of it is written.
#[inline(always)]
fn pairs<XA: Copy, XB: Copy, Y: Copy>(
    y: &[Cell<Y>],
    a: impl Load<XA>,
    b: impl Load<XB>,
    f: impl Fn(XA, XB) -> Y,
) {
    const LANES: usize = 16;
    let n = y.len().min(a.count()).min(b.count());
    let mut j = 0;
    while j + LANES <= n {
        let (o, x, w) = (&y[j..j + LANES], a.sub(j, LANES), b.sub(j, LANES));
        // Plain loops, not `array::from_fn`, whose closures are not
        // always inlined into the vector body.
        let mut r = [f(x.load(0), w.load(0)); LANES];
        for (i, v) in r.iter_mut().enumerate() {
            *v = f(x.load(i), w.load(i));
        }
        crate::kernels::cells::store(o, r);
        j += LANES;
    }
    for k in j..n {
        y[k].set(f(a.load(k), b.load(k)));
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{row, Formula, Narrow};
    use crate::kernels::cells::Load;
    use core::arch::x86_64::*;
    use core::cell::Cell;

    /// [`super::look_up`] 64 bytes at a time: two two-register byte
    /// permutes give the entries of the table's lower and upper halves
    /// (their index's low 7 bits), the top bit picks one. Each chunk is
    /// loaded whole before it is stored, so `y` may be `x`. The caller
    /// guarantees AVX-512 F, BW and VBMI and `x.len() == y.len()`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
    pub(super) fn look_up_vbmi(x: &[Cell<u8>], y: &[Cell<u8>], table: &[u8; 256]) {
        let n = x.len().min(y.len());
        let (xp, yp) = (x.as_ptr().cast::<u8>(), y.as_ptr().cast::<u8>().cast_mut());
        // SAFETY: every access is within the table's 256 bytes or the
        // first `n` bytes of `x` and `y` (whole chunks, then a masked tail);
        // the arena's bytes are cells, written through their pointer as
        // `Cell::set` would.
        #[allow(unsafe_code)]
        unsafe {
            let t = table.as_ptr();
            let quarter = |k: usize| _mm512_loadu_si512(t.add(64 * k).cast());
            let (t0, t1, t2, t3) = (quarter(0), quarter(1), quarter(2), quarter(3));
            let entries = |idx: __m512i| {
                let low = _mm512_permutex2var_epi8(t0, idx, t1);
                let high = _mm512_permutex2var_epi8(t2, idx, t3);
                _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), low, high)
            };
            let mut j = 0;
            while j + 64 <= n {
                let idx = _mm512_loadu_si512(xp.add(j).cast());
                _mm512_storeu_si512(yp.add(j).cast(), entries(idx));
                j += 64;
            }
            if j < n {
                let mask: __mmask64 = (1u64 << (n - j)) - 1;
                let idx = _mm512_maskz_loadu_epi8(mask, xp.add(j).cast());
                _mm512_mask_storeu_epi8(yp.add(j).cast(), mask, entries(idx));
            }
        }
    }

    /// [`row`] compiled for AVX-512; the caller guarantees AVX-512 F and
    /// BW.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn row_avx512<XA, XB, Y>(
        at: [usize; 3],
        len: usize,
        strides: [usize; 3],
        a: impl Load<XA>,
        b: impl Load<XB>,
        y: &[Cell<Y>],
        f: &Formula,
    ) where
        XA: Copy + Into<f32>,
        XB: Copy + Into<f32>,
        Y: Narrow,
    {
        row(at, len, strides, a, b, y, f);
    }

    /// [`row`] compiled for AVX2 and FMA (which every AVX2 CPU the
    /// runtime picks has: `Isa::detect`); the caller guarantees both.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn row_avx2<XA, XB, Y>(
        at: [usize; 3],
        len: usize,
        strides: [usize; 3],
        a: impl Load<XA>,
        b: impl Load<XB>,
        y: &[Cell<Y>],
        f: &Formula,
    ) where
        XA: Copy + Into<f32>,
        XB: Copy + Into<f32>,
        Y: Narrow,
    {
        row(at, len, strides, a, b, y, f);
    }
}

/// The quantized mean of a plane whose `x − zero` sum to `sum`, as
/// onnxruntime's `MlasQLinearGlobalAveragePoolNchw` computes it: the sum
/// in i32, the scale `x_scale / (y_scale·count)` in f32, then its
/// requantisation of a product's sums ([`super::qlinear::requantize`]).
/// The compiler's evaluation of the operator calls this one too.
pub fn pooled(
    sum: i64,
    count: usize,
    x_scale: f32,
    y_scale: f32,
    y_zero: f32,
    b: (f32, f32),
) -> f32 {
    let scale = x_scale / (y_scale * count.max(1) as f32);
    // MLAS accumulates in i32: the same sum modulo 2³².
    let acc = sum as i32;
    let range = (b.0 as i32, b.1 as i32);
    super::qlinear::requantize(acc, scale, y_zero as i32, range) as f32
}

impl QGlobalPool {
    /// Runs the pool over `ins` into `out`.
    pub fn run(
        &self,
        v: &Views<'_>,
        ins: &[Operand<'_>],
        out: &Operand<'_>,
    ) -> Result<(), Failure> {
        let x = IntSrc::of(v, &ins[0])?;
        let ((x_s, x_z), (y_s, y_z)) = (pair(v, ins, 1)?, pair(v, ins, 3)?);
        let y = NarrowOut::of(v, out)?;
        let bounds = y.range();
        let offset = x_z as i64 * self.plane as i64;
        let mut emit = |at: usize, sum: i64| {
            y.set(at, pooled(sum - offset, self.plane, x_s, y_s, y_z, bounds));
        };
        match x {
            IntSrc::U8(s) => crate::with_load!(s, |s| self.sums(s, &mut emit)),
            IntSrc::I8(s) => crate::with_load!(s, |s| self.sums(s, &mut emit)),
            IntSrc::I32(s) => crate::with_load!(s, |s| self.sums(s, &mut emit)),
        }
        Ok(())
    }

    /// Calls `emit(output index, sum of the plane's values)` for every
    /// image and channel. Channels last, the sums of a block of channels
    /// grow together over the pixels, so the input is read once, in order,
    /// with no scratch beyond the block's sums on the stack.
    #[inline(always)]
    fn sums<T: Copy + Into<i64>>(&self, x: impl Load<T>, emit: &mut impl FnMut(usize, i64)) {
        const BLOCK: usize = 256;
        let (c, plane) = (self.channels, self.plane);
        for n in 0..self.batch {
            if !self.channels_last {
                for ch in 0..c {
                    let row = x.sub((n * c + ch) * plane, plane);
                    emit(n * c + ch, (0..plane).map(|i| row.load(i).into()).sum());
                }
                continue;
            }
            let mut acc = [0i64; BLOCK];
            for c0 in (0..c).step_by(BLOCK) {
                let width = BLOCK.min(c - c0);
                let acc = &mut acc[..width];
                acc.fill(0);
                for i in 0..plane {
                    let row = x.sub((n * plane + i) * c + c0, width);
                    for (k, a) in acc.iter_mut().enumerate() {
                        *a += row.load(k).into();
                    }
                }
                for (k, &a) in acc.iter().enumerate() {
                    emit(n * c + c0 + k, a);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_formula_rounds_half_to_even_and_saturates() {
        let (one, u8s) = ((1.0, 0.0), (0.0, 255.0));
        let mul = Formula::new(Combine::Mul, (0.5, 0.0), one, one, u8s);
        assert_eq!(mul.one(5.0, 1.0), 2.0);
        assert_eq!(mul.one(7.0, 1.0), 4.0);
        assert_eq!(mul.one(255.0, 255.0), 255.0);
        let add = Formula::new(Combine::Add, (0.5, 10.0), (1.0, 3.0), (1.0, 4.0), u8s);
        // (15 − 10)·0.5 + (3 − 3) + 4 = 6.5 → 6; (1 − 10)·0.5 + 4 = −0.5 → 0.
        assert_eq!(add.one(15.0, 3.0), 6.0);
        assert_eq!(add.one(1.0, 3.0), 0.0);
        assert_eq!(add.with_b(3.0).one(15.0, 3.0), 6.0);
        assert_eq!(add.with_a(15.0).one(15.0, 3.0), 6.0);
    }

    /// Clamping before rounding in f32 gives what rounding half to even
    /// (through f64) then clamping gave: every ±0.5 tie around the byte
    /// ranges, random values within ±2²², and every pair of u8 inputs of
    /// random additions and products, per-element and broadcast.
    #[test]
    fn rounding_after_the_clamp_is_rounding_before_it() {
        use super::super::quant::round_even;
        for n in -600..600 {
            for x in [n as f32 / 2.0, n as f32 / 2.0 + 0.25, n as f32 * 0.3] {
                assert_eq!(small_round_even(x), round_even(x), "{x}");
            }
        }
        let mut seed = 0x2545_f491_u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        for _ in 0..100_000 {
            let x = (next() as i32 as f32) / 512.0; // within ±2²²
            assert_eq!(small_round_even(x), round_even(x), "{x}");
        }
        let old = |f: &Formula, xa: f32, xb: f32| {
            let v = match f.combine {
                Combine::Add => Float::mul_add(xa, f.ra, Float::mul_add(xb, f.rb, f.constant)),
                Combine::Mul => (xa - f.za) * (xb - f.zb) * f.ra + f.constant,
            };
            round_even(v).clamp(f.bounds.0, f.bounds.1)
        };
        for case in 0..24 {
            let scale = |r: u32| 1e-3 + (r % 1000) as f32 * 1.7e-4;
            let zero = |r: u32| (r % 256) as f32;
            let (sa, sb, sc) = (scale(next()), scale(next()), scale(next()) / 4.0);
            let (za, zb, zc) = (zero(next()), zero(next()), zero(next()));
            let combine = if case % 2 == 0 {
                Combine::Add
            } else {
                Combine::Mul
            };
            let bounds = if case % 4 < 2 {
                (0.0, 255.0)
            } else {
                (-128.0, 127.0)
            };
            let f = Formula::new(combine, (sa, za), (sb, zb), (sc, zc), bounds);
            for xa in 0..=255u8 {
                let g = f.with_a(xa.into());
                for xb in 0..=255u8 {
                    let (xa, xb) = (f32::from(xa), f32::from(xb));
                    assert_eq!(f.one(xa, xb), old(&f, xa, xb), "case {case}: {xa} {xb}");
                    assert_eq!(g.one(xa, xb), old(&g, xa, xb), "case {case}: {xa} {xb}");
                }
            }
        }
    }

    /// Every instruction set's rows give each element's scalar formula:
    /// rows of every length around the chunk of 16, b broadcast along the
    /// row or strided, and the output written over a (planned in place).
    #[test]
    fn vector_rows_give_the_scalar_formula() {
        use crate::kernels::qlinear::igemm::Isa;
        use alloc::vec::Vec;
        let mut seed = 0x1234_5678_u32;
        let mut byte = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 24) as u8
        };
        for combine in [Combine::Add, Combine::Mul] {
            for len in [1usize, 15, 16, 17, 40, 100] {
                let f = Formula::new(
                    combine,
                    (0.037, 131.0),
                    (0.0123, -7.0),
                    (0.05, 3.0),
                    (-128.0, 127.0),
                );
                let a: Vec<u8> = (0..2 * len).map(|_| byte()).collect();
                let b: Vec<i8> = (0..2 * len).map(|_| byte() as i8).collect();
                // Rows of `len`: b contiguous, broadcast (stride 0), strided.
                for b_stride in [1usize, 0, 2] {
                    let shape = [2, len];
                    let b_strides = [if b_stride == 2 { 1 } else { len * b_stride }, b_stride];
                    let walk = Walk::new(&shape, [&[len, 1], &[len, 1], &b_strides]).unwrap();
                    let want: Vec<i8> = (0..2 * len)
                        .map(|o| {
                            let (r, k) = (o / len, o % len);
                            let xb = f32::from(b[r * b_strides[0] + k * b_strides[1]]);
                            // A row along which b stays put adds b's term
                            // to the constant part first.
                            let g = if b_stride == 0 { f.with_b(xb) } else { f };
                            g.one(a[o].into(), xb) as i8
                        })
                        .collect();
                    for isa in Isa::all_available() {
                        let mut y = vec![0i8; 2 * len];
                        let cells = Cell::from_mut(y.as_mut_slice()).as_slice_of_cells();
                        typed_rows(
                            isa,
                            Share::whole(&walk),
                            a.as_slice(),
                            b.as_slice(),
                            cells,
                            &f,
                        );
                        assert_eq!(y, want, "{isa:?} {combine:?} {len} b stride {b_stride}");
                        // In place: the output's bytes are a's.
                        let mut inplace: Vec<u8> = a.clone();
                        let cells = Cell::from_mut(inplace.as_mut_slice()).as_slice_of_cells();
                        let y = crate::kernels::cells::typed::<i8>(cells, 0, 2 * len).unwrap();
                        typed_rows(isa, Share::whole(&walk), cells, b.as_slice(), y, &f);
                        let got: Vec<i8> = inplace.iter().map(|&v| v as i8).collect();
                        assert_eq!(got, want, "{isa:?} in place, {len}");
                    }
                }
            }
        }
    }

    /// The look-up (64 bytes at a time where the CPU has VBMI) gives each
    /// byte's entry: lengths around the chunk, and in place.
    #[test]
    fn look_up_gives_each_bytes_entry() {
        use alloc::vec::Vec;
        let mut seed = 0x9e37_79b9_u32;
        let mut byte = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 24) as u8
        };
        let mut table = [0u8; 256];
        table.iter_mut().for_each(|e| *e = byte());
        for len in [0usize, 1, 63, 64, 65, 130, 1000] {
            let x: Vec<u8> = (0..len).map(|_| byte()).collect();
            let want: Vec<u8> = x.iter().map(|&b| table[b as usize]).collect();
            let mut y = vec![0u8; len];
            let mut xs = x.clone();
            look_up(
                Cell::from_mut(xs.as_mut_slice()).as_slice_of_cells(),
                Cell::from_mut(y.as_mut_slice()).as_slice_of_cells(),
                &table,
            );
            assert_eq!(y, want, "{len}");
            let cells = Cell::from_mut(xs.as_mut_slice()).as_slice_of_cells();
            look_up(cells, cells, &table);
            assert_eq!(xs, want, "{len} in place");
        }
    }

    #[test]
    fn the_pool_takes_the_mean_of_the_dequantized_values() {
        // Values 10, 20, 30, 41 with zero point 10 and scale 0.5
        // dequantize to 0, 5, 10, 15.5, mean 7.625; at output scale 0.25
        // that is 30.5, which rounds half to even to 30, plus the output
        // zero point 1.
        let sum = (10 + 20 + 30 + 41) - 4 * 10;
        assert_eq!(pooled(sum, 4, 0.5, 0.25, 1.0, (0.0, 255.0)), 31.0);
    }
}

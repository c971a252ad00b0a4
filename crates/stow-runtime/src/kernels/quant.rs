//! Quantization to and from small integers: ONNX QuantizeLinear and
//! DequantizeLinear (per tensor or along one axis) and
//! DynamicQuantizeLinear.

use super::cells::Load;
use super::float::Float;
use super::qlinear::igemm::Isa;
use super::run::{Failure, Views};
use super::{Kernel, Operand};
use alloc::{format, string::String};
use half::f16;
use stow_bundle::DType;

/// The scale and zero point that map the tensor's range, widened to hold
/// 0, onto 0..=255. The extremes are taken in sixteen partial ones (which
/// vectorise): the same values in any order, NaN being skipped by `min`
/// and `max` and a zero's sign not reaching the scale or zero point.
#[inline(always)]
fn range_u8(src: impl Load<f32>) -> (f32, u8) {
    const W: usize = 16;
    let n = src.count();
    let (mut lo, mut hi) = ([0f32; W], [0f32; W]);
    let whole = n - n % W;
    for c in (0..whole).step_by(W) {
        let chunk = src.sub(c, W);
        for j in 0..W {
            lo[j] = lo[j].min(chunk.load(j));
            hi[j] = hi[j].max(chunk.load(j));
        }
    }
    let (mut lo, mut hi) = (
        lo.iter().fold(0f32, |a, &b| a.min(b)),
        hi.iter().fold(0f32, |a, &b| a.max(b)),
    );
    for i in whole..n {
        lo = lo.min(src.load(i));
        hi = hi.max(src.load(i));
    }
    params_u8(lo, hi)
}

/// The scale and zero point of [`range_u8`] from the extremes.
#[inline(always)]
fn params_u8(lo: f32, hi: f32) -> (f32, u8) {
    let scale = (hi - lo) / 255.0;
    // An all-zero tensor has scale 0: its zero point and values are 0
    // (NaN saturates to 0 in the casts).
    let zero = Float::round_ties_even(-lo / scale).clamp(0.0, 255.0) as u8;
    (scale, zero)
}

/// Divides rather than multiplying by the reciprocal: the two round some
/// values to different integers, and ONNX divides.
#[inline(always)]
fn quantize_u8(x: f32, scale: f32, zero: u8) -> u8 {
    (round_even(x / scale) as i32)
        .saturating_add(i32::from(zero))
        .clamp(0, 255) as u8
}

/// `round_ties_even(x)` up to the sign of a zero, without a call to
/// libm's `rintf` (the baseline x86-64 target has no SSE4.1 `roundss`),
/// and without a branch to one, which the compiler may speculate for
/// every lane of a vectorised loop: below 2²³ in magnitude, adding and
/// subtracting 1.5·2⁵² in f64 rounds to the nearest integer, ties to
/// even, as IEEE arithmetic rounds the sum, and the integer (at most 2²³)
/// is exact in f32; from 2²³ on every f32 is an integer already, and
/// infinities and NaN are their own rounding. A zero may come out +0
/// where `rintf` gives −0: every caller adds a zero point or converts to
/// an integer next, which treats both alike.
#[inline(always)]
pub(super) fn round_even(x: f32) -> f32 {
    const SHIFT: f64 = 6_755_399_441_055_744.0; // 1.5·2⁵²
    if x.abs() < 8_388_608.0 {
        ((f64::from(x) + SHIFT) - SHIFT) as f32
    } else {
        x
    }
}

/// ONNX DynamicQuantizeLinear: outputs the quantized tensor, its scale and
/// its zero point (rounding half to even, saturating). Share `run` of the
/// elements is quantized (every share takes the extremes of the whole
/// tensor, which is cheap beside the division); the first share writes
/// the scale and zero point. Shared out only where no output lies over
/// the input (`run::splits`).
pub(super) fn dynamic_u8(
    v: &Views<'_>,
    x: &Operand<'_>,
    outs: &[Operand<'_>],
    run: core::ops::Range<usize>,
) -> Result<(), Failure> {
    let src = v.src::<f32>(x)?;
    let dst = v.dst::<u8>(&outs[0])?;
    let share = dst.get(run.clone()).ok_or(Failure::View(outs[0].id))?;
    let (scale, zero) = crate::with_load!(src, |src| widest(|| {
        let all = src.sub(0, dst.len());
        let src = src.sub(run.start, share.len());
        #[cfg(target_arch = "x86_64")]
        if Isa::detect() == Isa::Vnni {
            // SAFETY: `Isa::Vnni` is only chosen where the CPU has AVX-512
            // F and BW; `all` holds `dst.len()` floats, `src` and `share`
            // the share's count.
            #[allow(unsafe_code)]
            unsafe {
                let (lo, hi) = x86::extremes(all.ptr(), dst.len());
                let (scale, zero) = params_u8(lo, hi);
                let out = share.as_ptr() as *mut i8;
                x86::quantize_bytes(src.ptr(), out, share.len(), scale, zero.into(), false, true);
                return (scale, zero);
            }
        }
        let (scale, zero) = range_u8(all);
        for (i, c) in share.iter().enumerate() {
            c.set(quantize_u8(src.load(i), scale, zero));
        }
        (scale, zero)
    }));
    if run.start == 0 {
        v.dst::<f32>(&outs[1])?[0].set(scale);
        v.dst::<u8>(&outs[2])?[0].set(zero);
    }
    Ok(())
}

/// Where each element finds its scale and zero point: parameter
/// `(i / inner) % n` (one parameter: `n = 1`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PerAxis {
    /// Parameters (the axis' dimension, or 1).
    pub n: usize,
    /// Elements after the axis.
    pub inner: usize,
}

impl PerAxis {
    #[inline(always)]
    fn at(self, i: usize) -> usize {
        (i / self.inner) % self.n
    }
}

/// A quantized integer type.
trait Quantized: bytemuck::Pod {
    const LO: f32;
    const HI: f32;
    /// Whether the type is a signed byte (`Some(true)`: i8) or an
    /// unsigned one (`Some(false)`: u8); `None` for wider types.
    const BYTE_SIGNED: Option<bool>;
    fn to_f32(self) -> f32;
    /// A value already rounded and clamped to the type's range.
    fn from_integral(v: f32) -> Self;
}

macro_rules! quantized {
    ($($t:ty),*) => {$(
        impl Quantized for $t {
            const LO: f32 = <$t>::MIN as f32;
            const HI: f32 = <$t>::MAX as f32;
            const BYTE_SIGNED: Option<bool> = match core::mem::size_of::<$t>() {
                1 => Some(<$t>::MIN != 0),
                _ => None,
            };
            #[inline(always)]
            fn to_f32(self) -> f32 {
                self as f32
            }
            #[inline(always)]
            fn from_integral(v: f32) -> Self {
                v as $t
            }
        }
    )*};
}
quantized!(u8, i8, u16, i16, i32);

/// `round_half_to_even(x / scale) + zero`, saturated: ONNX divides (see
/// `quantize_u8`).
#[inline(always)]
fn quantize_one<T: Quantized>(x: f32, scale: f32, zero: T) -> T {
    T::from_integral((round_even(x / scale) + zero.to_f32()).clamp(T::LO, T::HI))
}

fn quantize_typed<T: Quantized>(
    v: &Views<'_>,
    at: PerAxis,
    ins: &[Operand<'_>],
    out: &Operand<'_>,
) -> Result<(), Failure> {
    let (scale, zero) = (v.src::<f32>(&ins[1])?, v.src::<T>(&ins[2])?);
    let dst = v.dst::<T>(out)?;
    if at.n == 1 && ins[0].dtype == DType::F32 {
        // One scale for the tensor (a model's input image): a plain loop
        // over slices, compiled for the widest vectors the CPU has.
        let (s, z) = (scale.at(0), zero.at(0));
        let x = v.src::<f32>(&ins[0])?;
        #[cfg(target_arch = "x86_64")]
        if let Some(signed) = T::BYTE_SIGNED {
            if Isa::detect() == Isa::Vnni {
                crate::with_load!(x, |x| {
                    let x = x.sub(0, dst.len());
                    // SAFETY: `Isa::Vnni` is only chosen where the CPU has
                    // AVX-512 F and BW; `x` holds `dst.len()` floats and
                    // `dst` as many bytes (`T` is u8 or i8).
                    #[allow(unsafe_code)]
                    unsafe {
                        x86::quantize_bytes(
                            x.ptr(),
                            dst.as_ptr() as *mut i8,
                            dst.len(),
                            s,
                            z.to_f32(),
                            signed,
                            false,
                        )
                    }
                });
                return Ok(());
            }
        }
        crate::with_load!(x, |x| widest(|| {
            let x = x.sub(0, dst.len());
            for (i, c) in dst.iter().enumerate() {
                c.set(quantize_one(x.load(i), s, z));
            }
        }));
        return Ok(());
    }
    let put = |i: usize, x: f32| {
        let p = at.at(i);
        dst[i].set(quantize_one(x, scale.at(p), zero.at(p)));
    };
    match ins[0].dtype {
        DType::F16 => {
            let x = v.src::<f16>(&ins[0])?;
            (0..dst.len()).for_each(|i| put(i, x.at(i).to_f32()));
        }
        DType::I32 => {
            let x = v.src::<i32>(&ins[0])?;
            (0..dst.len()).for_each(|i| put(i, x.at(i) as f32));
        }
        _ => {
            let x = v.src::<f32>(&ins[0])?;
            (0..dst.len()).for_each(|i| put(i, x.at(i)));
        }
    }
    Ok(())
}

/// ONNX QuantizeLinear: inputs x, scale, zero point.
pub(super) fn quantize(
    v: &Views<'_>,
    at: PerAxis,
    ins: &[Operand<'_>],
    out: &Operand<'_>,
) -> Result<(), Failure> {
    match out.dtype {
        DType::I8 => quantize_typed::<i8>(v, at, ins, out),
        DType::U16 => quantize_typed::<u16>(v, at, ins, out),
        DType::I16 => quantize_typed::<i16>(v, at, ins, out),
        _ => quantize_typed::<u8>(v, at, ins, out),
    }
}

fn dequantize_typed<T: Quantized>(
    v: &Views<'_>,
    at: PerAxis,
    ins: &[Operand<'_>],
    out: &Operand<'_>,
) -> Result<(), Failure> {
    let (x, scale, zero) = (
        v.src::<T>(&ins[0])?,
        v.src::<f32>(&ins[1])?,
        v.src::<T>(&ins[2])?,
    );
    let dst = v.dst::<f32>(out)?;
    if at.n == 1 {
        // As in `quantize_typed`: one scale, a loop over slices.
        let (s, z) = (scale.at(0), zero.at(0).to_f32());
        crate::with_load!(x, |x| widest(|| {
            let x = x.sub(0, dst.len());
            for (i, c) in dst.iter().enumerate() {
                c.set((x.load(i).to_f32() - z) * s);
            }
        }));
        return Ok(());
    }
    for (i, c) in dst.iter().enumerate() {
        let p = at.at(i);
        c.set((x.at(i).to_f32() - zero.at(p).to_f32()) * scale.at(p));
    }
    Ok(())
}

/// Runs `f` compiled for AVX-512 or AVX2 where the CPU has them (it is
/// inlined into a function compiled for each), else as it is: the same
/// operations, never fused, so the same results.
#[inline(always)]
pub(super) fn widest<R>(f: impl FnOnce() -> R) -> R {
    match Isa::detect() {
        #[cfg(target_arch = "x86_64")]
        Isa::Vnni => {
            // SAFETY: `Isa::Vnni` is only chosen where the CPU has
            // AVX-512 F and BW (`Isa::detect`).
            #[allow(unsafe_code)]
            unsafe {
                x86::avx512(f)
            }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: `Isa::Avx2` is only chosen where the CPU has AVX2.
            #[allow(unsafe_code)]
            unsafe {
                x86::avx2(f)
            }
        }
        _ => f(),
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    /// The least and the greatest of `n` floats at `x` and 0, NaN
    /// skipped, as [`super::range_u8`] takes them: `vminps`/`vmaxps`
    /// give their second operand, the running extreme, for a NaN and for
    /// equal values, so a NaN never enters and a zero's sign never
    /// changes one (both start at +0). The closure of `range_u8` was
    /// compiled for SSE (closures are not inlined into the AVX-512 copy):
    /// four lanes, eight instructions for each.
    ///
    /// # Safety
    /// The CPU has AVX-512 F; `x` holds `n` floats.
    #[target_feature(enable = "avx512f")]
    #[allow(unsafe_code)]
    pub(super) unsafe fn extremes(x: *const f32, n: usize) -> (f32, f32) {
        let mut lo = [_mm512_setzero_ps(); 4];
        let mut hi = [_mm512_setzero_ps(); 4];
        let mut i = 0;
        while i + 64 <= n {
            for a in 0..4 {
                // SAFETY: floats `i..i + 64` are inside `x`.
                let v = unsafe { _mm512_loadu_ps(x.add(i + 16 * a)) };
                lo[a] = _mm512_min_ps(v, lo[a]);
                hi[a] = _mm512_max_ps(v, hi[a]);
            }
            i += 64;
        }
        while i < n {
            let lanes = (n - i).min(16);
            let mask: __mmask16 = if lanes == 16 { !0 } else { (1 << lanes) - 1 };
            // SAFETY: the masked lanes are inside `x`; the others read as
            // +0, which changes neither extreme.
            let v = unsafe { _mm512_maskz_loadu_ps(mask, x.add(i)) };
            lo[0] = _mm512_min_ps(v, lo[0]);
            hi[0] = _mm512_max_ps(v, hi[0]);
            i += 16;
        }
        let (mut l, mut h) = ([0f32; 16], [0f32; 16]);
        for a in 0..4 {
            // SAFETY: 16 floats each.
            unsafe {
                _mm512_storeu_ps(
                    l.as_mut_ptr(),
                    _mm512_min_ps(lo[a], _mm512_loadu_ps(l.as_ptr())),
                );
                _mm512_storeu_ps(
                    h.as_mut_ptr(),
                    _mm512_max_ps(hi[a], _mm512_loadu_ps(h.as_ptr())),
                );
            }
        }
        let lo = l.iter().fold(0f32, |a, &b| if b < a { b } else { a });
        let hi = h.iter().fold(0f32, |a, &b| if b > a { b } else { a });
        (lo, hi)
    }

    /// [`super::quantize_one`] of `n` floats from `x` into the bytes at
    /// `out` (i8 where `signed`, else u8), sixteen at a time: the same
    /// division, rounding to nearest even (`vrndscaleps`), addition and
    /// clamp, and NaN to 0 as the scalar `as` cast gives it (or, with
    /// `nan_at_zero_point`, to the zero point, as [`super::quantize_u8`]
    /// gives it: its integer cast comes before the addition). The scalar
    /// loop, which the compiler did not vectorise, converted each lane by
    /// itself (2 ns an element).
    ///
    /// # Safety
    /// The CPU has AVX-512 F and BW; `x` holds `n` floats, `out` `n`
    /// bytes; an output byte may overlap only input floats at or before
    /// its own index (each block is read before it is written).
    #[target_feature(enable = "avx512f,avx512bw")]
    #[allow(unsafe_code)]
    pub(super) unsafe fn quantize_bytes(
        x: *const f32,
        out: *mut i8,
        n: usize,
        scale: f32,
        zero: f32,
        signed: bool,
        nan_at_zero_point: bool,
    ) {
        let (lo, hi) = if signed {
            (-128.0, 127.0)
        } else {
            (0.0, 255.0)
        };
        let (s, z) = (_mm512_set1_ps(scale), _mm512_set1_ps(zero));
        let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
        let mut i = 0;
        while i < n {
            let lanes = (n - i).min(16);
            let mask: __mmask16 = if lanes == 16 { !0 } else { (1 << lanes) - 1 };
            // SAFETY: the masked lanes are inside `x` and `out`.
            #[allow(unsafe_code)]
            let v = unsafe { _mm512_maskz_loadu_ps(mask, x.add(i)) };
            let q = _mm512_div_ps(v, s);
            let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(q);
            let r = if nan_at_zero_point {
                _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(r, r), r)
            } else {
                r
            };
            let y = _mm512_add_ps(r, z);
            // A NaN is the second operand of both, so it stays NaN, as
            // `f32::clamp` keeps it; converted, it is 0x8000_0000, whose
            // low byte is the 0 of the scalar `as` cast.
            let y = _mm512_min_ps(hi, _mm512_max_ps(lo, y));
            let k = _mm512_cvttps_epi32(y);
            // SAFETY: as above.
            #[allow(unsafe_code)]
            unsafe {
                _mm512_mask_cvtepi32_storeu_epi8(out.add(i), mask, k)
            };
            i += 16;
        }
    }

    /// `f` compiled for AVX-512 F and BW, which the caller guarantees.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn avx512<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    /// `f` compiled for AVX2, which the caller guarantees.
    #[target_feature(enable = "avx2")]
    pub(super) fn avx2<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
}

/// ONNX DequantizeLinear: inputs x, scale, zero point; f32 out.
pub(super) fn dequantize(
    v: &Views<'_>,
    at: PerAxis,
    ins: &[Operand<'_>],
    out: &Operand<'_>,
) -> Result<(), Failure> {
    match ins[0].dtype {
        DType::I8 => dequantize_typed::<i8>(v, at, ins, out),
        DType::U16 => dequantize_typed::<u16>(v, at, ins, out),
        DType::I16 => dequantize_typed::<i16>(v, at, ins, out),
        DType::I32 => dequantize_typed::<i32>(v, at, ins, out),
        _ => dequantize_typed::<u8>(v, at, ins, out),
    }
}

/// Prepares QuantizeLinear (`quantize`) or DequantizeLinear: inputs x,
/// scale (f32), zero point (the integer type), parameters along `axis`
/// (−1: one for the tensor).
pub(super) fn prepare_linear(
    quantize: bool,
    axis: i64,
    ins: &[Operand<'_>],
    outs: &[Operand<'_>],
) -> Result<(Kernel, usize), String> {
    let name = if quantize {
        "QuantizeLinear"
    } else {
        "DequantizeLinear"
    };
    if ins.len() != 3 || outs.len() != 1 {
        return Err(format!(
            "{name} takes x, scale and zero point and makes 1 output"
        ));
    }
    let (x, scale, zero, y) = (&ins[0], &ins[1], &ins[2], &outs[0]);
    let int = if quantize { y.dtype } else { x.dtype };
    let ints = [DType::U8, DType::I8, DType::U16, DType::I16];
    let types_ok = if quantize {
        matches!(x.dtype, DType::F32 | DType::F16 | DType::I32) && ints.contains(&int)
    } else {
        y.dtype == DType::F32 && (ints.contains(&int) || int == DType::I32)
    };
    if !types_ok || scale.dtype != DType::F32 || zero.dtype != int {
        return Err(format!(
            "{name} of {} into {} (scale {}, zero point {}): this kernel maps f32, f16 or i32 to u8, i8, u16 or i16 and back to f32, with an f32 scale",
            x.dtype.name(),
            y.dtype.name(),
            scale.dtype.name(),
            zero.dtype.name()
        ));
    }
    if x.shape != y.shape {
        return Err(format!(
            "{name} changes the shape {:?} to {:?}",
            x.shape, y.shape
        ));
    }
    let at = if axis < 0 {
        PerAxis { n: 1, inner: 1 }
    } else {
        let a = usize::try_from(axis)
            .ok()
            .filter(|&a| a < x.shape.len())
            .ok_or_else(|| format!("{name} along axis {axis} of shape {:?}", x.shape))?;
        PerAxis {
            n: x.shape[a].max(1),
            inner: x.shape[a + 1..].iter().product::<usize>().max(1),
        }
    };
    if scale.len != at.n || zero.len != at.n {
        return Err(format!(
            "{name}: {} scales and {} zero points for {} along axis {axis}",
            scale.len, zero.len, at.n
        ));
    }
    let kernel = if quantize {
        Kernel::Quantize(at)
    } else {
        Kernel::Dequantize(at)
    };
    Ok((kernel, 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// The ONNX operator documentation's examples.
    #[test]
    fn matches_the_documented_examples() {
        let cases: [(&[f32], f32, u8, &[u8]); 3] = [
            (
                &[0., 2., -3., -2.5, 1.34, 0.5],
                0.019_607_844,
                153,
                &[153, 255, 0, 26, 221, 179],
            ),
            (
                &[-1., -2.1, -1.3, -2.5, -3.34, -4.],
                0.015_686_275,
                255,
                &[191, 121, 172, 96, 42, 0],
            ),
            (&[0., 0., 0.], 0.0, 0, &[0, 0, 0]),
        ];
        for (x, scale, zero, want) in cases {
            let (s, z) = range_u8(x);
            assert!((s - scale).abs() < 1e-8, "{s} != {scale}");
            assert_eq!(z, zero);
            let got: Vec<u8> = x.iter().map(|&e| quantize_u8(e, s, z)).collect();
            assert_eq!(got, want);
        }
    }

    /// The range taken sixteen lanes at a time is the sequential one, at
    /// every length around the chunk, with NaN and both zeros about.
    #[test]
    fn the_range_in_chunks_is_the_sequential_range() {
        let mut seed = 0x9e37_79b9_u32;
        for n in [0usize, 1, 15, 16, 17, 33, 100, 1000] {
            let x: Vec<f32> = (0..n)
                .map(|i| {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    match i % 29 {
                        7 => f32::NAN,
                        11 => -0.0,
                        _ => (seed >> 8) as f32 / 65_536.0 - 128.0,
                    }
                })
                .collect();
            let (lo, hi) = x
                .iter()
                .fold((0f32, 0f32), |(lo, hi), &e| (lo.min(e), hi.max(e)));
            let scale = (hi - lo) / 255.0;
            let zero = Float::round_ties_even(-lo / scale).clamp(0.0, 255.0) as u8;
            let (s, z) = range_u8(x.as_slice());
            assert_eq!((s.to_bits(), z), (scale.to_bits(), zero), "{n}");
        }
    }

    /// The rounding without libm gives `rintf`'s integer for halves and
    /// near-halves of every size, around 2²³ where the shortcut stops and
    /// 2²² and 2²⁴, random bit patterns, ±0, infinities and NaN; and the
    /// quantizers built on it give the bytes of the `rintf` formula.
    /// Halves and near-halves of every size, values around 2²², 2²³ and
    /// 2²⁴, random bit patterns, ±0, infinities and NaN.
    fn awkward_floats() -> Vec<f32> {
        let mut values = alloc::vec![0.0f32, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN];
        for i in -3000..3000 {
            let h = i as f32 / 2.0;
            values.extend([h, h.next_up(), h.next_down()]);
        }
        for e in [4_194_304.0f32, 8_388_608.0, 16_777_216.0] {
            let mut x = e;
            for _ in 0..20 {
                values.extend([x, -x]);
                x = x.next_down();
            }
            let mut x = e;
            for _ in 0..20 {
                values.extend([x, -x]);
                x = x.next_up();
            }
        }
        let mut s = 0x1234_5678_9abc_def0u64;
        for _ in 0..200_000 {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            values.push(f32::from_bits(
                (s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32,
            ));
        }
        values
    }

    /// The rounding without libm gives `rintf`'s integer for every
    /// [`awkward_floats`] value; and the quantizers built on it give the
    /// bytes of the `rintf` formula.
    #[test]
    fn rounding_without_libm_matches_rintf() {
        for x in awkward_floats() {
            let (got, want) = (round_even(x), Float::round_ties_even(x));
            assert!(
                got == want || got.is_nan() && want.is_nan(),
                "{x}: {got} != {want}"
            );
            for (scale, zero) in [(1.0f32, 0u8), (0.5, 128), (0.017, 255), (3e-3, 7)] {
                let rint = |x: f32| {
                    (Float::round_ties_even(x / scale) as i32)
                        .saturating_add(i32::from(zero))
                        .clamp(0, 255) as u8
                };
                assert_eq!(quantize_u8(x, scale, zero), rint(x));
                let rint_i8 = |x: f32| {
                    (Float::round_ties_even(x / scale) + f32::from(zero as i8)).clamp(-128.0, 127.0)
                        as i8
                };
                assert_eq!(quantize_one(x, scale, zero as i8), rint_i8(x));
            }
        }
    }

    /// The AVX-512 byte quantizer gives the scalar quantizer's bytes for
    /// every [`awkward_floats`] value, u8 and i8, at lengths that leave
    /// every tail of a sixteen-lane block.
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    #[test]
    fn vector_bytes_equal_the_scalar_quantizer() {
        if Isa::detect() != Isa::Vnni {
            return;
        }
        let values = awkward_floats();
        for (scale, zero) in [(1.0f32, 0u8), (0.5, 128), (0.017, 255), (3e-3, 7)] {
            for n in [values.len(), values.len() - 1, 17, 15, 1] {
                let x = &values[values.len() - n..];
                let mut got = alloc::vec![0i8; n];
                // SAFETY: the test returned above on CPUs without
                // AVX-512 F and BW; `x` and `got` hold `n` elements.
                #[allow(unsafe_code)]
                unsafe {
                    x86::quantize_bytes(
                        x.as_ptr(),
                        got.as_mut_ptr(),
                        n,
                        scale,
                        zero.into(),
                        false,
                        false,
                    )
                };
                let want: Vec<u8> = x.iter().map(|&v| quantize_one(v, scale, zero)).collect();
                assert_eq!(
                    bytemuck::cast_slice::<i8, u8>(&got),
                    &want[..],
                    "u8, {n}, {scale}"
                );
                let z = zero as i8;
                #[allow(unsafe_code)]
                unsafe {
                    x86::quantize_bytes(
                        x.as_ptr(),
                        got.as_mut_ptr(),
                        n,
                        scale,
                        z.into(),
                        true,
                        false,
                    )
                };
                let want: Vec<i8> = x.iter().map(|&v| quantize_one(v, scale, z)).collect();
                assert_eq!(got, want, "i8, {n}, {scale}");
                // DynamicQuantizeLinear's: NaN at the zero point.
                #[allow(unsafe_code)]
                unsafe {
                    x86::quantize_bytes(
                        x.as_ptr(),
                        got.as_mut_ptr(),
                        n,
                        scale,
                        zero.into(),
                        false,
                        true,
                    )
                };
                let want: Vec<u8> = x.iter().map(|&v| quantize_u8(v, scale, zero)).collect();
                assert_eq!(
                    bytemuck::cast_slice::<i8, u8>(&got),
                    &want[..],
                    "dynamic u8, {n}, {scale}"
                );
            }
        }
    }

    /// The AVX-512 extremes are the scalar range's, with 0 and NaN
    /// skipped: windows of [`awkward_floats`] (NaN, infinities, signed
    /// zeros, values of one sign) of every length up to 150 at assorted
    /// starts, and the whole list; an all-zero or all-NaN tensor gives
    /// +0 both ways.
    #[cfg(all(target_arch = "x86_64", feature = "std"))]
    #[test]
    fn vector_extremes_equal_the_scalar_range() {
        if Isa::detect() != Isa::Vnni {
            return;
        }
        let values = awkward_floats();
        let positive: Vec<f32> = values.iter().map(|v| v.abs()).collect();
        let check = |x: &[f32]| {
            let numbers = x.iter().filter(|v| !v.is_nan());
            let lo = numbers
                .clone()
                .fold(0f32, |a, &b| if b < a { b } else { a });
            let hi = numbers.fold(0f32, |a, &b| if b > a { b } else { a });
            // SAFETY: the test returned above on CPUs without AVX-512 F;
            // `x` holds its length of floats.
            #[allow(unsafe_code)]
            let got = unsafe { x86::extremes(x.as_ptr(), x.len()) };
            assert!(
                got.0 == lo && got.1 == hi,
                "{got:?} for {lo} {hi}, {} values",
                x.len()
            );
            if lo == 0.0 && hi == 0.0 {
                assert_eq!((got.0.to_bits(), got.1.to_bits()), (0, 0));
            }
            assert_eq!(params_u8(got.0, got.1), range_u8(x), "{} values", x.len());
        };
        for n in 0..150 {
            for start in [0, 3, 6000, 17_000, 30_000] {
                check(&values[start..start + n]);
                check(&positive[start..start + n]);
            }
        }
        check(&values);
        check(&[0.0, -0.0, f32::NAN, -0.0]);
        check(&[f32::NAN; 70]);
    }

    #[test]
    fn quantizing_divides_rounds_half_to_even_and_saturates() {
        assert_eq!(quantize_one(2.5f32, 1.0, 0u8), 2);
        assert_eq!(quantize_one(3.5f32, 1.0, 0u8), 4);
        assert_eq!(quantize_one(-0.5f32, 1.0, 3i8), 3);
        assert_eq!(quantize_one(1e9f32, 0.5, 0i16), i16::MAX);
        assert_eq!(quantize_one(-1e9f32, 0.5, 7u16), 0);
        // Division, not the reciprocal: search values where the two
        // disagree and check each lands where the division does.
        let s = 0.1f32;
        let mut seen = 0;
        for i in 0..200_000 {
            let x = i as f32 * 0.0137;
            let (div, rec) = ((x / s).round_ties_even(), (x * s.recip()).round_ties_even());
            if div != rec && div <= 65535.0 {
                assert_eq!(quantize_one(x, s, 0u16), div as u16);
                seen += 1;
            }
        }
        assert!(seen > 0, "no value where the two roundings differ");
    }

    #[test]
    fn parameters_follow_their_axis() {
        let at = PerAxis { n: 3, inner: 2 };
        let got: Vec<usize> = (0..12).map(|i| at.at(i)).collect();
        assert_eq!(got, [0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]);
    }
}

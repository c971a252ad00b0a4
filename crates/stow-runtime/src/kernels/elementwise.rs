//! Element-wise kernels: unary maps, binary ops with broadcasting, select
//! and casts. Each reads element `i` of its operands before it writes
//! element `i` of its output, so it runs unchanged when the plan put the
//! output over an input (in place).

use super::cells::{map_row, zip_row, Load, Src};
use super::float::Float;
use super::layout::{Share, Walk};
use core::cell::Cell;

/// A unary function of floats (f32, f64; f16 through f32).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unary {
    /// |x|
    Abs,
    /// e^x
    Exp,
    /// ln x
    Ln,
    /// √x
    Sqrt,
    /// 1/√x
    Rsqrt,
    /// 1/x
    Recip,
    /// −x
    Neg,
    /// 1/(1+e^−x)
    Sigmoid,
    /// tanh x
    Tanh,
    /// erf x (Abramowitz and Stegun 7.1.28, as tract computes it)
    Erf,
    /// x·Φ(x) with the exact normal CDF
    GeluExact,
    /// x·sigmoid(x)
    Silu,
    /// ln(1+e^x), as max(x,0) + ln(1+e^−|x|) so that it never overflows
    Softplus,
    /// x·relu6(x+3)/6
    HardSwish,
    /// sin x
    Sin,
    /// cos x
    Cos,
    /// ⌊x⌋
    Floor,
    /// ⌈x⌉
    Ceil,
    /// round half away from zero
    Round,
    /// round half to even
    RoundHalfToEven,
    /// sign
    Sign,
    /// x²
    Square,
    /// tan x
    Tan,
    /// asin x
    Asin,
    /// acos x
    Acos,
    /// atan x
    Atan,
    /// sinh x
    Sinh,
    /// cosh x
    Cosh,
    /// asinh x
    Asinh,
    /// acosh x
    Acosh,
    /// atanh x
    Atanh,
    /// Gelu with the tanh approximation, ½x(1 + tanh(√(2/π)(x + 0.044715x³)))
    GeluTanh,
}

impl Unary {
    /// The function tract calls `name`.
    pub fn from_name(name: &str) -> Option<Unary> {
        use Unary::*;
        Some(match name {
            "Abs" => Abs,
            "Exp" => Exp,
            "Ln" => Ln,
            "Sqrt" => Sqrt,
            "Rsqrt" => Rsqrt,
            "Recip" => Recip,
            "Neg" => Neg,
            "Sigmoid" => Sigmoid,
            "Tanh" => Tanh,
            "Erf" => Erf,
            "GeluExact" => GeluExact,
            "Silu" => Silu,
            "Softplus" => Softplus,
            "HardSwish" => HardSwish,
            "Sin" => Sin,
            "Cos" => Cos,
            "Floor" => Floor,
            "Ceil" => Ceil,
            "Round" => Round,
            "RoundHalfToEven" => RoundHalfToEven,
            "Sign" => Sign,
            "Square" => Square,
            "Tan" => Tan,
            "Asin" => Asin,
            "Acos" => Acos,
            "Atan" => Atan,
            "Sinh" => Sinh,
            "Cosh" => Cosh,
            "Asinh" => Asinh,
            "Acosh" => Acosh,
            "Atanh" => Atanh,
            _ => return None,
        })
    }

    /// The function at one point, in `F` (f32 or f64).
    #[inline(always)]
    pub fn apply<F: Float>(self, x: F) -> F {
        use Unary::*;
        let of = F::of;
        match self {
            Abs => x.abs(),
            Exp => x.exp(),
            Ln => x.ln(),
            Sqrt => x.sqrt(),
            Rsqrt => F::ONE / x.sqrt(),
            Recip => F::ONE / x,
            Neg => -x,
            Sigmoid => F::ONE / (F::ONE + (-x).exp()),
            Tanh => x.tanh(),
            Erf => x.erf(),
            GeluExact => of(0.5) * x * (F::ONE + (x * F::FRAC_1_SQRT_2).erf()),
            Silu => x / (F::ONE + (-x).exp()),
            Softplus => x.max(F::ZERO) + (-x.abs()).exp().ln_1p(),
            HardSwish => x * (x + of(3.0)).clamp(F::ZERO, of(6.0)) / of(6.0),
            Sin => x.sin(),
            Cos => x.cos(),
            Floor => x.floor(),
            Ceil => x.ceil(),
            Round => x.round(),
            RoundHalfToEven => x.round_ties_even(),
            Sign => {
                if x == F::ZERO || x.is_nan() {
                    x
                } else {
                    x.signum()
                }
            }
            Square => x * x,
            Tan => x.tan(),
            Asin => x.asin(),
            Acos => x.acos(),
            Atan => x.atan(),
            Sinh => x.sinh(),
            Cosh => x.cosh(),
            Asinh => x.asinh(),
            Acosh => x.acosh(),
            Atanh => x.atanh(),
            GeluTanh => {
                let k = (of(2.0) / F::PI).sqrt();
                of(0.5) * x * (F::ONE + (k * (x + of(0.044715) * x * x * x)).tanh())
            }
        }
    }
}

/// erf: near zero (|x| < 0.5) its Taylor series to x¹³, accurate relative
/// to the result; elsewhere Abramowitz and Stegun 7.1.28 (absolute error
/// below 3e-7 in exact arithmetic, 1e-6 in f32), whose error relative to a small result would be large
/// (found by `tools/fuzz_graphs.py`). Both are branch-free polynomials and
/// the choice a select, so the loop still vectorises.
#[inline(always)]
pub(super) fn erf(x: f32) -> f32 {
    // 2/√π · (−1)ⁿ / (n! (2n+1)).
    const SERIES: [f32; 7] = [
        core::f32::consts::FRAC_2_SQRT_PI,
        -0.376_126_4,
        0.112_837_92,
        -0.026_866_17,
        0.005_223_977_6,
        -0.000_854_832_7,
        0.000_120_553_33,
    ];
    let z = x * x;
    let near_zero = x * SERIES.iter().rev().fold(0.0, |acc, c| acc * z + c);
    if x.abs() < 0.5 {
        near_zero
    } else {
        erf_far(x)
    }
}

#[inline(always)]
fn erf_far(x: f32) -> f32 {
    const A: [f32; 6] = [
        0.070_523_08,
        0.042_282_01,
        0.009_270_527,
        0.000_152_014_3,
        0.000_276_567_2,
        0.000_043_063_8,
    ];
    let t = x.abs();
    let poly = A.iter().rev().fold(0.0, |acc, a| (acc + a) * t);
    let y = 1.0 - (1.0 + poly).powi(16).recip();
    y.copysign(x)
}

/// `f` of f16 elements, computed in f32 and rounded once to f16.
pub fn unary_f16(f: Unary, src: Src<'_, half::f16>, out: &[Cell<half::f16>]) {
    convert(src, out, |x| half::f16::from_f32(f.apply(x.to_f32())));
}

/// `out[i] = f(src[i])` over equal-length operands of f32 or f64.
pub fn unary<F: Float>(f: Unary, src: Src<'_, F>, out: &[Cell<F>]) {
    fn go<F: Float>(f: Unary, src: impl Load<F>, out: &[Cell<F>]) {
        let n = out.len().min(src.count());
        let (out, src) = (&out[..n], src.sub(0, n));
        // One loop per function, so each one vectorises on its own.
        macro_rules! each {
            ($($name:ident),*) => {
                match f {
                    $(Unary::$name => map_row(out, src, |x| Unary::$name.apply(x)),)*
                }
            };
        }
        each!(
            Abs,
            Exp,
            Ln,
            Sqrt,
            Rsqrt,
            Recip,
            Neg,
            Sigmoid,
            Tanh,
            Erf,
            GeluExact,
            Silu,
            Softplus,
            HardSwish,
            Sin,
            Cos,
            Floor,
            Ceil,
            Round,
            RoundHalfToEven,
            Sign,
            Square,
            Tan,
            Asin,
            Acos,
            Atan,
            Sinh,
            Cosh,
            Asinh,
            Acosh,
            Atanh,
            GeluTanh
        )
    }
    crate::with_load!(src, |s| go(f, s, out))
}

/// `out[i] = f(src[i])` over f32 operands: [`unary`], except that the
/// logistic functions (Sigmoid, Silu) go through [`logistic_row`], whose
/// exponential vectorises where libm's `expf` is one call per element
/// (efficientnet_b0's Silu steps took 46 % of its run that way).
pub fn unary_f32(f: Unary, src: Src<'_, f32>, out: &[Cell<f32>]) {
    match f {
        Unary::Sigmoid => crate::with_load!(src, |s| logistic_rows::<false>(s, out)),
        Unary::Silu => crate::with_load!(src, |s| logistic_rows::<true>(s, out)),
        Unary::GeluExact => crate::with_load!(src, |s| widest_rows(s, out, |x| {
            Unary::GeluExact.apply(x)
        })),
        Unary::Erf => crate::with_load!(src, |s| widest_rows(s, out, erf)),
        _ => unary::<f32>(f, src, out),
    }
}

/// `out[i]` = `c` where `src[i]` is NaN, else `src[i]` (its bits): an
/// `IsNan` and the `Iff` that reads it merged at setup.
pub fn nan_to(c: f32, src: Src<'_, f32>, out: &[Cell<f32>]) {
    crate::with_load!(src, |s| widest_rows(s, out, move |x: f32| if x.is_nan() {
        c
    } else {
        x
    }))
}

/// `out[i] = f(src[i])` for a function of plain arithmetic and selects
/// (no libm call), compiled for the widest vectors the CPU has. Without
/// fast-math nothing is fused or reordered, so every copy gives the same
/// bits; the baseline build's four SSE lanes made bert_base's exact Gelu
/// 1.5 ns an element.
fn widest_rows(src: impl Load<f32>, out: &[Cell<f32>], f: impl Fn(f32) -> f32 + Copy) {
    #[cfg(target_arch = "x86_64")]
    match super::gemm::Isa::detect() {
        // SAFETY: each copy only needs the CPU to have the features
        // `Isa::detect` found at run time.
        #[allow(unsafe_code)]
        super::gemm::Isa::Avx512 => return unsafe { rows_avx512(src, out, f) },
        #[allow(unsafe_code)]
        super::gemm::Isa::Fma => return unsafe { rows_avx2(src, out, f) },
        super::gemm::Isa::Portable => {}
    }
    map_chunks(src, out, f)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn rows_avx512(src: impl Load<f32>, out: &[Cell<f32>], f: impl Fn(f32) -> f32 + Copy) {
    map_chunks(src, out, f)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn rows_avx2(src: impl Load<f32>, out: &[Cell<f32>], f: impl Fn(f32) -> f32 + Copy) {
    map_chunks(src, out, f)
}

/// `out[i] = f(src[i])` in chunks of sixteen, each read whole before it
/// is written (`out` may be `src`), in plain loops that inline into the
/// copies compiled for wider vectors (not `array::from_fn`: that is a
/// function of its own, which was not inlined into the AVX2 copy).
#[inline(always)]
fn map_chunks(src: impl Load<f32>, out: &[Cell<f32>], f: impl Fn(f32) -> f32) {
    const CHUNK: usize = 16;
    let n = out.len().min(src.count());
    let mut j = 0;
    while j + CHUNK <= n {
        let (o, s) = (&out[j..j + CHUNK], src.sub(j, CHUNK));
        let mut v = [0f32; CHUNK];
        for (i, v) in v.iter_mut().enumerate() {
            *v = s.load(i);
        }
        for v in v.iter_mut() {
            *v = f(*v);
        }
        for (o, v) in o.iter().zip(v) {
            o.set(v);
        }
        j += CHUNK;
    }
    for k in j..n {
        out[k].set(f(src.load(k)));
    }
}

/// Dispatches [`logistic_row`] to a copy compiled for AVX-512 or for AVX2
/// and FMA where the CPU has them (16 or 8 lanes instead of SSE's 4; the
/// same operations, so the same bits).
pub(crate) fn logistic_rows<const SILU: bool>(src: impl Load<f32>, out: &[Cell<f32>]) {
    #[cfg(target_arch = "x86_64")]
    if super::gemm::Isa::detect() == super::gemm::Isa::Avx512 {
        // SAFETY: the function only needs AVX-512 F, AVX2 and FMA, which
        // `Isa::detect` checked at run time.
        #[allow(unsafe_code)]
        return unsafe { logistic_row_avx512::<SILU>(src, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if super::gemm::fma_available() {
        // SAFETY: the function only needs the CPU to have AVX2 and FMA,
        // which `fma_available` checked at run time.
        #[allow(unsafe_code)]
        return unsafe { logistic_row_avx2::<SILU>(src, out) };
    }
    logistic_row::<SILU>(src, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn logistic_row_avx2<const SILU: bool>(src: impl Load<f32>, out: &[Cell<f32>]) {
    logistic_row::<SILU>(src, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn logistic_row_avx512<const SILU: bool>(src: impl Load<f32>, out: &[Cell<f32>]) {
    logistic_row::<SILU>(src, out)
}

/// `out[i] = sigmoid(src[i])`, or `src[i]·sigmoid(src[i])` with `SILU`,
/// through [`exp_neg_abs`]: within a few ulps of the libm formula, and
/// every step a plain arithmetic operation or select, so each chunk of
/// [`map_chunks`] vectorises.
#[inline(always)]
pub fn logistic_row<const SILU: bool>(src: impl Load<f32>, out: &[Cell<f32>]) {
    map_chunks(src, out, logistic::<SILU>)
}

/// sigmoid(x), or x·sigmoid(x) with `SILU`.
#[inline(always)]
pub(crate) fn logistic<const SILU: bool>(x: f32) -> f32 {
    // e = e^−|x| lies in [0, 1]: 1/(1+e) never overflows, and the
    // negative half is e/(1+e), not 1 − 1/(1+e), which would cancel. One
    // division of the chosen numerator: no reciprocal rounded first, and
    // no multiply after it.
    let e = exp_neg_abs(x);
    let numerator = if x >= 0.0 { 1.0 } else { e };
    let sigmoid = numerator / (1.0 + e);
    if SILU {
        x * sigmoid
    } else {
        sigmoid
    }
}

/// a·b + c rounded once. Fused everywhere, so that every instruction set
/// gives the same bits: the AVX2, AVX-512 and ARM copies compile it to
/// one instruction, and a CPU without FMA gets the exact software
/// `fmaf` (slower, never different).
#[inline(always)]
fn fused(a: f32, b: f32, c: f32) -> f32 {
    Float::mul_add(a, b, c)
}

/// e^−|x| (NaN for NaN) without a libm call: Cody and Waite's reduction
/// by ln 2 and Cephes' degree-5 polynomial of `expf` (relative error about
/// 1e-7), the power of two put into the exponent bits. Below e^−87 it is
/// 0 (the true value is at most 1.6e-38). Its steps are fused
/// multiply-adds: about half the instructions of separate multiplies
/// and adds, which bounded the logistic functions' speed (a third of
/// efficientnet_b0's activations).
#[inline(always)]
pub fn exp_neg_abs(x: f32) -> f32 {
    const LIMIT: f32 = -87.0;
    // 1.5·2²³: adding it rounds a float below 2²² to an integer, which
    // then sits in the low mantissa bits.
    const ROUNDER: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let a = -x.abs();
    // A comparison, not `max`, so that NaN stays NaN.
    let clamped = if a < LIMIT { LIMIT } else { a };
    let t = fused(clamped, core::f32::consts::LOG2_E, ROUNDER);
    let n = t - ROUNDER;
    let r = fused(n, -LN2_LO, fused(n, -LN2_HI, clamped));
    let p = 1.987_569_2e-4;
    let p = fused(p, r, 1.398_199_9e-3);
    let p = fused(p, r, 8.333_452e-3);
    let p = fused(p, r, 4.166_579_6e-2);
    let p = fused(p, r, 1.666_666_5e-1);
    // Cephes gives 5.0000001201e-1, which is 0.5 in f32.
    let p = fused(p, r, 0.5);
    let y = fused(p * r, r, r) + 1.0;
    // n is an integer in [−126, 0]: 2ⁿ is the float with exponent n.
    let power = t
        .to_bits()
        .wrapping_sub(ROUNDER.to_bits())
        .wrapping_add(127)
        << 23;
    let e = y * f32::from_bits(power);
    if a < LIMIT {
        0.0
    } else {
        e
    }
}

/// `out = f(a, b)` with the operands read through `walk` (operand order:
/// output, a, b), over the elements of the walk's share.
pub fn binary<T: Copy, U: Copy>(
    walk: Share<'_, 3>,
    a: Src<'_, T>,
    b: Src<'_, T>,
    out: &[Cell<U>],
    f: impl Fn(T, T) -> U + Copy,
) {
    #[inline(always)]
    fn go<T: Copy, U: Copy>(
        walk: Share<'_, 3>,
        a: impl Load<T>,
        b: impl Load<T>,
        out: &[Cell<U>],
        f: impl Fn(T, T) -> U,
    ) {
        let (_, [so, sa, sb]) = walk.walk.inner();
        walk.rows([0, 0, 0], |[o, ia, ib], len| {
            if so == 1 && sa == 1 && sb == 1 {
                zip_row(&out[o..o + len], a.sub(ia, len), b.sub(ib, len), &f);
            } else if so == 1 && sa == 1 && sb == 0 {
                let y = b.load(ib);
                map_row(&out[o..o + len], a.sub(ia, len), |x| f(x, y));
            } else if so == 1 && sa == 0 && sb == 1 {
                let x = a.load(ia);
                map_row(&out[o..o + len], b.sub(ib, len), |y| f(x, y));
            } else {
                for j in 0..len {
                    out[o + j * so].set(f(a.load(ia + j * sa), b.load(ib + j * sb)));
                }
            }
        });
    }
    match (a, b) {
        (Src::Weight(a), Src::Weight(b)) => go(walk, a, b, out, f),
        (Src::Weight(a), Src::Arena(b)) => go(walk, a, b, out, f),
        (Src::Arena(a), Src::Weight(b)) => go(walk, a, b, out, f),
        (Src::Arena(a), Src::Arena(b)) => go(walk, a, b, out, f),
    }
}

/// `out = cond ? a : b` with broadcasting (operand order: output, cond,
/// a, b); `T` is moved as raw bits.
pub fn select<T: Copy>(
    walk: &Walk<4>,
    cond: Src<'_, u8>,
    a: Src<'_, T>,
    b: Src<'_, T>,
    out: &[Cell<T>],
) {
    #[inline(always)]
    fn go<T: Copy>(
        walk: &Walk<4>,
        cond: impl Load<u8>,
        a: impl Load<T>,
        b: impl Load<T>,
        out: &[Cell<T>],
    ) {
        let (len, [so, sc, sa, sb]) = walk.inner();
        walk.rows([0, 0, 0, 0], |[o, ic, ia, ib]| {
            if (so, sc, sa, sb) == (1, 1, 0, 1) {
                // A mask over a row, one value where it holds
                // (bert_base's attention mask): contiguous, vectorises.
                let (out, cond, b) = (&out[o..o + len], cond.sub(ic, len), b.sub(ib, len));
                let x = a.load(ia);
                for (j, c) in out.iter().enumerate() {
                    c.set(if cond.load(j) != 0 { x } else { b.load(j) });
                }
                return;
            }
            for j in 0..len {
                let v = if cond.load(ic + j * sc) != 0 {
                    a.load(ia + j * sa)
                } else {
                    b.load(ib + j * sb)
                };
                out[o + j * so].set(v);
            }
        });
    }
    crate::with_load!(cond, |c| crate::with_load!(a, |a| crate::with_load!(
        b,
        |b| go(walk, c, a, b, out)
    )))
}

/// `out[i] = f(src[i])` for a conversion between element types.
pub fn convert<T: Copy, U: Copy>(src: Src<'_, T>, out: &[Cell<U>], f: impl Fn(T) -> U) {
    // Monomorphised per storage and chunked, so that the loop vectorises
    // (reading through `Src::at` matched the storage per element).
    crate::with_load!(src, |s| map_row(out, s, &f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// Select over broadcast shapes, the contiguous masked-row case and
    /// every other stride pattern, against the definition.
    #[test]
    fn select_follows_the_broadcast_definition() {
        use crate::kernels::layout::{broadcast_strides, strides_of, Walk};
        let mut below = crate::kernels::testing::below(0x5e1e_c7ed_0000_0001);
        for case in 0..200 {
            let out: Vec<usize> = (0..1 + below(3)).map(|_| 1 + below(5)).collect();
            let n: usize = out.iter().product();
            // Each operand keeps or drops (to 1) each dimension.
            let mut shape_of = |keep_last: bool| -> Vec<usize> {
                let last = out.len() - 1;
                out.iter()
                    .enumerate()
                    .map(|(d, &e)| {
                        if (d == last && keep_last) || below(2) == 0 {
                            e
                        } else {
                            1
                        }
                    })
                    .collect()
            };
            let (sc, sa, sb) = if case % 3 == 0 {
                // bert_base's mask: cond and b along the row, a one value.
                (shape_of(true), alloc::vec![1; out.len()], out.clone())
            } else {
                (shape_of(false), shape_of(false), shape_of(false))
            };
            let len = |s: &[usize]| s.iter().product::<usize>();
            let cond: Vec<u8> = (0..len(&sc)).map(|_| below(2) as u8).collect();
            let a: Vec<i32> = (0..len(&sa)).map(|i| i as i32 + 1000).collect();
            let b: Vec<i32> = (0..len(&sb)).map(|i| -(i as i32) - 1).collect();
            let st = |s: &[usize]| broadcast_strides(s, &out).unwrap();
            let (stc, sta, stb) = (st(&sc), st(&sa), st(&sb));
            let walk = Walk::new(&out, [&strides_of(&out), &stc, &sta, &stb]).unwrap();
            let mut got = alloc::vec![0i32; n];
            let cells = Cell::from_mut(&mut got[..]).as_slice_of_cells();
            select(
                &walk,
                Src::Weight(&cond),
                Src::Weight(&a),
                Src::Arena(Cell::from_mut(&mut b.clone()[..]).as_slice_of_cells()),
                cells,
            );
            let at = |strides: &[usize], flat: usize| {
                let mut rest = flat;
                let mut offset = 0;
                for d in (0..out.len()).rev() {
                    offset += (rest % out[d]) * strides[d];
                    rest /= out[d];
                }
                offset
            };
            for (i, &g) in got.iter().enumerate() {
                let want = if cond[at(&stc, i)] != 0 {
                    a[at(&sta, i)]
                } else {
                    b[at(&stb, i)]
                };
                assert_eq!(g, want, "case {case}: {out:?} at {i}");
            }
        }
    }

    #[test]
    fn erf_is_accurate_relative_to_small_results_and_absolutely_elsewhere() {
        for i in -40_000..=40_000 {
            let x = i as f32 * 1e-4;
            let got = f64::from(erf(x));
            let want = libm::erf(f64::from(x));
            let error = (got - want).abs();
            assert!(
                error <= 4e-7 * want.abs() + 1e-30 || error <= 1e-6 && x.abs() >= 0.5,
                "erf({x}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn erf_is_close_to_the_series() {
        // erf(0.5) = 0.520499877813..., erf(2) = 0.995322265018...
        assert!((erf(0.5) - 0.520_499_9).abs() < 1e-6);
        assert!((erf(-2.0) + 0.995_322_3).abs() < 1e-6);
        assert_eq!(erf(0.0), 0.0);
    }

    /// Every unary function over f64, against its definition in f64
    /// (written here apart from the kernel), within a few f64 ulps: the
    /// f32 path would be off by about 1e-7.
    #[test]
    fn unary_functions_of_f64_are_computed_in_f64() {
        use core::f64::consts::{FRAC_1_SQRT_2, PI};
        type Reference = fn(f64) -> f64;
        let cases: [(Unary, Reference); 32] = [
            (Unary::Abs, f64::abs),
            (Unary::Exp, f64::exp),
            (Unary::Ln, f64::ln),
            (Unary::Sqrt, f64::sqrt),
            (Unary::Rsqrt, |x| 1.0 / x.sqrt()),
            (Unary::Recip, |x| 1.0 / x),
            (Unary::Neg, |x| -x),
            (Unary::Sigmoid, |x| 1.0 / (1.0 + (-x).exp())),
            (Unary::Tanh, f64::tanh),
            (Unary::Erf, libm::erf),
            (Unary::GeluExact, |x| {
                0.5 * x * (1.0 + libm::erf(x * FRAC_1_SQRT_2))
            }),
            (Unary::Silu, |x| x / (1.0 + (-x).exp())),
            (Unary::Softplus, |x| (1.0 + x.exp()).ln()),
            (Unary::HardSwish, |x| x * (x + 3.0).clamp(0.0, 6.0) / 6.0),
            (Unary::Sin, f64::sin),
            (Unary::Cos, f64::cos),
            (Unary::Floor, f64::floor),
            (Unary::Ceil, f64::ceil),
            (Unary::Round, f64::round),
            (Unary::RoundHalfToEven, f64::round_ties_even),
            (Unary::Sign, |x| if x == 0.0 { 0.0 } else { x.signum() }),
            (Unary::Square, |x| x * x),
            (Unary::Tan, f64::tan),
            (Unary::Asin, f64::asin),
            (Unary::Acos, f64::acos),
            (Unary::Atan, f64::atan),
            (Unary::Sinh, f64::sinh),
            (Unary::Cosh, f64::cosh),
            (Unary::Asinh, f64::asinh),
            (Unary::Acosh, f64::acosh),
            (Unary::Atanh, f64::atanh),
            (Unary::GeluTanh, |x| {
                0.5 * x * (1.0 + ((2.0 / PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
            }),
        ];
        // Inside (−1, 1), the domain of asin, acos and atanh; from 1 up
        // for the functions of positive numbers.
        let xs: Vec<f64> = (1..=1000).map(|i| -0.999 + i as f64 * 1.998e-3).collect();
        let big: Vec<f64> = (0..1000).map(|i| 1.0 + i as f64 * 0.0173).collect();
        for (f, reference) in cases {
            let positive = matches!(f, Unary::Ln | Unary::Sqrt | Unary::Rsqrt | Unary::Acosh);
            let xs = if positive { &big } else { &xs };
            let mut out = vec![0.0f64; xs.len()];
            let cells = Cell::from_mut(&mut out[..]).as_slice_of_cells();
            unary::<f64>(f, Src::Weight(xs), cells);
            for (x, got) in xs.iter().zip(&out) {
                let want = reference(*x);
                let error = (got - want).abs();
                assert!(
                    error <= 1e-14 * want.abs().max(1e-3),
                    "{f:?}({x}) = {got}, want {want}"
                );
            }
        }
    }

    /// The vectorised logistic functions against their f64 definitions:
    /// a few ulps relative to the result, or (where the result is below
    /// f32's normal range, or the old formula underflows too) absolutely
    /// tiny; NaN for NaN; the infinities' limits.
    #[test]
    fn logistic_functions_are_within_ulps_of_f64() {
        let mut xs: Vec<f32> = (-240_000..=240_000).map(|i| i as f32 * 5e-4).collect();
        xs.extend([
            0.0,
            -0.0,
            1e-30,
            -1e-30,
            f32::MIN_POSITIVE,
            87.0,
            -87.0,
            87.5,
            -87.5,
            88.8,
            -88.8,
            103.0,
            -103.0,
            1e30,
            -1e30,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
        ]);
        for silu in [false, true] {
            let mut out = vec![0f32; xs.len()];
            let cells = Cell::from_mut(&mut out[..]).as_slice_of_cells();
            let f = if silu { Unary::Silu } else { Unary::Sigmoid };
            unary_f32(f, Src::Weight(&xs), cells);
            for (&x, &got) in xs.iter().zip(&out) {
                let x64 = f64::from(x);
                let sigmoid = 1.0 / (1.0 + (-x64).exp());
                let want = if silu { x64 * sigmoid } else { sigmoid };
                let error = (f64::from(got) - want).abs();
                assert!(
                    f64::from(got) == want
                        || error <= 4e-7 * want.abs()
                        || error <= 1e-37 * x64.abs().max(1.0),
                    "{f:?}({x}) = {got}, want {want}"
                );
            }
        }
        let nan = [f32::NAN, f32::NEG_INFINITY];
        let out = [Cell::new(0f32), Cell::new(0f32)];
        unary_f32(Unary::Sigmoid, Src::Weight(&nan), &out);
        assert!(out[0].get().is_nan());
        assert_eq!(out[1].get(), 0.0);
        unary_f32(Unary::Silu, Src::Weight(&nan), &out);
        // −∞·0, as the formula x/(1+e^−x) gives −∞/∞.
        assert!(out[0].get().is_nan() && out[1].get().is_nan());
    }

    /// The copy compiled for AVX2 and FMA (what `unary_f32` runs on such
    /// a CPU) gives the portable loop's bits: Rust contracts no multiply
    /// and add into an FMA, and the fused steps are fused in both (in
    /// software where the CPU lacks FMA), so both round alike. Ragged
    /// lengths reach the chunks' scalar tails; in place too.
    /// Erf and the exact Gelu in the widest vectors give the bits of the
    /// scalar function, in place, over every tail length, both branches of
    /// erf, its far tail, infinities and NaN.
    #[test]
    fn widest_erf_rows_equal_the_scalar_function_bitwise() {
        let mut seed = 0x9e37_79b9_u32;
        let mut xs: Vec<f32> = (0..1000)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                (seed as f32 / u32::MAX as f32 - 0.5) * [1.2, 8.0, 30.0][seed as usize % 3]
            })
            .collect();
        xs.extend([
            0.5,
            -0.5,
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-30,
        ]);
        for len in [0usize, 1, 15, 16, 17, 100, xs.len()] {
            let xs = &xs[xs.len() - len..];
            for f in [Unary::Erf, Unary::GeluExact] {
                let want: Vec<u32> = xs.iter().map(|&x| f.apply(x).to_bits()).collect();
                let mut got = xs.to_vec();
                let cells = Cell::from_mut(&mut got[..]).as_slice_of_cells();
                unary_f32(f, Src::Arena(cells), cells);
                let got: Vec<u32> = got.iter().map(|x| x.to_bits()).collect();
                assert_eq!(got, want, "{f:?} over {len}");
            }
        }
    }

    #[test]
    fn logistic_rows_equal_the_portable_loop_bitwise() {
        let mut seed = 0x2545_f491_u32;
        for len in [0usize, 1, 15, 16, 17, 100, 1000] {
            let xs: Vec<f32> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    (seed as f32 / u32::MAX as f32 - 0.5) * 60.0
                })
                .collect();
            for silu in [false, true] {
                let mut want = vec![0f32; len];
                let cells = Cell::from_mut(&mut want[..]).as_slice_of_cells();
                if silu {
                    logistic_row::<true>(&xs[..], cells);
                } else {
                    logistic_row::<false>(&xs[..], cells);
                }
                let mut got = xs.clone();
                let cells = Cell::from_mut(&mut got[..]).as_slice_of_cells();
                let f = if silu { Unary::Silu } else { Unary::Sigmoid };
                unary_f32(f, Src::Arena(cells), cells);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{f:?} over {len}");
            }
        }
    }

    #[test]
    fn f64_keeps_what_f32_rounds_away() {
        // 1 + 1e-12 is 1 in f32; e^(1e-12) − 1 shows whether it was kept.
        let x = [1e-12f64, 1.0];
        let mut out = [0.0f64; 2];
        let cells = Cell::from_mut(&mut out[..]).as_slice_of_cells();
        unary::<f64>(Unary::Exp, Src::Weight(&x), cells);
        assert!(((out[0] - 1.0) / 1e-12 - 1.0).abs() < 1e-3, "{}", out[0]);
        // Within an ulp, not equal: without std, libm's exp(1) is one ulp
        // above e (glibc's is exact); either way far below f32's 1e-7.
        let e = core::f64::consts::E;
        assert!((out[1] - e).abs() <= e * f64::EPSILON, "{}", out[1]);
    }

    #[test]
    fn in_place_binary_reads_before_it_writes() {
        let mut x = [1.0f32, 2.0, 3.0, 4.0];
        let cells = Cell::from_mut(&mut x[..]).as_slice_of_cells();
        let walk = Walk::new(&[4], [&[1], &[1], &[1]]).unwrap();
        // x = x * x, output over both inputs.
        binary(
            Share::whole(&walk),
            Src::Arena(cells),
            Src::Arena(cells),
            cells,
            |a, b| a * b,
        );
        assert_eq!(x, [1.0, 4.0, 9.0, 16.0]);
    }
}

//! The float element types the arithmetic kernels are generic over: f32
//! and f64.
//!
//! Each method forwards to the type's own function (inlined), so a kernel
//! written once over [`Float`] compiles for f32 to the code it had when
//! written for f32 alone. f16 has no implementation on purpose: its
//! kernels convert to f32 element by element (unary functions), and
//! `stow compile` runs every other f16 operator in f32 between casts
//! (`stow-onnx`'s widening pass; the operators that do run on f16 are
//! listed by [`super::has_f16_kernel`]).
//!
//! **The one door to float functions.** `core` lacks most of them (exp,
//! ln, tanh, floor, round, powf, sqrt, fused multiply-add, ...): with the
//! `std` feature each method calls std's (the code and results the kernels
//! always had), without it the `libm` crate's, so every kernel is one
//! source for both builds. Kernels with a concrete `f32`/`f64` call
//! `Float::exp(x)` rather than `x.exp()`, which would bind to std's
//! inherent method and not build without std. The two backends can differ
//! in the last bit (libm's are correctly rounded or within an ulp or two;
//! std's come from the platform's C library); `tests::libm_agrees_with_std`
//! bounds the difference.

use core::iter::Sum;
use core::ops::{Add, Div, Mul, Neg, Sub};

/// A float element type of the arithmetic kernels.
pub trait Float:
    bytemuck::Pod
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + Sum
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// +∞.
    const INFINITY: Self;
    /// −∞.
    const NEG_INFINITY: Self;
    /// π.
    const PI: Self;
    /// 1/√2.
    const FRAC_1_SQRT_2: Self;

    /// `x` rounded to this type (a constant written once for both types
    /// rounds to the f32 nearest its decimal value, as an f32 literal).
    fn of(x: f64) -> Self;
    /// An f32 attribute (exact in f64).
    fn from_f32(x: f32) -> Self;
    /// `n` rounded to this type.
    fn count(n: usize) -> Self;
    /// This value in f64 (exact).
    fn to_f64(self) -> f64;

    /// |x|
    fn abs(self) -> Self;
    /// e^x
    fn exp(self) -> Self;
    /// ln x
    fn ln(self) -> Self;
    /// ln(1 + x)
    fn ln_1p(self) -> Self;
    /// √x
    fn sqrt(self) -> Self;
    /// 1/x
    fn recip(self) -> Self;
    /// x^n
    fn powi(self, n: i32) -> Self;
    /// x^y
    fn powf(self, y: Self) -> Self;
    /// x·a + b with one rounding.
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// tanh x
    fn tanh(self) -> Self;
    /// sin x
    fn sin(self) -> Self;
    /// cos x
    fn cos(self) -> Self;
    /// tan x
    fn tan(self) -> Self;
    /// asin x
    fn asin(self) -> Self;
    /// acos x
    fn acos(self) -> Self;
    /// atan x
    fn atan(self) -> Self;
    /// sinh x
    fn sinh(self) -> Self;
    /// cosh x
    fn cosh(self) -> Self;
    /// asinh x
    fn asinh(self) -> Self;
    /// acosh x
    fn acosh(self) -> Self;
    /// atanh x
    fn atanh(self) -> Self;
    /// ⌊x⌋
    fn floor(self) -> Self;
    /// ⌈x⌉
    fn ceil(self) -> Self;
    /// round half away from zero
    fn round(self) -> Self;
    /// round half to even
    fn round_ties_even(self) -> Self;
    /// ±1 with the sign of x (NaN for NaN)
    fn signum(self) -> Self;
    /// |x| with the sign of `sign`
    fn copysign(self, sign: Self) -> Self;
    /// Is x NaN.
    fn is_nan(self) -> bool;
    /// IEEE maxNum (a NaN operand yields the other one).
    fn max(self, y: Self) -> Self;
    /// IEEE minNum.
    fn min(self, y: Self) -> Self;
    /// x limited to `lo..=hi`.
    fn clamp(self, lo: Self, hi: Self) -> Self;
    /// erf x.
    fn erf(self) -> Self;
}

/// Methods `core` has on floats: the type's own.
macro_rules! forward {
    ($($name:ident),*) => {$(
        #[inline(always)]
        fn $name(self) -> Self {
            Self::$name(self)
        }
    )*};
}

/// Methods only std has: std's with `std`, libm's (`$libm`) without.
macro_rules! from_std_or_libm {
    ($t:ident: $($name:ident = $libm:ident),*) => {$(
        #[inline(always)]
        fn $name(self) -> Self {
            #[cfg(feature = "std")]
            return $t::$name(self);
            #[cfg(not(feature = "std"))]
            return via_libm::$libm(self);
        }
    )*};
}

macro_rules! float {
    ($t:ident, $pairs:ident, $erf:expr, $pow:ident, $fma:ident, [$($name:ident = $libm:ident),*]) => {
        /// Each function only std has, with std's and libm's version, for
        /// `tests::libm_agrees_with_std` (the list the no-std build uses).
        #[cfg(all(test, feature = "std"))]
        #[allow(clippy::type_complexity)]
        const $pairs: &[(&str, fn($t) -> $t, fn($t) -> $t)] =
            &[$((stringify!($name), $t::$name, via_libm::$libm)),*];

        impl Float for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const INFINITY: Self = $t::INFINITY;
            const NEG_INFINITY: Self = $t::NEG_INFINITY;
            const PI: Self = core::$t::consts::PI;
            const FRAC_1_SQRT_2: Self = core::$t::consts::FRAC_1_SQRT_2;

            #[inline(always)]
            fn of(x: f64) -> Self {
                x as $t
            }
            #[inline(always)]
            fn from_f32(x: f32) -> Self {
                x as $t
            }
            #[inline(always)]
            fn count(n: usize) -> Self {
                n as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            forward!(abs, recip, signum);
            from_std_or_libm!($t: $($name = $libm),*);
            #[inline(always)]
            fn powi(self, n: i32) -> Self {
                #[cfg(feature = "std")]
                return $t::powi(self, n);
                #[cfg(not(feature = "std"))]
                return powi(self, n);
            }
            #[inline(always)]
            fn powf(self, y: Self) -> Self {
                #[cfg(feature = "std")]
                return $t::powf(self, y);
                #[cfg(not(feature = "std"))]
                return libm::$pow(self, y);
            }
            #[inline(always)]
            fn mul_add(self, a: Self, b: Self) -> Self {
                #[cfg(feature = "std")]
                return $t::mul_add(self, a, b);
                #[cfg(not(feature = "std"))]
                return libm::$fma(self, a, b);
            }
            #[inline(always)]
            fn copysign(self, sign: Self) -> Self {
                $t::copysign(self, sign)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                $t::is_nan(self)
            }
            #[inline(always)]
            fn max(self, y: Self) -> Self {
                $t::max(self, y)
            }
            #[inline(always)]
            fn min(self, y: Self) -> Self {
                $t::min(self, y)
            }
            #[inline(always)]
            fn clamp(self, lo: Self, hi: Self) -> Self {
                $t::clamp(self, lo, hi)
            }
            #[inline(always)]
            fn erf(self) -> Self {
                $erf(self)
            }
        }
    };
}

float!(
    f32,
    PAIRS_F32,
    super::elementwise::erf,
    powf,
    fmaf,
    [
        exp = expf,
        ln = logf,
        ln_1p = log1pf,
        sqrt = sqrtf,
        tanh = tanhf,
        sin = sinf,
        cos = cosf,
        tan = tanf,
        asin = asinf,
        acos = acosf,
        atan = atanf,
        sinh = sinhf,
        cosh = coshf,
        asinh = asinhf,
        acosh = acoshf,
        atanh = atanhf,
        floor = floorf,
        ceil = ceilf,
        round = roundf,
        round_ties_even = roundevenf
    ]
);
// f64's own erf (correctly rounded to within an ulp or so); the f32
// polynomial would give f64 results with f32 errors.
float!(
    f64,
    PAIRS_F64,
    libm::erf,
    pow,
    fma,
    [
        exp = exp,
        ln = log,
        ln_1p = log1p,
        sqrt = sqrt,
        tanh = tanh,
        sin = sin,
        cos = cos,
        tan = tan,
        asin = asin,
        acos = acos,
        atan = atan,
        sinh = sinh,
        cosh = cosh,
        asinh = asinh,
        acosh = acosh,
        atanh = atanh,
        floor = floor,
        ceil = ceil,
        round = round,
        round_ties_even = roundeven
    ]
);

/// The `libm` crate's functions, corrected where their domain differs
/// from std's and ONNX's (found by `tests::libm_agrees_with_std`).
#[cfg(any(not(feature = "std"), test))]
mod via_libm {
    pub use libm::*;

    /// libm's `acoshf` folds the sign away (acosh(−1000) = 7.6); below 1
    /// std, onnxruntime and the definition give NaN.
    pub fn acoshf(x: f32) -> f32 {
        if x < 1.0 {
            f32::NAN
        } else {
            libm::acoshf(x)
        }
    }

    /// [`acoshf`] for f64.
    pub fn acosh(x: f64) -> f64 {
        if x < 1.0 {
            f64::NAN
        } else {
            libm::acosh(x)
        }
    }
}

/// `x^n` by binary powering, as std's `powi` computes it (LLVM's
/// `__powisf2`/`__powidf2`: square and multiply, one division for a
/// negative `n`), so that both builds agree on it.
#[cfg(any(not(feature = "std"), test))]
fn powi<F: Float>(mut x: F, n: i32) -> F {
    let mut e = n.unsigned_abs();
    let mut r = F::ONE;
    loop {
        if e & 1 == 1 {
            r = r * x;
        }
        e /= 2;
        if e == 0 {
            break;
        }
        x = x * x;
    }
    if n < 0 {
        F::ONE / r
    } else {
        r
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;

    /// Steps between two floats of one type (0 when both are NaN).
    fn steps(a: f64, b: f64, bits: fn(f64) -> i64) -> u64 {
        if a.is_nan() && b.is_nan() || a == b {
            return 0;
        }
        if a.is_nan() || b.is_nan() {
            return u64::MAX;
        }
        bits(a).abs_diff(bits(b))
    }

    /// Bits as an integer that orders like the float (−0 and +0 both 0).
    fn ordered32(x: f64) -> i64 {
        let i = i64::from((x as f32).to_bits() as i32);
        if i < 0 {
            i64::from(i32::MIN) - i
        } else {
            i
        }
    }

    fn ordered64(x: f64) -> i64 {
        let i = x.to_bits() as i64;
        if i < 0 {
            i64::MIN - i
        } else {
            i
        }
    }

    /// Arguments across every function's domain and beyond it: small,
    /// near 1, steps of 1/16 to ±50, powers of ten to the overflow range,
    /// halves (rounding ties), and the specials.
    fn arguments() -> Vec<f64> {
        let mut v = vec![0.0, -0.0, f64::INFINITY, -f64::INFINITY, f64::NAN];
        v.extend((-800..=800).map(|k| f64::from(k) / 16.0));
        v.extend((-40..=40).flat_map(|e| [10f64.powi(e), 3.7 * 10f64.powi(e)]));
        v.extend((-20..=20).map(|k| f64::from(k) + 0.5));
        v.extend([0.999_999, 1.000_001, -0.999_999, 1e-7, 88.5, 710.0]);
        let negated: Vec<f64> = v.iter().map(|x| -x).collect();
        v.extend(negated);
        v
    }

    /// The no-std build's functions (libm's) against the std build's, on
    /// the list each build really uses: a wrong pairing (`ln` to `log10`)
    /// is off by far more than the few ulps two good implementations
    /// differ by. Rounding functions must agree exactly.
    #[test]
    fn libm_agrees_with_std() {
        let exact = ["floor", "ceil", "round", "round_ties_even"];
        let mut report = Vec::new();
        for (name, of_std, of_libm) in PAIRS_F32 {
            let worst = arguments()
                .into_iter()
                .map(|x| {
                    let (a, b) = (of_std(x as f32), of_libm(x as f32));
                    (
                        steps(a.into(), b.into(), ordered32),
                        x as f32 as f64,
                        f64::from(a),
                        f64::from(b),
                    )
                })
                .max_by(|a, b| a.0.cmp(&b.0))
                .unwrap();
            report.push((*name, "f32", worst));
        }
        for (name, of_std, of_libm) in PAIRS_F64 {
            let worst = arguments()
                .into_iter()
                .map(|x| {
                    (
                        steps(of_std(x), of_libm(x), ordered64),
                        x,
                        of_std(x),
                        of_libm(x),
                    )
                })
                .max_by(|a, b| a.0.cmp(&b.0))
                .unwrap();
            report.push((*name, "f64", worst));
        }
        for &(name, t, (worst, x, a, b)) in &report {
            let limit = match name {
                _ if exact.contains(&name) => 0,
                // std's atanh, 0.5·ln_1p(2x/(1−x)), loses digits near ±1:
                // at x = −0.999999 (f32) it is 6e4 ulps (4e-3 relative)
                // from the true −7.24777, which libm gets. The std build
                // keeps std's; a wrong pairing would be off by far more.
                "atanh" => 1 << 16,
                // The same near 1: std's ln(x + √(x²−1)) cancels; at
                // x = 1 + 2^-20 (f32) it is 245 ulps below the true
                // 0.00138107 (libm's).
                "acosh" => 1 << 10,
                _ => 2,
            };
            assert!(
                worst <= limit,
                "{name}({x}) ({t}): std {a}, libm {b}: {worst} ulps apart (limit {limit}); all: {report:?}"
            );
        }
    }

    /// The no-std `powi` computes what std's does, bit for bit.
    #[test]
    fn powi_is_std_s() {
        for x in arguments() {
            for n in [-9, -3, -2, -1, 0, 1, 2, 3, 7, 16, 31] {
                let (got, want) = (powi(x as f32, n), (x as f32).powi(n));
                assert!(
                    got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan(),
                    "{x}^{n}: {got} vs {want}"
                );
                let (got, want) = (powi(x, n), x.powi(n));
                assert!(
                    got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan(),
                    "{x}^{n}: {got} vs {want}"
                );
            }
        }
    }
}

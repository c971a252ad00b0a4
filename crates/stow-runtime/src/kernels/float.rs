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

use std::iter::Sum;
use std::ops::{Add, Div, Mul, Neg, Sub};

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

macro_rules! forward {
    ($($name:ident),*) => {$(
        #[inline(always)]
        fn $name(self) -> Self {
            Self::$name(self)
        }
    )*};
}

macro_rules! float {
    ($t:ident, $erf:expr) => {
        impl Float for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const INFINITY: Self = $t::INFINITY;
            const NEG_INFINITY: Self = $t::NEG_INFINITY;
            const PI: Self = std::$t::consts::PI;
            const FRAC_1_SQRT_2: Self = std::$t::consts::FRAC_1_SQRT_2;

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
            forward!(
                abs,
                exp,
                ln,
                ln_1p,
                sqrt,
                recip,
                tanh,
                sin,
                cos,
                tan,
                asin,
                acos,
                atan,
                sinh,
                cosh,
                asinh,
                acosh,
                atanh,
                floor,
                ceil,
                round,
                round_ties_even,
                signum
            );
            #[inline(always)]
            fn powi(self, n: i32) -> Self {
                $t::powi(self, n)
            }
            #[inline(always)]
            fn powf(self, y: Self) -> Self {
                $t::powf(self, y)
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

float!(f32, super::elementwise::erf);
// f64's own erf (correctly rounded to within an ulp or so); the f32
// polynomial would give f64 results with f32 errors.
float!(f64, libm::erf);

//! A product's or convolution's finish on sixteen sums in an AVX-512
//! register, for the kernels that store a tile of sums by vectors after
//! turning it (a transpose), where a pass over the stored rows would read
//! back what they just wrote, and its rows' ragged ends ran one element
//! at a time.
//!
//! Each lane gets the bits [`Finish::value`] gives: the clamp by
//! compares and blends, the logistic functions and HardSwish by their
//! scalar functions over the vector's lanes, which the compiler
//! vectorises within the caller's AVX-512 code (the same IEEE operations
//! in the same order, no fast-math, so the same bits).

use super::elementwise::{logistic, Unary};
use super::gemm::{Clamp, Finish};
use core::arch::x86_64::*;

/// [`Finish`] for sixteen sums at once.
// Made once per kernel call and kept in registers or on the stack: a box
// for the clamp's bound vectors would be an allocation per run.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy)]
pub(crate) enum Finish16 {
    Keep,
    Clamp(VecClamp),
    Sigmoid,
    Silu,
    HardSwish,
}

impl Finish16 {
    /// # Safety
    /// AVX-512 F.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(crate) unsafe fn of(finish: Finish) -> Finish16 {
        match finish {
            Finish::Keep => Finish16::Keep,
            Finish::Clamp(k) => Finish16::Clamp(VecClamp::of(k)),
            Finish::Sigmoid => Finish16::Sigmoid,
            Finish::Silu => Finish16::Silu,
            Finish::HardSwish => Finish16::HardSwish,
        }
    }

    /// Each lane of `v` through the finish.
    ///
    /// # Safety
    /// AVX-512 F, AVX2 and FMA (inlined into code compiled for them).
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(crate) unsafe fn apply(self, v: __m512) -> __m512 {
        match self {
            Finish16::Keep => v,
            Finish16::Clamp(k) => k.apply(v),
            Finish16::Sigmoid => each_lane(v, logistic::<false>),
            Finish16::Silu => each_lane(v, logistic::<true>),
            Finish16::HardSwish => each_lane(v, |a| Unary::HardSwish.apply(a)),
        }
    }
}

/// `f` over the sixteen lanes of `v`: a loop of known length over plain
/// arithmetic and selects, which vectorises.
///
/// # Safety
/// AVX-512 F.
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn each_lane(v: __m512, f: impl Fn(f32) -> f32) -> __m512 {
    let mut lanes = [0f32; 16];
    _mm512_storeu_ps(lanes.as_mut_ptr(), v);
    for a in lanes.iter_mut() {
        *a = f(*a);
    }
    _mm512_loadu_ps(lanes.as_ptr())
}

/// A [`Clamp`] finish on sixteen sums at once, to the bit as
/// [`Finish::value`] gives it: `a ≥ lo ? a : lo` (a NaN sum becomes the
/// bound), `a ≤ hi ? a : hi`, in the steps' order; a NaN bound leaves its
/// side as it is.
#[derive(Clone, Copy)]
pub(crate) struct VecClamp {
    lo: Option<__m512>,
    hi: Option<__m512>,
    max_first: bool,
}

impl VecClamp {
    /// # Safety
    /// AVX-512 F.
    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn of(k: Clamp) -> VecClamp {
        let bound = |b: f32| (!b.is_nan()).then(|| _mm512_set1_ps(b));
        VecClamp {
            lo: bound(k.lo),
            hi: bound(k.hi),
            max_first: k.max_first,
        }
    }

    /// # Safety
    /// AVX-512 F.
    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn apply(self, a: __m512) -> __m512 {
        // No closures: they would be compiled outside the AVX-512 code.
        if self.max_first {
            keep_or::<_CMP_LE_OQ>(self.hi, keep_or::<_CMP_GE_OQ>(self.lo, a))
        } else {
            keep_or::<_CMP_GE_OQ>(self.lo, keep_or::<_CMP_LE_OQ>(self.hi, a))
        }
    }
}

/// `a` where it compares to `bound` by `CMP` (false for a NaN), else the
/// bound; `a` when there is no bound.
///
/// # Safety
/// AVX-512 F.
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn keep_or<const CMP: i32>(bound: Option<__m512>, a: __m512) -> __m512 {
    match bound {
        Some(b) => _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<CMP>(a, b), b, a),
        None => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::gemm::Isa;

    /// Every finish on vectors of ordinary sums and of the values where
    /// the functions change branch (signed zeros, NaN, infinities, the
    /// logistic's cut-off at −87, HardSwish's corners at ±3, subnormals):
    /// the bits of [`Finish::value`], lane by lane (a NaN for a NaN).
    #[test]
    fn sixteen_lanes_give_the_bits_of_one() {
        if Isa::detect() != Isa::Avx512 {
            return;
        }
        let special = [
            0.0,
            -0.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -87.0,
            -87.000_01,
            -86.999_99,
            87.5,
            3.0,
            -3.0,
            6.0,
            1e-40,
            -1e-40,
            f32::MAX,
            f32::MIN,
        ];
        let clamps = [(0.0, f32::NAN), (f32::NAN, 6.0), (0.0, 6.0), (-0.5, 0.0)];
        let mut finishes = alloc::vec![
            Finish::Keep,
            Finish::Sigmoid,
            Finish::Silu,
            Finish::HardSwish
        ];
        for (lo, hi) in clamps {
            for max_first in [false, true] {
                finishes.push(Finish::Clamp(Clamp { lo, hi, max_first }));
            }
        }
        let mut below = crate::kernels::testing::below(0x5851_f42d_4c95_7f2du64);
        for finish in finishes {
            for case in 0..400 {
                let lanes: [f32; 16] = core::array::from_fn(|l| match case {
                    0 => special[l],
                    _ if below(4) == 0 => special[below(special.len())],
                    _ => (below(200_001) as f32 - 100_000.0) / [10.0, 1_000.0, 100_000.0][below(3)],
                });
                // Any NaN is a NaN: which operand's NaN a commutative
                // operation returns is the compiler's choice.
                let bits = |a: f32| {
                    if a.is_nan() {
                        f32::NAN.to_bits()
                    } else {
                        a.to_bits()
                    }
                };
                let want = lanes.map(|a| bits(finish.value(a)));
                // SAFETY: AVX-512 F was detected; the load and store are
                // of sixteen floats.
                #[allow(unsafe_code)]
                let got = unsafe { apply_avx512(finish, lanes) };
                assert_eq!(got.map(bits), want, "{finish:?} on {lanes:?}");
            }
        }
    }

    #[target_feature(enable = "avx512f,avx2,fma")]
    #[allow(unsafe_code)]
    unsafe fn apply_avx512(finish: Finish, lanes: [f32; 16]) -> [f32; 16] {
        let v = Finish16::of(finish).apply(_mm512_loadu_ps(lanes.as_ptr()));
        let mut out = [0f32; 16];
        _mm512_storeu_ps(out.as_mut_ptr(), v);
        out
    }
}

//! The band path's loops compiled per x86 instruction set: the copies of
//! [`Task::planes`] and the VNNI tap pairs.

use super::Task;
use crate::kernels::cells::Load;
use core::arch::x86_64::*;
use core::ops::Range;

/// [`super::accumulate`] with two taps per `vpdpwssd`: the two taps'
/// runs of 32 i16 interleaved (`vpunpck{l,h}wd`, pairs in each 128-bit
/// lane's order) against the pair of weights, into two accumulators of
/// 16 sums that one `vpermt2d` each puts back in order at the end; an
/// odd tap is paired with itself and a zero weight. The same sums
/// modulo 2³² (`vpdpwssd` wraps; each pair's product sum fits i32:
/// |x| ≤ 255, |w| < 2¹⁵). The run's end is taken with masked loads and
/// stores. `false` (nothing written) where a weight is not an i16 or a
/// run would leave `phases`. The caller guarantees AVX-512 F, BW and
/// VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(in super::super) fn accumulate_vnni(
    phases: &[i16],
    taps: &[(usize, i32)],
    sums: &mut [i32],
) -> bool {
    let run = sums.len();
    let fits = |&(at, w): &(usize, i32)| {
        i16::try_from(w).is_ok() && at.checked_add(run).is_some_and(|e| e <= phases.len())
    };
    if !taps.iter().all(fits) {
        return false;
    }
    // (first run, second run, weight pair) per pair of taps.
    let mut pairs = [(0usize, 0usize, 0i32); super::TAPS.div_ceil(2)];
    let mut n = 0;
    for two in taps.chunks(2) {
        let (a, wa) = two[0];
        let (b, wb) = two.get(1).copied().unwrap_or((a, 0));
        let word = u32::from(wa as i16 as u16) | (u32::from(wb as i16 as u16) << 16);
        pairs[n] = (a, b, word as i32);
        n += 1;
    }
    let pairs = &pairs[..n];
    // Lane k of the low accumulator holds sums 8k..8k + 3, of the high
    // one 8k + 4..8k + 7.
    let first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    let second = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    let base = phases.as_ptr();
    let out = sums.as_mut_ptr();
    let mut i = 0;
    while i < run {
        let left = run - i;
        let m16: __mmask32 = if left >= 32 { !0 } else { (1u32 << left) - 1 };
        let (mut lo, mut hi) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        for &(a, b, w) in pairs {
            let w = _mm512_set1_epi32(w);
            // SAFETY: `a + i + l` and `b + i + l` for the unmasked lanes
            // `l < left` are below `a + run` and `b + run`, inside
            // `phases` (checked above); masked lanes are not read.
            #[allow(unsafe_code)]
            let (xa, xb) = unsafe {
                (
                    _mm512_maskz_loadu_epi16(m16, base.add(a + i)),
                    _mm512_maskz_loadu_epi16(m16, base.add(b + i)),
                )
            };
            lo = _mm512_dpwssd_epi32(lo, _mm512_unpacklo_epi16(xa, xb), w);
            hi = _mm512_dpwssd_epi32(hi, _mm512_unpackhi_epi16(xa, xb), w);
        }
        let (s0, s1) = (
            _mm512_permutex2var_epi32(lo, first, hi),
            _mm512_permutex2var_epi32(lo, second, hi),
        );
        let m0: __mmask16 = if left >= 16 { !0 } else { (1u16 << left) - 1 };
        // SAFETY: the unmasked lanes are sums `i..i + left.min(32)`,
        // inside `sums`.
        #[allow(unsafe_code)]
        unsafe {
            _mm512_mask_storeu_epi32(out.add(i).cast(), m0, s0);
            if left > 16 {
                let m1: __mmask16 = if left >= 32 {
                    !0
                } else {
                    (1u16 << (left - 16)) - 1
                };
                _mm512_mask_storeu_epi32(out.add(i + 16).cast(), m1, s1);
            }
        }
        i += 32;
    }
    true
}

/// [`Task::planes`] compiled for AVX-512; the caller guarantees
/// AVX-512 F and BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn planes_avx512<X: Load<u8>, W: Load<u8>>(t: &Task<'_, X, W>, mine: Range<usize>) {
    t.planes(mine);
}

/// [`Task::planes`] compiled for AVX2; the caller guarantees AVX2.
#[target_feature(enable = "avx2")]
pub(super) fn planes_avx2<X: Load<u8>, W: Load<u8>>(t: &Task<'_, X, W>, mine: Range<usize>) {
    t.planes(mine);
}

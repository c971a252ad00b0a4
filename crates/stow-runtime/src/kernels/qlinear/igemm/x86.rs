//! The x86 kernels of [`super`]: VNNI and AVX2 tiles, their packers
//! and the byte sums of rows read in place.

use super::{Ahead, Operands, PanelQuads, RowQuads, Tile, MR, NR};
use core::arch::x86_64::*;
use core::cell::Cell;

/// The sum of `k` bytes at `src`, each XORed with `flip` first.
///
/// # Safety
/// AVX2; `src` readable for `k` bytes.
#[target_feature(enable = "avx2")]
#[allow(unsafe_code)]
pub(super) unsafe fn byte_sum(src: *const u8, k: usize, flip: u8) -> u64 {
    let (zero, f) = (_mm256_setzero_si256(), _mm256_set1_epi8(flip as i8));
    let mut acc = zero;
    let mut i = 0;
    while i + 32 <= k {
        // SAFETY: i + 32 <= k.
        let v = _mm256_xor_si256(_mm256_loadu_si256(src.add(i).cast()), f);
        acc = _mm256_add_epi64(acc, _mm256_sad_epu8(v, zero));
        i += 32;
    }
    let mut lanes = [0u64; 4];
    _mm256_storeu_si256(lanes.as_mut_ptr().cast(), acc);
    let mut sum = lanes.iter().sum::<u64>();
    while i < k {
        // SAFETY: i < k.
        sum += u64::from(*src.add(i) ^ flip);
        i += 1;
    }
    sum
}

/// [`super::tile`] with `vpdpbusd`: [`tiles_vnni`] of one panel. The
/// caller guarantees AVX-512 F, BW and VNNI, and that `rows` holds
/// `panel.len() / NR` quads.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) fn tile_vnni<const LANES_UNSIGNED: bool, P: PanelQuads, R: RowQuads>(
    panel: P,
    rows: &R,
    nq: usize,
) -> Tile {
    let [tile] = tiles_vnni::<LANES_UNSIGNED, 1, P, R>([panel], rows, nq);
    tile
}

/// [`Operands::pack_lanes`] compiled for AVX-512 F and BW, which the
/// caller guarantees.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn pack_lanes_avx512<O: Operands>(ops: &O, j0: usize, panel: &[Cell<u32>]) -> [i32; NR] {
    ops.pack_lanes(j0, panel)
}

/// [`Operands::pack_lanes`] compiled for AVX2, which the caller
/// guarantees.
#[target_feature(enable = "avx2")]
pub(super) fn pack_lanes_avx2<O: Operands>(ops: &O, j0: usize, panel: &[Cell<u32>]) -> [i32; NR] {
    ops.pack_lanes(j0, panel)
}

/// [`super::tiles_of`] with `vpdpbusd`: [`tile_vnni`] of `N` panels
/// in one pass. The caller guarantees AVX-512 F, BW and VNNI, and that
/// `rows` holds `nq` quads and each panel `nq·NR`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) fn tiles_vnni<const LANES_UNSIGNED: bool, const N: usize, P: PanelQuads, R: RowQuads>(
    panels: [P; N],
    rows: &R,
    nq: usize,
) -> [Tile; N] {
    let acc = sums_vnni::<LANES_UNSIGNED, N, MR, P, R>(panels, rows, nq, Ahead::NONE);
    let mut out = [[[0i32; NR]; MR]; N];
    for (o, a) in out.iter_mut().zip(acc) {
        for (o, a) in o.iter_mut().zip(a) {
            // SAFETY: `o` is 16 i32, the 64 bytes one unaligned store
            // writes.
            #[allow(unsafe_code)]
            unsafe {
                _mm512_storeu_si512(o.as_mut_ptr().cast(), a)
            };
        }
    }
    out
}

/// [`tiles_vnni`] of two groups of [`MR`] rows in one pass (`rows.quad(q,
/// r)` for `r < 2·MR`): each panel quad loaded once for eight rows, 24
/// sums in flight with three panels. Same contract.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) fn tiles2_vnni<
    const LANES_UNSIGNED: bool,
    const N: usize,
    P: PanelQuads,
    R: RowQuads,
>(
    panels: [P; N],
    rows: &R,
    nq: usize,
    ahead: Ahead,
) -> [[Tile; 2]; N] {
    let acc = sums_vnni::<LANES_UNSIGNED, N, { 2 * MR }, P, R>(panels, rows, nq, ahead);
    let mut out = [[[[0i32; NR]; MR]; 2]; N];
    for (o, a) in out.iter_mut().zip(acc) {
        for (r, a) in a.iter().enumerate() {
            // SAFETY: a tile row is 16 i32, the 64 bytes one unaligned
            // store writes.
            #[allow(unsafe_code)]
            unsafe {
                _mm512_storeu_si512(o[r / MR][r % MR].as_mut_ptr().cast(), *a)
            };
        }
    }
    out
}

/// [`tiles_vnni`]'s sums, left in registers (for it, and for
/// [`super::fused`], which requantises them there), of `M` rows
/// (`rows.quad(q, r)` for `r < M`: [`MR`], or two groups of it), asking
/// for the lines `ahead` one per quad step. Same contract.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
pub(super) fn sums_vnni<
    const LANES_UNSIGNED: bool,
    const N: usize,
    const M: usize,
    P: PanelQuads,
    R: RowQuads,
>(
    panels: [P; N],
    rows: &R,
    nq: usize,
    ahead: Ahead,
) -> [[__m512i; M]; N] {
    let mut acc = [[_mm512_setzero_si512(); M]; N];
    // Bounds checked once here: per quad, checks and clamps were a third
    // of the loop's instructions.
    let nq = panels
        .iter()
        .fold(nq.min(rows.quads()), |n, p| n.min(p.quads() / NR));
    if M > rows.count() {
        debug_assert!(false, "tile of more rows than given");
        return acc;
    }
    let at = panels.map(|p| p.ptr());
    for q in 0..nq {
        if q < ahead.lines {
            // A hint: never faults, whatever the address.
            _mm_prefetch::<_MM_HINT_T1>(ahead.at.wrapping_add(q * 64).cast());
        }
        // SAFETY: `q < nq`, so NR = 16 quads from `q·NR` lie in each
        // panel (checked above), the 64 bytes one unaligned load reads;
        // scratch is only written by this thread and a mapped weight
        // never.
        #[allow(unsafe_code)]
        let x: [__m512i; N] =
            core::array::from_fn(|t| unsafe { _mm512_loadu_si512(at[t].add(q * NR).cast()) });
        for r in 0..M {
            // SAFETY: `q < rows.quads()` and `r < M <= rows.count()`.
            #[allow(unsafe_code)]
            let w = _mm512_set1_epi32(unsafe { rows.quad_unchecked(q, r) } as i32);
            for (a, x) in acc.iter_mut().zip(x) {
                // vpdpbusd multiplies its first operand's bytes as u8
                // and its second's as i8.
                a[r] = if LANES_UNSIGNED {
                    _mm512_dpbusd_epi32(a[r], x, w)
                } else {
                    _mm512_dpbusd_epi32(a[r], w, x)
                };
            }
        }
    }
    acc
}

/// [`super::tile`] with AVX2: each group of four lanes (16 bytes) is
/// widened to sixteen i16, multiplied by the row's quad widened the
/// same way with `vpmaddwd` (pairs of products into i32, exact), and
/// the two i32 of each lane added at the end. The caller guarantees
/// AVX2 and that `rows` holds `panel.len() / NR` quads.
#[target_feature(enable = "avx2")]
pub(super) fn tile_avx2<const LANES_UNSIGNED: bool, P: PanelQuads, R: RowQuads>(
    panel: P,
    rows: &R,
    nq: usize,
) -> Tile {
    let mut out = [[0i32; NR]; MR];
    for g in 0..NR / 4 {
        let mut acc = [_mm256_setzero_si256(); MR];
        for q in 0..nq {
            // SAFETY: `at` checked that four quads follow, the 16
            // bytes one unaligned load reads; scratch is only written
            // by this thread and a mapped weight never.
            #[allow(unsafe_code)]
            let x = unsafe { _mm_loadu_si128(panel.at(q * NR + 4 * g, 4).cast()) };
            let x = if LANES_UNSIGNED {
                _mm256_cvtepu8_epi16(x)
            } else {
                _mm256_cvtepi8_epi16(x)
            };
            for (r, a) in acc.iter_mut().enumerate() {
                let w = _mm_set1_epi32(rows.quad(q, r) as i32);
                let w = if LANES_UNSIGNED {
                    _mm256_cvtepi8_epi16(w)
                } else {
                    _mm256_cvtepu8_epi16(w)
                };
                *a = _mm256_add_epi32(*a, _mm256_madd_epi16(x, w));
            }
        }
        for (o, a) in out.iter_mut().zip(acc) {
            let mut pairs = [0i32; 8];
            // SAFETY: `pairs` is 8 i32, the 32 bytes one unaligned
            // store writes.
            #[allow(unsafe_code)]
            unsafe {
                _mm256_storeu_si256(pairs.as_mut_ptr().cast(), a)
            };
            for t in 0..4 {
                o[4 * g + t] = pairs[2 * t].wrapping_add(pairs[2 * t + 1]);
            }
        }
    }
    out
}

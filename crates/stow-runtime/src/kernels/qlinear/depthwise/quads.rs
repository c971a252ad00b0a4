//! Depthwise convolutions sixteen planes at a time with AVX-512 VNNI and
//! VBMI: the planes' padded input turned channels-last into a byte tile
//! (`tile[position][lane]`, a's zero point in the padding), and four
//! neighbouring columns of one window row multiplied at once by one
//! `vpdpbusd`: the 64 bytes of four consecutive tile positions are put in
//! each channel's order of taps by one `vpermb`, against that window
//! row's weights (four per channel, the fourth of a three-wide row zero).
//! A 3×3 window is three instructions per output position and sixteen
//! channels. The sums are those of the reference modulo 2³²: with b's
//! zero point 0 (symmetric weights), `Σ (x − a0)·w = Σ x·w − a0·Σ w`, the
//! second term a constant of each channel that goes to the epilogue with
//! its bias; padding holds `a0` (adding nothing once the constant is
//! taken off), `vpdpbusd` multiplies exact u8 by i8 and wraps.

use super::super::epilogue::{self, Line};
use super::blocks::{Strips, LANES};
use super::{Geometry, Task, TAPS};
use crate::kernels::cells::Load;
use core::arch::x86_64::*;
use core::ops::Range;

/// Tile positions: as the blocks' ([`Strips`] cut strips to fit them).
const IN_CAP: usize = super::blocks::IN_CAP;
/// Positions past a row's last one that the last quad of a window row
/// reads (times a zero weight).
const SLACK: usize = 3;
/// Output positions of a strip, a multiple of sixteen (the sums leave
/// through 16×16 transposes).
const OUT_CAP: usize = super::blocks::OUT_CAP;
/// Quads of taps per window at most (`kh · ⌈kw / 4⌉`).
const QUADS: usize = TAPS;

/// Whether the CPU can run this path (besides `Isa::Vnni`'s AVX-512 F,
/// BW and VNNI): `vpermb` is VBMI.
pub(super) fn cpu_has_vbmi() -> bool {
    #[cfg(feature = "std")]
    {
        std::is_x86_feature_detected!("avx512vbmi")
    }
    #[cfg(not(feature = "std"))]
    {
        cfg!(target_feature = "avx512vbmi")
    }
}

/// Whether `g` fits this path: no column dilation (a quad is four
/// adjacent positions), windows of at most [`QUADS`] quads.
pub(super) fn fits(g: &Geometry) -> bool {
    g.dx == 1 && g.kh * g.kw.div_ceil(4) <= QUADS
}

/// The byte tile, aligned for whole-line loads.
#[repr(align(64))]
struct Tile([[u8; LANES]; IN_CAP + SLACK + 1]);

/// Sums, position-major then channel-major.
#[repr(align(64))]
struct Sums([[i32; LANES]; OUT_CAP]);

/// [`Task::quads`] compiled for its instruction set; the caller
/// guarantees AVX-512 F, BW, VNNI and VBMI.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vbmi")]
pub(super) fn quads_avx512<X: Load<u8>, W: Load<u8>>(
    t: &Task<'_, X, W>,
    st: &Strips,
    mine: Range<usize>,
) {
    t.quads(st, mine);
}

impl<X: Load<u8>, W: Load<u8>> Task<'_, X, W> {
    /// The planes `mine`, [`LANES`] at a time; every channel's b0 is 0
    /// (the caller checked).
    #[inline(always)]
    fn quads(&self, st: &Strips, mine: Range<usize>) {
        let g = self.g;
        let (q, flips) = (self.q, g.flips);
        let ntaps = g.kh * g.kw;
        let nq = g.kw.div_ceil(4);
        let plane_len = g.oh * g.ow;
        let mut tile = Tile([[0u8; LANES]; IN_CAP + SLACK + 1]);
        let mut sums = Sums([[0i32; LANES]; OUT_CAP]);
        let mut planar = Sums([[0i32; LANES]; OUT_CAP]);
        // Window row ty's quad k: byte 4c + i is channel c's tap
        // (ty, 4k + i), zero past the row.
        let mut weights = [[0i8; 4 * LANES]; QUADS];
        let a0 = g.a0 as i32;
        let mut p0 = mine.start;
        while p0 < mine.end {
            let n = LANES.min(mine.end - p0);
            // A short block's spare lanes repeat its last plane (read, never
            // written).
            let planes: [usize; LANES] = core::array::from_fn(|l| p0 + l.min(n - 1));
            let mut lines = [None::<Line>; LANES];
            for (l, &plane) in planes.iter().enumerate() {
                let channel = plane % g.groups;
                let (bias, scale, _) = q.channel(plane * plane_len);
                let mut total = 0i32;
                for t in 0..ntaps {
                    let v = (self.w.load(channel * ntaps + t) ^ flips.1) as i8;
                    let (ty, tx) = (t / g.kw, t % g.kw);
                    weights[ty * nq + tx / 4][4 * l + tx % 4] = v;
                    total = total.wrapping_add(v.into());
                }
                lines[l] = Some(q.line(bias, scale, 0, total.wrapping_mul(a0).wrapping_neg()));
            }
            let mut oy0 = 0;
            while oy0 < g.oh {
                let rows = st.rows.min(g.oh - oy0);
                self.fill_bytes(st, &mut tile, &planes, oy0, rows);
                let count = rows * g.ow;
                // SAFETY: the instruction sets are the caller's
                // (`quads_avx512`); the tile holds every position the
                // strip reads (`Strips::of`, plus `SLACK`), `sums` every
                // output position (`count ≤ OUT_CAP`).
                #[allow(unsafe_code)]
                unsafe {
                    match (g.kh, nq) {
                        (3, 1) => strip::<3, 1>(g, st, &tile, &weights, rows, &mut sums),
                        (5, 2) => strip::<5, 2>(g, st, &tile, &weights, rows, &mut sums),
                        _ => strip_any(g, st, &tile, &weights, rows, &mut sums),
                    }
                    to_planes(&sums, count, &mut planar);
                }
                let planar = planar.0.as_flattened();
                for (l, line) in lines.iter().enumerate().take(n) {
                    let Some(line) = line else { continue };
                    let at = planes[l] * plane_len + oy0 * g.ow;
                    let raw = &planar[l * OUT_CAP..l * OUT_CAP + count];
                    epilogue::row(self.isa, raw, None, line, self.out, at);
                }
                oy0 += rows;
            }
            p0 += n;
        }
    }

    /// The padded input of output rows `oy0..oy0 + rows` of `planes`
    /// (u8 side) into `tile` (row `r` of the strip at `r·pw`), `a0` in the
    /// padding: sixteen columns of the sixteen planes at a time, loaded
    /// straight from the tensor and turned by one 16×16 byte transpose.
    #[inline(always)]
    fn fill_bytes(
        &self,
        st: &Strips,
        tile: &mut Tile,
        planes: &[usize; LANES],
        oy0: usize,
        rows: usize,
    ) {
        let g = self.g;
        let pw = st.pw;
        let pad = [g.a0 as u8; LANES];
        let px = g.px as usize;
        let (lo, hi) = (px.min(pw), (px + g.iw).min(pw));
        let plane_in = g.ih * g.iw;
        let (base, count) = (self.x.ptr(), self.x.count());
        // SAFETY: SSE2 is part of every x86-64 CPU.
        #[allow(unsafe_code)]
        let flip = unsafe { _mm_set1_epi8(g.flips.0 as i8) };
        for r in 0..Strips::input_rows(g, rows) {
            let line = &mut tile.0[r * pw..(r + 1) * pw];
            let iy = (oy0 * g.sy + r) as isize - g.py;
            if iy < 0 || iy as usize >= g.ih || lo == hi {
                line.fill(pad);
                continue;
            }
            line[..lo].fill(pad);
            line[hi..].fill(pad);
            let from = iy as usize * g.iw;
            let line = &mut line[lo..hi];
            for (j, cells) in (0..).step_by(16).zip(line.chunks_mut(16)) {
                // SAFETY: each load reads sixteen bytes inside the tensor
                // (`at + 16 ≤ count`) or copies the ones there are; the
                // stores are of whole `[u8; 16]` cells.
                #[allow(unsafe_code)]
                unsafe {
                    let mut v = [_mm_setzero_si128(); 16];
                    for (v, &p) in v.iter_mut().zip(planes) {
                        let at = p * plane_in + from + j;
                        *v = if at + 16 <= count {
                            _mm_loadu_si128(base.add(at).cast())
                        } else {
                            let mut b = [0u8; 16];
                            for (i, b) in b.iter_mut().enumerate().take(count.saturating_sub(at)) {
                                *b = *base.add(at + i);
                            }
                            _mm_loadu_si128(b.as_ptr().cast())
                        };
                    }
                    for _ in 0..4 {
                        let mut t = v;
                        for k in 0..8 {
                            t[2 * k] = _mm_unpacklo_epi8(v[k], v[k + 8]);
                            t[2 * k + 1] = _mm_unpackhi_epi8(v[k], v[k + 8]);
                        }
                        v = t;
                    }
                    for (cell, v) in cells.iter_mut().zip(v) {
                        _mm_storeu_si128(cell.as_mut_ptr().cast(), _mm_xor_si128(v, flip));
                    }
                }
            }
        }
    }
}

/// Byte `4c + i` of a quad is byte `16i + c` of four positions' 64.
#[inline(always)]
fn quad_order() -> __m512i {
    let idx: [u8; 64] = core::array::from_fn(|b| (16 * (b % 4) + b / 4) as u8);
    // SAFETY: an unaligned load of 64 bytes from an array of 64.
    #[allow(unsafe_code)]
    unsafe {
        _mm512_loadu_si512(idx.as_ptr().cast())
    }
}

/// The sums of a strip of `rows` output rows, `ow` apart, for windows of
/// `KH` rows of `NQ` quads (the weights in registers).
///
/// # Safety
/// AVX-512 F, BW, VNNI and VBMI; `tile` holds every position the strip
/// reads, `sums` its `rows · ow` positions.
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn strip<const KH: usize, const NQ: usize>(
    g: &Geometry,
    st: &Strips,
    tile: &Tile,
    weights: &[[i8; 4 * LANES]; QUADS],
    rows: usize,
    sums: &mut Sums,
) {
    let order = quad_order();
    let w: [[__m512i; NQ]; KH] = core::array::from_fn(|ty| {
        core::array::from_fn(|k| _mm512_loadu_si512(weights[ty * NQ + k].as_ptr().cast()))
    });
    let step = g.dy * st.pw;
    let base = tile.0.as_ptr().cast::<u8>();
    let mut out = sums.0.as_mut_ptr().cast::<__m512i>();
    for r in 0..rows {
        let mut at = r * g.sy * st.pw;
        for _ in 0..g.ow {
            let mut acc = _mm512_setzero_si512();
            for (ty, w) in w.iter().enumerate() {
                for (k, &w) in w.iter().enumerate() {
                    let p = base.add((at + ty * step + 4 * k) * LANES);
                    let x = _mm512_permutexvar_epi8(order, _mm512_loadu_si512(p.cast()));
                    acc = _mm512_dpbusd_epi32(acc, x, w);
                }
            }
            _mm512_store_si512(out, acc);
            out = out.add(1);
            at += g.sx;
        }
    }
}

/// [`strip`] for any window (the weights loaded per position).
///
/// # Safety
/// As [`strip`].
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn strip_any(
    g: &Geometry,
    st: &Strips,
    tile: &Tile,
    weights: &[[i8; 4 * LANES]; QUADS],
    rows: usize,
    sums: &mut Sums,
) {
    let order = quad_order();
    let nq = g.kw.div_ceil(4);
    let step = g.dy * st.pw;
    let base = tile.0.as_ptr().cast::<u8>();
    let mut out = sums.0.as_mut_ptr().cast::<__m512i>();
    for r in 0..rows {
        let mut at = r * g.sy * st.pw;
        for _ in 0..g.ow {
            let mut acc = _mm512_setzero_si512();
            for ty in 0..g.kh {
                for k in 0..nq {
                    let w = _mm512_loadu_si512(weights[ty * nq + k].as_ptr().cast());
                    let p = base.add((at + ty * step + 4 * k) * LANES);
                    let x = _mm512_permutexvar_epi8(order, _mm512_loadu_si512(p.cast()));
                    acc = _mm512_dpbusd_epi32(acc, x, w);
                }
            }
            _mm512_store_si512(out, acc);
            out = out.add(1);
            at += g.sx;
        }
    }
}

/// `planar[l · OUT_CAP + p] = sums[p][l]` for the first `count` positions
/// (rounded up to sixteen), by 16×16 transposes.
///
/// # Safety
/// AVX-512 F.
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn to_planes(sums: &Sums, count: usize, planar: &mut Sums) {
    let src = sums.0.as_ptr().cast::<__m512i>();
    let dst = planar.0.as_mut_ptr().cast::<i32>();
    for p0 in (0..count.min(OUT_CAP)).step_by(16) {
        let r: [__m512i; 16] = core::array::from_fn(|i| _mm512_load_si512(src.add(p0 + i)));
        for (c, v) in crate::kernels::transpose16::transpose16(r)
            .into_iter()
            .enumerate()
        {
            _mm512_storeu_si512(dst.add(c * OUT_CAP + p0).cast(), v);
        }
    }
}

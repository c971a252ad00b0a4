//! Depthwise convolutions [`LANES`] planes at a time, the planes in
//! vector lanes. A plane of 14×14 or 7×7 (hundreds of them per layer in
//! mobilenet and efficientnet) is too small for a vector along its rows
//! to pay for the per-plane setup ([`super::Band`]): widening, padding,
//! phases, the epilogue per band. Here a block of planes shares that
//! setup: a strip of their padded input rows is widened once into a
//! channels-last tile (`tile[position][lane]`, zero in the padding), each
//! output position's sums are one vector of [`LANES`] channels (every tap
//! a multiply-add of a tile vector by that tap's weights across the
//! channels, the weights of a 3×3 or 5×5 window kept in registers), and
//! each plane's strip of sums goes through the epilogue in one call. The
//! sums are the reference's modulo 2³² (wrapping i32; products of two
//! i16, as the band path's), so the bytes are the same.

use super::super::epilogue::{self, Line};
use super::{Geometry, Task, TAPS};
use crate::kernels::cells::Load;
use core::ops::Range;

/// Planes per block: sixteen i32 lanes fill one AVX-512 vector (two with
/// AVX2).
pub(super) const LANES: usize = 16;
/// Tile positions (padded input columns × rows of a strip): 32 KiB of
/// i16 lanes, within the default worker stack (2 MiB) with room to spare.
pub(super) const IN_CAP: usize = 1024;
/// Output positions of a strip: 16 KiB of i32 lanes.
pub(super) const OUT_CAP: usize = 256;

/// How a plane's output rows are cut into strips whose padded input fits
/// the tile.
#[derive(Clone, Copy)]
pub(super) struct Strips {
    /// Padded input columns a row of outputs reads (the tile's width).
    pub(super) pw: usize,
    /// Output rows per strip (the last may have fewer).
    pub(super) rows: usize,
}

impl Strips {
    /// The strips of `g`, as even as they come; `None` where not even one
    /// output row fits.
    pub(super) fn of(g: &Geometry) -> Option<Strips> {
        if g.oh == 0 || g.ow == 0 || g.sy == 0 || g.sx == 0 || g.kh * g.kw > TAPS {
            return None;
        }
        let pw = (g.ow - 1) * g.sx + (g.kw - 1) * g.dx + 1;
        let fits = |rows: usize| Self::input_rows(g, rows) * pw <= IN_CAP && rows * g.ow <= OUT_CAP;
        if !fits(1) {
            return None;
        }
        let mut most = 1;
        while most < g.oh && fits(most + 1) {
            most += 1;
        }
        // As many strips as the largest fitting one needs, evened out (a
        // 28-row plane in four strips of 7, not 9 + 9 + 9 + 1).
        let strips = g.oh.div_ceil(most);
        Some(Strips {
            pw,
            rows: g.oh.div_ceil(strips),
        })
    }

    /// Padded input rows a strip of `rows` output rows reads.
    pub(super) fn input_rows(g: &Geometry, rows: usize) -> usize {
        (rows - 1) * g.sy + (g.kh - 1) * g.dy + 1
    }
}

impl<X: Load<u8>, W: Load<u8>> Task<'_, X, W> {
    /// The planes `mine`, [`LANES`] at a time; inlined into each
    /// instruction set's copy.
    #[inline(always)]
    pub(super) fn blocks(&self, st: &Strips, mine: Range<usize>) {
        let g = self.g;
        let (q, dom, flips) = (self.q, self.dom, g.flips);
        let ntaps = g.kh * g.kw;
        let plane_len = g.oh * g.ow;
        let mut tile = [[0i16; LANES]; IN_CAP];
        let mut sums = [[0i32; LANES]; OUT_CAP];
        let mut row = [0i32; OUT_CAP];
        let mut weights = [[0i16; LANES]; TAPS];
        // Each tap's position in the tile relative to its output's first.
        let offs: [usize; TAPS] = core::array::from_fn(|t| {
            if t < ntaps {
                t / g.kw * g.dy * st.pw + t % g.kw * g.dx
            } else {
                0
            }
        });
        let mut p0 = mine.start;
        while p0 < mine.end {
            let n = LANES.min(mine.end - p0);
            // A short block's spare lanes repeat its last plane (read, never
            // written).
            let planes: [usize; LANES] = core::array::from_fn(|l| p0 + l.min(n - 1));
            let mut lines = [None::<Line>; LANES];
            for (l, &plane) in planes.iter().enumerate() {
                let channel = plane % g.groups;
                let (bias, scale, b0) = q.channel(plane * plane_len);
                let b0 = dom.b0(b0);
                lines[l] = Some(q.line(bias, scale, 0, 0));
                for (t, w) in weights.iter_mut().enumerate().take(ntaps) {
                    let v = self.w.load(channel * ntaps + t) ^ flips.1;
                    // Within i16: `run_depthwise` checked every channel's b0.
                    w[l] = (i32::from(v as i8) - b0) as i16;
                }
            }
            let mut oy0 = 0;
            while oy0 < g.oh {
                let rows = st.rows.min(g.oh - oy0);
                self.fill(st, &mut tile, &planes, oy0, rows);
                let taps = (&offs[..ntaps], &weights[..ntaps]);
                match (g.kh, g.kw, g.dx) {
                    (3, 3, 1) => sum_fixed::<3, 3>(g, st, &tile, &weights, rows, &mut sums),
                    (5, 5, 1) => sum_fixed::<5, 5>(g, st, &tile, &weights, rows, &mut sums),
                    _ => sum_any(g, st, &tile, taps, rows, &mut sums),
                }
                let count = rows * g.ow;
                for (l, line) in lines.iter().enumerate().take(n) {
                    let Some(line) = line else { continue };
                    for (r, s) in row.iter_mut().zip(&sums[..count]) {
                        *r = s[l];
                    }
                    let at = planes[l] * plane_len + oy0 * g.ow;
                    epilogue::row(self.isa, &row[..count], None, line, self.out, at);
                }
                oy0 += rows;
            }
            p0 += n;
        }
    }

    /// The padded input of output rows `oy0..oy0 + rows` of `planes`,
    /// widened to `x − a0` into `tile` (row `r` of the strip at
    /// `r·pw`), zero in the padding.
    #[inline(always)]
    fn fill(
        &self,
        st: &Strips,
        tile: &mut [[i16; LANES]; IN_CAP],
        planes: &[usize; LANES],
        oy0: usize,
        rows: usize,
    ) {
        let g = self.g;
        let (flip, a0) = (g.flips.0, g.a0);
        let pw = st.pw;
        // Tile column j holds input column j − px: the image's columns are
        // `lo..hi`.
        let px = g.px as usize;
        let (lo, hi) = (px.min(pw), (px + g.iw).min(pw));
        let plane_in = g.ih * g.iw;
        for r in 0..Strips::input_rows(g, rows) {
            let line = &mut tile[r * pw..(r + 1) * pw];
            let iy = (oy0 * g.sy + r) as isize - g.py;
            if iy < 0 || iy as usize >= g.ih || lo == hi {
                line.fill([0; LANES]);
                continue;
            }
            line[..lo].fill([0; LANES]);
            line[hi..].fill([0; LANES]);
            let from = iy as usize * g.iw;
            // Loops rather than `array::from_fn`, whose closures were
            // left out of line (without the caller's instruction set).
            let mut starts = [0usize; LANES];
            for (s, &p) in starts.iter_mut().zip(planes) {
                *s = p * plane_in + from;
            }
            let line = &mut line[lo..hi];
            // Sixteen columns of the sixteen planes at a time, turned
            // channels-last by one 16×16 byte transpose (a byte at a time
            // was most of this path's time).
            for (j, cells) in (0..).step_by(16).zip(line.chunks_mut(16)) {
                let mut block = [[0u8; 16]; LANES];
                for (b, &s) in block.iter_mut().zip(&starts) {
                    *b = load16(self.x, s + j, cells.len());
                }
                let cols = transpose16(&block);
                for (cell, col) in cells.iter_mut().zip(&cols) {
                    for (c, &b) in cell.iter_mut().zip(col) {
                        *c = i16::from(b ^ flip) - a0;
                    }
                }
            }
        }
    }
}

/// Sixteen bytes of `x` from `at`: straight from it where it holds them
/// (those past the `take` wanted are read and ignored), else the `take`
/// that are there (the tensor's end) and zeros.
#[inline(always)]
fn load16<X: Load<u8>>(x: X, at: usize, take: usize) -> [u8; 16] {
    if at + 16 <= x.count() {
        return super::copy(x.sub(at, 16));
    }
    let mut bytes = [0u8; 16];
    for (i, b) in bytes
        .iter_mut()
        .enumerate()
        .take(take.min(x.count().saturating_sub(at)))
    {
        *b = x.load(at + i);
    }
    bytes
}

/// `out[j][l] = rows[l][j]`: four rounds of interleaving rows `k` and
/// `k + 8` (SSE2, the baseline of x86-64: 32 `punpck{l,h}bw`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn transpose16(rows: &[[u8; 16]; 16]) -> [[u8; 16]; 16] {
    use core::arch::x86_64::*;
    // SAFETY: SSE2 is part of every x86-64 CPU; the loads and stores are
    // of whole `[u8; 16]`, unaligned.
    #[allow(unsafe_code)]
    unsafe {
        let mut v = [_mm_setzero_si128(); 16];
        for (v, row) in v.iter_mut().zip(rows) {
            *v = _mm_loadu_si128(row.as_ptr().cast());
        }
        for _ in 0..4 {
            let mut t = v;
            for k in 0..8 {
                t[2 * k] = _mm_unpacklo_epi8(v[k], v[k + 8]);
                t[2 * k + 1] = _mm_unpackhi_epi8(v[k], v[k + 8]);
            }
            v = t;
        }
        let mut out = [[0u8; 16]; 16];
        for (o, x) in out.iter_mut().zip(v) {
            _mm_storeu_si128(o.as_mut_ptr().cast(), x);
        }
        out
    }
}

/// `out[j][l] = rows[l][j]`, element by element.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn transpose16(rows: &[[u8; 16]; 16]) -> [[u8; 16]; 16] {
    core::array::from_fn(|j| core::array::from_fn(|l| rows[l][j]))
}

/// One output position's sums across the lanes: `Σ_t tile[at + off_t]·w_t`.
#[inline(always)]
fn position(
    tile: &[[i16; LANES]],
    at: usize,
    offs: &[usize],
    weights: &[[i16; LANES]],
) -> [i32; LANES] {
    let mut acc = [0i32; LANES];
    for (&off, w) in offs.iter().zip(weights) {
        let xs = &tile[at + off];
        for ((a, &x), &w) in acc.iter_mut().zip(xs).zip(w) {
            // Exact: two i16 (|x − a0| ≤ 255, |w − b0| ≤ 32,000).
            *a = a.wrapping_add(i32::from(x) * i32::from(w));
        }
    }
    acc
}

/// The sums of a strip of `rows` output rows, `ow` apart in `sums`.
#[inline(always)]
fn sum_any(
    g: &Geometry,
    st: &Strips,
    tile: &[[i16; LANES]; IN_CAP],
    (offs, weights): (&[usize], &[[i16; LANES]]),
    rows: usize,
    sums: &mut [[i32; LANES]; OUT_CAP],
) {
    for r in 0..rows {
        let line = r * g.sy * st.pw;
        for (ox, s) in sums[r * g.ow..(r + 1) * g.ow].iter_mut().enumerate() {
            *s = position(tile, line + ox * g.sx, offs, weights);
        }
    }
}

/// [`sum_any`] for `KH × KW` windows without column dilation: the
/// weights copied into a fixed array once, so that a 3×3 or 5×5 window's
/// stay in registers across the strip, and each window row one slice of
/// `KW` tile positions (one bounds check, the taps' offsets constants).
#[inline(always)]
fn sum_fixed<const KH: usize, const KW: usize>(
    g: &Geometry,
    st: &Strips,
    tile: &[[i16; LANES]; IN_CAP],
    weights: &[[i16; LANES]; TAPS],
    rows: usize,
    sums: &mut [[i32; LANES]; OUT_CAP],
) {
    let w: [[[i16; LANES]; KW]; KH] =
        core::array::from_fn(|ty| core::array::from_fn(|tx| weights[ty * KW + tx]));
    let step = g.dy * st.pw;
    for r in 0..rows {
        let line = r * g.sy * st.pw;
        for (ox, s) in sums[r * g.ow..(r + 1) * g.ow].iter_mut().enumerate() {
            let at = line + ox * g.sx;
            let mut acc = [0i32; LANES];
            for (ty, w) in w.iter().enumerate() {
                let xs = &tile[at + ty * step..at + ty * step + KW];
                for (xs, w) in xs.iter().zip(w) {
                    for ((a, &x), &w) in acc.iter_mut().zip(xs).zip(w) {
                        // Exact: two i16, as in `position`.
                        *a = a.wrapping_add(i32::from(x) * i32::from(w));
                    }
                }
            }
            *s = acc;
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use super::{Strips, Task};
    use crate::kernels::cells::Load;
    use core::ops::Range;

    /// [`Task::blocks`] compiled for AVX-512; the caller guarantees
    /// AVX-512 F and BW.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(in super::super) fn blocks_avx512<X: Load<u8>, W: Load<u8>>(
        t: &Task<'_, X, W>,
        st: &Strips,
        mine: Range<usize>,
    ) {
        t.blocks(st, mine);
    }

    /// [`Task::blocks`] compiled for AVX2; the caller guarantees AVX2.
    #[target_feature(enable = "avx2")]
    pub(in super::super) fn blocks_avx2<X: Load<u8>, W: Load<u8>>(
        t: &Task<'_, X, W>,
        st: &Strips,
        mine: Range<usize>,
    ) {
        t.blocks(st, mine);
    }
}

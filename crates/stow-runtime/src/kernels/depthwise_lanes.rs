//! Depthwise convolution of small planes with AVX-512: sixteen planes at
//! a time, one per vector lane.
//!
//! The bands (`depthwise.rs`) work plane by plane, and on a 7 × 7 or
//! 14 × 14 plane their per-plane work (copying rows into a padded
//! buffer, loading the taps, writing the rows out) costs more than the
//! multiply-adds. Here the padded inputs of sixteen planes are turned
//! channels-last into a tile (`tile[position][lane]`) by 16 × 16
//! transposes; each output position is then one multiply-add of whole
//! vectors per tap (a tap's sixteen weights in one register, every load
//! aligned, the padding plain zeros in the tile), [`BLOCK`] positions of a
//! row at a time so that their sums are independent chains; and the sums
//! leave through transposes straight into the output planes.
//!
//! The sums are the bands' to the bit: each output's taps in the same
//! order, fused, from zero, the bias added last. Only planes whose padded
//! input fits the tile ([`TILE`] positions, about 18 × 18) take this path;
//! larger planes amortise the bands' setup.

use super::cells::Load;
use super::finish16::Finish16;
use super::gemm::Finish;
use super::linalg::ConvShape;
use super::transpose16::transpose16;
use core::arch::x86_64::*;
use core::cell::Cell;
use core::ops::Range;

/// Planes per vector.
const LANES: usize = 16;

/// Positions of the tile: a ring of padded input rows (28 KiB of stack,
/// and [`SLACK`] more).
const TILE: usize = 448;

/// Positions past the ring that a row's last block may read (its sums
/// are dropped).
const SLACK: usize = 64;

/// Output positions of a strip's sums (16 KiB of stack, and [`BLOCK`]
/// more for the last block's overrun).
const SUMS: usize = 256;

/// Positions of one output row summed at once.
const BLOCK: usize = 8;

/// Taps of a kernel plane at most (7 × 7).
const MAX_TAPS: usize = 49;

/// Rows of a kernel plane at most.
const MAX_ROWS: usize = 7;

/// The tile: position-major, a plane per lane.
#[repr(align(64))]
struct Tile([[f32; LANES]; TILE + SLACK]);

/// The sums, position-major, a plane per lane.
#[repr(align(64))]
struct Sums([[f32; LANES]; SUMS + BLOCK]);

/// How a convolution's planes go through the tile: strips of output
/// rows, and the ring of padded input rows they read.
pub(super) struct Lanes {
    /// Positions per tile row: the padded input row or the windows'
    /// reach, whichever is wider.
    pw: usize,
    /// Rows of the ring: the padded input rows one strip reads.
    ring: usize,
    /// Output rows per strip.
    strip: usize,
}

impl Lanes {
    /// The layout for `s`, or `None` when this path does not apply: no
    /// AVX-512 F, a depth axis, strides above 2, a window of more than
    /// [`MAX_TAPS`] taps or [`MAX_ROWS`] rows, rows too wide for the tile.
    /// `in_place`: the output is written over the input, which strips
    /// may do only where each output row lands on input rows already read
    /// (same plane shape, row stride 1, no more padding above than the
    /// window reaches below); otherwise a whole plane must fit the tile.
    pub(super) fn of(s: &ConvShape, in_place: bool) -> Option<Lanes> {
        if super::gemm::Isa::detect() != super::gemm::Isa::Avx512 {
            return None;
        }
        let w = &s.window;
        let [id, ih, iw] = w.input;
        let [od, oh, ow] = w.output;
        let [kd, kh, kw] = w.kernel;
        let [_, sy, sx] = w.strides;
        let [_, dy, dx] = w.dilations;
        let one_or_two = |v: usize| (1..=2).contains(&v);
        if (id, od, kd) != (1, 1, 1)
            || kh * kw == 0
            || kh * kw > MAX_TAPS
            || kh > MAX_ROWS
            || !one_or_two(sy)
            || !one_or_two(sx)
            || dy == 0
            || dx == 0
            || [ih, iw, oh, ow].contains(&0)
        {
            return None;
        }
        let pw = (iw + w.pad[2] + w.pad_after[2]).max((ow - 1) * sx + (kw - 1) * dx + 1);
        // Padded rows a strip of `r` output rows reads; the farthest
        // column a row's blocks read (the last block runs up to BLOCK − 1
        // positions past the row: those sums are dropped).
        let span = |r: usize| (r - 1) * sy + (kh - 1) * dy + 1;
        let reach = (ow.div_ceil(BLOCK) * BLOCK - 1) * sx + (kw - 1) * dx;
        let fits = |r: usize| {
            let ring = span(r);
            ring * pw <= TILE
                && (ring - 1) * pw + reach < TILE + SLACK
                && (r - 1) * ow + ow.div_ceil(BLOCK) * BLOCK <= SUMS + BLOCK
                && (r * ow).div_ceil(LANES) * LANES <= SUMS + BLOCK
        };
        let most = (1..=oh).take_while(|&r| fits(r)).last()?;
        let rows_over_read = oh == ih && ow == iw && sy == 1 && w.pad[1] <= (kh - 1) * dy;
        if in_place && most < oh && !rows_over_read {
            return None;
        }
        // A whole plane in one strip where it fits; else strips whose sums
        // are whole transposes, where that costs at most half the rows.
        let strip = if most == oh {
            oh
        } else {
            (most.div_ceil(2)..=most)
                .rev()
                .find(|r| (r * ow).is_multiple_of(LANES))
                .unwrap_or(most)
        };
        Some(Lanes {
            pw,
            ring: span(strip),
            strip,
        })
    }
}

#[cfg(test)]
impl Lanes {
    /// Output rows per strip.
    pub(super) fn strip(&self) -> usize {
        self.strip
    }
}

/// Writes `bias(p)` plus the convolution of plane `p` of `x` with
/// `weight` over output plane `p` of `out` for every `p` in `planes`,
/// then `finish`; `out` starts at output plane `first`. Planes go sixteen
/// at a time: `read(end)` runs once the inputs of planes `..end` are
/// read, `store(end)` before the first output of those planes is
/// written (an in-place caller waits there for other threads). Each input
/// row is read once, in order, and an output row is written once the
/// strip that holds it is summed.
/// False, having done nothing, when an operand is shorter than `s` says.
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    lanes: &Lanes,
    s: &ConvShape,
    x: impl Load<f32>,
    weight: impl Load<f32>,
    bias: impl Fn(usize) -> f32,
    out: &[Cell<f32>],
    planes: Range<usize>,
    first: usize,
    finish: Finish,
    hooks: (impl FnMut(usize), impl FnMut(usize)),
) -> bool {
    let w = &s.window;
    let (ip, op) = (w.input_plane(), w.output_plane());
    let taps = w.kernel[1] * w.kernel[2];
    if planes.is_empty() {
        return true;
    }
    if planes.start < first
        || planes.end * ip > x.count()
        || (planes.end - first) * op > out.len()
        || s.groups == 0
        || s.groups * taps > weight.count()
    {
        return false;
    }
    // SAFETY: `Lanes::of` found AVX-512 F (with AVX2 and FMA, which
    // `Isa::Avx512` implies); the operands' lengths were checked above.
    #[allow(unsafe_code)]
    unsafe {
        lanes_avx512(lanes, s, x, weight, bias, out, planes, first, finish, hooks)
    };
    true
}

/// [`run`] compiled for AVX-512.
///
/// # Safety
/// AVX-512 F, AVX2 and FMA; `x` holds `planes.end` input planes, `out`
/// `planes.end − first` output planes, `weight` `groups` kernel planes.
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(unsafe_code, clippy::too_many_arguments)]
unsafe fn lanes_avx512(
    lanes: &Lanes,
    s: &ConvShape,
    x: impl Load<f32>,
    weight: impl Load<f32>,
    bias: impl Fn(usize) -> f32,
    out: &[Cell<f32>],
    planes: Range<usize>,
    first: usize,
    finish: Finish,
    (mut read, mut store): (impl FnMut(usize), impl FnMut(usize)),
) {
    let w = &s.window;
    let [ih, iw] = [w.input[1], w.input[2]];
    let [oh, ow] = [w.output[1], w.output[2]];
    let [kh, kw] = [w.kernel[1], w.kernel[2]];
    let (ip, op, taps) = (ih * iw, oh * ow, kh * kw);
    // The padding columns stay zero: the fill writes only the input's.
    let mut tile = Tile([[0.0; LANES]; TILE + SLACK]);
    let mut sums = Sums([[0.0; LANES]; SUMS + BLOCK]);
    let mut weights = [[0f32; LANES]; MAX_TAPS];
    let ring = Ring {
        tile: tile.0.as_mut_ptr().cast::<__m512>(),
        rows: lanes.ring,
        pw: lanes.pw,
        top: w.pad[1],
        left: w.pad[2],
        ih,
        iw,
    };
    let sums = sums.0.as_mut_ptr().cast::<__m512>();
    let (xp, outp) = (x.ptr(), out.as_ptr() as *mut f32);
    let finish16 = Finish16::of(finish);
    let mut p0 = planes.start;
    while p0 < planes.end {
        let n = LANES.min(planes.end - p0);
        // A short block's spare lanes repeat its last plane (read, never
        // written).
        let lane_plane: [usize; LANES] = core::array::from_fn(|l| p0 + l.min(n - 1));
        let mut starts = [xp; LANES];
        for (start, &p) in starts.iter_mut().zip(&lane_plane) {
            *start = xp.add(p * ip);
        }
        let mut biases = [0f32; LANES];
        for (l, &p) in lane_plane.iter().enumerate() {
            biases[l] = bias(p);
        }
        let c0 = p0 % s.groups;
        if c0 + LANES <= s.groups {
            // Sixteen channels' kernels lie one after another.
            transpose_taps(weight.ptr().add(c0 * taps), taps, &mut weights);
        } else {
            for (l, &p) in lane_plane.iter().enumerate() {
                let ch = p % s.groups;
                for (t, tap) in weights[..taps].iter_mut().enumerate() {
                    tap[l] = weight.load(ch * taps + t);
                }
            }
        }
        let bias = _mm512_loadu_ps(biases.as_ptr());
        let mut filled = 0;
        for oy0 in (0..oh).step_by(lanes.strip) {
            let rows = lanes.strip.min(oh - oy0);
            let needed = (oy0 + rows - 1) * w.strides[1] + (kh - 1) * w.dilations[1] + 1;
            // Rows between strips that no window reads (a row stride of 2
            // and a one-row window) are skipped: a strip fills at most
            // the ring's rows, so it overwrites none it reads.
            ring.fill(&starts, filled.max(oy0 * w.strides[1])..needed);
            filled = filled.max(needed);
            if oy0 + rows == oh {
                read(p0 + n);
            }
            // The strip's rows lie within one turn of the ring from its
            // first: one division per strip.
            let first_slot = oy0 * w.strides[1] % lanes.ring;
            for r in 0..rows {
                let oy = oy0 + r;
                let mut row = [ring.tile.cast_const(); MAX_ROWS];
                for (ky, row) in row.iter_mut().enumerate().take(kh) {
                    let r = oy * w.strides[1] + ky * w.dilations[1];
                    *row = ring.row_after(oy0 * w.strides[1], first_slot, r);
                }
                let at = sums.add(r * ow);
                match (kh, kw, w.strides[2], w.dilations[2]) {
                    (3, 3, 1, 1) => sum_row::<3, 3, 1>(&row, &weights, at, ow),
                    (3, 3, 2, 1) => sum_row::<3, 3, 2>(&row, &weights, at, ow),
                    (5, 5, 1, 1) => sum_row::<5, 5, 1>(&row, &weights, at, ow),
                    (5, 5, 2, 1) => sum_row::<5, 5, 2>(&row, &weights, at, ow),
                    (_, _, sx, dx) => sum_row_any(&row[..kh], kw, sx, dx, &weights, at, ow),
                }
            }
            if oy0 == 0 {
                store(p0 + n);
            }
            let count = rows * ow;
            for f0 in (0..count).step_by(LANES) {
                let mask = lane_mask(count - f0);
                let mut r = [_mm512_setzero_si512(); LANES];
                for (i, r) in r.iter_mut().enumerate() {
                    let v = _mm512_add_ps(bias, *sums.add(f0 + i));
                    *r = _mm512_castps_si512(finish16.apply(v));
                }
                for (l, v) in transpose16(r).into_iter().enumerate().take(n) {
                    let at = (p0 + l - first) * op + oy0 * ow + f0;
                    _mm512_mask_storeu_ps(outp.add(at), mask, _mm512_castsi512_ps(v));
                }
            }
        }
        p0 += n;
    }
}

/// The first `m` of sixteen lanes (all of them from 16 on).
#[inline(always)]
fn lane_mask(m: usize) -> __mmask16 {
    if m >= LANES {
        u16::MAX
    } else {
        (1u16 << m) - 1
    }
}

/// `weights[t][l]` = `kernels[l · taps + t]` for sixteen kernels of `taps`
/// taps lying one after another: sixteen taps at a time, one masked load
/// per kernel and a transpose.
///
/// # Safety
/// AVX-512 F; `kernels` holds `16 · taps` values; `taps ≤ MAX_TAPS`.
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn transpose_taps(kernels: *const f32, taps: usize, weights: &mut [[f32; LANES]; MAX_TAPS]) {
    for t0 in (0..taps).step_by(LANES) {
        let mask = lane_mask(taps - t0);
        let mut r = [_mm512_setzero_si512(); LANES];
        for (l, r) in r.iter_mut().enumerate() {
            *r = _mm512_castps_si512(_mm512_maskz_loadu_ps(mask, kernels.add(l * taps + t0)));
        }
        for (t, v) in transpose16(r).into_iter().enumerate().take(taps - t0) {
            _mm512_storeu_ps(weights[t0 + t].as_mut_ptr(), _mm512_castsi512_ps(v));
        }
    }
}

/// The ring of padded input rows: padded row `r` in ring row
/// `r mod rows`, `pw` positions a row; input row `y` column `c` is padded
/// row `top + y`, column `left + c`.
struct Ring {
    tile: *mut __m512,
    rows: usize,
    pw: usize,
    top: usize,
    left: usize,
    ih: usize,
    iw: usize,
}

impl Ring {
    /// Where padded row `r` starts.
    ///
    /// # Safety
    /// The tile holds `rows · pw` positions.
    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn row(&self, r: usize) -> *const __m512 {
        self.tile.add(r % self.rows * self.pw)
    }

    /// [`Ring::row`] of `r`, given that row `first ≤ r < first + rows` is
    /// in ring row `slot`: without a division.
    ///
    /// # Safety
    /// As [`Ring::row`].
    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn row_after(&self, first: usize, slot: usize, r: usize) -> *const __m512 {
        let mut at = slot + (r - first);
        if at >= self.rows {
            at -= self.rows;
        }
        self.tile.add(at * self.pw)
    }

    /// Puts padded rows `rows` of the planes starting at `starts` into
    /// the ring, lane `l` from `starts[l]`: a padding row as zeros, input
    /// rows sixteen values of each plane at a time, turned by one
    /// transpose (the last block masked to the rows asked for).
    ///
    /// # Safety
    /// AVX-512 F; each plane holds `ih · iw` values; the tile holds the
    /// ring ([`Lanes::of`]).
    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn fill(&self, starts: &[*const f32; LANES], rows: Range<usize>) {
        let inside = self.top..self.top + self.ih;
        for r in rows.start..rows.end.min(inside.start) {
            self.zero(r);
        }
        let y0 = rows.start.clamp(inside.start, inside.end) - self.top;
        let y1 = rows.end.clamp(inside.start, inside.end) - self.top;
        let (mut y, mut c) = (y0, 0);
        let mut slot = (self.top + y) % self.rows;
        let mut line = self.tile.add(slot * self.pw + self.left);
        let end = y1 * self.iw;
        for j in (y0 * self.iw..end).step_by(LANES) {
            let mask = lane_mask(end - j);
            let mut r = [_mm512_setzero_si512(); LANES];
            for (r, start) in r.iter_mut().zip(starts) {
                *r = _mm512_castps_si512(_mm512_maskz_loadu_ps(mask, start.add(j)));
            }
            for v in transpose16(r).into_iter().take(end - j) {
                *line.add(c) = _mm512_castsi512_ps(v);
                c += 1;
                if c == self.iw {
                    (y, c) = (y + 1, 0);
                    slot += 1;
                    if slot == self.rows {
                        slot = 0;
                    }
                    line = self.tile.add(slot * self.pw + self.left);
                }
            }
        }
        for r in rows.start.max(inside.end)..rows.end {
            self.zero(r);
        }
    }

    /// Zeros padded row `r`.
    ///
    /// # Safety
    /// AVX-512 F; the tile holds the ring.
    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn zero(&self, r: usize) {
        let at = self.row(r).cast_mut();
        for c in 0..self.pw {
            *at.add(c) = _mm512_setzero_ps();
        }
    }
}

/// The sums of output row positions `0..ow` into `sums` (one vector per
/// position) for a `KH × KW` window at column stride `SX` without column
/// dilation, window row `ky` reading from `row[ky]`, the weights held in
/// registers; [`BLOCK`] positions at a time, the last block running past
/// the row.
///
/// # Safety
/// AVX-512 F and FMA; the rows and the sums hold every position read and
/// written ([`Lanes::of`]).
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn sum_row<const KH: usize, const KW: usize, const SX: usize>(
    row: &[*const __m512; MAX_ROWS],
    weights: &[[f32; LANES]; MAX_TAPS],
    sums: *mut __m512,
    ow: usize,
) {
    let mut w = [[_mm512_setzero_ps(); KW]; KH];
    for (ky, w) in w.iter_mut().enumerate() {
        for (kx, w) in w.iter_mut().enumerate() {
            *w = _mm512_loadu_ps(weights[ky * KW + kx].as_ptr());
        }
    }
    for ox in (0..ow).step_by(BLOCK) {
        let mut acc = [_mm512_setzero_ps(); BLOCK];
        for (ky, w) in w.iter().enumerate() {
            let p = row[ky].add(ox * SX);
            for (kx, &w) in w.iter().enumerate() {
                for (i, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm512_fmadd_ps(w, *p.add(i * SX + kx), *acc);
                }
            }
        }
        for (i, acc) in acc.into_iter().enumerate() {
            *sums.add(ox + i) = acc;
        }
    }
}

/// [`sum_row`] for any window: `row.len()` window rows of `kw` taps
/// `dx` apart, column stride `sx`, the weights read per block.
///
/// # Safety
/// As [`sum_row`].
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn sum_row_any(
    row: &[*const __m512],
    kw: usize,
    sx: usize,
    dx: usize,
    weights: &[[f32; LANES]; MAX_TAPS],
    sums: *mut __m512,
    ow: usize,
) {
    for ox in (0..ow).step_by(BLOCK) {
        let mut acc = [_mm512_setzero_ps(); BLOCK];
        for (ky, &line) in row.iter().enumerate() {
            for kx in 0..kw {
                let w = _mm512_loadu_ps(weights[ky * kw + kx].as_ptr());
                let p = line.add(ox * sx + kx * dx);
                for (i, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm512_fmadd_ps(w, *p.add(i * sx), *acc);
                }
            }
        }
        for (i, acc) in acc.into_iter().enumerate() {
            *sums.add(ox + i) = acc;
        }
    }
}

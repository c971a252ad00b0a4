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
use super::gemm::{Clamp, Finish};
use super::linalg::ConvShape;
use super::transpose16::transpose16;
use core::arch::x86_64::*;
use core::cell::Cell;
use core::ops::Range;

/// Planes per vector.
const LANES: usize = 16;

/// Positions of the padded input tile (25 KiB of stack).
const TILE: usize = 400;

/// Output positions of the sums (16 KiB of stack).
const SUMS: usize = 256;

/// Positions of one output row summed at once.
const BLOCK: usize = 8;

/// Taps of a kernel plane at most (7 × 7).
const MAX_TAPS: usize = 49;

/// The tile: position-major, a plane per lane.
#[repr(align(64))]
struct Tile([[f32; LANES]; TILE]);

/// The sums, position-major, a plane per lane.
#[repr(align(64))]
struct Sums([[f32; LANES]; SUMS]);

/// How a convolution's planes sit in the tile: where this path applies.
pub(super) struct Lanes {
    /// Positions per tile row: the padded input row or the windows'
    /// reach, whichever is wider.
    pw: usize,
}

impl Lanes {
    /// The layout for `s`, or `None` when this path does not apply: no
    /// AVX-512 F, a depth axis, strides above 2, more than [`MAX_TAPS`]
    /// taps, or planes too large for the tile.
    pub(super) fn of(s: &ConvShape) -> Option<Lanes> {
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
            || !one_or_two(sy)
            || !one_or_two(sx)
            || dy == 0
            || dx == 0
            || [ih, iw, oh, ow].contains(&0)
        {
            return None;
        }
        let pw = (iw + w.pad[2] + w.pad_after[2]).max((ow - 1) * sx + (kw - 1) * dx + 1);
        // The farthest position a block reads (the last row's last block
        // runs up to BLOCK − 1 positions past the row, into the tile's
        // zeros or the next row: those sums are dropped), and the
        // farthest one the fill writes.
        let read = ((oh - 1) * sy + (kh - 1) * dy) * pw
            + (ow.div_ceil(BLOCK) * BLOCK - 1) * sx
            + (kw - 1) * dx;
        let written = (ih - 1 + w.pad[1]) * pw + iw - 1 + w.pad[2];
        // Sums written (the last block's overrun) and read (whole
        // transposes).
        let sums =
            ((oh - 1) * ow + ow.div_ceil(BLOCK) * BLOCK).max((oh * ow).div_ceil(LANES) * LANES);
        (read < TILE && written < TILE && sums <= SUMS).then_some(Lanes { pw })
    }
}

/// Writes `bias(p)` plus the convolution of plane `p` of `x` with
/// `weight` over output plane `p` of `out` for every `p` in `planes`,
/// then `finish`; `out` starts at output plane `first`. Planes go sixteen
/// at a time: `read(end)` runs once the inputs of planes `..end` are
/// read, `store(end)` before the outputs of the planes up to `end` are
/// written (an in-place caller waits there for other threads; the input
/// of a block of planes is read whole before its outputs are written).
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
    let [_, ih, iw] = w.input;
    let [_, oh, ow] = w.output;
    let [_, kh, kw] = w.kernel;
    let [_, sy, sx] = w.strides;
    let [_, dy, dx] = w.dilations;
    let (ip, op, taps, pw) = (ih * iw, oh * ow, kh * kw, lanes.pw);
    // The padding stays zero: the fill writes only the input's positions.
    let mut tile = Tile([[0.0; LANES]; TILE]);
    let mut sums = Sums([[0.0; LANES]; SUMS]);
    let mut weights = [[0f32; LANES]; MAX_TAPS];
    let offsets: [usize; MAX_TAPS] = core::array::from_fn(|t| {
        let (ky, kx) = (t / kw, t % kw);
        ky * dy * pw + kx * dx
    });
    let tile = tile.0.as_mut_ptr().cast::<__m512>();
    let sums = sums.0.as_mut_ptr().cast::<__m512>();
    let (xp, outp) = (x.ptr(), out.as_ptr() as *mut f32);
    let origin = w.pad[1] * pw + w.pad[2];
    let geometry = Rows {
        oh,
        ow,
        sy,
        step: dy * pw,
        pw,
    };
    let clamp = match finish {
        Finish::Clamp(k) => Some(VecClamp::of(k)),
        _ => None,
    };
    let mut p0 = planes.start;
    while p0 < planes.end {
        let n = LANES.min(planes.end - p0);
        // A short block's spare lanes repeat its last plane (read, never
        // written).
        let lane_plane: [usize; LANES] = core::array::from_fn(|l| p0 + l.min(n - 1));
        let mut biases = [0f32; LANES];
        for (l, &p) in lane_plane.iter().enumerate() {
            let ch = p % s.groups;
            for (t, tap) in weights[..taps].iter_mut().enumerate() {
                tap[l] = weight.load(ch * taps + t);
            }
            biases[l] = bias(p);
        }
        fill(tile, xp, &lane_plane, ip, iw, pw, origin);
        read(p0 + n);
        match (kh, kw, sx, dx) {
            (3, 3, 1, 1) => rows::<3, 3, 1>(tile, sums, &weights, &geometry),
            (3, 3, 2, 1) => rows::<3, 3, 2>(tile, sums, &weights, &geometry),
            (5, 5, 1, 1) => rows::<5, 5, 1>(tile, sums, &weights, &geometry),
            (5, 5, 2, 1) => rows::<5, 5, 2>(tile, sums, &weights, &geometry),
            _ => rows_any(tile, sums, &weights, &offsets[..taps], sx, &geometry),
        }
        store(p0 + n);
        let bias = _mm512_loadu_ps(biases.as_ptr());
        for f0 in (0..op).step_by(LANES) {
            let mask = lane_mask(op - f0);
            let r = core::array::from_fn(|i| {
                let v = _mm512_add_ps(bias, *sums.add(f0 + i));
                _mm512_castps_si512(clamp.map_or(v, |k| k.apply(v)))
            });
            for (l, v) in transpose16(r).into_iter().enumerate().take(n) {
                let at = (p0 + l - first) * op + f0;
                _mm512_mask_storeu_ps(outp.add(at), mask, _mm512_castsi512_ps(v));
            }
        }
        if clamp.is_none() {
            finish.apply(&out[(p0 - first) * op..(p0 + n - first) * op]);
        }
        p0 += n;
    }
}

/// A [`Clamp`] finish on sixteen sums at once, to the bit as
/// [`Finish::value`] gives it: `a ≥ lo ? a : lo` (a NaN sum becomes the
/// bound), `a ≤ hi ? a : hi`, in the steps' order; a NaN bound leaves its
/// side as it is.
#[derive(Clone, Copy)]
struct VecClamp {
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
        let max = |a: __m512| match self.lo {
            Some(lo) => _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GE_OQ>(a, lo), lo, a),
            None => a,
        };
        let min = |a: __m512| match self.hi {
            Some(hi) => _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LE_OQ>(a, hi), hi, a),
            None => a,
        };
        if self.max_first {
            min(max(a))
        } else {
            max(min(a))
        }
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

/// Puts plane `lane_plane[l]`'s input (`ip` values, rows of `iw`) into
/// lane `l` of the tile, row `y` column `c` at position
/// `origin + y·pw + c`: sixteen values of each plane at a time, turned
/// by one transpose.
///
/// # Safety
/// AVX-512 F; `x` holds every plane named; the tile holds every position
/// written ([`Lanes::of`]).
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn fill(
    tile: *mut __m512,
    x: *const f32,
    lane_plane: &[usize; LANES],
    ip: usize,
    iw: usize,
    pw: usize,
    origin: usize,
) {
    let (mut y, mut c) = (0, 0);
    for j in (0..ip).step_by(LANES) {
        let mask = lane_mask(ip - j);
        let r = core::array::from_fn(|l| {
            _mm512_castps_si512(_mm512_maskz_loadu_ps(mask, x.add(lane_plane[l] * ip + j)))
        });
        for v in transpose16(r).into_iter().take(ip - j) {
            *tile.add(origin + y * pw + c) = _mm512_castsi512_ps(v);
            c += 1;
            if c == iw {
                (y, c) = (y + 1, 0);
            }
        }
    }
}

/// The output rows' geometry in the tile: `oh × ow` outputs, output row
/// `oy`'s windows starting at tile row `oy·sy` (`pw` positions a row),
/// window rows `step` positions apart.
struct Rows {
    oh: usize,
    ow: usize,
    sy: usize,
    step: usize,
    pw: usize,
}

/// The sums of every output position into `sums` (position `oy·ow + ox`)
/// for a `KH × KW` window at column stride `SX` without column dilation,
/// its weights held in registers.
///
/// # Safety
/// AVX-512 F and FMA; the tile and the sums hold every position
/// read and written ([`Lanes::of`]).
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn rows<const KH: usize, const KW: usize, const SX: usize>(
    tile: *const __m512,
    sums: *mut __m512,
    weights: &[[f32; LANES]; MAX_TAPS],
    g: &Rows,
) {
    let w: [[__m512; KW]; KH] = core::array::from_fn(|ky| {
        core::array::from_fn(|kx| _mm512_loadu_ps(weights[ky * KW + kx].as_ptr()))
    });
    for oy in 0..g.oh {
        let corner = tile.add(oy * g.sy * g.pw);
        for ox in (0..g.ow).step_by(BLOCK) {
            let at = corner.add(ox * SX);
            let mut acc = [_mm512_setzero_ps(); BLOCK];
            for (ky, w) in w.iter().enumerate() {
                for (kx, &w) in w.iter().enumerate() {
                    let p = at.add(ky * g.step + kx);
                    for (i, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm512_fmadd_ps(w, *p.add(i * SX), *acc);
                    }
                }
            }
            let o = sums.add(oy * g.ow + ox);
            for (i, acc) in acc.into_iter().enumerate() {
                *o.add(i) = acc;
            }
        }
    }
}

/// [`rows`] for any window: the taps at `offsets` from each window's
/// corner, column stride `sx`, the weights read per block.
///
/// # Safety
/// As [`rows`].
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn rows_any(
    tile: *const __m512,
    sums: *mut __m512,
    weights: &[[f32; LANES]; MAX_TAPS],
    offsets: &[usize],
    sx: usize,
    g: &Rows,
) {
    for oy in 0..g.oh {
        let corner = tile.add(oy * g.sy * g.pw);
        for ox in (0..g.ow).step_by(BLOCK) {
            let at = corner.add(ox * sx);
            let mut acc = [_mm512_setzero_ps(); BLOCK];
            for (&off, w) in offsets.iter().zip(weights) {
                let w = _mm512_loadu_ps(w.as_ptr());
                let p = at.add(off);
                for (i, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm512_fmadd_ps(w, *p.add(i * sx), *acc);
                }
            }
            let o = sums.add(oy * g.ow + ox);
            for (i, acc) in acc.into_iter().enumerate() {
                *o.add(i) = acc;
            }
        }
    }
}

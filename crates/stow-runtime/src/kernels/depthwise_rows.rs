//! Depthwise convolution read where the input lies, on AVX-512 CPUs.
//!
//! Each output row is summed from the input rows themselves, sixteen
//! columns per vector. The padding is never materialised: a lane whose
//! column or row falls outside the input is masked off its load, which
//! then gives zero and touches no memory. The banded kernel
//! ([`super::depthwise`]) copies each band of input into a padded buffer,
//! writes its sums to a second buffer and adds the bias while copying
//! them out; mobilenet_v2's depthwise steps spent about half their time in
//! those passes (`perf`), twice onnxruntime's time for the same steps.
//! Here each input value is loaded from where it lies and each output
//! stored once. Stride 2 takes the even columns of two loads with one
//! permute.
//!
//! Output rows are computed in blocks (four rows of two vectors, or eight
//! rows of one where a row is one vector wide): each input row's taps are
//! loaded once and added to every output row of the block that reads
//! them, and the block's eight sums are independent chains of
//! multiply-adds. The sums are the banded kernel's to the bit: taps in
//! the same order from zero, then `bias + sum`, then the finish (a clamp
//! in registers). A padding tap is skipped where the bands add `w · 0`:
//! a sum that starts at +0 never becomes −0, so adding a zero leaves it
//! as it is.

use super::cells::Load;
use super::gemm::{Clamp, Finish};
use super::pool::Window;
use core::arch::x86_64::*;
use core::cell::Cell;
use core::ops::Range;

/// Lanes of one vector.
const LANES: usize = 16;

/// Vectors per output row the column masks are kept for (rows up to
/// 1,024 outputs wide).
const MAX_CHUNKS: usize = 64;

/// Widest kernel row.
const MAX_KW: usize = 7;

/// Most taps of one kernel plane.
const MAX_TAPS: usize = 49;

/// A 2-d window this kernel runs: strides 1 or 2, no dilation between
/// kernel rows, a kernel of at most 7 × 7 taps, rows at most 1,024
/// outputs wide.
pub(super) struct Rows {
    ih: usize,
    iw: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sy: usize,
    sx: usize,
    dx: usize,
    pad_y: usize,
    pad_x: usize,
}

impl Rows {
    /// The geometry of `w`, or `None` where another kernel must run.
    pub(super) fn of(w: &Window) -> Option<Rows> {
        let [id, ih, iw] = w.input;
        let [od, oh, ow] = w.output;
        let [kd, kh, kw] = w.kernel;
        let [_, sy, sx] = w.strides;
        let [_, dy, dx] = w.dilations;
        let flat = id == 1 && od == 1 && kd == 1 && w.pad[0] == 0;
        let fits = kw <= MAX_KW && kh * kw <= MAX_TAPS && ow.div_ceil(LANES) <= MAX_CHUNKS;
        // Offsets of rows and columns are taken as `isize`.
        let small = ih
            .checked_mul(iw)
            .is_some_and(|n| n < isize::MAX as usize / 8);
        (flat
            && fits
            && small
            && sx <= 2
            && sy <= 2
            && dy == 1
            && oh > 0
            && ow > 0
            && kh > 0
            && kw > 0)
            .then_some(Rows {
                ih,
                iw,
                oh,
                ow,
                kh,
                kw,
                sy,
                sx,
                dx,
                pad_y: w.pad[1],
                pad_x: w.pad[2],
            })
    }

    /// Vectors per output row.
    fn chunks(&self) -> usize {
        self.ow.div_ceil(LANES)
    }

    /// Column masks of vector `c`, tap column `kx`: the lanes whose input
    /// column lies inside the row, for the first sixteen input columns
    /// read (low half) and, at stride 2, the next sixteen (high half).
    fn column_mask(&self, c: usize, kx: usize) -> u32 {
        let first = (c * LANES * self.sx + kx * self.dx) as isize - self.pad_x as isize;
        let lanes = |from: isize| {
            let lo = (-from).clamp(0, LANES as isize) as u32;
            let hi = (self.iw as isize - from).clamp(0, LANES as isize) as u32;
            ((1u32 << hi) - 1) & !((1u32 << lo) - 1)
        };
        if self.sx == 1 {
            lanes(first)
        } else {
            lanes(first) | lanes(first + LANES as isize) << 16
        }
    }
}

/// Writes plane `p` of the convolution of `x` (planes of `ih × iw`) with
/// `weight` (`kh × kw` taps per channel, channel `p % groups`) for every
/// `p` in `planes`, as `bias(p)` + sums through `finish`, at element
/// `place(p)` of `out`; then calls `after(p)`. `out` must not overlap
/// the planes of `x` still to be read. False, having done nothing, where
/// `x` or `weight` is shorter than that. The caller guarantees AVX-512 F.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    r: &Rows,
    x: impl Load<f32>,
    weight: impl Load<f32>,
    groups: usize,
    bias: impl Fn(usize) -> f32,
    out: &[Cell<f32>],
    planes: Range<usize>,
    finish: Finish,
    place: impl Fn(usize) -> usize,
    mut after: impl FnMut(usize),
) -> bool {
    let taps = r.kh * r.kw;
    let plane_in = r.ih * r.iw;
    if x.count() < planes.end * plane_in || weight.count() < groups * taps {
        return false;
    }
    let x = x.ptr();
    let chunks = r.chunks();
    let mut masks = Masks {
        low: [[0; MAX_KW]; MAX_CHUNKS],
        high: [[0; MAX_KW]; MAX_CHUNKS],
        inside: [false; MAX_CHUNKS],
    };
    for c in 0..chunks {
        let mut inside = true;
        for kx in 0..r.kw {
            let m = r.column_mask(c, kx);
            masks.low[c][kx] = m as u16;
            masks.high[c][kx] = (m >> 16) as u16;
            inside &= m == if r.sx == 1 { 0xffff } else { u32::MAX };
        }
        masks.inside[c] = inside;
    }
    let clamp = match finish {
        Finish::Clamp(k) => Some(k),
        _ => None,
    };
    let plane_out = r.oh * r.ow;
    for p in planes {
        // Scalars, broadcast where used: an array of vectors took 3 KiB
        // of zeroing per plane, more than a 7 × 7 plane's sums.
        let mut wv = [0f32; MAX_TAPS];
        for (t, v) in wv[..taps].iter_mut().enumerate() {
            *v = weight.load((p % groups) * taps + t);
        }
        let plane = Plane {
            r,
            x: x.wrapping_add(p * plane_in),
            weights: &wv[..taps],
            masks: &masks,
            bias: _mm512_set1_ps(bias(p)),
            clamp,
            out: &out[place(p)..place(p) + plane_out],
        };
        let block = if chunks == 1 { 8 } else { 4 };
        let mut oy = 0;
        while oy < r.oh {
            let rows = block.min(r.oh - oy);
            if chunks == 1 {
                plane.chunks::<8, 1>(oy, rows, 0);
            } else {
                // Vectors reaching into the padding alone (masked loads
                // cost a quarter more), the others in pairs.
                let mut c = 0;
                while c < chunks {
                    let pair = c + 2 <= chunks && masks.inside[c] && masks.inside[c + 1];
                    if pair {
                        plane.chunks::<4, 2>(oy, rows, c);
                        c += 2;
                    } else {
                        plane.chunks::<4, 1>(oy, rows, c);
                        c += 1;
                    }
                }
            }
            // Other finishes than a clamp go over the block's rows while
            // they are in cache.
            if clamp.is_none() && finish != Finish::Keep {
                finish.apply(&plane.out[oy * r.ow..(oy + rows) * r.ow]);
            }
            oy += rows;
        }
        after(p);
    }
    true
}

/// Per vector of an output row and tap column, the lanes whose input
/// columns lie inside the row (`Rows::column_mask`, split in halves).
struct Masks {
    low: [[u16; MAX_KW]; MAX_CHUNKS],
    high: [[u16; MAX_KW]; MAX_CHUNKS],
    /// Every lane of every tap column inside.
    inside: [bool; MAX_CHUNKS],
}

/// One plane's operands.
struct Plane<'a> {
    r: &'a Rows,
    /// The input plane's first element.
    x: *const f32,
    /// Each tap's weight.
    weights: &'a [f32],
    masks: &'a Masks,
    bias: __m512,
    /// The finish when it is a clamp, applied before the store.
    clamp: Option<Clamp>,
    out: &'a [Cell<f32>],
}

impl Plane<'_> {
    /// Vectors `c0..c0 + C` of output rows `oy0..oy0 + rows` (`rows` at
    /// most `R`), stored as bias + sums, clamped where the finish is a
    /// clamp.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn chunks<const R: usize, const C: usize>(&self, oy0: usize, rows: usize, c0: usize) {
        let inside = (c0..c0 + C).all(|c| self.masks.inside[c]);
        match (self.r.sx, inside) {
            (1, true) => self.block::<1, R, C, false>(oy0, rows, c0),
            (1, false) => self.block::<1, R, C, true>(oy0, rows, c0),
            (_, true) => self.block::<2, R, C, false>(oy0, rows, c0),
            (_, false) => self.block::<2, R, C, true>(oy0, rows, c0),
        }
    }

    /// [`Plane::chunks`] for column stride `S`; without `MASKED` every
    /// lane of every tap column lies inside the input row.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn block<const S: usize, const R: usize, const C: usize, const MASKED: bool>(
        &self,
        oy0: usize,
        rows: usize,
        c0: usize,
    ) {
        let r = self.r;
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        // Input row `y0 + j` meets output row `oy0 + o` at kernel row
        // `j − o·sy`; rows are taken in order, so each output's taps are
        // summed kernel row by kernel row, as the bands sum them.
        let y0 = (oy0 * r.sy) as isize - r.pad_y as isize;
        let reach = (rows - 1) * r.sy + r.kh;
        for j in 0..reach {
            let y = y0 + j as isize;
            if y < 0 || y >= r.ih as isize {
                continue;
            }
            let mut ky = [usize::MAX; R];
            for (o, k) in ky.iter_mut().enumerate().take(rows) {
                if let Some(t) = j.checked_sub(o * r.sy).filter(|&t| t < r.kh) {
                    *k = t;
                }
            }
            let line = self.x.wrapping_offset(y * r.iw as isize);
            for kx in 0..r.kw {
                let mut v = [_mm512_setzero_ps(); C];
                for (cc, v) in v.iter_mut().enumerate() {
                    let c = c0 + cc;
                    let col = (c * LANES * S + kx * r.dx) as isize - r.pad_x as isize;
                    let at = line.wrapping_offset(col);
                    // SAFETY: row `y` lies inside the input plane (checked
                    // above); a lane loads only where its column lies
                    // inside the row too (`Rows::column_mask`), masked
                    // lanes touching no memory, and unmasked loads run
                    // only where every lane's column does.
                    #[allow(unsafe_code)]
                    unsafe {
                        let load = |mask: u16, at: *const f32| {
                            if MASKED {
                                _mm512_maskz_loadu_ps(mask, at)
                            } else {
                                _mm512_loadu_ps(at)
                            }
                        };
                        *v = if S == 1 {
                            load(self.masks.low[c][kx], at)
                        } else {
                            let lo = load(self.masks.low[c][kx], at);
                            let hi = load(self.masks.high[c][kx], at.wrapping_add(LANES));
                            _mm512_permutex2var_ps(lo, even, hi)
                        };
                    }
                }
                for o in 0..R {
                    if ky[o] != usize::MAX {
                        let w = _mm512_set1_ps(self.weights[ky[o] * r.kw + kx]);
                        for cc in 0..C {
                            acc[o][cc] = _mm512_fmadd_ps(w, v[cc], acc[o][cc]);
                        }
                    }
                }
            }
        }
        for (o, acc) in acc.iter().enumerate().take(rows) {
            let oy = oy0 + o;
            for (cc, &acc) in acc.iter().enumerate() {
                let ox = (c0 + cc) * LANES;
                let lanes = (r.ow - ox).min(LANES);
                let mut v = _mm512_add_ps(self.bias, acc);
                if let Some(k) = self.clamp {
                    v = clamp(k, v);
                }
                let row = &self.out[oy * r.ow + ox..oy * r.ow + ox + lanes];
                // SAFETY: `row` holds the `lanes` outputs the mask stores.
                #[allow(unsafe_code)]
                unsafe {
                    _mm512_mask_storeu_ps(Cell::as_ptr(&row[0]), ((1u32 << lanes) - 1) as u16, v)
                };
            }
        }
    }
}

/// `k` applied to every lane as [`Clamp::apply`] applies it: `Max` keeps
/// `a` where `a ≥ lo` and gives `lo` elsewhere (NaN included), `Min`
/// likewise with `a ≤ hi`; a NaN bound leaves the values as they are.
#[target_feature(enable = "avx512f")]
#[inline]
fn clamp(k: Clamp, mut v: __m512) -> __m512 {
    let max = |v: __m512| {
        let lo = _mm512_set1_ps(k.lo);
        _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GE_OQ>(v, lo), lo, v)
    };
    let min = |v: __m512| {
        let hi = _mm512_set1_ps(k.hi);
        _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LE_OQ>(v, hi), hi, v)
    };
    if k.max_first {
        if !k.lo.is_nan() {
            v = max(v);
        }
        if !k.hi.is_nan() {
            v = min(v);
        }
    } else {
        if !k.hi.is_nan() {
            v = min(v);
        }
        if !k.lo.is_nan() {
            v = max(v);
        }
    }
    v
}

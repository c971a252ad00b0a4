//! Convolutions of few input channels: a network's stem (3 → 32, 3×3
//! stride 2 in mobilenet_v2 and efficientnet_b0; 3 → 64, 7×7 stride 2 in
//! resnet50).
//!
//! Their product is shallow (27 or 147 deep) and wide (one column per
//! output position), so as a packed product most of the work is im2col
//! gathering every second input value into panels, and six-row weight
//! panels leave lanes idle against 32 or 64 channels. Here the output
//! channels lie across a vector's sixteen lanes instead: for each of a
//! tile's sixteen output positions (consecutive in one output row) each
//! input value the window reads is broadcast from where it lies and
//! multiplied by the sixteen channels' weights of its tap, so a stride
//! costs nothing. The sixteen sums of each position are then turned
//! into sixteen rows of positions ([`transpose16`]) and stored.
//!
//! Each sum is the packed product's chain: the depths in im2col's order
//! (channel, kernel row, kernel column), one fused multiply-add each from
//! zero, the padding's taps multiplied as zeros (a tile whose window
//! leaves the image reads a zero-padded copy of it), then the bias added
//! and the finish applied. So the bits are those of the packed product
//! with one depth block, which [`applies`] requires.

use super::cells::Load;
use super::finish16::Finish16;
use super::gemm::{self, Finish, Isa};
use super::linalg::{bias_at, ConvShape};
use super::prepacked::Panels;
use super::transpose16::transpose16;
use crate::kernels::cells::Src;
use core::arch::x86_64::*;
use core::cell::Cell;

/// Output positions (and channels) per tile: one 16-lane vector.
const LANES: usize = 16;
/// Most input channels per group: beyond a few the packed product's
/// panels are deep enough to pay for their packing.
const MOST_CHANNELS: usize = 4;
/// Most kernel rows or columns.
const MOST_SIDE: usize = 7;
/// Most depths: channels × taps.
const MOST_DEPTH: usize = MOST_CHANNELS * MOST_SIDE * MOST_SIDE;
/// Most weight vectors (16 channels of one depth) held for one call:
/// resnet50's 64 channels × 147 depths fit; the array lives on the stack.
const MOST_VECTORS: usize = 640;
/// Most output channels per group (each one's bias is held on the stack).
const MOST_OUT: usize = 256;
/// Widest stride across a row (a const parameter of the kernel).
const MOST_STRIDE: usize = 2;
/// Width of a tile's window in one input row at the widest stride.
const MOST_SPAN: usize = (LANES - 1) * MOST_STRIDE + MOST_SIDE;

/// True when [`conv`] computes convolutions of shape `s` with the packed
/// kernel `p` on this CPU: AVX-512, a 2-d window of at most
/// [`MOST_SIDE`]² taps, dilation 1, a row stride of 1 or 2, at most
/// [`MOST_CHANNELS`] input channels per group, the kernel in one depth
/// block, 2–[`MOST_OUT`] output channels per group.
pub(crate) fn applies(s: &ConvShape, p: &Panels) -> bool {
    let w = &s.window;
    let k = s.k();
    let fits = w.kernel[0] == 1
        && w.input[0] == 1
        && w.output[0] == 1
        && w.strides[0] == 1
        && w.pad[0] == 0
        && w.dilations == [1, 1, 1]
        && (1..=MOST_SIDE).contains(&w.kernel[1])
        && (1..=MOST_SIDE).contains(&w.kernel[2])
        && (1..=MOST_STRIDE).contains(&w.strides[2])
        && w.strides[1] >= 1
        && (1..=MOST_CHANNELS).contains(&s.in_per_group)
        && (2..=MOST_OUT).contains(&s.out_per_group)
        && !s.pointwise()
        && p.matrices == s.groups
        && p.rows == s.out_per_group
        && p.depth == k
        && p.kc >= k
        && s.out_per_group.div_ceil(LANES) * k <= MOST_VECTORS;
    fits && Isa::detect() == Isa::Avx512
}

/// The convolution of [`super::linalg::conv`] for a shape [`applies`]
/// admits, without a residual: output positions
/// [`gemm::share`]`(n, part, parts)` of every image and group.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv<L: Load<f32>, X: Load<f32>>(
    s: &ConvShape,
    p: &Panels,
    weight: L,
    x: X,
    bias: Option<Src<'_, f32>>,
    out: &[Cell<f32>],
    finish: Finish,
    (part, parts): (usize, usize),
) {
    if !applies(s, p) {
        debug_assert!(false, "a convolution the stem kernel does not take");
        return;
    }
    let w = &s.window;
    let (m, k, n) = (s.out_per_group, s.k(), s.n());
    let cols = gemm::share(n, part, parts);
    if cols.is_empty() || k == 0 {
        return;
    }
    let geometry = Geometry::of(s);
    // Depth `d`'s input relative to a tile's first: in the image, and in
    // a padded copy of the tile's window.
    let mut in_image = [0usize; MOST_DEPTH];
    let mut in_copy = [0usize; MOST_DEPTH];
    for d in 0..k {
        let (c, ky, kx) = (
            d / geometry.taps(),
            d / w.kernel[2] % w.kernel[1],
            d % w.kernel[2],
        );
        in_image[d] = c * geometry.plane() + ky * geometry.w + kx;
        in_copy[d] = (c * w.kernel[1] + ky) * geometry.span + kx;
    }
    let blocks = m.div_ceil(LANES);
    let plane_in = geometry.plane();
    for g in 0..s.groups {
        // Depth `d` of output channels `16b..16b + 16` at `weights[b·k + d]`
        // (zero past the last channel).
        let mut weights = [[0f32; LANES]; MOST_VECTORS];
        for b in 0..blocks {
            for d in 0..k {
                let lanes = &mut weights[b * k + d];
                for (l, v) in lanes.iter_mut().enumerate().take(m - b * LANES) {
                    *v = weight.load(p.index(g, b * LANES + l, d));
                }
            }
        }
        let weights = &weights[..blocks * k];
        for image in 0..s.batch {
            let in_base = (image * s.groups + g) * s.in_per_group * plane_in;
            let out_base = (image * s.groups + g) * m * n;
            let source = x.sub(in_base, s.in_per_group * plane_in);
            let dst = &out[out_base..out_base + m * n];
            let channel_bias: [f32; MOST_OUT + LANES] =
                core::array::from_fn(|o| if o < m { bias_at(bias, g * m + o) } else { 0.0 });
            let tiles = Tiles {
                geometry: &geometry,
                weights,
                depths: (&in_image[..k], &in_copy[..k]),
                bias: &channel_bias[..blocks * LANES],
                m,
                finish,
            };
            let (first_row, last_row) = (cols.start / geometry.ow, (cols.end - 1) / geometry.ow);
            for y in first_row..=last_row {
                let row = y * geometry.ow;
                let (xa, xb) = (
                    cols.start.max(row) - row,
                    cols.end.min(row + geometry.ow) - row,
                );
                tiles.row(source, dst, n, y, xa..xb);
            }
        }
    }
}

/// The plane geometry of a convolution [`applies`] admits.
struct Geometry {
    h: usize,
    w: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sy: usize,
    sx: usize,
    py: usize,
    px: usize,
    channels: usize,
    /// Width of a tile's window in one input row: its copy's row length.
    span: usize,
}

impl Geometry {
    fn of(s: &ConvShape) -> Geometry {
        let w = &s.window;
        Geometry {
            h: w.input[1],
            w: w.input[2],
            ow: w.output[2],
            kh: w.kernel[1],
            kw: w.kernel[2],
            sy: w.strides[1],
            sx: w.strides[2],
            py: w.pad[1],
            px: w.pad[2],
            channels: s.in_per_group,
            span: (LANES - 1) * w.strides[2] + w.kernel[2],
        }
    }

    fn plane(&self) -> usize {
        self.h * self.w
    }

    fn taps(&self) -> usize {
        self.kh * self.kw
    }
}

/// What every tile of one image and group shares.
struct Tiles<'a> {
    geometry: &'a Geometry,
    weights: &'a [[f32; LANES]],
    /// Each depth's offset from the tile's first input: in the image, in
    /// the window's copy.
    depths: (&'a [usize], &'a [usize]),
    /// Each output channel's bias, zero past the last.
    bias: &'a [f32],
    m: usize,
    finish: Finish,
}

impl Tiles<'_> {
    /// Output row `y`, columns `xs`, of every channel: `bias + sum`
    /// through the finish.
    fn row<X: Load<f32>>(
        &self,
        x: X,
        dst: &[Cell<f32>],
        n: usize,
        y: usize,
        xs: core::ops::Range<usize>,
    ) {
        let g = self.geometry;
        let image = x.ptr();
        let mut copy = [0f32; MOST_CHANNELS * MOST_SIDE * MOST_SPAN];
        let iy = (y * g.sy) as isize - g.py as isize;
        let rows_inside = iy >= 0 && iy as usize + g.kh <= g.h;
        for x0 in xs.clone().step_by(LANES) {
            let width = LANES.min(xs.end - x0);
            let ix = (x0 * g.sx) as isize - g.px as isize;
            let inside = rows_inside && ix >= 0 && ix as usize + g.span <= g.w;
            let (window, depths) = if inside {
                // SAFETY: the window's rows `iy..iy + kh` and columns
                // `ix..ix + span` lie inside each channel's plane, the
                // `channels` planes of `x` (whose `count` the caller's
                // `sub` fixed); every depth offset stays inside them.
                #[allow(unsafe_code)]
                let at = unsafe { image.add(iy as usize * g.w + ix as usize) };
                (at, self.depths.0)
            } else {
                self.copy_window(x, iy, ix, &mut copy);
                (copy.as_ptr(), self.depths.1)
            };
            let at = y * g.ow + x0;
            // SAFETY: `applies` found AVX-512 F (so AVX2 and FMA as well,
            // `Isa::detect`); `window` and `depths`
            // as above (the copy holds `channels · kh · span` floats).
            #[allow(unsafe_code)]
            unsafe {
                if g.sx == 1 {
                    self.tile::<1>(window, depths, dst, n, at, width)
                } else {
                    self.tile::<2>(window, depths, dst, n, at, width)
                }
            }
        }
    }

    /// The window of the tile whose first input is row `iy`, column `ix`
    /// (either may lie in the padding) into `copy`, `span` floats per
    /// kernel row, zero outside the image.
    fn copy_window<X: Load<f32>>(
        &self,
        x: X,
        iy: isize,
        ix: isize,
        copy: &mut [f32; MOST_CHANNELS * MOST_SIDE * MOST_SPAN],
    ) {
        let g = self.geometry;
        let (from, to) = (
            (-ix).clamp(0, g.span as isize) as usize,
            (g.w as isize - ix).clamp(0, g.span as isize) as usize,
        );
        for c in 0..g.channels {
            for ky in 0..g.kh {
                let line = &mut copy[(c * g.kh + ky) * g.span..][..g.span];
                let r = iy + ky as isize;
                if r < 0 || r >= g.h as isize || from >= to {
                    line.fill(0.0);
                    continue;
                }
                line[..from].fill(0.0);
                line[to..].fill(0.0);
                let start = c * g.plane() + r as usize * g.w;
                let src = x.sub(start + (ix + from as isize) as usize, to - from);
                for (v, j) in line[from..to].iter_mut().zip(0..) {
                    *v = src.load(j);
                }
            }
        }
    }

    /// The sixteen positions from output position `at` (`width` of them
    /// stored), every channel: for each depth, its sixteen input values
    /// (`SX` apart from `window + depths[d]`) broadcast against the
    /// depth's weight vector, then each channel's row of sums plus its
    /// bias, through the finish, stored into `dst` (`n` floats per
    /// channel).
    ///
    /// # Safety
    /// AVX-512 F, AVX2 and FMA; `window + depths[d] + l·SX` readable for
    /// every depth `d` and `l < 16`.
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[allow(unsafe_code)]
    unsafe fn tile<const SX: usize>(
        &self,
        window: *const f32,
        depths: &[usize],
        dst: &[Cell<f32>],
        n: usize,
        at: usize,
        width: usize,
    ) {
        let k = depths.len();
        let keep = ((1u32 << width) - 1) as __mmask16;
        let finish = Finish16::of(self.finish);
        // Addresses rather than offsets: a broadcast from `[register +
        // displacement]` stays one fused micro-op with its FMA, one from
        // `[base + index·4 + displacement]` splits in two.
        let mut starts = [window; MOST_DEPTH];
        for (start, &d) in starts.iter_mut().zip(depths) {
            *start = window.add(d);
        }
        for (b, weights) in self.weights.chunks_exact(k).enumerate() {
            let mut acc = [_mm512_setzero_ps(); LANES];
            for (w, &src) in weights.iter().zip(&starts[..k]) {
                let wv = _mm512_loadu_ps(w.as_ptr());
                for (l, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm512_fmadd_ps(wv, _mm512_set1_ps(*src.add(l * SX)), *acc);
                }
            }
            let mut sums = [_mm512_setzero_si512(); LANES];
            for (v, acc) in sums.iter_mut().zip(acc) {
                *v = _mm512_castps_si512(acc);
            }
            let rows = transpose16(sums);
            let channels = LANES.min(self.m - b * LANES);
            for (r, row) in rows.iter().enumerate().take(channels) {
                let o = b * LANES + r;
                let sum = _mm512_add_ps(_mm512_set1_ps(self.bias[o]), _mm512_castsi512_ps(*row));
                let sum = finish.apply(sum);
                let cells = &dst[o * n + at..o * n + at + width];
                _mm512_mask_storeu_ps(cells.as_ptr() as *mut f32, keep, sum);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::gemm::Clamp;
    use crate::kernels::testing::{conv_shape, left_panels, packed_conv_bits, value};
    use alloc::vec::Vec;

    /// Random stems (1–4 input channels, kernels up to 7×7 with any
    /// padding, row strides 1–3, column strides 1 and 2, rows narrower
    /// and wider than a tile, 2–70 output channels, groups, batches,
    /// thread shares, a bias of one or per-channel values, each finish):
    /// the bits of the packed product over im2col panels.
    #[test]
    fn channels_across_lanes_give_the_packed_bits() {
        if Isa::detect() != Isa::Avx512 {
            return;
        }
        let mut below = crate::kernels::testing::below(0x9e37_79b9_7f4a_7c15u64);
        let mut ran = 0;
        for case in 0..300 {
            let kernel = [1, 1 + below(7), 1 + below(7)];
            let strides = [1, 1 + below(3), 1 + below(2)];
            let pad = [0, below(kernel[1]), below(kernel[2])];
            let pad_after = [0, below(kernel[1]), below(kernel[2])];
            let input = [1, kernel[1] + below(20), kernel[2] + below(80)];
            let output: [usize; 3] = core::array::from_fn(|a| {
                (input[a] + pad[a] + pad_after[a] - kernel[a]) / strides[a] + 1
            });
            let (groups, batch) = (1 + below(2), 1 + below(2));
            let (ipg, opg) = (1 + below(4), 2 + below(69));
            let s = conv_shape(
                (batch, groups),
                (ipg, opg),
                [input, output, kernel, strides, pad, pad_after],
            );
            let panels = left_panels(&s, 256);
            if !applies(&s, &panels) {
                let too_many = opg.div_ceil(LANES) * s.k() > MOST_VECTORS;
                assert!(s.pointwise() || too_many, "case {case}: {s:?} refused");
                continue;
            }
            ran += 1;
            let n = s.n();
            let x: Vec<f32> = (0..batch * groups * ipg * input[1] * input[2])
                .map(|i| value(i, 1))
                .collect();
            let w: Vec<f32> = (0..groups * opg * s.k()).map(|i| value(i, 2)).collect();
            let w = panels.pack(&w).expect("a dense kernel");
            let bias: Vec<f32> = match below(3) {
                0 => Vec::new(),
                1 => [value(case, 3)].into(),
                _ => (0..groups * opg).map(|i| value(i, 3)).collect(),
            };
            let bias = (!bias.is_empty()).then_some(Src::Weight(&bias));
            // Bounds that cut the sums (which lie around ±1), a NaN bound
            // (one-sided: a `Relu`, a `Min` alone) and a zero bound
            // (signed zeros at it).
            let bounds = [(-0.5, 0.75), (0.0, f32::NAN), (f32::NAN, 0.25), (0.0, 0.0)];
            let finish = match below(6) {
                0 => Finish::Keep,
                1 => Finish::Silu,
                2 => Finish::HardSwish,
                _ => {
                    let (lo, hi) = bounds[below(bounds.len())];
                    Finish::Clamp(Clamp {
                        lo,
                        hi,
                        max_first: below(2) == 0,
                    })
                }
            };
            let parts = 1 + below(3);
            let want = packed_conv_bits(&s, (&panels, None), (&x[..], &w[..], bias), finish, parts);
            assert!(
                want.iter().all(|&b| !f32::from_bits(b).is_nan()),
                "case {case}: the packed product left outputs unwritten"
            );
            let stem: Vec<Cell<f32>> = (0..batch * groups * opg * n)
                .map(|_| Cell::new(f32::NAN))
                .collect();
            for part in 0..parts {
                let w = Src::Weight(&w[..]);
                crate::with_load!(w, |w| conv(
                    &s,
                    &panels,
                    w,
                    &x[..],
                    bias,
                    &stem,
                    finish,
                    (part, parts)
                ));
            }
            let got: Vec<u32> = stem.iter().map(|c| c.get().to_bits()).collect();
            assert_eq!(got, want, "case {case}: {s:?}, {finish:?}");
        }
        assert!(ran > 200, "only {ran} cases ran");
    }
}

//! Stride-1 convolutions whose output plane has the input's size ("same"
//! padding), with the image itself as the right operand of the product.
//!
//! Through tap `(ky, kx)`, output position `f = y·w + x` reads input
//! position `f + (ky − py)·w + (kx − px)`: one offset per tap for the
//! whole plane. So the sixteen consecutive output positions of a tile row
//! read sixteen consecutive input values at every depth, and the
//! micro-kernel loads them from the image as it lies, through a mask that
//! zeroes the lanes whose input falls in the padding (a row above or below
//! the image, or past a row's left or right end). That replaces im2col's
//! panels, which packing wrote and the kernel read back, by masked loads
//! of an image region that stays in L1.
//!
//! The depth order, the depth blocks and each element's chain of fused
//! multiply-adds are those of the packed product, and a masked-off lane is
//! the zero im2col packs for the padding, so the sums are the same to the
//! bit.
//!
//! Every CPU with AVX2 and FMA takes this path: the packing was 15 % of
//! resnet50's run on an AVX2 CPU (BENCHMARKS.md, "Session 42") and 12 %
//! with AVX-512, where a tile is two A panels (twelve rows) against 32
//! output positions in two 16-lane vectors, 24 sums in registers
//! ("Session 47").

use super::cells::Load;
use super::gemm::{Dst, Finish, Isa, OnStack, MC, MR, NC, NR};
use super::linalg::ConvShape;
use super::prepacked::{split, widen_tail, Panels};
use core::cell::Cell;
use core::ops::Range;

/// Most rows or columns a kernel read this way may have.
const MOST_SIDE: usize = 7;
/// Most taps (7×7): the mask table of a tile holds one entry per tap.
const MOST_TAPS: usize = MOST_SIDE * MOST_SIDE;
/// Output positions a tile spans: two B panels, one after the other,
/// against the same A panel (which then stays in L1 for the second).
const SPAN: usize = 2 * NR;

/// A convolution's plane geometry as the direct product reads it.
#[derive(Clone, Copy)]
struct Plane {
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    py: usize,
    px: usize,
}

impl Plane {
    /// The plane of `s` when the direct product can compute it: one 2-d
    /// plane per channel, stride and dilation 1, output the input's size,
    /// a kernel of at most [`MOST_SIDE`] rows and columns and larger than
    /// 1×1 (pointwise convolutions pack rows of the image, which needs no
    /// masks), more than one input or output channel per group.
    fn of(s: &ConvShape) -> Option<Plane> {
        let w = &s.window;
        let fits = w.kernel[0] == 1
            && w.input[0] == 1
            && w.output == w.input
            && w.strides == [1, 1, 1]
            && w.dilations == [1, 1, 1]
            && w.kernel[1] <= MOST_SIDE
            && w.kernel[2] <= MOST_SIDE
            && w.pad[1] < w.kernel[1]
            && w.pad[2] < w.kernel[2]
            && !s.pointwise()
            && !s.depthwise();
        fits.then_some(Plane {
            h: w.input[1],
            w: w.input[2],
            kh: w.kernel[1],
            kw: w.kernel[2],
            py: w.pad[1],
            px: w.pad[2],
        })
    }

    fn taps(&self) -> usize {
        self.kh * self.kw
    }

    /// Offset of tap `t`'s input from the output position.
    fn offset(&self, t: usize) -> isize {
        let (ky, kx) = ((t / self.kw) as isize, (t % self.kw) as isize);
        (ky - self.py as isize) * self.w as isize + kx - self.px as isize
    }

    /// For each tap, the lanes of the tile of output positions
    /// `f0..f0 + width` (at most [`SPAN`]) whose input lies inside the
    /// image: bit `l` of `bits[t]` for position `f0 + l`.
    fn mask_bits(&self, f0: usize, width: usize) -> [u32; MOST_TAPS] {
        let mut rows = [0u32; MOST_SIDE];
        let mut cols = [0u32; MOST_SIDE];
        let (mut y, mut x) = (f0 / self.w, f0 % self.w);
        for l in 0..width.min(SPAN) {
            for (ky, bits) in rows.iter_mut().enumerate().take(self.kh) {
                if (self.py..self.h + self.py).contains(&(y + ky)) {
                    *bits |= 1 << l;
                }
            }
            for (kx, bits) in cols.iter_mut().enumerate().take(self.kw) {
                if (self.px..self.w + self.px).contains(&(x + kx)) {
                    *bits |= 1 << l;
                }
            }
            x += 1;
            if x == self.w {
                (x, y) = (0, y + 1);
            }
        }
        core::array::from_fn(|t| {
            if t < self.taps() {
                rows[t / self.kw] & cols[t % self.kw]
            } else {
                0
            }
        })
    }

    /// [`Plane::mask_bits`] spread over lanes: lane `l` of `masks[t]` all
    /// ones or zero.
    fn masks(&self, f0: usize, width: usize, masks: &mut Masks) {
        let bits = self.mask_bits(f0, width);
        for (lanes, bits) in masks.iter_mut().zip(bits).take(self.taps()) {
            for (l, lane) in lanes.iter_mut().enumerate() {
                *lane = -(((bits >> l) & 1) as i32);
            }
        }
    }
}

/// A tile's lane masks, per tap.
type Masks = [[i32; SPAN]; MOST_TAPS];

/// The instruction set [`conv`] computes convolutions of shape `s` with
/// by default on this CPU, if it takes them.
pub(crate) fn applies(s: &ConvShape) -> Option<Isa> {
    can(s).then(Isa::detect)
}

/// True when [`conv`] can compute convolutions of shape `s` on this CPU
/// (which [`applies`] may still leave to the packed product).
pub(crate) fn can(s: &ConvShape) -> bool {
    Isa::detect() != Isa::Portable && Plane::of(s).is_some()
}

/// One group of a convolution [`can`] admits: `C += A · im2col(x)` (or
/// `=`, see [`super::gemm::Start`]) over rows `lines` (whole panels but
/// for the last, as [`super::prepacked::row_share`] gives) and output
/// columns `cols`, A being
/// matrix `g` of the packed kernel `a` and the image the `in_per_group`
/// planes of `x` from `in_base`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv<L: Load<f32>, X: Load<f32>>(
    s: &ConvShape,
    isa: Isa,
    p: &Panels,
    g: usize,
    a: L,
    x: X,
    in_base: usize,
    c: &Dst<'_>,
    scratch: &[Cell<f32>],
    (lines, cols): (Range<usize>, Range<usize>),
) {
    let Some(plane) = Plane::of(s).filter(|_| can(s) && isa != Isa::Portable) else {
        debug_assert!(false, "a convolution the direct product does not take");
        return;
    };
    let (m, k, kc, n) = (p.rows, p.depth, p.kc, s.n());
    let end = cols.end.min(n);
    let last = lines.end.min(m);
    if m == 0 || k == 0 || cols.start >= end || lines.start >= last || k != s.k() {
        return;
    }
    if !lines.start.is_multiple_of(MR) {
        debug_assert!(false, "a row share that starts inside a panel");
        return;
    }
    let on_stack = OnStack::default();
    let Some((tail, _)) = split(p, scratch, &on_stack) else {
        debug_assert!(
            false,
            "setup admitted a depth block deeper than the scratch"
        );
        return;
    };
    // Bounds checked once: every lane a mask lets through lies in these
    // planes (see `taps_kernel_avx2`).
    let image = x.sub(in_base, s.in_per_group * n).ptr();
    let mut offsets = [0isize; MOST_TAPS];
    for (t, o) in offsets.iter_mut().enumerate().take(plane.taps()) {
        *o = plane.offset(t);
    }
    let taps = &offsets[..plane.taps()];
    let lowest = taps.iter().copied().min().unwrap_or(0);
    let highest = taps.iter().copied().max().unwrap_or(0);
    let mut masks = [[0i32; SPAN]; MOST_TAPS];
    let base = p.index(g, 0, 0);
    // Each tile's lanes per tap, found once per block of columns rather
    // than for every depth block and block of rows (1 % of resnet50).
    const { assert!(NC.is_multiple_of(SPAN), "a block of columns is whole tiles") };
    let mut tile_bits = [[0u32; MOST_TAPS]; NC / SPAN];
    for j0 in (cols.start..end).step_by(NC) {
        let nc = NC.min(end - j0);
        if isa == Isa::Avx512 {
            for (t, c0) in (0..nc).step_by(SPAN).enumerate() {
                tile_bits[t] = plane.mask_bits(j0 + c0, SPAN.min(nc - c0));
            }
        }
        for p0 in (0..k).step_by(kc) {
            let kcb = kc.min(k - p0);
            let c = &c.at_block(p0 + kcb == k);
            let finish = c.finish;
            let block = base + p0 * m;
            let short = m % MR;
            if short != 0 && last == m {
                widen_tail(a, block + (m - short) * kcb, short, MR, kcb, tail);
            }
            let depth = Depth {
                image,
                plane: n,
                first: (p0 / plane.taps(), p0 % plane.taps()),
                taps: plane.taps(),
                len: kcb,
            };
            for i0 in (lines.start..last).step_by(MC) {
                let mc = MC.min(last - i0);
                for c0 in (0..nc).step_by(SPAN) {
                    let (f0, width) = (j0 + c0, SPAN.min(nc - c0));
                    if isa == Isa::Avx512 {
                        let reads = Wide {
                            at: f0,
                            offsets: &offsets,
                            bits: tile_bits[c0 / SPAN],
                        };
                        let mut r0 = i0;
                        while r0 < i0 + mc {
                            let rows = MR.min(m - r0);
                            let at = (r0, f0);
                            if rows == MR && r0 + 2 * MR <= i0 + mc {
                                // Two whole panels: twelve rows against
                                // the same two image vectors per depth.
                                let a = [0, MR].map(|d| a.sub(block + (r0 + d) * kcb, kcb * MR));
                                let ends = [0, MR].map(|d| (c.start.at(p0, r0 + d, MR), finish));
                                wide_kernel(a, &depth, &reads, c, at, ([MR; 2], width), ends);
                                r0 += 2 * MR;
                                continue;
                            }
                            let end = [(c.start.at(p0, r0, rows), finish)];
                            if rows == MR {
                                let a = [a.sub(block + r0 * kcb, kcb * MR)];
                                wide_kernel(a, &depth, &reads, c, at, ([rows], width), end);
                            } else {
                                let a = [&tail[..kcb * MR]];
                                wide_kernel(a, &depth, &reads, c, at, ([rows], width), end);
                            }
                            r0 += MR;
                        }
                        continue;
                    }
                    plane.masks(f0, width, &mut masks);
                    // Each B panel of the tile: its reads and its columns.
                    let halves: [(Reads<'_>, usize); SPAN / NR] = core::array::from_fn(|h| {
                        let at = f0 + h * NR;
                        let reads = Reads {
                            at,
                            offsets: &offsets,
                            masks: &masks,
                            lane: h * NR,
                            // The first channel's lowest address and the
                            // last one's highest, each relative to its
                            // own plane.
                            inside: at as isize + lowest >= 0
                                && (at + NR) as isize + highest <= n as isize,
                        };
                        (reads, NR.min(width.saturating_sub(h * NR)))
                    });
                    for r0 in (i0..i0 + mc).step_by(MR) {
                        let rows = MR.min(m - r0);
                        let start = c.start.at(p0, r0, rows);
                        for (reads, cols) in halves.iter().filter(|h| h.1 > 0) {
                            let (at, size) = ((r0, reads.at), (rows, *cols));
                            let end = (start, finish);
                            if rows == MR {
                                let a = a.sub(block + r0 * kcb, kcb * MR);
                                taps_kernel(a, &depth, reads, c, at, size, end);
                            } else {
                                let a = &tail[..kcb * MR];
                                taps_kernel(a, &depth, reads, c, at, size, end);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The depth block a kernel call walks: `len` depths from channel
/// `first.0`, tap `first.1`, of the image whose channel planes (`plane`
/// floats each) start at `image`.
struct Depth {
    image: *const f32,
    plane: usize,
    first: (usize, usize),
    taps: usize,
    len: usize,
}

/// Where a tile's B values come from: output positions from `at`, each
/// tap's input `offsets[t]` away, through lanes `lane..lane + NR` of
/// `masks[t]`. `inside` when all `NR` lanes of every tap, in every
/// channel, have addresses inside the image (the masked-off ones
/// included): then they may be loaded whole and masked after.
struct Reads<'t> {
    at: usize,
    offsets: &'t [isize; MOST_TAPS],
    masks: &'t Masks,
    lane: usize,
    inside: bool,
}

#[inline(always)]
fn taps_kernel<A: Load<f32>>(
    a: A,
    depth: &Depth,
    reads: &Reads<'_>,
    c: &Dst<'_>,
    at: (usize, usize),
    size: (usize, usize),
    end: (Option<[f32; MR]>, Finish),
) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `conv` runs only where `can` found AVX2 and FMA.
        #[allow(unsafe_code)]
        unsafe {
            taps_kernel_avx2(a, depth, reads, c, at, size, end)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (a, depth, reads, c, at, size, end);
        unreachable!("the direct product needs AVX2");
    }
}

/// The `MR × NR` tile of C at `(i, j)` (its top-left `size` written):
/// one A panel (`len × MR`, depth-major) against the image read through
/// the tile's tap masks, in two 8-lane halves.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn taps_kernel_avx2<A: Load<f32>>(
    a: A,
    depth: &Depth,
    reads: &Reads<'_>,
    c: &Dst<'_>,
    (i, j): (usize, usize),
    (rows, cols): (usize, usize),
    end: (Option<[f32; MR]>, Finish),
) {
    use core::arch::x86_64::*;
    const HALVES: usize = NR / 8;
    let pa = a.sub(0, depth.len * MR).ptr();
    let mut acc = [[_mm256_setzero_ps(); HALVES]; MR];
    let (mut ch, mut t) = depth.first;
    let mut p = 0;
    while p < depth.len {
        let run = (depth.taps - t).min(depth.len - p);
        // Formed with wrapping arithmetic: a tap's address may lie before
        // the image (the row above the first), where no lane reads.
        let channel = depth.image.wrapping_add(ch * depth.plane + reads.at);
        for q in 0..run {
            let tap = t + q;
            let src = channel.wrapping_offset(reads.offsets[tap]);
            let lanes = &reads.masks[tap][reads.lane..reads.lane + NR];
            // SAFETY: a lane's mask is set only where its input position
            // (output position plus the tap's offset) lies inside the
            // plane of channel `ch` < `in_per_group`, all of which `conv`
            // bounds-checked; masked-off lanes are not accessed. The mask
            // slice holds NR = 2·8 lanes. Nothing writes the image while
            // the kernel reads.
            #[allow(unsafe_code)]
            let x: [__m256; HALVES] = core::array::from_fn(|h| unsafe {
                let mask = _mm256_loadu_si256(lanes.as_ptr().add(8 * h).cast());
                if reads.inside {
                    // Every lane's address lies in the image (`Reads::
                    // inside`): a plain load, the padding's lanes zeroed
                    // by the mask (`vmaskmovps` alone was the loop's
                    // bottleneck on AMD cores).
                    let v = _mm256_loadu_ps(src.add(8 * h));
                    _mm256_and_ps(v, _mm256_castsi256_ps(mask))
                } else {
                    _mm256_maskload_ps(src.wrapping_add(8 * h), mask)
                }
            });
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: `(p + q) * MR + r < len * MR`, the panel `sub`
                // checked.
                #[allow(unsafe_code)]
                let w = _mm256_set1_ps(unsafe { *pa.add((p + q) * MR + r) });
                for (acc, x) in acc.iter_mut().zip(x) {
                    *acc = _mm256_fmadd_ps(w, x, *acc);
                }
            }
        }
        p += run;
        (ch, t) = (ch + 1, 0);
    }
    let mut tile = [[0f32; NR]; MR];
    for (row, acc) in tile.iter_mut().zip(&acc) {
        for (h, v) in acc.iter().enumerate() {
            // SAFETY: a tile row holds NR = 2·8 floats.
            #[allow(unsafe_code)]
            unsafe {
                _mm256_storeu_ps(row.as_mut_ptr().add(8 * h), *v)
            };
        }
    }
    super::gemm::add_tile(c, &tile, i, j, rows, cols, end);
}

/// Where a wide tile's B values come from: output positions from `at`,
/// each tap's input `offsets[t]` away, lane `l` read where bit `l` of
/// `bits[t]` is set.
struct Wide<'t> {
    at: usize,
    offsets: &'t [isize; MOST_TAPS],
    bits: [u32; MOST_TAPS],
}

/// `P` A panels (one or two, rows `i..i + P·MR`) against the image's
/// [`SPAN`] output positions from `j`, read through the taps' masks: the
/// tile of C, its top-left `size` per panel written.
#[inline(always)]
fn wide_kernel<const P: usize, A: Load<f32>>(
    a: [A; P],
    depth: &Depth,
    reads: &Wide<'_>,
    c: &Dst<'_>,
    at: (usize, usize),
    size: ([usize; P], usize),
    ends: [(Option<[f32; MR]>, Finish); P],
) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `conv` takes this path only where `Isa::detect` found
        // AVX-512 F.
        #[allow(unsafe_code)]
        unsafe {
            if size.1 > NR {
                wide_kernel_avx512::<P, 2, A>(a, depth, reads, c, at, size, ends)
            } else {
                wide_kernel_avx512::<P, 1, A>(a, depth, reads, c, at, size, ends)
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (a, depth, reads, c, at, size, ends);
        unreachable!("the wide direct product needs AVX-512");
    }
}

/// The tile of [`wide_kernel`] in `H` 16-lane vectors per row: each
/// depth's `H` image vectors are loaded once (masked lanes are neither
/// read nor faulted on) and multiplied by all `P·MR` weights, so two
/// panels give 24 independent chains, enough to cover the latency of
/// two FMA units, with half the image loads per multiply-add of one.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn wide_kernel_avx512<const P: usize, const H: usize, A: Load<f32>>(
    a: [A; P],
    depth: &Depth,
    reads: &Wide<'_>,
    c: &Dst<'_>,
    (i, j): (usize, usize),
    (rows, cols): ([usize; P], usize),
    ends: [(Option<[f32; MR]>, Finish); P],
) {
    use core::arch::x86_64::*;
    const { assert!(NR == 16, "a 16-lane vector is one B panel's width") };
    let pa: [*const f32; P] = a.map(|a| a.sub(0, depth.len * MR).ptr());
    let mut acc = [[[_mm512_setzero_ps(); H]; MR]; P];
    let (ch, mut tap) = depth.first;
    // Formed with wrapping arithmetic: a tap's address may lie before the
    // image (the row above the first), where no lane reads. One flat loop
    // over the depths: nested loops over channels and taps made the
    // compiler store and reload all 24 sums once per channel.
    let mut channel = depth.image.wrapping_add(ch * depth.plane + reads.at);
    for p in 0..depth.len {
        let src = channel.wrapping_offset(reads.offsets[tap]);
        let bits = reads.bits[tap];
        // SAFETY: a lane's bit is set only where its input position
        // (output position plus the tap's offset) lies inside the plane
        // of a channel < `in_per_group`, all of which `conv` bounds-
        // checked; a masked load neither reads nor faults on the lanes it
        // leaves out. Nothing writes the image while the kernel reads.
        #[allow(unsafe_code)]
        let x: [__m512; H] = core::array::from_fn(|h| unsafe {
            _mm512_maskz_loadu_ps((bits >> (16 * h)) as u16, src.wrapping_add(16 * h))
        });
        for (pa, acc) in pa.iter().zip(acc.iter_mut()) {
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: `p * MR + r < len * MR`, the panel `sub` checked.
                #[allow(unsafe_code)]
                let w = _mm512_set1_ps(unsafe { *pa.add(p * MR + r) });
                for (acc, x) in acc.iter_mut().zip(x) {
                    *acc = _mm512_fmadd_ps(w, x, *acc);
                }
            }
        }
        tap += 1;
        if tap == depth.taps {
            tap = 0;
            channel = channel.wrapping_add(depth.plane);
        }
    }
    // Stored whole first (every index known at compile time): reading
    // the sums by a run-time index kept them in memory through the loop.
    let mut tiles = [[[[0f32; NR]; MR]; H]; P];
    for (tiles, acc) in tiles.iter_mut().zip(&acc) {
        for (r, acc) in acc.iter().enumerate() {
            for (tile, v) in tiles.iter_mut().zip(acc) {
                // SAFETY: a tile row holds NR = 16 floats.
                #[allow(unsafe_code)]
                unsafe {
                    _mm512_storeu_ps(tile[r].as_mut_ptr(), *v)
                };
            }
        }
    }
    for (panel, tiles) in tiles.iter().enumerate() {
        for (h, tile) in tiles.iter().enumerate() {
            let width = cols.saturating_sub(h * NR).min(NR);
            if width > 0 {
                let (row, end) = (i + panel * MR, ends[panel]);
                super::gemm::add_tile(c, tile, row, j + h * NR, rows[panel], width, end);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cells::Src;
    use crate::kernels::gemm::{Clamp, Finish};
    use crate::kernels::testing::{conv_shape, left_panels, packed_conv_bits, value};
    use alloc::vec::Vec;

    /// Random "same" stride-1 convolutions (kernels up to 7×7, every
    /// split of the padding, rows narrower and wider than a tile, depth
    /// blocks that end inside a channel's taps, groups, batches, thread
    /// shares, a bias and a clamp): the image read in place gives the
    /// bits of the im2col panels.
    #[test]
    fn reading_in_place_gives_the_packed_bits() {
        // Every kernel this CPU runs: the AVX2 one on AVX-512 CPUs too.
        let isas: Vec<Isa> = match Isa::detect() {
            Isa::Portable => return,
            Isa::Fma => [Isa::Fma].into(),
            Isa::Avx512 => [Isa::Fma, Isa::Avx512].into(),
        };
        let mut below = crate::kernels::testing::below(0x2545_f491_4f6c_dd1du64);
        for case in 0..200 {
            let kernel = [1, 1 + below(7), 1 + below(7)];
            if kernel == [1, 1, 1] {
                continue;
            }
            let input = [1, 1 + below(12), 1 + below(70)];
            let pad = [0, below(kernel[1]), below(kernel[2])];
            let pad_after = [0, kernel[1] - 1 - pad[1], kernel[2] - 1 - pad[2]];
            let (groups, batch) = (1 + below(2), 1 + below(2));
            let (ipg, opg) = (1 + below(6), 2 + below(40));
            let s = conv_shape(
                (batch, groups),
                (ipg, opg),
                [input, input, kernel, [1, 1, 1], pad, pad_after],
            );
            assert!(can(&s), "{:?}", s.window);
            let panels = left_panels(&s, [7, 16, 40, 256][below(4)]);
            let n = s.n();
            let x: Vec<f32> = (0..batch * groups * ipg * n).map(|i| value(i, 1)).collect();
            let w: Vec<f32> = (0..groups * opg * s.k()).map(|i| value(i, 2)).collect();
            let w = panels.pack(&w).expect("a dense kernel");
            let bias: Vec<f32> = (0..groups * opg).map(|i| value(i, 3)).collect();
            let finish = if below(2) == 0 {
                Finish::Keep
            } else {
                Finish::Clamp(Clamp {
                    lo: -0.5,
                    hi: 0.75,
                    max_first: true,
                })
            };
            let parts = 1 + below(3);
            let run = |direct: Option<Isa>| {
                let operands = (&x[..], &w[..], Some(Src::Weight(&bias[..])));
                packed_conv_bits(&s, (&panels, direct), operands, finish, parts)
            };
            let want = run(None);
            assert!(
                want.iter().all(|&b| !f32::from_bits(b).is_nan()),
                "case {case}: the packed product left outputs unwritten"
            );
            for &isa in &isas {
                let got = run(Some(isa));
                assert_eq!(
                    got, want,
                    "case {case}, {isa:?}: {:?}, kc {}",
                    s.window, panels.kc
                );
            }
        }
    }
}

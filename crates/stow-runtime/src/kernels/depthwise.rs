//! Depthwise convolution (one input and one output channel per group):
//! no product to pack for, so it runs directly on the image.
//!
//! With AVX-512, a 2-d convolution of strides 1–2 goes to
//! `depthwise_lanes` first (sixteen planes across vector lanes); the
//! bands below are the path of other CPUs and shapes, and the sums the
//! lanes reproduce to the bit.
//!
//! The fast path copies a band of the input plane into a zero-padded
//! buffer on the stack, split into its stride phases (rows and columns
//! by their remainder modulo the stride), so that every tap of the band's
//! outputs reads one contiguous run at a fixed offset. The band's output
//! rows are then computed as one flat run, [`CHUNK`] outputs at a time
//! summed in registers over all taps; each output row carries a few
//! unused columns (the padding's width), which are dropped when the band
//! is written to the output as bias + sums. Small planes thus cost a few chunks, not a
//! loop per row. With AVX2 and FMA (chosen at run time) each tap is one
//! fused multiply-add.
//!
//! Windows too wide for the buffer, strides above 2 and kernels of more
//! than [`MAX_TAPS`] taps per plane take the plain path: one tap at a
//! time over the columns of each output row it reaches.

use super::cells::{map_row, zip_row, Load};
use super::float::Float;
use super::gemm::Finish;
use super::linalg::ConvShape;
use super::pool::Window;
use core::cell::Cell;

/// Outputs summed in registers at once.
const CHUNK: usize = 16;

/// Floats of the padded band of input (4 KiB of stack).
const BAND_IN: usize = 1024;

/// Floats of the band's flat output (2 KiB of stack).
const BAND_OUT: usize = 512;

/// Most taps of one kernel plane the fast path takes (7 × 7).
const MAX_TAPS: usize = 49;

/// Longest half row the plain path's stride-2 split holds; wider rows
/// read the input with a stride.
const HALF_ROW: usize = 512;

/// Writes `bias(p)` plus the convolution of plane `p` of `x` with
/// `weight` over output plane `p` of `out`, for every `p` in `planes`,
/// each output then through `finish` while it is in cache. `out` starts
/// at output plane `first` (0 for the whole output; the in-place kernel
/// passes a one-plane temporary); what it held before is never read.
#[allow(clippy::too_many_arguments)]
pub(super) fn depthwise(
    s: &ConvShape,
    x: impl Load<f32>,
    weight: impl Load<f32>,
    bias: impl Fn(usize) -> f32,
    out: &[Cell<f32>],
    planes: core::ops::Range<usize>,
    first: usize,
    finish: Finish,
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(lanes) = super::depthwise_lanes::Lanes::of(s, false) {
        let none = (|_| {}, |_| {});
        let (bias, planes) = (&bias, planes.clone());
        if super::depthwise_lanes::run(&lanes, s, x, weight, bias, out, planes, first, finish, none)
        {
            return;
        }
    }
    let Some(band) = Band::of(&s.window) else {
        return plain(s, x, weight, bias, out, planes, first, finish);
    };
    let plane = s.window.output_plane();
    let hooks = Hooks {
        place: |p: usize| (p - first) * plane,
        bias,
        after: |_| {},
    };
    run_banded(s, &band, x, weight, out, planes, finish, hooks)
}

/// [`depthwise`] of `planes` one at a time into `temp` (one output plane):
/// plane `p` is written there and finished, then `after(p)` moves it to
/// its place. The band and its buffers are set up once for all the
/// planes; calling [`depthwise`] per plane set them up (and zeroed 6 KiB)
/// for each. False, having done nothing, where the band kernel does not
/// apply.
#[allow(clippy::too_many_arguments)]
pub(super) fn depthwise_through(
    s: &ConvShape,
    x: impl Load<f32>,
    weight: impl Load<f32>,
    bias: impl Fn(usize) -> f32,
    temp: &[Cell<f32>],
    planes: core::ops::Range<usize>,
    finish: Finish,
    after: impl FnMut(usize),
) -> bool {
    let Some(band) = Band::of(&s.window) else {
        return false;
    };
    let hooks = Hooks {
        place: |_| 0,
        bias,
        after,
    };
    run_banded(s, &band, x, weight, temp, planes, finish, hooks);
    true
}

/// Where each plane's output starts in `out`, its bias, and what to do
/// after it.
struct Hooks<P, B, A> {
    place: P,
    bias: B,
    after: A,
}

#[allow(clippy::too_many_arguments)]
fn run_banded<P: Fn(usize) -> usize, B: Fn(usize) -> f32, A: FnMut(usize)>(
    s: &ConvShape,
    band: &Band,
    x: impl Load<f32>,
    weight: impl Load<f32>,
    out: &[Cell<f32>],
    planes: core::ops::Range<usize>,
    finish: Finish,
    hooks: Hooks<P, B, A>,
) {
    #[cfg(target_arch = "x86_64")]
    match super::gemm::Isa::detect() {
        // SAFETY: the function only needs the CPU to have AVX-512 F,
        // AVX2 and FMA, which `Isa::detect` checked at run time.
        #[allow(unsafe_code)]
        super::gemm::Isa::Avx512 => {
            return unsafe { banded_avx512(s, band, x, weight, out, planes, finish, hooks) }
        }
        // SAFETY: as above, AVX2 and FMA.
        #[allow(unsafe_code)]
        super::gemm::Isa::Fma => {
            return unsafe { banded_fma(s, band, x, weight, out, planes, finish, hooks) }
        }
        super::gemm::Isa::Portable => {}
    }
    banded::<false, P, B, A>(s, band, x, weight, out, planes, finish, hooks)
}

/// [`banded_fma`] compiled for 16-lane vectors: the same source and
/// sums, half the instructions per output row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
fn banded_avx512<P: Fn(usize) -> usize, B: Fn(usize) -> f32, A: FnMut(usize)>(
    s: &ConvShape,
    band: &Band,
    x: impl Load<f32>,
    weight: impl Load<f32>,
    out: &[Cell<f32>],
    planes: core::ops::Range<usize>,
    finish: Finish,
    hooks: Hooks<P, B, A>,
) {
    banded::<true, P, B, A>(s, band, x, weight, out, planes, finish, hooks)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
fn banded_fma<P: Fn(usize) -> usize, B: Fn(usize) -> f32, A: FnMut(usize)>(
    s: &ConvShape,
    band: &Band,
    x: impl Load<f32>,
    weight: impl Load<f32>,
    out: &[Cell<f32>],
    planes: core::ops::Range<usize>,
    finish: Finish,
    hooks: Hooks<P, B, A>,
) {
    banded::<true, P, B, A>(s, band, x, weight, out, planes, finish, hooks)
}

/// How a band of the padded input sits in the buffer: `sy × sx` phase
/// planes of `rows_in × width`. Phase plane `(py, px)` row `t` column
/// `u` holds the padded input's row `first + t·sy + py`, column
/// `u·sx + px`, where `first` is the band's first output row times `sy`.
/// Output `(oy, ox)` of the band is flat element `oy·width + ox`, and
/// tap `(ky, kx)` reads it at flat element plus `offsets[ky·kw + kx]`.
struct Band {
    /// Row and column strides.
    sy: usize,
    sx: usize,
    /// Columns of a phase plane: the output row's and the kernel's reach.
    width: usize,
    /// Rows of a phase plane.
    rows_in: usize,
    /// Output rows per band.
    rows_out: usize,
    /// Where each tap reads, relative to its output's flat element.
    offsets: [usize; MAX_TAPS],
}

impl Band {
    /// The layout for `w`, or `None` when the plain path must run.
    fn of(w: &Window) -> Option<Band> {
        let [_, kh, kw] = w.kernel;
        let [_, sy, sx] = w.strides;
        let [_, dy, dx] = w.dilations;
        let [_, oh, ow] = w.output;
        if sy > 2 || sx > 2 || kh * kw > MAX_TAPS || oh == 0 || ow == 0 {
            return None;
        }
        let (reach_y, reach_x) = ((kh - 1) * dy / sy, (kw - 1) * dx / sx);
        let width = ow + reach_x;
        // The flat output plus one chunk's overrun, and every phase plane
        // plus the overrun of the last chunk's farthest tap.
        let by_out = BAND_OUT.checked_sub(CHUNK)? / width;
        let by_in =
            (BAND_IN.checked_sub(width + 2 * CHUNK)? / (sy * sx * width)).checked_sub(reach_y)?;
        let rows_out = by_out.min(by_in).min(oh);
        if rows_out == 0 {
            return None;
        }
        let rows_in = rows_out + reach_y;
        let mut offsets = [0; MAX_TAPS];
        for ky in 0..kh {
            for kx in 0..kw {
                let (y, x) = (ky * dy, kx * dx);
                let phase = (y % sy) * sx + x % sx;
                offsets[ky * kw + kx] = phase * rows_in * width + (y / sy) * width + x / sx;
            }
        }
        Some(Band {
            sy,
            sx,
            width,
            rows_in,
            rows_out,
            offsets,
        })
    }

    /// Fills `buf` with the band whose first output row is `oy0`, from
    /// the input plane slice `plane` (`ih × iw`). At stride 1 along the
    /// columns, `buf`'s padding columns must be zero (`pad_row`): a buffer
    /// made zero and filled only by this function keeps them so.
    #[inline(always)]
    fn fill(&self, w: &Window, buf: &mut [f32], plane: impl Load<f32>, oy0: usize) {
        let [_, ih, iw] = w.input;
        let (pad_y, width) = (w.pad[1], self.width);
        let phase_plane = self.rows_in * width;
        for py in 0..self.sy {
            for t in 0..self.rows_in {
                let y = (oy0 + t) * self.sy + py;
                let at = py * self.sx * phase_plane + t * width;
                let row = (y >= pad_y && y - pad_y < ih).then(|| plane.sub((y - pad_y) * iw, iw));
                match (row, self.sx) {
                    (None, _) => {
                        for px in 0..self.sx {
                            let at = at + px * phase_plane;
                            buf[at..at + width].fill(0.0);
                        }
                    }
                    (Some(row), 1) => pad_row(&mut buf[at..at + width], row, w.pad[2]),
                    (Some(row), _) => {
                        let (even, odd) = buf[at..].split_at_mut(phase_plane);
                        split_row(&mut even[..width], &mut odd[..width], row, w.pad[2]);
                    }
                }
            }
        }
    }
}

/// `dst[u]` = `row[u − pad]` where `u − pad` lies inside the row. The
/// columns outside it are left as they are: in a band buffer they are
/// the padding, zero from the buffer's start, and nothing writes them
/// other values (every row of a stride-1 band puts its values at the same
/// columns). Zeroing them here was two calls of `memset` per row.
#[inline(always)]
fn pad_row(dst: &mut [f32], row: impl Load<f32>, pad: usize) {
    let iw = row.count();
    let (u0, u1) = (pad.min(dst.len()), (iw + pad).min(dst.len()));
    if u0 < u1 {
        super::cells::read_into(&mut dst[u0..u1], row);
    }
}

/// `even[u]` = `row[2u − pad]` and `odd[u]` = `row[2u + 1 − pad]`, zero
/// outside the row; one loop over the columns where both are inside, so
/// that it vectorises as a de-interleave.
#[inline(always)]
fn split_row(even: &mut [f32], odd: &mut [f32], row: impl Load<f32>, pad: usize) {
    let (iw, width) = (row.count(), even.len());
    let at = |j: usize| {
        if j >= pad && j - pad < iw {
            row.load(j - pad)
        } else {
            0.0
        }
    };
    // Columns u in [u0, u1) have 2u − pad ≥ 0 and 2u + 1 − pad < iw.
    let u0 = pad.div_ceil(2).min(width);
    let u1 = ((iw + pad) / 2).clamp(u0, width);
    for u in (0..u0).chain(u1..width) {
        even[u] = at(2 * u);
        odd[u] = at(2 * u + 1);
    }
    if u0 < u1 {
        let src = row.sub(2 * u0 - pad, 2 * (u1 - u0));
        let (even, odd) = (&mut even[u0..u1], &mut odd[u0..u1]);
        // Sixteen values read whole, then dealt out: one bounds check per
        // chunk, so the de-interleave vectorises.
        let whole = even.len() / 8 * 8;
        for i in (0..whole).step_by(8) {
            let s = src.sub(2 * i, 16);
            let v: [f32; 16] = core::array::from_fn(|l| s.load(l));
            let (e, o) = (&mut even[i..i + 8], &mut odd[i..i + 8]);
            for l in 0..8 {
                e[l] = v[2 * l];
                o[l] = v[2 * l + 1];
            }
        }
        for i in whole..even.len() {
            even[i] = src.load(2 * i);
            odd[i] = src.load(2 * i + 1);
        }
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn banded<const FMA: bool, P: Fn(usize) -> usize, B: Fn(usize) -> f32, A: FnMut(usize)>(
    s: &ConvShape,
    band: &Band,
    x: impl Load<f32>,
    weight: impl Load<f32>,
    out: &[Cell<f32>],
    planes: core::ops::Range<usize>,
    finish: Finish,
    mut hooks: Hooks<P, B, A>,
) {
    let w = &s.window;
    let [_, ih, iw] = w.input;
    let [od, oh, ow] = w.output;
    let [kd, kh, kw] = w.kernel;
    let taps = kh * kw;
    let offsets = &band.offsets[..taps];
    let mut buf = [0f32; BAND_IN];
    let mut flat = [0f32; BAND_OUT];
    for plane in planes {
        let b = (hooks.bias)(plane);
        let ch = plane % s.groups;
        let xb = plane * w.input_plane();
        let ob = (hooks.place)(plane);
        for oz in 0..od {
            let (kz0, kz1) = w.taps(0, oz);
            let depth_plane = &out[ob + oz * oh * ow..ob + (oz + 1) * oh * ow];
            // With one depth tap (every 2-d convolution) each band's rows
            // are complete once written: they are stored as bias + sums
            // and finished while in cache, and the output is never read.
            // Otherwise the bias comes first and each tap adds to it.
            let single = kz1 - kz0 == 1;
            if !single {
                depth_plane.iter().for_each(|c| c.set(b));
            }
            for kz in kz0..kz1 {
                let z = w.input_at(0, oz, kz);
                let slice = x.sub(xb + z * ih * iw, ih * iw);
                let weights = weight.sub((ch * kd + kz) * taps, taps);
                let mut wv = [0f32; MAX_TAPS];
                for (t, v) in wv[..taps].iter_mut().enumerate() {
                    *v = weights.load(t);
                }
                let mut oy0 = 0;
                while oy0 < oh {
                    let rows = band.rows_out.min(oh - oy0);
                    band.fill(w, &mut buf, slice, oy0);
                    let n = rows * band.width;
                    // Chunks in fours where they can: one chunk alone is a
                    // chain of dependent multiply-adds per register.
                    let (mut f0, end) = (0, n.div_ceil(CHUNK) * CHUNK);
                    while f0 + 4 * CHUNK <= end {
                        let sums = chunks::<FMA, 4>(&buf, f0, offsets, &wv[..taps]);
                        flat[f0..f0 + 4 * CHUNK].copy_from_slice(sums.as_flattened());
                        f0 += 4 * CHUNK;
                    }
                    while f0 < end {
                        let [sum] = chunks::<FMA, 1>(&buf, f0, offsets, &wv[..taps]);
                        flat[f0..f0 + CHUNK].copy_from_slice(&sum);
                        f0 += CHUNK;
                    }
                    let band_out = &depth_plane[oy0 * ow..(oy0 + rows) * ow];
                    for (r, dst) in band_out.chunks_exact(ow).enumerate() {
                        let row = &flat[r * band.width..r * band.width + ow];
                        if single {
                            map_row(dst, row, |v| b + v);
                        } else {
                            zip_row(dst, dst, row, |o, v| o + v);
                        }
                    }
                    if single {
                        finish.apply(band_out);
                    }
                    oy0 += rows;
                }
            }
            if !single {
                finish.apply(depth_plane);
            }
        }
        (hooks.after)(plane);
    }
}

/// The `K` chunks of outputs from flat element `f0`: every tap's weight
/// times the band at the tap's offset, summed in tap order.
#[inline(always)]
fn chunks<const FMA: bool, const K: usize>(
    buf: &[f32],
    f0: usize,
    offsets: &[usize],
    weights: &[f32],
) -> [[f32; CHUNK]; K] {
    let mut acc = [[0f32; CHUNK]; K];
    for (&off, &wv) in offsets.iter().zip(weights) {
        let src: &[f32] = &buf[off + f0..off + f0 + K * CHUNK];
        for (k, acc) in acc.iter_mut().enumerate() {
            let src: &[f32; CHUNK] = src[k * CHUNK..(k + 1) * CHUNK]
                .try_into()
                .expect("a chunk is CHUNK long");
            for i in 0..CHUNK {
                acc[i] = if FMA {
                    Float::mul_add(wv, src[i], acc[i])
                } else {
                    acc[i] + wv * src[i]
                };
            }
        }
    }
    acc
}

/// The plain path: each output plane starts as the bias, then each
/// output row adds, for every kernel row, its `kw`
/// taps, one tap at a time over the columns it reaches. Each tap reads a
/// contiguous run of the input row or, for stride 2, of its even or odd
/// columns, split once per input row into a buffer on the stack.
#[allow(clippy::too_many_arguments)]
fn plain(
    s: &ConvShape,
    x: impl Load<f32>,
    weight: impl Load<f32>,
    bias: impl Fn(usize) -> f32,
    out: &[Cell<f32>],
    planes: core::ops::Range<usize>,
    first: usize,
    finish: Finish,
) {
    let w = &s.window;
    let [_, ih, iw] = w.input;
    let [od, oh, ow] = w.output;
    let [kd, kh, kw] = w.kernel;
    let split = w.strides[2] == 2 && iw.div_ceil(2) <= HALF_ROW;
    let mut halves = [[0f32; HALF_ROW]; 2];
    for plane in planes {
        let ch = plane % s.groups;
        let xb = plane * w.input_plane();
        let ob = (plane - first) * w.output_plane();
        let b = bias(plane);
        out[ob..ob + w.output_plane()].iter().for_each(|c| c.set(b));
        for oz in 0..od {
            let (kz0, kz1) = w.taps(0, oz);
            for oy in 0..oh {
                let (ky0, ky1) = w.taps(1, oy);
                let at = ob + (oz * oh + oy) * ow;
                let row_out = &out[at..at + ow];
                for kz in kz0..kz1 {
                    let z = w.input_at(0, oz, kz);
                    for ky in ky0..ky1 {
                        let y = w.input_at(1, oy, ky);
                        let row_in = x.sub(xb + (z * ih + y) * iw, iw);
                        let taps = weight.sub(((ch * kd + kz) * kh + ky) * kw, kw);
                        if split {
                            let [even, odd] = &mut halves;
                            for i in 0..iw / 2 {
                                even[i] = row_in.load(2 * i);
                                odd[i] = row_in.load(2 * i + 1);
                            }
                            if iw % 2 == 1 {
                                even[iw / 2] = row_in.load(iw - 1);
                            }
                            add_taps(w, row_out, row_in, Some((&*even, &*odd)), taps);
                        } else {
                            add_taps(w, row_out, row_in, None, taps);
                        }
                    }
                }
            }
        }
        finish.apply(&out[ob..ob + w.output_plane()]);
    }
}

/// Adds one kernel row's taps (`taps`, `kw` weights) of input row
/// `row_in` to `row_out`, one tap at a time over the columns it reaches;
/// `halves` is the row split into even and odd columns when the stride
/// is 2, so that each tap reads a contiguous run.
#[inline(always)]
fn add_taps(
    w: &Window,
    row_out: &[Cell<f32>],
    row_in: impl Load<f32>,
    halves: Option<(&[f32], &[f32])>,
    taps: impl Load<f32>,
) {
    let (iw, ow) = (w.input[2], w.output[2]);
    let (s, pad) = (w.strides[2], w.pad[2]);
    for kx in 0..w.kernel[2] {
        let wv = taps.load(kx);
        let off = kx * w.dilations[2];
        // Output columns [first, end) whose tap kx lands inside the row.
        let first = pad.saturating_sub(off).div_ceil(s);
        let end = if iw + pad > off {
            ((iw + pad - off - 1) / s + 1).min(ow)
        } else {
            0
        };
        if first >= end {
            continue;
        }
        let count = end - first;
        let start = first * s + off - pad;
        let dst = &row_out[first..end];
        match (s, halves) {
            (1, _) => zip_row(dst, dst, row_in.sub(start, count), |o, x| o + wv * x),
            (_, Some((even, odd))) => {
                let half = if start.is_multiple_of(2) { even } else { odd };
                zip_row(dst, dst, &half[start / 2..start / 2 + count], |o, x| {
                    o + wv * x
                })
            }
            _ => {
                for (j, c) in dst.iter().enumerate() {
                    c.set(c.get() + wv * row_in.load(start + j * s));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::gemm::Clamp;
    use alloc::vec::Vec;

    /// The direct definition: every tap of every output.
    fn naive(s: &ConvShape, x: &[f32], weight: &[f32]) -> Vec<f32> {
        let w = &s.window;
        let [_, ih, iw] = w.input;
        let [od, oh, ow] = w.output;
        let [kd, kh, kw] = w.kernel;
        let planes = s.batch * s.groups;
        let mut out = Vec::new();
        for plane in 0..planes {
            let ch = plane % s.groups;
            for oz in 0..od {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut sum = 0f64;
                        for kz in 0..kd {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let at = |a: usize, o: usize, k: usize| {
                                        (o * w.strides[a] + k * w.dilations[a]) as isize
                                            - w.pad[a] as isize
                                    };
                                    let (z, y, xx) = (at(0, oz, kz), at(1, oy, ky), at(2, ox, kx));
                                    if z < 0 || y < 0 || xx < 0 {
                                        continue;
                                    }
                                    let (z, y, xx) = (z as usize, y as usize, xx as usize);
                                    if z >= w.input[0] || y >= ih || xx >= iw {
                                        continue;
                                    }
                                    let xv = x[plane * w.input_plane() + (z * ih + y) * iw + xx];
                                    let wv = weight[((ch * kd + kz) * kh + ky) * kw + kx];
                                    sum += f64::from(xv) * f64::from(wv);
                                }
                            }
                        }
                        out.push(sum as f32);
                    }
                }
            }
        }
        out
    }

    fn value(i: usize, seed: usize) -> f32 {
        ((i * 2_654_435_761 + seed * 40_503) % 1000) as f32 / 500.0 - 1.0
    }

    /// One case: a plane of `ih × iw` (depth `id`), a kernel of
    /// `kd × kh × kw`; per axis stride, dilation, padding before and the
    /// extra padding after (ceil-mode outputs reaching into it).
    #[derive(Clone, Copy)]
    struct Case {
        input: [usize; 3],
        kernel: [usize; 3],
        strides: [usize; 3],
        dilations: [usize; 3],
        pad: [usize; 3],
        extra: [usize; 3],
    }

    fn shape(c: &Case, channels: usize) -> ConvShape {
        let output = core::array::from_fn(|a| {
            (c.input[a] + 2 * c.pad[a] + c.extra[a] - c.dilations[a] * (c.kernel[a] - 1) - 1)
                / c.strides[a]
                + 1
        });
        ConvShape {
            batch: 1,
            groups: channels,
            in_per_group: 1,
            out_per_group: 1,
            window: Window {
                planes: channels,
                input: c.input,
                output,
                kernel: c.kernel,
                strides: c.strides,
                dilations: c.dilations,
                pad: c.pad,
                pad_after: core::array::from_fn(|a| c.pad[a] + c.extra[a]),
            },
        }
    }

    /// Every path (the banded one with and without fused multiply-adds,
    /// the plain one) against the definition on `c`.
    fn check(c: Case) -> usize {
        let s = shape(&c, 3);
        let w = &s.window;
        let x: Vec<f32> = (0..3 * w.input_plane()).map(|i| value(i, 1)).collect();
        let weight: Vec<f32> = (0..3 * c.kernel.iter().product::<usize>())
            .map(|i| value(i, 2))
            .collect();
        let want = naive(&s, &x, &weight);
        let bias: Vec<f32> = (0..3).map(|i| value(i, 3)).collect();
        let plane = w.output_plane();
        let mut paths = 0;
        // Each plane finished with a clamp that bites on both sides.
        let clamp = Clamp {
            lo: -0.5,
            hi: 0.5,
            max_first: true,
        };
        let finish = Finish::Clamp(clamp);
        let plane_bias = |p: usize| bias[p];
        for path in ["dispatch", "plain", "banded", "banded fma"] {
            let band = Band::of(w);
            // The kernels write every output: what was there is never read.
            let out: Vec<Cell<f32>> = (0..want.len()).map(|_| Cell::new(f32::NAN)).collect();
            match (path, &band) {
                ("dispatch", _) => {
                    depthwise(&s, &x[..], &weight[..], plane_bias, &out, 0..3, 0, finish)
                }
                ("plain", _) => plain(&s, &x[..], &weight[..], plane_bias, &out, 0..3, 0, finish),
                ("banded", Some(b)) => {
                    let hooks = Hooks {
                        place: |p: usize| p * plane,
                        bias: plane_bias,
                        after: |_| {},
                    };
                    banded::<false, _, _, _>(&s, b, &x[..], &weight[..], &out, 0..3, finish, hooks)
                }
                ("banded fma", Some(b)) => {
                    let hooks = Hooks {
                        place: |p: usize| p * plane,
                        bias: plane_bias,
                        after: |_| {},
                    };
                    banded::<true, _, _, _>(&s, b, &x[..], &weight[..], &out, 0..3, finish, hooks)
                }
                _ => continue,
            }
            for (i, (o, w)) in out.iter().zip(&want).enumerate() {
                let w = clamp.apply(w + bias[i / plane]);
                assert!(
                    (o.get() - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "{path}: input {:?} kernel {:?} strides {:?} dilations {:?} pad {:?}+{:?}: output {i} is {} not {w}",
                    c.input, c.kernel, c.strides, c.dilations, c.pad, c.extra,
                    o.get()
                );
            }
            paths += 1;
        }
        paths
    }

    /// Rows around the chunk width, strides 1–3, dilations, kernels wider
    /// than the input, asymmetric padding, rows wider than the band or
    /// the plain path's stride-2 split holds.
    #[test]
    fn rows_match_the_definition() {
        let mut banded = 0;
        for (iw, kw, stride, dil, pad, extra) in [
            (7, 3, 1, 1, 1, 0),
            (15, 3, 1, 1, 1, 0),
            (16, 3, 1, 1, 1, 0),
            (17, 3, 2, 1, 1, 0),
            (56, 3, 1, 1, 1, 0),
            (56, 3, 2, 1, 1, 0),
            (57, 3, 2, 1, 0, 1),
            (130, 5, 1, 1, 2, 0),
            (130, 5, 2, 1, 2, 0),
            (64, 3, 1, 2, 2, 0),
            (65, 3, 2, 3, 3, 1),
            (20, 7, 1, 1, 3, 0),
            (20, 7, 3, 1, 3, 0),
            (1, 1, 1, 1, 0, 0),
            (4, 5, 1, 1, 2, 0),
            (300, 3, 1, 200, 200, 0),
            (1100, 3, 2, 1, 1, 0),
        ] {
            let paths = check(Case {
                input: [1, 3, iw],
                kernel: [1, 3, kw],
                strides: [1, 1, stride],
                dilations: [1, 1, dil],
                pad: [0, 1, pad],
                extra: [0, 0, extra],
            });
            assert!(paths >= 2);
            banded += usize::from(paths == 4);
        }
        // Stride 3, the 300-wide dilated row and the 1100-wide row run plain.
        assert_eq!(banded, 14);
    }

    /// The lanes path against the bands (fused), to the bit, and against
    /// the definition: random planes, kernels 1–7 wide, strides 1–2,
    /// dilations, asymmetric padding, planes up to 70 wide (strips of rows
    /// through the ring), 1–40 planes (short last blocks,
    /// planes of two images), every finish, a sub-range of the planes
    /// written from a plane other than 0.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn lanes_match_the_bands_to_the_bit() {
        use crate::kernels::depthwise_lanes::{run, Lanes};
        if super::super::gemm::Isa::detect() != super::super::gemm::Isa::Avx512 {
            return;
        }
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut below = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let finishes = [
            Finish::Keep,
            Finish::Clamp(Clamp {
                lo: 0.0,
                hi: 0.6,
                max_first: true,
            }),
            Finish::Sigmoid,
            Finish::Silu,
            Finish::HardSwish,
        ];
        let (mut cases, mut fixed, mut striped, mut tried) = (0, 0, 0, 0);
        while cases < 400 {
            tried += 1;
            assert!(tried < 100_000, "too few shapes take the lanes path");
            let k = [1, 2, 3, 3, 5, 5, 7][below(7)];
            // Small planes (one strip) and wide ones (strips of rows).
            let side = [16, 16, 70][below(3)];
            let case = Case {
                input: [1, 1 + below(side), 1 + below(side)],
                kernel: [1, if below(4) == 0 { 1 + below(5) } else { k }, k],
                strides: [1, 1 + below(2), 1 + below(2)],
                dilations: [
                    1,
                    1 + usize::from(below(5) == 0),
                    1 + usize::from(below(5) == 0),
                ],
                pad: [0, below(4), below(4)],
                extra: [0, below(2), below(2)],
            };
            let reach = |a: usize| case.dilations[a] * (case.kernel[a] - 1) + 1;
            if (1..3).any(|a| case.input[a] + 2 * case.pad[a] + case.extra[a] < reach(a)) {
                continue;
            }
            let channels = 1 + below(24);
            let mut s = shape(&case, channels);
            s.batch = 1 + below(2);
            let Some(lanes) = Lanes::of(&s, false) else {
                continue;
            };
            let w = &s.window;
            let planes = s.batch * channels;
            let (ip, op) = (w.input_plane(), w.output_plane());
            let taps = case.kernel[1] * case.kernel[2];
            let x: Vec<f32> = (0..planes * ip).map(|i| value(i, cases + 1)).collect();
            let weight: Vec<f32> = (0..channels * taps).map(|i| value(i, cases + 7)).collect();
            let bias: Vec<f32> = (0..channels).map(|i| value(i, cases + 11)).collect();
            let plane_bias = |p: usize| bias[p % channels];
            let finish = finishes[below(finishes.len())];
            let band = Band::of(w).expect("a plane the lanes take fits a band");
            let want: Vec<Cell<f32>> = (0..planes * op).map(|_| Cell::new(f32::NAN)).collect();
            let hooks = Hooks {
                place: |p: usize| p * op,
                bias: plane_bias,
                after: |_| {},
            };
            let all = 0..planes;
            banded::<true, _, _, _>(&s, &band, &x[..], &weight[..], &want, all, finish, hooks);
            // Planes [from, planes) written into an output that starts at
            // plane `from`, whose first planes are left NaN.
            let from = below(planes);
            let got: Vec<Cell<f32>> = (0..planes * op).map(|_| Cell::new(f32::NAN)).collect();
            let (mut read, mut stored) = (Vec::new(), Vec::new());
            let hooks = (|end| read.push(end), |end| stored.push(end));
            let out = &got[from * op..];
            assert!(run(
                &lanes,
                &s,
                &x[..],
                &weight[..],
                plane_bias,
                out,
                from..planes,
                from,
                finish,
                hooks
            ));
            let blocks: Vec<usize> = (from..planes)
                .step_by(16)
                .map(|p| (p + 16).min(planes))
                .collect();
            assert_eq!((&read, &stored), (&blocks, &blocks));
            for (i, (g, w)) in got.iter().zip(&want).enumerate().skip(from * op) {
                assert_eq!(
                    g.get().to_bits(),
                    w.get().to_bits(),
                    "{case_input:?} kernel {kernel:?} strides {strides:?} dilations {dil:?} pad {pad:?}+{extra:?}, {planes} planes from {from}: output {i} is {} not {}",
                    g.get(),
                    w.get(),
                    case_input = case.input,
                    kernel = case.kernel,
                    strides = case.strides,
                    dil = case.dilations,
                    pad = case.pad,
                    extra = case.extra,
                );
            }
            assert!(got[..from * op].iter().all(|c| c.get().is_nan()));
            if matches!(finish, Finish::Keep) {
                let exact = naive(&s, &x, &weight);
                for (i, (g, e)) in got.iter().zip(&exact).enumerate().skip(from * op) {
                    let e = e + bias[i / op % channels];
                    assert!(
                        (g.get() - e).abs() <= 1e-5 * (1.0 + e.abs()),
                        "output {i}: {} not {e}",
                        g.get()
                    );
                }
            }
            striped += usize::from(lanes.strip() < w.output[1]);
            fixed += usize::from(
                matches!((case.kernel[1], case.kernel[2]), (3, 3) | (5, 5))
                    && case.dilations[2] == 1,
            );
            cases += 1;
        }
        assert!(
            fixed > 50,
            "{fixed} cases with the windows held in registers"
        );
        assert!(striped > 50, "{striped} cases in strips of rows");
    }

    /// Planes taller than one band (rows of the band's edges), vertical
    /// strides and dilations, 5×5 kernels and a 3-d window.
    #[test]
    fn planes_match_the_definition() {
        let mut bands = 0;
        for (input, kernel, strides, dilations, pad, extra) in [
            (
                [1, 112, 112],
                [1, 3, 3],
                [1, 1, 1],
                [1, 1, 1],
                [0, 1, 1],
                [0, 0, 0],
            ),
            (
                [1, 112, 112],
                [1, 3, 3],
                [1, 2, 2],
                [1, 1, 1],
                [0, 1, 1],
                [0, 0, 0],
            ),
            (
                [1, 57, 57],
                [1, 5, 5],
                [1, 2, 2],
                [1, 1, 1],
                [0, 2, 2],
                [0, 1, 1],
            ),
            (
                [1, 40, 30],
                [1, 3, 3],
                [1, 2, 1],
                [1, 2, 1],
                [0, 2, 1],
                [0, 1, 0],
            ),
            (
                [1, 7, 7],
                [1, 3, 3],
                [1, 1, 1],
                [1, 1, 1],
                [0, 1, 1],
                [0, 0, 0],
            ),
            (
                [1, 9, 200],
                [1, 4, 3],
                [1, 1, 2],
                [1, 1, 1],
                [0, 0, 1],
                [0, 1, 0],
            ),
            (
                [4, 10, 12],
                [3, 3, 3],
                [2, 1, 1],
                [1, 1, 1],
                [1, 1, 1],
                [0, 0, 0],
            ),
        ] {
            let case = Case {
                input,
                kernel,
                strides,
                dilations,
                pad,
                extra,
            };
            let s = shape(&case, 1);
            let band = Band::of(&s.window).expect("these shapes take the banded path");
            bands += s.window.output[1].div_ceil(band.rows_out);
            assert_eq!(check(case), 4);
        }
        assert!(bands > 20, "{bands} bands: the cases must cross band edges");
    }
}

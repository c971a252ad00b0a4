//! Convolution (through the packed product, reading the image directly)
//! and the depthwise case, which has no product to speak of.

use super::cells::{zip_row, Load, Src};
use super::gemm::{self, Dst, PackB, Strided, NR};
use super::nn::Window;
use core::cell::Cell;

/// A convolution's shape: `groups` groups of `out_per_group` output and
/// `in_per_group` input channels per image, over [`Window`] geometry (its
/// `planes` is unused here).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConvShape {
    /// Images.
    pub batch: usize,
    /// Groups.
    pub groups: usize,
    /// Input channels per group.
    pub in_per_group: usize,
    /// Output channels per group.
    pub out_per_group: usize,
    /// Spatial geometry.
    pub window: Window,
}

impl ConvShape {
    /// Depth of the product: input channels per group × kernel taps.
    pub fn k(&self) -> usize {
        self.in_per_group * self.window.kernel.iter().product::<usize>()
    }

    /// Output positions per image.
    pub fn n(&self) -> usize {
        self.window.output_plane()
    }

    /// True for one input and one output channel per group.
    pub fn depthwise(&self) -> bool {
        self.in_per_group == 1 && self.out_per_group == 1
    }

    /// True when the image itself is the right operand (1×1 kernel,
    /// stride 1, no padding).
    pub fn pointwise(&self) -> bool {
        let w = &self.window;
        w.kernel == [1, 1, 1] && w.strides == [1, 1, 1] && w.pad == [0, 0, 0] && w.input == w.output
    }

    /// Scratch floats [`conv`] needs.
    pub fn scratch_elems(&self) -> usize {
        if self.depthwise() {
            0
        } else {
            gemm::scratch_elems(self.out_per_group, self.n(), self.k())
        }
    }
}

/// The image of one group seen as the `k × n` matrix of im2col, packed
/// on the fly.
struct Im2col<L> {
    data: L,
    base: usize,
    s: ConvShape,
}

impl<L: Load<f32>> PackB for Im2col<L> {
    fn pack(&self, p0: usize, kc: usize, j0: usize, nc: usize, dst: &[Cell<f32>]) {
        let w = &self.s.window;
        let [id, ih, iw] = w.input.map(|d| d as isize);
        let [_, oh, ow] = w.output;
        let [kd, kh, kw] = w.kernel;
        let n = self.s.n();
        let far = isize::MIN / 4;
        for (panel, c0) in (0..nc).step_by(NR).enumerate() {
            let out = &dst[panel * kc * NR..(panel + 1) * kc * NR];
            // First input position of each column's window (columns past
            // the matrix get a position no tap can reach).
            let mut corner = [[far; 3]; NR];
            for (c, pos) in corner.iter_mut().enumerate() {
                let j = j0 + c0 + c;
                if j < n {
                    let o = [j / (oh * ow), j / ow % oh, j % ow];
                    *pos = core::array::from_fn(|a| {
                        (o[a] * w.strides[a]) as isize - w.pad[a] as isize
                    });
                }
            }
            for (p, o) in out.chunks_exact(NR).enumerate() {
                let tap = p0 + p;
                let k = [tap / (kh * kw) % kd, tap / kw % kh, tap % kw];
                let ch = tap / (kd * kh * kw);
                let plane = self.base + ch * w.input_plane();
                let d: [isize; 3] = core::array::from_fn(|a| (k[a] * w.dilations[a]) as isize);
                for (cell, c) in o.iter().zip(&corner) {
                    let (z, y, x) = (c[0] + d[0], c[1] + d[1], c[2] + d[2]);
                    let inside =
                        (0..id).contains(&z) && (0..ih).contains(&y) && (0..iw).contains(&x);
                    cell.set(if inside {
                        self.data.load(plane + ((z * ih + y) * iw + x) as usize)
                    } else {
                        0.0
                    });
                }
            }
        }
    }
}

/// Bias of output channel `channel`: one value for all, one per
/// channel, or none.
fn bias_at(bias: Option<Src<'_, f32>>, channel: usize) -> f32 {
    match bias {
        Some(b) if b.len() == 1 => b.at(0),
        Some(b) => b.at(channel),
        None => 0.0,
    }
}

/// Writes each output channel's bias (or zero) over columns `cols` of
/// its plane.
pub(crate) fn fill_bias(
    s: &ConvShape,
    bias: Option<Src<'_, f32>>,
    out: &[Cell<f32>],
    cols: core::ops::Range<usize>,
) {
    let channels = s.groups * s.out_per_group;
    let n = s.n();
    for (i, plane) in out.chunks_exact(n.max(1)).enumerate() {
        let b = bias_at(bias, i % channels);
        plane[cols.clone()].iter().for_each(|c| c.set(b));
    }
}

/// Convolution of `x` (N·C·H·W) with `weight` (O·I/g·KH·KW) plus `bias`:
/// the share `part` of `parts` (output columns; planes for depthwise).
#[allow(clippy::too_many_arguments)]
pub fn conv(
    s: &ConvShape,
    x: Src<'_, f32>,
    weight: Src<'_, f32>,
    bias: Option<Src<'_, f32>>,
    out: &[Cell<f32>],
    scratch: &[Cell<f32>],
    part: usize,
    parts: usize,
) {
    if s.depthwise() {
        let planes = s.batch * s.groups;
        let per = planes.div_ceil(parts.max(1));
        let (p0, p1) = ((part * per).min(planes), ((part + 1) * per).min(planes));
        let plane = s.window.output_plane();
        let mine = &out[p0 * plane..p1 * plane];
        // Bias of the planes in this share: plane i is channel i % groups.
        for (i, row) in mine.chunks_exact(plane.max(1)).enumerate() {
            let b = bias_at(bias, (p0 + i) % s.groups);
            row.iter().for_each(|c| c.set(b));
        }
        return crate::with_load!(x, |x| crate::with_load!(weight, |w| depthwise(
            s,
            x,
            w,
            out,
            p0..p1
        )));
    }
    let cols = gemm::share(s.n(), part, parts);
    fill_bias(s, bias, out, cols.clone());
    let w = &s.window;
    let (m, n, k) = (s.out_per_group, s.n(), s.k());
    let plane_in = w.input_plane();
    for image in 0..s.batch {
        for g in 0..s.groups {
            let in_base = (image * s.groups + g) * s.in_per_group * plane_in;
            let out_base = (image * s.groups + g) * m * n;
            let dst = Dst {
                data: out,
                offset: out_base,
                rs: n,
                cs: 1,
            };
            crate::with_load!(weight, |wt| {
                let a = Strided {
                    data: wt,
                    offset: g * m * k,
                    rs: k,
                    cs: 1,
                    rows: m,
                    cols: k,
                };
                crate::with_load!(x, |xs| {
                    if s.pointwise() {
                        let b = Strided {
                            data: xs,
                            offset: in_base,
                            rs: n,
                            cs: 1,
                            rows: k,
                            cols: n,
                        };
                        gemm::gemm_cols(m, n, k, &a, &b, &dst, scratch, cols.clone())
                    } else {
                        let b = Im2col {
                            data: xs,
                            base: in_base,
                            s: *s,
                        };
                        gemm::gemm_cols(m, n, k, &a, &b, &dst, scratch, cols.clone())
                    }
                })
            })
        }
    }
}

fn depthwise(
    s: &ConvShape,
    x: impl Load<f32>,
    weight: impl Load<f32>,
    out: &[Cell<f32>],
    planes: core::ops::Range<usize>,
) {
    let w = &s.window;
    let [_, ih, iw] = w.input;
    let [od, oh, ow] = w.output;
    let [kd, kh, kw] = w.kernel;
    for plane in planes {
        let ch = plane % s.groups;
        let xb = plane * w.input_plane();
        let ob = plane * w.output_plane();
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
                        for kx in 0..kw {
                            let wv = weight.load(((ch * kd + kz) * kh + ky) * kw + kx);
                            tap_row(w, row_out, row_in, kx, wv);
                        }
                    }
                }
            }
        }
    }
}

/// Adds `wv ×` the input row, read at tap `kx` of every output column,
/// to the output row.
#[inline(always)]
fn tap_row(
    w: &super::nn::Window,
    row_out: &[Cell<f32>],
    row_in: impl Load<f32>,
    kx: usize,
    wv: f32,
) {
    let (iw, ow) = (w.input[2], w.output[2]);
    let (s, pad) = (w.strides[2], w.pad[2]);
    let off = kx * w.dilations[2];
    let first = pad.saturating_sub(off).div_ceil(s);
    let end = if iw + pad > off {
        ((iw + pad - off - 1) / s + 1).min(ow)
    } else {
        0
    };
    if first >= end {
        return;
    }
    let count = end - first;
    let start = first * s + off - pad;
    let dst = &row_out[first..end];
    if s == 1 {
        zip_row(dst, dst, row_in.sub(start, count), |o, x| o + wv * x);
    } else {
        for (j, c) in dst.iter().enumerate() {
            c.set(c.get() + wv * row_in.load(start + j * s));
        }
    }
}

/// Transposed convolution (`ConvTranspose`), by scattering each input
/// value through the kernel: `weight` is O·(I/g)·K… (tract's planned
/// graph reorders ONNX's I·(O/g)·K… kernel), `out` starts as the bias. Taps that fall outside the output (padding) are dropped.
pub fn deconv(
    s: &ConvShape,
    x: Src<'_, f32>,
    weight: Src<'_, f32>,
    bias: Option<Src<'_, f32>>,
    out: &[Cell<f32>],
) {
    fill_bias(s, bias, out, 0..s.n());
    let w = &s.window;
    let [id, ih, iw] = w.input;
    let [od, oh, ow] = w.output;
    let [kd, kh, kw] = w.kernel;
    let taps = kd * kh * kw;
    for image in 0..s.batch {
        for g in 0..s.groups {
            for ic in 0..s.in_per_group {
                let cin = g * s.in_per_group + ic;
                let xb = (image * s.groups * s.in_per_group + cin) * w.input_plane();
                for oc in 0..s.out_per_group {
                    let cout = g * s.out_per_group + oc;
                    let ob = (image * s.groups * s.out_per_group + cout) * w.output_plane();
                    let wb = (cout * s.in_per_group + ic) * taps;
                    for (t, (kz, ky, kx)) in (0..kd)
                        .flat_map(|z| (0..kh).flat_map(move |y| (0..kw).map(move |x| (z, y, x))))
                        .enumerate()
                    {
                        let wv = weight.at(wb + t);
                        for iz in 0..id {
                            let Some(z) = place(iz, kz, 0, w, od) else {
                                continue;
                            };
                            for iy in 0..ih {
                                let Some(y) = place(iy, ky, 1, w, oh) else {
                                    continue;
                                };
                                for ix in 0..iw {
                                    let Some(xo) = place(ix, kx, 2, w, ow) else {
                                        continue;
                                    };
                                    let c = &out[ob + (z * oh + y) * ow + xo];
                                    c.set(c.get() + wv * x.at(xb + (iz * ih + iy) * iw + ix));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Output coordinate that input `i` reaches through tap `k` along `axis`.
fn place(i: usize, k: usize, axis: usize, w: &super::nn::Window, n: usize) -> Option<usize> {
    let at = (i * w.strides[axis] + k * w.dilations[axis]).checked_sub(w.pad[axis])?;
    (at < n).then_some(at)
}

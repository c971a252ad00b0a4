//! Convolution (through the packed product, reading the image directly)
//! and the depthwise case, which has no product to speak of.

use super::cells::{zip_row, Load, Src};
use super::gemm::{self, Dst, PackB, Strided, NR};
use super::nn::Window;
use std::cell::Cell;

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
        self.in_per_group * self.window.kernel[0] * self.window.kernel[1]
    }

    /// Output positions per image.
    pub fn n(&self) -> usize {
        self.window.output[0] * self.window.output[1]
    }

    /// True for one input and one output channel per group.
    pub fn depthwise(&self) -> bool {
        self.in_per_group == 1 && self.out_per_group == 1
    }

    /// True when the image itself is the right operand (1×1 kernel,
    /// stride 1, no padding).
    pub fn pointwise(&self) -> bool {
        let w = &self.window;
        w.kernel == [1, 1] && w.strides == [1, 1] && w.pad == [0, 0] && w.input == w.output
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
        let [ih, iw] = w.input.map(|d| d as isize);
        let [_, ow] = w.output;
        let [kh, kw] = w.kernel;
        let n = self.s.n();
        for (panel, c0) in (0..nc).step_by(NR).enumerate() {
            let out = &dst[panel * kc * NR..(panel + 1) * kc * NR];
            // Top-left input position of each column's window (columns
            // past the matrix get a position no tap can reach).
            let mut corner = [(isize::MIN / 2, isize::MIN / 2); NR];
            for (c, pos) in corner.iter_mut().enumerate() {
                let j = j0 + c0 + c;
                if j < n {
                    *pos = (
                        ((j / ow) * w.strides[0]) as isize - w.pad[0] as isize,
                        ((j % ow) * w.strides[1]) as isize - w.pad[1] as isize,
                    );
                }
            }
            for (p, o) in out.chunks_exact(NR).enumerate() {
                let tap = p0 + p;
                let (ch, ky, kx) = (tap / (kh * kw), tap / kw % kh, tap % kw);
                let plane = self.base + ch * (ih * iw) as usize;
                let (dy, dx) = (
                    (ky * w.dilations[0]) as isize,
                    (kx * w.dilations[1]) as isize,
                );
                for (cell, &(y0, x0)) in o.iter().zip(&corner) {
                    let (y, x) = (y0 + dy, x0 + dx);
                    let inside = (0..ih).contains(&y) && (0..iw).contains(&x);
                    cell.set(if inside {
                        self.data.load(plane + (y * iw + x) as usize)
                    } else {
                        0.0
                    });
                }
            }
        }
    }
}

/// Writes each output channel's bias (or zero) over its plane.
fn fill_bias(s: &ConvShape, bias: Option<Src<'_, f32>>, out: &[Cell<f32>]) {
    let channels = s.groups * s.out_per_group;
    let n = s.n();
    for (i, plane) in out.chunks_exact(n.max(1)).enumerate() {
        let b = match bias {
            Some(b) if b.len() == 1 => b.at(0),
            Some(b) => b.at(i % channels),
            None => 0.0,
        };
        plane.iter().for_each(|c| c.set(b));
    }
}

/// Convolution of `x` (N·C·H·W) with `weight` (O·I/g·KH·KW) plus `bias`.
pub fn conv(
    s: &ConvShape,
    x: Src<'_, f32>,
    weight: Src<'_, f32>,
    bias: Option<Src<'_, f32>>,
    out: &[Cell<f32>],
    scratch: &[Cell<f32>],
) {
    fill_bias(s, bias, out);
    if s.depthwise() {
        return crate::with_load!(x, |x| crate::with_load!(weight, |w| depthwise(
            s, x, w, out
        )));
    }
    let w = &s.window;
    let (m, n, k) = (s.out_per_group, s.n(), s.k());
    let plane_in = w.input[0] * w.input[1];
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
                        gemm::gemm(m, n, k, &a, &b, &dst, scratch)
                    } else {
                        let b = Im2col {
                            data: xs,
                            base: in_base,
                            s: *s,
                        };
                        gemm::gemm(m, n, k, &a, &b, &dst, scratch)
                    }
                })
            })
        }
    }
}

fn depthwise(s: &ConvShape, x: impl Load<f32>, weight: impl Load<f32>, out: &[Cell<f32>]) {
    let w = &s.window;
    let [ih, iw] = w.input;
    let [oh, ow] = w.output;
    let [kh, kw] = w.kernel;
    let planes = s.batch * s.groups;
    for plane in 0..planes {
        let ch = plane % s.groups;
        let xb = plane * ih * iw;
        let ob = plane * oh * ow;
        for oy in 0..oh {
            let (ky0, ky1) = w.taps(0, oy);
            let row_out = &out[ob + oy * ow..ob + (oy + 1) * ow];
            for ky in ky0..ky1 {
                let y = oy * w.strides[0] + ky * w.dilations[0] - w.pad[0];
                let row_in = x.sub(xb + y * iw, iw);
                for kx in 0..kw {
                    let wv = weight.load((ch * kh + ky) * kw + kx);
                    // Output columns whose tap kx lands inside the row.
                    let off = kx * w.dilations[1];
                    let first = w.pad[1].saturating_sub(off).div_ceil(w.strides[1]);
                    let end = if iw + w.pad[1] > off {
                        ((iw + w.pad[1] - off - 1) / w.strides[1] + 1).min(ow)
                    } else {
                        0
                    };
                    if first >= end {
                        continue;
                    }
                    let count = end - first;
                    let start = first * w.strides[1] + off - w.pad[1];
                    let dst = &row_out[first..end];
                    if w.strides[1] == 1 {
                        zip_row(dst, dst, row_in.sub(start, count), |o, x| o + wv * x);
                    } else {
                        let sx = w.strides[1];
                        for (j, c) in dst.iter().enumerate() {
                            c.set(c.get() + wv * row_in.load(start + j * sx));
                        }
                    }
                }
            }
        }
    }
}

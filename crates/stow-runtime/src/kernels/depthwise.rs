//! Depthwise convolution (one input and one output channel per group):
//! no product to pack for, so it runs directly on the image.
//!
//! Each output row adds, for every kernel row, its `kw` taps, one tap at
//! a time over the columns it reaches. Each tap reads a contiguous run of
//! the input row or, for stride 2, of its even or odd columns, split once
//! per input row into a buffer on the stack; so the loop over the columns
//! vectorises for strides 1 and 2 alike.

use super::cells::{zip_row, Load};
use super::linalg::ConvShape;
use super::nn::Window;
use core::cell::Cell;

/// Longest half row the stride-2 split holds; wider rows read the input
/// with a stride.
const HALF_ROW: usize = 512;

/// Adds the convolution of planes `planes` of `x` with `weight` to `out`
/// (which holds the bias).
pub(super) fn depthwise(
    s: &ConvShape,
    x: impl Load<f32>,
    weight: impl Load<f32>,
    out: &[Cell<f32>],
    planes: core::ops::Range<usize>,
) {
    planes_of(s, x, weight, out, planes)
}

#[inline(always)]
fn planes_of(
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
    let split = w.strides[2] == 2 && iw.div_ceil(2) <= HALF_ROW;
    let mut halves = [[0f32; HALF_ROW]; 2];
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

    /// The kernel equals the definition over widths around the lane count, strides 1–3,
    /// dilations, kernels wider than the input, asymmetric padding
    /// (ceil-mode outputs reaching into the padding) and rows wider than
    /// the stride-2 split holds.
    #[test]
    fn matches_the_definition() {
        let mut checked = 0;
        for (iw, kw, stride, dil, pad, extra) in [
            (7, 3, 1, 1, 1, 0),
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
            let ow = (iw + 2 * pad + extra - dil * (kw - 1) - 1) / stride + 1;
            let (ih, kh, oh) = (3, 3, 3);
            let window = Window {
                planes: 3,
                input: [1, ih, iw],
                output: [1, oh, ow],
                kernel: [1, kh, kw],
                strides: [1, 1, stride],
                dilations: [1, 1, dil],
                pad: [0, 1, pad],
                pad_after: [0, 1, pad + extra],
            };
            let s = ConvShape {
                batch: 1,
                groups: 3,
                in_per_group: 1,
                out_per_group: 1,
                window,
            };
            let x: Vec<f32> = (0..3 * ih * iw).map(|i| value(i, 1)).collect();
            let weight: Vec<f32> = (0..3 * kh * kw).map(|i| value(i, 2)).collect();
            let want = naive(&s, &x, &weight);
            {
                let out: Vec<Cell<f32>> = (0..want.len()).map(|_| Cell::new(0.0)).collect();
                depthwise(&s, &x[..], &weight[..], &out, 0..3);
                for (i, (o, w)) in out.iter().zip(&want).enumerate() {
                    assert!(
                        (o.get() - w).abs() <= 1e-5 * (1.0 + w.abs()),
                        "iw {iw} kw {kw} stride {stride} dil {dil} pad {pad}: output {i} is {} not {w}",
                        o.get()
                    );
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 14);
    }
}

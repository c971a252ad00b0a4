//! Reading an image at computed positions: GridSample (ONNX's, with
//! PyTorch's `grid_sample` conventions) and local response normalisation
//! (each value scaled by the energy of its neighbouring channels).

use super::cells::{Load, Src};
use super::float::Float;
use super::nn::AroundAxis;
use super::{Kernel, Operand};
use alloc::{format, string::String, vec};
use core::cell::Cell;
use stow_bundle::DType;

/// How GridSample interpolates between input positions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Interpolation {
    /// The nearest position (ties to even, as PyTorch rounds).
    Nearest,
    /// Linear along each axis.
    Linear,
    /// Keys' cubic convolution (a = −0.75) along each axis.
    Cubic,
}

/// What GridSample reads outside the input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Padding {
    /// Zeros.
    Zeros,
    /// The nearest edge value.
    Border,
    /// The input mirrored at its edges.
    Reflection,
}

/// A prepared GridSample over up to three spatial axes.
#[derive(Clone, Debug, PartialEq)]
pub struct GridSample {
    /// Interpolation.
    pub interpolation: Interpolation,
    /// Padding.
    pub padding: Padding,
    /// Whether −1 and 1 are the centres of the corner positions (else
    /// their outer edges).
    pub align_corners: bool,
    /// Images.
    pub batch: usize,
    /// Channels.
    pub channels: usize,
    /// Spatial axes (1 to 3).
    pub rank: usize,
    /// Input spatial dimensions, outermost first.
    pub dims: [usize; 3],
    /// Grid points (output positions) per image.
    pub points: usize,
}

/// Marks a tap that reads zero padding.
const OUTSIDE: usize = usize::MAX;

/// Up to four input positions along one axis (as offsets within a plane)
/// and their weights.
#[derive(Clone, Copy)]
struct Taps {
    at: [usize; 4],
    w: [f32; 4],
    n: usize,
}

/// Mirrors `x` into `[lo, hi]` as ONNX's reference does (in f64, which
/// it computes these in).
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let range = hi - lo;
    if range <= 0.0 {
        // A dimension of 1 with aligned corners: PyTorch reads position 0
        // where ONNX's reference divides by zero.
        return lo;
    }
    let (dx, from_low) = if x < lo {
        (lo - x, true)
    } else if x > hi {
        (x - hi, false)
    } else {
        return x;
    };
    let n = Float::floor(dx / range);
    let r = dx - n * range;
    if (n % 2.0 == 0.0) == from_low {
        lo + r
    } else {
        hi - r
    }
}

/// Keys' cubic convolution weights of the positions at −1, 0, 1, 2 from
/// the floor, for fraction `t`, in the reference's f32 form.
fn cubic(t: f32) -> [f32; 4] {
    const A: f32 = -0.75;
    let far = |s: f32| ((A * s - 5.0 * A) * s + 8.0 * A) * s - 4.0 * A;
    let near = |s: f32| ((A + 2.0) * s - (A + 3.0)) * s * s + 1.0;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

impl GridSample {
    fn bounds(&self, d: usize) -> (f64, f64) {
        if self.align_corners {
            (0.0, d as f64 - 1.0)
        } else {
            (-0.5, d as f64 - 0.5)
        }
    }

    /// The taps along an axis of `d` positions (stride `stride` in a
    /// plane) for normalised coordinate `g`, following ONNX's reference
    /// step by step (f32 where it computes in f32) so that rounding and
    /// the bounds tests decide alike.
    fn taps(&self, g: f32, d: usize, stride: usize) -> Taps {
        let size = d as f32;
        let mut x = if self.align_corners {
            (g + 1.0) / 2.0 * (size - 1.0)
        } else {
            ((g + 1.0) * size - 1.0) / 2.0
        };
        if self.interpolation == Interpolation::Nearest {
            x = Float::round_ties_even(x);
        }
        let (lo, hi) = self.bounds(d);
        // Only coordinates beyond the bounds move: a cubic read between
        // −0.5 and 0 keeps its fraction (and reads the border twice).
        if f64::from(x) < lo || f64::from(x) > hi {
            match self.padding {
                Padding::Zeros => {}
                Padding::Border => x = x.clamp(0.0, size - 1.0),
                Padding::Reflection => x = reflect(f64::from(x), lo, hi) as f32,
            }
        }
        let last = d as i64 - 1;
        let pixel = |i: i64| -> usize {
            let i = match self.padding {
                Padding::Zeros if !(0..=last).contains(&i) => return OUTSIDE,
                Padding::Zeros => i,
                Padding::Border => i.clamp(0, last),
                // Truncated like the reference's int(); the clamp only
                // guards non-finite coordinates.
                Padding::Reflection => (reflect(i as f64, lo, hi) as i64).clamp(0, last),
            };
            i as usize * stride
        };
        let floor = Float::floor(x);
        let (i, t) = (floor as i64, x - floor);
        match self.interpolation {
            Interpolation::Nearest => Taps {
                at: [pixel(x as i64), 0, 0, 0],
                w: [1.0, 0.0, 0.0, 0.0],
                n: 1,
            },
            Interpolation::Linear => Taps {
                at: [pixel(i), pixel(i.saturating_add(1)), 0, 0],
                w: [1.0 - t, t, 0.0, 0.0],
                n: 2,
            },
            Interpolation::Cubic => Taps {
                at: [-1, 0, 1, 2].map(|k| pixel(i.saturating_add(k))),
                w: cubic(t),
                n: 4,
            },
        }
    }

    /// Samples every channel of every image of `x` at the grid's points.
    pub fn run(&self, x: impl Load<f32>, grid: Src<'_, f32>, out: &[Cell<f32>]) {
        if out.is_empty() {
            return;
        }
        let k = self.rank.min(3);
        let mut strides = [1usize; 3];
        for a in (0..k.saturating_sub(1)).rev() {
            strides[a] = strides[a + 1] * self.dims[a + 1];
        }
        let plane = strides[0] * self.dims[0];
        let empty = Taps {
            at: [0; 4],
            w: [0.0; 4],
            n: 0,
        };
        for n in 0..self.batch {
            for p in 0..self.points {
                let g = (n * self.points + p) * k;
                let mut taps = [empty; 3];
                for a in 0..k {
                    // The grid lists the innermost axis' coordinate first.
                    taps[a] = self.taps(grid.at(g + k - 1 - a), self.dims[a], strides[a]);
                }
                for c in 0..self.channels {
                    let image = n * self.channels + c;
                    out[image * self.points + p].set(gather(x, image * plane, &taps[..k]));
                }
            }
        }
    }
}

/// The weighted sum over the taps' positions, inner axes first as the
/// reference nests its one-axis interpolations.
fn gather(x: impl Load<f32>, base: usize, taps: &[Taps]) -> f32 {
    let Some((t, rest)) = taps.split_first() else {
        return x.load(base);
    };
    let mut sum = 0.0;
    for j in 0..t.n {
        let v = if t.at[j] == OUTSIDE {
            0.0
        } else {
            gather(x, base + t.at[j], rest)
        };
        sum += t.w[j] * v;
    }
    sum
}

/// Prepares GridSample from tract's attribute spellings.
pub(super) fn grid_sample(
    mode: &str,
    padding: &str,
    align_corners: bool,
    ins: &[Operand<'_>],
    outs: &[Operand<'_>],
) -> Result<(Kernel, usize), String> {
    if ins.len() != 2 || outs.len() != 1 {
        return Err("GridSample takes an input and a grid and makes 1 output".into());
    }
    if let Some(o) = ins.iter().chain(outs).find(|o| o.dtype != DType::F32) {
        return Err(format!(
            "GridSample of {} (tensor {}): this kernel handles f32",
            o.dtype.name(),
            o.id
        ));
    }
    let interpolation = match mode {
        "bilinear" | "linear" => Interpolation::Linear,
        "nearest" => Interpolation::Nearest,
        "bicubic" | "cubic" => Interpolation::Cubic,
        other => return Err(format!("GridSample mode `{other}`")),
    };
    let padding = match padding {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        other => return Err(format!("GridSample padding mode `{other}`")),
    };
    let (x, grid, y) = (&ins[0].shape, &ins[1].shape, &outs[0].shape);
    let rank = x.len().saturating_sub(2);
    if !(1..=3).contains(&rank) {
        return Err(format!(
            "GridSample over {rank} spatial axes (this kernel handles 1 to 3)"
        ));
    }
    let mut want_y = vec![x[0], x[1]];
    want_y.extend_from_slice(grid.get(1..=rank).unwrap_or(&[]));
    if grid.len() != rank + 2 || grid[0] != x[0] || grid[rank + 1] != rank || *y != want_y {
        return Err(format!(
            "GridSample shapes do not match: input {x:?}, grid {grid:?}, output {y:?}"
        ));
    }
    let mut dims = [1; 3];
    dims[..rank].copy_from_slice(&x[2..]);
    // The f32 coordinate arithmetic is exact for any arena-sized axis
    // below this, and a read needs at least one position.
    if outs[0].len > 0 && dims.iter().any(|&d| d == 0 || d >= 1 << 31) {
        return Err(format!(
            "GridSample of an input with spatial dimensions {:?}",
            &x[2..]
        ));
    }
    let g = GridSample {
        interpolation,
        padding,
        align_corners,
        batch: x[0],
        channels: x[1],
        rank,
        dims,
        points: grid[1..=rank].iter().product(),
    };
    Ok((Kernel::GridSample(g), 0))
}

/// A prepared local response normalisation across channels (axis 1).
#[derive(Clone, Debug, PartialEq)]
pub struct Lrn {
    /// The tensor around the channel axis.
    pub at: AroundAxis,
    /// Channels in the window.
    pub size: usize,
    /// Scale of the mean square.
    pub alpha: f32,
    /// Exponent.
    pub beta: f32,
    /// Offset.
    pub bias: f32,
}

impl Lrn {
    /// `x / (bias + alpha/size · Σ x²)^beta`, the sum over the window of
    /// channels around each one that lies inside the tensor.
    pub fn run(&self, x: impl Load<f32>, out: &[Cell<f32>]) {
        let AroundAxis { outer, n, inner } = self.at;
        // ONNX's window: floor((size−1)/2) channels before, ceil after.
        let (before, after) = (self.size.saturating_sub(1) / 2, self.size / 2);
        let scale = self.alpha / self.size as f32;
        for o in 0..outer {
            for i in 0..inner {
                let base = o * n * inner + i;
                for c in 0..n {
                    let hi = c.saturating_add(after).min(n - 1);
                    let sq: f32 = (c.saturating_sub(before)..=hi)
                        .map(|j| Float::powi(x.load(base + j * inner), 2))
                        .sum();
                    let v = x.load(base + c * inner);
                    out[base + c * inner].set(v / Float::powf(self.bias + scale * sq, self.beta));
                }
            }
        }
    }
}

/// Prepares LRN.
pub(super) fn lrn(
    size: i64,
    alpha: f32,
    beta: f32,
    bias: f32,
    ins: &[Operand<'_>],
    outs: &[Operand<'_>],
) -> Result<(Kernel, usize), String> {
    if ins.len() != 1 || outs.len() != 1 {
        return Err("LRN takes 1 input and makes 1 output".into());
    }
    let (x, y) = (&ins[0], &outs[0]);
    if x.dtype != DType::F32 || y.dtype != DType::F32 {
        return Err(format!(
            "LRN of {} into {}: this kernel handles f32",
            x.dtype.name(),
            y.dtype.name()
        ));
    }
    if x.shape != y.shape {
        return Err(format!(
            "LRN changes the shape {:?} to {:?}",
            x.shape, y.shape
        ));
    }
    let size = usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .ok_or_else(|| format!("LRN size {size}"))?;
    let at = AroundAxis::new(&x.shape, 1)
        .ok_or_else(|| format!("LRN of shape {:?}: no channel axis", x.shape))?;
    Ok((
        Kernel::Lrn(Lrn {
            at,
            size,
            alpha,
            beta,
            bias,
        }),
        0,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// A deterministic generator of values in [0, 1).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// ONNX GridSample at one output position, in f64 from the spec's
    /// definitions: interpolation kernels as functions of the distance,
    /// reflection as a fold of period twice the range.
    fn reference(g: &GridSample, x: &[f32], image: usize, coords: &[f32]) -> f64 {
        let k = g.rank;
        let dims = &g.dims[..k];
        let plane: usize = dims.iter().product();
        let bounds = |d: usize| {
            if g.align_corners {
                (0.0, d as f64 - 1.0)
            } else {
                (-0.5, d as f64 - 0.5)
            }
        };
        let fold = |v: f64, lo: f64, hi: f64| {
            let range = hi - lo;
            if range == 0.0 {
                return lo;
            }
            let t = (v - lo).rem_euclid(2.0 * range);
            if t > range {
                hi - (t - range)
            } else {
                lo + t
            }
        };
        // Where each axis samples (the spec denormalises in f32).
        let mut pos = vec![0f64; k];
        for a in 0..k {
            let (n, d) = (coords[k - 1 - a], dims[a] as f32);
            let mut v = if g.align_corners {
                (n + 1.0) / 2.0 * (d - 1.0)
            } else {
                ((n + 1.0) * d - 1.0) / 2.0
            };
            if g.interpolation == Interpolation::Nearest {
                v = v.round_ties_even();
            }
            let mut v = f64::from(v);
            let (lo, hi) = bounds(dims[a]);
            if v < lo || v > hi {
                match g.padding {
                    Padding::Zeros => {}
                    Padding::Border => v = v.clamp(0.0, dims[a] as f64 - 1.0),
                    Padding::Reflection => v = fold(v, lo, hi),
                }
            }
            pos[a] = v;
        }
        // The value at integer position `i` along each axis, padded.
        let value = |i: &[i64]| -> f64 {
            let mut at = 0;
            for a in 0..k {
                let d = dims[a] as i64;
                let (lo, hi) = bounds(dims[a]);
                let j = match g.padding {
                    Padding::Zeros if i[a] < 0 || i[a] >= d => return 0.0,
                    Padding::Zeros => i[a],
                    Padding::Border => i[a].clamp(0, d - 1),
                    Padding::Reflection => fold(i[a] as f64, lo, hi).trunc() as i64,
                };
                at = at * dims[a] + j as usize;
            }
            f64::from(x[image * plane + at])
        };
        let weight = |s: f64| -> f64 {
            let s = s.abs();
            let a = -0.75;
            match g.interpolation {
                Interpolation::Nearest => (s == 0.0) as u8 as f64,
                Interpolation::Linear => (1.0 - s).max(0.0),
                Interpolation::Cubic if s <= 1.0 => ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0,
                Interpolation::Cubic if s < 2.0 => ((a * s - 5.0 * a) * s + 8.0 * a) * s - 4.0 * a,
                Interpolation::Cubic => 0.0,
            }
        };
        // Sum over the 4^k integer positions from floor − 1 to floor + 2.
        let mut sum = 0.0;
        let mut idx = vec![0i64; k];
        for corner in 0..4usize.pow(k as u32) {
            let mut w = 1.0;
            for a in 0..k {
                let off = ((corner >> (2 * a)) & 3) as i64 - 1;
                idx[a] = pos[a].floor() as i64 + off;
                w *= weight(pos[a] - idx[a] as f64);
            }
            if w != 0.0 {
                sum += w * value(&idx);
            }
        }
        sum
    }

    #[test]
    fn grid_sample_matches_the_f64_reference() {
        let mut rng = Rng(7);
        let modes = [
            Interpolation::Nearest,
            Interpolation::Linear,
            Interpolation::Cubic,
        ];
        let paddings = [Padding::Zeros, Padding::Border, Padding::Reflection];
        let shapes: [&[usize]; 5] = [&[5], &[4, 3], &[1, 5], &[3, 2, 4], &[2, 1, 3]];
        let mut checked = 0;
        for &interpolation in &modes {
            for &padding in &paddings {
                for align_corners in [false, true] {
                    for dims_in in shapes {
                        let rank = dims_in.len();
                        let (batch, channels, points) = (2, 3, 11);
                        let mut dims = [1; 3];
                        dims[..rank].copy_from_slice(dims_in);
                        let g = GridSample {
                            interpolation,
                            padding,
                            align_corners,
                            batch,
                            channels,
                            rank,
                            dims,
                            points,
                        };
                        let plane: usize = dims_in.iter().product();
                        let x: Vec<f32> = (0..batch * channels * plane)
                            .map(|_| (rng.next() * 4.0 - 2.0) as f32)
                            .collect();
                        // Past both ends to reach the padding, with the
                        // corners exactly.
                        let grid: Vec<f32> = (0..batch * points * rank)
                            .map(|i| match i % 7 {
                                0 => -1.0,
                                1 => 1.0,
                                _ => (rng.next() * 3.6 - 1.8) as f32,
                            })
                            .collect();
                        let mut out = vec![f32::NAN; batch * channels * points];
                        let cells = Cell::from_mut(out.as_mut_slice()).as_slice_of_cells();
                        g.run(x.as_slice(), Src::Weight(grid.as_slice()), cells);
                        for n in 0..batch {
                            for c in 0..channels {
                                for p in 0..points {
                                    let coords = &grid[(n * points + p) * rank..][..rank];
                                    let want = reference(&g, &x, n * channels + c, coords);
                                    let got = out[(n * channels + c) * points + p];
                                    assert!(
                                        (f64::from(got) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                                        "{g:?} at {coords:?}: got {got}, want {want}"
                                    );
                                    checked += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 3 * 3 * 2 * 5 * 2 * 3 * 11);
    }

    #[test]
    fn lrn_matches_the_f64_reference() {
        let mut rng = Rng(3);
        for (shape, size) in [
            (vec![2, 5, 3, 2], 3),
            (vec![1, 6, 4], 4),
            (vec![3, 4], 1),
            (vec![1, 3, 2, 2, 2], 8),
        ] {
            let (alpha, beta, bias) = (0.37f32, 0.75f32, 1.5f32);
            let at = AroundAxis::new(&shape, 1).unwrap();
            let l = Lrn {
                at,
                size,
                alpha,
                beta,
                bias,
            };
            let len: usize = shape.iter().product();
            let x: Vec<f32> = (0..len).map(|_| (rng.next() * 6.0 - 3.0) as f32).collect();
            let mut out = vec![f32::NAN; len];
            l.run(
                x.as_slice(),
                Cell::from_mut(out.as_mut_slice()).as_slice_of_cells(),
            );
            let c_count = shape[1] as i64;
            for (e, &got) in out.iter().enumerate() {
                let c = (e / at.inner % at.n) as i64;
                let half = (size as f64 - 1.0) / 2.0;
                let (lo, hi) = (c - half.floor() as i64, c + half.ceil() as i64);
                let sq: f64 = (lo..=hi)
                    .filter(|j| (0..c_count).contains(j))
                    .map(|j| {
                        let v = f64::from(x[(e as i64 + (j - c) * at.inner as i64) as usize]);
                        v * v
                    })
                    .sum();
                let want = f64::from(x[e])
                    / (f64::from(bias) + f64::from(alpha) / size as f64 * sq).powf(f64::from(beta));
                assert!(
                    (f64::from(got) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "{shape:?} size {size} at {e}: got {got}, want {want}"
                );
            }
        }
    }
}

//! Normalisations, reductions and pooling over f32 tensors.

use super::cells::{Load, Src};
use super::layout::Walk;
use std::cell::Cell;

/// A tensor seen as `outer × n × inner` around one axis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AroundAxis {
    /// Product of the dimensions before the axis.
    pub outer: usize,
    /// The axis' dimension.
    pub n: usize,
    /// Product of the dimensions after it.
    pub inner: usize,
}

impl AroundAxis {
    /// Splits `shape` around `axis` (`None` when out of range).
    pub fn new(shape: &[usize], axis: usize) -> Option<AroundAxis> {
        (axis < shape.len()).then(|| AroundAxis {
            outer: shape[..axis].iter().product(),
            n: shape[axis],
            inner: shape[axis + 1..].iter().product(),
        })
    }

    fn lanes(self, mut f: impl FnMut(usize)) {
        for o in 0..self.outer {
            for i in 0..self.inner {
                f(o * self.n * self.inner + i);
            }
        }
    }
}

/// Softmax (or log-softmax) along the axis.
pub fn softmax(at: AroundAxis, log: bool, x: impl Load<f32>, out: &[Cell<f32>]) {
    let s = at.inner;
    at.lanes(|base| {
        let max = (0..at.n)
            .map(|j| x.load(base + j * s))
            .fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0f32;
        for j in 0..at.n {
            let e = (x.load(base + j * s) - max).exp();
            sum += e;
            out[base + j * s].set(if log { x.load(base + j * s) - max } else { e });
        }
        if log {
            let ln = sum.ln();
            for j in 0..at.n {
                let c = &out[base + j * s];
                c.set(c.get() - ln);
            }
        } else {
            let r = 1.0 / sum;
            for j in 0..at.n {
                let c = &out[base + j * s];
                c.set(c.get() * r);
            }
        }
    });
}

/// `x / √(mean(x²) + eps)` along the axis.
pub fn rms_norm(at: AroundAxis, eps: f32, x: impl Load<f32>, out: &[Cell<f32>]) {
    let s = at.inner;
    at.lanes(|base| {
        let sq: f32 = (0..at.n).map(|j| x.load(base + j * s).powi(2)).sum();
        let r = 1.0 / (sq / at.n as f32 + eps).sqrt();
        for j in 0..at.n {
            out[base + j * s].set(x.load(base + j * s) * r);
        }
    });
}

/// How a reduction combines values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reducer {
    /// Σx
    Sum,
    /// Πx
    Prod,
    /// max
    Max,
    /// min
    Min,
    /// Σx² / n
    MeanOfSquares,
}

impl Reducer {
    /// The reducer tract names `name` (`Sum`, `Prod`, ...).
    pub fn from_name(name: &str) -> Option<Reducer> {
        Some(match name {
            "Sum" => Reducer::Sum,
            "Prod" => Reducer::Prod,
            "Max" => Reducer::Max,
            "Min" => Reducer::Min,
            "MeanOfSquares" => Reducer::MeanOfSquares,
            _ => return None,
        })
    }
}

/// Reduces `x` into `out` (reduced axes kept with size 1). `walk` runs
/// over the input's dimensions with operands (output, input); the
/// output's stride is 0 along reduced axes. `count` is the number of
/// values reduced into each output.
pub fn reduce(r: Reducer, walk: &Walk<2>, count: usize, x: impl Load<f32>, out: &[Cell<f32>]) {
    let init = match r {
        Reducer::Sum | Reducer::MeanOfSquares => 0.0,
        Reducer::Prod => 1.0,
        Reducer::Max => f32::NEG_INFINITY,
        Reducer::Min => f32::INFINITY,
    };
    out.iter().for_each(|c| c.set(init));
    let (len, [so, si]) = walk.inner();
    walk.rows([0, 0], |[o, i]| {
        if so == 0 {
            let c = &out[o];
            let mut acc = c.get();
            for j in 0..len {
                let v = x.load(i + j * si);
                acc = combine(r, acc, v);
            }
            c.set(acc);
        } else {
            for j in 0..len {
                let c = &out[o + j * so];
                c.set(combine(r, c.get(), x.load(i + j * si)));
            }
        }
    });
    if r == Reducer::MeanOfSquares {
        let n = count.max(1) as f32;
        out.iter().for_each(|c| c.set(c.get() / n));
    }
}

#[inline(always)]
fn combine(r: Reducer, acc: f32, v: f32) -> f32 {
    match r {
        Reducer::Sum => acc + v,
        Reducer::Prod => acc * v,
        Reducer::Max => acc.max(v),
        Reducer::Min => acc.min(v),
        Reducer::MeanOfSquares => acc + v * v,
    }
}

/// Geometry of a window op over `planes` planes of up to three spatial
/// dimensions (depth, height, width; 1-D and 2-D ops have leading
/// dimensions of size 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// Images × channels.
    pub planes: usize,
    /// Input depth, height and width.
    pub input: [usize; 3],
    /// Output depth, height and width.
    pub output: [usize; 3],
    /// Kernel depth, height and width.
    pub kernel: [usize; 3],
    /// Strides.
    pub strides: [usize; 3],
    /// Dilations.
    pub dilations: [usize; 3],
    /// Padding before (front, top, left).
    pub pad: [usize; 3],
    /// Padding after (back, bottom, right).
    pub pad_after: [usize; 3],
}

impl Window {
    /// Taps of the window at output position `o` along `axis` that land
    /// inside the input, as (first tap, last tap + 1).
    #[inline]
    pub fn taps(&self, axis: usize, o: usize) -> (usize, usize) {
        let start = (o * self.strides[axis]) as isize - self.pad[axis] as isize;
        let d = self.dilations[axis] as isize;
        let n = self.input[axis] as isize;
        let mut lo = 0;
        while lo < self.kernel[axis] && start + lo as isize * d < 0 {
            lo += 1;
        }
        let mut hi = self.kernel[axis];
        while hi > lo && start + (hi as isize - 1) * d >= n {
            hi -= 1;
        }
        (lo, hi)
    }

    /// Taps of the window at output position `o` along `axis` that land
    /// inside the input or its padding: what an average that counts
    /// padding divides by. A window that ceil mode lets run past the
    /// padding does not count what lies beyond it.
    pub fn padded_taps(&self, axis: usize, o: usize) -> usize {
        let start = (o * self.strides[axis]) as isize - self.pad[axis] as isize;
        let d = self.dilations[axis] as isize;
        let (lo, hi) = (
            -(self.pad[axis] as isize),
            (self.input[axis] + self.pad_after[axis]) as isize,
        );
        (0..self.kernel[axis])
            .filter(|&k| (lo..hi).contains(&(start + k as isize * d)))
            .count()
    }

    /// Input coordinate of tap `tap` of output position `o` along `axis`
    /// (only for taps inside the input).
    pub fn input_at(&self, axis: usize, o: usize, tap: usize) -> usize {
        o * self.strides[axis] + tap * self.dilations[axis] - self.pad[axis]
    }

    /// Elements of one input plane.
    pub fn input_plane(&self) -> usize {
        self.input.iter().product()
    }

    /// Elements of one output plane.
    pub fn output_plane(&self) -> usize {
        self.output.iter().product()
    }
}

/// Pooling flavours.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pool {
    /// Largest value in the window.
    Max,
    /// Sum, optionally divided by the window size (with or without the
    /// padding).
    Sum {
        /// Divide by the count.
        normalize: bool,
        /// Count padding positions too.
        count_include_pad: bool,
    },
}

/// Pools every plane of `x` into `out`.
pub fn pool(kind: Pool, w: &Window, x: impl Load<f32>, out: &[Cell<f32>]) {
    let [_, ih, iw] = w.input;
    let [od, oh, ow] = w.output;
    for plane in 0..w.planes {
        let xb = plane * w.input_plane();
        let ob = plane * w.output_plane();
        for oz in 0..od {
            let (kz0, kz1) = w.taps(0, oz);
            for oy in 0..oh {
                let (ky0, ky1) = w.taps(1, oy);
                for ox in 0..ow {
                    let (kx0, kx1) = w.taps(2, ox);
                    let mut acc = match kind {
                        Pool::Max => f32::NEG_INFINITY,
                        Pool::Sum { .. } => 0.0,
                    };
                    for kz in kz0..kz1 {
                        let depth = xb + w.input_at(0, oz, kz) * ih * iw;
                        for ky in ky0..ky1 {
                            let row = depth + w.input_at(1, oy, ky) * iw;
                            for kx in kx0..kx1 {
                                let v = x.load(row + w.input_at(2, ox, kx));
                                acc = match kind {
                                    Pool::Max => acc.max(v),
                                    Pool::Sum { .. } => acc + v,
                                };
                            }
                        }
                    }
                    if let Pool::Sum {
                        normalize: true,
                        count_include_pad,
                    } = kind
                    {
                        let count = if count_include_pad {
                            w.padded_taps(0, oz) * w.padded_taps(1, oy) * w.padded_taps(2, ox)
                        } else {
                            (kz1 - kz0) * (ky1 - ky0) * (kx1 - kx0)
                        };
                        acc /= count.max(1) as f32;
                    }
                    out[ob + (oz * oh + oy) * ow + ox].set(acc);
                }
            }
        }
    }
}

/// One resized axis: for each output index, the two input indices it
/// reads and their weights (tract's resampling plan for linear and
/// nearest interpolation).
#[derive(Clone, Debug, PartialEq)]
pub struct ResizeAxis {
    /// The axis.
    pub axis: usize,
    /// Per output index: input indices and weights.
    pub taps: Vec<([usize; 2], [f32; 2])>,
}

/// Resamples `x` (shape `input`) into `out` (shape `output`) through the
/// axes' plans: each output is the weighted sum over the 2^r corners of
/// the r resized axes (r ≤ 3, checked at setup).
pub fn resize(
    input: &[usize],
    output: &[usize],
    axes: &[ResizeAxis],
    x: Src<'_, f32>,
    out: &[Cell<f32>],
) {
    let rank = output.len();
    if rank > super::layout::MAX_RANK {
        return;
    }
    let mut in_strides = [0usize; super::layout::MAX_RANK];
    let mut acc = 1;
    for a in (0..rank).rev() {
        in_strides[a] = acc;
        acc *= input[a];
    }
    let mut index = [0usize; super::layout::MAX_RANK];
    let corners = 1usize << axes.len();
    for cell in out {
        let base: usize = (0..rank)
            .filter(|a| axes.iter().all(|r| r.axis != *a))
            .map(|a| index[a] * in_strides[a])
            .sum();
        let mut sum = 0.0f32;
        for corner in 0..corners {
            let mut at = base;
            let mut w = 1.0f32;
            for (bit, r) in axes.iter().enumerate() {
                let side = (corner >> bit) & 1;
                let (ix, wt) = &r.taps[index[r.axis]];
                at += ix[side] * in_strides[r.axis];
                w *= wt[side];
            }
            if w != 0.0 {
                sum += w * x.at(at);
            }
        }
        cell.set(sum);
        for a in (0..rank).rev() {
            index[a] += 1;
            if index[a] < output[a] {
                break;
            }
            index[a] = 0;
        }
    }
}

/// Position along `at`'s axis of the largest (`max`) or smallest value of
/// each line, the first among equals or the `last`.
pub fn arg_extreme(max: bool, last: bool, at: AroundAxis, x: impl Load<f32>, out: &[Cell<i64>]) {
    for o in 0..at.outer {
        for i in 0..at.inner {
            let base = o * at.n * at.inner + i;
            let mut best = 0usize;
            let mut value = x.load(base);
            for j in 1..at.n {
                let v = x.load(base + j * at.inner);
                let better = if max {
                    v > value || (last && v == value)
                } else {
                    v < value || (last && v == value)
                };
                if better {
                    best = j;
                    value = v;
                }
            }
            out[o * at.inner + i].set(best as i64);
        }
    }
}

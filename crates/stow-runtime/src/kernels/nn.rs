//! Normalisations, reductions, resizing and arg-max/min over f32 tensors
//! (softmax, RMS normalisation and reductions also over f64); pooling is
//! in [`super::pool`].

use super::cells::{Load, Src};
use super::float::Float;
use super::layout::Walk;
use alloc::vec::Vec;
use core::cell::Cell;

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

    /// Calls `f` with the first offset of each lane in `range` (lanes
    /// numbered outer position first, then inner: a thread's share).
    fn lanes_in(self, range: core::ops::Range<usize>, mut f: impl FnMut(usize)) {
        if self.inner == 0 {
            return;
        }
        for lane in range {
            let (o, i) = (lane / self.inner, lane % self.inner);
            f(o * self.n * self.inner + i);
        }
    }

    /// Lanes along the axis: `outer · inner`.
    pub fn lane_count(self) -> usize {
        self.outer * self.inner
    }
}

/// Softmax (or log-softmax) along the axis, in f32 or f64, of the lanes
/// `lanes` (all: `0..at.lane_count()`).
pub fn softmax<F: Float>(
    at: AroundAxis,
    log: bool,
    x: impl Load<F>,
    out: &[Cell<F>],
    lanes: core::ops::Range<usize>,
) {
    let s = at.inner;
    at.lanes_in(lanes, |base| {
        let max = (0..at.n)
            .map(|j| x.load(base + j * s))
            .fold(F::NEG_INFINITY, F::max);
        let mut sum = F::ZERO;
        for j in 0..at.n {
            let e = (x.load(base + j * s) - max).exp();
            sum = sum + e;
            out[base + j * s].set(if log { x.load(base + j * s) - max } else { e });
        }
        if log {
            let ln = sum.ln();
            for j in 0..at.n {
                let c = &out[base + j * s];
                c.set(c.get() - ln);
            }
        } else {
            let r = F::ONE / sum;
            for j in 0..at.n {
                let c = &out[base + j * s];
                c.set(c.get() * r);
            }
        }
    });
}

/// [`softmax`] of f32, its rows along a contiguous last axis (not
/// log-softmax) in vectors: the maximum and the sum in sixteen partial
/// ones, `e^(x − max)` by [`super::elementwise::exp_neg_abs`] (the
/// argument is never positive; relative error about 1e-7 against libm's
/// `expf`, one call per element, 4 ns an element in bert_base's
/// attention). Compiled for AVX2 and FMA where the CPU has them.
pub fn softmax_f32(
    at: AroundAxis,
    log: bool,
    x: impl Load<f32>,
    out: &[Cell<f32>],
    lanes: core::ops::Range<usize>,
) {
    if log || at.inner != 1 {
        return softmax(at, log, x, out, lanes);
    }
    #[cfg(target_arch = "x86_64")]
    if super::gemm::fma_available() {
        // SAFETY: the function only needs the CPU to have AVX2 and FMA,
        // which `fma_available` checked at run time.
        #[allow(unsafe_code)]
        return unsafe { softmax_rows_avx2(at.n, x, out, lanes) };
    }
    softmax_rows(at.n, x, out, lanes)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn softmax_rows_avx2(
    n: usize,
    x: impl Load<f32>,
    out: &[Cell<f32>],
    rows: core::ops::Range<usize>,
) {
    softmax_rows(n, x, out, rows)
}

/// Softmax of rows `rows` of `n` contiguous values. Each chunk is read
/// whole before it is written, so `out` may be `x` (a step in place).
#[inline(always)]
fn softmax_rows(n: usize, x: impl Load<f32>, out: &[Cell<f32>], rows: core::ops::Range<usize>) {
    const W: usize = 16;
    let whole = n - n % W;
    for row in rows {
        let (x, out) = (x.sub(row * n, n), &out[row * n..(row + 1) * n]);
        let mut most = [f32::NEG_INFINITY; W];
        for c in (0..whole).step_by(W) {
            let x = x.sub(c, W);
            for (j, m) in most.iter_mut().enumerate() {
                *m = m.max(x.load(j));
            }
        }
        let mut max = most.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        for j in whole..n {
            max = max.max(x.load(j));
        }
        let mut sums = [0f32; W];
        for c in (0..whole).step_by(W) {
            let (x, out) = (x.sub(c, W), &out[c..c + W]);
            let mut e = [0f32; W];
            for (j, e) in e.iter_mut().enumerate() {
                *e = super::elementwise::exp_neg_abs(x.load(j) - max);
            }
            for ((s, o), e) in sums.iter_mut().zip(out).zip(e) {
                *s += e;
                o.set(e);
            }
        }
        let mut sum = sums.iter().sum::<f32>();
        for j in whole..n {
            let e = super::elementwise::exp_neg_abs(x.load(j) - max);
            sum += e;
            out[j].set(e);
        }
        let r = 1.0 / sum;
        for c in out {
            c.set(c.get() * r);
        }
    }
}

/// `x / √(mean(x²) + eps)` along the axis, in f32 or f64, of the lanes
/// `lanes`.
pub fn rms_norm<F: Float>(
    at: AroundAxis,
    eps: f32,
    x: impl Load<F>,
    out: &[Cell<F>],
    lanes: core::ops::Range<usize>,
) {
    let s = at.inner;
    let eps = F::from_f32(eps);
    at.lanes_in(lanes, |base| {
        let sq: F = (0..at.n).map(|j| x.load(base + j * s).powi(2)).sum();
        let r = F::ONE / (sq / F::count(at.n) + eps).sqrt();
        for j in 0..at.n {
            out[base + j * s].set(x.load(base + j * s) * r);
        }
    });
}

/// Layer normalisation of each row of `n` values of `x`:
/// `(x − mean) / √(var + ε) · scale + bias`, scale and bias (`n` values
/// each) when given. The mean and variance are taken in f64, so a row of
/// equal values has a mean equal to them and normalises to exactly zero,
/// as in onnxruntime; the normalised value is rounded to `F` once, then
/// scaled and shifted in `F`.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm<F: Float>(
    n: usize,
    eps: f32,
    x: impl Load<F>,
    scale: Option<Src<'_, F>>,
    bias: Option<Src<'_, F>>,
    out: &[Cell<F>],
    (part, parts): (usize, usize),
) {
    let Some(rows) = out.len().checked_div(n) else {
        return;
    };
    for row in super::layout::span_rows(rows, part, parts) {
        let base = row * n;
        let mean = (0..n).map(|j| x.load(base + j).to_f64()).sum::<f64>() / n as f64;
        let var = (0..n)
            .map(|j| {
                let d = x.load(base + j).to_f64() - mean;
                d * d
            })
            .sum::<f64>()
            / n as f64;
        let inv = 1.0 / Float::sqrt(var + f64::from(eps));
        for j in 0..n {
            let mut y = F::of((x.load(base + j).to_f64() - mean) * inv);
            if let Some(s) = scale {
                y = y * s.at(j);
            }
            if let Some(b) = bias {
                y = y + b.at(j);
            }
            out[base + j].set(y);
        }
    }
}

/// [`layer_norm`] of f32 rows, in chunks of sixteen that the copies
/// compiled for AVX-512 or AVX2 run as vectors: the mean and the variance
/// are still taken in f64, in sixteen partial sums (added in order at the
/// end) instead of one; the rest is [`layer_norm`]'s arithmetic. The
/// sequential sums made bert_base's LayerNormalization 2.3 ns an
/// element.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_f32(
    n: usize,
    eps: f32,
    x: impl Load<f32>,
    scale: Option<Src<'_, f32>>,
    bias: Option<Src<'_, f32>>,
    out: &[Cell<f32>],
    (part, parts): (usize, usize),
) {
    let Some(rows) = out.len().checked_div(n) else {
        return;
    };
    let rows = super::layout::span_rows(rows, part, parts);
    #[cfg(target_arch = "x86_64")]
    match super::gemm::Isa::detect() {
        // SAFETY: each copy only needs the CPU to have the features
        // `Isa::detect` found at run time.
        #[allow(unsafe_code)]
        super::gemm::Isa::Avx512 => {
            return unsafe { layer_norm_avx512(n, eps, x, scale, bias, out, rows) }
        }
        #[allow(unsafe_code)]
        super::gemm::Isa::Fma => {
            return unsafe { layer_norm_avx2(n, eps, x, scale, bias, out, rows) }
        }
        super::gemm::Isa::Portable => {}
    }
    layer_norm_rows(n, eps, x, scale, bias, out, rows)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
fn layer_norm_avx512(
    n: usize,
    eps: f32,
    x: impl Load<f32>,
    scale: Option<Src<'_, f32>>,
    bias: Option<Src<'_, f32>>,
    out: &[Cell<f32>],
    rows: core::ops::Range<usize>,
) {
    layer_norm_rows(n, eps, x, scale, bias, out, rows)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
fn layer_norm_avx2(
    n: usize,
    eps: f32,
    x: impl Load<f32>,
    scale: Option<Src<'_, f32>>,
    bias: Option<Src<'_, f32>>,
    out: &[Cell<f32>],
    rows: core::ops::Range<usize>,
) {
    layer_norm_rows(n, eps, x, scale, bias, out, rows)
}

/// `Σ f(x_j)` over a row of f32 in f64: sixteen partial sums over the
/// whole chunks, added in order, then the tail in order.
#[inline(always)]
fn sum_f64(x: impl Load<f32>, n: usize, f: impl Fn(f64) -> f64) -> f64 {
    const W: usize = 16;
    let whole = n - n % W;
    let mut sums = [0f64; W];
    for c in (0..whole).step_by(W) {
        let x = x.sub(c, W);
        for (j, s) in sums.iter_mut().enumerate() {
            *s += f(f64::from(x.load(j)));
        }
    }
    let mut sum = sums.iter().sum::<f64>();
    for j in whole..n {
        sum += f(f64::from(x.load(j)));
    }
    sum
}

/// Elements `c..c + 16` of `s`, matched on its storage once per chunk
/// (per element, the loads were not vectorised).
#[inline(always)]
fn chunk(s: &Src<'_, f32>, c: usize) -> [f32; 16] {
    let mut v = [0f32; 16];
    match s {
        Src::Weight(w) => v.copy_from_slice(&w[c..c + 16]),
        Src::Arena(a) => {
            for (v, a) in v.iter_mut().zip(&a[c..c + 16]) {
                *v = a.get();
            }
        }
    }
    v
}

/// [`layer_norm_f32`] of rows `rows`. Each chunk is read whole before it
/// is written, so `out` may be `x`.
#[inline(always)]
fn layer_norm_rows(
    n: usize,
    eps: f32,
    x: impl Load<f32>,
    scale: Option<Src<'_, f32>>,
    bias: Option<Src<'_, f32>>,
    out: &[Cell<f32>],
    rows: core::ops::Range<usize>,
) {
    const W: usize = 16;
    let whole = n - n % W;
    for row in rows {
        let (x, out) = (x.sub(row * n, n), &out[row * n..(row + 1) * n]);
        let mean = sum_f64(x, n, |v| v) / n as f64;
        let var = sum_f64(x, n, |v| (v - mean) * (v - mean)) / n as f64;
        let inv = 1.0 / Float::sqrt(var + f64::from(eps));
        let normal = |v: f32| ((f64::from(v) - mean) * inv) as f32;
        let mut c = 0;
        while c < whole {
            let mut y = [0f32; W];
            let xs = x.sub(c, W);
            for (j, y) in y.iter_mut().enumerate() {
                *y = normal(xs.load(j));
            }
            if let Some(s) = &scale {
                for (y, s) in y.iter_mut().zip(chunk(s, c)) {
                    *y *= s;
                }
            }
            if let Some(b) = &bias {
                for (y, b) in y.iter_mut().zip(chunk(b, c)) {
                    *y += b;
                }
            }
            for (o, y) in out[c..c + W].iter().zip(y) {
                o.set(y);
            }
            c += W;
        }
        for j in whole..n {
            let mut y = normal(x.load(j));
            if let Some(s) = scale {
                y *= s.at(j);
            }
            if let Some(b) = bias {
                y += b.at(j);
            }
            out[j].set(y);
        }
    }
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
/// values reduced into each output. f32 or f64.
pub fn reduce<F: Float>(
    r: Reducer,
    walk: &Walk<2>,
    count: usize,
    x: impl Load<F>,
    out: &[Cell<F>],
) {
    let init = match r {
        Reducer::Sum | Reducer::MeanOfSquares => F::ZERO,
        Reducer::Prod => F::ONE,
        Reducer::Max => F::NEG_INFINITY,
        Reducer::Min => F::INFINITY,
    };
    out.iter().for_each(|c| c.set(init));
    let (len, [so, si]) = walk.inner();
    walk.rows([0, 0], |[o, i]| {
        if so == 0 && si == 1 && matches!(r, Reducer::Sum | Reducer::MeanOfSquares) {
            let c = &out[o];
            c.set(c.get() + sum_row(r == Reducer::MeanOfSquares, x.sub(i, len)));
        } else if so == 0 {
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
        let n = F::count(count.max(1));
        out.iter().for_each(|c| c.set(c.get() / n));
    }
}

/// The sum of a contiguous row (of squares, with `squares`) in
/// [`SUM_LANES`] partial sums, added pairwise at the end, then the
/// tail: one chain of additions ran at one element per add latency
/// (efficientnet_b0's global average pools took 9 % of its run), the
/// lanes vectorise. The order of the additions differs from the chain's,
/// as a vectorised sum's does in any runtime.
#[inline(always)]
fn sum_row<F: Float>(squares: bool, x: impl Load<F>) -> F {
    let term = |v: F| if squares { v * v } else { v };
    let n = x.count();
    let mut lanes = [F::ZERO; SUM_LANES];
    let mut j = 0;
    while j + SUM_LANES <= n {
        let chunk = x.sub(j, SUM_LANES);
        for (l, lane) in lanes.iter_mut().enumerate() {
            *lane = *lane + term(chunk.load(l));
        }
        j += SUM_LANES;
    }
    let mut width = SUM_LANES;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            lanes[l] = lanes[l] + lanes[l + width];
        }
    }
    let mut total = lanes[0];
    for k in j..n {
        total = total + term(x.load(k));
    }
    total
}

/// Partial sums of [`sum_row`] (a power of two).
const SUM_LANES: usize = 16;

#[inline(always)]
fn combine<F: Float>(r: Reducer, acc: F, v: F) -> F {
    match r {
        Reducer::Sum => acc + v,
        Reducer::Prod => acc * v,
        Reducer::Max => acc.max(v),
        Reducer::Min => acc.min(v),
        Reducer::MeanOfSquares => acc + v * v,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cells<T: Copy>(v: &mut [T]) -> &[Cell<T>] {
        Cell::from_mut(v).as_slice_of_cells()
    }

    /// The vector f32 softmax against the f64 definition: rows of every
    /// length around the vector width, wide and narrow ranges, infinities
    /// and NaN, in place and not, with lane shares.
    #[test]
    fn vector_softmax_of_f32_matches_the_f64_definition() {
        let mut below = crate::kernels::testing::below(0x5eed_50f7_4a11_0001);
        for case in 0..300 {
            let n = 1 + below(70);
            let rows = 1 + below(4);
            let spread = [0.1f32, 5.0, 40.0, 200.0][below(4)];
            let mut x: Vec<f32> = (0..rows * n)
                .map(|i| crate::kernels::testing::value(i + case * 977, 1) * spread)
                .collect();
            if case % 7 == 0 {
                x[below(rows * n)] = f32::NEG_INFINITY;
            }
            if case % 11 == 0 {
                x[below(rows * n)] = [f32::INFINITY, f32::NAN][below(2)];
            }
            let at = AroundAxis::new(&[rows, n], 1).unwrap();
            let in_place = case % 2 == 0;
            let mut out = if in_place {
                x.clone()
            } else {
                vec![0.0; rows * n]
            };
            let cells_out = cells(&mut out);
            let parts = 1 + below(3);
            for part in 0..parts {
                let lanes = crate::kernels::layout::span_rows(rows, part, parts);
                if in_place {
                    softmax_f32(at, false, cells_out, cells_out, lanes);
                } else {
                    softmax_f32(at, false, &x[..], cells_out, lanes);
                }
            }
            for r in 0..rows {
                let lane = &x[r * n..(r + 1) * n];
                let max = lane
                    .iter()
                    .fold(f64::NEG_INFINITY, |a, &b| a.max(f64::from(b)));
                let sum: f64 = lane.iter().map(|&v| (f64::from(v) - max).exp()).sum();
                for (j, &v) in lane.iter().enumerate() {
                    let want = (f64::from(v) - max).exp() / sum;
                    let got = f64::from(out[r * n + j]);
                    if want.is_nan() {
                        assert!(got.is_nan(), "case {case}: {got} for NaN");
                        continue;
                    }
                    // f32's rounding of x − max moves e^(x − max) by up
                    // to |x − max| · 2⁻²⁴ relative; the rest is the
                    // exponential's, the sum's and the product's (and
                    // below e^−87, where it gives 0, at most 1.6e-38).
                    let d = (f64::from(v) - max).abs().min(200.0);
                    assert!(
                        (got - want).abs() <= want * (5e-7 + d * 6e-8) + 1.7e-38,
                        "case {case}, row {r}, {j} of {n}: {got} against {want}"
                    );
                }
            }
        }
    }

    /// The chunked f32 layer normalisation against the sequential one
    /// (the generic [`layer_norm`]): their means and variances differ only
    /// in the order of f64 additions, so each normalised value is the same
    /// f32 or its neighbour, and scaled and shifted the same way (the
    /// difference bounded by one ulp of the normalised value times the
    /// scale, plus half an ulp of the result either side); rows of equal
    /// values normalise to exactly zero in both; rows of every length
    /// around the chunk, in place and not, with row shares.
    #[test]
    fn chunked_layer_norm_of_f32_matches_the_sequential_one() {
        let mut below = crate::kernels::testing::below(0x5eed_1a7e_2a0d_0001);
        for case in 0..400 {
            let n = 1 + below(80);
            let rows = 1 + below(4);
            let spread = [1e-3f32, 1.0, 30.0, 1e4][below(4)];
            let offset = [0.0f32, 5.0, -1e3][below(3)];
            let mut x: Vec<f32> = (0..rows * n)
                .map(|i| crate::kernels::testing::value(i + case * 977, 1) * spread + offset)
                .collect();
            if case % 5 == 0 {
                let v = x[0];
                x[..n].iter_mut().for_each(|e| *e = v);
            }
            let params = |seed: usize| -> Vec<f32> {
                (0..n)
                    .map(|j| crate::kernels::testing::value(j + seed, 1) * 2.0)
                    .collect()
            };
            let (scale, bias) = (params(case * 31 + 7), params(case * 53 + 11));
            let with_scale = case % 3 != 0;
            let with_bias = case % 4 != 0;
            let scale_src = with_scale.then_some(Src::Weight(&scale[..]));
            let bias_src = with_bias.then_some(Src::Weight(&bias[..]));
            let eps = 1e-5;
            let mut want = vec![0f32; rows * n];
            layer_norm(
                n,
                eps,
                &x[..],
                scale_src,
                bias_src,
                cells(&mut want),
                (0, 1),
            );
            let mut normal = vec![0f32; rows * n];
            layer_norm(n, eps, &x[..], None, None, cells(&mut normal), (0, 1));
            let in_place = case % 2 == 0;
            let mut got = if in_place {
                x.clone()
            } else {
                vec![0.0; rows * n]
            };
            let out = cells(&mut got);
            let parts = 1 + below(3);
            for part in 0..parts {
                if in_place {
                    layer_norm_f32(n, eps, out, scale_src, bias_src, out, (part, parts));
                } else {
                    layer_norm_f32(n, eps, &x[..], scale_src, bias_src, out, (part, parts));
                }
            }
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                let j = i % n;
                let s = if with_scale { scale[j].abs() } else { 1.0 };
                let ulp = |v: f32| f32::from_bits(v.abs().to_bits() + 1) - v.abs();
                let room = s * ulp(normal[i]) * 1.01 + ulp(w) + ulp(g);
                assert!(
                    g.to_bits() == w.to_bits() || (g - w).abs() <= room,
                    "case {case}, element {i} of rows of {n}: {g} against {w} ({:#x} {:#x}, room {room})",
                    g.to_bits(),
                    w.to_bits()
                );
                if case % 5 == 0 && i < n && !with_scale && !with_bias {
                    assert_eq!(g, 0.0, "case {case}: a row of equal values");
                }
            }
        }
    }

    /// Softmax and log-softmax of f64 along the middle axis of a 2×3×2
    /// tensor, against the definition; the inputs differ by 1e-12, which
    /// f32 would lose.
    #[test]
    fn softmax_of_f64_matches_its_definition() {
        let x: Vec<f64> = (0..12).map(|i| 700.0 + i as f64 * 1e-12).collect();
        let mut x = x;
        x[3] = -2.5;
        x[8] = 3.75;
        let at = AroundAxis::new(&[2, 3, 2], 1).unwrap();
        for log in [false, true] {
            let mut out = vec![0.0f64; 12];
            softmax(at, log, &x[..], cells(&mut out), 0..at.lane_count());
            for o in 0..2 {
                for i in 0..2 {
                    let lane: Vec<usize> = (0..3).map(|j| o * 6 + j * 2 + i).collect();
                    let max = lane.iter().map(|&k| x[k]).fold(f64::MIN, f64::max);
                    let sum: f64 = lane.iter().map(|&k| (x[k] - max).exp()).sum();
                    for &k in &lane {
                        let want = if log {
                            x[k] - max - sum.ln()
                        } else {
                            (x[k] - max).exp() / sum
                        };
                        let error = (out[k] - want).abs();
                        assert!(
                            error <= 1e-15 * want.abs().max(1.0),
                            "{k}: {} {want}",
                            out[k]
                        );
                    }
                }
            }
        }
        // The 1e-12 steps survive: softmax of (a, a + 1e-12) is not (½, ½).
        let mut out = [0.0f64; 2];
        softmax(
            AroundAxis::new(&[2], 0).unwrap(),
            false,
            &[1.0, 1.0 + 1e-12][..],
            cells(&mut out),
            0..1,
        );
        assert!(
            out[1] > out[0] && (out[1] - out[0] - 5e-13).abs() < 1e-15,
            "{out:?}"
        );
    }

    #[test]
    fn rms_norm_of_f64_matches_its_definition() {
        let x: Vec<f64> = (0..8).map(|i| (i as f64 - 3.3) * 0.7).collect();
        let mut out = vec![0.0f64; 8];
        let at = AroundAxis::new(&[2, 4], 1).unwrap();
        rms_norm(at, 1e-6, &x[..], cells(&mut out), 0..at.lane_count());
        for row in 0..2 {
            let r = &x[row * 4..row * 4 + 4];
            let ms = r.iter().map(|v| v * v).sum::<f64>() / 4.0;
            let scale = 1.0 / (ms + f64::from(1e-6f32)).sqrt();
            for j in 0..4 {
                let want = r[j] * scale;
                assert!((out[row * 4 + j] - want).abs() <= 1e-15 * want.abs().max(1.0));
            }
        }
    }

    /// Every reducer of f64 over axes 0 and 2 of a 3×2×4 tensor (the
    /// output keeps axis 1), against loops over the same values.
    #[test]
    fn reductions_of_f64_match_loops() {
        use super::super::layout::{broadcast_strides, strides_of};
        let shape = [3, 2, 4];
        let x: Vec<f64> = (0..24)
            .map(|i| ((i * 7 % 11) as f64 - 5.0) * 0.3 + 1e-13 * i as f64)
            .collect();
        let os = broadcast_strides(&[1, 2, 1], &shape).unwrap();
        let walk = Walk::new(&shape, [&os, &strides_of(&shape)]).unwrap();
        let reducers = [
            Reducer::Sum,
            Reducer::Prod,
            Reducer::Max,
            Reducer::Min,
            Reducer::MeanOfSquares,
        ];
        for r in reducers {
            let mut out = [0.0f64; 2];
            reduce(r, &walk, 12, &x[..], cells(&mut out));
            for (c, got) in out.iter().enumerate() {
                let values: Vec<f64> = (0..3)
                    .flat_map(|a| (0..4).map(move |b| a * 8 + c * 4 + b))
                    .map(|k| x[k])
                    .collect();
                let want = match r {
                    Reducer::Sum => values.iter().sum(),
                    Reducer::Prod => values.iter().product(),
                    Reducer::Max => values.iter().copied().fold(f64::MIN, f64::max),
                    Reducer::Min => values.iter().copied().fold(f64::MAX, f64::min),
                    Reducer::MeanOfSquares => values.iter().map(|v| v * v).sum::<f64>() / 12.0,
                };
                assert!(
                    (got - want).abs() <= 1e-14 * want.abs().max(1.0),
                    "{r:?}[{c}] = {got}, want {want}"
                );
            }
        }
        // Sums keep what f32 would round away.
        let mut out = [0.0f64; 1];
        let walk = Walk::new(&[2], [&[0], &[1]]).unwrap();
        reduce(Reducer::Sum, &walk, 2, &[1.0, 1e-12][..], cells(&mut out));
        assert_eq!(out[0], 1.0 + 1e-12);
    }

    /// Sums and means of squares of f32 over contiguous rows (the lane
    /// path: global average pools) and over strided axes (the chain),
    /// rows of every length around the lane count, against f64 sums of
    /// the same values: within f32's rounding of a sum of that many terms.
    #[test]
    fn f32_sums_in_lanes_match_f64() {
        use super::super::layout::{broadcast_strides, strides_of};
        let mut seed = 0x9e37_79b9_u32;
        for (planes, len) in [
            (1, 0),
            (3, 1),
            (2, 15),
            (2, 16),
            (4, 17),
            (3, 49),
            (2, 12544),
        ] {
            let shape = [planes, len];
            let x: Vec<f32> = (0..planes * len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    seed as f32 / u32::MAX as f32 - 0.3
                })
                .collect();
            for (reduced, kept) in [(1, [planes, 1]), (0, [1, len])] {
                let os = broadcast_strides(&kept, &shape).unwrap();
                let walk = Walk::new(&shape, [&os, &strides_of(&shape)]).unwrap();
                for r in [Reducer::Sum, Reducer::MeanOfSquares] {
                    let count = shape[reduced];
                    let mut out = vec![0f32; kept[0] * kept[1]];
                    reduce(r, &walk, count, &x[..], cells(&mut out));
                    for (o, got) in out.iter().enumerate() {
                        let values: Vec<f64> = (0..count)
                            .map(|t| {
                                if reduced == 1 {
                                    o * len + t
                                } else {
                                    t * len + o
                                }
                            })
                            .map(|k| f64::from(x[k]))
                            .collect();
                        let want = match r {
                            Reducer::Sum => values.iter().sum::<f64>(),
                            _ => values.iter().map(|v| v * v).sum::<f64>() / count.max(1) as f64,
                        };
                        let scale: f64 = values.iter().map(|v| v.abs()).sum::<f64>().max(1.0);
                        assert!(
                            (f64::from(*got) - want).abs() <= 1e-6 * scale,
                            "{r:?} of {planes}x{len} along {reduced}, [{o}] = {got}, want {want}"
                        );
                    }
                }
            }
        }
    }
}

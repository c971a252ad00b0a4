//! The discrete Fourier transform in the form the frontend leaves it
//! (tract's `Fft`): complex numbers as a trailing axis of two (real,
//! imaginary), one axis transformed, no normalisation — the frontend
//! divides an inverse transform by its length and slices a one-sided
//! output in operators of their own.
//!
//! Short transforms (and f16 ones, whose per-stage rounding would add up)
//! are direct sums accumulated in f64: one rounding per output. Longer
//! power-of-two transforms run as an in-place radix-2 FFT in the output
//! tensor, which needs no scratch; other long lengths fall back to the
//! direct sum, whose cost is quadratic in the length.

use super::cells::Src;
use super::contract::Real;
use super::float::Float;
use super::nn::AroundAxis;
use super::{Kernel, Operand};
use alloc::{format, string::String};
use core::cell::Cell;
use core::f64::consts::TAU;
use stow_bundle::DType;

/// Up to this length the direct sum is as fast as the FFT's passes and
/// more accurate.
const DIRECT_MAX: usize = 64;

/// A prepared transform.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fourier {
    /// The tensor around the transformed axis; `inner` counts the
    /// trailing real/imaginary pair, so it is even.
    pub at: AroundAxis,
    /// True for the inverse transform (`e^{+2πi jk/n}`).
    pub inverse: bool,
    /// Direct sums in f64 rather than the radix-2 FFT.
    pub direct: bool,
}

impl Fourier {
    /// Transforms every line of `x` along the axis into `out` (which must
    /// not share bytes with `x`).
    pub(super) fn run<T: Real>(&self, x: Src<'_, T>, out: &[Cell<T>]) {
        let AroundAxis { outer, n, inner } = self.at;
        let sign = if self.inverse { 1.0 } else { -1.0 };
        for o in 0..outer {
            for lane in (0..inner).step_by(2) {
                let base = o * n * inner + lane;
                if self.direct {
                    direct(x, out, base, n, inner, sign);
                } else {
                    radix2(x, out, base, n, inner, sign);
                }
            }
        }
    }
}

/// `out[k] = Σ_j x[j]·e^{sign·2πi jk/n}` for one line (element `j` of the
/// line at `base + j·stride`, its imaginary part one further).
fn direct<T: Real>(x: Src<'_, T>, out: &[Cell<T>], base: usize, n: usize, stride: usize, s: f64) {
    for k in 0..n {
        // The rotation by e^{sign·2πi k/n} repeated: f64 keeps its drift
        // far below the output's precision for the lengths taken here.
        let (step_re, step_im) = cis(s * TAU * k as f64 / n as f64);
        let (mut w_re, mut w_im) = (1.0f64, 0.0f64);
        let (mut re, mut im) = (0.0f64, 0.0f64);
        for j in 0..n {
            let at = base + j * stride;
            let (a, b) = (x.at(at).get(), x.at(at + 1).get());
            re += a * w_re - b * w_im;
            im += a * w_im + b * w_re;
            (w_re, w_im) = (
                w_re * step_re - w_im * step_im,
                w_re * step_im + w_im * step_re,
            );
        }
        let at = base + k * stride;
        out[at].set(T::put(re));
        out[at + 1].set(T::put(im));
    }
}

/// The iterative radix-2 FFT of one line: a bit-reversed copy into `out`,
/// then butterflies in place (`n` a power of two).
fn radix2<T: Real>(x: Src<'_, T>, out: &[Cell<T>], base: usize, n: usize, stride: usize, s: f64) {
    let bits = n.trailing_zeros();
    for j in 0..n {
        let r = j.reverse_bits() >> (usize::BITS - bits);
        let (from, to) = (base + j * stride, base + r * stride);
        out[to].set(x.at(from));
        out[to + 1].set(x.at(from + 1));
    }
    let load = |i: usize| {
        let at = base + i * stride;
        (out[at].get().get(), out[at + 1].get().get())
    };
    let store = |i: usize, (re, im): (f64, f64)| {
        let at = base + i * stride;
        out[at].set(T::put(re));
        out[at + 1].set(T::put(im));
    };
    let mut len = 2;
    while len <= n {
        let half = len / 2;
        for t in 0..half {
            let (w_re, w_im) = cis(s * TAU * t as f64 / len as f64);
            for start in (0..n).step_by(len) {
                let (a_re, a_im) = load(start + t);
                let (b_re, b_im) = load(start + t + half);
                let (p_re, p_im) = (b_re * w_re - b_im * w_im, b_re * w_im + b_im * w_re);
                store(start + t, (a_re + p_re, a_im + p_im));
                store(start + t + half, (a_re - p_re, a_im - p_im));
            }
        }
        len *= 2;
    }
}

fn cis(angle: f64) -> (f64, f64) {
    (Float::cos(angle), Float::sin(angle))
}

/// Prepares the transform along `axis` of a tensor whose last axis holds
/// (real, imaginary).
pub(super) fn prepare(
    axis: i64,
    inverse: bool,
    ins: &[Operand<'_>],
    outs: &[Operand<'_>],
) -> Result<(Kernel, usize), String> {
    if ins.len() != 1 || outs.len() != 1 {
        return Err("the Fourier transform takes 1 input and makes 1 output".into());
    }
    let (x, y) = (&ins[0], &outs[0]);
    if x.dtype != y.dtype || !matches!(x.dtype, DType::F16 | DType::F32 | DType::F64) {
        return Err(format!(
            "Fourier transform of {} into {}: this kernel maps f16, f32 or f64 to the same type",
            x.dtype.name(),
            y.dtype.name()
        ));
    }
    if x.shape != y.shape {
        return Err(format!(
            "the Fourier transform changes the shape {:?} to {:?}",
            x.shape, y.shape
        ));
    }
    let rank = x.shape.len();
    if rank < 2 || x.shape[rank - 1] != 2 {
        return Err(format!(
            "Fourier transform of shape {:?}: the last axis must hold (real, imaginary)",
            x.shape
        ));
    }
    let axis = usize::try_from(axis)
        .ok()
        .filter(|&a| a < rank - 1)
        .ok_or_else(|| format!("Fourier transform along axis {axis} of rank {rank}"))?;
    let at = AroundAxis::new(&x.shape, axis).ok_or("axis out of range")?;
    let direct = at.n <= DIRECT_MAX || !at.n.is_power_of_two() || x.dtype == DType::F16;
    Ok((
        Kernel::Fourier(Fourier {
            at,
            inverse,
            direct,
        }),
        0,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// The definition, term by term with fresh sines and cosines.
    fn reference(x: &[f64], n: usize, inverse: bool) -> Vec<f64> {
        let s = if inverse { 1.0 } else { -1.0 };
        let mut out = vec![0.0; 2 * n];
        for k in 0..n {
            for j in 0..n {
                let (c, si) = cis(s * TAU * ((j * k) % n) as f64 / n as f64);
                out[2 * k] += x[2 * j] * c - x[2 * j + 1] * si;
                out[2 * k + 1] += x[2 * j] * si + x[2 * j + 1] * c;
            }
        }
        out
    }

    fn noise(len: usize, seed: u64) -> Vec<f64> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f64 / (1u64 << 24) as f64) * 2.0 - 1.0
            })
            .collect()
    }

    fn run_f32(x: &[f64], n: usize, inverse: bool, direct: bool) -> Vec<f64> {
        let xs: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let out = vec![Cell::new(0f32); xs.len()];
        let f = Fourier {
            at: AroundAxis {
                outer: 1,
                n,
                inner: 2,
            },
            inverse,
            direct,
        };
        f.run(Src::Weight(&xs), &out);
        out.iter().map(|c| c.get() as f64).collect()
    }

    fn worst(a: &[f64], b: &[f64]) -> f64 {
        let scale = b.iter().fold(0f64, |m, v| m.max(v.abs()));
        a.iter().zip(b).fold(0f64, |m, (p, q)| m.max((p - q).abs())) / scale
    }

    #[test]
    fn both_algorithms_match_the_definition_in_both_directions() {
        for (n, direct) in [
            (1, true),
            (5, true),
            (12, true),
            (64, true),
            (128, false),
            (1024, false),
            (8, false),
        ] {
            for inverse in [false, true] {
                let x = noise(2 * n, n as u64 + inverse as u64);
                let (x32, want): (Vec<f64>, Vec<f64>) = {
                    let r: Vec<f64> = x.iter().map(|&v| v as f32 as f64).collect();
                    let w = reference(&r, n, inverse);
                    (r, w)
                };
                let got = run_f32(&x32, n, inverse, direct);
                let err = worst(&got, &want);
                assert!(err < 2e-6, "n {n} direct {direct} inverse {inverse}: {err}");
            }
        }
    }

    #[test]
    fn forward_then_inverse_gives_n_times_the_signal() {
        let n = 256;
        let x = noise(2 * n, 7);
        let fwd: Vec<f64> = run_f32(&x, n, false, false);
        let back = run_f32(&fwd, n, true, false);
        let scaled: Vec<f64> = x.iter().map(|v| (*v as f32 as f64) * n as f64).collect();
        assert!(worst(&back, &scaled) < 1e-5);
    }

    #[test]
    fn lines_along_a_middle_axis_stay_apart() {
        // Shape [2, 4, 3, 2]: the transform runs along axis 1, once for
        // each of the 2 × 3 lanes.
        let (outer, n, lanes) = (2, 4, 3);
        let x = noise(outer * n * lanes * 2, 3);
        let out = vec![Cell::new(0f64); x.len()];
        let f = Fourier {
            at: AroundAxis {
                outer,
                n,
                inner: lanes * 2,
            },
            inverse: false,
            direct: false,
        };
        f.run(Src::Weight(&x), &out);
        for o in 0..outer {
            for l in 0..lanes {
                let at = |j: usize| o * n * lanes * 2 + j * lanes * 2 + l * 2;
                let line: Vec<f64> = (0..n).flat_map(|j| [x[at(j)], x[at(j) + 1]]).collect();
                let want = reference(&line, n, false);
                for k in 0..n {
                    assert!((out[at(k)].get() - want[2 * k]).abs() < 1e-12);
                    assert!((out[at(k) + 1].get() - want[2 * k + 1]).abs() < 1e-12);
                }
            }
        }
    }
}

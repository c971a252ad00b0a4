//! Einstein summations that are not matrix products: one operand
//! (transposes, diagonals, sums, traces), more than two, axes summed in
//! one operand only, and f16 or f64 elements. A plain loop over the output
//! and the summed axes, accumulating in f64; products of two f32 operands
//! take the packed matrix product instead ([`super::MatMul`]).

use super::cells::Src;
use super::run::{Failure, Views};
use super::Operand;
use alloc::{format, string::String, vec::Vec};
use core::cell::Cell;
use half::f16;
use stow_bundle::DType;

/// At most this many axes in a summation, and operands.
pub const MAX_AXES: usize = 12;
/// Operands of one summation.
pub const MAX_OPERANDS: usize = 4;

/// A prepared summation.
#[derive(Clone, Debug)]
pub struct Contraction {
    /// Sizes of the output's axes, then of the summed axes.
    pub dims: Vec<usize>,
    /// How many of `dims` are output axes.
    pub kept: usize,
    /// Each input's element stride along each of `dims` (the sum of its
    /// strides where an axis repeats: a diagonal).
    pub strides: Vec<Vec<usize>>,
}

impl Contraction {
    /// Reads an EinSum expression such as `ij,jk->ik` or `ii->i` against
    /// the operands' shapes.
    pub fn new(expr: &str, inputs: &[&[usize]], output: &[usize]) -> Result<Contraction, String> {
        let (lhs, out_axes) = expr.split_once("->").ok_or("no -> in the expression")?;
        let in_axes: Vec<Vec<char>> = lhs.split(',').map(|s| s.chars().collect()).collect();
        let out_axes: Vec<char> = out_axes.chars().collect();
        if in_axes.len() != inputs.len() || in_axes.len() > MAX_OPERANDS {
            return Err(format!("`{expr}` for {} operands", inputs.len()));
        }
        let mut size = alloc::collections::BTreeMap::<char, usize>::new();
        let all = in_axes.iter().zip(inputs).chain([(&out_axes, &output)]);
        for (axes, shape) in all {
            if axes.len() != shape.len() {
                return Err(format!("`{expr}` does not match the ranks"));
            }
            for (&c, &d) in axes.iter().zip(shape.iter()) {
                let e = size.entry(c).or_insert(d);
                if *e == 1 {
                    *e = d;
                }
                if d != 1 && d != *e {
                    return Err(format!("axis {c} of `{expr}` has two sizes"));
                }
            }
        }
        let mut order: Vec<char> = Vec::new();
        for &c in &out_axes {
            if order.contains(&c) {
                return Err(format!("`{expr}` repeats an output axis"));
            }
            order.push(c);
        }
        let kept = order.len();
        for &c in size.keys() {
            if !order.contains(&c) {
                order.push(c);
            }
        }
        if order.len() > MAX_AXES {
            return Err(format!("`{expr}` has more than {MAX_AXES} axes"));
        }
        let dims: Vec<usize> = order.iter().map(|c| size[c]).collect();
        let strides = in_axes
            .iter()
            .zip(inputs)
            .map(|(axes, shape)| {
                let own = super::layout::strides_of(shape);
                order
                    .iter()
                    .map(|&c| {
                        (0..axes.len())
                            .filter(|&p| axes[p] == c && shape[p] > 1)
                            .map(|p| own[p])
                            .sum()
                    })
                    .collect()
            })
            .collect();
        Ok(Contraction {
            dims,
            kept,
            strides,
        })
    }
}

/// A float element read and written through f64.
pub(super) trait Real: bytemuck::Pod {
    fn get(self) -> f64;
    fn put(x: f64) -> Self;
}

impl Real for f32 {
    fn get(self) -> f64 {
        self.into()
    }
    fn put(x: f64) -> Self {
        x as f32
    }
}

impl Real for f64 {
    fn get(self) -> f64 {
        self
    }
    fn put(x: f64) -> Self {
        x
    }
}

impl Real for f16 {
    fn get(self) -> f64 {
        self.to_f64()
    }
    fn put(x: f64) -> Self {
        f16::from_f64(x)
    }
}

/// Offsets of each operand at flat position `at` of the axes `dims`
/// (strides `strides[i][..]` for operand `i`).
pub(super) fn offsets(
    dims: &[usize],
    strides: &[Vec<usize>],
    base: usize,
    mut at: usize,
) -> [usize; MAX_OPERANDS] {
    let mut off = [0; MAX_OPERANDS];
    for d in (0..dims.len()).rev() {
        let i = at % dims[d];
        at /= dims[d];
        for (o, s) in off.iter_mut().zip(strides) {
            *o += i * s[base + d];
        }
    }
    off
}

fn run<T: Real>(c: &Contraction, ins: &[Src<'_, T>], out: &[Cell<T>]) {
    let (kept, summed) = c.dims.split_at(c.kept);
    let count: usize = summed.iter().product();
    for (o, cell) in out.iter().enumerate() {
        let base = offsets(kept, &c.strides, 0, o);
        let mut acc = 0f64;
        for s in 0..count {
            let more = offsets(summed, &c.strides, c.kept, s);
            let mut p = 1f64;
            for (i, x) in ins.iter().enumerate() {
                p *= x.at(base[i] + more[i]).get();
            }
            acc += p;
        }
        cell.set(T::put(acc));
    }
}

/// Runs a prepared summation (element types checked at setup: all the
/// operands share the output's float type).
pub(super) fn contract(
    v: &Views<'_>,
    c: &Contraction,
    ins: &[Operand<'_>],
    o: &Operand<'_>,
) -> Result<(), Failure> {
    fn go<T: Real>(
        v: &Views<'_>,
        c: &Contraction,
        ins: &[Operand<'_>],
        o: &Operand<'_>,
    ) -> Result<(), Failure> {
        let empty: &[T] = &[];
        let mut list = [Src::Weight(empty); MAX_OPERANDS];
        for (l, x) in list.iter_mut().zip(ins) {
            *l = v.src::<T>(x)?;
        }
        run(c, &list[..ins.len()], v.dst::<T>(o)?);
        Ok(())
    }
    match o.dtype {
        DType::F16 => go::<f16>(v, c, ins, o),
        DType::F64 => go::<f64>(v, c, ins, o),
        _ => go::<f32>(v, c, ins, o),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(expr: &str, ins: &[(&[usize], &[f64])], out: &[usize]) -> Vec<f64> {
        let shapes: Vec<&[usize]> = ins.iter().map(|(s, _)| *s).collect();
        let c = Contraction::new(expr, &shapes, out).unwrap();
        let srcs: Vec<Src<'_, f64>> = ins.iter().map(|(_, d)| Src::Weight(d)).collect();
        let cells = vec![Cell::new(0f64); out.iter().product()];
        run(&c, &srcs, &cells);
        cells.iter().map(Cell::get).collect()
    }

    #[test]
    fn diagonal_trace_transpose_sum_and_product() {
        let m = [1., 2., 3., 4., 5., 6., 7., 8., 9.];
        assert_eq!(eval("ii->i", &[(&[3, 3], &m)], &[3]), [1., 5., 9.]);
        assert_eq!(eval("ii->", &[(&[3, 3], &m)], &[]), [15.]);
        assert_eq!(
            eval("ij->ji", &[(&[3, 3], &m)], &[3, 3]),
            [1., 4., 7., 2., 5., 8., 3., 6., 9.]
        );
        assert_eq!(eval("ij->i", &[(&[3, 3], &m)], &[3]), [6., 15., 24.]);
        let a = [1., 2., 3., 4., 5., 6.];
        let b = [1., 0., -1., 2., 0.5, 1.];
        // (2×3)·(3×2) by hand.
        assert_eq!(
            eval("ik,kj->ij", &[(&[2, 3], &a), (&[3, 2], &b)], &[2, 2]),
            [1. - 2. + 1.5, 0. + 4. + 3., 4. - 5. + 3., 0. + 10. + 6.]
        );
        assert_eq!(
            eval(
                "i,i,i->",
                &[(&[2], &[1., 2.]), (&[2], &[3., 4.]), (&[2], &[5., 6.])],
                &[]
            ),
            [15. + 48.]
        );
    }

    #[test]
    fn refuses_shapes_that_do_not_fit() {
        assert!(Contraction::new("ij->i", &[&[2, 3]], &[3]).is_err());
        assert!(Contraction::new("ij,jk->ik", &[&[2, 3]], &[2, 2]).is_err());
        assert!(Contraction::new("ij->ii", &[&[2, 2]], &[2, 2]).is_err());
    }
}

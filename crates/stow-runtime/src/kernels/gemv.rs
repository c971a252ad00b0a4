//! One row times a matrix, `c[j] += Σ_p a[p] · b[p, j]`: a product with
//! one row (a classifier's last layer, a batch-1 `Gemm`) gains nothing
//! from packing, and is bound by streaming the matrix.
//!
//! Where each output is the dot product of two contiguous vectors (a
//! `Gemm` with its weight transposed), the sum keeps [`LANES`] partial
//! sums, each a chain of additions down the depth. One column at a time,
//! every step waits on the previous addition of its chain; with vectors,
//! [`SIDE`] columns go side by side, so their chains overlap and the
//! matrix streams at the memory's pace. The partial sums, their order
//! and their final addition are the same either way, so the bits are.

use super::cells::Load;
use super::gemm::Dst;

/// Partial sums of one dot product (one 256-bit vector of them): they
/// decide the order of the additions, hence the bits of the result.
const LANES: usize = 8;
/// Columns whose dot products run side by side with vectors.
const SIDE: usize = 8;

/// `c[j] += Σ_p a[p] · b[p, j]` for `j` in `cols`, `a` read from `oa` by
/// steps of `sa`, `b[p, j]` at `ob + p·bk + j·bn`.
pub(super) fn gemv<A: Load<f32>, B: Load<f32>>(
    k: usize,
    (a, oa, sa): (A, usize, usize),
    (b, ob, [bk, bn]): (B, usize, [usize; 2]),
    c: &Dst<'_>,
    cols: core::ops::Range<usize>,
) {
    let add = |j: usize, sum: f32| {
        let cell = &c.data[c.offset + j * c.cs];
        cell.set(cell.get() + sum);
    };
    if sa == 1 && bk == 1 {
        let row = a.sub(oa, k);
        let mut j = cols.start;
        #[cfg(target_arch = "x86_64")]
        if super::gemm::Isa::detect() != super::gemm::Isa::Portable {
            while j + SIDE <= cols.end {
                let block = b.sub(ob + j * bn, (SIDE - 1) * bn + k);
                // SAFETY: AVX is there (`Isa::detect` found AVX2); `row`
                // holds `k` floats and `block` the `SIDE` columns of `k`
                // floats `bn` apart, as `sub` checked.
                #[allow(unsafe_code)]
                let lanes = unsafe { x86::lanes(row.ptr(), block.ptr(), bn, k) };
                for (q, lanes) in lanes.into_iter().enumerate() {
                    add(j + q, dot_end(lanes, row, block.sub(q * bn, k)));
                }
                j += SIDE;
            }
        }
        for j in j..cols.end {
            let col = b.sub(ob + j * bn, k);
            let mut lanes = [0f32; LANES];
            let mut p = 0;
            while p + LANES <= k {
                let (x, y) = (row.sub(p, LANES), col.sub(p, LANES));
                for (l, lane) in lanes.iter_mut().enumerate() {
                    *lane += x.load(l) * y.load(l);
                }
                p += LANES;
            }
            add(j, dot_end(lanes, row, col));
        }
    } else if bn == 1 && c.cs == 1 && !cols.is_empty() {
        // Rows of b are contiguous: accumulate a[p] · b[p, cols] in c.
        let out = &c.data[c.offset + cols.start..c.offset + cols.end];
        for p in 0..k {
            let x = a.load(oa + p * sa);
            let r = b.sub(ob + p * bk + cols.start, cols.len());
            super::cells::zip_row(out, out, r, |o, y| o + x * y);
        }
    } else {
        for j in cols {
            let sum: f32 = (0..k)
                .map(|p| a.load(oa + p * sa) * b.load(ob + p * bk + j * bn))
                .sum();
            // Accumulate: batch positions that walk a k axis add into the
            // same outputs.
            add(j, sum);
        }
    }
}

/// A dot product of `row` and `col` (`k` floats each) from the partial
/// sums of its whole groups of [`LANES`]: their sum, then the last
/// `k % LANES` products one by one.
#[inline(always)]
fn dot_end<A: Load<f32>, B: Load<f32>>(lanes: [f32; LANES], row: A, col: B) -> f32 {
    let k = row.count();
    let mut sum: f32 = lanes.iter().sum();
    for p in k - k % LANES..k {
        sum += row.load(p) * col.load(p);
    }
    sum
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{LANES, SIDE};
    use core::arch::x86_64::*;

    const _: () = assert!(LANES == 8, "one 256-bit vector of partial sums");
    /// Floats in a cache line.
    const LINE: usize = 16;
    /// How far ahead of the sums each column is asked for, in floats.
    const AHEAD: usize = 512;

    /// The partial sums of [`SIDE`] dot products of `row` with the
    /// columns at `col`, `col + stride`, …, over the whole groups of
    /// [`LANES`] of their `k` floats: lane `l` of each is
    /// `Σ row[p]·col[p]` over `p ≡ l`, each product rounded, then added
    /// in order of `p`, as the loop without vectors does.
    #[target_feature(enable = "avx")]
    pub(super) fn lanes(
        row: *const f32,
        col: *const f32,
        stride: usize,
        k: usize,
    ) -> [[f32; LANES]; SIDE] {
        let mut acc = [_mm256_setzero_ps(); SIDE];
        let mut p = 0;
        while p + LANES <= k {
            if p % LINE == 0 {
                // Each column is a stream of its own, and the hardware's
                // prefetcher stops at every page a column crosses.
                for q in 0..SIDE {
                    let ahead = col.wrapping_add(q * stride + p + AHEAD);
                    // A prefetch never faults, whatever the address.
                    _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                }
            }
            // SAFETY: `p + LANES <= k`; the caller gives `row` readable
            // for `k` floats and `col` for `(SIDE - 1)·stride + k`.
            #[allow(unsafe_code)]
            let x = unsafe { _mm256_loadu_ps(row.add(p)) };
            for (q, acc) in acc.iter_mut().enumerate() {
                // SAFETY: as above, `q·stride + p + LANES` is within.
                #[allow(unsafe_code)]
                let y = unsafe { _mm256_loadu_ps(col.add(q * stride + p)) };
                *acc = _mm256_add_ps(*acc, _mm256_mul_ps(x, y));
            }
            p += LANES;
        }
        let mut out = [[0f32; LANES]; SIDE];
        for (out, acc) in out.iter_mut().zip(acc) {
            // SAFETY: a row of `out` holds LANES = 8 floats, one store.
            #[allow(unsafe_code)]
            unsafe {
                _mm256_storeu_ps(out.as_mut_ptr(), acc)
            };
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::gemm::{Finish, Start};
    use super::super::testing::{below, value};
    use super::*;
    use alloc::vec::Vec;
    use core::cell::Cell;

    fn dst(data: &[Cell<f32>]) -> Dst<'_> {
        Dst {
            data,
            offset: 0,
            rs: 0,
            cs: 1,
            finish: Finish::Keep,
            start: Start::Add,
            residual: None,
        }
    }

    /// Columns side by side (the vector path, where the CPU has it) give
    /// the bits of columns taken one at a time (the loop without
    /// vectors), for weights in the bundle and in the arena, with depths
    /// that do and do not fill whole groups of lanes, and an output that
    /// already holds values.
    #[test]
    fn columns_side_by_side_give_the_bits_of_one_at_a_time() {
        let mut below = below(0x2545_f491_4f6c_dd1d);
        let mut sides = 0;
        for case in 0..200 {
            let (k, n) = (1 + below(300), 1 + below(40));
            let bn = k + below(3);
            let a: Vec<f32> = (0..k).map(|i| value(i, 1 + case) * 3.7).collect();
            let b: Vec<f32> = (0..n * bn).map(|i| value(i, 2 + case) * 1.3).collect();
            let cells: Vec<Cell<f32>> = b.iter().copied().map(Cell::new).collect();
            let start = |j: usize| value(j, 3 + case);
            let run = |together: bool, in_arena: bool| {
                let c: Vec<Cell<f32>> = (0..n).map(|j| Cell::new(start(j))).collect();
                let spans: Vec<core::ops::Range<usize>> = if together {
                    let cut = below_cut(n, case);
                    [0..cut, cut..n].into()
                } else {
                    (0..n).map(|j| j..j + 1).collect()
                };
                for cols in spans {
                    if in_arena {
                        gemv(k, (&a[..], 0, 1), (&cells[..], 0, [1, bn]), &dst(&c), cols);
                    } else {
                        gemv(k, (&a[..], 0, 1), (&b[..], 0, [1, bn]), &dst(&c), cols);
                    }
                }
                c.iter().map(|c| c.get().to_bits()).collect::<Vec<u32>>()
            };
            let one = run(false, false);
            assert_eq!(run(true, false), one, "case {case}: k {k}, n {n}");
            assert_eq!(run(true, true), one, "case {case}: k {k}, n {n}, arena");
            sides += usize::from(n >= SIDE);
            // The sums are the dot products, within rounding.
            for (j, bits) in one.iter().enumerate() {
                let exact: f64 = (0..k)
                    .map(|p| f64::from(a[p]) * f64::from(b[j * bn + p]))
                    .sum::<f64>()
                    + f64::from(start(j));
                let got = f64::from(f32::from_bits(*bits));
                assert!(
                    (got - exact).abs() <= 1e-4 * (1.0 + exact.abs()),
                    "case {case}"
                );
            }
        }
        assert!(sides > 100, "{sides} cases with a whole group of columns");
    }

    /// Where a case splits its columns in two calls: anywhere, so that
    /// groups of [`SIDE`] start at any column.
    fn below_cut(n: usize, case: usize) -> usize {
        (case * 7) % (n + 1)
    }
}

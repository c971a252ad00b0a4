//! Data movement: strided copies (transpose, slice, concat, pad, copies
//! of views the plan did not alias) and gather. Element types are moved
//! as raw bits of their size.

use super::cells::{map_row, Load, Src};
use super::layout::{Share, Walk, MAX_RANK};
use core::cell::Cell;

/// Copies through `walk` (operands: destination, source), adding the base
/// offsets.
pub fn copy<T: Copy>(walk: &Walk<2>, base: [usize; 2], src: impl Load<T>, dst: &[Cell<T>]) {
    copy_share(Share::whole(walk), base, src, dst)
}

/// [`copy`] of a thread's share of the walk's elements.
pub fn copy_share<T: Copy>(
    share: Share<'_, 2>,
    base: [usize; 2],
    src: impl Load<T>,
    dst: &[Cell<T>],
) {
    let (_, [sd, ss]) = share.walk.inner();
    share.rows(base, |[d, s], len| {
        if sd == 1 && ss == 1 {
            map_row(&dst[d..d + len], src.sub(s, len), |x| x);
        } else {
            for j in 0..len {
                dst[d + j * sd].set(src.load(s + j * ss));
            }
        }
    });
}

/// Gather along an axis: `out[o, i, r] = data[o, idx[i], r]` with `data`
/// seen as `outer × axis × inner` and `out` as `outer × indices × inner`.
/// Returns the first index out of range, if any (nothing is written past
/// it).
pub fn gather<T: Copy>(
    outer: usize,
    axis: usize,
    inner: usize,
    data: Src<'_, T>,
    indices: Src<'_, i64>,
    out: &[Cell<T>],
) -> Result<(), i64> {
    let count = indices.len();
    for o in 0..outer {
        for i in 0..count {
            let raw = indices.at(i);
            let idx = if raw < 0 { raw + axis as i64 } else { raw };
            if idx < 0 || idx >= axis as i64 {
                return Err(raw);
            }
            let src = (o * axis + idx as usize) * inner;
            let dst = (o * count + i) * inner;
            for (j, c) in out[dst..dst + inner].iter().enumerate() {
                c.set(data.at(src + j));
            }
        }
    }
    Ok(())
}

/// Pads by reflection (`x[-1] = x[1]`) or by repeating the edge value,
/// with `before[a]` positions added before axis `a`. Shapes were checked
/// at setup: every axis is at least as long as its padding (reflection)
/// or non-empty (edge).
pub fn pad_edges<T: Copy>(
    reflect: bool,
    before: &[usize],
    input: &[usize],
    output: &[usize],
    src: Src<'_, T>,
    dst: &[Cell<T>],
) {
    let rank = output.len();
    if rank == 0 || rank > MAX_RANK || dst.is_empty() {
        if let Some(c) = dst.first() {
            c.set(src.at(0));
        }
        return;
    }
    let source = |a: usize, o: usize| -> usize {
        let n = input[a] as isize;
        let mut c = o as isize - before[a] as isize;
        if reflect {
            if c < 0 {
                c = -c;
            }
            if c >= n {
                c = 2 * (n - 1) - c;
            }
        }
        c.clamp(0, n - 1) as usize
    };
    let mut in_strides = [0usize; MAX_RANK];
    let mut acc = 1;
    for a in (0..rank).rev() {
        in_strides[a] = acc;
        acc *= input[a];
    }
    let mut index = [0usize; MAX_RANK];
    for cell in dst {
        let at: usize = (0..rank).map(|a| source(a, index[a]) * in_strides[a]).sum();
        cell.set(src.at(at));
        for a in (0..rank).rev() {
            index[a] += 1;
            if index[a] < output[a] {
                break;
            }
            index[a] = 0;
        }
    }
}

/// `out[p] = data[p with its `axis` coordinate replaced by indices[p]]`
/// (ONNX GatherElements; negative indices count from the end). Fails with
/// the first index outside the axis.
pub fn gather_elements<T: Copy>(
    data_strides: &[usize],
    shape: &[usize],
    axis: usize,
    size: usize,
    data: Src<'_, T>,
    indices: Src<'_, i64>,
    out: &[Cell<T>],
) -> Result<(), i64> {
    let rank = shape.len().min(MAX_RANK);
    let mut coord = [0usize; MAX_RANK];
    for (p, c) in out.iter().enumerate() {
        let raw = indices.at(p);
        let idx = if raw < 0 { raw + size as i64 } else { raw };
        if idx < 0 || idx >= size as i64 {
            return Err(raw);
        }
        let mut src = 0;
        for d in 0..rank {
            let at = if d == axis { idx as usize } else { coord[d] };
            src += at * data_strides[d];
        }
        c.set(data.at(src));
        // Next coordinate, last axis fastest.
        for d in (0..rank).rev() {
            coord[d] += 1;
            if coord[d] < shape[d] {
                break;
            }
            coord[d] = 0;
        }
    }
    Ok(())
}

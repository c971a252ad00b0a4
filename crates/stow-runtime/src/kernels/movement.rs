//! Data movement: strided copies (transpose, slice, concat, pad, copies
//! of views the plan did not alias) and gather. Element types are moved
//! as raw bits of their size.

use super::cells::Src;
use super::layout::Walk;
use std::cell::Cell;

/// Copies through `walk` (operands: destination, source), adding the base
/// offsets.
pub fn copy<T: Copy>(walk: &Walk<2>, base: [usize; 2], src: Src<'_, T>, dst: &[Cell<T>]) {
    let (len, [sd, ss]) = walk.inner();
    walk.rows(base, |[d, s]| {
        if sd == 1 && ss == 1 {
            for (j, c) in dst[d..d + len].iter().enumerate() {
                c.set(src.at(s + j));
            }
        } else {
            for j in 0..len {
                dst[d + j * sd].set(src.at(s + j * ss));
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

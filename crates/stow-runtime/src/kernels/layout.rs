//! Shapes, strides and the walk over the rows of several strided operands
//! at once, shared by the element-wise and data-movement kernels.

use alloc::{vec, vec::Vec};

/// Highest rank a kernel walks (after merging dimensions).
pub const MAX_RANK: usize = 8;

/// Row-major element strides of `shape`.
pub fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Strides that read a tensor of `shape` broadcast to `out` (aligned on
/// the right; a dimension of 1 against a larger one has stride 0). `None`
/// when the shapes do not broadcast.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Option<Vec<usize>> {
    if shape.len() > out.len() {
        return None;
    }
    let own = strides_of(shape);
    let lead = out.len() - shape.len();
    let mut s = vec![0; out.len()];
    for (i, &d) in out.iter().enumerate().skip(lead) {
        let src = shape[i - lead];
        if src == d {
            s[i] = own[i - lead];
        } else if src != 1 {
            return None;
        }
    }
    Some(s)
}

/// Dimensions and per-operand strides with size-1 dimensions dropped and
/// neighbours merged where every operand allows it, so that the innermost
/// loop is as long as possible.
#[derive(Clone, Debug, PartialEq)]
pub struct Walk<const K: usize> {
    /// Dimensions (at least one, at most [`MAX_RANK`]).
    pub dims: Vec<usize>,
    /// Strides per dimension, one per operand.
    pub strides: Vec<[usize; K]>,
}

impl<const K: usize> Walk<K> {
    /// Merges `dims` with the operands' `strides`. `None` above
    /// [`MAX_RANK`] dimensions after merging.
    pub fn new(dims: &[usize], strides: [&[usize]; K]) -> Option<Walk<K>> {
        let mut out_dims: Vec<usize> = Vec::new();
        let mut out_strides: Vec<[usize; K]> = Vec::new();
        for (i, &d) in dims.iter().enumerate() {
            if d == 1 {
                continue;
            }
            let s: [usize; K] = core::array::from_fn(|k| strides[k][i]);
            if let (Some(ld), Some(ls)) = (out_dims.last_mut(), out_strides.last_mut()) {
                if (0..K).all(|k| ls[k] == s[k] * d) {
                    *ld *= d;
                    *ls = s;
                    continue;
                }
            }
            out_dims.push(d);
            out_strides.push(s);
        }
        if dims.contains(&0) {
            out_dims = vec![0];
            out_strides = vec![[0; K]];
        }
        if out_dims.is_empty() {
            out_dims.push(1);
            out_strides.push([0; K]);
        }
        (out_dims.len() <= MAX_RANK).then_some(Walk {
            dims: out_dims,
            strides: out_strides,
        })
    }

    /// Length and per-operand stride of the innermost dimension.
    pub fn inner(&self) -> (usize, [usize; K]) {
        let last = self.dims.len() - 1;
        (self.dims[last], self.strides[last])
    }

    /// Calls `f` with each operand's offset of the first element of every
    /// innermost row (offsets are added to `base`).
    #[inline]
    pub fn rows(&self, base: [usize; K], f: impl FnMut([usize; K])) {
        self.rows_from(base, 0, usize::MAX, f)
    }

    /// Innermost rows: the product of every dimension but the last.
    pub fn row_count(&self) -> usize {
        self.dims[..self.dims.len() - 1].iter().product()
    }

    /// [`Walk::rows`] from row `first` (in the order `rows` visits them),
    /// at most `count` rows.
    #[inline]
    fn rows_from(
        &self,
        base: [usize; K],
        first: usize,
        mut count: usize,
        mut f: impl FnMut([usize; K]),
    ) {
        let outer = self.dims.len() - 1;
        if self.dims.contains(&0) || count == 0 {
            return;
        }
        let mut index = [0usize; MAX_RANK];
        let mut offs = base;
        // The row's index along each outer axis, the last fastest.
        let mut rest = first;
        for axis in (0..outer).rev() {
            index[axis] = rest % self.dims[axis];
            rest /= self.dims[axis];
            for (k, o) in offs.iter_mut().enumerate() {
                *o += index[axis] * self.strides[axis][k];
            }
        }
        if rest != 0 {
            return;
        }
        loop {
            f(offs);
            count -= 1;
            if count == 0 {
                return;
            }
            let mut axis = outer;
            loop {
                if axis == 0 {
                    return;
                }
                axis -= 1;
                index[axis] += 1;
                for (k, o) in offs.iter_mut().enumerate() {
                    *o += self.strides[axis][k];
                }
                if index[axis] < self.dims[axis] {
                    break;
                }
                for (k, o) in offs.iter_mut().enumerate() {
                    *o -= self.strides[axis][k] * self.dims[axis];
                }
                index[axis] = 0;
            }
        }
    }
}

/// Elements `start..end` of `n` that share `part` of `parts` takes: equal
/// runs, cut at multiples of 64 elements, so that no two threads write
/// into one cache line of a 64-aligned tensor, and a row cut in pieces is
/// chunked by the vector loops as it was whole.
pub fn span(n: usize, part: usize, parts: usize) -> core::ops::Range<usize> {
    let per = n.div_ceil(parts.max(1)).div_ceil(64) * 64;
    (part * per).min(n)..((part + 1) * per).min(n)
}

/// A walk restricted to share `part` of `parts` of its elements (a thread's
/// share of an element-wise step).
#[derive(Clone, Copy)]
pub struct Share<'w, const K: usize> {
    /// The whole walk.
    pub walk: &'w Walk<K>,
    /// This share.
    pub part: usize,
    /// Shares.
    pub parts: usize,
    /// Elements of one plane of the output (its dimensions after the
    /// second), or 0. Where the walk is one contiguous row of whole planes,
    /// each share takes the same [`span`] of every plane instead of one
    /// span of the row: the part of each plane a product split between
    /// threads by output columns (pixels) left in that thread's cache.
    /// Split by halves of the row, each thread read half its operands
    /// from the other core (a residual add of resnet50 int8 ran 0.67
    /// times as fast on two threads as on one).
    pub plane: usize,
}

impl<'w, const K: usize> Share<'w, K> {
    /// All of `walk`.
    pub fn whole(walk: &'w Walk<K>) -> Share<'w, K> {
        Share {
            walk,
            part: 0,
            parts: 1,
            plane: 0,
        }
    }

    /// Calls `f(offsets, len)` for every piece of an innermost row in
    /// this share: `offsets` those of the piece's first element (as
    /// [`Walk::rows`] gives a row's, plus `base`), `len` its elements,
    /// which lie the walk's innermost strides apart. Whole rows are shared
    /// out when there are at least as many rows as shares; otherwise each
    /// row is cut into [`span`]s (or, with [`Share::plane`], each plane of
    /// the one row). The shares of `0..parts` cover every element once.
    #[inline]
    pub fn rows(&self, base: [usize; K], mut f: impl FnMut([usize; K], usize)) {
        let (len, strides) = self.walk.inner();
        let rows = self.walk.row_count();
        let by_planes = self.plane >= 64 * self.parts
            && self.walk.dims.len() == 1
            && len.is_multiple_of(self.plane)
            && strides == [1; K];
        let mut piece = |o: [usize; K], cols: core::ops::Range<usize>| {
            if !cols.is_empty() {
                f(
                    core::array::from_fn(|k| o[k] + cols.start * strides[k]),
                    cols.len(),
                );
            }
        };
        if self.parts <= 1 {
            self.walk.rows(base, |o| piece(o, 0..len));
        } else if by_planes {
            let cols = span(self.plane, self.part, self.parts);
            for at in (0..len).step_by(self.plane) {
                piece(base, at + cols.start..at + cols.end);
            }
        } else if rows >= self.parts {
            let r = span_rows(rows, self.part, self.parts);
            self.walk
                .rows_from(base, r.start, r.len(), |o| piece(o, 0..len));
        } else {
            let cols = span(len, self.part, self.parts);
            self.walk.rows(base, |o| piece(o, cols.clone()));
        }
    }
}

/// Rows `start..end` of `rows` for share `part` of `parts`.
pub(crate) fn span_rows(rows: usize, part: usize, parts: usize) -> core::ops::Range<usize> {
    let per = rows.div_ceil(parts.max(1));
    (part * per).min(rows)..((part + 1) * per).min(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_visit_every_element_once_in_order() {
        let dims = [2, 1, 3, 4];
        let out = strides_of(&dims);
        // Transposed input: the walk cannot merge everything.
        let input = [1, 0, 8, 2];
        let w = Walk::new(&dims, [&out, &input]).unwrap();
        let mut seen = Vec::new();
        let (len, inner) = w.inner();
        w.rows([0, 0], |[o, i]| {
            for j in 0..len {
                seen.push((o + j * inner[0], i + j * inner[1]));
            }
        });
        let want: Vec<(usize, usize)> = (0..24)
            .map(|e| {
                let (a, b, c) = (e / 12, (e / 4) % 3, e % 4);
                (e, a + b * 8 + c * 2)
            })
            .collect();
        assert_eq!(seen, want);
        assert!(w.dims.len() < dims.len());
    }

    /// Every element once over the shares, for whole rows, cut rows and
    /// planes; by planes, each share takes the same span of every plane.
    #[test]
    fn shares_cover_every_element_once() {
        for (dims, plane) in [
            (&[4usize, 3136][..], 3136),
            (&[7, 49][..], 49),
            (&[2, 5, 130][..], 0),
            (&[1000][..], 200),
            (&[3, 300][..], 301),
        ] {
            let flat = strides_of(dims);
            let w = Walk::new(dims, [&flat[..]]).unwrap();
            let (_, [inner]) = w.inner();
            let total: usize = dims.iter().product();
            for parts in 1..=3 {
                let mut seen = vec![0u8; total];
                let mut firsts = Vec::new();
                for part in 0..parts {
                    let share = Share {
                        walk: &w,
                        part,
                        parts,
                        plane,
                    };
                    let mut mine = Vec::new();
                    share.rows([0], |[o], len| {
                        for j in 0..len {
                            seen[o + j * inner] += 1;
                            mine.push(o + j * inner);
                        }
                    });
                    firsts.push(mine);
                }
                assert!(
                    seen.iter().all(|&n| n == 1),
                    "{dims:?} plane {plane} parts {parts}"
                );
                if plane >= 64 * parts && total.is_multiple_of(plane) && parts > 1 {
                    for (part, mine) in firsts.iter().enumerate() {
                        let span = span(plane, part, parts);
                        assert!(mine.iter().all(|e| span.contains(&(e % plane))));
                    }
                }
            }
        }
    }

    #[test]
    fn broadcast_strides_zero_the_repeated_dimensions() {
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), Some(vec![0, 1, 0]));
        assert_eq!(broadcast_strides(&[2, 4], &[2, 3, 4]), None);
    }
}

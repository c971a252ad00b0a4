//! The rows' side of [`super::product`]: where a tile reads its rows'
//! quads (packed into scratch, read in place, two groups as one), and
//! each group's preparation for a block of panels (its sums over the
//! depth, taken once and kept).

use super::{Isa, Operands, KEPT_ROWS, MR};
use crate::kernels::cells::Load;
use core::cell::Cell;

/// Where a tile reads its rows' quads.
pub(super) trait RowQuads {
    /// Quad `q` of row `r`.
    fn quad(&self, q: usize, r: usize) -> u32;
    /// Quads of each row [`RowQuads::quad_unchecked`] may read.
    #[inline(always)]
    fn quads(&self) -> usize {
        usize::MAX
    }
    /// Rows [`RowQuads::quad_unchecked`] may read.
    #[inline(always)]
    fn count(&self) -> usize {
        usize::MAX
    }
    /// [`RowQuads::quad`] without its check, for the kernels' loops,
    /// which bound `q` and `r` once up front.
    ///
    /// # Safety
    /// `q < self.quads()` and `r < self.count()`.
    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn quad_unchecked(&self, q: usize, r: usize) -> u32 {
        self.quad(q, r)
    }
}

/// Rows packed into scratch (module doc).
pub(super) struct Packed<'a>(pub(super) &'a [Cell<u32>]);

impl RowQuads for Packed<'_> {
    #[inline(always)]
    fn quad(&self, q: usize, r: usize) -> u32 {
        self.0[q * MR + r].get()
    }
}

/// Rows read in place ([`Operands::direct_rows`]).
#[derive(Clone, Copy)]
pub(super) struct Direct<L>(pub(super) [L; MR]);

impl<L: Load<u8>> Direct<L> {
    /// The rows as addresses for the kernels' loops over `nq` quads:
    /// one register each rather than two (a slice's address and length,
    /// which left eight rows' pointers spilled to the stack), and no
    /// bounds check per quad. `None` if a row is shorter than `nq` quads.
    #[inline(always)]
    pub(super) fn at(&self, nq: usize) -> Option<DirectAt> {
        let whole = nq > 0 && self.0.iter().all(|r| r.count() >= 4 * nq);
        whole.then(|| DirectAt {
            at: self.0.map(|r| r.ptr()),
            last: nq - 1,
        })
    }
}

/// [`Direct`] rows by address: row `r` holds at least `last + 1` quads
/// from `at[r]` (all readable, none written while a kernel reads them,
/// as [`Load::ptr`] promises).
#[derive(Clone, Copy)]
pub(super) struct DirectAt {
    at: [*const u8; MR],
    last: usize,
}

impl RowQuads for DirectAt {
    #[inline(always)]
    fn quad(&self, q: usize, r: usize) -> u32 {
        debug_assert!(q <= self.last, "quad past a row read in place");
        // A select rather than a branch: the kernels never ask past
        // `last`, and the clamp keeps the read inside the row if they did.
        // SAFETY: clamped to `last`; `self.at` holds MR rows (the index
        // is checked).
        #[allow(unsafe_code)]
        unsafe {
            self.read(q.min(self.last), self.at[r])
        }
    }

    #[inline(always)]
    fn quads(&self) -> usize {
        self.last + 1
    }

    #[inline(always)]
    fn count(&self) -> usize {
        MR
    }

    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn quad_unchecked(&self, q: usize, r: usize) -> u32 {
        // SAFETY: `q <= last` and `r < MR` (the caller's promise).
        unsafe { self.read(q, *self.at.get_unchecked(r)) }
    }
}

impl DirectAt {
    /// Row `r`'s address, readable for `4·quads()` bytes.
    #[inline(always)]
    pub(super) fn row(&self, r: usize) -> *const u8 {
        self.at[r]
    }

    /// Quad `q` of the row at `row`.
    ///
    /// # Safety
    /// `q <= self.last` and `row` one of `self.at`.
    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn read(&self, q: usize, row: *const u8) -> u32 {
        // SAFETY: bytes `4q..4q + 4` of the row are inside its readable
        // bytes (`4q + 4 <= 4·(last + 1)`, checked by `Direct::at`); the
        // read is unaligned.
        let v = unsafe { row.add(4 * q).cast::<u32>().read_unaligned() };
        u32::from_le(v)
    }
}

/// The sum of a row read in place, each byte as the kernel reads it. It
/// is taken again for every block of panels, so it runs sixteen bytes at
/// a time (sixteen i32 partial sums, which the compiler vectorises): an
/// i8 byte `v` counts as `(v ^ 0x80) − 128`, exact modulo 2³².
///
/// With AVX2 the bytes are summed 32 at a time by `vpsadbw`: compiled for
/// the baseline, the loop below (taken outside the vector kernels) was
/// 5 % of an int8 resnet50's run.
#[inline(always)]
pub(super) fn row_sum<L: Load<u8>>(isa: Isa, row: L, k: usize, unsigned: bool) -> i32 {
    const W: usize = 16;
    let row = row.sub(0, k);
    let flip = if unsigned { 0 } else { 0x80 };
    #[cfg(target_arch = "x86_64")]
    if matches!(isa, Isa::Vnni | Isa::Avx2) {
        // SAFETY: both ISAs have AVX2 (`Isa::detect`), and `row` holds
        // `k` bytes.
        #[allow(unsafe_code)]
        let sum = unsafe { super::x86::byte_sum(row.ptr(), k, flip) };
        // Exact: at most 255·k.
        let sum = sum as i32;
        return if unsigned {
            sum
        } else {
            sum.wrapping_sub(128i32.wrapping_mul(k as i32))
        };
    }
    let _ = isa;
    let mut part = [0i32; W];
    let whole = k - k % W;
    for c in (0..whole).step_by(W) {
        let chunk = row.sub(c, W);
        for (p, i) in part.iter_mut().zip(0..W) {
            *p = p.wrapping_add(i32::from(chunk.load(i) ^ flip));
        }
    }
    let tail = (whole..k).fold(0i32, |s, i| s.wrapping_add(i32::from(row.load(i) ^ flip)));
    let sum = part.iter().fold(tail, |s, &p| s.wrapping_add(p));
    if unsigned {
        sum
    } else {
        sum.wrapping_sub(128i32.wrapping_mul(k as i32))
    }
}

/// One group of [`MR`] rows as a block's tiles read them: in place or
/// from `buf` (packed), and each row's sum over the depth.
#[derive(Clone, Copy)]
pub(super) struct RowsOf<'a> {
    pub(super) direct: Option<DirectAt>,
    pub(super) buf: &'a [Cell<u32>],
    pub(super) sums: [i32; MR],
}

/// Rows `i0..i0 + MR` of `ops` for a block: read in place where they can
/// be, else packed into their group of `kept_rows` (in the first block
/// only) or into `scratch_rows`; their sums taken in the first block and
/// kept in `kept` for the others where the rows are few enough.
pub(super) fn rows_of<'a, O: Operands>(
    isa: Isa,
    ops: &'a O,
    i0: usize,
    first_block: bool,
    kept_rows: Option<&'a [Cell<u32>]>,
    scratch_rows: &'a [Cell<u32>],
    kept: &mut [i32; KEPT_ROWS],
) -> RowsOf<'a> {
    let k = ops.depth();
    let nq = k.div_ceil(4);
    let keep = ops.rows() <= KEPT_ROWS;
    // Rows too short for their addresses (none the operands give) are
    // packed instead.
    let direct = ops
        .direct_rows(i0)
        .map(Direct)
        .filter(|d| d.at(nq).is_some());
    let buf = match kept_rows {
        Some(kept) if direct.is_none() => &kept[i0 * nq..(i0 + MR) * nq],
        _ => scratch_rows,
    };
    let sums = match &direct {
        Some(_) if !ops.row_sums_used() => [0; MR],
        Some(_) if keep && !first_block => core::array::from_fn(|r| kept[i0 + r]),
        Some(d) => {
            let sums = ops
                .direct_row_sums(i0)
                .unwrap_or_else(|| d.0.map(|r| row_sum(isa, r, k, !O::LANES_UNSIGNED)));
            if keep {
                kept[i0..i0 + MR].copy_from_slice(&sums);
            }
            sums
        }
        None if kept_rows.is_some() && !first_block => core::array::from_fn(|r| kept[i0 + r]),
        None => {
            let sums = ops.pack_rows(i0, buf);
            if kept_rows.is_some() {
                kept[i0..i0 + MR].copy_from_slice(&sums);
            }
            sums
        }
    };
    RowsOf {
        direct: direct.and_then(|d| d.at(nq)),
        buf,
        sums,
    }
}

/// `M` rows read in place that lie `stride` bytes apart (a convolution's
/// kernel rows, `K` bytes apart), each holding `quads` quads from its
/// start: row `r` at `base + r·stride`. The kernels' loops keep one
/// address and the stride in registers where eight rows' addresses
/// ([`DirectAt`], two groups) were reloaded from the stack every quad
/// and each read clamped to the row.
#[derive(Clone, Copy)]
pub(super) struct Strided<const M: usize> {
    base: *const u8,
    stride: isize,
    quads: usize,
}

impl<const M: usize> Strided<M> {
    /// The rows of `groups` (each [`MR`] rows, `M` in all) if they lie
    /// equally far apart, one group after the other.
    #[inline(always)]
    pub(super) fn of(groups: &[&DirectAt]) -> Option<Strided<M>> {
        let first = groups.first()?;
        if groups.len() * MR != M || groups.iter().any(|g| g.last != first.last) {
            return None;
        }
        let at = |r: usize| groups[r / MR].at[r % MR] as isize;
        let stride = at(1).wrapping_sub(at(0));
        let even = (1..M).all(|r| at(r) == at(0).wrapping_add(stride.wrapping_mul(r as isize)));
        even.then_some(Strided {
            base: first.at[0],
            stride,
            quads: first.last + 1,
        })
    }
}

impl<const M: usize> RowQuads for Strided<M> {
    #[inline(always)]
    fn quad(&self, q: usize, r: usize) -> u32 {
        assert!(q < self.quads && r < M, "quad past rows read in place");
        // SAFETY: just checked.
        #[allow(unsafe_code)]
        unsafe {
            self.quad_unchecked(q, r)
        }
    }

    #[inline(always)]
    fn quads(&self) -> usize {
        self.quads
    }

    #[inline(always)]
    fn count(&self) -> usize {
        M
    }

    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn quad_unchecked(&self, q: usize, r: usize) -> u32 {
        // SAFETY: row `r < M` is one of the groups' rows (`Strided::of`
        // checked each lies at `base + r·stride`), readable for
        // `4·quads` bytes (`Direct::at`), and `q < quads`.
        let v = unsafe {
            self.base
                .wrapping_offset(self.stride.wrapping_mul(r as isize))
                .add(4 * q)
                .cast::<u32>()
                .read_unaligned()
        };
        u32::from_le(v)
    }
}

/// Two groups of rows read as one of `2·MR` rows.
pub(super) struct Two<'a, A, B>(pub(super) &'a A, pub(super) &'a B);

impl<A: RowQuads, B: RowQuads> RowQuads for Two<'_, A, B> {
    #[inline(always)]
    fn quad(&self, q: usize, r: usize) -> u32 {
        if r < MR {
            self.0.quad(q, r)
        } else {
            self.1.quad(q, r - MR)
        }
    }

    #[inline(always)]
    fn quads(&self) -> usize {
        self.0.quads().min(self.1.quads())
    }

    #[inline(always)]
    fn count(&self) -> usize {
        match self.0.count() {
            n if n < MR => n,
            _ => MR.saturating_add(self.1.count()),
        }
    }

    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn quad_unchecked(&self, q: usize, r: usize) -> u32 {
        // SAFETY: `q` is below both groups' quads, and `r` below the
        // first's rows or `r − MR` below the second's (`count`).
        unsafe {
            if r < MR {
                self.0.quad_unchecked(q, r)
            } else {
                self.1.quad_unchecked(q, r - MR)
            }
        }
    }
}

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
        let i = 4 * q.min(self.last);
        // SAFETY: bytes `i..i + 4` of row `r` are inside its readable
        // bytes (`i + 4 <= 4·(last + 1)`, checked by `Direct::at`); the
        // read is unaligned.
        #[allow(unsafe_code)]
        let v = unsafe { self.at[r].add(i).cast::<u32>().read_unaligned() };
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
            let sums = d.0.map(|r| row_sum(isa, r, k, !O::LANES_UNSIGNED));
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
}

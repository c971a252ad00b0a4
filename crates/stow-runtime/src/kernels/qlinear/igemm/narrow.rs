//! The last panel of a product when it holds only a few lanes: resnet50's
//! 7×7 stage has 49 output positions, three full panels and one of a
//! single lane, which the panel kernels compute at the cost of sixteen
//! (a fifth of the stage's products on lanes past the product).
//!
//! Here each lane's depth is taken out of the panel once per block into
//! a column of contiguous quads, and a row read in place is multiplied
//! by a column 64 bytes per `vpdpbusd` (sixteen partial sums, added up at
//! the end): one instruction per sixteen quads of a lane and row, where
//! the panel kernels spend one per quad on all sixteen lanes. The sums
//! are the same modulo 2³² (only their order differs), and the tile goes
//! to the epilogue's tile path like any other.

use super::rows::{DirectAt, RowQuads, RowsOf};
use super::{Done, Epilogue, Tile, MR, NR};
use core::cell::Cell;

/// Lanes up to which the product's last panel goes through [`tile_vnni`].
pub(super) const LANES: usize = 4;

/// Quads of depth up to which the columns fit their stack buffer (18 KiB;
/// resnet50's deepest product is 1,152).
pub(super) const QUADS: usize = 1152;

/// The lanes of one panel, lane `l`'s quad `q` at `quads[l·nq + q]`.
pub(super) struct Columns {
    quads: [u32; LANES * QUADS],
    nq: usize,
    lanes: usize,
}

impl Columns {
    pub(super) fn new() -> Columns {
        Columns {
            quads: [0; LANES * QUADS],
            nq: 0,
            lanes: 0,
        }
    }

    /// Takes lanes `0..lanes` of `panel` (`nq·NR` quads); false (and
    /// nothing taken) where they do not fit.
    pub(super) fn take(&mut self, panel: &[Cell<u32>], nq: usize, lanes: usize) -> bool {
        if lanes == 0 || lanes > LANES || nq > QUADS || panel.len() < nq * NR {
            return false;
        }
        for (l, col) in self.quads.chunks_exact_mut(nq).take(lanes).enumerate() {
            for (q, c) in col.iter_mut().enumerate() {
                *c = panel[q * NR + l].get();
            }
        }
        (self.nq, self.lanes) = (nq, lanes);
        true
    }
}

/// The tile of the rows `rows` (read in place, at least `cols`' depth)
/// and the columns `cols`: lanes past them 0. With `LANES_UNSIGNED` the
/// columns' bytes are u8 and the rows' i8, else the other way round. The
/// caller guarantees AVX-512 F, BW and VNNI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) fn tile_vnni<const LANES_UNSIGNED: bool>(cols: &Columns, rows: &DirectAt) -> Tile {
    use core::arch::x86_64::*;
    let mut out = [[0i32; NR]; MR];
    let nq = cols.nq.min(rows.quads());
    let k = 4 * nq;
    let at: [*const u8; MR] = core::array::from_fn(|r| rows.row(r));
    for (l, col) in cols
        .quads
        .chunks_exact(cols.nq.max(1))
        .take(cols.lanes)
        .enumerate()
    {
        let x = col.as_ptr().cast::<u8>();
        let mut acc = [_mm512_setzero_si512(); MR];
        let mut i = 0;
        while i < k {
            let n = (k - i).min(64);
            let mask: __mmask64 = if n == 64 { !0 } else { (1u64 << n) - 1 };
            // SAFETY: bytes `i..i + n` lie in the column (`k <= 4·nq`
            // bytes of `col`) and in each row (readable for `4·quads`
            // bytes, `DirectAt`); masked-off bytes are not read.
            #[allow(unsafe_code)]
            let c = unsafe { _mm512_maskz_loadu_epi8(mask, x.add(i).cast()) };
            for (a, &w) in acc.iter_mut().zip(&at) {
                // SAFETY: as above.
                #[allow(unsafe_code)]
                let w = unsafe { _mm512_maskz_loadu_epi8(mask, w.add(i).cast()) };
                // vpdpbusd multiplies its first operand's bytes as u8 and
                // its second's as i8.
                *a = if LANES_UNSIGNED {
                    _mm512_dpbusd_epi32(*a, c, w)
                } else {
                    _mm512_dpbusd_epi32(*a, w, c)
                };
            }
            i += 64;
        }
        for (o, a) in out.iter_mut().zip(acc) {
            o[l] = _mm512_reduce_add_epi32(a);
        }
    }
    out
}

/// The tile of the rows `r` (from `i0`, read in place) and the narrow
/// panel of lanes `j0..` taken as `cols`, handed to `emit` as any tile;
/// only with [`super::Isa::Vnni`].
pub(super) fn tile<'o>(
    lanes_unsigned: bool,
    cols: &Columns,
    r: &RowsOf<'_>,
    i0: usize,
    j0: usize,
    lane_sums: &[i32; NR],
    emit: &mut impl Epilogue<'o>,
) {
    let Some(d) = &r.direct else {
        debug_assert!(false, "narrow panel of rows not read in place");
        return;
    };
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `blocks` takes columns only with `Isa::Vnni`, chosen
        // where the CPU has AVX-512 F, BW and VNNI (`Isa::detect`).
        #[allow(unsafe_code)]
        let raw = unsafe {
            if lanes_unsigned {
                tile_vnni::<true>(cols, d)
            } else {
                tile_vnni::<false>(cols, d)
            }
        };
        emit.tile(Done {
            i0,
            j0,
            raw: &raw,
            lane_sums,
            row_sums: &r.sums,
        });
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (lanes_unsigned, cols, d, i0, j0, lane_sums, emit);
        debug_assert!(false, "narrow panel without VNNI");
    }
}

//! Tiles requantised where their sums are: with VNNI, the `MR` rows of
//! `N` panels leave [`super::x86::sums_vnni`] as registers and become
//! output bytes at once ([`crate::kernels::qlinear::epilogue`]'s
//! arithmetic, [`Consts::narrow`]), instead of being stored as an i32 tile
//! that the epilogue reads again. Each row's constants are broadcast once
//! for its `N` tiles rather than once per tile. The bytes are the
//! epilogue's: the same function computes them.
//!
//! The caller of [`super::product`] says which groups of rows may be
//! treated so ([`Epilogue::rows`]); the others, and every other
//! instruction set, hand their tiles to [`Epilogue::tile`].

use super::{Done, PanelQuads, RowQuads, MR, NR};
use crate::kernels::qlinear::epilogue::Line;
use core::cell::Cell;

/// What [`super::product`] does with its tiles.
pub(in crate::kernels::qlinear) trait Epilogue<'o> {
    /// Whether rows `i0..i0 + MR` (their sums over the depth
    /// `row_sums`) are requantised by the kernel, as `to` then says (see
    /// [`Rows`]). Asked once per group of rows and block of panels, and
    /// only with VNNI. Written in place: returned by value, the 152 bytes
    /// were moved by `memcpy` calls three times a group (3 % of an int8
    /// resnet50's run).
    fn rows(&mut self, _i0: usize, _row_sums: &[i32; MR], _to: &mut Rows<'o>) -> bool {
        false
    }
    /// A tile of raw sums, for the rows [`Epilogue::rows`] declined.
    fn tile(&mut self, d: Done<'_>);
}

impl<F: FnMut(Done<'_>)> Epilogue<'_> for F {
    fn tile(&mut self, d: Done<'_>) {
        self(d)
    }
}

/// A group of rows the kernel requantises: row `r < count` of lane `j`
/// goes to `out[lines[r].0 + j]` by `lines[r].1` (the lanes' sums as the
/// [`Line`]'s lane sums).
#[derive(Clone, Copy)]
pub(in crate::kernels::qlinear) struct Rows<'o> {
    /// The output's bytes (u8 or i8 alike).
    pub out: &'o [Cell<u8>],
    /// Each row's offset of lane 0 and line.
    pub lines: [(usize, Line); MR],
    /// Rows of the group inside the product.
    pub count: usize,
}

impl Rows<'_> {
    /// No rows, before [`Epilogue::rows`] writes some.
    pub const EMPTY: Rows<'static> = Rows {
        out: &[],
        lines: [(0, Line::ZERO); MR],
        count: 0,
    };

    /// Whether the kernel can write these rows' `lanes` lanes: every
    /// zero point within its range (so no saturation after adding it,
    /// as [`Consts::narrow`] assumes) and every row inside `out`.
    pub(super) fn usable(&self, lanes: usize) -> bool {
        self.count <= MR
            && self.lines[..self.count].iter().all(|(o, l)| {
                (l.range.0..=l.range.1).contains(&l.zero)
                    && o.checked_add(lanes).is_some_and(|e| e <= self.out.len())
            })
    }
}

/// One panel of a group: its first lane, its lanes inside the product
/// (1 to [`NR`]) and their sums over the depth.
#[derive(Clone, Copy)]
pub(super) struct Lanes<'a> {
    pub j0: usize,
    pub lanes: usize,
    pub sums: &'a [i32; NR],
}

/// The tiles of `N` panels (`panels[t]` holds `nq·NR` quads) against the
/// `M` rows `rows` (`to.len()` groups of [`MR`]: group `g`'s row `r` is
/// `rows.quad(_, g·MR + r)`), requantised into `to` ([`Rows::usable`]
/// for the product's lanes). The caller guarantees AVX-512 F, BW and
/// VNNI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) fn tiles_vnni<
    const LANES_UNSIGNED: bool,
    const N: usize,
    const M: usize,
    P: PanelQuads,
    R: RowQuads,
>(
    panels: [P; N],
    rows: &R,
    nq: usize,
    lanes: [Lanes<'_>; N],
    to: &[Rows<'_>],
    ahead: super::Ahead,
) {
    use crate::kernels::qlinear::epilogue::x86::Consts;
    use core::arch::x86_64::*;
    debug_assert_eq!(to.len() * MR, M, "rows of the tile and groups disagree");
    let panels = panels.map(|p| p.first(nq * NR));
    let acc = super::x86::sums_vnni::<LANES_UNSIGNED, N, M, P, R>(panels, rows, nq, ahead);
    for (g, to) in to.iter().enumerate() {
        for (r, (o, line)) in to.lines.iter().enumerate().take(to.count) {
            let k = Consts::of(line);
            for (t, l) in lanes.iter().enumerate() {
                let Some(&a) = acc[t].get(g * MR + r) else {
                    debug_assert!(false, "group past the tile's rows");
                    continue;
                };
                let n = l.lanes.min(NR);
                let mask: __mmask16 = if n == NR { !0 } else { (1u16 << n) - 1 };
                // A zero multiplier (symmetric weights) adds nothing: the
                // lane sums are not read, as in the epilogue.
                // SAFETY: `sums` holds NR = 16 i32, the 64 bytes one load
                // reads.
                #[allow(unsafe_code)]
                let s =
                    (line.m != 0).then(|| unsafe { _mm512_loadu_si512(l.sums.as_ptr().cast()) });
                let y = k.narrow(a, s);
                let start = o + l.j0;
                // Inside `out` ([`Rows::usable`]); checked again rather
                // than trusted, a store out of bounds being unsound.
                let Some(d) = to.out.get(start..start + n) else {
                    debug_assert!(false, "fused row outside the output");
                    continue;
                };
                // SAFETY: the masked store writes the first `n` bytes from
                // `d`'s start, all inside `d`; the output's cells are only
                // accessed by this thread while its tiles are written.
                #[allow(unsafe_code)]
                unsafe {
                    _mm512_mask_cvtepi32_storeu_epi8(d.as_ptr() as *mut i8, mask, y)
                };
            }
        }
    }
}

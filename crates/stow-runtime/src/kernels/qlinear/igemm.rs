//! Integer products for the quantized convolutions and products: i32 sums
//! of u8 × i8 products, four depths at a time, over packed panels.
//!
//! A product here is `raw[i][j] = Σ_k a·b` over the *stored* bytes, one
//! operand read as u8 and the other as i8. Every operand pair reduces to
//! that: an i8 `a` is stored as `a ^ 0x80` (that is `a + 128` as u8) with
//! its zero point raised by 128, a u8 `b` as `b ^ 0x80` (`b − 128` as i8)
//! with its zero point lowered by 128, which leaves every `a − a0` and
//! `b − b0` unchanged. The zero points then come back as
//!
//! ```text
//! Σ (a − a0)(b − b0) = raw − b0·Σa − a0·Σb + K·a0·b0
//! ```
//!
//! with `Σa`, `Σb` each operand's sums over the depth, which the packers
//! return. Every sum is taken modulo 2³² (i32 wrapping), like the
//! reference loops' accumulator, so the result is the reference's bit for
//! bit whatever the values, overflow included.
//!
//! One operand is packed into *panels* of [`NR`] lanes (output columns):
//! quad `q` (depths `4q..4q + 4`, one byte each) of lane `l` at
//! `panel[q·NR + l]`. The other gives [`MR`] rows at a time, quad `q` of
//! row `r` at `rows[q·MR + r]`. Depths past `K` and lanes or rows past the
//! product are zero bytes, which add nothing. A tile of `MR × NR` sums is
//! then computed by one of three kernels of the same contract:
//!
//! - [`Isa::Vnni`] (AVX-512 VNNI): one `vpdpbusd` per row and quad, sixteen
//!   lanes wide, which multiplies u8 by i8 and adds groups of four into i32
//!   lanes without saturation;
//! - [`Isa::Avx2`]: bytes widened to i16 (exact) and `vpmaddwd`, whose
//!   pairs of i16 products fit i32 (at most 2·255·128), then pairs of i32
//!   added; never `vpmaddubsw`, whose i16 sums saturate;
//! - [`Isa::Portable`]: the same sums in plain Rust.
//!
//! Where the rows' operand already holds each row's depth contiguously as
//! the kernel reads it (no byte to flip, `K` a multiple of four, a whole
//! group of [`MR`] rows), the kernels read its quads in place
//! ([`Operands::direct_rows`]) and only its sums are computed: packing it
//! again for every block of panels cost as much as the products.
//!
//! The packing buffers are the step's scratch (planned into the arena by
//! the compiler, [`scratch_quads`]); a 4-byte quad is stored in a scratch
//! float's bits.

use crate::kernels::cells::Load;
use core::cell::Cell;
use core::ops::Range;

mod fused;
pub(super) mod lines;
mod narrow;
mod portable;
mod rows;
pub(super) use fused::{Epilogue, Rows};
use narrow::Columns;
use portable::tile_portable;
use rows::{rows_of, Packed, RowQuads, RowsOf, Strided, Two};

/// Lanes of a panel: output columns a tile computes together (one
/// AVX-512 register of i32).
pub const NR: usize = 16;
/// Rows of a tile.
pub const MR: usize = 4;
/// Most panels packed per block: each row quad read is used this many
/// times ([`block_panels`] of the depth).
pub const NB: usize = 32;

/// Panels per block for depth `k`: 8, or for shallow products as many as
/// fill 8 KiB (up to [`NB`]), so that the work done once per block and
/// group of rows (row sums, lines, pairing) is shared by more tiles. A
/// 16-deep product over 12,544 lanes ran 8 % faster with 32 panels than
/// with 8.
pub fn block_panels(k: usize) -> usize {
    const BYTES: usize = 8192;
    let panel = k.div_ceil(4).max(1) * NR * 4;
    (BYTES / panel).clamp(8, NB)
}

/// Panels per block for depth `k` when the rows are read in place or
/// kept packed, so that a block costs nothing to walk again: as many as
/// fill 32 KiB, at least three (one pass). Each group of rows then
/// reads the block from L1; a block of eight 768-deep panels (96 KiB)
/// came from L2 for every group of four rows, and bert_base's int8
/// products waited on those loads.
fn resident_panels(k: usize) -> usize {
    const BYTES: usize = 32 * 1024;
    let panel = k.div_ceil(4).max(1) * NR * 4;
    (BYTES / panel).max(3)
}

/// Rows whose sums [`product`] keeps between blocks of panels when they
/// are read in place (8 KiB of stack).
const KEPT_ROWS: usize = 2048;

/// Lines of memory a pass of the VNNI kernels asks the cache for while
/// it computes, one per quad step: the mapped panels of the next block.
/// A weight is read from memory once per run, and its first read waited
/// on every line (bert_base's int8 products stalled a third of the run
/// on them); asked for a block ahead, they arrive in L2 in time.
#[derive(Clone, Copy)]
pub struct Ahead {
    at: *const u8,
    lines: usize,
}

impl Ahead {
    /// Nothing asked for.
    pub const NONE: Ahead = Ahead {
        at: core::ptr::null(),
        lines: 0,
    };
}

/// The next block's mapped panels (`all`), handed out to the passes over
/// the current block as [`Ahead`]s of as many lines as each has quad
/// steps.
struct Prefetch {
    all: Ahead,
    given: usize,
}

impl Prefetch {
    /// The panels `p..p + count` of `ops` where all are mapped and
    /// consecutive in the mapping; else nothing.
    fn of<O: Operands>(ops: &O, p: usize, count: usize) -> Prefetch {
        let mut all = Ahead::NONE;
        if let Some(first) = (count > 0).then(|| ops.packed_lanes(p * NR)).flatten() {
            let bytes = core::mem::size_of_val(first);
            let start = first.as_ptr().cast::<u8>();
            let consecutive = (1..count).all(|t| {
                ops.packed_lanes((p + t) * NR)
                    .is_some_and(|m| m.as_ptr().cast::<u8>() == start.wrapping_add(t * bytes))
            });
            if consecutive {
                all = Ahead {
                    at: start,
                    lines: (count * bytes).div_ceil(64),
                };
            }
        }
        Prefetch { all, given: 0 }
    }

    /// The next `n` lines not yet asked for.
    fn next(&mut self, n: usize) -> Ahead {
        let lines = n.min(self.all.lines - self.given);
        let at = self.all.at.wrapping_add(self.given * 64);
        self.given += lines;
        Ahead { at, lines }
    }
}

/// An `MR × NR` tile of i32 sums.
pub type Tile = [[i32; NR]; MR];

/// The instruction set a tile is computed with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// Plain Rust.
    Portable,
    /// AVX2 (and FMA, which the element-wise operators' rows use):
    /// `vpmovzxbw`/`vpmovsxbw` and `vpmaddwd`.
    Avx2,
    /// AVX-512 with VNNI: `vpdpbusd`.
    Vnni,
}

impl Isa {
    /// The best the CPU has: detected at run time with `std`; without it,
    /// what the crate is compiled for (`-C target-feature=…`).
    pub fn detect() -> Isa {
        #[cfg(all(target_arch = "x86_64", feature = "std"))]
        {
            if std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512vnni")
            {
                return Isa::Vnni;
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                return Isa::Avx2;
            }
        }
        #[cfg(all(target_arch = "x86_64", not(feature = "std")))]
        {
            if cfg!(all(
                target_feature = "avx512f",
                target_feature = "avx512bw",
                target_feature = "avx512vnni"
            )) {
                return Isa::Vnni;
            }
            if cfg!(all(target_feature = "avx2", target_feature = "fma")) {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    }

    /// Every instruction set this CPU can run, the portable one first (for
    /// tests that compare them).
    pub fn all_available() -> impl Iterator<Item = Isa> {
        let best = Isa::detect();
        [Isa::Portable, Isa::Avx2, Isa::Vnni]
            .into_iter()
            .filter(move |&i| i <= best)
    }
}

/// The scratch floats viewed as 4-byte quads.
pub fn quads(scratch: &[Cell<f32>]) -> &[Cell<u32>] {
    let ptr = scratch.as_ptr().cast::<Cell<u32>>();
    // SAFETY: `Cell<f32>` and `Cell<u32>` have the same size and alignment
    // (those of `f32` and `u32`), and every bit pattern is a valid `u32`
    // and `f32`; the new slice covers exactly the same elements, with the
    // same lifetime and the same shared, interior-mutable access (`Cell`
    // hands out no references into its contents).
    #[allow(unsafe_code)]
    unsafe {
        core::slice::from_raw_parts(ptr, scratch.len())
    }
}

/// Quads of scratch a product of depth `k` takes with `nb` panels per
/// block: the panels, then one tile's rows.
pub fn scratch_quads(k: usize, nb: usize) -> usize {
    let nq = k.div_ceil(4);
    nq * NR * nb + nq * MR
}

/// Panels per block that `quads` of scratch hold for depth `k` (at most
/// [`block_panels`]); 0 when not even one fits.
pub fn panels_per_block(k: usize, quads: usize) -> usize {
    let nq = k.div_ceil(4).max(1);
    (quads.saturating_sub(nq * MR) / (nq * NR)).min(block_panels(k))
}

/// The two operands of one product, as the packers see them.
pub trait Operands {
    /// True when the panels hold the u8 operand (a) and the rows the i8
    /// one (b); false for the other way round.
    const LANES_UNSIGNED: bool;
    /// Depth `K` of the sums.
    fn depth(&self) -> usize;
    /// Rows of the product.
    fn rows(&self) -> usize;
    /// Lanes (columns) of the product.
    fn lanes(&self) -> usize;
    /// Packs lanes `j0..j0 + NR` into `panel` (`⌈K/4⌉·NR` quads, layout in
    /// the module doc) and returns each lane's sum over the depth of the
    /// values as the kernel reads them (u8 or i8).
    fn pack_lanes(&self, j0: usize, panel: &[Cell<u32>]) -> [i32; NR];
    /// Packs rows `i0..i0 + MR` into `rows` (`⌈K/4⌉·MR` quads) and returns
    /// each row's sum, as [`Operands::pack_lanes`].
    fn pack_rows(&self, i0: usize, rows: &[Cell<u32>]) -> [i32; MR];
    /// The bytes of one row, as [`Operands::direct_rows`] gives them.
    type Row<'s>: Load<u8>
    where
        Self: 's;
    /// Rows `i0..i0 + MR` as they are, each exactly `K` bytes that the
    /// kernel reads unchanged (`K` a multiple of 4), if the operand holds
    /// them so; `None` to pack them.
    fn direct_rows(&self, _i0: usize) -> Option<[Self::Row<'_>; MR]> {
        None
    }
    /// The sums of rows `i0..i0 + MR` read in place, as
    /// [`Operands::direct_rows`] gives them, if they are known ahead (a
    /// constant kernel's, taken at setup); `None` to sum the rows.
    fn direct_row_sums(&self, _i0: usize) -> Option<[i32; MR]> {
        None
    }
    /// False when the rows' sums are never used (the lanes' side's zero
    /// point is 0: they only come in multiplied by it), so that rows read
    /// in place are not summed.
    fn row_sums_used(&self) -> bool {
        true
    }
    /// Lanes `j0..j0 + NR` already in the panel layout (`⌈K/4⌉·NR`
    /// quads), if the operand holds them so (a weight the compiler
    /// packed); `None` to pack them with [`Operands::pack_lanes`].
    fn packed_lanes(&self, _j0: usize) -> Option<&[u32]> {
        None
    }
    /// The sums of [`Operands::packed_lanes`]`(j0)`'s lanes as
    /// [`Operands::pack_lanes`] returns them, if they are known ahead;
    /// `None` to sum the panel.
    fn packed_lane_sums(&self, _j0: usize) -> Option<[i32; NR]> {
        None
    }
}

/// Where a tile reads its panel's quads: the scratch it was packed into,
/// or a weight packed at compile time, read from the mapping.
pub trait PanelQuads: Copy {
    /// Quad `i`.
    fn quad(self, i: usize) -> u32;
    /// Quads `i..i + n`, bounds-checked, for one vector load.
    fn at(self, i: usize, n: usize) -> *const u32;
    /// The first `n` quads.
    fn first(self, n: usize) -> Self;
    /// Quads held.
    fn quads(self) -> usize;
    /// The first quad's address, for the kernels' loops, which check
    /// [`PanelQuads::quads`] once up front (no quad is written while a
    /// kernel reads them).
    fn ptr(self) -> *const u32;
}

impl PanelQuads for &[Cell<u32>] {
    #[inline(always)]
    fn quad(self, i: usize) -> u32 {
        self[i].get()
    }
    #[inline(always)]
    fn at(self, i: usize, n: usize) -> *const u32 {
        self[i..i + n].as_ptr().cast()
    }
    #[inline(always)]
    fn first(self, n: usize) -> Self {
        &self[..n]
    }
    #[inline(always)]
    fn quads(self) -> usize {
        <[Cell<u32>]>::len(self)
    }
    #[inline(always)]
    fn ptr(self) -> *const u32 {
        // `Cell<u32>` has the layout of `u32`.
        self.as_ptr().cast()
    }
}

impl PanelQuads for &[u32] {
    #[inline(always)]
    fn quad(self, i: usize) -> u32 {
        self[i]
    }
    #[inline(always)]
    fn at(self, i: usize, n: usize) -> *const u32 {
        self[i..i + n].as_ptr()
    }
    #[inline(always)]
    fn first(self, n: usize) -> Self {
        &self[..n]
    }
    #[inline(always)]
    fn quads(self) -> usize {
        <[u32]>::len(self)
    }
    #[inline(always)]
    fn ptr(self) -> *const u32 {
        self.as_ptr()
    }
}

/// A row of ones: its "products" with a panel are the panel's lane sums,
/// each byte as the kernel reads it (u8 or i8 times 1, exact).
struct Ones;

impl RowQuads for Ones {
    #[inline(always)]
    fn quad(&self, _q: usize, _r: usize) -> u32 {
        0x0101_0101
    }
}

/// Each lane's sum over the depth of a panel packed ahead of time, as
/// [`Operands::pack_lanes`] returns it. One tile against rows of ones
/// costs what one group of [`MR`] rows does, a small part of a product of
/// many rows, and needs no kernel of its own.
pub fn lane_sums(isa: Isa, lanes_unsigned: bool, panel: &[u32]) -> [i32; NR] {
    let nq = panel.len() / NR;
    tile_of(isa, lanes_unsigned, panel, &Ones, nq)[0]
}

/// What a finished tile hands its caller: its first row and lane, the raw
/// sums, and the lanes' and rows' sums over the depth.
pub struct Done<'t> {
    /// First row of the tile.
    pub i0: usize,
    /// First lane of the tile.
    pub j0: usize,
    /// `raw[r][l]` for row `i0 + r` and lane `j0 + l`.
    pub raw: &'t Tile,
    /// Each lane's sum.
    pub lane_sums: &'t [i32; NR],
    /// Each row's sum.
    pub row_sums: &'t [i32; MR],
}

/// [`Operands::pack_lanes`] compiled for the vector width of `isa`
/// (the packers are inlined into a function compiled for each): their
/// loops over sixteen lanes, which the baseline (SSE2) compiles byte by
/// byte. The same operations, so the same results.
#[inline(always)]
fn pack_lanes<O: Operands>(isa: Isa, ops: &O, j0: usize, panel: &[Cell<u32>]) -> [i32; NR] {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Vnni => {
            // SAFETY: `Isa::Vnni` is only chosen where the CPU has
            // AVX-512 F, BW and VNNI (`Isa::detect`).
            #[allow(unsafe_code)]
            unsafe {
                x86::pack_lanes_avx512(ops, j0, panel)
            }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: `Isa::Avx2` is only chosen where the CPU has AVX2.
            #[allow(unsafe_code)]
            unsafe {
                x86::pack_lanes_avx2(ops, j0, panel)
            }
        }
        _ => ops.pack_lanes(j0, panel),
    }
}

/// Computes the panels `panels` (lanes `NR·p..`) of the product of `ops`
/// through `scratch` (at least [`scratch_quads`]`(K, 1)` quads: check with
/// [`panels_per_block`]) and hands each tile to `emit` (a closure taking
/// [`Done`] will do), which sees only whole tiles and must ignore rows and
/// lanes past the product, unless `emit` has the kernel requantise them
/// ([`Epilogue::rows`]).
pub(super) fn product<'o, O: Operands>(
    isa: Isa,
    ops: &O,
    scratch: &[Cell<u32>],
    panels: Range<usize>,
    emit: impl Epilogue<'o>,
) {
    let nq = ops.depth().div_ceil(4);
    let all = ops.rows().next_multiple_of(MR) * nq;
    // Rows that must be packed (a depth not in whole quads: a first
    // convolution of 3 channels) are packed once, in the first block, and
    // kept for the others where they fit: packing them again for each
    // block of panels was 3 % of an int8 resnet50's run. Only then is the
    // buffer made (and zeroed).
    if ops.rows() > 0
        && ops.direct_rows(0).is_none()
        && all <= KEPT_QUADS
        && ops.rows() <= KEPT_ROWS
    {
        let kept: [Cell<u32>; KEPT_QUADS] = core::array::from_fn(|_| Cell::new(0));
        return blocks(isa, ops, scratch, panels, emit, Some(&kept[..all]));
    }
    blocks(isa, ops, scratch, panels, emit, None)
}

/// Quads of packed rows [`product`] keeps between blocks (16 KiB of
/// stack).
const KEPT_QUADS: usize = 4096;

/// [`product`], with `kept` holding every group of rows packed (group
/// `i0 / MR` at quads `i0·nq..`) where they are kept between blocks.
fn blocks<'o, O: Operands>(
    isa: Isa,
    ops: &O,
    scratch: &[Cell<u32>],
    panels: Range<usize>,
    mut emit: impl Epilogue<'o>,
    kept_rows: Option<&[Cell<u32>]>,
) {
    let k = ops.depth();
    let nq = k.div_ceil(4);
    let nb = panels_per_block(k, scratch.len());
    let rows_stay = ops.rows() > 0 && (ops.direct_rows(0).is_some() || kept_rows.is_some());
    let most = if rows_stay {
        block_panels(k).min(resident_panels(k))
    } else {
        block_panels(k)
    };
    if nb == 0 {
        debug_assert!(false, "scratch short of one panel");
        return;
    }
    let (panel_buf, rest) = scratch.split_at(nb * nq * NR);
    let scratch_rows = &rest[..nq * MR];
    let scratch_panel = |b: usize| &panel_buf[b * nq * NR..(b + 1) * nq * NR];
    let mut sums = [[0i32; NR]; NB];
    let mut mapped: [Option<&[u32]>; NB] = [None; NB];
    // The scratch panel each panel of a block was packed into: panels read
    // in place take none, so a block holds up to NB of them whatever the
    // scratch.
    let mut slot = [0usize; NB];
    // The sums of rows read in place, taken in the first block and kept
    // for the others (where the rows are few enough for the stack).
    let mut kept = [0i32; KEPT_ROWS];
    // The columns of a last panel of few lanes ([`narrow`]), made (and
    // zeroed) only for a product that has one.
    let mut cols: Option<Columns> = None;
    let mut p = panels.start;
    while p < panels.end {
        let first_block = p == panels.start;
        let (mut count, mut used) = (0, 0);
        while count < most && p + count < panels.end {
            let j0 = (p + count) * NR;
            let m = ops.packed_lanes(j0).filter(|m| m.len() == nq * NR);
            sums[count] = match m {
                Some(m) => ops
                    .packed_lane_sums(j0)
                    .unwrap_or_else(|| lane_sums(isa, O::LANES_UNSIGNED, m)),
                None if used < nb => {
                    slot[count] = used;
                    used += 1;
                    pack_lanes(isa, ops, j0, scratch_panel(slot[count]))
                }
                None => break,
            };
            mapped[count] = m;
            count += 1;
        }
        // Only the VNNI passes ask for lines.
        let after = (p + count).min(panels.end);
        let ahead_count = if isa == Isa::Vnni {
            most.min(panels.end - after)
        } else {
            0
        };
        let mut ahead = Prefetch::of(ops, after, ahead_count);
        // Whether the block's last panel is the product's, of a few
        // lanes, packed and taken as columns: rows read in place then
        // leave it to [`narrow`].
        let narrow = count > 0 && isa == Isa::Vnni && mapped[count - 1].is_none() && {
            let lanes = ops.lanes().saturating_sub((p + count - 1) * NR);
            lanes < NR
                && cols.get_or_insert_with(Columns::new).take(
                    scratch_panel(slot[count - 1]),
                    nq,
                    lanes,
                )
        };
        let narrow_of = |r: &RowsOf<'_>| (narrow && r.direct.is_some()).then_some(count - 1);
        let lu = O::LANES_UNSIGNED;
        let usable = |f: &Rows<'_>| f.usable(ops.lanes());
        // A group of rows already prepared (its sums taken, its line
        // looked up) by an attempt to pair it with the one before.
        // `held[0]` says how the kernel requantises the current group
        // (where it does), `held[1]` the group after it.
        let mut held = [Rows::EMPTY; 2];
        let mut next = None;
        let mut i0 = 0;
        while i0 < ops.rows() {
            let (r0, f0) = match next.take() {
                Some((r, f)) => {
                    if f {
                        held[0] = held[1];
                    }
                    (r, f)
                }
                None => {
                    let r = rows_of(
                        isa,
                        ops,
                        i0,
                        first_block,
                        kept_rows,
                        scratch_rows,
                        &mut kept,
                    );
                    let fused = isa == Isa::Vnni
                        && emit.rows(i0, &r.sums, &mut held[0])
                        && usable(&held[0]);
                    (r, fused)
                }
            };
            // Two groups of rows requantised by the kernel go through one
            // pass: each panel quad loaded once for eight rows, and up to
            // 24 sums in flight, where four rows left the loop waiting on
            // loads. Only rows read in place or kept packed pair (the
            // second group must not be packed over the first's buffer).
            let i1 = i0 + MR;
            if f0 && i1 < ops.rows() && (r0.direct.is_some() || kept_rows.is_some()) {
                let r1 = rows_of(
                    isa,
                    ops,
                    i1,
                    first_block,
                    kept_rows,
                    scratch_rows,
                    &mut kept,
                );
                let f1 = emit.rows(i1, &r1.sums, &mut held[1]) && usable(&held[1]);
                if f1 && r1.direct.is_some() == r0.direct.is_some() {
                    {
                        let to = &held[..];
                        let wide = narrow_of(&r0).unwrap_or(count);
                        let mut b = 0;
                        while b < wide {
                            let ah = ahead.next(nq);
                            let n = alike_panels(&mapped[b..wide]);
                            let at = |t: usize| (mapped[b + t], scratch_panel(slot[b + t]));
                            let lanes = |t: usize| lanes_of(ops, (p + b + t) * NR, &sums[b + t]);
                            let strided = match (&r0.direct, &r1.direct) {
                                (Some(d0), Some(d1)) => Strided::<8>::of(&[d0, d1]),
                                _ => None,
                            };
                            match (&strided, &r0.direct, &r1.direct, n) {
                                (Some(s), _, _, 3) => {
                                    fused_group::<3, 8, _>(lu, at, s, nq, lanes, to, ah)
                                }
                                (Some(s), _, _, 2) => {
                                    fused_group::<2, 8, _>(lu, at, s, nq, lanes, to, ah)
                                }
                                (Some(s), _, _, _) => {
                                    fused_group::<1, 8, _>(lu, at, s, nq, lanes, to, ah)
                                }
                                (_, Some(d0), Some(d1), 3) => {
                                    fused_group::<3, 8, _>(lu, at, &Two(d0, d1), nq, lanes, to, ah)
                                }
                                (_, Some(d0), Some(d1), 2) => {
                                    fused_group::<2, 8, _>(lu, at, &Two(d0, d1), nq, lanes, to, ah)
                                }
                                (_, Some(d0), Some(d1), _) => {
                                    fused_group::<1, 8, _>(lu, at, &Two(d0, d1), nq, lanes, to, ah)
                                }
                                (_, _, _, n) => {
                                    let two = Two(&Packed(r0.buf), &Packed(r1.buf));
                                    match n {
                                        3 => {
                                            fused_group::<3, 8, _>(lu, at, &two, nq, lanes, to, ah)
                                        }
                                        2 => {
                                            fused_group::<2, 8, _>(lu, at, &two, nq, lanes, to, ah)
                                        }
                                        _ => {
                                            fused_group::<1, 8, _>(lu, at, &two, nq, lanes, to, ah)
                                        }
                                    }
                                }
                            }
                            b += n;
                        }
                        if let (Some(b), Some(c)) = (narrow_of(&r0), &cols) {
                            let (j0, s) = ((p + b) * NR, &sums[b]);
                            narrow::tile(lu, c, &r0, i0, j0, s, &mut emit);
                            narrow::tile(lu, c, &r1, i1, j0, s, &mut emit);
                        }
                        i0 += 2 * MR;
                        continue;
                    }
                }
                next = Some((r1, f1));
            }
            // Two groups of rows read in place whose i32 sums go out as
            // they are (no requantisation in the kernel) also share one
            // pass: four rows per pass left bert_base's int8 products at
            // 40 % of the VNNI peak.
            let i1 = i0 + MR;
            if !f0 && isa == Isa::Vnni && i1 < ops.rows() && narrow_of(&r0).is_none() {
                if let Some(d0) = &r0.direct {
                    let r1 = rows_of(
                        isa,
                        ops,
                        i1,
                        first_block,
                        kept_rows,
                        scratch_rows,
                        &mut kept,
                    );
                    let f1 = emit.rows(i1, &r1.sums, &mut held[1]) && usable(&held[1]);
                    match &r1.direct {
                        Some(d1) if !f1 && narrow_of(&r1).is_none() => {
                            let rows = Two(d0, d1);
                            let mut b = 0;
                            while b < count {
                                let ah = ahead.next(nq);
                                let n = alike_panels(&mapped[b..count]);
                                let at = |t: usize| (mapped[b + t], scratch_panel(slot[b + t]));
                                let tiles: &[[Tile; 2]] = match n {
                                    3 => &group2::<3, _>(lu, at, &rows, nq, ah),
                                    2 => &group2::<2, _>(lu, at, &rows, nq, ah),
                                    _ => &group2::<1, _>(lu, at, &rows, nq, ah),
                                };
                                for (t, pair) in tiles.iter().enumerate() {
                                    for ((raw, i), row_sums) in
                                        pair.iter().zip([i0, i1]).zip([&r0.sums, &r1.sums])
                                    {
                                        emit.tile(Done {
                                            i0: i,
                                            j0: (p + b + t) * NR,
                                            raw,
                                            lane_sums: &sums[b + t],
                                            row_sums,
                                        });
                                    }
                                }
                                b += n;
                            }
                            i0 += 2 * MR;
                            continue;
                        }
                        _ => next = Some((r1, f1)),
                    }
                }
            }
            let fused = f0.then_some(&held[0]);
            let wide = narrow_of(&r0).unwrap_or(count);
            let mut b = 0;
            while b < wide {
                let n = alike_panels(&mapped[b..wide]);
                let at = |t: usize| (mapped[b + t], scratch_panel(slot[b + t]));
                // Each tile handed on where it was computed: gathering them
                // into one array first copied 768 bytes per group.
                if let Some(to) = fused {
                    let ah = ahead.next(nq);
                    let lanes = |t: usize| lanes_of(ops, (p + b + t) * NR, &sums[b + t]);
                    let to = core::slice::from_ref(to);
                    let strided = r0.direct.as_ref().and_then(|d| Strided::<MR>::of(&[d]));
                    match (&r0.direct, n) {
                        (Some(_), n) if strided.is_some() => {
                            if let Some(s) = &strided {
                                match n {
                                    3 => fused_group::<3, MR, _>(lu, at, s, nq, lanes, to, ah),
                                    2 => fused_group::<2, MR, _>(lu, at, s, nq, lanes, to, ah),
                                    _ => fused_group::<1, MR, _>(lu, at, s, nq, lanes, to, ah),
                                }
                            }
                        }
                        (Some(d), 3) => fused_group::<3, MR, _>(lu, at, d, nq, lanes, to, ah),
                        (Some(d), 2) => fused_group::<2, MR, _>(lu, at, d, nq, lanes, to, ah),
                        (Some(d), _) => fused_group::<1, MR, _>(lu, at, d, nq, lanes, to, ah),
                        (None, 3) => {
                            fused_group::<3, MR, _>(lu, at, &Packed(r0.buf), nq, lanes, to, ah)
                        }
                        (None, 2) => {
                            fused_group::<2, MR, _>(lu, at, &Packed(r0.buf), nq, lanes, to, ah)
                        }
                        (None, _) => {
                            fused_group::<1, MR, _>(lu, at, &Packed(r0.buf), nq, lanes, to, ah)
                        }
                    }
                    b += n;
                    continue;
                }
                let mut put = |raws: &[Tile]| {
                    for (t, raw) in raws.iter().enumerate() {
                        emit.tile(Done {
                            i0,
                            j0: (p + b + t) * NR,
                            raw,
                            lane_sums: &sums[b + t],
                            row_sums: &r0.sums,
                        });
                    }
                };
                match (&r0.direct, n) {
                    (Some(d), 3) => put(&group::<3, _>(isa, lu, at, d, nq)),
                    (Some(d), 2) => put(&group::<2, _>(isa, lu, at, d, nq)),
                    (Some(d), _) => put(&group::<1, _>(isa, lu, at, d, nq)),
                    (None, 3) => put(&group::<3, _>(isa, lu, at, &Packed(r0.buf), nq)),
                    (None, 2) => put(&group::<2, _>(isa, lu, at, &Packed(r0.buf), nq)),
                    (None, _) => put(&group::<1, _>(isa, lu, at, &Packed(r0.buf), nq)),
                }
                b += n;
            }
            if let (Some(b), Some(c)) = (narrow_of(&r0), &cols) {
                narrow::tile(lu, c, &r0, i0, (p + b) * NR, &sums[b], &mut emit);
            }
            i0 += MR;
        }
        p += count;
    }
}

/// How many panels from `mapped[0]` one pass takes (at most three):
/// those read alike (all mapped, or all packed), each row quad loaded
/// once for all. Three keep twelve sums in flight with one group of
/// rows (each `vpdpbusd` waits for the one before it on its sum: eight
/// were too few), 24 with two; four alike go as two and two rather
/// than three and one, whose pass has a third of the sums in flight.
fn alike_panels(mapped: &[Option<&[u32]>]) -> usize {
    let first = mapped.first().map(Option::is_some);
    let run = mapped
        .iter()
        .take_while(|m| Some(m.is_some()) == first)
        .count();
    match run {
        0 => 1,
        4 => 2,
        n => n.min(3),
    }
}

/// The panel of lanes `j0..` of `ops` as the fused kernel writes it.
#[inline(always)]
fn lanes_of<'s, O: Operands>(ops: &O, j0: usize, sums: &'s [i32; NR]) -> fused::Lanes<'s> {
    fused::Lanes {
        j0,
        lanes: NR.min(ops.lanes().saturating_sub(j0)),
        sums,
    }
}

/// The tiles of `N` consecutive panels of a block against the same rows,
/// `at(t)` giving panel `t`'s mapped quads (all of them mapped, or none)
/// and its scratch.
#[inline(always)]
fn group<'s, const N: usize, R: RowQuads>(
    isa: Isa,
    lanes_unsigned: bool,
    at: impl Fn(usize) -> (Option<&'s [u32]>, &'s [Cell<u32>]),
    rows: &R,
    nq: usize,
) -> [Tile; N] {
    let panels: [_; N] = core::array::from_fn(&at);
    if panels.iter().all(|(m, _)| m.is_some()) {
        let mapped = panels.map(|(m, _)| m.unwrap_or(&[]));
        tiles_of(isa, lanes_unsigned, mapped, rows, nq)
    } else {
        tiles_of(isa, lanes_unsigned, panels.map(|(_, s)| s), rows, nq)
    }
}

/// [`group`] of two groups of rows (`rows`, [`Two`] of them) in one pass;
/// only chosen with [`Isa::Vnni`].
#[inline(always)]
fn group2<'s, const N: usize, R: RowQuads>(
    lanes_unsigned: bool,
    at: impl Fn(usize) -> (Option<&'s [u32]>, &'s [Cell<u32>]),
    rows: &R,
    nq: usize,
    ahead: Ahead,
) -> [[Tile; 2]; N] {
    #[cfg(target_arch = "x86_64")]
    {
        let panels: [_; N] = core::array::from_fn(&at);
        // SAFETY (all four): `blocks` pairs groups only with `Isa::Vnni`,
        // chosen where the CPU has AVX-512 F, BW and VNNI.
        #[allow(unsafe_code)]
        if panels.iter().all(|(m, _)| m.is_some()) {
            let mapped = panels.map(|(m, _)| PanelQuads::first(m.unwrap_or(&[]), nq * NR));
            if lanes_unsigned {
                unsafe { x86::tiles2_vnni::<true, N, _, R>(mapped, rows, nq, ahead) }
            } else {
                unsafe { x86::tiles2_vnni::<false, N, _, R>(mapped, rows, nq, ahead) }
            }
        } else {
            let scratch = panels.map(|(_, s)| PanelQuads::first(s, nq * NR));
            if lanes_unsigned {
                unsafe { x86::tiles2_vnni::<true, N, _, R>(scratch, rows, nq, ahead) }
            } else {
                unsafe { x86::tiles2_vnni::<false, N, _, R>(scratch, rows, nq, ahead) }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (lanes_unsigned, at, rows, nq, ahead);
        unreachable!("paired groups without VNNI");
    }
}

/// [`group`] requantised by the kernel into `to` ([`fused`]), `M` rows
/// (`to.len()` groups of [`MR`]); only chosen with [`Isa::Vnni`].
#[inline(always)]
fn fused_group<'s, const N: usize, const M: usize, R: RowQuads>(
    lanes_unsigned: bool,
    at: impl Fn(usize) -> (Option<&'s [u32]>, &'s [Cell<u32>]),
    rows: &R,
    nq: usize,
    lanes: impl Fn(usize) -> fused::Lanes<'s>,
    to: &[Rows<'_>],
    ahead: Ahead,
) {
    #[cfg(target_arch = "x86_64")]
    {
        let panels: [_; N] = core::array::from_fn(&at);
        let lanes: [_; N] = core::array::from_fn(lanes);
        // SAFETY (all four): `product` fuses only with `Isa::Vnni`, chosen
        // where the CPU has AVX-512 F, BW and VNNI (`Isa::detect`).
        #[allow(unsafe_code)]
        if panels.iter().all(|(m, _)| m.is_some()) {
            let mapped = panels.map(|(m, _)| m.unwrap_or(&[]));
            if lanes_unsigned {
                unsafe { fused::tiles_vnni::<true, N, M, _, R>(mapped, rows, nq, lanes, to, ahead) }
            } else {
                unsafe {
                    fused::tiles_vnni::<false, N, M, _, R>(mapped, rows, nq, lanes, to, ahead)
                }
            }
        } else {
            let scratch = panels.map(|(_, s)| s);
            if lanes_unsigned {
                unsafe {
                    fused::tiles_vnni::<true, N, M, _, R>(scratch, rows, nq, lanes, to, ahead)
                }
            } else {
                unsafe {
                    fused::tiles_vnni::<false, N, M, _, R>(scratch, rows, nq, lanes, to, ahead)
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (lanes_unsigned, at, rows, nq, lanes, to, ah);
        debug_assert!(false, "fused tiles without VNNI");
    }
}

/// The sums of one tile: `panel` holds `nq·NR` quads and `rows` `nq·MR`.
/// With `lanes_unsigned` the panel's bytes are u8 and the rows' i8, else
/// the other way round.
pub fn tile(isa: Isa, lanes_unsigned: bool, panel: &[Cell<u32>], rows: &[Cell<u32>]) -> Tile {
    let nq = rows.len() / MR;
    tile_of(isa, lanes_unsigned, panel, &Packed(&rows[..nq * MR]), nq)
}

/// [`tile`] of depth `nq` quads with the rows read from `rows`.
#[inline]
fn tile_of<P: PanelQuads, R: RowQuads>(
    isa: Isa,
    lanes_unsigned: bool,
    panel: P,
    rows: &R,
    nq: usize,
) -> Tile {
    let panel = panel.first(nq * NR);
    match (isa, lanes_unsigned) {
        #[cfg(target_arch = "x86_64")]
        (Isa::Vnni, true) => {
            // SAFETY: `Isa::Vnni` is only chosen where the CPU has
            // AVX-512 F, BW and VNNI (`Isa::detect`).
            #[allow(unsafe_code)]
            unsafe {
                x86::tile_vnni::<true, P, R>(panel, rows, nq)
            }
        }
        #[cfg(target_arch = "x86_64")]
        (Isa::Vnni, false) => {
            // SAFETY: as above.
            #[allow(unsafe_code)]
            unsafe {
                x86::tile_vnni::<false, P, R>(panel, rows, nq)
            }
        }
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, true) => {
            // SAFETY: `Isa::Avx2` is only chosen where the CPU has AVX2.
            #[allow(unsafe_code)]
            unsafe {
                x86::tile_avx2::<true, P, R>(panel, rows, nq)
            }
        }
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx2, false) => {
            // SAFETY: as above.
            #[allow(unsafe_code)]
            unsafe {
                x86::tile_avx2::<false, P, R>(panel, rows, nq)
            }
        }
        (_, true) => tile_portable::<true, P, R>(panel, rows, nq),
        (_, false) => tile_portable::<false, P, R>(panel, rows, nq),
    }
}

/// [`tile_of`] of `N` panels against the same rows. With VNNI, one pass
/// over the rows' quads with `N·MR` sums in flight; otherwise `N` tiles.
#[inline]
fn tiles_of<const N: usize, P: PanelQuads, R: RowQuads>(
    isa: Isa,
    lanes_unsigned: bool,
    panels: [P; N],
    rows: &R,
    nq: usize,
) -> [Tile; N] {
    let panels = panels.map(|p| p.first(nq * NR));
    match (isa, lanes_unsigned) {
        #[cfg(target_arch = "x86_64")]
        (Isa::Vnni, true) => {
            // SAFETY: `Isa::Vnni` is only chosen where the CPU has
            // AVX-512 F, BW and VNNI (`Isa::detect`).
            #[allow(unsafe_code)]
            unsafe {
                x86::tiles_vnni::<true, N, P, R>(panels, rows, nq)
            }
        }
        #[cfg(target_arch = "x86_64")]
        (Isa::Vnni, false) => {
            // SAFETY: as above.
            #[allow(unsafe_code)]
            unsafe {
                x86::tiles_vnni::<false, N, P, R>(panels, rows, nq)
            }
        }
        _ => panels.map(|p| tile_of(isa, lanes_unsigned, p, rows, nq)),
    }
}

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests;

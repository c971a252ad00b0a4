//! Every instruction set against a plain loop, on random sizes around the
//! tile and panel edges and on the extreme byte values.

use super::rows::row_sum;
use super::*;
use crate::kernels::qlinear::epilogue::Line;
use alloc::vec::Vec;

/// xorshift64*: reproducible inputs without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A byte, one time in two one of the extremes (0, 255, 0x80, 0x7f:
    /// u8 0/255, i8 −128/127).
    fn byte(&mut self) -> u8 {
        match self.below(8) {
            0 => 0,
            1 => 255,
            2 => 0x80,
            3 => 0x7f,
            _ => self.next() as u8,
        }
    }
}

/// A product held as plain matrices: `lanes[j·k + p]`, `rows[i·k + p]`;
/// with `direct`, whole groups of rows are read in place where the depth
/// allows.
struct Mats<const U: bool> {
    m: usize,
    n: usize,
    k: usize,
    lanes: Vec<u8>,
    rows: Vec<u8>,
    direct: bool,
    /// Where row `i` starts in `spread`, the rows read in place: `i·k`,
    /// or apart by irregular gaps ([`Mats::irregular`]).
    at: Vec<usize>,
    spread: Vec<u8>,
}

impl<const U: bool> Mats<U> {
    /// Rows read in place where they are packed from, `k` bytes apart.
    fn evenly(mut self) -> Self {
        self.at = (0..self.m).map(|i| i * self.k).collect();
        self.spread = self.rows.clone();
        self
    }

    /// Spreads the rows read in place apart by gaps of 0 to 5 bytes, so
    /// that groups are not equally spaced (the kernels then read each
    /// row by its own address, not one address and a stride).
    fn irregular(&mut self, rng: &mut Rng) {
        let (m, k) = (self.m, self.k);
        let mut spread = Vec::new();
        self.at = (0..m)
            .map(|i| {
                spread.resize(spread.len() + rng.below(6), 0x77);
                let at = spread.len();
                spread.extend_from_slice(&self.rows[i * k..][..k]);
                at
            })
            .collect();
        self.spread = spread;
    }
}

/// The value a byte stands for on the u8 or the i8 side.
fn value(b: u8, unsigned: bool) -> i32 {
    if unsigned {
        b.into()
    } else {
        (b as i8).into()
    }
}

impl<const U: bool> Operands for Mats<U> {
    const LANES_UNSIGNED: bool = U;
    fn depth(&self) -> usize {
        self.k
    }
    fn rows(&self) -> usize {
        self.m
    }
    fn lanes(&self) -> usize {
        self.n
    }
    fn pack_lanes(&self, j0: usize, panel: &[Cell<u32>]) -> [i32; NR] {
        let mut sums = [0; NR];
        for (q, quads) in panel.chunks_exact(NR).enumerate() {
            for (l, cell) in quads.iter().enumerate() {
                let bytes: [u8; 4] = core::array::from_fn(|t| {
                    let (j, p) = (j0 + l, 4 * q + t);
                    if j < self.n && p < self.k {
                        self.lanes[j * self.k + p]
                    } else {
                        0
                    }
                });
                for b in bytes {
                    sums[l] += value(b, U);
                }
                cell.set(u32::from_le_bytes(bytes));
            }
        }
        sums
    }
    fn pack_rows(&self, i0: usize, rows: &[Cell<u32>]) -> [i32; MR] {
        let mut sums = [0; MR];
        for (q, quads) in rows.chunks_exact(MR).enumerate() {
            for (r, cell) in quads.iter().enumerate() {
                let bytes: [u8; 4] = core::array::from_fn(|t| {
                    let (i, p) = (i0 + r, 4 * q + t);
                    if i < self.m && p < self.k {
                        self.rows[i * self.k + p]
                    } else {
                        0
                    }
                });
                for b in bytes {
                    sums[r] += value(b, !U);
                }
                cell.set(u32::from_le_bytes(bytes));
            }
        }
        sums
    }
    type Row<'s> = &'s [u8];
    fn direct_rows(&self, i0: usize) -> Option<[&[u8]; MR]> {
        let k = self.k;
        let whole = self.direct && k.is_multiple_of(4) && i0 + MR <= self.m;
        whole.then(|| core::array::from_fn(|r| &self.spread[self.at[i0 + r]..][..k]))
    }
}

/// Runs `ops` on `isa` with `nb` panels per block over all panels and
/// checks every element and sum against plain loops.
fn check<const U: bool>(ops: &Mats<U>, isa: Isa, nb: usize) {
    let quads = scratch_quads(ops.k, nb);
    let scratch: Vec<Cell<u32>> = (0..quads).map(|_| Cell::new(0xdead_beef)).collect();
    assert_eq!(panels_per_block(ops.k, quads), nb);
    let mut got = alloc::vec![None; ops.m * ops.n];
    let panels = ops.n.div_ceil(NR);
    product(isa, ops, &scratch, 0..panels, |d: Done<'_>| {
        for (r, row) in d.raw.iter().enumerate() {
            for (l, &raw) in row.iter().enumerate() {
                let (i, j) = (d.i0 + r, d.j0 + l);
                if i < ops.m && j < ops.n {
                    assert!(got[i * ops.n + j].is_none(), "({i}, {j}) twice");
                    got[i * ops.n + j] = Some((raw, d.lane_sums[l], d.row_sums[r]));
                }
            }
        }
    });
    for i in 0..ops.m {
        for j in 0..ops.n {
            let (x, w) = (
                &ops.lanes[j * ops.k..][..ops.k],
                &ops.rows[i * ops.k..][..ops.k],
            );
            let raw = x.iter().zip(w).fold(0i32, |s, (&x, &w)| {
                s.wrapping_add(value(x, U) * value(w, !U))
            });
            let lane: i32 = x.iter().map(|&x| value(x, U)).sum();
            let row: i32 = w.iter().map(|&w| value(w, !U)).sum();
            assert_eq!(
                got[i * ops.n + j],
                Some((raw, lane, row)),
                "{isa:?}, lanes unsigned {U}, {}x{}x{} at ({i}, {j}), {nb} panels per block",
                ops.m,
                ops.n,
                ops.k
            );
        }
    }
}

fn random<const U: bool>(rng: &mut Rng, m: usize, n: usize, k: usize) -> Mats<U> {
    Mats {
        m,
        n,
        k,
        lanes: (0..n * k).map(|_| rng.byte()).collect(),
        rows: (0..m * k).map(|_| rng.byte()).collect(),
        direct: false,
        at: Vec::new(),
        spread: Vec::new(),
    }
    .evenly()
}

#[test]
fn every_instruction_set_gives_the_plain_sums() {
    let mut rng = Rng(0x5eed_1234);
    // Edges: k below, at and above a quad and a multiple of it; m and n
    // below, at and above a tile and a block of panels.
    let mut sizes = alloc::vec![(1, 1, 1), (4, 16, 4), (5, 17, 5), (3, 65, 9), (9, 70, 131)];
    for _ in 0..40 {
        sizes.push((1 + rng.below(13), 1 + rng.below(90), 1 + rng.below(300)));
    }
    // Shallow products over more lanes than one block of panels takes.
    sizes.extend([
        (4, 16, 8),
        (8, 33, 12),
        (13, 70, 132),
        (7, 5, 4),
        (9, 700, 16),
        (5, 1100, 7),
    ]);
    // Pairs of row groups read in place, with a partial group after them.
    sizes.extend([(24, 50, 64), (19, 40, 96)]);
    for &(m, n, k) in &sizes {
        let mut unsigned_lanes = random::<true>(&mut rng, m, n, k);
        let mut signed_lanes = random::<false>(&mut rng, m, n, k);
        for direct in [false, true] {
            unsigned_lanes.direct = direct;
            signed_lanes.direct = direct;
            for isa in Isa::all_available() {
                for nb in 1..=block_panels(k) {
                    check(&unsigned_lanes, isa, nb);
                    check(&signed_lanes, isa, nb);
                }
            }
        }
    }
}

/// The largest products of each sign, deep enough to wrap the i32 sum:
/// every kernel wraps it the same way.
#[test]
fn extreme_values_wrap_alike() {
    let k = 70_000;
    for (lane, row) in [(255u8, 0x80u8), (255, 0x7f), (0x80, 255), (0x7f, 255)] {
        for isa in Isa::all_available() {
            // Two rows packed; four, a whole group, read in place.
            for (m, direct) in [(2, false), (4, true)] {
                let ops = Mats::<true> {
                    m,
                    n: 3,
                    k,
                    lanes: alloc::vec![lane; 3 * k],
                    rows: alloc::vec![row; m * k],
                    direct,
                    at: Vec::new(),
                    spread: Vec::new(),
                }
                .evenly();
                check(&ops, isa, 1);
                let ops = Mats::<false> {
                    m,
                    n: 3,
                    k,
                    lanes: alloc::vec![lane; 3 * k],
                    rows: alloc::vec![row; m * k],
                    direct,
                    at: Vec::new(),
                    spread: Vec::new(),
                }
                .evenly();
                check(&ops, isa, 1);
            }
        }
    }
}

/// A row's sum on every instruction set equals the plain sum of its bytes
/// read as u8 or i8, at every length around the 32-byte blocks, from
/// weights and from arena cells.
#[test]
fn row_sums_equal_the_plain_sum() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    for k in 0..200 {
        let bytes: Vec<u8> = (0..k + 3).map(|_| rng.byte()).collect();
        let cells: Vec<Cell<u8>> = bytes.iter().copied().map(Cell::new).collect();
        for unsigned in [false, true] {
            let want: i32 = bytes[1..1 + k]
                .iter()
                .map(|&b| {
                    if unsigned {
                        i32::from(b)
                    } else {
                        i32::from(b as i8)
                    }
                })
                .sum();
            for isa in Isa::all_available() {
                assert_eq!(
                    row_sum(isa, &bytes[1..], k, unsigned),
                    want,
                    "{isa:?}, k {k}, unsigned {unsigned}"
                );
                assert_eq!(
                    row_sum(isa, &cells[1..], k, unsigned),
                    want,
                    "{isa:?} cells, k {k}"
                );
            }
        }
    }
}

/// An epilogue that lets the kernel requantise the groups of rows `fuse`
/// picks and requantises the other tiles itself, the reference's way.
struct Requantiser<'a> {
    out: &'a [Cell<u8>],
    /// Row `i`'s offset of lane 0 and line.
    lines: &'a [(usize, Line)],
    fuse: &'a dyn Fn(usize) -> bool,
    /// Lanes of the product.
    n: usize,
    /// Tiles handed back rather than requantised by the kernel.
    tiles: &'a Cell<usize>,
}

impl<'a> Epilogue<'a> for Requantiser<'a> {
    fn rows(&mut self, i0: usize, _row_sums: &[i32; MR], to: &mut Rows<'a>) -> bool {
        if !(self.fuse)(i0) {
            return false;
        }
        let count = MR.min(self.lines.len() - i0);
        let mut lines = [(0, self.lines[0].1); MR];
        lines[..count].copy_from_slice(&self.lines[i0..i0 + count]);
        *to = Rows {
            out: self.out,
            lines,
            count,
        };
        true
    }

    fn tile(&mut self, d: Done<'_>) {
        self.tiles.set(self.tiles.get() + 1);
        for (r, row) in d.raw.iter().enumerate() {
            let Some(&(o, line)) = self.lines.get(d.i0 + r) else {
                continue;
            };
            for (l, &raw) in row.iter().enumerate() {
                let j = d.j0 + l;
                if j < self.n {
                    let acc = raw
                        .wrapping_sub(line.m.wrapping_mul(d.lane_sums[l]))
                        .wrapping_add(line.c);
                    let y =
                        crate::kernels::qlinear::requantize(acc, line.scale, line.zero, line.range);
                    self.out[o + j].set(y as u8);
                }
            }
        }
    }
}

/// Tiles requantised in the kernel's registers give the bytes of the
/// plain sums requantised by the reference, on every instruction set
/// (those without VNNI hand every tile back): u8 and i8 outputs, depths
/// not a multiple of four, rows read in place or packed, lane sums used
/// or not (zero multipliers), per-row and shared scales, groups fused
/// and not in one product; nothing outside the rows is written.
#[test]
fn fused_tiles_requantise_as_the_reference() {
    let mut rng = Rng(0xf05e_d000);
    for case in 0..120 {
        // Up to five groups of rows: pairs of groups, and a group left
        // over after them.
        let (m, n, k) = (1 + rng.below(21), 1 + rng.below(90), 1 + rng.below(160));
        let k = if case % 3 == 0 {
            k.next_multiple_of(4)
        } else {
            k
        };
        let mut mats_u = random::<true>(&mut rng, m, n, k);
        let mut mats_s = random::<false>(&mut rng, m, n, k);
        mats_u.direct = case % 2 == 0;
        mats_s.direct = case % 2 == 0;
        if case % 4 == 2 {
            mats_u.irregular(&mut rng);
            mats_s.irregular(&mut rng);
        }
        let range = if case % 4 < 2 { (0, 255) } else { (-128, 127) };
        let shared = 1e-3 + rng.below(1000) as f32 * 3.1e-5;
        let stride = n + rng.below(5);
        let lines: Vec<(usize, Line)> = (0..m)
            .map(|i| {
                let line = Line {
                    m: if case % 5 == 0 {
                        0
                    } else {
                        rng.below(300) as i32 - 150
                    },
                    c: rng.below(200_001) as i32 - 100_000,
                    scale: if case % 3 == 1 {
                        shared
                    } else {
                        // Halves and quarters: ties on odd sums.
                        [0.5, 0.25, 2.7e-4, 0.013][rng.below(4)]
                    },
                    zero: range.0 + rng.below(256) as i32,
                    range,
                };
                (3 + i * stride, line)
            })
            .collect();
        let len = 3 + m * stride + 4;
        // Some groups declined: a fused group before or after one that is
        // not, so pairs form around them (or fail to, the second group
        // then run alone).
        let partial = case % 7 == 0 || case % 11 == 0;
        let fuse = move |i0: usize| match (case % 7, case % 11) {
            (0, _) => i0.is_multiple_of(2 * MR),
            (_, 0) => !i0.is_multiple_of(3 * MR),
            _ => true,
        };
        for isa in Isa::all_available() {
            for nb in [1, 3, block_panels(k)] {
                for unsigned in [true, false] {
                    let out: Vec<Cell<u8>> = (0..len).map(|_| Cell::new(0x5a)).collect();
                    let tiles = Cell::new(0);
                    let sink = Requantiser {
                        out: &out,
                        lines: &lines,
                        fuse: &fuse,
                        n,
                        tiles: &tiles,
                    };
                    let scratch: Vec<Cell<u32>> =
                        (0..scratch_quads(k, nb)).map(|_| Cell::new(0)).collect();
                    let panels = 0..n.div_ceil(NR);
                    let (lanes, rows) = if unsigned {
                        product(isa, &mats_u, &scratch, panels, sink);
                        (&mats_u.lanes, &mats_u.rows)
                    } else {
                        product(isa, &mats_s, &scratch, panels, sink);
                        (&mats_s.lanes, &mats_s.rows)
                    };
                    // Except the tiles of a last panel of a few lanes
                    // against rows read in place (`narrow`).
                    let last = n - (n - 1) / NR * NR;
                    let narrow = mats_u.direct && k % 4 == 0 && last < NR && last <= 4;
                    let narrow_tiles = if narrow { m / MR } else { 0 };
                    if isa == Isa::Vnni && !partial {
                        assert_eq!(tiles.get(), narrow_tiles, "case {case}: every group fused");
                    }
                    let mut want: Vec<u8> = alloc::vec![0x5a; len];
                    for (i, &(o, line)) in lines.iter().enumerate() {
                        for j in 0..n {
                            let (x, w) = (&lanes[j * k..][..k], &rows[i * k..][..k]);
                            let raw = x.iter().zip(w).fold(0i32, |s, (&x, &w)| {
                                s.wrapping_add(value(x, unsigned) * value(w, !unsigned))
                            });
                            let lane = x
                                .iter()
                                .fold(0i32, |s, &x| s.wrapping_add(value(x, unsigned)));
                            let acc = raw
                                .wrapping_sub(line.m.wrapping_mul(lane))
                                .wrapping_add(line.c);
                            let y = crate::kernels::qlinear::requantize(
                                acc, line.scale, line.zero, line.range,
                            );
                            want[o + j] = y as u8;
                        }
                    }
                    let got: Vec<u8> = out.iter().map(Cell::get).collect();
                    assert_eq!(
                        got, want,
                        "{isa:?} case {case} {m}x{n}x{k} nb {nb} unsigned {unsigned}"
                    );
                }
            }
        }
    }
}

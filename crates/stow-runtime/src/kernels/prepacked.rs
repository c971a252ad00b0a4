//! Products whose weight operand the compiler stored already packed.
//!
//! A convolution's kernel is the left operand (A) of its product and a
//! `MatMul`'s weight the right one (B). Packing them into the panels the
//! micro-kernel reads cost a tenth of resnet50's run time, repeated on
//! every run, for every block of columns and on every thread. A bundle
//! compiled with packed weights stores them in that layout once, ahead of
//! time; the product then reads its panels straight from the mapping.
//!
//! The layout ([`Panels`]) is a permutation of the weight's elements, so
//! the tensor keeps its record (shape and size) and the weight section
//! stays one copy of every weight. Within a depth block, a panel holding
//! fewer than `width` rows (the matrix's last) is stored with as many rows
//! as it has; the kernels widen it into their scratch (a panel of
//! `width × kc` ahead of the other operand's block), so no stack buffer
//! larger than the one of the smallest blocks is needed.
//!
//! The sums are those of the unpacked product with the same depth block.
//! The compiler packs with the depth block the unpacked kernel would use
//! under the same scratch budget ([`gemm::depth_within`]), so a bundle with
//! packed weights computes bit for bit what one without computes.

use super::cells::Load;
use super::gemm::{
    self, micro_kernel, micro_kernel_pair, micro_kernel_quad, round_up, Dst, OnStack, PackA, PackB,
    MC, MR, NC, NR, STACK_FLOATS,
};
use super::qlinear::igemm;
use alloc::vec::Vec;
use core::cell::Cell;
use core::ops::Range;

pub use stow_bundle::format::{PACKED_ATTR, PACKED_LEFT_ATTR};

/// Which operand of its product a packed weight is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The left operand: panels of [`MR`] rows (a convolution's kernel).
    Left,
    /// The right operand: panels of [`NR`] columns (a `MatMul` weight).
    Right,
    /// The lanes of a quantized product ([`super::qlinear::igemm`]): one
    /// byte per element, panels of [`igemm::NR`] columns, the depth in
    /// quads of four bytes per column, never cut into blocks.
    Quads,
}

impl Side {
    /// Rows (columns for B) per panel.
    pub fn width(self) -> usize {
        match self {
            Side::Left => MR,
            Side::Right => NR,
            Side::Quads => igemm::NR,
        }
    }

    /// Panel width of the other operand, which the kernel packs into its
    /// scratch at run time.
    pub fn other_width(self) -> usize {
        match self {
            Side::Left => NR,
            Side::Right => MR,
            Side::Quads => igemm::MR,
        }
    }
}

/// Where a product's weight matrices sit in the weight tensor and how they
/// are packed.
///
/// The weight holds `matrices` matrices (a grouped convolution's groups)
/// of `rows` panel-split lines (A's rows, B's columns) by `depth` (the
/// product's k). In the source (row-major) tensor, element (matrix `g`,
/// line `r`, depth `d`) is at `g·strides[0] + r·strides[1] + d·strides[2]`.
/// Packed, depth is cut into blocks of `kc` (the last may be shorter) and
/// lines into panels of `side.width()`; see [`Panels::index`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Panels {
    /// Which operand.
    pub side: Side,
    /// Matrices, one after another.
    pub matrices: usize,
    /// Lines of each matrix split into panels.
    pub rows: usize,
    /// Depth of the product.
    pub depth: usize,
    /// Source strides: matrix, line, depth.
    pub strides: [usize; 3],
    /// Depth block, `1..=depth`.
    pub kc: usize,
}

impl Panels {
    /// The layout of convolution `s`'s kernel (O·I/g·KH·KW: each group's
    /// output channels by its depth) as the left operand of the group's
    /// product, with depth block `kc` as given.
    pub fn of_conv(s: &super::linalg::ConvShape, kc: usize) -> Panels {
        let (m, k) = (s.out_per_group, s.k());
        Panels {
            side: Side::Left,
            matrices: s.groups,
            rows: m,
            depth: k,
            strides: [m * k, k, 1],
            kc,
        }
    }

    /// The layout with depth block `kc` (clamped to the depth).
    pub fn with_depth_block(self, kc: usize) -> Panels {
        Panels {
            kc: kc.clamp(1, self.depth.max(1)),
            ..self
        }
    }

    /// Elements of the weight.
    pub fn len(&self) -> usize {
        self.matrices * self.rows * self.depth
    }

    /// True for an empty weight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Packed position of element (matrix `g`, line `r`, depth `d`):
    /// matrices one after another; in each, depth blocks one after
    /// another; in a block, panels of `width` lines one after another; in
    /// a panel, depth-major (`d`, then the panel's lines).
    pub fn index(&self, g: usize, r: usize, d: usize) -> usize {
        let width = self.side.width();
        if self.side == Side::Quads {
            // Quads of the depth one after another; in a quad, each
            // line's (up to) four bytes. A full panel of a depth in whole
            // quads is then exactly what the int8 kernels read.
            let (panel, rr) = (r / width, r % width);
            let lines = width.min(self.rows - panel * width);
            let (quad, dd) = (d / 4, d % 4);
            let depths = 4.min(self.depth - 4 * quad);
            return g * self.rows * self.depth
                + panel * width * self.depth
                + 4 * quad * lines
                + rr * depths
                + dd;
        }
        let (block, dd) = (d / self.kc, d % self.kc);
        let kcb = self.kc.min(self.depth - block * self.kc);
        let (panel, rr) = (r / width, r % width);
        let lines = width.min(self.rows - panel * width);
        g * self.rows * self.depth
            + block * self.kc * self.rows
            + panel * width * kcb
            + dd * lines
            + rr
    }

    fn source(&self, g: usize, r: usize, d: usize) -> usize {
        g * self.strides[0] + r * self.strides[1] + d * self.strides[2]
    }

    /// The weight `src` (row-major, as the model holds it) in this layout.
    pub fn pack<T: Copy + Default>(&self, src: &[T]) -> Option<Vec<T>> {
        self.permute(src, true)
    }

    /// The row-major weight back from its packed form.
    pub fn unpack<T: Copy + Default>(&self, packed: &[T]) -> Option<Vec<T>> {
        self.permute(packed, false)
    }

    /// True when the source strides walk every element of a dense tensor
    /// of [`Panels::len`] elements exactly once.
    pub fn is_dense(&self) -> bool {
        let mut axes = [
            (self.matrices, self.strides[0]),
            (self.rows, self.strides[1]),
            (self.depth, self.strides[2]),
        ];
        axes.sort_by_key(|&(size, stride)| (size > 1, stride));
        let mut expected = 1;
        for (size, stride) in axes {
            if size > 1 {
                if stride != expected {
                    return false;
                }
                expected *= size;
            }
        }
        true
    }

    fn permute<T: Copy + Default>(&self, from: &[T], packing: bool) -> Option<Vec<T>> {
        if from.len() != self.len() || self.kc == 0 || !self.is_dense() {
            return None;
        }
        let mut to = alloc::vec![T::default(); self.len()];
        for g in 0..self.matrices {
            for r in 0..self.rows {
                for d in 0..self.depth {
                    let (s, p) = (self.source(g, r, d), self.index(g, r, d));
                    let (i, o) = if packing { (s, p) } else { (p, s) };
                    to[o] = from[i];
                }
            }
        }
        Some(to)
    }
}

/// Floats of scratch per thread a product with packed weight `p` needs for
/// `other` lines of the other operand (n for a left weight, m for a right
/// one): the weight's short last panel widened, then one block of the
/// other operand.
pub fn scratch_elems(p: &Panels, other: usize) -> usize {
    let (width, most) = match p.side {
        Side::Left => (NR, NC),
        Side::Right => (MR, MC),
        // Not a float kernel's: the int8 product plans its own scratch.
        Side::Quads => (igemm::MR, MC),
    };
    p.side.width() * p.kc + round_up(other.clamp(1, most), width) * p.kc
}

/// Floats of the smallest scratch a product with packed weight `p` runs
/// in: one panel of each operand.
fn least(p: &Panels) -> usize {
    (MR + NR) * p.kc
}

/// True when a kernel given `floats` of scratch can run with `p`: room
/// for one panel of each operand there, or on the stack.
pub fn fits(p: &Panels, floats: usize) -> bool {
    floats >= least(p) || least(p) <= STACK_FLOATS
}

/// Deepest depth block [`gemm_left`] walks row panel by row panel: its
/// packed B block (`NC × SHALLOW_KC` floats, 32 KiB) stays in L1.
const SHALLOW_KC: usize = 32;

/// Lines of the other operand per block for `floats` of scratch (at most
/// `most`, whole panels, at least one panel).
fn block_lines(p: &Panels, lines: usize, most: usize, floats: usize) -> usize {
    let width = p.side.other_width();
    let full = lines.clamp(1, most);
    if round_up(full, width) * p.kc <= floats {
        full
    } else {
        (floats / p.kc / width * width).max(width).min(full)
    }
}

/// Copies the short last panel of a block (`lines` < `width` lines,
/// `kcb` deep) into `tail`, widened to `width` lines with zeros.
pub(crate) fn widen_tail<L: Load<f32>>(
    a: L,
    at: usize,
    lines: usize,
    width: usize,
    kcb: usize,
    tail: &[Cell<f32>],
) {
    for d in 0..kcb {
        for r in 0..width {
            tail[d * width + r].set(if r < lines {
                a.load(at + d * lines + r)
            } else {
                0.0
            });
        }
    }
}

/// Two parts of one buffer of cells.
pub(crate) type Halves<'s> = (&'s [Cell<f32>], &'s [Cell<f32>]);

/// The scratch split into the widened tail panel (`width × kc`) and the
/// rest, on the stack when the planned scratch is short of one panel of
/// each operand (then `kc` is at most `KC_MIN`, which setup checked).
pub(crate) fn split<'s>(
    p: &Panels,
    scratch: &'s [Cell<f32>],
    on_stack: &'s OnStack,
) -> Option<Halves<'s>> {
    let room = if scratch.len() < least(p) {
        on_stack.room()
    } else {
        scratch
    };
    (room.len() >= least(p)).then(|| room.split_at(p.side.width() * p.kc))
}

/// Rows of C thread `part` of `parts` computes when a product is split by
/// rows: consecutive ranges of whole `MR`-row panels.
pub fn row_share(m: usize, part: usize, parts: usize) -> Range<usize> {
    let panels = m.div_ceil(MR);
    let per = panels.div_ceil(parts.max(1));
    (part * per * MR).min(m)..((part + 1) * per * MR).min(m)
}

/// The rows and columns of an `m × n` product with a packed left weight
/// that thread `part` of `parts` computes. Split by columns, every thread
/// streams the whole weight through its cache; split by rows, each reads
/// half the weight but packs all of the right operand. Rows win where the
/// weight has at least twice as many rows as the product has columns
/// (resnet50's last stage: 512 or 2048 rows against 49 positions; split by
/// columns, both threads read all 9.4 MB of a 3×3 512→512 kernel, and the
/// steps ran 1.2–1.3 times as fast on two threads as on one), and already
/// where it has as many rows as columns when the right operand costs no
/// more than a copy to pack (`cheap_right`: an image read in place or by
/// rows, not im2col's taps): resnet50's 14 × 14 stage ran its 256-row
/// products 7–8 % faster on two threads by rows.
pub fn left_shares(
    m: usize,
    n: usize,
    (part, parts): (usize, usize),
    cheap_right: bool,
) -> (Range<usize>, Range<usize>) {
    if parts > 1 && (m >= 2 * n || (cheap_right && m >= n)) {
        (row_share(m, part, parts), 0..n)
    } else {
        (0..m, gemm::share(n, part, parts))
    }
}

/// `C[m × n] += A · B` (or `=` with `c.start`, see [`gemm::gemm`]) over
/// columns `cols` and rows `lines` (whole panels of `MR` but for the
/// last: see [`row_share`]), A being matrix `g` of the packed left weight
/// `a` (`p.rows × p.depth`) and B packed into `scratch` from `b` block by
/// block.
#[allow(clippy::too_many_arguments)]
pub fn gemm_left<L: Load<f32>>(
    p: &Panels,
    g: usize,
    a: L,
    n: usize,
    b: &impl PackB,
    c: &Dst<'_>,
    scratch: &[Cell<f32>],
    (lines, cols): (Range<usize>, Range<usize>),
) {
    let (m, k, kc) = (p.rows, p.depth, p.kc);
    let end = cols.end.min(n);
    let last = lines.end.min(m);
    if m == 0 || k == 0 || cols.start >= end || lines.start >= last {
        return;
    }
    if !lines.start.is_multiple_of(MR) {
        debug_assert!(false, "a row share that starts inside a panel");
        return;
    }
    let on_stack = OnStack::default();
    let Some((tail, bpack)) = split(p, scratch, &on_stack) else {
        debug_assert!(
            false,
            "setup admitted a depth block deeper than the scratch"
        );
        return;
    };
    let nc_block = block_lines(p, end - cols.start, NC, bpack.len());
    let isa = gemm::Isa::detect();
    let base = p.index(g, 0, 0);
    for j0 in (cols.start..end).step_by(nc_block) {
        let nc = nc_block.min(end - j0);
        for p0 in (0..k).step_by(kc) {
            let kcb = kc.min(k - p0);
            b.pack(p0, kcb, j0, nc, bpack);
            let c = &c.at_block(p0 + kcb == k);
            let finish = c.finish;
            let block = base + p0 * m;
            let short = m % MR;
            if short != 0 && last == m {
                let at = block + (m - short) * kcb;
                widen_tail(a, at, short, MR, kcb, tail);
            }
            let panel = |c0: usize, q: usize| {
                let q = (c0 / NR + q).min(nc.div_ceil(NR) - 1);
                &bpack[q * kcb * NR..(q + 1) * kcb * NR]
            };
            let tile = |r0: usize, c0: usize| {
                let b = (panel(c0, 0), panel(c0, 1));
                let rows = MR.min(m - r0);
                let (at, size) = ((r0, j0 + c0), (rows, (2 * NR).min(nc - c0)));
                let end = (c.start.at(p0, r0, rows), finish);
                if rows == MR {
                    let a = a.sub(block + r0 * kcb, kcb * MR);
                    micro_kernel_pair(isa, kcb, a, b, c, at, size, end);
                } else {
                    let a = &tail[..kcb * MR];
                    micro_kernel_pair(isa, kcb, a, b, c, at, size, end);
                }
            };
            if kcb <= SHALLOW_KC {
                // The packed blocks of a shallow product sit in L1 however
                // they are walked; two row panels at a time, C is written
                // as 2·MR sequential runs of the block's width instead of
                // one tile of each of MC rows in turn (up to 72
                // interleaved runs, more than the hardware prefetcher
                // follows).
                let mut r0 = lines.start;
                while r0 < last {
                    if r0 + 2 * MR > last {
                        for c0 in (0..nc).step_by(2 * NR) {
                            tile(r0, c0);
                        }
                        r0 += MR;
                        continue;
                    }
                    // Two whole weight panels per pass, each B vector
                    // loaded once for twelve rows: one pass per tile of six
                    // rows spent as long on loads and its epilogue as on
                    // its sums at depths 16–32.
                    let a = [0, MR].map(|d| a.sub(block + (r0 + d) * kcb, kcb * MR));
                    let ends = [0, MR].map(|d| (c.start.at(p0, r0 + d, MR), finish));
                    for c0 in (0..nc).step_by(2 * NR) {
                        if 2 * NR > nc - c0 {
                            tile(r0, c0);
                            tile(r0 + MR, c0);
                            continue;
                        }
                        let b = (panel(c0, 0), panel(c0, 1));
                        micro_kernel_quad(isa, kcb, a, b, c, (r0, j0 + c0), 2 * NR, ends);
                    }
                    r0 += 2 * MR;
                }
                continue;
            }
            for i0 in (lines.start..last).step_by(MC) {
                let mc = MC.min(last - i0);
                for c0 in (0..nc).step_by(2 * NR) {
                    let mut r0 = i0;
                    while r0 < i0 + mc {
                        if r0 + 2 * MR > i0 + mc || 2 * NR > nc - c0 {
                            tile(r0, c0);
                            r0 += MR;
                            continue;
                        }
                        // Two whole weight panels against two B panels.
                        let b = (panel(c0, 0), panel(c0, 1));
                        let a = [0, MR].map(|d| a.sub(block + (r0 + d) * kcb, kcb * MR));
                        let ends = [0, MR].map(|d| (c.start.at(p0, r0 + d, MR), finish));
                        micro_kernel_quad(isa, kcb, a, b, c, (r0, j0 + c0), 2 * NR, ends);
                        r0 += 2 * MR;
                    }
                }
            }
        }
    }
}

/// `C[m × n] += A · B` (or `=`, as [`gemm_left`]) over columns `cols`, B being the packed right
/// weight `b` (`p.depth × p.rows`, one matrix) and A packed into
/// `scratch` block by block.
pub fn gemm_right<L: Load<f32>>(
    p: &Panels,
    m: usize,
    a: &impl PackA,
    b: L,
    c: &Dst<'_>,
    scratch: &[Cell<f32>],
    cols: Range<usize>,
) {
    let (n, k, kc) = (p.rows, p.depth, p.kc);
    let end = cols.end.min(n);
    if m == 0 || k == 0 || cols.start >= end {
        return;
    }
    let on_stack = OnStack::default();
    let Some((tail, apack)) = split(p, scratch, &on_stack) else {
        debug_assert!(
            false,
            "setup admitted a depth block deeper than the scratch"
        );
        return;
    };
    let mc_block = block_lines(p, m, MC, apack.len());
    let isa = gemm::Isa::detect();
    let short = n % NR;
    for j0 in (cols.start..end).step_by(NC) {
        let nc = NC.min(end - j0);
        for p0 in (0..k).step_by(kc) {
            let kcb = kc.min(k - p0);
            let block = p0 * n;
            let c = &c.at_block(p0 + kcb == k);
            let finish = c.finish;
            let has_tail = short != 0 && j0 + nc == n;
            if has_tail {
                let at = block + (n - short) * kcb;
                widen_tail(b, at, short, NR, kcb, tail);
            }
            for i0 in (0..m).step_by(mc_block) {
                let mc = mc_block.min(m - i0);
                a.pack(i0, mc, p0, kcb, apack);
                for c0 in (j0..j0 + nc).step_by(2 * NR) {
                    let span = (2 * NR).min(j0 + nc - c0);
                    // Both panels whole weight panels (not the widened
                    // tail, which lives elsewhere).
                    let paired = span > NR && c0 + 2 * NR <= n;
                    for (ap, r0) in (0..mc).step_by(MR).enumerate() {
                        let apanel = &apack[ap * kcb * MR..(ap + 1) * kcb * MR];
                        let rows = MR.min(mc - r0);
                        let ends = (c.start.at(p0, i0 + r0, rows), finish);
                        if paired {
                            let panel = |c: usize| b.sub(block + c * kcb, kcb * NR);
                            let pair = (panel(c0), panel(c0 + NR));
                            let at = (i0 + r0, c0);
                            micro_kernel_pair(isa, kcb, apanel, pair, c, at, (rows, span), ends);
                            continue;
                        }
                        for c1 in (c0..c0 + span).step_by(NR) {
                            let width = NR.min(n - c1);
                            let (at, size) = ((i0 + r0, c1), (rows, width.min(end - c1)));
                            if width == NR {
                                let b = b.sub(block + c1 * kcb, kcb * NR);
                                micro_kernel(isa, kcb, apanel, b, c, at, size, ends);
                            } else {
                                let b = &tail[..kcb * NR];
                                micro_kernel(isa, kcb, apanel, b, c, at, size, ends);
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::gemm::{
        gemm_cols, scratch_elems as unpacked_scratch, Finish, Start, Strided,
    };

    fn value(i: usize, seed: usize) -> f32 {
        ((i * 2_654_435_761 + seed * 40_503) % 1000) as f32 / 500.0 - 1.0
    }

    /// Every element lands on its own packed position, and unpacking gives
    /// the weight back, for lines and depths around the panel and block
    /// sizes, several matrices, and both sides.
    #[test]
    fn packing_is_a_permutation_and_unpacks() {
        for side in [Side::Left, Side::Right] {
            for &(matrices, rows, depth, kc) in &[
                (1, 1, 1, 256),
                (1, 7, 3, 256),
                (2, 13, 300, 256),
                (3, 17, 40, 16),
                (1, 64, 576, 256),
                (1, 5, 33, 32),
            ] {
                let p = Panels {
                    side,
                    matrices,
                    rows,
                    depth,
                    strides: [rows * depth, depth, 1],
                    kc: 0,
                }
                .with_depth_block(kc);
                let src: Vec<f32> = (0..p.len()).map(|i| i as f32).collect();
                let packed = p.pack(&src).expect("a permutation");
                let mut sorted = packed.clone();
                sorted.sort_by(f32::total_cmp);
                assert_eq!(sorted, src, "{side:?} {matrices}×{rows}×{depth}");
                assert_eq!(p.unpack(&packed).expect("unpacks"), src);
            }
        }
    }

    /// Strides that do not walk every element once are refused.
    #[test]
    fn overlapping_strides_are_refused() {
        let p = Panels {
            side: Side::Right,
            matrices: 1,
            rows: 4,
            depth: 4,
            strides: [0, 1, 1],
            kc: 4,
        };
        assert!(p.pack(&[0.0; 16]).is_none());
        assert!(p.pack(&[0.0; 15]).is_none());
    }

    /// The product with a packed left weight gives the bytes of the
    /// product that packs the same weight at run time with the same depth
    /// block, over thread shares and scratch down to none.
    #[test]
    fn packed_left_equals_the_unpacked_product() {
        for &(m, n, k) in &[
            (7, 40, 300),
            (64, 100, 27),
            (6, 17, 256),
            (13, 300, 40),
            (151, 20, 300),
            (151, 70, 300),
            (100, 30, 20),
        ] {
            let a: Vec<f32> = (0..m * k).map(|i| value(i, 1)).collect();
            let b: Vec<f32> = (0..k * n).map(|i| value(i, 2)).collect();
            let sa = Strided {
                data: a.as_slice(),
                offset: 0,
                rs: k,
                cs: 1,
                rows: m,
                cols: k,
            };
            let sb = Strided {
                data: b.as_slice(),
                offset: 0,
                rs: n,
                cs: 1,
                rows: k,
                cols: n,
            };
            let mut want = vec![0f32; m * n];
            let cells = Cell::from_mut(want.as_mut_slice()).as_slice_of_cells();
            let dst = Dst {
                data: cells,
                offset: 0,
                rs: n,
                cs: 1,
                finish: Default::default(),
                start: Start::Add,
                residual: None,
            };
            let mut scratch = vec![0f32; unpacked_scratch(m, n, k)];
            let s = Cell::from_mut(scratch.as_mut_slice()).as_slice_of_cells();
            gemm_cols(m, n, k, &sa, &sb, &dst, s, 0..n);
            let p = Panels {
                side: Side::Left,
                matrices: 1,
                rows: m,
                depth: k,
                strides: [m * k, k, 1],
                kc: 0,
            }
            .with_depth_block(gemm::KC);
            let packed = p.pack(&a).unwrap();
            for (parts, by_rows) in [(1, false), (2, false), (3, false), (2, true), (3, true)] {
                for floats in [scratch_elems(&p, n), (MR + NR) * p.kc, 0] {
                    let mut got = vec![0f32; m * n];
                    let cells = Cell::from_mut(got.as_mut_slice()).as_slice_of_cells();
                    let dst = Dst {
                        data: cells,
                        offset: 0,
                        rs: n,
                        cs: 1,
                        finish: Default::default(),
                        start: Start::Add,
                        residual: None,
                    };
                    let mut scratch = vec![0f32; floats];
                    let s = Cell::from_mut(scratch.as_mut_slice()).as_slice_of_cells();
                    if !fits(&p, floats) {
                        continue;
                    }
                    for part in 0..parts {
                        let lines = if by_rows {
                            (row_share(m, part, parts), 0..n)
                        } else {
                            (0..m, gemm::share(n, part, parts))
                        };
                        gemm_left(&p, 0, packed.as_slice(), n, &sb, &dst, s, lines);
                    }
                    let what = if by_rows { "rows" } else { "columns" };
                    assert_eq!(
                        got, want,
                        "{m}×{n}×{k}, {parts} shares by {what}, {floats} floats"
                    );
                }
            }
        }
    }

    /// The same for a packed right weight, read transposed (`nk`) or not.
    #[test]
    fn packed_right_equals_the_unpacked_product() {
        for &(m, n, k) in &[(7, 40, 300), (64, 100, 27), (2, 17, 256), (80, 300, 40)] {
            for transposed in [false, true] {
                let a: Vec<f32> = (0..m * k).map(|i| value(i, 3)).collect();
                let b: Vec<f32> = (0..k * n).map(|i| value(i, 4)).collect();
                let (rs, cs) = if transposed { (1, k) } else { (n, 1) };
                let sa = Strided {
                    data: a.as_slice(),
                    offset: 0,
                    rs: k,
                    cs: 1,
                    rows: m,
                    cols: k,
                };
                let sb = Strided {
                    data: b.as_slice(),
                    offset: 0,
                    rs,
                    cs,
                    rows: k,
                    cols: n,
                };
                let mut want = vec![0f32; m * n];
                let cells = Cell::from_mut(want.as_mut_slice()).as_slice_of_cells();
                let dst = Dst {
                    data: cells,
                    offset: 0,
                    rs: n,
                    cs: 1,
                    finish: Default::default(),
                    start: Start::Add,
                    residual: None,
                };
                let mut scratch = vec![0f32; unpacked_scratch(m, n, k)];
                let s = Cell::from_mut(scratch.as_mut_slice()).as_slice_of_cells();
                gemm_cols(m, n, k, &sa, &sb, &dst, s, 0..n);
                let p = Panels {
                    side: Side::Right,
                    matrices: 1,
                    rows: n,
                    depth: k,
                    strides: [0, cs, rs],
                    kc: 0,
                }
                .with_depth_block(gemm::KC);
                let packed = p.pack(&b).unwrap();
                for parts in 1..=3 {
                    for floats in [scratch_elems(&p, m), (MR + NR) * p.kc, 0] {
                        if !fits(&p, floats) {
                            continue;
                        }
                        let mut got = vec![0f32; m * n];
                        let cells = Cell::from_mut(got.as_mut_slice()).as_slice_of_cells();
                        let dst = Dst {
                            data: cells,
                            offset: 0,
                            rs: n,
                            cs: 1,
                            finish: Default::default(),
                            start: Start::Add,
                            residual: None,
                        };
                        let mut scratch = vec![0f32; floats];
                        let s = Cell::from_mut(scratch.as_mut_slice()).as_slice_of_cells();
                        for part in 0..parts {
                            let cols = gemm::share(n, part, parts);
                            gemm_right(&p, m, &sa, packed.as_slice(), &dst, s, cols);
                        }
                        assert_eq!(
                            got, want,
                            "{m}×{n}×{k} transposed {transposed}, {parts} shares, {floats} floats"
                        );
                    }
                }
            }
        }
    }

    /// A small deterministic generator (xorshift), so failures replay.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        /// Mostly values in [-1, 1), with exact and negative zeros.
        fn value(&mut self) -> f32 {
            match self.below(16) {
                0 => 0.0,
                1 => -0.0,
                _ => (self.below(2001) as f32 - 1000.0) / 997.0,
            }
        }
    }

    /// Storing the first depth block (`Start::Store`, with no bias, one
    /// bias for all rows, or one per row) gives the bytes of filling C
    /// with the bias and adding every block, whatever C held before: for
    /// the unpacked product and both packed ones, C by rows and by
    /// columns, with and without a clamp, thread shares and short
    /// scratch, on random shapes with ragged edges (m, n not multiples of
    /// the tile, k across depth blocks).
    #[test]
    fn stored_first_block_equals_fill_then_add() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let clamp = Finish::Clamp(gemm::Clamp {
            lo: 0.0,
            hi: 6.0,
            max_first: true,
        });
        for case in 0..60 {
            let m = 1 + rng.below(if case % 3 == 0 { 90 } else { 20 });
            let n = 1 + rng.below(if case % 4 == 0 { 300 } else { 40 });
            let k = 1 + rng.below(if case % 5 == 0 { 600 } else { 70 });
            let a: Vec<f32> = (0..m * k).map(|_| rng.value()).collect();
            let b: Vec<f32> = (0..k * n).map(|_| rng.value()).collect();
            let bias: Vec<f32> = (0..m + 3).map(|_| rng.value()).collect();
            let at = rng.below(4);
            let sa = Strided {
                data: a.as_slice(),
                offset: 0,
                rs: k,
                cs: 1,
                rows: m,
                cols: k,
            };
            let sb = Strided {
                data: b.as_slice(),
                offset: 0,
                rs: n,
                cs: 1,
                rows: k,
                cols: n,
            };
            let left = Panels {
                side: Side::Left,
                matrices: 1,
                rows: m,
                depth: k,
                strides: [m * k, k, 1],
                kc: 0,
            }
            .with_depth_block(gemm::KC);
            let right = Panels {
                side: Side::Right,
                matrices: 1,
                rows: n,
                depth: k,
                strides: [0, 1, n],
                kc: 0,
            }
            .with_depth_block(gemm::KC);
            let (pa, pb) = (left.pack(&a).unwrap(), right.pack(&b).unwrap());
            let biases: [(Option<&[f32]>, usize); 3] =
                [(None, 0), (Some(&bias[..1]), 0), (Some(&bias[..]), at)];
            for (bias, at) in biases {
                let row_bias = |i: usize| match bias {
                    None => 0.0,
                    Some(b) if b.len() == 1 => b[0],
                    Some(b) => b[at + i],
                };
                for finish in [Finish::Keep, clamp] {
                    for by_columns in [false, true] {
                        let (rs, cs) = if by_columns { (1, m) } else { (n, 1) };
                        let run = |kind: usize, store: bool, parts: usize, floats: usize| {
                            let mut c = vec![0f32; m * n];
                            for i in 0..m {
                                for j in 0..n {
                                    c[i * rs + j * cs] = if store {
                                        // Whatever was there before.
                                        [f32::NAN, 1e30, -0.0][(i + j) % 3]
                                    } else {
                                        row_bias(i)
                                    };
                                }
                            }
                            let cells = Cell::from_mut(c.as_mut_slice()).as_slice_of_cells();
                            let start = if store {
                                Start::Store(bias.map(crate::kernels::cells::Src::Weight), at)
                            } else {
                                Start::Add
                            };
                            let dst = Dst {
                                data: cells,
                                offset: 0,
                                rs,
                                cs,
                                finish,
                                start,
                                residual: None,
                            };
                            let mut scratch = vec![0f32; floats];
                            let s = Cell::from_mut(scratch.as_mut_slice()).as_slice_of_cells();
                            for part in 0..parts {
                                let cols = gemm::share(n, part, parts);
                                match kind {
                                    0 => gemm_cols(m, n, k, &sa, &sb, &dst, s, cols),
                                    1 => gemm_left(
                                        &left,
                                        0,
                                        pa.as_slice(),
                                        n,
                                        &sb,
                                        &dst,
                                        s,
                                        (0..m, cols),
                                    ),
                                    _ => gemm_right(&right, m, &sa, pb.as_slice(), &dst, s, cols),
                                }
                            }
                            c.iter().map(|x| x.to_bits()).collect::<Vec<u32>>()
                        };
                        for kind in 0..3 {
                            let full = match kind {
                                0 => unpacked_scratch(m, n, k),
                                1 => scratch_elems(&left, n),
                                _ => scratch_elems(&right, m),
                            };
                            for (parts, floats) in [(1, full), (2, full), (3, full / 3)] {
                                let p = if kind == 2 { &right } else { &left };
                                if kind != 0 && !fits(p, floats) {
                                    continue;
                                }
                                // The scratch may set the depth block of
                                // the unpacked product: compare like with
                                // like.
                                let want = run(kind, false, 1, floats);
                                let got = run(kind, true, parts, floats);
                                assert_eq!(
                                    got,
                                    want,
                                    "{m}×{n}×{k}, product {kind}, bias {:?}/{at}, {finish:?}, \
                                     by columns {by_columns}, {parts} shares, {floats} floats",
                                    bias.map(|b| b.len())
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

//! The packed path of [`super::QConv`] and [`super::QProduct`]: their
//! operands as [`igemm::Operands`], the zero points folded back in, and
//! the requantisation of the reference path applied to each element.
//!
//! It computes what the reference loops compute, bit for bit (the sums
//! modulo 2³², then the same [`super::requantize`]); it declines (returns
//! `false`, the caller then runs the reference loops) where the scratch
//! is short of one panel, where a convolution's padding value (a's zero
//! point as a byte) is not a byte, and where a product's expression is not
//! one of rows × lanes summed over one axis with b the same for every row.

use super::epilogue::{self, Line};
use super::igemm::{self, Done, Epilogue, Isa, Operands, Rows, MR, NR};
use super::{Channels, Out, QProduct, Requant};
use crate::kernels::cells::{Load, Src};
use crate::kernels::contract::Contraction;
use crate::kernels::prepacked::{Panels, Side};
use alloc::vec::Vec;
use core::cell::Cell;
use core::ops::Range;

/// `$planned` (scratch quads) if it holds one panel of depth `$k`, else
/// a stack buffer made (and zeroed) in the caller's frame in `$on_stack`
/// only then; returns `false` from the caller if neither holds one.
macro_rules! scratch_or_stack {
    ($k:expr, $planned:expr, $on_stack:ident) => {{
        let planned = $planned;
        if igemm::panels_per_block($k, planned.len()) > 0 {
            planned
        } else {
            $on_stack = stack();
            if igemm::panels_per_block($k, $on_stack.len()) == 0 {
                return false;
            }
            &$on_stack[..]
        }
    }};
}

mod conv;

/// How the stored bytes of a and b become the kernel's u8 and i8 (module
/// doc of [`igemm`]).
#[derive(Clone, Copy)]
pub(super) struct Domains {
    /// XOR applied to a's bytes: 0x80 when a is i8.
    a_flip: u8,
    /// XOR applied to b's bytes: 0x80 when b is u8.
    b_flip: u8,
}

impl Domains {
    pub(super) fn new(a_signed: bool, b_signed: bool) -> Domains {
        Domains {
            a_flip: if a_signed { 0x80 } else { 0 },
            b_flip: if b_signed { 0 } else { 0x80 },
        }
    }

    /// The XOR of a's bytes and of b's.
    pub(super) fn flips(self) -> (u8, u8) {
        (self.a_flip, self.b_flip)
    }

    /// a's zero point on the u8 side.
    pub(super) fn a0(self, a0: i32) -> i32 {
        if self.a_flip != 0 {
            a0.wrapping_add(128)
        } else {
            a0
        }
    }

    /// b's zero point on the i8 side.
    pub(super) fn b0(self, b0: i32) -> i32 {
        if self.b_flip != 0 {
            b0.wrapping_sub(128)
        } else {
            b0
        }
    }
}

/// `Σ (a − a0)(b − b0)` from the raw sum and the sums of each side (all
/// modulo 2³²), with `a0`, `b0` already on the kernel's sides.
#[inline]
fn centred(raw: i32, sum_a: i32, sum_b: i32, k: usize, a0: i32, b0: i32) -> i32 {
    let k = k as i32; // modulo 2³², like every other term
    raw.wrapping_sub(b0.wrapping_mul(sum_a))
        .wrapping_sub(a0.wrapping_mul(sum_b))
        .wrapping_add(k.wrapping_mul(a0).wrapping_mul(b0))
}

/// The constant part of [`centred`] for a row whose sum is `row_sum`:
/// what [`epilogue::Line`] adds to `raw − m·lane_sum`, `m` being the
/// rows' side's zero point and `x` the lanes' side's.
#[inline]
fn folded(row_sum: i32, k: usize, x: i32, m: i32) -> i32 {
    let k = k as i32; // modulo 2³²
    k.wrapping_mul(x)
        .wrapping_mul(m)
        .wrapping_sub(x.wrapping_mul(row_sum))
}

/// Rows whose lines a call keeps ([`RowLines`]): 32 KiB of stack.
const CACHED_ROWS: usize = 1024;

/// The [`Line`] of each row of one call, computed the first time a block
/// reaches the row's group and kept for the other blocks (a row's channel
/// look-up divides, and every block of panels visits every row again);
/// rows past [`CACHED_ROWS`] are computed each time, as before.
struct RowLines {
    lines: [(usize, Line); CACHED_ROWS],
    /// Whether group `i0 / MR`'s lines are in `lines`.
    known: [bool; CACHED_ROWS / MR],
}

impl RowLines {
    fn new() -> RowLines {
        RowLines {
            lines: [(0, Line::ZERO); CACHED_ROWS],
            known: [false; CACHED_ROWS / MR],
        }
    }

    /// Forgets every line, for another product.
    fn clear(&mut self) {
        self.known = [false; CACHED_ROWS / MR];
    }

    /// The lines of rows `i0..i0 + rows` (`i0` a multiple of [`MR`]),
    /// `line(i)` computing row `i`'s where they are not kept yet.
    #[inline]
    fn of(
        &mut self,
        i0: usize,
        rows: usize,
        line: impl FnMut(usize) -> (usize, Line),
    ) -> [(usize, Line); MR] {
        let mut out = [(0, Line::ZERO); MR];
        self.of_into(i0, rows, line, &mut out);
        out
    }

    /// [`RowLines::of`] written into `out`.
    #[inline]
    fn of_into(
        &mut self,
        i0: usize,
        rows: usize,
        mut line: impl FnMut(usize) -> (usize, Line),
        out: &mut [(usize, Line); MR],
    ) {
        let g = i0 / MR;
        if let Some(kept) = self.lines.get(i0..i0 + MR).filter(|_| self.known[g]) {
            out.copy_from_slice(kept);
            return;
        }
        for (r, o) in out.iter_mut().enumerate() {
            *o = if r < rows {
                line(i0 + r)
            } else {
                (0, Line::ZERO)
            };
        }
        if let Some(kept) = self.lines.get_mut(i0..i0 + MR) {
            kept.copy_from_slice(out);
            self.known[g] = true;
        }
    }
}

/// The epilogue of a product: with `line` (every row of one channel),
/// row `i` whose sum is `row_sum` has `line(i, row_sum)` (its offset of
/// lane 0 and [`Line`], kept per group of rows in [`RowLines`]) and is
/// requantised in the kernel where it can be ([`Epilogue::rows`]), else
/// from its tile by [`epilogue::tile`]; without, each tile goes to
/// `other`.
struct Sink<'r, 'o, F, G> {
    isa: Isa,
    out: &'r Out<'o>,
    /// Rows and lanes of the product.
    rows: usize,
    lanes: usize,
    /// Borrowed, not owned: the sink is moved into the product by value,
    /// and 32 KiB of lines with it were copied on every call.
    lines: &'r mut RowLines,
    line: Option<F>,
    other: G,
}

impl<F: FnMut(usize, i32) -> (usize, Line), G> Sink<'_, '_, F, G> {
    /// The lines of rows `i0..` (and how many of the group's rows are in
    /// the product), `None` without `line`.
    #[inline]
    fn lines(&mut self, i0: usize, row_sums: &[i32; MR]) -> Option<([(usize, Line); MR], usize)> {
        let line = self.line.as_mut()?;
        let rows = MR.min(self.rows - i0);
        Some((self.lines.of(i0, rows, |i| line(i, row_sums[i - i0])), rows))
    }
}

impl<'o, F: FnMut(usize, i32) -> (usize, Line), G: FnMut(Done<'_>)> Epilogue<'o>
    for Sink<'_, 'o, F, G>
{
    fn rows(&mut self, i0: usize, row_sums: &[i32; MR], to: &mut Rows<'o>) -> bool {
        let (Some(out), Some(line)) = (epilogue::bytes(self.out), self.line.as_mut()) else {
            return false;
        };
        let count = MR.min(self.rows - i0);
        self.lines
            .of_into(i0, count, |i| line(i, row_sums[i - i0]), &mut to.lines);
        to.out = out;
        to.count = count;
        true
    }

    #[inline]
    fn tile(&mut self, d: Done<'_>) {
        let Some((mut at, rows)) = self.lines(d.i0, d.row_sums) else {
            return (self.other)(d);
        };
        let lanes = NR.min(self.lanes - d.j0);
        at.iter_mut().for_each(|(o, _)| *o += d.j0);
        let sums = Some(&d.lane_sums[..lanes]);
        epilogue::tile(self.isa, &d.raw[..rows], lanes, sums, &at[..rows], self.out);
    }
}

/// Quads of the stack buffer a product packs into when the compiler
/// planned less scratch than one panel and the rows (the arena had no
/// more room at that step): 16 KiB, depths up to 816 (one panel and one
/// group of rows take 20 quads per quad of depth). With 8 KiB, a product
/// 768 deep at an arena's peak ran the reference loops: 2 ms became 1 s.
const STACK_QUADS: usize = 4096;

fn stack() -> [Cell<u32>; STACK_QUADS] {
    core::array::from_fn(|_| Cell::new(0))
}

/// True when a product of depth `k` runs packed with `floats` of planned
/// scratch per thread, or on the stack.
pub(super) fn runs_in(k: usize, floats: usize) -> bool {
    igemm::panels_per_block(k, floats) > 0 || igemm::panels_per_block(k, STACK_QUADS) > 0
}

/// Packs `k` bytes of `src` from `base` with stride `stride`, XORed with
/// `flip`, into every `MR`-th quad of `dst` (one row of a tile); returns
/// their sum as i8 (`signed`) or u8 values. Contiguous bytes are read four
/// at a time.
#[inline]
fn pack_row<'d, L: Load<u8>>(
    src: L,
    base: usize,
    stride: usize,
    k: usize,
    flip: u8,
    signed: bool,
    dst: impl Iterator<Item = &'d Cell<u32>>,
) -> i32 {
    let value = |v: u8| {
        if signed {
            i32::from(v as i8)
        } else {
            i32::from(v)
        }
    };
    let mut sum = 0i32;
    for (q, cell) in dst.enumerate() {
        let depths = 4.min(k - 4 * q);
        let bytes: [u8; 4] = if depths == 4 && stride == 1 {
            let b = src.sub(base + 4 * q, 4);
            [b.load(0), b.load(1), b.load(2), b.load(3)].map(|v| v ^ flip)
        } else {
            core::array::from_fn(|t| {
                if t < depths {
                    src.load(base + (4 * q + t) * stride) ^ flip
                } else {
                    0
                }
            })
        };
        sum = bytes.iter().fold(sum, |s, &v| s.wrapping_add(value(v)));
        cell.set(u32::from_le_bytes(bytes));
    }
    sum
}

/// The sums of `rows` rows of `k` bytes of `w`, each byte as i8 (what
/// the kernels read for rows in place), or `None` if `w` is short.
/// Each lane's sum over the depth of the bytes of `b` as i8, for the
/// full panels of `b` stored as the panels `w` in quads (what
/// [`Operands::packed_lanes`] hands the kernels: panel `p` at bytes
/// `p·NR·K..`, byte `t` of quad `q` of lane `l` at `(q·NR + l)·4 + t`);
/// `None` for a depth not in whole quads or if `b` is short.
pub(super) fn packed_lane_sums(w: &Panels, b: &[u8]) -> Option<Vec<i32>> {
    let k = w.depth;
    if !k.is_multiple_of(4) || k == 0 {
        return None;
    }
    let full = w.rows / NR;
    let b = b.get(..full.checked_mul(NR * k)?)?;
    let mut sums = Vec::with_capacity(full * NR);
    for panel in b.chunks_exact(NR * k) {
        let mut lanes = [0i32; NR];
        for quads in panel.chunks_exact(4 * NR) {
            for (sum, quad) in lanes.iter_mut().zip(quads.chunks_exact(4)) {
                let q = quad.iter().fold(0i32, |s, &v| s + i32::from(v as i8));
                *sum = sum.wrapping_add(q);
            }
        }
        sums.extend_from_slice(&lanes);
    }
    Some(sums)
}

pub(super) fn kernel_row_sums(w: &[u8], k: usize, rows: usize) -> Option<Vec<i32>> {
    let w = w.get(..rows.checked_mul(k)?)?;
    Some(
        w.chunks_exact(k)
            .map(|row| {
                row.iter()
                    .fold(0i32, |s, &v| s.wrapping_add(i32::from(v as i8)))
            })
            .collect(),
    )
}

/// Shares of `panels` panels: thread `part` of `parts` takes consecutive
/// ones.
fn share(panels: usize, part: usize, parts: usize) -> Range<usize> {
    let per = panels.div_ceil(parts.max(1));
    (part * per).min(panels)..((part + 1) * per).min(panels)
}

/// Writes quad `q` of a full panel (`out`, its [`NR`] quads) from the
/// bytes of its four depths (`bytes[t][l]`: depth `4q + t` of lane `l`,
/// as the kernel reads them; zero past the depth) and adds them to the
/// lanes' sums, read as u8 (`unsigned`) or i8. Whole rows of lanes at
/// once, which the compiler vectorises.
#[inline(always)]
fn put_quads(bytes: &[[u8; NR]; 4], unsigned: bool, sums: &mut [i32; NR], out: &[Cell<u32>]) {
    let out = &out[..NR];
    for l in 0..NR {
        let quad = [bytes[0][l], bytes[1][l], bytes[2][l], bytes[3][l]];
        out[l].set(u32::from_le_bytes(quad));
        let sum = quad.iter().fold(0i32, |s, &v| s + side(v, unsigned));
        sums[l] = sums[l].wrapping_add(sum);
    }
}

/// The [`NR`] bytes of `line` (exactly that long), copied as they are: a
/// loop the compiler turns into one vector load, where loading and
/// changing each byte in one go loads them one by one.
#[inline(always)]
fn copy16<L: Load<u8>>(line: L) -> [u8; NR] {
    let mut bytes = [0u8; NR];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = line.load(i);
    }
    bytes
}

/// Axes of a contraction flattened into one index: element `i` sits at
/// offset `Σ digit_d(i)·stride_d` of each of the three tensors (a, b and
/// the output), the digits taken over `dims` row-major.
#[derive(Clone, Debug, Default)]
struct Axes {
    dims: Vec<usize>,
    /// Strides of a, b and the output along `dims`.
    strides: [Vec<usize>; 3],
}

impl Axes {
    fn push(&mut self, dim: usize, strides: [usize; 3]) {
        self.dims.push(dim);
        for (s, v) in self.strides.iter_mut().zip(strides) {
            s.push(v);
        }
    }

    fn len(&self) -> usize {
        self.dims.iter().product()
    }

    /// Offset of element `i` in tensor `t` (0 a, 1 b, 2 the output).
    fn offset(&self, t: usize, i: usize) -> usize {
        row_offset(&self.dims, &self.strides[t], i)
    }

    /// [`Axes::offset`]s in tensor `t` of elements `i..i + n` (`0 < n <=
    /// N`), the entries past `n` repeating the last: the first is spread
    /// over the axes by division, the others follow by carrying like an
    /// odometer. A panel's sixteen lanes each spread by division were 5 %
    /// of a shallow int8 product's time.
    fn offsets<const N: usize>(&self, t: usize, i: usize, n: usize) -> [usize; N] {
        const MOST: usize = 8;
        let (dims, strides) = (&self.dims, &self.strides[t]);
        if dims.len() > MOST || n == 0 {
            return core::array::from_fn(|l| self.offset(t, i + l.min(n.saturating_sub(1))));
        }
        let mut index = [0usize; MOST];
        let (mut rest, mut off) = (i, 0);
        for a in (0..dims.len()).rev() {
            index[a] = rest % dims[a];
            rest /= dims[a];
            off += index[a] * strides[a];
        }
        let mut out = [0; N];
        for (l, o) in out.iter_mut().enumerate() {
            *o = off;
            if l + 1 >= n {
                continue;
            }
            for a in (0..dims.len()).rev() {
                index[a] += 1;
                off += strides[a];
                if index[a] < dims[a] {
                    break;
                }
                off -= dims[a] * strides[a];
                index[a] = 0;
            }
        }
        out
    }
}

/// Where a row starts: index `i` spread over `dims` with `strides`.
fn row_offset(dims: &[usize], strides: &[usize], mut i: usize) -> usize {
    let mut off = 0;
    for (&d, &s) in dims.iter().zip(strides).rev() {
        off += i % d * s;
        i /= d;
    }
    off
}

/// How the packed path walks a quantized product: the output's axes split
/// into lanes (its trailing axes that one operand, L, has and the other,
/// R, does not), rows (axes R has and L does not) and batches (the rest:
/// a new panel for each); one summed axis of length > 1 at most.
#[derive(Clone, Debug)]
pub(super) struct Plan {
    /// L is a (the u8 side), else b.
    lanes_are_a: bool,
    lanes: Axes,
    rows: Axes,
    batches: Axes,
    k: usize,
    /// Strides of a and b along the summed axis.
    k_strides: [usize; 2],
    /// Every parameter that varies by channel is the same along a row's
    /// lanes: a row's channel is looked up once.
    row_channels: bool,
}

impl Plan {
    /// The plan of `c` with its parameters read along `channels`, if the
    /// packed path computes it.
    pub(super) fn of(c: &Contraction, channels: &Channels) -> Option<Plan> {
        let (sa, sb) = (&c.strides[0], &c.strides[1]);
        let kept = c.kept;
        if kept == 0 {
            return None;
        }
        let out = crate::kernels::layout::strides_of(&c.dims[..kept]);
        // The one summed axis that matters (others have length 1).
        let mut summed = (kept..c.dims.len()).filter(|&d| c.dims[d] > 1);
        let (k, k_strides) = match (summed.next(), summed.next()) {
            (None, _) => (1, [0, 0]),
            (Some(d), None) => (c.dims[d], [sa[d], sb[d]]),
            _ => return None,
        };
        // Axes of length one could go with either operand: the last
        // longer kept axis decides which one gives the lanes.
        let long = |d: usize| c.dims[d] > 1;
        let lanes_are_a = match (0..kept).rev().find(|&d| long(d)) {
            None => true,
            Some(d) => match (sa[d], sb[d]) {
                (_, 0) if sa[d] != 0 => true,
                (0, _) if sb[d] != 0 => false,
                _ => return None,
            },
        };
        let (sl, sr) = if lanes_are_a { (sa, sb) } else { (sb, sa) };
        let mut first_lane = kept;
        while first_lane > 0 && (sr[first_lane - 1] == 0 || !long(first_lane - 1)) {
            first_lane -= 1;
        }
        let (mut lanes, mut rows, mut batches) =
            (Axes::default(), Axes::default(), Axes::default());
        for d in 0..kept {
            let axes = if d >= first_lane {
                &mut lanes
            } else if sl[d] == 0 || !long(d) {
                &mut rows
            } else {
                &mut batches
            };
            axes.push(c.dims[d], [sa[d], sb[d], out[d]]);
        }
        // Lanes are the output's trailing axes: a row starts at a
        // multiple of their count `n` and covers `n` elements, which share
        // their channel when its period is a multiple of `n`.
        let n = lanes.len().max(1);
        let row_channels = [channels.bias, channels.b0, channels.b_scale]
            .iter()
            .all(|a| a.len == 1 || a.div % n == 0);
        Some(Plan {
            lanes_are_a,
            lanes,
            rows,
            batches,
            k,
            k_strides,
            row_channels,
        })
    }

    /// Depth of the sums.
    pub(super) fn depth(&self) -> usize {
        self.k
    }

    /// Scratch floats per thread.
    pub(super) fn scratch_floats(&self) -> usize {
        scratch_floats(self.k, self.lanes.len())
    }

    /// Each row's sum of b's bytes as i8, where the rows are b's, read in
    /// place ([`Operands::direct_rows`]: contiguous, in whole quads) in
    /// a single batch; `None` otherwise or if `b` is short.
    pub(super) fn weight_row_sums(&self, b: &[u8]) -> Option<Vec<i32>> {
        let k = self.k;
        let contiguous = self.k_strides[1] == 1 || k == 1;
        if !self.lanes_are_a || self.batches.len() != 1 || !contiguous || !k.is_multiple_of(4) {
            return None;
        }
        (0..self.rows.len())
            .map(|i| {
                let at = self.rows.offset(1, i);
                let row = b.get(at..at.checked_add(k)?)?;
                Some(
                    row.iter()
                        .fold(0i32, |s, &v| s.wrapping_add(i32::from(v as i8))),
                )
            })
            .collect()
    }

    /// The layout in which b (of `b_len` elements) can be stored as the
    /// lanes' panels: where b gives the lanes along at most one axis
    /// longer than one, in a single batch, and its `k × n` elements are
    /// all of b.
    pub(crate) fn lanes_weight(&self, b_len: usize) -> Option<Panels> {
        if self.lanes_are_a || self.batches.len() != 1 {
            return None;
        }
        let mut long = (0..self.lanes.dims.len()).filter(|&d| self.lanes.dims[d] > 1);
        let line_stride = match (long.next(), long.next()) {
            (None, _) => 1,
            (Some(d), None) => self.lanes.strides[1][d],
            _ => return None,
        };
        let p = Panels {
            side: Side::Quads,
            matrices: 1,
            rows: self.lanes.len(),
            depth: self.k,
            strides: [0, line_stride, self.k_strides[1]],
            kc: self.k.max(1),
        };
        (p.len() == b_len && !p.is_empty() && p.is_dense()).then_some(p)
    }
}

/// One batch of a product: lanes from L, rows from R, each at its base
/// offset, the bytes read with their strides.
struct ProductOps<'p, L, R, const LANES_A: bool> {
    plan: &'p Plan,
    l: L,
    r: R,
    l_base: usize,
    r_base: usize,
    dom: Domains,
    /// L's layout when the compiler stored it packed (it is then b).
    weight: Option<&'p Panels>,
    /// That weight as quads, where the mapping holds it aligned and its
    /// full panels are what the kernels read (a depth in whole quads).
    mapped: Option<&'p [u32]>,
    /// R's row sums taken at setup, where R is the mapped weight b
    /// ([`Plan::weight_row_sums`]).
    row_sums: Option<&'p [i32]>,
    /// L's lane sums taken at setup, where L is the mapped weight b.
    lane_sums: Option<&'p [i32]>,
}

impl<'p, L, R, const LANES_A: bool> ProductOps<'p, L, R, LANES_A> {
    /// The operand index (0 a, 1 b) of L and of R.
    const L: usize = if LANES_A { 0 } else { 1 };
    const R: usize = 1 - Self::L;

    /// XOR of L's and R's bytes.
    fn flips(&self) -> (u8, u8) {
        if LANES_A {
            (self.dom.a_flip, self.dom.b_flip)
        } else {
            (self.dom.b_flip, self.dom.a_flip)
        }
    }
}

/// A byte's value on the kernel's u8 or i8 side.
#[inline(always)]
fn side(v: u8, unsigned: bool) -> i32 {
    if unsigned {
        v.into()
    } else {
        (v as i8).into()
    }
}

impl<L: Load<u8>, R: Load<u8>, const LANES_A: bool> Operands for ProductOps<'_, L, R, LANES_A> {
    const LANES_UNSIGNED: bool = LANES_A;

    fn depth(&self) -> usize {
        self.plan.k
    }

    fn rows(&self) -> usize {
        self.plan.rows.len()
    }

    fn lanes(&self) -> usize {
        self.plan.lanes.len()
    }

    #[inline(always)]
    fn pack_lanes(&self, j0: usize, panel: &[Cell<u32>]) -> [i32; NR] {
        if let Some(w) = self.weight {
            return self.widen_lanes(w, j0, panel);
        }
        let lanes = NR.min(self.lanes() - j0);
        let at: [usize; NR] = self
            .plan
            .lanes
            .offsets(Self::L, j0, lanes)
            .map(|o| self.l_base + o);
        let (flip, _) = self.flips();
        let stride = self.plan.k_strides[Self::L];
        let k = self.plan.k;
        let mut sums = [0i32; NR];
        if lanes == NR && (1..NR).all(|l| at[l] == at[0] + l) {
            // Sixteen consecutive bytes per depth (the rows of a 1×1
            // convolution's image): one load each, interleaved a panel at
            // a time.
            for (q, out) in panel.chunks_exact(NR).enumerate() {
                let mut bytes = [[0u8; NR]; 4];
                for (t, row) in bytes.iter_mut().enumerate().take(4.min(k - 4 * q)) {
                    *row = copy16(self.l.sub(at[0] + (4 * q + t) * stride, NR));
                    for v in row.iter_mut() {
                        *v ^= flip;
                    }
                }
                put_quads(&bytes, LANES_A, &mut sums, out);
            }
            return sums;
        }
        let mut quad = [0u32; NR];
        for (q, out) in panel.chunks_exact(NR).enumerate() {
            for t in 0..4.min(k - 4 * q) {
                let p = (4 * q + t) * stride;
                for l in 0..lanes {
                    let v = self.l.load(at[l] + p) ^ flip;
                    quad[l] |= u32::from(v) << (8 * t);
                    sums[l] = sums[l].wrapping_add(side(v, LANES_A));
                }
            }
            for (cell, v) in out.iter().zip(&mut quad) {
                cell.set(*v);
                *v = 0;
            }
        }
        sums
    }

    fn pack_rows(&self, i0: usize, rows: &[Cell<u32>]) -> [i32; MR] {
        let (_, flip) = self.flips();
        let stride = self.plan.k_strides[Self::R];
        let k = self.plan.k;
        let mut sums = [0i32; MR];
        for r in 0..MR {
            let i = i0 + r;
            if i >= self.rows() {
                rows.iter().skip(r).step_by(MR).for_each(|c| c.set(0));
                continue;
            }
            let base = self.r_base + self.plan.rows.offset(Self::R, i);
            let dst = rows.iter().skip(r).step_by(MR);
            sums[r] = pack_row(self.r, base, stride, k, flip, LANES_A, dst);
        }
        sums
    }

    fn packed_lanes(&self, j0: usize) -> Option<&[u32]> {
        let k = self.plan.k;
        if j0 + NR > self.lanes() {
            return None;
        }
        // A full panel of a depth in whole quads: quads j0·k/4.. of the
        // weight (docs/FORMAT.md, "Packed weights").
        self.mapped?.get(j0 * k / 4..(j0 + NR) * k / 4)
    }

    fn packed_lane_sums(&self, j0: usize) -> Option<[i32; NR]> {
        // The sums are of the bytes as stored, read as i8.
        if self.mapped.is_none() || self.flips().0 != 0 || LANES_A {
            return None;
        }
        let sums = self.lane_sums?.get(j0..j0.checked_add(NR)?)?;
        Some(core::array::from_fn(|l| sums[l]))
    }

    type Row<'s>
        = R
    where
        Self: 's;

    fn direct_row_sums(&self, i0: usize) -> Option<[i32; MR]> {
        let sums = self.row_sums?.get(i0..i0.checked_add(MR)?)?;
        Some(core::array::from_fn(|r| sums[r]))
    }

    /// R's rows in place where its bytes need no flip, its depth is
    /// contiguous (stride 1) and in whole quads.
    fn direct_rows(&self, i0: usize) -> Option<[R; MR]> {
        let (_, flip) = self.flips();
        let k = self.plan.k;
        let contiguous = self.plan.k_strides[Self::R] == 1 || k == 1;
        if flip != 0 || !k.is_multiple_of(4) || !contiguous || i0 + MR > self.rows() {
            return None;
        }
        Some(core::array::from_fn(|r| {
            let base = self.r_base + self.plan.rows.offset(Self::R, i0 + r);
            self.r.sub(base, k)
        }))
    }
}

impl<L: Load<u8>, R: Load<u8>, const LANES_A: bool> ProductOps<'_, L, R, LANES_A> {
    /// [`Operands::pack_lanes`] from the compiler's panels `w` where the
    /// kernels cannot read them in place (a short last panel, a depth
    /// not in whole quads, a weight not aligned for quads): each element
    /// from its packed position, lanes past the product zero.
    #[inline(always)]
    fn widen_lanes(&self, w: &Panels, j0: usize, panel: &[Cell<u32>]) -> [i32; NR] {
        let lanes = NR.min(self.lanes() - j0);
        let (flip, _) = self.flips();
        let k = self.plan.k;
        let mut sums = [0i32; NR];
        for (q, out) in panel.chunks_exact(NR).enumerate() {
            for (l, cell) in out.iter().enumerate() {
                let mut quad = [0u8; 4];
                if l < lanes {
                    for (t, byte) in quad.iter_mut().enumerate().take(4.min(k - 4 * q)) {
                        let v = self.l.load(self.l_base + w.index(0, j0 + l, 4 * q + t)) ^ flip;
                        sums[l] = sums[l].wrapping_add(side(v, LANES_A));
                        *byte = v;
                    }
                }
                cell.set(u32::from_le_bytes(quad));
            }
        }
        sums
    }
}

/// Scratch floats the packed path of a product of depth `k` over `n`
/// lanes takes per thread (up to [`igemm::block_panels`] per block).
pub(super) fn scratch_floats(k: usize, n: usize) -> usize {
    igemm::scratch_quads(k, n.div_ceil(NR).clamp(1, igemm::block_panels(k)))
}

impl QProduct {
    /// The packed path; `false` where it declines (module doc).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_packed(
        &self,
        isa: Isa,
        a: Src<'_, u8>,
        b: Src<'_, u8>,
        dom: Domains,
        q: &Requant<'_>,
        out: &Out<'_>,
        scratch: &[Cell<f32>],
        part: usize,
        parts: usize,
    ) -> bool {
        let Some(plan) = &self.packed else {
            return false;
        };
        let on_stack;
        let scratch = scratch_or_stack!(plan.k, igemm::quads(scratch), on_stack);
        let a0 = dom.a0(q.a0);
        let n = plan.lanes.len();
        let panels = share(n.div_ceil(NR), part, parts);
        let weight = self.weight.as_deref();
        let mapped = match (weight, b) {
            (Some(_), Src::Weight(w)) if plan.k.is_multiple_of(4) => {
                bytemuck::try_cast_slice::<u8, u32>(w).ok()
            }
            _ => None,
        };
        // Only for the weight they were taken from.
        let row_sums = match (&self.row_sums, b) {
            (Some(r), Src::Weight(_)) if r.len() == plan.rows.len() => Some(&r[..]),
            _ => None,
        };
        let mut lines = RowLines::new();
        crate::with_load!(a, |a| crate::with_load!(b, |b| {
            for batch in 0..plan.batches.len() {
                lines.clear();
                let base = |t: usize| plan.batches.offset(t, batch);
                let out_base = base(2);
                // With one channel per row, the rows' lines are looked
                // up once per group of rows rather than per tile.
                let line = |i: usize, row_sum: i32| {
                    let o = out_base + plan.rows.offset(2, i);
                    let (bias, scale, b0) = q.channel(o);
                    let b0 = dom.b0(b0);
                    let (x, m) = if plan.lanes_are_a { (a0, b0) } else { (b0, a0) };
                    let c = folded(row_sum, plan.k, x, m);
                    (o, q.line(bias, scale, m, c))
                };
                let other = |d: Done<'_>| {
                    let rows = MR.min(plan.rows.len() - d.i0);
                    let lanes = NR.min(n - d.j0);
                    for r in 0..rows {
                        let o = out_base + plan.rows.offset(2, d.i0 + r) + d.j0;
                        let sums = |l: usize| {
                            if plan.lanes_are_a {
                                (d.lane_sums[l], d.row_sums[r])
                            } else {
                                (d.row_sums[r], d.lane_sums[l])
                            }
                        };
                        let row = q.row(o, lanes);
                        for l in 0..lanes {
                            let (bias, scale, b0) = match row {
                                Some(c) => c,
                                None => q.channel(o + l),
                            };
                            let (sa, sb) = sums(l);
                            let acc = centred(d.raw[r][l], sa, sb, plan.k, a0, dom.b0(b0));
                            out.set(o + l, q.finish(acc, bias, scale));
                        }
                    }
                };
                let emit = Sink {
                    isa,
                    out,
                    rows: plan.rows.len(),
                    lanes: n,
                    lines: &mut lines,
                    line: plan.row_channels.then_some(line),
                    other,
                };
                if plan.lanes_are_a {
                    let ops = ProductOps::<_, _, true> {
                        plan,
                        l: a,
                        r: b,
                        l_base: base(0),
                        r_base: base(1),
                        dom,
                        weight: None,
                        mapped: None,
                        row_sums,
                        lane_sums: None,
                    };
                    igemm::product(isa, &ops, scratch, panels.clone(), emit);
                } else {
                    let ops = ProductOps::<_, _, false> {
                        plan,
                        l: b,
                        r: a,
                        l_base: base(1),
                        r_base: base(0),
                        dom,
                        weight,
                        mapped,
                        row_sums: None,
                        lane_sums: self.lane_sums.as_deref(),
                    };
                    igemm::product(isa, &ops, scratch, panels.clone(), emit);
                }
            }
        }));
        true
    }
}

// The reference path walks rows with the contraction module's offsets,
// the packed path with `row_offset`: they must agree.
#[cfg(test)]
#[test]
fn row_offsets_agree_with_the_contraction() {
    use crate::kernels::contract;
    let dims = [3usize, 4, 5];
    let strides = alloc::vec![alloc::vec![20usize, 5, 1], alloc::vec![0, 0, 0]];
    for i in 0..60 {
        assert_eq!(
            row_offset(&dims, &strides[0], i),
            contract::offsets(&dims, &strides, 0, i)[0]
        );
    }
}

#[cfg(test)]
mod tests {
    use super::Axes;

    /// The odometer's offsets are the divisions' for every start and run
    /// length over axes of assorted sizes and strides, a length-1 axis
    /// and a zero stride among them.
    #[test]
    fn carried_offsets_equal_the_divided_ones() {
        let mut axes = Axes {
            dims: alloc::vec::Vec::new(),
            strides: Default::default(),
        };
        for (d, s) in [
            (3, [70, 1, 5]),
            (1, [9, 9, 9]),
            (5, [14, 0, 1]),
            (7, [2, 3, 0]),
        ] {
            axes.push(d, s);
        }
        let total = axes.len();
        for t in 0..3 {
            for i in 0..total {
                for n in 1..=16.min(total - i) {
                    let got: [usize; 16] = axes.offsets(t, i, n);
                    for (l, &g) in got.iter().enumerate() {
                        assert_eq!(
                            g,
                            axes.offset(t, i + l.min(n - 1)),
                            "t {t} i {i} n {n} l {l}"
                        );
                    }
                }
            }
        }
    }
}

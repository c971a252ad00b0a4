//! Single-precision matrix multiplication, `C += A · B`, with the packing
//! buffers in caller-given scratch (the arena).
//!
//! The loop structure is the one of BLIS and of the `matrixmultiply` and
//! `gemm` crates: blocks of `KC` along k, `MC` along m and `NC` along n;
//! each block of A and B is copied ("packed") into panels of `MR` rows and
//! `NR` columns; a micro-kernel keeps an `MR × NR` tile of C in registers
//! while it walks one panel of each. Those crates allocate their packing
//! buffers on every call, which a run that allocates nothing cannot allow,
//! and take only strided matrices; here the operands are [`PackA`] and
//! [`PackB`] sources, so a convolution packs its B panels straight from the
//! image (no im2col buffer) and the packing buffers are tensors the
//! compiler planned into the arena (`scratch_elems` is their size).

use super::cells::{Load, Src};
use super::float::Float;
use core::cell::{Cell, OnceCell};

/// Rows of the micro-kernel's tile.
pub const MR: usize = 6;
/// Columns of the micro-kernel's tile (two 8-lane vectors).
pub const NR: usize = 16;
/// Depth of a block: one packed A panel (`MR × KC` floats) stays in L1.
pub const KC: usize = 256;
/// Rows of a block: the packed A block (`MC × KC`) stays in L2.
pub const MC: usize = 72;
/// Columns of a block: the packed B block (`KC × NC`, 256 KiB) stays in
/// L2. The packing buffers are planned into the arena, so this also
/// bounds what a product adds to it.
pub const NC: usize = 256;

pub(crate) fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// Columns of C thread `part` of `parts` computes: consecutive ranges of
/// whole `NR`-column panels.
pub fn share(n: usize, part: usize, parts: usize) -> core::ops::Range<usize> {
    let panels = n.div_ceil(NR);
    let per = panels.div_ceil(parts.max(1));
    let start = (part * per * NR).min(n);
    let end = ((part + 1) * per * NR).min(n);
    start..end
}

/// Floats of scratch a product of `m × k` by `k × n` needs: one packed
/// block of A followed by one of B.
pub fn scratch_elems(m: usize, n: usize, k: usize) -> usize {
    let kc = k.clamp(1, KC);
    round_up(m.clamp(1, MC), MR) * kc + round_up(n.clamp(1, NC), NR) * kc
}

/// Shallowest depth block the product drops to when its scratch is short.
/// 16 made resnet50's 64-deep 1×1 convolutions at its peak (the arena
/// has no free byte there) read and write their 3 MB of sums four times;
/// in one pass the whole model runs about 3 % faster.
pub(crate) const KC_MIN: usize = 64;

/// Floats of the smallest blocking: one `MR`-row panel of A and one
/// `NR`-column panel of B, `KC_MIN` deep (5,632 bytes). A product given
/// less scratch than this packs into a buffer of this size on the stack,
/// so a compiler short of arena may plan any scratch from none to
/// [`scratch_elems`].
pub(crate) const STACK_FLOATS: usize = (MR + NR) * KC_MIN;

/// A product's stack buffer of [`STACK_FLOATS`], set up (zeroed) only
/// when it is used ([`OnStack::room`]): most products have their planned
/// scratch.
#[derive(Default)]
pub(crate) struct OnStack(OnceCell<[Cell<f32>; STACK_FLOATS]>);

impl OnStack {
    /// The buffer, zeroed the first time.
    pub(crate) fn room(&self) -> &[Cell<f32>] {
        &self
            .0
            .get_or_init(|| core::array::from_fn(|_| Cell::new(0.0)))[..]
    }
}

/// Block sizes `(mc, nc, kc)` for a product whose packing buffers must fit
/// in `floats` (at least [`STACK_FLOATS`]): the usual ones when they fit
/// ([`scratch_elems`]). Otherwise the depth block is the deepest that
/// leaves room for one panel of each operand; it alone sets the order of
/// the sums, and it depends on neither `m` nor `n`, so a thread's share of
/// the columns sums in the same order as the whole. Then A blocks and B
/// blocks take what room is left, B (the larger buffer) last.
fn blocks(m: usize, n: usize, k: usize, floats: usize) -> (usize, usize, usize) {
    let (mc, nc, kc) = (m.clamp(1, MC), n.clamp(1, NC), k.clamp(1, KC));
    let need = |mc: usize, nc: usize, kc: usize| (round_up(mc, MR) + round_up(nc, NR)) * kc;
    if need(mc, nc, kc) <= floats {
        return (mc, nc, kc);
    }
    let kc = depth_within(k, floats);
    let panels = (floats / kc).max(MR + NR);
    let mc = mc.min((panels - NR) / MR * MR).max(1);
    let nc = nc.min((panels - round_up(mc, MR)) / NR * NR).max(1);
    (mc, nc, kc)
}

/// The depth block of a product given `floats` of scratch, fewer than
/// its usual blocks need: the deepest of `min(k, KC)` halved that leaves
/// room for one panel of each operand, at least `KC_MIN` (or `k`).
pub fn depth_within(k: usize, floats: usize) -> usize {
    let mut kc = k.clamp(1, KC);
    while kc > KC_MIN && (MR + NR) * kc > floats {
        kc = (kc / 2).max(KC_MIN);
    }
    kc
}

/// A left operand that can copy a block of itself into panels.
pub trait PackA {
    /// Writes rows `i0..i0 + mc` and depths `p0..p0 + kc` as panels of
    /// `MR` rows: element `(i0 + r0 + r, p0 + p)` goes to
    /// `dst[(r0 / MR * kc + p) * MR + r]`; rows past the matrix are zero.
    fn pack(&self, i0: usize, mc: usize, p0: usize, kc: usize, dst: &[Cell<f32>]);
}

/// A right operand that can copy a block of itself into panels.
pub trait PackB {
    /// Writes depths `p0..p0 + kc` and columns `j0..j0 + nc` as panels of
    /// `NR` columns: element `(p0 + p, j0 + c0 + c)` goes to
    /// `dst[(c0 / NR * kc + p) * NR + c]`; columns past the matrix are zero.
    fn pack(&self, p0: usize, kc: usize, j0: usize, nc: usize, dst: &[Cell<f32>]);
}

/// A strided matrix in a weight or an arena tensor: element `(i, j)` is
/// `data[offset + i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub struct Strided<L> {
    /// The storage.
    pub data: L,
    /// Index of element (0, 0).
    pub offset: usize,
    /// Row stride.
    pub rs: usize,
    /// Column stride.
    pub cs: usize,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
}

impl<L: Load<f32>> PackA for Strided<L> {
    fn pack(&self, i0: usize, mc: usize, p0: usize, kc: usize, dst: &[Cell<f32>]) {
        for (panel, r0) in (0..mc).step_by(MR).enumerate() {
            let out = &dst[panel * kc * MR..(panel + 1) * kc * MR];
            let rows = MR.min(self.rows - (i0 + r0).min(self.rows));
            if self.cs == 1 && rows == MR {
                // Rows are contiguous and the panel full: one pass down
                // the depth, writing each depth's MR values side by side
                // (six passes of stores MR floats apart were PackA's 10 %
                // of bert_base).
                let src: [L; MR] = core::array::from_fn(|r| {
                    self.data
                        .sub(self.offset + (i0 + r0 + r) * self.rs + p0, kc)
                });
                for (p, o) in out.chunks_exact(MR).enumerate() {
                    for (cell, row) in o.iter().zip(src) {
                        cell.set(row.load(p));
                    }
                }
                continue;
            }
            if self.cs == 1 {
                // Rows are contiguous: read each one in order.
                for r in 0..MR {
                    if r < rows {
                        let row = self.offset + (i0 + r0 + r) * self.rs + p0;
                        let src = self.data.sub(row, kc);
                        for p in 0..kc {
                            out[p * MR + r].set(src.load(p));
                        }
                    } else {
                        (0..kc).for_each(|p| out[p * MR + r].set(0.0));
                    }
                }
                continue;
            }
            for (p, o) in out.chunks_exact(MR).enumerate() {
                let base = self.offset + (p0 + p) * self.cs + (i0 + r0) * self.rs;
                for (r, cell) in o.iter().enumerate() {
                    cell.set(if r < rows {
                        self.data.load(base + r * self.rs)
                    } else {
                        0.0
                    });
                }
            }
        }
    }
}

impl<L: Load<f32>> PackB for Strided<L> {
    fn pack(&self, p0: usize, kc: usize, j0: usize, nc: usize, dst: &[Cell<f32>]) {
        #[cfg(target_arch = "x86_64")]
        if Isa::detect() == Isa::Avx512 {
            // SAFETY: the function only needs the CPU to have AVX-512 F,
            // which `Isa::detect` checked at run time.
            #[allow(unsafe_code)]
            return unsafe { self.pack_b_avx512(p0, kc, j0, nc, dst) };
        }
        #[cfg(target_arch = "x86_64")]
        if Isa::detect() == Isa::Fma {
            // SAFETY: the function only needs AVX2, which `Isa::detect`
            // checked at run time.
            #[allow(unsafe_code)]
            return unsafe { self.pack_b_avx2(p0, kc, j0, nc, dst) };
        }
        self.pack_b(p0, kc, j0, nc, dst)
    }
}

impl<L: Load<f32>> Strided<L> {
    /// [`PackB::pack`] compiled for 16-lane vectors: a panel row of
    /// contiguous columns is one load and one store.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn pack_b_avx512(&self, p0: usize, kc: usize, j0: usize, nc: usize, dst: &[Cell<f32>]) {
        self.pack_b(p0, kc, j0, nc, dst)
    }

    /// [`PackB::pack`] compiled for 8-lane vectors (half a panel row per
    /// load; the default build copied it in 4-lane pieces).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn pack_b_avx2(&self, p0: usize, kc: usize, j0: usize, nc: usize, dst: &[Cell<f32>]) {
        self.pack_b(p0, kc, j0, nc, dst)
    }

    #[inline(always)]
    fn pack_b(&self, p0: usize, kc: usize, j0: usize, nc: usize, dst: &[Cell<f32>]) {
        for (panel, c0) in (0..nc).step_by(NR).enumerate() {
            let out = &dst[panel * kc * NR..(panel + 1) * kc * NR];
            let cols = NR.min(self.cols - (j0 + c0).min(self.cols));
            for (p, o) in out.chunks_exact(NR).enumerate() {
                let base = self.offset + (p0 + p) * self.rs + (j0 + c0) * self.cs;
                if self.cs == 1 && cols == NR {
                    // Read all, then write all: cells of one arena might
                    // overlap, so a copy element by element stays scalar.
                    let src = self.data.sub(base, NR);
                    let v: [f32; NR] = core::array::from_fn(|c| src.load(c));
                    for (cell, v) in o.iter().zip(v) {
                        cell.set(v);
                    }
                } else {
                    for (c, cell) in o.iter().enumerate() {
                        cell.set(if c < cols {
                            self.data.load(base + c * self.cs)
                        } else {
                            0.0
                        });
                    }
                }
            }
        }
    }
}

/// `Max` with `lo` then `Min` with `hi` of an f32 (or the other order),
/// as the two element-wise steps compute them (IEEE maxNum/minNum: a NaN
/// bound leaves the value as it is); a one-sided bound is the other one
/// NaN.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Clamp {
    /// The `Max` step's constant.
    pub lo: f32,
    /// The `Min` step's constant.
    pub hi: f32,
    /// True when the `Max` step came first.
    pub max_first: bool,
}

impl Clamp {
    /// The clamped value.
    #[inline(always)]
    pub fn apply(self, a: f32) -> f32 {
        let max = |a: f32| {
            if a >= self.lo || self.lo.is_nan() {
                a
            } else {
                self.lo
            }
        };
        let min = |a: f32| {
            if a <= self.hi || self.hi.is_nan() {
                a
            } else {
                self.hi
            }
        };
        if self.max_first {
            min(max(a))
        } else {
            max(min(a))
        }
    }
}

/// Runs `$body` with `$f` the element function of a [`Finish`], chosen
/// once: a NaN bound (which leaves values as they are) is dropped here
/// rather than tested for every element, so the loops in `$body` compile
/// to compares and blends.
macro_rules! with_finish {
    ($finish:expr, |$f:ident| $body:expr) => {{
        let max = |lo: f32| move |a: f32| if a >= lo { a } else { lo };
        let min = |hi: f32| move |a: f32| if a <= hi { a } else { hi };
        match $finish {
            Finish::Clamp(k) => match (k.lo.is_nan(), k.hi.is_nan(), k.max_first) {
                (true, true, _) => {
                    let $f = |a: f32| a;
                    $body
                }
                (false, true, _) => {
                    let $f = max(k.lo);
                    $body
                }
                (true, false, _) => {
                    let $f = min(k.hi);
                    $body
                }
                (false, false, true) => {
                    let (max, min) = (max(k.lo), min(k.hi));
                    let $f = move |a: f32| min(max(a));
                    $body
                }
                (false, false, false) => {
                    let (max, min) = (max(k.lo), min(k.hi));
                    let $f = move |a: f32| max(min(a));
                    $body
                }
            },
            Finish::Keep => {
                let $f = |a: f32| a;
                $body
            }
            Finish::Sigmoid => {
                let $f = crate::kernels::elementwise::logistic::<false>;
                $body
            }
            Finish::Silu => {
                let $f = crate::kernels::elementwise::logistic::<true>;
                $body
            }
            Finish::HardSwish => {
                let $f = |a: f32| crate::kernels::elementwise::Unary::HardSwish.apply(a);
                $body
            }
        }
    }};
}

mod micro;
pub(crate) use micro::{
    add_tile, fma_available, micro_kernel, micro_kernel_pair, micro_kernel_quad, Isa,
};

/// What each element of C goes through once its sum is complete: an
/// activation merged into the product at setup, applied to the tile in
/// registers' reach instead of in a pass of its own over memory.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Finish {
    /// The sums as they are.
    #[default]
    Keep,
    /// Clamped.
    Clamp(Clamp),
    /// Through the logistic function, as the `Sigmoid` step computes it
    /// ([`crate::kernels::elementwise::logistic_row`]).
    Sigmoid,
    /// Times its logistic, as the `Silu` step computes it.
    Silu,
    /// `x·clamp(x + 3, 0, 6)/6`, as the `HardSwish` step computes it.
    HardSwish,
}

impl Finish {
    /// `self` for the depth block that completes the sums (`last`), else
    /// [`Finish::Keep`].
    #[inline(always)]
    pub fn at(self, last: bool) -> Finish {
        if last {
            self
        } else {
            Finish::Keep
        }
    }

    /// Applies `self` to every element of `cells`.
    #[inline(always)]
    pub fn apply(self, cells: &[Cell<f32>]) {
        match self {
            Finish::Keep => {}
            // The vectorised row of the element-wise steps (its chunks
            // read before they write, so in place is fine), compiled for
            // AVX2 where the CPU has it whoever the caller is.
            Finish::Sigmoid => crate::kernels::elementwise::logistic_rows::<false>(cells, cells),
            Finish::Silu => crate::kernels::elementwise::logistic_rows::<true>(cells, cells),
            _ => self.map_row(cells, cells),
        }
    }

    /// One finished sum through `self`.
    #[inline(always)]
    pub fn value(self, a: f32) -> f32 {
        with_finish!(self, |f| f(a))
    }

    /// Writes each element of `x` through `self` into `out` (the
    /// element-wise clamp step, or a finish over finished sums in place).
    #[inline(always)]
    pub fn map_row(self, out: &[Cell<f32>], x: impl Load<f32>) {
        with_finish!(self, |f| super::cells::map_row(out, x, f))
    }
}

/// How the first depth block meets C.
#[derive(Clone, Copy)]
pub enum Start<'a> {
    /// C already holds the values the sums start from (zeros, a bias,
    /// an earlier batch position's sums): every block adds into it.
    Add,
    /// C's contents are ignored: the first block stores `b + tile`, `b`
    /// being row `i`'s bias (element `at + i` of the tensor, or its one
    /// element) or `0.0` without one. That is the sum the caller's fill
    /// followed by an addition gave, to the bit: the same one addition
    /// (`0.0 + -0.0` is `+0.0` both ways), minus a pass over C.
    Store(Option<Src<'a, f32>>, usize),
}

impl Start<'_> {
    /// What the tile of rows `i..i + rows` starts from in the first depth
    /// block: `None` to add into C.
    #[inline(always)]
    fn rows(self, i: usize, rows: usize) -> Option<[f32; MR]> {
        match self {
            Start::Add => None,
            Start::Store(None, _) => Some([0.0; MR]),
            Start::Store(Some(b), _) if b.len() == 1 => Some([b.at(0); MR]),
            Start::Store(Some(b), at) => Some(core::array::from_fn(|r| {
                if r < rows {
                    b.at(at + i + r)
                } else {
                    0.0
                }
            })),
        }
    }

    /// [`Start::rows`] for the depth block starting at `p0`.
    #[inline(always)]
    pub(crate) fn at(self, p0: usize, i: usize, rows: usize) -> Option<[f32; MR]> {
        if p0 == 0 {
            self.rows(i, rows)
        } else {
            None
        }
    }
}

/// The destination: element `(i, j)` of C is `data[offset + i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub struct Dst<'a> {
    /// The storage.
    pub data: &'a [Cell<f32>],
    /// Index of element (0, 0).
    pub offset: usize,
    /// Row stride.
    pub rs: usize,
    /// Column stride.
    pub cs: usize,
    /// Applied to each element with the last depth block's sum.
    pub finish: Finish,
    /// Whether the first depth block adds into C or stores over it.
    pub start: Start<'a>,
    /// A tensor laid out as C (a residual connection's other operand)
    /// added to each element with the last depth block's sum, before the
    /// finish: `finish((c + tile) + residual)`, the product's and the
    /// `Add` step's own additions in their order.
    pub residual: Option<&'a [Cell<f32>]>,
}

impl<'a> Dst<'a> {
    /// C as the depth block that completes the sums (`last`) meets it,
    /// finish and residual included, or as an earlier block does, without
    /// them.
    #[inline(always)]
    pub fn at_block(&self, last: bool) -> Dst<'a> {
        Dst {
            finish: self.finish.at(last),
            residual: self.residual.filter(|_| last),
            ..*self
        }
    }
}

/// `C[m × n] += A[m × k] · B[k × n]` (or `=`, plus a bias, with
/// [`Start::Store`]), packing through `scratch` (at least
/// [`scratch_elems`] floats). With `k == 0` C is left as it is, whatever
/// `c.start` says.
pub fn gemm(
    m: usize,
    n: usize,
    k: usize,
    a: &impl PackA,
    b: &impl PackB,
    c: &Dst<'_>,
    scratch: &[Cell<f32>],
) {
    gemm_cols(m, n, k, a, b, c, scratch, 0..n)
}

/// [`gemm`] restricted to the columns `cols` of C (a thread's share):
/// only those columns are read or written, and `scratch` needs
/// [`scratch_elems`]`(m, cols.len(), k)` floats.
#[allow(clippy::too_many_arguments)]
pub fn gemm_cols(
    m: usize,
    n: usize,
    k: usize,
    a: &impl PackA,
    b: &impl PackB,
    c: &Dst<'_>,
    scratch: &[Cell<f32>],
    cols: core::ops::Range<usize>,
) {
    let end = cols.end.min(n);
    if m == 0 || k == 0 || cols.start >= end {
        return;
    }
    // The blocking follows the scratch the compiler planned, which may be
    // less than `scratch_elems` where the arena had no more room, down to
    // none: then the smallest blocks pack on the stack (zeroed only then:
    // most products have their planned scratch).
    let on_stack = OnStack::default();
    let scratch = if scratch.len() < (MR + NR) * k.clamp(1, KC_MIN) {
        on_stack.room()
    } else {
        scratch
    };
    let (mc_block, nc_block, kc_block) = blocks(m, end - cols.start, k, scratch.len());
    let a_len = round_up(mc_block, MR) * kc_block;
    if a_len + round_up(nc_block, NR) * kc_block > scratch.len() {
        debug_assert!(false, "blocks() chose blocks larger than the scratch");
        return;
    }
    let (apack, bpack) = scratch.split_at(a_len);
    let isa = Isa::detect();
    for j0 in (cols.start..end).step_by(nc_block) {
        let nc = nc_block.min(end - j0);
        for p0 in (0..k).step_by(kc_block) {
            let kc = kc_block.min(k - p0);
            b.pack(p0, kc, j0, nc, bpack);
            let c = &c.at_block(p0 + kc == k);
            let finish = c.finish;
            for i0 in (0..m).step_by(mc_block) {
                let mc = mc_block.min(m - i0);
                a.pack(i0, mc, p0, kc, apack);
                for c0 in (0..nc).step_by(2 * NR) {
                    let panel = |q: usize| {
                        let q = (c0 / NR + q).min(nc.div_ceil(NR) - 1);
                        &bpack[q * kc * NR..(q + 1) * kc * NR]
                    };
                    for (ap, r0) in (0..mc).step_by(MR).enumerate() {
                        let apanel = &apack[ap * kc * MR..(ap + 1) * kc * MR];
                        let size = (MR.min(mc - r0), (2 * NR).min(nc - c0));
                        let at = (i0 + r0, j0 + c0);
                        let start = c.start.at(p0, at.0, size.0);
                        let b = (panel(0), panel(1));
                        micro_kernel_pair(isa, kc, apanel, b, c, at, size, (start, finish));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn naive(m: usize, n: usize, k: usize, a: &[f32], b: &[f32]) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    #[test]
    fn matches_the_naive_product_across_block_edges() {
        // Sizes straddle MR, NR, KC, MC and NC boundaries.
        let sizes = [
            (1, 1, 1),
            (7, 17, 3),
            (73, 33, 257),
            (6, 1025, 20),
            (150, 40, 600),
        ];
        for &(m, n, k) in &sizes {
            check_product(m, n, k, scratch_elems(m, n, k));
        }
    }

    /// Short scratch (what the compiler plans where the arena has no
    /// more room), down to none, gives smaller blocks and the same
    /// product.
    #[test]
    fn short_scratch_gives_the_same_product() {
        for &(m, n, k) in &[(73, 33, 257), (6, 1025, 20), (150, 40, 600), (5, 300, 40)] {
            let full = scratch_elems(m, n, k);
            for floats in [0, 100, STACK_FLOATS, STACK_FLOATS + 7, full / 2, full - 1] {
                if floats >= STACK_FLOATS {
                    let (mc, nc, kc) = blocks(m, n, k, floats);
                    assert!((round_up(mc, MR) + round_up(nc, NR)) * kc <= floats);
                }
                check_product(m, n, k, floats);
            }
        }
    }

    fn check_product(m: usize, n: usize, k: usize, scratch_floats: usize) {
        {
            let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32) - 6.0).collect();
            let b: Vec<f32> = (0..k * n).map(|i| ((i * 5 % 11) as f32) - 5.0).collect();
            let mut c = vec![0f32; m * n];
            let mut scratch = vec![0f32; scratch_floats];
            let cells = Cell::from_mut(c.as_mut_slice()).as_slice_of_cells();
            let sa = Strided {
                data: a.as_slice(),
                offset: 0,
                rs: k,
                cs: 1,
                rows: m,
                cols: k,
            };
            // B read transposed from a column-major copy: strided packing.
            let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
            let sb = Strided {
                data: bt.as_slice(),
                offset: 0,
                rs: 1,
                cs: k,
                rows: k,
                cols: n,
            };
            let dst = Dst {
                data: cells,
                offset: 0,
                rs: n,
                cs: 1,
                finish: Default::default(),
                start: Start::Add,
                residual: None,
            };
            let s = Cell::from_mut(scratch.as_mut_slice()).as_slice_of_cells();
            gemm(m, n, k, &sa, &sb, &dst, s);
            let want = naive(m, n, k, &a, &b);
            assert_eq!(c, want, "{m}x{n}x{k}, {scratch_floats} floats of scratch");
            // The same product written transposed (C by columns), which
            // adds whole tile columns at once.
            let mut ct = vec![0f32; m * n];
            let cells = Cell::from_mut(ct.as_mut_slice()).as_slice_of_cells();
            let dst = Dst {
                data: cells,
                offset: 0,
                rs: 1,
                cs: m,
                finish: Default::default(),
                start: Start::Add,
                residual: None,
            };
            gemm(m, n, k, &sa, &sb, &dst, s);
            let back: Vec<f32> = (0..m * n).map(|i| ct[(i % n) * m + i / n]).collect();
            assert_eq!(
                back, want,
                "{m}x{n}x{k} by columns, {scratch_floats} floats"
            );
        }
    }

    /// Every micro-kernel this CPU can run gives the bits of the
    /// one-panel FMA kernel on two panels, whatever the tile's rows,
    /// columns, depth, start and finish: the kernel choice changes speed
    /// only.
    #[test]
    fn paired_panels_give_the_single_panel_bits() {
        let isas: Vec<Isa> = match Isa::detect() {
            Isa::Portable => return,
            Isa::Fma => vec![Isa::Fma],
            Isa::Avx512 => vec![Isa::Fma, Isa::Avx512],
        };
        let mut seed = 0x9e37_79b9u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed % 20_001) as f32 / 1000.0 - 10.0
        };
        let finishes = [
            Finish::Keep,
            Finish::Clamp(Clamp {
                lo: 0.0,
                hi: 6.0,
                max_first: true,
            }),
            Finish::Silu,
        ];
        for kc in [1, 2, 7, 16, 33, 256] {
            let a: Vec<f32> = (0..kc * MR).map(|_| next()).collect();
            let b: Vec<f32> = (0..2 * kc * NR).map(|_| next()).collect();
            let (b0, b1) = b.split_at(kc * NR);
            let bias: Vec<f32> = (0..MR).map(|_| next()).collect();
            for (rows, cols) in [(MR, 2 * NR), (1, 2 * NR), (MR, NR + 1), (5, 23), (3, NR)] {
                for (f, &finish) in finishes.iter().enumerate() {
                    for store in [false, true] {
                        let start = store.then(|| core::array::from_fn(|r| bias[r]));
                        let init: Vec<f32> = (0..MR * 2 * NR).map(|_| next()).collect();
                        let run = |isa: Isa, pair: bool| {
                            let mut c = init.clone();
                            let cells = Cell::from_mut(c.as_mut_slice()).as_slice_of_cells();
                            let dst = Dst {
                                data: cells,
                                offset: 0,
                                rs: 2 * NR,
                                cs: 1,
                                finish,
                                start: Start::Add,
                                residual: None,
                            };
                            let end = (start, finish);
                            if pair {
                                micro_kernel_pair(
                                    isa,
                                    kc,
                                    &a[..],
                                    (b0, b1),
                                    &dst,
                                    (0, 0),
                                    (rows, cols),
                                    end,
                                );
                            } else {
                                micro_kernel(
                                    isa,
                                    kc,
                                    &a[..],
                                    b0,
                                    &dst,
                                    (0, 0),
                                    (rows, cols.min(NR)),
                                    end,
                                );
                                if cols > NR {
                                    micro_kernel(
                                        isa,
                                        kc,
                                        &a[..],
                                        b1,
                                        &dst,
                                        (0, NR),
                                        (rows, cols - NR),
                                        end,
                                    );
                                }
                            }
                            c.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                        };
                        let want = run(Isa::Fma, false);
                        for &isa in &isas {
                            assert_eq!(
                                run(isa, true),
                                want,
                                "{isa:?}: depth {kc}, {rows}x{cols}, finish {f}, store {store}"
                            );
                        }
                    }
                }
            }
        }
    }
}

//! The micro-kernels: one `MR × NR` tile of C from one A panel and one
//! B panel, or, with AVX-512, an `MR × 2·NR` tile from one A panel and
//! two B panels. Every element is the same chain of fused multiply-adds
//! down the depth whichever kernel computes it, so the choice changes
//! speed, never a bit of the result.

use super::{Dst, Finish, Float, MR, NR};
use crate::kernels::cells::Load;
use core::cell::Cell;

/// The instruction set the products' micro-kernels use, detected once
/// per product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    /// Plain multiplies and adds (no FMA: the sums round twice).
    Portable,
    /// AVX2 and FMA: 8-lane fused multiply-adds.
    Fma,
    /// AVX-512 F as well: pairs of B panels in 16-lane registers. On
    /// cores with two 512-bit FMA units this doubles the peak; on those
    /// that split each into two 256-bit halves it halves the
    /// instructions per multiply-add.
    Avx512,
}

impl Isa {
    /// What this CPU runs.
    pub(crate) fn detect() -> Isa {
        if !fma_available() {
            Isa::Portable
        } else if avx512_available() {
            Isa::Avx512
        } else {
            Isa::Fma
        }
    }
}

/// Adds the top-left `rows × cols` of `tile` to C at row `i`, column `j`
/// (or, given `start`, stores each row's `start[r] + tile`), plus C's
/// residual where it has one ([`Dst::at_block`] keeps it for the last
/// depth block), each sum then going through `finish`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn add_tile(
    c: &Dst<'_>,
    tile: &[[f32; NR]; MR],
    i: usize,
    j: usize,
    rows: usize,
    cols: usize,
    (start, finish): (Option<[f32; MR]>, Finish),
) {
    // A copy of the loops per case, so that none tests per element
    // whether it reads C or a residual.
    let at = ((i, j), (rows, cols));
    match (start, c.residual) {
        (None, None) => {
            with_finish!(finish, |f| add_tile_then::<false, false>(
                c,
                tile,
                at,
                &[0.0; MR],
                &[],
                f
            ))
        }
        (Some(s), None) => {
            with_finish!(finish, |f| add_tile_then::<true, false>(
                c,
                tile,
                at,
                &s,
                &[],
                f
            ))
        }
        (None, Some(r)) => {
            with_finish!(finish, |f| add_tile_then::<false, true>(
                c, tile, at, &[0.0; MR], r, f
            ))
        }
        (Some(s), Some(r)) => {
            with_finish!(finish, |f| add_tile_then::<true, true>(
                c, tile, at, &s, r, f
            ))
        }
    }
}

#[inline(always)]
fn add_tile_then<const STORE: bool, const RESIDUAL: bool>(
    c: &Dst<'_>,
    tile: &[[f32; NR]; MR],
    ((i, j), (rows, cols)): ((usize, usize), (usize, usize)),
    start: &[f32; MR],
    residual: &[Cell<f32>],
    f: impl Fn(f32) -> f32,
) {
    // The left operand of the addition is what C held (or would hold,
    // filled) before this block, as it always was; the residual is added
    // to that sum, as the `Add` step added it to the product's output.
    let from = |cell: &Cell<f32>, r: usize| if STORE { start[r] } else { cell.get() };
    let plus = |sum: f32, at: usize| {
        if RESIDUAL {
            sum + residual[at].get()
        } else {
            sum
        }
    };
    if c.rs == 1 && rows == MR {
        // C stored by columns (a product written transposed): each tile
        // column is one run.
        let base = c.offset + i + j * c.cs;
        for jj in 0..cols {
            let at = base + jj * c.cs;
            let dst = &c.data[at..at + MR];
            for (r, cell) in dst.iter().enumerate() {
                cell.set(f(plus(from(cell, r) + tile[r][jj], at + r)));
            }
        }
        return;
    }
    for (r, row) in tile.iter().enumerate().take(rows) {
        let base = c.offset + (i + r) * c.rs + j * c.cs;
        if c.cs == 1 && cols == NR {
            // A whole contiguous row of the tile: one bounds check, and
            // the adds vectorise (read all, then write all).
            let dst = &c.data[base..base + NR];
            let mut sums = [0f32; NR];
            for l in 0..NR {
                sums[l] = from(&dst[l], r) + row[l];
            }
            if RESIDUAL {
                for (sum, x) in sums.iter_mut().zip(&residual[base..base + NR]) {
                    *sum += x.get();
                }
            }
            for (cell, v) in dst.iter().zip(sums) {
                cell.set(f(v));
            }
            continue;
        }
        for (jj, v) in row.iter().enumerate().take(cols) {
            let at = base + jj * c.cs;
            let cell = &c.data[at];
            cell.set(f(plus(from(cell, r) + v, at)));
        }
    }
}

#[inline(always)]
fn tile_product<const FMA: bool, A: Load<f32>, B: Load<f32>>(
    kc: usize,
    a: A,
    b: B,
) -> [[f32; NR]; MR] {
    let mut acc = [[0f32; NR]; MR];
    let (a, b) = (a.sub(0, kc * MR), b.sub(0, kc * NR));
    for p in 0..kc {
        let (av, bv) = (a.sub(p * MR, MR), b.sub(p * NR, NR));
        let bv: [f32; NR] = core::array::from_fn(|j| bv.load(j));
        for (r, row) in acc.iter_mut().enumerate() {
            let ai = av.load(r);
            for (acc, bj) in row.iter_mut().zip(bv) {
                *acc = if FMA {
                    Float::mul_add(ai, bj, *acc)
                } else {
                    *acc + ai * bj
                };
            }
        }
    }
    acc
}

#[cfg(all(target_arch = "x86_64", feature = "std"))]
pub(crate) fn fma_available() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}

// Without std there is no run-time detection: the features the crate is
// compiled for decide (`-C target-feature=+avx2,+fma`).
#[cfg(all(target_arch = "x86_64", not(feature = "std")))]
pub(crate) fn fma_available() -> bool {
    cfg!(all(target_feature = "avx2", target_feature = "fma"))
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn fma_available() -> bool {
    false
}

#[cfg(all(target_arch = "x86_64", feature = "std"))]
fn avx512_available() -> bool {
    std::is_x86_feature_detected!("avx512f")
}

#[cfg(all(target_arch = "x86_64", not(feature = "std")))]
fn avx512_available() -> bool {
    cfg!(target_feature = "avx512f")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512_available() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn micro_kernel_avx2<A: Load<f32>, B: Load<f32>>(
    kc: usize,
    (a, b): (A, B),
    c: &Dst<'_>,
    (i, j): (usize, usize),
    (rows, cols): (usize, usize),
    end: (Option<[f32; MR]>, Finish),
) {
    let tile = tile_product::<true, A, B>(kc, a, b);
    add_tile(c, &tile, i, j, rows, cols, end);
}

/// Adds the `MR × NR` tile of one A panel (`kc × MR`, depth-major) times
/// one B panel (`kc × NR`), each a packed scratch block or a weight packed
/// at compile time, to C at row `i`, column `j` (its top-left `rows ×
/// cols`; stored over C from the rows' starting values instead, when
/// `end.0` holds them), each sum then through `end.1`. With AVX-512 the
/// tile is sixteen lanes wide in registers, with FMA eight; either way
/// the addition into C is compiled for the same instruction set.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn micro_kernel<A: Load<f32>, B: Load<f32>>(
    isa: Isa,
    kc: usize,
    a: A,
    b: B,
    c: &Dst<'_>,
    at: (usize, usize),
    size: (usize, usize),
    end: (Option<[f32; MR]>, Finish),
) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        // SAFETY: the function only needs the CPU to have AVX-512 F,
        // which `Isa::detect` checked at run time.
        #[allow(unsafe_code)]
        return unsafe { micro_kernel_avx512(kc, ([a], [b]), c, at, ([size.0], size.1), [end]) };
    }
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Portable {
        // SAFETY: the function only needs the CPU to have AVX2 and FMA,
        // which `Isa::detect` checked at run time.
        #[allow(unsafe_code)]
        return unsafe { micro_kernel_avx2(kc, (a, b), c, at, size, end) };
    }
    micro_kernel_portable(kc, (a, b), c, at, size, end);
}

/// [`micro_kernel`] over two B panels side by side: the `MR × 2·NR` tile
/// at `at` (its top-left `size`, up to `2·NR` columns; `b.1` is read
/// only when they pass `NR`). With AVX-512 one loop computes both
/// panels' tiles, each A value broadcast once for both: 12 independent
/// 16-lane chains, enough to keep two FMA units busy through their
/// latency. Otherwise the panels go one after the other.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn micro_kernel_pair<A: Load<f32>, B: Load<f32>>(
    isa: Isa,
    kc: usize,
    a: A,
    b: (B, B),
    c: &Dst<'_>,
    (i, j): (usize, usize),
    (rows, cols): (usize, usize),
    end: (Option<[f32; MR]>, Finish),
) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && cols > NR {
        // SAFETY: the function only needs the CPU to have AVX-512 F,
        // which `Isa::detect` checked at run time.
        #[allow(unsafe_code)]
        return unsafe {
            micro_kernel_avx512(kc, ([a], [b.0, b.1]), c, (i, j), ([rows], cols), [end])
        };
    }
    micro_kernel(isa, kc, a, b.0, c, (i, j), (rows, cols.min(NR)), end);
    if cols > NR {
        micro_kernel(isa, kc, a, b.1, c, (i, j + NR), (rows, cols - NR), end);
    }
}

/// [`micro_kernel_pair`] for two whole A panels at once: rows `i..i +
/// 2·MR`, `a[q]` holding rows `i + q·MR..`, each panel's rows with their
/// own `ends[q]`. With AVX-512 one loop computes the 12 × 32 tile (24
/// chains); otherwise the panels go one after the other.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn micro_kernel_quad<A: Load<f32>, B: Load<f32>>(
    isa: Isa,
    kc: usize,
    a: [A; 2],
    b: (B, B),
    c: &Dst<'_>,
    (i, j): (usize, usize),
    cols: usize,
    ends: [(Option<[f32; MR]>, Finish); 2],
) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && cols > NR {
        // SAFETY: the function only needs the CPU to have AVX-512 F,
        // which `Isa::detect` checked at run time.
        #[allow(unsafe_code)]
        return unsafe {
            micro_kernel_avx512(kc, (a, [b.0, b.1]), c, (i, j), ([MR; 2], cols), ends)
        };
    }
    for (q, (a, end)) in a.into_iter().zip(ends).enumerate() {
        micro_kernel_pair(isa, kc, a, b, c, (i + q * MR, j), (MR, cols), end);
    }
}

/// `Q` A panels (one or two, rows `i..` then `i + MR..`) against `P` B
/// panels (one or two) in 16-lane registers: the `Q·MR × P·NR` tile at
/// `(i, j)`, of which each panel's top-left `rows[q] × cols` is added to
/// C. Two A panels against two B panels keep 24 sums in registers, each
/// B vector loaded once for twelve rows instead of six.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn micro_kernel_avx512<const Q: usize, const P: usize, A: Load<f32>, B: Load<f32>>(
    kc: usize,
    (a, b): ([A; Q], [B; P]),
    c: &Dst<'_>,
    (i, j): (usize, usize),
    (rows, cols): ([usize; Q], usize),
    ends: [(Option<[f32; MR]>, Finish); Q],
) {
    use core::arch::x86_64::*;
    // Bounds checked once here; the loop reads inside these panels.
    let pa: [*const f32; Q] = a.map(|a| a.sub(0, kc * MR).ptr());
    let pb: [*const f32; P] = b.map(|b| b.sub(0, kc * NR).ptr());
    for (q, &rows) in rows.iter().enumerate() {
        prefetch_tile(c, (i + q * MR, j), rows, P);
    }
    let mut acc = [[[_mm512_setzero_ps(); P]; MR]; Q];
    for p in 0..kc {
        // SAFETY: `p < kc`, and the panels hold `kc` depths of NR = 16
        // floats (B) and of MR floats (A), as `sub` checked; nothing
        // writes them while the kernel reads.
        #[allow(unsafe_code)]
        let x: [__m512; P] = pb.map(|pb| unsafe { _mm512_loadu_ps(pb.add(p * NR)) });
        for (pa, acc) in pa.iter().zip(acc.iter_mut()) {
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: as above, `p * MR + r < kc * MR`.
                #[allow(unsafe_code)]
                let w = _mm512_set1_ps(unsafe { *pa.add(p * MR + r) });
                for (acc, x) in acc.iter_mut().zip(x) {
                    *acc = _mm512_fmadd_ps(w, x, *acc);
                }
            }
        }
    }
    if store_rows(c, &acc, (i, j), (rows, cols), ends) {
        return;
    }
    // Stored whole first, every index known at compile time: a sum read
    // by a run-time index keeps them all in memory through the loop.
    let mut tiles = [[[[0f32; NR]; MR]; P]; Q];
    for (tiles, acc) in tiles.iter_mut().zip(&acc) {
        for (r, acc) in acc.iter().enumerate() {
            for (tile, v) in tiles.iter_mut().zip(acc) {
                // SAFETY: a tile row holds NR = 16 floats, one store's worth.
                #[allow(unsafe_code)]
                unsafe {
                    _mm512_storeu_ps(tile[r].as_mut_ptr(), *v)
                };
            }
        }
    }
    for (q, tiles) in tiles.iter().enumerate() {
        for (t, tile) in tiles.iter().enumerate() {
            let width = cols.saturating_sub(t * NR).min(NR);
            if width > 0 {
                add_tile(c, tile, i + q * MR, j + t * NR, rows[q], width, ends[q]);
            }
        }
    }
}

/// The epilogue of [`micro_kernel_avx512`] from its registers where C's
/// rows are contiguous (`cs == 1`) and the tile lies inside C (and its
/// residual): for each row's vectors, `start + sum` (or C's value plus
/// the sum), plus the residual, through the finish, stored under a mask of
/// the tile's columns. These are [`add_tile`]'s operations in its order,
/// so the bits are its; it stored the sums to the stack and read them
/// back, and applied the finish as a loop per row, as long as the sums
/// of a shallow product took (depths 16–64). False, with nothing written,
/// where it does not apply.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn store_rows<const Q: usize, const P: usize>(
    c: &Dst<'_>,
    acc: &[[[core::arch::x86_64::__m512; P]; MR]; Q],
    (i, j): (usize, usize),
    (rows, cols): ([usize; Q], usize),
    ends: [(Option<[f32; MR]>, Finish); Q],
) -> bool {
    use crate::kernels::finish16::Finish16;
    use core::arch::x86_64::*;
    let last_row = i + (Q - 1) * MR + rows[Q - 1];
    let end = last_row
        .checked_sub(1)
        .map(|r| c.offset + r * c.rs + j + cols);
    let inside = |len: usize| end.is_some_and(|end| end <= len);
    if c.cs != 1 || (c.rs == 1 && rows.contains(&MR)) || cols == 0 || !inside(c.data.len()) {
        return false;
    }
    if c.residual.is_some_and(|r| !inside(r.len())) {
        return false;
    }
    let data = c.data.as_ptr() as *mut f32;
    let residual = c.residual.map(|r| r.as_ptr().cast::<f32>());
    for (q, acc) in acc.iter().enumerate() {
        let (start, finish) = ends[q];
        // SAFETY: the kernel runs only where `Isa::detect` found AVX-512
        // F (with AVX2 and FMA).
        #[allow(unsafe_code)]
        let finish = unsafe { Finish16::of(finish) };
        for (r, acc) in acc.iter().enumerate().take(rows[q]) {
            let base = c.offset + (i + q * MR + r) * c.rs + j;
            for (t, v) in acc.iter().enumerate() {
                let width = cols.saturating_sub(t * NR).min(NR);
                if width == 0 {
                    continue;
                }
                let mask = (u32::MAX >> (32 - width)) as __mmask16;
                let at = base + t * NR;
                // SAFETY: `at + width <= end`, inside C and its residual
                // (checked above); only this thread writes C's tile.
                #[allow(unsafe_code)]
                unsafe {
                    let from = match start {
                        Some(s) => _mm512_set1_ps(s[r]),
                        None => _mm512_maskz_loadu_ps(mask, data.add(at)),
                    };
                    let mut sum = _mm512_add_ps(from, *v);
                    if let Some(residual) = residual {
                        sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(mask, residual.add(at)));
                    }
                    _mm512_mask_storeu_ps(data.add(at), mask, finish.apply(sum));
                }
            }
        }
    }
    true
}

/// Asks for the lines of C's tile at `(i, j)` (`rows` rows of
/// `panels·NR` floats) while the depth loop runs: the tile is written
/// right after it, and its rows lie a row stride apart, outside the
/// caches for the larger maps. Waiting for them after the loop stalled
/// the stores (1×1 convolutions of depth 64 ran at half the speed). The
/// same lines of a residual, which the tile's epilogue reads, likewise:
/// waiting for them made resnet50's 64 → 256 projections at 56 × 56,
/// whose residual is 3.2 MB, half again as slow as the same product
/// without one.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_tile(c: &Dst<'_>, (i, j): (usize, usize), rows: usize, panels: usize) {
    use core::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0, _MM_HINT_T0};
    if c.cs != 1 {
        return;
    }
    let base = c.data.as_ptr().cast::<f32>();
    let residual = c.residual.map(|r| r.as_ptr().cast::<f32>());
    for r in 0..rows {
        let index = c.offset + (i + r) * c.rs + j;
        for line in (0..panels * NR).step_by(NR).chain([panels * NR - 1]) {
            // SAFETY: a prefetch never faults, whatever the address; the
            // addresses are C's own (and its residual's, laid out as C)
            // where the tile lies inside it.
            #[allow(unsafe_code)]
            unsafe {
                _mm_prefetch::<_MM_HINT_ET0>(base.wrapping_add(index + line).cast());
                if let Some(residual) = residual {
                    _mm_prefetch::<_MM_HINT_T0>(residual.wrapping_add(index + line).cast());
                }
            };
        }
    }
}

/// The micro-kernel without FMA, kept out of line like the AVX2 one:
/// inlined, its per-element address arithmetic spread into the loops of
/// every product that calls it, which then carried dozens of spilled
/// induction variables through each tile even on the AVX2 path (bert_base
/// spent a third of its time there).
#[inline(never)]
fn micro_kernel_portable<A: Load<f32>, B: Load<f32>>(
    kc: usize,
    (a, b): (A, B),
    c: &Dst<'_>,
    (i, j): (usize, usize),
    (rows, cols): (usize, usize),
    end: (Option<[f32; MR]>, Finish),
) {
    let tile = tile_product::<false, A, B>(kc, a, b);
    add_tile(c, &tile, i, j, rows, cols, end);
}

//! Depthwise quantized convolutions (one input and one output channel per
//! group, 2-d), computed directly: each tap adds `(x − a0)·(w − b0)` over
//! the output columns whose input column is inside the image, into i32
//! sums. Padding adds nothing, as in the reference loops (it holds a's
//! zero point), and the sums are the reference's modulo 2³² (wrapping i32,
//! in another order), so the outputs are the reference's bit for bit. The
//! input is first widened to i16 `x − a0` and split by column phase, so
//! that every tap's run is one contiguous slice and the inner loop
//! vectorises; no packing, no scratch. Where a band of output rows fits
//! the stack buffers ([`Band`]), its padded input is widened once and each
//! tap is one run over all its rows; otherwise per output row, the last
//! [`RING`] widened lines kept so that the output rows sharing an input
//! line (all of a 3×3 window's but one, at stride 1) widen it once. The
//! loops are compiled once per instruction set (AVX-512, AVX2, the
//! baseline) from one generic body: the baseline has no 32-bit vector
//! multiply. Where sixteen planes' strips fit the stack tiles, planes go
//! sixteen at a time across vector lanes instead: four taps per
//! `vpdpbusd` with AVX-512 VNNI and VBMI and symmetric weights
//! ([`quads`], 1.2× to 5× the bands on mobilenet's and efficientnet's
//! layers), else widened to i16 ([`blocks`]).

use super::epilogue::{self, Line};
use super::fast::Domains;
use super::igemm::Isa;
use super::{Out, QConv, Requant};
use crate::kernels::cells::{Load, Src};
use core::ops::Range;

/// Widest output row the stack buffer of sums holds.
const ROW: usize = 1024;
/// Most taps per window.
const TAPS: usize = 64;
/// i16 of the stack buffer of widened input lines: one line (with its
/// phases) at most this wide.
const LINES: usize = 4096;
/// Widened input lines kept at most (a 3×3 window's rows).
const RING: usize = 3;
/// i32 sums of one band of rows ([`Band`]), on the stack.
const PLANE_SUMS: usize = 4096;

/// What every plane of one convolution shares.
struct Geometry {
    ih: usize,
    iw: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sy: usize,
    sx: usize,
    dy: usize,
    py: isize,
    /// Length of one column phase of a widened line.
    len: usize,
    /// Widened lines the buffer keeps (1 to [`RING`]), each `len·sx` long.
    slots: usize,
    /// For each tap column: its output columns `lo..hi` (those whose
    /// input column is inside the image) and where the first one's input
    /// sits in a widened line; `None` if there are none.
    cols: [Option<(usize, usize, usize)>; TAPS],
    groups: usize,
    /// XOR of a's and b's bytes ([`Domains`]).
    flips: (u8, u8),
    /// a's zero point on the u8 side (a byte: `x − a0` fits i16).
    a0: i16,
    px: isize,
    dx: usize,
    /// How bands of rows are computed at once, where one row fits.
    band: Option<Band>,
    /// For each tap of a band: its phase plane, and the row and column
    /// in it of output (0, 0)'s input (worked out once per call).
    tap_at: [(usize, usize, usize); TAPS],
}

/// Bands of output rows computed together (where a band of at least one
/// row fits the stack buffers): the band's padded input widened once into
/// `sy·sx` phase planes of `pr × pc` (padded row `sy·r + i`, column
/// `sx·c + j` in phase `(i, j)`, zero outside the image), so that each
/// tap adds one contiguous run of `(rows − 1)·pc + ow` sums, the output's
/// rows `pc` apart (the columns between them are sums nobody reads). The
/// run is taken [`CHUNK`] sums at a time with every tap added into
/// registers before one store, where a row at a time spent itself on
/// short rows' ends and on a load and store of the sums per tap.
#[derive(Clone, Copy)]
struct Band {
    /// Output rows per band (the last may have fewer).
    rows: usize,
    pc: usize,
}

/// Sums held in registers while every tap is added (two AVX-512 vectors).
const CHUNK: usize = 32;

impl Band {
    /// The largest band of `g` whose widened phases fit the line buffer
    /// ([`LINES`]) and whose sums fit [`PLANE_SUMS`]; `None` if not even
    /// one row does.
    fn of(g: &Geometry) -> Option<Band> {
        let reach_x = (g.ow - 1) * g.sx + (g.kw - 1) * g.dx + 1;
        let pc = reach_x.div_ceil(g.sx);
        let fits = |rows: usize| {
            let b = Band { rows, pc };
            g.sy * g.sx * b.pr(g, rows) * pc <= LINES && b.run(g, rows) <= PLANE_SUMS
        };
        if !fits(1) {
            return None;
        }
        // Grows while it fits: at most `oh` steps, once per call.
        let mut rows = 1;
        while rows < g.oh && fits(rows + 1) {
            rows += 1;
        }
        Some(Band { rows, pc })
    }

    /// Rows of each phase plane for a band of `rows` output rows.
    fn pr(&self, g: &Geometry, rows: usize) -> usize {
        ((rows - 1) * g.sy + (g.kh - 1) * g.dy + 1).div_ceil(g.sy)
    }

    /// Sums of one tap's run over a band of `rows` output rows.
    fn run(&self, g: &Geometry, rows: usize) -> usize {
        (rows - 1) * self.pc + g.ow
    }
}

impl QConv {
    /// The direct depthwise path; `false` where it declines (a grouped
    /// convolution with more than one channel per group, 3-d, wider rows
    /// than [`ROW`], more taps than [`TAPS`], a's zero point not a byte
    /// on the u8 side). Thread `part` of `parts` takes consecutive
    /// (image, channel) planes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_depthwise(
        &self,
        isa: Isa,
        x: Src<'_, u8>,
        w: Src<'_, u8>,
        dom: Domains,
        q: &Requant<'_>,
        out: &Out<'_>,
        part: usize,
        parts: usize,
    ) -> bool {
        let s = &self.shape;
        let win = &s.window;
        let [_, ih, iw] = win.input;
        let [_, oh, ow] = win.output;
        let [_, kh, kw] = win.kernel;
        let flat = win.input[0] == 1 && win.output[0] == 1 && win.kernel[0] == 1 && win.pad[0] == 0;
        let sx = win.strides[2];
        if !s.depthwise() || !flat || ow > ROW || kh * kw > TAPS || sx == 0 {
            return false;
        }
        let len = iw.div_ceil(sx);
        if len * sx > LINES {
            return false;
        }
        let Ok(a0) = u8::try_from(dom.a0(q.a0)) else {
            return false;
        };
        // Taps `w − b0` are kept as i16 (an i8 less a zero point this
        // close to it), so that each product is of two sign-extended i16
        // and compiles to `vpmaddwd` (`pmaddwd` on the baseline) rather
        // than a 32-bit multiply.
        let plane = oh * ow;
        let b0s = || (0..s.groups).map(|c| dom.b0(q.b0(c * plane)));
        if !b0s().all(|b0| b0.unsigned_abs() <= 32_000) {
            return false;
        }
        let (dx, px) = (win.dilations[2], win.pad[2] as isize);
        let cols = core::array::from_fn(|tx| {
            if tx >= kw {
                return None;
            }
            // Columns ox with 0 ≤ ox·sx + off < iw.
            let off = (tx * dx) as isize - px;
            let lo = if off < 0 {
                off.unsigned_abs().div_ceil(sx)
            } else {
                0
            };
            let last = iw as isize - 1 - off;
            if last < 0 {
                return None;
            }
            let hi = (last as usize / sx + 1).min(ow);
            if lo >= hi {
                return None;
            }
            let first = ((lo * sx) as isize + off) as usize;
            Some((lo, hi, first % sx * len + first / sx))
        });
        let g = Geometry {
            ih,
            iw,
            oh,
            ow,
            kh,
            kw,
            sy: win.strides[1],
            sx,
            dy: win.dilations[1],
            py: win.pad[1] as isize,
            len,
            slots: (LINES / (len * sx).max(1)).min(RING),
            cols,
            groups: s.groups,
            flips: dom.flips(),
            a0: a0.into(),
            px,
            dx,
            band: None,
            tap_at: core::array::from_fn(|t| {
                let (sy, dy) = (win.strides[1], win.dilations[1]);
                if t >= kh * kw || sy == 0 {
                    return (0, 0, 0);
                }
                let (ty, tx) = (t / kw, t % kw);
                let (oy, iy) = (ty * dy / sy, ty * dy % sy);
                let (ox, ix) = (tx * dx / sx, tx * dx % sx);
                (iy * sx + ix, oy, ox)
            }),
        };
        let g = Geometry {
            band: if oh > 0 && ow > 0 && g.sy > 0 {
                Band::of(&g)
            } else {
                None
            },
            ..g
        };
        let planes = s.batch * s.groups;
        let strips = blocks::Strips::of(&g);
        #[cfg(test)]
        let strips = strips.filter(|_| !tests::FORCE_BANDS.with(|c| c.get()));
        // Sixteen planes at a time four taps per instruction where the CPU
        // can and the weights are symmetric ([`quads`]).
        #[cfg(target_arch = "x86_64")]
        let quads = strips.is_some()
            && isa == Isa::Vnni
            && quads::fits(&g)
            && quads::cpu_has_vbmi()
            && b0s().all(|b0| b0 == 0);
        #[cfg(not(target_arch = "x86_64"))]
        let quads = false;
        // Shares of whole blocks where planes go [`blocks::LANES`] at a
        // time (a share's short last block costs a whole one).
        let unit = if strips.is_some() { blocks::LANES } else { 1 };
        let per = planes.div_ceil(unit).div_ceil(parts.max(1)) * unit;
        let mine = (part * per).min(planes)..((part + 1) * per).min(planes);
        crate::with_load!(x, |x| crate::with_load!(w, |w| {
            let task = Task {
                g: &g,
                x,
                w,
                dom,
                q,
                out,
                isa,
            };
            if let Some(st) = strips.as_ref().filter(|_| quads) {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `Isa::Vnni` is only chosen where the CPU has
                // AVX-512 F, BW and VNNI (`Isa::detect`), and `quads` where
                // it has VBMI too.
                #[allow(unsafe_code)]
                unsafe {
                    quads::quads_avx512(&task, st, mine)
                }
                #[cfg(test)]
                tests::QUAD_RUNS.with(|c| c.set(c.get() + 1));
            } else if let Some(st) = &strips {
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Vnni => {
                        // SAFETY: `Isa::Vnni` is only chosen where the CPU
                        // has AVX-512 F and BW (`Isa::detect`).
                        #[allow(unsafe_code)]
                        unsafe {
                            blocks::x86::blocks_avx512(&task, st, mine)
                        }
                    }
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 => {
                        // SAFETY: `Isa::Avx2` is only chosen where the CPU
                        // has AVX2.
                        #[allow(unsafe_code)]
                        unsafe {
                            blocks::x86::blocks_avx2(&task, st, mine)
                        }
                    }
                    _ => task.blocks(st, mine),
                }
                #[cfg(test)]
                tests::BLOCK_RUNS.with(|c| c.set(c.get() + 1));
            } else {
                task.planes_on(mine)
            }
        }));
        #[cfg(test)]
        super::tests::DEPTHWISE_RUNS.with(|c| c.set(c.get() + 1));
        true
    }
}

impl<X: Load<u8>, W: Load<u8>> Task<'_, X, W> {
    /// [`Task::planes`] with the instruction set's copy.
    fn planes_on(&self, mine: Range<usize>) {
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Vnni => {
                // SAFETY: `Isa::Vnni` is only chosen where the CPU has
                // AVX-512 F and BW (`Isa::detect`).
                #[allow(unsafe_code)]
                unsafe {
                    x86::planes_avx512(self, mine)
                }
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                // SAFETY: `Isa::Avx2` is only chosen where the CPU has
                // AVX2.
                #[allow(unsafe_code)]
                unsafe {
                    x86::planes_avx2(self, mine)
                }
            }
            _ => self.planes(mine),
        }
    }
}

/// One call's operands.
struct Task<'a, X, W> {
    g: &'a Geometry,
    x: X,
    w: W,
    dom: Domains,
    q: &'a Requant<'a>,
    out: &'a Out<'a>,
    isa: Isa,
}

impl<X: Load<u8>, W: Load<u8>> Task<'_, X, W> {
    /// The planes `mine`; inlined into each instruction set's copy.
    #[inline(always)]
    fn planes(&self, mine: Range<usize>) {
        let g = self.g;
        let (q, dom, flips) = (self.q, self.dom, g.flips);
        let (kh, kw, ow) = (g.kh, g.kw, g.ow);
        let mut sums = [0i32; PLANE_SUMS];
        let mut ring = [0i16; LINES];
        let size = g.len * g.sx;
        for plane in mine {
            let channel = plane % g.groups;
            let (xb, ob) = (plane * g.ih * g.iw, plane * g.oh * ow);
            let (bias, scale, b0) = q.channel(ob);
            let b0 = dom.b0(b0);
            let requant: Line = q.line(bias, scale, 0, 0);
            // Within i16: `run_depthwise` checked every channel's b0.
            let taps: [i16; TAPS] = core::array::from_fn(|t| {
                if t < kh * kw {
                    let v = self.w.load(channel * kh * kw + t) ^ flips.1;
                    (i32::from(v as i8) - b0) as i16
                } else {
                    0
                }
            });
            if let Some(band) = g.band {
                let mut oy0 = 0;
                while oy0 < g.oh {
                    let rows = band.rows.min(g.oh - oy0);
                    self.band(&band, xb, oy0, rows, &taps, &mut ring, &mut sums);
                    let n = rows * ow;
                    let at = ob + oy0 * ow;
                    epilogue::row(self.isa, &sums[..n], None, &requant, self.out, at);
                    oy0 += rows;
                }
                continue;
            }
            // The input line each ring slot holds (none yet).
            let mut held = [usize::MAX; RING];
            for oy in 0..g.oh {
                let row = &mut sums[..ow];
                row.fill(0);
                for ty in 0..kh {
                    let iy = (oy * g.sy + ty * g.dy) as isize - g.py;
                    if iy < 0 || iy as usize >= g.ih {
                        continue;
                    }
                    let iy = iy as usize;
                    let slot = iy % g.slots;
                    let line = &mut ring[slot * size..(slot + 1) * size];
                    if held[slot] != iy {
                        self.widen(xb + iy * g.iw, line);
                        held[slot] = iy;
                    }
                    let line = &line[..];
                    for (tx, cols) in g.cols.iter().enumerate().take(kw) {
                        let Some((lo, hi, at)) = *cols else {
                            continue;
                        };
                        let wv = i32::from(taps[ty * kw + tx]);
                        let xs = &line[at..at + (hi - lo)];
                        for (acc, &v) in row[lo..hi].iter_mut().zip(xs) {
                            // Exact: two i16 (|x − a0| ≤ 255).
                            *acc = acc.wrapping_add(i32::from(v) * wv);
                        }
                    }
                }
                epilogue::row(self.isa, row, None, &requant, self.out, ob + oy * ow);
            }
        }
    }

    /// The sums of output rows `oy0..oy0 + rows` of the plane whose input
    /// starts at `xb`, left `ow` apart at the start of `sums` ([`Band`]);
    /// `phases` holds the widened input.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn band(
        &self,
        b: &Band,
        xb: usize,
        oy0: usize,
        rows: usize,
        taps: &[i16; TAPS],
        phases: &mut [i16; LINES],
        sums: &mut [i32; PLANE_SUMS],
    ) {
        let g = self.g;
        let (flip, a0) = (g.flips.0, g.a0);
        let (sy, sx, pc) = (g.sy, g.sx, b.pc);
        let pr = b.pr(g, rows);
        let phase_len = pr * pc;
        // Phase j of a row: columns c with 0 ≤ c·sx + j − px < iw,
        // `lo..hi` (the same for every row: worked out once, divisions
        // being a small plane's main cost otherwise).
        let span_of = |j: usize| {
            let first = g.px - j as isize;
            let lo = if first > 0 {
                (first as usize).div_ceil(sx).min(pc)
            } else {
                0
            };
            let end = g.iw as isize + g.px - j as isize; // c·sx < end
            let hi = if end > 0 {
                (end as usize).div_ceil(sx).clamp(lo, pc)
            } else {
                lo
            };
            (lo, hi)
        };
        let spans: [(usize, usize); 4] =
            core::array::from_fn(|j| if j < sx { span_of(j) } else { (0, 0) });
        let span = |j: usize| if j < 4 { spans[j] } else { span_of(j) };
        // Row r's phase `r % sy` and row within it `r / sy`, counted.
        let (mut ri, mut rq) = (0, 0);
        for r in 0..pr * sy {
            let (phase_row, row_in) = (ri, rq);
            ri += 1;
            if ri == sy {
                ri = 0;
                rq += 1;
            }
            let iy = (oy0 * sy + r) as isize - g.py;
            let inside = iy >= 0 && (iy as usize) < g.ih;
            let at = |j: usize| (phase_row * sx + j) * phase_len + row_in * pc;
            let line = xb + if inside { iy as usize * g.iw } else { 0 };
            if sx == 2 && inside {
                // Both phases from one pass over the line where their
                // columns alternate (the one starting first as long as the
                // other or one longer).
                let (p0, rest) = phases[at(0)..].split_at_mut(phase_len);
                let mut ph = [(&mut p0[..pc], span(0)), (&mut rest[..pc], span(1))];
                let start = |j: usize, lo: usize| (lo * 2 + j) as isize - g.px;
                let (s0, s1) = (start(0, ph[0].1 .0), start(1, ph[1].1 .0));
                if s1 < s0 {
                    ph.swap(0, 1);
                }
                let [(first, (lo_a, hi_a)), (second, (lo_b, hi_b))] = ph;
                clear_outside(first, lo_a, hi_a);
                clear_outside(second, lo_b, hi_b);
                let (na, nb) = (hi_a - lo_a, hi_b - lo_b);
                let from = s0.min(s1);
                if s0.abs_diff(s1) == 1 && na >= nb && na - nb <= 1 && na > 0 {
                    let src = self.x.sub(line + from as usize, na + nb);
                    deinterleave(
                        src,
                        &mut first[lo_a..hi_a],
                        &mut second[lo_b..hi_b],
                        flip,
                        a0,
                    );
                } else {
                    let j_a = if s1 < s0 { 1 } else { 0 };
                    for (j, p, lo, hi) in [(j_a, first, lo_a, hi_a), (1 - j_a, second, lo_b, hi_b)]
                    {
                        if lo < hi {
                            let src = self
                                .x
                                .sub(line + start(j, lo) as usize, (hi - lo - 1) * 2 + 1);
                            for (i, cell) in p[lo..hi].iter_mut().enumerate() {
                                *cell = i16::from(src.load(2 * i) ^ flip) - a0;
                            }
                        }
                    }
                }
                continue;
            }
            for j in 0..sx {
                let (lo, hi) = span(j);
                let dst = &mut phases[at(j)..at(j) + pc];
                if !inside || lo == hi {
                    dst.fill(0);
                    continue;
                }
                clear_outside(dst, lo, hi);
                let start = (lo * sx + j) as isize - g.px;
                let src = self.x.sub(line + start as usize, (hi - lo - 1) * sx + 1);
                if sx == 1 {
                    widen_run(src, &mut dst[lo..hi], flip, a0);
                } else {
                    for (i, cell) in dst[lo..hi].iter_mut().enumerate() {
                        *cell = i16::from(src.load(i * sx) ^ flip) - a0;
                    }
                }
            }
        }
        // Each tap: where its run starts in `phases`, and its weight.
        let ntaps = g.kh * g.kw;
        let mut offs = [(0usize, 0i32); TAPS];
        for (t, (o, &(phase, oy, ox))) in offs.iter_mut().zip(&g.tap_at).take(ntaps).enumerate() {
            *o = (phase * phase_len + oy * pc + ox, i32::from(taps[t]));
        }
        let run = b.run(g, rows);
        accumulate_on(self.isa, &phases[..], &offs[..ntaps], &mut sums[..run]);
        // The output's rows, `pc` apart, moved together (left: no row is
        // overwritten before it moves).
        for oy in 1..rows {
            sums.copy_within(oy * pc..oy * pc + g.ow, oy * g.ow);
        }
    }

    /// Input line `from..from + iw` as `x − a0`, split by column phase.
    #[inline(always)]
    fn widen(&self, from: usize, line: &mut [i16]) {
        let g = self.g;
        let (flip, a0) = (g.flips.0, g.a0);
        let src = self.x.sub(from, g.iw);
        if g.sx == 1 {
            widen_run(src, &mut line[..g.iw], flip, a0);
            return;
        }
        for phase in 0..g.sx {
            let to = &mut line[phase * g.len..(phase + 1) * g.len];
            for (cell, c) in to.iter_mut().zip((phase..g.iw).step_by(g.sx)) {
                *cell = i16::from(src.load(c) ^ flip) - a0;
            }
        }
    }
}

/// `dst[c] = (src[c] ^ flip) − a0` over equal lengths, sixteen at a
/// time through fixed arrays (so that the loop is vector code whatever the
/// length: a loop over the slice vectorises by 64 and leaves short rows to
/// a byte-at-a-time remainder), the last sixteen overlapping the ones
/// before (the same values written twice).
#[inline(always)]
fn widen_run<X: Load<u8>>(src: X, dst: &mut [i16], flip: u8, a0: i16) {
    let n = dst.len().min(src.count());
    let (src, dst) = (src.sub(0, n), &mut dst[..n]);
    // Rows of 8 to 15 (a 7×7 or 14×14 plane's, with padding) eight at a
    // time: one at a time was most of a small plane's widening.
    if n < 8 {
        for (c, d) in dst.iter_mut().enumerate() {
            *d = i16::from(src.load(c) ^ flip) - a0;
        }
    } else if n < 16 {
        widen_chunks::<X, 8>(src, dst, flip, a0);
    } else {
        widen_chunks::<X, 16>(src, dst, flip, a0);
    }
}

/// [`widen_run`] `N` at a time, the last `N` overlapping the ones before;
/// `src` and `dst` as long, at least `N`.
#[inline(always)]
fn widen_chunks<X: Load<u8>, const N: usize>(src: X, dst: &mut [i16], flip: u8, a0: i16) {
    // A function rather than a closure: a closure called twice was left
    // out of line, compiled without the caller's instruction set.
    #[inline(always)]
    fn chunk<X: Load<u8>, const N: usize>(src: &X, c: usize, dst: &mut [i16], flip: u8, a0: i16) {
        let bytes: [u8; N] = copy(src.sub(c, N));
        for (d, b) in dst[c..c + N].iter_mut().zip(bytes) {
            *d = i16::from(b ^ flip) - a0;
        }
    }
    let n = dst.len();
    let mut c = 0;
    while c + N <= n {
        chunk::<X, N>(&src, c, dst, flip, a0);
        c += N;
    }
    if c < n {
        chunk::<X, N>(&src, n - N, dst, flip, a0);
    }
}

/// The `N` bytes of `src` (exactly that long), copied as they are: a loop
/// the compiler turns into one vector load, where loading and changing
/// each byte in one go (or `array::from_fn`) loads them one by one.
#[inline(always)]
fn copy<X: Load<u8>, const N: usize>(src: X) -> [u8; N] {
    let mut bytes = [0u8; N];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = src.load(i);
    }
    bytes
}

/// Zeroes `dst` outside `lo..hi` (the padding), element by element: the
/// ranges are a few columns, shorter than a call to `memset` is worth.
#[inline(always)]
fn clear_outside(dst: &mut [i16], lo: usize, hi: usize) {
    let hi = hi.max(lo).min(dst.len());
    for cell in &mut dst[..lo.min(hi)] {
        *cell = 0;
    }
    for cell in &mut dst[hi..] {
        *cell = 0;
    }
}

/// `even[c] = (src[2c] ^ flip) − a0` and `odd[c] = (src[2c + 1] ^ flip)
/// − a0`, where `src` holds `even.len() + odd.len()` bytes (`odd` as long
/// as `even` or one shorter). Sixteen pairs at a time through a fixed
/// array, so that the split compiles to shuffles rather than a byte at a
/// time.
#[inline(always)]
fn deinterleave<X: Load<u8>>(src: X, even: &mut [i16], odd: &mut [i16], flip: u8, a0: i16) {
    let n = even.len();
    let m = odd.len().min(n);
    let pairs = m.min(src.count() / 2);
    // Eight pairs at a time below sixteen (a 14×14 or 7×7 output's rows).
    let c = if pairs >= 16 {
        deinterleave_chunks::<X, 16, 32>(src, even, odd, pairs, flip, a0)
    } else if pairs >= 8 {
        deinterleave_chunks::<X, 8, 16>(src, even, odd, pairs, flip, a0)
    } else {
        0
    };
    for c in c..n.min(src.count().div_ceil(2)) {
        even[c] = i16::from(src.load(2 * c) ^ flip) - a0;
        if c < m && 2 * c + 1 < src.count() {
            odd[c] = i16::from(src.load(2 * c + 1) ^ flip) - a0;
        }
    }
}

/// [`accumulate`] with the instruction set's best loop: with VNNI, taps
/// in pairs through `vpdpwssd` ([`x86::accumulate_vnni`]), the same sums.
#[inline(always)]
fn accumulate_on(isa: Isa, phases: &[i16], taps: &[(usize, i32)], sums: &mut [i32]) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Vnni {
        // SAFETY: `Isa::Vnni` is only chosen where the CPU has AVX-512 F,
        // BW and VNNI (`Isa::detect`).
        #[allow(unsafe_code)]
        unsafe {
            if x86::accumulate_vnni(phases, taps, sums) {
                return;
            }
        }
    }
    let _ = isa;
    accumulate(phases, taps, sums);
}

/// The first `pairs` (at least `N`) of [`deinterleave`], `N` pairs (`B =
/// 2N` bytes) at a time, the last `N` overlapping the ones before;
/// returns `pairs`.
#[inline(always)]
fn deinterleave_chunks<X: Load<u8>, const N: usize, const B: usize>(
    src: X,
    even: &mut [i16],
    odd: &mut [i16],
    pairs: usize,
    flip: u8,
    a0: i16,
) -> usize {
    // A function rather than a closure (see `widen_chunks`).
    #[inline(always)]
    fn chunk<X: Load<u8>, const N: usize, const B: usize>(
        src: &X,
        c: usize,
        (even, odd): (&mut [i16], &mut [i16]),
        flip: u8,
        a0: i16,
    ) {
        let bytes: [u8; B] = copy(src.sub(2 * c, B));
        let (even, odd) = (&mut even[c..c + N], &mut odd[c..c + N]);
        for l in 0..N {
            even[l] = i16::from(bytes[2 * l] ^ flip) - a0;
            odd[l] = i16::from(bytes[2 * l + 1] ^ flip) - a0;
        }
    }
    let mut c = 0;
    while c + N <= pairs {
        chunk::<X, N, B>(&src, c, (&mut *even, &mut *odd), flip, a0);
        c += N;
    }
    if c < pairs {
        chunk::<X, N, B>(&src, pairs - N, (&mut *even, &mut *odd), flip, a0);
    }
    pairs
}

/// `sums[i] = Σ_t phases[at_t + i]·w_t` over `taps = [(at_t, w_t)]`,
/// [`CHUNK`] sums at a time kept in registers across the taps. Exact: each
/// product is of two i16 (|x − a0| ≤ 255, |w − b0| ≤ 32,000), the sums
/// modulo 2³² like the reference's.
#[inline(always)]
fn accumulate(phases: &[i16], taps: &[(usize, i32)], sums: &mut [i32]) {
    let run = sums.len();
    let mut i = 0;
    while i + CHUNK <= run {
        let mut acc = [0i32; CHUNK];
        for &(at, w) in taps {
            let xs = &phases[at + i..at + i + CHUNK];
            for (a, &x) in acc.iter_mut().zip(xs) {
                *a = a.wrapping_add(i32::from(x) * w);
            }
        }
        sums[i..i + CHUNK].copy_from_slice(&acc);
        i += CHUNK;
    }
    if i < run && run >= CHUNK {
        // The last chunk, overlapping the one before (the same sums).
        i = run - CHUNK;
        let mut acc = [0i32; CHUNK];
        for &(at, w) in taps {
            let xs = &phases[at + i..at + i + CHUNK];
            for (a, &x) in acc.iter_mut().zip(xs) {
                *a = a.wrapping_add(i32::from(x) * w);
            }
        }
        sums[i..].copy_from_slice(&acc);
        return;
    }
    let rest = &mut sums[i..];
    rest.fill(0);
    for &(at, w) in taps {
        let xs = &phases[at + i..at + i + rest.len()];
        for (a, &x) in rest.iter_mut().zip(xs) {
            *a = a.wrapping_add(i32::from(x) * w);
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86;

mod blocks;
#[cfg(target_arch = "x86_64")]
mod quads;
#[cfg(test)]
pub(super) mod tests;

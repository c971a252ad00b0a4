//! Depthwise quantized convolutions (one input and one output channel per
//! group, 2-d), computed directly: per output row, each tap adds
//! `(x − a0)·(w − b0)` over the run of output columns whose input column
//! is inside the image, into a row of i32 sums. Padding adds nothing, as
//! in the reference loops (it holds a's zero point), and the sums are the
//! reference's modulo 2³² (wrapping i32, in another order), so the outputs
//! are the reference's bit for bit. Each input line a tap row reads is
//! first widened to i16 `x − a0` and split by column phase (column
//! `p + sx·j` at `line[p·len + j]` for column stride `sx`), so that every
//! tap's run is one contiguous slice and the inner loop vectorises; no
//! packing, no scratch. The last [`RING`] widened lines are kept (where
//! the stack buffer holds them), so that
//! the output rows sharing an input line (all of a 3×3 window's but one,
//! at stride 1) widen it once. The loops are compiled once per
//! instruction set (AVX-512, AVX2, the baseline) from one generic body:
//! the baseline has no 32-bit vector multiply.

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
/// i32 sums of one whole plane ([`Whole`]), on the stack.
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
    /// How a whole plane is computed at once, where it is small enough.
    whole: Option<Whole>,
}

/// A plane computed whole rather than by rows (its rows are short, where
/// a vector loop over one output row spends itself on its ends): the
/// padded input widened once into `sy·sx` phase planes of `pr × pc`
/// (padded row `sy·r + i`, column `sx·c + j` in phase `(i, j)`, zero
/// outside the image), so that each tap adds one contiguous run of
/// `(oh − 1)·pc + ow` sums, the output's rows `pc` apart (the columns
/// between them are sums nobody reads).
#[derive(Clone, Copy)]
struct Whole {
    pr: usize,
    pc: usize,
}

impl Whole {
    /// The layout of a plane of `g`, if its widened phases fit the line
    /// buffer ([`LINES`]) and its sums [`PLANE_SUMS`].
    fn of(g: &Geometry) -> Option<Whole> {
        let reach_y = (g.oh - 1) * g.sy + (g.kh - 1) * g.dy + 1;
        let reach_x = (g.ow - 1) * g.sx + (g.kw - 1) * g.dx + 1;
        let (pr, pc) = (reach_y.div_ceil(g.sy), reach_x.div_ceil(g.sx));
        let w = Whole { pr, pc };
        let fits = g.sy * g.sx * pr * pc <= LINES && w.run(g) <= PLANE_SUMS;
        // Rows as long as a vector loop likes gain nothing.
        (fits && g.ow < 64).then_some(w)
    }

    /// Sums of one tap's run.
    fn run(&self, g: &Geometry) -> usize {
        (g.oh - 1) * self.pc + g.ow
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
        if !(0..s.groups).all(|c| dom.b0(q.channel(c * plane).2).unsigned_abs() <= 32_000) {
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
            whole: None,
        };
        let g = Geometry {
            whole: if oh > 0 && ow > 0 && g.sy > 0 {
                Whole::of(&g)
            } else {
                None
            },
            ..g
        };
        let planes = s.batch * s.groups;
        let per = planes.div_ceil(parts.max(1));
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
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Vnni => {
                    // SAFETY: `Isa::Vnni` is only chosen where the CPU has
                    // AVX-512 F and BW (`Isa::detect`).
                    #[allow(unsafe_code)]
                    unsafe {
                        x86::planes_avx512(&task, mine)
                    }
                }
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => {
                    // SAFETY: `Isa::Avx2` is only chosen where the CPU has
                    // AVX2.
                    #[allow(unsafe_code)]
                    unsafe {
                        x86::planes_avx2(&task, mine)
                    }
                }
                _ => task.planes(mine),
            }
        }));
        #[cfg(test)]
        super::tests::DEPTHWISE_RUNS.with(|c| c.set(c.get() + 1));
        true
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
            if let Some(whole) = g.whole {
                self.whole(&whole, xb, &taps, &mut ring, &mut sums);
                let n = g.oh * ow;
                epilogue::row(self.isa, &sums[..n], None, &requant, self.out, ob);
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

    /// The sums of the plane whose input starts at `xb`, its output rows
    /// left `ow` apart at the start of `sums` ([`Whole`]); `phases` holds
    /// the widened input.
    #[inline(always)]
    fn whole(
        &self,
        w: &Whole,
        xb: usize,
        taps: &[i16; TAPS],
        phases: &mut [i16; LINES],
        sums: &mut [i32; PLANE_SUMS],
    ) {
        let g = self.g;
        let (flip, a0) = (g.flips.0, g.a0);
        let (sy, sx, pr, pc) = (g.sy, g.sx, w.pr, w.pc);
        let phase_len = pr * pc;
        for r in 0..pr * sy {
            let iy = r as isize - g.py;
            let inside = iy >= 0 && (iy as usize) < g.ih;
            for j in 0..sx {
                let at = ((r % sy) * sx + j) * phase_len + r / sy * pc;
                let dst = &mut phases[at..at + pc];
                // Columns c with 0 ≤ c·sx + j − px < iw.
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
                if !inside || lo == hi {
                    dst.fill(0);
                    continue;
                }
                dst[..lo].fill(0);
                dst[hi..].fill(0);
                let start = (lo * sx + j) as isize - g.px;
                let line = xb + iy as usize * g.iw + start as usize;
                let src = self.x.sub(line, (hi - lo - 1) * sx + 1);
                if sx == 1 {
                    widen_run(src, &mut dst[lo..hi], flip, a0);
                } else {
                    for (i, cell) in dst[lo..hi].iter_mut().enumerate() {
                        *cell = i16::from(src.load(i * sx) ^ flip) - a0;
                    }
                }
            }
        }
        let run = w.run(g);
        let acc = &mut sums[..run];
        acc.fill(0);
        for ty in 0..g.kh {
            let (oy, iy) = (ty * g.dy / sy, ty * g.dy % sy);
            for tx in 0..g.kw {
                let (ox, ix) = (tx * g.dx / sx, tx * g.dx % sx);
                let wv = i32::from(taps[ty * g.kw + tx]);
                let at = (iy * sx + ix) * phase_len + oy * pc + ox;
                let xs = &phases[at..at + run];
                for (a, &v) in acc.iter_mut().zip(xs) {
                    *a = a.wrapping_add(i32::from(v) * wv);
                }
            }
        }
        // The output's rows, `pc` apart, moved together (left: no row is
        // overwritten before it moves).
        for oy in 1..g.oh {
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

/// `dst[c] = (src[c] ^ flip) − a0` over equal lengths, with both slices
/// cut to one length first so that the loop has no bounds check and
/// vectorises.
#[inline(always)]
fn widen_run<X: Load<u8>>(src: X, dst: &mut [i16], flip: u8, a0: i16) {
    let n = dst.len().min(src.count());
    let (src, dst) = (src.sub(0, n), &mut dst[..n]);
    for (c, d) in dst.iter_mut().enumerate() {
        *d = i16::from(src.load(c) ^ flip) - a0;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Task;
    use crate::kernels::cells::Load;
    use core::ops::Range;

    /// [`Task::planes`] compiled for AVX-512; the caller guarantees
    /// AVX-512 F and BW.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn planes_avx512<X: Load<u8>, W: Load<u8>>(t: &Task<'_, X, W>, mine: Range<usize>) {
        t.planes(mine);
    }

    /// [`Task::planes`] compiled for AVX2; the caller guarantees AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) fn planes_avx2<X: Load<u8>, W: Load<u8>>(t: &Task<'_, X, W>, mine: Range<usize>) {
        t.planes(mine);
    }
}

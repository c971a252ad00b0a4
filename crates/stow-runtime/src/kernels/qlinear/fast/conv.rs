//! The convolutions' operands of the packed path ([`super`]): the image
//! gathered into panels of output positions as im2col would, the kernel
//! as rows, and [`QConv::run_packed`].

use super::super::igemm::lines::{self, LaneSums, V16};
use super::super::igemm::{self, Done, Isa, Operands, MR, NR};
use super::super::{Out, QConv, Requant};
use super::{folded, pack_row, put_quads, share, stack, Domains, RowLines, Sink};
use crate::kernels::cells::{Load, Src};
use crate::kernels::linalg::ConvShape;
use core::cell::Cell;

/// Lanes of a full panel that read a line of the image: lanes `lo..hi`
/// read `base + S·l` (relative to the tap's offset, `S` the stride along
/// the line), so that each run is one load of [`NR`] lanes, masked.
#[derive(Clone, Copy, Default)]
struct Run {
    lo: usize,
    hi: usize,
    base: isize,
}

/// Runs of a panel whose lanes start at `at` (their offsets from the
/// tap's, negative in the padding) with lanes `stride` apart, at most
/// [`MAX_RUNS`]; `None` when there are more.
fn runs_of(at: &[isize; NR], stride: isize) -> Option<([Run; MAX_RUNS], usize)> {
    let mut runs = [Run::default(); MAX_RUNS];
    let mut n = 0;
    for l in 0..NR {
        if l > 0 && at[l] == at[l - 1] + stride {
            runs[n - 1].hi = l + 1;
            continue;
        }
        if n == MAX_RUNS {
            return None;
        }
        runs[n] = Run {
            lo: l,
            hi: l + 1,
            base: at[l] - stride * l as isize,
        };
        n += 1;
    }
    Some((runs, n))
}

/// Runs a panel may be cut into and still be loaded by runs: output rows
/// of 7 columns or more (resnet50's last stage).
const MAX_RUNS: usize = 4;

/// Kernel rows and columns up to which [`ConvOps::pack_runs`] keeps which
/// lanes each tap row and column puts inside the image.
const MAX_SIDE: usize = 16;

/// One image and group of a convolution: rows are its output channels
/// (kernel b, i8 side), lanes its output positions (image a, u8 side,
/// gathered as im2col would).
struct ConvOps<'s, X, W> {
    s: &'s ConvShape,
    x: X,
    w: W,
    /// First element of the group's first input channel.
    x_base: usize,
    /// First output channel of the group.
    c0: usize,
    dom: Domains,
    /// The padding's byte: a's zero point on the u8 side.
    pad: u8,
    /// 2-d (depth 1 everywhere): [`ConvOps::pack_flat`] packs.
    flat: bool,
    /// Whether the lanes' sums are used: some output channel's zero point
    /// (b's, which multiplies them) is not 0.
    lane_sums: bool,
    /// Every output channel's kernel sum, taken at setup
    /// ([`QConv::row_sums`]), where the kernel is the mapped weight.
    row_sums: Option<&'s [i32]>,
}

impl<X: Load<u8>, W: Load<u8>> ConvOps<'_, X, W> {
    /// [`Operands::pack_lanes`] of a 2-d convolution: the depth walked
    /// with counters instead of divisions, and for a panel whose sixteen
    /// windows are all inside the image, one load per byte at a fixed
    /// offset from each lane's window.
    #[inline(always)]
    fn pack_flat(&self, j0: usize, panel: &[Cell<u32>]) -> [i32; NR] {
        let win = &self.s.window;
        let [_, ih, iw] = win.input;
        let [_, _, ow] = win.output;
        let [_, kh, kw] = win.kernel;
        let (dy, dx) = (win.dilations[1], win.dilations[2]);
        let plane = win.input_plane();
        let k = self.s.k();
        let lanes = NR.min(self.lanes() - j0);
        if let Some(sums) = self.pack_by_runs(j0, lanes, panel) {
            return sums;
        }
        let origin: [(isize, isize); NR] = core::array::from_fn(|l| {
            let pos = j0 + l.min(lanes - 1);
            let (oy, ox) = (pos / ow, pos % ow);
            (
                (oy * win.strides[1]) as isize - win.pad[1] as isize,
                (ox * win.strides[2]) as isize - win.pad[2] as isize,
            )
        });
        let (reach_y, reach_x) = (((kh - 1) * dy) as isize, ((kw - 1) * dx) as isize);
        let interior = origin.iter().all(|&(y, x)| {
            y >= 0 && x >= 0 && y + reach_y < ih as isize && x + reach_x < iw as isize
        });
        let at: [usize; NR] = core::array::from_fn(|l| {
            let (y, x) = origin[l];
            if interior {
                y as usize * iw + x as usize
            } else {
                0
            }
        });
        let flip = self.dom.a_flip;
        let mut sums = [0i32; NR];
        if lanes == NR {
            self.pack_full(&origin, panel, &mut sums);
            return sums;
        }
        let mut quad = [0u32; NR];
        let (mut ic, mut ty, mut tx) = (0, 0, 0);
        for (q, out) in panel.chunks_exact(NR).enumerate() {
            for t in 0..4.min(k - 4 * q) {
                let shift = 8 * t;
                if interior {
                    let off = self.x_base + ic * plane + ty * dy * iw + tx * dx;
                    for l in 0..NR {
                        let v = self.x.load(off + at[l]) ^ flip;
                        quad[l] |= u32::from(v) << shift;
                        sums[l] = sums[l].wrapping_add(v.into());
                    }
                } else {
                    let base = self.x_base + ic * plane;
                    for l in 0..lanes {
                        let (y, x) = (
                            origin[l].0 + (ty * dy) as isize,
                            origin[l].1 + (tx * dx) as isize,
                        );
                        // Negative coordinates wrap to huge ones: one test each.
                        let v = if (y as usize) < ih && (x as usize) < iw {
                            self.x.load(base + y as usize * iw + x as usize) ^ flip
                        } else {
                            self.pad
                        };
                        quad[l] |= u32::from(v) << shift;
                        sums[l] = sums[l].wrapping_add(v.into());
                    }
                }
                tx += 1;
                if tx == kw {
                    tx = 0;
                    ty += 1;
                    if ty == kh {
                        ty = 0;
                        ic += 1;
                    }
                }
            }
            for (cell, v) in out.iter().zip(&mut quad) {
                cell.set(*v);
                *v = 0;
            }
        }
        sums
    }
}

impl<X: Load<u8>, W: Load<u8>> ConvOps<'_, X, W> {
    /// [`ConvOps::pack_flat`] of a full panel, lane `l`'s window at row
    /// `origin[l].0` and column `origin[l].1` of the plane (negative in
    /// the padding). For each depth (input channel, tap row, tap column)
    /// lane `l` reads the byte at a fixed offset from `pos[l] = y·iw + x`
    /// if that tap lands inside the image, else the padding byte: one
    /// load per lane, where the lanes do not make a few runs along the
    /// image's lines ([`ConvOps::pack_by_runs`]). The four depths of a
    /// quad are interleaved a whole panel at a time ([`put_quads`]).
    #[inline(always)]
    fn pack_full(&self, origin: &[(isize, isize); NR], panel: &[Cell<u32>], sums: &mut [i32; NR]) {
        let win = &self.s.window;
        let [_, ih, iw] = win.input;
        let [_, kh, kw] = win.kernel;
        let (dy, dx) = (win.dilations[1], win.dilations[2]);
        let plane = win.input_plane();
        let k = self.s.k();
        let (flip, pad) = (self.dom.a_flip, self.pad);
        let mut pos = [0isize; NR];
        for (p, &(y, x)) in pos.iter_mut().zip(origin) {
            *p = y * iw as isize + x;
        }
        let (mut ic, mut ty, mut tx) = (0, 0, 0);
        for (q, out) in panel.chunks_exact(NR).enumerate() {
            let mut bytes = [[0u8; NR]; 4];
            for row in bytes.iter_mut().take(4.min(k - 4 * q)) {
                let (yy, xx) = ((ty * dy) as isize, (tx * dx) as isize);
                let off = (self.x_base + ic * plane) as isize + yy * iw as isize + xx;
                for l in 0..NR {
                    let (y, x) = origin[l];
                    // Negative coordinates wrap to huge ones: one test each.
                    let inside = ((y + yy) as usize) < ih && ((x + xx) as usize) < iw;
                    row[l] = if inside {
                        self.x.load((off + pos[l]) as usize) ^ flip
                    } else {
                        pad
                    };
                }
                tx += 1;
                if tx == kw {
                    tx = 0;
                    ty += 1;
                    if ty == kh {
                        ty = 0;
                        ic += 1;
                    }
                }
            }
            put_quads(&bytes, true, sums, out);
        }
    }

    /// [`ConvOps::pack_flat`] by [`ConvOps::pack_runs`] where the panel's
    /// lanes make at most [`MAX_RUNS`] runs along the image's lines
    /// (stride 1 or 2, kernels up to [`MAX_SIDE`]); `None` otherwise. A
    /// short last panel (`lanes` below [`NR`]) is one too: its lanes past
    /// the product go on along the output rows, where the loads may reach
    /// (they are checked like the others), and are masked to zero bytes.
    #[inline(always)]
    fn pack_by_runs(&self, j0: usize, lanes: usize, panel: &[Cell<u32>]) -> Option<[i32; NR]> {
        let win = &self.s.window;
        let [_, _, iw] = win.input;
        let [_, _, ow] = win.output;
        let [_, kh, kw] = win.kernel;
        let stride = win.strides[2];
        if kh > MAX_SIDE || kw > MAX_SIDE || !(1..=2).contains(&stride) {
            return None;
        }
        let origin: [(isize, isize); NR] = core::array::from_fn(|l| {
            let (oy, ox) = ((j0 + l) / ow, (j0 + l) % ow);
            (
                (oy * win.strides[1]) as isize - win.pad[1] as isize,
                (ox * stride) as isize - win.pad[2] as isize,
            )
        });
        let pos = origin.map(|(y, x)| y * iw as isize + x);
        let runs = runs_of(&pos, stride as isize)?;
        let live = V16::from_array(core::array::from_fn(|l| if l < lanes { 0xff } else { 0 }));
        Some(if stride == 1 {
            self.pack_runs::<1>(&origin, runs, live, panel)
        } else {
            self.pack_runs::<2>(&origin, runs, live, panel)
        })
    }

    /// [`ConvOps::pack_flat`] of a panel whose lanes make `runs` along the
    /// image's lines, lanes `S` bytes apart within a run: every 1×1
    /// convolution, and those whose padding keeps the output as wide as
    /// the input (the whole panel one run, across output rows), else one
    /// run per output row. Which lanes a tap puts inside the image is
    /// which its row puts inside times which its column does, worked out
    /// once per panel as byte masks. Each depth is then one load per run
    /// (sixteen bytes, or the even bytes of thirty-two for stride 2),
    /// kept where the run's lanes are inside the image and the padding
    /// byte elsewhere; four depths are interleaved into the panel's quads
    /// by [`lines::interleave`], which also sums the lanes. Same bytes as
    /// lane by lane, so the same panel and sums.
    #[inline(always)]
    fn pack_runs<const S: usize>(
        &self,
        origin: &[(isize, isize); NR],
        (runs, n): ([Run; MAX_RUNS], usize),
        live: V16,
        panel: &[Cell<u32>],
    ) -> [i32; NR] {
        let win = &self.s.window;
        let [_, ih, iw] = win.input;
        let [_, kh, kw] = win.kernel;
        let (dy, dx) = (win.dilations[1], win.dilations[2]);
        let plane = win.input_plane() as isize;
        let k = self.s.k();
        #[inline(always)]
        fn inside(ok: impl Fn(usize) -> bool) -> V16 {
            V16::from_array(core::array::from_fn(|l| if ok(l) { 0xff } else { 0 }))
        }
        let zero = V16::splat(0);
        let mut rows_in = [zero; MAX_SIDE];
        for (ty, m) in rows_in.iter_mut().enumerate().take(kh) {
            // Negative coordinates wrap to huge ones: one test each.
            *m = inside(|l| ((origin[l].0 + (ty * dy) as isize) as usize) < ih).and(live);
        }
        let mut cols_in = [zero; MAX_SIDE];
        for (tx, m) in cols_in.iter_mut().enumerate().take(kw) {
            *m = inside(|l| ((origin[l].1 + (tx * dx) as isize) as usize) < iw);
        }
        let mut lanes = [zero; MAX_RUNS];
        for (m, r) in lanes.iter_mut().zip(&runs[..n]) {
            *m = inside(|l| (r.lo..r.hi).contains(&l));
        }
        if n == 1 && kh * kw <= MAX_TAPS {
            if let Some(sums) = self.pack_run::<S>(&rows_in, &cols_in, runs[0].base, live, panel) {
                return sums;
            }
        }
        let (flip, pad) = (V16::splat(self.dom.a_flip), V16::splat(self.pad));
        let count = self.x.count() as isize;
        let mut sums = LaneSums::new();
        let (mut ty, mut tx) = (0, 0);
        let mut chan = self.x_base as isize;
        for (q, out) in panel.chunks_exact(NR).enumerate() {
            let mut depths = [zero; 4];
            for d in depths.iter_mut().take(4.min(k - 4 * q)) {
                let keep = rows_in[ty].and(cols_in[tx]);
                let off = chan + (ty * dy * iw + tx * dx) as isize;
                let mut v = pad.and_not(keep).and(live);
                for (r, run) in runs[..n].iter().enumerate() {
                    let start = off + run.base;
                    let line = if start >= 0 && start + (S * NR) as isize <= count {
                        let at = start as usize;
                        if S == 1 {
                            V16::load(self.x, at)
                        } else {
                            V16::load_even(self.x, at)
                        }
                    } else {
                        // The line runs off the tensor (its lanes there
                        // are padding): the lanes inside one by one.
                        let keep = keep.to_array();
                        V16::from_array(core::array::from_fn(|l| {
                            if keep[l] != 0 && (run.lo..run.hi).contains(&l) {
                                self.x.load((start + (S * l) as isize) as usize)
                            } else {
                                0
                            }
                        }))
                    };
                    let m = if n == 1 { keep } else { keep.and(lanes[r]) };
                    v = v.or(line.xor(flip).and(m));
                }
                *d = v;
                tx += 1;
                if tx == kw {
                    tx = 0;
                    ty += 1;
                    if ty == kh {
                        ty = 0;
                        chan += plane;
                    }
                }
            }
            let (quads, s) = lines::interleave(depths);
            lines::store(quads, out);
            if self.lane_sums {
                sums.add(s);
            }
        }
        sums.finish()
    }
}

/// Taps (`kh·kw`) up to which [`ConvOps::pack_run`] keeps each tap's
/// offset and masks on the stack (2.5 KiB).
const MAX_TAPS: usize = 64;

impl<X: Load<u8>, W: Load<u8>> ConvOps<'_, X, W> {
    /// [`ConvOps::pack_runs`] of a panel that is one run (lane `l` at
    /// `base + S·l` from each tap's offset) whose loads all fall inside
    /// the tensor, which is checked once for the whole panel, not per
    /// depth; `None` where they do not. Each tap's offset and masks are
    /// worked out once, so that each depth is one load, its flip and its
    /// blend with the padding: the loop over runs, the per-depth bounds
    /// checks and masks made it 40 instructions a depth.
    #[inline(always)]
    fn pack_run<const S: usize>(
        &self,
        rows_in: &[V16; MAX_SIDE],
        cols_in: &[V16; MAX_SIDE],
        base: isize,
        live: V16,
        panel: &[Cell<u32>],
    ) -> Option<[i32; NR]> {
        let win = &self.s.window;
        let [_, _, iw] = win.input;
        let [_, kh, kw] = win.kernel;
        let (dy, dx) = (win.dilations[1], win.dilations[2]);
        let plane = win.input_plane() as isize;
        let k = self.s.k();
        let taps = kh * kw;
        let (flip, pad) = (V16::splat(self.dom.a_flip), V16::splat(self.pad));
        let zero = V16::splat(0);
        let mut shift = [0isize; MAX_TAPS];
        let mut keep = [zero; MAX_TAPS];
        let mut fill = [zero; MAX_TAPS];
        let (mut lo, mut hi) = (isize::MAX, isize::MIN);
        for t in 0..taps {
            let (ty, tx) = (t / kw, t % kw);
            shift[t] = (ty * dy * iw + tx * dx) as isize + base;
            (lo, hi) = (lo.min(shift[t]), hi.max(shift[t]));
            keep[t] = rows_in[ty].and(cols_in[tx]);
            fill[t] = pad.and_not(keep[t]).and(live);
        }
        let channels = (k / taps) as isize;
        let first = self.x_base as isize + lo;
        let last = self.x_base as isize + (channels - 1) * plane + hi + (S * NR) as isize;
        if channels * taps as isize != k as isize || first < 0 || last > self.x.count() as isize {
            return None;
        }
        let x = self.x.ptr();
        let mut sums = LaneSums::new();
        let mut tap = 0;
        let mut chan = self.x_base as isize;
        for (q, out) in panel.chunks_exact(NR).enumerate() {
            let mut depths = [zero; 4];
            for d in depths.iter_mut().take(4.min(k - 4 * q)) {
                // SAFETY: `chan + shift[tap]` lies in `first..=last − 16·S`
                // (channel `chan` is one of the group's), and the tensor
                // holds `last` bytes: checked above.
                #[allow(unsafe_code)]
                let line = unsafe { V16::load_at::<S>(x.offset(chan + shift[tap])) };
                *d = line.xor(flip).and(keep[tap]).or(fill[tap]);
                tap += 1;
                if tap == taps {
                    tap = 0;
                    chan += plane;
                }
            }
            let (quads, s) = lines::interleave(depths);
            lines::store(quads, out);
            if self.lane_sums {
                sums.add(s);
            }
        }
        Some(sums.finish())
    }
}

impl<X: Load<u8>, W: Load<u8>> Operands for ConvOps<'_, X, W> {
    const LANES_UNSIGNED: bool = true;

    fn depth(&self) -> usize {
        self.s.k()
    }

    fn rows(&self) -> usize {
        self.s.out_per_group
    }

    fn lanes(&self) -> usize {
        self.s.n()
    }

    #[inline(always)]
    fn pack_lanes(&self, j0: usize, panel: &[Cell<u32>]) -> [i32; NR] {
        if self.flat {
            return self.pack_flat(j0, panel);
        }
        let win = &self.s.window;
        let [_, ih, iw] = win.input;
        let [_, oh, ow] = win.output;
        let [_, kh, kw] = win.kernel;
        let taps = kh * kw * win.kernel[0];
        let plane = win.input_plane();
        let k = self.s.k();
        let lanes = NR.min(self.lanes() - j0);
        // Where each lane's window starts in the input (may be negative:
        // padding).
        let origin: [[isize; 3]; NR] = core::array::from_fn(|l| {
            let pos = j0 + l.min(lanes - 1);
            let at = [pos / (oh * ow), pos / ow % oh, pos % ow];
            core::array::from_fn(|d| (at[d] * win.strides[d]) as isize - win.pad[d] as isize)
        });
        let flip = self.dom.a_flip;
        let mut sums = [0i32; NR];
        let mut quad = [0u32; NR];
        for (q, out) in panel.chunks_exact(NR).enumerate() {
            for t in 0..4 {
                let p = 4 * q + t;
                if p >= k {
                    break;
                }
                let (ic, tap) = (p / taps, p % taps);
                let base = self.x_base + ic * plane;
                let mut put = |l: usize, v: u8| {
                    quad[l] |= u32::from(v) << (8 * t);
                    sums[l] = sums[l].wrapping_add(v.into());
                };
                let tz = tap / (kh * kw);
                let ty = tap / kw % kh;
                let tx = tap % kw;
                let step = [tz, ty, tx].map(|t| t as isize);
                for (l, o) in origin.iter().enumerate().take(lanes) {
                    let c: [isize; 3] =
                        core::array::from_fn(|d| o[d] + step[d] * win.dilations[d] as isize);
                    let inside = (0..3).all(|d| c[d] >= 0 && (c[d] as usize) < win.input[d]);
                    let v = if inside {
                        let (z, y, x) = (c[0] as usize, c[1] as usize, c[2] as usize);
                        self.x.load(base + (z * ih + y) * iw + x) ^ flip
                    } else {
                        self.pad
                    };
                    put(l, v);
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
        let k = self.s.k();
        let flip = self.dom.b_flip;
        let mut sums = [0i32; MR];
        for r in 0..MR {
            let i = i0 + r;
            if i >= self.rows() {
                rows.iter().skip(r).step_by(MR).for_each(|c| c.set(0));
                continue;
            }
            let dst = rows.iter().skip(r).step_by(MR);
            sums[r] = pack_row(self.w, (self.c0 + i) * k, 1, k, flip, true, dst);
        }
        sums
    }

    type Row<'s>
        = W
    where
        Self: 's;

    fn direct_row_sums(&self, i0: usize) -> Option<[i32; MR]> {
        let at = self.c0.checked_add(i0)?;
        let sums = self.row_sums?.get(at..at.checked_add(MR)?)?;
        Some(core::array::from_fn(|r| sums[r]))
    }

    fn row_sums_used(&self) -> bool {
        // The padding byte is a's zero point, which multiplies them.
        self.pad != 0
    }

    /// OIHW kernels hold each output channel's depth contiguously: in
    /// place where b is i8 (no flip) and the depth is in whole quads.
    fn direct_rows(&self, i0: usize) -> Option<[W; MR]> {
        let k = self.s.k();
        let whole = self.dom.b_flip == 0 && k.is_multiple_of(4) && i0 + MR <= self.rows();
        whole.then(|| core::array::from_fn(|r| self.w.sub((self.c0 + i0 + r) * k, k)))
    }
}

impl QConv {
    /// The packed path; `false` where it declines (module doc).
    #[allow(clippy::too_many_arguments)]
    pub(in super::super) fn run_packed(
        &self,
        isa: Isa,
        x: Src<'_, u8>,
        w: Src<'_, u8>,
        dom: Domains,
        q: &Requant<'_>,
        out: &Out<'_>,
        scratch: &[Cell<f32>],
        part: usize,
        parts: usize,
    ) -> bool {
        let s = &self.shape;
        let on_stack;
        let scratch = scratch_or_stack!(s.k(), igemm::quads(scratch), on_stack);
        let a0 = dom.a0(q.a0);
        let Ok(pad) = u8::try_from(a0) else {
            return false;
        };
        let win = &s.window;
        let flat = win.input[0] == 1 && win.output[0] == 1 && win.kernel[0] == 1 && win.pad[0] == 0;
        let (c_in, c_out) = (s.groups * s.in_per_group, s.groups * s.out_per_group);
        let (plane_in, plane_out) = (win.input_plane(), win.output_plane());
        let panels = share(plane_out.div_ceil(NR), part, parts);
        // Symmetric kernels (zero points 0, every per-channel QDQ model)
        // leave the image's sums unused.
        let lane_sums = (0..c_out).any(|c| dom.b0(q.b0(c * plane_out)) != 0);
        // Only for the weight they were taken from, whole.
        let row_sums = match (&self.row_sums, w) {
            (Some(r), Src::Weight(_)) if r.len() == c_out => Some(&r[..]),
            _ => None,
        };
        let mut lines = RowLines::new();
        crate::with_load!(x, |x| crate::with_load!(w, |w| {
            for image in 0..s.batch {
                for group in 0..s.groups {
                    lines.clear();
                    let ops = ConvOps {
                        s,
                        x,
                        w,
                        x_base: (image * c_in + group * s.in_per_group) * plane_in,
                        c0: group * s.out_per_group,
                        dom,
                        pad,
                        flat,
                        lane_sums,
                        row_sums,
                    };
                    let first = (image * c_out + ops.c0) * plane_out;
                    // The rows' lines, looked up once per group of rows
                    // rather than per tile.
                    let sink = Sink {
                        isa,
                        out,
                        rows: s.out_per_group,
                        lanes: plane_out,
                        lines: &mut lines,
                        line: Some(|i: usize, row_sum: i32| {
                            let o = first + i * plane_out;
                            let (bias, scale, b0) = q.channel(o);
                            let b0 = dom.b0(b0);
                            let c = folded(row_sum, s.k(), a0, b0);
                            (o, q.line(bias, scale, b0, c))
                        }),
                        other: |_: Done<'_>| {},
                    };
                    igemm::product(isa, &ops, scratch, panels.clone(), sink);
                }
            }
        }));
        true
    }
}

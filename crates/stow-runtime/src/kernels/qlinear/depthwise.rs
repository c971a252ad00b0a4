//! Depthwise quantized convolutions (one input and one output channel per
//! group, 2-d), computed directly: per output row, each tap adds
//! `(x − a0)·(w − b0)` over the run of output columns whose input column
//! is inside the image, into a row of i32 sums. Padding adds nothing, as
//! in the reference loops (it holds a's zero point), and the sums are the
//! reference's modulo 2³² (wrapping i32, in another order), so the outputs
//! are the reference's bit for bit. Each input line a tap row reads is
//! first widened to i32 `x − a0` and split by column phase (column
//! `p + sx·j` at `line[p·len + j]` for column stride `sx`), so that every
//! tap's run is one contiguous slice and the inner loop vectorises; no
//! packing, no scratch.

use super::epilogue;
use super::fast::Domains;
use super::igemm::Isa;
use super::{Out, QConv, Requant};
use crate::kernels::cells::{Load, Src};

/// Widest output row the stack buffer of sums holds.
const ROW: usize = 1024;
/// Most taps per window.
const TAPS: usize = 64;
/// Widest input line (with its phases) the stack buffer holds.
const LINE: usize = 2048;

impl QConv {
    /// The direct depthwise path; `false` where it declines (a grouped
    /// convolution with more than one channel per group, 3-d, wider rows
    /// than [`ROW`] or more taps than [`TAPS`]). Thread `part` of `parts`
    /// takes consecutive (image, channel) planes.
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
        if len * sx > LINE {
            return false;
        }
        let sy = win.strides[1];
        let (dy, dx) = (win.dilations[1], win.dilations[2]);
        let (py, px) = (win.pad[1] as isize, win.pad[2] as isize);
        let (a0, flips) = (dom.a0(q.a0), dom.flips());
        let planes = s.batch * s.groups;
        let per = planes.div_ceil(parts.max(1));
        let mine = (part * per).min(planes)..((part + 1) * per).min(planes);
        let mut sums = [0i32; ROW];
        let mut line = [0i32; LINE];
        crate::with_load!(x, |x| crate::with_load!(w, |w| {
            for plane in mine {
                let channel = plane % s.groups;
                let (xb, ob) = (plane * ih * iw, plane * oh * ow);
                let (bias, scale, b0) = q.channel(ob);
                let b0 = dom.b0(b0);
                let requant = q.line(bias, scale, 0, 0);
                let taps: [i32; TAPS] = core::array::from_fn(|t| {
                    if t < kh * kw {
                        let v = w.load(channel * kh * kw + t) ^ flips.1;
                        i32::from(v as i8).wrapping_sub(b0)
                    } else {
                        0
                    }
                });
                for oy in 0..oh {
                    let row = &mut sums[..ow];
                    row.fill(0);
                    for ty in 0..kh {
                        let iy = (oy * sy + ty * dy) as isize - py;
                        if iy < 0 || iy as usize >= ih {
                            continue;
                        }
                        let src = x.sub(xb + iy as usize * iw, iw);
                        for phase in 0..sx {
                            let to = &mut line[phase * len..(phase + 1) * len];
                            for (cell, c) in to.iter_mut().zip((phase..iw).step_by(sx)) {
                                *cell = i32::from(src.load(c) ^ flips.0).wrapping_sub(a0);
                            }
                        }
                        for tx in 0..kw {
                            let wv = taps[ty * kw + tx];
                            // Columns ox with 0 ≤ ox·sx + off < iw.
                            let off = (tx * dx) as isize - px;
                            let lo = if off < 0 {
                                (off.unsigned_abs()).div_ceil(sx)
                            } else {
                                0
                            };
                            let last = iw as isize - 1 - off;
                            if last < 0 {
                                continue;
                            }
                            let hi = (last as usize / sx + 1).min(ow);
                            if lo >= hi {
                                continue;
                            }
                            let first = ((lo * sx) as isize + off) as usize;
                            let at = first % sx * len + first / sx;
                            let xs = &line[at..at + (hi - lo)];
                            for (acc, &v) in row[lo..hi].iter_mut().zip(xs) {
                                *acc = acc.wrapping_add(v.wrapping_mul(wv));
                            }
                        }
                    }
                    epilogue::row(isa, row, None, &requant, out, ob + oy * ow);
                }
            }
        }));
        true
    }
}

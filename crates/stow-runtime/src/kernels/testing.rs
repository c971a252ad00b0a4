//! Helpers the kernels' tests share.

/// Draws from `0..n` by xorshift, starting from `seed`: random cases that
/// are the same on every run.
pub(crate) fn below(mut seed: u64) -> impl FnMut(usize) -> usize {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    }
}

/// A value in `[-1, 1)` for element `i` of the tensor numbered `seed`.
pub(crate) fn value(i: usize, seed: usize) -> f32 {
    ((i * 2_654_435_761 + seed * 40_503) % 1000) as f32 / 500.0 - 1.0
}

use super::cells::Src;
use super::gemm::{Finish, Isa};
use super::linalg::{conv_as, ConvShape};
use super::pool::Window;
use super::prepacked::{self, Panels};
use alloc::vec::Vec;
use core::cell::Cell;

/// A 2-d convolution (NCHW, dilation 1) of `batch` images in `groups`
/// groups of `channels` = (input, output) channels each, over the window
/// geometry `[input, output, kernel, strides, pad, pad_after]` (each
/// `[depth, height, width]`).
pub(crate) fn conv_shape(
    (batch, groups): (usize, usize),
    channels: (usize, usize),
    [input, output, kernel, strides, pad, pad_after]: [[usize; 3]; 6],
) -> ConvShape {
    ConvShape {
        batch,
        groups,
        in_per_group: channels.0,
        out_per_group: channels.1,
        window: Window {
            planes: channels.0 * groups,
            input,
            output,
            kernel,
            strides,
            dilations: [1, 1, 1],
            pad,
            pad_after,
        },
    }
}

/// The kernel of `s` as compiled packed weights with depth block `kc`.
pub(crate) fn left_panels(s: &ConvShape, kc: usize) -> Panels {
    Panels::of_conv(s, kc).with_depth_block(kc)
}

/// The bits [`conv_as`] writes for `s` with the packed kernel `w`
/// (`panels`), the image read in place by `direct`'s kernels or through
/// im2col panels, in `parts` shares; the output starts as NaN.
pub(crate) fn packed_conv_bits(
    s: &ConvShape,
    (panels, direct): (&Panels, Option<Isa>),
    (x, w, bias): (&[f32], &[f32], Option<Src<'_, f32>>),
    finish: Finish,
    parts: usize,
) -> Vec<u32> {
    let out: Vec<Cell<f32>> = (0..s.batch * s.groups * s.out_per_group * s.n())
        .map(|_| Cell::new(f32::NAN))
        .collect();
    let scratch: Vec<Cell<f32>> = (0..prepacked::scratch_elems(panels, s.n()))
        .map(|_| Cell::new(0.0))
        .collect();
    for part in 0..parts {
        conv_as(
            s,
            (Some(panels), direct),
            (Src::Weight(x), Src::Weight(w), bias),
            &out,
            (finish, None),
            &scratch,
            (part, parts),
        );
    }
    out.iter().map(|c| c.get().to_bits()).collect()
}

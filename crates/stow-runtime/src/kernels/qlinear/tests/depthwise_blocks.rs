//! Depthwise convolutions of many small planes, which the direct path
//! takes sixteen planes at a time across vector lanes: mobilenet's and
//! efficientnet's 7×7, 14×14 and 28×28 planes and odd sizes around them,
//! 3×3 and 5×5 windows at strides 1 and 2, pads on either side, channel
//! counts that leave a short last block (and a batch of two, whose blocks
//! straddle the images), zero points at the ends of their types, per
//! channel scales, in shares of 1, 2 and 3 threads: the reference loops'
//! bytes.

use super::super::depthwise::tests::{BLOCK_RUNS, FORCE_BANDS, QUAD_RUNS};
use super::*;

#[test]
fn channel_blocks_match_the_reference() {
    let before = BLOCK_RUNS.with(Cell::get);
    blocks_against_the_reference(0x0b10_c4ed_d3b7, 48, false);
    // Every share of every case went through the blocks (1 + 2 + 3
    // shares through the scratch, 2 on the stack).
    assert_eq!(BLOCK_RUNS.with(Cell::get) - before, 48 * 8);
}

/// Symmetric weights (b's zero point 0 on the i8 side, 128 on the u8
/// side), as quantizers make them per channel: with AVX-512 VBMI the
/// planes go through [`super::super::depthwise::quads`], four taps per
/// instruction, including windows of 1, 7 (two quads a row, the second
/// short) and 2.
#[test]
fn quad_blocks_match_the_reference() {
    let (quads, blocks) = (QUAD_RUNS.with(Cell::get), BLOCK_RUNS.with(Cell::get));
    blocks_against_the_reference(0x0_9ad5_d3b7, 64, true);
    let took = QUAD_RUNS.with(Cell::get) - quads + BLOCK_RUNS.with(Cell::get) - blocks;
    assert_eq!(took, 64 * 8);
    #[cfg(target_arch = "x86_64")]
    if super::super::igemm::Isa::detect() == super::super::igemm::Isa::Vnni
        && std::is_x86_feature_detected!("avx512vbmi")
    {
        assert_eq!(QUAD_RUNS.with(Cell::get) - quads, 64 * 8);
    }
}

/// `cases` random depthwise convolutions through `run` (which compares
/// every share split with the reference loops); `symmetric`: b's zero
/// points those of symmetric weights, windows of 1 to 7.
fn blocks_against_the_reference(seed: u64, cases: usize, symmetric: bool) {
    let mut rng = Rng(seed);
    let edge = |rng: &mut Rng, dtype: DType| -> i64 {
        let (lo, hi) = range(dtype);
        match rng.int(0, 3) {
            0 => lo,
            1 => hi,
            _ => rng.int(lo, hi),
        }
    };
    for case in 0..cases {
        let (x_type, w_type) = (NARROW[case % 2], NARROW[case / 2 % 2]);
        let out = [DType::U8, DType::I8, DType::I32][case % 3];
        let k = if symmetric {
            [3, 5, 3, 7, 1, 2][case / 4 % 6]
        } else {
            [3, 5][case / 4 % 2]
        };
        let stride = [1, 2][case / 8 % 2];
        let size = [7, 14, 28, 9, 15, 4, 1][case % 7];
        let (h, w) = if case % 5 == 0 {
            (size, rng.int(1, 30) as usize)
        } else {
            (size, size)
        };
        let (pt, pl) = (
            rng.int(0, k as i64 / 2) as usize,
            rng.int(0, k as i64 / 2) as usize,
        );
        let (pb, pr) = (
            rng.int(0, k as i64 / 2) as usize,
            rng.int(0, k as i64 / 2) as usize,
        );
        // Windows wider than the padded image are not convolutions.
        let (h, w) = (h.max(k), w.max(k));
        let groups = [1, 15, 16, 17, 40, 96][case % 6];
        let batch = 1 + case / 3 % 2;
        let oh = (h + pt + pb - k) / stride + 1;
        let ow = (w + pl + pr - k) / stride + 1;
        let mut p = Params::random(&mut rng, x_type, w_type, out, groups);
        p.a0 = edge(&mut rng, x_type);
        p.b0 = (0..groups)
            .map(|_| match (symmetric, w_type) {
                (false, _) => edge(&mut rng, w_type),
                (true, DType::U8) => 128,
                (true, _) => 0,
            })
            .collect();
        let (ins, attributes) = depthwise_case(
            &mut rng,
            (x_type, w_type, out),
            &p,
            [batch, groups, h, w],
            (k, stride),
            [pt, pl, pb, pr],
        );
        run("Conv", attributes, &ins, (out, &[batch, groups, oh, ow])).unwrap();
    }
}

/// Times mobilenet_v2's and efficientnet_b0's depthwise layers (int8,
/// symmetric per-channel weights, one thread, best of 30) through the
/// blocks and through the bands of rows, to choose between them:
/// `cargo test --release -p stow-runtime depthwise_layer_times --
/// --ignored --nocapture`.
#[test]
#[ignore]
fn depthwise_layer_times() {
    use std::time::Instant;
    let mut rng = Rng(0x71_e5d3b7);
    // (channels, input side, window, stride)
    let layers = [
        (32, 112, 3, 1),
        (96, 112, 3, 2),
        (144, 56, 3, 1),
        (144, 56, 3, 2),
        (192, 28, 3, 1),
        (192, 28, 3, 2),
        (384, 14, 3, 1),
        (576, 14, 3, 1),
        (576, 14, 3, 2),
        (960, 7, 3, 1),
        (144, 56, 5, 2),
        (240, 28, 5, 1),
        (240, 28, 3, 2),
        (480, 14, 5, 1),
        (672, 14, 5, 1),
        (672, 14, 5, 2),
        (1152, 7, 5, 1),
        (1152, 7, 3, 1),
    ];
    for (groups, h, k, stride) in layers {
        let (x_type, w_type, out) = (DType::U8, DType::I8, DType::U8);
        let pad = k / 2;
        let oh = (h + 2 * pad - k) / stride + 1;
        let mut p = Params::random(&mut rng, x_type, w_type, out, groups);
        p.b0 = vec![0; groups];
        let (ins, attributes) = depthwise_case(
            &mut rng,
            (x_type, w_type, out),
            &p,
            [1, groups, h, h],
            (k, stride),
            [pad; 4],
        );
        let op = Op {
            name: "time".into(),
            op_type: "Conv".into(),
            attributes: attributes
                .into_iter()
                .map(|(n, v)| (n.to_string(), v))
                .collect(),
            inputs: vec![],
            outputs: vec![],
        };
        let mut arena = vec![0u64; 1];
        let mut place = |id: usize, dtype: DType, shape: &[usize], data: &[u8]| {
            let at = arena.len() * 8;
            arena.resize(arena.len() + data.len().div_ceil(8) + 1, 0);
            bytemuck::cast_slice_mut::<u64, u8>(&mut arena)[at..at + data.len()]
                .copy_from_slice(data);
            Operand {
                id: id as u32,
                dtype,
                shape: shape.to_vec(),
                len: shape.iter().product(),
                loc: Loc::Arena(at),
            }
        };
        let operands: Vec<Operand<'static>> = ins
            .iter()
            .enumerate()
            .map(|(i, t)| place(i, t.dtype, &t.shape, &bytes(t)))
            .collect();
        let n = groups * oh * oh;
        let output = place(ins.len(), out, &[1, groups, oh, oh], &vec![0; n]);
        let (kernel, scratch) =
            crate::kernels::prepare(&op, &operands, std::slice::from_ref(&output)).unwrap();
        let step = Step {
            kernel,
            inputs: operands,
            outputs: vec![output],
            scratch,
            planned: None,
        };
        let bytes = bytemuck::cast_slice_mut::<u64, u8>(&mut arena);
        let views = Views::single(Cell::from_mut(bytes).as_slice_of_cells());
        let mut times = [0f64; 2];
        for (bands, time) in [false, true].into_iter().zip(&mut times) {
            FORCE_BANDS.with(|c| c.set(bands));
            *time = (0..30)
                .map(|_| {
                    let t = Instant::now();
                    run_part(&step, &views, &[], 0, 1).unwrap();
                    t.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min);
        }
        FORCE_BANDS.with(|c| c.set(false));
        std::println!(
            "{groups:5} x {h:3}x{h:<3} {k}x{k}/{stride}: blocks {:8.1} us, bands {:8.1} us, bands/blocks {:.2}",
            times[0] * 1e6,
            times[1] * 1e6,
            times[1] / times[0]
        );
    }
}

/// The inputs (random image and kernel, then `p`'s quantization
/// parameters, its zero points as i32) and attributes of a depthwise
/// `Conv` of `groups` planes: image `[batch, groups, h, w]`, a `k × k`
/// window at `stride`, pads `[top, left, bottom, right]`.
fn depthwise_case(
    rng: &mut Rng,
    (x_type, w_type, out): (DType, DType, DType),
    p: &Params,
    [batch, groups, h, w]: [usize; 4],
    (k, stride): (usize, usize),
    [pt, pl, pb, pr]: [usize; 4],
) -> (Vec<T>, Vec<(&'static str, AttrValue)>) {
    let ints_attr = |v: &[usize]| AttrValue::Ints(v.iter().map(|&x| x as i64).collect());
    let mut ins = vec![
        ints(
            x_type,
            &[batch, groups, h, w],
            rng.narrow(x_type, batch * groups * h * w),
        ),
        ints(
            w_type,
            &[groups, 1, k, k],
            rng.narrow(w_type, groups * k * k),
        ),
    ];
    ins.extend(
        p.tensors(x_type, w_type, out, "")
            .into_iter()
            .map(|(mut t, _)| {
                if matches!(t.dtype, DType::U8 | DType::I8) {
                    t.dtype = DType::I32;
                }
                t
            }),
    );
    let attributes = vec![
        ("data_format", text("NCHW")),
        ("kernel_shape", ints_attr(&[k, k])),
        ("strides", ints_attr(&[stride, stride])),
        ("dilations", ints_attr(&[1, 1])),
        ("padding", text("explicit")),
        ("pads_before", ints_attr(&[pt, pl])),
        ("pads_after", ints_attr(&[pb, pr])),
        ("group", AttrValue::Int(groups as i64)),
        ("kernel_format", text("OIHW")),
        ("q_params", text(q_name(out))),
    ];
    (ins, attributes)
}

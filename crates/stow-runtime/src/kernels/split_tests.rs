//! Element-wise and pooling steps split between threads: every share
//! count gives the bytes of the step run whole.

use super::layout::{broadcast_strides, strides_of};
use super::*;
use alloc::vec;
use core::cell::Cell;

/// xorshift: deterministic, so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn float(&mut self) -> f32 {
        match self.below(50) {
            0 => f32::NAN,
            1 => -0.0,
            _ => (self.below(20_001) as f32 - 10_000.0) / 3_001.0,
        }
    }
}

fn operand(id: u32, dtype: DType, shape: &[usize], at: usize) -> Operand<'static> {
    Operand {
        id,
        dtype,
        shape: shape.to_vec(),
        len: shape.iter().product(),
        loc: Loc::Arena(at),
    }
}

/// Runs `step` over a copy of `arena` in `parts` shares, the shares in
/// reverse order (threads finish in any order), and returns the arena.
fn run_shares(step: &Step<'_>, arena: &[u32], parts: usize) -> Vec<u64> {
    // Words of 8 bytes, so that i64 tensors at multiples of 8 are aligned.
    let mut words = vec![0u64; arena.len().div_ceil(2)];
    bytemuck::cast_slice_mut::<u64, u32>(&mut words)[..arena.len()].copy_from_slice(arena);
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(words.as_mut_slice());
    let views = Views::single(Cell::from_mut(bytes).as_slice_of_cells());
    for part in (0..parts).rev() {
        run_part(step, &views, &[], part, parts).expect("runs");
    }
    words
}

/// Checks that 2 and 3 shares give the bytes of 1 and returns whether
/// the step split at all.
fn same_for_every_share_count(step: &Step<'_>, arena: &[u32], what: &str) -> bool {
    let whole = run_shares(step, arena, 1);
    for parts in 2..=3 {
        assert!(
            run_shares(step, arena, parts) == whole,
            "{what}: {parts} shares differ from one"
        );
    }
    splits(step)
}

/// Binary steps with broadcasting (the second operand, or the first,
/// repeated along random axes), written apart or over the first operand,
/// and unary steps, in place or not, on random shapes around the split
/// threshold.
#[test]
fn element_wise_shares_equal_the_whole() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut split = 0;
    for case in 0..80 {
        let rank = 1 + rng.below(4);
        let mut shape: Vec<usize> = (0..rank).map(|_| 1 + rng.below(48)).collect();
        // Often large enough to split.
        if case % 2 == 0 {
            shape[0] = (run::SPLIT_ELEMENTS + rng.below(40_000))
                / shape[1..].iter().product::<usize>()
                + 1;
        }
        let n: usize = shape.iter().product();
        let small: Vec<usize> = shape
            .iter()
            .map(|&d| if rng.below(3) == 0 { 1 } else { d })
            .collect();
        let m: usize = small.iter().product();
        let swap = rng.below(2) == 0;
        let (sa, sb) = if swap {
            (&small, &shape)
        } else {
            (&shape, &small)
        };
        let (la, lb): (usize, usize) = (sa.iter().product(), sb.iter().product());
        // Bytes: a, then b, then the output (unless in place over a full
        // operand).
        let arena: Vec<u32> = (0..n + m + n).map(|_| rng.float().to_bits()).collect();
        let full_first = la == n;
        let in_place = full_first && rng.below(2) == 0;
        let out_at = if in_place { 0 } else { 4 * (la + lb) };
        for (op, dtype) in [
            (BinOp::Add, DType::F32),
            (BinOp::Max, DType::F32),
            (BinOp::Div, DType::F32),
            (BinOp::Lt, DType::Bool),
        ] {
            if dtype == DType::Bool && in_place {
                continue;
            }
            let o = &shape;
            let walk = Walk::new(
                o,
                [
                    &strides_of(o),
                    &broadcast_strides(sa, o).unwrap(),
                    &broadcast_strides(sb, o).unwrap(),
                ],
            )
            .unwrap();
            let step = Step {
                kernel: Kernel::Binary(op, walk),
                inputs: vec![
                    operand(0, DType::F32, sa, 0),
                    operand(1, DType::F32, sb, 4 * la),
                ],
                outputs: vec![operand(2, dtype, o, out_at)],
                scratch: 0,
                planned: None,
            };
            let what = format!("{op:?} {sa:?} {sb:?} in place {in_place}");
            split += same_for_every_share_count(&step, &arena, &what) as usize;
        }
        // QLinearAdd and QLinearMul: u8 a, i8 b, u8 output, the bytes
        // of the float operands' places; their parameters after them.
        let params = (la + lb + n).next_multiple_of(4);
        let mut qarena = arena.clone();
        for (w, v) in [(0, 0.037f32), (1, 0.0123), (2, 0.05)] {
            qarena[params / 4 + w] = v.to_bits();
        }
        qarena[params / 4 + 3] = u32::from_le_bytes([131, (-7i8) as u8, 3, 0]);
        let q_out = if in_place { 0 } else { la + lb };
        for mul in [false, true] {
            let scalar = |id, dtype, at| operand(id, dtype, &[], at);
            let inputs = vec![
                operand(0, DType::U8, sa, 0),
                scalar(1, DType::F32, params),
                scalar(2, DType::U8, params + 12),
                operand(3, DType::I8, sb, la),
                scalar(4, DType::F32, params + 4),
                scalar(5, DType::I8, params + 13),
                scalar(6, DType::F32, params + 8),
                scalar(7, DType::U8, params + 14),
            ];
            let outputs = vec![operand(8, DType::U8, &shape, q_out)];
            let (kernel, _) = qpointwise::prepare_binary(mul, &inputs, &outputs).unwrap();
            let step = Step {
                kernel,
                inputs,
                outputs,
                scratch: 0,
                planned: None,
            };
            let what = format!("quantized mul {mul} {sa:?} {sb:?} in place {in_place}");
            split += same_for_every_share_count(&step, &qarena, &what) as usize;
        }
        for f in [Unary::Exp, Unary::Sigmoid, Unary::Abs] {
            let step = Step {
                kernel: Kernel::Unary(f),
                inputs: vec![operand(0, DType::F32, &shape, 0)],
                outputs: vec![operand(
                    1,
                    DType::F32,
                    &shape,
                    if in_place { 0 } else { 4 * n },
                )],
                scratch: 0,
                planned: None,
            };
            let what = format!("{f:?} {shape:?} in place {in_place}");
            split += same_for_every_share_count(&step, &arena, &what) as usize;
        }
        let clamp = Step {
            kernel: Kernel::Clamp(gemm::Clamp {
                lo: 0.0,
                hi: 6.0,
                max_first: true,
            }),
            inputs: vec![operand(0, DType::F32, &shape, 0)],
            outputs: vec![operand(1, DType::F32, &shape, 4 * n)],
            scratch: 0,
            planned: None,
        };
        split += same_for_every_share_count(&clamp, &arena, "clamp") as usize;
    }
    assert!(split > 190, "only {split} steps split");
}

/// An output laid over its input at another offset keeps the step whole:
/// a share could overwrite what another has still to read.
#[test]
fn shifted_overlap_is_not_split() {
    let n = 2 * run::SPLIT_ELEMENTS;
    let step = Step {
        kernel: Kernel::Unary(Unary::Neg),
        inputs: vec![operand(0, DType::F32, &[n], 256)],
        outputs: vec![operand(1, DType::F32, &[n], 0)],
        scratch: 0,
        planned: None,
    };
    assert!(!splits(&step));
    let exact = Step {
        outputs: vec![operand(1, DType::F32, &[n], 256)],
        ..step
    };
    assert!(splits(&exact));
}

/// Max and average pooling (with and without the padding counted), NCHW,
/// random planes, sizes, kernels, strides and padding: shares of planes
/// give the bytes of the whole.
#[test]
fn pooling_shares_equal_the_whole() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut split = 0;
    for _ in 0..60 {
        let planes = 1 + rng.below(70);
        let (ih, iw) = (2 + rng.below(40), 2 + rng.below(40));
        let (kh, kw) = (1 + rng.below(4.min(ih)), 1 + rng.below(4.min(iw)));
        let (sy, sx) = (1 + rng.below(3), 1 + rng.below(3));
        let (py, px) = (rng.below(kh), rng.below(kw));
        let oh = (ih + 2 * py - kh) / sy + 1;
        let ow = (iw + 2 * px - kw) / sx + 1;
        let w = pool::Window {
            planes,
            input: [1, ih, iw],
            output: [1, oh, ow],
            kernel: [1, kh, kw],
            strides: [1, sy, sx],
            dilations: [1, 1, 1],
            pad: [0, py, px],
            pad_after: [0, py, px],
        };
        let (n_in, n_out) = (planes * ih * iw, planes * oh * ow);
        let arena: Vec<u32> = (0..n_in + 3 * n_out + 2)
            .map(|_| rng.float().to_bits())
            .collect();
        let x = operand(0, DType::F32, &[1, planes, ih, iw], 0);
        let y = operand(1, DType::F32, &[1, planes, oh, ow], 4 * n_in);
        let kinds = [
            Pool::Max,
            Pool::Sum {
                normalize: true,
                count_include_pad: false,
            },
            Pool::Sum {
                normalize: true,
                count_include_pad: true,
            },
        ];
        for kind in kinds {
            let mut outputs = vec![y.clone()];
            if kind == Pool::Max && rng.below(2) == 0 {
                // Indices too (i64: two words each).
                outputs.push(operand(
                    2,
                    DType::I64,
                    &[1, planes, oh, ow],
                    8 * (n_in + n_out).div_ceil(2),
                ));
            }
            let step = Step {
                kernel: Kernel::Pool(kind, w),
                inputs: vec![x.clone()],
                outputs,
                scratch: 0,
                planned: None,
            };
            let what = format!("{kind:?} {w:?}");
            split += same_for_every_share_count(&step, &arena, &what) as usize;
        }
    }
    assert!(split > 20, "only {split} pooling steps split");
}

/// Copies (transposes, and strided selections as a downsample makes)
/// of 1-, 2- and 4-byte elements on random shapes around the split
/// threshold: shares give the bytes of the whole, and the larger ones
/// split.
#[test]
fn copy_shares_equal_the_whole() {
    let mut rng = Rng(0x0ddb_1ad5_eed0);
    let mut split = 0;
    for case in 0..60 {
        let rank = 2 + rng.below(3);
        let mut shape: Vec<usize> = (0..rank).map(|_| 1 + rng.below(40)).collect();
        if case % 2 == 0 {
            shape[0] =
                run::SPLIT_ELEMENTS / shape[1..].iter().product::<usize>() + 1 + rng.below(9);
        }
        let n: usize = shape.iter().product();
        // The output reads the input transposed (a random order of its
        // axes) or every other element along one axis.
        let in_strides = strides_of(&shape);
        let (out_shape, src, input_len): (Vec<usize>, Vec<usize>, usize) = if case % 3 == 0 {
            let axis = rng.below(rank);
            let mut out = shape.clone();
            out[axis] = shape[axis].div_ceil(2);
            let mut s = in_strides.clone();
            s[axis] *= 2;
            (out, s, n)
        } else {
            let mut order: Vec<usize> = (0..rank).collect();
            for i in (1..rank).rev() {
                order.swap(i, rng.below(i + 1));
            }
            let out: Vec<usize> = order.iter().map(|&a| shape[a]).collect();
            let s: Vec<usize> = order.iter().map(|&a| in_strides[a]).collect();
            (out, s, n)
        };
        let walk = Walk::new(&out_shape, [&strides_of(&out_shape), &src]).unwrap();
        let out_len: usize = out_shape.iter().product();
        for dtype in [DType::U8, DType::I16, DType::F32] {
            let size = dtype.size_bytes() as usize;
            let words = (input_len * size).div_ceil(4) + (out_len * size).div_ceil(4) + 1;
            let arena: Vec<u32> = (0..words).map(|_| rng.next() as u32).collect();
            let out_at = (input_len * size).next_multiple_of(4);
            let step = Step {
                kernel: Kernel::Copy {
                    walk: walk.clone(),
                    base: [0, 0],
                    fill: None,
                },
                inputs: vec![operand(0, dtype, &shape, 0)],
                outputs: vec![operand(1, dtype, &out_shape, out_at)],
                scratch: 0,
                planned: None,
            };
            let what = format!("copy {shape:?} -> {out_shape:?} {dtype:?}");
            split += same_for_every_share_count(&step, &arena, &what) as usize;
        }
    }
    assert!(split > 40, "only {split} copies split");
}

/// Softmax, log-softmax and RMS normalisation along a random axis and
/// layer normalisation over the last, in place or not, on random shapes
/// around the split threshold: shares of lanes give the bytes of the
/// whole.
#[test]
fn normalisation_shares_equal_the_whole() {
    let mut rng = Rng(0x5eed_0f1a_9e00);
    let mut split = 0;
    for case in 0..40 {
        let rank = 1 + rng.below(4);
        let mut shape: Vec<usize> = (0..rank).map(|_| 1 + rng.below(40)).collect();
        if case % 2 == 0 {
            shape[0] =
                run::SPLIT_ELEMENTS / shape[1..].iter().product::<usize>() + 1 + rng.below(9);
        }
        let n: usize = shape.iter().product();
        let last = shape[rank - 1];
        let in_place = rng.below(2) == 0;
        let out_at = if in_place { 0 } else { 4 * n };
        let mut arena: Vec<u32> = (0..2 * n + 2 * last)
            .map(|_| rng.float().to_bits())
            .collect();
        // Finite inputs: a NaN would make every share's lane NaN alike,
        // which proves less.
        for w in arena.iter_mut() {
            if f32::from_bits(*w).is_nan() {
                *w = 0.5f32.to_bits();
            }
        }
        let axis = rng.below(rank);
        let at = nn::AroundAxis::new(&shape, axis).unwrap();
        let kernels = [
            Kernel::Softmax(at, false),
            Kernel::Softmax(at, true),
            Kernel::RmsNorm(at, 1e-5),
            Kernel::LayerNorm(last, 1e-5),
        ];
        for kernel in kernels {
            let mut inputs = vec![operand(0, DType::F32, &shape, 0)];
            if matches!(kernel, Kernel::LayerNorm(..)) {
                inputs.push(operand(2, DType::F32, &[last], 8 * n));
                inputs.push(operand(3, DType::F32, &[last], 8 * n + 4 * last));
            }
            let what = format!("{shape:?} axis {axis} in place {in_place}");
            let step = Step {
                kernel,
                inputs,
                outputs: vec![operand(1, DType::F32, &shape, out_at)],
                scratch: 0,
                planned: None,
            };
            split += same_for_every_share_count(&step, &arena, &what) as usize;
        }
    }
    assert!(split > 40, "only {split} steps split");
}

/// DynamicQuantizeLinear around the split threshold, its bytes apart from
/// the input or over it (not split), NaN and signed zeros among the
/// values: every share count gives the whole step's bytes, scale and
/// zero point.
#[test]
fn dynamic_quantize_shares_equal_the_whole() {
    let mut rng = Rng(0x000d_9a11_c0de);
    let mut split = 0;
    for case in 0..24 {
        let n = run::SPLIT_ELEMENTS - 40 + rng.below(3 * run::SPLIT_ELEMENTS);
        let in_place = case % 4 == 3;
        let q_at = if in_place { 0 } else { 4 * n + 8 };
        let mut arena: Vec<u32> = (0..2 * n + 8).map(|_| rng.float().to_bits()).collect();
        if case % 5 == 0 {
            // All of one sign.
            for w in arena[..n].iter_mut() {
                *w &= 0x7fff_ffff;
            }
        }
        let step = Step {
            kernel: Kernel::DynamicQuantizeU8,
            inputs: vec![operand(0, DType::F32, &[n], 0)],
            outputs: vec![
                operand(1, DType::U8, &[n], q_at),
                operand(2, DType::F32, &[], 4 * n),
                operand(3, DType::U8, &[], 4 * n + 4),
            ],
            scratch: 0,
            planned: None,
        };
        let what = format!("{n} elements, in place {in_place}");
        let splits = same_for_every_share_count(&step, &arena, &what);
        assert!(!(in_place && splits), "{what}: split over its input");
        split += splits as usize;
    }
    assert!(split > 12, "only {split} steps split");
}

//! Checks of the quantized kernels against ONNX's formula evaluated
//! directly, on random inputs of every handled type, and against the
//! examples of ONNX's documents.

use super::super::{run_part, Loc, Step};
use super::*;
use crate::kernels::float::Float;
use alloc::string::ToString;
use stow_bundle::AttrValue;

/// xorshift64*: reproducible inputs without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// An integer in `lo..=hi`.
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }

    /// A float in `lo..hi`.
    fn float(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Values of `dtype` (u8, i8: their whole range).
    fn narrow(&mut self, dtype: DType, n: usize) -> Vec<i64> {
        let (lo, hi) = range(dtype);
        (0..n).map(|_| self.int(lo, hi)).collect()
    }
}

fn range(dtype: DType) -> (i64, i64) {
    match dtype {
        DType::U8 => (0, 255),
        DType::I8 => (-128, 127),
        _ => (i32::MIN.into(), i32::MAX.into()),
    }
}

/// A test tensor: integers (u8, i8, i32) or floats (f32; f16 as bits).
#[derive(Clone)]
struct T {
    dtype: DType,
    shape: Vec<usize>,
    ints: Vec<i64>,
    floats: Vec<f32>,
}

fn ints(dtype: DType, shape: &[usize], ints: Vec<i64>) -> T {
    assert_eq!(ints.len(), shape.iter().product::<usize>());
    T {
        dtype,
        shape: shape.to_vec(),
        ints,
        floats: vec![],
    }
}

fn floats(shape: &[usize], floats: Vec<f32>) -> T {
    T {
        dtype: DType::F32,
        shape: shape.to_vec(),
        ints: vec![],
        floats,
    }
}

fn bytes(t: &T) -> Vec<u8> {
    match t.dtype {
        DType::U8 => t.ints.iter().map(|&v| v as u8).collect(),
        DType::I8 => t.ints.iter().map(|&v| v as i8 as u8).collect(),
        DType::I32 => t
            .ints
            .iter()
            .flat_map(|&v| (v as i32).to_le_bytes())
            .collect(),
        DType::F32 => t.floats.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => t
            .floats
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect(),
        other => panic!("no test tensors of {other:?}"),
    }
}

std::thread_local! {
    /// Runs of the packed path on this test's thread.
    static PACKED_RUNS: Cell<usize> = const { Cell::new(0) };
    /// Shares the direct depthwise path ran on this test's thread.
    pub(super) static DEPTHWISE_RUNS: Cell<usize> = const { Cell::new(0) };
    /// Makes the kernels run their reference loops alone.
    pub(super) static REFERENCE_ONLY: Cell<bool> = const { Cell::new(false) };
}

fn packed_runs() -> usize {
    PACKED_RUNS.with(|c| c.get())
}

/// Prepares `op_type` over `ins` into an output of `out` and runs it
/// with every operand in an arena; the output as integers.
fn run(
    op_type: &str,
    attributes: Vec<(&str, AttrValue)>,
    ins: &[T],
    out: (DType, &[usize]),
) -> Result<Vec<i64>, String> {
    let op = Op {
        name: "test".into(),
        op_type: op_type.into(),
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
        bytemuck::cast_slice_mut::<u64, u8>(&mut arena)[at..at + data.len()].copy_from_slice(data);
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
    let n: usize = out.1.iter().product();
    let size = out.0.size_bytes() as usize;
    let output = place(ins.len(), out.0, out.1, &vec![0xa5; n * size]);
    let (kernel, scratch) = crate::kernels::prepare(&op, &operands, std::slice::from_ref(&output))?;
    let step = Step {
        kernel,
        inputs: operands,
        outputs: vec![output.clone()],
        scratch,
        planned: None,
    };
    let Loc::Arena(at) = output.loc else {
        unreachable!()
    };
    // Runs the step in `parts` shares, one after the other, each with
    // `floats` of scratch (the reference loops alone with `reference`);
    // the output bytes and whether the scratch was written.
    let mut go =
        |floats: usize, parts: usize, reference: bool| -> Result<(Vec<u8>, bool), String> {
            let bytes = bytemuck::cast_slice_mut::<u64, u8>(&mut arena);
            bytes[at..at + n * size].fill(0xa5);
            let mut scratch = vec![f32::from_bits(0x7fc0_dead); floats];
            let scratch = Cell::from_mut(scratch.as_mut_slice()).as_slice_of_cells();
            let views = Views::single(Cell::from_mut(bytes).as_slice_of_cells());
            REFERENCE_ONLY.with(|r| r.set(reference));
            let ran = (0..parts).try_for_each(|part| run_part(&step, &views, scratch, part, parts));
            REFERENCE_ONLY.with(|r| r.set(false));
            ran.map_err(|e| format!("{e:?}"))?;
            let packed = scratch.iter().any(|c| c.get().to_bits() != 0x7fc0_dead);
            Ok((
                bytemuck::cast_slice::<u64, u8>(&arena)[at..at + n * size].to_vec(),
                packed,
            ))
        };
    // The reference loops, then the faster paths: packed through the
    // planned scratch alone and in two and three shares, and through the
    // stack buffer (no scratch); a depthwise convolution runs directly.
    let (raw, _) = go(0, 1, true)?;
    let direct = matches!(&step.kernel, Kernel::QConv(c) if c.shape.depthwise());
    if step.scratch > 0 {
        for parts in [1, 2, 3] {
            let (packed, used) = go(step.scratch, parts, false)?;
            assert!(used || direct, "the packed path declined its own scratch");
            assert_eq!(packed, raw, "packed path in {parts} shares");
            PACKED_RUNS.with(|c| c.set(c.get() + 1));
        }
        let (on_stack, _) = go(0, 2, false)?;
        assert_eq!(on_stack, raw, "packed on the stack");
    }
    // An i8 b (a convolution's kernel, a product's weight) in the
    // mapping, as a compiled bundle holds it: the rows' sums are then
    // taken at setup where b gives the rows (`QConv::row_sums`,
    // `QProduct::row_sums`). A depthwise convolution has no rows (and
    // its tests count the runs of its own paths).
    if ins[1].dtype == DType::I8 && !direct {
        let mut mapped_ins = step.inputs.clone();
        let weight: &'static [u8] = Box::leak(bytes(&ins[1]).into_boxed_slice());
        mapped_ins[1].loc = Loc::Weight(weight);
        let (kernel, scratch) =
            crate::kernels::prepare(&op, &mapped_ins, std::slice::from_ref(&output))?;
        let mapped = Step {
            kernel,
            inputs: mapped_ins,
            outputs: vec![output.clone()],
            scratch,
            planned: None,
        };
        for parts in [1, 2] {
            let bytes = bytemuck::cast_slice_mut::<u64, u8>(&mut arena);
            bytes[at..at + n * size].fill(0xa5);
            let mut scratch = vec![0f32; mapped.scratch];
            let scratch = Cell::from_mut(scratch.as_mut_slice()).as_slice_of_cells();
            let views = Views::single(Cell::from_mut(bytes).as_slice_of_cells());
            (0..parts)
                .try_for_each(|part| run_part(&mapped, &views, scratch, part, parts))
                .map_err(|e| format!("{e:?}"))?;
            let got = &bytemuck::cast_slice::<u64, u8>(&arena)[at..at + n * size];
            assert_eq!(got, &raw[..], "mapped kernel in {parts} shares");
        }
    }
    Ok(match out.0 {
        DType::U8 => raw.iter().map(|&b| b.into()).collect(),
        DType::I8 => raw.iter().map(|&b| (b as i8).into()).collect(),
        _ => raw
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]).into())
            .collect(),
    })
}

fn text(s: &str) -> AttrValue {
    AttrValue::Text(s.into())
}

fn q_name(d: DType) -> &'static str {
    match d {
        DType::U8 => "U8",
        DType::I8 => "I8",
        _ => "I32",
    }
}

/// The seven parameters (bias, a0, a_scale, b0, b_scale, c0, c_scale)
/// as values: per channel ones have `channels` values, the others one.
struct Params {
    bias: Vec<i64>,
    a0: i64,
    a_scale: f32,
    b0: Vec<i64>,
    b_scale: Vec<f32>,
    c0: i64,
    c_scale: f32,
}

impl Params {
    fn random(rng: &mut Rng, a: DType, b: DType, out: DType, channels: usize) -> Params {
        if out == DType::I32 {
            // MatMulInteger, ConvInteger: unit scales, no output zero
            // point, no bias.
            return Params {
                bias: vec![0; channels],
                a0: rng.narrow(a, 1)[0],
                a_scale: 1.0,
                b0: rng.narrow(b, channels),
                b_scale: vec![1.0; channels],
                c0: 0,
                c_scale: 1.0,
            };
        }
        Params {
            bias: (0..channels).map(|_| rng.int(-5000, 5000)).collect(),
            a0: rng.narrow(a, 1)[0],
            a_scale: rng.float(0.001, 0.05),
            b0: rng.narrow(b, channels),
            b_scale: (0..channels).map(|_| rng.float(0.001, 0.05)).collect(),
            c0: rng.narrow(out, 1)[0],
            c_scale: rng.float(0.02, 0.5),
        }
    }

    /// Channel `ch`'s value of a parameter with one or more values.
    fn pick<V: Copy>(v: &[V], ch: usize) -> V {
        v[if v.len() == 1 { 0 } else { ch }]
    }

    /// ONNX's formula, with the sum (bias included) exact in i64 and
    /// the rest in f64; the scales combine in f32 as numpy does in
    /// ONNX's reference (their arrays are float32).
    fn output(&self, ch: usize, sum: i64, out: DType) -> i64 {
        let acc = (sum + Self::pick(&self.bias, ch)) as f64;
        let scale = self.a_scale * Self::pick(&self.b_scale, ch) / self.c_scale;
        let (lo, hi) = range(out);
        (acc * f64::from(scale) + self.c0 as f64)
            .round_ties_even()
            .clamp(lo as f64, hi as f64) as i64
    }

    /// The seven tensors. `labels[i]` is the axis of a parameter with
    /// several values; a parameter with one value is a scalar, or of
    /// shape [1] on `one` (as tract wires ONNX's 1-element tensors).
    fn tensors(&self, a: DType, b: DType, out: DType, one: &str) -> Vec<(T, String)> {
        let zero = |v: i64, d: DType| {
            if one.is_empty() {
                (ints(d, &[], vec![v]), String::new())
            } else {
                (ints(d, &[1], vec![v]), one.to_string())
            }
        };
        let scale = |v: f32| {
            if one.is_empty() {
                (floats(&[], vec![v]), String::new())
            } else {
                (floats(&[1], vec![v]), one.to_string())
            }
        };
        let channel_ints = |v: &[i64], d: DType| {
            if v.len() == 1 {
                zero(v[0], d)
            } else {
                (ints(d, &[v.len()], v.to_vec()), "n".to_string())
            }
        };
        let channel_floats = |v: &[f32]| {
            if v.len() == 1 {
                scale(v[0])
            } else {
                (floats(&[v.len()], v.to_vec()), "n".to_string())
            }
        };
        vec![
            channel_ints(&self.bias, DType::I32),
            zero(self.a0, a),
            scale(self.a_scale),
            channel_ints(&self.b0, b),
            channel_floats(&self.b_scale),
            zero(self.c0, out),
            scale(self.c_scale),
        ]
    }
}

const NARROW: [DType; 2] = [DType::U8, DType::I8];

/// Batched products `bmk,bkn->bmn` (or with one b for all, `kn`),
/// per tensor and per column of b, every pair of input types, into
/// u8, i8 and i32, against ONNX's formula.
#[test]
fn products_match_the_onnx_formula() {
    let before = packed_runs();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (batch, m, k, n) = (2, 3, 7, 4);
    let mut checked = 0;
    let mut saturated = 0;
    for a_type in NARROW {
        for b_type in NARROW {
            for out in [DType::U8, DType::I8, DType::I32] {
                for per_channel in [false, true] {
                    for shared_b in [false, true] {
                        let channels = if per_channel { n } else { 1 };
                        let p = Params::random(&mut rng, a_type, b_type, out, channels);
                        let a = rng.narrow(a_type, batch * m * k);
                        let b_len = if shared_b { k * n } else { batch * k * n };
                        let b = rng.narrow(b_type, b_len);
                        let one = if shared_b { "m" } else { "" };
                        let params = p.tensors(a_type, b_type, out, one);
                        let (b_shape, b_axes) = if shared_b {
                            (vec![k, n], "kn")
                        } else {
                            (vec![batch, k, n], "bkn")
                        };
                        let labels: Vec<&str> = params.iter().map(|(_, l)| &l[..]).collect();
                        let expr = format!("bmk,{b_axes},{}->bmn", labels.join(","));
                        let mut ins = vec![
                            ints(a_type, &[batch, m, k], a.clone()),
                            ints(b_type, &b_shape, b.clone()),
                        ];
                        ins.extend(params.into_iter().map(|(t, _)| t));
                        let got = run(
                            "EinSum",
                            vec![("expr", text(&expr)), ("q_params", text(q_name(out)))],
                            &ins,
                            (out, &[batch, m, n]),
                        )
                        .unwrap();
                        let mut want = Vec::new();
                        for bi in 0..batch {
                            for i in 0..m {
                                for j in 0..n {
                                    let b0 = Params::pick(&p.b0, j);
                                    let mut sum = 0i64;
                                    for q in 0..k {
                                        let bb = if shared_b { 0 } else { bi };
                                        let x = a[(bi * m + i) * k + q] - p.a0;
                                        let y = b[(bb * k + q) * n + j] - b0;
                                        sum += x * y;
                                    }
                                    want.push(p.output(j, sum, out));
                                }
                            }
                        }
                        let (lo, hi) = range(out);
                        saturated += want.iter().filter(|&&y| y == lo || y == hi).count();
                        checked += want.len();
                        assert_eq!(
                            got, want,
                            "{a_type:?}×{b_type:?}→{out:?}, per channel {per_channel}, \
                             shared b {shared_b}"
                        );
                    }
                }
            }
        }
    }
    // Every case also ran packed (and matched).
    assert_eq!(packed_runs() - before, 2 * 2 * 3 * 2 * 2 * 3);
    // The cases reach both ends of the narrow types, not only the middle.
    assert!(
        saturated > 10 && saturated < checked / 4,
        "{saturated} of {checked}"
    );
}

/// 2-d convolutions with groups, strides, dilations and uneven
/// padding, per tensor and per output channel, every pair of input
/// types, against a direct loop of ONNX's formula.
#[test]
fn convolutions_match_the_onnx_formula() {
    let runs = packed_runs();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (batch, c_in, h, w) = (2, 4, 5, 6);
    let (groups, c_out, kh, kw) = (2, 6, 3, 2);
    let (stride, dilation) = ([2, 1], [1, 2]);
    let (before, after) = ([1, 0], [1, 2]);
    let oh = (h + before[0] + after[0] - (dilation[0] * (kh - 1) + 1)) / stride[0] + 1;
    let ow = (w + before[1] + after[1] - (dilation[1] * (kw - 1) + 1)) / stride[1] + 1;
    let (ipg, opg) = (c_in / groups, c_out / groups);
    let ints_attr = |v: &[usize]| AttrValue::Ints(v.iter().map(|&x| x as i64).collect());
    for x_type in NARROW {
        for w_type in NARROW {
            for out in [DType::U8, DType::I8, DType::I32] {
                for per_channel in [false, true] {
                    let channels = if per_channel { c_out } else { 1 };
                    let p = Params::random(&mut rng, x_type, w_type, out, channels);
                    let x = rng.narrow(x_type, batch * c_in * h * w);
                    let k = rng.narrow(w_type, c_out * ipg * kh * kw);
                    let mut ins = vec![
                        ints(x_type, &[batch, c_in, h, w], x.clone()),
                        ints(w_type, &[c_out, ipg, kh, kw], k.clone()),
                    ];
                    // tract casts a convolution's zero points to i32.
                    let params = p.tensors(x_type, w_type, out, "");
                    ins.extend(params.into_iter().map(|(mut t, _)| {
                        if matches!(t.dtype, DType::U8 | DType::I8) {
                            t.dtype = DType::I32;
                        }
                        t
                    }));
                    let attributes = vec![
                        ("data_format", text("NCHW")),
                        ("kernel_shape", ints_attr(&[kh, kw])),
                        ("strides", ints_attr(&stride)),
                        ("dilations", ints_attr(&dilation)),
                        ("padding", text("explicit")),
                        ("pads_before", ints_attr(&before)),
                        ("pads_after", ints_attr(&after)),
                        ("group", AttrValue::Int(groups as i64)),
                        ("kernel_format", text("OIHW")),
                        ("q_params", text(q_name(out))),
                    ];
                    let got =
                        run("Conv", attributes, &ins, (out, &[batch, c_out, oh, ow])).unwrap();
                    let mut want = Vec::new();
                    for image in 0..batch {
                        for co in 0..c_out {
                            let g = co / opg;
                            let b0 = Params::pick(&p.b0, co);
                            for oy in 0..oh {
                                for ox in 0..ow {
                                    let mut sum = 0i64;
                                    for ci in 0..ipg {
                                        for ky in 0..kh {
                                            for kx in 0..kw {
                                                let iy = (oy * stride[0] + ky * dilation[0]) as i64
                                                    - before[0] as i64;
                                                let ix = (ox * stride[1] + kx * dilation[1]) as i64
                                                    - before[1] as i64;
                                                if iy < 0
                                                    || ix < 0
                                                    || iy >= h as i64
                                                    || ix >= w as i64
                                                {
                                                    continue;
                                                }
                                                let (iy, ix) = (iy as usize, ix as usize);
                                                let xv =
                                                    x[((image * c_in + g * ipg + ci) * h + iy) * w
                                                        + ix];
                                                let kv = k[((co * ipg + ci) * kh + ky) * kw + kx];
                                                sum += (xv - p.a0) * (kv - b0);
                                            }
                                        }
                                    }
                                    want.push(p.output(co, sum, out));
                                }
                            }
                        }
                    }
                    assert_eq!(
                        got, want,
                        "{x_type:?}×{w_type:?}→{out:?}, per channel {per_channel}"
                    );
                }
            }
        }
    }
    assert_eq!(
        packed_runs() - runs,
        2 * 2 * 3 * 2 * 3,
        "every case also ran packed"
    );
}

/// Random convolutions and products, sized around the packed path's
/// tiles (16 lanes, 4 rows, depths in fours) and pointwise, depthwise and
/// padded, with zero points at the ends of their types: the packed path
/// (every instruction set the CPU has, through `run`) gives the reference
/// loops' bytes.
#[test]
fn the_packed_path_matches_the_reference_on_random_shapes() {
    let before = packed_runs();
    let mut rng = Rng(0x0dd5_17e5);
    let ints_attr = |v: &[usize]| AttrValue::Ints(v.iter().map(|&x| x as i64).collect());
    let edge = |rng: &mut Rng, dtype: DType| -> i64 {
        let (lo, hi) = range(dtype);
        match rng.int(0, 3) {
            0 => lo,
            1 => hi,
            _ => rng.int(lo, hi),
        }
    };
    for case in 0..60 {
        let (x_type, w_type) = (NARROW[case % 2], NARROW[case / 2 % 2]);
        let out = [DType::U8, DType::I8, DType::I32][case % 3];
        let kind = case / 4 % 3; // pointwise, depthwise, general
        let (groups, ipg, opg, kh, kw, stride, pad) = match kind {
            0 => (1, rng.int(1, 40), rng.int(1, 9), 1, 1, 1, 0),
            1 => (rng.int(1, 6), 1, 1, 3, 3, rng.int(1, 2), 1),
            _ => (
                1,
                rng.int(1, 7),
                rng.int(1, 6),
                rng.int(1, 3),
                rng.int(1, 3),
                1,
                rng.int(0, 1),
            ),
        };
        let [groups, ipg, opg, kh, kw, stride, pad] =
            [groups, ipg, opg, kh, kw, stride, pad].map(|v| v as usize);
        let (h, w) = (
            rng.int(kh as i64, 13) as usize,
            rng.int(kw as i64, 21) as usize,
        );
        let oh = (h + 2 * pad - kh) / stride + 1;
        let ow = (w + 2 * pad - kw) / stride + 1;
        let (c_in, c_out) = (groups * ipg, groups * opg);
        let mut p = Params::random(&mut rng, x_type, w_type, out, c_out);
        p.a0 = edge(&mut rng, x_type);
        p.b0 = (0..c_out).map(|_| edge(&mut rng, w_type)).collect();
        let mut ins = vec![
            ints(x_type, &[1, c_in, h, w], rng.narrow(x_type, c_in * h * w)),
            ints(
                w_type,
                &[c_out, ipg, kh, kw],
                rng.narrow(w_type, c_out * ipg * kh * kw),
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
            ("kernel_shape", ints_attr(&[kh, kw])),
            ("strides", ints_attr(&[stride, stride])),
            ("dilations", ints_attr(&[1, 1])),
            ("padding", text("explicit")),
            ("pads_before", ints_attr(&[pad, pad])),
            ("pads_after", ints_attr(&[pad, pad])),
            ("group", AttrValue::Int(groups as i64)),
            ("kernel_format", text("OIHW")),
            ("q_params", text(q_name(out))),
        ];
        run("Conv", attributes, &ins, (out, &[1, c_out, oh, ow])).unwrap();
    }
    assert_eq!(packed_runs() - before, 60 * 3);
    for case in 0..60 {
        let (a_type, b_type) = (NARROW[case % 2], NARROW[case / 2 % 2]);
        let out = [DType::U8, DType::I8, DType::I32][case % 3];
        let (m, k, n) = (
            rng.int(1, 9) as usize,
            rng.int(1, 70) as usize,
            rng.int(1, 40) as usize,
        );
        let mut p = Params::random(&mut rng, a_type, b_type, out, n);
        p.a0 = edge(&mut rng, a_type);
        p.b0 = (0..n).map(|_| edge(&mut rng, b_type)).collect();
        let params = p.tensors(a_type, b_type, out, "m");
        let labels: Vec<&str> = params.iter().map(|(_, l)| &l[..]).collect();
        let expr = format!("mk,kn,{}->mn", labels.join(","));
        let mut ins = vec![
            ints(a_type, &[m, k], rng.narrow(a_type, m * k)),
            ints(b_type, &[k, n], rng.narrow(b_type, k * n)),
        ];
        ins.extend(params.into_iter().map(|(t, _)| t));
        let attributes = vec![("expr", text(&expr)), ("q_params", text(q_name(out)))];
        run("EinSum", attributes, &ins, (out, &[m, n])).unwrap();
    }
    assert_eq!(packed_runs() - before, 120 * 3);
    // A 1×1 convolution as tract writes it (lanes from a: positions, rows
    // from b: output channels), and a product summed over axes of length
    // one besides k (tract's Flatten before a Gemm).
    for case in 0..40 {
        let (a_type, b_type) = (NARROW[case % 2], NARROW[case / 2 % 2]);
        let out = [DType::U8, DType::I8, DType::I32][case % 3];
        let (batch, i, o, h, w) = (
            rng.int(1, 2) as usize,
            rng.int(1, 30) as usize,
            rng.int(1, 9) as usize,
            rng.int(1, 7) as usize,
            rng.int(1, 9) as usize,
        );
        let mut p = Params::random(&mut rng, a_type, b_type, out, o);
        p.a0 = edge(&mut rng, a_type);
        p.b0 = (0..o).map(|_| edge(&mut rng, b_type)).collect();
        let params = p.tensors(a_type, b_type, out, "");
        let labels: Vec<String> = params.iter().map(|(_, l)| l.replace('n', "o")).collect();
        let (expr, a_shape, out_shape) = if case % 4 < 2 {
            (
                format!("nihw,oi,{}->nohw", labels.join(",")),
                vec![batch, i, h, w],
                vec![batch, o, h, w],
            )
        } else {
            (
                format!("mkba,ok,{}->mo", labels.join(",")),
                vec![batch, i, 1, 1],
                vec![batch, o],
            )
        };
        let a_len = a_shape.iter().product();
        let mut ins = vec![
            ints(a_type, &a_shape, rng.narrow(a_type, a_len)),
            ints(b_type, &[o, i], rng.narrow(b_type, o * i)),
        ];
        ins.extend(params.into_iter().map(|(t, _)| t));
        let attributes = vec![("expr", text(&expr)), ("q_params", text(q_name(out)))];
        run("EinSum", attributes, &ins, (out, &out_shape)).unwrap();
    }
    assert_eq!(packed_runs() - before, 160 * 3);
}

/// Depthwise convolutions whose input lines the direct path keeps three,
/// two or one at a time (widths up to 2,100), or takes in bands of rows
/// (mobilenet's widths, up to 120 rows: several bands, a short last one,
/// both column phases of stride 2 split in one pass), with dilations,
/// uneven strides and pads, and windows up to 7×7: the reference loops'
/// bytes.
#[test]
fn depthwise_rows_match_the_reference_on_wide_and_dilated_windows() {
    let before = packed_runs();
    let direct = DEPTHWISE_RUNS.with(Cell::get);
    let mut rng = Rng(0xd3b7_4a11);
    let ints_attr = |v: &[usize]| AttrValue::Ints(v.iter().map(|&x| x as i64).collect());
    let windows = [(3, 3), (5, 5), (1, 3), (3, 1), (7, 7), (2, 4)];
    for case in 0..60 {
        let (x_type, w_type) = (NARROW[case % 2], NARROW[case / 2 % 2]);
        let out = [DType::U8, DType::I8, DType::I32][case % 3];
        let (kh, kw) = windows[case % windows.len()];
        let w: usize = [5, 40, 1400, 2100, 112, 57][case / 3 % 6];
        // Output rows within the direct path's 1,024 columns.
        let sy = rng.int(1, 3) as usize;
        let sx = if w > 1000 {
            w.div_ceil(1000)
        } else {
            rng.int(1, 3) as usize
        };
        let (dy, dx) = (rng.int(1, 2) as usize, rng.int(1, 2) as usize);
        let (pt, pl, pb, pr) = (
            rng.int(0, 3) as usize,
            rng.int(0, 3) as usize,
            rng.int(0, 3) as usize,
            rng.int(0, 3) as usize,
        );
        let groups = rng.int(1, 3) as usize;
        let reach = ((kh - 1) * dy + 1) as i64;
        let tall = if w < 200 && w > 40 { 110 } else { 5 };
        let h = rng.int(reach, reach + tall) as usize;
        let w = w.max((kw - 1) * dx + 1);
        let oh = (h + pt + pb - (kh - 1) * dy - 1) / sy + 1;
        let ow = (w + pl + pr - (kw - 1) * dx - 1) / sx + 1;
        let mut p = Params::random(&mut rng, x_type, w_type, out, groups);
        p.a0 = rng.narrow(x_type, 1)[0];
        let mut ins = vec![
            ints(
                x_type,
                &[1, groups, h, w],
                rng.narrow(x_type, groups * h * w),
            ),
            ints(
                w_type,
                &[groups, 1, kh, kw],
                rng.narrow(w_type, groups * kh * kw),
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
            ("kernel_shape", ints_attr(&[kh, kw])),
            ("strides", ints_attr(&[sy, sx])),
            ("dilations", ints_attr(&[dy, dx])),
            ("padding", text("explicit")),
            ("pads_before", ints_attr(&[pt, pl])),
            ("pads_after", ints_attr(&[pb, pr])),
            ("group", AttrValue::Int(groups as i64)),
            ("kernel_format", text("OIHW")),
            ("q_params", text(q_name(out))),
        ];
        run("Conv", attributes, &ins, (out, &[1, groups, oh, ow])).unwrap();
    }
    assert_eq!(packed_runs() - before, 60 * 3);
    // Every share of every run went the direct way: 1 + 2 + 3 shares
    // through the scratch, 2 through the stack.
    assert_eq!(DEPTHWISE_RUNS.with(Cell::get) - direct, 60 * 8);
}

#[test]
fn requantisation_rounds_half_to_even_and_saturates() {
    let u8s = (0, 255);
    assert_eq!(requantize(5, 0.5, 0, u8s), 2);
    assert_eq!(requantize(7, 0.5, 0, u8s), 4);
    assert_eq!(requantize(3, 0.5, 10, u8s), 12);
    assert_eq!(requantize(1, 0.5, 10, u8s), 10);
    assert_eq!(requantize(-5, 0.5, 0, (-128, 127)), -2);
    assert_eq!(requantize(-7, 0.5, 0, (-128, 127)), -4);
    assert_eq!(requantize(1000, 1.0, 0, u8s), 255);
    assert_eq!(requantize(-1000, 1.0, 3, u8s), 0);
    assert_eq!(requantize(1000, 1.0, 0, (-128, 127)), 127);
    assert_eq!(requantize(-1000, 1.0, 0, (-128, 127)), -128);
    assert_eq!(requantize(i32::MIN, 1.0, 0, (i32::MIN, i32::MAX)), i32::MIN);
    assert_eq!(requantize(i32::MAX, 1.0, 0, (i32::MIN, i32::MAX)), i32::MAX);
    assert_eq!(requantize(7, f32::NAN, 0, u8s), 0);
    // MLAS adds the zero point after rounding: 1.5 → 2, then + 1 (ONNX's
    // reference rounds 2.5 → 2); and a NaN takes the lower bound.
    assert_eq!(requantize(3, 0.5, 1, u8s), 3);
    assert_eq!(requantize_wide(3, 0.5, 1, u8s), 2);
    assert_eq!(requantize(5, 0.5, -1, (-128, 127)), 1);
    assert_eq!(requantize(7, f32::NAN, 0, (-128, 127)), -128);
    assert_eq!(requantize(7, f32::NAN, 3, u8s), 0);
    // An i32 output stays exact beyond f32's 24 bits.
    let wide = (i32::MIN, i32::MAX);
    assert_eq!(requantize(16_777_217, 1.0, 0, wide), 16_777_217);
}

/// `requantize` for u8 and i8 outputs is MLAS's formula written out with
/// f32 operations and `round_ties_even` (the clip as MAXPS/MINPS: the
/// bound when the value is NaN), on random sums, scales and zero points
/// and on every tie of small sums.
#[test]
fn narrow_requantisation_is_mlas_arithmetic() {
    let mlas = |acc: i32, scale: f32, zero: i32, (lo, hi): (i32, i32)| -> i32 {
        let (min, max) = ((lo - zero) as f32, (hi - zero) as f32);
        let y = acc as f32 * scale;
        let y = if y > min { y } else { min };
        let y = if y < max { y } else { max };
        Float::round_ties_even(y) as i32 + zero
    };
    let mut rng = Rng(0x0dd5_eed5);
    let mut checked = 0;
    for range in [(0, 255), (-128, 127)] {
        for i in 0..60_000 {
            let acc = match i % 4 {
                0 => rng.int(-2000, 2000) as i32,
                1 => rng.int(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
                _ => rng.int(-300_000, 300_000) as i32,
            };
            let scale = match i % 5 {
                0 => 0.5,
                1 => 0.25,
                2 => f32::from_bits(rng.int(0, 0x7f80_0000) as u32),
                _ => rng.float(1e-5, 2e-2),
            };
            let zero = rng.int(range.0.into(), range.1.into()) as i32;
            let want = mlas(acc, scale, zero, range);
            assert_eq!(
                requantize(acc, scale, zero, range),
                want,
                "{acc} {scale} {zero}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 120_000);
    // Where MLAS and ONNX's reference part: ties with an odd zero point.
    let parted = (-600..600)
        .filter(|&acc| requantize(acc, 0.5, 7, (0, 255)) != requantize_wide(acc, 0.5, 7, (0, 255)))
        .count();
    assert!(parted > 100, "{parted}");
}

/// The rounding without libm agrees with `round_ties_even` then clamp on
/// halves, near-halves, large values and the ends of every range.
#[test]
fn rounding_without_libm_is_round_ties_even() {
    let mut rng = Rng(0xfeed_f00d);
    let mut values = vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0];
    for i in -600..600 {
        let h = f64::from(i) / 2.0;
        values.extend([h, h + 1e-9, h - 1e-9, h + f64::EPSILON * h]);
    }
    for _ in 0..20_000 {
        let e = rng.int(0, 40) as u32;
        let x = f64::from(rng.float(-1.0, 1.0)) * (1u64 << e) as f64;
        values.push(x);
    }
    values.extend([2147483647.5, -2147483648.5, 1e300, -1e300]);
    for y in values {
        for (lo, hi) in [(0, 255), (-128, 127), (i32::MIN, i32::MAX)] {
            let want = Float::round_ties_even(y).clamp(lo.into(), hi.into()) as i32;
            assert_eq!(round_clamped(y, lo, hi), want, "{y} in {lo}..={hi}");
        }
    }
}

/// The examples of ONNX's MatMulInteger and QLinearMatMul documents.
#[test]
fn matches_the_documented_examples() {
    let expr = "mk,kn,,m,m,n,n,m,m->mn";
    let mm_integer = run(
        "EinSum",
        vec![("expr", text(expr)), ("q_params", text("I32"))],
        &[
            ints(
                DType::U8,
                &[4, 3],
                vec![11, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0],
            ),
            ints(DType::U8, &[3, 2], vec![1, 4, 2, 5, 3, 6]),
            ints(DType::I32, &[], vec![0]),
            ints(DType::U8, &[1], vec![12]),
            floats(&[1], vec![1.0]),
            ints(DType::U8, &[1], vec![0]),
            floats(&[1], vec![1.0]),
            ints(DType::I32, &[1], vec![0]),
            floats(&[1], vec![1.0]),
        ],
        (DType::I32, &[4, 2]),
    );
    assert_eq!(
        mm_integer.unwrap(),
        [-38, -83, -44, -98, -50, -113, -56, -128]
    );
    for (t, shift, want) in [
        (DType::U8, 0, [168, 115, 255, 1, 66, 151]),
        (DType::I8, 127, [41, -12, -9, 1, -75, -128]),
    ] {
        let q = |v: &[i64]| ints(t, &[v.len()], v.iter().map(|x| x - shift).collect());
        let mut a = q(&[208, 236, 0, 238, 3, 214, 255, 29]);
        a.shape = vec![2, 4];
        let mut b = q(&[152, 51, 244, 60, 26, 255, 0, 127, 246, 127, 254, 247]);
        b.shape = vec![4, 3];
        let got = run(
            "EinSum",
            vec![("expr", text(expr)), ("q_params", text(q_name(t)))],
            &[
                a,
                b,
                ints(DType::I32, &[], vec![0]),
                q(&[113]),
                floats(&[1], vec![0.0066]),
                q(&[114]),
                floats(&[1], vec![0.00705]),
                q(&[118]),
                floats(&[1], vec![0.0107]),
            ],
            (t, &[2, 3]),
        );
        assert_eq!(got.unwrap(), want);
    }
}

/// Everything but one value, or one per channel, is refused at setup
/// with the parameter's name; so are other element types.
#[test]
fn refuses_what_it_does_not_compute() {
    let (m, k, n) = (3, 2, 4);
    let base = || {
        vec![
            ints(DType::U8, &[m, k], vec![1; m * k]),
            ints(DType::I8, &[k, n], vec![1; k * n]),
            ints(DType::I32, &[], vec![0]),
            ints(DType::U8, &[], vec![0]),
            floats(&[], vec![1.0]),
            ints(DType::I8, &[], vec![0]),
            floats(&[], vec![1.0]),
            ints(DType::U8, &[], vec![0]),
            floats(&[], vec![1.0]),
        ]
    };
    let product = |ins: &[T], labels: [&str; 7], q: &str| {
        let expr = format!("mk,kn,{}->mn", labels.join(","));
        run(
            "EinSum",
            vec![("expr", text(&expr)), ("q_params", text(q))],
            ins,
            (DType::U8, &[m, n]),
        )
    };
    let none = ["", "", "", "", "", "", ""];
    assert!(product(&base(), none, "U8").is_ok());
    // a's zero point per row.
    let mut ins = base();
    ins[A0] = ints(DType::U8, &[m], vec![1; m]);
    let mut labels = none;
    labels[A0 - 2] = "m";
    let e = product(&ins, labels, "U8").unwrap_err();
    assert!(e.contains("a's zero point has 3 values"), "{e}");
    // b's zero point along k.
    let mut ins = base();
    ins[B0] = ints(DType::I8, &[k], vec![1; k]);
    let mut labels = none;
    labels[B0 - 2] = "k";
    let e = product(&ins, labels, "U8").unwrap_err();
    assert!(e.contains("b's zero point has 2 values"), "{e}");
    // The output's scale per column.
    let mut ins = base();
    ins[C_SCALE] = floats(&[n], vec![1.0; n]);
    let mut labels = none;
    labels[C_SCALE - 2] = "n";
    let e = product(&ins, labels, "U8").unwrap_err();
    assert!(e.contains("the output's scale has 4 values"), "{e}");
    // b's scale per column, but with the wrong count.
    let mut ins = base();
    ins[B_SCALE] = floats(&[n - 1], vec![1.0; n - 1]);
    let mut labels = none;
    labels[B_SCALE - 2] = "n";
    assert!(product(&ins, labels, "U8").is_err());
    // f16 scales, i32 operands, an output type that differs.
    let mut ins = base();
    ins[A_SCALE].dtype = DType::F16;
    let e = product(&ins, none, "U8").unwrap_err();
    assert!(e.contains("a's scale") && e.contains("f16"), "{e}");
    let mut ins = base();
    ins[A] = ints(DType::I32, &[m, k], vec![1; m * k]);
    assert!(product(&ins, none, "U8").is_err());
    assert!(product(&base(), none, "I8").is_err());
    let e = product(&base(), none, "QU8(Z:0 S:1.0)").unwrap_err();
    assert!(e.contains("quantized output of type"), "{e}");
    // A convolution's kernel zero point with one value per input
    // channel.
    let conv = |b0: T| {
        let one = |v: i64| AttrValue::Ints(vec![v]);
        run(
            "Conv",
            vec![
                ("data_format", text("NCHW")),
                ("kernel_shape", one(1)),
                ("strides", one(1)),
                ("dilations", one(1)),
                ("padding", text("valid")),
                ("group", AttrValue::Int(1)),
                ("kernel_format", text("OIHW")),
                ("q_params", text("I32")),
            ],
            &[
                ints(DType::U8, &[1, 3, 5], vec![1; 15]),
                ints(DType::U8, &[2, 3, 1], vec![1; 6]),
                ints(DType::I32, &[], vec![0]),
                ints(DType::I32, &[], vec![0]),
                floats(&[], vec![1.0]),
                b0,
                floats(&[], vec![1.0]),
                ints(DType::I32, &[], vec![0]),
                floats(&[], vec![1.0]),
            ],
            (DType::I32, &[1, 2, 5]),
        )
    };
    assert_eq!(
        conv(ints(DType::I32, &[2], vec![0, 1])).unwrap(),
        [3, 3, 3, 3, 3, 0, 0, 0, 0, 0]
    );
    let e = conv(ints(DType::I32, &[3], vec![0, 1, 1])).unwrap_err();
    assert!(e.contains("one per output channel"), "{e}");
}

mod depthwise_blocks;
mod packed;
mod runs;

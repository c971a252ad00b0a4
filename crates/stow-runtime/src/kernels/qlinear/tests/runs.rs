//! Convolutions whose panels read their image by runs of sixteen
//! consecutive bytes (stride 1, padding that keeps the output as wide
//! as the input), where a panel wraps over several output rows and its
//! taps reach into the padding on either side: the packed path gives the
//! reference loops' bytes, with the padding byte at both ends of its
//! type.

use super::*;

#[test]
fn same_padded_convolutions_match_the_reference() {
    let before = packed_runs();
    let mut rng = Rng(0x005e_ed0f_2a11);
    let ints_attr = |v: &[usize]| AttrValue::Ints(v.iter().map(|&x| x as i64).collect());
    let cases = 24;
    for case in 0..cases {
        let (x_type, w_type) = (NARROW[case % 2], NARROW[case / 2 % 2]);
        let out = [DType::U8, DType::I8, DType::I32][case % 3];
        let kh = [1, 3, 5][case % 3];
        let kw = [3, 1, 3, 5][case % 4];
        let dil = [1, 2][case / 3 % 2];
        let (ph, pw) = (dil * (kh - 1) / 2, dil * (kw - 1) / 2);
        let (c_in, c_out) = (rng.int(1, 9) as usize, rng.int(1, 9) as usize);
        let (h, w) = (rng.int(1, 12) as usize, rng.int(1, 23) as usize);
        let mut p = Params::random(&mut rng, x_type, w_type, out, c_out);
        let (lo, hi) = range(x_type);
        p.a0 = [lo, hi, rng.int(lo, hi)][case % 3];
        let mut ins = vec![
            ints(x_type, &[1, c_in, h, w], rng.narrow(x_type, c_in * h * w)),
            ints(
                w_type,
                &[c_out, c_in, kh, kw],
                rng.narrow(w_type, c_out * c_in * kh * kw),
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
            ("strides", ints_attr(&[1, 1])),
            ("dilations", ints_attr(&[dil, dil])),
            ("padding", text("explicit")),
            ("pads_before", ints_attr(&[ph, pw])),
            ("pads_after", ints_attr(&[ph, pw])),
            ("group", AttrValue::Int(1)),
            ("kernel_format", text("OIHW")),
            ("q_params", text(q_name(out))),
        ];
        run("Conv", attributes, &ins, (out, &[1, c_out, h, w])).unwrap();
    }
    assert_eq!(packed_runs() - before, cases * 3);
}

/// Convolutions whose panels load their lines by runs of stride 1 or 2
/// (one run per output row where the padding does not keep the width),
/// or lane by lane (stride 3, narrow outputs): kernels 1×1 to 7×7 and
/// uneven, uneven pads, dilation, widths on both sides of multiples of
/// sixteen, depths not in whole quads, zero points at 0 on each side
/// (where the packers skip the sums they multiply) and at the extremes.
#[test]
fn strided_and_wide_windows_match_the_reference() {
    let before = packed_runs();
    let mut rng = Rng(0x0051_de2a_b7c3);
    let ints_attr = |v: &[usize]| AttrValue::Ints(v.iter().map(|&x| x as i64).collect());
    let kernels = [(1, 1), (3, 3), (5, 5), (7, 7), (3, 1), (1, 5)];
    let cases = 72;
    for case in 0..cases {
        let (x_type, w_type) = (NARROW[case % 2], NARROW[case / 2 % 2]);
        let out = [DType::U8, DType::I8, DType::I32][case % 3];
        let (kh, kw) = kernels[case % kernels.len()];
        let stride = [1, 2, 2, 1, 3][case % 5];
        let dil = if case % 7 == 3 { 2 } else { 1 };
        let pads: [usize; 4] = core::array::from_fn(|i| {
            let reach = if i % 2 == 0 { kh } else { kw };
            rng.int(0, (dil * (reach - 1) / 2) as i64) as usize
        });
        let (reach_y, reach_x) = (dil * (kh - 1) + 1, dil * (kw - 1) + 1);
        let (c_in, c_out) = (rng.int(1, 9) as usize, rng.int(1, 9) as usize);
        let widths = [16, 32, 17, 15, 48, 7, 40];
        let w = widths[case % widths.len()].max(reach_x) + rng.int(0, 2) as usize;
        let h = rng.int(reach_y as i64, reach_y as i64 + 9) as usize;
        let oh = (h + pads[0] + pads[2] - reach_y) / stride + 1;
        let ow = (w + pads[1] + pads[3] - reach_x) / stride + 1;
        let mut p = Params::random(&mut rng, x_type, w_type, out, c_out);
        let (lo, hi) = range(x_type);
        // 0 on the kernel's u8 side: u8 0, i8 −128.
        p.a0 = [lo.max(0), lo, hi, rng.int(lo, hi)][case / 3 % 4];
        if case % 2 == 1 || case % 5 == 0 {
            // On the kernel's i8 side 0: i8 0, u8 128.
            let zero = if w_type == DType::I8 { 0 } else { 128 };
            p.b0 = vec![zero; c_out];
        }
        let mut ins = vec![
            ints(x_type, &[1, c_in, h, w], rng.narrow(x_type, c_in * h * w)),
            ints(
                w_type,
                &[c_out, c_in, kh, kw],
                rng.narrow(w_type, c_out * c_in * kh * kw),
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
            ("dilations", ints_attr(&[dil, dil])),
            ("padding", text("explicit")),
            ("pads_before", ints_attr(&[pads[0], pads[1]])),
            ("pads_after", ints_attr(&[pads[2], pads[3]])),
            ("group", AttrValue::Int(1)),
            ("kernel_format", text("OIHW")),
            ("q_params", text(q_name(out))),
        ];
        run("Conv", attributes, &ins, (out, &[1, c_out, oh, ow])).unwrap();
    }
    assert_eq!(packed_runs() - before, cases * 3);
}

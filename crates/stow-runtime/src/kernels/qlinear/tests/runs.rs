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

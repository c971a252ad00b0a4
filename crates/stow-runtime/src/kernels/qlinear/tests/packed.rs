//! Products whose i8 weight the compiler stored as the lanes' panels
//! (`stow.packed`): the same bytes as the reference loops over the
//! row-major weight, at sizes around the panel (16 lanes), the quad (4
//! depths) and the tile (4 rows), with the weight read from an aligned
//! mapping (full panels in place), from an unaligned one and from the
//! arena (every panel widened into scratch).

use super::*;
use crate::kernels::prepacked::{Panels, Side, PACKED_ATTR};

/// Where the packed weight is.
#[derive(Clone, Copy, Debug)]
enum Place {
    /// A mapping aligned for quads.
    Aligned,
    /// A mapping one byte off.
    Unaligned,
    /// The arena.
    Arena,
}

/// A weight's bytes in a mapping that lives as long as the test binary
/// (kernels borrow weights for the bundle's lifetime), at an offset of
/// `shift` bytes from a 64-byte boundary.
fn mapped(bytes: &[u8], shift: usize) -> &'static [u8] {
    let words = (bytes.len() + shift).div_ceil(8) + 8;
    let store: &'static mut [u64] = Vec::leak(vec![0u64; words]);
    let all = bytemuck::cast_slice_mut::<u64, u8>(store);
    let start = all.as_ptr().align_offset(64) + shift;
    let region = &mut all[start..start + bytes.len()];
    region.copy_from_slice(bytes);
    region
}

/// Runs the quantized product `op` with b packed as `layout` at `place`,
/// in `parts` shares with `floats` of scratch: the output bytes.
fn run_packed(
    op: &Op,
    ins: &[T],
    out: (DType, &[usize]),
    layout: &Panels,
    place: Place,
    parts: usize,
    floats: Option<usize>,
) -> Vec<u8> {
    let mut arena = vec![0u64; 1];
    let mut put = |id: usize, dtype: DType, shape: &[usize], data: &[u8]| {
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
    let mut operands: Vec<Operand<'static>> = ins
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let data = bytes(t);
            if i != 1 {
                return put(i, t.dtype, &t.shape, &data);
            }
            let packed = layout.pack(&data).expect("a permutation");
            match place {
                Place::Arena => put(i, t.dtype, &t.shape, &packed),
                Place::Aligned | Place::Unaligned => Operand {
                    id: 1,
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                    len: t.shape.iter().product(),
                    loc: Loc::Weight(mapped(&packed, matches!(place, Place::Unaligned).into())),
                },
            }
        })
        .collect();
    let n: usize = out.1.iter().product();
    let size = out.0.size_bytes() as usize;
    let output = put(ins.len(), out.0, out.1, &vec![0xa5; n * size]);
    let (kernel, scratch) = crate::kernels::prepare(op, &operands, core::slice::from_ref(&output))
        .unwrap_or_else(|e| panic!("{layout:?}: {e}"));
    let Kernel::QProduct(q) = &kernel else {
        panic!("not a quantized product")
    };
    // The same layout (a stride along an axis of one element aside).
    let order: Vec<u32> = (0..layout.len() as u32).collect();
    let prepared = q.packed_weight().expect("a packed weight");
    assert_eq!(prepared.pack(&order), layout.pack(&order), "{layout:?}");
    let step = Step {
        kernel,
        inputs: core::mem::take(&mut operands),
        outputs: vec![output.clone()],
        scratch,
        planned: None,
    };
    let Loc::Arena(at) = output.loc else {
        unreachable!()
    };
    let bytes = bytemuck::cast_slice_mut::<u64, u8>(&mut arena);
    let mut scratch = vec![f32::from_bits(0x7fc0_dead); floats.unwrap_or(step.scratch)];
    let scratch = Cell::from_mut(scratch.as_mut_slice()).as_slice_of_cells();
    let views = Views::single(Cell::from_mut(bytes).as_slice_of_cells());
    // A test asking for the reference loops still gets the packed path:
    // the reference cannot read a packed weight.
    REFERENCE_ONLY.with(|r| r.set(true));
    let ran = (0..parts).try_for_each(|part| run_part(&step, &views, scratch, part, parts));
    REFERENCE_ONLY.with(|r| r.set(false));
    ran.unwrap();
    bytemuck::cast_slice::<u64, u8>(&arena)[at..at + n * size].to_vec()
}

fn as_bytes(values: &[i64], dtype: DType) -> Vec<u8> {
    bytes(&ints(dtype, &[values.len()], values.to_vec()))
}

#[test]
fn packed_weights_give_the_reference_bytes_at_edge_sizes() {
    let mut rng = Rng(0x9ac4_ed01);
    let mut cases = 0;
    // (One column: a's rows give the lanes, b is not packed.)
    for &n in &[2usize, 15, 16, 17, 33, 48] {
        for &k in &[1usize, 3, 4, 5, 8, 67, 132] {
            let m = [1usize, 3, 4, 5, 9][cases % 5];
            let a_type = NARROW[cases % 2];
            let out = [DType::U8, DType::I8, DType::I32][cases % 3];
            // `nk`: the weight read transposed, as Gemm's transB gives it.
            let transposed = cases % 4 == 3;
            cases += 1;
            let mut p = Params::random(&mut rng, a_type, DType::I8, out, n);
            p.a0 = rng.narrow(a_type, 1)[0];
            let params = p.tensors(a_type, DType::I8, out, "m");
            let labels: Vec<&str> = params.iter().map(|(_, l)| &l[..]).collect();
            let (b_expr, b_shape) = if transposed {
                ("nk", [n, k])
            } else {
                ("kn", [k, n])
            };
            let expr = format!("mk,{b_expr},{}->mn", labels.join(","));
            let mut ins = vec![
                ints(a_type, &[m, k], rng.narrow(a_type, m * k)),
                ints(DType::I8, &b_shape, rng.narrow(DType::I8, k * n)),
            ];
            ins.extend(params.into_iter().map(|(t, _)| t));
            let q = ("q_params", text(q_name(out)));
            let want = run(
                "EinSum",
                vec![("expr", text(&expr)), q.clone()],
                &ins,
                (out, &[m, n]),
            )
            .unwrap();
            let want = as_bytes(&want, out);
            let layout = Panels {
                side: Side::Quads,
                matrices: 1,
                rows: n,
                depth: k,
                strides: if transposed { [0, k, 1] } else { [0, 1, n] },
                kc: k,
            };
            let op = Op {
                name: "packed".into(),
                op_type: "EinSum".into(),
                attributes: vec![
                    ("expr".to_string(), text(&expr)),
                    ("q_params".to_string(), q.1),
                    (PACKED_ATTR.to_string(), AttrValue::Int(k as i64)),
                ],
                inputs: vec![],
                outputs: vec![],
            };
            for place in [Place::Aligned, Place::Unaligned, Place::Arena] {
                for parts in [1, 2, 3] {
                    for floats in [None, Some(0)] {
                        let got =
                            run_packed(&op, &ins, (out, &[m, n]), &layout, place, parts, floats);
                        assert_eq!(
                            got, want,
                            "{m}×{k}×{n} transposed {transposed}, {place:?}, {parts} shares, scratch {floats:?}"
                        );
                    }
                }
            }
        }
    }
}

/// A panel's lane sums from rows of ones are each lane's sum over the
/// depth, u8 or i8 as the kernel reads it, on every instruction set.
#[test]
fn lane_sums_of_a_packed_panel_are_the_plain_sums() {
    let mut rng = Rng(0x5a5a_0001);
    for nq in [1usize, 2, 7, 40] {
        let quads: Vec<u32> = (0..nq * igemm::NR).map(|_| rng.next() as u32).collect();
        for unsigned in [false, true] {
            let want: [i32; igemm::NR] = core::array::from_fn(|l| {
                (0..nq)
                    .flat_map(|q| quads[q * igemm::NR + l].to_le_bytes())
                    .map(|b| {
                        if unsigned {
                            i32::from(b)
                        } else {
                            i32::from(b as i8)
                        }
                    })
                    .sum()
            });
            for isa in igemm::Isa::all_available() {
                assert_eq!(
                    igemm::lane_sums(isa, unsigned, &quads),
                    want,
                    "{isa:?}, {nq} quads, unsigned {unsigned}"
                );
            }
        }
    }
}

/// What setup refuses: a packed weight that is not i8, whose depth
/// block is not the whole depth, or on a convolution.
#[test]
fn setup_refuses_packed_weights_it_cannot_read() {
    let (m, k, n) = (3, 8, 5);
    let p = Params::random(&mut Rng(7), DType::U8, DType::U8, DType::I32, n);
    let params = p.tensors(DType::U8, DType::U8, DType::I32, "m");
    let labels: Vec<&str> = params.iter().map(|(_, l)| &l[..]).collect();
    let expr = format!("mk,kn,{}->mn", labels.join(","));
    let with = |b_type: DType, kc: i64| {
        let mut ins = vec![
            ints(DType::U8, &[m, k], vec![1; m * k]),
            ints(b_type, &[k, n], vec![1; k * n]),
        ];
        ins.extend(params.iter().map(|(t, _)| t.clone()));
        let attributes = vec![
            ("expr", text(&expr)),
            ("q_params", text("I32")),
            (PACKED_ATTR, AttrValue::Int(kc)),
        ];
        run("EinSum", attributes, &ins, (DType::I32, &[m, n]))
    };
    assert!(with(DType::U8, k as i64).unwrap_err().contains("i8"));
    assert!(with(DType::I8, 4).unwrap_err().contains("whole depth"));
}

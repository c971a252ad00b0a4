//! Float products (`EinSum` as a matrix product) run through setup and
//! the kernel, against the definition.

use super::*;
use alloc::string::ToString;
use alloc::vec;
use core::cell::Cell;
use stow_bundle::{AttrValue, Op};

fn value(i: usize, seed: usize) -> f32 {
    ((i * 2_654_435_761 + seed * 40_503) % 997) as f32 / 498.0 - 1.0
}

/// Runs `EinSum(expr)` on `a` and `b` in `parts` shares with the scratch
/// setup asks for; the output and whether setup swapped the operands.
fn einsum(
    expr: &str,
    a: (&[usize], &[f32]),
    b: (&[usize], &[f32]),
    out: &[usize],
    parts: usize,
) -> (Vec<f32>, bool) {
    einsum_with(expr, None, a, b, out, parts)
}

/// [`einsum`] with b a weight stored packed as `packing` (an attribute
/// name and depth block) says.
fn einsum_with(
    expr: &str,
    packing: Option<(&str, i64)>,
    a: (&[usize], &[f32]),
    b: (&[usize], &[f32]),
    out: &[usize],
    parts: usize,
) -> (Vec<f32>, bool) {
    let mut op = Op {
        name: "product".into(),
        op_type: "EinSum".into(),
        attributes: vec![("expr".to_string(), AttrValue::Text(expr.into()))],
        inputs: vec![],
        outputs: vec![],
    };
    if let Some((name, kc)) = packing {
        op.attributes.push((name.to_string(), AttrValue::Int(kc)));
        op.attributes.sort_by(|x, y| x.0.cmp(&y.0));
    }
    let n: usize = out.iter().product();
    let mut arena = vec![0f32; a.1.len() + b.1.len() + n];
    arena[..a.1.len()].copy_from_slice(a.1);
    arena[a.1.len()..a.1.len() + b.1.len()].copy_from_slice(b.1);
    let operand = |id: u32, shape: &[usize], at: usize| Operand {
        id,
        dtype: DType::F32,
        shape: shape.to_vec(),
        len: shape.iter().product(),
        loc: Loc::Arena(at * 4),
    };
    let ins = vec![operand(0, a.0, 0), operand(1, b.0, a.1.len())];
    let c_at = a.1.len() + b.1.len();
    let outs = vec![operand(2, out, c_at)];
    let (kernel, scratch) = prepare(&op, &ins, &outs).expect("a product");
    let swapped = matches!(&kernel, Kernel::MatMul(mm) if mm.swapped);
    if let Kernel::MatMul(MatMul {
        packed: Some(p), ..
    }) = &kernel
    {
        let packed = p.pack(b.1).expect("a permutation");
        arena[a.1.len()..a.1.len() + b.1.len()].copy_from_slice(&packed);
    }
    let step = Step {
        kernel,
        inputs: ins,
        outputs: outs,
        scratch,
        planned: None,
    };
    let mut floats = vec![0f32; scratch];
    let scratch = Cell::from_mut(floats.as_mut_slice()).as_slice_of_cells();
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(arena.as_mut_slice());
    let views = Views::single(Cell::from_mut(bytes).as_slice_of_cells());
    for part in 0..parts {
        run_part(&step, &views, scratch, part, parts).expect("runs");
    }
    (arena[c_at..].to_vec(), swapped)
}

/// A 1×1 convolution written as image-by-weight (`ihw,oi->ohw`: the
/// output's contiguous axis is the image's, so setup swaps the operands
/// where the weight is small next to the image) gives the bytes of the
/// same product written weight-by-image (never swapped), in 1 to 3
/// shares, and both equal the definition.
#[test]
fn swapped_products_equal_the_unswapped_form() {
    let mut swaps = 0;
    for (ci, co, h, w, swap) in [
        (3, 5, 4, 7, true),
        (32, 16, 14, 14, true),
        (17, 6, 5, 11, true),
        (300, 7, 2, 9, true),
        (17, 40, 3, 11, false),
        (64, 300, 20, 20, false),
    ] {
        let x: Vec<f32> = (0..ci * h * w).map(|i| value(i, 1)).collect();
        let wt: Vec<f32> = (0..co * ci).map(|i| value(i, 2)).collect();
        let want: Vec<f64> = (0..co * h * w)
            .map(|e| {
                let (o, p) = (e / (h * w), e % (h * w));
                (0..ci)
                    .map(|i| f64::from(wt[o * ci + i]) * f64::from(x[i * h * w + p]))
                    .sum()
            })
            .collect();
        for parts in 1..=3 {
            let (image_first, swapped) = einsum(
                "ihw,oi->ohw",
                (&[ci, h, w], &x),
                (&[co, ci], &wt),
                &[co, h, w],
                parts,
            );
            let (weight_first, unswapped) = einsum(
                "oi,ihw->ohw",
                (&[co, ci], &wt),
                (&[ci, h, w], &x),
                &[co, h, w],
                parts,
            );
            assert_eq!((swapped, unswapped), (swap, false));
            swaps += usize::from(swapped);
            assert_eq!(
                image_first, weight_first,
                "{ci}→{co} {h}×{w}, {parts} shares"
            );
            for (i, (got, want)) in image_first.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(*got) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "{ci}→{co} {h}×{w}: element {i} is {got}, not {want}"
                );
            }
        }
    }
    assert_eq!(swaps, 12);
}

/// A weight packed as the right operand (`stow.packed`, as earlier builds
/// wrote every packed product) keeps the product unswapped, one packed as
/// the left operand (`stow.packed_left`) swaps it, whatever the shapes;
/// both give the bytes of the unpacked product, in 1 to 3 shares. The
/// left packing is refused where the output is not transposed.
#[test]
fn packed_weights_on_either_side_equal_the_unpacked_product() {
    use super::prepacked::{PACKED_ATTR, PACKED_LEFT_ATTR};
    for (ci, co, h, w, kc) in [
        (24, 144, 56, 56, 24),
        (300, 7, 2, 9, 256),
        (17, 40, 3, 11, 16),
        // A deep first depth block, then a shallow one (24 deep), which
        // the left-packed product walks row panel by row panel.
        (280, 85, 6, 50, 256),
        // At least twice as many output channels as positions: the
        // left-packed product's threads share its rows, not its columns.
        (64, 200, 4, 5, 64),
        (40, 97, 3, 3, 40),
    ] {
        let x: Vec<f32> = (0..ci * h * w).map(|i| value(i, 1)).collect();
        let wt: Vec<f32> = (0..co * ci).map(|i| value(i, 2)).collect();
        let shapes = ([ci, h, w], [co, ci], [co, h, w]);
        for parts in 1..=3 {
            let run = |packing| {
                einsum_with(
                    "ihw,oi->ohw",
                    packing,
                    (&shapes.0, &x),
                    (&shapes.1, &wt),
                    &shapes.2,
                    parts,
                )
            };
            // The unpacked product blocks its depth as the packed ones do
            // when kc is the usual block.
            let (plain, _) = run(None);
            let (right, right_swapped) = run(Some((PACKED_ATTR, kc)));
            let (left, left_swapped) = run(Some((PACKED_LEFT_ATTR, kc)));
            assert_eq!((right_swapped, left_swapped), (false, true));
            if kc as usize == ci.min(256) {
                assert_eq!(right, plain, "{ci}→{co}: right-packed");
                assert_eq!(left, plain, "{ci}→{co}: left-packed");
            }
            for (i, (r, l)) in right.iter().zip(&left).enumerate() {
                let terms = (0..ci).map(|k| {
                    f64::from(wt[(i / (h * w)) * ci + k]) * f64::from(x[k * h * w + i % (h * w)])
                });
                let want: f64 = terms.clone().sum();
                // f32 sums of many terms err in proportion to their
                // magnitudes, not to the (possibly cancelled) result.
                let scale: f64 = terms.map(f64::abs).sum();
                for got in [r, l] {
                    assert!(
                        (f64::from(*got) - want).abs() <= 1e-6 * (1.0 + scale),
                        "{ci}→{co}, {parts} shares: element {i} is {got}, not {want}"
                    );
                }
            }
        }
    }
    // An output whose contiguous axis is the weight's cannot run swapped.
    let op = Op {
        name: "product".into(),
        op_type: "EinSum".into(),
        attributes: vec![
            ("expr".to_string(), AttrValue::Text("ik,kj->ij".into())),
            (PACKED_LEFT_ATTR.to_string(), AttrValue::Int(8)),
        ],
        inputs: vec![],
        outputs: vec![],
    };
    let operand = |id, shape: &[usize], at| Operand {
        id,
        dtype: DType::F32,
        shape: shape.to_vec(),
        len: shape.iter().product(),
        loc: Loc::Arena(at),
    };
    let (ins, outs) = (
        vec![operand(0, &[5, 8], 0), operand(1, &[8, 7], 160)],
        vec![operand(2, &[5, 7], 384)],
    );
    assert!(prepare(&op, &ins, &outs).is_err());
}

/// One-row products (run without packing) equal the definition whether
/// the weight is stored transposed (each output a dot product of two
/// contiguous vectors) or not (rows of the
/// weight added in turn), for depths and widths on either side of the
/// vector width, in 1 to 3 shares.
#[test]
fn one_row_products_equal_the_definition() {
    for (k, n) in [
        (1, 1),
        (15, 3),
        (16, 4),
        (17, 5),
        (33, 7),
        (64, 9),
        (1280, 37),
    ] {
        let a: Vec<f32> = (0..k).map(|i| value(i, 3)).collect();
        let w: Vec<f32> = (0..n * k).map(|i| value(i, 4)).collect();
        for (expr, shape, at) in [
            (
                "mk,nk->mn",
                [n, k],
                (|j: usize, p: usize, k: usize, _n: usize| j * k + p)
                    as fn(usize, usize, usize, usize) -> usize,
            ),
            ("mk,kn->mn", [k, n], |j, p, _k, n| p * n + j),
        ] {
            let want: Vec<f64> = (0..n)
                .map(|j| {
                    (0..k)
                        .map(|p| f64::from(a[p]) * f64::from(w[at(j, p, k, n)]))
                        .sum()
                })
                .collect();
            for parts in 1..=3 {
                let (got, swapped) = einsum(expr, (&[1, k], &a), (&shape, &w), &[1, n], parts);
                assert!(!swapped);
                for (j, (got, want)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (f64::from(*got) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "{expr} k {k} n {n}, {parts} shares: output {j} is {got}, not {want}"
                    );
                }
            }
        }
    }
}

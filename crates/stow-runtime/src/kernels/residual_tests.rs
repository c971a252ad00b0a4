//! A residual `Add` merged into the convolution or product that feeds it
//! (`fuse::fuse_residuals`), then perhaps an activation: random shapes run
//! as separate steps and merged give the same bits.

use super::fuse::{fuse_activations, fuse_clamps, fuse_residuals};
use super::prepacked::{PACKED_ATTR, PACKED_LEFT_ATTR};
use super::testing::{below, value};
use super::*;
use alloc::string::{String, ToString};
use alloc::vec;
use core::cell::Cell;
use stow_bundle::{AttrValue, Op};

fn op(op_type: &str, attributes: Vec<(&str, AttrValue)>) -> Op {
    let mut attributes: Vec<(String, AttrValue)> = attributes
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    attributes.sort_by(|a, b| a.0.cmp(&b.0));
    Op {
        name: op_type.into(),
        op_type: op_type.into(),
        attributes,
        inputs: vec![],
        outputs: vec![],
    }
}

fn ints(v: &[usize]) -> AttrValue {
    AttrValue::Ints(v.iter().map(|&x| x as i64).collect())
}

fn text(s: &str) -> AttrValue {
    AttrValue::Text(s.into())
}

/// An f32 tensor at float `at` of the arena.
fn tensor(id: u32, shape: &[usize], at: usize) -> Operand<'static> {
    Operand {
        id,
        dtype: DType::F32,
        shape: shape.to_vec(),
        len: shape.iter().product(),
        loc: Loc::Arena(at * 4),
    }
}

fn weight(id: u32, bytes: &'static [u8]) -> Operand<'static> {
    Operand {
        id,
        dtype: DType::F32,
        shape: vec![1],
        len: 1,
        loc: Loc::Weight(bytes),
    }
}

fn step(op: &Op, inputs: Vec<Operand<'static>>, outputs: Vec<Operand<'static>>) -> Step<'static> {
    let (kernel, scratch) = prepare(op, &inputs, &outputs).expect("a kernel");
    Step {
        kernel,
        inputs,
        outputs,
        scratch,
        planned: None,
    }
}

/// Runs `steps` in `parts` shares over `arena`; the arena's bits after.
fn run(steps: &[Step<'_>], arena: &[f32], parts: usize) -> Vec<u32> {
    let mut arena = arena.to_vec();
    let most = steps.iter().map(|s| s.scratch).max().unwrap_or(0);
    let mut floats = vec![0f32; most];
    let scratch = Cell::from_mut(floats.as_mut_slice()).as_slice_of_cells();
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(arena.as_mut_slice());
    let views = Views::single(Cell::from_mut(bytes).as_slice_of_cells());
    for step in steps {
        for part in 0..parts {
            run_part(step, &views, scratch, part, parts).expect("runs");
        }
    }
    arena.iter().map(|v| v.to_bits()).collect()
}

/// Whether `step` runs (one share) over a copy of `arena`.
fn runs(step: &Step<'_>, arena: &[f32]) -> bool {
    let mut arena = arena.to_vec();
    let mut floats = vec![0f32; step.scratch];
    let scratch = Cell::from_mut(floats.as_mut_slice()).as_slice_of_cells();
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(arena.as_mut_slice());
    let views = Views::single(Cell::from_mut(bytes).as_slice_of_cells());
    run_part(step, &views, scratch, 0, 1).is_ok()
}

/// The product step of a case and its output's shape.
struct Product {
    step: Step<'static>,
    out: Vec<usize>,
}

/// A random convolution (1×1 to 3×3, strides 1–2, groups, a bias or
/// not, its kernel packed or not) or product (`EinSum`: plain, with a
/// packed left or right weight, batched, one row), its operands from
/// float 0 of `arena`.
fn product(below: &mut impl FnMut(usize) -> usize, arena: &mut Vec<f32>) -> Product {
    let put = |arena: &mut Vec<f32>, len: usize, seed: usize| {
        let at = arena.len();
        arena.extend((0..len).map(|i| value(i, seed)));
        at
    };
    if below(2) == 0 {
        let (batch, mut groups) = (1 + below(2), 1 + below(2));
        let (mut ipg, mut opg) = (1 + below(40), 2 + below(30));
        if below(8) == 0 {
            // Depthwise: its kernels finish whole planes, without a residual.
            (groups, ipg, opg) = (1 + below(20), 1, 1);
        }
        let k = 1 + 2 * below(2);
        let stride = 1 + below(2);
        let (h, w) = (1 + below(12), 1 + below(40));
        let pad = [below(k), below(k), below(k), below(k)];
        let oh = (h + pad[0] + pad[2]).saturating_sub(k) / stride + 1;
        let ow = (w + pad[1] + pad[3]).saturating_sub(k) / stride + 1;
        let x_shape = [batch, groups * ipg, h, w];
        let w_shape = [groups * opg, ipg, k, k];
        let out = vec![batch, groups * opg, oh, ow];
        let x_at = put(arena, x_shape.iter().product(), 1);
        let w_len: usize = w_shape.iter().product();
        let w_at = put(arena, w_len, 2);
        let mut inputs = vec![tensor(0, &x_shape, x_at), tensor(1, &w_shape, w_at)];
        if below(3) > 0 {
            let b_at = put(arena, groups * opg, 3);
            inputs.push(tensor(2, &[groups * opg], b_at));
        }
        let mut attributes = vec![
            ("data_format", text("NCHW")),
            ("kernel_shape", ints(&[k, k])),
            ("strides", ints(&[stride, stride])),
            ("dilations", ints(&[1, 1])),
            ("padding", text("explicit")),
            ("pads_before", ints(&pad[..2])),
            ("pads_after", ints(&pad[2..])),
            ("group", AttrValue::Int(groups as i64)),
            ("kernel_format", text("OIHW")),
        ];
        if below(2) == 0 && !(ipg == 1 && opg == 1) {
            let kc = [16, 64, 256][below(3)].min(ipg * k * k);
            attributes.push((PACKED_ATTR, AttrValue::Int(kc as i64)));
        }
        let conv = op("Conv", attributes);
        let step = step(&conv, inputs, vec![tensor(3, &out, 0)]);
        if let Kernel::Conv(_, Some(p), ..) = &step.kernel {
            let packed = p.pack(&arena[w_at..w_at + w_len]).expect("a permutation");
            arena[w_at..w_at + w_len].copy_from_slice(&packed);
        }
        return Product { step, out };
    }
    let (m, n, k) = (1 + below(40), 1 + below(70), 1 + below(300));
    let (expr, a_shape, b_shape, out, packing): (_, Vec<usize>, Vec<usize>, Vec<usize>, _) =
        match below(5) {
            0 => ("ik,kj->ij", vec![m, k], vec![k, n], vec![m, n], None),
            1 => ("ik,kj->ij", vec![1, k], vec![k, n], vec![1, n], None),
            2 => (
                "bik,bkj->bij",
                vec![2, m, k],
                vec![2, k, n],
                vec![2, m, n],
                None,
            ),
            // A 1×1 convolution as tract writes it, its weight the left operand.
            3 => (
                "ihw,oi->ohw",
                vec![k, 1, n.max(2)],
                vec![m.max(2), k],
                vec![m.max(2), 1, n.max(2)],
                Some(PACKED_LEFT_ATTR),
            ),
            _ => (
                "ik,kj->ij",
                vec![m.max(2), k],
                vec![k, n],
                vec![m.max(2), n],
                Some(PACKED_ATTR),
            ),
        };
    let a_at = put(arena, a_shape.iter().product(), 1);
    let b_len: usize = b_shape.iter().product();
    let b_at = put(arena, b_len, 2);
    let mut attributes = vec![("expr", text(expr))];
    if let Some(name) = packing {
        attributes.push((name, AttrValue::Int([16, 64, 256][below(3)].min(k) as i64)));
    }
    let einsum = op("EinSum", attributes);
    let inputs = vec![tensor(0, &a_shape, a_at), tensor(1, &b_shape, b_at)];
    let step = step(&einsum, inputs, vec![tensor(3, &out, 0)]);
    if let Kernel::MatMul(MatMul {
        packed: Some(p), ..
    }) = &step.kernel
    {
        let packed = p.pack(&arena[b_at..b_at + b_len]).expect("a permutation");
        arena[b_at..b_at + b_len].copy_from_slice(&packed);
    }
    Product { step, out }
}

fn merged_residual(step: &Step<'_>) -> bool {
    match &step.kernel {
        Kernel::Conv(_, _, _, residual) => *residual,
        Kernel::MatMul(mm) => mm.residual,
        _ => false,
    }
}

/// A product, then the `Add` of its output and a residual tensor (either
/// operand order; written over the product's output, or apart), then
/// perhaps a `Relu` or a clamp pair in place: merged, one step writes the
/// bits the separate steps write, in 1 to 3 shares; the merge happens
/// wherever it is allowed, and a residual the product would overwrite
/// (the `Add` written over it) is never merged.
#[test]
fn a_residual_merged_into_a_product_equals_the_steps() {
    static ZERO: [u8; 4] = 0f32.to_le_bytes();
    static HIGH: [u8; 4] = 0.75f32.to_le_bytes();
    let mut below = below(0x9e37_79b9_7f4a_7c15);
    let (mut merged_count, mut with_activation, mut packed_convs) = (0, 0, 0);
    let mut depthwise = 0;
    for case in 0..300 {
        // The product's operands first; its output at 0 is moved past them.
        let mut arena = Vec::new();
        let Product { mut step, out } = product(&mut below, &mut arena);
        let len: usize = out.iter().product();
        let y_at = arena.len();
        step.outputs[0].loc = Loc::Arena(4 * y_at);
        arena.extend((0..len).map(|i| value(i, 4)));
        let r_at = arena.len();
        arena.extend((0..len).map(|i| value(i, 5)));
        let apart = arena.len();
        arena.extend((0..len).map(|_| f32::NAN));
        // Where the `Add` writes: over the product's output, apart, or
        // over the residual (not mergeable: the product's partial sums
        // would overwrite it).
        let (z_at, mergeable) = [(y_at, true), (apart, true), (r_at, false)][below(3)];
        let (y, r) = (tensor(3, &out, y_at), tensor(4, &out, r_at));
        let inputs = if below(2) == 0 {
            vec![y, r]
        } else {
            vec![r, y]
        };
        let add = step_of("Add", inputs, tensor(5, &out, z_at));
        let mut steps = vec![step, add];
        let activation = below(3);
        let mut last = 5;
        if activation > 0 {
            let chain: &[(&str, &'static [u8])] = if activation == 1 {
                &[("Max", &ZERO)]
            } else {
                &[("Max", &ZERO), ("Min", &HIGH)]
            };
            for (name, c) in chain {
                let ins = vec![tensor(last, &out, z_at), weight(90 + last, c)];
                steps.push(step_of(name, ins, tensor(last + 1, &out, z_at)));
                last += 1;
            }
        }
        let packed_conv = matches!(&steps[0].kernel, Kernel::Conv(_, Some(_), ..));
        if matches!(&steps[0].kernel, Kernel::Conv(s, ..) if s.depthwise()) {
            depthwise += 1;
            // A depthwise convolution adds no residual: one marked so fails.
            let mut marked = steps[0].clone();
            if let Kernel::Conv(_, _, _, residual) = &mut marked.kernel {
                *residual = true;
            }
            marked.inputs.push(tensor(4, &out, r_at));
            assert!(!runs(&marked, &arena), "case {case}: depthwise residual");
        }
        let expect = mergeable
            && match &steps[0].kernel {
                Kernel::Conv(s, ..) => !s.depthwise(),
                Kernel::MatMul(mm) => mm.writes_apart(),
                _ => false,
            };
        let mut fused = steps.clone();
        fuse_clamps(&mut fused, &[last]);
        fuse_residuals(&mut fused, &[last]);
        fuse_activations(&mut fused, &[last]);
        assert_eq!(merged_residual(&fused[0]), expect, "case {case}");
        if expect {
            // A step marked as adding a residual fails without one, or
            // with one not laid out as its output, rather than run
            // without it.
            let mut missing = fused[0].clone();
            missing.inputs.truncate(2);
            assert!(!runs(&missing, &arena), "case {case}: residual missing");
            let mut short = fused[0].clone();
            let at = short.inputs.len() - 1;
            short.inputs[at].len -= 1;
            assert!(!runs(&short, &arena), "case {case}: residual too short");
            assert!(runs(&fused[0], &arena), "case {case}");
            merged_count += 1;
            packed_conv.then(|| packed_convs += 1);
            if activation > 0 {
                assert!(
                    fused[1..]
                        .iter()
                        .all(|s| matches!(s.kernel, Kernel::Nothing)),
                    "case {case}: the activation after the residual is merged too"
                );
                with_activation += 1;
            }
        }
        for parts in 1..=3 {
            let (want, got) = (run(&steps, &arena, parts), run(&fused, &arena, parts));
            let z = z_at..z_at + len;
            assert_eq!(got[z.clone()], want[z], "case {case}, {parts} shares");
        }
    }
    assert!(merged_count > 100, "{merged_count} merges");
    assert!(
        with_activation > 40,
        "{with_activation} merges with an activation"
    );
    assert!(
        packed_convs > 15,
        "{packed_convs} packed convolutions merged"
    );
    assert!(depthwise > 5, "{depthwise} depthwise convolutions");
}

fn step_of(name: &str, inputs: Vec<Operand<'static>>, output: Operand<'static>) -> Step<'static> {
    step(&op(name, vec![]), inputs, vec![output])
}

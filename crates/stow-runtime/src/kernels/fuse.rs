//! Steps merged at setup, where one pass over memory can do the work of
//! two and nothing else can tell.
//!
//! tract writes ONNX's `Clip` as two element-wise steps, `Max` with the
//! lower bound and then `Min` with the upper one (or the other way round),
//! each a full pass over the tensor; in mobilenet_v2 they took 9 % of the
//! run. When the first step's output is read by the second alone and is
//! not a graph output, the first step clamps straight into the second's
//! output and the second does nothing. The arithmetic is the two steps'
//! own, in their order, so the outputs are bit for bit the same.

use super::{BinOp, Kernel, Loc, Operand, Step};
use stow_bundle::DType;

/// The value of a one-element f32 weight.
fn scalar(o: &Operand<'_>) -> Option<f32> {
    match (o.dtype, o.len, o.loc) {
        (DType::F32, 1, Loc::Weight(bytes)) => {
            Some(f32::from_le_bytes(bytes.get(..4)?.try_into().ok()?))
        }
        _ => None,
    }
}

/// `Max` or `Min` of a whole f32 tensor with a constant: the bound and
/// whether it is a `Max`.
fn bound(step: &Step<'_>) -> Option<(f32, bool)> {
    let max = match step.kernel {
        Kernel::Binary(BinOp::Max, _) => true,
        Kernel::Binary(BinOp::Min, _) => false,
        _ => return None,
    };
    let (x, o) = (step.inputs.first()?, step.outputs.first()?);
    let same = x.dtype == DType::F32 && o.dtype == DType::F32 && x.len == o.len;
    (same && step.inputs.len() == 2 && step.outputs.len() == 1)
        .then(|| scalar(&step.inputs[1]))
        .flatten()
        .map(|c| (c, max))
}

/// Merges each `Max`/`Min` pair with constants into one
/// [`Kernel::Clamp`] step (see the module's note). `graph_outputs` are
/// the tensors the caller reads after a run.
pub(crate) fn fuse_clamps(steps: &mut [Step<'_>], graph_outputs: &[u32]) {
    let mut readers = alloc::collections::BTreeMap::<u32, usize>::new();
    for step in steps.iter() {
        for x in &step.inputs {
            *readers.entry(x.id).or_default() += 1;
        }
    }
    for i in 1..steps.len() {
        let (first, second) = (&steps[i - 1], &steps[i]);
        let (Some((a, a_is_max)), Some((b, b_is_max))) = (bound(first), bound(second)) else {
            continue;
        };
        let between = first.outputs[0].id;
        if a_is_max == b_is_max
            || second.inputs[0].id != between
            || readers.get(&between) != Some(&1)
            || graph_outputs.contains(&between)
        {
            continue;
        }
        let (lo, hi) = if a_is_max { (a, b) } else { (b, a) };
        let outputs = second.outputs.clone();
        steps[i - 1].kernel = Kernel::Clamp {
            lo,
            hi,
            max_first: a_is_max,
        };
        steps[i - 1].outputs = outputs;
        steps[i].kernel = Kernel::Nothing;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{prepare, run_part, Views};
    use alloc::string::ToString;
    use alloc::vec::Vec;
    use core::cell::Cell;
    use stow_bundle::Op;

    fn op(op_type: &str) -> Op {
        Op {
            name: op_type.to_string(),
            op_type: op_type.to_string(),
            attributes: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
        }
    }

    fn arena_operand(id: u32, at: usize, len: usize) -> Operand<'static> {
        Operand {
            id,
            dtype: DType::F32,
            shape: alloc::vec![len],
            len,
            loc: Loc::Arena(at),
        }
    }

    fn weight_operand(id: u32, bytes: &'static [u8]) -> Operand<'static> {
        Operand {
            id,
            dtype: DType::F32,
            shape: alloc::vec![1],
            len: 1,
            loc: Loc::Weight(bytes),
        }
    }

    /// `first` with constant `a` then `second` with `b`, x → y → z, z at
    /// `z_at` (in place over x when 0).
    fn steps(
        first: &str,
        a: &'static [u8],
        second: &str,
        b: &'static [u8],
        n: usize,
        z_at: usize,
    ) -> Vec<Step<'static>> {
        let make = |name: &str, x: Operand<'static>, c: Operand<'static>, o: Operand<'static>| {
            let (ins, outs) = (alloc::vec![x, c], alloc::vec![o]);
            let (kernel, scratch) = prepare(&op(name), &ins, &outs).unwrap();
            Step {
                kernel,
                inputs: ins,
                outputs: outs,
                scratch,
                planned: None,
            }
        };
        alloc::vec![
            make(
                first,
                arena_operand(0, 0, n),
                weight_operand(1, a),
                arena_operand(2, 0, n)
            ),
            make(
                second,
                arena_operand(2, 0, n),
                weight_operand(3, b),
                arena_operand(4, z_at, n)
            ),
        ]
    }

    fn run(steps: &[Step<'_>], x: &[f32], z_at: usize) -> Vec<u32> {
        let n = x.len();
        let arena: Vec<Cell<u8>> = (0..(z_at + 4 * n)).map(|_| Cell::new(0)).collect();
        for (i, v) in x.iter().enumerate() {
            for (j, b) in v.to_le_bytes().iter().enumerate() {
                arena[4 * i + j].set(*b);
            }
        }
        let views = Views::single(&arena);
        for step in steps {
            run_part(step, &views, &[], 0, 1).unwrap();
        }
        (0..n)
            .map(|i| {
                let at = z_at + 4 * i;
                u32::from_le_bytes(core::array::from_fn(|j| arena[at + j].get()))
            })
            .collect()
    }

    /// Both orders, crossed bounds, NaN and infinite inputs, a NaN bound,
    /// in place and not: the merged step writes the bytes the two steps
    /// write.
    #[test]
    fn a_merged_clamp_equals_its_two_steps() {
        static ZERO: [u8; 4] = 0f32.to_le_bytes();
        static SIX: [u8; 4] = 6f32.to_le_bytes();
        static NAN: [u8; 4] = f32::NAN.to_le_bytes();
        let x: Vec<f32> = (0..70)
            .map(|i| (i as f32 - 30.0) * 0.37)
            .chain([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0])
            .collect();
        let pairs: [(&str, &'static [u8], &str, &'static [u8]); 5] = [
            ("Max", &ZERO, "Min", &SIX),
            ("Min", &SIX, "Max", &ZERO),
            ("Max", &SIX, "Min", &ZERO),
            ("Min", &ZERO, "Max", &SIX),
            ("Max", &NAN, "Min", &SIX),
        ];
        for (first, a, second, b) in pairs {
            for z_at in [0, 4 * x.len()] {
                let plain = steps(first, a, second, b, x.len(), z_at);
                let mut merged = steps(first, a, second, b, x.len(), z_at);
                fuse_clamps(&mut merged, &[4]);
                assert!(
                    matches!(merged[0].kernel, Kernel::Clamp { .. }),
                    "{first} {second}"
                );
                assert!(matches!(merged[1].kernel, Kernel::Nothing));
                assert_eq!(
                    run(&merged, &x, z_at),
                    run(&plain, &x, z_at),
                    "{first} {second} at {z_at}"
                );
            }
        }
    }

    /// A middle tensor that a caller or a third step reads is kept.
    #[test]
    fn a_middle_tensor_read_elsewhere_is_not_merged() {
        static ZERO: [u8; 4] = 0f32.to_le_bytes();
        static SIX: [u8; 4] = 6f32.to_le_bytes();
        let mut s = steps("Max", &ZERO, "Min", &SIX, 8, 32);
        fuse_clamps(&mut s, &[2]);
        assert!(matches!(s[0].kernel, Kernel::Binary(..)));
        let mut s = steps("Max", &ZERO, "Min", &SIX, 8, 32);
        s.push(Step {
            kernel: Kernel::Nothing,
            inputs: alloc::vec![arena_operand(2, 0, 8)],
            outputs: alloc::vec![arena_operand(5, 64, 8)],
            scratch: 0,
            planned: None,
        });
        fuse_clamps(&mut s, &[]);
        assert!(matches!(s[0].kernel, Kernel::Binary(..)));
        // Two steps of the same kind are not a clamp.
        let mut s = steps("Max", &ZERO, "Max", &SIX, 8, 32);
        fuse_clamps(&mut s, &[]);
        assert!(matches!(s[0].kernel, Kernel::Binary(..)));
    }
}

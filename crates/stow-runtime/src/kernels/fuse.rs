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
//!
//! Then a clamp (or a lone `Max`/`Min` with a constant: `Relu`) whose
//! input a convolution or a matrix product has just written, for it
//! alone, is merged into that step: the product clamps each sum as it
//! completes, while the tile is in registers, and writes the clamp's
//! output. The clamp is applied to the finished sum, so again the bytes
//! are those of the two steps. `Sigmoid`, `Silu` and `HardSwish` steps
//! merge the same way (efficientnet_b0's 49 `Silu` steps each read a
//! convolution's output back from memory): the finish computes them with
//! the element-wise steps' own formulas, plain arithmetic that rustc
//! never contracts into fused multiply-adds, so the bytes are the same
//! whether the tile is finished in AVX2 registers or by the step.
//!
//! An int8 product whose i32 output only goes to f32 (a dynamically
//! quantized model's `MatMulInteger`, then `Cast`, `Mul` by the product
//! of the two scales, and often the `Add` of the layer's bias) writes
//! the f32 values itself: `f32(y)·scale`, then `+ bias[column]`, the
//! steps' own operations in their order, so the bytes are theirs. The
//! scale may be computed by a step of its own after the product (bert's
//! is the `Mul` of the input's dynamic scale and the weight's): the
//! product then multiplies the two values, which the plan keeps intact
//! from before the product up to that step. The middle tensors each sit
//! on the product's output bytes, which the plan reserves from the
//! product to the last step; the merged steps do nothing. In bert_base
//! int8 the three steps were 4 ms at one thread and 6 ms at two (they
//! split rows, the product columns).
//!
//! An `IsNan` whose mask only an `Iff` reads, choosing a constant where
//! the value is NaN and the value itself elsewhere, becomes one pass at
//! the `Iff`'s place that replaces NaN by the constant ([`Kernel::NanTo`]):
//! the same bits, without the mask's write and read.
//!
//! A merged step writes the later step's output while it reads its own
//! inputs. The plan placed that output for the later step, where the
//! first step's inputs and scratch may already be dead, so a merge is
//! made only when the output is where the first step's own output was
//! (the clamps run in place), or lies clear of everything the first step
//! reads.

use super::elementwise::Unary;
use super::gemm::{Clamp, Finish};
use super::qlinear::Dequantized;
use super::{BinOp, Kernel, Loc, Operand, Step};
use alloc::vec::Vec;
use core::ops::Range;
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

/// The clamp a step computes on its first input: a merged pair, or one
/// bound (the other one NaN, which leaves values as they are).
fn clamp_of(step: &Step<'_>) -> Option<Clamp> {
    if let Kernel::Clamp(k) = step.kernel {
        return Some(k);
    }
    let (c, max) = bound(step)?;
    Some(if max {
        Clamp {
            lo: c,
            hi: f32::NAN,
            max_first: true,
        }
    } else {
        Clamp {
            lo: f32::NAN,
            hi: c,
            max_first: false,
        }
    })
}

/// Bytes of an arena operand.
fn bytes(o: &Operand<'_>) -> Option<Range<usize>> {
    match o.loc {
        Loc::Arena(at) => Some(at..at + o.len * o.dtype.size_bytes() as usize),
        Loc::Weight(_) => None,
    }
}

fn overlap(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end && !a.is_empty() && !b.is_empty()
}

/// True when `step` may write `target` in place of its output: the same
/// bytes, or bytes that none of its arena inputs nor its planned scratch
/// touches; for an element-wise step (`elementwise`) also exactly the
/// bytes of an input, each element being read before it is written.
fn may_write(step: &Step<'_>, target: &Operand<'_>, elementwise: bool) -> bool {
    let (Some(t), Some(own)) = (bytes(target), step.outputs.first().and_then(bytes)) else {
        return false;
    };
    if t == own {
        return true;
    }
    let scratch = step
        .planned
        .map(|(at, threads)| at..at + threads * step.scratch * 4);
    let reads = step.inputs.iter().filter_map(bytes).chain(scratch);
    for r in reads {
        if (elementwise && r == t) || !overlap(&r, &t) {
            continue;
        }
        return false;
    }
    true
}

fn readers(steps: &[Step<'_>]) -> alloc::collections::BTreeMap<u32, usize> {
    let mut readers = alloc::collections::BTreeMap::<u32, usize>::new();
    for step in steps.iter() {
        for x in &step.inputs {
            *readers.entry(x.id).or_default() += 1;
        }
    }
    readers
}

/// True when `second` reads only `first`'s single output as its first
/// input, and nothing else reads it.
fn feeds_only(
    first: &Step<'_>,
    second: &Step<'_>,
    readers: &alloc::collections::BTreeMap<u32, usize>,
    graph_outputs: &[u32],
) -> bool {
    let ([out], Some(x)) = (first.outputs.as_slice(), second.inputs.first()) else {
        return false;
    };
    x.id == out.id && readers.get(&out.id) == Some(&1) && !graph_outputs.contains(&out.id)
}

/// Merges each `Max`/`Min` pair with constants into one
/// [`Kernel::Clamp`] step (see the module's note). `graph_outputs` are
/// the tensors the caller reads after a run.
pub(crate) fn fuse_clamps(steps: &mut [Step<'_>], graph_outputs: &[u32]) {
    let readers = readers(steps);
    for i in 1..steps.len() {
        let (first, second) = (&steps[i - 1], &steps[i]);
        let (Some((a, a_is_max)), Some((b, b_is_max))) = (bound(first), bound(second)) else {
            continue;
        };
        if a_is_max == b_is_max
            || !feeds_only(first, second, &readers, graph_outputs)
            || !may_write(first, &second.outputs[0], true)
        {
            continue;
        }
        let (lo, hi) = if a_is_max { (a, b) } else { (b, a) };
        let outputs = second.outputs.clone();
        steps[i - 1].kernel = Kernel::Clamp(Clamp {
            lo,
            hi,
            max_first: a_is_max,
        });
        steps[i - 1].outputs = outputs;
        steps[i].kernel = Kernel::Nothing;
    }
}

/// The finish of a step that can apply one to its f32 output as its sums
/// complete: a convolution, or a matrix product whose batch positions
/// write apart (positions that walk a depth axis add into the same
/// outputs, whose sums only the last one completes). A depthwise
/// convolution in place must write where it reads, so it takes a finish
/// only when the later step's output lies over its own (`stays`).
fn finish_of<'s>(step: &'s mut Step<'_>, stays: bool) -> Option<&'s mut Finish> {
    if step.outputs.first()?.dtype != DType::F32 {
        return None;
    }
    match &mut step.kernel {
        Kernel::Conv(_, _, finish, _) => Some(finish),
        Kernel::DepthwiseInPlace(_, finish) if stays => Some(finish),
        Kernel::MatMul(mm) => mm.writes_apart().then_some(&mut mm.finish),
        _ => None,
    }
}

/// The finish a step computes on its first f32 input, element by
/// element: a clamp, or one of the activations the finish computes with
/// the element-wise step's own formula.
fn activation_of(step: &Step<'_>) -> Option<Finish> {
    if let Some(clamp) = clamp_of(step) {
        return Some(Finish::Clamp(clamp));
    }
    let Kernel::Unary(f) = step.kernel else {
        return None;
    };
    let ([x], [o]) = (step.inputs.as_slice(), step.outputs.as_slice()) else {
        return None;
    };
    if x.dtype != DType::F32 || o.dtype != DType::F32 {
        return None;
    }
    match f {
        Unary::Sigmoid => Some(Finish::Sigmoid),
        Unary::Silu => Some(Finish::Silu),
        Unary::HardSwish => Some(Finish::HardSwish),
        _ => None,
    }
}

/// The residual flag of a step that can add a tensor laid out as its
/// output to each complete sum, before its finish: a convolution that is
/// not depthwise (the depthwise kernels finish whole planes) or a matrix
/// product whose batch positions write apart, with a depth to sum over
/// (an empty one leaves the output as its bias or zero, untouched by the
/// last block), no finish yet and no residual yet.
fn residual_of<'s>(step: &'s mut Step<'_>) -> Option<&'s mut bool> {
    if step.outputs.len() != 1 || step.outputs[0].dtype != DType::F32 {
        return None;
    }
    match &mut step.kernel {
        Kernel::Conv(s, _, Finish::Keep, residual) if !s.depthwise() && s.k() > 0 => Some(residual),
        Kernel::MatMul(mm) if mm.finish == Finish::Keep && mm.writes_apart() && mm.mnk[2] > 0 => {
            Some(&mut mm.residual)
        }
        _ => None,
    }
    .filter(|residual| !**residual)
}

/// Merges each `Add` of two f32 tensors of one layout, one of them a
/// convolution's or product's output read by it alone (a residual
/// connection: resnet's blocks end in one), into that step: the product
/// adds the other tensor to each sum as it completes, while the tile is
/// in registers' reach, and writes the `Add`'s output. The product's sum
/// plus the residual is the `Add`'s own addition (the order of its two
/// operands does not change a bit), so the bytes are the two steps'. The
/// residual must stay intact while the product runs: clear of its output,
/// its scratch and the `Add`'s output (the product stores partial sums
/// there between depth blocks).
pub(crate) fn fuse_residuals(steps: &mut [Step<'_>], graph_outputs: &[u32]) {
    let readers = readers(steps);
    for i in 1..steps.len() {
        let (first, second) = (&steps[i - 1], &steps[i]);
        let Kernel::Binary(BinOp::Add, walk) = &second.kernel else {
            continue;
        };
        let ([own], [a, b], [o]) = (
            first.outputs.as_slice(),
            second.inputs.as_slice(),
            second.outputs.as_slice(),
        ) else {
            continue;
        };
        let r = if a.id == own.id && b.id != own.id {
            b
        } else if b.id == own.id && a.id != own.id {
            a
        } else {
            continue;
        };
        let one_layout = [own, r, o]
            .iter()
            .all(|x| x.dtype == DType::F32 && x.len == o.len)
            && walk.strides.iter().all(|s| s[0] == s[1] && s[1] == s[2]);
        let Some(r_bytes) = bytes(r) else {
            continue;
        };
        let scratch = first
            .planned
            .map(|(at, threads)| at..at + threads * first.scratch * 4);
        let clear = [bytes(own), bytes(o), scratch]
            .iter()
            .flatten()
            .all(|w| !overlap(w, &r_bytes));
        if !one_layout
            || !clear
            || readers.get(&own.id) != Some(&1)
            || graph_outputs.contains(&own.id)
            || !may_write(first, o, false)
        {
            continue;
        }
        let (r, outputs) = (r.clone(), second.outputs.clone());
        let Some(residual) = residual_of(&mut steps[i - 1]) else {
            continue;
        };
        *residual = true;
        steps[i - 1].inputs.push(r);
        steps[i - 1].outputs = outputs;
        steps[i].kernel = Kernel::Nothing;
    }
}

/// Merges each clamp (after [`fuse_clamps`]), lone `Max`/`Min` with a
/// constant, `Sigmoid`, `Silu` or `HardSwish` into the convolution or
/// product that feeds it (see the module's note), past the steps merged
/// away before (a residual `Add` between the product and a `Relu`).
pub(crate) fn fuse_activations(steps: &mut [Step<'_>], graph_outputs: &[u32]) {
    let readers = readers(steps);
    for i in 1..steps.len() {
        let Some(activation) = activation_of(&steps[i]) else {
            continue;
        };
        let Some(p) = (0..i)
            .rev()
            .find(|&p| !matches!(steps[p].kernel, Kernel::Nothing))
        else {
            continue;
        };
        let (first, second) = (&steps[p], &steps[i]);
        let x = &second.inputs[0];
        if !feeds_only(first, second, &readers, graph_outputs)
            || x.len != second.outputs[0].len
            || !may_write(first, &second.outputs[0], false)
        {
            continue;
        }
        let stays = bytes(&second.outputs[0]) == first.outputs.first().and_then(bytes);
        let outputs = second.outputs.clone();
        let Some(finish) = finish_of(&mut steps[p], stays) else {
            continue;
        };
        if *finish != Finish::Keep {
            continue;
        }
        *finish = activation;
        steps[p].outputs = outputs;
        steps[i].kernel = Kernel::Nothing;
    }
}

/// The bytes `step` writes: its outputs and its planned scratch.
fn written<'s>(step: &'s Step<'_>) -> impl Iterator<Item = Range<usize>> + 's {
    let scratch = step
        .planned
        .map(|(at, threads)| at..at + threads * step.scratch * 4);
    step.outputs.iter().filter_map(bytes).chain(scratch)
}

/// True when one-element f32 operand `x`, read while step `p` runs, has
/// the value step `m` reads: a weight, or arena bytes that no step from
/// `p` up to `m` writes (then they held it before `p`).
fn steady(steps: &[Step<'_>], p: usize, m: usize, x: &Operand<'_>) -> bool {
    if x.dtype != DType::F32 || x.len != 1 {
        return false;
    }
    let Some(r) = bytes(x) else {
        return true;
    };
    steps[p..m]
        .iter()
        .filter(|s| !matches!(s.kernel, Kernel::Nothing))
        .all(|s| written(s).all(|w| !overlap(&w, &r)))
}

/// The factors of the scale `s` step `m` multiplies by, as values
/// readable while step `p` runs: `s` itself, or the two one-element
/// operands of the one step between them that computes it (`Mul`).
type Factors<'b> = (Operand<'b>, Option<Operand<'b>>);

fn scale_factors<'b>(
    steps: &[Step<'b>],
    p: usize,
    m: usize,
    s: &Operand<'b>,
) -> Option<Factors<'b>> {
    if steady(steps, p, m, s) {
        return Some((s.clone(), None));
    }
    let (r, len) = (bytes(s)?, s.len);
    let mut writers = (p + 1..m).filter(|&i| {
        !matches!(steps[i].kernel, Kernel::Nothing) && written(&steps[i]).any(|w| overlap(&w, &r))
    });
    let (w, None) = (writers.next()?, writers.next()) else {
        return None;
    };
    let q = &steps[w];
    let ([x, y], [o]) = (q.inputs.as_slice(), q.outputs.as_slice()) else {
        return None;
    };
    let product = matches!(q.kernel, Kernel::Binary(BinOp::Mul, _))
        && o.dtype == DType::F32
        && o.len == len
        && bytes(o) == Some(r)
        && steady(steps, p, w, x)
        && steady(steps, p, w, y);
    product.then(|| (x.clone(), Some(y.clone())))
}

/// What [`fuse_dequantized`] merges into the product at step `p`.
struct Dequantizing<'b> {
    /// The merged steps.
    merged: Vec<usize>,
    scale: Factors<'b>,
    /// The bias and whether the `Add` had it first.
    bias: Option<(Operand<'b>, bool)>,
    /// The last merged step's output, which the product writes.
    out: Operand<'b>,
}

/// The one step after `from` that reads tensor `id`, if nothing else
/// (nor the caller) does.
fn only_reader(
    steps: &[Step<'_>],
    from: usize,
    id: u32,
    readers: &alloc::collections::BTreeMap<u32, usize>,
    graph_outputs: &[u32],
) -> Option<usize> {
    if readers.get(&id) != Some(&1) || graph_outputs.contains(&id) {
        return None;
    }
    (from + 1..steps.len()).find(|&i| steps[i].inputs.iter().any(|x| x.id == id))
}

/// The `Cast` to f32, the `Mul` by a scale and the `Add` of a bias per
/// column (optional) after the i32 product at step `p`, each reading the
/// one before alone and writing over its bytes.
fn dequantizing<'b>(
    steps: &[Step<'b>],
    p: usize,
    readers: &alloc::collections::BTreeMap<u32, usize>,
    graph_outputs: &[u32],
) -> Option<Dequantizing<'b>> {
    let [y] = steps[p].outputs.as_slice() else {
        return None;
    };
    let place = bytes(y)?;
    let same = |o: &Operand<'_>| {
        o.dtype == DType::F32 && o.len == y.len && bytes(o).as_ref() == Some(&place)
    };
    let c = only_reader(steps, p, y.id, readers, graph_outputs)?;
    let cast = &steps[c];
    let ([x], [xc]) = (cast.inputs.as_slice(), cast.outputs.as_slice()) else {
        return None;
    };
    if !matches!(cast.kernel, Kernel::Cast) || x.id != y.id || !same(xc) {
        return None;
    }
    let m = only_reader(steps, c, xc.id, readers, graph_outputs)?;
    let mul = &steps[m];
    let ([a, b], [xm]) = (mul.inputs.as_slice(), mul.outputs.as_slice()) else {
        return None;
    };
    let s = match (a.id == xc.id, b.id == xc.id) {
        (true, false) => b,
        (false, true) => a,
        _ => return None,
    };
    if !matches!(mul.kernel, Kernel::Binary(BinOp::Mul, _)) || !same(xm) {
        return None;
    }
    let scale = scale_factors(steps, p, m, s)?;
    let mut found = Dequantizing {
        merged: alloc::vec![c, m],
        scale,
        bias: None,
        out: xm.clone(),
    };
    let Some(add) = only_reader(steps, m, xm.id, readers, graph_outputs) else {
        return Some(found);
    };
    let step = &steps[add];
    let ([a, b], [o]) = (step.inputs.as_slice(), step.outputs.as_slice()) else {
        return Some(found);
    };
    let (bias, first) = match (a.id == xm.id, b.id == xm.id) {
        (true, false) => (b, false),
        (false, true) => (a, true),
        _ => return Some(found),
    };
    let columns = xm.shape.last().copied().unwrap_or(1);
    let per_column = matches!(bias.loc, Loc::Weight(_))
        && bias.dtype == DType::F32
        && bias.len == columns
        && bias.shape.iter().rev().skip(1).all(|&d| d == 1)
        && bias.shape.len() <= xm.shape.len();
    if matches!(step.kernel, Kernel::Binary(BinOp::Add, _))
        && per_column
        && same(o)
        && o.shape == xm.shape
    {
        found.merged.push(add);
        found.bias = Some((bias.clone(), first));
        found.out = o.clone();
    }
    Some(found)
}

/// Merges the `Cast`, `Mul` and `Add` that turn an int8 product's i32
/// output into f32 into the product (see the module's note).
pub(crate) fn fuse_dequantized<'b>(steps: &mut [Step<'b>], graph_outputs: &[u32]) {
    let readers = readers(steps);
    for p in 0..steps.len() {
        if !matches!(&steps[p].kernel, Kernel::QProduct(q) if q.gives_i32()) {
            continue;
        }
        let Some(found) = dequantizing(steps, p, &readers, graph_outputs) else {
            continue;
        };
        let step = &mut steps[p];
        let mut take = |x: Operand<'b>| {
            step.inputs.push(x);
            step.inputs.len() - 1
        };
        let (s0, s1) = found.scale;
        let scale = (take(s0), s1.map(&mut take));
        let bias = found.bias.map(|(b, first)| (take(b), first));
        step.outputs[0] = found.out;
        if let Kernel::QProduct(q) = &mut step.kernel {
            q.dequantize(Dequantized { scale, bias });
        }
        for i in found.merged {
            steps[i].kernel = Kernel::Nothing;
        }
    }
}

/// Merges each f32 `IsNan` whose mask only an `Iff` reads, choosing a
/// one-element weight where the value is NaN and the value itself
/// elsewhere (bert's attention probabilities), into that `Iff`: one pass
/// that replaces NaN by the constant, at the `Iff`'s place, where the
/// value is still held (the `Iff` reads it); the bool mask is never
/// written.
pub(crate) fn fuse_nan_selects(steps: &mut [Step<'_>], graph_outputs: &[u32]) {
    let readers = readers(steps);
    for i in 0..steps.len() {
        let ([x], [mask]) = (steps[i].inputs.as_slice(), steps[i].outputs.as_slice()) else {
            continue;
        };
        if !matches!(steps[i].kernel, Kernel::IsNan) || x.dtype != DType::F32 {
            continue;
        }
        let (x, mask) = (x.clone(), mask.id);
        let Some(j) = only_reader(steps, i, mask, &readers, graph_outputs) else {
            continue;
        };
        let select = &steps[j];
        let ([cond, c, y], [o]) = (select.inputs.as_slice(), select.outputs.as_slice()) else {
            continue;
        };
        let Some(c) = scalar(c) else {
            continue;
        };
        let same = y.id == x.id && o.dtype == DType::F32 && o.len == x.len && o.shape == x.shape;
        if !matches!(select.kernel, Kernel::Select(_)) || cond.id != mask || !same {
            continue;
        }
        steps[j].kernel = Kernel::NanTo(c);
        steps[j].inputs = alloc::vec![x];
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
                    matches!(merged[0].kernel, Kernel::Clamp(_)),
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

    fn einsum_op(expr: &str) -> Op {
        Op {
            attributes: alloc::vec![(
                "expr".to_string(),
                stow_bundle::AttrValue::Text(expr.into())
            )],
            ..op("EinSum")
        }
    }

    fn shaped(id: u32, shape: &[usize], at: usize) -> Operand<'static> {
        Operand {
            shape: shape.to_vec(),
            ..arena_operand(id, at, shape.iter().product())
        }
    }

    fn prepared(op: &Op, ins: Vec<Operand<'static>>, outs: Vec<Operand<'static>>) -> Step<'static> {
        let (kernel, scratch) = prepare(op, &ins, &outs).unwrap();
        Step {
            kernel,
            inputs: ins,
            outputs: outs,
            scratch,
            planned: None,
        }
    }

    /// Runs `steps` in `parts` shares on an arena of `floats` holding
    /// `init` from 0; the arena's bits afterwards.
    fn run_shares(steps: &[Step<'_>], init: &[f32], floats: usize, parts: usize) -> Vec<u32> {
        let arena: Vec<Cell<u8>> = (0..4 * floats).map(|_| Cell::new(0)).collect();
        for (i, v) in init.iter().enumerate() {
            for (j, b) in v.to_le_bytes().iter().enumerate() {
                arena[4 * i + j].set(*b);
            }
        }
        let views = Views::single(&arena);
        let most = steps.iter().map(|s| s.scratch).max().unwrap_or(0);
        let scratch: Vec<Cell<f32>> = (0..most).map(|_| Cell::new(0.0)).collect();
        for step in steps {
            for part in 0..parts {
                run_part(step, &views, &scratch, part, parts).unwrap();
            }
        }
        (0..floats)
            .map(|i| u32::from_le_bytes(core::array::from_fn(|j| arena[4 * i + j].get())))
            .collect()
    }

    /// A product then a clamp pair, a lone `Max` or `Min`, or a `Sigmoid`,
    /// `Silu` or `HardSwish` step, its output in place or elsewhere:
    /// merged, the product writes the bytes the steps write apart (1 to 3
    /// shares; a one-row product, a transposed one, a batch). An output
    /// over the product's input is not merged, and neither is a product
    /// whose batch adds into the same outputs.
    #[test]
    fn a_clamp_merged_into_a_product_equals_the_steps() {
        static ZERO: [u8; 4] = 0f32.to_le_bytes();
        static HALF: [u8; 4] = 0.5f32.to_le_bytes();
        // (expr, a shape, b shape, out shape, merges)
        type Case = (
            &'static str,
            &'static [usize],
            &'static [usize],
            &'static [usize],
            bool,
        );
        let cases: [Case; 5] = [
            ("ik,kj->ij", &[13, 40], &[40, 37], &[13, 37], true),
            ("ik,kj->ij", &[1, 300], &[300, 21], &[1, 21], true),
            ("ihw,oi->ohw", &[24, 9, 9], &[5, 24], &[5, 9, 9], true),
            ("bik,bkj->bij", &[3, 7, 20], &[3, 20, 18], &[3, 7, 18], true),
            ("bik,bkj->ij", &[3, 7, 20], &[3, 20, 18], &[7, 18], false),
        ];
        for (expr, sa, sb, so, merges) in cases {
            let (na, nb, no) = [sa, sb, so].map(|s| s.iter().product::<usize>()).into();
            let init: Vec<f32> = (0..na + nb)
                .map(|i| ((i * 2_654_435_761) % 1000) as f32 / 500.0 - 1.0)
                .collect();
            let y_at = 4 * (na + nb);
            let far = y_at + 4 * no;
            // Where the clamp writes: over the product's output, apart,
            // over the product's first input.
            for (z_at, safe) in [(y_at, true), (far, true), (0, false)] {
                // A step without a constant is a unary one.
                let chains: [&[(&str, &'static [u8])]; 6] = [
                    &[("Max", &ZERO), ("Min", &HALF)],
                    &[("Max", &ZERO)],
                    &[("Min", &ZERO)],
                    &[("Sigmoid", &[])],
                    &[("Silu", &[])],
                    &[("HardSwish", &[])],
                ];
                for chain in chains {
                    let mut steps = alloc::vec![prepared(
                        &einsum_op(expr),
                        alloc::vec![shaped(0, sa, 0), shaped(1, sb, 4 * na)],
                        alloc::vec![shaped(2, so, y_at)],
                    )];
                    let mut id = 2;
                    for (k, (name, c)) in chain.iter().enumerate() {
                        let at = if k + 1 == chain.len() { z_at } else { y_at };
                        let mut ins = alloc::vec![shaped(id, so, y_at)];
                        if !c.is_empty() {
                            ins.push(weight_operand(90 + id, c));
                        }
                        steps.push(prepared(
                            &op(name),
                            ins,
                            alloc::vec![shaped(id + 1, so, at)],
                        ));
                        id += 1;
                    }
                    if !safe {
                        // Apart, these steps would be planned differently;
                        // only the merge decision is checked.
                        let mut merged = steps.clone();
                        fuse_clamps(&mut merged, &[id]);
                        fuse_activations(&mut merged, &[id]);
                        assert!(
                            matches!(&merged[0].kernel, Kernel::MatMul(mm) if mm.finish == Finish::Keep),
                            "{expr}: merged over its own input"
                        );
                        continue;
                    }
                    for parts in 1..=3 {
                        let mut merged = steps.clone();
                        fuse_clamps(&mut merged, &[id]);
                        fuse_activations(&mut merged, &[id]);
                        let fused = matches!(&merged[0].kernel, Kernel::MatMul(mm) if mm.finish != Finish::Keep);
                        assert_eq!(fused, merges, "{expr} {chain:?}");
                        let floats = far / 4 + no;
                        let (want, got) = (
                            run_shares(&steps, &init, floats, parts),
                            run_shares(&merged, &init, floats, parts),
                        );
                        let z = z_at / 4..z_at / 4 + no;
                        assert_eq!(
                            got[z.clone()],
                            want[z.clone()],
                            "{expr} {chain:?} at {z_at}, {parts} shares"
                        );
                        let clamps = chain[0].1.len() == 4;
                        assert!(!clamps || want[z].contains(&0), "{expr}: the clamp bites");
                    }
                }
            }
        }
    }

    fn typed_operand(
        id: u32,
        dtype: DType,
        shape: &[usize],
        loc: Loc<'static>,
    ) -> Operand<'static> {
        Operand {
            id,
            dtype,
            shape: shape.to_vec(),
            len: shape.iter().product(),
            loc,
        }
    }

    fn leaked(bytes: Vec<u8>) -> Loc<'static> {
        Loc::Weight(alloc::boxed::Box::leak(bytes.into_boxed_slice()))
    }

    /// An int8 product (MatMulInteger's i32 output), the `Cast` to f32,
    /// a step computing the scale from a runtime value and a weight, the
    /// `Mul` by it (either operand order) and the `Add` of a bias per
    /// column (either order, or none): merged, the product writes the
    /// bytes the steps write (1 to 3 shares, sums past f32's 2²⁴). Not
    /// merged: a chain that leaves the product's bytes, or whose scale
    /// comes from a step other than a product of settled values.
    #[test]
    fn an_int8_product_merged_with_its_dequantizing_steps_equals_the_steps() {
        let mut seed = 0x9e37_79b9_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for case in 0..24 {
            // Every fourth case sums to about −2²⁴·1.2, where f32 rounds.
            let extreme = case % 4 == 3;
            let k = if extreme { 600 } else { [4, 37, 300][case % 3] };
            let (m, n) = (1 + case % 5 * 7, [1, 16, 45][case / 3 % 3]);
            let mul_first = case % 2 == 1;
            let bias = [None, Some(false), Some(true)][case / 2 % 3];
            // Arena: a, the runtime scale factor, the scale, the output.
            let (a_at, sa_at, s_at, y_at) = (
                0,
                4 * (m * k).div_ceil(4),
                4 * (m * k).div_ceil(4) + 4,
                4 * (m * k).div_ceil(4) + 8,
            );
            let a: Vec<u8> = (0..m * k)
                .map(|_| if extreme { 255 } else { next() as u8 })
                .collect();
            let b: Vec<u8> = (0..k * n)
                .map(|_| if extreme { 0x80 } else { next() as u8 })
                .collect();
            let (a0, b0) = if extreme {
                (0, 0)
            } else {
                (next() as u8, (next() % 7) as u8)
            };
            let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
            let scalar = |id, dtype, bytes: Vec<u8>| typed_operand(id, dtype, &[], leaked(bytes));
            let product = {
                let ins = alloc::vec![
                    typed_operand(0, DType::U8, &[m, k], Loc::Arena(a_at)),
                    typed_operand(1, DType::I8, &[k, n], leaked(b.clone())),
                    scalar(2, DType::I32, 0i32.to_le_bytes().to_vec()),
                    scalar(3, DType::U8, alloc::vec![a0]),
                    scalar(4, DType::F32, f32s(&[1.0])),
                    scalar(5, DType::I8, alloc::vec![b0]),
                    scalar(6, DType::F32, f32s(&[1.0])),
                    scalar(7, DType::I32, 0i32.to_le_bytes().to_vec()),
                    scalar(8, DType::F32, f32s(&[1.0])),
                ];
                let op = Op {
                    attributes: alloc::vec![
                        (
                            "expr".to_string(),
                            stow_bundle::AttrValue::Text("mk,kn,,,,,,,->mn".into())
                        ),
                        (
                            "q_params".to_string(),
                            stow_bundle::AttrValue::Text("I32".into())
                        ),
                    ],
                    ..op("EinSum")
                };
                let outs = alloc::vec![typed_operand(10, DType::I32, &[m, n], Loc::Arena(y_at))];
                prepared(&op, ins, outs)
            };
            let y = |id, dtype| typed_operand(id, dtype, &[m, n], Loc::Arena(y_at));
            let cast = prepared(
                &op("Cast"),
                alloc::vec![y(10, DType::I32)],
                alloc::vec![y(11, DType::F32)],
            );
            let sa = typed_operand(20, DType::F32, &[], Loc::Arena(sa_at));
            let sb = scalar(21, DType::F32, f32s(&[0.37]));
            let s = typed_operand(22, DType::F32, &[1, 1], Loc::Arena(s_at));
            let scale = prepared(
                &op("Mul"),
                alloc::vec![sa.clone(), sb],
                alloc::vec![s.clone()],
            );
            let mul_ins = if mul_first {
                alloc::vec![s, y(11, DType::F32)]
            } else {
                alloc::vec![y(11, DType::F32), s]
            };
            let mul = prepared(&op("Mul"), mul_ins, alloc::vec![y(12, DType::F32)]);
            let mut steps = alloc::vec![product, cast, scale, mul];
            if let Some(first) = bias {
                let values: Vec<f32> = (0..n)
                    .map(|_| (next() % 2001) as f32 / 7.0 - 140.0)
                    .collect();
                let w = typed_operand(30, DType::F32, &[n], leaked(f32s(&values)));
                let ins = if first {
                    alloc::vec![w, y(12, DType::F32)]
                } else {
                    alloc::vec![y(12, DType::F32), w]
                };
                steps.push(prepared(&op("Add"), ins, alloc::vec![y(13, DType::F32)]));
            }
            let last = steps.last().unwrap().outputs[0].id;
            // a's bytes and a scale factor large enough that some sums
            // round in f32.
            let floats = y_at / 4 + m * n;
            let mut init = alloc::vec![0f32; floats];
            let mut a_bytes = a.clone();
            a_bytes.resize(sa_at, 0);
            for (i, w) in a_bytes.chunks_exact(4).enumerate() {
                init[i] = f32::from_le_bytes(w.try_into().unwrap());
            }
            init[sa_at / 4] = [3.1e-3f32, 1.0, 0.0][case % 3];
            let mut merged = steps.clone();
            fuse_dequantized(&mut merged, &[last]);
            assert!(
                matches!(merged[1].kernel, Kernel::Nothing)
                    && matches!(merged[3].kernel, Kernel::Nothing),
                "case {case}: not merged"
            );
            assert_eq!(merged[0].outputs[0].id, last);
            for parts in 1..=3 {
                let (want, got) = (
                    run_shares(&steps, &init, floats, parts),
                    run_shares(&merged, &init, floats, parts),
                );
                let z = y_at / 4..floats;
                assert_eq!(
                    got[z.clone()],
                    want[z],
                    "case {case} ({m}×{k}×{n}), {parts} shares"
                );
            }
            // The scale computed by an addition: not merged.
            let mut other = steps.clone();
            other[2] = prepared(
                &op("Add"),
                other[2].inputs.clone(),
                other[2].outputs.clone(),
            );
            fuse_dequantized(&mut other, &[last]);
            assert!(matches!(other[1].kernel, Kernel::Cast), "case {case}");
            // The scale factor written after the product: not merged.
            let mut late = steps.clone();
            late.insert(
                1,
                prepared(
                    &op("Max"),
                    alloc::vec![sa.clone(), sa.clone()],
                    alloc::vec![sa.clone()],
                ),
            );
            fuse_dequantized(&mut late, &[last]);
            assert!(matches!(late[2].kernel, Kernel::Cast), "case {case}");
        }
    }

    /// `IsNan` then `Iff(mask, c, x)`: merged, one pass writes the bytes
    /// the two steps write (NaNs of several payloads, infinities, signed
    /// zeros; 1 to 3 shares; apart or over x). Not merged: a mask read
    /// elsewhere or kept, the branches the other way round.
    #[test]
    fn a_nan_select_merged_equals_its_two_steps() {
        static C: [u8; 4] = (-0.0f32).to_le_bytes();
        let n = 70_000;
        let x: Vec<f32> = (0..n)
            .map(|i| match i % 11 {
                0 => f32::NAN,
                1 => f32::from_bits(0xffc0_1234),
                2 => f32::INFINITY,
                3 => -0.0,
                _ => (i as f32 - 30_000.0) * 0.37,
            })
            .collect();
        let shape = [7, n / 7];
        let mask = |at: usize| Operand {
            dtype: DType::Bool,
            ..shaped(1, &shape, at)
        };
        let build = |out_at: usize, swapped: bool| {
            let is_nan = prepared(
                &op("IsNan"),
                alloc::vec![shaped(0, &shape, 0)],
                alloc::vec![mask(8 * n)],
            );
            let (c, y) = (weight_operand(2, &C), shaped(0, &shape, 0));
            let branches = if swapped { [y, c] } else { [c, y] };
            let [a, b] = branches;
            let select = prepared(
                &op("Iff"),
                alloc::vec![mask(8 * n), a, b],
                alloc::vec![shaped(3, &shape, out_at)],
            );
            alloc::vec![is_nan, select]
        };
        let floats = 4 * n;
        for out_at in [0, 4 * n] {
            let steps = build(out_at, false);
            let mut merged = steps.clone();
            fuse_nan_selects(&mut merged, &[3]);
            assert!(matches!(merged[0].kernel, Kernel::Nothing));
            assert!(
                matches!(merged[1].kernel, Kernel::NanTo(c) if c.to_bits() == (-0.0f32).to_bits())
            );
            for parts in 1..=3 {
                let (want, got) = (
                    run_shares(&steps, &x, floats, parts),
                    run_shares(&merged, &x, floats, parts),
                );
                let z = out_at / 4..out_at / 4 + n;
                assert_eq!(got[z.clone()], want[z], "at {out_at}, {parts} shares");
            }
        }
        let mut kept = build(4 * n, false);
        fuse_nan_selects(&mut kept, &[1, 3]);
        assert!(matches!(kept[0].kernel, Kernel::IsNan));
        let mut swapped = build(4 * n, true);
        fuse_nan_selects(&mut swapped, &[3]);
        assert!(matches!(swapped[1].kernel, Kernel::Select(_)));
    }
}

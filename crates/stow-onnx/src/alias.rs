//! Sharing bytes beyond lifetimes: zero-copy views, in-place element-wise
//! operators and concats done in place. Each tensor may alias another one;
//! aliased tensors form one buffer for the planner. The exact conditions are
//! in `docs/REUSE.md`.
//!
//! - **View**: a reshape-like op (tract's `AxisOp` Add, Rm or Reshape)
//!   produces the same bytes with a new shape. Its output joins its input's
//!   buffer. Ops that move data (`AxisOp::Move`, transposes) are not views.
//! - **In place**: an element-wise unary or binary op (float, or a
//!   quantized `QLinearAdd`/`QLinearMul`) writes its output over
//!   an input when the input's whole buffer is dead after this step (no
//!   member of it is read later, or, with concurrent branches, every other
//!   read of it is an ancestor of this step), the input has the output's
//!   element type and byte size, and the buffer holds no weight, no graph
//!   output and — unless `reuse_inputs` is set — no graph input.
//! - **Depthwise in place**: a float depthwise convolution (one input and
//!   one output channel per group, channels first) writes its output over
//!   its input under the same conditions as an in-place element-wise op,
//!   except that the output may be smaller than the input: the kernel
//!   writes each output plane, through a one-plane temporary, only over
//!   input planes it has already read (`docs/REUSE.md` gives the proof).
//! - **Concat slice**: a concat along its outermost non-unit axis is a row of
//!   contiguous slices; each input's buffer moves into its slice of the
//!   output's buffer so that its producer writes there and the concat copies
//!   nothing. Accepted only when every byte any member of the merged buffer
//!   reads still holds the value it expects (checked by [`group_is_safe`])
//!   and the peak of live bytes does not grow.

use crate::dag::{Event, Schedule, StepDag, Usage};
use crate::graph::{ModelGraph, TensorRole};
use std::cmp::Reverse;
use std::collections::HashSet;
use stow_runtime::kernels::IN_PLACE_ATTR;
use tract_onnx::prelude::{DatumType, TypedNode};
use tract_onnx::tract_core::ops::array::TypedConcat;
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::cast::Cast;
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_core::ops::cnn::{Conv, KernelFormat};
use tract_onnx::tract_core::ops::element_wise::ElementWiseOp;

/// How a tensor shares bytes with another one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alias {
    /// Written over the given (dead) input by an element-wise op.
    InPlace(usize),
    /// Written over the given (dead) input by a depthwise convolution,
    /// from the input's first byte; never larger than the input.
    DepthwiseInPlace(usize),
    /// The given tensor's bytes with a new shape.
    View(usize),
    /// A slice of a concat's output: the tensor's producer writes straight
    /// into the concat output's bytes, `byte_offset` bytes from its start.
    ConcatSlice {
        /// The concat's output tensor.
        concat_output: usize,
        /// Where this tensor starts inside the concat's output.
        byte_offset: u64,
    },
}

impl Alias {
    /// The tensor whose bytes are shared.
    pub fn target(self) -> usize {
        match self {
            Alias::InPlace(t) | Alias::View(t) | Alias::DepthwiseInPlace(t) => t,
            Alias::ConcatSlice { concat_output, .. } => concat_output,
        }
    }

    /// Where this tensor starts inside the target's bytes.
    pub fn byte_offset(self) -> u64 {
        match self {
            Alias::InPlace(_) | Alias::View(_) | Alias::DepthwiseInPlace(_) => 0,
            Alias::ConcatSlice { byte_offset, .. } => byte_offset,
        }
    }
}

/// Which kinds of sharing to apply, and which schedules the plan must be
/// safe for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReuseOptions {
    /// Element-wise ops write over a dead input.
    pub inplace: bool,
    /// Depthwise convolutions write over their dead input.
    pub depthwise_inplace: bool,
    /// Reshape-like ops share their input's bytes.
    pub views: bool,
    /// In-place ops may overwrite graph inputs (callers lose their input).
    pub reuse_inputs: bool,
    /// Producers of a concat's inputs write into the concat's output.
    pub concat_inplace: bool,
    /// Parallel branches may run at the same time: tensors on them never
    /// share bytes, graph outputs are never reused after they are written,
    /// and the planner gets an explicit conflict graph.
    pub concurrent_branches: bool,
}

impl Default for ReuseOptions {
    fn default() -> Self {
        ReuseOptions {
            inplace: true,
            depthwise_inplace: true,
            views: true,
            reuse_inputs: false,
            concat_inplace: true,
            concurrent_branches: false,
        }
    }
}

/// Per buffer (identified by its root tensor): what it holds so far.
#[derive(Clone, Copy)]
struct BufferState {
    last_step: u32,
    has_input: bool,
    has_output: bool,
}

/// Finds aliases and records them in `graph.tensors`.
pub(crate) fn find_aliases(graph: &mut ModelGraph, options: ReuseOptions) {
    graph.concurrent = options.concurrent_branches;
    let usage = Usage::new(graph);
    let dag = options
        .concurrent_branches
        .then(|| StepDag::new(graph, &usage));
    let schedule = match &dag {
        Some(d) => Schedule::Concurrent(d),
        None => Schedule::Sequential,
    };
    views_and_in_place(graph, options, &usage, schedule);
    drop_idle_depthwise(graph);
    if options.concat_inplace {
        concats_in_place(graph, &usage, schedule);
    }
}

/// How an op may share its input's bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sharing {
    View,
    InPlace,
    Depthwise,
}

/// True when `node` is a float depthwise convolution the runtime can run
/// in place: channels first (planes are contiguous), one input and one
/// output channel per group, an OIHW kernel.
fn depthwise(node: &TypedNode) -> bool {
    let Some(conv) = node.op_as::<Conv>() else {
        return false;
    };
    let spec = &conv.pool_spec;
    conv.q_params.is_none()
        && !spec.data_format.c_is_last()
        && conv.kernel_fmt == KernelFormat::OIHW
        && conv.group == spec.input_channels
        && conv.group == spec.output_channels
}

/// Views, in-place element-wise ops and depthwise convolutions in place,
/// in execution order.
fn views_and_in_place(
    graph: &mut ModelGraph,
    options: ReuseOptions,
    usage: &Usage,
    schedule: Schedule,
) {
    let n = graph.tensors.len();
    let mut root: Vec<usize> = (0..n).collect();
    let mut members: Vec<Vec<usize>> = (0..n).map(|t| vec![t]).collect();
    let mut state: Vec<BufferState> = graph
        .tensors
        .iter()
        .map(|t| BufferState {
            last_step: t.last_step,
            has_input: t.role == TensorRole::Input,
            has_output: t.role == TensorRole::Output,
        })
        .collect();
    let model = graph.typed_model().clone();
    for step in 0..graph.ops.len() {
        let op = &graph.ops[step];
        let [output] = op.outputs[..] else { continue };
        let node = model.node(op.node);
        let out = &graph.tensors[output];
        let candidates: Vec<(usize, Sharing)> = if options.views
            && node
                .op_as::<AxisOp>()
                .is_some_and(|a| !matches!(a, AxisOp::Move(..)))
        {
            op.inputs
                .first()
                .map(|&i| (i, Sharing::View))
                .into_iter()
                .collect()
        } else if options.inplace
            && (node.op_is::<ElementWiseOp>()
                || node.op_is::<TypedBinOp>()
                || node.op_is::<crate::qops::QLinearBinary>())
        {
            op.inputs.iter().map(|&i| (i, Sharing::InPlace)).collect()
        } else if options.inplace
            && (node.op_is::<crate::lookup::QLookup>() || node.op_is::<Cast>())
        {
            op.inputs
                .first()
                .map(|&i| (i, Sharing::InPlace))
                .into_iter()
                .collect()
        } else if options.depthwise_inplace && out.dtype == "f32" && depthwise(node) {
            op.inputs
                .first()
                .map(|&i| (i, Sharing::Depthwise))
                .into_iter()
                .collect()
        } else {
            continue;
        };
        for (input, sharing) in candidates {
            let inp = &graph.tensors[input];
            let fits = match sharing {
                Sharing::Depthwise => out.bytes <= inp.bytes,
                _ => inp.bytes == out.bytes,
            };
            // A cast converts element by element, each read before it is
            // written: between types of one size it may run in place.
            let retyped = inp.dtype != out.dtype && !node.op_is::<Cast>();
            if inp.role == TensorRole::Weight || !fits || retyped {
                continue;
            }
            let r = root[input];
            let buffer = state[r];
            if sharing != Sharing::View {
                let dies_here = buffer.last_step == step as u32
                    && match schedule {
                        Schedule::Sequential => true,
                        // A read on a parallel branch could still be running.
                        Schedule::Concurrent(dag) => members[r].iter().all(|&m| {
                            usage.readers[m]
                                .iter()
                                .all(|&s| s == step || dag.precedes(s, step))
                        }),
                    };
                if !dies_here || buffer.has_output || (buffer.has_input && !options.reuse_inputs) {
                    continue;
                }
            }
            // The depthwise kernel writes its output from the input's first
            // byte; every buffer starts at offset 0 until concats move
            // them, which happens later.
            root[output] = r;
            let moved = std::mem::take(&mut members[output]);
            members[r].extend(moved);
            let merged = &mut state[r];
            merged.last_step = merged.last_step.max(out.last_step);
            merged.has_output |= out.role == TensorRole::Output;
            graph.tensors[output].alias = Some(match sharing {
                Sharing::View => Alias::View(input),
                Sharing::InPlace => Alias::InPlace(input),
                Sharing::Depthwise => {
                    let op = &mut graph.ops[step];
                    op.attributes
                        .push((IN_PLACE_ATTR.into(), crate::attrs::Attr::Int(1)));
                    op.attributes.sort_by(|a, b| a.0.cmp(&b.0));
                    Alias::DepthwiseInPlace(input)
                }
            });
            break;
        }
    }
}

/// Undoes each depthwise convolution in place whose output is smaller than
/// its input unless it lowers the peak of live bytes under the recorded
/// order. The shared buffer keeps the input's size for as long as the
/// output (and what is in place of it) lives, so later steps pay for it;
/// on MobileNetV2 the stride-2 step at the peak gains, the others would
/// only take room the kernels' scratch can use. Same-size outputs cost
/// nothing and stay. Undoing one leaves every other decision valid: the
/// output's buffer keeps the output's readers and graph outputs, and the
/// input's buffer died at the step.
fn drop_idle_depthwise(graph: &mut ModelGraph) {
    for step in 0..graph.ops.len() {
        let [out] = graph.ops[step].outputs[..] else {
            continue;
        };
        let Some(Alias::DepthwiseInPlace(input)) = graph.tensors[out].alias else {
            continue;
        };
        if graph.tensors[out].bytes == graph.tensors[input].bytes {
            continue;
        }
        let with = graph.sequential_peak();
        graph.tensors[out].alias = None;
        if graph.sequential_peak() <= with {
            graph.ops[step]
                .attributes
                .retain(|(k, _)| k != IN_PLACE_ATTR);
        } else {
            graph.tensors[out].alias = Some(Alias::DepthwiseInPlace(input));
        }
    }
}

/// Byte offset of every input's slice in a concat's output, or `None` when
/// the inputs are not contiguous slices of it (the axis has a non-unit axis
/// outside it, shapes or element types differ, or the values are symbolic).
fn slice_offsets(graph: &ModelGraph, step: usize) -> Option<Vec<u64>> {
    let op = &graph.ops[step];
    let model = graph.typed_model();
    let node = model.node(op.node);
    let concat = node.op_as::<TypedConcat>()?;
    let [c] = op.outputs[..] else { return None };
    let out = &graph.tensors[c];
    if !out.role.in_arena() || op.inputs.is_empty() {
        return None;
    }
    let fact = model.outlet_fact(node.id.into()).ok()?;
    // Symbolic values are stored converted; keep their concats as copies.
    if fact.datum_type == DatumType::TDim {
        return None;
    }
    let axis = concat.axis;
    if axis >= out.shape.len() || out.shape[..axis].iter().any(|&d| d != 1) {
        return None;
    }
    let mut offsets = Vec::with_capacity(op.inputs.len());
    let mut at = 0u64;
    for &i in &op.inputs {
        let t = &graph.tensors[i];
        let same_outside = t.shape.len() == out.shape.len()
            && t.shape
                .iter()
                .zip(&out.shape)
                .enumerate()
                .all(|(ax, (a, b))| ax == axis || a == b);
        if !same_outside || t.dtype != out.dtype {
            return None;
        }
        offsets.push(at);
        at = at.checked_add(t.bytes)?;
    }
    (at == out.bytes).then_some(offsets)
}

/// Concats done in place, largest output first: a tensor can sit in only one
/// place, and the largest concat (e.g. the end of a DenseNet block, which
/// every layer of the block feeds) saves the most.
fn concats_in_place(graph: &mut ModelGraph, usage: &Usage, schedule: Schedule) {
    let n = graph.tensors.len();
    let mut root: Vec<usize> = (0..n).map(|t| graph.alias_root(t)).collect();
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); n];
    for t in 0..n {
        if graph.tensors[t].role.in_arena() {
            members[root[t]].push(t);
        }
    }
    let mut candidates: Vec<(usize, Vec<u64>)> = (0..graph.ops.len())
        .filter_map(|s| slice_offsets(graph, s).map(|o| (s, o)))
        .collect();
    let mut peak = graph.sequential_peak();
    candidates.sort_by_key(|(s, _)| {
        (
            Reverse(graph.tensors[graph.ops[*s].outputs[0]].bytes),
            Reverse(*s),
        )
    });
    for (step, offsets) in candidates {
        let c = graph.ops[step].outputs[0];
        let rc = root[c];
        let inputs = graph.ops[step].inputs.clone();
        let mut roots = Vec::with_capacity(inputs.len());
        let eligible = inputs.iter().all(|&i| {
            let r = root[i];
            let fits = graph.tensors[i].role == TensorRole::Activation
                && r != rc
                && !roots.contains(&r)
                && graph.offset_in_buffer(i) == 0
                && members[r].iter().all(|&m| {
                    let t = &graph.tensors[m];
                    t.role == TensorRole::Activation
                        && graph.offset_in_buffer(m) + t.bytes <= graph.tensors[i].bytes
                });
            roots.push(r);
            fits
        });
        if !eligible {
            continue;
        }
        for (&r, &offset) in roots.iter().zip(&offsets) {
            graph.tensors[r].alias = Some(Alias::ConcatSlice {
                concat_output: c,
                byte_offset: offset,
            });
        }
        graph.free_concat[step] = true;
        let group: Vec<usize> = std::iter::once(rc)
            .chain(roots.iter().copied())
            .flat_map(|r| members[r].iter().copied())
            .collect();
        // A concat's output buffer is reserved from its first producer on;
        // when that raises the peak (DenseNet: the block's output held
        // through the whole block) the copy is cheaper.
        let accepted = group_is_safe(graph, usage, schedule, &group) && {
            let now = graph.sequential_peak();
            let keep = now <= peak;
            if keep {
                peak = now;
            }
            keep
        };
        if accepted {
            for &r in &roots {
                let moved = std::mem::take(&mut members[r]);
                for &m in &moved {
                    root[m] = rc;
                }
                members[rc].extend(moved);
            }
        } else {
            for &r in &roots {
                graph.tensors[r].alias = None;
            }
            graph.free_concat[step] = false;
        }
    }
}

/// True when, in the buffer made of `group`, every byte a member reads still
/// holds the value that member expects: no write lands on a byte between the
/// write that produced the value and the member's last read, and no op that
/// is not an in-place element-wise op or depthwise convolution writes over
/// bytes it reads itself.
pub(crate) fn group_is_safe(
    graph: &ModelGraph,
    usage: &Usage,
    schedule: Schedule,
    group: &[usize],
) -> bool {
    let range = |t: usize| {
        let lo = graph.offset_in_buffer(t);
        (lo, lo + graph.tensors[t].bytes)
    };
    let overlap = |(a, b): (u64, u64), (c, d): (u64, u64)| a < d && c < b;
    let writers: Vec<(usize, Event, (u64, u64))> = group
        .iter()
        .filter_map(|&t| Some((t, graph.write_event(usage, t)?, range(t))))
        .collect();
    for &t in group {
        let reads: Vec<Event> = usage.reads(t).collect();
        if reads.is_empty() {
            continue;
        }
        // Where t's bytes get their value: its own write, or for views and
        // concats done in place, the writes of what they show.
        let mut sources: Vec<usize> = Vec::new();
        let mut stack = vec![t];
        while let Some(s) = stack.pop() {
            match (graph.tensors[s].alias, usage.producer[s]) {
                (Some(Alias::View(x)), _) => stack.push(x),
                (_, Some(p)) if graph.concat_in_place(p) => {
                    stack.extend(graph.ops[p].inputs.iter().copied())
                }
                _ => sources.push(s),
            }
        }
        for src in sources {
            let Some(src_write) = graph.write_event(usage, src) else {
                return false;
            };
            let src_range = range(src);
            for &(u, write, u_range) in &writers {
                if u == src || !overlap(u_range, src_range) {
                    continue;
                }
                let before_source = schedule.before(write, src_write);
                let after_reads = reads
                    .iter()
                    .all(|&r| r == write || schedule.before(r, write));
                if !before_source && !after_reads {
                    return false;
                }
            }
        }
    }
    let in_group: HashSet<usize> = group.iter().copied().collect();
    for &(u, write, u_range) in &writers {
        let Event::Step(step) = write else { continue };
        for &p in &graph.ops[step].inputs {
            if in_group.contains(&p)
                && overlap(range(p), u_range)
                && !matches!(
                    graph.tensors[u].alias,
                    Some(Alias::InPlace(x) | Alias::DepthwiseInPlace(x)) if x == p
                )
            {
                return false;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{load, LoadOptions};

    fn concat_block(reuse: ReuseOptions) -> ModelGraph {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/concat_block.onnx");
        load(
            &path,
            &LoadOptions {
                reuse,
                ..Default::default()
            },
        )
        .unwrap()
    }

    /// The step of the concat whose output has `shape`.
    fn concat_step(graph: &ModelGraph, shape: &[u64]) -> usize {
        (0..graph.ops.len())
            .find(|&s| {
                graph.ops[s].op_type == "Concat"
                    && graph.tensors[graph.ops[s].outputs[0]].shape == shape
            })
            .unwrap()
    }

    /// Places the concat at `step` in place regardless of safety and
    /// returns what the checker says about the merged buffer.
    fn force(graph: &mut ModelGraph, step: usize) -> bool {
        let offsets = slice_offsets(graph, step).unwrap();
        let c = graph.ops[step].outputs[0];
        for (&i, &byte_offset) in graph.ops[step].inputs.clone().iter().zip(&offsets) {
            let r = graph.alias_root(i);
            graph.tensors[r].alias = Some(Alias::ConcatSlice {
                concat_output: c,
                byte_offset,
            });
        }
        graph.free_concat[step] = true;
        let root = graph.alias_root(c);
        let group: Vec<usize> = (0..graph.tensors.len())
            .filter(|&t| graph.tensors[t].role.in_arena() && graph.alias_root(t) == root)
            .collect();
        let usage = Usage::new(graph);
        group_is_safe(graph, &usage, Schedule::Sequential, &group)
    }

    #[test]
    fn checker_accepts_the_block_concat() {
        let mut graph = concat_block(ReuseOptions {
            concat_inplace: false,
            ..Default::default()
        });
        let step = concat_step(&graph, &[1, 24, 16, 16]);
        assert!(force(&mut graph, step));
    }

    #[test]
    fn checker_rejects_a_concat_overwritten_while_an_input_is_read() {
        // Sigmoid writes over the concat's output in place, but the first
        // input is read again afterwards.
        let mut graph = concat_block(ReuseOptions {
            concat_inplace: false,
            ..Default::default()
        });
        let step = concat_step(&graph, &[1, 8, 16, 16]);
        let sigmoid = graph.ops[step + 1..]
            .iter()
            .find(|op| op.inputs.contains(&graph.ops[step].outputs[0]))
            .unwrap();
        assert!(matches!(
            graph.tensors[sigmoid.outputs[0]].alias,
            Some(Alias::InPlace(_))
        ));
        assert!(!force(&mut graph, step));
        // Without the in-place sigmoid the same concat is safe.
        let mut graph = concat_block(ReuseOptions {
            concat_inplace: false,
            inplace: false,
            ..Default::default()
        });
        let step = concat_step(&graph, &[1, 8, 16, 16]);
        assert!(force(&mut graph, step));
    }

    #[test]
    fn ineligible_concats_stay_copies() {
        // The concat over the image is never a candidate input-wise, and the
        // same tensor twice cannot sit in two slices.
        let graph = concat_block(ReuseOptions::default());
        for shape in [[1, 4, 16, 16], [1, 16, 16, 16]] {
            let step = concat_step(&graph, &shape);
            assert!(!graph.concat_in_place(step), "{shape:?}");
        }
        let step = concat_step(&graph, &[1, 2, 16, 32]);
        assert!(slice_offsets(&graph, step).is_none(), "inner axis");
        let step = concat_step(&graph, &[1, 24, 16, 16]);
        assert!(graph.concat_in_place(step));
        let c = graph.ops[step].outputs[0];
        let mut at = graph.offset_in_buffer(c);
        for &i in &graph.ops[step].inputs {
            assert_eq!(graph.offset_in_buffer(i), at);
            assert_eq!(graph.alias_root(i), graph.alias_root(c));
            at += graph.tensors[i].bytes;
        }
    }

    fn depthwise_block(reuse: ReuseOptions) -> ModelGraph {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/depthwise_block.onnx");
        load(
            &path,
            &LoadOptions {
                reuse,
                ..Default::default()
            },
        )
        .unwrap()
    }

    /// Per convolution step, in order, the tensor its output is a
    /// depthwise alias of.
    fn depthwise_aliases(graph: &ModelGraph) -> Vec<Option<usize>> {
        graph
            .ops
            .iter()
            .filter(|op| op.op_type == "Conv")
            .map(|op| match graph.tensors[op.outputs[0]].alias {
                Some(Alias::DepthwiseInPlace(x)) => {
                    assert_eq!(x, op.inputs[0]);
                    assert!(op
                        .attributes
                        .iter()
                        .any(|(k, v)| k == IN_PLACE_ATTR && *v == crate::Attr::Int(1)));
                    Some(x)
                }
                _ => {
                    assert!(op.attributes.iter().all(|(k, _)| k != IN_PLACE_ATTR));
                    None
                }
            })
            .collect()
    }

    #[test]
    fn depthwise_in_place_only_where_valid() {
        // The model's convolutions, in order: on the graph input; stride 1
        // over a dead input; stride 2, dilation 2 at the peak; (the 1×1
        // convolution is a product in tract) an input read again; an output plane larger than the
        // input's; stride 2 away from the peak; a channel multiplier; two
        // groups.
        let graph = depthwise_block(ReuseOptions::default());
        let placed: Vec<bool> = depthwise_aliases(&graph)
            .iter()
            .map(Option::is_some)
            .collect();
        let want = [true, true, false, false, false, false, false];
        assert_eq!(placed[1..], want);
        assert!(!placed[0]);
        // The two share one buffer with the second convolution's input,
        // from its first byte.
        let convs: Vec<usize> = (0..graph.ops.len())
            .filter(|&s| graph.ops[s].op_type == "Conv")
            .collect();
        let root = graph.alias_root(graph.ops[convs[1]].inputs[0]);
        for &s in &convs[1..3] {
            let out = graph.ops[s].outputs[0];
            assert_eq!(graph.alias_root(out), root);
            assert_eq!(graph.offset_in_buffer(out), 0);
        }
        // The caller's input is overwritten only when allowed.
        let graph = depthwise_block(ReuseOptions {
            reuse_inputs: true,
            ..Default::default()
        });
        let placed: Vec<bool> = depthwise_aliases(&graph)
            .iter()
            .map(Option::is_some)
            .collect();
        assert!(placed[0]);
        assert_eq!(placed[1..], want);
        let graph = depthwise_block(ReuseOptions {
            depthwise_inplace: false,
            ..Default::default()
        });
        assert!(depthwise_aliases(&graph).iter().all(Option::is_none));
    }

    /// Bytes live at each step of the recorded order.
    fn live(graph: &ModelGraph) -> Vec<u64> {
        let (problem, _) = graph.problem(1);
        let mut live = vec![0u64; graph.ops.len()];
        for b in &problem.buffers {
            for step in b.lifetime.start..b.lifetime.end.min(graph.ops.len() as u32) {
                live[step as usize] += b.size;
            }
        }
        live
    }

    /// Each depthwise step in place needs only its input's bytes, and the
    /// peak drops; a stride-2 step away from the peak is left a copy.
    #[test]
    fn depthwise_in_place_lowers_the_step_to_its_input() {
        let on = depthwise_block(ReuseOptions::default());
        let off = depthwise_block(ReuseOptions {
            depthwise_inplace: false,
            ..Default::default()
        });
        let (live_on, live_off) = (live(&on), live(&off));
        assert_eq!(on.ops.len(), off.ops.len());
        for step in 0..on.ops.len() {
            let op = &on.ops[step];
            let (x, y) = (&on.tensors[op.inputs[0]], &on.tensors[op.outputs[0]]);
            if matches!(y.alias, Some(Alias::DepthwiseInPlace(_))) {
                // Input and output together before; the input alone now.
                assert_eq!(live_off[step], x.bytes + y.bytes, "step {step}");
                assert_eq!(live_on[step], x.bytes, "step {step}");
            }
        }
        assert!(on.sequential_peak() < off.sequential_peak());
        // On the MobileNet blocks the depthwise step is the peak: the
        // bound itself drops.
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/mobilenet_block.onnx");
        let bound = |depthwise_inplace| {
            let options = LoadOptions {
                reuse: ReuseOptions {
                    depthwise_inplace,
                    ..Default::default()
                },
                ..Default::default()
            };
            load(&path, &options).unwrap().sequential_peak()
        };
        assert_eq!((bound(false), bound(true)), (147_456, 98_304));
    }
}

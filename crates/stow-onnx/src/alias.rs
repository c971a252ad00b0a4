//! Sharing bytes beyond lifetimes: zero-copy views and in-place element-wise
//! operators. Each tensor may alias an earlier one; aliased tensors form one
//! buffer for the planner.
//!
//! - **View**: a reshape-like op (tract's `AxisOp` Add, Rm or Reshape)
//!   produces the same bytes with a new shape. Its output joins its input's
//!   buffer. Ops that move data (`AxisOp::Move`, transposes) are not views.
//! - **In place**: an element-wise unary or binary op writes its output over
//!   an input when the input's whole buffer is dead after this step (no
//!   member of it is read later), the input has the output's element type
//!   and byte size, and the buffer holds no weight, no graph output and — unless
//!   `reuse_inputs` is set — no graph input.

use crate::graph::{ModelGraph, TensorRole};
use tract_onnx::tract_core::ops::binary::TypedBinOp;
use tract_onnx::tract_core::ops::change_axes::AxisOp;
use tract_onnx::tract_core::ops::element_wise::ElementWiseOp;

/// How a tensor shares bytes with an earlier one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alias {
    /// Written over the given (dead) input by an element-wise op.
    InPlace(usize),
    /// The given tensor's bytes with a new shape.
    View(usize),
}

impl Alias {
    /// The tensor whose bytes are shared.
    pub fn target(self) -> usize {
        match self {
            Alias::InPlace(t) | Alias::View(t) => t,
        }
    }
}

/// Which kinds of sharing to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReuseOptions {
    /// Element-wise ops write over a dead input.
    pub inplace: bool,
    /// Reshape-like ops share their input's bytes.
    pub views: bool,
    /// In-place ops may overwrite graph inputs (callers lose their input).
    pub reuse_inputs: bool,
}

impl Default for ReuseOptions {
    fn default() -> Self {
        ReuseOptions {
            inplace: true,
            views: true,
            reuse_inputs: false,
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

/// Finds aliases in execution order and records them in `graph.tensors`.
pub(crate) fn find_aliases(graph: &mut ModelGraph, options: ReuseOptions) {
    let n = graph.tensors.len();
    let mut root: Vec<usize> = (0..n).collect();
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
        let candidates: Vec<(usize, bool)> = if options.views
            && node
                .op_as::<AxisOp>()
                .is_some_and(|a| !matches!(a, AxisOp::Move(..)))
        {
            op.inputs.first().map(|&i| (i, true)).into_iter().collect()
        } else if options.inplace && (node.op_is::<ElementWiseOp>() || node.op_is::<TypedBinOp>()) {
            op.inputs.iter().map(|&i| (i, false)).collect()
        } else {
            continue;
        };
        for (input, is_view) in candidates {
            let inp = &graph.tensors[input];
            if inp.role == TensorRole::Weight || inp.bytes != out.bytes || inp.dtype != out.dtype {
                continue;
            }
            let r = root[input];
            let buffer = state[r];
            if !is_view {
                let dies_here = buffer.last_step == step as u32;
                if !dies_here || buffer.has_output || (buffer.has_input && !options.reuse_inputs) {
                    continue;
                }
            }
            root[output] = r;
            let merged = &mut state[r];
            merged.last_step = merged.last_step.max(out.last_step);
            merged.has_output |= out.role == TensorRole::Output;
            graph.tensors[output].alias = Some(if is_view {
                Alias::View(input)
            } else {
                Alias::InPlace(input)
            });
            break;
        }
    }
}

//! What a compile produced, in numbers: [`Report`].

use crate::compare::Comparison;
use crate::contents::ScratchAboveBound;
use crate::pools::{Placement, PoolReport};
use std::time::Duration;
use stow_onnx::{Alias, ExecutionOrder, ModelGraph, PatchedStage};
use stow_plan::{Plan, Problem, Strategy};

/// How many tensors the model has, and how the arena ones share bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TensorCounts {
    /// Every tensor: weights, inputs, outputs, activations and kernel
    /// scratch.
    pub total: usize,
    /// Tensors in the arena (every one but the weights).
    pub arena: usize,
    /// Buffers of the planning problem: arena tensors after aliases are
    /// merged (`arena` minus the four kinds below).
    pub buffers: usize,
    /// Element-wise outputs written over their dead input.
    pub in_place: usize,
    /// Reshape-like outputs sharing their input's bytes.
    pub views: usize,
    /// Concat inputs written straight into their slice of the output.
    pub concat_slices: usize,
    /// Depthwise convolution outputs written over their dead input.
    pub depthwise_in_place: usize,
}

impl TensorCounts {
    /// Counts `graph`'s tensors; `buffer_of` and `problem` as returned by
    /// [`ModelGraph::problem`].
    pub fn of(graph: &ModelGraph, buffer_of: &[Option<usize>], problem: &Problem) -> Self {
        let aliases = |kind: fn(&Alias) -> bool| {
            graph
                .tensors
                .iter()
                .filter(|t| t.alias.as_ref().is_some_and(kind))
                .count()
        };
        TensorCounts {
            total: graph.tensors.len(),
            arena: buffer_of.iter().filter(|b| b.is_some()).count(),
            buffers: problem.buffers.len(),
            in_place: aliases(|a| matches!(a, Alias::InPlace(_))),
            views: aliases(|a| matches!(a, Alias::View(_))),
            concat_slices: aliases(|a| matches!(a, Alias::ConcatSlice { .. })),
            depthwise_in_place: aliases(|a| matches!(a, Alias::DepthwiseInPlace(_))),
        }
    }
}

/// The numbers of one compile: what `stow compile` prints.
///
/// `lower_bound <= arena_bytes` always holds (the planner's checker
/// enforces it); the bundle's metadata records the same arena size, lower
/// bound, naive size and strategy.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Operators executed, one per step.
    pub ops: usize,
    /// Tensor counts.
    pub tensors: TensorCounts,
    /// Total bytes of the weights.
    pub weight_bytes: u64,
    /// Planned arena size in bytes (with pools, the sum of their sizes).
    pub arena_bytes: u64,
    /// The problem's lower bound: the largest total of buffers alive at
    /// one step (or the heaviest clique of a conflict graph).
    pub lower_bound: u64,
    /// Arena size without any reuse (every buffer side by side).
    pub naive_bytes: u64,
    /// `arena_bytes / lower_bound` (1.0 when both are zero).
    pub ratio: f64,
    /// The strategy that made the plan (for `auto`, the one that won).
    pub strategy: Strategy,
    /// True when `auto` was asked for and chose [`Report::strategy`].
    pub chosen_by_auto: bool,
    /// True when the arena is proven smallest possible.
    pub optimal: bool,
    /// The execution order the steps follow.
    pub order: ExecutionOrder,
    /// The arena's lower bound under each order tried, in the order tried.
    pub order_bounds: Vec<(ExecutionOrder, u64)>,
    /// Time the planner took for the bundle's plan.
    pub planning_time: Duration,
    /// Time of the whole compile, from reading the model to encoding the
    /// bundle.
    pub compile_time: Duration,
    /// Size of the encoded bundle in bytes.
    pub bundle_bytes: u64,
    /// Every strategy's result, best first, when
    /// [`CompileOptions::compare`](crate::CompileOptions::compare) was set.
    pub comparison: Option<Vec<Comparison>>,
    /// Steps whose kernel scratch, even at its smallest blocking, raises
    /// the arena above the model tensors' bound, and by how much.
    pub scratch_above_bound: Vec<ScratchAboveBound>,
    /// Per memory pool, fastest first: size, fill at its peak and the
    /// traffic it serves. Empty without pools.
    pub pools: Vec<PoolReport>,
    /// How unpinned buffers were offered to the bounded pools.
    pub placement: Placement,
    /// Stages run in bands of rows: given, or chosen to meet the capacity.
    pub stages: Vec<PatchedStage>,
    /// The model's lower bound without the stages, when the compiler
    /// chose them to meet the capacity.
    pub bound_without_stages: Option<u64>,
    /// Multiply-adds of the model's convolutions and products, as
    /// compiled.
    pub multiply_adds: u64,
    /// The same without the stages: less than [`Report::multiply_adds`]
    /// when a stage runs through a reduction of the rows.
    pub multiply_adds_without_stages: u64,
}

/// The parts of a compile a report is made of.
pub(crate) struct ReportInputs<'a> {
    pub graph: &'a ModelGraph,
    pub buffer_of: &'a [Option<usize>],
    pub problem: &'a Problem,
    pub plan: &'a Plan,
    pub auto: bool,
    pub naive_bytes: u64,
    pub bundle_bytes: u64,
    pub comparison: Option<Vec<Comparison>>,
    pub scratch_above_bound: Vec<ScratchAboveBound>,
    pub compile_time: Duration,
    pub pools: Vec<PoolReport>,
    pub placement: Placement,
    pub stages: Vec<PatchedStage>,
    pub bound_without_stages: Option<u64>,
    pub multiply_adds_without_stages: u64,
}

impl Report {
    pub(crate) fn new(r: ReportInputs<'_>) -> Self {
        Report {
            ops: r.graph.ops.len(),
            tensors: TensorCounts::of(r.graph, r.buffer_of, r.problem),
            weight_bytes: r.graph.weight_total(),
            arena_bytes: r.plan.arena_bytes,
            lower_bound: r.plan.lower_bound,
            naive_bytes: r.naive_bytes,
            ratio: r.plan.ratio(),
            strategy: r.plan.strategy,
            chosen_by_auto: r.auto,
            optimal: r.plan.optimal,
            order: r.graph.order,
            order_bounds: r.graph.order_bounds.clone(),
            planning_time: r.plan.stats.elapsed,
            compile_time: r.compile_time,
            bundle_bytes: r.bundle_bytes,
            comparison: r.comparison,
            scratch_above_bound: r.scratch_above_bound,
            pools: r.pools,
            placement: r.placement,
            stages: r.stages,
            bound_without_stages: r.bound_without_stages,
            multiply_adds: r.graph.multiply_adds(),
            multiply_adds_without_stages: r.multiply_adds_without_stages,
        }
    }
}

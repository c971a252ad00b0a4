//! The entry point: [`compile`] a model into a [`Compiled`] bundle.

use crate::compare::{compare, Comparison};
use crate::contents::{bundle_contents, plan_scratch, PlannedModel};
use crate::error::CompileError;
use crate::options::CompileOptions;
use crate::pools::{self, Placement};
use crate::report::{Report, ReportInputs};
use std::fmt;
use std::path::Path;
use std::time::Instant;
use stow_onnx::{LoadOptions, ModelGraph};
use stow_plan::{plan, Plan, PlanError, PlanOptions, Problem, Strategy};

/// A compiled model: the encoded bundle, its report, and what it was made
/// from (the planning problem, the plan and the model graph).
pub struct Compiled {
    bytes: Vec<u8>,
    report: Report,
    problem: Problem,
    plan: Plan,
    graph: ModelGraph,
    buffer_of: Vec<Option<usize>>,
}

impl Compiled {
    /// The bundle, as [`stow_bundle::to_bytes`] encoded (and validated) it.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bundle, taken out.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// The numbers of the compile.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// The planning problem the arena was planned from (buffer `i` is
    /// [`Plan::offsets`]`[i]`); `stow compile --dump-problem` writes it.
    pub fn problem(&self) -> &Problem {
        &self.problem
    }

    /// The plan the bundle holds (it passed the checker).
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The model as the frontend recorded it, kernel scratch included.
    pub fn graph(&self) -> &ModelGraph {
        &self.graph
    }

    /// For each tensor of [`Compiled::graph`], its buffer in
    /// [`Compiled::problem`] (`None` for weights).
    pub fn buffer_of(&self) -> &[Option<usize>] {
        &self.buffer_of
    }

    /// Writes the bundle to `path` atomically: into a temporary file beside
    /// it, then renamed ([`stow_bundle::write_file`]). On error nothing is
    /// left at `path`, nor a temporary file.
    pub fn write(&self, path: &Path) -> Result<(), CompileError> {
        stow_bundle::write_file(path, &self.bytes).map_err(|source| CompileError::Write {
            path: path.to_path_buf(),
            source,
        })
    }
}

impl fmt::Debug for Compiled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compiled")
            .field("bytes", &self.bytes.len())
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

/// Compiles the ONNX model at `model` into a bundle, in memory.
///
/// The stages, in order: check the options; load the model with its input
/// shapes, symbol values and reuse switches
/// ([`stow_onnx::load`]); add kernel scratch for
/// [`CompileOptions::threads`] threads ([`plan_scratch`]); refuse any arena
/// tensor above [`CompileOptions::max_arena`]; build the planning problem
/// and, when asked, compare every strategy; plan (every plan passes the
/// checker) and refuse an arena above the limit; plan without reuse for
/// the report; build the bundle contents and encode them (the writer
/// validates its own output).
///
/// With [`CompileOptions::pools`], the pins are applied first (a pinned
/// tensor larger than its pool is refused, [`CompileError::Pools`]), the
/// unpinned buffers are offered to the bounded pools in the order of
/// [`CompileOptions::placement`] (with [`Placement::Threshold`], the
/// operands of steps over the threshold are first sent to the last pool),
/// and each pool is planned and checked as
/// one arena; the bundle lists the pools and each tensor's pool.
///
/// Each stage's failure is its own [`CompileError`] variant. Nothing is
/// written: see [`Compiled::write`].
pub fn compile(model: &Path, options: &CompileOptions) -> Result<Compiled, CompileError> {
    let started = Instant::now();
    let path = || model.to_path_buf();
    if options.align == 0 || !options.align.is_power_of_two() {
        return Err(CompileError::BadAlignment {
            align: options.align,
        });
    }
    let load = LoadOptions {
        inputs: options.inputs.clone(),
        dims: options.dims.clone(),
        constants: options.constants.clone(),
        reuse: options.reuse,
        stages: options.stages.clone(),
    };
    let load_error = |source| CompileError::Load {
        path: path(),
        source,
    };
    let decluttered = stow_onnx::load_decluttered(model, &load).map_err(load_error)?;
    let graph = decluttered
        .graph(options.reuse, &options.stages)
        .map_err(load_error)?;
    let mut candidates: Vec<(Option<Vec<stow_onnx::PatchedStage>>, ModelGraph)> = Vec::new();
    let mut bound_without_stages = None;
    let mut over_budget = None;
    if let (true, Some(capacity)) = (options.stages.is_empty(), options.plan.capacity) {
        let (chosen, skipped) = crate::stages::choose(
            &decluttered,
            &graph,
            capacity,
            options.reuse,
            options.max_extra_macs,
        )
        .map_err(load_error)?;
        if !chosen.is_empty() {
            bound_without_stages = Some(crate::stages::bound(&graph));
        }
        over_budget = skipped.map(|s| s.to_string().into_boxed_str());
        for (stages, g) in chosen {
            let (stages, g) = crate::stages::in_step_order(&decluttered, stages, g, options.reuse)
                .map_err(load_error)?;
            candidates.push((Some(stages), g));
        }
    }
    if candidates.is_empty() {
        candidates.push((None, graph));
    }
    let why_no_stage = match (&candidates[..], options.plan.capacity) {
        ([(None, g)], Some(capacity)) if crate::stages::bound(g) > capacity => {
            crate::stages::why_none(&decluttered, g)
        }
        _ => None,
    };
    let multiply_adds_without_stages = decluttered.multiply_adds();
    drop(decluttered);
    // With `compare`, the planner's own failure carries every strategy's.
    if let (Some(capacity), true) = (
        options.plan.capacity,
        options.pools.is_empty() && !options.compare,
    ) {
        let (stage, graph) = &candidates[0];
        let bound = crate::stages::bound(graph);
        if bound > capacity {
            let step = graph.peak_step();
            return Err(CompileError::OverCapacity {
                path: path(),
                capacity,
                bound,
                step,
                op: graph
                    .ops
                    .get(step)
                    .map(|o| o.name.as_str())
                    .unwrap_or_default()
                    .into(),
                stage: stage
                    .as_deref()
                    .unwrap_or(&options.stages)
                    .iter()
                    .map(|s| s.to_string())
                    .reduce(|a, b| format!("{a}, {b}"))
                    .map(String::into_boxed_str),
                why_no_stage: why_no_stage.map(String::into_boxed_str),
                over_budget,
            });
        }
    }
    // With stages chosen for the capacity, a candidate whose bound fits
    // may still not be planned within it (kernel scratch, or a layout the
    // time limit does not find): the next candidate is tried.
    let mut candidates = candidates.into_iter().peekable();
    let (graph, stages, planned) = loop {
        let Some((stage, mut graph)) = candidates.next() else {
            unreachable!("at least the model itself is a candidate")
        };
        match plan_graph(model, &mut graph, options) {
            Ok(planned) => {
                break (
                    graph,
                    stage.unwrap_or_else(|| options.stages.clone()),
                    planned,
                )
            }
            Err(CompileError::Plan {
                source: PlanError::DoesNotFit { .. },
                ..
            }) if candidates.peek().is_some() => continue,
            Err(e) => return Err(e),
        }
    };
    let Planned {
        scratch_above_bound,
        unpooled,
        buffer_of,
        problem,
        traffic,
        comparison,
        chosen,
    } = planned;
    let naive = plan(
        &unpooled,
        &PlanOptions {
            strategy: Strategy::Naive,
            ..PlanOptions::default()
        },
    )
    .map_err(|source| CompileError::Plan {
        path: path(),
        source,
        comparison: None,
    })?;
    let source_model = model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let pool_names: Vec<String> = options.pools.iter().map(|p| p.name.clone()).collect();
    let planned = PlannedModel {
        graph: &graph,
        buffer_of: &buffer_of,
        plan: &chosen,
        naive_bytes: naive.arena_bytes,
        align: options.align,
        source_model: &source_model,
        pool_names: &pool_names,
    };
    let (contents, weights) =
        bundle_contents(&planned).map_err(|source| CompileError::Contents {
            path: path(),
            source,
        })?;
    let weights: Vec<&[u8]> = weights.iter().map(|w| w.as_ref()).collect();
    let bytes = stow_bundle::to_bytes(&contents, &weights)
        .map_err(|source| CompileError::Encode { source })?;
    drop(weights);
    let report = Report::new(ReportInputs {
        graph: &graph,
        buffer_of: &buffer_of,
        problem: &problem,
        plan: &chosen,
        auto: options.plan.strategy == Strategy::Auto,
        naive_bytes: naive.arena_bytes,
        bundle_bytes: bytes.len() as u64,
        comparison,
        scratch_above_bound,
        compile_time: started.elapsed(),
        pools: pools::report(&problem, &chosen, &options.pools, &traffic),
        placement: options.placement,
        stages,
        bound_without_stages,
        multiply_adds_without_stages,
    });
    Ok(Compiled {
        bytes,
        report,
        problem,
        plan: chosen,
        graph,
        buffer_of,
    })
}

/// What planning one recording of the model produced.
struct Planned {
    scratch_above_bound: Vec<crate::contents::ScratchAboveBound>,
    unpooled: Problem,
    buffer_of: Vec<Option<usize>>,
    problem: Problem,
    traffic: Vec<u64>,
    comparison: Option<Vec<Comparison>>,
    chosen: Plan,
}

/// Adds kernel scratch to `graph` and plans it (into the pools, when
/// asked), every plan checked.
fn plan_graph(
    model: &Path,
    graph: &mut ModelGraph,
    options: &CompileOptions,
) -> Result<Planned, CompileError> {
    let path = || model.to_path_buf();
    let scratch_above_bound = if options.threads > 0 {
        if options.pack_weights {
            crate::packing::mark_packed_weights(graph).map_err(|source| CompileError::Scratch {
                path: path(),
                source,
            })?;
        }
        plan_scratch(graph, options.threads).map_err(|source| CompileError::Scratch {
            path: path(),
            source,
        })?
    } else {
        Vec::new()
    };
    let limit = options.max_arena;
    if let Some(t) = graph
        .tensors
        .iter()
        .find(|t| t.role.in_arena() && t.bytes > limit)
    {
        return Err(CompileError::TensorOverMaxArena {
            path: path(),
            tensor: t.name.clone(),
            bytes: t.bytes,
            limit,
        });
    }
    let (unpooled, buffer_of) = graph.problem(options.align);
    let planning = |source: PlanError, comparison: Option<Vec<Comparison>>| CompileError::Plan {
        path: path(),
        source,
        comparison,
    };
    let comparison = if options.compare {
        Some(compare(&unpooled, &options.plan).map_err(|e| planning(e, None))?)
    } else {
        None
    };
    let traffic = pools::traffic(graph, &buffer_of, unpooled.buffers.len());
    let (problem, orders) = if options.pools.is_empty() {
        (unpooled.clone(), vec![None])
    } else {
        let pooled = pools::apply(graph, &buffer_of, &unpooled, &options.pools, &options.pins)
            .map_err(|source| CompileError::Pools {
                path: path(),
                source,
            })?;
        let pooled = match options.placement {
            Placement::Threshold(threshold) => {
                pools::apply_threshold(graph, &buffer_of, pooled, &options.pools, threshold).0
            }
            _ => pooled,
        };
        let orders = pools::admission_orders(&pooled, &traffic, options.placement);
        (pooled, orders.into_iter().map(Some).collect())
    };
    // Each admission order is planned (and checked); the plan whose faster
    // pools serve the most traffic wins, the first order on ties. A
    // failure is reported only when every order fails, as the first one's.
    let mut best: Option<(Vec<u64>, Plan)> = None;
    let mut first_error = None;
    for admission in orders {
        let plan_options = PlanOptions {
            admission,
            ..options.plan.clone()
        };
        match plan_within(&problem, &plan_options) {
            Ok(p) => {
                let served = pools::served(&problem, &p, &traffic);
                if best.as_ref().is_none_or(|(s, _)| served > *s) {
                    best = Some((served, p));
                }
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    let chosen = match (best, first_error) {
        (Some((_, p)), _) => p,
        (None, Some(e)) => return Err(planning(e, comparison)),
        // There is always at least one order; were there none, the
        // closest truthful report is that no plan could be made.
        (None, None) => return Err(planning(PlanError::Overflow, comparison)),
    };
    if chosen.arena_bytes > limit {
        return Err(CompileError::ArenaOverMaxArena {
            path: path(),
            bytes: chosen.arena_bytes,
            limit,
        });
    }
    Ok(Planned {
        scratch_above_bound,
        unpooled,
        buffer_of,
        problem,
        traffic,
        comparison,
        chosen,
    })
}

/// Plans `problem`. With a capacity and the `auto` portfolio on one arena,
/// the smallest layout the portfolio finds is kept when it fits: the
/// planner's capacity mode stops at the first layout within the capacity
/// (it decides whether the model fits), where a compiled bundle should be
/// as small as the time limit allows. Only when that layout does not fit
/// does the capacity search run.
fn plan_within(problem: &Problem, options: &PlanOptions) -> Result<Plan, PlanError> {
    let minimise = options.strategy == Strategy::Auto && problem.pools.is_empty();
    if let (true, Some(capacity)) = (minimise, options.capacity) {
        let smallest = plan(
            problem,
            &PlanOptions {
                capacity: None,
                ..options.clone()
            },
        );
        if let Ok(p) = smallest {
            if p.arena_bytes <= capacity {
                return Ok(p);
            }
        }
    }
    plan(problem, options)
}

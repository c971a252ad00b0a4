//! Choosing a stage to run in bands of rows when the model's tensors do
//! not fit the capacity asked for (`stow compile --capacity`).
//!
//! The stage starts at a graph input (or, where that stage cannot reach
//! it, at a tensor written shortly before) and must cover the step where
//! the most bytes are live. Its end is searched among the tensors after that
//! step, first to last, considering only ends that fit the capacity
//! beside the stage's input (both exist whole at the stage's last step). Each candidate is
//! recorded with one row per step (the least memory) and its arena lower
//! bound compared with the capacity; the first that fits is kept, with as
//! many rows per step as still fit (fewer, larger bands run faster).
//! When none fits, the candidate with the smallest bound is kept, so that
//! planning reports how many bytes are still missing. A candidate that
//! adds more multiply-adds than the budget allows is skipped: a stage
//! through a reduction of the rows (a squeeze-and-excitation block)
//! computes the operators before it twice.

use stow_onnx::{Decluttered, ModelGraph, OnnxError, PatchedStage, ReuseOptions, TensorRole};

/// Most stage ends recorded per start, and in all: each costs a
/// recording of the whole model.
const MAX_ENDS: usize = 12;
const MAX_RECORDINGS: usize = 24;

/// Tensors written before the peak tried as a stage's start.
const MAX_FROMS: usize = 16;

/// Most stages chained when one is not enough.
const MAX_STAGES: usize = 3;

/// Rows per step tried once one row fits, fewest steps last.
const COARSER_ROWS: [usize; 3] = [2, 4, 8];

/// Most candidates that fit handed to the planner, which tries them in
/// turn until one is planned within the capacity.
const MAX_FITTING: usize = 6;

/// Stages, and the model recorded with them.
pub(crate) type Candidate = (Vec<PatchedStage>, ModelGraph);

/// The smallest lower bound of `graph` over the execution orders tried.
pub(crate) fn bound(graph: &ModelGraph) -> u64 {
    graph
        .order_bounds
        .iter()
        .map(|&(_, b)| b)
        .min()
        .unwrap_or(0)
}

/// Stages for `decluttered` whose bound fits `capacity`, each list with
/// the model recorded with it, best first. When no single stage fits, the
/// closest one is kept and the search repeats on the model with it, up to
/// [`MAX_STAGES`] stages (a peak may move to a later step). When nothing
/// fits, the closest list alone; when the model fits already or no stage
/// can run in bands, none.
pub(crate) fn choose(
    decluttered: &Decluttered,
    graph: &ModelGraph,
    capacity: u64,
    reuse: ReuseOptions,
    max_extra_macs: f64,
) -> Result<(Vec<Candidate>, Option<OverBudget>), OnnxError> {
    let macs = graph.multiply_adds();
    let limits = Limits {
        capacity,
        reuse,
        most_macs: macs.saturating_add((macs as f64 * max_extra_macs.max(0.0)) as u64),
        over_budget: std::cell::Cell::new((0, u64::MAX)),
    };
    let mut chosen = choose_within(decluttered, graph, &limits)?;
    let best = |c: &[Candidate]| c.first().map(|(_, g)| bound(g));
    if best(&chosen).is_none_or(|b| b > capacity) && limits.most_macs > macs {
        // The closest stage through a reduction may be a worse start for
        // a chain of stages than one without: search again without them.
        let strict = Limits {
            most_macs: macs,
            over_budget: std::cell::Cell::new((0, u64::MAX)),
            ..limits
        };
        let without = choose_within(decluttered, graph, &strict)?;
        if best(&without).is_some_and(|w| best(&chosen).is_none_or(|c| w < c)) {
            chosen = without;
        }
    }
    let over_budget = match limits.over_budget.get() {
        (0, _) => None,
        (count, least) => Some(OverBudget {
            count,
            least_extra: least.saturating_sub(macs) as f64 / macs.max(1) as f64,
        }),
    };
    Ok((chosen, over_budget))
}

/// [`choose`] within `limits`.
fn choose_within(
    decluttered: &Decluttered,
    graph: &ModelGraph,
    limits: &Limits,
) -> Result<Vec<Candidate>, OnnxError> {
    let capacity = limits.capacity;
    let mut prefix: Vec<PatchedStage> = Vec::new();
    let mut base = decluttered.clone();
    let mut current: Option<ModelGraph> = None;
    for _ in 0..MAX_STAGES {
        let now = current.as_ref().unwrap_or(graph);
        if bound(now) <= capacity || now.ops.is_empty() {
            break;
        }
        let (fitting, closest) = candidates(&base, now, limits);
        if !fitting.is_empty() {
            return Ok(fitting
                .into_iter()
                .map(|(stage, g)| {
                    let mut stages = prefix.clone();
                    stages.push(stage);
                    (stages, g)
                })
                .collect());
        }
        match closest {
            Some((b, stage, g)) if b < bound(now) => {
                base = base.with_stages(std::slice::from_ref(&stage))?;
                prefix.push(stage);
                current = Some(g);
            }
            _ => break,
        }
    }
    Ok(current.map(|g| vec![(prefix, g)]).unwrap_or_default())
}

/// What a candidate must meet.
struct Limits {
    capacity: u64,
    reuse: ReuseOptions,
    /// Multiply-adds of the model plus the extra allowed.
    most_macs: u64,
    /// Candidates skipped for the budget, and the fewest extra
    /// multiply-adds among them.
    over_budget: std::cell::Cell<(usize, u64)>,
}

/// Stages skipped because they add more multiply-adds than allowed: how
/// many, and the least extra among them, as a fraction of the model's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OverBudget {
    pub count: usize,
    pub least_extra: f64,
}

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stages through a reduction of the rows were skipped: the cheapest adds {:.1} % multiply-adds, more than --max-extra-macs allows ({} candidates)",
            self.least_extra * 100.0,
            self.count
        )
    }
}

/// The stages that fit on `decluttered` as it is (see [`choose`]), and
/// the closest one that does not, with its bound. Candidates over the
/// multiply-add budget are neither.
#[allow(clippy::type_complexity)]
fn candidates(
    decluttered: &Decluttered,
    graph: &ModelGraph,
    limits: &Limits,
) -> (
    Vec<(PatchedStage, ModelGraph)>,
    Option<(u64, PatchedStage, ModelGraph)>,
) {
    let covering = graph.ops[graph.peak_step()].name.clone();
    let bytes_of = |name: &str| {
        graph
            .tensors
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.bytes)
    };
    // A candidate the rewrite refuses, or over the multiply-add budget, is
    // skipped, not an error: the model still compiles unpatched, or with
    // another stage. The budget is checked before the costly recording.
    let within_budget = |stage: &PatchedStage| {
        let staged = decluttered.with_stages(std::slice::from_ref(stage)).ok()?;
        let macs = staged.multiply_adds();
        if macs <= limits.most_macs {
            return Some(staged);
        }
        let (count, least) = limits.over_budget.get();
        limits.over_budget.set((count + 1, least.min(macs)));
        None
    };
    let record = |staged: Decluttered| {
        let patched = staged.graph(limits.reuse, &[]).ok()?;
        Some((bound(&patched), patched))
    };
    // Stages start at a graph input or, where the input's stage cannot
    // reach the peak (a squeeze-and-excitation block reads whole tensors),
    // at a tensor written before the peak, earliest first.
    let peak = graph.peak_step();
    let mut froms = decluttered.input_names();
    let before: Vec<String> = graph.ops[..peak]
        .iter()
        .filter_map(|op| op.outputs.first())
        .map(|&t| &graph.tensors[t])
        .filter(|t| t.role == TensorRole::Activation && t.shape.len() >= 3)
        .map(|t| t.name.clone())
        .collect();
    let skip = before.len().saturating_sub(MAX_FROMS);
    froms.extend(before.into_iter().skip(skip));
    let mut recorded = 0;
    let mut fitting: Vec<(PatchedStage, ModelGraph)> = Vec::new();
    let mut closest: Option<(u64, PatchedStage, ModelGraph)> = None;
    for from in froms {
        let Some(from_bytes) = bytes_of(&from) else {
            continue;
        };
        let ends: Vec<(String, u64)> = decluttered
            .stage_ends(&from, &covering)
            .into_iter()
            .filter_map(|to| bytes_of(&to).map(|b| (to, b)))
            .collect();
        // The stage's input lives until its last band is computed, and its
        // output is assembled whole beside it: ends that leave room for
        // both come first, in order; then the others, smallest first.
        let (mut ends, mut others): (Vec<_>, Vec<_>) = ends
            .into_iter()
            .partition(|&(_, b)| b.saturating_add(from_bytes) < limits.capacity);
        others.sort_by_key(|&(_, b)| b);
        ends.append(&mut others);
        let mut recorded_here = 0;
        for (to, _) in ends {
            if recorded_here >= MAX_ENDS || recorded >= MAX_RECORDINGS {
                break;
            }
            let stage = PatchedStage {
                from: from.clone(),
                to,
                rows: 1,
            };
            let Some(staged) = within_budget(&stage) else {
                continue;
            };
            recorded += 1;
            recorded_here += 1;
            let Some((b, patched)) = record(staged) else {
                continue;
            };
            if b <= limits.capacity {
                if fitting.is_empty() {
                    // Fewer, larger bands run faster.
                    let mut coarser = Vec::new();
                    for rows in COARSER_ROWS {
                        let stage = PatchedStage {
                            rows,
                            ..stage.clone()
                        };
                        match within_budget(&stage).and_then(record) {
                            Some((b, g)) if b <= limits.capacity => coarser.push((stage, g)),
                            _ => break,
                        }
                    }
                    fitting.extend(coarser.into_iter().rev());
                }
                fitting.push((stage, patched));
                if fitting.len() >= MAX_FITTING {
                    return (fitting, closest);
                }
            } else if closest.as_ref().is_none_or(|(c, _, _)| b < *c) {
                closest = Some((b, stage, patched));
            }
        }
    }
    (fitting, closest)
}

/// `stages` in the order of the steps that assemble their outputs, the
/// order `stow verify` applies them in, with the model recorded so.
pub(crate) fn in_step_order(
    decluttered: &Decluttered,
    stages: Vec<PatchedStage>,
    graph: ModelGraph,
    reuse: ReuseOptions,
) -> Result<(Vec<PatchedStage>, ModelGraph), OnnxError> {
    let step_of = |stage: &PatchedStage| {
        graph.ops.iter().position(|op| {
            op.attributes.iter().any(|(k, v)| {
                k == stow_bundle::format::PATCH_ATTR
                    && matches!(v, stow_onnx::Attr::Text(t) if *t == stage.to_record())
            })
        })
    };
    let mut sorted = stages.clone();
    sorted.sort_by_key(|s| step_of(s));
    if sorted == stages {
        return Ok((stages, graph));
    }
    let graph = decluttered.graph(reuse, &sorted)?;
    Ok((sorted, graph))
}

/// Why no stage from the first graph input lowers the peak of `graph`:
/// the first operator, at the peak or after it, that cannot run in bands
/// of rows.
pub(crate) fn why_none(decluttered: &Decluttered, graph: &ModelGraph) -> Option<String> {
    let from = decluttered.input_names().into_iter().next()?;
    graph.ops[graph.peak_step()..]
        .iter()
        .take(64)
        .filter_map(|op| op.outputs.first())
        .find_map(|&t| decluttered.stage_refusal(&from, &graph.tensors[t].name))
}

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
//! planning reports how many bytes are still missing.

use stow_onnx::{Decluttered, ModelGraph, OnnxError, PatchedStage, ReuseOptions, TensorRole};

/// Most stage ends recorded per start, and in all: each costs a
/// recording of the whole model.
const MAX_ENDS: usize = 12;
const MAX_RECORDINGS: usize = 24;

/// Tensors written before the peak tried as a stage's start.
const MAX_FROMS: usize = 16;

/// Rows per step tried once one row fits, fewest steps last.
const COARSER_ROWS: [usize; 3] = [2, 4, 8];

/// Most candidates that fit handed to the planner, which tries them in
/// turn until one is planned within the capacity.
const MAX_FITTING: usize = 6;

/// The smallest lower bound of `graph` over the execution orders tried.
pub(crate) fn bound(graph: &ModelGraph) -> u64 {
    graph
        .order_bounds
        .iter()
        .map(|&(_, b)| b)
        .min()
        .unwrap_or(0)
}

/// Stages for `decluttered` whose bound fits `capacity`, each with the
/// model recorded with it, best first: the first end that fits with the
/// most rows per step that still fit, then with fewer rows, then the
/// next ends that fit. When none fits, the closest candidate alone; when
/// the model fits already or no stage can run in bands, none.
pub(crate) fn choose(
    decluttered: &Decluttered,
    graph: &ModelGraph,
    capacity: u64,
    reuse: ReuseOptions,
) -> Result<Vec<(PatchedStage, ModelGraph)>, OnnxError> {
    if bound(graph) <= capacity || graph.ops.is_empty() {
        return Ok(Vec::new());
    }
    let covering = graph.ops[graph.peak_step()].name.clone();
    let bytes_of = |name: &str| {
        graph
            .tensors
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.bytes)
    };
    let record = |stage: &PatchedStage| {
        // A candidate the rewrite refuses is skipped, not an error: the
        // model still compiles unpatched, or with another stage.
        let patched = decluttered.graph(reuse, std::slice::from_ref(stage)).ok()?;
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
        let mut ends: Vec<(String, u64)> = decluttered
            .stage_ends(&from, &covering)
            .into_iter()
            .filter_map(|to| bytes_of(&to).map(|b| (to, b)))
            .collect();
        // The stage's input lives until its last band is computed, and its
        // output is assembled whole beside it: ends that leave room for
        // both come first, in order; without any, the smallest ends.
        if ends
            .iter()
            .any(|&(_, b)| b.saturating_add(from_bytes) < capacity)
        {
            ends.retain(|&(_, b)| b.saturating_add(from_bytes) < capacity);
        } else {
            ends.sort_by_key(|&(_, b)| b);
        }
        for (to, _) in ends.into_iter().take(MAX_ENDS) {
            if recorded >= MAX_RECORDINGS {
                break;
            }
            recorded += 1;
            let stage = PatchedStage {
                from: from.clone(),
                to,
                rows: 1,
            };
            let Some((b, patched)) = record(&stage) else {
                continue;
            };
            if b <= capacity {
                if fitting.is_empty() {
                    // Fewer, larger bands run faster.
                    let mut coarser = Vec::new();
                    for rows in COARSER_ROWS {
                        let stage = PatchedStage {
                            rows,
                            ..stage.clone()
                        };
                        match record(&stage) {
                            Some((b, g)) if b <= capacity => coarser.push((stage, g)),
                            _ => break,
                        }
                    }
                    fitting.extend(coarser.into_iter().rev());
                }
                fitting.push((stage, patched));
                if fitting.len() >= MAX_FITTING {
                    return Ok(fitting);
                }
            } else if closest.as_ref().is_none_or(|(c, _, _)| b < *c) {
                closest = Some((b, stage, patched));
            }
        }
    }
    if fitting.is_empty() {
        return Ok(closest.map(|(_, s, g)| vec![(s, g)]).unwrap_or_default());
    }
    Ok(fitting)
}

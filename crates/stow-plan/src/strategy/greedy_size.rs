use super::{align_up, ids, PlanError};
use crate::problem::{BufferId, Problem};
use std::cmp::Reverse;

/// Largest first; each buffer takes the smallest gap between already placed
/// conflicting buffers that holds it, or goes on top of them.
pub(super) fn place(problem: &Problem) -> Result<Vec<u64>, PlanError> {
    let n = problem.buffers.len();
    let adj = problem.conflict_lists();
    let mut offsets: Vec<Option<u64>> = problem.buffers.iter().map(|b| b.pinned_offset).collect();
    let mut order: Vec<BufferId> = ids(n).filter(|id| offsets[id.index()].is_none()).collect();
    order.sort_by_key(|id| {
        let b = &problem.buffers[id.index()];
        (Reverse(b.size), b.lifetime.start, id.0)
    });
    let mut taken: Vec<(u64, u64)> = Vec::new();
    for id in order {
        let b = &problem.buffers[id.index()];
        taken.clear();
        for other in &adj[id.index()] {
            if let Some(o) = offsets[other.index()] {
                let size = problem.buffers[other.index()].size;
                if size > 0 {
                    taken.push((o, o.saturating_add(size)));
                }
            }
        }
        taken.sort_unstable();
        offsets[id.index()] = Some(best_gap(&taken, b.size, b.align)?);
    }
    Ok(offsets.into_iter().map(|o| o.unwrap_or(0)).collect())
}

/// The aligned start of the tightest gap in `taken` (sorted by start) that
/// holds `size` bytes, or the aligned top of everything taken.
pub(crate) fn best_gap(taken: &[(u64, u64)], size: u64, align: u64) -> Result<u64, PlanError> {
    let mut best: Option<(u64, u64)> = None; // (gap length, offset)
    let mut cursor = 0u64;
    for &(start, end) in taken {
        let at = align_up(cursor, align)?;
        if start > at && start - at >= size {
            let gap = start - cursor;
            if best.is_none_or(|(g, _)| gap < g) {
                best = Some((gap, at));
            }
        }
        cursor = cursor.max(end);
    }
    match best {
        Some((_, at)) => Ok(at),
        None => align_up(cursor, align),
    }
}

use crate::index::up;
use crate::problem::Problem;

/// Every buffer after the previous one, pinned buffers at their pins.
pub(super) fn place(problem: &Problem) -> Vec<u64> {
    let pinned_top = problem
        .buffers
        .iter()
        .filter_map(|b| b.pinned_offset.map(|o| o.saturating_add(b.size)))
        .max()
        .unwrap_or(0);
    let mut next = pinned_top;
    let mut offsets = Vec::with_capacity(problem.buffers.len());
    for b in &problem.buffers {
        if let Some(o) = b.pinned_offset {
            offsets.push(o);
            continue;
        }
        let at = up(next, b.align);
        next = at.saturating_add(b.size);
        offsets.push(at);
    }
    offsets
}

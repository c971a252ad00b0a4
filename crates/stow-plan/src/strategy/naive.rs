use super::{align_up, PlanError};
use crate::problem::Problem;

/// Every buffer after the previous one, pinned buffers at their pins.
pub(super) fn place(problem: &Problem) -> Result<Vec<u64>, PlanError> {
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
        let at = align_up(next, b.align)?;
        next = at.checked_add(b.size).ok_or(PlanError::Overflow)?;
        offsets.push(at);
    }
    Ok(offsets)
}

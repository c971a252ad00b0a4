//! M3 as a planning strategy: replay the execution order through a
//! [`FirstFitPool`] that may grow, freeing each buffer after its last step.
//!
//! Under an explicit conflict graph the execution order is the id order and
//! buffer `i` is held until the last (highest-id) buffer it conflicts with
//! has been allocated: any later buffer is free to take its bytes. Pinned
//! buffers are reserved at their pins for the whole run.

use super::Budget;
use crate::pool_alloc::FirstFitPool;
use crate::problem::{ConflictModel, Problem};

/// The offsets, or `None` when the budget ran out or a pin lies beyond
/// what the pool can address.
pub(super) fn place(problem: &Problem, budget: Budget) -> Option<Vec<u64>> {
    let n = problem.buffers.len();
    let unit = problem.buffers.iter().map(|b| b.align).max().unwrap_or(1);
    let mut pool = FirstFitPool::unbounded(unit).ok()?;
    let mut offsets = vec![0u64; n];
    // Pinned ranges, rounded out to the pool's unit and merged where they
    // touch, reserved for the whole run.
    let mut pins: Vec<(u64, u64)> = Vec::new();
    for (i, b) in problem.buffers.iter().enumerate() {
        if let Some(o) = b.pinned_offset {
            offsets[i] = o;
            if b.size > 0 {
                let end = o.checked_add(b.size)?.checked_next_multiple_of(unit)?;
                pins.push((o & !(unit - 1), end));
            }
        }
    }
    pins.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (s, e) in pins {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    for (s, e) in merged {
        // Fails only for pins beyond the pool's reach (near 2^63 bytes).
        pool.reserve(s, e - s).ok()?;
    }
    // (time, kind, id): kind 0 frees, 1 allocates, so ends come first.
    let mut events: Vec<(u64, u8, u32)> = Vec::with_capacity(2 * n);
    match &problem.conflicts {
        ConflictModel::Lifetimes => {
            for (i, b) in problem.buffers.iter().enumerate() {
                if b.pinned_offset.is_none() && !problem.is_trivial(i) {
                    events.push((u64::from(b.lifetime.start), 1, i as u32));
                    events.push((u64::from(b.lifetime.end), 0, i as u32));
                }
            }
        }
        ConflictModel::Explicit(_) => {
            let adj = problem.conflict_lists();
            for (i, b) in problem.buffers.iter().enumerate() {
                if b.pinned_offset.is_none() && !problem.is_trivial(i) {
                    let last = adj[i].last().map_or(i, |j| j.index().max(i));
                    events.push((i as u64, 1, i as u32));
                    events.push((last as u64 + 1, 0, i as u32));
                }
            }
        }
    }
    events.sort_unstable();
    for (k, &(_, kind, id)) in events.iter().enumerate() {
        if k % 4096 == 0 && budget.expired() {
            return None;
        }
        let b = &problem.buffers[id as usize];
        if kind == 0 {
            pool.free(offsets[id as usize]).ok()?;
        } else {
            // Fails only when the buffers together approach 2^63 bytes.
            let a = pool.alloc_aligned(b.size, b.align).ok()?;
            offsets[id as usize] = a.offset;
        }
    }
    Some(offsets)
}

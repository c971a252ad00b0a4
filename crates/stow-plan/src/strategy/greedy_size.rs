//! M1: largest first, best-fitting gap among the conflicting buffers
//! already placed. O(n log n + Σ k log k) for lifetimes, where k is the
//! number of placed buffers overlapping each buffer (see [`crate::index`]).

use super::Budget;
use crate::index::{best_gap, PlacedIndex};
use crate::problem::Problem;
use std::cmp::Reverse;

/// Largest first; each buffer takes the smallest gap between already placed
/// conflicting buffers that holds it, or goes on top of them. `None` when
/// the budget runs out first.
pub(super) fn place(problem: &Problem, budget: Budget) -> Option<Vec<u64>> {
    let mut order: Vec<usize> = (0..problem.buffers.len()).collect();
    // Cached keys: a key function reading the buffers would miss the cache
    // on every comparison of a million-buffer sort.
    order.sort_by_cached_key(|&i| {
        let b = &problem.buffers[i];
        (Reverse(b.size), b.lifetime.start)
    });
    place_in_order(problem, &order, budget, |_, _| 0)
}

/// Buffers placed between two looks at the clock: a query can read
/// thousands of placed buffers when that many are live at once (training
/// traces), so the clock is read often enough to stop within milliseconds.
pub(super) const CLOCK_EVERY: usize = 64;

/// Places pinned buffers at their pins, then `order` by best fit; `tie`
/// ranks equal gaps (given the buffer and the one bounding the gap below).
/// `None` when the budget runs out first.
pub(super) fn place_in_order(
    problem: &Problem,
    order: &[usize],
    budget: Budget,
    mut tie: impl FnMut(usize, Option<u32>) -> u64,
) -> Option<Vec<u64>> {
    let mut index = PlacedIndex::new(problem);
    for (i, b) in problem.buffers.iter().enumerate() {
        if let Some(o) = b.pinned_offset {
            index.place(i, o);
        }
    }
    let mut taken = Vec::new();
    for (k, &i) in order.iter().enumerate() {
        if k % CLOCK_EVERY == 0 && budget.expired() {
            return None;
        }
        index.prefetch(order.get(k + 1).copied(), order.get(k + 2).copied());
        if index.is_placed(i) {
            continue;
        }
        let b = &problem.buffers[i];
        let offset = if problem.is_trivial(i) {
            0
        } else {
            index.taken(i, &mut taken);
            best_gap(&taken, b.size, b.align, |below| tie(i, below))
        };
        index.place(i, offset);
    }
    Some(index.into_offsets())
}

//! M2, class 3: operators in decreasing width, where an operator's width is
//! the total size of the tensors that must be in memory while it runs.
//!
//! Under lifetimes an operator is a step, its width the bytes live at that
//! step. Visiting steps widest first and placing each step's not yet placed
//! tensors is the same as visiting tensors by the width of the widest step
//! in their lifetime (found with a range-maximum tree), which keeps this
//! O(n log n). Under an explicit conflict graph, buffer `i` stands for an
//! operator whose tensors are `i` and its neighbours.
//!
//! Each tensor goes into the smallest gap that holds it (best fit by size);
//! among equal gaps, the one whose lower neighbour's lifetime is closest to
//! the tensor's (best fit by time).

use super::greedy_size::place_in_order;
use super::Budget;
use crate::index::Timeline;
use crate::problem::{ConflictModel, Problem};
use std::cmp::Reverse;

/// `None` when the budget runs out first.
pub(super) fn place(problem: &Problem, budget: Budget) -> Option<Vec<u64>> {
    let n = problem.buffers.len();
    // (width, operator) for every buffer.
    let key: Vec<(u64, usize)> = match &problem.conflicts {
        ConflictModel::Lifetimes => {
            let timeline = Timeline::new(problem);
            let live = timeline.live_bytes(problem);
            let tree = MaxTree::new(&live);
            problem
                .buffers
                .iter()
                .map(|b| {
                    if b.lifetime.start >= b.lifetime.end {
                        (0, usize::MAX)
                    } else {
                        tree.argmax(timeline.at(b.lifetime.start), timeline.at(b.lifetime.end))
                    }
                })
                .collect()
        }
        ConflictModel::Explicit(_) => {
            let adj = problem.conflict_lists();
            let width: Vec<u64> = (0..n)
                .map(|i| {
                    adj[i]
                        .iter()
                        .map(|j| problem.buffers[j.index()].size)
                        .fold(problem.buffers[i].size, u64::saturating_add)
                })
                .collect();
            (0..n)
                .map(|i| {
                    let mut best = (width[i], i);
                    for j in &adj[i] {
                        let w = (width[j.index()], j.index());
                        if (w.0, Reverse(w.1)) > (best.0, Reverse(best.1)) {
                            best = w;
                        }
                    }
                    best
                })
                .collect()
        }
    };
    let mut order: Vec<usize> = (0..n).collect();
    // Cached keys, as in greedy-size (ties go to the lower id).
    order.sort_by_cached_key(|&i| {
        (
            Reverse(key[i].0),
            key[i].1,
            Reverse(problem.buffers[i].size),
        )
    });
    let life = |i: usize| problem.buffers[i].lifetime;
    place_in_order(problem, &order, budget, |i, below| match below {
        None => 0,
        Some(j) => {
            let (a, b) = (life(i), life(j as usize));
            u64::from(a.start.abs_diff(b.start)) + u64::from(a.end.abs_diff(b.end))
        }
    })
}

/// Range maximum with the leftmost position of the maximum.
struct MaxTree {
    width: usize,
    tree: Vec<(u64, Reverse<usize>)>,
}

impl MaxTree {
    fn new(values: &[u64]) -> Self {
        let width = values.len().next_power_of_two().max(1);
        let mut tree = vec![(0, Reverse(usize::MAX)); 2 * width];
        for (i, &v) in values.iter().enumerate() {
            tree[width + i] = (v, Reverse(i));
        }
        for i in (1..width).rev() {
            tree[i] = tree[2 * i].max(tree[2 * i + 1]);
        }
        MaxTree { width, tree }
    }

    /// (max, leftmost position) over `[lo, hi)`, which must be non-empty.
    fn argmax(&self, lo: usize, hi: usize) -> (u64, usize) {
        let (mut l, mut r) = (lo + self.width, hi + self.width);
        let mut best = (0, Reverse(usize::MAX));
        while l < r {
            if l & 1 == 1 {
                best = best.max(self.tree[l]);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                best = best.max(self.tree[r]);
            }
            l /= 2;
            r /= 2;
        }
        (best.0, best.1 .0)
    }
}

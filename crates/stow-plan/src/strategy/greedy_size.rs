//! M1: largest first, best-fitting gap among the conflicting buffers
//! already placed. O(n log n + Σ k log k) for lifetimes, where k is the
//! number of placed buffers overlapping each buffer (see [`crate::index`]).
//!
//! A buffer's place depends only on the buffers that overlap it in time
//! and come before it by size, so under lifetimes any order that places
//! each buffer after those gives the same layout. Largest first jumps
//! around in time: on a million-buffer trace nearly every query read
//! index nodes no recent query had touched, and the plan waited on memory
//! (BENCHMARKS.md, "Scale"). [`place_sweeping`] goes through the buffers
//! by start time instead and places the larger overlapping ones a buffer
//! waits for first, so consecutive queries read neighbouring nodes.

use super::Budget;
use crate::index::{best_gap, PlacedIndex, Taken};
use crate::problem::{Buffer, ConflictModel, Problem};
use std::cmp::Reverse;

/// Largest first; each buffer takes the smallest gap between already placed
/// conflicting buffers that holds it, or goes on top of them. `None` when
/// the budget runs out first.
pub(super) fn place(problem: &Problem, budget: Budget) -> Option<Vec<u64>> {
    if sweeps_well(problem) {
        return place_sweeping(problem, budget);
    }
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

/// [`place`] under lifetimes, in a time sweep (see [`sweep`]).
fn place_sweeping(problem: &Problem, budget: Budget) -> Option<Vec<u64>> {
    // Size descending, then start, then id: largest first.
    let size = |i: usize| problem.buffers[i].size;
    sweep(problem, size, budget, |taken, b| {
        best_gap(taken, b.size, b.align, |_| 0)
    })
}

/// Whether [`sweep`] applies to `problem`: lifetimes. It used to pay
/// only from 250,000 buffers with at most 512 live at once; since each
/// query reads only the buffers ranked before it and a waiting buffer is
/// not queried again, it measured as fast as the plain order or faster at
/// every size tried (synthetic 10,000 to 1,000,000 buffers; training
/// traces of 5,000 to 100,000 buffers, thousands live: 0.83–0.89 times
/// the time; BENCHMARKS.md, "Session 44").
pub(super) fn sweeps_well(problem: &Problem) -> bool {
    matches!(problem.conflicts, ConflictModel::Lifetimes)
}

/// Places the buffers of a lifetime problem (pinned ones at their pins)
/// where `fit` puts each given the placed buffers overlapping it, in the
/// order `priority` gives (higher first, then earlier start, then lower
/// id), as a pass over that order would, but in a time sweep: each buffer
/// in order of start, after the unplaced buffers it waits for (those
/// overlapping it and coming first), which wait in turn on a stack. When
/// a buffer is placed, the placed buffers overlapping it are exactly those
/// that come before it (any later one overlapping it would have waited for
/// it), and a buffer's place depends on nothing else, so the layout is the
/// one the order gives. A buffer is queried once: one that waits keeps
/// what its query found, and the buffers it waited for are added; each
/// query reads only the buffers ranked before it
/// ([`PlacedIndex::ranked`]). `None` when the budget runs out first.
pub(super) fn sweep(
    problem: &Problem,
    priority: impl Fn(usize) -> u64,
    budget: Budget,
    mut fit: impl FnMut(&[Taken], &Buffer) -> u64,
) -> Option<Vec<u64>> {
    let n = problem.buffers.len();
    // Pinned buffers first (placed before anything), then the order: the
    // priority, start and id packed in one key.
    let (pinned, free): (Vec<u32>, Vec<u32>) =
        (0..n as u32).partition(|&i| problem.buffers[i as usize].pinned_offset.is_some());
    let mut keys: Vec<u128> = free
        .iter()
        .map(|&i| {
            let b = &problem.buffers[i as usize];
            (u128::from(!priority(i as usize)) << 64)
                | (u128::from(b.lifetime.start) << 32)
                | u128::from(i)
        })
        .collect();
    keys.sort_unstable();
    let mut order = pinned;
    order.extend(keys.iter().map(|&k| k as u32));
    drop(keys);
    let mut rank = vec![0u32; n];
    for (r, &i) in order.iter().enumerate() {
        rank[i as usize] = r as u32;
    }
    drop(order);
    let mut index = PlacedIndex::ranked(problem, &rank);
    for (i, b) in problem.buffers.iter().enumerate() {
        if let Some(o) = b.pinned_offset {
            index.place(i, o);
        } else if problem.is_trivial(i) {
            // Invisible to every query (no bytes, or no lifetime).
            index.place(i, 0);
        }
    }
    let sweep = index.by_start().expect("a lifetime index");
    let (mut taken, mut pending) = (Vec::new(), Vec::new());
    // A buffer that waits keeps what its query found (a frame), and is
    // marked on the stack: once the buffers it waits for are placed, they
    // are the only ones placed since that overlap it (any other would
    // have been ranked before it and unplaced, so among them), and it is
    // placed without a second query.
    // Above every id (ids are u32), so any buffer count works.
    const WAITING: u64 = 1 << 32;
    let mut frames: Vec<(Vec<Taken>, Vec<u64>)> = Vec::new();
    let mut spare: Vec<(Vec<Taken>, Vec<u64>)> = Vec::new();
    let mut stack: Vec<u64> = Vec::new();
    let mut queries = 0usize;
    for &j in &sweep {
        if index.is_placed(j) {
            continue;
        }
        stack.push(j as u64);
        while let Some(&top) = stack.last() {
            let i = (top & !WAITING) as usize;
            if top & WAITING != 0 {
                let (mut found, waited) = frames.pop().expect("a frame per waiting buffer");
                index.push_placed(&waited, &mut found);
                std::mem::swap(&mut taken, &mut found);
                spare.push((found, waited));
            } else {
                if index.is_placed(i) {
                    stack.pop();
                    continue;
                }
                queries += 1;
                if queries.is_multiple_of(CLOCK_EVERY) && budget.expired() {
                    return None;
                }
                index.ranked_before(i, rank[i], &mut taken, &mut pending);
                if !pending.is_empty() {
                    *stack.last_mut().expect("the top") |= WAITING;
                    // Latest start first on the stack, so that the
                    // earliest is placed first: the walk goes on through
                    // time, and neighbouring queries read neighbouring
                    // nodes (0.88 times the time on a million buffers).
                    pending.sort_unstable_by(|a, b| b.cmp(a));
                    stack.extend(pending.iter().map(|&k| u64::from(k as u32)));
                    let (mut t, mut p) = spare.pop().unwrap_or_default();
                    std::mem::swap(&mut t, &mut taken);
                    std::mem::swap(&mut p, &mut pending);
                    frames.push((t, p));
                    continue;
                }
            }
            index.sort_taken(&mut taken);
            let offset = fit(&taken, &problem.buffers[i]);
            index.place(i, offset);
            stack.pop();
        }
    }
    Some(index.into_offsets())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Rng;

    /// Largest first in the plain order, as [`place`] did before the sweep.
    fn largest_first(problem: &Problem) -> Vec<u64> {
        let mut order: Vec<usize> = (0..problem.buffers.len()).collect();
        order.sort_by_key(|&i| {
            let b = &problem.buffers[i];
            (Reverse(b.size), b.lifetime.start, i)
        });
        place_in_order(problem, &order, Budget::unlimited(), |_, _| 0).expect("unlimited")
    }

    /// Random lifetimes with many equal sizes and starts (the order's
    /// ties), long and empty lifetimes, zero sizes, pins and alignments.
    fn random_trace(seed: u64) -> Problem {
        let mut r = Rng::new(seed);
        let n = r.range(1, 400) as usize;
        let steps = r.range(1, 300);
        let buffers = (0..n)
            .map(|_| {
                let start = r.range(0, steps) as u32;
                let len = match r.range(0, 10) {
                    0 => 0,
                    1 => r.range(1, steps + 1),
                    _ => r.range(1, 6),
                } as u32;
                let size = match r.range(0, 12) {
                    0 => 0,
                    1..=5 => 64 * r.range(1, 4),
                    _ => r.range(1, 5_000),
                };
                let align = 1 << r.range(0, 7);
                let mut b = Buffer::new(size, start, start + len, align);
                if r.chance(3) {
                    b.pinned_offset = Some(align * r.range(0, 50));
                }
                b
            })
            .collect();
        Problem::new(buffers, ConflictModel::Lifetimes)
    }

    /// Lowest fit in `order`, one buffer after the other.
    fn lowest_in_order(problem: &Problem, order: &[usize]) -> Vec<u64> {
        let mut index = PlacedIndex::new(problem);
        for (i, b) in problem.buffers.iter().enumerate() {
            if let Some(o) = b.pinned_offset {
                index.place(i, o);
            }
        }
        let mut taken = Vec::new();
        for &i in order {
            if index.is_placed(i) {
                continue;
            }
            let b = &problem.buffers[i];
            let offset = if problem.is_trivial(i) {
                0
            } else {
                index.taken(i, &mut taken);
                crate::index::lowest_gap(&taken, b.size, b.align)
            };
            index.place(i, offset);
        }
        index.into_offsets()
    }

    #[test]
    fn the_sweep_gives_the_layout_of_any_order() {
        for seed in 0..300 {
            let p = random_trace(seed);
            let n = p.buffers.len();
            let mut r = Rng::new(seed ^ 0xABCD);
            let mut order: Vec<usize> = (0..n).collect();
            for k in (1..n).rev() {
                order.swap(k, r.range(0, k as u64 + 1) as usize);
            }
            let mut priority = vec![0u64; n];
            for (k, &i) in order.iter().enumerate() {
                priority[i] = (n - k) as u64;
            }
            let got = sweep(
                &p,
                |i| priority[i],
                Budget::unlimited(),
                |t, b| crate::index::lowest_gap(t, b.size, b.align),
            )
            .expect("unlimited");
            assert_eq!(got, lowest_in_order(&p, &order), "seed {seed}");
        }
    }

    #[test]
    fn the_sweep_gives_the_largest_first_layout() {
        for seed in 0..400 {
            let p = random_trace(seed);
            let want = largest_first(&p);
            let got = place_sweeping(&p, Budget::unlimited()).expect("unlimited");
            assert_eq!(got, want, "seed {seed}");
        }
        // Also a trace shaped like the million-buffer one, across many
        // leaves of the index.
        let p = crate::testing::synthetic_trace(3, 20_000);
        assert_eq!(
            place_sweeping(&p, Budget::unlimited()),
            Some(largest_first(&p))
        );
    }
}

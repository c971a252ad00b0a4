//! Several memories (M2): pool-pinned buffers go to their pool; the others
//! go to the first pool, in preference order, where they still fit (largest
//! first, or in the caller's admission order; best fit against the buffers
//! already in that pool); the last pool
//! takes whatever is left. Each pool's buffers are then planned again with
//! the chosen strategy, keeping that layout when it fits and is smaller.

use super::greedy_size::CLOCK_EVERY;
use super::{arena_of, auto, does_not_fit, plan_arena, Plan, PlanError, PlanOptions, PlanStats};
use crate::index::{best_gap, PlacedIndex};
use crate::problem::{PoolId, Problem};
use std::cmp::Reverse;
use std::time::{Duration, Instant};

/// The time limit is shared: each pool but the last in turn gets a quarter
/// of what is left (its admission pass and both of its plans keep to it),
/// the last pool the rest, after setting aside the final check of the
/// whole plan. Before, the first
/// pool's plans took the whole budget and the last pool, with most of the
/// buffers, got a naive layout after it (3.0 s and 75 times the bound for
/// a 1 s limit at 1,000,000 buffers).
pub(super) fn plan_pools(
    problem: &Problem,
    options: &PlanOptions,
    bound: u64,
    started: Instant,
) -> Result<Plan, PlanError> {
    let n = problem.buffers.len();
    let pools = &problem.pools;
    let mut pool_of: Vec<Option<usize>> = problem
        .buffers
        .iter()
        .map(|b| b.pool.map(PoolId::index))
        .collect();
    let mut offsets = vec![0u64; n];
    let mut pool_bytes = vec![0u64; pools.len()];
    let mut strategy = options.strategy;
    let mut stats = PlanStats::default();
    let mut by_size: Vec<usize> = (0..n).collect();
    by_size.sort_by_key(|&i| {
        let b = &problem.buffers[i];
        (Reverse(b.size), b.lifetime.start, i)
    });
    if let Some(first) = &options.admission {
        let mut listed = vec![false; n];
        let mut order: Vec<usize> = Vec::with_capacity(n);
        for &i in first {
            let i = i as usize;
            if i < n && !listed[i] {
                listed[i] = true;
                order.push(i);
            }
        }
        order.extend(by_size.iter().copied().filter(|&i| !listed[i]));
        by_size = order;
    }
    let end = (started + options.time_limit)
        .checked_sub(auto::check_reserve(problem))
        .unwrap_or(started);
    // `options` with the time up to `deadline`, from now.
    let until = |deadline: Instant| {
        let now = Instant::now();
        let mut o = options.clone();
        o.time_limit = deadline.saturating_duration_since(now);
        (o, now)
    };
    for (p, pool) in pools.iter().enumerate() {
        let last = p + 1 == pools.len();
        let cap = pool.capacity;
        let now = Instant::now();
        // The last pool usually takes most buffers (all that fit nowhere
        // else): every other pool gets a quarter of what is left.
        let left = end.saturating_duration_since(now);
        let share = if last { left } else { left / 4 };
        let phase = now + share;
        if last || cap.is_none() {
            for slot in pool_of.iter_mut().filter(|s| s.is_none()) {
                *slot = Some(p);
            }
        }
        let pinned: Vec<usize> = (0..n).filter(|&i| pool_of[i] == Some(p)).collect();
        // Lay out what must be here first.
        let sub = problem.subproblem(&pinned);
        let sub_bound = crate::lower_bound(&sub);
        let (opts, now) = until(phase);
        let first =
            plan_arena(&sub, &opts, cap, sub_bound, now).map_err(|e| rename(e, &pool.name))?;
        let mut members = pinned.clone();
        let mut layout: Vec<u64> = first.offsets.clone();
        let mut chosen_stats = first.stats;
        strategy = first.strategy;
        if let Some(cap) = cap.filter(|_| !last) {
            // Admit more buffers while they fit.
            let mut index = PlacedIndex::new(problem);
            for (k, &i) in pinned.iter().enumerate() {
                index.place(i, layout[k]);
            }
            let mut taken = Vec::new();
            // Admission stops halfway through the pool's share: what it
            // leaves goes to the next pools, as if it had not fitted.
            let admit_until = Instant::now() + phase.saturating_duration_since(Instant::now()) / 2;
            for (k, &i) in by_size.iter().enumerate() {
                if k % CLOCK_EVERY == 0 && Instant::now() >= admit_until {
                    break;
                }
                if pool_of[i].is_some() {
                    continue;
                }
                let b = &problem.buffers[i];
                index.taken(i, &mut taken);
                let at = match b.pinned_offset {
                    Some(o) => {
                        let end = o.saturating_add(b.size);
                        if b.size > 0 && taken.iter().any(|t| t.start < end && o < t.end) {
                            continue;
                        }
                        o
                    }
                    None if problem.is_trivial(i) => 0,
                    None => best_gap(&taken, b.size, b.align, |_| 0),
                };
                if at.saturating_add(b.size) <= cap {
                    index.place(i, at);
                    pool_of[i] = Some(p);
                    members.push(i);
                    layout.push(at);
                }
            }
            // Plan the pool's final members again with the chosen strategy.
            if members.len() > pinned.len() && Instant::now() + Duration::from_millis(1) < phase {
                let sub = problem.subproblem(&members);
                let sub_bound = crate::lower_bound(&sub);
                let (opts, now) = until(phase);
                if let Ok(again) = plan_arena(&sub, &opts, Some(cap), sub_bound, now) {
                    if arena_of(&sub, &again.offsets)? <= arena_of(&sub, &layout)? {
                        layout = again.offsets;
                        chosen_stats = again.stats;
                        strategy = again.strategy;
                    }
                }
            }
        }
        stats.nodes += chosen_stats.nodes;
        stats.backtracks += chosen_stats.backtracks;
        stats.limit_hit |= chosen_stats.limit_hit;
        let sub = problem.subproblem(&members);
        pool_bytes[p] = arena_of(&sub, &layout)?;
        for (k, &i) in members.iter().enumerate() {
            offsets[i] = layout[k];
        }
    }
    let arena_bytes = pool_bytes
        .iter()
        .try_fold(0u64, |a, &b| a.checked_add(b))
        .ok_or(PlanError::Overflow)?;
    Ok(Plan {
        offsets,
        arena_bytes,
        lower_bound: bound,
        strategy,
        optimal: arena_bytes <= bound,
        stats,
        pool: pool_of
            .into_iter()
            .map(|p| PoolId(p.expect("the last pool takes the rest") as u32))
            .collect(),
        pool_bytes,
    })
}

/// Names the pool in a capacity error from the single-arena planner.
fn rename(e: PlanError, pool: &str) -> PlanError {
    match e {
        PlanError::DoesNotFit {
            needed, capacity, ..
        } => does_not_fit(pool, needed, capacity),
        other => other,
    }
}

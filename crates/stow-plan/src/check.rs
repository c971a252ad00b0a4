//! The independent plan checker.
//!
//! Model: a plan is valid when it has one offset and one pool per buffer;
//! every offset is a multiple of the buffer's alignment; a pinned buffer
//! sits at its pin (and in its pool); every byte range
//! `[offset, offset + size)` ends within its pool's used bytes (the plan's
//! arena size when the problem has no pools) and within the pool's
//! capacity; and no two conflicting buffers with non-zero size in the same
//! pool share a byte.
//!
//! This module uses no strategy code. Under lifetimes it sweeps time with
//! the live byte ranges in an ordered map: while the live ranges are
//! disjoint, a new range can only hit its predecessor or the ranges that
//! start inside it, so a valid plan is confirmed in O(n log n). At the
//! first overlap it falls back to comparing every pair of buffers whose
//! ranges intersect, so that every violation is reported. Explicit graphs
//! are checked edge by edge.

use crate::problem::{BufferId, ConflictModel, PoolId, Problem};
use crate::strategy::Plan;
use std::collections::BTreeMap;
use std::fmt;

/// One way a plan breaks the rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// The plan has a different number of offsets (or pools) than the
    /// problem has buffers.
    WrongLength {
        /// Buffers in the problem.
        expected: usize,
        /// Offsets (or pools) in the plan.
        found: usize,
    },
    /// An offset is not a multiple of the buffer's alignment.
    Misaligned {
        /// The buffer.
        id: BufferId,
        /// Its offset.
        offset: u64,
        /// Its alignment.
        align: u64,
    },
    /// A pinned buffer was moved.
    Unpinned {
        /// The buffer.
        id: BufferId,
        /// Where it had to be.
        pinned: u64,
        /// Where it is.
        offset: u64,
    },
    /// A buffer is in a pool that does not exist, or not in the pool it is
    /// pinned to.
    WrongPool {
        /// The buffer.
        id: BufferId,
        /// The pool it must be in, if pinned to one.
        required: Option<PoolId>,
        /// The pool the plan put it in.
        found: PoolId,
    },
    /// A buffer ends past its pool's used bytes (or the arena size; or its
    /// end overflows).
    OutOfArena {
        /// The buffer.
        id: BufferId,
        /// Its end offset (saturated).
        end: u64,
        /// The arena (or pool) size claimed by the plan.
        arena: u64,
    },
    /// A buffer ends past its pool's capacity.
    OverCapacity {
        /// The buffer.
        id: BufferId,
        /// The pool.
        pool: PoolId,
        /// Its end offset (saturated).
        end: u64,
        /// The pool's capacity.
        capacity: u64,
    },
    /// The plan's arena size is not the sum of its pools' sizes.
    ArenaMismatch {
        /// Arena size claimed.
        arena: u64,
        /// Sum of the pools' sizes.
        pools: u64,
    },
    /// Two conflicting buffers share bytes.
    Overlap {
        /// The first buffer.
        a: BufferId,
        /// The second buffer.
        b: BufferId,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::WrongLength { expected, found } => {
                write!(f, "plan has {found} entries for {expected} buffers")
            }
            Violation::Misaligned { id, offset, align } => {
                write!(
                    f,
                    "buffer {}: offset {offset} is not a multiple of {align}",
                    id.0
                )
            }
            Violation::Unpinned { id, pinned, offset } => {
                write!(
                    f,
                    "buffer {}: pinned at {pinned} but placed at {offset}",
                    id.0
                )
            }
            Violation::WrongPool {
                id,
                required: Some(r),
                found,
            } => write!(
                f,
                "buffer {}: pinned to pool {} but placed in pool {}",
                id.0, r.0, found.0
            ),
            Violation::WrongPool {
                id,
                required: None,
                found,
            } => write!(f, "buffer {}: pool {} does not exist", id.0, found.0),
            Violation::OutOfArena { id, end, arena } => {
                write!(
                    f,
                    "buffer {}: ends at {end}, past the arena of {arena} bytes",
                    id.0
                )
            }
            Violation::OverCapacity {
                id,
                pool,
                end,
                capacity,
            } => write!(
                f,
                "buffer {}: ends at {end}, past the capacity {capacity} of pool {}",
                id.0, pool.0
            ),
            Violation::ArenaMismatch { arena, pools } => write!(
                f,
                "arena of {arena} bytes is not the {pools} bytes its pools add up to"
            ),
            Violation::Overlap { a, b } => {
                write!(f, "buffers {} and {} conflict but share bytes", a.0, b.0)
            }
        }
    }
}

/// Checks `plan` against `problem`, reporting every violation found.
pub fn check(problem: &Problem, plan: &Plan) -> Result<(), Vec<Violation>> {
    let n = problem.buffers.len();
    for found in [plan.offsets.len(), plan.pool.len()] {
        if found != n {
            return Err(vec![Violation::WrongLength { expected: n, found }]);
        }
    }
    let mut violations = Vec::new();
    let pooled = !problem.pools.is_empty();
    if pooled {
        let sum = plan
            .pool_bytes
            .iter()
            .fold(0u64, |a, &b| a.saturating_add(b));
        if plan.pool_bytes.len() != problem.pools.len() || sum != plan.arena_bytes {
            violations.push(Violation::ArenaMismatch {
                arena: plan.arena_bytes,
                pools: sum,
            });
        }
    }
    for (i, b) in problem.buffers.iter().enumerate() {
        let id = BufferId(i as u32);
        let offset = plan.offsets[i];
        let pool = plan.pool[i];
        if b.align == 0 || !offset.is_multiple_of(b.align) {
            violations.push(Violation::Misaligned {
                id,
                offset,
                align: b.align,
            });
        }
        if let Some(pinned) = b.pinned_offset {
            if pinned != offset {
                violations.push(Violation::Unpinned { id, pinned, offset });
            }
        }
        let pools_declared = problem.pools.len().max(1);
        let required = b.pool.filter(|_| pooled);
        if pool.index() >= pools_declared || required.is_some_and(|r| r != pool) {
            violations.push(Violation::WrongPool {
                id,
                required,
                found: pool,
            });
            continue;
        }
        let limit = if pooled {
            plan.pool_bytes.get(pool.index()).copied().unwrap_or(0)
        } else {
            plan.arena_bytes
        };
        let end = offset.checked_add(b.size);
        if end.is_none_or(|e| e > limit) {
            violations.push(Violation::OutOfArena {
                id,
                end: end.unwrap_or(u64::MAX),
                arena: limit,
            });
        }
        if let Some(capacity) = problem.pools.get(pool.index()).and_then(|p| p.capacity) {
            if end.is_none_or(|e| e > capacity) {
                violations.push(Violation::OverCapacity {
                    id,
                    pool,
                    end: end.unwrap_or(u64::MAX),
                    capacity,
                });
            }
        }
    }
    let mut overlaps = match &problem.conflicts {
        ConflictModel::Lifetimes => {
            if lifetimes_disjoint(problem, plan) {
                Vec::new()
            } else {
                all_overlaps(problem, plan)
            }
        }
        ConflictModel::Explicit(adj) => {
            let mut found = Vec::new();
            for (i, list) in adj.iter().enumerate() {
                for j in list {
                    let j = j.index();
                    if j > i && j < n && shares_bytes(problem, plan, i, j) {
                        found.push(pair(i, j));
                    }
                }
            }
            found
        }
    };
    overlaps.sort_unstable();
    overlaps.dedup();
    violations.extend(
        overlaps
            .into_iter()
            .map(|(a, b)| Violation::Overlap { a, b }),
    );
    if violations.is_empty() {
        Ok(())
    } else {
        Err(violations)
    }
}

fn pair(i: usize, j: usize) -> (BufferId, BufferId) {
    (BufferId(i.min(j) as u32), BufferId(i.max(j) as u32))
}

fn range(problem: &Problem, plan: &Plan, i: usize) -> (u64, u64) {
    let o = plan.offsets[i];
    (o, o.saturating_add(problem.buffers[i].size))
}

/// Same pool, both non-empty, byte ranges intersect.
fn shares_bytes(problem: &Problem, plan: &Plan, i: usize, j: usize) -> bool {
    let (a0, a1) = range(problem, plan, i);
    let (b0, b1) = range(problem, plan, j);
    plan.pool[i] == plan.pool[j] && a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1
}

/// Every start and end of a non-empty buffer's lifetime, by step; at equal
/// steps ends come first (half-open lifetimes), then ids in order.
fn lifetime_events(problem: &Problem) -> Vec<(u32, bool, usize)> {
    let live = |b: &crate::problem::Buffer| b.size > 0 && b.lifetime.start < b.lifetime.end;
    let horizon = problem
        .buffers
        .iter()
        .filter(|b| live(b))
        .map(|b| b.lifetime.end as usize)
        .max()
        .unwrap_or(0);
    if horizon > 4 * problem.buffers.len() + 1024 {
        let mut events: Vec<(u32, bool, usize)> = Vec::new();
        for (i, b) in problem.buffers.iter().enumerate().filter(|(_, b)| live(b)) {
            events.push((b.lifetime.start, true, i));
            events.push((b.lifetime.end, false, i));
        }
        events.sort_unstable();
        return events;
    }
    // Dense schedules: a counting sort over (step, end/start) slots.
    let slot = |step: u32, start: bool| 2 * step as usize + usize::from(start);
    let mut first = vec![0usize; 2 * horizon + 3];
    for b in problem.buffers.iter().filter(|b| live(b)) {
        first[slot(b.lifetime.start, true) + 1] += 1;
        first[slot(b.lifetime.end, false) + 1] += 1;
    }
    for k in 1..first.len() {
        first[k] += first[k - 1];
    }
    let mut events = vec![(0u32, false, 0usize); first[first.len() - 1]];
    for (i, b) in problem.buffers.iter().enumerate().filter(|(_, b)| live(b)) {
        for (step, start) in [(b.lifetime.start, true), (b.lifetime.end, false)] {
            let at = &mut first[slot(step, start)];
            events[*at] = (step, start, i);
            *at += 1;
        }
    }
    events
}

/// True when no two time-overlapping buffers share bytes. Sweeps time;
/// the live ranges of each pool are kept in a map keyed by start.
fn lifetimes_disjoint(problem: &Problem, plan: &Plan) -> bool {
    let events = lifetime_events(problem);
    let mut live: BTreeMap<(u32, u64, usize), u64> = BTreeMap::new();
    for (_, start, i) in events {
        let (lo, hi) = range(problem, plan, i);
        let pool = plan.pool[i].0;
        if !start {
            live.remove(&(pool, lo, i));
            continue;
        }
        // The live range starting at or below `lo` with the highest start.
        if let Some((&(p, _, _), &end)) = live.range(..=(pool, lo, usize::MAX)).next_back() {
            if p == pool && end > lo {
                return false;
            }
        }
        // Any live range starting inside [lo, hi).
        if let Some((&(p, s, _), _)) = live.range((pool, lo, 0)..).next() {
            if p == pool && s < hi {
                return false;
            }
        }
        live.insert((pool, lo, i), hi);
    }
    true
}

/// Every conflicting pair sharing bytes: sweep by (pool, offset), comparing
/// each buffer with the ranges still open when it begins.
fn all_overlaps(problem: &Problem, plan: &Plan) -> Vec<(BufferId, BufferId)> {
    let n = problem.buffers.len();
    let mut by_offset: Vec<usize> = (0..n).filter(|&i| problem.buffers[i].size > 0).collect();
    by_offset.sort_unstable_by_key(|&i| (plan.pool[i], plan.offsets[i]));
    let mut open: Vec<usize> = Vec::new();
    let mut found = Vec::new();
    for &i in &by_offset {
        let start = plan.offsets[i];
        open.retain(|&j| plan.pool[j] == plan.pool[i] && range(problem, plan, j).1 > start);
        for &j in &open {
            if problem.buffers[i]
                .lifetime
                .overlaps(&problem.buffers[j].lifetime)
            {
                found.push(pair(i, j));
            }
        }
        open.push(i);
    }
    found
}

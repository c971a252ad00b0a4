//! M4: rectangles placed bottom-aligned in the order of a key; while the
//! top edge exceeds the threshold (the lower bound, or the capacity), the
//! order is rebuilt from risk classes.
//!
//! Classes, against the threshold `T` and the current layout:
//! - *high*: its top is above `T`, or it overlaps in time one that is;
//! - *medium*: its top equals `T`, or it overlaps one that does;
//! - *low*: it overlaps a high or medium one;
//! - *none*: the rest.
//!
//! High and medium buffers are clustered into groups by time overlap
//! (connected runs of overlapping lifetimes; components of the conflict
//! graph). Each group in turn is re-tuned on top of what is already placed:
//! every key order of the group is tried and the one with the lowest top is
//! kept. Low and no-risk buffers follow in their previous order. Rounds
//! stop at the threshold, when an order repeats, after the round limit, or
//! when the time budget runs out. The best layout seen is returned.

use super::greedy_size::{sweep, sweeps_well, CLOCK_EVERY};
use super::Budget;
use crate::index::{lowest_gap, PlacedIndex, Taken, Timeline};
use crate::problem::{ConflictModel, Problem};
use std::cmp::Reverse;
use std::collections::HashSet;

#[derive(Clone, Copy)]
enum Key {
    Size,
    Area,
    Length,
    Overlap,
}

const KEYS: [Key; 4] = [Key::Size, Key::Area, Key::Length, Key::Overlap];

struct Keys {
    size: Vec<u64>,
    length: Vec<u64>,
    overlap: Vec<u128>,
}

impl Keys {
    fn new(problem: &Problem) -> Self {
        let size: Vec<u64> = problem.buffers.iter().map(|b| b.size).collect();
        let (length, overlap) = match &problem.conflicts {
            ConflictModel::Lifetimes => {
                let tl = Timeline::new(problem);
                let live = tl.live_bytes(problem);
                // prefix[i]: Σ live × duration over segments before i.
                let mut prefix = vec![0u128; live.len() + 1];
                for (i, &l) in live.iter().enumerate() {
                    let dur = u128::from(tl.points[i + 1] - tl.points[i]);
                    prefix[i + 1] = prefix[i] + u128::from(l) * dur;
                }
                let length = problem
                    .buffers
                    .iter()
                    .map(|b| u64::from(b.lifetime.end.saturating_sub(b.lifetime.start)))
                    .collect();
                let overlap = problem
                    .buffers
                    .iter()
                    .map(|b| {
                        if b.lifetime.start >= b.lifetime.end {
                            0
                        } else {
                            prefix[tl.at(b.lifetime.end)] - prefix[tl.at(b.lifetime.start)]
                        }
                    })
                    .collect();
                (length, overlap)
            }
            ConflictModel::Explicit(_) => {
                let adj = problem.conflict_lists();
                let overlap = adj
                    .iter()
                    .map(|l| l.iter().map(|j| u128::from(size[j.index()])).sum())
                    .collect();
                (vec![1; problem.buffers.len()], overlap)
            }
        };
        Keys {
            size,
            length,
            overlap,
        }
    }

    fn sort(&self, ids: &mut [usize], key: Key) {
        match key {
            Key::Size => by_key(ids, |i| (Reverse(self.size[i]), Reverse(self.length[i]), i)),
            Key::Area => by_key(ids, |i| {
                (
                    Reverse(u128::from(self.size[i]) * u128::from(self.length[i])),
                    Reverse(self.size[i]),
                    i,
                )
            }),
            Key::Length => by_key(ids, |i| (Reverse(self.length[i]), Reverse(self.size[i]), i)),
            Key::Overlap => by_key(ids, |i| {
                (Reverse(self.overlap[i]), Reverse(self.size[i]), i)
            }),
        }
    }
}

/// Sorts `ids` by `key`, each key computed once (a comparison reading
/// three arrays at two random places took a tenth of peak-suppression's
/// first layouts on a million buffers). The keys end with the id, so the
/// order is total and the same as a stable sort's.
fn by_key<K: Ord>(ids: &mut [usize], key: impl Fn(usize) -> K) {
    let mut keyed: Vec<(K, usize)> = ids.iter().map(|&i| (key(i), i)).collect();
    keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    for (slot, (_, i)) in ids.iter_mut().zip(keyed) {
        *slot = i;
    }
}

/// Lowest-fit placement of `order` onto whatever `index` already holds;
/// returns the highest top among `order`, or `None` when the budget runs
/// out first (the index then holds part of `order`).
fn drop_in(
    problem: &Problem,
    index: &mut PlacedIndex,
    order: &[usize],
    taken: &mut Vec<Taken>,
    budget: Budget,
) -> Option<u64> {
    let mut top = 0u64;
    for (k, &i) in order.iter().enumerate() {
        if k % CLOCK_EVERY == 0 && budget.expired() {
            return None;
        }
        if index.is_placed(i) {
            continue;
        }
        let b = &problem.buffers[i];
        let offset = if problem.is_trivial(i) {
            0
        } else {
            index.taken(i, taken);
            lowest_gap(taken, b.size, b.align)
        };
        index.place(i, offset);
        top = top.max(offset.saturating_add(b.size));
    }
    Some(top)
}

fn fresh<'p>(problem: &'p Problem) -> PlacedIndex<'p> {
    let mut index = PlacedIndex::new(problem);
    for (i, b) in problem.buffers.iter().enumerate() {
        if let Some(o) = b.pinned_offset {
            index.place(i, o);
        }
    }
    index
}

fn layout(
    problem: &Problem,
    order: &[usize],
    taken: &mut Vec<Taken>,
    budget: Budget,
    sweeping: bool,
) -> Option<(Vec<u64>, u64)> {
    let offsets = if sweeping {
        // The same layout as dropping in `order`, with neighbouring
        // queries one after the other (see `greedy_size::sweep`).
        let n = order.len() as u64;
        let mut priority = vec![0u64; problem.buffers.len()];
        for (k, &i) in order.iter().enumerate() {
            priority[i] = n - k as u64;
        }
        sweep(
            problem,
            |i| priority[i],
            budget,
            |taken, b| lowest_gap(taken, b.size, b.align),
        )?
    } else {
        let mut index = fresh(problem);
        drop_in(problem, &mut index, order, taken, budget)?;
        index.into_offsets()
    };
    let h = super::height(problem, &offsets);
    Some((offsets, h))
}

/// Returns (offsets, rounds run, whether the budget stopped it). The
/// first layout runs under `first` (the whole time limit alone, where the
/// caller has no other layout to fall back on), the rest under `budget`;
/// offsets are `None` only when `first` ran out before one layout was
/// complete.
pub(super) fn place(
    problem: &Problem,
    threshold: u64,
    max_rounds: u32,
    first: Budget,
    budget: Budget,
) -> (Option<Vec<u64>>, u32, bool) {
    let n = problem.buffers.len();
    let keys = Keys::new(problem);
    let all: Vec<usize> = (0..n).collect();
    let mut taken = Vec::new();
    let mut best: Option<(u64, Vec<u64>, Vec<usize>)> = None;
    let sweeping = sweeps_well(problem);
    for key in KEYS {
        let mut order = all.clone();
        keys.sort(&mut order, key);
        let limit = if best.is_none() { first } else { budget };
        let Some((offsets, h)) = layout(problem, &order, &mut taken, limit, sweeping) else {
            return (best.map(|(_, offsets, _)| offsets), 0, true);
        };
        if best.as_ref().is_none_or(|b| h < b.0) {
            best = Some((h, offsets, order));
        }
        if best.as_ref().is_some_and(|b| b.0 <= threshold) || budget.expired() {
            let (_, offsets, _) = best.expect("set above");
            return (Some(offsets), 0, budget.expired());
        }
    }
    let (mut best_h, mut best_offsets, mut order) = best.expect("four keys tried");
    let mut offsets = best_offsets.clone();
    let mut seen: HashSet<Vec<usize>> = HashSet::new();
    seen.insert(order.clone());
    let mut rounds = 0;
    while rounds < max_rounds && best_h > threshold {
        if budget.expired() {
            return (Some(best_offsets), rounds, true);
        }
        rounds += 1;
        let class = classify(problem, &offsets, threshold);
        let groups = group(problem, &class);
        let mut index = fresh(problem);
        let mut next: Vec<usize> = Vec::with_capacity(n);
        for g in groups {
            // Try every key order of the group on top of what is placed.
            let mut best_g: Option<(u64, Vec<usize>)> = None;
            let mut candidates: Vec<Vec<usize>> = Vec::new();
            // The group in its previous relative order first.
            candidates.push(g.clone());
            for k in 0..KEYS.len() {
                let mut c = g.clone();
                keys.sort(&mut c, KEYS[(k + rounds as usize) % KEYS.len()]);
                candidates.push(c);
            }
            for c in candidates {
                let Some(top) = drop_in(problem, &mut index, &c, &mut taken, budget) else {
                    return (Some(best_offsets), rounds, true);
                };
                for &i in &c {
                    if problem.buffers[i].pinned_offset.is_none() {
                        index.unplace(i);
                    }
                }
                if best_g.as_ref().is_none_or(|b| top < b.0) {
                    best_g = Some((top, c));
                }
            }
            let (_, c) = best_g.expect("at least one candidate");
            if drop_in(problem, &mut index, &c, &mut taken, budget).is_none() {
                return (Some(best_offsets), rounds, true);
            }
            next.extend(c);
        }
        let rest: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&i| class[i] >= Risk::Low)
            .collect();
        if drop_in(problem, &mut index, &rest, &mut taken, budget).is_none() {
            return (Some(best_offsets), rounds, true);
        }
        next.extend(rest);
        offsets = index.into_offsets();
        let h = super::height(problem, &offsets);
        if h < best_h {
            best_h = h;
            best_offsets = offsets.clone();
        }
        if !seen.insert(next.clone()) {
            break;
        }
        order = next;
    }
    (Some(best_offsets), rounds, false)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Risk {
    High,
    Medium,
    Low,
    None,
}

fn classify(problem: &Problem, offsets: &[u64], threshold: u64) -> Vec<Risk> {
    let n = problem.buffers.len();
    let top = |i: usize| offsets[i].saturating_add(problem.buffers[i].size);
    let above: Vec<bool> = (0..n)
        .map(|i| !problem.is_trivial(i) && top(i) > threshold)
        .collect();
    let at: Vec<bool> = (0..n)
        .map(|i| !problem.is_trivial(i) && top(i) == threshold)
        .collect();
    let near_above = touches(problem, &above);
    let near_at = touches(problem, &at);
    let mut class: Vec<Risk> = (0..n)
        .map(|i| {
            if above[i] || near_above[i] {
                Risk::High
            } else if at[i] || near_at[i] {
                Risk::Medium
            } else {
                Risk::None
            }
        })
        .collect();
    let hm: Vec<bool> = class.iter().map(|&c| c <= Risk::Medium).collect();
    let near_hm = touches(problem, &hm);
    for i in 0..n {
        if class[i] == Risk::None && near_hm[i] {
            class[i] = Risk::Low;
        }
    }
    class
}

/// For every buffer, whether it conflicts with some buffer in `set`.
fn touches(problem: &Problem, set: &[bool]) -> Vec<bool> {
    let n = problem.buffers.len();
    match &problem.conflicts {
        ConflictModel::Lifetimes => {
            let tl = Timeline::new(problem);
            let mut cover = vec![0i64; tl.points.len() + 1];
            for i in (0..n).filter(|&i| set[i] && !problem.is_trivial(i)) {
                let l = problem.buffers[i].lifetime;
                cover[tl.at(l.start)] += 1;
                cover[tl.at(l.end)] -= 1;
            }
            // covered_prefix[k]: segments before k with coverage > 0.
            let mut covered_prefix = vec![0u32; tl.segments() + 1];
            let mut acc = 0i64;
            for k in 0..tl.segments() {
                acc += cover[k];
                covered_prefix[k + 1] = covered_prefix[k] + u32::from(acc > 0);
            }
            (0..n)
                .map(|i| {
                    if problem.is_trivial(i) {
                        return false;
                    }
                    let l = problem.buffers[i].lifetime;
                    covered_prefix[tl.at(l.end)] > covered_prefix[tl.at(l.start)]
                })
                .collect()
        }
        ConflictModel::Explicit(_) => {
            let adj = problem.conflict_lists();
            (0..n)
                .map(|i| adj[i].iter().any(|j| set[j.index()]))
                .collect()
        }
    }
}

/// High and medium buffers clustered by time overlap, biggest group first.
fn group(problem: &Problem, class: &[Risk]) -> Vec<Vec<usize>> {
    let n = problem.buffers.len();
    let members: Vec<usize> = (0..n)
        .filter(|&i| class[i] <= Risk::Medium && problem.buffers[i].pinned_offset.is_none())
        .collect();
    let mut groups: Vec<Vec<usize>> = match &problem.conflicts {
        ConflictModel::Lifetimes => {
            let mut by_start = members;
            by_start.sort_by_key(|&i| (problem.buffers[i].lifetime.start, i));
            let mut groups: Vec<Vec<usize>> = Vec::new();
            let mut reach = 0u32;
            for i in by_start {
                let l = problem.buffers[i].lifetime;
                match groups.last_mut() {
                    Some(g) if l.start < reach => g.push(i),
                    _ => groups.push(vec![i]),
                }
                reach = reach.max(l.end);
            }
            groups
        }
        ConflictModel::Explicit(_) => {
            let adj = problem.conflict_lists();
            let mut inset = vec![false; n];
            for &i in &members {
                inset[i] = true;
            }
            let mut seen = vec![false; n];
            let mut groups = Vec::new();
            for &s in &members {
                if seen[s] {
                    continue;
                }
                seen[s] = true;
                let mut g = vec![s];
                let mut k = 0;
                while k < g.len() {
                    for j in &adj[g[k]] {
                        if inset[j.index()] && !seen[j.index()] {
                            seen[j.index()] = true;
                            g.push(j.index());
                        }
                    }
                    k += 1;
                }
                groups.push(g);
            }
            groups
        }
    };
    groups.sort_by_key(|g| {
        Reverse(
            g.iter()
                .map(|&i| problem.buffers[i].size)
                .fold(0u64, u64::saturating_add),
        )
    });
    groups
}

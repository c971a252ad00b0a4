//! Lower bounds on the arena of any valid plan.
//!
//! - Lifetimes: the largest total size live at one step (every set of
//!   buffers live together must be stacked).
//! - Explicit graphs: the weight of the heaviest clique. Graphs of up to
//!   [`EXACT_CLIQUE_LIMIT`] non-trivial vertices (per connected component)
//!   are solved exactly by branch and bound; larger ones use the heaviest of
//!   the greedy cliques grown from every vertex. Any clique is a valid
//!   bound, so a search cut short by its node limit still returns one.
//! - In both cases, a pinned buffer's end, and the largest buffer.

use crate::problem::{BufferId, ConflictModel, Problem};
use std::cmp::Reverse;

/// Components of at most this many vertices get the exact heaviest clique.
pub const EXACT_CLIQUE_LIMIT: usize = 64;

/// Search nodes the exact clique search may visit per component.
const CLIQUE_NODE_LIMIT: u64 = 2_000_000;

/// A lower bound on the arena size of any valid plan for `problem`.
pub fn lower_bound(problem: &Problem) -> u64 {
    let pinned = problem
        .buffers
        .iter()
        .filter_map(|b| b.pinned_offset.map(|o| o.saturating_add(b.size)))
        .max()
        .unwrap_or(0);
    // Every buffer needs its bytes somewhere, even one that conflicts with
    // nothing.
    let largest = problem.buffers.iter().map(|b| b.size).max().unwrap_or(0);
    let core = match &problem.conflicts {
        ConflictModel::Lifetimes => max_live(problem),
        ConflictModel::Explicit(_) => heaviest_clique(problem),
    };
    core.max(pinned).max(largest)
}

fn max_live(problem: &Problem) -> u64 {
    peak_live(problem, |b| i128::from(b.size))
}

/// The most buffers live at one step (lifetimes only).
pub(crate) fn max_live_count(problem: &Problem) -> u64 {
    peak_live(problem, |_| 1)
}

/// The largest total `weight` of the non-empty buffers live at one step.
fn peak_live(problem: &Problem, weight: impl Fn(&crate::problem::Buffer) -> i128) -> u64 {
    let live = |b: &&crate::problem::Buffer| b.lifetime.start < b.lifetime.end && b.size > 0;
    let horizon = problem
        .buffers
        .iter()
        .filter(live)
        .map(|b| b.lifetime.end as usize)
        .max()
        .unwrap_or(0);
    // Dense schedules (the usual case: one step per operator) take a
    // difference array; sparse step numbers fall back to sorting events.
    if horizon <= 4 * problem.buffers.len() + 1024 {
        let mut diff = vec![0i128; horizon + 1];
        for b in problem.buffers.iter().filter(live) {
            diff[b.lifetime.start as usize] += weight(b);
            diff[b.lifetime.end as usize] -= weight(b);
        }
        let (mut now, mut best) = (0i128, 0i128);
        for d in diff {
            now += d;
            best = best.max(now);
        }
        return u64::try_from(best).unwrap_or(u64::MAX);
    }
    let mut events: Vec<(u32, i128)> = Vec::with_capacity(problem.buffers.len() * 2);
    for b in problem.buffers.iter().filter(live) {
        events.push((b.lifetime.start, weight(b)));
        events.push((b.lifetime.end, -weight(b)));
    }
    // Ends sort before starts at the same step: half-open intervals.
    events.sort_unstable_by_key(|&(t, d)| (t, d > 0));
    let (mut now, mut best) = (0i128, 0i128);
    for (_, d) in events {
        now += d;
        best = best.max(now);
    }
    u64::try_from(best).unwrap_or(u64::MAX)
}

/// The heaviest clique: exact per small component, greedy otherwise.
pub(crate) fn heaviest_clique(problem: &Problem) -> u64 {
    let adj = problem.conflict_lists();
    let n = adj.len();
    let size = |i: usize| problem.buffers[i].size;
    let mut best = problem.buffers.iter().map(|b| b.size).max().unwrap_or(0);
    let mut seen = vec![false; n];
    for s in 0..n {
        if seen[s] || size(s) == 0 {
            continue;
        }
        seen[s] = true;
        let mut comp = vec![s];
        let mut k = 0;
        while k < comp.len() {
            for j in &adj[comp[k]] {
                if !seen[j.index()] && size(j.index()) > 0 {
                    seen[j.index()] = true;
                    comp.push(j.index());
                }
            }
            k += 1;
        }
        let greedy = greedy_clique(problem, &adj, &comp);
        let w = if comp.len() <= EXACT_CLIQUE_LIMIT {
            exact_clique(problem, &adj, &comp, greedy)
        } else {
            greedy
        };
        best = best.max(w);
    }
    best
}

fn greedy_clique(problem: &Problem, adj: &[Vec<BufferId>], comp: &[usize]) -> u64 {
    let size = |i: usize| problem.buffers[i].size;
    let mut best = 0;
    for &seed in comp {
        let mut clique = vec![seed];
        let mut candidates: Vec<usize> = adj[seed].iter().map(|b| b.index()).collect();
        candidates.sort_by_key(|&c| (Reverse(size(c)), c));
        for c in candidates {
            if clique
                .iter()
                .all(|&m| adj[m].binary_search(&BufferId(c as u32)).is_ok())
            {
                clique.push(c);
            }
        }
        let total = clique
            .iter()
            .map(|&m| size(m))
            .fold(0u64, u64::saturating_add);
        best = best.max(total);
    }
    best
}

/// Branch and bound over 64-bit vertex sets: the bound of a branch is the
/// weight so far plus the weight of every remaining candidate.
fn exact_clique(problem: &Problem, adj: &[Vec<BufferId>], comp: &[usize], start: u64) -> u64 {
    let m = comp.len();
    // Heaviest first makes good cliques appear early.
    let mut verts = comp.to_vec();
    verts.sort_by_key(|&v| (Reverse(problem.buffers[v].size), v));
    let mut local = std::collections::HashMap::with_capacity(m);
    for (k, &v) in verts.iter().enumerate() {
        local.insert(v, k);
    }
    let w: Vec<u64> = verts.iter().map(|&v| problem.buffers[v].size).collect();
    let nbr: Vec<u64> = verts
        .iter()
        .map(|&v| {
            adj[v]
                .iter()
                .filter_map(|j| local.get(&j.index()))
                .fold(0u64, |acc, &k| acc | (1u64 << k))
        })
        .collect();
    let mut best = start;
    let mut nodes = 0u64;
    let all = if m == 64 { u64::MAX } else { (1u64 << m) - 1 };
    expand(&w, &nbr, 0, all, &mut best, &mut nodes);
    best
}

fn expand(w: &[u64], nbr: &[u64], weight: u64, mut cands: u64, best: &mut u64, nodes: &mut u64) {
    *nodes += 1;
    if *nodes > CLIQUE_NODE_LIMIT {
        return;
    }
    if cands == 0 {
        *best = (*best).max(weight);
        return;
    }
    let mut rest: u64 = bits(cands).map(|v| w[v]).fold(0, u64::saturating_add);
    while cands != 0 {
        if weight.saturating_add(rest) <= *best {
            return;
        }
        let v = cands.trailing_zeros() as usize;
        cands &= !(1u64 << v);
        rest -= w[v];
        expand(
            w,
            nbr,
            weight.saturating_add(w[v]),
            cands & nbr[v],
            best,
            nodes,
        );
    }
    *best = (*best).max(weight);
}

fn bits(mut x: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if x == 0 {
            None
        } else {
            let v = x.trailing_zeros() as usize;
            x &= x - 1;
            Some(v)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::Buffer;

    fn graph(sizes: &[u64], edges: &[(u32, u32)]) -> Problem {
        let mut adj = vec![Vec::new(); sizes.len()];
        for &(a, b) in edges {
            adj[a as usize].push(BufferId(b));
            adj[b as usize].push(BufferId(a));
        }
        Problem::new(
            sizes.iter().map(|&s| Buffer::new(s, 0, 1, 1)).collect(),
            ConflictModel::Explicit(adj),
        )
    }

    #[test]
    fn exact_beats_greedy_when_greedy_is_misled() {
        // A 4-clique of 3s (12), each member also tied to its own 5: greedy
        // from any vertex takes the 5 first and stops at 8.
        let mut edges = vec![(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)];
        edges.extend((0..4).map(|i| (i, i + 4)));
        let p = graph(&[3, 3, 3, 3, 5, 5, 5, 5], &edges);
        let adj = p.conflict_lists();
        assert_eq!(greedy_clique(&p, &adj, &[0, 1, 2, 3, 4, 5, 6, 7]), 8);
        assert_eq!(lower_bound(&p), 12);
    }

    #[test]
    fn exact_clique_matches_brute_force() {
        let mut state = 7u64;
        let mut rnd = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..40 {
            let n = 2 + (rnd() % 12) as usize;
            let sizes: Vec<u64> = (0..n).map(|_| 1 + rnd() % 20).collect();
            let mut edges = Vec::new();
            for a in 0..n as u32 {
                for b in a + 1..n as u32 {
                    if rnd() % 2 == 0 {
                        edges.push((a, b));
                    }
                }
            }
            let p = graph(&sizes, &edges);
            let adj = p.conflict_lists();
            let mut brute = 0;
            for mask in 1u32..(1 << n) {
                let vs: Vec<usize> = (0..n).filter(|&v| mask >> v & 1 == 1).collect();
                let clique = vs.iter().all(|&a| {
                    vs.iter()
                        .all(|&b| a == b || adj[a].contains(&BufferId(b as u32)))
                });
                if clique {
                    brute = brute.max(vs.iter().map(|&v| sizes[v]).sum());
                }
            }
            assert_eq!(lower_bound(&p), brute);
        }
    }
}

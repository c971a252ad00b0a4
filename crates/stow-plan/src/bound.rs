use crate::problem::{ConflictModel, Problem};

/// A lower bound on the arena size of any valid plan for `problem`.
///
/// For lifetimes: the largest total size live at one step (exact in the sense
/// that no layout can be smaller). For an explicit conflict graph: the
/// heaviest clique found by a greedy pass from every vertex (a valid bound,
/// not always the heaviest clique).
pub fn lower_bound(problem: &Problem) -> u64 {
    match &problem.conflicts {
        ConflictModel::Lifetimes => max_live(problem),
        ConflictModel::Explicit(_) => greedy_clique(problem),
    }
}

fn max_live(problem: &Problem) -> u64 {
    let mut events: Vec<(u32, i128)> = Vec::with_capacity(problem.buffers.len() * 2);
    for b in &problem.buffers {
        if b.lifetime.start < b.lifetime.end {
            events.push((b.lifetime.start, b.size as i128));
            events.push((b.lifetime.end, -(b.size as i128)));
        }
    }
    // Ends sort before starts at the same step: half-open intervals.
    events.sort_unstable_by_key(|&(t, d)| (t, d > 0));
    let (mut live, mut best) = (0i128, 0i128);
    for (_, d) in events {
        live += d;
        best = best.max(live);
    }
    u64::try_from(best).unwrap_or(u64::MAX)
}

fn greedy_clique(problem: &Problem) -> u64 {
    let adj = problem.conflict_lists();
    let size = |i: usize| problem.buffers[i].size;
    let mut best = problem.buffers.iter().map(|b| b.size).max().unwrap_or(0);
    for seed in 0..adj.len() {
        let mut clique = vec![seed];
        let mut candidates: Vec<usize> = adj[seed].iter().map(|b| b.index()).collect();
        candidates.sort_by_key(|&c| std::cmp::Reverse(size(c)));
        for c in candidates {
            if clique
                .iter()
                .all(|&m| adj[m].binary_search(&crate::BufferId(c as u32)).is_ok())
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

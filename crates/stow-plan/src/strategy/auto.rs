//! The portfolio: cheap constructive strategies first, then the iterative
//! and searching ones with whatever time is left. A result replaces the
//! best so far only if it is smaller *and* passes the checker. The run
//! stops as soon as the best meets the target (the lower bound, or the
//! capacity when one is given).

use super::{
    first_fit, greedy_breadth, greedy_size, height, naive, peak, search, Attempt, Budget,
    PlanError, PlanStats, Strategy, Trial,
};
use crate::problem::{PoolId, Problem};
use crate::{check, Plan, PlanOptions};
use std::time::Instant;

/// Above this many buffers the portfolio changes its order (see below).
const LARGE: usize = 100_000;

pub(super) fn run(
    problem: &Problem,
    options: &PlanOptions,
    target: u64,
    bound: u64,
    deadline: Instant,
) -> Result<Attempt, PlanError> {
    let mut best: Option<Attempt> = None;
    let mut trials: Vec<Trial> = Vec::new();
    let mut extra = PlanStats::default();
    let budget = Budget::until(deadline);
    let mut order = vec![
        Strategy::GreedySize,
        Strategy::GreedyBreadth,
        Strategy::Naive,
        Strategy::FirstFitPool,
        Strategy::PeakSuppression,
        Strategy::Search,
    ];
    if problem.buffers.len() > LARGE {
        // One constructive pass then takes about the whole default budget,
        // and peak suppression's first pass (lowest fit by size) packs
        // large traces tighter than best fit: run it first.
        order.retain(|&s| s != Strategy::PeakSuppression);
        order.insert(0, Strategy::PeakSuppression);
    }
    for (k, strategy) in order.into_iter().enumerate() {
        let best_h = best.as_ref().map(|b| height(problem, &b.offsets));
        if best_h.is_some_and(|h| h <= target) || (k > 0 && budget.expired()) {
            break;
        }
        let started = Instant::now();
        let attempt: Option<Attempt> = match strategy {
            Strategy::GreedySize => Some(plain(strategy, greedy_size::place(problem))),
            Strategy::GreedyBreadth => Some(plain(strategy, greedy_breadth::place(problem))),
            Strategy::Naive => Some(plain(strategy, naive::place(problem))),
            Strategy::FirstFitPool => first_fit::place(problem, budget).map(|o| plain(strategy, o)),
            Strategy::PeakSuppression => {
                let (offsets, rounds, limit_hit) =
                    peak::place(problem, target, options.peak_rounds, budget);
                extra.rounds = rounds;
                extra.limit_hit |= limit_hit;
                Some(plain(strategy, offsets))
            }
            Strategy::Search => {
                let seed = best
                    .as_ref()
                    .map_or_else(|| greedy_size::place(problem), |b| b.offsets.clone());
                let a = search::run(problem, options, seed, target, bound, deadline);
                extra.nodes = a.stats.nodes;
                extra.backtracks = a.stats.backtracks;
                extra.limit_hit |= a.stats.limit_hit;
                Some(a)
            }
            Strategy::Auto => unreachable!("auto does not run itself"),
        };
        let elapsed = started.elapsed();
        let Some(attempt) = attempt else {
            trials.push(Trial {
                strategy,
                arena_bytes: None,
                elapsed,
            });
            extra.limit_hit = true;
            continue;
        };
        let h = height(problem, &attempt.offsets);
        trials.push(Trial {
            strategy,
            arena_bytes: Some(h),
            elapsed,
        });
        let improves = best_h.is_none_or(|b| h < b);
        let proves = attempt.proven_optimal && best_h.is_some_and(|b| h == b);
        if improves && valid(problem, &attempt.offsets, h, bound) {
            best = Some(attempt);
        } else if proves {
            // The search proved the current best optimal without beating it.
            if let Some(b) = best.as_mut() {
                b.proven_optimal = true;
            }
        }
    }
    let mut best = best.ok_or(PlanError::Overflow)?;
    best.stats = PlanStats { trials, ..extra };
    Ok(best)
}

fn plain(strategy: Strategy, offsets: Vec<u64>) -> Attempt {
    Attempt {
        offsets,
        strategy,
        proven_optimal: false,
        stats: PlanStats::default(),
    }
}

fn valid(problem: &Problem, offsets: &[u64], arena: u64, bound: u64) -> bool {
    let plan = Plan {
        offsets: offsets.to_vec(),
        arena_bytes: arena,
        lower_bound: bound,
        strategy: Strategy::Auto,
        optimal: false,
        stats: PlanStats::default(),
        pool: vec![PoolId(0); problem.buffers.len()],
        pool_bytes: vec![arena],
    };
    check(problem, &plan).is_ok()
}

//! The portfolio: cheap constructive strategies first, then the iterative
//! and searching ones with whatever time is left. The smallest result that
//! passes the checker wins. The run stops as soon as the best meets the
//! target (the lower bound, or the capacity when one is given).
//!
//! The time limit holds at any size, the final check included: every
//! strategy stops when its share of the budget is gone (the constructive
//! passes look at the clock every few dozen buffers), a naive layout is
//! always there to fall back on, and time for checking the winner is set
//! aside before anything runs (an estimate at first, then the measured
//! time of the first check). Without that, a constructive pass on a trace
//! with thousands of buffers live at once took 12 s under a 1 s limit.

use super::{
    first_fit, greedy_breadth, greedy_size, height, naive, peak, search, Attempt, Budget,
    PlanError, PlanStats, Strategy, Trial,
};
use crate::bound::max_live_count;
use crate::problem::{ConflictModel, PoolId, Problem};
use crate::{check, Plan, PlanOptions};
use std::time::{Duration, Instant};

/// Above this many buffers the portfolio changes its order (see below).
const LARGE: usize = 100_000;

/// Above this many (buffer, live buffer) pairs, best fit's queries (each
/// reads every placed buffer live with the one being placed) cost seconds:
/// a 61,916-buffer training trace with ~10,000 buffers live at once took
/// 12 s in greedy-size.
const HEAVY_PAIRS: u64 = 100_000_000;

/// Time per unit of the checker's work (a buffer times the bit length of
/// the most buffers live at once), set aside before the first check has
/// been measured: 36 ns at 1,000,000 synthetic buffers and 44 ns at 61,916
/// training ones were measured at load 4 (BENCHMARKS.md, "Time limit at
/// scale"). Setting aside more shuts out the first-fit pass at 1,000,000
/// buffers, the one layout better than naive that fits in 1 s there.
const CHECK_NS_PER_UNIT: u64 = 50;

/// What a strategy spends before its first look at the clock (sorting,
/// building the index), per buffer: a strategy starts only with at least
/// this much of its budget left.
const SETUP_NS_PER_BUFFER: u64 = 200;

pub(super) fn run(
    problem: &Problem,
    options: &PlanOptions,
    target: u64,
    bound: u64,
    deadline: Instant,
) -> Result<Attempt, PlanError> {
    let n = problem.buffers.len();
    let live = most_live(problem);
    let mut reserve = check_estimate(problem, live);
    let setup = Duration::from_nanos((n as u64).saturating_mul(SETUP_NS_PER_BUFFER));
    let mut trials: Vec<Trial> = Vec::new();
    let mut extra = PlanStats::default();
    // Every complete layout, in the order found; `checked` marks the one
    // already through the checker.
    let mut found: Vec<Attempt> = Vec::new();
    let mut checked: Option<usize> = None;
    let started = Instant::now();
    found.push(plain(Strategy::Naive, naive::place(problem)));
    trials.push(Trial {
        strategy: Strategy::Naive,
        arena_bytes: Some(height(problem, &found[0].offsets)),
        elapsed: started.elapsed(),
    });
    let heavy = is_heavy(problem, live);
    let order = if heavy {
        // One best-fit pass then takes the whole default budget or more;
        // the online first-fit pass is the cheapest layout better than
        // naive, and peak suppression's first pass (lowest fit by size)
        // packs large traces tighter than best fit.
        [
            Strategy::FirstFitPool,
            Strategy::PeakSuppression,
            Strategy::GreedySize,
            Strategy::GreedyBreadth,
            Strategy::Search,
        ]
    } else {
        [
            Strategy::GreedySize,
            Strategy::GreedyBreadth,
            Strategy::FirstFitPool,
            Strategy::PeakSuppression,
            Strategy::Search,
        ]
    };
    let best_of = |found: &[Attempt]| {
        (0..found.len())
            .min_by_key(|&k| (height(problem, &found[k].offsets), k))
            .expect("the naive layout is always there")
    };
    for strategy in order {
        let best = best_of(&found);
        let best_h = height(problem, &found[best].offsets);
        if best_h <= target {
            break;
        }
        let work = deadline.checked_sub(reserve).unwrap_or(deadline);
        if Instant::now() + setup >= work {
            break;
        }
        let budget = Budget::until(work);
        let began = Instant::now();
        let attempt: Option<Attempt> = match strategy {
            Strategy::GreedySize => greedy_size::place(problem, budget).map(|o| plain(strategy, o)),
            Strategy::GreedyBreadth => {
                greedy_breadth::place(problem, budget).map(|o| plain(strategy, o))
            }
            Strategy::FirstFitPool => first_fit::place(problem, budget).map(|o| plain(strategy, o)),
            Strategy::PeakSuppression => {
                let (offsets, rounds, limit_hit) =
                    peak::place(problem, target, options.peak_rounds, budget, budget);
                extra.rounds = rounds;
                extra.limit_hit |= limit_hit;
                offsets.map(|o| plain(strategy, o))
            }
            Strategy::Search => {
                let seed = found[best].offsets.clone();
                let a = search::run(problem, options, seed, target, bound, work);
                extra.nodes = a.stats.nodes;
                extra.backtracks = a.stats.backtracks;
                extra.limit_hit |= a.stats.limit_hit;
                Some(a)
            }
            Strategy::Naive | Strategy::Auto => None,
        };
        let elapsed = began.elapsed();
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
        if h < best_h {
            found.push(attempt);
            if checked.is_none() {
                // The first layout better than naive is checked at once: it
                // is the fallback from here on, and its check measures
                // what the winner's will cost.
                let k = found.len() - 1;
                let t = Instant::now();
                if valid(problem, &found[k].offsets, h, bound).is_ok() {
                    checked = Some(k);
                    reserve = t.elapsed().mul_f64(1.5);
                } else {
                    found.pop();
                }
            }
        } else if attempt.proven_optimal && h == best_h {
            // The search proved the current best optimal without beating it.
            found[best].proven_optimal = true;
        }
    }
    // The smallest layout that passes the checker (one check unless a
    // strategy is wrong).
    let mut first_error = None;
    while !found.is_empty() {
        let k = best_of(&found);
        let h = height(problem, &found[k].offsets);
        let ok = checked == Some(k) || {
            match valid(problem, &found[k].offsets, h, bound) {
                Ok(()) => true,
                Err(violations) => {
                    first_error.get_or_insert(PlanError::Invalid {
                        strategy: found[k].strategy,
                        violations,
                    });
                    false
                }
            }
        };
        if ok {
            let mut best = found.swap_remove(k);
            best.checked = true;
            best.stats = PlanStats { trials, ..extra };
            return Ok(best);
        }
        found.remove(k);
        if checked.is_some_and(|c| c > k) {
            checked = checked.map(|c| c - 1);
        }
    }
    Err(first_error.unwrap_or(PlanError::Overflow))
}

/// Whether best fit is too slow for `problem` to go first: many buffers,
/// or many live at once (`live`, see [`most_live`]).
fn is_heavy(problem: &Problem, live: u64) -> bool {
    let n = problem.buffers.len();
    n > LARGE || (n as u64).saturating_mul(live) > HEAVY_PAIRS
}

/// Whether a constructive pass started now on `problem` can look at the
/// clock before `work` (see [`SETUP_NS_PER_BUFFER`]).
pub(super) fn room_for_pass(problem: &Problem, work: Instant) -> bool {
    let setup =
        Duration::from_nanos((problem.buffers.len() as u64).saturating_mul(SETUP_NS_PER_BUFFER));
    Instant::now() + setup < work
}

/// [`is_heavy`] for callers outside the portfolio.
pub(super) fn heavy(problem: &Problem) -> bool {
    is_heavy(problem, most_live(problem))
}

/// The checker's expected time on `problem`, before any check of it has
/// been measured.
pub(super) fn check_reserve(problem: &Problem) -> Duration {
    check_estimate(problem, most_live(problem))
}

/// The most buffers live at once (lifetimes), or the most conflicts of one
/// buffer (conflict graphs).
fn most_live(problem: &Problem) -> u64 {
    match &problem.conflicts {
        ConflictModel::Lifetimes => max_live_count(problem),
        ConflictModel::Explicit(adj) => adj.iter().map(|l| l.len() as u64).max().unwrap_or(0),
    }
}

/// The checker's expected time before any check has been measured.
fn check_estimate(problem: &Problem, live: u64) -> Duration {
    let n = problem.buffers.len() as u64;
    let units = match &problem.conflicts {
        ConflictModel::Lifetimes => n.saturating_mul(u64::from(64 - (live + 2).leading_zeros())),
        ConflictModel::Explicit(adj) => adj
            .iter()
            .map(|l| l.len() as u64)
            .fold(n, u64::saturating_add),
    };
    Duration::from_nanos(units.saturating_mul(CHECK_NS_PER_UNIT))
}

fn plain(strategy: Strategy, offsets: Vec<u64>) -> Attempt {
    Attempt {
        offsets,
        strategy,
        proven_optimal: false,
        checked: false,
        stats: PlanStats::default(),
    }
}

fn valid(
    problem: &Problem,
    offsets: &[u64],
    arena: u64,
    bound: u64,
) -> Result<(), Vec<crate::Violation>> {
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
    check(problem, &plan)
}

#[cfg(test)]
mod tests {
    //! Every pass `auto` runs gives up when its budget is gone instead of
    //! finishing late, and finishes when it is not.

    use super::*;
    use crate::problem::Buffer;

    /// Buffer `i` lives `[i, i + 1 + i % 7)`, sizes 64 to 4,096 bytes.
    fn trace(n: u32) -> Problem {
        let buffers = (0..n)
            .map(|i| Buffer::new(64 * u64::from(1 + i * 37 % 64), i, i + 1 + i % 7, 64))
            .collect();
        Problem::new(buffers, ConflictModel::Lifetimes)
    }

    fn spent() -> Budget {
        Budget::until(Instant::now())
    }

    #[test]
    fn passes_stop_when_the_budget_is_spent() {
        let p = trace(500);
        let endless = Budget::unlimited();
        assert!(greedy_size::place(&p, spent()).is_none());
        assert!(greedy_breadth::place(&p, spent()).is_none());
        assert!(first_fit::place(&p, spent()).is_none());
        assert!(peak::place(&p, 0, 32, spent(), spent()).0.is_none());
        for offsets in [
            greedy_size::place(&p, endless),
            greedy_breadth::place(&p, endless),
            first_fit::place(&p, endless),
        ] {
            let o = offsets.expect("finished");
            assert!(valid(&p, &o, height(&p, &o), 0).is_ok());
        }
        // Peak suppression's first layout may run to the end alone; its
        // rounds then stop at once.
        let (offsets, rounds, limit_hit) = peak::place(&p, 0, 32, endless, spent());
        let o = offsets.expect("the first layout");
        assert!(valid(&p, &o, height(&p, &o), 0).is_ok());
        assert_eq!(rounds, 0);
        assert!(limit_hit);
    }

    #[test]
    fn the_check_estimate_grows_with_the_buffers_live_together() {
        let p = trace(1_000);
        let few = check_estimate(&p, 7);
        let many = check_estimate(&p, 7_000);
        assert!(few > Duration::ZERO && many > few);
    }

    #[test]
    fn auto_falls_back_on_naive_when_nothing_else_has_time() {
        let p = trace(300);
        let options = PlanOptions::default();
        let bound = crate::lower_bound(&p);
        let a = run(&p, &options, bound, bound, Instant::now()).expect("a layout");
        assert_eq!(a.strategy, Strategy::Naive);
        assert!(a.checked);
        assert_eq!(a.offsets, naive::place(&p));
        let far = Instant::now() + Duration::from_secs(60);
        let b = run(&p, &options, bound, bound, far).expect("a layout");
        assert!(b.checked);
        assert!(height(&p, &b.offsets) < height(&p, &a.offsets));
    }
}

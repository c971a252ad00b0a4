//! Every strategy on one problem, side by side (`--compare`).

use std::time::{Duration, Instant};
use stow_plan::{plan, PlanError, PlanOptions, Problem, Strategy};

/// How one strategy did on the problem.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// It produced a plan (which passed the checker).
    Planned {
        /// The strategy that made the plan: the one asked for, or for
        /// `auto`, the one that won.
        used: Strategy,
        /// Arena size in bytes.
        arena_bytes: u64,
        /// Arena size divided by the problem's lower bound.
        ratio: f64,
        /// True when the arena is proven smallest possible.
        optimal: bool,
    },
    /// It needs more than the capacity ([`PlanError::DoesNotFit`]).
    DoesNotFit {
        /// The pool (`arena` when the problem declares none).
        pool: String,
        /// Bytes the strategy's layout needs.
        needed: u64,
        /// The capacity.
        capacity: u64,
        /// `needed - capacity`.
        short: u64,
    },
}

/// One row of the comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// The strategy run.
    pub strategy: Strategy,
    /// What it produced.
    pub outcome: Outcome,
    /// Wall-clock time of the run, checking included.
    pub elapsed: Duration,
}

impl Comparison {
    /// The arena of a plan, `None` when the strategy did not fit.
    pub fn arena_bytes(&self) -> Option<u64> {
        match self.outcome {
            Outcome::Planned { arena_bytes, .. } => Some(arena_bytes),
            Outcome::DoesNotFit { .. } => None,
        }
    }
}

/// Runs every strategy ([`Strategy::ALL`]) on `problem` with `options`
/// (only the strategy changes) and returns them best first: smallest
/// arena first, strategies that did not fit the capacity last, ties in
/// the order of [`Strategy::ALL`]. Any failure other than
/// [`PlanError::DoesNotFit`] is returned.
pub fn compare(problem: &Problem, options: &PlanOptions) -> Result<Vec<Comparison>, PlanError> {
    let mut rows = Vec::with_capacity(Strategy::ALL.len());
    for &strategy in Strategy::ALL {
        let started = Instant::now();
        let result = plan(
            problem,
            &PlanOptions {
                strategy,
                ..options.clone()
            },
        );
        let elapsed = started.elapsed();
        let outcome = match result {
            Ok(p) => Outcome::Planned {
                used: p.strategy,
                arena_bytes: p.arena_bytes,
                ratio: p.ratio(),
                optimal: p.optimal,
            },
            Err(PlanError::DoesNotFit {
                pool,
                needed,
                capacity,
                short,
            }) => Outcome::DoesNotFit {
                pool,
                needed,
                capacity,
                short,
            },
            Err(e) => return Err(e),
        };
        rows.push(Comparison {
            strategy,
            outcome,
            elapsed,
        });
    }
    rows.sort_by_key(|row| row.arena_bytes().unwrap_or(u64::MAX));
    Ok(rows)
}

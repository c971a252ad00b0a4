use crate::bound::lower_bound;
use crate::check::{check, Violation};
use crate::problem::{BufferId, Problem, ProblemError};
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};
use thiserror::Error;

mod greedy_size;
mod naive;

/// A planning strategy, selectable by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// No reuse: every buffer gets its own bytes (the baseline).
    Naive,
    /// Largest first; each buffer goes into the best-fitting gap left by the
    /// conflicting buffers already placed (M1).
    GreedySize,
}

impl Strategy {
    /// Every strategy with its name, in the order `--help` lists them.
    pub const ALL: &'static [Strategy] = &[Strategy::Naive, Strategy::GreedySize];

    /// The name used on the command line and in bundles.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Naive => "naive",
            Strategy::GreedySize => "greedy-size",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Strategy {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<Self, PlanError> {
        Strategy::ALL
            .iter()
            .copied()
            .find(|st| st.name() == s)
            .ok_or_else(|| PlanError::UnknownStrategy(s.to_string()))
    }
}

/// Knobs for [`plan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    /// Which strategy to run.
    pub strategy: Strategy,
    /// Wall-clock budget for strategies that search.
    pub time_limit: Duration,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            strategy: Strategy::GreedySize,
            time_limit: Duration::from_secs(1),
        }
    }
}

/// Counters describing how a plan was found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanStats {
    /// Wall-clock time spent planning.
    pub elapsed: Duration,
}

/// A placement: one offset per buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// `offsets[i]` is the arena offset of buffer `i`.
    pub offsets: Vec<u64>,
    /// Arena size: the largest `offset + size` over all buffers.
    pub arena_bytes: u64,
    /// The problem's lower bound (see [`lower_bound`]).
    pub lower_bound: u64,
    /// The strategy that produced the plan.
    pub strategy: Strategy,
    /// True when the arena is proven smallest possible (it meets the bound,
    /// or a complete search finished).
    pub optimal: bool,
    /// How the plan was found.
    pub stats: PlanStats,
}

impl Plan {
    /// Arena size divided by the lower bound (1.0 when both are zero).
    pub fn ratio(&self) -> f64 {
        if self.lower_bound == 0 {
            1.0
        } else {
            self.arena_bytes as f64 / self.lower_bound as f64
        }
    }
}

/// Why planning failed.
#[derive(Debug, Error)]
pub enum PlanError {
    /// The problem breaks a precondition.
    #[error("invalid problem: {0}")]
    Problem(#[from] ProblemError),
    /// No strategy has this name.
    #[error("unknown strategy `{0}` (choose one of: {names})", names = Strategy::ALL.iter().map(|s| s.name()).collect::<Vec<_>>().join(", "))]
    UnknownStrategy(String),
    /// An offset or the arena size would not fit in 64 bits.
    #[error("arena size overflows 64 bits")]
    Overflow,
    /// A strategy produced a plan the checker rejects: a bug in the strategy,
    /// reported instead of being written anywhere.
    #[error("strategy {strategy} produced an invalid plan: {}", first_violations(.violations))]
    Invalid {
        /// The strategy at fault.
        strategy: Strategy,
        /// What the checker found.
        violations: Vec<Violation>,
    },
}

fn first_violations(v: &[Violation]) -> String {
    let shown: Vec<String> = v.iter().take(3).map(|x| x.to_string()).collect();
    let more = v.len().saturating_sub(3);
    if more > 0 {
        format!("{} (and {more} more)", shown.join("; "))
    } else {
        shown.join("; ")
    }
}

/// Plans `problem` with the chosen strategy and checks the result before
/// returning it.
pub fn plan(problem: &Problem, options: &PlanOptions) -> Result<Plan, PlanError> {
    problem.validate()?;
    let started = Instant::now();
    let offsets = match options.strategy {
        Strategy::Naive => naive::place(problem)?,
        Strategy::GreedySize => greedy_size::place(problem)?,
    };
    let elapsed = started.elapsed();
    let arena_bytes = arena_of(problem, &offsets)?;
    let bound = lower_bound(problem);
    let plan = Plan {
        offsets,
        arena_bytes,
        lower_bound: bound,
        strategy: options.strategy,
        optimal: arena_bytes <= bound,
        stats: PlanStats { elapsed },
    };
    check(problem, &plan).map_err(|violations| PlanError::Invalid {
        strategy: options.strategy,
        violations,
    })?;
    Ok(plan)
}

fn arena_of(problem: &Problem, offsets: &[u64]) -> Result<u64, PlanError> {
    let mut top = 0u64;
    for (b, &o) in problem.buffers.iter().zip(offsets) {
        top = top.max(o.checked_add(b.size).ok_or(PlanError::Overflow)?);
    }
    Ok(top)
}

/// Rounds `value` up to a multiple of the power of two `align`.
pub(crate) fn align_up(value: u64, align: u64) -> Result<u64, PlanError> {
    value
        .checked_add(align - 1)
        .map(|v| v & !(align - 1))
        .ok_or(PlanError::Overflow)
}

pub(crate) fn ids(n: usize) -> impl Iterator<Item = BufferId> {
    (0..n as u32).map(BufferId)
}

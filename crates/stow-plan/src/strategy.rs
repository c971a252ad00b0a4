use crate::bound::lower_bound;
use crate::check::{check, Violation};
use crate::problem::{PoolId, Problem, ProblemError};
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};
use thiserror::Error;

mod auto;
mod first_fit;
mod greedy_breadth;
mod greedy_size;
mod naive;
mod peak;
mod pools;
mod search;
pub(crate) mod sweep;

/// A planning strategy, selectable by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// No reuse: every buffer gets its own bytes (the baseline).
    Naive,
    /// Largest first; each buffer goes into the best-fitting gap left by the
    /// conflicting buffers already placed (M1).
    GreedySize,
    /// Operators by width (total bytes live while they run), widest first;
    /// each operator's tensors, largest first, go into the best-fitting gap,
    /// ties broken by the closest lifetime below (M2).
    GreedyBreadth,
    /// Online, in execution order, through a first-fit pool with splitting
    /// and coalescing in units of the alignment (M3; see
    /// [`crate::FirstFitPool`]).
    FirstFitPool,
    /// Place in the order of a key, lowest fit; while the top exceeds the
    /// lower bound, re-order by risk class and re-tune each group (M4).
    PeakSuppression,
    /// Complete branch and bound over canonical placements with spatial
    /// inference and dominance pruning, under the time and node limits
    /// (after MiniMalloc). Reports whether the result is proven optimal.
    Search,
    /// Runs a portfolio of the others, checks each result, keeps the best,
    /// and stops as soon as one meets the lower bound (or the capacity).
    Auto,
}

impl Strategy {
    /// Every strategy with its name, in the order `--help` lists them.
    pub const ALL: &'static [Strategy] = &[
        Strategy::Naive,
        Strategy::GreedySize,
        Strategy::GreedyBreadth,
        Strategy::FirstFitPool,
        Strategy::PeakSuppression,
        Strategy::Search,
        Strategy::Auto,
    ];

    /// The name used on the command line and in bundles.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Naive => "naive",
            Strategy::GreedySize => "greedy-size",
            Strategy::GreedyBreadth => "greedy-breadth",
            Strategy::FirstFitPool => "first-fit-pool",
            Strategy::PeakSuppression => "peak-suppression",
            Strategy::Search => "search",
            Strategy::Auto => "auto",
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

/// The pruning techniques of [`Strategy::Search`], each on its own switch.
/// Every combination finds the same optimum (the tests sweep them); they
/// differ only in how many nodes the search visits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SearchOptions {
    /// Canonical placements only: buffers are placed in non-decreasing
    /// offset order (ties in a fixed preorder), so each compacted layout is
    /// built once.
    pub canonical: bool,
    /// Spatial inference: in every section (a set of pairwise-conflicting
    /// buffers), the floor plus the unplaced bytes must fit under the
    /// incumbent; otherwise backtrack at once.
    pub section_inference: bool,
    /// With canonical placements, nothing unplaced can go below the last
    /// placed offset: raise every section's floor to it.
    pub monotonic_floor: bool,
    /// Dominance: skip a candidate whose offset leaves room below it for a
    /// whole unplaced buffer (moving that buffer down is never worse).
    pub dominance: bool,
    /// A section's floor is at least the lowest offset any of its unplaced
    /// buffers can take.
    pub unallocated_floor: bool,
    /// Split the problem into independent parts (time cuts no buffer
    /// crosses, or connected components of a conflict graph) and search
    /// each alone.
    pub decompose: bool,
    /// Try candidates lowest offset first (else in the static preorder).
    pub dynamic_ordering: bool,
    /// With canonical placements: a buffer that no unplaced buffer can rise
    /// above must be placed before the offset passes it. A node where one is
    /// stranded below the current offset is dead, and once such a buffer's
    /// placement fails, so do its siblings (MiniMalloc's "hatless" pruning,
    /// generalised).
    pub hatless: bool,
    /// With canonical placements under lifetimes: buffers placed at one
    /// offset go left to right in time (two buffers at one offset never
    /// share a step, so this orders them as well as the preorder does).
    /// A section that must get a buffer at exactly the current offset (its
    /// unplaced bytes fill it up to the cap) then bounds where the next
    /// buffer at that offset may start, and one left behind is a dead end.
    /// Perfect or near-perfect packings are filled row by row instead of
    /// in preorder, which finds dead ends at once.
    pub time_ties: bool,
    /// Row inference, with canonical placements, section inference and
    /// the monotonic floor under lifetimes: the sections that must get a
    /// buffer at exactly the current offset must be coverable by disjoint
    /// lifetimes of buffers that can still go there. Off by default: it
    /// cuts nodes (MiniMalloc's K 2.7×, perturb-A-1 1.7×) but costs more
    /// per node than it saves on most of the measured instances
    /// (BENCHMARKS.md, "Row inference").
    pub row_inference: bool,
    /// Remember exhausted states: a node whose unplaced buffers, their min
    /// offsets, the current offset and tie key are those of a node whose
    /// subtree was exhausted before in the same decision run is dead
    /// (needs the unallocated floor). Off by default: it cuts MiniMalloc's
    /// A from 31,800 nodes to 22,364 but finds no state twice on B–E, K or
    /// the cut rectangles, where keeping the hash costs a fifth of a
    /// node's time (BENCHMARKS.md, "Remembered dead states").
    pub memo: bool,
}

impl SearchOptions {
    /// Every technique on (the default, [`SearchOptions::DEFAULT`], has
    /// row inference and the memo off).
    pub const ALL_ON: SearchOptions = SearchOptions {
        canonical: true,
        section_inference: true,
        monotonic_floor: true,
        dominance: true,
        unallocated_floor: true,
        decompose: true,
        dynamic_ordering: true,
        hatless: true,
        time_ties: true,
        row_inference: true,
        memo: true,
    };

    /// What [`SearchOptions::default`] gives: every technique on but row
    /// inference and the memo.
    pub const DEFAULT: SearchOptions = SearchOptions {
        row_inference: false,
        memo: false,
        ..SearchOptions::ALL_ON
    };

    /// Every technique off: plain exhaustive branch and bound.
    pub const ALL_OFF: SearchOptions = SearchOptions {
        canonical: false,
        section_inference: false,
        monotonic_floor: false,
        dominance: false,
        unallocated_floor: false,
        decompose: false,
        dynamic_ordering: false,
        hatless: false,
        time_ties: false,
        row_inference: false,
        memo: false,
    };

    /// All 2,048 combinations of the switches.
    pub fn combinations() -> impl Iterator<Item = SearchOptions> {
        (0u32..2048).map(|m| SearchOptions {
            canonical: m & 1 != 0,
            section_inference: m & 2 != 0,
            monotonic_floor: m & 4 != 0,
            dominance: m & 8 != 0,
            unallocated_floor: m & 16 != 0,
            decompose: m & 32 != 0,
            dynamic_ordering: m & 64 != 0,
            hatless: m & 128 != 0,
            time_ties: m & 256 != 0,
            row_inference: m & 512 != 0,
            memo: m & 1024 != 0,
        })
    }
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions::DEFAULT
    }
}

/// Knobs for [`plan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    /// Which strategy to run.
    pub strategy: Strategy,
    /// Wall-clock budget for strategies that search or iterate
    /// (`search`, `peak-suppression`, `auto`).
    pub time_limit: Duration,
    /// Largest arena allowed when the problem declares no pools. Planning
    /// fails with [`PlanError::DoesNotFit`] rather than exceed it, and
    /// `search` and `auto` stop at the first layout that fits.
    pub capacity: Option<u64>,
    /// Most search nodes `search` may visit (`None`: no limit but time).
    pub node_limit: Option<u64>,
    /// Pruning switches of `search`.
    pub search: SearchOptions,
    /// Most re-ordering rounds of `peak-suppression`.
    pub peak_rounds: u32,
    /// Threads `search` runs its portfolio of preorders on (`None`: one
    /// per core). For a given problem, options and thread count the plan
    /// is the same on every run unless the time limit cuts the search
    /// short; only the node limit decides which preorder's layout is used.
    pub threads: Option<usize>,
    /// Share of a `search` decision's time, in thousandths, given first to
    /// the time sweep (`strategy/sweep.rs`: a search in time order made
    /// for perfect and near-perfect packings; docs/PLANNER.md, "The time
    /// sweep search"), on traces of lifetimes without pinned buffers when
    /// the seed does not meet the goal. 0 (the default): off. The sweep
    /// never proves that no layout exists; whatever it finds goes through
    /// the checker like any other layout.
    pub sweep_permille: u32,
    /// With pools: the order in which buffers not pinned to a pool are
    /// offered to the bounded pools, by buffer index (buffers it leaves out
    /// follow, largest first). `None`: largest first. A compiler that knows
    /// which buffers gain most from fast memory passes them first.
    pub admission: Option<Vec<u32>>,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            strategy: Strategy::Auto,
            time_limit: Duration::from_secs(1),
            capacity: None,
            node_limit: None,
            search: SearchOptions::DEFAULT,
            peak_rounds: 32,
            threads: None,
            sweep_permille: 0,
            admission: None,
        }
    }
}

/// One strategy run inside `auto` (or by `stow plan --compare`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trial {
    /// The strategy.
    pub strategy: Strategy,
    /// Its arena, or `None` when it ran out of time before finishing.
    pub arena_bytes: Option<u64>,
    /// Time it took.
    pub elapsed: Duration,
}

/// Counters describing how a plan was found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanStats {
    /// Wall-clock time spent planning (strategy, bound and check).
    pub elapsed: Duration,
    /// Search nodes visited.
    pub nodes: u64,
    /// Search nodes whose every child failed.
    pub backtracks: u64,
    /// Improvement rounds (`peak-suppression`).
    pub rounds: u32,
    /// True when a time or node limit stopped the strategy early.
    pub limit_hit: bool,
    /// The strategies `auto` ran, in order.
    pub trials: Vec<Trial>,
}

/// A placement: one pool and offset per buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// `offsets[i]` is the offset of buffer `i` in its pool (in the arena
    /// when the problem has no pools).
    pub offsets: Vec<u64>,
    /// Arena size: the largest `offset + size` over all buffers; with
    /// pools, the sum of [`Plan::pool_bytes`].
    pub arena_bytes: u64,
    /// The problem's lower bound (see [`lower_bound`]).
    pub lower_bound: u64,
    /// The strategy that produced the plan (for `auto`, the one that won).
    pub strategy: Strategy,
    /// True when the arena is proven smallest possible (it meets the bound,
    /// or a complete search finished).
    pub optimal: bool,
    /// How the plan was found.
    pub stats: PlanStats,
    /// `pool[i]` is the pool of buffer `i`; all `PoolId(0)` when the
    /// problem declares no pools.
    pub pool: Vec<PoolId>,
    /// Bytes used in each pool (one entry, the arena, without pools).
    pub pool_bytes: Vec<u64>,
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
    /// The buffers that must go into a pool (pinned to it, or left over
    /// when it is the last one) need more bytes than it has.
    #[error("does not fit: pool `{pool}` short by {short} bytes ({needed} needed, more than the capacity of {capacity})")]
    DoesNotFit {
        /// The pool (`arena` when the problem declares none).
        pool: String,
        /// Bytes the best layout found needs (or the lower bound, when
        /// that alone exceeds the capacity).
        needed: u64,
        /// The pool's capacity.
        capacity: u64,
        /// `needed - capacity`.
        short: u64,
    },
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
///
/// Without pools, all buffers share one arena (of at most
/// [`PlanOptions::capacity`] bytes). With pools, pool-pinned buffers go to
/// their pool; the others go to the first pool, in preference order, where
/// they still fit; whatever remains goes to the last pool; a pool that
/// cannot hold what it must gives [`PlanError::DoesNotFit`].
pub fn plan(problem: &Problem, options: &PlanOptions) -> Result<Plan, PlanError> {
    problem.validate()?;
    let started = Instant::now();
    let bound = lower_bound(problem);
    // `auto` checks the layout it picks (it falls back on the next best
    // when one fails); checking it again would cost as much as a
    // constructive pass on a large trace.
    let mut checked = false;
    let mut plan = if problem.pools.is_empty() {
        let attempt = plan_arena(problem, options, options.capacity, bound, started)?;
        let arena_bytes = arena_of(problem, &attempt.offsets)?;
        checked = attempt.checked;
        Plan {
            offsets: attempt.offsets,
            arena_bytes,
            lower_bound: bound,
            strategy: attempt.strategy,
            optimal: attempt.proven_optimal || arena_bytes <= bound,
            stats: attempt.stats,
            pool: vec![PoolId(0); problem.buffers.len()],
            pool_bytes: vec![arena_bytes],
        }
    } else {
        pools::plan_pools(problem, options, bound, started)?
    };
    if !checked {
        check(problem, &plan).map_err(|violations| PlanError::Invalid {
            strategy: plan.strategy,
            violations,
        })?;
    }
    plan.stats.elapsed = started.elapsed();
    Ok(plan)
}

/// What one strategy produced on a single arena.
pub(crate) struct Attempt {
    pub offsets: Vec<u64>,
    pub strategy: Strategy,
    pub proven_optimal: bool,
    /// These offsets have passed [`check`] against the whole problem.
    pub checked: bool,
    pub stats: PlanStats,
}

/// When a strategy must give up.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    pub deadline: Option<Instant>,
}

impl Budget {
    pub fn unlimited() -> Self {
        Budget { deadline: None }
    }

    pub fn until(deadline: Instant) -> Self {
        Budget {
            deadline: Some(deadline),
        }
    }

    pub fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// Runs the chosen strategy on a problem without pools, enforcing
/// `capacity`.
pub(crate) fn plan_arena(
    problem: &Problem,
    options: &PlanOptions,
    capacity: Option<u64>,
    bound: u64,
    started: Instant,
) -> Result<Attempt, PlanError> {
    if let Some(cap) = capacity {
        if bound > cap {
            return Err(does_not_fit("arena", bound, cap));
        }
    }
    let deadline = started + options.time_limit;
    let target = capacity.map_or(bound, |c| c.max(bound));
    let single = |strategy: Strategy, offsets: Vec<u64>| Attempt {
        offsets,
        strategy,
        proven_optimal: false,
        checked: false,
        stats: PlanStats::default(),
    };
    // Chosen alone, the constructive strategies always finish.
    let endless = Budget::unlimited();
    let unfinished = || PlanError::Overflow;
    let attempt = match options.strategy {
        Strategy::Naive => single(Strategy::Naive, naive::place(problem)),
        Strategy::GreedySize => single(
            Strategy::GreedySize,
            greedy_size::place(problem, endless).ok_or_else(unfinished)?,
        ),
        Strategy::GreedyBreadth => single(
            Strategy::GreedyBreadth,
            greedy_breadth::place(problem, endless).ok_or_else(unfinished)?,
        ),
        Strategy::FirstFitPool => single(
            Strategy::FirstFitPool,
            first_fit::place(problem, endless).ok_or_else(unfinished)?,
        ),
        Strategy::PeakSuppression => {
            // The first layout always finishes; the rounds keep the budget.
            let (offsets, rounds, limit_hit) = peak::place(
                problem,
                target,
                options.peak_rounds,
                endless,
                Budget::until(deadline),
            );
            Attempt {
                offsets: offsets.ok_or_else(unfinished)?,
                strategy: Strategy::PeakSuppression,
                proven_optimal: false,
                checked: false,
                stats: PlanStats {
                    rounds,
                    limit_hit,
                    ..PlanStats::default()
                },
            }
        }
        Strategy::Search => {
            // The seeds keep the budget too (a best-fit pass on a trace
            // with thousands of buffers live at once takes seconds), and
            // the final check's time is set aside, as in `auto`. Where best
            // fit is slow, first-fit (cheap at any size) seeds first and the
            // best-fit seeds get what is left; elsewhere the best-fit seeds
            // get half the budget and first-fit the rest should both run
            // out; naive after that.
            let work = deadline
                .checked_sub(auto::check_reserve(problem))
                .unwrap_or(deadline);
            let heavy = auto::heavy(problem);
            let first = heavy
                .then(|| first_fit::place(problem, Budget::until(work)))
                .flatten();
            let now = Instant::now();
            let fit = if heavy {
                Budget::until(work)
            } else {
                Budget::until(now + work.saturating_duration_since(now) / 2)
            };
            let best_fit = |place: fn(&Problem, Budget) -> Option<Vec<u64>>| {
                let until = fit.deadline.unwrap_or(work);
                auto::room_for_pass(problem, until)
                    .then(|| place(problem, fit))
                    .flatten()
            };
            let seed = [
                first,
                best_fit(greedy_size::place),
                best_fit(greedy_breadth::place),
            ]
            .into_iter()
            .flatten()
            .min_by_key(|o| height(problem, o))
            .or_else(|| {
                (!heavy)
                    .then(|| first_fit::place(problem, Budget::until(work)))
                    .flatten()
            })
            .unwrap_or_else(|| naive::place(problem));
            search::run(problem, options, seed, target, bound, work)
        }
        Strategy::Auto => auto::run(problem, options, target, bound, deadline)?,
    };
    if let Some(cap) = capacity {
        let arena = arena_of(problem, &attempt.offsets)?;
        if arena > cap {
            return Err(does_not_fit("arena", arena, cap));
        }
    }
    Ok(attempt)
}

pub(crate) fn does_not_fit(pool: &str, needed: u64, capacity: u64) -> PlanError {
    PlanError::DoesNotFit {
        pool: pool.to_string(),
        needed,
        capacity,
        short: needed.saturating_sub(capacity),
    }
}

pub(crate) fn arena_of(problem: &Problem, offsets: &[u64]) -> Result<u64, PlanError> {
    let mut top = 0u64;
    for (b, &o) in problem.buffers.iter().zip(offsets) {
        top = top.max(o.checked_add(b.size).ok_or(PlanError::Overflow)?);
    }
    Ok(top)
}

/// The arena of `offsets`, saturating (for comparing candidates).
pub(crate) fn height(problem: &Problem, offsets: &[u64]) -> u64 {
    problem
        .buffers
        .iter()
        .zip(offsets)
        .map(|(b, &o)| o.saturating_add(b.size))
        .max()
        .unwrap_or(0)
}

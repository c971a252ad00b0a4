//! Complete branch and bound for the smallest arena, after MiniMalloc.
//!
//! The search places one buffer at a time, always *on top of* the placed
//! buffers it conflicts with (at the aligned maximum of their ends: its
//! "min offset"). Every layout can be pushed down into such a compacted
//! layout without growing, and a compacted layout is reached by placing its
//! buffers in order of offset, so the search is complete. Its techniques
//! (each a switch in [`SearchOptions`]):
//!
//! - **canonical**: placements happen in non-decreasing offset order, ties
//!   in a fixed preorder, so each compacted layout is built once;
//! - **section inference**: a *section* is a set of pairwise-conflicting
//!   buffers (the buffers live during one elementary time segment, or a
//!   clique of an explicit graph). Its unplaced buffers all sit above its
//!   floor and stack, so `floor + unplaced bytes` must fit under the cap;
//! - **monotonic floor**: with canonical order nothing unplaced goes below
//!   the last placed offset, which raises every floor; with section
//!   inference this also gives each section a *level* (`cap` minus its
//!   unplaced bytes) above which nothing but its last buffer may be placed,
//!   checked before any trial placement;
//! - **unallocated floor**: a floor is at least the smallest min offset of
//!   the section's unplaced buffers;
//! - **dominance**: a candidate whose offset is at or above the top some
//!   unplaced buffer would have at its min offset is skipped: that buffer
//!   could be moved down into the room below, so an equal or better layout
//!   is found in another branch;
//! - **decompose**: independent parts (time cuts that no buffer crosses,
//!   components of a conflict graph) are searched one by one;
//! - **dynamic ordering**: candidates lowest offset first;
//! - **time ties**: under lifetimes, some runs order placements at one
//!   offset left to right in time instead of by preorder, which turns a
//!   section filled exactly to the cap into a bound on where the next
//!   buffer at that offset may start.
//!
//! The core is a decision procedure ([`dfs`]): is there a layout within a
//! cap? Under lifetimes, when the placed buffers leave no unplaced buffer
//! spanning some section boundary, the rest falls apart into sides that are
//! solved one after the other (dynamic decomposition, part of `decompose`).
//! Each decision runs a portfolio of static preorders, tie rules and
//! randomised restarts in lockstep on the machine's cores ([`decide`],
//! [`gate`]): the answer is the lowest-numbered run among those settling in
//! the first slice of nodes in which any does, so it does not depend on
//! thread timing or the thread count.
//!
//! Minimising: after a brief try at the proven bound `lo`, one decision at
//! the bottom cap (the larger of the goal and `lo`) runs until it settles
//! or time runs out; a cap proven infeasible raises `lo` and the next
//! decision starts above it. Without a capacity a probe lane in the same
//! lockstep lowers the incumbent `hi` meanwhile. The run stops when the
//! incumbent meets the target, when `lo` meets `hi` (the incumbent is then
//! proven optimal), or at the time or node limit.

mod dfs;
mod gate;

use super::{height, Attempt, PlanStats, SearchOptions, Strategy};
use crate::problem::{ConflictModel, Problem};
use crate::PlanOptions;
use dfs::{Dfs, GateRun, Outcome};
use gate::Gate;
use std::cmp::Reverse;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Parts larger than this keep their heuristic layout.
const MAX_PART: usize = 20_000;

/// Parts whose conflict lists and sections would hold more entries than
/// this keep their heuristic layout too: 20,000 buffers with thousands live
/// at once would need gigabytes and seconds to set up, before the first
/// node looks at the clock.
const MAX_ENTRIES: u64 = 50_000_000;

/// Time a decision takes to wind down after its deadline, per buffer of
/// the part (see [`run`]).
const WIND_DOWN_NS: u64 = 8_000;

/// Time to set up one entry of a part's conflict lists or sections (about
/// 10 ns measured, doubled): a part is searched only when setting it up
/// fits in its share of the time.
const SETUP_NS_PER_ENTRY: u64 = 20;

pub(crate) fn run(
    problem: &Problem,
    options: &PlanOptions,
    seed: Vec<u64>,
    target: u64,
    bound: u64,
    deadline: Instant,
) -> Attempt {
    let n = problem.buffers.len();
    let flags = options.search;
    let mut offsets = seed;
    let active: Vec<usize> = (0..n).filter(|&i| !problem.is_trivial(i)).collect();
    for i in (0..n).filter(|&i| problem.is_trivial(i)) {
        offsets[i] = problem.buffers[i].pinned_offset.unwrap_or(0);
    }
    if Instant::now() >= deadline {
        // Splitting a million buffers into parts alone takes a tenth of a
        // second: nothing to search, keep the seed.
        let arena = height(problem, &offsets);
        return Attempt {
            offsets,
            strategy: Strategy::Search,
            proven_optimal: arena <= bound,
            checked: false,
            stats: PlanStats {
                limit_hit: true,
                ..PlanStats::default()
            },
        };
    }
    let mut nodes_left = options.node_limit.unwrap_or(u64::MAX);
    // The time sweep first, with its share of the time (off by default).
    let (first, swept) =
        super::sweep::first_share(problem, options, &offsets, target, bound, deadline);
    if let Some(found) = first {
        return found;
    }
    nodes_left = nodes_left.saturating_sub(swept);
    let parts = if flags.decompose {
        partitions(problem, &active)
    } else {
        vec![active]
    };
    let part_height = |offsets: &[u64], part: &[usize]| {
        part.iter()
            .map(|&i| offsets[i].saturating_add(problem.buffers[i].size))
            .max()
            .unwrap_or(0)
    };
    let mut stats = PlanStats {
        nodes: swept,
        ..PlanStats::default()
    };
    let run = Run {
        deadline,
        threads: options
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        anytime: options.capacity.is_none(),
    };
    // Parts whose height is proven the least possible.
    let mut proven = vec![false; parts.len()];
    // Passes over the parts, tallest first. Each part searched gets a share
    // of the time left in proportion to its size, so one part that cannot
    // meet the goal does not starve the others (MiniMalloc E falls apart
    // into two parts; the first one used to take the whole budget). A part
    // stops at the height of the tallest before it, so when time is left
    // after a pass, the next one goes back to the tallest.
    loop {
        let heights: Vec<u64> = parts.iter().map(|p| part_height(&offsets, p)).collect();
        let mut order: Vec<usize> = (0..parts.len()).collect();
        order.sort_unstable_by_key(|&k| (Reverse(heights[k]), k));
        let searchable: Vec<bool> = (0..parts.len())
            .map(|k| !proven[k] && parts[k].len() <= MAX_PART && heights[k] > target)
            .collect();
        let mut weight: usize = order
            .iter()
            .filter(|&&k| searchable[k])
            .map(|&k| parts[k].len())
            .sum();
        let mut reached = 0u64; // Highest final part height so far.
        let mut searched = false;
        for &k in &order {
            let part = &parts[k];
            let h = part_height(&offsets, part);
            let goal = target.max(reached);
            let now = Instant::now();
            if searchable[k] && h > goal && now < deadline && nodes_left > 0 {
                let share = part.len() as f64 / weight.max(1) as f64;
                weight = weight.saturating_sub(part.len());
                let entries = setup_entries(problem, part);
                let setup = Duration::from_nanos(entries.saturating_mul(SETUP_NS_PER_ENTRY));
                if entries > MAX_ENTRIES
                    || setup >= deadline.duration_since(now).mul_f64(share.min(1.0))
                {
                    reached = reached.max(h);
                    continue;
                }
                let mut dfs = build(problem, part, flags);
                let seed: Vec<u64> = part.iter().map(|&g| offsets[g]).collect();
                // Runs stop within a node of the deadline, but winding a
                // decision down (undoing placements, the probe lane's last
                // try, joining the runs) took up to 60 ms after it on a
                // 20,000-buffer part and 80 ms on a 10,000-buffer one at
                // load 4: stop 8 µs per buffer earlier.
                let wind_down = Duration::from_nanos(part.len() as u64 * WIND_DOWN_NS);
                let run = Run {
                    deadline: (now + deadline.duration_since(now).mul_f64(share.min(1.0)))
                        .checked_sub(wind_down)
                        .unwrap_or(now),
                    ..run
                };
                let (best, ended) = minimize(&mut dfs, seed, h, goal, &run, &mut nodes_left);
                searched = true;
                stats.nodes += dfs.nodes;
                stats.backtracks += dfs.backtracks;
                stats.limit_hit |= ended == Ended::Limit;
                proven[k] = ended == Ended::Proven;
                for (l, &g) in part.iter().enumerate() {
                    offsets[g] = best[l];
                }
            }
            reached = reached.max(part_height(&offsets, part));
        }
        if !searched || reached <= target || Instant::now() >= deadline || nodes_left == 0 {
            break;
        }
    }
    let reached = parts
        .iter()
        .map(|p| part_height(&offsets, p))
        .max()
        .unwrap_or(0);
    let proven_top =
        (0..parts.len()).any(|k| proven[k] && part_height(&offsets, &parts[k]) == reached);
    let arena = height(problem, &offsets);
    Attempt {
        offsets,
        strategy: Strategy::Search,
        proven_optimal: arena <= bound || (proven_top && arena == reached),
        checked: false,
        stats,
    }
}

/// How many entries [`build`] would write for `part`: conflict list
/// entries plus section memberships (upper bounds for conflict graphs), in
/// O(m log m) without building either.
fn setup_entries(problem: &Problem, part: &[usize]) -> u64 {
    match &problem.conflicts {
        ConflictModel::Lifetimes => {
            let life = |i: usize| problem.buffers[i].lifetime;
            let mut starts: Vec<u32> = part.iter().map(|&i| life(i).start).collect();
            let mut ends: Vec<u32> = part.iter().map(|&i| life(i).end).collect();
            let mut points: Vec<u32> = starts.iter().chain(&ends).copied().collect();
            starts.sort_unstable();
            ends.sort_unstable();
            points.sort_unstable();
            points.dedup();
            part.iter()
                .map(|&i| {
                    let l = life(i);
                    // Buffers starting before this one ends, less those
                    // ended by the time it starts: its neighbours and itself.
                    let overlapping = (starts.partition_point(|&s| s < l.end) as u64)
                        .saturating_sub(ends.partition_point(|&e| e <= l.start) as u64);
                    let spanned = (points.partition_point(|&p| p < l.end) as u64)
                        .saturating_sub(points.partition_point(|&p| p < l.start) as u64);
                    overlapping + spanned
                })
                .fold(0u64, u64::saturating_add)
        }
        ConflictModel::Explicit(adj) => part
            .iter()
            .map(|&i| 2 * adj[i].len() as u64 + 1)
            .fold(0u64, u64::saturating_add),
    }
}

/// Independent parts of the non-trivial buffers.
fn partitions(problem: &Problem, active: &[usize]) -> Vec<Vec<usize>> {
    match &problem.conflicts {
        ConflictModel::Lifetimes => {
            let mut by_start = active.to_vec();
            by_start.sort_unstable_by_key(|&i| (problem.buffers[i].lifetime.start, i));
            let mut parts: Vec<Vec<usize>> = Vec::new();
            let mut reach = 0u32;
            for i in by_start {
                let l = problem.buffers[i].lifetime;
                match parts.last_mut() {
                    Some(p) if l.start < reach => p.push(i),
                    _ => parts.push(vec![i]),
                }
                reach = reach.max(l.end);
            }
            parts
        }
        ConflictModel::Explicit(_) => {
            let adj = problem.conflict_lists();
            let mut seen = vec![false; problem.buffers.len()];
            let mut parts = Vec::new();
            for &s in active {
                if seen[s] {
                    continue;
                }
                seen[s] = true;
                let mut p = vec![s];
                let mut k = 0;
                while k < p.len() {
                    for j in &adj[p[k]] {
                        if !seen[j.index()] && !problem.is_trivial(j.index()) {
                            seen[j.index()] = true;
                            p.push(j.index());
                        }
                    }
                    k += 1;
                }
                parts.push(p);
            }
            parts
        }
    }
}

/// One search of the portfolio: a preorder (key letters compared in turn,
/// each descending, as MiniMalloc names them: `T` the heaviest section the
/// buffer is in, `W` its width (lifetime length), `C` how many sections it
/// spans, `A` size × length, `Z` size), the canonical tie rule at one
/// offset, a seed (0: the preorder as it is; else each buffer moves by up
/// to a tenth of the positions, a randomised restart) and its node limit.
#[derive(Clone, Copy)]
pub(crate) struct Heuristic {
    pub keys: &'static str,
    pub ties: Ties,
    pub seed: u64,
    pub nodes: u64,
}

/// How buffers placed at one offset are ordered (both rules are complete).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ties {
    /// In the preorder (MiniMalloc's rule).
    Preorder,
    /// Left to right in time (see [`SearchOptions::time_ties`]); candidates
    /// tried in the preorder.
    Time,
    /// Left to right in time, candidates at one offset also tried left to
    /// right (a bottom-left fill).
    TimeLeftFirst,
}

/// The static members, in the order their answers are preferred, and the
/// share of the decision's node limit each gets (`limit / share`).
/// MiniMalloc's three preorders come first: `W` is the lifetime's length
/// (this crate's first portfolio read it as the number of sections spanned,
/// `C` here, which is what left challenge K unsolved: `TCA` runs past
/// 1,000,000 nodes, `WAT` solves it in about 2,000). Between them they
/// settle A–E, K and the perturbed B and D in 2,600–19,000 nodes each.
/// `TCA` and `ACT` (the first portfolio's `TWA` and `AWT`) run at half
/// pace: `ACT` settles perturb-B-2 at its bound in 900 nodes, where the
/// others need 16,000 or more.
/// Time ties fill full sections row by row and settle some instances that
/// preorder ties miss; they get an eighth of the nodes.
const STATIC: [(&str, Ties, u64); 7] = [
    ("TWA", Ties::Preorder, 1),
    ("TAW", Ties::Preorder, 1),
    ("WAT", Ties::Preorder, 1),
    ("TCA", Ties::Preorder, 2),
    ("ACT", Ties::Preorder, 2),
    ("TAW", Ties::Time, 8),
    ("TAW", Ties::TimeLeftFirst, 8),
];

/// Randomised restarts: two lanes, each running restarts one after the
/// other (each with this many nodes per buffer, at least [`RESTART_MIN`])
/// under the decision's node limit, with the pace of a static preorder. On the perturbed instances
/// about one restart in forty finds a layout that every static preorder
/// misses within 300,000 nodes: the search's cost there is heavy-tailed in
/// the preorder.
const RESTART_NODES: u64 = 4;
const RESTART_MIN: u64 = 512;
const RESTART_LANES: u64 = 2;

/// The searches [`decide`] runs on `dfs`, each with its share of the node
/// limit (`limit / share`): without lifetimes, or with `time_ties` off, no
/// time-tie ones. The list depends on nothing but the part and `limit`.
fn portfolio(dfs: &Dfs, limit: u64) -> Vec<(Heuristic, u64)> {
    let time = dfs.flags.time_ties && dfs.span.is_some();
    let mut runs: Vec<(Heuristic, u64)> = STATIC
        .into_iter()
        .filter(|&(_, ties, _)| time || ties == Ties::Preorder)
        .map(|(keys, ties, share)| {
            let h = Heuristic {
                keys,
                ties,
                seed: 0,
                nodes: (limit / share).max(1),
            };
            (h, share)
        })
        .collect();
    for seed in lane_seeds(limit) {
        let h = Heuristic {
            keys: "TWA",
            ties: Ties::Preorder,
            seed,
            nodes: limit,
        };
        runs.push((h, 1));
    }
    runs
}

/// The seed of restart `k` of a lane seeded `lane` (odd: 0 means no
/// restart).
fn restart_seed(lane: u64, k: u64) -> u64 {
    lane.wrapping_add(k.wrapping_mul(0x2545_F491_4F6C_DD1D)) | 1
}

/// The lane seeds of the restart runs [`portfolio`] builds for `limit`.
fn lane_seeds(limit: u64) -> impl Iterator<Item = u64> {
    (0..RESTART_LANES).map(move |lane| {
        // Lanes differ above the low bit: [`restart_seed`] forces its seed
        // odd, which made every other restart of the two lanes the same
        // when they differed in the lowest two bits only.
        limit.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ((lane + 1) << 32)
    })
}

/// One run of the portfolio under its node limit: one search in its
/// preorder, or (with a seed) randomised restarts one after the other.
fn run_one(dfs: &mut Dfs, h: Heuristic, cap: u64, deadline: Instant) -> Outcome {
    if h.seed == 0 {
        dfs.set_preorder(h);
        let (before, t) = (dfs.nodes, Instant::now());
        let outcome = dfs.decide(cap, h.nodes, deadline);
        trace(dfs, h, cap, &outcome, dfs.nodes - before, t);
        return outcome;
    }
    let each = (RESTART_NODES * dfs.size.len() as u64).max(RESTART_MIN);
    let mut used = 0;
    let mut k = 0u64;
    while used < h.nodes {
        let one = Heuristic {
            keys: ["TWA", "TAW", "WAT"][(k % 3) as usize],
            seed: restart_seed(h.seed, k),
            nodes: each.min(h.nodes - used),
            ..h
        };
        dfs.set_preorder(one);
        let (before, t) = (dfs.nodes, Instant::now());
        let outcome = dfs.decide(cap, one.nodes, deadline);
        let spent = dfs.nodes - before;
        trace(dfs, one, cap, &outcome, spent, t);
        used += spent;
        if !matches!(outcome, Outcome::Limit) || spent < one.nodes {
            // Settled, or stopped by the deadline or the lockstep.
            return outcome;
        }
        k += 1;
    }
    Outcome::Limit
}

/// How [`minimize`] stopped.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// No smaller layout exists.
    Proven,
    /// The layout is within the goal (the bound or the capacity), which
    /// proves nothing about smaller layouts when the goal is a capacity.
    GoalMet,
    /// A time or node limit stopped the search.
    Limit,
}

/// Lowers the height of one part from `seed` (of height `hi`) until it is
/// at most `goal`. Returns the best layout and how the search ended.
///
/// After a brief try at the proven bound (a tight cap prunes hardest, so a
/// layout at the bound often comes sooner than one merely within a looser
/// goal), one decision at the bottom cap (the larger of the goal and the
/// proven bound) runs until it settles or time runs out; when it proves
/// the cap infeasible, the next one starts above it. When `anytime`
/// (minimising; with a capacity as the goal a layout above it is worth
/// nothing), a probe lane runs beside the portfolio in the same lockstep
/// and lowers the incumbent meanwhile ([`probe_lane`]).
fn minimize(
    dfs: &mut Dfs,
    seed: Vec<u64>,
    mut hi: u64,
    goal: u64,
    run: &Run,
    nodes_left: &mut u64,
) -> (Vec<u64>, Ended) {
    let mut best = seed;
    let mut lo = dfs.lower_bound();
    let brief = (4 * dfs.size.len() as u64).max(256);
    let deadline = run.deadline;
    if goal > lo && hi > goal {
        let (outcome, _) = decide(dfs, lo, brief, None, deadline, nodes_left, run.threads);
        if let Outcome::Found(layout) = outcome {
            return (layout, Ended::Proven);
        }
    }
    loop {
        if lo >= hi {
            return (best, Ended::Proven);
        }
        if hi <= goal {
            return (best, Ended::GoalMet);
        }
        if *nodes_left == 0 || Instant::now() >= deadline {
            return (best, Ended::Limit);
        }
        let bottom = lo.max(goal);
        let probe = run.anytime.then_some(hi);
        let (outcome, probed) = decide(
            dfs,
            bottom,
            u64::MAX / 4,
            probe,
            deadline,
            nodes_left,
            run.threads,
        );
        if let Some(Probed { layout, lo: proven }) = probed {
            if let Some(layout) = layout {
                let h = height_of(&layout, &dfs.size);
                if h < hi {
                    (hi, best) = (h, layout);
                }
            }
            lo = lo.max(proven);
        }
        match outcome {
            Outcome::Found(layout) => {
                hi = height_of(&layout, &dfs.size);
                best = layout;
            }
            Outcome::Infeasible(next) => lo = lo.max(next.max(bottom + 1)),
            Outcome::Limit => {
                let ended = if lo >= hi {
                    Ended::Proven
                } else {
                    Ended::Limit
                };
                return (best, ended);
            }
        }
    }
}

fn height_of(layout: &[u64], size: &[u64]) -> u64 {
    layout
        .iter()
        .zip(size)
        .map(|(o, s)| o + s)
        .max()
        .unwrap_or(0)
}

/// The probe lane's pace against a static preorder's. At 3 it once cost
/// A its optimum within 1 s (the winning run's 18,800 nodes were paid by
/// every run in the lockstep); since the unallocated floor is checked
/// lazily A settles in about 40,000 nodes of all runs together at four
/// times the speed, and 2 keeps A–E, K and the perturbed A, B and E at
/// their bounds in 0.4 s or less at load 6 while the lane reaches
/// MiniMalloc's D below 1,048,576 B within 0.4 s.
const PROBE_PACE: u64 = 2;

/// The probe lane's tries, in turn: seven against three caps per cycle,
/// so each cap meets every kind. A lane of static preorders alone left
/// MiniMalloc's D at 1,053,696 B even with eighteen times the nodes: its
/// four preorders all ran out of nodes at caps where a bottom-left fill
/// (time ties, left first) or a randomised preorder of the portfolio
/// finds a layout in a few hundred to 3,000 nodes (1,026,048 B,
/// 1,045,248 B, 1,048,576 B); the search's cost is heavy-tailed in the
/// order, so the lane varies it as the portfolio does. An order that has
/// just found a layout keeps the next cap (see [`probe_lane`]).
const PROBE_TRIES: [(&str, Ties, bool); 7] = [
    ("TWA", Ties::Preorder, false),
    ("TAW", Ties::TimeLeftFirst, false),
    ("WAT", Ties::Preorder, true),
    ("TAW", Ties::Preorder, false),
    ("TWA", Ties::Preorder, true),
    ("TAW", Ties::Time, false),
    ("WAT", Ties::Preorder, false),
];

/// The probe lane's restart seeds come from this lane seed (any value
/// other than the portfolio's lanes').
const PROBE_SEED: u64 = 0x05EE_D0F9_B0BE;

/// What the probe lane leaves: its best layout and the least height it
/// proved (a cap it exhausted, plus one).
#[derive(Default)]
struct Probed {
    layout: Option<Vec<u64>>,
    lo: u64,
}

/// The anytime lane of a minimising decision at `bottom`: from the
/// incumbent height `hi` down, it tries caps halfway to `bottom`, and
/// after a try that runs out of nodes, nearer the incumbent (3/4, 7/8 of
/// the way up), then halfway again with twice the nodes; a layout found
/// or a cap proven infeasible starts over from the new incumbent or
/// bottom. (A bisection alone left MiniMalloc's D at 1.076 of its bound:
/// the cap halfway down stays too hard for small node limits.) It settles
/// the decision only when it reaches `bottom` itself.
fn probe_lane(
    dfs: &mut Dfs,
    (mut bottom, mut hi): (u64, u64),
    budget: u64,
    deadline: Instant,
    out: &std::sync::Mutex<Probed>,
) -> Outcome {
    let target = bottom;
    let mut grow = (4 * dfs.size.len() as u64).max(256);
    let mut depth = 1usize;
    let mut k = 0usize;
    let start = dfs.nodes;
    while hi > bottom + 1 && dfs.nodes - start < budget {
        let limit = grow.min(budget - (dfs.nodes - start));
        let gap = hi - bottom;
        let cap = hi - (gap >> depth).max(1);
        let (keys, ties, random) = PROBE_TRIES[k % PROBE_TRIES.len()];
        let h = Heuristic {
            keys,
            ties,
            seed: if random {
                restart_seed(PROBE_SEED, k as u64)
            } else {
                0
            },
            nodes: limit,
        };
        k += 1;
        dfs.set_preorder(h);
        let (before, t) = (dfs.nodes, Instant::now());
        let outcome = dfs.decide(cap, limit, deadline);
        let spent = dfs.nodes - before;
        trace(dfs, h, cap, &outcome, spent, t);
        match outcome {
            Outcome::Found(layout) => {
                hi = height_of(&layout, &dfs.size);
                let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
                o.layout = Some(layout.clone());
                if hi <= target {
                    return Outcome::Found(layout);
                }
                depth = 1;
                // The order that found this layout tries the next cap too.
                k -= 1;
            }
            Outcome::Infeasible(next) => {
                bottom = bottom.max(next.max(cap + 1));
                let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
                o.lo = o.lo.max(bottom);
                depth = 1;
            }
            Outcome::Limit => {
                if spent < limit {
                    break; // Stopped by the deadline or the lockstep.
                }
                depth += 1;
                if depth > 3 {
                    depth = 1;
                    grow = grow.saturating_mul(2);
                }
            }
        }
    }
    Outcome::Limit
}

/// What every decision of one search run shares.
#[derive(Clone, Copy)]
struct Run {
    deadline: Instant,
    threads: usize,
    /// Is a layout above the goal still worth having (no capacity given)?
    anytime: bool,
}

/// One decision: the portfolio's runs (see [`portfolio`]) under `limit`,
/// in lockstep on up to `threads` threads (see [`Gate`]): the answer is
/// that of the lowest-numbered run among those that settle the decision
/// (a layout, or an exhausted tree) in the first slice in which any does.
/// It depends on node counts only, never on which thread was faster: the
/// same input and limit give the same layout on any number of threads
/// (unless the deadline cuts a run short). With `probe` (the incumbent's
/// height), a [`probe_lane`] runs last in the lockstep; what it found is
/// returned beside the answer.
fn decide(
    dfs: &mut Dfs,
    cap: u64,
    limit: u64,
    probe: Option<u64>,
    deadline: Instant,
    nodes_left: &mut u64,
    threads: usize,
) -> (Outcome, Option<Probed>) {
    let budget = limit.min(*nodes_left);
    let runs = portfolio(dfs, budget);
    let lanes = runs.len() + usize::from(probe.is_some());
    let gate = Arc::new(Gate::new(lanes, threads, deadline));
    let probed = std::sync::Mutex::new(Probed::default());
    let slice = (2 * dfs.size.len() as u64).max(512);
    // The search recurses once per placement, so a run's stack grows with
    // the part (the first portfolio overflowed the default 2 MiB on a
    // 10,000-buffer part).
    let stack = (8 << 20) + 2048 * dfs.size.len();
    // Each run copies the part's data once it holds a thread token, on its
    // own thread: copying a 20,000-buffer part for every run up front took
    // tens of milliseconds the deadline did not see.
    let base: &Dfs = dfs;
    let (outcome, spent) = std::thread::scope(|scope| {
        let start = |nodes: u64| {
            let nodes = nodes.max(64);
            let mut mine = base.clone();
            mine.gate = Some(GateRun {
                gate: Arc::clone(&gate),
                nodes,
                next: mine.nodes + nodes,
                slice: 0,
            });
            mine
        };
        let mut handles = Vec::with_capacity(lanes);
        for (k, &(h, share)) in runs.iter().enumerate() {
            let gate = Arc::clone(&gate);
            handles.push(
                std::thread::Builder::new()
                    .stack_size(stack)
                    .spawn_scoped(scope, move || {
                        // A run that panics (e.g. printing a trace to a closed
                        // pipe) must still finish, or the lockstep waits forever.
                        let (outcome, spent) =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                if gate.start() {
                                    let mut mine = start(slice / share);
                                    let (before, backtracks) = (mine.nodes, mine.backtracks);
                                    let outcome = run_one(&mut mine, h, cap, deadline);
                                    (outcome, (mine.nodes - before, mine.backtracks - backtracks))
                                } else {
                                    (Outcome::Limit, (0, 0))
                                }
                            }))
                            .unwrap_or((Outcome::Limit, (0, 0)));
                        gate.finish(k, outcome);
                        spent
                    })
                    .expect("a search thread"),
            );
        }
        if let Some(hi) = probe {
            let k = runs.len();
            let (gate, probed) = (Arc::clone(&gate), &probed);
            handles.push(
                std::thread::Builder::new()
                    .stack_size(stack)
                    .spawn_scoped(scope, move || {
                        let (outcome, spent) =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                if gate.start() {
                                    let mut mine = start(PROBE_PACE * slice);
                                    let (before, backtracks) = (mine.nodes, mine.backtracks);
                                    let outcome =
                                        probe_lane(&mut mine, (cap, hi), budget, deadline, probed);
                                    (outcome, (mine.nodes - before, mine.backtracks - backtracks))
                                } else {
                                    (Outcome::Limit, (0, 0))
                                }
                            }))
                            .unwrap_or((Outcome::Limit, (0, 0)));
                        gate.finish(k, outcome);
                        spent
                    })
                    .expect("a search thread"),
            );
        }
        let outcome = gate.coordinate();
        let spent: Vec<(u64, u64)> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or((0, 0)))
            .collect();
        (outcome, spent)
    });
    for (nodes, backtracks) in spent {
        dfs.nodes += nodes;
        dfs.backtracks += backtracks;
        *nodes_left = nodes_left.saturating_sub(nodes);
    }
    let probed = probe.map(|_| probed.into_inner().unwrap_or_else(|e| e.into_inner()));
    (outcome, probed)
}

/// With `STOW_PLAN_TRACE` set, one line per decision run on standard
/// error: what it decided, how fast, how deep, and which pruning fired.
fn trace(dfs: &Dfs, h: Heuristic, cap: u64, outcome: &Outcome, nodes: u64, t: Instant) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*ON.get_or_init(|| std::env::var_os("STOW_PLAN_TRACE").is_some()) {
        return;
    }
    let secs = t.elapsed().as_secs_f64();
    let p = &dfs.prunes;
    eprintln!(
        "decide {}{}{} bufs {} cap {cap} limit {} -> {} nodes {nodes} ({:.0}/s) | depth max {} dead min {} mean {:.1} | canon {} dom {} cap {} infer {} level {} ties {} hatless {} / {} rows {} memo {}",
        h.keys,
        match h.ties {
            Ties::Preorder => "",
            Ties::Time => "/time",
            Ties::TimeLeftFirst => "/left",
        },
        if h.seed == 0 { "" } else { "/random" },
        dfs.size.len(),
        h.nodes,
        match outcome {
            Outcome::Found(_) => "found".to_string(),
            Outcome::Infeasible(n) => format!("infeasible (next {n})"),
            Outcome::Limit => "limit".to_string(),
        },
        nodes as f64 / secs.max(1e-9),
        p.max_depth,
        p.min_dead_depth,
        p.dead_depth_sum as f64 / p.dead.max(1) as f64,
        p.canonical,
        p.dominance,
        p.over_cap,
        p.inference,
        p.level,
        p.ties,
        p.hatless_dead,
        p.hatless_cut,
        p.rows,
        p.memo,
    );
}

/// The search data of one part (buffer `k` of the part is `part[k]`).
fn build(problem: &Problem, part: &[usize], flags: SearchOptions) -> Dfs {
    let sub = problem.subproblem(part);
    let adj: Vec<Vec<u32>> = sub
        .conflict_lists()
        .into_iter()
        .map(|l| l.into_iter().map(|b| b.0).collect())
        .collect();
    let sections = sections(&sub, &adj);
    let span = match sub.conflicts {
        ConflictModel::Lifetimes => {
            let mut span = vec![(u32::MAX, 0u32); part.len()];
            for (s, members) in sections.iter().enumerate() {
                for &i in members {
                    let e = &mut span[i as usize];
                    e.0 = e.0.min(s as u32);
                    e.1 = e.1.max(s as u32 + 1);
                }
            }
            Some(span)
        }
        ConflictModel::Explicit(_) => None,
    };
    let lengths = sub
        .buffers
        .iter()
        .map(|b| u64::from(b.lifetime.end.saturating_sub(b.lifetime.start)))
        .collect();
    Dfs::new(
        flags,
        sub.buffers.iter().map(|b| b.size).collect(),
        sub.buffers.iter().map(|b| b.align).collect(),
        sub.buffers.iter().map(|b| b.pinned_offset).collect(),
        adj,
        sections,
        span,
        lengths,
    )
}

/// Sets of pairwise-conflicting buffers covering every buffer: the live
/// sets of elementary time segments, or greedy maximal cliques.
fn sections(sub: &Problem, adj: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let m = sub.buffers.len();
    match &sub.conflicts {
        ConflictModel::Lifetimes => {
            let mut points: Vec<u32> = sub
                .buffers
                .iter()
                .flat_map(|b| [b.lifetime.start, b.lifetime.end])
                .collect();
            points.sort_unstable();
            points.dedup();
            let mut sections = vec![Vec::new(); points.len().saturating_sub(1)];
            for (i, b) in sub.buffers.iter().enumerate() {
                let lo = points.partition_point(|&p| p < b.lifetime.start);
                let hi = points.partition_point(|&p| p < b.lifetime.end);
                for s in &mut sections[lo..hi] {
                    s.push(i as u32);
                }
            }
            sections.retain(|s| !s.is_empty());
            sections.dedup();
            sections
        }
        ConflictModel::Explicit(_) => {
            let size = |i: u32| sub.buffers[i as usize].size;
            let mut cliques: Vec<Vec<u32>> = Vec::with_capacity(m);
            for v in 0..m as u32 {
                let mut cands = adj[v as usize].clone();
                cands.sort_by_key(|&c| (Reverse(size(c)), c));
                let mut clique = vec![v];
                for c in cands {
                    if clique
                        .iter()
                        .all(|&k| adj[k as usize].binary_search(&c).is_ok())
                    {
                        clique.push(c);
                    }
                }
                clique.sort_unstable();
                cliques.push(clique);
            }
            cliques.sort();
            cliques.dedup();
            cliques
        }
    }
}

#[cfg(test)]
mod tests;

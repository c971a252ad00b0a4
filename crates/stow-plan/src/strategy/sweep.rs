//! A search that sweeps time instead of offset, for near-perfect packings
//! (docs/PLANNER.md, "The time sweep search").
//!
//! At each event time (a time some buffer starts) the buffers starting
//! there go into the bytes free at that time, each free run filled bottom
//! up. The state after an event is the *frontier*, the buffers live across
//! the next event with their offsets, and what can follow depends on
//! nothing else, so a frontier from which the rest failed is remembered as
//! dead whatever led to it. Unlike the offset-ordered search, a wrong
//! choice is refuted within its column of time.
//!
//! Where a time has slack (the bytes free exceed what starts there), a
//! run may get one hole, after which the rest of it is filled exactly; the
//! sweep tries only the smallest few such holes, so it is incomplete there
//! and a failure proves nothing (callers never claim infeasibility from
//! it). On perfect packings every free byte must be filled and the sweep
//! is complete over layouts in which buffers alike in size and end are
//! interchangeable.
//!
//! Pruning, at each placement: the runs free at each of the next
//! [`DEPTH`] events that lie wholly below the current offset (closed by
//! buffers live across that event) can only be filled by buffers starting
//! after this event and live at that one, so what they must leave empty
//! (subset sums of those sizes, a bitset) must fit that event's slack;
//! for the next event they are also checked together ([`joint_fit`]).
//! When a run of the current event is entered, the rest of its runs must
//! be fillable by the unused buffers of this event within its slack.

use super::{height, Attempt, PlanStats, Strategy};
use crate::problem::{ConflictModel, Problem};
use crate::PlanOptions;
use fill::{gcd, joint_fit, luby, splitmix, Bits, JOINT_ITEMS, JOINT_NODES};
use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Instant;

/// Above this many units (cap divided by the sizes' common divisor) the
/// subset-sum bitsets are not built and those checks are skipped.
const MAX_UNITS: u64 = 1 << 16;

/// How many events ahead the closed runs are checked.
const DEPTH: usize = 16;

/// A buffer index standing for the arena's top in [`Sweep::feed`].
const TOP: u32 = u32::MAX;

/// How many events ahead the closed runs are also checked together
/// ([`joint_fit`]): further ahead the assignment searches cost more than
/// they save (perfect 1 MiB cut rectangles: 10,000-35,000 placements a
/// second checking 16 events ahead, 450,000 checking one).
const JOINT_DEPTH: usize = 1;

/// Nodes of a restart, times the Luby sequence.
const ROUND_NODES: u64 = 20_000;

/// Most buffers the sweep takes on: its recursion goes a frame or two per
/// placement (under a kilobyte each), on a thread of [`STACK`] bytes.
pub(crate) const MAX_BUFFERS: usize = 4_096;

/// The sweep's thread's stack.
const STACK: usize = 64 << 20;

/// What [`pack`] found.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// A layout within the cap, or `None`.
    pub offsets: Option<Vec<u64>>,
    /// Placements tried.
    pub nodes: u64,
}

struct Sweep {
    size: Vec<u64>,
    end: Vec<u32>,
    align: Vec<u64>,
    cap: u64,
    times: Vec<u32>,
    /// Buffers starting at each event, largest first.
    starting: Vec<Vec<u32>>,
    /// Bytes free at each event once everything live there is placed.
    slack: Vec<u64>,
    /// Subset sums of each event's starting sizes (in units).
    sums: Vec<Option<Bits>>,
    /// `ahead_sums[k][d - 1]`: subset sums of the sizes of the buffers
    /// starting after event `k` and live at event `k + d`.
    ahead_sums: Vec<Vec<Bits>>,
    /// The same buffers' sizes in units, largest first, where there are
    /// few enough for [`joint_fit`] (else empty).
    ahead_items: Vec<Vec<Vec<u64>>>,
    /// Runs closed by the lookahead: (event, depth, length in units).
    closed: Vec<(u32, u8, u64)>,
    unit: u64,
    offset: Vec<u64>,
    dead: HashSet<u128>,
    nodes: u64,
    limit: u64,
    deadline: Instant,
    stopped: bool,
    /// Where the current restart's nodes end.
    round_end: u64,
    /// Per event: frontiers entered, and found dead (for the trace).
    entered: Vec<u64>,
    failed: Vec<u64>,
}

/// The lookahead's state: where the run free at the next event that is
/// still open began, and the least waste the closed runs force there.
#[derive(Clone, Copy)]
struct Ahead {
    open: Option<u64>,
    waste: u64,
}

/// One event's fixed data during its tiling.
struct Event<'e> {
    k: usize,
    gaps: &'e [(u64, u64)],
    /// Buffers live across this event, continuing, by offset.
    cont: &'e [(u64, u32)],
    /// `first[g]`: the first of `cont` above gap `g`'s bottom.
    first: &'e [usize],
    new: &'e [u32],
}

impl Sweep {
    fn out_of_budget(&mut self) -> bool {
        self.nodes += 1;
        if self.nodes > self.limit
            || (self.nodes.is_multiple_of(1024) && Instant::now() >= self.deadline)
        {
            self.stopped = true;
        }
        self.stopped || self.nodes > self.round_end
    }

    /// The least waste a run of `len` bytes free at event `k + d` forces,
    /// filled only by buffers starting after event `k`.
    fn forced_waste(&self, k: usize, d: usize, len: u64) -> u64 {
        match self.ahead_sums[k].get(d - 1) {
            Some(bits) if len.is_multiple_of(self.unit) => {
                len - bits.best_below(len / self.unit) * self.unit
            }
            _ => 0,
        }
    }

    /// Feeds the segment of the layout at event `k` from `lo` up, bottom
    /// up, to the lookahead at the events after it: held by buffer `i`
    /// (`None`: left empty; [`TOP`]: the arena's top). A run free at event
    /// `k + d` closed below and above by buffers live across it must be
    /// filled by buffers starting after event `k` and live at `k + d`;
    /// false when the closed runs force more waste than that event has.
    fn feed(&mut self, k: usize, a: &mut [Ahead; DEPTH], lo: u64, i: Option<u32>) -> bool {
        let end = i.map_or(0, |i| {
            if i == TOP {
                u32::MAX
            } else {
                self.end[i as usize]
            }
        });
        for d in 1..=DEPTH.min(self.times.len() - 1 - k) {
            let a = &mut a[d - 1];
            if end > self.times[k + d] {
                if let Some(o) = a.open.take() {
                    a.waste += self.forced_waste(k, d, lo - o);
                    if a.waste > self.slack[k + d] {
                        return false;
                    }
                    let items = &self.ahead_items[k][d - 1];
                    if d <= JOINT_DEPTH && !items.is_empty() && (lo - o).is_multiple_of(self.unit) {
                        let tag = (k as u32, d as u8);
                        self.closed.push((tag.0, tag.1, (lo - o) / self.unit));
                        let mut runs: Vec<u64> = self
                            .closed
                            .iter()
                            .rev()
                            .take_while(|c| c.0 == tag.0)
                            .filter(|c| c.1 == tag.1)
                            .map(|c| c.2)
                            .collect();
                        if runs.len() > 1 {
                            runs.sort_unstable_by(|x, y| y.cmp(x));
                            let budget = self.slack[k + d] / self.unit;
                            let mut left = JOINT_NODES;
                            if joint_fit(&mut runs, items, 0, budget, &mut left) == Some(false) {
                                return false;
                            }
                        }
                    }
                }
            } else if a.open.is_none() {
                a.open = Some(lo);
            }
        }
        true
    }

    /// Places the buffers starting at event `k` and after, given the
    /// buffers `live` (with offsets) across the event before. `None` when
    /// the budget ran out.
    fn solve(&mut self, k: usize, live: &[(u64, u32)]) -> Option<bool> {
        if k == self.times.len() {
            return Some(true);
        }
        let t = self.times[k];
        let mut cont: Vec<(u64, u32)> = live
            .iter()
            .copied()
            .filter(|&(_, i)| self.end[i as usize] > t)
            .collect();
        cont.sort_unstable();
        let key = {
            let mut h = DefaultHasher::new();
            (k, &cont).hash(&mut h);
            let a = h.finish();
            let mut h = DefaultHasher::new();
            (&cont, k, 0x9e37u32).hash(&mut h);
            (u128::from(a) << 64) | u128::from(h.finish())
        };
        if self.dead.contains(&key) {
            return Some(false);
        }
        self.entered[k] += 1;
        // The free runs at `t`, bottom up, and which continuing buffers lie
        // below each.
        let (mut gaps, mut first) = (Vec::new(), Vec::new());
        let mut at = 0;
        for (n, &(o, i)) in cont.iter().enumerate() {
            if o > at {
                gaps.push((at, o));
                first.push(n);
            }
            at = at.max(o + self.size[i as usize]);
        }
        if at < self.cap {
            gaps.push((at, self.cap));
            first.push(cont.len());
        }
        let new = self.starting[k].clone();
        let mut used = vec![false; new.len()];
        let mut placed = cont.clone();
        let ev = Event {
            k,
            gaps: &gaps,
            cont: &cont,
            first: &first,
            new: &new,
        };
        // The continuing buffers below the first run.
        let mut ahead = [Ahead {
            open: None,
            waste: 0,
        }; DEPTH];
        let upto = first.first().copied().unwrap_or(cont.len());
        let mut ok = true;
        for &(o, i) in &cont[..upto] {
            ok &= self.feed(k, &mut ahead, o, Some(i));
        }
        let r = if ok {
            self.tile(
                &ev,
                0,
                None,
                false,
                self.slack[k],
                ahead,
                &mut used,
                &mut placed,
            )
        } else {
            Some(false)
        };
        self.closed.retain(|c| c.0 as usize != k);
        if r == Some(false) {
            self.failed[k] += 1;
            self.dead.insert(key);
        }
        r
    }

    /// Fills run `g` of event `ev` from `at` (`None`: its bottom) up with
    /// unused buffers, then the next runs, then goes on to the next event.
    /// `waste` is the slack left at this event.
    #[allow(clippy::too_many_arguments)]
    fn tile(
        &mut self,
        ev: &Event,
        g: usize,
        at: Option<u64>,
        holed: bool,
        waste: u64,
        ahead: [Ahead; DEPTH],
        used: &mut [bool],
        placed: &mut Vec<(u64, u32)>,
    ) -> Option<bool> {
        let mark = self.closed.len();
        let r = self.tile_runs(ev, g, at, holed, waste, ahead, used, placed);
        self.closed.truncate(mark);
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn tile_runs(
        &mut self,
        ev: &Event,
        g: usize,
        at: Option<u64>,
        holed: bool,
        waste: u64,
        mut ahead: [Ahead; DEPTH],
        used: &mut [bool],
        placed: &mut Vec<(u64, u32)>,
    ) -> Option<bool> {
        let k = ev.k;
        let (mut g, mut at) = (g, at);
        if let Some(a) = at {
            if a == ev.gaps[g].1 {
                // Run `g` is full: feed the continuing buffers above it.
                let upto = ev.first.get(g + 1).copied().unwrap_or(ev.cont.len());
                for &(o, i) in &ev.cont[ev.first[g]..upto] {
                    if !self.feed(k, &mut ahead, o, Some(i)) {
                        return Some(false);
                    }
                }
                g += 1;
                at = None;
            }
        }
        let holed = holed && at.is_some();
        if g == ev.gaps.len() {
            // Every run is done: every starting buffer must be placed.
            if !used.iter().all(|&u| u) {
                return Some(false);
            }
            if !self.feed(k, &mut ahead, self.cap, Some(TOP)) {
                return Some(false);
            }
            return self.solve(k + 1, placed);
        }
        let (lo, hi) = ev.gaps[g];
        let at = match at {
            Some(a) => a,
            None => {
                // Entering a run: the rest of the runs must be fillable by
                // the unused buffers within the slack left.
                if self.sums[k].is_some() {
                    let mut bits = Bits::new(self.cap / self.unit);
                    for (x, &i) in ev.new.iter().enumerate() {
                        if !used[x] {
                            bits.add(self.size[i as usize] / self.unit);
                        }
                    }
                    let mut w = 0;
                    for &(a, b) in &ev.gaps[g..] {
                        let len = b - a;
                        w += len - bits.best_below(len / self.unit) * self.unit;
                    }
                    if w > waste {
                        return Some(false);
                    }
                }
                lo
            }
        };
        let room = hi - at;
        let mut tried: Vec<(u64, u32)> = Vec::new();
        for x in 0..ev.new.len() {
            let i = ev.new[x];
            let (s, e) = (self.size[i as usize], self.end[i as usize]);
            if used[x]
                || s > room
                || tried.contains(&(s, e))
                || !at.is_multiple_of(self.align[i as usize])
            {
                continue; // Buffers alike in size and end are one choice.
            }
            tried.push((s, e));
            if self.out_of_budget() {
                return None;
            }
            let mut a = ahead;
            let mark = self.closed.len();
            if !self.feed(k, &mut a, at, Some(i)) {
                self.closed.truncate(mark);
                continue;
            }
            used[x] = true;
            self.offset[i as usize] = at;
            placed.push((at, i));
            let r = self.tile(ev, g, Some(at + s), holed, waste, a, used, placed);
            self.closed.truncate(mark);
            placed.pop();
            used[x] = false;
            if r != Some(false) {
                return r;
            }
        }
        if holed || waste == 0 {
            return Some(false);
        }
        // Leave a hole of `h` bytes (at most one a run) where the rest of
        // the run can still be filled exactly by the unused buffers (or
        // the whole rest of it): the few smallest such holes.
        let mut holes: Vec<u64> = Vec::new();
        if self.sums[k].is_some() && room.is_multiple_of(self.unit) {
            let mut bits = Bits::new(self.cap / self.unit);
            for (x, &i) in ev.new.iter().enumerate() {
                if !used[x] {
                    bits.add(self.size[i as usize] / self.unit);
                }
            }
            let mut top = room / self.unit;
            while holes.len() < MAX_HOLES && top > 0 {
                let f = bits.best_below(top - 1);
                let h = room - f * self.unit;
                if h > waste {
                    break;
                }
                holes.push(h);
                if f == 0 {
                    break;
                }
                top = f;
            }
        } else if room <= waste {
            holes.push(room);
        }
        for h in holes {
            if self.out_of_budget() {
                return None;
            }
            let mut a = ahead;
            let mark = self.closed.len();
            let r = if self.feed(k, &mut a, at, None) {
                self.tile(ev, g, Some(at + h), true, waste - h, a, used, placed)
            } else {
                Some(false)
            };
            self.closed.truncate(mark);
            if r != Some(false) {
                return r;
            }
        }
        Some(false)
    }
}

/// Most hole sizes tried at one place.
const MAX_HOLES: usize = 3;

/// The sweep's share of a `search` decision ([`PlanOptions::sweep_permille`]
/// of the time and of the node limit, before the search): a layout within
/// `target` when it finds one, and the nodes it spent.
pub(crate) fn first_share(
    problem: &Problem,
    options: &PlanOptions,
    seed: &[u64],
    target: u64,
    bound: u64,
    deadline: Instant,
) -> (Option<Attempt>, u64) {
    if options.sweep_permille == 0 || height(problem, seed) <= target || !applies(problem) {
        return (None, 0);
    }
    // It packs perfect and near-perfect packings the offset-ordered search
    // does not, and proves nothing when it fails.
    let now = Instant::now();
    let share = f64::from(options.sweep_permille.min(1000)) / 1000.0;
    let until = now + deadline.saturating_duration_since(now).mul_f64(share);
    let nodes = options
        .node_limit
        .map_or(u64::MAX, |n| (n as f64 * share) as u64);
    let o = pack(problem, target, until, nodes);
    let found = o.offsets.filter(|f| height(problem, f) <= target).map(|f| {
        let arena = height(problem, &f);
        Attempt {
            offsets: f,
            strategy: Strategy::Search,
            proven_optimal: arena <= bound,
            checked: false,
            stats: PlanStats {
                nodes: o.nodes,
                ..PlanStats::default()
            },
        }
    });
    (found, o.nodes)
}

/// Whether the sweep can take `problem` on: lifetimes, nothing pinned, and
/// not too many buffers.
pub(crate) fn applies(problem: &Problem) -> bool {
    matches!(problem.conflicts, ConflictModel::Lifetimes)
        && problem.buffers.len() <= MAX_BUFFERS
        && problem.buffers.iter().all(|b| b.pinned_offset.is_none())
}

/// Looks for a layout of `problem` within `cap` bytes by sweeping time,
/// until `deadline` or `node_limit` placements. Buffers with no bytes or
/// an empty lifetime go at offset 0.
pub(crate) fn pack(problem: &Problem, cap: u64, deadline: Instant, node_limit: u64) -> Outcome {
    pack_hinted(problem, cap, deadline, node_limit, None)
}

/// [`pack`], where `hint` (a layout's offsets, and a number of events)
/// orders the candidates of the first events by that layout's offsets in
/// the first try: to measure how much of the cost is the order at those
/// events.
pub(crate) fn pack_hinted(
    problem: &Problem,
    cap: u64,
    deadline: Instant,
    node_limit: u64,
    hint: Option<(&[u64], usize)>,
) -> Outcome {
    // On its own thread: the caller's stack may be small (2 MiB on test
    // threads) for a recursion as deep as the buffers.
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(STACK)
            .spawn_scoped(s, || sweep(problem, cap, deadline, node_limit, hint))
            .ok()
            .and_then(|t| t.join().ok())
    })
    .unwrap_or(Outcome {
        offsets: None,
        nodes: 0,
    })
}

fn sweep(
    problem: &Problem,
    cap: u64,
    deadline: Instant,
    node_limit: u64,
    hint: Option<(&[u64], usize)>,
) -> Outcome {
    let none = |nodes| Outcome {
        offsets: None,
        nodes,
    };
    if !applies(problem) {
        return none(0);
    }
    let b = &problem.buffers;
    let real: Vec<usize> = (0..b.len())
        .filter(|&i| b[i].size > 0 && b[i].lifetime.start < b[i].lifetime.end)
        .collect();
    if real.iter().any(|&i| b[i].size > cap) {
        return none(0);
    }
    let mut times: Vec<u32> = real.iter().map(|&i| b[i].lifetime.start).collect();
    times.sort_unstable();
    times.dedup();
    let n_events = times.len();
    let mut starting = vec![Vec::new(); times.len()];
    for &i in &real {
        let k = times
            .binary_search(&b[i].lifetime.start)
            .expect("every start is an event");
        starting[k].push(i as u32);
    }
    for s in &mut starting {
        s.sort_unstable_by_key(|&i| {
            let x = &b[i as usize];
            (std::cmp::Reverse(x.size), x.lifetime.end, i)
        });
    }
    // Bytes live at each event: a difference array over events.
    let mut delta = vec![0i128; times.len() + 1];
    for &i in &real {
        let k0 = times.partition_point(|&t| t < b[i].lifetime.start);
        let k1 = times.partition_point(|&t| t < b[i].lifetime.end);
        delta[k0] += i128::from(b[i].size);
        delta[k1] -= i128::from(b[i].size);
    }
    let mut slack = Vec::with_capacity(times.len());
    let mut load = 0i128;
    for d in &delta[..times.len()] {
        load += d;
        if load > i128::from(cap) {
            return none(0);
        }
        slack.push((i128::from(cap) - load) as u64);
    }
    let unit = real.iter().fold(cap, |g, &i| gcd(g, b[i].size)).max(1);
    let sums: Vec<Option<Bits>> = starting
        .iter()
        .map(|s| {
            (cap / unit <= MAX_UNITS).then(|| {
                let mut bits = Bits::new(cap / unit);
                for &i in s {
                    bits.add(b[i as usize].size / unit);
                }
                bits
            })
        })
        .collect();
    // The buffers starting after event `k` and live at `k + d`.
    let ahead_sums: Vec<Vec<Bits>> = (0..n_events)
        .map(|k| {
            if cap / unit > MAX_UNITS {
                return Vec::new();
            }
            (1..=DEPTH.min(n_events - 1 - k))
                .map(|d| {
                    let t = times[k + d];
                    let mut bits = Bits::new(cap / unit);
                    for s in &starting[k + 1..=k + d] {
                        for &i in s {
                            if b[i as usize].lifetime.end > t {
                                bits.add(b[i as usize].size / unit);
                            }
                        }
                    }
                    bits
                })
                .collect()
        })
        .collect();
    let ahead_items: Vec<Vec<Vec<u64>>> = (0..n_events)
        .map(|k| {
            if cap / unit > MAX_UNITS {
                return Vec::new();
            }
            (1..=DEPTH.min(n_events - 1 - k))
                .map(|d| {
                    let t = times[k + d];
                    let mut v: Vec<u64> = starting[k + 1..=k + d]
                        .iter()
                        .flatten()
                        .filter(|&&i| b[i as usize].lifetime.end > t)
                        .map(|&i| b[i as usize].size / unit)
                        .collect();
                    if v.len() > JOINT_ITEMS {
                        v.clear();
                    }
                    v.sort_unstable_by(|x, y| y.cmp(x));
                    v
                })
                .collect()
        })
        .collect();
    let mut sweep = Sweep {
        size: b.iter().map(|x| x.size).collect(),
        end: b.iter().map(|x| x.lifetime.end).collect(),
        align: b.iter().map(|x| x.align.max(1)).collect(),
        cap,
        times,
        starting,
        slack,
        sums,
        ahead_sums,
        ahead_items,
        closed: Vec::new(),
        unit,
        offset: vec![0; b.len()],
        dead: HashSet::new(),
        nodes: 0,
        limit: node_limit,
        deadline,
        stopped: false,
        round_end: 0,
        entered: vec![0; n_events],
        failed: vec![0; n_events],
    };
    // Restarts, each trying candidates in another order (largest first,
    // then soonest ending, then shuffled), with nodes in the Luby
    // sequence: the cost is heavy-tailed in the order. Dead frontiers stay
    // dead across restarts (a frontier's verdict does not depend on the
    // order).
    let mut r = None;
    let mut seed = 0x5eed_u64;
    for round in 0u64.. {
        match round {
            0 => {
                if let Some((at, events)) = hint {
                    for s in sweep.starting.iter_mut().take(events) {
                        s.sort_unstable_by_key(|&i| at[i as usize]);
                    }
                }
            }
            1 => {
                for s in &mut sweep.starting {
                    s.sort_unstable_by_key(|&i| {
                        let x = &b[i as usize];
                        (x.lifetime.end, std::cmp::Reverse(x.size), i)
                    });
                }
            }
            _ => {
                for s in &mut sweep.starting {
                    for j in (1..s.len()).rev() {
                        seed = splitmix(seed);
                        s.swap(j, (seed % (j as u64 + 1)) as usize);
                    }
                }
            }
        }
        sweep.round_end = sweep.nodes + ROUND_NODES * luby(round + 1);
        r = sweep.solve(0, &[]);
        if r.is_some() || sweep.stopped {
            break;
        }
    }
    if std::env::var_os("STOW_PLAN_TRACE").is_some() {
        let deepest = sweep.entered.iter().rposition(|&e| e > 0).unwrap_or(0);
        let busiest: Vec<String> = {
            let mut v: Vec<usize> = (0..n_events).collect();
            v.sort_by_key(|&k| std::cmp::Reverse(sweep.entered[k]));
            v.iter()
                .take(8)
                .map(|&k| {
                    format!(
                        "{k}:{}/{}({})",
                        sweep.failed[k],
                        sweep.entered[k],
                        sweep.starting[k].len()
                    )
                })
                .collect()
        };
        eprintln!(
            "sweep: cap {cap}, {} nodes, {} events, deepest {deepest}, {} dead frontiers, busiest event:failed/entered(starting) {}",
            sweep.nodes,
            n_events,
            sweep.dead.len(),
            busiest.join(" ")
        );
    }
    Outcome {
        offsets: (r == Some(true)).then(|| sweep.offset.clone()),
        nodes: sweep.nodes,
    }
}

mod fill;
#[cfg(test)]
mod tests;

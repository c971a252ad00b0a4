//! The decision procedure: is there a layout of one part within `cap`?
//! Depth-first over canonical placements with every state change on a
//! trail, so a failed branch is rolled back exactly.

use super::gate::Gate;

mod memo;
mod rows;
mod sections;
use super::{Heuristic, SearchOptions, Ties};
use crate::index::up;
use std::sync::Arc;
use std::time::Instant;

/// Result of one decision run.
pub(super) enum Outcome {
    /// A layout within the cap (offsets per local buffer).
    Found(Vec<u64>),
    /// The tree was exhausted: no layout within the cap exists, nor any
    /// below the given height (the least bound seen on a pruned branch).
    Infeasible(u64),
    /// The node limit or the deadline stopped the run.
    Limit,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flow {
    Found,
    NotFound,
    Limit,
}

#[derive(Clone)]
enum Change {
    Min(u32, u64),
    Floor(u32, u64),
    Place(u32),
}

/// Static data of one part plus the mutable search state.
#[derive(Clone)]
pub(super) struct Dfs {
    pub flags: SearchOptions,
    pub size: Vec<u64>,
    pub align: Vec<u64>,
    pub pin: Vec<Option<u64>>,
    pub adj: Vec<Vec<u32>>,
    /// Members of each section (pairwise conflicting).
    pub sections: Vec<Vec<u32>>,
    /// Sections of each buffer, ascending.
    pub of: Vec<Vec<u32>>,
    /// `pos[i][k]`: where buffer `i` sits in the members of section
    /// `of[i][k]`. Each section keeps its unplaced members first (the first
    /// `live[s]`), so scans skip the placed ones.
    pos: Vec<Vec<u32>>,
    live: Vec<u32>,
    /// Under lifetimes: each buffer's contiguous section range.
    pub span: Option<Vec<(u32, u32)>>,
    /// Under lifetimes: the buffers whose first section is each section.
    starts_at: Vec<Vec<u32>>,
    /// Preorder keys per buffer: (heaviest section, sections spanned,
    /// area, lifetime length, size).
    pub keys: Vec<(u64, u64, u128, u64, u64)>,
    by_rank: Vec<u32>,
    rank: Vec<u32>,
    /// Canonical tie key at one offset: the first section under lifetimes
    /// with `time_ties`, else the preorder rank.
    tie: Vec<u32>,
    /// Does this run break ties in time (see `SearchOptions::time_ties`)?
    time_ties: bool,
    /// And does it try candidates at one offset left to right?
    left_first: bool,
    offset: Vec<u64>,
    placed: Vec<bool>,
    min_off: Vec<u64>,
    /// Unplaced neighbours of each buffer.
    free_nbrs: Vec<u32>,
    floor: Vec<u64>,
    total: Vec<u64>,
    /// `cuts[b]`: unplaced buffers spanning sections `b` and `b + 1`.
    cuts: Vec<u32>,
    trail: Vec<Change>,
    /// Per section, a member whose min offset last showed that the
    /// section's unplaced bytes still fit above it (see [`Dfs::consistent`]):
    /// a hint tried first, so it needs no undoing.
    witness: Vec<u32>,
    cap: u64,
    /// Least lower bound of a branch pruned for exceeding the cap.
    overflow: u64,
    deadline: Instant,
    /// Nodes between two looks at the clock: a node costs time linear in
    /// the part's size (about 2 ms at 20,000 buffers), so large parts look
    /// at every node, small ones every 64th.
    clock_every: u64,
    node_limit: u64,
    /// Set by the portfolio's lockstep (see [`Gate`]).
    pub gate: Option<GateRun>,
    pub nodes: u64,
    pub backtracks: u64,
    /// Why candidates were cut, for `STOW_PLAN_TRACE` (see [`Prunes`]).
    pub prunes: Prunes,
    depth: u32,
    /// Scratch of [`Dfs::row_fillable`].
    row_reach: Vec<u32>,
    row_stamp: u32,
    row_full: Vec<u32>,
    /// Hash of every unplaced buffer of the part with its min offset (see
    /// [`memo`]), kept up to date by `place` and `undo_to`.
    hash: u128,
    /// The same over the unplaced buffers outside the part the current
    /// node searches (after a split): they do not change under it.
    outside: u128,
    /// Keys of exhausted nodes of this decision run.
    dead: memo::Dead,
    /// Is `hash` kept (the memo is on)? Keeping it costs a fifth of the
    /// time of a node where the memo finds nothing to reuse.
    hashing: bool,
}

/// A run's place in the lockstep: its slice of `nodes` nodes, the node
/// count at which the current one ends, and its number.
#[derive(Clone)]
pub(super) struct GateRun {
    pub gate: Arc<Gate>,
    pub nodes: u64,
    pub next: u64,
    pub slice: u64,
}

/// Counters of the pruning that fired, and how deep the search went.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Prunes {
    pub canonical: u64,
    pub dominance: u64,
    pub over_cap: u64,
    pub inference: u64,
    /// Candidates above the level some section's unplaced bytes allow.
    pub level: u64,
    /// Candidates and nodes cut by time ties (a full section left empty).
    pub ties: u64,
    pub hatless_dead: u64,
    pub hatless_cut: u64,
    /// Nodes cut because the current row's full sections cannot all get a
    /// buffer at the current offset.
    pub rows: u64,
    /// Nodes not searched again: their state was exhausted before.
    pub memo: u64,
    pub max_depth: u32,
    /// Sum and count of depths of exhausted nodes.
    pub dead: u64,
    pub dead_depth_sum: u64,
    pub min_dead_depth: u32,
}

impl Dfs {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        flags: SearchOptions,
        size: Vec<u64>,
        align: Vec<u64>,
        pin: Vec<Option<u64>>,
        adj: Vec<Vec<u32>>,
        sections: Vec<Vec<u32>>,
        span: Option<Vec<(u32, u32)>>,
        lengths: Vec<u64>,
    ) -> Self {
        let m = size.len();
        let clock_every = (16_384 / m.max(1) as u64).clamp(1, 64);
        let mut of = vec![Vec::new(); m];
        let mut pos = vec![Vec::new(); m];
        let mut total = vec![0u64; sections.len()];
        for (s, members) in sections.iter().enumerate() {
            for (p, &i) in members.iter().enumerate() {
                of[i as usize].push(s as u32);
                pos[i as usize].push(p as u32);
                total[s] = total[s].saturating_add(size[i as usize]);
            }
        }
        let keys = (0..m)
            .map(|i| {
                let heaviest = of[i].iter().map(|&s| total[s as usize]).max().unwrap_or(0);
                (
                    heaviest,
                    of[i].len() as u64,
                    u128::from(size[i]) * u128::from(lengths[i].max(1)),
                    lengths[i],
                    size[i],
                )
            })
            .collect();
        let mut cuts = vec![0u32; sections.len().saturating_sub(1)];
        let mut starts_at = vec![Vec::new(); sections.len()];
        if let Some(span) = &span {
            for (i, &(lo, _)) in span.iter().enumerate() {
                if let Some(list) = starts_at.get_mut(lo as usize) {
                    list.push(i as u32);
                }
            }
            for &(lo, hi) in span {
                for c in &mut cuts[lo as usize..(hi as usize).saturating_sub(1)] {
                    *c += 1;
                }
            }
        }
        Dfs {
            flags,
            of,
            pos,
            live: sections.iter().map(|m| m.len() as u32).collect(),
            keys,
            by_rank: (0..m as u32).collect(),
            rank: (0..m as u32).collect(),
            tie: (0..m as u32).collect(),
            time_ties: false,
            left_first: false,
            offset: vec![0; m],
            placed: vec![false; m],
            min_off: vec![0; m],
            free_nbrs: adj.iter().map(|l| l.len() as u32).collect(),
            floor: vec![0; sections.len()],
            witness: sections
                .iter()
                .map(|m| m.first().copied().unwrap_or(0))
                .collect(),
            total,
            cuts,
            starts_at,
            trail: Vec::new(),
            size,
            align,
            pin,
            adj,
            sections,
            span,
            cap: 0,
            overflow: u64::MAX,
            deadline: Instant::now(),
            clock_every,
            node_limit: 0,
            gate: None,
            nodes: 0,
            backtracks: 0,
            prunes: Prunes {
                min_dead_depth: u32::MAX,
                ..Prunes::default()
            },
            depth: 0,
            row_reach: Vec::new(),
            row_stamp: 0,
            row_full: Vec::new(),
            hash: 0,
            outside: 0,
            dead: memo::Dead::default(),
            hashing: false,
        }
    }

    /// Lowest possible height: the heaviest section, the pinned ends.
    pub fn lower_bound(&self) -> u64 {
        let sections = self.total.iter().copied().max().unwrap_or(0);
        let pins = (0..self.size.len())
            .filter_map(|i| self.pin[i].map(|p| p.saturating_add(self.size[i])))
            .max()
            .unwrap_or(0);
        sections.max(pins)
    }

    /// Sets the static preorder used for canonical ties and, without
    /// dynamic ordering, for the candidate order.
    pub fn set_preorder(&mut self, h: Heuristic) {
        let keys = &self.keys;
        self.by_rank.sort_by(|&a, &b| {
            let (ka, kb) = (keys[a as usize], keys[b as usize]);
            for c in h.keys.chars() {
                let o = match c {
                    'T' => kb.0.cmp(&ka.0),
                    'C' => kb.1.cmp(&ka.1),
                    'A' => kb.2.cmp(&ka.2),
                    'W' => kb.3.cmp(&ka.3),
                    _ => kb.4.cmp(&ka.4),
                };
                if o.is_ne() {
                    return o;
                }
            }
            a.cmp(&b)
        });
        if h.seed != 0 {
            // A randomised restart: each buffer moves by up to a tenth of
            // the positions from its place in the preorder.
            let mut rng = SplitMix(h.seed);
            let spread = (self.by_rank.len() as u64 / 10).max(1) * 16;
            let mut scored: Vec<(u64, u32)> = self
                .by_rank
                .iter()
                .enumerate()
                .map(|(p, &i)| (p as u64 * 16 + rng.below(spread), i))
                .collect();
            scored.sort_unstable();
            for (slot, (_, i)) in self.by_rank.iter_mut().zip(scored) {
                *slot = i;
            }
        }
        for (r, &i) in self.by_rank.iter().enumerate() {
            self.rank[i as usize] = r as u32;
        }
        self.time_ties = h.ties != Ties::Preorder && self.flags.time_ties && self.span.is_some();
        self.left_first = self.time_ties && h.ties == Ties::TimeLeftFirst;
        self.tie = match &self.span {
            Some(span) if self.time_ties => span.iter().map(|&(lo, _)| lo).collect(),
            _ => self.rank.clone(),
        };
    }

    /// Looks for a layout no higher than `cap`, visiting at most
    /// `node_limit` nodes. Leaves the state as it found it.
    pub fn decide(&mut self, cap: u64, node_limit: u64, deadline: Instant) -> Outcome {
        self.cap = cap;
        self.overflow = u64::MAX;
        self.node_limit = self.nodes.saturating_add(node_limit);
        self.deadline = deadline;
        self.prunes = Prunes {
            min_dead_depth: u32::MAX,
            ..Prunes::default()
        };
        let all: Vec<u32> = (0..self.size.len() as u32).collect();
        let range = (0, self.sections.len() as u32);
        self.hashing = self.memo_on();
        self.hash = if self.hashing {
            self.unplaced_hash(all.iter().copied())
        } else {
            0
        };
        self.outside = 0;
        self.dead.clear();
        let outcome = match self.dfs(&all, range, 0, 0) {
            Flow::Found => Outcome::Found(self.offset.clone()),
            Flow::NotFound => Outcome::Infeasible(self.overflow),
            Flow::Limit => Outcome::Limit,
        };
        self.undo_to(0);
        outcome
    }

    /// One node: `cur` is the offset of the last placement and `last` its
    /// tie key (0 at the root of a part).
    fn dfs(&mut self, bufs: &[u32], range: (u32, u32), cur: u64, last: u32) -> Flow {
        if self.nodes >= self.node_limit
            || (self.nodes.is_multiple_of(self.clock_every) && Instant::now() >= self.deadline)
        {
            return Flow::Limit;
        }
        if let Some(g) = self.gate.as_mut() {
            if self.nodes >= g.next {
                if !g.gate.pass(&mut g.slice) {
                    return Flow::Limit;
                }
                g.next = self.nodes + g.nodes;
            }
        }
        let key = self.hashing.then(|| self.state_key(bufs, range, cur, last));
        if let Some(key) = key {
            if self.dead.contains(key) {
                self.prunes.memo += 1;
                // Every layout below this node is above the cap.
                self.overflow = self.overflow.min(self.cap + 1);
                #[cfg(test)]
                self.assert_dead(bufs, range, cur, last);
                return Flow::NotFound;
            }
        }
        self.nodes += 1;
        let canonical = self.flags.canonical;
        let hatless = canonical && self.flags.hatless;
        let mut cands: Vec<(u64, u32)> = Vec::with_capacity(bufs.len());
        let mut min_height = u64::MAX;
        for &i in bufs {
            let i = i as usize;
            if self.placed[i] {
                continue;
            }
            let off = match self.pin[i] {
                Some(p) => {
                    if self.min_off[i] > p || (canonical && p < cur) {
                        return Flow::NotFound; // The pin is no longer reachable.
                    }
                    p
                }
                None => {
                    let m = self.min_off[i];
                    if hatless
                        && self.free_nbrs[i] == 0
                        && (m < cur || (m == cur && self.tie[i] < last))
                    {
                        // Nothing unplaced can lift it to where canonical
                        // order would let it go.
                        self.prunes.hatless_dead += 1;
                        return Flow::NotFound;
                    }
                    min_height = min_height.min(m.saturating_add(self.size[i]));
                    m
                }
            };
            cands.push((off, self.rank[i]));
        }
        if cands.is_empty() {
            return Flow::Found;
        }
        // Placing anything at `off` lifts every section to at least `off`
        // (monotonic floor) without shrinking what the others still hold,
        // so a section holding `total` unplaced bytes rules out every
        // offset above `cap - total` for every buffer but its last one.
        // Checking that here, before `place`, spares the trial placements
        // that made up most of the work on hard instances.
        let (mut lvl1, mut lvl1_of, mut lvl2) = (u64::MAX, usize::MAX, u64::MAX);
        // The sections at the lowest level: after a placement there, the
        // ones the row check must look at.
        let mut lowest: Vec<u32> = Vec::new();
        // With time ties, placements at one offset go left to right, so a
        // section that must get a buffer at exactly `cur` (its level is
        // `cur`) left of the last placement can no longer get one, and the
        // leftmost one right of it bounds where the next buffer at `cur`
        // may start: one starting further right would leave it empty.
        let time_ties = self.time_ties;
        let mut first_full = u32::MAX;
        if self.flags.section_inference && self.flags.canonical && self.flags.monotonic_floor {
            for s in range.0 as usize..range.1 as usize {
                if self.total[s] == 0 {
                    continue;
                }
                let level = self.cap.saturating_sub(self.total[s]);
                if time_ties && level == cur && first_full == u32::MAX {
                    if (s as u32) < last {
                        self.prunes.ties += 1;
                        self.overflow = self.overflow.min(self.cap + 1);
                        self.note_dead();
                        return Flow::NotFound;
                    }
                    first_full = s as u32;
                }
                if level < lvl1 {
                    (lvl2, lvl1, lvl1_of) = (lvl1, level, s);
                    lowest.clear();
                    lowest.push(s as u32);
                } else if level < lvl2 {
                    lvl2 = level;
                }
                if level == lvl1 && lowest.last() != Some(&(s as u32)) {
                    lowest.push(s as u32);
                }
            }
        }
        // Drop the candidates the loop below would skip before sorting:
        // sorting every unplaced buffer at every node cost more than all
        // the rest of the search.
        let (mut canon_cut, mut dom_cut, mut level_cut) = (0, 0, 0);
        let mut lowest_cut = u64::MAX;
        let mut tie_cut = 0;
        let dominance = self.flags.dominance;
        let (tie, by_rank) = (&self.tie, &self.by_rank);
        cands.retain(|&(off, r)| {
            let key = tie[by_rank[r as usize] as usize];
            if canonical && (off < cur || (off == cur && key < last)) {
                canon_cut += 1;
                false
            } else if off == cur && key > first_full {
                tie_cut += 1;
                false
            } else if dominance && off >= min_height {
                dom_cut += 1;
                false
            } else if off > lvl2 {
                level_cut += 1;
                lowest_cut = lowest_cut.min(off);
                false
            } else {
                true
            }
        });
        self.prunes.canonical += canon_cut;
        self.prunes.dominance += dom_cut;
        self.prunes.level += level_cut;
        self.prunes.ties += tie_cut;
        if tie_cut > 0 {
            // Any more room than `cap` leaves that section slack.
            self.overflow = self.overflow.min(self.cap + 1);
        }
        if lowest_cut != u64::MAX {
            self.overflow = self
                .overflow
                .min(lowest_cut.saturating_add(self.cap - lvl2));
        }
        if self.flags.dynamic_ordering && self.left_first {
            // Left to right at one offset: a candidate further right than
            // another at the same offset forbids that one this offset.
            let (tie, by_rank) = (&self.tie, &self.by_rank);
            cands.sort_unstable_by_key(|&(off, r)| (off, tie[by_rank[r as usize] as usize], r));
        } else if self.flags.dynamic_ordering {
            cands.sort_unstable();
        } else {
            cands.sort_unstable_by_key(|&(_, r)| r);
        }
        let mut cutpoints = Vec::new();
        // A failed buffer that nothing unplaced can lift (see below).
        let mut stranded: Option<(u64, u32)> = None;
        for (off, r) in cands {
            let i = self.by_rank[r as usize] as usize;
            if let Some((o, k)) = stranded {
                if off > o || self.tie[i] > k {
                    self.prunes.hatless_cut += 1;
                    continue;
                }
            }
            if off > lvl1 && !(self.total[lvl1_of] == self.size[i] && self.in_section(i, lvl1_of)) {
                // Only the last unplaced buffer of the fullest section may
                // go above its level (the others were dropped above).
                self.prunes.level += 1;
                self.overflow = self.overflow.min(off.saturating_add(self.cap - lvl1));
                continue;
            }
            if self.flags.dominance && off >= min_height {
                self.prunes.dominance += 1;
                continue;
            }
            let top = off.saturating_add(self.size[i]);
            if top > self.cap {
                self.prunes.over_cap += 1;
                self.overflow = self.overflow.min(top);
                continue;
            }
            let mark = self.trail.len();
            cutpoints.clear();
            self.place(i, off, range, &mut cutpoints);
            self.depth += 1;
            self.prunes.max_depth = self.prunes.max_depth.max(self.depth);
            let flow = if !self.consistent(range, off) {
                self.prunes.inference += 1;
                Flow::NotFound
            } else if self.flags.row_inference
                && off >= lvl1
                && !self.row_fillable(
                    range,
                    off,
                    self.tie[i],
                    (off == lvl1).then_some(&lowest[..]),
                )
            {
                // Checked here rather than at the child's start: it fails
                // for most children on near-perfect packings, and there it
                // costs neither a node nor a scan of the candidates. Below
                // the lowest level no section is full from `off` (levels
                // only rise), so there is nothing to check.
                self.prunes.rows += 1;
                self.overflow = self.overflow.min(self.cap + 1);
                Flow::NotFound
            } else if self.flags.decompose && !cutpoints.is_empty() {
                self.split(bufs, range, &mut cutpoints)
            } else {
                self.dfs(bufs, range, off, self.tie[i])
            };
            self.depth -= 1;
            if flow == Flow::Found {
                return Flow::Found;
            }
            self.undo_to(mark);
            if flow == Flow::Limit {
                return Flow::Limit;
            }
            if hatless
                && self.flags.dynamic_ordering
                && self.pin[i].is_none()
                && self.free_nbrs[i] == 0
            {
                // Candidates come lowest offset first, so every later one
                // sits at or above this one's offset; placing one higher,
                // or at the same offset with a later tie key, would strand
                // it: none of those can succeed. (In the static order a
                // later candidate may sit lower, so the cut is only made
                // here.)
                stranded = Some((off, self.tie[i]));
            }
        }
        if let Some(key) = key {
            self.dead.insert(key);
        }
        self.note_dead();
        Flow::NotFound
    }

    /// A unit-test build's check of every hit of the memo: the node, searched
    /// again from scratch without it (and without a node limit), is dead.
    #[cfg(test)]
    fn assert_dead(&self, bufs: &[u32], range: (u32, u32), cur: u64, last: u32) {
        let mut plain = self.clone();
        plain.flags.memo = false;
        plain.hashing = false;
        plain.gate = None;
        plain.node_limit = u64::MAX;
        plain.deadline = Instant::now() + std::time::Duration::from_secs(3600);
        assert!(
            plain.dfs(bufs, range, cur, last) == Flow::NotFound,
            "a remembered dead state has a layout below it"
        );
    }

    /// Where section `s` is in buffer `j`'s list of sections (which holds
    /// it). Under lifetimes the list is the range `span[j]`, so no search
    /// is needed (the binary search was a tenth of the search's time).
    fn index_in(&self, j: usize, s: usize) -> usize {
        match &self.span {
            Some(span) => s - span[j].0 as usize,
            None => self.of[j].binary_search(&(s as u32)).expect("member"),
        }
    }

    /// Is buffer `i` a member of section `s`?
    fn in_section(&self, i: usize, s: usize) -> bool {
        match &self.span {
            Some(span) => (span[i].0 as usize..span[i].1 as usize).contains(&s),
            None => self.of[i].binary_search(&(s as u32)).is_ok(),
        }
    }

    fn note_dead(&mut self) {
        self.backtracks += 1;
        self.prunes.dead += 1;
        self.prunes.dead_depth_sum += u64::from(self.depth);
        self.prunes.min_dead_depth = self.prunes.min_dead_depth.min(self.depth);
    }

    /// The unplaced buffers of `bufs` fall apart at `cutpoints`: solve
    /// each side on its own.
    fn split(&mut self, bufs: &[u32], range: (u32, u32), cutpoints: &mut [u32]) -> Flow {
        cutpoints.sort_unstable();
        let span = self.span.as_ref().expect("cuts exist only under lifetimes");
        let mut bounds: Vec<u32> = vec![range.0];
        bounds.extend(cutpoints.iter().map(|&b| b + 1));
        bounds.push(range.1);
        let mut subs: Vec<Vec<u32>> = vec![Vec::new(); bounds.len() - 1];
        for &i in bufs {
            if !self.placed[i as usize] {
                let first = span[i as usize].0;
                let k = bounds.partition_point(|&b| b <= first) - 1;
                subs[k].push(i);
            }
        }
        let outer = self.outside;
        for (k, sub) in subs.iter().enumerate() {
            if sub.is_empty() {
                continue;
            }
            // The other sides do not change under this one: a side's
            // buffers conflict with no unplaced buffer of another.
            if self.hashing {
                self.outside = self.hash ^ self.unplaced_hash(sub.iter().copied());
            }
            let flow = self.dfs(sub, (bounds[k], bounds[k + 1]), 0, 0);
            if flow != Flow::Found {
                self.outside = outer;
                return flow;
            }
        }
        self.outside = outer;
        Flow::Found
    }

    fn place(&mut self, i: usize, off: u64, range: (u32, u32), cutpoints: &mut Vec<u32>) {
        self.trail.push(Change::Place(i as u32));
        self.placed[i] = true;
        if self.hashing {
            self.hash ^= memo::piece(i as u32, self.min_off[i]);
        }
        self.offset[i] = off;
        let top = off + self.size[i];
        for k in 0..self.of[i].len() {
            let s = self.of[i][k] as usize;
            // Swap `i` behind the unplaced members; undoing only has to
            // count it back in, as later swaps stay in front of it.
            let last = self.live[s] as usize - 1;
            let here = self.pos[i][k] as usize;
            let j = self.sections[s][last] as usize;
            self.sections[s].swap(here, last);
            let kj = self.index_in(j, s);
            self.pos[j][kj] = here as u32;
            self.pos[i][k] = last as u32;
            self.live[s] -= 1;
            self.total[s] -= self.size[i];
            if self.floor[s] < top {
                self.trail.push(Change::Floor(s as u32, self.floor[s]));
                self.floor[s] = top;
            }
        }
        if let Some(span) = &self.span {
            let (lo, hi) = span[i];
            for b in lo..hi.saturating_sub(1) {
                self.cuts[b as usize] -= 1;
                if self.cuts[b as usize] == 0 && range.0 <= b && b + 1 < range.1 {
                    cutpoints.push(b);
                }
            }
        }
        let count = self.flags.hatless;
        for k in 0..self.adj[i].len() {
            let u = self.adj[i][k] as usize;
            if count {
                self.free_nbrs[u] -= 1;
            }
            if self.placed[u] {
                continue;
            }
            let a = self.align[u];
            let m = if a == 1 { top } else { up(top, a) };
            if self.min_off[u] < m {
                self.trail.push(Change::Min(u as u32, self.min_off[u]));
                if self.hashing {
                    self.hash ^= memo::piece(u as u32, self.min_off[u]) ^ memo::piece(u as u32, m);
                }
                self.min_off[u] = m;
            }
        }
    }

    fn undo_to(&mut self, mark: usize) {
        while self.trail.len() > mark {
            match self.trail.pop().expect("length checked") {
                Change::Min(u, v) => {
                    if self.hashing {
                        self.hash ^= memo::piece(u, self.min_off[u as usize]) ^ memo::piece(u, v);
                    }
                    self.min_off[u as usize] = v;
                }
                Change::Floor(s, v) => self.floor[s as usize] = v,
                Change::Place(i) => {
                    let i = i as usize;
                    self.placed[i] = false;
                    if self.hashing {
                        self.hash ^= memo::piece(i as u32, self.min_off[i]);
                    }
                    if self.flags.hatless {
                        for &u in &self.adj[i] {
                            self.free_nbrs[u as usize] += 1;
                        }
                    }
                    for &s in &self.of[i] {
                        self.total[s as usize] += self.size[i];
                        self.live[s as usize] += 1;
                    }
                    if let Some(span) = &self.span {
                        let (lo, hi) = span[i];
                        for b in lo..hi.saturating_sub(1) {
                            self.cuts[b as usize] += 1;
                        }
                    }
                }
            }
        }
    }
}

/// A small seeded generator (SplitMix64) for randomised preorders.
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    }
}

//! Which already-placed buffers conflict with a given one, fast.
//!
//! Every constructive strategy places buffers one at a time and, for each,
//! needs the byte ranges of the *placed* buffers it conflicts with. Building
//! the full conflict lists costs O(n²) on long-lived traces, so for lifetimes
//! this index is a segment tree over compressed time in which every buffer
//! is filed, once and for all, under the O(log T) nodes that exactly cover
//! its lifetime (stored flat, one slice per node). The buffers overlapping
//! `[s, e)` are those filed under a node that meets `[s, e)`; those nodes
//! are, level by level, one contiguous run of the heap order, so a query
//! walks about `2L + log T` nodes (L: segments the query spans) and reads
//! their slices front to back. Placing and unplacing only flip a flag.
//! Explicit conflict graphs use their adjacency lists.

use crate::huge::HugeArray;
use crate::problem::{ConflictModel, Problem};

/// One placed conflicting neighbour: its byte range and id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Taken {
    pub start: u64,
    pub end: u64,
    pub id: u32,
}

pub(crate) struct PlacedIndex<'p> {
    problem: &'p Problem,
    /// Each buffer's offset once placed (one array: buffers are visited in
    /// no useful order, and a second one would cost a second cache miss).
    offsets: Vec<Option<u64>>,
    kind: Kind,
    /// Scratch for [`sort_by_start`], kept to spare an allocation per query.
    keys: Vec<u64>,
    sorted: Vec<Taken>,
}

enum Kind {
    Lifetimes(CoverTree),
    Explicit(Vec<Vec<u32>>),
}

/// Elementary time segments per leaf. Fat leaves keep the tree shallow,
/// so a query misses the cache a few times rather than once per level; the
/// price is a short sequential scan of the leaf's entries.
const BUCKET: u32 = 32;

struct CoverTree {
    /// Leaves: buckets of [`BUCKET`] time segments, padded to a power of two.
    width: usize,
    /// Whether ranks were given (see [`PlacedIndex::ranked`]); else a
    /// buffer's rank is its place in order of first segment (ties by id),
    /// so that every node's entries also go by `from`.
    by_rank: bool,
    /// `entries[first[v]..first[v + 1]]` are the buffers filed under node
    /// `v`, by rank (which finds a buffer's entry in a node).
    first: Vec<u32>,
    entries: HugeArray<Entry>,
    /// Each buffer's lifetime in time segments and its rank: one record
    /// per buffer, since buffers are visited in no useful order and each
    /// separate array would cost a cache miss.
    of: HugeArray<Filed>,
}

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Filed {
    from: u32,
    to: u32,
    rank: u32,
    unused: u32,
}

/// A buffer filed under a node, with a copy of its placement so that a
/// query reads entries front to back and touches nothing else.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Entry {
    /// The buffer's lifetime in time segments.
    from: u32,
    to: u32,
    id: u32,
    /// The buffer's place in the order of [`PlacedIndex::ranked`] (0 in
    /// an index by first segment).
    rank: u32,
    /// Byte range; `end == 0` while unplaced (every filed buffer has
    /// bytes).
    start: u64,
    end: u64,
}

/// The leaves (buckets) a segment range `[a, b)` touches.
fn buckets(a: u32, b: u32) -> (u32, u32) {
    (a / BUCKET, (b - 1) / BUCKET + 1)
}

impl CoverTree {
    /// Files every buffer, with the ranks given (one per buffer) or by
    /// first segment.
    fn new(problem: &Problem, ranks: Option<&[u32]>) -> Self {
        let timeline = Timeline::new(problem);
        let leaves = (timeline.segments() as u32).div_ceil(BUCKET) as usize;
        let width = leaves.next_power_of_two().max(1);
        let span: Vec<(u32, u32)> = problem
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| {
                if problem.is_trivial(i) {
                    (0, 0)
                } else {
                    (
                        timeline.at(b.lifetime.start) as u32,
                        timeline.at(b.lifetime.end) as u32,
                    )
                }
            })
            .collect();
        let mut count = vec![0u32; 2 * width + 1];
        for &(a, b) in &span {
            if a < b {
                let (la, lb) = buckets(a, b);
                cover(width, la, lb, |v| count[v] += 1);
            }
        }
        let mut first = Vec::with_capacity(count.len());
        let mut acc = 0u32;
        for c in &count {
            first.push(acc);
            acc += c;
        }
        let mut fill = first.clone();
        let mut entries = HugeArray::<Entry>::zeroed(acc as usize);
        let mut of = HugeArray::<Filed>::zeroed(span.len());
        // Filed in order of first segment: neighbouring buffers go to
        // neighbouring nodes, so filing reads and writes memory in order
        // (in rank order it took three times as long on a million buffers).
        for (k, i) in by_first_segment(&span, timeline.segments())
            .into_iter()
            .enumerate()
        {
            let (a, b) = span[i];
            let rank = ranks.map_or(k as u32, |r| r[i]);
            of[i] = Filed {
                from: a,
                to: b,
                rank,
                unused: 0,
            };
            let (la, lb) = buckets(a, b);
            cover(width, la, lb, |v| {
                entries[fill[v] as usize] = Entry {
                    from: a,
                    to: b,
                    id: i as u32,
                    rank,
                    start: 0,
                    end: 0,
                };
                fill[v] += 1;
            });
        }
        if ranks.is_some() {
            for v in first.windows(2) {
                entries[v[0] as usize..v[1] as usize].sort_unstable_by_key(|e| e.rank);
            }
        }
        CoverTree {
            width,
            by_rank: ranks.is_some(),
            first,
            entries,
            of,
        }
    }

    fn set(&mut self, id: usize, start: u64, end: u64) {
        let f = self.of[id];
        if f.from >= f.to {
            return;
        }
        let (la, lb) = buckets(f.from, f.to);
        let (first, entries) = (&self.first, &mut self.entries);
        cover(self.width, la, lb, |v| {
            let node = &mut entries[first[v] as usize..first[v + 1] as usize];
            if let Ok(k) = node.binary_search_by_key(&f.rank, |e| e.rank) {
                node[k].start = start;
                node[k].end = end;
            }
        });
    }

    /// Asks the cache for what a query for `id` will read first: the start
    /// of the entries of the nodes on its lowest levels (the upper ones are
    /// few and stay cached).
    fn prefetch(&self, id: usize) {
        let (a, b) = (self.of[id].from, self.of[id].to);
        if a >= b {
            return;
        }
        let (la, lb) = buckets(a, b);
        let (mut lo, mut hi) = (la as usize + self.width, lb as usize - 1 + self.width);
        for _ in 0..PREFETCH_LEVELS {
            if lo < 1 {
                break;
            }
            for v in lo..=hi.min(lo + 1) {
                let (first, end) = (self.first[v] as usize, self.first[v + 1] as usize);
                for e in self.entries[first..end.min(first + PREFETCH_ENTRIES)]
                    .iter()
                    .step_by(2)
                {
                    prefetch_line(e);
                }
            }
            lo /= 2;
            hi /= 2;
        }
    }

    /// Pushes every placed buffer whose lifetime overlaps buffer `id`'s
    /// (other than `id`), once each.
    fn overlapping(&self, id: usize, out: &mut Vec<Taken>) {
        let (a, b) = (self.of[id].from, self.of[id].to);
        if a >= b {
            return;
        }
        let (la, lb) = buckets(a, b);
        let (mut lo, mut hi) = (la as usize + self.width, lb as usize - 1 + self.width);
        let mut level = 0u32;
        while lo >= 1 {
            for v in lo..=hi {
                let node_from = ((v << level) - self.width) as u32;
                for e in &self.entries[self.first[v] as usize..self.first[v + 1] as usize] {
                    if e.from >= b {
                        if self.by_rank {
                            continue;
                        }
                        break;
                    }
                    // A long buffer is filed under several nodes that the
                    // query may meet; report it at the one holding the first
                    // bucket both lifetimes share. Filing by whole buckets
                    // also files buffers that miss the query: test exactly.
                    if e.end != 0
                        && a < e.to
                        && node_from <= (e.from / BUCKET).max(la)
                        && e.id as usize != id
                    {
                        out.push(Taken {
                            start: e.start,
                            end: e.end,
                            id: e.id,
                        });
                    }
                }
            }
            lo /= 2;
            hi /= 2;
            level += 1;
        }
    }
}

impl CoverTree {
    /// In a ranked tree, pushes every buffer overlapping `id` and ranked
    /// before `rank` (`id`'s): the placed ones to `out`, the others to
    /// `pending` (as [`pending_key`]s), once each. Each node's entries are
    /// read only up to the first ranked at or after `rank`.
    fn ranked_before(&self, id: usize, rank: u32, out: &mut Vec<Taken>, pending: &mut Vec<u64>) {
        let (a, b) = (self.of[id].from, self.of[id].to);
        if a >= b {
            return;
        }
        let (la, lb) = buckets(a, b);
        let (mut lo, mut hi) = (la as usize + self.width, lb as usize - 1 + self.width);
        let mut level = 0u32;
        while lo >= 1 {
            for v in lo..=hi {
                let node_from = ((v << level) - self.width) as u32;
                for e in &self.entries[self.first[v] as usize..self.first[v + 1] as usize] {
                    if e.rank >= rank {
                        break;
                    }
                    // Reported once, at the node holding the first bucket
                    // both lifetimes share (as in `overlapping`).
                    if e.from < b && a < e.to && node_from <= (e.from / BUCKET).max(la) {
                        if e.end != 0 {
                            out.push(Taken {
                                start: e.start,
                                end: e.end,
                                id: e.id,
                            });
                        } else {
                            pending.push(pending_key(e.from, e.id));
                        }
                    }
                }
            }
            lo /= 2;
            hi /= 2;
            level += 1;
        }
    }
}

/// A buffer's first time segment above its id: sorting by these keys
/// sorts buffers by start.
pub(crate) fn pending_key(from: u32, id: u32) -> u64 {
    (u64::from(from) << 32) | u64::from(id)
}

/// Tree levels, from the leaves, whose nodes [`CoverTree::prefetch`] asks for.
const PREFETCH_LEVELS: usize = 16;
/// Entries per node it asks for (two per cache line).
const PREFETCH_ENTRIES: usize = 2;

/// Asks for `value`'s cache line ahead of need. On x86_64 a prefetch hint,
/// which never waits; elsewhere a plain read, which the core overlaps with
/// the work in flight as long as its window lasts.
#[inline(always)]
fn prefetch_line<T: Copy>(value: &T) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse"))]
    safe_arch::prefetch_t0(value);
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse")))]
    std::hint::black_box(*value);
}

/// The buffers with a non-empty span, ordered by first segment (a counting
/// sort: segments number at most twice the buffers).
fn by_first_segment(span: &[(u32, u32)], segments: usize) -> Vec<usize> {
    let mut count = vec![0u32; segments + 1];
    for &(a, b) in span {
        if a < b {
            count[a as usize] += 1;
        }
    }
    let mut next = Vec::with_capacity(count.len());
    let mut acc = 0u32;
    for c in &count {
        next.push(acc);
        acc += c;
    }
    let mut order = vec![0usize; acc as usize];
    for (i, &(a, b)) in span.iter().enumerate() {
        if a < b {
            order[next[a as usize] as usize] = i;
            next[a as usize] += 1;
        }
    }
    order
}

/// Calls `f` with the nodes that exactly cover leaves `[a, b)`.
fn cover(width: usize, a: u32, b: u32, mut f: impl FnMut(usize)) {
    let (mut l, mut r) = (a as usize + width, b as usize + width);
    while l < r {
        if l & 1 == 1 {
            f(l);
            l += 1;
        }
        if r & 1 == 1 {
            r -= 1;
            f(r);
        }
        l /= 2;
        r /= 2;
    }
}

impl<'p> PlacedIndex<'p> {
    pub fn new(problem: &'p Problem) -> Self {
        Self::build(problem, None)
    }

    /// An index for [`PlacedIndex::ranked_before`]: `ranks` gives every
    /// buffer a distinct rank. Under lifetimes, a query reads the buffers
    /// ranked before the one it is for and stops there, rather than every
    /// buffer overlapping it (a sweep in time meets mostly later,
    /// unplaced ones).
    pub fn ranked(problem: &'p Problem, ranks: &[u32]) -> Self {
        Self::build(problem, Some(ranks))
    }

    fn build(problem: &'p Problem, ranks: Option<&[u32]>) -> Self {
        let kind = match &problem.conflicts {
            ConflictModel::Lifetimes => Kind::Lifetimes(CoverTree::new(problem, ranks)),
            ConflictModel::Explicit(_) => Kind::Explicit(
                problem
                    .conflict_lists()
                    .into_iter()
                    .map(|l| l.into_iter().map(|b| b.0).collect())
                    .collect(),
            ),
        };
        let n = problem.buffers.len();
        PlacedIndex {
            problem,
            offsets: vec![None; n],
            kind,
            keys: Vec::new(),
            sorted: Vec::new(),
        }
    }

    pub fn is_placed(&self, id: usize) -> bool {
        self.offsets[id].is_some()
    }

    /// Records buffer `id` at `offset`.
    pub fn place(&mut self, id: usize, offset: u64) {
        self.offsets[id] = Some(offset);
        if let Kind::Lifetimes(tree) = &mut self.kind {
            let size = self.problem.buffers[id].size;
            tree.set(id, offset, offset.saturating_add(size));
        }
    }

    /// Forgets buffer `id`'s placement.
    pub fn unplace(&mut self, id: usize) {
        if self.offsets[id].is_none() {
            return;
        }
        self.offsets[id] = None;
        if let Kind::Lifetimes(tree) = &mut self.kind {
            tree.set(id, 0, 0);
        }
    }

    /// Under lifetimes, the filed buffers by first time segment (ties by
    /// id); `None` for explicit conflict graphs.
    pub fn by_start(&self) -> Option<Vec<usize>> {
        match &self.kind {
            Kind::Lifetimes(tree) => {
                let span: Vec<(u32, u32)> = tree.of.iter().map(|f| (f.from, f.to)).collect();
                let segments = span.iter().map(|s| s.1 as usize).max().unwrap_or(0);
                Some(by_first_segment(&span, segments))
            }
            Kind::Explicit(_) => None,
        }
    }

    /// In an index made by [`PlacedIndex::ranked`] (under lifetimes), for
    /// an unplaced buffer `id` of rank `rank`: fills `out` with the placed
    /// buffers that overlap it and are ranked before it, in no order, and
    /// `pending` with the [`pending_key`]s of the unplaced ones.
    pub fn ranked_before(
        &self,
        id: usize,
        rank: u32,
        out: &mut Vec<Taken>,
        pending: &mut Vec<u64>,
    ) {
        out.clear();
        pending.clear();
        if let Kind::Lifetimes(tree) = &self.kind {
            debug_assert!(tree.by_rank, "an index made by `ranked`");
            tree.ranked_before(id, rank, out, pending);
        }
    }

    /// Pushes the byte ranges of the placed, non-empty buffers among
    /// `keys` ([`pending_key`]s).
    pub fn push_placed(&self, keys: &[u64], out: &mut Vec<Taken>) {
        for &key in keys {
            let id = key as u32;
            let size = self.problem.buffers[id as usize].size;
            if let Some(start) = self.offsets[id as usize].filter(|_| size > 0) {
                out.push(Taken {
                    start,
                    end: start.saturating_add(size),
                    id,
                });
            }
        }
    }

    /// Sorts `taken` by start offset.
    pub fn sort_taken(&mut self, taken: &mut Vec<Taken>) {
        sort_by_start(taken, &mut self.keys, &mut self.sorted);
    }

    /// Starts loading what the next queries will read, so that the loads
    /// overlap with the work on the current buffer. Callers go two buffers
    /// ahead: `then` is queried next (its nodes are fetched now), `after`
    /// after it (its records now, its nodes on the next call).
    pub fn prefetch(&self, then: Option<usize>, after: Option<usize>) {
        if let Some(id) = after {
            if let Some(b) = self.problem.buffers.get(id) {
                prefetch_line(&b.size);
            }
            if let Some(o) = self.offsets.get(id) {
                prefetch_line(o);
            }
        }
        if let Kind::Lifetimes(tree) = &self.kind {
            if let Some(f) = after.and_then(|id| tree.of.get(id)) {
                prefetch_line(f);
            }
            if let Some(id) = then.filter(|&id| id < tree.of.len()) {
                tree.prefetch(id);
            }
        }
    }

    /// Fills `out` with the placed, non-empty buffers that conflict with
    /// `id`, sorted by start offset.
    pub fn taken(&mut self, id: usize, out: &mut Vec<Taken>) {
        out.clear();
        if self.problem.is_trivial(id) {
            return;
        }
        match &self.kind {
            Kind::Lifetimes(tree) => tree.overlapping(id, out),
            Kind::Explicit(adj) => {
                for &j in &adj[id] {
                    let b = &self.problem.buffers[j as usize];
                    if let Some(start) = self.offsets[j as usize].filter(|_| b.size > 0) {
                        out.push(Taken {
                            start,
                            end: start.saturating_add(b.size),
                            id: j,
                        });
                    }
                }
            }
        }
        sort_by_start(out, &mut self.keys, &mut self.sorted);
    }

    /// The offsets of all buffers (0 for unplaced ones).
    pub fn into_offsets(self) -> Vec<u64> {
        self.offsets.into_iter().map(|o| o.unwrap_or(0)).collect()
    }
}

/// Sorts `taken` by start offset. When the starts leave room, it sorts one
/// `u64` per record (start above, position below) and gathers: comparing
/// and moving plain integers is cheaper than 24-byte records by key.
fn sort_by_start(taken: &mut Vec<Taken>, keys: &mut Vec<u64>, sorted: &mut Vec<Taken>) {
    let position_bits = usize::BITS - taken.len().leading_zeros();
    let starts = taken.iter().fold(0u64, |acc, t| acc | t.start);
    if taken.len() < 2 || starts.leading_zeros() < position_bits {
        taken.sort_unstable_by_key(|t| t.start);
        return;
    }
    keys.clear();
    keys.extend(
        taken
            .iter()
            .enumerate()
            .map(|(i, t)| (t.start << position_bits) | i as u64),
    );
    keys.sort_unstable();
    let position = (1u64 << position_bits) - 1;
    sorted.clear();
    sorted.extend(keys.iter().map(|&k| taken[(k & position) as usize]));
    std::mem::swap(taken, sorted);
}

/// Rounds `v` up to the power of two `align`, saturating.
pub(crate) fn up(v: u64, align: u64) -> u64 {
    v.checked_add(align - 1)
        .map(|x| x & !(align - 1))
        .unwrap_or(!(align - 1))
}

/// The aligned start of the smallest gap in `taken` (sorted by start) that
/// holds `size` bytes, or the aligned top of everything taken. Ties go to
/// the lowest gap. `tie` breaks ties between gaps of equal length (smaller
/// wins); it is given the id of the buffer whose end bounds the gap from
/// below, if any.
pub(crate) fn best_gap(
    taken: &[Taken],
    size: u64,
    align: u64,
    mut tie: impl FnMut(Option<u32>) -> u64,
) -> u64 {
    let mut best: Option<(u64, u64, u64)> = None; // (gap, tie, offset)
    let mut cursor = 0u64;
    let mut below: Option<u32> = None;
    for t in taken {
        let at = up(cursor, align);
        if t.start > at && t.start - at >= size {
            let gap = t.start - cursor;
            let better = match best {
                None => true,
                Some((g, _, _)) if gap < g => true,
                Some((g, k, _)) if gap == g => {
                    let key = tie(below);
                    if key < k {
                        best = Some((gap, key, at));
                    }
                    false
                }
                _ => false,
            };
            if better {
                best = Some((gap, tie(below), at));
            }
        }
        if t.end > cursor {
            cursor = t.end;
            below = Some(t.id);
        }
    }
    match best {
        Some((_, _, at)) => at,
        None => up(cursor, align),
    }
}

/// The lowest aligned offset where `size` bytes fit between `taken`
/// (sorted by start), or the aligned top of everything taken.
pub(crate) fn lowest_gap(taken: &[Taken], size: u64, align: u64) -> u64 {
    let mut cursor = 0u64;
    for t in taken {
        let at = up(cursor, align);
        if t.start > at && t.start - at >= size {
            return at;
        }
        cursor = cursor.max(t.end);
    }
    up(cursor, align)
}

/// Compressed time: the sorted distinct lifetime boundaries of a problem.
pub(crate) struct Timeline {
    pub points: Vec<u32>,
    /// For dense schedules, `rank[t]` is the index of boundary `t`.
    rank: Option<Vec<u32>>,
}

impl Timeline {
    pub fn new(problem: &Problem) -> Self {
        let live = problem
            .buffers
            .iter()
            .filter(|b| b.lifetime.start < b.lifetime.end);
        let horizon = live
            .clone()
            .map(|b| b.lifetime.end as usize)
            .max()
            .unwrap_or(0);
        if horizon <= 4 * problem.buffers.len() + 1024 {
            // Dense schedules (one step per operator) skip the sort.
            let mut present = vec![false; horizon + 1];
            for b in live {
                present[b.lifetime.start as usize] = true;
                present[b.lifetime.end as usize] = true;
            }
            let mut points = Vec::new();
            let mut rank = vec![0u32; horizon + 1];
            for (t, &p) in present.iter().enumerate() {
                rank[t] = points.len() as u32;
                if p {
                    points.push(t as u32);
                }
            }
            return Timeline {
                points,
                rank: Some(rank),
            };
        }
        let mut points: Vec<u32> = Vec::with_capacity(problem.buffers.len() * 2);
        for b in live {
            points.push(b.lifetime.start);
            points.push(b.lifetime.end);
        }
        points.sort_unstable();
        points.dedup();
        Timeline { points, rank: None }
    }

    /// Index of the boundary `t` (which must be one of the points).
    pub fn at(&self, t: u32) -> usize {
        match &self.rank {
            Some(rank) => rank[t as usize] as usize,
            None => self.points.partition_point(|&p| p < t),
        }
    }

    /// Number of elementary segments `[points[i], points[i + 1])`.
    pub fn segments(&self) -> usize {
        self.points.len().saturating_sub(1)
    }

    /// Live bytes on each elementary segment.
    pub fn live_bytes(&self, problem: &Problem) -> Vec<u64> {
        let mut diff = vec![0i128; self.points.len() + 1];
        for b in &problem.buffers {
            if b.lifetime.start < b.lifetime.end && b.size > 0 {
                diff[self.at(b.lifetime.start)] += b.size as i128;
                diff[self.at(b.lifetime.end)] -= b.size as i128;
            }
        }
        let mut live = Vec::with_capacity(self.segments());
        let mut acc = 0i128;
        for d in diff.iter().take(self.segments()) {
            acc += d;
            live.push(u64::try_from(acc).unwrap_or(u64::MAX));
        }
        live
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::Buffer;

    #[test]
    fn index_finds_exactly_the_overlapping_placed_buffers() {
        let mut buffers = Vec::new();
        for i in 0..60u32 {
            let s = (i * 7) % 23;
            buffers.push(Buffer::new(1 + u64::from(i % 5), s, s + 1 + i % 9, 1));
        }
        let p = Problem::new(buffers, ConflictModel::Lifetimes);
        assert_index_exact(&p, |i| i % 2 == 0, 0..60);
    }

    #[test]
    fn index_is_exact_across_many_buckets() {
        // Lifetimes from one step to thousands, over far more segments than
        // one leaf holds, half of the buffers placed.
        let mut buffers = Vec::new();
        let mut next = draws(12345);
        for _ in 0..1500 {
            let s = next(3000) as u32;
            let len = [1, 3, 40, 900][next(4) as usize] as u32;
            buffers.push(Buffer::new(
                1 + next(100),
                s,
                s + 1 + next(u64::from(len)) as u32,
                1,
            ));
        }
        let p = Problem::new(buffers, ConflictModel::Lifetimes);
        assert_index_exact(&p, |i| i % 2 == 1, (0..1500).step_by(7));
        assert_ranked_exact(&p, |i| i % 2 == 1, (0..1500).step_by(7), 4321);
    }

    #[test]
    fn index_is_exact_when_its_arrays_live_in_huge_pages() {
        // Enough buffers that the entry array outgrows one huge page and
        // goes to the mapping.
        let mut buffers = Vec::new();
        let mut next = draws(777);
        for i in 0..120_000u32 {
            let len = [1, 2, 7, 60, 3000][next(5) as usize] as u32;
            buffers.push(Buffer::new(
                1 + next(1000),
                i,
                i + 1 + next(u64::from(len)) as u32,
                1,
            ));
        }
        let p = Problem::new(buffers, ConflictModel::Lifetimes);
        if let Kind::Lifetimes(tree) = &PlacedIndex::new(&p).kind {
            assert!(tree.entries.is_mapped() || !cfg!(target_os = "linux"));
        }
        assert_index_exact(&p, |i| i % 3 != 0, (0..120_000).step_by(997));
        assert_ranked_exact(&p, |i| i % 3 != 0, (0..120_000).step_by(997), 99);
    }

    /// Pseudo-random draws below a bound, from a fixed seed.
    fn draws(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut x = seed;
        move |bound| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % bound
        }
    }

    /// Places the buffers `placed` picks, then checks for each query that
    /// the index returns exactly the placed buffers whose lifetimes overlap.
    fn assert_index_exact(
        p: &Problem,
        placed: impl Fn(usize) -> bool,
        queries: impl Iterator<Item = usize>,
    ) {
        let n = p.buffers.len();
        let mut idx = PlacedIndex::new(p);
        for i in (0..n).filter(|&i| placed(i)) {
            idx.place(i, i as u64 * 10);
        }
        let mut out = Vec::new();
        for q in queries {
            idx.taken(q, &mut out);
            let mut got: Vec<u32> = out.iter().map(|t| t.id).collect();
            got.sort_unstable();
            let want: Vec<u32> = (0..n)
                .filter(|&j| {
                    j != q && placed(j) && p.buffers[j].lifetime.overlaps(&p.buffers[q].lifetime)
                })
                .map(|j| j as u32)
                .collect();
            assert_eq!(got, want, "query {q}");
        }
    }

    /// With random distinct ranks, places every buffer, unplaces those
    /// `placed` leaves out (so that both placing and unplacing must find
    /// each entry of a buffer), then checks for each query that
    /// `ranked_before` reports each overlapping buffer ranked before it
    /// exactly once: placed ones with their range, the others pending.
    fn assert_ranked_exact(
        p: &Problem,
        placed: impl Fn(usize) -> bool,
        queries: impl Iterator<Item = usize>,
        seed: u64,
    ) {
        let n = p.buffers.len();
        let mut next = draws(seed);
        let mut order: Vec<u32> = (0..n as u32).collect();
        for k in (1..n).rev() {
            order.swap(k, next(k as u64 + 1) as usize);
        }
        let mut rank = vec![0u32; n];
        for (r, &i) in order.iter().enumerate() {
            rank[i as usize] = r as u32;
        }
        let mut idx = PlacedIndex::ranked(p, &rank);
        for i in 0..n {
            idx.place(i, i as u64 * 10);
        }
        for i in (0..n).filter(|&i| !placed(i)) {
            idx.unplace(i);
        }
        let (mut out, mut pending) = (Vec::new(), Vec::new());
        for q in queries {
            idx.ranked_before(q, rank[q], &mut out, &mut pending);
            let before = |j: usize| {
                j != q
                    && rank[j] < rank[q]
                    && p.buffers[j].lifetime.overlaps(&p.buffers[q].lifetime)
            };
            let mut got: Vec<(u32, u64, u64)> =
                out.iter().map(|t| (t.id, t.start, t.end)).collect();
            got.sort_unstable();
            let want: Vec<(u32, u64, u64)> = (0..n)
                .filter(|&j| before(j) && placed(j))
                .map(|j| (j as u32, j as u64 * 10, j as u64 * 10 + p.buffers[j].size))
                .collect();
            assert_eq!(got, want, "query {q}");
            let mut got: Vec<u64> = pending.clone();
            got.sort_unstable();
            let mut want: Vec<u64> = (0..n)
                .filter(|&j| before(j) && !placed(j))
                .map(|j| {
                    let (from, _) = match &idx.kind {
                        Kind::Lifetimes(tree) => (tree.of[j].from, tree.of[j].to),
                        Kind::Explicit(_) => unreachable!(),
                    };
                    pending_key(from, j as u32)
                })
                .collect();
            want.sort_unstable();
            assert_eq!(got, want, "query {q}");
        }
    }

    #[test]
    fn sorting_by_start_keeps_every_record_and_orders_them() {
        let mut next = draws(99);
        let (mut keys, mut sorted) = (Vec::new(), Vec::new());
        // Small starts take the packed path, starts near 2^64 the fallback.
        for high in [0u64, u64::MAX - (1 << 20)] {
            for len in [0usize, 1, 2, 31, 64, 200] {
                let mut taken: Vec<Taken> = (0..len)
                    .map(|i| {
                        let start = high + next(1 << 16);
                        Taken {
                            start,
                            end: start + 1,
                            id: i as u32,
                        }
                    })
                    .collect();
                let mut want = taken.clone();
                want.sort_unstable();
                sort_by_start(&mut taken, &mut keys, &mut sorted);
                assert!(taken.windows(2).all(|w| w[0].start <= w[1].start));
                taken.sort_unstable();
                assert_eq!(taken, want);
            }
        }
    }

    #[test]
    fn gaps() {
        let t = |start, end, id| Taken { start, end, id };
        let taken = [t(0, 10, 0), t(30, 40, 1), t(45, 50, 2), t(80, 90, 3)];
        assert_eq!(lowest_gap(&taken, 5, 1), 10);
        assert_eq!(best_gap(&taken, 5, 1, |_| 0), 40);
        assert_eq!(best_gap(&taken, 25, 1, |_| 0), 50);
        assert_eq!(best_gap(&taken, 31, 1, |_| 0), 90);
        assert_eq!(best_gap(&taken, 5, 16, |_| 0), 16);
    }
}

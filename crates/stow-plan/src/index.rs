//! Which already-placed buffers conflict with a given one, fast.
//!
//! Every constructive strategy places buffers one at a time and, for each,
//! needs the byte ranges of the *placed* buffers it conflicts with. Building
//! the full conflict lists costs O(n²) on long-lived traces, so for lifetimes
//! this index keeps a max-segment tree over the buffers sorted by start step:
//! leaf `p` holds the end step of the `p`-th buffer once it is placed (0
//! before). The placed buffers overlapping `[s, e)` are exactly the leaves
//! left of the first start `>= e` whose value is `> s`; a descent that skips
//! subtrees whose maximum is `<= s` finds the `k` of them in
//! O((k + 1) log n). Explicit conflict graphs use their adjacency lists.

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
    offsets: Vec<u64>,
    placed: Vec<bool>,
    kind: Kind,
}

enum Kind {
    Lifetimes(MaxEndTree),
    Explicit(Vec<Vec<u32>>),
}

struct MaxEndTree {
    /// Buffer ids sorted by (start, id).
    order: Vec<u32>,
    /// `starts[p]` is the start of `order[p]`.
    starts: Vec<u32>,
    /// Position of each buffer in `order`.
    pos: Vec<u32>,
    /// Leaves from `width` on; node `i` holds the max of `2i` and `2i + 1`.
    tree: Vec<u32>,
    width: usize,
    stack: Vec<(usize, usize, usize)>,
}

impl MaxEndTree {
    fn new(problem: &Problem) -> Self {
        let n = problem.buffers.len();
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_unstable_by_key(|&i| (problem.buffers[i as usize].lifetime.start, i));
        let starts = order
            .iter()
            .map(|&i| problem.buffers[i as usize].lifetime.start)
            .collect();
        let mut pos = vec![0u32; n];
        for (p, &i) in order.iter().enumerate() {
            pos[i as usize] = p as u32;
        }
        let width = n.next_power_of_two().max(1);
        MaxEndTree {
            order,
            starts,
            pos,
            tree: vec![0; 2 * width],
            width,
            stack: Vec::new(),
        }
    }

    fn insert(&mut self, id: usize, end: u32) {
        let mut node = self.width + self.pos[id] as usize;
        self.tree[node] = end;
        while node > 1 {
            node /= 2;
            let m = self.tree[2 * node].max(self.tree[2 * node + 1]);
            if self.tree[node] == m {
                break;
            }
            self.tree[node] = m;
        }
    }

    fn remove(&mut self, id: usize) {
        let mut node = self.width + self.pos[id] as usize;
        self.tree[node] = 0;
        while node > 1 {
            node /= 2;
            self.tree[node] = self.tree[2 * node].max(self.tree[2 * node + 1]);
        }
    }

    /// Calls `f` with every inserted buffer whose lifetime overlaps `[s, e)`.
    fn for_each(&mut self, s: u32, e: u32, mut f: impl FnMut(u32)) {
        let hi = self.starts.partition_point(|&x| x < e);
        if hi == 0 {
            return;
        }
        self.stack.clear();
        self.stack.push((1, 0, self.width));
        while let Some((node, lo, len)) = self.stack.pop() {
            if lo >= hi || self.tree[node] <= s {
                continue;
            }
            if len == 1 {
                f(self.order[lo]);
                continue;
            }
            let half = len / 2;
            self.stack.push((2 * node + 1, lo + half, half));
            self.stack.push((2 * node, lo, half));
        }
    }
}

impl<'p> PlacedIndex<'p> {
    pub fn new(problem: &'p Problem) -> Self {
        let kind = match &problem.conflicts {
            ConflictModel::Lifetimes => Kind::Lifetimes(MaxEndTree::new(problem)),
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
            offsets: vec![0; n],
            placed: vec![false; n],
            kind,
        }
    }

    pub fn is_placed(&self, id: usize) -> bool {
        self.placed[id]
    }

    /// Records buffer `id` at `offset`.
    pub fn place(&mut self, id: usize, offset: u64) {
        self.offsets[id] = offset;
        self.placed[id] = true;
        if self.problem.is_trivial(id) {
            return;
        }
        if let Kind::Lifetimes(tree) = &mut self.kind {
            tree.insert(id, self.problem.buffers[id].lifetime.end);
        }
    }

    /// Forgets buffer `id`'s placement.
    pub fn unplace(&mut self, id: usize) {
        if !self.placed[id] {
            return;
        }
        self.placed[id] = false;
        if let Kind::Lifetimes(tree) = &mut self.kind {
            if !self.problem.is_trivial(id) {
                tree.remove(id);
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
        let buffers = &self.problem.buffers;
        let offsets = &self.offsets;
        let mut push = |j: u32| {
            let b = &buffers[j as usize];
            if j as usize != id && b.size > 0 {
                let start = offsets[j as usize];
                out.push(Taken {
                    start,
                    end: start.saturating_add(b.size),
                    id: j,
                });
            }
        };
        match &mut self.kind {
            Kind::Lifetimes(tree) => {
                let life = buffers[id].lifetime;
                tree.for_each(life.start, life.end, &mut push);
            }
            Kind::Explicit(adj) => {
                for &j in &adj[id] {
                    if self.placed[j as usize] {
                        push(j);
                    }
                }
            }
        }
        out.sort_unstable();
    }

    /// The offsets of all buffers (0 for unplaced ones).
    pub fn into_offsets(self) -> Vec<u64> {
        self.offsets
    }
}

/// Rounds `v` up to the power of two `align`, saturating.
pub(crate) fn up(v: u64, align: u64) -> u64 {
    v.checked_add(align - 1)
        .map(|x| x & !(align - 1))
        .unwrap_or(u64::MAX & !(align - 1))
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
}

impl Timeline {
    pub fn new(problem: &Problem) -> Self {
        let mut points: Vec<u32> = Vec::with_capacity(problem.buffers.len() * 2);
        for b in &problem.buffers {
            if b.lifetime.start < b.lifetime.end {
                points.push(b.lifetime.start);
                points.push(b.lifetime.end);
            }
        }
        points.sort_unstable();
        points.dedup();
        Timeline { points }
    }

    /// Index of the boundary `t` (which must be one of the points).
    pub fn at(&self, t: u32) -> usize {
        self.points.partition_point(|&p| p < t)
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
        let mut idx = PlacedIndex::new(&p);
        let mut out = Vec::new();
        for i in (0..60).step_by(2) {
            idx.place(i, i as u64 * 10);
        }
        for q in 0..60 {
            idx.taken(q, &mut out);
            let mut got: Vec<u32> = out.iter().map(|t| t.id).collect();
            got.sort_unstable();
            let want: Vec<u32> = (0..60u32)
                .filter(|&j| {
                    j as usize != q
                        && j % 2 == 0
                        && p.buffers[j as usize]
                            .lifetime
                            .overlaps(&p.buffers[q].lifetime)
                })
                .collect();
            assert_eq!(got, want, "query {q}");
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

//! M3 as a planning strategy: replay the execution order through a
//! [`FirstFitPool`] that may grow, freeing each buffer after its last step.
//!
//! Under an explicit conflict graph the execution order is the id order and
//! buffer `i` is held until the last (highest-id) buffer it conflicts with
//! has been allocated: any later buffer is free to take its bytes. Pinned
//! buffers are reserved at their pins for the whole run.

use super::Budget;
use crate::problem::{ConflictModel, Problem};

/// The offsets, or `None` when the budget ran out or a pin lies beyond
/// what the pool can address.
///
/// The same first fit as [`crate::FirstFitPool`] (the tests compare the two), on
/// free blocks kept in a search tree instead of a list: a list scan per
/// allocation cost O(blocks), 1.5 s on a 61,916-buffer training trace with
/// thousands of blocks live at once; the tree finds the lowest block that
/// holds a request in O(log blocks).
pub(super) fn place(problem: &Problem, budget: Budget) -> Option<Vec<u64>> {
    let n = problem.buffers.len();
    let unit = problem.buffers.iter().map(|b| b.align).max().unwrap_or(1);
    if unit == 0 || !unit.is_power_of_two() {
        return None;
    }
    // What `FirstFitPool::unbounded` can address.
    let capacity = (u64::MAX / 2) & !(unit - 1);
    let round = |v: u64| v.checked_add(unit - 1).map(|x| x & !(unit - 1));
    let mut offsets = vec![0u64; n];
    // Pinned ranges, rounded out to the pool's unit and merged where they
    // touch, reserved for the whole run.
    let mut pins: Vec<(u64, u64)> = Vec::new();
    for (i, b) in problem.buffers.iter().enumerate() {
        if let Some(o) = b.pinned_offset {
            offsets[i] = o;
            if b.size > 0 {
                let end = o.checked_add(b.size)?.checked_next_multiple_of(unit)?;
                pins.push((o & !(unit - 1), end));
            }
        }
    }
    pins.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (s, e) in pins {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    let mut free = FreeBlocks::new();
    // Everything from `tail` up is free.
    let mut tail = 0u64;
    for (s, e) in merged {
        if e > capacity {
            return None; // A pin beyond the pool's reach (near 2^63 bytes).
        }
        if s > tail {
            free.insert(tail, s - tail);
        }
        tail = e;
    }
    // (time, kind, id): kind 0 frees, 1 allocates, so ends come first.
    let mut events: Vec<(u64, u8, u32)> = Vec::with_capacity(2 * n);
    match &problem.conflicts {
        ConflictModel::Lifetimes => {
            for (i, b) in problem.buffers.iter().enumerate() {
                if b.pinned_offset.is_none() && !problem.is_trivial(i) {
                    events.push((u64::from(b.lifetime.start), 1, i as u32));
                    events.push((u64::from(b.lifetime.end), 0, i as u32));
                }
            }
        }
        ConflictModel::Explicit(_) => {
            let adj = problem.conflict_lists();
            for (i, b) in problem.buffers.iter().enumerate() {
                if b.pinned_offset.is_none() && !problem.is_trivial(i) {
                    let last = adj[i].last().map_or(i, |j| j.index().max(i));
                    events.push((i as u64, 1, i as u32));
                    events.push((last as u64 + 1, 0, i as u32));
                }
            }
        }
    }
    events.sort_unstable();
    for (k, &(_, kind, id)) in events.iter().enumerate() {
        if k % 4096 == 0 && budget.expired() {
            return None;
        }
        let b = &problem.buffers[id as usize];
        let size = round(b.size.max(1))?;
        if kind == 0 {
            // Coalesce with free neighbours; the common cases move or grow
            // a block in place (its order among the others stays).
            let lo = offsets[id as usize];
            let hi = lo + size;
            let below = free.before(lo).filter(|&(p, ps)| p + ps == lo);
            let above = free.after(hi).filter(|&(q, _)| q == hi);
            match (below, above) {
                (Some((p, _)), Some((q, qs))) => {
                    free.remove(q);
                    free.adjust(p, p, q + qs - p);
                }
                (Some((p, _)), None) if hi == tail => {
                    free.remove(p);
                    tail = p;
                }
                (Some((p, _)), None) => free.adjust(p, p, hi - p),
                (None, Some((q, qs))) => free.adjust(q, lo, q + qs - lo),
                (None, None) if hi == tail => tail = lo,
                (None, None) => free.insert(lo, size),
            }
        } else if let Some((at, room)) = free.first_fit(size) {
            if room > size {
                free.adjust(at, at + size, room - size);
            } else {
                free.remove(at);
            }
            offsets[id as usize] = at;
        } else {
            // Fails only when the buffers together approach 2^63 bytes.
            if tail.checked_add(size)? > capacity {
                return None;
            }
            offsets[id as usize] = tail;
            tail += size;
        }
    }
    Some(offsets)
}

/// Free blocks (offset, size) below the pool's free tail, in a treap keyed
/// by offset where every node knows the largest block in its subtree.
struct FreeBlocks {
    nodes: Vec<Node>,
    spare: Vec<u32>,
    root: u32,
    seed: u64,
    /// Scratch for [`FreeBlocks::adjust`] (an allocation per call cost a
    /// tenth of the strategy's time at 1,000,000 buffers).
    path: Vec<u32>,
}

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Node {
    offset: u64,
    size: u64,
    /// Largest `size` in this subtree.
    max: u64,
    priority: u64,
    left: u32,
    right: u32,
}

impl FreeBlocks {
    fn new() -> Self {
        FreeBlocks {
            nodes: Vec::new(),
            spare: Vec::new(),
            root: NIL,
            seed: 0x9E37_79B9_7F4A_7C15,
            path: Vec::new(),
        }
    }

    fn max(&self, t: u32) -> u64 {
        if t == NIL {
            0
        } else {
            self.nodes[t as usize].max
        }
    }

    fn update(&mut self, t: u32) {
        let n = self.nodes[t as usize];
        self.nodes[t as usize].max = n.size.max(self.max(n.left)).max(self.max(n.right));
    }

    /// Splits `t` into the blocks below `offset` and those at or above it.
    fn split(&mut self, t: u32, offset: u64) -> (u32, u32) {
        if t == NIL {
            return (NIL, NIL);
        }
        let n = self.nodes[t as usize];
        if n.offset < offset {
            let (l, r) = self.split(n.right, offset);
            self.nodes[t as usize].right = l;
            self.update(t);
            (t, r)
        } else {
            let (l, r) = self.split(n.left, offset);
            self.nodes[t as usize].left = r;
            self.update(t);
            (l, t)
        }
    }

    /// Joins two treaps, every offset in `a` below every one in `b`.
    fn merge(&mut self, a: u32, b: u32) -> u32 {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.nodes[a as usize].priority > self.nodes[b as usize].priority {
            let r = self.merge(self.nodes[a as usize].right, b);
            self.nodes[a as usize].right = r;
            self.update(a);
            a
        } else {
            let l = self.merge(a, self.nodes[b as usize].left);
            self.nodes[b as usize].left = l;
            self.update(b);
            b
        }
    }

    fn insert(&mut self, offset: u64, size: u64) {
        // SplitMix64: priorities only balance the tree, any spread will do.
        self.seed = self.seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let node = Node {
            offset,
            size,
            max: size,
            priority: z ^ (z >> 31),
            left: NIL,
            right: NIL,
        };
        let id = match self.spare.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        let (l, r) = self.split(self.root, offset);
        let l = self.merge(l, id);
        self.root = self.merge(l, r);
    }

    fn remove(&mut self, offset: u64) {
        let (l, rest) = self.split(self.root, offset);
        let (mid, r) = self.split(rest, offset.saturating_add(1));
        if mid != NIL {
            self.spare.push(mid);
        }
        self.root = self.merge(l, r);
    }

    /// Moves the block at `offset` to `to` with `size` bytes; `to` must
    /// keep it between its neighbours.
    fn adjust(&mut self, offset: u64, to: u64, size: u64) {
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        let mut t = self.root;
        while t != NIL {
            path.push(t);
            let n = &self.nodes[t as usize];
            if offset == n.offset {
                break;
            }
            t = if offset < n.offset { n.left } else { n.right };
        }
        if t != NIL {
            self.nodes[t as usize].offset = to;
            self.nodes[t as usize].size = size;
            for &u in path.iter().rev() {
                self.update(u);
            }
        }
        self.path = path;
    }

    /// The block with the highest offset below `offset`.
    fn before(&self, offset: u64) -> Option<(u64, u64)> {
        let (mut t, mut found) = (self.root, None);
        while t != NIL {
            let n = &self.nodes[t as usize];
            if n.offset < offset {
                found = Some((n.offset, n.size));
                t = n.right;
            } else {
                t = n.left;
            }
        }
        found
    }

    /// The block with the lowest offset at or above `offset`.
    fn after(&self, offset: u64) -> Option<(u64, u64)> {
        let (mut t, mut found) = (self.root, None);
        while t != NIL {
            let n = &self.nodes[t as usize];
            if n.offset >= offset {
                found = Some((n.offset, n.size));
                t = n.left;
            } else {
                t = n.right;
            }
        }
        found
    }

    /// The lowest block of at least `size` bytes.
    fn first_fit(&self, size: u64) -> Option<(u64, u64)> {
        let mut t = self.root;
        if self.max(t) < size {
            return None;
        }
        loop {
            let n = &self.nodes[t as usize];
            if self.max(n.left) >= size {
                t = n.left;
            } else if n.size >= size {
                return Some((n.offset, n.size));
            } else {
                t = n.right;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The tree gives the same layouts as the pool it replaces here.

    use super::*;
    use crate::pool_alloc::FirstFitPool;
    use crate::problem::Buffer;

    /// The layout of [`FirstFitPool`] itself, as this strategy was before.
    fn with_pool(problem: &Problem) -> Option<Vec<u64>> {
        let n = problem.buffers.len();
        let unit = problem.buffers.iter().map(|b| b.align).max().unwrap_or(1);
        let mut pool = FirstFitPool::unbounded(unit).ok()?;
        let mut offsets = vec![0u64; n];
        for (i, b) in problem.buffers.iter().enumerate() {
            if let Some(o) = b.pinned_offset {
                offsets[i] = o;
                if b.size > 0 {
                    pool.reserve(o, b.size).ok()?;
                }
            }
        }
        let mut events: Vec<(u64, u8, u32)> = Vec::new();
        for (i, b) in problem.buffers.iter().enumerate() {
            if b.pinned_offset.is_none() && !problem.is_trivial(i) {
                events.push((u64::from(b.lifetime.start), 1, i as u32));
                events.push((u64::from(b.lifetime.end), 0, i as u32));
            }
        }
        events.sort_unstable();
        for (_, kind, id) in events {
            let b = &problem.buffers[id as usize];
            if kind == 0 {
                pool.free(offsets[id as usize]).ok()?;
            } else {
                offsets[id as usize] = pool.alloc_aligned(b.size, b.align).ok()?.offset;
            }
        }
        Some(offsets)
    }

    #[test]
    fn the_tree_places_as_the_pool_does() {
        let mut seed = 1u64;
        let mut next = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        for case in 0..200 {
            let n = 1 + next(300);
            let steps = 1 + next(60) as u32;
            let mut buffers: Vec<Buffer> = (0..n)
                .map(|_| {
                    let start = next(u64::from(steps)) as u32;
                    let end = start + next(20) as u32;
                    Buffer::new(next(5_000), start, end, 1 << next(7))
                })
                .collect();
            // A few pins, far apart so they never clash.
            for (k, b) in buffers.iter_mut().enumerate().take(case % 3) {
                b.pinned_offset = Some((k as u64 + 1) << 20);
            }
            let p = Problem::new(buffers, ConflictModel::Lifetimes);
            assert_eq!(place(&p, Budget::unlimited()), with_pool(&p), "case {case}");
        }
    }
}

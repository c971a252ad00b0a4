//! Window lookahead: after a placement, can the sections above the placed
//! buffer still be filled, taken on their own?
//!
//! On near-perfect packings a wrong choice low down is refuted only a few
//! rows higher, and canonical order reaches those rows only after trying
//! every combination of the rows between everywhere else in time. The
//! window check asks the question locally: the unplaced buffers that share
//! a section with the placed one, cut down to those sections (lifetimes
//! clipped to the window), each no lower than its min offset and the
//! current offset, must fit under the cap. That is a relaxation of the
//! node's problem (any layout below the node, clipped to the window, is
//! one of it), so when a small search proves it infeasible the node is
//! dead. Its answer depends only on those buffers and their lower offsets,
//! not on anything outside the window, so it is remembered by that state
//! (hashed as in [`super::memo`]) and reused by every path that leaves the
//! window the same, whatever it did elsewhere in time; the answers outlive
//! the decision run's restarts (they do not depend on the tie rule).

use super::memo::piece;
use super::{Dfs, Outcome};
use crate::strategy::search::{Heuristic, Ties};
use std::collections::HashMap;

/// Verdicts remembered per run; when full, the table starts over.
const MAX_WINDOWS: usize = 1 << 16;

/// Scratch and remembered verdicts of the window checks of one run.
#[derive(Clone, Default)]
pub(in crate::strategy::search) struct Windows {
    /// Window state (with the cap) → is it dead?
    seen: HashMap<u128, bool>,
    stamp: Vec<u32>,
    now: u32,
    local: Vec<u32>,
    members: Vec<u32>,
    /// Checks made (not remembered) and nodes they took.
    pub runs: u64,
    pub nodes: u64,
    /// Checks that proved their window dead, and that ran out of nodes.
    pub dead: u64,
    pub limit: u64,
}

impl Dfs {
    /// After placing buffer `i` at `off` (the current offset) in the part
    /// searching sections `range`: can the window of `i`'s sections, on
    /// its own, still be filled? `false` proves the node dead.
    pub(super) fn window_fillable(&mut self, i: usize, off: u64, range: (u32, u32)) -> bool {
        let Some(span) = &self.span else {
            return true;
        };
        let (mut a, mut b) = (span[i].0, span[i].1);
        for _ in 0..window_grow() {
            // Widen to the lifetimes of the unplaced buffers over it.
            let (mut a2, mut b2) = (a, b);
            for s in [a as usize, b as usize - 1] {
                for &u in &self.sections[s][..self.live[s] as usize] {
                    a2 = a2.min(span[u as usize].0);
                    b2 = b2.max(span[u as usize].1);
                }
            }
            (a, b) = (a2, b2);
        }
        let (a, b) = (a.max(range.0) as usize, b.min(range.1) as usize);
        if a >= b {
            return true;
        }
        let mut w = std::mem::take(&mut self.windows);
        let verdict = self.window_check(&mut w, (a, b), off);
        self.windows = w;
        verdict
    }

    fn window_check(&mut self, w: &mut Windows, (a, b): (usize, usize), off: u64) -> bool {
        let n = self.size.len();
        if w.stamp.len() < n {
            w.stamp = vec![0; n];
            w.local = vec![0; n];
        }
        w.now = w.now.wrapping_add(1);
        if w.now == 0 {
            w.stamp.fill(0);
            w.now = 1;
        }
        w.members.clear();
        let release = |u: usize| self.min_off[u].max(off);
        let mut key = window_context((a, b), self.cap);
        for s in a..b {
            for &u in &self.sections[s][..self.live[s] as usize] {
                if w.stamp[u as usize] != w.now {
                    w.stamp[u as usize] = w.now;
                    w.local[u as usize] = w.members.len() as u32;
                    w.members.push(u);
                    key ^= piece(u, release(u as usize));
                }
            }
        }
        if w.members.is_empty() {
            return true;
        }
        if let Some(&dead) = w.seen.get(&key) {
            return !dead;
        }
        // The window's own problem: its non-empty sections, members
        // renumbered, lifetimes clipped, each member conflicting with
        // those it shares a section with.
        let m = w.members.len();
        let mut sections: Vec<Vec<u32>> = Vec::with_capacity(b - a);
        let mut span = vec![(u32::MAX, 0u32); m];
        let mut adj: Vec<Vec<u32>> = vec![Vec::new(); m];
        for s in a..b {
            let live = &self.sections[s][..self.live[s] as usize];
            if live.is_empty() {
                continue;
            }
            let k = sections.len() as u32;
            let list: Vec<u32> = live.iter().map(|&u| w.local[u as usize]).collect();
            for &x in &list {
                let e = &mut span[x as usize];
                e.0 = e.0.min(k);
                e.1 = e.1.max(k + 1);
                adj[x as usize].extend(list.iter().copied().filter(|&y| y != x));
            }
            sections.push(list);
        }
        for l in &mut adj {
            l.sort_unstable();
            l.dedup();
        }
        let pick = |v: &[u64]| {
            w.members
                .iter()
                .map(|&u| v[u as usize])
                .collect::<Vec<u64>>()
        };
        let lengths = span.iter().map(|&(lo, hi)| u64::from(hi - lo)).collect();
        let mut flags = self.flags;
        flags.windows = false;
        let mut sub = Dfs::new(
            flags,
            pick(&self.size),
            pick(&self.align),
            w.members.iter().map(|&u| self.pin[u as usize]).collect(),
            adj,
            sections,
            Some(span),
            lengths,
        );
        for (k, &u) in w.members.iter().enumerate() {
            sub.min_off[k] = release(u as usize);
        }
        let limit = (window_nodes() * m as u64).max(WINDOW_NODES_MIN);
        sub.set_preorder(Heuristic {
            keys: "TAW",
            ties: Ties::Preorder,
            seed: 0,
            nodes: limit,
        });
        let outcome = sub.decide(self.cap, limit, self.deadline);
        let dead = matches!(outcome, Outcome::Infeasible(_));
        w.dead += u64::from(dead);
        w.limit += u64::from(matches!(outcome, Outcome::Limit));
        w.runs += 1;
        w.nodes += sub.nodes;
        // The lockstep and the limits count this work as the run's own.
        self.nodes += sub.nodes;
        if w.seen.len() >= MAX_WINDOWS {
            w.seen.clear();
        }
        w.seen.insert(key, dead);
        !dead
    }
}

/// Node limit of one window check, at least.
const WINDOW_NODES_MIN: u64 = 64;

fn window_context((a, b): (usize, usize), cap: u64) -> u128 {
    piece(u32::MAX, ((a as u64) << 32) ^ (b as u64)) ^ piece(u32::MAX - 1, cap)
}

fn window_grow() -> u32 {
    static D: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *D.get_or_init(|| {
        std::env::var("WIN_GROW")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    })
}

fn window_nodes() -> u64 {
    static D: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *D.get_or_init(|| {
        std::env::var("WIN_NODES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(4)
    })
}

//! A probe of the lead docs/PLANNER.md names after branch plan6: search
//! perfect packings by sweeping time instead of offset, remembering dead
//! frontiers. `cargo run --release -p stow-plan --features testing
//! --example sweep -- GRID SEEDS NODES [FIRST_SEED]` packs perfect cut
//! rectangles (as `cutbench` with 0 % dropped) and prints how many it packs
//! within the node limit; `sweep FILE NODES` packs an interval trace at its
//! lower bound. Perfect packings only: every step is full, so the buffers
//! starting at a time must tile exactly the bytes freed by those ending
//! there. `NOMEMO=1`: without remembering dead frontiers.
//!
//! The state after each event time is the frontier (the live buffers with
//! their offsets): what can follow depends on nothing else, so a frontier
//! from which the rest failed is dead whatever led to it.

use std::collections::HashSet;
use std::time::Instant;
use stow_plan::testing::{cut_arena, parse_intervals, CutProfile};
use stow_plan::{lower_bound, Problem};

struct Sweep<'a> {
    p: &'a Problem,
    cap: u64,
    times: Vec<u32>,
    /// Buffers starting at each event time, largest first.
    starting: Vec<Vec<u32>>,
    offset: Vec<u64>,
    dead: HashSet<(usize, Vec<(u32, u64)>)>,
    nodes: u64,
    limit: u64,
    hits: u64,
    /// Remember dead frontiers (`NOMEMO=1` turns it off, for comparison).
    memo: bool,
}

impl Sweep<'_> {
    /// Places the buffers starting at event `k` and after, given the
    /// buffers `live` (with offsets) across the event before.
    fn solve(&mut self, k: usize, live: &[(u64, u32)]) -> Option<bool> {
        if k == self.times.len() {
            return Some(true);
        }
        let t = self.times[k];
        let b = &self.p.buffers;
        let mut cont: Vec<(u64, u32)> = live
            .iter()
            .copied()
            .filter(|&(_, i)| b[i as usize].lifetime.end > t)
            .collect();
        cont.sort_unstable();
        let key = (k, cont.iter().map(|&(o, i)| (i, o)).collect::<Vec<_>>());
        if self.dead.contains(&key) {
            self.hits += 1;
            return Some(false);
        }
        // The free runs at `t`, bottom up.
        let mut gaps = Vec::new();
        let mut at = 0;
        for &(o, i) in &cont {
            if o > at {
                gaps.push((at, o));
            }
            at = at.max(o + b[i as usize].size);
        }
        if at < self.cap {
            gaps.push((at, self.cap));
        }
        let new = self.starting[k].clone();
        let mut used = vec![false; new.len()];
        let mut placed = cont.clone();
        let r = self.tile(
            k,
            &gaps,
            0,
            gaps.first().map_or(0, |g| g.0),
            &new,
            &mut used,
            &mut placed,
        );
        if r == Some(false) && self.memo {
            self.dead.insert(key);
        }
        r
    }

    /// Fills gap `g` from `at` up with unused buffers of `new`, then the
    /// next gaps, then goes on to the next event.
    #[allow(clippy::too_many_arguments)]
    fn tile(
        &mut self,
        k: usize,
        gaps: &[(u64, u64)],
        g: usize,
        at: u64,
        new: &[u32],
        used: &mut [bool],
        placed: &mut Vec<(u64, u32)>,
    ) -> Option<bool> {
        let (mut g, mut at) = (g, at);
        if g < gaps.len() && at == gaps[g].1 {
            g += 1;
            at = gaps.get(g).map_or(0, |x| x.0);
        }
        if g == gaps.len() {
            // Every freed byte is taken: every starting buffer must be too.
            if used.iter().all(|&u| u) {
                return self.solve(k + 1, placed);
            }
            return Some(false);
        }
        let room = gaps[g].1 - at;
        let b = &self.p.buffers;
        let mut tried: Vec<(u64, u32)> = Vec::new();
        for x in 0..new.len() {
            let i = new[x] as usize;
            let kind = (b[i].size, b[i].lifetime.end);
            if used[x] || b[i].size > room || tried.contains(&kind) {
                continue; // Buffers alike in size and end are one choice.
            }
            tried.push(kind);
            self.nodes += 1;
            if self.nodes > self.limit {
                return None;
            }
            used[x] = true;
            self.offset[i] = at;
            placed.push((at, i as u32));
            let r = self.tile(k, gaps, g, at + b[i].size, new, used, placed);
            placed.pop();
            used[x] = false;
            if r != Some(false) {
                return r;
            }
        }
        Some(false)
    }
}

/// Packs `p` within `cap` by the sweep: `Some(offsets)`, `None` when it
/// cannot (or runs out of nodes); and the nodes and memo hits it took.
fn pack(p: &Problem, cap: u64, limit: u64) -> (Option<Vec<u64>>, u64, u64) {
    let mut times: Vec<u32> = p.buffers.iter().map(|b| b.lifetime.start).collect();
    times.sort_unstable();
    times.dedup();
    let mut starting = vec![Vec::new(); times.len()];
    for (i, b) in p.buffers.iter().enumerate() {
        let k = times.binary_search(&b.lifetime.start).expect("a start");
        starting[k].push(i as u32);
    }
    for s in &mut starting {
        s.sort_unstable_by_key(|&i| std::cmp::Reverse(p.buffers[i as usize].size));
    }
    let mut sweep = Sweep {
        p,
        cap,
        times,
        starting,
        offset: vec![0; p.buffers.len()],
        dead: HashSet::new(),
        nodes: 0,
        limit,
        hits: 0,
        memo: std::env::var_os("NOMEMO").is_none(),
    };
    let r = sweep.solve(0, &[]);
    let offsets = (r == Some(true)).then(|| sweep.offset.clone());
    (offsets, sweep.nodes, sweep.hits)
}

/// Pairwise check, independent of the sweep: no two buffers live together
/// share a byte, and all fit under `cap`.
fn valid(p: &Problem, offsets: &[u64], cap: u64) -> bool {
    let b = &p.buffers;
    (0..b.len()).all(|i| {
        offsets[i] + b[i].size <= cap
            && (i + 1..b.len()).all(|j| {
                let live = b[i].lifetime.start < b[j].lifetime.end
                    && b[j].lifetime.start < b[i].lifetime.end;
                !live
                    || offsets[i] + b[i].size <= offsets[j]
                    || offsets[j] + b[j].size <= offsets[i]
            })
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() == 2 {
        let text = std::fs::read_to_string(&args[0]).expect("a readable trace");
        let p = parse_intervals(&text).expect("an interval trace");
        let limit: u64 = args[1].parse().expect("a node limit");
        let cap = lower_bound(&p);
        let t = Instant::now();
        let (found, nodes, hits) = pack(&p, cap, limit);
        let ok = found.as_ref().is_some_and(|o| valid(&p, o, cap));
        println!(
            "{} buffers, cap {cap}: {} in {nodes} nodes ({hits} dead frontiers met), {:.3} s",
            p.buffers.len(),
            if ok { "packed" } else { "not packed" },
            t.elapsed().as_secs_f64()
        );
        return;
    }
    let n: Vec<u64> = args.iter().map(|a| a.parse().expect("a number")).collect();
    let [grid, seeds, limit, ..] = n[..] else {
        eprintln!("usage: sweep GRID SEEDS NODES [FIRST_SEED] | sweep FILE NODES");
        std::process::exit(2);
    };
    let first = n.get(3).copied().unwrap_or(0);
    let profile = CutProfile {
        size: (4, 16),
        life: (3, 16),
        merge: 40,
        quantum: 1,
        drop: 0,
    };
    let (mut packed, mut spent, mut hits) = (0, 0, 0);
    let t = Instant::now();
    for seed in first..first + seeds {
        let (p, _) = cut_arena(seed, grid, grid as u32, profile);
        let (found, nodes, h) = pack(&p, grid, limit);
        hits += h;
        if let Some(o) = found {
            assert!(valid(&p, &o, grid), "seed {seed}: an invalid layout");
            packed += 1;
            spent += nodes;
        }
    }
    println!(
        "grid {grid}: {packed}/{seeds} packed within {limit} nodes ({spent} nodes on those, {hits} dead frontiers met, {:.2} s)",
        t.elapsed().as_secs_f64()
    );
}

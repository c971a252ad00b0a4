//! The time sweep (`strategy/sweep.rs`, docs/PLANNER.md "The time sweep
//! search") alone, on small cut rectangles and on trace files:
//!
//! ```sh
//! cargo run --release -p stow-plan --features testing --example sweep -- GRID SEEDS NODES [FIRST_SEED]
//! cargo run --release -p stow-plan --features testing --example sweep -- FILE NODES
//! cargo run --release -p stow-plan --features testing --example sweep -- big uniform|challenging SEED NODES
//! ```
//!
//! The first packs GRID × GRID cut rectangles (pieces as in `cutbench`;
//! `DROP=PERCENT` of them dropped, 0 by default) at their bound and prints
//! how many it packs within the node limit; the second packs an interval
//! trace at its lower bound (`CAP=BYTES` for another cap); the third a
//! perfect 1 MiB cut rectangle, with `HINT=N` trying the construction's
//! own order first at the first N start times. `SECS` limits the time (60
//! by default). Every layout is checked pairwise here.

use std::time::{Duration, Instant};
use stow_plan::testing::{cut_arena, parse_intervals, sweep_pack, CutProfile};
use stow_plan::{lower_bound, Problem};

/// Packs `p` within `cap` by the library's sweep: the layout, and the
/// nodes it took.
fn pack(p: &Problem, cap: u64, limit: u64) -> (Option<Vec<u64>>, u64) {
    let secs = std::env::var("SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60.0);
    let (o, nodes) = sweep_pack(
        p,
        cap,
        limit,
        Instant::now() + Duration::from_secs_f64(secs),
    );
    (o, nodes)
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
    if args.first().map(String::as_str) == Some("big") && args.len() == 4 {
        // `sweep big uniform|challenging SEED NODES`: a perfect 1 MiB cut
        // rectangle; HINT=N tries the construction's order first at the
        // first N start times.
        let profile = CutProfile {
            drop: 0,
            ..if args[1] == "uniform" {
                CutProfile::UNIFORM
            } else {
                CutProfile::CHALLENGING
            }
        };
        let seed: u64 = args[2].parse().expect("a seed");
        let limit: u64 = args[3].parse().expect("a node limit");
        let (p, at) = cut_arena(seed, 1 << 20, 1 << 20, profile);
        let events: usize = std::env::var("HINT")
            .ok()
            .map_or(0, |h| h.parse().expect("a count"));
        let secs = std::env::var("SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60.0);
        let t = Instant::now();
        let (found, nodes) = stow_plan::testing::sweep_pack_hinted(
            &p,
            1 << 20,
            limit,
            Instant::now() + Duration::from_secs_f64(secs),
            &at,
            events,
        );
        let ok = found.as_ref().is_some_and(|o| valid(&p, o, 1 << 20));
        println!(
            "{} buffers, hint at {events} events: {} in {nodes} nodes, {:.3} s",
            p.buffers.len(),
            if ok { "packed" } else { "not packed" },
            t.elapsed().as_secs_f64()
        );
        return;
    }
    if args.len() == 2 {
        let text = std::fs::read_to_string(&args[0]).expect("a readable trace");
        let p = parse_intervals(&text).expect("an interval trace");
        let limit: u64 = args[1].parse().expect("a node limit");
        let cap = std::env::var("CAP")
            .ok()
            .map_or_else(|| lower_bound(&p), |c| c.parse().expect("bytes"));
        let t = Instant::now();
        let (found, nodes) = pack(&p, cap, limit);
        let ok = found.as_ref().is_some_and(|o| valid(&p, o, cap));
        println!(
            "{} buffers, cap {cap}: {} in {nodes} nodes, {:.3} s",
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
        // DROP=PERCENT: pieces dropped (slack), as `cutbench`'s DROP.
        drop: std::env::var("DROP")
            .ok()
            .and_then(|d| d.parse().ok())
            .unwrap_or(0),
    };
    let (mut packed, mut spent) = (0, 0);
    let t = Instant::now();
    for seed in first..first + seeds {
        let (p, _) = cut_arena(seed, grid, grid as u32, profile);
        let (found, nodes) = pack(&p, grid, limit);
        if let Some(o) = found {
            assert!(valid(&p, &o, grid), "seed {seed}: an invalid layout");
            packed += 1;
            spent += nodes;
        }
    }
    println!(
        "grid {grid}: {packed}/{seeds} packed within {limit} nodes ({spent} nodes on those, {:.2} s)",
        t.elapsed().as_secs_f64()
    );
}

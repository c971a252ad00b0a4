//! How many small cut rectangles the capacity search packs at their bound
//! within a node limit: `cargo run --release -p stow-plan --features testing
//! --example cutbench -- GRID SEEDS DROP NODES [FIRST_SEED]` (pieces 4–16
//! high, 3–16 steps long on a GRID × GRID rectangle, as in `tests/hard.rs`;
//! `ROWS=1` turns row inference on, `MEMO=1` the memo of dead states).

use std::time::{Duration, Instant};
use stow_plan::testing::{cut_arena, CutProfile};
use stow_plan::{check, plan, PlanOptions, Strategy};

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let [grid, seeds, drop, nodes, ..] = args[..] else {
        eprintln!("usage: cutbench GRID SEEDS DROP NODES [FIRST_SEED]");
        std::process::exit(2);
    };
    let first = args.get(4).copied().unwrap_or(0);
    let profile = CutProfile {
        size: (4, 16),
        life: (3, 16),
        merge: 40,
        quantum: 1,
        drop,
    };
    let (mut solved, mut spent, mut pieces) = (0, 0, 0);
    let t = Instant::now();
    for seed in first..first + seeds {
        let (p, _) = cut_arena(seed, grid, grid as u32, profile);
        pieces += p.buffers.len();
        let mut options = PlanOptions {
            strategy: Strategy::Search,
            time_limit: Duration::from_secs(60),
            node_limit: Some(nodes),
            capacity: Some(grid),
            ..Default::default()
        };
        // ROWS=1: with row inference (off by default).
        options.search.row_inference = std::env::var_os("ROWS").is_some();
        // MEMO=1: with the memo of dead states (off by default).
        options.search.memo = std::env::var_os("MEMO").is_some();
        // SWEEP=PERMILLE: the time sweep first with that share of the time.
        options.sweep_permille = std::env::var("SWEEP")
            .ok()
            .map_or(0, |v| v.parse().expect("thousandths"));
        match plan(&p, &options) {
            Ok(found) => {
                assert!(check(&p, &found).is_ok(), "seed {seed}: checker");
                solved += 1;
                spent += found.stats.nodes;
            }
            Err(e) => {
                if std::env::var_os("VERBOSE").is_some() {
                    println!("seed {seed}: not packed ({} pieces): {e}", p.buffers.len());
                }
            }
        }
    }
    println!(
        "grid {grid} drop {drop}: {solved}/{seeds} packed within {nodes} nodes ({} nodes on those, {:.1} pieces on average, {:.2} s)",
        spent,
        pieces as f64 / seeds as f64,
        t.elapsed().as_secs_f64()
    );
}

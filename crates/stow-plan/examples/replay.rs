//! Plans an interval trace (`id,lower,upper,size`) with every strategy, or
//! a synthetic trace: `cargo run --release -p stow-plan --features testing
//! --example replay -- FILE|synthetic:N|training:N [TIME_LIMIT_S] [CAPACITY] [STRATEGY...]`.

use std::time::{Duration, Instant};
use stow_plan::{plan, PlanOptions, Strategy};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(input) = args.first() else {
        eprintln!(
            "usage: replay FILE|synthetic:N|training:N [TIME_LIMIT_S] [CAPACITY] [STRATEGY...]"
        );
        std::process::exit(2);
    };
    let made = Instant::now();
    let problem = if let Some(n) = input.strip_prefix("synthetic:") {
        stow_plan::testing::synthetic_trace(1, n.parse().expect("a count"))
    } else if let Some(n) = input.strip_prefix("training:") {
        stow_plan::testing::synthetic_training(1, n.parse().expect("a count"))
    } else {
        let text = std::fs::read_to_string(input).expect("readable file");
        stow_plan::testing::parse_intervals(&text).expect("interval CSV")
    };
    eprintln!(
        "{} buffers loaded in {:?}",
        problem.buffers.len(),
        made.elapsed()
    );
    // DUMP=FILE writes the problem as an interval trace (alignment 1), for
    // builds that cannot generate it.
    if let Some(path) = std::env::var_os("DUMP") {
        let text = stow_plan::testing::write_intervals(&problem, input);
        std::fs::write(path, text).expect("writable file");
    }
    let secs: f64 = args.get(1).map_or(1.0, |s| s.parse().expect("seconds"));
    let capacity: Option<u64> = args.get(2).and_then(|s| {
        if s == "-" {
            None
        } else {
            Some(s.parse().expect("bytes"))
        }
    });
    let strategies: Vec<Strategy> = if args.len() > 3 {
        args[3..]
            .iter()
            .map(|s| s.parse().expect("strategy"))
            .collect()
    } else {
        Strategy::ALL.to_vec()
    };
    for strategy in strategies {
        let mut options = PlanOptions {
            strategy,
            time_limit: Duration::from_secs_f64(secs),
            capacity,
            ..Default::default()
        };
        // THREADS=N fixes the search's thread count.
        options.threads = std::env::var("THREADS")
            .ok()
            .map(|t| t.parse().expect("a count"));
        // SEARCH_OFF=dominance,decompose turns search techniques off.
        for name in std::env::var("SEARCH_OFF").unwrap_or_default().split(',') {
            let f = &mut options.search;
            match name {
                "canonical" => f.canonical = false,
                "section_inference" => f.section_inference = false,
                "monotonic_floor" => f.monotonic_floor = false,
                "dominance" => f.dominance = false,
                "unallocated_floor" => f.unallocated_floor = false,
                "decompose" => f.decompose = false,
                "dynamic_ordering" => f.dynamic_ordering = false,
                "hatless" => f.hatless = false,
                "time_ties" => f.time_ties = false,
                "memo" => f.memo = false,
                _ => {}
            }
        }
        // SEARCH_ON=row_inference turns on a technique that is off by default.
        for name in std::env::var("SEARCH_ON").unwrap_or_default().split(',') {
            match name {
                "row_inference" => options.search.row_inference = true,
                "memo" => options.search.memo = true,
                _ => {}
            }
        }
        // SWEEP=PERMILLE: the time sweep first with that share of the time.
        options.sweep_permille = std::env::var("SWEEP")
            .ok()
            .map_or(0, |v| v.parse().expect("thousandths"));
        let t = Instant::now();
        match plan(&problem, &options) {
            Ok(p) => {
                // TRIALS=1 lists what auto ran.
                if std::env::var_os("TRIALS").is_some() {
                    for t in &p.stats.trials {
                        eprintln!(
                            "  {:<17} {:>16} {:>9.3} ms",
                            t.strategy.name(),
                            t.arena_bytes.map_or("unfinished".into(), |a| a.to_string()),
                            t.elapsed.as_secs_f64() * 1e3
                        );
                    }
                }
                println!(
                "{:<17} arena {:>12} bound {:>12} ratio {:.4} optimal {:<5} {:>9.3} ms nodes {} winner {}",
                strategy.name(),
                p.arena_bytes,
                p.lower_bound,
                p.ratio(),
                p.optimal,
                t.elapsed().as_secs_f64() * 1e3,
                p.stats.nodes,
                p.strategy
                )
            }
            Err(e) => println!("{:<17} error: {e}", strategy.name()),
        }
    }
}

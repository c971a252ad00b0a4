//! The time limit holds at any size: `auto` gives every strategy only the
//! time left after setting aside the final check's, and falls back on a
//! complete layout when a strategy runs out. These tests take the clock out
//! of the question (a limit of zero: nothing but the fallback has time);
//! measured times at scale are in BENCHMARKS.md ("Time limit at scale").

use std::time::Duration;
use stow_plan::testing::{synthetic_trace, synthetic_training};
use stow_plan::{check, plan, PlanOptions, Pool, Strategy};

#[test]
fn a_spent_budget_still_gives_a_checked_layout() {
    for problem in [synthetic_training(3, 4_000), synthetic_trace(2, 20_000)] {
        let options = PlanOptions {
            time_limit: Duration::ZERO,
            ..PlanOptions::default()
        };
        let p = plan(&problem, &options).expect("a plan");
        // Only the naive layout, which costs one pass over the buffers,
        // is made once the budget is gone.
        assert_eq!(p.strategy, Strategy::Naive);
        assert_eq!(p.stats.trials.len(), 1, "{:?}", p.stats.trials);
        assert!(check(&problem, &p).is_ok());
        assert!(p.arena_bytes >= p.lower_bound);
    }
}

#[test]
fn search_alone_keeps_a_spent_budget() {
    let problem = synthetic_training(5, 2_000);
    let options = PlanOptions {
        strategy: Strategy::Search,
        time_limit: Duration::ZERO,
        ..PlanOptions::default()
    };
    let p = plan(&problem, &options).expect("a plan");
    assert_eq!(p.stats.nodes, 0);
    assert!(check(&problem, &p).is_ok());
}

#[test]
fn training_traces_are_valid_problems_with_many_live_buffers() {
    let problem = synthetic_training(7, 10_000);
    problem.validate().expect("valid");
    // The nested forward/backward lifetimes keep thousands live at once.
    let middle = 5_000;
    let live = problem
        .buffers
        .iter()
        .filter(|b| b.lifetime.start <= middle && middle < b.lifetime.end)
        .count();
    assert!(live > 1_000, "{live} live at the middle step");
    let p = plan(
        &problem,
        &PlanOptions {
            strategy: Strategy::FirstFitPool,
            ..PlanOptions::default()
        },
    )
    .expect("a plan");
    assert!(check(&problem, &p).is_ok());
}

#[test]
fn pools_keep_a_spent_budget_too() {
    // Admission stops at once, so every buffer goes to the last pool, laid
    // out naively: valid, checked, nothing else run.
    let problem = synthetic_trace(4, 5_000)
        .with_pools(vec![Pool::new("sram", 1 << 20), Pool::unbounded("dram")]);
    let options = PlanOptions {
        time_limit: Duration::ZERO,
        ..PlanOptions::default()
    };
    let p = plan(&problem, &options).expect("a plan");
    assert!(check(&problem, &p).is_ok());
    assert_eq!(p.pool_bytes[0], 0);
    assert_eq!(p.strategy, Strategy::Naive);
    // With time, the fast pool is used.
    let p = plan(&problem, &PlanOptions::default()).expect("a plan");
    assert!(check(&problem, &p).is_ok());
    assert!(p.pool_bytes[0] > 0);
}

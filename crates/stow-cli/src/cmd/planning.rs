//! Planner switches shared by `stow compile` and `stow plan`, and the
//! side-by-side comparison both print with `--compare`.

use crate::cmd::compile::human_bytes;
use std::time::Duration;
use stow_compile::{Comparison, Outcome};
use stow_plan::{PlanError, PlanOptions, Strategy};

/// How to plan.
#[derive(clap::Args, Clone, Copy)]
pub struct PlanArgs {
    /// Planning strategy: naive (no reuse), greedy-size (M1),
    /// greedy-breadth (M2), first-fit-pool (M3), peak-suppression (M4),
    /// search (exact branch and bound), auto (portfolio of all, stops at
    /// the lower bound).
    #[arg(long, default_value = "auto", value_parser = parse_strategy)]
    pub strategy: Strategy,
    /// Time budget of `search`, `peak-suppression` and `auto`, in seconds.
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = parse_seconds)]
    pub time_limit: Duration,
    /// Largest arena allowed, in bytes: planning fails (saying how many
    /// bytes are missing) rather than exceed it. `stow plan`'s
    /// `search`/`auto` stop at the first layout that fits; `stow compile`
    /// keeps `auto`'s smallest layout when it fits (and runs stages in
    /// bands of rows when the model alone does not).
    #[arg(long, value_name = "BYTES")]
    pub capacity: Option<u64>,
}

impl PlanArgs {
    /// The planner's options.
    pub fn options(self) -> PlanOptions {
        PlanOptions {
            strategy: self.strategy,
            time_limit: self.time_limit,
            capacity: self.capacity,
            ..Default::default()
        }
    }
}

pub(crate) fn parse_strategy(s: &str) -> Result<Strategy, String> {
    s.parse::<Strategy>().map_err(|e| e.to_string())
}

pub(crate) fn parse_align(s: &str) -> Result<u64, String> {
    let v: u64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if v == 0 || !v.is_power_of_two() {
        return Err(format!("{v} is not a power of two"));
    }
    Ok(v)
}

pub(crate) fn parse_seconds(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(v > 0.0 && v <= 86_400.0) {
        return Err(format!("{s} is not between 0 and 86400 seconds"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// The `--compare` table: every strategy's arena, ratio to the lower
/// bound, whether proven optimal, and time (or why it failed), in the
/// order given (best first, as [`stow_compile::compare`] returns them).
pub fn compare_table(rows: &[Comparison]) -> String {
    let mut out = format!(
        "{:<24} {:>28} {:>8} {:>8} {:>11}\n",
        "strategy", "arena", "ratio", "optimal", "time ms"
    );
    for row in rows {
        let ms = row.elapsed.as_secs_f64() * 1e3;
        match &row.outcome {
            Outcome::Planned {
                used,
                arena_bytes,
                ratio,
                optimal,
            } => say!(
                out,
                "{:<24} {:>28} {:>8.3} {:>8} {:>11.1}",
                if row.strategy == Strategy::Auto {
                    format!("auto ({used})")
                } else {
                    row.strategy.name().to_string()
                },
                human_bytes(*arena_bytes),
                ratio,
                if *optimal { "yes" } else { "no" },
                ms
            ),
            Outcome::DoesNotFit {
                pool,
                needed,
                capacity,
                short,
            } => {
                let e = PlanError::DoesNotFit {
                    pool: pool.clone(),
                    needed: *needed,
                    capacity: *capacity,
                    short: *short,
                };
                say!(out, "{:<24} {e}", row.strategy.name())
            }
        }
    }
    out
}

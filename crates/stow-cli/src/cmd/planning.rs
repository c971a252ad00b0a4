//! Planner switches shared by `stow compile` and `stow plan`, and the
//! side-by-side comparison both print with `--compare`.

use crate::cmd::compile::human_bytes;
use anyhow::Result;
use std::time::{Duration, Instant};
use stow_plan::{plan, PlanError, PlanOptions, Problem, Strategy};

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
    /// bytes are missing) rather than exceed it, and `search`/`auto` stop
    /// at the first layout that fits.
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

/// Default of `--max-arena`: large enough for any model that fits a
/// device, small enough that a hostile model cannot make the tool plan (or
/// `stow verify` allocate) absurd sizes.
pub const DEFAULT_MAX_ARENA: u64 = 16 << 30;

/// Refuses a tensor or arena above `limit`, naming it and its size.
pub(crate) fn within_max_arena(what: &str, bytes: u64, limit: u64) -> Result<()> {
    if bytes > limit {
        anyhow::bail!(
            "{what} needs {bytes} bytes, more than --max-arena {limit}; raise the limit if this is intended"
        );
    }
    Ok(())
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

/// Every strategy on `problem`, best first: arena, ratio to the lower
/// bound, whether proven optimal, and time (or why it failed).
pub fn compare_table(problem: &Problem, args: PlanArgs) -> Result<String> {
    let mut rows: Vec<(Option<u64>, String)> = Vec::new();
    for &strategy in Strategy::ALL {
        let started = Instant::now();
        let result = plan(
            problem,
            &PlanOptions {
                strategy,
                ..args.options()
            },
        );
        let ms = started.elapsed().as_secs_f64() * 1e3;
        match result {
            Ok(p) => rows.push((
                Some(p.arena_bytes),
                format!(
                    "{:<24} {:>28} {:>8.3} {:>8} {:>11.1}",
                    if strategy == Strategy::Auto {
                        format!("auto ({})", p.strategy)
                    } else {
                        strategy.name().to_string()
                    },
                    human_bytes(p.arena_bytes),
                    p.ratio(),
                    if p.optimal { "yes" } else { "no" },
                    ms
                ),
            )),
            Err(e @ PlanError::DoesNotFit { .. }) => {
                rows.push((None, format!("{:<24} {e}", strategy.name())))
            }
            Err(e) => return Err(e.into()),
        }
    }
    rows.sort_by_key(|(arena, _)| arena.unwrap_or(u64::MAX));
    let mut out = format!(
        "{:<24} {:>28} {:>8} {:>8} {:>11}\n",
        "strategy", "arena", "ratio", "optimal", "time ms"
    );
    for (_, row) in rows {
        out.push_str(&row);
        out.push('\n');
    }
    Ok(out)
}

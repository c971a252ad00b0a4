//! `stow plan`: plan a raw buffer trace without a model.
//!
//! Two CSV forms are read (lines starting with `#` are comments):
//! - intervals: `id,lower,upper,size` — live on steps `[lower, upper)`;
//! - conflicts: `id,size,conflicts` — `conflicts` lists, space-separated,
//!   the ids that may never share a byte with this one.

use crate::cmd::compile::human_bytes;
use crate::cmd::planning::{compare_table, parse_align, PlanArgs};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use stow_plan::{plan, Buffer, BufferId, ConflictModel, Pool, Problem};

/// Arguments of `stow plan`.
#[derive(clap::Args)]
pub struct Args {
    /// Trace to plan: `id,lower,upper,size` or `id,size,conflicts` CSV.
    pub input: PathBuf,
    #[command(flatten)]
    pub plan: PlanArgs,
    /// Alignment of every offset in bytes (a power of two).
    #[arg(long, default_value_t = 1, value_parser = parse_align)]
    pub align: u64,
    /// Write the input rows with an added `offset` column here.
    #[arg(short, long, value_name = "OUT.csv")]
    pub output: Option<PathBuf>,
    /// Run every strategy and print a table, best first (with `-o`, the
    /// layout written is the chosen strategy's).
    #[arg(long)]
    pub compare: bool,
    /// A memory pool, `NAME=BYTES` or `NAME` for one without a limit
    /// (repeatable, in preference order): each buffer goes to the first
    /// pool where it fits, the last takes the rest; `-o` adds a `pool`
    /// column and offsets are relative to the pool.
    #[arg(long = "pool", value_name = "NAME[=BYTES]", value_parser = parse_pool)]
    pub pools: Vec<Pool>,
}

pub(crate) fn parse_pool(s: &str) -> Result<Pool, String> {
    match s.split_once('=') {
        None if !s.is_empty() => Ok(Pool::unbounded(s)),
        Some((name, bytes)) if !name.is_empty() => bytes
            .parse::<u64>()
            .map(|b| Pool::new(name, b))
            .map_err(|_| format!("`{bytes}` is not a number of bytes")),
        _ => Err(format!("`{s}` is not NAME or NAME=BYTES")),
    }
}

/// A parsed trace: the problem, the original rows and ids (borrowed from
/// the file's text: a copy of every row and id cost more than planning a
/// 1,000,000-row trace under the default time limit).
pub(crate) struct Trace<'a> {
    pub problem: Problem,
    pub header: &'a str,
    pub rows: Vec<&'a str>,
}

/// Parses either CSV form; errors name the file and line.
pub(crate) fn parse_trace<'a>(path: &Path, text: &'a str, align: u64) -> Result<Trace<'a>> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let Some((_, header)) = lines.next() else {
        bail!("{}: no header line", path.display())
    };
    let columns: Vec<&str> = header.split(',').map(str::trim).collect();
    let intervals = columns == ["id", "lower", "upper", "size"];
    let conflicts = columns == ["id", "size", "conflicts"];
    if !intervals && !conflicts {
        bail!(
            "{}: header `{header}` is neither `id,lower,upper,size` nor `id,size,conflicts`",
            path.display()
        );
    }
    let mut buffers = Vec::new();
    let mut rows = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    let mut line_of: Vec<usize> = Vec::new();
    let mut raw_conflicts: Vec<(usize, Vec<String>)> = Vec::new();
    for (n, line) in lines {
        let at = || format!("{}:{}", path.display(), n + 1);
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != columns.len() {
            bail!(
                "{}: {} fields, expected {}",
                at(),
                fields.len(),
                columns.len()
            );
        }
        let num = |i: usize| -> Result<u64> {
            fields[i].parse::<u64>().with_context(|| {
                format!(
                    "{}: `{}` in column {} is not a number",
                    at(),
                    fields[i],
                    columns[i]
                )
            })
        };
        names.push(fields[0]);
        line_of.push(n);
        if intervals {
            let (lower, upper, size) = (num(1)?, num(2)?, num(3)?);
            if upper < lower {
                bail!("{}: upper {upper} is before lower {lower}", at());
            }
            let step = |v: u64| {
                u32::try_from(v).with_context(|| format!("{}: step {v} is too large", at()))
            };
            buffers.push(Buffer::new(size, step(lower)?, step(upper)?, align));
        } else {
            buffers.push(Buffer::new(num(1)?, 0, 1, align));
            raw_conflicts.push((
                buffers.len() - 1,
                fields[2].split_whitespace().map(String::from).collect(),
            ));
        }
        rows.push(line.trim_end());
    }
    // Ids must be unique. Numeric ids of an interval trace are checked by
    // sorting their values (hashing a million ids took longer than planning
    // them); otherwise, or when two values are equal, a map of the ids finds
    // the first repeated one, and conflict lists look their ids up in it.
    let numeric: Option<Vec<u64>> = names.iter().map(|s| s.parse::<u64>().ok()).collect();
    let distinct = intervals
        && numeric.is_some_and(|mut v| {
            v.sort_unstable();
            v.windows(2).all(|w| w[0] != w[1])
        });
    let mut ids: HashMap<&str, usize> = HashMap::new();
    if !distinct {
        for (k, &name) in names.iter().enumerate() {
            if ids.insert(name, k).is_some() {
                bail!(
                    "{}:{}: id {name} appears twice",
                    path.display(),
                    line_of[k] + 1
                );
            }
        }
    }
    let model = if intervals {
        ConflictModel::Lifetimes
    } else {
        let mut adjacency: Vec<Vec<BufferId>> = vec![Vec::new(); buffers.len()];
        for (i, others) in raw_conflicts {
            for other in others {
                let j = *ids.get(other.as_str()).with_context(|| {
                    format!(
                        "{}: buffer {} conflicts with unknown id {other}",
                        path.display(),
                        i
                    )
                })?;
                // The relation is symmetric even when the file lists a pair once.
                if i != j && !adjacency[i].contains(&BufferId(j as u32)) {
                    adjacency[i].push(BufferId(j as u32));
                    adjacency[j].push(BufferId(i as u32));
                }
            }
        }
        ConflictModel::Explicit(adjacency)
    };
    Ok(Trace {
        problem: Problem::new(buffers, model),
        header: header.trim_end(),
        rows,
    })
}

/// The problem as CSV that [`parse_trace`] reads back: intervals when
/// conflicts follow lifetimes, else one conflict list per buffer. Ids are
/// buffer indices; `note` goes into a leading comment.
pub(crate) fn problem_csv(problem: &Problem, note: &str) -> String {
    use std::fmt::Write as _;
    let mut out = format!("# {note}\n");
    match &problem.conflicts {
        ConflictModel::Lifetimes => {
            out.push_str("id,lower,upper,size\n");
            for (i, b) in problem.buffers.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{i},{},{},{}",
                    b.lifetime.start, b.lifetime.end, b.size
                );
            }
        }
        ConflictModel::Explicit(adjacency) => {
            out.push_str("id,size,conflicts\n");
            for (i, (b, list)) in problem.buffers.iter().zip(adjacency).enumerate() {
                let ids: Vec<String> = list.iter().map(|j| j.0.to_string()).collect();
                let _ = writeln!(out, "{i},{},{}", b.size, ids.join(" "));
            }
        }
    }
    out
}

/// Runs `stow plan`.
pub fn run(args: Args) -> Result<()> {
    let text = std::fs::read_to_string(&args.input)
        .with_context(|| format!("cannot read {}", args.input.display()))?;
    let trace = parse_trace(&args.input, &text, args.align)?;
    if args.compare {
        let rows = stow_compile::compare(&trace.problem, &args.plan.options())
            .with_context(|| format!("planning {}", args.input.display()))?;
        print!("{}", compare_table(&rows));
    }
    let problem = trace.problem.clone().with_pools(args.pools.clone());
    let result = plan(&problem, &args.plan.options())
        .with_context(|| format!("planning {}", args.input.display()))?;
    let pooled = !args.pools.is_empty();
    if let Some(out) = &args.output {
        let mut csv = format!(
            "{},offset{}\n",
            trace.header,
            if pooled { ",pool" } else { "" }
        );
        for (i, (row, offset)) in trace.rows.iter().zip(&result.offsets).enumerate() {
            if pooled {
                let pool = &args.pools[result.pool[i].index()].name;
                csv.push_str(&format!("{row},{offset},{pool}\n"));
            } else {
                csv.push_str(&format!("{row},{offset}\n"));
            }
        }
        stow_bundle::write_file(out, csv.as_bytes())
            .with_context(|| format!("writing {}", out.display()))?;
    }
    println!(
        "{} buffers, arena {}, lower bound {}, ratio {:.3}, strategy {}, optimal {}, {:.3} ms",
        trace.problem.buffers.len(),
        human_bytes(result.arena_bytes),
        human_bytes(result.lower_bound),
        result.ratio(),
        result.strategy,
        if result.optimal { "yes" } else { "no" },
        result.stats.elapsed.as_secs_f64() * 1e3
    );
    for (pool, bytes) in args.pools.iter().zip(&result.pool_bytes) {
        let cap = pool.capacity.map_or("no limit".to_string(), human_bytes);
        println!("  pool {}: {} of {cap}", pool.name, human_bytes(*bytes));
    }
    Ok(())
}

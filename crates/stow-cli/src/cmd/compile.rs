//! `stow compile`: ONNX model → memory-planned bundle.

use crate::cmd::frontend::{load_options, ReuseArgs};
use crate::cmd::plan::problem_csv;
use crate::cmd::planning::{
    compare_table, parse_align, within_max_arena, PlanArgs, DEFAULT_MAX_ARENA,
};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;
use stow_cli::build::{bundle_contents, PlannedModel};
use stow_onnx::Alias;
use stow_plan::{plan, PlanOptions, Strategy};

/// Arguments of `stow compile`.
#[derive(clap::Args)]
pub struct Args {
    /// The ONNX model to compile.
    pub model: PathBuf,
    /// Where to write the bundle [default: MODEL with the extension `.stow`].
    #[arg(short, long, value_name = "OUT.stow")]
    pub output: Option<PathBuf>,
    /// Fix an input's shape, e.g. `image=1x3x224x224` (repeatable).
    #[arg(long = "input", value_name = "NAME=SHAPE")]
    pub inputs: Vec<String>,
    /// Give a symbolic dimension a value, e.g. `N=1` (repeatable).
    #[arg(long = "dim", value_name = "SYMBOL=VALUE")]
    pub dims: Vec<String>,
    #[command(flatten)]
    pub constants: crate::cmd::frontend::ConstantArgs,
    /// Plan the Stowage runtime's kernel scratch (the packing buffers of
    /// convolutions and matrix products) into the arena for this many
    /// threads; `stow run` with more threads allocates the rest at setup.
    /// 0 plans none: the arena then holds only the model's tensors (for
    /// runtimes with kernels of their own).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub threads: u32,
    #[command(flatten)]
    pub plan: PlanArgs,
    /// Alignment of every arena offset in bytes (a power of two).
    #[arg(long, default_value_t = 64, value_parser = parse_align)]
    pub align: u64,
    #[command(flatten)]
    pub reuse: ReuseArgs,
    /// Also write the planning problem as a CSV that `stow plan` reads
    /// (`id,lower,upper,size`, or `id,size,conflicts` for conflict graphs).
    #[arg(long, value_name = "FILE.csv")]
    pub dump_problem: Option<PathBuf>,
    /// Run every strategy on the model's problem and print a table, best
    /// first (the bundle uses `--strategy`).
    #[arg(long)]
    pub compare: bool,
    /// Refuse any tensor or arena larger than this many bytes.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_ARENA)]
    pub max_arena: u64,
}

fn default_output(model: &Path) -> PathBuf {
    model.with_extension("stow")
}

/// Runs `stow compile`.
pub fn run(args: Args) -> Result<()> {
    let started = Instant::now();
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| default_output(&args.model));
    for path in std::iter::once(&output).chain(&args.dump_problem) {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                bail!(
                    "cannot write {}: directory {} does not exist",
                    path.display(),
                    dir.display()
                );
            }
        }
    }
    let options = load_options(&args.inputs, &args.dims, &args.constants, args.reuse)?;
    let mut graph = stow_onnx::load(&args.model, &options)
        .with_context(|| format!("compiling {}", args.model.display()))?;
    if args.threads > 0 {
        stow_cli::build::plan_scratch(&mut graph, args.threads)
            .with_context(|| format!("compiling {}", args.model.display()))?;
    }
    for t in graph.tensors.iter().filter(|t| t.role.in_arena()) {
        within_max_arena(&format!("tensor `{}`", t.name), t.bytes, args.max_arena)
            .with_context(|| format!("compiling {}", args.model.display()))?;
    }
    let (problem, buffer_of) = graph.problem(args.align);
    if args.compare {
        print!("{}", compare_table(&problem, args.plan)?);
    }
    let chosen = plan(&problem, &args.plan.options())
        .with_context(|| format!("planning {}", args.model.display()))?;
    within_max_arena("the arena", chosen.arena_bytes, args.max_arena)
        .with_context(|| format!("planning {}", args.model.display()))?;
    let naive = plan(
        &problem,
        &PlanOptions {
            strategy: Strategy::Naive,
            ..PlanOptions::default()
        },
    )
    .with_context(|| format!("planning {}", args.model.display()))?;
    let source = args
        .model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let planned = PlannedModel {
        graph: &graph,
        buffer_of: &buffer_of,
        plan: &chosen,
        naive_bytes: naive.arena_bytes,
        align: args.align,
        source_model: source,
    };
    let (contents, weights) = bundle_contents(&planned)?;
    let bytes = stow_bundle::to_bytes(&contents, &weights).context("encoding the bundle")?;
    stow_bundle::write_file(&output, &bytes)
        .with_context(|| format!("writing {}", output.display()))?;
    if let Some(path) = &args.dump_problem {
        let note = format!("{}, align {}", args.model.display(), args.align);
        let written = stow_bundle::write_file(path, problem_csv(&problem, &note).as_bytes());
        if let Err(e) = written {
            // Leave no bundle behind a failed command.
            let _ = std::fs::remove_file(&output);
            return Err(e).with_context(|| format!("writing {}", path.display()));
        }
    }
    let elapsed = started.elapsed();
    println!(
        "compiled {} -> {} ({} bytes)",
        args.model.display(),
        output.display(),
        bytes.len()
    );
    println!("  ops            {}", graph.ops.len());
    let arena_tensors = buffer_of.iter().filter(|b| b.is_some()).count();
    let in_place = graph
        .tensors
        .iter()
        .filter(|t| matches!(t.alias, Some(Alias::InPlace(_))))
        .count();
    let views = graph
        .tensors
        .iter()
        .filter(|t| matches!(t.alias, Some(Alias::View(_))))
        .count();
    let slices = graph
        .tensors
        .iter()
        .filter(|t| matches!(t.alias, Some(Alias::ConcatSlice { .. })))
        .count();
    println!(
        "  tensors        {} ({arena_tensors} in the arena: {} buffers, {in_place} in place, {views} views, {slices} concat slices)",
        graph.tensors.len(),
        problem.buffers.len()
    );
    println!("  weights        {}", human_bytes(graph.weight_total()));
    let by = if args.plan.strategy == Strategy::Auto {
        format!("auto: {}", chosen.strategy)
    } else {
        chosen.strategy.to_string()
    };
    println!(
        "  arena          {} ({by}{})",
        human_bytes(chosen.arena_bytes),
        if chosen.optimal { ", optimal" } else { "" }
    );
    println!("  lower bound    {}", human_bytes(chosen.lower_bound));
    let orders: Vec<String> = graph
        .order_bounds
        .iter()
        .map(|(order, bound)| format!("{} {}", order.name(), human_bytes(*bound)))
        .collect();
    println!(
        "  order          {} (bounds: {})",
        graph.order.name(),
        orders.join(", ")
    );
    println!("  naive          {}", human_bytes(naive.arena_bytes));
    println!("  arena / bound  {:.3}", chosen.ratio());
    println!(
        "  compile time   {:.3} s (planning {:.1} ms)",
        elapsed.as_secs_f64(),
        chosen.stats.elapsed.as_secs_f64() * 1e3
    );
    Ok(())
}

/// `1234567` → `1,234,567 B (1.18 MiB)`.
pub(crate) fn human_bytes(n: u64) -> String {
    let digits = n.to_string();
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let units = [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    match units.iter().find(|(_, s)| n >= *s) {
        Some((u, s)) => format!("{grouped} B ({:.2} {u})", n as f64 / *s as f64),
        None => format!("{grouped} B"),
    }
}

//! `stow compile`: ONNX model → memory-planned bundle.

use crate::cmd::frontend::{load_options, ReuseArgs};
use crate::cmd::plan::problem_csv;
use crate::cmd::planning::{compare_table, parse_align, PlanArgs};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use stow_compile::{
    compile, CompileError, CompileOptions, Pin, Placement, PoolSpec, Report, DEFAULT_MAX_ARENA,
};
use stow_onnx::LoadOptions;

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
    /// Keep convolution and product weights row-major instead of storing
    /// them in the panel layout the Stowage runtime's kernels read
    /// (packed weights save every run from packing them; they are only
    /// stored with --threads 1 or more).
    #[arg(long)]
    pub no_pack_weights: bool,
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
    /// Split the arena across memories, fastest first: `NAME=BYTES`, or
    /// `NAME` for the last one without a limit (repeatable, e.g. `--pool
    /// sram=524288 --pool dram`). The bundle lists the pools and each
    /// tensor's pool; `stow run` allocates one buffer per pool.
    #[arg(long = "pool", value_name = "NAME[=BYTES]", value_parser = crate::cmd::plan::parse_pool)]
    pub pools: Vec<stow_plan::Pool>,
    /// Put a tensor, or every arena tensor an operator reads or writes,
    /// into a pool: `TENSOR_OR_OP=POOL` (repeatable). A tensor larger
    /// than its pool is refused, naming both and the shortfall.
    #[arg(long = "pin", value_name = "TENSOR_OR_OP=POOL", value_parser = parse_pin)]
    pub pins: Vec<Pin>,
    /// Which tensors the bounded pools take first: `gain` (most bytes
    /// read and written per byte stored), `first-use` (first come, first
    /// served: the baseline), or `threshold=BYTES` (method M3's layer-group
    /// threshold: every tensor of a step whose operands and scratch exceed
    /// BYTES goes to the last, slowest pool, the rest fill the faster pools
    /// in order of first use; `threshold` alone takes the first pool's
    /// size as BYTES).
    #[arg(long, value_name = "POLICY", default_value = "gain", value_parser = Placement::parse)]
    pub placement: Placement,
    /// Run a stage of the model in bands of rows (patch-based execution):
    /// `FROM:TO:ROWS` runs every operator between tensors FROM (kept
    /// whole; a graph input is written in bands of rows, each free after
    /// its last reader) and TO, ROWS rows of TO at a time, so the stage's
    /// large activations exist only as bands (names as `stow inspect`
    /// shows them; repeatable). Without it, `--capacity` chooses a stage when
    /// the model does not fit otherwise.
    #[arg(long = "patch", value_name = "FROM:TO:ROWS", value_parser = parse_stage)]
    pub stages: Vec<stow_onnx::PatchedStage>,
    /// The most multiply-adds, in percent of the model's own, that a stage
    /// chosen for `--capacity` may add: a stage through a
    /// squeeze-and-excitation block computes the operators before its gate
    /// twice.
    #[arg(long, value_name = "PERCENT", default_value_t = 15.0, value_parser = parse_percent)]
    pub max_extra_macs: f64,
}

fn parse_percent(s: &str) -> Result<f64, String> {
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(p) if p.is_finite() && p >= 0.0 => Ok(p),
        _ => Err(format!("`{s}` is not a percentage (a number from 0 up)")),
    }
}

fn parse_stage(s: &str) -> Result<stow_onnx::PatchedStage, String> {
    stow_onnx::PatchedStage::parse(s).map_err(|e| e.to_string())
}

fn parse_pin(s: &str) -> Result<Pin, String> {
    match s.rsplit_once('=') {
        Some((target, pool)) if !target.is_empty() && !pool.is_empty() => Ok(Pin {
            target: target.to_string(),
            pool: pool.to_string(),
        }),
        _ => Err(format!("`{s}` is not TENSOR_OR_OP=POOL")),
    }
}

fn default_output(model: &Path) -> PathBuf {
    model.with_extension("stow")
}

/// Runs `stow compile`: the library's [`stow_compile::compile`], then the
/// summary and the files.
pub fn run(args: Args) -> Result<()> {
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| default_output(&args.model));
    // Refuse a missing directory before the (long) compile, not after.
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
    let LoadOptions {
        inputs,
        dims,
        constants,
        reuse,
        ..
    } = load_options(&args.inputs, &args.dims, &args.constants, args.reuse)?;
    let options = CompileOptions {
        inputs,
        dims,
        constants,
        reuse,
        plan: args.plan.options(),
        align: args.align,
        threads: args.threads,
        pack_weights: !args.no_pack_weights,
        max_arena: args.max_arena,
        compare: args.compare,
        pools: args
            .pools
            .iter()
            .map(|p| PoolSpec {
                name: p.name.clone(),
                capacity: p.capacity,
            })
            .collect(),
        pins: args.pins.clone(),
        stages: args.stages.clone(),
        max_extra_macs: args.max_extra_macs / 100.0,
        placement: args.placement,
    };
    let compiled = match compile(&args.model, &options) {
        Ok(c) => c,
        Err(e) => {
            // The comparison shows which strategies would have fitted.
            if let CompileError::Plan {
                comparison: Some(rows),
                ..
            } = &e
            {
                print!("{}", compare_table(rows));
            }
            return Err(e.into());
        }
    };
    let report = compiled.report();
    if let Some(rows) = &report.comparison {
        print!("{}", compare_table(rows));
    }
    compiled.write(&output)?;
    if let Some(path) = &args.dump_problem {
        let note = format!("{}, align {}", args.model.display(), args.align);
        let written =
            stow_bundle::write_file(path, problem_csv(compiled.problem(), &note).as_bytes());
        if let Err(e) = written {
            // Leave no bundle behind a failed command.
            let _ = std::fs::remove_file(&output);
            return Err(e).with_context(|| format!("writing {}", path.display()));
        }
    }
    print!("{}", summary(&args.model, &output, report));
    Ok(())
}

/// What `stow compile` prints after the bundle is written.
fn summary(model: &Path, output: &Path, r: &Report) -> String {
    let mut out = String::new();
    say!(
        out,
        "compiled {} -> {} ({} bytes)",
        model.display(),
        output.display(),
        r.bundle_bytes
    );
    say!(out, "  ops            {}", r.ops);
    let t = &r.tensors;
    say!(
        out,
        "  tensors        {} ({} in the arena: {} buffers, {} in place, {} views, {} concat slices, {} depthwise in place)",
        t.total,
        t.arena,
        t.buffers,
        t.in_place,
        t.views,
        t.concat_slices,
        t.depthwise_in_place
    );
    say!(out, "  weights        {}", human_bytes(r.weight_bytes));
    let by = if r.chosen_by_auto {
        format!("auto: {}", r.strategy)
    } else {
        r.strategy.to_string()
    };
    say!(
        out,
        "  arena          {} ({by}{})",
        human_bytes(r.arena_bytes),
        if r.optimal { ", optimal" } else { "" }
    );
    say!(out, "  lower bound    {}", human_bytes(r.lower_bound));
    for stage in &r.stages {
        say!(
            out,
            "  patched stage  {} -> {}, {} row{} of the output per step{}",
            stage.from,
            stage.to,
            stage.rows,
            if stage.rows == 1 { "" } else { "s" },
            r.bound_without_stages.map_or(String::new(), |b| format!(
                " (chosen for --capacity; bound without it {})",
                human_bytes(b)
            ))
        );
    }
    if r.multiply_adds != r.multiply_adds_without_stages {
        say!(
            out,
            "  multiply-adds  {} ({:+.1} % for the stages)",
            thousands(r.multiply_adds),
            (r.multiply_adds as f64 / r.multiply_adds_without_stages.max(1) as f64 - 1.0) * 100.0
        );
    }
    let orders: Vec<String> = r
        .order_bounds
        .iter()
        .map(|(order, bound)| format!("{} {}", order.name(), human_bytes(*bound)))
        .collect();
    say!(
        out,
        "  order          {} (bounds: {})",
        r.order.name(),
        orders.join(", ")
    );
    say!(out, "  naive          {}", human_bytes(r.naive_bytes));
    say!(out, "  arena / bound  {:.3}", r.ratio);
    if !r.pools.is_empty() {
        say!(out, "{}", pool_table(&r.pools, &r.placement.to_string()));
    }
    for s in &r.scratch_above_bound {
        say!(
            out,
            "  scratch        step {} `{}` needs {} above the model tensors' bound, even in its smallest blocks",
            s.step,
            s.op,
            human_bytes(s.bytes)
        );
    }
    say!(
        out,
        "  compile time   {:.3} s (planning {:.1} ms)",
        r.compile_time.as_secs_f64(),
        r.planning_time.as_secs_f64() * 1e3
    );
    out
}

/// One line per memory pool: planned size of capacity, fill at the peak,
/// traffic served and its share (shared by `compile` and `inspect`).
pub(crate) fn pool_table(pools: &[stow_compile::PoolReport], placement: &str) -> String {
    let total: u64 = pools.iter().map(|p| p.traffic).sum();
    let mut out = format!("  pools          placement {placement}");
    for p in pools {
        let cap = p.capacity.map_or("no limit".to_string(), human_bytes);
        let share = if total == 0 {
            0.0
        } else {
            p.traffic as f64 / total as f64
        };
        out.push_str(&format!(
            "\n    {:<12} {} of {cap}, {:.1} % full at its peak, {} buffers, traffic {} ({:.1} %)",
            p.name,
            human_bytes(p.bytes),
            p.fill() * 100.0,
            p.buffers,
            human_bytes(p.traffic),
            share * 100.0
        ));
    }
    out
}

/// `1234567` → `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    grouped
}

/// `1234567` → `1,234,567 B (1.18 MiB)`.
pub(crate) fn human_bytes(n: u64) -> String {
    let grouped = thousands(n);
    let units = [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    match units.iter().find(|(_, s)| n >= *s) {
        Some((u, s)) => format!("{grouped} B ({:.2} {u})", n as f64 / *s as f64),
        None => format!("{grouped} B"),
    }
}

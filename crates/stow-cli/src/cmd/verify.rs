//! `stow verify`: run the model inside the bundle's arena and compare with tract.

use crate::cmd::frontend::load_options;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::time::Instant;
use stow_bundle::Region;
use stow_onnx::{ArenaLayout, ModelGraph, Tensor};

/// Arguments of `stow verify`.
#[derive(clap::Args)]
pub struct Args {
    /// The ONNX model the bundle was compiled from.
    pub model: PathBuf,
    /// The bundle to check.
    pub bundle: PathBuf,
    /// Fix an input's shape, as given to `stow compile` (repeatable).
    #[arg(long = "input", value_name = "NAME=SHAPE")]
    pub inputs: Vec<String>,
    /// Give a symbolic dimension a value, as given to `stow compile` (repeatable).
    #[arg(long = "dim", value_name = "SYMBOL=VALUE")]
    pub dims: Vec<String>,
    #[command(flatten)]
    pub constants: crate::cmd::frontend::ConstantArgs,
    /// Inputs: a numpy `.npz` archive (arrays named after the inputs, or
    /// `arr_0`, `arr_1`, ...), or a directory of `input_N.pb` tensors (ONNX
    /// test-case layout); when the directory also holds `output_N.pb`,
    /// outputs are compared with them too.
    #[arg(long = "inputs", value_name = "FILE.npz|DIR")]
    pub input_dir: Option<PathBuf>,
    /// The reuse switches given to `stow compile`, so the model's tensors
    /// line up with the bundle's.
    #[command(flatten)]
    pub reuse: crate::cmd::frontend::ReuseArgs,
    /// Seed for random inputs when `--inputs` is not given.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Relative tolerance for the comparison with expected `output_N.pb` files.
    #[arg(long, default_value_t = 1e-4)]
    pub tolerance: f64,
    /// Refuse a bundle whose arena is larger than this many bytes (the
    /// check allocates it).
    #[arg(long, value_name = "BYTES", default_value_t = stow_compile::DEFAULT_MAX_ARENA)]
    pub max_arena: u64,
}

/// Checks that the bundle's tensor table is the one this model produces.
fn match_bundle(
    graph: &ModelGraph,
    c: &stow_bundle::Contents,
    bundle: &str,
) -> Result<Vec<Option<u64>>> {
    if c.tensors.len() != graph.tensors.len() {
        bail!(
            "{bundle} does not match the model: {} tensors in the bundle, {} in the model (other model, or other --input/--dim/reuse flags?)",
            c.tensors.len(),
            graph.tensors.len()
        );
    }
    let bases = pool_bases(c);
    let mut offsets = Vec::with_capacity(c.tensors.len());
    for (id, (rec, info)) in c.tensors.iter().zip(&graph.tensors).enumerate() {
        let alias = info
            .alias
            .map(|a| a.target())
            .or(graph.banded_input(id))
            .map(|t| t as u32);
        if rec.name != info.name
            || rec.size != info.bytes
            || rec.alias_of.map(|(_, of)| of) != alias
        {
            bail!(
                "{bundle} does not match the model: tensor {id} is `{}` ({} bytes) in the bundle but `{}` ({} bytes) in the model, or shares other bytes (other --input/--dim/reuse flags?)",
                rec.name,
                rec.size,
                info.name,
                info.bytes
            );
        }
        offsets.push(if rec.region == Region::Arena {
            let base = bases.get(rec.pool as usize).copied().unwrap_or(u64::MAX);
            Some(base.saturating_add(rec.offset))
        } else {
            None
        });
    }
    Ok(offsets)
}

/// Where each memory pool starts when the pools are laid side by side in
/// one buffer (each after the previous one, at the next multiple of 64),
/// and the bytes that buffer needs. Tensors of different pools then never
/// share a byte, and tensors of one pool keep their places relative to
/// each other: an arena run judges the bundle's placement as separate
/// buffers would. One arena: base 0, its own size.
pub(crate) fn pool_bases(c: &stow_bundle::Contents) -> Vec<u64> {
    let mut bases = Vec::new();
    let mut next = 0u64;
    for (bytes, _) in c.pool_sizes() {
        bases.push(next);
        next = next.saturating_add(bytes).next_multiple_of(64);
    }
    bases
}

/// Bytes of the one buffer [`pool_bases`] lays the pools out in.
pub(crate) fn side_by_side_bytes(c: &stow_bundle::Contents) -> u64 {
    let sizes = c.pool_sizes();
    let last = sizes.len().saturating_sub(1);
    pool_bases(c)
        .get(last)
        .copied()
        .unwrap_or(0)
        .saturating_add(sizes.get(last).map_or(0, |s| s.0))
}

/// Largest `|a − b| / max(|b|, 1)` over the elements, or `None` when the
/// shapes differ or a value is not numeric.
fn max_relative_error(got: &Tensor, want: &Tensor) -> Option<f64> {
    let (g, w) = crate::cmd::run::as_f64_pair(got, want)?;
    Some(g.iter().zip(w.iter()).fold(0.0f64, |m, (a, b)| {
        if a == b || (a.is_nan() && b.is_nan()) {
            m
        } else {
            m.max((a - b).abs() / b.abs().max(1.0))
        }
    }))
}

/// Runs `stow verify`.
pub fn run(args: Args) -> Result<()> {
    let started = Instant::now();
    let mut options = load_options(&args.inputs, &args.dims, &args.constants, args.reuse)?;
    let bundle = stow_runtime::Bundle::open(&args.bundle)
        .with_context(|| format!("opening {}", args.bundle.display()))?;
    // Stages the compiler ran in bands of rows are rebuilt the same way.
    options.stages = stow_onnx::recorded_stages(bundle.contents().ops.iter().flat_map(|op| {
        op.attributes.iter().filter_map(|(k, v)| match v {
            stow_bundle::AttrValue::Text(t) if k == stow_bundle::format::PATCH_ATTR => {
                Some(t.as_str())
            }
            _ => None,
        })
    }))
    .with_context(|| format!("reading {}", args.bundle.display()))?;
    let mut graph = stow_onnx::load(&args.model, &options)
        .with_context(|| format!("loading {}", args.model.display()))?;
    // The scratch the compiler planned, for the threads it planned for.
    let threads = bundle
        .contents()
        .ops
        .iter()
        .map(stow_runtime::kernels::planned_scratch_threads)
        .max()
        .unwrap_or(0);
    // The weights the bundle stores packed, with its depth blocks (which
    // also size the kernels' scratch).
    stow_compile::packing::mark_like(&mut graph, &bundle.contents().ops);
    if threads > 0 {
        stow_compile::plan_scratch(&mut graph, threads as u32)
            .with_context(|| format!("loading {}", args.model.display()))?;
    }
    let c = bundle.contents();
    let arena_bytes = side_by_side_bytes(c);
    if arena_bytes > args.max_arena {
        bail!(
            "checking {}: the bundle's arena needs {} bytes, more than --max-arena {}; raise the limit if this is intended",
            args.bundle.display(),
            arena_bytes,
            args.max_arena
        );
    }
    let offsets = match_bundle(&graph, c, &args.bundle.display().to_string())?;
    let inputs = match &args.input_dir {
        Some(file) if file.is_file() => stow_onnx::read_npz(&graph, file)?,
        Some(dir) => stow_onnx::read_input_dir(&graph, dir)?,
        None => stow_onnx::random_inputs(&graph, args.seed)?,
    };
    // Weights stored packed are compared, and run by tract, in the
    // model's row-major order.
    let mut unpacked = std::collections::HashMap::new();
    for (id, layout) in stow_compile::packing::packed_layouts(&graph)?
        .iter()
        .enumerate()
    {
        let Some(layout) = layout else { continue };
        let bytes = bundle
            .weight_bytes(id as u32)
            .and_then(|stored| stow_compile::packing::unpacked_bytes(stored, layout))
            .with_context(|| {
                format!(
                    "{}: packed weight `{}` does not have its layout's size",
                    args.bundle.display(),
                    graph.tensors[id].name
                )
            })?;
        unpacked.insert(id, bytes);
    }
    let weight = |id: usize| {
        unpacked
            .get(&id)
            .map(Vec::as_slice)
            .or_else(|| bundle.weight_bytes(id as u32))
    };
    let layout = ArenaLayout {
        arena_bytes,
        offsets,
        weight: &weight,
    };
    let run = stow_onnx::run_in_arena(&graph, &layout, &inputs).context("running in the arena")?;
    if let Some(m) = run.mismatch {
        let written = m
            .written_at
            .map(|s| format!(", written at step {s}"))
            .unwrap_or_default();
        if m.is_weight {
            bail!(
                "FAIL: weight `{}` in {} differs from the model in {} bytes (first read at step {}, op `{}`)",
                m.tensor,
                args.bundle.display(),
                m.differing_bytes,
                m.step,
                m.op
            );
        }
        bail!(
            "FAIL: tensor `{}` (id {}) holds wrong bytes when step {} (op `{}`) reads it{written}: {} bytes differ from tract's value",
            m.tensor,
            m.tensor_id,
            m.step,
            m.op,
            m.differing_bytes
        );
    }
    let reference =
        stow_onnx::run_reference(&graph, &inputs).context("running tract's reference")?;
    for ((ours, theirs), &tid) in run.outputs.iter().zip(&reference).zip(&graph.outputs) {
        if ours.as_bytes() != theirs.as_bytes() || ours.shape() != theirs.shape() {
            bail!(
                "FAIL: output `{}` differs from tract's own run",
                graph.tensors[tid].name
            );
        }
    }
    let mut expected_note = String::new();
    if let Some(dir) = args.input_dir.as_ref().filter(|d| d.is_dir()) {
        let files = stow_onnx::numbered_files(dir, "output")?;
        if !files.is_empty() {
            let mut worst = 0.0f64;
            for (ix, (file, ours)) in files.iter().zip(&run.outputs).enumerate() {
                let want = stow_onnx::read_tensor_file(file)?;
                let err = max_relative_error(ours, &want).with_context(|| {
                    format!(
                        "output {ix}: shape {:?} differs from {} ({:?})",
                        ours.shape(),
                        file.display(),
                        want.shape()
                    )
                })?;
                if err.is_nan() || err > args.tolerance {
                    bail!(
                        "FAIL: output {ix} differs from {} by {err:e} (tolerance {:e})",
                        file.display(),
                        args.tolerance
                    );
                }
                worst = worst.max(err);
            }
            expected_note = format!("; expected outputs match, max relative error {worst:.2e}");
        }
    }
    let pools = if c.pools.is_empty() {
        String::new()
    } else {
        format!(" ({} memory pools side by side)", c.pools.len())
    };
    println!(
        "PASS: {} steps in a {}-byte arena{pools}, {} outputs bit-exact with tract{expected_note} ({:.2} s)",
        run.steps,
        arena_bytes,
        run.outputs.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

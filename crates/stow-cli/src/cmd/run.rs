//! `stow run`: execute a bundle with the runtime's own kernels, from the
//! bundle alone, and optionally check the outputs against tract.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stow_bundle::DType;
use stow_onnx::{DatumType, InputShape, LoadOptions, Tensor};
use stow_runtime::{Bundle, Session};

/// Arguments of `stow run`.
#[derive(clap::Args)]
pub struct Args {
    /// The bundle to run.
    pub bundle: PathBuf,
    /// Inputs: a numpy `.npz` archive (arrays named after the inputs, or
    /// `arr_0`, `arr_1`, ...) or a directory of `input_N.pb` tensors.
    /// Without it, inputs are seeded random values (those `stow verify`
    /// draws for the same seed).
    #[arg(long = "inputs", value_name = "FILE.npz|DIR")]
    pub inputs: Option<PathBuf>,
    /// Seed for random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write each output as `output_N.pb` (an ONNX TensorProto) into this
    /// directory.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Worker threads for the kernels.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Run this many times and report the median and fastest latency
    /// (above 1, after one untimed warm-up run that faults in the arena
    /// and the weight pages).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Time every step of every timed run and print where the time goes:
    /// the total per operator type and the slowest steps (medians over
    /// the runs; give `--repeat` 10 or more for steady figures).
    #[arg(long)]
    pub profile: bool,
    /// How many of the slowest steps `--profile` lists (0: every step, in
    /// the bundle's order).
    #[arg(long, value_name = "N", default_value_t = 15, requires = "profile")]
    pub profile_steps: usize,
    /// Also run the ONNX model the bundle was compiled from with tract on
    /// the same inputs, and fail when an output differs by more than
    /// `--tolerance`.
    #[arg(long, value_name = "MODEL.onnx")]
    pub check: Option<PathBuf>,
    /// With `--check`: the inputs made constants when the bundle was
    /// compiled, as given to `stow compile`.
    #[command(flatten)]
    pub constants: crate::cmd::frontend::ConstantArgs,
    /// Largest error `--check` accepts, relative to the output's scale:
    /// max |a−b| over the elements divided by max |b|.
    #[arg(long, default_value_t = 1e-5)]
    pub tolerance: f64,
}

fn datum_type(d: DType) -> Option<DatumType> {
    Some(match d {
        DType::F32 => DatumType::F32,
        DType::F16 => DatumType::F16,
        DType::F64 => DatumType::F64,
        DType::I8 => DatumType::I8,
        DType::I16 => DatumType::I16,
        DType::I32 => DatumType::I32,
        DType::I64 => DatumType::I64,
        DType::U8 => DatumType::U8,
        DType::U16 => DatumType::U16,
        DType::U32 => DatumType::U32,
        DType::U64 => DatumType::U64,
        DType::Bool => DatumType::Bool,
    })
}

/// The bundle's inputs as (name, type, shape).
fn input_specs(bundle: &Bundle) -> Result<Vec<(String, DatumType, Vec<usize>)>> {
    bundle
        .inputs()
        .map(|t| {
            let dt = datum_type(t.tensor.dtype).context("input type")?;
            let shape = t.tensor.shape.iter().map(|&d| d as usize).collect();
            Ok((t.name().to_string(), dt, shape))
        })
        .collect()
}

fn read_inputs(bundle: &Bundle, args: &Args) -> Result<Vec<Tensor>> {
    let specs = input_specs(bundle)?;
    let names: Vec<String> = specs.iter().map(|s| s.0.clone()).collect();
    let values = match &args.inputs {
        Some(file) if file.is_file() => stow_onnx::read_npz_named(&names, file)?,
        Some(dir) => {
            let files = stow_onnx::numbered_files(dir, "input")?;
            if files.len() != names.len() {
                bail!(
                    "{}: {} input_N.pb files for a bundle with {} inputs",
                    dir.display(),
                    files.len(),
                    names.len()
                );
            }
            files
                .iter()
                .map(|f| stow_onnx::read_tensor_file(f))
                .collect::<Result<_, _>>()?
        }
        None => stow_onnx::random_tensors(&specs, args.seed)?,
    };
    for ((name, dt, shape), t) in specs.iter().zip(&values) {
        if t.datum_type() != *dt || t.shape() != shape.as_slice() {
            bail!(
                "input `{name}` is {:?} {:?} in the inputs but {dt:?} {shape:?} in {}",
                t.datum_type(),
                t.shape(),
                args.bundle.display()
            );
        }
    }
    Ok(values)
}

/// Both tensors' values as f64, or `None` when the shapes differ or a
/// value is not numeric.
pub(crate) fn as_f64_pair(got: &Tensor, want: &Tensor) -> Option<(Vec<f64>, Vec<f64>)> {
    if got.shape() != want.shape() {
        return None;
    }
    let values = |t: &Tensor| -> Option<Vec<f64>> {
        let t = t.cast_to::<f64>().ok()?;
        let view = t.to_plain_array_view::<f64>().ok()?;
        Some(view.iter().copied().collect())
    };
    Some((values(got)?, values(want)?))
}

/// Largest `|a − b|` over the elements divided by the largest `|b|` (the
/// error relative to the output's scale, meaningful however small its
/// values), or `None` when the shapes differ or a value is not numeric.
fn scaled_error(got: &Tensor, want: &Tensor) -> Option<f64> {
    let (g, w) = as_f64_pair(got, want)?;
    let scale = w.iter().fold(0.0f64, |m, b| m.max(b.abs()));
    let diff = g.iter().zip(w.iter()).fold(0.0f64, |m, (a, b)| {
        if a == b || (a.is_nan() && b.is_nan()) {
            m
        } else {
            m.max((a - b).abs())
        }
    });
    Some(if diff == 0.0 {
        0.0
    } else {
        diff / scale.max(f64::MIN_POSITIVE)
    })
}

/// The outputs of a finished run, as tract tensors.
fn outputs(session: &Session<'_>) -> Result<Vec<(String, Tensor)>> {
    let bundle = session.bundle();
    bundle
        .outputs()
        .map(|t| {
            let bytes = session.arena().tensor_bytes(bundle, &t.id)?;
            let dt = datum_type(t.tensor.dtype).context("output type")?;
            let shape: Vec<usize> = t.tensor.shape.iter().map(|&d| d as usize).collect();
            // SAFETY-free copy: tract builds the tensor from raw bytes of
            // the declared type and shape.
            let mut tensor = Tensor::zero_dt(dt, &shape)
                .map_err(|e| anyhow::anyhow!("output `{}`: {e}", t.name()))?;
            tensor.as_bytes_mut().copy_from_slice(bytes);
            Ok((t.name().to_string(), tensor))
        })
        .collect()
}

fn summary(t: &Tensor) -> String {
    let Ok(v) = t.cast_to::<f64>() else {
        return String::new();
    };
    let Ok(v) = v.to_plain_array_view::<f64>() else {
        return String::new();
    };
    let Some(v) = v.as_slice() else {
        return String::new();
    };
    if v.is_empty() {
        return "empty".into();
    }
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let head: Vec<String> = v.iter().take(4).map(|x| format!("{x:.6}")).collect();
    format!(
        "min {min:.6} max {max:.6} mean {mean:.6} [{}{}]",
        head.join(", "),
        if v.len() > 4 { ", ..." } else { "" }
    )
}

fn write_output(dir: &Path, ix: usize, name: &str, t: &Tensor) -> Result<PathBuf> {
    let path = dir.join(format!("output_{ix}.pb"));
    stow_onnx::write_tensor_file(&path, name, t)?;
    Ok(path)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The `--profile` report from each step's times over the runs: the
/// median per step, summed per operator type, and the `listed` slowest
/// steps (all of them in the bundle's order when `listed` is 0).
fn profile(bundle: &Bundle, step_times: Vec<Vec<Duration>>, listed: usize) -> String {
    let contents = bundle.contents();
    let medians: Vec<f64> = step_times
        .into_iter()
        .map(|t| median(t).as_secs_f64() * 1e3)
        .collect();
    let total: f64 = medians.iter().sum::<f64>().max(f64::MIN_POSITIVE);
    let mut by_type: Vec<(&str, f64, usize)> = Vec::new();
    for (op, &ms) in contents.ops.iter().zip(&medians) {
        match by_type.iter_mut().find(|(t, _, _)| *t == op.op_type) {
            Some(row) => {
                row.1 += ms;
                row.2 += 1;
            }
            None => by_type.push((&op.op_type, ms, 1)),
        }
    }
    by_type.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut out = String::new();
    say!(
        out,
        "time per operator type (sum of the steps' medians, {total:.3} ms):"
    );
    let width = by_type.iter().map(|r| r.0.len()).max().unwrap_or(0);
    for (op_type, ms, count) in &by_type {
        say!(
            out,
            "  {op_type:<width$} {ms:9.3} ms {:5.1} %  {count} step{}",
            100.0 * ms / total,
            if *count == 1 { "" } else { "s" }
        );
    }
    let mut order: Vec<usize> = (0..medians.len()).collect();
    if listed == 0 {
        say!(out, "every step (median):");
    } else {
        order.sort_by(|&a, &b| medians[b].total_cmp(&medians[a]));
        order.truncate(listed);
        say!(out, "slowest steps (median):");
    }
    for &i in &order {
        let op = &contents.ops[i];
        let shape = op
            .outputs
            .first()
            .and_then(|&id| contents.tensors.get(id as usize))
            .map(|t| format!("{:?}", t.shape))
            .unwrap_or_default();
        say!(
            out,
            "  step {i:>4} {:9.3} ms {:5.1} %  {} `{}` -> {shape}",
            medians[i],
            100.0 * medians[i] / total,
            op.op_type,
            op.name
        );
    }
    out
}

/// Runs `stow run`.
pub fn run(args: Args) -> Result<()> {
    if args.threads == 0 || args.repeat == 0 {
        bail!("--threads and --repeat must be at least 1");
    }
    let bundle =
        Bundle::open(&args.bundle).with_context(|| format!("opening {}", args.bundle.display()))?;
    let mut session = Session::with_threads(&bundle, args.threads)?;
    let inputs = read_inputs(&bundle, &args)?;
    let ids: Vec<u32> = bundle.inputs().map(|t| t.id).collect();
    let mut times = Vec::with_capacity(args.repeat);
    let steps = bundle.contents().ops.len();
    let mut step_times: Vec<Vec<Duration>> = if args.profile {
        vec![Vec::with_capacity(args.repeat); steps]
    } else {
        Vec::new()
    };
    let warmup = usize::from(args.repeat > 1);
    for round in 0..warmup + args.repeat {
        // An in-place op may overwrite a graph input (`--reuse-inputs`):
        // write the inputs before every run.
        for (&id, t) in ids.iter().zip(&inputs) {
            session.write_input_bytes(&id, t.as_bytes())?;
        }
        let started = Instant::now();
        if args.profile && round >= warmup {
            let mut last = started;
            session.run_observed(|i| {
                let now = Instant::now();
                step_times[i].push(now - last);
                last = now;
            })?;
        } else {
            session.run()?;
        }
        if round >= warmup {
            times.push(started.elapsed());
        }
    }
    let outs = outputs(&session)?;
    let mut report = String::new();
    say!(
        report,
        "ran {} steps in a {}-byte arena{}: {:.3} ms (median of {} runs, fastest {:.3} ms, {} thread{})",
        steps,
        bundle
            .contents()
            .pool_sizes()
            .iter()
            .map(|s| s.0)
            .sum::<u64>(),
        match bundle.contents().pool_count() {
            1 => String::new(),
            n => format!(" ({n} memory pools)"),
        },
        median(times.clone()).as_secs_f64() * 1e3,
        args.repeat,
        times.iter().min().copied().unwrap_or_default().as_secs_f64() * 1e3,
        args.threads,
        if args.threads == 1 { "" } else { "s" }
    );
    if args.profile {
        report.push_str(&profile(&bundle, step_times, args.profile_steps));
    }
    for (name, t) in &outs {
        say!(
            report,
            "output `{name}` {:?} {:?}: {}",
            t.datum_type(),
            t.shape(),
            summary(t)
        );
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (ix, (name, t)) in outs.iter().enumerate() {
            let path = write_output(dir, ix, name, t)?;
            say!(report, "wrote {}", path.display());
        }
    }
    if let Some(model) = &args.check {
        let options = LoadOptions {
            inputs: input_specs(&bundle)?
                .into_iter()
                .map(|(name, _, dims)| InputShape { name, dims })
                .collect(),
            constants: args.constants.fixed()?,
            ..Default::default()
        };
        let graph = stow_onnx::load(model, &options)
            .with_context(|| format!("loading {}", model.display()))?;
        let reference = stow_onnx::run_reference(&graph, &inputs).context("running tract")?;
        if reference.len() != outs.len() {
            bail!(
                "{} has {} outputs, the bundle {}",
                model.display(),
                reference.len(),
                outs.len()
            );
        }
        let mut worst = 0.0f64;
        for ((name, ours), theirs) in outs.iter().zip(&reference) {
            let err = scaled_error(ours, theirs).with_context(|| {
                format!(
                    "output `{name}`: shape {:?} differs from tract's {:?}",
                    ours.shape(),
                    theirs.shape()
                )
            })?;
            if err.is_nan() || err > args.tolerance {
                crate::cmd::emit(&report);
                bail!(
                    "FAIL: output `{name}` differs from tract by {err:e} (tolerance {:e})",
                    args.tolerance
                );
            }
            worst = worst.max(err);
        }
        say!(
            report,
            "check: {} outputs match tract within {:e} (max relative error {worst:.2e})",
            outs.len(),
            args.tolerance
        );
    }
    crate::cmd::emit(&report);
    Ok(())
}

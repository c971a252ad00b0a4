//! `stow inspect`: print what a bundle holds.

use crate::cmd::compile::human_bytes;
use anyhow::{Context, Result};
use std::path::PathBuf;
use stow_bundle::{AliasKind, Contents, Region, Tensor};
use stow_cli::inspect::kind_name;
use stow_cli::picture::{self, Layout};

/// Arguments of `stow inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// The bundle to inspect.
    pub bundle: PathBuf,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also verify the weight checksum.
    #[arg(long)]
    pub check: bool,
    /// Write an SVG picture of the arena (x: execution step, y: offset).
    #[arg(long, value_name = "OUT.svg")]
    pub svg: Option<PathBuf>,
    /// Write the picture as one self-contained HTML page with zoom, pan,
    /// hover details and the tensors live at the peak step.
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
    /// Print a text chart of the arena instead of the tensor table: one row
    /// per step, at most 100 columns wide.
    #[arg(long, conflicts_with = "json")]
    pub chart: bool,
}

pub(crate) fn alias_text(c: &Contents, t: &Tensor) -> Option<String> {
    let (kind, of) = t.alias_of?;
    let other = c
        .tensors
        .get(of as usize)
        .map(|o| o.name.as_str())
        .unwrap_or("?");
    Some(match kind {
        AliasKind::InPlace => format!("in place of {other}"),
        AliasKind::View => format!("view of {other}"),
        AliasKind::ConcatSlice => format!("slice of concat {other}"),
        AliasKind::DepthwiseInPlace => format!("depthwise in place of {other}"),
        AliasKind::InputRows => format!("rows of input {other}"),
    })
}

/// A quantized tensor's parameters, e.g. `scale 0.023529412 zero 128`.
pub(crate) fn quant_text(t: &Tensor) -> Option<String> {
    t.quant
        .map(|q| format!("scale {} zero {}", q.scale, q.zero_point))
}

/// The names of the header's flags, e.g. ` (pools, packed weights)`.
fn flag_names(flags: u32) -> String {
    use stow_bundle::format::{FLAG_PACKED, FLAG_PACKED_INT8, FLAG_PACKED_LEFT, FLAG_POOLS};
    let names: Vec<&str> = [
        (FLAG_POOLS, "pools"),
        (FLAG_PACKED, "packed weights"),
        (FLAG_PACKED_INT8, "int8 among them"),
        (FLAG_PACKED_LEFT, "weights packed as left operands"),
    ]
    .iter()
    .filter(|(bit, _)| flags & bit != 0)
    .map(|&(_, name)| name)
    .collect();
    if names.is_empty() {
        String::new()
    } else {
        format!(" ({})", names.join(", "))
    }
}

/// For a weight stored packed: which operator reads it so.
fn packed_text(c: &Contents, id: u32) -> Option<String> {
    let (op, kc) = c.packed_reader(id)?;
    let left = op
        .attributes
        .iter()
        .any(|(name, _)| name == stow_bundle::format::PACKED_LEFT_ATTR);
    let side = if left { ", left operand" } else { "" };
    Some(format!("packed for {} (depth block {kc}{side})", op.name))
}

/// The name of a tensor's pool (`-` for weights, `arena` without pools).
fn pool_name(c: &Contents, t: &Tensor) -> String {
    match (t.region, c.pools.get(t.pool as usize)) {
        (Region::Weights | Region::Rows, _) => "-".to_string(),
        (Region::Arena, Some(p)) => p.name.clone(),
        (Region::Arena, None) => "arena".to_string(),
    }
}

fn shape_text(shape: &[u64]) -> String {
    format!(
        "[{}]",
        shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// A picture renderer: one layout per memory pool in, file contents out.
type Render = fn(&[Layout<'_>]) -> String;

/// Runs `stow inspect`.
pub fn run(args: Args) -> Result<()> {
    let bundle = stow_runtime::Bundle::open(&args.bundle)
        .with_context(|| format!("opening {}", args.bundle.display()))?;
    if args.check {
        bundle
            .verify_weights()
            .with_context(|| format!("checking weights of {}", args.bundle.display()))?;
    }
    let c = bundle.contents();
    let pictures: Vec<(&PathBuf, Render)> = [
        (args.svg.as_ref(), picture::svg::render_panels as Render),
        (args.html.as_ref(), picture::html::render_panels),
    ]
    .into_iter()
    .filter_map(|(path, render)| path.map(|p| (p, render)))
    .collect();
    // Every output is checked before any is written, so a bad second path
    // does not leave the first picture behind.
    for (path, _) in &pictures {
        picture::check_output_path(path).with_context(|| format!("writing {}", path.display()))?;
    }
    if !pictures.is_empty() || args.chart {
        // One panel per memory pool (one for a bundle with one arena).
        let panels = Layout::panels(c);
        for (path, render) in &pictures {
            picture::write_atomically(path, render(&panels).as_bytes())
                .with_context(|| format!("writing {}", path.display()))?;
            match panels.as_slice() {
                [layout] => eprintln!(
                    "wrote {} ({} arena tensors, {})",
                    path.display(),
                    layout.blocks.len(),
                    layout.peak_text()
                ),
                _ => eprintln!(
                    "wrote {} (one panel per pool: {})",
                    path.display(),
                    panels
                        .iter()
                        .map(|l| format!("{} {} tensors", l.memory_name(), l.blocks.len()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
        if args.chart {
            crate::cmd::emit(&picture::chart::render_panels(&panels));
            return Ok(());
        }
        if !args.json {
            return Ok(());
        }
    }
    if args.json {
        let out = stow_cli::inspect::json(&bundle);
        crate::cmd::emit(&(serde_json::to_string_pretty(&out)? + "\n"));
        return Ok(());
    }
    let mut text = String::new();
    let h = bundle.header();
    say!(text, "bundle {}", args.bundle.display());
    say!(
        text,
        "  format version {}, flags {:#x}{}, {}",
        h.version,
        h.flags,
        flag_names(h.flags),
        human_bytes(h.file_len)
    );
    say!(
        text,
        "  source {} ({})",
        c.provenance.source_model,
        c.provenance.producer
    );
    say!(
        text,
        "  arena {} (align {}), lower bound {}, ratio {:.3}, naive {}",
        human_bytes(c.arena_bytes),
        c.arena_align,
        human_bytes(c.provenance.lower_bound_bytes),
        if c.provenance.lower_bound_bytes == 0 {
            1.0
        } else {
            c.arena_bytes as f64 / c.provenance.lower_bound_bytes as f64
        },
        human_bytes(c.provenance.naive_bytes)
    );
    say!(
        text,
        "  strategy {}{}, planned in {:.3} ms",
        c.provenance.strategy,
        if c.provenance.optimal {
            " (optimal)"
        } else {
            ""
        },
        c.provenance.plan_micros as f64 / 1e3
    );
    for (step, op) in c.ops.iter().enumerate() {
        for (k, v) in &op.attributes {
            if let (stow_bundle::format::PATCH_ATTR, stow_bundle::AttrValue::Text(stage)) =
                (k.as_str(), v)
            {
                let stage = stow_onnx::PatchedStage::from_record(stage)
                    .map_or_else(|_| stage.replace('\n', ":"), |s| s.to_string());
                say!(
                    text,
                    "  patched stage {stage} (FROM:TO:ROWS), assembled at step {step}"
                );
            }
        }
    }
    let uses = stow_cli::inspect::pool_use(c);
    let total: u64 = uses.iter().map(|p| p.traffic).sum();
    say!(text, "pools");
    for p in &uses {
        say!(
            text,
            "  {:<12} {} (align {}), {:.1} % full at its peak, traffic {} ({:.1} %)",
            p.name,
            human_bytes(p.bytes),
            p.align,
            p.fill() * 100.0,
            human_bytes(p.traffic),
            if total == 0 {
                0.0
            } else {
                p.traffic as f64 / total as f64 * 100.0
            }
        );
    }
    say!(text, "sections");
    for s in bundle.sections() {
        say!(
            text,
            "  {:<10} offset {:>10}  length {:>10}  align {}",
            s.kind_name(),
            s.offset,
            s.length,
            s.align
        );
    }
    let io = |ids: &[u32]| {
        ids.iter()
            .map(|&i| {
                let t = &c.tensors[i as usize];
                format!("{} {} {}", t.name, t.dtype.name(), shape_text(&t.shape))
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    say!(text, "inputs   {}", io(&c.inputs));
    say!(text, "outputs  {}", io(&c.outputs));
    say!(text, "ops      {}", c.ops.len());
    say!(text, "tensors  {}", c.tensors.len());
    let width = c
        .tensors
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .clamp(4, 48);
    // The pool column appears only for bundles with pools, so the table of
    // a single-arena bundle is what it always was (the C example prints it
    // too).
    let pooled = !c.pools.is_empty();
    let pool_cell = |name: &str| {
        if pooled {
            format!("{name:<8}  ")
        } else {
            String::new()
        }
    };
    say!(
        text,
        "  {:>4}  {:<width$}  {:<10}  {:<5}  {:<18}  {:>12}  {:>10}  {:>5}  {:>5}  {}notes",
        "id",
        "name",
        "kind",
        "dtype",
        "shape",
        "offset",
        "size",
        "first",
        "last",
        pool_cell("pool")
    );
    for (id, t) in c.tensors.iter().enumerate() {
        let offset = match t.region {
            Region::Arena => t.offset.to_string(),
            Region::Weights => format!("w+{}", t.offset),
            Region::Rows => "bands".to_string(),
        };
        let steps = |s: u32| {
            if t.region == Region::Weights {
                "-".to_string()
            } else {
                s.to_string()
            }
        };
        say!(
            text,
            "  {:>4}  {:<width$}  {:<10}  {:<5}  {:<18}  {:>12}  {:>10}  {:>5}  {:>5}  {}{}",
            id,
            t.name,
            kind_name(t.kind),
            t.dtype.name(),
            shape_text(&t.shape),
            offset,
            t.size,
            steps(t.first_step),
            steps(t.last_step),
            pool_cell(&pool_name(c, t)),
            [
                alias_text(c, t).or_else(|| packed_text(c, id as u32)),
                quant_text(t)
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("; ")
        );
    }
    crate::cmd::emit(&text);
    Ok(())
}

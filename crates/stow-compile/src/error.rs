//! Why a compile failed: [`CompileError`].

use crate::compare::Comparison;
use crate::contents::ContentsError;
use crate::pools::PoolsError;
use std::path::PathBuf;
use stow_bundle::BundleError;
use stow_onnx::OnnxError;
use stow_plan::PlanError;
use thiserror::Error;

/// Why [`compile`](crate::compile) or [`Compiled::write`](crate::Compiled::write)
/// failed. One variant per stage.
///
/// A variant that wraps a lower-level error says only where it happened
/// (`compiling model.onnx`) and returns the cause from
/// [`std::error::Error::source`]; print the whole chain (as `anyhow`'s
/// `{:#}` does) for the full message, e.g. `compiling model.onnx: cannot
/// read model.onnx: No such file or directory (os error 2)`.
#[derive(Debug, Error)]
pub enum CompileError {
    /// [`CompileOptions::align`](crate::CompileOptions::align) is zero or not
    /// a power of two. Checked before the model is read.
    #[error("alignment {align} is not a power of two")]
    BadAlignment {
        /// The alignment given.
        align: u64,
    },
    /// The frontend could not turn the model into tensors and operators:
    /// the file is missing or not ONNX, an operator is unsupported, an
    /// input shape or symbol is unknown or unset, external data is refused,
    /// tract failed (the cause says which).
    #[error("compiling {}", path.display())]
    Load {
        /// The model.
        path: PathBuf,
        /// What the frontend reported.
        source: OnnxError,
    },
    /// Sizing the kernels' scratch failed: a step's scratch overflows, or a
    /// tensor has an element type bundles cannot hold.
    #[error("compiling {}", path.display())]
    Scratch {
        /// The model.
        path: PathBuf,
        /// Which step or tensor.
        source: ContentsError,
    },
    /// The model's tensors need more than the capacity asked for
    /// ([`PlanOptions::capacity`](stow_plan::PlanOptions::capacity)) at
    /// one step, even with the closest stage run in bands of rows the
    /// compiler found (or the stages given).
    #[error(
        "compiling {}: the tensors live at step {step} (`{op}`) need {bound} bytes, {} more than the capacity of {capacity}{}{}",
        path.display(),
        bound - capacity,
        match stage {
            Some(stages) => format!(", even with {stages} run in bands of rows"),
            None => format!(
                " (no stage of the model can run in bands of rows there{})",
                why_no_stage.as_ref().map_or(String::new(), |w| format!(": {w}"))
            ),
        },
        over_budget.as_ref().map_or(String::new(), |o| format!("; {o}"))
    )]
    OverCapacity {
        /// The model.
        path: PathBuf,
        /// The capacity asked for.
        capacity: u64,
        /// The arena's lower bound.
        bound: u64,
        /// The step at which the most bytes are live.
        step: usize,
        /// Its operator.
        op: Box<str>,
        /// The stages run in bands, if any (`FROM:TO:ROWS`, comma
        /// separated).
        stage: Option<Box<str>>,
        /// Without stages, why none reaches the peak from the graph input.
        why_no_stage: Option<Box<str>>,
        /// Stages skipped for the budget of extra multiply-adds (boxed:
        /// the error stays small).
        over_budget: Option<Box<str>>,
    },
    /// One arena tensor alone is larger than
    /// [`CompileOptions::max_arena`](crate::CompileOptions::max_arena).
    #[error("compiling {}: tensor `{tensor}` needs {bytes} bytes, more than --max-arena {limit}; raise the limit if this is intended", path.display())]
    TensorOverMaxArena {
        /// The model.
        path: PathBuf,
        /// The tensor's name.
        tensor: String,
        /// Its size in bytes.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The pools or pins cannot be used: a bad pool name or count, an
    /// unbounded pool before the last, a pin naming an unknown pool or
    /// tensor, or a pinned tensor larger than its pool (named, with the
    /// shortfall).
    #[error("placing {} in pools", path.display())]
    Pools {
        /// The model.
        path: PathBuf,
        /// What is wrong.
        source: PoolsError,
    },
    /// The planner failed: the capacity is too small (the cause says by
    /// how much), the problem is invalid, or a strategy's plan failed the
    /// checker. Also raised by the strategy comparison.
    #[error("planning {}", path.display())]
    Plan {
        /// The model.
        path: PathBuf,
        /// What the planner reported.
        source: PlanError,
        /// The strategy comparison, when
        /// [`CompileOptions::compare`](crate::CompileOptions::compare) was
        /// set and it ran before the failure: which strategies would have
        /// fitted the capacity.
        comparison: Option<Vec<Comparison>>,
    },
    /// The planned arena is larger than
    /// [`CompileOptions::max_arena`](crate::CompileOptions::max_arena).
    #[error("planning {}: the arena needs {bytes} bytes, more than --max-arena {limit}; raise the limit if this is intended", path.display())]
    ArenaOverMaxArena {
        /// The model.
        path: PathBuf,
        /// The planned arena size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The plan could not be turned into bundle contents (a tensor without
    /// a planned offset or with an element type bundles cannot hold).
    #[error("bundling {}", path.display())]
    Contents {
        /// The model.
        path: PathBuf,
        /// Which tensor.
        source: ContentsError,
    },
    /// The bundle writer refused the contents (too many tensors or ops, a
    /// weight of the wrong size, or its own validation failed).
    #[error("encoding the bundle")]
    Encode {
        /// What the writer reported.
        source: BundleError,
    },
    /// Writing a file failed: its directory does not exist, or creating,
    /// writing or renaming the temporary file failed. Nothing is left at
    /// `path` (nor a temporary file beside it).
    #[error("writing {}", path.display())]
    Write {
        /// The file that was to be written.
        path: PathBuf,
        /// What the writer reported.
        source: BundleError,
    },
}

//! The Stowage compile pipeline as a library: an ONNX model in, a
//! memory-planned bundle out. The `stow compile` command, the tests and the
//! language bindings all call [`compile`].
//!
//! ```no_run
//! use std::path::Path;
//! use stow_compile::{compile, CompileOptions};
//!
//! let options = CompileOptions {
//!     dims: vec![("N".to_string(), 1)],
//!     ..CompileOptions::default()
//! };
//! let compiled = compile(Path::new("model.onnx"), &options)?;
//! let report = compiled.report();
//! println!("arena {} bytes, lower bound {}", report.arena_bytes, report.lower_bound);
//! compiled.write(Path::new("model.stow"))?;
//! # Ok::<(), stow_compile::CompileError>(())
//! ```
//!
//! [`compile`] runs the stages in order — load and fix shapes
//! ([`stow_onnx`]), size kernel scratch ([`plan_scratch`]), check the
//! `max_arena` limit, plan ([`stow_plan`]; every plan passes the checker),
//! build the [`bundle_contents`] and encode them ([`stow_bundle`]; the
//! writer re-validates its output) — and returns a [`Compiled`]: the bundle
//! bytes, a [`Report`] of the numbers `stow compile` prints, the planning
//! problem and the plan. Nothing touches the disk until
//! [`Compiled::write`], which writes to a temporary file and renames it.
//!
//! Every failure is a [`CompileError`] variant naming the model and the
//! stage, with the cause as its [`source`](std::error::Error::source).
//! Untrusted models give errors, never panics (tract's own panics are
//! contained by the frontend).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod compare;
mod contents;
mod error;
mod options;
pub mod packing;
mod pipeline;
pub mod pools;
mod report;
mod stages;

pub use compare::{compare, Comparison, Outcome};
pub use contents::{
    bundle_contents, dtype_of, plan_scratch, ContentsError, PlannedModel, ScratchAboveBound,
    Weights,
};
pub use error::CompileError;
pub use options::{CompileOptions, DEFAULT_ALIGN, DEFAULT_MAX_ARENA, DEFAULT_THREADS};
pub use pipeline::{compile, Compiled};
pub use pools::{Pin, Placement, PoolReport, PoolSpec, PoolsError};
pub use report::{Report, TensorCounts};
/// A stage run in bands of rows ([`CompileOptions::stages`]).
pub use stow_onnx::PatchedStage;

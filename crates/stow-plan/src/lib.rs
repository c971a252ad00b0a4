//! Static memory planning: place buffers with known lifetimes (or explicit
//! conflicts) in one arena so that no two conflicting buffers share a byte.
//!
//! The crate knows nothing of ONNX or files. The interface is
//! [`plan`]`(&Problem, &PlanOptions) -> Result<Plan, PlanError>`, and every
//! [`Plan`] can be checked by [`check`], which shares no code with the
//! strategies.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod bound;
mod check;
mod problem;
mod strategy;

pub use bound::lower_bound;
pub use check::{check, Violation};
pub use problem::{Buffer, BufferId, ConflictModel, Interval, Problem, ProblemError};
pub use strategy::{plan, Plan, PlanError, PlanOptions, PlanStats, Strategy};

//! Static memory planning: place buffers with known lifetimes (or explicit
//! conflicts) in one arena, or in several memory pools, so that no two
//! conflicting buffers share a byte.
//!
//! The crate knows nothing of ONNX or files. The interface is
//! [`plan`]`(&Problem, &PlanOptions) -> Result<Plan, PlanError>`, and every
//! [`Plan`] can be checked by [`check`], which shares no code with the
//! strategies. [`plan`] runs the checker on every plan it returns.
//!
//! Strategies (see [`Strategy`]) follow published planning methods: no
//! reuse, greedy by size, greedy by breadth, an online first-fit pool, peak
//! suppression, a complete branch-and-bound search, and a portfolio
//! (`auto`, the default) that runs them under a time budget. The online
//! allocator is also usable on its own: [`FirstFitPool`].
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod bound;
mod check;
mod huge;
mod index;
mod pool_alloc;
mod problem;
mod strategy;
#[cfg(feature = "testing")]
pub mod testing;

pub use bound::{lower_bound, EXACT_CLIQUE_LIMIT};
pub use check::{check, Violation};
pub use pool_alloc::{Allocation, Block, FirstFitPool, PoolError};
pub use problem::{Buffer, BufferId, ConflictModel, Interval, Pool, PoolId, Problem, ProblemError};
pub use strategy::{plan, Plan, PlanError, PlanOptions, PlanStats, SearchOptions, Strategy, Trial};

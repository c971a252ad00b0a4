//! What the cut-rectangle tests share: the small profile and a layout's
//! offsets made a `Plan` for the checker.

use stow_plan::testing::CutProfile;
use stow_plan::{lower_bound, Plan, PoolId, Problem, Strategy};

/// Small pieces on a 32 × 32 grid: 20–35 buffers, some of which take the
/// search thousands of nodes. (Perfect packings of 60–90 such pieces are
/// past what the search solves in 200,000 nodes for about half the seeds:
/// see BENCHMARKS.md.)
pub const SMALL: CutProfile = CutProfile {
    size: (4, 16),
    life: (3, 16),
    merge: 40,
    quantum: 1,
    drop: 0,
};

/// `offsets` as a one-pool plan of `problem`, for `stow_plan::check`.
pub fn as_plan(problem: &Problem, offsets: Vec<u64>) -> Plan {
    let arena = problem
        .buffers
        .iter()
        .zip(&offsets)
        .map(|(b, o)| o + b.size)
        .max()
        .unwrap_or(0);
    Plan {
        offsets,
        arena_bytes: arena,
        lower_bound: lower_bound(problem),
        strategy: Strategy::Search,
        optimal: false,
        stats: Default::default(),
        pool: vec![PoolId(0); problem.buffers.len()],
        pool_bytes: vec![arena],
    }
}

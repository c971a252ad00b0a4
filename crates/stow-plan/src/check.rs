//! The independent plan checker.
//!
//! Model: a plan is valid when every buffer's offset is a multiple of its
//! alignment, a pinned buffer sits at its pin, every byte range
//! `[offset, offset + size)` ends within the plan's arena size, and no two
//! conflicting buffers with non-zero size share a byte. This module uses no
//! strategy code: it sorts by offset and sweeps, so it is O(n log n + k) for
//! k reported pairs under lifetimes.

use crate::problem::{BufferId, ConflictModel, Problem};
use crate::strategy::Plan;
use std::fmt;

/// One way a plan breaks the rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// The plan has a different number of offsets than the problem has buffers.
    WrongLength {
        /// Buffers in the problem.
        expected: usize,
        /// Offsets in the plan.
        found: usize,
    },
    /// An offset is not a multiple of the buffer's alignment.
    Misaligned {
        /// The buffer.
        id: BufferId,
        /// Its offset.
        offset: u64,
        /// Its alignment.
        align: u64,
    },
    /// A pinned buffer was moved.
    Unpinned {
        /// The buffer.
        id: BufferId,
        /// Where it had to be.
        pinned: u64,
        /// Where it is.
        offset: u64,
    },
    /// A buffer ends past the plan's arena size (or its end overflows).
    OutOfArena {
        /// The buffer.
        id: BufferId,
        /// Its end offset (saturated).
        end: u64,
        /// The arena size claimed by the plan.
        arena: u64,
    },
    /// Two conflicting buffers share bytes.
    Overlap {
        /// The first buffer.
        a: BufferId,
        /// The second buffer.
        b: BufferId,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::WrongLength { expected, found } => {
                write!(f, "plan has {found} offsets for {expected} buffers")
            }
            Violation::Misaligned { id, offset, align } => {
                write!(
                    f,
                    "buffer {}: offset {offset} is not a multiple of {align}",
                    id.0
                )
            }
            Violation::Unpinned { id, pinned, offset } => {
                write!(
                    f,
                    "buffer {}: pinned at {pinned} but placed at {offset}",
                    id.0
                )
            }
            Violation::OutOfArena { id, end, arena } => {
                write!(
                    f,
                    "buffer {}: ends at {end}, past the arena of {arena} bytes",
                    id.0
                )
            }
            Violation::Overlap { a, b } => {
                write!(f, "buffers {} and {} conflict but share bytes", a.0, b.0)
            }
        }
    }
}

/// Checks `plan` against `problem`, reporting every violation found.
pub fn check(problem: &Problem, plan: &Plan) -> Result<(), Vec<Violation>> {
    let n = problem.buffers.len();
    if plan.offsets.len() != n {
        return Err(vec![Violation::WrongLength {
            expected: n,
            found: plan.offsets.len(),
        }]);
    }
    let mut violations = Vec::new();
    for (i, (b, &offset)) in problem.buffers.iter().zip(&plan.offsets).enumerate() {
        let id = BufferId(i as u32);
        if b.align == 0 || offset % b.align != 0 {
            violations.push(Violation::Misaligned {
                id,
                offset,
                align: b.align,
            });
        }
        if let Some(pinned) = b.pinned_offset {
            if pinned != offset {
                violations.push(Violation::Unpinned { id, pinned, offset });
            }
        }
        match offset.checked_add(b.size) {
            Some(end) if end <= plan.arena_bytes => {}
            end => violations.push(Violation::OutOfArena {
                id,
                end: end.unwrap_or(u64::MAX),
                arena: plan.arena_bytes,
            }),
        }
    }
    // Sweep over address: buffers sorted by offset; a buffer can only
    // overlap those whose byte range is still open when it begins.
    let mut by_offset: Vec<usize> = (0..n).filter(|&i| problem.buffers[i].size > 0).collect();
    by_offset.sort_unstable_by_key(|&i| plan.offsets[i]);
    let mut open: Vec<usize> = Vec::new();
    for &i in &by_offset {
        let start = plan.offsets[i];
        open.retain(|&j| plan.offsets[j].saturating_add(problem.buffers[j].size) > start);
        for &j in &open {
            let conflict = match &problem.conflicts {
                ConflictModel::Lifetimes => problem.buffers[i]
                    .lifetime
                    .overlaps(&problem.buffers[j].lifetime),
                ConflictModel::Explicit(adj) => adj[i].contains(&BufferId(j as u32)),
            };
            if conflict {
                let (a, b) = (i.min(j), i.max(j));
                violations.push(Violation::Overlap {
                    a: BufferId(a as u32),
                    b: BufferId(b as u32),
                });
            }
        }
        open.push(i);
    }
    if violations.is_empty() {
        Ok(())
    } else {
        Err(violations)
    }
}

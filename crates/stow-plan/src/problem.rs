use thiserror::Error;

/// Dense buffer id: the index of the buffer in [`Problem::buffers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BufferId(pub u32);

impl BufferId {
    /// The id as an index into [`Problem::buffers`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A half-open range of execution steps `[start, end)`.
///
/// A buffer written at step `w` and last read at step `r` lives on
/// `[w, r + 1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Interval {
    /// First step at which the buffer holds data.
    pub start: u32,
    /// First step at which the buffer is no longer needed (exclusive).
    pub end: u32,
}

impl Interval {
    /// Builds `[start, end)`.
    pub fn new(start: u32, end: u32) -> Self {
        Interval { start, end }
    }

    /// True when the two ranges share at least one step (an empty range
    /// shares none).
    pub fn overlaps(&self, other: &Interval) -> bool {
        self.start < self.end
            && other.start < other.end
            && self.start < other.end
            && other.start < self.end
    }
}

/// Dense pool id: the index of the pool in [`Problem::pools`], which is
/// also its preference rank (pool 0 is tried first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PoolId(pub u32);

impl PoolId {
    /// The id as an index into [`Problem::pools`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A memory with its own address space, e.g. a small fast on-chip memory
/// or a large slow one. Offsets of buffers placed in a pool are relative to
/// the pool's start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pool {
    /// Name used in reports and errors.
    pub name: String,
    /// Bytes available; `None` for a pool that may grow without limit.
    pub capacity: Option<u64>,
}

impl Pool {
    /// A pool of `capacity` bytes.
    pub fn new(name: impl Into<String>, capacity: u64) -> Self {
        Pool {
            name: name.into(),
            capacity: Some(capacity),
        }
    }

    /// A pool without a capacity limit.
    pub fn unbounded(name: impl Into<String>) -> Self {
        Pool {
            name: name.into(),
            capacity: None,
        }
    }
}

/// One contiguous byte range to place in the arena.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buffer {
    /// Size in bytes (not rounded; the planner keeps offsets aligned and the
    /// checker compares exact byte ranges).
    pub size: u64,
    /// Required alignment of the offset in bytes, a power of two (1 for none).
    pub align: u64,
    /// Steps during which the buffer is live. Used when the problem's
    /// [`ConflictModel`] is [`ConflictModel::Lifetimes`].
    pub lifetime: Interval,
    /// A fixed offset the planner must keep (relative to the buffer's pool
    /// when the problem has pools).
    pub pinned_offset: Option<u64>,
    /// The pool the buffer must live in (M2's accelerator tensors); `None`
    /// lets the planner choose the first pool in preference order where it
    /// fits. Ignored when the problem declares no pools.
    pub pool: Option<PoolId>,
}

impl Buffer {
    /// A buffer of `size` bytes live on `[start, end)` with alignment `align`.
    pub fn new(size: u64, start: u32, end: u32, align: u64) -> Self {
        Buffer {
            size,
            align,
            lifetime: Interval::new(start, end),
            pinned_offset: None,
            pool: None,
        }
    }
}

/// Which pairs of buffers may not share bytes.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum ConflictModel {
    /// Buffers conflict when their lifetimes overlap.
    #[default]
    Lifetimes,
    /// Buffers conflict when listed here: `adjacency[i]` holds the ids that
    /// conflict with buffer `i`. The relation must be symmetric.
    Explicit(Vec<Vec<BufferId>>),
}

/// A planning problem: buffers, the rule that says which of them conflict,
/// and optionally the memory pools they go into.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Problem {
    /// The buffers; a buffer's id is its index here.
    pub buffers: Vec<Buffer>,
    /// How conflicts are decided.
    pub conflicts: ConflictModel,
    /// Memory pools in preference order. Empty: one arena whose capacity
    /// is [`crate::PlanOptions::capacity`].
    pub pools: Vec<Pool>,
}

/// A problem that breaks one of the documented preconditions.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ProblemError {
    /// An alignment was zero or not a power of two.
    #[error("buffer {id}: alignment {align} is not a power of two")]
    BadAlignment {
        /// The buffer.
        id: u32,
        /// Its alignment.
        align: u64,
    },
    /// A lifetime ended before it started.
    #[error("buffer {id}: lifetime [{start}, {end}) ends before it starts")]
    BadLifetime {
        /// The buffer.
        id: u32,
        /// Start step.
        start: u32,
        /// End step.
        end: u32,
    },
    /// A pinned offset does not respect the buffer's alignment.
    #[error("buffer {id}: pinned offset {offset} is not a multiple of its alignment {align}")]
    MisalignedPin {
        /// The buffer.
        id: u32,
        /// The pinned offset.
        offset: u64,
        /// Its alignment.
        align: u64,
    },
    /// The explicit conflict lists do not have one entry per buffer, name an
    /// unknown buffer, or are not symmetric.
    #[error("conflict list: {0}")]
    BadConflicts(String),
    /// More buffers than ids can name.
    #[error("{0} buffers is more than a problem can hold")]
    TooManyBuffers(usize),
    /// An end offset would not fit in 64 bits.
    #[error("buffer {id}: offset plus size overflows")]
    Overflow {
        /// The buffer.
        id: u32,
    },
    /// A buffer names a pool the problem does not declare.
    #[error("buffer {id}: pool {pool} does not exist ({pools} pools declared)")]
    UnknownPool {
        /// The buffer.
        id: u32,
        /// The pool it names.
        pool: u32,
        /// How many pools the problem declares.
        pools: usize,
    },
}

impl Problem {
    /// A problem over `buffers` with the given conflict rule.
    pub fn new(buffers: Vec<Buffer>, conflicts: ConflictModel) -> Self {
        Problem {
            buffers,
            conflicts,
            pools: Vec::new(),
        }
    }

    /// The same problem with `pools` (in preference order).
    pub fn with_pools(mut self, pools: Vec<Pool>) -> Self {
        self.pools = pools;
        self
    }

    /// True when buffer `id` can conflict with nothing: it has no bytes, or
    /// (under lifetimes) it is never live.
    pub(crate) fn is_trivial(&self, id: usize) -> bool {
        let b = &self.buffers[id];
        b.size == 0
            || (matches!(self.conflicts, ConflictModel::Lifetimes)
                && b.lifetime.start >= b.lifetime.end)
    }

    /// Checks the preconditions every strategy relies on.
    pub fn validate(&self) -> Result<(), ProblemError> {
        if u32::try_from(self.buffers.len()).is_err() {
            return Err(ProblemError::TooManyBuffers(self.buffers.len()));
        }
        for (i, b) in self.buffers.iter().enumerate() {
            let id = i as u32;
            if b.align == 0 || !b.align.is_power_of_two() {
                return Err(ProblemError::BadAlignment { id, align: b.align });
            }
            if b.lifetime.end < b.lifetime.start {
                return Err(ProblemError::BadLifetime {
                    id,
                    start: b.lifetime.start,
                    end: b.lifetime.end,
                });
            }
            if let Some(offset) = b.pinned_offset {
                if offset % b.align != 0 {
                    return Err(ProblemError::MisalignedPin {
                        id,
                        offset,
                        align: b.align,
                    });
                }
                if offset.checked_add(b.size).is_none() {
                    return Err(ProblemError::Overflow { id });
                }
            }
            if let Some(pool) = b.pool {
                if !self.pools.is_empty() && pool.index() >= self.pools.len() {
                    return Err(ProblemError::UnknownPool {
                        id,
                        pool: pool.0,
                        pools: self.pools.len(),
                    });
                }
            }
        }
        if let ConflictModel::Explicit(adj) = &self.conflicts {
            if adj.len() != self.buffers.len() {
                return Err(ProblemError::BadConflicts(format!(
                    "{} lists for {} buffers",
                    adj.len(),
                    self.buffers.len()
                )));
            }
            let sorted: Vec<Vec<BufferId>> = adj
                .iter()
                .map(|l| {
                    let mut l = l.clone();
                    l.sort_unstable();
                    l
                })
                .collect();
            for (i, list) in adj.iter().enumerate() {
                for j in list {
                    let Some(back) = sorted.get(j.index()) else {
                        return Err(ProblemError::BadConflicts(format!(
                            "buffer {i} names unknown buffer {}",
                            j.0
                        )));
                    };
                    if j.index() == i {
                        return Err(ProblemError::BadConflicts(format!(
                            "buffer {i} conflicts with itself"
                        )));
                    }
                    if back.binary_search(&BufferId(i as u32)).is_err() {
                        return Err(ProblemError::BadConflicts(format!(
                            "buffer {i} conflicts with {} but not the other way round",
                            j.0
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// True when buffers `a` and `b` may not share bytes.
    pub fn conflict(&self, a: BufferId, b: BufferId) -> bool {
        if a == b {
            return false;
        }
        match &self.conflicts {
            ConflictModel::Lifetimes => self.buffers[a.index()]
                .lifetime
                .overlaps(&self.buffers[b.index()].lifetime),
            ConflictModel::Explicit(adj) => adj[a.index()].contains(&b),
        }
    }

    /// For every buffer, the buffers it conflicts with (sorted by id).
    pub fn conflict_lists(&self) -> Vec<Vec<BufferId>> {
        match &self.conflicts {
            ConflictModel::Explicit(adj) => {
                let mut adj = adj.clone();
                for list in &mut adj {
                    list.sort_unstable();
                    list.dedup();
                }
                adj
            }
            ConflictModel::Lifetimes => {
                let n = self.buffers.len();
                let mut order: Vec<usize> = (0..n).collect();
                order.sort_by_key(|&i| self.buffers[i].lifetime.start);
                let mut adj = vec![Vec::new(); n];
                // Sweep by start step; only buffers that started earlier and
                // have not ended can overlap the one that starts now.
                let mut active: Vec<usize> = Vec::new();
                for &i in &order {
                    let li = self.buffers[i].lifetime;
                    if li.start == li.end {
                        continue;
                    }
                    active.retain(|&j| self.buffers[j].lifetime.end > li.start);
                    for &j in &active {
                        adj[i].push(BufferId(j as u32));
                        adj[j].push(BufferId(i as u32));
                    }
                    active.push(i);
                }
                for list in &mut adj {
                    list.sort_unstable();
                }
                adj
            }
        }
    }
}

impl Problem {
    /// The problem restricted to `ids` (in that order), without pools:
    /// buffer `k` of the result is buffer `ids[k]` of `self`.
    pub fn subproblem(&self, ids: &[usize]) -> Problem {
        let buffers = ids
            .iter()
            .map(|&i| Buffer {
                pool: None,
                ..self.buffers[i].clone()
            })
            .collect();
        let conflicts = match &self.conflicts {
            ConflictModel::Lifetimes => ConflictModel::Lifetimes,
            ConflictModel::Explicit(adj) => {
                let mut local = vec![u32::MAX; self.buffers.len()];
                for (k, &i) in ids.iter().enumerate() {
                    local[i] = k as u32;
                }
                ConflictModel::Explicit(
                    ids.iter()
                        .map(|&i| {
                            adj[i]
                                .iter()
                                .filter(|j| local[j.index()] != u32::MAX)
                                .map(|j| BufferId(local[j.index()]))
                                .collect()
                        })
                        .collect(),
                )
            }
        };
        Problem::new(buffers, conflicts)
    }
}

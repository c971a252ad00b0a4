//! Several memories: which buffers go to the fast pools, and what each
//! pool serves.
//!
//! The planner already places buffers across pools in preference order
//! (pinned ones first, then the others in an admission order, each pool
//! planned and checked like one arena). This module decides that order:
//! by default the buffers whose bytes are touched most per byte stored
//! come first ([`Placement::Gain`]), so a small fast pool holds the
//! tensors that save the most slow traffic; [`Placement::FirstUse`] is
//! the first-come, first-served baseline; [`Placement::Threshold`] is the
//! layer-group threshold of method M3: the tensors of a step whose working
//! set exceeds a threshold go to the slowest pool, the rest share the
//! faster ones.

use stow_onnx::ModelGraph;
use stow_plan::{Plan, Pool, PoolId, Problem};

/// Most pools a compile may declare (the bundle format's bound).
pub const MAX_POOLS: usize = stow_bundle::format::MAX_POOLS as usize;

/// One memory for the arena (`stow compile --pool NAME=BYTES`, or `--pool
/// NAME` for an unbounded one), listed fastest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSpec {
    /// Name recorded in the bundle: 1 to 16 bytes without NUL, unique.
    pub name: String,
    /// Bytes available; `None` (allowed for the last pool only) for a
    /// memory large enough for whatever is left.
    pub capacity: Option<u64>,
}

/// A tensor, or every arena tensor an operator reads or writes, that must
/// live in a given pool (`stow compile --pin NAME=POOL`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    /// A tensor name, or else an operator name.
    pub target: String,
    /// The pool's name.
    pub pool: String,
}

/// How buffers that are not pinned are offered to the bounded pools.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// Most bytes read and written over the buffer's lifetime per byte
    /// stored first (ties: more traffic, then earlier first use). A greedy
    /// order by density can leave a pool fragmented, so the compiler also
    /// plans the first-use and largest-first orders and keeps the plan
    /// whose faster pools serve the most traffic.
    #[default]
    Gain,
    /// In order of first use: the baseline of a runtime that puts each
    /// tensor into fast memory when it is created, if it still fits.
    FirstUse,
    /// The layer-group threshold of method M3 (`--placement
    /// threshold=BYTES`): every arena tensor of a step whose working set —
    /// the bytes of the distinct buffers it reads, writes and uses as
    /// scratch — exceeds the threshold is placed in the last (slowest)
    /// pool; the other buffers are offered to the faster pools in order of
    /// first use, and those that do not fit go to the last pool too.
    /// `None` takes the capacity of the fastest pool as the threshold
    /// (`--placement threshold`): a step that could not hold all its
    /// operands in fast memory keeps none of them there. Pins win over the
    /// threshold.
    Threshold(Option<u64>),
}

impl Placement {
    /// The policy's name (`gain`, `first-use`, `threshold`).
    pub fn name(self) -> &'static str {
        match self {
            Placement::Gain => "gain",
            Placement::FirstUse => "first-use",
            Placement::Threshold(_) => "threshold",
        }
    }

    /// Parses what `--placement` takes: `gain`, `first-use`, `threshold`
    /// or `threshold=BYTES`.
    pub fn parse(s: &str) -> Result<Placement, String> {
        match s {
            "gain" => Ok(Placement::Gain),
            "first-use" => Ok(Placement::FirstUse),
            "threshold" => Ok(Placement::Threshold(None)),
            _ => match s.strip_prefix("threshold=") {
                Some(bytes) => bytes
                    .parse::<u64>()
                    .map(|b| Placement::Threshold(Some(b)))
                    .map_err(|_| format!("`{bytes}` in `{s}` is not a number of bytes")),
                None => Err(format!(
                    "`{s}` is not a placement (gain, first-use, threshold, threshold=BYTES)"
                )),
            },
        }
    }
}

impl std::fmt::Display for Placement {
    /// The form [`Placement::parse`] reads back (`threshold=65536`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Placement::Threshold(Some(bytes)) => write!(f, "threshold={bytes}"),
            other => f.write_str(other.name()),
        }
    }
}

/// What one pool holds and serves, in [`Report::pools`](crate::Report::pools).
#[derive(Clone, Debug, PartialEq)]
pub struct PoolReport {
    /// The pool's name.
    pub name: String,
    /// Its capacity (`None`: unbounded).
    pub capacity: Option<u64>,
    /// Bytes the plan uses (the pool's buffer size in the bundle).
    pub bytes: u64,
    /// Largest total of the pool's buffers alive at one step.
    pub peak_live: u64,
    /// Bytes read and written by the steps in this pool.
    pub traffic: u64,
    /// Buffers placed here.
    pub buffers: usize,
}

impl PoolReport {
    /// How full the pool is at its peak: `peak_live / capacity` (of the
    /// planned size for an unbounded pool); 0 for an empty one.
    pub fn fill(&self) -> f64 {
        let of = self.capacity.unwrap_or(self.bytes);
        if of == 0 {
            0.0
        } else {
            self.peak_live as f64 / of as f64
        }
    }
}

/// Bytes each buffer's tensors are read and written by the steps: every
/// operand of a step counts its whole size once (a kernel that reads an
/// input twice still moves it through the cache once, to first order).
pub fn traffic(graph: &ModelGraph, buffer_of: &[Option<usize>], buffers: usize) -> Vec<u64> {
    let mut traffic = vec![0u64; buffers];
    for op in &graph.ops {
        for &t in op.inputs.iter().chain(&op.outputs).chain(&op.scratch) {
            if let (Some(Some(b)), Some(info)) = (buffer_of.get(t), graph.tensors.get(t)) {
                if let Some(slot) = traffic.get_mut(*b) {
                    *slot = slot.saturating_add(info.bytes);
                }
            }
        }
    }
    traffic
}

/// The admission order of `placement` over the problem's buffers.
pub fn admission(problem: &Problem, traffic: &[u64], placement: Placement) -> Vec<u32> {
    let mut order: Vec<usize> = (0..problem.buffers.len()).collect();
    match placement {
        Placement::Gain => order.sort_by(|&a, &b| {
            let (ba, bb) = (&problem.buffers[a], &problem.buffers[b]);
            let (ta, tb) = (traffic[a] as u128, traffic[b] as u128);
            // ta / size_a > tb / size_b, compared without division; a
            // buffer of no bytes costs nothing and goes first.
            (tb * u128::from(ba.size.max(1)))
                .cmp(&(ta * u128::from(bb.size.max(1))))
                .then(tb.cmp(&ta))
                .then(ba.lifetime.start.cmp(&bb.lifetime.start))
                .then(a.cmp(&b))
        }),
        Placement::FirstUse | Placement::Threshold(_) => {
            order.sort_by_key(|&i| (problem.buffers[i].lifetime.start, i));
        }
    }
    order.into_iter().map(|i| i as u32).collect()
}

/// The admission orders to plan for `placement`, the preferred one first:
/// for [`Placement::Gain`] the density order, then first use, then
/// largest first; for [`Placement::FirstUse`] and
/// [`Placement::Threshold`] first use alone.
pub fn admission_orders(problem: &Problem, traffic: &[u64], placement: Placement) -> Vec<Vec<u32>> {
    match placement {
        Placement::FirstUse | Placement::Threshold(_) => {
            vec![admission(problem, traffic, Placement::FirstUse)]
        }
        Placement::Gain => {
            let mut largest: Vec<u32> = (0..problem.buffers.len() as u32).collect();
            largest.sort_by_key(|&i| {
                let b = &problem.buffers[i as usize];
                (std::cmp::Reverse(b.size), b.lifetime.start, i)
            });
            vec![
                admission(problem, traffic, Placement::Gain),
                admission(problem, traffic, Placement::FirstUse),
                largest,
            ]
        }
    }
}

/// Traffic served by each pool under `plan`, fastest first (compared
/// lexicographically: more from the fastest pool is better).
pub fn served(problem: &Problem, plan: &Plan, traffic: &[u64]) -> Vec<u64> {
    let pools = problem.pools.len().max(1);
    let mut served = vec![0u64; pools];
    for (i, pool) in plan.pool.iter().enumerate() {
        if let Some(slot) = served.get_mut(pool.index()) {
            *slot = slot.saturating_add(traffic.get(i).copied().unwrap_or(0));
        }
    }
    served
}

/// Why the pools or pins given to a compile cannot be used.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum PoolsError {
    /// More pools than a bundle holds.
    #[error("{count} pools given, at most {MAX_POOLS} allowed")]
    TooMany {
        /// Pools given.
        count: usize,
    },
    /// A pool name that is empty, longer than 16 bytes, holds a NUL or
    /// repeats another.
    #[error("pool name `{name}` must be 1 to 16 bytes, without NUL, and unique")]
    BadName {
        /// The name.
        name: String,
    },
    /// An unbounded pool that is not the last one: the pools after it
    /// could never receive anything.
    #[error("pool `{name}` has no size but is not the last pool; only the last may be unbounded")]
    UnboundedNotLast {
        /// The pool.
        name: String,
    },
    /// A pin names a pool that was not declared.
    #[error("--pin {target}={pool}: there is no pool `{pool}` (pools: {known})")]
    UnknownPool {
        /// The pin's target.
        target: String,
        /// The pool it names.
        pool: String,
        /// The declared pools, comma-separated.
        known: String,
    },
    /// A pin names neither a tensor nor an operator with arena tensors.
    #[error("--pin {target}={pool}: no tensor or operator of the model is called `{target}`")]
    UnknownTarget {
        /// The pin's target.
        target: String,
        /// The pool.
        pool: String,
    },
    /// Two pins put one tensor's bytes into two pools (directly, or
    /// through an operator or an alias sharing its bytes).
    #[error("tensor `{tensor}` is pinned to both `{first}` and `{second}`")]
    Conflict {
        /// The tensor.
        tensor: String,
        /// The first pool.
        first: String,
        /// The second pool.
        second: String,
    },
    /// A pinned tensor alone is larger than its pool.
    #[error("tensor `{tensor}` ({bytes} bytes) is pinned to pool `{pool}` of {capacity} bytes: short by {short} bytes")]
    PinnedTooBig {
        /// The tensor (the largest pinned to that pool).
        tensor: String,
        /// The pool.
        pool: String,
        /// The bytes the tensor's buffer needs.
        bytes: u64,
        /// The pool's capacity.
        capacity: u64,
        /// `bytes - capacity`.
        short: u64,
    },
}

/// Checks the pool list: count, names, only the last unbounded.
pub fn check_pools(pools: &[PoolSpec]) -> Result<(), PoolsError> {
    if pools.len() > MAX_POOLS {
        return Err(PoolsError::TooMany { count: pools.len() });
    }
    for (i, p) in pools.iter().enumerate() {
        let bad_name = p.name.is_empty()
            || p.name.len() > stow_bundle::format::POOL_NAME_LEN
            || p.name.contains('\0')
            || pools[..i].iter().any(|q| q.name == p.name);
        if bad_name {
            return Err(PoolsError::BadName {
                name: p.name.clone(),
            });
        }
        if p.capacity.is_none() && i + 1 != pools.len() {
            return Err(PoolsError::UnboundedNotLast {
                name: p.name.clone(),
            });
        }
    }
    Ok(())
}

/// `problem` with the pools declared and the pins applied to its buffers.
/// A pinned buffer larger than its pool's capacity is refused here, naming
/// its tensor, so that the error says which tensor does not fit.
pub fn apply(
    graph: &ModelGraph,
    buffer_of: &[Option<usize>],
    problem: &Problem,
    pools: &[PoolSpec],
    pins: &[Pin],
) -> Result<Problem, PoolsError> {
    check_pools(pools)?;
    let mut pinned: Vec<Option<(usize, usize)>> = vec![None; problem.buffers.len()];
    for pin in pins {
        let Some(pool) = pools.iter().position(|p| p.name == pin.pool) else {
            return Err(PoolsError::UnknownPool {
                target: pin.target.clone(),
                pool: pin.pool.clone(),
                known: pools
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        let mut tensors: Vec<usize> = graph
            .tensors
            .iter()
            .enumerate()
            .filter(|(_, t)| t.name == pin.target && t.role.in_arena())
            .map(|(i, _)| i)
            .collect();
        if tensors.is_empty() {
            for op in graph.ops.iter().filter(|op| op.name == pin.target) {
                tensors.extend(op.inputs.iter().chain(&op.outputs).chain(&op.scratch));
            }
        }
        let mut any = false;
        for t in tensors {
            let Some(Some(b)) = buffer_of.get(t) else {
                continue;
            };
            any = true;
            match pinned[*b] {
                Some((other, _)) if other != pool => {
                    return Err(PoolsError::Conflict {
                        tensor: graph.tensors[t].name.clone(),
                        first: pools[other].name.clone(),
                        second: pin.pool.clone(),
                    })
                }
                _ => pinned[*b] = Some((pool, t)),
            }
        }
        if !any {
            return Err(PoolsError::UnknownTarget {
                target: pin.target.clone(),
                pool: pin.pool.clone(),
            });
        }
    }
    let mut out = problem.clone();
    for (b, pin) in pinned.iter().enumerate() {
        let Some((pool, tensor)) = *pin else {
            continue;
        };
        let bytes = out.buffers[b].size;
        if let Some(capacity) = pools[pool].capacity.filter(|&c| bytes > c) {
            return Err(PoolsError::PinnedTooBig {
                tensor: graph.tensors[tensor].name.clone(),
                pool: pools[pool].name.clone(),
                bytes,
                capacity,
                short: bytes - capacity,
            });
        }
        out.buffers[b].pool = Some(PoolId(pool as u32));
    }
    let declared = pools
        .iter()
        .map(|p| match p.capacity {
            Some(c) => Pool::new(p.name.clone(), c),
            None => Pool::unbounded(p.name.clone()),
        })
        .collect();
    Ok(out.with_pools(declared))
}

/// The working set of each step: the bytes of the distinct arena buffers
/// it reads, writes or uses as scratch (a buffer two operands share, by
/// an alias, counts once).
pub fn working_sets(
    graph: &ModelGraph,
    buffer_of: &[Option<usize>],
    problem: &Problem,
) -> Vec<u64> {
    graph
        .ops
        .iter()
        .map(|op| {
            let mut seen: Vec<usize> = op
                .inputs
                .iter()
                .chain(&op.outputs)
                .chain(&op.scratch)
                .filter_map(|&t| buffer_of.get(t).copied().flatten())
                .filter(|&b| b < problem.buffers.len())
                .collect();
            seen.sort_unstable();
            seen.dedup();
            seen.iter()
                .map(|&b| problem.buffers[b].size)
                .fold(0u64, u64::saturating_add)
        })
        .collect()
}

/// [`Placement::Threshold`] applied to a problem whose pools are declared
/// (and pins applied, [`apply`]): every buffer not pinned yet that is an
/// operand of a step whose working set exceeds `threshold` (`None`: the
/// first pool's capacity) is pinned to the last pool. Returns the problem
/// and how many buffers were sent there.
pub fn apply_threshold(
    graph: &ModelGraph,
    buffer_of: &[Option<usize>],
    problem: Problem,
    pools: &[PoolSpec],
    threshold: Option<u64>,
) -> (Problem, usize) {
    let Some(last) = pools.len().checked_sub(1) else {
        return (problem, 0);
    };
    let threshold = threshold
        .or_else(|| pools.first().and_then(|p| p.capacity))
        .unwrap_or(u64::MAX);
    let sets = working_sets(graph, buffer_of, &problem);
    let mut out = problem;
    let mut sent = 0;
    for (op, &set) in graph.ops.iter().zip(&sets) {
        if set <= threshold {
            continue;
        }
        for &t in op.inputs.iter().chain(&op.outputs).chain(&op.scratch) {
            let Some(Some(b)) = buffer_of.get(t) else {
                continue;
            };
            if let Some(buffer) = out.buffers.get_mut(*b).filter(|b| b.pool.is_none()) {
                buffer.pool = Some(PoolId(last as u32));
                sent += 1;
            }
        }
    }
    (out, sent)
}

/// What each pool holds and serves under `plan`.
pub fn report(
    problem: &Problem,
    plan: &Plan,
    pools: &[PoolSpec],
    traffic: &[u64],
) -> Vec<PoolReport> {
    pools
        .iter()
        .enumerate()
        .map(|(p, spec)| {
            let members: Vec<usize> = (0..problem.buffers.len())
                .filter(|&i| plan.pool.get(i).map(|id| id.index()) == Some(p))
                .collect();
            let served = members
                .iter()
                .map(|&i| traffic.get(i).copied().unwrap_or(0))
                .fold(0u64, u64::saturating_add);
            // The pool's own lower bound is the most its buffers need at
            // one step (lifetimes or explicit conflicts alike).
            let peak_live = stow_plan::lower_bound(&problem.subproblem(&members));
            PoolReport {
                name: spec.name.clone(),
                capacity: spec.capacity,
                bytes: plan.pool_bytes.get(p).copied().unwrap_or(0),
                peak_live,
                traffic: served,
                buffers: members.len(),
            }
        })
        .collect()
}

//! Running a bundle: [`Session`] prepares a kernel for every operator,
//! allocates the arena once (or takes a caller's buffer), and runs the steps in order with every
//! activation at its planned offset and every weight read from the
//! mapping.

use crate::arena::{Arena, ArenaError};
use crate::kernels::{self, Failure, Operand, Step, Views};
use crate::lookup::{Element, LookupError, TensorKey};
use crate::pool::{Pool, Slot};
use crate::{shown, Bundle, BundlePath};
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use alloc::{format, vec};
use core::cell::Cell;
use core::sync::atomic::AtomicUsize;
use thiserror::Error;

/// An operator the runtime cannot run, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsupportedOp {
    /// Its step.
    pub step: usize,
    /// Its name.
    pub name: String,
    /// Its type.
    pub op_type: String,
    /// Why.
    pub reason: String,
}

/// Why a session could not be set up.
#[derive(Debug, Error)]
pub enum SessionError {
    /// The arena could not be allocated.
    #[error(transparent)]
    Arena(#[from] ArenaError),
    /// Operators without a kernel (every one is listed).
    #[error("{}: {} operator(s) cannot run:{}", shown(path), ops.len(), list(ops))]
    Unsupported {
        /// The bundle.
        path: BundlePath,
        /// Each operator and why.
        ops: Vec<UnsupportedOp>,
    },
    /// Zero threads were asked for.
    #[error("a session needs at least one thread")]
    NoThreads,
    /// A worker thread could not be started.
    #[cfg(feature = "std")]
    #[error("cannot start a worker thread")]
    Spawn(#[source] std::io::Error),
    /// More than one thread was asked for in a build without `std`, which
    /// has no threads.
    #[cfg(not(feature = "std"))]
    #[error("{threads} threads asked for, but this build has none (feature `std` is off): use 1")]
    NoThreadSupport {
        /// Threads asked for.
        threads: usize,
    },
    /// An input was given with the wrong size or type.
    #[error(transparent)]
    Lookup(#[from] LookupError),
    /// An input was given with the wrong number of elements.
    #[error("input `{name}` takes {want} elements, {got} given")]
    InputSize {
        /// The input.
        name: String,
        /// Elements it holds.
        want: usize,
        /// Elements given.
        got: usize,
    },
    /// An input's bytes were given with the wrong length.
    #[error("input `{name}` takes {want} bytes, {got} given")]
    InputBytes {
        /// The input.
        name: String,
        /// Bytes it holds.
        want: u64,
        /// Bytes given.
        got: usize,
    },
}

/// The scratch tensor the compiler planned for a step, if usable: f32, in
/// the arena, room for `threads` shares of `floats` (a bundle planned for
/// other kernel block sizes may hold less: the session then allocates the
/// scratch itself). Returns its byte offset and the thread count.
fn planned_scratch(t: &Operand<'_>, floats: usize, threads: usize) -> Option<(usize, usize)> {
    match t.loc {
        kernels::Loc::Arena(offset)
            if t.dtype == stow_bundle::DType::F32 && t.len >= floats.saturating_mul(threads) =>
        {
            Some((offset, threads))
        }
        _ => None,
    }
}

fn list(ops: &[UnsupportedOp]) -> String {
    ops.iter()
        .map(|o| {
            format!(
                "\n  step {} `{}` ({}): {}",
                o.step, o.name, o.op_type, o.reason
            )
        })
        .collect()
}

/// Why a run stopped.
#[derive(Debug, Error)]
pub enum RunError {
    /// An index was out of range (a gather's, or a MaxPool index outside
    /// its plane).
    #[error("step {step} `{name}`: index {index} is out of range")]
    Index {
        /// The step.
        step: usize,
        /// The operator.
        name: String,
        /// The index.
        index: i64,
    },
    /// A kernel panicked (setup rules this out; reported, not propagated).
    #[error("step {step} `{name}`: a kernel panicked")]
    Panicked {
        /// The step.
        step: usize,
        /// The operator.
        name: String,
    },
    /// A tensor view did not fit (setup rules this out).
    #[error("step {step} `{name}`: tensor {tensor} does not fit the arena")]
    View {
        /// The step.
        step: usize,
        /// The operator.
        name: String,
        /// The tensor.
        tensor: u32,
    },
}

/// A bundle ready to run: prepared kernels, the arena, the scratch and
/// the worker threads.
pub struct Session<'b> {
    bundle: &'b Bundle,
    steps: Vec<Step<'b>>,
    arena: Arena<'b>,
    /// One region of `scratch_per` floats per thread.
    scratch: Vec<f32>,
    scratch_per: usize,
    pool: Pool,
    /// Where each memory pool starts in the kernels' address space.
    pool_bases: Vec<usize>,
}

/// The arena or the scratch as raw parts, so that each thread of a
/// parallel step can view it as cells.
#[derive(Clone, Copy)]
struct Shared<T> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: the pointer comes from a `&mut` borrow held for the whole run.
// Threads of one step view it at the same time only through
// `kernels::run_part`, whose shares write disjoint elements and read
// nothing another share writes (see `kernels::splits`), or, in a depthwise
// convolution over its own input, write what share 0 read only after an
// acquire load of the step's counter that share 0 stored with release
// after reading it (`kernels::depthwise_inplace`), so there is no data
// race; `Cell` is only ever accessed from the thread that made the view.
#[allow(unsafe_code)]
unsafe impl<T> Sync for Shared<T> {}

impl<T> Shared<T> {
    fn new(slice: &mut [T]) -> Shared<T> {
        Shared {
            ptr: slice.as_mut_ptr(),
            len: slice.len(),
        }
    }

    /// Elements `start..start + len` (clipped to the buffer) as cells.
    fn cells(&self, start: usize, len: usize) -> &[Cell<T>] {
        let start = start.min(self.len);
        let len = len.min(self.len - start);
        // SAFETY: in bounds of the buffer borrowed mutably for the run
        // (clipped above); `Cell<T>` has `T`'s layout; see the `Sync`
        // impl for why views on several threads do not race.
        #[allow(unsafe_code)]
        unsafe {
            core::slice::from_raw_parts(self.ptr.add(start).cast::<Cell<T>>(), len)
        }
    }
}

impl core::fmt::Debug for Session<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Session")
            .field("bundle", &self.bundle.path())
            .field("steps", &self.steps.len())
            .field("scratch_floats", &self.scratch.len())
            .finish()
    }
}

impl<'b> Session<'b> {
    /// Prepares every operator of `bundle` and allocates the arena. Fails
    /// with the list of every operator that has no kernel.
    pub fn new(bundle: &'b Bundle) -> Result<Session<'b>, SessionError> {
        Session::with_threads(bundle, 1)
    }

    /// [`Session::new`] with `threads` threads for the kernels (the
    /// caller's and `threads − 1` workers, started here).
    pub fn with_threads(bundle: &'b Bundle, threads: usize) -> Result<Session<'b>, SessionError> {
        Session::setup(bundle, threads, || Arena::new(bundle))
    }

    /// [`Session::with_threads`] with each memory pool in its own buffer
    /// (`buffers[p]` for pool `p`, fastest first; static memories on a
    /// device): each must be aligned to its pool's alignment and hold its
    /// bytes ([`Arena::in_buffers`]). A run allocates nothing.
    pub fn in_buffers(
        bundle: &'b Bundle,
        buffers: Vec<&'b mut [u8]>,
        threads: usize,
    ) -> Result<Session<'b>, SessionError> {
        Session::setup(bundle, threads, || Arena::in_buffers(bundle, buffers))
    }

    /// [`Session::with_threads`] with the arena in `buffer` instead of an
    /// allocation (static memory on a device): the buffer must start at a
    /// multiple of the bundle's `arena_align` and hold `arena_bytes`
    /// ([`Arena::in_buffer`]). Setup still allocates the prepared kernels,
    /// and kernel scratch the bundle did not plan into the arena (for more
    /// threads than it was compiled for); a run allocates nothing.
    pub fn in_buffer(
        bundle: &'b Bundle,
        buffer: &'b mut [u8],
        threads: usize,
    ) -> Result<Session<'b>, SessionError> {
        Session::setup(bundle, threads, || Arena::in_buffer(bundle, buffer))
    }

    fn setup(
        bundle: &'b Bundle,
        threads: usize,
        arena: impl FnOnce() -> Result<Arena<'b>, ArenaError>,
    ) -> Result<Session<'b>, SessionError> {
        if threads == 0 {
            return Err(SessionError::NoThreads);
        }
        let contents = bundle.contents();
        let mut steps = Vec::with_capacity(contents.ops.len());
        let mut unsupported = Vec::new();
        let weight = |id: u32| bundle.weight_bytes(id);
        for (i, op) in contents.ops.iter().enumerate() {
            let operands = |ids: &[u32]| -> Result<Vec<Operand<'b>>, String> {
                ids.iter()
                    .map(|&id| kernels::operand(contents, id, weight))
                    .collect()
            };
            let prepared = operands(&op.inputs).and_then(|inputs| {
                let mut outputs = operands(&op.outputs)?;
                if let Some(o) = outputs
                    .iter()
                    .find(|o| matches!(o.loc, kernels::Loc::Weight(_)))
                {
                    return Err(format!("output tensor {} is a weight", o.id));
                }
                let planned_threads = kernels::planned_scratch_threads(op);
                let planned = match planned_threads {
                    0 => None,
                    _ => Some(
                        outputs
                            .pop()
                            .ok_or("a scratch tensor is announced but missing")?,
                    ),
                };
                let (kernel, scratch) = kernels::prepare(op, &inputs, &outputs)?;
                let planned = match planned {
                    Some(t) => planned_scratch(&t, scratch, planned_threads),
                    None => None,
                };
                Ok(Step {
                    kernel,
                    inputs,
                    outputs,
                    scratch,
                    planned,
                })
            });
            match prepared {
                Ok(step) => steps.push(step),
                Err(reason) => unsupported.push(UnsupportedOp {
                    step: i,
                    name: op.name.clone(),
                    op_type: op.op_type.clone(),
                    reason,
                }),
            }
        }
        if !unsupported.is_empty() {
            return Err(SessionError::Unsupported {
                path: bundle.path_owned(),
                ops: unsupported,
            });
        }
        kernels::fuse_clamps(&mut steps, &contents.outputs);
        kernels::fuse_residuals(&mut steps, &contents.outputs);
        kernels::fuse_activations(&mut steps, &contents.outputs);
        kernels::fuse_dequantized(&mut steps, &contents.outputs);
        kernels::fuse_nan_selects(&mut steps, &contents.outputs);
        // Scratch the bundle did not plan into the arena (for more threads
        // than it was compiled for, or none): allocated here, once.
        let scratch_per = steps
            .iter()
            .filter(|s| s.planned.is_none_or(|(_, t)| t < threads))
            .map(|s| s.scratch)
            .max()
            .unwrap_or(0);
        let scratch = vec![0f32; scratch_per * threads];
        // Setup prepared every arena operand with these bases, so they
        // exist; a bundle with more pools than a step can see is refused
        // by validation (`MAX_POOLS`).
        let pool_bases = crate::arena::pool_bases(contents).unwrap_or_default();
        Ok(Session {
            bundle,
            steps,
            arena: arena()?,
            scratch,
            scratch_per,
            pool: Pool::new(threads)?,
            pool_bases,
        })
    }

    /// The bundle.
    pub fn bundle(&self) -> &'b Bundle {
        self.bundle
    }

    /// The arena (inputs, outputs and activations at their offsets).
    pub fn arena(&self) -> &Arena<'b> {
        &self.arena
    }

    /// Floats of scratch the kernels share.
    pub fn scratch_floats(&self) -> usize {
        self.scratch.len()
    }

    /// Input `key` as a mutable slice of the arena, to fill in place.
    pub fn input_mut<T: Element, K: TensorKey + ?Sized>(
        &mut self,
        key: &K,
    ) -> Result<&mut [T], LookupError> {
        self.arena.tensor_mut(self.bundle, key)
    }

    /// Input `key`'s bytes in the arena, to fill in place.
    pub fn input_bytes_mut<K: TensorKey + ?Sized>(
        &mut self,
        key: &K,
    ) -> Result<&mut [u8], LookupError> {
        self.arena.tensor_bytes_mut(self.bundle, key)
    }

    /// Copies `data` into input `key`.
    pub fn set_input<T: Element, K: TensorKey + ?Sized>(
        &mut self,
        key: &K,
        data: &[T],
    ) -> Result<(), SessionError> {
        let t = self.bundle.tensor(key)?;
        crate::lookup::check_dtype::<T>(t)?;
        let elements = t.tensor.size / t.tensor.dtype.size_bytes();
        if data.len() as u64 != elements {
            return Err(SessionError::InputSize {
                name: t.name().to_string(),
                want: elements as usize,
                got: data.len(),
            });
        }
        self.write_input_bytes(key, bytemuck::cast_slice(data))
    }

    /// Copies `data`, the input's bytes (little-endian elements, row-major),
    /// into input `key`: into its place in the arena, or into its bands of
    /// rows for an input a patched stage reads so (which
    /// [`Session::input_bytes_mut`] cannot hand out).
    pub fn write_input_bytes<K: TensorKey + ?Sized>(
        &mut self,
        key: &K,
        data: &[u8],
    ) -> Result<(), SessionError> {
        let t = self.bundle.tensor(key)?;
        match self.arena.write_bytes(self.bundle, key, data)? {
            Ok(()) => Ok(()),
            Err(want) => Err(SessionError::InputBytes {
                name: t.name().to_string(),
                want,
                got: data.len(),
            }),
        }
    }

    /// Output (or any arena tensor) `key` after [`Session::run`].
    pub fn output<T: Element, K: TensorKey + ?Sized>(&self, key: &K) -> Result<&[T], LookupError> {
        self.arena.tensor(self.bundle, key)
    }

    /// Threads the kernels use.
    pub fn threads(&self) -> usize {
        self.pool.parts()
    }

    /// Runs every step in order. Allocates nothing.
    pub fn run(&mut self) -> Result<(), RunError> {
        self.run_observed(|_| {})
    }

    /// [`Session::run`], calling `after_step(i)` as step `i` (the bundle's
    /// operator `i`) finishes: a profiler reads its clock there (the
    /// runtime itself has none without `std`). Allocates nothing itself.
    pub fn run_observed(&mut self, mut after_step: impl FnMut(usize)) -> Result<(), RunError> {
        let contents = self.bundle.contents();
        let parts = self.pool.parts();
        let per = self.scratch_per;
        // Each pool's buffer, at its base in the kernels' address space; a
        // fixed array, so a run allocates nothing whatever the pool count.
        let mut pools = [(usize::MAX, Shared::new(&mut [])); kernels::MAX_POOLS];
        for ((slot, bytes), &base) in pools
            .iter_mut()
            .zip(self.arena.pools_mut())
            .zip(&self.pool_bases)
        {
            *slot = (base, Shared::new(bytes));
        }
        let scratch = Shared::new(self.scratch.as_mut_slice());
        for (i, step) in self.steps.iter().enumerate() {
            let failure: Slot<Failure> = Slot::default();
            let progress = AtomicUsize::new(0);
            let share = |part: usize| {
                let views = Views::pooled(pools.iter().map(|(base, p)| (*base, p.cells(0, p.len))))
                    .with_progress(&progress);
                let scratch = match step.planned {
                    Some((offset, threads)) if part < threads => {
                        let at = offset + part * step.scratch * 4;
                        views.at::<f32>(at, step.scratch).unwrap_or(&[])
                    }
                    _ => scratch.cells(part * per, step.scratch),
                };
                if scratch.len() < step.scratch {
                    let id = step.outputs.first().map_or(0, |o| o.id);
                    failure.set(Failure::View(id));
                    return;
                }
                if let Err(f) = kernels::run_part(step, &views, scratch, part, parts) {
                    failure.set(f);
                }
            };
            let finished = if parts > 1 && kernels::splits(step) {
                self.pool.run(&share)
            } else {
                // Setup's checks should make a panic impossible; if one
                // slips through, it is an error of this run, not an abort
                // (with `std`; without it, the device's panic handler).
                self.pool.run_here(&share)
            };
            let name = || contents.ops[i].name.clone();
            if !finished {
                return Err(RunError::Panicked {
                    step: i,
                    name: name(),
                });
            }
            match failure.take() {
                None => {}
                Some(Failure::View(tensor)) => {
                    return Err(RunError::View {
                        step: i,
                        name: name(),
                        tensor,
                    })
                }
                Some(Failure::Index(index)) => {
                    return Err(RunError::Index {
                        step: i,
                        name: name(),
                        index,
                    })
                }
            }
            after_step(i);
        }
        Ok(())
    }
}

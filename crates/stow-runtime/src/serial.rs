//! The session's "pool" without `std`: no threads, so every job runs on
//! the caller's thread, and a panic goes to the program's panic handler
//! (there is no unwinding to catch). Same interface as `pool.rs`, so the
//! session is one source for both builds.

use crate::session::SessionError;
use core::cell::Cell;

/// The caller's thread alone.
pub(crate) struct Pool;

impl Pool {
    /// One thread is all there is; more is an error rather than a silent
    /// downgrade, so that a caller sizing scratch for N threads learns.
    pub(crate) fn new(threads: usize) -> Result<Pool, SessionError> {
        match threads {
            1 => Ok(Pool),
            _ => Err(SessionError::NoThreadSupport { threads }),
        }
    }

    /// Shares a job is split into.
    pub(crate) fn parts(&self) -> usize {
        1
    }

    /// Calls `job(0)`; true (a panic does not return).
    pub(crate) fn run(&self, job: &dyn Fn(usize)) -> bool {
        job(0);
        true
    }

    /// [`Pool::run`]: there is only this thread.
    pub(crate) fn run_here(&self, job: &dyn Fn(usize)) -> bool {
        self.run(job)
    }
}

/// Where a job leaves a failure: one thread, so a `Cell` (which makes the
/// job `!Sync`, hence `run` here takes any job).
pub(crate) struct Slot<T>(Cell<Option<T>>);

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot(Cell::new(None))
    }
}

impl<T> Slot<T> {
    pub(crate) fn set(&self, value: T) {
        self.0.set(Some(value));
    }

    pub(crate) fn take(self) -> Option<T> {
        self.0.into_inner()
    }
}

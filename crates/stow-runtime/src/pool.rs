//! The session's worker threads: started once at setup, handed one job
//! per parallel step, and joined when the session is dropped. Handing out
//! a job locks a mutex and publishes its generation; nothing is allocated
//! per job, so a run stays allocation-free with threads too.
//!
//! A worker that finishes a job watches the generation for [`SPIN`]
//! before it sleeps on a condition variable, and the caller watches the
//! count of unfinished shares as long before it sleeps: a model's steps
//! follow each other within microseconds, and waking a sleeping thread
//! (a futex call on each side) cost about as much as a small step's work
//! (int8 mobilenet_v2 ran barely faster on two threads than on one).
//! The condition variables are only signalled when someone sleeps on
//! them.
//!
//! Needs `std`; `serial.rs` stands in for it without.

use crate::session::SessionError;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a thread watches for the next job, or for the last share to
/// finish, before it sleeps.
const SPIN: Duration = Duration::from_micros(100);

/// A job: called once per share index (`'static` only in name: see
/// [`Pool::run`]).
type Job = dyn Fn(usize) + Sync + 'static;

/// The job's address, lifetime erased (see [`Pool::run`] for why it stays
/// valid while workers use it).
#[derive(Clone, Copy)]
struct JobPtr(*const Job);

// SAFETY: the pointer is only dereferenced by workers while `Pool::run`,
// which owns the borrow it came from, waits for them; the job is `Sync`,
// so calling it from several threads at once is allowed.
#[allow(unsafe_code)]
unsafe impl Send for JobPtr {}

struct State {
    generation: u64,
    job: Option<JobPtr>,
    panicked: bool,
    shutdown: bool,
    /// Workers asleep on `start`.
    sleepers: usize,
    /// Whether the caller sleeps on `done`.
    waiting: bool,
}

struct Shared {
    state: Mutex<State>,
    start: Condvar,
    done: Condvar,
    /// `State::generation`, readable without the lock (stored under it;
    /// `u64::MAX` once shut down).
    generation: AtomicU64,
    /// Shares of the current job not yet finished (changed under the
    /// lock, read without it).
    pending: AtomicUsize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A worker never panics while holding the lock (jobs run outside
        // it), so a poisoned lock still holds consistent state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `threads − 1` workers; the calling thread takes share 0.
pub(crate) struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl Pool {
    /// Starts `threads − 1` workers.
    pub(crate) fn new(threads: usize) -> Result<Pool, SessionError> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                generation: 0,
                job: None,
                panicked: false,
                shutdown: false,
                sleepers: 0,
                waiting: false,
            }),
            start: Condvar::new(),
            done: Condvar::new(),
            generation: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
        });
        let mut pool = Pool {
            shared,
            workers: Vec::new(),
        };
        for share in 1..threads.max(1) {
            let shared = pool.shared.clone();
            let handle = std::thread::Builder::new()
                .name(format!("stow-worker-{share}"))
                .spawn(move || work(&shared, share))
                .map_err(SessionError::Spawn)?;
            pool.workers.push(handle);
        }
        // One empty job: returns once every worker runs, so what a thread
        // allocates as it starts is done before the first real run.
        pool.run(&|_| {});
        Ok(pool)
    }

    /// Shares a job is split into (workers + the caller).
    pub(crate) fn parts(&self) -> usize {
        self.workers.len() + 1
    }

    /// Calls `job(0)` on this thread alone (a step that does not split);
    /// false when it panicked.
    pub(crate) fn run_here(&self, job: &(dyn Fn(usize) + Sync + '_)) -> bool {
        catch_unwind(AssertUnwindSafe(|| job(0))).is_ok()
    }

    /// Calls `job(i)` for every share `i` in `0..parts()`, share 0 on this
    /// thread, and returns when all have finished. False when a share
    /// panicked.
    pub(crate) fn run(&self, job: &(dyn Fn(usize) + Sync + '_)) -> bool {
        if self.workers.is_empty() {
            return catch_unwind(AssertUnwindSafe(|| job(0))).is_ok();
        }
        // SAFETY: only the lifetime is erased. Workers dereference the
        // pointer between being woken below and decrementing `pending`;
        // this function does not return before `pending` is 0 (even when
        // share 0 panics, which is caught), so `job` outlives every use.
        #[allow(unsafe_code)]
        let ptr = JobPtr(unsafe {
            std::mem::transmute::<&(dyn Fn(usize) + Sync + '_), &'static Job>(job)
        });
        let shared = &*self.shared;
        let sleepers = {
            let mut s = shared.lock();
            s.job = Some(ptr);
            s.panicked = false;
            s.generation += 1;
            shared.pending.store(self.workers.len(), Ordering::SeqCst);
            shared.generation.store(s.generation, Ordering::SeqCst);
            s.sleepers
        };
        if sleepers > 0 {
            shared.start.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| job(0))).is_ok();
        spin_until(|| shared.pending.load(Ordering::Acquire) == 0);
        let mut s = shared.lock();
        while shared.pending.load(Ordering::Acquire) > 0 {
            s.waiting = true;
            s = shared.done.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.waiting = false;
        s.job = None;
        mine && !s.panicked
    }
}

/// Polls `ready` for up to [`SPIN`]; whether it became true. Between
/// rounds of polls the thread yields its core: on a machine busier than
/// its cores, the thread being waited for may need this one to run (a
/// pure spin made a two-thread run several times slower there).
fn spin_until(ready: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    loop {
        // The clock read once per 64 polls (a poll is a load).
        for _ in 0..64 {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= SPIN {
            return ready();
        }
        std::thread::yield_now();
    }
}

/// Where the shares of a step leave a failure (the last one written is
/// kept: any one is enough to stop the run).
pub(crate) struct Slot<T>(Mutex<Option<T>>);

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot(Mutex::new(None))
    }
}

impl<T> Slot<T> {
    pub(crate) fn set(&self, value: T) {
        // A share never panics while holding the lock, so a poisoned lock
        // still holds a whole value.
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(value);
    }

    pub(crate) fn take(self) -> Option<T> {
        self.0.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

fn work(shared: &Shared, share: usize) {
    let mut seen = 0;
    loop {
        spin_until(|| shared.generation.load(Ordering::Acquire) != seen);
        let job = {
            let mut s = shared.lock();
            while s.generation == seen && !s.shutdown {
                s.sleepers += 1;
                s = shared.start.wait(s).unwrap_or_else(|e| e.into_inner());
                s.sleepers -= 1;
            }
            if s.shutdown {
                return;
            }
            seen = s.generation;
            s.job
        };
        let ok = match job {
            // SAFETY: see `Pool::run`: the job is alive until `pending`
            // reaches 0, which happens only after this call.
            #[allow(unsafe_code)]
            Some(JobPtr(f)) => catch_unwind(AssertUnwindSafe(|| unsafe { (*f)(share) })).is_ok(),
            None => true,
        };
        let mut s = shared.lock();
        s.panicked |= !ok;
        // Under the lock, so that a caller going to sleep (which checks
        // `pending` under it) cannot miss the last share's signal.
        if shared.pending.fetch_sub(1, Ordering::AcqRel) == 1 && s.waiting {
            shared.done.notify_one();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        {
            let mut s = self.shared.lock();
            s.shutdown = true;
            self.shared.generation.store(u64::MAX, Ordering::SeqCst);
        }
        self.shared.start.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

//! Lockstep for a decision's portfolio: every run goes on in slices of
//! nodes, and a slice starts only when every run still going has finished
//! the one before. The first slice in which some run settles the decision
//! (a layout, or an exhausted tree) ends it, and of the runs that settle
//! in that slice the lowest-numbered one gives the answer. So the answer
//! depends only on node counts, never on which thread was faster or how
//! many threads there are; and no run is restarted from scratch, as
//! runs under doubling node limits were.

use super::dfs::Outcome;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

pub(super) struct Gate {
    state: Mutex<State>,
    /// Runs wait here for the next slice or a thread token.
    runs: Condvar,
    /// The coordinator waits here for every run to reach the gate.
    coordinator: Condvar,
    /// After it, no run starts another slice.
    deadline: Instant,
}

struct State {
    slice: u64,
    at_gate: usize,
    /// Runs not finished.
    going: usize,
    /// Threads free to run a slice.
    tokens: usize,
    stop: bool,
    /// Finished runs: (run index, answer).
    results: Vec<(usize, Outcome)>,
}

impl Gate {
    pub fn new(runs: usize, threads: usize, deadline: Instant) -> Self {
        Gate {
            state: Mutex::new(State {
                slice: 0,
                at_gate: 0,
                going: runs,
                tokens: threads.max(1),
                stop: false,
                results: Vec::new(),
            }),
            runs: Condvar::new(),
            coordinator: Condvar::new(),
            deadline,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a thread token before a run's first slice. False when
    /// the decision is already settled.
    pub fn start(&self) -> bool {
        let mut s = self.lock();
        while s.tokens == 0 && !s.stop {
            s = self.runs.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        if s.stop || Instant::now() >= self.deadline {
            return false;
        }
        s.tokens -= 1;
        true
    }

    /// A run has used up slice `*slice`: waits for the next one. False
    /// when the decision is settled and the run should stop.
    pub fn pass(&self, slice: &mut u64) -> bool {
        let mut s = self.lock();
        s.tokens += 1;
        s.at_gate += 1;
        self.coordinator.notify_one();
        self.runs.notify_all();
        while s.slice == *slice && !s.stop {
            s = self.runs.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        while s.tokens == 0 && !s.stop {
            s = self.runs.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        if s.stop || Instant::now() >= self.deadline {
            return false;
        }
        s.tokens -= 1;
        *slice = s.slice;
        true
    }

    /// A run ended with `outcome`.
    pub fn finish(&self, run: usize, outcome: Outcome) {
        let mut s = self.lock();
        s.tokens += 1;
        s.going -= 1;
        s.results.push((run, outcome));
        self.coordinator.notify_one();
        self.runs.notify_all();
    }

    /// Runs the slices until some run settles the decision or every run
    /// has ended; returns the answer (lowest run index of the first slice
    /// that settled).
    pub fn coordinate(&self) -> Outcome {
        let mut s = self.lock();
        loop {
            while s.at_gate < s.going {
                s = self.coordinator.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            let settled = s
                .results
                .iter()
                .enumerate()
                .filter(|(_, (_, o))| !matches!(o, Outcome::Limit))
                .min_by_key(|(_, (k, _))| *k)
                .map(|(p, _)| p);
            if let Some(p) = settled {
                s.stop = true;
                self.runs.notify_all();
                return s.results.swap_remove(p).1;
            }
            if s.going == 0 {
                return Outcome::Limit;
            }
            s.slice += 1;
            s.at_gate = 0;
            self.runs.notify_all();
        }
    }
}

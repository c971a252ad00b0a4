//! Who writes and reads each tensor, and which steps must run before which.
//!
//! Sharing decisions ask "is this write certain to happen after that read?".
//! On one schedule the answer is the step order; when parallel branches may
//! run concurrently it is the dependency order of the graph, which is only
//! partial: two steps on parallel branches are ordered neither way.

use crate::graph::{ModelGraph, TensorRole};

/// A point in a run: before the first step (the caller writes the inputs),
/// one step, or after the last (the caller reads the outputs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    Start,
    Step(usize),
    End,
}

/// Writer and readers of every tensor.
pub(crate) struct Usage {
    /// The step that writes the tensor (`None` for inputs and weights).
    pub producer: Vec<Option<usize>>,
    /// Steps that read the tensor, in order, without repeats.
    pub readers: Vec<Vec<usize>>,
    /// True for graph outputs, which the caller reads after the last step.
    pub is_output: Vec<bool>,
}

impl Usage {
    pub fn new(graph: &ModelGraph) -> Usage {
        let n = graph.tensors.len();
        let mut producer = vec![None; n];
        let mut readers: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (step, op) in graph.ops.iter().enumerate() {
            for &t in op.outputs.iter().chain(&op.scratch) {
                producer[t] = Some(step);
            }
            for &t in &op.inputs {
                if readers[t].last() != Some(&step) {
                    readers[t].push(step);
                }
            }
        }
        let mut is_output = vec![false; n];
        for &t in &graph.outputs {
            is_output[t] = graph.tensors[t].role.in_arena();
        }
        Usage {
            producer,
            readers,
            is_output,
        }
    }

    /// Every event at which `tensor`'s bytes are read.
    pub fn reads(&self, tensor: usize) -> impl Iterator<Item = Event> + '_ {
        self.readers[tensor]
            .iter()
            .map(|&s| Event::Step(s))
            .chain(self.is_output[tensor].then_some(Event::End))
    }
}

/// Strict ancestors of every step (bit sets, one row per step).
pub(crate) struct StepDag {
    words: usize,
    rows: Vec<u64>,
}

impl StepDag {
    pub fn new(graph: &ModelGraph, usage: &Usage) -> StepDag {
        let n = graph.ops.len();
        let words = n.div_ceil(64).max(1);
        let mut rows = vec![0u64; n * words];
        // Steps are in a topological order, so every producer's row is
        // complete before its consumers read it.
        for (step, op) in graph.ops.iter().enumerate() {
            for &t in &op.inputs {
                let Some(p) = usage.producer[t] else { continue };
                if p >= step {
                    continue;
                }
                let (done, rest) = rows.split_at_mut(step * words);
                let src = &done[p * words..(p + 1) * words];
                let dst = &mut rest[..words];
                for (d, s) in dst.iter_mut().zip(src) {
                    *d |= s;
                }
                dst[p / 64] |= 1 << (p % 64);
            }
        }
        StepDag { words, rows }
    }

    /// Strict ancestors of `step`.
    pub fn ancestors(&self, step: usize) -> &[u64] {
        &self.rows[step * self.words..(step + 1) * self.words]
    }

    /// True when `a` must finish before `b` starts.
    pub fn precedes(&self, a: usize, b: usize) -> bool {
        self.ancestors(b)
            .get(a / 64)
            .is_some_and(|w| w & (1 << (a % 64)) != 0)
    }

    pub fn words(&self) -> usize {
        self.words
    }
}

/// Which order of steps sharing decisions may rely on.
#[derive(Clone, Copy)]
pub(crate) enum Schedule<'a> {
    /// The recorded execution order, one step at a time.
    Sequential,
    /// Any order the dependencies allow, parallel branches at once.
    Concurrent(&'a StepDag),
}

impl Schedule<'_> {
    /// True when `a` certainly happens before `b` (strictly).
    pub fn before(self, a: Event, b: Event) -> bool {
        match (a, b) {
            (Event::Start, Event::Start) | (Event::End, _) => false,
            (Event::Start, _) | (_, Event::End) => true,
            (Event::Step(_), Event::Start) => false,
            (Event::Step(x), Event::Step(y)) => match self {
                Schedule::Sequential => x < y,
                Schedule::Concurrent(dag) => dag.precedes(x, y),
            },
        }
    }
}

impl ModelGraph {
    /// When `tensor`'s bytes are written: its producing step, `Start` for
    /// graph inputs, `None` when no step writes them (views, the output of a
    /// concat done in place, weights).
    pub(crate) fn write_event(&self, usage: &Usage, tensor: usize) -> Option<Event> {
        let t = &self.tensors[tensor];
        match t.role {
            TensorRole::Weight => return None,
            TensorRole::Input => return Some(Event::Start),
            _ => {}
        }
        if matches!(t.alias, Some(crate::Alias::View(_))) {
            return None;
        }
        let step = usage.producer[tensor]?;
        if self.concat_in_place(step) {
            return None;
        }
        Some(Event::Step(step))
    }
}

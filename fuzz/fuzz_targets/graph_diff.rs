//! Differential: the fuzzer's bytes choose a random valid ONNX graph (the
//! generator of `crates/stow-cli/tests/random_graph`, which the proptest
//! `random_graphs` also drives); it is compiled, run from its bundle and
//! compared with tract. A refusal with a reason is fine; an output that
//! differs, or a graph tract cannot run (a generator bug), is a crash.
//!
//!     cargo +nightly fuzz run graph_diff -- -rss_limit_mb=4096
#![no_main]

#[path = "../../crates/stow-cli/tests/random_graph/mod.rs"]
mod random_graph;

use random_graph::judge::{judge, Verdict};

/// Choices read from the fuzzer's bytes; once they run out every choice
/// is the first, which ends the graph quickly.
struct Bytes<'a>(arbitrary::Unstructured<'a>);

impl random_graph::Source for Bytes<'_> {
    fn below(&mut self, n: usize) -> usize {
        self.0.choose_index(n.max(1)).unwrap_or(0)
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let graph = random_graph::generate(&mut Bytes(arbitrary::Unstructured::new(data)), 10);
    if let Verdict::Differs(what) = judge(&graph, 0) {
        panic!("Stowage differs from tract: {what}");
    }
});

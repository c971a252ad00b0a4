//! Differential property test: random valid ONNX graphs
//! (`random_graph/mod.rs`) compiled, run from their bundle and compared
//! with tract (`random_graph/judge.rs`). A graph Stowage refuses with a
//! reason is rejected, and proptest fails if more than about a third are;
//! a graph tract cannot run is a generator bug and fails the test.
//! `PROPTEST_CASES=3000` runs a longer search.

mod random_graph;

use proptest::prelude::*;
use random_graph::judge::{judge, Verdict};
use random_graph::{generate, SplitMix};

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 300,
        max_global_rejects: 100,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_graphs_match_tract(seed in any::<u64>(), max_nodes in 1usize..10) {
        let graph = generate(&mut SplitMix(seed), max_nodes);
        match judge(&graph, seed) {
            Verdict::Match => {}
            Verdict::Refused(reason) => return Err(TestCaseError::reject(reason)),
            Verdict::Differs(what) => return Err(TestCaseError::fail(what)),
        }
    }
}

//! Arbitrary bytes as an ONNX model through the whole compile path in
//! memory: load (parse, shape inference, declutter, analysis), plan, build
//! the bundle, and read the bundle back. Any outcome is fine except a
//! panic or an abort; a bundle that is written must parse.
//! Seeds: the models of testdata/ (`seeds/onnx_compile`).
//!
//!     cargo +nightly fuzz run onnx_compile corpus/onnx_compile seeds/onnx_compile -- -rss_limit_mb=4096
#![no_main]

use std::io::Write;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // The frontend reads from a path (external data is resolved beside it).
    let Ok(mut file) = tempfile::Builder::new().suffix(".onnx").tempfile() else {
        return;
    };
    if file.write_all(data).is_err() {
        return;
    }
    let Ok(graph) = stow_onnx::load(file.path(), &stow_onnx::LoadOptions::default()) else {
        return;
    };
    let (problem, buffer_of) = graph.problem(64);
    let options = stow_plan::PlanOptions {
        strategy: stow_plan::Strategy::GreedySize,
        ..Default::default()
    };
    let Ok(plan) = stow_plan::plan(&problem, &options) else {
        return;
    };
    let planned = stow_cli::build::PlannedModel {
        graph: &graph,
        buffer_of: &buffer_of,
        plan: &plan,
        naive_bytes: 0,
        align: 64,
        source_model: "fuzz.onnx".into(),
    };
    let Ok((contents, weights)) = stow_cli::build::bundle_contents(&planned) else {
        return;
    };
    if let Ok(bytes) = stow_bundle::to_bytes(&contents, &weights) {
        stow_bundle::BundleView::parse(&bytes).expect("a bundle the writer produced parses");
    }
});

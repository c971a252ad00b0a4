//! The compile path both ONNX fuzz targets drive, in memory.

use std::io::Write;

/// Load `model` (ONNX bytes), plan it, build the bundle and read it back.
/// Any outcome is fine except a panic or an abort; a bundle the writer
/// produces must parse.
pub fn compile_in_memory(model: &[u8]) {
    // The frontend reads from a path (external data is resolved beside it).
    let Ok(mut file) = tempfile::Builder::new().suffix(".onnx").tempfile() else {
        return;
    };
    if file.write_all(model).is_err() {
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
    if let Ok(bundle) = stow_bundle::to_bytes(&contents, &weights) {
        stow_bundle::BundleView::parse(&bundle).expect("a bundle the writer produced parses");
    }
}

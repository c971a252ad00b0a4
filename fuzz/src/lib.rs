//! The compile path both ONNX fuzz targets drive, in memory.

use std::io::Write;

/// Compile `model` (ONNX bytes) with the library's one entry point — load,
/// kernel scratch, plan, bundle contents, encode — and read the bundle
/// back. Any outcome is fine except a panic or an abort; a bundle the
/// writer produces must parse.
pub fn compile_in_memory(model: &[u8]) {
    // The frontend reads from a path (external data is resolved beside it).
    let Ok(mut file) = tempfile::Builder::new().suffix(".onnx").tempfile() else {
        return;
    };
    if file.write_all(model).is_err() {
        return;
    }
    let options = stow_compile::CompileOptions {
        plan: stow_plan::PlanOptions {
            strategy: stow_plan::Strategy::GreedySize,
            ..Default::default()
        },
        ..Default::default()
    };
    let Ok(compiled) = stow_compile::compile(file.path(), &options) else {
        return;
    };
    stow_bundle::BundleView::parse(compiled.bytes()).expect("a bundle the writer produced parses");
}

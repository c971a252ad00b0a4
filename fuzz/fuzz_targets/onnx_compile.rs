//! Arbitrary bytes as an ONNX model through the whole compile path in
//! memory: load (parse, shape inference, declutter, analysis), plan, build
//! the bundle, and read the bundle back. Any outcome is fine except a
//! panic or an abort; a bundle that is written must parse.
//! Seeds: the models of testdata/ (`seeds/onnx_compile`).
//!
//!     cargo +nightly fuzz run onnx_compile corpus/onnx_compile seeds/onnx_compile -- -rss_limit_mb=4096
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| stow_fuzz::compile_in_memory(data));

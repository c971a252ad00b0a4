//! The pieces behind the `stow` binary, exposed so tests and tools can drive
//! the same pipeline: ONNX model → plan → bundle contents.

pub mod build;
pub mod picture;

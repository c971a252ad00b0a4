//! ONNX frontend: turns an `.onnx` model into the tensors, lifetimes and
//! operator list that Stowage plans and bundles.
//!
//! The model is loaded with tract-onnx, input shapes are fixed (from the
//! model, `--input` or `--dim`), the graph is decluttered, and tract's
//! RAM-optimised execution order becomes the step numbering. Every tensor
//! that an executed step reads or writes is recorded once.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod attrs;
mod dtype;
mod error;
mod graph;
mod load;
mod shapes;

pub use error::{OnnxError, Stage};
pub use graph::{ModelGraph, OpInfo, TensorInfo, TensorRole};
pub use load::{load, LoadOptions};
pub use shapes::{parse_dim_arg, parse_input_arg, InputShape};

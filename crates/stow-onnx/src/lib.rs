//! ONNX frontend: turns an `.onnx` model into the tensors, lifetimes and
//! operator list that Stowage plans and bundles.
//!
//! The model is loaded with tract-onnx, input shapes are fixed (from the
//! model, `--input` or `--dim`), the graph is decluttered, and the execution
//! order with the smallest arena lower bound (tract's RAM order, topological,
//! or our greedy order) becomes the step numbering. Every tensor
//! that an executed step reads or writes is recorded once.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod alias;
mod attrs;
mod bind;
mod branches;
mod channels;
mod constants;
mod dag;
mod deconv;
mod dtype;
mod error;
mod execute;
mod external;
mod fold;
mod graph;
mod guards;
mod imports;
mod input_rows;
mod inputs;
mod load;
mod logsumexp;
mod lookup;
mod norms;
mod order;
mod patching;
mod qoperator;
mod qops;
mod qparams;
mod quantize;
mod recurrent;
mod refusals;
mod reverse;
mod shapes;
mod stage;
mod unroll;
mod widen;

pub use alias::{Alias, ReuseOptions};
pub use attrs::Attr;
pub use constants::{parse_set_arg, read_set_npz, FixedInput, InputValue};
pub use error::{OnnxError, Stage};
pub use execute::{run_in_arena, run_reference, ArenaLayout, ArenaRun, Mismatch, POISON};
pub use graph::{ExecutionOrder, InputBands, ModelGraph, OpInfo, TensorInfo, TensorRole};
pub use inputs::{
    numbered_files, random_inputs, random_tensors, read_input_dir, read_npz, read_npz_named,
    read_tensor_file, write_tensor_file,
};
pub use load::{load, load_decluttered, Decluttered, LoadOptions};
pub use shapes::{parse_dim_arg, parse_input_arg, InputShape};
pub use stage::{recorded_stages, PatchedStage};
/// tract's tensor type, used for inputs and outputs of runs.
pub use tract_onnx::prelude::{DatumType, Tensor};

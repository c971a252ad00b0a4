//! Frontend switches shared by `stow compile` and `stow verify`: input
//! shapes, symbol values, and which kinds of byte sharing are allowed.

use anyhow::Result;
use stow_onnx::{parse_dim_arg, parse_input_arg, LoadOptions, ReuseOptions};

/// Switches for sharing bytes beyond lifetimes.
#[derive(clap::Args, Clone, Copy)]
pub struct ReuseArgs {
    /// Do not let element-wise ops write over their dead input.
    #[arg(long)]
    pub no_inplace: bool,
    /// Do not let reshape-like ops share their input's bytes (copy instead).
    #[arg(long)]
    pub no_views: bool,
    /// Let in-place ops overwrite graph inputs (the caller's input is lost).
    #[arg(long)]
    pub reuse_inputs: bool,
    /// Do not let producers write into their slice of a concat's output
    /// (the concat copies instead).
    #[arg(long)]
    pub no_concat_inplace: bool,
    /// Do not let depthwise convolutions write over their dead input (the
    /// output gets its own buffer).
    #[arg(long)]
    pub no_depthwise_inplace: bool,
    /// Plan for parallel branches running at the same time: their tensors
    /// never share bytes, graph outputs are never reused, and the planner
    /// works on an explicit conflict graph.
    #[arg(long)]
    pub concurrent_branches: bool,
}

impl ReuseArgs {
    /// The frontend's options.
    pub fn options(self) -> ReuseOptions {
        ReuseOptions {
            inplace: !self.no_inplace,
            views: !self.no_views,
            reuse_inputs: self.reuse_inputs,
            concat_inplace: !self.no_concat_inplace,
            depthwise_inplace: !self.no_depthwise_inplace,
            concurrent_branches: self.concurrent_branches,
        }
    }
}

/// Graph inputs made constants.
#[derive(clap::Args, Clone, Default)]
pub struct ConstantArgs {
    /// Make a graph input a constant, e.g. `sr=16000` or `mode=1,0,0`
    /// (repeatable): it folds away with everything that depends only on
    /// it (an `If` on it keeps one branch) and is no longer an input.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    /// Make every graph input named by an array of this `.npz` archive a
    /// constant with that array's value.
    #[arg(long = "set-npz", value_name = "FILE.npz")]
    pub set_npz: Vec<std::path::PathBuf>,
}

impl ConstantArgs {
    /// The fixed inputs, in the order given.
    pub fn fixed(&self) -> Result<Vec<stow_onnx::FixedInput>> {
        let mut fixed: Vec<stow_onnx::FixedInput> = self
            .set
            .iter()
            .map(|a| stow_onnx::parse_set_arg(a))
            .collect::<Result<_, _>>()?;
        for path in &self.set_npz {
            fixed.extend(stow_onnx::read_set_npz(path)?);
        }
        Ok(fixed)
    }
}

/// Frontend options from `--input`, `--dim`, `--set` and the reuse switches.
pub(crate) fn load_options(
    inputs: &[String],
    dims: &[String],
    constants: &ConstantArgs,
    reuse: ReuseArgs,
) -> Result<LoadOptions> {
    Ok(LoadOptions {
        constants: constants.fixed()?,
        inputs: inputs
            .iter()
            .map(|a| parse_input_arg(a))
            .collect::<Result<_, _>>()?,
        dims: dims
            .iter()
            .map(|a| parse_dim_arg(a))
            .collect::<Result<_, _>>()?,
        reuse: reuse.options(),
        stages: Vec::new(),
    })
}

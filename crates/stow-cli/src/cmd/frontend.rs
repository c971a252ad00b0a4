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
            concurrent_branches: self.concurrent_branches,
        }
    }
}

/// Frontend options from `--input`, `--dim` and the reuse switches.
pub(crate) fn load_options(
    inputs: &[String],
    dims: &[String],
    reuse: ReuseArgs,
) -> Result<LoadOptions> {
    Ok(LoadOptions {
        inputs: inputs
            .iter()
            .map(|a| parse_input_arg(a))
            .collect::<Result<_, _>>()?,
        dims: dims
            .iter()
            .map(|a| parse_dim_arg(a))
            .collect::<Result<_, _>>()?,
        reuse: reuse.options(),
    })
}

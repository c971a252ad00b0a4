//! `stow plan`: plan a raw buffer trace.

use anyhow::Result;
use std::path::PathBuf;

/// Arguments of `stow plan`.
#[derive(clap::Args)]
pub struct Args {
    /// Trace to plan (CSV).
    pub input: PathBuf,
}

/// Runs `stow plan`.
pub fn run(_args: Args) -> Result<()> {
    anyhow::bail!("stow plan is not built yet")
}

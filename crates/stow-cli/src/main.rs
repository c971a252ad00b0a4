//! `stow`: compile ONNX models into memory-planned bundles and inspect them.

mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Compile ONNX models ahead of time into memory-planned bundles.
///
/// A bundle holds the weights, every tensor's planned offset in one
/// activation arena, and the operator list.
#[derive(Parser)]
#[command(name = "stow", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile an ONNX model into a memory-planned bundle.
    Compile(cmd::compile::Args),
    /// Print a bundle's header, sections and tensor table.
    Inspect(cmd::inspect::Args),
    /// Plan a raw buffer trace (CSV) without a model.
    Plan(cmd::plan::Args),
    /// Run the model inside the bundle's arena and compare with tract, bit for bit.
    Verify(cmd::verify::Args),
    /// Run a bundle with Stowage's own kernels, from the bundle alone.
    Run(cmd::run::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Compile(args) => cmd::compile::run(args),
        Command::Inspect(args) => cmd::inspect::run(args),
        Command::Plan(args) => cmd::plan::run(args),
        Command::Verify(args) => cmd::verify::run(args),
        Command::Run(args) => cmd::run::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

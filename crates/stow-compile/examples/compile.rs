//! Compile an ONNX model from Rust (the README's "Compiling from Rust"):
//!
//!     cargo run -q -p stow-compile --example compile -- testdata/residual_cnn.onnx residual_cnn.stow
use std::path::Path;
use std::process::ExitCode;
use stow_compile::{compile, CompileError, CompileOptions};

fn run(model: &Path, output: &Path) -> Result<(), CompileError> {
    let options = CompileOptions {
        align: 128,
        ..CompileOptions::default()
    };
    let compiled = compile(model, &options)?;
    let r = compiled.report();
    println!(
        "{} ops, arena {} bytes (lower bound {}, ratio {:.3}, {}), weights {} bytes",
        r.ops, r.arena_bytes, r.lower_bound, r.ratio, r.strategy, r.weight_bytes
    );
    compiled.write(output)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, output] = &args[..] else {
        eprintln!("usage: compile MODEL.onnx OUT.stow");
        return ExitCode::FAILURE;
    };
    match run(Path::new(model), Path::new(output)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The error names the stage; its sources say why.
            let mut message = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                message = format!("{message}: {c}");
                cause = c.source();
            }
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

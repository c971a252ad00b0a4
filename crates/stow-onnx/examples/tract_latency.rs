//! The tract side of the runtime benchmark (BENCHMARKS.md, "Runtime"):
//! loads an ONNX model into tract's optimized plan with the input shapes
//! a bundle fixed, runs it REPEAT times on constant inputs (floats 0.5,
//! integers 1: valid token ids and mask values) and prints the median and
//! fastest latency.
//!
//!     cargo run --release -p stow-onnx --example tract_latency -- MODEL.onnx BUNDLE.stow REPEAT [THREADS]
//!
//! THREADS above 1 uses tract's multithreaded matrix products (feature
//! `multithread-mm` of tract-linalg, enabled for this example).

use std::time::Instant;
use stow_runtime::Bundle;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::tract_linalg::multithread::{set_default_executor, Executor};

fn main() -> TractResult<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: tract_latency MODEL.onnx BUNDLE.stow REPEAT [THREADS]");
        std::process::exit(2);
    }
    let repeat: usize = args[3].parse()?;
    let threads: usize = args.get(4).map_or(Ok(1), |t| t.parse())?;
    if threads > 1 {
        set_default_executor(Executor::multithread(threads));
    }
    let bundle = Bundle::open(std::path::Path::new(&args[2]))?;
    let mut model = tract_onnx::onnx().model_for_path(&args[1])?;
    let mut inputs = TVec::new();
    for (ix, t) in bundle.inputs().enumerate() {
        let shape: Vec<usize> = t.tensor.shape.iter().map(|&d| d as usize).collect();
        let n: usize = shape.iter().product();
        let value = match t.tensor.dtype {
            stow_bundle::DType::F32 => Tensor::from_shape(&shape, &vec![0.5f32; n])?,
            stow_bundle::DType::I64 => Tensor::from_shape(&shape, &vec![1i64; n])?,
            other => panic!("input type {other:?}"),
        };
        model = model.with_input_fact(ix, InferenceFact::from(value.datum_type().fact(&shape)))?;
        inputs.push(value.into_tvalue());
    }
    let plan = model.into_optimized()?.into_runnable()?;
    let mut state = plan.spawn()?;
    state.run(inputs.clone())?;
    let mut times = Vec::with_capacity(repeat);
    for _ in 0..repeat {
        let started = Instant::now();
        state.run(inputs.clone())?;
        times.push(started.elapsed());
    }
    times.sort();
    println!(
        "tract: {:.3} ms (median of {repeat} runs, fastest {:.3} ms, {threads} thread{})",
        times[repeat / 2].as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        if threads == 1 { "" } else { "s" }
    );
    Ok(())
}

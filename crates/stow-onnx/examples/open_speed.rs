//! Load speed: `Bundle::open` (map + full validation, weight checksum
//! excluded) of a bundle against tract loading the ONNX model it was
//! compiled from (`model_for_path` + `into_typed` + `into_decluttered`),
//! side by side in one run, median of several.
//!
//!     cargo run --release -p stow-onnx --example open_speed -- MODEL.stow MODEL.onnx [RUNS]
//!
//! Both run with the files already in the page cache (one warm-up each),
//! so the comparison is of the work each format needs, not of the disk.

use std::path::PathBuf;
use std::time::{Duration, Instant};
use stow_runtime::Bundle;
use tract_onnx::prelude::*;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(stow), Some(onnx)) = (args.first(), args.get(1)) else {
        return Err("usage: open_speed MODEL.stow MODEL.onnx [RUNS]".into());
    };
    let (stow, onnx) = (PathBuf::from(stow), PathBuf::from(onnx));
    let runs: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(5);

    let open = || -> Result<Duration, Box<dyn std::error::Error>> {
        let t = Instant::now();
        let b = Bundle::open(&stow)?;
        let d = t.elapsed();
        std::hint::black_box(b.contents().tensors.len());
        Ok(d)
    };
    let tract = || -> Result<Duration, Box<dyn std::error::Error>> {
        let t = Instant::now();
        let m = tract_onnx::onnx()
            .model_for_path(&onnx)?
            .into_typed()?
            .into_decluttered()?;
        let d = t.elapsed();
        std::hint::black_box(m.nodes.len());
        Ok(d)
    };
    // Warm-up: page cache, allocator.
    open()?;
    tract()?;
    // Interleaved, so both see the same machine load.
    let (mut opens, mut loads) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        for _ in 0..20 {
            opens.push(open()?);
        }
        loads.push(tract()?);
    }
    let b = Bundle::open(&stow)?;
    let (o, l) = (median(opens.clone()), median(loads.clone()));
    println!(
        "bundle {} ({:.1} MB, {} tensors, {} ops)",
        stow.display(),
        b.header().file_len as f64 / 1e6,
        b.contents().tensors.len(),
        b.contents().ops.len()
    );
    println!(
        "Bundle::open          median {:>10.3} ms  (min {:.3}, max {:.3}, {} runs)",
        o.as_secs_f64() * 1e3,
        opens.iter().min().unwrap().as_secs_f64() * 1e3,
        opens.iter().max().unwrap().as_secs_f64() * 1e3,
        opens.len()
    );
    println!(
        "tract load+declutter  median {:>10.3} ms  (min {:.3}, max {:.3}, {} runs)",
        l.as_secs_f64() * 1e3,
        loads.iter().min().unwrap().as_secs_f64() * 1e3,
        loads.iter().max().unwrap().as_secs_f64() * 1e3,
        loads.len()
    );
    println!(
        "ratio                 {:.0}x",
        l.as_secs_f64() / o.as_secs_f64()
    );
    Ok(())
}

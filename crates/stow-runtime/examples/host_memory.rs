//! Host memory with N models loaded (method M5): opens every bundle given
//! on the command line, allocates and touches each arena, reads every
//! weight byte (as a copy to a device would), then releases the weight
//! pages, printing this process's resident memory at each stage.
//!
//!     cargo run --release -p stow-runtime --example host_memory -- A.stow B.stow ...
//!
//! Resident memory is read from /proc/self/status (Linux): VmRSS, split
//! into RssAnon (arenas, heap) and RssFile (mapped bundle pages).

use std::path::PathBuf;
use stow_runtime::{Arena, Bundle};

#[derive(Clone, Copy)]
struct Rss {
    total: u64,
    anon: u64,
    file: u64,
}

fn rss() -> Rss {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    Rss {
        total: field("VmRSS:"),
        anon: field("RssAnon:"),
        file: field("RssFile:"),
    }
}

fn mib(b: u64) -> String {
    format!("{:9.1} MiB", b as f64 / (1u64 << 20) as f64)
}

fn report(stage: &str, r: Rss) {
    println!(
        "{stage:<34} VmRSS {}  (anon {}, file {})",
        mib(r.total),
        mib(r.anon),
        mib(r.file)
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let paths: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if paths.is_empty() {
        return Err("usage: host_memory BUNDLE.stow...".into());
    }
    let start = rss();
    report("start", start);
    let mut loaded = Vec::new();
    for p in &paths {
        let b = Bundle::open(p)?;
        let arena = Arena::new(&b)?;
        loaded.push((b, arena));
    }
    report("opened, arenas allocated", rss());

    let (mut weights, mut arenas) = (0u64, 0u64);
    let mut checksum = 0u64;
    for (b, arena) in &mut loaded {
        // Touch the arena as a run would: every page written.
        arena
            .bytes_mut()
            .iter_mut()
            .step_by(4096)
            .for_each(|x| *x = 1);
        arenas += arena.len() as u64;
        // Read every weight byte, as a copy to a device would.
        for id in 0..b.contents().tensors.len() as u32 {
            if let Some(w) = b.weight_bytes(id) {
                weights += w.len() as u64;
                checksum = w
                    .iter()
                    .fold(checksum, |s, &x| s.wrapping_add(u64::from(x)));
            }
        }
    }
    let touched = rss();
    report("weights read, arenas touched", touched);

    for (b, _) in &loaded {
        b.release_host_pages()?;
    }
    let released = rss();
    report("weight pages released", released);

    println!();
    println!(
        "{} bundles: weights {}, arenas {} (checksum {checksum:#x})",
        loaded.len(),
        mib(weights),
        mib(arenas)
    );
    println!(
        "released {} of resident memory; after release resident memory is {} above the start, for {} of arenas",
        mib(touched.total.saturating_sub(released.total)),
        mib(released.total.saturating_sub(start.total)),
        mib(arenas)
    );
    Ok(())
}

//! Hard planning instances with a known perfect packing, in the interval
//! trace format (`id,lower,upper,size`), on standard output:
//!
//! ```sh
//! cargo run --release -p stow-plan --features testing --example gen_hard -- cut challenging|uniform SEED [MIN_PIECES MAX_PIECES [DROP_PERCENT]]
//! cargo run --release -p stow-plan --features testing --example gen_hard -- perturb FILE SEED
//! ```
//!
//! `cut` cuts a 1 MiB × 1 Mi-step rectangle into pieces (see
//! `stow_plan::testing::cut_arena`); when a piece count range is given, the
//! seeds from SEED upwards are tried until one lands in it, and the seed
//! used is printed in a comment; DROP_PERCENT (default 5, 0 for a perfect
//! packing) is `CutProfile::drop`. `perturb` renumbers a trace's buffers at
//! random, mirrors it in time on odd seeds, and shrinks one buffer in ten by
//! 1,024 bytes: whatever layout fitted the original still fits.

use stow_plan::testing::{cut_arena, parse_intervals, write_intervals, CutProfile, Rng};

const HEIGHT: u64 = 1 << 20;
const STEPS: u32 = 1 << 20;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: gen_hard cut challenging|uniform SEED [MIN MAX] | perturb FILE SEED";
    match args.first().map(String::as_str) {
        Some("cut") if args.len() >= 3 => {
            let mut profile = match args[1].as_str() {
                "challenging" => CutProfile::CHALLENGING,
                "uniform" => CutProfile::UNIFORM,
                _ => panic!("{usage}"),
            };
            if let Some(d) = args.get(5) {
                profile.drop = d.parse().expect("a percentage");
            }
            let first: u64 = args[2].parse().expect("a seed");
            let range: (usize, usize) = match (args.get(3), args.get(4)) {
                (Some(a), Some(b)) => (a.parse().expect("a count"), b.parse().expect("a count")),
                _ => (0, usize::MAX),
            };
            let (seed, problem) = (first..)
                .map(|s| (s, cut_arena(s, HEIGHT, STEPS, profile).0))
                .find(|(_, p)| (range.0..=range.1).contains(&p.buffers.len()))
                .expect("some seed fits the range");
            let comment = format!(
                "stow-plan gen_hard cut {} {seed} (drop {} %): {} buffers, a 1048576 x 1048576 rectangle cut into pieces (fits 1048576)",
                args[1],
                profile.drop,
                problem.buffers.len()
            );
            print!("{}", write_intervals(&problem, &comment));
        }
        Some("perturb") if args.len() >= 3 => {
            let text = std::fs::read_to_string(&args[1]).expect("a readable trace");
            let seed: u64 = args[2].parse().expect("a seed");
            let mut problem = parse_intervals(&text).expect("an interval trace");
            let mut r = Rng::new(seed);
            let n = problem.buffers.len();
            for i in (1..n).rev() {
                let j = r.range(0, i as u64 + 1) as usize;
                problem.buffers.swap(i, j);
            }
            let end = problem
                .buffers
                .iter()
                .map(|b| b.lifetime.end)
                .max()
                .unwrap_or(0);
            for b in &mut problem.buffers {
                if seed % 2 == 1 {
                    let (s, e) = (b.lifetime.start, b.lifetime.end);
                    b.lifetime.start = end - e;
                    b.lifetime.end = end - s;
                }
                if b.size > 1024 && r.chance(10) {
                    b.size -= 1024;
                }
            }
            let comment = format!(
                "stow-plan gen_hard perturb {} {seed}: renumbered{}, one buffer in ten 1024 bytes smaller",
                args[1],
                if seed % 2 == 1 { ", mirrored in time" } else { "" }
            );
            print!("{}", write_intervals(&problem, &comment));
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    }
}

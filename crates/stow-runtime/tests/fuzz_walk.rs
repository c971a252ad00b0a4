//! The cargo-fuzz open-and-walk harness (`stow_runtime::fuzzing`), run on
//! stable as a bounded test: every seed of `fuzz/seeds/bundle_open` and the
//! testing sample, each with a fixed-seed series of mutations (bit flips,
//! byte writes, truncations, insertions, deletions, field-sized integer
//! writes), each walked raw and with checksums recomputed. A panic in the
//! walk is a finding. `STOW_FUZZ_MUTATIONS` sets the mutations per seed.

mod common;

use stow_bundle::testing::sample_bytes;
use stow_runtime::fuzzing;

/// xorshift64*: a fixed, dependency-free sequence.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    let dir = common::root().join("fuzz/seeds/bundle_open");
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.unwrap().path();
            (p.display().to_string(), std::fs::read(&p).unwrap())
        })
        .collect();
    v.sort();
    v.push(("testing::sample_bytes".into(), sample_bytes()));
    v
}

fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) {
    // Mostly the part before the weights (header, tables, metadata), where
    // the validation is; the walk reads the weights too.
    let at = |rng: &mut Rng, len: usize| {
        if rng.below(10) < 9 {
            rng.below(len.min(4096))
        } else {
            rng.below(len)
        }
    };
    for _ in 0..1 + rng.below(3) {
        if bytes.is_empty() {
            return;
        }
        let i = at(rng, bytes.len());
        match rng.below(7) {
            0 => bytes[i] ^= 1 << rng.below(8),
            1 => bytes[i] = rng.next() as u8,
            2 => bytes.truncate(i),
            3 => bytes.insert(i, rng.next() as u8),
            4 => {
                bytes.remove(i);
            }
            5 => {
                // An interesting integer where a u32 or u64 field may be.
                let v = [0u64, 1, 63, 64, 0xFFFF_FFFF, u64::MAX, 1 << 24, 1 << 32][rng.below(8)];
                let w = if rng.below(2) == 0 { 4 } else { 8 };
                let i = i & !(w - 1);
                if let Some(dst) = bytes.get_mut(i..i + w) {
                    dst.copy_from_slice(&v.to_le_bytes()[..w]);
                }
            }
            _ => {
                // Copy a run of bytes from elsewhere (records onto records).
                let n = 1 + rng.below(64);
                let src = rng.below(bytes.len());
                let chunk: Vec<u8> = bytes[src..(src + n).min(bytes.len())].to_vec();
                let end = (i + chunk.len()).min(bytes.len());
                bytes[i..end].copy_from_slice(&chunk[..end - i]);
            }
        }
    }
}

#[test]
fn open_and_walk_survives_mutations_of_the_seed_corpus() {
    let per_seed: usize = std::env::var("STOW_FUZZ_MUTATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5000);
    let started = std::time::Instant::now();
    let mut rng = Rng(0x5709_A6E0_2024_0001);
    let (mut runs, mut valid_raw, mut valid_sealed) = (0, 0, 0);
    for (name, seed) in seeds() {
        let (raw, sealed) = fuzzing::run(&seed);
        assert!(raw.valid && raw.weights_ok, "seed {name} must be valid");
        assert!(sealed.valid, "seed {name} resealed");
        for _ in 0..per_seed {
            let mut m = seed.clone();
            mutate(&mut rng, &mut m);
            let (raw, sealed) = fuzzing::run(&m);
            runs += 1;
            valid_raw += usize::from(raw.valid);
            valid_sealed += usize::from(sealed.valid);
        }
    }
    eprintln!(
        "{runs} mutants walked in {:.2?}: {valid_raw} valid as mutated, {valid_sealed} valid after resealing",
        started.elapsed()
    );
    // The walk must see both outcomes, or it tests nothing.
    assert!(valid_sealed > 0 && valid_sealed < runs);
    assert!(valid_raw < valid_sealed);
}

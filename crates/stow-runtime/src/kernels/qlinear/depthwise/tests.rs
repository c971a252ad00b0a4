//! The depthwise path's instruction-set loops against its plain ones.

use super::*;
use alloc::vec::Vec;

/// xorshift, as the other kernel tests'.
struct Rng(u64);

impl Rng {
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        lo + (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % (hi - lo + 1) as u64) as i64
    }
}

/// Random runs (1 to 300 sums: whole chunks of 32, masked ends, runs
/// shorter than one chunk), odd and even tap counts, inputs and weights
/// at the ends of their ranges (sums that wrap): `accumulate_on` with the
/// CPU's instruction set gives the plain loop's sums, and declines
/// nothing it should take.
#[test]
fn accumulate_on_every_isa_matches_the_plain_loop() {
    let mut rng = Rng(0x5eed_d3b7);
    let isa = Isa::detect();
    for case in 0..400 {
        let run = match case % 4 {
            0 => rng.int(1, 31),
            1 => 32 * rng.int(1, 6),
            _ => rng.int(1, 300),
        } as usize;
        let ntaps = rng.int(1, 25) as usize;
        let len = run + rng.int(0, 200) as usize;
        let phases: Vec<i16> = (0..len)
            .map(|_| match rng.int(0, 4) {
                0 => -255,
                1 => 255,
                _ => rng.int(-255, 255) as i16,
            })
            .collect();
        let taps: Vec<(usize, i32)> = (0..ntaps)
            .map(|_| {
                let at = rng.int(0, (len - run) as i64) as usize;
                let w = match rng.int(0, 4) {
                    0 => -32_128,
                    1 => 32_127,
                    _ => rng.int(-32_128, 32_127),
                };
                (at, w as i32)
            })
            .collect();
        let mut want = vec![7i32; run];
        accumulate(&phases, &taps, &mut want);
        let mut got = vec![-7i32; run];
        accumulate_on(isa, &phases, &taps, &mut got);
        assert_eq!(got, want, "case {case}: run {run}, {ntaps} taps, {isa:?}");
        #[cfg(target_arch = "x86_64")]
        if isa == Isa::Vnni {
            let mut direct = vec![0i32; run];
            // SAFETY: `Isa::detect` found AVX-512 F, BW and VNNI.
            #[allow(unsafe_code)]
            let took = unsafe { x86::accumulate_vnni(&phases, &taps, &mut direct) };
            assert!(took, "case {case}: the VNNI loop declined");
            assert_eq!(direct, want, "case {case}");
        }
    }
}

/// A weight outside i16 or a run past the end of `phases`: the VNNI loop
/// declines (writing nothing) and `accumulate_on` still gives the plain
/// loop's sums.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_vnni_loop_declines_what_it_cannot_take() {
    if Isa::detect() != Isa::Vnni {
        return;
    }
    let phases = vec![3i16; 40];
    for taps in [vec![(0, 40_000)], vec![(0, 2), (20, 1)]] {
        let mut sums = vec![5i32; 30];
        // SAFETY: `Isa::detect` found AVX-512 F, BW and VNNI.
        #[allow(unsafe_code)]
        let took = unsafe { x86::accumulate_vnni(&phases, &taps, &mut sums) };
        assert!(!took);
        assert_eq!(sums, vec![5; 30]);
    }
}

std::thread_local! {
    /// Shares the channel-block path ([`blocks`]) ran on this test's
    /// thread.
    pub(in super::super) static BLOCK_RUNS: core::cell::Cell<usize> =
        const { core::cell::Cell::new(0) };
}

std::thread_local! {
    /// Shares the four-taps-per-instruction path ([`quads`]) ran on this
    /// test's thread.
    pub(in super::super) static QUAD_RUNS: core::cell::Cell<usize> =
        const { core::cell::Cell::new(0) };
}

std::thread_local! {
    /// Makes the direct path take bands of rows (for timing them against
    /// the blocks).
    pub(in super::super) static FORCE_BANDS: core::cell::Cell<bool> =
        const { core::cell::Cell::new(false) };
}

//! The sweep's arithmetic: subset sums as bitsets, the joint fit of closed
//! runs, and the restarts' sequence and shuffles.

/// Subset sums as a bitset over units.
#[derive(Clone)]
pub(super) struct Bits(Vec<u64>);

impl Bits {
    pub(super) fn new(units: u64) -> Self {
        let mut b = Bits(vec![0; (units as usize + 1).div_ceil(64)]);
        b.0[0] = 1;
        b
    }

    /// Adds an item of `s` units: every sum so far, plus `s`.
    pub(super) fn add(&mut self, s: u64) {
        let (w, r) = ((s / 64) as usize, (s % 64) as u32);
        let n = self.0.len();
        for i in (0..n).rev() {
            if i < w {
                break;
            }
            let lo = self.0[i - w] << r;
            let hi = if r > 0 && i > w {
                self.0[i - w - 1] >> (64 - r)
            } else {
                0
            };
            self.0[i] |= lo | hi;
        }
    }

    /// The largest sum at most `x` units.
    pub(super) fn best_below(&self, x: u64) -> u64 {
        let top = (x as usize).min(self.0.len() * 64 - 1);
        let (mut w, r) = (top / 64, top % 64);
        let mut word = self.0[w] & (u64::MAX >> (63 - r));
        loop {
            if word != 0 {
                return (w * 64 + 63 - word.leading_zeros() as usize) as u64;
            }
            if w == 0 {
                return 0;
            }
            w -= 1;
            word = self.0[w];
        }
    }
}

/// Nodes [`joint_fit`] may spend before giving up (and not pruning).
pub(super) const JOINT_NODES: u32 = 256;

/// Most buffers [`joint_fit`] assigns.
pub(super) const JOINT_ITEMS: usize = 24;

/// Whether the `items` from `x` on (largest first) can go into the
/// `runs` (what each run has left) so that what the runs leave empty is
/// at most `budget`, each item in one run or in none. `None` when the
/// node allowance `left` ran out.
pub(super) fn joint_fit(
    runs: &mut [u64],
    items: &[u64],
    x: usize,
    budget: u64,
    left: &mut u32,
) -> Option<bool> {
    let empty: u64 = runs.iter().sum();
    if empty <= budget {
        return Some(true);
    }
    let rest: u64 = items[x..].iter().sum();
    if x == items.len() || empty - budget > rest {
        return Some(false);
    }
    if *left == 0 {
        return None;
    }
    *left -= 1;
    let s = items[x];
    let mut out = Some(false);
    for r in 0..runs.len() {
        // Runs with as much room left are one choice.
        if runs[r] < s || runs[..r].contains(&runs[r]) {
            continue;
        }
        runs[r] -= s;
        let v = joint_fit(runs, items, x + 1, budget, left);
        runs[r] += s;
        match v {
            Some(true) => return Some(true),
            None => out = None,
            Some(false) => {}
        }
    }
    match joint_fit(runs, items, x + 1, budget, left) {
        Some(false) => out,
        v => v,
    }
}

/// The Luby sequence 1, 1, 2, 1, 1, 2, 4, ... from `i = 1`.
pub(super) fn luby(i: u64) -> u64 {
    let mut i = i;
    loop {
        let k = 64 - i.leading_zeros();
        if i == (1u64 << k) - 1 {
            return 1 << (k - 1);
        }
        i -= (1u64 << (k - 1)) - 1;
    }
}

pub(super) fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub(super) fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

//! Unit tests of the sweep's subset sums, joint fit and restart sequence
//! against brute force.

use super::fill::*;

/// Every subset sum of `items` (brute force).
fn sums(items: &[u64]) -> Vec<u64> {
    let mut v: Vec<u64> = (0u32..1 << items.len())
        .map(|m| {
            (0..items.len())
                .filter(|&j| m >> j & 1 == 1)
                .map(|j| items[j])
                .sum()
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[test]
fn bitset_subset_sums_match_brute_force() {
    let mut x = 1u64;
    for _ in 0..300 {
        x = splitmix(x);
        let units = 1 + x % 300;
        let n = (x >> 20) % 9;
        let items: Vec<u64> = (0..n)
            .map(|j| 1 + splitmix(x + j) % units.min(130))
            .collect();
        let mut bits = Bits::new(units);
        for &s in &items {
            bits.add(s);
        }
        let all = sums(&items);
        for q in 0..=units {
            let want = all.iter().copied().filter(|&s| s <= q).max().unwrap_or(0);
            assert_eq!(bits.best_below(q), want, "{items:?} up to {q}");
        }
    }
}

/// Brute force: every item to one run or none.
fn fits(runs: &mut [u64], items: &[u64], budget: u64) -> bool {
    let Some((&s, rest)) = items.split_first() else {
        return runs.iter().sum::<u64>() <= budget;
    };
    for r in 0..runs.len() {
        if runs[r] >= s {
            runs[r] -= s;
            let ok = fits(runs, rest, budget);
            runs[r] += s;
            if ok {
                return true;
            }
        }
    }
    fits(runs, rest, budget)
}

#[test]
fn joint_fit_matches_brute_force() {
    let mut x = 7u64;
    for _ in 0..2000 {
        x = splitmix(x);
        let nr = 1 + x % 4;
        let ni = (x >> 8) % 7;
        let mut runs: Vec<u64> = (0..nr).map(|j| 1 + splitmix(x ^ j) % 20).collect();
        let mut items: Vec<u64> = (0..ni).map(|j| 1 + splitmix(x + 99 + j) % 12).collect();
        items.sort_unstable_by(|a, b| b.cmp(a));
        let budget = (x >> 30) % 6;
        let want = fits(&mut runs.clone(), &items, budget);
        let mut left = u32::MAX;
        assert_eq!(
            joint_fit(&mut runs, &items, 0, budget, &mut left),
            Some(want),
            "{runs:?} {items:?} {budget}"
        );
    }
}

#[test]
fn luby_sequence() {
    let v: Vec<u64> = (1..=15).map(luby).collect();
    assert_eq!(v, [1, 1, 2, 1, 1, 2, 4, 1, 1, 2, 1, 1, 2, 4, 8]);
}

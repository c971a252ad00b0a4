//! Row inference: can the sections that must get a buffer at the current
//! offset all get one?

use super::Dfs;

impl Dfs {
    /// At a node at offset `cur`, after a placement with tie key `last`:
    /// a section whose unplaced bytes fill it exactly from `cur` to the cap
    /// (its level is `cur`; [`Dfs::consistent`] lists them in `row_full`,
    /// ascending) must get its next buffer at exactly `cur`.
    /// Only an unplaced buffer whose min offset is `cur` now can still go
    /// there (whatever canonical order places from now on ends above
    /// `cur`, so a lower min offset can only rise past it), with a tie key
    /// canonical order still allows, and buffers at one offset never share
    /// a step. So the full sections must be covered by disjoint lifetimes
    /// of such buffers, which a sweep over the sections decides. Without
    /// it, a full section nothing could fill any more was noticed only
    /// once the offset rose past it, after every combination of the rest
    /// of the row had been tried.
    pub(super) fn row_fillable(&mut self, range: (u32, u32), cur: u64, last: u32) -> bool {
        let Some(span) = &self.span else {
            return true;
        };
        if !(self.flags.section_inference && self.flags.canonical && self.flags.monotonic_floor) {
            return true;
        }
        let (Some(&first), Some(&last_full)) = (self.row_full.first(), self.row_full.last()) else {
            return true;
        };
        self.row_starts.clear();
        let mut from = first;
        for &s in &self.row_full {
            let s = s as usize;
            for &u in &self.sections[s][..self.live[s] as usize] {
                let u = u as usize;
                let at_cur = match self.pin[u] {
                    None => self.min_off[u] == cur,
                    Some(p) => p == cur && self.min_off[u] <= cur,
                };
                if at_cur && self.tie[u] >= last {
                    let start = span[u].0.max(range.0);
                    from = from.min(start);
                    self.row_starts.push((start, span[u].1.min(range.1)));
                }
            }
        }
        if self.row_starts.is_empty() {
            return false;
        }
        let verdict = self.sweep(first, last_full, from);
        #[cfg(test)]
        assert_eq!(
            verdict,
            covers(&self.row_full, &self.row_starts),
            "the sweep disagrees with a search for a cover: full {:?}, lifetimes {:?}",
            self.row_full,
            self.row_starts
        );
        verdict
    }

    /// The sweep of [`Dfs::row_fillable`] over the candidates in
    /// `row_starts` (start section, end section).
    fn sweep(&mut self, first: u32, last_full: u32, from: u32) -> bool {
        debug_assert!(from <= first);
        self.row_starts.sort_unstable();
        self.row_starts.dedup();
        // `reach[k]`: a set of disjoint lifetimes ending at or before
        // section `from + k` covers every full section before it. Past the
        // last full section anything goes.
        let (lo, hi) = (from as usize, last_full as usize + 1);
        self.row_reach.clear();
        self.row_reach.resize(hi - lo + 1, false);
        self.row_reach[0] = true;
        let (mut k, mut f) = (0, 0);
        for s in lo..hi {
            let here = self.row_reach[s - lo];
            let full = f < self.row_full.len() && self.row_full[f] as usize == s;
            if full {
                f += 1;
            }
            while k < self.row_starts.len() && self.row_starts[k].0 as usize == s {
                if here {
                    let end = (self.row_starts[k].1 as usize).min(hi);
                    self.row_reach[end - lo] = true;
                }
                k += 1;
            }
            if here && !full {
                self.row_reach[s + 1 - lo] = true;
            }
        }
        self.row_reach[hi - lo]
    }
}

/// Is there a set of pairwise disjoint lifetimes (`[start, end)` in
/// sections) among `lifetimes` covering every section of `full`? By
/// plain backtracking: the leftmost uncovered full section needs one of
/// the lifetimes over it (the answer depends only on where the free
/// sections start, so failures are remembered).
#[cfg(test)]
fn covers(full: &[u32], lifetimes: &[(u32, u32)]) -> bool {
    fn go(full: &[u32], lifetimes: &[(u32, u32)], free_from: u32, failed: &mut Vec<u32>) -> bool {
        let Some(&s) = full.iter().find(|&&s| s >= free_from) else {
            return true;
        };
        if failed.contains(&free_from) {
            return false;
        }
        let found = lifetimes
            .iter()
            .filter(|&&(a, b)| a >= free_from && a <= s && s < b)
            .any(|&(_, b)| go(full, lifetimes, b, failed));
        if !found {
            failed.push(free_from);
        }
        found
    }
    go(full, lifetimes, 0, &mut Vec::new())
}

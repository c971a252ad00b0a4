//! Row inference: can the sections that must get a buffer at the current
//! offset all get one?

use super::Dfs;

impl Dfs {
    /// At a node at offset `cur`, after a placement with tie key `last`:
    /// a section whose unplaced bytes fill it exactly from `cur` to the cap
    /// (its level is `cur`) must get its next buffer at exactly `cur`.
    /// Only an unplaced buffer whose min offset is `cur` now can still go
    /// there (whatever canonical order places from now on ends above
    /// `cur`, so a lower min offset can only rise past it), with a tie key
    /// canonical order still allows, and buffers at one offset never share
    /// a step. So the full sections must be covered by disjoint lifetimes
    /// of such buffers, which a sweep over the sections decides. Without
    /// it, a full section nothing could fill any more was noticed only
    /// once the offset rose past it, after every combination of the rest
    /// of the row had been tried.
    ///
    /// `lowest`, when given, lists the sections that can be full (those at
    /// the lowest level before the placement), else all are looked at.
    pub(super) fn row_fillable(
        &mut self,
        range: (u32, u32),
        cur: u64,
        last: u32,
        lowest: Option<&[u32]>,
    ) -> bool {
        let Some(span) = &self.span else {
            return true;
        };
        if !(self.flags.section_inference && self.flags.canonical && self.flags.monotonic_floor) {
            return true;
        }
        self.row_full.clear();
        let full = |s: &u32| {
            let total = self.total[*s as usize];
            total > 0 && self.cap.checked_sub(total) == Some(cur)
        };
        match lowest {
            Some(sections) => self.row_full.extend(sections.iter().filter(|s| full(s))),
            None => self.row_full.extend((range.0..range.1).filter(full)),
        }
        let (Some(&first), Some(&last_full)) = (self.row_full.first(), self.row_full.last()) else {
            return true;
        };
        let (first, end) = (first as usize, last_full as usize + 1);
        // Section boundary `p` is reached (a set of disjoint such lifetimes
        // ending at or before `p` covers every full section before it) when
        // `row_reach[p]` holds this call's stamp; every boundary up to the
        // first full section is. Stamps spare clearing, and going through
        // the sections in order, looking at each lifetime from every full
        // section it spans, spares sorting the lifetimes: each one starts
        // at or before the section it is seen from, where whether its start
        // is reached is already known.
        if self.row_reach.len() < self.sections.len() + 1 {
            self.row_reach = vec![0; self.sections.len() + 1];
        }
        self.row_stamp = self.row_stamp.wrapping_add(1);
        if self.row_stamp == 0 {
            self.row_reach.fill(0);
            self.row_stamp = 1;
        }
        let stamp = self.row_stamp;
        #[cfg(test)]
        let mut seen = Vec::new();
        let mut f = 0;
        // A run of adjacent full sections: the buffers over its first one,
        // then only those starting in each next one (the others were seen).
        for s in first..end {
            let full = self.row_full[f] as usize == s;
            if !full {
                if s <= first || self.row_reach[s] == stamp {
                    self.row_reach[s + 1] = stamp;
                }
                continue;
            }
            f += 1;
            let adjacent = s > first && self.row_full[f - 2] as usize == s - 1;
            let over: &[u32] = if adjacent {
                &self.starts_at[s]
            } else {
                &self.sections[s][..self.live[s] as usize]
            };
            for &u in over {
                let u = u as usize;
                if self.placed[u] {
                    continue;
                }
                let at_cur = match self.pin[u] {
                    None => self.min_off[u] == cur,
                    Some(p) => p == cur && self.min_off[u] <= cur,
                };
                if !at_cur || self.tie[u] < last {
                    continue;
                }
                let a = span[u].0.max(range.0) as usize;
                let b = span[u].1.min(range.1) as usize;
                #[cfg(test)]
                seen.push((a as u32, b as u32));
                if a <= first || self.row_reach[a] == stamp {
                    self.row_reach[b.min(end)] = stamp;
                }
            }
        }
        let verdict = self.row_reach[end] == stamp;
        #[cfg(test)]
        assert_eq!(
            verdict,
            covers(&self.row_full, &seen),
            "the sweep disagrees with a search for a cover: full {:?}, lifetimes {:?}",
            self.row_full,
            seen
        );
        verdict
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

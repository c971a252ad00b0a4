//! Section inference after a placement: every section's unplaced bytes
//! must still fit above its floor.

use super::Dfs;

impl Dfs {
    /// Spatial inference over the sections of the current part, after a
    /// placement at `cur`.
    ///
    /// With the unallocated floor, a section's unplaced members all go at
    /// or above the least of their min offsets (which is at or above every
    /// placed member's top, as each conflicts with all of them) and stack,
    /// so that least min offset plus the unplaced bytes must fit. It is
    /// checked here, where it is used, rather than kept up to date on
    /// every placement: raising the stored floors visited every section of
    /// every neighbour whose min offset rose (neighbours × their spans per
    /// placement, half of the search's time on MiniMalloc's D), where one
    /// member low enough (the section's witness, usually still low enough
    /// from the last look) settles a section here.
    pub(super) fn consistent(&mut self, range: (u32, u32), cur: u64) -> bool {
        let lazy = self.consistent_lazily(range, cur);
        #[cfg(test)]
        assert_eq!(
            lazy,
            self.consistent_by_scan(range, cur),
            "the witnesses gave another verdict than the floors' definition"
        );
        lazy
    }

    /// [`Dfs::consistent`] by its definition, scanning every unplaced
    /// member of every section: what the unit tests hold the witnesses to.
    #[cfg(test)]
    fn consistent_by_scan(&self, range: (u32, u32), cur: u64) -> bool {
        let monotonic = self.flags.canonical && self.flags.monotonic_floor;
        if !self.flags.section_inference && !monotonic {
            return true;
        }
        (range.0 as usize..range.1 as usize).all(|s| {
            let unplaced: Vec<usize> = self.sections[s]
                .iter()
                .map(|&u| u as usize)
                .filter(|&u| !self.placed[u])
                .collect();
            let total: u64 = unplaced.iter().map(|&u| self.size[u]).sum();
            if total == 0 {
                return true;
            }
            let mut floor = self.sections[s]
                .iter()
                .map(|&u| u as usize)
                .filter(|&u| self.placed[u])
                .map(|u| self.offset[u] + self.size[u])
                .max()
                .unwrap_or(0);
            if monotonic {
                floor = floor.max(cur);
            }
            if self.flags.unallocated_floor {
                let lowest = unplaced.iter().map(|&u| self.min_off[u]).min();
                floor = floor.max(lowest.unwrap_or(0));
            }
            let above = if self.flags.section_inference {
                total
            } else {
                0
            };
            floor.saturating_add(above) <= self.cap
        })
    }

    fn consistent_lazily(&mut self, range: (u32, u32), cur: u64) -> bool {
        let monotonic = self.flags.canonical && self.flags.monotonic_floor;
        if !self.flags.section_inference && !monotonic {
            return true;
        }
        let unallocated = self.flags.unallocated_floor;
        for s in range.0 as usize..range.1 as usize {
            let total = self.total[s];
            if total == 0 {
                continue;
            }
            let mut f = self.floor[s];
            if monotonic {
                f = f.max(cur);
            }
            let above = if self.flags.section_inference {
                total
            } else {
                0
            };
            if f.saturating_add(above) > self.cap {
                self.overflow = self.overflow.min(f.saturating_add(above));
                return false;
            }
            if !unallocated {
                continue;
            }
            // The floor may rise no higher than `room` for the unplaced
            // bytes to fit: one unplaced member at or below it suffices.
            let room = self.cap - above;
            let w = self.witness[s] as usize;
            if !self.placed[w] && self.min_off[w] <= room {
                continue;
            }
            let mut lowest = u64::MAX;
            let mut found = None;
            for &u in &self.sections[s][..self.live[s] as usize] {
                let m = self.min_off[u as usize];
                if m <= room {
                    found = Some(u);
                    break;
                }
                lowest = lowest.min(m);
            }
            match found {
                Some(u) => self.witness[s] = u,
                None => {
                    self.overflow = self.overflow.min(lowest.max(f).saturating_add(above));
                    return false;
                }
            }
        }
        true
    }
}

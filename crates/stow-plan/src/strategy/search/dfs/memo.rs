//! Dead states remembered: a node whose subtree was exhausted is not
//! searched again when another path reaches the same state.
//!
//! What a node's subtree can reach depends only on the unplaced buffers
//! of its part (the buffers it searches), their min offsets, the current
//! offset and tie key, and the part's sections (see [`Dfs::state_key`]).
//! Everything else the search reads is a function of those: each
//! section's unplaced bytes, the unplaced neighbours counted by hatless
//! pruning and the time cuts of decomposition follow from which buffers
//! are unplaced, and with the unallocated floor a section's stored floor
//! never changes a verdict (it is at most every unplaced member's min
//! offset, as each conflicts with every placed one). The placed buffers'
//! own offsets do not matter beyond the min offsets they impose: two
//! arrangements of the buffers below one skyline are one state.
//!
//! States are hashed (Zobrist: the XOR of a 128-bit hash of each unplaced
//! buffer with its min offset, kept up to date on every placement and
//! undo), and the hashes of exhausted nodes kept in a set, within one
//! decision run (one cap, one tie rule). A false hit needs two different
//! states with one 128-bit hash.

use super::Dfs;
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

/// At most this many dead states per run (16 bytes each, about twice that
/// in the table); when full, the set starts over.
const MAX_DEAD: usize = 1 << 18;

/// The dead states of one decision run.
#[derive(Clone, Default)]
pub(in crate::strategy::search) struct Dead {
    set: HashSet<u128, BuildHasherDefault<Folded>>,
}

impl Dead {
    pub fn clear(&mut self) {
        self.set.clear();
    }

    pub fn contains(&self, key: u128) -> bool {
        self.set.contains(&key)
    }

    pub fn insert(&mut self, key: u128) {
        if self.set.len() >= MAX_DEAD {
            self.set.clear();
        }
        self.set.insert(key);
    }
}

/// The keys are uniform hashes already: the table's hash is their low bits
/// folded with the high ones.
#[derive(Default)]
struct Folded(u64);

impl Hasher for Folded {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, k: u128) {
        self.0 = (k as u64) ^ ((k >> 64) as u64);
    }
}

/// SplitMix64's finaliser: a bijection with full avalanche.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The hash of unplaced buffer `u` at min offset `m`: two independent
/// 64-bit halves.
pub(super) fn piece(u: u32, m: u64) -> u128 {
    let u = u64::from(u);
    let a = mix(mix(u ^ 0x5851_F42D_4C95_7F2D) ^ m);
    let b = mix(mix(u.wrapping_add(0x1405_7B7E_F767_814F)) ^ m.rotate_left(29));
    (u128::from(a) << 64) | u128::from(b)
}

/// The hash of a node's context: its part's section range, the current
/// offset and the last tie key.
fn context(range: (u32, u32), cur: u64, last: u32) -> u128 {
    let r = (u64::from(range.0) << 32) | u64::from(range.1);
    let a = mix(mix(r ^ 0x2545_F491_4F6C_DD1D) ^ cur) ^ u64::from(last);
    let b = mix(mix(r.rotate_left(7) ^ 0x9E37_79B9_7F4A_7C15) ^ cur.rotate_left(13))
        ^ u64::from(last).rotate_left(40);
    (u128::from(mix(a)) << 64) | u128::from(mix(b))
}

impl Dfs {
    /// Is remembering dead states sound under these switches? The state
    /// key leaves out the section floors, which only the unallocated floor
    /// makes redundant.
    pub(super) fn memo_on(&self) -> bool {
        self.flags.memo && self.flags.unallocated_floor
    }

    /// The hash of every unplaced buffer of the part with its min offset,
    /// computed from scratch (at the start of a decision).
    pub(super) fn unplaced_hash(&self, bufs: impl Iterator<Item = u32>) -> u128 {
        bufs.filter(|&u| !self.placed[u as usize])
            .fold(0, |h, u| h ^ piece(u, self.min_off[u as usize]))
    }

    /// The key of a node searching the unplaced buffers of its part (the
    /// part-wide hash less the buffers outside it) at `cur` after tie key
    /// `last`.
    pub(super) fn state_key(&self, bufs: &[u32], range: (u32, u32), cur: u64, last: u32) -> u128 {
        let local = self.hash ^ self.outside;
        #[cfg(test)]
        assert_eq!(
            local,
            self.unplaced_hash(bufs.iter().copied()),
            "the kept hash is not that of the node's unplaced buffers"
        );
        #[cfg(not(test))]
        let _ = bufs;
        local ^ context(range, cur, last)
    }
}

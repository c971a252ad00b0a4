//! Randomised restarts and the lockstep change only the order the
//! search visits candidates in, never what it can reach: on small
//! random instances every randomised preorder, under every switch
//! combination, finds a layout exactly when one exists (checked
//! against an exhaustive search with every pruning off), and the
//! lockstep gives the same answer on 1, 2 and 3 threads.

use super::*;
use crate::problem::Buffer;

/// A small seeded generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    }
}

fn random_problem(seed: u64, n: usize) -> Problem {
    let mut r = Rng(seed);
    let buffers = (0..n)
        .map(|_| {
            let start = r.below(8) as u32;
            let end = start + 1 + r.below(5) as u32;
            Buffer::new(1 + r.below(6), start, end, 1)
        })
        .collect();
    Problem::new(buffers, ConflictModel::Lifetimes)
}

fn exhaustive(problem: &Problem, cap: u64) -> bool {
    let part: Vec<usize> = (0..problem.buffers.len()).collect();
    let mut dfs = build(
        problem,
        &part,
        SearchOptions::combinations().next().unwrap(),
    );
    dfs.set_preorder(Heuristic {
        keys: "TWA",
        ties: Ties::Preorder,
        seed: 0,
        nodes: u64::MAX,
    });
    let far = Instant::now() + std::time::Duration::from_secs(60);
    match dfs.decide(cap, u64::MAX / 4, far) {
        Outcome::Found(_) => true,
        Outcome::Infeasible(_) => false,
        Outcome::Limit => panic!("no limit was set"),
    }
}

#[test]
fn restart_lanes_never_repeat_each_other() {
    for limit in [512, 1_200, 65_536, u64::MAX / 4, u64::MAX] {
        let lanes: Vec<u64> = lane_seeds(limit).collect();
        for k in 0..1_000 {
            for a in 0..lanes.len() {
                for b in a + 1..lanes.len() {
                    assert_ne!(
                        restart_seed(lanes[a], k),
                        restart_seed(lanes[b], k),
                        "limit {limit}, restart {k}"
                    );
                }
            }
        }
    }
}

#[test]
fn setup_entries_count_what_build_writes() {
    for seed in 0..20 {
        let p = random_problem(seed, 12);
        let part: Vec<usize> = (0..p.buffers.len()).filter(|&i| !p.is_trivial(i)).collect();
        let sub = p.subproblem(&part);
        let neighbours: usize = sub.conflict_lists().iter().map(Vec::len).sum();
        // Section memberships before equal sections are merged: every
        // elementary segment a buffer's lifetime covers.
        let mut points: Vec<u32> = sub
            .buffers
            .iter()
            .flat_map(|b| [b.lifetime.start, b.lifetime.end])
            .collect();
        points.sort_unstable();
        points.dedup();
        let spanned: usize = sub
            .buffers
            .iter()
            .map(|b| {
                points
                    .iter()
                    .filter(|&&t| b.lifetime.start <= t && t < b.lifetime.end)
                    .count()
            })
            .sum();
        assert_eq!(
            setup_entries(&p, &part) as usize,
            neighbours + part.len() + spanned,
            "seed {seed}"
        );
    }
}

#[test]
fn randomised_preorders_find_a_layout_whenever_one_exists() {
    let far = Instant::now() + std::time::Duration::from_secs(600);
    for seed in 0..120u64 {
        let p = random_problem(seed, 4 + (seed % 4) as usize);
        let part: Vec<usize> = (0..p.buffers.len()).collect();
        let lo = crate::lower_bound(&p);
        for cap in [lo, lo + 1, lo + 3] {
            let feasible = exhaustive(&p, cap);
            for (m, flags) in SearchOptions::combinations().enumerate() {
                if m % 7 != (seed % 7) as usize {
                    continue; // A seventh of the combinations per instance.
                }
                let mut dfs = build(&p, &part, flags);
                for k in 0..4u64 {
                    dfs.set_preorder(Heuristic {
                        keys: ["TWA", "TAW", "WAT", "TCA"][k as usize],
                        ties: [Ties::Preorder, Ties::Time][(k % 2) as usize],
                        seed: seed * 31 + k + 1,
                        nodes: u64::MAX,
                    });
                    let found = match dfs.decide(cap, u64::MAX / 4, far) {
                        Outcome::Found(layout) => {
                            assert!(height_of(&layout, &dfs.size) <= cap);
                            true
                        }
                        Outcome::Infeasible(_) => false,
                        Outcome::Limit => panic!("no limit was set"),
                    };
                    assert_eq!(
                        found, feasible,
                        "seed {seed}, cap {cap}, switches {m}, run {k}"
                    );
                }
            }
        }
    }
}

/// The memo changes no verdict, and it is exercised: in a test build
/// every hit is also searched again without it and must be dead (see
/// `Dfs::assert_dead`), and the kept hash is checked against one
/// computed from scratch at every node.
#[test]
fn remembered_dead_states_change_no_verdict() {
    let far = Instant::now() + std::time::Duration::from_secs(600);
    let mut hits = 0;
    for seed in 0..150u64 {
        let p = random_problem(7000 + seed, 8 + (seed % 6) as usize);
        let part: Vec<usize> = (0..p.buffers.len()).collect();
        let lo = crate::lower_bound(&p);
        for cap in [lo, lo + 1, lo + 2] {
            let verdicts: Vec<bool> = [false, true]
                .into_iter()
                .map(|memo| {
                    let flags = SearchOptions {
                        memo,
                        ..SearchOptions::default()
                    };
                    let mut dfs = build(&p, &part, flags);
                    dfs.set_preorder(Heuristic {
                        keys: ["TWA", "TAW", "WAT"][(seed % 3) as usize],
                        ties: [Ties::Preorder, Ties::Time][(seed % 2) as usize],
                        seed: 0,
                        nodes: u64::MAX,
                    });
                    let found = match dfs.decide(cap, u64::MAX / 4, far) {
                        Outcome::Found(_) => true,
                        Outcome::Infeasible(_) => false,
                        Outcome::Limit => panic!("no limit was set"),
                    };
                    hits += dfs.prunes.memo;
                    found
                })
                .collect();
            assert_eq!(verdicts[0], verdicts[1], "seed {seed}, cap {cap}");
        }
    }
    assert!(
        hits > 0,
        "no state was found twice: the memo was not exercised"
    );
}

#[test]
fn the_lockstep_answer_does_not_depend_on_the_thread_count() {
    let far = Instant::now() + std::time::Duration::from_secs(600);
    for seed in 0..40u64 {
        let p = random_problem(1000 + seed, 10 + (seed % 8) as usize);
        let part: Vec<usize> = (0..p.buffers.len()).collect();
        let lo = crate::lower_bound(&p);
        let answers: Vec<Option<Vec<u64>>> = (1..=3)
            .map(|threads| {
                let mut dfs = build(&p, &part, SearchOptions::ALL_ON);
                let mut left = u64::MAX;
                match decide(&mut dfs, lo + 1, 1 << 40, None, far, &mut left, threads).0 {
                    Outcome::Found(layout) => Some(layout),
                    _ => None,
                }
            })
            .collect();
        assert_eq!(answers[0], answers[1], "seed {seed}");
        assert_eq!(answers[0], answers[2], "seed {seed}");
    }
}

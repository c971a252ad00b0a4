//! Properties every plan must have, over random instances.
//!
//! The oracles here share no code with the crate: overlaps are checked pair
//! by pair, and tiny instances are solved exactly by trying every order of
//! lowest-fit placement (an optimal layout, read bottom up, is one of them).

use proptest::prelude::*;
use std::time::Duration;
use stow_plan::testing::{perfect_packing, random_explicit, random_lifetimes};
use stow_plan::{
    lower_bound, plan, BufferId, FirstFitPool, Plan, PlanError, PlanOptions, Pool, PoolId, Problem,
    Strategy,
};

const SINGLE: [Strategy; 6] = [
    Strategy::Naive,
    Strategy::GreedySize,
    Strategy::GreedyBreadth,
    Strategy::FirstFitPool,
    Strategy::PeakSuppression,
    Strategy::Search,
];

fn options(strategy: Strategy) -> PlanOptions {
    PlanOptions {
        strategy,
        time_limit: Duration::from_millis(100),
        ..Default::default()
    }
}

/// Pairwise: no two conflicting buffers in one pool share a byte, every
/// offset is aligned, pins are kept, and the arena covers every buffer.
fn assert_valid(problem: &Problem, plan: &Plan) {
    let n = problem.buffers.len();
    assert_eq!(plan.offsets.len(), n);
    for (i, b) in problem.buffers.iter().enumerate() {
        let o = plan.offsets[i];
        assert_eq!(o % b.align, 0, "buffer {i} misaligned at {o}");
        if let Some(pin) = b.pinned_offset {
            assert_eq!(o, pin, "buffer {i} moved off its pin");
        }
        let pool = plan.pool[i].index();
        assert!(
            o + b.size <= plan.pool_bytes[pool],
            "buffer {i} above its pool's top"
        );
        for j in i + 1..n {
            let c = &problem.buffers[j];
            if b.size == 0 || c.size == 0 || plan.pool[i] != plan.pool[j] {
                continue;
            }
            if !problem.conflict(BufferId(i as u32), BufferId(j as u32)) {
                continue;
            }
            let p = plan.offsets[j];
            assert!(
                o + b.size <= p || p + c.size <= o,
                "buffers {i} [{o}, {}) and {j} [{p}, {}) overlap",
                o + b.size,
                p + c.size
            );
        }
    }
    assert!(plan.arena_bytes >= plan.lower_bound || !problem.pools.is_empty());
}

/// The smallest arena over every order of lowest-fit placement (exact for
/// problems without pins).
fn brute_force_optimum(problem: &Problem) -> u64 {
    let n = problem.buffers.len();
    let mut order: Vec<usize> = (0..n).collect();
    let mut best = u64::MAX;
    permute(&mut order, 0, &mut |order| {
        let mut placed: Vec<(usize, u64)> = Vec::new();
        let mut top = 0;
        for &i in order {
            let b = &problem.buffers[i];
            let blockers: Vec<(u64, u64)> = placed
                .iter()
                .filter(|&&(j, _)| {
                    b.size > 0
                        && problem.buffers[j].size > 0
                        && problem.conflict(BufferId(i as u32), BufferId(j as u32))
                })
                .map(|&(j, o)| (o, o + problem.buffers[j].size))
                .collect();
            let round = |v: u64| v.div_ceil(b.align) * b.align;
            let mut candidates: Vec<u64> = blockers.iter().map(|&(_, e)| round(e)).collect();
            candidates.push(0);
            candidates.sort_unstable();
            let at = candidates
                .into_iter()
                .find(|&c| blockers.iter().all(|&(s, e)| c + b.size <= s || e <= c))
                .expect("the top of everything is always free");
            placed.push((i, at));
            top = top.max(at + b.size);
        }
        best = best.min(top);
    });
    best
}

fn permute(v: &mut Vec<usize>, k: usize, f: &mut impl FnMut(&[usize])) {
    if k == v.len() {
        f(v);
        return;
    }
    for i in k..v.len() {
        v.swap(k, i);
        permute(v, k + 1, f);
        v.swap(k, i);
    }
}

fn unpinned(mut p: Problem) -> Problem {
    for b in &mut p.buffers {
        b.pinned_offset = None;
    }
    p
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_strategy_gives_a_valid_plan_on_lifetimes(
        seed in any::<u64>(), n in 0usize..60, steps in 1u32..40, max_size in 1u64..5000,
    ) {
        let p = random_lifetimes(seed, n, steps, max_size);
        let bound = lower_bound(&p);
        for s in SINGLE.iter().copied().chain([Strategy::Auto]) {
            let plan = plan(&p, &options(s)).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_valid(&p, &plan);
            prop_assert!(plan.arena_bytes >= bound, "{s} below the lower bound");
            prop_assert_eq!(plan.lower_bound, bound);
        }
    }

    #[test]
    fn every_strategy_gives_a_valid_plan_on_conflict_graphs(
        seed in any::<u64>(), n in 0usize..40, density in 0u64..100, max_size in 1u64..1000,
    ) {
        let p = random_explicit(seed, n, density, max_size);
        let bound = lower_bound(&p);
        for s in SINGLE.iter().copied().chain([Strategy::Auto]) {
            let plan = plan(&p, &options(s)).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_valid(&p, &plan);
            prop_assert!(plan.arena_bytes >= bound, "{s} below the lower bound");
        }
    }

    #[test]
    fn auto_is_never_worse_than_a_single_strategy(
        seed in any::<u64>(), n in 1usize..40, steps in 1u32..30, explicit in any::<bool>(),
    ) {
        let p = if explicit {
            random_explicit(seed, n, 40, 300)
        } else {
            random_lifetimes(seed, n, steps, 300)
        };
        let auto = plan(&p, &options(Strategy::Auto)).unwrap();
        for s in [Strategy::Naive, Strategy::GreedySize, Strategy::GreedyBreadth, Strategy::FirstFitPool] {
            let single = plan(&p, &options(s)).unwrap();
            prop_assert!(auto.arena_bytes <= single.arena_bytes,
                "auto {} > {s} {}", auto.arena_bytes, single.arena_bytes);
        }
    }

    #[test]
    fn search_is_exact_on_tiny_instances(
        seed in any::<u64>(), n in 1usize..7, steps in 1u32..8, explicit in any::<bool>(),
    ) {
        let p = unpinned(if explicit {
            random_explicit(seed, n, 50, 40)
        } else {
            random_lifetimes(seed, n, steps, 40)
        });
        let optimum = brute_force_optimum(&p);
        let searched = plan(&p, &PlanOptions { time_limit: Duration::from_secs(5), ..options(Strategy::Search) }).unwrap();
        assert_valid(&p, &searched);
        prop_assert!(searched.optimal, "search did not prove optimality on {n} buffers");
        prop_assert_eq!(searched.arena_bytes, optimum);
        let auto = plan(&p, &PlanOptions { time_limit: Duration::from_secs(5), ..options(Strategy::Auto) }).unwrap();
        prop_assert_eq!(auto.arena_bytes, optimum);
        prop_assert!(lower_bound(&p) <= optimum);
    }

    #[test]
    fn search_reaches_the_bound_on_perfect_packings(
        seed in any::<u64>(), steps in 2u32..12, pieces in 2usize..14,
    ) {
        let height = 1000;
        let p = perfect_packing(seed, steps, height, pieces);
        prop_assert_eq!(lower_bound(&p), height);
        let searched = plan(&p, &PlanOptions { time_limit: Duration::from_secs(10), ..options(Strategy::Search) }).unwrap();
        assert_valid(&p, &searched);
        prop_assert_eq!(searched.arena_bytes, height);
        prop_assert!(searched.optimal);
    }

    #[test]
    fn every_search_switch_combination_finds_the_same_optimum(
        seed in any::<u64>(), n in 1usize..9, explicit in any::<bool>(), mask in 0u32..2048,
    ) {
        let p = unpinned(if explicit {
            random_explicit(seed, n, 50, 60)
        } else {
            random_lifetimes(seed, n, 6, 60)
        });
        let all_on = plan(&p, &PlanOptions { time_limit: Duration::from_secs(5), ..options(Strategy::Search) }).unwrap();
        let switches = stow_plan::SearchOptions::combinations().nth(mask as usize).unwrap();
        let some = plan(&p, &PlanOptions { time_limit: Duration::from_secs(5), search: switches, ..options(Strategy::Search) }).unwrap();
        assert_valid(&p, &some);
        prop_assert!(all_on.optimal, "all switches on: not proven");
        prop_assert!(some.optimal, "{:?}: not proven ({} nodes, {:?}, limit hit {})",
            switches, some.stats.nodes, some.stats.elapsed, some.stats.limit_hit);
        prop_assert_eq!(all_on.arena_bytes, some.arena_bytes);
    }

    #[test]
    fn pools_respect_capacities_or_say_how_short(
        seed in any::<u64>(), n in 1usize..40, fast in 0u64..4000, slow in 0u64..20000,
        pin_some in any::<bool>(),
    ) {
        let mut p = random_lifetimes(seed, n, 12, 1000);
        for (i, b) in p.buffers.iter_mut().enumerate() {
            b.pinned_offset = None;
            if pin_some && i % 5 == 0 {
                b.pool = Some(PoolId(0));
            }
        }
        let p = p.with_pools(vec![Pool::new("fast", fast), Pool::new("slow", slow)]);
        match plan(&p, &options(Strategy::Auto)) {
            Ok(plan) => {
                assert_valid(&p, &plan);
                prop_assert!(plan.pool_bytes[0] <= fast && plan.pool_bytes[1] <= slow);
                for (i, b) in p.buffers.iter().enumerate() {
                    if b.pool == Some(PoolId(0)) {
                        prop_assert_eq!(plan.pool[i], PoolId(0));
                    }
                }
            }
            Err(PlanError::DoesNotFit { pool, needed, capacity, short }) => {
                prop_assert!(pool == "fast" || pool == "slow");
                prop_assert!(needed > capacity);
                prop_assert_eq!(short, needed - capacity);
                let cap = if pool == "fast" { fast } else { slow };
                prop_assert_eq!(capacity, cap);
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    #[test]
    fn admission_order_decides_who_gets_the_fast_pool(
        seed in any::<u64>(), n in 2usize..30, order_seed in any::<u64>(),
    ) {
        let mut p = random_lifetimes(seed, n, 10, 1000);
        for b in p.buffers.iter_mut() {
            b.pinned_offset = None;
        }
        // A fast pool exactly as large as the buffer listed first: that one
        // must get it, whatever its size among the others.
        let first = (order_seed % n as u64) as usize;
        let fast = p.buffers[first].size;
        let p = p.with_pools(vec![Pool::new("fast", fast), Pool::unbounded("slow")]);
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.swap(0, first);
        let options = PlanOptions { admission: Some(order), ..options(Strategy::Auto) };
        let plan = plan(&p, &options).unwrap();
        assert_valid(&p, &plan);
        prop_assert!(plan.pool_bytes[0] <= fast);
        prop_assert_eq!(plan.pool[first], PoolId(0));
    }

    #[test]
    fn sparse_step_numbers_plan_like_dense_ones(
        seed in any::<u64>(), n in 1usize..50, steps in 1u32..30,
    ) {
        // Far-apart step numbers take the sorting paths of the bound and of
        // the time index; dense ones take the direct tables.
        let dense = unpinned(random_lifetimes(seed, n, steps, 500));
        let mut sparse = dense.clone();
        for b in &mut sparse.buffers {
            b.lifetime.start = b.lifetime.start * 100_000 + 7;
            b.lifetime.end = b.lifetime.end * 100_000 + 7;
        }
        prop_assert_eq!(lower_bound(&dense), lower_bound(&sparse));
        for s in [Strategy::GreedySize, Strategy::GreedyBreadth, Strategy::PeakSuppression] {
            let a = plan(&dense, &options(s)).unwrap();
            let b = plan(&sparse, &options(s)).unwrap();
            prop_assert_eq!(a.arena_bytes, b.arena_bytes, "{}", s);
        }
    }

    #[test]
    fn first_fit_pool_never_hands_out_overlapping_blocks(
        ops in proptest::collection::vec((any::<bool>(), 1u64..300, 0usize..64), 1..200),
    ) {
        let mut pool = FirstFitPool::new(4096, 16).unwrap();
        let mut live: Vec<(u64, u64)> = Vec::new();
        for (alloc, size, pick) in ops {
            if alloc || live.is_empty() {
                if let Ok(a) = pool.alloc(size) {
                    prop_assert_eq!(a.offset % 16, 0);
                    prop_assert!(a.size >= size && a.offset + a.size <= 4096);
                    for &(o, s) in &live {
                        prop_assert!(a.offset + a.size <= o || o + s <= a.offset);
                    }
                    live.push((a.offset, a.size));
                } else {
                    let used: u64 = live.iter().map(|&(_, s)| s).sum();
                    prop_assert!(pool.largest_free() < size.div_ceil(16) * 16 || used + size > 4096);
                }
            } else {
                let (o, _) = live.swap_remove(pick % live.len());
                pool.free(o).unwrap();
                prop_assert!(pool.free(o).is_err(), "double free accepted");
            }
            prop_assert_eq!(pool.in_use(), live.iter().map(|&(_, s)| s).sum::<u64>());
        }
        for (o, _) in live.drain(..) {
            pool.free(o).unwrap();
        }
        // Coalescing: with everything freed, one block spans the pool again.
        prop_assert_eq!(pool.largest_free(), 4096);
    }
}

#[test]
fn worked_example_reaches_its_optimum_43() {
    let p = stow_plan::testing::worked_example();
    let greedy = plan(&p, &options(Strategy::GreedySize)).unwrap();
    let auto = plan(&p, &options(Strategy::Auto)).unwrap();
    assert_eq!(lower_bound(&p), 43);
    assert_eq!(auto.arena_bytes, 43);
    assert!(auto.optimal);
    assert!(greedy.arena_bytes >= 43);
    assert_eq!(brute_force_optimum(&unpinned(p)), 43);
}

#[test]
fn capacity_below_the_bound_says_how_short() {
    let p = stow_plan::testing::worked_example();
    let err = plan(
        &p,
        &PlanOptions {
            capacity: Some(40),
            ..options(Strategy::Auto)
        },
    )
    .unwrap_err();
    match err {
        PlanError::DoesNotFit {
            pool,
            needed,
            capacity,
            short,
        } => {
            assert_eq!(
                (pool.as_str(), needed, capacity, short),
                ("arena", 43, 40, 3)
            );
        }
        e => panic!("unexpected {e}"),
    }
}

/// Found by `every_search_switch_combination_finds_the_same_optimum`:
/// hatless pruning without dynamic ordering cut off candidates that sat
/// lower in the static order, and claimed 62 optimal where 59 is.
#[test]
fn hatless_pruning_needs_candidates_lowest_first() {
    let p = unpinned(random_lifetimes(5735557136392805841, 5, 6, 60));
    let optimum = brute_force_optimum(&p);
    assert_eq!(optimum, 59);
    let switches = stow_plan::SearchOptions::combinations().nth(137).unwrap();
    assert!(switches.hatless && !switches.dynamic_ordering);
    let r = plan(
        &p,
        &PlanOptions {
            time_limit: Duration::from_secs(5),
            search: switches,
            ..options(Strategy::Search)
        },
    )
    .unwrap();
    assert_eq!(r.arena_bytes, optimum);
}

//! The time sweep (`strategy/sweep.rs`): on perfect packings it is complete,
//! so it must pack every small cut rectangle at its bound; everywhere,
//! whatever it returns must pass the crate's independent checker within
//! the cap it was given; and as the first share of a `search` decision
//! (`PlanOptions::sweep_permille`) the plan still passes the checker.

use std::time::{Duration, Instant};
use stow_plan::testing::{cut_arena, random_lifetimes, sweep_pack, CutProfile};
use stow_plan::{check, lower_bound, plan, PlanOptions, Strategy};

mod common;
use common::{as_plan, SMALL};

fn far() -> Instant {
    Instant::now() + Duration::from_secs(600)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Perfect packings: every free byte at every start time must be
    /// filled by the buffers starting there, which the sweep tries in
    /// every order, so it packs every small cut rectangle at its bound
    /// (well within the node limit at this size) and the layout passes
    /// the checker.
    #[test]
    fn sweep_packs_every_small_perfect_cut_rectangle(
        seed in 0u64..1_000_000, grid in 12u64..36,
    ) {
        let (p, _) = cut_arena(seed, grid, grid as u32, SMALL);
        let (found, nodes) = sweep_pack(&p, grid, 5_000_000, far());
        let offsets = found.expect("a perfect packing is always found");
        proptest::prop_assert!(nodes <= 5_000_000);
        let plan = as_plan(&p, offsets);
        proptest::prop_assert_eq!(plan.arena_bytes, grid);
        proptest::prop_assert!(check(&p, &plan).is_ok(), "{:?}", check(&p, &plan));
    }

    /// Anything: random lifetimes (no pins), cut rectangles with slack,
    /// caps at and above the bound. The sweep may fail where there is
    /// slack, but whatever it returns fits the cap and passes the checker.
    #[test]
    fn whatever_the_sweep_returns_passes_the_checker(
        seed in 0u64..1_000_000, n in 1usize..40, steps in 1u32..30,
        max_size in 0u64..40, extra in 0u64..8, drop in 0u64..40, cut in proptest::bool::ANY,
    ) {
        let p = if cut {
            cut_arena(seed, 24, 24, CutProfile { drop, ..SMALL }).0
        } else {
            let mut p = random_lifetimes(seed, n, steps, max_size);
            for b in &mut p.buffers {
                b.pinned_offset = None;
            }
            p
        };
        let cap = lower_bound(&p) + extra;
        let (found, _) = sweep_pack(&p, cap, 200_000, far());
        if let Some(offsets) = found {
            let plan = as_plan(&p, offsets);
            proptest::prop_assert!(plan.arena_bytes <= cap, "{} > {cap}", plan.arena_bytes);
            proptest::prop_assert!(check(&p, &plan).is_ok(), "{:?}", check(&p, &plan));
        }
    }
}

/// With the sweep's share on, `search` packs cut rectangles at the bound
/// (the sweep or, when it fails, the search after it) and the plan passes
/// the checker; a pinned buffer (which the sweep does not take) leaves
/// the search to do it alone.
#[test]
fn search_with_the_sweep_first_packs_cut_rectangles() {
    for seed in 0..24 {
        let drop = seed % 4 * 10;
        let (mut p, at) = cut_arena(seed, 24, 24, CutProfile { drop, ..SMALL });
        if seed % 5 == 0 {
            p.buffers[0].pinned_offset = Some(at[0]);
        }
        let options = PlanOptions {
            strategy: Strategy::Search,
            time_limit: Duration::from_secs(60),
            node_limit: Some(2_000_000),
            capacity: Some(24),
            threads: Some(1),
            sweep_permille: 500,
            ..Default::default()
        };
        let found = plan(&p, &options).expect("a layout at the bound");
        assert_eq!(found.arena_bytes, 24, "seed {seed}");
        assert!(
            check(&p, &found).is_ok(),
            "seed {seed}: {:?}",
            check(&p, &found)
        );
    }
}

use stow_plan::{
    check, lower_bound, plan, Buffer, BufferId, ConflictModel, PlanOptions, Problem, Strategy,
    Violation,
};

fn opts(strategy: Strategy) -> PlanOptions {
    PlanOptions {
        strategy,
        ..Default::default()
    }
}

/// A chain a→b→c where each buffer lives two steps: b overlaps both, a and c may share.
fn chain() -> Problem {
    Problem {
        buffers: vec![
            Buffer::new(100, 0, 2, 64),
            Buffer::new(200, 1, 3, 64),
            Buffer::new(100, 2, 4, 64),
        ],
        conflicts: ConflictModel::Lifetimes,
        pools: Vec::new(),
    }
}

#[test]
fn greedy_size_reuses_dead_bytes_and_passes_checker() {
    let p = chain();
    let naive = plan(&p, &opts(Strategy::Naive)).unwrap();
    let greedy = plan(&p, &opts(Strategy::GreedySize)).unwrap();
    assert_eq!(lower_bound(&p), 300);
    assert!(greedy.arena_bytes < naive.arena_bytes);
    assert_eq!(
        greedy.offsets[0], greedy.offsets[2],
        "a and c never live together"
    );
    check(&p, &greedy).unwrap();
}

#[test]
fn checker_reports_overlap_and_misalignment() {
    let p = chain();
    let mut bad = plan(&p, &opts(Strategy::GreedySize)).unwrap();
    bad.offsets[1] = bad.offsets[0] + 1;
    let v = check(&p, &bad).unwrap_err();
    assert!(
        v.iter().any(|x| matches!(
            x,
            Violation::Overlap {
                a: BufferId(0),
                b: BufferId(1)
            }
        )),
        "{v:?}"
    );
    assert!(
        v.iter().any(|x| matches!(
            x,
            Violation::Misaligned {
                id: BufferId(1),
                ..
            }
        )),
        "{v:?}"
    );
}

#[test]
fn explicit_conflicts_worked_example_bound_is_heaviest_clique() {
    // Sizes in MiB units from testdata/planning/seed-example: clique {4,5,6,7} weighs 43.
    let p = stow_plan::testing::worked_example();
    assert_eq!(lower_bound(&p), 43);
    let g = plan(&p, &opts(Strategy::GreedySize)).unwrap();
    assert!(g.arena_bytes >= 43 && g.arena_bytes < 69);
}

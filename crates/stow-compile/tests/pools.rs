//! Compiling into several memory pools: every pool's plan passes the
//! planner's checker and an independent check of the bundle, the report
//! adds up, pins are obeyed or refused with the tensor, pool and shortfall
//! named, and the default placement serves more traffic from the fast pool
//! than first come, first served.

use std::path::{Path, PathBuf};
use stow_bundle::{BundleView, Contents, Region};
use stow_compile::{
    compile, CompileError, CompileOptions, Compiled, Pin, Placement, PoolSpec, PoolsError,
};
use stow_plan::PlanOptions;

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(name)
}

const MODELS: [&str; 4] = [
    "residual_cnn.onnx",
    "transformer_block.onnx",
    "concat_block.onnx",
    "mobilenet_block.onnx",
];

fn options(pools: Vec<PoolSpec>, pins: Vec<Pin>, placement: Placement) -> CompileOptions {
    CompileOptions {
        plan: PlanOptions {
            time_limit: std::time::Duration::from_millis(200),
            ..PlanOptions::default()
        },
        pools,
        pins,
        placement,
        ..CompileOptions::default()
    }
}

fn fast_and_slow(fast: u64) -> Vec<PoolSpec> {
    vec![
        PoolSpec {
            name: "sram".into(),
            capacity: Some(fast),
        },
        PoolSpec {
            name: "dram".into(),
            capacity: None,
        },
    ]
}

/// A quarter of the model's single arena, in whole cache lines.
fn quarter_arena(model: &Path) -> u64 {
    let single = compile(model, &options(vec![], vec![], Placement::Gain)).unwrap();
    (single.report().arena_bytes / 4).max(64) / 64 * 64
}

/// Independently of the planner: group tensors by the tensor their alias
/// chain ends at (they share those bytes on purpose); two groups in the
/// same pool whose steps overlap must not share a byte, and every tensor
/// lies inside its pool.
fn assert_pools_disjoint(c: &Contents, what: &str) {
    let root = |mut i: usize| {
        while let Some((_, of)) = c.tensors[i].alias_of {
            i = of as usize;
        }
        i
    };
    let sizes = c.pool_sizes();
    let mut groups: Vec<(usize, u32, u32)> = Vec::new(); // root, first, last
    for (i, t) in c.tensors.iter().enumerate() {
        if t.region != Region::Arena {
            continue;
        }
        assert!(
            t.offset + t.size <= sizes[t.pool as usize].0,
            "{what}: {} past its pool",
            t.name
        );
        let r = root(i);
        assert_eq!(
            t.pool, c.tensors[r].pool,
            "{what}: {} not in its alias's pool",
            t.name
        );
        match groups.iter_mut().find(|g| g.0 == r) {
            Some(g) => (g.1, g.2) = (g.1.min(t.first_step), g.2.max(t.last_step)),
            None => groups.push((r, t.first_step, t.last_step)),
        }
    }
    for (k, a) in groups.iter().enumerate() {
        for b in &groups[k + 1..] {
            let (ta, tb) = (&c.tensors[a.0], &c.tensors[b.0]);
            let live_together = a.1 <= b.2 && b.1 <= a.2;
            let share_bytes = ta.offset < tb.offset + tb.size && tb.offset < ta.offset + ta.size;
            let empty = ta.size == 0 || tb.size == 0;
            assert!(
                ta.pool != tb.pool || !live_together || !share_bytes || empty,
                "{what}: {} and {} overlap in pool {} while both live",
                ta.name,
                tb.name,
                ta.pool
            );
        }
    }
}

fn contents(compiled: &Compiled) -> Contents {
    BundleView::parse(compiled.bytes())
        .unwrap()
        .contents()
        .clone()
}

#[test]
fn every_pool_is_planned_checked_and_reported() {
    for model in MODELS {
        let path = testdata(model);
        let fast = quarter_arena(&path);
        let compiled = compile(
            &path,
            &options(fast_and_slow(fast), vec![], Placement::Gain),
        )
        .unwrap_or_else(|e| panic!("{model}: {e}"));
        stow_plan::check(compiled.problem(), compiled.plan())
            .unwrap_or_else(|v| panic!("{model}: {} violations", v.len()));
        let c = contents(&compiled);
        assert_pools_disjoint(&c, model);
        let r = compiled.report();
        assert_eq!(r.pools.len(), 2);
        assert_eq!(c.pools.len(), 2);
        assert!(c.pools[0].bytes <= fast, "{model}");
        for (p, rp) in c.pools.iter().zip(&r.pools) {
            assert_eq!((p.name.as_str(), p.bytes), (rp.name.as_str(), rp.bytes));
            assert!(
                rp.peak_live <= rp.bytes,
                "{model} {}: live above size",
                p.name
            );
        }
        assert_eq!(r.arena_bytes, c.pools[0].bytes + c.pools[1].bytes);
        // The pools split the same traffic the single arena serves.
        let total: u64 = r.pools.iter().map(|p| p.traffic).sum();
        let expected = stow_compile::pools::traffic(
            compiled.graph(),
            compiled.buffer_of(),
            compiled.problem().buffers.len(),
        )
        .iter()
        .sum::<u64>();
        assert_eq!(total, expected, "{model}");
        assert!(
            r.pools[0].traffic > 0,
            "{model}: the fast pool serves nothing"
        );
    }
}

/// Gain placement also plans the first-use order and keeps whichever
/// serves more from the fast pool, so it can never do worse; this checks
/// that the report and the kept plan agree on it.
#[test]
fn gain_placement_serves_more_from_the_fast_pool_than_first_use() {
    for model in ["residual_cnn.onnx", "transformer_block.onnx"] {
        let path = testdata(model);
        let fast = quarter_arena(&path);
        let share = |placement| {
            let compiled =
                compile(&path, &options(fast_and_slow(fast), vec![], placement)).unwrap();
            let r = compiled.report();
            let total: u64 = r.pools.iter().map(|p| p.traffic).sum();
            r.pools[0].traffic as f64 / total as f64
        };
        let (gain, first) = (share(Placement::Gain), share(Placement::FirstUse));
        assert!(
            gain >= first,
            "{model}: gain serves {gain:.3} of the traffic from sram, first use {first:.3}"
        );
    }
}

#[test]
fn pins_are_obeyed() {
    let path = testdata("residual_cnn.onnx");
    let plain = compile(&path, &options(vec![], vec![], Placement::Gain)).unwrap();
    let c = contents(&plain);
    // The graph output, which gain placement would not favour: pin it
    // (and, through an operator, its producer's operands) to the fast pool.
    let out = &c.tensors[c.outputs[0] as usize];
    let producer = c
        .ops
        .iter()
        .find(|op| op.outputs.contains(&c.outputs[0]))
        .unwrap();
    let fast = quarter_arena(&path).max(out.size * 4);
    let pins = vec![
        Pin {
            target: producer.name.clone(),
            pool: "sram".into(),
        },
        Pin {
            target: out.name.clone(),
            pool: "sram".into(),
        },
    ];
    let compiled = compile(&path, &options(fast_and_slow(fast), pins, Placement::Gain)).unwrap();
    let pooled = contents(&compiled);
    for &id in producer.inputs.iter().chain(&producer.outputs) {
        let t = &pooled.tensors[id as usize];
        if t.region == Region::Arena {
            assert_eq!(t.pool, 0, "{} should be in sram", t.name);
        }
    }
}

#[test]
fn a_pinned_tensor_too_big_for_its_pool_is_refused_by_name() {
    let path = testdata("residual_cnn.onnx");
    let plain = compile(&path, &options(vec![], vec![], Placement::Gain)).unwrap();
    let c = contents(&plain);
    let big = c
        .tensors
        .iter()
        .filter(|t| t.region == Region::Arena)
        .max_by_key(|t| t.size)
        .unwrap();
    let capacity = big.size - 64;
    let pins = vec![Pin {
        target: big.name.clone(),
        pool: "sram".into(),
    }];
    let e = compile(
        &path,
        &options(fast_and_slow(capacity), pins, Placement::Gain),
    )
    .unwrap_err();
    let CompileError::Pools { source, .. } = &e else {
        panic!("expected a pools error, got {e}");
    };
    let PoolsError::PinnedTooBig {
        tensor,
        pool,
        short,
        capacity: cap,
        bytes,
    } = source
    else {
        panic!("expected PinnedTooBig, got {source}");
    };
    assert_eq!(
        (tensor.as_str(), pool.as_str(), *cap),
        (big.name.as_str(), "sram", capacity)
    );
    assert_eq!(*short, bytes - capacity);
    assert!(*short >= 64);
    let shown = source.to_string();
    for part in [
        big.name.as_str(),
        "sram",
        &format!("short by {short} bytes"),
    ] {
        assert!(shown.contains(part), "`{shown}` does not name {part}");
    }
}

#[test]
fn bad_pools_and_pins_are_refused() {
    let path = testdata("mlp.onnx");
    let refused = |pools: Vec<PoolSpec>, pins: Vec<Pin>| match compile(
        &path,
        &options(pools, pins, Placement::Gain),
    ) {
        Err(CompileError::Pools { source, .. }) => source,
        other => panic!("expected a pools error, got {other:?}"),
    };
    let pin = |target: &str, pool: &str| Pin {
        target: target.into(),
        pool: pool.into(),
    };
    assert!(matches!(
        refused(
            fast_and_slow(1024),
            vec![pin("nothing-called-this", "sram")]
        ),
        PoolsError::UnknownTarget { .. }
    ));
    let input = contents(&compile(&path, &options(vec![], vec![], Placement::Gain)).unwrap())
        .tensors[0]
        .name
        .clone();
    assert!(matches!(
        refused(fast_and_slow(1024), vec![pin(&input, "tcm")]),
        PoolsError::UnknownPool { .. }
    ));
    assert!(matches!(
        refused(
            fast_and_slow(1 << 20),
            vec![pin(&input, "sram"), pin(&input, "dram")]
        ),
        PoolsError::Conflict { .. }
    ));
    let mut unbounded_first = fast_and_slow(1024);
    unbounded_first.reverse();
    assert!(matches!(
        refused(unbounded_first, vec![]),
        PoolsError::UnboundedNotLast { .. }
    ));
    let mut same_name = fast_and_slow(1024);
    same_name[1].name = "sram".into();
    assert!(matches!(
        refused(same_name, vec![]),
        PoolsError::BadName { .. }
    ));
}

/// `Placement::Threshold`: with a fast pool large enough for every buffer,
/// exactly the operands of the steps whose working set exceeds the
/// threshold go to the slow pool; lower the threshold and more go.
#[test]
fn threshold_placement_sends_the_operands_of_large_steps_to_the_slow_pool() {
    for model in ["residual_cnn.onnx", "mobilenet_block.onnx"] {
        let path = testdata(model);
        let single = compile(&path, &options(vec![], vec![], Placement::Gain)).unwrap();
        let sets =
            stow_compile::pools::working_sets(single.graph(), single.buffer_of(), single.problem());
        let mut sorted = sets.clone();
        sorted.sort_unstable();
        // The median step's working set: about half the steps are above.
        let threshold = sorted[sorted.len() / 2];
        let fast = single.report().arena_bytes;
        let compiled = compile(
            &path,
            &options(
                fast_and_slow(fast),
                vec![],
                Placement::Threshold(Some(threshold)),
            ),
        )
        .unwrap_or_else(|e| panic!("{model}: {e}"));
        stow_plan::check(compiled.problem(), compiled.plan()).unwrap();
        let (graph, buffer_of, plan) = (compiled.graph(), compiled.buffer_of(), compiled.plan());
        let mut large = vec![false; plan.pool.len()];
        for (op, &set) in graph.ops.iter().zip(&sets) {
            if set > threshold {
                for &t in op.inputs.iter().chain(&op.outputs).chain(&op.scratch) {
                    if let Some(b) = buffer_of[t] {
                        large[b] = true;
                    }
                }
            }
        }
        let in_slow = large.iter().filter(|&&l| l).count();
        assert!(in_slow > 0, "{model}: no step above {threshold}");
        assert!(in_slow < large.len(), "{model}: every buffer is large");
        for (b, &l) in large.iter().enumerate() {
            assert_eq!(
                plan.pool[b].index(),
                usize::from(l),
                "{model}: buffer {b} (large step: {l})"
            );
        }
        // The bundle records the same pools, tensor by tensor.
        let c = contents(&compiled);
        assert_pools_disjoint(&c, model);
        for (t, info) in graph.tensors.iter().enumerate() {
            let Some(b) = buffer_of[t] else { continue };
            let record = c.tensors.iter().find(|r| r.name == info.name).unwrap();
            assert_eq!(record.pool as usize, plan.pool[b].index(), "{}", info.name);
        }
        let r = compiled.report();
        assert_eq!(r.placement.to_string(), format!("threshold={threshold}"));
        assert_eq!(r.pools[1].buffers, in_slow, "{model}");

        // A lower threshold sends at least as many buffers to dram.
        let lower = compile(
            &path,
            &options(
                fast_and_slow(fast),
                vec![],
                Placement::Threshold(Some(sorted[sorted.len() / 4])),
            ),
        )
        .unwrap();
        assert!(lower.report().pools[1].buffers >= in_slow, "{model}");
    }
}

/// `threshold` without a number takes the fast pool's capacity; pins win
/// over the threshold.
#[test]
fn threshold_defaults_to_the_fast_pool_and_yields_to_pins() {
    let path = testdata("residual_cnn.onnx");
    let fast = quarter_arena(&path);
    let compiled = compile(
        &path,
        &options(fast_and_slow(fast), vec![], Placement::Threshold(None)),
    )
    .unwrap();
    let sets = stow_compile::pools::working_sets(
        compiled.graph(),
        compiled.buffer_of(),
        compiled.problem(),
    );
    let (graph, buffer_of, plan) = (compiled.graph(), compiled.buffer_of(), compiled.plan());
    let mut pinned_op = None;
    for (op, &set) in graph.ops.iter().zip(&sets) {
        if set > fast {
            pinned_op.get_or_insert(op.name.clone());
            for &t in op.inputs.iter().chain(&op.outputs).chain(&op.scratch) {
                if let Some(b) = buffer_of[t] {
                    assert_eq!(plan.pool[b].index(), 1, "{}", graph.tensors[t].name);
                }
            }
        }
    }
    // The smallest operand of a large step, pinned to sram, stays there.
    let op_name = pinned_op.expect("a step larger than a quarter of the arena");
    let op = graph.ops.iter().find(|o| o.name == op_name).unwrap();
    let smallest = op
        .inputs
        .iter()
        .chain(&op.outputs)
        .filter(|&&t| buffer_of[t].is_some())
        .min_by_key(|&&t| graph.tensors[t].bytes)
        .copied()
        .unwrap();
    let name = graph.tensors[smallest].name.clone();
    let pins = vec![Pin {
        target: name.clone(),
        pool: "sram".into(),
    }];
    let pinned = compile(
        &path,
        &options(
            fast_and_slow(fast.max(graph.tensors[smallest].bytes.next_multiple_of(64))),
            pins,
            Placement::Threshold(None),
        ),
    )
    .unwrap();
    let record = contents(&pinned)
        .tensors
        .into_iter()
        .find(|t| t.name == name)
        .unwrap();
    assert_eq!(record.pool, 0, "{name} pinned to sram");
}

#[test]
fn placements_parse_and_print_back() {
    for s in ["gain", "first-use", "threshold", "threshold=65536"] {
        assert_eq!(Placement::parse(s).unwrap().to_string(), s);
    }
    for bad in ["", "fastest", "threshold=", "threshold=-1", "threshold=1k"] {
        assert!(Placement::parse(bad).is_err(), "{bad}");
    }
}

//! The library entry point on every testdata model, and each failure's
//! typed error.

use std::error::Error;
use std::path::{Path, PathBuf};
use stow_bundle::{BundleError, BundleView, Region};
use stow_compile::{compile, CompileError, CompileOptions, Compiled, Outcome};
use stow_onnx::{InputShape, OnnxError};
use stow_plan::{PlanError, PlanOptions, Strategy};

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(name)
}

/// Every `.onnx` model in testdata/, sorted.
fn testdata_models() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(testdata(""))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .collect();
    v.sort();
    assert!(v.len() >= 6, "testdata/ should hold the generated models");
    v
}

/// The options `stow compile` uses by default, plus the symbol value the
/// symbolic testdata model needs.
fn options_for(model: &Path) -> CompileOptions {
    let symbolic = model.to_string_lossy().contains("symbolic");
    CompileOptions {
        dims: if symbolic {
            vec![("N".to_string(), 2)]
        } else {
            vec![]
        },
        // A short budget: the tests check consistency, not optimality.
        plan: PlanOptions {
            time_limit: std::time::Duration::from_millis(200),
            ..PlanOptions::default()
        },
        ..CompileOptions::default()
    }
}

/// The error and its causes, joined as `anyhow` prints them with `{:#}`.
fn chain(e: &dyn Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

fn compile_ok(model: &Path, options: &CompileOptions) -> Compiled {
    compile(model, options).unwrap_or_else(|e| panic!("{}: {}", model.display(), chain(&e)))
}

#[test]
fn every_testdata_model_compiles_with_a_report_the_bundle_agrees_with() {
    for model in testdata_models() {
        let what = model.display().to_string();
        let compiled = compile_ok(&model, &options_for(&model));
        let r = compiled.report();

        assert!(r.lower_bound > 0, "{what}: lower bound 0");
        assert!(r.arena_bytes >= r.lower_bound, "{what}: {r:?}");
        assert!(r.naive_bytes >= r.arena_bytes, "{what}: {r:?}");
        assert!(
            (r.ratio - r.arena_bytes as f64 / r.lower_bound as f64).abs() < 1e-12,
            "{what}: ratio {}",
            r.ratio
        );
        assert!(r.ops > 0, "{what}: no ops");
        assert!(r.chosen_by_auto, "{what}: auto was asked for");
        assert!(r.planning_time <= r.compile_time, "{what}");
        assert!(r.comparison.is_none(), "{what}: no comparison was asked");
        assert!(
            r.order_bounds.iter().any(|(o, _)| *o == r.order),
            "{what}: the order taken has a bound"
        );
        assert_eq!(r.bundle_bytes, compiled.bytes().len() as u64, "{what}");

        // Tensor counts: every arena tensor is a buffer's root or shares
        // a root's bytes in exactly one way.
        let t = r.tensors;
        let graph = compiled.graph();
        assert_eq!(t.total, graph.tensors.len(), "{what}");
        assert_eq!(t.buffers, compiled.problem().buffers.len(), "{what}");
        assert_eq!(
            t.arena,
            t.buffers + t.in_place + t.views + t.concat_slices + t.depthwise_in_place,
            "{what}: {t:?}"
        );
        assert!(t.arena < t.total, "{what}: every model has weights");

        // The plan is the problem's, and it passes the checker.
        let plan = compiled.plan();
        assert_eq!(plan.arena_bytes, r.arena_bytes, "{what}");
        assert_eq!(plan.lower_bound, r.lower_bound, "{what}");
        stow_plan::check(compiled.problem(), plan).unwrap();

        // The bytes are a valid bundle whose metadata says the same.
        let view = BundleView::parse(compiled.bytes()).unwrap();
        let c = view.contents();
        assert_eq!(c.arena_bytes, r.arena_bytes, "{what}");
        assert_eq!(c.arena_align, 64, "{what}");
        assert_eq!(c.provenance.lower_bound_bytes, r.lower_bound, "{what}");
        assert_eq!(c.provenance.naive_bytes, r.naive_bytes, "{what}");
        assert_eq!(c.provenance.strategy, r.strategy.name(), "{what}");
        assert_eq!(c.provenance.optimal, r.optimal, "{what}");
        assert_eq!(
            c.provenance.source_model,
            model.file_name().unwrap().to_string_lossy(),
            "{what}"
        );
        assert_eq!(c.ops.len(), r.ops, "{what}");
        assert_eq!(c.tensors.len(), t.total, "{what}");
        let arena: Vec<_> = c
            .tensors
            .iter()
            .filter(|t| t.region == Region::Arena)
            .collect();
        assert_eq!(arena.len(), t.arena, "{what}");
        assert!(
            arena.iter().all(|t| t.offset + t.size <= r.arena_bytes),
            "{what}: an arena tensor ends past the arena"
        );
        // Concat slices sit inside their concat's output; every other
        // tensor starts at an aligned offset.
        assert!(
            arena
                .iter()
                .filter(|t| t.alias_of.is_none())
                .all(|t| t.offset % 64 == 0),
            "{what}: an arena tensor is misaligned"
        );
        let weights: u64 = c
            .tensors
            .iter()
            .filter(|t| t.region == Region::Weights)
            .map(|t| t.size)
            .sum();
        assert_eq!(weights, r.weight_bytes, "{what}");

        // Written, the same bytes open with the runtime.
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("m.stow");
        compiled.write(&out).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), compiled.bytes(), "{what}");
        let bundle = stow_runtime::Bundle::open(&out).unwrap();
        bundle.verify_weights().unwrap();
        assert_eq!(bundle.contents().arena_bytes, r.arena_bytes, "{what}");
    }
}

#[test]
fn threads_zero_plans_no_kernel_scratch() {
    let model = testdata("residual_cnn.onnx");
    let with = compile_ok(&model, &CompileOptions::default());
    let without = compile_ok(
        &model,
        &CompileOptions {
            threads: 0,
            ..CompileOptions::default()
        },
    );
    let scratch = |c: &Compiled| {
        c.graph()
            .tensors
            .iter()
            .filter(|t| t.name.ends_with(".scratch"))
            .count()
    };
    assert!(scratch(&with) > 0, "convolutions need packing scratch");
    assert_eq!(scratch(&without), 0);
    assert_eq!(
        with.report().tensors.total,
        without.report().tensors.total + scratch(&with)
    );
    assert!(with.report().lower_bound >= without.report().lower_bound);
}

#[test]
fn compare_runs_every_strategy_best_first() {
    let model = testdata("two_branch.onnx");
    let compiled = compile_ok(
        &model,
        &CompileOptions {
            compare: true,
            ..options_for(&model)
        },
    );
    let r = compiled.report();
    let rows = r.comparison.as_ref().expect("compare was asked for");
    assert_eq!(rows.len(), Strategy::ALL.len());
    for s in Strategy::ALL {
        assert_eq!(rows.iter().filter(|row| row.strategy == *s).count(), 1);
    }
    let arenas: Vec<u64> = rows.iter().map(|row| row.arena_bytes().unwrap()).collect();
    assert!(arenas.windows(2).all(|w| w[0] <= w[1]), "{arenas:?}");
    assert!(arenas.iter().all(|&a| a >= r.lower_bound), "{arenas:?}");
    let naive = rows
        .iter()
        .find(|row| row.strategy == Strategy::Naive)
        .unwrap();
    assert_eq!(naive.arena_bytes(), Some(r.naive_bytes));
    assert!(matches!(
        naive.outcome,
        Outcome::Planned {
            used: Strategy::Naive,
            ..
        }
    ));
}

#[test]
fn a_missing_model_is_a_load_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("nope.onnx");
    let err = compile(&model, &CompileOptions::default()).unwrap_err();
    match &err {
        CompileError::Load {
            path,
            source: OnnxError::Io { .. },
        } => assert_eq!(path, &model),
        other => panic!("expected a load error, got {other:?}"),
    }
    assert_eq!(err.to_string(), format!("compiling {}", model.display()));
    let full = chain(&err);
    assert!(
        full.starts_with(&format!(
            "compiling {0}: cannot read {0}: ",
            model.display()
        )),
        "{full}"
    );
}

#[test]
fn an_unknown_input_name_is_a_load_error() {
    let model = testdata("mlp.onnx");
    let err = compile(
        &model,
        &CompileOptions {
            inputs: vec![InputShape {
                name: "nosuch".into(),
                dims: vec![1, 64],
            }],
            ..CompileOptions::default()
        },
    )
    .unwrap_err();
    let CompileError::Load {
        source: OnnxError::BadArgument(message),
        ..
    } = &err
    else {
        panic!("expected a bad argument, got {err:?}");
    };
    assert!(message.contains("nosuch"), "{message}");
    assert!(message.contains("no input of that name"), "{message}");
}

#[test]
fn a_bad_alignment_is_refused_before_the_model_is_read() {
    let err = compile(
        Path::new("/no/such/model.onnx"),
        &CompileOptions {
            align: 48,
            ..CompileOptions::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(err, CompileError::BadAlignment { align: 48 }),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "alignment 48 is not a power of two");
}

#[test]
fn max_arena_names_the_tensor_or_the_arena() {
    let model = testdata("residual_cnn.onnx");
    // The input image alone is 1x3x32x32 f32 = 12,288 bytes.
    let err = compile(
        &model,
        &CompileOptions {
            max_arena: 12_000,
            ..CompileOptions::default()
        },
    )
    .unwrap_err();
    match &err {
        CompileError::TensorOverMaxArena {
            tensor,
            bytes,
            limit,
            ..
        } => assert_eq!((tensor.as_str(), *bytes, *limit), ("image", 12_288, 12_000)),
        other => panic!("expected a tensor over the limit, got {other:?}"),
    }
    assert!(
        err.to_string()
            .contains("tensor `image` needs 12288 bytes, more than --max-arena 12000"),
        "{err}"
    );

    // Every tensor fits, the planned arena does not.
    let ok = compile_ok(&model, &CompileOptions::default());
    let arena = ok.report().arena_bytes;
    let largest = ok.graph().tensors.iter().map(|t| t.bytes).max().unwrap();
    assert!(
        largest < arena,
        "the test needs an arena above its largest tensor"
    );
    let err = compile(
        &model,
        &CompileOptions {
            max_arena: arena - 1,
            ..CompileOptions::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(err, CompileError::ArenaOverMaxArena { bytes, limit, .. } if bytes == arena && limit == arena - 1),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains(&format!("the arena needs {arena} bytes")),
        "{err}"
    );
}

/// Below the bound, and with no stage of the model able to run in bands
/// (an MLP has no rows), the compile fails naming the step at the peak and
/// the bytes missing; with `compare`, every strategy's failure comes with
/// the planner's error instead.
#[test]
fn a_capacity_below_the_lower_bound_is_a_planning_error() {
    let model = testdata("mlp.onnx");
    let bound = compile_ok(&model, &CompileOptions::default())
        .report()
        .lower_bound;
    let err = compile(
        &model,
        &CompileOptions {
            plan: PlanOptions {
                capacity: Some(bound - 1),
                ..PlanOptions::default()
            },
            ..CompileOptions::default()
        },
    )
    .unwrap_err();
    let CompileError::OverCapacity {
        capacity,
        bound: needed,
        stage: None,
        ..
    } = &err
    else {
        panic!("expected an over-capacity error, got {err:?}");
    };
    assert_eq!((*capacity, *needed), (bound - 1, bound));
    assert!(
        chain(&err).contains("1 more than the capacity"),
        "{}",
        chain(&err)
    );
    {
        let compare = true;
        let err = compile(
            &model,
            &CompileOptions {
                plan: PlanOptions {
                    capacity: Some(bound - 1),
                    ..PlanOptions::default()
                },
                compare,
                ..CompileOptions::default()
            },
        )
        .unwrap_err();
        let CompileError::Plan {
            path,
            source: PlanError::DoesNotFit { capacity, .. },
            comparison,
        } = &err
        else {
            panic!("expected a planning error, got {err:?}");
        };
        assert_eq!(path, &model);
        assert_eq!(*capacity, bound - 1);
        assert!(chain(&err).contains("does not fit"), "{}", chain(&err));
        // The comparison, when asked for, comes with the error: no
        // strategy fits below the lower bound.
        match comparison {
            None => assert!(!compare),
            Some(rows) => {
                assert!(compare);
                assert_eq!(rows.len(), Strategy::ALL.len());
                assert!(rows
                    .iter()
                    .all(|r| matches!(r.outcome, Outcome::DoesNotFit { capacity, .. } if capacity == bound - 1)));
            }
        }
    }
}

#[test]
fn a_failed_write_leaves_nothing_behind() {
    let compiled = compile_ok(&testdata("mlp.onnx"), &CompileOptions::default());
    let dir = tempfile::tempdir().unwrap();

    let missing = dir.path().join("no/such/dir/o.stow");
    let err = compiled.write(&missing).unwrap_err();
    match &err {
        CompileError::Write {
            path,
            source: BundleError::MissingDirectory { .. },
        } => assert_eq!(path, &missing),
        other => panic!("expected a write error, got {other:?}"),
    }
    assert!(chain(&err).contains("does not exist"), "{}", chain(&err));
    assert!(!dir.path().join("no").exists());

    // The rename over a directory fails: the directory stays as it was
    // and no temporary file is left beside it.
    let taken = dir.path().join("taken.stow");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("keep"), b"x").unwrap();
    let err = compiled.write(&taken).unwrap_err();
    assert!(matches!(err, CompileError::Write { .. }), "{err:?}");
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["taken.stow"]);
    assert!(taken.join("keep").is_file());
}

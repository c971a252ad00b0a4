mod common;

use common::*;

/// Independently of the planner: tensors that share bytes on purpose (an
/// alias chain) form one buffer; buffers whose step ranges overlap never
/// share a byte, every tensor ends inside the arena, and the lower bound is
/// the largest total of buffers live at one step.
fn assert_layout_valid<'a>(json: &'a serde_json::Value, what: &str) {
    use std::collections::HashMap;
    let arena = json["arena_bytes"].as_u64().unwrap();
    let bound = json["lower_bound_bytes"].as_u64().unwrap();
    assert!(
        arena >= bound,
        "{what}: arena {arena} below lower bound {bound}"
    );
    let all = json["tensors"].as_array().unwrap();
    let by_name: HashMap<&'a str, &'a serde_json::Value> = all
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t))
        .collect();
    let f = |t: &serde_json::Value, k: &str| t[k].as_u64().unwrap();
    // A concat slice lies inside its concat's output; every other alias
    // shares its target's bytes exactly.
    let root_of = |mut t: &'a serde_json::Value| {
        while let Some(of) = t["alias_of"].as_str() {
            let target = by_name[of];
            if t["alias_kind"] == "concat_slice" {
                assert!(
                    f(t, "offset") >= f(target, "offset")
                        && f(t, "offset") + f(t, "size") <= f(target, "offset") + f(target, "size"),
                    "{what}: {} lies outside its concat {of}",
                    t["name"]
                );
            } else {
                assert_eq!(
                    t["offset"], target["offset"],
                    "{what}: {} aliases {of} at another offset",
                    t["name"]
                );
            }
            t = target;
        }
        t["name"].as_str().unwrap().to_string()
    };
    // Per buffer: (lowest offset, highest end, first step, last step).
    let mut buffers: HashMap<String, (u64, u64, u64, u64)> = HashMap::new();
    for t in all.iter().filter(|t| t["region"] == "arena") {
        let (lo, hi) = (f(t, "offset"), f(t, "offset") + f(t, "size"));
        assert!(hi <= arena, "{what}: {} ends past the arena", t["name"]);
        let e = buffers
            .entry(root_of(t))
            .or_insert((u64::MAX, 0, u64::MAX, 0));
        e.0 = e.0.min(lo);
        e.1 = e.1.max(hi);
        e.2 = e.2.min(f(t, "first_step"));
        e.3 = e.3.max(f(t, "last_step"));
    }
    assert!(!buffers.is_empty(), "{what}: no arena tensors");
    let buffers: Vec<(String, (u64, u64, u64, u64))> = buffers.into_iter().collect();
    let last = buffers.iter().map(|b| b.1 .3).max().unwrap();
    let live_max = (0..=last)
        .map(|step| {
            buffers
                .iter()
                .filter(|b| b.1 .2 <= step && step <= b.1 .3)
                .map(|b| b.1 .1 - b.1 .0)
                .sum::<u64>()
        })
        .max()
        .unwrap();
    assert_eq!(
        live_max, bound,
        "{what}: lower bound is the largest live total"
    );
    for (i, (na, a)) in buffers.iter().enumerate() {
        for (nb, b) in &buffers[i + 1..] {
            let steps = a.2 <= b.3 && b.2 <= a.3;
            let bytes = a.0 < b.1 && b.0 < a.1;
            assert!(
                !(steps && bytes),
                "{what}: {na} and {nb} overlap in time and bytes"
            );
        }
    }
}

#[test]
fn every_testdata_model_compiles_to_a_valid_layout() {
    let dir = tempfile::tempdir().unwrap();
    for model in testdata_models() {
        let reuse_configs: [&[&str]; 4] = [
            &[],
            &["--no-inplace", "--no-views"],
            &["--no-views"],
            &["--reuse-inputs"],
        ];
        for (strategy, reuse) in ["naive", "greedy-size"]
            .iter()
            .flat_map(|s| reuse_configs.iter().map(move |r| (*s, *r)))
        {
            let out = dir.path().join("layout.stow");
            let mut args = vec!["--strategy", strategy];
            args.extend_from_slice(reuse);
            let json = compile_and_inspect(&model, &out, &args);
            let what = format!("{} ({strategy} {reuse:?})", model.display());
            assert_layout_valid(&json, &what);
            assert_eq!(json["strategy"], strategy);
            for key in [
                "name",
                "kind",
                "dtype",
                "shape",
                "offset",
                "size",
                "first_step",
                "last_step",
            ] {
                assert!(
                    json["tensors"][0].get(key).is_some(),
                    "{what}: tensor field {key} missing"
                );
            }
        }
    }
}

#[test]
fn greedy_reuses_memory_on_every_cnn() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "residual_cnn.onnx",
        "mobilenet_block.onnx",
        "two_branch.onnx",
    ] {
        let json = compile_and_inspect(&testdata(name), &dir.path().join("m.stow"), &[]);
        let arena = json["arena_bytes"].as_u64().unwrap();
        let naive = json["naive_bytes"].as_u64().unwrap();
        assert!(
            arena < naive,
            "{name}: arena {arena} should be below naive {naive}"
        );
    }
}

#[test]
fn compile_prints_summary_and_default_output_path() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("mlp.onnx");
    std::fs::copy(testdata("mlp.onnx"), &model).unwrap();
    let o = stow(&["compile", &model.display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for word in [
        "ops",
        "tensors",
        "weights",
        "arena",
        "lower bound",
        "naive",
        "arena / bound",
        "compile time",
    ] {
        assert!(text.contains(word), "summary lacks `{word}`:\n{text}");
    }
    assert!(dir.path().join("mlp.stow").is_file());
}

#[test]
fn align_flag_aligns_every_offset() {
    let dir = tempfile::tempdir().unwrap();
    let json = compile_and_inspect(
        &testdata("residual_cnn.onnx"),
        &dir.path().join("a.stow"),
        &["--align", "256"],
    );
    for t in json["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["region"] == "arena")
    {
        assert_eq!(t["offset"].as_u64().unwrap() % 256, 0, "{}", t["name"]);
    }
    assert_eq!(json["arena_align"], 256);
}

#[test]
fn input_flag_changes_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let a = compile_and_inspect(
        &testdata("symbolic_batch.onnx"),
        &dir.path().join("a.stow"),
        &[],
    );
    let mut args = vec![
        "compile".to_string(),
        testdata("symbolic_batch.onnx").display().to_string(),
    ];
    let out = dir.path().join("b.stow").display().to_string();
    args.extend([
        "-o".into(),
        out.clone(),
        "--input".into(),
        "image=4x3x16x16".into(),
    ]);
    let o = stow(&args.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    assert!(o.status.success(), "{}", stderr(&o));
    let b: serde_json::Value =
        serde_json::from_slice(&stow(&["inspect", "--json", &out]).stdout).unwrap();
    let shape = |j: &serde_json::Value| {
        j["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["kind"] == "input")
            .unwrap()["shape"]
            .clone()
    };
    assert_eq!(shape(&a)[0], 2);
    assert_eq!(shape(&b)[0], 4);
    assert!(b["arena_bytes"].as_u64().unwrap() > a["arena_bytes"].as_u64().unwrap());
}

#[test]
fn inspect_prints_tables() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.stow");
    compile_and_inspect(&testdata("transformer_block.onnx"), &out, &[]);
    let o = stow(&["inspect", &out.display().to_string()]);
    assert!(o.status.success());
    let text = stdout(&o);
    for word in [
        "format version",
        "sections",
        "inputs",
        "outputs",
        "tensors",
        "lower bound",
    ] {
        assert!(text.contains(word), "inspect lacks `{word}`:\n{text}");
    }
}

#[test]
fn compare_prints_every_strategy_even_when_planning_fails() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("two_branch.onnx");
    let out = dir.path().join("c.stow");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "compile",
            model.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--compare",
        ];
        args.extend_from_slice(extra);
        stow(&args)
    };
    let rows = |text: &str| -> Vec<String> {
        text.lines()
            .skip_while(|l| !l.starts_with("strategy"))
            .skip(1)
            .take_while(|l| !l.starts_with("compiled"))
            .map(|l| l.split_whitespace().next().unwrap().to_string())
            .collect()
    };
    let o = run(&[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert_eq!(rows(&text).len(), stow_plan::Strategy::ALL.len(), "{text}");
    assert!(text.contains("arena / bound"), "{text}");
    let naive: u64 = text
        .lines()
        .find(|l| l.starts_with("  naive "))
        .and_then(|l| l.split_whitespace().nth(1))
        .map(|n| n.replace(',', "").parse().unwrap())
        .unwrap();
    std::fs::remove_file(&out).unwrap();

    // Naive does not fit below its own size; the table still shows which
    // strategies do, then the error.
    let capacity = (naive - 1).to_string();
    let o = run(&["--strategy", "naive", "--capacity", &capacity]);
    assert!(!o.status.success());
    let text = stdout(&o);
    assert_eq!(rows(&text).len(), stow_plan::Strategy::ALL.len(), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("naive ") && l.contains("does not fit")),
        "{text}"
    );
    assert!(
        text.lines()
            .skip_while(|l| !l.starts_with("strategy"))
            .any(|l| !l.starts_with("naive ") && l.contains(" B")),
        "some strategy fits: {text}"
    );
    let err = stderr(&o);
    assert!(
        err.starts_with("error: planning ") && err.contains("does not fit"),
        "{err}"
    );
    assert!(!out.exists());
}

mod common;

use common::*;

/// Independently of the planner: arena tensors whose step ranges overlap
/// never share a byte, and every tensor ends inside the arena.
fn assert_layout_valid(json: &serde_json::Value, what: &str) {
    let arena = json["arena_bytes"].as_u64().unwrap();
    let bound = json["lower_bound_bytes"].as_u64().unwrap();
    assert!(
        arena >= bound,
        "{what}: arena {arena} below lower bound {bound}"
    );
    let tensors: Vec<&serde_json::Value> = json["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["region"] == "arena")
        .collect();
    assert!(!tensors.is_empty(), "{what}: no arena tensors");
    let f = |t: &serde_json::Value, k: &str| t[k].as_u64().unwrap();
    let mut live_max = 0u64;
    let last = tensors.iter().map(|t| f(t, "last_step")).max().unwrap();
    for step in 0..=last {
        let live: u64 = tensors
            .iter()
            .filter(|t| f(t, "first_step") <= step && step <= f(t, "last_step"))
            .map(|t| f(t, "size"))
            .sum();
        live_max = live_max.max(live);
    }
    assert_eq!(
        live_max, bound,
        "{what}: lower bound is the largest live total"
    );
    for (i, a) in tensors.iter().enumerate() {
        assert!(
            f(a, "offset") + f(a, "size") <= arena,
            "{what}: {} ends past the arena",
            a["name"]
        );
        for b in &tensors[i + 1..] {
            let steps =
                f(a, "first_step") <= f(b, "last_step") && f(b, "first_step") <= f(a, "last_step");
            let bytes = f(a, "offset") < f(b, "offset") + f(b, "size")
                && f(b, "offset") < f(a, "offset") + f(a, "size");
            assert!(
                !(steps && bytes),
                "{what}: {} and {} overlap in time and bytes",
                a["name"],
                b["name"]
            );
        }
    }
}

#[test]
fn every_testdata_model_compiles_to_a_valid_layout() {
    let dir = tempfile::tempdir().unwrap();
    for model in testdata_models() {
        for strategy in ["naive", "greedy-size"] {
            let out = dir.path().join(format!(
                "{}.{strategy}.stow",
                model.file_stem().unwrap().to_string_lossy()
            ));
            let json = compile_and_inspect(&model, &out, &["--strategy", strategy]);
            let what = format!("{} ({strategy})", model.display());
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

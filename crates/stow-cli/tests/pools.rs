//! `stow compile --pool/--pin`, and `inspect`, `run --check` and `verify`
//! on bundles whose arena is split across memory pools.

mod common;

use common::*;

#[test]
fn compile_with_pools_reports_them_and_inspect_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("transformer_block.onnx");
    let out = dir.path().join("t.stow");
    let o = stow(&[
        "compile",
        &model.display().to_string(),
        "-o",
        &out.display().to_string(),
        "--pool",
        "sram=4096",
        "--pool",
        "dram",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for want in [
        "pools          placement gain",
        "sram",
        "dram",
        "% full at its peak",
        "traffic",
    ] {
        assert!(text.contains(want), "`{want}` missing from:\n{text}");
    }
    let o = stow(&["inspect", "--json", &out.display().to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let pools = json["pools"].as_array().unwrap();
    assert_eq!(pools.len(), 2);
    assert_eq!(pools[0]["name"], "sram");
    assert!(pools[0]["bytes"].as_u64().unwrap() <= 4096);
    let share: f64 = pools
        .iter()
        .map(|p| p["traffic_share"].as_f64().unwrap())
        .sum();
    assert!((share - 1.0).abs() < 1e-9, "shares sum to {share}");
    // Every arena tensor names an existing pool and lies inside it.
    for t in json["tensors"].as_array().unwrap() {
        if t["region"] == "arena" {
            let pool = &pools[t["pool"].as_u64().unwrap() as usize];
            let end = t["offset"].as_u64().unwrap() + t["size"].as_u64().unwrap();
            assert!(end <= pool["bytes"].as_u64().unwrap(), "{}", t["name"]);
        }
    }
    // The text form lists the pools too.
    let o = stow(&["inspect", &out.display().to_string()]);
    assert!(stdout(&o).contains("pools\n  sram"), "{}", stdout(&o));
}

/// The pictures of a pooled bundle draw one panel per pool, each over its
/// own addresses: every arena tensor once, in its pool's panel.
#[test]
fn pictures_of_a_pooled_bundle_draw_one_panel_per_pool() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("residual_cnn.onnx");
    let out = dir.path().join("r.stow");
    let json = compile_and_inspect(&model, &out, &["--pool", "sram=16384", "--pool", "dram"]);
    let pools = json["pools"].as_array().unwrap();
    let tensors = json["tensors"].as_array().unwrap();
    let in_pool = |p: u64| {
        tensors
            .iter()
            .filter(|t| t["region"] == "arena" && t["pool"].as_u64() == Some(p))
            .count()
    };
    assert!(in_pool(0) > 0 && in_pool(1) > 0, "both pools hold tensors");
    let (svg, html) = (dir.path().join("r.svg"), dir.path().join("r.html"));
    let b = out.display().to_string();
    let o = stow(&[
        "inspect",
        &b,
        "--svg",
        &svg.display().to_string(),
        "--html",
        &html.display().to_string(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("one panel per pool"), "{}", stderr(&o));

    let svg = std::fs::read_to_string(&svg).unwrap();
    let panels: Vec<&str> = svg.split(r#"<g class="pool-panel""#).skip(1).collect();
    assert_eq!(panels.len(), 2, "one panel per pool");
    for (p, (panel, pool)) in panels.iter().zip(pools).enumerate() {
        let name = pool["name"].as_str().unwrap();
        let bytes = pool["bytes"].as_u64().unwrap();
        assert!(
            panel.starts_with(&format!(r#" data-pool="{name}""#)),
            "panel {p} is not {name}"
        );
        // Its own address axis: sized to the pool, not the whole arena.
        assert!(
            panel.contains(&format!(r#"data-bytes="{bytes}""#)),
            "panel {name}"
        );
        assert!(panel.contains(&format!("pool {name} ({} of 2)", p + 1)));
        assert!(panel.contains("% full at its peak"));
        // Only its pool's tensors (after the last panel come the step
        // axis and the legend, which draw no tensor).
        assert_eq!(
            panel.matches("<rect data-id=").count(),
            in_pool(p as u64),
            "panel {name}: its tensors"
        );
    }
    assert_eq!(
        svg.matches("<rect data-id=").count(),
        in_pool(0) + in_pool(1)
    );

    let html = std::fs::read_to_string(&html).unwrap();
    assert_eq!(html.matches(r#"<section class="pool-panel""#).count(), 2);
    assert_eq!(html.matches("<iframe").count(), 2);
    for pool in pools {
        let name = pool["name"].as_str().unwrap();
        assert!(html.contains(&format!(r#"data-pool="{name}""#)), "{name}");
    }

    let o = stow(&["inspect", &b, "--chart"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let chart = stdout(&o);
    assert!(chart.contains("pool sram (1 of 2):"), "{chart}");
    assert!(chart.contains("pool dram (2 of 2):"), "{chart}");
    assert!(chart.lines().all(|l| l.chars().count() <= 100));
}

/// `--placement threshold=BYTES`: the operands of the steps above the
/// threshold are in dram, and the bundle runs like the model.
#[test]
fn threshold_placement_compiles_runs_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("residual_cnn.onnx");
    let out = dir.path().join("t.stow");
    let o = stow(&[
        "compile",
        &model.display().to_string(),
        "-o",
        &out.display().to_string(),
        "--pool",
        "sram=1048576",
        "--pool",
        "dram",
        "--placement",
        "threshold=16384",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("placement threshold=16384"),
        "{}",
        stdout(&o)
    );
    let json = compile_and_inspect(
        &model,
        &out,
        &[
            "--pool",
            "sram=1048576",
            "--pool",
            "dram",
            "--placement",
            "threshold=16384",
        ],
    );
    let tensors = json["tensors"].as_array().unwrap();
    let count = |p: u64| {
        tensors
            .iter()
            .filter(|t| t["region"] == "arena" && t["pool"].as_u64() == Some(p))
            .count()
    };
    assert!(
        count(0) > 0 && count(1) > 0,
        "{} in sram, {} in dram",
        count(0),
        count(1)
    );
    let (m, b) = (model.display().to_string(), out.display().to_string());
    let o = stow(&["run", &b, "--check", &m]);
    assert!(o.status.success(), "run --check: {}", stderr(&o));
    let o = stow(&["verify", &m, &b]);
    assert!(stdout(&o).contains("PASS"), "{}{}", stdout(&o), stderr(&o));
    let o = stow(&[
        "compile",
        &m,
        "-o",
        &b,
        "--pool",
        "sram=1024",
        "--pool",
        "dram",
        "--placement",
        "threshold=lots",
    ]);
    assert!(!o.status.success() && stderr(&o).contains("threshold=lots"));
}

#[test]
fn a_pinned_tensor_too_big_fails_naming_it_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("residual_cnn.onnx");
    let plain = compile_and_inspect(&model, &dir.path().join("p.stow"), &[]);
    let big = plain["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["region"] == "arena" && t["alias_of"].is_null())
        .max_by_key(|t| t["size"].as_u64().unwrap())
        .unwrap();
    let name = big["name"].as_str().unwrap();
    let size = big["size"].as_u64().unwrap();
    let out = dir.path().join("pinned.stow");
    let o = stow(&[
        "compile",
        &model.display().to_string(),
        "-o",
        &out.display().to_string(),
        "--pool",
        &format!("sram={}", size - 64),
        "--pool",
        "dram",
        "--pin",
        &format!("{name}=sram"),
    ]);
    assert!(!o.status.success());
    let err = stderr(&o);
    for want in [name, "`sram`", "short by"] {
        assert!(err.contains(want), "`{want}` missing from: {err}");
    }
    assert!(!out.exists(), "a failed compile left a bundle");
}

#[test]
fn run_check_and_verify_judge_pooled_bundles() {
    let dir = tempfile::tempdir().unwrap();
    for model in ["residual_cnn.onnx", "transformer_block.onnx"] {
        let model = testdata(model);
        let out = dir.path().join("m.stow");
        let json = compile_and_inspect(&model, &out, &["--pool", "sram=8192", "--pool", "dram"]);
        assert_eq!(json["pools"].as_array().unwrap().len(), 2);
        let (m, b) = (model.display().to_string(), out.display().to_string());
        let o = stow(&["run", &b, "--check", &m]);
        assert!(o.status.success(), "run --check {m}: {}", stderr(&o));
        assert!(stdout(&o).contains("2 memory pools"), "{}", stdout(&o));
        let o = stow(&["verify", &m, &b]);
        assert!(
            o.status.success(),
            "verify {m}: {}{}",
            stdout(&o),
            stderr(&o)
        );
        assert!(stdout(&o).contains("PASS"), "{}", stdout(&o));
    }
}

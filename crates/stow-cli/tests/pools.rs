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
    // The text form lists the pools too; pictures are refused, not wrong.
    let o = stow(&["inspect", &out.display().to_string()]);
    assert!(stdout(&o).contains("pools\n  sram"), "{}", stdout(&o));
    let svg = dir.path().join("t.svg");
    let o = stow(&[
        "inspect",
        &out.display().to_string(),
        "--svg",
        &svg.display().to_string(),
    ]);
    assert!(!o.status.success() && stderr(&o).contains("memory pools"));
    assert!(!svg.exists());
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

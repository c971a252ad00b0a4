//! Patch-based execution from the command line: `--patch` runs a stage in
//! bands of rows, `--capacity` chooses one when the model does not fit,
//! `stow verify` rebuilds the stage from the bundle, `stow run` matches
//! tract and the whole model's bundle, and a capacity no stage can meet
//! fails naming the bytes missing, writing nothing.

mod common;

use common::*;

fn run_outputs(bundle: &str, threads: &str, dir: &std::path::Path, name: &str) -> Vec<f32> {
    let out = dir.join(name);
    let o = stow(&[
        "run",
        bundle,
        "--threads",
        threads,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = stow_onnx::read_tensor_file(&out.join("output_0.pb")).unwrap();
    t.to_plain_array_view::<f32>()
        .unwrap()
        .iter()
        .copied()
        .collect()
}

/// `stow verify` passes on the patched bundle `b` of model `m`, and its
/// outputs at 1 and 2 threads match the whole bundle's.
fn verifies_and_runs_like(m: &str, b: &str, whole: &std::path::Path, dir: &std::path::Path) {
    let o = stow(&["verify", m, b]);
    assert!(o.status.success(), "{}", stderr(&o));
    let want = run_outputs(whole.to_str().unwrap(), "1", dir, "whole");
    for threads in ["1", "2"] {
        let got = run_outputs(b, threads, dir, &format!("fitted{threads}"));
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{g} vs {w}");
        }
    }
}

#[test]
fn capacity_chooses_a_stage_that_fits_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("patch_chain.onnx");
    let m = model.to_str().unwrap();
    let whole = dir.path().join("whole.stow");
    let fitted = dir.path().join("fitted.stow");
    let whole_json = compile_and_inspect(&model, &whole, &[]);
    let capacity = whole_json["arena_bytes"].as_u64().unwrap() / 2;
    let o = stow(&[
        "compile",
        m,
        "-o",
        fitted.to_str().unwrap(),
        "--capacity",
        &capacity.to_string(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("patched stage  image -> "),
        "{}",
        stdout(&o)
    );
    let json = compile_and_inspect(&model, &fitted, &["--capacity", &capacity.to_string()]);
    assert!(json["arena_bytes"].as_u64().unwrap() <= capacity);
    // The stage starts at the image: the caller writes it in bands of
    // rows, each band an arena tensor of its own, together all its rows.
    let tensors = json["tensors"].as_array().unwrap();
    let image = tensors.iter().find(|t| t["name"] == "image").unwrap();
    assert_eq!(image["region"], "rows", "{image}");
    let bands: Vec<_> = tensors
        .iter()
        .filter(|t| t["alias_kind"] == "input_rows")
        .collect();
    assert!(bands.len() >= 2);
    let rows: u64 = bands.iter().map(|t| t["shape"][2].as_u64().unwrap()).sum();
    assert_eq!(rows, image["shape"][2].as_u64().unwrap());
    assert!(bands
        .iter()
        .all(|t| t["region"] == "arena" && t["alias_of"] == "image"));
    let b = fitted.to_str().unwrap();
    let o = stow(&["verify", m, b]);
    assert!(o.status.success(), "{}", stderr(&o));
    let inspect = stdout(&stow(&["inspect", b]));
    assert!(inspect.contains("patched stage"), "{inspect}");
    let chart = stdout(&stow(&["inspect", b, "--chart"]));
    assert!(chart.contains("1 stage in bands of rows"), "{chart}");
    let want = run_outputs(whole.to_str().unwrap(), "1", dir.path(), "whole");
    for threads in ["1", "2", "3"] {
        let o = stow(&["run", b, "--threads", threads, "--check", m]);
        assert!(o.status.success(), "{}", stderr(&o));
        let got = run_outputs(b, threads, dir.path(), &format!("fitted{threads}"));
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{g} vs {w}");
        }
    }
}

#[test]
fn an_explicit_stage_verifies_and_bad_ones_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("mobilenet_block.onnx");
    let m = model.to_str().unwrap();
    let out = dir.path().join("b.stow");
    let o = stow(&[
        "compile",
        m,
        "-o",
        out.to_str().unwrap(),
        "--patch",
        "image:add_25:3",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = stow(&["verify", m, out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    for (bad, says) in [
        ("image:nowhere:1", "no tensor `nowhere`"),
        ("image:pooled:1", "is "),
        ("image:add_25", "FROM:TO:ROWS"),
    ] {
        let out = dir.path().join("bad.stow");
        let o = stow(&["compile", m, "-o", out.to_str().unwrap(), "--patch", bad]);
        assert!(!o.status.success(), "{bad}");
        assert!(stderr(&o).contains(says), "{bad}: {}", stderr(&o));
        assert!(!out.exists());
    }
}

#[test]
fn a_capacity_no_stage_meets_names_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("patch_chain.onnx");
    let out = dir.path().join("small.stow");
    let o = stow(&[
        "compile",
        model.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--capacity",
        "20000",
    ]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("more than the capacity of 20000"), "{e}");
    assert!(e.contains("even with image:"), "{e}");
    assert!(!out.exists());
}

/// A squeeze-and-excitation gate reads its whole input: a stage crosses it
/// only by computing what comes before the gate twice, which costs this
/// model far more than the default 15 % of extra multiply-adds. A capacity
/// below both peaks takes one stage before the gate and one after, both
/// recorded, verified and run like the whole model.
#[test]
fn two_stages_around_a_gate_fit_where_one_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("patch_se.onnx");
    let m = model.to_str().unwrap();
    let whole = dir.path().join("whole.stow");
    let whole_json = compile_and_inspect(&model, &whole, &[]);
    let capacity = whole_json["arena_bytes"].as_u64().unwrap() / 3;
    let fitted = dir.path().join("fitted.stow");
    let b = fitted.to_str().unwrap();
    let o = stow(&["compile", m, "-o", b, "--capacity", &capacity.to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).matches("patched stage").count(),
        2,
        "{}",
        stdout(&o)
    );
    let json = compile_and_inspect(&model, &fitted, &["--capacity", &capacity.to_string()]);
    assert!(json["arena_bytes"].as_u64().unwrap() <= capacity);
    verifies_and_runs_like(m, b, &whole, dir.path());
}

/// With a budget of extra multiply-adds that allows it, one stage runs
/// through the gate: the gate's input is computed in bands twice (once
/// reduced, once gated), never whole; the compiler reports the extra
/// multiply-adds, within the budget, and the bundle verifies and runs
/// like the whole model.
#[test]
fn a_stage_runs_through_a_gate_within_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("patch_se.onnx");
    let m = model.to_str().unwrap();
    let whole = dir.path().join("whole.stow");
    let whole_json = compile_and_inspect(&model, &whole, &[]);
    let capacity = (whole_json["arena_bytes"].as_u64().unwrap() / 3).to_string();
    let fitted = dir.path().join("fitted.stow");
    let b = fitted.to_str().unwrap();
    let budget = ["--capacity", &capacity, "--max-extra-macs", "100"];
    let o = stow(&[&["compile", m, "-o", b][..], &budget[..]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert_eq!(text.matches("patched stage").count(), 1, "{text}");
    let extra: f64 = text
        .split("multiply-adds")
        .nth(1)
        .and_then(|l| l.split('(').nth(1))
        .and_then(|l| l.split(" %").next())
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no extra multiply-adds in {text}"));
    assert!(extra > 0.0 && extra <= 100.0, "{text}");
    let json = compile_and_inspect(&model, &fitted, &budget);
    assert!(json["arena_bytes"].as_u64().unwrap() <= capacity.parse().unwrap());
    verifies_and_runs_like(m, b, &whole, dir.path());
    // Too small a capacity for any stage within no budget at all: the
    // error says that stages through the gate were skipped, and why.
    let tight = (whole_json["arena_bytes"].as_u64().unwrap() / 5).to_string();
    let refused = dir.path().join("refused.stow");
    let r = refused.to_str().unwrap();
    let o = stow(&[
        "compile",
        m,
        "-o",
        r,
        "--capacity",
        &tight,
        "--max-extra-macs",
        "0",
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("more than --max-extra-macs allows"),
        "{}",
        stderr(&o)
    );
    assert!(!refused.exists());
    // A budget that is not a percentage is refused.
    let o = stow(&["compile", m, "-o", b, "--max-extra-macs=-3"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not a percentage"), "{}", stderr(&o));
}

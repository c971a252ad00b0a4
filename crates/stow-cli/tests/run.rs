//! `stow run` executes bundles with Stowage's own kernels and matches
//! tract within 1e-5 on every testdata model and planning variant; it
//! lists every operator it cannot run.

mod common;

use common::*;
use std::path::Path;

fn run(bundle: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["run".to_string(), bundle.display().to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    stow(&args.iter().map(|s| s.as_str()).collect::<Vec<_>>())
}

#[test]
fn every_testdata_model_matches_tract_under_every_reuse_setting() {
    let dir = tempfile::tempdir().unwrap();
    let variants: [&[&str]; 6] = [
        &[],
        &["--threads", "2"],
        &["--threads", "0"],
        &[
            "--strategy",
            "naive",
            "--no-inplace",
            "--no-views",
            "--no-concat-inplace",
        ],
        &["--reuse-inputs"],
        &["--strategy", "greedy-breadth", "--concurrent-branches"],
    ];
    for model in testdata_models() {
        for (v, flags) in variants.iter().enumerate() {
            let out = dir.path().join(format!("r{v}.stow"));
            let mut extra: Vec<String> = model_args(&model);
            extra.extend(flags.iter().map(|s| s.to_string()));
            compile_and_inspect(
                &model,
                &out,
                &extra.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            );
            let model_arg = model.display().to_string();
            for (seed, threads) in [("0", "1"), ("7", "2")] {
                let o = run(
                    &out,
                    &["--check", &model_arg, "--seed", seed, "--threads", threads],
                );
                assert!(
                    o.status.success(),
                    "{} {flags:?} seed {seed}: {}{}",
                    model.display(),
                    stdout(&o),
                    stderr(&o)
                );
                assert!(
                    stdout(&o).contains("outputs match tract within 1e-5"),
                    "{}",
                    stdout(&o)
                );
            }
        }
    }
}

#[test]
fn outputs_are_written_as_tensor_files_and_read_back_as_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("m.stow");
    compile_and_inspect(&testdata("mlp.onnx"), &bundle, &[]);
    let out = dir.path().join("out");
    let o = run(&bundle, &["--out", out.to_str().unwrap(), "--repeat", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("median of 3 runs"), "{}", stdout(&o));
    let t = stow_onnx::read_tensor_file(&out.join("output_0.pb")).unwrap();
    assert_eq!(t.shape(), &[1, 10]);
    let probs = t.cast_to::<f32>().unwrap();
    let sum: f32 = probs.to_plain_array_view::<f32>().unwrap().iter().sum();
    assert!((sum - 1.0).abs() < 1e-5, "softmax output sums to {sum}");
}

/// `--profile` accounts for every step once: the per-type step counts
/// add up to the bundle's steps, their shares to 100 %, and the slowest
/// list names distinct steps, slowest first, each of a listed type.
#[test]
fn the_profile_accounts_for_every_step() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("m.stow");
    compile_and_inspect(&testdata("mobilenet_block.onnx"), &bundle, &[]);
    let o = run(&bundle, &["--profile", "--repeat", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let steps: usize = text
        .split_once("ran ")
        .and_then(|(_, r)| r.split_once(' '))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no step count in {text}"));
    let lines: Vec<&str> = text.lines().collect();
    let types_at = lines
        .iter()
        .position(|l| l.starts_with("time per operator type"))
        .expect("a per-type table");
    let slowest_at = lines
        .iter()
        .position(|l| l.starts_with("slowest steps"))
        .expect("a slowest-steps list");
    let (mut counted, mut share, mut types) = (0usize, 0f64, Vec::new());
    for l in &lines[types_at + 1..slowest_at] {
        let words: Vec<&str> = l.split_whitespace().collect();
        // TYPE MS ms SHARE % COUNT step(s)
        assert_eq!(words.len(), 7, "{l}");
        share += words[3].parse::<f64>().unwrap();
        counted += words[5].parse::<usize>().unwrap();
        types.push(words[0].to_string());
    }
    assert_eq!(counted, steps, "{text}");
    assert!((share - 100.0).abs() < 0.1 * types.len() as f64, "{text}");
    let slowest: Vec<(usize, f64, &str)> = lines[slowest_at + 1..]
        .iter()
        .take_while(|l| l.trim_start().starts_with("step "))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[1].parse().unwrap(), w[2].parse().unwrap(), w[6])
        })
        .collect();
    assert_eq!(slowest.len(), steps.min(15), "{text}");
    let mut seen: Vec<usize> = slowest.iter().map(|s| s.0).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), slowest.len(), "{text}");
    assert!(slowest.iter().all(|s| s.0 < steps), "{text}");
    assert!(slowest.windows(2).all(|w| w[0].1 >= w[1].1), "{text}");
    assert!(
        slowest.iter().all(|s| types.iter().any(|t| t == s.2)),
        "{text}"
    );
    // `--profile-steps 0` lists every step once, in the bundle's order.
    let o = run(
        &bundle,
        &["--profile", "--profile-steps", "0", "--repeat", "3"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let listed: Vec<usize> = text
        .lines()
        .skip_while(|l| !l.starts_with("every step"))
        .skip(1)
        .take_while(|l| l.trim_start().starts_with("step "))
        .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
        .collect();
    assert_eq!(listed, (0..steps).collect::<Vec<_>>(), "{text}");
}

#[test]
fn the_two_branch_sample_inputs_run_from_npz() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("m.stow");
    compile_and_inspect(&testdata("two_branch.onnx"), &bundle, &[]);
    let npz = testdata("two_branch.inputs.npz");
    let model = testdata("two_branch.onnx");
    let o = run(
        &bundle,
        &[
            "--inputs",
            npz.to_str().unwrap(),
            "--check",
            model.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn unsupported_operators_are_all_listed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.stow");
    compile_and_inspect(&testdata("residual_cnn.onnx"), &path, &[]);
    rewrite(&path, |c| {
        c.ops[1].op_type = "Frobnicate".into();
        c.ops[3].op_type = "Quux".into();
    });
    let o = run(&path, &[]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("2 operator(s) cannot run"), "{err}");
    assert!(
        err.contains("step 1") && err.contains("Frobnicate"),
        "{err}"
    );
    assert!(err.contains("step 3") && err.contains("Quux"), "{err}");
    assert!(stdout(&o).is_empty());
}

#[test]
fn bad_arguments_are_refused_clearly() {
    let o = run(Path::new("/nonexistent/m.stow"), &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("/nonexistent/m.stow"), "{}", stderr(&o));
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("m.stow");
    compile_and_inspect(&testdata("mlp.onnx"), &bundle, &[]);
    let o = run(&bundle, &["--repeat", "0"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--repeat"), "{}", stderr(&o));
}

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

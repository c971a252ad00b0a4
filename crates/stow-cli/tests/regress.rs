//! Regression cases of bugs seen on real models (`testdata/regress/`, made by
//! `tools/gen_regress.py`): each compiles, runs from its bundle with the
//! Stowage runtime, and matches expected outputs computed by a third party
//! (onnxruntime, or the `onnx` package's node suite). The bundle's inputs
//! and outputs carry the ONNX graph's own names.

mod common;

use common::*;
use prost::Message;
use std::path::{Path, PathBuf};
use stow_onnx::Tensor;
use tract_onnx::prelude::f16;

/// Largest error accepted, relative to the output's scale.
const TOLERANCE: f64 = 1e-4;

fn cases() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo_root().join("testdata/regress"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    v.sort();
    assert!(
        v.len() >= 8,
        "testdata/regress should hold the generated cases"
    );
    v
}

/// The graph's input names (initializers excluded) and output names.
fn graph_names(model: &Path) -> (Vec<String>, Vec<String>) {
    let bytes = std::fs::read(model).unwrap();
    let proto = tract_onnx::pb::ModelProto::decode(&bytes[..]).unwrap();
    let graph = proto.graph.unwrap();
    let inits: Vec<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
    let inputs = graph
        .input
        .iter()
        .filter(|i| !inits.contains(&i.name.as_str()))
        .map(|i| i.name.clone())
        .collect();
    let outputs = graph.output.iter().map(|o| o.name.clone()).collect();
    (inputs, outputs)
}

/// `max|got − want| / max|want|` (the absolute error when `want` is all
/// zeros); NaNs must sit at the same places.
fn scaled_error(got: &Tensor, want: &Tensor) -> Result<f64, String> {
    if got.datum_type() != want.datum_type() || got.shape() != want.shape() {
        return Err(format!(
            "{:?} {:?}, expected {:?} {:?}",
            got.datum_type(),
            got.shape(),
            want.datum_type(),
            want.shape()
        ));
    }
    let (g, w) = (values(got), values(want));
    let mut diff = 0.0f64;
    for (a, b) in g.iter().zip(&w) {
        if a.is_nan() != b.is_nan() {
            return Err(format!("NaN where {b} expected (or the reverse)"));
        }
        if !a.is_nan() && a != b {
            diff = diff.max((a - b).abs());
        }
    }
    let scale = scale_of(&w);
    Ok(if scale > 0.0 { diff / scale } else { diff })
}

/// A numeric tensor's elements as f64.
fn values(t: &Tensor) -> Vec<f64> {
    let t = t.cast_to::<f64>().expect("numeric output");
    let v = t.to_plain_array_view::<f64>().unwrap();
    v.iter().copied().collect()
}

/// The largest finite magnitude.
fn scale_of(v: &[f64]) -> f64 {
    v.iter()
        .filter(|b| b.is_finite())
        .fold(0.0f64, |m, b| m.max(b.abs()))
}

/// The largest difference between an f16 output and the expected one,
/// in f16 rounding steps at the expected value, after `slack` (an
/// absolute amount) is taken off: f16 outputs are judged by their
/// roundings, not by a tolerance finer than f16 holds.
fn f16_steps(got: &Tensor, want: &Tensor, slack: f64) -> Result<f64, String> {
    if got.datum_type() != want.datum_type() || got.shape() != want.shape() {
        return Err(format!(
            "{:?} {:?}, expected {:?} {:?}",
            got.datum_type(),
            got.shape(),
            want.datum_type(),
            want.shape()
        ));
    }
    let (g, w) = (
        got.to_plain_array_view::<f16>().unwrap(),
        want.to_plain_array_view::<f16>().unwrap(),
    );
    let mut worst = 0.0f64;
    for (a, b) in g.iter().zip(w) {
        if a.is_nan() != b.is_nan() {
            return Err(format!("NaN where {b} expected (or the reverse)"));
        }
        if a.is_nan() || a == b {
            continue;
        }
        let (a, b) = (a.to_f64(), b.to_f64());
        // The spacing of f16 values at |b|: 2^(e − 10), subnormals 2^−24.
        let step = 2f64.powi((b.abs().max(2f64.powi(-14))).log2().floor() as i32 - 10);
        worst = worst.max(((a - b).abs() - slack).max(0.0) / step);
    }
    Ok(worst)
}

/// The largest difference between two integer outputs, in units.
fn integer_steps(got: &Tensor, want: &Tensor) -> Result<i64, String> {
    if got.datum_type() != want.datum_type() || got.shape() != want.shape() {
        return Err(format!(
            "{:?} {:?}, expected {:?} {:?}",
            got.datum_type(),
            got.shape(),
            want.datum_type(),
            want.shape()
        ));
    }
    let (g, w) = (values(got), values(want));
    Ok(g.iter()
        .zip(&w)
        .map(|(a, b)| (a - b).abs() as i64)
        .max()
        .unwrap_or(0))
}

fn run_case(case: &Path, threads: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("case.stow");
    let model = case.join("model.onnx");
    let mut args: Vec<String> = vec![
        "compile".into(),
        model.display().to_string(),
        "-o".into(),
        bundle.display().to_string(),
    ];
    let extra: Vec<String> = std::fs::read_to_string(case.join("args.txt"))
        .map(|t| {
            t.lines()
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    // Inputs made constants with `--set` are not inputs of the bundle.
    let constants: Vec<String> = extra
        .windows(2)
        .filter(|w| w[0] == "--set")
        .filter_map(|w| w[1].split_once('=').map(|(n, _)| n.to_string()))
        .collect();
    args.extend(extra);
    let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let o = stow(&refs);
    if !o.status.success() {
        return Err(format!("compile failed: {}", stderr(&o)));
    }
    let opened = stow_runtime::Bundle::open(&bundle).map_err(|e| e.to_string())?;
    let (mut want_in, want_out) = graph_names(&model);
    want_in.retain(|n| !constants.contains(n));
    let got_in: Vec<String> = opened.inputs().map(|t| t.name().to_string()).collect();
    let got_out: Vec<String> = opened.outputs().map(|t| t.name().to_string()).collect();
    if got_in != want_in || got_out != want_out {
        return Err(format!(
            "bundle inputs {got_in:?} outputs {got_out:?}, graph inputs {want_in:?} outputs {want_out:?}"
        ));
    }
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let o = stow(&[
        "run",
        &bundle.display().to_string(),
        "--inputs",
        &case.display().to_string(),
        "--threads",
        threads,
        "--out",
        &out.display().to_string(),
    ]);
    if !o.status.success() {
        return Err(format!("run failed: {}", stderr(&o)));
    }
    let expected = stow_onnx::numbered_files(case, "output").unwrap();
    let allowed_steps: f64 = std::fs::read_to_string(case.join("f16_steps.txt"))
        .map(|t| t.trim().parse().unwrap())
        .unwrap_or(1.0);
    let allowed_q_steps: i64 = std::fs::read_to_string(case.join("q_steps.txt"))
        .map(|t| t.trim().parse().unwrap())
        .unwrap_or(0);
    for (ix, want) in expected.iter().enumerate() {
        let want = stow_onnx::read_tensor_file(want).unwrap();
        let got = stow_onnx::read_tensor_file(&out.join(format!("output_{ix}.pb")))
            .map_err(|e| format!("output {ix}: {e}"))?;
        if want.datum_type() == stow_onnx::DatumType::F16 {
            // Sums in f32 (a convolution's) may differ from another
            // order's by about 1e-6 of the output's scale: below one f16
            // step, except at values near 0.
            let slack = 1e-5 * scale_of(&values(&want));
            let steps = f16_steps(&got, &want, slack).map_err(|e| format!("output {ix}: {e}"))?;
            if steps > allowed_steps {
                return Err(format!(
                    "output {ix} differs by {steps} f16 steps (allowed {allowed_steps})"
                ));
            }
            continue;
        }
        if matches!(
            want.datum_type(),
            stow_onnx::DatumType::U8 | stow_onnx::DatumType::I8
        ) {
            // Quantized outputs are judged in integer steps: onnxruntime
            // computes some quantized operators with combined scales.
            let steps = integer_steps(&got, &want).map_err(|e| format!("output {ix}: {e}"))?;
            if steps > allowed_q_steps {
                return Err(format!(
                    "output {ix} differs by {steps} quantization steps (allowed {allowed_q_steps})"
                ));
            }
            continue;
        }
        let error = scaled_error(&got, &want).map_err(|e| format!("output {ix}: {e}"))?;
        if error > TOLERANCE {
            return Err(format!(
                "output {ix} differs by {error:.3e} of its scale (tolerance {TOLERANCE:e})"
            ));
        }
    }
    Ok(())
}

#[test]
fn every_case_matches_its_third_party_outputs() {
    let mut failures = Vec::new();
    for case in cases() {
        for threads in ["1", "2"] {
            if let Err(e) = run_case(&case, threads) {
                failures.push(format!(
                    "{} ({threads} threads): {e}",
                    case.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_comparison_catches_a_wrong_value() {
    // The measure this file relies on must see a 1e-3 relative change.
    let want = Tensor::from_shape(&[3], &[1.0f32, -2.0, 4.0]).unwrap();
    let got = Tensor::from_shape(&[3], &[1.0f32, -2.004, 4.0]).unwrap();
    let error = scaled_error(&got, &want).unwrap();
    assert!(error > TOLERANCE && error < 2e-3, "{error}");
    let nan = Tensor::from_shape(&[3], &[1.0f32, f32::NAN, 4.0]).unwrap();
    assert!(scaled_error(&nan, &want).is_err());
    // f16 outputs: one rounding step apart is 1 step, at any magnitude.
    let h = |v: &[f32]| {
        let v: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
        Tensor::from_shape(&[v.len()], &v).unwrap()
    };
    let want = h(&[1.0, -1000.0, 0.001]);
    assert_eq!(f16_steps(&want, &want, 0.0), Ok(0.0));
    let next = h(&[1.0 + 2f32.powi(-10), -1000.0, 0.001]);
    assert_eq!(f16_steps(&next, &want, 0.0), Ok(1.0));
    // Quantized outputs: integer steps, not a fraction of the scale.
    let q = |v: &[u8]| Tensor::from_shape(&[v.len()], v).unwrap();
    assert_eq!(integer_steps(&q(&[3, 200, 7]), &q(&[3, 200, 7])), Ok(0));
    assert_eq!(integer_steps(&q(&[4, 198, 7]), &q(&[3, 200, 7])), Ok(2));
    let far = h(&[1.0, -1001.5, 0.001]);
    assert_eq!(f16_steps(&far, &want, 0.0), Ok(3.0));
}

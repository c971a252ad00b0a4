//! Judges a random graph: compiled by the library, run from its bundle
//! by the runtime, and compared with tract running the model as ONNX
//! states it (translated, not decluttered: the rewrites Stowage guards
//! against live in tract's declutter).

use super::RandomGraph;
use std::path::Path;
use stow_runtime::{Bundle, Session};
use tract_onnx::prelude::*;

/// An output of the bundle: name, shape, values.
type Output = (String, Vec<usize>, Vec<f64>);

/// What became of one graph.
pub enum Verdict {
    /// Every output agrees with tract.
    Match,
    /// Stowage refused it, with this reason.
    Refused(String),
    /// An output differs: what, and where the model was kept.
    Differs(String),
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Verdict::Differs(format!($($fmt)*));
        }
    };
}

macro_rules! ensure_eq {
    ($a:expr, $b:expr, $($fmt:tt)*) => {
        if $a != $b {
            return Verdict::Differs(format!("{:?} != {:?}: {}", $a, $b, format!($($fmt)*)));
        }
    };
}

/// tract's outputs for the model's inputs, by output name.
fn reference(graph: &RandomGraph, file: &Path) -> Vec<(String, Tensor)> {
    let model = tract_onnx::onnx()
        .model_for_path(file)
        .and_then(|m| m.into_typed())
        .unwrap_or_else(|e| {
            panic!(
                "tract cannot load a generated graph ({:?}): {e:?}",
                graph.ops
            )
        });
    let names: Vec<String> = model
        .output_outlets()
        .unwrap()
        .iter()
        .map(|o| model.node(o.node).name.clone())
        .collect();
    let names: Vec<String> = graph
        .model
        .graph
        .as_ref()
        .map(|g| g.output.iter().map(|o| o.name.clone()).collect())
        .unwrap_or(names);
    let inputs: TVec<TValue> = graph
        .inputs
        .iter()
        .map(|i| Tensor::from_shape(&i.shape, &i.data).unwrap().into_tvalue())
        .collect();
    let plan = model.into_runnable().unwrap();
    let out = plan.run(inputs).unwrap_or_else(|e| {
        panic!(
            "tract cannot run a generated graph ({:?}): {e:?}",
            graph.ops
        )
    });
    names
        .into_iter()
        .zip(out.into_iter().map(|v| v.into_tensor()))
        .collect()
}

/// Stowage's outputs by name, or the reason it refused the graph.
fn stowage(graph: &RandomGraph, file: &Path, dir: &Path) -> Result<Vec<Output>, String> {
    let compiled = stow_compile::compile(file, &stow_compile::CompileOptions::default())
        .map_err(|e| format!("compile: {e}"))?;
    let bundle_path = dir.join("model.stow");
    compiled.write(&bundle_path).map_err(|e| e.to_string())?;
    let bundle = Bundle::open(&bundle_path).map_err(|e| e.to_string())?;
    let mut session = Session::new(&bundle).map_err(|e| format!("session: {e}"))?;
    let ids: Vec<u32> = bundle.inputs().map(|t| t.id).collect();
    assert_eq!(ids.len(), graph.inputs.len(), "bundle inputs");
    for (id, input) in ids.iter().zip(&graph.inputs) {
        session
            .set_input::<f32, _>(id, &input.data)
            .map_err(|e| format!("input {}: {e}", input.name))?;
    }
    session.run().map_err(|e| format!("run: {e}"))?;
    bundle
        .outputs()
        .map(|t| {
            let shape = t.tensor.shape.iter().map(|&d| d as usize).collect();
            let values = match t.tensor.dtype {
                stow_bundle::DType::F32 => session
                    .output::<f32, _>(&t.id)
                    .map(|v| v.iter().map(|&x| x as f64).collect()),
                stow_bundle::DType::I32 => session
                    .output::<i32, _>(&t.id)
                    .map(|v| v.iter().map(|&x| x as f64).collect()),
                other => panic!("output `{}` of type {other:?}", t.name()),
            }
            .map_err(|e| e.to_string())?;
            Ok((t.name().to_string(), shape, values))
        })
        .collect()
}

/// Compares every output; floats within 1e-4 of max(largest |value|, 1):
/// the floor of 1 keeps a cancellation (a difference of two equal values
/// computed in another order) from counting as a relative error.
pub fn judge(graph: &RandomGraph, seed: u64) -> Verdict {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("model.onnx");
    std::fs::write(&file, prost::Message::encode_to_vec(&graph.model)).unwrap();
    let want = reference(graph, &file);
    let got = match stowage(graph, &file, dir.path()) {
        Ok(got) => got,
        Err(reason) => return Verdict::Refused(reason),
    };
    let keep = std::env::temp_dir().join(format!("stow-random-graph-{seed}.onnx"));
    let context = || {
        let _ = std::fs::copy(&file, &keep);
        format!(
            "seed {seed}, ops {:?}, model kept at {}",
            graph.ops,
            keep.display()
        )
    };
    ensure_eq!(got.len(), want.len(), "output count; {}", context());
    for ((name, shape, values), (want_name, want)) in got.iter().zip(&want) {
        ensure_eq!(name, want_name, "output names; {}", context());
        ensure_eq!(
            &shape[..],
            want.shape(),
            "output `{}` shape; {}",
            name,
            context()
        );
        let want: Vec<f64> = want
            .cast_to::<f64>()
            .unwrap()
            .try_as_plain_ram()
            .unwrap()
            .as_slice::<f64>()
            .unwrap()
            .to_vec();
        let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        for (i, (a, b)) in values.iter().zip(&want).enumerate() {
            let same = a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-4 * scale;
            ensure!(
                same,
                "output `{}`[{}]: Stowage {} but tract {}; {}",
                name,
                i,
                a,
                b,
                context()
            );
        }
    }
    Verdict::Match
}

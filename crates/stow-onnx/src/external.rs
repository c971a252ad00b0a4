//! External tensor data (weights kept in side files, as models over 2 GB
//! must): checked before tract reads a byte, so that a hostile model gets a
//! clear refusal naming the tensor, and cannot make the tool read outside
//! the model's directory or allocate more than the side file holds.

use crate::error::OnnxError;
use std::path::{Component, Path, PathBuf};
use tract_onnx::pb::{GraphProto, TensorProto};

/// `TensorProto.DataLocation.EXTERNAL`.
const EXTERNAL: i32 = 1;

/// Checks every tensor of `graph` (initializers, attribute tensors,
/// subgraphs) that keeps its data in a side file.
pub(crate) fn check(model: &Path, graph: &GraphProto) -> Result<(), OnnxError> {
    let dir = match model.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    visit(graph, &mut |t| check_tensor(model, &dir, t))
}

fn visit(
    graph: &GraphProto,
    f: &mut impl FnMut(&TensorProto) -> Result<(), OnnxError>,
) -> Result<(), OnnxError> {
    for t in &graph.initializer {
        f(t)?;
    }
    for node in &graph.node {
        for a in &node.attribute {
            for t in a.t.iter().chain(&a.tensors) {
                f(t)?;
            }
            for g in a.g.iter().chain(&a.graphs) {
                visit(g, f)?;
            }
        }
    }
    Ok(())
}

fn check_tensor(model: &Path, dir: &Path, t: &TensorProto) -> Result<(), OnnxError> {
    if t.data_location != Some(EXTERNAL) {
        return Ok(());
    }
    let refuse = |reason: String| OnnxError::ExternalData {
        path: model.to_path_buf(),
        tensor: t.name.clone(),
        reason,
    };
    let entry = |key: &str| {
        t.external_data
            .iter()
            .find(|e| e.key == key)
            .map(|e| e.value.as_str())
    };
    let number = |key: &str| -> Result<Option<u64>, OnnxError> {
        entry(key)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| refuse(format!("{key} `{v}` is not a byte count")))
            })
            .transpose()
    };
    let location = entry("location").ok_or_else(|| refuse("has no location".into()))?;
    let relative = Path::new(location);
    if location.is_empty()
        || relative
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(refuse(format!(
            "location `{location}` is not a path inside the model's directory"
        )));
    }
    let inside = dir
        .canonicalize()
        .map_err(|e| refuse(format!("cannot resolve the model's directory: {e}")))?;
    let file = dir
        .join(relative)
        .canonicalize()
        .map_err(|e| refuse(format!("side file `{location}`: {e}")))?;
    if !file.starts_with(&inside) {
        return Err(refuse(format!(
            "location `{location}` leads outside the model's directory (to {})",
            file.display()
        )));
    }
    let meta =
        std::fs::metadata(&file).map_err(|e| refuse(format!("side file `{location}`: {e}")))?;
    if !meta.is_file() {
        return Err(refuse(format!("side file `{location}` is not a file")));
    }
    let offset = number("offset")?.unwrap_or(0);
    let end = match number("length")? {
        Some(length) => offset.checked_add(length),
        None => Some(meta.len()),
    };
    match end {
        Some(end) if offset <= meta.len() && end <= meta.len() => Ok(()),
        _ => Err(refuse(format!(
            "bytes {offset}..{} lie outside side file `{location}` ({} bytes)",
            end.map_or("overflow".to_string(), |e| e.to_string()),
            meta.len()
        ))),
    }
}

//! Graph inputs fixed to constant values at compile time (`--set`).
//!
//! A model may take a sample rate, a mode flag or a table as an input that
//! never changes in a deployment. Made a constant, it folds away with
//! everything that depends only on it (an `If` on it keeps one branch), and
//! the bundle no longer has that input.

use crate::error::OnnxError;
use crate::inputs::{read_npz_named, tensor_proto};
use std::path::Path;
use tract_onnx::pb::tensor_shape_proto::dimension::Value as Dim;
use tract_onnx::pb::type_proto::Value as Type;
use tract_onnx::pb::GraphProto;
use tract_onnx::prelude::{DatumType, Tensor};

/// The value given for one graph input.
#[derive(Clone, Debug)]
pub enum InputValue {
    /// Numbers as written (`16000`, `1,2,3`), read as the input's element
    /// type.
    Text(Vec<String>),
    /// A tensor, e.g. from an `.npz` archive.
    Tensor(Tensor),
}

/// A graph input made a constant.
#[derive(Clone, Debug)]
pub struct FixedInput {
    /// The graph input's name.
    pub name: String,
    /// Its value.
    pub value: InputValue,
}

/// Parses `NAME=VALUE` or `NAME=V1,V2,...`.
pub fn parse_set_arg(arg: &str) -> Result<FixedInput, OnnxError> {
    let bad = |why: &str| {
        OnnxError::BadArgument(format!(
            "--set `{arg}`: {why} (expected NAME=VALUE or NAME=V1,V2,...)"
        ))
    };
    let (name, values) = arg.split_once('=').ok_or_else(|| bad("missing `=`"))?;
    if name.is_empty() {
        return Err(bad("empty input name"));
    }
    let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
    if values.iter().any(|v| v.is_empty()) {
        return Err(bad("empty value"));
    }
    Ok(FixedInput {
        name: name.to_string(),
        value: InputValue::Text(values),
    })
}

/// Every array of an `.npz` archive, as the value of the input it is named
/// after.
pub fn read_set_npz(path: &Path) -> Result<Vec<FixedInput>, OnnxError> {
    let archive = npyz::npz::NpzArchive::open(path).map_err(|source| OnnxError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let names: Vec<String> = archive.array_names().map(String::from).collect();
    drop(archive);
    let tensors = read_npz_named(&names, path)?;
    Ok(names
        .into_iter()
        .zip(tensors)
        .map(|(name, t)| FixedInput {
            name,
            value: InputValue::Tensor(t),
        })
        .collect())
}

/// ONNX element type codes of the types a value can be given in.
fn datum_type(elem_type: i32) -> Option<DatumType> {
    Some(match elem_type {
        1 => DatumType::F32,
        2 => DatumType::U8,
        3 => DatumType::I8,
        5 => DatumType::I16,
        6 => DatumType::I32,
        7 => DatumType::I64,
        9 => DatumType::Bool,
        11 => DatumType::F64,
        _ => return None,
    })
}

fn parse_numbers(name: &str, dt: DatumType, text: &[String]) -> Result<Tensor, OnnxError> {
    fn each<T: std::str::FromStr + tract_onnx::prelude::Datum + Copy>(
        name: &str,
        text: &[String],
    ) -> Result<Tensor, OnnxError> {
        let values = text
            .iter()
            .map(|v| {
                v.parse::<T>().map_err(|_| {
                    OnnxError::BadArgument(format!(
                        "--set `{name}`: `{v}` is not a {:?}",
                        T::datum_type()
                    ))
                })
            })
            .collect::<Result<Vec<T>, _>>()?;
        Tensor::from_shape(&[values.len()], &values)
            .map_err(|e| OnnxError::BadArgument(format!("--set `{name}`: {e}")))
    }
    match dt {
        DatumType::F32 => each::<f32>(name, text),
        DatumType::F64 => each::<f64>(name, text),
        DatumType::U8 => each::<u8>(name, text),
        DatumType::I8 => each::<i8>(name, text),
        DatumType::I16 => each::<i16>(name, text),
        DatumType::I32 => each::<i32>(name, text),
        DatumType::I64 => each::<i64>(name, text),
        DatumType::Bool => {
            let as_bool: Vec<String> = text
                .iter()
                .map(|v| match v.as_str() {
                    "1" => "true".to_string(),
                    "0" => "false".to_string(),
                    other => other.to_string(),
                })
                .collect();
            each::<bool>(name, &as_bool)
        }
        other => Err(OnnxError::BadArgument(format!(
            "--set `{name}`: inputs of type {other:?} cannot be set"
        ))),
    }
}

/// Turns each fixed input into an initializer of the same name, which
/// tract reads as a constant. The value takes the input's declared shape
/// when that shape is concrete and holds as many elements; a single value
/// for an input of unknown or scalar shape is a scalar.
pub(crate) fn apply(graph: &mut GraphProto, fixed: &[FixedInput]) -> Result<(), OnnxError> {
    let is_initializer =
        |graph: &GraphProto, name: &str| graph.initializer.iter().any(|t| t.name == name);
    for f in fixed {
        let inputs: Vec<&str> = graph
            .input
            .iter()
            .filter(|i| !is_initializer(graph, &i.name))
            .map(|i| i.name.as_str())
            .collect();
        let Some(declared) = graph
            .input
            .iter()
            .find(|i| i.name == f.name && !is_initializer(graph, &i.name))
        else {
            return Err(OnnxError::BadArgument(format!(
                "--set `{}`: the model has no input of that name (inputs: {})",
                f.name,
                inputs.join(", ")
            )));
        };
        let Some(Type::TensorType(t)) = declared.r#type.as_ref().and_then(|t| t.value.as_ref())
        else {
            return Err(OnnxError::BadArgument(format!(
                "--set `{}`: the input is not a tensor",
                f.name
            )));
        };
        let dt = datum_type(t.elem_type).ok_or_else(|| {
            OnnxError::BadArgument(format!(
                "--set `{}`: inputs of ONNX element type {} cannot be set",
                f.name, t.elem_type
            ))
        })?;
        // Concrete declared dimensions, or None when any is symbolic.
        let shape: Option<Vec<usize>> = t.shape.as_ref().and_then(|s| {
            s.dim
                .iter()
                .map(|d| match d.value {
                    Some(Dim::DimValue(v)) => usize::try_from(v).ok(),
                    _ => None,
                })
                .collect::<Option<Vec<usize>>>()
        });
        let value = match &f.value {
            InputValue::Text(text) => parse_numbers(&f.name, dt, text)?,
            InputValue::Tensor(t) => {
                if t.datum_type() != dt {
                    return Err(OnnxError::BadArgument(format!(
                        "--set `{}`: the value is {:?} but the input is {dt:?}",
                        f.name,
                        t.datum_type()
                    )));
                }
                t.clone()
            }
        };
        let count = value.len();
        let target: Vec<usize> = match (&shape, &f.value) {
            (Some(s), _) if s.iter().product::<usize>() == count => s.clone(),
            (Some(s), _) => {
                return Err(OnnxError::BadArgument(format!(
                    "--set `{}`: {count} values for an input of shape {s:?}",
                    f.name
                )))
            }
            (None, InputValue::Tensor(t)) => t.shape().to_vec(),
            (None, InputValue::Text(_)) if count == 1 => vec![],
            (None, InputValue::Text(_)) => vec![count],
        };
        let value = value
            .into_shape(&target)
            .map_err(|e| OnnxError::BadArgument(format!("--set `{}`: {e}", f.name)))?;
        graph.initializer.push(tensor_proto(&f.name, &value)?);
    }
    Ok(())
}

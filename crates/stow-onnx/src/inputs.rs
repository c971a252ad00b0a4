//! Input values for runs: seeded random tensors, or ONNX `TensorProto`
//! files as the ONNX test cases ship them (`input_0.pb`, `output_0.pb`, ...).

use crate::error::{OnnxError, Stage};
use crate::graph::ModelGraph;
use std::path::{Path, PathBuf};
use tract_onnx::data_resolver::MmapDataResolver;
use tract_onnx::prelude::*;

/// A small deterministic generator (SplitMix64): the same seed gives the same
/// inputs on every machine.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

/// One seeded random tensor per graph input. Floats are uniform in [-1, 1);
/// integers are 0 or 1 (valid as indices and masks); booleans are random.
pub fn random_inputs(graph: &ModelGraph, seed: u64) -> Result<Vec<Tensor>, OnnxError> {
    let model = graph.typed_model();
    let mut specs = Vec::with_capacity(graph.inputs.len());
    for &tid in &graph.inputs {
        let info = &graph.tensors[tid];
        let (node, slot) = info.outlet;
        let dt = model
            .outlet_fact(OutletId::new(node, slot))
            .map_err(|e| OnnxError::tract(Stage::Analysis, e))?
            .datum_type;
        let shape: Vec<usize> = info.shape.iter().map(|&d| d as usize).collect();
        specs.push((info.name.clone(), dt, shape));
    }
    random_tensors(&specs, seed)
}

/// Seeded random tensors of the given names, types and shapes, drawn as
/// [`random_inputs`] draws them (the same seed gives the same values).
pub fn random_tensors(
    specs: &[(String, DatumType, Vec<usize>)],
    seed: u64,
) -> Result<Vec<Tensor>, OnnxError> {
    let mut rng = SplitMix(seed);
    let mut out = Vec::with_capacity(specs.len());
    for (name, dt, shape) in specs {
        let (dt, shape) = (*dt, shape.as_slice());
        let n: usize = shape.iter().product();
        let t = match dt {
            DatumType::F32 => Tensor::from_shape(
                shape,
                &(0..n).map(|_| rng.unit() as f32).collect::<Vec<_>>(),
            ),
            DatumType::F64 => {
                Tensor::from_shape(shape, &(0..n).map(|_| rng.unit()).collect::<Vec<_>>())
            }
            DatumType::F16 => Tensor::from_shape(
                shape,
                &(0..n).map(|_| rng.unit() as f32).collect::<Vec<_>>(),
            )
            .and_then(|t| Ok(t.cast_to_dt(DatumType::F16)?.into_owned())),
            DatumType::Bool => Tensor::from_shape(
                shape,
                &(0..n).map(|_| rng.next() & 1 == 1).collect::<Vec<_>>(),
            ),
            dt if dt.is_integer() => Tensor::from_shape(
                shape,
                &(0..n).map(|_| (rng.next() & 1) as i64).collect::<Vec<_>>(),
            )
            .and_then(|t| Ok(t.cast_to_dt(dt)?.into_owned())),
            other => {
                return Err(OnnxError::UnsupportedType {
                    tensor: name.clone(),
                    dtype: format!("{other:?}"),
                })
            }
        }
        .map_err(|e| OnnxError::tract(Stage::Analysis, e))?;
        out.push(t);
    }
    Ok(out)
}

/// Reads one `TensorProto` file.
pub fn read_tensor_file(path: &Path) -> Result<Tensor, OnnxError> {
    let bytes = std::fs::read(path).map_err(|source| OnnxError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let proto =
        tract_onnx::tensor::proto_from_reader(&bytes[..]).map_err(|e| OnnxError::BadInputFile {
            path: path.to_path_buf(),
            reason: format!("{e:#}"),
        })?;
    tract_onnx::tensor::load_tensor(&MmapDataResolver, &proto, None).map_err(|e| {
        OnnxError::BadInputFile {
            path: path.to_path_buf(),
            reason: format!("{e:#}"),
        }
    })
}

/// Writes `t` as a `TensorProto` file named `name` (raw little-endian
/// data), the form [`read_tensor_file`] and the ONNX test cases use.
pub fn write_tensor_file(path: &Path, name: &str, t: &Tensor) -> Result<(), OnnxError> {
    use prost::Message as _;
    let proto = tensor_proto(name, t)?;
    std::fs::write(path, proto.encode_to_vec()).map_err(|source| OnnxError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// `t` as an ONNX `TensorProto` named `name`, with raw little-endian data.
pub(crate) fn tensor_proto(
    name: &str,
    t: &Tensor,
) -> Result<tract_onnx::pb::TensorProto, OnnxError> {
    let data_type = match t.datum_type() {
        DatumType::F32 => 1,
        DatumType::U8 => 2,
        DatumType::I8 => 3,
        DatumType::U16 => 4,
        DatumType::I16 => 5,
        DatumType::I32 => 6,
        DatumType::I64 => 7,
        DatumType::Bool => 9,
        DatumType::F16 => 10,
        DatumType::F64 => 11,
        DatumType::U32 => 12,
        DatumType::U64 => 13,
        other => {
            return Err(OnnxError::UnsupportedType {
                tensor: name.to_string(),
                dtype: format!("{other:?}"),
            })
        }
    };
    Ok(tract_onnx::pb::TensorProto {
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type,
        name: name.to_string(),
        raw_data: t.as_bytes().to_vec(),
        ..Default::default()
    })
}

/// The files `PREFIX_0.pb`, `PREFIX_1.pb`, ... in `dir`, in index order.
pub fn numbered_files(dir: &Path, prefix: &str) -> Result<Vec<PathBuf>, OnnxError> {
    let entries = std::fs::read_dir(dir).map_err(|source| OnnxError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut found: Vec<(usize, PathBuf)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| OnnxError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(ix) = name
            .strip_prefix(prefix)
            .and_then(|r| r.strip_prefix('_'))
            .and_then(|r| r.strip_suffix(".pb"))
            .and_then(|r| r.parse::<usize>().ok())
        {
            found.push((ix, entry.path()));
        }
    }
    found.sort();
    Ok(found.into_iter().map(|(_, p)| p).collect())
}

/// Reads `input_*.pb` from `dir`, checking there is one per graph input.
pub fn read_input_dir(graph: &ModelGraph, dir: &Path) -> Result<Vec<Tensor>, OnnxError> {
    let files = numbered_files(dir, "input")?;
    if files.len() != graph.inputs.len() {
        return Err(OnnxError::BadArgument(format!(
            "{}: {} input_N.pb files for a model with {} inputs",
            dir.display(),
            files.len(),
            graph.inputs.len()
        )));
    }
    files.iter().map(|f| read_tensor_file(f)).collect()
}

/// Reads one array per graph input from a numpy `.npz` archive, by input
/// name, or positionally (`arr_0`, `arr_1`, ... as `numpy.savez` names
/// unnamed arrays).
pub fn read_npz(graph: &ModelGraph, path: &Path) -> Result<Vec<Tensor>, OnnxError> {
    let names: Vec<String> = graph
        .inputs
        .iter()
        .map(|&tid| graph.tensors[tid].name.clone())
        .collect();
    read_npz_named(&names, path)
}

/// Reads one array per name from a numpy `.npz` archive, by name or
/// positionally (`arr_0`, `arr_1`, ...).
pub fn read_npz_named(names: &[String], path: &Path) -> Result<Vec<Tensor>, OnnxError> {
    let bad = |reason: String| OnnxError::BadInputFile {
        path: path.to_path_buf(),
        reason,
    };
    let mut archive = npyz::npz::NpzArchive::open(path).map_err(|source| OnnxError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut out = Vec::with_capacity(names.len());
    for (ix, name) in names.iter().enumerate() {
        let positional = format!("arr_{ix}");
        let key = if archive.array_names().any(|n| n == name.as_str()) {
            name.as_str()
        } else {
            positional.as_str()
        };
        let npy = archive
            .by_name(key)
            .map_err(|e| bad(e.to_string()))?
            .ok_or_else(|| bad(format!("no array named `{name}` or `{positional}`")))?;
        let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
        let descr = npy.dtype().descr();
        let err = |e: std::io::Error| bad(format!("array `{name}`: {e}"));
        let t = match descr.as_str() {
            "'<f4'" => Tensor::from_shape(&shape, &npy.into_vec::<f32>().map_err(err)?),
            "'<f8'" => Tensor::from_shape(&shape, &npy.into_vec::<f64>().map_err(err)?),
            "'<i8'" => Tensor::from_shape(&shape, &npy.into_vec::<i64>().map_err(err)?),
            "'<i4'" => Tensor::from_shape(&shape, &npy.into_vec::<i32>().map_err(err)?),
            "'|i1'" => Tensor::from_shape(&shape, &npy.into_vec::<i8>().map_err(err)?),
            "'|u1'" => Tensor::from_shape(&shape, &npy.into_vec::<u8>().map_err(err)?),
            "'|b1'" => Tensor::from_shape(&shape, &npy.into_vec::<bool>().map_err(err)?),
            other => {
                return Err(bad(format!(
                    "array `{name}` has numpy type {other}, which is not supported"
                )))
            }
        }
        .map_err(|e| bad(format!("array `{name}`: {e}")))?;
        out.push(t);
    }
    Ok(out)
}

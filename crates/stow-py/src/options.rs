//! The keyword arguments of `stowage.compile`, turned into
//! [`CompileOptions`] with the parsers `stow compile` uses (stow-onnx's for
//! shapes, symbols and `--set` files, stow-plan's for strategies), so a
//! value the command refuses is refused here with the same words.

use crate::errors::{self, Kind};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use std::path::PathBuf;
use std::time::Duration;
use stow_compile::{CompileError, CompileOptions, Pin, Placement, PoolSpec};
use stow_onnx::{FixedInput, InputShape, InputValue, ReuseOptions};
use stow_plan::{PlanOptions, Strategy};

/// Longest time limit `stow compile --time-limit` takes: a day.
const MAX_TIME_LIMIT_SECS: f64 = 86_400.0;

/// Every argument of `stowage.compile` but the model path, as given.
pub struct CompileArgs<'py> {
    pub inputs: Option<Bound<'py, PyDict>>,
    pub dims: Option<Bound<'py, PyDict>>,
    pub set: Option<Bound<'py, PyDict>>,
    pub set_npz: Vec<PathBuf>,
    pub strategy: String,
    pub time_limit: f64,
    pub capacity: Option<u64>,
    pub align: u64,
    pub threads: u32,
    pub pack_weights: bool,
    pub max_arena: u64,
    pub reuse: ReuseOptions,
    pub compare: bool,
    pub pools: Option<Bound<'py, PyAny>>,
    pub pins: Option<Bound<'py, PyDict>>,
    pub placement: String,
    pub patch: Vec<String>,
    /// Percent.
    pub max_extra_macs: f64,
}

fn option_error(py: Python<'_>, text: String) -> PyErr {
    errors::raise(py, Kind::Option, text)
}

/// `stow compile`'s `--input NAME=1x3x224x224` for each `{name: shape}`.
fn input_shapes(py: Python<'_>, inputs: &Bound<'_, PyDict>) -> PyResult<Vec<InputShape>> {
    let mut shapes = Vec::with_capacity(inputs.len());
    for (name, dims) in inputs.iter() {
        let name: String = name.extract()?;
        let dims: Vec<i64> = dims.extract()?;
        if dims.is_empty() {
            // A scalar input: the command line cannot spell it, Python can.
            shapes.push(InputShape { name, dims: vec![] });
            continue;
        }
        let text: Vec<String> = dims.iter().map(i64::to_string).collect();
        let arg = format!("{name}={}", text.join("x"));
        let shape =
            stow_onnx::parse_input_arg(&arg).map_err(|e| option_error(py, e.to_string()))?;
        shapes.push(shape);
    }
    Ok(shapes)
}

/// `--dim SYMBOL=VALUE` for each `{symbol: value}`.
fn dim_values(py: Python<'_>, dims: &Bound<'_, PyDict>) -> PyResult<Vec<(String, i64)>> {
    dims.iter()
        .map(|(symbol, value)| {
            let symbol: String = symbol.extract()?;
            let value: i64 = value.extract()?;
            stow_onnx::parse_dim_arg(&format!("{symbol}={value}"))
                .map_err(|e| option_error(py, e.to_string()))
        })
        .collect()
}

/// One value of `set=` as the text `--set` would carry: numbers as Python
/// prints them (which Rust parses back exactly), booleans as `true`/`false`.
fn value_text(py: Python<'_>, name: &str, v: &Bound<'_, PyAny>) -> PyResult<String> {
    if v.is_instance_of::<PyBool>() {
        return Ok(if v.extract::<bool>()? {
            "true"
        } else {
            "false"
        }
        .to_string());
    }
    if v.is_instance_of::<PyInt>()
        || v.is_instance_of::<PyFloat>()
        || v.is_instance_of::<PyString>()
    {
        return Ok(v.str()?.to_string());
    }
    Err(option_error(
        py,
        format!("set `{name}`: {} is not a number", v.get_type().name()?),
    ))
}

/// `--set NAME=V1,V2,...` for each `{name: value}`; a value is a number, a
/// bool, a list of them or a numpy array (flattened, as `--set` lists are).
fn constants(py: Python<'_>, set: &Bound<'_, PyDict>) -> PyResult<Vec<FixedInput>> {
    let mut fixed = Vec::with_capacity(set.len());
    for (name, value) in set.iter() {
        let name: String = name.extract()?;
        // numpy arrays and scalars become (nested) Python numbers.
        let value = if value.hasattr("tolist")? && value.hasattr("ravel")? {
            value.call_method0("ravel")?.call_method0("tolist")?
        } else if value.hasattr("tolist")? {
            value.call_method0("tolist")?
        } else {
            value
        };
        let items: Vec<Bound<'_, PyAny>> =
            if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
                value.try_iter()?.collect::<PyResult<_>>()?
            } else {
                vec![value]
            };
        if items.is_empty() {
            return Err(option_error(py, format!("set `{name}`: no value given")));
        }
        let text = items
            .iter()
            .map(|v| value_text(py, &name, v))
            .collect::<PyResult<Vec<_>>>()?;
        fixed.push(FixedInput {
            name,
            value: InputValue::Text(text),
        });
    }
    Ok(fixed)
}

/// `--pool NAME=BYTES` for each pool, fastest first: a dict `{name: bytes
/// or None}` (in its order) or a list of `(name, bytes or None)` pairs;
/// `None` is the last pool without a limit. Checked as `stow compile`
/// checks them (names, count, only the last unbounded).
fn pool_specs(py: Python<'_>, pools: &Bound<'_, PyAny>) -> PyResult<Vec<PoolSpec>> {
    let pairs: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = if let Ok(d) = pools.cast::<PyDict>() {
        d.iter().collect()
    } else if pools.is_instance_of::<PyList>() || pools.is_instance_of::<PyTuple>() {
        let mut pairs = Vec::new();
        for item in pools.try_iter()? {
            let item = item?;
            let pair: (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract().map_err(|_| {
                option_error(
                    py,
                    "pools: each item is a (name, bytes or None) pair".to_string(),
                )
            })?;
            pairs.push(pair);
        }
        pairs
    } else {
        return Err(option_error(
            py,
            "pools: a dict {name: bytes or None} or a list of (name, bytes or None) pairs"
                .to_string(),
        ));
    };
    let mut specs = Vec::with_capacity(pairs.len());
    for (name, bytes) in pairs {
        let name: String = name
            .extract()
            .map_err(|_| option_error(py, "pools: a pool name is not a string".to_string()))?;
        let capacity: Option<u64> = if bytes.is_none() {
            None
        } else if bytes.is_instance_of::<PyBool>() {
            return Err(option_error(
                py,
                format!("pool `{name}`: bytes must be a non-negative integer or None"),
            ));
        } else {
            Some(bytes.extract().map_err(|_| {
                option_error(
                    py,
                    format!("pool `{name}`: bytes must be a non-negative integer or None"),
                )
            })?)
        };
        specs.push(PoolSpec { name, capacity });
    }
    stow_compile::pools::check_pools(&specs).map_err(|e| option_error(py, e.to_string()))?;
    Ok(specs)
}

/// `--pin TENSOR_OR_OP=POOL` for each `{tensor or op: pool}`.
fn pin_list(pins: &Bound<'_, PyDict>) -> PyResult<Vec<Pin>> {
    pins.iter()
        .map(|(target, pool)| {
            Ok(Pin {
                target: target.extract()?,
                pool: pool.extract()?,
            })
        })
        .collect()
}

/// What `--time-limit` accepts: more than 0 and at most a day.
fn time_limit(py: Python<'_>, secs: f64) -> PyResult<Duration> {
    if !(secs > 0.0 && secs <= MAX_TIME_LIMIT_SECS) {
        return Err(option_error(
            py,
            format!("time_limit: {secs} is not between 0 and 86400 seconds"),
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The options `stow compile` would build from the same flags.
pub fn compile_options(py: Python<'_>, args: CompileArgs<'_>) -> PyResult<CompileOptions> {
    let strategy: Strategy = args
        .strategy
        .parse()
        .map_err(|e: stow_plan::PlanError| option_error(py, e.to_string()))?;
    if args.align == 0 || !args.align.is_power_of_two() {
        return Err(option_error(
            py,
            CompileError::BadAlignment { align: args.align }.to_string(),
        ));
    }
    let pools = match &args.pools {
        Some(p) if !p.is_none() => pool_specs(py, p)?,
        _ => Vec::new(),
    };
    let pins = match &args.pins {
        Some(p) => pin_list(p)?,
        None => Vec::new(),
    };
    if !pins.is_empty() && pools.is_empty() {
        return Err(option_error(
            py,
            "pins: no pools declared (pools={...})".to_string(),
        ));
    }
    let placement = Placement::parse(&args.placement)
        .map_err(|e| option_error(py, format!("placement: {e}")))?;
    let stages = args
        .patch
        .iter()
        .map(|s| stow_onnx::PatchedStage::parse(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| option_error(py, format!("patch: {e}")))?;
    let mut fixed = match &args.set {
        Some(set) => constants(py, set)?,
        None => Vec::new(),
    };
    for path in &args.set_npz {
        let read = stow_onnx::read_set_npz(path)
            .map_err(|e| errors::to_py(py, Kind::Option, e.into(), Some(path.as_path())))?;
        fixed.extend(read);
    }
    Ok(CompileOptions {
        inputs: match &args.inputs {
            Some(inputs) => input_shapes(py, inputs)?,
            None => Vec::new(),
        },
        dims: match &args.dims {
            Some(dims) => dim_values(py, dims)?,
            None => Vec::new(),
        },
        constants: fixed,
        reuse: args.reuse,
        plan: PlanOptions {
            strategy,
            time_limit: time_limit(py, args.time_limit)?,
            capacity: args.capacity,
            ..PlanOptions::default()
        },
        align: args.align,
        threads: args.threads,
        pack_weights: args.pack_weights,
        max_arena: args.max_arena,
        compare: args.compare,
        pools,
        pins,
        placement,
        stages,
        max_extra_macs: if args.max_extra_macs.is_finite() && args.max_extra_macs >= 0.0 {
            args.max_extra_macs / 100.0
        } else {
            return Err(option_error(
                py,
                format!(
                    "max_extra_macs: {} is not a percentage (a number from 0 up)",
                    args.max_extra_macs
                ),
            ));
        },
    })
}

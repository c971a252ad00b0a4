//! The Python package `stowage`: compile ONNX models into memory-planned
//! bundles, inspect them and run them with Stowage's CPU kernels, from
//! Python. A thin layer over the libraries `stow` itself uses:
//!
//! - `stowage.compile(model, ...)` is [`stow_compile::compile`] with the
//!   keyword arguments of `stow compile`'s flags ([`options`]);
//! - `Bundle.inspect()` and `Bundle.to_html()` are `stow inspect --json`
//!   and `--html` (the builders live in the `stow-cli` library);
//! - `Session(bundle).run({...})` is [`stow_runtime::Session`].
//!
//! Every failure is a `stowage.StowageError` carrying the message `stow`
//! prints ([`errors`]); nothing panics into Python.
//!
//! Built with maturin (`pip install .` at the repository root, see
//! `pyproject.toml` and `docs/PYTHON.md`); tested by `python/tests`.

mod bundle;
mod errors;
mod options;
mod session;

use bundle::{Bundle, Held, TensorInfo};
use errors::Kind;
use options::CompileArgs;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use session::Session;
use std::path::PathBuf;
use stow_compile::{DEFAULT_ALIGN, DEFAULT_MAX_ARENA, DEFAULT_THREADS};
use stow_onnx::ReuseOptions;

/// The file name of a compiled bundle's private copy: the model's, as
/// `stow compile` names its output.
fn bundle_name(model: &std::path::Path) -> String {
    model
        .with_extension("stow")
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bundle.stow".to_string())
}

/// Compiles the ONNX model at `model` into a bundle, in memory (save it
/// with `bundle.save(path)`). The keyword arguments are `stow compile`'s
/// flags: `inputs={"image": [1, 3, 224, 224]}` (`--input`), `dims={"N":
/// 1}` (`--dim`), `set={"sr": 16000, "mode": [1, 0, 0]}` (`--set`),
/// `set_npz=[path]`, `strategy`, `time_limit` (seconds), `capacity`,
/// `align`, `threads`, `pack_weights` (`--no-pack-weights` is
/// `pack_weights=False`), `max_arena`, the reuse switches `inplace`,
/// `views`, `concat_inplace`, `depthwise_inplace`, `reuse_inputs`,
/// `concurrent_branches` (`--no-inplace` is `inplace=False`), and `compare`. Memory pools:
/// `pools={"sram": 524288, "dram": None}` (`--pool`, fastest first; a dict
/// in its order or a list of `(name, bytes or None)` pairs, only the last
/// without a limit), `pins={"tensor or op": "sram"}` (`--pin`) and
/// `placement` (`--placement`: `"gain"`, `"first-use"`, `"threshold"` or
/// `"threshold=BYTES"`). Patch-based execution: `patch=["FROM:TO:ROWS"]`
/// (`--patch`); with `capacity` and no `patch`, the compiler chooses
/// stages when the model does not fit otherwise, adding at most
/// `max_extra_macs` percent multiply-adds (`--max-extra-macs`, 15).
#[pyfunction]
#[pyo3(signature = (
    model,
    *,
    inputs = None,
    dims = None,
    set = None,
    set_npz = Vec::new(),
    strategy = "auto".to_string(),
    time_limit = 1.0,
    capacity = None,
    align = DEFAULT_ALIGN,
    threads = DEFAULT_THREADS,
    pack_weights = true,
    max_arena = DEFAULT_MAX_ARENA,
    inplace = true,
    views = true,
    concat_inplace = true,
    depthwise_inplace = true,
    reuse_inputs = false,
    concurrent_branches = false,
    compare = false,
    pools = None,
    pins = None,
    placement = "gain".to_string(),
    patch = Vec::new(),
    max_extra_macs = 15.0,
))]
#[allow(clippy::too_many_arguments)]
fn compile<'py>(
    py: Python<'py>,
    model: PathBuf,
    inputs: Option<Bound<'py, PyDict>>,
    dims: Option<Bound<'py, PyDict>>,
    set: Option<Bound<'py, PyDict>>,
    set_npz: Vec<PathBuf>,
    strategy: String,
    time_limit: f64,
    capacity: Option<u64>,
    align: u64,
    threads: u32,
    pack_weights: bool,
    max_arena: u64,
    inplace: bool,
    views: bool,
    concat_inplace: bool,
    depthwise_inplace: bool,
    reuse_inputs: bool,
    concurrent_branches: bool,
    compare: bool,
    pools: Option<Bound<'py, PyAny>>,
    pins: Option<Bound<'py, PyDict>>,
    placement: String,
    patch: Vec<String>,
    max_extra_macs: f64,
) -> PyResult<Bundle> {
    let options = options::compile_options(
        py,
        CompileArgs {
            inputs,
            dims,
            set,
            set_npz,
            strategy,
            time_limit,
            capacity,
            align,
            threads,
            pack_weights,
            max_arena,
            reuse: ReuseOptions {
                inplace,
                views,
                reuse_inputs,
                concat_inplace,
                depthwise_inplace,
                concurrent_branches,
            },
            compare,
            pools,
            pins,
            placement,
            patch,
            max_extra_macs,
        },
    )?;
    let outcome = py.detach(|| {
        // The pipeline contains tract's panics itself; this is the last
        // line, so that no panic unwinds into the interpreter.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let compiled = stow_compile::compile(&model, &options)?;
            let report = compiled.report().clone();
            let bundle = Held::in_memory(compiled.bytes(), &bundle_name(&model));
            Ok::<_, anyhow::Error>((bundle, report))
        }))
    });
    let (bundle, report) = match outcome {
        Ok(Ok(done)) => done,
        Ok(Err(e)) => return Err(errors::to_py(py, Kind::Compile, e, Some(model.as_path()))),
        Err(_) => {
            return Err(errors::raise(
                py,
                Kind::Compile,
                format!("compiling {}: the compiler panicked", model.display()),
            ))
        }
    };
    let bundle = bundle.map_err(|e| errors::to_py(py, Kind::Bundle, e, None))?;
    Ok(Bundle::compiled(bundle, report))
}

/// Compile ONNX models ahead of time into memory-planned bundles, inspect
/// them and run them with Stowage's CPU kernels.
#[pymodule]
fn stowage(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_class::<Bundle>()?;
    m.add_class::<Session>()?;
    m.add_class::<TensorInfo>()?;
    errors::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

//! `stowage.Bundle` (a validated bundle, compiled or opened),
//! `stowage.TensorInfo` (an input or output) and the compile report as a
//! dict.

use crate::errors::{self, Kind};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use std::path::PathBuf;
use std::sync::Arc;
use stow_bundle::DType;
use stow_compile::{CompileError, Outcome, Report};
use stow_runtime::TensorRef;

/// The numpy dtype name of a bundle element type.
pub fn numpy_dtype(d: DType) -> &'static str {
    match d {
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::F64 => "float64",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::U8 => "uint8",
        DType::U16 => "uint16",
        DType::U32 => "uint32",
        DType::U64 => "uint64",
        DType::Bool => "bool",
    }
}

/// A graph input or output of a bundle: its name, shape and numpy dtype.
#[pyclass(module = "stowage", frozen)]
#[derive(Clone)]
pub struct TensorInfo {
    pub name: String,
    pub shape: Vec<u64>,
    pub dtype: String,
}

impl TensorInfo {
    pub fn of(t: &TensorRef<'_>) -> TensorInfo {
        TensorInfo {
            name: t.name().to_string(),
            shape: t.shape().to_vec(),
            dtype: numpy_dtype(t.dtype()).to_string(),
        }
    }

    /// `(1, 3, 8, 8)`, as numpy prints shapes.
    pub fn shape_text(shape: &[u64]) -> String {
        match shape {
            [one] => format!("({one},)"),
            _ => format!(
                "({})",
                shape
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

#[pymethods]
impl TensorInfo {
    /// The tensor's name in the model.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Its dimensions, as a tuple (numpy's `shape`).
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    /// Its element type as a numpy dtype name (`float32`, `int64`, `bool`).
    #[getter]
    fn dtype(&self) -> &str {
        &self.dtype
    }

    fn __repr__(&self) -> String {
        format!(
            "TensorInfo(name='{}', shape={}, dtype='{}')",
            self.name,
            Self::shape_text(&self.shape),
            self.dtype
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<TensorInfo>().is_ok_and(|o| {
            let o = o.get();
            o.name == self.name && o.shape == self.shape && o.dtype == self.dtype
        })
    }
}

/// A runtime bundle, and for one made in memory (compiled, or from
/// bytes) the private temporary folder of the file it is mapped from.
///
/// The runtime maps bundles from files (its `Bundle::open`), so an
/// in-memory bundle is written once into a folder of its own and mapped
/// like any other: the mapping is page-aligned as the kernels expect, the
/// bytes are not held twice, and messages name a file that exists. The
/// folder goes when the last user of the bundle (a `Bundle` or a
/// `Session`) does.
pub struct Held {
    pub bundle: stow_runtime::Bundle,
    // Declared after `bundle`, so it is removed after the mapping is gone.
    _folder: Option<tempfile::TempDir>,
}

impl Held {
    /// `bytes` (a valid bundle) written to `folder/name` and mapped.
    pub fn in_memory(bytes: &[u8], name: &str) -> anyhow::Result<Held> {
        let folder = tempfile::Builder::new().prefix("stowage-").tempdir()?;
        let path = folder.path().join(name);
        stow_bundle::write_file(&path, bytes)
            .map_err(|e| anyhow::Error::from(e).context(format!("writing {}", path.display())))?;
        let bundle = stow_runtime::Bundle::open(&path)?;
        Ok(Held {
            bundle,
            _folder: Some(folder),
        })
    }
}

/// A validated bundle: from `stowage.compile`, `Bundle.open(path)` or
/// `Bundle.from_bytes(data)`. Run it with `stowage.Session(bundle)`.
#[pyclass(module = "stowage", frozen)]
pub struct Bundle {
    pub(crate) inner: Arc<Held>,
    /// The compile's numbers, for a bundle `stowage.compile` made.
    report: Option<Report>,
    /// The file it was opened from, if any.
    file: Option<PathBuf>,
}

impl Bundle {
    pub fn compiled(inner: Held, report: Report) -> Bundle {
        Bundle {
            inner: Arc::new(inner),
            report: Some(report),
            file: None,
        }
    }
}

#[pymethods]
impl Bundle {
    /// Opens and validates the bundle file at `path` (it is mapped, not
    /// read: opening costs the same for any weight size).
    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<Bundle> {
        let inner = py
            .detach(|| stow_runtime::Bundle::open(&path))
            .map_err(|e| {
                // `stow inspect`'s words: `opening PATH: cannot read PATH: ...`.
                let err = anyhow::Error::from(e).context(format!("opening {}", path.display()));
                errors::to_py(py, Kind::Bundle, err, Some(path.as_path()))
            })?;
        Ok(Bundle {
            inner: Arc::new(Held {
                bundle: inner,
                _folder: None,
            }),
            report: None,
            file: Some(path),
        })
    }

    /// Validates `data` (the bytes of a bundle file) and keeps a copy.
    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: &[u8]) -> PyResult<Bundle> {
        // Refused before anything is written, naming the bytes.
        if let Err(source) = stow_bundle::BundleView::parse(data) {
            let err = stow_runtime::RuntimeError::Invalid {
                path: PathBuf::from("<bytes>"),
                source,
            };
            return Err(errors::to_py(py, Kind::Bundle, err.into(), None));
        }
        let inner = py
            .detach(|| Held::in_memory(data, "bundle.stow"))
            .map_err(|e| errors::to_py(py, Kind::Bundle, e, None))?;
        Ok(Bundle {
            inner: Arc::new(inner),
            report: None,
            file: None,
        })
    }

    /// Writes the bundle to `path` atomically (a temporary file beside it,
    /// then a rename), as `stow compile` does.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                let text = format!(
                    "cannot write {}: directory {} does not exist",
                    path.display(),
                    dir.display()
                );
                return Err(errors::missing_file(py, text, Some(dir)));
            }
        }
        let inner = self.inner.clone();
        let written = py.detach(|| stow_bundle::write_file(&path, inner.bundle.view().bytes()));
        written.map_err(|source| {
            let err = CompileError::Write {
                path: path.clone(),
                source,
            };
            errors::to_py(py, Kind::Bundle, err.into(), Some(path.as_path()))
        })
    }

    /// The bundle file's bytes.
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.inner.bundle.view().bytes())
    }

    /// Checks the weight checksum (reads every weight byte).
    fn verify_weights(&self, py: Python<'_>) -> PyResult<()> {
        let inner = self.inner.clone();
        py.detach(|| inner.bundle.verify_weights())
            .map_err(|e| errors::to_py(py, Kind::Bundle, e.into(), None))
    }

    /// What `stow inspect --json` prints for this bundle, as a dict:
    /// `arena_bytes`, `lower_bound_bytes`, `naive_bytes`, `strategy`,
    /// `inputs`, `outputs`, `tensors` (id, name, kind, dtype, shape,
    /// region, offset, size, first and last step, alias), `ops`, ...
    fn inspect<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let text = stow_cli::inspect::json(&self.inner.bundle).to_string();
        py.import("json")?.call_method1("loads", (text,))
    }

    /// The arena picture `stow inspect --html` writes: one self-contained
    /// page (zoom, pan, hover, the tensors live at the peak; one panel per
    /// memory pool for a bundle compiled with pools).
    fn to_html(&self) -> String {
        let panels = stow_cli::picture::Layout::panels(self.inner.bundle.contents());
        stow_cli::picture::html::render_panels(&panels)
    }

    /// Jupyter shows a bundle as its arena picture.
    fn _repr_html_(&self) -> String {
        self.to_html()
    }

    /// The graph inputs, in model order.
    #[getter]
    fn inputs(&self) -> Vec<TensorInfo> {
        self.inner
            .bundle
            .inputs()
            .map(|t| TensorInfo::of(&t))
            .collect()
    }

    /// The graph outputs, in model order.
    #[getter]
    fn outputs(&self) -> Vec<TensorInfo> {
        self.inner
            .bundle
            .outputs()
            .map(|t| TensorInfo::of(&t))
            .collect()
    }

    /// The memory pools a session allocates, fastest first: a list of
    /// `{"name", "bytes", "align"}` dicts (one, `"arena"`, for a bundle
    /// compiled without `pools`).
    #[getter]
    fn pools<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let c = self.inner.bundle.contents();
        let list = PyList::empty(py);
        for (p, (bytes, align)) in c.pool_sizes().into_iter().enumerate() {
            let d = PyDict::new(py);
            d.set_item(
                "name",
                c.pools.get(p).map_or("arena", |pool| pool.name.as_str()),
            )?;
            d.set_item("bytes", bytes)?;
            d.set_item("align", align)?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// Planned arena size in bytes.
    #[getter]
    fn arena_bytes(&self) -> u64 {
        self.inner.bundle.contents().arena_bytes
    }

    /// The file the bundle was opened from (`None` when compiled or made
    /// from bytes).
    #[getter]
    fn path(&self) -> Option<PathBuf> {
        self.file.clone()
    }

    /// The numbers `stow compile` prints, as a dict (`None` for a bundle
    /// that was opened rather than compiled).
    #[getter]
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.report.as_ref().map(|r| report_dict(py, r)).transpose()
    }

    fn __repr__(&self) -> String {
        let c = self.inner.bundle.contents();
        let source = if c.provenance.source_model.is_empty() {
            "bundle"
        } else {
            c.provenance.source_model.as_str()
        };
        format!(
            "<stowage.Bundle {source}: {} ops, {} tensors, arena {} bytes (lower bound {}, {})>",
            c.ops.len(),
            c.tensors.len(),
            c.arena_bytes,
            c.provenance.lower_bound_bytes,
            c.provenance.strategy
        )
    }
}

/// [`Report`] as a dict, with the keys `inspect()` uses for the same
/// numbers (`arena_bytes`, `lower_bound_bytes`, `naive_bytes`).
fn report_dict<'py>(py: Python<'py>, r: &Report) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("ops", r.ops)?;
    let t = PyDict::new(py);
    t.set_item("total", r.tensors.total)?;
    t.set_item("arena", r.tensors.arena)?;
    t.set_item("buffers", r.tensors.buffers)?;
    t.set_item("in_place", r.tensors.in_place)?;
    t.set_item("views", r.tensors.views)?;
    t.set_item("concat_slices", r.tensors.concat_slices)?;
    t.set_item("depthwise_in_place", r.tensors.depthwise_in_place)?;
    d.set_item("tensors", t)?;
    d.set_item("weight_bytes", r.weight_bytes)?;
    d.set_item("arena_bytes", r.arena_bytes)?;
    d.set_item("lower_bound_bytes", r.lower_bound)?;
    d.set_item("naive_bytes", r.naive_bytes)?;
    d.set_item("ratio", r.ratio)?;
    d.set_item("strategy", r.strategy.name())?;
    d.set_item("chosen_by_auto", r.chosen_by_auto)?;
    d.set_item("optimal", r.optimal)?;
    d.set_item("order", r.order.name())?;
    let bounds = PyDict::new(py);
    for (order, bound) in &r.order_bounds {
        bounds.set_item(order.name(), bound)?;
    }
    d.set_item("order_bounds", bounds)?;
    d.set_item("planning_seconds", r.planning_time.as_secs_f64())?;
    d.set_item("compile_seconds", r.compile_time.as_secs_f64())?;
    d.set_item("bundle_bytes", r.bundle_bytes)?;
    let comparison = match &r.comparison {
        None => None,
        Some(rows) => {
            let list = PyList::empty(py);
            for row in rows {
                let e = PyDict::new(py);
                e.set_item("strategy", row.strategy.name())?;
                e.set_item("seconds", row.elapsed.as_secs_f64())?;
                match &row.outcome {
                    Outcome::Planned {
                        used,
                        arena_bytes,
                        ratio,
                        optimal,
                    } => {
                        e.set_item("used", used.name())?;
                        e.set_item("arena_bytes", arena_bytes)?;
                        e.set_item("ratio", ratio)?;
                        e.set_item("optimal", optimal)?;
                    }
                    Outcome::DoesNotFit {
                        pool,
                        needed,
                        capacity,
                        short,
                    } => {
                        e.set_item("does_not_fit", pool)?;
                        e.set_item("needed_bytes", needed)?;
                        e.set_item("capacity_bytes", capacity)?;
                        e.set_item("short_bytes", short)?;
                    }
                }
                list.append(e)?;
            }
            Some(list)
        }
    };
    d.set_item("comparison", comparison)?;
    let total: u64 = r.pools.iter().map(|p| p.traffic).sum();
    let pools = PyList::empty(py);
    for p in &r.pools {
        let e = PyDict::new(py);
        e.set_item("name", &p.name)?;
        e.set_item("capacity", p.capacity)?;
        e.set_item("bytes", p.bytes)?;
        e.set_item("peak_live", p.peak_live)?;
        e.set_item("fill", p.fill())?;
        e.set_item("buffers", p.buffers)?;
        e.set_item("traffic", p.traffic)?;
        e.set_item(
            "traffic_share",
            if total == 0 {
                0.0
            } else {
                p.traffic as f64 / total as f64
            },
        )?;
        pools.append(e)?;
    }
    d.set_item("pools", pools)?;
    d.set_item("placement", r.placement.to_string())?;
    let stages: Vec<String> = r.stages.iter().map(|s| s.to_string()).collect();
    d.set_item("stages", stages)?;
    d.set_item("bound_without_stages", r.bound_without_stages)?;
    d.set_item("multiply_adds", r.multiply_adds)?;
    d.set_item(
        "multiply_adds_without_stages",
        r.multiply_adds_without_stages,
    )?;
    Ok(d)
}

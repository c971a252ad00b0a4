//! `stowage.Session`: a bundle ready to run with Stowage's CPU kernels.
//!
//! Inputs are numpy arrays checked against the bundle (name, dtype, shape)
//! and copied into their planned place in the arena; the run itself
//! releases the GIL; outputs are copied out into new arrays, because the
//! arena bytes they live in are reused by the next run.

use crate::bundle::{Bundle, Held, TensorInfo};
use crate::errors::{self, Kind};
use numpy::{PyArray1, PyArrayDescr, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray};
use numpy::{PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::{Arc, Mutex};
use stow_bundle::DType;

type RuntimeSession<'b> = stow_runtime::Session<'b>;

self_cell::self_cell!(
    /// A runtime session and the bundle it borrows, kept together so the
    /// Python object owns both.
    struct Running {
        owner: Arc<Held>,
        #[not_covariant]
        dependent: RuntimeSession,
    }
);

/// One input or output: its tensor id and what it holds.
struct Port {
    id: u32,
    info: TensorInfo,
    dtype: DType,
}

fn ports<'a>(tensors: impl Iterator<Item = stow_runtime::TensorRef<'a>>) -> Vec<Port> {
    tensors
        .map(|t| Port {
            id: t.id,
            info: TensorInfo::of(&t),
            dtype: t.dtype(),
        })
        .collect()
}

/// A bundle ready to run: every operator has its kernel, the arena and the
/// worker threads are set up once; `run` allocates nothing but the
/// output arrays.
///
/// One call runs at a time: a second thread calling `run` on the same
/// session while it runs gets a `RunError` (make one session per thread).
#[pyclass(module = "stowage", frozen)]
pub struct Session {
    /// `None` while a run has it (the GIL is released during the run).
    running: Mutex<Option<Running>>,
    bundle: Py<Bundle>,
    inputs: Vec<Port>,
    outputs: Vec<Port>,
    threads: usize,
}

fn input_error(py: Python<'_>, text: String) -> PyErr {
    errors::raise(py, Kind::Input, text)
}

/// `x (float32, shape (1, 3, 8, 8))`, to list what a bundle takes.
fn describe(p: &Port) -> String {
    format!(
        "`{}` ({}, shape {})",
        p.info.name,
        p.info.dtype,
        TensorInfo::shape_text(&p.info.shape)
    )
}

impl Session {
    fn take(&self, py: Python<'_>) -> PyResult<Running> {
        let mut slot = self.running.lock().unwrap_or_else(|p| p.into_inner());
        slot.take().ok_or_else(|| {
            errors::raise(
                py,
                Kind::Run,
                "this session is running in another thread; use one session per thread".to_string(),
            )
        })
    }

    fn put_back(&self, running: Running) {
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) = Some(running);
    }

    /// The array given for `port`, checked, as its bytes in C order.
    fn input_bytes<'py>(
        &self,
        py: Python<'py>,
        port: &Port,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<PyReadonlyArray1<'py, u8>> {
        let numpy = py.import("numpy")?;
        let want = PyArrayDescr::new(py, port.info.dtype.as_str())?;
        let array = match value.cast::<PyUntypedArray>() {
            Ok(a) => a.clone(),
            // Lists and scalars take the input's dtype, as numpy would.
            Err(_) => numpy
                .call_method1("asarray", (value, &want))?
                .cast_into::<PyUntypedArray>()?,
        };
        if !array.dtype().is_equiv_to(&want) {
            return Err(input_error(
                py,
                format!(
                    "input `{}`: expected dtype {}, given {}",
                    port.info.name,
                    port.info.dtype,
                    array.dtype().str()?
                ),
            ));
        }
        let given: Vec<u64> = array.shape().iter().map(|&d| d as u64).collect();
        if given != port.info.shape {
            return Err(input_error(
                py,
                format!(
                    "input `{}`: expected shape {}, given {}",
                    port.info.name,
                    TensorInfo::shape_text(&port.info.shape),
                    TensorInfo::shape_text(&given)
                ),
            ));
        }
        // Any layout and any element type, as plain bytes in C order (bool
        // is one byte, 0 or 1, as bundles store it).
        let bytes = numpy
            .call_method1("ascontiguousarray", (array,))?
            .call_method1("view", ("uint8",))?
            .call_method1("reshape", (-1,))?;
        Ok(bytes.cast_into::<PyArray1<u8>>()?.try_readonly()?)
    }
}

#[pymethods]
impl Session {
    /// Prepares `bundle` to run with `threads` threads (convolutions and
    /// matrix products split their columns between them; outputs are the
    /// same for every thread count).
    #[new]
    #[pyo3(signature = (bundle, threads = 1))]
    fn new(py: Python<'_>, bundle: Py<Bundle>, threads: usize) -> PyResult<Session> {
        let inner = bundle.get().inner.clone();
        let inputs = ports(inner.bundle.inputs());
        let outputs = ports(inner.bundle.outputs());
        let running = py.detach(|| {
            Running::try_new(inner, |held| {
                stow_runtime::Session::with_threads(&held.bundle, threads)
            })
        });
        let running = running.map_err(|e| errors::to_py(py, Kind::Session, e.into(), None))?;
        Ok(Session {
            running: Mutex::new(Some(running)),
            bundle,
            inputs,
            outputs,
            threads,
        })
    }

    /// Runs the bundle on `inputs` (`{name: numpy array}`, every input of
    /// the bundle, each of its dtype and shape) and returns `{name: numpy
    /// array}` for every output, in the bundle's order.
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyDict>> {
        // Check everything before touching the arena.
        for name in inputs.keys() {
            let name: String = name.extract()?;
            if !self.inputs.iter().any(|p| p.info.name == name) {
                let known: Vec<String> = self.inputs.iter().map(describe).collect();
                return Err(input_error(
                    py,
                    format!(
                        "the bundle has no input named `{name}`; its inputs are {}",
                        known.join(", ")
                    ),
                ));
            }
        }
        let mut given = Vec::with_capacity(self.inputs.len());
        for port in &self.inputs {
            let value = inputs
                .get_item(&port.info.name)?
                .ok_or_else(|| input_error(py, format!("input {} is missing", describe(port))))?;
            given.push(self.input_bytes(py, port, &value)?);
        }
        let mut running = self.take(py)?;
        let result = self.run_with(py, &mut running, &given);
        self.put_back(running);
        result
    }

    /// The bundle this session runs.
    #[getter]
    fn bundle(&self, py: Python<'_>) -> Py<Bundle> {
        self.bundle.clone_ref(py)
    }

    /// The graph inputs `run` takes, in model order.
    #[getter]
    fn inputs(&self) -> Vec<TensorInfo> {
        self.inputs.iter().map(|p| p.info.clone()).collect()
    }

    /// The graph outputs `run` returns, in model order.
    #[getter]
    fn outputs(&self) -> Vec<TensorInfo> {
        self.outputs.iter().map(|p| p.info.clone()).collect()
    }

    /// Threads the kernels use.
    #[getter]
    fn threads(&self) -> usize {
        self.threads
    }

    fn __repr__(&self) -> String {
        format!(
            "<stowage.Session {} inputs, {} outputs, {} thread(s)>",
            self.inputs.len(),
            self.outputs.len(),
            self.threads
        )
    }
}

impl Session {
    fn run_with<'py>(
        &self,
        py: Python<'py>,
        running: &mut Running,
        given: &[PyReadonlyArray1<'py, u8>],
    ) -> PyResult<Bound<'py, PyDict>> {
        for (port, bytes) in self.inputs.iter().zip(given) {
            let bytes = bytes.as_slice()?;
            running.with_dependent_mut(|_, session| -> PyResult<()> {
                // Dtype and shape were checked, so the sizes agree; an
                // input written in bands of rows is copied into its bands.
                session
                    .write_input_bytes(&port.id, bytes)
                    .map_err(|e| input_error(py, format!("input `{}`: {e}", port.info.name)))
            })?;
        }
        py.detach(|| running.with_dependent_mut(|_, session| session.run()))
            .map_err(|e| errors::to_py(py, Kind::Run, e.into(), None))?;
        let out = PyDict::new(py);
        for port in &self.outputs {
            let array = running.with_dependent(|held, session| -> PyResult<_> {
                let bytes = session
                    .arena()
                    .tensor_bytes(&held.bundle, &port.id)
                    .map_err(|e| errors::to_py(py, Kind::Run, e.into(), None))?;
                Ok(if port.dtype == DType::Bool {
                    // Any non-zero byte is true; numpy's bool must be 0 or 1.
                    let normal: Vec<u8> = bytes.iter().map(|&b| u8::from(b != 0)).collect();
                    PyArray1::from_slice(py, &normal)
                } else {
                    PyArray1::from_slice(py, bytes)
                })
            })?;
            let shape: Vec<usize> = port.info.shape.iter().map(|&d| d as usize).collect();
            let typed = array
                .call_method1("view", (port.info.dtype.as_str(),))?
                .call_method1("reshape", (shape,))?;
            out.set_item(&port.info.name, typed)?;
        }
        Ok(out)
    }
}

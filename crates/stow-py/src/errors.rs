//! The exceptions of the `stowage` module, and how a Rust error becomes
//! one.
//!
//! Every message is the one `stow` prints after `error:` for the same
//! failure: the error and its causes joined by `: ` (anyhow's `{:#}`), so
//! a missing file names the file. The class says what failed:
//!
//! ```text
//! StowageError (Exception)
//! ├── CompileError      compiling or planning a model failed
//! ├── BundleError       the bytes are not a valid bundle
//! ├── SessionError      the bundle cannot run (operators without a kernel, ...)
//! ├── RunError          a run stopped (an index out of range, ...)
//! ├── InputError        also a ValueError: a wrong input name, dtype or shape
//! ├── OptionError       also a ValueError: an argument that cannot be used
//! └── MissingFileError  also a FileNotFoundError: a file or folder is missing
//! ```

use pyo3::create_exception;
use pyo3::exceptions::{PyBaseException, PyException, PyFileNotFoundError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use std::path::Path;

create_exception!(
    stowage,
    StowageError,
    PyException,
    "Base class of every error the stowage module raises."
);
create_exception!(
    stowage,
    CompileError,
    StowageError,
    "Compiling a model failed: the model, an operator, a shape or the plan (the message says which)."
);
create_exception!(
    stowage,
    BundleError,
    StowageError,
    "The bytes are not a valid bundle, or its weight checksum failed."
);
create_exception!(
    stowage,
    SessionError,
    StowageError,
    "A session could not be set up: operators without a kernel, or the arena could not be allocated."
);
create_exception!(
    stowage,
    RunError,
    StowageError,
    "A run stopped: an index out of range, or a kernel failed."
);

/// The classes with two bases (a `StowageError` that is also a built-in
/// error), made once per interpreter.
static INPUT_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static OPTION_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static MISSING_FILE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// Which class an error is raised as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Compile,
    Bundle,
    Session,
    Run,
    Input,
    Option,
    MissingFile,
}

/// `class NAME(StowageError, builtin)` in module `stowage`.
fn subclass<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyType>>,
    name: &str,
    builtin: Bound<'py, PyType>,
    doc: &str,
) -> PyResult<Bound<'py, PyType>> {
    let ty = cell.get_or_try_init(py, || -> PyResult<Py<PyType>> {
        let namespace = PyDict::new(py);
        namespace.set_item("__module__", "stowage")?;
        namespace.set_item("__doc__", doc)?;
        // The message alone, as for every other class: OSError's own
        // `__str__` would print `[Errno 2] ...: 'file'` once `filename` is set.
        let base_str = py.get_type::<PyBaseException>().getattr("__str__")?;
        namespace.set_item("__str__", base_str)?;
        let bases = PyTuple::new(py, [py.get_type::<StowageError>(), builtin])?;
        let made = py
            .get_type::<PyType>()
            .call1((name, bases, namespace))?
            .cast_into::<PyType>()?;
        Ok(made.unbind())
    })?;
    Ok(ty.bind(py).clone())
}

/// The class of `kind`.
pub fn class(py: Python<'_>, kind: Kind) -> PyResult<Bound<'_, PyType>> {
    Ok(match kind {
        Kind::Compile => py.get_type::<CompileError>(),
        Kind::Bundle => py.get_type::<BundleError>(),
        Kind::Session => py.get_type::<SessionError>(),
        Kind::Run => py.get_type::<RunError>(),
        Kind::Input => subclass(
            py,
            &INPUT_ERROR,
            "InputError",
            py.get_type::<PyValueError>(),
            "Session.run was given an input the bundle does not take: an unknown or missing name, the wrong dtype or the wrong shape.",
        )?,
        Kind::Option => subclass(
            py,
            &OPTION_ERROR,
            "OptionError",
            py.get_type::<PyValueError>(),
            "An argument cannot be used: an unknown strategy, a shape that does not parse, a time limit out of range.",
        )?,
        Kind::MissingFile => subclass(
            py,
            &MISSING_FILE_ERROR,
            "MissingFileError",
            py.get_type::<PyFileNotFoundError>(),
            "A model, a bundle or a folder to write into does not exist; `filename` names it.",
        )?,
    })
}

/// Adds every exception class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("StowageError", py.get_type::<StowageError>())?;
    for kind in [
        Kind::Compile,
        Kind::Bundle,
        Kind::Session,
        Kind::Run,
        Kind::Input,
        Kind::Option,
        Kind::MissingFile,
    ] {
        let ty = class(py, kind)?;
        m.add(ty.name()?, ty)?;
    }
    Ok(())
}

/// The message `stow` prints for `err`: it and its causes, joined by `: `.
pub fn message(err: &anyhow::Error) -> String {
    format!("{err:#}")
}

/// True when a cause of `err` is an operating-system "no such file".
fn is_not_found(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
    })
}

/// The Python exception for `err`, raised as `kind`, or as
/// [`Kind::MissingFile`] (with `filename` set to `file`) when the cause is
/// a missing file.
pub fn to_py(py: Python<'_>, kind: Kind, err: anyhow::Error, file: Option<&Path>) -> PyErr {
    let text = message(&err);
    if is_not_found(&err) {
        return missing_file(py, text, file);
    }
    raise(py, kind, text)
}

/// An exception of class `kind` with message `text`.
pub fn raise(py: Python<'_>, kind: Kind, text: String) -> PyErr {
    match class(py, kind) {
        Ok(ty) => PyErr::from_type(ty, text),
        // Making the class failed (out of memory): the error says so.
        Err(e) => e,
    }
}

/// A `MissingFileError` (a `FileNotFoundError`, `errno` ENOENT) whose
/// `filename` is `file`.
pub fn missing_file(py: Python<'_>, text: String, file: Option<&Path>) -> PyErr {
    /// POSIX's "no such file or directory", which FileNotFoundError means.
    const ENOENT: i32 = 2;
    let err = raise(py, Kind::MissingFile, text);
    let value = err.value(py);
    // Setting attributes of a fresh exception cannot fail in practice; if
    // it did, the exception without them still says what is missing.
    let _ = value.setattr("errno", ENOENT);
    if let Some(file) = file {
        let _ = value.setattr("filename", file.to_string_lossy().into_owned());
    }
    err
}

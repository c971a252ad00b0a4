//! Writing a bundle to a file atomically (feature `std`: the only part of
//! the crate that needs an operating system).

use crate::error::BundleError;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `bytes` to `path` atomically: into a new temporary file in the
/// same directory (`.<name>.<pid>.<n>.tmp`), synced, then renamed over
/// `path`. On any failure the temporary file is removed and `path` is left
/// as it was. A missing parent directory gives
/// [`BundleError::MissingDirectory`] naming it.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), BundleError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(BundleError::MissingDirectory {
            path: path.to_path_buf(),
            dir,
        });
    }
    let io = |source| BundleError::Io {
        path: path.to_path_buf(),
        source,
    };
    let name = path
        .file_name()
        .map_or_else(|| "bundle".into(), |n| n.to_string_lossy().into_owned());
    let (tmp, mut file) = loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io(e)),
        }
    };
    let result = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| {
            drop(file);
            std::fs::rename(&tmp, path)
        });
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
    }
    // Make the rename itself durable where directories can be synced.
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

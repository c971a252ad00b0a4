//! Pictures of a bundle's arena: x is the execution step, y the arena
//! offset, each arena tensor a rectangle.
//!
//! - [`layout`] turns bundle [`Contents`](stow_bundle::Contents) into the
//!   drawing model every picture shares: one [`layout::Block`] per arena
//!   tensor, coloured by the [`layout::OpKind`] of the op that writes it,
//!   the bytes live at each step and the peak step.
//! - [`svg`] draws a static picture (a `<title>` per tensor),
//!   [`html`] one self-contained page with zoom, pan and hover, and
//!   [`chart`] a text chart of at most 100 columns for a terminal.
//! - [`write_atomically`] writes a picture so that a failure leaves no
//!   partial file behind.
//!
//! Bundle contents come from a validated file, but nothing here relies on
//! more than that: steps beyond the op list are clipped and all byte math
//! saturates, so a strange bundle draws strangely instead of panicking.

pub mod chart;
pub mod html;
pub mod layout;
pub mod svg;
mod text;

pub use layout::{Block, Layout, OpKind};
pub use text::human_bytes;

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Checks that `path` can be written as a file before any work is done:
/// its folder exists and it is not itself a folder.
pub fn check_output_path(path: &Path) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    if path.as_os_str().is_empty() {
        return Err(Error::new(ErrorKind::InvalidInput, "empty file name"));
    }
    if path.is_dir() {
        return Err(Error::new(ErrorKind::IsADirectory, "is a directory"));
    }
    let parent = parent_dir(path);
    if !parent.is_dir() {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!("folder {} does not exist", parent.display()),
        ));
    }
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file in the same folder and
/// a rename, so readers never see half a picture and a failed write leaves
/// nothing behind.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    check_output_path(path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "picture".into());
    let tmp = parent_dir(path).join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.flush()?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

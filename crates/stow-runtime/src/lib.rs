//! Device-side access to a bundle: map the file read-only, validate it
//! once, then hand out its contents and zero-copy weight bytes.
//!
//! Validation is [`stow_bundle::BundleView::parse`]: everything but the
//! weight checksum, which [`Bundle::verify_weights`] checks on request.
#![deny(missing_docs)]
// The memory map is the one unsafe operation; it is allowed where it
// happens, with its safety argument.
#![deny(unsafe_code)]

use memmap2::Mmap;
use std::path::{Path, PathBuf};
use stow_bundle::{BundleError, BundleView, Contents, HeaderInfo, OwnedBundle, SectionInfo};
use thiserror::Error;

/// Why a bundle could not be opened or checked.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// The file could not be opened or mapped.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a valid bundle (or the weight checksum failed).
    #[error("{} is not a valid bundle: {source}", path.display())]
    Invalid {
        /// The path.
        path: PathBuf,
        /// What validation found.
        #[source]
        source: BundleError,
    },
}

/// A validated, read-only memory-mapped bundle.
#[derive(Debug)]
pub struct Bundle {
    inner: OwnedBundle<Mmap>,
    path: PathBuf,
}

impl Bundle {
    /// Maps `path` read-only and validates every byte but the weights.
    pub fn open(path: &Path) -> Result<Bundle, RuntimeError> {
        let io = |source| RuntimeError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: `Mmap::map` is unsafe because another process could
        // modify or truncate the file while it is mapped, changing bytes
        // under live `&[u8]` borrows. The mapping is read-only and private;
        // bundles are written once through a temporary file and a rename
        // (`stow_bundle::write_file`), never edited in place, so a mapped
        // bundle does not change while this process holds it. Its contents
        // are validated before any byte is trusted.
        #[allow(unsafe_code)]
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let inner = OwnedBundle::new(map).map_err(|source| RuntimeError::Invalid {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Bundle {
            inner,
            path: path.to_path_buf(),
        })
    }

    /// A view of the validated bytes (no validation is repeated).
    pub fn view(&self) -> BundleView<'_> {
        self.inner.view()
    }

    /// What the bundle holds.
    pub fn contents(&self) -> &Contents {
        self.inner.contents()
    }

    /// Header fields.
    pub fn header(&self) -> HeaderInfo {
        self.view().header()
    }

    /// Sections in file order.
    pub fn sections(&self) -> &[SectionInfo] {
        self.inner.sections()
    }

    /// The stored bytes of weight tensor `id`, borrowed from the mapping
    /// (`None` for arena tensors and unknown ids). The mapping starts on a
    /// page boundary, so every weight slice is 64-byte aligned.
    pub fn weight_bytes(&self, id: u32) -> Option<&[u8]> {
        self.view().weight_bytes(id)
    }

    /// Checks the weight checksum (reads every weight byte).
    pub fn verify_weights(&self) -> Result<(), RuntimeError> {
        self.view()
            .verify_weights()
            .map_err(|source| RuntimeError::Invalid {
                path: self.path.clone(),
                source,
            })
    }

    /// The file this bundle was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

//! Device-side access to a bundle: map the file read-only, validate it once,
//! then hand out its contents and zero-copy weight bytes.
#![deny(missing_docs)]

use memmap2::Mmap;
use std::path::{Path, PathBuf};
use stow_bundle::{BundleError, BundleView, Contents, HeaderInfo, SectionInfo};
use thiserror::Error;

/// Why a bundle could not be opened.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// The file could not be opened or mapped.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The bytes are not a valid bundle.
    #[error("{} is not a valid bundle: {source}", path.display())]
    Invalid {
        /// The path.
        path: PathBuf,
        /// What validation found.
        source: BundleError,
    },
}

/// A validated, memory-mapped bundle.
pub struct Bundle {
    // Validated once in `open`; contents are copied out so no borrow of the
    // mapping is stored next to it.
    map: Mmap,
    contents: Contents,
    sections: Vec<SectionInfo>,
    header: HeaderInfo,
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
        // SAFETY: the mapping is read-only and private to this process; the
        // bundle format is validated before any byte is trusted. A process
        // truncating the file while it is mapped could still fault, as with
        // any mapped file; bundles are not meant to be edited in place.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let view = BundleView::parse(&map).map_err(|source| RuntimeError::Invalid {
            path: path.to_path_buf(),
            source,
        })?;
        let contents = view.contents().clone();
        let sections = view.sections().to_vec();
        let header = view.header();
        Ok(Bundle {
            map,
            contents,
            sections,
            header,
            path: path.to_path_buf(),
        })
    }

    /// What the bundle holds.
    pub fn contents(&self) -> &Contents {
        &self.contents
    }

    /// Header fields.
    pub fn header(&self) -> HeaderInfo {
        self.header
    }

    /// Sections in file order.
    pub fn sections(&self) -> &[SectionInfo] {
        &self.sections
    }

    /// The stored bytes of weight tensor `id`, borrowed from the mapping.
    pub fn weight_bytes(&self, id: u32) -> Option<&[u8]> {
        let t = self.contents.tensors.get(id as usize)?;
        if t.region != stow_bundle::Region::Weights {
            return None;
        }
        let range = self.weight_range();
        let start = range.start.checked_add(usize::try_from(t.offset).ok()?)?;
        let end = start.checked_add(usize::try_from(t.size).ok()?)?;
        self.map.get(start..end)
    }

    fn weight_range(&self) -> std::ops::Range<usize> {
        self.sections
            .iter()
            .find(|s| s.kind == stow_bundle::format::kind::WEIGHTS)
            .map(|s| s.offset as usize..(s.offset + s.length) as usize)
            .unwrap_or(0..0)
    }

    /// Checks the weight checksum (reads every weight byte).
    pub fn verify_weights(&self) -> Result<(), RuntimeError> {
        let stored = self
            .sections
            .iter()
            .find(|s| s.kind == stow_bundle::format::kind::WEIGHTS)
            .map(|s| s.crc)
            .unwrap_or(0);
        let computed = stow_bundle::crc32(self.map.get(self.weight_range()).unwrap_or(&[]));
        if computed != stored {
            return Err(RuntimeError::Invalid {
                path: self.path.clone(),
                source: BundleError::Checksum {
                    what: "weights",
                    stored,
                    computed,
                },
            });
        }
        Ok(())
    }
}

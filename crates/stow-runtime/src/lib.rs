//! Device-side access to a bundle: map the file read-only, validate it
//! once, then hand out its contents, zero-copy weight views and an arena.
//!
//! - [`Bundle::open`] maps and validates ([`stow_bundle::BundleView::parse`]:
//!   everything but the weight checksum, which [`Bundle::verify_weights`]
//!   checks on request). Opening reads no weight bytes, so it costs the
//!   same for a 1 KB and a 400 MB model. [`Bundle::from_static`] validates
//!   bytes already in memory (a bundle in flash) without copying them.
//! - [`Bundle::weight`] views a weight as `&[T]` in the mapping, checking
//!   element type, length and alignment; [`Bundle::tensor`],
//!   [`Bundle::inputs`] and [`Bundle::outputs`] describe tensors.
//! - [`Arena::new`] allocates the planned activation arena once
//!   ([`Arena::in_buffer`] places it in a caller's buffer instead);
//!   [`Arena::tensor`] and [`Arena::tensor_mut`] view the tensors in it.
//! - [`Bundle::release_host_pages`] drops the weight pages from this
//!   process's resident memory once they were copied elsewhere (method M5).
//!
//! - [`Session::new`] prepares a CPU kernel for every operator (failing
//!   with the list of operators it cannot run), [`Session::run`] executes
//!   them in order inside the arena without allocating;
//!   [`Session::in_buffer`] runs in a caller's buffer.
//!
//! Lookups fail with a [`LookupError`] naming the tensor; nothing panics
//! on the contents of a bundle. See `docs/RUNTIME.md`.
//!
//! Without the default `std` feature the crate is `no_std` (it needs
//! `alloc` for the prepared kernels): bundles come from memory
//! ([`Bundle::from_static`]), sessions run on the caller's thread
//! ([`Session::in_buffer`] for an arena in static memory), and the
//! kernels' float functions come from `libm` ([`kernels::float`]).
//! Opening files, worker threads and host-page release need `std`.
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(missing_docs)]
// The memory map is the one unsafe operation; it is allowed where it
// happens, with its safety argument.
#![deny(unsafe_code)]

extern crate alloc;
// The unit tests run in both builds; without std they still run under
// the std test harness, and take its macros (`vec!`) as the std build's
// tests do.
#[cfg(all(test, not(feature = "std")))]
#[macro_use]
extern crate std;

mod arena;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod kernels;
mod lookup;
#[cfg(feature = "std")]
mod pool;
// Without threads every job runs on the caller's thread.
#[cfg(not(feature = "std"))]
#[path = "serial.rs"]
mod pool;
mod session;

pub use arena::{Arena, ArenaError, MAX_ARENA_ALIGN};

/// The alignment [`Bundle::from_static`] requires of a bundle's first
/// byte: weights sit at multiples of 64 from the start of the file, so a
/// 64-aligned start gives every weight the alignment of any element type
/// (a mapped file starts on a page and always has it).
pub const BUNDLE_ALIGN: usize = 64;
pub use lookup::{BoolByte, Element, F16Bits, LookupError, TensorKey, TensorRef};
pub use session::{RunError, Session, SessionError, UnsupportedOp};

use alloc::format;
use alloc::string::ToString;
#[cfg(feature = "std")]
use memmap2::Mmap;
#[cfg(feature = "std")]
use std::path::Path;
#[cfg(feature = "std")]
use std::sync::Arc;
use stow_bundle::{
    BundleError, BundleView, Contents, HeaderInfo, OwnedBundle, Region, SectionInfo,
};
use thiserror::Error;

/// What names a bundle in [`Bundle::path`] and in errors: the path of its
/// file with `std`; without `std`, where bundles come only from memory, a
/// label (`<memory at 0x…>`).
#[cfg(feature = "std")]
pub type BundlePath = std::path::PathBuf;
/// What names a bundle in [`Bundle::path`] and in errors: the path of its
/// file with `std`; without `std`, where bundles come only from memory, a
/// label (`<memory at 0x…>`).
#[cfg(not(feature = "std"))]
pub type BundlePath = alloc::string::String;

/// [`BundlePath`] for a message.
#[cfg(feature = "std")]
fn shown(path: &BundlePath) -> std::path::Display<'_> {
    path.display()
}

/// [`BundlePath`] for a message.
#[cfg(not(feature = "std"))]
fn shown(path: &BundlePath) -> &str {
    path
}

/// Why a bundle could not be opened or checked.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// The file could not be opened or mapped.
    #[cfg(feature = "std")]
    #[error("cannot read {}", path.display())]
    Io {
        /// The path.
        path: BundlePath,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a valid bundle (or the weight checksum failed).
    #[error("{} is not a valid bundle", shown(path))]
    Invalid {
        /// The path.
        path: BundlePath,
        /// What validation found.
        #[source]
        source: BundleError,
    },
    /// Bytes given to [`Bundle::from_static`] do not start at a multiple
    /// of [`BUNDLE_ALIGN`].
    #[error("the bundle bytes at {address:#x} are not aligned to {align} bytes (weights would be misaligned)")]
    Misaligned {
        /// Address of the first byte.
        address: usize,
        /// The alignment required ([`BUNDLE_ALIGN`]).
        align: usize,
    },
}

/// The bytes a bundle reads: a mapping, shared between the validated
/// bundle (which reads it) and [`Bundle`] (which gives the kernel advice
/// about it), or bytes that outlive the program's use of them (a bundle
/// in flash or `include_bytes!`).
enum Source {
    #[cfg(feature = "std")]
    Mapped(Arc<Mmap>),
    Static(&'static [u8]),
}

impl AsRef<[u8]> for Source {
    fn as_ref(&self) -> &[u8] {
        match self {
            #[cfg(feature = "std")]
            Source::Mapped(map) => map,
            Source::Static(bytes) => bytes,
        }
    }
}

/// A validated, read-only bundle: a memory-mapped file or borrowed bytes.
pub struct Bundle {
    inner: OwnedBundle<Source>,
    /// The mapping, when the bundle is a mapped file (for page advice).
    #[cfg(feature = "std")]
    map: Option<Arc<Mmap>>,
    path: BundlePath,
}

impl core::fmt::Debug for Bundle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Bundle")
            .field("path", &self.path)
            .field("view", &self.view())
            .finish()
    }
}

impl Bundle {
    /// Maps `path` read-only and validates every byte but the weights.
    #[cfg(feature = "std")]
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
        let map = Arc::new(unsafe { Mmap::map(&file) }.map_err(io)?);
        let inner = OwnedBundle::new(Source::Mapped(map.clone())).map_err(|source| {
            RuntimeError::Invalid {
                path: path.to_path_buf(),
                source,
            }
        })?;
        Ok(Bundle {
            inner,
            map: Some(map),
            path: path.to_path_buf(),
        })
    }

    /// Validates `bytes` as [`Bundle::open`] validates a file, and reads
    /// them in place: nothing is copied, so a bundle stored in flash or
    /// embedded with `include_bytes!` costs no RAM for its weights. The
    /// first byte must be aligned to [`BUNDLE_ALIGN`] (64), so that every
    /// weight is aligned for its element type
    /// ([`RuntimeError::Misaligned`] otherwise). [`Bundle::path`] is then a
    /// label, `<memory at 0x…>`, naming the bundle in error messages.
    pub fn from_static(bytes: &'static [u8]) -> Result<Bundle, RuntimeError> {
        let address = bytes.as_ptr() as usize;
        if !address.is_multiple_of(BUNDLE_ALIGN) {
            return Err(RuntimeError::Misaligned {
                address,
                align: BUNDLE_ALIGN,
            });
        }
        let path = BundlePath::from(format!("<memory at {address:#x}>"));
        let inner =
            OwnedBundle::new(Source::Static(bytes)).map_err(|source| RuntimeError::Invalid {
                path: path.clone(),
                source,
            })?;
        Ok(Bundle {
            inner,
            #[cfg(feature = "std")]
            map: None,
            path,
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

    /// The file this bundle was opened from (a `<memory at 0x…>` label for
    /// [`Bundle::from_static`]).
    #[cfg(feature = "std")]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bundle's `<memory at 0x…>` label (without `std` every bundle
    /// comes from [`Bundle::from_static`]).
    #[cfg(not(feature = "std"))]
    pub fn path(&self) -> &str {
        &self.path
    }

    /// [`Bundle::path`], owned, for an error.
    pub(crate) fn path_owned(&self) -> BundlePath {
        self.path.clone()
    }

    /// The tensor `key` (an id or a name) names.
    pub fn tensor<K: TensorKey + ?Sized>(&self, key: &K) -> Result<TensorRef<'_>, LookupError> {
        lookup::find(self.contents(), key)
    }

    /// The graph inputs, in model order (their bytes are in the arena).
    pub fn inputs(&self) -> impl Iterator<Item = TensorRef<'_>> + '_ {
        self.io(&self.contents().inputs)
    }

    /// The graph outputs, in model order (their bytes are in the arena).
    pub fn outputs(&self) -> impl Iterator<Item = TensorRef<'_>> + '_ {
        self.io(&self.contents().outputs)
    }

    fn io<'a>(&'a self, ids: &'a [u32]) -> impl Iterator<Item = TensorRef<'a>> + 'a {
        let tensors = &self.contents().tensors;
        // Validation checked that every input and output id exists, so
        // nothing is skipped here.
        ids.iter().filter_map(move |&id| {
            Some(TensorRef {
                id,
                tensor: tensors.get(id as usize)?,
            })
        })
    }

    /// Weight `key` as a slice of `T` borrowed from the mapping, no copy.
    /// `T` must be the weight's element type ([`Element`]: `f32`, `i64`,
    /// ..., [`F16Bits`], [`BoolByte`]); the bytes must be aligned for `T`
    /// (always true of a mapped bundle: weights are 64-byte aligned).
    pub fn weight<T: Element, K: TensorKey + ?Sized>(&self, key: &K) -> Result<&[T], LookupError> {
        let t = self.tensor(key)?;
        if t.tensor.region != Region::Weights {
            return Err(LookupError::NotAWeight {
                name: t.name().to_string(),
                id: t.id,
            });
        }
        lookup::check_dtype::<T>(t)?;
        let bytes = self
            .weight_bytes(t.id)
            .ok_or_else(|| lookup::bad_length(t, t.tensor.size))?;
        lookup::cast(t, bytes)
    }

    /// Tells the operating system that this process no longer needs the
    /// weight pages resident: call it once the weights were copied to a
    /// device or into another buffer (method M5). The pages leave this
    /// process's resident set at once; the file's pages stay in the page
    /// cache, shared and reclaimable, until the kernel needs the memory.
    ///
    /// Borrowed weight slices stay valid and unchanged: touching them again
    /// faults the pages back in from the file. Header, tables and metadata
    /// are already decoded into [`Bundle::contents`], so nothing else needs
    /// the mapping. A no-op (returning `Ok`) on non-Unix systems and for a
    /// bundle read from memory ([`Bundle::from_static`]): its bytes are the
    /// caller's. Needs `std`: a device without it has no pages to give
    /// back.
    #[cfg(feature = "std")]
    pub fn release_host_pages(&self) -> Result<(), RuntimeError> {
        let range = self.view().weight_section_range();
        let Some(map) = &self.map else {
            return Ok(());
        };
        if range.is_empty() {
            return Ok(());
        }
        Self::dont_need(map, range).map_err(|source| RuntimeError::Io {
            path: self.path.clone(),
            source,
        })
    }

    #[cfg(all(feature = "std", unix))]
    fn dont_need(map: &Mmap, range: std::ops::Range<usize>) -> std::io::Result<()> {
        // SAFETY: MADV_DONTNEED is "unchecked" advice because on a private
        // or anonymous mapping it discards contents, changing bytes under
        // live borrows. This mapping is a read-only shared mapping of a file
        // (`Mmap::map` uses MAP_SHARED, PROT_READ) that is never modified
        // in place (see `open`): dropped pages are re-read from the file on
        // the next access with the same bytes, so every outstanding `&[u8]`
        // still sees what it saw. The range is the validated weight section,
        // inside the mapping; memmap2 rounds its start down to a page.
        #[allow(unsafe_code)]
        unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, range.start, range.len())
        }
    }

    #[cfg(all(feature = "std", not(unix)))]
    fn dont_need(_map: &Mmap, _range: std::ops::Range<usize>) -> std::io::Result<()> {
        Ok(())
    }
}

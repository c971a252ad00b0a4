//! The Stowage bundle format: one little-endian file holding a model's
//! weights, every tensor's planned place in the activation arena, and the
//! operator list.
//!
//! - [`to_bytes`] encodes [`Contents`] plus weight bytes (checking them as
//!   a reader would, then parsing its own output); [`write_file`] writes
//!   the result atomically.
//! - [`BundleView::parse`] validates untrusted bytes completely before
//!   anything is handed out; afterwards every accessor borrows from the
//!   input and cannot fail. [`OwnedBundle`] does the same for a buffer it
//!   owns (a memory map, a `Vec`).
//!
//! The byte layout is specified in `docs/FORMAT.md`; [`mod@format`] holds the
//! fixed records (also in `include/stow_bundle.h` for C), [`proto`] the
//! metadata messages of `proto/stow_bundle.proto`. Checksums are CRC-32
//! ([`crc32`]), implemented in this crate.
//!
//! Without the default `std` feature the crate is `no_std` (it needs
//! `alloc`): everything but [`write_file`] is there, so a device parses
//! and validates a bundle held in flash with the same code as the host.
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

extern crate alloc;

mod checksum;
mod contents;
mod error;
#[cfg(feature = "std")]
mod file;
pub mod format;
mod header;
mod meta;
mod pools;
pub mod proto;
mod read;
mod records;
mod sections;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod write;

#[cfg(test)]
mod tests;

pub use checksum::crc32;
pub use contents::{
    AliasKind, AttrValue, Contents, DType, MemoryPool, Op, ParseDTypeError, Provenance,
    Quantization, Region, Tensor, TensorKind,
};
pub use error::BundleError;
#[cfg(feature = "std")]
pub use file::write_file;
pub use read::{BundleView, HeaderInfo, OwnedBundle};
pub use sections::SectionInfo;
pub use write::to_bytes;

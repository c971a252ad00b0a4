//! The Stowage bundle format: one little-endian file holding a model's
//! weights, every tensor's planned place, and the operator list.
//!
//! [`to_bytes`] encodes [`Contents`] plus weight bytes; [`BundleView::parse`]
//! validates untrusted bytes completely before anything is handed out, after
//! which every accessor borrows from the input without failing. The byte
//! layout is specified in `docs/FORMAT.md`; [`format`] holds the fixed
//! records C readers use.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod checksum;
mod contents;
mod error;
pub mod format;
mod meta;
mod read;
mod write;

#[cfg(test)]
mod tests;

pub use checksum::crc32;
pub use contents::{
    AliasKind, AttrValue, Contents, DType, Op, Provenance, Region, Tensor, TensorKind,
};
pub use error::BundleError;
pub use read::{BundleView, HeaderInfo, SectionInfo};
pub use write::{to_bytes, write_file};

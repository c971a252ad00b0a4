//! The validating reader: [`BundleView::parse`] checks every byte but the
//! weights (whose checksum [`BundleView::verify_weights`] checks on
//! request), after which accessors cannot fail and borrow from the input.

use crate::contents::{Contents, Region};
use crate::error::BundleError;
use crate::format::{kind, Header, FLAG_POOLS, TENSOR_RECORD_LEN};
use crate::sections::{self, slice, SectionInfo};
use crate::{header, meta, pools, records};
use alloc::borrow::Cow;
use alloc::vec::Vec;
use core::fmt;

/// Header fields, for display and for callers that size buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderInfo {
    /// Format version.
    pub version: u32,
    /// Flags ([`crate::format::FLAG_POOLS`] is the one defined).
    pub flags: u32,
    /// File length in bytes.
    pub file_len: u64,
    /// Number of sections.
    pub section_count: u32,
    /// Stored CRC-32 of the header and section table.
    pub header_crc: u32,
    /// Activation arena size in bytes (pool 0 of a bundle with pools).
    pub arena_bytes: u64,
    /// Alignment the arena base needs (a power of two).
    pub arena_align: u64,
    /// Number of tensors.
    pub tensor_count: u32,
    /// Number of operators.
    pub op_count: u32,
}

/// Everything `parse` learns, independent of where the bytes live.
#[derive(Clone, Debug)]
pub(crate) struct Parsed {
    header: Header,
    sections: Vec<SectionInfo>,
    /// Index of the WEIGHTS section in `sections`.
    weights: usize,
    contents: Contents,
}

/// A bundle whose bytes passed every check. Accessors borrow from the
/// input and never fail.
pub struct BundleView<'a> {
    bytes: &'a [u8],
    parsed: Cow<'a, Parsed>,
}

impl Parsed {
    fn parse(bytes: &[u8]) -> Result<Parsed, BundleError> {
        let (header, table_end) = header::parse(bytes)?;
        let sections = sections::parse(bytes, &header, table_end)?;
        // `sections::parse` has checked that every kind is present.
        let find = |k: u32| {
            sections
                .iter()
                .position(|s| s.kind == k)
                .and_then(|i| Some((i, *sections.get(i)?)))
                .ok_or(BundleError::MissingSection {
                    kind: kind::name(k),
                })
        };
        let (weights, weight_section) = find(kind::WEIGHTS)?;
        let records = find(kind::TENSORS)?.1.body(bytes);
        let expected = u64::from(header.tensor_count) * TENSOR_RECORD_LEN as u64;
        if records.len() as u64 != expected {
            return Err(BundleError::SectionSize {
                kind: "tensors",
                expected,
                found: records.len() as u64,
            });
        }
        let pool_section = sections.iter().find(|s| s.kind == kind::POOLS);
        let pools = match (header.flags & FLAG_POOLS != 0, pool_section) {
            (true, Some(s)) => {
                pools::decode(s.body(bytes), header.arena_bytes, header.arena_align)?
            }
            (false, None) => Vec::new(),
            (true, None) => {
                return Err(BundleError::BadPool {
                    index: 0,
                    problem: "the header's pools flag is set but there is no POOLS section".into(),
                })
            }
            (false, Some(_)) => {
                return Err(BundleError::BadPool {
                    index: 0,
                    problem: "a POOLS section is present but the header's pools flag is not set"
                        .into(),
                })
            }
        };
        let pool_bytes: Vec<u64> = if pools.is_empty() {
            alloc::vec![header.arena_bytes]
        } else {
            pools.iter().map(|p| p.bytes).collect()
        };
        let tensors = records::decode(
            records,
            find(kind::STRINGS)?.1.body(bytes),
            find(kind::SHAPES)?.1.body(bytes),
            &pool_bytes,
            weight_section.length,
        )?;
        let metadata = find(kind::METADATA)?.1;
        let contents = meta::decode(
            metadata.body(bytes),
            metadata.offset,
            &header,
            tensors,
            pools,
        )?;
        Ok(Parsed {
            header,
            sections,
            weights,
            contents,
        })
    }
}

impl<'a> BundleView<'a> {
    /// Validates `bytes` completely, in this order: header (magic, version,
    /// flags, reserved bytes, file length, counts, checksum of header and
    /// section table, arena alignment); section table (known kinds, each
    /// once, alignment, bounds, order, padding, nothing trailing) and the
    /// checksum of every section but WEIGHTS; every tensor record; the
    /// metadata against header and records. Builds the owned [`Contents`]
    /// once. See `docs/FORMAT.md`, "Validation".
    pub fn parse(bytes: &'a [u8]) -> Result<BundleView<'a>, BundleError> {
        Ok(BundleView {
            bytes,
            parsed: Cow::Owned(Parsed::parse(bytes)?),
        })
    }

    /// What the bundle holds. Tensor `i` is record `i`; weight offsets are
    /// relative to the weight section.
    pub fn contents(&self) -> &Contents {
        &self.parsed.contents
    }

    /// Header fields.
    pub fn header(&self) -> HeaderInfo {
        let h = &self.parsed.header;
        HeaderInfo {
            version: h.version,
            flags: h.flags,
            file_len: h.file_len,
            section_count: h.section_count,
            header_crc: h.header_crc,
            arena_bytes: h.arena_bytes,
            arena_align: h.arena_align,
            tensor_count: h.tensor_count,
            op_count: h.op_count,
        }
    }

    /// The sections in file order.
    pub fn sections(&self) -> &[SectionInfo] {
        &self.parsed.sections
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    fn weight_info(&self) -> Option<&SectionInfo> {
        self.parsed.sections.get(self.parsed.weights)
    }

    /// Byte range of the weight section within the file.
    pub fn weight_section_range(&self) -> core::ops::Range<usize> {
        // Validated to lie within `bytes`, so both ends fit in usize.
        self.weight_info()
            .and_then(|s| {
                let start = usize::try_from(s.offset).ok()?;
                Some(start..start.checked_add(usize::try_from(s.length).ok()?)?)
            })
            .unwrap_or(0..0)
    }

    /// The stored bytes of weight tensor `id`; `None` for arena tensors and
    /// ids out of range. Each weight starts at a multiple of 64 bytes from
    /// the start of the file, so a page-aligned buffer (a memory map) gives
    /// 64-byte-aligned slices.
    pub fn weight_bytes(&self, id: u32) -> Option<&'a [u8]> {
        let t = self.contents().tensors.get(id as usize)?;
        if t.region != Region::Weights {
            return None;
        }
        let section = self.bytes.get(self.weight_section_range())?;
        slice(section, t.offset, t.size)
    }

    /// Checks the WEIGHTS checksum. [`parse`](Self::parse) leaves it out
    /// because it reads every weight byte.
    pub fn verify_weights(&self) -> Result<(), BundleError> {
        match self.weight_info() {
            Some(s) => sections::check_crc(self.bytes, s),
            None => Err(BundleError::MissingSection { kind: "weights" }),
        }
    }
}

impl fmt::Debug for BundleView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BundleView")
            .field("len", &self.bytes.len())
            .field("header", &self.header())
            .field("sections", &self.sections())
            .field("tensors", &self.contents().tensors.len())
            .field("ops", &self.contents().ops.len())
            .finish()
    }
}

/// A validated bundle that owns its bytes (a `Vec<u8>`, a memory map, …):
/// [`BundleView::parse`] runs once in [`new`](Self::new), and
/// [`view`](Self::view) hands out views without checking again.
///
/// `B::as_ref` must return the same bytes every time (true of `Vec<u8>`,
/// `Box<[u8]>`, `memmap2::Mmap`); if it does not, accessors may return
/// `None` or wrong bytes, but never read out of bounds.
pub struct OwnedBundle<B> {
    bytes: B,
    parsed: Parsed,
}

impl<B: AsRef<[u8]>> OwnedBundle<B> {
    /// Validates `bytes` as [`BundleView::parse`] does and keeps them.
    pub fn new(bytes: B) -> Result<OwnedBundle<B>, BundleError> {
        let parsed = Parsed::parse(bytes.as_ref())?;
        Ok(OwnedBundle { bytes, parsed })
    }

    /// A view borrowing the bytes; no validation is repeated.
    pub fn view(&self) -> BundleView<'_> {
        BundleView {
            bytes: self.bytes.as_ref(),
            parsed: Cow::Borrowed(&self.parsed),
        }
    }

    /// What the bundle holds.
    pub fn contents(&self) -> &Contents {
        &self.parsed.contents
    }

    /// The sections in file order.
    pub fn sections(&self) -> &[SectionInfo] {
        &self.parsed.sections
    }

    /// The owned bytes.
    pub fn into_inner(self) -> B {
        self.bytes
    }
}

impl<B: AsRef<[u8]>> fmt::Debug for OwnedBundle<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("OwnedBundle").field(&self.view()).finish()
    }
}

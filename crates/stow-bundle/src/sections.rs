//! The section table: where each section lies, and the rules that keep the
//! file free of overlaps, gaps and trailing bytes.

use crate::checksum::crc32;
use crate::error::BundleError;
use crate::format::{
    kind, Header, SectionEntry, HEADER_LEN, SECTION_ENTRY_LEN, SECTION_RESERVED_OFFSET,
};
use alloc::format;
use alloc::vec::Vec;

/// One validated section, as listed in the section table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectionInfo {
    /// Kind code (see [`crate::format::kind`]).
    pub kind: u32,
    /// Byte offset in the file (a multiple of `align`).
    pub offset: u64,
    /// Byte length.
    pub length: u64,
    /// Alignment of the offset.
    pub align: u64,
    /// Stored CRC-32 of the section's bytes.
    pub crc: u32,
}

impl SectionInfo {
    /// The kind's name (`tensors`, `strings`, `shapes`, `metadata`, `weights`).
    pub fn kind_name(&self) -> &'static str {
        kind::name(self.kind)
    }

    /// The section's bytes within `file` (empty if out of range, which a
    /// validated section never is).
    pub(crate) fn body<'a>(&self, file: &'a [u8]) -> &'a [u8] {
        slice(file, self.offset, self.length).unwrap_or(&[])
    }
}

/// `bytes[offset..offset + length]`, or `None` when that overflows or lies
/// outside `bytes`.
pub(crate) fn slice(bytes: &[u8], offset: u64, length: u64) -> Option<&[u8]> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(length).ok()?)?;
    bytes.get(start..end)
}

/// Reads and checks the section table of `bytes` (whose header has been
/// checked and whose table ends at `table_end`), then checks the checksum
/// of every section but WEIGHTS.
pub(crate) fn parse(
    bytes: &[u8],
    header: &Header,
    table_end: u64,
) -> Result<Vec<SectionInfo>, BundleError> {
    let count = header.section_count as usize;
    let mut sections: Vec<SectionInfo> = Vec::with_capacity(count);
    for index in 0..count {
        let at = HEADER_LEN + index * SECTION_ENTRY_LEN;
        let raw = bytes
            .get(at..at + SECTION_ENTRY_LEN)
            .ok_or(BundleError::TooShort {
                what: "section table",
                needed: table_end,
                len: bytes.len() as u64,
            })?;
        let e: SectionEntry = bytemuck::pod_read_unaligned(raw);
        let required = kind::required_align(e.kind).ok_or(BundleError::UnknownSection {
            index,
            kind: e.kind,
        })?;
        let name = kind::name(e.kind);
        if e.reserved != 0 {
            return Err(BundleError::Reserved {
                what: format!("section entry {index}"),
                offset: (at + SECTION_RESERVED_OFFSET) as u64,
            });
        }
        if sections.iter().any(|s| s.kind == e.kind) {
            return Err(BundleError::DuplicateSection { index, kind: name });
        }
        if u64::from(e.align) != required || !e.offset.is_multiple_of(required) {
            return Err(BundleError::SectionMisaligned {
                index,
                kind: name,
                offset: e.offset,
                align: e.align,
                required,
            });
        }
        let end = e.offset.checked_add(e.length);
        if e.offset < table_end || end.is_none_or(|end| end > header.file_len) {
            return Err(BundleError::SectionOutOfBounds {
                index,
                kind: name,
                offset: e.offset,
                length: e.length,
                start: table_end,
                end: header.file_len,
            });
        }
        sections.push(SectionInfo {
            kind: e.kind,
            offset: e.offset,
            length: e.length,
            align: required,
            crc: e.crc,
        });
    }
    check_layout(bytes, &sections, table_end, header.file_len)?;
    for &(k, _) in &kind::ALL {
        if !sections.iter().any(|s| s.kind == k) {
            return Err(BundleError::MissingSection {
                kind: kind::name(k),
            });
        }
    }
    for s in sections.iter().filter(|s| s.kind != kind::WEIGHTS) {
        check_crc(bytes, s)?;
    }
    Ok(sections)
}

/// Sections follow each other in table order, each preceded by zero
/// padding shorter than its alignment, and the last one ends the file.
fn check_layout(
    bytes: &[u8],
    sections: &[SectionInfo],
    table_end: u64,
    file_len: u64,
) -> Result<(), BundleError> {
    let mut cursor = table_end;
    let mut earlier = "section table";
    for s in sections {
        let gap_len = s
            .offset
            .checked_sub(cursor)
            .ok_or(BundleError::SectionsOverlap {
                earlier,
                earlier_end: cursor,
                later: s.kind_name(),
                offset: s.offset,
            })?;
        let gap = slice(bytes, cursor, gap_len).unwrap_or(&[]);
        if gap_len >= s.align || gap.iter().any(|&b| b != 0) {
            return Err(BundleError::StrayBytes {
                offset: cursor,
                end: s.offset,
            });
        }
        // Checked against the file length when the entry was read.
        cursor = s.offset.saturating_add(s.length);
        earlier = s.kind_name();
    }
    if cursor != file_len {
        return Err(BundleError::StrayBytes {
            offset: cursor,
            end: file_len,
        });
    }
    Ok(())
}

/// Compares a section's stored checksum with its bytes.
pub(crate) fn check_crc(bytes: &[u8], s: &SectionInfo) -> Result<(), BundleError> {
    let computed = crc32(s.body(bytes));
    if computed != s.crc {
        return Err(BundleError::Checksum {
            what: s.kind_name(),
            offset: s.offset,
            length: s.length,
            stored: s.crc,
            computed,
        });
    }
    Ok(())
}

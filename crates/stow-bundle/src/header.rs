//! The fixed 64-byte header and the checksum that covers it together with
//! the section table.

use crate::checksum::Crc32;
use crate::error::BundleError;
use crate::format::{
    Header, HEADER_CRC_OFFSET, HEADER_LEN, HEADER_RESERVED_OFFSET, KNOWN_FLAGS, MAGIC, MAX_ITEMS,
    MAX_SECTIONS, SECTION_ENTRY_LEN, VERSION,
};

/// CRC-32 of `head_and_table` (header followed by the section table) with
/// the four `header_crc` bytes taken as zero. Returns `None` when the input
/// is shorter than the header.
pub(crate) fn header_crc(head_and_table: &[u8]) -> Option<u32> {
    let before = head_and_table.get(..HEADER_CRC_OFFSET)?;
    let after = head_and_table.get(HEADER_CRC_OFFSET + 4..)?;
    Some(
        Crc32::new()
            .update(before)
            .update(&[0; 4])
            .update(after)
            .finish(),
    )
}

/// Reads and checks the header: magic, version, flags, reserved bytes,
/// file length, caps on the counts, presence of the section table, the
/// header checksum and the arena alignment. Returns the header and the end
/// of the section table.
pub(crate) fn parse(bytes: &[u8]) -> Result<(Header, u64), BundleError> {
    let len = bytes.len() as u64;
    let head = bytes.get(..HEADER_LEN).ok_or(BundleError::TooShort {
        what: "header",
        needed: HEADER_LEN as u64,
        len,
    })?;
    let header: Header = bytemuck::pod_read_unaligned(head);
    if header.magic != MAGIC {
        return Err(BundleError::BadMagic {
            found: header.magic,
        });
    }
    if header.version != VERSION {
        return Err(BundleError::UnsupportedVersion {
            found: header.version,
            supported: VERSION,
        });
    }
    if header.flags & !KNOWN_FLAGS != 0 {
        return Err(BundleError::UnknownFlags {
            flags: header.flags,
            known: KNOWN_FLAGS,
        });
    }
    if header.reserved != [0; 8] {
        return Err(BundleError::Reserved {
            what: "header".into(),
            offset: HEADER_RESERVED_OFFSET as u64,
        });
    }
    if header.file_len != len {
        return Err(BundleError::LengthMismatch {
            header: header.file_len,
            actual: len,
        });
    }
    let caps = [
        ("sections", header.section_count, MAX_SECTIONS),
        ("tensors", header.tensor_count, MAX_ITEMS),
        ("ops", header.op_count, MAX_ITEMS),
    ];
    for (what, count, limit) in caps {
        if count > limit {
            return Err(BundleError::TooMany {
                what,
                count: count.into(),
                limit: limit.into(),
            });
        }
    }
    // section_count <= MAX_SECTIONS, so this cannot overflow.
    let table_end = HEADER_LEN as u64 + SECTION_ENTRY_LEN as u64 * u64::from(header.section_count);
    let head_and_table = usize::try_from(table_end)
        .ok()
        .and_then(|end| bytes.get(..end))
        .ok_or(BundleError::TooShort {
            what: "section table",
            needed: table_end,
            len,
        })?;
    let computed = header_crc(head_and_table).unwrap_or(0);
    if computed != header.header_crc {
        return Err(BundleError::Checksum {
            what: "header and section table",
            offset: 0,
            length: table_end,
            stored: header.header_crc,
            computed,
        });
    }
    if !header.arena_align.is_power_of_two() {
        return Err(BundleError::BadArenaAlign {
            align: header.arena_align,
        });
    }
    Ok((header, table_end))
}

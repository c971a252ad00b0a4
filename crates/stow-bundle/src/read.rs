use crate::checksum::crc32;
use crate::contents::{AliasKind, Contents, DType, Region, TensorKind};
use crate::error::BundleError;
use crate::format::*;
use crate::meta;

/// Header fields a reader may want to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderInfo {
    /// Format version.
    pub version: u32,
    /// Flags.
    pub flags: u32,
    /// File length in bytes.
    pub file_len: u64,
}

/// One validated section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectionInfo {
    /// Kind code (see [`crate::format::kind`]).
    pub kind: u32,
    /// Byte offset in the file.
    pub offset: u64,
    /// Byte length.
    pub length: u64,
    /// Alignment of the offset.
    pub align: u64,
    /// Stored CRC-32 of the section.
    pub crc: u32,
}

impl SectionInfo {
    /// The kind's name.
    pub fn kind_name(&self) -> &'static str {
        kind::name(self.kind)
    }
}

/// A bundle whose bytes passed every check. Accessors borrow from the input.
#[derive(Debug)]
pub struct BundleView<'a> {
    bytes: &'a [u8],
    header: Header,
    sections: Vec<SectionInfo>,
    contents: Contents,
}

fn too_short(what: &'static str, needed: u64, len: usize) -> BundleError {
    BundleError::TooShort {
        what,
        needed,
        len: len as u64,
    }
}

fn slice(bytes: &[u8], offset: u64, length: u64) -> Option<&[u8]> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(length).ok()?)?;
    bytes.get(start..end)
}

impl<'a> BundleView<'a> {
    /// Validates `bytes` completely: header, section table, checksums of
    /// everything but the weights, every fixed record, and the metadata
    /// against the records.
    pub fn parse(bytes: &'a [u8]) -> Result<BundleView<'a>, BundleError> {
        let head = bytes
            .get(..HEADER_LEN)
            .ok_or_else(|| too_short("header", HEADER_LEN as u64, bytes.len()))?;
        let header: Header = bytemuck::pod_read_unaligned(head);
        if header.magic != MAGIC {
            return Err(BundleError::BadMagic {
                found: header.magic,
            });
        }
        if header.version != VERSION {
            return Err(BundleError::UnsupportedVersion(header.version));
        }
        if header.flags & !KNOWN_FLAGS != 0 {
            return Err(BundleError::UnknownFlags(header.flags));
        }
        if header.reserved != [0; 8] {
            return Err(BundleError::Reserved("header"));
        }
        if header.file_len != bytes.len() as u64 {
            return Err(BundleError::LengthMismatch {
                header: header.file_len,
                actual: bytes.len() as u64,
            });
        }
        if header.section_count > MAX_SECTIONS {
            return Err(BundleError::TooMany {
                what: "sections",
                count: header.section_count as u64,
                limit: MAX_SECTIONS as u64,
            });
        }
        for (what, count) in [("tensors", header.tensor_count), ("ops", header.op_count)] {
            if count > MAX_ITEMS {
                return Err(BundleError::TooMany {
                    what,
                    count: count as u64,
                    limit: MAX_ITEMS as u64,
                });
            }
        }
        let table_end = HEADER_LEN + SECTION_ENTRY_LEN * header.section_count as usize;
        let head_and_table = bytes
            .get(..table_end)
            .ok_or_else(|| too_short("section table", table_end as u64, bytes.len()))?;
        let mut zeroed = head_and_table.to_vec();
        zeroed[28..32].fill(0);
        let computed = crc32(&zeroed);
        if computed != header.header_crc {
            return Err(BundleError::Checksum {
                what: "header and section table",
                stored: header.header_crc,
                computed,
            });
        }
        let sections = parse_sections(bytes, &header, table_end as u64)?;
        let find = |k: u32| sections.iter().find(|s| s.kind == k).copied();
        let body = |s: SectionInfo| slice(bytes, s.offset, s.length).unwrap_or(&[]);
        for s in &sections {
            if s.kind != kind::WEIGHTS {
                let computed = crc32(body(*s));
                if computed != s.crc {
                    return Err(BundleError::Checksum {
                        what: kind::name(s.kind),
                        stored: s.crc,
                        computed,
                    });
                }
            }
        }
        let section = |k: u32| find(k).ok_or(BundleError::MissingSection(kind::name(k)));
        let records = body(section(kind::TENSORS)?);
        let strings = body(section(kind::STRINGS)?);
        let shapes = body(section(kind::SHAPES)?);
        let weights_len = section(kind::WEIGHTS)?.length;
        let metadata = body(section(kind::METADATA)?);

        let n = header.tensor_count as usize;
        let expected = n as u64 * TENSOR_RECORD_LEN as u64;
        if records.len() as u64 != expected {
            return Err(BundleError::SectionSize {
                kind: "tensors",
                expected,
                found: records.len() as u64,
            });
        }
        if shapes.len() % 8 != 0 {
            return Err(BundleError::SectionSize {
                kind: "shapes",
                expected: shapes.len() as u64 / 8 * 8,
                found: shapes.len() as u64,
            });
        }
        if header.arena_align == 0 || !header.arena_align.is_power_of_two() {
            return Err(BundleError::Disagree(format!(
                "arena alignment {} is not a power of two",
                header.arena_align
            )));
        }
        let contents = meta::decode(metadata)?;
        check_records(records, strings, shapes, &header, weights_len, &contents)?;
        check_contents(&contents, &header)?;
        Ok(BundleView {
            bytes,
            header,
            sections,
            contents,
        })
    }

    /// What the bundle holds.
    pub fn contents(&self) -> &Contents {
        &self.contents
    }

    /// Header fields.
    pub fn header(&self) -> HeaderInfo {
        HeaderInfo {
            version: self.header.version,
            flags: self.header.flags,
            file_len: self.header.file_len,
        }
    }

    /// The sections in file order.
    pub fn sections(&self) -> &[SectionInfo] {
        &self.sections
    }

    fn weight_section(&self) -> &'a [u8] {
        self.sections
            .iter()
            .find(|s| s.kind == kind::WEIGHTS)
            .and_then(|s| slice(self.bytes, s.offset, s.length))
            .unwrap_or(&[])
    }

    /// The stored bytes of weight tensor `id` (`None` for arena tensors or
    /// unknown ids). Their address is aligned to 64 bytes relative to the
    /// start of the file.
    pub fn weight_bytes(&self, id: u32) -> Option<&'a [u8]> {
        let t = self.contents.tensors.get(id as usize)?;
        if t.region != Region::Weights {
            return None;
        }
        slice(self.weight_section(), t.offset, t.size)
    }

    /// Checks the weight section's checksum (not done by [`parse`](Self::parse),
    /// since it reads every weight byte).
    pub fn verify_weights(&self) -> Result<(), BundleError> {
        let Some(s) = self.sections.iter().find(|s| s.kind == kind::WEIGHTS) else {
            return Err(BundleError::MissingSection("weights"));
        };
        let computed = crc32(self.weight_section());
        if computed != s.crc {
            return Err(BundleError::Checksum {
                what: "weights",
                stored: s.crc,
                computed,
            });
        }
        Ok(())
    }

    /// Byte range of the weight section within the file.
    pub fn weight_section_range(&self) -> std::ops::Range<usize> {
        self.sections
            .iter()
            .find(|s| s.kind == kind::WEIGHTS)
            .map(|s| s.offset as usize..(s.offset + s.length) as usize)
            .unwrap_or(0..0)
    }
}

fn parse_sections(
    bytes: &[u8],
    header: &Header,
    table_end: u64,
) -> Result<Vec<SectionInfo>, BundleError> {
    let mut sections: Vec<SectionInfo> = Vec::with_capacity(header.section_count as usize);
    for i in 0..header.section_count as usize {
        let at = HEADER_LEN + i * SECTION_ENTRY_LEN;
        let e: SectionEntry = bytemuck::pod_read_unaligned(&bytes[at..at + SECTION_ENTRY_LEN]);
        let Some(&(_, required)) = kind::ALL.iter().find(|(k, _)| *k == e.kind) else {
            return Err(BundleError::UnknownSection {
                index: i,
                kind: e.kind,
            });
        };
        let name = kind::name(e.kind);
        if e.reserved != 0 {
            return Err(BundleError::Reserved("section entry"));
        }
        if sections.iter().any(|s| s.kind == e.kind) {
            return Err(BundleError::DuplicateSection(name));
        }
        if e.align as u64 != required || !e.offset.is_multiple_of(required) {
            return Err(BundleError::SectionMisaligned {
                kind: name,
                offset: e.offset,
                align: e.align,
                required,
            });
        }
        let end = e.offset.checked_add(e.length);
        if e.offset < table_end || end.is_none_or(|end| end > header.file_len) {
            return Err(BundleError::SectionOutOfBounds {
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
    // Sections must follow each other in file order, separated only by zero
    // padding shorter than the next one's alignment, and end the file.
    let mut cursor = table_end;
    let mut previous: Option<SectionInfo> = None;
    for s in &sections {
        if s.offset < cursor {
            let earlier = previous
                .map(|p| kind::name(p.kind))
                .unwrap_or("section table");
            return Err(BundleError::SectionsOverlap {
                earlier,
                earlier_end: cursor,
                later: s.kind_name(),
                offset: s.offset,
            });
        }
        let gap = slice(bytes, cursor, s.offset - cursor).unwrap_or(&[]);
        if s.offset - cursor >= s.align || gap.iter().any(|&b| b != 0) {
            return Err(BundleError::StrayBytes {
                offset: cursor,
                end: s.offset,
            });
        }
        cursor = s.offset + s.length;
        previous = Some(*s);
    }
    if cursor != header.file_len {
        return Err(BundleError::StrayBytes {
            offset: cursor,
            end: header.file_len,
        });
    }
    Ok(sections)
}

fn check_records(
    records: &[u8],
    strings: &[u8],
    shapes: &[u8],
    header: &Header,
    weights_len: u64,
    c: &Contents,
) -> Result<(), BundleError> {
    if c.tensors.len() != header.tensor_count as usize {
        return Err(BundleError::Disagree(format!(
            "{} tensors in metadata, {} records",
            c.tensors.len(),
            header.tensor_count
        )));
    }
    for (index, chunk) in records.chunks_exact(TENSOR_RECORD_LEN).enumerate() {
        let r: TensorRecord = bytemuck::pod_read_unaligned(chunk);
        let bad = |field: &'static str, value: u64| BundleError::BadField {
            index,
            field,
            value,
        };
        if r.id as usize != index {
            return Err(bad("id", r.id as u64));
        }
        let kind = TensorKind::from_code(r.kind).ok_or_else(|| bad("kind", r.kind as u64))?;
        let dtype = DType::from_code(r.dtype).ok_or_else(|| bad("dtype", r.dtype as u64))?;
        let region = Region::from_code(r.region).ok_or_else(|| bad("region", r.region as u64))?;
        if (kind == TensorKind::Weight) != (region == Region::Weights) {
            return Err(bad("region", r.region as u64));
        }
        let alias = match r.alias_kind {
            0 if r.alias_of == NO_ALIAS => None,
            0 => return Err(bad("alias_of", r.alias_of as u64)),
            k => {
                let k = AliasKind::from_code(k).ok_or_else(|| bad("alias_kind", k as u64))?;
                if r.alias_of as usize >= records.len() / TENSOR_RECORD_LEN {
                    return Err(bad("alias_of", r.alias_of as u64));
                }
                Some((k, r.alias_of))
            }
        };
        let name = slice(strings, r.name_offset as u64, r.name_len as u64)
            .ok_or_else(|| bad("name_offset", r.name_offset as u64))?;
        let name = std::str::from_utf8(name).map_err(|_| BundleError::BadName(index))?;
        let dims = slice(shapes, r.dims_index as u64 * 8, r.rank as u64 * 8)
            .ok_or_else(|| bad("dims_index", r.dims_index as u64))?;
        let shape: Vec<u64> = dims
            .chunks_exact(8)
            .map(|d| u64::from_le_bytes(d.try_into().unwrap_or([0; 8])))
            .collect();
        let expected = shape
            .iter()
            .try_fold(dtype.size_bytes(), |a, &d| a.checked_mul(d));
        if expected != Some(r.size) {
            return Err(BundleError::ShapeSize {
                index,
                size: r.size,
                shape,
                dtype: dtype.name(),
                expected: expected.unwrap_or(u64::MAX),
            });
        }
        let limit = match region {
            Region::Arena => header.arena_bytes,
            Region::Weights => weights_len,
        };
        if r.offset.checked_add(r.size).is_none_or(|end| end > limit) {
            return Err(BundleError::OutOfRegion {
                index,
                region: region.name(),
                offset: r.offset,
                size: r.size,
                limit,
            });
        }
        if region == Region::Weights && !r.offset.is_multiple_of(WEIGHT_ALIGN) {
            return Err(bad("offset", r.offset));
        }
        if r.first_step > r.last_step {
            return Err(bad("last_step", r.last_step as u64));
        }
        let m = &c.tensors[index];
        let same = m.name == name
            && m.kind == kind
            && m.dtype == dtype
            && m.region == region
            && m.shape == shape
            && m.offset == r.offset
            && m.size == r.size
            && m.first_step == r.first_step
            && m.last_step == r.last_step
            && m.alias_of == alias;
        if !same {
            return Err(BundleError::Disagree(format!(
                "tensor {index} (`{name}`) differs between record and metadata"
            )));
        }
    }
    Ok(())
}

fn check_contents(c: &Contents, header: &Header) -> Result<(), BundleError> {
    if c.arena_bytes != header.arena_bytes || c.arena_align != header.arena_align {
        return Err(BundleError::Disagree(
            "arena size or alignment differs from the header".into(),
        ));
    }
    if c.ops.len() != header.op_count as usize {
        return Err(BundleError::Disagree(format!(
            "{} ops in metadata, header says {}",
            c.ops.len(),
            header.op_count
        )));
    }
    let n = c.tensors.len();
    let check = |what: String, ids: &[u32]| -> Result<(), BundleError> {
        match ids.iter().find(|&&id| id as usize >= n) {
            Some(&id) => Err(BundleError::BadTensorRef { what, id, count: n }),
            None => Ok(()),
        }
    };
    check("graph inputs".into(), &c.inputs)?;
    check("graph outputs".into(), &c.outputs)?;
    for (i, op) in c.ops.iter().enumerate() {
        check(format!("op {i} inputs"), &op.inputs)?;
        check(format!("op {i} outputs"), &op.outputs)?;
    }
    Ok(())
}

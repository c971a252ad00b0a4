//! Fixed-size records of the bundle, exactly as they sit in the file
//! (little-endian, `#[repr(C)]` with no implicit padding, so the same
//! structs work from C: see `include/stow_bundle.h`). The full byte layout
//! and the validation rules are in `docs/FORMAT.md`.
//!
//! | offset | bytes | content |
//! |---|---|---|
//! | 0 | 64 | [`Header`] |
//! | 64 | 32 × n | [`SectionEntry`] × `section_count` |
//! | … | … | sections in table order, each at a multiple of its alignment, zero padding (shorter than the alignment) between, nothing after the last |
//!
//! Version 1 writes the sections TENSORS ([`TensorRecord`] × tensor count),
//! STRINGS (names), SHAPES (u64 dimensions), METADATA (protobuf) and
//! WEIGHTS (each weight at a multiple of [`WEIGHT_ALIGN`]), in that order.
//! These structs are plain data: nothing here validates them; the reader
//! copies them out with `bytemuck::pod_read_unaligned` and checks every
//! field.

use bytemuck::{Pod, Zeroable};

/// First eight bytes of every bundle.
pub const MAGIC: [u8; 8] = *b"STOWBNDL";
/// The format version this crate reads and writes.
pub const VERSION: u32 = 1;
/// Header flag: the arena is split into several memory pools, listed in a
/// POOLS section; each arena tensor's record names its pool in the high 16
/// bits of `region`. Old readers reject the flag rather than misplace
/// tensors of different pools in one arena.
pub const FLAG_POOLS: u32 = 1;
/// Header flag: some operators read a weight stored in their kernel's
/// panel layout rather than row-major (each such operator carries the
/// attribute [`PACKED_ATTR`]). Old readers reject the flag rather than
/// run a kernel over weights in an order it does not expect.
pub const FLAG_PACKED: u32 = 2;
/// Header flag: some matrix products read their weight packed as the
/// product's left operand, the product being computed transposed (each
/// such operator carries [`PACKED_LEFT_ATTR`]). Readers that know only
/// [`FLAG_PACKED`] reject the flag rather than read those panels as the
/// right operand's.
pub const FLAG_PACKED_LEFT: u32 = 4;
/// Header flag, with [`FLAG_PACKED`]: some packed weights are int8 (u8 or
/// i8), stored as the panels of the int8 products. Readers that packed
/// only float weights reject the flag rather than run an int8 product
/// over a weight they take for row-major.
pub const FLAG_PACKED_INT8: u32 = 8;
/// Header flag: some graph input has no bytes of its own (region
/// [`Region::Rows`](crate::Region::Rows)); the caller writes it in bands of
/// rows into the arena tensors that alias it as
/// [`AliasKind::InputRows`](crate::AliasKind::InputRows). Old readers
/// reject the flag rather than give the caller an input with no place.
pub const FLAG_INPUT_ROWS: u32 = 16;
/// Flags this version understands: any other bit is rejected.
pub const KNOWN_FLAGS: u32 =
    FLAG_POOLS | FLAG_PACKED | FLAG_PACKED_LEFT | FLAG_PACKED_INT8 | FLAG_INPUT_ROWS;
/// The operator attribute (int: the depth block) marking a product or
/// convolution whose weight operand (input 1) is stored packed; the
/// layout is in docs/FORMAT.md, "Packed weights".
pub const PACKED_ATTR: &str = "stow.packed";
/// The operator attribute (int: the depth block) marking an `EinSum`
/// product whose weight operand (input 1) is stored packed as the left
/// operand of the transposed product (docs/FORMAT.md, "Packed weights").
pub const PACKED_LEFT_ATTR: &str = "stow.packed_left";
/// The operator attribute (text `FROM:TO:ROWS`) on the step that
/// assembles the output of a stage run in bands of rows (patch-based
/// execution), recording the stage so that `stow verify` can rebuild the
/// same steps from the model. Informational for runtimes: the bands are
/// ordinary operators.
pub const PATCH_ATTR: &str = "stow.patch";
/// Size of one [`PoolRecord`].
pub const POOL_RECORD_LEN: usize = 32;
/// Most pools a bundle may declare (a fixed bound, so that a runtime can
/// hold one view per pool without allocating).
pub const MAX_POOLS: u32 = 8;
/// Bytes of a pool name in its record (UTF-8, zero-padded).
pub const POOL_NAME_LEN: usize = 16;
/// The `region` bits holding the region code; the bits above hold the pool.
pub const REGION_CODE_MASK: u32 = 0xFFFF;
/// Shift of the pool index within a record's `region`.
pub const REGION_POOL_SHIFT: u32 = 16;
/// Size of [`Header`].
pub const HEADER_LEN: usize = 64;
/// Size of one [`SectionEntry`].
pub const SECTION_ENTRY_LEN: usize = 32;
/// Size of one [`TensorRecord`].
pub const TENSOR_RECORD_LEN: usize = 64;
/// Alignment of every weight inside the weight section, and of the section.
pub const WEIGHT_ALIGN: u64 = 64;
/// Most sections a bundle may declare.
pub const MAX_SECTIONS: u32 = 16;
/// Most tensors or ops a bundle may declare.
pub const MAX_ITEMS: u32 = 1 << 24;
/// `alias_of` value meaning "no alias".
pub const NO_ALIAS: u32 = u32::MAX;

/// Byte offset of [`Header::header_crc`] (taken as zero when computing it).
pub const HEADER_CRC_OFFSET: usize = core::mem::offset_of!(Header, header_crc);
/// Byte offset of [`Header::reserved`].
pub const HEADER_RESERVED_OFFSET: usize = core::mem::offset_of!(Header, reserved);
/// Byte offset of [`SectionEntry::reserved`] within an entry.
pub const SECTION_RESERVED_OFFSET: usize = core::mem::offset_of!(SectionEntry, reserved);

/// Section kinds.
pub mod kind {
    /// Tensor records ([`super::TensorRecord`] × tensor count).
    pub const TENSORS: u32 = 1;
    /// Tensor names, UTF-8, referenced by records.
    pub const STRINGS: u32 = 2;
    /// Tensor dimensions, u64 each, referenced by records.
    pub const SHAPES: u32 = 3;
    /// Protobuf metadata (`proto/stow_bundle.proto`, message `BundleMeta`).
    pub const METADATA: u32 = 4;
    /// Weight bytes.
    pub const WEIGHTS: u32 = 5;
    /// Memory pools ([`super::PoolRecord`] × pool count); present exactly
    /// when the header sets [`super::FLAG_POOLS`].
    pub const POOLS: u32 = 6;
    /// Every kind, in the order version 1 writes them, with its alignment.
    /// All five are required.
    pub const ALL: [(u32, u64); 5] = [
        (TENSORS, 8),
        (STRINGS, 8),
        (SHAPES, 8),
        (METADATA, 8),
        (WEIGHTS, 64),
    ];

    /// The alignment a known kind needs, `None` for unknown kinds.
    pub fn required_align(kind: u32) -> Option<u64> {
        if kind == POOLS {
            return Some(8);
        }
        ALL.iter().find(|(k, _)| *k == kind).map(|&(_, a)| a)
    }

    /// A kind's name (`unknown` for codes not listed here).
    pub fn name(kind: u32) -> &'static str {
        match kind {
            TENSORS => "tensors",
            STRINGS => "strings",
            SHAPES => "shapes",
            METADATA => "metadata",
            WEIGHTS => "weights",
            POOLS => "pools",
            _ => "unknown",
        }
    }
}

/// The file header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct Header {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`VERSION`].
    pub version: u32,
    /// Feature flags; must be within [`KNOWN_FLAGS`].
    pub flags: u32,
    /// Total file length in bytes.
    pub file_len: u64,
    /// Number of section entries following the header.
    pub section_count: u32,
    /// CRC-32 of the header (with this field zero) followed by the section table.
    pub header_crc: u32,
    /// Activation arena size in bytes.
    pub arena_bytes: u64,
    /// Required alignment of the arena base (a power of two).
    pub arena_align: u64,
    /// Number of tensor records.
    pub tensor_count: u32,
    /// Number of operators in the metadata.
    pub op_count: u32,
    /// Zero.
    pub reserved: [u8; 8],
}

/// One entry of the section table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct SectionEntry {
    /// Section kind (see [`kind`]).
    pub kind: u32,
    /// Alignment of `offset` (a power of two).
    pub align: u32,
    /// Byte offset in the file.
    pub offset: u64,
    /// Byte length.
    pub length: u64,
    /// CRC-32 of the section's bytes.
    pub crc: u32,
    /// Zero.
    pub reserved: u32,
}

/// One tensor's fixed record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct TensorRecord {
    /// Tensor id: the record's index.
    pub id: u32,
    /// [`crate::TensorKind`] code.
    pub kind: u32,
    /// [`crate::DType`] code.
    pub dtype: u32,
    /// [`crate::Region`] code in the low 16 bits; the tensor's pool in the
    /// high 16 bits (0 unless the header sets [`FLAG_POOLS`]).
    pub region: u32,
    /// Byte offset in the region.
    pub offset: u64,
    /// Byte size.
    pub size: u64,
    /// First step needing the bytes.
    pub first_step: u32,
    /// Last step needing the bytes (inclusive).
    pub last_step: u32,
    /// [`crate::AliasKind`] code, 0 for none.
    pub alias_kind: u32,
    /// Aliased tensor id, [`NO_ALIAS`] for none.
    pub alias_of: u32,
    /// Byte offset of the name in the strings section.
    pub name_offset: u32,
    /// Byte length of the name.
    pub name_len: u32,
    /// Index of the first dimension in the shapes section (in u64 units).
    pub dims_index: u32,
    /// Number of dimensions.
    pub rank: u32,
}

/// One memory pool of a bundle with [`FLAG_POOLS`], in preference order
/// (fastest first). Pool 0 is the header's arena (`arena_bytes`,
/// `arena_align`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct PoolRecord {
    /// Bytes of the pool's buffer; every tensor of the pool lies within.
    pub bytes: u64,
    /// Alignment its buffer's first byte needs (a power of two).
    pub align: u64,
    /// Name, UTF-8, non-empty, unique in the bundle, zero-padded.
    pub name: [u8; POOL_NAME_LEN],
}

const _: () = assert!(core::mem::size_of::<Header>() == HEADER_LEN);
const _: () = assert!(core::mem::size_of::<PoolRecord>() == POOL_RECORD_LEN);
const _: () = assert!(core::mem::size_of::<SectionEntry>() == SECTION_ENTRY_LEN);
const _: () = assert!(core::mem::size_of::<TensorRecord>() == TENSOR_RECORD_LEN);
const _: () = assert!(HEADER_CRC_OFFSET == 28);
const _: () = assert!(HEADER_RESERVED_OFFSET == 56);
const _: () = assert!(SECTION_RESERVED_OFFSET == 28);

//! The one error type of the crate.
//!
//! Reader variants name the structure that is wrong (header field, section
//! index and kind, tensor record index and field, byte offsets) and what was
//! expected next to what was found. Writer input errors reuse the same
//! variants where the rule is the same (a tensor whose size does not match
//! its shape is [`BundleError::ShapeSize`] whether it comes from a file or
//! from [`crate::to_bytes`]).

use alloc::string::String;
use alloc::vec::Vec;
#[cfg(feature = "std")]
use std::path::PathBuf;
use thiserror::Error;

/// Why bytes are not a valid bundle, or why a bundle could not be written.
#[derive(Debug, Error)]
pub enum BundleError {
    /// The input ends before a structure it must hold (the header, or the
    /// section table the header declares).
    #[error("file too short: the {what} needs {needed} bytes, the file has {len}")]
    TooShort {
        /// The structure.
        what: &'static str,
        /// Bytes needed from the start of the file.
        needed: u64,
        /// Bytes present.
        len: u64,
    },
    /// The first eight bytes are not the bundle magic `STOWBNDL`.
    #[error("not a Stowage bundle: magic bytes are {found:02x?}, expected \"STOWBNDL\"")]
    BadMagic {
        /// The eight bytes found.
        found: [u8; 8],
    },
    /// The header's format version is not the one this reader knows.
    #[error("format version {found} is not supported (this reader knows version {supported})")]
    UnsupportedVersion {
        /// Version in the header.
        found: u32,
        /// Version this reader implements.
        supported: u32,
    },
    /// The header sets flag bits this reader does not know.
    #[error("unknown flags {flags:#x} in the header (known: {known:#x})")]
    UnknownFlags {
        /// The header's flags.
        flags: u32,
        /// Flags this reader understands.
        known: u32,
    },
    /// A reserved field is not zero.
    #[error("reserved field of the {what} at byte {offset} is not zero")]
    Reserved {
        /// The structure holding the field (`header`, `section entry 2`, …).
        what: String,
        /// File offset of the reserved field.
        offset: u64,
    },
    /// The header's `file_len` is not the length of the input.
    #[error("header says the file has {header} bytes, it has {actual}")]
    LengthMismatch {
        /// `file_len` from the header.
        header: u64,
        /// Real length of the input.
        actual: u64,
    },
    /// More sections, tensors, operators, name bytes or dimensions than the
    /// format allows.
    #[error("{what}: {count} exceeds the limit of {limit}")]
    TooMany {
        /// What is counted.
        what: &'static str,
        /// The declared or requested count.
        count: u64,
        /// The limit.
        limit: u64,
    },
    /// The arena alignment (header, or writer input) is not a power of two.
    #[error("arena alignment {align} is not a power of two")]
    BadArenaAlign {
        /// The alignment found.
        align: u64,
    },
    /// A checksum does not match the bytes it covers.
    #[error(
        "{what} checksum mismatch over bytes {offset}..+{length}: \
         stored {stored:#010x}, computed {computed:#010x}"
    )]
    Checksum {
        /// What the checksum covers (`header and section table`, or a
        /// section kind name).
        what: &'static str,
        /// File offset of the covered bytes.
        offset: u64,
        /// Number of covered bytes.
        length: u64,
        /// Stored value.
        stored: u32,
        /// Value computed from the bytes.
        computed: u32,
    },
    /// A section entry has a kind this version does not know.
    #[error("section entry {index}: unknown kind {kind}")]
    UnknownSection {
        /// Index in the section table.
        index: usize,
        /// The kind code.
        kind: u32,
    },
    /// A section kind appears twice in the table.
    #[error("section entry {index}: section `{kind}` appears a second time")]
    DuplicateSection {
        /// Index of the second entry in the section table.
        index: usize,
        /// Section kind name.
        kind: &'static str,
    },
    /// A required section is absent.
    #[error("section `{kind}` is missing")]
    MissingSection {
        /// Section kind name.
        kind: &'static str,
    },
    /// A section lies (partly) outside the file, or over the header and
    /// section table.
    #[error(
        "section entry {index} (`{kind}`): bytes {offset}..+{length} lie outside \
         the section area {start}..{end}"
    )]
    SectionOutOfBounds {
        /// Index in the section table.
        index: usize,
        /// Section kind name.
        kind: &'static str,
        /// Its offset.
        offset: u64,
        /// Its length.
        length: u64,
        /// First byte sections may use (end of the section table).
        start: u64,
        /// File length.
        end: u64,
    },
    /// A section's declared alignment is not the one its kind needs, or its
    /// offset is not a multiple of it.
    #[error(
        "section entry {index} (`{kind}`) at offset {offset} declares alignment {align}: \
         the kind needs {required} and the offset must be a multiple of it"
    )]
    SectionMisaligned {
        /// Index in the section table.
        index: usize,
        /// Section kind name.
        kind: &'static str,
        /// Its offset.
        offset: u64,
        /// Declared alignment.
        align: u32,
        /// Alignment this kind needs.
        required: u64,
    },
    /// Sections are not in ascending file order or overlap.
    #[error("section `{later}` starts at {offset}, before `{earlier}` ends at {earlier_end}")]
    SectionsOverlap {
        /// The earlier section (or `section table`).
        earlier: &'static str,
        /// Where it ends.
        earlier_end: u64,
        /// The later section.
        later: &'static str,
        /// Where the later one starts.
        offset: u64,
    },
    /// Bytes between or after sections that are not alignment padding (zero
    /// bytes, fewer than the next section's alignment).
    #[error(
        "unexpected bytes at {offset}..{end} (only zero padding shorter than \
         the next section's alignment is allowed)"
    )]
    StrayBytes {
        /// First stray byte.
        offset: u64,
        /// End of the stray range.
        end: u64,
    },
    /// A section's length is not what the header and records imply.
    #[error("section `{kind}` has {found} bytes, {expected} expected")]
    SectionSize {
        /// Section kind name.
        kind: &'static str,
        /// Expected length.
        expected: u64,
        /// Actual length.
        found: u64,
    },
    /// A tensor field holds an invalid value (unknown code, id not equal to
    /// the index, name or dimensions not where they must be, a weight
    /// outside the weight region or misaligned, `first_step > last_step`,
    /// alias to a tensor that does not exist, …).
    #[error("tensor {index}: {field} = {value} is invalid")]
    BadField {
        /// Tensor id (record index).
        index: usize,
        /// Field name as in the record layout.
        field: &'static str,
        /// The value found.
        value: u64,
    },
    /// A tensor's bytes lie outside its region (arena or weight section).
    #[error(
        "tensor {index}: bytes {offset}..+{size} lie outside the {region} region of {limit} bytes"
    )]
    OutOfRegion {
        /// Tensor id.
        index: usize,
        /// Region name.
        region: &'static str,
        /// Offset in the region.
        offset: u64,
        /// Size.
        size: u64,
        /// Region length.
        limit: u64,
    },
    /// The memory pools are inconsistent: the POOLS section is present
    /// without the header's pools flag or missing with it, holds no pool
    /// or more than [`crate::format::MAX_POOLS`], is not a whole number of
    /// records, or a pool has an empty, non-UTF-8 or repeated name, an
    /// alignment that is not a power of two, or (pool 0) a size or
    /// alignment other than the header's arena.
    #[error("memory pool {index}: {problem}")]
    BadPool {
        /// Pool index (0 for problems of the section as a whole).
        index: usize,
        /// What is wrong.
        problem: String,
    },
    /// A tensor's size is not its element count times its element size.
    #[error("tensor {index}: size {size}, but shape {shape:?} of {dtype} needs {expected}")]
    ShapeSize {
        /// Tensor id.
        index: usize,
        /// The size field.
        size: u64,
        /// The shape.
        shape: Vec<u64>,
        /// Element type name.
        dtype: &'static str,
        /// Bytes the shape needs (`u64::MAX` when that overflows).
        expected: u64,
    },
    /// A tensor name is not valid UTF-8.
    #[error("tensor {index}: name at byte {offset} of the strings section is not UTF-8")]
    BadName {
        /// Tensor id.
        index: usize,
        /// Offset of the name in the STRINGS section.
        offset: u64,
    },
    /// The metadata section does not decode as a `BundleMeta` message.
    #[error("metadata section ({length} bytes at {offset}) does not decode")]
    Metadata {
        /// File offset of the section.
        offset: u64,
        /// Its length.
        length: u64,
        /// The protobuf decoder's error.
        #[source]
        source: prost::DecodeError,
    },
    /// The metadata and the fixed header disagree (tensor count, operator
    /// count, arena size or alignment).
    #[error("metadata says {field} = {metadata}, the header says {header}")]
    MetadataVsHeader {
        /// Header field name.
        field: &'static str,
        /// Value in the metadata.
        metadata: u64,
        /// Value in the header.
        header: u64,
    },
    /// A tensor's metadata entry disagrees with its fixed record.
    #[error("tensor {index}: {field} is {record} in the record but {metadata} in the metadata")]
    MetadataVsRecord {
        /// Tensor id.
        index: usize,
        /// Field name.
        field: &'static str,
        /// Value in the fixed record (debug form).
        record: String,
        /// Value in the metadata (debug form).
        metadata: String,
    },
    /// An operator attribute has an unknown kind, or a single-value kind
    /// with other than one value.
    #[error(
        "op {op}: attribute `{name}` has kind {kind} with {ints} ints and {floats} floats \
         (kinds: 1 int and 3 float need exactly one value, 2 ints, 4 floats, 5 text)"
    )]
    BadAttribute {
        /// Operator index (step).
        op: usize,
        /// Attribute name.
        name: String,
        /// The kind code.
        kind: u32,
        /// Number of integer values.
        ints: usize,
        /// Number of float values.
        floats: usize,
    },
    /// A tensor id in the graph inputs, graph outputs or an operator's
    /// operands does not exist.
    #[error("{what} names tensor {id}, but there are only {count} tensors")]
    BadTensorRef {
        /// Which list (`graph inputs`, `op 3 (conv) inputs`, …).
        what: String,
        /// The id.
        id: u32,
        /// Tensor count.
        count: usize,
    },
    /// A graph input written in bands of rows (region `rows`) and its bands
    /// (alias kind `input-rows`) do not fit together.
    #[error("tensor {index}: {reason}")]
    BadInputRows {
        /// The band's (or the input's) tensor id.
        index: usize,
        /// What does not fit.
        reason: String,
    },
    /// Writer input: the weight list does not have one slice per tensor.
    #[error("{slices} weight slices given for {tensors} tensors (one per tensor, empty for arena tensors)")]
    WeightCount {
        /// Number of tensors.
        tensors: usize,
        /// Number of weight slices.
        slices: usize,
    },
    /// Writer input: a weight slice is not the tensor's size (or not empty
    /// for an arena tensor).
    #[error("tensor {index} (`{name}`): {found} weight bytes given, {expected} expected")]
    WeightBytes {
        /// Tensor id.
        index: usize,
        /// Tensor name.
        name: String,
        /// Bytes expected (the tensor's size, 0 for arena tensors).
        expected: u64,
        /// Bytes given.
        found: u64,
    },
    /// The directory to write into does not exist.
    #[cfg(feature = "std")]
    #[error("cannot write {}: directory {} does not exist", path.display(), dir.display())]
    MissingDirectory {
        /// The file that was to be written.
        path: PathBuf,
        /// Its parent directory.
        dir: PathBuf,
    },
    /// Creating, writing, syncing or renaming the file failed.
    #[cfg(feature = "std")]
    #[error("writing {}", path.display())]
    Io {
        /// The file that was to be written.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

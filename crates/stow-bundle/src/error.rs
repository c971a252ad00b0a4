use std::path::PathBuf;
use thiserror::Error;

/// Why bytes are not a valid bundle, or why a bundle could not be written.
#[derive(Debug, Error)]
pub enum BundleError {
    /// The input ends before a structure it must hold.
    #[error("file too short: {what} needs {needed} bytes, the file has {len}")]
    TooShort {
        /// The structure.
        what: &'static str,
        /// Bytes needed.
        needed: u64,
        /// Bytes present.
        len: u64,
    },
    /// The first eight bytes are not the bundle magic.
    #[error("not a Stowage bundle (magic bytes are {found:02x?})")]
    BadMagic {
        /// What was found.
        found: [u8; 8],
    },
    /// A format version this reader does not know.
    #[error("format version {0} is not supported (this reader knows version 1)")]
    UnsupportedVersion(u32),
    /// Flag bits this reader does not know.
    #[error("unknown flags {0:#x} in the header")]
    UnknownFlags(u32),
    /// A reserved field is not zero.
    #[error("reserved bytes of {0} are not zero")]
    Reserved(&'static str),
    /// The header's file length is not the real length.
    #[error("header says the file has {header} bytes, it has {actual}")]
    LengthMismatch {
        /// From the header.
        header: u64,
        /// Real length.
        actual: u64,
    },
    /// More sections, tensors or ops than allowed.
    #[error("{what}: {count} exceeds the limit of {limit}")]
    TooMany {
        /// What is counted.
        what: &'static str,
        /// The declared count.
        count: u64,
        /// The limit.
        limit: u64,
    },
    /// A checksum does not match.
    #[error("{what} checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// What the checksum covers.
        what: &'static str,
        /// Stored value.
        stored: u32,
        /// Computed value.
        computed: u32,
    },
    /// A section kind this version does not know.
    #[error("section {index}: unknown kind {kind}")]
    UnknownSection {
        /// Index in the section table.
        index: usize,
        /// The kind.
        kind: u32,
    },
    /// A section kind appears twice.
    #[error("section `{0}` appears twice")]
    DuplicateSection(&'static str),
    /// A required section is absent.
    #[error("section `{0}` is missing")]
    MissingSection(&'static str),
    /// A section lies (partly) outside the file or over the header and table.
    #[error("section `{kind}` at {offset}+{length} lies outside bytes {start}..{end}")]
    SectionOutOfBounds {
        /// Section kind name.
        kind: &'static str,
        /// Its offset.
        offset: u64,
        /// Its length.
        length: u64,
        /// First byte sections may use.
        start: u64,
        /// File length.
        end: u64,
    },
    /// A section's offset or declared alignment is wrong.
    #[error(
        "section `{kind}` at offset {offset} with alignment {align}: needs alignment {required}"
    )]
    SectionMisaligned {
        /// Section kind name.
        kind: &'static str,
        /// Its offset.
        offset: u64,
        /// Declared alignment.
        align: u32,
        /// Alignment this kind needs.
        required: u64,
    },
    /// Sections are out of order or overlap.
    #[error("section `{later}` starts at {offset}, before `{earlier}` ends at {earlier_end}")]
    SectionsOverlap {
        /// The earlier section.
        earlier: &'static str,
        /// Where it ends.
        earlier_end: u64,
        /// The later section.
        later: &'static str,
        /// Where it starts.
        offset: u64,
    },
    /// Bytes between or after sections that are not alignment padding.
    #[error("unexpected bytes at {offset}..{end} (only zero padding shorter than the next alignment is allowed)")]
    StrayBytes {
        /// First stray byte.
        offset: u64,
        /// End of the stray range.
        end: u64,
    },
    /// A section's length does not fit what the header declares.
    #[error("section `{kind}` has {found} bytes, {expected} expected")]
    SectionSize {
        /// Section kind name.
        kind: &'static str,
        /// Expected length.
        expected: u64,
        /// Actual length.
        found: u64,
    },
    /// A record field holds an invalid value.
    #[error("tensor record {index}: {field} = {value} is invalid")]
    BadField {
        /// Record index.
        index: usize,
        /// Field name.
        field: &'static str,
        /// The value.
        value: u64,
    },
    /// A tensor's bytes lie outside its region.
    #[error(
        "tensor record {index}: bytes {offset}+{size} lie outside the {region} of {limit} bytes"
    )]
    OutOfRegion {
        /// Record index.
        index: usize,
        /// Region name.
        region: &'static str,
        /// Offset.
        offset: u64,
        /// Size.
        size: u64,
        /// Region length.
        limit: u64,
    },
    /// A tensor's size is not its element count times its element size.
    #[error("tensor record {index}: size {size} but shape {shape:?} of {dtype} needs {expected}")]
    ShapeSize {
        /// Record index.
        index: usize,
        /// Size in the record.
        size: u64,
        /// Shape.
        shape: Vec<u64>,
        /// Element type name.
        dtype: &'static str,
        /// Bytes the shape needs (saturated).
        expected: u64,
    },
    /// A name is not valid UTF-8.
    #[error("tensor record {0}: name is not UTF-8")]
    BadName(usize),
    /// The protobuf metadata does not decode.
    #[error("metadata does not decode: {0}")]
    Metadata(String),
    /// Metadata and fixed records disagree.
    #[error("metadata disagrees with the fixed records: {0}")]
    Disagree(String),
    /// An operator names a tensor that does not exist, or an input/output list does.
    #[error("{what} names tensor {id}, but there are only {count}")]
    BadTensorRef {
        /// Which list.
        what: String,
        /// The id.
        id: u32,
        /// Tensor count.
        count: usize,
    },
    /// The writer was given contents it cannot encode.
    #[error("cannot encode bundle: {0}")]
    Input(String),
    /// The output directory does not exist.
    #[error("directory {} does not exist", .0.display())]
    MissingDirectory(PathBuf),
    /// Writing the file failed.
    #[error("writing {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

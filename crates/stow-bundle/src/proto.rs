//! The metadata messages of `proto/stow_bundle.proto`, written by hand with
//! prost's derives (field for field, same tags and types) so that building
//! needs no `protoc`. A unit test reads the `.proto` file and checks every
//! message and field against these structs.
//!
//! Most callers want [`crate::Contents`] from [`crate::BundleView`]
//! instead; these are for tools that handle the raw message. Decoding one
//! validates nothing beyond protobuf syntax.

use alloc::string::String;
use alloc::vec::Vec;

/// The whole metadata section.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BundleMeta {
    /// Equals the header's `arena_bytes`.
    #[prost(uint64, tag = "1")]
    pub arena_bytes: u64,
    /// Equals the header's `arena_align`.
    #[prost(uint64, tag = "2")]
    pub arena_align: u64,
    /// Tensor id = index; one per fixed record, equal to it.
    #[prost(message, repeated, tag = "3")]
    pub tensors: Vec<TensorMeta>,
    /// Graph inputs by tensor id, in model order.
    #[prost(uint32, repeated, tag = "4")]
    pub inputs: Vec<u32>,
    /// Graph outputs by tensor id, in model order.
    #[prost(uint32, repeated, tag = "5")]
    pub outputs: Vec<u32>,
    /// Operators in execution order: step `i` runs `ops[i]`.
    #[prost(message, repeated, tag = "6")]
    pub ops: Vec<OpMeta>,
    /// Where the plan came from.
    #[prost(message, optional, tag = "7")]
    pub provenance: Option<ProvenanceMeta>,
    /// Memory pools, fastest first; equal to the POOLS section's records.
    /// Empty for a bundle with one arena.
    #[prost(message, repeated, tag = "8")]
    pub pools: Vec<PoolMeta>,
}

/// One memory pool; equals its POOLS record.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PoolMeta {
    /// Name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Bytes of the pool's buffer.
    #[prost(uint64, tag = "2")]
    pub bytes: u64,
    /// Alignment of its first byte.
    #[prost(uint64, tag = "3")]
    pub align: u64,
}

/// One tensor; every field equals the tensor's fixed record.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorMeta {
    /// Name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// 1 input, 2 output, 3 activation, 4 weight.
    #[prost(uint32, tag = "2")]
    pub kind: u32,
    /// Element type code (see `docs/FORMAT.md`).
    #[prost(uint32, tag = "3")]
    pub dtype: u32,
    /// Dimensions, row-major.
    #[prost(uint64, repeated, tag = "4")]
    pub shape: Vec<u64>,
    /// 1 arena, 2 weights.
    #[prost(uint32, tag = "5")]
    pub region: u32,
    /// Byte offset within the region.
    #[prost(uint64, tag = "6")]
    pub offset: u64,
    /// Bytes: product(shape) × element size.
    #[prost(uint64, tag = "7")]
    pub size: u64,
    /// First step that needs the bytes.
    #[prost(uint32, tag = "8")]
    pub first_step: u32,
    /// Last step that needs the bytes (inclusive).
    #[prost(uint32, tag = "9")]
    pub last_step: u32,
    /// 0 none, 1 in place, 2 view, 3 concat slice.
    #[prost(uint32, tag = "10")]
    pub alias_kind: u32,
    /// Aliased tensor id, 0xFFFFFFFF when `alias_kind` is 0.
    #[prost(uint32, tag = "11")]
    pub alias_of: u32,
    /// Pool of an arena tensor (index into `BundleMeta.pools`); 0 for
    /// weights and without pools. The record's `region` carries it too.
    #[prost(uint32, tag = "12")]
    pub pool: u32,
    /// Scale of a quantized tensor with one pair of parameters.
    #[prost(float, optional, tag = "13")]
    pub quant_scale: Option<f32>,
    /// Its zero point (present with `quant_scale`).
    #[prost(int32, optional, tag = "14")]
    pub quant_zero_point: Option<i32>,
}

/// One operator.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OpMeta {
    /// Node name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Operator type in the planned graph.
    #[prost(string, tag = "2")]
    pub op_type: String,
    /// Attributes, sorted by name.
    #[prost(message, repeated, tag = "3")]
    pub attributes: Vec<AttributeMeta>,
    /// Tensor ids read, in operand order.
    #[prost(uint32, repeated, tag = "4")]
    pub inputs: Vec<u32>,
    /// Tensor ids written, in output order.
    #[prost(uint32, repeated, tag = "5")]
    pub outputs: Vec<u32>,
}

/// One attribute: `kind` says which value field is meant.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeMeta {
    /// Attribute name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// 1 int, 2 ints, 3 float, 4 floats, 5 text.
    #[prost(uint32, tag = "2")]
    pub kind: u32,
    /// Kind 1 (exactly one value) or 2.
    #[prost(int64, repeated, tag = "3")]
    pub ints: Vec<i64>,
    /// Kind 3 (exactly one value) or 4.
    #[prost(float, repeated, tag = "4")]
    pub floats: Vec<f32>,
    /// Kind 5.
    #[prost(string, tag = "5")]
    pub text: String,
}

/// Planning provenance.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProvenanceMeta {
    /// Strategy name.
    #[prost(string, tag = "1")]
    pub strategy: String,
    /// Lower bound on the arena, in bytes.
    #[prost(uint64, tag = "2")]
    pub lower_bound_bytes: u64,
    /// Arena without reuse, in bytes.
    #[prost(uint64, tag = "3")]
    pub naive_bytes: u64,
    /// Planning time in microseconds.
    #[prost(uint64, tag = "4")]
    pub plan_micros: u64,
    /// True when the arena is proven minimal.
    #[prost(bool, tag = "5")]
    pub optimal: bool,
    /// Tool and version that wrote the bundle.
    #[prost(string, tag = "6")]
    pub producer: String,
    /// File name of the source model.
    #[prost(string, tag = "7")]
    pub source_model: String,
}

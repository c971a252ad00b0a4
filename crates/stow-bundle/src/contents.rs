//! The in-memory description of a bundle: what the writer takes and what the
//! reader gives back (owned form).

use alloc::string::{String, ToString};
use alloc::vec::Vec;

/// Element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum DType {
    /// 32-bit float.
    F32 = 1,
    /// 16-bit float.
    F16 = 2,
    /// 64-bit float.
    F64 = 3,
    /// Signed 8-bit integer.
    I8 = 4,
    /// Signed 16-bit integer.
    I16 = 5,
    /// Signed 32-bit integer.
    I32 = 6,
    /// Signed 64-bit integer.
    I64 = 7,
    /// Unsigned 8-bit integer.
    U8 = 8,
    /// Unsigned 16-bit integer.
    U16 = 9,
    /// Unsigned 32-bit integer.
    U32 = 10,
    /// Unsigned 64-bit integer.
    U64 = 11,
    /// Boolean, one byte each.
    Bool = 12,
}

/// What role a tensor plays in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum TensorKind {
    /// A graph input, written by the caller before step 0.
    Input = 1,
    /// A graph output, live until the last step.
    Output = 2,
    /// An intermediate value.
    Activation = 3,
    /// A constant stored in the weight section.
    Weight = 4,
}

/// Where a tensor's bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Region {
    /// In the activation arena, at a planned offset.
    Arena = 1,
    /// In the bundle's weight section.
    Weights = 2,
    /// Nowhere: a graph input the caller writes in bands of rows (its
    /// second-to-last axis) into the arena tensors that name it with
    /// [`AliasKind::InputRows`]. Each band's bytes are free after its last
    /// reader, so the input does not hold the arena whole until its last
    /// reader runs. Offset 0, pool 0; `size` is the whole input's bytes.
    Rows = 3,
}

/// How a tensor shares bytes with another one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum AliasKind {
    /// Written by an element-wise op over its dead input.
    InPlace = 1,
    /// The same bytes as another tensor with a new shape.
    View = 2,
    /// A contiguous slice of a concat's output, written by its producer.
    ConcatSlice = 3,
    /// Written by a depthwise convolution over its dead input, one output
    /// plane at a time through a one-plane temporary; starts where the
    /// input starts and is no larger.
    DepthwiseInPlace = 4,
    /// The next rows (second-to-last axis) of a graph input in region
    /// [`Region::Rows`], after those of the tensors before it (by id) that
    /// alias the same input; written by the caller with the input. Shares
    /// no bytes: the alias says where the tensor's values come from.
    InputRows = 5,
}

/// One tensor of the model.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// ONNX value name where one exists, otherwise the producing node's name.
    pub name: String,
    /// Role in the model.
    pub kind: TensorKind,
    /// Element type.
    pub dtype: DType,
    /// Dimensions (row-major, contiguous).
    pub shape: Vec<u64>,
    /// Where the bytes live.
    pub region: Region,
    /// Byte offset inside the region.
    pub offset: u64,
    /// Byte length (elements × element size).
    pub size: u64,
    /// First step that needs the bytes (the producing step; 0 for inputs).
    pub first_step: u32,
    /// Last step that needs the bytes (inclusive).
    pub last_step: u32,
    /// The tensor this one shares bytes with, and how.
    pub alias_of: Option<(AliasKind, u32)>,
    /// Index in [`Contents::pools`] of the pool holding an arena tensor;
    /// 0 for weights and in bundles with one arena.
    pub pool: u32,
    /// The scale and zero point of a quantized (u8, i8) tensor, where the
    /// model gives one pair for the whole tensor. Recorded in the metadata
    /// only, for tools (`stow inspect`); no kernel reads it.
    pub quant: Option<Quantization>,
}

/// A quantized tensor's parameters: its values are `(q − zero_point) ·
/// scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quantization {
    /// The scale.
    pub scale: f32,
    /// The zero point, in the tensor's element type's range.
    pub zero_point: i32,
}

/// One memory pool of a bundle whose arena is split across memories
/// (fastest first). Offsets of the pool's tensors start at its first byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPool {
    /// Name (`sram`, `dram`, …): 1 to 16 bytes of UTF-8 without NUL,
    /// unique in the bundle.
    pub name: String,
    /// Bytes of the pool's buffer.
    pub bytes: u64,
    /// Alignment its first byte needs (a power of two).
    pub align: u64,
}

/// A typed operator attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// One integer.
    Int(i64),
    /// Integers.
    Ints(Vec<i64>),
    /// One float.
    Float(f32),
    /// Floats.
    Floats(Vec<f32>),
    /// Text.
    Text(String),
}

/// One operator of the execution order.
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    /// Node name (tract's name for the node in the planned graph).
    pub name: String,
    /// Operator type (tract's op name, e.g. `Conv`, `EinSum`, `Add`).
    pub op_type: String,
    /// Attributes by name, sorted by name.
    pub attributes: Vec<(String, AttrValue)>,
    /// Tensor ids read, in operand order.
    pub inputs: Vec<u32>,
    /// Tensor ids written, in output order.
    pub outputs: Vec<u32>,
}

/// Where the plan came from.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Provenance {
    /// Strategy name.
    pub strategy: String,
    /// Lower bound on the arena, in bytes.
    pub lower_bound_bytes: u64,
    /// Arena without any reuse, in bytes.
    pub naive_bytes: u64,
    /// Planning time in microseconds.
    pub plan_micros: u64,
    /// True when the arena is proven minimal.
    pub optimal: bool,
    /// Tool name and version that wrote the bundle.
    pub producer: String,
    /// File name of the source model.
    pub source_model: String,
}

/// Everything a bundle holds.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Contents {
    /// Activation arena size in bytes.
    pub arena_bytes: u64,
    /// Alignment the arena base must have, in bytes (a power of two).
    pub arena_align: u64,
    /// Tensors; a tensor's id is its index.
    pub tensors: Vec<Tensor>,
    /// Graph inputs, by tensor id, in model order.
    pub inputs: Vec<u32>,
    /// Graph outputs, by tensor id, in model order.
    pub outputs: Vec<u32>,
    /// Operators in execution order; step `i` runs `ops[i]`.
    pub ops: Vec<Op>,
    /// Provenance of the plan.
    pub provenance: Provenance,
    /// The memory pools, fastest first, when the arena is split across
    /// several memories; pool 0 is then the arena (`arena_bytes`,
    /// `arena_align`). Empty for a bundle with one arena, which is one
    /// pool.
    pub pools: Vec<MemoryPool>,
}

impl Contents {
    /// Size and alignment of every pool: [`Contents::pools`], or the one
    /// arena when the list is empty.
    pub fn pool_sizes(&self) -> Vec<(u64, u64)> {
        if self.pools.is_empty() {
            alloc::vec![(self.arena_bytes, self.arena_align)]
        } else {
            self.pools.iter().map(|p| (p.bytes, p.align)).collect()
        }
    }

    /// Number of pools (1 for a bundle with one arena).
    pub fn pool_count(&self) -> usize {
        self.pools.len().max(1)
    }

    /// The operator that reads weight `tensor` stored packed (its input 1,
    /// with [`PACKED_ATTR`](crate::format::PACKED_ATTR) or
    /// [`PACKED_LEFT_ATTR`](crate::format::PACKED_LEFT_ATTR)) and its depth
    /// block, or `None` for a weight stored row-major.
    pub fn packed_reader(&self, tensor: u32) -> Option<(&Op, i64)> {
        use crate::format::{PACKED_ATTR, PACKED_LEFT_ATTR};
        self.ops.iter().find_map(|op| {
            let kc = op.attributes.iter().find_map(|(name, a)| match a {
                AttrValue::Int(kc) if name == PACKED_ATTR || name == PACKED_LEFT_ATTR => Some(*kc),
                _ => None,
            })?;
            (op.inputs.get(1) == Some(&tensor)).then_some((op, kc))
        })
    }

    /// The header flags these contents need: [`FLAG_POOLS`] with pools,
    /// [`FLAG_PACKED`] when an operator carries [`PACKED_ATTR`] (and
    /// [`FLAG_PACKED_INT8`] too when one such operator's weight is u8 or
    /// i8), [`FLAG_PACKED_LEFT`] when one carries [`PACKED_LEFT_ATTR`],
    /// [`FLAG_INPUT_ROWS`] when an input is written in bands of rows.
    ///
    /// [`FLAG_INPUT_ROWS`]: crate::format::FLAG_INPUT_ROWS
    /// [`FLAG_POOLS`]: crate::format::FLAG_POOLS
    /// [`FLAG_PACKED`]: crate::format::FLAG_PACKED
    /// [`FLAG_PACKED_LEFT`]: crate::format::FLAG_PACKED_LEFT
    /// [`FLAG_PACKED_INT8`]: crate::format::FLAG_PACKED_INT8
    /// [`PACKED_ATTR`]: crate::format::PACKED_ATTR
    /// [`PACKED_LEFT_ATTR`]: crate::format::PACKED_LEFT_ATTR
    pub fn flags(&self) -> u32 {
        use crate::format::{
            FLAG_PACKED, FLAG_PACKED_INT8, FLAG_PACKED_LEFT, FLAG_POOLS, PACKED_ATTR,
            PACKED_LEFT_ATTR,
        };
        let pools = if self.pools.is_empty() { 0 } else { FLAG_POOLS };
        let carrying = |attr: &'static str| {
            self.ops
                .iter()
                .filter(move |op| op.attributes.iter().any(|(name, _)| name == attr))
        };
        let mut flags = pools;
        if self.tensors.iter().any(|t| t.region == Region::Rows) {
            flags |= crate::format::FLAG_INPUT_ROWS;
        }
        if carrying(PACKED_ATTR).next().is_some() {
            flags |= FLAG_PACKED;
        }
        if carrying(PACKED_LEFT_ATTR).next().is_some() {
            flags |= FLAG_PACKED_LEFT;
        }
        let int8 = |id: &u32| {
            self.tensors
                .get(*id as usize)
                .is_some_and(|t| matches!(t.dtype, DType::U8 | DType::I8))
        };
        if carrying(PACKED_ATTR).any(|op| op.inputs.get(1).is_some_and(int8)) {
            flags |= FLAG_PACKED_INT8;
        }
        flags
    }
}

impl DType {
    /// Every element type.
    pub const ALL: [DType; 12] = [
        DType::F32,
        DType::F16,
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
    ];

    /// Bytes per element.
    pub fn size_bytes(self) -> u64 {
        match self {
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::F16 | DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// Lower-case name (`f32`, `i64`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::Bool => "bool",
        }
    }

    /// The type with this file code.
    pub fn from_code(code: u32) -> Option<DType> {
        DType::ALL.into_iter().find(|d| *d as u32 == code)
    }

    /// The type with this name.
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }
}

impl TensorKind {
    /// The kind with this file code.
    pub fn from_code(code: u32) -> Option<TensorKind> {
        [
            TensorKind::Input,
            TensorKind::Output,
            TensorKind::Activation,
            TensorKind::Weight,
        ]
        .into_iter()
        .find(|k| *k as u32 == code)
    }
}

impl Region {
    /// The region with this file code.
    pub fn from_code(code: u32) -> Option<Region> {
        [Region::Arena, Region::Weights, Region::Rows]
            .into_iter()
            .find(|r| *r as u32 == code)
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Region::Arena => "arena",
            Region::Weights => "weights",
            Region::Rows => "rows",
        }
    }
}

impl AliasKind {
    /// The alias kind with this file code (0 is "none" and not a kind).
    pub fn from_code(code: u32) -> Option<AliasKind> {
        [
            AliasKind::InPlace,
            AliasKind::View,
            AliasKind::ConcatSlice,
            AliasKind::DepthwiseInPlace,
            AliasKind::InputRows,
        ]
        .into_iter()
        .find(|k| *k as u32 == code)
    }
}

impl Tensor {
    /// Bytes the shape and element type need, or `None` on overflow.
    pub fn shape_bytes(&self) -> Option<u64> {
        self.shape
            .iter()
            .try_fold(self.dtype.size_bytes(), |acc, &d| acc.checked_mul(d))
    }
}

impl TensorKind {
    /// Lower-case name (`input`, `output`, `activation`, `weight`).
    pub fn name(self) -> &'static str {
        match self {
            TensorKind::Input => "input",
            TensorKind::Output => "output",
            TensorKind::Activation => "activation",
            TensorKind::Weight => "weight",
        }
    }
}

impl AliasKind {
    /// True for the kinds whose tensor lies in another's bytes; false for
    /// [`AliasKind::InputRows`], a band with bytes of its own.
    pub fn shares_bytes(self) -> bool {
        self != AliasKind::InputRows
    }

    /// Lower-case name (`in-place`, `view`, `concat-slice`,
    /// `depthwise-in-place`, `input-rows`).
    pub fn name(self) -> &'static str {
        match self {
            AliasKind::InPlace => "in-place",
            AliasKind::View => "view",
            AliasKind::ConcatSlice => "concat-slice",
            AliasKind::DepthwiseInPlace => "depthwise-in-place",
            AliasKind::InputRows => "input-rows",
        }
    }
}

impl core::fmt::Display for DType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// A string that is not the name of a [`DType`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown element type `{0}` (expected one of f32, f16, f64, i8, i16, i32, i64, u8, u16, u32, u64, bool)")]
pub struct ParseDTypeError(pub String);

impl core::str::FromStr for DType {
    type Err = ParseDTypeError;

    /// Parses the lower-case name (`f32`, `i64`, `bool`, ...).
    fn from_str(s: &str) -> Result<DType, ParseDTypeError> {
        DType::from_name(s).ok_or_else(|| ParseDTypeError(s.to_string()))
    }
}

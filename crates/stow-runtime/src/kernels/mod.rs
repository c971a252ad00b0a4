//! CPU kernels that run a bundle's operators inside its arena, and the
//! setup that turns each operator's recorded attributes and tensor shapes
//! into a prepared [`Kernel`].
//!
//! Setup ([`prepare`]) does all the work that allocates or can fail on
//! the bundle's contents: it reads attributes, checks element types and
//! shapes, merges dimensions, and sizes the scratch each kernel needs.
//! Running a prepared kernel ([`run_part`]) allocates nothing.

// Operands are read through `Load` (a weight slice or arena cells), which
// is indexed, not iterated: index loops are the natural form here.
#![allow(clippy::needless_range_loop)]

mod arith;
pub mod cells;
pub mod contract;
mod depthwise;
pub mod depthwise_inplace;
#[cfg(target_arch = "x86_64")]
mod depthwise_lanes;
mod direct;
pub mod elementwise;
#[cfg(target_arch = "x86_64")]
mod finish16;
pub mod float;
pub mod fourier;
mod fuse;
pub mod gemm;
mod gemv;
pub mod indexing;
pub mod layout;
pub mod linalg;
pub mod movement;
pub mod nn;
pub mod pool;
pub mod qlinear;
pub mod qpointwise;
pub mod quant;
pub mod recurrent;
pub mod sample;
#[cfg(target_arch = "x86_64")]
mod stem;
#[cfg(target_arch = "x86_64")]
mod transpose16;

pub mod prepacked;
mod prepare;
#[cfg(test)]
mod product_tests;
#[cfg(test)]
mod residual_tests;
mod run;
#[cfg(test)]
mod split_tests;
#[cfg(test)]
mod testing;

pub(crate) use fuse::{
    fuse_activations, fuse_clamps, fuse_dequantized, fuse_nan_selects, fuse_residuals,
};
pub use prepare::{
    marked_panels, operand, packable, packed_attr, planned_scratch_threads, prepare,
    scratch_floats, IN_PLACE_ATTR, SCRATCH_ATTR, SCRATCH_BUDGET_ATTR,
};
pub use run::{run_part, splits, Failure, Views, MAX_POOLS};

use alloc::vec::Vec;
use elementwise::Unary;
use layout::Walk;
use linalg::ConvShape;
use nn::{AroundAxis, Reducer};
use pool::{Pool, Window};
use stow_bundle::DType;

/// Operator types (tract's names, as bundles record them) besides the
/// unary functions ([`Unary::from_name`]) whose kernels take f16
/// operands: casts, float tests, and the operators that only move
/// elements (raw bits of any width) or, for `EinSum`, loop in f64.
/// Scatters with a reduction other than `none` are refused on f16.
const F16_OPS: &[&str] = &[
    "Cast",
    "IsNan",
    "IsInf",
    "Iff",
    "AddAxis",
    "RmAxis",
    "Reshape",
    "IntoShape",
    "Identity",
    "MoveAxis",
    "Slice",
    "MultiBroadcastTo",
    "Downsample",
    "NearestUpsample",
    "Tile",
    "Pad",
    "Concat",
    "TypedConcat",
    "Gather",
    "GatherElements",
    "GatherNd",
    "ScatterElements",
    "ScatterNd",
    "Onehot",
    "Trilu",
    "EinSum",
    "Fft",
    "QuantizeLinear",
];

/// True when the runtime has a kernel for `op_type` (tract's name, as
/// bundles record it) on f16 operands. The one list of them: setup
/// refuses f16 operands of any other operator, and `stow compile` runs
/// every other f16 operator in f32 between casts (stow-onnx's widening
/// pass), so the two cannot disagree.
pub fn has_f16_kernel(op_type: &str) -> bool {
    Unary::from_name(op_type).is_some() || F16_OPS.contains(&op_type)
}

/// Where an operand's bytes are.
#[derive(Clone, Copy, Debug)]
pub enum Loc<'b> {
    /// A weight in the mapping.
    Weight(&'b [u8]),
    /// An arena tensor at this byte offset.
    Arena(usize),
}

/// One operand of a step.
#[derive(Clone, Debug)]
pub struct Operand<'b> {
    /// Tensor id.
    pub id: u32,
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<usize>,
    /// Elements.
    pub len: usize,
    /// Bytes.
    pub loc: Loc<'b>,
}

/// A binary operation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BinOp {
    /// +
    Add,
    /// −
    Sub,
    /// ×
    Mul,
    /// ÷
    Div,
    /// x^y
    Pow,
    /// max
    Max,
    /// min
    Min,
    /// ==
    Eq,
    /// !=
    Ne,
    /// <
    Lt,
    /// >
    Gt,
    /// <=
    Le,
    /// >=
    Ge,
    /// logical and
    And,
    /// logical or
    Or,
    /// logical xor
    Xor,
    /// remainder of the division truncated toward zero (C's `fmod`)
    Rem,
    /// bits shifted toward the high end
    ShiftLeft,
    /// bits shifted toward the low end (arithmetic for signed types)
    ShiftRight,
    /// bitwise and
    BitAnd,
    /// bitwise or
    BitOr,
    /// bitwise xor
    BitXor,
}

impl BinOp {
    fn from_name(name: &str) -> Option<BinOp> {
        use BinOp::*;
        Some(match name {
            "Add" => Add,
            "Sub" => Sub,
            "Mul" => Mul,
            "Div" => Div,
            "Pow" => Pow,
            "Max" => Max,
            "Min" => Min,
            "Eq" => Eq,
            "NE" => Ne,
            "LT" => Lt,
            "GT" => Gt,
            "LTE" => Le,
            "GTE" => Ge,
            "And" => And,
            "Or" => Or,
            "Xor" => Xor,
            "Rem" => Rem,
            "ShiftLeft" => ShiftLeft,
            "ShiftRight" => ShiftRight,
            "BitAnd" => BitAnd,
            "BitOr" => BitOr,
            "BitXor" => BitXor,
            _ => return None,
        })
    }

    fn compares(self) -> bool {
        use BinOp::*;
        matches!(self, Eq | Ne | Lt | Gt | Le | Ge)
    }

    /// The comparison's result as a bool byte (for a comparing op).
    #[inline(always)]
    fn compare<T: PartialOrd>(self, a: T, c: T) -> u8 {
        use BinOp::*;
        (match self {
            Eq => a == c,
            Ne => a != c,
            Lt => a < c,
            Gt => a > c,
            Le => a <= c,
            _ => a >= c,
        }) as u8
    }

    fn logical(self) -> bool {
        matches!(self, BinOp::And | BinOp::Or | BinOp::Xor)
    }

    /// Operations on the bits of integers.
    fn bitwise(self) -> bool {
        use BinOp::*;
        matches!(self, ShiftLeft | ShiftRight | BitAnd | BitOr | BitXor)
    }
}

/// A product of the EinSum forms that are (batched) matrix products.
#[derive(Clone, Debug)]
pub struct MatMul {
    /// Batch walk, operands (output, a, b).
    pub batch: Walk<3>,
    /// Rows, columns, depth.
    pub mnk: [usize; 3],
    /// A's strides along m and k.
    pub a: [usize; 2],
    /// B's strides along k and n.
    pub b: [usize; 2],
    /// C's strides along m and n.
    pub c: [usize; 2],
    /// The weight stored in panels: B (`stow.packed`), or A of a swapped
    /// product (`stow.packed_left`).
    pub packed: Option<prepacked::Panels>,
    /// A is the second input and B the first: the product is computed
    /// transposed, `Cᵀ = Bᵀ·Aᵀ`, so that the output's contiguous axis is
    /// the product's columns (a 1×1 convolution written as a product of
    /// the image by the weight then runs as the weight times the image).
    pub swapped: bool,
    /// An activation merged into the product at setup (`fuse`).
    pub finish: gemm::Finish,
    /// A residual `Add` merged into the product at setup: the step's last
    /// input is added to each complete sum before the finish.
    pub residual: bool,
}

impl MatMul {
    /// True when no two batch positions write the same outputs: positions
    /// that walk a depth axis (output stride 0) add into one C, whose sums
    /// only the last of them completes.
    pub fn writes_apart(&self) -> bool {
        let walk = &self.batch;
        walk.dims
            .iter()
            .zip(&walk.strides)
            .all(|(&d, s)| d <= 1 || s[0] != 0)
    }
}

/// A prepared operator.
#[derive(Clone, Debug)]
pub enum Kernel {
    /// The plan already put the output where it belongs (a view, or a
    /// concat whose inputs were written into their slices).
    Nothing,
    /// Element-wise unary f32 function.
    Unary(Unary),
    /// `Max` with `lo` and `Min` with `hi` of an f32 tensor in one pass
    /// (two steps merged at setup), in the steps' order.
    Clamp(gemm::Clamp),
    /// Binary op with broadcasting.
    Binary(BinOp, Walk<3>),
    /// `cond ? a : b` with broadcasting.
    Select(Walk<4>),
    /// Element type conversion.
    Cast,
    /// float → bool: is the value NaN.
    IsNan,
    /// f32 → f32: NaN replaced by this constant, other values kept (an
    /// `IsNan` and the `Iff` that reads it, merged at setup).
    NanTo(f32),
    /// float → bool: is the value +∞ (first flag) or −∞ (second).
    IsInf(bool, bool),
    /// bool → bool: logical not.
    Not,
    /// Integer → same integer: every bit flipped.
    BitNot,
    /// f32 → (u8, scale, zero point): ONNX DynamicQuantizeLinear.
    DynamicQuantizeU8,
    /// f32, f16 or i32 → u8, i8, u16 or i16: ONNX QuantizeLinear (inputs
    /// x, scale, zero point).
    Quantize(quant::PerAxis),
    /// u8, i8, u16, i16 or i32 → f32: ONNX DequantizeLinear.
    Dequantize(quant::PerAxis),
    /// x^e for a constant e.
    PowConst(f32),
    /// Copies from input 0 through a walk (destination, source) with base
    /// offsets; `fill` first writes a constant (pad) over the output.
    Copy {
        /// The walk.
        walk: Walk<2>,
        /// Base offsets (destination, source).
        base: [usize; 2],
        /// Pad value written over the output before the copy.
        fill: Option<f64>,
    },
    /// Concat: each listed input copied through its walk.
    Concat(Vec<(usize, Walk<2>, [usize; 2])>),
    /// Gather along an axis.
    Gather {
        /// Product of the dimensions before the axis.
        outer: usize,
        /// The axis' dimension.
        axis: usize,
        /// Product of the dimensions after it.
        inner: usize,
    },
    /// Softmax or log-softmax.
    Softmax(AroundAxis, bool),
    /// RMS normalisation.
    RmsNorm(AroundAxis, f32),
    /// Layer normalisation of rows of `n` values with ε, then the scale
    /// and bias when the step has them (inputs 1 and 2).
    LayerNorm(usize, f32),
    /// Reduction.
    Reduce(Reducer, Walk<2>, usize),
    /// Pooling. Max pooling takes any number type and may also write,
    /// as output 1, where each maximum is within its input plane
    /// (row-major, i64).
    Pool(Pool, Window),
    /// MaxPool's indices from within their plane to ONNX's: over the
    /// whole input, column-major within the plane for `storage_order = 1`.
    MaxPoolIndices {
        /// Spatial dimensions of the pooled input.
        spatial: Vec<usize>,
        /// Indices per plane (the pooled output's spatial size).
        per_plane: usize,
        /// `storage_order = 1`.
        column_major: bool,
    },
    /// Convolution; its kernel weight in panels when packed at compile
    /// time (`stow.packed`), an activation merged into it at setup, and
    /// whether a residual `Add` was merged too (`true`: the step's last
    /// input is added to each complete sum before the activation).
    Conv(ConvShape, Option<prepacked::Panels>, gemm::Finish, bool),
    /// Depthwise convolution writing over its own input
    /// ([`depthwise_inplace`]): the output starts where the input does;
    /// an activation merged into it at setup.
    DepthwiseInPlace(ConvShape, gemm::Finish),
    /// Transposed convolution.
    Deconv(ConvShape),
    /// `x < 0 ? alpha·x : x`.
    LeakyRelu(f32),
    /// Pad by reflection (`true`) or by repeating the edge.
    PadEdges {
        /// Reflect rather than repeat.
        reflect: bool,
        /// Padding before each axis.
        before: Vec<usize>,
    },
    /// Linear or nearest resampling.
    Resize(Vec<nn::ResizeAxis>),
    /// Repeats of the input at these output offsets (destination, source).
    Tile(Walk<2>, Vec<[usize; 2]>),
    /// Matrix product.
    MatMul(MatMul),
    /// Any other Einstein summation, by a plain loop.
    Contraction(contract::Contraction),
    /// Lower (`upper` false) or upper triangle of the last two axes; the
    /// diagonal offset `k` is read from input 1 at run time.
    Trilu {
        /// Keep the upper triangle.
        upper: bool,
        /// Rows and columns of each matrix.
        rows: usize,
        /// Columns.
        cols: usize,
    },
    /// Elements picked along an axis by an index tensor of the output's
    /// shape (ONNX GatherElements).
    GatherElements {
        /// Input strides.
        data_strides: Vec<usize>,
        /// Output (and index) shape.
        shape: Vec<usize>,
        /// The axis.
        axis: usize,
        /// Its size in the input.
        size: usize,
    },
    /// Position of the largest (`max`) or smallest value along an axis,
    /// the last one among equals when `last`.
    ArgExtreme {
        /// Largest rather than smallest.
        max: bool,
        /// The last position among equal values rather than the first.
        last: bool,
        /// Dimensions before, along and after the axis.
        at: AroundAxis,
    },
    /// An LSTM step's gates, for this hidden size.
    LstmEpilogue(usize),
    /// A GRU step's gates, for this hidden size.
    GruEpilogue(usize),
    /// An image read at a grid's coordinates.
    GridSample(sample::GridSample),
    /// Local response normalisation across channels.
    Lrn(sample::Lrn),
    /// The discrete Fourier transform along one axis.
    Fourier(fourier::Fourier),
    /// ONNX OneHot (tract's `Onehot`).
    OneHot(indexing::OneHot),
    /// ONNX ScatterElements.
    ScatterElements(indexing::ScatterElements),
    /// ONNX ScatterND.
    ScatterNd(indexing::ScatterNd),
    /// ONNX GatherND.
    GatherNd(indexing::GatherNd),
    /// Quantized product (`EinSum` with `q_params`): u8/i8 operands, i32
    /// accumulation, requantised output.
    QProduct(qlinear::QProduct),
    /// Quantized convolution (`Conv` with `q_params`).
    QConv(qlinear::QConv),
    /// Quantized element-wise addition or multiplication with rescale.
    QBinary(qpointwise::QBinary),
    /// Quantized global average pool with rescale.
    QGlobalPool(qpointwise::QGlobalPool),
    /// A 256-entry table of a quantized activation.
    QLookup,
}

/// A prepared step: the kernel, its operands and its scratch size.
#[derive(Clone, Debug)]
pub struct Step<'b> {
    /// The kernel.
    pub kernel: Kernel,
    /// Inputs in operand order.
    pub inputs: Vec<Operand<'b>>,
    /// Outputs.
    pub outputs: Vec<Operand<'b>>,
    /// Scratch floats the kernel needs per thread.
    pub scratch: usize,
    /// Scratch planned in the arena: byte offset of thread 0's share and
    /// the number of threads' shares there.
    pub planned: Option<(usize, usize)>,
}

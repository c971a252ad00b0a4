//! What to compile with: [`CompileOptions`] and its defaults.

use crate::pools::{Pin, Placement, PoolSpec};
use stow_onnx::{FixedInput, InputShape, PatchedStage, ReuseOptions};
use stow_plan::PlanOptions;

/// Default of [`CompileOptions::max_arena`], 16 GiB: large enough for any
/// model that fits a device, small enough that a hostile model cannot make
/// the compiler plan (or a checker allocate) absurd sizes.
pub const DEFAULT_MAX_ARENA: u64 = 16 << 30;

/// Default of [`CompileOptions::align`]: every arena offset is a multiple
/// of 64 bytes (a cache line, and the widest vector load the kernels use).
pub const DEFAULT_ALIGN: u64 = 64;

/// Default of [`CompileOptions::threads`]: kernel scratch for one thread.
pub const DEFAULT_THREADS: u32 = 1;

/// How to compile a model. Plain data: build it with
/// `CompileOptions { field: value, ..Default::default() }`.
///
/// The defaults are those of `stow compile` without flags.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// Shapes that replace the model's own for the named inputs (`stow
    /// compile --input NAME=1x3x224x224`). A name the model does not have
    /// is an error. Default: none (the model's shapes).
    pub inputs: Vec<InputShape>,
    /// Values of symbolic dimensions by symbol name (`--dim N=1`). A
    /// symbol no input uses is an error. Default: none.
    pub dims: Vec<(String, i64)>,
    /// Graph inputs made constants (`--set NAME=VALUE`, `--set-npz`): they
    /// fold into the model and are not inputs of the bundle. Default: none.
    pub constants: Vec<FixedInput>,
    /// Which byte sharing beyond lifetimes the frontend applies (in-place
    /// element-wise ops, zero-copy views, in-place concats, reuse of graph
    /// inputs, concurrent branches). Default: [`ReuseOptions::default`]
    /// (in place, views, concat slices and depthwise in place on; inputs kept; sequential).
    pub reuse: ReuseOptions,
    /// How to plan the arena: strategy, time limit and capacity. Default:
    /// [`PlanOptions::default`] (`auto`, 1 second, no capacity).
    pub plan: PlanOptions,
    /// Alignment of every arena offset in bytes; a power of two. Default
    /// [`DEFAULT_ALIGN`] (64).
    pub align: u64,
    /// Plan the Stowage runtime's kernel scratch (the packing buffers of
    /// convolutions and matrix products) into the arena for this many
    /// threads; 0 plans none, so the arena holds only the model's tensors
    /// (for runtimes with kernels of their own). Default
    /// [`DEFAULT_THREADS`] (1).
    pub threads: u32,
    /// Store each convolution's and matrix product's weight in the panel
    /// layout the Stowage runtime's kernel reads (docs/FORMAT.md, "Packed
    /// weights"), so no run packs it again. Applies only with kernel
    /// scratch (`threads` ≥ 1): a bundle for runtimes with kernels of
    /// their own keeps row-major weights. Default: true.
    pub pack_weights: bool,
    /// Refuse any arena tensor, and any planned arena, larger than this
    /// many bytes. Default [`DEFAULT_MAX_ARENA`] (16 GiB).
    pub max_arena: u64,
    /// Also run every strategy on the model's problem and report each
    /// one's arena and time in [`Report::comparison`](crate::Report::comparison)
    /// (the bundle still uses [`CompileOptions::plan`]). Default: false.
    pub compare: bool,
    /// Memories to split the arena across, fastest first (`--pool
    /// NAME=BYTES`, repeatable; the last may be unbounded). Empty: one
    /// arena, and the bundle is one that readers without pools open.
    /// Default: none.
    pub pools: Vec<PoolSpec>,
    /// Tensors or operators that must live in a named pool (`--pin
    /// NAME=POOL`). Default: none.
    pub pins: Vec<Pin>,
    /// Which buffers the bounded pools take first. Default
    /// [`Placement::Gain`].
    pub placement: Placement,
    /// Stages run in bands of rows (patch-based execution, `--patch
    /// FROM:TO:ROWS`), applied in order. With a capacity
    /// ([`PlanOptions::capacity`]) and none given, the compiler chooses
    /// one when the model's tensors do not fit otherwise. Default: none.
    pub stages: Vec<PatchedStage>,
    /// The most multiply-adds a stage chosen for the capacity may add, as
    /// a fraction of the model's own (`--max-extra-macs PERCENT`): a stage
    /// that runs through a reduction of the rows (a squeeze-and-excitation
    /// block) computes the operators before it twice. Default
    /// [`DEFAULT_MAX_EXTRA_MACS`].
    pub max_extra_macs: f64,
}

/// Default [`CompileOptions::max_extra_macs`]: 15 %.
pub const DEFAULT_MAX_EXTRA_MACS: f64 = 0.15;

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            inputs: Vec::new(),
            dims: Vec::new(),
            constants: Vec::new(),
            reuse: ReuseOptions::default(),
            plan: PlanOptions::default(),
            align: DEFAULT_ALIGN,
            pack_weights: true,
            threads: DEFAULT_THREADS,
            max_arena: DEFAULT_MAX_ARENA,
            compare: false,
            pools: Vec::new(),
            pins: Vec::new(),
            placement: Placement::Gain,
            stages: Vec::new(),
            max_extra_macs: DEFAULT_MAX_EXTRA_MACS,
        }
    }
}

//! The drawing model every picture shares, built once from bundle contents.
//!
//! Steps are execution steps: step `s` runs `ops[s]`. A tensor occupies the
//! half-open byte range `[offset, offset + size)` of the arena from its
//! `first` to its `last` step, both inclusive. Weights are not in the arena
//! and are left out.

use super::text::human_bytes;
use stow_bundle::{AliasKind, Contents, DType, Op, Region, Tensor, TensorKind};

/// Family of the op that writes a tensor; pictures colour tensors by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// A graph input, written by the caller before step 0.
    Input,
    /// Convolutions.
    Conv,
    /// Matrix products (`EinSum`, `MatMul`, `Gemm`).
    MatMul,
    /// Element-wise arithmetic, activations, comparisons, casts.
    Elementwise,
    /// Reductions and normalisations (`Reduce<Sum>`, `Softmax`, `RmsNorm`).
    Reduce,
    /// Pooling.
    Pool,
    /// Data movement: reshapes, transposes, slices, gathers, concats.
    Shape,
    /// Anything else.
    Other,
}

impl OpKind {
    /// Every kind, in legend order.
    pub const ALL: [OpKind; 8] = [
        OpKind::Input,
        OpKind::Conv,
        OpKind::MatMul,
        OpKind::Elementwise,
        OpKind::Reduce,
        OpKind::Pool,
        OpKind::Shape,
        OpKind::Other,
    ];

    /// The kind of an op type as tract names it (`Conv`, `EinSum`, `Max`,
    /// `Reduce<Sum>`, `RmAxis`, ...); unknown names are [`OpKind::Other`].
    pub fn of(op_type: &str) -> OpKind {
        let t = op_type.to_ascii_lowercase();
        // Family words first: tract decorates names (`Reduce<Sum>`,
        // `OptMatMulPack`), so substrings catch more than exact names.
        if t.contains("conv") {
            return OpKind::Conv;
        }
        if t.contains("einsum") || t.contains("matmul") || t.contains("gemm") {
            return OpKind::MatMul;
        }
        if t.contains("pool") {
            return OpKind::Pool;
        }
        if t.contains("reduce") || t.contains("norm") || t.contains("softmax") || t == "lrn" {
            return OpKind::Reduce;
        }
        const SHAPE: &[&str] = &[
            "reshape",
            "rmaxis",
            "addaxis",
            "moveaxis",
            "axisop",
            "transpose",
            "concat",
            "typedconcat",
            "slice",
            "gather",
            "gatherelements",
            "gathernd",
            "scatter",
            "scatterelements",
            "scatternd",
            "downsample",
            "pad",
            "tile",
            "expand",
            "multibroadcastto",
            "squeeze",
            "unsqueeze",
            "flatten",
            "split",
            "identity",
            "resize",
            "depthtospace",
            "spacetodepth",
        ];
        const ELEMENTWISE: &[&str] = &[
            "add",
            "sub",
            "mul",
            "div",
            "rem",
            "pow",
            "max",
            "min",
            "relu",
            "leakyrelu",
            "prelu",
            "elu",
            "selu",
            "sigmoid",
            "hardsigmoid",
            "hardswish",
            "silu",
            "tanh",
            "gelu",
            "geluexact",
            "geluapprox",
            "erf",
            "exp",
            "ln",
            "log",
            "sqrt",
            "rsqrt",
            "recip",
            "square",
            "abs",
            "neg",
            "sign",
            "round",
            "floor",
            "ceil",
            "cos",
            "sin",
            "clip",
            "scale",
            "iff",
            "where",
            "and",
            "or",
            "xor",
            "not",
            "isnan",
            "isinf",
            "equals",
            "less",
            "lessequal",
            "greater",
            "greaterequal",
            "cast",
            "bitand",
            "bitor",
            "bitnot",
        ];
        if SHAPE.contains(&t.as_str()) {
            OpKind::Shape
        } else if ELEMENTWISE.contains(&t.as_str()) {
            OpKind::Elementwise
        } else {
            OpKind::Other
        }
    }

    /// Short name, used in legends and as a key (`matmul`).
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Input => "input",
            OpKind::Conv => "conv",
            OpKind::MatMul => "matmul",
            OpKind::Elementwise => "elementwise",
            OpKind::Reduce => "reduce/norm",
            OpKind::Pool => "pool",
            OpKind::Shape => "shape/data",
            OpKind::Other => "other",
        }
    }

    /// Fill colour as `#rrggbb`. Opaque, distinct on white, and far from
    /// the black and red of the arena and lower-bound lines.
    pub fn colour(self) -> &'static str {
        match self {
            OpKind::Input => "#8c8c8c",
            OpKind::Conv => "#1f77b4",
            OpKind::MatMul => "#ff7f0e",
            OpKind::Elementwise => "#2ca02c",
            OpKind::Reduce => "#9467bd",
            OpKind::Pool => "#17becf",
            OpKind::Shape => "#e377c2",
            OpKind::Other => "#bcbd22",
        }
    }
}

/// One arena tensor as drawn.
#[derive(Clone, Debug)]
pub struct Block<'c> {
    /// Tensor id in the bundle.
    pub id: u32,
    /// The tensor record.
    pub tensor: &'c Tensor,
    /// The op that writes the tensor, with its step; `None` for inputs.
    pub producer: Option<(u32, &'c Op)>,
    /// Family of the producer, which sets the colour.
    pub kind: OpKind,
    /// First step, clipped to the picture's steps.
    pub first: u32,
    /// Last step (inclusive), clipped to the picture's steps.
    pub last: u32,
    /// The block this one shares bytes with (index into [`Layout::blocks`]).
    pub alias: Option<(AliasKind, usize)>,
}

impl Block<'_> {
    /// First byte in the arena.
    pub fn offset(&self) -> u64 {
        self.tensor.offset
    }

    /// One past the last byte in the arena.
    pub fn end(&self) -> u64 {
        self.tensor.offset.saturating_add(self.tensor.size)
    }

    /// Bytes.
    pub fn size(&self) -> u64 {
        self.tensor.size
    }

    /// The producing op as `name (Type)`, or `graph input`.
    pub fn op_text(&self) -> String {
        match self.producer {
            Some((_, op)) => format!("{} ({})", op.name, op.op_type),
            None if self.tensor.kind == TensorKind::Input => "graph input".into(),
            None => "no producing op".into(),
        }
    }

    /// The producing op's type, `input` for graph inputs, `-` if none.
    pub fn op_type(&self) -> &str {
        match self.producer {
            Some((_, op)) => &op.op_type,
            None if self.tensor.kind == TensorKind::Input => "input",
            None => "-",
        }
    }

    /// `f32 [1,64,56,56]`.
    pub fn type_text(&self) -> String {
        type_text(self.tensor.dtype, &self.tensor.shape)
    }

    /// True while the tensor's bytes are needed at `step`.
    pub fn live_at(&self, step: u32) -> bool {
        self.first <= step && step <= self.last
    }
}

fn type_text(dtype: DType, shape: &[u64]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("{} [{}]", dtype.name(), dims.join(","))
}

/// The shared drawing model of one bundle.
#[derive(Clone, Debug)]
pub struct Layout<'c> {
    /// The bundle contents drawn.
    pub contents: &'c Contents,
    /// Number of steps (columns); at least 1.
    pub steps: u32,
    /// Arena tensors; aliases come after every non-alias so that they are
    /// drawn on top of the bytes they share.
    pub blocks: Vec<Block<'c>>,
    /// Bytes in use at each step. A tensor and its aliases are one planner
    /// buffer, which holds all their bytes from the first step of any of
    /// them to the last (a concat's bytes are taken when its first slice is
    /// written); the count is the union of the live buffers' byte ranges.
    /// Its maximum is the planner's lower bound when the bundle's
    /// lifetimes are the ones the planner saw.
    pub live: Vec<u64>,
    /// The first step with the most live bytes.
    pub peak_step: u32,
    /// Tensors whose steps lay beyond the op list and were clipped.
    pub clipped: usize,
    /// The memory pool drawn, when the bundle has several: then only its
    /// tensors are blocks and offsets are from the pool's start.
    pub pool: Option<PoolPanel>,
}

/// Which memory pool a [`Layout`] draws.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolPanel {
    /// Index of the pool in the bundle (0 the fastest).
    pub index: usize,
    /// Number of pools in the bundle.
    pub count: usize,
    /// The pool's name.
    pub name: String,
    /// The pool's size in bytes.
    pub bytes: u64,
}

impl<'c> Layout<'c> {
    /// Builds the model of `c` (every arena tensor in one address space;
    /// for a bundle with several pools see [`Layout::panels`]).
    pub fn new(c: &'c Contents) -> Layout<'c> {
        Layout::build(c, None)
    }

    /// One layout per memory pool, fastest first, each over the pool's own
    /// addresses and the bundle's steps; a bundle with one arena gives one
    /// layout, [`Layout::new`]'s.
    pub fn panels(c: &'c Contents) -> Vec<Layout<'c>> {
        if c.pools.len() <= 1 {
            return vec![Layout::new(c)];
        }
        c.pools
            .iter()
            .enumerate()
            .map(|(index, p)| {
                Layout::build(
                    c,
                    Some(PoolPanel {
                        index,
                        count: c.pools.len(),
                        name: p.name.clone(),
                        bytes: p.bytes,
                    }),
                )
            })
            .collect()
    }

    fn build(c: &'c Contents, pool: Option<PoolPanel>) -> Layout<'c> {
        let in_panel = |t: &Tensor| pool.as_ref().is_none_or(|p| t.pool as usize == p.index);
        let steps = u32::try_from(c.ops.len()).unwrap_or(u32::MAX).max(1);
        let mut producer: Vec<Option<(u32, &Op)>> = vec![None; c.tensors.len()];
        for (step, op) in c.ops.iter().enumerate() {
            let step = u32::try_from(step).unwrap_or(u32::MAX);
            for &out in &op.outputs {
                if let Some(slot @ None) = producer.get_mut(out as usize) {
                    *slot = Some((step, op));
                }
            }
        }
        let arena: Vec<usize> = (0..c.tensors.len())
            .filter(|&i| c.tensors[i].region == Region::Arena && in_panel(&c.tensors[i]))
            .collect();
        // Aliases last, so that they are drawn over the bytes they share.
        let mut order: Vec<usize> = arena
            .iter()
            .copied()
            .filter(|&i| !c.tensors[i].alias_of.is_some_and(|(k, _)| k.shares_bytes()))
            .collect();
        order.extend(
            arena
                .iter()
                .copied()
                .filter(|&i| c.tensors[i].alias_of.is_some_and(|(k, _)| k.shares_bytes())),
        );
        let mut index_of: Vec<Option<usize>> = vec![None; c.tensors.len()];
        for (b, &i) in order.iter().enumerate() {
            index_of[i] = Some(b);
        }
        let mut clipped = 0;
        let blocks = order
            .iter()
            .map(|&i| {
                let t = &c.tensors[i];
                let last_step = steps - 1;
                if t.last_step > last_step {
                    clipped += 1;
                }
                let first = t.first_step.min(last_step);
                let last = t.last_step.clamp(first, last_step);
                let prod = producer[i];
                let kind = match prod {
                    Some((_, op)) => OpKind::of(&op.op_type),
                    None if t.kind == TensorKind::Input => OpKind::Input,
                    None => OpKind::Other,
                };
                let alias = t.alias_of.and_then(|(k, of)| {
                    index_of.get(of as usize).copied().flatten().map(|b| (k, b))
                });
                Block {
                    id: u32::try_from(i).unwrap_or(u32::MAX),
                    tensor: t,
                    producer: prod,
                    kind,
                    first,
                    last,
                    alias,
                }
            })
            .collect::<Vec<_>>();
        let live = live_bytes(&buffers(&blocks), steps);
        let peak_step = live
            .iter()
            .enumerate()
            .fold(
                (0usize, 0u64),
                |best, (s, &b)| if b > best.1 { (s, b) } else { best },
            )
            .0;
        Layout {
            contents: c,
            steps,
            blocks,
            live,
            peak_step: u32::try_from(peak_step).unwrap_or(0),
            clipped,
            pool,
        }
    }

    /// Arena size in bytes (the pool's size for a pool's panel).
    pub fn arena_bytes(&self) -> u64 {
        match &self.pool {
            Some(p) => p.bytes,
            None => self.contents.arena_bytes,
        }
    }

    /// The planner's lower bound on the arena, in bytes. A pool's panel
    /// has no bound of its own in the bundle; it shows the most bytes its
    /// tensors hold at one step, which is that pool's bound under the
    /// bundle's lifetimes.
    pub fn lower_bound_bytes(&self) -> u64 {
        match &self.pool {
            Some(_) => self.peak_bytes(),
            None => self.contents.provenance.lower_bound_bytes,
        }
    }

    /// How full the drawn memory is at its peak: peak bytes over its size
    /// (0 when it is empty).
    pub fn fill(&self) -> f64 {
        match self.arena_bytes() {
            0 => 0.0,
            size => self.peak_bytes() as f64 / size as f64,
        }
    }

    /// What the picture shows: `arena`, or `pool sram` in a pool's panel.
    pub fn memory_name(&self) -> String {
        match &self.pool {
            Some(p) => format!("pool {}", p.name),
            None => "arena".into(),
        }
    }

    /// Bytes live at the peak step.
    pub fn peak_bytes(&self) -> u64 {
        self.live.get(self.peak_step as usize).copied().unwrap_or(0)
    }

    /// The op run at `step`.
    pub fn op_at(&self, step: u32) -> Option<&'c Op> {
        self.contents.ops.get(step as usize)
    }

    /// Blocks that make the peak, largest first: those live at the peak
    /// step, and the head of each buffer that holds more bytes there than
    /// its live tensors cover (a concat whose later slices are not written
    /// yet).
    pub fn peak_blocks(&self) -> Vec<usize> {
        let n = self.blocks.len();
        let step = self.peak_step;
        let mut shown: Vec<bool> = self.blocks.iter().map(|b| b.live_at(step)).collect();
        let mut members: Vec<Vec<(u64, u64)>> = vec![Vec::new(); n];
        for (b, blk) in self.blocks.iter().enumerate() {
            if blk.live_at(step) {
                members[self.root(b)].push((blk.offset(), blk.end()));
            }
        }
        for buf in buffers(&self.blocks) {
            if buf.first <= step && step <= buf.last {
                let covered = union_len(&mut members[buf.root]);
                if covered < buf.end.saturating_sub(buf.offset) {
                    shown[buf.root] = true;
                }
            }
        }
        let mut v: Vec<usize> = (0..n).filter(|&b| shown[b]).collect();
        v.sort_by_key(|&b| (std::cmp::Reverse(self.blocks[b].size()), self.blocks[b].id));
        v
    }

    /// The block whose bytes `b` ultimately are (following aliases).
    pub fn root(&self, b: usize) -> usize {
        let mut at = b;
        // A bounded walk: a malformed bundle could hold an alias cycle.
        for _ in 0..self.blocks.len() {
            match self.blocks.get(at).and_then(|blk| blk.alias) {
                Some((_, next)) if next != at => at = next,
                _ => break,
            }
        }
        at
    }

    /// Blocks of other buffers that held some of `b`'s bytes and died
    /// before `b` was written: where the planner reused memory.
    pub fn reused_from(&self, b: usize) -> Vec<usize> {
        let Some(me) = self.blocks.get(b) else {
            return Vec::new();
        };
        let root = self.root(b);
        (0..self.blocks.len())
            .filter(|&o| {
                let other = &self.blocks[o];
                other.last < me.first
                    && other.offset() < me.end()
                    && me.offset() < other.end()
                    && self.root(o) != root
            })
            .collect()
    }

    /// Summary line: arena, lower bound, ratio, naive size, strategy; for
    /// a pool's panel the pool's name, size, fill at its peak and tensors.
    pub fn summary(&self) -> String {
        let p = &self.contents.provenance;
        if let Some(pool) = &self.pool {
            // Fill first: a text chart cuts lines at 100 characters.
            return format!(
                "pool {} ({} of {}): {:.1} % full at its peak, {} of {}, {} tensors",
                pool.name,
                pool.index + 1,
                pool.count,
                self.fill() * 100.0,
                human_bytes(self.peak_bytes()),
                human_bytes(pool.bytes),
                self.blocks.len(),
            );
        }
        let ratio = if p.lower_bound_bytes == 0 {
            1.0
        } else {
            self.arena_bytes() as f64 / p.lower_bound_bytes as f64
        };
        // Stages run in bands of rows (docs/PATCHES.md) show as runs of
        // small, short-lived tensors: say so.
        let stages = self
            .contents
            .ops
            .iter()
            .filter(|op| {
                op.attributes
                    .iter()
                    .any(|(k, _)| k == stow_bundle::format::PATCH_ATTR)
            })
            .count();
        // First: a text chart cuts lines at 100 characters.
        let stages = match stages {
            0 => String::new(),
            1 => "1 stage in bands of rows; ".to_string(),
            n => format!("{n} stages in bands of rows; "),
        };
        format!(
            "{stages}arena {}, lower bound {} (ratio {ratio:.3}), without reuse {}, strategy {}",
            human_bytes(self.arena_bytes()),
            human_bytes(p.lower_bound_bytes),
            human_bytes(p.naive_bytes),
            if p.strategy.is_empty() {
                "?"
            } else {
                &p.strategy
            },
        )
    }

    /// Peak line: step, op and live bytes.
    pub fn peak_text(&self) -> String {
        let op = self
            .op_at(self.peak_step)
            .map(|o| format!(" ({} {})", o.op_type, o.name))
            .unwrap_or_default();
        format!(
            "peak at step {}{op}: {} live in {} tensors",
            self.peak_step,
            human_bytes(self.peak_bytes()),
            self.peak_blocks().len()
        )
    }

    /// Several lines describing block `b`, for titles and tooltips.
    pub fn describe(&self, b: usize) -> String {
        let Some(blk) = self.blocks.get(b) else {
            return String::new();
        };
        let t = blk.tensor;
        let mut s = format!(
            "{}\nop: {}\n{}\n{} ({} bytes) at offset {}\nsteps {}..={}",
            t.name,
            blk.op_text(),
            blk.type_text(),
            human_bytes(t.size),
            t.size,
            t.offset,
            t.first_step,
            t.last_step
        );
        if let Some((kind, of)) = blk.alias {
            let other = self
                .blocks
                .get(of)
                .map(|o| o.tensor.name.as_str())
                .unwrap_or("?");
            s.push_str(&format!("\n{} alias of {other}", kind.name()));
        }
        let reused = self.reused_from(b);
        if !reused.is_empty() {
            let names: Vec<&str> = reused
                .iter()
                .take(3)
                .map(|&o| self.blocks[o].tensor.name.as_str())
                .collect();
            let more = reused.len().saturating_sub(names.len());
            s.push_str(&format!("\nreuses bytes of {}", names.join(", ")));
            if more > 0 {
                s.push_str(&format!(" and {more} more"));
            }
        }
        s
    }
}

/// One planner buffer: a tensor with all its aliases.
struct Buffer {
    /// The block the others alias.
    root: usize,
    first: u32,
    last: u32,
    offset: u64,
    end: u64,
}

/// The buffers of `blocks`, each spanning its members' steps and bytes.
fn buffers(blocks: &[Block<'_>]) -> Vec<Buffer> {
    let root_of = |b: usize| {
        let mut at = b;
        for _ in 0..blocks.len() {
            match blocks[at].alias {
                Some((_, next)) if next != at && next < blocks.len() => at = next,
                _ => break,
            }
        }
        at
    };
    let mut slot: Vec<Option<usize>> = vec![None; blocks.len()];
    let mut out: Vec<Buffer> = Vec::new();
    for (b, blk) in blocks.iter().enumerate() {
        let root = root_of(b);
        match slot[root] {
            Some(i) => {
                let buf = &mut out[i];
                buf.first = buf.first.min(blk.first);
                buf.last = buf.last.max(blk.last);
                buf.offset = buf.offset.min(blk.offset());
                buf.end = buf.end.max(blk.end());
            }
            None => {
                slot[root] = Some(out.len());
                out.push(Buffer {
                    root,
                    first: blk.first,
                    last: blk.last,
                    offset: blk.offset(),
                    end: blk.end(),
                });
            }
        }
    }
    out
}

/// Bytes covered by `ranges` (sorted in place), overlaps counted once.
fn union_len(ranges: &mut [(u64, u64)]) -> u64 {
    ranges.sort_unstable();
    let mut total = 0u64;
    let mut cur: Option<(u64, u64)> = None;
    for &(lo, hi) in ranges.iter() {
        cur = match cur {
            Some((a, b)) if lo <= b => Some((a, b.max(hi))),
            Some((a, b)) => {
                total = total.saturating_add(b - a);
                Some((lo, hi))
            }
            None => Some((lo, hi)),
        };
    }
    if let Some((a, b)) = cur {
        total = total.saturating_add(b.saturating_sub(a));
    }
    total
}

/// Bytes in use at each step; see [`Layout::live`].
fn live_bytes(blocks: &[Buffer], steps: u32) -> Vec<u64> {
    let mut by_first: Vec<usize> = (0..blocks.len()).collect();
    by_first.sort_by_key(|&b| blocks[b].first);
    let mut next = 0;
    let mut active: Vec<usize> = Vec::new();
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut live = Vec::with_capacity(steps as usize);
    for s in 0..steps {
        while let Some(&b) = by_first.get(next) {
            if blocks[b].first > s {
                break;
            }
            active.push(b);
            next += 1;
        }
        active.retain(|&b| blocks[b].last >= s);
        ranges.clear();
        ranges.extend(active.iter().map(|&b| (blocks[b].offset, blocks[b].end)));
        live.push(union_len(&mut ranges));
    }
    live
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn op_kinds_cover_the_tract_names_in_our_models() {
        assert_eq!(OpKind::of("Conv"), OpKind::Conv);
        assert_eq!(OpKind::of("EinSum"), OpKind::MatMul);
        assert_eq!(OpKind::of("Max"), OpKind::Elementwise);
        assert_eq!(OpKind::of("GeluExact"), OpKind::Elementwise);
        assert_eq!(OpKind::of("Reduce<Sum>"), OpKind::Reduce);
        assert_eq!(OpKind::of("RmsNorm"), OpKind::Reduce);
        assert_eq!(OpKind::of("MaxPool"), OpKind::Pool);
        assert_eq!(OpKind::of("RmAxis"), OpKind::Shape);
        assert_eq!(OpKind::of("Downsample"), OpKind::Shape);
        assert_eq!(OpKind::of("Frobnicate"), OpKind::Other);
        let colours: std::collections::HashSet<_> =
            OpKind::ALL.iter().map(|k| k.colour()).collect();
        assert_eq!(
            colours.len(),
            OpKind::ALL.len(),
            "each kind has its own colour"
        );
    }

    /// Three arena tensors on two steps: `x` [0,64) at step 0, `h` [64,128)
    /// at steps 0..=1 and `y`, a view of `x`, at step 1; one weight.
    pub(crate) fn sample() -> Contents {
        let t = |name: &str, kind, region, offset, size, (first_step, last_step)| Tensor {
            name: name.into(),
            kind,
            dtype: DType::F32,
            shape: vec![size / 4],
            region,
            offset,
            size,
            first_step,
            last_step,
            alias_of: None,
            pool: 0,
            quant: None,
        };
        let mut tensors = vec![
            t("x", TensorKind::Input, Region::Arena, 0, 64, (0, 0)),
            t("w", TensorKind::Weight, Region::Weights, 0, 32, (0, 0)),
            t("h", TensorKind::Activation, Region::Arena, 64, 60, (0, 1)),
            t("y", TensorKind::Output, Region::Arena, 0, 64, (1, 1)),
        ];
        tensors[3].alias_of = Some((AliasKind::View, 0));
        let op = |name: &str, op_type: &str, inputs: Vec<u32>, outputs: Vec<u32>| Op {
            name: name.into(),
            op_type: op_type.into(),
            attributes: vec![],
            inputs,
            outputs,
        };
        Contents {
            arena_bytes: 128,
            arena_align: 64,
            tensors,
            inputs: vec![0],
            outputs: vec![3],
            ops: vec![
                op("mm", "EinSum", vec![0, 1], vec![2]),
                op("r", "Reshape", vec![0], vec![3]),
            ],
            ..Contents::default()
        }
    }

    #[test]
    fn live_bytes_count_shared_bytes_once_and_peak_is_found() {
        let c = sample();
        let l = Layout::new(&c);
        assert_eq!(l.steps, 2);
        // x (64) + h (60); then h + y, where y shares x's bytes.
        assert_eq!(l.live, vec![124, 124]);
        assert_eq!(l.peak_step, 0);
        assert_eq!(l.peak_blocks().len(), 2);
        let y = l.blocks.iter().position(|b| b.tensor.name == "y").unwrap();
        let x = l.blocks.iter().position(|b| b.tensor.name == "x").unwrap();
        assert!(x < y, "aliases are drawn after what they alias");
        assert_eq!(l.blocks[y].alias.map(|(_, of)| of), Some(x));
        assert_eq!(l.blocks[y].kind, OpKind::Shape);
        assert_eq!(l.blocks[x].kind, OpKind::Input);
        assert_eq!(l.root(y), x);
        assert!(
            l.reused_from(y).is_empty(),
            "an alias shares bytes, it does not reuse them"
        );
    }

    /// `sample` with `h` moved to a second pool at offset 0: each panel
    /// holds its pool's tensors, sized and named by its pool, and the
    /// steps stay the bundle's.
    #[test]
    fn panels_split_the_tensors_by_pool() {
        let mut c = sample();
        assert_eq!(Layout::panels(&c).len(), 1, "one arena, one panel");
        assert!(Layout::panels(&c)[0].pool.is_none());
        c.tensors[2].pool = 1;
        c.tensors[2].offset = 0;
        c.arena_bytes = 64;
        c.pools = vec![
            stow_bundle::MemoryPool {
                name: "sram".into(),
                bytes: 64,
                align: 64,
            },
            stow_bundle::MemoryPool {
                name: "dram".into(),
                bytes: 128,
                align: 64,
            },
        ];
        let panels = Layout::panels(&c);
        assert_eq!(panels.len(), 2);
        let names = |l: &Layout<'_>| -> Vec<String> {
            l.blocks.iter().map(|b| b.tensor.name.clone()).collect()
        };
        assert_eq!(names(&panels[0]), ["x", "y"]);
        assert_eq!(names(&panels[1]), ["h"]);
        assert_eq!(
            (panels[0].arena_bytes(), panels[1].arena_bytes()),
            (64, 128)
        );
        assert_eq!((panels[0].steps, panels[1].steps), (2, 2));
        // sram: x then its view y, 64 bytes at both steps; dram: h's 60.
        assert_eq!(panels[0].live, vec![64, 64]);
        assert_eq!(panels[1].live, vec![60, 60]);
        assert_eq!(panels[1].lower_bound_bytes(), 60);
        assert!((panels[1].fill() - 60.0 / 128.0).abs() < 1e-12);
        let summary = panels[1].summary();
        assert!(
            summary.starts_with("pool dram (2 of 2): 46.9 % full at its peak"),
            "{summary}"
        );
        assert_eq!(panels[0].memory_name(), "pool sram");
    }

    #[test]
    fn a_concat_holds_its_bytes_from_its_first_slice_on() {
        let mut c = sample();
        // cat [0,128) is read at step 1; its slices s0 [0,64) and s1
        // [64,128) are written at steps 0 and 1.
        let t = |name: &str, offset, size, steps: (u32, u32)| Tensor {
            name: name.into(),
            kind: TensorKind::Activation,
            dtype: DType::U8,
            shape: vec![size],
            region: Region::Arena,
            offset,
            size,
            first_step: steps.0,
            last_step: steps.1,
            alias_of: None,
            pool: 0,
            quant: None,
        };
        c.tensors = vec![
            t("cat", 0, 128, (1, 1)),
            t("s0", 0, 64, (0, 1)),
            t("s1", 64, 64, (1, 1)),
        ];
        c.tensors[1].alias_of = Some((AliasKind::ConcatSlice, 0));
        c.tensors[2].alias_of = Some((AliasKind::ConcatSlice, 0));
        c.ops[0].outputs = vec![1];
        c.ops[1].outputs = vec![2];
        let l = Layout::new(&c);
        assert_eq!(l.live, vec![128, 128], "s1's bytes are taken at step 0");
        let names = |v: Vec<usize>| {
            v.iter()
                .map(|&b| l.blocks[b].tensor.name.clone())
                .collect::<Vec<_>>()
        };
        // At step 0 only s0 is written; cat stands for the bytes held for s1.
        assert_eq!(names(l.peak_blocks()), ["cat", "s0"]);
    }

    #[test]
    fn steps_past_the_op_list_are_clipped_not_trusted() {
        let mut c = sample();
        c.tensors[2].last_step = u32::MAX;
        c.tensors[3].alias_of = Some((AliasKind::View, 3)); // a self-alias
        let l = Layout::new(&c);
        assert_eq!(l.live.len(), 2);
        assert_eq!(l.clipped, 1);
        let y = l.blocks.iter().position(|b| b.tensor.name == "y").unwrap();
        assert_eq!(l.root(y), y);
    }
}

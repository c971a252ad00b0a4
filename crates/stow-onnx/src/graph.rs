use crate::alias::Alias;
use crate::attrs::{attributes, Attr};
use crate::dag::{Event, StepDag, Usage};
use crate::dtype::element_type;
use crate::error::{OnnxError, Stage};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use stow_plan::{Buffer, BufferId, ConflictModel, Problem};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::konst::Const;
use tract_onnx::tract_core::ops::source::TypedSource;

/// The role a tensor plays in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorRole {
    /// A graph input; lives in the arena from step 0.
    Input,
    /// A graph output; lives in the arena until the last step.
    Output,
    /// An intermediate value in the arena.
    Activation,
    /// A constant; lives in the bundle's weight section.
    Weight,
    /// A graph input written in bands of rows ([`ModelGraph::input_bands`]):
    /// no bytes of its own, no step reads it.
    InputRows,
}

impl TensorRole {
    /// True for tensors that live in the activation arena.
    pub fn in_arena(self) -> bool {
        !matches!(self, TensorRole::Weight | TensorRole::InputRows)
    }
}

/// A graph input the caller writes in bands of rows (docs/PATCHES.md, "The
/// input in bands").
#[derive(Clone, Debug)]
pub struct InputBands {
    /// The input's tensor (role [`TensorRole::InputRows`]).
    pub input: usize,
    /// Its bands in row order: (tensor, first row, end row); each band is
    /// an arena input from step 0.
    pub bands: Vec<(usize, usize, usize)>,
}

/// One tensor of the decluttered model.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    /// ONNX value name where tract kept one, otherwise the producing node's
    /// name (with `:slot` for slots other than 0). Unique in the graph.
    pub name: String,
    /// Its role.
    pub role: TensorRole,
    /// Element type name (`f32`, `i64`, ...).
    pub dtype: &'static str,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Byte size: elements times element size.
    pub bytes: u64,
    /// First step needing the bytes: the producing step, 0 for inputs.
    pub first_step: u32,
    /// Last step needing the bytes (inclusive).
    pub last_step: u32,
    /// tract node id and output slot that produce it.
    pub outlet: (usize, usize),
    /// The tensor whose bytes this one shares, if any (for a concat slice,
    /// the later concat output it is written into).
    pub alias: Option<Alias>,
}

/// One executed operator.
#[derive(Clone, Debug)]
pub struct OpInfo {
    /// tract's node name.
    pub name: String,
    /// tract's op name.
    pub op_type: String,
    /// Attributes, sorted by name.
    pub attributes: Vec<(String, Attr)>,
    /// Tensor ids read, in operand order.
    pub inputs: Vec<usize>,
    /// Tensor ids written, in output order.
    pub outputs: Vec<usize>,
    /// The kernel scratch tensor planned for this step
    /// ([`ModelGraph::add_scratch`]), if any.
    pub scratch: Option<usize>,
    /// tract node id.
    pub node: usize,
}

/// A decluttered model with every tensor and operator recorded in execution
/// order. Step `i` runs `ops[i]`.
#[derive(Debug)]
pub struct ModelGraph {
    /// Every tensor read or written by an executed step (plus constants and
    /// inputs), indexed by tensor id.
    pub tensors: Vec<TensorInfo>,
    /// Operators in execution order.
    pub ops: Vec<OpInfo>,
    /// Graph inputs by tensor id, in model order.
    pub inputs: Vec<usize>,
    /// Graph outputs by tensor id, in model order.
    pub outputs: Vec<usize>,
    /// Graph inputs written in bands of rows.
    pub input_bands: Vec<InputBands>,
    /// The execution order the steps follow.
    pub order: ExecutionOrder,
    /// Lower bound of the arena under each order tried, in the order tried.
    pub order_bounds: Vec<(ExecutionOrder, u64)>,
    /// Steps that are concats done in place: their inputs already sit in
    /// their slices, so the step copies nothing.
    pub(crate) free_concat: Vec<bool>,
    /// Plan for parallel branches running at the same time.
    pub(crate) concurrent: bool,
    weights: Vec<Option<Arc<Tensor>>>,
    model: TypedModel,
}

impl ModelGraph {
    /// Raw little-endian bytes of a weight tensor.
    pub fn weight_bytes(&self, tensor: usize) -> Option<&[u8]> {
        self.weights.get(tensor)?.as_ref().map(|t| t.as_bytes())
    }

    /// A weight's value as tract holds it.
    pub fn weight_tensor(&self, tensor: usize) -> Option<Tensor> {
        self.weights.get(tensor)?.as_ref().map(|t| (**t).clone())
    }

    /// Multiply-adds of the model's convolutions and products (a stage
    /// that reduces rows computes some of them twice).
    pub fn multiply_adds(&self) -> u64 {
        crate::stage::multiply_adds(&self.model)
    }

    /// The step that writes `tensor`, or `None` for inputs and weights.
    pub fn producer_step(&self, tensor: usize) -> Option<usize> {
        self.ops.iter().position(|op| op.outputs.contains(&tensor))
    }

    /// Adds scratch space for step `step`'s kernel: `floats` f32 values
    /// for each of `threads` threads, as an activation that the step
    /// writes and nothing reads, so the planner gives it bytes for that
    /// step only, shared with tensors dead by then. The step's attribute
    /// `stow.scratch` records the thread count. Returns the tensor id.
    pub fn add_scratch(&mut self, step: usize, floats: u64, threads: u32) -> Option<usize> {
        let op = self.ops.get(step)?;
        let count = floats.checked_mul(threads as u64)?;
        let id = self.tensors.len();
        self.tensors.push(TensorInfo {
            name: format!("{}.scratch", op.name),
            role: TensorRole::Activation,
            dtype: "f32",
            shape: vec![count],
            bytes: count.checked_mul(4)?,
            first_step: step as u32,
            last_step: step as u32,
            outlet: (op.node, usize::MAX),
            alias: None,
        });
        self.weights.push(None);
        let op = &mut self.ops[step];
        op.scratch = Some(id);
        op.attributes
            .push(("stow.scratch".into(), Attr::Int(threads as i64)));
        op.attributes.sort_by(|a, b| a.0.cmp(&b.0));
        Some(id)
    }

    /// The graph input whose rows band `tensor` holds, if it is such a
    /// band ([`ModelGraph::input_bands`]).
    pub fn banded_input(&self, tensor: usize) -> Option<usize> {
        self.input_bands
            .iter()
            .find(|b| b.bands.iter().any(|&(band, _, _)| band == tensor))
            .map(|b| b.input)
    }

    /// The decluttered tract model the graph was read from.
    pub fn typed_model(&self) -> &TypedModel {
        &self.model
    }

    /// The scale and zero point of quantized tensor `tensor`, where the
    /// model gives one pair for all of it (docs/FORMAT.md, `quant_scale`).
    pub fn quantization(&self, tensor: usize) -> Option<(f32, i32)> {
        let (node, slot) = self.tensors.get(tensor)?.outlet;
        crate::qparams::of(&self.model, OutletId::new(node, slot))
    }

    /// Total bytes of all weights.
    pub fn weight_total(&self) -> u64 {
        self.tensors
            .iter()
            .filter(|t| t.role == TensorRole::Weight)
            .map(|t| t.bytes)
            .sum()
    }

    /// The tensor at the root of `tensor`'s alias chain: the one that owns
    /// the bytes.
    pub fn alias_root(&self, mut tensor: usize) -> usize {
        while let Some(a) = self.tensors[tensor].alias {
            tensor = a.target();
        }
        tensor
    }

    /// Where `tensor` starts inside the buffer of its alias root (non-zero
    /// only for concat slices).
    pub fn offset_in_buffer(&self, mut tensor: usize) -> u64 {
        let mut offset = 0u64;
        while let Some(a) = self.tensors[tensor].alias {
            offset = offset.saturating_add(a.byte_offset());
            tensor = a.target();
        }
        offset
    }

    /// True when step `step` is a concat done in place: its inputs were
    /// written into their slices of its output, so it has nothing to do.
    pub fn concat_in_place(&self, step: usize) -> bool {
        self.free_concat.get(step).copied().unwrap_or(false)
    }

    /// True when the graph was analysed for parallel branches running at
    /// the same time (`--concurrent-branches`).
    pub fn concurrent_branches(&self) -> bool {
        self.concurrent
    }

    /// The planning problem for the arena, with offsets aligned to `align`:
    /// one buffer per alias root, large enough for every member at its
    /// offset ([`ModelGraph::offset_in_buffer`]) and live from its first
    /// member's first step to its last member's last step. With concurrent
    /// branches the conflicts are explicit (see [`ModelGraph::branch_conflicts`]).
    /// Returns the problem and, for every tensor, its buffer (`None` for
    /// weights).
    pub fn problem(&self, align: u64) -> (Problem, Vec<Option<usize>>) {
        let (buffers, buffer_of) = self.buffers(align);
        let conflicts = if self.concurrent {
            ConflictModel::Explicit(self.branch_conflicts(&buffer_of, buffers.len()))
        } else {
            ConflictModel::Lifetimes
        };
        (Problem::new(buffers, conflicts), buffer_of)
    }

    /// Largest total size of buffers live at one step of the recorded order.
    /// The step at which the most arena bytes are live, run one step at
    /// a time (the first such step on ties).
    pub fn peak_step(&self) -> usize {
        let (buffers, _) = self.buffers(1);
        let mut delta = vec![0i128; self.ops.len() + 2];
        for b in &buffers {
            let (lo, hi) = (
                (b.lifetime.start as usize).min(self.ops.len() + 1),
                (b.lifetime.end as usize).min(self.ops.len() + 1),
            );
            delta[lo] += b.size as i128;
            delta[hi] -= b.size as i128;
        }
        let (mut live, mut best) = (0i128, (0i128, 0usize));
        for (step, d) in delta.iter().enumerate().take(self.ops.len()) {
            live += d;
            if live > best.0 {
                best = (live, step);
            }
        }
        best.1
    }

    pub(crate) fn sequential_peak(&self) -> u64 {
        let (buffers, _) = self.buffers(1);
        stow_plan::lower_bound(&Problem::new(buffers, ConflictModel::Lifetimes))
    }

    fn buffers(&self, align: u64) -> (Vec<Buffer>, Vec<Option<usize>>) {
        let mut buffers: Vec<Buffer> = Vec::new();
        let mut buffer_of: Vec<Option<usize>> = vec![None; self.tensors.len()];
        for (id, t) in self.tensors.iter().enumerate() {
            if !t.role.in_arena() {
                continue;
            }
            let root = self.alias_root(id);
            let b = match buffer_of[root] {
                Some(b) => b,
                None => {
                    buffers.push(Buffer::new(0, t.first_step, t.last_step + 1, align));
                    buffer_of[root] = Some(buffers.len() - 1);
                    buffers.len() - 1
                }
            };
            buffer_of[id] = Some(b);
            let buf = &mut buffers[b];
            buf.size = buf
                .size
                .max(self.offset_in_buffer(id).saturating_add(t.bytes));
            buf.lifetime.start = buf.lifetime.start.min(t.first_step);
            buf.lifetime.end = buf.lifetime.end.max(t.last_step + 1);
        }
        (buffers, buffer_of)
    }

    /// Conflict lists (symmetric, sorted) when parallel branches may run at
    /// the same time (M1). Buffer A may share bytes with buffer B only when
    /// every step that writes or reads A is an ancestor of every step that
    /// writes B (or the other way round): then no schedule can run them at
    /// once. A graph output is read after the last step, so nothing written
    /// after it may reuse its bytes; an edge (a step reading A and writing
    /// B) is a conflict because a step is not its own ancestor.
    pub fn branch_conflicts(
        &self,
        buffer_of: &[Option<usize>],
        buffers: usize,
    ) -> Vec<Vec<BufferId>> {
        let usage = Usage::new(self);
        let dag = StepDag::new(self, &usage);
        let words = dag.words();
        // Per buffer: steps touching it (bit set), whether the caller reads
        // it at the end, and the steps every writer has as ancestors.
        let mut touched = vec![0u64; buffers * words];
        let mut read_at_end = vec![false; buffers];
        let mut common = vec![u64::MAX; buffers * words];
        for (t, b) in buffer_of.iter().enumerate() {
            let Some(b) = *b else { continue };
            let mark = |e: Event, touched: &mut [u64], end: &mut [bool]| match e {
                Event::Step(s) => touched[b * words + s / 64] |= 1 << (s % 64),
                Event::End => end[b] = true,
                Event::Start => {}
            };
            for e in usage.reads(t) {
                mark(e, &mut touched, &mut read_at_end);
            }
            match self.write_event(&usage, t) {
                Some(Event::Step(s)) => {
                    mark(Event::Step(s), &mut touched, &mut read_at_end);
                    for (c, a) in common[b * words..(b + 1) * words]
                        .iter_mut()
                        .zip(dag.ancestors(s))
                    {
                        *c &= a;
                    }
                }
                // Written by the caller before every step: nothing precedes it.
                Some(Event::Start) => common[b * words..(b + 1) * words].fill(0),
                _ => {}
            }
        }
        let before = |a: usize, b: usize| {
            !read_at_end[a]
                && touched[a * words..(a + 1) * words]
                    .iter()
                    .zip(&common[b * words..(b + 1) * words])
                    .all(|(t, c)| t & !c == 0)
        };
        let mut adj: Vec<Vec<BufferId>> = vec![Vec::new(); buffers];
        for a in 0..buffers {
            for b in a + 1..buffers {
                if !before(a, b) && !before(b, a) {
                    adj[a].push(BufferId(b as u32));
                    adj[b].push(BufferId(a as u32));
                }
            }
        }
        adj
    }
}

fn tract_err(e: impl std::fmt::Display) -> OnnxError {
    OnnxError::tract(Stage::Analysis, e)
}

/// An execution order to record the model in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecutionOrder {
    /// tract's RAM-optimised order (`eval_order_opt_ram`).
    TractRam,
    /// tract's plain topological order (`eval_order`).
    Topological,
    /// Ours: among the steps ready to run, the one that frees the most
    /// bytes net of what it allocates (see `order.rs`).
    GreedyFree,
}

impl ExecutionOrder {
    /// Every order the frontend can try.
    pub const ALL: [ExecutionOrder; 3] = [
        ExecutionOrder::TractRam,
        ExecutionOrder::Topological,
        ExecutionOrder::GreedyFree,
    ];

    /// Name shown to users.
    pub fn name(self) -> &'static str {
        match self {
            ExecutionOrder::TractRam => "tract-ram",
            ExecutionOrder::Topological => "topological",
            ExecutionOrder::GreedyFree => "greedy-free",
        }
    }
}

/// Gives the decluttered model's outputs their ONNX names back, and puts
/// an `Identity` step behind every output that is a constant or a graph
/// input, so that every output is written into the arena by a step.
pub(crate) fn name_outputs(model: &mut TypedModel, names: &[String]) -> Result<(), OnnxError> {
    let mut outlets = model.output_outlets().map_err(tract_err)?.to_vec();
    if outlets.len() != names.len() {
        return Err(tract_err("decluttering changed the number of outputs"));
    }
    let mut seen = HashSet::new();
    for (outlet, name) in outlets.iter_mut().zip(names) {
        let node = model.node(outlet.node);
        // Two outputs that decluttering made one value (`b` a no-op
        // transpose of output `a`) need a tensor each for their names.
        let repeated = !seen.insert(*outlet);
        if repeated || node.op_is::<Const>() || node.op_is::<TypedSource>() {
            // Added by hand: `wire_node` would evaluate an Identity of a
            // constant into another constant.
            let fact = model
                .outlet_fact(*outlet)
                .map_err(tract_err)?
                .without_value();
            let copy = model
                .add_node(
                    format!("{name}.copy"),
                    tract_onnx::tract_core::ops::identity::Identity,
                    tvec!(fact),
                )
                .map_err(tract_err)?;
            model
                .add_edge(*outlet, InletId::new(copy, 0))
                .map_err(tract_err)?;
            *outlet = OutletId::new(copy, 0);
        }
    }
    model.select_output_outlets(&outlets).map_err(tract_err)?;
    for (outlet, name) in outlets.iter().zip(names) {
        model
            .set_outlet_label(*outlet, name.clone())
            .map_err(tract_err)?;
    }
    Ok(())
}

/// Records tensors and ops of a decluttered model in the given order.
pub(crate) fn analyse(model: TypedModel, order: ExecutionOrder) -> Result<ModelGraph, OnnxError> {
    let order_used = order;
    let order = match order {
        ExecutionOrder::TractRam => model.eval_order_opt_ram(),
        ExecutionOrder::Topological => model.eval_order(),
        ExecutionOrder::GreedyFree => crate::order::greedy_free(&model),
    }
    .map_err(tract_err)?;
    let input_outlets = model.input_outlets().map_err(tract_err)?.to_vec();
    let output_outlets = model.output_outlets().map_err(tract_err)?.to_vec();
    let is_input: HashSet<OutletId> = input_outlets.iter().copied().collect();
    let is_output: HashSet<OutletId> = output_outlets.iter().copied().collect();

    let mut tensors: Vec<TensorInfo> = Vec::new();
    let mut weights: Vec<Option<Arc<Tensor>>> = Vec::new();
    let mut tensor_of: HashMap<OutletId, usize> = HashMap::new();
    // Graph inputs and outputs keep their ONNX names whatever tract
    // labelled other outlets with; other tensors with such a name get a
    // suffix.
    let mut reserved: HashMap<OutletId, String> = HashMap::new();
    for &o in &output_outlets {
        if let Some(label) = model.outlet_label(o) {
            reserved.insert(o, label.to_string());
        }
    }
    for &o in &input_outlets {
        reserved.insert(o, model.node(o.node).name.clone());
    }
    let mut used_names: HashSet<String> = reserved.values().cloned().collect();
    let mut ops: Vec<OpInfo> = Vec::new();
    // Graph inputs cut into bands: the band slices are no steps.
    let banded: HashMap<OutletId, Vec<(usize, usize, usize)>> = input_outlets
        .iter()
        .filter_map(|&o| Some((o, crate::input_rows::bands(&model, o)?)))
        .collect();
    let band_rows: HashSet<usize> = banded
        .values()
        .flat_map(|bands| bands.iter().map(|&(node, _, _)| node))
        .collect();
    let mut input_bands: Vec<InputBands> = Vec::new();

    let mut add_tensor = |outlet: OutletId,
                          role: TensorRole,
                          step: u32,
                          tensors: &mut Vec<TensorInfo>,
                          weights: &mut Vec<Option<Arc<Tensor>>>,
                          value: Option<Arc<Tensor>>|
     -> Result<usize, OnnxError> {
        let node = model.node(outlet.node);
        let reserved_name = reserved.get(&outlet).cloned();
        let mut name = reserved_name.clone().unwrap_or_else(|| {
            model
                .outlet_label(outlet)
                .map(|s| s.to_string())
                .unwrap_or_else(|| {
                    if outlet.slot == 0 {
                        node.name.clone()
                    } else {
                        format!("{}:{}", node.name, outlet.slot)
                    }
                })
        });
        if reserved_name.is_none() && used_names.contains(&name) {
            let base = name.clone();
            let mut k = 1;
            while used_names.contains(&name) {
                name = format!("{base}#{k}");
                k += 1;
            }
        }
        used_names.insert(name.clone());
        let fact = model.outlet_fact(outlet).map_err(tract_err)?;
        let (dtype, elem) =
            element_type(fact.datum_type).ok_or_else(|| OnnxError::UnsupportedType {
                tensor: name.clone(),
                dtype: format!("{:?}", fact.datum_type),
            })?;
        let shape: Vec<u64> = match (&value, fact.shape.as_concrete()) {
            (Some(v), _) => v.shape().iter().map(|&d| d as u64).collect(),
            (None, Some(s)) => s.iter().map(|&d| d as u64).collect(),
            (None, None) => {
                return Err(OnnxError::SymbolicShape {
                    tensor: name,
                    shape: format!("{:?}", fact.shape),
                })
            }
        };
        let bytes = shape
            .iter()
            .try_fold(elem, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| OnnxError::Overflow {
                tensor: name.clone(),
            })?;
        let id = tensors.len();
        tensors.push(TensorInfo {
            name,
            role,
            dtype,
            shape,
            bytes,
            first_step: step,
            last_step: step,
            outlet: (outlet.node, outlet.slot),
            alias: None,
        });
        weights.push(value);
        Ok(id)
    };

    for &node_id in &order {
        let node = model.node(node_id);
        if let Some(konst) = node.op_as::<Const>() {
            let value = konst.val().clone();
            let value = if value.datum_type() == DatumType::TDim {
                Arc::new(value.cast_to::<i64>().map_err(tract_err)?.into_owned())
            } else {
                value
            };
            let outlet = OutletId::new(node_id, 0);
            let id = add_tensor(
                outlet,
                TensorRole::Weight,
                0,
                &mut tensors,
                &mut weights,
                Some(value),
            )?;
            tensor_of.insert(outlet, id);
            continue;
        }
        if node.op_is::<TypedSource>() {
            let outlet = OutletId::new(node_id, 0);
            let role = if banded.contains_key(&outlet) {
                TensorRole::InputRows
            } else {
                TensorRole::Input
            };
            let id = add_tensor(outlet, role, 0, &mut tensors, &mut weights, None)?;
            tensor_of.insert(outlet, id);
            // The bands follow their input, in row order: the format
            // gives each band the rows after those of the bands before it.
            if let Some(bands) = banded.get(&outlet) {
                let mut entry = InputBands {
                    input: id,
                    bands: Vec::with_capacity(bands.len()),
                };
                for &(slice, a, b) in bands {
                    let band = OutletId::new(slice, 0);
                    let band_id =
                        add_tensor(band, TensorRole::Input, 0, &mut tensors, &mut weights, None)?;
                    tensor_of.insert(band, band_id);
                    entry.bands.push((band_id, a, b));
                }
                input_bands.push(entry);
            }
            continue;
        }
        if band_rows.contains(&node_id) {
            continue;
        }
        let step = ops.len() as u32;
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for input in &node.inputs {
            let id = *tensor_of.get(input).ok_or_else(|| OnnxError::Tract {
                stage: Stage::Analysis,
                node: Some(node.name.clone()),
                message: format!("input {input:?} is read before it is written"),
            })?;
            let t = &mut tensors[id];
            t.last_step = t.last_step.max(step);
            inputs.push(id);
        }
        let mut outputs = Vec::with_capacity(node.outputs.len());
        for slot in 0..node.outputs.len() {
            let outlet = OutletId::new(node_id, slot);
            let role = if is_output.contains(&outlet) {
                TensorRole::Output
            } else {
                TensorRole::Activation
            };
            let id = add_tensor(outlet, role, step, &mut tensors, &mut weights, None)?;
            tensor_of.insert(outlet, id);
            outputs.push(id);
        }
        ops.push(OpInfo {
            name: node.name.clone(),
            op_type: node.op.name().to_string(),
            attributes: attributes(node.op.as_ref()),
            inputs,
            outputs,
            scratch: None,
            node: node_id,
        });
    }
    // An input that no step reads (one whose shape alone was used, folded
    // once the shapes were fixed) is still an input of the model: callers
    // pass it, and it gets its place.
    for &outlet in &input_outlets {
        if let std::collections::hash_map::Entry::Vacant(slot) = tensor_of.entry(outlet) {
            let id = add_tensor(
                outlet,
                TensorRole::Input,
                0,
                &mut tensors,
                &mut weights,
                None,
            )?;
            slot.insert(id);
        }
    }
    let last = ops.len().saturating_sub(1) as u32;
    let lookup = |o: &OutletId| {
        tensor_of.get(o).copied().ok_or_else(|| OnnxError::Tract {
            stage: Stage::Analysis,
            node: Some(model.node(o.node).name.clone()),
            message: "graph input or output is not part of the execution order".into(),
        })
    };
    let inputs = input_outlets
        .iter()
        .map(lookup)
        .collect::<Result<Vec<_>, _>>()?;
    let outputs = output_outlets
        .iter()
        .map(lookup)
        .collect::<Result<Vec<_>, _>>()?;
    for &id in &outputs {
        if tensors[id].role.in_arena() {
            tensors[id].last_step = last;
        }
    }
    for &id in &inputs {
        tensors[id].first_step = 0;
    }
    debug_assert!(is_input.len() == inputs.len());
    Ok(ModelGraph {
        input_bands,
        free_concat: vec![false; ops.len()],
        concurrent: false,
        order: order_used,
        order_bounds: Vec::new(),
        tensors,
        ops,
        inputs,
        outputs,
        weights,
        model,
    })
}

#[cfg(test)]
mod tests {
    use crate::{load, LoadOptions, ReuseOptions};

    fn concat_block(concurrent: bool) -> super::ModelGraph {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/concat_block.onnx");
        load(
            &path,
            &LoadOptions {
                reuse: ReuseOptions {
                    concurrent_branches: concurrent,
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .unwrap()
    }

    #[test]
    fn every_order_is_tried_and_the_best_kept() {
        let graph = concat_block(false);
        assert_eq!(graph.order_bounds.len(), super::ExecutionOrder::ALL.len());
        let best = graph.order_bounds.iter().map(|(_, b)| *b).min().unwrap();
        let chosen = graph
            .order_bounds
            .iter()
            .find(|(o, _)| *o == graph.order)
            .unwrap()
            .1;
        assert_eq!(chosen, best);
        assert_eq!(stow_plan::lower_bound(&graph.problem(1).0), best);
    }

    #[test]
    fn concurrent_branches_give_explicit_symmetric_conflicts() {
        let graph = concat_block(true);
        let (problem, buffer_of) = graph.problem(64);
        problem.validate().unwrap();
        let stow_plan::ConflictModel::Explicit(adj) = &problem.conflicts else {
            panic!("expected explicit conflicts");
        };
        for (a, list) in adj.iter().enumerate() {
            assert!(list.windows(2).all(|w| w[0] < w[1]), "sorted, no repeats");
            for b in list {
                assert!(adj[b.index()].contains(&stow_plan::BufferId(a as u32)));
            }
        }
        // Some pair shares bytes on one schedule but not when branches run
        // at once.
        let sequential =
            super::Problem::new(problem.buffers.clone(), stow_plan::ConflictModel::Lifetimes);
        let n = problem.buffers.len();
        let extra = (0..n)
            .flat_map(|a| (0..n).map(move |b| (a, b)))
            .filter(|&(a, b)| {
                let (a, b) = (stow_plan::BufferId(a as u32), stow_plan::BufferId(b as u32));
                problem.conflict(a, b) && !sequential.conflict(a, b)
            })
            .count();
        assert!(extra > 0);
        // Nothing written after a graph output reuses its bytes.
        for &out in &graph.outputs {
            let o = buffer_of[out].unwrap();
            let written = graph.producer_step(out).unwrap();
            for (t, b) in buffer_of.iter().enumerate() {
                let Some(b) = *b else { continue };
                if b != o && graph.producer_step(t).is_some_and(|s| s > written) {
                    assert!(
                        problem
                            .conflict(stow_plan::BufferId(o as u32), stow_plan::BufferId(b as u32)),
                        "{} reuses output {}",
                        graph.tensors[t].name,
                        graph.tensors[out].name
                    );
                }
            }
        }
    }
}

use crate::alias::Alias;
use crate::attrs::{attributes, Attr};
use crate::dtype::element_type;
use crate::error::{OnnxError, Stage};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use stow_plan::{Buffer, ConflictModel, Problem};
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
}

impl TensorRole {
    /// True for tensors that live in the activation arena.
    pub fn in_arena(self) -> bool {
        self != TensorRole::Weight
    }
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
    /// The earlier tensor whose bytes this one shares, if any.
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
    /// The execution order the steps follow.
    pub order: ExecutionOrder,
    /// Lower bound of the arena under each order tried, in the order tried.
    pub order_bounds: Vec<(ExecutionOrder, u64)>,
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

    /// The step that writes `tensor`, or `None` for inputs and weights.
    pub fn producer_step(&self, tensor: usize) -> Option<usize> {
        self.ops.iter().position(|op| op.outputs.contains(&tensor))
    }

    /// The decluttered tract model the graph was read from.
    pub fn typed_model(&self) -> &TypedModel {
        &self.model
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

    /// The planning problem for the arena, with offsets aligned to `align`:
    /// one buffer per alias root, as large as its largest member and live
    /// from its first member's first step to its last member's last step.
    /// Returns the problem and, for every tensor, its buffer (`None` for
    /// weights).
    pub fn problem(&self, align: u64) -> (Problem, Vec<Option<usize>>) {
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
                    buffers.len() - 1
                }
            };
            buffer_of[id] = Some(b);
            let buf = &mut buffers[b];
            buf.size = buf.size.max(t.bytes);
            buf.lifetime.start = buf.lifetime.start.min(t.first_step);
            buf.lifetime.end = buf.lifetime.end.max(t.last_step + 1);
        }
        (Problem::new(buffers, ConflictModel::Lifetimes), buffer_of)
    }
}

fn tract_err(e: impl std::fmt::Display) -> OnnxError {
    OnnxError::tract(Stage::Analysis, e)
}

/// Records tensors and ops of a decluttered model in tract's RAM-optimised order.
/// An execution order to record the model in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecutionOrder {
    /// tract's RAM-optimised order (`eval_order_opt_ram`).
    TractRam,
    /// tract's plain topological order (`eval_order`).
    Topological,
}

impl ExecutionOrder {
    /// Every order the frontend can try.
    pub const ALL: [ExecutionOrder; 2] = [ExecutionOrder::TractRam, ExecutionOrder::Topological];

    /// Name shown to users.
    pub fn name(self) -> &'static str {
        match self {
            ExecutionOrder::TractRam => "tract-ram",
            ExecutionOrder::Topological => "topological",
        }
    }
}

/// Records tensors and ops of a decluttered model in the given order.
pub(crate) fn analyse(model: TypedModel, order: ExecutionOrder) -> Result<ModelGraph, OnnxError> {
    let order_used = order;
    let order = match order {
        ExecutionOrder::TractRam => model.eval_order_opt_ram(),
        ExecutionOrder::Topological => model.eval_order(),
    }
    .map_err(tract_err)?;
    let input_outlets = model.input_outlets().map_err(tract_err)?.to_vec();
    let output_outlets = model.output_outlets().map_err(tract_err)?.to_vec();
    let is_input: HashSet<OutletId> = input_outlets.iter().copied().collect();
    let is_output: HashSet<OutletId> = output_outlets.iter().copied().collect();

    let mut tensors: Vec<TensorInfo> = Vec::new();
    let mut weights: Vec<Option<Arc<Tensor>>> = Vec::new();
    let mut tensor_of: HashMap<OutletId, usize> = HashMap::new();
    let mut used_names: HashSet<String> = HashSet::new();
    let mut ops: Vec<OpInfo> = Vec::new();

    let mut add_tensor = |outlet: OutletId,
                          role: TensorRole,
                          step: u32,
                          tensors: &mut Vec<TensorInfo>,
                          weights: &mut Vec<Option<Arc<Tensor>>>,
                          value: Option<Arc<Tensor>>|
     -> Result<usize, OnnxError> {
        let node = model.node(outlet.node);
        let mut name = model
            .outlet_label(outlet)
            .map(|s| s.to_string())
            .unwrap_or_else(|| {
                if outlet.slot == 0 {
                    node.name.clone()
                } else {
                    format!("{}:{}", node.name, outlet.slot)
                }
            });
        if used_names.contains(&name) {
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
            let id = add_tensor(
                outlet,
                TensorRole::Input,
                0,
                &mut tensors,
                &mut weights,
                None,
            )?;
            tensor_of.insert(outlet, id);
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
            node: node_id,
        });
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

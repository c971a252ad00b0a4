//! Turning a planned model into bundle contents, and the kernel scratch
//! pass that runs before planning.

use std::borrow::Cow;
use stow_bundle::{
    AliasKind, AttrValue, Contents, DType, MemoryPool, Op, Provenance, Region, Tensor, TensorKind,
};
use stow_onnx::{ModelGraph, OpInfo, TensorRole};
use stow_plan::Plan;
use thiserror::Error;

/// Why a model graph and its plan could not become bundle contents, or its
/// kernel scratch could not be sized.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ContentsError {
    /// A tensor's element type has no bundle code.
    #[error("tensor `{tensor}` has element type {dtype}, which has no bundle code")]
    UnsupportedType {
        /// The tensor's name.
        tensor: String,
        /// Its element type name.
        dtype: String,
    },
    /// A step's scratch (floats per thread times threads) does not fit in
    /// 64 bits.
    #[error("scratch of step {step} (op `{op}`) is too large")]
    ScratchTooLarge {
        /// The step.
        step: usize,
        /// Its operator's name.
        op: String,
    },
    /// An operator reads or writes a tensor id the graph does not have (a
    /// graph edited after loading).
    #[error("step {step} (op `{op}`) uses tensor id {tensor}, which the graph does not have")]
    UnknownTensor {
        /// The step.
        step: usize,
        /// Its operator's name.
        op: String,
        /// The missing tensor id.
        tensor: usize,
    },
    /// An arena tensor has no buffer in the plan, or its offset does not
    /// fit in 64 bits (a plan made for another problem).
    #[error("tensor `{tensor}` has no planned offset")]
    Unplanned {
        /// The tensor's name.
        tensor: String,
    },
    /// A weight marked to be stored packed does not match its layout (a
    /// graph edited after marking).
    #[error("weight `{tensor}` cannot be stored in its kernel's panel layout")]
    Unpackable {
        /// The weight's name.
        tensor: String,
    },
}

/// A model graph with its arena plan: everything a bundle is made of.
#[derive(Clone, Copy, Debug)]
pub struct PlannedModel<'a> {
    /// The model.
    pub graph: &'a ModelGraph,
    /// For each tensor, its planned buffer (`None` for weights), as
    /// returned by [`ModelGraph::problem`].
    pub buffer_of: &'a [Option<usize>],
    /// The plan of that problem.
    pub plan: &'a Plan,
    /// Arena size without reuse (recorded in the bundle's provenance).
    pub naive_bytes: u64,
    /// Arena alignment the problem was made with.
    pub align: u64,
    /// File name of the model (recorded in the bundle's provenance).
    pub source_model: &'a str,
    /// Names of the plan's pools, fastest first; empty for one arena.
    pub pool_names: &'a [String],
}

/// The bundle code of an element type name (`f32`, `i64`, ... as
/// [`stow_onnx::TensorInfo::dtype`] names them), or `None` for a type
/// bundles cannot hold.
pub fn dtype_of(name: &str) -> Option<DType> {
    Some(match name {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "f64" => DType::F64,
        "i8" => DType::I8,
        "i16" => DType::I16,
        "i32" => DType::I32,
        "i64" => DType::I64,
        "u8" => DType::U8,
        "u16" => DType::U16,
        "u32" => DType::U32,
        "u64" => DType::U64,
        "bool" => DType::Bool,
        _ => return None,
    })
}

pub(crate) fn tensor_dtype(t: &stow_onnx::TensorInfo) -> Result<DType, ContentsError> {
    dtype_of(t.dtype).ok_or_else(|| ContentsError::UnsupportedType {
        tensor: t.name.clone(),
        dtype: t.dtype.to_string(),
    })
}

fn attr_value(a: &stow_onnx::Attr) -> AttrValue {
    match a {
        stow_onnx::Attr::Int(v) => AttrValue::Int(*v),
        stow_onnx::Attr::Ints(v) => AttrValue::Ints(v.clone()),
        stow_onnx::Attr::Float(v) => AttrValue::Float(*v),
        stow_onnx::Attr::Text(v) => AttrValue::Text(v.clone()),
    }
}

/// The bundle's record of `op`. A planned scratch tensor follows the
/// outputs (the `stow.scratch` attribute says it is there). Ids above
/// `u32::MAX` wrap; the writer refuses graphs that large anyway.
pub(crate) fn bundle_op(op: &OpInfo) -> Op {
    Op {
        name: op.name.clone(),
        op_type: op.op_type.clone(),
        attributes: op
            .attributes
            .iter()
            .map(|(k, v)| (k.clone(), attr_value(v)))
            .collect(),
        inputs: op.inputs.iter().map(|&i| i as u32).collect(),
        outputs: op
            .outputs
            .iter()
            .chain(&op.scratch)
            .map(|&i| i as u32)
            .collect(),
    }
}

/// A step whose kernel scratch, even at its smallest blocking, does not
/// fit under the arena's bound of model tensors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScratchAboveBound {
    /// The step.
    pub step: usize,
    /// Its operator's name.
    pub op: String,
    /// Bytes of scratch (all threads) beyond what is free at that step.
    pub bytes: u64,
}

/// Bytes free at each step under the lower bound of the model's own
/// tensors (no scratch yet), on the recorded order.
fn free_under_bound(graph: &ModelGraph) -> Vec<u64> {
    let (problem, _) = graph.problem(crate::options::DEFAULT_ALIGN);
    let mut live = vec![0u64; graph.ops.len() + 1];
    for b in &problem.buffers {
        let (start, end) = (b.lifetime.start as usize, b.lifetime.end as usize);
        for step in live.iter_mut().take(end.min(graph.ops.len())).skip(start) {
            *step = step.saturating_add(b.size);
        }
    }
    let bound = live.iter().copied().max().unwrap_or(0);
    live.iter().map(|&l| bound - l).collect()
}

/// Plans kernel scratch (packing buffers of convolutions and matrix
/// products) for `threads` threads into the arena: asks the runtime how
/// many floats each step's kernel needs and adds a scratch tensor
/// ([`ModelGraph::add_scratch`]) for every step that needs some.
///
/// Scratch does not raise the arena above the model's own bound: a step
/// whose usual scratch does not fit in the bytes free at that step gets a
/// budget ([`stow_runtime::kernels::SCRATCH_BUDGET_ATTR`]) and its kernel
/// packs smaller blocks (on the stack when the budget is below its
/// smallest blocking). Steps whose kernel cannot shrink its scratch that
/// far are returned, with the bytes they add.
///
/// Run it before [`ModelGraph::problem`]; `stow verify` runs it again on
/// the model to line its tensors up with a bundle's.
pub fn plan_scratch(
    graph: &mut ModelGraph,
    threads: u32,
) -> Result<Vec<ScratchAboveBound>, ContentsError> {
    let free = free_under_bound(graph);
    let mut above = Vec::new();
    for step in 0..graph.ops.len() {
        let floats = |graph: &ModelGraph| -> Result<usize, ContentsError> {
            let op = &graph.ops[step];
            let operands =
                |ids: &[usize]| -> Result<Vec<(DType, Vec<u64>)>, ContentsError> {
                    ids.iter()
                        .map(|&id| {
                            let t = graph.tensors.get(id).ok_or_else(|| {
                                ContentsError::UnknownTensor {
                                    step,
                                    op: op.name.clone(),
                                    tensor: id,
                                }
                            })?;
                            Ok((tensor_dtype(t)?, t.shape.clone()))
                        })
                        .collect()
                };
            Ok(stow_runtime::kernels::scratch_floats(
                &bundle_op(op),
                &operands(&op.inputs)?,
                &operands(&op.outputs)?,
            ))
        };
        let align = crate::options::DEFAULT_ALIGN;
        let threads64 = u64::from(threads.max(1));
        let room = free.get(step).copied().unwrap_or(0) / align * align;
        let budget = room / (4 * threads64);
        // A packed weight's depth block is the one its row-major kernel
        // would take within this budget.
        crate::packing::fit_depth_block(
            graph,
            step,
            usize::try_from(budget).unwrap_or(usize::MAX),
        )?;
        let mut wanted = floats(graph)?;
        if wanted == 0 {
            continue;
        }
        if wanted as u64 > budget {
            let op = &mut graph.ops[step];
            op.attributes.push((
                stow_runtime::kernels::SCRATCH_BUDGET_ATTR.into(),
                stow_onnx::Attr::Int(i64::try_from(budget).unwrap_or(i64::MAX)),
            ));
            op.attributes.sort_by(|a, b| a.0.cmp(&b.0));
            wanted = floats(graph)?;
            if wanted == 0 {
                continue;
            }
            let bytes = (wanted as u64 * 4 * threads64).div_ceil(align) * align;
            if bytes > room {
                above.push(ScratchAboveBound {
                    step,
                    op: graph.ops[step].name.clone(),
                    bytes: bytes - room,
                });
            }
        }
        let op = graph.ops[step].name.clone();
        graph
            .add_scratch(step, wanted as u64, threads)
            .ok_or(ContentsError::ScratchTooLarge { step, op })?;
    }
    Ok(above)
}

/// Per tensor, the bytes the bundle stores for it: a weight's (packed
/// weights are owned copies), empty for arena tensors.
pub type Weights<'g> = Vec<Cow<'g, [u8]>>;

/// Bundle contents and, per tensor, its weight bytes (empty for arena
/// tensors), ready for [`stow_bundle::to_bytes`]. Arena tensors sit at
/// their buffer's planned offset plus their offset inside it.
pub fn bundle_contents<'g>(p: &PlannedModel<'g>) -> Result<(Contents, Weights<'g>), ContentsError> {
    let g = p.graph;
    let mut tensors = Vec::with_capacity(g.tensors.len());
    let mut weights: Vec<Cow<'g, [u8]>> = Vec::with_capacity(g.tensors.len());
    let layouts = crate::packing::packed_layouts(g)?;
    for (id, t) in g.tensors.iter().enumerate() {
        let (kind, region) = match t.role {
            TensorRole::Input => (TensorKind::Input, Region::Arena),
            TensorRole::Output => (TensorKind::Output, Region::Arena),
            TensorRole::Activation => (TensorKind::Activation, Region::Arena),
            TensorRole::Weight => (TensorKind::Weight, Region::Weights),
            TensorRole::InputRows => (TensorKind::Input, Region::Rows),
        };
        let buffer = p.buffer_of.get(id).copied().flatten();
        let offset = match region {
            Region::Arena => buffer
                .and_then(|b| p.plan.offsets.get(b))
                .and_then(|o| o.checked_add(g.offset_in_buffer(id)))
                .ok_or_else(|| ContentsError::Unplanned {
                    tensor: t.name.clone(),
                })?,
            Region::Weights | Region::Rows => 0,
        };
        let pool = match (region, p.pool_names.is_empty()) {
            (Region::Arena, false) => buffer
                .and_then(|b| p.plan.pool.get(b))
                .map(|id| id.0)
                .ok_or_else(|| ContentsError::Unplanned {
                    tensor: t.name.clone(),
                })?,
            _ => 0,
        };
        weights.push(if region == Region::Weights {
            let raw = g.weight_bytes(id).unwrap_or(&[]);
            crate::packing::stored_bytes(raw, layouts.get(id).and_then(Option::as_ref)).ok_or_else(
                || ContentsError::Unpackable {
                    tensor: t.name.clone(),
                },
            )?
        } else {
            Cow::Borrowed(&[])
        });
        let band_of = g
            .banded_input(id)
            .map(|input| (AliasKind::InputRows, input as u32));
        tensors.push(Tensor {
            name: t.name.clone(),
            kind,
            dtype: tensor_dtype(t)?,
            shape: t.shape.clone(),
            region,
            offset,
            size: t.bytes,
            first_step: t.first_step,
            last_step: t.last_step,
            alias_of: t
                .alias
                .map(|a| match a {
                    stow_onnx::Alias::InPlace(of) => (AliasKind::InPlace, of as u32),
                    stow_onnx::Alias::View(of) => (AliasKind::View, of as u32),
                    stow_onnx::Alias::DepthwiseInPlace(of) => {
                        (AliasKind::DepthwiseInPlace, of as u32)
                    }
                    stow_onnx::Alias::ConcatSlice { concat_output, .. } => {
                        (AliasKind::ConcatSlice, concat_output as u32)
                    }
                })
                .or(band_of),
            pool,
            quant: g
                .quantization(id)
                .map(|(scale, zero_point)| stow_bundle::Quantization { scale, zero_point }),
        });
    }
    let pools: Vec<MemoryPool> = p
        .pool_names
        .iter()
        .enumerate()
        .map(|(i, name)| MemoryPool {
            name: name.clone(),
            bytes: p.plan.pool_bytes.get(i).copied().unwrap_or(0),
            align: p.align,
        })
        .collect();
    // With pools the header's arena is pool 0; without, the whole plan.
    let arena_bytes = match pools.first() {
        Some(first) => first.bytes,
        None => p.plan.arena_bytes,
    };
    let contents = Contents {
        arena_bytes,
        arena_align: p.align,
        tensors,
        inputs: g.inputs.iter().map(|&i| i as u32).collect(),
        outputs: g.outputs.iter().map(|&i| i as u32).collect(),
        ops: g.ops.iter().map(bundle_op).collect(),
        provenance: Provenance {
            strategy: p.plan.strategy.name().to_string(),
            lower_bound_bytes: p.plan.lower_bound,
            naive_bytes: p.naive_bytes,
            plan_micros: u64::try_from(p.plan.stats.elapsed.as_micros()).unwrap_or(u64::MAX),
            optimal: p.plan.optimal,
            producer: format!("stow {}", env!("CARGO_PKG_VERSION")),
            source_model: p.source_model.to_string(),
        },
        pools,
    };
    Ok((contents, weights))
}

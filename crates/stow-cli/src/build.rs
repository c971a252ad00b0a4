//! Turning a planned model into bundle contents.

use anyhow::{bail, Context, Result};
use stow_bundle::{
    AliasKind, AttrValue, Contents, DType, Op, Provenance, Region, Tensor, TensorKind,
};
use stow_onnx::{ModelGraph, TensorRole};
use stow_plan::Plan;

/// A model graph with its arena plan.
pub struct PlannedModel<'a> {
    /// The model.
    pub graph: &'a ModelGraph,
    /// For each tensor, its planned buffer (`None` for weights).
    pub buffer_of: &'a [Option<usize>],
    /// The plan.
    pub plan: &'a Plan,
    /// Arena size without reuse.
    pub naive_bytes: u64,
    /// Arena alignment.
    pub align: u64,
    /// File name of the model.
    pub source_model: String,
}

/// The bundle code of an element type name.
pub fn dtype_of(name: &str) -> Result<DType> {
    Ok(match name {
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
        other => bail!("element type {other} has no bundle code"),
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
/// outputs (the `stow.scratch` attribute says it is there).
fn bundle_op(op: &stow_onnx::OpInfo) -> Op {
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

/// Plans kernel scratch (packing buffers of convolutions and matrix
/// products) for `threads` threads into the arena: asks the runtime how
/// many floats each step's kernel needs and adds a scratch tensor for
/// every step that needs some.
pub fn plan_scratch(graph: &mut ModelGraph, threads: u32) -> Result<()> {
    for step in 0..graph.ops.len() {
        let op = &graph.ops[step];
        let bundle_op = bundle_op(op);
        let shape = |ids: &[usize]| -> Result<Vec<(DType, Vec<u64>)>> {
            ids.iter()
                .map(|&t| {
                    let t = &graph.tensors[t];
                    Ok((dtype_of(t.dtype)?, t.shape.clone()))
                })
                .collect()
        };
        let floats = stow_runtime::kernels::scratch_floats(
            &bundle_op,
            &shape(&op.inputs)?,
            &shape(&op.outputs)?,
        );
        if floats > 0 {
            graph
                .add_scratch(step, floats as u64, threads)
                .with_context(|| format!("scratch of step {step} is too large"))?;
        }
    }
    Ok(())
}

/// Bundle contents and per-tensor weight bytes (empty for arena tensors).
pub fn bundle_contents<'g>(p: &PlannedModel<'g>) -> Result<(Contents, Vec<&'g [u8]>)> {
    let g = p.graph;
    let offset_of: Vec<Option<u64>> = p
        .buffer_of
        .iter()
        .enumerate()
        .map(|(id, b)| b.map(|b| p.plan.offsets[b] + g.offset_in_buffer(id)))
        .collect();
    let mut tensors = Vec::with_capacity(g.tensors.len());
    let mut weights: Vec<&'g [u8]> = Vec::with_capacity(g.tensors.len());
    for (id, t) in g.tensors.iter().enumerate() {
        let (kind, region) = match t.role {
            TensorRole::Input => (TensorKind::Input, Region::Arena),
            TensorRole::Output => (TensorKind::Output, Region::Arena),
            TensorRole::Activation => (TensorKind::Activation, Region::Arena),
            TensorRole::Weight => (TensorKind::Weight, Region::Weights),
        };
        let offset = match region {
            Region::Arena => match offset_of[id] {
                Some(o) => o,
                None => bail!("tensor `{}` has no planned offset", t.name),
            },
            Region::Weights => 0,
        };
        weights.push(if region == Region::Weights {
            g.weight_bytes(id).unwrap_or(&[])
        } else {
            &[]
        });
        tensors.push(Tensor {
            name: t.name.clone(),
            kind,
            dtype: dtype_of(t.dtype)?,
            shape: t.shape.clone(),
            region,
            offset,
            size: t.bytes,
            first_step: t.first_step,
            last_step: t.last_step,
            alias_of: t.alias.map(|a| match a {
                stow_onnx::Alias::InPlace(of) => (AliasKind::InPlace, of as u32),
                stow_onnx::Alias::View(of) => (AliasKind::View, of as u32),
                stow_onnx::Alias::ConcatSlice { concat_output, .. } => {
                    (AliasKind::ConcatSlice, concat_output as u32)
                }
            }),
        });
    }
    let ops = g.ops.iter().map(bundle_op).collect();
    let contents = Contents {
        arena_bytes: p.plan.arena_bytes,
        arena_align: p.align,
        tensors,
        inputs: g.inputs.iter().map(|&i| i as u32).collect(),
        outputs: g.outputs.iter().map(|&i| i as u32).collect(),
        ops,
        provenance: Provenance {
            strategy: p.plan.strategy.name().to_string(),
            lower_bound_bytes: p.plan.lower_bound,
            naive_bytes: p.naive_bytes,
            plan_micros: p.plan.stats.elapsed.as_micros() as u64,
            optimal: p.plan.optimal,
            producer: format!("stow {}", env!("CARGO_PKG_VERSION")),
            source_model: p.source_model.clone(),
        },
    };
    Ok((contents, weights))
}

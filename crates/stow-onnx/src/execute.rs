//! Runs a model node by node on tract's kernels with every arena tensor
//! living in one real byte buffer at its planned offset.
//!
//! The arena starts filled with a poison pattern. Before each step, every
//! input the step reads is taken from the arena (or, for weights, from the
//! caller's weight bytes) and compared bit for bit with the value tract
//! computed for it; the first difference names the tensor, the step that
//! wrote it and the step that found it. Outputs are finally compared with
//! tract's own run of the same model on the same inputs.
//!
//! A concat done in place writes nothing: its output's bytes must already
//! be what tract computes, or the run stops at the concat.

use crate::error::{OnnxError, Stage};
use crate::graph::{ModelGraph, TensorRole};
use std::collections::HashMap;
use tract_onnx::prelude::*;
use tract_onnx::tract_core::plan::{EvalContext, Seating, SessionId, SimplePlan};

/// Byte written over the whole arena before a run: every f32 made of it is
/// a NaN, so a read of bytes nobody wrote shows up at once.
pub const POISON: u8 = 0xFF;

/// Where each tensor's bytes come from during an arena run.
pub struct ArenaLayout<'a> {
    /// Arena size in bytes.
    pub arena_bytes: u64,
    /// Arena offset per tensor id (`None` for weights).
    pub offsets: Vec<Option<u64>>,
    /// Weight bytes per tensor id, as the bundle stores them.
    pub weight: &'a dyn Fn(usize) -> Option<&'a [u8]>,
}

/// The first disagreement between the arena run and tract's values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The tensor whose bytes differ.
    pub tensor: String,
    /// The tensor id.
    pub tensor_id: usize,
    /// The step that found the difference (the reader), or the last step for
    /// a graph output.
    pub step: usize,
    /// The op run at that step.
    pub op: String,
    /// The step that wrote the tensor (`None` for inputs and weights).
    pub written_at: Option<usize>,
    /// How many bytes differ.
    pub differing_bytes: usize,
    /// True when the tensor is a weight (its bundle bytes differ from the model's).
    pub is_weight: bool,
}

/// What an arena run found.
#[derive(Debug)]
pub struct ArenaRun {
    /// The first mismatch, if any.
    pub mismatch: Option<Mismatch>,
    /// Graph outputs read from the arena at the end (empty after a mismatch).
    pub outputs: Vec<Tensor>,
    /// Steps executed.
    pub steps: usize,
}

fn err(e: impl std::fmt::Display) -> OnnxError {
    OnnxError::tract(Stage::Analysis, e)
}

fn exec_err(node: &str, e: impl std::fmt::Display) -> OnnxError {
    OnnxError::Tract {
        stage: Stage::Analysis,
        node: Some(node.to_string()),
        message: format!("{e:#}"),
    }
}

/// Bytes of `t` as the bundle stores them (`TDim` as i64).
fn stored_bytes(t: &Tensor) -> Result<std::borrow::Cow<'_, [u8]>, OnnxError> {
    if t.datum_type() == DatumType::TDim {
        Ok(std::borrow::Cow::Owned(
            t.cast_to::<i64>().map_err(err)?.as_bytes().to_vec(),
        ))
    } else {
        Ok(std::borrow::Cow::Borrowed(t.as_bytes()))
    }
}

/// A tensor of `like`'s type and shape built from `bytes`.
fn tensor_from(like: &Tensor, bytes: &[u8]) -> Result<Tensor, OnnxError> {
    let dt = if like.datum_type() == DatumType::TDim {
        DatumType::I64
    } else {
        like.datum_type()
    };
    let mut t = Tensor::zero_dt(dt, like.shape()).map_err(err)?;
    t.as_bytes_mut().copy_from_slice(bytes);
    if like.datum_type() == DatumType::TDim {
        t = t.cast_to::<TDim>().map_err(err)?.into_owned();
    }
    Ok(t)
}

fn range(offset: u64, size: u64, arena: usize) -> Result<std::ops::Range<usize>, OnnxError> {
    let start = usize::try_from(offset).map_err(err)?;
    let end = start
        .checked_add(usize::try_from(size).map_err(err)?)
        .ok_or_else(|| err("offset overflow"))?;
    if end > arena {
        return Err(err(format!(
            "tensor range {start}..{end} is outside the arena of {arena} bytes"
        )));
    }
    Ok(start..end)
}

fn count_diff(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).filter(|(x, y)| x != y).count() + a.len().abs_diff(b.len())
}

/// Runs `graph` with its tensors at `layout`'s offsets on `inputs` (one per
/// graph input, in order).
pub fn run_in_arena(
    graph: &ModelGraph,
    layout: &ArenaLayout,
    inputs: &[Tensor],
) -> Result<ArenaRun, OnnxError> {
    if inputs.len() != graph.inputs.len() {
        return Err(err(format!(
            "{} inputs given, the model has {}",
            inputs.len(),
            graph.inputs.len()
        )));
    }
    let arena_len = usize::try_from(layout.arena_bytes).map_err(err)?;
    let mut arena = vec![POISON; arena_len];
    let model = graph.typed_model();
    // tract's value for every tensor still needed; dropped after its last read.
    let mut reference: HashMap<usize, TValue> = HashMap::new();
    for (&tid, value) in graph.inputs.iter().zip(inputs) {
        let info = &graph.tensors[tid];
        let bytes = stored_bytes(value)?;
        if bytes.len() as u64 != info.bytes {
            return Err(err(format!(
                "input `{}`: {} bytes given, {} expected",
                info.name,
                bytes.len(),
                info.bytes
            )));
        }
        // An input written in bands of rows: each band gets its rows.
        let bands = match graph.input_bands.iter().find(|b| b.input == tid) {
            Some(entry) => entry
                .bands
                .iter()
                .map(|&(band, a, b)| {
                    let axis = value.rank().saturating_sub(2);
                    Ok((band, value.slice(axis, a, b).map_err(err)?))
                })
                .collect::<Result<Vec<_>, OnnxError>>()?,
            None => vec![(tid, value.clone())],
        };
        for (tid, value) in bands {
            let info = &graph.tensors[tid];
            let offset = layout.offsets[tid]
                .ok_or_else(|| err(format!("input `{}` has no arena offset", info.name)))?;
            arena[range(offset, info.bytes, arena_len)?].copy_from_slice(&stored_bytes(&value)?);
            reference.insert(tid, value.into_tvalue());
        }
    }
    let symbols = SymbolValues::default();
    let seating = Seating::single();
    let mut remaining_reads: HashMap<usize, usize> = HashMap::new();
    for op in &graph.ops {
        for &i in &op.inputs {
            *remaining_reads.entry(i).or_default() += 1;
        }
    }
    for (step, op) in graph.ops.iter().enumerate() {
        let mut args: TVec<TValue> = tvec![];
        for &tid in &op.inputs {
            let info = &graph.tensors[tid];
            let expected = match reference.get(&tid) {
                Some(v) => v.clone(),
                None if info.role == TensorRole::Weight => {
                    let konst = graph
                        .weight_tensor(tid)
                        .ok_or_else(|| err(format!("weight `{}` has no value", info.name)))?;
                    konst.into_tvalue()
                }
                None => {
                    return Err(err(format!(
                        "tensor `{}` read at step {step} before it was written",
                        info.name
                    )))
                }
            };
            let expected_bytes = stored_bytes(&expected)?;
            let (found, is_weight): (&[u8], bool) = match layout.offsets[tid] {
                Some(offset) => (&arena[range(offset, info.bytes, arena_len)?], false),
                None => ((layout.weight)(tid).unwrap_or(&[]), true),
            };
            if found != &expected_bytes[..] {
                return Ok(ArenaRun {
                    mismatch: Some(Mismatch {
                        tensor: info.name.clone(),
                        tensor_id: tid,
                        step,
                        op: op.name.clone(),
                        written_at: graph.producer_step(tid),
                        differing_bytes: count_diff(found, &expected_bytes),
                        is_weight,
                    }),
                    outputs: vec![],
                    steps: step,
                });
            }
            args.push(tensor_from(&expected, found)?.into_tvalue());
        }
        let node = model.node(op.node);
        let ctx = EvalContext {
            session: SessionId::NONE,
            node_id: op.node,
            symbols: &symbols,
            scenario: None,
            shared: None,
            seating: &seating,
        };
        let outputs = (|| -> TractResult<TVec<TValue>> {
            let state = node.op.state(&ctx)?;
            let out = match state {
                Some(mut s) => s.eval(&ctx, node.op.as_op(), args),
                None => node.op.eval(&ctx, args),
            };
            node.op.drop_session(SessionId::NONE, op.node);
            out
        })()
        .map_err(|e| exec_err(&op.name, e))?;
        if outputs.len() != op.outputs.len() {
            return Err(exec_err(
                &op.name,
                format!(
                    "{} outputs produced, {} expected",
                    outputs.len(),
                    op.outputs.len()
                ),
            ));
        }
        for (&tid, value) in op.outputs.iter().zip(outputs) {
            let info = &graph.tensors[tid];
            let bytes = stored_bytes(&value)?;
            if bytes.len() as u64 != info.bytes {
                return Err(exec_err(
                    &op.name,
                    format!(
                        "output `{}` has {} bytes, {} planned",
                        info.name,
                        bytes.len(),
                        info.bytes
                    ),
                ));
            }
            let offset = layout.offsets[tid]
                .ok_or_else(|| err(format!("`{}` has no arena offset", info.name)))?;
            let place = range(offset, info.bytes, arena_len)?;
            if graph.concat_in_place(step) {
                // The producers wrote the slices; copying tract's value here
                // would hide a slice written to the wrong place.
                if arena[place.clone()] != bytes[..] {
                    return Ok(ArenaRun {
                        mismatch: Some(Mismatch {
                            tensor: info.name.clone(),
                            tensor_id: tid,
                            step,
                            op: op.name.clone(),
                            written_at: Some(step),
                            differing_bytes: count_diff(&arena[place], &bytes),
                            is_weight: false,
                        }),
                        outputs: vec![],
                        steps: step,
                    });
                }
            } else {
                arena[place].copy_from_slice(&bytes);
            }
            reference.insert(tid, value);
        }
        for &tid in &op.inputs {
            let left = remaining_reads.get_mut(&tid).map(|n| {
                *n -= 1;
                *n
            });
            if left == Some(0) && !graph.outputs.contains(&tid) {
                reference.remove(&tid);
            }
        }
    }
    let last = graph.ops.len().saturating_sub(1);
    let mut outputs = Vec::with_capacity(graph.outputs.len());
    for &tid in &graph.outputs {
        let info = &graph.tensors[tid];
        let Some(offset) = layout.offsets[tid] else {
            outputs.push(
                graph
                    .weight_tensor(tid)
                    .ok_or_else(|| err("constant output without value"))?,
            );
            continue;
        };
        let expected = reference
            .get(&tid)
            .ok_or_else(|| err(format!("output `{}` was never written", info.name)))?;
        let expected_bytes = stored_bytes(expected)?;
        let found = &arena[range(offset, info.bytes, arena_len)?];
        if found != &expected_bytes[..] {
            return Ok(ArenaRun {
                mismatch: Some(Mismatch {
                    tensor: info.name.clone(),
                    tensor_id: tid,
                    step: last,
                    op: graph
                        .ops
                        .get(last)
                        .map(|o| o.name.clone())
                        .unwrap_or_default(),
                    written_at: graph.producer_step(tid),
                    differing_bytes: count_diff(found, &expected_bytes),
                    is_weight: false,
                }),
                outputs: vec![],
                steps: graph.ops.len(),
            });
        }
        outputs.push(tensor_from(expected, found)?);
    }
    Ok(ArenaRun {
        mismatch: None,
        outputs,
        steps: graph.ops.len(),
    })
}

/// tract's own run of the decluttered model on `inputs`.
pub fn run_reference(graph: &ModelGraph, inputs: &[Tensor]) -> Result<Vec<Tensor>, OnnxError> {
    let plan = SimplePlan::new(graph.typed_model().clone()).map_err(err)?;
    let out = plan
        .run(inputs.iter().cloned().map(|t| t.into_tvalue()).collect())
        .map_err(err)?;
    Ok(out.into_iter().map(|v| v.into_tensor()).collect())
}

//! What `stow inspect --json` prints, as a value: one implementation for
//! the command and the Python package (`bundle.inspect()`).

use serde_json::{json, Value};
use stow_bundle::{AliasKind, Contents, Region, TensorKind};
use stow_runtime::Bundle;

/// `input`, `output`, `activation` or `weight`.
pub fn kind_name(k: TensorKind) -> &'static str {
    match k {
        TensorKind::Input => "input",
        TensorKind::Output => "output",
        TensorKind::Activation => "activation",
        TensorKind::Weight => "weight",
    }
}

fn alias_kind_name(k: AliasKind) -> &'static str {
    match k {
        AliasKind::InPlace => "in_place",
        AliasKind::View => "view",
        AliasKind::ConcatSlice => "concat_slice",
        AliasKind::DepthwiseInPlace => "depthwise_in_place",
        AliasKind::InputRows => "input_rows",
    }
}

/// What one memory pool of a bundle holds and serves, computed from the
/// bundle alone (so `inspect` shows it for any bundle; a bundle without
/// pools is one pool, `arena`).
#[derive(Clone, Debug, PartialEq)]
pub struct PoolUse {
    /// The pool's name (`arena` without pools).
    pub name: String,
    /// Bytes of its buffer.
    pub bytes: u64,
    /// Alignment of its first byte.
    pub align: u64,
    /// Most bytes of the pool's tensors live at one step. A tensor that
    /// shares bytes with another (in place, view, concat slice) is counted
    /// once, through the tensor it aliases.
    pub peak_live: u64,
    /// Bytes read and written by the steps in this pool: each operand of
    /// each operator counts its size once.
    pub traffic: u64,
}

impl PoolUse {
    /// `peak_live / bytes` (0 for an empty pool).
    pub fn fill(&self) -> f64 {
        if self.bytes == 0 {
            0.0
        } else {
            self.peak_live as f64 / self.bytes as f64
        }
    }
}

/// Size, fill at the peak and traffic of every pool of `c`.
pub fn pool_use(c: &Contents) -> Vec<PoolUse> {
    let names: Vec<String> = if c.pools.is_empty() {
        vec!["arena".to_string()]
    } else {
        c.pools.iter().map(|p| p.name.clone()).collect()
    };
    let sizes = c.pool_sizes();
    let steps = c.ops.len().max(1);
    let mut live = vec![vec![0u64; steps]; names.len()];
    let mut traffic = vec![0u64; names.len()];
    for t in c.tensors.iter().filter(|t| t.region == Region::Arena) {
        if t.alias_of.is_some_and(|(k, _)| k.shares_bytes()) {
            continue;
        }
        if let Some(row) = live.get_mut(t.pool as usize) {
            let last = (t.last_step as usize).min(steps - 1);
            for slot in row.iter_mut().take(last + 1).skip(t.first_step as usize) {
                *slot = slot.saturating_add(t.size);
            }
        }
    }
    for op in &c.ops {
        for &id in op.inputs.iter().chain(&op.outputs) {
            if let Some(t) = c.tensors.get(id as usize) {
                if t.region == Region::Arena {
                    if let Some(slot) = traffic.get_mut(t.pool as usize) {
                        *slot = slot.saturating_add(t.size);
                    }
                }
            }
        }
    }
    names
        .into_iter()
        .enumerate()
        .map(|(p, name)| PoolUse {
            name,
            bytes: sizes.get(p).map_or(0, |s| s.0),
            align: sizes.get(p).map_or(1, |s| s.1),
            peak_live: live[p].iter().copied().max().unwrap_or(0),
            traffic: traffic[p],
        })
        .collect()
}

/// The bundle as one JSON object: header numbers, the plan's provenance
/// (arena, lower bound, naive size, strategy), input and output names, and
/// every tensor and operator.
pub fn json(bundle: &Bundle) -> Value {
    let c = bundle.contents();
    // Validation checked every tensor id a bundle refers to; a missing one
    // still prints as null rather than panicking.
    let name_of = |id: u32| c.tensors.get(id as usize).map(|t| t.name.clone());
    let tensors: Vec<_> = c
        .tensors
        .iter()
        .enumerate()
        .map(|(id, t)| {
            json!({
                "id": id,
                "name": t.name,
                "kind": kind_name(t.kind),
                "dtype": t.dtype.name(),
                "shape": t.shape,
                "region": t.region.name(),
                "offset": t.offset,
                "size": t.size,
                "first_step": t.first_step,
                "last_step": t.last_step,
                "alias_of": t.alias_of.and_then(|(_, of)| name_of(of)),
                "alias_kind": t.alias_of.map(|(k, _)| alias_kind_name(k)),
                "pool": t.pool,
                "packed_for": c.packed_reader(id as u32).map(|(op, _)| op.name.clone()),
                "packed_depth_block": c.packed_reader(id as u32).map(|(_, kc)| kc),
                "quant_scale": t.quant.map(|q| q.scale),
                "quant_zero_point": t.quant.map(|q| q.zero_point),
            })
        })
        .collect();
    let ops: Vec<_> = c
        .ops
        .iter()
        .map(|o| json!({"name": o.name, "op_type": o.op_type, "inputs": o.inputs, "outputs": o.outputs}))
        .collect();
    let uses = pool_use(c);
    let total: u64 = uses.iter().map(|p| p.traffic).sum();
    let pools: Vec<_> = uses
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "bytes": p.bytes,
                "align": p.align,
                "peak_live_bytes": p.peak_live,
                "fill": p.fill(),
                "traffic_bytes": p.traffic,
                "traffic_share": if total == 0 { 0.0 } else { p.traffic as f64 / total as f64 },
            })
        })
        .collect();
    json!({
        "format_version": bundle.header().version,
        "flags": bundle.header().flags,
        "file_bytes": bundle.header().file_len,
        "arena_bytes": c.arena_bytes,
        "arena_align": c.arena_align,
        "lower_bound_bytes": c.provenance.lower_bound_bytes,
        "naive_bytes": c.provenance.naive_bytes,
        "strategy": c.provenance.strategy,
        "optimal": c.provenance.optimal,
        "plan_micros": c.provenance.plan_micros,
        "source_model": c.provenance.source_model,
        "inputs": c.inputs.iter().filter_map(|&i| name_of(i)).collect::<Vec<_>>(),
        "outputs": c.outputs.iter().filter_map(|&i| name_of(i)).collect::<Vec<_>>(),
        "pools": pools,
        "tensors": tensors,
        "ops": ops,
    })
}

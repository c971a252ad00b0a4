//! What `stow inspect --json` prints, as a value: one implementation for
//! the command and the Python package (`bundle.inspect()`).

use serde_json::{json, Value};
use stow_bundle::{AliasKind, Region, TensorKind};
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
    }
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
                "region": if t.region == Region::Arena { "arena" } else { "weights" },
                "offset": t.offset,
                "size": t.size,
                "first_step": t.first_step,
                "last_step": t.last_step,
                "alias_of": t.alias_of.and_then(|(_, of)| name_of(of)),
                "alias_kind": t.alias_of.map(|(k, _)| alias_kind_name(k)),
            })
        })
        .collect();
    let ops: Vec<_> = c
        .ops
        .iter()
        .map(|o| json!({"name": o.name, "op_type": o.op_type, "inputs": o.inputs, "outputs": o.outputs}))
        .collect();
    json!({
        "format_version": bundle.header().version,
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
        "tensors": tensors,
        "ops": ops,
    })
}

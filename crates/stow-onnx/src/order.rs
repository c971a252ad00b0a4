//! An execution order of our own: a list schedule that, among the nodes
//! ready to run, picks the one that frees the most bytes net of what it
//! allocates. tract's RAM order counts live tensors, not bytes; on
//! branchy graphs (Inception, DenseNet) the two disagree.

use std::collections::{HashMap, HashSet};
use tract_onnx::prelude::*;
use tract_onnx::tract_core::ops::konst::Const;
use tract_onnx::tract_core::ops::source::TypedSource;

/// Bytes an outlet takes in the arena (0 for constants and symbolic shapes).
fn outlet_bytes(model: &TypedModel, outlet: OutletId) -> u64 {
    if model.node(outlet.node).op_is::<Const>() {
        return 0;
    }
    let Ok(fact) = model.outlet_fact(outlet) else {
        return 0;
    };
    let Some(shape) = fact.shape.as_concrete() else {
        return 0;
    };
    shape
        .iter()
        .try_fold(fact.datum_type.size_of() as u64, |acc, &d| {
            acc.checked_mul(d as u64)
        })
        .unwrap_or(u64::MAX)
}

/// Greedy "free the most bytes first" order over the nodes tract would run
/// (constants and sources first; ties go to tract's RAM order).
pub(crate) fn greedy_free(model: &TypedModel) -> TractResult<Vec<usize>> {
    let base = model.eval_order_opt_ram()?;
    let rank: HashMap<usize, usize> = base.iter().enumerate().map(|(r, &n)| (n, r)).collect();
    let outputs: HashSet<OutletId> = model.output_outlets()?.iter().copied().collect();
    let mut remaining: HashMap<OutletId, usize> = HashMap::new();
    let mut missing = vec![0usize; base.len()];
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); base.len()];
    for (r, &n) in base.iter().enumerate() {
        for input in &model.node(n).inputs {
            *remaining.entry(*input).or_default() += 1;
            let p = *rank.get(&input.node).ok_or_else(|| {
                TractError::msg(format!("node {n} reads a node outside the order"))
            })?;
            missing[r] += 1;
            consumers[p].push(r);
        }
    }
    let mut ready: Vec<usize> = (0..base.len()).filter(|&r| missing[r] == 0).collect();
    let mut order = Vec::with_capacity(base.len());
    while !ready.is_empty() {
        let score = |r: usize| -> i128 {
            let node = model.node(base[r]);
            if node.op_is::<Const>() || node.op_is::<TypedSource>() {
                return i128::MAX;
            }
            let mut freed = 0i128;
            let mut seen: Vec<OutletId> = Vec::new();
            for input in &node.inputs {
                if seen.contains(input) {
                    continue;
                }
                seen.push(*input);
                let uses = node.inputs.iter().filter(|i| *i == input).count();
                if remaining.get(input) == Some(&uses) && !outputs.contains(input) {
                    freed += outlet_bytes(model, *input) as i128;
                }
            }
            let allocated: i128 = (0..node.outputs.len())
                .map(|slot| outlet_bytes(model, OutletId::new(node.id, slot)) as i128)
                .sum();
            freed - allocated
        };
        let (pos, _) = ready
            .iter()
            .enumerate()
            .max_by_key(|&(_, &r)| (score(r), std::cmp::Reverse(r)))
            .ok_or_else(|| TractError::msg("no ready node"))?;
        let r = ready.swap_remove(pos);
        let node = model.node(base[r]);
        for input in &node.inputs {
            if let Some(left) = remaining.get_mut(input) {
                *left = left.saturating_sub(1);
            }
        }
        for &c in &consumers[r] {
            missing[c] -= 1;
            if missing[c] == 0 {
                ready.push(c);
            }
        }
        order.push(base[r]);
    }
    if order.len() != base.len() {
        return Err(TractError::msg("the graph has a cycle"));
    }
    Ok(order)
}

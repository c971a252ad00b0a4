//! Folds `If` nodes whose condition is a constant before tract sees the
//! model.
//!
//! A model that takes a sample rate or a mode flag branches on it
//! (`If(Equal(sr, 16000))`). Once `--set` makes that input a constant, the
//! condition is known, but tract types both branches before it folds
//! either, and the branch for the other value may not type at the shapes
//! fixed for this one. So the condition is evaluated here, on the ONNX
//! graph itself, from small constants through a few scalar operators, and
//! the `If` is replaced by the nodes of the branch it selects.

use crate::error::OnnxError;
use std::collections::{HashMap, HashSet};
use tract_onnx::data_resolver::MmapDataResolver;
use tract_onnx::pb::{AttributeProto, GraphProto, NodeProto, TensorProto};

/// Constants larger than this are not followed (conditions are scalars).
const SMALL: usize = 64;

/// A known small value: its elements as f64.
#[derive(Clone, Debug)]
struct Value(Vec<f64>);

fn tensor_value(t: &TensorProto) -> Option<Value> {
    let count = t.dims.iter().try_fold(1i64, |n, &d| n.checked_mul(d))?;
    if !(0..=SMALL as i64).contains(&count) {
        return None;
    }
    let tensor = tract_onnx::tensor::load_tensor(&MmapDataResolver, t, None).ok()?;
    let cast = tensor.cast_to::<f64>().ok()?;
    let values = cast
        .to_plain_array_view::<f64>()
        .ok()?
        .iter()
        .copied()
        .collect();
    Some(Value(values))
}

fn attr<'a>(node: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    node.attribute.iter().find(|a| a.name == name)
}

/// The node's output value when every input is known and the operator is
/// one of the few a condition is made of.
fn evaluate(node: &NodeProto, known: &HashMap<String, Value>) -> Option<Value> {
    if node.op_type == "Constant" {
        return tensor_value(attr(node, "value")?.t.as_ref()?);
    }
    let ins: Vec<&Value> = node
        .input
        .iter()
        .map(|i| known.get(i))
        .collect::<Option<_>>()?;
    let bool_of = |x: f64| if x != 0.0 { 1.0 } else { 0.0 };
    let unary =
        |f: &dyn Fn(f64) -> f64| Some(Value(ins.first()?.0.iter().map(|&x| f(x)).collect()));
    let binary = |f: &dyn Fn(f64, f64) -> f64| {
        let (a, b) = (&ins.first()?.0, &ins.get(1)?.0);
        let n = a.len().max(b.len());
        if !(a.len() == n || a.len() == 1) || !(b.len() == n || b.len() == 1) {
            return None;
        }
        let at = |v: &Vec<f64>, i: usize| if v.len() == 1 { v[0] } else { v[i] };
        Some(Value((0..n).map(|i| f(at(a, i), at(b, i))).collect()))
    };
    match node.op_type.as_str() {
        "Identity" | "Squeeze" | "Unsqueeze" | "Reshape" => Some((*ins.first()?).clone()),
        "Not" => unary(&|x| 1.0 - bool_of(x)),
        "Cast" => {
            let to = attr(node, "to")?.i;
            match to {
                9 => unary(&bool_of),
                1 | 11 => unary(&|x| x),
                // Integer types truncate toward zero.
                _ => unary(&f64::trunc),
            }
        }
        "Equal" => binary(&|a, b| (a == b) as u8 as f64),
        "Greater" => binary(&|a, b| (a > b) as u8 as f64),
        "Less" => binary(&|a, b| (a < b) as u8 as f64),
        "GreaterOrEqual" => binary(&|a, b| (a >= b) as u8 as f64),
        "LessOrEqual" => binary(&|a, b| (a <= b) as u8 as f64),
        "And" => binary(&|a, b| bool_of(a) * bool_of(b)),
        "Or" => binary(&|a, b| bool_of(bool_of(a) + bool_of(b))),
        "Xor" => binary(&|a, b| (bool_of(a) != bool_of(b)) as u8 as f64),
        _ => None,
    }
}

/// Names of the values `graph`'s own nodes and initializers make.
fn local_names(graph: &GraphProto) -> HashSet<String> {
    graph
        .node
        .iter()
        .flat_map(|n| n.output.iter().cloned())
        .chain(graph.initializer.iter().map(|t| t.name.clone()))
        .filter(|n| !n.is_empty())
        .collect()
}

/// The branch's nodes and initializers, its local names prefixed so they
/// cannot meet the outer graph's, followed by an `Identity` from each
/// branch output to the `If`'s output.
fn inline_branch(
    if_node: &NodeProto,
    branch: &GraphProto,
    outer: &HashSet<String>,
    into: &mut Vec<NodeProto>,
    initializers: &mut Vec<TensorProto>,
) -> bool {
    // Only names the outer graph also uses are renamed (ONNX asks for
    // unique names, so usually none). Subgraphs inside the branch may
    // read the branch's names: with a clash there, leave the If alone.
    let local: HashSet<String> = local_names(branch).intersection(outer).cloned().collect();
    let nested = branch.node.iter().any(|n| {
        n.attribute
            .iter()
            .any(|a| a.g.is_some() || !a.graphs.is_empty())
    });
    if !local.is_empty() && nested {
        return false;
    }
    let prefix = if if_node.name.is_empty() {
        if_node.output.first().cloned().unwrap_or_default()
    } else {
        if_node.name.clone()
    };
    let rename = |n: &String| {
        if local.contains(n) {
            format!("{prefix}/{n}")
        } else {
            n.clone()
        }
    };
    for t in &branch.initializer {
        let mut t = t.clone();
        t.name = rename(&t.name);
        initializers.push(t);
    }
    for node in &branch.node {
        let mut node = node.clone();
        node.input = node.input.iter().map(rename).collect();
        node.output = node.output.iter().map(rename).collect();
        if !node.name.is_empty() {
            node.name = format!("{prefix}/{}", node.name);
        }
        into.push(node);
    }
    for (out, inner) in if_node.output.iter().zip(&branch.output) {
        into.push(NodeProto {
            input: vec![rename(&inner.name)],
            output: vec![out.clone()],
            name: format!("{prefix}/{}", out),
            op_type: "Identity".into(),
            ..Default::default()
        });
    }
    true
}

/// The name tract gives the node made of `node`.
pub(crate) fn node_key(node: &NodeProto) -> String {
    if !node.name.is_empty() {
        node.name.clone()
    } else {
        node.output.first().cloned().unwrap_or_default()
    }
}

/// True when `graph` (not its subgraphs) has an `If` node.
pub(crate) fn has_branches(graph: &GraphProto) -> bool {
    graph.node.iter().any(|n| n.op_type == "If")
}

/// Replaces every `If` of `graph` whose condition follows from small
/// constants, or is given in `conditions` (by [`node_key`]), by the branch
/// it selects (repeatedly, so an `If` inside the chosen branch folds too).
/// Returns how many were folded.
pub(crate) fn fold_constant_branches(
    graph: &mut GraphProto,
    conditions: &HashMap<String, bool>,
) -> Result<usize, OnnxError> {
    let mut folded = 0;
    loop {
        let mut known: HashMap<String, Value> = graph
            .initializer
            .iter()
            .filter_map(|t| Some((t.name.clone(), tensor_value(t)?)))
            .collect();
        let outer: HashSet<String> = graph
            .node
            .iter()
            .flat_map(|n| n.output.iter().chain(&n.input).cloned())
            .chain(graph.input.iter().map(|i| i.name.clone()))
            .chain(graph.initializer.iter().map(|t| t.name.clone()))
            .collect();
        let mut nodes = Vec::with_capacity(graph.node.len());
        let mut initializers = Vec::new();
        let mut changed = false;
        for node in std::mem::take(&mut graph.node) {
            if node.op_type == "If" {
                let cond = node
                    .input
                    .first()
                    .and_then(|c| known.get(c))
                    .filter(|v| v.0.len() == 1)
                    .map(|v| v.0[0] != 0.0)
                    .or_else(|| conditions.get(&node_key(&node)).copied());
                let branch = cond.and_then(|c| {
                    attr(&node, if c { "then_branch" } else { "else_branch" })?
                        .g
                        .as_ref()
                });
                if let Some(branch) = branch {
                    if branch.output.len() == node.output.len()
                        && inline_branch(&node, branch, &outer, &mut nodes, &mut initializers)
                    {
                        changed = true;
                        folded += 1;
                        continue;
                    }
                }
            }
            if let Some(v) = evaluate(&node, &known) {
                if let Some(out) = node.output.first() {
                    known.insert(out.clone(), v);
                }
            }
            nodes.push(node);
        }
        graph.node = nodes;
        graph.initializer.extend(initializers);
        if !changed {
            return Ok(folded);
        }
    }
}

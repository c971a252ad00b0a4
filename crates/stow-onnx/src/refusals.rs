//! Operators whose import by tract computes something other than what
//! ONNX specifies, refused before tract sees them; and operators no bundle
//! can reproduce (random draws), refused once tract has folded the ones
//! that are constant.
//!
//! Each entry was found by comparing with the ONNX node suite's expected
//! outputs (`tools/conformance.py`). A bundle that compiles must compute
//! what the model computes; until such an import is translated correctly
//! here, the model is refused with the reason.

use crate::error::{OnnxError, Stage};
use tract_onnx::pb::{GraphProto, NodeProto};

fn attr_text(node: &NodeProto, name: &str) -> Option<String> {
    node.attribute
        .iter()
        .find(|a| a.name == name)
        .map(|a| String::from_utf8_lossy(&a.s).into_owned())
}

fn attr_float(node: &NodeProto, name: &str) -> Option<f32> {
    node.attribute.iter().find(|a| a.name == name).map(|a| a.f)
}

/// Why tract would get `node` wrong, if it would.
fn mistranslated(node: &NodeProto) -> Option<String> {
    match node.op_type.as_str() {
        "SpaceToDepth" if attr_text(node, "mode").is_some_and(|m| m == "CRD") => {
            Some("SpaceToDepth in CRD mode is imported in DCR order".into())
        }
        "Swish" if attr_float(node, "alpha").is_some_and(|a| a != 1.0) => {
            Some("Swish with alpha other than 1 is imported as alpha 1".into())
        }
        _ => None,
    }
}

fn visit(graph: &GraphProto, found: &mut Vec<(String, String)>) {
    for node in &graph.node {
        if let Some(why) = mistranslated(node) {
            let name = if node.name.is_empty() {
                node.output.first().cloned().unwrap_or_default()
            } else {
                node.name.clone()
            };
            found.push((name, why));
        }
        for a in &node.attribute {
            for g in a.g.iter().chain(&a.graphs) {
                visit(g, found);
            }
        }
    }
}

/// Fails naming every node of `graph` (subgraphs included) that tract
/// would import with another meaning.
pub(crate) fn refuse_mistranslated(graph: &GraphProto) -> Result<(), OnnxError> {
    let mut found = Vec::new();
    visit(graph, &mut found);
    if found.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = found
        .iter()
        .map(|(name, why)| format!("node `{name}`: {why}"))
        .collect();
    Err(OnnxError::Tract {
        stage: Stage::Parse,
        node: Some(found[0].0.clone()),
        message: format!("refused rather than compiled wrong: {}", list.join("; ")),
    })
}

/// Fails naming every `Dropout` that survived decluttering: tract folds
/// one whose `training_mode` and `ratio` are constants that make it an
/// identity, so one left here may drop elements at random, which a bundle
/// cannot reproduce.
pub(crate) fn refuse_random(model: &tract_onnx::prelude::TypedModel) -> Result<(), OnnxError> {
    let names: Vec<&str> = model
        .nodes()
        .iter()
        .filter(|n| n.op.name() == "Dropout")
        .map(|n| n.name.as_str())
        .collect();
    let Some(first) = names.first() else {
        return Ok(());
    };
    Err(OnnxError::Tract {
        stage: Stage::Declutter,
        node: Some(first.to_string()),
        message: format!(
            "Dropout {} may run in training mode, which drops elements at random: \
             its `training_mode` (or `ratio`) input is not a constant; fix it with \
             --set NAME=false (or NAME=0 for the ratio), or export the model for inference",
            names
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

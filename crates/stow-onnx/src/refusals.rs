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
use tract_onnx::prelude::*;
use tract_onnx::tract_core::internal::DimLike;
use tract_onnx::tract_core::ops::cnn::{Conv, MaxPool, PaddingSpec, PoolSpec, SumPool};

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
        "MaxPool" | "AveragePool" | "LpPool"
            if pools_in_ceil_mode(node)
                && attr_text(node, "auto_pad").is_some_and(|p| p.starts_with("SAME"))
                && kernel_narrower_than_stride(node) =>
        {
            Some(
                "ceil_mode with auto_pad SAME_* and a kernel narrower than its stride: \
                 ONNX sizes it in ceil mode, tract by the SAME rule, and ONNX's \
                 reference refuses it; give explicit pads"
                    .into(),
            )
        }
        _ => None,
    }
}

fn attr_ints(node: &NodeProto, name: &str) -> Option<Vec<i64>> {
    node.attribute
        .iter()
        .find(|a| a.name == name)
        .map(|a| a.ints.clone())
}

/// True when some axis of a pool's window (dilated) is narrower than its
/// stride. Otherwise SAME padding is never clamped at zero, which makes
/// the output size the same in ceil and floor mode.
fn kernel_narrower_than_stride(node: &NodeProto) -> bool {
    let kernel = attr_ints(node, "kernel_shape").unwrap_or_default();
    let strides = attr_ints(node, "strides").unwrap_or_default();
    let dilations = attr_ints(node, "dilations").unwrap_or_default();
    kernel.iter().enumerate().any(|(axis, &k)| {
        let d = dilations.get(axis).copied().unwrap_or(1);
        let s = strides.get(axis).copied().unwrap_or(1);
        (k - 1).saturating_mul(d).saturating_add(1) < s
    })
}

fn pools_in_ceil_mode(node: &NodeProto) -> bool {
    node.attribute
        .iter()
        .any(|a| a.name == "ceil_mode" && a.i == 1)
}

/// Gives every pool with `auto_pad` VALID and `ceil_mode` 1 explicit zero
/// pads instead, in `graph` and its subgraphs: ONNX's shape inference and
/// onnxruntime then size it with the explicit-pads rule in ceil mode (a
/// last window that overhangs the input), where tract's VALID rule drops
/// that window.
pub(crate) fn valid_pools_in_ceil_mode_as_explicit(graph: &mut GraphProto) {
    for node in &mut graph.node {
        let pool = matches!(node.op_type.as_str(), "MaxPool" | "AveragePool" | "LpPool");
        if pool
            && pools_in_ceil_mode(node)
            && attr_text(node, "auto_pad").is_some_and(|p| p == "VALID")
        {
            node.attribute
                .retain(|a| a.name != "auto_pad" && a.name != "pads");
        }
        for a in &mut node.attribute {
            for g in a.g.iter_mut().chain(a.graphs.iter_mut()) {
                valid_pools_in_ceil_mode_as_explicit(g);
            }
        }
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
pub(crate) fn refuse_random(model: &TypedModel) -> Result<(), OnnxError> {
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

/// Why the windows of a convolution or pool with `spec` over `input`
/// (its whole shape) have no single meaning, if they have none: a kernel
/// wider than the padded input (ONNX's output size is then zero or
/// negative, tract's one window); for a `pool`, SAME padding that would
/// be negative (tract clamps it at zero, as convolutions do everywhere);
/// or, where the result would be a maximum
/// or mean of nothing (`empty_window_matters`), a window that lies wholly
/// in the padding (onnxruntime, `onnx.reference` and tract each give
/// something else).
fn degenerate_window(
    spec: &PoolSpec,
    input: &[TDim],
    pool: bool,
    empty_window_matters: bool,
) -> Option<String> {
    let shape = spec
        .data_format
        .shape(input.iter().cloned().collect::<TVec<TDim>>())
        .ok()?;
    let hw: &[TDim] = shape.hw_dims();
    let lengths: Option<Vec<usize>> = hw.iter().map(|d| d.to_usize().ok()).collect();
    let lengths = lengths?;
    let computed = spec.computed_padding(hw);
    for (axis, (&length, padded)) in lengths.iter().zip(&computed).enumerate() {
        let (Ok(before), Ok(after), Ok(outputs)) = (
            padded.pad_before.to_usize(),
            padded.pad_after.to_usize(),
            padded.convoluted.to_usize(),
        ) else {
            continue;
        };
        let kernel = spec.kernel_shape[axis];
        let dilation = spec.dilation(axis);
        let stride = spec.stride(axis);
        let field = kernel.saturating_sub(1) * dilation + 1;
        let same = matches!(
            spec.padding,
            PaddingSpec::SameUpper | PaddingSpec::SameLower
        );
        if pool && same && (length.div_ceil(stride.max(1)) - 1) * stride + field < length {
            return Some(format!(
                "auto_pad SAME_* asks for negative padding along spatial axis {axis} (a \
                 window of {field} every {stride} over {length}), which ONNX's reference \
                 applies as a crop and onnxruntime refuses or crops; give explicit pads"
            ));
        }
        if length + before + after < field {
            return Some(format!(
                "its kernel spans {field} along spatial axis {axis}, more than the \
                 {length} input rows plus {} of padding",
                before + after
            ));
        }
        if !empty_window_matters {
            continue;
        }
        for position in 0..outputs {
            let start = position * stride;
            let reaches_input = (0..kernel)
                .any(|tap| (before..before + length).contains(&(start + tap * dilation)));
            if !reaches_input {
                return Some(format!(
                    "its window {position} along spatial axis {axis} lies wholly in the \
                     padding, where the result is not defined"
                ));
            }
        }
    }
    None
}

/// Fails at the first convolution or pool of `model` whose windows have no
/// single meaning (see [`degenerate_window`]).
pub(crate) fn refuse_degenerate_windows(model: &TypedModel) -> Result<(), OnnxError> {
    for node in model.nodes() {
        let (kind, spec, pool, empty_window_matters) = if let Some(pool) = node.op_as::<MaxPool>() {
            ("MaxPool", &pool.pool_spec, true, true)
        } else if let Some(pool) = node.op_as::<SumPool>() {
            let mean_of_present = pool.normalize && !pool.count_include_pad;
            ("AveragePool", &pool.pool_spec, true, mean_of_present)
        } else if let Some(conv) = node.op_as::<Conv>() {
            ("Conv", &conv.pool_spec, false, false)
        } else {
            continue;
        };
        let Some(&input) = node.inputs.first() else {
            continue;
        };
        let Ok(fact) = model.outlet_fact(input) else {
            continue;
        };
        if let Some(why) =
            degenerate_window(spec, &fact.shape.to_tvec(), pool, empty_window_matters)
        {
            return Err(OnnxError::Tract {
                stage: Stage::Declutter,
                node: Some(node.name.clone()),
                message: format!("{kind} refused rather than compiled wrong: {why}"),
            });
        }
    }
    Ok(())
}

//! `ConvTranspose` given `output_shape` or `auto_pad` SAME_*: the padding
//! ONNX implies, made explicit before tract imports it.
//!
//! ONNX derives the padding from the requested output: a total of
//! `stride·(in − 1) + output_padding + (kernel − 1)·dilation + 1 − out`,
//! split with the larger half at the start (at the end for `SAME_UPPER`).
//! tract-onnx 0.23.9 instead keeps the padding it was given and crops or
//! extends at the end only, so an output smaller than the full
//! transposed convolution starts at the wrong place (found by
//! `tools/fuzz_graphs.py`). Here the attribute is replaced by the `pads`
//! (and `output_padding`) that give the same output shape under ONNX's
//! rule; the input's spatial shape comes from tract's inference. An
//! output larger than the full transposed convolution is extended at
//! the end only, so it is refused where ONNX would extend it at the start.

use crate::error::{OnnxError, Stage};
use crate::fold::node_key;
use std::collections::HashMap;
use tract_onnx::pb::{attribute_proto::AttributeType, AttributeProto, GraphProto, NodeProto};

fn ints(node: &NodeProto, name: &str) -> Option<Vec<i64>> {
    node.attribute
        .iter()
        .find(|a| a.name == name)
        .map(|a| a.ints.clone())
}

fn text(node: &NodeProto, name: &str) -> Option<String> {
    node.attribute
        .iter()
        .find(|a| a.name == name)
        .map(|a| String::from_utf8_lossy(&a.s).into_owned())
}

fn ints_attr(name: &str, values: Vec<i64>) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::Ints as i32,
        ints: values,
        ..Default::default()
    }
}

/// True when `graph` (not its subgraphs) has a `ConvTranspose` with an
/// `output_shape`.
pub(crate) fn has_output_shapes(graph: &GraphProto) -> bool {
    graph.node.iter().any(wants_output_shape)
}

/// An `output_shape`, or `auto_pad` SAME_*, which asks for the input's
/// shape times the strides: both leave the padding to ONNX's rule.
fn wants_output_shape(node: &NodeProto) -> bool {
    node.op_type == "ConvTranspose"
        && (ints(node, "output_shape").is_some()
            || text(node, "auto_pad").is_some_and(|p| p.starts_with("SAME_")))
}

/// Rewrites every `ConvTranspose` of `graph` that has an `output_shape`
/// and whose input shape is in `input_shapes` (by tract node name). A
/// node whose kernel shape is unknown stays as it is; one whose shape
/// cannot be met is refused.
pub(crate) fn explicit_output_padding(
    graph: &mut GraphProto,
    input_shapes: &HashMap<String, Vec<usize>>,
    kernel_shapes: &HashMap<String, Vec<usize>>,
) -> Result<usize, OnnxError> {
    let mut rewritten = 0;
    for node in graph.node.iter_mut().filter(|n| wants_output_shape(n)) {
        let key = node_key(node);
        let Some(input) = input_shapes.get(&key) else {
            continue;
        };
        let spatial = input.len().saturating_sub(2);
        let ones = vec![1; spatial];
        let strides = ints(node, "strides").unwrap_or_else(|| ones.clone());
        let output_shape = match ints(node, "output_shape") {
            Some(shape) => shape,
            None => input[2..]
                .iter()
                .zip(&strides)
                .map(|(&d, &s)| d as i64 * s)
                .collect(),
        };
        let kernel: Vec<i64> = match ints(node, "kernel_shape") {
            Some(k) => k,
            None => match kernel_shapes.get(&key) {
                Some(k) if k.len() == spatial + 2 => k[2..].iter().map(|&d| d as i64).collect(),
                _ => continue,
            },
        };
        // output_shape may hold the whole shape or its spatial part.
        let out: Vec<i64> = if output_shape.len() == spatial + 2 {
            output_shape[2..].to_vec()
        } else {
            output_shape
        };
        let refuse = |why: String| OnnxError::Tract {
            stage: Stage::Parse,
            node: Some(key.clone()),
            message: format!("ConvTranspose output_shape: {why}"),
        };
        if kernel.len() != spatial || out.len() != spatial {
            return Err(refuse(format!(
                "{} spatial axes in the input, kernel_shape {kernel:?}, output_shape {out:?}",
                spatial
            )));
        }
        let zeros = vec![0; spatial];
        let dilations = ints(node, "dilations").unwrap_or_else(|| ones.clone());
        let extra = ints(node, "output_padding").unwrap_or_else(|| zeros.clone());
        let same_upper = text(node, "auto_pad").is_some_and(|p| p == "SAME_UPPER");
        let same = text(node, "auto_pad").is_some_and(|p| p.starts_with("SAME_"));
        let (mut begin, mut end, mut after) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..spatial {
            let get = |v: &Vec<i64>| v.get(i).copied();
            let (Some(s), Some(d), Some(p)) = (get(&strides), get(&dilations), get(&extra)) else {
                return Err(refuse(
                    "strides, dilations or output_padding of another rank".into(),
                ));
            };
            let full = s * (input[2 + i] as i64 - 1) + p + (kernel[i] - 1) * d + 1;
            let total = full - out[i];
            if total >= 0 {
                let (small, large) = (total / 2, total - total / 2);
                if same_upper {
                    begin.push(small);
                    end.push(large);
                } else {
                    begin.push(large);
                    end.push(small);
                }
                after.push(0);
            } else {
                // A larger output than the full transposed convolution:
                // the rest is bias only. ONNX's reference splits the
                // negative total like a positive one (rounding down), so
                // only a one-row extension of an explicit output_shape
                // lies wholly at the end, where output_padding puts it;
                // elsewhere part of it comes first, which tract cannot
                // express. For SAME_*, ONNX's shape inference and
                // onnxruntime clamp the padding at zero instead (the full
                // convolution's size), against the reference: no single
                // answer.
                if same || total < -1 {
                    return Err(refuse(format!(
                        "an output of {} along spatial axis {i}, {} more than the full transposed convolution, is sized differently by ONNX's reference (which also extends it at the start), its shape inference and onnxruntime; only one extra row at the end of an explicit output_shape is supported",
                        out[i], -total
                    )));
                }
                begin.push(0);
                end.push(0);
                after.push(-total);
            }
        }
        let grow: Vec<i64> = extra.iter().zip(&after).map(|(p, a)| p + a).collect();
        node.attribute.retain(|a| {
            !matches!(
                a.name.as_str(),
                "output_shape" | "pads" | "auto_pad" | "output_padding"
            )
        });
        begin.extend(end);
        node.attribute.push(ints_attr("pads", begin));
        node.attribute.push(ints_attr("output_padding", grow));
        rewritten += 1;
    }
    Ok(rewritten)
}

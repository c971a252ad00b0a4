//! Recurrent layers that run backwards (`direction="reverse"`) become a
//! forward layer between two reversals of the time axis.
//!
//! tract's import of `LSTM`, `GRU` and `RNN` runs a reverse layer forwards
//! (the ONNX node suite's reverse cases come out wrong). A reverse layer
//! over `x` is the forward layer over `x` reversed in time, with its
//! sequence output reversed back; its final states are the forward
//! layer's. The rewrite is made on the ONNX graph, before tract sees it.
//! A layer with `sequence_lens` (sequences of different lengths in one
//! batch) is refused: the reversal would then differ per sequence.

use crate::error::OnnxError;
use tract_onnx::pb::{attribute_proto, AttributeProto, GraphProto, NodeProto, TensorProto};

fn attr<'a>(node: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    node.attribute.iter().find(|a| a.name == name)
}

fn ints(name: &str, values: &[i64]) -> TensorProto {
    TensorProto {
        dims: vec![values.len() as i64],
        data_type: 7,
        name: name.to_string(),
        raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ..Default::default()
    }
}

/// Rewrites every reverse `LSTM`, `GRU` and `RNN` of `graph` (not of its
/// subgraphs) as reverse → forward layer → reverse.
pub(crate) fn reverse_layers_forward(graph: &mut GraphProto) -> Result<(), OnnxError> {
    let mut nodes = Vec::with_capacity(graph.node.len());
    let mut constants = Vec::new();
    for (ix, mut node) in std::mem::take(&mut graph.node).into_iter().enumerate() {
        let recurrent = matches!(node.op_type.as_str(), "LSTM" | "GRU" | "RNN");
        let reverse = attr(&node, "direction").is_some_and(|a| a.s == b"reverse");
        if !recurrent || !reverse {
            nodes.push(node);
            continue;
        }
        let name = if node.name.is_empty() {
            format!("{}_{ix}", node.op_type)
        } else {
            node.name.clone()
        };
        if node.input.get(4).is_some_and(|s| !s.is_empty()) {
            return Err(OnnxError::Tract {
                stage: crate::error::Stage::Parse,
                node: Some(name.clone()),
                message: format!(
                    "{} `{name}` runs in reverse over sequences of given lengths (sequence_lens), \
                     which Stowage does not translate",
                    node.op_type
                ),
            });
        }
        let layout = attr(&node, "layout").map_or(0, |a| a.i);
        let time = i64::from(layout != 0);
        // One reversal per use: Slice with step −1 over the whole axis.
        let mut reverse_axis = |axis: i64, from: &str, to: &str, nodes: &mut Vec<NodeProto>| {
            let k = format!("{name}.reverse{axis}.{to}");
            let names = [
                format!("{k}.starts"),
                format!("{k}.ends"),
                format!("{k}.axes"),
                format!("{k}.steps"),
            ];
            constants.push(ints(&names[0], &[-1]));
            constants.push(ints(&names[1], &[i64::MIN]));
            constants.push(ints(&names[2], &[axis]));
            constants.push(ints(&names[3], &[-1]));
            nodes.push(NodeProto {
                input: std::iter::once(from.to_string())
                    .chain(names.iter().cloned())
                    .collect(),
                output: vec![to.to_string()],
                name: k,
                op_type: "Slice".into(),
                ..Default::default()
            });
        };
        let x = node.input[0].clone();
        let reversed_x = format!("{name}.x_reversed");
        reverse_axis(time, &x, &reversed_x, &mut nodes);
        node.input[0] = reversed_x;
        for a in node.attribute.iter_mut() {
            if a.name == "direction" {
                a.s = b"forward".to_vec();
                a.r#type = attribute_proto::AttributeType::String as i32;
            }
        }
        let y = node.output.first().cloned().filter(|s| !s.is_empty());
        if y.is_some() {
            node.output[0] = format!("{name}.y_forward");
        }
        let forward_y = node.output.first().cloned();
        nodes.push(node);
        if let (Some(y), Some(forward_y)) = (y, forward_y) {
            reverse_axis(time, &forward_y, &y, &mut nodes);
        }
    }
    graph.node = nodes;
    graph.initializer.extend(constants);
    Ok(())
}

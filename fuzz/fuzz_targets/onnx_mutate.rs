//! Structure-aware: the fuzzer's bytes are read as a list of edits to one
//! of the valid testdata models (change a dimension, a dtype, a node's
//! input or output, an attribute's value, an op type, an initializer's
//! shape or data; drop, duplicate or swap nodes), and the edited model goes
//! through the same path as `onnx_compile`: load, plan, bundle, re-read.
//! Byte-level fuzzing rarely gets past protobuf decoding into shape
//! inference; edits keep the model well-formed protobuf so that every run
//! exercises the stages after parsing.
//!
//!     cargo +nightly fuzz run onnx_mutate corpus/onnx_mutate -- -rss_limit_mb=4096
#![no_main]

use arbitrary::Arbitrary;
use prost::Message;
use tract_onnx::pb;

const SEEDS: &[&[u8]] = &[
    include_bytes!("../../testdata/two_branch.onnx"),
    include_bytes!("../../testdata/concat_block.onnx"),
    include_bytes!("../../testdata/symbolic_batch.onnx"),
    include_bytes!("../../testdata/mobilenet_block.onnx"),
    include_bytes!("../../testdata/residual_cnn.onnx"),
    include_bytes!("../../testdata/transformer_block.onnx"),
    include_bytes!("../../testdata/mlp.onnx"),
];

/// Op types the edits may switch a node to: the ones testdata uses and
/// their neighbours, so a switch usually lands on an op tract knows.
const OP_TYPES: &[&str] = &[
    "Conv", "MatMul", "Gemm", "Add", "Mul", "Sub", "Div", "Relu", "Clip", "Sigmoid",
    "Softmax", "Concat", "Split", "Slice", "Reshape", "Transpose", "Flatten", "Squeeze",
    "Unsqueeze", "Gather", "MaxPool", "AveragePool", "GlobalAveragePool", "Pad",
    "ReduceMean", "ReduceSum", "Cast", "Where", "Expand", "LayerNormalization",
    "BatchNormalization", "Erf", "Sqrt", "Pow", "Einsum", "Resize", "Tile", "Shape",
];

const ATTRIBUTE_NAMES: &[&str] = &[
    "pads", "strides", "dilations", "group", "kernel_shape", "axis", "axes", "perm",
    "auto_pad", "keepdims", "transA", "transB", "to", "split", "epsilon", "mode",
    "ceil_mode", "equation",
];

#[derive(Debug, Arbitrary)]
enum Edit {
    Dim { value: u8, dim: u8, to: DimTo },
    ValueDtype { value: u8, dtype: i8 },
    NodeInput { node: u8, slot: u8, to: NameTo },
    NodeOutput { node: u8, slot: u8, to: NameTo },
    AddInput { node: u8, to: NameTo },
    DropInput { node: u8, slot: u8 },
    AttributeInt { node: u8, attribute: u8, value: i64 },
    AttributeInts { node: u8, attribute: u8, index: u8, value: i64, push: bool },
    AttributeFloat { node: u8, attribute: u8, value: f32 },
    AttributeString { node: u8, attribute: u8, value: Vec<u8> },
    AttributeType { node: u8, attribute: u8, kind: i8 },
    AddAttribute { node: u8, name: u8, ints: Vec<i64> },
    DropAttribute { node: u8, attribute: u8 },
    OpType { node: u8, op: u8 },
    DropNode { node: u8 },
    DuplicateNode { node: u8 },
    SwapNodes { a: u8, b: u8 },
    InitializerDims { initializer: u8, dims: Vec<i64> },
    InitializerDtype { initializer: u8, dtype: i8 },
    InitializerData { initializer: u8, keep: u16 },
    InitializerToInput { initializer: u8 },
    DropOutput { output: u8 },
    OutputFromNode { node: u8, slot: u8 },
    Opset { version: i8 },
}

#[derive(Debug, Arbitrary)]
enum DimTo {
    Value(i64),
    Small(u8),
    Symbol(u8),
    Unknown,
}

#[derive(Debug, Arbitrary)]
enum NameTo {
    /// Another name already in the graph, picked by index.
    Existing(u16),
    Empty,
    Fresh(u8),
}

#[derive(Debug, Arbitrary)]
struct Program {
    seed: u8,
    edits: Vec<Edit>,
}

fn pick<T>(items: &mut [T], index: impl Into<usize>) -> Option<&mut T> {
    if items.is_empty() {
        return None;
    }
    let len = items.len();
    items.get_mut(index.into() % len)
}

fn all_names(graph: &pb::GraphProto) -> Vec<String> {
    let mut names: Vec<String> = graph.input.iter().map(|v| v.name.clone()).collect();
    names.extend(graph.initializer.iter().map(|t| t.name.clone()));
    for node in &graph.node {
        names.extend(node.output.iter().cloned());
    }
    names
}

fn resolve_name(graph: &pb::GraphProto, to: &NameTo) -> String {
    match to {
        NameTo::Existing(i) => {
            let names = all_names(graph);
            if names.is_empty() {
                String::new()
            } else {
                names[*i as usize % names.len()].clone()
            }
        }
        NameTo::Empty => String::new(),
        NameTo::Fresh(i) => format!("fuzz_{i}"),
    }
}

/// Every value info of the graph (inputs, outputs, intermediate), by one index.
fn value_info(graph: &mut pb::GraphProto, index: u8) -> Option<&mut pb::ValueInfoProto> {
    let total = graph.input.len() + graph.output.len() + graph.value_info.len();
    if total == 0 {
        return None;
    }
    let mut i = index as usize % total;
    if i < graph.input.len() {
        return graph.input.get_mut(i);
    }
    i -= graph.input.len();
    if i < graph.output.len() {
        return graph.output.get_mut(i);
    }
    graph.value_info.get_mut(i - graph.output.len())
}

fn tensor_type(info: &mut pb::ValueInfoProto) -> Option<&mut pb::type_proto::Tensor> {
    match info.r#type.as_mut()?.value.as_mut()? {
        pb::type_proto::Value::TensorType(t) => Some(t),
    }
}

fn apply(model: &mut pb::ModelProto, edit: &Edit) {
    use pb::tensor_shape_proto::dimension::Value as DimValue;
    if let Edit::Opset { version } = edit {
        if let Some(opset) = model.opset_import.first_mut() {
            opset.version = *version as i64;
        }
        return;
    }
    let Some(graph) = model.graph.as_mut() else {
        return;
    };
    match edit {
        Edit::Dim { value, dim, to } => {
            let Some(info) = value_info(graph, *value) else { return };
            let Some(tensor) = tensor_type(info) else { return };
            let Some(shape) = tensor.shape.as_mut() else { return };
            let Some(d) = pick(&mut shape.dim, *dim) else { return };
            d.value = match to {
                DimTo::Value(v) => Some(DimValue::DimValue(*v)),
                DimTo::Small(v) => Some(DimValue::DimValue(*v as i64)),
                DimTo::Symbol(s) => Some(DimValue::DimParam(format!("S{}", s % 4))),
                DimTo::Unknown => None,
            };
        }
        Edit::ValueDtype { value, dtype } => {
            let Some(info) = value_info(graph, *value) else { return };
            if let Some(tensor) = tensor_type(info) {
                tensor.elem_type = *dtype as i32;
            }
        }
        Edit::NodeInput { node, slot, to } => {
            let name = resolve_name(graph, to);
            let Some(n) = pick(&mut graph.node, *node) else { return };
            if let Some(input) = pick(&mut n.input, *slot) {
                *input = name;
            }
        }
        Edit::NodeOutput { node, slot, to } => {
            let name = resolve_name(graph, to);
            let Some(n) = pick(&mut graph.node, *node) else { return };
            if let Some(output) = pick(&mut n.output, *slot) {
                *output = name;
            }
        }
        Edit::AddInput { node, to } => {
            let name = resolve_name(graph, to);
            if let Some(n) = pick(&mut graph.node, *node) {
                n.input.push(name);
            }
        }
        Edit::DropInput { node, slot } => {
            let Some(n) = pick(&mut graph.node, *node) else { return };
            if !n.input.is_empty() {
                let len = n.input.len();
                n.input.remove(*slot as usize % len);
            }
        }
        Edit::AttributeInt { node, attribute, value } => {
            if let Some(a) = node_attribute(graph, *node, *attribute) {
                a.i = *value;
            }
        }
        Edit::AttributeInts { node, attribute, index, value, push } => {
            let Some(a) = node_attribute(graph, *node, *attribute) else { return };
            if *push || a.ints.is_empty() {
                a.ints.push(*value);
            } else if let Some(v) = pick(&mut a.ints, *index) {
                *v = *value;
            }
        }
        Edit::AttributeFloat { node, attribute, value } => {
            if let Some(a) = node_attribute(graph, *node, *attribute) {
                a.f = *value;
            }
        }
        Edit::AttributeString { node, attribute, value } => {
            if let Some(a) = node_attribute(graph, *node, *attribute) {
                a.s = value.clone();
            }
        }
        Edit::AttributeType { node, attribute, kind } => {
            if let Some(a) = node_attribute(graph, *node, *attribute) {
                a.r#type = *kind as i32;
            }
        }
        Edit::AddAttribute { node, name, ints } => {
            let Some(n) = pick(&mut graph.node, *node) else { return };
            let name = ATTRIBUTE_NAMES[*name as usize % ATTRIBUTE_NAMES.len()];
            let kind = if ints.len() == 1 {
                pb::attribute_proto::AttributeType::Int
            } else {
                pb::attribute_proto::AttributeType::Ints
            };
            n.attribute.push(pb::AttributeProto {
                name: name.to_string(),
                r#type: kind as i32,
                i: ints.first().copied().unwrap_or(0),
                ints: ints.clone(),
                ..Default::default()
            });
        }
        Edit::DropAttribute { node, attribute } => {
            let Some(n) = pick(&mut graph.node, *node) else { return };
            if !n.attribute.is_empty() {
                let len = n.attribute.len();
                n.attribute.remove(*attribute as usize % len);
            }
        }
        Edit::OpType { node, op } => {
            if let Some(n) = pick(&mut graph.node, *node) {
                n.op_type = OP_TYPES[*op as usize % OP_TYPES.len()].to_string();
            }
        }
        Edit::DropNode { node } => {
            if !graph.node.is_empty() {
                let len = graph.node.len();
                graph.node.remove(*node as usize % len);
            }
        }
        Edit::DuplicateNode { node } => {
            if let Some(n) = pick(&mut graph.node, *node) {
                let copy = n.clone();
                graph.node.push(copy);
            }
        }
        Edit::SwapNodes { a, b } => {
            if !graph.node.is_empty() {
                let len = graph.node.len();
                graph.node.swap(*a as usize % len, *b as usize % len);
            }
        }
        Edit::InitializerDims { initializer, dims } => {
            if let Some(t) = pick(&mut graph.initializer, *initializer) {
                t.dims = dims.clone();
            }
        }
        Edit::InitializerDtype { initializer, dtype } => {
            if let Some(t) = pick(&mut graph.initializer, *initializer) {
                t.data_type = *dtype as i32;
            }
        }
        Edit::InitializerData { initializer, keep } => {
            if let Some(t) = pick(&mut graph.initializer, *initializer) {
                t.raw_data.truncate(*keep as usize);
                t.float_data.truncate(*keep as usize);
                t.int64_data.truncate(*keep as usize);
            }
        }
        Edit::InitializerToInput { initializer } => {
            if graph.initializer.is_empty() {
                return;
            }
            let len = graph.initializer.len();
            let t = graph.initializer.remove(*initializer as usize % len);
            graph.input.push(pb::ValueInfoProto {
                name: t.name,
                ..Default::default()
            });
        }
        Edit::DropOutput { output } => {
            if !graph.output.is_empty() {
                let len = graph.output.len();
                graph.output.remove(*output as usize % len);
            }
        }
        Edit::OutputFromNode { node, slot } => {
            let Some(n) = pick(&mut graph.node, *node) else { return };
            let Some(name) = pick(&mut n.output, *slot).cloned() else { return };
            graph.output.push(pb::ValueInfoProto {
                name,
                ..Default::default()
            });
        }
        Edit::Opset { .. } => {}
    }
}

fn node_attribute(
    graph: &mut pb::GraphProto,
    node: u8,
    attribute: u8,
) -> Option<&mut pb::AttributeProto> {
    let n = pick(&mut graph.node, node)?;
    pick(&mut n.attribute, attribute)
}

libfuzzer_sys::fuzz_target!(|program: Program| {
    let seed = SEEDS[program.seed as usize % SEEDS.len()];
    let mut model = pb::ModelProto::decode(seed).expect("testdata models decode");
    for edit in program.edits.iter().take(16) {
        apply(&mut model, edit);
    }
    stow_fuzz::compile_in_memory(&model.encode_to_vec());
});

//! Quantized graphs rewritten on the ONNX protos, before tract parses
//! them.
//!
//! [`expand_contrib`]: onnxruntime's QOperator contrib operators that
//! Stowage has no int8 operator for (`QLinearAveragePool`,
//! `QLinearConcat`, `QLinearSigmoid`, `QLinearLeakyRelu`, and `QGemm`
//! with a float output, `alpha` ≠ 1, a transposed `A` or a bias of
//! another shape than `[N]`) become their definition: DequantizeLinear
//! of each input, the float operator, QuantizeLinear of the output.
//! `QLinearAdd`, `QLinearMul`, `QLinearGlobalAveragePool` and the other
//! `QGemm`s stay, and [`crate::qops`] imports them as int8 operators.
//!
//! [`fuse_qdq`]: the reverse, for QDQ models. A float operator whose
//! inputs all come from DequantizeLinear and whose only consumer is a
//! QuantizeLinear computes a quantized tensor from quantized tensors; it
//! is replaced by the quantized operator that computes the same thing in
//! integers (what onnxruntime does when it loads such a model): Conv →
//! QLinearConv, MatMul → QLinearMatMul, Gemm → QGemm, Add/Mul →
//! QLinearAdd/QLinearMul, GlobalAveragePool → QLinearGlobalAveragePool,
//! and an operator that only moves values (a reshape, a slice, a
//! concatenation, a max pool, an edge, reflecting or zero padding) between
//! equal parameters runs on the quantized tensor itself. The f32 tensors between them disappear from
//! the arena. Only exact matches are fused: per-tensor activations,
//! weights and biases that are constants of the integer type each
//! operator takes, a bias whose scale is the product of the input's and
//! the weight's (as the quantized operators assume). A dequantized value
//! that something else also reads in f32 keeps its DequantizeLinear.

use crate::error::{OnnxError, Stage};
use crate::fold::node_key;
use std::collections::{HashMap, HashSet};
use tract_onnx::data_resolver::MmapDataResolver;
use tract_onnx::pb::{
    attribute_proto::AttributeType, tensor_proto::DataType, AttributeProto, GraphProto, NodeProto,
    TensorProto,
};
use tract_onnx::prelude::*;

/// onnxruntime's domain of contrib operators.
const MS: &str = "com.microsoft";

fn refuse(node: &NodeProto, why: String) -> OnnxError {
    OnnxError::Tract {
        stage: Stage::Parse,
        node: Some(node_key(node)),
        message: format!("{}: {why}", node.op_type),
    }
}

fn attribute<'a>(node: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    node.attribute.iter().find(|a| a.name == name)
}

fn int_attr(node: &NodeProto, name: &str) -> Option<i64> {
    attribute(node, name).map(|a| a.i)
}

fn float_attr(node: &NodeProto, name: &str) -> Option<f32> {
    attribute(node, name).map(|a| a.f)
}

/// Input `i` when given (an absent optional input has an empty name).
fn input(node: &NodeProto, i: usize) -> Option<&str> {
    node.input
        .get(i)
        .map(String::as_str)
        .filter(|n| !n.is_empty())
}

fn make(op: &str, inputs: &[&str], output: &str, name: String) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        name,
        ..Default::default()
    }
}

fn int(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::Int as i32,
        i: value,
        ..Default::default()
    }
}

fn ints(name: &str, values: Vec<i64>) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::Ints as i32,
        ints: values,
        ..Default::default()
    }
}

fn float(name: &str, value: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::Float as i32,
        f: value,
        ..Default::default()
    }
}

/// Emits the nodes of one expansion, naming what they make after the
/// contrib node.
struct Emit<'a> {
    key: String,
    nodes: &'a mut Vec<NodeProto>,
    count: usize,
}

impl Emit<'_> {
    /// Adds `op` over `inputs`; returns its output's name (`output` when
    /// given, else a new one).
    fn node(
        &mut self,
        op: &str,
        inputs: &[Option<&str>],
        output: Option<&str>,
        attributes: Vec<AttributeProto>,
    ) -> String {
        self.count += 1;
        let name = format!("{}.stow{}.{op}", self.key, self.count);
        let out = output.map_or_else(|| name.clone(), String::from);
        let given: Vec<&str> = inputs.iter().map(|i| i.unwrap_or("")).collect();
        let mut node = make(op, &given, &out, name);
        // Trailing absent inputs are left out rather than named empty.
        while node.input.last().is_some_and(|i| i.is_empty()) {
            node.input.pop();
        }
        node.attribute = attributes;
        self.nodes.push(node);
        out
    }

    fn dequantize(&mut self, x: &str, scale: &str, zero: Option<&str>, axis: i64) -> String {
        let attrs = vec![int("axis", axis)];
        self.node(
            "DequantizeLinear",
            &[Some(x), Some(scale), zero],
            None,
            attrs,
        )
    }

    fn quantize(&mut self, y: &str, scale: &str, zero: &str, output: &str) {
        self.node(
            "QuantizeLinear",
            &[Some(y), Some(scale), Some(zero)],
            Some(output),
            vec![],
        );
    }
}

/// The zero point of an output that a QuantizeLinear is to make: without
/// one it would make u8 whatever the contrib operator's type.
fn output_zero(node: &NodeProto, i: usize) -> Result<&str, OnnxError> {
    input(node, i).ok_or_else(|| {
        refuse(
            node,
            format!("no output zero point (input {i}): its type is not known before tract types the graph"),
        )
    })
}

/// True when a `QGemm` is imported as tract's quantized `EinSum`
/// ([`crate::qops`]): a quantized output, `alpha` 1, `A` as it is, and a
/// bias absent or a constant with one value or one per column.
fn int8_gemm(node: &NodeProto, dims: &HashMap<String, Vec<i64>>) -> bool {
    let bias_ok = match input(node, 6) {
        None => true,
        Some(c) => dims.get(c).is_some_and(|d| d.len() <= 1),
    };
    input(node, 7).is_some()
        && input(node, 8).is_some()
        && float_attr(node, "alpha").is_none_or(|a| a == 1.0)
        && int_attr(node, "transA").is_none_or(|t| t == 0)
        && bias_ok
}

/// Replaces each contrib operator without an int8 operator by its
/// definition in standard operators. Returns how many were expanded.
pub(crate) fn expand_contrib(graph: &mut GraphProto) -> Result<usize, OnnxError> {
    let dims: HashMap<String, Vec<i64>> = graph
        .initializer
        .iter()
        .map(|t| (t.name.clone(), t.dims.clone()))
        .collect();
    let mut nodes = Vec::with_capacity(graph.node.len());
    let mut expanded = 0;
    for node in std::mem::take(&mut graph.node) {
        let op = node.op_type.as_str();
        let wanted = matches!(
            op,
            "QLinearSigmoid" | "QLinearLeakyRelu" | "QLinearAveragePool" | "QLinearConcat"
        ) || (op == "QGemm" && !int8_gemm(&node, &dims));
        if !wanted {
            nodes.push(node);
            continue;
        }
        let Some(output) = node.output.first().filter(|o| !o.is_empty()).cloned() else {
            return Err(refuse(&node, "no output".into()));
        };
        if node.output.len() != 1 {
            return Err(refuse(&node, format!("{} outputs", node.output.len())));
        }
        let needs = |count: usize| -> Result<(), OnnxError> {
            match (0..count).find(|&i| input(&node, i).is_none()) {
                Some(i) => Err(refuse(&node, format!("input {i} is missing"))),
                None => Ok(()),
            }
        };
        let mut emit = Emit {
            key: node_key(&node),
            nodes: &mut nodes,
            count: 0,
        };
        match op {
            "QLinearSigmoid" | "QLinearLeakyRelu" | "QLinearAveragePool" => {
                // X, X_scale, X_zero_point?, Y_scale, Y_zero_point?
                needs(2)?;
                let y_scale = input(&node, 3)
                    .ok_or_else(|| refuse(&node, "input 3 (Y_scale) is missing".into()))?;
                let y_zero = output_zero(&node, 4)?;
                let x = emit.dequantize(&node.input[0], &node.input[1], input(&node, 2), 1);
                let y = match op {
                    "QLinearSigmoid" => emit.node("Sigmoid", &[Some(x.as_str())], None, vec![]),
                    "QLinearLeakyRelu" => {
                        let alpha = float_attr(&node, "alpha").unwrap_or(0.01);
                        emit.node(
                            "LeakyRelu",
                            &[Some(x.as_str())],
                            None,
                            vec![float("alpha", alpha)],
                        )
                    }
                    _ => average_pool(&node, &mut emit, &x)?,
                };
                emit.quantize(&y, y_scale, y_zero, &output);
            }
            "QLinearConcat" => {
                // Y_scale, Y_zero_point, then (X, X_scale, X_zero_point)
                // for each input.
                needs(2)?;
                let count = node.input.len().saturating_sub(2);
                if count == 0 || count % 3 != 0 {
                    return Err(refuse(
                        &node,
                        format!("{count} inputs after Y_scale and Y_zero_point; expected (X, X_scale, X_zero_point) triplets"),
                    ));
                }
                needs(node.input.len())?;
                let Some(axis) = int_attr(&node, "axis") else {
                    return Err(refuse(&node, "no axis".into()));
                };
                let parts: Vec<String> = node.input[2..]
                    .chunks(3)
                    .map(|t| emit.dequantize(&t[0], &t[1], Some(&t[2]), 1))
                    .collect();
                let parts: Vec<Option<&str>> = parts.iter().map(|p| Some(p.as_str())).collect();
                let y = emit.node("Concat", &parts, None, vec![int("axis", axis)]);
                emit.quantize(&y, &node.input[0], &node.input[1], &output);
            }
            _ => {
                // QGemm: A, a_scale, a_zero_point, B, b_scale,
                // b_zero_point, C?, y_scale?, y_zero_point?
                needs(6)?;
                let trans_b = int_attr(&node, "transB").unwrap_or(0);
                let alpha = float_attr(&node, "alpha").unwrap_or(1.0);
                let a = emit.dequantize(&node.input[0], &node.input[1], input(&node, 2), 1);
                // Per-column parameters of B run along its N axis.
                let b_axis = if trans_b != 0 { 0 } else { 1 };
                let b = emit.dequantize(&node.input[3], &node.input[4], input(&node, 5), b_axis);
                // C is in the accumulator's units, a_scale·b_scale, and
                // onnxruntime scales it by alpha with the product.
                let c = match input(&node, 6) {
                    Some(c) => {
                        let scale = emit.node(
                            "Mul",
                            &[Some(node.input[1].as_str()), Some(node.input[4].as_str())],
                            None,
                            vec![],
                        );
                        Some(emit.dequantize(c, &scale, None, -1))
                    }
                    None => None,
                };
                let mut attrs = vec![
                    float("alpha", alpha),
                    float("beta", alpha),
                    int("transB", trans_b),
                ];
                attrs.push(int("transA", int_attr(&node, "transA").unwrap_or(0)));
                match input(&node, 7) {
                    Some(y_scale) => {
                        let y_zero = output_zero(&node, 8)?;
                        let y = emit.node(
                            "Gemm",
                            &[Some(a.as_str()), Some(b.as_str()), c.as_deref()],
                            None,
                            attrs,
                        );
                        emit.quantize(&y, y_scale, y_zero, &output);
                    }
                    None => {
                        emit.node(
                            "Gemm",
                            &[Some(a.as_str()), Some(b.as_str()), c.as_deref()],
                            Some(&output),
                            attrs,
                        );
                    }
                }
            }
        }
        expanded += 1;
    }
    graph.node = nodes;
    Ok(expanded)
}

/// The float AveragePool of a QLinearAveragePool, between transposes
/// when its layout is channels last.
fn average_pool(node: &NodeProto, emit: &mut Emit<'_>, x: &str) -> Result<String, OnnxError> {
    let attrs: Vec<AttributeProto> = node
        .attribute
        .iter()
        .filter(|a| a.name != "channels_last")
        .cloned()
        .collect();
    if int_attr(node, "channels_last").unwrap_or(0) == 0 {
        return Ok(emit.node("AveragePool", &[Some(x)], None, attrs));
    }
    let Some(kernel) = attribute(node, "kernel_shape") else {
        return Err(refuse(node, "no kernel_shape".into()));
    };
    let rank = kernel.ints.len() as i64 + 2;
    let first: Vec<i64> = [0, rank - 1].into_iter().chain(1..rank - 1).collect();
    let back: Vec<i64> = [0].into_iter().chain(2..rank).chain([1]).collect();
    let nchw = emit.node("Transpose", &[Some(x)], None, vec![ints("perm", first)]);
    let pooled = emit.node("AveragePool", &[Some(nchw.as_str())], None, attrs);
    Ok(emit.node(
        "Transpose",
        &[Some(pooled.as_str())],
        None,
        vec![ints("perm", back)],
    ))
}

/// What the graph's names refer to.
struct Index<'g> {
    producer: HashMap<&'g str, usize>,
    uses: HashMap<&'g str, usize>,
    outputs: HashSet<&'g str>,
    inits: HashMap<&'g str, &'g TensorProto>,
}

impl<'g> Index<'g> {
    fn of(graph: &'g GraphProto) -> Self {
        let mut producer = HashMap::new();
        let mut uses: HashMap<&str, usize> = HashMap::new();
        for (i, n) in graph.node.iter().enumerate() {
            for o in &n.output {
                producer.insert(o.as_str(), i);
            }
            for x in n.input.iter().filter(|x| !x.is_empty()) {
                *uses.entry(x.as_str()).or_default() += 1;
            }
        }
        Index {
            producer,
            uses,
            outputs: graph.output.iter().map(|o| o.name.as_str()).collect(),
            inits: graph
                .initializer
                .iter()
                .map(|t| (t.name.as_str(), t))
                .collect(),
        }
    }

    /// A constant's values as `T`, and its type.
    fn values<T: Datum + Copy>(&self, name: &str) -> Option<(Vec<T>, DatumType)> {
        let t = self.inits.get(name)?;
        let tensor = tract_onnx::tensor::load_tensor(&MmapDataResolver, t, None).ok()?;
        let dt = tensor.datum_type();
        let cast = tensor.cast_to::<T>().ok()?;
        let values = cast
            .to_plain_array_view::<T>()
            .ok()?
            .iter()
            .copied()
            .collect();
        Some((values, dt))
    }

    /// The DequantizeLinear that makes `name`, when that is all it is.
    fn dequantized(&self, graph: &'g GraphProto, name: &str) -> Option<Dq<'g>> {
        let node = &graph.node[*self.producer.get(name)?];
        if node.op_type != "DequantizeLinear"
            || !node.domain.is_empty()
            || node.attribute.iter().any(|a| a.name != "axis")
        {
            return None;
        }
        let scale = self.values::<f32>(input(node, 1)?)?.0;
        let zero = self.values::<i64>(input(node, 2)?)?;
        if zero.0.len() != scale.len() {
            return None;
        }
        Some(Dq {
            node,
            scale,
            zero: zero.0,
            zero_type: zero.1,
            axis: int_attr(node, "axis").unwrap_or(1),
        })
    }

    /// Read once, by one node, and not a graph output.
    fn read_once(&self, name: &str) -> bool {
        self.uses.get(name) == Some(&1) && !self.outputs.contains(name)
    }
}

/// A DequantizeLinear with constant parameters.
struct Dq<'g> {
    node: &'g NodeProto,
    scale: Vec<f32>,
    zero: Vec<i64>,
    zero_type: DatumType,
    axis: i64,
}

impl Dq<'_> {
    fn x(&self) -> &str {
        &self.node.input[0]
    }
    fn scale_name(&self) -> &str {
        &self.node.input[1]
    }
    fn zero_name(&self) -> &str {
        &self.node.input[2]
    }
    fn per_tensor(&self) -> bool {
        self.scale.len() == 1
    }
    /// One parameter, or one per index of axis `axis` of a rank `rank`
    /// tensor.
    fn along(&self, axis: i64, rank: usize) -> bool {
        self.per_tensor() || self.axis.rem_euclid(rank.max(1) as i64) == axis
    }
    /// The quantized tensor's own constant values, when it is one of
    /// type `dt`; with its shape.
    fn constant(&self, index: &Index<'_>, dt: DataType) -> Option<Vec<i64>> {
        let t = index.inits.get(self.x())?;
        (t.data_type == dt as i32).then(|| t.dims.clone())
    }
    /// The triple of inputs a quantized operator takes for this operand.
    fn triple(&self) -> [String; 3] {
        [
            self.x().into(),
            self.scale_name().into(),
            self.zero_name().into(),
        ]
    }
}

/// True when a bias dequantized by `bias` is in the units of the
/// accumulator of inputs with scales `x` (one) and `w` (one, or one per
/// channel): its zero point 0 and its scale their product, to the
/// rounding of the quantizer's own product (2⁻²⁰ relative).
fn bias_matches(bias: &Dq<'_>, x: f32, w: &[f32], channels: usize) -> bool {
    let n = channels.max(1);
    bias.zero.iter().all(|&z| z == 0)
        && (bias.scale.len() == 1 || bias.scale.len() == n)
        && (w.len() == 1 || w.len() == n)
        && (0..n).all(|i| {
            let want = x * w[i % w.len()];
            let got = bias.scale[i % bias.scale.len()];
            (got - want).abs() <= want.abs() * 2f32.powi(-20)
        })
}

/// The quantized node that replaces `op` (whose output `quantize`
/// quantizes), or `None` when the pattern is not an exact match.
fn fused(
    graph: &GraphProto,
    index: &Index<'_>,
    op: &NodeProto,
    q: &NodeProto,
) -> Option<NodeProto> {
    let out = q.output.first()?.as_str();
    let y_scale = index.values::<f32>(input(q, 1)?)?.0;
    let (y_zero, y_type) = index.values::<i64>(input(q, 2)?)?;
    if y_scale.len() != 1 || y_zero.len() != 1 || q.attribute.iter().any(|a| a.name != "axis") {
        return None;
    }
    let (ys, yz) = (q.input[1].as_str(), q.input[2].as_str());
    let dq = |i: usize| index.dequantized(graph, input(op, i)?);
    let activation = |i: usize| dq(i).filter(|d| d.per_tensor());
    // The output quantized with the input's own parameters.
    let same = |x: &Dq<'_>| {
        x.scale[0].to_bits() == y_scale[0].to_bits()
            && x.zero[0] == y_zero[0]
            && x.zero_type == y_type
    };
    let name = node_key(op);
    let node = |op_type: &str, inputs: Vec<String>, domain: &str, attrs: Vec<AttributeProto>| {
        let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        let mut n = make(op_type, &inputs, out, name.clone());
        n.domain = domain.into();
        n.attribute = attrs;
        Some(n)
    };
    match op.op_type.as_str() {
        "Conv" => {
            let x = activation(0)?;
            let w = dq(1)?;
            let dims = w
                .constant(index, DataType::Int8)
                .or_else(|| w.constant(index, DataType::Uint8))?;
            let channels = usize::try_from(*dims.first()?).ok()?;
            if !w.along(0, dims.len()) {
                return None;
            }
            let [xq, xs, xz] = x.triple();
            let [wq, ws, wz] = w.triple();
            let mut inputs = vec![xq, xs, xz, wq, ws, wz, ys.into(), yz.into()];
            if input(op, 2).is_some() {
                let b = dq(2)?;
                b.constant(index, DataType::Int32)?;
                if !bias_matches(&b, x.scale[0], &w.scale, channels) {
                    return None;
                }
                inputs.push(b.x().into());
            }
            node("QLinearConv", inputs, "", op.attribute.clone())
        }
        "MatMul" => {
            let a = activation(0)?;
            let b = dq(1)?;
            if !b.per_tensor() {
                // Per column: a constant matrix, parameters along axis 1.
                let dims = b
                    .constant(index, DataType::Int8)
                    .or_else(|| b.constant(index, DataType::Uint8))?;
                if dims.len() != 2 || !b.along(1, 2) {
                    return None;
                }
            }
            let [aq, as_, az] = a.triple();
            let [bq, bs, bz] = b.triple();
            node(
                "QLinearMatMul",
                vec![aq, as_, az, bq, bs, bz, ys.into(), yz.into()],
                "",
                vec![],
            )
        }
        "Gemm" => {
            let trans_b = int_attr(op, "transB").unwrap_or(0) != 0;
            let plain = int_attr(op, "transA").unwrap_or(0) == 0
                && float_attr(op, "alpha").unwrap_or(1.0) == 1.0
                && float_attr(op, "beta").unwrap_or(1.0) == 1.0;
            if !plain {
                return None;
            }
            let a = activation(0)?;
            let b = dq(1)?;
            let dims = b
                .constant(index, DataType::Int8)
                .or_else(|| b.constant(index, DataType::Uint8))?;
            let n_axis = if trans_b { 0 } else { 1 };
            if dims.len() != 2 || !b.along(n_axis, 2) {
                return None;
            }
            let columns = usize::try_from(dims[n_axis as usize]).ok()?;
            let [aq, as_, az] = a.triple();
            let [bq, bs, bz] = b.triple();
            let mut inputs = vec![aq, as_, az, bq, bs, bz];
            match input(op, 2) {
                Some(_) => {
                    let c = dq(2)?;
                    let c_dims = c.constant(index, DataType::Int32)?;
                    if c_dims.len() > 1 || !bias_matches(&c, a.scale[0], &b.scale, columns) {
                        return None;
                    }
                    inputs.push(c.x().into());
                }
                None => inputs.push(String::new()),
            }
            inputs.extend([ys.into(), yz.into()]);
            node("QGemm", inputs, MS, vec![int("transB", trans_b as i64)])
        }
        "Add" | "Mul" => {
            let (a, b) = (activation(0)?, activation(1)?);
            let [aq, as_, az] = a.triple();
            let [bq, bs, bz] = b.triple();
            let op_type = if op.op_type == "Add" {
                "QLinearAdd"
            } else {
                "QLinearMul"
            };
            node(
                op_type,
                vec![aq, as_, az, bq, bs, bz, ys.into(), yz.into()],
                MS,
                vec![],
            )
        }
        "GlobalAveragePool" => {
            let [xq, xs, xz] = activation(0)?.triple();
            node(
                "QLinearGlobalAveragePool",
                vec![xq, xs, xz, ys.into(), yz.into()],
                MS,
                vec![int("channels_last", 0)],
            )
        }
        "Flatten" | "Reshape" | "Transpose" | "Squeeze" | "Unsqueeze" | "Identity" | "Slice" => {
            // Moving values between equal parameters: the quantized
            // values move unchanged (quantizing a dequantized integer
            // with the same scale and zero point gives it back).
            let x = activation(0)?;
            if !same(&x) {
                return None;
            }
            let mut inputs: Vec<String> = op.input.clone();
            inputs[0] = x.x().into();
            node(&op.op_type, inputs, &op.domain, op.attribute.clone())
        }
        "MaxPool" if op.output.len() == 1 && y_scale[0] > 0.0 => {
            // Dequantizing with a positive scale keeps the order, so the
            // largest integer is the largest value.
            let x = activation(0)?;
            if !same(&x) {
                return None;
            }
            node(
                "MaxPool",
                vec![x.x().into()],
                &op.domain,
                op.attribute.clone(),
            )
        }
        "Concat" => {
            let mut inputs = Vec::with_capacity(op.input.len());
            for i in 0..op.input.len() {
                let x = activation(i)?;
                if !same(&x) {
                    return None;
                }
                inputs.push(x.x().to_string());
            }
            node("Concat", inputs, &op.domain, op.attribute.clone())
        }
        "Pad" => {
            // Edge and reflecting paddings copy values; a constant one
            // pads zeros here (the zero point: the value 0 exactly).
            let x = activation(0)?;
            let constant = op
                .attribute
                .iter()
                .find(|a| a.name == "mode")
                .is_none_or(|a| a.s.as_slice() == b"constant");
            let zero_value = match input(op, 2) {
                None => true,
                Some(v) => index
                    .values::<f32>(v)
                    .is_some_and(|(v, _)| v.len() == 1 && v[0] == 0.0),
            };
            if !same(&x) || (constant && !zero_value) || input(op, 3).is_some() {
                return None;
            }
            let mut inputs = vec![x.x().to_string(), input(op, 1)?.to_string()];
            if constant {
                inputs.push(yz.into());
            }
            node("Pad", inputs, &op.domain, op.attribute.clone())
        }
        _ => None,
    }
}

/// Replaces each DequantizeLinear → operator → QuantizeLinear pattern
/// that has an exact quantized form by that form, then drops the
/// DequantizeLinear nodes nothing reads any more. Returns how many
/// operators were fused.
pub(crate) fn fuse_qdq(graph: &mut GraphProto) -> usize {
    let mut replace: Vec<(usize, usize, NodeProto)> = Vec::new();
    {
        let index = Index::of(graph);
        for (qi, q) in graph.node.iter().enumerate() {
            if q.op_type != "QuantizeLinear" || !q.domain.is_empty() {
                continue;
            }
            let Some(y) = input(q, 0) else { continue };
            let Some(&oi) = index.producer.get(y) else {
                continue;
            };
            let op = &graph.node[oi];
            if !index.read_once(y) || op.output.len() != 1 || !op.domain.is_empty() {
                continue;
            }
            if let Some(node) = fused(graph, &index, op, q) {
                replace.push((oi, qi, node));
            }
        }
    }
    let fusions = replace.len();
    if fusions == 0 {
        return 0;
    }
    let mut dropped: HashSet<usize> = HashSet::new();
    let mut at: HashMap<usize, NodeProto> = HashMap::new();
    for (oi, qi, node) in replace {
        dropped.insert(oi);
        at.insert(qi, node);
    }
    let nodes = std::mem::take(&mut graph.node);
    graph.node = nodes
        .into_iter()
        .enumerate()
        .filter_map(|(i, n)| {
            if let Some(f) = at.remove(&i) {
                Some(f)
            } else if dropped.contains(&i) {
                None
            } else {
                Some(n)
            }
        })
        .collect();
    // DequantizeLinear nodes left without a reader.
    loop {
        let index = Index::of(graph);
        let dead: HashSet<usize> = graph
            .node
            .iter()
            .enumerate()
            .filter(|(_, n)| {
                n.op_type == "DequantizeLinear"
                    && n.output.iter().all(|o| {
                        !index.uses.contains_key(o.as_str()) && !index.outputs.contains(o.as_str())
                    })
            })
            .map(|(i, _)| i)
            .collect();
        if dead.is_empty() {
            break;
        }
        let nodes = std::mem::take(&mut graph.node);
        graph.node = nodes
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !dead.contains(i))
            .map(|(_, n)| n)
            .collect();
    }
    fusions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(name: &str, dt: DataType, dims: &[i64], raw: Vec<u8>) -> TensorProto {
        TensorProto {
            name: name.into(),
            data_type: dt as i32,
            dims: dims.to_vec(),
            raw_data: raw,
            ..Default::default()
        }
    }

    fn f32s(name: &str, v: &[f32]) -> TensorProto {
        let dims: &[i64] = if v.len() == 1 { &[] } else { &[v.len() as i64] };
        let raw = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        tensor(name, DataType::Float, dims, raw)
    }

    fn node(op: &str, inputs: &[&str], output: &str) -> NodeProto {
        make(op, inputs, output, output.into())
    }

    /// x (u8) → DequantizeLinear → Conv (weights and bias dequantized
    /// from constants) → QuantizeLinear → y, with the bias scale given.
    fn qdq_conv(bias_scale: f32) -> GraphProto {
        let mut graph = GraphProto {
            initializer: vec![
                f32s("xs", &[0.5]),
                tensor("xz", DataType::Uint8, &[], vec![3]),
                tensor("w", DataType::Int8, &[2, 1, 1, 1], vec![1, 0xfe]),
                f32s("ws", &[0.25, 0.125]),
                tensor("wz", DataType::Int8, &[2], vec![0, 0]),
                tensor("b", DataType::Int32, &[2], vec![5, 0, 0, 0, 7, 0, 0, 0]),
                f32s("bs", &[bias_scale, 0.5 * 0.125]),
                tensor("bz", DataType::Int32, &[2], vec![0; 8]),
                f32s("ys", &[0.1]),
                tensor("yz", DataType::Uint8, &[], vec![9]),
            ],
            node: vec![
                node("DequantizeLinear", &["x", "xs", "xz"], "xf"),
                node("DequantizeLinear", &["w", "ws", "wz"], "wf"),
                node("DequantizeLinear", &["b", "bs", "bz"], "bf"),
                node("Conv", &["xf", "wf", "bf"], "c"),
                node("QuantizeLinear", &["c", "ys", "yz"], "y"),
            ],
            ..Default::default()
        };
        for n in &mut graph.node[1..3] {
            n.attribute.push(int("axis", 0));
        }
        graph.output.push(tract_onnx::pb::ValueInfoProto {
            name: "y".into(),
            ..Default::default()
        });
        graph
    }

    fn ops(graph: &GraphProto) -> Vec<&str> {
        graph.node.iter().map(|n| n.op_type.as_str()).collect()
    }

    #[test]
    fn a_dequantized_convolution_becomes_qlinearconv() {
        let mut graph = qdq_conv(0.5 * 0.25);
        assert_eq!(fuse_qdq(&mut graph), 1);
        assert_eq!(ops(&graph), ["QLinearConv"]);
        let conv = &graph.node[0];
        assert_eq!(
            conv.input,
            ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"]
        );
        assert_eq!(conv.output, ["y"]);
    }

    #[test]
    fn a_bias_in_other_units_keeps_the_float_convolution() {
        // The quantized convolution adds the bias to the accumulator, in
        // units of x_scale·w_scale: any other scale is another value.
        let mut graph = qdq_conv(0.5 * 0.25 * 1.01);
        assert_eq!(fuse_qdq(&mut graph), 0);
        assert!(ops(&graph).contains(&"Conv"));
    }

    #[test]
    fn a_float_result_read_elsewhere_is_not_fused() {
        let mut graph = qdq_conv(0.5 * 0.25);
        graph.node.push(node("Relu", &["c"], "r"));
        assert_eq!(fuse_qdq(&mut graph), 0);
        assert!(ops(&graph).contains(&"Conv"));
    }

    #[test]
    fn a_dequantized_input_read_elsewhere_keeps_its_dequantize() {
        let mut graph = qdq_conv(0.5 * 0.25);
        graph.node.push(node("Relu", &["xf"], "r"));
        assert_eq!(fuse_qdq(&mut graph), 1);
        assert_eq!(ops(&graph), ["DequantizeLinear", "QLinearConv", "Relu"]);
    }

    #[test]
    fn contrib_operators_without_int8_form_expand_to_their_definition() {
        let mut graph = GraphProto {
            node: vec![make(
                "QLinearSigmoid",
                &["x", "xs", "xz", "ys", "yz"],
                "y",
                "sig".into(),
            )],
            ..Default::default()
        };
        assert_eq!(expand_contrib(&mut graph).unwrap(), 1);
        assert_eq!(
            ops(&graph),
            ["DequantizeLinear", "Sigmoid", "QuantizeLinear"]
        );
        assert_eq!(graph.node[2].output, ["y"]);
        // Without the output's zero point its type is unknown here.
        let mut graph = GraphProto {
            node: vec![make(
                "QLinearSigmoid",
                &["x", "xs", "xz", "ys"],
                "y",
                "sig".into(),
            )],
            ..Default::default()
        };
        let err = expand_contrib(&mut graph).unwrap_err().to_string();
        assert!(err.contains("sig") && err.contains("zero point"), "{err}");
    }
}

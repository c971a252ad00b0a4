//! Random ONNX graphs that are valid by construction, for differential
//! testing: chains and DAGs over operators Stowage supports, with random
//! shapes, broadcasts, attributes and element types, and layout operators
//! (Transpose, Reshape, Flatten, Slice, Concat, Pad, Expand) between
//! products, convolutions and pools.
//!
//! One source, two drivers: `tests/random_graphs.rs` (a proptest over
//! seeds, compared with tract) and the cargo-fuzz target `graph_diff`
//! (choices from the fuzzer's bytes). The Python `tools/fuzz_graphs.py`
//! covers more operators and judges against onnxruntime; this one runs in
//! `cargo test` with no Python.
//!
//! Every shape is tracked here, so an operator's attributes are always
//! legal for its input; graph outputs declare only their element type and
//! leave the shape to inference.
#![allow(dead_code)] // each driver uses a different subset

pub mod judge;

use tract_onnx::pb::{
    self, attribute_proto::AttributeType, tensor_shape_proto, type_proto, AttributeProto,
    NodeProto, TensorProto, ValueInfoProto,
};

/// Where the generator's choices come from.
pub trait Source {
    /// A number in `0..n` (`n` at least 1).
    fn below(&mut self, n: usize) -> usize;
}

/// A seeded source (SplitMix64), so a failing seed replays exactly.
pub struct SplitMix(pub u64);

impl Source for SplitMix {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z % n.max(1) as u64) as usize
    }
}

/// Element types of values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    F32,
    I32,
}

impl Elem {
    fn onnx(self) -> i32 {
        match self {
            Elem::F32 => 1,
            Elem::I32 => 6,
        }
    }
}

/// A graph input (always f32) with its shape and data.
#[derive(Clone, Debug)]
pub struct Input {
    pub name: String,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// A generated model and the inputs to run it on.
pub struct RandomGraph {
    pub model: pb::ModelProto,
    pub inputs: Vec<Input>,
    /// The operators, in order, for messages.
    pub ops: Vec<String>,
}

struct Value {
    name: String,
    shape: Vec<usize>,
    elem: Elem,
    read: bool,
    is_input: bool,
}

struct Builder<'s, S: Source> {
    src: &'s mut S,
    values: Vec<Value>,
    nodes: Vec<NodeProto>,
    inits: Vec<TensorProto>,
    inputs: Vec<Input>,
    counter: usize,
}

fn attr_int(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::Int as i32,
        i,
        ..Default::default()
    }
}

fn attr_ints(name: &str, ints: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::Ints as i32,
        ints: ints.to_vec(),
        ..Default::default()
    }
}

fn attr_float(name: &str, f: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::Float as i32,
        f,
        ..Default::default()
    }
}

fn attr_text(name: &str, s: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::String as i32,
        s: s.as_bytes().to_vec(),
        ..Default::default()
    }
}

fn value_info(name: &str, elem: Elem, shape: Option<&[usize]>) -> ValueInfoProto {
    let shape = shape.map(|dims| pb::TensorShapeProto {
        dim: dims
            .iter()
            .map(|&d| tensor_shape_proto::Dimension {
                value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
                ..Default::default()
            })
            .collect(),
    });
    ValueInfoProto {
        name: name.into(),
        r#type: Some(pb::TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: elem.onnx(),
                shape,
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The numpy broadcast of two shapes, if they broadcast.
fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let at = |s: &[usize], i: usize| {
        let pad = rank - s.len();
        if i < pad {
            1
        } else {
            s[i - pad]
        }
    };
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

impl<S: Source> Builder<'_, S> {
    fn chance(&mut self, one_in: usize) -> bool {
        self.src.below(one_in) == 0
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.src.below(items.len())]
    }

    fn range(&mut self, lo: usize, hi_inclusive: usize) -> usize {
        lo + self.src.below(hi_inclusive - lo + 1)
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}{}", self.counter)
    }

    /// Multiples of 1/8 in [-2, 2]: exact in f32, varied enough.
    fn small(&mut self) -> f32 {
        (self.src.below(33) as f32 - 16.0) / 8.0
    }

    fn weight(&mut self, shape: &[usize]) -> String {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|_| self.small()).collect();
        self.tensor_f32(shape, data)
    }

    fn tensor_f32(&mut self, shape: &[usize], data: Vec<f32>) -> String {
        let name = self.fresh("w");
        self.inits.push(TensorProto {
            name: name.clone(),
            dims: shape.iter().map(|&d| d as i64).collect(),
            data_type: 1,
            float_data: data,
            ..Default::default()
        });
        name
    }

    fn tensor_i64(&mut self, values: &[i64]) -> String {
        let name = self.fresh("k");
        self.inits.push(TensorProto {
            name: name.clone(),
            dims: vec![values.len() as i64],
            data_type: 7,
            int64_data: values.to_vec(),
            ..Default::default()
        });
        name
    }

    fn tensor_i32(&mut self, shape: &[usize]) -> String {
        let n: usize = shape.iter().product();
        let data: Vec<i32> = (0..n).map(|_| self.src.below(9) as i32 - 4).collect();
        let name = self.fresh("q");
        self.inits.push(TensorProto {
            name: name.clone(),
            dims: shape.iter().map(|&d| d as i64).collect(),
            data_type: 6,
            int32_data: data,
            ..Default::default()
        });
        name
    }

    fn shape(&mut self) -> Vec<usize> {
        let rank = if self.chance(2) { 4 } else { self.range(1, 4) };
        (0..rank)
            .map(|_| if self.chance(4) { 1 } else { self.range(1, 6) })
            .collect()
    }

    fn new_input(&mut self) -> usize {
        let shape = self.shape();
        let name = self.fresh("x");
        let n: usize = shape.iter().product();
        // Quarters in [-3, 3]: some ties for Floor, exact sums.
        let data = (0..n)
            .map(|_| (self.src.below(25) as f32 - 12.0) / 4.0)
            .collect();
        self.inputs.push(Input {
            name: name.clone(),
            shape: shape.clone(),
            data,
        });
        self.values.push(Value {
            name,
            shape,
            elem: Elem::F32,
            read: false,
            is_input: true,
        });
        self.values.len() - 1
    }

    /// Adds `op` reading `inputs`, with one output of `shape` and `elem`.
    fn node(
        &mut self,
        op: &str,
        inputs: Vec<String>,
        attrs: Vec<AttributeProto>,
        shape: Vec<usize>,
        elem: Elem,
    ) -> usize {
        for v in &mut self.values {
            if inputs.contains(&v.name) {
                v.read = true;
            }
        }
        let out = self.fresh(&op.to_ascii_lowercase()[..3.min(op.len())]);
        self.nodes.push(NodeProto {
            name: format!("n_{out}"),
            op_type: op.into(),
            input: inputs,
            output: vec![out.clone()],
            attribute: attrs,
            ..Default::default()
        });
        self.values.push(Value {
            name: out,
            shape,
            elem,
            read: false,
            is_input: false,
        });
        self.values.len() - 1
    }

    /// An f32 value, recent ones more often, so that chains grow.
    fn pick_f32(&mut self) -> usize {
        let floats: Vec<usize> = (0..self.values.len())
            .filter(|&i| self.values[i].elem == Elem::F32)
            .collect();
        if self.chance(2) {
            let recent = &floats[floats.len().saturating_sub(2)..];
            *self.pick(recent)
        } else {
            *self.pick(&floats)
        }
    }

    fn step(&mut self) {
        let v = self.pick_f32();
        let shape = self.values[v].shape.clone();
        let rank = shape.len();
        let x = self.values[v].name.clone();
        // Scalars (a reduction over every axis) take element-wise ops only.
        let choice = if rank == 0 {
            self.src.below(5)
        } else {
            self.src.below(20)
        };
        match choice {
            0 | 1 => self.unary(&x, shape),
            2..=4 => self.binary(&x, shape),
            5 | 6 if rank >= 2 => self.matmul(&x, &shape),
            7 if rank == 2 => self.gemm(&x, &shape),
            8 | 9 if rank >= 3 => self.conv(&x, &shape),
            10 if rank >= 3 => self.pool(&x, &shape),
            11 => self.transpose(&x, &shape),
            12 => self.reshape(&x, &shape),
            13 => self.slice(&x, &shape),
            14 => self.concat(v, &shape),
            15 => self.reduce(&x, &shape),
            16 => self.softmax(&x, shape),
            17 => self.pad(&x, &shape),
            18 => self.expand(&x, &shape),
            19 => self.integers(v, shape),
            _ => self.unary(&x, shape),
        };
    }

    fn unary(&mut self, x: &str, shape: Vec<usize>) -> usize {
        let ops = [
            "Relu",
            "Sigmoid",
            "Tanh",
            "Abs",
            "Neg",
            "LeakyRelu",
            "Elu",
            "HardSwish",
            "Erf",
            "Clip",
        ];
        let op = *self.pick(&ops);
        let mut inputs = vec![x.to_string()];
        let mut attrs = vec![];
        match op {
            "LeakyRelu" | "Elu" => attrs.push(attr_float("alpha", self.small().abs() + 0.125)),
            "Clip" => {
                let lo = self.small();
                let lo = self.tensor_f32(&[], vec![lo]);
                let hi = self.small().abs() + 0.25;
                let hi = self.tensor_f32(&[], vec![hi]);
                inputs.extend([lo, hi]);
            }
            _ => {}
        }
        self.node(op, inputs, attrs, shape, Elem::F32)
    }

    /// A shape that broadcasts with `shape`: a suffix of it with some
    /// dimensions 1.
    fn broadcastable(&mut self, shape: &[usize]) -> Vec<usize> {
        let keep = self.range(0, shape.len());
        shape[shape.len() - keep..]
            .iter()
            .map(|&d| if self.chance(3) { 1 } else { d })
            .collect()
    }

    fn binary(&mut self, x: &str, shape: Vec<usize>) -> usize {
        let op = *self.pick(&["Add", "Sub", "Mul", "Max", "Min", "Div"]);
        let partners: Vec<usize> = (0..self.values.len())
            .filter(|&i| {
                self.values[i].elem == Elem::F32
                    && broadcast(&self.values[i].shape, &shape).is_some()
            })
            .collect();
        let (other, other_shape) = if op != "Div" && !partners.is_empty() && self.chance(2) {
            let p = *self.pick(&partners);
            (self.values[p].name.clone(), self.values[p].shape.clone())
        } else {
            let s = self.broadcastable(&shape);
            let n: usize = s.iter().product();
            // Divisors stay away from zero.
            let data = (0..n)
                .map(|_| {
                    let w = self.small();
                    if op == "Div" {
                        w.abs() + 0.5
                    } else {
                        w
                    }
                })
                .collect();
            (self.tensor_f32(&s, data), s)
        };
        let out = broadcast(&shape, &other_shape).unwrap_or(shape);
        let inputs = if op != "Div" && self.chance(2) {
            vec![other, x.to_string()]
        } else {
            vec![x.to_string(), other]
        };
        self.node(op, inputs, vec![], out, Elem::F32)
    }

    fn matmul(&mut self, x: &str, shape: &[usize]) -> usize {
        let rank = shape.len();
        let n = self.range(1, 6);
        if self.chance(3) {
            // Weight first: [m, rows] × x[..., rows, cols].
            let w = self.weight(&[n, shape[rank - 2]]);
            let mut out = shape.to_vec();
            out[rank - 2] = n;
            self.node("MatMul", vec![w, x.into()], vec![], out, Elem::F32)
        } else {
            let w = self.weight(&[shape[rank - 1], n]);
            let mut out = shape.to_vec();
            out[rank - 1] = n;
            self.node("MatMul", vec![x.into(), w], vec![], out, Elem::F32)
        }
    }

    fn gemm(&mut self, x: &str, shape: &[usize]) -> usize {
        let trans_a = self.chance(2);
        let trans_b = self.chance(2);
        let (m, k) = if trans_a {
            (shape[1], shape[0])
        } else {
            (shape[0], shape[1])
        };
        let n = self.range(1, 6);
        let b_shape = if trans_b { [n, k] } else { [k, n] };
        let b = self.weight(&b_shape);
        let mut inputs = vec![x.to_string(), b];
        let c_shapes: [Vec<usize>; 4] = [vec![], vec![n], vec![1, n], vec![m, n]];
        if !self.chance(3) {
            let c = self.pick(&c_shapes).clone();
            inputs.push(self.weight(&c));
        }
        let attrs = vec![
            attr_int("transA", trans_a as i64),
            attr_int("transB", trans_b as i64),
            attr_float("alpha", *self.pick(&[1.0, 0.5, 2.0])),
            attr_float("beta", *self.pick(&[1.0, 0.5, -1.0])),
        ];
        self.node("Gemm", inputs, attrs, vec![m, n], Elem::F32)
    }

    /// Kernel, dilation, stride and pads along one axis of length `len`
    /// such that the window fits the padded axis, and the output length.
    fn window(&mut self, len: usize, dilate: bool) -> (usize, usize, usize, usize, usize, usize) {
        let mut kernel = self.range(1, 3);
        let mut dilation = if dilate { self.range(1, 2) } else { 1 };
        let stride = self.range(1, 2);
        let mut before = self.range(0, kernel - 1);
        let mut after = self.range(0, kernel - 1);
        if (kernel - 1) * dilation + 1 > len + before + after {
            dilation = 1;
            kernel = kernel.min(len);
            before = before.min(kernel - 1);
            after = after.min(kernel - 1);
        }
        let field = (kernel - 1) * dilation + 1;
        let out = (len + before + after - field) / stride + 1;
        (kernel, dilation, stride, before, after, out)
    }

    fn spatial(
        &mut self,
        shape: &[usize],
        dilate: bool,
    ) -> (Vec<AttributeProto>, Vec<usize>, Vec<usize>) {
        let (mut k, mut d, mut s, mut pb, mut pa, mut out) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        for &len in &shape[2..] {
            let (kernel, dilation, stride, before, after, o) = self.window(len, dilate);
            k.push(kernel as i64);
            d.push(dilation as i64);
            s.push(stride as i64);
            pb.push(before as i64);
            pa.push(after as i64);
            out.push(o);
        }
        let kernel: Vec<usize> = k.iter().map(|&k| k as usize).collect();
        pb.extend(pa);
        let mut attrs = vec![
            attr_ints("kernel_shape", &k),
            attr_ints("strides", &s),
            attr_ints("pads", &pb),
        ];
        if dilate {
            attrs.push(attr_ints("dilations", &d));
        }
        (attrs, out, kernel)
    }

    fn conv(&mut self, x: &str, shape: &[usize]) -> usize {
        let channels = shape[1];
        let depthwise = channels > 1 && self.chance(3);
        let (group, outputs) = if depthwise {
            (channels, channels * self.range(1, 2))
        } else {
            (1, self.range(1, 6))
        };
        let (mut attrs, spatial, kernel) = self.spatial(shape, true);
        attrs.push(attr_int("group", group as i64));
        let mut w_shape = vec![outputs, channels / group];
        w_shape.extend(&kernel);
        let w = self.weight(&w_shape);
        let mut inputs = vec![x.to_string(), w];
        if self.chance(2) {
            inputs.push(self.weight(&[outputs]));
        }
        let mut out = vec![shape[0], outputs];
        out.extend(spatial);
        self.node("Conv", inputs, attrs, out, Elem::F32)
    }

    fn pool(&mut self, x: &str, shape: &[usize]) -> usize {
        match self.src.below(4) {
            0 => {
                let mut out = shape[..2].to_vec();
                out.extend(std::iter::repeat_n(1, shape.len() - 2));
                let op = *self.pick(&["GlobalAveragePool", "GlobalMaxPool"]);
                self.node(op, vec![x.into()], vec![], out, Elem::F32)
            }
            1 => {
                let (mut attrs, spatial, _) = self.spatial(shape, false);
                attrs.push(attr_int("count_include_pad", self.src.below(2) as i64));
                let mut out = shape[..2].to_vec();
                out.extend(spatial);
                self.node("AveragePool", vec![x.into()], attrs, out, Elem::F32)
            }
            _ => {
                let (attrs, spatial, _) = self.spatial(shape, true);
                let mut out = shape[..2].to_vec();
                out.extend(spatial);
                self.node("MaxPool", vec![x.into()], attrs, out, Elem::F32)
            }
        }
    }

    fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut perm: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = self.src.below(i + 1);
            perm.swap(i, j);
        }
        perm
    }

    fn transpose(&mut self, x: &str, shape: &[usize]) -> usize {
        let perm = self.permutation(shape.len());
        let out = perm.iter().map(|&p| shape[p]).collect();
        let perm: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
        self.node(
            "Transpose",
            vec![x.into()],
            vec![attr_ints("perm", &perm)],
            out,
            Elem::F32,
        )
    }

    fn reshape(&mut self, x: &str, shape: &[usize]) -> usize {
        let total: usize = shape.iter().product();
        if self.chance(3) {
            let axis = self.range(0, shape.len());
            let out = vec![
                shape[..axis].iter().product(),
                shape[axis..].iter().product(),
            ];
            let attrs = vec![attr_int("axis", axis as i64)];
            return self.node("Flatten", vec![x.into()], attrs, out, Elem::F32);
        }
        let mut out: Vec<usize> = shape.to_vec();
        match self.src.below(3) {
            // Merge two neighbours.
            0 if out.len() >= 2 => {
                let i = self.src.below(out.len() - 1);
                let merged = out[i] * out[i + 1];
                out.splice(i..i + 2, [merged]);
            }
            // Split one dimension into a factor pair.
            1 => {
                let i = self.src.below(out.len());
                let d = out[i];
                let factors: Vec<usize> = (1..=d).filter(|&f| d.is_multiple_of(f)).collect();
                let f = *self.pick(&factors);
                out.splice(i..i + 1, [f, d / f]);
            }
            _ => out = vec![total],
        }
        let mut spec: Vec<i64> = out.iter().map(|&d| d as i64).collect();
        // One -1, and 0 where a dimension stays in place.
        let minus = self.src.below(spec.len());
        for (i, s) in spec.iter_mut().enumerate() {
            if i == minus && self.chance(2) {
                *s = -1;
            } else if shape.get(i) == Some(&out[i]) && self.chance(3) {
                *s = 0;
            }
        }
        let spec = self.tensor_i64(&spec);
        self.node("Reshape", vec![x.into(), spec], vec![], out, Elem::F32)
    }

    fn slice(&mut self, x: &str, shape: &[usize]) -> usize {
        let rank = shape.len();
        let axis = self.src.below(rank);
        let len = shape[axis];
        let step: i64 = *self.pick(&[1, 1, 2, 3, -1, -2]);
        let (start, end, count) = if step > 0 {
            let start = self.src.below(len);
            let end = self.range(start + 1, len);
            let count = (end - start).div_ceil(step as usize);
            let end = if end == len && self.chance(2) {
                i64::MAX
            } else {
                end as i64
            };
            (start as i64, end, count)
        } else {
            let start = self.src.below(len);
            // Exclusive end in index space, -1 meaning through index 0.
            let end = self.range(0, start) as i64 - 1;
            let count = ((start as i64 - end) as usize).div_ceil(step.unsigned_abs() as usize);
            let end = if end == -1 { i64::MIN } else { end };
            (start as i64, end, count)
        };
        let mut out = shape.to_vec();
        out[axis] = count;
        let axis_spec = if self.chance(2) {
            axis as i64 - rank as i64
        } else {
            axis as i64
        };
        let inputs = vec![
            x.to_string(),
            self.tensor_i64(&[start]),
            self.tensor_i64(&[end]),
            self.tensor_i64(&[axis_spec]),
            self.tensor_i64(&[step]),
        ];
        self.node("Slice", inputs, vec![], out, Elem::F32)
    }

    fn concat(&mut self, v: usize, shape: &[usize]) -> usize {
        let axis = self.src.below(shape.len());
        let fits: Vec<usize> = (0..self.values.len())
            .filter(|&i| {
                let s = &self.values[i].shape;
                self.values[i].elem == Elem::F32
                    && s.len() == shape.len()
                    && (0..s.len()).all(|a| a == axis || s[a] == shape[a])
            })
            .collect();
        let count = self.range(2, 3);
        let parts: Vec<usize> = (0..count)
            .map(|i| if i == 0 { v } else { *self.pick(&fits) })
            .collect();
        let mut out = shape.to_vec();
        out[axis] = parts.iter().map(|&p| self.values[p].shape[axis]).sum();
        let names = parts.iter().map(|&p| self.values[p].name.clone()).collect();
        let attrs = vec![attr_int("axis", axis as i64)];
        self.node("Concat", names, attrs, out, Elem::F32)
    }

    fn reduce(&mut self, x: &str, shape: &[usize]) -> usize {
        let op = *self.pick(&["ReduceMean", "ReduceMax", "ReduceSum", "ReduceL2"]);
        let keep = self.chance(2);
        let all = self.chance(4);
        let axes: Vec<usize> = if all {
            (0..shape.len()).collect()
        } else {
            let a: Vec<usize> = (0..shape.len()).filter(|_| self.chance(2)).collect();
            if a.is_empty() {
                vec![self.src.below(shape.len())]
            } else {
                a
            }
        };
        let out: Vec<usize> = (0..shape.len())
            .filter_map(|i| match (axes.contains(&i), keep) {
                (true, true) => Some(1),
                (true, false) => None,
                (false, _) => Some(shape[i]),
            })
            .collect();
        let mut attrs = vec![attr_int("keepdims", keep as i64)];
        let mut inputs = vec![x.to_string()];
        if !all {
            let axes: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
            // Operator set 17: ReduceSum takes its axes as an input.
            if op == "ReduceSum" {
                inputs.push(self.tensor_i64(&axes));
            } else {
                attrs.push(attr_ints("axes", &axes));
            }
        }
        self.node(op, inputs, attrs, out, Elem::F32)
    }

    fn softmax(&mut self, x: &str, shape: Vec<usize>) -> usize {
        let rank = shape.len() as i64;
        let axis = self.src.below(2 * shape.len()) as i64 - rank;
        let op = *self.pick(&["Softmax", "LogSoftmax"]);
        self.node(
            op,
            vec![x.into()],
            vec![attr_int("axis", axis)],
            shape,
            Elem::F32,
        )
    }

    fn pad(&mut self, x: &str, shape: &[usize]) -> usize {
        let mode = *self.pick(&["constant", "reflect", "edge"]);
        let rank = shape.len();
        let mut pads = vec![0i64; 2 * rank];
        for axis in 0..rank {
            // reflect needs pads smaller than the axis.
            let most = if mode == "reflect" {
                shape[axis] - 1
            } else {
                2
            };
            pads[axis] = self.range(0, most.min(2)) as i64;
            pads[rank + axis] = self.range(0, most.min(2)) as i64;
        }
        let out = (0..rank)
            .map(|a| shape[a] + (pads[a] + pads[rank + a]) as usize)
            .collect();
        let mut inputs = vec![x.to_string(), self.tensor_i64(&pads)];
        if mode == "constant" && self.chance(2) {
            let c = self.small();
            inputs.push(self.tensor_f32(&[], vec![c]));
        }
        self.node("Pad", inputs, vec![attr_text("mode", mode)], out, Elem::F32)
    }

    fn expand(&mut self, x: &str, shape: &[usize]) -> usize {
        let mut target: Vec<usize> = shape
            .iter()
            .map(|&d| if d == 1 { self.range(1, 3) } else { d })
            .collect();
        if target.len() < 4 && self.chance(3) {
            target.insert(0, self.range(1, 3));
        }
        let spec: Vec<i64> = target.iter().map(|&d| d as i64).collect();
        let spec = self.tensor_i64(&spec);
        self.node("Expand", vec![x.into(), spec], vec![], target, Elem::F32)
    }

    /// Floor → Cast to i32 → an integer op → (sometimes) Cast back to f32.
    /// Only from graph inputs, whose values are exact quarters: upstream
    /// rounding elsewhere could move a value across an integer.
    fn integers(&mut self, v: usize, shape: Vec<usize>) -> usize {
        let inputs: Vec<usize> = (0..self.values.len())
            .filter(|&i| self.values[i].is_input)
            .collect();
        let v = if self.values[v].is_input {
            v
        } else {
            *self.pick(&inputs)
        };
        let shape = if self.values[v].is_input {
            self.values[v].shape.clone()
        } else {
            shape
        };
        let x = self.values[v].name.clone();
        let floor = self.node("Floor", vec![x], vec![], shape.clone(), Elem::F32);
        let name = self.values[floor].name.clone();
        let int = self.node(
            "Cast",
            vec![name],
            vec![attr_int("to", 6)],
            shape.clone(),
            Elem::I32,
        );
        let name = self.values[int].name.clone();
        let op = *self.pick(&["Add", "Sub", "Mul", "Max", "Min", "Abs", "Neg"]);
        let result = if matches!(op, "Abs" | "Neg") {
            self.node(op, vec![name], vec![], shape, Elem::I32)
        } else {
            let s = self.broadcastable(&shape);
            let w = self.tensor_i32(&s);
            let out = broadcast(&shape, &s).unwrap_or(shape);
            self.node(op, vec![name, w], vec![], out, Elem::I32)
        };
        if self.chance(3) {
            return result;
        }
        let name = self.values[result].name.clone();
        let shape = self.values[result].shape.clone();
        self.node(
            "Cast",
            vec![name],
            vec![attr_int("to", 1)],
            shape,
            Elem::F32,
        )
    }
}

/// A random graph of 1 to `max_nodes` generated operators (plus the
/// helper nodes some need) over one or two f32 inputs.
pub fn generate(src: &mut impl Source, max_nodes: usize) -> RandomGraph {
    let mut b = Builder {
        src,
        values: vec![],
        nodes: vec![],
        inits: vec![],
        inputs: vec![],
        counter: 0,
    };
    for _ in 0..b.range(1, 2) {
        b.new_input();
    }
    for _ in 0..b.range(1, max_nodes.max(1)) {
        b.step();
    }
    let outputs: Vec<ValueInfoProto> = b
        .values
        .iter()
        .filter(|v| !v.is_input && !v.read)
        .map(|v| value_info(&v.name, v.elem, None))
        .collect();
    let inputs = b
        .inputs
        .iter()
        .map(|i| value_info(&i.name, Elem::F32, Some(&i.shape)))
        .collect();
    let ops = b.nodes.iter().map(|n| n.op_type.clone()).collect();
    let graph = pb::GraphProto {
        name: "random".into(),
        node: b.nodes,
        initializer: b.inits,
        input: inputs,
        output: outputs,
        ..Default::default()
    };
    let model = pb::ModelProto {
        ir_version: 8,
        opset_import: vec![pb::OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(graph),
        ..Default::default()
    };
    RandomGraph {
        model,
        inputs: b.inputs,
        ops,
    }
}

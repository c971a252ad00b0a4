//! Quantized models keep their activations quantized: the QDQ patterns
//! of `testdata/regress/qdq_*` (made by `tools/gen_regress.py` with
//! onnxruntime.quantization) become int8 operators and look-up tables,
//! so every tensor the
//! arena holds between the graph's input and output is u8 or i8, and the
//! arena is about a quarter of the float model's. (Their values are
//! checked against onnxruntime by `regress.rs`.)

mod common;

use common::*;

/// The arena tensors of a compiled bundle that are neither graph inputs
/// nor outputs and are not u8/i8, as `name dtype`. A kernel's packing
/// scratch (`<op>.scratch`, f32 cells the int8 products pack bytes into,
/// used by that one step) is not a model tensor and not counted.
fn wide_activations(json: &serde_json::Value) -> Vec<String> {
    json["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .filter(|t| t["region"] == "arena" && t["kind"] == "activation")
        .filter(|t| {
            let scratch = t["name"].as_str().is_some_and(|n| n.ends_with(".scratch"));
            !(scratch && t["first_step"] == t["last_step"])
        })
        .filter(|t| !matches!(t["dtype"].as_str(), Some("u8" | "i8")))
        .map(|t| format!("{} {}", t["name"], t["dtype"]))
        .collect()
}

/// The operator types of a compiled bundle's steps, in order.
fn op_types(json: &serde_json::Value) -> Vec<&str> {
    json["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .filter_map(|o| o["op_type"].as_str())
        .collect()
}

fn arena(json: &serde_json::Value) -> u64 {
    json["arena_bytes"].as_u64().expect("arena_bytes")
}

#[test]
fn qdq_cnn_activations_are_int8_and_the_arena_a_quarter_of_fp32() {
    let dir = tempfile::tempdir().unwrap();
    let case = testdata("regress/qdq_cnn");
    let quantized = compile_and_inspect(&case.join("model.onnx"), &dir.path().join("q.stow"), &[]);
    let float = compile_and_inspect(&case.join("float.onnx"), &dir.path().join("f.stow"), &[]);
    assert_eq!(wide_activations(&quantized), Vec::<String>::new());
    let (q, f) = (arena(&quantized), arena(&float));
    assert!(
        q * 10 <= f * 3,
        "quantized arena {q} B is more than 0.3 of the float arena {f} B"
    );
    // The convolutions, the Add, the pool and the dense layer run as
    // quantized operators, not in f32 between DequantizeLinear and
    // QuantizeLinear.
    let ops = op_types(&quantized);
    assert!(!ops.contains(&"DequantizeLinear"), "{ops:?}");
    assert!(ops.contains(&"QLinearAdd") && ops.contains(&"QLinearGlobalAveragePool"));
    // The residual addition writes its sum over the operand that dies
    // there (both do; the kernel reads each chunk before writing it).
    let tensors = quantized["tensors"].as_array().expect("tensors");
    let add = quantized["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .find(|o| o["op_type"] == "QLinearAdd")
        .expect("a QLinearAdd");
    let sum = &tensors[add["outputs"][0].as_u64().unwrap() as usize];
    assert_eq!(sum["alias_kind"], "in_place", "{sum}");
}

#[test]
fn qdq_mlp_activations_are_int8() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("regress/qdq_mlp/model.onnx");
    let quantized = compile_and_inspect(&model, &dir.path().join("q.stow"), &[]);
    assert_eq!(wide_activations(&quantized), Vec::<String>::new());
}

#[test]
fn qdq_activations_become_lookup_tables_on_int8_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("regress/qdq_activations/model.onnx");
    let quantized = compile_and_inspect(&model, &dir.path().join("q.stow"), &[]);
    assert_eq!(wide_activations(&quantized), Vec::<String>::new());
    let tables = quantized["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .filter(|o| o["op_type"] == "QLookup")
        .count();
    // Sigmoid, LeakyRelu and HardSwish.
    assert_eq!(tables, 3);
}

/// Swish in a QDQ model (a sigmoid table, then the QDQ product of x and
/// the sigmoid) becomes one table of x: neither the sigmoid's tensor nor
/// a QLinearMul is left, and the table runs in place.
#[test]
fn swish_becomes_one_table_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("regress/qdq_swish/model.onnx");
    let quantized = compile_and_inspect(&model, &dir.path().join("q.stow"), &[]);
    assert_eq!(wide_activations(&quantized), Vec::<String>::new());
    let ops = op_types(&quantized);
    assert_eq!(
        ops.iter().filter(|&&o| o == "QLookup").count(),
        2,
        "{ops:?}"
    );
    assert!(!ops.contains(&"QLinearMul"), "{ops:?}");
    let in_place: Vec<&str> = quantized["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .filter(|t| t["alias_kind"] == "in_place")
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(
        in_place,
        ["m1_QuantizeLinear_Output", "m2_QuantizeLinear_Output"]
    );
}

/// A dynamically quantized product's i32 sums are cast to f32 in place
/// (one element size), so the sums and the cast never take twice the
/// bytes; the outputs are judged against onnxruntime by the regress case.
#[test]
fn casts_of_the_integer_sums_run_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("regress/dynamic_mlp/model.onnx");
    let quantized = compile_and_inspect(&model, &dir.path().join("q.stow"), &[]);
    let tensors = quantized["tensors"].as_array().expect("tensors");
    let casts: Vec<&serde_json::Value> = quantized["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .filter(|o| o["op_type"] == "Cast")
        .collect();
    assert_eq!(casts.len(), 2, "{quantized:#}");
    for cast in casts {
        let of = |k: &str| &tensors[cast[k][0].as_u64().expect("tensor id") as usize];
        let (sums, out) = (of("inputs"), of("outputs"));
        assert_eq!(
            (sums["dtype"].as_str(), out["dtype"].as_str()),
            (Some("i32"), Some("f32"))
        );
        assert_eq!(out["alias_kind"], "in_place", "{out}");
        assert_eq!(out["offset"], sums["offset"]);
    }
}

/// Every u8 activation of a QDQ model carries the scale and zero point of
/// the QuantizeLinear that made it (in the model: read here from the
/// ONNX file itself), through tables, in-place steps and convolutions.
#[test]
fn quantized_tensors_carry_their_models_parameters() {
    use prost::Message;
    use std::collections::HashMap;
    use tract_onnx::pb::ModelProto;
    let dir = tempfile::tempdir().unwrap();
    let path = testdata("regress/qdq_swish/model.onnx");
    let model = ModelProto::decode(&*std::fs::read(&path).unwrap()).unwrap();
    let graph = model.graph.unwrap();
    let constant = |name: &str| -> Option<f64> {
        let t = graph.initializer.iter().find(|t| t.name == name)?;
        // Raw bytes, or the typed fields (u8/i8 in `int32_data`).
        Some(match (t.data_type, t.raw_data.is_empty()) {
            (1, false) => f64::from(f32::from_le_bytes(t.raw_data.get(..4)?.try_into().ok()?)),
            (1, true) => f64::from(*t.float_data.first()?),
            (2, false) => f64::from(*t.raw_data.first()?),
            (3, false) => f64::from(*t.raw_data.first()? as i8),
            (2 | 3, true) => f64::from(*t.int32_data.first()?),
            _ => return None,
        })
    };
    let want: HashMap<&str, (f64, f64)> = graph
        .node
        .iter()
        .filter(|n| n.op_type == "QuantizeLinear")
        .filter_map(|n| {
            Some((
                n.output[0].as_str(),
                (constant(&n.input[1])?, constant(&n.input[2])?),
            ))
        })
        .collect();
    let bundle = compile_and_inspect(&path, &dir.path().join("q.stow"), &[]);
    let mut checked = 0;
    for t in bundle["tensors"].as_array().expect("tensors") {
        if t["kind"] == "weight" || !matches!(t["dtype"].as_str(), Some("u8" | "i8")) {
            continue;
        }
        let name = t["name"].as_str().unwrap();
        let got = (t["quant_scale"].as_f64(), t["quant_zero_point"].as_f64());
        assert!(
            got.0.is_some() && got.1.is_some(),
            "{name} has no parameters: {t}"
        );
        if let Some(&(scale, zero)) = want.get(name) {
            // The scale is an f32: compared as one (JSON prints it as f64).
            let got = (got.0.map(|s| s as f32), got.1);
            assert_eq!(got, (Some(scale as f32), Some(zero)), "{name}");
            checked += 1;
        }
    }
    // x, the two convolutions, the two Swish tables, the output.
    assert_eq!(checked, 6, "{bundle:#}");
}

/// Values that only move between equal parameters (an edge padding, a
/// max pool, a zero padding) move as u8: no activation is wider, and no
/// DequantizeLinear is left.
#[test]
fn paddings_and_pools_between_equal_parameters_stay_int8() {
    let dir = tempfile::tempdir().unwrap();
    let case = testdata("regress/qdq_movement");
    let quantized = compile_and_inspect(&case.join("model.onnx"), &dir.path().join("q.stow"), &[]);
    assert_eq!(wide_activations(&quantized), Vec::<String>::new());
    let ops = op_types(&quantized);
    assert!(!ops.contains(&"DequantizeLinear"), "{ops:?}");
    assert!(ops.contains(&"MaxPool") && ops.contains(&"Pad"), "{ops:?}");
}

/// An int8 product at the arena's peak, where no scratch fits under the
/// bound, still has its weight packed (it packs on the stack) rather than
/// running the plain loops; `regress.rs` checks its sums against
/// onnxruntime's.
#[test]
fn int8_product_at_the_peak_is_packed_without_scratch() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("regress/int8_product_without_scratch/model.onnx");
    let json = compile_and_inspect(&model, &dir.path().join("p.stow"), &[]);
    let packed = packed_depth_blocks(&json);
    assert_eq!(packed, [768], "{json}");
    assert_eq!(json["ops"][0]["outputs"].as_array().unwrap().len(), 1);
}

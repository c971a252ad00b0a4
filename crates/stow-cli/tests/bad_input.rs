//! Each bad input gives one clear error line, a non-zero exit, and leaves no
//! output file behind.

mod common;

use common::*;
use prost::Message;
use std::path::Path;

fn assert_clean_failure(args: &[&str], out: &Path, expect: &[&str]) {
    let o = stow(args);
    let err = stderr(&o);
    assert!(!o.status.success(), "{args:?} should fail");
    assert!(err.starts_with("error: "), "{args:?}: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one line expected, got:\n{err}"
    );
    for word in expect {
        assert!(
            err.contains(word),
            "{args:?}: error should mention `{word}`: {err}"
        );
    }
    assert!(
        !out.exists(),
        "{args:?}: {} should not exist",
        out.display()
    );
    let leftovers: Vec<_> = std::fs::read_dir(out.parent().unwrap())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.path().extension().is_none_or(|x| x != "onnx"))
                .collect()
        })
        .unwrap_or_default();
    assert!(
        leftovers.is_empty(),
        "{args:?}: leftover files {leftovers:?}"
    );
}

#[test]
fn missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.stow");
    let model = dir.path().join("nope.onnx");
    assert_clean_failure(
        &[
            "compile",
            model.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        &out,
        &["nope.onnx", "No such file"],
    );
}

#[test]
fn not_onnx() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("text.onnx");
    std::fs::write(&model, "this is plainly not a protobuf model\n").unwrap();
    let out = dir.path().join("o.stow");
    assert_clean_failure(
        &[
            "compile",
            model.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        &out,
        &["text.onnx", "not a valid ONNX model"],
    );
}

#[test]
fn truncated_onnx() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(testdata("residual_cnn.onnx")).unwrap();
    let model = dir.path().join("cut.onnx");
    std::fs::write(&model, &bytes[..bytes.len() / 2]).unwrap();
    let out = dir.path().join("o.stow");
    assert_clean_failure(
        &[
            "compile",
            model.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        &out,
        &["cut.onnx"],
    );
}

#[test]
fn unsupported_operator_names_node_and_op() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(testdata("mlp.onnx")).unwrap();
    let mut proto = tract_onnx::pb::ModelProto::decode(&bytes[..]).unwrap();
    let graph = proto.graph.as_mut().unwrap();
    graph.node[1].op_type = "FrobnicateTensor".into();
    graph.node[1].name = "the_odd_one".into();
    let model = dir.path().join("odd.onnx");
    std::fs::write(&model, proto.encode_to_vec()).unwrap();
    let out = dir.path().join("o.stow");
    assert_clean_failure(
        &[
            "compile",
            model.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        &out,
        &["the_odd_one", "FrobnicateTensor"],
    );
}

#[test]
fn unset_symbolic_dimension_names_input_symbol_and_fix() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.stow");
    let model = testdata("symbolic_batch.onnx");
    assert_clean_failure(
        &[
            "compile",
            model.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        &out,
        &["image", "`N`", "--dim N="],
    );
}

#[test]
fn output_in_missing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("no/such/dir/o.stow");
    let model = testdata("mlp.onnx");
    let o = stow(&[
        "compile",
        model.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("does not exist") && err.contains("no/such/dir"),
        "{err}"
    );
    assert!(!dir.path().join("no").exists());
}

#[test]
fn bad_flags_are_refused() {
    let model = testdata("mlp.onnx");
    let m = model.to_str().unwrap();
    for (args, word) in [
        (vec!["compile", m, "--align", "48"], "power of two"),
        (
            vec!["compile", m, "--strategy", "magic"],
            "unknown strategy",
        ),
        (
            vec!["compile", m, "--input", "nosuch=1x64"],
            "no input of that name",
        ),
        (
            vec!["compile", m, "--dim", "Q=3"],
            "no input of the model uses",
        ),
    ] {
        let o = stow(&args);
        assert!(!o.status.success(), "{args:?}");
        assert!(stderr(&o).contains(word), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn inspect_rejects_a_non_bundle() {
    let o = stow(&["inspect", testdata("mlp.onnx").to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("mlp.onnx"), "{}", stderr(&o));
}

/// Weights in side files (`tools/gen_hostile.py`): read when they sit
/// beside the model, refused — naming the tensor — when the location leaves
/// the model's directory or the range leaves the file.
#[test]
fn external_data_outside_the_model_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.stow");
    let hostile = repo_root().join("testdata/hostile");
    for (name, expect) in [
        (
            "external_escape",
            "location `../../etc/passwd` is not a path inside",
        ),
        (
            "external_absolute",
            "location `/etc/passwd` is not a path inside",
        ),
        ("external_past_end", "bytes 24..40 lie outside side file"),
        ("external_missing", "side file `no_such_file.weights`"),
    ] {
        let model = hostile.join(format!("{name}.onnx"));
        assert_clean_failure(
            &[
                "compile",
                model.to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
            ],
            &out,
            &[&format!("{name}.onnx"), "tensor `w`", expect],
        );
    }
}

#[cfg(unix)]
#[test]
fn external_data_through_a_symlink_out_of_the_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.onnx");
    std::fs::copy(
        repo_root().join("testdata/hostile/external_ok.onnx"),
        &model,
    )
    .unwrap();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("secret.bin");
    std::fs::write(&target, [0u8; 64]).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("external_ok.weights")).unwrap();
    let out = dir.path().join("out.stow");
    let o = stow(&[
        "compile",
        model.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("leads outside the model's directory"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists());
}

#[test]
fn external_data_beside_the_model_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ok.stow");
    let model = repo_root().join("testdata/hostile/external_ok.onnx");
    let o = stow(&[
        "compile",
        model.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bundle = stow_runtime::Bundle::open(&out).unwrap();
    let w = bundle
        .contents()
        .tensors
        .iter()
        .position(|t| t.name == "w" || t.name.starts_with("w."))
        .expect("weight w in the bundle");
    let bytes = bundle.weight_bytes(w as u32).unwrap();
    let values: Vec<f32> = bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    // The side file holds 16 bytes of padding, then 1, 2, 3, 4.
    assert_eq!(values, [1.0, 2.0, 3.0, 4.0]);
    let v = stow(&["verify", model.to_str().unwrap(), out.to_str().unwrap()]);
    assert!(v.status.success(), "{}", stderr(&v));
}

#[test]
fn max_arena_refuses_large_tensors_and_bundles() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.stow");
    let model = testdata("residual_cnn.onnx");
    // The input image alone is 1x3x32x32 f32 = 12,288 bytes.
    assert_clean_failure(
        &[
            "compile",
            model.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--max-arena",
            "12000",
        ],
        &out,
        &["tensor `image` needs 12288 bytes", "--max-arena 12000"],
    );
    let o = stow(&[
        "compile",
        model.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let arena: u64 = stdout(&o)
        .lines()
        .find(|l| l.trim_start().starts_with("arena "))
        .and_then(|l| l.split_whitespace().nth(1))
        .map(|n| n.replace(',', "").parse().unwrap())
        .unwrap();
    let limit = (arena - 1).to_string();
    let v = stow(&[
        "verify",
        model.to_str().unwrap(),
        out.to_str().unwrap(),
        "--max-arena",
        &limit,
    ]);
    assert!(!v.status.success());
    assert!(
        stderr(&v).contains(&format!("arena needs {arena} bytes")),
        "{}",
        stderr(&v)
    );
    let ok = (arena).to_string();
    let v = stow(&[
        "verify",
        model.to_str().unwrap(),
        out.to_str().unwrap(),
        "--max-arena",
        &ok,
    ]);
    assert!(v.status.success(), "{}", stderr(&v));
}

/// Found by the `onnx_compile` fuzz target: a damaged convolution makes
/// tract index out of bounds during shape inference. The panic becomes one
/// error line naming the stage; no panic message or backtrace is printed.
#[test]
fn a_panic_inside_tract_is_one_clean_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.stow");
    let model = repo_root().join("testdata/hostile/tract_panic_conv_padding.onnx");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_stow"))
        .args([
            "compile",
            model.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("shape inference failed: tract panicked"),
        "{err}"
    );
    assert!(
        !err.contains("stack backtrace") && !err.contains("panicked at"),
        "{err}"
    );
    assert!(!out.exists());
}

/// mlp.onnx with a Dropout on its output whose `training_mode` is a bool
/// graph input `train` (ratio 0.5).
fn mlp_with_training_dropout(dir: &Path) -> std::path::PathBuf {
    use tract_onnx::pb::{type_proto, NodeProto, TensorProto, TypeProto, ValueInfoProto};
    let bytes = std::fs::read(testdata("mlp.onnx")).unwrap();
    let mut proto = tract_onnx::pb::ModelProto::decode(&bytes[..]).unwrap();
    let graph = proto.graph.as_mut().unwrap();
    let out = graph.output[0].name.clone();
    let last = graph.node.last_mut().unwrap();
    last.output[0] = "before_dropout".into();
    graph.node.push(NodeProto {
        name: "the_dropout".into(),
        op_type: "Dropout".into(),
        input: vec!["before_dropout".into(), "ratio".into(), "train".into()],
        output: vec![out],
        ..Default::default()
    });
    graph.initializer.push(TensorProto {
        name: "ratio".into(),
        data_type: 1,
        float_data: vec![0.5],
        ..Default::default()
    });
    graph.input.push(ValueInfoProto {
        name: "train".into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: 9,
                shape: Some(Default::default()),
            })),
            ..Default::default()
        }),
        ..Default::default()
    });
    let model = dir.join("dropout.onnx");
    std::fs::write(&model, proto.encode_to_vec()).unwrap();
    model
}

#[test]
fn dropout_that_may_train_is_refused_until_its_mode_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let model = mlp_with_training_dropout(dir.path());
    let out = dir.path().join("o.stow");
    let (model, out) = (model.to_str().unwrap(), out.to_str().unwrap());
    assert_clean_failure(
        &["compile", model, "-o", out],
        Path::new(out),
        &["the_dropout", "training mode", "--set"],
    );
    let o = stow(&["compile", model, "--set", "train=false", "-o", out]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A ConvTranspose [1,1,1,1] → kernel [2,3], strides [3,2], `auto_pad`
/// given: its SAME output (3 × 2) is one row taller than the full
/// transposed convolution (2 rows).
fn value_info(name: &str, dims: &[i64]) -> tract_onnx::pb::ValueInfoProto {
    use tract_onnx::pb::{tensor_shape_proto, type_proto, TensorShapeProto, TypeProto};
    let dim = |d: i64| tensor_shape_proto::Dimension {
        value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
        ..Default::default()
    };
    tract_onnx::pb::ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: 1,
                shape: Some(TensorShapeProto {
                    dim: dims.iter().map(|&d| dim(d)).collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn ints_attr(name: &str, v: &[i64]) -> tract_onnx::pb::AttributeProto {
    tract_onnx::pb::AttributeProto {
        name: name.into(),
        r#type: tract_onnx::pb::attribute_proto::AttributeType::Ints as i32,
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn text_attr(name: &str, v: &str) -> tract_onnx::pb::AttributeProto {
    tract_onnx::pb::AttributeProto {
        name: name.into(),
        r#type: tract_onnx::pb::attribute_proto::AttributeType::String as i32,
        s: v.as_bytes().to_vec(),
        ..Default::default()
    }
}

fn int_attr(name: &str, v: i64) -> tract_onnx::pb::AttributeProto {
    tract_onnx::pb::AttributeProto {
        name: name.into(),
        r#type: tract_onnx::pb::attribute_proto::AttributeType::Int as i32,
        i: v,
        ..Default::default()
    }
}

/// Writes `dir/file`: a model of the one f32 node `node` from `x` (shape
/// `x_dims`) to `y` (`y_dims`), with `initializer`, at opset 17.
fn one_node_model(
    dir: &Path,
    file: &str,
    node: tract_onnx::pb::NodeProto,
    initializer: Vec<tract_onnx::pb::TensorProto>,
    x_dims: &[i64],
    y_dims: &[i64],
) -> std::path::PathBuf {
    use tract_onnx::pb::{GraphProto, ModelProto, OperatorSetIdProto};
    let graph = GraphProto {
        node: vec![node],
        initializer,
        input: vec![value_info("x", x_dims)],
        output: vec![value_info("y", y_dims)],
        ..Default::default()
    };
    let proto = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(graph),
        ..Default::default()
    };
    let model = dir.join(file);
    std::fs::write(&model, proto.encode_to_vec()).unwrap();
    model
}

/// A ConvTranspose whose output (3 rows, from `auto_pad` SAME_* or, for
/// NOTSET, an explicit `output_shape`) is one row taller than the full
/// transposed convolution (2 rows).
fn convtranspose_taller_than_full(dir: &Path, auto_pad: &str) -> std::path::PathBuf {
    use tract_onnx::pb::{NodeProto, TensorProto};
    let node = NodeProto {
        name: "the_deconv".into(),
        op_type: "ConvTranspose".into(),
        input: vec!["x".into(), "w".into()],
        output: vec!["y".into()],
        attribute: vec![
            if auto_pad == "NOTSET" {
                ints_attr("output_shape", &[3, 2])
            } else {
                text_attr("auto_pad", auto_pad)
            },
            ints_attr("kernel_shape", &[2, 3]),
            ints_attr("strides", &[3, 2]),
        ],
        ..Default::default()
    };
    let weights = TensorProto {
        name: "w".into(),
        dims: vec![1, 1, 2, 3],
        data_type: 1,
        float_data: vec![0.5, -1.0, 2.0, 0.25, 1.5, -0.75],
        ..Default::default()
    };
    let file = format!("deconv_{auto_pad}.onnx");
    one_node_model(
        dir,
        &file,
        node,
        vec![weights],
        &[1, 1, 1, 1],
        &[1, 1, 3, 2],
    )
}

/// A pool named `the_pool` over `x_dims` with `attrs`.
fn pool_model(
    dir: &Path,
    op_type: &str,
    attrs: Vec<tract_onnx::pb::AttributeProto>,
    x_dims: &[i64],
    y_dims: &[i64],
) -> std::path::PathBuf {
    let node = tract_onnx::pb::NodeProto {
        name: "the_pool".into(),
        op_type: op_type.into(),
        input: vec!["x".into()],
        output: vec!["y".into()],
        attribute: attrs,
        ..Default::default()
    };
    one_node_model(
        dir,
        &format!("{op_type}.onnx"),
        node,
        vec![],
        x_dims,
        y_dims,
    )
}

/// Pools whose windows have no single meaning are refused, naming the
/// node (found by tools/fuzz_graphs.py: each gave an answer that
/// onnxruntime, onnx.reference or ONNX shape inference contradicts).
#[test]
fn pools_with_windows_of_no_single_meaning_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.stow");
    let out_s = out.to_str().unwrap();
    let cases = [
        // Kernel 3 over 2 rows, no padding: ONNX's size is 0 (ceil mode)
        // or negative, tract's 1.
        (
            "MaxPool",
            vec![ints_attr("kernel_shape", &[3, 1]), int_attr("ceil_mode", 1)],
            &[1, 1, 2, 4][..],
            &[1, 1, 1, 4][..],
            "more than the 2 input rows",
        ),
        (
            "AveragePool",
            vec![
                ints_attr("kernel_shape", &[1, 5]),
                ints_attr("pads", &[0, 1, 0, 1]),
            ],
            &[1, 1, 2, 2][..],
            &[1, 1, 2, 1][..],
            "more than the 2 input rows plus 2 of padding",
        ),
        // The first window (dilation 3) steps over the only real element
        // from the padding: the maximum of nothing.
        (
            "MaxPool",
            vec![
                ints_attr("kernel_shape", &[2]),
                ints_attr("dilations", &[3]),
                ints_attr("pads", &[2, 2]),
            ],
            &[1, 1, 1][..],
            &[1, 1, 2][..],
            "lies wholly in the padding",
        ),
        // SAME with ceil_mode and a kernel narrower than its stride:
        // ONNX sizes it in ceil mode (3), tract by the SAME rule (2).
        (
            "MaxPool",
            vec![
                ints_attr("kernel_shape", &[1]),
                ints_attr("strides", &[3]),
                text_attr("auto_pad", "SAME_UPPER"),
                int_attr("ceil_mode", 1),
            ],
            &[1, 1, 5][..],
            &[1, 1, 2][..],
            "kernel narrower than its stride",
        ),
        // SAME whose padding would be negative (a window of 1 every 3
        // over 3): ONNX's reference crops, onnxruntime refuses or crops,
        // tract clamps at zero.
        (
            "MaxPool",
            vec![
                ints_attr("kernel_shape", &[1]),
                ints_attr("strides", &[3]),
                text_attr("auto_pad", "SAME_UPPER"),
            ],
            &[1, 1, 3][..],
            &[1, 1, 1][..],
            "negative padding",
        ),
    ];
    for (op, attrs, x, y, why) in cases {
        let model = pool_model(dir.path(), op, attrs, x, y);
        assert_clean_failure(
            &["compile", model.to_str().unwrap(), "-o", out_s],
            Path::new(out_s),
            &["the_pool", why],
        );
    }
    // Padding that the window reaches into from the input is fine.
    let model = pool_model(
        dir.path(),
        "MaxPool",
        vec![ints_attr("kernel_shape", &[3]), ints_attr("pads", &[2, 2])],
        &[1, 1, 1],
        &[1, 1, 3],
    );
    let o = stow(&["compile", model.to_str().unwrap(), "-o", out_s]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A ConvTranspose output larger than the full transposed convolution
/// has no single meaning under SAME_*: ONNX's reference extends it partly
/// at the start (it splits the negative padding rounding down), ONNX's
/// shape inference and onnxruntime clamp the padding and give the full
/// size. Both are refused (SAME_UPPER was extended at the end and was
/// silently wrong, found by tools/fuzz_graphs.py; SAME_LOWER disagreed
/// with onnxruntime's shape). One extra row of an explicit
/// `output_shape` lies at the end for all of them and still compiles.
#[test]
fn convtranspose_extended_at_the_start_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.stow");
    let out_s = out.to_str().unwrap();
    for auto_pad in ["SAME_UPPER", "SAME_LOWER"] {
        let model = convtranspose_taller_than_full(dir.path(), auto_pad);
        assert_clean_failure(
            &["compile", model.to_str().unwrap(), "-o", out_s],
            Path::new(out_s),
            &["the_deconv", "more than the full transposed convolution"],
        );
    }
    let explicit = convtranspose_taller_than_full(dir.path(), "NOTSET");
    let o = stow(&["compile", explicit.to_str().unwrap(), "-o", out_s]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A LayerNormalization scale that would widen the output beyond the
/// input (it does not broadcast to the normalised axes) is refused, as
/// onnxruntime refuses it, naming the node and both shapes (a graph of
/// tools/fuzz_graphs.py had one).
#[test]
fn layernorm_scale_wider_than_the_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.stow");
    let out_s = out.to_str().unwrap();
    let model = |file: &str, scale_dims: &[i64]| {
        let count = scale_dims.iter().product::<i64>() as usize;
        let scale = tract_onnx::pb::TensorProto {
            name: "scale".into(),
            dims: scale_dims.to_vec(),
            data_type: 1,
            float_data: (0..count).map(|i| 0.5 + i as f32).collect(),
            ..Default::default()
        };
        let node = tract_onnx::pb::NodeProto {
            name: "the_norm".into(),
            op_type: "LayerNormalization".into(),
            input: vec!["x".into(), "scale".into()],
            output: vec!["y".into()],
            attribute: vec![int_attr("axis", 1)],
            ..Default::default()
        };
        one_node_model(dir.path(), file, node, vec![scale], &[2, 3, 1], &[2, 3, 1])
    };
    assert_clean_failure(
        &[
            "compile",
            model("wide.onnx", &[3, 4]).to_str().unwrap(),
            "-o",
            out_s,
        ],
        Path::new(out_s),
        &["the_norm", "does not broadcast to the normalised shape"],
    );
    // One scale per channel broadcasts along the last axis: fine.
    let fits = model("fits.onnx", &[3, 1]);
    let o = stow(&["compile", fits.to_str().unwrap(), "-o", out_s]);
    assert!(o.status.success(), "{}", stderr(&o));
}

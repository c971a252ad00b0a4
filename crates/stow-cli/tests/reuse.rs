//! In-place, view and concat sharing: smaller arenas, visible in `inspect`, never
//! over graph inputs unless asked, and still bit-exact (see verify.rs).

mod common;

use common::*;
use serde_json::Value;

fn arena(json: &Value) -> u64 {
    json["arena_bytes"].as_u64().unwrap()
}

fn tensor<'a>(json: &'a Value, name: &str) -> &'a Value {
    json["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap()
}

#[test]
fn reuse_shrinks_arenas_and_each_switch_matters() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.stow");
    // The model's own tensors: no kernel scratch (it would dominate the
    // small models' peaks).
    let off = [
        "--threads",
        "0",
        "--no-inplace",
        "--no-views",
        "--no-concat-inplace",
    ];
    // (model, in place must matter, concat in place must matter)
    for (name, inplace_matters, concat_matters) in [
        ("mobilenet_block.onnx", false, false),
        ("transformer_block.onnx", true, false),
        ("concat_block.onnx", false, true),
    ] {
        let model = testdata(name);
        let all = arena(&compile_and_inspect(&model, &out, &off[..2]));
        let none = arena(&compile_and_inspect(&model, &out, &off));
        let no_inplace = arena(&compile_and_inspect(
            &model,
            &out,
            &["--threads", "0", "--no-inplace"],
        ));
        let no_concat = arena(&compile_and_inspect(
            &model,
            &out,
            &["--threads", "0", "--no-concat-inplace"],
        ));
        assert!(all <= none, "{name}: reuse on {all} vs off {none}");
        assert!(no_inplace <= none && no_concat <= none, "{name}");
        if inplace_matters {
            assert!(all < no_inplace, "{name}: in place ({all} vs {no_inplace})");
        }
        if concat_matters {
            assert!(
                all < no_concat,
                "{name}: concat in place ({all} vs {no_concat})"
            );
        }
        if inplace_matters || concat_matters {
            assert!(all < none, "{name}: reuse on {all} should beat off {none}");
        }
    }
}

#[test]
fn aliases_are_shown_and_share_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.stow");
    let json = compile_and_inspect(&testdata("transformer_block.onnx"), &out, &[]);
    let tensors = json["tensors"].as_array().unwrap();
    let aliased: Vec<&Value> = tensors
        .iter()
        .filter(|t| !t["alias_of"].is_null())
        .collect();
    assert!(
        aliased.iter().any(|t| t["alias_kind"] == "in_place"),
        "expected in-place tensors"
    );
    assert!(
        aliased.iter().any(|t| t["alias_kind"] == "view"),
        "expected views"
    );
    for t in &aliased {
        let target = tensor(&json, t["alias_of"].as_str().unwrap());
        assert_eq!(
            t["offset"], target["offset"],
            "{} shares {}'s bytes",
            t["name"], target["name"]
        );
        if t["alias_kind"] == "in_place" {
            // The overwritten input is not read after the step that overwrites it.
            assert!(
                target["last_step"].as_u64() <= t["first_step"].as_u64(),
                "{} overwritten while live",
                target["name"]
            );
        }
    }
    let text = stdout(&stow(&["inspect", out.to_str().unwrap()]));
    assert!(
        text.contains("in place of ") && text.contains("view of "),
        "{text}"
    );
}

#[test]
fn graph_inputs_are_kept_unless_reuse_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.stow");
    let model = testdata("mlp.onnx");
    fn root_kind<'a>(json: &'a Value, mut t: &'a Value) -> String {
        loop {
            match t["alias_of"].as_str() {
                Some(of) if t["alias_kind"] == "in_place" => t = tensor(json, of),
                _ => return t["kind"].as_str().unwrap().to_string(),
            }
        }
    }
    let kept = compile_and_inspect(&model, &out, &[]);
    assert!(kept["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["alias_kind"] != "in_place" || root_kind(&kept, t) != "input"));
    let reused = compile_and_inspect(
        &testdata("transformer_block.onnx"),
        &out,
        &["--reuse-inputs"],
    );
    let default = compile_and_inspect(
        &testdata("transformer_block.onnx"),
        &dir.path().join("default.stow"),
        &[],
    );
    assert!(arena(&reused) <= arena(&default));
    let o = stow(&[
        "verify",
        testdata("transformer_block.onnx").to_str().unwrap(),
        out.to_str().unwrap(),
        "--reuse-inputs",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn verify_needs_the_same_reuse_flags() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.stow");
    let model = testdata("mobilenet_block.onnx");
    compile_and_inspect(&model, &out, &["--no-inplace"]);
    let o = stow(&["verify", model.to_str().unwrap(), out.to_str().unwrap()]);
    assert!(
        !o.status.success() && stderr(&o).contains("does not match"),
        "{}",
        stderr(&o)
    );
    let o = stow(&[
        "verify",
        model.to_str().unwrap(),
        out.to_str().unwrap(),
        "--no-inplace",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

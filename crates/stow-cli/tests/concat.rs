//! Concats done in place: producers write into their slice of the concat's
//! output, the concat copies nothing, the arena shrinks, and the arena run
//! stays bit-exact; a bundle with slices in the wrong place is caught at
//! the concat. Also `--concurrent-branches`: never cheaper, still exact.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;

fn arena(json: &Value) -> u64 {
    json["arena_bytes"].as_u64().unwrap()
}

fn tensors(json: &Value) -> &Vec<Value> {
    json["tensors"].as_array().unwrap()
}

/// Concat ops of a bundle: (op, output tensor).
fn concats(json: &Value) -> Vec<(&Value, &Value)> {
    json["ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["op_type"] == "Concat")
        .map(|o| {
            (
                o,
                &tensors(json)[o["outputs"][0].as_u64().unwrap() as usize],
            )
        })
        .collect()
}

fn verify(model: &Path, bundle: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["verify", model.to_str().unwrap(), bundle.to_str().unwrap()];
    args.extend_from_slice(extra);
    stow(&args)
}

#[test]
fn concat_in_place_is_free_and_shrinks_the_arena() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("concat_block.onnx");
    let on = dir.path().join("on.stow");
    let off = dir.path().join("off.stow");
    let json = compile_and_inspect(&model, &on, &[]);
    let copied = compile_and_inspect(&model, &off, &["--no-concat-inplace"]);
    assert!(
        arena(&json) < arena(&copied),
        "in place {} should beat copies {}",
        arena(&json),
        arena(&copied)
    );
    assert!(tensors(&copied)
        .iter()
        .all(|t| t["alias_kind"] != "concat_slice"));

    // Exactly the block's channel concat is in place; the concat over the
    // graph input, the one holding one tensor twice, the one along an inner
    // axis and the one written over while an input is still read are copies.
    let cs = concats(&json);
    assert_eq!(cs.len(), 5, "{cs:?}");
    let slices: Vec<&Value> = tensors(&json)
        .iter()
        .filter(|t| t["alias_kind"] == "concat_slice")
        .collect();
    assert_eq!(slices.len(), 3, "{slices:?}");
    let (op, out) = cs
        .iter()
        .find(|(_, out)| out["shape"] == serde_json::json!([1, 24, 16, 16]))
        .unwrap();
    for s in &slices {
        assert_eq!(s["alias_of"], out["name"]);
    }
    // Every input of the concat already sits in its slice.
    let mut at = out["offset"].as_u64().unwrap();
    for input in op["inputs"].as_array().unwrap() {
        let t = &tensors(&json)[input.as_u64().unwrap() as usize];
        assert_eq!(t["offset"].as_u64().unwrap(), at, "{}", t["name"]);
        at += t["size"].as_u64().unwrap();
    }
    assert_eq!(
        at,
        out["offset"].as_u64().unwrap() + out["size"].as_u64().unwrap()
    );
    let text = stdout(&stow(&["inspect", on.to_str().unwrap()]));
    assert!(text.contains("slice of concat "), "{text}");

    for (bundle, flags) in [(&on, &[][..]), (&off, &["--no-concat-inplace"][..])] {
        let o = verify(&model, bundle, flags);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stdout(&o).starts_with("PASS"), "{}", stdout(&o));
    }
    // The model's aliases must be the bundle's.
    let o = verify(&model, &on, &["--no-concat-inplace"]);
    assert!(
        !o.status.success() && stderr(&o).contains("does not match"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn slices_in_the_wrong_place_fail_at_the_concat() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("concat_block.onnx");
    let out = dir.path().join("swapped.stow");
    let json = compile_and_inspect(&model, &out, &[]);
    let (op, concat) = concats(&json)
        .into_iter()
        .find(|(_, out)| out["shape"] == serde_json::json!([1, 24, 16, 16]))
        .unwrap();
    let step = json["ops"]
        .as_array()
        .unwrap()
        .iter()
        .position(|o| o == op)
        .unwrap() as u64;
    let input = |k: usize| &tensors(&json)[op["inputs"][k].as_u64().unwrap() as usize];
    let (a, b) = (
        input(0)["offset"].as_u64().unwrap(),
        input(1)["offset"].as_u64().unwrap(),
    );
    assert_ne!(a, b);
    // Swap the first two slices, with the in-place chains that wrote them:
    // each holds a correct value, just in the other's place.
    let mut chain: Vec<String> = vec![concat["name"].as_str().unwrap().to_string()];
    loop {
        let more: Vec<String> = tensors(&json)
            .iter()
            .filter(|t| {
                t["first_step"].as_u64().unwrap() <= step
                    && t["alias_of"]
                        .as_str()
                        .is_some_and(|of| chain.iter().any(|c| c == of))
                    && !chain.iter().any(|c| c == &t["name"])
            })
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        if more.is_empty() {
            break;
        }
        chain.extend(more);
    }
    rewrite(&out, |c| {
        for t in c.tensors.iter_mut().filter(|t| chain.contains(&t.name)) {
            if t.offset == a {
                t.offset = b;
            } else if t.offset == b {
                t.offset = a;
            }
        }
    });
    let o = verify(&model, &out, &[]);
    assert!(!o.status.success(), "{}", stdout(&o));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("`{}`", concat["name"].as_str().unwrap()))
            && err.contains(&format!("step {step} ")),
        "the concat itself should find the misplaced slices: {err}"
    );
}

#[test]
fn concurrent_branches_cost_at_least_the_default_and_stay_exact() {
    let dir = tempfile::tempdir().unwrap();
    for model in testdata_models() {
        let default = dir.path().join("d.stow");
        let concurrent = dir.path().join("c.stow");
        let csv = dir.path().join("c.csv");
        let base = arena(&compile_and_inspect(&model, &default, &[]));
        let json = compile_and_inspect(
            &model,
            &concurrent,
            &[
                "--concurrent-branches",
                "--dump-problem",
                csv.to_str().unwrap(),
            ],
        );
        assert!(
            arena(&json) >= base,
            "{}: concurrent {} < default {base}",
            model.display(),
            arena(&json)
        );
        let dump = std::fs::read_to_string(&csv).unwrap();
        assert!(dump.contains("id,size,conflicts"), "{dump}");
        let mut flags = vec!["--concurrent-branches".to_string()];
        flags.extend(model_args(&model));
        let refs: Vec<&str> = flags.iter().map(|s| s.as_str()).collect();
        let o = verify(&model, &concurrent, &refs);
        assert!(o.status.success(), "{}: {}", model.display(), stderr(&o));
    }
    // Parallel branches make a real difference on a branchy model (seen
    // on the model's own tensors: kernel scratch would dominate its peak).
    let model = testdata("concat_block.onnx");
    let base = arena(&compile_and_inspect(
        &model,
        &dir.path().join("d.stow"),
        &["--threads", "0"],
    ));
    let conc = arena(&compile_and_inspect(
        &model,
        &dir.path().join("c.stow"),
        &["--concurrent-branches", "--threads", "0"],
    ));
    assert!(conc > base, "{conc} vs {base}");
}

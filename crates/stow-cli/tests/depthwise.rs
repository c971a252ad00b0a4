//! Depthwise convolutions in place: `stow inspect --json` shows the alias,
//! `--no-depthwise-inplace` turns it off, the arena shrinks, and `stow
//! verify` (given the same switches) and `stow run --check` at 1–3 threads
//! still pass.

mod common;

use common::*;
use serde_json::Value;

fn depthwise(json: &Value) -> Vec<&Value> {
    json["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["alias_kind"] == "depthwise_in_place")
        .collect()
}

#[test]
fn depthwise_in_place_shrinks_the_arena_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("depthwise_block.onnx");
    let (on, off) = (dir.path().join("on.stow"), dir.path().join("off.stow"));
    let json = compile_and_inspect(&model, &on, &[]);
    let copied = compile_and_inspect(&model, &off, &["--no-depthwise-inplace"]);
    assert_eq!(json["arena_bytes"], 17_408);
    assert_eq!(copied["arena_bytes"], 32_768);
    assert!(depthwise(&copied).is_empty());
    let aliased = depthwise(&json);
    assert_eq!(aliased.len(), 2, "{aliased:?}");
    let tensors = json["tensors"].as_array().unwrap();
    for t in &aliased {
        // Over the input's first byte, never larger.
        let input = tensors.iter().find(|x| x["name"] == t["alias_of"]).unwrap();
        assert_eq!(t["offset"], input["offset"]);
        assert!(t["size"].as_u64() <= input["size"].as_u64());
    }
    let m = model.to_str().unwrap();
    for (bundle, flags) in [(&on, &[][..]), (&off, &["--no-depthwise-inplace"][..])] {
        let b = bundle.to_str().unwrap();
        let mut args = vec!["verify", m, b];
        args.extend_from_slice(flags);
        let o = stow(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        for threads in ["1", "2", "3"] {
            let o = stow(&["run", b, "--threads", threads, "--check", m]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
    }
    // The model's aliases must match the bundle's: a bundle in place is
    // not the model without the switch.
    let o = stow(&["verify", m, on.to_str().unwrap(), "--no-depthwise-inplace"]);
    assert!(!o.status.success());
}

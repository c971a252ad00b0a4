//! Typed zero-copy weight views and tensor lookups.
// Opens bundles from files (`Bundle::open`): a `std` feature API.
#![cfg(feature = "std")]

mod common;

use common::write;
use stow_bundle::testing::{refs, sample, sample_bytes};
use stow_bundle::{to_bytes, DType, TensorKind};
use stow_runtime::{Bundle, F16Bits, LookupError};

#[test]
fn typed_weights_view_the_mapped_bytes() {
    let (_c, w) = sample();
    let (_dir, path) = write(&sample_bytes());
    let b = Bundle::open(&path).unwrap();

    // "w" is f32 [8,4] holding bytes 0..128.
    let wf: &[f32] = b.weight("w").unwrap();
    assert_eq!(wf.len(), 32);
    let expected: Vec<f32> = w[1]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(wf, &expected[..]);
    // Zero-copy: the slice points into the mapping.
    assert_eq!(
        wf.as_ptr().cast::<u8>(),
        b.weight_bytes(1).unwrap().as_ptr()
    );
    // By id too, and "b" is i64 [3] of 0x0707...
    assert_eq!(b.weight::<f32, _>(&1u32).unwrap(), wf);
    assert_eq!(
        b.weight::<i64, _>("b").unwrap(),
        &[0x0707_0707_0707_0707i64; 3]
    );
}

#[test]
fn lookup_errors_are_typed() {
    let (_dir, path) = write(&sample_bytes());
    let b = Bundle::open(&path).unwrap();
    assert_eq!(
        b.weight::<f32, _>("nope").unwrap_err(),
        LookupError::UnknownName {
            name: "nope".into()
        }
    );
    assert_eq!(
        b.weight::<f32, _>(&99u32).unwrap_err(),
        LookupError::UnknownId { id: 99, count: 5 }
    );
    let e = b.weight::<i32, _>("w").unwrap_err();
    assert_eq!(
        e,
        LookupError::WrongDType {
            name: "w".into(),
            id: 1,
            stored: DType::F32,
            requested: DType::I32
        }
    );
    assert!(
        e.to_string().contains("`w` (id 1) holds f32, not i32"),
        "{e}"
    );
    assert_eq!(
        b.weight::<f32, _>("x").unwrap_err(),
        LookupError::NotAWeight {
            name: "x".into(),
            id: 0
        }
    );
    // f16 is viewed as raw bits; asking for it on an f32 weight fails.
    assert!(matches!(
        b.weight::<F16Bits, _>("w"),
        Err(LookupError::WrongDType {
            requested: DType::F16,
            ..
        })
    ));
}

#[test]
fn repeated_names_are_ambiguous() {
    let (mut c, w) = sample();
    c.tensors[3].name = "w".into();
    c.tensors[3].dtype = DType::F32;
    c.tensors[3].shape = vec![6];
    let (_dir, path) = write(&to_bytes(&c, &refs(&w)).unwrap());
    let b = Bundle::open(&path).unwrap();
    assert_eq!(
        b.weight::<f32, _>("w").unwrap_err(),
        LookupError::AmbiguousName {
            name: "w".into(),
            first: 1,
            second: 3
        }
    );
    // Ids still work.
    assert_eq!(b.weight::<f32, _>(&3u32).unwrap().len(), 6);
}

#[test]
fn misaligned_bytes_are_refused() {
    // A mapped bundle always has aligned weights; an arena tensor at an
    // odd offset is the reachable case.
    let (mut c, w) = sample();
    c.tensors[2].offset = 66; // h: f32 [1,4], 16 bytes, within 128
    let (_dir, path) = write(&to_bytes(&c, &refs(&w)).unwrap());
    let b = Bundle::open(&path).unwrap();
    let arena = stow_runtime::Arena::new(&b).unwrap();
    let e = arena.tensor::<f32, _>(&b, "h").unwrap_err();
    assert!(
        matches!(
            e,
            LookupError::Misaligned {
                id: 2,
                align: 4,
                ..
            }
        ),
        "{e:?}"
    );
    // The bytes are still reachable.
    assert_eq!(arena.tensor_bytes(&b, "h").unwrap().len(), 16);
}

#[test]
fn inputs_and_outputs_are_described() {
    let (_dir, path) = write(&sample_bytes());
    let b = Bundle::open(&path).unwrap();
    let ins: Vec<_> = b.inputs().collect();
    let outs: Vec<_> = b.outputs().collect();
    assert_eq!(ins.len(), 1);
    assert_eq!((ins[0].id, ins[0].name()), (0, "x"));
    assert_eq!(
        (ins[0].dtype(), ins[0].shape()),
        (DType::F32, &[1u64, 8][..])
    );
    assert_eq!(ins[0].tensor.kind, TensorKind::Input);
    assert_eq!(
        (outs[0].id, outs[0].name(), outs[0].size_bytes()),
        (4, "y", 16)
    );
    assert_eq!(b.tensor("y").unwrap(), outs[0]);
}

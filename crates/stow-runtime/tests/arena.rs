//! The activation arena: one aligned allocation, tensor views inside it.
// Opens bundles from files (`Bundle::open`): a `std` feature API.
#![cfg(feature = "std")]

mod common;

use common::write;
use stow_bundle::testing::{refs, sample, sample_bytes};
use stow_bundle::{to_bytes, Region};
use stow_runtime::{Arena, ArenaError, Bundle, LookupError};

#[test]
fn arena_has_the_planned_size_and_alignment() {
    let (_dir, path) = write(&sample_bytes());
    let b = Bundle::open(&path).unwrap();
    let a = Arena::new(&b).unwrap();
    assert_eq!(a.len(), 128);
    assert_eq!(a.align(), 64);
    assert_eq!(a.bytes().as_ptr() as usize % 64, 0);
    assert!(a.bytes().iter().all(|&x| x == 0));
}

#[test]
fn every_arena_tensor_lies_inside_the_arena_at_its_offset() {
    let (_dir, path) = write(&sample_bytes());
    let b = Bundle::open(&path).unwrap();
    let a = Arena::new(&b).unwrap();
    let base = a.bytes().as_ptr() as usize;
    for (id, t) in b.contents().tensors.iter().enumerate() {
        let id = id as u32;
        if t.region == Region::Weights {
            assert!(matches!(
                a.tensor_bytes(&b, &id),
                Err(LookupError::NotInArena { .. })
            ));
            continue;
        }
        let v: &[f32] = a.tensor(&b, &id).unwrap();
        assert_eq!(v.len() as u64 * 4, t.size, "{}", t.name);
        let start = v.as_ptr() as usize - base;
        assert_eq!(start as u64, t.offset, "{}", t.name);
        assert!(start + v.len() * 4 <= a.len());
    }
}

#[test]
fn inputs_are_written_and_aliases_overlap() {
    let (_dir, path) = write(&sample_bytes());
    let b = Bundle::open(&path).unwrap();
    let mut a = Arena::new(&b).unwrap();
    let x = b.inputs().next().unwrap();
    a.tensor_mut::<f32, _>(&b, &x.id)
        .unwrap()
        .copy_from_slice(&[1., 2., 3., 4., 5., 6., 7., 8.]);
    assert_eq!(a.tensor::<f32, _>(&b, "x").unwrap()[7], 8.0);
    // "y" is a view of "x" (offset 0, first 4 elements): same bytes.
    let y = b.outputs().next().unwrap();
    assert_eq!(a.tensor::<f32, _>(&b, &y.id).unwrap(), &[1., 2., 3., 4.]);
    // "h" lies elsewhere and is untouched.
    assert_eq!(a.tensor::<f32, _>(&b, "h").unwrap(), &[0.0; 4]);
    a.clear();
    assert_eq!(a.tensor::<f32, _>(&b, "y").unwrap(), &[0.0; 4]);
}

#[test]
fn arena_errors() {
    let (_dir, path) = write(&sample_bytes());
    let b = Bundle::open(&path).unwrap();
    let mut a = Arena::new(&b).unwrap();
    assert!(matches!(
        a.tensor::<i64, _>(&b, "x"),
        Err(LookupError::WrongDType { id: 0, .. })
    ));
    assert!(matches!(
        a.tensor_mut::<f32, _>(&b, "w"),
        Err(LookupError::NotInArena { id: 1, .. })
    ));
    assert!(matches!(
        a.tensor::<f32, _>(&b, "zz"),
        Err(LookupError::UnknownName { .. })
    ));

    // An arena from another plan is refused, even of the same size.
    let (mut c, w) = sample();
    c.tensors[2].offset = 32;
    let (_dir2, other) = write(&to_bytes(&c, &refs(&w)).unwrap());
    let other = Bundle::open(&other).unwrap();
    assert_eq!(other.header().arena_bytes, a.len() as u64);
    let e = a.tensor::<f32, _>(&other, "h").unwrap_err();
    assert!(matches!(e, LookupError::WrongBundle { .. }), "{e:?}");
}

#[test]
fn large_alignments_are_honoured_and_absurd_ones_refused() {
    let (mut c, w) = sample();
    c.arena_align = 4096;
    let (_dir, path) = write(&to_bytes(&c, &refs(&w)).unwrap());
    let b = Bundle::open(&path).unwrap();
    let a = Arena::new(&b).unwrap();
    assert_eq!(a.bytes().as_ptr() as usize % 4096, 0);
    assert_eq!(a.len(), 128);

    c.arena_align = 1 << 40;
    let (_dir, path) = write(&to_bytes(&c, &refs(&w)).unwrap());
    let b = Bundle::open(&path).unwrap();
    let e = Arena::new(&b).unwrap_err();
    assert!(matches!(e, ArenaError::Alignment { .. }), "{e:?}");
    assert!(e.to_string().contains("m.stow"), "{e}");
}

#[test]
fn unallocatable_arena_is_an_error_not_an_abort() {
    let (mut c, w) = sample();
    c.arena_bytes = u64::MAX - 4096;
    let (_dir, path) = write(&to_bytes(&c, &refs(&w)).unwrap());
    let b = Bundle::open(&path).unwrap();
    let e = Arena::new(&b).unwrap_err();
    assert!(matches!(e, ArenaError::Alloc { .. }), "{e:?}");
}

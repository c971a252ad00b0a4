//! Opening bundles from disk.
// Opens bundles from files (`Bundle::open`): a `std` feature API.
#![cfg(feature = "std")]

use stow_bundle::format::kind;
use stow_bundle::testing::{sample, sample_bytes, section_range, with_assigned_offsets};
use stow_bundle::{BundleError, Region};
use stow_runtime::{Bundle, RuntimeError};

fn write(bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.stow");
    std::fs::write(&path, bytes).unwrap();
    (dir, path)
}

#[test]
fn opens_a_valid_bundle() {
    let (c, w) = sample();
    let (_dir, path) = write(&sample_bytes());
    let b = Bundle::open(&path).unwrap();
    b.verify_weights().unwrap();
    assert_eq!(b.contents(), &with_assigned_offsets(&c));
    assert_eq!(b.view().contents(), b.contents());
    assert_eq!(b.header().tensor_count, 5);
    assert_eq!(b.sections().len(), 5);
    assert_eq!(b.path(), path);
    for (i, t) in c.tensors.iter().enumerate() {
        let got = b.weight_bytes(i as u32);
        if t.region == Region::Weights {
            let got = got.unwrap();
            assert_eq!(got, &w[i][..]);
            assert_eq!(got.as_ptr() as usize % 64, 0, "mapped weights are aligned");
        } else {
            assert!(got.is_none());
        }
    }
}

#[test]
fn corrupt_weights_fail_verification_only() {
    let mut bytes = sample_bytes();
    let r = section_range(&bytes, kind::WEIGHTS);
    bytes[r.start] ^= 1;
    let (_dir, path) = write(&bytes);
    let b = Bundle::open(&path).unwrap();
    let e = b.verify_weights().unwrap_err();
    assert!(
        matches!(
            e,
            RuntimeError::Invalid {
                source: BundleError::Checksum {
                    what: "weights",
                    ..
                },
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn bad_files_are_rejected_with_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.stow");
    let e = Bundle::open(&missing).unwrap_err();
    assert!(matches!(e, RuntimeError::Io { .. }), "{e:?}");
    assert!(e.to_string().contains("absent.stow"));

    for bytes in [&b""[..], &b"not a bundle"[..], &sample_bytes()[..100]] {
        let (_d, path) = write(bytes);
        let e = Bundle::open(&path).unwrap_err();
        assert!(
            matches!(e, RuntimeError::Invalid { .. } | RuntimeError::Io { .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("m.stow"), "{e}");
    }
}

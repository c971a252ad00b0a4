//! `write_file`: atomic replacement through a temporary file.

use stow_bundle::testing::sample_bytes;
use stow_bundle::{write_file, BundleError, BundleView};

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn writes_and_replaces_without_leftovers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.stow");
    write_file(&path, b"old").unwrap();
    let bytes = sample_bytes();
    write_file(&path, &bytes).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    BundleView::parse(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(names(dir.path()), ["m.stow"]);
}

#[test]
fn missing_directory_is_named_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent").join("m.stow");
    let e = write_file(&path, b"abc").unwrap_err();
    match &e {
        BundleError::MissingDirectory { path: p, dir: d } => {
            assert_eq!(p, &path);
            assert_eq!(d, &dir.path().join("absent"));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(e.to_string().contains("absent"), "{e}");
    assert!(names(dir.path()).is_empty());
}

#[test]
fn failed_rename_keeps_the_old_target_and_removes_the_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("m.stow");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("keep"), b"x").unwrap();
    let e = write_file(&target, &sample_bytes()).unwrap_err();
    assert!(matches!(e, BundleError::Io { .. }), "{e:?}");
    assert!(e.to_string().contains("m.stow"), "{e}");
    assert_eq!(names(dir.path()), ["m.stow"]);
    assert_eq!(names(&target), ["keep"]);
}

#[test]
fn concurrent_writers_to_one_path_leave_one_whole_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.stow");
    let bytes = sample_bytes();
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| write_file(&path, &bytes).unwrap());
        }
    });
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert_eq!(names(dir.path()), ["m.stow"]);
}

//! Splitting kernels between threads changes nothing in the results: each
//! output element is computed by one thread in the same order, so runs
//! with 1, 2 and 3 threads give the same bytes.
// Opens bundles from files (`Bundle::open`): a `std` feature API.
#![cfg(feature = "std")]

mod common;

use stow_runtime::{Bundle, Session, SessionError};

fn outputs(bundle: &Bundle, threads: usize) -> Vec<Vec<u8>> {
    let mut session = Session::with_threads(bundle, threads).unwrap();
    assert_eq!(session.threads(), threads);
    let ids: Vec<u32> = bundle.inputs().map(|t| t.id).collect();
    for id in ids {
        for (i, b) in session.input_bytes_mut(&id).unwrap().iter_mut().enumerate() {
            *b = if i % 4 == 3 { 0x3d } else { (i * 91 + 7) as u8 };
        }
    }
    session.run().unwrap();
    common::output_bytes(bundle, &session)
}

#[test]
fn thread_counts_give_identical_outputs() {
    let Some(stow) = common::stow_bin("thread_counts_give_identical_outputs") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for model in [
        "mlp",
        "residual_cnn",
        "mobilenet_block",
        "transformer_block",
        "depthwise_block",
    ] {
        let path = common::compile(&stow, model, dir.path());
        let bundle = Bundle::open(&path).unwrap();
        let one = outputs(&bundle, 1);
        assert!(
            one.iter().any(|o| o.iter().any(|&b| b != 0)),
            "{model}: all zero"
        );
        for threads in [2, 3] {
            assert_eq!(outputs(&bundle, threads), one, "{model}, {threads} threads");
        }
    }
}

#[test]
fn zero_threads_is_refused() {
    let Some(stow) = common::stow_bin("zero_threads_is_refused") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = common::compile(&stow, "mlp", dir.path());
    let bundle = Bundle::open(&path).unwrap();
    assert!(matches!(
        Session::with_threads(&bundle, 0),
        Err(SessionError::NoThreads)
    ));
}

#[test]
fn scratch_is_planned_in_the_arena_for_the_threads_compiled_for() {
    let Some(stow) = common::stow_bin("scratch_is_planned_in_the_arena") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // (compile --threads, run threads, private scratch expected)
    for (planned, threads, private) in [
        ("1", 1, false),
        ("1", 2, true),
        ("2", 2, false),
        ("2", 1, false),
        ("0", 1, true),
    ] {
        let path = common::compile_with(&stow, "residual_cnn", dir.path(), &["--threads", planned]);
        let bundle = Bundle::open(&path).unwrap();
        let scratch: Vec<_> = bundle
            .contents()
            .tensors
            .iter()
            .filter(|t| t.name.ends_with(".scratch"))
            .collect();
        assert_eq!(scratch.is_empty(), planned == "0", "--threads {planned}");
        for t in &scratch {
            // Written and used by one step only.
            assert_eq!(t.first_step, t.last_step, "{}", t.name);
        }
        let session = Session::with_threads(&bundle, threads).unwrap();
        assert_eq!(
            session.scratch_floats() > 0,
            private,
            "--threads {planned}, run with {threads}"
        );
        let same = outputs(&bundle, threads);
        assert_eq!(
            same,
            outputs(&bundle, 1),
            "--threads {planned}, run with {threads}"
        );
        // Scratch planned under the model's bound may be smaller than the
        // usual blocking's, which then sums in another order: close to a
        // bundle without planned scratch, not identical.
        let reference = {
            let plain =
                common::compile_with(&stow, "residual_cnn", dir.path(), &["--threads", "0"]);
            let plain = Bundle::open(&plain).unwrap();
            outputs(&plain, 1)
        };
        assert_eq!(same.len(), reference.len());
        for (ours, theirs) in same.iter().zip(&reference) {
            let floats = |b: &[u8]| -> Vec<f32> {
                b.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect()
            };
            let (ours, theirs) = (floats(ours), floats(theirs));
            let scale = theirs.iter().fold(1f32, |m, v| m.max(v.abs()));
            for (a, b) in ours.iter().zip(&theirs) {
                assert!(
                    (a - b).abs() <= 1e-5 * scale,
                    "--threads {planned}, run with {threads}: {a} against {b}"
                );
            }
        }
    }
}

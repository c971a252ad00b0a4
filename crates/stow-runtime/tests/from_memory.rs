//! The runtime as a device uses it: a bundle compiled into the program
//! (`include_bytes!`, as it would sit in flash), opened in place, run in a
//! caller's static-style buffer of exactly the planned arena size, and
//! judged against onnxruntime's output. Nothing here needs std or a file,
//! so it runs in both builds; `cargo test -p stow-runtime
//! --no-default-features` runs it against the `no_std` crate (libm's
//! float functions), which `no_threads_without_std` proves by naming an
//! error that only that build has.
//!
//! Data: `testdata/no_std/residual_cnn.stow` (see the README beside it)
//! and the C example's input and expected output in `testdata/c_example/`
//! (onnxruntime's, `tools/gen_c_example.py`).

use stow_runtime::{Bundle, Session, SessionError, BUNDLE_ALIGN};

/// Bytes at a 64-byte boundary, as a linker section would place them.
#[repr(C, align(64))]
struct Aligned<T: ?Sized>(T);

static BUNDLE: &Aligned<[u8]> = &Aligned(*include_bytes!(
    "../../../testdata/no_std/residual_cnn.stow"
));
const INPUT: &[u8] = include_bytes!("../../../testdata/c_example/residual_cnn.input.f32");
const EXPECTED: &[u8] = include_bytes!("../../../testdata/c_example/residual_cnn.expected.f32");

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn bundle() -> Bundle {
    assert_eq!(BUNDLE.0.as_ptr() as usize % BUNDLE_ALIGN, 0);
    Bundle::from_static(&BUNDLE.0).unwrap_or_else(|e| {
        panic!(
            "{e}\n(a format change? regenerate testdata/no_std/residual_cnn.stow as its README says)"
        )
    })
}

/// `len` bytes at the bundle's arena alignment inside `storage` (on a
/// device, a `static` of exactly the planned size). Filled with garbage:
/// the session must zero what it uses.
fn buffer<'s>(bundle: &Bundle, storage: &'s mut Vec<u8>, len: usize) -> &'s mut [u8] {
    let align = usize::try_from(bundle.header().arena_align).unwrap();
    *storage = vec![0xA5; len + align];
    let at = storage.as_ptr().align_offset(align);
    &mut storage[at..at + len]
}

fn arena_bytes(bundle: &Bundle) -> usize {
    usize::try_from(bundle.header().arena_bytes).unwrap()
}

#[test]
fn a_bundle_in_memory_runs_in_a_caller_buffer_and_matches_onnxruntime() {
    let bundle = bundle();
    bundle.verify_weights().unwrap();
    let mut storage = Vec::new();
    let buffer = buffer(&bundle, &mut storage, arena_bytes(&bundle));
    let input = bundle.inputs().next().unwrap().name().to_string();
    let output = bundle.outputs().next().unwrap().name().to_string();

    let mut session = Session::in_buffer(&bundle, buffer, 1).unwrap();
    session
        .set_input::<f32, _>(input.as_str(), &floats(INPUT))
        .unwrap();
    session.run().unwrap();
    let got = session.output::<f32, _>(output.as_str()).unwrap();

    let want = floats(EXPECTED);
    assert_eq!(got.len(), want.len());
    // The C example's tolerance (examples/c/run.c).
    let wrong: Vec<(usize, f32, f32)> = got
        .iter()
        .zip(&want)
        .enumerate()
        .filter(|(_, (g, w))| {
            // NaN fails: the comparison is false.
            let within = (*g - *w).abs() <= 1e-4 + 1e-4 * w.abs();
            !within
        })
        .map(|(i, (g, w))| (i, *g, *w))
        .collect();
    assert!(wrong.is_empty(), "(index, got, onnxruntime's): {wrong:?}");
}

#[test]
fn a_buffer_one_byte_short_is_refused() {
    let bundle = bundle();
    let need = arena_bytes(&bundle);
    let mut storage = Vec::new();
    let short = buffer(&bundle, &mut storage, need - 1);
    let e = Session::in_buffer(&bundle, short, 1).unwrap_err();
    assert!(e.to_string().contains(&format!("needs {need}")), "{e}");
}

/// Without std there are no threads: asking for two is an error naming
/// the feature (the variant exists only in that build, so this compiling
/// at all shows the crate under test is the `no_std` one).
#[cfg(not(feature = "std"))]
#[test]
fn no_threads_without_std() {
    let bundle = bundle();
    let mut storage = Vec::new();
    let buffer = buffer(&bundle, &mut storage, arena_bytes(&bundle));
    match Session::in_buffer(&bundle, buffer, 2) {
        Err(SessionError::NoThreadSupport { threads: 2 }) => {}
        other => panic!("{other:?}"),
    }
}

/// With std, the same bundle in memory runs on two threads.
#[cfg(feature = "std")]
#[test]
fn threads_with_std() {
    let bundle = bundle();
    let mut storage = Vec::new();
    let buffer = buffer(&bundle, &mut storage, arena_bytes(&bundle));
    let session: Result<Session, SessionError> = Session::in_buffer(&bundle, buffer, 2);
    assert_eq!(session.unwrap().threads(), 2);
}

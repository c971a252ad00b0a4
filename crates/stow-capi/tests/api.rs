//! The C API driven from Rust, through the exported functions: the results
//! match the Rust runtime, and every refusal (misaligned or too small
//! arena, bad bundle bytes, unknown input, wrong sizes, NULL pointers) is a
//! status code with a message naming the problem, never a crash.

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr::{null, null_mut};
use stow_capi::*;

/// 64 bytes aligned to 64: a `Vec` of these is a 64-aligned buffer.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block([u8; 64]);

/// A 64-aligned copy of `bytes` (and room to spare).
struct Aligned(Vec<Block>);

impl Aligned {
    fn new(len: usize) -> Aligned {
        Aligned(vec![Block([0; 64]); len / 64 + 2])
    }

    fn of(bytes: &[u8]) -> Aligned {
        let mut a = Aligned::new(bytes.len());
        a.bytes_mut()[..bytes.len()].copy_from_slice(bytes);
        a
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.0.len() * 64;
        // SAFETY: `Block` is 64 plain bytes; the Vec holds `len` of them.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), len) }
    }

    fn ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr().cast()
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// testdata/`model`.onnx compiled in memory with the default options.
fn compiled(model: &str) -> Vec<u8> {
    let path = root().join("testdata").join(format!("{model}.onnx"));
    stow_compile::compile(&path, &stow_compile::CompileOptions::default())
        .unwrap()
        .bytes()
        .to_vec()
}

fn text(p: *const c_char) -> String {
    assert!(!p.is_null());
    // SAFETY: the API returns NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn status(s: StowStatus) -> String {
    text(stow_status_name(s))
}

/// A message buffer and what a call wrote into it.
struct Msg([c_char; 512]);

impl Msg {
    fn new() -> Msg {
        Msg([0x55; 512])
    }
    fn ptr(&mut self) -> *mut c_char {
        self.0.as_mut_ptr()
    }
    fn text(&self) -> String {
        text(self.0.as_ptr())
    }
}

/// Opens `bytes` (kept 64-aligned in `buffer`) in place.
fn open(buffer: &mut Aligned, len: usize) -> *mut StowBundle {
    let mut msg = Msg::new();
    let mut b = null_mut();
    // SAFETY: `buffer` outlives the bundle in every test that calls this.
    let s = unsafe { stow_bundle_open_bytes(buffer.ptr().cast(), len, &mut b, msg.ptr(), 512) };
    assert_eq!(status(s), "STOW_OK", "{}", msg.text());
    assert_eq!(msg.text(), "");
    b
}

fn bundle_error(b: *const StowBundle) -> String {
    // SAFETY: a live handle.
    text(unsafe { stow_bundle_last_error(b) })
}

fn session_error(s: *const StowSession) -> String {
    // SAFETY: a live handle.
    text(unsafe { stow_session_last_error(s) })
}

fn info(b: *const StowBundle, output: bool, index: usize) -> StowTensorInfo {
    let mut t = StowTensorInfo {
        name: null(),
        name_len: 0,
        dtype: 0,
        rank: 0,
        dims: null(),
        element_count: 0,
        byte_size: 0,
    };
    // SAFETY: a live handle and a valid out-pointer.
    let s = unsafe {
        if output {
            stow_bundle_output(b, index, &mut t)
        } else {
            stow_bundle_input(b, index, &mut t)
        }
    };
    assert_eq!(status(s), "STOW_OK", "{}", bundle_error(b));
    t
}

fn name_of(t: &StowTensorInfo) -> String {
    text(t.name)
}

fn dims_of(t: &StowTensorInfo) -> Vec<u64> {
    if t.rank == 0 {
        return Vec::new();
    }
    // SAFETY: `rank` dimensions, valid while the bundle is open.
    unsafe { std::slice::from_raw_parts(t.dims, t.rank as usize) }.to_vec()
}

/// The Rust runtime's output for `input` (the reference the C API must
/// reproduce byte for byte).
fn rust_output(bytes: &[u8], input: &[f32]) -> Vec<u8> {
    // Leaked: `Bundle::from_static` wants bytes that outlive it.
    let aligned: &'static mut Aligned = Box::leak(Box::new(Aligned::of(bytes)));
    let all: &'static [u8] = aligned.bytes_mut();
    let b = Box::leak(Box::new(
        stow_runtime::Bundle::from_static(&all[..bytes.len()]).unwrap(),
    ));
    let mut s = stow_runtime::Session::new(b).unwrap();
    let name = b.inputs().next().unwrap().name().to_string();
    s.set_input(name.as_str(), input).unwrap();
    s.run().unwrap();
    let out = b.outputs().next().unwrap().id;
    s.arena().tensor_bytes(b, &out).unwrap().to_vec()
}

fn arena_of(b: *const StowBundle) -> (usize, usize) {
    let (mut bytes, mut align) = (0, 0);
    // SAFETY: a live handle and valid out-pointers.
    let s = unsafe { stow_bundle_arena(b, &mut bytes, &mut align) };
    assert_eq!(status(s), "STOW_OK");
    (bytes, align)
}

fn create_in(
    b: *const StowBundle,
    arena: *mut u8,
    len: usize,
) -> (StowStatus, *mut StowSession, String) {
    let mut msg = Msg::new();
    let mut s = 0x10 as *mut StowSession; // must be overwritten
                                          // SAFETY: `arena` is `len` writable bytes owned by the test for longer
                                          // than the session lives.
    let st = unsafe { stow_session_create_in(b, arena.cast(), len, 1, &mut s, msg.ptr(), 512) };
    (st, s, msg.text())
}

#[test]
fn runs_in_a_caller_arena_like_the_rust_runtime() {
    let bytes = compiled("mlp");
    let mut buffer = Aligned::of(&bytes);
    let b = open(&mut buffer, bytes.len());

    let (mut n_in, mut n_out) = (0, 0);
    // SAFETY: live handle, valid out-pointers.
    unsafe {
        assert_eq!(stow_bundle_input_count(b, &mut n_in), STOW_OK);
        assert_eq!(stow_bundle_output_count(b, &mut n_out), STOW_OK);
    }
    assert_eq!((n_in, n_out), (1, 1));
    let input = info(b, false, 0);
    let output = info(b, true, 0);
    assert_eq!(name_of(&input), "features");
    assert_eq!(input.name_len, 8);
    assert_eq!((input.dtype, dims_of(&input)), (1, vec![1, 64]));
    assert_eq!((input.element_count, input.byte_size), (64, 256));
    assert_eq!(name_of(&output), "probs");
    assert_eq!(
        (output.dtype, dims_of(&output), output.byte_size),
        (1, vec![1, 10], 40)
    );

    let (arena_bytes, arena_align) = arena_of(b);
    assert!(arena_bytes > 0);
    assert_eq!(arena_align, 64);
    let mut arena = Aligned::new(arena_bytes);
    // Garbage in the buffer must not matter: the session zeroes its arena.
    arena.bytes_mut().fill(0xA5);
    let (st, s, msg) = create_in(b, arena.ptr(), arena_bytes);
    assert_eq!(status(st), "STOW_OK", "{msg}");

    let values: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin()).collect();
    let name = CString::new("features").unwrap();
    let mut got = vec![0u8; 40];
    // SAFETY: live handles, buffers of the stated sizes.
    unsafe {
        let st = stow_session_set_input(s, name.as_ptr(), values.as_ptr().cast(), 256);
        assert_eq!(status(st), "STOW_OK", "{}", session_error(s));
        assert_eq!(stow_session_run(s), STOW_OK, "{}", session_error(s));
        let st = stow_session_copy_output(s, 0, got.as_mut_ptr().cast(), got.len());
        assert_eq!(status(st), "STOW_OK", "{}", session_error(s));
    }
    let want = rust_output(&bytes, &values);
    assert_eq!(got, want, "the C API and the Rust runtime disagree");
    let probs: Vec<f32> = bytemuck_free_f32(&got);
    let sum: f32 = probs.iter().sum();
    assert!((sum - 1.0).abs() < 1e-4, "softmax output sums to {sum}");

    // The output pointer is inside the caller's arena.
    let (mut data, mut len) = (null(), 0);
    // SAFETY: live handle, valid out-pointers.
    unsafe { assert_eq!(stow_session_output(s, 0, &mut data, &mut len), STOW_OK) };
    let start = arena.ptr() as usize;
    assert!((data as usize) >= start && (data as usize) + len <= start + arena_bytes);

    // SAFETY: handles from this test, freed once.
    unsafe {
        assert_eq!(stow_session_free(s), STOW_OK);
        assert_eq!(stow_bundle_free(b), STOW_OK);
    }
}

fn bytemuck_free_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn a_misaligned_arena_is_refused() {
    let bytes = compiled("mlp");
    let mut buffer = Aligned::of(&bytes);
    let b = open(&mut buffer, bytes.len());
    let (arena_bytes, _) = arena_of(b);
    let mut arena = Aligned::new(arena_bytes + 64);
    for shift in [1, 8, 32] {
        // SAFETY: within the buffer, which has 64 spare bytes.
        let p = unsafe { arena.ptr().add(shift) };
        let (st, s, msg) = create_in(b, p, arena_bytes);
        assert_eq!(status(st), "STOW_ERR_MISALIGNED", "{msg}");
        assert!(s.is_null(), "a refused session must leave NULL");
        assert!(msg.contains("not aligned to 64 bytes"), "{msg}");
        assert!(msg.contains(&format!("{:#x}", p as usize)), "{msg}");
    }
    // SAFETY: freed once.
    unsafe { stow_bundle_free(b) };
}

#[test]
fn a_too_small_arena_is_refused() {
    let bytes = compiled("mlp");
    let mut buffer = Aligned::of(&bytes);
    let b = open(&mut buffer, bytes.len());
    let (arena_bytes, _) = arena_of(b);
    let mut arena = Aligned::new(arena_bytes);
    let (st, s, msg) = create_in(b, arena.ptr(), arena_bytes - 1);
    assert_eq!(status(st), "STOW_ERR_TOO_SMALL", "{msg}");
    assert!(s.is_null());
    assert!(
        msg.contains(&format!(
            "holds {} bytes, the bundle needs {arena_bytes}",
            arena_bytes - 1
        )),
        "{msg}"
    );
    // Exactly the arena size is enough.
    let (st, s, msg) = create_in(b, arena.ptr(), arena_bytes);
    assert_eq!(status(st), "STOW_OK", "{msg}");
    // SAFETY: freed once.
    unsafe {
        stow_session_free(s);
        stow_bundle_free(b);
    }
}

#[test]
fn bad_bundle_bytes_are_refused_with_the_reason() {
    let bytes = compiled("mlp");
    let attempt = |buffer: &mut Aligned, offset: usize, len: usize| {
        let mut msg = Msg::new();
        let mut b = 0x10 as *mut StowBundle;
        // SAFETY: `len` bytes from `offset` lie inside the buffer, which
        // outlives the call; a successful open is not expected here.
        let st = unsafe {
            stow_bundle_open_bytes(buffer.ptr().add(offset).cast(), len, &mut b, msg.ptr(), 512)
        };
        assert!(b.is_null(), "a refused bundle must leave NULL");
        (status(st), msg.text())
    };
    // A flipped bit in the arena size: the header checksum catches it.
    let mut flipped = bytes.clone();
    flipped[40] ^= 1;
    let (st, msg) = attempt(&mut Aligned::of(&flipped), 0, flipped.len());
    assert_eq!(st, "STOW_ERR_INVALID_BUNDLE");
    assert!(
        msg.contains("is not a valid bundle") && msg.contains("checksum"),
        "{msg}"
    );
    // Truncated.
    let (st, msg) = attempt(&mut Aligned::of(&bytes), 0, 40);
    assert_eq!(st, "STOW_ERR_INVALID_BUNDLE", "{msg}");
    // Not a bundle at all.
    let (st, msg) = attempt(&mut Aligned::of(&[7u8; 300]), 0, 300);
    assert_eq!(st, "STOW_ERR_INVALID_BUNDLE", "{msg}");
    assert!(msg.to_lowercase().contains("magic"), "{msg}");
    // A valid bundle 8 bytes past a 64-byte boundary.
    let mut shifted = Aligned::new(bytes.len() + 8);
    shifted.bytes_mut()[8..8 + bytes.len()].copy_from_slice(&bytes);
    let (st, msg) = attempt(&mut shifted, 8, bytes.len());
    assert_eq!(st, "STOW_ERR_MISALIGNED");
    assert!(msg.contains("not aligned to 64 bytes"), "{msg}");
    // A missing file.
    let path = CString::new("/nonexistent/dir/model.stow").unwrap();
    let mut msg = Msg::new();
    let mut b = null_mut();
    // SAFETY: valid strings and out-pointers.
    let st = unsafe { stow_bundle_open(path.as_ptr(), &mut b, msg.ptr(), 512) };
    assert_eq!(status(st), "STOW_ERR_IO");
    assert!(
        msg.text().contains("/nonexistent/dir/model.stow"),
        "{}",
        msg.text()
    );
}

#[test]
fn wrong_inputs_and_early_outputs_are_refused() {
    let bytes = compiled("mlp");
    let mut buffer = Aligned::of(&bytes);
    let b = open(&mut buffer, bytes.len());
    let mut s = null_mut();
    let mut msg = Msg::new();
    // SAFETY: live bundle, valid out-pointers.
    let st = unsafe { stow_session_create(b, 1, &mut s, msg.ptr(), 512) };
    assert_eq!(status(st), "STOW_OK", "{}", msg.text());
    let data = [0f32; 64];
    let wrong = CString::new("image").unwrap();
    let right = CString::new("features").unwrap();
    let mut out = [0u8; 40];
    let mut index = 7;
    // SAFETY: live handles, buffers of the stated sizes.
    unsafe {
        let st = stow_session_set_input(s, wrong.as_ptr(), data.as_ptr().cast(), 256);
        assert_eq!(status(st), "STOW_ERR_NOT_FOUND");
        let e = session_error(s);
        assert!(
            e.contains("no input is named `image`") && e.contains("features"),
            "{e}"
        );

        let st = stow_bundle_input_index(b, wrong.as_ptr(), &mut index);
        assert_eq!(status(st), "STOW_ERR_NOT_FOUND");
        assert_eq!(index, 7, "a failed lookup leaves the out-parameter alone");
        assert!(bundle_error(b).contains("`image`"));

        let st = stow_session_set_input(s, right.as_ptr(), data.as_ptr().cast(), 255);
        assert_eq!(status(st), "STOW_ERR_SIZE_MISMATCH");
        assert!(session_error(s).contains("takes 256 bytes, 255 given"));

        let st = stow_session_set_input_at(s, 1, data.as_ptr().cast(), 256);
        assert_eq!(status(st), "STOW_ERR_NOT_FOUND");
        assert!(
            session_error(s).contains("input index 1 is out of range: the bundle has 1 input(s)")
        );

        // No run yet: outputs are not ready.
        let st = stow_session_copy_output(s, 0, out.as_mut_ptr().cast(), 40);
        assert_eq!(status(st), "STOW_ERR_NOT_RUN");
        assert!(session_error(s).contains("`probs` is not ready"));

        assert_eq!(
            stow_session_set_input(s, right.as_ptr(), data.as_ptr().cast(), 256),
            STOW_OK
        );
        assert_eq!(stow_session_run(s), STOW_OK);
        assert_eq!(
            stow_session_copy_output(s, 0, out.as_mut_ptr().cast(), 40),
            STOW_OK
        );
        // Changing an input makes the outputs stale until the next run.
        assert_eq!(
            stow_session_set_input_at(s, 0, data.as_ptr().cast(), 256),
            STOW_OK
        );
        let st = stow_session_copy_output(s, 0, out.as_mut_ptr().cast(), 40);
        assert_eq!(status(st), "STOW_ERR_NOT_RUN");
        let st = stow_session_copy_output(s, 1, out.as_mut_ptr().cast(), 40);
        assert_eq!(status(st), "STOW_ERR_NOT_FOUND");

        // Zero threads.
        let mut s0 = null_mut();
        let st = stow_session_create(b, 0, &mut s0, msg.ptr(), 512);
        assert_eq!(status(st), "STOW_ERR_INVALID_ARGUMENT");
        assert!(msg.text().contains("at least one thread"), "{}", msg.text());
        assert!(s0.is_null());

        stow_session_free(s);
        stow_bundle_free(b);
    }
}

#[test]
fn null_pointers_are_errors_not_crashes() {
    let bytes = compiled("mlp");
    let mut buffer = Aligned::of(&bytes);
    let b = open(&mut buffer, bytes.len());
    let mut s = null_mut();
    // SAFETY: live bundle, valid out-pointer, no message buffer.
    assert_eq!(
        unsafe { stow_session_create(b, 1, &mut s, null_mut(), 0) },
        STOW_OK
    );
    let null_status = |st: StowStatus| assert_eq!(status(st), "STOW_ERR_NULL_ARGUMENT");
    let name = CString::new("features").unwrap();
    let data = [0f32; 64];
    let mut msg = Msg::new();
    let (mut n, mut bundle_out, mut session_out) = (0usize, null_mut(), null_mut());
    let mut info_out = info(b, false, 0);
    let (mut ptr_out, mut cptr_out) = (null_mut::<c_void>(), null::<c_void>());
    // SAFETY: every pointer is either NULL (what is tested) or valid.
    unsafe {
        null_status(stow_bundle_open(null(), &mut bundle_out, msg.ptr(), 512));
        assert!(msg.text().contains("`path` is NULL"), "{}", msg.text());
        null_status(stow_bundle_open(name.as_ptr(), null_mut(), msg.ptr(), 512));
        assert!(msg.text().contains("`out` is NULL"), "{}", msg.text());
        null_status(stow_bundle_open_bytes(
            null(),
            10,
            &mut bundle_out,
            msg.ptr(),
            512,
        ));
        assert!(msg.text().contains("`bytes` is NULL"), "{}", msg.text());
        null_status(stow_bundle_open_bytes(
            null(),
            10,
            &mut bundle_out,
            null_mut(),
            0,
        ));
        null_status(stow_bundle_open_bytes(
            name.as_ptr().cast(),
            8,
            null_mut(),
            msg.ptr(),
            512,
        ));
        assert!(msg.text().contains("`out` is NULL"), "{}", msg.text());

        null_status(stow_bundle_verify_weights(null()));
        null_status(stow_bundle_arena(null(), &mut n, &mut n));
        null_status(stow_bundle_arena(b, null_mut(), &mut n));
        null_status(stow_bundle_arena(b, &mut n, null_mut()));
        assert!(bundle_error(b).contains("`align` is NULL"));
        null_status(stow_bundle_input_count(null(), &mut n));
        null_status(stow_bundle_input_count(b, null_mut()));
        null_status(stow_bundle_output_count(b, null_mut()));
        null_status(stow_bundle_output_count(null(), &mut n));
        null_status(stow_bundle_input(null(), 0, &mut info_out));
        null_status(stow_bundle_input(b, 0, null_mut()));
        null_status(stow_bundle_output(b, 0, null_mut()));
        null_status(stow_bundle_output(null(), 0, &mut info_out));
        null_status(stow_bundle_input_index(b, null(), &mut n));
        null_status(stow_bundle_input_index(b, name.as_ptr(), null_mut()));
        null_status(stow_bundle_input_index(null(), name.as_ptr(), &mut n));
        null_status(stow_bundle_output_index(null(), name.as_ptr(), &mut n));
        null_status(stow_bundle_output_index(b, null(), &mut n));
        null_status(stow_bundle_output_index(b, name.as_ptr(), null_mut()));
        assert!(bundle_error(b).contains("`index` is NULL"));

        null_status(stow_session_create(
            null(),
            1,
            &mut session_out,
            msg.ptr(),
            512,
        ));
        assert!(msg.text().contains("`bundle` is NULL"), "{}", msg.text());
        null_status(stow_session_create(b, 1, null_mut(), msg.ptr(), 512));
        null_status(stow_session_create_in(
            b,
            null_mut(),
            100,
            1,
            &mut session_out,
            msg.ptr(),
            512,
        ));
        assert!(msg.text().contains("`arena` is NULL"), "{}", msg.text());
        let mut arena = Aligned::new(4096);
        null_status(stow_session_create_in(
            null(),
            arena.ptr().cast(),
            4096,
            1,
            &mut session_out,
            msg.ptr(),
            512,
        ));
        null_status(stow_session_create_in(
            b,
            arena.ptr().cast(),
            4096,
            1,
            null_mut(),
            msg.ptr(),
            512,
        ));
        assert!(msg.text().contains("`out` is NULL"), "{}", msg.text());
        assert!(session_out.is_null());

        null_status(stow_session_set_input(
            null_mut(),
            name.as_ptr(),
            data.as_ptr().cast(),
            256,
        ));
        null_status(stow_session_set_input(s, null(), data.as_ptr().cast(), 256));
        null_status(stow_session_set_input(s, name.as_ptr(), null(), 256));
        assert!(session_error(s).contains("`data` is NULL"));
        null_status(stow_session_set_input_at(s, 0, null(), 256));
        null_status(stow_session_set_input_at(
            null_mut(),
            0,
            data.as_ptr().cast(),
            256,
        ));
        null_status(stow_session_input_buffer(
            null_mut(),
            0,
            &mut ptr_out,
            &mut n,
        ));
        null_status(stow_session_output(null_mut(), 0, &mut cptr_out, &mut n));
        null_status(stow_session_input_buffer(s, 0, null_mut(), &mut n));
        null_status(stow_session_input_buffer(s, 0, &mut ptr_out, null_mut()));
        null_status(stow_session_run(null_mut()));
        null_status(stow_session_output(s, 0, null_mut(), &mut n));
        null_status(stow_session_output(s, 0, &mut cptr_out, null_mut()));
        null_status(stow_session_copy_output(s, 0, null_mut(), 40));
        null_status(stow_session_copy_output(null_mut(), 0, null_mut(), 40));

        assert_eq!(stow_session_free(null_mut()), STOW_OK);
        assert_eq!(stow_bundle_free(null_mut()), STOW_OK);
        assert!(text(stow_session_last_error(null())).contains("NULL"));
        assert!(text(stow_bundle_last_error(null())).contains("NULL"));

        // The handles still work after all that.
        assert_eq!(
            stow_session_set_input(s, name.as_ptr(), data.as_ptr().cast(), 256),
            STOW_OK
        );
        assert_eq!(stow_session_run(s), STOW_OK);
        stow_session_free(s);
        stow_bundle_free(b);
    }
}

#[test]
fn messages_are_cut_to_the_caller_buffer() {
    let path = CString::new("/nonexistent/dir/model.stow").unwrap();
    let mut msg = [0x55 as c_char; 12];
    let mut b = null_mut();
    // SAFETY: 11 of the 12 bytes are lent.
    let st = unsafe { stow_bundle_open(path.as_ptr(), &mut b, msg.as_mut_ptr(), 11) };
    assert_eq!(status(st), "STOW_ERR_IO");
    // 10 bytes of text and the NUL, and nothing past the 11 bytes lent.
    assert_eq!(text(msg.as_ptr()), "cannot rea");
    assert_eq!(msg[11], 0x55);
}

#[test]
fn handles_may_be_freed_in_any_order_and_used_across_threads() {
    let bytes = compiled("residual_cnn");
    let mut buffer = Aligned::of(&bytes);
    let b = open(&mut buffer, bytes.len());
    let input = info(b, false, 0);
    let values: Vec<f32> = (0..input.element_count)
        .map(|i| ((i % 17) as f32) * 0.1 - 0.8)
        .collect();
    let want = rust_output(&bytes, &values);
    let mut sessions = Vec::new();
    for threads in [1, 2] {
        let mut s = null_mut();
        // SAFETY: live bundle, valid out-pointer.
        let st = unsafe { stow_session_create(b, threads, &mut s, null_mut(), 0) };
        assert_eq!(st, STOW_OK);
        sessions.push(s as usize);
    }
    // The bundle handle goes first; the sessions keep the bundle.
    // SAFETY: freed once; the sessions hold their own reference.
    unsafe { stow_bundle_free(b) };
    let handles: Vec<_> = sessions
        .into_iter()
        .map(|s| {
            let values = values.clone();
            std::thread::spawn(move || {
                let s = s as *mut StowSession;
                let mut got = vec![0u8; 40];
                // SAFETY: each session is used by this thread alone.
                unsafe {
                    assert_eq!(
                        stow_session_set_input_at(s, 0, values.as_ptr().cast(), values.len() * 4),
                        STOW_OK
                    );
                    assert_eq!(stow_session_run(s), STOW_OK, "{}", session_error(s));
                    assert_eq!(
                        stow_session_copy_output(s, 0, got.as_mut_ptr().cast(), 40),
                        STOW_OK
                    );
                    stow_session_free(s);
                }
                got
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), want);
    }
}

#[test]
fn status_names_cover_every_code() {
    let names: Vec<String> = (0..=15).map(status).collect();
    assert_eq!(names[0], "STOW_OK");
    assert_eq!(names[5], "STOW_ERR_MISALIGNED");
    assert_eq!(names[14], "STOW_ERR_PANIC");
    assert_eq!(names[15], "STOW_ERR_POOL_COUNT");
    assert!(names.iter().all(|n| n != "STOW_ERR_UNKNOWN"));
    assert_eq!(status(16), "STOW_ERR_UNKNOWN");
    assert_eq!(status(-1), "STOW_ERR_UNKNOWN");
}

/// testdata/`model`.onnx compiled with a fast pool of `sram` bytes and an
/// unbounded slow one.
fn compiled_in_pools(model: &str, sram: u64) -> Vec<u8> {
    let path = root().join("testdata").join(format!("{model}.onnx"));
    let pools = vec![
        stow_compile::PoolSpec {
            name: "sram".into(),
            capacity: Some(sram),
        },
        stow_compile::PoolSpec {
            name: "dram".into(),
            capacity: None,
        },
    ];
    let options = stow_compile::CompileOptions {
        pools,
        ..stow_compile::CompileOptions::default()
    };
    stow_compile::compile(&path, &options)
        .unwrap()
        .bytes()
        .to_vec()
}

fn pool_of(b: *const StowBundle, index: usize) -> (StowStatus, String, usize, usize) {
    let mut p = StowPoolInfo {
        name: null(),
        name_len: 0,
        bytes: 0,
        align: 0,
    };
    // SAFETY: a live handle and a valid out-pointer.
    let st = unsafe { stow_bundle_pool(b, index, &mut p) };
    let name = if p.name.is_null() {
        String::new()
    } else {
        assert_eq!(text(p.name).len(), p.name_len);
        text(p.name)
    };
    (st, name, p.bytes, p.align)
}

fn pool_count(b: *const StowBundle) -> usize {
    let mut n = 0;
    // SAFETY: a live handle and a valid out-pointer.
    assert_eq!(unsafe { stow_bundle_pool_count(b, &mut n) }, STOW_OK);
    n
}

fn create_in_pools(
    b: *const StowBundle,
    buffers: &[StowBuffer],
) -> (StowStatus, *mut StowSession, String) {
    let mut msg = Msg::new();
    let mut s = 0x10 as *mut StowSession; // must be overwritten
                                          // SAFETY: each buffer is `len` writable bytes owned by the test for
                                          // longer than the session lives.
    let st = unsafe {
        stow_session_create_in_pools(
            b,
            buffers.as_ptr(),
            buffers.len(),
            1,
            &mut s,
            msg.ptr(),
            512,
        )
    };
    (st, s, msg.text())
}

#[test]
fn a_pooled_bundle_runs_in_one_caller_buffer_per_pool() {
    let single = compiled("mlp");
    let bytes = compiled_in_pools("mlp", 512);
    let mut buffer = Aligned::of(&bytes);
    let b = open(&mut buffer, bytes.len());
    assert_eq!(pool_count(b), 2);
    let (st, name, sram_bytes, align) = pool_of(b, 0);
    assert_eq!((status(st).as_str(), name.as_str()), ("STOW_OK", "sram"));
    assert!(sram_bytes <= 512 && align == 64);
    let (st, name, dram_bytes, _) = pool_of(b, 1);
    assert_eq!((status(st).as_str(), name.as_str()), ("STOW_OK", "dram"));
    assert!(dram_bytes > 0);
    // Pool 0 is what stow_bundle_arena describes.
    assert_eq!(arena_of(b), (sram_bytes, align));
    let (st, ..) = pool_of(b, 2);
    assert_eq!(status(st), "STOW_ERR_NOT_FOUND");
    assert!(
        bundle_error(b).contains("out of range"),
        "{}",
        bundle_error(b)
    );

    let mut sram = Aligned::new(sram_bytes);
    let mut dram = Aligned::new(dram_bytes);
    sram.bytes_mut().fill(0xA5);
    dram.bytes_mut().fill(0x5A);
    let buffers = [
        StowBuffer {
            data: sram.ptr().cast(),
            len: sram_bytes,
        },
        StowBuffer {
            data: dram.ptr().cast(),
            len: dram_bytes,
        },
    ];
    let (st, s, msg) = create_in_pools(b, &buffers);
    assert_eq!(status(st), "STOW_OK", "{msg}");
    let values: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut got = vec![0u8; 40];
    // SAFETY: live handles, buffers of the stated sizes.
    unsafe {
        let st = stow_session_set_input_at(s, 0, values.as_ptr().cast(), 256);
        assert_eq!(status(st), "STOW_OK", "{}", session_error(s));
        assert_eq!(stow_session_run(s), STOW_OK, "{}", session_error(s));
        let st = stow_session_copy_output(s, 0, got.as_mut_ptr().cast(), got.len());
        assert_eq!(status(st), "STOW_OK", "{}", session_error(s));
    }
    assert_eq!(
        got,
        rust_output(&single, &values),
        "pooled from C differs from one arena in Rust"
    );
    // The input lies in one of the caller's buffers.
    let (mut data, mut len) = (null_mut(), 0);
    // SAFETY: live handle, valid out-pointers.
    unsafe {
        assert_eq!(
            stow_session_input_buffer(s, 0, &mut data, &mut len),
            STOW_OK
        )
    };
    let inside = |buf: &mut Aligned, n: usize| {
        let start = buf.ptr() as usize;
        (data as usize) >= start && (data as usize) + len <= start + n
    };
    assert!(inside(&mut sram, sram_bytes) || inside(&mut dram, dram_bytes));
    // SAFETY: handles from this test, freed once.
    unsafe {
        assert_eq!(stow_session_free(s), STOW_OK);
        assert_eq!(stow_bundle_free(b), STOW_OK);
    }
}

#[test]
fn wrong_pool_buffers_are_refused_naming_the_pool() {
    let bytes = compiled_in_pools("residual_cnn", 16384);
    let mut buffer = Aligned::of(&bytes);
    let b = open(&mut buffer, bytes.len());
    let (_, _, sram_bytes, _) = pool_of(b, 0);
    let (_, _, dram_bytes, _) = pool_of(b, 1);
    assert!(sram_bytes > 64 && dram_bytes > 64);
    let mut sram = Aligned::new(sram_bytes);
    let mut dram = Aligned::new(dram_bytes);
    let good = [
        StowBuffer {
            data: sram.ptr().cast(),
            len: sram_bytes,
        },
        StowBuffer {
            data: dram.ptr().cast(),
            len: dram_bytes,
        },
    ];
    let refused = |buffers: &[StowBuffer], code: &str, words: &[&str]| {
        let (st, s, msg) = create_in_pools(b, buffers);
        assert_eq!(status(st), code, "{msg}");
        assert!(s.is_null(), "*out is set to NULL on failure");
        for w in words {
            assert!(msg.contains(w), "`{w}` missing from: {msg}");
        }
    };
    // Wrong count: one buffer, or three.
    refused(
        &good[..1],
        "STOW_ERR_POOL_COUNT",
        &["1 buffers given", "2 memory pool", "sram", "dram"],
    );
    refused(
        &[good[0], good[1], good[1]],
        "STOW_ERR_POOL_COUNT",
        &["3 buffers given"],
    );
    // A single-buffer call on a pooled bundle says the same.
    let (st, s, msg) = create_in(b, sram.ptr(), sram_bytes);
    assert_eq!(status(st), "STOW_ERR_POOL_COUNT", "{msg}");
    assert!(s.is_null());
    // Too small, misaligned, NULL: each names the pool.
    let mut short = good;
    short[1].len = dram_bytes - 1;
    refused(
        &short,
        "STOW_ERR_TOO_SMALL",
        &["buffer 1 (pool `dram`)", &format!("needs {dram_bytes}")],
    );
    let mut skewed = good;
    // SAFETY: one byte into a buffer with 64 spare bytes.
    skewed[0].data = unsafe { sram.ptr().add(1) }.cast();
    refused(
        &skewed,
        "STOW_ERR_MISALIGNED",
        &["buffer 0 (pool `sram`)", "aligned to 64"],
    );
    let mut missing = good;
    missing[1].data = null_mut();
    refused(
        &missing,
        "STOW_ERR_NULL_ARGUMENT",
        &["buffer 1 (pool `dram`) is NULL"],
    );
    refused(&[], "STOW_ERR_POOL_COUNT", &["0 buffers given"]);
    let mut msg = Msg::new();
    let mut s = null_mut();
    // SAFETY: NULL records are refused before any is read.
    let st = unsafe { stow_session_create_in_pools(b, null(), 2, 1, &mut s, msg.ptr(), 512) };
    assert_eq!(status(st), "STOW_ERR_NULL_ARGUMENT", "{}", msg.text());
    // And the good ones work.
    let (st, s, msg) = create_in_pools(b, &good);
    assert_eq!(status(st), "STOW_OK", "{msg}");
    // SAFETY: handles from this test, freed once.
    unsafe {
        assert_eq!(stow_session_free(s), STOW_OK);
        assert_eq!(stow_bundle_free(b), STOW_OK);
    }
}

/// A bundle without pools has one, `arena`, and takes one buffer through
/// the pools call too.
#[test]
fn a_single_arena_bundle_is_one_pool() {
    let bytes = compiled("mlp");
    let mut buffer = Aligned::of(&bytes);
    let b = open(&mut buffer, bytes.len());
    assert_eq!(pool_count(b), 1);
    let (st, name, pool_bytes, align) = pool_of(b, 0);
    assert_eq!(status(st), "STOW_OK");
    assert_eq!(
        (name.as_str(), pool_bytes, align),
        ("arena", arena_of(b).0, arena_of(b).1)
    );
    let mut arena = Aligned::new(pool_bytes);
    let one = [StowBuffer {
        data: arena.ptr().cast(),
        len: pool_bytes,
    }];
    let (st, s, msg) = create_in_pools(b, &one);
    assert_eq!(status(st), "STOW_OK", "{msg}");
    // NULL handles and out-pointers are errors.
    let mut n = 0;
    // SAFETY: every pointer is either NULL (what is tested) or valid.
    unsafe {
        assert_eq!(
            stow_bundle_pool_count(null(), &mut n),
            STOW_ERR_NULL_ARGUMENT
        );
        assert_eq!(
            stow_bundle_pool_count(b, null_mut()),
            STOW_ERR_NULL_ARGUMENT
        );
        assert_eq!(stow_bundle_pool(b, 0, null_mut()), STOW_ERR_NULL_ARGUMENT);
        assert!(bundle_error(b).contains("`info` is NULL"));
    }
    // SAFETY: handles from this test, freed once.
    unsafe {
        assert_eq!(stow_session_free(s), STOW_OK);
        assert_eq!(stow_bundle_free(b), STOW_OK);
    }
}

/// A bundle whose patched stage reads its image in bands of rows: the
/// image has no place in the arena to hand out, `stow_session_set_input`
/// copies it into its bands, and the outputs are the Rust runtime's and
/// the unpatched bundle's.
#[test]
fn an_input_written_in_bands_is_copied_in_not_handed_out() {
    let path = root().join("testdata/patch_chain.onnx");
    let options = stow_compile::CompileOptions {
        stages: vec![stow_compile::PatchedStage::parse("image:maxpool_9:8").unwrap()],
        ..stow_compile::CompileOptions::default()
    };
    let bytes = stow_compile::compile(&path, &options)
        .unwrap()
        .bytes()
        .to_vec();
    let mut buffer = Aligned::of(&bytes);
    let b = open(&mut buffer, bytes.len());
    let input = info(b, false, 0);
    assert_eq!(name_of(&input), "image");
    let count = input.element_count as usize;
    let values: Vec<f32> = (0..count).map(|i| (i as f32 * 0.013).cos()).collect();
    let (arena_bytes, _) = arena_of(b);
    let mut arena = Aligned::new(arena_bytes);
    let (st, s, msg) = create_in(b, arena.ptr(), arena_bytes);
    assert_eq!(status(st), "STOW_OK", "{msg}");
    let output = info(b, true, 0);
    let mut got = vec![0u8; output.byte_size as usize];
    // SAFETY: live handles, buffers of the stated sizes; the in-arena
    // source is `input.byte_size` bytes of the caller's own arena buffer.
    unsafe {
        let (mut data, mut len) = (null_mut(), 0);
        let st = stow_session_input_buffer(s, 0, &mut data, &mut len);
        assert_eq!(status(st), "STOW_ERR_NOT_FOUND");
        assert!(
            session_error(s).contains("bands of rows"),
            "{}",
            session_error(s)
        );
        let inside = arena.ptr().cast::<c_void>();
        let st = stow_session_set_input_at(s, 0, inside, input.byte_size);
        assert_eq!(status(st), "STOW_ERR_INVALID_ARGUMENT");
        assert!(session_error(s).contains("must not lie in the session's arena"));
        let st = stow_session_set_input_at(s, 0, values.as_ptr().cast(), input.byte_size);
        assert_eq!(status(st), "STOW_OK", "{}", session_error(s));
        assert_eq!(stow_session_run(s), STOW_OK, "{}", session_error(s));
        let st = stow_session_copy_output(s, 0, got.as_mut_ptr().cast(), got.len());
        assert_eq!(status(st), "STOW_OK", "{}", session_error(s));
        assert_eq!(stow_session_free(s), STOW_OK);
        assert_eq!(stow_bundle_free(b), STOW_OK);
    }
    assert_eq!(got, rust_output(&bytes, &values));
    let whole = bytemuck_free_f32(&rust_output(&compiled("patch_chain"), &values));
    for (g, w) in bytemuck_free_f32(&got).iter().zip(&whole) {
        assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{g} vs {w}");
    }
}

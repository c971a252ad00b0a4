//! `stow_session_*`: a prepared model over an arena, inputs in, run,
//! outputs out.

use crate::bundle::{PoolSlot, Shared, Side, StowBundle};
use crate::{
    c_name, guarded, put, report_to, require, ErrorSlot, Failure, Outcome, StowStatus,
    STOW_ERR_INVALID_ARGUMENT, STOW_ERR_MISALIGNED, STOW_ERR_NOT_FOUND, STOW_ERR_NOT_RUN,
    STOW_ERR_NULL_ARGUMENT, STOW_ERR_OUT_OF_MEMORY, STOW_ERR_POOL_COUNT, STOW_ERR_RUN,
    STOW_ERR_SIZE_MISMATCH, STOW_ERR_THREADS, STOW_ERR_TOO_SMALL, STOW_ERR_UNSUPPORTED, STOW_OK,
};
use std::ffi::{c_char, c_void};
use std::sync::Arc;
use stow_runtime::{ArenaError, Bundle, Session, SessionError};

/// One caller buffer (`stow_buffer` in C): `len` bytes at `data`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct StowBuffer {
    /// The buffer's first byte.
    pub data: *mut c_void,
    /// Bytes in the buffer.
    pub len: usize,
}

/// Where a session's arena comes from.
enum Memory {
    /// Allocated by the runtime.
    Allocate,
    /// `stow_session_create_in`: one caller buffer.
    One(StowBuffer),
    /// `stow_session_create_in_pools`: `count` caller buffers at `buffers`,
    /// one per pool.
    Pools(*const StowBuffer, usize),
}

/// A session (`stow_session` in C).
pub struct StowSession {
    // Declared before `shared`, so dropped first: it borrows the bundle
    // that `shared` keeps alive.
    session: Session<'static>,
    shared: Arc<Shared>,
    error: ErrorSlot,
    /// A run succeeded and no input was touched through this API since.
    outputs_ready: bool,
}

fn session_failure(e: SessionError) -> Failure {
    let status = match &e {
        SessionError::Arena(a) => match a {
            ArenaError::Alignment { .. } => STOW_ERR_UNSUPPORTED,
            ArenaError::Alloc { .. } => STOW_ERR_OUT_OF_MEMORY,
            ArenaError::Misaligned { .. } => STOW_ERR_MISALIGNED,
            ArenaError::TooSmall { .. } => STOW_ERR_TOO_SMALL,
            // Not one caller buffer per memory pool.
            ArenaError::PoolCount { .. } => STOW_ERR_POOL_COUNT,
        },
        SessionError::Unsupported { .. } => STOW_ERR_UNSUPPORTED,
        SessionError::NoThreads => STOW_ERR_INVALID_ARGUMENT,
        SessionError::Spawn(_) => STOW_ERR_THREADS,
        SessionError::Lookup(_) => STOW_ERR_NOT_FOUND,
        SessionError::InputSize { .. } | SessionError::InputBytes { .. } => STOW_ERR_SIZE_MISMATCH,
    };
    Failure::new(status, crate::describe(&e))
}

/// Creates a session on `bundle`'s shared state and hands it out at `*out`.
///
/// # Safety
///
/// `bundle` is NULL or a live handle; `out` NULL or valid for a write;
/// each caller buffer of `arena` is NULL or its `len` writable bytes that
/// nothing else touches until the session is freed, and the records of
/// [`Memory::Pools`] are NULL or `count` readable ones.
unsafe fn create(
    call: &str,
    bundle: *const StowBundle,
    arena: Memory,
    threads: usize,
    out: *mut *mut StowSession,
) -> Outcome {
    require(out, call, "out")?;
    // SAFETY: non-NULL; the caller lends it for a write.
    unsafe { put(out, std::ptr::null_mut()) };
    require(bundle, call, "bundle")?;
    // SAFETY: non-NULL and live (the caller's contract).
    let shared = Arc::clone(&unsafe { &*bundle }.shared);
    // SAFETY: the `Bundle` lives inside the `Arc`'s allocation, which
    // never moves, and the handle built below holds a clone of that `Arc`
    // in a field dropped after the session: the bundle outlives every use
    // of this reference. It is never handed out with the `'static`
    // lifetime.
    let b: &'static Bundle = unsafe { &*std::ptr::addr_of!(shared.bundle) };
    let session = match arena {
        Memory::Allocate => Session::with_threads(b, threads),
        Memory::One(buffer) => {
            // SAFETY: the caller's contract on `arena`, passed on.
            let buffer = unsafe { lend(buffer, call, "arena", None) }?;
            Session::in_buffer(b, buffer, threads)
        }
        Memory::Pools(buffers, count) => {
            require(buffers, call, "buffers")?;
            let pools = &shared.pools;
            if count != pools.len() {
                let sizes: Vec<String> = pools
                    .iter()
                    .map(|p| format!("{} ({} bytes)", p.display_name(), p.bytes))
                    .collect();
                return Err(Failure::new(
                    STOW_ERR_POOL_COUNT,
                    format!(
                        "{call}: {count} buffers given, the bundle plans {} memory pool(s): {}",
                        pools.len(),
                        sizes.join(", ")
                    ),
                ));
            }
            // SAFETY: non-NULL, `count` readable records (the caller's
            // contract), copied out before any is used.
            let given: Vec<StowBuffer> =
                unsafe { std::slice::from_raw_parts(buffers, count) }.to_vec();
            let mut lent = Vec::with_capacity(count);
            for (p, (buffer, pool)) in given.into_iter().zip(pools).enumerate() {
                // SAFETY: each record is `len` writable bytes the caller
                // gives this session alone (the caller's contract).
                lent.push(unsafe { lend(buffer, call, "buffers[].data", Some((p, pool))) }?);
            }
            Session::in_buffers(b, lent, threads)
        }
    }
    .map_err(session_failure)?;
    let handle = Box::new(StowSession {
        session,
        shared,
        error: ErrorSlot::new(),
        outputs_ready: false,
    });
    // SAFETY: checked non-NULL above.
    unsafe { put(out, Box::into_raw(handle)) };
    Ok(())
}

/// `stow_session_create`: a session whose arena is allocated here.
///
/// # Safety
///
/// `bundle` is NULL or a live handle; `out` NULL or valid for a write;
/// `msg` NULL or `msg_cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn stow_session_create(
    bundle: *const StowBundle,
    threads: usize,
    out: *mut *mut StowSession,
    msg: *mut c_char,
    msg_cap: usize,
) -> StowStatus {
    const CALL: &str = "stow_session_create";
    // SAFETY: passed on from the caller.
    let outcome = guarded(CALL, || unsafe {
        create(CALL, bundle, Memory::Allocate, threads, out)
    });
    // SAFETY: the caller's contract on `msg`.
    unsafe { report_to(msg, msg_cap, outcome) }
}

/// `stow_session_create_in`: a session whose arena is the caller's
/// `arena_len` bytes at `arena`.
///
/// # Safety
///
/// As [`stow_session_create`]; `arena` is NULL or `arena_len` writable
/// bytes that only this session touches until it is freed.
#[no_mangle]
pub unsafe extern "C" fn stow_session_create_in(
    bundle: *const StowBundle,
    arena: *mut c_void,
    arena_len: usize,
    threads: usize,
    out: *mut *mut StowSession,
    msg: *mut c_char,
    msg_cap: usize,
) -> StowStatus {
    const CALL: &str = "stow_session_create_in";
    let outcome = guarded(CALL, || {
        // SAFETY: passed on from the caller.
        unsafe {
            let buffer = StowBuffer {
                data: arena,
                len: arena_len,
            };
            create(CALL, bundle, Memory::One(buffer), threads, out)
        }
    });
    // SAFETY: the caller's contract on `msg`.
    unsafe { report_to(msg, msg_cap, outcome) }
}

/// A caller's buffer as the bytes a session keeps. With `pool` (its index
/// and description) a buffer not aligned to the pool or smaller than it is
/// refused here, naming the pool; one buffer for a whole bundle is checked
/// by the runtime.
///
/// # Safety
///
/// `buffer.data` is NULL or `buffer.len` writable bytes that the caller
/// gives the session alone until it is freed.
unsafe fn lend(
    buffer: StowBuffer,
    call: &str,
    what: &str,
    pool: Option<(usize, &PoolSlot)>,
) -> Outcome<&'static mut [u8]> {
    let StowBuffer { data, len } = buffer;
    let named = |p: usize, slot: &PoolSlot| format!("buffer {p} (pool `{}`)", slot.display_name());
    if data.is_null() {
        return Err(match pool {
            Some((p, slot)) => Failure::new(
                STOW_ERR_NULL_ARGUMENT,
                format!("{call}: {} is NULL", named(p, slot)),
            ),
            None => Failure::null(call, what),
        });
    }
    if len > isize::MAX as usize {
        return Err(Failure::new(
            STOW_ERR_INVALID_ARGUMENT,
            format!("{call}: {len} bytes is more than any buffer holds"),
        ));
    }
    if let Some((p, slot)) = pool {
        if !(data as usize).is_multiple_of(slot.align) {
            return Err(Failure::new(
                STOW_ERR_MISALIGNED,
                format!(
                    "{call}: {} at {:#x} is not aligned to {} bytes",
                    named(p, slot),
                    data as usize,
                    slot.align
                ),
            ));
        }
        if len < slot.bytes {
            return Err(Failure::new(
                STOW_ERR_TOO_SMALL,
                format!(
                    "{call}: {} holds {len} bytes, the pool needs {}",
                    named(p, slot),
                    slot.bytes
                ),
            ));
        }
    }
    // SAFETY: non-NULL, `len` writable bytes (at most isize::MAX) that the
    // caller gives this session alone until it is freed; the session is
    // dropped in `stow_session_free`.
    Ok(unsafe { std::slice::from_raw_parts_mut(data.cast(), len) })
}

/// `stow_session_create_in_pools`: a session whose memory pools are the
/// caller's `count` buffers at `buffers`, one per pool, fastest first.
///
/// # Safety
///
/// As [`stow_session_create`]; `buffers` is NULL or `count` readable
/// records, each NULL or `len` writable bytes that only this session
/// touches until it is freed (the records themselves may go after the
/// call).
#[no_mangle]
pub unsafe extern "C" fn stow_session_create_in_pools(
    bundle: *const StowBundle,
    buffers: *const StowBuffer,
    count: usize,
    threads: usize,
    out: *mut *mut StowSession,
    msg: *mut c_char,
    msg_cap: usize,
) -> StowStatus {
    const CALL: &str = "stow_session_create_in_pools";
    let outcome = guarded(CALL, || {
        // SAFETY: passed on from the caller.
        unsafe { create(CALL, bundle, Memory::Pools(buffers, count), threads, out) }
    });
    // SAFETY: the caller's contract on `msg`.
    unsafe { report_to(msg, msg_cap, outcome) }
}

/// `stow_session_free`: stops the worker threads and releases the
/// session (not the caller's arena buffer). NULL is a no-op.
///
/// # Safety
///
/// `session` is NULL or a handle from `stow_session_create*` not yet freed.
#[no_mangle]
pub unsafe extern "C" fn stow_session_free(session: *mut StowSession) -> StowStatus {
    if session.is_null() {
        return STOW_OK;
    }
    // SAFETY: a live handle made by `Box::into_raw`, given back once.
    let handle = unsafe { Box::from_raw(session) };
    match guarded("stow_session_free", || {
        drop(handle);
        Ok(())
    }) {
        Ok(()) => STOW_OK,
        Err(f) => f.status,
    }
}

/// Runs `body` on a session handle, recording a failure in it.
///
/// # Safety
///
/// `session` is NULL or a live handle not used by another thread at the
/// same time.
unsafe fn with_session(
    session: *mut StowSession,
    call: &str,
    body: impl FnOnce(&mut StowSession) -> Outcome,
) -> StowStatus {
    // SAFETY: NULL or a live handle used by one thread at a time.
    let Some(handle) = (unsafe { session.as_mut() }) else {
        return STOW_ERR_NULL_ARGUMENT;
    };
    let outcome = guarded(call, || body(handle));
    handle.error.report(outcome)
}

/// `stow_session_last_error`: the message of the last failed call on
/// this session ("" if none), valid until the next failure on it.
///
/// # Safety
///
/// `session` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn stow_session_last_error(session: *const StowSession) -> *const c_char {
    // SAFETY: NULL or a live handle (the caller's contract).
    match unsafe { session.as_ref() } {
        Some(handle) => handle.error.as_ptr(),
        None => c"stow_session_last_error: `session` is NULL".as_ptr(),
    }
}

impl StowSession {
    /// Input `index`'s bytes in the arena.
    fn input_bytes(&mut self, index: usize) -> Outcome<&mut [u8]> {
        let io = self.shared.at(Side::Input, index)?;
        self.outputs_ready = false;
        self.session
            .input_bytes_mut(&io.id)
            .map_err(|e| Failure::new(STOW_ERR_NOT_FOUND, e.to_string()))
    }

    /// Output `index`'s bytes in the arena, once a run produced them.
    fn output_bytes(&self, index: usize, call: &str) -> Outcome<&[u8]> {
        let io = self.shared.at(Side::Output, index)?;
        if !self.outputs_ready {
            return Err(Failure::new(
                STOW_ERR_NOT_RUN,
                format!(
                    "{call}: output `{}` is not ready: no successful stow_session_run since the inputs last changed",
                    io.display_name()
                ),
            ));
        }
        self.session
            .arena()
            .tensor_bytes(self.session.bundle(), &io.id)
            .map_err(|e| Failure::new(STOW_ERR_NOT_FOUND, e.to_string()))
    }

    /// Copies `bytes` bytes at `data` into input `index`.
    ///
    /// # Safety
    ///
    /// `data` is NULL or `bytes` readable bytes (they may lie in this
    /// session's arena).
    unsafe fn copy_in(
        &mut self,
        index: usize,
        data: *const c_void,
        bytes: usize,
        call: &str,
    ) -> Outcome {
        require(data, call, "data")?;
        let io = self.shared.at(Side::Input, index)?;
        if bytes != io.byte_size {
            return Err(Failure::new(
                STOW_ERR_SIZE_MISMATCH,
                format!(
                    "{call}: input `{}` takes {} bytes, {bytes} given",
                    io.display_name(),
                    io.byte_size
                ),
            ));
        }
        let bundle = self.session.bundle();
        let in_bands = bundle
            .tensor(&io.id)
            .is_ok_and(|t| t.tensor.region == stow_bundle::Region::Rows);
        if in_bands {
            // Copied row by row into its bands: the source must not be
            // bytes those copies overwrite.
            if self.session.arena().overlaps(data.cast(), bytes) {
                return Err(Failure::new(
                    STOW_ERR_INVALID_ARGUMENT,
                    format!(
                        "{call}: input `{}` is written in bands of rows; its data must not lie in the session's arena",
                        io.display_name()
                    ),
                ));
            }
            self.outputs_ready = false;
            // SAFETY: `data` holds `bytes` readable bytes (the caller's
            // contract) outside the arena (checked), which the copy writes.
            let source = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), bytes) };
            return self
                .session
                .write_input_bytes(&io.id, source)
                .map_err(session_failure);
        }
        let slot = self.input_bytes(index)?;
        // SAFETY: `data` holds `bytes` readable bytes, and `slot` exactly
        // `bytes` writable ones; `copy` (memmove) allows the two to
        // overlap, for data already in the arena.
        unsafe { std::ptr::copy(data.cast::<u8>(), slot.as_mut_ptr(), bytes) };
        Ok(())
    }
}

/// `stow_session_set_input`: copies `bytes` bytes into the input named
/// `name`.
///
/// # Safety
///
/// `session` is NULL or a live handle; `name` NULL or NUL-terminated;
/// `data` NULL or `bytes` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn stow_session_set_input(
    session: *mut StowSession,
    name: *const c_char,
    data: *const c_void,
    bytes: usize,
) -> StowStatus {
    const CALL: &str = "stow_session_set_input";
    // SAFETY: passed on from the caller.
    unsafe {
        with_session(session, CALL, |s| {
            let index = s.shared.find(Side::Input, c_name(name, CALL)?)?;
            s.copy_in(index, data, bytes, CALL)
        })
    }
}

/// `stow_session_set_input_at`: copies `bytes` bytes into input `index`.
///
/// # Safety
///
/// `session` is NULL or a live handle; `data` NULL or `bytes` readable
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn stow_session_set_input_at(
    session: *mut StowSession,
    index: usize,
    data: *const c_void,
    bytes: usize,
) -> StowStatus {
    const CALL: &str = "stow_session_set_input_at";
    // SAFETY: passed on from the caller.
    unsafe { with_session(session, CALL, |s| s.copy_in(index, data, bytes, CALL)) }
}

/// `stow_session_input_buffer`: where input `index` lives in the arena,
/// to be filled in place before each run.
///
/// # Safety
///
/// `session` is NULL or a live handle; `data` and `bytes` NULL or valid
/// for a write.
#[no_mangle]
pub unsafe extern "C" fn stow_session_input_buffer(
    session: *mut StowSession,
    index: usize,
    data: *mut *mut c_void,
    bytes: *mut usize,
) -> StowStatus {
    const CALL: &str = "stow_session_input_buffer";
    // SAFETY: passed on; the out-pointers are checked before the writes.
    unsafe {
        with_session(session, CALL, |s| {
            require(data, CALL, "data")?;
            require(bytes, CALL, "bytes")?;
            let slot = s.input_bytes(index)?;
            put(bytes, slot.len());
            put(data, slot.as_mut_ptr().cast());
            Ok(())
        })
    }
}

/// `stow_session_run`: runs every step. Allocates nothing.
///
/// # Safety
///
/// `session` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn stow_session_run(session: *mut StowSession) -> StowStatus {
    // SAFETY: passed on from the caller.
    unsafe {
        with_session(session, "stow_session_run", |s| {
            s.outputs_ready = false;
            s.session
                .run()
                .map_err(|e| Failure::new(STOW_ERR_RUN, e.to_string()))?;
            s.outputs_ready = true;
            Ok(())
        })
    }
}

/// `stow_session_output`: where output `index` lives in the arena, after
/// a run.
///
/// # Safety
///
/// `session` is NULL or a live handle; `data` and `bytes` NULL or valid
/// for a write.
#[no_mangle]
pub unsafe extern "C" fn stow_session_output(
    session: *mut StowSession,
    index: usize,
    data: *mut *const c_void,
    bytes: *mut usize,
) -> StowStatus {
    const CALL: &str = "stow_session_output";
    // SAFETY: passed on; the out-pointers are checked before the writes.
    unsafe {
        with_session(session, CALL, |s| {
            require(data, CALL, "data")?;
            require(bytes, CALL, "bytes")?;
            let out = s.output_bytes(index, CALL)?;
            put(bytes, out.len());
            put(data, out.as_ptr().cast());
            Ok(())
        })
    }
}

/// `stow_session_copy_output`: copies output `index` into the caller's
/// `cap` bytes at `dst`, after a run.
///
/// # Safety
///
/// `session` is NULL or a live handle; `dst` NULL or `cap` writable bytes
/// outside this session's arena.
#[no_mangle]
pub unsafe extern "C" fn stow_session_copy_output(
    session: *mut StowSession,
    index: usize,
    dst: *mut c_void,
    cap: usize,
) -> StowStatus {
    const CALL: &str = "stow_session_copy_output";
    // SAFETY: passed on; `dst` is checked, and its room, before the copy.
    unsafe {
        with_session(session, CALL, |s| {
            require(dst, CALL, "dst")?;
            let out = s.output_bytes(index, CALL)?;
            if cap < out.len() {
                return Err(Failure::new(
                    STOW_ERR_TOO_SMALL,
                    format!(
                        "{CALL}: output {index} has {} bytes, the buffer holds {cap}",
                        out.len()
                    ),
                ));
            }
            std::ptr::copy(out.as_ptr(), dst.cast::<u8>(), out.len());
            Ok(())
        })
    }
}

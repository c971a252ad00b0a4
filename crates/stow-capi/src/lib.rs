//! The C API of Stowage, declared in `include/stowage.h`: open a bundle
//! (from a file, or in place from bytes in flash), query its inputs,
//! outputs and arena, create a session on a caller's arena buffer (or an
//! allocated one), fill inputs, run, read outputs, free.
//!
//! Rules every entry point keeps:
//!
//! - It returns a status code ([`StowStatus`], `STOW_OK` = 0); the
//!   message saying what went wrong goes to the handle
//!   (`stow_bundle_last_error`, `stow_session_last_error`) or, for the
//!   calls that create a handle, to a caller's buffer (`msg`, `msg_cap`).
//! - A NULL pointer where one is required is `STOW_ERR_NULL_ARGUMENT`, not
//!   a crash; a NULL handle given to `*_free` is a no-op.
//! - No panic crosses the boundary: each body runs inside
//!   `catch_unwind`, and a panic becomes `STOW_ERR_PANIC`.
//! - There is no global state: everything lives in the handles.
//!
//! The header is written by hand (so that it carries the contract of each
//! call: who owns what, for how long, what alignment); `tests/header.rs`
//! checks that it declares exactly the functions exported here and
//! compiles a C program that calls every one of them. See `docs/C-API.md`.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod bundle;
mod session;

pub use bundle::{
    stow_bundle_arena, stow_bundle_free, stow_bundle_input, stow_bundle_input_count,
    stow_bundle_input_index, stow_bundle_last_error, stow_bundle_open, stow_bundle_open_bytes,
    stow_bundle_output, stow_bundle_output_count, stow_bundle_output_index, stow_bundle_pool,
    stow_bundle_pool_count, stow_bundle_verify_weights, StowBundle, StowPoolInfo, StowTensorInfo,
};
pub use session::{
    stow_session_copy_output, stow_session_create, stow_session_create_in,
    stow_session_create_in_pools, stow_session_free, stow_session_input_buffer,
    stow_session_last_error, stow_session_output, stow_session_run, stow_session_set_input,
    stow_session_set_input_at, StowBuffer, StowSession,
};

use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

/// A status code: `STOW_OK` or one of the `STOW_ERR_*` constants
/// (`int32_t` in C, so that its size does not depend on the compiler's
/// choice for enums).
pub type StowStatus = i32;

/// Success.
pub const STOW_OK: StowStatus = 0;
/// A pointer argument that must not be NULL was NULL.
pub const STOW_ERR_NULL_ARGUMENT: StowStatus = 1;
/// An argument has a value the call cannot take (zero threads, a name
/// two inputs share, a path that is not text on this platform).
pub const STOW_ERR_INVALID_ARGUMENT: StowStatus = 2;
/// The bundle file could not be read.
pub const STOW_ERR_IO: StowStatus = 3;
/// The bytes are not a valid bundle, or the weight checksum failed.
pub const STOW_ERR_INVALID_BUNDLE: StowStatus = 4;
/// Bundle bytes or an arena buffer do not start at the required alignment.
pub const STOW_ERR_MISALIGNED: StowStatus = 5;
/// A buffer is smaller than what it must hold.
pub const STOW_ERR_TOO_SMALL: StowStatus = 6;
/// No input or output has this name, or the index is out of range.
pub const STOW_ERR_NOT_FOUND: StowStatus = 7;
/// The data given for an input is not exactly the input's byte size.
pub const STOW_ERR_SIZE_MISMATCH: StowStatus = 8;
/// The bundle needs something this runtime does not have (an operator
/// without a kernel, an arena alignment above what it can allocate).
pub const STOW_ERR_UNSUPPORTED: StowStatus = 9;
/// An allocation failed or would not fit in the address space.
pub const STOW_ERR_OUT_OF_MEMORY: StowStatus = 10;
/// A worker thread could not be started.
pub const STOW_ERR_THREADS: StowStatus = 11;
/// A run stopped (for example an index in the data out of range).
pub const STOW_ERR_RUN: StowStatus = 12;
/// Outputs were asked for before a successful run, or after an input
/// changed since.
pub const STOW_ERR_NOT_RUN: StowStatus = 13;
/// A bug inside the library was caught at the boundary (a panic).
pub const STOW_ERR_PANIC: StowStatus = 14;
/// The number of arena buffers given differs from the bundle's number of
/// memory pools (`stow_bundle_pool_count`).
pub const STOW_ERR_POOL_COUNT: StowStatus = 15;

/// The name of a status code, as a static NUL-terminated string
/// (`"STOW_ERR_MISALIGNED"`; `"STOW_ERR_UNKNOWN"` for a code not listed).
/// It cannot fail, so it returns the string rather than a status.
#[no_mangle]
pub extern "C" fn stow_status_name(status: StowStatus) -> *const c_char {
    let name: &'static CStr = match status {
        STOW_OK => c"STOW_OK",
        STOW_ERR_NULL_ARGUMENT => c"STOW_ERR_NULL_ARGUMENT",
        STOW_ERR_INVALID_ARGUMENT => c"STOW_ERR_INVALID_ARGUMENT",
        STOW_ERR_IO => c"STOW_ERR_IO",
        STOW_ERR_INVALID_BUNDLE => c"STOW_ERR_INVALID_BUNDLE",
        STOW_ERR_MISALIGNED => c"STOW_ERR_MISALIGNED",
        STOW_ERR_TOO_SMALL => c"STOW_ERR_TOO_SMALL",
        STOW_ERR_NOT_FOUND => c"STOW_ERR_NOT_FOUND",
        STOW_ERR_SIZE_MISMATCH => c"STOW_ERR_SIZE_MISMATCH",
        STOW_ERR_UNSUPPORTED => c"STOW_ERR_UNSUPPORTED",
        STOW_ERR_OUT_OF_MEMORY => c"STOW_ERR_OUT_OF_MEMORY",
        STOW_ERR_THREADS => c"STOW_ERR_THREADS",
        STOW_ERR_RUN => c"STOW_ERR_RUN",
        STOW_ERR_NOT_RUN => c"STOW_ERR_NOT_RUN",
        STOW_ERR_PANIC => c"STOW_ERR_PANIC",
        STOW_ERR_POOL_COUNT => c"STOW_ERR_POOL_COUNT",
        _ => c"STOW_ERR_UNKNOWN",
    };
    name.as_ptr()
}

/// A failed call: its status code and the message for the caller.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: StowStatus,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(status: StowStatus, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
        }
    }

    /// `argument` (a parameter name of the header) was NULL.
    pub(crate) fn null(call: &str, argument: &str) -> Failure {
        Failure::new(
            STOW_ERR_NULL_ARGUMENT,
            format!("{call}: `{argument}` is NULL"),
        )
    }
}

pub(crate) type Outcome<T = ()> = Result<T, Failure>;

/// An error and its causes joined by `: `, as `stow` prints them: the
/// message a C caller gets.
pub(crate) fn describe(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Runs `body`, turning a panic into `STOW_ERR_PANIC` with its message, so
/// that no unwinding reaches the C caller.
pub(crate) fn guarded<T>(call: &str, body: impl FnOnce() -> Outcome<T>) -> Outcome<T> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        Err(Failure::new(
            STOW_ERR_PANIC,
            format!("{call}: internal error (a panic, caught): {what}"),
        ))
    })
}

/// Fails with [`Failure::null`] when `pointer` is NULL.
pub(crate) fn require<T>(pointer: *const T, call: &str, argument: &str) -> Outcome {
    if pointer.is_null() {
        Err(Failure::null(call, argument))
    } else {
        Ok(())
    }
}

/// A handle's last error message, readable from C until the next failure
/// on the handle replaces it. Behind a mutex because a bundle handle may
/// be queried from several threads.
pub(crate) struct ErrorSlot(Mutex<CString>);

impl ErrorSlot {
    pub(crate) fn new() -> ErrorSlot {
        ErrorSlot(Mutex::new(CString::default()))
    }

    pub(crate) fn set(&self, message: &str) {
        let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = text;
    }

    /// Records a failure and returns its status; `STOW_OK` on success.
    pub(crate) fn report(&self, outcome: Outcome) -> StowStatus {
        match outcome {
            Ok(()) => STOW_OK,
            Err(f) => {
                self.set(&f.message);
                f.status
            }
        }
    }

    /// The message as a C string. The `CString`'s heap buffer stays where
    /// it is until [`ErrorSlot::set`] replaces it, so the pointer outlives
    /// the lock.
    pub(crate) fn as_ptr(&self) -> *const c_char {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).as_ptr()
    }
}

/// Writes `text` to a caller's buffer of `cap` bytes as a NUL-terminated
/// string, cut at a character boundary if it does not fit. Nothing is
/// written when `msg` is NULL or `cap` is 0.
///
/// # Safety
///
/// `msg` is NULL or points to `cap` writable bytes.
pub(crate) unsafe fn write_message(msg: *mut c_char, cap: usize, text: &str) {
    if msg.is_null() || cap == 0 {
        return;
    }
    let mut n = text.len().min(cap - 1);
    while !text.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: the caller lends `cap` writable bytes at `msg`; `n + 1 <= cap`.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), msg.cast::<u8>(), n);
        *msg.add(n) = 0;
    }
}

/// Reports `outcome` of a call that creates a handle: the message (empty
/// on success) goes to the caller's buffer.
///
/// # Safety
///
/// As [`write_message`].
pub(crate) unsafe fn report_to(msg: *mut c_char, cap: usize, outcome: Outcome) -> StowStatus {
    let (status, text) = match &outcome {
        Ok(()) => (STOW_OK, ""),
        Err(f) => (f.status, f.message.as_str()),
    };
    // SAFETY: passed on from the caller.
    unsafe { write_message(msg, cap, text) };
    status
}

/// A NUL-terminated name from C, as bytes (names are compared byte for
/// byte; they need not be UTF-8 to be looked up).
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string.
pub(crate) unsafe fn c_name<'a>(name: *const c_char, call: &str) -> Outcome<&'a [u8]> {
    require(name, call, "name")?;
    // SAFETY: non-NULL, and NUL-terminated by the caller's contract.
    Ok(unsafe { CStr::from_ptr(name) }.to_bytes())
}

/// Writes `value` through an out-pointer checked non-NULL before.
///
/// # Safety
///
/// `out` is a valid, aligned pointer to a `T`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T) {
    // SAFETY: as the caller promises.
    unsafe { out.write(value) }
}

// The header promises that a bundle handle may be used from several
// threads at once and a session from any one thread at a time.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    fn movable<T: Send>() {}
    shared::<StowBundle>();
    movable::<StowSession>();
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_status_and_a_message() {
        let caught = guarded::<()>("stow_test", || panic!("index {} out of range", 7));
        let f = caught.unwrap_err();
        assert_eq!(f.status, STOW_ERR_PANIC);
        assert_eq!(
            f.message,
            "stow_test: internal error (a panic, caught): index 7 out of range"
        );
        let slot = ErrorSlot::new();
        assert_eq!(slot.report(Err(f)), STOW_ERR_PANIC);
        // SAFETY: the slot's string is NUL-terminated and alive.
        let text = unsafe { CStr::from_ptr(slot.as_ptr()) };
        assert!(text.to_str().unwrap().ends_with("index 7 out of range"));
    }

    #[test]
    fn messages_with_nul_bytes_stay_whole() {
        let slot = ErrorSlot::new();
        slot.set("tensor `a\0b` is missing");
        // SAFETY: as above.
        let text = unsafe { CStr::from_ptr(slot.as_ptr()) };
        assert_eq!(text.to_str().unwrap(), "tensor `a\\0b` is missing");
    }

    #[test]
    fn a_cut_message_ends_on_a_character_boundary() {
        let mut buffer = [0x55 as c_char; 8];
        // "héllo wörld": 'é' is two bytes at 1..3; 7 bytes of room.
        // SAFETY: 8 writable bytes.
        unsafe { write_message(buffer.as_mut_ptr(), 8, "héllo wörld") };
        // SAFETY: NUL-terminated by write_message.
        let text = unsafe { CStr::from_ptr(buffer.as_ptr()) };
        assert_eq!(text.to_str().unwrap(), "héllo ");
        // SAFETY: 3 bytes lent: "h" then 'é' would not fit whole.
        unsafe { write_message(buffer.as_mut_ptr(), 3, "héllo") };
        // SAFETY: as above.
        let text = unsafe { CStr::from_ptr(buffer.as_ptr()) };
        assert_eq!(text.to_str().unwrap(), "h");
    }
}

//! `stow_bundle_*`: open a bundle, describe its inputs, outputs and arena.

use crate::{
    c_name, guarded, put, report_to, require, ErrorSlot, Failure, Outcome, StowStatus,
    STOW_ERR_INVALID_ARGUMENT, STOW_ERR_INVALID_BUNDLE, STOW_ERR_IO, STOW_ERR_MISALIGNED,
    STOW_ERR_NOT_FOUND, STOW_ERR_NULL_ARGUMENT, STOW_ERR_OUT_OF_MEMORY, STOW_OK,
};
use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;
use stow_runtime::{Bundle, RuntimeError};

/// What `stow_bundle_input` and `stow_bundle_output` describe
/// (`stow_tensor_info` in C). Every pointer stays valid until the bundle
/// and all its sessions are freed.
#[repr(C)]
#[derive(Debug)]
pub struct StowTensorInfo {
    /// The name, NUL-terminated (names may hold a NUL byte: `name_len`
    /// is the length).
    pub name: *const c_char,
    /// Bytes in the name, without the terminating NUL.
    pub name_len: usize,
    /// Element type: the code of `docs/FORMAT.md` (`STOW_TYPE_F32` = 1, …).
    pub dtype: u32,
    /// Number of dimensions.
    pub rank: u32,
    /// `rank` dimensions, row-major; NULL when `rank` is 0.
    pub dims: *const u64,
    /// Number of elements (1 for rank 0).
    pub element_count: u64,
    /// Bytes the tensor takes: what `stow_session_set_input` expects and
    /// `stow_session_output` returns.
    pub byte_size: usize,
}

/// What `stow_bundle_pool` describes (`stow_pool_info` in C): one memory
/// pool, whose buffer a session needs. The name stays valid until the
/// bundle and all its sessions are freed.
#[repr(C)]
#[derive(Debug)]
pub struct StowPoolInfo {
    /// The pool's name, NUL-terminated (`arena` for a bundle without
    /// pools).
    pub name: *const c_char,
    /// Bytes in the name, without the terminating NUL.
    pub name_len: usize,
    /// Bytes the pool's buffer must hold.
    pub bytes: usize,
    /// The buffer must start at a multiple of this (a power of two).
    pub align: usize,
}

/// One memory pool, for C.
pub(crate) struct PoolSlot {
    /// The name and a NUL.
    name: Vec<u8>,
    pub(crate) bytes: usize,
    pub(crate) align: usize,
}

impl PoolSlot {
    pub(crate) fn display_name(&self) -> String {
        String::from_utf8_lossy(&self.name[..self.name.len() - 1]).into_owned()
    }
}

/// One graph input or output.
pub(crate) struct Io {
    pub(crate) id: u32,
    /// The name and a NUL, for C.
    name: Vec<u8>,
    pub(crate) byte_size: usize,
}

impl Io {
    pub(crate) fn name(&self) -> &[u8] {
        &self.name[..self.name.len() - 1]
    }

    pub(crate) fn display_name(&self) -> String {
        String::from_utf8_lossy(self.name()).into_owned()
    }
}

/// A bundle and what the C calls need to describe it, shared by the
/// bundle handle and every session made from it (a session keeps it
/// alive, so handles may be freed in any order).
pub(crate) struct Shared {
    pub(crate) bundle: Bundle,
    pub(crate) inputs: Vec<Io>,
    pub(crate) outputs: Vec<Io>,
    pub(crate) arena_bytes: usize,
    pub(crate) arena_align: usize,
    /// The memory pools, fastest first (one, `arena`, without pools).
    pub(crate) pools: Vec<PoolSlot>,
}

/// Which side of the graph.
#[derive(Clone, Copy)]
pub(crate) enum Side {
    Input,
    Output,
}

impl Side {
    fn word(self) -> &'static str {
        match self {
            Side::Input => "input",
            Side::Output => "output",
        }
    }
}

impl Shared {
    fn new(bundle: Bundle) -> Outcome<Shared> {
        let too_large = |what: String| {
            Failure::new(
                STOW_ERR_OUT_OF_MEMORY,
                format!(
                    "{}: {what} does not fit in this machine's address space",
                    bundle.path().display()
                ),
            )
        };
        let h = bundle.header();
        let arena_bytes = usize::try_from(h.arena_bytes)
            .map_err(|_| too_large(format!("the arena of {} bytes", h.arena_bytes)))?;
        let arena_align = usize::try_from(h.arena_align)
            .map_err(|_| too_large(format!("the arena alignment {}", h.arena_align)))?;
        let describe = |ids: &[u32]| -> Outcome<Vec<Io>> {
            ids.iter()
                .filter_map(|&id| Some((id, bundle.contents().tensors.get(id as usize)?)))
                .map(|(id, t)| {
                    let byte_size = usize::try_from(t.size).map_err(|_| {
                        too_large(format!("tensor `{}` of {} bytes", t.name, t.size))
                    })?;
                    let mut name = t.name.clone().into_bytes();
                    name.push(0);
                    Ok(Io {
                        id,
                        name,
                        byte_size,
                    })
                })
                .collect()
        };
        let c = bundle.contents();
        let pools = c
            .pool_sizes()
            .into_iter()
            .enumerate()
            .map(|(p, (bytes, align))| {
                let name = c.pools.get(p).map_or("arena", |pool| pool.name.as_str());
                let mut c_name = name.as_bytes().to_vec();
                c_name.push(0);
                Ok(PoolSlot {
                    name: c_name,
                    bytes: usize::try_from(bytes)
                        .map_err(|_| too_large(format!("pool `{name}` of {bytes} bytes")))?,
                    align: usize::try_from(align).map_err(|_| {
                        too_large(format!("the alignment {align} of pool `{name}`"))
                    })?,
                })
            })
            .collect::<Outcome<Vec<PoolSlot>>>()?;
        let inputs = describe(&bundle.contents().inputs)?;
        let outputs = describe(&bundle.contents().outputs)?;
        Ok(Shared {
            inputs,
            outputs,
            arena_bytes,
            arena_align,
            pools,
            bundle,
        })
    }

    pub(crate) fn side(&self, side: Side) -> &[Io] {
        match side {
            Side::Input => &self.inputs,
            Side::Output => &self.outputs,
        }
    }

    /// The input or output at `index`, or an error saying how many there are.
    pub(crate) fn at(&self, side: Side, index: usize) -> Outcome<&Io> {
        let list = self.side(side);
        list.get(index).ok_or_else(|| {
            Failure::new(
                STOW_ERR_NOT_FOUND,
                format!(
                    "{} index {index} is out of range: the bundle has {} {}(s)",
                    side.word(),
                    list.len(),
                    side.word()
                ),
            )
        })
    }

    /// The index of the input or output named `name`.
    pub(crate) fn find(&self, side: Side, name: &[u8]) -> Outcome<usize> {
        let list = self.side(side);
        let mut found = list.iter().enumerate().filter(|(_, io)| io.name() == name);
        let shown = String::from_utf8_lossy(name);
        match (found.next(), found.next()) {
            (Some((i, _)), None) => Ok(i),
            (Some((i, _)), Some((j, _))) => Err(Failure::new(
                STOW_ERR_INVALID_ARGUMENT,
                format!(
                    "{}s {i} and {j} are both named `{shown}`: use the index",
                    side.word()
                ),
            )),
            (None, _) => {
                let names: Vec<String> = list.iter().map(|io| io.display_name()).collect();
                Err(Failure::new(
                    STOW_ERR_NOT_FOUND,
                    format!(
                        "no {} is named `{shown}` (the bundle's {}s: {})",
                        side.word(),
                        side.word(),
                        names.join(", ")
                    ),
                ))
            }
        }
    }

    fn info(&self, side: Side, index: usize) -> Outcome<StowTensorInfo> {
        let io = self.at(side, index)?;
        let tensor = self.bundle.contents().tensors.get(io.id as usize);
        let Some(t) = tensor else {
            return Err(Failure::new(
                STOW_ERR_INVALID_BUNDLE,
                format!("tensor {} is missing", io.id),
            ));
        };
        Ok(StowTensorInfo {
            name: io.name.as_ptr().cast(),
            name_len: io.name.len() - 1,
            dtype: t.dtype as u32,
            rank: t.shape.len() as u32,
            dims: if t.shape.is_empty() {
                std::ptr::null()
            } else {
                t.shape.as_ptr()
            },
            element_count: t.shape.iter().product(),
            byte_size: io.byte_size,
        })
    }
}

/// An open bundle (`stow_bundle` in C).
pub struct StowBundle {
    pub(crate) shared: Arc<Shared>,
    error: ErrorSlot,
}

fn runtime_failure(e: RuntimeError) -> Failure {
    let status = match e {
        RuntimeError::Io { .. } => STOW_ERR_IO,
        RuntimeError::Invalid { .. } => STOW_ERR_INVALID_BUNDLE,
        RuntimeError::Misaligned { .. } => STOW_ERR_MISALIGNED,
    };
    Failure::new(status, crate::describe(&e))
}

/// Boxes an opened bundle into a handle at `*out`.
///
/// # Safety
///
/// `out` is valid for a write.
unsafe fn hand_out(opened: Outcome<Bundle>, out: *mut *mut StowBundle) -> Outcome {
    let shared = Shared::new(opened?)?;
    let handle = Box::new(StowBundle {
        shared: Arc::new(shared),
        error: ErrorSlot::new(),
    });
    // SAFETY: passed on from the caller.
    unsafe { put(out, Box::into_raw(handle)) };
    Ok(())
}

/// `stow_bundle_open`: maps the file at `path` and validates it.
///
/// # Safety
///
/// `path` is NULL or NUL-terminated; `out` is NULL or valid for a write;
/// `msg` is NULL or `msg_cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn stow_bundle_open(
    path: *const c_char,
    out: *mut *mut StowBundle,
    msg: *mut c_char,
    msg_cap: usize,
) -> StowStatus {
    const CALL: &str = "stow_bundle_open";
    let outcome = guarded(CALL, || {
        require(out, CALL, "out")?;
        // SAFETY: non-NULL; the caller lends it for a write.
        unsafe { put(out, std::ptr::null_mut()) };
        require(path, CALL, "path")?;
        // SAFETY: non-NULL and NUL-terminated by the caller's contract.
        let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
        let path = path_from_bytes(bytes)?;
        // SAFETY: `out` was checked above.
        unsafe { hand_out(Bundle::open(&path).map_err(runtime_failure), out) }
    });
    // SAFETY: the caller's contract on `msg`.
    unsafe { report_to(msg, msg_cap, outcome) }
}

#[cfg(unix)]
fn path_from_bytes(bytes: &[u8]) -> Outcome<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    Ok(std::ffi::OsStr::from_bytes(bytes).into())
}

#[cfg(not(unix))]
fn path_from_bytes(bytes: &[u8]) -> Outcome<std::path::PathBuf> {
    std::str::from_utf8(bytes).map(Into::into).map_err(|_| {
        Failure::new(
            STOW_ERR_INVALID_ARGUMENT,
            "stow_bundle_open: the path is not UTF-8",
        )
    })
}

/// `stow_bundle_open_bytes`: validates `len` bytes at `bytes` and reads
/// them in place, without a copy.
///
/// # Safety
///
/// `bytes` is NULL or `len` readable bytes that stay valid and unchanged
/// until the bundle and every session made from it are freed; `out` and
/// `msg` as in [`stow_bundle_open`].
#[no_mangle]
pub unsafe extern "C" fn stow_bundle_open_bytes(
    bytes: *const c_void,
    len: usize,
    out: *mut *mut StowBundle,
    msg: *mut c_char,
    msg_cap: usize,
) -> StowStatus {
    const CALL: &str = "stow_bundle_open_bytes";
    let outcome = guarded(CALL, || {
        require(out, CALL, "out")?;
        // SAFETY: non-NULL; the caller lends it for a write.
        unsafe { put(out, std::ptr::null_mut()) };
        require(bytes, CALL, "bytes")?;
        if len > isize::MAX as usize {
            return Err(Failure::new(
                STOW_ERR_INVALID_ARGUMENT,
                format!("{CALL}: {len} bytes is more than any buffer holds"),
            ));
        }
        // SAFETY: non-NULL, `len` readable bytes (at most isize::MAX) that
        // the caller keeps valid and unchanged until the bundle and its
        // sessions are freed; every session holds the bundle (`Shared`)
        // alive, so nothing reads them after that. `'static` stands for
        // that contract.
        let bytes: &'static [u8] = unsafe { std::slice::from_raw_parts(bytes.cast(), len) };
        // SAFETY: `out` was checked above.
        unsafe { hand_out(Bundle::from_static(bytes).map_err(runtime_failure), out) }
    });
    // SAFETY: the caller's contract on `msg`.
    unsafe { report_to(msg, msg_cap, outcome) }
}

/// `stow_bundle_free`: releases the handle; the bundle itself goes when
/// its last session is freed too. NULL is a no-op.
///
/// # Safety
///
/// `bundle` is NULL or a handle from `stow_bundle_open*` not yet freed.
#[no_mangle]
pub unsafe extern "C" fn stow_bundle_free(bundle: *mut StowBundle) -> StowStatus {
    if bundle.is_null() {
        return STOW_OK;
    }
    // SAFETY: a live handle made by `Box::into_raw`, given back once.
    let handle = unsafe { Box::from_raw(bundle) };
    match guarded("stow_bundle_free", || {
        drop(handle);
        Ok(())
    }) {
        Ok(()) => STOW_OK,
        Err(f) => f.status,
    }
}

/// Runs `body` on a bundle handle, recording a failure in it.
///
/// # Safety
///
/// `bundle` is NULL or a live handle.
unsafe fn with_bundle(
    bundle: *const StowBundle,
    call: &str,
    body: impl FnOnce(&Shared) -> Outcome,
) -> StowStatus {
    // SAFETY: NULL or a live handle (the caller's contract).
    let Some(handle) = (unsafe { bundle.as_ref() }) else {
        return STOW_ERR_NULL_ARGUMENT;
    };
    handle.error.report(guarded(call, || body(&handle.shared)))
}

/// `stow_bundle_last_error`: the message of the last failed call on this
/// bundle ("" if none), valid until the next failure on it.
///
/// # Safety
///
/// `bundle` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn stow_bundle_last_error(bundle: *const StowBundle) -> *const c_char {
    // SAFETY: NULL or a live handle (the caller's contract).
    match unsafe { bundle.as_ref() } {
        Some(handle) => handle.error.as_ptr(),
        None => c"stow_bundle_last_error: `bundle` is NULL".as_ptr(),
    }
}

/// `stow_bundle_verify_weights`: checks the weight checksum (reads every
/// weight byte).
///
/// # Safety
///
/// `bundle` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn stow_bundle_verify_weights(bundle: *const StowBundle) -> StowStatus {
    // SAFETY: passed on.
    unsafe {
        with_bundle(bundle, "stow_bundle_verify_weights", |s| {
            s.bundle.verify_weights().map_err(runtime_failure)
        })
    }
}

/// `stow_bundle_arena`: the bytes and alignment of the arena a session
/// needs.
///
/// # Safety
///
/// `bundle` is NULL or a live handle; `bytes` and `align` are NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn stow_bundle_arena(
    bundle: *const StowBundle,
    bytes: *mut usize,
    align: *mut usize,
) -> StowStatus {
    const CALL: &str = "stow_bundle_arena";
    // SAFETY: passed on; the out-pointers are checked before the writes.
    unsafe {
        with_bundle(bundle, CALL, |s| {
            require(bytes, CALL, "bytes")?;
            require(align, CALL, "align")?;
            put(bytes, s.arena_bytes);
            put(align, s.arena_align);
            Ok(())
        })
    }
}

/// # Safety
///
/// `bundle` NULL or live, `count` NULL or valid for a write.
unsafe fn count(
    bundle: *const StowBundle,
    side: Side,
    count: *mut usize,
    call: &str,
) -> StowStatus {
    // SAFETY: passed on; `count` is checked before the write.
    unsafe {
        with_bundle(bundle, call, |s| {
            require(count, call, "count")?;
            put(count, s.side(side).len());
            Ok(())
        })
    }
}

/// `stow_bundle_input_count`: how many inputs the graph has.
///
/// # Safety
///
/// `bundle` is NULL or a live handle; `count` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn stow_bundle_input_count(
    bundle: *const StowBundle,
    count: *mut usize,
) -> StowStatus {
    // SAFETY: passed on.
    unsafe { self::count(bundle, Side::Input, count, "stow_bundle_input_count") }
}

/// `stow_bundle_output_count`: how many outputs the graph has.
///
/// # Safety
///
/// As [`stow_bundle_input_count`].
#[no_mangle]
pub unsafe extern "C" fn stow_bundle_output_count(
    bundle: *const StowBundle,
    count: *mut usize,
) -> StowStatus {
    // SAFETY: passed on.
    unsafe { self::count(bundle, Side::Output, count, "stow_bundle_output_count") }
}

/// # Safety
///
/// `bundle` NULL or live, `info` NULL or valid for a write.
unsafe fn describe(
    bundle: *const StowBundle,
    side: Side,
    index: usize,
    info: *mut StowTensorInfo,
    call: &str,
) -> StowStatus {
    // SAFETY: passed on; `info` is checked before the write.
    unsafe {
        with_bundle(bundle, call, |s| {
            require(info, call, "info")?;
            put(info, s.info(side, index)?);
            Ok(())
        })
    }
}

/// `stow_bundle_input`: describes input `index`.
///
/// # Safety
///
/// `bundle` is NULL or a live handle; `info` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn stow_bundle_input(
    bundle: *const StowBundle,
    index: usize,
    info: *mut StowTensorInfo,
) -> StowStatus {
    // SAFETY: passed on.
    unsafe { describe(bundle, Side::Input, index, info, "stow_bundle_input") }
}

/// `stow_bundle_output`: describes output `index`.
///
/// # Safety
///
/// As [`stow_bundle_input`].
#[no_mangle]
pub unsafe extern "C" fn stow_bundle_output(
    bundle: *const StowBundle,
    index: usize,
    info: *mut StowTensorInfo,
) -> StowStatus {
    // SAFETY: passed on.
    unsafe { describe(bundle, Side::Output, index, info, "stow_bundle_output") }
}

/// # Safety
///
/// `bundle` NULL or live, `name` NULL or NUL-terminated, `index` NULL or
/// valid for a write.
unsafe fn index_of(
    bundle: *const StowBundle,
    side: Side,
    name: *const c_char,
    index: *mut usize,
    call: &str,
) -> StowStatus {
    // SAFETY: passed on; `index` is checked before the write.
    unsafe {
        with_bundle(bundle, call, |s| {
            let name = c_name(name, call)?;
            require(index, call, "index")?;
            put(index, s.find(side, name)?);
            Ok(())
        })
    }
}

/// `stow_bundle_input_index`: the index of the input named `name`.
///
/// # Safety
///
/// `bundle` is NULL or a live handle; `name` NULL or NUL-terminated;
/// `index` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn stow_bundle_input_index(
    bundle: *const StowBundle,
    name: *const c_char,
    index: *mut usize,
) -> StowStatus {
    // SAFETY: passed on.
    unsafe { index_of(bundle, Side::Input, name, index, "stow_bundle_input_index") }
}

/// `stow_bundle_output_index`: the index of the output named `name`.
///
/// # Safety
///
/// As [`stow_bundle_input_index`].
#[no_mangle]
pub unsafe extern "C" fn stow_bundle_output_index(
    bundle: *const StowBundle,
    name: *const c_char,
    index: *mut usize,
) -> StowStatus {
    // SAFETY: passed on.
    unsafe {
        index_of(
            bundle,
            Side::Output,
            name,
            index,
            "stow_bundle_output_index",
        )
    }
}

/// `stow_bundle_pool_count`: how many memory pools (caller buffers) a
/// session on this bundle needs; 1 for a bundle with one arena.
///
/// # Safety
///
/// `bundle` is NULL or a live handle; `count` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn stow_bundle_pool_count(
    bundle: *const StowBundle,
    count: *mut usize,
) -> StowStatus {
    const CALL: &str = "stow_bundle_pool_count";
    // SAFETY: passed on; `count` is checked before the write.
    unsafe {
        with_bundle(bundle, CALL, |s| {
            require(count, CALL, "count")?;
            put(count, s.pools.len());
            Ok(())
        })
    }
}

/// `stow_bundle_pool`: the name, size and alignment of memory pool
/// `index` (fastest first).
///
/// # Safety
///
/// `bundle` is NULL or a live handle; `info` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn stow_bundle_pool(
    bundle: *const StowBundle,
    index: usize,
    info: *mut StowPoolInfo,
) -> StowStatus {
    const CALL: &str = "stow_bundle_pool";
    // SAFETY: passed on; `info` is checked before the write.
    unsafe {
        with_bundle(bundle, CALL, |s| {
            require(info, CALL, "info")?;
            let pool = s.pools.get(index).ok_or_else(|| {
                Failure::new(
                    STOW_ERR_NOT_FOUND,
                    format!(
                        "pool index {index} is out of range: the bundle has {} pool(s)",
                        s.pools.len()
                    ),
                )
            })?;
            put(
                info,
                StowPoolInfo {
                    name: pool.name.as_ptr().cast(),
                    name_len: pool.name.len() - 1,
                    bytes: pool.bytes,
                    align: pool.align,
                },
            );
            Ok(())
        })
    }
}

/*
 * stowage.h: run Stowage bundles from C (library: crates/stow-capi,
 * libstow_capi.a or libstow_capi.so). Reference: docs/C-API.md.
 *
 *     stow_bundle *b;   stow_session *s;   char msg[256];
 *     stow_bundle_open("model.stow", &b, msg, sizeof msg);
 *     stow_session_create_in(b, arena, sizeof arena, 1, &s, msg, sizeof msg);
 *     stow_session_set_input(s, "image", pixels, sizeof pixels);
 *     stow_session_run(s);
 *     stow_session_copy_output(s, 0, logits, sizeof logits);
 *     stow_session_free(s);   stow_bundle_free(b);
 *
 * Conventions:
 *
 * - Every function returns a stow_status: STOW_OK (0) or a STOW_ERR_*
 *   code, except stow_status_name and the two *_last_error functions,
 *   which cannot fail and return a string.
 * - What went wrong, in words: the calls that create a handle write it to
 *   the caller's buffer `msg` of `msg_cap` bytes (NUL-terminated, cut to
 *   fit; "" on success; `msg` may be NULL). Calls on a handle keep it in
 *   the handle: stow_bundle_last_error(b), stow_session_last_error(s).
 * - A NULL pointer where one is required is STOW_ERR_NULL_ARGUMENT (with
 *   a NULL handle there is no handle to hold the message). On failure,
 *   out-parameters other than created handles are left as they were; a
 *   handle out-parameter is set to NULL.
 * - No global state, no panic or exception crosses into C (an internal
 *   bug is caught and reported as STOW_ERR_PANIC).
 * - Threads: a bundle may be used by several threads and sessions at
 *   once. A session is used by one thread at a time (any thread). A
 *   session keeps its bundle alive: stow_bundle_free and
 *   stow_session_free may come in any order.
 * - Sizes are size_t; dimensions uint64_t.
 */
#ifndef STOWAGE_H
#define STOWAGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Alignment stow_bundle_open_bytes requires of the bundle's first byte. */
#define STOWAGE_BUNDLE_ALIGN 64u

/* ---- status codes ---------------------------------------------------- */

typedef int32_t stow_status;

enum {
    STOW_OK = 0,
    STOW_ERR_NULL_ARGUMENT = 1,    /* a required pointer was NULL */
    STOW_ERR_INVALID_ARGUMENT = 2, /* zero threads, a name two inputs share, ... */
    STOW_ERR_IO = 3,               /* the bundle file could not be read */
    STOW_ERR_INVALID_BUNDLE = 4,   /* not a valid bundle, or the weight checksum failed */
    STOW_ERR_MISALIGNED = 5,       /* bundle bytes or arena buffer misaligned */
    STOW_ERR_TOO_SMALL = 6,        /* a buffer is smaller than what it must hold */
    STOW_ERR_NOT_FOUND = 7,        /* no input/output by that name, or index out of range */
    STOW_ERR_SIZE_MISMATCH = 8,    /* input data is not exactly the input's byte size */
    STOW_ERR_UNSUPPORTED = 9,      /* an operator without a kernel, an arena alignment
                                      above what can be allocated */
    STOW_ERR_OUT_OF_MEMORY = 10,   /* an allocation failed, or a size does not fit size_t */
    STOW_ERR_THREADS = 11,         /* a worker thread could not be started */
    STOW_ERR_RUN = 12,             /* a run stopped (e.g. an index in the data out of range) */
    STOW_ERR_NOT_RUN = 13,         /* outputs asked for before a successful run, or after
                                      an input changed through this API since */
    STOW_ERR_PANIC = 14,           /* an internal bug, caught at the boundary */
    STOW_ERR_POOL_COUNT = 15       /* not one arena buffer per memory pool of the bundle */
};

/* "STOW_ERR_MISALIGNED", ...; "STOW_ERR_UNKNOWN" for other values. Static. */
const char *stow_status_name(stow_status status);

/* ---- element types ----------------------------------------------------
 * The codes of docs/FORMAT.md (and of enum stow_dtype in stow_bundle.h,
 * under other names so that both headers can be included). Tensors are
 * dense, row-major, little-endian. */
enum {
    STOW_TYPE_F32 = 1,
    STOW_TYPE_F16 = 2,
    STOW_TYPE_F64 = 3,
    STOW_TYPE_I8 = 4,
    STOW_TYPE_I16 = 5,
    STOW_TYPE_I32 = 6,
    STOW_TYPE_I64 = 7,
    STOW_TYPE_U8 = 8,
    STOW_TYPE_U16 = 9,
    STOW_TYPE_U32 = 10,
    STOW_TYPE_U64 = 11,
    STOW_TYPE_BOOL = 12 /* one byte, 0 or 1 */
};

/* ---- bundles ----------------------------------------------------------- */

typedef struct stow_bundle stow_bundle; /* opaque */

/* An input or output. Its pointers stay valid until the bundle and all its
 * sessions are freed. */
typedef struct stow_tensor_info {
    const char *name;       /* NUL-terminated (a name may hold a NUL: see name_len) */
    size_t name_len;        /* bytes in the name, without the terminating NUL */
    uint32_t dtype;         /* STOW_TYPE_* */
    uint32_t rank;          /* number of dimensions */
    const uint64_t *dims;   /* rank dimensions; NULL when rank is 0 */
    uint64_t element_count; /* product of dims (1 for rank 0) */
    size_t byte_size;       /* bytes: what set_input takes and output gives */
} stow_tensor_info;

/* Maps the file at `path` read-only and validates everything but the
 * weight checksum (reads no weight bytes). STOW_ERR_IO,
 * STOW_ERR_INVALID_BUNDLE. On success *out is a new handle. */
stow_status stow_bundle_open(const char *path, stow_bundle **out, char *msg, size_t msg_cap);

/* Validates the `len` bytes at `bytes` and reads them in place: nothing is
 * copied, so a bundle in flash costs no RAM for its weights. `bytes` must
 * be aligned to STOWAGE_BUNDLE_ALIGN (64: weights sit at multiples of 64
 * from the start, and kernels read them as typed arrays), else
 * STOW_ERR_MISALIGNED. The bytes must stay valid and unchanged until the
 * bundle and every session made from it are freed. */
stow_status stow_bundle_open_bytes(const void *bytes, size_t len, stow_bundle **out, char *msg,
                                   size_t msg_cap);

/* Releases the handle (the bundle goes when its last session is freed
 * too). NULL is a no-op. */
stow_status stow_bundle_free(stow_bundle *bundle);

/* The message of the last failed call on `bundle` ("" if none), valid
 * until the next failure on it or stow_bundle_free. Never NULL. */
const char *stow_bundle_last_error(const stow_bundle *bundle);

/* Checks the weight checksum: reads every weight byte. */
stow_status stow_bundle_verify_weights(const stow_bundle *bundle);

/* The arena a session needs: *bytes bytes starting at a multiple of
 * *align (a power of two, 64 unless compiled with another --align). */
stow_status stow_bundle_arena(const stow_bundle *bundle, size_t *bytes, size_t *align);

/* ---- memory pools ------------------------------------------------------
 * A bundle compiled with `stow compile --pool NAME=BYTES ...` splits its
 * arena across memory pools (fast on-chip memory, slow external RAM, ...),
 * fastest first; a session needs one buffer per pool. A bundle without
 * pools has one, named "arena", equal to stow_bundle_arena (which, for a
 * bundle with pools, describes pool 0). */

/* One memory pool. The name stays valid until the bundle and all its
 * sessions are freed. */
typedef struct stow_pool_info {
    const char *name; /* NUL-terminated, 1 to 16 bytes ("arena" without pools) */
    size_t name_len;  /* bytes in the name, without the terminating NUL */
    size_t bytes;     /* bytes the pool's buffer must hold */
    size_t align;     /* the buffer starts at a multiple of this (a power of two) */
} stow_pool_info;

/* How many pools (buffers) a session needs: 1 to 8. */
stow_status stow_bundle_pool_count(const stow_bundle *bundle, size_t *count);
/* Describes pool `index`; STOW_ERR_NOT_FOUND when out of range. */
stow_status stow_bundle_pool(const stow_bundle *bundle, size_t index, stow_pool_info *info);

/* Graph inputs and outputs, in model order. */
stow_status stow_bundle_input_count(const stow_bundle *bundle, size_t *count);
stow_status stow_bundle_output_count(const stow_bundle *bundle, size_t *count);
/* Describes input/output `index`; STOW_ERR_NOT_FOUND when out of range. */
stow_status stow_bundle_input(const stow_bundle *bundle, size_t index, stow_tensor_info *info);
stow_status stow_bundle_output(const stow_bundle *bundle, size_t index, stow_tensor_info *info);
/* The index of the input/output named `name` (compared byte for byte);
 * STOW_ERR_NOT_FOUND (the message lists the names), or
 * STOW_ERR_INVALID_ARGUMENT when two have that name. */
stow_status stow_bundle_input_index(const stow_bundle *bundle, const char *name, size_t *index);
stow_status stow_bundle_output_index(const stow_bundle *bundle, const char *name, size_t *index);

/* ---- sessions ---------------------------------------------------------
 * A session prepares a kernel for every operator (failing with
 * STOW_ERR_UNSUPPORTED, the message listing every operator without one)
 * and holds the arena. `threads` >= 1 (the calling thread and threads - 1
 * workers started here); outputs are byte-identical for every count.
 * Creating a session allocates the prepared kernels (and, with more
 * threads than the bundle was compiled for, their packing scratch);
 * stow_session_run allocates nothing. */

typedef struct stow_session stow_session; /* opaque */

/* A session whose arena is allocated here (one buffer per memory pool
 * for a bundle compiled with `stow compile --pool`). */
stow_status stow_session_create(const stow_bundle *bundle, size_t threads, stow_session **out,
                                char *msg, size_t msg_cap);

/* A session whose arena is the caller's `arena_len` bytes at `arena`
 * (static memory on a device). The buffer must start at a multiple of the
 * bundle's arena alignment (STOW_ERR_MISALIGNED) and hold at least its
 * arena bytes (STOW_ERR_TOO_SMALL): see stow_bundle_arena. Its first
 * arena bytes are zeroed here; the buffer must stay valid until
 * stow_session_free, and nothing but this session (and the pointers it
 * hands out) may touch it meanwhile. It is not freed by the library.
 * A bundle split across memory pools needs one buffer per pool and is
 * refused here (STOW_ERR_POOL_COUNT): use stow_session_create_in_pools. */
stow_status stow_session_create_in(const stow_bundle *bundle, void *arena, size_t arena_len,
                                   size_t threads, stow_session **out, char *msg,
                                   size_t msg_cap);

/* One caller buffer: `len` bytes at `data`. */
typedef struct stow_buffer {
    void *data;
    size_t len;
} stow_buffer;

/* A session whose memory pools are the caller's `count` buffers at
 * `buffers`, one per pool in the bundle's order (fastest first; see
 * stow_bundle_pool). `count` must equal stow_bundle_pool_count
 * (STOW_ERR_POOL_COUNT); buffer p must start at a multiple of pool p's
 * align (STOW_ERR_MISALIGNED) and hold at least its bytes
 * (STOW_ERR_TOO_SMALL), and its data must not be NULL
 * (STOW_ERR_NULL_ARGUMENT); the message names the pool. Each pool's bytes
 * are zeroed here. The buffers follow the rules of stow_session_create_in;
 * the array of records itself may be reused once this returns. Works for
 * a bundle without pools too (count 1). */
stow_status stow_session_create_in_pools(const stow_bundle *bundle, const stow_buffer *buffers,
                                         size_t count, size_t threads, stow_session **out,
                                         char *msg, size_t msg_cap);

/* Stops the worker threads and frees the session. NULL is a no-op. */
stow_status stow_session_free(stow_session *session);

/* The message of the last failed call on `session` ("" if none), valid
 * until the next failure on it or stow_session_free. Never NULL. */
const char *stow_session_last_error(const stow_session *session);

/* Copies `bytes` bytes (exactly the input's byte_size, else
 * STOW_ERR_SIZE_MISMATCH) into the input named `name` / input `index`. */
stow_status stow_session_set_input(stow_session *session, const char *name, const void *data,
                                   size_t bytes);
stow_status stow_session_set_input_at(stow_session *session, size_t index, const void *data,
                                      size_t bytes);

/* Where input `index` lives in the arena (*bytes bytes at *data, aligned
 * for its element type), to fill in place: valid until stow_session_free.
 * Fill it before every run: the plan may reuse an input's bytes for
 * later tensors during a run. */
stow_status stow_session_input_buffer(stow_session *session, size_t index, void **data,
                                      size_t *bytes);

/* Runs every step in order; allocates nothing. STOW_ERR_RUN names the
 * step that stopped. */
stow_status stow_session_run(stow_session *session);

/* Output `index` after a successful run: *bytes bytes at *data, inside
 * the arena, valid until the next input change or run. STOW_ERR_NOT_RUN
 * before a successful run or after stow_session_set_input* /
 * stow_session_input_buffer since. */
stow_status stow_session_output(stow_session *session, size_t index, const void **data,
                                size_t *bytes);

/* Copies output `index` into `cap` bytes at `dst` (STOW_ERR_TOO_SMALL when
 * it does not fit); same conditions as stow_session_output. */
stow_status stow_session_copy_output(stow_session *session, size_t index, void *dst, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* STOWAGE_H */

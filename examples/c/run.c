/*
 * run.c: run a Stowage bundle from C through the C API (stowage.h) the way
 * a device would: the activation arena is a static buffer, the input is
 * written straight into it, and nothing is allocated for a run. The output
 * is compared with a stored expected output.
 *
 *     run [--from-bytes] BUNDLE INPUT.f32 EXPECTED.f32
 *
 * INPUT.f32 and EXPECTED.f32 are raw little-endian float32 arrays (the
 * bundle's first input and first output). --from-bytes reads the bundle
 * into a 64-byte-aligned buffer and opens it in place
 * (stow_bundle_open_bytes), as from flash; without it the file is mapped
 * (stow_bundle_open). Exit status: 0 when every output value is within
 * 1e-4 + 1e-4 * |expected| of the expected one, 1 when one is not, 2 on an
 * error. tools/c_example.sh builds and runs it; RUN_ARENA_BYTES sizes the
 * static arena (the script passes the bundle's exact arena size).
 *
 * A bundle compiled with `stow compile --pool sram=BYTES --pool dram` has
 * one memory per pool: pool 0 (the fast one) goes into the static arena,
 * as a device would place it in on-chip memory, and each slower pool gets
 * a buffer from the heap (external RAM), all passed to
 * stow_session_create_in_pools.
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */

#include "stowage.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef RUN_ARENA_BYTES
#define RUN_ARENA_BYTES (1024u * 1024u)
#endif
#define RUN_ARENA_ALIGN 64u
#define TIMED_RUNS 50

/* The arena: static memory, as on a device whose heap could not hold it. */
static _Alignas(RUN_ARENA_ALIGN) unsigned char arena[RUN_ARENA_BYTES];

static int fail(const char *what, stow_status status, const char *message) {
    fprintf(stderr, "run: %s: %s: %s\n", what, stow_status_name(status), message);
    return 2;
}

/* Reads the whole file into a buffer of `align`-aligned storage (freed with
 * free()); NULL, with a message, on failure. */
static void *read_file(const char *path, size_t align, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return NULL;
    }
    void *buf = NULL;
    long end = -1;
    if (fseek(f, 0, SEEK_END) == 0) end = ftell(f);
    if (end >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        *len = (size_t)end;
        /* aligned_alloc wants a size that is a multiple of the alignment. */
        size_t room = (*len + align - 1) / align * align;
        buf = aligned_alloc(align, room ? room : align);
        if (buf && fread(buf, 1, *len, f) != *len) {
            free(buf);
            buf = NULL;
        }
    }
    if (!buf) fprintf(stderr, "run: cannot read %s\n", path);
    fclose(f);
    return buf;
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int from_bytes = argc > 1 && strcmp(argv[1], "--from-bytes") == 0;
    if (argc != 4 + from_bytes) {
        fprintf(stderr, "usage: run [--from-bytes] BUNDLE INPUT.f32 EXPECTED.f32\n");
        return 2;
    }
    const char *bundle_path = argv[1 + from_bytes];
    const char *input_path = argv[2 + from_bytes];
    const char *expected_path = argv[3 + from_bytes];

    char msg[512];
    stow_status st;
    stow_bundle *bundle = NULL;
    void *bundle_bytes = NULL;
    if (from_bytes) {
        size_t len;
        bundle_bytes = read_file(bundle_path, STOWAGE_BUNDLE_ALIGN, &len);
        if (!bundle_bytes) return 2;
        st = stow_bundle_open_bytes(bundle_bytes, len, &bundle, msg, sizeof msg);
    } else {
        st = stow_bundle_open(bundle_path, &bundle, msg, sizeof msg);
    }
    if (st != STOW_OK) return fail(bundle_path, st, msg);

    size_t arena_bytes, arena_align;
    stow_bundle_arena(bundle, &arena_bytes, &arena_align);
    printf("bundle %s: arena %zu bytes (align %zu), static buffer %zu bytes\n", bundle_path,
           arena_bytes, arena_align, (size_t)RUN_ARENA_BYTES);

    size_t pools = 0;
    if ((st = stow_bundle_pool_count(bundle, &pools)) != STOW_OK)
        return fail("stow_bundle_pool_count", st, stow_bundle_last_error(bundle));
    stow_session *session = NULL;
    stow_buffer buffers[8];
    if (pools == 1) {
        st = stow_session_create_in(bundle, arena, sizeof arena, 1, &session, msg, sizeof msg);
        if (st != STOW_OK) return fail("stow_session_create_in", st, msg);
    } else {
        if (pools > sizeof buffers / sizeof buffers[0]) return fail("pools", STOW_OK, "too many");
        for (size_t p = 0; p < pools; p++) {
            stow_pool_info pool;
            if ((st = stow_bundle_pool(bundle, p, &pool)) != STOW_OK)
                return fail("stow_bundle_pool", st, stow_bundle_last_error(bundle));
            if (p == 0) {
                buffers[p].data = arena; /* the fast pool: static memory */
                buffers[p].len = sizeof arena;
            } else {
                /* aligned_alloc wants a multiple of the alignment. */
                size_t len = (pool.bytes / pool.align + 1) * pool.align;
                buffers[p].data = aligned_alloc(pool.align, len);
                buffers[p].len = len;
                if (!buffers[p].data) return fail("aligned_alloc", STOW_OK, pool.name);
            }
            printf("pool %zu `%s`: %zu bytes (align %zu), %s\n", p, pool.name, pool.bytes,
                   pool.align, p == 0 ? "in the static buffer" : "from the heap");
        }
        st = stow_session_create_in_pools(bundle, buffers, pools, 1, &session, msg, sizeof msg);
        if (st != STOW_OK) return fail("stow_session_create_in_pools", st, msg);
    }

    stow_tensor_info in, out;
    if ((st = stow_bundle_input(bundle, 0, &in)) != STOW_OK ||
        (st = stow_bundle_output(bundle, 0, &out)) != STOW_OK)
        return fail("describe", st, stow_bundle_last_error(bundle));
    if (in.dtype != STOW_TYPE_F32 || out.dtype != STOW_TYPE_F32) {
        fprintf(stderr, "run: this example reads and compares float32 tensors only\n");
        return 2;
    }

    size_t input_len, expected_len;
    float *input = read_file(input_path, sizeof(float), &input_len);
    float *expected = read_file(expected_path, sizeof(float), &expected_len);
    if (!input || !expected) return 2;
    if (input_len != in.byte_size || expected_len != out.byte_size) {
        fprintf(stderr, "run: %s holds %zu bytes and %s %zu; `%s` takes %zu, `%s` gives %zu\n",
                input_path, input_len, expected_path, expected_len, in.name, in.byte_size,
                out.name, out.byte_size);
        return 2;
    }

    /* The input lives in the arena: fill it in place before every run
     * (the plan may reuse its bytes once it has been read). */
    void *slot;
    size_t slot_len;
    st = stow_session_input_buffer(session, 0, &slot, &slot_len);
    if (st != STOW_OK) return fail("stow_session_input_buffer", st, stow_session_last_error(session));

    double times[TIMED_RUNS];
    for (int i = 0; i < TIMED_RUNS; i++) {
        double t0 = seconds();
        memcpy(slot, input, slot_len);
        st = stow_session_run(session);
        times[i] = seconds() - t0;
        if (st != STOW_OK) return fail("stow_session_run", st, stow_session_last_error(session));
    }
    qsort(times, TIMED_RUNS, sizeof times[0], by_value);

    const void *data;
    size_t data_len;
    st = stow_session_output(session, 0, &data, &data_len);
    if (st != STOW_OK) return fail("stow_session_output", st, stow_session_last_error(session));
    const float *got = data;

    size_t n = data_len / sizeof(float), worst = 0, wrong = 0;
    double worst_err = 0.0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - (double)expected[i]);
        if (!(err <= 1e-4 + 1e-4 * fabs((double)expected[i]))) wrong++;
        if (!(err <= worst_err)) {
            worst_err = err;
            worst = i;
        }
    }
    printf("input `%s` %zu bytes, output `%s` %zu values: max |error| %.3g at %zu "
           "(got %.7g, expected %.7g)\n",
           in.name, in.byte_size, out.name, n, worst_err, worst, (double)got[worst],
           (double)expected[worst]);
    printf("run: median %.3f ms, min %.3f ms over %d runs (%s)\n", 1e3 * times[TIMED_RUNS / 2],
           1e3 * times[0], TIMED_RUNS, from_bytes ? "bundle opened in place from bytes"
                                                  : "bundle file mapped");

    stow_session_free(session);
    for (size_t p = 1; p < pools; p++) free(buffers[p].data);
    stow_bundle_free(bundle);
    free(bundle_bytes);
    free(input);
    free(expected);
    if (wrong) {
        printf("MISMATCH: %zu of %zu values outside the tolerance\n", wrong, n);
        return 1;
    }
    printf("match: all %zu values within 1e-4 + 1e-4 * |expected| of onnxruntime's\n", n);
    return 0;
}

/*
 * every_function.c: calls every function stowage.h declares, on the bundle
 * named on the command line (one f32 input, one f32 output), and prints
 * what it sees; tests/header.rs compares that with the Rust runtime.
 * Including stow_bundle.h as well checks that the two headers share no
 * name. Exit status 0 when every call behaved as documented.
 */
#include "stowage.h"
#include "stow_bundle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define EXPECT(cond)                                                                    \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "every_function.c:%d: expected %s\n", __LINE__, #cond);     \
            failures++;                                                                 \
        }                                                                               \
    } while (0)

static void print_info(const char *side, size_t index, const stow_tensor_info *t) {
    printf("%s %zu %s dtype %u rank %u dims", side, index, t->name, (unsigned)t->dtype,
           (unsigned)t->rank);
    for (uint32_t i = 0; i < t->rank; i++) printf(" %llu", (unsigned long long)t->dims[i]);
    printf(" elements %llu bytes %zu\n", (unsigned long long)t->element_count, t->byte_size);
}

static void print_bytes(const char *what, const void *data, size_t n) {
    const unsigned char *p = data;
    printf("%s", what);
    for (size_t i = 0; i < n; i++) printf("%02x", p[i]);
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: every_function BUNDLE\n");
        return 2;
    }
    char msg[256];
    EXPECT(strcmp(stow_status_name(STOW_ERR_MISALIGNED), "STOW_ERR_MISALIGNED") == 0);
    EXPECT(strcmp(stow_status_name(9999), "STOW_ERR_UNKNOWN") == 0);

    /* Open from the path. */
    stow_bundle *mapped = NULL;
    EXPECT(stow_bundle_open(argv[1], &mapped, msg, sizeof msg) == STOW_OK);
    EXPECT(mapped != NULL && msg[0] == '\0');
    if (!mapped) return 1;
    EXPECT(stow_bundle_verify_weights(mapped) == STOW_OK);
    EXPECT(strcmp(stow_bundle_last_error(mapped), "") == 0);

    /* Open the same bytes in place. */
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 2;
    fseek(f, 0, SEEK_END);
    size_t len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *bytes = aligned_alloc(STOWAGE_BUNDLE_ALIGN, (len / 64 + 1) * 64);
    EXPECT(bytes && fread(bytes, 1, len, f) == len);
    fclose(f);
    stow_bundle *bundle = NULL;
    EXPECT(stow_bundle_open_bytes(bytes, len, &bundle, msg, sizeof msg) == STOW_OK);
    if (!bundle) return 1;
    /* One byte in: misaligned, refused, *out set to NULL. */
    stow_bundle *refused = mapped;
    EXPECT(stow_bundle_open_bytes(bytes + 1, len - 1, &refused, msg, sizeof msg) ==
           STOW_ERR_MISALIGNED);
    EXPECT(refused == NULL && strstr(msg, "aligned") != NULL);

    size_t arena_bytes = 0, arena_align = 0, n_in = 0, n_out = 0;
    EXPECT(stow_bundle_arena(bundle, &arena_bytes, &arena_align) == STOW_OK);
    printf("arena %zu align %zu\n", arena_bytes, arena_align);
    /* One pool, the arena, without --pool. */
    size_t n_pools = 0;
    stow_pool_info pool;
    EXPECT(stow_bundle_pool_count(bundle, &n_pools) == STOW_OK && n_pools == 1);
    EXPECT(stow_bundle_pool(bundle, 0, &pool) == STOW_OK);
    EXPECT(strcmp(pool.name, "arena") == 0 && pool.name_len == 5);
    EXPECT(pool.bytes == arena_bytes && pool.align == arena_align);
    EXPECT(stow_bundle_pool(bundle, 1, &pool) == STOW_ERR_NOT_FOUND);
    EXPECT(stow_bundle_input_count(bundle, &n_in) == STOW_OK);
    EXPECT(stow_bundle_output_count(bundle, &n_out) == STOW_OK);
    printf("inputs %zu outputs %zu\n", n_in, n_out);
    stow_tensor_info in, out;
    EXPECT(stow_bundle_input(bundle, 0, &in) == STOW_OK);
    EXPECT(stow_bundle_output(bundle, 0, &out) == STOW_OK);
    print_info("input", 0, &in);
    print_info("output", 0, &out);
    EXPECT(in.dtype == STOW_DTYPE_F32 && in.dtype == STOW_TYPE_F32); /* the same codes */
    EXPECT(stow_bundle_input(bundle, n_in, &in) == STOW_ERR_NOT_FOUND);
    EXPECT(strstr(stow_bundle_last_error(bundle), "out of range") != NULL);
    EXPECT(stow_bundle_input(bundle, 0, &in) == STOW_OK);
    size_t index = 99;
    EXPECT(stow_bundle_input_index(bundle, in.name, &index) == STOW_OK && index == 0);
    index = 99;
    EXPECT(stow_bundle_output_index(bundle, out.name, &index) == STOW_OK && index == 0);
    EXPECT(stow_bundle_output_index(bundle, "no such output", &index) == STOW_ERR_NOT_FOUND);

    /* The input: 0.01 * i, little-endian f32. */
    size_t count = in.byte_size / sizeof(float);
    float *input = malloc(in.byte_size);
    for (size_t i = 0; i < count; i++) input[i] = 0.01f * (float)i - 0.5f;

    /* A session that allocates, input set by name, output copied out. */
    stow_session *allocating = NULL;
    EXPECT(stow_session_create(mapped, 2, &allocating, msg, sizeof msg) == STOW_OK);
    if (!allocating) return 1;
    EXPECT(stow_session_set_input(allocating, in.name, input, in.byte_size) == STOW_OK);
    EXPECT(stow_session_copy_output(allocating, 0, input, in.byte_size) == STOW_ERR_NOT_RUN);
    EXPECT(stow_session_run(allocating) == STOW_OK);
    unsigned char *copied = malloc(out.byte_size);
    EXPECT(stow_session_copy_output(allocating, 0, copied, out.byte_size) == STOW_OK);
    EXPECT(stow_session_copy_output(allocating, 0, copied, out.byte_size - 1) ==
           STOW_ERR_TOO_SMALL);
    EXPECT(strstr(stow_session_last_error(allocating), "the buffer holds") != NULL);

    /* A session in the caller's arena, input by index and in place. */
    unsigned char *arena = aligned_alloc(arena_align, (arena_bytes / arena_align + 1) * arena_align);
    stow_session *session = NULL;
    EXPECT(stow_session_create_in(bundle, arena, arena_bytes, 1, &session, msg, sizeof msg) ==
           STOW_OK);
    if (!session) return 1;
    EXPECT(stow_session_set_input_at(session, 0, input, in.byte_size - 1) ==
           STOW_ERR_SIZE_MISMATCH);
    EXPECT(stow_session_set_input_at(session, 0, input, in.byte_size) == STOW_OK);
    void *slot = NULL;
    size_t slot_len = 0;
    EXPECT(stow_session_input_buffer(session, 0, &slot, &slot_len) == STOW_OK);
    EXPECT(slot_len == in.byte_size && (unsigned char *)slot >= arena &&
           (unsigned char *)slot + slot_len <= arena + arena_bytes);
    memcpy(slot, input, slot_len);
    EXPECT(stow_session_run(session) == STOW_OK);
    const void *data = NULL;
    size_t data_len = 0;
    EXPECT(stow_session_output(session, 0, &data, &data_len) == STOW_OK);
    EXPECT(data_len == out.byte_size && memcmp(data, copied, data_len) == 0);
    print_bytes("output bytes ", data, data_len);

    /* The same through the pools call: one buffer per pool (here one). */
    unsigned char *pool_arena =
        aligned_alloc(arena_align, (arena_bytes / arena_align + 1) * arena_align);
    stow_buffer buffers[2] = {{pool_arena, arena_bytes}, {pool_arena, arena_bytes}};
    stow_session *pooled = NULL;
    EXPECT(stow_session_create_in_pools(bundle, buffers, 2, 1, &pooled, msg, sizeof msg) ==
           STOW_ERR_POOL_COUNT);
    EXPECT(pooled == NULL && strstr(msg, "2 buffers given") != NULL);
    EXPECT(stow_session_create_in_pools(bundle, buffers, 1, 1, &pooled, msg, sizeof msg) ==
           STOW_OK);
    if (!pooled) return 1;
    EXPECT(stow_session_set_input_at(pooled, 0, input, in.byte_size) == STOW_OK);
    EXPECT(stow_session_run(pooled) == STOW_OK);
    EXPECT(stow_session_output(pooled, 0, &data, &data_len) == STOW_OK);
    EXPECT(data_len == out.byte_size && memcmp(data, copied, data_len) == 0);
    EXPECT(stow_session_free(pooled) == STOW_OK);
    free(pool_arena);

    /* Freed in any order: the session keeps its bundle. */
    EXPECT(stow_bundle_free(bundle) == STOW_OK);
    EXPECT(stow_session_run(session) == STOW_OK);
    EXPECT(stow_session_free(session) == STOW_OK);
    EXPECT(stow_session_free(allocating) == STOW_OK);
    EXPECT(stow_bundle_free(mapped) == STOW_OK);
    EXPECT(stow_bundle_free(NULL) == STOW_OK && stow_session_free(NULL) == STOW_OK);
    EXPECT(stow_session_run(NULL) == STOW_ERR_NULL_ARGUMENT);
    EXPECT(stow_session_last_error(NULL) != NULL && stow_bundle_last_error(NULL) != NULL);
    free(arena);
    free(bytes);
    free(input);
    free(copied);
    printf("failures %d\n", failures);
    return failures ? 1 : 0;
}

/*
 * A minimal C reader of bundles, using only include/stow_bundle.h: checks
 * the header, its checksum and every section's checksum, then prints the
 * tensor records with names and dimensions. tests/c_reader.rs compares its
 * output with the Rust reader's. Exit status 1 on a rejected file.
 */
#include "stow_bundle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *why) {
    fprintf(stderr, "rejected: %s\n", why);
    return 1;
}

static int in_file(uint64_t offset, uint64_t length, uint64_t file_len) {
    return offset <= file_len && length <= file_len - offset;
}

int main(int argc, char **argv) {
    if (argc != 2) return fail("usage: read_bundle FILE");
    FILE *f = fopen(argv[1], "rb");
    if (!f) return fail("cannot open");
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);

    stow_header h;
    if (n < STOW_HEADER_LEN) return fail("short");
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.magic, STOW_MAGIC, 8) != 0) return fail("magic");
    if (h.version != STOW_VERSION || (h.flags & ~STOW_KNOWN_FLAGS)) return fail("version");
    if (h.file_len != n || h.section_count > STOW_MAX_SECTIONS) return fail("length");
    size_t table_end = STOW_HEADER_LEN + STOW_SECTION_ENTRY_LEN * (size_t)h.section_count;
    if (table_end > n) return fail("table");
    uint32_t zero = 0;
    uint32_t crc = stow_crc32(0, buf, 28);
    crc = stow_crc32(crc, &zero, 4);
    crc = stow_crc32(crc, buf + 32, table_end - 32);
    if (crc != h.header_crc) return fail("header crc");
    printf("arena %llu %llu\n", (unsigned long long)h.arena_bytes,
           (unsigned long long)h.arena_align);

    stow_section_entry sec[STOW_SECTION_POOLS + 1];
    memset(sec, 0, sizeof sec);
    for (uint32_t i = 0; i < h.section_count; i++) {
        stow_section_entry e;
        memcpy(&e, buf + STOW_HEADER_LEN + STOW_SECTION_ENTRY_LEN * i, sizeof e);
        if (e.kind < 1 || e.kind > STOW_SECTION_POOLS) return fail("kind");
        if (!in_file(e.offset, e.length, n) || e.offset % e.align) return fail("section");
        if (stow_crc32(0, buf + e.offset, e.length) != e.crc) return fail("section crc");
        sec[e.kind] = e;
        printf("section %u %llu %llu\n", e.kind, (unsigned long long)e.offset,
               (unsigned long long)e.length);
    }
    const stow_section_entry *t = &sec[STOW_SECTION_TENSORS];
    const stow_section_entry *s = &sec[STOW_SECTION_STRINGS];
    const stow_section_entry *d = &sec[STOW_SECTION_SHAPES];
    const stow_section_entry *w = &sec[STOW_SECTION_WEIGHTS];
    if (t->length != (uint64_t)h.tensor_count * STOW_TENSOR_RECORD_LEN) return fail("records");
    /* Pool sizes: the arena alone, or the POOLS records. */
    uint64_t pool_bytes[STOW_MAX_POOLS] = {h.arena_bytes};
    uint32_t pools = 1;
    if (h.flags & STOW_FLAG_POOLS) {
        const stow_section_entry *p = &sec[STOW_SECTION_POOLS];
        if (p->length == 0 || p->length % STOW_POOL_RECORD_LEN ||
            p->length / STOW_POOL_RECORD_LEN > STOW_MAX_POOLS)
            return fail("pools");
        pools = (uint32_t)(p->length / STOW_POOL_RECORD_LEN);
        for (uint32_t i = 0; i < pools; i++) {
            stow_pool_record pr;
            memcpy(&pr, buf + p->offset + (uint64_t)i * STOW_POOL_RECORD_LEN, sizeof pr);
            pool_bytes[i] = pr.bytes;
            int name_len = 0;
            while (name_len < (int)STOW_POOL_NAME_LEN && pr.name[name_len]) name_len++;
            printf("pool %u %.*s %llu %llu\n", i, name_len,
                   (const char *)pr.name, (unsigned long long)pr.bytes, (unsigned long long)pr.align);
        }
    }
    for (uint32_t id = 0; id < h.tensor_count; id++) {
        stow_tensor_record r;
        memcpy(&r, buf + t->offset + (uint64_t)id * STOW_TENSOR_RECORD_LEN, sizeof r);
        if (r.id != id || stow_dtype_size(r.dtype) == 0) return fail("record");
        if (!in_file(r.name_offset, r.name_len, s->length)) return fail("name");
        if (!in_file((uint64_t)r.dims_index * 8, (uint64_t)r.rank * 8, d->length)) return fail("dims");
        uint32_t pool = STOW_REGION_POOL(r.region);
        if (pool >= pools) return fail("pool");
        uint64_t limit = STOW_REGION_CODE(r.region) == STOW_REGION_WEIGHTS ? w->length : pool_bytes[pool];
        /* An input written in bands has no bytes of its own to bound. */
        if (STOW_REGION_CODE(r.region) != STOW_REGION_ROWS && !in_file(r.offset, r.size, limit))
            return fail("out of region");
        printf("tensor %u kind %u dtype %u region %u offset %llu size %llu steps %u %u alias %u %u name %u:%.*s dims",
               r.id, r.kind, r.dtype, r.region, (unsigned long long)r.offset,
               (unsigned long long)r.size, r.first_step, r.last_step, r.alias_kind, r.alias_of,
               r.name_len, (int)r.name_len, (const char *)buf + s->offset + r.name_offset);
        uint64_t elements = 1;
        for (uint32_t k = 0; k < r.rank; k++) {
            uint64_t dim;
            memcpy(&dim, buf + d->offset + ((uint64_t)r.dims_index + k) * 8, 8);
            elements *= dim;
            printf(" %llu", (unsigned long long)dim);
        }
        printf("\n");
        if (elements * stow_dtype_size(r.dtype) != r.size) return fail("size");
        if (STOW_REGION_CODE(r.region) == STOW_REGION_WEIGHTS) {
            printf("weight %u crc %08x\n", r.id,
                   stow_crc32(0, buf + w->offset + r.offset, r.size));
        }
    }
    return 0;
}

/*
 * inspect.c: print a Stowage bundle's sections and tensor table with plain
 * C and crates/stow-bundle/include/stow_bundle.h alone (no protobuf), in
 * the columns `stow inspect` uses.
 *
 *     cc -std=c11 -O2 -I crates/stow-bundle/include examples/c/inspect.c -o inspect
 *     ./inspect model.stow
 *
 * It checks what it relies on before using any offset: magic, version,
 * flags, file length, header checksum, section kinds, bounds, alignment and
 * checksums (weights excepted: reading them all would make inspection cost
 * as much as the model), record ids, codes, names, dimensions and regions.
 * The metadata (graph inputs and outputs, operators, provenance) is
 * protobuf and not decoded here. Exit status 1 on a rejected file.
 * crates/stow-runtime/tests/c_inspect.rs checks the output against
 * `stow inspect`.
 */
#include "stow_bundle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *path, const char *why) {
    fprintf(stderr, "inspect: %s: rejected: %s\n", path, why);
    return 1;
}

/* offset + length <= limit, without overflow. */
static int within(uint64_t offset, uint64_t length, uint64_t limit) {
    return offset <= limit && length <= limit - offset;
}

static const char *section_name(uint32_t kind) {
    switch (kind) {
    case STOW_SECTION_TENSORS: return "tensors";
    case STOW_SECTION_STRINGS: return "strings";
    case STOW_SECTION_SHAPES: return "shapes";
    case STOW_SECTION_METADATA: return "metadata";
    case STOW_SECTION_WEIGHTS: return "weights";
    default: return "?";
    }
}

static const char *kind_name(uint32_t kind) {
    switch (kind) {
    case STOW_TENSOR_INPUT: return "input";
    case STOW_TENSOR_OUTPUT: return "output";
    case STOW_TENSOR_ACTIVATION: return "activation";
    case STOW_TENSOR_WEIGHT: return "weight";
    default: return NULL;
    }
}

static const char *dtype_name(uint32_t dtype) {
    static const char *names[] = {NULL, "f32", "f16", "f64", "i8", "i16", "i32",
                                  "i64", "u8", "u16", "u32", "u64", "bool"};
    return dtype >= 1 && dtype <= 12 ? names[dtype] : NULL;
}

/* Characters (not bytes) of a UTF-8 string: Rust pads by characters. */
static size_t chars(const uint8_t *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += (s[i] & 0xC0) != 0x80;
    return c;
}

/* Prints `text` (n bytes) left-aligned in `width` characters. */
static void pad_left(const uint8_t *text, size_t n, size_t width) {
    fwrite(text, 1, n, stdout);
    for (size_t c = chars(text, n); c < width; c++) putchar(' ');
}

typedef struct {
    const uint8_t *buf;
    stow_section_entry sec[STOW_SECTION_WEIGHTS + 1];
} bundle;

static stow_tensor_record record(const bundle *b, uint32_t id) {
    stow_tensor_record r;
    memcpy(&r, b->buf + b->sec[STOW_SECTION_TENSORS].offset + (uint64_t)id * STOW_TENSOR_RECORD_LEN,
           sizeof r);
    return r;
}

static const uint8_t *name_of(const bundle *b, const stow_tensor_record *r) {
    return b->buf + b->sec[STOW_SECTION_STRINGS].offset + r->name_offset;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: inspect BUNDLE.stow\n");
        return 2;
    }
    const char *path = argv[1];
    FILE *f = fopen(path, "rb");
    if (!f) return fail(path, "cannot open");
    if (fseek(f, 0, SEEK_END) != 0) return fail(path, "cannot seek");
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) return fail(path, "cannot size");
    uint64_t n = (uint64_t)size;
    uint8_t *buf = malloc(n ? (size_t)n : 1);
    if (!buf) return fail(path, "out of memory");
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) return fail(path, "short read");
    fclose(f);

    stow_header h;
    if (n < STOW_HEADER_LEN) return fail(path, "shorter than the header");
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.magic, STOW_MAGIC, 8) != 0) return fail(path, "bad magic");
    if (h.version != STOW_VERSION) return fail(path, "unsupported version");
    if (h.flags & ~STOW_KNOWN_FLAGS) return fail(path, "unknown flags");
    if (h.file_len != n) return fail(path, "file_len differs from the file's length");
    if (h.section_count > STOW_MAX_SECTIONS || h.tensor_count > STOW_MAX_ITEMS)
        return fail(path, "too many sections or tensors");
    uint64_t table_end = STOW_HEADER_LEN + (uint64_t)STOW_SECTION_ENTRY_LEN * h.section_count;
    if (table_end > n) return fail(path, "section table past the end");
    uint32_t zero = 0;
    uint32_t crc = stow_crc32(0, buf, 28);
    crc = stow_crc32(crc, &zero, 4);
    crc = stow_crc32(crc, buf + 32, (size_t)(table_end - 32));
    if (crc != h.header_crc) return fail(path, "header checksum");

    bundle b;
    b.buf = buf;
    memset(b.sec, 0, sizeof b.sec);
    int seen[STOW_SECTION_WEIGHTS + 1] = {0};
    printf("sections\n");
    for (uint32_t i = 0; i < h.section_count; i++) {
        stow_section_entry e;
        memcpy(&e, buf + STOW_HEADER_LEN + (uint64_t)STOW_SECTION_ENTRY_LEN * i, sizeof e);
        if (e.kind < 1 || e.kind > STOW_SECTION_WEIGHTS || seen[e.kind])
            return fail(path, "unknown or repeated section kind");
        if (e.align == 0 || e.offset % e.align || !within(e.offset, e.length, n) || e.offset < table_end)
            return fail(path, "section misaligned or out of bounds");
        if (e.kind != STOW_SECTION_WEIGHTS && stow_crc32(0, buf + e.offset, (size_t)e.length) != e.crc)
            return fail(path, "section checksum");
        seen[e.kind] = 1;
        b.sec[e.kind] = e;
        printf("  %-10s offset %10llu  length %10llu  align %u\n", section_name(e.kind),
               (unsigned long long)e.offset, (unsigned long long)e.length, e.align);
    }
    for (int k = 1; k <= STOW_SECTION_WEIGHTS; k++)
        if (!seen[k]) return fail(path, "missing section");
    const stow_section_entry *strings = &b.sec[STOW_SECTION_STRINGS];
    const stow_section_entry *shapes = &b.sec[STOW_SECTION_SHAPES];
    const stow_section_entry *weights = &b.sec[STOW_SECTION_WEIGHTS];
    if (b.sec[STOW_SECTION_TENSORS].length != (uint64_t)h.tensor_count * STOW_TENSOR_RECORD_LEN)
        return fail(path, "TENSORS length differs from tensor_count");

    /* Check every record before printing any row: the name column's width
     * depends on all names, and alias targets must exist. */
    size_t width = 0;
    for (uint32_t id = 0; id < h.tensor_count; id++) {
        stow_tensor_record r = record(&b, id);
        if (r.id != id || !kind_name(r.kind) || !dtype_name(r.dtype)) return fail(path, "bad record");
        if (!within(r.name_offset, r.name_len, strings->length)) return fail(path, "name out of STRINGS");
        if (!within((uint64_t)r.dims_index * 8, (uint64_t)r.rank * 8, shapes->length))
            return fail(path, "dimensions out of SHAPES");
        uint64_t limit = r.region == STOW_REGION_WEIGHTS ? weights->length : h.arena_bytes;
        if ((r.region == STOW_REGION_WEIGHTS) != (r.kind == STOW_TENSOR_WEIGHT))
            return fail(path, "region does not match kind");
        if (!within(r.offset, r.size, limit)) return fail(path, "tensor out of its region");
        if (r.alias_kind > STOW_ALIAS_CONCAT_SLICE) return fail(path, "bad alias kind");
        if (r.alias_kind != STOW_ALIAS_NONE && r.alias_of >= h.tensor_count)
            return fail(path, "alias of a missing tensor");
        if (r.name_len > width) width = r.name_len; /* bytes, as stow inspect measures */
    }
    if (width < 4) width = 4;
    if (width > 48) width = 48;

    printf("tensors  %u\n", h.tensor_count);
    printf("  %4s  ", "id");
    pad_left((const uint8_t *)"name", 4, width);
    printf("  %-10s  %-5s  %-18s  %12s  %10s  %5s  %5s  notes\n", "kind", "dtype", "shape", "offset",
           "size", "first", "last");
    for (uint32_t id = 0; id < h.tensor_count; id++) {
        stow_tensor_record r = record(&b, id);
        printf("  %4u  ", id);
        pad_left(name_of(&b, &r), r.name_len, width);
        printf("  %-10s  %-5s  ", kind_name(r.kind), dtype_name(r.dtype));
        /* The shape, "[d0,d1,...]", padded to 18 characters. */
        char shape[32 * 21 + 3];
        size_t len = 0;
        shape[len++] = '[';
        int truncated = 0;
        for (uint32_t k = 0; k < r.rank; k++) {
            uint64_t dim;
            memcpy(&dim, buf + shapes->offset + ((uint64_t)r.dims_index + k) * 8, 8);
            if (len + 22 >= sizeof shape) {
                truncated = 1;
                break;
            }
            len += (size_t)snprintf(shape + len, sizeof shape - len, "%s%llu", k ? "," : "",
                                    (unsigned long long)dim);
        }
        if (truncated) len += (size_t)snprintf(shape + len, sizeof shape - len, ",...");
        shape[len++] = ']';
        shape[len] = 0;
        printf("%-18s  ", shape);
        char offset[32];
        snprintf(offset, sizeof offset, "%s%llu", r.region == STOW_REGION_WEIGHTS ? "w+" : "",
                 (unsigned long long)r.offset);
        printf("%12s  %10llu  ", offset, (unsigned long long)r.size);
        if (r.region == STOW_REGION_WEIGHTS) {
            printf("%5s  %5s  ", "-", "-");
        } else {
            printf("%5u  %5u  ", r.first_step, r.last_step);
        }
        if (r.alias_kind != STOW_ALIAS_NONE) {
            stow_tensor_record o = record(&b, r.alias_of);
            const char *how = r.alias_kind == STOW_ALIAS_IN_PLACE ? "in place of "
                              : r.alias_kind == STOW_ALIAS_VIEW   ? "view of "
                                                                  : "slice of concat ";
            fputs(how, stdout);
            fwrite(name_of(&b, &o), 1, o.name_len, stdout);
        }
        putchar('\n');
    }
    free(buf);
    return 0;
}

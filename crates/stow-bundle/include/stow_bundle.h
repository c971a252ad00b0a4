/*
 * stow_bundle.h: the fixed-size structures of a Stowage bundle, format
 * version 1, for C readers that need no protobuf library.
 *
 * Specification: docs/FORMAT.md. Reference reader: the Rust crate
 * stow-bundle (BundleView::parse), which applies every validation rule the
 * specification lists; a C reader must apply them too before trusting any
 * offset (at least: magic, version, flags, file_len, header_crc, section
 * bounds, and each record's offset + size within its region).
 *
 * Every field is little-endian. Copy structures out of the file with
 * memcpy rather than casting pointers (the file may be mapped at any
 * address); on a big-endian host, byte-swap each field after copying.
 */
#ifndef STOW_BUNDLE_H
#define STOW_BUNDLE_H

#include <stddef.h>
#include <stdint.h>

#define STOW_MAGIC "STOWBNDL" /* 8 bytes, no terminating NUL in the file */
#define STOW_VERSION 1u
/* Header flag: the arena is split into memory pools listed in a POOLS
 * section; pool 0 is the header's arena (arena_bytes, arena_align). */
#define STOW_FLAG_POOLS 1u
/* Header flag: some operators (those with the attribute "stow.packed") read
 * their weight operand in their kernel's panel layout instead of row-major;
 * the weight's record (shape, size) is unchanged, its bytes are permuted
 * (docs/FORMAT.md, "Packed weights"). */
#define STOW_FLAG_PACKED 2u
/* Header flag: some matrix products (attribute "stow.packed_left") read
 * their weight packed as the left operand of the transposed product
 * (docs/FORMAT.md, "Packed weights"). */
#define STOW_FLAG_PACKED_LEFT 4u
/* Header flag, set with STOW_FLAG_PACKED: some packed weights are u8 or i8,
 * stored as the int8 products' panels (docs/FORMAT.md, "Packed weights"). */
#define STOW_FLAG_PACKED_INT8 8u
/* Header flag: a graph input has no bytes of its own (STOW_REGION_ROWS); the
 * caller writes it in bands of rows into the arena tensors that alias it as
 * STOW_ALIAS_INPUT_ROWS (docs/FORMAT.md, "Inputs written in bands"). */
#define STOW_FLAG_INPUT_ROWS 16u
#define STOW_KNOWN_FLAGS                                                              \
    (STOW_FLAG_POOLS | STOW_FLAG_PACKED | STOW_FLAG_PACKED_LEFT | STOW_FLAG_PACKED_INT8 | \
     STOW_FLAG_INPUT_ROWS)
#define STOW_HEADER_LEN 64u
#define STOW_SECTION_ENTRY_LEN 32u
#define STOW_TENSOR_RECORD_LEN 64u
#define STOW_WEIGHT_ALIGN 64u
#define STOW_MAX_SECTIONS 16u
#define STOW_MAX_ITEMS (1u << 24)
#define STOW_NO_ALIAS 0xFFFFFFFFu
#define STOW_POOL_RECORD_LEN 32u
#define STOW_MAX_POOLS 8u
#define STOW_POOL_NAME_LEN 16u
/* A record's region field: the region code in the low 16 bits, the
 * tensor's pool (0 without STOW_FLAG_POOLS, and for weights) above. */
#define STOW_REGION_CODE(region) ((region) & 0xFFFFu)
#define STOW_REGION_POOL(region) ((region) >> 16)

/* Section kinds and their required alignment. */
enum stow_section_kind {
    STOW_SECTION_TENSORS = 1,  /* stow_tensor_record x tensor_count, align 8 */
    STOW_SECTION_STRINGS = 2,  /* tensor names, UTF-8, concatenated, align 8 */
    STOW_SECTION_SHAPES = 3,   /* dimensions, u64 each, concatenated, align 8 */
    STOW_SECTION_METADATA = 4, /* protobuf BundleMeta (proto/stow_bundle.proto), align 8 */
    STOW_SECTION_WEIGHTS = 5,  /* weight bytes, each at a multiple of 64, align 64 */
    STOW_SECTION_POOLS = 6     /* stow_pool_record x pools, align 8; iff STOW_FLAG_POOLS */
};

enum stow_tensor_kind {
    STOW_TENSOR_INPUT = 1,
    STOW_TENSOR_OUTPUT = 2,
    STOW_TENSOR_ACTIVATION = 3,
    STOW_TENSOR_WEIGHT = 4
};

enum stow_dtype {
    STOW_DTYPE_F32 = 1,
    STOW_DTYPE_F16 = 2,
    STOW_DTYPE_F64 = 3,
    STOW_DTYPE_I8 = 4,
    STOW_DTYPE_I16 = 5,
    STOW_DTYPE_I32 = 6,
    STOW_DTYPE_I64 = 7,
    STOW_DTYPE_U8 = 8,
    STOW_DTYPE_U16 = 9,
    STOW_DTYPE_U32 = 10,
    STOW_DTYPE_U64 = 11,
    STOW_DTYPE_BOOL = 12
};

enum stow_region { STOW_REGION_ARENA = 1, STOW_REGION_WEIGHTS = 2, STOW_REGION_ROWS = 3 };

enum stow_alias_kind {
    STOW_ALIAS_NONE = 0,
    STOW_ALIAS_IN_PLACE = 1,
    STOW_ALIAS_VIEW = 2,
    STOW_ALIAS_CONCAT_SLICE = 3,
    STOW_ALIAS_DEPTHWISE_IN_PLACE = 4,
    STOW_ALIAS_INPUT_ROWS = 5
};

/* File offset 0. */
typedef struct stow_header {
    uint8_t magic[8];       /*  0: STOW_MAGIC */
    uint32_t version;       /*  8: STOW_VERSION */
    uint32_t flags;         /* 12: no bit outside STOW_KNOWN_FLAGS */
    uint64_t file_len;      /* 16: total file length */
    uint32_t section_count; /* 24: entries after the header (<= 16) */
    uint32_t header_crc;    /* 28: CRC-32 of header (this field as 0) + section table */
    uint64_t arena_bytes;   /* 32: activation arena size */
    uint64_t arena_align;   /* 40: arena base alignment, a power of two */
    uint32_t tensor_count;  /* 48: tensor records (<= 2^24) */
    uint32_t op_count;      /* 52: operators in the metadata (<= 2^24) */
    uint8_t reserved[8];    /* 56: zero */
} stow_header;

/* File offset 64 + 32 * i. */
typedef struct stow_section_entry {
    uint32_t kind;     /*  0: enum stow_section_kind */
    uint32_t align;    /*  4: 8, or 64 for WEIGHTS; offset is a multiple */
    uint64_t offset;   /*  8: first byte in the file */
    uint64_t length;   /* 16: bytes */
    uint32_t crc;      /* 24: CRC-32 of the section's bytes */
    uint32_t reserved; /* 28: zero */
} stow_section_entry;

/* TENSORS section offset + 64 * id. */
typedef struct stow_tensor_record {
    uint32_t id;          /*  0: equals the record index */
    uint32_t kind;        /*  4: enum stow_tensor_kind */
    uint32_t dtype;       /*  8: enum stow_dtype */
    uint32_t region;      /* 12: enum stow_region (STOW_REGION_CODE); WEIGHTS iff kind is
                                 WEIGHT; pool index in the high 16 bits (STOW_REGION_POOL) */
    uint64_t offset;      /* 16: in the tensor's pool (the arena), or in the WEIGHTS
                                 section (64-aligned) */
    uint64_t size;        /* 24: bytes = product(dims) * stow_dtype_size(dtype) */
    uint32_t first_step;  /* 32: first step needing the bytes */
    uint32_t last_step;   /* 36: last step needing them (inclusive) */
    uint32_t alias_kind;  /* 40: enum stow_alias_kind */
    uint32_t alias_of;    /* 44: tensor id, STOW_NO_ALIAS when alias_kind is 0 */
    uint32_t name_offset; /* 48: byte offset of the name in STRINGS */
    uint32_t name_len;    /* 52: name length (UTF-8, no NUL) */
    uint32_t dims_index;  /* 56: first dimension in SHAPES, in u64 units */
    uint32_t rank;        /* 60: number of dimensions */
} stow_tensor_record;

/* POOLS section offset + 32 * i (only with STOW_FLAG_POOLS): memory pool i,
 * fastest first. A runtime gives each pool a buffer of `bytes` bytes
 * aligned to `align`; a tensor of pool p lives at buffer_p + offset. */
typedef struct stow_pool_record {
    uint64_t bytes;                   /*  0: size of the pool's buffer */
    uint64_t align;                   /*  8: alignment of its first byte, a power of two */
    uint8_t name[STOW_POOL_NAME_LEN]; /* 16: UTF-8, 1 to 16 bytes, zero-padded, unique */
} stow_pool_record;

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(stow_pool_record) == STOW_POOL_RECORD_LEN, "pool layout");
_Static_assert(sizeof(stow_header) == STOW_HEADER_LEN, "header layout");
_Static_assert(offsetof(stow_header, header_crc) == 28, "header layout");
_Static_assert(offsetof(stow_header, arena_bytes) == 32, "header layout");
_Static_assert(offsetof(stow_header, reserved) == 56, "header layout");
_Static_assert(sizeof(stow_section_entry) == STOW_SECTION_ENTRY_LEN, "entry layout");
_Static_assert(offsetof(stow_section_entry, crc) == 24, "entry layout");
_Static_assert(sizeof(stow_tensor_record) == STOW_TENSOR_RECORD_LEN, "record layout");
_Static_assert(offsetof(stow_tensor_record, first_step) == 32, "record layout");
_Static_assert(offsetof(stow_tensor_record, rank) == 60, "record layout");
#endif

/* Bytes per element, 0 for an unknown code. */
static inline uint32_t stow_dtype_size(uint32_t dtype) {
    switch (dtype) {
    case STOW_DTYPE_I8: case STOW_DTYPE_U8: case STOW_DTYPE_BOOL: return 1;
    case STOW_DTYPE_F16: case STOW_DTYPE_I16: case STOW_DTYPE_U16: return 2;
    case STOW_DTYPE_F32: case STOW_DTYPE_I32: case STOW_DTYPE_U32: return 4;
    case STOW_DTYPE_F64: case STOW_DTYPE_I64: case STOW_DTYPE_U64: return 8;
    default: return 0;
    }
}

/*
 * CRC-32 (IEEE: reflected polynomial 0xEDB88320, initial value and final
 * XOR 0xFFFFFFFF). Start with crc = 0, feed pieces in order:
 * stow_crc32(0, "123456789", 9) == 0xCBF43926.
 */
static inline uint32_t stow_crc32(uint32_t crc, const void *data, size_t len) {
    const uint8_t *p = (const uint8_t *)data;
    crc = ~crc;
    while (len--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++) {
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
        }
    }
    return ~crc;
}

#endif /* STOW_BUNDLE_H */

/* GGUF reading: every count, length, type, shape and offset is checked
 * against the bytes actually present before anything is allocated or
 * dereferenced, so a hostile or truncated file fails with one line that
 * names the file, the key or tensor, and the bad value. */
#include "format/gguf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/hash.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader copies little-endian arrays as they are: it needs a little-endian host"
#endif

/* The smallest possible encodings, used to refuse absurd counts before any
 * allocation: a key/value pair is a length (8), one key byte, a type (4)
 * and at least one value byte; a tensor info is a length (8), one name
 * byte, n_dims (4), one dimension (8), a type (4) and an offset (8). */
#define MIN_KV_BYTES 14u
#define MIN_TENSOR_INFO_BYTES 33u
#define HEADER_BYTES 24u

/* ---- small public helpers ---- */

const char *gguf_vtype_name(gguf_vtype t)
{
    static const char *const names[GGUF_VTYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64",
    };
    return (unsigned)t < GGUF_VTYPE_COUNT ? names[t] : "unknown";
}

size_t gguf_vtype_size(gguf_vtype t)
{
    switch (t) {
    case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL: return 1;
    case GGUF_UINT16: case GGUF_INT16: return 2;
    case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32: return 4;
    case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

int64_t gguf_tensor_nelements(const gguf_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->n_dims; i++)
        n *= t->ne[i];
    return n;
}

/* ---- the cursor ---- */

typedef struct {
    const uint8_t *p;
    uint64_t size, pos;
    const char *what; /* file name for messages */
    char ctx[160];    /* "key 'x'" / "tensor 'y'" / "header" */
    memra_err *err;
} reader;

/* A name quoted for an error line: printable ASCII kept, everything else
 * as \xNN, long names cut, so a hostile key cannot garble the message. */
static void quote_name(char *dst, size_t cap, const uint8_t *s, uint64_t len)
{
    size_t o = 0;
    for (uint64_t i = 0; i < len; i++) {
        if (o + 8 >= cap) {
            snprintf(dst + o, cap - o, "...");
            return;
        }
        uint8_t c = s[i];
        if (c >= 0x20 && c < 0x7F && c != '\\' && c != '\'')
            dst[o++] = (char)c;
        else
            o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
    }
    dst[o] = '\0';
}

static void set_ctx(reader *r, const char *kind, const uint8_t *name, uint64_t len)
{
    char q[120];
    quote_name(q, sizeof q, name, len);
    snprintf(r->ctx, sizeof r->ctx, "%s '%s'", kind, q);
}

__attribute__((format(printf, 2, 3))) static int rfail(reader *r, const char *fmt, ...)
{
    char msg[MEMRA_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->ctx[0])
        return memra_fail(r->err, "%s: %s: %s", r->what, r->ctx, msg);
    return memra_fail(r->err, "%s: %s", r->what, msg);
}

static uint64_t left(const reader *r) { return r->size - r->pos; }

static int need(reader *r, uint64_t n, const char *field)
{
    if (left(r) < n)
        return rfail(r, "truncated: %s at offset %" PRIu64 " needs %" PRIu64
                        " bytes, only %" PRIu64 " left",
                     field, r->pos, n, left(r));
    return 0;
}

static int rd_u32(reader *r, uint32_t *out, const char *field)
{
    if (need(r, 4, field))
        return -1;
    memcpy(out, r->p + r->pos, 4);
    r->pos += 4;
    return 0;
}

static int rd_u64(reader *r, uint64_t *out, const char *field)
{
    if (need(r, 8, field))
        return -1;
    memcpy(out, r->p + r->pos, 8);
    r->pos += 8;
    return 0;
}

/* A string's length and a pointer to its bytes in the buffer. */
static int rd_str_raw(reader *r, const uint8_t **s, uint64_t *len, const char *field)
{
    uint64_t at = r->pos;
    if (rd_u64(r, len, field))
        return -1;
    if (*len > left(r))
        return rfail(r, "%s at offset %" PRIu64 " has length %" PRIu64
                        ", past end of file (%" PRIu64 " bytes left)",
                     field, at, *len, left(r));
    *s = r->p + r->pos;
    r->pos += *len;
    return 0;
}

/* ---- name sets: open addressing over (pointer, length), O(1) per name ---- */

typedef struct {
    const uint8_t **ptr;
    uint64_t *len;
    uint64_t *idx;
    uint64_t cap; /* power of two, at least twice the names inserted */
} name_set;

static void set_init(name_set *set, uint64_t n)
{
    uint64_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    set->cap = cap;
    set->ptr = xcalloc(cap, sizeof *set->ptr);
    set->len = xcalloc(cap, sizeof *set->len);
    set->idx = xcalloc(cap, sizeof *set->idx);
}

static void set_free(name_set *set)
{
    free(set->ptr);
    free(set->len);
    free(set->idx);
    memset(set, 0, sizeof *set);
}

/* Insert; returns the index of an equal name already present, or -1. */
static int64_t set_insert(name_set *set, const uint8_t *s, uint64_t n, uint64_t idx)
{
    uint64_t mask = set->cap - 1;
    for (uint64_t h = hash_fnv1a64(s, (size_t)n) & mask;; h = (h + 1) & mask) {
        if (!set->ptr[h]) {
            set->ptr[h] = s;
            set->len[h] = n;
            set->idx[h] = idx;
            return -1;
        }
        if (set->len[h] == n && memcmp(set->ptr[h], s, n) == 0)
            return (int64_t)set->idx[h];
    }
}

/* ---- metadata ---- */

static int check_bool(reader *r, uint8_t b)
{
    if (b > 1)
        return rfail(r, "bool value %u at offset %" PRIu64 " is not 0 or 1", b, r->pos - 1);
    return 0;
}

static int rd_scalar(reader *r, gguf_vtype t, gguf_value *v)
{
    size_t sz = gguf_vtype_size(t);
    if (need(r, sz, "value"))
        return -1;
    const uint8_t *p = r->p + r->pos;
    r->pos += sz;
    switch (t) {
    case GGUF_UINT8: v->v.u = p[0]; break;
    case GGUF_BOOL: v->v.u = p[0]; return check_bool(r, p[0]);
    case GGUF_INT8: v->v.i = (int8_t)p[0]; break;
    case GGUF_UINT16: { uint16_t x; memcpy(&x, p, 2); v->v.u = x; break; }
    case GGUF_INT16: { int16_t x; memcpy(&x, p, 2); v->v.i = x; break; }
    case GGUF_UINT32: { uint32_t x; memcpy(&x, p, 4); v->v.u = x; break; }
    case GGUF_INT32: { int32_t x; memcpy(&x, p, 4); v->v.i = x; break; }
    case GGUF_UINT64: memcpy(&v->v.u, p, 8); break;
    case GGUF_INT64: memcpy(&v->v.i, p, 8); break;
    case GGUF_FLOAT32: { float x; memcpy(&x, p, 4); v->v.f = x; break; }
    case GGUF_FLOAT64: memcpy(&v->v.f, p, 8); break;
    default: MEMRA_ASSERT(0);
    }
    return 0;
}

static int rd_string_value(reader *r, arena *mem, gguf_str *out, const char *field)
{
    const uint8_t *s;
    uint64_t len;
    if (rd_str_raw(r, &s, &len, field))
        return -1;
    out->len = len;
    out->str = arena_strndup(mem, (const char *)s, (size_t)len);
    return 0;
}

/* Arrays become native arrays in the arena. The element count is checked
 * against the bytes left before the allocation, so the allocation is at
 * most a small multiple of the file size. */
static int rd_array(reader *r, arena *mem, gguf_value *v)
{
    uint32_t et;
    uint64_t n;
    if (rd_u32(r, &et, "array element type") || rd_u64(r, &n, "array length"))
        return -1;
    if (et == GGUF_ARRAY)
        return rfail(r, "nested arrays are not supported (array of arrays at offset %" PRIu64 ")",
                     r->pos - 12);
    if (et >= GGUF_VTYPE_COUNT)
        return rfail(r, "unknown array element type %u", et);
    v->v.arr.elem_type = (gguf_vtype)et;
    v->v.arr.n = n;
    if (et == GGUF_STRING) {
        if (n > left(r) / 8)
            return rfail(r, "array of %" PRIu64 " strings cannot fit in the %" PRIu64
                            " bytes left in the file",
                         n, left(r));
        gguf_str *a = arena_alloc(mem, (size_t)(n ? n : 1) * sizeof *a);
        for (uint64_t i = 0; i < n; i++)
            if (rd_string_value(r, mem, &a[i], "array string"))
                return -1;
        v->v.arr.data = a;
        return 0;
    }
    size_t esz = gguf_vtype_size((gguf_vtype)et);
    if (n > left(r) / esz)
        return rfail(r, "array of %" PRIu64 " %s elements needs more than the %" PRIu64
                        " bytes left in the file",
                     n, gguf_vtype_name((gguf_vtype)et), left(r));
    size_t nbytes = (size_t)(n * esz);
    uint8_t *a = arena_alloc(mem, nbytes ? nbytes : 1);
    memcpy(a, r->p + r->pos, nbytes);
    if (et == GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (a[i] > 1)
                return rfail(r, "bool array element %" PRIu64 " is %u, not 0 or 1", i, a[i]);
    r->pos += nbytes;
    v->v.arr.data = a;
    return 0;
}

static int rd_kv(reader *r, arena *mem, gguf_kv *kv, name_set *keys, uint64_t index)
{
    const uint8_t *key;
    uint64_t klen;
    snprintf(r->ctx, sizeof r->ctx, "key %" PRIu64, index);
    if (rd_str_raw(r, &key, &klen, "key"))
        return -1;
    if (klen == 0)
        return rfail(r, "empty key");
    set_ctx(r, "key", key, klen);
    if (memchr(key, 0, klen))
        return rfail(r, "key contains a NUL byte");
    if (!utf8_valid(key, klen))
        return rfail(r, "key is not valid UTF-8");
    int64_t dup = set_insert(keys, key, klen, index);
    if (dup >= 0)
        return rfail(r, "duplicate key (pairs %" PRId64 " and %" PRIu64 ")", dup, index);
    kv->key = arena_strndup(mem, (const char *)key, (size_t)klen);
    uint32_t t;
    if (rd_u32(r, &t, "value type"))
        return -1;
    if (t >= GGUF_VTYPE_COUNT)
        return rfail(r, "unknown value type %u", t);
    kv->value.type = (gguf_vtype)t;
    if (t == GGUF_STRING)
        return rd_string_value(r, mem, &kv->value.v.s, "string value");
    if (t == GGUF_ARRAY)
        return rd_array(r, mem, &kv->value);
    return rd_scalar(r, (gguf_vtype)t, &kv->value);
}

static int read_alignment(reader *r, gguf_file *f)
{
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    if (!kv)
        return 0;
    snprintf(r->ctx, sizeof r->ctx, "key 'general.alignment'");
    if (kv->value.type != GGUF_UINT32)
        return rfail(r, "has type %s, expected u32", gguf_vtype_name(kv->value.type));
    uint64_t a = kv->value.v.u;
    if (a == 0 || (a & (a - 1)) != 0)
        return rfail(r, "alignment %" PRIu64 " is not a power of two", a);
    f->alignment = (uint32_t)a;
    return 0;
}

/* ---- tensor infos ---- */

static int rd_tensor_info(reader *r, arena *mem, gguf_tensor *t, name_set *names, uint64_t index,
                          uint32_t alignment)
{
    const uint8_t *name;
    uint64_t nlen;
    snprintf(r->ctx, sizeof r->ctx, "tensor %" PRIu64, index);
    if (rd_str_raw(r, &name, &nlen, "tensor name"))
        return -1;
    if (nlen == 0)
        return rfail(r, "empty tensor name");
    set_ctx(r, "tensor", name, nlen);
    if (memchr(name, 0, nlen))
        return rfail(r, "name contains a NUL byte");
    int64_t dup = set_insert(names, name, nlen, index);
    if (dup >= 0)
        return rfail(r, "duplicate tensor name (tensors %" PRId64 " and %" PRIu64 ")", dup, index);
    t->name = arena_strndup(mem, (const char *)name, (size_t)nlen);

    uint32_t n_dims;
    if (rd_u32(r, &n_dims, "n_dims"))
        return -1;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return rfail(r, "n_dims %u is not in 1..%d", n_dims, GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    for (int i = 0; i < GGUF_MAX_DIMS; i++)
        t->ne[i] = 1;
    for (uint32_t i = 0; i < n_dims; i++) {
        uint64_t ne;
        if (rd_u64(r, &ne, "dimension"))
            return -1;
        if (ne > (uint64_t)INT64_MAX)
            return rfail(r, "ne[%u] = %" PRIu64 " is out of range", i, ne);
        t->ne[i] = (int64_t)ne;
    }
    uint32_t type;
    if (rd_u32(r, &type, "tensor type"))
        return -1;
    if (!dtype_in_gguf((int)type))
        return rfail(r, "unknown tensor type %u", type);
    t->type = (dtype)type;
    const dtype_info *info = dtype_get((int)type);
    if (t->ne[0] % info->block_size != 0)
        return rfail(r, "ne[0] = %" PRId64 " is not a multiple of the %s block size %d", t->ne[0],
                     info->name, info->block_size);
    /* Elements and bytes must both fit in int64: rows * row bytes. */
    int64_t row_bytes = dtype_row_bytes(t->type, t->ne[0]);
    int64_t rows = 1, elems = t->ne[0];
    for (int i = 1; i < GGUF_MAX_DIMS; i++) {
        int64_t ne = t->ne[i];
        if (ne != 0 && (rows > INT64_MAX / ne || elems > INT64_MAX / ne))
            return rfail(r, "shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                            "] overflows the element count",
                         t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
        rows *= ne;
        elems *= ne;
    }
    if (row_bytes < 0 || (rows != 0 && row_bytes > INT64_MAX / rows))
        return rfail(r, "shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                        "] of type %s overflows the byte size",
                     t->ne[0], t->ne[1], t->ne[2], t->ne[3], info->name);
    t->nbytes = (uint64_t)(row_bytes * rows);
    if (rd_u64(r, &t->offset, "tensor offset"))
        return -1;
    if (t->offset % alignment != 0)
        return rfail(r, "offset %" PRIu64 " is not a multiple of the alignment %u", t->offset,
                     alignment);
    return 0;
}

static int cmp_by_offset(const void *a, const void *b, void *ctx)
{
    const gguf_tensor *t = ctx;
    uint64_t x = t[*(const uint64_t *)a].offset, y = t[*(const uint64_t *)b].offset;
    return x < y ? -1 : x > y;
}

/* Bounds first (so every tensor's range is known to be in the file), then
 * overlaps: sorted by offset, each tensor must start at or after the
 * furthest end seen so far. Empty tensors occupy nothing. */
static int check_tensor_data(reader *r, gguf_file *f)
{
    uint64_t data_bytes = r->size - f->data_offset;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        set_ctx(r, "tensor", (const uint8_t *)t->name, strlen(t->name));
        if (t->offset > data_bytes || t->nbytes > data_bytes - t->offset) {
            uint64_t begin = f->data_offset + t->offset;
            uint64_t end = begin + t->nbytes;
            if (begin < t->offset || end < begin)
                return rfail(r, "data offset %" PRIu64 " + %" PRIu64
                                " bytes runs past end of file (%" PRIu64 " bytes)",
                             t->offset, t->nbytes, r->size);
            return rfail(r, "data [%" PRIu64 ", %" PRIu64 ") runs past end of file (%" PRIu64
                            " bytes)",
                         begin, end, r->size);
        }
        t->data = r->p + f->data_offset + t->offset;
    }
    if (f->n_tensors < 2)
        return 0;
    uint64_t *order = xmalloc(f->n_tensors * sizeof *order);
    for (uint64_t i = 0; i < f->n_tensors; i++)
        order[i] = i;
    qsort_r(order, f->n_tensors, sizeof *order, cmp_by_offset, f->tensors);
    int rc = 0;
    uint64_t far_end = 0, far_who = 0;
    int have = 0;
    for (uint64_t k = 0; k < f->n_tensors; k++) {
        const gguf_tensor *t = &f->tensors[order[k]];
        if (t->nbytes == 0)
            continue;
        if (have && t->offset < far_end) {
            const gguf_tensor *o = &f->tensors[far_who];
            set_ctx(r, "tensor", (const uint8_t *)t->name, strlen(t->name));
            char q[120];
            quote_name(q, sizeof q, (const uint8_t *)o->name, strlen(o->name));
            rc = rfail(r, "data [%" PRIu64 ", %" PRIu64 ") overlaps tensor '%s' [%" PRIu64
                          ", %" PRIu64 ")",
                       f->data_offset + t->offset, f->data_offset + t->offset + t->nbytes, q,
                       f->data_offset + o->offset, f->data_offset + o->offset + o->nbytes);
            break;
        }
        if (!have || t->offset + t->nbytes > far_end) {
            far_end = t->offset + t->nbytes;
            far_who = order[k];
            have = 1;
        }
    }
    free(order);
    return rc;
}

/* ---- open ---- */

static int parse(gguf_file *f, reader *r)
{
    if (r->size < 4)
        return rfail(r, "truncated: %" PRIu64 " bytes, too small for a GGUF header", r->size);
    if (memcmp(r->p, "GGUF", 4) != 0)
        return rfail(r, "not a GGUF file (magic %02x %02x %02x %02x, expected \"GGUF\")", r->p[0],
                     r->p[1], r->p[2], r->p[3]);
    r->pos = 4;
    snprintf(r->ctx, sizeof r->ctx, "header");
    if (rd_u32(r, &f->version, "version"))
        return -1;
    if (f->version == 1)
        return rfail(r, "GGUF version 1 is not supported (only versions 2 and 3); re-convert the "
                        "file with a current tool");
    if (f->version == 0x02000000u || f->version == 0x03000000u)
        return rfail(r, "big-endian GGUF (version %u byte-swapped) is not supported",
                     f->version >> 24);
    if (f->version != 2 && f->version != 3)
        return rfail(r, "unsupported GGUF version %u (only versions 2 and 3)", f->version);
    if (rd_u64(r, &f->n_tensors, "n_tensors") || rd_u64(r, &f->n_kv, "n_kv"))
        return -1;
    uint64_t rest = left(r);
    if (f->n_kv > rest / MIN_KV_BYTES)
        return rfail(r, "n_kv %" PRIu64 " cannot fit in the %" PRIu64 " bytes after the header",
                     f->n_kv, rest);
    if (f->n_tensors > rest / MIN_TENSOR_INFO_BYTES ||
        f->n_tensors * MIN_TENSOR_INFO_BYTES > rest - f->n_kv * MIN_KV_BYTES)
        return rfail(r, "n_tensors %" PRIu64 " (with n_kv %" PRIu64 ") cannot fit in the %" PRIu64
                        " bytes after the header",
                     f->n_tensors, f->n_kv, rest);

    name_set set;
    set_init(&set, f->n_kv);
    f->kv = arena_alloc(&f->mem, (size_t)(f->n_kv ? f->n_kv : 1) * sizeof *f->kv);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        if (rd_kv(r, &f->mem, &f->kv[i], &set, i)) {
            set_free(&set);
            return -1;
        }
    }
    set_free(&set);
    if (read_alignment(r, f))
        return -1;

    set_init(&set, f->n_tensors);
    f->tensors = arena_alloc(&f->mem, (size_t)(f->n_tensors ? f->n_tensors : 1) * sizeof *f->tensors);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        if (rd_tensor_info(r, &f->mem, &f->tensors[i], &set, i, f->alignment)) {
            set_free(&set);
            return -1;
        }
    }
    /* Keep the name index for gguf_find_tensor (slot -> tensor index + 1). */
    f->tensor_index_cap = set.cap;
    f->tensor_index = xcalloc(set.cap, sizeof *f->tensor_index);
    for (uint64_t h = 0; h < set.cap; h++)
        if (set.ptr[h])
            f->tensor_index[h] = set.idx[h] + 1;
    set_free(&set);

    r->ctx[0] = '\0';
    uint64_t pad = (f->alignment - r->pos % f->alignment) % f->alignment;
    f->data_offset = r->pos + pad;
    if (f->data_offset > r->size) {
        /* A file without tensors may end right after its metadata. */
        if (f->n_tensors > 0)
            return rfail(r, "data section at %" PRIu64 " starts past end of file (%" PRIu64
                            " bytes)",
                         f->data_offset, r->size);
        f->data_offset = r->size;
    }
    return check_tensor_data(r, f);
}

int gguf_open_buffer(const uint8_t *data, size_t size, const char *what, gguf_file *out,
                     memra_err *err)
{
    memset(out, 0, sizeof *out);
    arena_init(&out->mem, 1 << 16);
    out->map.data = data;
    out->map.size = size;
    out->map.path = xstrdup(what);
    reader r = {.p = data, .size = size, .what = what, .err = err};
    if (parse(out, &r) != 0) {
        gguf_close(out);
        return -1;
    }
    return 0;
}

int gguf_open(const char *path, gguf_file *out, memra_err *err)
{
    mapped_file map;
    if (map_file(path, &map, err) != 0) {
        memset(out, 0, sizeof *out);
        return -1;
    }
    if (gguf_open_buffer(map.data, map.size, path, out, err) != 0) {
        unmap_file(&map);
        return -1;
    }
    free(out->map.path);
    out->map = map;
    out->owns_map = 1;
    return 0;
}

void gguf_close(gguf_file *f)
{
    if (f->owns_map) {
        unmap_file(&f->map);
    } else {
        free(f->map.path);
    }
    arena_free(&f->mem);
    free(f->tensor_index);
    memset(f, 0, sizeof *f);
}

/* ---- lookups ---- */

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key)
{
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (strcmp(f->kv[i].key, key) == 0)
            return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name)
{
    if (!f->tensor_index)
        return NULL;
    size_t n = strlen(name);
    uint64_t mask = f->tensor_index_cap - 1;
    for (uint64_t h = hash_fnv1a64(name, n) & mask;; h = (h + 1) & mask) {
        uint64_t slot = f->tensor_index[h];
        if (slot == 0)
            return NULL;
        const gguf_tensor *t = &f->tensors[slot - 1];
        if (strcmp(t->name, name) == 0)
            return t;
    }
}

static const char *file_name(const gguf_file *f) { return f->map.path ? f->map.path : "gguf"; }

static const gguf_kv *find_or_fail(const gguf_file *f, const char *key, memra_err *err)
{
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv)
        memra_fail(err, "%s: key '%s' not found", file_name(f), key);
    return kv;
}

int gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, memra_err *err)
{
    const gguf_kv *kv = find_or_fail(f, key, err);
    if (!kv)
        return -1;
    switch (kv->value.type) {
    case GGUF_UINT8: case GGUF_UINT16: case GGUF_UINT32: case GGUF_UINT64:
        *out = kv->value.v.u;
        return 0;
    case GGUF_INT8: case GGUF_INT16: case GGUF_INT32: case GGUF_INT64:
        if (kv->value.v.i < 0)
            return memra_fail(err, "%s: key '%s' is negative (%" PRId64 ")", file_name(f), key,
                              kv->value.v.i);
        *out = (uint64_t)kv->value.v.i;
        return 0;
    default:
        return memra_fail(err, "%s: key '%s' has type %s, expected an integer", file_name(f), key,
                          gguf_vtype_name(kv->value.type));
    }
}

int gguf_get_f64(const gguf_file *f, const char *key, double *out, memra_err *err)
{
    const gguf_kv *kv = find_or_fail(f, key, err);
    if (!kv)
        return -1;
    switch (kv->value.type) {
    case GGUF_FLOAT32: case GGUF_FLOAT64:
        *out = kv->value.v.f;
        return 0;
    case GGUF_UINT8: case GGUF_UINT16: case GGUF_UINT32: case GGUF_UINT64:
        *out = (double)kv->value.v.u;
        return 0;
    case GGUF_INT8: case GGUF_INT16: case GGUF_INT32: case GGUF_INT64:
        *out = (double)kv->value.v.i;
        return 0;
    default:
        return memra_fail(err, "%s: key '%s' has type %s, expected a number", file_name(f), key,
                          gguf_vtype_name(kv->value.type));
    }
}

int gguf_get_str(const gguf_file *f, const char *key, const char **out, memra_err *err)
{
    const gguf_kv *kv = find_or_fail(f, key, err);
    if (!kv)
        return -1;
    if (kv->value.type != GGUF_STRING)
        return memra_fail(err, "%s: key '%s' has type %s, expected str", file_name(f), key,
                          gguf_vtype_name(kv->value.type));
    *out = kv->value.v.s.str;
    return 0;
}

/* GGUF writing: v3, metadata deep-copied into the writer, tensor data
 * streamed from the caller's buffers straight to the file (never gathered
 * in memory), written to path.tmp and renamed so a failure leaves nothing
 * half-written at `path`. */
#include "format/gguf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF writer stores native arrays as they are: it needs a little-endian host"
#endif

typedef struct {
    const char *key;
    gguf_value value;
} wkv;

typedef struct {
    const char *name;
    dtype type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    const void *data;
    uint64_t nbytes;
    uint64_t offset; /* assigned at write time */
} wtensor;

struct gguf_writer {
    arena mem;
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    int failed;
    memra_err first_err; /* a setter's failure, reported by gguf_writer_write */
};

gguf_writer *gguf_writer_new(void)
{
    gguf_writer *w = xcalloc(1, sizeof *w);
    arena_init(&w->mem, 1 << 14);
    return w;
}

void gguf_writer_free(gguf_writer *w)
{
    if (!w)
        return;
    arena_free(&w->mem);
    free(w->kv);
    free(w->t);
    free(w);
}

__attribute__((format(printf, 2, 3))) static void defer_fail(gguf_writer *w, const char *fmt, ...)
{
    if (w->failed)
        return;
    w->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    memra_failv(&w->first_err, fmt, ap);
    va_end(ap);
}

/* Deep copy of a value into the writer's arena. */
static int copy_value(gguf_writer *w, const char *key, const gguf_value *v, gguf_value *out)
{
    *out = *v;
    if ((unsigned)v->type >= GGUF_VTYPE_COUNT) {
        defer_fail(w, "key '%s': unknown value type %d", key, (int)v->type);
        return -1;
    }
    if (v->type == GGUF_STRING) {
        out->v.s.len = v->v.s.str ? v->v.s.len : 0;
        out->v.s.str = arena_strndup(&w->mem, v->v.s.str ? v->v.s.str : "", (size_t)out->v.s.len);
        return 0;
    }
    if (v->type != GGUF_ARRAY)
        return 0;
    gguf_vtype et = v->v.arr.elem_type;
    uint64_t n = v->v.arr.n;
    if (et == GGUF_ARRAY) {
        defer_fail(w, "key '%s': nested arrays are not supported", key);
        return -1;
    }
    if ((unsigned)et >= GGUF_VTYPE_COUNT) {
        defer_fail(w, "key '%s': unknown array element type %d", key, (int)et);
        return -1;
    }
    if (et == GGUF_STRING) {
        const gguf_str *src = v->v.arr.data;
        gguf_str *dst = arena_alloc(&w->mem, (size_t)(n ? n : 1) * sizeof *dst);
        for (uint64_t i = 0; i < n; i++) {
            dst[i].len = src[i].str ? src[i].len : 0;
            dst[i].str = arena_strndup(&w->mem, src[i].str ? src[i].str : "", (size_t)dst[i].len);
        }
        out->v.arr.data = dst;
        return 0;
    }
    size_t nbytes = (size_t)n * gguf_vtype_size(et);
    void *dst = arena_alloc(&w->mem, nbytes ? nbytes : 1);
    if (nbytes)
        memcpy(dst, v->v.arr.data, nbytes);
    if (et == GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            ((uint8_t *)dst)[i] = ((uint8_t *)dst)[i] != 0;
    out->v.arr.data = dst;
    return 0;
}

void gguf_writer_set(gguf_writer *w, const char *key, const gguf_value *v)
{
    size_t klen = strlen(key);
    if (klen == 0) {
        defer_fail(w, "empty metadata key");
        return;
    }
    if (!utf8_valid((const uint8_t *)key, klen)) {
        defer_fail(w, "metadata key '%s' is not valid UTF-8", key);
        return;
    }
    gguf_value copy;
    if (copy_value(w, key, v, &copy) != 0)
        return;
    if (copy.type == GGUF_BOOL)
        copy.v.u = copy.v.u != 0;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            w->kv[i].value = copy; /* the old copy stays in the arena until free */
            return;
        }
    }
    if (w->n_kv == w->cap_kv) {
        w->cap_kv = w->cap_kv ? 2 * w->cap_kv : 32;
        w->kv = xrealloc(w->kv, w->cap_kv * sizeof *w->kv);
    }
    w->kv[w->n_kv].key = arena_strdup(&w->mem, key);
    w->kv[w->n_kv].value = copy;
    w->n_kv++;
}

void gguf_writer_set_str(gguf_writer *w, const char *key, const char *s)
{
    gguf_value v = {.type = GGUF_STRING, .v.s = {.len = strlen(s), .str = s}};
    gguf_writer_set(w, key, &v);
}

void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t x)
{
    gguf_value v = {.type = GGUF_UINT32, .v.u = x};
    gguf_writer_set(w, key, &v);
}

void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t x)
{
    gguf_value v = {.type = GGUF_INT32, .v.i = x};
    gguf_writer_set(w, key, &v);
}

void gguf_writer_set_f32(gguf_writer *w, const char *key, float x)
{
    gguf_value v = {.type = GGUF_FLOAT32, .v.f = x};
    gguf_writer_set(w, key, &v);
}

void gguf_writer_set_bool(gguf_writer *w, const char *key, int x)
{
    gguf_value v = {.type = GGUF_BOOL, .v.u = x != 0};
    gguf_writer_set(w, key, &v);
}

void gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_vtype elem_type, uint64_t n,
                         const void *data)
{
    gguf_value v = {.type = GGUF_ARRAY, .v.arr = {.elem_type = elem_type, .n = n, .data = data}};
    if (elem_type != GGUF_STRING) {
        gguf_writer_set(w, key, &v);
        return;
    }
    /* C strings to gguf_str[]; gguf_writer_set copies the bytes. */
    const char *const *s = data;
    gguf_str *tmp = xmalloc((size_t)(n ? n : 1) * sizeof *tmp);
    for (uint64_t i = 0; i < n; i++) {
        tmp[i].len = strlen(s[i]);
        tmp[i].str = s[i];
    }
    v.v.arr.data = tmp;
    gguf_writer_set(w, key, &v);
    free(tmp);
}

void gguf_writer_copy_kv(gguf_writer *w, const gguf_file *f)
{
    for (uint64_t i = 0; i < f->n_kv; i++)
        gguf_writer_set(w, f->kv[i].key, &f->kv[i].value);
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, dtype type, int n_dims,
                           const int64_t *ne, const void *data, uint64_t nbytes, memra_err *err)
{
    size_t nlen = strlen(name);
    if (nlen == 0)
        return memra_fail(err, "tensor with an empty name");
    if (nlen > GGUF_WRITER_MAX_NAME)
        return memra_fail(err, "tensor '%s': name is %zu bytes, GGUF readers allow at most %d",
                          name, nlen, GGUF_WRITER_MAX_NAME);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return memra_fail(err, "tensor '%s': added twice", name);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return memra_fail(err, "tensor '%s': n_dims %d is not in 1..%d", name, n_dims,
                          GGUF_MAX_DIMS);
    const dtype_info *info = dtype_in_gguf((int)type) ? dtype_get((int)type) : NULL;
    if (!info)
        return memra_fail(err, "tensor '%s': type %d cannot be stored in GGUF", name, (int)type);
    wtensor t = {.name = NULL, .type = type, .n_dims = n_dims, .data = data, .nbytes = nbytes};
    for (int i = 0; i < GGUF_MAX_DIMS; i++)
        t.ne[i] = i < n_dims ? ne[i] : 1;
    for (int i = 0; i < n_dims; i++)
        if (ne[i] < 0)
            return memra_fail(err, "tensor '%s': ne[%d] = %" PRId64 " is negative", name, i, ne[i]);
    if (t.ne[0] % info->block_size != 0)
        return memra_fail(err, "tensor '%s': ne[0] = %" PRId64
                               " is not a multiple of the %s block size %d",
                          name, t.ne[0], info->name, info->block_size);
    int64_t row = dtype_row_bytes(type, t.ne[0]), rows = 1;
    for (int i = 1; i < GGUF_MAX_DIMS; i++) {
        if (t.ne[i] != 0 && rows > INT64_MAX / t.ne[i])
            return memra_fail(err, "tensor '%s': shape overflows", name);
        rows *= t.ne[i];
    }
    if (row < 0 || (rows != 0 && row > INT64_MAX / rows))
        return memra_fail(err, "tensor '%s': shape overflows", name);
    if ((uint64_t)(row * rows) != nbytes)
        return memra_fail(err, "tensor '%s': %" PRIu64 " bytes given, a %s tensor of this shape "
                               "has %" PRId64,
                          name, nbytes, info->name, row * rows);
    if (nbytes > 0 && !data)
        return memra_fail(err, "tensor '%s': no data", name);
    t.name = arena_strdup(&w->mem, name);
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? 2 * w->cap_t : 64;
        w->t = xrealloc(w->t, w->cap_t * sizeof *w->t);
    }
    w->t[w->n_t++] = t;
    return 0;
}

/* ---- the byte stream ---- */

typedef struct {
    FILE *f;
    uint64_t pos;
    int ok;
    int saved_errno;
} sink;

static void put(sink *s, const void *p, size_t n)
{
    if (!s->ok || n == 0)
        return;
    if (fwrite(p, 1, n, s->f) != n) {
        s->ok = 0;
        s->saved_errno = errno;
        return;
    }
    s->pos += n;
}

static void put_u32(sink *s, uint32_t x) { put(s, &x, 4); }
static void put_u64(sink *s, uint64_t x) { put(s, &x, 8); }

static void put_str(sink *s, const char *p, uint64_t len)
{
    put_u64(s, len);
    put(s, p, (size_t)len);
}

static void put_pad(sink *s, uint32_t alignment)
{
    static const uint8_t zeros[256];
    uint64_t pad = (alignment - s->pos % alignment) % alignment;
    while (pad > 0) {
        size_t n = pad < sizeof zeros ? (size_t)pad : sizeof zeros;
        put(s, zeros, n);
        pad -= n;
    }
}

static void put_scalar(sink *s, gguf_vtype t, const gguf_value *v)
{
    switch (t) {
    case GGUF_UINT8: case GGUF_BOOL: { uint8_t x = (uint8_t)v->v.u; put(s, &x, 1); break; }
    case GGUF_INT8: { int8_t x = (int8_t)v->v.i; put(s, &x, 1); break; }
    case GGUF_UINT16: { uint16_t x = (uint16_t)v->v.u; put(s, &x, 2); break; }
    case GGUF_INT16: { int16_t x = (int16_t)v->v.i; put(s, &x, 2); break; }
    case GGUF_UINT32: put_u32(s, (uint32_t)v->v.u); break;
    case GGUF_INT32: { int32_t x = (int32_t)v->v.i; put(s, &x, 4); break; }
    case GGUF_UINT64: put_u64(s, v->v.u); break;
    case GGUF_INT64: put(s, &v->v.i, 8); break;
    case GGUF_FLOAT32: { float x = (float)v->v.f; put(s, &x, 4); break; }
    case GGUF_FLOAT64: put(s, &v->v.f, 8); break;
    default: MEMRA_ASSERT(0);
    }
}

static void put_value(sink *s, const gguf_value *v)
{
    put_u32(s, (uint32_t)v->type);
    if (v->type == GGUF_STRING) {
        put_str(s, v->v.s.str, v->v.s.len);
    } else if (v->type == GGUF_ARRAY) {
        gguf_vtype et = v->v.arr.elem_type;
        put_u32(s, (uint32_t)et);
        put_u64(s, v->v.arr.n);
        if (et == GGUF_STRING) {
            const gguf_str *a = v->v.arr.data;
            for (uint64_t i = 0; i < v->v.arr.n; i++)
                put_str(s, a[i].str, a[i].len);
        } else {
            put(s, v->v.arr.data, (size_t)(v->v.arr.n * gguf_vtype_size(et)));
        }
    } else {
        put_scalar(s, v->type, v);
    }
}

static int writer_alignment(const gguf_writer *w, uint32_t *out, memra_err *err)
{
    *out = GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment") != 0)
            continue;
        const gguf_value *v = &w->kv[i].value;
        if (v->type != GGUF_UINT32)
            return memra_fail(err, "key 'general.alignment' has type %s, expected u32",
                              gguf_vtype_name(v->type));
        if (v->v.u == 0 || (v->v.u & (v->v.u - 1)) != 0)
            return memra_fail(err, "key 'general.alignment': %" PRIu64 " is not a power of two",
                              v->v.u);
        *out = (uint32_t)v->v.u;
    }
    return 0;
}

int gguf_writer_write(gguf_writer *w, const char *path, memra_err *err)
{
    if (w->failed)
        return memra_fail(err, "%s: %s", path, w->first_err.msg);
    uint32_t alignment;
    if (writer_alignment(w, &alignment, err) != 0)
        return memra_wrap(err, "%s", path);

    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        off += w->t[i].nbytes;
        off += (alignment - off % alignment) % alignment;
    }

    size_t tlen = strlen(path) + 5;
    char *tmp = xmalloc(tlen);
    snprintf(tmp, tlen, "%s.tmp", path);
    sink s = {.f = fopen(tmp, "wb"), .ok = 1};
    if (!s.f) {
        int e = errno;
        free(tmp);
        return memra_fail(err, "%s: cannot create: %s", path, strerror(e));
    }
    put(&s, "GGUF", 4);
    put_u32(&s, 3);
    put_u64(&s, w->n_t);
    put_u64(&s, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_str(&s, w->kv[i].key, strlen(w->kv[i].key));
        put_value(&s, &w->kv[i].value);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(&s, t->name, strlen(t->name));
        put_u32(&s, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++)
            put_u64(&s, (uint64_t)t->ne[d]);
        put_u32(&s, (uint32_t)t->type);
        put_u64(&s, t->offset);
    }
    put_pad(&s, alignment);
    uint64_t data_start = s.pos;
    for (size_t i = 0; i < w->n_t && s.ok; i++) {
        MEMRA_ASSERT(s.pos - data_start == w->t[i].offset);
        put(&s, w->t[i].data, (size_t)w->t[i].nbytes);
        put_pad(&s, alignment);
    }
    if (s.ok && fflush(s.f) != 0) {
        s.ok = 0;
        s.saved_errno = errno;
    }
    if (fclose(s.f) != 0 && s.ok) {
        s.ok = 0;
        s.saved_errno = errno;
    }
    if (s.ok && rename(tmp, path) != 0) {
        s.ok = 0;
        s.saved_errno = errno;
    }
    if (!s.ok) {
        unlink(tmp);
        free(tmp);
        return memra_fail(err, "%s: write failed: %s", path, strerror(s.saved_errno));
    }
    free(tmp);
    return 0;
}

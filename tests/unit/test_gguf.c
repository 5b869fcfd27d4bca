/* GGUF: round trips through our writer and reader, real files written by
 * other tools, and a corpus of malformed files that must each fail with a
 * specific message (run under ASan+UBSan in build/san). */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/mapfile.h"
#include "format/gguf.h"
#include "test.h"

static void tmp_path(char *buf, size_t cap, const char *name)
{
    mkdir(test_tmp_dir(), 0755);
    snprintf(buf, cap, "%s/%s", test_tmp_dir(), name);
}

/* ---- a byte builder for hand-made (mostly broken) files ---- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bytes;

static void b_raw(bytes *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void b_u8(bytes *b, uint8_t x) { b_raw(b, &x, 1); }
static void b_u32(bytes *b, uint32_t x) { b_raw(b, &x, 4); }
static void b_u64(bytes *b, uint64_t x) { b_raw(b, &x, 8); }
static void b_str(bytes *b, const char *s)
{
    b_u64(b, strlen(s));
    b_raw(b, s, strlen(s));
}
static void b_pad(bytes *b, size_t a)
{
    while (b->n % a)
        b_u8(b, 0);
}
static void b_header(bytes *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    b->n = 0;
    b_raw(b, "GGUF", 4);
    b_u32(b, version);
    b_u64(b, n_tensors);
    b_u64(b, n_kv);
}
static void b_kv_u32(bytes *b, const char *key, uint32_t v)
{
    b_str(b, key);
    b_u32(b, GGUF_UINT32);
    b_u32(b, v);
}
/* A tensor info with up to 4 dims. */
static void b_tensor(bytes *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                     uint64_t offset)
{
    b_str(b, name);
    b_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        b_u64(b, ne[i]);
    b_u32(b, type);
    b_u64(b, offset);
}
/* Pads to 32 and appends n zero data bytes. */
static void b_data(bytes *b, size_t n)
{
    b_pad(b, 32);
    for (size_t i = 0; i < n; i++)
        b_u8(b, (uint8_t)i);
}

/* Open a buffer that must fail; the message must name the file and contain
 * `want`. */
static void expect_fail(const bytes *b, const char *want, int line)
{
    gguf_file f;
    memra_err err = {{0}};
    /* A copy of exactly n bytes so ASan sees any read past the end. */
    uint8_t *copy = xmalloc(b->n ? b->n : 1);
    memcpy(copy, b->p, b->n);
    int rc = gguf_open_buffer(copy, b->n, "bad.gguf", &f, &err);
    CHECK_MSG(rc == -1, "line %d: expected failure with '%s'", line, want);
    if (rc == 0) {
        gguf_close(&f);
    } else {
        CHECK_MSG(strncmp(err.msg, "bad.gguf: ", 10) == 0, "line %d: '%s'", line, err.msg);
        CHECK_MSG(strstr(err.msg, want) != NULL, "line %d: '%s' lacks '%s'", line, err.msg, want);
    }
    gguf_close(&f); /* must be safe after a failed open */
    free(copy);
}
#define EXPECT_FAIL(b, want) expect_fail((b), (want), __LINE__)

/* ---- round trip ---- */

static const uint8_t u8s[] = {0, 1, 255};
static const int8_t i8s[] = {-128, 0, 127};
static const uint16_t u16s[] = {0, 65535, 12345};
static const int16_t i16s[] = {-32768, 32767, -1};
static const uint32_t u32s[] = {0, 4294967295u, 7};
static const int32_t i32s[] = {INT32_MIN, INT32_MAX, -5};
static const float f32s[] = {1.5f, -0.0f, 3.25e-8f};
static const uint8_t bools[] = {1, 0, 1, 1};
static const uint64_t u64s[] = {0, UINT64_MAX, 1ull << 40};
static const int64_t i64s[] = {INT64_MIN, INT64_MAX, -3};
static const double f64s[] = {3.141592653589793, -1e300, 5e-324};
static const char *const strs[] = {"alpha", "", "ünïcödé ✓"};

static float t_f32[6] = {1, 2, 3, 4, 5, 6};
static uint8_t t_q8[2 * 34], t_q4k[144], t_f16[10], t_i32[28], t_bf16[6], t_last[32];

static void fill(uint8_t *p, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(seed + 31 * i);
}

/* Writes every metadata type and several tensors; returns 0 on success. */
static int write_full(const char *path, uint32_t alignment, memra_err *err)
{
    gguf_writer *w = gguf_writer_new();
    if (alignment)
        gguf_writer_set_u32(w, "general.alignment", alignment);
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_value v;
    v = (gguf_value){.type = GGUF_UINT8, .v.u = 200};
    gguf_writer_set(w, "s.u8", &v);
    v = (gguf_value){.type = GGUF_INT8, .v.i = -100};
    gguf_writer_set(w, "s.i8", &v);
    v = (gguf_value){.type = GGUF_UINT16, .v.u = 60000};
    gguf_writer_set(w, "s.u16", &v);
    v = (gguf_value){.type = GGUF_INT16, .v.i = -30000};
    gguf_writer_set(w, "s.i16", &v);
    gguf_writer_set_u32(w, "s.u32", 4000000000u);
    gguf_writer_set_i32(w, "s.i32", -2000000000);
    gguf_writer_set_f32(w, "s.f32", 0.1f);
    gguf_writer_set_bool(w, "s.bool", 1);
    v = (gguf_value){.type = GGUF_UINT64, .v.u = UINT64_MAX - 1};
    gguf_writer_set(w, "s.u64", &v);
    v = (gguf_value){.type = GGUF_INT64, .v.i = INT64_MIN + 1};
    gguf_writer_set(w, "s.i64", &v);
    v = (gguf_value){.type = GGUF_FLOAT64, .v.f = 0.1};
    gguf_writer_set(w, "s.f64", &v);
    /* A string with an embedded NUL keeps its full length. */
    v = (gguf_value){.type = GGUF_STRING, .v.s = {.len = 5, .str = "ab\0cd"}};
    gguf_writer_set(w, "s.str_nul", &v);
    gguf_writer_set_arr(w, "a.u8", GGUF_UINT8, 3, u8s);
    gguf_writer_set_arr(w, "a.i8", GGUF_INT8, 3, i8s);
    gguf_writer_set_arr(w, "a.u16", GGUF_UINT16, 3, u16s);
    gguf_writer_set_arr(w, "a.i16", GGUF_INT16, 3, i16s);
    gguf_writer_set_arr(w, "a.u32", GGUF_UINT32, 3, u32s);
    gguf_writer_set_arr(w, "a.i32", GGUF_INT32, 3, i32s);
    gguf_writer_set_arr(w, "a.f32", GGUF_FLOAT32, 3, f32s);
    gguf_writer_set_arr(w, "a.bool", GGUF_BOOL, 4, bools);
    gguf_writer_set_arr(w, "a.u64", GGUF_UINT64, 3, u64s);
    gguf_writer_set_arr(w, "a.i64", GGUF_INT64, 3, i64s);
    gguf_writer_set_arr(w, "a.f64", GGUF_FLOAT64, 3, f64s);
    gguf_writer_set_arr(w, "a.str", GGUF_STRING, 3, strs);
    gguf_writer_set_arr(w, "a.empty", GGUF_INT32, 0, NULL);
    /* Replaced: the second value wins, the key keeps its first position. */
    gguf_writer_set_str(w, "general.name", "first");
    gguf_writer_set_str(w, "general.name", "second");

    fill(t_q8, sizeof t_q8, 1);
    fill(t_q4k, sizeof t_q4k, 2);
    fill(t_f16, sizeof t_f16, 3);
    fill(t_i32, sizeof t_i32, 4);
    fill(t_bf16, sizeof t_bf16, 5);
    fill(t_last, sizeof t_last, 6);
    int rc = 0;
    rc |= gguf_writer_add_tensor(w, "t.f32", DT_F32, 2, (int64_t[]){3, 2}, t_f32, 24, err);
    rc |= gguf_writer_add_tensor(w, "t.q8_0", DT_Q8_0, 2, (int64_t[]){32, 2}, t_q8, 68, err);
    rc |= gguf_writer_add_tensor(w, "t.f16", DT_F16, 1, (int64_t[]){5}, t_f16, 10, err);
    rc |= gguf_writer_add_tensor(w, "t.q4_k", DT_Q4_K, 1, (int64_t[]){256}, t_q4k, 144, err);
    rc |= gguf_writer_add_tensor(w, "t.empty", DT_F32, 2, (int64_t[]){0, 4}, NULL, 0, err);
    rc |= gguf_writer_add_tensor(w, "t.i32", DT_I32, 3, (int64_t[]){7, 1, 1}, t_i32, 28, err);
    rc |= gguf_writer_add_tensor(w, "t.bf16", DT_BF16, 4, (int64_t[]){1, 1, 1, 3}, t_bf16, 6, err);
    /* 32 bytes last, so the file ends exactly at the end of tensor data. */
    rc |= gguf_writer_add_tensor(w, "t.last", DT_I8, 1, (int64_t[]){32}, t_last, 32, err);
    if (rc == 0)
        rc = gguf_writer_write(w, path, err);
    gguf_writer_free(w);
    return rc;
}

#define ARR_EQ(kv, et, want)                                                                   \
    ((kv) && (kv)->value.type == GGUF_ARRAY && (kv)->value.v.arr.elem_type == (et) &&          \
     (kv)->value.v.arr.n == MEMRA_ARRAY_LEN(want) &&                                           \
     memcmp((kv)->value.v.arr.data, (want), sizeof(want)) == 0)

static void check_full(const gguf_file *f, uint32_t alignment)
{
    CHECK(f->version == 3);
    CHECK(f->alignment == alignment);
    CHECK(f->n_kv == (alignment != 32 ? 28u : 27u));
    CHECK(f->n_tensors == 8);
    const gguf_kv *kv;
    kv = gguf_find_kv(f, "s.u8");
    CHECK(kv && kv->value.type == GGUF_UINT8 && kv->value.v.u == 200);
    kv = gguf_find_kv(f, "s.i8");
    CHECK(kv && kv->value.type == GGUF_INT8 && kv->value.v.i == -100);
    kv = gguf_find_kv(f, "s.u16");
    CHECK(kv && kv->value.type == GGUF_UINT16 && kv->value.v.u == 60000);
    kv = gguf_find_kv(f, "s.i16");
    CHECK(kv && kv->value.type == GGUF_INT16 && kv->value.v.i == -30000);
    kv = gguf_find_kv(f, "s.u32");
    CHECK(kv && kv->value.type == GGUF_UINT32 && kv->value.v.u == 4000000000u);
    kv = gguf_find_kv(f, "s.i32");
    CHECK(kv && kv->value.type == GGUF_INT32 && kv->value.v.i == -2000000000);
    kv = gguf_find_kv(f, "s.f32");
    CHECK(kv && kv->value.type == GGUF_FLOAT32 && kv->value.v.f == (double)0.1f);
    kv = gguf_find_kv(f, "s.bool");
    CHECK(kv && kv->value.type == GGUF_BOOL && kv->value.v.u == 1);
    kv = gguf_find_kv(f, "s.u64");
    CHECK(kv && kv->value.type == GGUF_UINT64 && kv->value.v.u == UINT64_MAX - 1);
    kv = gguf_find_kv(f, "s.i64");
    CHECK(kv && kv->value.type == GGUF_INT64 && kv->value.v.i == INT64_MIN + 1);
    kv = gguf_find_kv(f, "s.f64");
    CHECK(kv && kv->value.type == GGUF_FLOAT64 && kv->value.v.f == 0.1);
    kv = gguf_find_kv(f, "s.str_nul");
    CHECK(kv && kv->value.type == GGUF_STRING && kv->value.v.s.len == 5 &&
          memcmp(kv->value.v.s.str, "ab\0cd", 6) == 0);
    CHECK(ARR_EQ(gguf_find_kv(f, "a.u8"), GGUF_UINT8, u8s));
    CHECK(ARR_EQ(gguf_find_kv(f, "a.i8"), GGUF_INT8, i8s));
    CHECK(ARR_EQ(gguf_find_kv(f, "a.u16"), GGUF_UINT16, u16s));
    CHECK(ARR_EQ(gguf_find_kv(f, "a.i16"), GGUF_INT16, i16s));
    CHECK(ARR_EQ(gguf_find_kv(f, "a.u32"), GGUF_UINT32, u32s));
    CHECK(ARR_EQ(gguf_find_kv(f, "a.i32"), GGUF_INT32, i32s));
    CHECK(ARR_EQ(gguf_find_kv(f, "a.f32"), GGUF_FLOAT32, f32s));
    CHECK(ARR_EQ(gguf_find_kv(f, "a.bool"), GGUF_BOOL, bools));
    CHECK(ARR_EQ(gguf_find_kv(f, "a.u64"), GGUF_UINT64, u64s));
    CHECK(ARR_EQ(gguf_find_kv(f, "a.i64"), GGUF_INT64, i64s));
    CHECK(ARR_EQ(gguf_find_kv(f, "a.f64"), GGUF_FLOAT64, f64s));
    kv = gguf_find_kv(f, "a.str");
    CHECK(kv && kv->value.type == GGUF_ARRAY && kv->value.v.arr.elem_type == GGUF_STRING &&
          kv->value.v.arr.n == 3);
    if (kv && kv->value.v.arr.n == 3) {
        const gguf_str *s = kv->value.v.arr.data;
        for (int i = 0; i < 3; i++)
            CHECK(s[i].len == strlen(strs[i]) && strcmp(s[i].str, strs[i]) == 0);
    }
    kv = gguf_find_kv(f, "a.empty");
    CHECK(kv && kv->value.type == GGUF_ARRAY && kv->value.v.arr.elem_type == GGUF_INT32 &&
          kv->value.v.arr.n == 0);
    const char *s = NULL;
    memra_err err;
    CHECK(gguf_get_str(f, "general.name", &s, &err) == 0 && strcmp(s, "second") == 0);
    CHECK(gguf_get_str(f, "general.architecture", &s, &err) == 0 && strcmp(s, "llama") == 0);
    /* Metadata order is the order of first setting. */
    CHECK(strcmp(f->kv[alignment != 32 ? 1 : 0].key, "general.architecture") == 0);
    CHECK(strcmp(f->kv[f->n_kv - 1].key, "general.name") == 0);

    struct {
        const char *name;
        dtype type;
        int n_dims;
        int64_t ne[4];
        const void *data;
        uint64_t nbytes;
    } want[] = {
        {"t.f32", DT_F32, 2, {3, 2, 1, 1}, t_f32, 24},
        {"t.q8_0", DT_Q8_0, 2, {32, 2, 1, 1}, t_q8, 68},
        {"t.f16", DT_F16, 1, {5, 1, 1, 1}, t_f16, 10},
        {"t.q4_k", DT_Q4_K, 1, {256, 1, 1, 1}, t_q4k, 144},
        {"t.empty", DT_F32, 2, {0, 4, 1, 1}, NULL, 0},
        {"t.i32", DT_I32, 3, {7, 1, 1, 1}, t_i32, 28},
        {"t.bf16", DT_BF16, 4, {1, 1, 1, 3}, t_bf16, 6},
        {"t.last", DT_I8, 1, {32, 1, 1, 1}, t_last, 32},
    };
    CHECK(f->data_offset % alignment == 0);
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(want) && i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        CHECK_MSG(strcmp(t->name, want[i].name) == 0, "%s", t->name);
        CHECK(gguf_find_tensor(f, want[i].name) == t);
        CHECK(t->type == want[i].type && t->n_dims == want[i].n_dims);
        CHECK(memcmp(t->ne, want[i].ne, sizeof t->ne) == 0);
        CHECK(t->nbytes == want[i].nbytes);
        CHECK(t->offset % alignment == 0);
        CHECK((uint64_t)(t->data - f->map.data) == f->data_offset + t->offset);
        if (want[i].nbytes)
            CHECK(memcmp(t->data, want[i].data, want[i].nbytes) == 0);
    }
    CHECK(gguf_tensor_nelements(&f->tensors[0]) == 6);
    CHECK(gguf_tensor_nelements(&f->tensors[4]) == 0);
    CHECK(gguf_find_tensor(f, "t.missing") == NULL);
    /* Everything between tensors is zero padding, and the file ends at the
     * end of the last (32-byte) tensor. */
    const gguf_tensor *last = &f->tensors[7];
    uint64_t file_end = f->data_offset + last->offset + last->nbytes;
    CHECK(file_end <= f->map.size && f->map.size % alignment == 0 && f->map.size - file_end < alignment);
    for (uint64_t p = file_end; p < f->map.size; p++)
        CHECK(f->map.data[p] == 0);
    for (uint64_t i = 0; i + 1 < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        uint64_t end = f->data_offset + t->offset + t->nbytes;
        uint64_t next = f->data_offset + f->tensors[i + 1].offset;
        CHECK(next >= end && next - end < alignment);
        for (uint64_t p = end; p < next; p++)
            CHECK(f->map.data[p] == 0);
    }
}

static void test_roundtrip(void)
{
    char path[512];
    tmp_path(path, sizeof path, "full.gguf");
    memra_err err = {{0}};
    CHECK_MSG(write_full(path, 0, &err) == 0, "%s", err.msg);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0);
    gguf_file f;
    int rc = gguf_open(path, &f, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc == 0) {
        check_full(&f, 32);
        gguf_close(&f);
    }
}

static void test_alignment_64(void)
{
    char path[512];
    tmp_path(path, sizeof path, "align64.gguf");
    memra_err err = {{0}};
    CHECK_MSG(write_full(path, 64, &err) == 0, "%s", err.msg);
    gguf_file f;
    int rc = gguf_open(path, &f, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc == 0) {
        uint64_t a = 0;
        CHECK(gguf_get_u64(&f, "general.alignment", &a, &err) == 0 && a == 64);
        check_full(&f, 64);
        /* Some tensor really lands on a 64 boundary that is not 32-aligned
         * in the default layout: t.q8_0 follows 24 bytes of t.f32. */
        CHECK(f.tensors[1].offset == 64);
        gguf_close(&f);
    }
}

static void test_getters(void)
{
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_i32(w, "neg", -3);
    gguf_writer_set_i32(w, "pos", 17);
    gguf_writer_set_f32(w, "eps", 1e-5f);
    gguf_writer_set_str(w, "name", "x");
    char path[512];
    tmp_path(path, sizeof path, "getters.gguf");
    memra_err err = {{0}};
    CHECK(gguf_writer_write(w, path, &err) == 0);
    gguf_writer_free(w);
    gguf_file f;
    if (gguf_open(path, &f, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    uint64_t u = 0;
    double d = 0;
    const char *s = NULL;
    CHECK(gguf_get_u64(&f, "pos", &u, &err) == 0 && u == 17);
    CHECK(gguf_get_u64(&f, "neg", &u, &err) == -1 && strstr(err.msg, "'neg' is negative (-3)"));
    CHECK(gguf_get_u64(&f, "name", &u, &err) == -1 &&
          strstr(err.msg, "key 'name' has type str, expected an integer"));
    CHECK(gguf_get_u64(&f, "nope", &u, &err) == -1 && strstr(err.msg, "key 'nope' not found"));
    CHECK(strncmp(err.msg, path, strlen(path)) == 0);
    CHECK(gguf_get_f64(&f, "eps", &d, &err) == 0 && d == (double)1e-5f);
    CHECK(gguf_get_f64(&f, "neg", &d, &err) == 0 && d == -3.0);
    CHECK(gguf_get_f64(&f, "name", &d, &err) == -1 && strstr(err.msg, "expected a number"));
    CHECK(gguf_get_str(&f, "name", &s, &err) == 0 && strcmp(s, "x") == 0);
    CHECK(gguf_get_str(&f, "pos", &s, &err) == -1 && strstr(err.msg, "type i32, expected str"));
    CHECK(f.n_tensors == 0);
    gguf_close(&f);
}

static void test_writer_errors(void)
{
    memra_err err = {{0}};
    float data[64] = {0};
    gguf_writer *w = gguf_writer_new();
    CHECK(gguf_writer_add_tensor(w, "a", DT_F32, 1, (int64_t[]){4}, data, 16, &err) == 0);
    CHECK(gguf_writer_add_tensor(w, "a", DT_F32, 1, (int64_t[]){4}, data, 16, &err) == -1 &&
          strstr(err.msg, "tensor 'a': added twice"));
    CHECK(gguf_writer_add_tensor(w, "b", DT_F32, 1, (int64_t[]){4}, data, 12, &err) == -1 &&
          strstr(err.msg, "12 bytes given, a F32 tensor of this shape has 16"));
    CHECK(gguf_writer_add_tensor(w, "c", DT_Q4_0, 1, (int64_t[]){33}, data, 18, &err) == -1 &&
          strstr(err.msg, "ne[0] = 33 is not a multiple of the Q4_0 block size 32"));
    CHECK(gguf_writer_add_tensor(w, "d", DT_F32, 5, (int64_t[]){1, 1, 1, 1, 1}, data, 4, &err) ==
              -1 &&
          strstr(err.msg, "n_dims 5"));
    CHECK(gguf_writer_add_tensor(w, "e", DT_F8_E4M3, 1, (int64_t[]){4}, data, 4, &err) == -1 &&
          strstr(err.msg, "cannot be stored in GGUF"));
    CHECK(gguf_writer_add_tensor(w, "f", (dtype)4, 1, (int64_t[]){32}, data, 18, &err) == -1);
    char longname[80];
    memset(longname, 'x', 64);
    longname[64] = '\0';
    CHECK(gguf_writer_add_tensor(w, longname, DT_F32, 1, (int64_t[]){4}, data, 16, &err) == -1 &&
          strstr(err.msg, "at most 63"));
    longname[63] = '\0';
    CHECK(gguf_writer_add_tensor(w, longname, DT_F32, 1, (int64_t[]){4}, data, 16, &err) == 0);

    /* Deferred setter errors surface at write, and nothing is written. */
    char path[512];
    tmp_path(path, sizeof path, "never.gguf");
    unlink(path);
    gguf_writer_set_u32(w, "general.alignment", 48);
    CHECK(gguf_writer_write(w, path, &err) == -1 && strstr(err.msg, "48 is not a power of two"));
    CHECK(access(path, F_OK) != 0);
    gguf_writer_set_str(w, "general.alignment", "x");
    CHECK(gguf_writer_write(w, path, &err) == -1 &&
          strstr(err.msg, "'general.alignment' has type str, expected u32"));
    gguf_writer_set_u32(w, "general.alignment", 16);
    gguf_value nested = {.type = GGUF_ARRAY, .v.arr = {.elem_type = GGUF_ARRAY, .n = 0}};
    gguf_writer_set(w, "bad.nested", &nested);
    CHECK(gguf_writer_write(w, path, &err) == -1 &&
          strstr(err.msg, "key 'bad.nested': nested arrays are not supported"));
    CHECK(access(path, F_OK) != 0);
    gguf_writer_free(w);

    w = gguf_writer_new();
    gguf_writer_set_str(w, "\xff\xfe", "x");
    CHECK(gguf_writer_write(w, path, &err) == -1 && strstr(err.msg, "is not valid UTF-8"));
    gguf_writer_free(w);

    /* A directory that does not exist: a clean error, no crash. */
    w = gguf_writer_new();
    CHECK(gguf_writer_write(w, "/nonexistent-dir-memra/x.gguf", &err) == -1 &&
          strstr(err.msg, "/nonexistent-dir-memra/x.gguf: cannot create"));
    gguf_writer_free(w);
}

/* Copying metadata from a read file reproduces it (the converter's path). */
static void test_copy_kv(void)
{
    char src[512], dst[512];
    tmp_path(src, sizeof src, "copy-src.gguf");
    tmp_path(dst, sizeof dst, "copy-dst.gguf");
    memra_err err = {{0}};
    CHECK(write_full(src, 64, &err) == 0);
    gguf_file a, b;
    if (gguf_open(src, &a, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    gguf_writer *w = gguf_writer_new();
    gguf_writer_copy_kv(w, &a);
    for (uint64_t i = 0; i < a.n_tensors; i++) {
        const gguf_tensor *t = &a.tensors[i];
        CHECK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes,
                                     &err) == 0);
    }
    CHECK(gguf_writer_write(w, dst, &err) == 0);
    gguf_writer_free(w);
    if (gguf_open(dst, &b, &err) == 0) {
        CHECK(a.map.size == b.map.size && memcmp(a.map.data, b.map.data, a.map.size) == 0);
        gguf_close(&b);
    } else {
        CHECK_MSG(0, "%s", err.msg);
    }
    gguf_close(&a);
}

/* ---- files written by other tools ---- */

static void test_stories260k(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_data_dir());
    if (!test_need_file(path))
        return;
    gguf_file f;
    memra_err err = {{0}};
    if (gguf_open(path, &f, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    CHECK(f.version == 3);
    CHECK(f.map.size == 1185376);
    CHECK(f.n_tensors == 48);
    for (uint64_t i = 0; i < f.n_tensors; i++)
        CHECK_MSG(f.tensors[i].type == DT_F32, "%s", f.tensors[i].name);
    const char *arch = NULL;
    CHECK(gguf_get_str(&f, "general.architecture", &arch, &err) == 0 && strcmp(arch, "llama") == 0);
    uint64_t u = 0;
    CHECK(gguf_get_u64(&f, "llama.embedding_length", &u, &err) == 0 && u == 64);
    CHECK(gguf_get_u64(&f, "llama.block_count", &u, &err) == 0 && u == 5);
    CHECK(gguf_get_u64(&f, "llama.feed_forward_length", &u, &err) == 0 && u == 172);
    CHECK(gguf_get_u64(&f, "llama.attention.head_count", &u, &err) == 0 && u == 8);
    CHECK(gguf_get_u64(&f, "llama.attention.head_count_kv", &u, &err) == 0 && u == 4);
    double eps = 0;
    CHECK(gguf_get_f64(&f, "llama.attention.layer_norm_rms_epsilon", &eps, &err) == 0 &&
          fabs(eps - 1e-5) < 1e-9);
    const gguf_kv *tok = gguf_find_kv(&f, "tokenizer.ggml.tokens");
    CHECK(tok && tok->value.type == GGUF_ARRAY && tok->value.v.arr.elem_type == GGUF_STRING &&
          tok->value.v.arr.n == 512);
    const gguf_tensor *t = gguf_find_tensor(&f, "token_embd.weight");
    CHECK(t && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512 && t->nbytes == 64 * 512 * 4);
    t = gguf_find_tensor(&f, "blk.4.ffn_down.weight");
    CHECK(t && t->n_dims == 2 && t->ne[0] == 172 && t->ne[1] == 64);
    t = gguf_find_tensor(&f, "blk.0.attn_k.weight");
    CHECK(t && t->ne[0] == 64 && t->ne[1] == 32);
    t = gguf_find_tensor(&f, "output_norm.weight");
    CHECK(t && t->n_dims == 1 && t->ne[0] == 64);
    if (t) { /* RMSNorm weights of a trained model: finite, mostly positive */
        float w0;
        memcpy(&w0, t->data, 4);
        CHECK(isfinite(w0) && w0 > 0);
    }
    gguf_close(&f);
}

static void test_vocab_files(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/vocab", test_data_dir());
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (!d)
        return;
    int seen = 0, named = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 5, ".gguf") != 0)
            continue;
        named += strstr(e->d_name, "gpt-2") || strstr(e->d_name, "llama-spm") ||
                 strstr(e->d_name, "llama-bpe") || strstr(e->d_name, "qwen2");
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        gguf_file f;
        memra_err err = {{0}};
        if (gguf_open(path, &f, &err) != 0) {
            CHECK_MSG(0, "%s", err.msg);
            continue;
        }
        seen++;
        CHECK_MSG(f.n_tensors == 0, "%s", path);
        const gguf_kv *tok = gguf_find_kv(&f, "tokenizer.ggml.tokens");
        CHECK_MSG(tok && tok->value.type == GGUF_ARRAY &&
                      tok->value.v.arr.elem_type == GGUF_STRING && tok->value.v.arr.n > 1000,
                  "%s", path);
        const char *model = NULL;
        CHECK(gguf_get_str(&f, "tokenizer.ggml.model", &model, &err) == 0);
        uint64_t n_tok = tok ? tok->value.v.arr.n : 0;
        const gguf_str *toks = tok ? tok->value.v.arr.data : NULL;
        if (strstr(e->d_name, "gpt-2")) {
            CHECK(n_tok == 50257 && strcmp(toks[0].str, "!") == 0);
            CHECK(strcmp(toks[50256].str, "<|endoftext|>") == 0);
            CHECK(model && strcmp(model, "gpt2") == 0);
        } else if (strstr(e->d_name, "llama-spm")) {
            CHECK(n_tok == 32000 && strcmp(toks[0].str, "<unk>") == 0);
            CHECK(model && strcmp(model, "llama") == 0);
            const gguf_kv *sc = gguf_find_kv(&f, "tokenizer.ggml.scores");
            CHECK(sc && sc->value.v.arr.elem_type == GGUF_FLOAT32 && sc->value.v.arr.n == 32000);
        } else if (strstr(e->d_name, "llama-bpe")) {
            CHECK(n_tok == 128256 && strcmp(toks[128000].str, "<|begin_of_text|>") == 0);
            const gguf_kv *m = gguf_find_kv(&f, "tokenizer.ggml.merges");
            CHECK(m && m->value.v.arr.elem_type == GGUF_STRING && m->value.v.arr.n > 100000);
        } else if (strstr(e->d_name, "qwen2")) {
            CHECK(n_tok > 150000);
        }
        gguf_close(&f);
    }
    closedir(d);
    /* every vocab file parses, and the four checked by name are there */
    CHECK_MSG(named == 4 && seen >= 4, "%d files parsed, %d of the four named", seen, named);
}

/* ---- malformed files ---- */

static void test_truncated_prefixes(void)
{
    char path[512];
    tmp_path(path, sizeof path, "prefix.gguf");
    memra_err err = {{0}};
    CHECK(write_full(path, 0, &err) == 0);
    char *buf = NULL;
    size_t len = 0;
    if (read_small_file(path, 1 << 20, &buf, &len, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    /* The whole file opens; every shorter prefix fails cleanly. */
    gguf_file f;
    CHECK(gguf_open_buffer((const uint8_t *)buf, len, "p.gguf", &f, &err) == 0);
    gguf_close(&f);
    int bad = 0;
    for (size_t n = 0; n < len; n++) {
        uint8_t *copy = xmalloc(n ? n : 1);
        memcpy(copy, buf, n);
        if (gguf_open_buffer(copy, n, "p.gguf", &f, &err) == 0) {
            gguf_close(&f);
            bad++;
        } else if (strncmp(err.msg, "p.gguf: ", 8) != 0) {
            bad++;
        }
        free(copy);
    }
    CHECK_MSG(bad == 0, "%d of %zu prefixes misbehaved", bad, len);
    /* Specific messages at a few cut points. */
    bytes b = {0};
    b_raw(&b, buf, 3);
    EXPECT_FAIL(&b, "truncated: 3 bytes, too small for a GGUF header");
    b.n = 0;
    b_raw(&b, buf, 20);
    EXPECT_FAIL(&b, "header: truncated: n_kv at offset 16 needs 8 bytes, only 4 left");
    b.n = 0;
    b_raw(&b, buf, len - 1);
    EXPECT_FAIL(&b, "tensor 't.last': data [");
    EXPECT_FAIL(&b, "runs past end of file (");
    free(b.p);
    free(buf);
}

static void test_malformed(void)
{
    bytes b = {0};
    const uint64_t ne8[] = {8}, ne_q[] = {33}, ne0[] = {0, 0, 0, 0, 0};

    b_header(&b, 3, 0, 0);
    memcpy(b.p, "GGML", 4);
    EXPECT_FAIL(&b, "not a GGUF file");

    b_header(&b, 1, 0, 0);
    EXPECT_FAIL(&b, "GGUF version 1 is not supported");
    b_header(&b, 99, 0, 0);
    EXPECT_FAIL(&b, "unsupported GGUF version 99 (only versions 2 and 3)");
    b_header(&b, 0x03000000u, 0, 0);
    EXPECT_FAIL(&b, "big-endian");
    b_header(&b, 2, 0, 0); /* version 2 is accepted */
    {
        gguf_file f;
        memra_err err;
        CHECK(gguf_open_buffer(b.p, b.n, "v2.gguf", &f, &err) == 0 && f.version == 2);
        gguf_close(&f);
    }

    b_header(&b, 3, 0, 1ull << 60);
    EXPECT_FAIL(&b, "n_kv 1152921504606846976 cannot fit in the 0 bytes after the header");
    b_header(&b, 3, UINT64_MAX, 0);
    b_kv_u32(&b, "k", 1);
    EXPECT_FAIL(&b, "n_tensors 18446744073709551615 (with n_kv 0) cannot fit");

    b_header(&b, 3, 0, 1);
    b_u64(&b, 1ull << 62);
    b_raw(&b, "abcdefgh", 8);
    EXPECT_FAIL(&b, "key 0: key at offset 24 has length 4611686018427387904, past end of file");

    b_header(&b, 3, 0, 1);
    b_str(&b, "general.name");
    b_u32(&b, GGUF_STRING);
    b_u64(&b, 1000000);
    b_raw(&b, "xy", 2);
    EXPECT_FAIL(&b, "key 'general.name': string value at offset 48 has length 1000000");

    b_header(&b, 3, 0, 1);
    b_str(&b, "k.t");
    b_u32(&b, 13);
    b_u32(&b, 0);
    EXPECT_FAIL(&b, "key 'k.t': unknown value type 13");

    b_header(&b, 3, 0, 1);
    b_str(&b, "k.nest");
    b_u32(&b, GGUF_ARRAY);
    b_u32(&b, GGUF_ARRAY);
    b_u64(&b, 1);
    b_u32(&b, GGUF_UINT8);
    b_u64(&b, 1);
    b_u8(&b, 0);
    EXPECT_FAIL(&b, "key 'k.nest': nested arrays are not supported");

    b_header(&b, 3, 0, 1);
    b_str(&b, "k.arr");
    b_u32(&b, GGUF_ARRAY);
    b_u32(&b, 77);
    b_u64(&b, 1);
    b_u8(&b, 0);
    EXPECT_FAIL(&b, "key 'k.arr': unknown array element type 77");

    b_header(&b, 3, 0, 1);
    b_str(&b, "k.big");
    b_u32(&b, GGUF_ARRAY);
    b_u32(&b, GGUF_UINT32);
    b_u64(&b, 1ull << 61);
    b_u32(&b, 0);
    EXPECT_FAIL(&b, "key 'k.big': array of 2305843009213693952 u32 elements needs more than");

    b_header(&b, 3, 0, 1);
    b_str(&b, "k.strs");
    b_u32(&b, GGUF_ARRAY);
    b_u32(&b, GGUF_STRING);
    b_u64(&b, 1ull << 40);
    b_str(&b, "one");
    EXPECT_FAIL(&b, "key 'k.strs': array of 1099511627776 strings cannot fit");

    b_header(&b, 3, 0, 1);
    b_str(&b, "k.bool");
    b_u32(&b, GGUF_BOOL);
    b_u8(&b, 2);
    EXPECT_FAIL(&b, "key 'k.bool': bool value 2 at offset");

    b_header(&b, 3, 0, 1);
    b_str(&b, "bad\xc3\x28key");
    b_u32(&b, GGUF_UINT8);
    b_u8(&b, 0);
    EXPECT_FAIL(&b, "key 'bad\\xc3(key': key is not valid UTF-8");

    b_header(&b, 3, 0, 1);
    b_str(&b, "\xed\xa0\x80"); /* a UTF-16 surrogate, encoded */
    b_u32(&b, GGUF_UINT8);
    b_u8(&b, 0);
    EXPECT_FAIL(&b, "not valid UTF-8");

    b_header(&b, 3, 0, 2);
    b_kv_u32(&b, "dup.key", 1);
    b_kv_u32(&b, "dup.key", 2);
    EXPECT_FAIL(&b, "key 'dup.key': duplicate key (pairs 0 and 1)");

    b_header(&b, 3, 0, 1);
    b_kv_u32(&b, "general.alignment", 48);
    EXPECT_FAIL(&b, "key 'general.alignment': alignment 48 is not a power of two");
    b_header(&b, 3, 0, 1);
    b_str(&b, "general.alignment");
    b_u32(&b, GGUF_UINT64);
    b_u64(&b, 64);
    EXPECT_FAIL(&b, "key 'general.alignment': has type u64, expected u32");

    b_header(&b, 3, 1, 0);
    b_tensor(&b, "t", 0, ne0, DT_F32, 0);
    b_data(&b, 32);
    EXPECT_FAIL(&b, "tensor 't': n_dims 0 is not in 1..4");
    b_header(&b, 3, 1, 0);
    b_tensor(&b, "t", 5, ne0, DT_F32, 0);
    b_data(&b, 32);
    EXPECT_FAIL(&b, "tensor 't': n_dims 5 is not in 1..4");

    b_header(&b, 3, 1, 0);
    b_tensor(&b, "t.q", 1, ne8, 4, 0);
    b_data(&b, 64);
    EXPECT_FAIL(&b, "tensor 't.q': unknown tensor type 4");
    b_header(&b, 3, 1, 0);
    b_tensor(&b, "t.q", 1, ne8, 1000, 0);
    b_data(&b, 64);
    EXPECT_FAIL(&b, "tensor 't.q': unknown tensor type 1000");

    b_header(&b, 3, 1, 0);
    b_tensor(&b, "t.q4", 1, ne_q, DT_Q4_0, 0);
    b_data(&b, 64);
    EXPECT_FAIL(&b, "tensor 't.q4': ne[0] = 33 is not a multiple of the Q4_0 block size 32");

    {
        const uint64_t neg[] = {8, 1ull << 63};
        b_header(&b, 3, 1, 0);
        b_tensor(&b, "t.neg", 2, neg, DT_F32, 0);
        b_data(&b, 32);
        EXPECT_FAIL(&b, "tensor 't.neg': ne[1] = 9223372036854775808 is out of range");
        const uint64_t huge[] = {1ull << 40, 1ull << 40};
        b_header(&b, 3, 1, 0);
        b_tensor(&b, "t.huge", 2, huge, DT_F32, 0);
        b_data(&b, 32);
        EXPECT_FAIL(&b, "tensor 't.huge': shape [1099511627776, 1099511627776, 1, 1] overflows");
        const uint64_t bytes_ovf[] = {1ull << 61, 2};
        b_header(&b, 3, 1, 0);
        b_tensor(&b, "t.bytes", 2, bytes_ovf, DT_F32, 0);
        b_data(&b, 32);
        EXPECT_FAIL(&b, "overflows the byte size");
    }

    b_header(&b, 3, 1, 0);
    b_tensor(&b, "t.mis", 1, ne8, DT_F32, 4);
    b_data(&b, 64);
    EXPECT_FAIL(&b, "tensor 't.mis': offset 4 is not a multiple of the alignment 32");

    b_header(&b, 3, 2, 0);
    b_tensor(&b, "t.a", 1, ne8, DT_F32, 0);
    b_tensor(&b, "t.a", 1, ne8, DT_F32, 32);
    b_data(&b, 64);
    EXPECT_FAIL(&b, "tensor 't.a': duplicate tensor name (tensors 0 and 1)");

    /* Overlap: t.b [0, 64) and t.c [32, 64). The header ends at offset
     * 24 + 2 * (8 + 3 + 4 + 8 + 4 + 8) = 94, so data starts at 96. */
    {
        const uint64_t ne16[] = {16};
        b_header(&b, 3, 2, 0);
        b_tensor(&b, "t.b", 1, ne16, DT_F32, 0);
        b_tensor(&b, "t.c", 1, ne8, DT_F32, 32);
        b_data(&b, 64);
        EXPECT_FAIL(&b, "tensor 't.c': data [128, 160) overlaps tensor 't.b' [96, 160)");
        /* The same range twice, listed in reverse order. */
        b_header(&b, 3, 2, 0);
        b_tensor(&b, "t.b", 1, ne8, DT_F32, 32);
        b_tensor(&b, "t.c", 1, ne8, DT_F32, 32);
        b_data(&b, 64);
        EXPECT_FAIL(&b, "overlaps tensor");
        /* A short tensor inside a long one, after a third that does not overlap. */
        const uint64_t ne64[] = {64};
        b_header(&b, 3, 3, 0);
        b_tensor(&b, "t.x", 1, ne64, DT_F32, 0);
        b_tensor(&b, "t.y", 1, ne8, DT_F32, 32);
        b_tensor(&b, "t.z", 1, ne8, DT_F32, 256);
        b_data(&b, 288);
        EXPECT_FAIL(&b, "tensor 't.y': data [");
        /* Adjacent and empty tensors do not overlap. */
        const uint64_t ne_empty[] = {0};
        b_header(&b, 3, 3, 0);
        b_tensor(&b, "t.b", 1, ne8, DT_F32, 0);
        b_tensor(&b, "t.c", 1, ne8, DT_F32, 32);
        b_tensor(&b, "t.e", 1, ne_empty, DT_F32, 32);
        b_data(&b, 64);
        gguf_file f;
        memra_err err;
        CHECK_MSG(gguf_open_buffer(b.p, b.n, "ok.gguf", &f, &err) == 0, "%s", err.msg);
        gguf_close(&f);
    }

    {
        const uint64_t ne1k[] = {1024};
        b_header(&b, 3, 1, 0);
        b_tensor(&b, "blk.0.attn_q.weight", 1, ne1k, DT_F32, 0);
        b_data(&b, 100);
        /* header 24 + 8 + 19 + 4 + 8 + 4 + 8 = 75 -> data at 96; file 196 */
        EXPECT_FAIL(&b, "bad.gguf: tensor 'blk.0.attn_q.weight': data [96, 4192) runs past end of "
                        "file (196 bytes)");
        b_header(&b, 3, 1, 0);
        b_tensor(&b, "t.far", 1, ne8, DT_F32, UINT64_MAX - 31);
        b_data(&b, 32);
        EXPECT_FAIL(&b, "tensor 't.far': data offset 18446744073709551584 + 32 bytes runs past end");
        b_header(&b, 3, 1, 0);
        b_tensor(&b, "t.nod", 1, ne8, DT_F32, 0); /* header ends at 61 */
        EXPECT_FAIL(&b, "data section at 64 starts past end of file (61 bytes)");
    }

    b_header(&b, 3, 1, 0);
    b_str(&b, "");
    b_data(&b, 64);
    EXPECT_FAIL(&b, "tensor 0: empty tensor name");
    b_header(&b, 3, 0, 1);
    b_str(&b, "");
    b_u32(&b, GGUF_UINT8);
    b_u8(&b, 0);
    b_data(&b, 32);
    EXPECT_FAIL(&b, "key 0: empty key");

    /* gguf_open names the path. */
    char path[512];
    tmp_path(path, sizeof path, "v99.gguf");
    b_header(&b, 99, 0, 0);
    FILE *fp = fopen(path, "wb");
    if (fp) {
        fwrite(b.p, 1, b.n, fp);
        fclose(fp);
    }
    gguf_file f;
    memra_err err;
    CHECK(gguf_open(path, &f, &err) == -1);
    char want[600];
    snprintf(want, sizeof want, "%s: header: unsupported GGUF version 99", path);
    CHECK_MSG(strstr(err.msg, want) == err.msg, "%s", err.msg);
    CHECK(gguf_open("/nonexistent/x.gguf", &f, &err) == -1 &&
          strstr(err.msg, "/nonexistent/x.gguf: cannot open"));
    free(b.p);
}

/* A 150k-entry string array decodes in linear time (a quadratic reader
 * would take minutes here). */
static void test_big_array(void)
{
    enum { N = 200000 };
    char **s = xmalloc(N * sizeof *s);
    char buf[32];
    for (int i = 0; i < N; i++) {
        snprintf(buf, sizeof buf, "tok%d", i);
        s[i] = xstrdup(buf);
    }
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, N, (const char *const *)s);
    char path[512];
    tmp_path(path, sizeof path, "big.gguf");
    memra_err err;
    CHECK(gguf_writer_write(w, path, &err) == 0);
    gguf_writer_free(w);
    gguf_file f;
    if (gguf_open(path, &f, &err) == 0) {
        const gguf_kv *kv = gguf_find_kv(&f, "tokenizer.ggml.tokens");
        CHECK(kv && kv->value.v.arr.n == N);
        const gguf_str *a = kv->value.v.arr.data;
        CHECK(strcmp(a[0].str, "tok0") == 0 && strcmp(a[N - 1].str, "tok199999") == 0);
        gguf_close(&f);
    } else {
        CHECK_MSG(0, "%s", err.msg);
    }
    unlink(path);
    for (int i = 0; i < N; i++)
        free(s[i]);
    free(s);
}

TEST_MAIN(TEST_CASE(test_roundtrip), TEST_CASE(test_alignment_64), TEST_CASE(test_getters),
          TEST_CASE(test_writer_errors), TEST_CASE(test_copy_kv), TEST_CASE(test_stories260k),
          TEST_CASE(test_vocab_files), TEST_CASE(test_truncated_prefixes),
          TEST_CASE(test_malformed), TEST_CASE(test_big_array))

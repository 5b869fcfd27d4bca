/* safetensors: write/read round trips (single file and sharded dirs), byte
 * identity after read -> write, and a malformed corpus built here, each
 * case checked for the message it must give. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json.h"
#include "core/mapfile.h"
#include "format/safetensors.h"
#include "test.h"

/* ---- fixtures ---- */

typedef struct {
    const char *name;
    dtype type;
    int n_dims;
    int64_t shape[ST_MAX_DIMS];
    uint64_t nbytes;
} spec;

static const spec specs[] = {
    {"model.embed.weight", DT_BF16, 2, {4, 8}, 64},
    {"layers.0.norm", DT_F16, 1, {3}, 6},
    {"layers.0.proj", DT_F32, 2, {2, 3}, 24},
    {"positions", DT_I64, 1, {5}, 40},
    {"fp8.weight", DT_F8_E4M3, 2, {3, 7}, 21},
    {"empty", DT_F32, 2, {0, 4}, 0},
    {"scale", DT_F32, 0, {0}, 4},
    {"na\xc3\xafve \"quoted\\\"\n", DT_U8, 1, {3}, 3},
};
#define N_SPECS ((int)(sizeof specs / sizeof specs[0]))
static const int sharded_file_index[N_SPECS] = {0, 1, 1, 2, 2, 2, 3, 3};

static uint8_t spec_data[N_SPECS][64];

static void fill_data(void)
{
    for (int i = 0; i < N_SPECS; i++)
        for (int j = 0; j < 64; j++)
            spec_data[i][j] = (uint8_t)(i * 37 + j * 11 + 1);
}

static const char *tpath(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/st-%ld-%s", test_tmp_dir(), (long)getpid(), name);
    return buf;
}

static st_writer *make_writer(int with_meta)
{
    fill_data();
    st_writer *w = st_writer_new();
    if (with_meta)
        st_writer_set_meta(w, "format", "pt");
    memra_err err = {{0}};
    for (int i = 0; i < N_SPECS; i++) {
        int rc = st_writer_add(w, specs[i].name, specs[i].type, specs[i].n_dims, specs[i].shape,
                               spec_data[i], specs[i].nbytes, &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
    }
    return w;
}

static void check_matches_specs(const st_set *s)
{
    CHECK(s->n_tensors == N_SPECS);
    for (int i = 0; i < N_SPECS && i < s->n_tensors; i++) {
        const st_tensor *t = &s->tensors[i];
        CHECK_MSG(strcmp(t->name, specs[i].name) == 0, "tensor %d is '%s'", i, t->name);
        CHECK(t->type == specs[i].type);
        CHECK(t->n_dims == specs[i].n_dims);
        for (int d = 0; d < t->n_dims; d++)
            CHECK(t->shape[d] == specs[i].shape[d]);
        CHECK(t->nbytes == specs[i].nbytes);
        CHECK(t->nbytes == 0 || memcmp(t->data, spec_data[i], t->nbytes) == 0);
        CHECK(st_find(s, specs[i].name) == t);
    }
    CHECK(st_find(s, "no.such.tensor") == NULL);
    CHECK(st_find(s, "") == NULL);
}

static uint8_t *slurp(const char *path, size_t *len)
{
    char *buf = NULL;
    memra_err err;
    if (read_small_file(path, 1 << 20, &buf, len, &err) != 0) {
        fprintf(stderr, "  %s\n", err.msg);
        *len = 0;
    }
    return (uint8_t *)buf;
}

static uint64_t get_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ---- round trips ---- */

static void test_round_trip(void)
{
    char path[512], tmp[600];
    tpath(path, sizeof path, "rt.safetensors");
    memra_err err = {{0}};
    st_writer *w = make_writer(1);
    CHECK_MSG(st_writer_write(w, path, &err) == 0, "%s", err.msg);
    st_writer_free(w);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0);

    st_set s;
    CHECK_MSG(st_open_file(path, &s, &err) == 0, "%s", err.msg);
    CHECK(s.n_files == 1);
    check_matches_specs(&s);
    CHECK(s.n_meta == 1);
    if (s.n_meta == 1)
        CHECK(!strcmp(s.meta[0].key, "format") && !strcmp(s.meta[0].value, "pt"));
    for (int i = 0; i < s.n_tensors; i++)
        CHECK(s.tensors[i].file_index == 0);
    st_close(&s);

    /* The raw layout: header padded to 8, compact JSON, metadata first. */
    size_t len;
    uint8_t *raw = slurp(path, &len);
    CHECK(raw && len > 8);
    if (raw && len > 8) {
        uint64_t hl = get_u64le(raw);
        CHECK(hl % 8 == 0);
        CHECK(8 + hl + 162 == len);
        const char *want = "{\"__metadata__\":{\"format\":\"pt\"},\"model.embed.weight\":"
                           "{\"dtype\":\"BF16\",\"shape\":[4,8],\"data_offsets\":[0,64]},";
        CHECK(hl >= strlen(want) && memcmp(raw + 8, want, strlen(want)) == 0);
        CHECK(raw[8 + hl - 1] == ' ' || raw[8 + hl - 1] == '}');
        const char *scalar = "\"scale\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[155,159]}";
        CHECK(memmem(raw + 8, hl, scalar, strlen(scalar)) != NULL);
        const char *esc = "\"na\xc3\xafve \\\"quoted\\\\\\\"\\n\":";
        CHECK(memmem(raw + 8, hl, esc, strlen(esc)) != NULL);
    }
    free(raw);

    /* No metadata: no "__metadata__" key at all. */
    w = make_writer(0);
    CHECK_MSG(st_writer_write(w, path, &err) == 0, "%s", err.msg);
    st_writer_free(w);
    CHECK_MSG(st_open_file(path, &s, &err) == 0, "%s", err.msg);
    check_matches_specs(&s);
    CHECK(s.n_meta == 0);
    st_close(&s);
    raw = slurp(path, &len);
    CHECK(raw && len > 9 && memcmp(raw + 8, "{\"model.embed.weight\"", 21) == 0);
    free(raw);
    unlink(path);
}

/* Data offsets, not jansson's key order, decide the tensor order: a header
 * whose keys run opposite to its data must come back in data order. */
static void test_order_follows_offsets(void)
{
    const char *hdr = "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    size_t hl = strlen(hdr), size = 8 + hl + 8;
    uint8_t *buf = calloc(1, size);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, hdr, hl);
    buf[8 + hl] = 0xAA;
    buf[8 + hl + 4] = 0xBB;
    st_set s;
    memra_err err = {{0}};
    CHECK_MSG(st_open_buffer(buf, size, "order", &s, &err) == 0, "%s", err.msg);
    CHECK(s.n_tensors == 2 && s.n_files == 0);
    if (s.n_tensors == 2) {
        CHECK(!strcmp(s.tensors[0].name, "a") && s.tensors[0].data[0] == 0xAA);
        CHECK(!strcmp(s.tensors[1].name, "b") && s.tensors[1].data[0] == 0xBB);
        CHECK(st_find(&s, "b") == &s.tensors[1]);
    }
    st_close(&s);
    free(buf);
}

static void test_rewrite_identical(void)
{
    char a[512], b[512];
    tpath(a, sizeof a, "orig.safetensors");
    tpath(b, sizeof b, "copy.safetensors");
    memra_err err = {{0}};
    st_writer *w = make_writer(1);
    CHECK_MSG(st_writer_write(w, a, &err) == 0, "%s", err.msg);
    st_writer_free(w);

    st_set s;
    CHECK_MSG(st_open_file(a, &s, &err) == 0, "%s", err.msg);
    w = st_writer_new();
    for (int i = 0; i < s.n_meta; i++)
        st_writer_set_meta(w, s.meta[i].key, s.meta[i].value);
    for (int i = 0; i < s.n_tensors; i++) {
        const st_tensor *t = &s.tensors[i];
        int rc = st_writer_add(w, t->name, t->type, t->n_dims, t->shape, t->data, t->nbytes, &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
    }
    CHECK_MSG(st_writer_write(w, b, &err) == 0, "%s", err.msg);
    st_writer_free(w);
    st_close(&s);

    size_t la, lb;
    uint8_t *ra = slurp(a, &la), *rb = slurp(b, &lb);
    CHECK(ra && rb && la == lb && la > 0 && memcmp(ra, rb, la) == 0);
    free(ra);
    free(rb);
    CHECK_MSG(st_open_file(b, &s, &err) == 0, "%s", err.msg);
    check_matches_specs(&s);
    st_close(&s);
    unlink(a);
    unlink(b);
}

static void check_index_file(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    memra_err err = {{0}};
    json_t *idx = json_load_path(path, 1 << 20, &err);
    CHECK_MSG(idx != NULL, "%s", err.msg);
    if (!idx)
        return;
    json_t *total = json_object_get(json_object_get(idx, "metadata"), "total_size");
    CHECK(json_is_integer(total) && json_integer_value(total) == 162);
    json_t *wm = json_object_get(idx, "weight_map");
    CHECK(json_object_size(wm) == N_SPECS);
    for (int i = 0; i < N_SPECS; i++) {
        char want[64];
        snprintf(want, sizeof want, "model-%05d-of-00004.safetensors", sharded_file_index[i] + 1);
        json_t *v = json_object_get(wm, specs[i].name);
        CHECK_MSG(json_is_string(v) && !strcmp(json_string_value(v), want), "%s", specs[i].name);
    }
    json_decref(idx);
}

static void test_sharded_round_trip(void)
{
    char dir[512], path[600];
    tpath(dir, sizeof dir, "sharded");
    memra_err err = {{0}};
    st_writer *w = make_writer(1);
    /* 64 | 6+24 | 40+21+0 | 4+3 with 64-byte shards. */
    CHECK_MSG(st_writer_write_dir(w, dir, 64, &err) == 0, "%s", err.msg);
    for (int i = 1; i <= 4; i++) {
        snprintf(path, sizeof path, "%s/model-%05d-of-00004.safetensors", dir, i);
        CHECK_MSG(access(path, F_OK) == 0, "%s", path);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(access(path, F_OK) != 0);
    check_index_file(dir);

    st_set s;
    CHECK_MSG(st_open_dir(dir, &s, &err) == 0, "%s", err.msg);
    CHECK(s.n_files == 4);
    check_matches_specs(&s);
    for (int i = 0; i < N_SPECS && i < s.n_tensors; i++)
        CHECK(s.tensors[i].file_index == sharded_file_index[i]);
    CHECK(s.n_meta == 1);
    st_close(&s);

    /* Each shard on its own is a valid file with the metadata too. */
    snprintf(path, sizeof path, "%s/model-00002-of-00004.safetensors", dir);
    CHECK_MSG(st_open_file(path, &s, &err) == 0, "%s", err.msg);
    CHECK(s.n_tensors == 2 && s.n_meta == 1);
    st_close(&s);

    /* Rewritten unsharded: model.safetensors, and the stale index goes. */
    CHECK_MSG(st_writer_write_dir(w, dir, 0, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    CHECK(access(path, F_OK) != 0);
    CHECK_MSG(st_open_dir(dir, &s, &err) == 0, "%s", err.msg);
    CHECK(s.n_files == 1);
    check_matches_specs(&s);
    st_close(&s);

    /* Total within the limit: one file even though a limit is set. */
    char dir2[512];
    tpath(dir2, sizeof dir2, "unsharded");
    CHECK_MSG(st_writer_write_dir(w, dir2, 162, &err) == 0, "%s", err.msg);
    CHECK_MSG(st_open_dir(dir2, &s, &err) == 0, "%s", err.msg);
    CHECK(s.n_files == 1);
    check_matches_specs(&s);
    st_close(&s);

    /* A limit smaller than any tensor: one shard per non-empty tensor. */
    char dir3[512];
    tpath(dir3, sizeof dir3, "tiny-shards");
    CHECK_MSG(st_writer_write_dir(w, dir3, 1, &err) == 0, "%s", err.msg);
    CHECK_MSG(st_open_dir(dir3, &s, &err) == 0, "%s", err.msg);
    CHECK(s.n_files == N_SPECS - 1);
    check_matches_specs(&s);
    st_close(&s);
    st_writer_free(w);
}

/* ---- malformed input ---- */

/* A file image: u64 length, header text, data_len bytes of data. */
static uint8_t *make_image(const char *header, size_t data_len, size_t *size)
{
    size_t hl = strlen(header);
    *size = 8 + hl + data_len;
    uint8_t *buf = calloc(1, *size);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    return buf;
}

static void expect_fail_buf(const uint8_t *buf, size_t size, const char *needle, int line)
{
    st_set s;
    memra_err err = {{0}};
    int rc = st_open_buffer(buf, size, "bad.safetensors", &s, &err);
    CHECK_MSG(rc == -1, "line %d: accepted", line);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "line %d: wanted '%s' in: %s", line, needle,
              err.msg);
    CHECK_MSG(strncmp(err.msg, "bad.safetensors: ", 17) == 0, "line %d: %s", line, err.msg);
    CHECK_MSG(strchr(err.msg, '\n') == NULL, "line %d: two lines: %s", line, err.msg);
    CHECK(s.n_tensors == 0 && s.tensors == NULL);
    st_close(&s);
}

static void expect_fail_hdr(const char *header, size_t data_len, const char *needle, int line)
{
    size_t size;
    uint8_t *buf = make_image(header, data_len, &size);
    expect_fail_buf(buf, size, needle, line);
    free(buf);
}

#define BAD(hdr, data_len, needle) expect_fail_hdr(hdr, data_len, needle, __LINE__)
#define T(body) "{\"w\":{" body "}}"
#define OK_ENTRY "\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"

static void test_malformed_headers(void)
{
    /* Control: the entry all the variations below start from is valid. */
    size_t size;
    uint8_t *good = make_image(T(OK_ENTRY), 8, &size);
    st_set s;
    memra_err err = {{0}};
    CHECK_MSG(st_open_buffer(good, size, "good", &s, &err) == 0, "%s", err.msg);
    st_close(&s);
    free(good);

    BAD("{not json", 0, "bad.safetensors: header: invalid JSON");
    BAD("", 0, "invalid JSON");
    BAD("{} trailing", 0, "invalid JSON");
    BAD("{\"w\":1,\"w\":2}", 0, "invalid JSON");
    BAD("[1,2]", 0, "header is an array ([1,2]), not a JSON object");
    BAD("\"str\"", 0, "header: invalid JSON");
    BAD("{\"w\":5}", 0, "tensor 'w': entry is an integer (5), not an object");
    BAD(T("\"shape\":[2],\"data_offsets\":[0,8]"), 8, "tensor 'w': missing \"dtype\"");
    BAD(T("\"dtype\":\"F32\",\"data_offsets\":[0,8]"), 8, "tensor 'w': missing \"shape\"");
    BAD(T("\"dtype\":\"F32\",\"shape\":[2]"), 8, "tensor 'w': missing \"data_offsets\"");
    BAD(T("\"dtype\":\"Q9\",\"shape\":[2],\"data_offsets\":[0,8]"), 8,
        "tensor 'w': unknown dtype \"Q9\"");
    BAD(T("\"dtype\":\"Q4_K\",\"shape\":[256],\"data_offsets\":[0,144]"), 144,
        "unknown dtype \"Q4_K\"");
    BAD(T("\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]"), 8, "unknown dtype 4");
    BAD(T("\"dtype\":\"F32\\u0000\",\"shape\":[2],\"data_offsets\":[0,8]"), 8, "unknown dtype");
    BAD(T("\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,8]"), 8,
        "tensor 'w': shape[0] is -1, not a non-negative integer");
    BAD(T("\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]"), 8,
        "shape[0] is 2.0, not a non-negative integer");
    BAD(T("\"dtype\":\"F32\",\"shape\":[1,\"2\"],\"data_offsets\":[0,8]"), 8,
        "shape[1] is \"2\"");
    BAD(T("\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]"), 8,
        "shape 2 is an integer, not an array");
    BAD(T("\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]"), 8,
        "shape has 9 dimensions, more than the 8 allowed");
    BAD(T("\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,0],\"data_offsets\":[0,0]"), 0,
        "shape [4294967296, 4294967296, 0] overflows the element count");
    BAD(T("\"dtype\":\"F32\",\"shape\":[2305843009213693952],\"data_offsets\":[0,8]"), 8,
        "too large");
    BAD(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]"), 8,
        "data_offsets [8, 0) are reversed");
    BAD(T("\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]"), 8,
        "tensor 'w': data_offsets [0, 16) run past the end of the 8-byte data buffer");
    BAD(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]"), 8,
        "data_offsets [0] is not [begin, end]");
    BAD(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]"), 8, "is not [begin, end]");
    BAD(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{}"), 8, "is not [begin, end]");
    BAD(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,6]"), 8,
        "data_offsets [0, 6) hold 6 bytes but F32 [2] needs 8");
    BAD(T(OK_ENTRY ",\"extra\":1"), 8, "tensor 'w': unknown key \"extra\"");
    /* jansson itself refuses NUL in keys; the reader checks again anyway. */
    BAD(T(OK_ENTRY ",\"dtype\\u0000x\":1"), 8, "NUL byte in object key");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
        12, "bad.safetensors: tensor 'b': data_offsets [4, 12) overlap tensor 'a' at [0, 8)");
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
        8, "overlap tensor 'a'");
    BAD("{\"__metadata__\":{\"format\":1}}", 0,
        "__metadata__ key 'format': value 1 is an integer, not a string");
    BAD("{\"__metadata__\":{\"format\":\"p\\u0000t\"}}", 0, "not a string without NUL bytes");
    BAD("{\"__metadata__\":\"pt\"}", 0, "__metadata__ is a string (\"pt\"), not an object");
    BAD("{\"__metadata__\":[]}", 0, "__metadata__ is an array");
    BAD("{\"w\xff\":{" OK_ENTRY "}}", 8, "header is not valid UTF-8 at file offset 11 (byte 0xff)");
    BAD("{\"w\xc0\xaf\":{" OK_ENTRY "}}", 8, "not valid UTF-8 at file offset 11");
    BAD("{\"w\xed\xa0\x80\":{" OK_ENTRY "}}", 8, "not valid UTF-8");
    BAD("{\"w\\ud800\":{" OK_ENTRY "}}", 8, "invalid JSON");
    BAD("{\"raw\nnewline\":1}", 0, "invalid JSON"); /* and still one line */
    BAD("{\"\":{" OK_ENTRY "}}", 8, "a tensor has an empty name");
    BAD("{\"a\\u0000b\":{" OK_ENTRY "}}", 8, "NUL byte in object key");
    BAD("{\"line\\nbreak\":5}", 0, "tensor 'line?break': entry is an integer");

    /* The lm_head example: the message in full. */
    size_t n;
    uint8_t *buf = make_image("{\"lm_head.weight\":{\"dtype\":\"BF16\",\"shape\":[4,8],"
                              "\"data_offsets\":[0,100]}}",
                              100, &n);
    st_set s2;
    CHECK(st_open_buffer(buf, n, "model.safetensors", &s2, &err) == -1);
    CHECK_MSG(!strcmp(err.msg, "model.safetensors: tensor 'lm_head.weight': data_offsets [0, 100) "
                               "hold 100 bytes but BF16 [4, 8] needs 64"),
              "%s", err.msg);
    free(buf);
}

static void test_header_length(void)
{
    uint8_t buf[24] = {0};
    uint64_t absurd = (uint64_t)1 << 60;
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(absurd >> (8 * i));
    expect_fail_buf(buf, sizeof buf, "header length 1152921504606846976 exceeds the 104857600-byte limit",
                    __LINE__);
    memset(buf, 0, 8);
    buf[0] = 100;
    expect_fail_buf(buf, sizeof buf,
                    "header length 100 runs past the end of the file (24 bytes)", __LINE__);
    memset(buf, 0xff, 8);
    expect_fail_buf(buf, sizeof buf, "exceeds", __LINE__);
    expect_fail_buf(buf, 7, "file is 7 bytes, too short for the 8-byte header length", __LINE__);
    expect_fail_buf(NULL, 0, "file is 0 bytes", __LINE__);
}

/* Every proper prefix of a valid file fails, with the message for the part
 * that was cut; each prefix sits in a buffer of exactly its length so the
 * sanitizer sees any read past it. */
static void test_truncated(void)
{
    char path[512];
    tpath(path, sizeof path, "trunc.safetensors");
    memra_err err = {{0}};
    st_writer *w = make_writer(1);
    CHECK_MSG(st_writer_write(w, path, &err) == 0, "%s", err.msg);
    st_writer_free(w);
    size_t len;
    uint8_t *full = slurp(path, &len);
    CHECK(full && len > 8);
    if (!full || len <= 8)
        return;
    uint64_t hl = get_u64le(full);
    for (size_t p = 0; p < len; p++) {
        uint8_t *cut = malloc(p ? p : 1);
        memcpy(cut, full, p);
        const char *needle = p < 8                ? "too short for the 8-byte header length"
                             : p < 8 + hl         ? "runs past the end of the file"
                                                  : "run past the end of the";
        expect_fail_buf(cut, p, needle, (int)p);
        free(cut);
    }
    st_set s;
    CHECK_MSG(st_open_buffer(full, len, "full", &s, &err) == 0, "%s", err.msg);
    check_matches_specs(&s);
    st_close(&s);

    /* The same through the file path: the message names the file. */
    FILE *f = fopen(path, "wb");
    fwrite(full, 1, len - 1, f);
    fclose(f);
    CHECK(st_open_file(path, &s, &err) == -1);
    CHECK_MSG(strncmp(err.msg, path, strlen(path)) == 0 && strstr(err.msg, "run past the end"),
              "%s", err.msg);
    CHECK(st_open_file("/nonexistent/x.safetensors", &s, &err) == -1);
    CHECK_MSG(strstr(err.msg, "/nonexistent/x.safetensors: cannot open"), "%s", err.msg);
    free(full);
    unlink(path);
}

/* ---- malformed sharded dirs ---- */

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    memra_err err;
    CHECK_MSG(write_file_atomic(path, text, strlen(text), &err) == 0, "%s", err.msg);
}

static void expect_dir_fail(const char *dir, const char *needle, int line)
{
    st_set s;
    memra_err err = {{0}};
    int rc = st_open_dir(dir, &s, &err);
    CHECK_MSG(rc == -1, "line %d: accepted", line);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "line %d: wanted '%s' in: %s", line, needle,
              err.msg);
    CHECK_MSG(strchr(err.msg, '\n') == NULL, "line %d: two lines: %s", line, err.msg);
    CHECK(s.n_files == 0 && s.n_tensors == 0);
    st_close(&s);
}

#define BAD_DIR(dir, needle) expect_dir_fail(dir, needle, __LINE__)
#define S1 "model-00001-of-00002.safetensors"
#define S2 "model-00002-of-00002.safetensors"

/* Two shards: a, b in S1 and c in S2, each tensor 8 bytes. */
static void make_two_shards(const char *dir)
{
    static const float vals[6] = {1, 2, 3, 4, 5, 6};
    const int64_t shape[1] = {2};
    memra_err err = {{0}};
    st_writer *w = st_writer_new();
    CHECK(st_writer_add(w, "a", DT_F32, 1, shape, vals, 8, &err) == 0);
    CHECK(st_writer_add(w, "b", DT_F32, 1, shape, vals + 2, 8, &err) == 0);
    CHECK(st_writer_add(w, "c", DT_F32, 1, shape, vals + 4, 8, &err) == 0);
    CHECK_MSG(st_writer_write_dir(w, dir, 16, &err) == 0, "%s", err.msg);
    st_writer_free(w);
}

#define INDEX(wm) "{\"metadata\":{\"total_size\":24},\"weight_map\":{" wm "}}"

static void test_malformed_dirs(void)
{
    char dir[512];
    tpath(dir, sizeof dir, "bad-shards");
    make_two_shards(dir);
    st_set s;
    memra_err err = {{0}};
    CHECK_MSG(st_open_dir(dir, &s, &err) == 0, "%s", err.msg);
    CHECK(s.n_files == 2 && s.n_tensors == 3);
    if (s.n_tensors == 3)
        CHECK(!strcmp(s.tensors[2].name, "c") && s.tensors[2].file_index == 1);
    st_close(&s);

    const char *ix = "model.safetensors.index.json";
    write_text(dir, ix, INDEX("\"a\":\"" S1 "\",\"b\":\"" S1 "\",\"c\":\"model-00003-of-00003.safetensors\""));
    BAD_DIR(dir, "model.safetensors.index.json: ");
    BAD_DIR(dir, "model-00003-of-00003.safetensors: cannot open: No such file");

    write_text(dir, ix, INDEX("\"a\":\"" S1 "\",\"b\":\"" S2 "\",\"c\":\"" S2 "\""));
    BAD_DIR(dir, "tensor 'b' is in shard " S1 ", but the index names " S2);

    write_text(dir, ix,
               INDEX("\"a\":\"" S1 "\",\"b\":\"" S1 "\",\"c\":\"" S2 "\",\"ghost\":\"" S2 "\""));
    BAD_DIR(dir, "model.safetensors.index.json: tensor 'ghost' is not in " S2
                 ", the shard the index names");

    write_text(dir, ix, INDEX("\"a\":\"" S1 "\",\"c\":\"" S2 "\""));
    BAD_DIR(dir, "tensor 'b' in shard " S1 " is not in the index");

    write_text(dir, ix, INDEX("\"a\":\"" S1 "\",\"b\":\"../" S1 "\",\"c\":\"" S2 "\""));
    BAD_DIR(dir, "tensor 'b': shard name '../" S1 "' must be a plain file name");

    write_text(dir, ix, INDEX("\"a\":\"" S1 "\",\"b\":\"sub/x.safetensors\",\"c\":\"" S2 "\""));
    BAD_DIR(dir, "shard name 'sub/x.safetensors' must be a plain file name");

    write_text(dir, ix, INDEX("\"a\":\"" S1 "\",\"b\":7,\"c\":\"" S2 "\""));
    BAD_DIR(dir, "weight_map: tensor 'b' maps to 7, not a shard file name");

    write_text(dir, ix, INDEX(""));
    BAD_DIR(dir, "weight_map names no tensors");

    write_text(dir, ix, "{\"metadata\":{}}");
    BAD_DIR(dir, "model.safetensors.index.json: missing \"weight_map\"");

    write_text(dir, ix, "{\"weight_map\":[]}");
    BAD_DIR(dir, "weight_map is an array");

    write_text(dir, ix, "[]");
    BAD_DIR(dir, "is an array, not a JSON object");

    write_text(dir, ix, "{\"weight_map\":");
    BAD_DIR(dir, "invalid JSON");
    write_text(dir, ix, "{\"weight_map\":{\"a\nb\":1}}");
    BAD_DIR(dir, "invalid JSON");

    /* A corrupt shard: the error names the shard file. */
    write_text(dir, ix, INDEX("\"a\":\"" S1 "\",\"b\":\"" S1 "\",\"c\":\"" S2 "\""));
    write_text(dir, S2, "short");
    BAD_DIR(dir, S2 ": file is 5 bytes, too short");

    /* The same name in two shards. */
    char dup[512];
    tpath(dup, sizeof dup, "dup-shards");
    mkdir(dup, 0777);
    static const float vals[4] = {1, 2, 3, 4};
    const int64_t shape[1] = {2};
    char path[700];
    for (int i = 0; i < 2; i++) {
        st_writer *w = st_writer_new();
        CHECK(st_writer_add(w, "x", DT_F32, 1, shape, vals, 8, &err) == 0);
        if (i == 1)
            CHECK(st_writer_add(w, "y", DT_F32, 1, shape, vals + 2, 8, &err) == 0);
        snprintf(path, sizeof path, "%s/%s", dup, i ? "b.safetensors" : "a.safetensors");
        CHECK_MSG(st_writer_write(w, path, &err) == 0, "%s", err.msg);
        st_writer_free(w);
    }
    write_text(dup, ix, INDEX("\"x\":\"a.safetensors\",\"y\":\"b.safetensors\""));
    BAD_DIR(dup, "duplicate tensor 'x' in a.safetensors and b.safetensors");

    char empty[512];
    tpath(empty, sizeof empty, "empty-dir");
    mkdir(empty, 0777);
    BAD_DIR(empty, "neither model.safetensors.index.json nor model.safetensors found");
    tpath(empty, sizeof empty, "no-such-dir");
    BAD_DIR(empty, "no-such-dir: cannot open");
}

/* ---- writer errors ---- */

static void expect_add_fail(st_writer *w, const char *name, dtype type, int n_dims,
                            const int64_t *shape, const void *data, uint64_t nbytes,
                            const char *needle, int line)
{
    memra_err err = {{0}};
    int rc = st_writer_add(w, name, type, n_dims, shape, data, nbytes, &err);
    CHECK_MSG(rc == -1, "line %d: accepted", line);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "line %d: wanted '%s' in: %s", line, needle,
              err.msg);
}
#define BAD_ADD(...) expect_add_fail(__VA_ARGS__, __LINE__)

static void test_writer_errors(void)
{
    static const uint8_t data[64] = {0};
    const int64_t s2[1] = {2}, neg[1] = {-2}, s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    const int64_t q[1] = {256};
    memra_err err = {{0}};
    st_writer *w = st_writer_new();
    CHECK(st_writer_add(w, "ok", DT_F32, 1, s2, data, 8, &err) == 0);
    BAD_ADD(w, "", DT_F32, 1, s2, data, 8, "empty name");
    BAD_ADD(w, "ok", DT_F32, 1, s2, data, 8, "duplicate tensor 'ok'");
    BAD_ADD(w, "__metadata__", DT_F32, 1, s2, data, 8, "reserved");
    BAD_ADD(w, "bad\xff", DT_F32, 1, s2, data, 8, "not valid UTF-8 (byte 3)");
    BAD_ADD(w, "q", DT_Q4_K, 1, q, data, 144, "type Q4_K has no safetensors dtype");
    BAD_ADD(w, "nine", DT_F32, 9, s9, data, 4, "9 dimensions, at most 8");
    BAD_ADD(w, "neg", DT_F32, 1, neg, data, 8, "shape[0] is -2");
    BAD_ADD(w, "size", DT_BF16, 1, s2, data, 8, "8 bytes given but BF16 of 2 elements needs 4");
    BAD_ADD(w, "null", DT_F32, 1, s2, NULL, 8, "tensor 'null': no data");
    /* The failed adds left nothing behind. */
    char path[512];
    tpath(path, sizeof path, "werr.safetensors");
    CHECK_MSG(st_writer_write(w, path, &err) == 0, "%s", err.msg);
    st_set s;
    CHECK_MSG(st_open_file(path, &s, &err) == 0, "%s", err.msg);
    CHECK(s.n_tensors == 1);
    st_close(&s);

    CHECK(st_writer_write(w, "/nonexistent-dir/x.safetensors", &err) == -1);
    CHECK_MSG(strstr(err.msg, "/nonexistent-dir/x.safetensors: cannot create"), "%s", err.msg);

    st_writer_set_meta(w, "format", "pt");
    st_writer_set_meta(w, "format", "np");
    CHECK_MSG(st_writer_write(w, path, &err) == 0, "%s", err.msg);
    CHECK_MSG(st_open_file(path, &s, &err) == 0, "%s", err.msg);
    CHECK(s.n_meta == 1 && !strcmp(s.meta[0].value, "np"));
    st_close(&s);
    st_writer_set_meta(w, "bad", "\xff");
    CHECK(st_writer_write(w, path, &err) == -1);
    CHECK_MSG(strstr(err.msg, "not valid UTF-8"), "%s", err.msg);
    st_writer_free(w);
    unlink(path);
}

static void test_utf8(void)
{
    const uint8_t ok[] = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    CHECK(utf8_invalid_at(ok, sizeof ok - 1) == sizeof ok - 1);
    CHECK(utf8_invalid_at((const uint8_t *)"ab\x80", 3) == 2);     /* stray continuation */
    CHECK(utf8_invalid_at((const uint8_t *)"\xc3", 1) == 0);       /* cut sequence */
    CHECK(utf8_invalid_at((const uint8_t *)"\xe0\x80\x80", 3) == 0); /* overlong */
    CHECK(utf8_invalid_at((const uint8_t *)"\xed\xbf\xbf", 3) == 0); /* surrogate */
    CHECK(utf8_invalid_at((const uint8_t *)"\xf4\x90\x80\x80", 4) == 0); /* > U+10FFFF */
    CHECK(utf8_invalid_at((const uint8_t *)"x\xc3(", 3) == 1);
}

/* ---- fuzz seeds ---- */

/* The seeds under tests/fixtures are this writer's output for these inputs;
 * MEMRA_WRITE_SEEDS=1 regenerates them, otherwise they are compared. */
static int write_seed(int i, const char *path, memra_err *err)
{
    static const uint16_t bf16[4] = {0x3f80, 0x4000, 0xbf80, 0x0000};
    static const float one = 1.0f;
    static const int64_t pos[2] = {0, 1};
    static const uint8_t fp8[3] = {0x38, 0x40, 0xb8};
    static const uint8_t flags[2] = {1, 0};
    const int64_t s22[2] = {2, 2}, s2[1] = {2}, s3[1] = {3}, s0[1] = {0};
    st_writer *w = st_writer_new();
    int rc = 0;
    if (i == 0) {
        st_writer_set_meta(w, "format", "pt");
        rc |= st_writer_add(w, "model.embed_tokens.weight", DT_BF16, 2, s22, bf16, 8, err);
        rc |= st_writer_add(w, "model.norm.scale", DT_F32, 0, NULL, &one, 4, err);
    } else if (i == 1) {
        rc |= st_writer_add(w, "positions", DT_I64, 1, s2, pos, 16, err);
        rc |= st_writer_add(w, "fp8.weight", DT_F8_E4M3, 1, s3, fp8, 3, err);
        rc |= st_writer_add(w, "empty", DT_F16, 1, s0, NULL, 0, err);
    } else {
        st_writer_set_meta(w, "format", "pt");
        st_writer_set_meta(w, "note", "seed \"three\"");
        rc |= st_writer_add(w, "flags", DT_BOOL, 1, s2, flags, 2, err);
    }
    if (rc == 0)
        rc = st_writer_write(w, path, err);
    st_writer_free(w);
    return rc;
}

static void test_fuzz_seeds(void)
{
    const char *dir = "tests/fixtures/fuzz-seeds/fuzz_safetensors";
    int regenerate = getenv("MEMRA_WRITE_SEEDS") != NULL;
    for (int i = 0; i < 3; i++) {
        char fixture[256], fresh[512], name[32];
        snprintf(fixture, sizeof fixture, "%s/seed-%d.safetensors", dir, i + 1);
        snprintf(name, sizeof name, "seed-%d.safetensors", i + 1);
        tpath(fresh, sizeof fresh, name);
        memra_err err = {{0}};
        CHECK_MSG(write_seed(i, regenerate ? fixture : fresh, &err) == 0, "%s", err.msg);
        size_t la = 0, lb = 0;
        uint8_t *a = slurp(fixture, &la);
        uint8_t *b = regenerate ? NULL : slurp(fresh, &lb);
        if (!regenerate)
            CHECK_MSG(a && b && la == lb && memcmp(a, b, la) == 0, "%s differs from the writer",
                      fixture);
        CHECK_MSG(a != NULL, "%s missing", fixture);
        if (a) {
            st_set s;
            CHECK_MSG(st_open_buffer(a, la, fixture, &s, &err) == 0, "%s", err.msg);
            CHECK(s.n_tensors >= 1);
            st_close(&s);
        }
        free(a);
        free(b);
        unlink(fresh);
    }
}

TEST_MAIN(TEST_CASE(test_utf8), TEST_CASE(test_round_trip), TEST_CASE(test_order_follows_offsets),
          TEST_CASE(test_rewrite_identical), TEST_CASE(test_sharded_round_trip),
          TEST_CASE(test_malformed_headers), TEST_CASE(test_header_length),
          TEST_CASE(test_truncated), TEST_CASE(test_malformed_dirs), TEST_CASE(test_writer_errors),
          TEST_CASE(test_fuzz_seeds))

/* Importance matrix files: GGUF round trip, llama.cpp's per-expert GGUF
 * layout, the legacy .dat format, and every kind of corrupt file. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "format/gguf.h"
#include "quant/imatrix.h"
#include "test.h"

static void tmp_path(char *buf, size_t cap, const char *name)
{
    mkdir(test_tmp_dir(), 0755);
    snprintf(buf, cap, "%s/%s", test_tmp_dir(), name);
}

static int write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    fclose(f);
    return w == n ? 0 : -1;
}

/* Expect imatrix_read to fail with a message naming the file and holding
 * `want`, and to leave the struct zeroed. */
static void expect_read_error(const char *path, const char *want)
{
    imatrix m;
    memra_err err = {{0}};
    int rc = imatrix_read(path, &m, &err);
    CHECK_MSG(rc == -1, "%s: read succeeded", path);
    CHECK_MSG(strstr(err.msg, path) != NULL, "'%s' does not name the file", err.msg);
    CHECK_MSG(strstr(err.msg, want) != NULL, "'%s' lacks '%s'", err.msg, want);
    CHECK_MSG(strchr(err.msg, '\n') == NULL, "'%s' is not one line", err.msg);
    CHECK(m.n_entries == 0 && m.entries == NULL && m.dataset == NULL);
    if (rc == 0)
        imatrix_free(&m);
}

static void test_gguf_round_trip(void)
{
    char path[512];
    tmp_path(path, sizeof path, "imatrix_rt.gguf");
    imatrix m = {0};
    m.n_entries = 2;
    m.entries = xcalloc(2, sizeof *m.entries);
    m.n_chunks = 5;
    m.dataset = xstrdup("heldout.txt");
    m.entries[0].name = xstrdup("blk.0.attn_q.weight");
    m.entries[0].n_values = 8;
    m.entries[0].n_calls = 640;
    m.entries[0].values = xmalloc(8 * sizeof(float));
    for (int i = 0; i < 8; i++)
        m.entries[0].values[i] = 0.1f * (float)(i + 1) + 1e-3f / 3.0f;
    m.entries[1].name = xstrdup("blk.0.ffn_up_exps.weight"); /* 3 experts x 4 cols */
    m.entries[1].n_values = 12;
    m.entries[1].n_calls = 77;
    m.entries[1].values = xmalloc(12 * sizeof(float));
    for (int i = 0; i < 12; i++)
        m.entries[1].values[i] = (float)(i * i) / 7.0f;
    memra_err err = {{0}};
    CHECK_MSG(imatrix_write(path, &m, &err) == 0, "%s", err.msg);

    /* what llama-quantize looks for */
    gguf_file f;
    CHECK_MSG(gguf_open(path, &f, &err) == 0, "%s", err.msg);
    const char *s = NULL;
    CHECK(gguf_get_str(&f, "general.type", &s, &err) == 0 && strcmp(s, "imatrix") == 0);
    uint64_t u = 0;
    CHECK(gguf_get_u64(&f, "imatrix.chunk_count", &u, &err) == 0 && u == 5);
    CHECK(gguf_get_u64(&f, "imatrix.chunk_size", &u, &err) == 0 && u == 640 / 5);
    const gguf_kv *ds = gguf_find_kv(&f, "imatrix.datasets");
    CHECK(ds && ds->value.type == GGUF_ARRAY && ds->value.v.arr.n == 1);
    const gguf_tensor *t = gguf_find_tensor(&f, "blk.0.attn_q.weight.in_sum2");
    CHECK(t && t->type == DT_F32 && t->ne[0] == 8 && t->ne[1] == 1);
    float sum0;
    if (t) {
        memcpy(&sum0, t->data, 4);
        CHECK(fabsf(sum0 - m.entries[0].values[0] * 640) < 1e-3f);
    }
    t = gguf_find_tensor(&f, "blk.0.attn_q.weight.counts");
    CHECK(t && t->type == DT_F32 && t->ne[0] == 1 && t->ne[1] == 1);
    gguf_close(&f);

    imatrix r;
    CHECK_MSG(imatrix_read(path, &r, &err) == 0, "%s", err.msg);
    CHECK(r.n_entries == 2 && r.n_chunks == 5);
    CHECK(r.dataset && strcmp(r.dataset, "heldout.txt") == 0);
    for (int k = 0; k < 2 && r.n_entries == 2; k++) {
        const imatrix_entry *a = &m.entries[k];
        const imatrix_entry *b = imatrix_find(&r, a->name);
        CHECK_MSG(b != NULL, "%s missing", a->name);
        if (!b)
            continue;
        CHECK(b->n_values == a->n_values && b->n_calls == a->n_calls);
        for (int64_t i = 0; i < a->n_values; i++)
            CHECK_MSG(fabsf(a->values[i] - b->values[i]) <= 1e-6f * fabsf(a->values[i]),
                      "%s[%lld]: %g vs %g", a->name, (long long)i, (double)a->values[i],
                      (double)b->values[i]);
    }
    CHECK(imatrix_find(&r, "blk.1.attn_q.weight") == NULL);
    CHECK(imatrix_find(&r, "blk.0.attn_q") == NULL);
    imatrix_free(&r);
    CHECK(r.entries == NULL && r.n_entries == 0);
    imatrix_free(&m);
    imatrix_free(&m); /* safe twice: leaves it zeroed */
}

static void test_write_refuses_bad_matrices(void)
{
    char path[512];
    tmp_path(path, sizeof path, "imatrix_bad_write.gguf");
    memra_err err = {{0}};
    imatrix empty = {0};
    CHECK(imatrix_write(path, &empty, &err) == -1 && strstr(err.msg, "empty"));

    float vals[2] = {1, 2};
    imatrix_entry e[2] = {{"blk.0.attn_k.weight", 2, vals, 3}, {"blk.0.attn_k.weight", 2, vals, 3}};
    imatrix m = {e, 2, 1, NULL};
    CHECK(imatrix_write(path, &m, &err) == -1 && strstr(err.msg, "twice"));
    m.n_entries = 1;
    e[0].n_calls = 0;
    CHECK(imatrix_write(path, &m, &err) == -1 && strstr(err.msg, "no calls"));
    e[0].n_calls = 3;
    vals[1] = NAN;
    CHECK(imatrix_write(path, &m, &err) == -1 && strstr(err.msg, "value 1"));
    vals[1] = -1;
    CHECK(imatrix_write(path, &m, &err) == -1 && strstr(err.msg, "value 1"));
    vals[1] = 2;
    e[0].name = "";
    CHECK(imatrix_write(path, &m, &err) == -1 && strstr(err.msg, "no name"));
    e[0].name = "blk.0.a_very_long_tensor_name_that_cannot_fit_in_ggml.weight";
    CHECK(imatrix_write(path, &m, &err) == -1 && strstr(err.msg, "too long"));
    /* a NULL dataset writes an empty name (llama-quantize prints datasets[0]) */
    e[0].name = "blk.0.attn_k.weight";
    CHECK_MSG(imatrix_write(path, &m, &err) == 0, "%s", err.msg);
    imatrix r;
    CHECK_MSG(imatrix_read(path, &r, &err) == 0, "%s", err.msg);
    CHECK(r.dataset && r.dataset[0] == 0);
    imatrix_free(&r);
}

/* The layout llama-imatrix writes for stacked experts: one row and one
 * count per expert; an expert with count 0 gets importance 1. */
static void test_gguf_per_expert_counts(void)
{
    char path[512];
    tmp_path(path, sizeof path, "imatrix_experts.gguf");
    gguf_writer *w = gguf_writer_new();
    const char *ds[2] = {"a.txt", "b.txt"};
    gguf_writer_set_str(w, "general.type", "imatrix");
    gguf_writer_set_arr(w, "imatrix.datasets", GGUF_STRING, 2, ds);
    gguf_writer_set_u32(w, "imatrix.chunk_count", 7);
    gguf_writer_set_u32(w, "imatrix.chunk_size", 512);
    float sums[6] = {4, 8, 12, 9, 9, 9}, counts[2] = {4, 0}, plain[3] = {1, 2, 3};
    int64_t ne_s[2] = {3, 2}, ne_c[2] = {1, 2}, ne_p[2] = {3, 2};
    memra_err err = {{0}};
    CHECK(gguf_writer_add_tensor(w, "blk.1.ffn_down_exps.weight.in_sum2", DT_F32, 2, ne_s, sums,
                                 sizeof sums, &err) == 0);
    CHECK(gguf_writer_add_tensor(w, "blk.1.ffn_down_exps.weight.counts", DT_F32, 2, ne_c, counts,
                                 sizeof counts, &err) == 0);
    /* ".in_sum" (plain sums, newer llama.cpp) is not ours and is skipped */
    ne_p[1] = 1;
    CHECK(gguf_writer_add_tensor(w, "blk.1.ffn_down_exps.weight.in_sum", DT_F32, 2, ne_p, plain,
                                 sizeof plain, &err) == 0);
    CHECK_MSG(gguf_writer_write(w, path, &err) == 0, "%s", err.msg);
    gguf_writer_free(w);

    imatrix r;
    CHECK_MSG(imatrix_read(path, &r, &err) == 0, "%s", err.msg);
    CHECK(r.n_entries == 1 && r.n_chunks == 7);
    CHECK(r.dataset && strcmp(r.dataset, "a.txt, b.txt") == 0);
    if (r.n_entries == 1) {
        const imatrix_entry *e = &r.entries[0];
        CHECK(strcmp(e->name, "blk.1.ffn_down_exps.weight") == 0);
        CHECK(e->n_values == 6 && e->n_calls == 4);
        float want[6] = {1, 2, 3, 1, 1, 1};
        for (int i = 0; i < 6; i++)
            CHECK_MSG(e->values[i] == want[i], "value %d: %g", i, (double)e->values[i]);
    }
    imatrix_free(&r);
}

/* A legacy .dat file, built byte by byte. */
typedef struct {
    uint8_t b[4096];
    size_t n;
} bytes;

static void put_i32(bytes *o, int32_t v)
{
    memcpy(o->b + o->n, &v, 4);
    o->n += 4;
}
static void put_f32(bytes *o, float v)
{
    memcpy(o->b + o->n, &v, 4);
    o->n += 4;
}
static void put_str(bytes *o, const char *s)
{
    put_i32(o, (int32_t)strlen(s));
    memcpy(o->b + o->n, s, strlen(s));
    o->n += strlen(s);
}

/* Two entries: values stored as mean * ncall. */
static void legacy_good(bytes *o, int with_trailer)
{
    o->n = 0;
    put_i32(o, 2);
    put_str(o, "blk.0.attn_v.weight");
    put_i32(o, 4); /* ncall */
    put_i32(o, 3);
    put_f32(o, 4);
    put_f32(o, 2);
    put_f32(o, 0);
    put_str(o, "output.weight");
    put_i32(o, 0); /* ncall 0: values are taken as they are */
    put_i32(o, 2);
    put_f32(o, 0.5f);
    put_f32(o, 1.5f);
    if (with_trailer) {
        put_i32(o, 9);
        put_str(o, "wiki.train.raw");
    }
}

static void test_legacy_dat(void)
{
    char path[512];
    tmp_path(path, sizeof path, "imatrix_legacy.dat");
    bytes o;
    memra_err err = {{0}};
    for (int trailer = 0; trailer < 2; trailer++) {
        legacy_good(&o, trailer);
        CHECK(write_bytes(path, o.b, o.n) == 0);
        imatrix r;
        CHECK_MSG(imatrix_read(path, &r, &err) == 0, "%s", err.msg);
        CHECK(r.n_entries == 2);
        const imatrix_entry *v = imatrix_find(&r, "blk.0.attn_v.weight");
        CHECK(v && v->n_values == 3 && v->n_calls == 4);
        if (v)
            CHECK(v->values[0] == 1.0f && v->values[1] == 0.5f && v->values[2] == 0.0f);
        const imatrix_entry *out = imatrix_find(&r, "output.weight");
        CHECK(out && out->n_values == 2 && out->values[1] == 1.5f);
        if (trailer)
            CHECK(r.n_chunks == 9 && r.dataset && strcmp(r.dataset, "wiki.train.raw") == 0);
        else
            CHECK(r.n_chunks == 0 && r.dataset == NULL);
        imatrix_free(&r);
    }
}

/* Each way a legacy file can be broken, at its own offset. */
static void test_legacy_corrupt(void)
{
    char path[512];
    tmp_path(path, sizeof path, "imatrix_corrupt.dat");
    bytes o;

    CHECK(write_bytes(path, "", 0) == 0);
    expect_read_error(path, "too short");

    legacy_good(&o, 0);
    size_t entries_end = o.n; /* a file may end there: the trailer is optional */
    legacy_good(&o, 1);
    for (size_t cut = 5; cut < o.n; cut++) { /* every other truncation is an error */
        if (cut == entries_end)
            continue;
        CHECK(write_bytes(path, o.b, cut) == 0);
        imatrix r;
        memra_err err = {{0}};
        CHECK_MSG(imatrix_read(path, &r, &err) == -1, "truncated at %zu read", cut);
        CHECK(r.n_entries == 0);
    }

    legacy_good(&o, 1);
    int32_t v = 0;
    memcpy(o.b, &v, 4);
    CHECK(write_bytes(path, o.b, o.n) == 0);
    expect_read_error(path, "bad entry count 0");
    v = 1 << 30;
    memcpy(o.b, &v, 4);
    CHECK(write_bytes(path, o.b, o.n) == 0);
    expect_read_error(path, "bad entry count");

    legacy_good(&o, 1);
    v = -3; /* name length */
    memcpy(o.b + 4, &v, 4);
    CHECK(write_bytes(path, o.b, o.n) == 0);
    expect_read_error(path, "bad name length -3");

    legacy_good(&o, 1);
    v = -1; /* ncall of entry 0, after i32 count, i32 len, 19-byte name */
    memcpy(o.b + 4 + 4 + 19, &v, 4);
    CHECK(write_bytes(path, o.b, o.n) == 0);
    expect_read_error(path, "negative call count");

    legacy_good(&o, 1);
    v = 100000; /* nval */
    memcpy(o.b + 4 + 4 + 19 + 4, &v, 4);
    CHECK(write_bytes(path, o.b, o.n) == 0);
    expect_read_error(path, "do not fit");

    legacy_good(&o, 1);
    float f = NAN;
    memcpy(o.b + 4 + 4 + 19 + 8 + 4, &f, 4);
    CHECK(write_bytes(path, o.b, o.n) == 0);
    expect_read_error(path, "value 1 is nan");
    f = -2;
    memcpy(o.b + 4 + 4 + 19 + 8 + 4, &f, 4);
    CHECK(write_bytes(path, o.b, o.n) == 0);
    expect_read_error(path, "value 1 is -2");

    o.n = 0; /* two entries with the same name */
    put_i32(&o, 2);
    for (int k = 0; k < 2; k++) {
        put_str(&o, "blk.0.attn_v.weight");
        put_i32(&o, 1);
        put_i32(&o, 1);
        put_f32(&o, 1);
    }
    CHECK(write_bytes(path, o.b, o.n) == 0);
    expect_read_error(path, "appears twice");

    o.n = 0;
    put_i32(&o, 1);
    put_i32(&o, 3);
    memcpy(o.b + o.n, "a\0b", 3);
    o.n += 3;
    put_i32(&o, 1);
    put_i32(&o, 1);
    put_f32(&o, 1);
    CHECK(write_bytes(path, o.b, o.n) == 0);
    expect_read_error(path, "NUL");

    legacy_good(&o, 0);
    o.b[o.n++] = 7; /* stray bytes that are not a trailer */
    o.b[o.n++] = 7;
    CHECK(write_bytes(path, o.b, o.n) == 0);
    expect_read_error(path, "stray bytes");

    legacy_good(&o, 1);
    o.b[o.n++] = 'x'; /* dataset name longer than its length says */
    CHECK(write_bytes(path, o.b, o.n) == 0);
    expect_read_error(path, "dataset name length");

    legacy_good(&o, 0);
    put_i32(&o, -1);
    put_str(&o, "x");
    CHECK(write_bytes(path, o.b, o.n) == 0);
    expect_read_error(path, "negative chunk count");
}

typedef struct {
    const char *type;       /* general.type, NULL for none */
    int chunk_count;        /* -1: missing */
    int datasets_bad;       /* imatrix.datasets as a u32 */
    const char *sum_name;   /* NULL: no sums tensor */
    const char *count_name; /* NULL: no counts tensor */
    dtype sum_type;
    int64_t count_ne1;
    float sum0, count0;
} gguf_case;

static void write_gguf_case(const char *path, const gguf_case *c)
{
    gguf_writer *w = gguf_writer_new();
    if (c->type)
        gguf_writer_set_str(w, "general.type", c->type);
    if (c->chunk_count >= 0)
        gguf_writer_set_u32(w, "imatrix.chunk_count", (uint32_t)c->chunk_count);
    if (c->datasets_bad)
        gguf_writer_set_u32(w, "imatrix.datasets", 3);
    float sums[4] = {c->sum0, 1, 1, 1};
    uint16_t sums16[4] = {0x3c00, 0x3c00, 0x3c00, 0x3c00};
    float counts[2] = {c->count0, 1};
    int64_t ne_s[2] = {4, 1}, ne_c[2] = {1, c->count_ne1};
    memra_err err = {{0}};
    if (c->sum_name)
        CHECK(gguf_writer_add_tensor(w, c->sum_name, c->sum_type, 2, ne_s,
                                     c->sum_type == DT_F16 ? (void *)sums16 : (void *)sums,
                                     c->sum_type == DT_F16 ? 8 : 16, &err) == 0);
    if (c->count_name)
        CHECK(gguf_writer_add_tensor(w, c->count_name, DT_F32, 2, ne_c, counts,
                                     (uint64_t)c->count_ne1 * 4, &err) == 0);
    CHECK_MSG(gguf_writer_write(w, path, &err) == 0, "%s", err.msg);
    gguf_writer_free(w);
}

static void test_gguf_corrupt(void)
{
    char path[512];
    tmp_path(path, sizeof path, "imatrix_corrupt.gguf");
    const char *S = "blk.0.attn_q.weight.in_sum2", *C = "blk.0.attn_q.weight.counts";
    const gguf_case good = {"imatrix", 3, 0, S, C, DT_F32, 1, 2.0f, 4.0f};
    write_gguf_case(path, &good);
    imatrix r;
    memra_err err = {{0}};
    CHECK_MSG(imatrix_read(path, &r, &err) == 0, "%s", err.msg);
    CHECK(r.n_entries == 1 && r.entries[0].values[0] == 0.5f && r.entries[0].n_calls == 4);
    imatrix_free(&r);

    gguf_case c = good;
    c.type = "model";
    write_gguf_case(path, &c);
    expect_read_error(path, "not an imatrix (general.type is 'model')");

    c = good;
    c.chunk_count = -1;
    write_gguf_case(path, &c);
    expect_read_error(path, "imatrix.chunk_count");

    c = good;
    c.datasets_bad = 1;
    write_gguf_case(path, &c);
    expect_read_error(path, "imatrix.datasets is");

    c = good;
    c.count_name = NULL;
    write_gguf_case(path, &c);
    expect_read_error(path, "has no matching 'blk.0.attn_q.weight.counts'");

    c = good;
    c.sum_name = NULL;
    write_gguf_case(path, &c);
    expect_read_error(path, "has no matching 'blk.0.attn_q.weight.in_sum2'");

    c = good;
    c.sum_type = DT_F16;
    write_gguf_case(path, &c);
    expect_read_error(path, "is F16, expected F32");

    c = good;
    c.count_ne1 = 2;
    write_gguf_case(path, &c);
    expect_read_error(path, "counts has shape [1, 2], expected [1, 1]");

    c = good;
    c.sum0 = NAN;
    write_gguf_case(path, &c);
    expect_read_error(path, "sum 0 is nan");

    c = good;
    c.count0 = -1;
    write_gguf_case(path, &c);
    expect_read_error(path, "count 0 is -1");

    c = good;
    c.count0 = INFINITY;
    write_gguf_case(path, &c);
    expect_read_error(path, "count 0 is inf");

    c = good;
    c.sum_name = NULL;
    c.count_name = NULL;
    write_gguf_case(path, &c);
    expect_read_error(path, "no imatrix entries");

    c = good;
    c.sum_name = ".in_sum2"; /* empty entry name */
    c.count_name = ".counts";
    write_gguf_case(path, &c);
    expect_read_error(path, "empty name");

    /* a broken GGUF container is reported by the GGUF reader, with the path */
    write_gguf_case(path, &good);
    FILE *fp = fopen(path, "r+b");
    CHECK(fp != NULL);
    if (fp) {
        fseek(fp, 8, SEEK_SET);
        uint64_t huge = UINT64_MAX;
        fwrite(&huge, 8, 1, fp);
        fclose(fp);
    }
    expect_read_error(path, "");

    char missing[512];
    tmp_path(missing, sizeof missing, "imatrix_does_not_exist.gguf");
    remove(missing);
    expect_read_error(missing, "");
}

TEST_MAIN(TEST_CASE(test_gguf_round_trip), TEST_CASE(test_write_refuses_bad_matrices),
          TEST_CASE(test_gguf_per_expert_counts), TEST_CASE(test_legacy_dat),
          TEST_CASE(test_legacy_corrupt), TEST_CASE(test_gguf_corrupt))

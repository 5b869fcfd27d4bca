/* Importance matrix files: the GGUF format llama.cpp writes and reads today,
 * and its legacy binary `.dat` format (read only). See imatrix.h. */
#include "quant/imatrix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/mapfile.h"
#include "core/strbuf.h"
#include "core/utf8.h"
#include "format/gguf.h"

#define IMATRIX_SUM_SUFFIX ".in_sum2"
#define IMATRIX_COUNT_SUFFIX ".counts"

void imatrix_free(imatrix *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_entries; i++) {
        free(m->entries[i].name);
        free(m->entries[i].values);
    }
    free(m->entries);
    free(m->dataset);
    memset(m, 0, sizeof *m);
}

const imatrix_entry *imatrix_find(const imatrix *m, const char *gguf_tensor_name)
{
    if (!m || !gguf_tensor_name)
        return NULL;
    for (int i = 0; i < m->n_entries; i++)
        if (strcmp(m->entries[i].name, gguf_tensor_name) == 0)
            return &m->entries[i];
    return NULL;
}

static imatrix_entry *imatrix_push(imatrix *m, int *cap)
{
    if (m->n_entries == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        m->entries = xrealloc(m->entries, (size_t)*cap * sizeof *m->entries);
    }
    imatrix_entry *e = &m->entries[m->n_entries++];
    memset(e, 0, sizeof *e);
    return e;
}

/* Names come from files: an entry name must be non-empty UTF-8 without NULs
 * and unique, or imatrix_find would silently pick one of two. */
static int imatrix_check_name(const imatrix *m, const char *path, const char *name, size_t len,
                              memra_err *err)
{
    if (len == 0)
        return memra_fail(err, "%s: entry %d has an empty name", path, m->n_entries);
    if (memchr(name, 0, len) || !utf8_valid(name, len))
        return memra_fail(err, "%s: entry %d has a name with a NUL or invalid UTF-8", path,
                          m->n_entries);
    for (int i = 0; i < m->n_entries; i++)
        if (strlen(m->entries[i].name) == len && memcmp(m->entries[i].name, name, len) == 0)
            return memra_fail(err, "%s: entry '%.*s' appears twice", path, (int)len, name);
    return 0;
}

/* ---- legacy .dat ---- */

typedef struct {
    const uint8_t *p;
    size_t left;
} imx_cursor;

static int imx_i32(imx_cursor *c, int32_t *out)
{
    if (c->left < 4)
        return -1;
    memcpy(out, c->p, 4); /* the format is little-endian, as every host we build for */
    c->p += 4;
    c->left -= 4;
    return 0;
}

static int imatrix_read_legacy(const char *path, const mapped_file *mf, imatrix *m, memra_err *err)
{
    imx_cursor c = {mf->data, mf->size};
    int32_t n_entries;
    if (imx_i32(&c, &n_entries) != 0)
        return memra_fail(err, "%s: too short for an imatrix (%zu bytes)", path, mf->size);
    /* each entry needs at least 4+1+4+4+4 bytes: bounds the count by the file */
    if (n_entries < 1 || (uint64_t)n_entries > mf->size / 17)
        return memra_fail(err, "%s: legacy imatrix: bad entry count %d for a %zu-byte file", path,
                          (int)n_entries, mf->size);
    int cap = 0;
    for (int32_t i = 0; i < n_entries; i++) {
        int32_t len, ncall, nval;
        if (imx_i32(&c, &len) != 0)
            return memra_fail(err, "%s: legacy imatrix: truncated at entry %d of %d", path, (int)i,
                              (int)n_entries);
        if (len < 1 || (size_t)len > c.left)
            return memra_fail(err, "%s: legacy imatrix: entry %d: bad name length %d", path, (int)i,
                              (int)len);
        const char *name = (const char *)c.p;
        if (imatrix_check_name(m, path, name, (size_t)len, err) != 0)
            return -1;
        c.p += len;
        c.left -= (size_t)len;
        if (imx_i32(&c, &ncall) != 0 || imx_i32(&c, &nval) != 0)
            return memra_fail(err, "%s: legacy imatrix: entry '%.*s': truncated header", path,
                              (int)len, name);
        if (ncall < 0)
            return memra_fail(err, "%s: legacy imatrix: entry '%.*s': negative call count %d",
                              path, (int)len, name, (int)ncall);
        if (nval < 1 || (size_t)nval > c.left / 4)
            return memra_fail(err,
                              "%s: legacy imatrix: entry '%.*s': %d values do not fit the %zu "
                              "bytes left",
                              path, (int)len, name, (int)nval, c.left);
        imatrix_entry *e = imatrix_push(m, &cap);
        e->name = xmalloc((size_t)len + 1);
        memcpy(e->name, name, (size_t)len);
        e->name[len] = 0;
        e->n_values = nval;
        e->n_calls = ncall;
        e->values = xmalloc((size_t)nval * sizeof(float));
        for (int32_t j = 0; j < nval; j++) {
            float v;
            memcpy(&v, c.p + 4 * (size_t)j, 4);
            if (!isfinite(v) || v < 0)
                return memra_fail(err, "%s: entry '%s': value %d is %g (must be finite and >= 0)",
                                  path, e->name, (int)j, (double)v);
            /* stored as mean * ncall; llama.cpp divides when ncall > 0 */
            e->values[j] = ncall > 0 ? (float)((double)v / ncall) : v;
        }
        c.p += 4 * (size_t)nval;
        c.left -= 4 * (size_t)nval;
    }
    if (c.left == 0)
        return 0;
    /* optional trailer: chunk count and the dataset's name, nothing after */
    int32_t chunks, dlen;
    if (imx_i32(&c, &chunks) != 0 || imx_i32(&c, &dlen) != 0)
        return memra_fail(err, "%s: legacy imatrix: %zu stray bytes after the entries", path,
                          c.left);
    if (chunks < 0)
        return memra_fail(err, "%s: legacy imatrix: negative chunk count %d", path, (int)chunks);
    if (dlen < 0 || (size_t)dlen != c.left)
        return memra_fail(err,
                          "%s: legacy imatrix: dataset name length %d does not match the %zu "
                          "bytes left",
                          path, (int)dlen, c.left);
    if (memchr(c.p, 0, (size_t)dlen) || !utf8_valid(c.p, (size_t)dlen))
        return memra_fail(err, "%s: legacy imatrix: dataset name has a NUL or invalid UTF-8",
                          path);
    m->n_chunks = chunks;
    m->dataset = xmalloc((size_t)dlen + 1);
    memcpy(m->dataset, c.p, (size_t)dlen);
    m->dataset[dlen] = 0;
    return 0;
}

/* ---- GGUF ---- */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* A sums or counts tensor: F32, at most 2-D (ggml drops trailing 1 dims). */
static int imatrix_check_f32_2d(const char *path, const gguf_tensor *t, memra_err *err)
{
    if (t->type != DT_F32)
        return memra_fail(err, "%s: tensor '%s' is %s, expected F32", path, t->name,
                          dtype_get(t->type) ? dtype_get(t->type)->name : "?");
    if (t->ne[2] != 1 || t->ne[3] != 1)
        return memra_fail(err, "%s: tensor '%s' has %d dimensions, expected at most 2", path,
                          t->name, t->n_dims);
    if (t->ne[0] < 1 || t->ne[1] < 1)
        return memra_fail(err, "%s: tensor '%s' is empty", path, t->name);
    return 0;
}

static float gguf_f32_at(const gguf_tensor *t, int64_t i)
{
    float v;
    memcpy(&v, t->data + 4 * i, 4);
    return v;
}

/* One entry from its two tensors. Per matrix (expert) j the mean is
 * in_sum2[j] / counts[j]; an expert that never saw a token gets 1.0, the
 * neutral importance llama-quantize substitutes. */
static int imatrix_entry_from_gguf(const char *path, const gguf_tensor *sums,
                                   const gguf_tensor *counts, imatrix_entry *e, memra_err *err)
{
    if (imatrix_check_f32_2d(path, sums, err) != 0 || imatrix_check_f32_2d(path, counts, err) != 0)
        return -1;
    int64_t cols = sums->ne[0], nmat = sums->ne[1];
    if (counts->ne[0] != 1 || counts->ne[1] != nmat)
        return memra_fail(err, "%s: entry '%s': counts has shape [%lld, %lld], expected [1, %lld]",
                          path, e->name, (long long)counts->ne[0], (long long)counts->ne[1],
                          (long long)nmat);
    if (cols * nmat > INT32_MAX)
        return memra_fail(err, "%s: entry '%s': %lld values is too many", path, e->name,
                          (long long)(cols * nmat));
    e->n_values = cols * nmat;
    e->values = xmalloc((size_t)e->n_values * sizeof(float));
    double max_count = 0;
    for (int64_t j = 0; j < nmat; j++) {
        float cnt = gguf_f32_at(counts, j);
        if (!isfinite(cnt) || cnt < 0 || cnt > (float)INT32_MAX)
            return memra_fail(err, "%s: entry '%s': count %lld is %g", path, e->name, (long long)j,
                              (double)cnt);
        if (cnt > max_count)
            max_count = cnt;
        for (int64_t i = 0; i < cols; i++) {
            float s = gguf_f32_at(sums, j * cols + i);
            if (!isfinite(s) || s < 0)
                return memra_fail(err, "%s: entry '%s': sum %lld is %g (must be finite and >= 0)",
                                  path, e->name, (long long)(j * cols + i), (double)s);
            e->values[j * cols + i] = cnt > 0 ? (float)((double)s / cnt) : 1.0f;
        }
    }
    e->n_calls = (int32_t)max_count;
    return 0;
}

/* imatrix.datasets is a string array; several (merged matrices) are joined
 * with ", " since the struct has one name. */
static int imatrix_gguf_dataset(const char *path, const gguf_file *f, imatrix *m, memra_err *err)
{
    const gguf_kv *kv = gguf_find_kv(f, "imatrix.datasets");
    if (!kv)
        return 0;
    if (kv->value.type != GGUF_ARRAY || kv->value.v.arr.elem_type != GGUF_STRING)
        return memra_fail(err, "%s: imatrix.datasets is %s, expected an array of strings", path,
                          gguf_vtype_name(kv->value.type));
    const gguf_str *s = kv->value.v.arr.data;
    strbuf sb;
    sb_init(&sb);
    for (uint64_t i = 0; i < kv->value.v.arr.n; i++) {
        if (memchr(s[i].str, 0, s[i].len)) {
            sb_free(&sb);
            return memra_fail(err, "%s: imatrix.datasets[%llu] has a NUL", path,
                              (unsigned long long)i);
        }
        if (i)
            sb_puts(&sb, ", ");
        sb_append(&sb, s[i].str, s[i].len);
    }
    m->dataset = xstrdup(sb.len ? sb.data : "");
    sb_free(&sb);
    return 0;
}

static int imatrix_read_gguf(const char *path, imatrix *m, memra_err *err)
{
    gguf_file f;
    if (gguf_open(path, &f, err) != 0)
        return -1;
    int rc = -1;
    const gguf_kv *type = gguf_find_kv(&f, "general.type");
    if (type && (type->value.type != GGUF_STRING || strcmp(type->value.v.s.str, "imatrix") != 0)) {
        memra_fail(err, "%s: not an imatrix (general.type is '%s')", path,
                   type->value.type == GGUF_STRING ? type->value.v.s.str : "not a string");
        goto done;
    }
    uint64_t chunks;
    if (gguf_get_u64(&f, "imatrix.chunk_count", &chunks, err) != 0) {
        memra_wrap(err, "%s: not an imatrix", path);
        goto done;
    }
    if (chunks > INT32_MAX) {
        memra_fail(err, "%s: imatrix.chunk_count %llu is too large", path,
                   (unsigned long long)chunks);
        goto done;
    }
    m->n_chunks = (int32_t)chunks;
    const gguf_kv *csize = gguf_find_kv(&f, "imatrix.chunk_size");
    uint64_t unused;
    if (csize && gguf_get_u64(&f, "imatrix.chunk_size", &unused, err) != 0)
        goto done;
    if (imatrix_gguf_dataset(path, &f, m, err) != 0)
        goto done;

    int cap = 0;
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        const gguf_tensor *sums = &f.tensors[i];
        if (!ends_with(sums->name, IMATRIX_SUM_SUFFIX)) {
            if (ends_with(sums->name, IMATRIX_COUNT_SUFFIX)) {
                size_t base = strlen(sums->name) - strlen(IMATRIX_COUNT_SUFFIX);
                char want[512];
                snprintf(want, sizeof want, "%.*s" IMATRIX_SUM_SUFFIX, (int)base, sums->name);
                if (!gguf_find_tensor(&f, want)) {
                    memra_fail(err, "%s: tensor '%s' has no matching '%s'", path, sums->name, want);
                    goto done;
                }
            }
            continue; /* ".in_sum" (plain sums) and anything else: not ours */
        }
        size_t base = strlen(sums->name) - strlen(IMATRIX_SUM_SUFFIX);
        if (base > 200) {
            memra_fail(err, "%s: tensor name '%.40s...' is too long", path, sums->name);
            goto done;
        }
        if (imatrix_check_name(m, path, sums->name, base, err) != 0)
            goto done;
        char want[256];
        snprintf(want, sizeof want, "%.*s" IMATRIX_COUNT_SUFFIX, (int)base, sums->name);
        const gguf_tensor *counts = gguf_find_tensor(&f, want);
        if (!counts) {
            memra_fail(err, "%s: tensor '%s' has no matching '%s'", path, sums->name, want);
            goto done;
        }
        imatrix_entry *e = imatrix_push(m, &cap);
        e->name = xmalloc(base + 1);
        memcpy(e->name, sums->name, base);
        e->name[base] = 0;
        if (imatrix_entry_from_gguf(path, sums, counts, e, err) != 0)
            goto done;
    }
    if (m->n_entries == 0) {
        memra_fail(err, "%s: no imatrix entries (no '*" IMATRIX_SUM_SUFFIX "' tensors)", path);
        goto done;
    }
    rc = 0;
done:
    gguf_close(&f);
    return rc;
}

int imatrix_read(const char *path, imatrix *out, memra_err *err)
{
    memset(out, 0, sizeof *out);
    mapped_file mf;
    if (map_file(path, &mf, err) != 0)
        return -1;
    int is_gguf = mf.size >= 4 && memcmp(mf.data, "GGUF", 4) == 0;
    int rc;
    if (is_gguf) {
        unmap_file(&mf);
        rc = imatrix_read_gguf(path, out, err);
    } else {
        rc = imatrix_read_legacy(path, &mf, out, err);
        unmap_file(&mf);
    }
    if (rc != 0)
        imatrix_free(out);
    return rc;
}

/* ---- writing ---- */

static int imatrix_validate(const char *path, const imatrix *m, memra_err *err)
{
    if (!m || m->n_entries < 1 || !m->entries)
        return memra_fail(err, "%s: refusing to write an empty imatrix", path);
    if (m->n_chunks < 0)
        return memra_fail(err, "%s: negative chunk count %d", path, (int)m->n_chunks);
    for (int i = 0; i < m->n_entries; i++) {
        const imatrix_entry *e = &m->entries[i];
        if (!e->name || !e->name[0])
            return memra_fail(err, "%s: entry %d has no name", path, i);
        for (int j = 0; j < i; j++)
            if (strcmp(m->entries[j].name, e->name) == 0)
                return memra_fail(err, "%s: entry '%s' appears twice", path, e->name);
        if (e->n_values < 1 || e->n_values > INT32_MAX || !e->values)
            return memra_fail(err, "%s: entry '%s' has %lld values", path, e->name,
                              (long long)e->n_values);
        if (e->n_calls < 1)
            return memra_fail(err, "%s: entry '%s' has no calls (%d)", path, e->name,
                              (int)e->n_calls);
        for (int64_t j = 0; j < e->n_values; j++)
            if (!isfinite(e->values[j]) || e->values[j] < 0)
                return memra_fail(err, "%s: entry '%s': value %lld is %g", path, e->name,
                                  (long long)j, (double)e->values[j]);
    }
    return 0;
}

int imatrix_write(const char *path, const imatrix *m, memra_err *err)
{
    if (imatrix_validate(path, m, err) != 0)
        return -1;
    gguf_writer *w = gguf_writer_new();
    int32_t max_calls = 0;
    for (int i = 0; i < m->n_entries; i++)
        if (m->entries[i].n_calls > max_calls)
            max_calls = m->entries[i].n_calls;
    /* chunk_size is only informative for llama.cpp (it divides counts by it
     * to print chunks): rows per chunk of the densest entry. */
    uint32_t chunk_size = (uint32_t)(m->n_chunks > 0 ? max_calls / m->n_chunks : max_calls);
    const char *datasets[1] = {m->dataset ? m->dataset : ""};
    gguf_writer_set_str(w, "general.type", "imatrix");
    gguf_writer_set_arr(w, "imatrix.datasets", GGUF_STRING, 1, datasets);
    gguf_writer_set_u32(w, "imatrix.chunk_count", (uint32_t)m->n_chunks);
    gguf_writer_set_u32(w, "imatrix.chunk_size", chunk_size);

    /* the writer keeps pointers until written: one buffer for all sums,
     * one for all counts */
    int64_t total = 0;
    for (int i = 0; i < m->n_entries; i++)
        total += m->entries[i].n_values;
    float *sums = xmalloc((size_t)total * sizeof(float));
    float *counts = xmalloc((size_t)m->n_entries * sizeof(float));
    int rc = -1;
    int64_t off = 0;
    for (int i = 0; i < m->n_entries; i++) {
        const imatrix_entry *e = &m->entries[i];
        char name[256];
        for (int64_t j = 0; j < e->n_values; j++)
            sums[off + j] = (float)((double)e->values[j] * e->n_calls);
        counts[i] = (float)e->n_calls;
        int64_t ne_s[2] = {e->n_values, 1}, ne_c[2] = {1, 1};
        if (strlen(e->name) + strlen(IMATRIX_SUM_SUFFIX) > GGUF_WRITER_MAX_NAME) {
            memra_fail(err, "%s: entry '%s': name too long for a GGUF tensor with its suffix",
                       path, e->name);
            goto done;
        }
        snprintf(name, sizeof name, "%s" IMATRIX_SUM_SUFFIX, e->name);
        if (gguf_writer_add_tensor(w, name, DT_F32, 2, ne_s, sums + off,
                                   (uint64_t)e->n_values * 4, err) != 0)
            goto done;
        snprintf(name, sizeof name, "%s" IMATRIX_COUNT_SUFFIX, e->name);
        if (gguf_writer_add_tensor(w, name, DT_F32, 2, ne_c, &counts[i], 4, err) != 0)
            goto done;
        off += e->n_values;
    }
    rc = gguf_writer_write(w, path, err);
done:
    if (rc != 0)
        memra_wrap(err, "writing imatrix");
    gguf_writer_free(w);
    free(sums);
    free(counts);
    return rc;
}

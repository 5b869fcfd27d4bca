#include "format/ranks.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/mapfile.h"
#include "core/strbuf.h"
#include "format/gguf.h"

typedef struct {
    uint64_t count;
    int32_t id;
} rank_entry;

/* Count descending, id ascending: the order is total, so the ranks do not
 * depend on the sort's stability. */
static int by_count_then_id(const void *a, const void *b)
{
    const rank_entry *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

void ranks_from_counts(const uint64_t *counts, int32_t n_vocab, int32_t top, int32_t *d2t)
{
    MEMRA_ASSERT(top >= 1 && top <= n_vocab);
    /* Only the counted ids need sorting; the unseen ones follow in id
     * order, which a walk of the vocabulary gives for free. */
    rank_entry *seen = xmalloc((size_t)n_vocab * sizeof *seen);
    int32_t n_seen = 0;
    for (int32_t id = 0; id < n_vocab; id++)
        if (counts[id] > 0)
            seen[n_seen++] = (rank_entry){counts[id], id};
    qsort(seen, (size_t)n_seen, sizeof *seen, by_count_then_id);
    int32_t r = 0;
    for (int32_t i = 0; i < n_seen && r < top; i++)
        d2t[r++] = seen[i].id;
    for (int32_t id = 0; id < n_vocab && r < top; id++)
        if (counts[id] == 0)
            d2t[r++] = id;
    free(seen);
}

char *ranks_txt_path(const char *gguf_path)
{
    size_t len = strlen(gguf_path);
    const char *ext = ".gguf";
    size_t el = strlen(ext);
    size_t stem = len >= el && strcmp(gguf_path + len - el, ext) == 0 ? len - el : len;
    char *out = xmalloc(stem + 5);
    memcpy(out, gguf_path, stem);
    memcpy(out + stem, ".txt", 5);
    return out;
}

/* Distinct and in range: a rank file with a repeated or foreign id would
 * make a drafter propose from a table nobody counted. */
static int check_ids(const char *what, const int32_t *d2t, int32_t n, int32_t n_vocab,
                     memra_err *err)
{
    uint8_t *seen = xcalloc((size_t)n_vocab, 1);
    int rc = 0;
    for (int32_t r = 0; r < n && rc == 0; r++) {
        int32_t id = d2t[r];
        if (id < 0 || id >= n_vocab)
            rc = memra_fail(err, "%s: rank %" PRId32 " holds id %" PRId32
                            ", outside the vocabulary of %" PRId32, what, r, id, n_vocab);
        else if (seen[id])
            rc = memra_fail(err, "%s: id %" PRId32 " appears twice (again at rank %" PRId32 ")",
                            what, id, r);
        else
            seen[id] = 1;
    }
    free(seen);
    return rc;
}

int ranks_write(const char *path, const int32_t *d2t, int32_t n, int32_t n_vocab,
                memra_err *err)
{
    if (n < 1 || n > n_vocab)
        return memra_fail(err, "%s: %" PRId32 " ranks for a vocabulary of %" PRId32
                          " (want 1 to the vocabulary size)", path, n, n_vocab);
    if (check_ids(path, d2t, n, n_vocab, err) != 0)
        return -1;
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_u32(w, RANKS_KEY_N_VOCAB, (uint32_t)n_vocab);
    int64_t ne[1] = {n};
    int rc = gguf_writer_add_tensor(w, RANKS_TENSOR, DT_I32, 1, ne, d2t,
                                    (uint64_t)n * sizeof(int32_t), err);
    if (rc == 0)
        rc = gguf_writer_write(w, path, err);
    gguf_writer_free(w);
    if (rc != 0)
        return -1;
    strbuf sb;
    sb_init(&sb);
    for (int32_t r = 0; r < n; r++)
        sb_printf(&sb, "%" PRId32 "\n", d2t[r]);
    char *txt = ranks_txt_path(path);
    rc = write_file_atomic(txt, sb.data, sb.len, err);
    free(txt);
    sb_free(&sb);
    return rc;
}

int ranks_read(const char *path, int32_t **d2t, int32_t *n, int32_t *n_vocab, memra_err *err)
{
    *d2t = NULL;
    *n = 0;
    *n_vocab = 0;
    gguf_file f;
    if (gguf_open(path, &f, err) != 0)
        return memra_wrap(err, "rank file");
    int rc = 0;
    const gguf_tensor *t = gguf_find_tensor(&f, RANKS_TENSOR);
    uint64_t nv = 0;
    if (!t) {
        rc = memra_fail(err, "%s: not a rank file: no tensor '%s' (memra-trim-ranks writes "
                        "one)", path, RANKS_TENSOR);
    } else if (t->type != DT_I32 || t->n_dims != 1) {
        const dtype_info *di = dtype_get(t->type);
        rc = memra_fail(err, "%s: tensor '%s' must be a 1-D I32 vector, not %s with %d dims",
                        path, RANKS_TENSOR, di ? di->name : "an unknown type", t->n_dims);
    } else if (gguf_get_u64(&f, RANKS_KEY_N_VOCAB, &nv, err) != 0) {
        rc = memra_wrap(err, "%s: not a rank file", path);
    } else if (nv < 1 || nv > INT32_MAX || t->ne[0] < 1 || t->ne[0] > (int64_t)nv) {
        rc = memra_fail(err, "%s: %" PRId64 " ranks for a vocabulary of %" PRIu64
                        " (want 1 to the vocabulary size)", path, t->ne[0], nv);
    }
    if (rc == 0) {
        int32_t cnt = (int32_t)t->ne[0];
        int32_t *ids = xmalloc((size_t)cnt * sizeof *ids);
        memcpy(ids, t->data, (size_t)cnt * sizeof *ids);
        if (check_ids(path, ids, cnt, (int32_t)nv, err) != 0) {
            free(ids);
            rc = -1;
        } else {
            *d2t = ids;
            *n = cnt;
            *n_vocab = (int32_t)nv;
        }
    }
    gguf_close(&f);
    return rc;
}

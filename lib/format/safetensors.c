/* safetensors reading: one file, a caller's buffer, or a sharded checkpoint
 * dir. The writer is in safetensors_write.c.
 *
 * Every header field is checked before any tensor is handed out, and each
 * error names the file, the tensor and the value that was wrong. The data
 * buffer is never copied: tensors point into the map (or the caller's
 * buffer). */
#include "format/safetensors.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/json.h"
#include "core/strbuf.h"

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"

/* ---- message helpers ---- */

/* Names and values come from the file and go into a one-line error: control
 * bytes become '?' and long strings are cut (at a character boundary), so a
 * hostile header can neither break the line nor flood the message. */
#define SHOW_MAX 160
typedef struct {
    char s[SHOW_MAX + 4];
} shown;

static const char *show(shown *b, const char *s)
{
    size_t n = 0;
    for (; s[n] && n < SHOW_MAX; n++)
        b->s[n] = ((unsigned char)s[n] < 0x20 || s[n] == 0x7f) ? '?' : s[n];
    if (s[n]) {
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
        memcpy(b->s + n, "...", 3);
        n += 3;
    }
    b->s[n] = '\0';
    return b->s;
}

/* A JSON value as it was written (compact, cut to 60 bytes): what the error
 * shows for a value of the wrong kind. */
typedef struct {
    char s[72];
} shown_value;

static const char *show_value(shown_value *b, const json_t *v)
{
    /* A big container would be dumped whole only to be cut. */
    if ((json_is_array(v) && json_array_size(v) > 16) ||
        (json_is_object(v) && json_object_size(v) > 16)) {
        snprintf(b->s, sizeof b->s, "%s", json_is_array(v) ? "[...]" : "{...}");
        return b->s;
    }
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!text) {
        snprintf(b->s, sizeof b->s, "(unprintable)");
        return b->s;
    }
    shown tmp;
    const char *t = show(&tmp, text);
    size_t n = strlen(t);
    if (n > 60) {
        n = 60;
        while (n > 0 && ((unsigned char)t[n] & 0xC0) == 0x80)
            n--;
        snprintf(b->s, sizeof b->s, "%.*s...", (int)n, t);
    } else {
        snprintf(b->s, sizeof b->s, "%s", t);
    }
    free(text);
    return b->s;
}

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a JSON value";
}

/* jansson's parse errors quote the offending token raw, newlines
 * included; an error must stay one line. Returns -1. */
static int one_line(memra_err *err)
{
    for (char *c = err ? err->msg : NULL; c && *c; c++)
        if ((unsigned char)*c < 0x20)
            *c = '?';
    return -1;
}

/* "[4, 8]" */
static const char *show_shape(char *buf, size_t cap, int n, const int64_t *shape)
{
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (len < cap)
        snprintf(buf + len, cap - len, "]");
    return buf;
}

/* ---- building a set ---- */

typedef struct {
    st_set *set; /* its arena holds names and metadata */
    st_tensor *v;
    int n, cap;
} builder;

static int builder_push(builder *b, const st_tensor *t, const char *what, memra_err *err)
{
    if (b->n == INT_MAX)
        return memra_fail(err, "%s: more than %d tensors", what, INT_MAX);
    if (b->n == b->cap) {
        b->cap = b->cap ? (b->cap > INT_MAX / 2 ? INT_MAX : b->cap * 2) : 64;
        b->v = xrealloc(b->v, (size_t)b->cap * sizeof *b->v);
    }
    b->v[b->n++] = *t;
    return 0;
}

typedef struct {
    const char *name;
    int index;
} name_ref;

static int cmp_name_ref(const void *pa, const void *pb)
{
    const name_ref *a = pa, *b = pb;
    int c = strcmp(a->name, b->name);
    return c ? c : (a->index > b->index) - (a->index < b->index);
}

/* Move the tensors into the set's arena and build the by-name index. */
static void builder_finish(builder *b)
{
    st_set *s = b->set;
    s->n_tensors = b->n;
    s->tensors = arena_alloc(&s->mem, (size_t)b->n * sizeof *s->tensors);
    if (b->n)
        memcpy(s->tensors, b->v, (size_t)b->n * sizeof *s->tensors);
    name_ref *refs = xmalloc((size_t)(b->n ? b->n : 1) * sizeof *refs);
    for (int i = 0; i < b->n; i++)
        refs[i] = (name_ref){s->tensors[i].name, i};
    qsort(refs, (size_t)b->n, sizeof *refs, cmp_name_ref);
    s->name_order = arena_alloc(&s->mem, (size_t)b->n * sizeof *s->name_order);
    for (int i = 0; i < b->n; i++)
        s->name_order[i] = refs[i].index;
    free(refs);
    free(b->v);
    b->v = NULL;
}

/* ---- one file's header ---- */

/* One tensor entry as parsed, before the overlap check. */
typedef struct {
    const char *name;
    dtype type;
    int n_dims;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;
    int header_index;
} entry;

static int cmp_entry(const void *pa, const void *pb)
{
    const entry *a = pa, *b = pb;
    if (a->begin != b->begin)
        return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end)
        return a->end < b->end ? -1 : 1;
    return (a->header_index > b->header_index) - (a->header_index < b->header_index);
}

/* A string value with no NUL inside (jansson allows \u0000 in strings, but
 * a C string would silently cut it). */
static int is_plain_string(const json_t *v)
{
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

static int parse_meta(const json_t *meta, const char *what, st_set *set, int keep,
                      memra_err *err)
{
    shown_value sv;
    if (!json_is_object(meta))
        return memra_fail(err, "%s: __metadata__ is %s (%s), not an object of strings", what,
                          json_kind(meta), show_value(&sv, meta));
    size_t n = json_object_size(meta), i = 0;
    st_meta *out = keep ? arena_alloc(&set->mem, (n ? n : 1) * sizeof *out) : NULL;
    for (void *it = json_object_iter((json_t *)meta); it;
         it = json_object_iter_next((json_t *)meta, it)) {
        const char *key = json_object_iter_key(it);
        const json_t *v = json_object_iter_value(it);
        shown sk;
        if (strlen(key) != json_object_iter_key_len(it))
            return memra_fail(err, "%s: __metadata__ key '%s' contains a NUL byte", what,
                              show(&sk, key));
        if (!is_plain_string(v))
            return memra_fail(err, "%s: __metadata__ key '%s': value %s is %s, not a string%s",
                              what, show(&sk, key), show_value(&sv, v), json_kind(v),
                              json_is_string(v) ? " without NUL bytes" : "");
        if (keep) {
            out[i].key = arena_strdup(&set->mem, key);
            out[i].value = arena_strdup(&set->mem, json_string_value(v));
            i++;
        }
    }
    if (keep) {
        set->n_meta = (int)i;
        set->meta = out;
    }
    return 0;
}

/* Element count of a shape, refusing products that overflow int64 even
 * when a later dimension is 0: such a shape is never legitimate, and code
 * downstream multiplies partial shapes. */
static int shape_elements(int n, const int64_t *shape, int64_t *out)
{
    int64_t prod = 1;
    int zero = 0;
    for (int i = 0; i < n; i++) {
        if (shape[i] == 0) {
            zero = 1;
            continue;
        }
        if (prod > INT64_MAX / shape[i])
            return -1;
        prod *= shape[i];
    }
    *out = zero ? 0 : prod;
    return 0;
}

static int is_nonneg_int(const json_t *v)
{
    return json_is_integer(v) && json_integer_value(v) >= 0;
}

static int parse_entry(const char *what, const char *name, const json_t *obj, uint64_t buf_size,
                       entry *e, memra_err *err)
{
    shown sn, sk;
    shown_value sv;
    const char *tn = show(&sn, name);
    if (!json_is_object(obj))
        return memra_fail(err, "%s: tensor '%s': entry is %s (%s), not an object", what, tn,
                          json_kind(obj), show_value(&sv, obj));
    const json_t *jdtype = NULL, *jshape = NULL, *joffs = NULL;
    for (void *it = json_object_iter((json_t *)obj); it;
         it = json_object_iter_next((json_t *)obj, it)) {
        const char *key = json_object_iter_key(it);
        const json_t *v = json_object_iter_value(it);
        int plain = strlen(key) == json_object_iter_key_len(it);
        if (plain && !strcmp(key, "dtype"))
            jdtype = v;
        else if (plain && !strcmp(key, "shape"))
            jshape = v;
        else if (plain && !strcmp(key, "data_offsets"))
            joffs = v;
        else
            return memra_fail(err, "%s: tensor '%s': unknown key \"%s\"%s", what, tn,
                              show(&sk, key), plain ? "" : " (with a NUL byte)");
    }
    if (!jdtype)
        return memra_fail(err, "%s: tensor '%s': missing \"dtype\"", what, tn);
    if (!jshape)
        return memra_fail(err, "%s: tensor '%s': missing \"shape\"", what, tn);
    if (!joffs)
        return memra_fail(err, "%s: tensor '%s': missing \"data_offsets\"", what, tn);

    e->type = is_plain_string(jdtype) ? dtype_from_st_name(json_string_value(jdtype)) : DT_INVALID;
    if (e->type == DT_INVALID)
        return memra_fail(err, "%s: tensor '%s': unknown dtype %s", what, tn,
                          show_value(&sv, jdtype));
    const dtype_info *info = dtype_get(e->type);

    if (!json_is_array(jshape))
        return memra_fail(err, "%s: tensor '%s': shape %s is %s, not an array", what, tn,
                          show_value(&sv, jshape), json_kind(jshape));
    size_t nd = json_array_size(jshape);
    if (nd > ST_MAX_DIMS)
        return memra_fail(err, "%s: tensor '%s': shape has %zu dimensions, more than the %d allowed",
                          what, tn, nd, ST_MAX_DIMS);
    e->n_dims = (int)nd;
    for (size_t i = 0; i < nd; i++) {
        const json_t *d = json_array_get(jshape, i);
        if (!is_nonneg_int(d))
            return memra_fail(err, "%s: tensor '%s': shape[%zu] is %s, not a non-negative integer",
                              what, tn, i, show_value(&sv, d));
        e->shape[i] = json_integer_value(d);
    }
    char shape_text[ST_MAX_DIMS * 24 + 4];
    show_shape(shape_text, sizeof shape_text, e->n_dims, e->shape);
    int64_t elements;
    if (shape_elements(e->n_dims, e->shape, &elements) != 0)
        return memra_fail(err, "%s: tensor '%s': shape %s overflows the element count", what, tn,
                          shape_text);
    int64_t need = dtype_row_bytes(e->type, elements);
    if (need < 0)
        return memra_fail(err, "%s: tensor '%s': %s %s is too large to address", what, tn,
                          info->st_name, shape_text);

    if (!json_is_array(joffs) || json_array_size(joffs) != 2 ||
        !is_nonneg_int(json_array_get(joffs, 0)) || !is_nonneg_int(json_array_get(joffs, 1)))
        return memra_fail(err,
                          "%s: tensor '%s': data_offsets %s is not [begin, end] with "
                          "non-negative integers",
                          what, tn, show_value(&sv, joffs));
    e->begin = (uint64_t)json_integer_value(json_array_get(joffs, 0));
    e->end = (uint64_t)json_integer_value(json_array_get(joffs, 1));
    if (e->begin > e->end)
        return memra_fail(err, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                               ") are reversed (begin > end)",
                          what, tn, e->begin, e->end);
    if (e->end > buf_size)
        return memra_fail(err, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                               ") run past the end of the %" PRIu64 "-byte data buffer",
                          what, tn, e->begin, e->end, buf_size);
    if (e->end - e->begin != (uint64_t)need)
        return memra_fail(err, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                               ") hold %" PRIu64 " bytes but %s %s needs %" PRId64,
                          what, tn, e->begin, e->end, e->end - e->begin, info->st_name,
                          shape_text, need);
    return 0;
}

/* Ranges sorted by begin; an empty range holds no bytes and so overlaps
 * nothing. */
static int check_overlaps(const entry *es, int n, const char *what, memra_err *err)
{
    const entry *last = NULL;
    for (int i = 0; i < n; i++) {
        const entry *e = &es[i];
        if (e->begin == e->end)
            continue;
        if (last && e->begin < last->end) {
            shown a, b;
            return memra_fail(err, "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                                   ") overlap tensor '%s' at [%" PRIu64 ", %" PRIu64 ")",
                              what, show(&a, e->name), e->begin, e->end, show(&b, last->name),
                              last->begin, last->end);
        }
        last = e;
    }
    return 0;
}

static int parse_header_json(builder *b, const json_t *root, const char *what,
                             const uint8_t *buf, uint64_t buf_size, int file_index,
                             int keep_meta, memra_err *err)
{
    size_t cap = json_object_size(root);
    entry *es = xcalloc(cap ? cap : 1, sizeof *es);
    int n = 0, rc = -1;
    for (void *it = json_object_iter((json_t *)root); it;
         it = json_object_iter_next((json_t *)root, it)) {
        const char *key = json_object_iter_key(it);
        const json_t *v = json_object_iter_value(it);
        shown sk;
        if (strlen(key) != json_object_iter_key_len(it)) {
            memra_fail(err, "%s: tensor name '%s' contains a NUL byte", what, show(&sk, key));
            goto out;
        }
        if (!strcmp(key, "__metadata__")) {
            if (parse_meta(v, what, b->set, keep_meta, err) != 0)
                goto out;
            continue;
        }
        if (!*key) {
            memra_fail(err, "%s: a tensor has an empty name", what);
            goto out;
        }
        /* jansson refuses invalid UTF-8 in a string, but names are checked
         * here as well, since nothing downstream may assume otherwise. */
        size_t bad = utf8_invalid_at((const uint8_t *)key, strlen(key));
        if (bad < strlen(key)) {
            memra_fail(err, "%s: tensor name '%s' is not valid UTF-8 (byte %zu)", what,
                       show(&sk, key), bad);
            goto out;
        }
        if (parse_entry(what, key, v, buf_size, &es[n], err) != 0)
            goto out;
        es[n].name = arena_strdup(&b->set->mem, key);
        es[n].header_index = n;
        n++;
    }
    /* jansson's object order is not a promise of file order; the data
     * offsets are, since the reference writer lays data out in header order. */
    qsort(es, (size_t)n, sizeof *es, cmp_entry);
    if (check_overlaps(es, n, what, err) != 0)
        goto out;
    for (int i = 0; i < n; i++) {
        st_tensor t = {0};
        t.name = es[i].name;
        t.type = es[i].type;
        t.n_dims = es[i].n_dims;
        memcpy(t.shape, es[i].shape, sizeof t.shape);
        t.nbytes = es[i].end - es[i].begin;
        t.data = buf + es[i].begin;
        t.file_index = file_index;
        if (builder_push(b, &t, what, err) != 0)
            goto out;
    }
    rc = 0;
out:
    free(es);
    return rc;
}

/* Validate one file's bytes and append its tensors to the builder. */
static int parse_file(builder *b, const uint8_t *data, size_t size, const char *what,
                      int file_index, int keep_meta, memra_err *err)
{
    if (size < 8)
        return memra_fail(err, "%s: file is %zu bytes, too short for the 8-byte header length",
                          what, size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | data[i];
    if (n > ST_HEADER_MAX)
        return memra_fail(err, "%s: header length %" PRIu64 " exceeds the %u-byte limit", what, n,
                          ST_HEADER_MAX);
    if (n > size - 8)
        return memra_fail(err, "%s: header length %" PRIu64
                               " runs past the end of the file (%zu bytes)",
                          what, n, size);
    const uint8_t *hdr = data + 8;
    size_t bad = utf8_invalid_at(hdr, (size_t)n);
    if (bad < n)
        return memra_fail(err, "%s: header is not valid UTF-8 at file offset %zu (byte 0x%02x)",
                          what, 8 + bad, hdr[bad]);
    char hwhat[512];
    snprintf(hwhat, sizeof hwhat, "%s: header", what);
    json_t *root = json_parse_buf((const char *)hdr, (size_t)n, hwhat, err);
    if (!root)
        return one_line(err);
    int rc;
    if (!json_is_object(root)) {
        shown_value sv;
        rc = memra_fail(err, "%s: header is %s (%s), not a JSON object", what, json_kind(root),
                        show_value(&sv, root));
    } else {
        rc = parse_header_json(b, root, what, hdr + n, size - 8 - n, file_index, keep_meta, err);
    }
    json_decref(root);
    return rc;
}

/* ---- opening ---- */

static void set_init(st_set *out)
{
    memset(out, 0, sizeof *out);
    arena_init(&out->mem, 0);
}

void st_close(st_set *s)
{
    for (int i = 0; i < s->n_files; i++)
        unmap_file(&s->files[i]);
    arena_free(&s->mem);
    memset(s, 0, sizeof *s);
}

int st_open_buffer(const uint8_t *data, size_t size, const char *what, st_set *out,
                   memra_err *err)
{
    set_init(out);
    builder b = {out, NULL, 0, 0};
    if (parse_file(&b, data, size, what ? what : "buffer", 0, 1, err) != 0) {
        free(b.v);
        st_close(out);
        return -1;
    }
    builder_finish(&b);
    return 0;
}

int st_open_file(const char *path, st_set *out, memra_err *err)
{
    set_init(out);
    mapped_file mf;
    if (map_file(path, &mf, err) != 0)
        return -1;
    out->files = arena_alloc(&out->mem, sizeof *out->files);
    out->files[0] = mf;
    out->n_files = 1;
    builder b = {out, NULL, 0, 0};
    if (parse_file(&b, mf.data, mf.size, path, 0, 1, err) != 0) {
        free(b.v);
        st_close(out);
        return -1;
    }
    builder_finish(&b);
    return 0;
}

static char *join_path(const char *dir, const char *name)
{
    strbuf sb;
    sb_init(&sb);
    sb_printf(&sb, "%s/%s", dir, name);
    return sb_take(&sb);
}

static int cmp_str(const void *pa, const void *pb)
{
    return strcmp(*(const char *const *)pa, *(const char *const *)pb);
}

/* A shard name from the index must name a file in the checkpoint dir
 * itself: anything with a path separator or ".." could reach outside it. */
static int shard_name_ok(const char *s)
{
    return *s && !strchr(s, '/') && !strstr(s, "..");
}

/* Every tensor must be in exactly one shard, and in the shard the index
 * names; both directions are checked so that neither a stale index nor a
 * stray shard tensor goes unnoticed. */
static int check_index(const st_set *s, const json_t *wm, const char *const *shards,
                       const char *dir, const char *index_path, memra_err *err)
{
    json_t *seen = json_object();
    int rc = -1;
    shown sa, sb, sc;
    for (int i = 0; i < s->n_tensors; i++) {
        const st_tensor *t = &s->tensors[i];
        json_t *prev = json_object_get(seen, t->name);
        if (prev) {
            memra_fail(err, "%s: duplicate tensor '%s' in %s and %s", dir, show(&sa, t->name),
                       show(&sb, shards[json_integer_value(prev)]),
                       show(&sc, shards[t->file_index]));
            goto out;
        }
        json_object_set_new_nocheck(seen, t->name, json_integer(t->file_index));
    }
    for (int i = 0; i < s->n_tensors; i++) {
        const st_tensor *t = &s->tensors[i];
        const json_t *want = json_object_get(wm, t->name);
        if (!want) {
            memra_fail(err, "%s: tensor '%s' in shard %s is not in the index", index_path,
                       show(&sa, t->name), show(&sb, shards[t->file_index]));
            goto out;
        }
        if (strcmp(json_string_value(want), shards[t->file_index]) != 0) {
            memra_fail(err, "%s: tensor '%s' is in shard %s, but the index names %s", index_path,
                       show(&sa, t->name), show(&sb, shards[t->file_index]),
                       show(&sc, json_string_value(want)));
            goto out;
        }
    }
    for (void *it = json_object_iter((json_t *)wm); it;
         it = json_object_iter_next((json_t *)wm, it)) {
        const char *name = json_object_iter_key(it);
        if (!json_object_get(seen, name)) {
            memra_fail(err, "%s: tensor '%s' is not in %s, the shard the index names", index_path,
                       show(&sa, name), show(&sb, json_string_value(json_object_iter_value(it))));
            goto out;
        }
    }
    rc = 0;
out:
    json_decref(seen);
    return rc;
}

/* The distinct shard names of a weight map, sorted (which is shard order
 * for the model-0000i-of-0000n names); validates every entry on the way. */
static const char **index_shards(const json_t *wm, const char *index_path, int *n_out,
                                 memra_err *err)
{
    json_t *distinct = json_object();
    const char **names = xmalloc((json_object_size(wm) + 1) * sizeof *names);
    int n = 0;
    for (void *it = json_object_iter((json_t *)wm); it;
         it = json_object_iter_next((json_t *)wm, it)) {
        const char *tensor = json_object_iter_key(it);
        const json_t *v = json_object_iter_value(it);
        shown sa, sb;
        shown_value sv;
        if (strlen(tensor) != json_object_iter_key_len(it) || !*tensor) {
            memra_fail(err, "%s: weight_map has a tensor name '%s' that is empty or holds a NUL",
                       index_path, show(&sa, tensor));
            goto fail;
        }
        if (!is_plain_string(v)) {
            memra_fail(err, "%s: weight_map: tensor '%s' maps to %s, not a shard file name",
                       index_path, show(&sa, tensor), show_value(&sv, v));
            goto fail;
        }
        const char *shard = json_string_value(v);
        if (!shard_name_ok(shard)) {
            memra_fail(err,
                       "%s: weight_map: tensor '%s': shard name '%s' must be a plain file name "
                       "in the directory (no '/' or '..')",
                       index_path, show(&sa, tensor), show(&sb, shard));
            goto fail;
        }
        if (!json_object_get(distinct, shard)) {
            json_object_set_new_nocheck(distinct, shard, json_true());
            names[n++] = shard;
        }
    }
    json_decref(distinct);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    *n_out = n;
    return names;
fail:
    json_decref(distinct);
    free(names);
    return NULL;
}

static int open_sharded(const char *dir, const char *index_path, st_set *out, memra_err *err)
{
    json_t *idx = json_load_path(index_path, ST_HEADER_MAX, err);
    if (!idx)
        return one_line(err);
    const char **shards = NULL;
    builder b = {out, NULL, 0, 0};
    int rc = -1, n_shards = 0;
    shown_value sv;
    const json_t *wm = json_object_get(idx, "weight_map");
    if (!json_is_object(idx)) {
        memra_fail(err, "%s: is %s, not a JSON object", index_path, json_kind(idx));
        goto out;
    }
    if (!wm) {
        memra_fail(err, "%s: missing \"weight_map\"", index_path);
        goto out;
    }
    if (!json_is_object(wm)) {
        memra_fail(err, "%s: weight_map is %s (%s), not an object", index_path, json_kind(wm),
                   show_value(&sv, wm));
        goto out;
    }
    if (json_object_size(wm) == 0) {
        memra_fail(err, "%s: weight_map names no tensors", index_path);
        goto out;
    }
    shards = index_shards(wm, index_path, &n_shards, err);
    if (!shards)
        goto out;
    out->files = arena_alloc(&out->mem, (size_t)n_shards * sizeof *out->files);
    for (int i = 0; i < n_shards; i++) {
        char *path = join_path(dir, shards[i]);
        int r = map_file(path, &out->files[i], err);
        free(path);
        if (r != 0) {
            memra_wrap(err, "%s", index_path);
            goto out;
        }
        out->n_files++;
        if (parse_file(&b, out->files[i].data, out->files[i].size, out->files[i].path, i, i == 0,
                       err) != 0)
            goto out;
    }
    builder_finish(&b);
    rc = check_index(out, wm, shards, dir, index_path, err);
out:
    free(b.v);
    free(shards);
    json_decref(idx);
    if (rc != 0)
        st_close(out);
    return rc;
}

int st_open_dir(const char *dir, st_set *out, memra_err *err)
{
    set_init(out);
    struct stat st;
    if (stat(dir, &st) != 0)
        return memra_fail(err, "%s: cannot open: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return memra_fail(err, "%s: not a directory", dir);
    char *index_path = join_path(dir, INDEX_NAME);
    int rc;
    if (stat(index_path, &st) == 0) {
        rc = open_sharded(dir, index_path, out, err);
    } else if (errno != ENOENT) {
        rc = memra_fail(err, "%s: cannot open: %s", index_path, strerror(errno));
    } else {
        char *single = join_path(dir, SINGLE_NAME);
        if (stat(single, &st) != 0 && errno == ENOENT)
            rc = memra_fail(err, "%s: neither %s nor %s found", dir, INDEX_NAME, SINGLE_NAME);
        else
            rc = st_open_file(single, out, err);
        free(single);
    }
    free(index_path);
    return rc;
}

const st_tensor *st_find(const st_set *s, const char *name)
{
    int lo = 0, hi = s->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const st_tensor *t = &s->tensors[s->name_order[mid]];
        int c = strcmp(name, t->name);
        if (c == 0)
            return t;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

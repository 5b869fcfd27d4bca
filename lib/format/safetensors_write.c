/* safetensors writing: one file, or a checkpoint dir sharded the way
 * Hugging Face does it (model-0000i-of-0000n.safetensors plus
 * model.safetensors.index.json).
 *
 * The header is built as text here rather than through jansson so that the
 * key order is exactly: "__metadata__" first, then the tensors in the order
 * they were added, which is also the order of their data. */
#include "format/safetensors.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "core/check.h"
#include "core/strbuf.h"

typedef struct {
    char *name;
    dtype type;
    int n_dims;
    int64_t shape[ST_MAX_DIMS];
    const void *data;
    uint64_t nbytes;
} wtensor;

typedef struct {
    char *key, *value;
} wmeta;

struct st_writer {
    wtensor *t;
    int n, cap;
    wmeta *meta;
    int n_meta, cap_meta;
    json_t *names; /* set of names added, for the duplicate check */
    uint64_t total;
};

st_writer *st_writer_new(void)
{
    st_writer *w = xcalloc(1, sizeof *w);
    w->names = json_object();
    MEMRA_ASSERT(w->names);
    return w;
}

void st_writer_free(st_writer *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n; i++)
        free(w->t[i].name);
    for (int i = 0; i < w->n_meta; i++) {
        free(w->meta[i].key);
        free(w->meta[i].value);
    }
    free(w->t);
    free(w->meta);
    json_decref(w->names);
    free(w);
}

void st_writer_set_meta(st_writer *w, const char *key, const char *value)
{
    for (int i = 0; i < w->n_meta; i++) {
        if (!strcmp(w->meta[i].key, key)) {
            free(w->meta[i].value);
            w->meta[i].value = xstrdup(value);
            return;
        }
    }
    if (w->n_meta == w->cap_meta) {
        w->cap_meta = w->cap_meta ? w->cap_meta * 2 : 4;
        w->meta = xrealloc(w->meta, (size_t)w->cap_meta * sizeof *w->meta);
    }
    w->meta[w->n_meta++] = (wmeta){xstrdup(key), xstrdup(value)};
}

static int utf8_ok(const char *s)
{
    size_t n = strlen(s);
    return utf8_invalid_at((const uint8_t *)s, n) == n;
}

int st_writer_add(st_writer *w, const char *name, dtype type, int n_dims, const int64_t *shape,
                  const void *data, uint64_t nbytes, memra_err *err)
{
    if (!name || !*name)
        return memra_fail(err, "safetensors writer: a tensor has an empty name");
    /* The name is ours to print only once it is known to be clean text. */
    if (!utf8_ok(name))
        return memra_fail(err, "safetensors writer: a tensor name is not valid UTF-8 (byte %zu)",
                          utf8_invalid_at((const uint8_t *)name, strlen(name)));
    if (!strcmp(name, "__metadata__"))
        return memra_fail(err, "safetensors writer: \"__metadata__\" is reserved, not a tensor name");
    if (json_object_get(w->names, name))
        return memra_fail(err, "safetensors writer: duplicate tensor '%s'", name);
    const dtype_info *info = dtype_get(type);
    if (!info || !info->st_name)
        return memra_fail(err, "safetensors writer: tensor '%s': type %s has no safetensors dtype",
                          name, info ? info->name : "(unknown)");
    if (n_dims < 0 || n_dims > ST_MAX_DIMS)
        return memra_fail(err, "safetensors writer: tensor '%s': %d dimensions, at most %d allowed",
                          name, n_dims, ST_MAX_DIMS);
    int64_t elements = 1;
    int zero = 0;
    for (int i = 0; i < n_dims; i++) {
        if (shape[i] < 0)
            return memra_fail(err, "safetensors writer: tensor '%s': shape[%d] is %" PRId64, name,
                              i, shape[i]);
        if (shape[i] == 0) {
            zero = 1;
        } else if (elements > INT64_MAX / shape[i]) {
            return memra_fail(err, "safetensors writer: tensor '%s': element count overflows",
                              name);
        } else {
            elements *= shape[i];
        }
    }
    int64_t need = dtype_row_bytes(type, zero ? 0 : elements);
    if (need < 0 || (uint64_t)need != nbytes)
        return memra_fail(err,
                          "safetensors writer: tensor '%s': %" PRIu64 " bytes given but %s of %" PRId64
                          " elements needs %" PRId64,
                          name, nbytes, info->st_name, zero ? 0 : elements, need);
    if (nbytes && !data)
        return memra_fail(err, "safetensors writer: tensor '%s': no data", name);
    if (w->total > (uint64_t)INT64_MAX - nbytes)
        return memra_fail(err, "safetensors writer: tensor '%s': total size overflows", name);

    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 64;
        w->t = xrealloc(w->t, (size_t)w->cap * sizeof *w->t);
    }
    wtensor *t = &w->t[w->n++];
    memset(t, 0, sizeof *t);
    t->name = xstrdup(name);
    t->type = type;
    t->n_dims = n_dims;
    if (n_dims)
        memcpy(t->shape, shape, (size_t)n_dims * sizeof *shape);
    t->data = data;
    t->nbytes = nbytes;
    w->total += nbytes;
    json_object_set_new_nocheck(w->names, name, json_true());
    return 0;
}

/* A JSON string literal; the text is known to be valid UTF-8, so only the
 * quote, the backslash and control bytes need escapes. */
static void put_json_string(strbuf *sb, const char *s)
{
    sb_putc(sb, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '"': sb_puts(sb, "\\\""); break;
        case '\\': sb_puts(sb, "\\\\"); break;
        case '\n': sb_puts(sb, "\\n"); break;
        case '\r': sb_puts(sb, "\\r"); break;
        case '\t': sb_puts(sb, "\\t"); break;
        case '\b': sb_puts(sb, "\\b"); break;
        case '\f': sb_puts(sb, "\\f"); break;
        default:
            if (c < 0x20)
                sb_printf(sb, "\\u%04x", c);
            else
                sb_putc(sb, (char)c);
        }
    }
    sb_putc(sb, '"');
}

/* The header of tensors [first, last): compact JSON, then spaces up to a
 * multiple of 8 bytes so the data starts 8-aligned in the file. */
static int build_header(const st_writer *w, int first, int last, strbuf *sb, memra_err *err)
{
    sb_putc(sb, '{');
    if (w->n_meta) {
        sb_puts(sb, "\"__metadata__\":{");
        for (int i = 0; i < w->n_meta; i++) {
            if (!utf8_ok(w->meta[i].key) || !utf8_ok(w->meta[i].value))
                return memra_fail(err,
                                  "safetensors writer: __metadata__ entry %d is not valid UTF-8",
                                  i);
            if (i)
                sb_putc(sb, ',');
            put_json_string(sb, w->meta[i].key);
            sb_putc(sb, ':');
            put_json_string(sb, w->meta[i].value);
        }
        sb_putc(sb, '}');
    }
    uint64_t off = 0;
    for (int i = first; i < last; i++) {
        const wtensor *t = &w->t[i];
        if (i > first || w->n_meta)
            sb_putc(sb, ',');
        put_json_string(sb, t->name);
        sb_printf(sb, ":{\"dtype\":\"%s\",\"shape\":[", dtype_get(t->type)->st_name);
        for (int d = 0; d < t->n_dims; d++)
            sb_printf(sb, "%s%" PRId64, d ? "," : "", t->shape[d]);
        sb_printf(sb, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + t->nbytes);
        off += t->nbytes;
    }
    sb_putc(sb, '}');
    while (sb->len % 8)
        sb_putc(sb, ' ');
    if (sb->len > ST_HEADER_MAX)
        return memra_fail(err, "safetensors writer: header of %zu bytes exceeds the %u-byte limit",
                          sb->len, ST_HEADER_MAX);
    return 0;
}

static int write_all(FILE *f, const void *data, uint64_t n)
{
    const uint8_t *p = data;
    while (n) {
        size_t chunk = n > (1u << 26) ? (1u << 26) : (size_t)n;
        if (fwrite(p, 1, chunk, f) != chunk)
            return -1;
        p += chunk;
        n -= chunk;
    }
    return 0;
}

/* Tensors [first, last) into path, through path.tmp and a rename so that a
 * reader never sees a half-written file under the final name. */
static int write_range(const st_writer *w, int first, int last, const char *path,
                       memra_err *err)
{
    strbuf hdr;
    sb_init(&hdr);
    if (build_header(w, first, last, &hdr, err) != 0) {
        sb_free(&hdr);
        return memra_wrap(err, "%s", path);
    }
    strbuf tmp;
    sb_init(&tmp);
    sb_printf(&tmp, "%s.tmp", path);
    FILE *f = fopen(tmp.data, "wb");
    if (!f) {
        int e = errno;
        sb_free(&hdr);
        sb_free(&tmp);
        return memra_fail(err, "%s: cannot create: %s", path, strerror(e));
    }
    uint8_t len8[8];
    uint64_t hl = hdr.len;
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)(hl >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && write_all(f, hdr.data, hdr.len) == 0;
    for (int i = first; ok && i < last; i++)
        ok = write_all(f, w->t[i].data, w->t[i].nbytes) == 0;
    int e = ok ? 0 : errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (ok && rename(tmp.data, path) != 0) {
        ok = 0;
        e = errno;
    }
    if (!ok)
        unlink(tmp.data);
    sb_free(&hdr);
    sb_free(&tmp);
    if (!ok)
        return memra_fail(err, "%s: write failed: %s", path, e ? strerror(e) : "short write");
    return 0;
}

int st_writer_write(st_writer *w, const char *path, memra_err *err)
{
    return write_range(w, 0, w->n, path, err);
}

static char *join_path(const char *dir, const char *name)
{
    strbuf sb;
    sb_init(&sb);
    sb_printf(&sb, "%s/%s", dir, name);
    return sb_take(&sb);
}

/* The index in Hugging Face's layout (two-space indent, keys sorted, a
 * final newline), so tools that diff or parse it see what they expect. */
static int write_index(const st_writer *w, const char *dir, const int *shard_of,
                       char *const *shard_names, memra_err *err)
{
    json_t *root = json_object(), *meta = json_object(), *wm = json_object();
    json_object_set_new(meta, "total_size", json_integer((json_int_t)w->total));
    json_object_set_new(root, "metadata", meta);
    for (int i = 0; i < w->n; i++)
        json_object_set_new_nocheck(wm, w->t[i].name, json_string(shard_names[shard_of[i]]));
    json_object_set_new(root, "weight_map", wm);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    MEMRA_ASSERT(text);
    strbuf sb;
    sb_init(&sb);
    sb_puts(&sb, text);
    sb_putc(&sb, '\n');
    free(text);
    char *path = join_path(dir, "model.safetensors.index.json");
    int rc = write_file_atomic(path, sb.data, sb.len, err);
    free(path);
    sb_free(&sb);
    return rc;
}

int st_writer_write_dir(st_writer *w, const char *dir, uint64_t shard_bytes, memra_err *err)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return memra_fail(err, "%s: cannot create directory: %s", dir, strerror(errno));
    char *index_path = join_path(dir, "model.safetensors.index.json");
    int rc;
    if (shard_bytes == 0 || w->total <= shard_bytes) {
        char *path = join_path(dir, "model.safetensors");
        rc = write_range(w, 0, w->n, path, err);
        free(path);
        /* A stale index would win over the new file when the dir is read. */
        if (rc == 0 && unlink(index_path) != 0 && errno != ENOENT)
            rc = memra_fail(err, "%s: cannot remove the stale index: %s", index_path,
                            strerror(errno));
        free(index_path);
        return rc;
    }
    free(index_path);

    /* Greedy: a shard closes when the next tensor would push it past
     * shard_bytes; a tensor bigger than shard_bytes gets a shard to itself,
     * and an empty tensor never opens a shard. */
    int *shard_of = xmalloc((size_t)(w->n ? w->n : 1) * sizeof *shard_of);
    int n_shards = 0, in_shard = 0;
    uint64_t cur = 0;
    for (int i = 0; i < w->n; i++) {
        if (n_shards == 0 ||
            (in_shard > 0 && w->t[i].nbytes > 0 && cur + w->t[i].nbytes > shard_bytes)) {
            n_shards++;
            in_shard = 0;
            cur = 0;
        }
        shard_of[i] = n_shards - 1;
        in_shard++;
        cur += w->t[i].nbytes;
    }
    char **names = xcalloc((size_t)n_shards, sizeof *names);
    rc = 0;
    for (int s = 0, first = 0; s < n_shards && rc == 0; s++) {
        int last = first;
        while (last < w->n && shard_of[last] == s)
            last++;
        strbuf nb;
        sb_init(&nb);
        sb_printf(&nb, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        names[s] = sb_take(&nb);
        char *path = join_path(dir, names[s]);
        rc = write_range(w, first, last, path, err);
        free(path);
        first = last;
    }
    if (rc == 0)
        rc = write_index(w, dir, shard_of, names, err);
    for (int s = 0; s < n_shards; s++)
        free(names[s]);
    free(names);
    free(shard_of);
    return rc;
}

/* tokenizer.model: the SentencePiece ModelProto (protobuf, proto2).
 *
 * Only what carries a vocabulary is read: ModelProto.pieces (field 1), each
 * a SentencePiece {piece = 1 (string), score = 2 (float), type = 3 (enum,
 * the same numbers as GGUF token types)}. Every other field is skipped by
 * wire type. A SentencePiece-style GGUF keeps a score per token that
 * tokenizer.json has no place for; this file is where Hugging Face repos
 * keep it, and where convert_hf_to_gguf.py reads it from.
 *
 * Writing produces a BPE model (TrainerSpec.model_type = 2) with
 * byte_fallback, the special ids, and an "identity" normalizer that
 * escapes spaces as U+2581 -- the shape of the Llama 2 tokenizer.model. */
#include <stdlib.h>
#include <string.h>

#include "core/mapfile.h"
#include "core/strbuf.h"
#include "tok/hf_tokenizer_internal.h"

#define SPM_MAX_FILE (256u << 20)

typedef struct {
    const uint8_t *p, *end;
    const uint8_t *start;
} pb_reader;

static int pb_varint(pb_reader *r, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end)
            return -1;
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* Skip one field's value of the given wire type; -1 on truncation or an
 * unsupported (group) wire type. */
static int pb_skip(pb_reader *r, unsigned wire)
{
    uint64_t v;
    switch (wire) {
    case 0:
        return pb_varint(r, &v);
    case 1:
        if (r->end - r->p < 8)
            return -1;
        r->p += 8;
        return 0;
    case 2:
        if (pb_varint(r, &v) || v > (uint64_t)(r->end - r->p))
            return -1;
        r->p += v;
        return 0;
    case 5:
        if (r->end - r->p < 4)
            return -1;
        r->p += 4;
        return 0;
    default:
        return -1;
    }
}

static int parse_piece(pb_reader *r, const char *what, size_t index, arena *mem, spm_piece *out,
                       memra_err *err)
{
    size_t at = (size_t)(r->p - r->start);
    out->piece = NULL;
    out->len = 0;
    out->score = 0.0f;
    out->type = HFT_NORMAL;
    while (r->p < r->end) {
        uint64_t key;
        if (pb_varint(r, &key))
            return memra_fail(err, "%s: piece %zu (offset %zu): truncated field tag", what,
                              index, at);
        unsigned field = (unsigned)(key >> 3), wire = (unsigned)(key & 7);
        if (field == 1 && wire == 2) {
            uint64_t n;
            if (pb_varint(r, &n) || n > (uint64_t)(r->end - r->p))
                return memra_fail(err, "%s: piece %zu (offset %zu): string runs past its message",
                                  what, index, at);
            if (memchr(r->p, 0, (size_t)n))
                return memra_fail(err, "%s: piece %zu: text contains a NUL byte", what, index);
            out->piece = arena_strndup(mem, (const char *)r->p, (size_t)n);
            out->len = (size_t)n;
            r->p += n;
        } else if (field == 2 && wire == 5) {
            if (r->end - r->p < 4)
                return memra_fail(err, "%s: piece %zu: truncated score", what, index);
            uint32_t u = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 |
                         (uint32_t)r->p[3] << 24;
            memcpy(&out->score, &u, 4);
            r->p += 4;
        } else if (field == 3 && wire == 0) {
            uint64_t t;
            if (pb_varint(r, &t))
                return memra_fail(err, "%s: piece %zu: truncated type", what, index);
            if (t < HFT_NORMAL || t > HFT_BYTE)
                return memra_fail(err, "%s: piece %zu: unknown piece type %llu", what, index,
                                  (unsigned long long)t);
            out->type = (int)t;
        } else if (pb_skip(r, wire)) {
            return memra_fail(err, "%s: piece %zu: field %u of wire type %u is truncated or "
                                   "unsupported", what, index, field, wire);
        }
    }
    if (!out->piece)
        return memra_fail(err, "%s: piece %zu has no text", what, index);
    return 0;
}

int spm_model_parse(const uint8_t *data, size_t size, const char *what, spm_model *out,
                    memra_err *err)
{
    memset(out, 0, sizeof *out);
    arena_init(&out->mem, 1 << 16);
    pb_reader r = {data, data + size, data};
    size_t cap = 0;
    while (r.p < r.end) {
        size_t at = (size_t)(r.p - data);
        uint64_t key;
        if (pb_varint(&r, &key))
            goto truncated;
        unsigned field = (unsigned)(key >> 3), wire = (unsigned)(key & 7);
        if (field == 1 && wire == 2) {
            uint64_t n;
            if (pb_varint(&r, &n) || n > (uint64_t)(r.end - r.p))
                goto truncated;
            if (out->n == cap) {
                cap = cap ? cap * 2 : 1024;
                spm_piece *grown = arena_alloc(&out->mem, cap * sizeof *grown);
                if (out->n)
                    memcpy(grown, out->pieces, out->n * sizeof *grown);
                out->pieces = grown;
            }
            pb_reader sub = {r.p, r.p + n, data};
            if (parse_piece(&sub, what, out->n, &out->mem, &out->pieces[out->n], err)) {
                spm_model_free(out);
                return -1;
            }
            out->n++;
            r.p += n;
        } else if (pb_skip(&r, wire)) {
            spm_model_free(out);
            return memra_fail(err, "%s: offset %zu: field %u of wire type %u is truncated or "
                                   "unsupported (not a SentencePiece model?)", what, at, field,
                              wire);
        }
        continue;
    truncated:
        spm_model_free(out);
        return memra_fail(err, "%s: offset %zu: truncated protobuf field (not a SentencePiece "
                               "model?)", what, at);
    }
    if (!out->n) {
        spm_model_free(out);
        return memra_fail(err, "%s: no pieces (not a SentencePiece model?)", what);
    }
    return 0;
}

int spm_model_read(const char *path, spm_model *out, memra_err *err)
{
    char *buf;
    size_t len;
    if (read_small_file(path, SPM_MAX_FILE, &buf, &len, err))
        return -1;
    int rc = spm_model_parse((const uint8_t *)buf, len, path, out, err);
    free(buf);
    return rc;
}

void spm_model_free(spm_model *m)
{
    arena_free(&m->mem);
    m->pieces = NULL;
    m->n = 0;
}

/* ---- writing ---- */

static void put_varint(strbuf *sb, uint64_t v)
{
    while (v >= 0x80) {
        sb_putc(sb, (char)(v | 0x80));
        v >>= 7;
    }
    sb_putc(sb, (char)v);
}

static void put_tag(strbuf *sb, unsigned field, unsigned wire)
{
    put_varint(sb, (uint64_t)field << 3 | wire);
}

/* proto2 int32 and enum values are varints of the 64-bit two's complement. */
static void put_int(strbuf *sb, unsigned field, int64_t v)
{
    put_tag(sb, field, 0);
    put_varint(sb, (uint64_t)v);
}

static void put_bytes(strbuf *sb, unsigned field, const void *data, size_t n)
{
    put_tag(sb, field, 2);
    put_varint(sb, n);
    sb_append(sb, data, n);
}

int spm_model_write(const char *path, const spm_piece *pieces, size_t n,
                    const spm_write_opts *opts, memra_err *err)
{
    strbuf out, sub;
    sb_init(&out);
    sb_init(&sub);
    for (size_t i = 0; i < n; i++) {
        sb_clear(&sub);
        put_bytes(&sub, 1, pieces[i].piece, pieces[i].len);
        uint32_t u;
        memcpy(&u, &pieces[i].score, 4);
        put_tag(&sub, 2, 5);
        char le[4] = {(char)u, (char)(u >> 8), (char)(u >> 16), (char)(u >> 24)};
        sb_append(&sub, le, 4);
        put_int(&sub, 3, pieces[i].type);
        put_bytes(&out, 1, sub.data, sub.len);
    }

    sb_clear(&sub);
    put_int(&sub, 3, 2); /* model_type = BPE */
    put_int(&sub, 4, (int64_t)n);
    put_int(&sub, 35, 1); /* byte_fallback */
    put_int(&sub, 40, opts->unk_id);
    put_int(&sub, 41, opts->bos_id);
    put_int(&sub, 42, opts->eos_id);
    put_int(&sub, 43, opts->pad_id);
    put_bytes(&out, 2, sub.data, sub.len);

    sb_clear(&sub);
    put_bytes(&sub, 1, "identity", 8);
    put_int(&sub, 3, opts->add_dummy_prefix ? 1 : 0);
    put_int(&sub, 4, 0); /* remove_extra_whitespaces */
    put_int(&sub, 5, 1); /* escape_whitespaces */
    put_bytes(&out, 3, sub.data, sub.len);

    int rc = write_file_atomic(path, out.data, out.len, err);
    sb_free(&out);
    sb_free(&sub);
    return rc;
}

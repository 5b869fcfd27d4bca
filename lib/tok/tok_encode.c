/* Encoding and decoding: the pipeline that runs the stages in the order
 * each reference runs them.
 *
 * GGUF (llama.cpp): special-token partition -> per text fragment either
 * the pre-tokenizer regexes and rank BPE (byte-level), or a prefix space
 * (first fragment and after each special token), spaces escaped to U+2581
 * and the score-ordered SentencePiece merge.
 *
 * Hugging Face: added tokens with normalized=false cut out of the raw text
 * -> each remaining piece normalized -> added tokens with normalized=true
 * cut out of that -> pre-tokenizer chain -> BPE per word. BOS/EOS around it
 * all when add_special asks and the config adds them. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "tok/tok_internal.h"

static int encode_gguf_text(const tokenizer *t, tok_scratch *s, const char *p, size_t n,
                            int prev_special, tok_pieces *words, strbuf *buf, tok_ids *out,
                            size_t total, memra_err *err)
{
    if (t->kind == TOK_SPM) {
        sb_clear(buf);
        if (t->add_space_prefix && prev_special)
            sb_append(buf, "\xE2\x96\x81", 3);
        size_t run = 0;
        for (size_t i = 0; i < n; i++) {
            if (p[i] == ' ') {
                sb_append(buf, p + run, i - run);
                sb_append(buf, "\xE2\x96\x81", 3);
                run = i + 1;
            }
        }
        sb_append(buf, p + run, n - run);
        if (t->spm_scores) {
            tok_spm_fragment(t, s, buf->data, buf->len, out);
            return 0;
        }
        /* merges by rank (gemma4): the escaped text through the
         * pre-tokenizer, then BPE per word */
        if (tok_pretokenize(t, s, buf->data, buf->len, 1, words, err))
            return -1;
        for (size_t i = 0; i < words->n; i++)
            tok_bpe_word_cached(t, s, words->p[i], words->len[i], out, total);
        return 0;
    }
    if (tok_pretokenize(t, s, p, n, 1, words, err))
        return -1;
    for (size_t i = 0; i < words->n; i++)
        tok_bpe_word_cached(t, s, words->p[i], words->len[i], out, total);
    return 0;
}

static int encode_hf_piece(const tokenizer *t, tok_scratch *s, const char *p, size_t n, int first,
                           tok_pieces *words, tok_ids *out, size_t total, memra_err *err)
{
    if (tok_pretokenize(t, s, p, n, first, words, err))
        return -1;
    for (size_t i = 0; i < words->n; i++)
        tok_bpe_word_cached(t, s, words->p[i], words->len[i], out, total);
    return 0;
}

static int encode_hf_text(const tokenizer *t, tok_scratch *s, const char *p, size_t n, int first,
                          tok_pieces *words, strbuf *buf, tok_segs *segs2, int parse_special,
                          tok_ids *out, size_t total, memra_err *err)
{
    const char *q;
    size_t qn;
    if (tok_normalize_view(t, p, n, buf, &q, &qn, err))
        return -1;
    if (!t->has_added_norm)
        return encode_hf_piece(t, s, q, qn, first, words, out, total, err);
    tok_split_added_hf(t, &t->added_norm, q, qn, parse_special, segs2);
    for (size_t i = 0; i < segs2->n; i++) {
        const tok_seg *g = &segs2->v[i];
        if (g->id >= 0) {
            tok_ids_push(out, g->id);
        } else if (encode_hf_piece(t, s, q + g->start, g->len, first && g->start == 0,
                                   words, out, total, err)) {
            return -1;
        }
    }
    return 0;
}

int tok_encode(const tokenizer *t, const char *text, size_t len, int add_special,
               int parse_special, int32_t **ids, size_t *n, memra_err *err)
{
    return tok_encode_cached(t, NULL, text, len, add_special, parse_special, ids, n, err);
}

int tok_encode_cached(const tokenizer *t, tok_cache *cache, const char *text, size_t len,
                      int add_special, int parse_special, int32_t **ids, size_t *n,
                      memra_err *err)
{
    *ids = NULL;
    *n = 0;
    if (!text && len)
        return memra_fail(err, "tok_encode: NULL text of length %zu", len);
    strbuf clean, buf;
    sb_init(&clean);
    sb_init(&buf);
    if (len && !tok_utf8_valid(text, len)) {
        tok_utf8_sanitize(text, len, &clean);
        text = clean.data;
        len = clean.len;
    }
    tok_scratch *s = tok_scratch_new();
    /* a long input gets room for about one token per four bytes up front
     * (mixed text averages three to four), rather than regrowing the id
     * array a dozen times */
    tok_ids out = {0};
    if (len >= 4096) {
        out.cap = len / 4;
        out.v = xmalloc(out.cap * sizeof *out.v);
    }
    tok_segs segs = {0}, segs2 = {0};
    tok_pieces words = {0};
    int rc = 0;
    if (add_special && t->add_bos && t->bos >= 0)
        tok_ids_push(&out, t->bos);
    if (t->flavor == TOK_FLAVOR_GGUF)
        tok_split_special_gguf(t, text ? text : "", len, parse_special, &segs);
    else
        tok_split_added_hf(t, &t->added_raw, text ? text : "", len, parse_special, &segs);
    int prev_special = 1;
    for (size_t i = 0; i < segs.n && rc == 0; i++) {
        const tok_seg *g = &segs.v[i];
        if (g->id >= 0) {
            tok_ids_push(&out, g->id);
            prev_special = 1;
            continue;
        }
        /* what the fragment's ids depend on besides its bytes */
        int ctx = (t->flavor == TOK_FLAVOR_GGUF ? prev_special : g->start == 0) | parse_special << 1;
        int cached = cache && g->len >= TOK_CACHE_MIN_BYTES;
        uint64_t h = cached ? tok_text_hash(text + g->start, g->len, ctx) : 0;
        size_t at = out.n;
        if (cached && tok_cache_get(cache, h, ctx, text + g->start, g->len, &out)) {
            prev_special = 0;
            continue;
        }
        if (t->flavor == TOK_FLAVOR_GGUF)
            rc = encode_gguf_text(t, s, text + g->start, g->len, prev_special, &words, &buf, &out,
                                  len, err);
        else
            rc = encode_hf_text(t, s, text + g->start, g->len, g->start == 0, &words, &buf,
                                &segs2, parse_special, &out, len, err);
        if (rc == 0 && cached)
            tok_cache_put(cache, h, ctx, text + g->start, g->len, out.v + at, out.n - at);
        prev_special = 0;
    }
    if (rc == 0 && add_special && t->add_eos && t->eos >= 0)
        tok_ids_push(&out, t->eos);
    tok_scratch_free(s);
    tok_pieces_free(&words);
    free(segs.v);
    free(segs2.v);
    sb_free(&clean);
    sb_free(&buf);
    if (rc) {
        free(out.v);
        return -1;
    }
    *ids = out.v;
    *n = out.n;
    return 0;
}

/* The split with special parsing on cuts a control token out of the text
 * exactly when the ids differ: with no control token among the candidates'
 * matches, both splits claim the same occurrences (the references' scans
 * only drop special matches when parsing is off), and the text between
 * them is encoded the same. A Hugging Face tokenizer whose added tokens
 * also match after normalization splits again inside the text: there the
 * two encodings are compared. */
int tok_has_special_text(const tokenizer *t, const char *text, size_t len, memra_err *err)
{
    if (!text && len)
        return memra_fail(err, "tok_has_special_text: NULL text of length %zu", len);
    if (t->flavor == TOK_FLAVOR_HF && t->has_added_norm) {
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if (tok_encode(t, text, len, 0, 1, &a, &na, err) != 0)
            return -1;
        if (tok_encode(t, text, len, 0, 0, &b, &nb, err) != 0) {
            free(a);
            return -1;
        }
        int differ = na != nb || (na && memcmp(a, b, na * sizeof *a));
        free(a);
        free(b);
        return differ;
    }
    strbuf clean;
    sb_init(&clean);
    if (len && !tok_utf8_valid(text, len)) {
        tok_utf8_sanitize(text, len, &clean);
        text = clean.data;
        len = clean.len;
    }
    tok_segs segs = {0};
    if (t->flavor == TOK_FLAVOR_GGUF)
        tok_split_special_gguf(t, text ? text : "", len, 1, &segs);
    else
        tok_split_added_hf(t, &t->added_raw, text ? text : "", len, 1, &segs);
    int found = 0;
    for (size_t i = 0; i < segs.n && !found; i++)
        found = segs.v[i].id >= 0 && (t->tok[segs.v[i].id].flags & TOKF_CONTROL);
    free(segs.v);
    sb_free(&clean);
    return found;
}

int tok_decode(const tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **out,
               size_t *out_len, memra_err *err)
{
    *out = NULL;
    if (out_len)
        *out_len = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return memra_fail(err, "decode: token id %d at position %zu is out of range "
                              "(vocabulary of %d)", ids[i], i, t->n_vocab);
    strbuf raw, text;
    sb_init(&raw);
    sb_init(&text);
    size_t i = 0;
    int remove_space = t->strip_leading_space;
    if (t->flavor == TOK_FLAVOR_GGUF) {
        /* llama.cpp: a leading BOS that is skipped keeps the space after it */
        if (skip_special && t->add_bos && n > 0 && ids[0] == t->bos) {
            remove_space = 0;
            i = 1;
        }
        for (; i < n; i++) {
            const tok_token *k = &t->tok[ids[i]];
            if (skip_special && (k->flags & TOKF_CONTROL)) {
                remove_space = 0;
                continue;
            }
            const char *p = k->piece;
            size_t l = k->piece_len;
            if (remove_space && l > 0 && p[0] == ' ') {
                p++;
                l--;
            }
            remove_space = 0;
            sb_append(&raw, p, l);
        }
    } else {
        for (; i < n; i++) {
            const tok_token *k = &t->tok[ids[i]];
            if (skip_special && (k->flags & TOKF_CONTROL))
                continue;
            sb_append(&raw, k->piece, k->piece_len);
        }
        if (remove_space && raw.len > 0 && raw.data[0] == ' ') {
            memmove(raw.data, raw.data + 1, raw.len);
            raw.len--;
        }
    }
    if (raw.len)
        tok_utf8_sanitize(raw.data, raw.len, &text);
    else
        sb_append(&text, "", 0);
    sb_free(&raw);
    if (out_len)
        *out_len = text.len;
    *out = sb_take(&text);
    return 0;
}

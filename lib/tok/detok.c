/* Streaming detokenizer (see detok.h): bytes -> UTF-8 reassembly with
 * maximal-subpart U+FFFD -> stop-string hold-back -> output. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "tok/detok.h"
#include "tok/tok_internal.h"

struct detok {
    const tokenizer *t;
    char **stop;
    size_t *stop_len;
    size_t n_stop;
    int skip_special;
    int strip_pending; /* drop the next byte if it is a space */
    int gguf_first;    /* llama.cpp: only the first token's space is dropped */
    int fed_any;
    uint8_t pend[4];   /* an incomplete UTF-8 sequence */
    size_t n_pend, need;
    strbuf hold;       /* complete text that may begin a stop string */
    int stopped, stop_index;
};

detok *detok_new(const tokenizer *t, const detok_opts *opts)
{
    detok *d = xcalloc(1, sizeof *d);
    d->t = t;
    d->stop_index = -1;
    sb_init(&d->hold);
    if (opts) {
        d->skip_special = opts->skip_special;
        if (opts->at_start && tok_strips_leading_space(t)) {
            d->strip_pending = 1;
            d->gguf_first = t->flavor == TOK_FLAVOR_GGUF;
        }
        if (opts->n_stop) {
            d->stop = xcalloc(opts->n_stop, sizeof *d->stop);
            d->stop_len = xcalloc(opts->n_stop, sizeof *d->stop_len);
            for (size_t i = 0; i < opts->n_stop; i++) {
                const char *s = opts->stop[i] ? opts->stop[i] : "";
                d->stop[i] = xstrdup(s);
                d->stop_len[i] = strlen(s);
            }
            d->n_stop = opts->n_stop;
        }
    }
    return d;
}

void detok_free(detok *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n_stop; i++)
        free(d->stop[i]);
    free(d->stop);
    free(d->stop_len);
    sb_free(&d->hold);
    free(d);
}

int detok_stopped(const detok *d)
{
    return d->stopped;
}

/* The earliest complete stop string in hold, or -1 (*at its offset). */
static int find_stop(const detok *d, size_t *at)
{
    int best = -1;
    size_t best_at = 0;
    for (size_t k = 0; k < d->n_stop; k++) {
        size_t l = d->stop_len[k];
        if (l == 0 || l > d->hold.len)
            continue;
        const char *f = memmem(d->hold.data, d->hold.len, d->stop[k], l);
        if (f && (best < 0 || (size_t)(f - d->hold.data) < best_at)) {
            best = (int)k;
            best_at = (size_t)(f - d->hold.data);
        }
    }
    *at = best_at;
    return best;
}

/* The longest suffix of hold that is a proper prefix of a stop string. */
static size_t partial_suffix(const detok *d)
{
    size_t best = 0;
    for (size_t k = 0; k < d->n_stop; k++) {
        size_t l = d->stop_len[k];
        size_t max = l - (l > 0);
        if (max > d->hold.len)
            max = d->hold.len;
        for (size_t s = max; s > best; s--) {
            if (memcmp(d->hold.data + d->hold.len - s, d->stop[k], s) == 0) {
                best = s;
                break;
            }
        }
    }
    return best;
}

/* Complete text enters here: emit what no stop string can claim. */
static void put_text(detok *d, const char *s, size_t n, strbuf *out)
{
    if (d->stopped || n == 0)
        return;
    if (d->n_stop == 0) {
        sb_append(out, s, n);
        return;
    }
    sb_append(&d->hold, s, n);
    size_t at;
    int k = find_stop(d, &at);
    if (k >= 0) {
        sb_append(out, d->hold.data, at);
        sb_clear(&d->hold);
        d->stopped = 1;
        d->stop_index = k;
        return;
    }
    size_t keep = partial_suffix(d);
    size_t emit = d->hold.len - keep;
    if (emit) {
        sb_append(out, d->hold.data, emit);
        memmove(d->hold.data, d->hold.data + emit, keep);
        d->hold.len = keep;
        d->hold.data[keep] = '\0';
    }
}

static void put_fffd(detok *d, strbuf *out)
{
    put_text(d, "\xEF\xBF\xBD", 3, out);
}

static void put_byte(detok *d, uint8_t b, strbuf *out)
{
    if (d->n_pend > 0) {
        uint8_t lo = 0x80, hi = 0xBF;
        if (d->n_pend == 1) {
            uint8_t lead = d->pend[0];
            if (lead == 0xE0)
                lo = 0xA0;
            else if (lead == 0xED)
                hi = 0x9F;
            else if (lead == 0xF0)
                lo = 0x90;
            else if (lead == 0xF4)
                hi = 0x8F;
        }
        if (b >= lo && b <= hi) {
            d->pend[d->n_pend++] = b;
            if (d->n_pend == d->need) {
                put_text(d, (const char *)d->pend, d->n_pend, out);
                d->n_pend = 0;
            }
            return;
        }
        /* the sequence broke off: its maximal subpart is one error, and
         * this byte starts afresh */
        d->n_pend = 0;
        put_fffd(d, out);
    }
    if (b < 0x80) {
        char c = (char)b;
        put_text(d, &c, 1, out);
    } else if (b >= 0xC2 && b <= 0xDF) {
        d->pend[0] = b, d->n_pend = 1, d->need = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        d->pend[0] = b, d->n_pend = 1, d->need = 3;
    } else if (b >= 0xF0 && b <= 0xF4) {
        d->pend[0] = b, d->n_pend = 1, d->need = 4;
    } else {
        put_fffd(d, out);
    }
}

int detok_feed_bytes(detok *d, const char *bytes, size_t n, strbuf *out, int *stop_index)
{
    for (size_t i = 0; i < n && !d->stopped; i++) {
        if (d->strip_pending) {
            d->strip_pending = 0;
            if (bytes[i] == ' ')
                continue;
        }
        put_byte(d, (uint8_t)bytes[i], out);
    }
    if (d->stopped && stop_index)
        *stop_index = d->stop_index;
    return d->stopped;
}

int detok_feed(detok *d, int32_t id, strbuf *out, int *stop_index, memra_err *err)
{
    size_t len;
    const char *p = tok_piece(d->t, id, &len);
    if (!p)
        return memra_fail(err, "detokenize: token id %d is out of range (vocabulary of %zu)", id,
                          tok_vocab_size(d->t));
    int first = !d->fed_any;
    d->fed_any = 1;
    if (d->skip_special && tok_is_control(d->t, id)) {
        /* llama.cpp: a skipped leading BOS keeps the space after it */
        if (d->gguf_first)
            d->strip_pending = 0;
        len = 0;
    }
    int r = detok_feed_bytes(d, p, len, out, stop_index);
    if (first && d->gguf_first)
        d->strip_pending = 0;
    return r;
}

void detok_flush(detok *d, strbuf *out)
{
    if (d->stopped)
        return;
    if (d->n_pend > 0) {
        d->n_pend = 0;
        put_fffd(d, out);
        if (d->stopped)
            return;
    }
    sb_append(out, d->hold.data ? d->hold.data : "", d->hold.len);
    sb_clear(&d->hold);
}

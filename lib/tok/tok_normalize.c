/* Normalizers a tokenizer.json declares (NFC/NFD/NFKC/NFKD through
 * utf8proc, Prepend, literal Replace, Lowercase), applied in order to one
 * text segment at a time, as `tokenizers` applies them to each piece left
 * between added tokens.
 *
 * Unicode normalization is the slow part, so it runs only where it can
 * change something: no canonical composition or reordering crosses an
 * ASCII character (ASCII is never the second element of a composition and
 * has combining class 0), so each run that ends before an ASCII byte is
 * normalized on its own and pure-ASCII runs are copied. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok/tok_internal.h"

/* A code point no normalization form changes and that never combines
 * with a neighbour: combining class 0, no decomposition, no part in a
 * canonical composition, not a Hangul jamo or syllable (composed
 * algorithmically). CJK ideographs, most symbols and emoji are such. */
static int inert(uint32_t cp)
{
    if ((cp >= 0x1100 && cp <= 0x11FF) || (cp >= 0xA960 && cp <= 0xA97F) ||
        (cp >= 0xAC00 && cp <= 0xD7FF))
        return 0;
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
    return p->combining_class == 0 && p->decomp_seqindex == UINT16_MAX &&
           p->comb_index == UINT16_MAX;
}

static int run_is_inert(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t bad;
        size_t l = tok_utf8_next((const uint8_t *)s + i, n - i, &cp, &bad);
        if (!l || !inert(cp))
            return 0;
        i += l;
    }
    return 1;
}

static int unicode_norm(tok_norm_type type, const char *s, size_t n, strbuf *out, memra_err *err)
{
    int opts = UTF8PROC_STABLE;
    switch (type) {
    case NORM_NFC: opts |= UTF8PROC_COMPOSE; break;
    case NORM_NFD: opts |= UTF8PROC_DECOMPOSE; break;
    case NORM_NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NORM_NFKD: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    default: break;
    }
    size_t i = 0;
    while (i < n) {
        /* an ASCII run, then the non-ASCII run after it (plus the ASCII
         * character in front, which may take combining marks) */
        size_t a = i;
        while (i < n && (uint8_t)s[i] < 0x80)
            i++;
        if (i == n) {
            sb_append(out, s + a, n - a);
            break;
        }
        size_t start = i > a ? i - 1 : i;
        sb_append(out, s + a, start - a);
        size_t na = i;
        while (i < n && (uint8_t)s[i] >= 0x80)
            i++;
        if (run_is_inert(s + na, i - na)) {
            sb_append(out, s + start, i - start);
            continue;
        }
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s + start,
                                          (utf8proc_ssize_t)(i - start), &dst,
                                          (utf8proc_option_t)opts);
        if (r < 0) {
            free(dst);
            return memra_fail(err, "normalizer: %s at byte %zu", utf8proc_errmsg(r), start);
        }
        sb_append(out, dst, (size_t)r);
        free(dst);
    }
    return 0;
}

static void lowercase(const char *s, size_t n, strbuf *out)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t bad;
        size_t l = tok_utf8_next((const uint8_t *)s + i, n - i, &cp, &bad);
        if (!l) {
            sb_append(out, s + i, bad);
            i += bad;
            continue;
        }
        char buf[4];
        size_t k = tok_utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), buf);
        sb_append(out, buf, k);
        i += l;
    }
}

static void replace(const tok_norm_step *st, const char *s, size_t n, strbuf *out)
{
    size_t i = 0, run = 0;
    if (st->alen == 0) {
        sb_append(out, s, n);
        return;
    }
    while (i + st->alen <= n) {
        const char *f = memmem(s + i, n - i, st->a, st->alen);
        if (!f)
            break;
        size_t at = (size_t)(f - s);
        sb_append(out, s + run, at - run);
        sb_append(out, st->b, st->blen);
        i = run = at + st->alen;
    }
    sb_append(out, s + run, n - run);
}

int tok_normalize(const tokenizer *t, const char *s, size_t n, strbuf *out, memra_err *err)
{
    sb_clear(out);
    if (t->n_norm == 0 || n == 0) {
        sb_append(out, s, n);
        return 0;
    }
    strbuf tmp;
    sb_init(&tmp);
    sb_append(&tmp, s, n);
    int rc = 0;
    for (size_t k = 0; k < t->n_norm && rc == 0; k++) {
        const tok_norm_step *st = &t->norm[k];
        sb_clear(out);
        switch (st->type) {
        case NORM_NFC:
        case NORM_NFD:
        case NORM_NFKC:
        case NORM_NFKD:
            rc = unicode_norm(st->type, tmp.data, tmp.len, out, err);
            break;
        case NORM_PREPEND:
            if (tmp.len > 0)
                sb_append(out, st->a, st->alen);
            sb_append(out, tmp.data, tmp.len);
            break;
        case NORM_REPLACE:
            replace(st, tmp.data, tmp.len, out);
            break;
        case NORM_LOWERCASE:
            lowercase(tmp.data, tmp.len, out);
            break;
        }
        sb_clear(&tmp);
        sb_append(&tmp, out->data, out->len);
    }
    sb_free(&tmp);
    return rc;
}

/* Normalizers a tokenizer.json declares (NFC/NFD/NFKC/NFKD through
 * utf8proc, Prepend, Replace of a string or a regex, Lowercase,
 * StripAccents, Strip), applied in order to one
 * text segment at a time, as `tokenizers` applies them to each piece left
 * between added tokens.
 *
 * Unicode normalization is the slow part, so it runs only where it can
 * change something: no canonical composition or reordering crosses an
 * ASCII character (ASCII is never the second element of a composition and
 * has combining class 0), so each run that ends before an ASCII byte is
 * normalized on its own, pure-ASCII runs are copied, and so are runs whose
 * characters all pass the quick check of the form (see nfc_stable). */
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

/* NFC's quick check, restricted to starters: a character with combining
 * class 0 whose NFC_Quick_Check is Yes. A string made only of such
 * characters is already in NFC (UAX #15 quick check: nothing to reorder,
 * nothing that composes with what precedes it, nothing that decomposes
 * for good), so NFC leaves such a run as it is. Unlike inert() this
 * accepts precomposed letters (é, й, ά, が, Hangul syllables), which are
 * most of the non-ASCII text in Latin, Cyrillic, Greek and kana scripts.
 * NFC_QC is No for a canonical decomposition that is a composition
 * exclusion, a singleton (utf8proc stores the sequence length - 1 in the
 * top two bits of decomp_seqindex) or starts with a non-starter; Maybe for
 * the second element of a composition (utf8proc marks those with bit 15
 * of comb_index) and for conjoining Hangul vowels and trailing consonants,
 * which compose algorithmically. Everything below U+0300 passes. */
static int nfc_stable(uint32_t cp)
{
    if (cp < 0x300)
        return 1;
    if ((cp >= 0x1100 && cp <= 0x11FF) || (cp >= 0xA960 && cp <= 0xA97F) ||
        (cp >= 0xD7B0 && cp <= 0xD7FF))
        return 0;
    if (cp >= 0xAC00 && cp <= 0xD7A3)
        return 1;
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
    if (p->combining_class != 0)
        return 0;
    if (p->comb_index != UINT16_MAX && (p->comb_index & 0x8000))
        return 0;
    if (p->decomp_seqindex == UINT16_MAX || p->decomp_type != 0)
        return 1; /* no canonical decomposition */
    if (p->comp_exclusion || p->decomp_seqindex < 0x4000)
        return 0;
    utf8proc_int32_t d[8];
    int boundclass = 0;
    utf8proc_ssize_t k = utf8proc_decompose_char((utf8proc_int32_t)cp, d, 8, UTF8PROC_DECOMPOSE,
                                                 &boundclass);
    return k >= 2 && k <= 8 && utf8proc_get_property(d[0])->combining_class == 0;
}

/* Whether the form leaves the run unchanged, judged character by
 * character: well-formed and every character passes the form's test. */
static int run_is_stable(tok_norm_type type, const char *s, size_t n)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t l, bad;
        /* two- and three-byte forms inline (nearly all of Latin, Cyrillic,
         * Greek, CJK and kana text), the rest through the full decoder */
        if (u[i] >= 0xC2 && u[i] <= 0xDF && i + 1 < n && (u[i + 1] & 0xC0) == 0x80) {
            cp = (uint32_t)(u[i] & 0x1F) << 6 | (u[i + 1] & 0x3F);
            l = 2;
        } else if (u[i] >= 0xE1 && u[i] <= 0xEF && i + 2 < n && (u[i + 1] & 0xC0) == 0x80 &&
                   (u[i + 2] & 0xC0) == 0x80 && (u[i] != 0xED || u[i + 1] < 0xA0)) {
            cp = (uint32_t)(u[i] & 0x0F) << 12 | (uint32_t)(u[i + 1] & 0x3F) << 6 |
                 (u[i + 2] & 0x3F);
            l = 3;
        } else {
            l = tok_utf8_next(u + i, n - i, &cp, &bad);
        }
        if (!l || !(type == NORM_NFC ? nfc_stable(cp) : inert(cp)))
            return 0;
        i += l;
    }
    return 1;
}

/* Appends the normalized text to out; with `same` set, text the form leaves
 * as it is is not copied: *same says so and out is left untouched. */
static int unicode_norm(tok_norm_type type, const char *s, size_t n, strbuf *out, int *same,
                        memra_err *err)
{
    int opts = UTF8PROC_STABLE;
    switch (type) {
    case NORM_NFC: opts |= UTF8PROC_COMPOSE; break;
    case NORM_NFD: opts |= UTF8PROC_DECOMPOSE; break;
    case NORM_NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NORM_NFKD: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    default: break;
    }
    /* s[done, i) is known to be stable and not yet copied: stable
     * stretches go out in one copy */
    size_t i = 0, done = 0;
    while (i < n) {
        /* an ASCII run (eight bytes at a time), then the non-ASCII run after
         * it, normalized together with the ASCII character in front, which
         * may take combining marks */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        while (i < n && (uint8_t)s[i] < 0x80)
            i++;
        if (i == n)
            break;
        size_t na = i;
        size_t start = na > done ? na - 1 : na;
        while (i < n && (uint8_t)s[i] >= 0x80)
            i++;
        if (run_is_stable(type, s + na, i - na))
            continue;
        sb_append(out, s + done, start - done);
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
        done = i;
    }
    if (same) {
        *same = done == 0;
        if (*same)
            return 0;
    }
    sb_append(out, s + done, n - done);
    return 0;
}

/* Lowercase as `tokenizers` does it, character by character with Rust's
 * char::to_lowercase: the simple mapping, except for the one character
 * whose unconditional full mapping is longer (SpecialCasing.txt): U+0130
 * LATIN CAPITAL LETTER I WITH DOT ABOVE becomes "i" + U+0307. */
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
        if (cp == 0x130) {
            sb_append(out, "i\xCC\x87", 3);
            i += l;
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

/* Every match of the step's regex replaced by its content, matches taken
 * left to right without overlap as `tokenizers` does; an empty match
 * replaces nothing and the scan steps over one character. */
static int replace_regex(const tok_norm_step *st, const char *s, size_t n, strbuf *out,
                         memra_err *err)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(st->re, NULL);
    if (!md)
        return memra_fail(err, "normalizer Replace: out of memory for PCRE2 match data");
    size_t off = 0, run = 0;
    int rc = 0;
    while (off < n) {
        int m = pcre2_match(st->re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, md, NULL);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(m, msg, sizeof msg);
            rc = memra_fail(err, "normalizer Replace '%s' failed at byte %zu: %s", st->a, off,
                            (const char *)msg);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] > ov[0]) {
            sb_append(out, s + run, ov[0] - run);
            sb_append(out, st->b, st->blen);
            off = run = ov[1];
        } else {
            off = ov[0] + 1;
            while (off < n && ((uint8_t)s[off] & 0xC0) == 0x80)
                off++;
        }
    }
    sb_append(out, s + run, n - run);
    pcre2_match_data_free(md);
    return rc;
}

/* StripAccents: every character of General_Category Mark (Mn, Mc, Me)
 * removed, which is what `tokenizers` filters with is_combining_mark.
 * Ill-formed bytes (none reach here after the U+FFFD pass) are kept. */
static void strip_accents(const char *s, size_t n, strbuf *out)
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
        utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
        if (c != UTF8PROC_CATEGORY_MN && c != UTF8PROC_CATEGORY_MC && c != UTF8PROC_CATEGORY_ME)
            sb_append(out, s + i, l);
        i += l;
    }
}

/* Unicode White_Space, Rust's char::is_whitespace, which Strip uses. */
static int is_white_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

static void strip(const tok_norm_step *st, const char *s, size_t n, strbuf *out)
{
    size_t a = 0, b = n;
    while (st->strip_left && a < b) {
        uint32_t cp;
        size_t bad;
        size_t l = tok_utf8_next((const uint8_t *)s + a, b - a, &cp, &bad);
        if (!l || !is_white_space(cp))
            break;
        a += l;
    }
    while (st->strip_right && b > a) {
        size_t k = b - 1;
        while (k > a && ((uint8_t)s[k] & 0xC0) == 0x80)
            k--;
        uint32_t cp;
        size_t bad;
        size_t l = tok_utf8_next((const uint8_t *)s + k, b - k, &cp, &bad);
        if (!l || k + l != b || !is_white_space(cp))
            break;
        b = k;
    }
    sb_append(out, s + a, b - a);
}

/* Each step reads the previous step's output: the last step writes into
 * `out`, the ones before it into two scratch buffers in turn, so a single
 * step (Qwen's NFC) reads the input in place and nothing is copied. */
int tok_normalize(const tokenizer *t, const char *s, size_t n, strbuf *out, memra_err *err)
{
    sb_clear(out);
    if (t->n_norm == 0 || n == 0) {
        sb_append(out, s, n);
        return 0;
    }
    strbuf tmp[2];
    sb_init(&tmp[0]);
    sb_init(&tmp[1]);
    const char *src = s;
    size_t src_len = n;
    int rc = 0;
    for (size_t k = 0; k < t->n_norm && rc == 0; k++) {
        const tok_norm_step *st = &t->norm[k];
        strbuf *dst = k + 1 == t->n_norm ? out : &tmp[k % 2];
        sb_clear(dst);
        switch (st->type) {
        case NORM_NFC:
        case NORM_NFD:
        case NORM_NFKC:
        case NORM_NFKD:
            rc = unicode_norm(st->type, src, src_len, dst, NULL, err);
            break;
        case NORM_PREPEND:
            if (src_len > 0)
                sb_append(dst, st->a, st->alen);
            sb_append(dst, src, src_len);
            break;
        case NORM_REPLACE:
            if (st->re)
                rc = replace_regex(st, src, src_len, dst, err);
            else
                replace(st, src, src_len, dst);
            break;
        case NORM_LOWERCASE:
            lowercase(src, src_len, dst);
            break;
        case NORM_STRIP_ACCENTS:
            strip_accents(src, src_len, dst);
            break;
        case NORM_STRIP:
            strip(st, src, src_len, dst);
            break;
        }
        src = dst->data ? dst->data : "";
        src_len = dst->len;
    }
    sb_append(out, "", 0); /* data is never NULL, even when every step removed everything */
    sb_free(&tmp[0]);
    sb_free(&tmp[1]);
    return rc;
}

int tok_normalize_view(const tokenizer *t, const char *s, size_t n, strbuf *buf, const char **res,
                       size_t *res_len, memra_err *err)
{
    *res = s;
    *res_len = n;
    if (t->n_norm == 0 || n == 0)
        return 0;
    tok_norm_type only = t->norm[0].type;
    if (t->n_norm == 1 && (only == NORM_NFC || only == NORM_NFD || only == NORM_NFKC ||
                           only == NORM_NFKD)) {
        int same = 0;
        sb_clear(buf);
        if (unicode_norm(only, s, n, buf, &same, err))
            return -1;
        if (same)
            return 0;
    } else if (tok_normalize(t, s, n, buf, err)) {
        return -1;
    }
    *res = buf->data;
    *res_len = buf->len;
    return 0;
}

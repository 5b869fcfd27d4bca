/* Pre-tokenizers: the regex splits that cut text into words before BPE,
 * run with PCRE2 (JIT) over Unicode classes, plus the other steps a
 * tokenizer.json may chain (literal Split, ByteLevel, Metaspace).
 *
 * The regexes are written for Oniguruma (Hugging Face `tokenizers`), whose
 * \s is Unicode White_Space. PCRE2's \s with PCRE2_UCP is the Z category
 * plus \t\n\v\f\r, which leaves out U+0085 (NEL) and so would split it
 * differently; we rewrite \s and \S into the explicit White_Space set
 * (llama.cpp's whitespace table is the same set). Everything else (\p{..}
 * classes, (?i:...), lookahead, possessive quantifiers) PCRE2 runs as
 * written. Empty matches produce no piece, as in both references. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "tok/tok_internal.h"

#define WS_SET                                                                               \
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"       \
    "\\x{202F}\\x{205F}\\x{3000}"

pcre2_code *tok_regex_compile(const char *pattern, size_t len, int multiline, memra_err *err)
{
    strbuf sb;
    sb_init(&sb);
    int in_class = 0;
    for (size_t i = 0; i < len; i++) {
        char c = pattern[i];
        if (c == '\\' && i + 1 < len) {
            char e = pattern[i + 1];
            if (e == 's') {
                sb_puts(&sb, in_class ? WS_SET : "[" WS_SET "]");
            } else if (e == 'S') {
                if (in_class) {
                    sb_free(&sb);
                    memra_fail(err, "pre-tokenizer regex '%.*s': \\S inside a character class "
                               "is not supported", (int)len, pattern);
                    return NULL;
                }
                sb_puts(&sb, "[^" WS_SET "]");
            } else {
                sb_putc(&sb, c);
                sb_putc(&sb, e);
            }
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            sb_putc(&sb, c);
            if (i + 1 < len && pattern[i + 1] == '^')
                sb_putc(&sb, pattern[++i]);
            if (i + 1 < len && pattern[i + 1] == ']')
                sb_putc(&sb, pattern[++i]);
            continue;
        }
        if (in_class && c == '[' && i + 1 < len && pattern[i + 1] == ':') {
            const char *end = NULL;
            for (size_t j = i + 2; j + 1 < len; j++)
                if (pattern[j] == ':' && pattern[j + 1] == ']') {
                    end = pattern + j + 2;
                    break;
                }
            if (end) {
                sb_append(&sb, pattern + i, (size_t)(end - (pattern + i)));
                i = (size_t)(end - pattern) - 1;
                continue;
            }
        }
        if (in_class && c == ']')
            in_class = 0;
        sb_putc(&sb, c);
    }
    int code;
    PCRE2_SIZE off;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (multiline ? PCRE2_MULTILINE : 0);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)sb_str(&sb), sb.len, opts, &code, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        memra_fail(err, "pre-tokenizer regex '%.*s': %s at offset %zu", (int)len, pattern,
                   (const char *)msg, (size_t)off);
        sb_free(&sb);
        return NULL;
    }
    sb_free(&sb);
    /* Without JIT (some platforms lack it) the interpreter gives the same
     * matches, only slower. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

void tok_pieces_push(tok_pieces *p, const char *s, size_t n)
{
    if (n == 0)
        return;
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 64;
        p->p = xrealloc(p->p, p->cap * sizeof *p->p);
        p->len = xrealloc(p->len, p->cap * sizeof *p->len);
    }
    p->p[p->n] = s;
    p->len[p->n] = n;
    p->n++;
}

void tok_pieces_clear(tok_pieces *p)
{
    p->n = 0;
}

void tok_pieces_free(tok_pieces *p)
{
    free(p->p);
    free(p->len);
    memset(p, 0, sizeof *p);
}

static char *owned_copy(tok_scratch *s, size_t n)
{
    if (s->n_owned == s->cap_owned) {
        s->cap_owned = s->cap_owned ? s->cap_owned * 2 : 16;
        s->owned = xrealloc(s->owned, s->cap_owned * sizeof *s->owned);
    }
    char *p = xmalloc(n + 1);
    s->owned[s->n_owned++] = p;
    return p;
}

static void mpos_push(tok_scratch *s, size_t *n, size_t a, size_t b)
{
    if (*n + 2 > s->mpos_cap) {
        s->mpos_cap = s->mpos_cap ? s->mpos_cap * 2 : 256;
        s->mpos = xrealloc(s->mpos, s->mpos_cap * sizeof *s->mpos);
    }
    s->mpos[(*n)++] = a;
    s->mpos[(*n)++] = b;
}

/* Per-call PCRE2 state: match data sized for any of our patterns and a JIT
 * stack large enough for long whitespace runs. */
static int ensure_match_state(tok_scratch *s, memra_err *err)
{
    if (s->md)
        return 0;
    s->md = pcre2_match_data_create(16, NULL);
    s->mctx = pcre2_match_context_create(NULL);
    s->jit = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, NULL);
    if (!s->md || !s->mctx)
        return memra_fail(err, "pre-tokenizer: out of memory for PCRE2 match data");
    if (s->jit)
        pcre2_jit_stack_assign(s->mctx, NULL, s->jit);
    return 0;
}

/* Match positions of one step in p[0..n): pairs (start, end), non-empty. */
static int find_matches(const tok_pre_step *st, tok_scratch *s, const char *p, size_t n,
                        size_t *nm, memra_err *err)
{
    *nm = 0;
    if (st->type == PRE_SPLIT_LITERAL) {
        if (st->lit_len == 0)
            return 0;
        size_t i = 0;
        while (i + st->lit_len <= n) {
            const char *f = memmem(p + i, n - i, st->lit, st->lit_len);
            if (!f)
                break;
            size_t a = (size_t)(f - p);
            mpos_push(s, nm, a, a + st->lit_len);
            i = a + st->lit_len;
        }
        return 0;
    }
    if (ensure_match_state(s, err))
        return -1;
    size_t off = 0;
    while (off < n) {
        int rc = pcre2_match(st->re, (PCRE2_SPTR)p, n, off, PCRE2_NO_UTF_CHECK, s->md, s->mctx);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return memra_fail(err, "pre-tokenizer regex failed at byte %zu of a %zu-byte piece: %s",
                              off, n, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t a = ov[0], b = ov[1];
        if (b > a) {
            mpos_push(s, nm, a, b);
            off = b;
        } else {
            /* an empty match: step over one character */
            off = a + 1;
            while (off < n && ((uint8_t)p[off] & 0xC0) == 0x80)
                off++;
        }
    }
    return 0;
}

/* Turn the match list into pieces per the Split behaviour, as tokenizers'
 * NormalizedString::split does. */
static void apply_behavior(const tok_pre_step *st, const tok_scratch *s, size_t nm, const char *p,
                           size_t n, tok_pieces *out)
{
    /* segments: (start, end, is_match), in order, gaps included */
    size_t prev = 0;
    size_t cur_a = 0, cur_b = 0;
    int have = 0;      /* a pending piece (MERGED_PREV, CONTIGUOUS) */
    int prev_match = 0;
    size_t nseg = nm + 1;
    size_t *seg_a = xmalloc((2 * nseg + 1) * sizeof *seg_a);
    size_t *seg_b = xmalloc((2 * nseg + 1) * sizeof *seg_b);
    int *seg_m = xmalloc((2 * nseg + 1) * sizeof *seg_m);
    size_t k = 0;
    for (size_t i = 0; i < nm; i += 2) {
        size_t a = s->mpos[i], b = s->mpos[i + 1];
        if (a > prev) {
            seg_a[k] = prev, seg_b[k] = a, seg_m[k] = 0;
            k++;
        }
        seg_a[k] = a, seg_b[k] = b, seg_m[k] = 1;
        k++;
        prev = b;
    }
    if (prev < n) {
        seg_a[k] = prev, seg_b[k] = n, seg_m[k] = 0;
        k++;
    }
    if (st->invert)
        for (size_t i = 0; i < k; i++)
            seg_m[i] = !seg_m[i];
    switch (st->behavior) {
    case SPLIT_ISOLATED:
        for (size_t i = 0; i < k; i++)
            tok_pieces_push(out, p + seg_a[i], seg_b[i] - seg_a[i]);
        break;
    case SPLIT_REMOVED:
        for (size_t i = 0; i < k; i++)
            if (!seg_m[i])
                tok_pieces_push(out, p + seg_a[i], seg_b[i] - seg_a[i]);
        break;
    case SPLIT_MERGED_PREV:
    case SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < k; i++) {
            int join = st->behavior == SPLIT_MERGED_PREV ? (seg_m[i] && !prev_match)
                                                         : (seg_m[i] == prev_match);
            if (join && have) {
                cur_b = seg_b[i];
            } else {
                if (have)
                    tok_pieces_push(out, p + cur_a, cur_b - cur_a);
                cur_a = seg_a[i], cur_b = seg_b[i], have = 1;
            }
            prev_match = seg_m[i];
        }
        if (have)
            tok_pieces_push(out, p + cur_a, cur_b - cur_a);
        break;
    case SPLIT_MERGED_NEXT: {
        /* walk from the right: a match joins the piece after it unless
         * that segment is a match too */
        size_t base = out->n;
        int next_match = 0;
        for (size_t j = k; j-- > 0;) {
            int join = seg_m[j] && !next_match;
            if (join && have) {
                cur_a = seg_a[j];
            } else {
                if (have)
                    tok_pieces_push(out, p + cur_a, cur_b - cur_a);
                cur_a = seg_a[j], cur_b = seg_b[j], have = 1;
            }
            next_match = seg_m[j];
        }
        if (have)
            tok_pieces_push(out, p + cur_a, cur_b - cur_a);
        for (size_t i = base, j = out->n; i + 1 < j; i++, j--) {
            const char *tp = out->p[i];
            size_t tl = out->len[i];
            out->p[i] = out->p[j - 1], out->len[i] = out->len[j - 1];
            out->p[j - 1] = tp, out->len[j - 1] = tl;
        }
        break;
    }
    }
    free(seg_a);
    free(seg_b);
    free(seg_m);
}

/* Replace every occurrence of `from` by `to` in p[0..n) into an owned copy. */
static const char *replace_all(tok_scratch *s, const char *p, size_t n, const char *from,
                               size_t flen, const char *to, size_t tlen, const char *prefix,
                               size_t plen, size_t *out_len)
{
    size_t cnt = 0;
    for (size_t i = 0; i + flen <= n;) {
        if (memcmp(p + i, from, flen) == 0) {
            cnt++;
            i += flen;
        } else {
            i++;
        }
    }
    char *o = owned_copy(s, plen + n + cnt * tlen);
    size_t k = 0;
    memcpy(o, prefix, plen);
    k = plen;
    for (size_t i = 0; i < n;) {
        if (i + flen <= n && memcmp(p + i, from, flen) == 0) {
            memcpy(o + k, to, tlen);
            k += tlen;
            i += flen;
        } else {
            o[k++] = p[i++];
        }
    }
    *out_len = k;
    return o;
}

static int run_step(const tok_pre_step *st, tok_scratch *s, const char *p, size_t n, int first,
                    tok_pieces *out, memra_err *err)
{
    size_t nm;
    switch (st->type) {
    case PRE_SPLIT_REGEX:
    case PRE_SPLIT_LITERAL:
        if (find_matches(st, s, p, n, &nm, err))
            return -1;
        apply_behavior(st, s, nm, p, n, out);
        return 0;
    case PRE_BYTELEVEL:
        if (st->add_prefix_space && p[0] != ' ') {
            char *o = owned_copy(s, n + 1);
            o[0] = ' ';
            memcpy(o + 1, p, n);
            p = o;
            n++;
        }
        if (!st->re) {
            tok_pieces_push(out, p, n);
            return 0;
        }
        if (find_matches(st, s, p, n, &nm, err))
            return -1;
        apply_behavior(st, s, nm, p, n, out);
        return 0;
    case PRE_METASPACE: {
        int prepend = st->prepend_scheme == PREPEND_ALWAYS ||
                      (st->prepend_scheme == PREPEND_FIRST && first);
        size_t rl = st->lit_len;
        const char *pre = "";
        size_t plen = 0;
        /* the prefix goes on unless the text (after replacing spaces)
         * already starts with the replacement */
        if (prepend && !(p[0] == ' ' || (n >= rl && memcmp(p, st->lit, rl) == 0))) {
            pre = st->lit;
            plen = rl;
        }
        size_t nl;
        const char *q = replace_all(s, p, n, " ", 1, st->lit, rl, pre, plen, &nl);
        if (!st->split) {
            tok_pieces_push(out, q, nl);
            return 0;
        }
        tok_pre_step sp = {.type = PRE_SPLIT_LITERAL, .lit = st->lit, .lit_len = rl,
                           .behavior = SPLIT_MERGED_NEXT};
        if (find_matches(&sp, s, q, nl, &nm, err))
            return -1;
        apply_behavior(&sp, s, nm, q, nl, out);
        return 0;
    }
    }
    return 0;
}

int tok_pretokenize(const tokenizer *t, tok_scratch *s, const char *text, size_t len,
                    int first_piece, tok_pieces *out, memra_err *err)
{
    tok_pieces_clear(out);
    if (len == 0)
        return 0;
    if (t->n_pre == 0) {
        tok_pieces_push(out, text, len);
        return 0;
    }
    if (t->n_pre == 1)
        return run_step(&t->pre[0], s, text, len, first_piece, out, err);
    tok_pieces cur = {0}, next = {0};
    tok_pieces_push(&cur, text, len);
    int rc = 0;
    for (size_t k = 0; k < t->n_pre && rc == 0; k++) {
        tok_pieces *dst = k + 1 == t->n_pre ? out : &next;
        tok_pieces_clear(dst);
        for (size_t i = 0; i < cur.n && rc == 0; i++)
            rc = run_step(&t->pre[k], s, cur.p[i], cur.len[i],
                          first_piece && i == 0 && cur.p[0] == text, dst, err);
        if (dst == &next) {
            tok_pieces tmp = cur;
            cur = next;
            next = tmp;
        }
    }
    tok_pieces_free(&cur);
    tok_pieces_free(&next);
    return rc;
}

/* Building a grammar: rules, byte sets, code-point classes compiled to UTF-8
 * byte sequences, the checks the matcher relies on, and the flat form. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "grammar/gram_internal.h"

void gb_init(gram_builder *b)
{
    memset(b, 0, sizeof *b);
}

void gb_seq_free(gb_seq *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

void gb_free(gram_builder *b)
{
    for (int i = 0; i < b->n_rules; i++) {
        for (int j = 0; j < b->rules[i].n_alts; j++)
            gb_seq_free(&b->rules[i].alts[j]);
        free(b->rules[i].alts);
        free(b->rules[i].name);
    }
    free(b->rules);
    free(b->sets);
    memset(b, 0, sizeof *b);
}

static int gb_add_rule(gram_builder *b, char *name)
{
    if (b->n_rules == b->cap_rules) {
        b->cap_rules = b->cap_rules ? 2 * b->cap_rules : 32;
        b->rules = xrealloc(b->rules, (size_t)b->cap_rules * sizeof *b->rules);
    }
    gb_rule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    r->name = name;
    return b->n_rules++;
}

int gb_rule_id(gram_builder *b, const char *name, size_t len)
{
    for (int i = 0; i < b->n_rules; i++)
        if (strlen(b->rules[i].name) == len && memcmp(b->rules[i].name, name, len) == 0)
            return i;
    char *s = xmalloc(len + 1);
    memcpy(s, name, len);
    s[len] = 0;
    return gb_add_rule(b, s);
}

int gb_new_rule(gram_builder *b, const char *base)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s-%d", base, b->n_rules);
    int r = gb_add_rule(b, xstrdup(buf));
    b->rules[r].defined = 1;
    return r;
}

void gb_seq_push(gb_seq *s, uint32_t kind, uint32_t arg)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->v = xrealloc(s->v, (size_t)s->cap * sizeof *s->v);
    }
    s->v[s->n].kind = kind;
    s->v[s->n].arg = arg;
    s->n++;
}

void gb_add_alt(gram_builder *b, int r, gb_seq *seq)
{
    gb_rule *rule = &b->rules[r];
    if (rule->n_alts == rule->cap_alts) {
        rule->cap_alts = rule->cap_alts ? 2 * rule->cap_alts : 4;
        rule->alts = xrealloc(rule->alts, (size_t)rule->cap_alts * sizeof *rule->alts);
    }
    rule->alts[rule->n_alts++] = *seq;
    memset(seq, 0, sizeof *seq);
}

int gb_set_id(gram_builder *b, const gram_byteset *set)
{
    for (int i = 0; i < b->n_sets; i++)
        if (memcmp(&b->sets[i], set, sizeof *set) == 0)
            return i;
    if (b->n_sets == b->cap_sets) {
        b->cap_sets = b->cap_sets ? 2 * b->cap_sets : 16;
        b->sets = xrealloc(b->sets, (size_t)b->cap_sets * sizeof *b->sets);
    }
    b->sets[b->n_sets] = *set;
    return b->n_sets++;
}

static void push_byte_range(gram_builder *b, gb_seq *seq, unsigned lo, unsigned hi)
{
    gram_byteset s;
    memset(&s, 0, sizeof s);
    for (unsigned c = lo; c <= hi; c++)
        gram_bs_add(&s, c);
    gb_seq_push(seq, GE_BYTES, (uint32_t)gb_set_id(b, &s));
}

void gb_push_literal(gram_builder *b, gb_seq *seq, const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        push_byte_range(b, seq, s[i], s[i]);
}

static int utf8_encode(uint32_t c, uint8_t *o)
{
    if (c < 0x80) {
        o[0] = (uint8_t)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (uint8_t)(0xC0 | (c >> 6));
        o[1] = (uint8_t)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (c >> 12));
        o[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (c >> 18));
    o[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

/* A code-point range becomes byte-range sequences: first split where the
 * encoded length changes, then where a continuation byte would not cover its
 * whole 0x80-0xBF span, until every piece is a product of byte ranges
 * (lo's bytes .. hi's bytes, position by position). Multi-byte pieces become
 * alternatives of `rule`; single bytes gather into `ascii`. */
static void utf8_range(gram_builder *b, int rule, gram_byteset *ascii, uint32_t lo, uint32_t hi)
{
    static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
    if (lo > hi)
        return;
    for (int i = 0; i < 3; i++)
        if (lo <= bounds[i] && hi > bounds[i]) {
            utf8_range(b, rule, ascii, lo, bounds[i]);
            utf8_range(b, rule, ascii, bounds[i] + 1, hi);
            return;
        }
    if (hi < 0x80) {
        for (uint32_t c = lo; c <= hi; c++)
            gram_bs_add(ascii, c);
        return;
    }
    uint8_t el[4], eh[4];
    int n = utf8_encode(lo, el);
    utf8_encode(hi, eh);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_range(b, rule, ascii, lo, lo | m);
                utf8_range(b, rule, ascii, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                utf8_range(b, rule, ascii, lo, (hi & ~m) - 1);
                utf8_range(b, rule, ascii, hi & ~m, hi);
                return;
            }
        }
    }
    gb_seq seq = {0};
    for (int i = 0; i < n; i++)
        push_byte_range(b, &seq, el[i], eh[i]);
    gb_add_alt(b, rule, &seq);
}

static int cmp_range(const void *a, const void *b)
{
    const gram_cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

void gb_push_class(gram_builder *b, gb_seq *seq, const gram_cprange *r, int n, int negated,
                   const char *base)
{
    /* Normalize: sorted, merged, then complemented; surrogates are cut out
     * when the ranges are encoded. */
    gram_cprange *v = xmalloc(((size_t)n + 2) * 2 * sizeof *v);
    if (n)
        memcpy(v, r, (size_t)n * sizeof *v);
    qsort(v, (size_t)n, sizeof *v, cmp_range);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && v[i].lo <= v[m - 1].hi + 1) {
            if (v[i].hi > v[m - 1].hi)
                v[m - 1].hi = v[i].hi;
        } else {
            v[m++] = v[i];
        }
    }
    if (negated) {
        gram_cprange *c = xmalloc(((size_t)m + 1) * sizeof *c);
        int k = 0;
        uint32_t next = 0;
        for (int i = 0; i < m; i++) {
            if (v[i].lo > next)
                c[k++] = (gram_cprange){next, v[i].lo - 1};
            next = v[i].hi + 1;
        }
        if (next <= 0x10FFFF)
            c[k++] = (gram_cprange){next, 0x10FFFF};
        free(v);
        v = xmalloc(((size_t)k + 1) * 2 * sizeof *v);
        memcpy(v, c, (size_t)k * sizeof *v);
        free(c);
        m = k;
    }
    int all_ascii = 1;
    for (int i = 0; i < m; i++)
        if (v[i].hi >= 0x80)
            all_ascii = 0;
    gram_byteset ascii;
    memset(&ascii, 0, sizeof ascii);
    if (all_ascii) {
        for (int i = 0; i < m; i++)
            for (uint32_t c = v[i].lo; c <= v[i].hi; c++)
                gram_bs_add(&ascii, c);
        gb_seq_push(seq, GE_BYTES, (uint32_t)gb_set_id(b, &ascii));
        free(v);
        return;
    }
    int rule = gb_new_rule(b, base);
    for (int i = 0; i < m; i++) {
        uint32_t lo = v[i].lo, hi = v[i].hi > 0x10FFFF ? 0x10FFFF : v[i].hi;
        if (lo <= 0xDFFF && hi >= 0xD800) {
            utf8_range(b, rule, &ascii, lo, 0xD7FF);
            utf8_range(b, rule, &ascii, 0xE000, hi);
        } else {
            utf8_range(b, rule, &ascii, lo, hi);
        }
    }
    static const gram_byteset none;
    if (memcmp(&ascii, &none, sizeof none) != 0) {
        gb_seq one = {0};
        gb_seq_push(&one, GE_BYTES, (uint32_t)gb_set_id(b, &ascii));
        gb_add_alt(b, rule, &one);
    }
    gb_seq_push(seq, GE_REF, (uint32_t)rule);
    free(v);
}

/* Nullable rules (those that can match nothing), to a fixed point. */
static void find_nullable(const gram_builder *b, char *nullable)
{
    int changed = 1;
    while (changed) {
        changed = 0;
        for (int r = 0; r < b->n_rules; r++) {
            if (nullable[r])
                continue;
            for (int a = 0; a < b->rules[r].n_alts && !nullable[r]; a++) {
                const gb_seq *s = &b->rules[r].alts[a];
                int all = 1;
                for (int i = 0; i < s->n && all; i++)
                    all = s->v[i].kind == GE_REF && nullable[s->v[i].arg];
                if (all) {
                    nullable[r] = 1;
                    changed = 1;
                }
            }
        }
    }
}

/* The matcher expands references before it reads a byte; a rule that can
 * reach itself without reading one would expand forever, so it is refused.
 * colour: 0 unvisited, 1 on the path, 2 done. */
static int left_cycle(const gram_builder *b, const char *nullable, char *colour, int r, int *at)
{
    colour[r] = 1;
    for (int a = 0; a < b->rules[r].n_alts; a++) {
        const gb_seq *s = &b->rules[r].alts[a];
        for (int i = 0; i < s->n; i++) {
            if (s->v[i].kind != GE_REF)
                break;
            int t = (int)s->v[i].arg;
            if (colour[t] == 1) {
                *at = t;
                return 1;
            }
            if (colour[t] == 0 && left_cycle(b, nullable, colour, t, at))
                return 1;
            if (!nullable[t])
                break;
        }
    }
    colour[r] = 2;
    return 0;
}

gram_grammar *gb_finish(gram_builder *b, memra_err *err)
{
    gram_grammar *g = NULL;
    int root = -1;
    for (int r = 0; r < b->n_rules; r++) {
        if (!b->rules[r].defined) {
            memra_fail(err, "gbnf %d:%d: rule '%s' is used but never defined",
                       b->rules[r].ref_line, b->rules[r].ref_col, b->rules[r].name);
            goto out;
        }
        if (strcmp(b->rules[r].name, "root") == 0)
            root = r;
    }
    if (root < 0) {
        memra_fail(err, "gbnf: no 'root' rule (the grammar starts at root)");
        goto out;
    }
    char *nullable = xcalloc((size_t)b->n_rules, 1);
    char *colour = xcalloc((size_t)b->n_rules, 1);
    find_nullable(b, nullable);
    int at = -1, bad = 0;
    for (int r = 0; r < b->n_rules && !bad; r++)
        if (colour[r] == 0)
            bad = left_cycle(b, nullable, colour, r, &at);
    free(nullable);
    free(colour);
    if (bad) {
        memra_fail(err, "gbnf: rule '%s' is left-recursive (it can reach itself without "
                   "reading a character; a repetition of something that can be empty does "
                   "this too)", b->rules[at].name);
        goto out;
    }

    g = xcalloc(1, sizeof *g);
    size_t n_elems = 0, n_alts = 0;
    for (int r = 0; r < b->n_rules; r++) {
        n_alts += (size_t)b->rules[r].n_alts;
        for (int a = 0; a < b->rules[r].n_alts; a++)
            n_elems += (size_t)b->rules[r].alts[a].n + 1;
    }
    g->elems = xmalloc((n_elems + 1) * sizeof *g->elems);
    g->alts = xmalloc((n_alts + 1) * sizeof *g->alts);
    g->alt_first = xmalloc(((size_t)b->n_rules + 1) * sizeof *g->alt_first);
    g->names = xmalloc(((size_t)b->n_rules + 1) * sizeof *g->names);
    uint32_t e = 0, k = 0;
    for (int r = 0; r < b->n_rules; r++) {
        g->alt_first[r] = k;
        g->names[r] = b->rules[r].name;
        b->rules[r].name = NULL;
        for (int a = 0; a < b->rules[r].n_alts; a++) {
            const gb_seq *s = &b->rules[r].alts[a];
            g->alts[k++] = e;
            for (int i = 0; i < s->n; i++)
                g->elems[e++] = s->v[i];
            g->elems[e].kind = GE_END;
            g->elems[e++].arg = 0;
        }
    }
    g->alt_first[b->n_rules] = k;
    g->n_elems = e;
    g->n_rules = (uint32_t)b->n_rules;
    g->root = (uint32_t)root;
    g->n_sets = (uint32_t)b->n_sets;
    g->sets = b->sets;
    b->sets = NULL;
out:
    gb_free(b);
    return g;
}

void gram_free(gram_grammar *g)
{
    if (!g)
        return;
    for (uint32_t r = 0; r < g->n_rules; r++)
        free(g->names[r]);
    free(g->names);
    free(g->elems);
    free(g->alts);
    free(g->alt_first);
    free(g->sets);
    free(g);
}

int gram_n_rules(const gram_grammar *g)
{
    return (int)g->n_rules;
}

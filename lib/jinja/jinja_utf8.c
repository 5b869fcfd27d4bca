/* UTF-8 walking and the Unicode predicates Python's str methods and regex
 * classes use, so that strip(), split(), title() and the lexer's \s agree
 * with jinja2 on non-ASCII text. Character classes come from utf8proc. */
#include "core/utf8.h"
#include <utf8proc.h>

#include "jinja/jinja_internal.h"

size_t ju_decode(const char *str, size_t n, size_t i, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *)str + i;
    size_t left = n - i;
    unsigned c = s[0];
    size_t len;
    uint32_t v;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        v = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        v = c & 0x07;
    } else {
        *cp = c;
        return 1;
    }
    if (left < len) {
        *cp = c;
        return 1;
    }
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) {
            *cp = c;
            return 1;
        }
        v = (v << 6) | (s[k] & 0x3F);
    }
    if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)) ||
        (v >= 0xD800 && v <= 0xDFFF)) {
        *cp = c;
        return 1;
    }
    *cp = v;
    return len;
}

size_t ju_encode(uint32_t cp, char *buf)
{
    unsigned char *b = (unsigned char *)buf;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | (cp >> 6));
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (cp >> 12));
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (unsigned char)(0xF0 | (cp >> 18));
    b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

void ju_put(strbuf *sb, uint32_t cp)
{
    char buf[4];
    sb_append(sb, buf, ju_encode(cp, buf));
}

size_t ju_prev_len(const char *s, size_t i)
{
    size_t k = 1;
    while (k < 4 && k < i && (((unsigned char)s[i - k]) & 0xC0) == 0x80)
        k++;
    /* check that the lead byte really spans to i */
    uint32_t cp;
    if (ju_decode(s, i, i - k, &cp) == k)
        return k;
    return 1;
}

size_t ju_count(const char *s, size_t n)
{
    size_t count = 0;
    uint32_t cp;
    for (size_t i = 0; i < n; i += ju_decode(s, n, i, &cp))
        count++;
    return count;
}

size_t ju_offset(const char *s, size_t n, size_t index)
{
    size_t i = 0;
    uint32_t cp;
    while (index > 0 && i < n) {
        i += ju_decode(s, n, i, &cp);
        index--;
    }
    return i;
}

int ju_valid(const char *s, size_t n) { return utf8_valid(s, n); }

int ju_isspace(uint32_t cp)
{
    if (cp < 0x80)
        return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
    switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
        return 1;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

int ju_islinebreak(uint32_t cp)
{
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
           cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

static utf8proc_category_t cat(uint32_t cp)
{
    if (cp > 0x10FFFF)
        return UTF8PROC_CATEGORY_CN;
    return utf8proc_category((utf8proc_int32_t)cp);
}

int ju_isalpha(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    utf8proc_category_t c = cat(cp);
    return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}

int ju_isdigit(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= '0' && cp <= '9';
    return cat(cp) == UTF8PROC_CATEGORY_ND;
}

int ju_isword(uint32_t cp)
{
    if (cp < 0x80)
        return ju_isalpha(cp) || ju_isdigit(cp) || cp == '_';
    utf8proc_category_t c = cat(cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
           (c >= UTF8PROC_CATEGORY_MN && c <= UTF8PROC_CATEGORY_NO) || c == UTF8PROC_CATEGORY_PC;
}

int ju_iscased(uint32_t cp)
{
    utf8proc_category_t c = cat(cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
           ju_upper(cp) != cp || ju_lower(cp) != cp;
}

int ju_islower(uint32_t cp)
{
    return cat(cp) == UTF8PROC_CATEGORY_LL;
}

int ju_isupper(uint32_t cp)
{
    utf8proc_category_t c = cat(cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT;
}

int ju_isprintable(uint32_t cp)
{
    if (cp == ' ')
        return 1;
    switch (cat(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
        return 0;
    default:
        return 1;
    }
}

uint32_t ju_upper(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
    if (cp > 0x10FFFF)
        return cp;
    return (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp);
}

uint32_t ju_lower(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    if (cp > 0x10FFFF)
        return cp;
    return (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
}

uint32_t ju_title(uint32_t cp)
{
    if (cp < 0x80)
        return ju_upper(cp);
    if (cp > 0x10FFFF)
        return cp;
    return (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp);
}

/* ---- the counting arena ---- */

void jh_init(jheap *h, size_t limit)
{
    arena_init(&h->a, 1 << 16);
    h->used = 0;
    h->limit = limit;
}

void jh_free(jheap *h)
{
    arena_free(&h->a);
}

void *jh_alloc(jheap *h, size_t n)
{
    h->used += n + 16;
    return arena_alloc(&h->a, n);
}

char *jh_strndup(jheap *h, const char *s, size_t n)
{
    h->used += n + 16;
    return arena_strndup(&h->a, s, n);
}

int jh_over(const jheap *h)
{
    return h->used > h->limit;
}

/* UTF-8 decoding with the Unicode "maximal subpart" rule for ill-formed
 * input: the longest prefix of a valid sequence that the bytes begin is
 * one error (one U+FFFD), any other bad byte is one error on its own. This
 * is what Python's "replace" error handler, Rust's from_utf8_lossy and the
 * WHATWG decoder do, so lossily decoded text matches theirs. */
#include "core/utf8.h"
#include <string.h>

#include "tok/tok_internal.h"

/* Bounds of the second byte for each lead byte (Unicode Table 3-7). */
static void second_range(uint8_t lead, uint8_t *lo, uint8_t *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (lead == 0xE0)
        *lo = 0xA0;
    else if (lead == 0xED)
        *hi = 0x9F;
    else if (lead == 0xF0)
        *lo = 0x90;
    else if (lead == 0xF4)
        *hi = 0x8F;
}

size_t tok_utf8_next(const uint8_t *s, size_t n, uint32_t *cp, size_t *bad)
{
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t need;
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        v = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        v = c & 0x07;
    } else {
        *bad = 1;
        return 0;
    }
    uint8_t lo, hi;
    second_range(c, &lo, &hi);
    size_t i = 1;
    for (; i < need; i++) {
        if (i >= n) {
            *bad = i;
            return 0;
        }
        uint8_t b = s[i];
        uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) {
            *bad = i;
            return 0;
        }
        v = v << 6 | (b & 0x3F);
    }
    *cp = v;
    return need;
}

int tok_utf8_valid(const char *s, size_t n) { return utf8_valid(s, n); }

void tok_utf8_sanitize(const char *s, size_t n, strbuf *out)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0, run = 0;
    sb_reserve(out, n);
    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t bad;
        size_t l = tok_utf8_next(p + i, n - i, &cp, &bad);
        if (l) {
            i += l;
            continue;
        }
        sb_append(out, s + run, i - run);
        sb_append(out, "\xEF\xBF\xBD", 3);
        i += bad;
        run = i;
    }
    sb_append(out, s + run, n - run);
}

size_t tok_utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

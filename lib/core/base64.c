#include "core/base64.h"

static const char alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t base64_encoded_len(size_t n) { return (n + 2) / 3 * 4; }

void base64_encode(strbuf *out, const void *data, size_t n)
{
    const unsigned char *p = data;
    if (n == 0)
        return;
    sb_reserve(out, base64_encoded_len(n));
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
        char q[4] = {alphabet[v >> 18], alphabet[(v >> 12) & 63], alphabet[(v >> 6) & 63],
                     alphabet[v & 63]};
        sb_append(out, q, 4);
    }
    if (i < n) { /* one or two bytes left: padded to four characters */
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0);
        char q[4] = {alphabet[v >> 18], alphabet[(v >> 12) & 63],
                     i + 1 < n ? alphabet[(v >> 6) & 63] : '=', '='};
        sb_append(out, q, 4);
    }
}

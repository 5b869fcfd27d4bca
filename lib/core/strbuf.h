/* A growable byte string, always NUL-terminated. */
#ifndef MEMRA_CORE_STRBUF_H
#define MEMRA_CORE_STRBUF_H

#include <stddef.h>

typedef struct {
    char *data; /* NULL until the first append */
    size_t len, cap;
} strbuf;

void sb_init(strbuf *sb);
void sb_free(strbuf *sb);
void sb_clear(strbuf *sb);
void sb_reserve(strbuf *sb, size_t extra);
void sb_append(strbuf *sb, const void *data, size_t n);
void sb_puts(strbuf *sb, const char *s);
void sb_putc(strbuf *sb, char c);
void sb_printf(strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hand the buffer to the caller (who frees it); the strbuf is left empty. */
char *sb_take(strbuf *sb);
/* The contents as a C string ("" when empty). */
const char *sb_str(const strbuf *sb);

#endif

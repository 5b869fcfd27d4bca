#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int current_level = -1; /* -1: not yet read from MEMRA_LOG */

int log_parse_level(const char *s)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (!strcasecmp(s, names[i]))
            return i;
    if (s[0] >= '0' && s[0] <= '3' && s[1] == '\0')
        return s[0] - '0';
    return -1;
}

log_level log_get_level(void)
{
    if (current_level < 0) {
        const char *env = getenv("MEMRA_LOG");
        int lvl = env ? log_parse_level(env) : -1;
        current_level = lvl >= 0 ? lvl : LOG_WARN;
    }
    return (log_level)current_level;
}

void log_set_level(log_level level) { current_level = (int)level; }

void log_msg(log_level level, const char *fmt, ...)
{
    if ((int)level > (int)log_get_level())
        return;
    static const char *tags[] = {"error", "warn", "info", "debug"};
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* One fprintf per line so lines from threads do not interleave. */
    fprintf(stderr, "memra %s: %s\n", tags[level], line);
}

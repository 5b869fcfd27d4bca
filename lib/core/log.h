/* Levelled logging to stderr. The level comes from MEMRA_LOG
 * (error|warn|info|debug, default warn) or from log_set_level (a program's
 * -v flag wins over the environment). */
#ifndef MEMRA_CORE_LOG_H
#define MEMRA_CORE_LOG_H

typedef enum { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 } log_level;

void log_set_level(log_level level);
log_level log_get_level(void);
/* Parse "error|warn|info|debug" (or 0..3); returns -1 when unknown. */
int log_parse_level(const char *s);
void log_msg(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif

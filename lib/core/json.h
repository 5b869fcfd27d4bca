/* JSON through jansson, with errors in the library's convention: each getter
 * names the file and the key that was missing or of the wrong type. */
#ifndef MEMRA_CORE_JSON_H
#define MEMRA_CORE_JSON_H

#include <jansson.h>
#include <stdint.h>

#include "core/err.h"

/* Parse a whole file (refusing files over max_bytes); the caller decrefs. */
json_t *json_load_path(const char *path, size_t max_bytes, memra_err *err);
/* Parse a buffer; `what` names it in errors. Integers past int64 (real
 * checkpoints' configs write 1e30 in full) are read as reals, never fatal. */
json_t *json_parse_buf(const char *buf, size_t len, const char *what, memra_err *err);

/* Typed getters: a missing key leaves *out as the default passed in and
 * returns 0 when optional, -1 (with a message) when required; a key of the
 * wrong type is always an error. */
int json_get_int(const json_t *obj, const char *key, int required, int64_t *out,
                 const char *what, memra_err *err);
int json_get_num(const json_t *obj, const char *key, int required, double *out,
                 const char *what, memra_err *err);
int json_get_bool(const json_t *obj, const char *key, int required, int *out,
                  const char *what, memra_err *err);
/* *out points into the json value (valid while obj lives). */
int json_get_str(const json_t *obj, const char *key, int required, const char **out,
                 const char *what, memra_err *err);

#endif

#include "core/json.h"

#include <stdlib.h>

#include "core/mapfile.h"

json_t *json_parse_buf(const char *buf, size_t len, const char *what, memra_err *err)
{
    json_error_t je;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!root) {
        /* jansson quotes the bad token raw; keep the message to one line. */
        for (char *p = je.text; *p; p++)
            if ((unsigned char)*p < 0x20)
                *p = '?';
        memra_fail(err, "%s: invalid JSON at line %d column %d: %s", what, je.line, je.column,
                   je.text);
    }
    return root;
}

json_t *json_load_path(const char *path, size_t max_bytes, memra_err *err)
{
    char *buf;
    size_t len;
    if (read_small_file(path, max_bytes, &buf, &len, err) != 0)
        return NULL;
    json_t *root = json_parse_buf(buf, len, path, err);
    free(buf);
    return root;
}

static int missing(const char *key, int required, const char *what, memra_err *err)
{
    if (required)
        return memra_fail(err, "%s: missing required key \"%s\"", what, key);
    return 0;
}

int json_get_int(const json_t *obj, const char *key, int required, int64_t *out,
                 const char *what, memra_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return missing(key, required, what, err);
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return 0;
    }
    /* HF configs sometimes write integers as 4096.0. */
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == (double)(int64_t)d) {
            *out = (int64_t)d;
            return 0;
        }
    }
    return memra_fail(err, "%s: key \"%s\" must be an integer", what, key);
}

int json_get_num(const json_t *obj, const char *key, int required, double *out,
                 const char *what, memra_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return missing(key, required, what, err);
    if (!json_is_number(v))
        return memra_fail(err, "%s: key \"%s\" must be a number", what, key);
    *out = json_number_value(v);
    return 0;
}

int json_get_bool(const json_t *obj, const char *key, int required, int *out,
                  const char *what, memra_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return missing(key, required, what, err);
    if (!json_is_boolean(v))
        return memra_fail(err, "%s: key \"%s\" must be true or false", what, key);
    *out = json_is_true(v);
    return 0;
}

int json_get_str(const json_t *obj, const char *key, int required, const char **out,
                 const char *what, memra_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return missing(key, required, what, err);
    if (!json_is_string(v))
        return memra_fail(err, "%s: key \"%s\" must be a string", what, key);
    *out = json_string_value(v);
    return 0;
}

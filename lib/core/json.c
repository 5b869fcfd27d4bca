#include "core/json.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/mapfile.h"

/* Whether the integer literal p[0..n) (an optional '-' and digits) lies
 * outside int64: more than 19 digits, or 19 that compare above the limit. */
static int int_literal_too_big(const char *p, size_t n)
{
    int neg = n > 0 && p[0] == '-';
    const char *d = p + neg;
    size_t nd = n - (size_t)neg;
    while (nd > 1 && *d == '0') {
        d++;
        nd--;
    }
    const char *lim = neg ? "9223372036854775808" : "9223372036854775807";
    return nd > 19 || (nd == 19 && memcmp(d, lim, 19) > 0);
}

/* A copy of the JSON text with every integer literal past int64 given a
 * ".0", so jansson reads it as a real (a double) instead of failing:
 * real checkpoints write such numbers (Llama 3's tokenizer_config.json has
 * "model_max_length": 1000000000000000019884624838656). Strings are copied
 * as they are. NULL when there was nothing to widen. */
static char *widen_big_ints(const char *buf, size_t len, size_t *out_len)
{
    char *out = NULL;
    size_t o = 0, cap = 0, widened = 0;
    for (size_t i = 0; i < len;) {
        size_t start = i, end;
        if (buf[i] == '"') {
            for (i++; i < len && buf[i] != '"'; i++)
                if (buf[i] == '\\')
                    i++;
            end = i < len ? i + 1 : len;
        } else if (buf[i] == '-' || (buf[i] >= '0' && buf[i] <= '9')) {
            i++;
            while (i < len && buf[i] >= '0' && buf[i] <= '9')
                i++;
            end = i;
        } else {
            end = i + 1;
        }
        int number = buf[start] == '-' || (buf[start] >= '0' && buf[start] <= '9');
        int integer = end >= len || (buf[end] != '.' && buf[end] != 'e' && buf[end] != 'E');
        int widen = number && integer && int_literal_too_big(buf + start, end - start);
        size_t need = o + (end - start) + 2;
        if (need > cap) {
            cap = need > 2 * cap ? need : 2 * cap;
            out = xrealloc(out, cap);
        }
        memcpy(out + o, buf + start, end - start);
        o += end - start;
        if (widen) {
            memcpy(out + o, ".0", 2);
            o += 2;
            widened++;
        }
        i = end;
    }
    if (!widened) {
        free(out);
        return NULL;
    }
    *out_len = o;
    return out;
}

json_t *json_parse_buf(const char *buf, size_t len, const char *what, memra_err *err)
{
    json_error_t je;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!root && strstr(je.text, "too big")) {
        size_t wlen;
        char *wide = widen_big_ints(buf, len, &wlen);
        if (wide) {
            root = json_loadb(wide, wlen, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
            free(wide);
        }
    }
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

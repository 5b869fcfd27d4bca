/* lib/core/json.c: integers past int64 in real checkpoints' JSON are read
 * as reals, never fatal; everything else parses exactly as before. */
#include <math.h>

#include "core/err.h"
#include "core/json.h"
#include "test.h"

static json_t *parse(const char *text)
{
    memra_err err = {{0}};
    json_t *j = json_parse_buf(text, strlen(text), "test", &err);
    CHECK_MSG(j != NULL, "%s: %s", text, err.msg);
    return j;
}

static void test_big_integers_read_as_reals(void)
{
    /* Llama 3's tokenizer_config.json, verbatim */
    json_t *j = parse("{\"model_max_length\": 1000000000000000019884624838656, \"n\": 7}");
    if (j) {
        json_t *v = json_object_get(j, "model_max_length");
        CHECK(json_is_real(v) && json_real_value(v) == 1e30);
        CHECK(json_is_integer(json_object_get(j, "n")) &&
              json_integer_value(json_object_get(j, "n")) == 7);
        json_decref(j);
    }
    j = parse("[-99999999999999999999999, 9223372036854775807, -9223372036854775808, "
              "9223372036854775808]");
    if (j) {
        CHECK(json_is_real(json_array_get(j, 0)) && json_real_value(json_array_get(j, 0)) < -9e22);
        CHECK(json_is_integer(json_array_get(j, 1)) &&
              json_integer_value(json_array_get(j, 1)) == INT64_MAX);
        CHECK(json_is_integer(json_array_get(j, 2)) &&
              json_integer_value(json_array_get(j, 2)) == INT64_MIN);
        CHECK(json_is_real(json_array_get(j, 3)) &&
              json_real_value(json_array_get(j, 3)) == 9223372036854775808.0);
        json_decref(j);
    }
}

static void test_strings_untouched(void)
{
    /* digits inside strings (escaped quotes included) are not numbers */
    json_t *j = parse("{\"a\": \"12345678901234567890123\", \"b\\\"1\": 123456789012345678901234}");
    if (j) {
        CHECK(strcmp(json_string_value(json_object_get(j, "a")), "12345678901234567890123") == 0);
        CHECK(json_is_real(json_object_get(j, "b\"1")));
        json_decref(j);
    }
}

static void test_bad_json_still_fails(void)
{
    memra_err err = {{0}};
    const char *bad = "{\"a\": 1000000000000000000000000,}";
    CHECK(json_parse_buf(bad, strlen(bad), "cfg.json", &err) == NULL);
    CHECK_MSG(strstr(err.msg, "cfg.json: invalid JSON at line 1") != NULL, "%s", err.msg);
    const char *dup = "{\"a\": 1, \"a\": 2}";
    CHECK(json_parse_buf(dup, strlen(dup), "cfg.json", &err) == NULL);
}

TEST_MAIN(TEST_CASE(test_big_integers_read_as_reals), TEST_CASE(test_strings_untouched),
          TEST_CASE(test_bad_json_still_fails))

/* Grammar engine tests: GBNF parsing (every construct, and bad grammars with
 * their error text), the matcher on valid and invalid text, UTF-8 classes
 * followed byte by byte, JSON Schema compilation (each keyword, refusals
 * naming the keyword and path), and token masks over a small hand-made
 * vocabulary with exact expected sets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_maskpool.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "test.h"

static gram_grammar *gbnf(const char *text)
{
    memra_err err = {{0}};
    gram_grammar *g = gram_parse_gbnf(text, strlen(text), &err);
    CHECK_MSG(g != NULL, "%s: %s", text, err.msg);
    return g;
}

/* 1: the whole text is a sentence; 0: some byte refused or incomplete. */
static int matches(const gram_grammar *g, const char *s)
{
    gram_state *st = gram_state_new(g);
    int ok = gram_accept_bytes(st, s, strlen(s), NULL) == 0 && gram_is_complete(st);
    gram_state_free(st);
    return ok;
}

#define ACCEPTS(g, s) CHECK_MSG(matches((g), (s)), "should accept '%s'", (s))
#define REJECTS(g, s) CHECK_MSG(!matches((g), (s)), "should reject '%s'", (s))

static void gbnf_error_is(const char *text, const char *want)
{
    memra_err err = {{0}};
    gram_grammar *g = gram_parse_gbnf(text, strlen(text), &err);
    CHECK_MSG(g == NULL, "should fail: %s", text);
    CHECK_MSG(strstr(err.msg, want) != NULL, "error '%s' lacks '%s'", err.msg, want);
    gram_free(g);
}

static void test_gbnf_literals_and_alternatives(void)
{
    gram_grammar *g = gbnf("root ::= \"ab\" | \"c\" \"d\" # comment\n");
    if (!g)
        return;
    ACCEPTS(g, "ab");
    ACCEPTS(g, "cd");
    REJECTS(g, "a");
    REJECTS(g, "abc");
    REJECTS(g, "");
    gram_free(g);
    g = gbnf("root ::= \"\\n\\t\\\\\\\"\\x41\\u00e9\"");
    if (!g)
        return;
    ACCEPTS(g, "\n\t\\\"A\xc3\xa9");
    gram_free(g);
}

static void test_gbnf_rules_groups_multiline(void)
{
    const char *text = "# a list of numbers\n"
                       "root ::= \"[\" ( num ( \",\" num )* )? \"]\"\n"
                       "num  ::= \"-\"? digit+\n"
                       "digit ::=\n"
                       "  [0-9]\n"
                       "word ::= \"x\"\n"
                       "       | \"y\"\n";
    gram_grammar *g = gbnf(text);
    if (!g)
        return;
    ACCEPTS(g, "[]");
    ACCEPTS(g, "[1]");
    ACCEPTS(g, "[1,-23,456]");
    REJECTS(g, "[1,]");
    REJECTS(g, "[-]");
    REJECTS(g, "[1");
    gram_free(g);
    g = gbnf("root ::= (\n  \"a\" |\n  \"b\"\n) w\nw ::= \"x\"\n     | \"y\"");
    if (!g)
        return;
    ACCEPTS(g, "ax");
    ACCEPTS(g, "by");
    REJECTS(g, "ab");
    gram_free(g);
}

static void test_gbnf_classes(void)
{
    gram_grammar *g = gbnf("root ::= [a-cx] [^a-z] [\\-\\]] .");
    if (!g)
        return;
    ACCEPTS(g, "aA-z");
    ACCEPTS(g, "x1]\xe2\x82\xac"); /* . is any character, here U+20AC */
    REJECTS(g, "ab-z");
    REJECTS(g, "dA-z");
    REJECTS(g, "aA-\x80"); /* a lone continuation byte is no character */
    gram_free(g);
    /* Non-ASCII ranges are followed as UTF-8 bytes, surrogates excluded. */
    g = gbnf("root ::= [\\u00e0-\\u00ff\\u4e00-\\u9fff]+");
    if (!g)
        return;
    ACCEPTS(g, "\xc3\xa0\xe4\xb8\x80\xc3\xbf\xe9\xbf\xbf");
    REJECTS(g, "\xc3\x9f"); /* U+00DF */
    REJECTS(g, "a");
    gram_free(g);
    g = gbnf("root ::= [^\"]");
    if (!g)
        return;
    ACCEPTS(g, "\xf0\x9f\x98\x80");   /* U+1F600 */
    REJECTS(g, "\xed\xa0\x80");       /* U+D800, a surrogate */
    REJECTS(g, "\xf4\x90\x80\x80");   /* past U+10FFFF */
    REJECTS(g, "\xc0\xaf");           /* overlong */
    gram_free(g);
}

static void test_gbnf_repetition(void)
{
    gram_grammar *g = gbnf("root ::= \"a\"{2} \"b\"{1,3} \"c\"{2,} \"d\"{,1} \"ef\"?");
    if (!g)
        return;
    ACCEPTS(g, "aabcc");
    ACCEPTS(g, "aabbbccccdef");
    REJECTS(g, "abcc");
    REJECTS(g, "aabbbbcc");
    REJECTS(g, "aabc");
    REJECTS(g, "aabccdd");
    REJECTS(g, "aabcce");
    gram_free(g);
    g = gbnf("root ::= (\"x\" | \"yz\")+ [0-9]*");
    if (!g)
        return;
    ACCEPTS(g, "xyzx12");
    ACCEPTS(g, "yz");
    REJECTS(g, "y");
    REJECTS(g, "12");
    gram_free(g);
}

static void test_gbnf_errors(void)
{
    gbnf_error_is("root ::= \"abc", "gbnf 1:10: unterminated string literal");
    gbnf_error_is("root ::= [a-z", "gbnf 1:10: unterminated character class");
    gbnf_error_is("root ::= (\"a\"", "gbnf 1:10: unclosed '('");
    gbnf_error_is("root ::= \"a\"\nx ::= y", "gbnf 2:7: rule 'y' is used but never defined");
    gbnf_error_is("x ::= \"a\"", "no 'root' rule");
    gbnf_error_is("root \"a\"", "gbnf 1:6: expected '::=' after rule name 'root'");
    gbnf_error_is("root ::= \"a\"\nroot ::= \"b\"", "gbnf 2:1: rule 'root' is defined twice");
    gbnf_error_is("root ::= * \"a\"", "gbnf 1:10: '*' follows nothing it could repeat");
    gbnf_error_is("root ::= \"a\"{3,1}", "maximum is below the minimum");
    gbnf_error_is("root ::= \"\\q\"", "gbnf 1:11: unknown escape '\\q'");
    gbnf_error_is("root ::= [z-a]", "character range is backwards");
    gbnf_error_is("root ::= root \"a\"", "rule 'root' is left-recursive");
    gbnf_error_is("root ::= (\"a\"?)* \"b\"", "left-recursive");
    gbnf_error_is("root ::= \"a\" )", "gbnf 1:14: ')' without '('");
    gbnf_error_is("root ::= \"a\" @", "gbnf 1:14: unexpected character '@'");
}

static void test_matcher_state(void)
{
    gram_grammar *g = gbnf("root ::= [0-9]+ (\".\" [0-9]+)?");
    if (!g)
        return;
    gram_state *s = gram_state_new(g);
    memra_err err = {{0}};
    CHECK(!gram_is_complete(s));
    CHECK(gram_accept_bytes(s, "12", 2, &err) == 0);
    CHECK(gram_is_complete(s));
    CHECK(!gram_is_final(s));
    CHECK(gram_accept_bytes(s, "x", 1, &err) == -1);
    CHECK_MSG(strstr(err.msg, "byte 0 ('x') is not allowed here") != NULL, "%s", err.msg);
    /* A refused byte leaves the state as it was. */
    gram_state *c = gram_state_clone(s);
    CHECK(gram_accept_bytes(s, ".", 1, &err) == 0);
    CHECK(!gram_is_complete(s));
    CHECK(gram_accept_bytes(s, "5", 1, &err) == 0);
    CHECK(gram_is_complete(s));
    CHECK(gram_is_complete(c));
    CHECK(gram_accept_bytes(c, "3.", 2, &err) == 0);
    CHECK(!gram_is_complete(c));
    gram_state_free(c);
    gram_state_free(s);
    gram_free(g);
    /* A long repetition keeps the state small (right recursion is flat). */
    g = gbnf("root ::= \"a\"*");
    s = gram_state_new(g);
    for (int i = 0; i < 100000; i++)
        if (gram_accept_bytes(s, "a", 1, &err)) {
            CHECK_MSG(0, "%s", err.msg);
            break;
        }
    CHECK(gram_is_complete(s));
    gram_state_free(s);
    gram_free(g);
    /* Deep nesting: deep stacks are copied without recursion, and masks
     * still work at depth. */
    g = jsch_json_object(NULL);
    s = gram_state_new(g);
    CHECK(gram_accept_bytes(s, "{\"a\":", 5, &err) == 0);
    for (int i = 0; i < 200000; i++)
        if (gram_accept_bytes(s, "[", 1, &err)) {
            CHECK_MSG(0, "%s", err.msg);
            break;
        }
    const char *pieces[] = {"]", "[", "}", "1"};
    size_t lens[] = {1, 1, 1, 1};
    gram_vocab *v = gram_vocab_build(pieces, lens, 4, NULL);
    uint32_t m[1];
    CHECK(gram_mask(s, v, m) == 3);
    CHECK(m[0] == 0xB);
    gram_vocab_free(v);
    gram_state_free(s);
    gram_free(g);
}

static gram_grammar *schema(const char *text)
{
    memra_err err = {{0}};
    gram_grammar *g = jsch_compile_text(text, strlen(text), &err);
    CHECK_MSG(g != NULL, "%s: %s", text, err.msg);
    return g;
}

static void schema_error_is(const char *text, const char *want)
{
    memra_err err = {{0}};
    gram_grammar *g = jsch_compile_text(text, strlen(text), &err);
    CHECK_MSG(g == NULL, "should fail: %s", text);
    CHECK_MSG(strstr(err.msg, want) != NULL, "error '%s' lacks '%s'", err.msg, want);
    gram_free(g);
}

static void test_schema_primitives(void)
{
    gram_grammar *g = schema("{\"type\":\"integer\"}");
    if (g) {
        ACCEPTS(g, "0");
        ACCEPTS(g, "-12");
        REJECTS(g, "01");
        REJECTS(g, "1.5");
        REJECTS(g, "12345678901234567"); /* 17 digits: past the bound */
        gram_free(g);
    }
    g = schema("{\"type\":\"number\"}");
    if (g) {
        ACCEPTS(g, "1.5e-3");
        ACCEPTS(g, "-0.25");
        ACCEPTS(g, "7E+10");
        REJECTS(g, ".5");
        REJECTS(g, "1.");
        gram_free(g);
    }
    g = schema("{\"type\":\"string\"}");
    if (g) {
        ACCEPTS(g, "\"\"");
        ACCEPTS(g, "\"a \\\"q\\\" \\u00e9 \\n \xc3\xa9\"");
        REJECTS(g, "\"a\nb\"");
        REJECTS(g, "\"\\x\"");
        REJECTS(g, "\"abc");
        gram_free(g);
    }
    g = schema("{\"type\":[\"boolean\",\"null\"]}");
    if (g) {
        ACCEPTS(g, "true");
        ACCEPTS(g, "false");
        ACCEPTS(g, "null");
        REJECTS(g, "0");
        gram_free(g);
    }
    g = schema("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}");
    if (g) {
        ACCEPTS(g, "\"ab\"");
        ACCEPTS(g, "\"\\nbc\"");
        REJECTS(g, "\"a\"");
        REJECTS(g, "\"abcd\"");
        gram_free(g);
    }
}

static void test_schema_formats(void)
{
    gram_grammar *g = schema("{\"type\":\"string\",\"format\":\"date-time\"}");
    if (g) {
        ACCEPTS(g, "\"2026-12-01T21:41:25Z\"");
        ACCEPTS(g, "\"2026-12-01T21:41:25.123+01:00\"");
        REJECTS(g, "\"2026-13-01T21:41:25Z\"");
        REJECTS(g, "\"2026-12-01 21:41:25Z\"");
        gram_free(g);
    }
    g = schema("{\"type\":\"string\",\"format\":\"uuid\"}");
    if (g) {
        ACCEPTS(g, "\"123e4567-e89b-12d3-a456-426614174000\"");
        REJECTS(g, "\"123e4567e89b12d3a456426614174000\"");
        gram_free(g);
    }
    g = schema("{\"format\":\"email\"}");
    if (g) {
        ACCEPTS(g, "\"ann.lee@mail.example.com\"");
        REJECTS(g, "\"ann\"");
        REJECTS(g, "\"@x.com\"");
        ACCEPTS(g, "\"a+b_c%d-e@x-y.z.io\"");
        REJECTS(g, "\"ann..lee@x.com\"");
        REJECTS(g, "\".ann@x.com\"");
        REJECTS(g, "\"ann.@x.com\"");
        REJECTS(g, "\"ann@x-.com\"");
        REJECTS(g, "\"ann@-x.com\"");
        REJECTS(g, "\"ann@x..com\"");
        gram_free(g);
    }
    g = schema("{\"type\":\"string\",\"format\":\"date\"}");
    if (g) {
        ACCEPTS(g, "\"1999-01-31\"");
        ACCEPTS(g, "\"1999-12-31\"");
        ACCEPTS(g, "\"1999-11-30\"");
        REJECTS(g, "\"1999-11-31\"");
        REJECTS(g, "\"1999-04-31\"");
        REJECTS(g, "\"1999-02-30\"");
        REJECTS(g, "\"1999-00-10\"");
        REJECTS(g, "\"1999-10-00\"");
        /* February 29 exactly in the leap years, against the arithmetic. */
        for (int y = 1888; y <= 2420; y += 1) {
            char d[32];
            snprintf(d, sizeof d, "\"%04d-02-29\"", y);
            int leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
            gram_state *st = gram_state_new(g);
            int ok = gram_accept_bytes(st, d, strlen(d), NULL) == 0 && gram_is_complete(st);
            CHECK_MSG(ok == leap, "%s: accepted %d, leap %d", d, ok, leap);
            gram_state_free(st);
        }
        ACCEPTS(g, "\"0000-02-29\"");
        REJECTS(g, "\"0100-02-29\"");
        gram_free(g);
    }
    g = schema("{\"type\":\"string\",\"format\":\"time\"}");
    if (g) {
        ACCEPTS(g, "\"23:59:59Z\"");
        REJECTS(g, "\"24:00:00Z\"");
        gram_free(g);
    }
}

static void test_schema_objects(void)
{
    gram_grammar *g = schema("{\"type\":\"object\",\"properties\":{"
                             "\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
                             "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},"
                             "\"required\":[\"age\",\"name\"]}");
    if (g) {
        /* Required first, in declared order; then optional ones. */
        ACCEPTS(g, "{\"name\":\"x\",\"age\":3}");
        ACCEPTS(g, "{ \"name\" : \"x\" , \"age\" : 3 , \"tags\" : [ \"a\" , \"b\" ] }");
        ACCEPTS(g, "{\n  \"name\": \"x\",\n  \"age\": 3,\n  \"tags\": []\n}");
        REJECTS(g, "{\"age\":3,\"name\":\"x\"}");
        REJECTS(g, "{\"name\":\"x\"}");
        REJECTS(g, "{\"name\":\"x\",\"age\":3,\"other\":1}");
        REJECTS(g, " {\"name\":\"x\",\"age\":3}");
        REJECTS(g, "{\"name\":\"x\",\"age\":3}\n");
        REJECTS(g, "{  \"name\":\"x\",\"age\":3}"); /* two spaces: not one of the forms */
        gram_free(g);
    }
    /* No required member: any subset, in declared order. */
    g = schema("{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}}}");
    if (g) {
        ACCEPTS(g, "{}");
        ACCEPTS(g, "{\"a\":1}");
        ACCEPTS(g, "{\"b\":2}");
        ACCEPTS(g, "{\"a\":1,\"b\":2}");
        REJECTS(g, "{\"b\":2,\"a\":1}");
        REJECTS(g, "{,\"b\":2}");
        gram_free(g);
    }
    g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"const\":1}},\"required\":[\"a\"],"
               "\"additionalProperties\":{\"type\":\"boolean\"}}");
    if (g) {
        ACCEPTS(g, "{\"a\":1}");
        ACCEPTS(g, "{\"a\":1,\"x\":true,\"y\":false}");
        REJECTS(g, "{\"a\":1,\"x\":2}");
        REJECTS(g, "{\"a\":2}");
        gram_free(g);
    }
    g = schema("{\"type\":\"object\"}");
    if (g) {
        ACCEPTS(g, "{}");
        ACCEPTS(g, "{\"k\":[1,{\"z\":null}],\"j\":\"s\"}");
        REJECTS(g, "[]");
        gram_free(g);
    }
    g = schema("{\"type\":\"object\",\"additionalProperties\":false}");
    if (g) {
        ACCEPTS(g, "{}");
        REJECTS(g, "{\"k\":1}");
        gram_free(g);
    }
}

static void test_schema_arrays_enums_refs(void)
{
    gram_grammar *g = schema("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},"
                             "\"minItems\":1,\"maxItems\":3}");
    if (g) {
        ACCEPTS(g, "[1]");
        ACCEPTS(g, "[1, 2,3]");
        REJECTS(g, "[]");
        REJECTS(g, "[1,2,3,4]");
        gram_free(g);
    }
    g = schema("{\"type\":\"array\",\"maxItems\":0}");
    if (g) {
        ACCEPTS(g, "[]");
        REJECTS(g, "[1]");
        gram_free(g);
    }
    g = schema("{\"enum\":[\"red\",\"gr\\\"een\",3,null,{\"a\":[1]}]}");
    if (g) {
        ACCEPTS(g, "\"red\"");
        ACCEPTS(g, "\"gr\\\"een\"");
        ACCEPTS(g, "3");
        ACCEPTS(g, "null");
        ACCEPTS(g, "{\"a\":[1]}");
        REJECTS(g, "\"blue\"");
        gram_free(g);
    }
    g = schema("{\"type\":\"string\",\"enum\":[\"a\",1]}");
    if (g) {
        ACCEPTS(g, "\"a\"");
        REJECTS(g, "1");
        gram_free(g);
    }
    g = schema("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}");
    if (g) {
        ACCEPTS(g, "5");
        ACCEPTS(g, "\"x\"");
        REJECTS(g, "\"xy\"");
        gram_free(g);
    }
    g = schema("{\"oneOf\":[{\"const\":true},{\"allOf\":[{\"const\":\"t\"}]}]}");
    if (g) {
        ACCEPTS(g, "true");
        ACCEPTS(g, "\"t\"");
        REJECTS(g, "false");
        gram_free(g);
    }
    /* A recursive schema through $defs. */
    g = schema("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{"
               "\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\",\"items\":"
               "{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},"
               "\"$ref\":\"#/$defs/node\"}");
    if (g) {
        ACCEPTS(g, "{\"v\":1}");
        ACCEPTS(g, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4}]}]}");
        REJECTS(g, "{\"v\":1,\"kids\":[{}]}");
        gram_free(g);
    }
    g = schema("{\"definitions\":{\"a/b\":{\"type\":\"null\"}},\"type\":\"object\","
               "\"properties\":{\"x\":{\"$ref\":\"#/definitions/a~1b\",\"description\":\"d\"}},"
               "\"required\":[\"x\"]}");
    if (g) {
        ACCEPTS(g, "{\"x\":null}");
        gram_free(g);
    }
    g = schema("{}");
    if (g) {
        ACCEPTS(g, "[1,\"a\",{\"b\":false}]");
        ACCEPTS(g, "-3.5");
        gram_free(g);
    }
    g = jsch_json_object(NULL);
    CHECK(g != NULL);
    if (g) {
        ACCEPTS(g, "{\"a\":{\"b\":[true,null]}}");
        REJECTS(g, "[1]");
        REJECTS(g, "\"s\"");
        gram_free(g);
    }
}

static void test_schema_pattern(void)
{
    gram_grammar *g = schema("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3,4}$\"}");
    if (g) {
        ACCEPTS(g, "\"AB-123\"");
        ACCEPTS(g, "\"ZZ-0000\"");
        REJECTS(g, "\"AB-12\"");
        REJECTS(g, "\"ab-123\"");
        REJECTS(g, "\"xAB-123\"");
        gram_free(g);
    }
    /* Unanchored: anything around the match. */
    g = schema("{\"pattern\":\"(cat|dog)s?\"}");
    if (g) {
        ACCEPTS(g, "\"a dog\"");
        ACCEPTS(g, "\"cats!\"");
        REJECTS(g, "\"cow\"");
        gram_free(g);
    }
    /* Quotes, backslashes and control characters are written escaped. */
    g = schema("{\"pattern\":\"^[\\\"\\\\\\\\]+x$\"}");
    if (g) {
        ACCEPTS(g, "\"\\\"\\\\x\"");
        REJECTS(g, "\"x\"");
        gram_free(g);
    }
    g = schema("{\"pattern\":\"^\\\\n$\"}");
    if (g) {
        ACCEPTS(g, "\"\\n\"");
        REJECTS(g, "\"n\"");
        gram_free(g);
    }
    g = schema("{\"pattern\":\"^[^a-z]\\\\w*?(?:\\\\.\\\\w+)?$\"}");
    if (g) {
        ACCEPTS(g, "\"X_1.b\"");
        ACCEPTS(g, "\"\xc3\xa9\"");
        REJECTS(g, "\"a\"");
        REJECTS(g, "\"X.\"");
        gram_free(g);
    }
}

/* Every integer from -1200 to 1200 against bounds, compared with arithmetic. */
static void test_schema_integer_bounds(void)
{
    static const struct {
        const char *bounds;
        double lo, hi;
    } cases[] = {
        {"\"minimum\":0", 0, 1e9},
        {"\"minimum\":1,\"maximum\":10", 1, 10},
        {"\"minimum\":-37,\"maximum\":405", -37, 405},
        {"\"exclusiveMinimum\":-100,\"exclusiveMaximum\":-7", -99, -8},
        {"\"minimum\":99,\"maximum\":1000", 99, 1000},
        {"\"minimum\":2.5,\"maximum\":19.5", 3, 19},
        {"\"maximum\":-3.5", -1e9, -4},
        {"\"minimum\":118,\"maximum\":118", 118, 118},
        {"\"minimum\":-1001,\"maximum\":1099", -1001, 1099},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "{\"type\":\"integer\",%s}", cases[i].bounds);
        gram_grammar *g = schema(text);
        if (!g)
            continue;
        int bad = 0;
        for (int v = -1200; v <= 1200 && bad < 3; v++) {
            char num[16];
            snprintf(num, sizeof num, "%d", v);
            int want = v >= cases[i].lo && v <= cases[i].hi;
            if (matches(g, num) != want) {
                CHECK_MSG(0, "%s: %d %s", text, v, want ? "refused" : "accepted");
                bad++;
            }
        }
        REJECTS(g, "-0");
        REJECTS(g, "007");
        gram_free(g);
    }
    gram_grammar *g = schema("{\"type\":\"number\",\"minimum\":0}");
    if (g) {
        ACCEPTS(g, "0.5");
        ACCEPTS(g, "12e-3");
        REJECTS(g, "-1");
        gram_free(g);
    }
}

static void test_schema_refusals(void)
{
    schema_error_is("{\"type\":\"integer\",\"multipleOf\":2}",
                    "schema #: keyword 'multipleOf' is not supported");
    schema_error_is("{\"type\":\"number\",\"maximum\":1}",
                    "schema #: keyword 'maximum' on a number is not supported");
    schema_error_is("{\"minimum\":1}", "numeric bounds without 'type'");
    schema_error_is("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}",
                    "no integer lies within the bounds");
    schema_error_is("{\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"^(?=x)$\"}}}",
                    "schema #/properties/a: pattern '^(?=x)$': lookaround and named groups are "
                    "not supported at offset 2");
    schema_error_is("{\"pattern\":\"(a)\\\\1\"}", "back-references are not supported");
    schema_error_is("{\"pattern\":\"a^b\"}", "'^' inside the pattern is not supported");
    schema_error_is("{\"pattern\":\"[a-\"}", "unterminated '['");
    schema_error_is("{\"pattern\":\"x\",\"maxLength\":3}", "'pattern' beside");
    schema_error_is("{\"type\":\"array\",\"items\":{\"not\":{}}}",
                    "schema #/items: keyword 'not' is not supported");
    schema_error_is("{\"type\":\"array\",\"uniqueItems\":true}",
                    "schema #: keyword 'uniqueItems' is not supported");
    schema_error_is("{\"type\":\"string\",\"format\":\"ipv4\"}",
                    "schema #: format 'ipv4' is not supported");
    schema_error_is("{\"$ref\":\"other.json#/a\"}", "only local references");
    schema_error_is("{\"$ref\":\"#/$defs/missing\"}", "$ref '#/$defs/missing' points at nothing");
    schema_error_is("{\"type\":\"object\",\"required\":[\"a\"]}",
                    "required property 'a' is not in 'properties'");
    schema_error_is("{\"allOf\":[{\"type\":\"string\"},{\"maxLength\":3}]}",
                    "'allOf' with more than one schema");
    schema_error_is("{\"type\":\"thing\"}", "schema #: unknown type 'thing'");
    schema_error_is("{\"anyOf\":[{\"type\":\"string\"}],\"type\":\"string\"}",
                    "'anyOf' beside other constraining keywords");
    schema_error_is("{\"type\":\"object\",\"patternProperties\":{}}",
                    "keyword 'patternProperties' is not supported");
    schema_error_is("{\"prefixItems\":[]}", "keyword 'prefixItems' is not supported");
    schema_error_is("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}",
                    "maxItems 2 is below minItems 3");
    schema_error_is("{\"enum\":[1],\"type\":\"string\"}", "no 'enum' value");
    schema_error_is("{\"type\":", "json schema");
}

/* A vocabulary of twelve tokens, for exact masks. */
static const char *const VOCAB[] = {"{", "}", "\"", "a", "ab", "\"a", "\"}", "1", "12", "x",
                                    "<s>", "</s>"};
enum { V_N = 12, V_BOS = 10, V_EOS = 11 };

static gram_vocab *small_vocab(void)
{
    size_t lens[V_N];
    const char *pieces[V_N];
    for (int i = 0; i < V_N; i++) {
        pieces[i] = i == V_BOS || i == V_EOS ? NULL : VOCAB[i];
        lens[i] = pieces[i] ? strlen(pieces[i]) : 0;
    }
    gram_vocab *v = gram_vocab_build(pieces, lens, V_N, NULL);
    int32_t eos = V_EOS;
    gram_vocab_set_eog(v, &eos, 1);
    return v;
}

static uint32_t mask_of(const gram_state *s, const gram_vocab *v, int *count)
{
    uint32_t m[1];
    *count = gram_mask(s, v, m);
    return m[0];
}

#define BIT(i) (1u << (i))

static void test_masks_small_vocab(void)
{
    gram_vocab *v = small_vocab();
    gram_grammar *g = gbnf("root ::= \"{\" ( \"\\\"\" [a-b]* \"\\\"\" )? \"}\"");
    if (!v || !g)
        return;
    CHECK(gram_mask_words(v) == 1);
    gram_state *s = gram_state_new(g);
    int n;
    uint32_t m = mask_of(s, v, &n);
    CHECK_MSG(m == BIT(0), "mask 0x%x", m);
    CHECK(n == 1);
    memra_err err = {{0}};
    CHECK(gram_accept_token(s, v, 0, &err) == 0);
    m = mask_of(s, v, &n);
    /* After "{": "}" ends; "\"", "\"a" open the string; "\"}" is an empty string then... no:
     * "\"}" would put } inside the string, which allows only a-b. */
    CHECK_MSG(m == (BIT(1) | BIT(2) | BIT(5)), "mask 0x%x", m);
    CHECK(n == 3);
    CHECK(gram_token_allowed(s, v, 5));
    CHECK(!gram_token_allowed(s, v, 6));
    CHECK(!gram_token_allowed(s, v, V_EOS));
    CHECK(gram_accept_token(s, v, 5, &err) == 0);
    m = mask_of(s, v, &n);
    CHECK_MSG(m == (BIT(2) | BIT(3) | BIT(4) | BIT(6)), "mask 0x%x", m);
    CHECK(gram_accept_token(s, v, 9, &err) == -1);
    CHECK_MSG(strstr(err.msg, "token 9") != NULL, "%s", err.msg);
    CHECK(gram_accept_token(s, v, V_BOS, &err) == -1);
    CHECK_MSG(strstr(err.msg, "special token") != NULL, "%s", err.msg);
    CHECK(gram_accept_token(s, v, V_EOS, &err) == -1);
    CHECK(gram_accept_token(s, v, 6, &err) == 0);
    CHECK(gram_is_complete(s));
    m = mask_of(s, v, &n);
    CHECK_MSG(m == BIT(V_EOS), "mask 0x%x", m);
    CHECK(gram_accept_token(s, v, V_EOS, &err) == 0);
    CHECK(gram_is_finished(s));
    m = mask_of(s, v, &n);
    CHECK(m == 0 && n == 0);
    gram_state_free(s);
    gram_free(g);

    /* A grammar that may go on after it is complete: digits, then EOS. */
    g = gbnf("root ::= [1-2]+");
    s = gram_state_new(g);
    m = mask_of(s, v, &n);
    CHECK_MSG(m == (BIT(7) | BIT(8)), "mask 0x%x", m);
    CHECK(gram_accept_token(s, v, 8, &err) == 0);
    m = mask_of(s, v, &n);
    CHECK_MSG(m == (BIT(7) | BIT(8) | BIT(V_EOS)), "mask 0x%x", m);
    gram_state_free(s);
    gram_free(g);
    gram_vocab_free(v);
}

/* An end-of-generation token with a piece is still allowed only at the end. */
static void test_masks_eog_with_piece(void)
{
    const char *pieces[] = {"a", "</s>"};
    size_t lens[] = {1, 4};
    gram_vocab *v = gram_vocab_build(pieces, lens, 2, NULL);
    int32_t eos = 1;
    gram_vocab_set_eog(v, &eos, 1);
    gram_grammar *g = gbnf("root ::= [a-z<>/]+");
    if (!g || !v)
        return;
    gram_state *s = gram_state_new(g);
    uint32_t m[1];
    CHECK(gram_mask(s, v, m) == 1 && m[0] == 1);
    CHECK(gram_accept_token(s, v, 1, NULL) == -1);
    CHECK(gram_accept_token(s, v, 0, NULL) == 0);
    CHECK(gram_mask(s, v, m) == 2 && m[0] == 3);
    CHECK(gram_accept_token(s, v, 1, NULL) == 0);
    CHECK(gram_is_finished(s));
    gram_state_free(s);
    gram_free(g);
    gram_vocab_free(v);
}

/* The mask agrees with checking each token alone, on a vocabulary where
 * tokens share prefixes. */
static void test_masks_match_per_token(void)
{
    const char *pieces[] = {"a", "aa", "aab", "ab", "abc", "b", "ba", "bab", "c", "cc", "\xc3",
                            "\xa9", "\xc3\xa9", "\xc3\xa9\xc3"};
    int n = (int)(sizeof pieces / sizeof pieces[0]);
    size_t lens[32];
    for (int i = 0; i < n; i++)
        lens[i] = strlen(pieces[i]);
    gram_vocab *v = gram_vocab_build(pieces, lens, n, NULL);
    const char *grammars[] = {"root ::= \"a\"* \"b\" \"c\"?", "root ::= [^a]+",
                              "root ::= ([a-b] | \"\\u00e9\")*", "root ::= \"ab\" | \"aab\" \"c\""};
    for (size_t gi = 0; gi < sizeof grammars / sizeof grammars[0]; gi++) {
        gram_grammar *g = gbnf(grammars[gi]);
        if (!g)
            continue;
        gram_state *s = gram_state_new(g);
        for (int step = 0; step < 3; step++) {
            uint32_t m[1];
            gram_mask(s, v, m);
            int first = -1;
            for (int i = 0; i < n; i++) {
                int bit = (int)((m[0] >> i) & 1);
                CHECK_MSG(bit == gram_token_allowed(s, v, i), "grammar %zu step %d token %d",
                          gi, step, i);
                if (bit && first < 0)
                    first = i;
            }
            if (first < 0 || gram_accept_token(s, v, first, NULL))
                break;
        }
        gram_state_free(s);
        gram_free(g);
    }
    gram_vocab_free(v);
}

/* A vocabulary of n random pieces over a few letters, 1 to 4 bytes, plus
 * '"' and '\\' alone (seeded: the same every run). */
static gram_vocab *random_vocab(int n, uint64_t seed, char (*buf)[5])
{
    const char **pieces = malloc((size_t)n * sizeof *pieces);
    size_t *lens = malloc((size_t)n * sizeof *lens);
    for (int i = 0; i < n; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        int len = 1 + (int)(seed % 4);
        for (int k = 0; k < len; k++)
            buf[i][k] = "abcdefghij \"\\xyz"[(seed >> (8 + 5 * k)) % 15];
        pieces[i] = buf[i];
        lens[i] = (size_t)len;
    }
    gram_vocab *v = gram_vocab_build(pieces, lens, n, NULL);
    free(pieces);
    free(lens);
    return v;
}

/* gram_mask with its cache equals the walk without one, bit for bit, step
 * after step (inside strings the state comes back to a set it had, so the
 * cache answers), for two vocabularies used with one state; the cache
 * stays within its entries. */
static void test_masks_cached_equal_walked(void)
{
    enum { N = 6000 };
    static char buf1[N][5], buf2[N][5];
    gram_vocab *v1 = random_vocab(N, 0x1234567ull, buf1), *v2 = random_vocab(N, 0x7654321ull, buf2);
    memra_err err = {{0}};
    const char *schema = "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}";
    gram_grammar *g = jsch_compile_text(schema, strlen(schema), &err);
    CHECK_MSG(g != NULL, "%s", err.msg);
    if (!g || !v1 || !v2) {
        gram_free(g);
        gram_vocab_free(v1);
        gram_vocab_free(v2);
        return;
    }
    size_t words = gram_mask_words(v1);
    uint32_t *a = malloc(words * 4), *b = malloc(words * 4);
    gram_state *s = gram_state_new(g), *plain = gram_state_new(g);
    gram_state_set_mask_cache(plain, 0);
    const char *text = "[\"";
    CHECK(gram_accept_bytes(s, text, 2, NULL) == 0 && gram_accept_bytes(plain, text, 2, NULL) == 0);
    uint64_t rng = 99;
    int mismatches = 0, steps = 0;
    for (; steps < 3000; steps++) {
        gram_vocab *v = steps % 3 == 2 ? v2 : v1;
        int na = gram_mask(s, v, a), nb = gram_mask(plain, v, b);
        if (na != nb || memcmp(a, b, words * 4) != 0)
            mismatches++;
        gram_mask_cache_stats st;
        gram_state_mask_cache_stats(s, &st);
        CHECK(st.entries <= GRAM_MASK_CACHE_DEFAULT && st.capacity == GRAM_MASK_CACHE_DEFAULT);
        CHECK(st.bytes < 64 * 1024);
        /* Mostly ordinary characters; now and then a string ends and a new
         * one starts (",\"" after the closing quote). */
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int pick = (int)((rng >> 33) % 50);
        const char *ins = pick == 0 ? "\",\"" : pick == 1 ? "\\n" : "q";
        if (gram_accept_bytes(s, ins, strlen(ins), &err) ||
            gram_accept_bytes(plain, ins, strlen(ins), &err)) {
            CHECK_MSG(0, "step %d: %s", steps, err.msg);
            break;
        }
    }
    CHECK_MSG(mismatches == 0, "%d of %d cached masks differ from the walk", mismatches, steps);
    gram_mask_cache_stats st;
    gram_state_mask_cache_stats(s, &st);
    CHECK_MSG(st.hits > st.misses * 10, "hits %llu, misses %llu", (unsigned long long)st.hits,
              (unsigned long long)st.misses);
    gram_state_mask_cache_stats(plain, &st);
    CHECK(st.hits == 0 && st.entries == 0 && st.capacity == 0);
    /* A clone starts empty and gets the same answers. */
    gram_state *c = gram_state_clone(s);
    gram_state_mask_cache_stats(c, &st);
    CHECK(st.entries == 0 && st.capacity == GRAM_MASK_CACHE_DEFAULT);
    CHECK(gram_mask(c, v1, a) == gram_mask(plain, v1, b) && memcmp(a, b, words * 4) == 0);
    gram_state_free(c);
    gram_state_free(s);
    gram_state_free(plain);
    free(a);
    free(b);
    gram_free(g);
    gram_vocab_free(v1);
    gram_vocab_free(v2);
}

/* The mask pool gives each state the mask gram_mask gives it alone, for
 * states at different places in a grammar, on 4 threads and on 1. */
static void test_mask_pool_equals_serial(void)
{
    enum { N = 3000, S = 24 };
    static char buf[N][5];
    gram_vocab *v = random_vocab(N, 0xabcdefull, buf);
    memra_err err = {{0}};
    const char *schema = "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"string\"},"
                         "{\"type\":\"integer\"}]}}";
    gram_grammar *g = jsch_compile_text(schema, strlen(schema), &err);
    CHECK_MSG(g != NULL, "%s", err.msg);
    if (!g || !v) {
        gram_free(g);
        gram_vocab_free(v);
        return;
    }
    static const char *const prefixes[] = {"", "[", "[\"", "[1", "[\"ab", "[12,", "[\"x\",\"", "[3,\"q"};
    size_t words = gram_mask_words(v);
    gram_state *st[S];
    uint32_t *mk[S], *want = malloc(words * 4);
    int cnt[S];
    for (int i = 0; i < S; i++) {
        st[i] = gram_state_new(g);
        const char *p = prefixes[i % 8];
        CHECK(gram_accept_bytes(st[i], p, strlen(p), NULL) == 0);
        mk[i] = malloc(words * 4);
    }
    for (int threads = 1; threads <= 4; threads += 3) {
        gram_maskpool *pool = gram_maskpool_new(threads);
        CHECK(pool != NULL);
        for (int round = 0; round < 3; round++) {
            memset(cnt, 0xff, sizeof cnt);
            gram_maskpool_masks(pool, st, v, mk, cnt, S);
            int bad = 0;
            for (int i = 0; i < S; i++) {
                gram_state *alone = gram_state_clone(st[i]);
                int n = gram_mask(alone, v, want);
                bad += n != cnt[i] || memcmp(want, mk[i], words * 4) != 0;
                gram_state_free(alone);
            }
            CHECK_MSG(bad == 0, "%d threads, round %d: %d masks differ", threads, round, bad);
        }
        gram_maskpool_free(pool);
    }
    for (int i = 0; i < S; i++) {
        gram_state_free(st[i]);
        free(mk[i]);
    }
    free(want);
    gram_free(g);
    gram_vocab_free(v);
}

TEST_MAIN(TEST_CASE(test_mask_pool_equals_serial), TEST_CASE(test_gbnf_literals_and_alternatives), TEST_CASE(test_gbnf_rules_groups_multiline),
          TEST_CASE(test_gbnf_classes), TEST_CASE(test_gbnf_repetition),
          TEST_CASE(test_gbnf_errors), TEST_CASE(test_matcher_state),
          TEST_CASE(test_schema_primitives), TEST_CASE(test_schema_formats),
          TEST_CASE(test_schema_objects), TEST_CASE(test_schema_arrays_enums_refs),
          TEST_CASE(test_schema_pattern), TEST_CASE(test_schema_integer_bounds), TEST_CASE(test_schema_refusals), TEST_CASE(test_masks_small_vocab), TEST_CASE(test_masks_eog_with_piece),
          TEST_CASE(test_masks_match_per_token), TEST_CASE(test_masks_cached_equal_walked))

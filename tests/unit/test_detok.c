/* Streaming detokenizer tests: every UTF-8 sequence (2, 3, 4 bytes and
 * ill-formed bytes) split at every byte boundary, byte-level and <0xNN>
 * byte tokens, stop strings split across tokens, held prefixes released,
 * the SentencePiece leading space, and agreement with tok_decode. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"
#include "format/gguf.h"
#include "tok/detok.h"
#include "tok/tokenizer.h"
#include "test.h"

static tokenizer *load(const char *name, gguf_file *g)
{
    char path[512];
    memra_err err;
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", test_data_dir(), name);
    if (gguf_open(path, g, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return NULL;
    }
    tokenizer *t = NULL;
    if (tok_load_gguf(g, &t, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        gguf_close(g);
        return NULL;
    }
    return t;
}

/* Well-formed per the Unicode definition (independent of the library). */
static int valid_utf8(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t need;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0)
                lo = 0xA0;
            if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0)
                lo = 0x90;
            if (c == 0xF4)
                hi = 0x8F;
        } else {
            return 0;
        }
        if (i + need >= n)
            return 0;
        for (size_t k = 1; k <= need; k++) {
            unsigned b = p[i + k];
            if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF))
                return 0;
        }
        i += need + 1;
    }
    return 1;
}

#define FFFD "\xEF\xBF\xBD"

/* Input bytes and the text the stream must produce (by hand, from the
 * maximal-subpart rule). */
static const struct {
    const char *in, *want;
} utf8_cases[] = {
    {"\xC3\xA9", "\xC3\xA9"},                         /* é, 2 bytes */
    {"\xE2\x82\xAC", "\xE2\x82\xAC"},                 /* €, 3 bytes */
    {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"},         /* 😀, 4 bytes */
    {"\xF4\x8F\xBF\xBF", "\xF4\x8F\xBF\xBF"},         /* U+10FFFF */
    {"\xFF", FFFD},                                   /* never valid */
    {"\x80", FFFD},                                   /* lone continuation */
    {"\xC0\xAF", FFFD FFFD},                          /* overlong: two errors */
    {"\xE2\x82", FFFD},                               /* truncated: one error */
    {"\xE2\x82" "A", FFFD "A"},                       /* broken off by ASCII */
    {"\xE2\x82\xE2\x82\xAC", FFFD "\xE2\x82\xAC"},    /* broken off by a lead byte */
    {"\xED\xA0\x80", FFFD FFFD FFFD},                 /* surrogate */
    {"\xF4\x90\x80\x80", FFFD FFFD FFFD FFFD},        /* past U+10FFFF */
    {"\xF0\x9F\x98", FFFD},                           /* truncated 4-byte */
    {"\xF0\x9F\x98\xC3\xA9", FFFD "\xC3\xA9"},
};

static gguf_file g_qwen, g_spm;
static tokenizer *t_qwen, *t_spm;

static void setup(void)
{
    if (!t_qwen)
        t_qwen = load("qwen2", &g_qwen);
    if (!t_spm)
        t_spm = load("llama-spm", &g_spm);
}

static int is_prefix(const strbuf *out, const char *want)
{
    return out->len <= strlen(want) && memcmp(out->data ? out->data : "", want, out->len) == 0;
}

/* Feed `in` as the pieces cut at the bits of `mask` (bit i: cut after
 * byte i), checking after every piece that the output is valid UTF-8, a
 * prefix of the expected text, and holds nothing back at a point where the
 * input so far ends on a complete character. */
static void feed_split(const char *in, size_t n, unsigned mask, const char *want)
{
    detok *d = detok_new(t_qwen, NULL);
    strbuf out;
    sb_init(&out);
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 1 < n && !(mask & (1u << i)))
            continue;
        detok_feed_bytes(d, in + start, i + 1 - start, &out, NULL);
        start = i + 1;
        CHECK_MSG(valid_utf8(out.data, out.len), "mask %x: invalid UTF-8 emitted", mask);
        CHECK_MSG(is_prefix(&out, want), "mask %x: emitted text is not a prefix of the result",
                  mask);
    }
    detok_flush(d, &out);
    CHECK_MSG(out.len == strlen(want) && memcmp(out.data, want, out.len) == 0,
              "mask %x: stream of %zu bytes gave %zu bytes, want %zu", mask, n, out.len,
              strlen(want));
    sb_free(&out);
    detok_free(d);
}

static void test_utf8_every_split(void)
{
    setup();
    if (!t_qwen)
        return;
    for (size_t c = 0; c < sizeof utf8_cases / sizeof utf8_cases[0]; c++) {
        char in[64], want[64];
        snprintf(in, sizeof in, "a%sb", utf8_cases[c].in);
        snprintf(want, sizeof want, "a%sb", utf8_cases[c].want);
        size_t n = strlen(in);
        for (unsigned mask = 0; mask < (1u << (n - 1)); mask++)
            feed_split(in, n, mask, want);
        /* and at the very end of the stream: the flush decides */
        snprintf(in, sizeof in, "a%s", utf8_cases[c].in);
        snprintf(want, sizeof want, "a%s", utf8_cases[c].want);
        feed_split(in, strlen(in), ~0u, want);
    }
}

/* A complete character is emitted as soon as its last byte arrives. */
static void test_utf8_no_late_release(void)
{
    setup();
    if (!t_qwen)
        return;
    detok *d = detok_new(t_qwen, NULL);
    strbuf out;
    sb_init(&out);
    detok_feed_bytes(d, "\xF0\x9F", 2, &out, NULL);
    CHECK(out.len == 0);
    detok_feed_bytes(d, "\x98", 1, &out, NULL);
    CHECK(out.len == 0);
    detok_feed_bytes(d, "\x80", 1, &out, NULL);
    CHECK(out.len == 4 && memcmp(out.data, "\xF0\x9F\x98\x80", 4) == 0);
    sb_free(&out);
    detok_free(d);
}

/* Real byte tokens: byte-level characters (qwen2) and <0xNN> (llama-spm),
 * one token per byte, so every sequence is split at every byte. */
static void byte_tokens(const tokenizer *t, int spm, const char *in, size_t n, int32_t *ids)
{
    for (size_t i = 0; i < n; i++) {
        unsigned b = (unsigned char)in[i];
        char name[16];
        if (spm) {
            snprintf(name, sizeof name, "<0x%02X>", b);
        } else {
            /* GPT-2's byte-to-character table */
            unsigned cp = b, k = 0;
            int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
            if (!printable) {
                for (unsigned x = 0; x < b; x++)
                    k += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
                cp = 256 + k;
            }
            if (cp < 0x80) {
                name[0] = (char)cp;
                name[1] = 0;
            } else {
                name[0] = (char)(0xC0 | cp >> 6);
                name[1] = (char)(0x80 | (cp & 0x3F));
                name[2] = 0;
            }
        }
        ids[i] = tok_id_of(t, name);
        CHECK_MSG(ids[i] >= 0, "no byte token for 0x%02X", b);
    }
}

static void test_byte_tokens(void)
{
    setup();
    if (!t_qwen || !t_spm)
        return;
    for (int spm = 0; spm < 2; spm++) {
        const tokenizer *t = spm ? t_spm : t_qwen;
        for (size_t c = 0; c < sizeof utf8_cases / sizeof utf8_cases[0]; c++) {
            char in[64], want[64];
            snprintf(in, sizeof in, "x%sy", utf8_cases[c].in);
            snprintf(want, sizeof want, "x%sy", utf8_cases[c].want);
            size_t n = strlen(in);
            int32_t ids[64];
            byte_tokens(t, spm, in, n, ids);
            detok *d = detok_new(t, NULL);
            strbuf out;
            sb_init(&out);
            memra_err err;
            for (size_t i = 0; i < n; i++) {
                CHECK(detok_feed(d, ids[i], &out, NULL, &err) == 0);
                CHECK(valid_utf8(out.data, out.len) && is_prefix(&out, want));
            }
            detok_flush(d, &out);
            CHECK_MSG(strcmp(sb_str(&out), want) == 0, "%s case %zu", spm ? "spm" : "bpe", c);
            /* tok_decode of the same ids gives the same text */
            char *dec;
            size_t dl;
            CHECK(tok_decode(t, ids, n, 0, &dec, &dl, &err) == 0);
            CHECK_MSG(strcmp(dec, want) == 0, "tok_decode %s case %zu", spm ? "spm" : "bpe", c);
            free(dec);
            sb_free(&out);
            detok_free(d);
        }
    }
}

/* Stop strings: fed byte by byte and token by token, the stop string (or
 * any part of it) never appears in the output. */
static void run_stop(const tokenizer *t, const char *text, const char *const *stops, size_t ns,
                     const char *want, int want_index, int by_token)
{
    detok_opts o = {.stop = stops, .n_stop = ns};
    detok *d = detok_new(t, &o);
    strbuf out;
    sb_init(&out);
    int idx = -1, r = 0;
    memra_err err;
    if (by_token) {
        int32_t *ids;
        size_t n;
        CHECK(tok_encode(t, text, strlen(text), 0, 0, &ids, &n, &err) == 0);
        for (size_t i = 0; i < n; i++) {
            r = detok_feed(d, ids[i], &out, &idx, &err);
            CHECK(r >= 0);
            CHECK_MSG(is_prefix(&out, want), "'%s': emitted '%s' beyond '%s'", text, sb_str(&out),
                      want);
        }
        free(ids);
    } else {
        for (size_t i = 0; text[i]; i++) {
            r = detok_feed_bytes(d, text + i, 1, &out, &idx);
            CHECK_MSG(is_prefix(&out, want), "'%s': emitted '%s' beyond '%s'", text, sb_str(&out),
                      want);
        }
    }
    detok_flush(d, &out);
    CHECK_MSG(strcmp(sb_str(&out), want) == 0, "'%s': got '%s', want '%s'", text, sb_str(&out),
              want);
    CHECK_MSG(detok_stopped(d) == (want_index >= 0), "'%s': stopped %d", text, detok_stopped(d));
    if (want_index >= 0)
        CHECK_MSG(idx == want_index, "'%s': stop index %d, want %d", text, idx, want_index);
    sb_free(&out);
    detok_free(d);
}

static void test_stop_strings(void)
{
    setup();
    if (!t_qwen)
        return;
    const char *stops[] = {"</s>", "STOP", "\n\nUser:", "caf\xC3\xA9!"};
    for (int by_token = 0; by_token < 2; by_token++) {
        run_stop(t_qwen, "Hello</s>world", stops, 4, "Hello", 0, by_token);
        run_stop(t_qwen, "no stop here", stops, 4, "no stop here", -1, by_token);
        run_stop(t_qwen, "a</b>c </ s> STO P", stops, 4, "a</b>c </ s> STO P", -1, by_token);
        run_stop(t_qwen, "Answer.\n\nUser: more", stops, 4, "Answer.", 2, by_token);
        run_stop(t_qwen, "Answer.\n\nUse it", stops, 4, "Answer.\n\nUse it", -1, by_token);
        run_stop(t_qwen, "un caf\xC3\xA9!", stops, 4, "un ", 3, by_token);
        run_stop(t_qwen, "un caf\xC3\xA9 noir", stops, 4, "un caf\xC3\xA9 noir", -1, by_token);
        run_stop(t_qwen, "ends with </", stops, 4, "ends with </", -1, by_token);
        run_stop(t_qwen, "STOPSTOP", stops, 4, "", 1, by_token);
    }
    /* the first stop string to complete wins, even if a longer one began earlier */
    const char *ov[] = {"abcd", "bc"};
    run_stop(t_qwen, "xabcd", ov, 2, "xa", 1, 0);
}

/* A held prefix is released as soon as it stops matching, not at the end. */
static void test_stop_release(void)
{
    setup();
    if (!t_qwen)
        return;
    const char *stops[] = {"</s>"};
    detok_opts o = {.stop = stops, .n_stop = 1};
    detok *d = detok_new(t_qwen, &o);
    strbuf out;
    sb_init(&out);
    detok_feed_bytes(d, "a</", 3, &out, NULL);
    CHECK(strcmp(sb_str(&out), "a") == 0);
    detok_feed_bytes(d, "b", 1, &out, NULL);
    CHECK(strcmp(sb_str(&out), "a</b") == 0);
    detok_feed_bytes(d, "</s", 3, &out, NULL);
    CHECK(strcmp(sb_str(&out), "a</b") == 0);
    detok_feed_bytes(d, ">tail", 5, &out, NULL);
    CHECK(strcmp(sb_str(&out), "a</b") == 0);
    CHECK(detok_stopped(d));
    /* nothing more after a stop */
    CHECK(detok_feed_bytes(d, "more", 4, &out, NULL) == 1);
    detok_flush(d, &out);
    CHECK(strcmp(sb_str(&out), "a</b") == 0);
    sb_free(&out);
    detok_free(d);
}

/* The stream of any ids equals tok_decode of them, for both tokenizers,
 * with and without special tokens and the leading-space rule. */
static void test_matches_decode(void)
{
    setup();
    if (!t_qwen || !t_spm)
        return;
    const char *texts[] = {" Hello world", "Hello", "  two spaces", "\xC3\xA9t\xC3\xA9 \xF0\x9F\x98\x80",
                           "\xE4\xB8\xAD\xE6\x96\x87 mixed", ""};
    for (int spm = 0; spm < 2; spm++) {
        const tokenizer *t = spm ? t_spm : t_qwen;
        for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
            for (int add = 0; add < 2; add++) {
                for (int skip = 0; skip < 2; skip++) {
                    int32_t *ids;
                    size_t n;
                    memra_err err;
                    CHECK(tok_encode(t, texts[k], strlen(texts[k]), add, 0, &ids, &n, &err) == 0);
                    char *dec;
                    size_t dl;
                    CHECK(tok_decode(t, ids, n, skip, &dec, &dl, &err) == 0);
                    detok_opts o = {.skip_special = skip, .at_start = 1};
                    detok *d = detok_new(t, &o);
                    strbuf out;
                    sb_init(&out);
                    for (size_t i = 0; i < n; i++)
                        CHECK(detok_feed(d, ids[i], &out, NULL, &err) == 0);
                    detok_flush(d, &out);
                    CHECK_MSG(strcmp(sb_str(&out), dec) == 0,
                              "%s '%s' add %d skip %d: stream '%s', decode '%s'",
                              spm ? "spm" : "bpe", texts[k], add, skip, sb_str(&out), dec);
                    if (!add) /* round trip (SPM: the added prefix space is dropped again) */
                        CHECK_MSG(strcmp(dec, texts[k]) == 0, "%s '%s' -> '%s'",
                                  spm ? "spm" : "bpe", texts[k], dec);
                    sb_free(&out);
                    detok_free(d);
                    free(dec);
                    free(ids);
                }
            }
        }
    }
    /* llama-spm: the prefix space the encoder added is gone again */
    int32_t *ids;
    size_t n;
    memra_err err;
    CHECK(tok_encode(t_spm, "Hello world", 11, 0, 0, &ids, &n, &err) == 0);
    detok_opts o = {.at_start = 1};
    detok *d = detok_new(t_spm, &o);
    strbuf out;
    sb_init(&out);
    for (size_t i = 0; i < n; i++)
        detok_feed(d, ids[i], &out, NULL, &err);
    detok_flush(d, &out);
    CHECK(strcmp(sb_str(&out), "Hello world") == 0);
    sb_free(&out);
    detok_free(d);
    /* mid-text (not at_start) the space stays */
    d = detok_new(t_spm, NULL);
    sb_init(&out);
    for (size_t i = 0; i < n; i++)
        detok_feed(d, ids[i], &out, NULL, &err);
    detok_flush(d, &out);
    CHECK(strcmp(sb_str(&out), " Hello world") == 0);
    sb_free(&out);
    detok_free(d);
    free(ids);
}

static void test_bad_id(void)
{
    setup();
    if (!t_qwen)
        return;
    detok *d = detok_new(t_qwen, NULL);
    strbuf out;
    sb_init(&out);
    memra_err err;
    CHECK(detok_feed(d, 151936, &out, NULL, &err) == -1);
    CHECK(strstr(err.msg, "151936") != NULL);
    CHECK(detok_feed(d, -5, &out, NULL, &err) == -1);
    CHECK(strstr(err.msg, "-5") != NULL);
    CHECK(out.len == 0);
    sb_free(&out);
    detok_free(d);
}

static void teardown(void)
{
    tok_free(t_qwen);
    tok_free(t_spm);
    t_qwen = t_spm = NULL;
    gguf_close(&g_qwen);
    gguf_close(&g_spm);
}

static void test_teardown(void) { teardown(); }

TEST_MAIN(TEST_CASE(test_utf8_every_split), TEST_CASE(test_utf8_no_late_release),
          TEST_CASE(test_byte_tokens), TEST_CASE(test_stop_strings), TEST_CASE(test_stop_release),
          TEST_CASE(test_matches_decode), TEST_CASE(test_bad_id), TEST_CLEANUP(test_teardown))

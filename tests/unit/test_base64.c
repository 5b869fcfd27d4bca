/* core/base64.h against RFC 4648's test vectors, and a float vector's
 * bytes as the OpenAI embeddings API sends them. */
#include <stdint.h>
#include <string.h>

#include "core/base64.h"
#include "core/strbuf.h"
#include "test.h"

static void test_base64_rfc4648(void)
{
    static const char *const in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const want[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=",
                                       "Zm9vYmFy"};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        strbuf sb;
        sb_init(&sb);
        base64_encode(&sb, in[i], strlen(in[i]));
        CHECK_MSG(!strcmp(sb_str(&sb), want[i]), "'%s' -> '%s', want '%s'", in[i], sb_str(&sb),
                  want[i]);
        CHECK(sb.len == base64_encoded_len(strlen(in[i])));
        sb_free(&sb);
    }
}

static void test_base64_floats(void)
{
    /* 1.0f and -2.5f little-endian: 00 00 80 3f, 00 00 20 c0 (what
     * Python's base64.b64encode(struct.pack('<2f', 1, -2.5)) gives) */
    float v[2] = {1.0f, -2.5f};
    unsigned char b[8];
    memcpy(b, v, sizeof b);
    CHECK(b[3] == 0x3f && b[7] == 0xc0); /* the host is little-endian, as the wire wants */
    strbuf sb;
    sb_init(&sb);
    base64_encode(&sb, v, sizeof v);
    CHECK_MSG(!strcmp(sb_str(&sb), "AACAPwAAIMA="), "got '%s'", sb_str(&sb));
    /* every byte value round the alphabet's two ends */
    unsigned char all[3] = {0xfb, 0xff, 0xbf};
    sb_clear(&sb);
    base64_encode(&sb, all, 3);
    CHECK_MSG(!strcmp(sb_str(&sb), "+/+/"), "got '%s'", sb_str(&sb));
    sb_free(&sb);
}

TEST_MAIN(TEST_CASE(test_base64_rfc4648), TEST_CASE(test_base64_floats))

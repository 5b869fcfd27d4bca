/* Dequantization of NVFP4 (ggml type 40) and MXFP8 (memra type 2000) from
 * hand-built blocks. Each expected value was worked out by hand from the
 * layouts (lib/format/dequant_fp.c; ggml-common.h block_nvfp4 and ggml's
 * dequantize_row_nvfp4 / ggml_ue4m3_to_fp32 for NVFP4, the OCP MX v1.0 spec
 * for MXFP8); the arithmetic is in the comments. Every value is exactly
 * representable, so the checks compare bits. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "format/dequant.h"
#include "format/dtype.h"
#include "format/gguf.h"
#include "test.h"

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_types(void)
{
    const dtype_info *nv = dtype_get(DT_NVFP4), *mx = dtype_get(DT_MXFP8);
    CHECK(nv && nv->block_size == 64 && nv->type_size == 36 && !strcmp(nv->name, "NVFP4"));
    CHECK(mx && mx->block_size == 32 && mx->type_size == 33 && !strcmp(mx->name, "MXFP8"));
    CHECK(DT_NVFP4 == 40 && dtype_in_ggml(DT_NVFP4) && dtype_in_gguf(DT_NVFP4));
    /* MXFP8 is memra's own: storable in our GGUF files, not a ggml type */
    CHECK(!dtype_in_ggml(DT_MXFP8) && dtype_in_gguf(DT_MXFP8) && dtype_is_memra_ext(DT_MXFP8));
    CHECK(!dtype_in_gguf(DT_F8_E4M3) && !dtype_in_gguf(41) && !dtype_in_gguf(1999));
    CHECK(dtype_from_name("nvfp4") == DT_NVFP4 && dtype_from_name("MXFP8") == DT_MXFP8);
    CHECK(dequant_supported(DT_NVFP4) && dequant_supported(DT_MXFP8));
}

static void test_ue4m3(void)
{
    /* e = bits 6..3, m = bits 2..0, bias 7, halved: 0x38 = e7 m0 = 1 -> 0.5 */
    CHECK(dequant_ue4m3_half(0x38) == 0.5f);
    CHECK(dequant_ue4m3_half(0x00) == 0.0f && dequant_ue4m3_half(0x7F) == 0.0f);
    CHECK(dequant_ue4m3_half(0x01) == ldexpf(1.0f, -10)); /* subnormal 1 * 2^-9, halved */
    CHECK(dequant_ue4m3_half(0x07) == ldexpf(7.0f, -10));
    CHECK(dequant_ue4m3_half(0x08) == ldexpf(1.0f, -7)); /* e1 m0 = 2^-6, halved */
    CHECK(dequant_ue4m3_half(0x7E) == 224.0f);           /* e15 m6 = 1.75 * 2^8 = 448 */
    /* bit 7 is ignored except for the 0x7F test: 0xFF = e15 m7 = 480 -> 240,
     * 0x80 = e0 m0 -> 0, 0xB8 reads as 0x38 */
    CHECK(dequant_ue4m3_half(0xFF) == 240.0f && dequant_ue4m3_half(0x80) == 0.0f);
    CHECK(dequant_ue4m3_half(0xB8) == 0.5f);
}

static void test_nvfp4(void)
{
    /* two blocks; sub-block s: scale byte s, quants at 4 + 8s, byte j holds
     * element 16s + j (low nibble) and 16s + 8 + j (high). The nibble
     * indexes the doubled E2M1 table 0 1 2 3 4 6 8 12 (8..15 negative). */
    uint8_t b[72] = {0};
    b[0] = 0x38; /* d = 0.5 */
    b[1] = 0x01; /* d = 2^-10 */
    b[2] = 0x7F; /* d = 0 */
    b[3] = 0xFF; /* d = 240 */
    b[4 + 0] = 0xF1;  /* y[0] = 1 * 0.5 = 0.5; y[8] = -12 * 0.5 = -6 */
    b[4 + 7] = 0x07;  /* y[7] = 12 * 0.5 = 6; y[15] = 0 */
    b[12 + 0] = 0x07; /* y[16] = 12 * 2^-10 */
    b[12 + 3] = 0x90; /* y[19] = 0; y[27] = -1 * 2^-10 */
    b[20 + 0] = 0x77; /* scale 0: y[32] = y[40] = 0 */
    b[28 + 5] = 0x2A; /* y[53] = -2 * 240 = -480; y[61] = 2 * 240 = 480 */
    b[36] = 0x40;     /* block 1, sub-block 0: e8 m0 = 2 -> d = 1 */
    b[40] = 0x5C;     /* y[64] = -4 * 1; y[72] = 6 * 1 */
    float y[129];
    y[128] = 12345.0f;
    memra_err err;
    CHECK(dequant_row(DT_NVFP4, b, y, 128, &err) == 0);
    const struct {
        int i;
        float v;
    } want[] = {
        {0, 0.5f},     {8, -6.0f},     {7, 6.0f},     {15, 0.0f},    {1, 0.0f},
        {16, ldexpf(12.0f, -10)},      {19, 0.0f},    {27, -ldexpf(1.0f, -10)},
        {32, 0.0f},    {40, 0.0f},     {53, -480.0f}, {61, 480.0f},  {64, -4.0f},
        {72, 6.0f},    {127, 0.0f},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        CHECK_MSG(fbits(y[want[k].i]) == fbits(want[k].v), "y[%d] = %.9g, want %.9g", want[k].i,
                  y[want[k].i], want[k].v);
    CHECK(y[128] == 12345.0f);
    CHECK(dequant_row(DT_NVFP4, b, y, 32, &err) != 0 && strstr(err.msg, "NVFP4"));
}

static void test_mxfp8(void)
{
    uint8_t b[33 * 4] = {0};
    /* block 0: e = 127 -> 2^0 */
    b[0] = 127;
    b[1] = 0x38; /* e4m3 e7 m0 = 1 */
    b[2] = 0x7E; /* e15 m6 = 448 */
    b[3] = 0xFE; /* -448 */
    b[4] = 0x01; /* subnormal 2^-9 */
    b[5] = 0x80; /* -0 */
    b[6] = 0x7F; /* NaN */
    b[7] = 0x33; /* e6 m3 = 1.375 * 2^-1 = 0.6875 */
    /* block 1: e = 0 -> 2^-127 (subnormal f32) */
    b[33] = 0;
    b[34] = 0x38; /* 2^-127 */
    b[35] = 0x40; /* e8 m0 = 2 -> 2^-126 */
    /* block 2: e = 254 -> 2^127 */
    b[66] = 254;
    b[67] = 0x30; /* e6 m0 = 0.5 -> 2^126 */
    /* block 3: e = 255 -> NaN */
    b[99] = 255;
    b[100] = 0x38;
    float y[128];
    memra_err err;
    CHECK(dequant_row(DT_MXFP8, b, y, 128, &err) == 0);
    CHECK(y[0] == 1.0f && y[1] == 448.0f && y[2] == -448.0f && y[3] == ldexpf(1.0f, -9));
    CHECK(fbits(y[4]) == 0x80000000u && isnan(y[5]) && y[6] == 0.6875f && y[7] == 0.0f);
    CHECK(fbits(y[32]) == 0x00400000u && y[33] == ldexpf(1.0f, -126) && y[34] == 0.0f);
    CHECK(y[64] == ldexpf(1.0f, 126) && isnan(y[96]));
    CHECK(fbits(dequant_e8m0(0)) == 0x00400000u && dequant_e8m0(127) == 1.0f);
    CHECK(dequant_e8m0(128) == 2.0f && isnan(dequant_e8m0(255)));
}

/* A GGUF file with an MXFP8 tensor reads back (our reader knows the type),
 * and so does one with NVFP4. */
static void test_gguf_roundtrip(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/test_dequant_fp.gguf", test_tmp_dir());
    uint8_t mx[33 * 2] = {127, 0x38}, nv[36] = {0x38, 0, 0, 0, 0x01};
    mx[33] = 128;
    mx[34] = 0x40;
    memra_err err;
    gguf_writer *w = gguf_writer_new();
    const int64_t ne_mx[2] = {32, 2}, ne_nv[1] = {64};
    CHECK(gguf_writer_add_tensor(w, "mx", DT_MXFP8, 2, ne_mx, mx, sizeof mx, &err) == 0);
    CHECK(gguf_writer_add_tensor(w, "nv", DT_NVFP4, 1, ne_nv, nv, sizeof nv, &err) == 0);
    CHECK(gguf_writer_write(w, path, &err) == 0);
    gguf_writer_free(w);
    gguf_file f;
    CHECK_MSG(gguf_open(path, &f, &err) == 0, "%s", err.msg);
    const gguf_tensor *t = gguf_find_tensor(&f, "mx");
    CHECK(t && t->type == DT_MXFP8 && t->nbytes == 66 && !memcmp(t->data, mx, 66));
    t = gguf_find_tensor(&f, "nv");
    CHECK(t && t->type == DT_NVFP4 && t->nbytes == 36);
    float y[64];
    CHECK(t && dequant_row(t->type, t->data, y, 64, &err) == 0 && y[0] == 0.5f);
    gguf_close(&f);
    remove(path);
}

TEST_MAIN(TEST_CASE(test_types), TEST_CASE(test_ue4m3), TEST_CASE(test_nvfp4),
          TEST_CASE(test_mxfp8), TEST_CASE(test_gguf_roundtrip))

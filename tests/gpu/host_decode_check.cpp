// Host check (no GPU needed) of the device weight decoders: every format is
// repacked by cuda_repack_row, then WFmt<F>::load (kernels/weight_decode.cuh,
// compiled for the host with the intrinsics spelled as plain IEEE float ops,
// which is what the _rn intrinsics are) must give lib/format/dequant.c's
// floats bit for bit, and zeros past a row's end. Built and run by
// tests/gpu/host-decode-check.sh.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline float host_uint_as_float(unsigned u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline unsigned host_byte_perm(unsigned x, unsigned y, unsigned s)
{
    const uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++)
        r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
}
#define __ldg(p) (*(p))
#define __fmul_rn(a, b) ((float)(a) * (float)(b))
#define __fsub_rn(a, b) ((float)(a) - (float)(b))
#define __fadd_rn(a, b) ((float)(a) + (float)(b))
#define __uint_as_float(u) host_uint_as_float(u)
#define __byte_perm(x, y, s) host_byte_perm(x, y, s)
#define MEMRA_KERNELS_DEV_COMMON_CUH /* its warp helpers are device-only */
#define DEV inline
static inline float f16_bits_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
#include "kernels/weight_decode.cuh"

extern "C" {
#include "format/dequant.h"
#include "format/dtype.h"
void cuda_repack_row(cw_format f, const uint8_t *src, size_t row_bytes, int64_t cols,
                     uint8_t *dst);
}

static uint64_t rng_s = 88172645463325252ull;
static uint32_t rnd()
{
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return (uint32_t)rng_s;
}

static void put_f16(uint8_t *p, float v)
{
    __half h = __float2half(v);
    uint16_t u;
    memcpy(&u, &h, 2);
    p[0] = (uint8_t)u;
    p[1] = (uint8_t)(u >> 8);
}

// Random blocks with sane scales (or random float values).
static void random_row(dtype t, uint8_t *src, size_t rb)
{
    const dtype_info *ti = dtype_get(t);
    for (size_t i = 0; i < rb; i++)
        src[i] = (uint8_t)rnd();
    for (size_t b = 0; b < rb / (size_t)ti->type_size; b++) {
        uint8_t *blk = src + b * ti->type_size;
        float v = (float)((int)(rnd() % 2000) - 1000) / 997.0f;
        switch (t) {
        case DT_F32: memcpy(blk, &v, 4); break;
        case DT_F16: put_f16(blk, v); break;
        case DT_BF16: {
            uint32_t u;
            memcpy(&u, &v, 4);
            blk[0] = (uint8_t)(u >> 16);
            blk[1] = (uint8_t)(u >> 24);
            break;
        }
        case DT_Q8_0: case DT_Q4_0: put_f16(blk, 0.01f + (float)(rnd() % 100) * 1e-4f); break;
        case DT_Q4_K: case DT_Q5_K:
            put_f16(blk, 0.01f + (float)(rnd() % 100) * 1e-4f);
            put_f16(blk + 2, 0.003f + (float)(rnd() % 100) * 1e-4f);
            break;
        case DT_Q6_K: put_f16(blk + 208, 0.01f + (float)(rnd() % 100) * 1e-4f); break;
        case DT_NVFP4: break; /* every scale byte is finite (0x7F reads as 0, 0xFF as 240) */
        case DT_MXFP8:        /* every exponent but 255 (NaN); no NaN elements */
            blk[0] = (uint8_t)(rnd() % 255);
            for (int j = 1; j < 33; j++)
                if ((blk[j] & 0x7F) == 0x7F)
                    blk[j] ^= 1;
            break;
        default: break;
        }
    }
}

template <int F> static int check(dtype t, int64_t cols)
{
    const dtype_info *ti = dtype_get(t);
    const size_t rb = (size_t)dtype_row_bytes(t, cols);
    const size_t stride = cw_row_stride((cw_format)F, cols);
    const size_t soff = cw_scale_offset((cw_format)F, cols);
    constexpr int U = WFmt<F>::U;
    int bad = 0;
    for (int r = 0; r < 5; r++) {
        uint8_t *src = (uint8_t *)malloc(rb);
        float *ref = (float *)malloc((size_t)cols * 4);
        uint8_t *dst = (uint8_t *)aligned_alloc(16, stride);
        random_row(t, src, rb);
        memra_err err;
        if (dequant_row(t, src, ref, cols, &err) != 0) {
            printf("dequant_row: %s\n", err.msg);
            return 1;
        }
        memset(dst, 0, stride);
        cuda_repack_row((cw_format)F, src, rb, cols, dst);
        for (int64_t u = 0; u < (cols + U - 1) / U; u++) {
            float v[U];
            WFmt<F>::load(dst, soff, u, v);
            /* The mat-vec's view: piece values v with element = a * v + b,
             * rounded as the CPU rounds it. */
            float pv[U];
            typename WFmt<F>::Raw raw = WFmt<F>::fetch(dst, soff, u);
            float a[WFmt<F>::P], b[WFmt<F>::P];
            for (int p = 0; p < WFmt<F>::P; p++)
                a[p] = 1.0f, b[p] = 0.0f;
            WFmt<F>::scales(raw, u, a, b);
            for (int p = 0; p < WFmt<F>::P; p++) {
                float pc[WFmt<F>::PW];
                WFmt<F>::piece(raw, u, p, pc);
                for (int j = 0; j < WFmt<F>::PW; j++) {
                    float e = pc[j];
                    if (!WFmt<F>::DIRECT) {
                        e = a[p] * pc[j];
                        if (WFmt<F>::HAS_B)
                            e = e + b[p];
                    }
                    pv[p * WFmt<F>::PW + j] = e;
                }
            }
            for (int j = 0; j < U; j++) {
                int64_t c = u * U + j;
                if (c >= cols) {
                    bad += v[j] != 0.0f || pv[j] != 0.0f;
                } else if (memcmp(&v[j], &ref[c], 4) != 0 || memcmp(&pv[j], &ref[c], 4) != 0) {
                    if (bad < 5)
                        printf("%s column %ld: decoded %.9g, as pieces %.9g, reference %.9g\n",
                               ti->name, (long)c, v[j], pv[j], ref[c]);
                    bad++;
                }
            }
        }
        free(src);
        free(ref);
        free(dst);
    }
    printf("%-5s cols %5ld stride %5zu: %s\n", ti->name, (long)cols, stride,
           bad ? "MISMATCH" : "bit-identical");
    return bad != 0;
}

int main()
{
    int f = 0;
    f += check<CW_F32>(DT_F32, 101) + check<CW_F32>(DT_F32, 256);
    f += check<CW_F16>(DT_F16, 101) + check<CW_F16>(DT_F16, 7);
    f += check<CW_BF16>(DT_BF16, 101) + check<CW_BF16>(DT_BF16, 256);
    f += check<CW_Q8_0>(DT_Q8_0, 96) + check<CW_Q8_0>(DT_Q8_0, 544);
    f += check<CW_Q4_0>(DT_Q4_0, 96) + check<CW_Q4_0>(DT_Q4_0, 544);
    f += check<CW_Q4_K>(DT_Q4_K, 256) + check<CW_Q4_K>(DT_Q4_K, 768);
    f += check<CW_Q5_K>(DT_Q5_K, 256) + check<CW_Q5_K>(DT_Q5_K, 768);
    f += check<CW_Q6_K>(DT_Q6_K, 256) + check<CW_Q6_K>(DT_Q6_K, 768);
    f += check<CW_NVFP4>(DT_NVFP4, 64) + check<CW_NVFP4>(DT_NVFP4, 576);
    f += check<CW_MXFP8>(DT_MXFP8, 32) + check<CW_MXFP8>(DT_MXFP8, 544);
    puts(f ? "FAILED" : "ALL OK");
    return f != 0;
}

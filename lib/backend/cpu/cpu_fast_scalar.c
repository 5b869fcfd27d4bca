/* The fast path's portable kernels: what a CPU without AVX2 or NEON
 * runs, and the plainest statement of each
 * format's arithmetic under the contract of
 * docs/decisions/0018-cpu-fast-path.md. Integer sums are exact; the float
 * steps are the same as the SIMD levels' per block, only the order of the
 * final sums differs. Built with -std=c11, so no FMA contraction. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "format/dequant.h"
#include "numerics/half.h"

static float rd_f16(const uint8_t *p) { return fp16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

static float rd_bf16(const uint8_t *p) { return bf16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

static float rd_f32(const uint8_t *p)
{
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* ---- f32-x formats: eight interleaved sums combined pairwise ---- */

#define PLAIN_DOT(NAME, BYTES, READ)                                                               \
    static float NAME(const uint8_t *w, const cpu_xrow *x, int64_t n)                              \
    {                                                                                              \
        const float *xf = x->f;                                                                    \
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                                   \
        int64_t i = 0;                                                                             \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int j = 0; j < 8; j++)                                                            \
                acc[j] += READ(w + (i + j) * BYTES) * xf[i + j];                                   \
        float tail = 0;                                                                            \
        for (; i < n; i++)                                                                         \
            tail += READ(w + i * BYTES) * xf[i];                                                   \
        return (((acc[0] + acc[1]) + (acc[2] + acc[3])) +                                          \
                ((acc[4] + acc[5]) + (acc[6] + acc[7]))) +                                         \
               tail;                                                                               \
    }

PLAIN_DOT(dot_f32, 4, rd_f32)
PLAIN_DOT(dot_f16, 2, rd_f16)
PLAIN_DOT(dot_bf16, 2, rd_bf16)

/* ---- int8-x formats: exact integer sums per 32-block ---- */

static float dot_q8_0(const uint8_t *w, const cpu_xrow *x, int64_t n)
{
    float acc = 0;
    for (int64_t b = 0; b < n / 32; b++, w += 34) {
        const int8_t *qw = (const int8_t *)(w + 2), *qx = x->q + b * 32;
        int32_t sum = 0;
        for (int j = 0; j < 32; j++)
            sum += qw[j] * qx[j];
        acc += (rd_f16(w) * x->d[b]) * (float)sum;
    }
    return acc;
}

static float dot_q4_0(const uint8_t *w, const cpu_xrow *x, int64_t n)
{
    float acc = 0;
    for (int64_t b = 0; b < n / 32; b++, w += 18) {
        const uint8_t *qs = w + 2;
        const int8_t *qx = x->q + b * 32;
        int32_t sum = 0;
        for (int j = 0; j < 16; j++)
            sum += ((qs[j] & 0xF) - 8) * qx[j] + ((qs[j] >> 4) - 8) * qx[j + 16];
        acc += (rd_f16(w) * x->d[b]) * (float)sum;
    }
    return acc;
}

/* Q4_K and Q5_K: value = (d * sc) * q - (dmin * m) per 32-block, so the
 * dot is sum_b (d sc) d_x,b sum(q q_x) - sum_b (dmin m) (d_x,b s_b): the
 * scaled sums in one accumulator, the mins in eight (one per block of a
 * super-block, as the SIMD levels' lanes), subtracted last. */
static float k_mins_total(const float *mins)
{
    return ((mins[0] + mins[4]) + (mins[2] + mins[6])) +
           ((mins[1] + mins[5]) + (mins[3] + mins[7]));
}

/* Q4_K and Q5_K (q5: its fifth bits from qh[32] after the scales): the
 * same super-block walk, the 4- or 5-bit quants' exact integer sums. */
static inline float dot_k4(const uint8_t *w, const cpu_xrow *x, int64_t n, int q5)
{
    float acc = 0, mins[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t sb = 0; sb < n / 256; sb++, w += q5 ? 176 : 144) {
        const float d = rd_f16(w), dmin = rd_f16(w + 2);
        const uint8_t *scales = w + 4, *qh = w + 16, *ql = w + (q5 ? 48 : 16);
        for (int j = 0; j < 8; j++) {
            int64_t b = sb * 8 + j;
            uint8_t sc, m;
            dequant_k4_scale_min(j, scales, &sc, &m);
            const uint8_t *q = ql + 32 * (j / 2);
            const int8_t *qx = x->q + b * 32;
            int shift = 4 * (j % 2);
            int32_t sum = 0;
            for (int l = 0; l < 32; l++)
                sum += (((q[l] >> shift) & 0xF) | (q5 ? ((qh[l] >> j) & 1) << 4 : 0)) * qx[l];
            acc += ((d * sc) * x->d[b]) * (float)sum;
            mins[j] += (dmin * m) * (x->d[b] * (float)x->s[b]);
        }
    }
    return acc - k_mins_total(mins);
}

static float dot_q4_k(const uint8_t *w, const cpu_xrow *x, int64_t n) { return dot_k4(w, x, n, 0); }
static float dot_q5_k(const uint8_t *w, const cpu_xrow *x, int64_t n) { return dot_k4(w, x, n, 1); }

/* Q6_K: each 32-block of x meets one quarter of a 128-element half, whose
 * two 16-element scales multiply the exact integer sums. */
static float dot_q6_k(const uint8_t *w, const cpu_xrow *x, int64_t n)
{
    float acc = 0;
    for (int64_t sb = 0; sb < n / 256; sb++, w += 210) {
        const float d = rd_f16(w + 208);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w + 64 * h, *qh = w + 128 + 32 * h;
            const int8_t *sc = (const int8_t *)(w + 192 + 8 * h);
            for (int g = 0; g < 4; g++) {
                int64_t b = sb * 8 + 4 * h + g;
                const int8_t *qx = x->q + b * 32;
                const uint8_t *lo = ql + 32 * (g % 2);
                int lshift = 4 * (g / 2), hshift = 2 * g;
                int32_t part[2] = {0, 0};
                for (int l = 0; l < 32; l++) {
                    int q = (((lo[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32;
                    part[l / 16] += q * qx[l];
                }
                int32_t sum = sc[2 * g] * part[0] + sc[2 * g + 1] * part[1];
                acc += (d * x->d[b]) * (float)sum;
            }
        }
    }
    return acc;
}

/* NVFP4: each 32-block of x meets two 16-value sub-blocks, each with its
 * own scale: their exact integer sums of doubled E2M1 values times x's
 * int8, scaled apart. */
static float dot_nvfp4(const uint8_t *w, const cpu_xrow *x, int64_t n)
{
    float acc = 0;
    for (int64_t i = 0; i < n / 64; i++, w += 36)
        for (int h = 0; h < 2; h++) {
            int64_t b = 2 * i + h;
            const int8_t *qx = x->q + b * 32;
            for (int s = 0; s < 2; s++) {
                const uint8_t *qs = w + 4 + 8 * (2 * h + s);
                const int8_t *xs = qx + 16 * s;
                int32_t sum = 0;
                for (int j = 0; j < 8; j++)
                    sum += cpu_e2m1_doubled[qs[j] & 0xF] * xs[j] +
                           cpu_e2m1_doubled[qs[j] >> 4] * xs[j + 8];
                acc += (cpu_ue4m3_half(w[2 * h + s]) * x->d[b]) * (float)sum;
            }
        }
    return acc;
}

/* MXFP8: each value (E4M3 times the block's power of two, exact, as the
 * reference dequantizes it) times x in f32, eight interleaved sums. */
static float dot_mxfp8(const uint8_t *w, const cpu_xrow *x, int64_t n)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t b = 0; b < n / 32; b++, w += 33) {
        const float d = dequant_e8m0(w[0]);
        const float *xf = x->f + b * 32;
        for (int j = 0; j < 32; j++)
            acc[j % 8] += (fp8_e4m3_to_f32(w[1 + j]) * d) * xf[j];
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* ---- attention (docs/decisions/0035-cpu-fast-attention.md): products
 * and sums rounded apart, as portable C computes them ---- */

static float kv_elem_get(const void *row, cpu_kv_elem e, int64_t i)
{
    const uint8_t *p = row;
    switch (e) {
    case CPU_KV_BF16: return rd_bf16(p + 2 * i);
    case CPU_KV_F16: return rd_f16(p + 2 * i);
    case CPU_KV_Q8_0: return (float)(int8_t)p[(i / 32) * 34 + 2 + i % 32] * rd_f16(p + (i / 32) * 34);
    case CPU_KV_F32: break;
    }
    return rd_f32(p + 4 * i);
}

/* Eight interleaved sums, combined pairwise, then the tail (cpu_dot's
 * layout), times the scale. */
static void attn_dot(const float *q, const void *const *k, cpu_kv_elem e, int nk, int64_t n,
                     float scale, float *out)
{
    for (int j = 0; j < nk; j++) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tail = 0;
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            for (int l = 0; l < 8; l++)
                acc[l] += q[i + l] * kv_elem_get(k[j], e, i + l);
        for (; i < n; i++)
            tail += q[i] * kv_elem_get(k[j], e, i);
        out[j] = ((((acc[0] + acc[1]) + (acc[2] + acc[3])) +
                   ((acc[4] + acc[5]) + (acc[6] + acc[7]))) + tail) * scale;
    }
}

static float attn_exp(float *s, int64_t n)
{
    float m = -INFINITY, sum = 0;
    for (int64_t i = 0; i < n; i++)
        m = s[i] > m ? s[i] : m;
    for (int64_t i = 0; i < n; i++) {
        s[i] = cpu_exp_neg(s[i] - m);
        sum += s[i];
    }
    return sum;
}

static void attn_axpy(float *o, const float *p, const void *const *v, cpu_kv_elem e, int nv,
                      int64_t n)
{
    for (int j = 0; j < nv; j++)
        for (int64_t i = 0; i < n; i++)
            o[i] += p[j] * kv_elem_get(v[j], e, i);
}

const cpu_kernels cpu_kernels_scalar = {
    .isa = CPU_ISA_SCALAR,
    .name = "scalar",
    .f32 = {dot_f32, NULL, 1},
    .f16 = {dot_f16, NULL, 1},
    .bf16 = {dot_bf16, NULL, 1},
    .q8_0 = {dot_q8_0, NULL, 1},
    .q4_0 = {dot_q4_0, NULL, 1},
    .q4_k = {dot_q4_k, NULL, 1},
    .q5_k = {dot_q5_k, NULL, 1},
    .q6_k = {dot_q6_k, NULL, 1},
    .nvfp4 = {dot_nvfp4, NULL, 1},
    .mxfp8 = {dot_mxfp8, NULL, 1},
    .quantize_x = cpu_quantize_x,
    .attn_dot = attn_dot,
    .attn_exp = attn_exp,
    .attn_axpy = attn_axpy,
};

/* The quantizers (lib/quant/quantize_*.c), always judged through the
 * reference dequantizer (what a reader of the file gets back).
 *
 * Reference rules. For each type the test builds, by its own code, the
 * block that the plain rule would write (ggml's own reference rule where it
 * is a plain rule):
 *   Q8_0   d = f16(amax / 127), q = round(x / d)            (ggml's rule)
 *   Q4_0   d = f16(xm / -8), q = min(15, (int)(x / d + 8.5)) (ggml's rule; xm
 *          the value of largest magnitude)
 *          (ggml rounds the quants against the f32 scale before storing it
 *          as f16; here they are rounded against the stored scale)
 *   Q4_K,  each sub-block's range [min(x, 0), max x] over 0..nmax, the 6-bit
 *   Q5_K   scales and mins rounded against d = max scale / 63 and
 *          dmin = max min / 63, quants rounded against the decoded values
 *   Q6_K   each sub-block's extreme on -32, the largest scale on -128
 *   NVFP4  each sub-block's code nearest amax / 6 (UE4M3, halved: amax / 12),
 *          values to the nearest E2M1 level
 *   MXFP8  the OCP MX rule: exponent floor(log2 amax) - 8, values rounded
 *          to nearest even E4M3, saturating
 *
 * Bounds, derived from each reference block's own parameters (not tuned):
 * on a uniform grid with step D (Q8_0, Q4_0, Q6_K's sub-block scale d*sc,
 * the K-quants' d*sc) a value inside the grid is at most D/2 from a level,
 * a value outside it exactly its distance to the end level; on NVFP4's
 * levels 0 .5 1 1.5 2 3 4 6 (times 2d) the widest gap is 2 -> 3 ... 4 -> 6,
 * so at most 2d inside [-12d, 12d]; E4M3 has 3 mantissa bits, so a normal
 * value is within 2^-4 of itself, a subnormal within 2^-10 (times the block
 * scale), and values past 448 are their distance to 448. Summing the
 * squares gives a per-block bound B on the reference's squared error.
 *
 * What is checked, per block, over Gaussian and outlier-heavy rows at two
 * amplitudes: the reference block's squared error is <= B (the layout and
 * the derivation agree), and ours is <= the reference's (the searches keep
 * the reference rule as a candidate) -- so ours is <= B too. The only slack
 * is 1e-5 relative for float summation order: the quantizers compare
 * candidates with float sums, the test sums in double. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "format/dequant.h"
#include "numerics/half.h"
#include "quant/quantize.h"
#include "test.h"

#define SUM_SLACK 1e-5

static rng_state rng;

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* ---- reference blocks and bounds (bound[i]: the largest error of value i) ---- */

/* Bound on a uniform grid lo..hi times step s (s may be negative). */
static double grid_bound(float x, float s, int lo, int hi)
{
    if (s == 0.0f)
        return fabs((double)x);
    const double t = (double)x / (double)s, as = fabs((double)s);
    if (t < lo - 0.5)
        return (lo - t) * as;
    if (t > hi + 0.5)
        return (t - hi) * as;
    return as / 2;
}

static void ref_q8_0(const float *x, uint8_t *b, double *bound)
{
    float amax = 0;
    for (int i = 0; i < 32; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    const uint16_t h = f32_to_fp16(amax / 127.0f);
    const float d = fp16_to_f32(h), id = d != 0.0f ? 1.0f / d : 0.0f;
    put16(b, h);
    for (int i = 0; i < 32; i++) {
        int q = (int)roundf(x[i] * id);
        q = q < -127 ? -127 : q > 127 ? 127 : q;
        b[2 + i] = (uint8_t)(int8_t)q;
        bound[i] = grid_bound(x[i], d, -127, 127);
    }
}

static void ref_q4_0(const float *x, uint8_t *b, double *bound)
{
    float xm = 0;
    for (int i = 0; i < 32; i++)
        xm = fabsf(x[i]) > fabsf(xm) ? x[i] : xm;
    const uint16_t h = f32_to_fp16(xm / -8.0f);
    const float d = fp16_to_f32(h), id = d != 0.0f ? 1.0f / d : 0.0f;
    put16(b, h);
    int q[32];
    for (int i = 0; i < 32; i++) {
        int v = (int)(x[i] * id + 8.5f);
        q[i] = v < 0 ? 0 : v > 15 ? 15 : v;
        bound[i] = grid_bound(x[i], d, -8, 7);
    }
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
}

static int clamp63(long v) { return v < 0 ? 0 : v > 63 ? 63 : (int)v; }

/* Q4_K (nmax 15) / Q5_K (31): the min/max rule. */
static void ref_kq(const float *x, uint8_t *b, double *bound, int nmax)
{
    float a[8], mn[8], ma = 0, mm = 0;
    for (int j = 0; j < 8; j++) {
        float lo = x[32 * j], hi = lo;
        for (int i = 0; i < 32; i++) {
            lo = fminf(lo, x[32 * j + i]);
            hi = fmaxf(hi, x[32 * j + i]);
        }
        lo = fminf(lo, 0.0f);
        a[j] = (hi - lo) / (float)nmax;
        mn[j] = -lo;
        ma = fmaxf(ma, a[j]);
        mm = fmaxf(mm, mn[j]);
    }
    const uint16_t dh = f32_to_fp16(ma / 63.0f), mh = f32_to_fp16(mm / 63.0f);
    const float d = fp16_to_f32(dh), dmin = fp16_to_f32(mh);
    uint8_t sc[8], m[8], L[256];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(d > 0 ? clamp63(lrintf(a[j] / d)) : 0);
        m[j] = (uint8_t)(dmin > 0 ? clamp63(lrintf(mn[j] / dmin)) : 0);
        const float A = d * sc[j], B = dmin * m[j];
        for (int i = 0; i < 32; i++) {
            const float v = x[32 * j + i];
            long q = A > 0 ? lrintf((v + B) / A) : 0;
            L[32 * j + i] = (uint8_t)(q < 0 ? 0 : q > nmax ? nmax : q);
            bound[32 * j + i] = grid_bound(v + B, A, 0, nmax);
        }
    }
    put16(b, dh);
    put16(b + 2, mh);
    uint8_t *s = b + 4;
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
    if (nmax == 15) {
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++)
                b[16 + 32 * g + l] = (uint8_t)(L[64 * g + l] | (L[64 * g + 32 + l] << 4));
    } else {
        memset(b + 16, 0, 32);
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) {
                const int lo = L[64 * g + l], hi = L[64 * g + 32 + l];
                b[48 + 32 * g + l] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
                b[16 + l] |= (uint8_t)(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
            }
    }
}

static void ref_q6_k(const float *x, uint8_t *b, double *bound)
{
    float s[16], smax = 0;
    for (int k = 0; k < 16; k++) {
        float xm = 0;
        for (int i = 0; i < 16; i++)
            xm = fabsf(x[16 * k + i]) > fabsf(xm) ? x[16 * k + i] : xm;
        s[k] = xm / -32.0f;
        smax = fabsf(s[k]) > fabsf(smax) ? s[k] : smax;
    }
    const uint16_t dh = f32_to_fp16(smax / -128.0f);
    const float d = fp16_to_f32(dh);
    int8_t sc[16];
    int q[256];
    for (int k = 0; k < 16; k++) {
        long r = d != 0 ? lrintf(s[k] / d) : 0;
        sc[k] = (int8_t)(r < -128 ? -128 : r > 127 ? 127 : r);
        const float A = d * sc[k];
        for (int i = 0; i < 16; i++) {
            long v = A != 0 ? lrintf(x[16 * k + i] / A) : 0;
            q[16 * k + i] = (int)(v < -32 ? -32 : v > 31 ? 31 : v) + 32;
            bound[16 * k + i] = grid_bound(x[16 * k + i], A, -32, 31);
        }
    }
    memset(b + 128, 0, 64);
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const int *Q = q + 128 * h;
            b[64 * h + l] = (uint8_t)((Q[l] & 15) | ((Q[l + 64] & 15) << 4));
            b[64 * h + l + 32] = (uint8_t)((Q[l + 32] & 15) | ((Q[l + 96] & 15) << 4));
            b[128 + 32 * h + l] = (uint8_t)((Q[l] >> 4) | ((Q[l + 32] >> 4) << 2) |
                                            ((Q[l + 64] >> 4) << 4) | ((Q[l + 96] >> 4) << 6));
        }
    memcpy(b + 192, sc, 16);
    put16(b + 208, dh);
}

static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};

static void ref_nvfp4(const float *x, uint8_t *b, double *bound)
{
    for (int s = 0; s < 4; s++) {
        float amax = 0;
        for (int i = 0; i < 16; i++)
            amax = fmaxf(amax, fabsf(x[16 * s + i]));
        /* the code whose raw (unhalved) value is nearest amax / 6 */
        int code = 0;
        for (int c = 1; c < 127; c++)
            if (fabsf(2 * dequant_ue4m3_half((uint8_t)c) - amax / 6) <
                fabsf(2 * dequant_ue4m3_half((uint8_t)code) - amax / 6))
                code = c;
        b[s] = (uint8_t)code;
        const float d2 = 2 * dequant_ue4m3_half((uint8_t)code); /* one E2M1 unit */
        int nib[16];
        for (int i = 0; i < 16; i++) {
            const float v = x[16 * s + i];
            int best = 0;
            for (int k = 1; k < 8; k++)
                if (fabsf(fabsf(v) - e2m1[k] * d2) < fabsf(fabsf(v) - e2m1[best] * d2))
                    best = k;
            nib[i] = best ? best | (v < 0 ? 8 : 0) : 0;
            bound[16 * s + i] = fabsf(v) <= 6 * d2 ? d2 : fabsf(v) - 6 * d2;
        }
        for (int j = 0; j < 8; j++)
            b[4 + 8 * s + j] = (uint8_t)(nib[j] | (nib[j + 8] << 4));
    }
}

static void ref_mxfp8(const float *x, uint8_t *b, double *bound)
{
    float amax = 0;
    for (int i = 0; i < 32; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    int e = 127;
    if (amax > 0) {
        int ex;
        frexpf(amax, &ex); /* amax = f * 2^ex, f in [0.5, 1): floor(log2) = ex - 1 */
        e = 127 + (ex - 1) - 8;
        e = e < 0 ? 0 : e > 254 ? 254 : e;
    }
    b[0] = (uint8_t)e;
    const double s = ldexp(1.0, e - 127);
    for (int i = 0; i < 32; i++) {
        b[1 + i] = f32_to_fp8_e4m3((float)(x[i] / s));
        const double v = fabs(x[i] / s);
        bound[i] = s * (v > 448 ? v - 448 : v >= 0.015625 ? v / 16 : 1.0 / 1024);
    }
}

typedef struct {
    dtype t;
    int block;
    void (*ref)(const float *, uint8_t *, double *);
} qtype;

static void ref_q4_k(const float *x, uint8_t *b, double *bd) { ref_kq(x, b, bd, 15); }
static void ref_q5_k(const float *x, uint8_t *b, double *bd) { ref_kq(x, b, bd, 31); }

static const qtype types[] = {
    {DT_Q8_0, 32, ref_q8_0},   {DT_Q4_0, 32, ref_q4_0},   {DT_Q4_K, 256, ref_q4_k},
    {DT_Q5_K, 256, ref_q5_k},  {DT_Q6_K, 256, ref_q6_k},  {DT_NVFP4, 64, ref_nvfp4},
    {DT_MXFP8, 32, ref_mxfp8},
};

/* ---- data ---- */

enum { ROW = 4096, ROWS = 8 };

/* Gaussian; or with 1 value in 64 multiplied by 25 (the outliers a few
 * weight columns carry). */
static void make_row(float *x, int n, float sigma, int outliers)
{
    for (int i = 0; i < n; i++) {
        x[i] = sigma * rng_normal(&rng);
        if (outliers && rng_next_u64(&rng) % 64 == 0)
            x[i] *= 25.0f;
    }
}

static double sse(const float *x, const float *y, const float *w, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (w ? w[i] : 1.0) * ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
    return s;
}

/* Quantize + dequantize a row through the public entry points. */
static void roundtrip(dtype t, const float *x, const float *w, float *y, int n)
{
    uint8_t buf[ROW * 2];
    memra_err err;
    CHECK_MSG(quantize_row(t, x, buf, n, w, &err) == 0, "%s", err.msg);
    CHECK_MSG(dequant_row(t, buf, y, n, &err) == 0, "%s", err.msg);
}

static void test_bounds_and_reference(void)
{
    rng_seed(&rng, 1, 1);
    static float x[ROW], y[ROW], r[ROW];
    static double bound[ROW];
    static uint8_t rb[ROW * 2];
    const float sigmas[2] = {0.02f, 1.0f};
    for (size_t k = 0; k < MEMRA_ARRAY_LEN(types); k++) {
        const qtype *q = &types[k];
        const dtype_info *ti = dtype_get(q->t);
        double tot_ours = 0, tot_ref = 0, tot_x = 0;
        int bad_bound = 0, bad_ref = 0;
        for (int sg = 0; sg < 2; sg++)
            for (int outl = 0; outl < 2; outl++)
                for (int row = 0; row < ROWS; row++) {
                    make_row(x, ROW, sigmas[sg], outl);
                    roundtrip(q->t, x, NULL, y, ROW);
                    for (int b = 0; b < ROW / q->block; b++) {
                        const float *xb = x + b * q->block;
                        q->ref(xb, rb, bound);
                        memra_err err;
                        CHECK(dequant_row(q->t, rb, r, q->block, &err) == 0);
                        double B = 0;
                        for (int i = 0; i < q->block; i++)
                            B += bound[i] * bound[i];
                        const double e_ref = sse(xb, r, NULL, q->block);
                        const double e_ours = sse(xb, y + b * q->block, NULL, q->block);
                        if (e_ref > B * (1 + SUM_SLACK) + 1e-30 && bad_bound++ < 3)
                            fprintf(stderr, "  %s block %d: reference error %g > bound %g\n",
                                    ti->name, b, e_ref, B);
                        if (e_ours > e_ref * (1 + SUM_SLACK) + 1e-30 && bad_ref++ < 3)
                            fprintf(stderr, "  %s block %d: error %g > reference %g\n", ti->name,
                                    b, e_ours, e_ref);
                        tot_ours += e_ours;
                        tot_ref += e_ref;
                        for (int i = 0; i < q->block; i++)
                            tot_x += (double)xb[i] * xb[i];
                    }
                }
        CHECK_MSG(bad_bound == 0, "%s: %d blocks past the derived bound", ti->name, bad_bound);
        CHECK_MSG(bad_ref == 0, "%s: %d blocks worse than the reference rule", ti->name, bad_ref);
        fprintf(stderr, "  %-6s relative rms error %.5f (reference rule %.5f)\n", ti->name,
                sqrt(tot_ours / tot_x), sqrt(tot_ref / tot_x));
    }
}

/* Importance weighting: with a weight per column the weighted error must
 * fall compared to quantizing without (the weights steer where the error
 * goes). MXFP8 is the exception: its only free parameter is one
 * power-of-two exponent per 32 values, each value then rounds to its
 * nearest E4M3 whatever its weight, so weights can only change the
 * exponent choice; for it the check is "not worse". Ones must give exactly
 * the unweighted bytes; a block of zero weights is quantized as if
 * unweighted. */
static void test_importance(void)
{
    rng_seed(&rng, 2, 1);
    static float x[ROW], y0[ROW], y1[ROW], w[ROW], ones[ROW], zeros[ROW];
    for (int i = 0; i < ROW; i++) {
        /* log-uniform over four decades, like activation energies */
        w[i] = powf(10.0f, 4.0f * rng_uniform(&rng) - 2.0f);
        ones[i] = 1.0f;
        zeros[i] = 0.0f;
    }
    for (size_t k = 0; k < MEMRA_ARRAY_LEN(types); k++) {
        const dtype t = types[k].t;
        double plain = 0, weighted = 0;
        for (int row = 0; row < ROWS; row++) {
            make_row(x, ROW, 0.02f, row & 1);
            roundtrip(t, x, NULL, y0, ROW);
            roundtrip(t, x, w, y1, ROW);
            plain += sse(x, y0, w, ROW);
            weighted += sse(x, y1, w, ROW);
        }
        CHECK_MSG(t == DT_MXFP8 ? weighted <= plain : weighted < plain,
                  "%s: weighted error %g, unweighted quantization %g", dtype_get(t)->name,
                  weighted, plain);
        fprintf(stderr, "  %-6s importance-weighted error %.3f of the unweighted quantization's\n",
                dtype_get(t)->name, weighted / plain);
        uint8_t a[ROW * 2], b[ROW * 2], c[ROW * 2];
        const int64_t nb = dtype_row_bytes(t, ROW);
        memra_err err;
        CHECK(quantize_row(t, x, a, ROW, NULL, &err) == 0);
        CHECK(quantize_row(t, x, b, ROW, ones, &err) == 0);
        CHECK(quantize_row(t, x, c, ROW, zeros, &err) == 0);
        CHECK_MSG(memcmp(a, b, (size_t)nb) == 0 && memcmp(a, c, (size_t)nb) == 0,
                  "%s: ones / zeros weights change the bytes", dtype_get(t)->name);
    }
}

/* Hand-checked quantized blocks. */
static void test_hand_blocks(void)
{
    memra_err err;
    /* Q8_0: values q * 2^-7 with an extreme at 127: d = +-2^-7 (f16 0x2000
     * or 0xA000, the quants' signs to match) represents every value
     * exactly. */
    {
        float x[32], y[32];
        for (int i = 0; i < 32; i++)
            x[i] = (float)((i * 37) % 255 - 127) / 128.0f;
        x[5] = 127.0f / 128.0f;
        uint8_t b[34];
        CHECK(quantize_row(DT_Q8_0, x, b, 32, NULL, &err) == 0);
        CHECK(b[0] == 0x00 && (b[1] & 0x7F) == 0x20);
        const int sign = b[1] & 0x80 ? -1 : 1;
        for (int i = 0; i < 32; i++)
            CHECK((int8_t)b[2 + i] == sign * (int)lrintf(x[i] * 128.0f));
        CHECK(dequant_row(DT_Q8_0, b, y, 32, &err) == 0 && sse(x, y, NULL, 32) == 0.0);
    }
    /* NVFP4: sub-block 0 holds the E2M1 levels 0 .5 1 1.5 2 3 4 6 then
     * their negatives (-0 first): only scale d = 0.5 (code 0x38: e7 m0 = 1,
     * halved) fits them all; nibble j is level j (bit 3 the sign), -0 is
     * written as 0. The other sub-blocks are zero: code 0, nibbles 0. */
    {
        float x[64] = {0};
        for (int j = 0; j < 8; j++) {
            x[j] = e2m1[j];
            x[8 + j] = -e2m1[j];
        }
        uint8_t b[36];
        CHECK(quantize_row(DT_NVFP4, x, b, 64, NULL, &err) == 0);
        CHECK(b[0] == 0x38 && b[1] == 0 && b[2] == 0 && b[3] == 0);
        CHECK(b[4] == 0x00);
        for (int j = 1; j < 8; j++)
            CHECK(b[4 + j] == (uint8_t)(j | ((8 + j) << 4)));
        for (int j = 12; j < 36; j++)
            CHECK(b[j] == 0);
    }
    /* MXFP8: x_j = (j - 16) / 2, amax 8: the OCP exponent is
     * floor(log2 8) - 8 = -5 (byte 122), scaled values (j - 16) * 16, all
     * exact in E4M3: -256 = S e15 m0 = 0xF8, 240 = 1.875 * 2^7 = e14 m7 =
     * 0x77, 0 = 0x00, 16 = e11 m0 = 0x58. */
    {
        float x[32];
        for (int j = 0; j < 32; j++)
            x[j] = (float)(j - 16) / 2.0f;
        uint8_t b[33];
        CHECK(quantize_row(DT_MXFP8, x, b, 32, NULL, &err) == 0);
        CHECK(b[0] == 122);
        CHECK(b[1 + 0] == 0xF8 && b[1 + 31] == 0x77 && b[1 + 16] == 0x00 && b[1 + 17] == 0x58);
        float y[32];
        CHECK(dequant_row(DT_MXFP8, b, y, 32, &err) == 0 && sse(x, y, NULL, 32) == 0.0);
    }
    /* Q4_K: a sub-block on the grid (d * 63) * q - dmin * 63 with the f16
     * d = 2^-10, dmin = 2^-11 and q = 7i mod 16 comes back exactly (sc = m =
     * 63 in the header); the zero sub-blocks get sc = m = 0. */
    {
        float x[256] = {0}, y[256];
        const float A = 63.0f / 1024.0f, B = 63.0f / 2048.0f;
        for (int i = 0; i < 32; i++)
            x[i] = A * (float)((i * 7) % 16) - B;
        uint8_t b[144];
        CHECK(quantize_row(DT_Q4_K, x, b, 256, NULL, &err) == 0);
        CHECK(dequant_row(DT_Q4_K, b, y, 256, &err) == 0);
        CHECK_MSG(sse(x, y, NULL, 256) == 0.0, "error %g", sse(x, y, NULL, 256));
        CHECK(b[0] == 0x00 && b[1] == 0x14 && b[2] == 0x00 && b[3] == 0x10); /* 2^-10, 2^-11 */
        CHECK(b[4] == 63 && b[8] == 63 && b[5] == 0 && b[9] == 0);
    }
}

/* f32 -> E4M3: every finite code comes back through its value, halfway
 * points go to the even mantissa, large values saturate at 448. */
static void test_fp8_encode(void)
{
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7F) == 0x7F)
            continue;
        CHECK_MSG(f32_to_fp8_e4m3(fp8_e4m3_to_f32((uint8_t)c)) == c, "code 0x%02x", c);
    }
    CHECK(f32_to_fp8_e4m3(1.0625f) == 0x38);   /* 1 + 1/16: between m0 and m1, even is m0 */
    CHECK(f32_to_fp8_e4m3(1.1875f) == 0x3A);   /* 1 + 3/16: between m1 and m2 -> m2 */
    CHECK(f32_to_fp8_e4m3(448.0f) == 0x7E && f32_to_fp8_e4m3(1e9f) == 0x7E);
    CHECK(f32_to_fp8_e4m3(-500.0f) == 0xFE);
    CHECK(f32_to_fp8_e4m3(ldexpf(1.5f, -10)) == 0x01); /* 0.75 * 2^-9 -> subnormal 1 */
    CHECK(f32_to_fp8_e4m3(ldexpf(1.0f, -11)) == 0x00); /* 0.25 * 2^-9 -> 0 */
    CHECK(f32_to_fp8_e4m3(NAN) == 0x7F);
}

static void test_bad_input(void)
{
    float x[64] = {0}, w[64] = {0};
    uint8_t b[64];
    memra_err err;
    x[37] = NAN;
    CHECK(quantize_row(DT_Q8_0, x, b, 64, NULL, &err) != 0 && strstr(err.msg, "value 37 is NaN"));
    x[37] = INFINITY;
    CHECK(quantize_row(DT_Q4_K, x, b, 64, NULL, &err) != 0);
    x[37] = 0;
    CHECK(quantize_row(DT_Q4_K, x, b, 64, NULL, &err) != 0 && strstr(err.msg, "Q4_K blocks"));
    w[3] = -1;
    CHECK(quantize_row(DT_Q8_0, x, b, 64, w, &err) != 0 && strstr(err.msg, "importance 3"));
    CHECK(quantize_row(DT_Q4_1, x, b, 32, NULL, &err) != 0 && strstr(err.msg, "Q4_1"));
    CHECK(quantize_supported(DT_MXFP8) && !quantize_supported(DT_F16));
}

TEST_MAIN(TEST_CASE(test_bounds_and_reference), TEST_CASE(test_importance),
          TEST_CASE(test_hand_blocks), TEST_CASE(test_fp8_encode), TEST_CASE(test_bad_input))

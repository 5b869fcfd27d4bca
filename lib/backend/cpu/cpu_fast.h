/* The CPU fast path's kernels (docs/decisions/0018-cpu-fast-path.md):
 * one dot product per weight format and ISA level, chosen at run time
 * from the CPU's features.
 *
 * A kernel dots one stored weight row with one token's x. F32, F16, BF16
 * and MXFP8 rows read x as f32 (MXFP8's E4M3 values are not integers); the
 * other block formats (NVFP4's doubled E2M1 values are) read x quantized
 * per 32 values to int8 with an f32 scale (cpu_quantize_x), the same
 * bytes on every machine. A kernel's result depends on the row, the
 * token's x and the ISA level only, which is what keeps outputs
 * byte-identical across batch sizes, chunking and thread counts. */
#ifndef MEMRA_BACKEND_CPU_CPU_FAST_H
#define MEMRA_BACKEND_CPU_CPU_FAST_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/err.h"
#include "format/dtype.h"

/* The levels: scalar everywhere; avx2, avx512 and amx (avx512 with the
 * AMX int8 tiles for the panel formats' prompt products) on x86-64; neon
 * and dotprod on aarch64. */
typedef enum {
    CPU_ISA_SCALAR = 0,
    CPU_ISA_AVX2 = 1,
    CPU_ISA_AVX512 = 2,
    CPU_ISA_NEON = 3,
    CPU_ISA_DOTPROD = 4,
    CPU_ISA_AMX = 5
} cpu_isa;
enum { CPU_ISA_COUNT = 6, CPU_QBLOCK = 32 };

/* The element types of the K and V rows the attention kernels read
 * (Q8_0: a head of whole blocks of 32, n a multiple of 32). */
typedef enum { CPU_KV_F32 = 0, CPU_KV_BF16 = 1, CPU_KV_F16 = 2, CPU_KV_Q8_0 = 3 } cpu_kv_elem;

/* One token's x in the forms the kernels read. */
typedef struct {
    const float *f;   /* [n] f32, for F32 / F16 / BF16 rows */
    const int8_t *q;  /* [n] int8, for the block formats */
    const float *d;   /* [n / 32] each block's scale: x ~ d * q */
    const int32_t *s; /* [n / 32] each block's sum of q */
    const int8_t *p;  /* [n] q in the panel order (cpu_panel.h), for panel kernels */
    const int32_t *lo; /* [n / 32] each block's sum of its first 16 q */
} cpu_xrow;

/* The dot product of weight row w (n values in its stored format) with x. */
typedef float (*cpu_dot_fn)(const uint8_t *w, const cpu_xrow *x, int64_t n);
/* The same for the tokens x[0 .. nt) into out[0 .. nt), nt the kernel's
 * own count: each out[t] the same bits as the one-token kernel's. */
typedef void (*cpu_dotn_fn)(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out);

/* Rows w, w + row_bytes, ... (the kernel's nr of them) against nt
 * tokens' x into out[r * nt + t]: each (row, token) the same bits as the
 * one-token kernel's. */
typedef void (*cpu_rows_fn)(const uint8_t *w, size_t row_bytes, const cpu_xrow *x, int64_t n,
                            float *out);

/* Rows w, w + row_bytes, ... (nr of them, read one after another) against
 * one token's x into out[0 .. nr): each the one-token kernel's bits. A
 * decode step's run of rows in one call, not a call a row: on the 2-core
 * Xeon VM the Qwen3-0.6B shape's decode (rows of 1,024 values, two
 * panels) read Q8_0 41.2 / 41.3 / 42.6 -> 43.8 / 44.7 / 44.0 tok/s and
 * Q4_K_M 54.5 / 55.4 -> 57.2 / 56.7; the 8B shape's level (docs/decisions/
 * 0018, "A task's rows in one call"). */
typedef void (*cpu_seq_fn)(const uint8_t *w, size_t row_bytes, int nr, const cpu_xrow *x,
                           int64_t n, float *out);

/* A tile of tokens' x in the layout the amx level's tile kernels read
 * (CPU_TILE_TOKENS tokens; slots past the last token hold zeros): per
 * 32-block b, b[b * 512 + g * 64 + 4 u + j] is value 4 g + j (g < 8,
 * j < 4) of token u's int8 block (an AMX B tile of 8 rows); d, s and lo
 * are each token's block scale, sum and first-16 sum (cpu_xrow's) at
 * [b * CPU_TILE_TOKENS + u]. Written by cpu_tile_x. */
enum { CPU_TILE_TOKENS = 16, CPU_TILE_ROWS = 16 };
typedef struct {
    const int8_t *b;
    const float *d;
    const int32_t *s;
    const int32_t *lo;
} cpu_xtile;
/* Token slot u of a tile: the int8 blocks q, d, s and first-16 sums lo
 * (cpu_panel_x's) of n values (n a multiple of 32) into x's tile layout
 * at tb, td, ts, tlo (arrays of the whole tile); q = NULL writes the
 * slot's zeros. */
void cpu_tile_x(const int8_t *q, const float *d, const int32_t *s, const int32_t *lo, int64_t n,
                int u, int8_t *tb, float *td, int32_t *ts, int32_t *tlo);
/* Panel rows w, w + row_bytes, ... (nr <= CPU_TILE_ROWS of them, n
 * values each) against nx tiles of tokens x[0 .. nx) into out[(i *
 * CPU_TILE_TOKENS + u) * CPU_TILE_ROWS + r] for tile i (a token's rows side
 * by side, as the product's output holds them): each (row, token)
 * the same bits as the level's one-token panel kernel. The rows are
 * unpacked once for all the tiles. scratch: CPU_TILE_SCRATCH(n) bytes of
 * the calling thread's. */
typedef void (*cpu_tile_fn)(const uint8_t *w, size_t row_bytes, int nr, const cpu_xtile *x,
                            int nx, int64_t n, float *out, uint8_t *scratch);
#define CPU_TILE_SCRATCH(n) ((size_t)(n) * 24 + 40960)

typedef struct {
    cpu_dot_fn one;
    cpu_dotn_fn many; /* NULL: none (tokens one at a time) */
    int nt;           /* tokens per call of many and rows */
    cpu_rows_fn rows; /* NULL: none (rows one at a time) */
    int nr;           /* rows per call of rows */
    cpu_tile_fn tile; /* NULL: none (the amx level's panel formats have one) */
    cpu_seq_fn seq;   /* NULL: none (a call of one a row) */
} cpu_kernel;

typedef struct {
    cpu_isa isa;
    const char *name; /* "scalar", "avx2", "avx512", "neon", "dotprod", "amx" */
    cpu_kernel f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, nvfp4, mxfp8;
    /* The panel forms (cpu_panel.h) of Q8_0, Q4_0, Q4_K, Q5_K and Q6_K
     * rows, reading x's p, d, s and lo; one = NULL where the level has none. */
    cpu_kernel q8_0_p, q4_0_p, q4_k_p, q5_k_p, q6_k_p;
    /* cpu_quantize_x on this level: the same bytes, faster. */
    void (*quantize_x)(const float *x, int64_t n, int8_t *q, float *d, int32_t *s);
    /* The fast path's attention (docs/decisions/0035-cpu-fast-attention.md),
     * on K and V rows read as stored (e):
     *   attn_dot:  out[j] = scale * (q . k[j]) for j < nk (nk <= 8), each
     *              key's products by FMA into the level's lanes, folded in
     *              a fixed tree, then the tail;
     *   attn_exp:  s[t] = exp(s[t] - max s) for t < n in place (the level's
     *              form of cpu_exp_neg), returning their sum, summed in the
     *              level's lanes;
     *   attn_axpy: o[i] += p[j] * v[j][i] for j = 0 .. nv - 1 in turn, by
     *              FMA.
     * A key's score and an element's sum are the same bits whatever group
     * of keys a call takes. */
    void (*attn_dot)(const float *q, const void *const *k, cpu_kv_elem e, int nk, int64_t n,
                     float scale, float *out);
    float (*attn_exp)(float *s, int64_t n);
    void (*attn_axpy)(float *o, const float *p, const void *const *v, cpu_kv_elem e, int nv,
                      int64_t n);
    /* The same for nq queries and the same keys: attn_dotq's out[t][j]
     * is attn_dot(q[t], ...)'s out[j], attn_axpyq's o[t] gets attn_axpy(
     * o[t], p[t], ...), the same bits; each key read once for all. NULL
     * where the level has none (the caller makes the single calls). */
    void (*attn_dotq)(const float *const *q, int nq, const void *const *k, cpu_kv_elem e,
                      int nk, int64_t n, float scale, float *const *out);
    void (*attn_axpyq)(float *const *o, const float *const *p, int nq, const void *const *v,
                       cpu_kv_elem e, int nv, int64_t n);
    /* A SiLU GLU in place: h[i] = silu(h[i]) * g[i] for i < n, silu(x) =
     * x * s with s the logistic of x from e = the level's exp(-|x|) (s =
     * 1 / (1 + e) from 0 up, e / (1 + e) below, so no exponential
     * overflows), each element the same bits wherever it sits in a call.
     * Within 2^-21 relative of x / (1 + exp(-x)) times g, or 2^-110 where
     * that is more (the logistic of x below -87.3 is 0 here: exp(-|x|)
     * under 2^-126) (tests/unit/test_cpu_fast.c). NULL where the level
     * has none (cpu_silu). */
    void (*glu_silu)(float *h, const float *g, int64_t n);
} cpu_kernels;

extern const cpu_kernels cpu_kernels_scalar;
#if defined(__x86_64__)
extern const cpu_kernels cpu_kernels_avx2;
extern const cpu_kernels cpu_kernels_avx512;
extern const cpu_kernels cpu_kernels_amx;
#endif
#if defined(__aarch64__)
extern const cpu_kernels cpu_kernels_neon;
extern const cpu_kernels cpu_kernels_dotprod;
#endif

/* The best level this CPU runs. */
cpu_isa cpu_isa_best(void);
/* Whether this CPU (and this build's architecture) runs level isa. */
int cpu_isa_runs(cpu_isa isa);
/* The kernels of level `isa`, or NULL with a message when this CPU (or
 * this build's architecture) lacks it. */
const cpu_kernels *cpu_kernels_for(cpu_isa isa, memra_err *err);
/* Parse a level's name; -1 for anything else. */
int cpu_isa_parse(const char *s);
/* The kernels a fast backend uses: the best level, or MEMRA_CPU_ISA's
 * when set (a name this CPU cannot run is ignored with a warning). */
const cpu_kernels *cpu_fast_kernels(void);

/* k's kernel for weight type t, or NULL (no fast kernel: the reference
 * path computes those products). */
const cpu_kernel *cpu_kernel_for_type(const cpu_kernels *k, dtype t);
/* k's panel kernel for type t, or NULL. */
const cpu_kernel *cpu_panel_kernel_for_type(const cpu_kernels *k, dtype t);
/* Whether type t's kernel reads x as int8 blocks (else f32). */
int cpu_type_reads_q8(dtype t);

/* NVFP4's sub-block scale (an unsigned E4M3 byte, halved), as
 * dequant_ue4m3_half computes it, without its libm call: kernels read one
 * per 16 weights. */
static inline float cpu_ue4m3_half(uint8_t x)
{
    if (x == 0 || x == 0x7F)
        return 0.0f;
    int e = (x >> 3) & 0xF, m = x & 7;
    if (e == 0)
        return (float)m * (1.0f / 1024.0f); /* m 2^-9, halved */
    /* (1 + m/8) 2^(e-7), halved: exponent e - 8 */
    uint32_t bits = ((uint32_t)(e - 8 + 127) << 23) | ((uint32_t)m << 20);
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* NVFP4's E2M1 values doubled (integers): sign bit 3, magnitudes
 * 0, 0.5, 1, 1.5, 2, 3, 4, 6. */
static const int8_t cpu_e2m1_doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* exp(x) for x <= 0 (a score less the row's largest), the fast
 * attention's exponential: n = round(x log2 e), r = x - n ln 2 in two
 * parts, exp(r) by a degree-7 polynomial (the Cephes expf coefficients),
 * times 2^n. Within 2^-22 relative of exp(x) (tests/unit/test_cpu_fast.c);
 * 0 below CPU_EXP_MIN (exp there is under 2^-126, nothing beside the
 * largest score's 1); NaN stays NaN. The SIMD levels compute the same
 * steps with FMA. */
#define CPU_EXP_MIN (-87.33654475f) /* ln 2^-126 */
#define CPU_EXP_LOG2E 1.44269504088896341f
#define CPU_EXP_LN2_HI 0.693359375f
#define CPU_EXP_LN2_LO (-2.12194440e-4f)
#define CPU_EXP_P0 1.9875691500e-4f
#define CPU_EXP_P1 1.3981999507e-3f
#define CPU_EXP_P2 8.3334519073e-3f
#define CPU_EXP_P3 4.1665795894e-2f
#define CPU_EXP_P4 1.6666665459e-1f
#define CPU_EXP_P5 5.0000001201e-1f
/* Adding and taking away 1.5 * 2^23 rounds |v| < 2^22 to the nearest
 * integer, ties to even, in the FPU's default mode. */
#define CPU_EXP_ROUNDER 12582912.0f

static inline float cpu_exp_neg(float x)
{
    if (!(x >= CPU_EXP_MIN))
        return x != x ? x : 0.0f;
    float n = (x * CPU_EXP_LOG2E + CPU_EXP_ROUNDER) - CPU_EXP_ROUNDER;
    float r = (x - n * CPU_EXP_LN2_HI) - n * CPU_EXP_LN2_LO;
    float y = CPU_EXP_P0;
    y = y * r + CPU_EXP_P1;
    y = y * r + CPU_EXP_P2;
    y = y * r + CPU_EXP_P3;
    y = y * r + CPU_EXP_P4;
    y = y * r + CPU_EXP_P5;
    y = y * (r * r) + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float p;
    memcpy(&p, &bits, sizeof p);
    return y * p;
}

/* x[n] (n a multiple of 32) into int8 blocks: per block d = amax / 127,
 * q = round-to-nearest-even(x / d) computed as x * (1 / d), s = sum q.
 * Portable C, so every ISA level reads the same bytes. */
void cpu_quantize_x(const float *x, int64_t n, int8_t *q, float *d, int32_t *s);

#endif

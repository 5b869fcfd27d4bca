/* The wrappers the ISA headers (cpu_fast_x86.h, cpu_fast_arm.h) define
 * their kernels with: a format's one-token, many-token and rows kernels
 * from the one inlined body each header writes for NR rows and NT tokens
 * (compile-time constants after inlining, so every (row, token) runs the
 * same operations alone or in a group). Include it only from those. */
#ifndef MEMRA_BACKEND_CPU_CPU_FAST_WRAP_H
#define MEMRA_BACKEND_CPU_CPU_FAST_WRAP_H

/* F32 / F16 / BF16: plain_blk over BYTES-wide values read by ld_NAME
 * (a vector) and rd1_NAME (one, for the tail); PLAIN_NT tokens, blocks of
 * PLAIN_NR rows. */
#define PLAIN_KERNELS(NAME, BYTES)                                                                 \
    static float dot_##NAME(const uint8_t *w, const cpu_xrow *x, int64_t n)                        \
    {                                                                                              \
        float r;                                                                                   \
        plain_blk(w, 0, x, n, &r, 1, 1, BYTES, ld_##NAME, rd1_##NAME);                             \
        return r;                                                                                  \
    }                                                                                              \
    static void dotn_##NAME(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out)            \
    {                                                                                              \
        plain_blk(w, 0, x, n, out, 1, PLAIN_NT, BYTES, ld_##NAME, rd1_##NAME);                     \
    }                                                                                              \
    static void rows_##NAME(const uint8_t *w, size_t rb, const cpu_xrow *x, int64_t n,             \
                            float *out)                                                            \
    {                                                                                              \
        plain_blk(w, rb, x, n, out, PLAIN_NR, PLAIN_NT, BYTES, ld_##NAME, rd1_##NAME);             \
    }

/* The one-token and the NT_MANY-token kernel of a format: CALL (which
 * writes out[0 .. NT)) with NT bound to 1 and to NT_MANY. */
#define NT_KERNELS(NAME, NT_MANY, CALL)                                                            \
    static float dot_##NAME(const uint8_t *w, const cpu_xrow *x, int64_t n)                        \
    {                                                                                              \
        float r, *out = &r;                                                                        \
        const int NT = 1;                                                                          \
        CALL;                                                                                      \
        return r;                                                                                  \
    }                                                                                              \
    static void dotn_##NAME(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out)            \
    {                                                                                              \
        const int NT = NT_MANY;                                                                    \
        CALL;                                                                                      \
    }

/* The int8-x formats: Q_NT tokens. */
#define Q_KERNELS(NAME, CALL) NT_KERNELS(NAME, Q_NT, CALL)

/* The same and a seq kernel: CALL with NT bound to 1, for each of nr
 * rows in turn (so each row the one-token kernel's bits). */
#define Q_SEQ_KERNELS(NAME, CALL)                                                                  \
    Q_KERNELS(NAME, CALL)                                                                          \
    static void seq_##NAME(const uint8_t *w0, size_t rb, int nr, const cpu_xrow *x, int64_t n,      \
                           float *o)                                                               \
    {                                                                                              \
        const int NT = 1;                                                                          \
        for (int r_ = 0; r_ < nr; r_++) {                                                          \
            const uint8_t *w = w0 + (size_t)r_ * rb;                                               \
            float *out = o + r_;                                                                   \
            CALL;                                                                                  \
        }                                                                                          \
    }

/* The attention kernels (decision 0035) of a level from its inlined
 * attn_dot_k (NK keys side by side: 4, then one at a time) and
 * attn_axpy_k, over rows whose value i attn_ld_SUF (a vector from i) and
 * attn_rd_SUF (one) read: f32, bf16 and f16 by their ld_ / rd1_, Q8_0
 * (a head's whole blocks) by the level's own. */
#define ATTN_BYTE_LOADERS(SUF, BYTES, VT)                                                          \
    static inline __attribute__((always_inline)) VT attn_ld_##SUF(const uint8_t *r, int64_t i)     \
    {                                                                                              \
        return ld_##SUF(r + i * BYTES);                                                            \
    }                                                                                              \
    static inline float attn_rd_##SUF(const uint8_t *r, int64_t i) { return rd1_##SUF(r + i * BYTES); }

#define ATTN_FORMS(SUF)                                                                            \
    static void attn_dot_##SUF(const float *q, const void *const *k, int nk, int64_t n,            \
                               float scale, float *out)                                            \
    {                                                                                              \
        int j = 0;                                                                                 \
        for (; j + 4 <= nk; j += 4)                                                                \
            attn_dot_k(q, k + j, n, scale, out + j, 4, attn_ld_##SUF, attn_rd_##SUF);              \
        for (; j < nk; j++)                                                                        \
            attn_dot_k(q, k + j, n, scale, out + j, 1, attn_ld_##SUF, attn_rd_##SUF);              \
    }                                                                                              \
    static void attn_axpy_##SUF(float *o, const float *p, const void *const *v, int nv,            \
                                int64_t n)                                                         \
    {                                                                                              \
        attn_axpy_k(o, p, v, nv, n, attn_ld_##SUF, attn_rd_##SUF);                                 \
    }

/* Q8_0 rows: value i is (float)q * d of its block (kvc_q8_0_get's
 * product), read by the level's attn_ld_kq8 / attn_rd_kq8. */
#define ATTN_KERNELS(VT)                                                                           \
    ATTN_BYTE_LOADERS(f32, 4, VT)                                                                  \
    ATTN_BYTE_LOADERS(bf16, 2, VT)                                                                 \
    ATTN_BYTE_LOADERS(f16, 2, VT)                                                                  \
    ATTN_FORMS(f32)                                                                                \
    ATTN_FORMS(bf16)                                                                               \
    ATTN_FORMS(f16)                                                                                \
    ATTN_FORMS(kq8)                                                                                \
    static void attn_dot(const float *q, const void *const *k, cpu_kv_elem e, int nk, int64_t n,   \
                         float scale, float *out)                                                  \
    {                                                                                              \
        if (e == CPU_KV_BF16)                                                                      \
            attn_dot_bf16(q, k, nk, n, scale, out);                                                \
        else if (e == CPU_KV_F16)                                                                  \
            attn_dot_f16(q, k, nk, n, scale, out);                                                 \
        else if (e == CPU_KV_Q8_0)                                                                 \
            attn_dot_kq8(q, k, nk, n, scale, out);                                                 \
        else                                                                                       \
            attn_dot_f32(q, k, nk, n, scale, out);                                                 \
    }                                                                                              \
    static void attn_axpy(float *o, const float *p, const void *const *v, cpu_kv_elem e, int nv,   \
                          int64_t n)                                                               \
    {                                                                                              \
        if (e == CPU_KV_BF16)                                                                      \
            attn_axpy_bf16(o, p, v, nv, n);                                                        \
        else if (e == CPU_KV_F16)                                                                  \
            attn_axpy_f16(o, p, v, nv, n);                                                         \
        else if (e == CPU_KV_Q8_0)                                                                 \
            attn_axpy_kq8(o, p, v, nv, n);                                                         \
        else                                                                                       \
            attn_axpy_f32(o, p, v, nv, n);                                                         \
    }

/* The multi-query forms of element type SUF over the level's attn_dotq_k
 * and attn_axpyq_k (ATTN_NQ queries a call, keys NKB at a time, then
 * one), the queries past a multiple of ATTN_NQ by the one-query forms. */
#define ATTN_QFORMS(SUF, NKB)                                                                      \
    static void attn_dotq_##SUF(const float *const *q, int nq, const void *const *k, int nk,       \
                                int64_t n, float scale, float *const *out)                         \
    {                                                                                              \
        int t = 0;                                                                                 \
        for (; t + ATTN_NQ <= nq; t += ATTN_NQ) {                                                  \
            int j = 0;                                                                             \
            for (; j + NKB <= nk; j += NKB)                                                        \
                attn_dotq_k(q + t, k + j, n, scale, out + t, j, ATTN_NQ, NKB, attn_ld_##SUF,       \
                            attn_rd_##SUF);                                                        \
            for (; j < nk; j++)                                                                    \
                attn_dotq_k(q + t, k + j, n, scale, out + t, j, ATTN_NQ, 1, attn_ld_##SUF,         \
                            attn_rd_##SUF);                                                        \
        }                                                                                          \
        for (; t < nq; t++)                                                                        \
            attn_dot_##SUF(q[t], k, nk, n, scale, out[t]);                                         \
    }                                                                                              \
    static void attn_axpyq_##SUF(float *const *o, const float *const *p, int nq,                   \
                                 const void *const *v, int nv, int64_t n)                          \
    {                                                                                              \
        int t = 0;                                                                                 \
        for (; t + ATTN_NQ <= nq; t += ATTN_NQ)                                                    \
            attn_axpyq_k(o + t, p + t, v, nv, n, ATTN_NQ, attn_ld_##SUF, attn_rd_##SUF);           \
        for (; t < nq; t++)                                                                        \
            attn_axpy_##SUF(o[t], p[t], v, nv, n);                                                 \
    }

/* The level's attn_dotq / attn_axpyq by the rows' element type, over its
 * attn_dotq_SUF / attn_axpyq_SUF forms. */
#define ATTN_QDISPATCH                                                                             \
    static void attn_dotq(const float *const *q, int nq, const void *const *k, cpu_kv_elem e,      \
                          int nk, int64_t n, float scale, float *const *out)                       \
    {                                                                                              \
        if (e == CPU_KV_BF16)                                                                      \
            attn_dotq_bf16(q, nq, k, nk, n, scale, out);                                           \
        else if (e == CPU_KV_F16)                                                                  \
            attn_dotq_f16(q, nq, k, nk, n, scale, out);                                            \
        else if (e == CPU_KV_Q8_0)                                                                 \
            attn_dotq_kq8(q, nq, k, nk, n, scale, out);                                            \
        else                                                                                       \
            attn_dotq_f32(q, nq, k, nk, n, scale, out);                                            \
    }                                                                                              \
    static void attn_axpyq(float *const *o, const float *const *p, int nq, const void *const *v,   \
                           cpu_kv_elem e, int nv, int64_t n)                                       \
    {                                                                                              \
        if (e == CPU_KV_BF16)                                                                      \
            attn_axpyq_bf16(o, p, nq, v, nv, n);                                                   \
        else if (e == CPU_KV_F16)                                                                  \
            attn_axpyq_f16(o, p, nq, v, nv, n);                                                    \
        else if (e == CPU_KV_Q8_0)                                                                 \
            attn_axpyq_kq8(o, p, nq, v, nv, n);                                                    \
        else                                                                                       \
            attn_axpyq_f32(o, p, nq, v, nv, n);                                                    \
    }

#endif

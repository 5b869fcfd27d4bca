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

#endif

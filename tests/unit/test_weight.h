/* Random weights of every format the CPU backend reads, for the unit tests
 * that compare kernels (test_cpu_ops, test_cpu_fast). */
#ifndef MEMRA_TESTS_TEST_WEIGHT_H
#define MEMRA_TESTS_TEST_WEIGHT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/rng.h"
#include "format/dtype.h"
#include "numerics/half.h"

static inline float test_urand(rng_state *rng, float lo, float hi)
{
    return lo + (hi - lo) * rng_uniform(rng);
}

static inline void test_put_f16(uint8_t *p, float v)
{
    uint16_t h = f32_to_fp16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* A random matrix [rows][cols] stored as type t: random quant bytes (every
 * code, Q8_0's -128 and Q6_K's -128 scales included) with small finite
 * scales, or random floats, drawn from rng. Caller frees w->data. */
static inline void test_make_weight(bk_weight *w, dtype t, int64_t rows, int64_t cols, rng_state *rng)
{
    const dtype_info *ti = dtype_get(t);
    memset(w, 0, sizeof *w);
    w->name = "test.weight";
    w->type = t;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = (size_t)dtype_row_bytes(t, cols);
    size_t nb = w->row_bytes * (size_t)rows;
    uint8_t *p = malloc(nb + 8);
    for (size_t i = 0; i < nb; i++)
        p[i] = (uint8_t)rng_next_u64(rng);
    int64_t blocks = (int64_t)(nb / (size_t)ti->type_size);
    for (int64_t b = 0; b < blocks; b++) {
        uint8_t *blk = p + b * ti->type_size;
        switch (t) {
        case DT_F32: {
            float v = test_urand(rng, -1, 1);
            memcpy(blk, &v, 4);
            break;
        }
        case DT_F16: test_put_f16(blk, test_urand(rng, -1, 1)); break;
        case DT_BF16: {
            uint16_t h = f32_to_bf16(test_urand(rng, -1, 1));
            memcpy(blk, &h, 2);
            break;
        }
        case DT_Q8_0: case DT_Q4_0: test_put_f16(blk, test_urand(rng, 0.001f, 0.02f)); break;
        case DT_Q4_K: case DT_Q5_K:
            test_put_f16(blk, test_urand(rng, 0.001f, 0.01f));
            test_put_f16(blk + 2, test_urand(rng, 0.001f, 0.01f));
            break;
        case DT_Q6_K: test_put_f16(blk + 208, test_urand(rng, 0.001f, 0.01f)); break;
        case DT_NVFP4: /* UE4M3 scales 2^-4 .. 2^-1 (halved) */
            for (int s = 0; s < 4; s++)
                blk[s] = (uint8_t)(0x18 + (int)test_urand(rng, 0, 24));
            break;
        case DT_MXFP8: /* exponent 2^-7 .. 2^0; no NaN element bytes */
            blk[0] = (uint8_t)(120 + (int)test_urand(rng, 0, 7));
            for (int j = 1; j < 33; j++)
                if ((blk[j] & 0x7F) == 0x7F)
                    blk[j] ^= 1;
            break;
        default: break;
        }
    }
    w->data = p;
}

#endif

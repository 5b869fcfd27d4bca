/* The CUDA device as memra sees it: what it is, which tuning class it falls
 * in, and the read+write bandwidth it reaches. Tuned defaults are keyed on
 * the class, and only the Hopper data-center parts (H100/H200, sm_90) have
 * measured ones; every other card is GENERIC and gets the safe path. */
#ifndef MEMRA_BACKEND_CUDA_DEVICE_H
#define MEMRA_BACKEND_CUDA_DEVICE_H

#include <stddef.h>

#include "core/err.h"

typedef enum { DEVICE_CLASS_GENERIC = 0, DEVICE_CLASS_HOPPER = 1 } device_class;

typedef struct {
    int index;
    char name[256];
    int cc_major, cc_minor;
    int sm_count;
    size_t total_mem;
    size_t smem_optin;    /* the most shared memory a block may ask for */
    device_class klass;
} cuda_device_info;

/* The defaults the backend runs with on a device, chosen by its class and
 * compute capability (docs/decisions/0006-cuda-decode-defaults.md says
 * which measurement set each), then the environment's overrides
 * (docs/FLAGS.md): MEMRA_CUDA_GRAPHS (0: no graph replay),
 * MEMRA_CUDA_GEMM and MEMRA_CUDA_FLASH (0: prefill in f32, for parity
 * with a reference) and MEMRA_CUDA_DGEMM (0 or 1; default: on for an
 * engine of several sequences, off for one, off with MEMRA_CUDA_GEMM=0);
 * a card without bf16 tensor cores never takes those three.
 * The kernel check sets the other fields directly to reach every path. */
typedef struct {
    int graphs;           /* replay decode steps as CUDA graphs */
    int graph_max_rows;   /* the largest decode step captured */
    int gemm;             /* tensor-core GEMM (cuBLASLt) for prefill chunks */
    int gemm_min_rows;    /* a prefill chunk of at least this many rows uses it */
    int dgemm_chunk_max;  /* ...except a quantized matrix's chunk of up to this many
                           * rows, which the decode GEMM runs (cuda_chunk_on_dgemm) */
    int prefill_chunk;    /* the engine's prefill step (n_batch) on this device */
    size_t attn_partials_cap; /* floats of attention partials one launch may use */
    int flash;            /* tensor-core flash attention for prefill chunks (bf16/f16 KV) */
    int flash_min_rows;   /* a prefill chunk of at least this many rows uses it */
    int flash_seg_keys;   /* flash: keys a segment of a row's (a row's bytes depend on it) */
    int flash_split_blocks; /* flash: a launch of fewer blocks is split by segments */
    size_t flash_ws_cap;  /* flash: floats a split launch's partials may use */
    int dgemm;            /* bf16 projections of decode rows on the tensor cores; -1: plan_decode */
    int dgemm_blocks_per_sm; /* the decode GEMM's column splits aim at this many blocks per SM */
    int pdl;              /* programmatic dependent launch (kernels/launch.cuh); cc >= 9.0 only */
    int attn_splits;      /* decode attention: most splits of a row's keys; 0: from the SM count */
    int attn_split_min;   /* decode attention: at most ceil(keys / this) splits a row; 0: ATTN_SPLIT_MIN; -1: plan_decode */
} cuda_tuning;

const char *device_class_name(device_class c);
/* The class's defaults for d, then the environment's overrides. Fails
 * naming a variable whose value is not one it takes. */
int cuda_tuning_for(const cuda_device_info *d, cuda_tuning *t, memra_err *err);
/* Number of CUDA devices; 0 (not an error) when there is no driver or device. */
int cuda_device_count(void);
int cuda_device_query(int index, cuda_device_info *out, memra_err *err);
/* Copy `bytes` device-to-device `reps` times with 16-byte vectors and return
 * the bytes moved (read + write) per second, in GB/s (1e9). */
int cuda_measure_copy_bandwidth(int index, size_t bytes, int reps, double *gbs, memra_err *err);

#endif

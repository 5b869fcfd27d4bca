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
    device_class klass;
} cuda_device_info;

/* The defaults the backend runs with on a device, chosen by its class
 * (docs/decisions/0006-cuda-decode-defaults.md says which measurement set
 * each), then overridden by MEMRA_CUDA_* environment variables:
 * MEMRA_CUDA_GRAPHS, MEMRA_CUDA_GEMM, MEMRA_CUDA_FUSE, MEMRA_CUDA_FLASH (0 or 1),
 * MEMRA_CUDA_MV_ROWS (0, 1, 2, 4), MEMRA_CUDA_GEMM_MIN_ROWS, MEMRA_CUDA_FLASH_MIN_ROWS (>= 2),
 * MEMRA_CUDA_ATTN (1: the split-K decode attention, 0: the older
 * per-64-key kernel, kernels/attention.cuh), MEMRA_CUDA_ATTN_SPLITS (0 to 128,
 * 0: from the SM count), MEMRA_CUDA_ATTN_PIPE, MEMRA_CUDA_ATTN_ORDER (0 or 1;
 * docs/decisions/0008-decode-attention-split.md), MEMRA_CUDA_DGEMM (0 or 1;
 * default: on for an engine of several sequences, off for one, off with
 * MEMRA_CUDA_GEMM=0), MEMRA_CUDA_DGEMM_BPS (1 to 16),
 * MEMRA_CUDA_DEQUANT_STAGED (0 or 1: the prefill weight decode's kernel),
 * MEMRA_CUDA_MV_LOOP (1: mat-vec blocks loop over groups of rows; 0: one
 * block per group, session 3's launch; read by the kernel check only). */
typedef struct {
    int mv_rows_per_warp; /* weight rows per warp in the mat-vec; 0: by matrix size */
    int graphs;           /* replay decode steps as CUDA graphs */
    int graph_max_rows;   /* the largest decode step captured */
    int gemm;             /* tensor-core GEMM (cuBLASLt) for prefill chunks */
    int gemm_min_rows;    /* a prefill chunk of at least this many rows uses it */
    int fuse_add_norm;    /* a residual add folds into the RMSNorm after it */
    int prefill_chunk;    /* the engine's prefill step (n_batch) on this device */
    size_t attn_partials_cap; /* floats of attention partials one launch may use */
    int flash;            /* tensor-core flash attention for prefill chunks (bf16/f16 KV) */
    int flash_min_rows;   /* a prefill chunk of at least this many rows uses it */
    int attn_decode;      /* 1: launch_attention_decode where it fits; 0: launch_attention */
    int dgemm;            /* bf16 projections of decode rows on the tensor cores; -1: plan_decode */
    int dgemm_blocks_per_sm; /* the decode GEMM's column splits aim at this many blocks per SM */
    int dequant_staged;   /* 1: the prefill GEMM's weight decode stores through shared memory; 0: from registers */
    int dequant_bps;      /* the staged weight decode's blocks an SM: 1 (registers unbounded) or 3 */
    int pdl;              /* programmatic dependent launch (kernels/launch.cuh); cc >= 9.0 only */
    int mv_loop;          /* kernel check's mat-vec jobs: 0 sets cu_mv_job.one_pass */
    int attn_splits;      /* decode attention: most splits of a row's keys; 0: from the SM count */
    int attn_pipe;        /* decode attention: K/V staged in shared memory by cp.async */
    int attn_heads_first; /* decode attention: one split's KV heads in neighbouring blocks */
    int attn_split_min;   /* decode attention: at most ceil(keys / this) splits a row; 0: ATTN_SPLIT_MIN; -1: plan_decode */
    int attn_combine;     /* decode attention: 1 the last block merges the splits; 0 the combine kernel */
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

/* Prefill projections on the tensor cores: out[n][rows] = x . W^T as one
 * cuBLASLt GEMM with bf16 operands and f32 accumulation, for prompt
 * chunks of at least tune.gemm_min_rows rows (cuda_ops.c decides).
 *
 * BF16 weights are used as they lie on the device (row-major rows with a
 * 16-byte stride: a column-major K x rows matrix, transposed). Weights of
 * every other format are decoded into a bf16 scratch first (the exact
 * CPU values, rounded to bf16), x is rounded to bf16, and a bias is added
 * after. So a chunk's rows are accurate to bf16 inputs (about 1e-3
 * relative), not to the mat-vec's f32; the result depends on the chunk's
 * rows and size only: one algorithm per shape, chosen once, and cuBLASLt's
 * reductions are ordered (none of its reduction schemes is atomic).
 *
 * cuBLASLt is loaded at run time (dlopen of libcublasLt.so.13; MEMRA_CUBLASLT
 * names another path), so no memra binary needs it to start: without it,
 * or on a card without bf16 tensor cores, prefill stays on the mat-vec. */
/* The toolkit's header has one old-style declaration (cublasLtLoggerForceDisable()). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "core/check.h"
#include "kernels/gemm_prep.cuh"

#define GEMM_WORKSPACE ((size_t)32 << 20)
enum { GEMM_PLANS = 128 };

typedef struct {
    int64_t m, n, k, lda; /* m: weight rows, n: tokens, k: cols */
    int ok;
    cublasLtMatmulAlgo_t algo;
} gemm_plan;

struct cuda_gemm {
    void *lib;
    int unusable; /* loading failed: never again */
    char why[256]; /* why, when unusable */
    cublasLtHandle_t h;
    void *ws;
    uint16_t *xb, *wb; /* bf16 scratch: activations, decoded weight */
    size_t xb_cap, wb_cap; /* elements */
    gemm_plan plan[GEMM_PLANS];
    int n_plan;
    __typeof__(&cublasLtCreate) create;
    __typeof__(&cublasLtDestroy) destroy;
    __typeof__(&cublasLtMatmulDescCreate) desc_create;
    __typeof__(&cublasLtMatmulDescDestroy) desc_destroy;
    __typeof__(&cublasLtMatmulDescSetAttribute) desc_set;
    __typeof__(&cublasLtMatrixLayoutCreate) layout_create;
    __typeof__(&cublasLtMatrixLayoutDestroy) layout_destroy;
    __typeof__(&cublasLtMatmulPreferenceCreate) pref_create;
    __typeof__(&cublasLtMatmulPreferenceDestroy) pref_destroy;
    __typeof__(&cublasLtMatmulPreferenceSetAttribute) pref_set;
    __typeof__(&cublasLtMatmulAlgoGetHeuristic) heuristic;
    __typeof__(&cublasLtMatmul) matmul;
};

#define LOAD(g, field, name)                                                  \
    do {                                                                      \
        void *sym = dlsym((g)->lib, name);                                    \
        if (!sym)                                                             \
            return -1;                                                        \
        memcpy(&(g)->field, &sym, sizeof sym);                                \
    } while (0)

static int load_symbols(cuda_gemm *g)
{
    LOAD(g, create, "cublasLtCreate");
    LOAD(g, destroy, "cublasLtDestroy");
    LOAD(g, desc_create, "cublasLtMatmulDescCreate");
    LOAD(g, desc_destroy, "cublasLtMatmulDescDestroy");
    LOAD(g, desc_set, "cublasLtMatmulDescSetAttribute");
    LOAD(g, layout_create, "cublasLtMatrixLayoutCreate");
    LOAD(g, layout_destroy, "cublasLtMatrixLayoutDestroy");
    LOAD(g, pref_create, "cublasLtMatmulPreferenceCreate");
    LOAD(g, pref_destroy, "cublasLtMatmulPreferenceDestroy");
    LOAD(g, pref_set, "cublasLtMatmulPreferenceSetAttribute");
    LOAD(g, heuristic, "cublasLtMatmulAlgoGetHeuristic");
    LOAD(g, matmul, "cublasLtMatmul");
    return 0;
}

/* The library, the handle and the workspace, made on first use. NULL when
 * unusable (no library, no symbols, no handle): prefill stays on the
 * mat-vec, which is correct, only slower. */
static cuda_gemm *gemm_of(cuda_backend *cb)
{
    if (!cb->gemm)
        cb->gemm = xcalloc(1, sizeof *cb->gemm);
    cuda_gemm *g = cb->gemm;
    if (g->unusable)
        return NULL;
    if (g->h)
        return g;
    g->unusable = 1;
    g->lib = cuda_dlopen("MEMRA_CUBLASLT", "libcublasLt.so.13");
    if (!g->lib) {
        const char *e = dlerror();
        snprintf(g->why, sizeof g->why, "cuBLASLt not loaded: %s", e ? e : "not found");
        return NULL;
    }
    if (load_symbols(g) != 0) {
        snprintf(g->why, sizeof g->why, "cuBLASLt lacks a symbol memra uses");
        return NULL;
    }
    cublasStatus_t st = g->create(&g->h);
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(g->why, sizeof g->why, "cublasLtCreate failed with status %d", (int)st);
        g->h = NULL;
        return NULL;
    }
    if (cuda_alloc(cb, &g->ws, GEMM_WORKSPACE, "the GEMM workspace", 1, NULL) != 0)
        return NULL;
    g->unusable = 0;
    return g;
}

const char *cuda_gemm_unavailable(cuda_backend *cb)
{
    if (!cb->tune.gemm)
        return cb->info.cc_major < 8 ? "no bf16 tensor cores (sm_80 or later)"
                                     : "turned off (MEMRA_CUDA_GEMM=0)";
    if (gemm_of(cb))
        return NULL;
    return cb->gemm->why[0] ? cb->gemm->why : "not usable";
}

void cuda_gemm_free(cuda_backend *cb)
{
    cuda_gemm *g = cb->gemm;
    if (!g)
        return;
    if (g->h)
        g->destroy(g->h);
    cudaFree(g->ws);
    cudaFree(g->xb);
    cudaFree(g->wb);
    /* The library stays loaded: unloading CUDA libraries at exit races
     * with their own teardown. */
    free(g);
    cb->gemm = NULL;
}

/* A bf16 scratch of at least n elements (grown, never shrunk). */
static uint16_t *scratch16(cuda_backend *cb, uint16_t **p, size_t *cap, size_t n, const char *what)
{
    if (n <= *cap)
        return *p;
    if (CU_OK(cb, cudaStreamSynchronize(cb->stream)))
        return NULL;
    cudaFree(*p);
    *p = NULL;
    *cap = 0;
    if (cuda_alloc(cb, (void **)p, n * sizeof(uint16_t), what, 1, NULL) != 0)
        return NULL;
    *cap = n;
    return *p;
}

/* The descriptors of out (m x n, f32, column-major: [n][m] row-major) =
 * A^T (A: k x m bf16, lda) . B (k x n bf16, ldb). */
typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
} gemm_descs;

static void descs_free(cuda_gemm *g, gemm_descs *d)
{
    if (d->op)
        g->desc_destroy(d->op);
    if (d->a)
        g->layout_destroy(d->a);
    if (d->b)
        g->layout_destroy(d->b);
    if (d->c)
        g->layout_destroy(d->c);
}

static int descs_make(cuda_gemm *g, gemm_descs *d, int64_t m, int64_t n, int64_t k, int64_t lda,
                      int64_t ldb)
{
    memset(d, 0, sizeof *d);
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    if (g->desc_create(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        g->desc_set(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) != CUBLAS_STATUS_SUCCESS ||
        g->desc_set(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) != CUBLAS_STATUS_SUCCESS ||
        g->layout_create(&d->a, CUDA_R_16BF, (uint64_t)k, (uint64_t)m, lda) != CUBLAS_STATUS_SUCCESS ||
        g->layout_create(&d->b, CUDA_R_16BF, (uint64_t)k, (uint64_t)n, ldb) != CUBLAS_STATUS_SUCCESS ||
        g->layout_create(&d->c, CUDA_R_32F, (uint64_t)m, (uint64_t)n, m) != CUBLAS_STATUS_SUCCESS)
        return -1;
    return 0;
}

/* The algorithm for this shape, asked of cuBLASLt's heuristic once and kept
 * (so every chunk of one size runs the same reduction). NULL: none. */
static const gemm_plan *plan_for(cuda_gemm *g, gemm_descs *d, int64_t m, int64_t n, int64_t k,
                                 int64_t lda)
{
    for (int i = 0; i < g->n_plan; i++) {
        const gemm_plan *p = &g->plan[i];
        if (p->m == m && p->n == n && p->k == k && p->lda == lda)
            return p->ok ? p : NULL;
    }
    gemm_plan *p = &g->plan[g->n_plan < GEMM_PLANS ? g->n_plan++ : GEMM_PLANS - 1];
    memset(p, 0, sizeof *p);
    p->m = m;
    p->n = n;
    p->k = k;
    p->lda = lda;
    cublasLtMatmulPreference_t pref = NULL;
    size_t ws = GEMM_WORKSPACE;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (g->pref_create(&pref) == CUBLAS_STATUS_SUCCESS &&
        g->pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ==
            CUBLAS_STATUS_SUCCESS &&
        g->heuristic(g->h, d->op, d->a, d->b, d->c, d->c, pref, 1, &res, &found) ==
            CUBLAS_STATUS_SUCCESS &&
        found > 0 && res.state == CUBLAS_STATUS_SUCCESS) {
        p->algo = res.algo;
        p->ok = 1;
    }
    if (pref)
        g->pref_destroy(pref);
    return p->ok ? p : NULL;
}

/* The GEMM's shape for w at n rows: its descriptors and plan. 1 ready, 0
 * no GEMM for it (the mat-vec runs it), -1 a failure (recorded). */
typedef struct {
    gemm_descs d;
    const gemm_plan *p;
    int64_t m, k, ld, lda;
} gemm_call;

static int call_plan(cuda_backend *cb, const cuda_weight *cw, int n, gemm_call *c)
{
    const cu_matrix *w = &cw->m;
    memset(c, 0, sizeof *c);
    if (cb->failed || w->rows < 16 || w->cols < 16 || w->cols > 65536)
        return 0;
    cuda_gemm *g = gemm_of(cb);
    if (!g)
        return 0;
    c->m = w->rows;
    c->k = w->cols;
    c->ld = (c->k + 7) & ~(int64_t)7;
    c->lda = w->fmt == CW_BF16 ? (int64_t)(w->stride / 2) : c->ld;
    if (descs_make(g, &c->d, c->m, n, c->k, c->lda, c->ld) != 0) {
        descs_free(g, &c->d);
        cuda_failf(cb, "GEMM for '%s': making the cuBLASLt descriptors failed", cw->name);
        return -1;
    }
    c->p = plan_for(g, &c->d, c->m, n, c->k, c->lda);
    if (!c->p) {
        descs_free(g, &c->d);
        return 0;
    }
    return 1;
}

int cuda_gemm_takes(cuda_backend *cb, const cuda_weight *cw, int n)
{
    gemm_call c;
    int r = call_plan(cb, cw, n, &c);
    if (r == 1)
        descs_free(cb->gemm, &c.d);
    return r == 1;
}

uint16_t *cuda_gemm_input(cuda_backend *cb, int n, int64_t cols)
{
    cuda_gemm *g = gemm_of(cb);
    if (!g)
        return NULL;
    const int64_t ld = (cols + 7) & ~(int64_t)7;
    return scratch16(cb, &g->xb, &g->xb_cap, (size_t)n * (size_t)ld, "the GEMM's bf16 input");
}

uint16_t *cuda_gemm_input_of(cuda_backend *cb, const float *x, int n, int64_t cols)
{
    uint16_t *xb = cuda_gemm_input(cb, n, cols);
    const int64_t ld = (cols + 7) & ~(int64_t)7;
    if (!xb || CU_OK(cb, launch_to_bf16(x, n, cols, ld, xb, cb->stream)))
        return NULL;
    return xb;
}

/* The planned GEMM on xb: the weight decoded to bf16 first unless it is
 * bf16, the bias added after. Frees c's descriptors. */
static void call_run(cuda_backend *cb, const cuda_weight *cw, gemm_call *c, const float *bias,
                     const uint16_t *xb, int n, float *out)
{
    cuda_gemm *g = cb->gemm;
    const cu_matrix *w = &cw->m;
    const void *a = w->data;
    if (w->fmt != CW_BF16) {
        uint16_t *wb = scratch16(cb, &g->wb, &g->wb_cap, (size_t)c->m * (size_t)c->ld,
                                 "the GEMM's bf16 weight");
        if (!wb || CU_OK(cb, launch_dequant_bf16(w, c->ld, wb, cb->stream))) {
            descs_free(g, &c->d);
            return;
        }
        a = wb;
    }
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st = g->matmul(g->h, c->d.op, &alpha, a, c->d.a, xb, c->d.b, &beta, out,
                                  c->d.c, out, c->d.c, &c->p->algo, g->ws, GEMM_WORKSPACE,
                                  cb->stream);
    descs_free(g, &c->d);
    if (st != CUBLAS_STATUS_SUCCESS) {
        cuda_failf(cb, "GEMM for '%s' (%" PRId64 " x %" PRId64 ", %d rows): cublasLtMatmul "
                   "failed with status %d", cw->name, c->m, c->k, n, (int)st);
        return;
    }
    if (bias)
        CU_OK(cb, launch_add_bias(out, bias, n, c->m, cb->stream));
}

int cuda_gemm_matmul(cuda_backend *cb, const cuda_weight *cw, const float *bias, const float *x,
                     int n, float *out)
{
    gemm_call c;
    int r = call_plan(cb, cw, n, &c);
    if (r <= 0)
        return r < 0;
    uint16_t *xb = cuda_gemm_input_of(cb, x, n, c.k);
    if (!xb) {
        descs_free(cb->gemm, &c.d);
        return 1;
    }
    call_run(cb, cw, &c, bias, xb, n, out);
    return 1;
}

int cuda_gemm_matmul_bf16(cuda_backend *cb, const cuda_weight *cw, const float *bias,
                          const uint16_t *xb, int n, float *out)
{
    gemm_call c;
    int r = call_plan(cb, cw, n, &c);
    if (r == 0)
        cuda_failf(cb, "GEMM for '%s': no cuBLASLt algorithm for %d rows (ask "
                   "cuda_gemm_takes first)", cw->name, n);
    if (r <= 0)
        return -1;
    call_run(cb, cw, &c, bias, xb, n, out);
    return cb->failed ? -1 : 0;
}

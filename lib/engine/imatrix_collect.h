/* Importance-matrix collection: while an engine runs text, the per-column
 * sum of squared inputs of every weight matrix the forward multiplies.
 *
 * The collector slips a thin backend in front of the engine's CPU backend:
 * every op goes through unchanged, and the ones that multiply weights
 * (matmul, attn_qkv, ffn_glu, ffn_moe) also add their inputs' squares to
 * host-side double accumulators keyed by the weight's GGUF name (HF names
 * are mapped with model/tensor_names). The FFN's down projection sees
 * act(gate x) * up x, read from the op's hb scratch after the op and
 * checked, first row of every call, against a recomputation. Routed experts
 * are accumulated per expert over only the tokens routed to them: the
 * routing (softmax over the router logits, top-k, lower id on ties) is
 * reproduced on the host (and checked against the choices the CPU op
 * kept), and each expert's down input recomputed.
 *
 * CPU backend only: activations are read in place as host memory. */
#ifndef MEMRA_ENGINE_IMATRIX_COLLECT_H
#define MEMRA_ENGINE_IMATRIX_COLLECT_H

#include <stdint.h>

#include "core/err.h"
#include "engine/engine.h"
#include "quant/imatrix.h"

typedef struct imatrix_collector imatrix_collector;

/* Start collecting on every later forward of e. Fails when e does not run
 * on the CPU backend. e must outlive the collector. */
int imatrix_collect_attach(engine *e, imatrix_collector **out, memra_err *err);
/* The first failure seen inside an op (the hb check, a weight whose name
 * cannot be mapped to GGUF), if any. */
int imatrix_collect_status(const imatrix_collector *c, memra_err *err);
/* The statistics so far as an imatrix: per entry the mean of x^2 per column
 * (per expert for stacked experts; an expert no token reached gets 1.0,
 * llama-quantize's neutral value), n_calls the rows accumulated (the most
 * of any expert). Fails on a non-finite sum, naming the tensor, or when
 * nothing was collected. dataset may be NULL. */
int imatrix_collect_result(const imatrix_collector *c, int32_t n_chunks, const char *dataset,
                           imatrix *out, memra_err *err);
/* Rows accumulated so far for matrix `mat` (the expert; 0 for a plain
 * weight) of the weight with this GGUF name; -1 when it was not seen or
 * mat is out of range. An expert with 0 rows never received a token. */
int64_t imatrix_collect_rows(const imatrix_collector *c, const char *gguf_name, int mat);
/* Give the engine its own backend back and free the collector. */
void imatrix_collect_free(imatrix_collector *c);

#endif

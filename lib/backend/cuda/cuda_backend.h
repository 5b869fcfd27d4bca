/* What the CUDA backend offers beyond the op interface (backend.h declares
 * backend_cuda_create): filling device activations from the host, for the
 * kernel check and tests, and waiting for queued work, for timing. Only in
 * builds with CUDA (MEMRA_CUDA=1). */
#ifndef MEMRA_BACKEND_CUDA_BACKEND_H
#define MEMRA_BACKEND_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* Copy n floats from host memory into an activation of b (a CUDA backend). */
void backend_cuda_act_write(backend *b, float *dst, const float *src, size_t n);
/* Wait for every queued op; the backend's status after it. */
int backend_cuda_sync(backend *b, memra_err *err);
/* Bytes of device memory the uploaded weights take. */
uint64_t backend_cuda_weight_bytes(backend *b);
/* Decode steps replayed from a graph, graphs captured, captures abandoned
 * (each such step ran eagerly) since b was made. */
void backend_cuda_graph_stats(backend *b, uint64_t *replays, uint64_t *captures,
                              uint64_t *abandoned);
/* Of those replays, the steps that sampled on the device (bk_step.sample:
 * engine_forward_sample, engine_forward_batch_sample). */
uint64_t backend_cuda_graph_sampled_replays(backend *b);
/* Chains of steps replayed from one graph (engine_forward_chain_sample),
 * each counted once. */
uint64_t backend_cuda_graph_chain_replays(backend *b);

#endif

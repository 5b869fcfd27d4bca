/* Tensor parallel inside the model (docs/decisions/0029): how each
 * layer's weights are cut into the ranks' shares when they are bound, and
 * how an attention or FFN sublayer runs over the ranks. model.c's
 * internals; the fields are model.tp and the rank_* arrays (model.h).
 *
 * Rank r of tp holds query heads [r H/tp, (r+1) H/tp) with their KV heads
 * (so every rank's query heads read its own KV heads), the rows of Q, K
 * and V and the columns of the output projection that go with them, FFN
 * columns [r F/tp, (r+1) F/tp) (gate and up rows, down columns; each
 * routed expert likewise) and every norm. Each rank's share of a
 * sublayer's output is a partial sum over its heads or columns; the
 * leader adds them in rank order, so a run's bytes never depend on timing
 * but differ from one device's by that order. */
#ifndef MEMRA_MODEL_TENSOR_PARALLEL_H
#define MEMRA_MODEL_TENSOR_PARALLEL_H

#include "backend/kv_cache.h"
#include "core/err.h"
#include "model/contract.h"
#include "model/model.h"

/* Whether a model of config c splits over tp ranks with a KV cache of type
 * kvt; fails naming what does not divide or is not built. */
int tp_check(const model_config *c, int tp, kv_type kvt, memra_err *err);

/* Cut weight w, bound for role, to rank m->bind_rank's share: rows (Q, K,
 * V, their biases, FFN gate and up), columns (the output and down
 * projections, copied out of the checkpoint: a row's share of a
 * quantized row must be whole blocks), the output bias on rank 0 alone,
 * and the rest whole. A no-op when m->tp <= 1. */
int tp_cut(model *m, tensor_role role, bk_weight *w, memra_err *err);

/* After weight_prepare: a column share copied for a backend that keeps its
 * own copy of it (w->dev) is freed, data left on `view`, the checkpoint's
 * bytes it was cut from (so it stays present; nothing reads it again). */
void tp_settle(model *m, bk_weight *w, const uint8_t *view);

/* The ranks' attention and DeltaNet shapes (rank_attn, rank_delta: their
 * heads, their states' offsets) from the whole model's m->attn and
 * m->delta, which the leader's then replace. */
void tp_rank_shapes(model *m);
/* Each rank's part of the cache: every KV layer, its KV heads' columns,
 * its heads' part of each recurrent state slot. */
void tp_cache_windows(model *m);

/* Make rank r current: its backend bound, its weights, attention shapes
 * and activations the model's. */
void tp_use_rank(model *m, int r);

/* Run a sublayer over every rank (model_sublayer): the leader's input
 * `in` goes to the others, each runs its share, and the leader sums the
 * shares into out in rank order. Called and returns with the leader
 * current. */
void tp_sublayer(model *m, model_share_fn f, int l, const bk_batch *rows, int n, const float *in,
                 float *out);

/* The ranks' weights, shapes, copies and activations freed; the model's
 * own pointers to the leader's cleared. */
void tp_free(model *m);

#endif

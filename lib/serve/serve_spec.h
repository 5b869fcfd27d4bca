/* Speculative decoding in the server (docs/SERVING.md, "Speculative
 * decoding"): a chat model served with a drafter (--draft DRAFT [--trim
 * RANKS], --ngram or --mtp) decodes a request by rounds of lib/engine/spec.h
 * (spec_round: up to K drafts, one forward of K+1 rows, verification,
 * rollback) instead of one token per step, while few enough slots decode
 * that a round pays.
 *
 * This file holds the model's speculation: the drafter's engine (a draft
 * model, loaded beside the model with one sequence per slot), one drafter
 * per slot, and each speculating slot's state (the context the drafter
 * reads, the request's random stream). The scheduling (which slot
 * speculates this tick, and emitting a round's tokens through the same
 * path plain decoding takes) is serve_model.c's. Engine thread only. */
#ifndef MEMRA_SERVE_SERVE_SPEC_H
#define MEMRA_SERVE_SERVE_SPEC_H

#include <stdint.h>

#include "backend/backend.h"
#include "core/err.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/spec.h"
#include "serve/serve_model.h"
#include "serve/serve_req.h"
#include "tok/tokenizer.h"

/* Draft tokens per round by default. */
#define SERVE_SPEC_K_DEFAULT 4

typedef struct serve_spec_slot serve_spec_slot;

/* Whether o asks for speculation at all (a drafter is given). */
int serve_spec_wanted(const serve_spec_opts *o);

/* The decode-batch size up to which a backend speculates by default. */
int serve_spec_default_max_batch(backend_kind b);

/* The model's speculation for target (its tokenizer tok, ids [0,
 * n_allowed) writable), n_slots slots. A draft model is loaded with eo
 * (the model's engine options; one sequence per slot, no prefix cache) and
 * must have the model's vocabulary; a rank file must be counted over the
 * model's. Errors name the file at fault. */
int serve_spec_new(const serve_spec_opts *o, engine *target, const tokenizer *tok,
                   int32_t n_allowed, const engine_opts *eo, int n_slots, serve_spec **out,
                   memra_err *err);
void serve_spec_free(serve_spec *sp);

int serve_spec_k(const serve_spec *sp);
int serve_spec_max_batch(const serve_spec *sp);
/* "draft PATH", "draft PATH, trim RANKS", "ngram" or "mtp": for the startup line. */
const char *serve_spec_describe(const serve_spec *sp);

/* Whether request r can be speculated exactly. Not: work (embeddings),
 * which has nothing to decode. Penalties and grammars speculate: spec_round
 * adds each emitted token to the slot sampler's history and to the
 * grammar's state before the next verify row (a job's con, serve_spec_rounds); a
 * lazy grammar (tool calls under tool_choice auto) starts inside a round
 * at the token that completes its trigger, and the rows after it are
 * masked. Each of several choices speculates on its own slot. */
int serve_spec_eligible(const serve_req *r);

/* Slot i starts choice `choice` of request r (eligible): its state, whose
 * context is the prompt so far; its sampling is the request's with seed +
 * choice (choice i is the single request of seed + i, as in plain
 * decoding). */
serve_spec_slot *serve_spec_slot_start(serve_spec *sp, int i, const serve_req *r, int choice);
/* A token the slot emitted joins the context the drafter reads. */
void serve_spec_slot_push(serve_spec_slot *ss, int32_t id);

/* One speculating slot's round, for serve_spec_rounds: its sequence
 * (holding its context but the newest token, which runs first), its
 * sampler, the tokens the request may still emit (>= 1), whether it wants
 * each emitted token's raw logits (serve_spec_raw_row), its constraint
 * (NULL: none); the round's tokens and status come back in out, rc, err. */
typedef struct {
    serve_spec_slot *ss;
    engine_seq *seq;
    sampler *smp;
    int64_t left;
    int want_raw;
    const spec_constraint *con;
    spec_round_result out;
    int rc;
    memra_err err;
} serve_spec_job;

/* A round for each job, their verify rows in shared steps of the target
 * (spec_rounds: each row's logits the bytes of its round alone, so each
 * slot's tokens are what it would emit speculating alone). Each round
 * drafts at most min(K, left - 1) and what the context leaves, so it
 * never emits past max_tokens or the context; the slot emits the tokens
 * itself (and pushes each it keeps). Returns how many jobs failed;
 * *n_steps the forward steps their verify rows took. */
int serve_spec_rounds(serve_spec *sp, serve_spec_job *jobs, int n, int *n_steps);
/* The raw logits [n_vocab] of emitted token i of the slot's last round
 * that wanted them. */
const float *serve_spec_raw_row(const serve_spec_slot *ss, int i);

#endif

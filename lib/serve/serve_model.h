/* A served model: the checkpoint, its tokenizer and chat template, the
 * engine, and the one thread that owns the engine and every sequence.
 *
 * Scheduling (continuous batching). Requests wait in a bounded FIFO; the
 * engine thread moves them into free slots (one engine sequence each,
 * max_sessions of them) between ticks. One tick:
 *   1. drops the slots whose client went away (cancelled, or hung up on
 *      its parked socket: serve_req_check_client);
 *   2. runs one prefill chunk for every slot still reading its prompt
 *      (the last one also samples the first token);
 *   3. takes the token the last forward sampled for each slot, in slot
 *      order, streams its text and decides whether it is done;
 *   4. runs one batched decode step for every slot that goes on
 *      (decode_step(), engine_forward_batch_sample: each slot's next token
 *      is sampled with its own sampler, on the device when the backend
 *      samples, so only token ids come back).
 * Requests join and leave between ticks. A greedy request gives the same
 * bytes alone or among others: the engine computes each row alone in a
 * fixed reduction order, so its logits do not depend on its neighbours.
 *
 * Sampling follows lib/engine/generate.c: stop ids (tok_is_stop), stop
 * strings and UTF-8 holdback through the streaming detokenizer, the end of
 * the context and max_tokens finish "length".
 *
 * A request of n choices takes n slots at once (it waits at the head of
 * the queue until n are free), each prefilling the prompt itself: the
 * engine has no KV fork yet, so the prompt is read n times. A request
 * asking for log-probabilities takes the host path: its row's logits come
 * back (n_vocab floats a step) and the host samples them, which picks the
 * same token the device would (the sampler's contract); it decodes alone,
 * beside the batch, so requests without logprobs keep theirs.
 *
 * Speculative decoding (serve_spec.h, opts.spec). A model served with a
 * drafter runs the slots it can speculate exactly (serve_spec_eligible)
 * on the host path too, one round each per tick (up to K drafts
 * verified in a forward of K+1 rows; the tick's rounds share the model's
 * steps, serve_spec_rounds), while at most
 * spec.max_batch slots decode that tick; above that they join the
 * batch. A round's tokens go out one by one through slot_sample, the
 * path every token takes, the last one at the next tick as a sampled
 * token would: so a greedy request's bytes, finish and usage are the same
 * with speculation on or off, and a slot moves between the batch and its
 * rounds between ticks. */
/* Embeddings and reranking. A model is served for one task: chat (the
 * generation endpoints), embed (/v1/embeddings) or rerank (/v1/rerank),
 * given with the alias (--task) or read from the checkpoint's pooling
 * (config.pooling: last, mean or cls -> embed, rank -> rerank, none ->
 * chat). An embeddings or rerank request (serve_req.work) runs each of its
 * inputs in a slot of its own: the slot prefills the input chunk by chunk
 * in the tick's prefill phase, beside the other slots (embed_pool_forward
 * pools an embed input's final hidden states; a rerank input's last chunk
 * returns the last position's logits), and frees at once when its last
 * chunk is done. The request waits at the head of the queue until every
 * input has had a slot, and answers when the last is done. */
#ifndef MEMRA_SERVE_SERVE_MODEL_H
#define MEMRA_SERVE_SERVE_MODEL_H

#include "backend/backend.h"
#include <stdint.h>

#include "core/err.h"
#include "serve/serve_metrics.h"
#include "serve/serve_req.h"
#include "serve/tool_parse.h"
#include "jinja/jinja.h"
#include "tok/tokenizer.h"

typedef enum {
    SERVE_TASK_AUTO = 0, /* from the checkpoint's pooling */
    SERVE_TASK_CHAT,
    SERVE_TASK_EMBED,
    SERVE_TASK_RERANK,
} serve_task;

/* "chat", "embed", "rerank" ("auto" for SERVE_TASK_AUTO). */
const char *serve_task_name(serve_task t);
/* The task of that name, or -1. */
int serve_task_parse(const char *name);

/* Speculative decoding for a chat model (serve_spec.h does it). */
typedef struct {
    const char *draft; /* a draft model of the model's vocabulary, or NULL */
    const char *trim;  /* a rank file for the draft's head (only with draft), or NULL */
    int ngram;         /* n-gram / prompt-lookup drafting (not with draft) */
    int mtp;           /* the model's own MTP block drafts (not with draft or ngram) */
    int k;             /* draft tokens per round, 1..8; 0: SERVE_SPEC_K_DEFAULT */
    int max_batch;     /* speculate while at most this many slots decode; <= 0: the
                          backend's default (serve_spec_default_max_batch) */
} serve_spec_opts;

typedef struct serve_spec serve_spec;

typedef struct {
    const char *alias;
    const char *path;          /* GGUF, HF dir or hf:owner/repo[:file] */
    int64_t n_ctx;             /* tokens per sequence; 0: the model's, at most 4096 */
    int max_sessions;          /* sequences in flight at once (KV room for each) */
    int max_queue;             /* requests that may wait beyond them */
    int n_threads;             /* engine threads; <= 0: one per core */
    int prefill_chunk;         /* prompt tokens per slot per tick; <= 0: the engine's
                                  step size (engine_n_batch) */
    const char *chat_template; /* template text replacing the checkpoint's, or NULL */
    backend_kind backend;      /* BK_CPU or BK_CUDA */
    int device;                /* CUDA device index (BK_CUDA) */
    const char *devices;       /* a pipeline's devices, one per stage (engine_opts_parallel) */
    int pp;                    /* pipeline stages; 0: one per device listed, else one */
    int tp;                    /* tensor-parallel ranks; 0 or 1: none */
    kv_type kv_type;           /* KV_DEFAULT: the backend's default (zero is KV_F32) */
    int prefix_cache;          /* share prompts' KV blocks across requests (per tenant) */
    int cache_blocks;          /* idle cached blocks kept; <= 0: as many as the pool holds */
    serve_task task;           /* SERVE_TASK_AUTO: as the checkpoint's pooling says */
    serve_spec_opts spec;      /* speculative decoding (chat models only): a drafter, or none */
} serve_model_opts;

typedef struct {
    int running, waiting;
    int64_t kv_blocks_used, kv_blocks_total;
    uint64_t prompt_tokens, generated_tokens;
    uint64_t finished_stop, finished_length, finished_error, cancelled;
    uint64_t prompt_cached_tokens; /* prompt tokens mapped from the prefix cache */
    kv_prefix_stats prefix;        /* the cache's own counters */
    serve_histo ttft, itl;
    /* embeddings and rerank requests ended, by how, and their inputs done */
    uint64_t work_ok, work_error, work_cancelled, work_inputs;
    uint64_t work_steps; /* packed forward steps the work ran */
    /* speculative decoding: whether the model has a drafter, the draft
     * tokens verified and, of them, accepted; the rounds, and the forward
     * steps their verify rows took (several rounds share one) */
    int speculates;
    uint64_t spec_drafted, spec_accepted, spec_rounds, spec_steps;
} serve_model_stats;

typedef struct serve_model serve_model;

int serve_model_load(const serve_model_opts *o, serve_model **out, memra_err *err);
/* Stops the engine thread; requests still waiting or running end with an
 * error saying the server is shutting down. */
void serve_model_free(serve_model *m);

const char *serve_model_alias(const serve_model *m);
const tokenizer *serve_model_tokenizer(const serve_model *m);
/* The encodings of long prompt fragments the model's requests repeat
 * (a system prompt), shared by the request threads. */
tok_cache *serve_model_tok_cache(const serve_model *m);
int64_t serve_model_n_ctx(const serve_model *m);
int32_t serve_model_n_vocab(const serve_model *m);
int serve_model_max_sessions(const serve_model *m);
/* The parsed chat template, or NULL with the reason in *why. */
const jinja_template *serve_model_template(const serve_model *m, const char **why);
/* The tool-call convention the chat template teaches (toolparse_detect). */
toolparse_format serve_model_tool_format(const serve_model *m);
/* Whether the template knows reasoning markup (<think>, [THINK], harmony's
 * analysis channel), and which: the reply is then split into reasoning and
 * content. */
int serve_model_reasoning(const serve_model *m, const char **open, const char **close);
/* BOS / EOS token text for the template (NULL when the tokenizer has none). */
const char *serve_model_bos_text(const serve_model *m);
const char *serve_model_eos_text(const serve_model *m);

/* Its speculation (opts.spec), or NULL when it has no drafter. */
const serve_spec *serve_model_spec(const serve_model *m);

/* The task it is served for (never SERVE_TASK_AUTO). */
serve_task serve_model_task(const serve_model *m);
/* An embed model's pooling (MODEL_POOL_LAST, MEAN or CLS: the
 * checkpoint's, last when it names none) and its vectors' length. */
int serve_model_pooling(const serve_model *m);
int64_t serve_model_dim(const serve_model *m);
/* A rerank model's prompt template and yes/no ids (NULL for others). */
const struct serve_rerank_tmpl *serve_model_rerank_tmpl(const serve_model *m);

/* Hand a request to the engine thread (it takes its own reference).
 * Returns 0; -1 when the queue is full (429); -2 when the model is shutting
 * down. A generation counts its n choices against --max-sessions +
 * --max-queue; an embeddings or rerank request of k inputs counts
 * min(k, --max-sessions), so one alone on an idle server is always
 * taken. */
int serve_model_submit(serve_model *m, serve_req *r);
void serve_model_get_stats(serve_model *m, serve_model_stats *s);

#endif

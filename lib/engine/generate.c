#include "engine/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/strbuf.h"
#include "tok/detok.h"

void gen_params_default(gen_params *p)
{
    memset(p, 0, sizeof *p);
    p->n_predict = 256;
    p->sampling = sampler_params_default();
    p->penalize_prompt = 1;
}

const char *gen_finish_name(gen_finish f) { return f == GEN_FINISH_STOP ? "stop" : "length"; }

void gen_result_free(gen_result *r)
{
    free(r->tokens);
    free(r->text);
    memset(r, 0, sizeof *r);
}

/* A sampler that never picks the embedding rows past the tokenizer's
 * last token (the [PAD<n>] rows of a vocabulary rounded up, as Qwen's
 * 151936 rows for 151669 tokens): they have no text, and a model's logit
 * for them is whatever training left there. The request's own bias on
 * those ids gives way to the ban. */
sampler *gen_model_sampler(const sampler_params *sp, const tokenizer *t, int32_t n_vocab,
                           memra_err *err)
{
    int32_t n_tok = t ? (int32_t)tok_vocab_size(t) : n_vocab;
    if (n_tok >= n_vocab)
        return sampler_new(sp, n_vocab, err);
    sampler_params p = *sp;
    size_t n = 0;
    sampler_logit_bias *merged =
        xmalloc(((size_t)p.n_logit_bias + (size_t)(n_vocab - n_tok)) * sizeof *merged);
    for (int32_t i = 0; i < p.n_logit_bias; i++)
        if (p.logit_bias[i].id < n_tok)
            merged[n++] = p.logit_bias[i];
    for (int32_t id = n_tok; id < n_vocab; id++)
        merged[n++] = (sampler_logit_bias){id, -INFINITY};
    p.logit_bias = merged;
    p.n_logit_bias = (int32_t)n;
    sampler *s = sampler_new(&p, n_vocab, err);
    free(merged);
    return s;
}

/* The constrained step: the tokens the grammar allows next become the
 * sampler's mask (every id past its vocabulary banned), the engine runs
 * the step and samples under it (on the device when the backend samples:
 * the logits stay there), and the grammar advances by the token. */
typedef struct {
    gram_state *state;
    const gram_vocab *vocab;
    uint32_t *mask;
} constrained;

static int forward_constrained(engine *e, engine_seq *seq, const int32_t *tokens, int n,
                               sampler *s, constrained *c, int32_t *out_id, memra_err *err)
{
    if (gram_mask(c->state, c->vocab, c->mask) == 0)
        return memra_fail(err, "grammar: no token can continue the output here (the "
                               "grammar admits nothing the vocabulary can write)");
    sampler_set_mask(s, c->mask, gram_vocab_size(c->vocab));
    int32_t id = -1;
    if (engine_forward_sample(e, seq, tokens, n, s, &id, err) != 0)
        return -1;
    if (gram_accept_token(c->state, c->vocab, id, err) != 0)
        return -1;
    *out_id = id;
    return 0;
}

int generate(engine *e, const tokenizer *t, const int32_t *prompt, size_t n_prompt,
             const gen_params *p, gen_text_fn on_text, void *ctx, gen_result *out,
             memra_err *err)
{
    memset(out, 0, sizeof *out);
    out->stop_string = -1;
    out->n_prompt = n_prompt;
    const model_config *cfg = engine_config(e);
    int64_t n_ctx = engine_n_ctx(e);
    if (n_prompt == 0)
        return memra_fail(err, "the prompt is empty (no tokens, not even BOS): nothing to continue");
    if ((int64_t)n_prompt >= n_ctx)
        return memra_fail(err, "the prompt of %zu tokens does not fit the context of %lld "
                               "(room is needed for at least one generated token)",
                          n_prompt, (long long)n_ctx);
    if ((p->grammar != NULL) != (p->grammar_vocab != NULL))
        return memra_fail(err, "a grammar needs its vocabulary (gen_params.grammar_vocab)");
    sampler *s = gen_model_sampler(&p->sampling, t, (int32_t)cfg->n_vocab, err);
    if (!s)
        return -1;
    constrained con = {0};
    if (p->grammar) {
        con.state = gram_state_new(p->grammar);
        con.vocab = p->grammar_vocab;
        con.mask = xmalloc(gram_mask_words(p->grammar_vocab) * sizeof(uint32_t));
    }
    detok_opts dopts = {.stop = p->stop, .n_stop = p->n_stop, .skip_special = 1, .at_start = 1};
    /* Without a tokenizer (a checkpoint that carries none, fed ids) the
     * loop still runs: no text, no end-of-generation ids. */
    detok *d = t ? detok_new(t, &dopts) : NULL;
    engine_seq *seq = NULL;
    size_t cap = 64;
    out->tokens = xmalloc(cap * sizeof(int32_t));
    strbuf text, piece;
    sb_init(&text);
    sb_init(&piece);
    int rc = engine_seq_new(e, &seq, err);
    for (size_t i = 0; rc == 0 && p->penalize_prompt && i < n_prompt; i++)
        rc = sampler_accept(s, prompt[i], err);

    /* Each forward step also samples the next token (on the device when
     * the backend can: only the id comes back), so the loop below starts
     * with a token in hand. */
    double t0 = clock_now_ms();
    int32_t id = -1;
    if (rc == 0 && p->n_predict == 0)
        rc = engine_forward(e, seq, prompt, (int)n_prompt, NULL, 0, err);
    else if (rc == 0 && p->grammar)
        rc = forward_constrained(e, seq, prompt, (int)n_prompt, s, &con, &id, err);
    else if (rc == 0)
        rc = engine_forward_sample(e, seq, prompt, (int)n_prompt, s, &id, err);
    out->prefill_ms = clock_now_ms() - t0;
    out->finish = GEN_FINISH_LENGTH;
    double t1 = clock_now_ms();
    while (rc == 0) {
        if (p->n_predict >= 0 && (int64_t)out->n_tokens >= p->n_predict)
            break;
        if (out->n_tokens == cap) {
            cap *= 2;
            out->tokens = xrealloc(out->tokens, cap * sizeof(int32_t));
        }
        out->tokens[out->n_tokens++] = id;
        if (t && !p->ignore_eos && tok_is_stop(t, id)) {
            out->finish = GEN_FINISH_STOP;
            break;
        }
        sb_clear(&piece);
        int stop_index = -1;
        int st = d ? detok_feed(d, id, &piece, &stop_index, err) : 0;
        if (st < 0) {
            rc = -1;
            break;
        }
        if (piece.len) {
            sb_append(&text, piece.data, piece.len);
            if (on_text)
                on_text(ctx, piece.data, piece.len);
        }
        if (st == 1) {
            out->finish = GEN_FINISH_STOP;
            out->stop_string = stop_index;
            break;
        }
        if ((rc = sampler_accept(s, id, err)) != 0)
            break;
        if (engine_seq_pos(seq) >= n_ctx)
            break; /* the context is full: finish "length" */
        if (p->n_predict >= 0 && (int64_t)out->n_tokens >= p->n_predict)
            break; /* no forward step for a token nobody will sample after */
        if (p->grammar)
            rc = forward_constrained(e, seq, &id, 1, s, &con, &id, err);
        else
            rc = engine_forward_sample(e, seq, &id, 1, s, &id, err);
        out->n_decoded++;
    }
    out->decode_ms = clock_now_ms() - t1;
    if (rc == 0 && d && out->stop_string < 0) {
        sb_clear(&piece);
        detok_flush(d, &piece);
        if (piece.len) {
            sb_append(&text, piece.data, piece.len);
            if (on_text)
                on_text(ctx, piece.data, piece.len);
        }
    }
    out->text = sb_take(&text);
    sb_free(&piece);
    if (con.state) {
        gram_state_free(con.state);
        free(con.mask);
    }
    if (seq)
        engine_seq_free(seq);
    if (d)
        detok_free(d);
    sampler_free(s);
    if (rc != 0)
        gen_result_free(out);
    return rc;
}

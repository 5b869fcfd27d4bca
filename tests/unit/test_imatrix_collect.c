/* Importance-matrix collection: on memra-tiny every 2-D weight gets an
 * entry, the output head's entry equals the mean square of the final
 * hidden state computed independently, q/k/v share their input, the
 * collector changes no logits; on a random qwen3_moe the experts follow
 * the routing (HF names mapped to GGUF, the same statistics from the GGUF
 * conversion). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "engine/engine.h"
#include "engine/imatrix_collect.h"
#include "model/convert.h"
#include "test.h"

enum { N_TOK = 96 };

static void make_tokens(int32_t *t, int n, int64_t vocab)
{
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)((i * 131 + 17) % vocab);
}

static engine *load(const checkpoint *ck)
{
    engine_opts o;
    engine_opts_default(&o);
    o.n_threads = 2;
    o.n_ctx = 128;
    engine *e = NULL;
    memra_err err = {{0}};
    CHECK_MSG(engine_load(ck, &o, &e, &err) == 0, "%s", err.msg);
    return e;
}

/* Run n tokens from position 0, all logits into out (may be NULL). */
static int run(engine *e, const int32_t *t, int n, float *out)
{
    engine_seq *s;
    memra_err err = {{0}};
    int rc = engine_seq_new(e, &s, &err);
    if (rc == 0)
        rc = engine_forward(e, s, t, n, out, 1, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    engine_seq_free(s);
    return rc;
}

/* The final normed hidden state (index n_layers), squared and summed per
 * column: what the output head's entry must hold, computed without the
 * collector. */
typedef struct {
    int index;
    int64_t dim;
    double *sum2;
    int64_t rows;
} final_capture;

static void capture_final(void *ctx, int index, const bk_batch *rows, int64_t dim, const float *h)
{
    final_capture *f = ctx;
    if (index != f->index)
        return;
    for (int i = 0; i < rows->n; i++)
        for (int64_t j = 0; j < dim; j++)
            f->sum2[j] += (double)h[(size_t)i * dim + j] * h[(size_t)i * dim + j];
    f->rows += rows->n;
}

static void test_dense_model(void)
{
    checkpoint ck;
    memra_err err = {{0}};
    if (checkpoint_open("models/memra-tiny.gguf", &ck, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    engine *e = load(&ck);
    if (!e) {
        checkpoint_close(&ck);
        return;
    }
    int64_t vocab = engine_config(e)->n_vocab, dim = engine_config(e)->dim;
    int32_t toks[N_TOK];
    make_tokens(toks, N_TOK, vocab);
    float *plain = xmalloc((size_t)N_TOK * (size_t)vocab * sizeof(float));
    float *with = xmalloc((size_t)N_TOK * (size_t)vocab * sizeof(float));
    run(e, toks, N_TOK, plain);

    imatrix_collector *c;
    CHECK_MSG(imatrix_collect_attach(e, &c, &err) == 0, "%s", err.msg);
    final_capture fc = {(int)engine_config(e)->n_layers, dim, xcalloc((size_t)dim, sizeof(double)),
                        0};
    engine_set_hidden_hook(e, capture_final, &fc);
    run(e, toks, N_TOK, with);
    engine_set_hidden_hook(e, NULL, NULL);
    CHECK_MSG(memcmp(plain, with, (size_t)N_TOK * (size_t)vocab * sizeof(float)) == 0,
              "collecting changed the logits");

    imatrix m;
    CHECK_MSG(imatrix_collect_result(c, 1, "tokens", &m, &err) == 0, "%s", err.msg);
    /* every 2-D tensor of the checkpoint is multiplied (the tied embedding
     * as the output head), and nothing else has an entry */
    int n2d = 0;
    for (int i = 0; i < ck.n_tensors; i++) {
        if (ck.tensors[i].n_dims != 2)
            continue;
        n2d++;
        const imatrix_entry *en = imatrix_find(&m, ck.tensors[i].name);
        CHECK_MSG(en != NULL, "no entry for %s", ck.tensors[i].name);
        if (!en)
            continue;
        CHECK_MSG(en->n_values == ck.tensors[i].shape[1], "%s: %lld values", en->name,
                  (long long)en->n_values);
        CHECK_MSG(en->n_calls == N_TOK, "%s: %d calls", en->name, (int)en->n_calls);
        int positive = 1;
        for (int64_t j = 0; j < en->n_values; j++)
            positive &= isfinite(en->values[j]) && en->values[j] > 0;
        CHECK_MSG(positive, "%s: a value is not positive", en->name);
        CHECK(imatrix_collect_rows(c, en->name, 0) == N_TOK);
    }
    CHECK_MSG(m.n_entries == n2d && n2d == 43, "%d entries, %d 2-D tensors", m.n_entries, n2d);

    const imatrix_entry *head = imatrix_find(&m, "token_embd.weight");
    CHECK(fc.rows == N_TOK);
    if (head && fc.rows == N_TOK)
        for (int64_t j = 0; j < dim; j++) {
            double want = fc.sum2[j] / N_TOK;
            CHECK_MSG(fabs(head->values[j] - want) <= 1e-6 * want, "head col %lld: %g vs %g",
                      (long long)j, (double)head->values[j], want);
        }
    const imatrix_entry *q = imatrix_find(&m, "blk.2.attn_q.weight"),
                        *k = imatrix_find(&m, "blk.2.attn_k.weight"),
                        *v = imatrix_find(&m, "blk.2.attn_v.weight");
    CHECK(q && k && v && memcmp(q->values, k->values, (size_t)dim * sizeof(float)) == 0 &&
          memcmp(q->values, v->values, (size_t)dim * sizeof(float)) == 0);
    const imatrix_entry *down = imatrix_find(&m, "blk.0.ffn_down.weight");
    CHECK(down && down->n_values == engine_config(e)->ffn_dim);
    CHECK(imatrix_collect_rows(c, "blk.0.ffn_down.weight", 1) == -1);
    CHECK(imatrix_collect_rows(c, "no.such.weight", 0) == -1);
    CHECK(imatrix_collect_status(c, &err) == 0);

    imatrix_free(&m);
    imatrix_collect_free(c);
    /* the engine has its own backend back and still runs the same */
    run(e, toks, N_TOK, with);
    CHECK(memcmp(plain, with, (size_t)N_TOK * (size_t)vocab * sizeof(float)) == 0);
    free(fc.sum2);
    free(plain);
    free(with);
    engine_free(e);
    checkpoint_close(&ck);
}

/* Collect over the same tokens; NULL on failure. */
static imatrix_collector *collect(const checkpoint *ck, engine **e_out, imatrix *m)
{
    memra_err err = {{0}};
    engine *e = load(ck);
    *e_out = e;
    if (!e)
        return NULL;
    imatrix_collector *c;
    if (imatrix_collect_attach(e, &c, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return NULL;
    }
    int32_t toks[N_TOK];
    make_tokens(toks, N_TOK, engine_config(e)->n_vocab);
    run(e, toks, N_TOK, NULL);
    if (imatrix_collect_result(c, 1, NULL, m, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        imatrix_collect_free(c);
        return NULL;
    }
    return c;
}

static void rm_tree(const char *path)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    CHECK(system(cmd) == 0);
}

static void test_moe_routing(void)
{
    char dir[1024], gguf[1100];
    mkdir(test_tmp_dir(), 0755);
    snprintf(dir, sizeof dir, "%s/imx-moe", test_tmp_dir());
    snprintf(gguf, sizeof gguf, "%s.gguf", dir);
    memra_err err = {{0}};
    convert_opts co = {.outtype = DT_F32, .n_threads = 2};
    checkpoint hf, gg;
    if (convert_random("tests/fixtures/configs/tiny-qwen3-moe.json", 3, dir, &co, &err) != 0 ||
        checkpoint_open(dir, &hf, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    convert_opts keep = {.outtype = DT_INVALID, .n_threads = 2};
    if (convert_checkpoint(&hf, gguf, &keep, &err) != 0 || checkpoint_open(gguf, &gg, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        checkpoint_close(&hf);
        return;
    }
    engine *eh, *eg;
    imatrix mh, mg;
    imatrix_collector *ch = collect(&hf, &eh, &mh), *cg = collect(&gg, &eg, &mg);
    if (ch && cg) {
        const model_config *cf = engine_config(eh);
        int ne = (int)cf->n_experts, nu = (int)cf->n_experts_used;
        int64_t dim = cf->dim, ffn = cf->moe_ffn_dim;
        /* HF names came out as the GGUF ones, with the same statistics */
        CHECK_MSG(mh.n_entries == mg.n_entries, "%d vs %d entries", mh.n_entries, mg.n_entries);
        for (int i = 0; i < mg.n_entries; i++) {
            const imatrix_entry *a = &mg.entries[i], *b = imatrix_find(&mh, a->name);
            CHECK_MSG(b && b->n_values == a->n_values && b->n_calls == a->n_calls,
                      "%s differs between HF and GGUF", a->name);
            if (b)
                CHECK_MSG(memcmp(a->values, b->values, (size_t)a->n_values * sizeof(float)) == 0,
                          "%s values differ between HF and GGUF", a->name);
        }
        for (int l = 0; l < (int)cf->n_layers; l++) {
            char rn[64], gn[64], un[64], dn[64];
            snprintf(rn, sizeof rn, "blk.%d.ffn_gate_inp.weight", l);
            snprintf(gn, sizeof gn, "blk.%d.ffn_gate_exps.weight", l);
            snprintf(un, sizeof un, "blk.%d.ffn_up_exps.weight", l);
            snprintf(dn, sizeof dn, "blk.%d.ffn_down_exps.weight", l);
            const imatrix_entry *r = imatrix_find(&mg, rn), *g = imatrix_find(&mg, gn),
                                *u = imatrix_find(&mg, un), *d = imatrix_find(&mg, dn);
            CHECK_MSG(r && g && u && d, "layer %d: an expert entry is missing", l);
            if (!(r && g && u && d))
                continue;
            CHECK(r->n_values == dim && r->n_calls == N_TOK);
            CHECK(g->n_values == ne * dim && u->n_values == ne * dim && d->n_values == ne * ffn);
            /* every token reaches n_used experts, and the experts' inputs
             * add up to n_used times the router's */
            int64_t total = 0;
            for (int x = 0; x < ne; x++)
                total += imatrix_collect_rows(cg, gn, x);
            CHECK_MSG(total == (int64_t)nu * N_TOK, "layer %d: %lld routed rows", l,
                      (long long)total);
            CHECK(imatrix_collect_rows(cg, gn, ne) == -1);
            for (int64_t j = 0; j < dim; j++) {
                double sum = 0;
                for (int x = 0; x < ne; x++) {
                    int64_t rows = imatrix_collect_rows(cg, gn, x);
                    sum += rows > 0 ? (double)rows * g->values[x * dim + j] : 0;
                    CHECK(g->values[x * dim + j] == u->values[x * dim + j]);
                }
                double want = (double)nu * N_TOK * r->values[j];
                CHECK_MSG(fabs(sum - want) <= 1e-5 * want, "layer %d col %lld: %g vs %g", l,
                          (long long)j, sum, want);
            }
            int ok = 1;
            for (int64_t j = 0; j < d->n_values; j++)
                ok &= isfinite(d->values[j]) && d->values[j] > 0;
            CHECK_MSG(ok, "%s: a value is not positive", dn);
        }
    }
    if (ch) {
        imatrix_free(&mh);
        imatrix_collect_free(ch);
    }
    if (cg) {
        imatrix_free(&mg);
        imatrix_collect_free(cg);
    }
    engine_free(eh);
    engine_free(eg);
    checkpoint_close(&hf);
    checkpoint_close(&gg);
    rm_tree(dir);
    rm_tree(gguf);
}

/* gemma4 dense collects (per-layer embeddings, shared K/V, V from K: the
 * same projections through the wrapped ops); its MoE, whose router reads an
 * input of its own, is refused naming the router, not collected wrongly. */
static void test_gemma4(void)
{
    static const char *const cfgs[2] = {"tiny-gemma4.json", "tiny-gemma4-moe.json"};
    for (int i = 0; i < 2; i++) {
        char cfg[256], dir[1024];
        snprintf(cfg, sizeof cfg, "tests/fixtures/configs/%s", cfgs[i]);
        mkdir(test_tmp_dir(), 0755);
        snprintf(dir, sizeof dir, "%s/imx-%s", test_tmp_dir(), cfgs[i]);
        memra_err err = {{0}};
        convert_opts co = {.outtype = DT_F32, .n_threads = 2};
        checkpoint ck;
        if (convert_random(cfg, 3, dir, &co, &err) != 0 || checkpoint_open(dir, &ck, &err) != 0) {
            CHECK_MSG(0, "%s: %s", cfgs[i], err.msg);
            continue;
        }
        engine *e = load(&ck);
        imatrix_collector *c;
        if (e && imatrix_collect_attach(e, &c, &err) == 0) {
            int32_t toks[N_TOK];
            make_tokens(toks, N_TOK, engine_config(e)->n_vocab);
            run(e, toks, N_TOK, NULL);
            imatrix m;
            int rc = imatrix_collect_result(c, 1, NULL, &m, &err);
            if (i == 0) {
                CHECK_MSG(rc == 0, "%s", err.msg);
                if (rc == 0) {
                    const imatrix_entry *p = imatrix_find(&m, "blk.0.inp_gate.weight");
                    const imatrix_entry *v = imatrix_find(&m, "blk.2.attn_v.weight");
                    CHECK_MSG(p && p->n_calls == N_TOK, "blk.0.inp_gate.weight not collected");
                    CHECK_MSG(!v, "blk.2 (V from K) has an attn_v entry");
                    imatrix_free(&m);
                }
            } else {
                CHECK_MSG(rc == -1 && strstr(err.msg, "routed on an input of their own") &&
                              strstr(err.msg, "router.proj"),
                          "%s", rc ? err.msg : "collected");
            }
            imatrix_collect_free(c);
        } else {
            CHECK_MSG(0, "%s: %s", cfgs[i], err.msg);
        }
        engine_free(e);
        checkpoint_close(&ck);
        rm_tree(dir);
    }
}

static void test_nothing_collected(void)
{
    checkpoint ck;
    memra_err err = {{0}};
    if (checkpoint_open("models/memra-tiny-draft.gguf", &ck, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    engine *e = load(&ck);
    imatrix_collector *c;
    if (e && imatrix_collect_attach(e, &c, &err) == 0) {
        imatrix m;
        CHECK(imatrix_collect_result(c, 0, NULL, &m, &err) == -1 &&
              strstr(err.msg, "no weight multiplications"));
        CHECK(m.n_entries == 0 && m.entries == NULL);
        imatrix_collect_free(c);
    }
    engine_free(e);
    checkpoint_close(&ck);
}

TEST_MAIN(TEST_CASE(test_dense_model), TEST_CASE(test_moe_routing), TEST_CASE(test_gemma4),
          TEST_CASE(test_nothing_collected))

/* Embeddings work in the scheduler (serve_model.c), driven without HTTP:
 * a request of more inputs than slots runs them a few at a time and ends
 * with every vector; its admission weight is min(inputs, sessions); each
 * input's vector is the one it gets alone (chunking and neighbours change
 * nothing); a cancelled request leaves its slots and the queue; shutdown
 * ends what waits. memra-tiny served with --task embed, one-token prefill
 * chunks so an input spans many ticks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "serve/serve_model.h"
#include "serve/serve_req.h"
#include "test.h"

static serve_model *model;

static int setup(void)
{
    if (model)
        return 0;
    serve_model_opts o = {.alias = "emb", .path = "models/memra-tiny.gguf", .max_sessions = 2,
                          .max_queue = 0, .n_threads = 1, .backend = BK_CPU,
                          .prefill_chunk = 1, .task = SERVE_TASK_EMBED};
    memra_err err;
    if (serve_model_load(&o, &model, &err) != 0) {
        fprintf(stderr, "  cannot load memra-tiny: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Input i: 3 + 5 i tokens of (7 i + k) % 200 + 1. */
static serve_req *make_work(int n_inputs, int first)
{
    serve_req *r = serve_req_new();
    r->work = serve_work_new(SERVE_WORK_EMBED, n_inputs, serve_model_dim(model));
    for (int i = 0; i < n_inputs; i++) {
        int in = first + i;
        size_t n = 3 + 5 * (size_t)in;
        r->work->ids[i] = xmalloc(n * sizeof(int32_t));
        for (size_t k = 0; k < n; k++)
            r->work->ids[i][k] = (int32_t)((7 * in + (int)k) % 200 + 1);
        r->work->n_ids[i] = n;
        r->work->n_tokens += n;
    }
    return r;
}

static serve_req_view wait_end(serve_req *r, int timeout_ms)
{
    strbuf text;
    sb_init(&text);
    serve_req_view v;
    for (int t = 0;; t += 5) {
        serve_req_poll(r, &text, &v, NULL, NULL);
        if (v.finish != SERVE_FINISH_NONE || t >= timeout_ms)
            break;
        sleep_ms(5);
    }
    sb_free(&text);
    return v;
}

static int wait_counts(int running, int waiting, int timeout_ms)
{
    serve_model_stats s;
    for (int t = 0;; t += 5) {
        serve_model_get_stats(model, &s);
        if (s.running == running && s.waiting == waiting)
            return 1;
        if (t >= timeout_ms)
            return 0;
        sleep_ms(5);
    }
}

static void test_more_inputs_than_slots(void)
{
    if (setup() != 0) {
        CHECK(!"model loads");
        return;
    }
    CHECK(serve_model_task(model) == SERVE_TASK_EMBED);
    serve_model_stats s0, s;
    serve_model_get_stats(model, &s0);
    int64_t dim = serve_model_dim(model);
    serve_req *r = make_work(5, 0), *full = make_work(1, 0);
    CHECK(serve_model_submit(model, r) == 0);     /* 5 inputs weigh 2 (the sessions) */
    CHECK(serve_model_submit(model, full) == -1); /* no queue: full */
    serve_req_view v = wait_end(r, 20000);
    CHECK(v.finish == SERVE_FINISH_STOP);
    for (int i = 0; i < 5; i++) {
        double ss = 0;
        for (int64_t k = 0; k < dim; k++)
            ss += (double)r->work->vecs[i * dim + k] * r->work->vecs[i * dim + k];
        CHECK_MSG(fabs(ss - 1) < 1e-5, "input %d: |v|^2 = %g", i, ss);
    }
    CHECK(wait_counts(0, 0, 2000));
    serve_model_get_stats(model, &s);
    CHECK(s.work_ok == s0.work_ok + 1 && s.work_inputs == s0.work_inputs + 5);
    CHECK(s.prompt_tokens == s0.prompt_tokens + r->work->n_tokens);
    /* each input alone gives the same bits as among the others */
    for (int i = 0; i < 5; i++) {
        serve_req *one = make_work(1, i);
        CHECK(serve_model_submit(model, one) == 0);
        CHECK(wait_end(one, 20000).finish == SERVE_FINISH_STOP);
        CHECK_MSG(!memcmp(one->work->vecs, r->work->vecs + i * dim, (size_t)dim * sizeof(float)),
                  "input %d differs alone", i);
        serve_req_unref(one);
    }
    serve_req_unref(r);
    serve_req_unref(full);
}

static void test_cancel(void)
{
    if (setup() != 0) {
        CHECK(!"model loads");
        return;
    }
    serve_model_stats s0, s;
    serve_model_get_stats(model, &s0);
    /* 8 inputs of up to 38 tokens, one token a tick: running for a while */
    serve_req *r = make_work(8, 0);
    CHECK(serve_model_submit(model, r) == 0);
    CHECK(wait_counts(2, 0, 2000)); /* two inputs in the slots, the rest at the queue's head */
    serve_req_cancel(r);
    CHECK(wait_counts(0, 0, 2000));
    serve_model_get_stats(model, &s);
    CHECK(s.work_cancelled == s0.work_cancelled + 1 && s.work_ok == s0.work_ok);
    serve_req_view v = wait_end(r, 10);
    CHECK(v.cancelled && v.finish == SERVE_FINISH_NONE);
    /* the slots are free for the next request */
    serve_req *next = make_work(1, 2);
    CHECK(serve_model_submit(model, next) == 0);
    CHECK(wait_end(next, 20000).finish == SERVE_FINISH_STOP);
    serve_req_unref(next);
    serve_req_unref(r);
}

static void test_shutdown(void)
{
    if (setup() != 0) {
        CHECK(!"model loads");
        return;
    }
    serve_req *r = make_work(8, 0);
    CHECK(serve_model_submit(model, r) == 0);
    CHECK(wait_counts(2, 0, 2000));
    serve_model_free(model);
    model = NULL;
    serve_req_view v = wait_end(r, 10);
    CHECK(v.finish == SERVE_FINISH_ERROR && strstr(v.error, SERVE_SHUTDOWN_WHY));
    serve_req_unref(r);
}

TEST_MAIN(TEST_CASE(test_more_inputs_than_slots), TEST_CASE(test_cancel),
          TEST_CASE(test_shutdown))

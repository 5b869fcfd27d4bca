/* The scheduler's admission queue and request lifecycle (serve_model.c,
 * serve_req.c), driven without HTTP: capacity (sessions + queue, then
 * refusal), FIFO order, a cancelled request leaving its slot or the queue
 * at the next tick, a client hang-up seen on its socket while parked,
 * ignore_eos, and shutdown ending whatever is left. memra-tiny (about 5 ms
 * a token here) with ignore_eos keeps a long request running for seconds,
 * so the checks made meanwhile do not race its end. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "serve/serve_model.h"
#include "serve/serve_req.h"
#include "test.h"

static serve_model *model;

static int setup(void)
{
    if (model)
        return 0;
    serve_model_opts o = {.alias = "chat", .path = "models/memra-tiny.gguf", .max_sessions = 1,
                          .max_queue = 1, .n_threads = 1, .backend = BK_CPU};
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

/* A greedy request over a short prompt. */
static serve_req *make_req(int32_t max_tokens, int ignore_eos)
{
    serve_req *r = serve_req_new();
    static const int32_t ids[] = {1, 100, 200, 300};
    r->prompt = xmalloc(sizeof ids);
    memcpy(r->prompt, ids, sizeof ids);
    r->n_prompt = 4;
    r->max_tokens = max_tokens;
    r->sampling.temperature = 0;
    r->ignore_eos = ignore_eos;
    return r;
}

/* Wait until r ends (or timeout): its view. */
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

/* Wait until the model's stats say running/waiting (or timeout). */
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

static size_t generated(serve_req *r)
{
    pthread_mutex_lock(&r->mu);
    size_t n = r->choice[0].n_generated;
    pthread_mutex_unlock(&r->mu);
    return n;
}

static void test_capacity_and_fifo(void)
{
    if (setup() != 0) {
        CHECK(!"model loads");
        return;
    }
    serve_model_stats s0, s;
    serve_model_get_stats(model, &s0);
    serve_req *r1 = make_req(400, 1), *r2 = make_req(3, 1), *r3 = make_req(3, 1);
    CHECK(serve_model_submit(model, r1) == 0);
    CHECK(serve_model_submit(model, r2) == 0);
    CHECK(serve_model_submit(model, r3) == -1); /* one session + one queued: full */
    CHECK(wait_counts(1, 1, 2000));
    /* r1 holds the only session: r2 waits, untouched, while r1 generates */
    for (int t = 0; t < 2000 && generated(r1) < 3; t += 5)
        sleep_ms(5);
    CHECK(generated(r1) >= 3 && generated(r2) == 0);
    serve_req_view v2 = wait_end(r2, 50);
    CHECK(v2.finish == SERVE_FINISH_NONE);
    /* r1's client goes: its session goes to r2 at the next tick */
    serve_req_cancel(r1);
    v2 = wait_end(r2, 5000);
    CHECK(v2.finish == SERVE_FINISH_LENGTH && v2.n_generated == 3);
    CHECK(wait_counts(0, 0, 2000));
    serve_model_get_stats(model, &s);
    CHECK(s.cancelled == s0.cancelled + 1 && s.finished_length == s0.finished_length + 1);
    CHECK(generated(r1) < 400); /* cut short, never ended */
    serve_req_view v1 = wait_end(r1, 0);
    CHECK(v1.finish == SERVE_FINISH_NONE && v1.cancelled);
    /* room again */
    CHECK(serve_model_submit(model, r3) == 0);
    serve_req_view v3 = wait_end(r3, 5000);
    CHECK(v3.finish == SERVE_FINISH_LENGTH && v3.n_generated == 3);
    serve_req_unref(r1);
    serve_req_unref(r2);
    serve_req_unref(r3);
}

static void test_cancel_in_queue(void)
{
    if (setup() != 0)
        return;
    serve_model_stats s0, s;
    serve_model_get_stats(model, &s0);
    serve_req *r1 = make_req(400, 1), *r2 = make_req(3, 1);
    CHECK(serve_model_submit(model, r1) == 0 && serve_model_submit(model, r2) == 0);
    CHECK(wait_counts(1, 1, 2000));
    serve_req_cancel(r2);
    /* the queued request leaves at the next tick, while r1 still runs */
    CHECK(wait_counts(1, 0, 2000));
    CHECK(wait_end(r1, 0).finish == SERVE_FINISH_NONE);
    serve_model_get_stats(model, &s);
    CHECK(s.cancelled == s0.cancelled + 1);
    CHECK(generated(r2) == 0);
    serve_req_cancel(r1);
    CHECK(wait_counts(0, 0, 2000));
    serve_req_unref(r1);
    serve_req_unref(r2);
}

static atomic_int wakes;
static void count_wake(void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&wakes, 1);
}
static void park_noop(void *ctx) { (void)ctx; }

static void test_hangup_seen_on_the_socket(void)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    serve_req *r = make_req(5, 0);
    r->watch_fd = sv[0];
    r->wake = count_wake;
    atomic_store(&wakes, 0);
    /* not parked yet: the socket is not looked at, whatever it says */
    close(sv[1]);
    CHECK(serve_req_check_client(r) == 0 && atomic_load(&wakes) == 0);
    serve_req_unref(r);
    close(sv[0]);

    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    r = make_req(5, 0);
    r->watch_fd = sv[0];
    r->wake = count_wake;
    strbuf text;
    sb_init(&text);
    serve_req_view v;
    CHECK(serve_req_poll(r, &text, &v, park_noop, NULL) == 1); /* parked */
    CHECK(serve_req_check_client(r) == 0);
    CHECK(write(sv[1], "GET", 3) == 3); /* a pipelined request is no hang-up */
    CHECK(serve_req_check_client(r) == 0 && atomic_load(&wakes) == 0);
    shutdown(sv[1], SHUT_WR); /* the peer's FIN */
    CHECK(serve_req_check_client(r) == 1);
    CHECK(atomic_load(&wakes) == 1); /* woken once, so the HTTP side closes */
    CHECK(serve_req_check_client(r) == 1 && atomic_load(&wakes) == 1);
    /* a cancelled request never parks again */
    CHECK(serve_req_poll(r, &text, &v, park_noop, NULL) == 0);
    CHECK(v.cancelled && v.finish == SERVE_FINISH_NONE);
    sb_free(&text);
    serve_req_unref(r);
    close(sv[0]);
    close(sv[1]);
}

/* A request whose client hangs up while it generates, and one while it
 * waits in the queue: both freed by the engine thread, both woken. */
static void test_hangup_through_the_engine(void)
{
    if (setup() != 0)
        return;
    serve_model_stats s0, s;
    serve_model_get_stats(model, &s0);
    int a[2], b[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, a) == 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, b) == 0);
    serve_req *r1 = make_req(400, 1), *r2 = make_req(3, 1);
    r1->watch_fd = a[0];
    r2->watch_fd = b[0];
    r1->wake = r2->wake = count_wake;
    atomic_store(&wakes, 0);
    strbuf text;
    sb_init(&text);
    serve_req_view v;
    CHECK(serve_model_submit(model, r1) == 0 && serve_model_submit(model, r2) == 0);
    CHECK(serve_req_poll(r1, &text, &v, park_noop, NULL) == 1);
    CHECK(serve_req_poll(r2, &text, &v, park_noop, NULL) == 1);
    CHECK(wait_counts(1, 1, 2000));
    close(b[1]); /* the queued one hangs up */
    CHECK(wait_counts(1, 0, 2000));
    CHECK(atomic_load(&wakes) == 1);
    close(a[1]); /* then the running one */
    CHECK(wait_counts(0, 0, 2000));
    CHECK(atomic_load(&wakes) == 2);
    CHECK(generated(r1) < 400);
    serve_model_get_stats(model, &s);
    CHECK(s.cancelled == s0.cancelled + 2);
    sb_free(&text);
    serve_req_unref(r1);
    serve_req_unref(r2);
    close(a[0]);
    close(b[0]);
}

static void test_ignore_eos(void)
{
    if (setup() != 0)
        return;
    int32_t eos = tok_eos(serve_model_tokenizer(model));
    CHECK(eos >= 0);
    for (int ignore = 0; ignore <= 1; ignore++) {
        serve_req *r = make_req(6, ignore);
        r->bias = xmalloc(sizeof *r->bias);
        r->bias[0] = (sampler_logit_bias){eos, 100}; /* the end comes first */
        r->sampling.logit_bias = r->bias;
        r->sampling.n_logit_bias = 1;
        CHECK(serve_model_submit(model, r) == 0);
        serve_req_view v = wait_end(r, 5000);
        if (ignore)
            CHECK(v.finish == SERVE_FINISH_LENGTH && v.n_generated == 6);
        else
            CHECK(v.finish == SERVE_FINISH_STOP && v.n_generated == 1);
        serve_req_unref(r);
    }
}

static void test_shutdown_ends_the_rest(void)
{
    if (setup() != 0)
        return;
    serve_req *r1 = make_req(400, 1), *r2 = make_req(3, 1);
    CHECK(serve_model_submit(model, r1) == 0 && serve_model_submit(model, r2) == 0);
    CHECK(wait_counts(1, 1, 2000));
    serve_model_free(model);
    model = NULL;
    serve_req_view v1 = wait_end(r1, 0), v2 = wait_end(r2, 0);
    CHECK(v1.finish == SERVE_FINISH_ERROR && strstr(v1.error, "shutting down"));
    CHECK(v2.finish == SERVE_FINISH_ERROR && strstr(v2.error, "shutting down"));
    CHECK(v2.n_generated == 0);
    serve_req_unref(r1);
    serve_req_unref(r2);
}

/* Run r to its end on m, taking every choice's text and logprobs. */
static serve_req_view run_choices(serve_model *m, serve_req *r, serve_choice *got)
{
    serve_req_view v;
    for (int i = 0; i < SERVE_MAX_CHOICES; i++)
        serve_choice_init(&got[i]);
    CHECK(serve_model_submit(m, r) == 0);
    for (int t = 0; t < 20000; t += 5) {
        serve_req_poll_choices(r, got, &v, NULL, NULL);
        if (v.finish != SERVE_FINISH_NONE)
            break;
        sleep_ms(5);
    }
    return v;
}

/* n choices: one slot each (a request of more choices than sessions is
 * refused, one that does not fit yet waits whole), choice i sampled with
 * seed + i, each with its own log-probabilities. */
static void test_choices_and_logprobs(void)
{
    serve_model_opts o = {.alias = "three", .path = "models/memra-tiny.gguf", .max_sessions = 3,
                          .max_queue = 3, .n_threads = 1, .backend = BK_CPU};
    serve_model *m;
    memra_err err;
    if (serve_model_load(&o, &m, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    serve_req *big = make_req(4, 1);
    big->n_choices = 4;
    CHECK(serve_model_submit(m, big) == -1); /* more choices than sessions */
    serve_req_unref(big);

    serve_req *r = make_req(6, 1);
    r->n_choices = 3;
    r->sampling.temperature = 1;
    r->sampling.seed = 40;
    r->logprobs = 1;
    r->top_logprobs = 2;
    serve_choice got[SERVE_MAX_CHOICES], one[SERVE_MAX_CHOICES];
    serve_req_view v = run_choices(m, r, got);
    CHECK(v.finish == SERVE_FINISH_LENGTH && v.n_generated == 18);
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(got[i].n_lp == 6 && v.choice_finish[i] == SERVE_FINISH_LENGTH,
                  "choice %d: %zu entries", i, got[i].n_lp);
        for (size_t k = 0; k < got[i].n_lp; k++) {
            const serve_logprob *lp = &got[i].lp[k];
            CHECK(lp->n_top == 2 && lp->top[0].logprob >= lp->top[1].logprob &&
                  lp->tok.logprob <= 0 && lp->tok.logprob <= lp->top[0].logprob);
        }
    }
    /* choice 2 is the single request of seed 42, with or without logprobs */
    for (int with_lp = 0; with_lp < 2; with_lp++) {
        serve_req *s = make_req(6, 1);
        s->sampling.temperature = 1;
        s->sampling.seed = 42;
        s->logprobs = with_lp;
        serve_req_view vs = run_choices(m, s, one);
        CHECK(vs.finish == SERVE_FINISH_LENGTH);
        CHECK_MSG(one[0].text.len == got[2].text.len &&
                  !memcmp(sb_str(&one[0].text), sb_str(&got[2].text), one[0].text.len),
                  "seed 42 %s logprobs: '%s', choice 2: '%s'", with_lp ? "with" : "without",
                  sb_str(&one[0].text), sb_str(&got[2].text));
        if (with_lp)
            CHECK(one[0].n_lp == 6 && one[0].lp[3].tok.id == got[2].lp[3].tok.id &&
                  one[0].lp[3].tok.logprob == got[2].lp[3].tok.logprob);
        for (int i = 0; i < SERVE_MAX_CHOICES; i++)
            serve_choice_free(&one[i]);
        serve_req_unref(s);
    }
    for (int i = 0; i < SERVE_MAX_CHOICES; i++)
        serve_choice_free(&got[i]);
    serve_req_unref(r);
    serve_model_free(m);
}

TEST_MAIN(TEST_CASE(test_capacity_and_fifo), TEST_CASE(test_cancel_in_queue),
          TEST_CASE(test_hangup_seen_on_the_socket), TEST_CASE(test_hangup_through_the_engine),
          TEST_CASE(test_ignore_eos), TEST_CASE(test_choices_and_logprobs),
          TEST_CASE(test_shutdown_ends_the_rest))

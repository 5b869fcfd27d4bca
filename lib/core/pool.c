#include "core/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/check.h"
#include "core/cpus.h"

struct thread_pool {
    int n_threads; /* including the caller */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    /* The current job; generation changes each time one is posted. */
    unsigned long generation;
    pool_task_fn fn;
    void *ctx;
    int n_tasks;
    atomic_int next_task;
    int workers_busy;
    int shutting_down;
};

typedef struct {
    thread_pool *pool;
    int index;
} worker_arg;

static void drain_tasks(thread_pool *p, int thread_index)
{
    for (;;) {
        int i = atomic_fetch_add(&p->next_task, 1);
        if (i >= p->n_tasks)
            return;
        p->fn(p->ctx, i, thread_index);
    }
}

static void *worker_main(void *arg)
{
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    thread_pool *p = wa.pool;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->shutting_down && p->generation == seen)
            pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->shutting_down)
            break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        drain_tasks(p, wa.index);
        pthread_mutex_lock(&p->mu);
        if (--p->workers_busy == 0)
            pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

thread_pool *pool_create(int n_threads)
{
    if (n_threads <= 0)
        n_threads = cpus_physical_cores("/sys");
    thread_pool *p = xcalloc(1, sizeof *p);
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    atomic_init(&p->next_task, 0);
    p->threads = xcalloc((size_t)n_threads, sizeof(pthread_t));
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = xmalloc(sizeof *wa);
        wa->pool = p;
        wa->index = i;
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0)
            memra_assert_fail("pthread_create", __FILE__, __LINE__);
    }
    return p;
}

void pool_destroy(thread_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->shutting_down = 1;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    free(p->threads);
    free(p);
}

int pool_size(const thread_pool *p) { return p ? p->n_threads : 1; }

void pool_run(thread_pool *p, int n_tasks, pool_task_fn fn, void *ctx)
{
    if (n_tasks <= 0)
        return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int i = 0; i < n_tasks; i++)
            fn(ctx, i, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store(&p->next_task, 0);
    p->workers_busy = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->mu);
    drain_tasks(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->workers_busy > 0)
        pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

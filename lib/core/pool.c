/* The pool: workers that spin a short while after each job before they
 * sleep, so the jobs of one forward step (dozens of products a few
 * microseconds apart) reach threads that are awake. A condition variable
 * wakes a worker that has gone to sleep, and the caller sleeps the same way
 * when the workers take long; the handshakes are Dekker-style (each side
 * writes its flag, then reads the other's, both sequentially consistent),
 * so a wake-up is never lost. */
#include "core/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/check.h"
#include "core/cpus.h"

/* Pause iterations a worker spins for the next job before it sleeps, and
 * the caller for the workers before it sleeps: tens to a couple of
 * hundred microseconds, as long as the core's pause takes (about 10 to 140
 * cycles on x86). Long enough to bridge the gap between two products of a
 * decode step, short enough that an idle pool sleeps almost at once. */
enum { POOL_SPIN = 4096 };

struct thread_pool {
    int n_threads; /* including the caller */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    /* The current job: its fields are written before generation changes
     * (release) and read after a worker sees the change (acquire). */
    atomic_ulong generation;
    pool_task_fn fn;
    void *ctx;
    int n_tasks;
    atomic_int next_task;
    atomic_int workers_busy;  /* workers yet to finish the current job */
    atomic_int sleepers;      /* workers waiting on work_cv */
    atomic_int caller_asleep; /* the caller waits on done_cv */
    atomic_int shutting_down;
};

typedef struct {
    thread_pool *pool;
    int index;
} worker_arg;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void drain_tasks(thread_pool *p, int thread_index)
{
    for (;;) {
        int i = atomic_fetch_add(&p->next_task, 1);
        if (i >= p->n_tasks)
            return;
        p->fn(p->ctx, i, thread_index);
    }
}

/* The next generation after `seen`, or the shutdown: spins, then sleeps. */
static unsigned long wait_for_job(thread_pool *p, unsigned long seen)
{
    for (int i = 0; i < POOL_SPIN; i++) {
        unsigned long g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g != seen || atomic_load(&p->shutting_down))
            return g;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    unsigned long g;
    while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->shutting_down))
        pthread_cond_wait(&p->work_cv, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *arg)
{
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    thread_pool *p = wa.pool;
    unsigned long seen = 0;
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load(&p->shutting_down))
            break;
        drain_tasks(p, wa.index);
        if (atomic_fetch_sub(&p->workers_busy, 1) == 1 && atomic_load(&p->caller_asleep)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
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
    atomic_init(&p->generation, 0);
    atomic_init(&p->next_task, 0);
    atomic_init(&p->workers_busy, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_asleep, 0);
    atomic_init(&p->shutting_down, 0);
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
    atomic_store(&p->shutting_down, 1);
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
    /* Every worker finished the last job (the caller waited for them), so
     * the fields are free to write. */
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next_task, 0, memory_order_relaxed);
    atomic_store_explicit(&p->workers_busy, p->n_threads - 1, memory_order_relaxed);
    atomic_fetch_add(&p->generation, 1); /* seq_cst: publishes the fields */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->work_cv);
        pthread_mutex_unlock(&p->mu);
    }
    drain_tasks(p, 0);
    for (int i = 0; i < POOL_SPIN; i++) {
        if (atomic_load_explicit(&p->workers_busy, memory_order_acquire) == 0)
            return;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_asleep, 1);
    while (atomic_load(&p->workers_busy) > 0)
        pthread_cond_wait(&p->done_cv, &p->mu);
    atomic_store(&p->caller_asleep, 0);
    pthread_mutex_unlock(&p->mu);
}

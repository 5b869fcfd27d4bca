/* A fixed pool of worker threads that runs parallel-for jobs: the caller
 * hands out `n_tasks` indices and blocks until every one has run. The
 * calling thread works too, so a pool of 1 thread runs inline. */
#ifndef MEMRA_CORE_POOL_H
#define MEMRA_CORE_POOL_H

typedef struct thread_pool thread_pool;

typedef void (*pool_task_fn)(void *ctx, int task_index, int thread_index);

/* n_threads <= 0 means one per physical core (core/cpus.h). */
thread_pool *pool_create(int n_threads);
void pool_destroy(thread_pool *p);
int pool_size(const thread_pool *p);
/* Run fn(ctx, i, thread) for i in [0, n_tasks); returns when all are done.
 * Tasks are handed out dynamically, so uneven tasks balance themselves. */
void pool_run(thread_pool *p, int n_tasks, pool_task_fn fn, void *ctx);

#endif

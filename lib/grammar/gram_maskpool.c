/* The mask pool (gram_maskpool.h): persistent workers woken per call by a
 * generation counter; work items are taken with an atomic index, so a
 * slow mask (a fresh walk of the whole trie) never holds back the others. */
#include "grammar/gram_maskpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/check.h"

struct gram_maskpool {
    int n_workers; /* threads besides the caller */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen;  /* under mu: bumped per call */
    int busy;      /* under mu: workers still in the current call */
    int stop;
    /* the current call */
    gram_state *const *states;
    const gram_vocab *vocab;
    uint32_t *const *masks;
    int *counts;
    int n;
    atomic_int next;
};

static void drain(gram_maskpool *p)
{
    for (int i; (i = atomic_fetch_add(&p->next, 1)) < p->n;)
        p->counts[i] = gram_mask(p->states[i], p->vocab, p->masks[i]);
}

static void *worker(void *arg)
{
    gram_maskpool *p = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->stop)
            break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        drain(p);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

gram_maskpool *gram_maskpool_new(int n_threads)
{
    gram_maskpool *p = xcalloc(1, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    int want = n_threads > 1 ? n_threads - 1 : 0;
    p->threads = xcalloc((size_t)(want ? want : 1), sizeof *p->threads);
    for (int i = 0; i < want; i++) {
        if (pthread_create(&p->threads[i], NULL, worker, p) != 0) {
            gram_maskpool_free(p);
            return NULL;
        }
        p->n_workers++;
    }
    return p;
}

void gram_maskpool_free(gram_maskpool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_workers; i++)
        pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p);
}

void gram_maskpool_masks(gram_maskpool *p, gram_state *const *states, const gram_vocab *v,
                     uint32_t *const *masks, int *counts, int n)
{
    if (!p || p->n_workers == 0 || n < 2) {
        for (int i = 0; i < n; i++)
            counts[i] = gram_mask(states[i], v, masks[i]);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->states = states;
    p->vocab = v;
    p->masks = masks;
    p->counts = counts;
    p->n = n;
    atomic_store(&p->next, 0);
    p->busy = p->n_workers;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    drain(p);
    pthread_mutex_lock(&p->mu);
    while (p->busy > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/*
 * pool.c - see pool.h.  One run at a time: the caller publishes (fn, arg)
 * and bumps a generation counter under the mutex; workers that see the new
 * generation run fn and count themselves out; the caller runs its share as
 * thread 0 and waits for the count to reach zero.  Spinning keeps the
 * hand-over in the microseconds a 1-token layer needs; after a while workers
 * block on the condition variable so an idle context costs nothing.
 */
#include "common/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

/* Spins of ~20-60 ns (pause): a worker waits ~50-100 us for the next run
 * before it blocks, the caller ~5-10 us before it yields its CPU to the
 * workers it waits for (on a busy machine they may share one). */
enum { SPIN_WORKER = 3000, SPIN_CALLER = 300 };

typedef struct worker_arg {
    moeq__pool *pool;
    int tid;
} worker_arg;

struct moeq__pool {
    int n;
    int started; /* workers created */
    pthread_t *tids;
    worker_arg *args;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;
    atomic_int pending;
    atomic_bool stop;
    moeq__pool_fn fn; /* written only while no worker runs */
    void *arg;
};

static void *worker_main(void *vp) {
    worker_arg *wa = vp;
    moeq__pool *p = wa->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
        for (int i = 0; g == seen && i < SPIN_WORKER; i++) {
            MOEQ__CPU_RELAX();
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
                   !atomic_load_explicit(&p->stop, memory_order_acquire)) {
                pthread_cond_wait(&p->cv, &p->mu);
            }
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
        seen = g;
        p->fn(p->arg, wa->tid, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
}

static void stop_workers(moeq__pool *p) {
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->stop, true, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++) pthread_join(p->tids[i], NULL);
    p->started = 0;
}

moeq__pool *moeq__pool_create(int threads, moeq_status *st) {
    *st = MOEQ_STATUS_NOMEM;
    moeq__pool *p = moeq__calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = threads < 1 ? 1 : threads;
    atomic_init(&p->gen, 0u);
    atomic_init(&p->pending, 0);
    atomic_init(&p->stop, false);
    if (p->n == 1) {
        *st = MOEQ_STATUS_OK;
        return p;
    }
    p->tids = moeq__calloc((size_t)p->n - 1, sizeof *p->tids);
    p->args = moeq__calloc((size_t)p->n - 1, sizeof *p->args);
    if (!p->tids || !p->args) goto fail;
    if (pthread_mutex_init(&p->mu, NULL) != 0) goto fail;
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        goto fail;
    }
    for (int i = 0; i < p->n - 1; i++) {
        p->args[i].pool = p;
        p->args[i].tid = i + 1;
        if (pthread_create(&p->tids[i], NULL, worker_main, &p->args[i]) != 0) {
            stop_workers(p);
            pthread_cond_destroy(&p->cv);
            pthread_mutex_destroy(&p->mu);
            goto fail;
        }
        p->started++;
    }
    *st = MOEQ_STATUS_OK;
    return p;
fail:
    moeq__free(p->tids);
    moeq__free(p->args);
    moeq__free(p);
    return NULL;
}

void moeq__pool_destroy(moeq__pool *p) {
    if (!p) return;
    if (p->n > 1) {
        stop_workers(p);
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
    }
    moeq__free(p->tids);
    moeq__free(p->args);
    moeq__free(p);
}

int moeq__pool_threads(const moeq__pool *p) {
    return p ? p->n : 1;
}

void moeq__pool_run(moeq__pool *p, moeq__pool_fn fn, void *arg) {
    if (!p || p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1u, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    for (int i = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; i++) {
        if (i < SPIN_CALLER) {
            MOEQ__CPU_RELAX();
        } else {
            sched_yield();
        }
    }
}

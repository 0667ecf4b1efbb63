/*
 * ep_threads.h - a moeq_ep_comm whose ranks are threads of one process, for
 * the expert-parallel tests that run without MPI (check_ep.c).  Collectives
 * meet at a barrier; a rank that never arrives makes the others fail after
 * EP_THREADS_TIMEOUT_S seconds instead of hanging the test.
 *
 *     ep_world w;
 *     ep_world_init(&w, 4);
 *     moeq_ep_comm c = ep_world_comm(&w, rank);   // in each rank's thread
 */
#ifndef MOEQ_EP_THREADS_H
#define MOEQ_EP_THREADS_H

#include "moeq/moeq_ep.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define EP_THREADS_MAX       8
#define EP_THREADS_TIMEOUT_S 60

typedef struct ep_world ep_world;

typedef struct ep_rank {
    ep_world *w;
    int32_t rank;
} ep_rank;

struct ep_world {
    int32_t size;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t arrived;
    uint32_t gen;
    bool broken; /* a barrier timed out: every later call fails */
    ep_rank ranks[EP_THREADS_MAX];
    /* what each rank posted for the collective in progress */
    const uint8_t *send[EP_THREADS_MAX];
    const int64_t *sc[EP_THREADS_MAX], *sd[EP_THREADS_MAX];
    int32_t vals[EP_THREADS_MAX][16];
    uint64_t calls[EP_THREADS_MAX]; /* collectives each rank made */
};

static inline void ep_world_init(ep_world *w, int32_t size) {
    memset(w, 0, sizeof *w);
    w->size = size;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    for (int32_t r = 0; r < size; r++) {
        w->ranks[r].w = w;
        w->ranks[r].rank = r;
    }
}

static inline void ep_world_destroy(ep_world *w) {
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

static inline moeq_status ep_barrier_wait(ep_world *w, moeq_error *err) {
    pthread_mutex_lock(&w->mu);
    uint32_t gen = w->gen;
    if (++w->arrived == w->size) {
        w->arrived = 0;
        w->gen++;
        pthread_cond_broadcast(&w->cv);
    } else {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += EP_THREADS_TIMEOUT_S;
        while (w->gen == gen && !w->broken) {
            if (pthread_cond_timedwait(&w->cv, &w->mu, &until) == ETIMEDOUT) {
                w->broken = true;
                pthread_cond_broadcast(&w->cv);
            }
        }
    }
    bool broken = w->broken;
    pthread_mutex_unlock(&w->mu);
    if (broken) {
        if (err) {
            err->code = MOEQ_STATUS_INTERNAL;
            snprintf(err->message, sizeof err->message,
                     "thread world: a rank did not reach the collective within %d s",
                     EP_THREADS_TIMEOUT_S);
        }
        return MOEQ_STATUS_INTERNAL;
    }
    return MOEQ_STATUS_OK;
}

static inline moeq_status ep_threads_alltoallv(void *user, const void *send, const int64_t *sc,
                                               const int64_t *sd, void *recv, const int64_t *rc,
                                               const int64_t *rd, moeq_error *err) {
    ep_rank *me = user;
    ep_world *w = me->w;
    const int32_t r0 = me->rank;
    w->send[r0] = send;
    w->sc[r0] = sc;
    w->sd[r0] = sd;
    w->calls[r0]++;
    moeq_status st = ep_barrier_wait(w, err);
    if (st != MOEQ_STATUS_OK) return st;
    moeq_status bad = MOEQ_STATUS_OK;
    for (int32_t r = 0; r < w->size; r++) {
        if (w->sc[r][r0] != rc[r]) {
            if (err) {
                err->code = MOEQ_STATUS_INTERNAL;
                snprintf(err->message, sizeof err->message,
                         "thread world: rank %d sends %lld bytes to rank %d, which expects %lld",
                         (int)r, (long long)w->sc[r][r0], (int)r0, (long long)rc[r]);
            }
            bad = MOEQ_STATUS_INTERNAL;
            continue;
        }
        if (rc[r] > 0) memcpy((uint8_t *)recv + rd[r], w->send[r] + w->sd[r][r0], (size_t)rc[r]);
    }
    st = ep_barrier_wait(w, err); /* senders keep their buffers until every copy is done */
    return st != MOEQ_STATUS_OK ? st : bad;
}

static inline moeq_status ep_threads_allreduce(void *user, int32_t *vals, int32_t n, int32_t op,
                                               moeq_error *err) {
    ep_rank *me = user;
    ep_world *w = me->w;
    if (n < 0 || n > 16) {
        if (err) {
            err->code = MOEQ_STATUS_INVALID_ARG;
            snprintf(err->message, sizeof err->message, "thread world: n is %d", (int)n);
        }
        return MOEQ_STATUS_INVALID_ARG;
    }
    memcpy(w->vals[me->rank], vals, sizeof(int32_t) * (size_t)n);
    w->calls[me->rank]++;
    moeq_status st = ep_barrier_wait(w, err);
    if (st != MOEQ_STATUS_OK) return st;
    for (int32_t i = 0; i < n; i++) {
        int32_t v = w->vals[0][i];
        for (int32_t r = 1; r < w->size; r++) {
            int32_t x = w->vals[r][i];
            v = op == MOEQ_EP_REDUCE_MAX ? (x > v ? x : v) : (x < v ? x : v);
        }
        vals[i] = v;
    }
    return ep_barrier_wait(w, err);
}

static inline moeq_status ep_threads_barrier(void *user, moeq_error *err) {
    ep_rank *me = user;
    return ep_barrier_wait(me->w, err);
}

static inline moeq_ep_comm ep_world_comm(ep_world *w, int32_t rank) {
    moeq_ep_comm c;
    memset(&c, 0, sizeof c);
    c.rank = rank;
    c.size = w->size;
    c.user_data = &w->ranks[rank];
    c.alltoallv = ep_threads_alltoallv;
    c.allreduce_i32 = ep_threads_allreduce;
    c.barrier = ep_threads_barrier;
    return c;
}

#endif

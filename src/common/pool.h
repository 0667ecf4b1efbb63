/*
 * pool.h - the small persistent thread pool a moeq_ctx owns.  Threads are
 * created once (moeq__pool_create) and reused by every apply: a run hands the
 * same function to all of them (the caller is thread 0) and returns when all
 * have finished.  Workers spin briefly for the next run, then sleep.
 * Never installed.
 */
#ifndef MOEQ_POOL_H
#define MOEQ_POOL_H

#include "common/internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MOEQ__CPU_RELAX() _mm_pause()
#else
#define MOEQ__CPU_RELAX() ((void)0)
#endif

typedef struct moeq__pool moeq__pool;
typedef void (*moeq__pool_fn)(void *arg, int tid, int nthreads);

/* A pool of `threads` threads in all (threads - 1 workers); NULL with *st set
 * on failure.  threads <= 1 gives a pool that runs everything on the caller. */
moeq__pool *moeq__pool_create(int threads, moeq_status *st);
void moeq__pool_destroy(moeq__pool *p);
int moeq__pool_threads(const moeq__pool *p);
/* Runs fn(arg, tid, n) on every thread (tid 0 is the caller) and waits. */
void moeq__pool_run(moeq__pool *p, moeq__pool_fn fn, void *arg);

#endif /* MOEQ_POOL_H */

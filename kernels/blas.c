/*
 * blas.c - the only file that includes <cblas.h>.
 *
 * OpenBLAS is loaded on first use (dlopen), not linked: loading it starts its
 * thread pool, whose threads spin for a while at start-up, and costs every
 * process that links moeq a few milliseconds and a spinning CPU even when it
 * never multiplies a matrix (moeq plan, inspect, the fast apply path).  When
 * it cannot be loaded, a plain loop computes the same product (summation in
 * column order, float accumulators).  OpenBLAS's thread count is
 * process-wide; it is left alone here (the caller decides).
 */
#include "kernels.h"

#include <assert.h>
#include <cblas.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#ifndef MOEQ_OPENBLAS_SONAME
#define MOEQ_OPENBLAS_SONAME "libopenblas.so.0"
#endif

typedef void (*sgemm_fn)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE,
                         const enum CBLAS_TRANSPOSE, const blasint, const blasint, const blasint,
                         const float, const float *, const blasint, const float *, const blasint,
                         const float, float *, const blasint);

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static sgemm_fn g_sgemm; /* NULL: OpenBLAS could not be loaded */

static void load_openblas(void) {
    static const char *const names[] = {MOEQ_OPENBLAS_SONAME, "libopenblas.so.0", "libopenblas.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !g_sgemm; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) continue;
        void *f = dlsym(h, "cblas_sgemm");
        if (f) {
            /* the object-to-function pointer conversion POSIX guarantees */
            memcpy(&g_sgemm, &f, sizeof g_sgemm);
        } else {
            dlclose(h);
        }
    }
}

bool moeq__blas_available(void) {
    pthread_once(&g_once, load_openblas);
    return g_sgemm != NULL;
}

void moeq__sgemm_nt(const float *a, const float *b, size_t m, size_t n, size_t k, float *c) {
    assert(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX);
    if (m == 0 || n == 0) return;
    if (k == 0) {
        for (size_t i = 0; i < m * n; i++) c[i] = 0.0f;
        return;
    }
    /* C[m, n] = A[m, k] . B[n, k]^T, all row-major */
    if (moeq__blas_available()) {
        g_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)m, (blasint)n, (blasint)k, 1.0f,
                a, (blasint)k, b, (blasint)k, 0.0f, c, (blasint)n);
        return;
    }
    moeq__sgemm_nt_plain(a, b, m, n, k, c);
}

void moeq__sgemm_nt_plain(const float *a, const float *b, size_t m, size_t n, size_t k, float *c) {
    for (size_t i = 0; i < m; i++) {
        for (size_t j = 0; j < n; j++) {
            const float *x = a + i * k, *w = b + j * k;
            float s = 0.0f;
            for (size_t q = 0; q < k; q++) s = fmaf(x[q], w[q], s);
            c[i * n + j] = s;
        }
    }
}

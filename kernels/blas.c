/*
 * blas.c - the only file that includes <cblas.h>.  OpenBLAS's thread count
 * is process-wide; it is left alone here (the caller decides).
 */
#include "kernels.h"

#include <assert.h>
#include <cblas.h>
#include <limits.h>

void moeq__sgemm_nt(const float *a, const float *b, size_t m, size_t n, size_t k, float *c) {
    assert(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX);
    if (m == 0 || n == 0) return;
    if (k == 0) {
        for (size_t i = 0; i < m * n; i++) c[i] = 0.0f;
        return;
    }
    /* C[m, n] = A[m, k] . B[n, k]^T, all row-major */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, a,
                (int)k, b, (int)k, 0.0f, c, (int)n);
}

/*
 * gemm.c - reference matmuls: a scalar one accumulating in double (the
 * yardstick for every faster path) and "dequantize to f32, then sgemm".
 */
#include "kernels.h"

void moeq__matmul_f64_ref(const float *x, const float *w, size_t m, size_t n, size_t k,
                          float *y) {
    for (size_t i = 0; i < m; i++) {
        const float *xr = x + i * k;
        for (size_t j = 0; j < n; j++) {
            const float *wr = w + j * k;
            double acc = 0.0;
            for (size_t t = 0; t < k; t++) acc += (double)xr[t] * (double)wr[t];
            y[i * n + j] = (float)acc;
        }
    }
}

void moeq__matmul_dequant_ref(const moeq__qweight *w, const float *x, size_t m,
                              float *w_f32, float *y) {
    moeq__dequant_ref(w, 0, w->rows, w_f32);
    moeq__sgemm_nt(x, w_f32, m, w->rows, w->cols, y);
}

/*
 * tolerance.h - how far a dequantized weight may be from the weight it was
 * quantized from, shared by check_compress and check_synth (one table).
 *
 * In quantization steps at the element's magnitude: half a step is the
 * rounding of the quantizer itself; `slack` is what the weight dtype adds:
 * compressed-tensors computes the scale, x / scale and x / scale + zp in that
 * dtype (eps = torch.finfo(dtype).eps), so each can be off by half an ulp.
 * For integers the scale's rounding can push the extremes up to 0.5 eps x
 * 2^(b-1) (symmetric) or 2^b (asymmetric, whose x / scale spans 2^b) past the
 * clamped end of the range; x / scale adds as much again, and + zp half of
 * it.  Floats scale with |v|.  2^-21 covers float32 arithmetic.
 */
#ifndef MOEQ_TEST_TOLERANCE_H
#define MOEQ_TEST_TOLERANCE_H

#include <math.h>

#include "moeq/moeq.h"

/* torch.finfo(dtype).eps */
static inline double moeq_test_eps(int32_t dtype) {
    return dtype == MOEQ_DTYPE_BF16 ? 0x1p-7 : dtype == MOEQ_DTYPE_F16 ? 0x1p-10 : 0x1p-23;
}

/* The quantization step around v = x / scale (+ zp): 1 for integers, the
 * E2M1, E2M3 or E4M3 grid spacing for FP4, FP6 and FP8 codes. */
static inline double moeq_test_step(const moeq_quant_args *a, double v) {
    const double m = fabs(v);
    if (a->type == MOEQ_QTYPE_INT) return 1.0;
    if (a->num_bits == 4) return m < 2.0 ? 0.5 : (m < 4.0 ? 1.0 : 2.0);
    if (a->num_bits == 6) return m < 2.0 ? 0.125 : (m < 4.0 ? 0.25 : 0.5);
    const int e = m > 0 ? (int)floor(log2(m)) : -6;
    return ldexp(1.0, (e < -6 ? -6 : e) - 3); /* 3 mantissa bits, subnormals below 2^-6 */
}

/* Largest |x - dequant(x)| for an element with scale s (already divided by
 * any global scale) and v = x / s (+ zp), for weights of `dtype`. */
static inline double moeq_test_tolerance(const moeq_quant_args *a, int32_t dtype, double v,
                                         double s) {
    const double eps = moeq_test_eps(dtype);
    double slack;
    if (a->type == MOEQ_QTYPE_INT) {
        const double half_range = ldexp(1.0, a->num_bits - 1);
        slack = eps * half_range * (a->symmetric ? 1.0 : 2.5) + 0x1p-21 * 2.0 * half_range;
    } else {
        slack = (1.5 * eps + 0x1p-21) * fabs(v);
    }
    return s * (0.5 * moeq_test_step(a, v) + slack) + 1e-12;
}

#endif

/*
 * actquant.c - run-time activation quantizers as inference engines apply them
 * (sglang spec §13.4-§13.6, CT §4.4), each with its dequantize twin.
 *
 * Conventions chosen where engines differ:
 * - x / s, never x * (1/s).
 * - Dynamic scales use max(amax, eps) so that an all-zero row gets a tiny
 *   positive scale and zero codes instead of 0/0.
 * - int8 rounds half to even (torch.round, nearbyint) and saturates.
 * - NaN inputs give code 0 (the zero point for static int8).  NaN is ignored
 *   by the amax reductions.
 */
#include "kernels.h"

#include <math.h>

static float absmax(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        if (a > m) m = a; /* NaN compares false and is skipped */
    }
    return m;
}

static int8_t int8_code(float v) {
    if (isnan(v)) return 0;
    v = moeq__round_half_even(v);
    if (v < -128.0f) v = -128.0f;
    if (v > 127.0f) v = 127.0f;
    return (int8_t)v;
}

static float clampf(float v, float lo, float hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

static uint8_t fp8_code(float x, float s) {
    const float v = x / s;
    if (isnan(v)) return 0;
    return moeq__f32_to_e4m3(clampf(v, -MOEQ__E4M3_MAX, MOEQ__E4M3_MAX));
}

/* ---- int8 ------------------------------------------------------------------ */

void moeq__actq_int8_token_ref(const float *x, size_t m, size_t k, int8_t *q, float *s) {
    for (size_t i = 0; i < m; i++) {
        const float *row = x + i * k;
        const float amax = absmax(row, k);
        const float scale = (amax > MOEQ__ACT_INT8_EPS ? amax : MOEQ__ACT_INT8_EPS) / 127.0f;
        s[i] = scale;
        for (size_t c = 0; c < k; c++) q[i * k + c] = int8_code(row[c] / scale);
    }
}

void moeq__actq_int8_static_ref(const float *x, size_t n, float s, int32_t zp, int8_t *q) {
    for (size_t i = 0; i < n; i++) {
        const float v = x[i] / s;
        q[i] = isnan(v) ? int8_code((float)zp) : int8_code(v + (float)zp);
    }
}

void moeq__actdq_int8_ref(const int8_t *q, size_t m, size_t k, const float *s,
                          size_t s_stride, size_t gs, const int32_t *zp_row, float *out) {
    for (size_t i = 0; i < m; i++) {
        const float *srow = s + i * s_stride;
        const int32_t zp = zp_row ? zp_row[i] : 0;
        for (size_t c = 0; c < k; c++) {
            out[i * k + c] = (float)((int32_t)q[i * k + c] - zp) * srow[c / gs];
        }
    }
}

/* ---- FP8 ------------------------------------------------------------------- */

void moeq__actq_fp8_token_ref(const float *x, size_t m, size_t k, uint8_t *q, float *s) {
    for (size_t i = 0; i < m; i++) {
        const float *row = x + i * k;
        const float amax = absmax(row, k);
        const float scale = (amax > MOEQ__ACT_FP8_EPS ? amax : MOEQ__ACT_FP8_EPS) / MOEQ__E4M3_MAX;
        s[i] = scale;
        for (size_t c = 0; c < k; c++) q[i * k + c] = fp8_code(row[c], scale);
    }
}

float moeq__actq_fp8_tensor_ref(const float *x, size_t n, uint8_t *q) {
    const float amax = absmax(x, n);
    const float scale = (amax > MOEQ__ACT_FP8_EPS ? amax : MOEQ__ACT_FP8_EPS) / MOEQ__E4M3_MAX;
    for (size_t i = 0; i < n; i++) q[i] = fp8_code(x[i], scale);
    return scale;
}

void moeq__actq_fp8_group_ref(const float *x, size_t m, size_t k, size_t gs, uint8_t *q,
                              float *s) {
    const size_t ng = k / gs + (k % gs != 0);
    for (size_t i = 0; i < m; i++) {
        for (size_t g = 0; g < ng; g++) {
            const size_t c0 = g * gs;
            const size_t len = k - c0 < gs ? k - c0 : gs;
            const float *grp = x + i * k + c0;
            const float amax = absmax(grp, len);
            const float scale =
                (amax > MOEQ__ACT_FP8_GROUP_EPS ? amax : MOEQ__ACT_FP8_GROUP_EPS) / MOEQ__E4M3_MAX;
            s[i * ng + g] = scale;
            for (size_t c = 0; c < len; c++) q[i * k + c0 + c] = fp8_code(grp[c], scale);
        }
    }
}

void moeq__actq_fp8_static_ref(const float *x, size_t n, float s, uint8_t *q) {
    for (size_t i = 0; i < n; i++) q[i] = fp8_code(x[i], s);
}

void moeq__actdq_fp8_ref(const uint8_t *q, size_t m, size_t k, const float *s,
                         size_t s_stride, size_t gs, float *out) {
    for (size_t i = 0; i < m; i++) {
        const float *srow = s + i * s_stride;
        for (size_t c = 0; c < k; c++) {
            out[i * k + c] = moeq__e4m3_to_f32(q[i * k + c]) * srow[c / gs];
        }
    }
}

/* ---- FP4 ------------------------------------------------------------------- */

static uint8_t fp4_code(float x, float s) {
    const float v = x / s;
    return moeq__fp4_code_ref(moeq__fp4_round_ref(clampf(v, -MOEQ__E2M1_MAX, MOEQ__E2M1_MAX)));
}

#define NVFP4_GROUP 16
#define MXFP4_GROUP 32 /* every MX format's group */

void moeq__actq_nvfp4_ref(const float *x, size_t m, size_t k, float gsc, uint8_t *packed,
                          uint8_t *sf) {
    const size_t ng = k / NVFP4_GROUP + (k % NVFP4_GROUP != 0);
    for (size_t i = 0; i < m; i++) {
        uint8_t *prow = packed + i * (k / 2);
        for (size_t g = 0; g < ng; g++) {
            const size_t c0 = g * NVFP4_GROUP;
            const size_t len = k - c0 < NVFP4_GROUP ? k - c0 : NVFP4_GROUP;
            const float *grp = x + i * k + c0;
            /* CT: scale = amax / 6, then global * scale, then E4M3 with 0 -> eps */
            const float local = gsc * (absmax(grp, len) / MOEQ__E2M1_MAX);
            uint8_t code = moeq__f32_to_e4m3(local);
            if ((code & 0x7Fu) == 0) code = 0x20u; /* 0.125 */
            sf[i * ng + g] = code;
            const float eff = moeq__e4m3_to_f32(code) / gsc;
            for (size_t c = 0; c < len; c++) moeq__fp4_set_ref(prow, c0 + c, fp4_code(grp[c], eff));
        }
    }
}

void moeq__actdq_nvfp4_ref(const uint8_t *packed, size_t m, size_t k, const uint8_t *sf,
                           float gsc, float *out) {
    const size_t ng = k / NVFP4_GROUP + (k % NVFP4_GROUP != 0);
    for (size_t i = 0; i < m; i++) {
        moeq__fp4_unpack_ref(packed + i * (k / 2), 0, k, out + i * k);
        for (size_t c = 0; c < k; c++) {
            const float eff = moeq__e4m3_to_f32(sf[i * ng + c / NVFP4_GROUP]) / gsc;
            out[i * k + c] *= eff;
        }
    }
}

void moeq__actq_mxfp4_ref(const float *x, size_t m, size_t k, uint8_t *packed, uint8_t *e) {
    const size_t ng = k / MXFP4_GROUP + (k % MXFP4_GROUP != 0);
    for (size_t i = 0; i < m; i++) {
        uint8_t *prow = packed + i * (k / 2);
        for (size_t g = 0; g < ng; g++) {
            const size_t c0 = g * MXFP4_GROUP;
            const size_t len = k - c0 < MXFP4_GROUP ? k - c0 : MXFP4_GROUP;
            const float *grp = x + i * k + c0;
            const uint8_t byte = moeq__mx_scale_byte_ref(absmax(grp, len), 2);
            e[i * ng + g] = byte;
            const float s = moeq__e8m0_to_f32(byte);
            for (size_t c = 0; c < len; c++) moeq__fp4_set_ref(prow, c0 + c, fp4_code(grp[c], s));
        }
    }
}

void moeq__actdq_mxfp4_ref(const uint8_t *packed, size_t m, size_t k, const uint8_t *e,
                           float *out) {
    const size_t ng = k / MXFP4_GROUP + (k % MXFP4_GROUP != 0);
    for (size_t i = 0; i < m; i++) {
        moeq__fp4_unpack_ref(packed + i * (k / 2), 0, k, out + i * k);
        for (size_t c = 0; c < k; c++) {
            out[i * k + c] *= moeq__e8m0_to_f32(e[i * ng + c / MXFP4_GROUP]);
        }
    }
}

/* ---- MXFP8 ------------------------------------------------------------------ */

void moeq__actq_mxfp8_ref(const float *x, size_t m, size_t k, uint8_t *q, uint8_t *e) {
    const size_t ng = k / MXFP4_GROUP + (k % MXFP4_GROUP != 0);
    for (size_t i = 0; i < m; i++) {
        for (size_t g = 0; g < ng; g++) {
            const size_t c0 = g * MXFP4_GROUP;
            const size_t len = k - c0 < MXFP4_GROUP ? k - c0 : MXFP4_GROUP;
            const float *grp = x + i * k + c0;
            const uint8_t byte = moeq__mx_scale_byte_ref(absmax(grp, len), 8);
            e[i * ng + g] = byte;
            const float s = moeq__e8m0_to_f32(byte);
            for (size_t c = 0; c < len; c++) q[i * k + c0 + c] = fp8_code(grp[c], s);
        }
    }
}

void moeq__actdq_mxfp8_ref(const uint8_t *q, size_t m, size_t k, const uint8_t *e, float *out) {
    const size_t ng = k / MXFP4_GROUP + (k % MXFP4_GROUP != 0);
    for (size_t i = 0; i < m; i++) {
        for (size_t c = 0; c < k; c++) {
            out[i * k + c] =
                moeq__e4m3_to_f32(q[i * k + c]) * moeq__e8m0_to_f32(e[i * ng + c / MXFP4_GROUP]);
        }
    }
}

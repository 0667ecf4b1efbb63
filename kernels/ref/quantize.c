/*
 * quantize.c - writer-side weight quantizers that reproduce compressed-tensors
 * 0.18 bit for bit (spec §4.3; quantization/utils/helpers.py:calculate_qparams,
 * lifecycle/forward_helpers.py:_quantize).
 *
 * torch evaluates every op in the dtype of its operands: with BF16 weights
 * the observer's min/max, the scale and x / scale are BF16 values (computed
 * in f32 and rounded once per op, which is what torch does on the CPU).  RD()
 * below marks each such rounding.  The exceptions are the NVFP4 steps that
 * involve the F32 global scale, which promote to f32.
 */
#include "kernels.h"

#include <math.h>

#define RD(x) moeq__round_to_dtype(a->dtype, (x))

static float clampf(float v, float lo, float hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

/* min and max of the weight elements covered by scale cell (sr, sc). */
typedef struct cell_range {
    float min, max;
} cell_range;

static cell_range cell_min_max(const float *w, size_t rows, size_t cols,
                               const moeq__grid *g, const int32_t *g_idx, size_t sr,
                               size_t sc) {
    cell_range cr = {INFINITY, -INFINITY};
    const size_t r0 = sr * g->row_block;
    const size_t r1 = r0 + g->row_block < rows ? r0 + g->row_block : rows;
    size_t c0 = sc * g->col_block;
    size_t c1 = c0 + g->col_block < cols ? c0 + g->col_block : cols;
    if (g_idx) {
        c0 = 0;
        c1 = cols;
    }
    for (size_t r = r0; r < r1; r++) {
        for (size_t c = c0; c < c1; c++) {
            if (g_idx && (size_t)g_idx[c] != sc) continue;
            const float v = w[r * cols + c];
            if (v < cr.min) cr.min = v;
            if (v > cr.max) cr.max = v;
        }
    }
    /* Zero is always representable (calculate_qparams step 1); this also
     * turns an empty cell into [0, 0]. */
    if (!(cr.min < 0.0f)) cr.min = 0.0f;
    if (!(cr.max > 0.0f)) cr.max = 0.0f;
    return cr;
}

static size_t cell_of(const moeq__grid *g, const int32_t *g_idx, size_t r, size_t c) {
    const size_t col = g_idx ? (size_t)g_idx[c] : c / g->col_block;
    return (r / g->row_block) * g->cols + col;
}

static moeq__grid grid_of(const moeq__wquant *a, size_t rows, size_t cols) {
    moeq__grid g = {1, 1, 1, 1};
    (void)moeq__scale_grid(a->strategy, rows, cols, (size_t)a->group_size,
                           (size_t)a->block_rows, (size_t)a->block_cols, &g);
    return g;
}

/* torch: round(clamp(t, iinfo.min, iinfo.max)).to(int8); NaN -> 0. */
static int8_t to_int8(float v) {
    if (isnan(v)) return 0;
    return (int8_t)moeq__round_half_even(clampf(v, -128.0f, 127.0f));
}

void moeq__quantize_int_ref(const moeq__wquant *a, const float *w, size_t rows, size_t cols,
                            const int32_t *g_idx, float *scale, int8_t *zp, int8_t *q) {
    const moeq__grid g = grid_of(a, rows, cols);
    const float q_min = -ldexpf(1.0f, a->bits - 1);
    const float q_max = ldexpf(1.0f, a->bits - 1) - 1.0f;
    const float bit_range = q_max - q_min;
    const float eps = moeq__dtype_eps(a->dtype);

    for (size_t sr = 0; sr < g.rows; sr++) {
        for (size_t sc = 0; sc < g.cols; sc++) {
            const size_t cell = sr * g.cols + sc;
            const cell_range cr = cell_min_max(w, rows, cols, &g, g_idx, sr, sc);
            float s;
            float z = 0.0f;
            if (a->symmetric) {
                const float amax = fmaxf(fabsf(cr.min), fabsf(cr.max));
                s = RD(amax / (bit_range / 2.0f));
            } else {
                s = RD(RD(cr.max - cr.min) / bit_range);
                /* from the scale before the zero substitution: 0/0 is NaN,
                 * which clamp keeps and the int8 cast turns into 0 */
                z = RD(q_min - RD(cr.min / s));
                if (!isnan(z)) z = clampf(z, q_min, q_max);
            }
            if (s == 0.0f) s = eps;
            scale[cell] = s;
            if (zp) zp[cell] = a->symmetric ? 0 : to_int8(z);
        }
    }
    for (size_t r = 0; r < rows; r++) {
        /* cell_of(&g, g_idx, r, c), without a division per element */
        const size_t base = (r / g.row_block) * g.cols;
        size_t group = 0, in_group = 0;
        for (size_t c = 0; c < cols; c++) {
            const size_t cell = base + (g_idx ? (size_t)g_idx[c] : group);
            if (++in_group == g.col_block) {
                in_group = 0;
                group++;
            }
            float v = RD(w[r * cols + c] / scale[cell]);
            if (!a->symmetric) v = RD(v + (float)zp[cell]);
            v = moeq__round_half_even(clampf(v, q_min, q_max));
            q[r * cols + c] = isnan(v) ? 0 : (int8_t)v;
        }
    }
}

void moeq__quantize_fp8_ref(const moeq__wquant *a, const float *w, size_t rows, size_t cols,
                            float *scale, uint8_t *q) {
    const moeq__grid g = grid_of(a, rows, cols);
    const float eps = moeq__dtype_eps(a->dtype);
    for (size_t sr = 0; sr < g.rows; sr++) {
        for (size_t sc = 0; sc < g.cols; sc++) {
            const cell_range cr = cell_min_max(w, rows, cols, &g, NULL, sr, sc);
            const float amax = fmaxf(fabsf(cr.min), fabsf(cr.max));
            float s = RD(amax / MOEQ__E4M3_MAX); /* bit_range 896 / 2 */
            if (s == 0.0f) s = eps;
            scale[sr * g.cols + sc] = s;
        }
    }
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < cols; c++) {
            const float v = RD(w[r * cols + c] / scale[cell_of(&g, NULL, r, c)]);
            /* clamp in the weight dtype, then cast that value to E4M3 */
            q[r * cols + c] = moeq__f32_to_e4m3(isnan(v) ? v : clampf(v, -MOEQ__E4M3_MAX,
                                                                        MOEQ__E4M3_MAX));
        }
    }
}

float moeq__nvfp4_global_scale_ref(float amax, int32_t dtype) {
    /* torch.finfo(dtype).tiny */
    const float tiny = dtype == MOEQ_DTYPE_F16 ? 0x1p-14f : 0x1p-126f;
    if (amax < tiny) amax = tiny; /* clamp does not touch NaN */
    /* CT writes 448 * 6 / amax with a Python float on the left, and torch
     * evaluates `scalar / tensor` as tensor.reciprocal() * scalar
     * (Tensor.__rtruediv__): two roundings to the dtype, not one division.
     * For 2.9 in f32 that is 926.896484375, not f32(2688 / 2.9). */
    const float inv = moeq__round_to_dtype(dtype, 1.0f / amax);
    const float gsc = moeq__round_to_dtype(dtype, inv * (MOEQ__E4M3_MAX * MOEQ__E2M1_MAX));
    return isfinite(gsc) ? gsc : 1.0f;
}

void moeq__quantize_nvfp4_ref(const moeq__wquant *a, const float *w, size_t rows,
                              size_t cols, float global, uint8_t *scale, uint8_t *packed) {
    const size_t gs = (size_t)a->group_size;
    const moeq__grid g = {rows, cols / gs + (cols % gs != 0), 1, gs};
    for (size_t r = 0; r < rows; r++) {
        uint8_t *prow = packed + r * (cols / 2);
        for (size_t sc = 0; sc < g.cols; sc++) {
            const cell_range cr = cell_min_max(w, rows, cols, &g, NULL, r, sc);
            const float amax = fmaxf(fabsf(cr.min), fabsf(cr.max));
            /* amax / (bit_range 12 / 2) in the weight dtype, then times the
             * f32 global scale (promotes to f32), clamp + cast to E4M3 */
            uint8_t code = moeq__f32_to_e4m3(global * RD(amax / MOEQ__E2M1_MAX));
            if ((code & 0x7Fu) == 0) code = 0x20u; /* eps of an E4M3 scale: 0.125 */
            scale[r * g.cols + sc] = code;
            const float eff = moeq__e4m3_to_f32(code) / global; /* f32 */
            const size_t c0 = sc * gs;
            const size_t c1 = c0 + gs < cols ? c0 + gs : cols;
            for (size_t c = c0; c < c1; c++) {
                const float v = clampf(w[r * cols + c] / eff, -MOEQ__E2M1_MAX, MOEQ__E2M1_MAX);
                moeq__fp4_set_ref(prow, c, moeq__fp4_code_ref(moeq__fp4_round_ref(v)));
            }
        }
    }
}

/* MX weights, FP4 (elem_bits 4: codes packed two per byte), FP6 (6: four
 * codes in three bytes) or FP8 (8: one E4M3 byte each).  Per group: the E8M0 byte from the group amax, the scale
 * as CT holds it in the weight dtype (2^(e-127); a zero from underflow is
 * replaced by eps 1 of the uint8 scale dtype), and the byte
 * compress_mx_scale writes for that scale. */
static void quantize_mx(const moeq__wquant *a, const float *w, size_t rows, size_t cols,
                        int elem_bits, uint8_t *scale, uint8_t *out) {
    const size_t gs = (size_t)a->group_size;
    const moeq__grid g = {rows, cols / gs + (cols % gs != 0), 1, gs};
    const float qmax = elem_bits == 4   ? MOEQ__E2M1_MAX
                       : elem_bits == 6 ? MOEQ__E2M3_MAX
                                        : MOEQ__E4M3_MAX;
    for (size_t r = 0; r < rows; r++) {
        for (size_t sc = 0; sc < g.cols; sc++) {
            const cell_range cr = cell_min_max(w, rows, cols, &g, NULL, r, sc);
            const float amax = fmaxf(fabsf(cr.min), fabsf(cr.max));
            const uint8_t e = elem_bits == 6 ? moeq__mx6_scale_byte_ref(amax)
                                             : moeq__mx_scale_byte_ref(amax, elem_bits == 4 ? 2 : 8);
            float s = RD(moeq__e8m0_to_f32(e));
            if (s == 0.0f) s = 1.0f;
            scale[r * g.cols + sc] = moeq__e8m0_from_scale(s);
            const size_t c0 = sc * gs;
            const size_t c1 = c0 + gs < cols ? c0 + gs : cols;
            for (size_t c = c0; c < c1; c++) {
                float v = RD(w[r * cols + c] / s);
                if (!isnan(v)) v = clampf(v, -qmax, qmax);
                if (elem_bits == 4) {
                    moeq__fp4_set_ref(out + r * (cols / 2), c, moeq__fp4_code_ref(moeq__fp4_round_ref(v)));
                } else if (elem_bits == 6) {
                    moeq__fp6_set_ref(out + r * (cols / 4 * 3), c, moeq__fp6_code_ref(moeq__fp6_round_ref(v)));
                } else {
                    out[r * cols + c] = moeq__f32_to_e4m3(v);
                }
            }
        }
    }
}

void moeq__quantize_mxfp4_ref(const moeq__wquant *a, const float *w, size_t rows,
                              size_t cols, uint8_t *scale, uint8_t *packed) {
    quantize_mx(a, w, rows, cols, 4, scale, packed);
}

void moeq__quantize_mxfp6_ref(const moeq__wquant *a, const float *w, size_t rows,
                              size_t cols, uint8_t *scale, uint8_t *packed) {
    quantize_mx(a, w, rows, cols, 6, scale, packed);
}

void moeq__quantize_mxfp8_ref(const moeq__wquant *a, const float *w, size_t rows,
                              size_t cols, uint8_t *scale, uint8_t *q) {
    quantize_mx(a, w, rows, cols, 8, scale, q);
}

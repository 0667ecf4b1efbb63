/*
 * dequant.c - quantized weight -> f32: decode the codes of a row, then
 * (code - zero_point) * scale with the scale cell of each element.
 */
#include "kernels.h"

#include <assert.h>

/* Rows are decoded in chunks of this many columns (32 values of b bits fill
 * exactly b dense words), so no scratch memory is needed. */
#define CHUNK 32

void moeq__decode_row_ref(const moeq__qweight *w, size_t r, size_t first, size_t n,
                          float *out) {
    if (w->kind == MOEQ__QW_PACKED) {
        moeq__pk_decode_row_ref(w->pk, r, first, n, out);
        return;
    }
    const uint8_t *row = (const uint8_t *)w->codes + r * w->row_stride;
    switch (w->kind) {
        case MOEQ__QW_INT_PACKED: {
            int8_t q[CHUNK];
            for (size_t done = 0; done < n;) {
                const size_t len = n - done < CHUNK ? n - done : CHUNK;
                moeq__int_unpack_row_ref(row, first + done, len, w->bits, w->legacy != 0, q);
                for (size_t i = 0; i < len; i++) out[done + i] = (float)q[i];
                done += len;
            }
            break;
        }
        case MOEQ__QW_I8:
            moeq__to_f32_ref(MOEQ_DTYPE_I8, row + first, n, out);
            break;
        case MOEQ__QW_I16:
            moeq__to_f32_ref(MOEQ_DTYPE_I16, row + 2 * first, n, out);
            break;
        case MOEQ__QW_I32:
            moeq__to_f32_ref(MOEQ_DTYPE_I32, row + 4 * first, n, out);
            break;
        case MOEQ__QW_E4M3:
            moeq__to_f32_ref(MOEQ_DTYPE_F8_E4M3, row + first, n, out);
            break;
        case MOEQ__QW_E2M1:
            moeq__fp4_unpack_ref(row, first, n, out);
            break;
        case MOEQ__QW_E2M3:
            moeq__fp6_unpack_ref(row, first, n, out);
            break;
        case MOEQ__QW_F32: moeq__to_f32_ref(MOEQ_DTYPE_F32, row + 4 * first, n, out); break;
        case MOEQ__QW_F16: moeq__to_f32_ref(MOEQ_DTYPE_F16, row + 2 * first, n, out); break;
        case MOEQ__QW_BF16: moeq__to_f32_ref(MOEQ_DTYPE_BF16, row + 2 * first, n, out); break;
        case MOEQ__QW_F64: moeq__to_f32_ref(MOEQ_DTYPE_F64, row + 8 * first, n, out); break;
        case MOEQ__QW_INT4_NIBBLES:
            for (size_t i = 0; i < n; i++) {
                const size_t c = first + i;
                const uint8_t nib = (uint8_t)((c & 1u) ? (row[c >> 1] >> 4) : (row[c >> 1] & 0xFu));
                out[i] = (float)((int32_t)(nib ^ 8u) - 8); /* sign-extend a 4-bit value */
            }
            break;
        default:
            assert(0 && "moeq__decode_row_ref: unknown kind");
            break;
    }
}

void moeq__dequant_ref(const moeq__qweight *w, size_t row0, size_t nrows, float *out) {
    if (w->kind == MOEQ__QW_PACKED) { /* the same products, read from the blocked layout */
        moeq__pk_dequant_ref(w->pk, row0, nrows, out);
        return;
    }
    const moeq__grid *g = &w->grid;
    if (!w->scale) { /* unquantized: the values as they are */
        for (size_t i = 0; i < nrows; i++) moeq__decode_row_ref(w, row0 + i, 0, w->cols, out + i * w->cols);
        return;
    }
    for (size_t i = 0; i < nrows; i++) {
        const size_t r = row0 + i;
        const size_t cell_row = (r / g->row_block) * g->cols;
        const float *scale = w->scale + cell_row;
        const float *zp = w->zero_point ? w->zero_point + cell_row : NULL;
        float *dst = out + i * w->cols;
        for (size_t c0 = 0; c0 < w->cols; c0 += CHUNK) {
            const size_t len = w->cols - c0 < CHUNK ? w->cols - c0 : CHUNK;
            float v[CHUNK];
            moeq__decode_row_ref(w, r, c0, len, v);
            for (size_t j = 0; j < len; j++) {
                const size_t c = c0 + j;
                const size_t cell = w->g_idx ? (size_t)w->g_idx[c] : c / g->col_block;
                const float q = zp ? v[j] - zp[cell] : v[j];
                dst[c] = q * scale[cell];
            }
        }
    }
}

/*
 * convert.c - arrays of the safetensors float dtypes (and small integers)
 * to and from f32, and torch-style rounding to a dtype.
 */
#include "kernels.h"

#include <assert.h>
#include <math.h>
#include <string.h>

void moeq__to_f32_ref(int32_t dtype, const void *src, size_t n, float *dst) {
    const uint8_t *b = src;
    switch (dtype) {
        case MOEQ_DTYPE_F64:
            for (size_t i = 0; i < n; i++) {
                const uint64_t u = moeq__load_u64(src, i);
                double d;
                memcpy(&d, &u, sizeof d);
                dst[i] = (float)d;
            }
            break;
        case MOEQ_DTYPE_F32:
            for (size_t i = 0; i < n; i++) {
                const uint32_t u = moeq__load_u32(src, i);
                memcpy(&dst[i], &u, sizeof u);
            }
            break;
        case MOEQ_DTYPE_F16:
            for (size_t i = 0; i < n; i++) dst[i] = moeq__f16_to_f32(moeq__load_u16(src, i));
            break;
        case MOEQ_DTYPE_BF16:
            for (size_t i = 0; i < n; i++) dst[i] = moeq__bf16_to_f32(moeq__load_u16(src, i));
            break;
        case MOEQ_DTYPE_F8_E4M3:
            for (size_t i = 0; i < n; i++) dst[i] = moeq__e4m3_to_f32(b[i]);
            break;
        case MOEQ_DTYPE_F8_E5M2:
            for (size_t i = 0; i < n; i++) dst[i] = moeq__e5m2_to_f32(b[i]);
            break;
        case MOEQ_DTYPE_I8:
            for (size_t i = 0; i < n; i++) dst[i] = (float)(int8_t)b[i];
            break;
        case MOEQ_DTYPE_U8:
            for (size_t i = 0; i < n; i++) dst[i] = (float)b[i];
            break;
        case MOEQ_DTYPE_I16:
            for (size_t i = 0; i < n; i++) dst[i] = (float)(int16_t)moeq__load_u16(src, i);
            break;
        case MOEQ_DTYPE_U16:
            for (size_t i = 0; i < n; i++) dst[i] = (float)moeq__load_u16(src, i);
            break;
        case MOEQ_DTYPE_I32:
            for (size_t i = 0; i < n; i++) dst[i] = (float)(int32_t)moeq__load_u32(src, i);
            break;
        default:
            assert(0 && "moeq__to_f32_ref: dtype not convertible");
            break;
    }
}

static void store_u16(void *dst, size_t i, uint16_t v) {
    memcpy((uint8_t *)dst + 2 * i, &v, sizeof v);
}

void moeq__from_f32_ref(int32_t dtype, const float *src, size_t n, void *dst) {
    uint8_t *b = dst;
    switch (dtype) {
        case MOEQ_DTYPE_F64:
            for (size_t i = 0; i < n; i++) {
                const double d = (double)src[i];
                memcpy(b + 8 * i, &d, sizeof d);
            }
            break;
        case MOEQ_DTYPE_F32:
            if (n) memcpy(dst, src, n * sizeof(float));
            break;
        case MOEQ_DTYPE_F16:
            for (size_t i = 0; i < n; i++) store_u16(dst, i, moeq__f32_to_f16(src[i]));
            break;
        case MOEQ_DTYPE_BF16:
            for (size_t i = 0; i < n; i++) store_u16(dst, i, moeq__f32_to_bf16(src[i]));
            break;
        case MOEQ_DTYPE_F8_E4M3:
            for (size_t i = 0; i < n; i++) b[i] = moeq__f32_to_e4m3(src[i]);
            break;
        case MOEQ_DTYPE_F8_E5M2:
            for (size_t i = 0; i < n; i++) b[i] = moeq__f32_to_e5m2(src[i]);
            break;
        default:
            assert(0 && "moeq__from_f32_ref: dtype not writable");
            break;
    }
}


float moeq__dtype_eps(int32_t dtype) {
    switch (dtype) {
        case MOEQ_DTYPE_BF16: return 0x1p-7f;
        case MOEQ_DTYPE_F16: return 0x1p-10f;
        default: return 0x1p-23f;
    }
}

/* One tile with a constant element size (inlined per size below). */
static inline void transpose_tile(const uint8_t *src, size_t i0, size_t i1, size_t j0, size_t j1,
                                  size_t src_ld, uint8_t *dst, size_t dst_ld, size_t es) {
    for (size_t i = i0; i < i1; i++) {
        for (size_t j = j0; j < j1; j++) {
            memcpy(dst + (j * dst_ld + i) * es, src + (i * src_ld + j) * es, es);
        }
    }
}

void moeq__transpose_ref(const void *src, size_t rows, size_t cols, size_t src_ld, void *dst,
                         size_t dst_ld, size_t es) {
    const uint8_t *s = src;
    uint8_t *d = dst;
    for (size_t i0 = 0; i0 < rows; i0 += 32) {
        const size_t i1 = rows - i0 < 32 ? rows : i0 + 32;
        for (size_t j0 = 0; j0 < cols; j0 += 32) {
            const size_t j1 = cols - j0 < 32 ? cols : j0 + 32;
            switch (es) {
                case 1: transpose_tile(s, i0, i1, j0, j1, src_ld, d, dst_ld, 1); break;
                case 2: transpose_tile(s, i0, i1, j0, j1, src_ld, d, dst_ld, 2); break;
                case 4: transpose_tile(s, i0, i1, j0, j1, src_ld, d, dst_ld, 4); break;
                default: transpose_tile(s, i0, i1, j0, j1, src_ld, d, dst_ld, es); break;
            }
        }
    }
}

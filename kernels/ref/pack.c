/*
 * pack.c - pack-quantized integer layouts (spec §3.4): dense 0.18 packing
 * (values may straddle words), the <= 0.17 floor(32/b)-per-word layout, zero
 * points packed along dim 0, and SGLang's MxInt4 signed-nibble repack.
 */
#include "kernels.h"

#include <assert.h>
#include <string.h>

size_t moeq__int_packed_words(size_t n, int bits, bool legacy) {
    const size_t b = (size_t)bits;
    if (legacy) {
        const size_t per = 32 / b;
        return n / per + (n % per != 0);
    }
    /* ceil(n*b/32) without overflowing n*b: 32 values fill exactly b words. */
    return (n / 32) * b + ((n % 32) * b + 31) / 32;
}

/* Bit position of element i in a row. */
static size_t bit_pos(size_t i, int bits, bool legacy) {
    const size_t b = (size_t)bits;
    if (legacy) {
        const size_t per = 32 / b;
        return (i / per) * 32 + (i % per) * b;
    }
    return i * b;
}

void moeq__int_pack_row_ref(const int8_t *q, size_t n, int bits, bool legacy,
                            uint32_t *words) {
    assert(bits >= 1 && bits <= 8);
    const size_t nw = moeq__int_packed_words(n, bits, legacy);
    memset(words, 0, nw * sizeof *words);
    const uint32_t mask = (1u << bits) - 1u;
    const int32_t offset = 1 << (bits - 1);
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)((int32_t)q[i] + offset) & mask;
        const size_t pos = bit_pos(i, bits, legacy);
        const size_t w = pos >> 5;
        const unsigned sh = (unsigned)(pos & 31u);
        words[w] |= u << sh;
        if (sh + (unsigned)bits > 32u) words[w + 1] |= u >> (32u - sh); /* straddles */
    }
}

void moeq__int_unpack_row_ref(const void *words, size_t first, size_t n, int bits,
                              bool legacy, int8_t *q) {
    assert(bits >= 1 && bits <= 8);
    const uint32_t mask = (1u << bits) - 1u;
    const int32_t offset = 1 << (bits - 1);
    for (size_t i = 0; i < n; i++) {
        const size_t pos = bit_pos(first + i, bits, legacy);
        const size_t w = pos >> 5;
        const unsigned sh = (unsigned)(pos & 31u);
        uint32_t u = moeq__load_u32(words, w) >> sh;
        if (sh + (unsigned)bits > 32u) u |= moeq__load_u32(words, w + 1) << (32u - sh);
        q[i] = (int8_t)((int32_t)(u & mask) - offset);
    }
}

void moeq__int_pack_cols_ref(const int8_t *v, size_t rows, size_t cols, int bits,
                             bool legacy, uint32_t *out) {
    const size_t nw = moeq__int_packed_words(rows, bits, legacy);
    memset(out, 0, nw * cols * sizeof *out);
    const uint32_t mask = (1u << bits) - 1u;
    const int32_t offset = 1 << (bits - 1);
    for (size_t c = 0; c < cols; c++) {
        for (size_t r = 0; r < rows; r++) {
            const uint32_t u = (uint32_t)((int32_t)v[r * cols + c] + offset) & mask;
            const size_t pos = bit_pos(r, bits, legacy);
            const size_t w = pos >> 5;
            const unsigned sh = (unsigned)(pos & 31u);
            out[w * cols + c] |= u << sh;
            if (sh + (unsigned)bits > 32u) out[(w + 1) * cols + c] |= u >> (32u - sh);
        }
    }
}

void moeq__int_unpack_cols_ref(const void *packed, size_t rows, size_t cols, int bits,
                               bool legacy, int8_t *v) {
    const uint32_t mask = (1u << bits) - 1u;
    const int32_t offset = 1 << (bits - 1);
    for (size_t c = 0; c < cols; c++) {
        for (size_t r = 0; r < rows; r++) {
            const size_t pos = bit_pos(r, bits, legacy);
            const size_t w = pos >> 5;
            const unsigned sh = (unsigned)(pos & 31u);
            uint32_t u = moeq__load_u32(packed, w * cols + c) >> sh;
            if (sh + (unsigned)bits > 32u) u |= moeq__load_u32(packed, (w + 1) * cols + c) << (32u - sh);
            v[r * cols + c] = (int8_t)((int32_t)(u & mask) - offset);
        }
    }
}

void moeq__mxint4_repack_ref(const void *words, size_t n, uint8_t *bytes) {
    for (size_t i = 0; i < n; i += 2) {
        /* nibble at shift 4*(i%8) of word i/8, minus 8: signed int4 */
        const int32_t e0 = (int32_t)((moeq__load_u32(words, i / 8) >> (4 * (i % 8))) & 0xFu) - 8;
        int32_t e1 = 0;
        if (i + 1 < n) {
            e1 = (int32_t)((moeq__load_u32(words, (i + 1) / 8) >> (4 * ((i + 1) % 8))) & 0xFu) - 8;
        }
        bytes[i / 2] = (uint8_t)(((uint32_t)e0 & 0xFu) | (((uint32_t)e1 & 0xFu) << 4));
    }
}

void moeq__mxint4_unrepack_ref(const uint8_t *bytes, size_t n, uint32_t *words) {
    const size_t nw = moeq__int_packed_words(n, 4, false);
    memset(words, 0, nw * sizeof *words);
    for (size_t i = 0; i < n; i++) {
        const uint32_t nib = (i & 1u) ? (uint32_t)(bytes[i / 2] >> 4) : (uint32_t)(bytes[i / 2] & 0xFu);
        /* two's-complement nibble -> unsigned offset form: flip the sign bit */
        words[i / 8] |= (nib ^ 0x8u) << (4 * (i % 8));
    }
}

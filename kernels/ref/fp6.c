/*
 * fp6.c - FP6 E2M3 values (MXFP6 weights), CT's FP6 rounding and the packing
 * of four 6-bit codes into three bytes (spec §3.6; compressed-tensors 0.20).
 *
 * A code is 6 bits: bit 5 the sign, bits 3..4 the exponent (bias 1), bits
 * 0..2 the mantissa.  Magnitudes: m/8 for exponent 0 (subnormal), else
 * (1 + m/8) * 2^(e-1); the largest is 7.5.  Every value is a multiple of
 * 1/8, so 8 * value is an integer in [-60, 60] (the packed layout's I8).
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

float moeq__e2m3_to_f32(uint8_t code) {
    const unsigned e = (code >> 3) & 3u, m = code & 7u;
    const float v = e == 0 ? (float)m * 0.125f : ldexpf(1.0f + (float)m * 0.125f, (int)e - 1);
    return (code & 0x20u) ? -v : v;
}

int8_t moeq__e2m3_times8(uint8_t code) {
    const unsigned e = (code >> 3) & 3u, m = code & 7u;
    const int v = e == 0 ? (int)m : (int)((8u + m) << (e - 1u));
    return (int8_t)((code & 0x20u) ? -v : v);
}

float moeq__fp6_round_ref(float x) {
    if (isnan(x)) return x;
    const float a = fabsf(x);
    uint32_t u;
    memcpy(&u, &a, sizeof u);
    int e = (int)((u >> 23) & 0xFFu) - 127;
    if (e < 0) e = 0;
    const float step = ldexpf(1.0f, e - 3);
    float r = moeq__round_half_even(a / step) * step;
    if (r > MOEQ__E2M3_MAX) r = MOEQ__E2M3_MAX;
    return copysignf(r, x);
}

uint8_t moeq__fp6_code_ref(float v) {
    const uint8_t sign = signbit(v) ? 0x20u : 0u;
    const float a = fabsf(v);
    /* torch.searchsorted (left) on the 32 ascending magnitudes: the first
     * code whose magnitude is >= a (32 for NaN or anything above 7.5, which
     * then spills into the sign bit as CT's does: never for rounded values) */
    uint8_t idx = 0;
    while (idx < 32 && !(moeq__e2m3_to_f32(idx) >= a)) idx++;
    return idx == 32 ? 0x20u : (uint8_t)(sign | idx);
}

uint8_t moeq__fp6_get(const uint8_t *row, size_t c) {
    const uint8_t *b = row + (c / 4) * 3;
    const uint32_t word = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16;
    return (uint8_t)((word >> (6u * (unsigned)(c % 4))) & 0x3Fu);
}

void moeq__fp6_set_ref(uint8_t *row, size_t c, uint8_t code) {
    uint8_t *b = row + (c / 4) * 3;
    uint32_t word = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16;
    const unsigned sh = 6u * (unsigned)(c % 4);
    word = (word & ~(0x3Fu << sh)) | ((uint32_t)(code & 0x3Fu) << sh);
    b[0] = (uint8_t)word;
    b[1] = (uint8_t)(word >> 8);
    b[2] = (uint8_t)(word >> 16);
}

void moeq__fp6_unpack_ref(const void *packed, size_t first, size_t n, float *out) {
    for (size_t i = 0; i < n; i++) out[i] = moeq__e2m3_to_f32(moeq__fp6_get(packed, first + i));
}

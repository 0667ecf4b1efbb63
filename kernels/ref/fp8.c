/*
 * fp8.c - FP8 E4M3FN (weights, NVFP4 scales) and E5M2.
 */
#include "kernels.h"

#include <math.h>

/* E4M3FN: 1 sign, 4 exponent (bias 7), 3 mantissa; the all-ones exponent is
 * used for normal values except mantissa 111 (NaN).  No infinities. */
float moeq__e4m3_to_f32(uint8_t b) {
    const uint32_t mag = b & 0x7Fu;
    if (mag == MOEQ__E4M3_NAN) return NAN;
    const float v = moeq__minifloat_mag_to_f32(mag, 4, 3);
    return (b & 0x80u) ? -v : v;
}

uint8_t moeq__f32_to_e4m3(float x) {
    const uint8_t sign = signbit(x) ? 0x80u : 0x00u;
    if (isnan(x)) return (uint8_t)(sign | MOEQ__E4M3_NAN);
    /* CT clamps to the finite range before the cast, so nothing rounds into
     * the NaN code: 448 = 0x7E. */
    if (!(fabsf(x) <= MOEQ__E4M3_MAX)) return (uint8_t)(sign | 0x7Eu);
    return (uint8_t)(sign | moeq__f32_to_minifloat_mag(x, 4, 3));
}

float moeq__e5m2_to_f32(uint8_t b) {
    const uint32_t mag = b & 0x7Fu;
    float v;
    if (mag == 0x7Cu) {
        v = INFINITY;
    } else if (mag > 0x7Cu) {
        return NAN;
    } else {
        v = moeq__minifloat_mag_to_f32(mag, 5, 2);
    }
    return (b & 0x80u) ? -v : v;
}

uint8_t moeq__f32_to_e5m2(float x) {
    const uint8_t sign = signbit(x) ? 0x80u : 0x00u;
    if (isnan(x)) return (uint8_t)(sign | 0x7Fu);
    if (isinf(x)) return (uint8_t)(sign | 0x7Cu);
    const uint32_t mag = moeq__f32_to_minifloat_mag(x, 5, 2);
    return (uint8_t)(sign | (mag >= 0x7Cu ? 0x7Cu : mag));
}

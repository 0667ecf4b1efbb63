/*
 * half.c - f32 <-> bf16 / f16 and the generic round-to-nearest-even narrowing
 * that the FP8 encoders share.
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

uint32_t moeq__f32_to_minifloat_mag(float x, int ebits, int mbits) {
    const uint32_t a = moeq__f32_bits(x) & 0x7FFFFFFFu;
    if (a == 0) return 0;
    /* |x| = sig * 2^(exp - 23) with sig < 2^24. */
    int32_t exp = (int32_t)(a >> 23) - 127;
    uint32_t sig = a & 0x7FFFFFu;
    if (exp == -127) {
        exp = -126; /* f32 subnormal: no implicit bit */
    } else {
        sig |= 0x800000u;
    }
    const int32_t bias = (1 << (ebits - 1)) - 1;
    const int32_t emin = 1 - bias;
    /* Quantum of the target at this magnitude: 2^(max(exp, emin) - mbits). */
    const int32_t et = exp > emin ? exp : emin;
    const int32_t drop = (et - mbits) - (exp - 23); /* >= 23 - mbits > 0 */
    uint32_t q;
    if (drop >= 32) {
        q = 0; /* below half the smallest subnormal: sig < 2^24 <= 2^(drop-1) */
    } else {
        q = sig >> drop;
        const uint32_t rem = sig & ((1u << drop) - 1u);
        const uint32_t half = 1u << (drop - 1);
        if (rem > half || (rem == half && (q & 1u))) q++;
    }
    /* For et == emin, q < 2^mbits is a subnormal mantissa and q == 2^mbits the
     * smallest normal; for et > emin, q in [2^m, 2^(m+1)] carries into the
     * exponent by itself.  Either way: */
    return ((uint32_t)(et - emin) << mbits) + q;
}

float moeq__minifloat_mag_to_f32(uint32_t mag, int ebits, int mbits) {
    const int32_t bias = (1 << (ebits - 1)) - 1;
    const uint32_t e = mag >> mbits;
    const uint32_t m = mag & ((1u << mbits) - 1u);
    if (e == 0) return ldexpf((float)m, 1 - bias - mbits);
    return ldexpf((float)((1u << mbits) | m), (int32_t)e - bias - mbits);
}

/* ---- bf16 ---------------------------------------------------------------- */

_Static_assert(sizeof(uint16_t) == 2, "bf16/f16 are stored as uint16_t");

/* moeq__bf16_to_f32 and moeq__f32_to_bf16 are inline in kernels.h. */

/* ---- f16 ------------------------------------------------------------------- */

float moeq__f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t mag = h & 0x7FFFu;
    if (mag >= 0x7C00u) {
        /* inf, or NaN with its payload moved to the f32 mantissa */
        return moeq__bits_f32(sign | 0x7F800000u | ((mag & 0x3FFu) << 13));
    }
    const float v = moeq__minifloat_mag_to_f32(mag, 5, 10);
    return sign ? -v : v;
}

uint16_t moeq__f32_to_f16(float x) {
    const uint32_t u = moeq__f32_bits(x);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x1FFu));
    if (a == 0x7F800000u) return (uint16_t)(sign | 0x7C00u);
    const uint32_t mag = moeq__f32_to_minifloat_mag(x, 5, 10);
    if (mag >= 0x7C00u) return (uint16_t)(sign | 0x7C00u); /* overflow -> inf */
    return (uint16_t)(sign | mag);
}

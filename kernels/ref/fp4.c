/*
 * fp4.c - FP4 E2M1 values, CT's FP4 rounding, nibble packing, E8M0 scales and
 * round_to_power_2 (spec §3.6, §3.7, §4.2).
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

float moeq__e2m1_to_f32(uint8_t code) {
    static const float magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float v = magnitude[code & 7u];
    return (code & 8u) ? -v : v;
}

float moeq__fp4_round_ref(float x) {
    if (isnan(x)) return x;
    const float a = fabsf(x);
    float r;
    if (a <= 0.25f) r = 0.0f;
    else if (a < 0.75f) r = 0.5f;
    else if (a <= 1.25f) r = 1.0f;
    else if (a < 1.75f) r = 1.5f;
    else if (a <= 2.5f) r = 2.0f;
    else if (a < 3.5f) r = 3.0f;
    else if (a <= 5.0f) r = 4.0f;
    else r = 6.0f;
    /* r * torch.sign(x): sign(+-0) is +0, so only a nonzero negative input
     * can produce -0.0. */
    if (x < 0.0f) return -r;
    return r;
}

uint8_t moeq__fp4_code_ref(float v) {
    const uint8_t sign = signbit(v) ? 8u : 0u;
    /* (x * 2).to(int8).abs(): truncation toward zero; NaN reads as 0. */
    const float t = fabsf(v * 2.0f);
    const int i = (t >= 0.0f && t < 127.0f) ? (int)t : (t >= 127.0f ? 127 : 0);
    uint8_t idx;
    switch (i) {
        case 1: idx = 1; break;
        case 2: idx = 2; break;
        case 3: idx = 3; break;
        case 4: idx = 4; break;
        case 6: idx = 5; break;
        case 8: idx = 6; break;
        default: idx = i >= 12 ? 7 : 0; break;
    }
    return (uint8_t)(sign | idx);
}

void moeq__fp4_pack_ref(const uint8_t *codes, size_t n, uint8_t *out) {
    for (size_t k = 0; 2 * k < n; k++) {
        const uint8_t lo = codes[2 * k] & 0xFu;
        const uint8_t hi = (2 * k + 1 < n) ? (uint8_t)(codes[2 * k + 1] & 0xFu) : 0u;
        out[k] = (uint8_t)(lo | (hi << 4));
    }
}

void moeq__fp4_set_ref(uint8_t *packed, size_t c, uint8_t code) {
    uint8_t *b = &packed[c >> 1];
    if (c & 1u) {
        *b = (uint8_t)((*b & 0x0Fu) | ((unsigned)code << 4));
    } else {
        *b = (uint8_t)((*b & 0xF0u) | ((unsigned)code & 0x0Fu));
    }
}

void moeq__fp4_unpack_ref(const void *packed, size_t first, size_t n, float *out) {
    const uint8_t *b = packed;
    for (size_t i = 0; i < n; i++) {
        const size_t c = first + i;
        const uint8_t code = (uint8_t)((c & 1u) ? (b[c >> 1] >> 4) : (b[c >> 1] & 0xFu));
        out[i] = moeq__e2m1_to_f32(code);
    }
}

/* ---- E8M0 ------------------------------------------------------------------ */

float moeq__e8m0_to_f32(uint8_t e) {
    return ldexpf(1.0f, (int)e - 127);
}

/* floor(log2(x)) for finite x > 0, exactly (subnormals included). */
static int floor_log2(float x) {
    int e;
    (void)frexpf(x, &e); /* x = f * 2^e, f in [0.5, 1) */
    return e - 1;
}

uint8_t moeq__e8m0_from_scale(float scale) {
    if (!(scale > 0.0f)) return 0; /* NaN, zero, negative */
    if (isinf(scale)) return 255;
    const int e = 127 + floor_log2(scale);
    return (uint8_t)(e < 0 ? 0 : (e > 255 ? 255 : e));
}

/* round_to_power_2 on the f32 pattern for an element mantissa of elem_m
 * bits: VAL_TO_ADD = 1 << (23 - elem_m - 1); the mask keeps 9 top bits. */
static float round_p2(float x, int elem_m) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = (u + (1u << (22 - elem_m))) & 0xFF800000u;
    float r;
    memcpy(&r, &u, sizeof r);
    return r;
}

float moeq__round_to_power_2_ref(float x) {
    return round_p2(x, 1);
}

static uint8_t mx_byte(float amax, int elem_emax, int elem_m) {
    if (isnan(amax)) return 0;
    const float p2 = round_p2(amax, elem_m);
    if (isinf(p2)) return 255;
    if (!(p2 > 0.0f)) return 0; /* log2(0) = -inf, clamped to 0 */
    const int e = 127 + floor_log2(p2) - elem_emax;
    return (uint8_t)(e < 0 ? 0 : (e > 255 ? 255 : e));
}

uint8_t moeq__mx_scale_byte_ref(float amax, int elem_emax) {
    return mx_byte(amax, elem_emax, 1);
}

uint8_t moeq__mx6_scale_byte_ref(float amax) {
    return mx_byte(amax, 2, 3);
}

/*
 * check_kernels.c - the reference kernels against the worked vectors of
 * shared/spec/compressed-tensors-format.md (§3.4-§3.7, §4.1-§4.5, §7, §7b
 * E1-E7), bit for bit, plus round-trip properties over awkward sizes.
 */
#include "test_util.h"
#include "kernels.h"

#include <fenv.h>
#include <math.h>
#include <stdint.h>

/* ---- helpers ------------------------------------------------------------- */

/* splitmix64: deterministic test data */
static uint64_t rng_state;
static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* uniform in [-1, 1) */
static float rng_uniform(void) {
    return (float)((double)(rng_next() >> 11) * 0x1p-53 * 2.0 - 1.0);
}
/* roughly normal, with an occasional outlier */
static float rng_weight(void) {
    float s = 0.0f;
    for (int i = 0; i < 4; i++) s += rng_uniform();
    if ((rng_next() & 63) == 0) s *= 8.0f;
    return s * 0.5f;
}

#define ck_assert_bits_eq(got, want)                                                  \
    do {                                                                               \
        const float g_ = (got), w_ = (want);                                           \
        ck_assert_msg(moeq__f32_bits(g_) == moeq__f32_bits(w_), "%s = %.9g (0x%08x), want %.9g (0x%08x)", \
                      #got, (double)g_, moeq__f32_bits(g_), (double)w_, moeq__f32_bits(w_));      \
    } while (0)

/* A qweight over codes with a plain (grid) layout. */
static moeq__qweight make_qweight(int32_t kind, size_t rows, size_t cols, const void *codes,
                                  size_t row_stride, moeq__grid grid, const float *scale,
                                  const float *zp, const int32_t *g_idx) {
    moeq__qweight w;
    memset(&w, 0, sizeof w);
    w.kind = kind;
    w.rows = rows;
    w.cols = cols;
    w.codes = codes;
    w.row_stride = row_stride;
    w.grid = grid;
    w.scale = scale;
    w.zero_point = zp;
    w.g_idx = g_idx;
    return w;
}

/* ---- bf16 / f16 ----------------------------------------------------------- */

START_TEST(test_bf16) {
    ck_assert_uint_eq(moeq__f32_to_bf16(1.0f), 0x3F80);
    ck_assert_uint_eq(moeq__f32_to_bf16(-0.0f), 0x8000);
    ck_assert_uint_eq(moeq__f32_to_bf16(1.0f + 0x1p-8f), 0x3F80);        /* tie -> even */
    ck_assert_uint_eq(moeq__f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);    /* tie -> even */
    ck_assert_uint_eq(moeq__f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
    ck_assert_uint_eq(moeq__f32_to_bf16(INFINITY), 0x7F80);
    ck_assert_uint_eq(moeq__f32_to_bf16(-INFINITY), 0xFF80);
    ck_assert_uint_eq(moeq__f32_to_bf16(3.4028235e38f), 0x7F80); /* rounds up to inf */
    ck_assert_uint_eq(moeq__f32_to_bf16(0x1p-133f), 0x0001);     /* smallest subnormal */
    ck_assert(isnan(moeq__bf16_to_f32(moeq__f32_to_bf16(NAN))));
    ck_assert(isnan(moeq__bf16_to_f32(moeq__f32_to_bf16(moeq__bits_f32(0x7F800001u)))));
    ck_assert(signbit(moeq__bf16_to_f32(moeq__f32_to_bf16(-NAN))));
    ck_assert_bits_eq(moeq__bf16_to_f32(0x4049), 3.140625f);
    /* every code survives a round trip */
    for (uint32_t h = 0; h <= 0xFFFF; h++) {
        const float v = moeq__bf16_to_f32((uint16_t)h);
        if (isnan(v)) continue;
        ck_assert_uint_eq(moeq__f32_to_bf16(v), h);
    }
}
END_TEST

/* Nearest-even check against the two neighbouring codes of a result. */
static void check_nearest_even(float x, uint16_t h, float (*dec)(uint16_t), uint16_t maxfin) {
    const uint16_t mag = h & 0x7FFF;
    const float v = dec(h);
    if (isinf(v)) {
        ck_assert(fabsf(x) >= dec(maxfin));
        return;
    }
    const double err = fabs((double)x - (double)v);
    if (mag < maxfin) {
        const double e_up = fabs((double)x - (double)dec((uint16_t)(h + 1)));
        ck_assert(err < e_up || (err == e_up && (h & 1) == 0));
    }
    if (mag > 0) {
        const double e_dn = fabs((double)x - (double)dec((uint16_t)(h - 1)));
        ck_assert(err < e_dn || (err == e_dn && (h & 1) == 0));
    }
}

START_TEST(test_f16) {
    ck_assert_uint_eq(moeq__f32_to_f16(1.0f), 0x3C00);
    ck_assert_uint_eq(moeq__f32_to_f16(65504.0f), 0x7BFF);
    ck_assert_uint_eq(moeq__f32_to_f16(65519.0f), 0x7BFF);
    ck_assert_uint_eq(moeq__f32_to_f16(65520.0f), 0x7C00); /* tie at the top -> inf */
    ck_assert_uint_eq(moeq__f32_to_f16(1e6f), 0x7C00);
    ck_assert_uint_eq(moeq__f32_to_f16(-1e6f), 0xFC00);
    ck_assert_uint_eq(moeq__f32_to_f16(0x1p-24f), 0x0001);
    ck_assert_uint_eq(moeq__f32_to_f16(0x1p-25f), 0x0000);        /* tie -> even (0) */
    ck_assert_uint_eq(moeq__f32_to_f16(0x1.8p-25f), 0x0001);
    ck_assert_uint_eq(moeq__f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400); /* rounds into normal */
    /* values torch gives */
    ck_assert_uint_eq(moeq__f32_to_f16(1000.0f), 0x63D0);
    ck_assert_uint_eq(moeq__f32_to_f16(-1000.0f), 0xE3D0);
    ck_assert_uint_eq(moeq__f32_to_f16(0x1p-10f), 0x1400);
    ck_assert_uint_eq(moeq__f32_to_f16(464.0f), 0x5F40);
    ck_assert_uint_eq(moeq__f32_to_f16(465.0f), 0x5F44);
    ck_assert_uint_eq(moeq__f32_to_f16(-0.0f), 0x8000);
    ck_assert(isnan(moeq__f16_to_f32(moeq__f32_to_f16(NAN))));
    ck_assert_bits_eq(moeq__f16_to_f32(0x7C00), INFINITY);
    ck_assert_bits_eq(moeq__f16_to_f32(0x0001), 0x1p-24f);
    for (uint32_t h = 0; h <= 0xFFFF; h++) {
        const float v = moeq__f16_to_f32((uint16_t)h);
        if (isnan(v)) continue;
        ck_assert_uint_eq(moeq__f32_to_f16(v), h);
    }
    rng_state = 1;
    for (int i = 0; i < 200000; i++) {
        /* random bit patterns around the f16 range */
        const uint32_t u = (uint32_t)(rng_next() & 0x87FFFFFFu) + 0x30000000u;
        const float x = moeq__bits_f32(u);
        if (!isfinite(x)) continue;
        check_nearest_even(fabsf(x), moeq__f32_to_f16(fabsf(x)), moeq__f16_to_f32, 0x7BFF);
    }
}
END_TEST

/* ---- FP8 (spec §3.5, E6) --------------------------------------------------- */

START_TEST(test_e4m3_decode_all) {
    for (uint32_t b = 0; b < 256; b++) {
        const float v = moeq__e4m3_to_f32((uint8_t)b);
        const uint32_t e = (b >> 3) & 15u, m = b & 7u;
        if ((b & 0x7Fu) == 0x7Fu) {
            ck_assert(isnan(v));
            continue;
        }
        const double mag = e == 0 ? (double)m / 8.0 * 0x1p-6 : (1.0 + (double)m / 8.0) * ldexp(1.0, (int)e - 7);
        ck_assert_bits_eq(v, (float)((b & 0x80u) ? -mag : mag));
        ck_assert_uint_eq(moeq__f32_to_e4m3(v), b); /* round trip */
    }
    ck_assert_bits_eq(moeq__e4m3_to_f32(0x7E), 448.0f);
    ck_assert_bits_eq(moeq__e4m3_to_f32(0x08), 0x1p-6f);
    ck_assert_bits_eq(moeq__e4m3_to_f32(0x01), 0x1p-9f);
    ck_assert_bits_eq(moeq__e4m3_to_f32(0x80), -0.0f);
    ck_assert(isnan(moeq__e4m3_to_f32(0xFF)));
}
END_TEST

START_TEST(test_e4m3_encode) {
    static const struct {
        float x;
        uint8_t b;
    } v[] = {
        {1.0f, 0x38},    {0.5f, 0x30},     {448.0f, 0x7E},  {-448.0f, 0xFE}, {240.0f, 0x77},
        {0.1f, 0x1D},    {3.14159f, 0x45}, {17.0f, 0x58},   {18.0f, 0x59},   {-0.0f, 0x80},
        {0.0f, 0x00},    {1000.0f, 0x7E},  {-1000.0f, 0xFE}, {464.0f, 0x7E},  {465.0f, 0x7E},
        {INFINITY, 0x7E}, {-INFINITY, 0xFE}, {0x1p-10f, 0x00}, {0x1.8p-10f, 0x01},
        {0x1p-9f, 0x01}, {0x1.8p-9f, 0x02}, /* subnormal tie -> even */
        {64.0f, 0x68},   {-224.0f, 0xF6},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        ck_assert_msg(moeq__f32_to_e4m3(v[i].x) == v[i].b, "e4m3(%g) = 0x%02x, want 0x%02x",
                      (double)v[i].x, moeq__f32_to_e4m3(v[i].x), v[i].b);
    }
    ck_assert_uint_eq(moeq__f32_to_e4m3(NAN), 0x7F);
    ck_assert_uint_eq(moeq__f32_to_e4m3(-NAN), 0xFF); /* sign kept, as torch */
    ck_assert_bits_eq(moeq__e4m3_to_f32(0x1D), 0.1015625f);
    ck_assert_bits_eq(moeq__e4m3_to_f32(0x45), 3.25f);
}
END_TEST

START_TEST(test_e5m2) {
    ck_assert_bits_eq(moeq__e5m2_to_f32(0x7C), INFINITY);
    ck_assert_bits_eq(moeq__e5m2_to_f32(0xFC), -INFINITY);
    ck_assert(isnan(moeq__e5m2_to_f32(0x7D)));
    ck_assert(isnan(moeq__e5m2_to_f32(0xFF)));
    ck_assert_bits_eq(moeq__e5m2_to_f32(0x7B), 57344.0f);
    ck_assert_bits_eq(moeq__e5m2_to_f32(0x01), 0x1p-16f);
    ck_assert_bits_eq(moeq__e5m2_to_f32(0x3C), 1.0f);
    ck_assert_uint_eq(moeq__f32_to_e5m2(57344.0f), 0x7B);
    ck_assert_uint_eq(moeq__f32_to_e5m2(61440.0f), 0x7C); /* tie -> even = inf, as torch */
    ck_assert_uint_eq(moeq__f32_to_e5m2(1e6f), 0x7C);
    ck_assert_uint_eq(moeq__f32_to_e5m2(NAN), 0x7F);
    ck_assert_uint_eq(moeq__f32_to_e5m2(-2.0f), 0xC0);
    for (uint32_t b = 0; b < 256; b++) {
        const float v = moeq__e5m2_to_f32((uint8_t)b);
        if (isnan(v)) continue;
        ck_assert_uint_eq(moeq__f32_to_e5m2(v), b);
    }
}
END_TEST

START_TEST(test_convert_arrays) {
    const float src[6] = {1.0f, -2.5f, 0.1f, 448.0f, -0.0f, 3.0f};
    uint8_t buf[6 * 8 + 1];
    float back[6];
    static const int32_t dtypes[] = {MOEQ_DTYPE_F64, MOEQ_DTYPE_F32, MOEQ_DTYPE_F16,
                                     MOEQ_DTYPE_BF16, MOEQ_DTYPE_F8_E4M3, MOEQ_DTYPE_F8_E5M2};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        /* misaligned on purpose */
        moeq__from_f32_ref(dtypes[d], src, 6, buf + 1);
        moeq__to_f32_ref(dtypes[d], buf + 1, 6, back);
        for (int i = 0; i < 6; i++) {
            ck_assert_bits_eq(back[i], moeq__round_to_dtype(MOEQ_DTYPE_F32, back[i]));
            if (dtypes[d] == MOEQ_DTYPE_F64 || dtypes[d] == MOEQ_DTYPE_F32) {
                ck_assert_bits_eq(back[i], src[i]);
            }
        }
        ck_assert_bits_eq(back[0], 1.0f);
        ck_assert_bits_eq(back[4], -0.0f);
    }
    const uint8_t ints[4] = {0xFF, 0x80, 0x7F, 0x01};
    moeq__to_f32_ref(MOEQ_DTYPE_I8, ints, 4, back);
    ck_assert_bits_eq(back[0], -1.0f);
    ck_assert_bits_eq(back[1], -128.0f);
    moeq__to_f32_ref(MOEQ_DTYPE_U8, ints, 4, back);
    ck_assert_bits_eq(back[0], 255.0f);
    moeq__to_f32_ref(MOEQ_DTYPE_I16, ints, 2, back);
    ck_assert_bits_eq(back[0], -32513.0f); /* 0x80FF */
    moeq__to_f32_ref(MOEQ_DTYPE_I32, ints, 1, back);
    ck_assert_bits_eq(back[0], (float)(int32_t)0x017F80FF);
    ck_assert_bits_eq(moeq__round_to_dtype(MOEQ_DTYPE_BF16, 1.0f + 0x1p-9f), 1.0f);
    ck_assert_bits_eq(moeq__round_to_dtype(MOEQ_DTYPE_F16, 1.0f + 0x1p-9f), 1.0f + 0x1p-9f);
    ck_assert_bits_eq(moeq__dtype_eps(MOEQ_DTYPE_BF16), 0.0078125f);
    ck_assert_bits_eq(moeq__dtype_eps(MOEQ_DTYPE_F16), 0.0009765625f);
    ck_assert_bits_eq(moeq__dtype_eps(MOEQ_DTYPE_F32), 1.1920929e-07f);
    /* torch.round */
    ck_assert_bits_eq(moeq__round_half_even(2.5f), 2.0f);
    ck_assert_bits_eq(moeq__round_half_even(3.5f), 4.0f);
    ck_assert_bits_eq(moeq__round_half_even(-1.5f), -2.0f);
    ck_assert_bits_eq(moeq__round_half_even(-2.5f), -2.0f);
    ck_assert_bits_eq(moeq__round_half_even(0.49999997f), 0.0f);
    ck_assert_bits_eq(moeq__round_half_even(7.5f), 8.0f);
    ck_assert_bits_eq(moeq__round_half_even(8388609.0f), 8388609.0f);
    ck_assert_bits_eq(moeq__round_half_even(-0.0f), -0.0f);
    ck_assert_bits_eq(moeq__round_half_even(-0.3f), 0.0f);
    /* against the floor-and-parity definition, over every float with a
     * fraction step of 2^-12 and more (sign, exponents -13..23, mantissas
     * strided), in every rounding mode */
    static const int modes[4] = {FE_TONEAREST, FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO};
    for (uint32_t u = 0x39800000u; u < 0x4B800000u; u += 0x3F1u) {
        for (int neg = 0; neg < 2; neg++) {
            const float x = moeq__bits_f32(u | (neg ? 0x80000000u : 0u));
            const float f = floorf(x), d = x - f; /* in the default mode */
            const float want = d > 0.5f                ? f + 1.0f
                               : d < 0.5f              ? f
                               : fmodf(f, 2.0f) == 0.0f ? f
                                                        : f + 1.0f;
            const uint32_t exp = moeq__f32_bits(fabsf(x) < 0x1p23f ? want : x);
            uint32_t got[4];
            for (int mi = 0; mi < 4; mi++) {
                fesetround(modes[mi]);
                got[mi] = moeq__f32_bits(moeq__round_half_even(x));
            }
            fesetround(FE_TONEAREST);
            for (int mi = 0; mi < 4; mi++) {
                ck_assert_msg(got[mi] == exp, "round_half_even(%a) in mode %d", (double)x, mi);
            }
        }
    }
}
END_TEST

/* ---- FP4 (spec §3.6, §4.2) ------------------------------------------------ */

START_TEST(test_fp4_round) {
    static const float in[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.3f,
                               0.6f,  0.9f,  1.3f,  1.8f,  2.7f, 4.5f, 7.0f, 0.0f,
                               0.2f,  1.0f,  6.0f,  100.0f};
    static const float want[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, 0.5f,
                                 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, 0.0f,
                                 0.0f, 1.0f, 6.0f, 6.0f};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        ck_assert_bits_eq(moeq__fp4_round_ref(in[i]), want[i]);
        ck_assert_bits_eq(moeq__fp4_round_ref(-in[i]), in[i] == 0.0f ? 0.0f : -want[i]);
    }
    /* CT: a small negative keeps its sign (-0.0), an input of -0.0 does not */
    ck_assert_bits_eq(moeq__fp4_round_ref(-0.1f), -0.0f);
    ck_assert_bits_eq(moeq__fp4_round_ref(-0.25f), -0.0f);
    ck_assert_bits_eq(moeq__fp4_round_ref(-0.0f), 0.0f);
    ck_assert(isnan(moeq__fp4_round_ref(NAN)));
}
END_TEST

START_TEST(test_fp4_codes_and_packing) {
    static const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    uint8_t codes[16], packed[8];
    for (int i = 0; i < 8; i++) {
        ck_assert_bits_eq(moeq__e2m1_to_f32((uint8_t)i), grid[i]);
        ck_assert_bits_eq(moeq__e2m1_to_f32((uint8_t)(i | 8)), -grid[i]);
        codes[i] = moeq__fp4_code_ref(grid[i]);
        codes[8 + i] = moeq__fp4_code_ref(-grid[i]);
        ck_assert_uint_eq(codes[i], i);
        ck_assert_uint_eq(codes[8 + i], 8 + i);
    }
    /* test_fp4_optimizations: [0, .5, 1, 1.5, 2, 3, 4, 6] and negatives */
    moeq__fp4_pack_ref(codes, 16, packed);
    static const uint8_t want[8] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE};
    ck_assert_mem_eq(packed, want, 8);
    float back[16];
    moeq__fp4_unpack_ref(packed, 0, 16, back);
    for (int i = 0; i < 8; i++) {
        ck_assert_bits_eq(back[i], grid[i]);
        ck_assert_bits_eq(back[8 + i], -grid[i]);
    }
    ck_assert(signbit(back[8])); /* -0.0 packs to 0x8 and unpacks to -0.0 */
    /* unpack from an odd offset */
    moeq__fp4_unpack_ref(packed, 3, 3, back);
    ck_assert_bits_eq(back[0], 1.5f);
    ck_assert_bits_eq(back[2], 3.0f);
    /* odd count: last high nibble zero */
    moeq__fp4_pack_ref(codes + 7, 3, packed);
    ck_assert_uint_eq(packed[0], 0x87);
    ck_assert_uint_eq(packed[1], 0x09);
    /* mixed signs, 4x8 with -0.0 (test_fp4_quant round trip) */
    float m[32], mback[32];
    uint8_t mc[32], mp[16];
    for (int i = 0; i < 32; i++) {
        m[i] = (i % 3 == 0 ? -1.0f : 1.0f) * grid[(i * 5) % 8];
        mc[i] = moeq__fp4_code_ref(m[i]);
    }
    moeq__fp4_pack_ref(mc, 32, mp);
    moeq__fp4_unpack_ref(mp, 0, 32, mback);
    for (int i = 0; i < 32; i++) ck_assert_uint_eq(moeq__f32_bits(mback[i]), moeq__f32_bits(m[i]));
    /* CT's code rule for values off the grid: by equality of trunc(|2x|) */
    ck_assert_uint_eq(moeq__fp4_code_ref(5.0f), 0);
    ck_assert_uint_eq(moeq__fp4_code_ref(7.0f), 7);
    ck_assert_uint_eq(moeq__fp4_code_ref(NAN), 0);
}
END_TEST

/* ---- E8M0 and round_to_power_2 (spec §3.7, E7) ---------------------------- */

/* FP6 E2M3 (CT 0.20 mxfp6/helpers.py, fp6_utils.py): the 32 magnitudes, the
 * packing of four codes in three bytes and cast_to_fp6, values from CT 0.20.1. */
START_TEST(test_fp6_codes_and_packing) {
    for (uint8_t c = 0; c < 32; c++) {
        const float want = c < 8 ? (float)c / 8.0f : ldexpf(1.0f + (float)(c & 7u) / 8.0f, c / 8 - 1);
        ck_assert_bits_eq(moeq__e2m3_to_f32(c), want);
        ck_assert_bits_eq(moeq__e2m3_to_f32((uint8_t)(c | 0x20u)), -want);
        ck_assert_int_eq(moeq__e2m3_times8(c), (int)(want * 8.0f));
        ck_assert_int_eq(moeq__e2m3_times8((uint8_t)(c | 0x20u)), -(int)(want * 8.0f));
        ck_assert_uint_eq(moeq__fp6_code_ref(want), c);
    }
    ck_assert_bits_eq(moeq__e2m3_to_f32(31), 7.5f);
    ck_assert_uint_eq(moeq__fp6_code_ref(-0.0f), 0x20u);
    /* pack_fp6_to_uint8([[0.125, -7.5, 3.0, -0.0, 1.375, 2.25, -5.0, 0.0]]) */
    static const float vals[8] = {0.125f, -7.5f, 3.0f, -0.0f, 1.375f, 2.25f, -5.0f, 0.0f};
    static const uint8_t want_bytes[6] = {193, 79, 129, 75, 164, 3};
    uint8_t row[6] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
    for (size_t c = 0; c < 8; c++) moeq__fp6_set_ref(row, c, moeq__fp6_code_ref(vals[c]));
    for (int i = 0; i < 6; i++) ck_assert_uint_eq(row[i], want_bytes[i]);
    float back[8];
    moeq__fp6_unpack_ref(row, 0, 8, back);
    for (size_t c = 0; c < 8; c++) ck_assert_bits_eq(back[c], vals[c]);
    for (size_t c = 0; c < 8; c++) ck_assert_uint_eq(moeq__fp6_get(row, c), moeq__fp6_code_ref(vals[c]));
    /* cast_to_fp6: ties to even on a step of 2^(max(e, 0) - 3), clamp 7.5 */
    static const float in[] = {0.0625f, 0.1875f, 1.0625f, 1.9375f, 2.125f, 2.375f, 3.75f, 3.875f,
                               4.25f, 6.75f, 7.25f, 7.4f, -0.01f, -2.1f, 100.0f, 1e-40f};
    static const float out[] = {0.0f, 0.25f, 1.0f, 2.0f, 2.0f, 2.5f, 3.75f, 4.0f,
                                4.0f, 7.0f, 7.0f, 7.5f, -0.0f, -2.0f, 7.5f, 0.0f};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        ck_assert_bits_eq(moeq__fp6_round_ref(in[i]), out[i]);
    }
    ck_assert(isnan(moeq__fp6_round_ref(NAN)));
}
END_TEST

/* An MXFP6 weight packs as I8 codes (8 * value) with its scales / 8: the
 * packed decode equals the reference decode bit for bit, but for the sign of
 * zero (code 0x20, -0.0, becomes the integer 0: +0.0 once packed). */
START_TEST(test_mxfp6_packs_exactly) {
    enum { R = 20, C = 64 };
    uint8_t codes[R * C / 4 * 3];
    float scale[R * 2];
    rng_state = 11;
    for (size_t i = 0; i < sizeof codes; i++) codes[i] = (uint8_t)rng_next();
    for (size_t i = 0; i < R * 2; i++) scale[i] = ldexpf(1.0f, (int)(rng_next() % 20) - 14);
    moeq__grid grid = {R, 2, 1, 32};
    moeq__qweight w = make_qweight(MOEQ__QW_E2M3, R, C, codes, C / 4 * 3, grid, scale, NULL, NULL);
    float want[R * C], got[R * C];
    moeq__dequant_ref(&w, 0, R, want);
    moeq__packed pk;
    ck_assert(moeq__pk_plan(&w, 0.0f, &pk));
    ck_assert_int_eq(pk.code, MOEQ__PK_I8);
    ck_assert_int_eq(pk.scale_kind, MOEQ__PS_E8M0);
    uint8_t *buf = malloc(pk.blocks * (pk.blk_code_bytes + pk.blk_scale_bytes));
    uint8_t row_buf[C];
    moeq__pk_fill(&w, &pk, buf, buf + pk.blocks * pk.blk_code_bytes, row_buf);
    pk.codes = buf;
    pk.scales = buf + pk.blocks * pk.blk_code_bytes;
    moeq__pk_dequant_ref(&pk, 0, R, got);
    size_t neg_zero = 0;
    for (size_t i = 0; i < R * C; i++) {
        if (want[i] == 0.0f && signbit(want[i])) want[i] = 0.0f, neg_zero++;
        ck_assert_bits_eq(got[i], want[i]);
    }
    ck_assert_uint_gt(neg_zero, 0); /* the random codes hold some 0x20 */
    float v[C], tv[C];
    moeq__pk_decode_row_ref(&pk, 3, 0, C, v);
    moeq__decode_row_ref(&w, 3, 0, C, tv);
    for (size_t i = 0; i < C; i++) ck_assert_float_eq(v[i], tv[i]);
    free(buf);
}
END_TEST

START_TEST(test_e8m0) {
    ck_assert_uint_eq(moeq__e8m0_from_scale(0.25f), 125);
    ck_assert_uint_eq(moeq__e8m0_from_scale(0.5f), 126);
    ck_assert_uint_eq(moeq__e8m0_from_scale(1.0f), 127);
    ck_assert_uint_eq(moeq__e8m0_from_scale(0.75f), 126); /* floor */
    ck_assert_uint_eq(moeq__e8m0_from_scale(0x1p-127f), 0);
    ck_assert_uint_eq(moeq__e8m0_from_scale(0x1p-140f), 0);
    ck_assert_uint_eq(moeq__e8m0_from_scale(0.0f), 0);
    ck_assert_uint_eq(moeq__e8m0_from_scale(INFINITY), 255);
    ck_assert_bits_eq(moeq__e8m0_to_f32(125), 0.25f);
    ck_assert_bits_eq(moeq__e8m0_to_f32(126), 0.5f);
    ck_assert_bits_eq(moeq__e8m0_to_f32(0), 0x1p-127f);
    ck_assert_bits_eq(moeq__e8m0_to_f32(254), 0x1p127f);
    ck_assert_bits_eq(moeq__e8m0_to_f32(255), INFINITY);
    for (int e = 0; e < 255; e++) ck_assert_uint_eq(moeq__e8m0_from_scale(moeq__e8m0_to_f32((uint8_t)e)), e);
}
END_TEST

START_TEST(test_round_to_power_2) {
    static const struct {
        float x, want;
    } v[] = {
        {1.7f, 1.0f},      {1.75f, 2.0f},     {3.0f, 2.0f},      {3.5f, 4.0f},
        {6.0f, 4.0f},      {0.3f, 0.25f},     {5.6879f, 4.0f},   {-8.2916f, -8.0f},
        {0.9653f, 1.0f},   {7.2902f, 8.0f},   {-0.0406f, -0.03125f}, {0.0f, 0.0f},
        {0x1p-130f, 0.0f}, /* subnormal: exponent field 0 */
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        ck_assert_bits_eq(moeq__round_to_power_2_ref(v[i].x), v[i].want);
    }
    /* example of §3.7: amax 0.18 -> p2 0.125 -> byte 122 -> 2^-5 */
    ck_assert_uint_eq(moeq__mx_scale_byte_ref(0.18f, 2), 122);
    ck_assert_bits_eq(moeq__e8m0_to_f32(122), 0.03125f);
    ck_assert_uint_eq(moeq__mx_scale_byte_ref(0.0f, 2), 0);
    ck_assert_uint_eq(moeq__mx_scale_byte_ref(NAN, 2), 0);
    ck_assert_uint_eq(moeq__mx_scale_byte_ref(INFINITY, 2), 255);
    ck_assert_uint_eq(moeq__mx_scale_byte_ref(0x1p-126f, 2), 0); /* 127 - 126 - 2 < 0 */
    /* FP6 (CT 0.20 _MX_ELEM_OFFSET 2, round_to_power_2 with E2M3's 3 mantissa
     * bits): 7.5 * 2^k stays at 2^k, 7.75 * 2^k rounds up to 2^(k+1) */
    ck_assert_uint_eq(moeq__mx6_scale_byte_ref(7.5f), 127);
    ck_assert_uint_eq(moeq__mx6_scale_byte_ref(7.75f), 128);
    ck_assert_uint_eq(moeq__mx6_scale_byte_ref(0.96875f), 125); /* 7.75 * 2^-3 */
    ck_assert_uint_eq(moeq__mx6_scale_byte_ref(0.9375f), 124);  /* 7.5 * 2^-3 */
    ck_assert_uint_eq(moeq__mx_scale_byte_ref(0.9375f, 2), 125); /* FP4's rounding differs */
    /* test_mxfp4_utils / test_mxfp8_utils: log2(scale) ==
     * floor(log2(round_pow2(amax))) - 2 (fp4) / - 8 (fp8) */
    rng_state = 7;
    for (int i = 0; i < 10000; i++) {
        const float amax = fabsf(rng_uniform()) * ldexpf(1.0f, (int)(rng_next() % 40) - 20) + 1e-30f;
        const float p2 = moeq__round_to_power_2_ref(amax);
        int e;
        (void)frexpf(p2, &e);
        ck_assert_int_eq((int)moeq__mx_scale_byte_ref(amax, 2) - 127, e - 1 - 2);
        ck_assert_int_eq((int)moeq__mx_scale_byte_ref(amax, 8) - 127, e - 1 - 8);
        /* p2 is within [amax / 1.75, amax * 8/7) */
        ck_assert(p2 <= amax * (8.0f / 7.0f) && p2 * 1.75f > amax);
    }
}
END_TEST

/* ---- pack-quantized (spec §3.4, E5, §7 vectors of 0.17.1) ------------------ */

typedef struct pack_vector {
    int bits;
    int8_t values[40];
    size_t n;
    uint32_t dense[6];
    size_t n_dense;
    uint32_t legacy[6]; /* n_legacy 0: same as dense */
    size_t n_legacy;
} pack_vector;

static const pack_vector pack_vectors[] = {
    {4, {-8, -7, -6, -5, -4, -3, -2, -1}, 8, {0x76543210u}, 1, {0}, 0},
    {4, {0, 1, 2, 3, 4, 5, 6, 7}, 8, {0xFEDCBA98u}, 1, {0}, 0},
    {4, {1, 2, 3, 4}, 4, {52137u}, 1, {0}, 0},
    {4, {7, -8, 0, -1, 3, -3, 5, -6}, 8, {0x2D5B780Fu}, 1, {0}, 0},
    {4, {7, -6, 1, -8, 2, 0, -2, 4}, 8, {0xC68A092Fu}, 1, {0}, 0},
    {4, {5, -3, 0}, 3, {0x0000085Du}, 1, {0}, 0},
    {4, {-8, -7, -6, -5, -4, -3, -2, -1, 1, 2, 3, 4}, 12, {0x76543210u, 0x0000CBA9u}, 2, {0}, 0},
    {4, {1}, 1, {9u}, 1, {0}, 0},
    {8, {1}, 1, {129u}, 1, {0}, 0},
    {8, {1, 2, 3, 4}, 4, {0x84838281u}, 1, {0}, 0}, /* -2071756159 */
    {8, {-128, -127, -126, -125}, 4, {50462976u}, 1, {0}, 0},
    {8, {127, -128, 0, -1}, 4, {0x7F8000FFu}, 1, {0}, 0},
    {2, {1, -1, 1, -1, 1, -1, 1, -1, 1, -1}, 10, {0x00077777u}, 1, {0}, 0},
    {3,
     {-4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2, -1, 0, 1, 2, 3,
      -4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2, -1, 0, 1, 2, 3},
     32,
     {0x88FAC688u, 0xC688FAC6u, 0xFAC688FAu},
     3,
     {0x08FAC688u, 0x1A23EB1Au, 0x2C688FACu, 0x0000003Eu},
     4},
    {3, {-4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2}, 11, {0x88FAC688u, 0x00000000u}, 2,
     {0x08FAC688u, 0x00000002u}, 2},
};

START_TEST(test_pack_vectors) {
    for (size_t v = 0; v < sizeof pack_vectors / sizeof pack_vectors[0]; v++) {
        const pack_vector *pv = &pack_vectors[v];
        for (int legacy = 0; legacy <= 1; legacy++) {
            const uint32_t *want = (legacy && pv->n_legacy) ? pv->legacy : pv->dense;
            const size_t nw = (legacy && pv->n_legacy) ? pv->n_legacy : pv->n_dense;
            uint32_t words[8];
            ck_assert_uint_eq(moeq__int_packed_words(pv->n, pv->bits, legacy), nw);
            moeq__int_pack_row_ref(pv->values, pv->n, pv->bits, legacy, words);
            for (size_t i = 0; i < nw; i++) {
                ck_assert_msg(words[i] == want[i], "vector %zu legacy %d word %zu: 0x%08x, want 0x%08x",
                              v, legacy, i, words[i], want[i]);
            }
            int8_t back[40];
            moeq__int_unpack_row_ref(want, 0, pv->n, pv->bits, legacy, back);
            ck_assert_mem_eq(back, pv->values, pv->n);
        }
    }
    /* 2-row variant of the 0.17.1 tests: rows pack independently */
    const int8_t two[2][4] = {{1, 2, 3, 4}, {-8, -7, -6, -5}};
    uint32_t w2[2];
    moeq__int_pack_row_ref(two[0], 4, 4, false, &w2[0]);
    moeq__int_pack_row_ref(two[1], 4, 4, false, &w2[1]);
    ck_assert_uint_eq(w2[0], 52137u);
    ck_assert_uint_eq(w2[1], 0x00003210u);
    /* widths: 3-bit, in = 4096 -> legacy 410 words, dense 384 */
    ck_assert_uint_eq(moeq__int_packed_words(4096, 3, false), 384);
    ck_assert_uint_eq(moeq__int_packed_words(4096, 3, true), 410);
    ck_assert_uint_eq(moeq__int_packed_words(0, 3, false), 0);
    ck_assert_uint_eq(moeq__int_packed_words(33, 5, false), 6);
    ck_assert_uint_eq(moeq__int_packed_words(33, 5, true), 6);
    ck_assert_uint_eq(moeq__int_packed_words(100, 7, true), 25);
    ck_assert_uint_eq(moeq__int_packed_words(100, 7, false), 22);
    ck_assert_uint_eq(moeq__int_packed_words((size_t)1 << 60, 8, false), (size_t)1 << 58);
}
END_TEST

START_TEST(test_pack_zero_points_dim0) {
    /* §3.4: zp column [-4,0,3,-8,7,1,-1,2,5,-6] (10 rows, 1 group) */
    const int8_t zp[10] = {-4, 0, 3, -8, 7, 1, -1, 2, 5, -6};
    uint32_t packed[2];
    moeq__int_pack_cols_ref(zp, 10, 1, 4, false, packed);
    ck_assert_uint_eq(packed[0], 0xA79F0B84u);
    ck_assert_uint_eq(packed[1], 0x0000002Du);
    int8_t back[10];
    moeq__int_unpack_cols_ref(packed, 10, 1, 4, false, back);
    ck_assert_mem_eq(back, zp, 10);
    /* E1: zero points [[-4, 1], [0, -8]] -> I32 [1, 2] = [[0x84, 0x09]] */
    const int8_t e1[4] = {-4, 1, 0, -8};
    uint32_t e1p[2];
    moeq__int_pack_cols_ref(e1, 2, 2, 4, false, e1p);
    ck_assert_uint_eq(e1p[0], 0x00000084u);
    ck_assert_uint_eq(e1p[1], 0x00000009u);
    /* E4: asymmetric zp -4 (1 row, 1 group) -> 0x00000004 */
    const int8_t e4 = -4;
    uint32_t e4p;
    moeq__int_pack_cols_ref(&e4, 1, 1, 4, false, &e4p);
    ck_assert_uint_eq(e4p, 4u);
}
END_TEST

static const size_t awkward[] = {1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 33, 127, 129};
#define N_AWKWARD (sizeof awkward / sizeof awkward[0])

/* pack o unpack is the identity for every width, layout and awkward size;
 * unpacking from any offset gives the slice; b in {1,2,4,8} gives equal words
 * in both layouts. */
START_TEST(test_pack_roundtrip) {
    const int bits = _i / 2 + 1;
    const bool legacy = _i % 2;
    rng_state = (uint64_t)_i + 100;
    for (size_t s = 0; s < N_AWKWARD; s++) {
        const size_t n = awkward[s];
        int8_t q[129], back[129];
        uint32_t words[129], other[129];
        for (size_t i = 0; i < n; i++) {
            q[i] = (int8_t)((int32_t)(rng_next() % (1u << bits)) - (1 << (bits - 1)));
        }
        moeq__int_pack_row_ref(q, n, bits, legacy, words);
        moeq__int_unpack_row_ref(words, 0, n, bits, legacy, back);
        ck_assert_mem_eq(back, q, n);
        for (size_t first = 0; first < n; first += 7) {
            const size_t len = n - first < 9 ? n - first : 9;
            moeq__int_unpack_row_ref(words, first, len, bits, legacy, back);
            ck_assert_mem_eq(back, q + first, len);
        }
        if (32 % bits == 0) {
            moeq__int_pack_row_ref(q, n, bits, !legacy, other);
            ck_assert_mem_eq(other, words, moeq__int_packed_words(n, bits, legacy) * 4);
        }
        /* along dim 0, for a [n, 3] matrix */
        int8_t m[129 * 3], mb[129 * 3];
        uint32_t mp[129 * 3];
        for (size_t i = 0; i < n * 3; i++) {
            m[i] = (int8_t)((int32_t)(rng_next() % (1u << bits)) - (1 << (bits - 1)));
        }
        moeq__int_pack_cols_ref(m, n, 3, bits, legacy, mp);
        moeq__int_unpack_cols_ref(mp, n, 3, bits, legacy, mb);
        ck_assert_mem_eq(mb, m, n * 3);
    }
}
END_TEST

START_TEST(test_mxint4_repack) {
    const uint32_t w = 0x2D5B780Fu; /* [7,-8,0,-1,3,-3,5,-6] */
    uint8_t bytes[4];
    moeq__mxint4_repack_ref(&w, 8, bytes);
    static const uint8_t want[4] = {0x87, 0xF0, 0xD3, 0xA5};
    ck_assert_mem_eq(bytes, want, 4);
    uint32_t back;
    moeq__mxint4_unrepack_ref(bytes, 8, &back);
    ck_assert_uint_eq(back, w);
    /* random rows of awkward lengths */
    rng_state = 5;
    for (size_t s = 0; s < N_AWKWARD; s++) {
        const size_t n = awkward[s];
        int8_t q[129];
        uint32_t words[17], again[17];
        uint8_t by[65];
        for (size_t i = 0; i < n; i++) q[i] = (int8_t)((int32_t)(rng_next() % 16) - 8);
        moeq__int_pack_row_ref(q, n, 4, false, words);
        moeq__mxint4_repack_ref(words, n, by);
        for (size_t i = 0; i < n; i++) {
            const uint8_t nib = (i & 1) ? (uint8_t)(by[i / 2] >> 4) : (uint8_t)(by[i / 2] & 15);
            ck_assert_int_eq(nib >= 8 ? nib - 16 : nib, q[i]);
        }
        moeq__mxint4_unrepack_ref(by, n, again);
        ck_assert_mem_eq(again, words, moeq__int_packed_words(n, 4, false) * 4);
        /* the kernel reads the repacked form too */
        moeq__grid grid = {1, 1, 1, n};
        const float one = 1.0f;
        moeq__qweight qw = make_qweight(MOEQ__QW_INT4_NIBBLES, 1, n, by, 0, grid, &one, NULL, NULL);
        float out[129];
        moeq__dequant_ref(&qw, 0, 1, out);
        for (size_t i = 0; i < n; i++) ck_assert_bits_eq(out[i], (float)q[i]);
    }
}
END_TEST

/* ---- scale grid -------------------------------------------------------------- */

START_TEST(test_scale_grid) {
    moeq__grid g;
    ck_assert(moeq__scale_grid(MOEQ_STRATEGY_TENSOR, 7, 9, 0, 0, 0, &g));
    ck_assert(g.rows == 1 && g.cols == 1 && g.row_block == 7 && g.col_block == 9);
    ck_assert(moeq__scale_grid(MOEQ_STRATEGY_CHANNEL, 7, 9, 0, 0, 0, &g));
    ck_assert(g.rows == 7 && g.cols == 1 && g.row_block == 1 && g.col_block == 9);
    ck_assert(moeq__scale_grid(MOEQ_STRATEGY_GROUP, 768, 1920, 128, 0, 0, &g));
    ck_assert(g.rows == 768 && g.cols == 15 && g.col_block == 128);
    ck_assert(moeq__scale_grid(MOEQ_STRATEGY_GROUP, 4, 100, 32, 0, 0, &g));
    ck_assert_uint_eq(g.cols, 4); /* partial last group */
    ck_assert(moeq__scale_grid(MOEQ_STRATEGY_BLOCK, 10944, 2048, 0, 128, 128, &g));
    ck_assert(g.rows == 86 && g.cols == 16); /* §1.6 */
    ck_assert(moeq__scale_grid(MOEQ_STRATEGY_BLOCK, 3, 5, 0, 2, 4, &g));
    ck_assert(g.rows == 2 && g.cols == 2); /* E2 */
    ck_assert(moeq__scale_grid(MOEQ_STRATEGY_TENSOR, 0, 0, 0, 0, 0, &g));
    ck_assert(g.row_block == 1 && g.col_block == 1);
    ck_assert(!moeq__scale_grid(MOEQ_STRATEGY_TOKEN, 4, 4, 0, 0, 0, &g));
    ck_assert(!moeq__scale_grid(MOEQ_STRATEGY_GROUP, 4, 4, 0, 0, 0, &g));
    ck_assert(!moeq__scale_grid(MOEQ_STRATEGY_BLOCK, 4, 4, 0, 0, 2, &g));
}
END_TEST

/* ---- dequantization: E1, E2, MXFP4 vector ------------------------------------ */

static const int8_t e1_q[2][16] = {
    {7, -8, 0, -1, 3, -3, 5, -6, 1, 2, 3, 4, -1, -2, -3, -4},
    {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7},
};
static const uint32_t e1_packed[4] = {0x2D5B780Fu, 0x4567CBA9u, 0x76543210u, 0xFEDCBA98u};
static const float e1_scale[4] = {0.25f, 0.125f, 0.5f, 0.0625f};

START_TEST(test_e1_pack_and_dequant) {
    uint32_t words[4];
    moeq__int_pack_row_ref(e1_q[0], 16, 4, false, words);
    moeq__int_pack_row_ref(e1_q[1], 16, 4, false, words + 2);
    ck_assert_mem_eq(words, e1_packed, sizeof words);

    moeq__grid grid;
    ck_assert(moeq__scale_grid(MOEQ_STRATEGY_GROUP, 2, 16, 8, 0, 0, &grid));
    moeq__qweight w = make_qweight(MOEQ__QW_INT_PACKED, 2, 16, e1_packed, 8, grid, e1_scale,
                                   NULL, NULL);
    w.bits = 4;
    float out[32];
    static const float sym[32] = {1.75f, -2, 0, -0.25f, 0.75f, -0.75f, 1.25f, -1.5f,
                                  0.125f, 0.25f, 0.375f, 0.5f, -0.125f, -0.25f, -0.375f, -0.5f,
                                  -4, -3.5f, -3, -2.5f, -2, -1.5f, -1, -0.5f,
                                  0, 0.0625f, 0.125f, 0.1875f, 0.25f, 0.3125f, 0.375f, 0.4375f};
    moeq__dequant_ref(&w, 0, 2, out);
    for (int i = 0; i < 32; i++) ck_assert_bits_eq(out[i], sym[i]);
    /* row by row gives the same */
    moeq__dequant_ref(&w, 1, 1, out);
    for (int i = 0; i < 16; i++) ck_assert_bits_eq(out[i], sym[16 + i]);

    /* asymmetric: zp [[-4, 1], [0, -8]] */
    const float zp[4] = {-4, 1, 0, -8};
    w.zero_point = zp;
    static const float asym[32] = {2.75f, -1, 1, 0.75f, 1.75f, 0.25f, 2.25f, -0.5f,
                                   0, 0.125f, 0.25f, 0.375f, -0.25f, -0.375f, -0.5f, -0.625f,
                                   -4, -3.5f, -3, -2.5f, -2, -1.5f, -1, -0.5f,
                                   0.5f, 0.5625f, 0.625f, 0.6875f, 0.75f, 0.8125f, 0.875f, 0.9375f};
    moeq__dequant_ref(&w, 0, 2, out);
    for (int i = 0; i < 32; i++) ck_assert_bits_eq(out[i], asym[i]);

    /* actorder: g_idx */
    static const int32_t g_idx[16] = {1, 0, 1, 0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1, 0, 1};
    w.zero_point = NULL;
    w.g_idx = g_idx;
    static const float act[16] = {0.875f, -2, 0, -0.25f, 0.375f, -0.75f, 0.625f, -1.5f,
                                  0.25f, 0.25f, 0.75f, 0.5f, -0.25f, -0.25f, -0.75f, -0.5f};
    moeq__dequant_ref(&w, 0, 1, out);
    for (int i = 0; i < 16; i++) ck_assert_bits_eq(out[i], act[i]);

    /* the same codes as I8 give the same result */
    w = make_qweight(MOEQ__QW_I8, 2, 16, e1_q, 16, grid, e1_scale, NULL, NULL);
    moeq__dequant_ref(&w, 0, 2, out);
    for (int i = 0; i < 32; i++) ck_assert_bits_eq(out[i], sym[i]);
}
END_TEST

START_TEST(test_e2_fp8_block) {
    static const uint8_t bytes[15] = {0x38, 0x40, 0xB8, 0x30, 0x7E, 0x00, 0x48, 0xC0,
                                      0x34, 0x3C, 0x38, 0x38, 0x38, 0x38, 0xF6};
    static const float decoded[15] = {1, 2, -1, 0.5f, 448, 0, 4, -2, 0.75f, 1.5f, 1, 1, 1, 1, -224};
    static const float want[15] = {0.5f, 1, -0.5f, 0.25f, 896, 0, 2, -1, 0.375f, 3,
                                   0.25f, 0.25f, 0.25f, 0.25f, -224};
    const float scale[4] = {0.5f, 2, 0.25f, 1};
    for (int i = 0; i < 15; i++) ck_assert_bits_eq(moeq__e4m3_to_f32(bytes[i]), decoded[i]);
    moeq__grid grid;
    ck_assert(moeq__scale_grid(MOEQ_STRATEGY_BLOCK, 3, 5, 0, 2, 4, &grid));
    moeq__qweight w = make_qweight(MOEQ__QW_E4M3, 3, 5, bytes, 5, grid, scale, NULL, NULL);
    float out[15];
    moeq__dequant_ref(&w, 0, 3, out);
    for (int i = 0; i < 15; i++) ck_assert_bits_eq(out[i], want[i]);
}
END_TEST

START_TEST(test_mxfp4_vector) {
    /* test_mxfp4_quant: scales [[0.25, 0.5]] -> bytes [[125, 126]]; FP4
     * [[0.5, 1, 1.5, 2]] in 2-wide groups -> [[0.125, 0.25, 0.75, 1.0]] */
    const uint8_t e[2] = {moeq__e8m0_from_scale(0.25f), moeq__e8m0_from_scale(0.5f)};
    ck_assert_uint_eq(e[0], 125);
    ck_assert_uint_eq(e[1], 126);
    const uint8_t codes[4] = {moeq__fp4_code_ref(0.5f), moeq__fp4_code_ref(1.0f),
                              moeq__fp4_code_ref(1.5f), moeq__fp4_code_ref(2.0f)};
    uint8_t packed[2];
    moeq__fp4_pack_ref(codes, 4, packed);
    const float scale[2] = {moeq__e8m0_to_f32(e[0]), moeq__e8m0_to_f32(e[1])};
    moeq__grid grid;
    ck_assert(moeq__scale_grid(MOEQ_STRATEGY_GROUP, 1, 4, 2, 0, 0, &grid));
    moeq__qweight w = make_qweight(MOEQ__QW_E2M1, 1, 4, packed, 2, grid, scale, NULL, NULL);
    float out[4];
    moeq__dequant_ref(&w, 0, 1, out);
    ck_assert_bits_eq(out[0], 0.125f);
    ck_assert_bits_eq(out[1], 0.25f);
    ck_assert_bits_eq(out[2], 0.75f);
    ck_assert_bits_eq(out[3], 1.0f);
}
END_TEST

/* ---- writer-side quantizers: E3, E4, §4.4 ------------------------------------ */

static const float e3_row[32] = {
    0.12f, -0.5f, 0.03f, 0.9f,  -1.2f, 0.0f,  0.44f, -0.07f, 2.4f,  -0.33f, 0.61f,
    1.75f, -2.9f, 0.2f,  -0.05f, 0.8f,  0.01f, -0.02f, 0.03f, -0.04f, 0.05f, -0.06f,
    0.07f, -0.08f, 0.09f, -0.10f, 0.11f, -0.12f, 0.13f, -0.14f, 0.15f, -0.16f};
static const uint8_t e3_packed[16] = {0xA0, 0x40, 0x0C, 0x82, 0x96, 0x63, 0x1F, 0x38,
                                      0xA1, 0xB2, 0xC4, 0xD5, 0xE5, 0xE6, 0xF7, 0xF7};

START_TEST(test_e3_nvfp4) {
    moeq__wquant a = {MOEQ_QTYPE_FLOAT, 4, 1, MOEQ_STRATEGY_TENSOR_GROUP, 16, 0, 0, MOEQ_DTYPE_F32};
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(e3_row[i]));
    const float global = moeq__nvfp4_global_scale_ref(amax, MOEQ_DTYPE_F32);
    /* compressed-tensors 0.18.0 gives 926.896484375: 2688 * f32(1 / 2.9), not
     * f32(2688 / 2.9) = 926.89654541015625 as the spec's worked example says */
    ck_assert_bits_eq(global, 926.896484375f);
    uint8_t scale[2], packed[16];
    moeq__quantize_nvfp4_ref(&a, e3_row, 1, 32, global, scale, packed);
    ck_assert_uint_eq(scale[0], 0x7E);
    ck_assert_uint_eq(scale[1], 0x5C);
    ck_assert_mem_eq(packed, e3_packed, 16);
    /* effective scales 448/926.8965 and 24/926.8965 (CT: 0.48333337903, 0.02589285932) */
    ck_assert_bits_eq(moeq__e4m3_to_f32(scale[0]) / global, 0.48333337903022766f);
    ck_assert_bits_eq(moeq__e4m3_to_f32(scale[1]) / global, 0.02589285932481289f);
    /* dequant of group 0 */
    const float eff[2] = {moeq__e4m3_to_f32(scale[0]) / global, moeq__e4m3_to_f32(scale[1]) / global};
    moeq__grid grid;
    ck_assert(moeq__scale_grid(MOEQ_STRATEGY_TENSOR_GROUP, 1, 32, 16, 0, 0, &grid));
    moeq__qweight w = make_qweight(MOEQ__QW_E2M1, 1, 32, packed, 16, grid, eff, NULL, NULL);
    float out[32];
    moeq__dequant_ref(&w, 0, 1, out);
    static const float q0[16] = {0, -1, 0, 2, -2, 0, 1, -0.0f, 4, -0.5f, 1.5f, 4, -6, 0.5f, -0.0f, 1.5f};
    static const float q1[16] = {0.5f, -1, 1, -1.5f, 2, -2, 3, -3, 3, -4, 4, -4, 6, -6, 6, -6};
    for (int i = 0; i < 16; i++) {
        ck_assert_bits_eq(out[i], q0[i] * eff[0]);
        ck_assert_bits_eq(out[16 + i], q1[i] * eff[1]);
    }
    ck_assert_float_eq_tol(out[1], -0.483333f, 1e-6f);
    ck_assert_float_eq_tol(out[3], 0.966667f, 1e-6f);
    ck_assert_float_eq_tol(out[8], 1.933333f, 1e-6f);
    ck_assert_float_eq_tol(out[12], -2.9f, 1e-6f);
    ck_assert(signbit(out[7])); /* -0 */

    /* the run-time NVFP4 activation quantizer does the same math */
    uint8_t ap[16], asf[2];
    moeq__actq_nvfp4_ref(e3_row, 1, 32, global, ap, asf);
    ck_assert_mem_eq(ap, e3_packed, 16);
    ck_assert_uint_eq(asf[0], 0x7E);
    ck_assert_uint_eq(asf[1], 0x5C);
    float adq[32];
    moeq__actdq_nvfp4_ref(ap, 1, 32, asf, global, adq);
    for (int i = 0; i < 32; i++) ck_assert_bits_eq(adq[i], out[i]);

    /* global scale: NaN/inf -> 1; zero amax -> clamped to tiny -> 2688/tiny = inf -> 1 */
    ck_assert_bits_eq(moeq__nvfp4_global_scale_ref(0.0f, MOEQ_DTYPE_F32), 1.0f);
    ck_assert_bits_eq(moeq__nvfp4_global_scale_ref(NAN, MOEQ_DTYPE_F32), 1.0f);
    ck_assert_bits_eq(moeq__nvfp4_global_scale_ref(2688.0f, MOEQ_DTYPE_F32), 1.0f);
    ck_assert_bits_eq(moeq__nvfp4_global_scale_ref(2.9f, MOEQ_DTYPE_BF16),
                      moeq__round_to_dtype(MOEQ_DTYPE_BF16,
                                           moeq__round_to_dtype(MOEQ_DTYPE_BF16, 1.0f / 2.9f) * 2688.0f));
    /* values where the two roundings matter (compressed-tensors' results) */
    ck_assert_bits_eq(moeq__nvfp4_global_scale_ref(0.55078125f, MOEQ_DTYPE_BF16), 4864.0f);
    ck_assert_bits_eq(moeq__nvfp4_global_scale_ref(0.44921875f, MOEQ_DTYPE_BF16), 5952.0f);
    ck_assert_bits_eq(moeq__nvfp4_global_scale_ref(2.0383694171905518f, MOEQ_DTYPE_F32), 1318.701171875f);
    ck_assert_bits_eq(moeq__nvfp4_global_scale_ref(0.01f, MOEQ_DTYPE_F16), 1.0f); /* 268800: inf in f16 */
    /* a group of zeros gets the E4M3 eps 0.125 */
    const float zeros[16] = {0};
    uint8_t zs, zp8[8];
    a.group_size = 16;
    moeq__quantize_nvfp4_ref(&a, zeros, 1, 16, 1.0f, &zs, zp8);
    ck_assert_uint_eq(zs, 0x20);
}
END_TEST

START_TEST(test_e4_int4) {
    /* symmetric, one group of 8 */
    const float sym_in[8] = {1.875f, -1.5f, 0.25f, -1.875f, 0.625f, 0.0f, -0.375f, 1.0f};
    moeq__wquant a = {MOEQ_QTYPE_INT, 4, 1, MOEQ_STRATEGY_GROUP, 8, 0, 0, MOEQ_DTYPE_F32};
    float scale;
    int8_t q[8];
    moeq__quantize_int_ref(&a, sym_in, 1, 8, NULL, &scale, NULL, q);
    ck_assert_bits_eq(scale, 0.25f);
    static const int8_t sym_q[8] = {7, -6, 1, -8, 2, 0, -2, 4};
    ck_assert_mem_eq(q, sym_q, 8);
    uint32_t w;
    moeq__int_pack_row_ref(q, 8, 4, false, &w);
    ck_assert_uint_eq(w, 0xC68A092Fu);
    moeq__grid grid;
    ck_assert(moeq__scale_grid(MOEQ_STRATEGY_GROUP, 1, 8, 8, 0, 0, &grid));
    moeq__qweight qw = make_qweight(MOEQ__QW_INT_PACKED, 1, 8, &w, 4, grid, &scale, NULL, NULL);
    qw.bits = 4;
    float out[8];
    moeq__dequant_ref(&qw, 0, 1, out);
    static const float sym_dq[8] = {1.75f, -1.5f, 0.25f, -2.0f, 0.5f, 0, -0.5f, 1.0f};
    for (int i = 0; i < 8; i++) ck_assert_bits_eq(out[i], sym_dq[i]);
    /* the same in BF16 (all values exact there) */
    a.dtype = MOEQ_DTYPE_BF16;
    moeq__quantize_int_ref(&a, sym_in, 1, 8, NULL, &scale, NULL, q);
    ck_assert_bits_eq(scale, 0.25f);
    ck_assert_mem_eq(q, sym_q, 8);

    /* asymmetric */
    const float asym_in[8] = {-0.5f, 0.25f, 1.375f, 0.0f, -0.125f, 0.75f, 1.0f, 0.5f};
    a.symmetric = 0;
    a.dtype = MOEQ_DTYPE_F32;
    int8_t zp;
    moeq__quantize_int_ref(&a, asym_in, 1, 8, NULL, &scale, &zp, q);
    ck_assert_bits_eq(scale, 0.125f);
    ck_assert_int_eq(zp, -4);
    static const int8_t asym_q[8] = {-8, -2, 7, -4, -5, 2, 4, 0};
    ck_assert_mem_eq(q, asym_q, 8);
    moeq__int_pack_row_ref(q, 8, 4, false, &w);
    ck_assert_uint_eq(w, 0x8CA34F60u);
    uint32_t zpw;
    moeq__int_pack_cols_ref(&zp, 1, 1, 4, false, &zpw);
    ck_assert_uint_eq(zpw, 4u);
    const float zpf = zp;
    qw.zero_point = &zpf;
    moeq__dequant_ref(&qw, 0, 1, out);
    for (int i = 0; i < 8; i++) ck_assert_bits_eq(out[i], asym_in[i]);
}
END_TEST

START_TEST(test_section_4_4) {
    /* int8 per-channel row [0.5, -1.27, 0.003, 1.0] -> scale 1.27/127.5.  The
     * spec's q [50, -128, 0, 100] is exact arithmetic; CT on f32 weights
     * computes -1.27f / 0.0099607846f = -127.49999237 and stores -127 (checked
     * with compressed-tensors 0.18.0), which is what moeq reproduces. */
    const float row[4] = {0.5f, -1.27f, 0.003f, 1.0f};
    moeq__wquant a = {MOEQ_QTYPE_INT, 8, 1, MOEQ_STRATEGY_CHANNEL, 0, 0, 0, MOEQ_DTYPE_F32};
    float scale;
    int8_t q[4];
    moeq__quantize_int_ref(&a, row, 1, 4, NULL, &scale, NULL, q);
    ck_assert_bits_eq(scale, 1.27f / 127.5f);
    ck_assert_float_eq_tol(scale, 0.0099608f, 1e-7f);
    static const int8_t want_q[4] = {50, -127, 0, 100};
    ck_assert_mem_eq(q, want_q, 4);
    /* fp8 per-token row [0.5, -1.75, 0.0078125, 3.5] -> scale 3.5/448 -> 68 F6 38 7E */
    const float x[4] = {0.5f, -1.75f, 0.0078125f, 3.5f};
    static const uint8_t want_b[4] = {0x68, 0xF6, 0x38, 0x7E};
    uint8_t b[4];
    float s;
    moeq__actq_fp8_token_ref(x, 1, 4, b, &s);
    ck_assert_bits_eq(s, 0.0078125f);
    ck_assert_mem_eq(b, want_b, 4);
    float back[4];
    moeq__actdq_fp8_ref(b, 1, 4, &s, 1, 4, back);
    for (int i = 0; i < 4; i++) ck_assert_bits_eq(back[i], x[i]); /* exact round trip */
    /* as a weight, FP8 channel gives the same bytes */
    a = (moeq__wquant){MOEQ_QTYPE_FLOAT, 8, 1, MOEQ_STRATEGY_CHANNEL, 0, 0, 0, MOEQ_DTYPE_F32};
    moeq__quantize_fp8_ref(&a, x, 1, 4, &s, b);
    ck_assert_bits_eq(s, 0.0078125f);
    ck_assert_mem_eq(b, want_b, 4);
}
END_TEST

START_TEST(test_quantize_edge_cases) {
    /* all-zero weight: scale eps of the dtype, codes 0 (symmetric) */
    const float zeros[8] = {0};
    moeq__wquant a = {MOEQ_QTYPE_INT, 4, 1, MOEQ_STRATEGY_TENSOR, 0, 0, 0, MOEQ_DTYPE_BF16};
    float s;
    int8_t zp, q[8];
    moeq__quantize_int_ref(&a, zeros, 2, 4, NULL, &s, NULL, q);
    ck_assert_bits_eq(s, 0.0078125f);
    for (int i = 0; i < 8; i++) ck_assert_int_eq(q[i], 0);
    /* asymmetric all-zero: 0/0 zero point -> NaN -> cast to 0, codes 0 */
    a.symmetric = 0;
    moeq__quantize_int_ref(&a, zeros, 2, 4, NULL, &s, &zp, q);
    ck_assert_bits_eq(s, 0.0078125f);
    ck_assert_int_eq(zp, 0);
    for (int i = 0; i < 8; i++) ck_assert_int_eq(q[i], 0);
    /* all-positive asymmetric: min forced to 0, zp = q_min */
    const float pos[4] = {1.0f, 2.0f, 3.0f, 15.0f};
    a.dtype = MOEQ_DTYPE_F32;
    moeq__quantize_int_ref(&a, pos, 1, 4, NULL, &s, &zp, q);
    ck_assert_bits_eq(s, 1.0f);
    ck_assert_int_eq(zp, -8);
    ck_assert_int_eq(q[3], 7);
    ck_assert_int_eq(q[0], -7);
    /* symmetric positive extreme: 7.5 -> 8 -> clamped 7 */
    a.symmetric = 1;
    const float ext[2] = {-7.5f, 7.5f};
    moeq__quantize_int_ref(&a, ext, 1, 2, NULL, &s, NULL, q);
    ck_assert_bits_eq(s, 1.0f);
    ck_assert_int_eq(q[0], -8);
    ck_assert_int_eq(q[1], 7);
    /* FP8 all-zero: eps of the weight dtype */
    a = (moeq__wquant){MOEQ_QTYPE_FLOAT, 8, 1, MOEQ_STRATEGY_TENSOR, 0, 0, 0, MOEQ_DTYPE_F16};
    uint8_t b[8];
    moeq__quantize_fp8_ref(&a, zeros, 2, 4, &s, b);
    ck_assert_bits_eq(s, 0.0009765625f);
    /* MXFP4: all-zero group -> byte 0 (2^-127), codes 0 */
    a = (moeq__wquant){MOEQ_QTYPE_FLOAT, 4, 1, MOEQ_STRATEGY_GROUP, 32, 0, 0, MOEQ_DTYPE_BF16};
    float z32[32] = {0};
    uint8_t e, p[16];
    moeq__quantize_mxfp4_ref(&a, z32, 1, 32, &e, p);
    ck_assert_uint_eq(e, 0);
    for (int i = 0; i < 16; i++) ck_assert_uint_eq(p[i], 0);
    /* in F16, 2^-127 underflows to 0, which CT replaces by eps 1 (byte 127) */
    a.dtype = MOEQ_DTYPE_F16;
    moeq__quantize_mxfp4_ref(&a, z32, 1, 32, &e, p);
    ck_assert_uint_eq(e, 127);
    /* MXFP4 group: amax 0.18 -> byte 122, values / 2^-5 */
    z32[0] = 0.18f;
    z32[1] = -0.05f;
    a.dtype = MOEQ_DTYPE_F32;
    moeq__quantize_mxfp4_ref(&a, z32, 1, 32, &e, p);
    ck_assert_uint_eq(e, 122);
    /* 0.18 / 0.03125 = 5.76 -> 6 (code 7); -0.05 / 0.03125 = -1.6 -> -1.5 (code 0xB) */
    ck_assert_uint_eq(p[0], 0xB7);
}
END_TEST

/* ---- round-trip properties over formats x strategies ------------------------ */

typedef struct qcase {
    const char *name;
    int32_t type, bits, symmetric, strategy, group_size, block_rows, block_cols;
    int actorder;
    int32_t dtype;
} qcase;

static const qcase qcases[] = {
    {"int4 tensor sym", MOEQ_QTYPE_INT, 4, 1, MOEQ_STRATEGY_TENSOR, 0, 0, 0, 0, MOEQ_DTYPE_F32},
    {"int4 tensor asym", MOEQ_QTYPE_INT, 4, 0, MOEQ_STRATEGY_TENSOR, 0, 0, 0, 0, MOEQ_DTYPE_F32},
    {"int4 channel sym", MOEQ_QTYPE_INT, 4, 1, MOEQ_STRATEGY_CHANNEL, 0, 0, 0, 0, MOEQ_DTYPE_F32},
    {"int4 channel asym", MOEQ_QTYPE_INT, 4, 0, MOEQ_STRATEGY_CHANNEL, 0, 0, 0, 0, MOEQ_DTYPE_BF16},
    {"int4 group sym", MOEQ_QTYPE_INT, 4, 1, MOEQ_STRATEGY_GROUP, 8, 0, 0, 0, MOEQ_DTYPE_BF16},
    {"int4 group asym", MOEQ_QTYPE_INT, 4, 0, MOEQ_STRATEGY_GROUP, 16, 0, 0, 0, MOEQ_DTYPE_F32},
    {"int4 group sym actorder", MOEQ_QTYPE_INT, 4, 1, MOEQ_STRATEGY_GROUP, 8, 0, 0, 1, MOEQ_DTYPE_F32},
    {"int4 group asym actorder", MOEQ_QTYPE_INT, 4, 0, MOEQ_STRATEGY_GROUP, 4, 0, 0, 1, MOEQ_DTYPE_F16},
    {"int4 block sym", MOEQ_QTYPE_INT, 4, 1, MOEQ_STRATEGY_BLOCK, 0, 4, 8, 0, MOEQ_DTYPE_F32},
    {"int4 block asym", MOEQ_QTYPE_INT, 4, 0, MOEQ_STRATEGY_BLOCK, 0, 3, 5, 0, MOEQ_DTYPE_F32},
    {"int8 channel sym", MOEQ_QTYPE_INT, 8, 1, MOEQ_STRATEGY_CHANNEL, 0, 0, 0, 0, MOEQ_DTYPE_F32},
    {"int8 group asym", MOEQ_QTYPE_INT, 8, 0, MOEQ_STRATEGY_GROUP, 16, 0, 0, 0, MOEQ_DTYPE_F32},
    {"int8 group sym actorder", MOEQ_QTYPE_INT, 8, 1, MOEQ_STRATEGY_GROUP, 16, 0, 0, 1, MOEQ_DTYPE_BF16},
    {"int3 group sym", MOEQ_QTYPE_INT, 3, 1, MOEQ_STRATEGY_GROUP, 8, 0, 0, 0, MOEQ_DTYPE_F32},
    {"int3 group asym", MOEQ_QTYPE_INT, 3, 0, MOEQ_STRATEGY_GROUP, 8, 0, 0, 0, MOEQ_DTYPE_F32},
    {"int2 channel asym", MOEQ_QTYPE_INT, 2, 0, MOEQ_STRATEGY_CHANNEL, 0, 0, 0, 0, MOEQ_DTYPE_F32},
    {"int5 group asym", MOEQ_QTYPE_INT, 5, 0, MOEQ_STRATEGY_GROUP, 8, 0, 0, 0, MOEQ_DTYPE_F32},
    {"int7 tensor sym", MOEQ_QTYPE_INT, 7, 1, MOEQ_STRATEGY_TENSOR, 0, 0, 0, 0, MOEQ_DTYPE_F32},
    {"fp8 tensor", MOEQ_QTYPE_FLOAT, 8, 1, MOEQ_STRATEGY_TENSOR, 0, 0, 0, 0, MOEQ_DTYPE_F32},
    {"fp8 channel", MOEQ_QTYPE_FLOAT, 8, 1, MOEQ_STRATEGY_CHANNEL, 0, 0, 0, 0, MOEQ_DTYPE_BF16},
    {"fp8 group", MOEQ_QTYPE_FLOAT, 8, 1, MOEQ_STRATEGY_GROUP, 16, 0, 0, 0, MOEQ_DTYPE_F32},
    {"fp8 block", MOEQ_QTYPE_FLOAT, 8, 1, MOEQ_STRATEGY_BLOCK, 0, 4, 8, 0, MOEQ_DTYPE_F32},
    {"nvfp4", MOEQ_QTYPE_FLOAT, 4, 1, MOEQ_STRATEGY_TENSOR_GROUP, 16, 0, 0, 0, MOEQ_DTYPE_F32},
    {"nvfp4 bf16", MOEQ_QTYPE_FLOAT, 4, 1, MOEQ_STRATEGY_TENSOR_GROUP, 16, 0, 0, 0, MOEQ_DTYPE_BF16},
    {"mxfp4", MOEQ_QTYPE_FLOAT, 4, 1, MOEQ_STRATEGY_GROUP, 32, 0, 0, 0, MOEQ_DTYPE_BF16},
    {"mxfp8", MOEQ_QTYPE_FLOAT, 8, 1, MOEQ_STRATEGY_GROUP, 32, 0, 0, 1 /* = MX */, MOEQ_DTYPE_F32},
};
#define N_QCASES (sizeof qcases / sizeof qcases[0])

/* Tolerance per element, in units of the element's scale (one table). */
static double step_tolerance(const qcase *qc) {
    if (qc->type == MOEQ_QTYPE_FLOAT) return 0.0; /* relative bounds below */
    /* half a step; asymmetric adds half a step of zero-point rounding at the
     * range ends; BF16/F16 rounding of x/s adds |x/s| * 2^-8 at most */
    double tol = qc->symmetric ? 0.5 : 1.0;
    if (qc->dtype != MOEQ_DTYPE_F32) tol += ldexp(1.0, qc->bits - 1) * 0x1p-8;
    /* f32 rounding of s (and of (q - zp) * s) at |x/s| up to 2^(b-1) */
    return tol + (ldexp(1.0, qc->bits - 1) + 1.0) * 0x1p-22;
}

static void run_quant_case(const qcase *qc, size_t rows, size_t cols) {
    const size_t n = rows * cols;
    float *w = malloc(n * sizeof *w);
    float *out = malloc(n * sizeof *out);
    int8_t *q = malloc(n);
    uint8_t *b = malloc(n);
    uint32_t *packed = malloc((rows * cols + 32) * sizeof *packed);
    int32_t *g_idx = malloc(cols * sizeof *g_idx);
    size_t *perm = malloc(cols * sizeof *perm);
    ck_assert(w && out && q && b && packed && g_idx && perm);
    for (size_t i = 0; i < n; i++) w[i] = moeq__round_to_dtype(qc->dtype, rng_weight());
    const bool mx = qc->type == MOEQ_QTYPE_FLOAT && qc->group_size == 32;
    moeq__wquant a = {qc->type, qc->bits, qc->symmetric, qc->strategy, qc->group_size,
                      qc->block_rows, qc->block_cols, qc->dtype};
    moeq__grid grid;
    ck_assert(moeq__scale_grid(qc->strategy, rows, cols, (size_t)qc->group_size,
                               (size_t)qc->block_rows, (size_t)qc->block_cols, &grid));
    const size_t ncell = grid.rows * grid.cols;
    float *scale = malloc(ncell * sizeof *scale);
    float *zpf = malloc(ncell * sizeof *zpf);
    int8_t *zp = malloc(ncell);
    uint8_t *sbytes = malloc(ncell);
    ck_assert(scale && zpf && zp && sbytes);
    const int32_t *gi = NULL;
    if (qc->type == MOEQ_QTYPE_INT && qc->actorder) {
        /* GPTQ-style g_idx: a random permutation cut into groups of gs */
        for (size_t c = 0; c < cols; c++) perm[c] = c;
        for (size_t c = cols; c > 1; c--) {
            const size_t j = (size_t)(rng_next() % c);
            const size_t t = perm[c - 1];
            perm[c - 1] = perm[j];
            perm[j] = t;
        }
        for (size_t j = 0; j < cols; j++) g_idx[perm[j]] = (int32_t)(j / (size_t)qc->group_size);
        gi = g_idx;
    }

    moeq__qweight qw;
    memset(&qw, 0, sizeof qw);
    qw.rows = rows;
    qw.cols = cols;
    qw.grid = grid;
    qw.scale = scale;
    qw.g_idx = gi;
    float global = 1.0f;
    if (qc->type == MOEQ_QTYPE_INT) {
        moeq__quantize_int_ref(&a, w, rows, cols, gi, scale, qc->symmetric ? NULL : zp, q);
        /* through the packed form, dense and legacy */
        const bool legacy = (rows + cols) % 2 == 1;
        const size_t nw = moeq__int_packed_words(cols, qc->bits, legacy);
        for (size_t r = 0; r < rows; r++) {
            moeq__int_pack_row_ref(q + r * cols, cols, qc->bits, legacy, packed + r * nw);
        }
        qw.kind = MOEQ__QW_INT_PACKED;
        qw.bits = qc->bits;
        qw.legacy = legacy;
        qw.codes = packed;
        qw.row_stride = nw * 4;
        if (!qc->symmetric) {
            for (size_t i = 0; i < ncell; i++) zpf[i] = zp[i];
            qw.zero_point = zpf;
        }
    } else if (qc->bits == 8 && !mx) {
        moeq__quantize_fp8_ref(&a, w, rows, cols, scale, b);
        qw.kind = MOEQ__QW_E4M3;
        qw.codes = b;
        qw.row_stride = cols;
    } else if (qc->bits == 8) {
        moeq__quantize_mxfp8_ref(&a, w, rows, cols, sbytes, b);
        for (size_t i = 0; i < ncell; i++) scale[i] = moeq__e8m0_to_f32(sbytes[i]);
        qw.kind = MOEQ__QW_E4M3;
        qw.codes = b;
        qw.row_stride = cols;
    } else {
        if (mx) {
            moeq__quantize_mxfp4_ref(&a, w, rows, cols, sbytes, b);
            for (size_t i = 0; i < ncell; i++) scale[i] = moeq__e8m0_to_f32(sbytes[i]);
        } else {
            float amax = 0.0f;
            for (size_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(w[i]));
            global = moeq__nvfp4_global_scale_ref(amax, qc->dtype);
            moeq__quantize_nvfp4_ref(&a, w, rows, cols, global, sbytes, b);
            for (size_t i = 0; i < ncell; i++) scale[i] = moeq__e4m3_to_f32(sbytes[i]) / global;
        }
        qw.kind = MOEQ__QW_E2M1;
        qw.codes = b;
        qw.row_stride = cols / 2;
    }
    moeq__dequant_ref(&qw, 0, rows, out);

    const double tol = step_tolerance(qc);
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < cols; c++) {
            const size_t i = r * cols + c;
            const size_t cell = (r / grid.row_block) * grid.cols +
                                (gi ? (size_t)gi[c] : c / grid.col_block);
            const double s = scale[cell];
            const double err = fabs((double)w[i] - (double)out[i]);
            double bound;
            if (qc->type == MOEQ_QTYPE_INT) {
                bound = tol * s;
                /* the kernel computes exactly (q - zp) * s */
                const float zz = qc->symmetric ? 0.0f : (float)zp[cell];
                ck_assert_bits_eq(out[i], ((float)q[i] - zz) * scale[cell]);
            } else if (qc->bits == 8) {
                /* half an E4M3 ulp (2^-4 relative), or half the subnormal
                 * quantum; BF16 rounding of x/s adds 2^-9 relative */
                bound = fabs((double)w[i]) * (0x1p-4 + 0x1p-8) + s * 0x1p-10;
            } else {
                /* the widest E2M1 gap is 2 (4..6); E4M3 rounding of the
                 * NVFP4 scale may push |x|/s up to 6.4, clamped to 6 */
                bound = s * 1.0 + fabs((double)w[i]) * 0x1p-8;
            }
            ck_assert_msg(err <= bound + 1e-30, "%s [%zu x %zu] (%zu, %zu): x %.9g deq %.9g err %g > %g",
                          qc->name, rows, cols, r, c, (double)w[i], (double)out[i], err, bound);
        }
    }
    free(w);
    free(out);
    free(q);
    free(b);
    free(packed);
    free(g_idx);
    free(perm);
    free(scale);
    free(zpf);
    free(zp);
    free(sbytes);
}

START_TEST(test_quant_roundtrip) {
    const qcase *qc = &qcases[_i];
    rng_state = 1000 + (uint64_t)_i;
    static const size_t row_sizes[] = {1, 3, 17, 33};
    for (size_t ri = 0; ri < sizeof row_sizes / sizeof row_sizes[0]; ri++) {
        for (size_t ci = 0; ci < N_AWKWARD; ci++) {
            size_t cols = awkward[ci];
            if (qc->type == MOEQ_QTYPE_FLOAT && qc->bits == 4) cols += cols % 2; /* FP4 pairs */
            run_quant_case(qc, row_sizes[ri], cols);
        }
    }
}
END_TEST

/* ---- activation quantizers ------------------------------------------------------ */

START_TEST(test_act_int8) {
    rng_state = 11;
    enum { M = 5, K = 37 };
    float x[M * K], back[M * K], s[M];
    int8_t q[M * K];
    for (int i = 0; i < M * K; i++) x[i] = rng_weight();
    for (int i = 0; i < K; i++) x[2 * K + i] = 0.0f; /* an all-zero row */
    x[3 * K + 4] = NAN;
    moeq__actq_int8_token_ref(x, M, K, q, s);
    moeq__actdq_int8_ref(q, M, K, s, 1, K, NULL, back);
    for (int r = 0; r < M; r++) {
        float amax = 0.0f;
        for (int c = 0; c < K; c++) {
            if (!isnan(x[r * K + c])) amax = fmaxf(amax, fabsf(x[r * K + c]));
        }
        ck_assert_bits_eq(s[r], fmaxf(amax, 1e-10f) / 127.0f);
        for (int c = 0; c < K; c++) {
            const int i = r * K + c;
            ck_assert(q[i] >= -127 && q[i] <= 127);
            if (isnan(x[i])) {
                ck_assert_int_eq(q[i], 0);
                continue;
            }
            ck_assert(fabsf(x[i] - back[i]) <= s[r] * 0.5f * (1 + 1e-6f));
        }
    }
    for (int c = 0; c < K; c++) ck_assert_int_eq(q[2 * K + c], 0);
    /* half to even */
    const float t[4] = {2.5f, -2.5f, 3.5f, 127.0f};
    moeq__actq_int8_token_ref(t, 1, 4, q, s);
    ck_assert_bits_eq(s[0], 1.0f);
    ck_assert_int_eq(q[0], 2);
    ck_assert_int_eq(q[1], -2);
    ck_assert_int_eq(q[2], 4);
    ck_assert_int_eq(q[3], 127);
    /* static with zero point; saturation */
    const float st[5] = {0.5f, -0.26f, 100.0f, -100.0f, NAN};
    moeq__actq_int8_static_ref(st, 5, 0.25f, 3, q);
    ck_assert_int_eq(q[0], 5);
    ck_assert_int_eq(q[1], 2); /* -1.04 + 3 = 1.96 -> 2 */
    ck_assert_int_eq(q[2], 127);
    ck_assert_int_eq(q[3], -128);
    ck_assert_int_eq(q[4], 3);
    const int32_t zp = 3;
    const float s1 = 0.25f;
    moeq__actdq_int8_ref(q, 1, 2, &s1, 0, 2, &zp, back);
    ck_assert_bits_eq(back[0], 0.5f);
    ck_assert_bits_eq(back[1], -0.25f);
}
END_TEST

START_TEST(test_act_fp8) {
    rng_state = 12;
    enum { M = 4, K = 300, GS = 128 };
    static float x[M * K], back[M * K];
    static uint8_t q[M * K];
    float s[M * 3];
    for (int i = 0; i < M * K; i++) x[i] = rng_weight();
    /* per token */
    moeq__actq_fp8_token_ref(x, M, K, q, s);
    moeq__actdq_fp8_ref(q, M, K, s, 1, K, back);
    for (int r = 0; r < M; r++) {
        for (int c = 0; c < K; c++) {
            const int i = r * K + c;
            ck_assert(fabsf(x[i] - back[i]) <= fabsf(x[i]) * 0x1p-4f + s[r] * 0x1p-10f);
            ck_assert((q[i] & 0x7F) != 0x7F);
        }
    }
    /* per tensor */
    const float st = moeq__actq_fp8_tensor_ref(x, M * K, q);
    float amax = 0.0f;
    for (int i = 0; i < M * K; i++) amax = fmaxf(amax, fabsf(x[i]));
    ck_assert_bits_eq(st, amax / 448.0f);
    moeq__actdq_fp8_ref(q, M, K, &st, 0, K, back);
    for (int i = 0; i < M * K; i++) {
        ck_assert(fabsf(x[i] - back[i]) <= fabsf(x[i]) * 0x1p-4f + st * 0x1p-10f);
    }
    int n448 = 0;
    for (int i = 0; i < M * K; i++) n448 += (q[i] & 0x7F) == 0x7E;
    ck_assert_int_ge(n448, 1); /* the maximum maps to +-448 */
    /* per token group of 128 (last group partial: 300 = 128 + 128 + 44) */
    moeq__actq_fp8_group_ref(x, M, K, GS, q, s);
    moeq__actdq_fp8_ref(q, M, K, s, 3, GS, back);
    for (int r = 0; r < M; r++) {
        for (int g = 0; g < 3; g++) {
            float ga = 0.0f;
            for (int c = g * GS; c < K && c < (g + 1) * GS; c++) ga = fmaxf(ga, fabsf(x[r * K + c]));
            ck_assert_bits_eq(s[r * 3 + g], ga / 448.0f);
        }
        for (int c = 0; c < K; c++) {
            const int i = r * K + c;
            ck_assert(fabsf(x[i] - back[i]) <= fabsf(x[i]) * 0x1p-4f + s[r * 3 + c / GS] * 0x1p-10f);
        }
    }
    /* zeros: eps scale, zero codes */
    const float z[3] = {0, 0, 0};
    uint8_t zq[3];
    moeq__actq_fp8_token_ref(z, 1, 3, zq, s);
    ck_assert_bits_eq(s[0], 1e-12f / 448.0f);
    ck_assert(zq[0] == 0 && zq[1] == 0 && zq[2] == 0);
    /* static: saturates */
    const float big[3] = {1000.0f, -1000.0f, 1.0f};
    moeq__actq_fp8_static_ref(big, 3, 1.0f, zq);
    ck_assert_uint_eq(zq[0], 0x7E);
    ck_assert_uint_eq(zq[1], 0xFE);
    ck_assert_uint_eq(zq[2], 0x38);
}
END_TEST

START_TEST(test_act_fp4) {
    rng_state = 13;
    enum { M = 3, K = 96 };
    float x[M * K], back[M * K];
    uint8_t p[M * K / 2], sf[M * 6], e[M * 3];
    for (int i = 0; i < M * K; i++) x[i] = rng_weight();
    float amax = 0.0f;
    for (int i = 0; i < M * K; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float gsc = moeq__nvfp4_global_scale_ref(amax, MOEQ_DTYPE_F32);
    moeq__actq_nvfp4_ref(x, M, K, gsc, p, sf);
    moeq__actdq_nvfp4_ref(p, M, K, sf, gsc, back);
    int n7e = 0;
    for (int i = 0; i < M * 6; i++) n7e += sf[i] == 0x7E;
    ck_assert_int_ge(n7e, 1); /* the block holding the maximum */
    for (int i = 0; i < M * K; i++) {
        const float eff = moeq__e4m3_to_f32(sf[(i / K) * 6 + (i % K) / 16]) / gsc;
        ck_assert(fabsf(x[i] - back[i]) <= eff * 1.0f);
    }
    moeq__actq_mxfp4_ref(x, M, K, p, e);
    moeq__actdq_mxfp4_ref(p, M, K, e, back);
    for (int i = 0; i < M * K; i++) {
        const float s = moeq__e8m0_to_f32(e[(i / K) * 3 + (i % K) / 32]);
        ck_assert(fabsf(x[i] - back[i]) <= s * 1.0f);
    }
    /* MXFP4 activation = MXFP4 weight quantizer in f32 */
    moeq__wquant a = {MOEQ_QTYPE_FLOAT, 4, 1, MOEQ_STRATEGY_GROUP, 32, 0, 0, MOEQ_DTYPE_F32};
    uint8_t wp[M * K / 2], we[M * 3];
    moeq__quantize_mxfp4_ref(&a, x, M, K, we, wp);
    ck_assert_mem_eq(wp, p, sizeof wp);
    ck_assert_mem_eq(we, e, sizeof we);
}
END_TEST

/* ---- matmul ------------------------------------------------------------------ */

START_TEST(test_matmul) {
    const float x[4] = {1, 2, 3, 4};
    const float w[6] = {1, 0, 0, 1, 1, 1};
    float y[6], yb[6];
    moeq__matmul_f64_ref(x, w, 2, 3, 2, y);
    static const float want[6] = {1, 2, 3, 3, 4, 7};
    for (int i = 0; i < 6; i++) ck_assert_bits_eq(y[i], want[i]);
    moeq__sgemm_nt(x, w, 2, 3, 2, yb);
    for (int i = 0; i < 6; i++) ck_assert_bits_eq(yb[i], want[i]);
    moeq__sgemm_nt(x, w, 2, 3, 0, yb);
    for (int i = 0; i < 6; i++) ck_assert_bits_eq(yb[i], 0.0f);
    /* OpenBLAS is installed wherever the tests build; the plain loop is what
     * runs where it cannot be loaded */
    ck_assert(moeq__blas_available());
    moeq__sgemm_nt_plain(x, w, 2, 3, 2, yb);
    for (int i = 0; i < 6; i++) ck_assert_bits_eq(yb[i], want[i]);

    /* dequantize + sgemm against the f64 reference on random int4 weights */
    enum { M = 7, N = 33, K = 129 };
    static float xs[M * K], wf[N * K], wd[N * K], ref[M * N], got[M * N], sc[N * 9];
    static int8_t q[N * K];
    static uint32_t packed[N * 17];
    rng_state = 21;
    for (int i = 0; i < M * K; i++) xs[i] = rng_weight();
    for (int i = 0; i < N * K; i++) wf[i] = rng_weight();
    moeq__wquant a = {MOEQ_QTYPE_INT, 4, 1, MOEQ_STRATEGY_GROUP, 16, 0, 0, MOEQ_DTYPE_F32};
    moeq__quantize_int_ref(&a, wf, N, K, NULL, sc, NULL, q);
    for (int r = 0; r < N; r++) moeq__int_pack_row_ref(q + r * K, K, 4, false, packed + r * 17);
    moeq__grid grid;
    ck_assert(moeq__scale_grid(MOEQ_STRATEGY_GROUP, N, K, 16, 0, 0, &grid));
    moeq__qweight qw = make_qweight(MOEQ__QW_INT_PACKED, N, K, packed, 17 * 4, grid, sc, NULL, NULL);
    qw.bits = 4;
    moeq__matmul_dequant_ref(&qw, xs, M, wd, got);
    moeq__matmul_f64_ref(xs, wd, M, N, K, ref);
    static float plain[M * N];
    moeq__sgemm_nt_plain(xs, wd, M, N, K, plain);
    for (int i = 0; i < M * N; i++) {
        double mag = 0.0;
        for (int t = 0; t < K; t++) mag += fabs((double)xs[(i / N) * K + t] * (double)wd[(i % N) * K + t]);
        ck_assert_msg(fabs((double)got[i] - (double)ref[i]) <= mag * 1e-6 + 1e-30,
                      "y[%d] = %g, f64 reference %g", i, (double)got[i], (double)ref[i]);
        ck_assert_msg(fabs((double)plain[i] - (double)ref[i]) <= mag * 1e-6 + 1e-30,
                      "plain y[%d] = %g, f64 reference %g", i, (double)plain[i], (double)ref[i]);
    }
}
END_TEST

Suite *kernels_suite(void);
Suite *kernels_suite(void) {
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("formats");
    tcase_add_test(tc, test_bf16);
    tcase_add_test(tc, test_f16);
    tcase_add_test(tc, test_e4m3_decode_all);
    tcase_add_test(tc, test_e4m3_encode);
    tcase_add_test(tc, test_fp6_codes_and_packing);
    tcase_add_test(tc, test_mxfp6_packs_exactly);
    tcase_add_test(tc, test_e5m2);
    tcase_add_test(tc, test_convert_arrays);
    tcase_add_test(tc, test_fp4_round);
    tcase_add_test(tc, test_fp4_codes_and_packing);
    tcase_add_test(tc, test_e8m0);
    tcase_add_test(tc, test_round_to_power_2);
    suite_add_tcase(s, tc);

    tc = tcase_create("packing");
    tcase_add_test(tc, test_pack_vectors);
    tcase_add_test(tc, test_pack_zero_points_dim0);
    tcase_add_loop_test(tc, test_pack_roundtrip, 0, 16); /* bits 1..8 x {dense, legacy} */
    tcase_add_test(tc, test_mxint4_repack);
    suite_add_tcase(s, tc);

    tc = tcase_create("dequant");
    tcase_add_test(tc, test_scale_grid);
    tcase_add_test(tc, test_e1_pack_and_dequant);
    tcase_add_test(tc, test_e2_fp8_block);
    tcase_add_test(tc, test_mxfp4_vector);
    suite_add_tcase(s, tc);

    tc = tcase_create("quantize");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_e3_nvfp4);
    tcase_add_test(tc, test_e4_int4);
    tcase_add_test(tc, test_section_4_4);
    tcase_add_test(tc, test_quantize_edge_cases);
    tcase_add_loop_test(tc, test_quant_roundtrip, 0, (int)N_QCASES);
    suite_add_tcase(s, tc);

    tc = tcase_create("activations");
    tcase_add_test(tc, test_act_int8);
    tcase_add_test(tc, test_act_fp8);
    tcase_add_test(tc, test_act_fp4);
    suite_add_tcase(s, tc);

    tc = tcase_create("matmul");
    tcase_add_test(tc, test_matmul);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(kernels_suite)

/*
 * kern_avx2.c - the fast kernels for AVX2 + FMA + F16C (compiled with those
 * flags only; cpu.c checks the CPU before anything here runs).  Every function
 * computes what its twin in ref/kern_portable.c computes, bit for bit.
 *
 * Decoding codes to f32 (kernels.h, "packed.c", gives the layout):
 *   NIB   one 32-byte load = 4 columns x 16 rows: the two nibbles are split,
 *         looked up (pshufb) in a table of binary16 high bytes, widened to
 *         16-bit words and converted with vcvtph2ps;
 *   E4M3  a byte b widened to the word (b << 8) >> 1 (arithmetic) with bit 14
 *         cleared is the binary16 of e4m3(b) * 2^-8 (subnormals included);
 *   I4    one 32-byte load = 8 rows x 8 columns, a row per 32-bit word: nibble
 *         i masked in place is the integer n * 2^(4i) (nibbles 4..7 after a
 *         16-bit shift), converted in one instruction; x carries the 2^(-4i);
 *   I8    sign-extended to 32 bits and converted.
 */
#include "kernels.h"

#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* ---- codes ------------------------------------------------------------------------ */

/* NIB decoding of a 32-byte chunk v: the low nibbles give columns 4c (f0 rows
 * 0-7, f1 rows 8-15) and 4c + 1 (f2, f3); the high nibbles 4c + 2 and 4c + 3.
 * Two pshufb look up the bytes of each value's bfloat16, byte and word
 * unpacks place them at the top of 32-bit lanes: an exact f32, in 1-uop
 * shuffles only. */
#define NIB_HALF(v, lutl, luth, shift, f0, f1, f2, f3)                                             \
    do {                                                                                           \
        const __m256i i_ =                                                                         \
            _mm256_and_si256(shift ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0F));         \
        const __m256i bl_ = _mm256_shuffle_epi8(lutl, i_), bh_ = _mm256_shuffle_epi8(luth, i_);    \
        const __m256i w0_ = _mm256_unpacklo_epi8(bl_, bh_), w1_ = _mm256_unpackhi_epi8(bl_, bh_);  \
        const __m256i hi_ = _mm256_set1_epi32((int)0xFFFF0000u);                                   \
        f0 = _mm256_castsi256_ps(_mm256_slli_epi32(w0_, 16));                                      \
        f1 = _mm256_castsi256_ps(_mm256_and_si256(w0_, hi_));                                      \
        f2 = _mm256_castsi256_ps(_mm256_slli_epi32(w1_, 16));                                      \
        f3 = _mm256_castsi256_ps(_mm256_and_si256(w1_, hi_));                                      \
    } while (0)

#define NIB_CHUNK(p, lut, f0, f1, f2, f3, f4, f5, f6, f7)                                          \
    do {                                                                                           \
        const __m256i v_ = _mm256_loadu_si256((const __m256i *)(const void *)(p));                 \
        NIB_HALF(v_, lut##l, lut##h, 0, f0, f1, f2, f3);                                           \
        NIB_HALF(v_, lut##l, lut##h, 1, f4, f5, f6, f7);                                           \
    } while (0)

/* binary16 of e4m3(b) * 2^-8 for 16 bytes, as 16 words. */
AI __m256i e4m3_f16(__m128i b) {
    const __m256i w = _mm256_cvtepu8_epi16(b);
    return _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(w, 8), 1),
                            _mm256_set1_epi16((short)0xBFFF));
}

/* One column of a byte-coded block: f0 = rows 0-7, f1 = rows 8-15. */
#define BYTE_COL(p, code, f0, f1)                                                                  \
    do {                                                                                           \
        if ((code) == MOEQ__PK_E4M3) {                                                             \
            const __m256i h_ = e4m3_f16(_mm_loadu_si128((const __m128i *)(const void *)(p)));      \
            f0 = _mm256_cvtph_ps(_mm256_castsi256_si128(h_));                                      \
            f1 = _mm256_cvtph_ps(_mm256_extracti128_si256(h_, 1));                                 \
        } else {                                                                                   \
            f0 = _mm256_cvtepi32_ps(                                                               \
                _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p))));        \
            f1 = _mm256_cvtepi32_ps(                                                               \
                _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)((p) + 8))));  \
        }                                                                                          \
    } while (0)

/* Four columns k .. k + 3 of a block, in the order NIB_CHUNK gives them. */
#define COLS4(bc, k, code, lut, f0, f1, f2, f3, f4, f5, f6, f7)                                    \
    do {                                                                                           \
        if ((code) == MOEQ__PK_NIB) {                                                              \
            NIB_CHUNK((bc) + ((k) / 4) * 32, lut, f0, f1, f2, f3, f4, f5, f6, f7);                 \
        } else {                                                                                   \
            const uint8_t *q_ = (bc) + (k)*MOEQ__PK_ROWS;                                          \
            BYTE_COL(q_, code, f0, f1);                                                            \
            BYTE_COL(q_ + 16, code, f2, f3);                                                       \
            BYTE_COL(q_ + 32, code, f4, f5);                                                       \
            BYTE_COL(q_ + 48, code, f6, f7);                                                       \
        }                                                                                          \
    } while (0)

AI __m256i nib_lut(const moeq__packed *pk, int hi) {
    __m128i l;
    memcpy(&l, pk->lut_bf16[hi], 16);
    return _mm256_broadcastsi128_si256(l);
}

/* ---- scales ----------------------------------------------------------------------- */

/* The 16 scales (kernel units) of block blk, group g; with `raw`, E4M3_DIV
 * scales stay undivided, e4m3(b) * 2^-8 (gemv divides its totals once). */
AI void scales16_(const moeq__packed *pk, size_t blk, size_t g, __m256 s[2], const int raw) {
    const int32_t kind = pk->scale_kind;
    const size_t ss = kind == MOEQ__PS_F32 ? 4 : kind <= MOEQ__PS_BF16 ? 2 : 1;
    const uint8_t *p = pk->scales + blk * pk->blk_scale_bytes + g * MOEQ__PK_ROWS * ss;
    switch (kind) {
        case MOEQ__PS_F32:
            s[0] = _mm256_loadu_ps((const float *)(const void *)p);
            s[1] = _mm256_loadu_ps((const float *)(const void *)(p + 32));
            break;
        case MOEQ__PS_F16:
            s[0] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
            s[1] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16)));
            break;
        case MOEQ__PS_BF16:
            s[0] = _mm256_castsi256_ps(
                _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
            s[1] = _mm256_castsi256_ps(_mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 16))), 16));
            break;
        case MOEQ__PS_E4M3_DIV: {
            const __m256i h = e4m3_f16(_mm_loadu_si128((const __m128i *)p));
            if (raw) {
                s[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
                s[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
                break;
            }
            const __m256 k256 = _mm256_set1_ps(256.0f), gd = _mm256_set1_ps(pk->gdiv);
            s[0] =
                _mm256_div_ps(_mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), k256), gd);
            s[1] = _mm256_div_ps(
                _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), k256), gd);
            break;
        }
        default: { /* E8M0: 2^(e-127); e = 0 is the subnormal 2^-127 */
            const __m256i sub = _mm256_set1_epi32(0x00400000), z = _mm256_setzero_si256();
            for (int h = 0; h < 2; h++) {
                const __m256i e =
                    _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8 * h)));
                const __m256i bits =
                    _mm256_blendv_epi8(_mm256_slli_epi32(e, 23), sub, _mm256_cmpeq_epi32(e, z));
                s[h] = _mm256_castsi256_ps(bits);
            }
            break;
        }
    }
    if (pk->scale_mul != 1.0f) {
        const __m256 mul = _mm256_set1_ps(pk->scale_mul);
        s[0] = _mm256_mul_ps(s[0], mul);
        s[1] = _mm256_mul_ps(s[1], mul);
    }
}

#define scales16(pk, blk, g, s)     scales16_(pk, blk, g, s, 0)
#define scales16_raw(pk, blk, g, s) scales16_(pk, blk, g, s, 1)

/* gemv's last step for E4M3_DIV scales: totals / (gdiv * 2^-8). */
AI __m256 gemv_fix(const moeq__packed *pk, __m256 t) {
    if (pk->scale_kind != MOEQ__PS_E4M3_DIV) return t;
    return _mm256_div_ps(t, _mm256_set1_ps(pk->gdiv * 0x1p-8f));
}

/* The 16 totals of each of M tokens, in y, start at zero. */
AI void zero_totals(float *y, size_t ldy, int M) {
    for (int m = 0; m < M; m++) {
        _mm256_storeu_ps(y + (size_t)m * ldy, _mm256_setzero_ps());
        _mm256_storeu_ps(y + (size_t)m * ldy + 8, _mm256_setzero_ps());
    }
}

AI void gemv_fix_mem(const moeq__packed *pk, float *y, size_t ldy, int M) {
    if (pk->scale_kind != MOEQ__PS_E4M3_DIV) return;
    for (int m = 0; m < M; m++) {
        float *p = y + (size_t)m * ldy;
        _mm256_storeu_ps(p, gemv_fix(pk, _mm256_loadu_ps(p)));
        _mm256_storeu_ps(p + 8, gemv_fix(pk, _mm256_loadu_ps(p + 8)));
    }
}

/* ---- panel: dequantized weights, [k][16] ------------------------------------------ */

/* Fetches the codes of column k of the block at bc.  A panel of nk columns
 * fetches the next nk (the next panel of the block, or the first of the next
 * block, which follows it in memory) while it decodes its own, so they arrive
 * during the tiles in between (moe_bench, T=512, with and without alternating:
 * 0.93-1.00x the time against the driver's prefetch of whole panels ahead). */
#define PF_AT(bc, k, code)                                                                         \
    _mm_prefetch((const char *)((bc) + (k)*MOEQ__PK_COL_BYTES(code)), _MM_HINT_T0)

AI void panel_impl(const moeq__packed *pk, size_t blk, size_t k0, size_t nk, float *P,
                   const int code) {
    const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
    const size_t k1 = k0 + nk;
    const __m256i lutl = code == MOEQ__PK_NIB ? nib_lut(pk, 0) : _mm256_setzero_si256();
    const __m256i luth = code == MOEQ__PK_NIB ? nib_lut(pk, 1) : _mm256_setzero_si256();
    for (size_t k = k0; k < k1;) {
        const size_t g = k / pk->gsize;
        const size_t kend = (g + 1) * pk->gsize < k1 ? (g + 1) * pk->gsize : k1;
        __m256 s[2];
        scales16(pk, blk, g, s);
        const __m256 s0 = s[0], s1 = s[1];
        for (; k < kend; k += 4) {
            __m256 f0, f1, f2, f3, f4, f5, f6, f7;
            PF_AT(bc, k + nk, code);
            COLS4(bc, k, code, lut, f0, f1, f2, f3, f4, f5, f6, f7);
            float *o = P + (k - k0) * MOEQ__PK_ROWS;
            _mm256_storeu_ps(o, _mm256_mul_ps(f0, s0));
            _mm256_storeu_ps(o + 8, _mm256_mul_ps(f1, s1));
            _mm256_storeu_ps(o + 16, _mm256_mul_ps(f2, s0));
            _mm256_storeu_ps(o + 24, _mm256_mul_ps(f3, s1));
            _mm256_storeu_ps(o + 32, _mm256_mul_ps(f4, s0));
            _mm256_storeu_ps(o + 40, _mm256_mul_ps(f5, s1));
            _mm256_storeu_ps(o + 48, _mm256_mul_ps(f6, s0));
            _mm256_storeu_ps(o + 56, _mm256_mul_ps(f7, s1));
        }
    }
}

/* ---- I4 ----------------------------------------------------------------------------- */

/* Column i (0..7) of the I4 chunk held in u (rows 0-7), v (rows 8-15) and
 * their copies shifted right by 16 bits (uh, vh): n * 2^(4 (i % 4)). */
#define I4_COL(u, v, uh, vh, i, f0, f1)                                                            \
    do {                                                                                           \
        const __m256i m_ = _mm256_set1_epi32(0xF << (4 * ((i)&3)));                                \
        f0 = _mm256_cvtepi32_ps(_mm256_and_si256((i) < 4 ? (u) : (uh), m_));                       \
        f1 = _mm256_cvtepi32_ps(_mm256_and_si256((i) < 4 ? (v) : (vh), m_));                       \
    } while (0)

#define I4_LOAD(q, u, v, uh, vh)                                                                   \
    do {                                                                                           \
        u = _mm256_loadu_si256((const __m256i *)(const void *)(q));                                \
        v = _mm256_loadu_si256((const __m256i *)(const void *)((q) + 32));                         \
        uh = _mm256_srli_epi32(u, 16);                                                             \
        vh = _mm256_srli_epi32(v, 16);                                                             \
    } while (0)

/* P = fma(n * 2^(4i), ks * 2^(-4i), -8 ks): one rounding of (n - 8) * ks, which is
 * kv * ks (the plan keeps ks >= 2^-114, so ks * 2^-12 is exact). */
static void panel_i4(const moeq__packed *pk, size_t blk, size_t k0, size_t nk, float *P) {
    const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
    const size_t k1 = k0 + nk;
    for (size_t k = k0; k < k1;) {
        const size_t g = k / pk->gsize;
        const size_t kend = (g + 1) * pk->gsize < k1 ? (g + 1) * pk->gsize : k1;
        __m256 s[2];
        scales16(pk, blk, g, s);
        __m256 sd[4][2], n8[2];
        for (int h = 0; h < 2; h++) {
            sd[0][h] = s[h];
            sd[1][h] = _mm256_mul_ps(s[h], _mm256_set1_ps(0x1p-4f));
            sd[2][h] = _mm256_mul_ps(s[h], _mm256_set1_ps(0x1p-8f));
            sd[3][h] = _mm256_mul_ps(s[h], _mm256_set1_ps(0x1p-12f));
            n8[h] = _mm256_mul_ps(s[h], _mm256_set1_ps(-8.0f));
        }
        for (; k < kend; k += 8) {
            __m256i u, v, uh, vh;
            PF_AT(bc, k + nk, MOEQ__PK_I4);
            I4_LOAD(bc + (k / 8) * 64, u, v, uh, vh);
            float *o = P + (k - k0) * MOEQ__PK_ROWS;
#define PCOL(i)                                                                                    \
    do {                                                                                           \
        __m256 f0_, f1_;                                                                           \
        I4_COL(u, v, uh, vh, i, f0_, f1_);                                                         \
        _mm256_storeu_ps(o + 16 * (i), _mm256_fmadd_ps(f0_, sd[(i)&3][0], n8[0]));                 \
        _mm256_storeu_ps(o + 16 * (i) + 8, _mm256_fmadd_ps(f1_, sd[(i)&3][1], n8[1]));             \
    } while (0)
            PCOL(0);
            PCOL(1);
            PCOL(2);
            PCOL(3);
            PCOL(4);
            PCOL(5);
            PCOL(6);
            PCOL(7);
#undef PCOL
        }
    }
}

static void panel(const moeq__packed *pk, size_t blk, size_t k0, size_t nk, float *P) {
    switch (pk->code) {
        case MOEQ__PK_I4: panel_i4(pk, blk, k0, nk, P); break;
        case MOEQ__PK_NIB: panel_impl(pk, blk, k0, nk, P, MOEQ__PK_NIB); break;
        case MOEQ__PK_I8: panel_impl(pk, blk, k0, nk, P, MOEQ__PK_I8); break;
        default: panel_impl(pk, blk, k0, nk, P, MOEQ__PK_E4M3); break;
    }
}

/* ---- gemv: a few tokens against one block, decoding each code once ---------------- */

/* gemv streams codes once from DRAM: fetch PF_AHEAD bytes ahead (past the
 * block's end too: the next block is usually next). */
#ifndef PF_AHEAD
#define PF_AHEAD 2048
#endif
#define PF(bc, k, code)                                                                            \
    _mm_prefetch((const char *)((bc) + (k)*MOEQ__PK_COL_BYTES(code) + PF_AHEAD), _MM_HINT_T0)

#define BC(xp, j)    _mm256_broadcast_ss((xp) + k + (j))
#define FMA(a, f, x) a = _mm256_fmadd_ps(f, x, a)

/* Column k + j, decoded to fa (rows 0-7) and fb (rows 8-15), into one chain
 * per token of 3 or 4 (M) tokens x0..x3: accumulators a<token><half>. */
#define STEP4(j, fa, fb)                                                                           \
    do {                                                                                           \
        __m256 b_ = BC(x0, j);                                                                     \
        FMA(a00, fa, b_);                                                                          \
        FMA(a01, fb, b_);                                                                          \
        b_ = BC(x1, j);                                                                            \
        FMA(a10, fa, b_);                                                                          \
        FMA(a11, fb, b_);                                                                          \
        b_ = BC(x2, j);                                                                            \
        FMA(a20, fa, b_);                                                                          \
        FMA(a21, fb, b_);                                                                          \
        if (M > 3) {                                                                               \
            b_ = BC(x3, j);                                                                        \
            FMA(a30, fa, b_);                                                                      \
            FMA(a31, fb, b_);                                                                      \
        }                                                                                          \
    } while (0)

/* One token: four interleaved chains (column k % 4), summed pairwise at the
 * end of each scale group. */
AI void gemv1(const moeq__packed *pk, size_t blk, const float *const *x, float *y, const int code) {
    const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
    const __m256i lutl = code == MOEQ__PK_NIB ? nib_lut(pk, 0) : _mm256_setzero_si256();
    const __m256i luth = code == MOEQ__PK_NIB ? nib_lut(pk, 1) : _mm256_setzero_si256();
    const float *x0 = x[0];
    __m256 t0 = _mm256_setzero_ps(), t1 = t0;
    const size_t gs = pk->gsize;
    for (size_t g = 0; g < pk->groups; g++) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
               a7 = a0;
        for (size_t k = g * gs; k < (g + 1) * gs; k += 4) {
            __m256 f0, f1, f2, f3;
            PF(bc, k, code);
            if (code == MOEQ__PK_NIB) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(bc + k * 8));
                NIB_HALF(v, lutl, luth, 0, f0, f1, f2, f3);
                __m256 b = BC(x0, 0);
                FMA(a0, f0, b);
                FMA(a1, f1, b);
                b = BC(x0, 1);
                FMA(a2, f2, b);
                FMA(a3, f3, b);
                NIB_HALF(v, lutl, luth, 1, f0, f1, f2, f3);
                b = BC(x0, 2);
                FMA(a4, f0, b);
                FMA(a5, f1, b);
                b = BC(x0, 3);
                FMA(a6, f2, b);
                FMA(a7, f3, b);
            } else {
                const uint8_t *q = bc + k * MOEQ__PK_ROWS;
                BYTE_COL(q, code, f0, f1);
                BYTE_COL(q + 16, code, f2, f3);
                __m256 b = BC(x0, 0);
                FMA(a0, f0, b);
                FMA(a1, f1, b);
                b = BC(x0, 1);
                FMA(a2, f2, b);
                FMA(a3, f3, b);
                BYTE_COL(q + 32, code, f0, f1);
                BYTE_COL(q + 48, code, f2, f3);
                b = BC(x0, 2);
                FMA(a4, f0, b);
                FMA(a5, f1, b);
                b = BC(x0, 3);
                FMA(a6, f2, b);
                FMA(a7, f3, b);
            }
        }
        __m256 s[2];
        scales16_raw(pk, blk, g, s);
        t0 = _mm256_fmadd_ps(_mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a4, a6)), s[0], t0);
        t1 = _mm256_fmadd_ps(_mm256_add_ps(_mm256_add_ps(a1, a3), _mm256_add_ps(a5, a7)), s[1], t1);
    }
    _mm256_storeu_ps(y, gemv_fix(pk, t0));
    _mm256_storeu_ps(y + 8, gemv_fix(pk, t1));
}

/* Two tokens: two chains each (column k % 2); the totals live in y. */
AI void gemv2(const moeq__packed *pk, size_t blk, const float *const *x, float *y, size_t ldy,
              const int code) {
    const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
    const __m256i lutl = code == MOEQ__PK_NIB ? nib_lut(pk, 0) : _mm256_setzero_si256();
    const __m256i luth = code == MOEQ__PK_NIB ? nib_lut(pk, 1) : _mm256_setzero_si256();
    const float *x0 = x[0], *x1 = x[1];
    const __m256 zero = _mm256_setzero_ps();
    float *y0 = y, *y1 = y + ldy;
    _mm256_storeu_ps(y0, zero);
    _mm256_storeu_ps(y0 + 8, zero);
    _mm256_storeu_ps(y1, zero);
    _mm256_storeu_ps(y1 + 8, zero);
    const size_t gs = pk->gsize;
    for (size_t g = 0; g < pk->groups; g++) {
        /* a<token><phase><half> */
        __m256 a000 = zero, a001 = zero, a010 = zero, a011 = zero, a100 = zero, a101 = zero,
               a110 = zero, a111 = zero;
        for (size_t k = g * gs; k < (g + 1) * gs; k += 4) {
            __m256 f0, f1, f2, f3;
            PF(bc, k, code);
            __m256i v = _mm256_setzero_si256();
            const uint8_t *q = bc + k * MOEQ__PK_ROWS;
            if (code == MOEQ__PK_NIB) {
                v = _mm256_loadu_si256((const __m256i *)(const void *)(bc + k * 8));
                NIB_HALF(v, lutl, luth, 0, f0, f1, f2, f3);
            } else {
                BYTE_COL(q, code, f0, f1);
                BYTE_COL(q + 16, code, f2, f3);
            }
            __m256 b = BC(x0, 0), c = BC(x1, 0);
            FMA(a000, f0, b);
            FMA(a001, f1, b);
            FMA(a100, f0, c);
            FMA(a101, f1, c);
            b = BC(x0, 1);
            c = BC(x1, 1);
            FMA(a010, f2, b);
            FMA(a011, f3, b);
            FMA(a110, f2, c);
            FMA(a111, f3, c);
            if (code == MOEQ__PK_NIB) {
                NIB_HALF(v, lutl, luth, 1, f0, f1, f2, f3);
            } else {
                BYTE_COL(q + 32, code, f0, f1);
                BYTE_COL(q + 48, code, f2, f3);
            }
            b = BC(x0, 2);
            c = BC(x1, 2);
            FMA(a000, f0, b);
            FMA(a001, f1, b);
            FMA(a100, f0, c);
            FMA(a101, f1, c);
            b = BC(x0, 3);
            c = BC(x1, 3);
            FMA(a010, f2, b);
            FMA(a011, f3, b);
            FMA(a110, f2, c);
            FMA(a111, f3, c);
        }
        __m256 s[2];
        scales16_raw(pk, blk, g, s);
        _mm256_storeu_ps(y0, _mm256_fmadd_ps(_mm256_add_ps(a000, a010), s[0], _mm256_loadu_ps(y0)));
        _mm256_storeu_ps(y0 + 8,
                         _mm256_fmadd_ps(_mm256_add_ps(a001, a011), s[1], _mm256_loadu_ps(y0 + 8)));
        _mm256_storeu_ps(y1, _mm256_fmadd_ps(_mm256_add_ps(a100, a110), s[0], _mm256_loadu_ps(y1)));
        _mm256_storeu_ps(y1 + 8,
                         _mm256_fmadd_ps(_mm256_add_ps(a101, a111), s[1], _mm256_loadu_ps(y1 + 8)));
    }
    gemv_fix_mem(pk, y, ldy, 2);
}

/* Three or four tokens: one chain each; the totals live in y. */
AI void gemv34(const moeq__packed *pk, size_t blk, const float *const *x, float *y, size_t ldy,
               const int code, const int M) {
    const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
    const __m256i lutl = code == MOEQ__PK_NIB ? nib_lut(pk, 0) : _mm256_setzero_si256();
    const __m256i luth = code == MOEQ__PK_NIB ? nib_lut(pk, 1) : _mm256_setzero_si256();
    const float *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = M > 3 ? x[3] : x[2];
    const __m256 zero = _mm256_setzero_ps();
    zero_totals(y, ldy, M);
    const size_t gs = pk->gsize;
    for (size_t g = 0; g < pk->groups; g++) {
        __m256 a00 = zero, a01 = zero, a10 = zero, a11 = zero, a20 = zero, a21 = zero, a30 = zero,
               a31 = zero;
        for (size_t k = g * gs; k < (g + 1) * gs; k += 4) {
            __m256 f0, f1, f2, f3;
            PF(bc, k, code);
            __m256i v = _mm256_setzero_si256();
            const uint8_t *q = bc + k * MOEQ__PK_ROWS;
            if (code == MOEQ__PK_NIB) {
                v = _mm256_loadu_si256((const __m256i *)(const void *)(bc + k * 8));
                NIB_HALF(v, lutl, luth, 0, f0, f1, f2, f3);
            } else {
                BYTE_COL(q, code, f0, f1);
                BYTE_COL(q + 16, code, f2, f3);
            }
            STEP4(0, f0, f1);
            STEP4(1, f2, f3);
            if (code == MOEQ__PK_NIB) {
                NIB_HALF(v, lutl, luth, 1, f0, f1, f2, f3);
            } else {
                BYTE_COL(q + 32, code, f0, f1);
                BYTE_COL(q + 48, code, f2, f3);
            }
            STEP4(2, f0, f1);
            STEP4(3, f2, f3);
        }
        __m256 s[2];
        scales16_raw(pk, blk, g, s);
#define TOT(m, a0, a1)                                                                             \
    do {                                                                                           \
        float *yy_ = y + (size_t)(m)*ldy;                                                          \
        _mm256_storeu_ps(yy_, _mm256_fmadd_ps(a0, s[0], _mm256_loadu_ps(yy_)));                    \
        _mm256_storeu_ps(yy_ + 8, _mm256_fmadd_ps(a1, s[1], _mm256_loadu_ps(yy_ + 8)));            \
    } while (0)
        TOT(0, a00, a01);
        TOT(1, a10, a11);
        TOT(2, a20, a21);
        if (M > 3) TOT(3, a30, a31);
#undef TOT
    }
    gemv_fix_mem(pk, y, ldy, M);
}

/* I4: the rows come from i4_prep (x scaled by 2^(-4 (k % 4)), then the
 * groups' sums); each code column is decoded once for all tokens. */
static void i4_prep(const float *x, size_t cols, size_t gsize, float *out) {
    const __m256 down =
        _mm256_setr_ps(1.0f, 0x1p-4f, 0x1p-8f, 0x1p-12f, 1.0f, 0x1p-4f, 0x1p-8f, 0x1p-12f);
    for (size_t g = 0; g * gsize < cols; g++) {
        __m256 acc = _mm256_setzero_ps();
        for (size_t k = g * gsize; k < (g + 1) * gsize; k += 8) {
            const __m256 v = _mm256_loadu_ps(x + k);
            acc = _mm256_add_ps(acc, v);
            _mm256_storeu_ps(out + k, _mm256_mul_ps(v, down));
        }
        /* ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) */
        const __m128 t = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
        const __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));
        out[cols + g] = _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
    }
}

AI void gemv_i4(const moeq__packed *pk, size_t blk, const float *const *x, float *y, size_t ldy,
                const int M) {
    const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
    const float *x0 = x[0], *x1 = M > 1 ? x[1] : x0, *x2 = M > 2 ? x[2] : x0,
                *x3 = M > 3 ? x[3] : x0;
    const __m256 zero = _mm256_setzero_ps();
    zero_totals(y, ldy, M);
    const size_t gs = pk->gsize;
    for (size_t g = 0; g < pk->groups; g++) {
        /* M = 1: a<phase><half>, phase k % 4; M = 2: token 0 in a0x (phase 0)
         * and a1x (phase 1), token 1 in a2x and a3x; M = 3, 4: a<token><half> */
        __m256 a00 = zero, a01 = zero, a10 = zero, a11 = zero, a20 = zero, a21 = zero, a30 = zero,
               a31 = zero;
        for (size_t k = g * gs; k < (g + 1) * gs; k += 8) {
            __m256i u, v, uh, vh;
            PF(bc, k, MOEQ__PK_I4);
            I4_LOAD(bc + (k / 8) * 64, u, v, uh, vh);
#define COL1(j, A0, A1)                                                                            \
    do {                                                                                           \
        __m256 f0_, f1_;                                                                           \
        I4_COL(u, v, uh, vh, j, f0_, f1_);                                                         \
        const __m256 b_ = BC(x0, j);                                                               \
        FMA(A0, f0_, b_);                                                                          \
        FMA(A1, f1_, b_);                                                                          \
    } while (0)
#define COL2(j, A0, A1, C0, C1)                                                                    \
    do {                                                                                           \
        __m256 f0_, f1_;                                                                           \
        I4_COL(u, v, uh, vh, j, f0_, f1_);                                                         \
        __m256 b_ = BC(x0, j);                                                                     \
        FMA(A0, f0_, b_);                                                                          \
        FMA(A1, f1_, b_);                                                                          \
        b_ = BC(x1, j);                                                                            \
        FMA(C0, f0_, b_);                                                                          \
        FMA(C1, f1_, b_);                                                                          \
    } while (0)
#define COL4(j)                                                                                    \
    do {                                                                                           \
        __m256 f0_, f1_;                                                                           \
        I4_COL(u, v, uh, vh, j, f0_, f1_);                                                         \
        STEP4(j, f0_, f1_);                                                                        \
    } while (0)
            if (M == 1) {
                COL1(0, a00, a01);
                COL1(1, a10, a11);
                COL1(2, a20, a21);
                COL1(3, a30, a31);
                COL1(4, a00, a01);
                COL1(5, a10, a11);
                COL1(6, a20, a21);
                COL1(7, a30, a31);
            } else if (M == 2) {
                COL2(0, a00, a01, a20, a21);
                COL2(1, a10, a11, a30, a31);
                COL2(2, a00, a01, a20, a21);
                COL2(3, a10, a11, a30, a31);
                COL2(4, a00, a01, a20, a21);
                COL2(5, a10, a11, a30, a31);
                COL2(6, a00, a01, a20, a21);
                COL2(7, a10, a11, a30, a31);
            } else {
                COL4(0);
                COL4(1);
                COL4(2);
                COL4(3);
                COL4(4);
                COL4(5);
                COL4(6);
                COL4(7);
            }
#undef COL4
#undef COL2
#undef COL1
        }
        __m256 s[2];
        scales16_raw(pk, blk, g, s);
#define TOT(m, p0, p1)                                                                             \
    do {                                                                                           \
        const __m256 s8_ = _mm256_set1_ps(8.0f * x##m[pk->cols + g]);                              \
        float *yy_ = y + (size_t)(m)*ldy;                                                          \
        _mm256_storeu_ps(yy_, _mm256_fmadd_ps(_mm256_sub_ps(p0, s8_), s[0], _mm256_loadu_ps(yy_))); \
        _mm256_storeu_ps(yy_ + 8, _mm256_fmadd_ps(_mm256_sub_ps(p1, s8_), s[1],                    \
                                                  _mm256_loadu_ps(yy_ + 8)));                      \
    } while (0)
        if (M == 1) {
            TOT(0, _mm256_add_ps(_mm256_add_ps(a00, a10), _mm256_add_ps(a20, a30)),
                _mm256_add_ps(_mm256_add_ps(a01, a11), _mm256_add_ps(a21, a31)));
        } else if (M == 2) {
            TOT(0, _mm256_add_ps(a00, a10), _mm256_add_ps(a01, a11));
            TOT(1, _mm256_add_ps(a20, a30), _mm256_add_ps(a21, a31));
        } else {
            TOT(0, a00, a01);
            TOT(1, a10, a11);
            TOT(2, a20, a21);
            if (M > 3) TOT(3, a30, a31);
        }
#undef TOT
    }
    gemv_fix_mem(pk, y, ldy, M);
}

static void gemv(const moeq__packed *pk, size_t blk, size_t M, const float *const *x, float *y,
                 size_t ldy) {
    if (pk->code == MOEQ__PK_I4) {
        switch (M) {
            case 1: gemv_i4(pk, blk, x, y, ldy, 1); break;
            case 2: gemv_i4(pk, blk, x, y, ldy, 2); break;
            case 3: gemv_i4(pk, blk, x, y, ldy, 3); break;
            default: gemv_i4(pk, blk, x, y, ldy, 4); break;
        }
        return;
    }
#define GEMV_CODE(code)                                                                            \
    switch (M) {                                                                                   \
        case 1: gemv1(pk, blk, x, y, code); break;                                                 \
        case 2: gemv2(pk, blk, x, y, ldy, code); break;                                            \
        case 3: gemv34(pk, blk, x, y, ldy, code, 3); break;                                        \
        default: gemv34(pk, blk, x, y, ldy, code, 4); break;                                       \
    }
    switch (pk->code) {
        case MOEQ__PK_NIB: GEMV_CODE(MOEQ__PK_NIB); break;
        case MOEQ__PK_I8: GEMV_CODE(MOEQ__PK_I8); break;
        default: GEMV_CODE(MOEQ__PK_E4M3); break;
    }
#undef GEMV_CODE
}

/* ---- tile: up to 6 tokens x 16 rows over a panel ----------------------------------- */

AI void tile_impl(const float *P, size_t nk, const float *const *x, float *C, size_t ldc,
                  int accumulate, const int M) {
    const __m256 z = _mm256_setzero_ps();
    __m256 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z, c40 = z, c41 = z,
           c50 = z, c51 = z;
    const float *x0 = x[0], *x1 = M > 1 ? x[1] : x0, *x2 = M > 2 ? x[2] : x0,
                *x3 = M > 3 ? x[3] : x0, *x4 = M > 4 ? x[4] : x0, *x5 = M > 5 ? x[5] : x0;
#define LD(m, a, b)                                                                                \
    if (M > m) {                                                                                   \
        a = _mm256_loadu_ps(C + (size_t)(m)*ldc);                                                  \
        b = _mm256_loadu_ps(C + (size_t)(m)*ldc + 8);                                              \
    }
    if (accumulate) {
        LD(0, c00, c01)
        LD(1, c10, c11) LD(2, c20, c21) LD(3, c30, c31) LD(4, c40, c41) LD(5, c50, c51)
    }
#undef LD
    for (size_t k = 0; k < nk; k++) {
        const __m256 p0 = _mm256_loadu_ps(P + k * MOEQ__PK_ROWS);
        const __m256 p1 = _mm256_loadu_ps(P + k * MOEQ__PK_ROWS + 8);
#define ROW(m, xp, a, b)                                                                           \
    if (M > m) {                                                                                   \
        const __m256 xb_ = _mm256_broadcast_ss((xp) + k);                                          \
        FMA(a, p0, xb_);                                                                           \
        FMA(b, p1, xb_);                                                                           \
    }
        ROW(0, x0, c00, c01)
        ROW(1, x1, c10, c11) ROW(2, x2, c20, c21) ROW(3, x3, c30, c31) ROW(4, x4, c40, c41)
            ROW(5, x5, c50, c51)
#undef ROW
    }
#define ST(m, a, b)                                                                                \
    if (M > m) {                                                                                   \
        _mm256_storeu_ps(C + (size_t)(m)*ldc, a);                                                  \
        _mm256_storeu_ps(C + (size_t)(m)*ldc + 8, b);                                              \
    }
    ST(0, c00, c01) ST(1, c10, c11) ST(2, c20, c21) ST(3, c30, c31) ST(4, c40, c41) ST(5, c50, c51)
#undef ST
}

/* The tokens in tiles of at most MOEQ__TILE_MAX, as even as they come (the
 * panel stays in L1 across the tiles), block by block: two blocks would
 * need 24 accumulators of the 16 ymm registers. */
static void tile_blk(const float *P, size_t nk, size_t M, const float *const *x, float *C,
                     size_t ldc, int accumulate) {
    const size_t ntile = moeq__ntiles(M, MOEQ__TILE_MAX);
    for (size_t t = 0, m0 = 0; t < ntile; t++) {
        const size_t mt = moeq__tile_rows(M, ntile, t);
        const float *const *xt = x + m0;
        float *Ct = C + m0 * ldc;
        switch (mt) {
            case 1: tile_impl(P, nk, xt, Ct, ldc, accumulate, 1); break;
            case 2: tile_impl(P, nk, xt, Ct, ldc, accumulate, 2); break;
            case 3: tile_impl(P, nk, xt, Ct, ldc, accumulate, 3); break;
            case 4: tile_impl(P, nk, xt, Ct, ldc, accumulate, 4); break;
            case 5: tile_impl(P, nk, xt, Ct, ldc, accumulate, 5); break;
            default: tile_impl(P, nk, xt, Ct, ldc, accumulate, 6); break;
        }
        m0 += mt;
    }
}

static void tile(const float *P, size_t nk, size_t nb, size_t M, const float *const *x, float *C,
                 size_t ldc, int accumulate) {
    for (size_t i = 0; i < nb; i++) {
        tile_blk(P + i * nk * MOEQ__PK_ROWS, nk, M, x, C + i * MOEQ__PK_ROWS, ldc, accumulate);
    }
}

/* ---- the bfloat16 path: panels of code values, tile_bf16, gemv_bf16 ---------------- */

/* Columns k and k + 1 of rows 0-7 (a0, b0) and 8-15 (a1, b1), exact float32
 * code values, as bfloat16 pairs: each float32 cut to its top half (exact
 * for every packed code value), the even column low, the odd one high. */
AI void store_pairs(uint16_t *o, __m256 a0, __m256 a1, __m256 b0, __m256 b1) {
    _mm256_storeu_si256((__m256i *)(void *)o,
                        _mm256_blend_epi16(_mm256_srli_epi32(_mm256_castps_si256(a0), 16),
                                           _mm256_castps_si256(b0), 0xAA));
    _mm256_storeu_si256((__m256i *)(void *)(o + 16),
                        _mm256_blend_epi16(_mm256_srli_epi32(_mm256_castps_si256(a1), 16),
                                           _mm256_castps_si256(b1), 0xAA));
}

/* The code values (kv) of columns k .. k + 3 of the block at bc, unscaled,
 * decoded as the panels decode them (COLS4; I4 through the masked nibble
 * n * 2^(4i), then fma(that, 2^(-4i), -8) = n - 8 exactly, or with u16
 * fma(that, 2^(-4i-4), 1) = 1 + n/16, gemv_bf16's u): column k + j in
 * f[2j] (rows 0-7) and f[2j + 1] (rows 8-15).  lutl, luth: nib_lut's. */
AI void kv4(const uint8_t *bc, size_t k, const int code, __m256i lutl, __m256i luth, __m256 f[8],
            const int u16) {
    if (code == MOEQ__PK_I4) {
        __m256i u, v, uh, vh;
        I4_LOAD(bc + (k / 8) * 64, u, v, uh, vh);
        const __m256 add = _mm256_set1_ps(u16 ? 1.0f : -8.0f);
#define I4_KV(i, a, b)                                                                             \
    do {                                                                                           \
        const __m256 d_ = _mm256_set1_ps(1.0f / (float)(1 << (4 * ((i)&3) + (u16 ? 4 : 0))));      \
        I4_COL(u, v, uh, vh, i, a, b);                                                             \
        a = _mm256_fmadd_ps(a, d_, add);                                                           \
        b = _mm256_fmadd_ps(b, d_, add);                                                           \
    } while (0)
        if (k % 8 == 0) {
            I4_KV(0, f[0], f[1]);
            I4_KV(1, f[2], f[3]);
            I4_KV(2, f[4], f[5]);
            I4_KV(3, f[6], f[7]);
        } else {
            I4_KV(4, f[0], f[1]);
            I4_KV(5, f[2], f[3]);
            I4_KV(6, f[4], f[5]);
            I4_KV(7, f[6], f[7]);
        }
#undef I4_KV
    } else {
        COLS4(bc, k, code, lut, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]);
    }
}

/* kv4's code values in pairs, with `scaled` times their group's scales (a
 * product, exact where the caller may ask for it). */
AI void panel_bf16_impl(const moeq__packed *pk, size_t blk, size_t k0, size_t nk, uint16_t *Pb,
                        const int code, const int scaled) {
    const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
    const __m256i lutl = code == MOEQ__PK_NIB ? nib_lut(pk, 0) : _mm256_setzero_si256();
    const __m256i luth = code == MOEQ__PK_NIB ? nib_lut(pk, 1) : _mm256_setzero_si256();
    __m256 s[2] = {_mm256_set1_ps(1.0f), _mm256_set1_ps(1.0f)};
    size_t g_end = 0;
    for (size_t k = k0; k < k0 + nk; k += 4) {
        __m256 f[8];
        uint16_t *o = Pb + ((k - k0) / 2) * 32;
        PF_AT(bc, k + nk, code); /* the next panel's codes */
        kv4(bc, k, code, lutl, luth, f, 0);
        if (scaled) {
            if (k >= g_end) {
                scales16(pk, blk, k / pk->gsize, s);
                g_end = (k / pk->gsize + 1) * pk->gsize;
            }
            for (int i = 0; i < 8; i++) f[i] = _mm256_mul_ps(f[i], s[i & 1]);
        }
        store_pairs(o, f[0], f[1], f[2], f[3]);
        store_pairs(o + 32, f[4], f[5], f[6], f[7]);
    }
}

static void panel_bf16(const moeq__packed *pk, size_t blk, size_t k0, size_t nk, uint16_t *Pb,
                       int scaled) {
#define PB16(code)                                                                                 \
    if (scaled) {                                                                                  \
        panel_bf16_impl(pk, blk, k0, nk, Pb, code, 1);                                             \
    } else {                                                                                       \
        panel_bf16_impl(pk, blk, k0, nk, Pb, code, 0);                                             \
    }
    switch (pk->code) {
        case MOEQ__PK_I4: PB16(MOEQ__PK_I4) break;
        case MOEQ__PK_NIB: PB16(MOEQ__PK_NIB) break;
        case MOEQ__PK_I8: PB16(MOEQ__PK_I8) break;
        default: PB16(MOEQ__PK_E4M3) break;
    }
#undef PB16
}

/* One or two (M) tokens of tile_bf16: for each, rows 0-7 and 8-15 in an even
 * and an odd chain (8 accumulators), two fused multiply-adds per pair of
 * exact products, odd column first, as vdpbf16ps adds them. */
AI void tile_bf16_impl(const uint16_t *Pb, size_t nk, const uint16_t *const *x, float *C,
                       size_t ldc, int accumulate, const int M) {
    const __m256 z = _mm256_setzero_ps();
    __m256 e00 = z, e01 = z, o00 = z, o01 = z, e10 = z, e11 = z, o10 = z, o11 = z;
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    const uint16_t *x0 = x[0], *x1 = M > 1 ? x[1] : x0;
#define XPAIR(xp, p, xo, xe)                                                                       \
    uint32_t pr_;                                                                                  \
    memcpy(&pr_, (xp) + 2 * (p), sizeof pr_);                                                      \
    const __m256 xo = _mm256_set1_ps(moeq__bits_f32(pr_ & 0xFFFF0000u));                           \
    const __m256 xe = _mm256_set1_ps(moeq__bits_f32(pr_ << 16))
#define PAIR(p, c0a, c0b, c1a, c1b)                                                                \
    do {                                                                                           \
        const uint16_t *w_ = Pb + (p)*32;                                                          \
        const __m256i w0_ = _mm256_loadu_si256((const __m256i *)(const void *)w_);                 \
        const __m256i w1_ = _mm256_loadu_si256((const __m256i *)(const void *)(w_ + 16));          \
        const __m256 wo0_ = _mm256_castsi256_ps(_mm256_and_si256(w0_, hi));                        \
        const __m256 we0_ = _mm256_castsi256_ps(_mm256_slli_epi32(w0_, 16));                       \
        const __m256 wo1_ = _mm256_castsi256_ps(_mm256_and_si256(w1_, hi));                        \
        const __m256 we1_ = _mm256_castsi256_ps(_mm256_slli_epi32(w1_, 16));                       \
        {                                                                                          \
            XPAIR(x0, p, xo_, xe_);                                                                \
            c0a = _mm256_fmadd_ps(we0_, xe_, _mm256_fmadd_ps(wo0_, xo_, c0a));                     \
            c0b = _mm256_fmadd_ps(we1_, xe_, _mm256_fmadd_ps(wo1_, xo_, c0b));                     \
        }                                                                                          \
        if (M > 1) {                                                                               \
            XPAIR(x1, p, xo_, xe_);                                                                \
            c1a = _mm256_fmadd_ps(we0_, xe_, _mm256_fmadd_ps(wo0_, xo_, c1a));                     \
            c1b = _mm256_fmadd_ps(we1_, xe_, _mm256_fmadd_ps(wo1_, xo_, c1b));                     \
        }                                                                                          \
    } while (0)
    for (size_t p = 0; p < nk / 2; p += 2) {
        PAIR(p, e00, e01, e10, e11);
        PAIR(p + 1, o00, o01, o10, o11);
    }
#undef PAIR
#undef XPAIR
    for (int m = 0; m < M; m++) {
        __m256 sa = m ? _mm256_add_ps(e10, o10) : _mm256_add_ps(e00, o00);
        __m256 sb = m ? _mm256_add_ps(e11, o11) : _mm256_add_ps(e01, o01);
        float *c = C + (size_t)m * ldc;
        if (accumulate) {
            sa = _mm256_add_ps(_mm256_loadu_ps(c), sa);
            sb = _mm256_add_ps(_mm256_loadu_ps(c + 8), sb);
        }
        _mm256_storeu_ps(c, sa);
        _mm256_storeu_ps(c + 8, sb);
    }
}

/* Tokens two at a time (16 ymm registers do not hold six tokens' chains). */
static void tile_bf16(const uint16_t *Pb, size_t nk, size_t M, const uint16_t *const *x, float *C,
                      size_t ldc, int accumulate) {
    size_t m = 0;
    for (; m + 2 <= M; m += 2) tile_bf16_impl(Pb, nk, x + m, C + m * ldc, ldc, accumulate, 2);
    if (m < M) tile_bf16_impl(Pb, nk, x + m, C + m * ldc, ldc, accumulate, 1);
}

#define GB16_CHUNK 256 /* columns of x made float32 at a time */

static void bf16_to_f32(const uint16_t *src, size_t n, float *dst); /* the table's, below */

/* gemv_bf16 (kernels.h): kv4's code values (I4: u = 1 + n/16, each group's
 * partial then fma(-24, S_g, 16 * partial)) in registers against the rows of
 * x made float32 (exact) GB16_CHUNK columns at a time, each pair of exact
 * products added as vdpbf16ps adds them (two fused multiply-adds, odd column
 * first) into chains acc[m][c] (rows 0-7, 8-15); eight columns per step,
 * pairs 0, 1 into chains 0, 1 and pairs 2, 3 into 2, 3 (M = 1) or again
 * 0, 1.  It keeps the avx512 table's bits where the CPU lacks AVX512_BF16 or
 * under MOEQ_KERNELS=avx2, at 0.5-0.9x the float gemv's rate (kern_bench,
 * hot): moe_fast.c uses gemv_bf16 only on CPUs with AVX512_BF16. */
AI void gemv_bf16_impl(const moeq__packed *pk, size_t blk, const uint16_t *const *x,
                       const float *const *xsum, float *y, size_t ldy, const int code,
                       const int M) {
    const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
    const __m256i lutl = code == MOEQ__PK_NIB ? nib_lut(pk, 0) : _mm256_setzero_si256();
    const __m256i luth = code == MOEQ__PK_NIB ? nib_lut(pk, 1) : _mm256_setzero_si256();
    _Alignas(32) float xf[MOEQ__GEMV_MAX][GB16_CHUNK];
    const __m256 z = _mm256_setzero_ps();
    __m256 tot[MOEQ__GEMV_MAX][2];
    for (int m = 0; m < M; m++) tot[m][0] = tot[m][1] = z;
    for (size_t g = 0; g < pk->groups; g++) {
        __m256 acc[MOEQ__GEMV_MAX][4][2];
        for (int m = 0; m < M; m++) {
            for (int c = 0; c < 4; c++) acc[m][c][0] = acc[m][c][1] = z;
        }
        for (size_t kc = g * pk->gsize; kc < (g + 1) * pk->gsize; kc += GB16_CHUNK) {
            const size_t n =
                (g + 1) * pk->gsize - kc < GB16_CHUNK ? (g + 1) * pk->gsize - kc : GB16_CHUNK;
            for (int m = 0; m < M; m++) bf16_to_f32(x[m] + kc, n, xf[m]);
            for (size_t j = 0; j < n; j += 8) {
                const size_t k = kc + j;
                PF(bc, k, code);
                if (MOEQ__PK_COL_BYTES(code) == 16u) PF(bc, k + 4, code);
                for (int h = 0; h < 2; h++) {
                    __m256 f[8];
                    kv4(bc, k + 4 * (size_t)h, code, lutl, luth, f, 1);
                    const int c0 = M == 1 ? 2 * h : 0;
                    for (int m = 0; m < M; m++) {
                        for (int q = 0; q < 2; q++) { /* columns k + 4h + 2q and the next */
                            const float *xp = xf[m] + j + 4 * (size_t)h + 2 * (size_t)q;
                            const __m256 xe = _mm256_broadcast_ss(xp);
                            const __m256 xo = _mm256_broadcast_ss(xp + 1);
                            __m256 *a = acc[m][c0 + q];
                            a[0] = _mm256_fmadd_ps(f[4 * q + 2], xo, a[0]);
                            a[1] = _mm256_fmadd_ps(f[4 * q + 3], xo, a[1]);
                            a[0] = _mm256_fmadd_ps(f[4 * q], xe, a[0]);
                            a[1] = _mm256_fmadd_ps(f[4 * q + 1], xe, a[1]);
                        }
                    }
                }
            }
        }
        __m256 s[2];
        scales16_raw(pk, blk, g, s);
        for (int m = 0; m < M; m++) {
            for (int h = 0; h < 2; h++) {
                __m256 part = M == 1 ? _mm256_add_ps(_mm256_add_ps(acc[m][0][h], acc[m][1][h]),
                                                     _mm256_add_ps(acc[m][2][h], acc[m][3][h]))
                                     : _mm256_add_ps(acc[m][0][h], acc[m][1][h]);
                if (code == MOEQ__PK_I4) { /* fma(-24, S_g, 16 * partial) */
                    part = _mm256_fmadd_ps(_mm256_set1_ps(-24.0f), _mm256_set1_ps(xsum[m][g]),
                                           _mm256_mul_ps(part, _mm256_set1_ps(16.0f)));
                }
                tot[m][h] = _mm256_fmadd_ps(part, s[h], tot[m][h]);
            }
        }
    }
    for (int m = 0; m < M; m++) {
        _mm256_storeu_ps(y + (size_t)m * ldy, gemv_fix(pk, tot[m][0]));
        _mm256_storeu_ps(y + (size_t)m * ldy + 8, gemv_fix(pk, tot[m][1]));
    }
}

static void gemv_bf16(const moeq__packed *pk, size_t blk, size_t M, const uint16_t *const *x,
                      const float *const *xsum, float *y, size_t ldy) {
#define CALL(code, m) gemv_bf16_impl(pk, blk, x, xsum, y, ldy, code, m)
    MOEQ__GEMV_DISPATCH(CALL)
#undef CALL
}

/* ---- idot: int8 codes times int8 activation codes, exact int32 sums ----------------- */

/* Two columns of a block (16 rows each, at q) interleaved into int16 pairs,
 * rows 0-7 in w0 and 8-15 in w1, so one vpmaddwd against a broadcast pair of
 * activation codes adds both columns' products for 8 rows. */
AI void i8_pairs(const uint8_t *q, __m256i *w0, __m256i *w1) {
    const __m128i c0 = _mm_loadu_si128((const __m128i *)(const void *)q);
    const __m128i c1 = _mm_loadu_si128((const __m128i *)(const void *)(q + 16));
    *w0 = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(c0, c1));
    *w1 = _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(c0, c1));
}

/* Activation codes k and k + 1 of a row (int16), broadcast as one pair. */
AI __m256i x_pair(const int16_t *x, size_t k) {
    int32_t pair;
    memcpy(&pair, x + k, sizeof pair);
    return _mm256_set1_epi32(pair);
}

/* Up to 6 tokens against one block of int8 codes, column pairs by i8_pairs;
 * with pf, the codes 2 KiB ahead are asked for as it goes. */
AI void idot_impl(const uint8_t *bc, size_t k0, size_t nk, const moeq__i8row *x, int32_t *C,
                  size_t ldc, int accumulate, const int M, int pf) {
    const __m256i z = _mm256_setzero_si256();
    __m256i a00 = z, a01 = z, a10 = z, a11 = z, a20 = z, a21 = z, a30 = z, a31 = z, a40 = z,
            a41 = z, a50 = z, a51 = z;
    const int16_t *x0 = x[0].w, *x1 = M > 1 ? x[1].w : x0, *x2 = M > 2 ? x[2].w : x0,
                  *x3 = M > 3 ? x[3].w : x0, *x4 = M > 4 ? x[4].w : x0, *x5 = M > 5 ? x[5].w : x0;
#define LD(m, a, b)                                                                                \
    if (M > m) {                                                                                   \
        a = _mm256_loadu_si256((const __m256i *)(C + (size_t)(m)*ldc));                            \
        b = _mm256_loadu_si256((const __m256i *)(C + (size_t)(m)*ldc + 8));                        \
    }
    if (accumulate) {
        LD(0, a00, a01)
        LD(1, a10, a11) LD(2, a20, a21) LD(3, a30, a31) LD(4, a40, a41) LD(5, a50, a51)
    }
#undef LD
    for (size_t k = k0; k < k0 + nk; k += 2) {
        __m256i w0, w1;
        if (pf && (k & 3) == 0) PF(bc, k, MOEQ__PK_I8);
        i8_pairs(bc + k * MOEQ__PK_ROWS, &w0, &w1);
#define ROW(m, xp, a, b)                                                                           \
    if (M > m) {                                                                                   \
        const __m256i xb_ = x_pair(xp, k);                                                         \
        a = _mm256_add_epi32(a, _mm256_madd_epi16(w0, xb_));                                       \
        b = _mm256_add_epi32(b, _mm256_madd_epi16(w1, xb_));                                       \
    }
        ROW(0, x0, a00, a01)
        ROW(1, x1, a10, a11) ROW(2, x2, a20, a21) ROW(3, x3, a30, a31) ROW(4, x4, a40, a41)
            ROW(5, x5, a50, a51)
#undef ROW
    }
#define ST(m, a, b)                                                                                \
    if (M > m) {                                                                                   \
        _mm256_storeu_si256((__m256i *)(C + (size_t)(m)*ldc), a);                                  \
        _mm256_storeu_si256((__m256i *)(C + (size_t)(m)*ldc + 8), b);                              \
    }
    ST(0, a00, a01) ST(1, a10, a11) ST(2, a20, a21) ST(3, a30, a31) ST(4, a40, a41) ST(5, a50, a51)
#undef ST
}

/* Up to 3 tokens (M) against two consecutive blocks in one pass, two
 * accumulators per block and token as idot_impl's: the blocks' codes are
 * read as two streams side by side, which a core fetches from DRAM faster
 * than one (cold: 0.74-0.90x the time of block after block).  With 4 tokens
 * the 16 accumulators spill (hot: 1.04-1.10x the time). */
AI void idot_pair(const uint8_t *bc, size_t blk_bytes, size_t k0, size_t nk, const moeq__i8row *x,
                  int32_t *C, size_t ldc, int accumulate, const int M) {
    const __m256i z = _mm256_setzero_si256();
    __m256i a00 = z, a01 = z, a02 = z, a03 = z, a10 = z, a11 = z, a12 = z, a13 = z, a20 = z,
            a21 = z, a22 = z, a23 = z;
    const uint8_t *bd = bc + blk_bytes;
    const int16_t *x0 = x[0].w, *x1 = M > 1 ? x[1].w : x0, *x2 = M > 2 ? x[2].w : x0;
#define LD(m, a, b, c, d)                                                                          \
    if (M > m) {                                                                                   \
        const int32_t *cm_ = C + (size_t)(m)*ldc;                                                  \
        a = _mm256_loadu_si256((const __m256i *)cm_);                                              \
        b = _mm256_loadu_si256((const __m256i *)(cm_ + 8));                                        \
        c = _mm256_loadu_si256((const __m256i *)(cm_ + 16));                                       \
        d = _mm256_loadu_si256((const __m256i *)(cm_ + 24));                                       \
    }
    if (accumulate) {
        LD(0, a00, a01, a02, a03)
        LD(1, a10, a11, a12, a13)
        LD(2, a20, a21, a22, a23)
    }
#undef LD
    for (size_t k = k0; k < k0 + nk; k += 2) {
        __m256i w0, w1, w2, w3;
        i8_pairs(bc + k * MOEQ__PK_ROWS, &w0, &w1);
        i8_pairs(bd + k * MOEQ__PK_ROWS, &w2, &w3);
#define ROW(m, xp, a, b, c, d)                                                                     \
    if (M > m) {                                                                                   \
        const __m256i xb_ = x_pair(xp, k);                                                         \
        a = _mm256_add_epi32(a, _mm256_madd_epi16(w0, xb_));                                       \
        b = _mm256_add_epi32(b, _mm256_madd_epi16(w1, xb_));                                       \
        c = _mm256_add_epi32(c, _mm256_madd_epi16(w2, xb_));                                       \
        d = _mm256_add_epi32(d, _mm256_madd_epi16(w3, xb_));                                       \
    }
        ROW(0, x0, a00, a01, a02, a03)
        ROW(1, x1, a10, a11, a12, a13)
        ROW(2, x2, a20, a21, a22, a23)
#undef ROW
    }
#define ST(m, a, b, c, d)                                                                          \
    if (M > m) {                                                                                   \
        int32_t *cm_ = C + (size_t)(m)*ldc;                                                        \
        _mm256_storeu_si256((__m256i *)cm_, a);                                                    \
        _mm256_storeu_si256((__m256i *)(cm_ + 8), b);                                              \
        _mm256_storeu_si256((__m256i *)(cm_ + 16), c);                                             \
        _mm256_storeu_si256((__m256i *)(cm_ + 24), d);                                             \
    }
    ST(0, a00, a01, a02, a03)
    ST(1, a10, a11, a12, a13)
    ST(2, a20, a21, a22, a23)
#undef ST
}

/* I4 codes: each 8-column chunk's two halves (rows 0-7, 8-15; one 32-bit
 * word of 8 nibbles per row) become, per half, two vectors of 4 rows x 8
 * columns in bytes (the low and high nibbles interleaved: rows 0, 1, 4, 5
 * and 2, 3, 6, 7), decoded once per window for all tokens.  vpmaddubsw takes
 * the stored n (0..15, unsigned) against 8 broadcast activation codes (the
 * row's bytes), the products of up to 8 chunks add in int16 (vpaddw, half
 * the multiplies of widening every chunk), vpmaddwd with ones widens those
 * sums, and one vphaddd per half at the end puts the rows in order; the
 * offset -8 comes off through the window's sum of x (the row's prefix
 * sums). */
#define IDOT4_WIN 256

/* Decodes columns [kw, kw + n) of the block at bc (n <= IDOT4_WIN, a multiple
 * of 8) into W, chunk j at W + 128 j. */
AI void i4_window(const uint8_t *bc, size_t kw, size_t n, uint8_t *W) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (size_t j = 0; j < n / 8; j++) {
        PF(bc, kw + 8 * j, MOEQ__PK_I4);
        for (int h = 0; h < 2; h++) {
            const __m256i raw =
                _mm256_loadu_si256((const __m256i *)(bc + (kw / 8 + j) * 64 + 32 * h));
            const __m256i lo = _mm256_and_si256(raw, low4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
            _mm256_store_si256((__m256i *)(W + j * 128 + 64 * h), _mm256_unpacklo_epi8(lo, hi));
            _mm256_store_si256((__m256i *)(W + j * 128 + 64 * h + 32),
                               _mm256_unpackhi_epi8(lo, hi));
        }
    }
}

/* One row's sums over the decoded chunks [c0, c1) of W (xw: the row's
 * activation bytes from the window's first column): rows 0-7 in *r0, 8-15
 * in *r1, each the sum of n * x with the stored n (the offset 8 not taken
 * off). */
AI void i4_sums(const uint8_t *W, const int8_t *xw, size_t c0, size_t c1, __m256i *r0,
                __m256i *r1) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i a0 = _mm256_setzero_si256(), b0 = a0, a1 = a0, b1 = a0;
    /* up to 8 chunks' products summed in int16 before widening:
     * |each vpmaddubsw lane| <= 2 x 15 x 128 = 3840, so 8 fit */
    for (size_t j0 = c0; j0 < c1; j0 += 8) {
        const size_t j1 = c1 - j0 < 8 ? c1 : j0 + 8;
        __m256i s0 = _mm256_setzero_si256(), t0 = s0, s1 = s0, t1 = s0;
        /* unrolled, gcc 12 keeps each sum in one register; rolled,
         * it copied all four to other registers every chunk (4 of the
         * loop's 21 instructions) */
        _Pragma("GCC unroll 8") for (size_t j = j0; j < j1; j++) {
            int64_t q8;
            memcpy(&q8, xw + 8 * j, sizeof q8);
            const __m256i q = _mm256_set1_epi64x(q8);
            const uint8_t *w = W + j * 128;
#define I4MAD(acc, o)                                                                              \
    acc = _mm256_add_epi16(acc,                                                                    \
                           _mm256_maddubs_epi16(_mm256_load_si256((const __m256i *)(w + (o))), q))
            I4MAD(s0, 0);
            I4MAD(t0, 32);
            I4MAD(s1, 64);
            I4MAD(t1, 96);
#undef I4MAD
        }
        a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(s0, ones));
        b0 = _mm256_add_epi32(b0, _mm256_madd_epi16(t0, ones));
        a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(s1, ones));
        b1 = _mm256_add_epi32(b1, _mm256_madd_epi16(t1, ones));
    }
    *r0 = _mm256_hadd_epi32(a0, b0);
    *r1 = _mm256_hadd_epi32(a1, b1);
}

/* 8 times the sum of x over columns [k0, k1) (multiples of 8), broadcast;
 * int32 arithmetic wraps, the true result fits. */
AI __m256i i4_offset(const moeq__i8row *x, size_t k0, size_t k1) {
    const uint32_t sx = (uint32_t)x->ps[k1 / 8] - (uint32_t)x->ps[k0 / 8];
    return _mm256_set1_epi32((int)(8u * sx));
}

static void idot_i4(const uint8_t *bc, size_t k0, size_t nk, size_t M, const moeq__i8row *x,
                    int32_t *C, size_t ldc, int accumulate) {
    _Alignas(32) uint8_t W[IDOT4_WIN / 8 * 128];
    if (nk == 0 && !accumulate) {
        for (size_t m = 0; m < M; m++) memset(C + m * ldc, 0, 16 * sizeof(int32_t));
    }
    for (size_t kw = k0; kw < k0 + nk; kw += IDOT4_WIN) {
        const size_t n = k0 + nk - kw < IDOT4_WIN ? k0 + nk - kw : IDOT4_WIN;
        i4_window(bc, kw, n, W);
        for (size_t m = 0; m < M; m++) {
            __m256i r0, r1;
            i4_sums(W, x[m].b + kw, 0, n / 8, &r0, &r1);
            const __m256i off = i4_offset(&x[m], kw, kw + n);
            r0 = _mm256_sub_epi32(r0, off);
            r1 = _mm256_sub_epi32(r1, off);
            int32_t *cm = C + m * ldc;
            if (accumulate || kw > k0) {
                r0 = _mm256_add_epi32(r0, _mm256_loadu_si256((const __m256i *)cm));
                r1 = _mm256_add_epi32(r1, _mm256_loadu_si256((const __m256i *)(cm + 8)));
            }
            _mm256_storeu_si256((__m256i *)cm, r0);
            _mm256_storeu_si256((__m256i *)(cm + 8), r1);
        }
    }
}

/* idot_groups on one block of I4 codes whose groups fit the window
 * (gsize <= IDOT4_WIN): windows of whole groups, decoded once for all the
 * rows, group by group, each row's group sums scaled and added into C as
 * they come, in registers (iscale's product and sum, so the same bits),
 * where idot and iscale store the sums, take a call per group and load
 * them again.  (Rows inside groups: each row's two additions into C in a
 * row, store then load, and 0.92-0.98x the rate from 8 rows.) */
static void idot_i4_groups(const moeq__packed *pk, size_t blk, size_t M, const moeq__i8row *x,
                           float *C, size_t ldc) {
    _Alignas(32) uint8_t W[IDOT4_WIN / 8 * 128];
    __m256 sc[IDOT4_WIN / 8][2];
    const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
    const size_t gs = pk->gsize, win = IDOT4_WIN / gs * gs;
    for (size_t kw = 0; kw < pk->cols; kw += win) {
        const size_t n = pk->cols - kw < win ? pk->cols - kw : win, ng = n / gs, g0 = kw / gs;
        i4_window(bc, kw, n, W);
        for (size_t j = 0; j < ng; j++) scales16(pk, blk, g0 + j, sc[j]);
        for (size_t j = 0; j < ng; j++) {
            for (size_t m = 0; m < M; m++) {
                float *cm = C + m * ldc;
                __m256i r0, r1;
                i4_sums(W, x[m].b + kw, j * gs / 8, (j + 1) * gs / 8, &r0, &r1);
                const __m256i off = i4_offset(&x[m], kw + j * gs, kw + (j + 1) * gs);
                __m256 t0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(r0, off)), sc[j][0]);
                __m256 t1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(r1, off)), sc[j][1]);
                if (kw > 0 || j > 0) {
                    t0 = _mm256_add_ps(_mm256_loadu_ps(cm), t0);
                    t1 = _mm256_add_ps(_mm256_loadu_ps(cm + 8), t1);
                }
                _mm256_storeu_ps(cm, t0);
                _mm256_storeu_ps(cm + 8, t1);
            }
        }
    }
}

/* I8 for up to 3 tokens: both blocks in one pass (idot_pair).  Otherwise
 * block by block (for compute, a second block per pass gains nothing here:
 * one vector holds 8 rows), I8 in tiles of at most MOEQ__TILE_MAX tokens
 * (idot_impl's 12 accumulators), I4 all the tokens against one decode of
 * the window (idot_i4). */
static void idot(const moeq__packed *pk, size_t blk, size_t nb, size_t k0, size_t nk, size_t M,
                 const moeq__i8row *x, int32_t *C, size_t ldc, int accumulate) {
    if (M >= 1 && M <= 3 && nb == 2 && pk->code != MOEQ__PK_I4) {
        const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
        if (M == 1)
            idot_pair(bc, pk->blk_code_bytes, k0, nk, x, C, ldc, accumulate, 1);
        else if (M == 2)
            idot_pair(bc, pk->blk_code_bytes, k0, nk, x, C, ldc, accumulate, 2);
        else
            idot_pair(bc, pk->blk_code_bytes, k0, nk, x, C, ldc, accumulate, 3);
        return;
    }
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *bc = pk->codes + (blk + i) * pk->blk_code_bytes;
        int32_t *Ci = C + 16 * i;
        if (pk->code == MOEQ__PK_I4) {
            idot_i4(bc, k0, nk, M, x, Ci, ldc, accumulate);
            continue;
        }
        const size_t ntile = moeq__ntiles(M, MOEQ__TILE_MAX);
        const int pf = M > 4;
        for (size_t t = 0, m0 = 0; t < ntile; t++) {
            const size_t mt = moeq__tile_rows(M, ntile, t);
            const moeq__i8row *xt = x + m0;
            int32_t *Ct = Ci + m0 * ldc;
            switch (mt) {
                case 1: idot_impl(bc, k0, nk, xt, Ct, ldc, accumulate, 1, pf); break;
                case 2: idot_impl(bc, k0, nk, xt, Ct, ldc, accumulate, 2, pf); break;
                case 3: idot_impl(bc, k0, nk, xt, Ct, ldc, accumulate, 3, pf); break;
                case 4: idot_impl(bc, k0, nk, xt, Ct, ldc, accumulate, 4, pf); break;
                case 5: idot_impl(bc, k0, nk, xt, Ct, ldc, accumulate, 5, pf); break;
                default: idot_impl(bc, k0, nk, xt, Ct, ldc, accumulate, 6, pf); break;
            }
            m0 += mt;
        }
    }
}

/* Two blocks a call only where idot runs them side by side (idot_pair).
 * One a call elsewhere (the int8 path then runs one block's scale groups in
 * order before the next block's), against two, kern_ab on Zen 3, 2
 * threads: w4a8_int8 T=1 0.80x the time, T=32 0.81x, T=128 0.88x, T=512
 * 0.97x; w8a8_int8 (I8, 4 or more rows) T=128 0.94x, T=512 0.98x. */
static size_t idot_blocks(int32_t code, size_t M) {
    return code == MOEQ__PK_I8 && M <= 3 ? MOEQ__IDOT_BLOCKS : 1;
}

static void iscale(const moeq__packed *pk, size_t blk, size_t g, size_t M, const int32_t *S,
                   size_t lds, float *C, size_t ldc, int first) {
    __m256 s[2];
    scales16(pk, blk, g, s);
    for (size_t m = 0; m < M; m++) {
        for (int h = 0; h < 2; h++) {
            const __m256 t = _mm256_mul_ps(
                _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(S + m * lds + 8 * h))),
                s[h]);
            float *c = C + m * ldc + 8 * h;
            _mm256_storeu_ps(c, first ? t : _mm256_add_ps(_mm256_loadu_ps(c), t));
        }
    }
}

/* I4 codes in groups that fit idot_i4_groups's window, for at most
 * IDOT4_FUSED_MAX rows: that kernel, block by block; else idot and iscale
 * group by group. */
#define IDOT4_FUSED_MAX 4
static void idot_groups(const moeq__packed *pk, size_t blk, size_t nb, size_t M,
                        const moeq__i8row *x, float *C, size_t ldc, int32_t *S, size_t lds) {
    if (pk->code == MOEQ__PK_I4 && pk->gsize <= IDOT4_WIN && M <= IDOT4_FUSED_MAX) {
        for (size_t i = 0; i < nb; i++) idot_i4_groups(pk, blk + i, M, x, C + 16 * i, ldc);
        return;
    }
    moeq__idot_groups_by(idot, iscale, pk, blk, nb, M, x, C, ldc, S, lds);
}

static void fscale(const moeq__packed *pk, size_t blk, size_t g, size_t M, const float *S,
                   size_t lds, const float *const *xs, float *C, size_t ldc, int first) {
    __m256 s[2];
    scales16(pk, blk, g, s);
    for (size_t m = 0; m < M; m++) {
        const __m256 f = _mm256_set1_ps(xs ? xs[m][g] : 1.0f);
        for (int h = 0; h < 2; h++) {
            const __m256 t =
                _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(S + m * lds + 8 * h), s[h]), f);
            float *c = C + m * ldc + 8 * h;
            _mm256_storeu_ps(c, first ? t : _mm256_add_ps(_mm256_loadu_ps(c), t));
        }
    }
}

/* ---- fdot: NVFP4 codes times NVFP4 activation codes ------------------------------- */

/* A NIB chunk (4 columns x 16 rows) holds in lane L of its 32 bytes rows
 * 4L + {0-3, 8-11}, columns 4j, 4j + 1 in the low nibbles and 4j + 2, 4j + 3
 * in the high ones.  FDOT_PERM puts each lane's rows 0-3 first and a row's
 * two columns side by side; after the byte table, interleaving by 16 bits
 * the low results of two chunks (and then their high ones) gives each row
 * 4 columns in a 32-bit lane, rows 0-7 in one vector and 8-15 in the other:
 * columns 0, 1, 4, 5 of the 8 (then 2, 3, 6, 7), the order of v
 * (moeq__fp4_pos). */
#define FDOT_PERM_LANE 0, 8, 2, 10, 4, 12, 6, 14, 1, 9, 3, 11, 5, 13, 7, 15
#define FDOT_WIN 256 /* columns decoded per window: 4 KiB of codes in L1 */

/* Columns k0 .. k0 + nk of block blk into W (W + 64j: rows 0-7, then 8-15,
 * 4 columns each, as v + 12) and its group scales into S. */
AI void fdot_window(const moeq__packed *pk, size_t blk, size_t k0, size_t nk, __m256i tbl,
                    uint8_t *W, float *S) {
    const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
    const __m256i perm = _mm256_setr_epi8(FDOT_PERM_LANE, FDOT_PERM_LANE);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (size_t j = 0; j < nk / 4; j += 2) {
        PF(bc, k0 + 4 * j, MOEQ__PK_NIB);
        __m256i lo[2], hi[2];
        for (size_t c = 0; c < 2; c++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(bc + (k0 / 4 + j + c) * 32));
            raw = _mm256_shuffle_epi8(raw, perm);
            lo[c] = _mm256_shuffle_epi8(tbl, _mm256_and_si256(raw, low4));
            hi[c] = _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4));
        }
        _mm256_store_si256((__m256i *)(W + j * 64), _mm256_unpacklo_epi16(lo[0], lo[1]));
        _mm256_store_si256((__m256i *)(W + j * 64 + 32), _mm256_unpackhi_epi16(lo[0], lo[1]));
        _mm256_store_si256((__m256i *)(W + j * 64 + 64), _mm256_unpacklo_epi16(hi[0], hi[1]));
        _mm256_store_si256((__m256i *)(W + j * 64 + 96), _mm256_unpackhi_epi16(hi[0], hi[1]));
    }
    for (size_t g = 0; g < nk / 16; g++) {
        __m256 sc[2];
        scales16_raw(pk, blk, k0 / 16 + g, sc);
        _mm256_store_ps(S + g * 16, sc[0]);
        _mm256_store_ps(S + g * 16 + 8, sc[1]);
    }
}

/* NB (1 or 2) blocks from blk: each token's four activation quads a group
 * are broadcast once for both blocks, and the group's offset and scale
 * once; each block's sums are as with NB = 1, the same operations in the
 * same order. */
AI void fdot_impl(const moeq__packed *pk, size_t blk, size_t M, const moeq__fp4row *x, float *y,
                  size_t ldy, const int NB) {
    /* v + 12 in 0..24, unsigned: vpmaddubsw's first operand; the 12 comes off
     * through sum12 */
    uint8_t lut[16];
    for (int n = 0; n < 16; n++) lut[n] = (uint8_t)(int)(2.0f * pk->lut[n] + 12.0f);
    const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)lut));
    const __m256i ones = _mm256_set1_epi16(1);
    _Alignas(32) uint8_t W[2][FDOT_WIN * MOEQ__PK_ROWS];
    _Alignas(32) float S[2][FDOT_WIN / 16 * MOEQ__PK_ROWS];
    for (size_t k0 = 0; k0 < pk->cols; k0 += FDOT_WIN) {
        const size_t nk = pk->cols - k0 < FDOT_WIN ? pk->cols - k0 : FDOT_WIN, ng = nk / 16;
        for (int i = 0; i < NB; i++) fdot_window(pk, blk + (size_t)i, k0, nk, tbl, W[i], S[i]);
        for (size_t m = 0; m < M; m++) {
            const int8_t *xv = x[m].v + k0;
            const float *xs = x[m].sc + k0 / 16;
            const int32_t *xsum = x[m].sum12 + k0 / 16;
            float *ym = y + m * ldy;
            /* block i's rows 0-7 in a[i][0], 8-15 in a[i][1], across windows in y */
            __m256 a[2][2];
            _Pragma("GCC unroll 2") for (int i = 0; i < NB; i++) {
                a[i][0] = k0 ? _mm256_loadu_ps(ym + 16 * i) : _mm256_setzero_ps();
                a[i][1] = k0 ? _mm256_loadu_ps(ym + 16 * i + 8) : _mm256_setzero_ps();
            }
            /* one block: two groups a pass (gcc 12 then spills nothing; one
             * group a pass kept one sum on the stack: a store and a load a
             * group); two blocks: one.  The empty asm keeps each sum's
             * additions in program order: without it gcc 12 issued all 16
             * products of a pair's group first and spilled six of them. */
#define FDOT_GROUP                                                                                 \
    do {                                                                                           \
        __m256i lo[2], hi[2];                                                                      \
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {                                      \
            int32_t quad;                                                                          \
            memcpy(&quad, xv + 16 * g + 4 * j, 4);                                                 \
            const __m256i q = _mm256_set1_epi32(quad);                                             \
            _Pragma("GCC unroll 2") for (int i = 0; i < NB; i++) {                                 \
                const uint8_t *w = W[i] + g * 256 + 64 * j;                                        \
                const __m256i l_ = _mm256_maddubs_epi16(_mm256_load_si256((const __m256i *)w), q); \
                const __m256i h_ =                                                                 \
                    _mm256_maddubs_epi16(_mm256_load_si256((const __m256i *)(w + 32)), q);         \
                lo[i] = j ? _mm256_add_epi16(lo[i], l_) : l_;                                      \
                hi[i] = j ? _mm256_add_epi16(hi[i], h_) : h_;                                      \
                __asm__("" : "+x"(lo[i]), "+x"(hi[i]));                                            \
            }                                                                                      \
        }                                                                                          \
        const __m256i corr = _mm256_set1_epi32(xsum[g]);                                           \
        const __m256 xb = _mm256_set1_ps(xs[g]);                                                   \
        _Pragma("GCC unroll 2") for (int i = 0; i < NB; i++) {                                     \
            const __m256 f0 =                                                                      \
                _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_madd_epi16(lo[i], ones), corr));        \
            const __m256 f1 =                                                                      \
                _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_madd_epi16(hi[i], ones), corr));        \
            a[i][0] =                                                                              \
                _mm256_fmadd_ps(f0, _mm256_mul_ps(_mm256_load_ps(S[i] + g * 16), xb), a[i][0]);    \
            a[i][1] = _mm256_fmadd_ps(f1, _mm256_mul_ps(_mm256_load_ps(S[i] + g * 16 + 8), xb),    \
                                      a[i][1]);                                                    \
        }                                                                                          \
    } while (0)
            if (NB == 1) {
                _Pragma("GCC unroll 2") for (size_t g = 0; g < ng; g++) FDOT_GROUP;
            } else {
                for (size_t g = 0; g < ng; g++) FDOT_GROUP;
            }
#undef FDOT_GROUP
            _Pragma("GCC unroll 2") for (int i = 0; i < NB; i++) {
                _mm256_storeu_ps(ym + 16 * i, a[i][0]);
                _mm256_storeu_ps(ym + 16 * i + 8, a[i][1]);
            }
        }
    }
}

/* Blocks in pairs from FDOT_PAIR_M tokens: with fewer, the kernel waits on
 * the codes' reads, which are faster one block at a time (one thread, cold
 * codes, pairs against single blocks: 1.17x the time for 1 token, 1.04x for
 * 4, 0.93-1.00x from 8; hot, 0.87-0.93x for 1-12 tokens). */
#define FDOT_PAIR_M 8
static void fdot(const moeq__packed *pk, size_t blk, size_t nb, size_t M, const moeq__fp4row *x,
                 float *y, size_t ldy) {
    size_t i = 0;
    for (; M >= FDOT_PAIR_M && i + 2 <= nb; i += 2)
        fdot_impl(pk, blk + i, M, x, y + 16 * i, ldy, 2);
    for (; i < nb; i++) fdot_impl(pk, blk + i, M, x, y + 16 * i, ldy, 1);
}

/* ---- activations ------------------------------------------------------------------ */

AI __m256 absps(__m256 v) {
    return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
}

static float amax(const float *x, size_t n) {
    __m256 m0 = _mm256_setzero_ps(), m1 = m0, m2 = m0, m3 = m0;
    size_t i = 0;
    /* max(a, m) returns m when a is NaN: NaN is skipped, as in the reference */
    for (; i + 32 <= n; i += 32) {
        m0 = _mm256_max_ps(absps(_mm256_loadu_ps(x + i)), m0);
        m1 = _mm256_max_ps(absps(_mm256_loadu_ps(x + i + 8)), m1);
        m2 = _mm256_max_ps(absps(_mm256_loadu_ps(x + i + 16)), m2);
        m3 = _mm256_max_ps(absps(_mm256_loadu_ps(x + i + 24)), m3);
    }
    for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(absps(_mm256_loadu_ps(x + i)), m0);
    m0 = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
    float lanes[8];
    _mm256_storeu_ps(lanes, m0);
    float m = 0.0f;
    for (int j = 0; j < 8; j++) m = lanes[j] > m ? lanes[j] : m;
    for (; i < n; i++) {
        const float a = x[i] < 0 ? -x[i] : x[i];
        if (a > m) m = a;
    }
    return m;
}

/* The int8 code of x / s as a float: clamp(round_half_even), NaN -> 0, never -0. */
AI __m256 int8_code_v(__m256 x, __m256 s) {
    const __m256 v = _mm256_div_ps(x, s);
    const __m256 ord = _mm256_cmp_ps(v, v, _CMP_ORD_Q);
    __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-128.0f)), _mm256_set1_ps(127.0f));
    r = _mm256_add_ps(r, _mm256_setzero_ps()); /* -0 -> +0, as the int8 code */
    return _mm256_and_ps(r, ord);              /* NaN -> code 0 */
}

/* int8: clamp(round_half_even(x / s), -128, 127) * s; NaN -> 0; never -0. */
AI __m256 qdq_int8_v(__m256 x, __m256 s) {
    return _mm256_mul_ps(int8_code_v(x, s), s);
}

static void qdq_int8(const float *x, size_t n, float s, float *out) {
    const __m256 sv = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, qdq_int8_v(_mm256_loadu_ps(x + i), sv));
    if (i < n) moeq__kern_portable.qdq_int8(x + i, n - i, s, out + i);
}

static void q_int8(const float *x, size_t n, float s, int16_t *q) {
    const __m256 sv = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i c = _mm256_cvtps_epi32(int8_code_v(_mm256_loadu_ps(x + i), sv));
        _mm_storeu_si128((__m128i *)(q + i), _mm_packs_epi32(_mm256_castsi256_si128(c),
                                                             _mm256_extracti128_si256(c, 1)));
    }
    if (i < n) moeq__kern_portable.q_int8(x + i, n - i, s, q + i);
}

/* |v| (already <= 448) rounded to the E4M3 grid, half to even. */
AI __m256 e4m3_round_mag(__m256 a) {
    const __m256i bits = _mm256_castps_si256(a);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 20), _mm256_set1_epi32(1));
    const __m256i rn =
        _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7FFFF)), odd),
                         _mm256_set1_epi32((int)0xFFF00000u));
    /* below 2^-6 the grid is the subnormal step 2^-9 */
    const __m256 rs = _mm256_mul_ps(_mm256_round_ps(_mm256_mul_ps(a, _mm256_set1_ps(512.0f)),
                                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                                    _mm256_set1_ps(1.0f / 512.0f));
    const __m256 small = _mm256_cmp_ps(a, _mm256_set1_ps(0x1p-6f), _CMP_LT_OQ);
    return _mm256_blendv_ps(_mm256_castsi256_ps(rn), rs, small);
}

/* fp8: the value of the code e4m3(clamp(x / s, +-448)); NaN -> +0; the sign
 * of zero kept. */
AI __m256 fp8_code_v(__m256 x, __m256 s) {
    const __m256 v = _mm256_div_ps(x, s);
    const __m256 ord = _mm256_cmp_ps(v, v, _CMP_ORD_Q);
    const __m256 c =
        _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-448.0f)), _mm256_set1_ps(448.0f));
    const __m256 sign = _mm256_and_ps(c, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)));
    const __m256 q = _mm256_or_ps(e4m3_round_mag(absps(c)), sign);
    return _mm256_and_ps(q, ord); /* NaN -> code 0 */
}

/* fp8: the code's value times s */
AI __m256 qdq_fp8_v(__m256 x, __m256 s) {
    return _mm256_mul_ps(fp8_code_v(x, s), s);
}

static void q_fp8_bf16(const float *x, size_t n, float s, uint16_t *b) {
    const __m256 sv = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        /* an E4M3 value's float32 has 16 zero low bits: its top half is its bfloat16 */
        const __m256i h = _mm256_srli_epi32(
            _mm256_castps_si256(fp8_code_v(_mm256_loadu_ps(x + i), sv)), 16);
        const __m128i lo = _mm256_castsi256_si128(h), hi = _mm256_extracti128_si256(h, 1);
        _mm_storeu_si128((__m128i *)(void *)(b + i), _mm_packus_epi32(lo, hi));
    }
    if (i < n) moeq__kern_portable.q_fp8_bf16(x + i, n - i, s, b + i);
}

static void qdq_fp8(const float *x, size_t n, float s, float *out) {
    const __m256 sv = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, qdq_fp8_v(_mm256_loadu_ps(x + i), sv));
    if (i < n) moeq__kern_portable.qdq_fp8(x + i, n - i, s, out + i);
}

/* The E2M1 value of x / eff: CT's FP4 rounding (the E2M1 grid, half to even);
 * small negatives give -0, -0 gives +0, NaN gives a zero with its sign. */
AI __m256 fp4_round_v(__m256 x, __m256 eff) {
    const __m256 v = _mm256_div_ps(x, eff);
    const __m256 unord = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const __m256 signbit = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    const __m256 c = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-6.0f)), _mm256_set1_ps(6.0f));
    const __m256 a = absps(c);
    const __m256i bits = _mm256_castps_si256(a);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 22), _mm256_set1_epi32(1));
    const __m256i rn =
        _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x1FFFFF)), odd),
                         _mm256_set1_epi32((int)0xFFC00000u));
    const __m256 rs = _mm256_mul_ps(
        _mm256_round_ps(_mm256_add_ps(a, a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
        _mm256_set1_ps(0.5f));
    const __m256 small = _mm256_cmp_ps(a, _mm256_set1_ps(1.0f), _CMP_LT_OQ);
    __m256 r = _mm256_blendv_ps(_mm256_castsi256_ps(rn), rs, small);
    const __m256 neg = _mm256_cmp_ps(c, _mm256_setzero_ps(), _CMP_LT_OQ);
    r = _mm256_or_ps(r, _mm256_and_ps(neg, signbit));
    return _mm256_blendv_ps(r, _mm256_and_ps(v, signbit), unord);
}

/* NVFP4 values of x / eff (fp4_round_v), times eff. */
AI __m256 qdq_fp4_v(__m256 x, __m256 eff) {
    return _mm256_mul_ps(fp4_round_v(x, eff), eff);
}

/* [max of a_0, ..., max of a_7]: the horizontal maxima of 8 vectors. */
AI __m256 hmax8(const __m256 a[8]) {
    __m256 p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = _mm256_max_ps(_mm256_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                             _mm256_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    }
    const __m256 b0 =
        _mm256_max_ps(_mm256_shuffle_ps(p[0], p[1], 0x44), _mm256_shuffle_ps(p[0], p[1], 0xEE));
    const __m256 b1 =
        _mm256_max_ps(_mm256_shuffle_ps(p[2], p[3], 0x44), _mm256_shuffle_ps(p[2], p[3], 0xEE));
    return _mm256_max_ps(_mm256_permute2f128_ps(b0, b1, 0x20),
                         _mm256_permute2f128_ps(b0, b1, 0x31));
}

/* The local scales of up to 8 groups of 16 from x (ng of them): e4m3(gsc *
 * (amax / 6)), 0 -> 0.125, as values. */
AI __m256 nvfp4_local_scales(const float *x, size_t ng, __m256 g) {
    __m256 m[8];
    for (size_t j = 0; j < 8; j++) {
        if (j < ng) {
            const float *p = x + 16 * j;
            /* NaN lanes become 0 (max returns its second operand) */
            m[j] = _mm256_max_ps(_mm256_max_ps(absps(_mm256_loadu_ps(p)), _mm256_setzero_ps()),
                                 _mm256_max_ps(absps(_mm256_loadu_ps(p + 8)), _mm256_setzero_ps()));
        } else {
            m[j] = _mm256_setzero_ps();
        }
    }
    const __m256 am = hmax8(m);
    const __m256 local = _mm256_mul_ps(g, _mm256_div_ps(am, _mm256_set1_ps(6.0f)));
    const __m256 sf = e4m3_round_mag(_mm256_min_ps(local, _mm256_set1_ps(448.0f)));
    return _mm256_blendv_ps(sf, _mm256_set1_ps(0.125f),
                            _mm256_cmp_ps(sf, _mm256_setzero_ps(), _CMP_EQ_OQ));
}

static void q_nvfp4(const float *x, size_t n, float gsc, int8_t *v, float *sc, int32_t *sum12) {
    const __m256 g = _mm256_set1_ps(gsc);
    for (size_t i0 = 0; i0 < n; i0 += 128) {
        const size_t ng = (n - i0) / 16 < 8 ? (n - i0) / 16 : 8;
        const __m256 sf = nvfp4_local_scales(x + i0, ng, g);
        float sfv[8], eff[8];
        _mm256_storeu_ps(sfv, sf);
        _mm256_storeu_ps(eff, _mm256_div_ps(sf, g));
        for (size_t j = 0; j < ng; j++) {
            const float *p = x + i0 + 16 * j;
            const __m256 e = _mm256_set1_ps(eff[j]);
            const __m256 r0 = fp4_round_v(_mm256_loadu_ps(p), e);
            const __m256 r1 = fp4_round_v(_mm256_loadu_ps(p + 8), e);
            const __m256i c0 = _mm256_cvtps_epi32(_mm256_add_ps(r0, r0));
            const __m256i c1 = _mm256_cvtps_epi32(_mm256_add_ps(r1, r1));
            /* 16 int32 -> 16 int16 (lane order fixed by the permute) -> 16 int8 */
            const __m256i w =
                _mm256_permute4x64_epi64(_mm256_packs_epi32(c0, c1), 0xD8); /* k order */
            const __m128i w16lo = _mm256_castsi256_si128(w), w16hi = _mm256_extracti128_si256(w, 1);
            const __m128i fp4_order = _mm_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11,
                                                    14, 15); /* moeq__fp4_pos */
            _mm_storeu_si128((__m128i *)(void *)(v + i0 + 16 * j),
                             _mm_shuffle_epi8(_mm_packs_epi16(w16lo, w16hi), fp4_order));
            /* 12 * the sum: pairs, then the 8 int16 sums of the two halves */
            const __m128i s8 = _mm_madd_epi16(_mm_add_epi16(w16lo, w16hi), _mm_set1_epi16(1));
            __m128i t = _mm_add_epi32(s8, _mm_shuffle_epi32(s8, 0x4E));
            t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
            sc[(i0 >> 4) + j] = sfv[j];
            sum12[(i0 >> 4) + j] = 12 * _mm_cvtsi128_si32(t);
        }
    }
}

static void qdq_nvfp4(const float *x, size_t n, float gsc, float *out) {
    const __m256 g = _mm256_set1_ps(gsc);
    for (size_t i0 = 0; i0 < n; i0 += 128) {
        const size_t ng = (n - i0) / 16 < 8 ? (n - i0) / 16 : 8;
        float eff[8]; /* local / gsc */
        _mm256_storeu_ps(eff, _mm256_div_ps(nvfp4_local_scales(x + i0, ng, g), g));
        for (size_t j = 0; j < ng; j++) {
            const float *p = x + i0 + 16 * j;
            const __m256 e = _mm256_set1_ps(eff[j]);
            _mm256_storeu_ps(out + i0 + 16 * j, qdq_fp4_v(_mm256_loadu_ps(p), e));
            _mm256_storeu_ps(out + i0 + 16 * j + 8, qdq_fp4_v(_mm256_loadu_ps(p + 8), e));
        }
    }
}

/* ---- gated activation, combine, conversions --------------------------------------- */

/* expf, Cephes style: 2^n * p(r), |r| <= ln2/2; within 2 ulp; +inf past
 * ln(FLT_MAX) and a tiny positive value (not a subnormal) far below. */
AI __m256 exp_ps(__m256 x) {
    const __m256 over = _mm256_cmp_ps(x, _mm256_set1_ps(88.72283935546875f), _CMP_GT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3365478515625f)),
                      _mm256_set1_ps(88.3762626647949f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), over);
}

static void silu_mul(const float *g, const float *u, float *a, size_t n, float limit) {
    size_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f), lim = _mm256_set1_ps(limit),
                 nlim = _mm256_set1_ps(-limit);
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i), uv = _mm256_loadu_ps(u + i);
        if (limit > 0) {
            gv = _mm256_min_ps(gv, lim);
            uv = _mm256_min_ps(_mm256_max_ps(uv, nlim), lim);
        }
        const __m256 e = exp_ps(_mm256_xor_ps(gv, sign));
        _mm256_storeu_ps(a + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), uv));
    }
    if (i < n) moeq__kern_portable.silu_mul(g + i, u + i, a + i, n - i, limit);
}

static void axpy(float *acc, const float *y, float w, size_t n) {
    const __m256 wv = _mm256_set1_ps(w);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i),
                                                _mm256_mul_ps(wv, _mm256_loadu_ps(y + i))));
    }
    for (; i < n; i++) acc[i] += w * y[i];
}

static void bf16_to_f32(const uint16_t *src, size_t n, float *dst) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i h =
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(src + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    for (; i < n; i++) dst[i] = moeq__bf16_to_f32(src[i]);
}

static void f32_to_bf16(const float *src, size_t n, uint16_t *dst) {
    size_t i = 0;
    const __m256i abs = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
    for (; i + 8 <= n; i += 8) {
        const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(src + i));
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        __m256i r = _mm256_srli_epi32(
            _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
        const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
        const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
        r = _mm256_blendv_epi8(r, q, nan);
        /* 8 x 32-bit -> 8 x 16-bit (values fit: no saturation) */
        const __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
        _mm_storeu_si128((__m128i *)(void *)(dst + i),
                         _mm_packus_epi32(_mm_and_si128(lo, _mm_set1_epi32(0xFFFF)),
                                          _mm_and_si128(hi, _mm_set1_epi32(0xFFFF))));
    }
    for (; i < n; i++) dst[i] = moeq__f32_to_bf16(src[i]);
}

const moeq__kern moeq__kern_avx2 = {
    .name = "avx2",
    .panel = panel,
    .gemv = gemv,
    .i4_prep = i4_prep,
    .tile = tile,
    .tile_blocks = 1, /* block by block (tile_blk) */
    .panel_bf16 = panel_bf16,
    .tile_bf16 = tile_bf16,
    .gemv_bf16 = gemv_bf16,
    .idot = idot,
    .idot_blocks = idot_blocks,
    .idot_groups = idot_groups,
    .iscale = iscale,
    .fscale = fscale,
    .fdot = fdot,
    .q_nvfp4 = q_nvfp4,
    .q_int8 = q_int8,
    .q_fp8_bf16 = q_fp8_bf16,
    .amax = amax,
    .qdq_int8 = qdq_int8,
    .qdq_fp8 = qdq_fp8,
    .qdq_nvfp4 = qdq_nvfp4,
    .silu_mul = silu_mul,
    .axpy = axpy,
    .bf16_to_f32 = bf16_to_f32,
    .f32_to_bf16 = f32_to_bf16,
};

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
 *   I8    sign-extended to 32 bits and converted.
 */
#include "kernels.h"

#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* ---- codes ------------------------------------------------------------------------ */

/* One NIB chunk: f[2j + h] = columns 4c + j, rows 8h .. 8h + 7. */
AI void nib_chunk(const uint8_t *p, __m256i lut, __m256 f[8]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i v = _mm256_loadu_si256((const __m256i *)p);
    const __m256i bl = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
    const __m256i bh = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
    const __m256i z = _mm256_setzero_si256();
    const __m256i w0 = _mm256_unpacklo_epi8(z, bl), w1 = _mm256_unpackhi_epi8(z, bl);
    const __m256i w2 = _mm256_unpacklo_epi8(z, bh), w3 = _mm256_unpackhi_epi8(z, bh);
    f[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(w0));
    f[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(w0, 1));
    f[2] = _mm256_cvtph_ps(_mm256_castsi256_si128(w1));
    f[3] = _mm256_cvtph_ps(_mm256_extracti128_si256(w1, 1));
    f[4] = _mm256_cvtph_ps(_mm256_castsi256_si128(w2));
    f[5] = _mm256_cvtph_ps(_mm256_extracti128_si256(w2, 1));
    f[6] = _mm256_cvtph_ps(_mm256_castsi256_si128(w3));
    f[7] = _mm256_cvtph_ps(_mm256_extracti128_si256(w3, 1));
}

/* binary16 of e4m3(b) * 2^-8 for 16 bytes, as 16 words. */
AI __m256i e4m3_f16(__m128i b) {
    const __m256i w = _mm256_cvtepu8_epi16(b);
    return _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(w, 8), 1),
                            _mm256_set1_epi16((short)0xBFFF));
}

/* One column of a byte-coded block: f[h] = rows 8h .. 8h + 7. */
AI void byte_col(const uint8_t *p, int code, __m256 f[2]) {
    if (code == MOEQ__PK_E4M3) {
        const __m256i h = e4m3_f16(_mm_loadu_si128((const __m128i *)p));
        f[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
        f[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    } else {
        f[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
        f[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8))));
    }
}

AI __m256i nib_lut(const moeq__packed *pk) {
    __m128i l;
    memcpy(&l, pk->lut_f16hi, 16);
    return _mm256_broadcastsi128_si256(l);
}

/* ---- scales ----------------------------------------------------------------------- */

/* The 16 scales (kernel units) of block blk, group g. */
static inline void scales16(const moeq__packed *pk, size_t blk, size_t g, __m256 s[2]) {
    const size_t ss = moeq__pk_scale_size(pk->scale_kind);
    const uint8_t *p = pk->scales + blk * pk->blk_scale_bytes + g * MOEQ__PK_ROWS * ss;
    switch (pk->scale_kind) {
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
            const __m256 k256 = _mm256_set1_ps(256.0f), gd = _mm256_set1_ps(pk->gdiv);
            s[0] = _mm256_div_ps(
                _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), k256), gd);
            s[1] = _mm256_div_ps(
                _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), k256), gd);
            break;
        }
        default: { /* E8M0: 2^(e-127); e = 0 is the subnormal 2^-127 */
            const __m256i sub = _mm256_set1_epi32(0x00400000), z = _mm256_setzero_si256();
            for (int h = 0; h < 2; h++) {
                const __m256i e =
                    _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8 * h)));
                const __m256i bits = _mm256_blendv_epi8(_mm256_slli_epi32(e, 23), sub,
                                                        _mm256_cmpeq_epi32(e, z));
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

/* ---- panel: dequantized weights, [k][16] ------------------------------------------ */

AI void panel_impl(const moeq__packed *pk, size_t blk, size_t k0, size_t nk, float *P,
                   const int code) {
    const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
    const size_t k1 = k0 + nk;
    const __m256i lut = code == MOEQ__PK_NIB ? nib_lut(pk) : _mm256_setzero_si256();
    for (size_t k = k0; k < k1;) {
        const size_t g = k / pk->gsize;
        const size_t kend = (g + 1) * pk->gsize < k1 ? (g + 1) * pk->gsize : k1;
        __m256 s[2];
        scales16(pk, blk, g, s);
        if (code == MOEQ__PK_NIB) {
            for (; k < kend; k += 4) {
                __m256 f[8];
                nib_chunk(bc + (k / 4) * 32, lut, f);
                float *o = P + (k - k0) * MOEQ__PK_ROWS;
                for (int i = 0; i < 8; i++) _mm256_storeu_ps(o + 8 * i, _mm256_mul_ps(f[i], s[i & 1]));
            }
        } else {
            for (; k < kend; k++) {
                __m256 f[2];
                byte_col(bc + k * MOEQ__PK_ROWS, code, f);
                float *o = P + (k - k0) * MOEQ__PK_ROWS;
                _mm256_storeu_ps(o, _mm256_mul_ps(f[0], s[0]));
                _mm256_storeu_ps(o + 8, _mm256_mul_ps(f[1], s[1]));
            }
        }
    }
}

static void panel(const moeq__packed *pk, size_t blk, size_t k0, size_t nk, float *P) {
    switch (pk->code) {
        case MOEQ__PK_NIB: panel_impl(pk, blk, k0, nk, P, MOEQ__PK_NIB); break;
        case MOEQ__PK_I8: panel_impl(pk, blk, k0, nk, P, MOEQ__PK_I8); break;
        default: panel_impl(pk, blk, k0, nk, P, MOEQ__PK_E4M3); break;
    }
}

/* ---- gemv: a few tokens against one block, decoding each code once ---------------- */

AI void gemv_impl(const moeq__packed *pk, size_t blk, const float *const *x, float *y,
                  size_t ldy, const int code, const int M) {
    enum { MAXM = MOEQ__GEMV_MAX };
    const int PH = M == 1 ? 4 : M == 2 ? 2 : 1;
    const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
    const __m256i lut = code == MOEQ__PK_NIB ? nib_lut(pk) : _mm256_setzero_si256();
    const float *xm[MAXM];
    for (int m = 0; m < M; m++) xm[m] = x[m];
    __m256 tot[MAXM][2];
    for (int m = 0; m < M; m++) tot[m][0] = tot[m][1] = _mm256_setzero_ps();
    const size_t gs = pk->gsize;
    for (size_t g = 0; g < pk->groups; g++) {
        __m256 part[4][MAXM][2];
        for (int ph = 0; ph < PH; ph++) {
            for (int m = 0; m < M; m++) part[ph][m][0] = part[ph][m][1] = _mm256_setzero_ps();
        }
        const size_t kb = g * gs, ke = kb + gs;
        if (code == MOEQ__PK_NIB) {
            for (size_t k = kb; k < ke; k += 4) {
                __m256 f[8];
                nib_chunk(bc + (k / 4) * 32, lut, f);
                for (int j = 0; j < 4; j++) {
                    const int ph = j % PH;
                    for (int m = 0; m < M; m++) {
                        const __m256 xb = _mm256_broadcast_ss(xm[m] + k + (size_t)j);
                        part[ph][m][0] = _mm256_fmadd_ps(f[2 * j], xb, part[ph][m][0]);
                        part[ph][m][1] = _mm256_fmadd_ps(f[2 * j + 1], xb, part[ph][m][1]);
                    }
                }
            }
        } else {
            for (size_t k = kb; k < ke; k += 4) {
                for (int j = 0; j < 4; j++) {
                    __m256 f[2];
                    byte_col(bc + (k + (size_t)j) * MOEQ__PK_ROWS, code, f);
                    const int ph = j % PH;
                    for (int m = 0; m < M; m++) {
                        const __m256 xb = _mm256_broadcast_ss(xm[m] + k + (size_t)j);
                        part[ph][m][0] = _mm256_fmadd_ps(f[0], xb, part[ph][m][0]);
                        part[ph][m][1] = _mm256_fmadd_ps(f[1], xb, part[ph][m][1]);
                    }
                }
            }
        }
        __m256 s[2];
        scales16(pk, blk, g, s);
        for (int m = 0; m < M; m++) {
            for (int h = 0; h < 2; h++) {
                __m256 sum;
                if (PH == 4) {
                    sum = _mm256_add_ps(_mm256_add_ps(part[0][m][h], part[1][m][h]),
                                        _mm256_add_ps(part[2][m][h], part[3][m][h]));
                } else if (PH == 2) {
                    sum = _mm256_add_ps(part[0][m][h], part[1][m][h]);
                } else {
                    sum = part[0][m][h];
                }
                tot[m][h] = _mm256_fmadd_ps(sum, s[h], tot[m][h]);
            }
        }
    }
    for (int m = 0; m < M; m++) {
        _mm256_storeu_ps(y + (size_t)m * ldy, tot[m][0]);
        _mm256_storeu_ps(y + (size_t)m * ldy + 8, tot[m][1]);
    }
}

#define GEMV_CODE(code)                                                                            \
    switch (M) {                                                                                   \
        case 1: gemv_impl(pk, blk, x, y, ldy, code, 1); break;                                     \
        case 2: gemv_impl(pk, blk, x, y, ldy, code, 2); break;                                     \
        case 3: gemv_impl(pk, blk, x, y, ldy, code, 3); break;                                     \
        default: gemv_impl(pk, blk, x, y, ldy, code, 4); break;                                    \
    }

static void gemv(const moeq__packed *pk, size_t blk, size_t M, const float *const *x, float *y,
                 size_t ldy) {
    switch (pk->code) {
        case MOEQ__PK_NIB: GEMV_CODE(MOEQ__PK_NIB); break;
        case MOEQ__PK_I8: GEMV_CODE(MOEQ__PK_I8); break;
        default: GEMV_CODE(MOEQ__PK_E4M3); break;
    }
}

/* ---- tile: up to 6 tokens x 16 rows over a panel ----------------------------------- */

AI void tile_impl(const float *P, size_t nk, const float *const *x, float *C, size_t ldc,
                  int accumulate, const int M) {
    __m256 acc[MOEQ__TILE_MAX][2];
    const float *xm[MOEQ__TILE_MAX];
    for (int m = 0; m < M; m++) {
        xm[m] = x[m];
        if (accumulate) {
            acc[m][0] = _mm256_loadu_ps(C + (size_t)m * ldc);
            acc[m][1] = _mm256_loadu_ps(C + (size_t)m * ldc + 8);
        } else {
            acc[m][0] = acc[m][1] = _mm256_setzero_ps();
        }
    }
    for (size_t k = 0; k < nk; k++) {
        const __m256 p0 = _mm256_loadu_ps(P + k * MOEQ__PK_ROWS);
        const __m256 p1 = _mm256_loadu_ps(P + k * MOEQ__PK_ROWS + 8);
        for (int m = 0; m < M; m++) {
            const __m256 xb = _mm256_broadcast_ss(xm[m] + k);
            acc[m][0] = _mm256_fmadd_ps(p0, xb, acc[m][0]);
            acc[m][1] = _mm256_fmadd_ps(p1, xb, acc[m][1]);
        }
    }
    for (int m = 0; m < M; m++) {
        _mm256_storeu_ps(C + (size_t)m * ldc, acc[m][0]);
        _mm256_storeu_ps(C + (size_t)m * ldc + 8, acc[m][1]);
    }
}

static void tile(const float *P, size_t nk, size_t M, const float *const *x, float *C, size_t ldc,
                 int accumulate) {
    switch (M) {
        case 1: tile_impl(P, nk, x, C, ldc, accumulate, 1); break;
        case 2: tile_impl(P, nk, x, C, ldc, accumulate, 2); break;
        case 3: tile_impl(P, nk, x, C, ldc, accumulate, 3); break;
        case 4: tile_impl(P, nk, x, C, ldc, accumulate, 4); break;
        case 5: tile_impl(P, nk, x, C, ldc, accumulate, 5); break;
        default: tile_impl(P, nk, x, C, ldc, accumulate, 6); break;
    }
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

/* int8: clamp(round_half_even(x / s), -128, 127) * s; NaN -> 0; never -0. */
AI __m256 qdq_int8_v(__m256 x, __m256 s) {
    const __m256 v = _mm256_div_ps(x, s);
    const __m256 ord = _mm256_cmp_ps(v, v, _CMP_ORD_Q);
    __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-128.0f)), _mm256_set1_ps(127.0f));
    r = _mm256_add_ps(r, _mm256_setzero_ps()); /* -0 -> +0, as the int8 code */
    return _mm256_and_ps(_mm256_mul_ps(r, s), ord);
}

static void qdq_int8(const float *x, size_t n, float s, float *out) {
    const __m256 sv = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, qdq_int8_v(_mm256_loadu_ps(x + i), sv));
    if (i < n) moeq__kern_portable.qdq_int8(x + i, n - i, s, out + i);
}

/* |v| (already <= 448) rounded to the E4M3 grid, half to even. */
AI __m256 e4m3_round_mag(__m256 a) {
    const __m256i bits = _mm256_castps_si256(a);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 20), _mm256_set1_epi32(1));
    const __m256i rn = _mm256_and_si256(
        _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7FFFF)), odd),
        _mm256_set1_epi32((int)0xFFF00000u));
    /* below 2^-6 the grid is the subnormal step 2^-9 */
    const __m256 rs = _mm256_mul_ps(
        _mm256_round_ps(_mm256_mul_ps(a, _mm256_set1_ps(512.0f)),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
        _mm256_set1_ps(1.0f / 512.0f));
    const __m256 small = _mm256_cmp_ps(a, _mm256_set1_ps(0x1p-6f), _CMP_LT_OQ);
    return _mm256_blendv_ps(_mm256_castsi256_ps(rn), rs, small);
}

/* fp8: e4m3(clamp(x / s, +-448)) * s; NaN -> +0; the sign of zero kept. */
AI __m256 qdq_fp8_v(__m256 x, __m256 s) {
    const __m256 v = _mm256_div_ps(x, s);
    const __m256 ord = _mm256_cmp_ps(v, v, _CMP_ORD_Q);
    const __m256 c = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-448.0f)), _mm256_set1_ps(448.0f));
    const __m256 sign = _mm256_and_ps(c, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)));
    const __m256 q = _mm256_or_ps(e4m3_round_mag(absps(c)), sign);
    return _mm256_and_ps(_mm256_mul_ps(q, s), ord);
}

static void qdq_fp8(const float *x, size_t n, float s, float *out) {
    const __m256 sv = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, qdq_fp8_v(_mm256_loadu_ps(x + i), sv));
    if (i < n) moeq__kern_portable.qdq_fp8(x + i, n - i, s, out + i);
}

/* NVFP4 values of x / eff: CT's FP4 rounding (the E2M1 grid, half to even),
 * times eff; small negatives give -0, -0 gives +0, NaN gives a zero with its sign. */
AI __m256 qdq_fp4_v(__m256 x, __m256 eff) {
    const __m256 v = _mm256_div_ps(x, eff);
    const __m256 unord = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const __m256 signbit = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    const __m256 c = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-6.0f)), _mm256_set1_ps(6.0f));
    const __m256 a = absps(c);
    const __m256i bits = _mm256_castps_si256(a);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 22), _mm256_set1_epi32(1));
    const __m256i rn = _mm256_and_si256(
        _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x1FFFFF)), odd),
        _mm256_set1_epi32((int)0xFFC00000u));
    const __m256 rs = _mm256_mul_ps(
        _mm256_round_ps(_mm256_add_ps(a, a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
        _mm256_set1_ps(0.5f));
    const __m256 small = _mm256_cmp_ps(a, _mm256_set1_ps(1.0f), _CMP_LT_OQ);
    __m256 r = _mm256_blendv_ps(_mm256_castsi256_ps(rn), rs, small);
    const __m256 neg = _mm256_cmp_ps(c, _mm256_setzero_ps(), _CMP_LT_OQ);
    r = _mm256_or_ps(r, _mm256_and_ps(neg, signbit));
    r = _mm256_blendv_ps(r, _mm256_and_ps(v, signbit), unord);
    return _mm256_mul_ps(r, eff);
}

/* [max of a_0, ..., max of a_7]: the horizontal maxima of 8 vectors. */
AI __m256 hmax8(const __m256 a[8]) {
    __m256 p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = _mm256_max_ps(_mm256_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                             _mm256_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    }
    const __m256 b0 = _mm256_max_ps(_mm256_shuffle_ps(p[0], p[1], 0x44), _mm256_shuffle_ps(p[0], p[1], 0xEE));
    const __m256 b1 = _mm256_max_ps(_mm256_shuffle_ps(p[2], p[3], 0x44), _mm256_shuffle_ps(p[2], p[3], 0xEE));
    return _mm256_max_ps(_mm256_permute2f128_ps(b0, b1, 0x20), _mm256_permute2f128_ps(b0, b1, 0x31));
}

static void qdq_nvfp4(const float *x, size_t n, float gsc, float *out) {
    const __m256 g = _mm256_set1_ps(gsc);
    for (size_t i0 = 0; i0 < n; i0 += 128) {
        const size_t ng = (n - i0) / 16 < 8 ? (n - i0) / 16 : 8;
        __m256 m[8];
        for (size_t j = 0; j < 8; j++) {
            if (j < ng) {
                const float *p = x + i0 + 16 * j;
                /* NaN lanes become 0 (max returns its second operand) */
                m[j] = _mm256_max_ps(_mm256_max_ps(absps(_mm256_loadu_ps(p)), _mm256_setzero_ps()),
                                     _mm256_max_ps(absps(_mm256_loadu_ps(p + 8)), _mm256_setzero_ps()));
            } else {
                m[j] = _mm256_setzero_ps();
            }
        }
        /* local = e4m3(gsc * (amax / 6)) (0 -> 0.125), eff = local / gsc */
        const __m256 am = hmax8(m);
        const __m256 local = _mm256_mul_ps(g, _mm256_div_ps(am, _mm256_set1_ps(6.0f)));
        __m256 sf = e4m3_round_mag(_mm256_min_ps(local, _mm256_set1_ps(448.0f)));
        sf = _mm256_blendv_ps(sf, _mm256_set1_ps(0.125f),
                              _mm256_cmp_ps(sf, _mm256_setzero_ps(), _CMP_EQ_OQ));
        float eff[8];
        _mm256_storeu_ps(eff, _mm256_div_ps(sf, g));
        for (size_t j = 0; j < ng; j++) {
            const float *p = x + i0 + 16 * j;
            const __m256 e = _mm256_set1_ps(eff[j]);
            _mm256_storeu_ps(out + i0 + 16 * j, qdq_fp4_v(_mm256_loadu_ps(p), e));
            _mm256_storeu_ps(out + i0 + 16 * j + 8, qdq_fp4_v(_mm256_loadu_ps(p + 8), e));
        }
    }
}

const moeq__kern moeq__kern_avx2 = {
    .name = "avx2",
    .panel = panel,
    .gemv = gemv,
    .tile = tile,
    .amax = amax,
    .qdq_int8 = qdq_int8,
    .qdq_fp8 = qdq_fp8,
    .qdq_nvfp4 = qdq_nvfp4,
};

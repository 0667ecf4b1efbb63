/*
 * kern_avx512.c - kernels for AVX-512 F/BW/VL with VNNI and VBMI (compiled
 * with those flags only; cpu.c checks the CPU and OS first).  The "avx512"
 * table is the AVX2 table with gemv, tile, idot, idot_blocks, idot_groups,
 * iscale, fscale, fdot, the NIB, I8 and E4M3 panels and panel_bf16
 * replaced by the ones here, and tile_bf16 and gemv_bf16 where the CPU has
 * AVX512_BF16; each gives the same bits as its AVX2 twin
 * (tests/check_simd.c).
 *
 * gemv and panel: kern_avx2.c's with one 16-lane vector where it has two
 * 8-lane ones (a block's 16 rows), the same operations in the same order;
 * codes are decoded eight columns at a time, NIB ones through vpermb and a
 * vpermps table lookup, E4M3 ones through a masked vpermb and F16C.
 *
 * idot: vpdpbusd adds, per 32-bit lane, the four products of unsigned bytes
 * in one operand with signed bytes in the other.  The weights go in as the
 * unsigned side: I4 codes are stored as n = q + 8 (0..15) already, I8 codes
 * become q + 128 (the sign bit flipped); the offset times the activations'
 * sum comes off at the end.  Activation codes are the signed side, four
 * consecutive columns broadcast to every lane.  One lane holds one row, so a
 * 64-byte vector is 16 rows x 4 columns.  The sums are exact integers.
 *
 * fdot: vpdpbusd too, after a vpermb that gives each row its codes (see there).
 *
 * tile: one zmm chain per token where the AVX2 tile has two ymm ones, 12
 * tokens a pass (Zen 5, one thread, in L2: up to 1.77x the AVX2 tile's
 * rate; on Zen 4, which splits a zmm FMA in two, a 16-lane tile of 6
 * tokens had run as the AVX2 one).
 *
 * Not here: the 16-lane panel of I4 codes (see panel_z).
 */
#include "kernels.h"

#include <immintrin.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))

/* ---- scales ----------------------------------------------------------------------- */

/* The 16 scales of block blk, group g, as kern_avx2.c's scales16_ gives them
 * in two halves; with `raw`, E4M3_DIV ones undivided (e4m3(b) * 2^-8). */
AI __m512 scales16_(const moeq__packed *pk, size_t blk, size_t g, const int raw) {
    const int32_t kind = pk->scale_kind;
    const size_t ss = moeq__pk_scale_size(kind);
    const uint8_t *p = pk->scales + blk * pk->blk_scale_bytes + g * MOEQ__PK_ROWS * ss;
    __m512 s;
    switch (kind) {
        case MOEQ__PS_F32: s = _mm512_loadu_ps(p); break;
        case MOEQ__PS_F16:
            s = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
            break;
        case MOEQ__PS_BF16:
            s = _mm512_castsi512_ps(_mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p)), 16));
            break;
        case MOEQ__PS_E4M3_DIV: {
            const __m256i w =
                _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
            s = _mm512_cvtph_ps(_mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(w, 8), 1),
                                                 _mm256_set1_epi16((short)0xBFFF)));
            if (!raw) {
                s = _mm512_div_ps(_mm512_mul_ps(s, _mm512_set1_ps(256.0f)),
                                  _mm512_set1_ps(pk->gdiv));
            }
            break;
        }
        default: { /* E8M0: 2^(e-127); e = 0 is the subnormal 2^-127 */
            const __m512i e =
                _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
            const __mmask16 zero = _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512());
            s = _mm512_castsi512_ps(_mm512_mask_mov_epi32(_mm512_slli_epi32(e, 23), zero,
                                                          _mm512_set1_epi32(0x00400000)));
            break;
        }
    }
    if (pk->scale_mul != 1.0f) s = _mm512_mul_ps(s, _mm512_set1_ps(pk->scale_mul));
    return s;
}
#define scales16(pk, blk, g)     scales16_(pk, blk, g, 0)
#define scales16_raw(pk, blk, g) scales16_(pk, blk, g, 1)

/* ---- idot ------------------------------------------------------------------------- */

/* 4 columns x 16 rows of an I8 block (16 bytes per column) -> one row per
 * 32-bit lane, its 4 columns in order, each byte + 128. */
AI __m512i i8_quad(const uint8_t *p) {
    const __m512i perm = _mm512_set_epi8(
        63, 47, 31, 15, 62, 46, 30, 14, 61, 45, 29, 13, 60, 44, 28, 12, 59, 43, 27, 11, 58, 42, 26,
        10, 57, 41, 25, 9, 56, 40, 24, 8, 55, 39, 23, 7, 54, 38, 22, 6, 53, 37, 21, 5, 52, 36, 20,
        4, 51, 35, 19, 3, 50, 34, 18, 2, 49, 33, 17, 1, 48, 32, 16, 0);
    return _mm512_xor_si512(_mm512_permutexvar_epi8(perm, _mm512_loadu_si512(p)),
                            _mm512_set1_epi8((char)0x80));
}

/* Half h of an I4 chunk (8 columns; the 32-bit word of row r holds column i
 * in bits 4i..4i+3, rows in order): columns 4h..4h+3, one row per lane;
 * vpmultishiftqb picks the byte at each nibble's bit offset. */
AI __m512i i4_quad(const uint8_t *p, const int h) {
    const __m512i at = h ? _mm512_set1_epi64(0x3C3834301C181410ll)  /* bits 16..28 | 48.. */
                         : _mm512_set1_epi64(0x2C2824200C080400ll); /* bits 0,4,8,12 | 32.. */
    return _mm512_and_si512(_mm512_multishift_epi64_epi8(at, _mm512_loadu_si512(p)),
                            _mm512_set1_epi8(0x0F));
}

AI __m512i bcast4(const int8_t *p) {
    int32_t q;
    memcpy(&q, p, sizeof q);
    return _mm512_set1_epi32(q);
}

/* Codes are streamed once from DRAM: the 64 or 128 bytes of 8 columns are
 * fetched PF_AHEAD bytes ahead, past the block's end too (the next block is
 * usually next), as in kern_avx2.c; the hardware prefetchers alone let a
 * busy core's cold gemv fall to about half of the loads-only read rate.
 * (idot uses it for I4 codes, and for I8 ones with more than 4 tokens or
 * in one block.) */
#ifndef PF_AHEAD
#define PF_AHEAD 2048
#endif
#define PF8(bc, k, code) PF8_AT(bc, (k)*MOEQ__PK_COL_BYTES(code) + PF_AHEAD, code)
/* The 8 columns' 64 or 128 bytes from byte offset o of the block at bc. */
#define PF8_AT(bc, o, code)                                                                        \
    do {                                                                                           \
        _mm_prefetch((const char *)((bc) + (o)), _MM_HINT_T0);                                     \
        if (MOEQ__PK_COL_BYTES(code) == 16u) {                                                     \
            _mm_prefetch((const char *)((bc) + (o) + 64), _MM_HINT_T0);                            \
        }                                                                                          \
    } while (0)

/* One scale group's int32 sums of a block's 16 rows, as iscale takes them
 * (kernels.h): times the group's scales, assigned (first) or added into c. */
AI void iscale_row(__m512i r, __m512 s, float *c, int first) {
    const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(r), s);
    _mm512_storeu_ps(c, first ? t : _mm512_add_ps(_mm512_loadu_ps(c), t));
}

/* Where idot_impl puts a scale group's sums when idot_groups fuses the two
 * steps: through iscale_row into F (rows ldc apart), block 0's scales s0,
 * block 1's s1; without one (NULL), the int32 sums go to C. */
typedef struct iscaled {
    float *F;
    __m512 s0, s1;
    int first;
} iscaled;

/* NB (1 or 2) blocks at bc, bstride bytes apart, for M tokens: per 4
 * columns, one weight vector per block and one broadcast per token, so with
 * two blocks each broadcast feeds two vpdpbusd.  Chains a (block 0) and c
 * (block 1) per token; where few tokens would leave vpdpbusd waiting on its
 * own results (M * NB <= 6) columns j+4..j+7 of each 8 go to second chains
 * b and d.  Named variables, not arrays: GCC keeps these in registers.
 * With sc, [k0, k0 + nk) ends a scale group and its sums (plus C's, with
 * accumulate) go through iscale_row instead of to C. */
#define IDOT_TOKENS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
AI void idot_impl(const uint8_t *bc, size_t bstride, size_t k0, size_t nk, const moeq__i8row *x,
                  int32_t *C, size_t ldc, int accumulate, const int M, const int NB, const int i4,
                  const iscaled *sc) {
    const int two = M * NB <= 6;
    const __m512i z = _mm512_setzero_si512();
    const uint8_t *bc1 = bc + bstride;
#define DECL(m)                                                                                    \
    __m512i a##m = z, b##m = z, c##m = z, d##m = z;                                                \
    const int8_t *x##m = M > m ? x[m].b : NULL;
    IDOT_TOKENS(DECL)
#undef DECL
    for (size_t k = k0; k < k0 + nk; k += 8) {
        /* I4 codes fetched ahead as gemv's are (w4a8_int8, T=1: 0.80-0.88x
         * the time without).  I8 ones for more than 4 tokens, or one block:
         * two blocks of I8 codes for few tokens, the fetch made w8a8_int8
         * 1.08-1.19x slower at T=1 (1, 2, 4 and 8 KiB ahead, an earlier
         * AVX-512 host), while with many tokens the kernel runs long enough
         * per window to hide it (Zen 5, 2 threads, kern_ab --avx512: T=512
         * 0.80x the time, T=128 0.85x; one thread, cold windows of 256
         * columns for 32 tokens: 1.4-1.6x the rate, 0.83-0.95 of the hot
         * one), and one block, as idot_blocks hands up to 4 tokens, reads
         * faster with it (Zen 5: T=1 0.88-0.93x, T=32 0.90x) */
        if (i4) PF8(bc, k, MOEQ__PK_I4);
        if (i4 && NB == 2) PF8(bc1, k, MOEQ__PK_I4);
        if (!i4 && (M > 4 || NB == 1)) PF8(bc, k, MOEQ__PK_I8);
        if (!i4 && M > 4 && NB == 2) PF8(bc1, k, MOEQ__PK_I8);
        /* columns k..k+3 */
        __m512i w0 = i4 ? i4_quad(bc + k * 8, 0) : i8_quad(bc + k * 16);
        __m512i w1 = NB == 1 ? z : i4 ? i4_quad(bc1 + k * 8, 0) : i8_quad(bc1 + k * 16);
#define STEP(m)                                                                                    \
    if (M > m) {                                                                                   \
        const __m512i q = bcast4(x##m + k);                                                        \
        a##m = _mm512_dpbusd_epi32(a##m, w0, q);                                                   \
        if (NB == 2) c##m = _mm512_dpbusd_epi32(c##m, w1, q);                                      \
    }
        IDOT_TOKENS(STEP)
#undef STEP
        /* columns k+4..k+7 */
        w0 = i4 ? i4_quad(bc + k * 8, 1) : i8_quad(bc + k * 16 + 64);
        w1 = NB == 1 ? z : i4 ? i4_quad(bc1 + k * 8, 1) : i8_quad(bc1 + k * 16 + 64);
#define STEP(m)                                                                                    \
    if (M > m) {                                                                                   \
        const __m512i q = bcast4(x##m + k + 4);                                                    \
        if (two) {                                                                                 \
            b##m = _mm512_dpbusd_epi32(b##m, w0, q);                                               \
            if (NB == 2) d##m = _mm512_dpbusd_epi32(d##m, w1, q);                                  \
        } else {                                                                                   \
            a##m = _mm512_dpbusd_epi32(a##m, w0, q);                                               \
            if (NB == 2) c##m = _mm512_dpbusd_epi32(c##m, w1, q);                                  \
        }                                                                                          \
    }
        IDOT_TOKENS(STEP)
#undef STEP
    }
    /* the offset times the window's sum of x; int32 arithmetic wraps, and the
     * true result fits (kernels.h: nk <= MOEQ__IDOT_KMAX) */
    const uint32_t off = i4 ? 8u : 128u;
#define OUT(m)                                                                                     \
    if (M > m) {                                                                                   \
        const uint32_t sx = (uint32_t)x[m].ps[(k0 + nk) / 8] - (uint32_t)x[m].ps[k0 / 8];          \
        const __m512i corr = _mm512_set1_epi32((int)(off * sx));                                   \
        int32_t *cm = C + (size_t)(m)*ldc;                                                         \
        __m512i r = _mm512_sub_epi32(two ? _mm512_add_epi32(a##m, b##m) : a##m, corr);             \
        if (accumulate) r = _mm512_add_epi32(r, _mm512_loadu_si512(cm));                           \
        if (sc) {                                                                                  \
            iscale_row(r, sc->s0, sc->F + (size_t)(m)*ldc, sc->first);                             \
        } else {                                                                                   \
            _mm512_storeu_si512(cm, r);                                                            \
        }                                                                                          \
        if (NB == 2) {                                                                             \
            r = _mm512_sub_epi32(two ? _mm512_add_epi32(c##m, d##m) : c##m, corr);                 \
            if (accumulate) r = _mm512_add_epi32(r, _mm512_loadu_si512(cm + 16));                  \
            if (sc) {                                                                              \
                iscale_row(r, sc->s1, sc->F + (size_t)(m)*ldc + 16, sc->first);                    \
            } else {                                                                               \
                _mm512_storeu_si512(cm + 16, r);                                                   \
            }                                                                                      \
        }                                                                                          \
    }
    IDOT_TOKENS(OUT)
#undef OUT
}
#undef IDOT_TOKENS

/* Blocks two at a time (an odd last one alone), up to MOEQ__IDOT_MAX
 * tokens in one pass.  GCC's partial redundancy elimination leaves the 24
 * accumulators of two blocks x 12 tokens spilling to the stack and shuffled
 * between registers on every pass (GCC 12, -O2): here it is off. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-pre")))
#endif
static void
idot_tile(const moeq__packed *pk, size_t blk, size_t nb, size_t k0, size_t nk, size_t M,
          const moeq__i8row *x, int32_t *C, size_t ldc, int accumulate, const iscaled *sc) {
    const size_t bs = pk->blk_code_bytes;
    for (size_t i = 0; i < nb; i += 2) {
        const uint8_t *bc = pk->codes + (blk + i) * bs;
        int32_t *Ci = C + 16 * i;
        const int two = nb - i >= 2, i4 = pk->code == MOEQ__PK_I4;
#define IDOT_CALL(m, n, q) idot_impl(bc, bs, k0, nk, x, Ci, ldc, accumulate, m, n, q, sc)
#define IDOT_M(n, q)                                                                               \
    switch (M) {                                                                                   \
        case 1: IDOT_CALL(1, n, q); break;                                                         \
        case 2: IDOT_CALL(2, n, q); break;                                                         \
        case 3: IDOT_CALL(3, n, q); break;                                                         \
        case 4: IDOT_CALL(4, n, q); break;                                                         \
        case 5: IDOT_CALL(5, n, q); break;                                                         \
        case 6: IDOT_CALL(6, n, q); break;                                                         \
        case 7: IDOT_CALL(7, n, q); break;                                                         \
        case 8: IDOT_CALL(8, n, q); break;                                                         \
        case 9: IDOT_CALL(9, n, q); break;                                                         \
        case 10: IDOT_CALL(10, n, q); break;                                                       \
        case 11: IDOT_CALL(11, n, q); break;                                                       \
        default: IDOT_CALL(12, n, q); break;                                                       \
    }
        if (two && i4) {
            IDOT_M(2, 1)
        } else if (two) {
            IDOT_M(2, 0)
        } else if (i4) {
            IDOT_M(1, 1)
        } else {
            IDOT_M(1, 0)
        }
#undef IDOT_M
#undef IDOT_CALL
    }
}

/* The tokens in tiles of at most MOEQ__IDOT_MAX, as even as they come (the
 * blocks' window stays in L1 across the tiles). */
static void idot(const moeq__packed *pk, size_t blk, size_t nb, size_t k0, size_t nk, size_t M,
                 const moeq__i8row *x, int32_t *C, size_t ldc, int accumulate) {
    const size_t ntile = moeq__ntiles(M, MOEQ__IDOT_MAX);
    for (size_t t = 0, m0 = 0; t < ntile; t++) {
        const size_t mt = moeq__tile_rows(M, ntile, t);
        idot_tile(pk, blk, nb, k0, nk, mt, x + m0, C + m0 * ldc, ldc, accumulate, NULL);
        m0 += mt;
    }
}

/* idot_tile runs two blocks side by side, whatever the codes and rows, yet
 * for up to 4 rows one block a call runs faster: the int8 path then reads
 * one block's codes group after group, one stream, where two blocks
 * alternate between two every group.  Zen 5, 2 threads, kern_ab --avx512
 * against this file asking for two blocks for every M: w4a8_int8 T=1 0.85x
 * the time, T=32 0.80x; w8a8_int8 (with the I8 fetch one block allows) T=1
 * 0.83x, T=32 0.86x.  One block for every M: w4a8_int8 T=128 1.06x, T=512
 * 1.02x; for up to 8 rows, T=128 1.03x what up to 4 gives. */
static size_t idot_blocks(int32_t code, size_t M) {
    (void)code;
    return M <= 4 ? 1 : MOEQ__IDOT_BLOCKS;
}

/* ---- iscale and fscale ------------------------------------------------------------ */

/* kern_avx2.c's with a block's 16 rows in one vector: the same products and
 * sums (kernels.h), half the instructions (w4a8_int8 on Zen 5: iscale was a
 * fifth of the layer's own samples at T=512, groups of 128 columns). */
static void iscale(const moeq__packed *pk, size_t blk, size_t g, size_t M, const int32_t *S,
                   size_t lds, float *C, size_t ldc, int first) {
    const __m512 s = scales16(pk, blk, g);
    for (size_t m = 0; m < M; m++) {
        iscale_row(_mm512_loadu_si512(S + m * lds), s, C + m * ldc, first);
    }
}

/* idot and iscale group by group (kernels.h), in one pass: each group's
 * columns in windows of at most MOEQ__IDOT_WIN, in the order
 * moeq__idot_groups_by runs them (groups, windows, tiles; the codes of the
 * windows two ahead asked for with more than MOEQ__TILE_MAX rows), the
 * int32 sums of a group's earlier windows kept in S and its last window's
 * scaled into C from registers (idot_impl with an iscaled): no reload of S
 * and no call per group and block to iscale.  Zen 5, 2 threads, kern_ab
 * --avx512 against that driver, for groups of one window: w4a8_int8
 * (groups of 128) T=1 0.91-0.96x the time, T=32 0.95x, T=128 0.96x, T=512
 * 0.95x; for a channel's whole row (8 windows): w8a8_int8 T=512 0.975x,
 * T=128 0.98x. */
static void idot_groups(const moeq__packed *pk, size_t blk, size_t nb, size_t M,
                        const moeq__i8row *x, float *C, size_t ldc, int32_t *S, size_t lds) {
    const size_t W = MOEQ__IDOT_WIN, gs = pk->gsize;
    const bool ahead = M > MOEQ__TILE_MAX;
    const size_t ntile = moeq__ntiles(M, MOEQ__IDOT_MAX);
    for (size_t i = 0; i < nb && ahead; i++) moeq__pk_fetch_cols(pk, blk + i, 0, 2 * W);
    for (size_t g = 0; g < pk->groups; g++) {
        const size_t g0 = g * gs, g1 = g0 + gs;
        for (size_t k0 = g0; k0 < g1; k0 += W) {
            const size_t nk = g1 - k0 < W ? g1 - k0 : W;
            for (size_t i = 0; i < nb && ahead; i++) {
                moeq__pk_fetch_cols(pk, blk + i, k0 + 2 * W, nk);
            }
            for (size_t i = 0; i < nb; i += 2) {
                const size_t n = nb - i >= 2 ? 2 : 1;
                /* the scales at every window: the first window's read brings
                 * them in for the last (read there alone: w8a8_int8, 8
                 * windows a group, T=512 1.03x the time, T=128 1.01x) */
                iscaled sc = {C, scales16(pk, blk + i, g), _mm512_setzero_ps(), g == 0};
                if (n == 2) sc.s1 = scales16(pk, blk + i + 1, g);
                for (size_t t = 0, m0 = 0; t < ntile; t++) {
                    const size_t mt = moeq__tile_rows(M, ntile, t);
                    sc.F = C + 16 * i + m0 * ldc;
                    idot_tile(pk, blk + i, n, k0, nk, mt, x + m0, S + 16 * i + m0 * lds, lds,
                              k0 > g0, k0 + nk == g1 ? &sc : NULL);
                    m0 += mt;
                }
            }
        }
    }
}

static void fscale(const moeq__packed *pk, size_t blk, size_t g, size_t M, const float *S,
                   size_t lds, const float *const *xs, float *C, size_t ldc, int first) {
    const __m512 s = scales16(pk, blk, g);
    for (size_t m = 0; m < M; m++) {
        const __m512 f = _mm512_set1_ps(xs ? xs[m][g] : 1.0f);
        const __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(S + m * lds), s), f);
        float *c = C + m * ldc;
        _mm512_storeu_ps(c, first ? t : _mm512_add_ps(_mm512_loadu_ps(c), t));
    }
}

/* ---- gemv and panel --------------------------------------------------------------- */

/* Byte gathers for the decodes (vpermb indices).
 * NIB: the chunk of columns 4j..4j+3 holds row r of column 4j + c (c = 0, 1)
 * in the low nibble of byte 16 ((r & 7) >> 2) + 8c + 2 (r & 3) + (r >> 3)
 * (kernels.h) and column 4j + 2 + c in its high nibble; nibp_idx[h] puts
 * the bytes of columns 4j and 4j + 1 of chunk h (of two in 64 bytes) in the
 * low and the high 16-bit half of lane r.
 * E4M3: e4m3_idx[p] makes byte 32p + j the high byte of word j (the low
 * bytes are masked to zero): b << 8, the first step of kern_avx2.c's
 * e4m3_f16. */
#define NIB_I(h, c, r) (32 * (h) + 16 * (((r)&7) >> 2) + 8 * (c) + 2 * ((r)&3) + ((r) >> 3))
#define NIBP_B(h, r)   NIB_I(h, 0, r), NIB_I(h, 0, r), NIB_I(h, 1, r), NIB_I(h, 1, r)
#define NIBP_V(h)                                                                                  \
    {                                                                                              \
        NIBP_B(h, 0), NIBP_B(h, 1), NIBP_B(h, 2), NIBP_B(h, 3), NIBP_B(h, 4), NIBP_B(h, 5),        \
            NIBP_B(h, 6), NIBP_B(h, 7), NIBP_B(h, 8), NIBP_B(h, 9), NIBP_B(h, 10), NIBP_B(h, 11),  \
            NIBP_B(h, 12), NIBP_B(h, 13), NIBP_B(h, 14), NIBP_B(h, 15)                             \
    }
_Alignas(64) static const uint8_t nibp_idx[2][64] = {NIBP_V(0), NIBP_V(1)};

/* NIB: the 32-entry vpermw table of nib_pairs, the bfloat16 code values
 * twice (exact: moeq__packed's lut_bf16) */
AI __m512i nib_tab(const moeq__packed *pk) {
    const __m128i l = _mm_loadu_si128((const __m128i *)(const void *)pk->lut_bf16[0]);
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)pk->lut_bf16[1]);
    return _mm512_broadcast_i64x4(
        _mm256_set_m128i(_mm_unpackhi_epi8(l, h), _mm_unpacklo_epi8(l, h)));
}

/* NIB columns k .. k + 7 of a block (its 64 bytes at p) as four vectors of
 * bfloat16 code values, one row per 32-bit lane, column pair q (k + 2q,
 * k + 2q + 1) in w[q], its first column in the low half: one vpermb per 4
 * columns puts the bytes of columns 4j and 4j + 1 in the halves (low
 * nibbles), a 16-bit shift by 4 their high nibbles (columns 4j + 2,
 * 4j + 3), and vpermw looks each half's low 5 bits up in tab (bit 4 is the
 * next nibble's and does not matter). */
AI void nib_pairs(const uint8_t *p, __m512i tab, __m512i w[4]) {
    const __m512i v = _mm512_loadu_si512(p);
    const __m512i d0 = _mm512_permutexvar_epi8(_mm512_load_si512(nibp_idx[0]), v);
    const __m512i d1 = _mm512_permutexvar_epi8(_mm512_load_si512(nibp_idx[1]), v);
    w[0] = _mm512_permutexvar_epi16(d0, tab);
    w[1] = _mm512_permutexvar_epi16(_mm512_srli_epi16(d0, 4), tab);
    w[2] = _mm512_permutexvar_epi16(d1, tab);
    w[3] = _mm512_permutexvar_epi16(_mm512_srli_epi16(d1, 4), tab);
}
#define E4_W(p, j) 0, 32 * (p) + (j)
#define E4_8(p, j)                                                                                 \
    E4_W(p, j), E4_W(p, j + 1), E4_W(p, j + 2), E4_W(p, j + 3), E4_W(p, j + 4), E4_W(p, j + 5),    \
        E4_W(p, j + 6), E4_W(p, j + 7)
_Alignas(64) static const uint8_t e4m3_idx[2][64] = {
    {E4_8(0, 0), E4_8(0, 8), E4_8(0, 16), E4_8(0, 24)},
    {E4_8(1, 0), E4_8(1, 8), E4_8(1, 16), E4_8(1, 24)}};

/* The chain of column k + i (k % 8 == 0): for one token one per phase
 * i % 4; for two, token 0 in a0 (even) and a1 (odd), token 1 in a2 and a3. */
#define PH4_0  a0
#define PH4_1  a1
#define PH4_2  a2
#define PH4_3  a3
#define PH4_4  a0
#define PH4_5  a1
#define PH4_6  a2
#define PH4_7  a3
#define PH2A_0 a0
#define PH2A_1 a1
#define PH2A_2 a0
#define PH2A_3 a1
#define PH2A_4 a0
#define PH2A_5 a1
#define PH2A_6 a0
#define PH2A_7 a1
#define PH2B_0 a2
#define PH2B_1 a3
#define PH2B_2 a2
#define PH2B_3 a3
#define PH2B_4 a2
#define PH2B_5 a3
#define PH2B_6 a2
#define PH2B_7 a3

/* Columns k .. k + 7 of block bc, 16 rows each, in kernel units (I4: n *
 * 2^(4 (i % 4)), as kern_avx2.c's I4_COL; NIB: nib_pairs's bfloat16 pairs,
 * each half made a float by a shift or a mask), into f0 .. f7.  tab: NIB's
 * nib_tab. */
#define COLS8(bc, k, code, tab)                                                                    \
    __m512 f0, f1, f2, f3, f4, f5, f6, f7;                                                         \
    if ((code) == MOEQ__PK_I4) {                                                                   \
        const __m512i u_ = _mm512_loadu_si512((bc) + ((k) / 8) * 64);                              \
        const __m512i uh_ = _mm512_srli_epi32(u_, 16);                                             \
        f0 = I4_COL(u_, 0);                                                                        \
        f1 = I4_COL(u_, 1);                                                                        \
        f2 = I4_COL(u_, 2);                                                                        \
        f3 = I4_COL(u_, 3);                                                                        \
        f4 = I4_COL(uh_, 0);                                                                       \
        f5 = I4_COL(uh_, 1);                                                                       \
        f6 = I4_COL(uh_, 2);                                                                       \
        f7 = I4_COL(uh_, 3);                                                                       \
    } else if ((code) == MOEQ__PK_NIB) {                                                           \
        __m512i w_[4];                                                                             \
        nib_pairs((bc) + ((k) / 4) * 32, tab, w_);                                                 \
        f0 = BF16_LO(w_[0]);                                                                       \
        f1 = BF16_HI(w_[0]);                                                                       \
        f2 = BF16_LO(w_[1]);                                                                       \
        f3 = BF16_HI(w_[1]);                                                                       \
        f4 = BF16_LO(w_[2]);                                                                       \
        f5 = BF16_HI(w_[2]);                                                                       \
        f6 = BF16_LO(w_[3]);                                                                       \
        f7 = BF16_HI(w_[3]);                                                                       \
    } else if ((code) == MOEQ__PK_E4M3) {                                                          \
        const __m512i v_ = _mm512_loadu_si512((bc) + (k)*MOEQ__PK_ROWS);                           \
        const __m512i v2_ = _mm512_loadu_si512((bc) + ((k) + 4) * MOEQ__PK_ROWS);                  \
        E4M3_COLS(v_, 0, f0, f1);                                                                  \
        E4M3_COLS(v_, 1, f2, f3);                                                                  \
        E4M3_COLS(v2_, 0, f4, f5);                                                                 \
        E4M3_COLS(v2_, 1, f6, f7);                                                                 \
    } else {                                                                                       \
        f0 = I8_COL(bc, (k) + 0);                                                                  \
        f1 = I8_COL(bc, (k) + 1);                                                                  \
        f2 = I8_COL(bc, (k) + 2);                                                                  \
        f3 = I8_COL(bc, (k) + 3);                                                                  \
        f4 = I8_COL(bc, (k) + 4);                                                                  \
        f5 = I8_COL(bc, (k) + 5);                                                                  \
        f6 = I8_COL(bc, (k) + 6);                                                                  \
        f7 = I8_COL(bc, (k) + 7);                                                                  \
    }

/* nibble i % 4 of each row's word, converted: n * 2^(4 (i % 4)) */
#define I4_COL(u, i) _mm512_cvtepi32_ps(_mm512_and_si512(u, _mm512_set1_epi32(0xF << (4 * (i)))))
/* the float32 of a lane's low or high bfloat16 half */
#define BF16_LO(w) _mm512_castsi512_ps(_mm512_slli_epi32(w, 16))
#define BF16_HI(w) _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xFFFF0000u)))
/* columns 2p and 2p + 1 of the 4 in v (16 bytes each) */
#define E4M3_COLS(v, p, a, b)                                                                      \
    do {                                                                                           \
        const __m512i w_ = _mm512_maskz_permutexvar_epi8(0xAAAAAAAAAAAAAAAAull,                    \
                                                         _mm512_load_si512(e4m3_idx[p]), v);       \
        const __m512i h_ =                                                                         \
            _mm512_and_si512(_mm512_srai_epi16(w_, 1), _mm512_set1_epi16((short)0xBFFF));          \
        a = _mm512_cvtph_ps(_mm512_castsi512_si256(h_));                                           \
        b = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h_, 1));                                     \
    } while (0)
#define I8_COL(bc, k)                                                                              \
    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(                                                       \
        _mm_loadu_si128((const __m128i *)(const void *)((bc) + (k)*MOEQ__PK_ROWS))))

/* A gemv's last step: the M totals, E4M3_DIV ones divided once by
 * gdiv * 2^-8, into y. */
AI void gemv_store(const moeq__packed *pk, const __m512 *tot, int M, float *y, size_t ldy) {
    for (int m = 0; m < M; m++) {
        __m512 t = tot[m];
        if (pk->scale_kind == MOEQ__PS_E4M3_DIV) {
            t = _mm512_div_ps(t, _mm512_set1_ps(pk->gdiv * 0x1p-8f));
        }
        _mm512_storeu_ps(y + (size_t)m * ldy, t);
    }
}

/* kern_avx2.c's gemv with one 16-lane vector where it has two 8-lane ones,
 * the same chains in the same order (kernels.h): for M = 1 one per column
 * phase k % 4, added as (c0 + c1) + (c2 + c3); for M = 2 two per token
 * (k % 2), added; for M = 3, 4 one per token; then per scale group
 * total = fma(partial, scale, total), I4 partials first less 8 S_g, and
 * E4M3_DIV totals divided at the end. */
AI void gemv_z(const moeq__packed *pk, size_t blk, const float *const *x, float *y, size_t ldy,
               const int code, const int M) {
    const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
    const __m512i tab = code == MOEQ__PK_NIB ? nib_tab(pk) : _mm512_setzero_si512();
    const float *x0 = x[0], *x1 = M > 1 ? x[1] : x0, *x2 = M > 2 ? x[2] : x0,
                *x3 = M > 3 ? x[3] : x0;
    const __m512 z = _mm512_setzero_ps();
    __m512 t0 = z, t1 = z, t2 = z, t3 = z;
    const size_t gs = pk->gsize;
    for (size_t g = 0; g < pk->groups; g++) {
        __m512 a0 = z, a1 = z, a2 = z, a3 = z;
        for (size_t k = g * gs; k < (g + 1) * gs; k += 8) {
            PF8(bc, k, code);
            COLS8(bc, k, code, tab)
#define FMA(a, xp, i, f) a = _mm512_fmadd_ps(f, _mm512_set1_ps((xp)[k + (i)]), a)
#define STEP(i, f)                                                                                 \
    if (M == 1) {                                                                                  \
        FMA(PH4_##i, x0, i, f);                                                                    \
    } else if (M == 2) {                                                                           \
        FMA(PH2A_##i, x0, i, f);                                                                   \
        FMA(PH2B_##i, x1, i, f);                                                                   \
    } else {                                                                                       \
        FMA(a0, x0, i, f);                                                                         \
        FMA(a1, x1, i, f);                                                                         \
        FMA(a2, x2, i, f);                                                                         \
        if (M > 3) FMA(a3, x3, i, f);                                                              \
    }
            STEP(0, f0)
            STEP(1, f1)
            STEP(2, f2)
            STEP(3, f3)
            STEP(4, f4)
            STEP(5, f5)
            STEP(6, f6)
            STEP(7, f7)
#undef STEP
#undef FMA
        }
        const __m512 s = scales16_raw(pk, blk, g);
#define TOT(t, m, p)                                                                               \
    t = _mm512_fmadd_ps(                                                                           \
        code == MOEQ__PK_I4 ? _mm512_sub_ps(p, _mm512_set1_ps(8.0f * x##m[pk->cols + g])) : (p),   \
        s, t)
        if (M == 1) {
            TOT(t0, 0, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
        } else if (M == 2) {
            TOT(t0, 0, _mm512_add_ps(a0, a1));
            TOT(t1, 1, _mm512_add_ps(a2, a3));
        } else {
            TOT(t0, 0, a0);
            TOT(t1, 1, a1);
            TOT(t2, 2, a2);
            if (M > 3) TOT(t3, 3, a3);
        }
#undef TOT
    }
    const __m512 tot[4] = {t0, t1, t2, t3};
    gemv_store(pk, tot, M, y, ldy);
}

static void gemv(const moeq__packed *pk, size_t blk, size_t M, const float *const *x, float *y,
                 size_t ldy) {
#define CALL(code, m) gemv_z(pk, blk, x, y, ldy, code, m)
    MOEQ__GEMV_DISPATCH(CALL)
#undef CALL
}

/* ---- panel ------------------------------------------------------------------------ */

/* kern_avx2.c's panels of NIB, I8 and E4M3 codes, 16 rows a vector: the
 * codes times the group's scales (one product), the next panel's codes
 * fetched as it goes.  E4M3 (kern_bench, hot, a Zen 4 host): 1.10-1.16x
 * the AVX2 panel's rate.  Zen 5, 2 threads, kern_ab --avx512 against the
 * AVX2 NIB and I8 panels: w4a8_mxfp4 T=512 0.97x the time, T=128 0.93x;
 * w4a16_mxfp4 0.99x and 0.98x; w6a8_mxfp6 0.98x and 0.94x; w6a16_mxfp6
 * 0.99x and 0.96x.  I4 codes stay on kern_avx2.c's panel_i4: a 16-lane one
 * made wna16's T=512 1.05x slower there (and the 16-lane int4, NIB and I8
 * panels ran at 0.85-0.93x the AVX2 rate on the Zen 4, whose 512-bit
 * operations run as two halves). */
AI void panel_z(const moeq__packed *pk, size_t blk, size_t k0, size_t nk, float *P,
                const int code) {
    const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
    const size_t k1 = k0 + nk;
    const __m512i tab = code == MOEQ__PK_NIB ? nib_tab(pk) : _mm512_setzero_si512();
    for (size_t k = k0; k < k1;) {
        const size_t g = k / pk->gsize;
        const size_t kend = (g + 1) * pk->gsize < k1 ? (g + 1) * pk->gsize : k1;
        const __m512 s = scales16(pk, blk, g);
        for (; k < kend; k += 8) {
            PF8_AT(bc, (k + nk) * MOEQ__PK_COL_BYTES(code), code);
            COLS8(bc, k, code, tab)
            float *o = P + (k - k0) * MOEQ__PK_ROWS;
            _mm512_storeu_ps(o, _mm512_mul_ps(f0, s));
            _mm512_storeu_ps(o + 16, _mm512_mul_ps(f1, s));
            _mm512_storeu_ps(o + 32, _mm512_mul_ps(f2, s));
            _mm512_storeu_ps(o + 48, _mm512_mul_ps(f3, s));
            _mm512_storeu_ps(o + 64, _mm512_mul_ps(f4, s));
            _mm512_storeu_ps(o + 80, _mm512_mul_ps(f5, s));
            _mm512_storeu_ps(o + 96, _mm512_mul_ps(f6, s));
            _mm512_storeu_ps(o + 112, _mm512_mul_ps(f7, s));
        }
    }
}

static void panel(const moeq__packed *pk, size_t blk, size_t k0, size_t nk, float *P) {
    switch (pk->code) {
        case MOEQ__PK_I4: moeq__kern_avx2.panel(pk, blk, k0, nk, P); break;
        case MOEQ__PK_NIB: panel_z(pk, blk, k0, nk, P, MOEQ__PK_NIB); break;
        case MOEQ__PK_I8: panel_z(pk, blk, k0, nk, P, MOEQ__PK_I8); break;
        default: panel_z(pk, blk, k0, nk, P, MOEQ__PK_E4M3); break;
    }
}

/* ---- fdot -------------------------------------------------------------------------- */

/* vpdpbusd as in idot: the weights are the unsigned side, 2 kv + 12 (0..24),
 * the activation codes the signed side, and a group's sums start at -12
 * times the sum of its codes (sum12) instead of zero.  Two NIB chunks
 * (8 columns, 64 bytes) go through one vpermb (fd_idx) that gives each
 * 32-bit lane one row's bytes of columns 0 and 1 of each chunk, the low
 * nibbles holding columns 0, 1, 4, 5 of the 8 and the high ones 2, 3, 6, 7:
 * the order of v (moeq__fp4_pos), so that four consecutive activation
 * codes, broadcast, meet them.  A vpermb per nibble then makes the codes
 * 2 kv + 12 (64-entry table: the 16 codes' values four times, so that the
 * index bits above the nibble do not matter).  The decoded group (16
 * columns x 16 rows) stays in registers for up to FDOT_M tokens.  16-lane
 * vectors: on Zen 4 a 512-bit vpdpbusd issues about as often as a 256-bit
 * one (kern_bench, hot: 1.18-1.32x the same kernel on 8-lane vectors, and
 * 2.0-2.8x kern_avx2.c's fdot). */
#define FDOT_M 6
#define FD_B(r, i) (32 * ((i) >> 1) + NIB_I(0, (i)&1, r))
#define FD_D(r)    FD_B(r, 0), FD_B(r, 1), FD_B(r, 2), FD_B(r, 3)
_Alignas(64) static const uint8_t fd_idx[64] = {
    FD_D(0), FD_D(1), FD_D(2),  FD_D(3),  FD_D(4),  FD_D(5),  FD_D(6),  FD_D(7),
    FD_D(8), FD_D(9), FD_D(10), FD_D(11), FD_D(12), FD_D(13), FD_D(14), FD_D(15)};

/* Chunks 2p and 2p + 1 of the group at gc (64 bytes): lo##p the low
 * nibbles' values, hi##p the high ones', one row per lane. */
#define FD_PAIR(p)                                                                                 \
    const __m512i r##p = _mm512_permutexvar_epi8(                                                  \
        idx, _mm512_loadu_si512((const void *)(gc + 64 * (p))));                                   \
    const __m512i lo##p = _mm512_permutexvar_epi8(r##p, tbl);                                      \
    const __m512i hi##p = _mm512_permutexvar_epi8(_mm512_srli_epi16(r##p, 4), tbl);

AI void fdot_z(const moeq__packed *pk, size_t blk, const moeq__fp4row *x, float *y, size_t ldy,
               const int M, const int fetch) {
    const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
    _Alignas(64) uint8_t lut[64];
    for (int n = 0; n < 16; n++) {
        lut[n] = lut[n + 16] = lut[n + 32] = lut[n + 48] =
            (uint8_t)(int)(2.0f * pk->lut[n] + 12.0f);
    }
    const __m512i tbl = _mm512_load_si512(lut), idx = _mm512_load_si512(fd_idx);
    const __m512 z = _mm512_setzero_ps();
    __m512 a0 = z, a1 = z, a2 = z, a3 = z, a4 = z, a5 = z;
    for (size_t g = 0; g < pk->groups; g++) {
        const uint8_t *gc = bc + 128 * g;
        if (fetch) {
            _mm_prefetch((const char *)(gc + PF_AHEAD), _MM_HINT_T0);
            _mm_prefetch((const char *)(gc + PF_AHEAD + 64), _MM_HINT_T0);
        }
        FD_PAIR(0) FD_PAIR(1)
        const __m512 s = scales16_raw(pk, blk, g); /* e4m3(b) * 2^-8 */
#define ROW(m)                                                                                     \
    if (M > m) {                                                                                   \
        const int8_t *xv = x[m].v + 16 * g;                                                        \
        __m512i i = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_set1_epi32(x[m].sum12[g]));    \
        i = _mm512_dpbusd_epi32(i, lo0, bcast4(xv));                                               \
        i = _mm512_dpbusd_epi32(i, hi0, bcast4(xv + 4));                                           \
        i = _mm512_dpbusd_epi32(i, lo1, bcast4(xv + 8));                                           \
        i = _mm512_dpbusd_epi32(i, hi1, bcast4(xv + 12));                                          \
        a##m = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_mul_ps(s, _mm512_set1_ps(x[m].sc[g])), \
                               a##m);                                                              \
    }
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
    }
    const __m512 as[FDOT_M] = {a0, a1, a2, a3, a4, a5};
    for (int m = 0; m < M; m++) _mm512_storeu_ps(y + (size_t)m * ldy, as[m]);
}

/* Block by block, tokens FDOT_M at a time; the first pass fetches the
 * codes ahead, the others find them in L1 or L2. */
static void fdot_blk(const moeq__packed *pk, size_t blk, size_t M, const moeq__fp4row *x, float *y,
                     size_t ldy) {
    for (size_t m0 = 0; m0 < M; m0 += FDOT_M) {
        const size_t n = M - m0 < FDOT_M ? M - m0 : FDOT_M;
        const int fetch = m0 == 0;
        switch (n) {
            case 1: fdot_z(pk, blk, x + m0, y + m0 * ldy, ldy, 1, fetch); break;
            case 2: fdot_z(pk, blk, x + m0, y + m0 * ldy, ldy, 2, fetch); break;
            case 3: fdot_z(pk, blk, x + m0, y + m0 * ldy, ldy, 3, fetch); break;
            case 4: fdot_z(pk, blk, x + m0, y + m0 * ldy, ldy, 4, fetch); break;
            case 5: fdot_z(pk, blk, x + m0, y + m0 * ldy, ldy, 5, fetch); break;
            default: fdot_z(pk, blk, x + m0, y + m0 * ldy, ldy, 6, fetch); break;
        }
    }
}

static void fdot(const moeq__packed *pk, size_t blk, size_t nb, size_t M, const moeq__fp4row *x,
                 float *y, size_t ldy) {
    for (size_t i = 0; i < nb; i++) fdot_blk(pk, blk + i, M, x, y + 16 * i, ldy);
}

/* ---- tile ------------------------------------------------------------------------- */

/* kern_avx2.c's tile with a block's 16 rows in one vector: per column one
 * load of the panel and one broadcast FMA per token, each element the same
 * one chain in k order (kernels.h).  Up to MOEQ__TILE_Z_MAX tokens a pass
 * (the AVX2 tile's 6 x 2 ymm chains become 12 zmm ones): a 4-cycle FMA on
 * two ports needs 8 chains in flight, which 6 tokens would not give.  Two
 * columns a loop pass: with 11 or 12 row pointers GCC keeps two of them in
 * xmm registers and moves them back every pass (Zen 5, 2 threads, kern_ab
 * --avx512 against one column a pass: T=512 w8a8_mxfp8 0.97-0.98x the
 * time, wna16 0.96-0.97x, w6a8_mxfp6 0.99x; four columns a pass: 1.00x
 * and 1.04x). */
#define TILE_TOKENS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
_Static_assert(MOEQ__TILE_Z_MAX == 12, "TILE_TOKENS names MOEQ__TILE_Z_MAX tokens");
AI void tile_z(const float *P, size_t nk, const float *const *x, float *C, size_t ldc,
               int accumulate, const int M) {
    const __m512 z = _mm512_setzero_ps();
#define DECL(m)                                                                                    \
    __m512 c##m = M > m && accumulate ? _mm512_loadu_ps(C + (size_t)(m)*ldc) : z;                  \
    const float *x##m = M > m ? x[m] : NULL;
    TILE_TOKENS(DECL)
#undef DECL
    /* Each row's pointer moves on with the panel's, and an empty asm keeps
     * it in a register of its own: else GCC addresses every broadcast as
     * row + 4k, an indexed operand, which Intel's cores most likely split
     * in two micro-ops (base + displacement stays one).  An Intel Xeon VM, 2
     * threads, kern_ab --avx512 against the indexed loop: T=512 0.95-0.96x
     * the time for five schemes, T=128 0.98x, T=32 0.99x. */
    const float *const end = P + (nk & ~(size_t)1) * MOEQ__PK_ROWS;
    for (; P < end; P += 2 * MOEQ__PK_ROWS) {
        const __m512 p = _mm512_loadu_ps(P);
        const __m512 q = _mm512_loadu_ps(P + MOEQ__PK_ROWS);
#define ROW(m)                                                                                     \
    if (M > m) c##m = _mm512_fmadd_ps(p, _mm512_set1_ps(x##m[0]), c##m);
        TILE_TOKENS(ROW)
#undef ROW
#define ROW(m)                                                                                     \
    if (M > m) {                                                                                   \
        c##m = _mm512_fmadd_ps(q, _mm512_set1_ps(x##m[1]), c##m);                                  \
        x##m += 2;                                                                                 \
        __asm__("" : "+r"(x##m));                                                                  \
    }
        TILE_TOKENS(ROW)
#undef ROW
    }
    if (nk & 1) {
        const __m512 p = _mm512_loadu_ps(P);
#define ROW(m)                                                                                     \
    if (M > m) c##m = _mm512_fmadd_ps(p, _mm512_set1_ps(x##m[0]), c##m);
        TILE_TOKENS(ROW)
#undef ROW
    }
#define ST(m)                                                                                      \
    if (M > m) _mm512_storeu_ps(C + (size_t)(m)*ldc, c##m);
    TILE_TOKENS(ST)
#undef ST
}

/* tile_z for two blocks side by side (P and Q, 32 rows): each token's
 * broadcast serves two FMAs, c for the first block and d for the second,
 * 24 accumulators for 12 tokens; each element the same one chain in k
 * order as tile_z's.  One thread, a panel pair hot in L1, 12 tokens, an
 * Intel Xeon VM: about 1.14x tile_z's rate on the two blocks (172 against
 * 151 GFLOP/s, 205 the zmm FMA's; one column a pass 166). */
AI void tile_z2(const float *P, size_t nk, const float *const *x, float *C, size_t ldc,
                int accumulate, const int M) {
    const __m512 z = _mm512_setzero_ps();
#define DECL(m)                                                                                    \
    __m512 c##m = M > m && accumulate ? _mm512_loadu_ps(C + (size_t)(m)*ldc) : z;                  \
    __m512 d##m = M > m && accumulate ? _mm512_loadu_ps(C + (size_t)(m)*ldc + 16) : z;             \
    const float *x##m = M > m ? x[m] : NULL;
    TILE_TOKENS(DECL)
#undef DECL
    const float *Q = P + nk * MOEQ__PK_ROWS;
    const float *const end = P + (nk & ~(size_t)1) * MOEQ__PK_ROWS;
    /* a token's value at x##m[0] into both blocks' chains, panels p and q */
#define ROW0(m)                                                                                    \
    if (M > m) {                                                                                   \
        const __m512 b_ = _mm512_set1_ps(x##m[0]);                                                 \
        c##m = _mm512_fmadd_ps(p, b_, c##m);                                                       \
        d##m = _mm512_fmadd_ps(q, b_, d##m);                                                       \
    }
    for (; P < end; P += 2 * MOEQ__PK_ROWS, Q += 2 * MOEQ__PK_ROWS) {
        __m512 p = _mm512_loadu_ps(P), q = _mm512_loadu_ps(Q);
        TILE_TOKENS(ROW0)
        p = _mm512_loadu_ps(P + MOEQ__PK_ROWS);
        q = _mm512_loadu_ps(Q + MOEQ__PK_ROWS);
#define ROW(m)                                                                                     \
    if (M > m) {                                                                                   \
        const __m512 b_ = _mm512_set1_ps(x##m[1]);                                                 \
        c##m = _mm512_fmadd_ps(p, b_, c##m);                                                       \
        d##m = _mm512_fmadd_ps(q, b_, d##m);                                                       \
        x##m += 2;                                                                                 \
        __asm__("" : "+r"(x##m));                                                                  \
    }
        TILE_TOKENS(ROW)
#undef ROW
    }
    if (nk & 1) {
        const __m512 p = _mm512_loadu_ps(P), q = _mm512_loadu_ps(Q);
        TILE_TOKENS(ROW0)
    }
#undef ROW0
#define ST(m)                                                                                      \
    if (M > m) {                                                                                   \
        _mm512_storeu_ps(C + (size_t)(m)*ldc, c##m);                                               \
        _mm512_storeu_ps(C + (size_t)(m)*ldc + 16, d##m);                                          \
    }
    TILE_TOKENS(ST)
#undef ST
}
#undef TILE_TOKENS

/* The tokens in tiles of at most MOEQ__TILE_Z_MAX (moeq__ntiles): for each
 * tile of mt tokens from m0, CALL(n) with n = mt as a constant (tile and
 * tile_bf16). */
#define TILE_Z_TILES(M, CALL)                                                                      \
    do {                                                                                           \
        const size_t ntile_ = moeq__ntiles(M, MOEQ__TILE_Z_MAX);                                   \
        for (size_t t_ = 0, m0 = 0, mt; t_ < ntile_; t_++, m0 += mt) {                             \
            mt = moeq__tile_rows(M, ntile_, t_);                                                   \
            switch (mt) {                                                                          \
                case 1: CALL(1); break;                                                            \
                case 2: CALL(2); break;                                                            \
                case 3: CALL(3); break;                                                            \
                case 4: CALL(4); break;                                                            \
                case 5: CALL(5); break;                                                            \
                case 6: CALL(6); break;                                                            \
                case 7: CALL(7); break;                                                            \
                case 8: CALL(8); break;                                                            \
                case 9: CALL(9); break;                                                            \
                case 10: CALL(10); break;                                                          \
                case 11: CALL(11); break;                                                          \
                default: CALL(12); break;                                                          \
            }                                                                                      \
        }                                                                                          \
    } while (0)

static void tile(const float *P, size_t nk, size_t nb, size_t M, const float *const *x, float *C,
                 size_t ldc, int accumulate) {
    if (nb == 2) {
#define CALL(n) tile_z2(P, nk, x + m0, C + m0 * ldc, ldc, accumulate, n)
        TILE_Z_TILES(M, CALL);
#undef CALL
        return;
    }
    for (size_t i = 0; i < nb; i++) {
        const float *Pi = P + i * nk * MOEQ__PK_ROWS;
        float *Ci = C + i * MOEQ__PK_ROWS;
#define CALL(n) tile_z(Pi, nk, x + m0, Ci + m0 * ldc, ldc, accumulate, n)
        TILE_Z_TILES(M, CALL);
#undef CALL
    }
}

/* ---- tile_bf16 -------------------------------------------------------------------- */

/* vdpbf16ps adds, per 32-bit lane, the products of the two bfloat16 pairs,
 * odd element first, each sum rounded to nearest (subnormal inputs and results
 * flushed: none occur, kernels.h's tile_bf16 rules them out): the definition
 * of tile_bf16, one instruction for 16 rows x 2 columns.
 * It needs AVX512_BF16 (Zen 4, Cooper Lake, Sapphire Rapids; not Ice Lake):
 * only this function is compiled for it, and cpu.c says whether it runs. */
#define BF16_FN __attribute__((target("avx512bf16")))

/* a + the products of w's pairs with the pair at xp (two bfloat16 values)
 * broadcast to every lane: one vdpbf16ps */
BF16_FN AI __m512 dp_pair(__m512 a, __m512i w, const uint16_t *xp) {
    int32_t pr;
    memcpy(&pr, xp, sizeof pr);
    return _mm512_dpbf16_ps(a, (__m512bh)w, (__m512bh)_mm512_set1_epi32(pr));
}

/* Up to MOEQ__TILE_Z_MAX tokens a pass, two chains each (even and odd
 * pairs, kernels.h): 24 accumulators, so that the weights' two loads per
 * pair of pairs serve 12 tokens and enough vdpbf16ps are in flight. */
#define TILE_TOKENS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
BF16_FN AI void tile_bf16_z(const uint16_t *Pb, size_t nk, const uint16_t *const *x, float *C,
                            size_t ldc, int accumulate, const int M) {
    const __m512 z = _mm512_setzero_ps();
#define DECL(m)                                                                                    \
    __m512 e##m = z, o##m = z;                                                                     \
    const uint16_t *x##m = M > m ? x[m] : NULL;
    TILE_TOKENS(DECL)
#undef DECL
    for (size_t p = 0; p < nk / 2; p += 2) {
        const __m512i we = _mm512_loadu_si512(Pb + p * 32);
        const __m512i wo = _mm512_loadu_si512(Pb + p * 32 + 32);
#define ROW(m)                                                                                     \
    if (M > m) {                                                                                   \
        e##m = dp_pair(e##m, we, x##m + 2 * p);                                                    \
        o##m = dp_pair(o##m, wo, x##m + 2 * p + 2);                                                \
    }
        TILE_TOKENS(ROW)
#undef ROW
    }
#define ST(m)                                                                                      \
    if (M > m) {                                                                                   \
        float *c_ = C + (size_t)(m)*ldc;                                                           \
        const __m512 S_ = _mm512_add_ps(e##m, o##m);                                               \
        _mm512_storeu_ps(c_, accumulate ? _mm512_add_ps(_mm512_loadu_ps(c_), S_) : S_);            \
    }
    TILE_TOKENS(ST)
#undef ST
}
#undef TILE_TOKENS

BF16_FN static void tile_bf16(const uint16_t *Pb, size_t nk, size_t M, const uint16_t *const *x,
                              float *C, size_t ldc, int accumulate) {
#define CALL(n) tile_bf16_z(Pb, nk, x + m0, C + m0 * ldc, ldc, accumulate, n)
    TILE_Z_TILES(M, CALL);
#undef CALL
}

/* ---- gemv_bf16 -------------------------------------------------------------------- */

/* Eight columns of a block as four vectors of bfloat16 code values, one row
 * per 32-bit lane, column pair q (2q, 2q + 1) in w[q], its first column in
 * the low half.  No floats on the way:
 * - I4: the values are u = 1 + n/16 (kernels.h), bfloat16 0x3F80 | n << 3:
 *   one vpmultishiftqb per pair puts each half's nibble at bits 3-6 of its
 *   low byte, one vpternlogd keeps those bits and or-s in 0x3F80.
 * - NIB: nib_pairs (a vpermb per 4 columns, a vpermw per pair), as the
 *   float gemv decodes them too.
 * - E4M3: vpermi2b looks the low and the high byte of the bfloat16 of
 *   e4m3(b & 0x7F) * 2^-8 up in two 128-entry tables, the sign bit is or-ed
 *   into the high byte and one two-source vpermb per pair puts the bytes in
 *   place.
 * - I8: through floats, the pair's halves cut from their bit patterns. */
#define E4B_SUB(m)                                                                                 \
    ((m) == 0   ? 0                                                                                \
     : (m) == 1 ? 0x3700                                                                           \
     : (m) == 2 ? 0x3780                                                                           \
     : (m) == 3 ? 0x37C0                                                                           \
                : 0x3800 | ((m)&3) << 5) /* m * 2^-17 */
#define E4B(i)    ((i) >> 3 ? (((i) >> 3) + 112) << 7 | ((i)&7) << 4 : E4B_SUB((i)&7))
#define E4B_LO(i) (uint8_t)(E4B(i) & 0xFF)
#define E4B_HI(i) (uint8_t)(E4B(i) >> 8)
#define R8(F, i)  F(i), F(i + 1), F(i + 2), F(i + 3), F(i + 4), F(i + 5), F(i + 6), F(i + 7)
#define R64(F, i)                                                                                  \
    R8(F, i), R8(F, i + 8), R8(F, i + 16), R8(F, i + 24), R8(F, i + 32), R8(F, i + 40),            \
        R8(F, i + 48), R8(F, i + 56)
_Alignas(64) static const uint8_t e4b_lo[128] = {R64(E4B_LO, 0), R64(E4B_LO, 64)};
_Alignas(64) static const uint8_t e4b_hi[128] = {R64(E4B_HI, 0), R64(E4B_HI, 64)};
/* pair q of a 4-column E4M3 load: bytes lo, hi of column 2q then of 2q + 1 */
#define E4P_B(q, r)                                                                                \
    32 * (q) + (r), 64 + 32 * (q) + (r), 32 * (q) + 16 + (r), 64 + 32 * (q) + 16 + (r)
#define E4P_V(q)                                                                                   \
    {                                                                                              \
        E4P_B(q, 0), E4P_B(q, 1), E4P_B(q, 2), E4P_B(q, 3), E4P_B(q, 4), E4P_B(q, 5), E4P_B(q, 6), \
            E4P_B(q, 7), E4P_B(q, 8), E4P_B(q, 9), E4P_B(q, 10), E4P_B(q, 11), E4P_B(q, 12),       \
            E4P_B(q, 13), E4P_B(q, 14), E4P_B(q, 15)                                               \
    }
_Alignas(64) static const uint8_t e4p_idx[2][64] = {E4P_V(0), E4P_V(1)};
/* pair q's nibbles of an I4 word (bit offsets 8q and 8q + 4 of each row's
 * 32-bit word, two rows per 64 bits) at bits 3-6 of the low bytes of its two
 * halves: the 8 bits from 3 below each (wrapping around the 64 bits for
 * q = 0; the bits around the nibble are masked off) */
#define I4P_CTRL(q)                                                                                \
    _mm512_set1_epi64((long long)((uint64_t)((8 * (q) + 61) % 64) |                              \
                                  (uint64_t)(8 * (q) + 1) << 16 |                                  \
                                  (uint64_t)(29 + 8 * (q)) << 32 |                                 \
                                  (uint64_t)(33 + 8 * (q)) << 48))
/* (w & 0x0078) | 0x3F80 per 16 bits: the bfloat16 1 + n/16 */
#define I4_U(v, q)                                                                                 \
    _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(I4P_CTRL(q), v),                        \
                              _mm512_set1_epi16(0x0078), _mm512_set1_epi16(0x3F80), 0xEA)

AI __m512i e4m3_pair(__m512i v, __m512i tlo0, __m512i tlo1, __m512i thi0, __m512i thi1, int q) {
    const __m512i lo = _mm512_permutex2var_epi8(tlo0, v, tlo1);
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(thi0, v, thi1), v,
                                                 _mm512_set1_epi8((char)0x80), 0xF8); /* a|(b&c) */
    return _mm512_permutex2var_epi8(lo, _mm512_load_si512(e4p_idx[q]), hi);
}

AI __m512i i8_pair(const uint8_t *p) {
    const __m512 f0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
    const __m512 f1 =
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 16))));
    return _mm512_ternarylogic_epi32(_mm512_srli_epi32(_mm512_castps_si512(f0), 16),
                                     _mm512_castps_si512(f1), _mm512_set1_epi32((int)0xFFFF0000u),
                                     0xF8);
}

/* I4 for panel_bf16: the bfloat16 of n - 8 for n = 0..15, twice (vpermw
 * reads 5 index bits; the bit above the nibble is the next nibble's) */
_Alignas(64) static const uint16_t i4kv_tab[32] = {
    0xC100, 0xC0E0, 0xC0C0, 0xC0A0, 0xC080, 0xC040, 0xC000, 0xBF80, /* -8 .. -1 */
    0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0, /* 0 .. 7 */
    0xC100, 0xC0E0, 0xC0C0, 0xC0A0, 0xC080, 0xC040, 0xC000, 0xBF80,
    0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0};
/* pair q's nibbles of an I4 word (as I4P_CTRL) at bits 0-3 of the low bytes
 * of its two halves */
#define I4N_CTRL(q)                                                                                \
    _mm512_set1_epi64((long long)((uint64_t)(8 * (q)) | (uint64_t)(8 * (q) + 4) << 16 |            \
                                  (uint64_t)(32 + 8 * (q)) << 32 |                                 \
                                  (uint64_t)(36 + 8 * (q)) << 48))

/* The lookup tables of pairs8 for code: NIB's nib_tab, E4M3's four 64-byte
 * halves of e4b_lo and e4b_hi, and for I4 with kv (panel_bf16) i4kv_tab. */
AI void pair_tabs(const moeq__packed *pk, const int code, __m512i t[4]) {
    t[0] = t[1] = t[2] = t[3] = _mm512_load_si512((const void *)i4kv_tab);
    if (code == MOEQ__PK_NIB) {
        t[0] = nib_tab(pk);
    } else if (code == MOEQ__PK_E4M3) {
        t[0] = _mm512_load_si512(e4b_lo);
        t[1] = _mm512_load_si512(e4b_lo + 64);
        t[2] = _mm512_load_si512(e4b_hi);
        t[3] = _mm512_load_si512(e4b_hi + 64);
    }
}

/* Columns k .. k + 7 of the block at bc as the four bfloat16 pair vectors
 * above (pair q in w[q]); I4 codes as u = 1 + n/16 (gemv_bf16), or with kv as
 * n - 8 (panel_bf16: one vpmultishiftqb and one vpermw per pair). */
AI void pairs8(const uint8_t *bc, size_t k, const int code, const __m512i t[4], const int kv,
               __m512i w[4]) {
    if (code == MOEQ__PK_I4) {
        const __m512i u = _mm512_loadu_si512(bc + (k / 8) * 64);
        if (kv) {
            w[0] = _mm512_permutexvar_epi16(_mm512_multishift_epi64_epi8(I4N_CTRL(0), u), t[0]);
            w[1] = _mm512_permutexvar_epi16(_mm512_multishift_epi64_epi8(I4N_CTRL(1), u), t[0]);
            w[2] = _mm512_permutexvar_epi16(_mm512_multishift_epi64_epi8(I4N_CTRL(2), u), t[0]);
            w[3] = _mm512_permutexvar_epi16(_mm512_multishift_epi64_epi8(I4N_CTRL(3), u), t[0]);
        } else {
            w[0] = I4_U(u, 0);
            w[1] = I4_U(u, 1);
            w[2] = I4_U(u, 2);
            w[3] = I4_U(u, 3);
        }
    } else if (code == MOEQ__PK_NIB) {
        nib_pairs(bc + (k / 4) * 32, t[0], w);
    } else if (code == MOEQ__PK_E4M3) {
        const __m512i v = _mm512_loadu_si512(bc + k * MOEQ__PK_ROWS);
        const __m512i v2 = _mm512_loadu_si512(bc + (k + 4) * MOEQ__PK_ROWS);
        w[0] = e4m3_pair(v, t[0], t[1], t[2], t[3], 0);
        w[1] = e4m3_pair(v, t[0], t[1], t[2], t[3], 1);
        w[2] = e4m3_pair(v2, t[0], t[1], t[2], t[3], 0);
        w[3] = e4m3_pair(v2, t[0], t[1], t[2], t[3], 1);
    } else {
        w[0] = i8_pair(bc + k * MOEQ__PK_ROWS);
        w[1] = i8_pair(bc + (k + 2) * MOEQ__PK_ROWS);
        w[2] = i8_pair(bc + (k + 4) * MOEQ__PK_ROWS);
        w[3] = i8_pair(bc + (k + 6) * MOEQ__PK_ROWS);
    }
}

BF16_FN AI void gemv_bf16_z(const moeq__packed *pk, size_t blk, const uint16_t *const *x,
                            const float *const *xsum, float *y, size_t ldy, const int code,
                            const int M) {
    const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
    __m512i tab[4];
    pair_tabs(pk, code, tab);
    const uint16_t *x0 = x[0], *x1 = M > 1 ? x[1] : x0, *x2 = M > 2 ? x[2] : x0,
                   *x3 = M > 3 ? x[3] : x0;
    const __m512 z = _mm512_setzero_ps();
    __m512 t0 = z, tt1 = z, tt2 = z, tt3 = z;
    const size_t gs = pk->gsize;
    for (size_t g = 0; g < pk->groups; g++) {
        /* M = 1: a0..a3 the chains of pairs q = 0..3 (mod 4); else per token
         * m an even (e) and an odd (o) chain */
        __m512 a0 = z, a1 = z, a2 = z, a3 = z, e0 = z, o0 = z, e1 = z, o1 = z, e2 = z, o2 = z,
               e3 = z, o3 = z;
        for (size_t k = g * gs; k < (g + 1) * gs; k += 8) {
            PF8(bc, k, code);
            __m512i w[4];
            pairs8(bc, k, code, tab, 0, w);
#define DP(a, xp, q, w) a = dp_pair(a, w, (xp) + k + 2 * (q))
#define TOK(m)                                                                                     \
    if (M > m) {                                                                                   \
        DP(e##m, x##m, 0, w[0]);                                                                   \
        DP(o##m, x##m, 1, w[1]);                                                                   \
        DP(e##m, x##m, 2, w[2]);                                                                   \
        DP(o##m, x##m, 3, w[3]);                                                                   \
    }
            if (M == 1) {
                DP(a0, x0, 0, w[0]);
                DP(a1, x0, 1, w[1]);
                DP(a2, x0, 2, w[2]);
                DP(a3, x0, 3, w[3]);
            } else {
                TOK(0) TOK(1) TOK(2) TOK(3)
            }
#undef TOK
#undef DP
        }
        const __m512 s = scales16_raw(pk, blk, g);
/* I4: fma(-24, S_g, 16 * partial) (kernels.h) */
#define PART(p, m)                                                                                 \
    (code == MOEQ__PK_I4 ? _mm512_fmadd_ps(_mm512_set1_ps(-24.0f), _mm512_set1_ps(xsum[m][g]),    \
                                           _mm512_mul_ps(p, _mm512_set1_ps(16.0f)))              \
                         : (p))
        if (M == 1) {
            t0 = _mm512_fmadd_ps(
                PART(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)), 0), s, t0);
        } else {
            t0 = _mm512_fmadd_ps(PART(_mm512_add_ps(e0, o0), 0), s, t0);
            if (M > 1) tt1 = _mm512_fmadd_ps(PART(_mm512_add_ps(e1, o1), 1), s, tt1);
            if (M > 2) tt2 = _mm512_fmadd_ps(PART(_mm512_add_ps(e2, o2), 2), s, tt2);
            if (M > 3) tt3 = _mm512_fmadd_ps(PART(_mm512_add_ps(e3, o3), 3), s, tt3);
        }
#undef PART
    }
    const __m512 tot[4] = {t0, tt1, tt2, tt3};
    gemv_store(pk, tot, M, y, ldy);
}

BF16_FN static void gemv_bf16(const moeq__packed *pk, size_t blk, size_t M,
                              const uint16_t *const *x, const float *const *xsum, float *y,
                              size_t ldy) {
#define CALL(code, m) gemv_bf16_z(pk, blk, x, xsum, y, ldy, code, m)
    MOEQ__GEMV_DISPATCH(CALL)
#undef CALL
}

/* ---- panel_bf16 ------------------------------------------------------------------- */

/* Codes into bfloat16 pairs by pairs8 (gemv_bf16's decodes; I4 codes as
 * n - 8), one 64-byte store per column pair; the AVX2 kernel decodes to
 * floats, scales them by a multiply and cuts them back to halves.  Scaled
 * (pk->bf16_scaled: E8M0 scales, every kv * ks zero or a normal bfloat16):
 * kv * 2^(e - 127) is kv with e - 127 added to its exponent field, one
 * masked 16-bit add per pair that leaves zeros as they are.  Exact, as every
 * table's panel_bf16 (kernels.h), so the same bits. */
AI void panel_bf16_z(const moeq__packed *pk, size_t blk, size_t k0, size_t nk, uint16_t *Pb,
                     const int code, const int scaled) {
    const uint8_t *bc = pk->codes + blk * pk->blk_code_bytes;
    const uint8_t *sc = pk->scales + blk * pk->blk_scale_bytes;
    __m512i tab[4];
    pair_tabs(pk, code, tab);
    const __m512i mag = _mm512_set1_epi16(0x7FFF);
    /* scaled: each row's e - 127 at bit 7 of both halves; groups are
     * multiples of 8 columns */
    __m512i d = _mm512_setzero_si512();
    size_t g_end = k0;
    for (size_t k = k0; k < k0 + nk; k += 8) {
        /* the next panel's codes, as the other panels fetch them */
        PF8_AT(bc, (k + nk) * MOEQ__PK_COL_BYTES(code), code);
        __m512i w[4];
        pairs8(bc, k, code, tab, 1, w);
        if (scaled) {
            if (k >= g_end) {
                const size_t g = k / pk->gsize;
                const __m512i e = _mm512_cvtepu8_epi32(
                    _mm_loadu_si128((const __m128i *)(const void *)(sc + g * MOEQ__PK_ROWS)));
                d = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(127)), 7);
                d = _mm512_or_si512(_mm512_slli_epi32(d, 16),
                                    _mm512_and_si512(d, _mm512_set1_epi32(0xFFFF)));
                g_end = (g + 1) * pk->gsize;
            }
#define SCALE(v) v = _mm512_mask_add_epi16(v, _mm512_test_epi16_mask(v, mag), v, d)
            SCALE(w[0]);
            SCALE(w[1]);
            SCALE(w[2]);
            SCALE(w[3]);
#undef SCALE
        }
        uint16_t *o = Pb + ((k - k0) / 2) * 32;
        _mm512_storeu_si512(o, w[0]);
        _mm512_storeu_si512(o + 32, w[1]);
        _mm512_storeu_si512(o + 64, w[2]);
        _mm512_storeu_si512(o + 96, w[3]);
    }
}

static void panel_bf16(const moeq__packed *pk, size_t blk, size_t k0, size_t nk, uint16_t *Pb,
                       int scaled) {
#define PB16(code)                                                                                 \
    if (scaled) {                                                                                  \
        panel_bf16_z(pk, blk, k0, nk, Pb, code, 1);                                                \
    } else {                                                                                       \
        panel_bf16_z(pk, blk, k0, nk, Pb, code, 0);                                                \
    }
    switch (pk->code) {
        case MOEQ__PK_I4: PB16(MOEQ__PK_I4) break;
        case MOEQ__PK_NIB: PB16(MOEQ__PK_NIB) break;
        case MOEQ__PK_I8: PB16(MOEQ__PK_I8) break;
        default: /* E4M3: never scaled (moeq__pk_bf16_scaled) */
            panel_bf16_z(pk, blk, k0, nk, Pb, MOEQ__PK_E4M3, 0);
            break;
    }
#undef PB16
}

void moeq__kern_avx512_fill(moeq__kern *t, bool bf16) {
    t->name = "avx512";
    t->panel = panel;
    t->panel_bf16 = panel_bf16;
    t->gemv = gemv;
    t->tile = tile;
    t->tile_blocks = 2; /* tile_z2 */
    t->idot = idot;
    t->idot_blocks = idot_blocks;
    t->idot_groups = idot_groups;
    t->iscale = iscale;
    t->fscale = fscale;
    t->fdot = fdot;
    if (bf16) { /* else the AVX2 ones, same bits */
        t->tile_bf16 = tile_bf16;
        t->gemv_bf16 = gemv_bf16;
    }
}

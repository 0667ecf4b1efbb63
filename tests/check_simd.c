/*
 * check_simd.c - the fast kernels against their definitions:
 *   - packing keeps every dequantized value (moeq__pk_dequant_ref equals
 *     moeq__dequant_ref of the source weight, bit for bit), for every code
 *     kind, scale storage, shape and tail;
 *   - the portable table's panel equals the reference dequantization;
 *   - every entry of the SIMD table equals the portable one bit for bit
 *     (panel, panel_bf16, gemv for 1-4 tokens, tile, tile_bf16, idot for
 *     1-12 tokens, one or two blocks and any length, amax, the activation
 *     quantize-dequantize
 *     steps, int8 and FP8 activation codes, special values included), for
 *     each SIMD table (avx2, avx512) in a test case of its own; a table the
 *     CPU cannot run is said on stderr and its comparisons are left out.
 */
#include "test_util.h"
#include "kernels.h"

#include <math.h>

static uint64_t g_rng;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static double uni(void) {
    return (double)(rnd() >> 11) / 9007199254740992.0;
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* The SIMD level under test (1 avx2, 2 avx512): each test runs once per
 * level, in a test case whose fixture sets it. */
static int g_level = 1;
static void level_avx2(void) {
    g_level = 1;
}
static void level_avx512(void) {
    g_level = 2;
}

/* The table under test, or NULL where this CPU or build has none (the suite
 * says so once, at the start). */
static const moeq__kern *simd(void) {
    return moeq__cpu_level() >= g_level ? moeq__kern_level(g_level) : NULL;
}

/* ---- weights of every kind ---------------------------------------------------- */

enum { SK_F32, SK_F16, SK_BF16, SK_E4M3_DIV, SK_E8M0 };

typedef struct src_weight {
    moeq__qweight w;
    uint8_t *codes;
    float *scale;
    float gdiv;
    moeq__packed pk;
    uint8_t *pmem;
} src_weight;

/* A random scale exactly representable in `sk` and in no narrower kind. */
static float scale_of(int sk, float gdiv) {
    switch (sk) {
        case SK_E8M0: return ldexpf(1.0f, (int)(rnd() % 30) - 18); /* panels may scale */
        case SK_E4M3_DIV: {
            uint8_t b = (uint8_t)(0x08 + rnd() % 0x70); /* positive, finite, subnormals too */
            return moeq__e4m3_to_f32(b) / gdiv;
        }
        case SK_BF16: return moeq__bf16_to_f32(moeq__f32_to_bf16((float)(1e-3 + uni() * 1e-2)));
        case SK_F16: {
            /* an f16 with more mantissa than bf16 holds */
            float f = moeq__f16_to_f32(moeq__f32_to_f16((float)(1e-3 + uni() * 1e-2)));
            if (moeq__bf16_to_f32(moeq__f32_to_bf16(f)) == f) f += ldexpf(1.0f, -20);
            return moeq__f16_to_f32(moeq__f32_to_f16(f));
        }
        default: return (float)(1e-3 + uni() * 1e-2) * (1.0f + 0x1p-20f);
    }
}

/* kind: a moeq__qw_kind (INT_PACKED with `bits`). */
static void make_weight(int kind, int nbits, size_t rows, size_t cols, size_t gs, int sk,
                        src_weight *s) {
    memset(s, 0, sizeof *s);
    moeq__qweight *w = &s->w;
    w->kind = kind;
    w->rows = rows;
    w->cols = cols;
    s->gdiv = sk == SK_E4M3_DIV ? (float)(100 + rnd() % 3000) * 0.37f : 0.0f;
    size_t stride;
    if (kind == MOEQ__QW_INT_PACKED) {
        w->bits = nbits;
        stride = moeq__int_packed_words(cols, nbits, false) * 4;
    } else if (kind == MOEQ__QW_INT4_NIBBLES || kind == MOEQ__QW_E2M1) {
        stride = (cols + 1) / 2;
    } else {
        stride = cols;
    }
    s->codes = calloc(rows * stride + 8, 1);
    int8_t *q = malloc(cols);
    for (size_t r = 0; r < rows; r++) {
        uint8_t *row = s->codes + r * stride;
        if (kind == MOEQ__QW_INT_PACKED) {
            int lo = -(1 << (nbits - 1)), span = 1 << nbits;
            for (size_t c = 0; c < cols; c++) q[c] = (int8_t)(lo + (int)(rnd() % (uint64_t)span));
            uint32_t *words = malloc(stride);
            moeq__int_pack_row_ref(q, cols, nbits, false, words);
            memcpy(row, words, stride);
            free(words);
        } else {
            for (size_t b = 0; b < stride; b++) {
                uint8_t v = (uint8_t)rnd();
                if (kind == MOEQ__QW_E4M3 && (v & 0x7F) == 0x7F) v = 0x3F;
                row[b] = v;
            }
        }
    }
    free(q);
    w->codes = s->codes;
    w->row_stride = stride;
    w->grid.rows = rows;
    w->grid.cols = cols / gs;
    w->grid.row_block = 1;
    w->grid.col_block = gs;
    s->scale = malloc(sizeof(float) * rows * (cols / gs));
    for (size_t i = 0; i < rows * (cols / gs); i++) s->scale[i] = scale_of(sk, s->gdiv);
    w->scale = s->scale;
}

static bool pack(src_weight *s) {
    if (!moeq__pk_plan(&s->w, s->gdiv, &s->pk)) return false;
    size_t cb = s->pk.blocks * s->pk.blk_code_bytes, sb = s->pk.blocks * s->pk.blk_scale_bytes;
    s->pmem = malloc(cb + sb + 1);
    uint8_t *buf = malloc(s->w.cols);
    moeq__pk_fill(&s->w, &s->pk, s->pmem, s->pmem + cb, buf);
    free(buf);
    s->pk.codes = s->pmem;
    s->pk.scales = s->pmem + cb;
    return true;
}

static void free_weight(src_weight *s) {
    free(s->codes);
    free(s->scale);
    free(s->pmem);
}

typedef struct kind_case {
    int kind, bits, sk, expect_code;
    float odd_scale; /* nonzero bits: one scale set to this (<= 0 or tiny: int4 keeps NIB) */
} kind_case;

static const kind_case k_kinds[] = {
    {MOEQ__QW_INT_PACKED, 4, SK_BF16, MOEQ__PK_I4, 0.0f},
    {MOEQ__QW_INT_PACKED, 4, SK_F32, MOEQ__PK_I4, 0.0f},
    {MOEQ__QW_INT_PACKED, 4, SK_F16, MOEQ__PK_I4, 0.0f},
    {MOEQ__QW_INT_PACKED, 4, SK_E8M0, MOEQ__PK_I4, 0.0f},
    {MOEQ__QW_INT_PACKED, 3, SK_F16, MOEQ__PK_NIB, 0.0f},
    {MOEQ__QW_INT_PACKED, 2, SK_E8M0, MOEQ__PK_NIB, 0.0f},
    {MOEQ__QW_INT_PACKED, 4, SK_F32, MOEQ__PK_NIB, -1.0f},
    {MOEQ__QW_INT_PACKED, 4, SK_E8M0, MOEQ__PK_NIB, 0x1p-120f},
    {MOEQ__QW_INT_PACKED, 8, SK_F32, MOEQ__PK_I8, 0.0f},
    {MOEQ__QW_INT_PACKED, 6, SK_BF16, MOEQ__PK_I8, 0.0f},
    {MOEQ__QW_INT4_NIBBLES, 4, SK_F32, MOEQ__PK_I4, 0.0f},
    {MOEQ__QW_INT4_NIBBLES, 4, SK_BF16, MOEQ__PK_NIB, -0.0f},
    {MOEQ__QW_E2M1, 4, SK_E8M0, MOEQ__PK_NIB, 0.0f},
    {MOEQ__QW_E2M1, 4, SK_E4M3_DIV, MOEQ__PK_NIB, 0.0f},
    {MOEQ__QW_I8, 8, SK_F32, MOEQ__PK_I8, 0.0f},
    {MOEQ__QW_I8, 8, SK_E8M0, MOEQ__PK_I8, 0.0f},
    {MOEQ__QW_E4M3, 8, SK_F32, MOEQ__PK_E4M3, 0.0f},
    {MOEQ__QW_E4M3, 8, SK_BF16, MOEQ__PK_E4M3, 0.0f},
};

static const int k_sk_kind[] = {MOEQ__PS_F32, MOEQ__PS_F16, MOEQ__PS_BF16, MOEQ__PS_E4M3_DIV,
                                MOEQ__PS_E8M0};

typedef struct shape {
    size_t rows, cols, gs;
} shape;

static const shape k_shapes[] = {
    {1, 8, 8},      {15, 24, 8},    {16, 64, 16}, {17, 128, 32},   {33, 256, 128},
    {40, 200, 200}, {16, 768, 128}, {50, 520, 8}, {18, 1024, 512},
};

/* idot on I8 and I4 blocks: the portable kernel is the exact integer dot
 * product of the codes with activation codes (the extremes -128 and 127
 * among them), for one block and for two at once, over a whole row and over
 * two windows accumulated (the second from an offset); the SIMD kernel gives
 * the same int32 values for 1..MOEQ__IDOT_MAX + 1 and 2 MOEQ__IDOT_MAX + 1
 * tokens (one, two and three of the avx512 table's tiles) and one or two
 * blocks from every block (so an odd last block alone too), with accumulate off
 * and on (onto values already there).  The rows' bytes and prefix sums are
 * those of their codes.  iscale on those sums (strided) is the product and
 * sum written out, in both tables. */
/* fscale on every table against its definition, for each block of pk and
 * up to 3 of its scale groups, with and without per-row factors (float sums
 * that are not integers, factors that are not powers of two). */
static void check_fscale(const moeq__packed *pk) {
    const moeq__kern *P = &moeq__kern_portable, *S = simd();
    enum { MF = 6, LDF = 20 };
    float sf[MF * LDF], xf[MF][3], fp[MF * LDF], fs[MF * LDF];
    const float *xr[MF];
    for (size_t m = 0; m < MF; m++) {
        for (size_t r = 0; r < LDF; r++) sf[m * LDF + r] = 0.3f * (float)(r + 1) - 1.7f * (float)m;
        for (size_t g = 0; g < 3; g++) xf[m][g] = 0.7f + 0.11f * (float)(m + g);
        xr[m] = xf[m];
    }
    for (size_t b = 0; b < pk->blocks; b++) {
        for (size_t M = 1; M <= MF; M += 5) {
            for (int withx = 0; withx < 2; withx++) {
                const float *const *xa = withx ? xr : NULL;
                for (size_t g = 0; g < pk->groups && g < 3; g++) {
                    P->fscale(pk, b, g, M, sf, LDF, xa, fp, LDF, g == 0);
                    if (S) S->fscale(pk, b, g, M, sf, LDF, xa, fs, LDF, g == 0);
                }
                for (size_t m = 0; m < M; m++) {
                    for (size_t r = 0; r < 16; r++) {
                        float want = 0.0f;
                        for (size_t g = 0; g < pk->groups && g < 3; g++) {
                            const float ks = moeq__pk_ks(pk, b * 16 + r, g);
                            const float t = sf[m * LDF + r] * ks * (withx ? xf[m][g] : 1.0f);
                            want = g ? want + t : t;
                        }
                        ck_assert_uint_eq(bits(fp[m * LDF + r]), bits(want));
                        if (S) ck_assert_uint_eq(bits(fs[m * LDF + r]), bits(want));
                    }
                }
            }
        }
    }
}

/* idot_groups of every table against its definition: the portable idot on
 * each scale group's columns, each group's sums times its scales, the terms
 * added in group order (the first assigned); columns past 16 nb untouched. */
static void check_idot_groups(const moeq__packed *pk, size_t b, size_t nb, size_t M,
                              const moeq__i8row *xs, size_t si) {
    enum { MQ = 2 * MOEQ__IDOT_MAX + 1, LD = 16 * MOEQ__IDOT_BLOCKS + 4 };
    const moeq__kern *tabs[2] = {&moeq__kern_portable, simd()};
    int32_t sg[MQ * LD], scratch[MQ * LD];
    float want[MQ * LD], got[MQ * LD];
    for (size_t g = 0; g < pk->groups; g++) {
        moeq__kern_portable.idot(pk, b, nb, g * pk->gsize, pk->gsize, M, xs, sg, LD, 0);
        for (size_t m = 0; m < M; m++) {
            for (size_t j = 0; j < 16 * nb; j++) {
                const float t = (float)sg[m * LD + j] * moeq__pk_ks(pk, b * 16 + j, g);
                want[m * LD + j] = g ? want[m * LD + j] + t : t;
            }
        }
    }
    for (int v = 0; v < 2 && tabs[v]; v++) {
        for (size_t i = 0; i < MQ * LD; i++) got[i] = -7.0f;
        tabs[v]->idot_groups(pk, b, nb, M, xs, got, LD, scratch, LD);
        for (size_t m = 0; m < M; m++) {
            for (size_t j = 0; j < LD; j++) {
                const uint32_t w = j < 16 * nb ? bits(want[m * LD + j]) : bits(-7.0f);
                ck_assert_msg(bits(got[m * LD + j]) == w,
                              "%s idot_groups M=%zu nb=%zu shape %zu block %zu col %zu: %a, want "
                              "%a",
                              tabs[v]->name, M, nb, si, b, j, (double)got[m * LD + j],
                              (double)moeq__bits_f32(w));
            }
        }
    }
}

static void check_idot(const moeq__packed *pk, size_t C, size_t si) {
    /* up to two of the avx512 table's tiles and one token more */
    enum { MQ = 2 * MOEQ__IDOT_MAX + 1, LD = 16 * MOEQ__IDOT_BLOCKS + 4 };
    const moeq__kern *P = &moeq__kern_portable, *S = simd();
    int16_t *xq = malloc(sizeof(int16_t) * MQ * C);
    int8_t *xb = malloc((size_t)MQ * C);
    int32_t *ps = malloc(sizeof(int32_t) * MQ * (C / 8 + 1));
    for (size_t i = 0; i < MQ * C; i++) {
        uint64_t u = rnd() % 16;
        xq[i] = u == 0 ? -128 : u == 1 ? 127 : (int16_t)((int)(rnd() % 256) - 128);
    }
    moeq__i8row xs[MQ];
    for (size_t m = 0; m < MQ; m++) {
        moeq__i8row_fill(xq + m * C, C, xb + m * C, ps + m * (C / 8 + 1));
        xs[m] = (moeq__i8row){xq + m * C, xb + m * C, ps + m * (C / 8 + 1)};
        int32_t run = 0;
        for (size_t c = 0; c < C; c++) {
            if (c % 8 == 0) ck_assert_int_eq(xs[m].ps[c / 8], run);
            ck_assert_int_eq(xs[m].b[c], xs[m].w[c]);
            run += xs[m].w[c];
        }
        ck_assert_int_eq(xs[m].ps[C / 8], run);
    }
    const size_t half = (C / 2) & ~(size_t)7;
    for (size_t M = 1; M <= MQ; M += M <= MOEQ__IDOT_MAX ? 1 : MOEQ__IDOT_MAX) {
        for (size_t b = 0; b < pk->blocks; b++) {
            for (size_t nb = 1; nb <= MOEQ__IDOT_BLOCKS && b + nb <= pk->blocks; nb++) {
                int32_t cp[MQ * LD], cs[MQ * LD], cw[MQ * LD];
                P->idot(pk, b, nb, 0, C, M, xs, cp, LD, 0);
                for (size_t m = 0; m < M; m++) {
                    for (size_t j = 0; j < 16 * nb; j++) {
                        const size_t row = b * 16 + j;
                        int64_t d = 0;
                        for (size_t c = 0; c < C && row < pk->rows; c++) {
                            d += (int64_t)moeq__pk_kv(pk, row, c) * xs[m].w[c];
                        }
                        ck_assert_msg(cp[m * LD + j] == d, "idot M=%zu nb=%zu row %zu: %d vs %lld",
                                      M, nb, row, cp[m * LD + j], (long long)d);
                    }
                }
                P->idot(pk, b, nb, 0, half, M, xs, cw, LD, 0);
                P->idot(pk, b, nb, half, C - half, M, xs, cw, LD, 1);
                for (size_t m = 0; m < M; m++) {
                    ck_assert_msg(memcmp(cp + m * LD, cw + m * LD, 16 * nb * sizeof(int32_t)) == 0,
                                  "idot in two windows differs (M=%zu nb=%zu shape %zu)", M, nb,
                                  si);
                }
                if (nb == 1) { /* iscale: each group's scale, first and accumulated */
                    float fp[MQ * 20], fs[MQ * 20];
                    for (size_t g = 0; g < pk->groups && g < 3; g++) {
                        P->iscale(pk, b, g, M, cp, LD, fp, 20, g == 0);
                        if (S) S->iscale(pk, b, g, M, cp, LD, fs, 20, g == 0);
                    }
                    for (size_t m = 0; m < M; m++) {
                        for (size_t r = 0; r < 16; r++) {
                            float want = 0.0f;
                            for (size_t g = 0; g < pk->groups && g < 3; g++) {
                                const float t =
                                    (float)cp[m * LD + r] * moeq__pk_ks(pk, b * 16 + r, g);
                                want = g ? want + t : t;
                            }
                            ck_assert_uint_eq(bits(fp[m * 20 + r]), bits(want));
                            if (S) ck_assert_uint_eq(bits(fs[m * 20 + r]), bits(want));
                        }
                    }
                }
                check_idot_groups(pk, b, nb, M, xs, si);
                if (!S) continue;
                S->idot(pk, b, nb, 0, C, M, xs, cs, LD, 0);
                for (size_t m = 0; m < M; m++) {
                    ck_assert_msg(memcmp(cp + m * LD, cs + m * LD, 16 * nb * sizeof(int32_t)) == 0,
                                  "%s idot M=%zu nb=%zu differs (shape %zu block %zu)", S->name, M,
                                  nb, si, b);
                }
                S->idot(pk, b, nb, 0, half, M, xs, cs, LD, 0);
                S->idot(pk, b, nb, half, C - half, M, xs, cs, LD, 1);
                for (size_t m = 0; m < M; m++) {
                    ck_assert_msg(memcmp(cp + m * LD, cs + m * LD, 16 * nb * sizeof(int32_t)) == 0,
                                  "%s idot in two windows differs (M=%zu nb=%zu shape %zu)",
                                  S->name, M, nb, si);
                }
                /* accumulate onto values already there; columns past 16 nb untouched */
                for (size_t i = 0; i < MQ * LD; i++) cs[i] = cw[i] = (int32_t)(rnd() % 2001) - 1000;
                S->idot(pk, b, nb, 0, C, M, xs, cs, LD, 1);
                for (size_t m = 0; m < M; m++) {
                    for (size_t j = 0; j < LD; j++) {
                        const int32_t want =
                            j < 16 * nb ? cw[m * LD + j] + cp[m * LD + j] : cw[m * LD + j];
                        ck_assert_msg(cs[m * LD + j] == want,
                                      "%s idot accumulate M=%zu nb=%zu shape %zu col %zu", S->name,
                                      M, nb, si, j);
                    }
                }
            }
        }
    }
    free(xq);
    free(xb);
    free(ps);
}

/* y[m*20 + r] (m < M, rows r of block b that exist) is the float64 dot product
 * of x[m] and row b*16 + r of w ([R][C]), up to float rounding: within 1e-6
 * of the magnitude of the sum's terms.  off24: I4 codes on gemv_bf16, whose
 * terms are x * (16 + n), at most |x * (n - 8)| + 24 |x|, and -24 x in the
 * group's sum (kernels.h): 48 |x * ks| more per column. */
static void check_dot(const char *what, const float *y, size_t M, size_t b, size_t R, size_t C,
                      const float *w, const float *const *x, const moeq__packed *off24) {
    for (size_t m = 0; m < M; m++) {
        for (size_t r = 0; r < 16 && b * 16 + r < R; r++) {
            double d = 0, mag = 0;
            for (size_t c = 0; c < C; c++) {
                d += (double)x[m][c] * w[(b * 16 + r) * C + c];
                mag += fabs((double)x[m][c] * w[(b * 16 + r) * C + c]);
                if (off24) {
                    const float ks = moeq__pk_ks(off24, b * 16 + r, c / off24->gsize);
                    mag += 48.0 * fabs((double)x[m][c] * ks);
                }
            }
            ck_assert_msg(fabs(y[m * 20 + r] - d) <= 1e-6 * mag + 1e-30,
                          "%s M=%zu row %zu: %g vs %g", what, M, b * 16 + r, (double)y[m * 20 + r],
                          d);
        }
    }
}

/* Packing keeps values; the portable panel is the reference dequantization;
 * the SIMD panel and gemv equal the portable ones. */
START_TEST(test_packed_kernels) {
    const kind_case *kc = &k_kinds[_i];
    const moeq__kern *P = &moeq__kern_portable, *S = simd();
    g_rng = 0x51D0u + (uint64_t)_i;
    for (size_t si = 0; si < sizeof k_shapes / sizeof k_shapes[0]; si++) {
        const shape *sh = &k_shapes[si];
        size_t gs = sh->gs;
        if (kc->kind == MOEQ__QW_E2M1 && kc->sk == SK_E8M0 && gs < 32 && sh->cols % 32 == 0)
            gs = 32;
        src_weight s;
        make_weight(kc->kind, kc->bits, sh->rows, sh->cols, gs, kc->sk, &s);
        bool odd = bits(kc->odd_scale) != 0;
        if (odd) { /* a negative zero, negative or tiny scale somewhere */
            s.scale[rnd() % (sh->rows * (sh->cols / gs))] = kc->odd_scale;
        }
        ck_assert_msg(pack(&s), "kind %d cannot be packed", kc->kind);
        ck_assert_int_eq(s.pk.code, kc->expect_code);
        if (!odd) ck_assert_int_eq(s.pk.scale_kind, k_sk_kind[kc->sk]);
        size_t R = sh->rows, C = sh->cols;
        float *want = malloc(sizeof(float) * R * C), *got = malloc(sizeof(float) * R * C);
        moeq__dequant_ref(&s.w, 0, R, want);
        moeq__pk_dequant_ref(&s.pk, 0, R, got);
        for (size_t i = 0; i < R * C; i++) {
            ck_assert_msg(bits(want[i]) == bits(got[i]), "kind %d shape %zu: element %zu %g != %g",
                          kc->kind, si, i, (double)want[i], (double)got[i]);
        }
        /* decode_row through a PACKED qweight gives the code values */
        moeq__qweight pw = s.w;
        pw.kind = MOEQ__QW_PACKED;
        pw.pk = &s.pk;
        float *dv = malloc(sizeof(float) * C), *dv_ref = malloc(sizeof(float) * C);
        for (size_t r = 0; r < R; r += 7) {
            moeq__decode_row_ref(&s.w, r, 0, C, dv_ref);
            moeq__decode_row_ref(&pw, r, 0, C, dv);
            for (size_t c = 0; c < C; c++) ck_assert_uint_eq(bits(dv[c]), bits(dv_ref[c]));
        }
        free(dv);
        free(dv_ref);
        /* panels, per block and column window */
        float *pp = malloc(sizeof(float) * 16 * C), *ps = malloc(sizeof(float) * 16 * C);
        for (size_t b = 0; b < s.pk.blocks; b++) {
            size_t k0 = C >= 16 ? 8 : 0, nk = C - k0;
            P->panel(&s.pk, b, k0, nk, pp);
            for (size_t k = 0; k < nk; k++) {
                for (size_t r = 0; r < 16; r++) {
                    size_t row = b * 16 + r;
                    float v = row < R ? want[row * C + k0 + k] : 0.0f;
                    ck_assert_msg(bits(pp[k * 16 + r]) == bits(v) ||
                                      (row >= R && pp[k * 16 + r] == 0),
                                  "portable panel differs at row %zu col %zu", row, k0 + k);
                }
            }
            if (S) {
                memset(ps, 0xFF, sizeof(float) * 16 * C);
                S->panel(&s.pk, b, k0, nk, ps);
                ck_assert_msg(memcmp(pp, ps, sizeof(float) * 16 * nk) == 0,
                              "%s panel differs (kind %d shape %zu block %zu)", S->name, kc->kind,
                              si, b);
            }
        }
        /* the bfloat16 panel: kv (or kv * ks) of each element, exact */
        {
            uint16_t *bp = malloc(2 * 16 * C), *bs = malloc(2 * 16 * C);
            for (size_t b = 0; b < s.pk.blocks; b++) {
                size_t k0 = C >= 16 ? 8 : 0, nk = C - k0;
                /* scaled: kv * ks, where the plan allows it (E8M0 scales: this
                 * test's are 2^-18..2^11, which every kind but E4M3 takes) */
                const bool sc = moeq__pk_bf16_scaled(&s.pk);
                if (kc->sk == SK_E8M0 && !odd && s.pk.code != MOEQ__PK_E4M3) ck_assert(sc);
                for (int scaled = 0; scaled <= (int)sc; scaled++) {
                    P->panel_bf16(&s.pk, b, k0, nk, bp, scaled);
                    /* unscaled: every row of the block, padding too; scaled:
                     * the weight's rows, against the dequantized weight */
                    for (size_t k = 0; k < nk; k++) {
                        for (size_t r = 0; r < 16 && (!scaled || b * 16 + r < R); r++) {
                            const float v = scaled ? want[(b * 16 + r) * C + k0 + k]
                                                   : moeq__pk_kv(&s.pk, b * 16 + r, k0 + k);
                            ck_assert_uint_eq((uint32_t)bp[(k / 2) * 32 + 2 * r + k % 2] << 16,
                                              bits(v));
                        }
                    }
                    if (S) {
                        memset(bs, 0xFF, 2 * 16 * C);
                        S->panel_bf16(&s.pk, b, k0, nk, bs, scaled);
                        ck_assert_msg(memcmp(bp, bs, 2 * 16 * nk) == 0,
                                      "%s panel_bf16 (scaled %d) differs (shape %zu block %zu)",
                                      S->name, scaled, si, b);
                    }
                }
            }
            free(bp);
            free(bs);
        }
        /* gemv for 1..4 tokens */
        float *x = malloc(sizeof(float) * 4 * C);
        for (size_t i = 0; i < 4 * C; i++) x[i] = (float)(uni() * 2 - 1);
        const float *xs[4] = {x, x + C, x + 2 * C, x + 3 * C};
        /* I4 reads rows made by i4_prep (the same in both tables) */
        const float *xg[4] = {xs[0], xs[1], xs[2], xs[3]};
        size_t pstride = C + C / 8;
        float *prep = malloc(sizeof(float) * 4 * pstride),
              *prep_s = malloc(sizeof(float) * pstride);
        if (s.pk.code == MOEQ__PK_I4) {
            for (size_t m = 0; m < 4; m++) {
                P->i4_prep(xs[m], C, s.pk.gsize, prep + m * pstride);
                xg[m] = prep + m * pstride;
                size_t n = C + C / s.pk.gsize;
                for (size_t i = C; i < n; i++) { /* the group sums */
                    double d = 0;
                    size_t g = i - C;
                    for (size_t c = g * s.pk.gsize; c < (g + 1) * s.pk.gsize; c++) d += xs[m][c];
                    ck_assert_msg(fabs(prep[m * pstride + i] - d) <= 1e-5 * (double)s.pk.gsize,
                                  "i4_prep sum %zu: %g vs %g", g, (double)prep[m * pstride + i], d);
                }
                if (S) {
                    S->i4_prep(xs[m], C, s.pk.gsize, prep_s);
                    ck_assert_msg(memcmp(prep + m * pstride, prep_s, n * sizeof(float)) == 0,
                                  "%s i4_prep differs (shape %zu)", S->name, si);
                }
            }
        }
        for (size_t M = 1; M <= MOEQ__GEMV_MAX; M++) {
            for (size_t b = 0; b < s.pk.blocks; b++) {
                float yp[4 * 20], ys[4 * 20];
                P->gemv(&s.pk, b, M, xg, yp, 20);
                /* the portable gemv is the dot product, up to float rounding */
                check_dot("gemv", yp, M, b, R, C, want, xs, NULL);
                if (S) {
                    S->gemv(&s.pk, b, M, xg, ys, 20);
                    for (size_t m = 0; m < M; m++) {
                        ck_assert_msg(memcmp(yp + m * 20, ys + m * 20, 16 * sizeof(float)) == 0,
                                      "%s gemv M=%zu differs (kind %d shape %zu block %zu)",
                                      S->name, M, kc->kind, si, b);
                    }
                }
            }
        }
        /* gemv_bf16 for 1..4 rows of bfloat16 values: rows 0 and 2 inputs of
         * any sign from 2^-20 to 2^20 in magnitude, rows 1 and 3 E4M3 values
         * (FP8 activation codes) */
        uint16_t *xb = malloc(sizeof(uint16_t) * 4 * C);
        for (size_t m = 0; m < 4; m++) {
            for (size_t c = 0; c < C; c++) {
                uint8_t e;
                do {
                    e = (uint8_t)rnd();
                } while ((e & 0x7F) == 0x7F);
                const float v = m % 2 ? moeq__e4m3_to_f32(e)
                                      : ldexpf((float)(uni() * 2 - 1), (int)(rnd() % 41) - 20);
                xb[m * C + c] = (uint16_t)(bits(v) >> 16);
            }
        }
        const uint16_t *xbs[4] = {xb, xb + C, xb + 2 * C, xb + 3 * C};
        float *xbf = malloc(sizeof(float) * 4 * C); /* the same values */
        for (size_t i = 0; i < 4 * C; i++) xbf[i] = moeq__bf16_to_f32(xb[i]);
        /* I4 reads the rows' group sums (the same in both tables): i4_prep's
         * S_g of the same values, bit for bit */
        float *gsum = malloc(sizeof(float) * 4 * C);
        float *prep_b = malloc(sizeof(float) * (C + C / 8));
        for (size_t m = 0; m < 4; m++) {
            moeq__bf16_group_sums(xbs[m], C, s.pk.gsize, gsum + m * C);
            P->i4_prep(xbf + m * C, C, s.pk.gsize, prep_b);
            for (size_t g = 0; g < C / s.pk.gsize; g++) {
                ck_assert_msg(bits(gsum[m * C + g]) == bits(prep_b[C + g]),
                              "group sum %zu of row %zu: %g vs i4_prep's %g", g, m,
                              (double)gsum[m * C + g], (double)prep_b[C + g]);
            }
        }
        free(prep_b);
        const float *gsums[4] = {gsum, gsum + C, gsum + 2 * C, gsum + 3 * C};
        const float *xbfs[4] = {xbf, xbf + C, xbf + 2 * C, xbf + 3 * C};
        for (size_t M = 1; M <= MOEQ__GEMV_MAX; M++) {
            for (size_t b = 0; b < s.pk.blocks; b++) {
                float yp[4 * 20], ys[4 * 20];
                P->gemv_bf16(&s.pk, b, M, xbs, gsums, yp, 20);
                check_dot("gemv_bf16", yp, M, b, R, C, want, xbfs,
                          s.pk.code == MOEQ__PK_I4 ? &s.pk : NULL);
                if (S) {
                    S->gemv_bf16(&s.pk, b, M, xbs, gsums, ys, 20);
                    for (size_t m = 0; m < M; m++) {
                        ck_assert_msg(memcmp(yp + m * 20, ys + m * 20, 16 * sizeof(float)) == 0,
                                      "%s gemv_bf16 M=%zu differs (kind %d shape %zu block %zu)",
                                      S->name, M, kc->kind, si, b);
                    }
                }
            }
        }
        free(xb);
        free(xbf);
        free(gsum);
        check_fscale(&s.pk);
        if (s.pk.code == MOEQ__PK_I8 || s.pk.code == MOEQ__PK_I4) check_idot(&s.pk, C, si);
        free(x);
        free(prep);
        free(prep_s);
        free(pp);
        free(ps);
        free(want);
        free(got);
        free_weight(&s);
    }
}
END_TEST

/* moeq__pk_bf16_scaled: E8M0 scales whose products with every code value
 * stay normal bfloat16s and multiples of 2^-19 allow scaled panels; a scale
 * that takes E2M1's 0.5 below 2^-19 (or to a subnormal), one that takes 6
 * past bfloat16's range, or any other scale kind does not. */
START_TEST(test_bf16_scaled_plan) {
    g_rng = 0x5CA1u;
    static const struct {
        int kind, bits, sk;
        float odd; /* one scale set to this when nonzero */
        bool want;
    } cases[] = {
        {MOEQ__QW_E2M1, 4, SK_E8M0, 0.0f, true},
        {MOEQ__QW_E2M1, 4, SK_E8M0, 0x1p-18f, true},   /* 0.5 * 2^-18 = 2^-19 */
        {MOEQ__QW_E2M1, 4, SK_E8M0, 0x1p-19f, false},  /* 2^-20 */
        {MOEQ__QW_E2M1, 4, SK_E8M0, 0x1p-127f, false}, /* 2^-128: subnormal */
        {MOEQ__QW_E2M1, 4, SK_E8M0, 0x1p125f, true},   /* 6 * 2^125 = 1.5 * 2^127 */
        {MOEQ__QW_E2M1, 4, SK_E8M0, 0x1p126f, false},  /* 6 * 2^126 overflows bfloat16 */
        {MOEQ__QW_INT_PACKED, 4, SK_E8M0, 0.0f, true},
        {MOEQ__QW_INT_PACKED, 4, SK_E8M0, 0x1p-19f, true}, /* integers: 1 * 2^-19 */
        {MOEQ__QW_INT_PACKED, 4, SK_E8M0, 0x1p-20f, false},
        {MOEQ__QW_I8, 8, SK_E8M0, 0.0f, true},
        {MOEQ__QW_E2M1, 4, SK_E4M3_DIV, 0.0f, false},
        {MOEQ__QW_INT_PACKED, 4, SK_BF16, 0.0f, false},
        {MOEQ__QW_E4M3, 8, SK_F32, 0.0f, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        src_weight s;
        make_weight(cases[i].kind, cases[i].bits, 20, 64, 32, cases[i].sk, &s);
        if (cases[i].odd != 0.0f) s.scale[7] = cases[i].odd;
        ck_assert(pack(&s));
        ck_assert_msg(moeq__pk_bf16_scaled(&s.pk) == cases[i].want, "case %zu: %d", i,
                      (int)moeq__pk_bf16_scaled(&s.pk));
        free_weight(&s);
    }
}
END_TEST

/* idot at the extremes of its integer sums: every int4 code 7 (packed as
 * n = 15) or -8 (n = 0) against every activation -128 or 127, over 512
 * columns, so any intermediate narrower than the kernels' bounds (the AVX2
 * int4 kernel sums 8 chunks of vpmaddubsw in int16: at most
 * 8 x 2 x 15 x 128 = 30720) would show.  Each table against the exact sum
 * q x x x 512. */
START_TEST(test_idot_extremes) {
    enum { R = 32, C = 512, LD = 16 * MOEQ__IDOT_BLOCKS };
    const moeq__kern *S = simd();
    const uint8_t fill[2] = {0x77, 0x88}; /* signed nibbles: 7 and -8 */
    const int16_t xv[2] = {-128, 127};
    int16_t *xq = malloc(sizeof(int16_t) * MOEQ__IDOT_MAX * C);
    int8_t *xb = malloc((size_t)MOEQ__IDOT_MAX * C);
    int32_t *ps = malloc(sizeof(int32_t) * MOEQ__IDOT_MAX * (C / 8 + 1));
    int32_t *c = malloc(sizeof(int32_t) * MOEQ__IDOT_MAX * LD);
    moeq__i8row xs[MOEQ__IDOT_MAX];
    for (int fi = 0; fi < 2; fi++) {
        src_weight s;
        make_weight(MOEQ__QW_INT4_NIBBLES, 4, R, C, 128, SK_F32, &s);
        memset(s.codes, fill[fi], R * s.w.row_stride);
        ck_assert(pack(&s));
        ck_assert_int_eq(s.pk.code, MOEQ__PK_I4);
        const long q = fi == 0 ? 7 : -8;
        for (int xi = 0; xi < 2; xi++) {
            for (size_t i = 0; i < (size_t)MOEQ__IDOT_MAX * C; i++) xq[i] = xv[xi];
            for (size_t m = 0; m < MOEQ__IDOT_MAX; m++) {
                moeq__i8row_fill(xq + m * C, C, xb + m * C, ps + m * (C / 8 + 1));
                xs[m] = (moeq__i8row){xq + m * C, xb + m * C, ps + m * (C / 8 + 1)};
            }
            const moeq__kern *tabs[2] = {&moeq__kern_portable, S};
            for (int v = 0; v < (S ? 2 : 1); v++) {
                for (size_t M = 1; M <= MOEQ__IDOT_MAX; M++) {
                    tabs[v]->idot(&s.pk, 0, MOEQ__IDOT_BLOCKS, 0, C, M, xs, c, LD, 0);
                    for (size_t i = 0; i < M * LD; i++) {
                        ck_assert_msg(c[i] == q * xv[xi] * C,
                                      "%s idot M=%zu: q %ld x %d: %d, want %ld", tabs[v]->name, M,
                                      q, xv[xi], c[i], q * xv[xi] * C);
                    }
                }
            }
        }
        free_weight(&s);
    }
    free(xq);
    free(xb);
    free(ps);
    free(c);
}
END_TEST

/* idot_blocks: every table asks for 1 .. MOEQ__IDOT_BLOCKS blocks a call;
 * the AVX2 one for two only where idot runs them side by side (I8 codes, at
 * most 3 rows: idot_pair), the avx512 one for two from 5 rows (below that
 * one block's single stream reads faster), the portable one one. */
START_TEST(test_idot_blocks) {
    const moeq__kern *S = simd();
    const moeq__kern *tabs[2] = {&moeq__kern_portable, S};
    const int32_t codes[2] = {MOEQ__PK_I8, MOEQ__PK_I4};
    for (int v = 0; v < (S ? 2 : 1); v++) {
        for (int c = 0; c < 2; c++) {
            for (size_t M = 1; M <= 2 * MOEQ__IDOT_MAX; M++) {
                const size_t nb = tabs[v]->idot_blocks(codes[c], M);
                size_t want = 1;
                if (!strcmp(tabs[v]->name, "avx512") && M > 4) want = MOEQ__IDOT_BLOCKS;
                if (!strcmp(tabs[v]->name, "avx2") && codes[c] == MOEQ__PK_I8 && M <= 3)
                    want = MOEQ__IDOT_BLOCKS;
                ck_assert_msg(nb == want, "%s idot_blocks(code %d, M=%zu) = %zu, want %zu",
                              tabs[v]->name, (int)codes[c], M, nb, want);
            }
        }
    }
}
END_TEST

/* What cannot be packed stays as it is. */
START_TEST(test_not_packed) {
    g_rng = 7;
    src_weight s;
    make_weight(MOEQ__QW_I8, 8, 16, 12, 12, SK_F32, &s); /* cols not a multiple of 8 */
    moeq__packed pk;
    ck_assert(!moeq__pk_plan(&s.w, 0, &pk));
    free_weight(&s);
    make_weight(MOEQ__QW_I8, 8, 16, 64, 4, SK_F32, &s); /* group of 4 columns */
    ck_assert(!moeq__pk_plan(&s.w, 0, &pk));
    float zp[16 * 16] = {0};
    s.w.zero_point = zp; /* asymmetric */
    ck_assert(!moeq__pk_plan(&s.w, 0, &pk));
    free_weight(&s);
    make_weight(MOEQ__QW_INT_PACKED, 4, 16, 64, 16, SK_F32, &s);
    int32_t g_idx[64] = {0};
    s.w.g_idx = g_idx; /* actorder */
    ck_assert(!moeq__pk_plan(&s.w, 0, &pk));
    s.w.g_idx = NULL;
    s.scale[3] = INFINITY; /* scales must be finite */
    ck_assert(!moeq__pk_plan(&s.w, 0, &pk));
    free_weight(&s);
}
END_TEST

/* tile for 1..13 and 25 tokens (one to three register tiles of every
 * table), one and two blocks side by side, lengths 0..300, with and
 * without accumulating: one FMA chain per element in k order, the same bits
 * in every table. */
START_TEST(test_tile) {
    const moeq__kern *P = &moeq__kern_portable, *S = simd();
    g_rng = 99;
    enum { MT = 25, NB = MOEQ__TILE_BLOCKS };
    ck_assert(P->tile_blocks >= 1 && P->tile_blocks <= NB);
    ck_assert(!S || (S->tile_blocks >= 1 && S->tile_blocks <= NB));
    static float panel[NB * 300 * 16], x[MT][300], cp[MT * 16 * NB], cs[MT * 16 * NB];
    for (size_t i = 0; i < NB * 300 * 16; i++) panel[i] = (float)(uni() * 2 - 1);
    const float *xs[MT];
    for (size_t m = 0; m < MT; m++) {
        for (size_t k = 0; k < 300; k++) x[m][k] = (float)(uni() * 2 - 1);
        xs[m] = x[m];
    }
    const size_t lens[] = {0, 1, 7, 8, 33, 256, 300};
    for (size_t nb = 1; nb <= NB; nb++) {
        const size_t ldc = 16 * nb;
        for (size_t M = 1; M <= MT; M = M == 13 ? MT : M + 1) {
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                const size_t nk = lens[li];
                for (int acc = 0; acc < 2; acc++) {
                    for (size_t i = 0; i < MT * 16 * NB; i++) cp[i] = cs[i] = (float)i * 0.25f;
                    P->tile(panel, nk, nb, M, xs, cp, ldc, acc);
                    for (size_t m = 0; m < M; m++) {
                        for (size_t j = 0; j < ldc; j++) { /* block j / 16, row j % 16 */
                            const float *pb = panel + (j / 16) * nk * 16;
                            float want = acc ? (float)(m * ldc + j) * 0.25f : 0.0f;
                            for (size_t k = 0; k < nk; k++)
                                want = fmaf(pb[k * 16 + j % 16], x[m][k], want);
                            ck_assert_uint_eq(bits(cp[m * ldc + j]), bits(want));
                        }
                    }
                    if (S) {
                        S->tile(panel, nk, nb, M, xs, cs, ldc, acc);
                        ck_assert_msg(memcmp(cp, cs, sizeof cp) == 0,
                                      "%s tile nb=%zu M=%zu len %zu acc %d", S->name, nb, M, nk,
                                      acc);
                    }
                }
            }
        }
    }
}
END_TEST

/* A random E4M3 value (no NaN) times 2^e, as a bfloat16. */
static uint16_t e4m3_bf16(int e) {
    uint8_t b;
    do {
        b = (uint8_t)rnd();
    } while ((b & 0x7F) == 0x7F);
    return (uint16_t)(bits(ldexpf(moeq__e4m3_to_f32(b), e)) >> 16);
}

/* tile_bf16 on E4M3 kernel values and activation codes or bf16 inputs: the portable kernel
 * is the float64 dot product up to float rounding and follows its two-chain
 * definition; the SIMD one gives the same bits, for 1..13 and 25 tokens, lengths
 * across whole pairs of pairs, with and without accumulating. */
START_TEST(test_tile_bf16) {
    const moeq__kern *P = &moeq__kern_portable, *S = simd();
    g_rng = 0xBF16u;
    enum { MT = 25 }; /* 1..13 and 25 tokens: one to three register tiles of every table */
    static uint16_t panel[300 * 16], x[MT][300];
    static float cp[MT * 16], cs[MT * 16];
    for (size_t i = 0; i < 300 * 16; i++) panel[i] = e4m3_bf16(-8);
    /* rows 0-2 (mod 6) FP8 codes; rows 3-5 bf16 inputs of any sign and magnitude
     * from 2^-100 (smaller ones are flushed before tile_bf16 sees them) to 2^20 */
    const uint16_t *xs[MT];
    for (size_t m = 0; m < MT; m++) {
        for (size_t k = 0; k < 300; k++) {
            const float v = ldexpf((float)(uni() * 2 - 1), (int)(rnd() % 121) - 100);
            x[m][k] = m % 6 < 3 ? e4m3_bf16(0) : (uint16_t)(bits(v) >> 16);
            if (m % 6 >= 3 && (x[m][k] & 0x7FFF) < 0x0D80) x[m][k] = 0;
        }
        xs[m] = x[m];
    }
    const size_t lens[] = {0, 4, 8, 36, 256, 300};
    for (size_t M = 1; M <= MT; M = M == 13 ? MT : M + 1) {
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const size_t nk = lens[li];
            for (int acc = 0; acc < 2; acc++) {
                for (size_t i = 0; i < MT * 16; i++) cp[i] = cs[i] = (float)i * 0.25f;
                P->tile_bf16(panel, nk, M, xs, cp, 16, acc);
                for (size_t m = 0; m < M; m++) {
                    for (size_t r = 0; r < 16; r++) {
                        float ch[2] = {0, 0};
                        double d = 0, mag = 0;
                        for (size_t p = 0; p < nk / 2; p++) {
                            for (int j = 1; j >= 0; j--) {
                                float w = moeq__bits_f32((uint32_t)panel[p * 32 + 2 * r + j] << 16);
                                float v = moeq__bits_f32((uint32_t)x[m][2 * p + j] << 16);
                                ch[p % 2] = ch[p % 2] + w * v; /* exact product, one rounding */
                                d += (double)w * v;
                                mag += fabs((double)w * v);
                            }
                        }
                        float base = acc ? (float)(m * 16 + r) * 0.25f : 0.0f;
                        float want = acc ? base + (ch[0] + ch[1]) : ch[0] + ch[1];
                        ck_assert_uint_eq(bits(cp[m * 16 + r]), bits(want));
                        ck_assert(fabs(cp[m * 16 + r] - base - d) <=
                                  1e-6 * mag + 1e-6 * fabs(base));
                    }
                }
                if (S) {
                    S->tile_bf16(panel, nk, M, xs, cs, 16, acc);
                    ck_assert_msg(memcmp(cp, cs, sizeof cp) == 0,
                                  "%s tile_bf16 M=%zu len %zu acc %d", S->name, M, nk, acc);
                }
            }
        }
    }
}
END_TEST

/* ---- activations -------------------------------------------------------------------- */

/* Random values with the awkward ones mixed in. */
static void act_values(float *x, size_t n, float mag) {
    static const float special[] = {0.0f,    -0.0f, NAN,    -NAN, INFINITY, -INFINITY, 1e-40f,
                                    -1e-40f, 1e30f, -1e30f, 0.5f, -0.5f,    1.5f,      2.5f};
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rnd() % 64;
        if (r < 4) {
            x[i] = special[rnd() % (sizeof special / sizeof special[0])];
        } else if (r < 8) {
            x[i] = (float)((int)(rnd() % 33) - 16) * 0.25f * mag; /* on rounding boundaries */
        } else {
            x[i] = (float)((uni() * 2 - 1) * mag * exp(uni() * 4 - 2));
        }
    }
}

static void same_floats(const float *a, const float *b, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(bits(a[i]) == bits(b[i]), "%s: element %zu: %a vs %a", what, i, (double)a[i],
                      (double)b[i]);
    }
}

/* fdot on NVFP4 weights (E2M1 codes, E4M3 / global scales, groups of 16)
 * with NVFP4 activation rows: the portable kernel's terms are exact, so it
 * is the float64 sum up to float rounding, and divided back it is the dot
 * product of the dequantized weight and activations; the SIMD kernel gives
 * the same bits, for 1..7 tokens and lengths across the 256-column windows. */
START_TEST(test_fdot) {
    const moeq__kern *P = &moeq__kern_portable, *S = simd();
    g_rng = 0xFD07u;
    static const shape shapes[] = {{1, 16, 16},   {15, 48, 16},  {16, 256, 16},
                                   {33, 272, 16}, {40, 768, 16}, {17, 2048, 16}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *sh = &shapes[si];
        const size_t R = sh->rows, C = sh->cols, M = 7;
        src_weight s;
        make_weight(MOEQ__QW_E2M1, 4, R, C, 16, SK_E4M3_DIV, &s);
        ck_assert(pack(&s));
        ck_assert_int_eq(s.pk.code, MOEQ__PK_NIB);
        ck_assert_int_eq(s.pk.scale_kind, MOEQ__PS_E4M3_DIV);
        float *w = malloc(sizeof(float) * R * C), *x = malloc(sizeof(float) * M * C),
              *xq = malloc(sizeof(float) * M * C);
        moeq__dequant_ref(&s.w, 0, R, w);
        int8_t *v = malloc(M * C);
        float *sc = malloc(sizeof(float) * M * (C / 16));
        int32_t *sum12 = malloc(sizeof(int32_t) * M * (C / 16));
        moeq__fp4row rows[7];
        const float gsc = (float)(ldexp(1.0, (int)(rnd() % 12)) * (0.5 + uni()));
        for (size_t m = 0; m < M; m++) {
            act_values(x + m * C, C, 1.0f);
            P->q_nvfp4(x + m * C, C, gsc, v + m * C, sc + m * (C / 16), sum12 + m * (C / 16));
            P->qdq_nvfp4(x + m * C, C, gsc, xq + m * C);
            rows[m].v = v + m * C;
            rows[m].sc = sc + m * (C / 16);
            rows[m].sum12 = sum12 + m * (C / 16);
        }
        const float d = s.pk.gdiv * 0x1p-8f * 4.0f * gsc;
        for (size_t mm = 1; mm <= M; mm++) {
            for (size_t b = 0; b < s.pk.blocks; b++) {
                float yp[7 * 20], ys[7 * 40];
                P->fdot(&s.pk, b, 1, mm, rows, yp, 20);
                for (size_t m = 0; m < mm; m++) {
                    for (size_t r = 0; r < 16 && b * 16 + r < R; r++) {
                        double dot = 0, mag = 0;
                        for (size_t c = 0; c < C; c++) {
                            const double t = (double)w[(b * 16 + r) * C + c] * xq[m * C + c];
                            dot += t;
                            mag += fabs(t);
                        }
                        const double got = (double)yp[m * 20 + r] / d;
                        ck_assert_msg(fabs(got - dot) <= 1e-5 * mag + 1e-30,
                                      "fdot shape %zu M=%zu row %zu: %g vs %g", si, mm, b * 16 + r,
                                      got, dot);
                    }
                }
                /* each block alone, and in a pair with the next or (the last
                 * block) the one before, as the forward calls it */
                const moeq__kern *tabs[2] = {P, S};
                for (int v = 0; v < 2 && tabs[v]; v++) {
                    for (size_t nb = 1; nb <= 2; nb++) {
                        const size_t b0 = nb == 1 ? b : b + 1 < s.pk.blocks ? b : b - (b > 0);
                        if (b0 + nb > s.pk.blocks) continue;
                        tabs[v]->fdot(&s.pk, b0, nb, mm, rows, ys, 40);
                        const size_t off = 16 * (b - b0);
                        for (size_t m = 0; m < mm; m++) {
                            ck_assert_msg(
                                memcmp(yp + m * 20, ys + m * 40 + off, 16 * sizeof(float)) == 0,
                                "%s fdot differs (shape %zu M=%zu block %zu of %zu from %zu, "
                                "token %zu)",
                                tabs[v]->name, si, mm, b, nb, b0, m);
                        }
                    }
                }
            }
        }
        free(w);
        free(x);
        free(xq);
        free(v);
        free(sc);
        free(sum12);
        free_weight(&s);
    }
}
END_TEST

/* q_nvfp4: both tables write the same codes, scales and sums, and
 * (v / 2) * (sc / gsc) is what qdq_nvfp4 gave (qdq, for that row). */
static void check_q_nvfp4(const float *x, size_t n, float gsc, const float *qdq) {
    const moeq__kern *P = &moeq__kern_portable, *S = simd();
    static int8_t vp[2048], vs[2048];
    static float scp[128], scs[128];
    static int32_t sump[128], sums[128];
    P->q_nvfp4(x, n, gsc, vp, scp, sump);
    S->q_nvfp4(x, n, gsc, vs, scs, sums);
    ck_assert_msg(memcmp(vp, vs, n) == 0, "q_nvfp4 codes differ (n %zu)", n);
    same_floats(scp, scs, n / 16, "q_nvfp4 scales");
    ck_assert_msg(memcmp(sump, sums, n / 16 * sizeof(int32_t)) == 0, "q_nvfp4 sums differ");
    for (size_t g = 0; g < n / 16; g++) {
        int sum = 0;
        const float eff = scp[g] / gsc;
        for (size_t k = g * 16; k < g * 16 + 16; k++) {
            const int8_t c = vp[moeq__fp4_pos(k)];
            ck_assert_int_le(abs(c), 12);
            sum += c;
            ck_assert_msg((float)c * 0.5f * eff == qdq[k], "q_nvfp4 element %zu: %d * %a != %a", k,
                          c, (double)eff, (double)qdq[k]);
        }
        ck_assert_int_eq(sump[g], 12 * sum);
    }
}

START_TEST(test_activation_kernels) {
    const moeq__kern *P = &moeq__kern_portable, *S = simd();
    if (!S) return;
    g_rng = 0xAC7u;
    static float x[2048], a[2048], b[2048];
    const size_t lens[] = {1, 7, 8, 16, 31, 64, 100, 768, 2048};
    for (int round = 0; round < 40; round++) {
        float mag = (float)ldexp(1.0, (int)(rnd() % 40) - 20);
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            size_t n = lens[li];
            act_values(x, n, mag);
            ck_assert_uint_eq(bits(P->amax(x, n)), bits(S->amax(x, n)));
            float am = P->amax(x, n);
            float s8 = (am > MOEQ__ACT_INT8_EPS ? am : MOEQ__ACT_INT8_EPS) / 127.0f;
            P->qdq_int8(x, n, s8, a);
            S->qdq_int8(x, n, s8, b);
            same_floats(a, b, n, "qdq_int8");
            float sf = (am > MOEQ__ACT_FP8_EPS ? am : MOEQ__ACT_FP8_EPS) / MOEQ__E4M3_MAX;
            P->qdq_fp8(x, n, sf, a);
            S->qdq_fp8(x, n, sf, b);
            same_floats(a, b, n, "qdq_fp8");
            /* a static scale that saturates */
            P->qdq_fp8(x, n, sf * 0.01f, a);
            S->qdq_fp8(x, n, sf * 0.01f, b);
            same_floats(a, b, n, "qdq_fp8 saturating");
            P->qdq_int8(x, n, s8 * 0.01f, a);
            S->qdq_int8(x, n, s8 * 0.01f, b);
            same_floats(a, b, n, "qdq_int8 saturating");
            /* the codes: equal, and code * s is what qdq_int8 gives */
            for (int sat = 0; sat < 2; sat++) {
                static int16_t qp[2048], qs[2048];
                const float sc = sat ? s8 * 0.01f : s8;
                P->q_int8(x, n, sc, qp);
                S->q_int8(x, n, sc, qs);
                ck_assert_msg(memcmp(qp, qs, n * sizeof(int16_t)) == 0, "q_int8 differs (n %zu)",
                              n);
                P->qdq_int8(x, n, sc, a);
                for (size_t i = 0; i < n; i++) {
                    ck_assert_int_ge(qp[i], -128);
                    ck_assert_int_le(qp[i], 127);
                    ck_assert_msg(bits((float)qp[i] * sc) == bits(a[i]),
                                  "q_int8 code %d * %a != qdq %a (element %zu of %zu)", qp[i],
                                  (double)sc, (double)a[i], i, n);
                }
            }
            /* FP8 codes as bfloat16: equal, and value * s is what qdq_fp8 gives */
            for (int sat = 0; sat < 2; sat++) {
                static uint16_t hp[2048], hs[2048];
                const float sc = sat ? sf * 0.01f : sf;
                P->q_fp8_bf16(x, n, sc, hp);
                S->q_fp8_bf16(x, n, sc, hs);
                ck_assert_msg(memcmp(hp, hs, n * sizeof(uint16_t)) == 0,
                              "q_fp8_bf16 differs (n %zu)", n);
                P->qdq_fp8(x, n, sc, a);
                for (size_t i = 0; i < n; i++) {
                    const float v = moeq__bits_f32((uint32_t)hp[i] << 16);
                    ck_assert_msg(fabsf(v) <= 448.0f && bits(v * sc) == bits(a[i]),
                                  "q_fp8_bf16 code %a * %a != qdq %a (element %zu of %zu)",
                                  (double)v, (double)sc, (double)a[i], i, n);
                }
            }
            if (n % 16 == 0) {
                float gsc = (float)(ldexp(1.0, (int)(rnd() % 20)) * (0.5 + uni()));
                P->qdq_nvfp4(x, n, gsc, a);
                S->qdq_nvfp4(x, n, gsc, b);
                same_floats(a, b, n, "qdq_nvfp4");
                check_q_nvfp4(x, n, gsc, a);
            }
            /* in place */
            memcpy(a, x, n * sizeof(float));
            S->qdq_fp8(a, n, sf, a);
            P->qdq_fp8(x, n, sf, b);
            same_floats(a, b, n, "qdq_fp8 in place");
            /* MXFP8 as moe_fast.c's qdq_row makes it (amax and qdq_fp8 per
             * 32 at the E8M0 scale) is the reference's quantize-dequantize */
            {
                static uint8_t q8[2048], e8[64];
                moeq__actq_mxfp8_ref(x, 1, n, q8, e8);
                moeq__actdq_mxfp8_ref(q8, 1, n, e8, b);
                memcpy(a, x, n * sizeof(float));
                for (size_t c0 = 0; c0 < n; c0 += 32) {
                    const size_t len = n - c0 < 32 ? n - c0 : 32;
                    const float s =
                        moeq__e8m0_to_f32(moeq__mx_scale_byte_ref(S->amax(a + c0, len), 8));
                    S->qdq_fp8(a + c0, len, s, a + c0);
                }
                same_floats(a, b, n, "MXFP8 by amax and qdq_fp8");
            }
        }
    }
}
END_TEST

static int64_t ulp_distance(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if (ia < 0) ia = (int32_t)(0x80000000u - (uint32_t)ia);
    if (ib < 0) ib = (int32_t)(0x80000000u - (uint32_t)ib);
    return ia > ib ? (int64_t)ia - ib : (int64_t)ib - ia;
}

/* silu(g) * u within a few ulp (the SIMD exp is not libm's); the combine
 * and the bf16 conversions exactly. */
START_TEST(test_elementwise_kernels) {
    const moeq__kern *P = &moeq__kern_portable, *S = simd();
    if (!S) return;
    g_rng = 0xE1u;
    enum { N = 1003 };
    static float g[N], u[N], a[N], b[N], acc1[N], acc2[N];
    static uint16_t h[N], h2[N];
    const float limits[] = {0.0f, 0.5f, 7.0f};
    for (int round = 0; round < 20; round++) {
        float mag = (float)ldexp(1.0, (int)(rnd() % 16) - 6);
        for (int i = 0; i < N; i++) {
            g[i] = (float)((uni() * 2 - 1) * mag);
            u[i] = (float)((uni() * 2 - 1) * mag);
        }
        g[0] = 100.0f;
        g[1] = -100.0f;
        g[2] = 89.0f;
        g[3] = -89.0f;
        g[4] = 0.0f;
        g[5] = -0.0f;
        for (size_t li = 0; li < 3; li++) {
            P->silu_mul(g, u, a, N, limits[li]);
            S->silu_mul(g, u, b, N, limits[li]);
            for (int i = 0; i < N; i++) {
                /* both computed as g / (1 + e) * u: a few ulp of e, fewer in the result */
                ck_assert_msg(ulp_distance(a[i], b[i]) <= 4 || fabsf(a[i] - b[i]) <= 1e-37f,
                              "silu_mul(%a, %a): %a vs %a", (double)g[i], (double)u[i],
                              (double)a[i], (double)b[i]);
            }
        }
        for (int i = 0; i < N; i++) acc1[i] = acc2[i] = (float)(uni() - 0.5);
        float w = (float)uni();
        P->axpy(acc1, g, w, N);
        S->axpy(acc2, g, w, N);
        same_floats(acc1, acc2, N, "axpy");
        act_values(a, N, mag);
        P->f32_to_bf16(a, N, h);
        S->f32_to_bf16(a, N, h2);
        ck_assert(memcmp(h, h2, sizeof h) == 0);
        P->bf16_to_f32(h, N, acc1);
        S->bf16_to_f32(h, N, acc2);
        same_floats(acc1, acc2, N, "bf16_to_f32");
    }
}
END_TEST

static Suite *simd_suite(void) {
    Suite *s = suite_create("simd");
    printf("fast kernels on this CPU: %s\n", moeq__kern_level(2)->name);
    for (int level = moeq__cpu_level() + 1; level <= 2; level++) {
        fprintf(stderr,
                "check_simd: no %s kernel table on this CPU or build; its "
                "SIMD-versus-portable cases check nothing\n",
                level == 2 ? "avx512" : "avx2");
    }
    for (int level = 1; level <= 2; level++) {
        TCase *tc = tcase_create(level == 1 ? "avx2" : "avx512");
        tcase_add_checked_fixture(tc, level == 1 ? level_avx2 : level_avx512, NULL);
        tcase_add_loop_test(tc, test_packed_kernels, 0, (int)(sizeof k_kinds / sizeof k_kinds[0]));
        tcase_add_test(tc, test_idot_extremes);
        tcase_add_test(tc, test_idot_blocks);
        tcase_add_test(tc, test_not_packed);
        tcase_add_test(tc, test_bf16_scaled_plan);
        tcase_add_test(tc, test_tile);
        tcase_add_test(tc, test_tile_bf16);
        tcase_add_test(tc, test_fdot);
        tcase_add_test(tc, test_activation_kernels);
        tcase_add_test(tc, test_elementwise_kernels);
        suite_add_tcase(s, tc);
    }
    return s;
}

MOEQ_TEST_MAIN(simd_suite)

/*
 * kern_portable.c - the fast kernels' table in portable C: the definition the
 * SIMD tables are tested against (the same results, bit for bit), and what
 * runs on CPUs without them.  Orders of summation are part of each kernel's
 * contract (kernels.h, moeq__kern).
 */
#include "kernels.h"

#include <math.h>

static void panel(const moeq__packed *pk, size_t blk, size_t k0, size_t nk, float *P) {
    for (size_t r = 0; r < MOEQ__PK_ROWS; r++) {
        const size_t row = blk * MOEQ__PK_ROWS + r;
        for (size_t k = k0; k < k0 + nk; k++) {
            P[(k - k0) * MOEQ__PK_ROWS + r] =
                moeq__pk_kv(pk, row, k) * moeq__pk_ks(pk, row, k / pk->gsize);
        }
    }
}

/* The scale gemv applies: ks, or for E4M3_DIV the undivided e4m3(b) * 2^-8. */
static float gemv_scale(const moeq__packed *pk, size_t row, size_t g) {
    if (pk->scale_kind != MOEQ__PS_E4M3_DIV) return moeq__pk_ks(pk, row, g);
    const uint8_t b = pk->scales[(row / 16) * pk->blk_scale_bytes + g * 16 + row % 16];
    return moeq__e4m3_to_f32(b) * 0x1p-8f * pk->scale_mul;
}

/* I4's scalings of the code and of x (kernels.h, gemv) */
static const float k_i4_up[4] = {1.0f, 16.0f, 256.0f, 4096.0f};
static const float k_i4_down[4] = {1.0f, 0x1p-4f, 0x1p-8f, 0x1p-12f};

static void gemv(const moeq__packed *pk, size_t blk, size_t M, const float *const *x, float *y,
                 size_t ldy) {
    const bool div = pk->scale_kind == MOEQ__PS_E4M3_DIV, i4 = pk->code == MOEQ__PK_I4;
    const size_t phases = M == 1 ? 4 : M == 2 ? 2 : 1;
    const float d = pk->gdiv * 0x1p-8f;
    for (size_t r = 0; r < MOEQ__PK_ROWS; r++) {
        const size_t row = blk * MOEQ__PK_ROWS + r;
        for (size_t m = 0; m < M; m++) {
            float tot = 0.0f;
            for (size_t g = 0; g < pk->groups; g++) {
                float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                for (size_t k = g * pk->gsize; k < (g + 1) * pk->gsize; k++) {
                    const float kv = moeq__pk_kv(pk, row, k);
                    if (i4) {
                        part[k % phases] =
                            fmaf((kv + 8.0f) * k_i4_up[k % 4], x[m][k], part[k % phases]);
                    } else {
                        part[k % phases] = fmaf(kv, x[m][k], part[k % phases]);
                    }
                }
                float sum;
                if (phases == 4) {
                    sum = (part[0] + part[1]) + (part[2] + part[3]);
                } else if (phases == 2) {
                    sum = part[0] + part[1];
                } else {
                    sum = part[0];
                }
                if (i4) sum = sum - 8.0f * x[m][pk->cols + g];
                tot = fmaf(sum, gemv_scale(pk, row, g), tot);
            }
            y[m * ldy + r] = div ? tot / d : tot;
        }
    }
}

static void i4_prep(const float *x, size_t cols, size_t gsize, float *out) {
    for (size_t g = 0; g * gsize < cols; g++) {
        float lane[8] = {0};
        for (size_t k = g * gsize; k < (g + 1) * gsize; k++) {
            lane[k % 8] += x[k];
            out[k] = x[k] * k_i4_down[k % 4];
        }
        out[cols + g] = ((lane[0] + lane[4]) + (lane[2] + lane[6])) +
                        ((lane[1] + lane[5]) + (lane[3] + lane[7]));
    }
}

static void tile(const float *P, size_t nk, size_t nb, size_t M, const float *const *x, float *C,
                 size_t ldc, int accumulate) {
    for (size_t i = 0; i < nb; i++) {
        const float *Pi = P + i * nk * MOEQ__PK_ROWS;
        for (size_t m = 0; m < M; m++) {
            for (size_t r = 0; r < MOEQ__PK_ROWS; r++) {
                float *c = C + m * ldc + i * MOEQ__PK_ROWS + r;
                float acc = accumulate ? *c : 0.0f;
                for (size_t k = 0; k < nk; k++) acc = fmaf(Pi[k * MOEQ__PK_ROWS + r], x[m][k], acc);
                *c = acc;
            }
        }
    }
}

static void panel_bf16(const moeq__packed *pk, size_t blk, size_t k0, size_t nk, uint16_t *Pb,
                       int scaled) {
    for (size_t r = 0; r < MOEQ__PK_ROWS; r++) {
        const size_t row = blk * MOEQ__PK_ROWS + r;
        for (size_t k = k0; k < k0 + nk; k++) {
            float v = moeq__pk_kv(pk, row, k);
            if (scaled) v = v * moeq__pk_ks(pk, row, k / pk->gsize);
            Pb[((k - k0) / 2) * 32 + 2 * r + (k - k0) % 2] = (uint16_t)(moeq__f32_bits(v) >> 16);
        }
    }
}

static float bf16_val(uint16_t h) {
    return moeq__bits_f32((uint32_t)h << 16);
}

static void tile_bf16(const uint16_t *Pb, size_t nk, size_t M, const uint16_t *const *x, float *C,
                      size_t ldc, int accumulate) {
    for (size_t m = 0; m < M; m++) {
        for (size_t r = 0; r < MOEQ__PK_ROWS; r++) {
            float ch[2] = {0.0f, 0.0f}; /* even and odd pairs */
            for (size_t p = 0; p < nk / 2; p++) {
                const uint16_t *w = Pb + p * 32 + 2 * r;
                ch[p % 2] = fmaf(bf16_val(w[1]), bf16_val(x[m][2 * p + 1]), ch[p % 2]);
                ch[p % 2] = fmaf(bf16_val(w[0]), bf16_val(x[m][2 * p]), ch[p % 2]);
            }
            const float S = ch[0] + ch[1];
            C[m * ldc + r] = accumulate ? C[m * ldc + r] + S : S;
        }
    }
}

/* gemv_bf16's code value: kv, or for I4 u = 1 + n/16 = (kv + 24) / 16 (exact) */
static float bf16_kv(const moeq__packed *pk, size_t row, size_t k, bool i4) {
    const float kv = moeq__pk_kv(pk, row, k);
    return i4 ? (kv + 24.0f) * 0.0625f : kv;
}

static void gemv_bf16(const moeq__packed *pk, size_t blk, size_t M, const uint16_t *const *x,
                      const float *const *xsum, float *y, size_t ldy) {
    const size_t nch = M == 1 ? 4 : 2;
    const bool i4 = pk->code == MOEQ__PK_I4;
    const float d = pk->gdiv * 0x1p-8f;
    for (size_t r = 0; r < MOEQ__PK_ROWS; r++) {
        const size_t row = blk * MOEQ__PK_ROWS + r;
        for (size_t m = 0; m < M; m++) {
            float tot = 0.0f;
            for (size_t g = 0; g < pk->groups; g++) {
                float ch[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                const size_t k0 = g * pk->gsize;
                for (size_t p = 0; p < pk->gsize / 2; p++) {
                    const size_t k = k0 + 2 * p;
                    float *c = &ch[p % nch];
                    *c = fmaf(bf16_kv(pk, row, k + 1, i4), bf16_val(x[m][k + 1]), *c);
                    *c = fmaf(bf16_kv(pk, row, k, i4), bf16_val(x[m][k]), *c);
                }
                float part = nch == 4 ? (ch[0] + ch[1]) + (ch[2] + ch[3]) : ch[0] + ch[1];
                if (i4) part = fmaf(-24.0f, xsum[m][g], 16.0f * part);
                tot = fmaf(part, gemv_scale(pk, row, g), tot);
            }
            y[m * ldy + r] = pk->scale_kind == MOEQ__PS_E4M3_DIV ? tot / d : tot;
        }
    }
}

static void idot(const moeq__packed *pk, size_t blk, size_t nb, size_t k0, size_t nk, size_t M,
                 const moeq__i8row *x, int32_t *C, size_t ldc, int accumulate) {
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *bc = pk->codes + (blk + i) * pk->blk_code_bytes;
        for (size_t m = 0; m < M; m++) {
            for (size_t r = 0; r < MOEQ__PK_ROWS; r++) {
                int32_t *c = C + m * ldc + 16 * i + r;
                int32_t acc = accumulate ? *c : 0;
                for (size_t k = k0; k < k0 + nk; k++) {
                    const int32_t q =
                        pk->code == MOEQ__PK_I8
                            ? (int32_t)(int8_t)bc[k * MOEQ__PK_ROWS + r]
                            : (int32_t)moeq__pk_kv(pk, (blk + i) * MOEQ__PK_ROWS + r, k);
                    acc += q * x[m].w[k];
                }
                *c = acc;
            }
        }
    }
}

static void fdot(const moeq__packed *pk, size_t blk, size_t nb, size_t M, const moeq__fp4row *x,
                 float *y, size_t ldy) {
    for (size_t m = 0; m < M; m++) {
        for (size_t r = 0; r < MOEQ__PK_ROWS * nb; r++) {
            const size_t row = blk * MOEQ__PK_ROWS + r;
            float acc = 0.0f;
            for (size_t g = 0; g < pk->groups; g++) {
                int32_t S = 0;
                for (size_t k = g * 16; k < g * 16 + 16; k++) {
                    S += (int32_t)(2.0f * moeq__pk_kv(pk, row, k)) * x[m].v[moeq__fp4_pos(k)];
                }
                acc = fmaf((float)S, gemv_scale(pk, row, g) * x[m].sc[g], acc);
            }
            y[m * ldy + r] = acc;
        }
    }
}

/* idot above runs its blocks one after the other. */
static size_t idot_blocks(int32_t code, size_t M) {
    (void)code;
    (void)M;
    return 1;
}

static void iscale(const moeq__packed *pk, size_t blk, size_t g, size_t M, const int32_t *S,
                   size_t lds, float *C, size_t ldc, int first) {
    for (size_t r = 0; r < MOEQ__PK_ROWS; r++) {
        const float ks = moeq__pk_ks(pk, blk * MOEQ__PK_ROWS + r, g);
        for (size_t m = 0; m < M; m++) {
            const float t = (float)S[m * lds + r] * ks;
            C[m * ldc + r] = first ? t : C[m * ldc + r] + t;
        }
    }
}

/* idot and iscale group by group (kernels.h). */
static void idot_groups(const moeq__packed *pk, size_t blk, size_t nb, size_t M,
                        const moeq__i8row *x, float *C, size_t ldc, int32_t *S, size_t lds) {
    moeq__idot_groups_by(idot, iscale, pk, blk, nb, M, x, C, ldc, S, lds);
}

static void fscale(const moeq__packed *pk, size_t blk, size_t g, size_t M, const float *S,
                   size_t lds, const float *const *xs, float *C, size_t ldc, int first) {
    for (size_t r = 0; r < MOEQ__PK_ROWS; r++) {
        const float ks = moeq__pk_ks(pk, blk * MOEQ__PK_ROWS + r, g);
        for (size_t m = 0; m < M; m++) {
            const float t = S[m * lds + r] * ks * (xs ? xs[m][g] : 1.0f);
            C[m * ldc + r] = first ? t : C[m * ldc + r] + t;
        }
    }
}

static float amax(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        if (a > m) m = a;
    }
    return m;
}

#define CHUNK 256

static void qdq_int8(const float *x, size_t n, float s, float *out) {
    int8_t q[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        const size_t len = n - i < CHUNK ? n - i : CHUNK;
        moeq__actq_int8_static_ref(x + i, len, s, 0, q);
        moeq__actdq_int8_ref(q, 1, len, &s, 0, len, NULL, out + i);
    }
}

static void q_int8(const float *x, size_t n, float s, int16_t *q) {
    int8_t c[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        const size_t len = n - i < CHUNK ? n - i : CHUNK;
        moeq__actq_int8_static_ref(x + i, len, s, 0, c);
        for (size_t j = 0; j < len; j++) q[i + j] = c[j];
    }
}

static void q_fp8_bf16(const float *x, size_t n, float s, uint16_t *b) {
    uint8_t q[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        const size_t len = n - i < CHUNK ? n - i : CHUNK;
        moeq__actq_fp8_static_ref(x + i, len, s, q);
        for (size_t j = 0; j < len; j++) {
            b[i + j] = (uint16_t)(moeq__f32_bits(moeq__e4m3_to_f32(q[j])) >> 16);
        }
    }
}

static void q_nvfp4(const float *x, size_t n, float gsc, int8_t *v, float *sc, int32_t *sum12) {
    uint8_t packed[CHUNK / 2], sf[CHUNK / 16];
    float e2m1[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        const size_t len = n - i < CHUNK ? n - i : CHUNK;
        moeq__actq_nvfp4_ref(x + i, 1, len, gsc, packed, sf);
        moeq__fp4_unpack_ref(packed, 0, len, e2m1);
        for (size_t g = 0; g < len / 16; g++) {
            int sum = 0;
            for (size_t c = g * 16; c < g * 16 + 16; c++) {
                const int8_t val = (int8_t)(2.0f * e2m1[c]);
                v[moeq__fp4_pos(i + c)] = val;
                sum += val;
            }
            sc[i / 16 + g] = moeq__e4m3_to_f32(sf[g]);
            sum12[i / 16 + g] = 12 * sum;
        }
    }
}

static void qdq_fp8(const float *x, size_t n, float s, float *out) {
    uint8_t q[CHUNK];
    for (size_t i = 0; i < n; i += CHUNK) {
        const size_t len = n - i < CHUNK ? n - i : CHUNK;
        moeq__actq_fp8_static_ref(x + i, len, s, q);
        moeq__actdq_fp8_ref(q, 1, len, &s, 0, len, out + i);
    }
}

static void qdq_nvfp4(const float *x, size_t n, float gsc, float *out) {
    uint8_t packed[CHUNK / 2], sf[CHUNK / 16];
    for (size_t i = 0; i < n; i += CHUNK) {
        const size_t len = n - i < CHUNK ? n - i : CHUNK;
        moeq__actq_nvfp4_ref(x + i, 1, len, gsc, packed, sf);
        moeq__actdq_nvfp4_ref(packed, 1, len, sf, gsc, out + i);
    }
}

static void silu_mul(const float *g, const float *u, float *a, size_t n, float limit) {
    for (size_t i = 0; i < n; i++) {
        float gi = g[i], ui = u[i];
        if (limit > 0) {
            gi = fminf(gi, limit);
            ui = fminf(fmaxf(ui, -limit), limit);
        }
        a[i] = gi / (1.0f + expf(-gi)) * ui;
    }
}

static void axpy(float *acc, const float *y, float w, size_t n) {
    for (size_t i = 0; i < n; i++) acc[i] += w * y[i];
}

static void bf16_to_f32(const uint16_t *src, size_t n, float *dst) {
    for (size_t i = 0; i < n; i++) dst[i] = moeq__bf16_to_f32(src[i]);
}

static void f32_to_bf16(const float *src, size_t n, uint16_t *dst) {
    for (size_t i = 0; i < n; i++) dst[i] = moeq__f32_to_bf16(src[i]);
}

const moeq__kern moeq__kern_portable = {
    .name = "portable",
    .panel = panel,
    .gemv = gemv,
    .i4_prep = i4_prep,
    .tile = tile,
    .tile_blocks = 1,
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

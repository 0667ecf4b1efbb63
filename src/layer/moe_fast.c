/*
 * moe_fast.c - the fast MoE forward (what moeq_moe_apply runs unless the
 * context pins the reference).  Same math as moe_apply.c's reference forward,
 * the same activation quantization (bit for bit), only sums in other orders:
 *
 *   bucket   the (token, k) pairs held here, grouped by expert (stable);
 *   prep     x -> f32 once per token (router weight on input folded in), the
 *            token's activation quantization when it does not depend on the
 *            expert (dynamic per token/group, static and per-tensor scales);
 *            NVFP4 inputs (a global scale per expert) get one row per pair;
 *   gemm1    work items (expert, 16-row blocks of I): gate and up of the
 *            block for every row of the expert, bias, the gated activation;
 *   quant    the activation quantization of the down inputs, per row;
 *   gemm2    work items (expert, 16-row blocks of H);
 *   combine  per token, its k outputs in k order, then routed scaling.
 * Unless the down inputs share one per-tensor scale (which needs every row
 * first), gemm1, quant and gemm2 are one step (step_gemms): the thread that
 * finishes an expert's last gemm1 item quantizes its rows, and its gemm2
 * items wait for that alone, not for every expert.
 *
 * Non-finite values follow moe_apply.c's rule: a token whose input row, or
 * one of whose down-projection inputs, holds a NaN or an infinity (or whose
 * result does) gets a row of NaN, and such tokens and rows are left out of
 * the per-tensor activation scales.
 *
 * Threads: the context's pool runs each step; work items are taken from an
 * atomic counter, rows and tokens are split in fixed ranges.  Every output
 * element is computed by one thread with a summation order fixed by the
 * shapes and the routing alone, so results are bit-identical for any thread
 * count.
 *
 * Projections use, per block of 16 output rows: for packed weights and up to
 * MOEQ__GEMV_MAX rows of an expert, the gemv kernel (codes decoded in
 * registers, once; for I4 codes it reads rows i4_prep makes once per work
 * item); for more rows, the weights of a 16 x KB panel are
 * dequantized to f32 once and one tile call runs all the rows over it (the
 * table tiles them); projections that could not be packed are dequantized by
 * moeq__dequant_ref into the same panels.  On the bfloat16 path (a
 * context's choice: by default CPUs with a fast AVX512_BF16), where
 * the inputs are bfloat16 values (bx: FP8 activation codes, or the bf16
 * input of a weight-only layer in gemm1) and an expert has more rows than
 * the gemv takes, the panel holds the weight codes as bfloat16 pairs
 * instead and tile_bf16 sums exact products (vdpbf16ps), scaled per group
 * afterwards; with fewer rows gemv_bf16 does the same in registers.
 * The int8 and NVFP4 activation paths are proj_block_int and proj_block_fp4.
 */
#include "layer/moe.h"
#include "common/pool.h"

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#ifdef MOEQ_FAST_PROFILE
#include <stdio.h>
#include <time.h>
static double prof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
#define PROF(name)                                                                                 \
    do {                                                                                           \
        double t_ = prof_now();                                                                    \
        fprintf(stderr, "  %-8s %8.3f ms\n", name, (t_ - prof_t) * 1e3);                           \
        prof_t = t_;                                                                               \
    } while (0)
#else
#define PROF(name) ((void)0)
#endif

#define KB 256 /* panel columns: 16 x 256 f32 = 16 KiB */

typedef struct item {
    int32_t e, b0, nb;
} item;

typedef struct fast {
    const moeq_moe *l;
    const moeq__kern *K;
    const moeq__apply_io *io;
    size_t T, k, H, I, E, rows, mmax, maxk;
    int32_t *starts;     /* [E + 1] */
    int32_t *order;      /* [rows]: row -> pair */
    int32_t *row_of;     /* [pairs]: pair -> row, or -1 */
    int32_t *row_expert; /* [rows] */
    uint8_t *used;       /* [T]: the token has a pair held here */
    uint8_t *bad;        /* [T]: the token's input row is not finite */
    uint8_t *row_bad;    /* [rows]: the row's token is bad, or its A row is not finite */
    float *xf;           /* [T, H] */
    float *X;            /* [rows, H] when per_row_x */
    float *A;            /* [rows, I] */
    float *Y;            /* [rows, H] */
    bool per_row_x;
    bool int8;           /* l->int8_dot: activations as codes, integer products */
    int16_t *xq, *aq;    /* int8: the codes of xf [T, H] and of A [rows, I] */
    int8_t *xq8, *aq8;   /* int8: the same codes as bytes */
    int32_t *xps, *aps;  /* int8: their prefix sums per 8 columns, [T][H/8 + 1], [rows][I/8 + 1] */
    bool fp8b;           /* FP8 activations (per token, tensor, static or group) on the
                            bfloat16 path: packed blocks take tile_bf16 or gemv_bf16 */
    bool bx;             /* gemm1's inputs as bfloat16 in xb: fp8b, or (bfloat16 path) a
                            weight-only layer's bf16 input (then packed blocks take tile_bf16
                            or gemv_bf16 in gemm1) */
    uint16_t *xb, *ab;   /* bx, fp8b: the codes of xf and of A as bfloat16, where xq, aq go */
    float *xs, *as;      /* int8, fp8b: their scales, [T][nxs] and [rows][nas] */
    size_t nxs, nas;     /* scales per row: 1, or per group (FP8_GROUP) H / group, I / group */
    bool fp4;            /* l->fp4_dot: NVFP4 activations as codes, fdot */
    int8_t *x4v, *a4v;   /* fp4: codes per row, [rows, H], [rows, I] */
    float *x4s, *a4s;    /* fp4: group scales, [rows, H / 16], [rows, I / 16] */
    int32_t *x4u, *a4u;  /* fp4: 12 x group sums, likewise */
    float ts1, ts2;
    float *partial; /* [threads] */
    const item *items;   /* step_gemms: [0, n_gemm1) gemm1's, [n_gemm1, n_items) gemm2's */
    size_t n_items, n_gemm1;
    atomic_int *left;    /* [E]: the expert's gemm1 items not done, then -1 once its down
                            inputs are quantized (or need not be, yet: !quant_inline) */
    bool quant_inline;   /* step_gemms quantizes an expert's down inputs after its gemm1 */
    atomic_size_t next;
    size_t chunk;   /* rows or tokens per grab in the row/token steps */
    int nt;         /* threads */
    uint8_t *tbase; /* per-thread scratch */
    size_t tstride;
} fast;

/* Per-thread scratch. */
typedef struct tscratch {
    float *P;               /* [MOEQ__TILE_BLOCKS][KB, 16]: panels */
    float *W16;             /* [16, maxk]: unpacked projections */
    float *Cg;              /* [mmax, 16 * MOEQ__IDOT_BLOCKS] */
    float *Cu;              /* [mmax, 16 * MOEQ__IDOT_BLOCKS] */
    const float **xr, **xo; /* [mmax] */
    moeq__i8row *xc;        /* [mmax]: int8 path, rows of codes */
    const uint16_t **xb;    /* [mmax]: bfloat16 path, rows of bfloat16 inputs */
    const uint16_t **xbo;   /* [mmax]: the same rows at a panel's first column */
    const float **xbs;      /* [mmax]: fp8b, the rows' scales (one, or one per group) */
    int32_t *Ci;            /* [mmax, 16 * MOEQ__IDOT_BLOCKS]: int8 path, integer sums */
    float *Sg;              /* bfloat16 path: one scale group's sums, in Ci's memory */
    float *xsc;             /* [mmax]: int8 path, the rows' activation scales */
    moeq__fp4row *f4;       /* [mmax]: fp4 path, the rows' codes */
    float *xp;              /* [2][MOEQ__GEMV_MAX][maxk + maxk / 8]: rows made by i4_prep */
    float *ybuf;            /* [H] */
    const float **yk;       /* [k]: a token's output rows, for the combine */
    void *codes;            /* activation codes for the reference quantizers */
    float *scales;
} tscratch;

static size_t up64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

/* Floats of one prepared row: the columns, then at most one sum per 8 of them. */
static size_t xp_stride(const fast *f) {
    return f->maxk + f->maxk / 8;
}

static size_t tscratch_size(const fast *f) {
    size_t maxk = f->maxk;
    return up64(MOEQ__TILE_BLOCKS * KB * 16 * sizeof(float)) +
           (f->l->all_packed ? 0 : up64(16 * maxk * sizeof(float))) +
           2 * up64(f->mmax * 16 * MOEQ__IDOT_BLOCKS * sizeof(float)) +
           5 * up64(f->mmax * sizeof(float *)) + up64(f->mmax * sizeof(moeq__i8row)) +
           up64(f->mmax * 16 * MOEQ__IDOT_BLOCKS * sizeof(int32_t)) +
           up64(f->mmax * sizeof(float)) +
           up64(f->mmax * sizeof(moeq__fp4row)) +
           up64(2 * MOEQ__GEMV_MAX * xp_stride(f) * sizeof(float)) +
           up64(f->H * sizeof(float)) + up64(f->k * sizeof(float *)) +
           up64(moeq__act_codes_bound(1, maxk)) +
           up64((maxk + 2) * sizeof(float));
}

static tscratch tscratch_get(const fast *f, int tid) {
    uint8_t *p = f->tbase + (size_t)tid * f->tstride;
    tscratch t;
    t.P = (float *)(void *)p;
    p += up64(MOEQ__TILE_BLOCKS * KB * 16 * sizeof(float));
    t.W16 = NULL;
    if (!f->l->all_packed) {
        t.W16 = (float *)(void *)p;
        p += up64(16 * f->maxk * sizeof(float));
    }
    t.Cg = (float *)(void *)p;
    p += up64(f->mmax * 16 * MOEQ__IDOT_BLOCKS * sizeof(float));
    t.Cu = (float *)(void *)p;
    p += up64(f->mmax * 16 * MOEQ__IDOT_BLOCKS * sizeof(float));
    t.xr = (const float **)(void *)p;
    p += up64(f->mmax * sizeof(float *));
    t.xo = (const float **)(void *)p;
    p += up64(f->mmax * sizeof(float *));
    t.xc = (moeq__i8row *)(void *)p;
    p += up64(f->mmax * sizeof(moeq__i8row));
    t.xb = (const uint16_t **)(void *)p;
    p += up64(f->mmax * sizeof(float *));
    t.xbo = (const uint16_t **)(void *)p;
    p += up64(f->mmax * sizeof(float *));
    t.xbs = (const float **)(void *)p;
    p += up64(f->mmax * sizeof(float *));
    t.Ci = (int32_t *)(void *)p;
    t.Sg = (float *)(void *)p; /* the int8 and bfloat16 paths never meet */
    p += up64(f->mmax * 16 * MOEQ__IDOT_BLOCKS * sizeof(int32_t));
    t.xsc = (float *)(void *)p;
    p += up64(f->mmax * sizeof(float));
    t.f4 = (moeq__fp4row *)(void *)p;
    p += up64(f->mmax * sizeof(moeq__fp4row));
    t.xp = (float *)(void *)p;
    p += up64(2 * MOEQ__GEMV_MAX * xp_stride(f) * sizeof(float));
    t.ybuf = (float *)(void *)p;
    p += up64(f->H * sizeof(float));
    t.yk = (const float **)(void *)p;
    p += up64(f->k * sizeof(float *));
    t.codes = p;
    p += up64(moeq__act_codes_bound(1, f->maxk));
    t.scales = (float *)(void *)p;
    return t;
}

/* The next range of a row or token step: threads take chunks from a shared
 * counter (a thread the system holds back does not hold the others up). */
static bool next_range(fast *f, size_t n, size_t *a, size_t *b) {
    size_t chunk = f->chunk;
    size_t i = atomic_fetch_add_explicit(&f->next, 1, memory_order_relaxed) * chunk;
    if (i >= n) return false;
    *a = i;
    *b = n - i < chunk ? n : i + chunk;
    return true;
}

/* ---- activation quantization of one row ---------------------------------------------- */

static void qdq_row(const fast *f, const tscratch *t, float *v, size_t n, float act_scale,
                    float tensor_scale) {
    const moeq__kern *K = f->K;
    const moeq_moe *l = f->l;
    switch (l->act_kind) {
        case MOEQ__ACT_NONE: return;
        case MOEQ__ACT_INT8_TOKEN: {
            float am = K->amax(v, n);
            K->qdq_int8(v, n, (am > MOEQ__ACT_INT8_EPS ? am : MOEQ__ACT_INT8_EPS) / 127.0f, v);
            return;
        }
        case MOEQ__ACT_INT8_TENSOR: K->qdq_int8(v, n, tensor_scale, v); return;
        case MOEQ__ACT_INT8_STATIC: K->qdq_int8(v, n, act_scale, v); return;
        case MOEQ__ACT_FP8_TOKEN: {
            float am = K->amax(v, n);
            K->qdq_fp8(v, n, (am > MOEQ__ACT_FP8_EPS ? am : MOEQ__ACT_FP8_EPS) / MOEQ__E4M3_MAX, v);
            return;
        }
        case MOEQ__ACT_FP8_TENSOR: K->qdq_fp8(v, n, tensor_scale, v); return;
        case MOEQ__ACT_FP8_STATIC: K->qdq_fp8(v, n, act_scale, v); return;
        case MOEQ__ACT_FP8_GROUP: {
            size_t gs = (size_t)l->act_group;
            for (size_t c0 = 0; c0 < n; c0 += gs) {
                size_t len = n - c0 < gs ? n - c0 : gs;
                float am = K->amax(v + c0, len);
                float s =
                    (am > MOEQ__ACT_FP8_GROUP_EPS ? am : MOEQ__ACT_FP8_GROUP_EPS) / MOEQ__E4M3_MAX;
                K->qdq_fp8(v + c0, len, s, v + c0);
            }
            return;
        }
        case MOEQ__ACT_MXFP8:
            /* Per group of 32: an E8M0 scale s from the group's amax, then
             * e4m3(x / s) * s, as moeq__actq_mxfp8_ref and _actdq_ do (s is
             * a power of two, so qdq_fp8's division and product are theirs). */
            for (size_t c0 = 0; c0 < n; c0 += 32) {
                size_t len = n - c0 < 32 ? n - c0 : 32;
                float s = moeq__e8m0_to_f32(moeq__mx_scale_byte_ref(K->amax(v + c0, len), 8));
                K->qdq_fp8(v + c0, len, s, v + c0);
            }
            return;
        case MOEQ__ACT_NVFP4:
            if (n % 16 == 0) {
                K->qdq_nvfp4(v, n, act_scale, v);
                return;
            }
            break;
        default: break;
    }
    moeq__act_quant_rows(l->act_kind, l->act_group, v, 1, n, tensor_scale, act_scale, t->codes,
                         t->scales);
}

/* The int8 path's quantization of one row: its codes in q, its scale in *s
 * (the same codes and scale as qdq_row, which multiplies them back). */
static void code_row(const fast *f, const float *v, size_t n, float act_scale, float tensor_scale,
                     int16_t *q, float *s) {
    float sc;
    if (f->l->act_kind == MOEQ__ACT_INT8_TOKEN) {
        float am = f->K->amax(v, n);
        sc = (am > MOEQ__ACT_INT8_EPS ? am : MOEQ__ACT_INT8_EPS) / 127.0f;
    } else {
        sc = f->l->act_kind == MOEQ__ACT_INT8_TENSOR ? tensor_scale : act_scale;
    }
    f->K->q_int8(v, n, sc, q);
    *s = sc;
}

/* The fp8b codes of one row (bfloat16 of each E4M3 value) and its scale, or
 * its groups' scales, in s; then v becomes what qdq_row makes of it, each
 * code's value times its scale (the same product qdq_fp8 rounds: check_simd
 * compares them bit for bit), so the row is quantized once.  A bad row (its
 * output is NaN whatever they are) gets zero codes, so that nothing reads
 * memory no step wrote, and v is left alone. */
static void code_row_fp8(const fast *f, float *v, size_t n, float act_scale, float tensor_scale,
                         uint16_t *b, float *s, bool bad) {
    const int32_t kind = f->l->act_kind;
    const size_t gs = kind == MOEQ__ACT_FP8_GROUP ? (size_t)f->l->act_group : n;
    for (size_t c0 = 0; c0 < n; c0 += gs) {
        const size_t len = n - c0 < gs ? n - c0 : gs;
        float sc;
        if (bad) {
            memset(b + c0, 0, len * sizeof *b);
            s[c0 / gs] = 0.0f;
            continue;
        }
        if (kind == MOEQ__ACT_FP8_TOKEN || kind == MOEQ__ACT_FP8_GROUP) {
            const float eps = kind == MOEQ__ACT_FP8_TOKEN ? MOEQ__ACT_FP8_EPS
                                                          : MOEQ__ACT_FP8_GROUP_EPS;
            float am = f->K->amax(v + c0, len);
            sc = (am > eps ? am : eps) / MOEQ__E4M3_MAX;
        } else {
            sc = kind == MOEQ__ACT_FP8_TENSOR ? tensor_scale : act_scale;
        }
        f->K->q_fp8_bf16(v + c0, len, sc, b + c0);
        s[c0 / gs] = sc;
        f->K->bf16_to_f32(b + c0, len, v + c0);
        for (size_t i = c0; i < c0 + len; i++) v[i] = v[i] * sc;
    }
}

/* Row r of an fp4 code set (v, s, u with n columns per row). */
static moeq__fp4row fp4_row(int8_t *v, float *s, int32_t *u, size_t n, size_t r) {
    moeq__fp4row x = {v + r * n, s + r * (n / 16), u + r * (n / 16)};
    return x;
}

/* The fp4 path's quantization of row r (gsc: the global scale), or for a
 * bad row zeros (its output is NaN whatever they are; nothing reads memory
 * no step wrote). */
static void code_row_fp4(const fast *f, const float *x, size_t n, float gsc, int8_t *v, float *s,
                         int32_t *u, size_t r, bool bad) {
    if (bad) {
        memset(v + r * n, 0, n);
        memset(s + r * (n / 16), 0, n / 16 * sizeof(float));
        memset(u + r * (n / 16), 0, n / 16 * sizeof(int32_t));
        return;
    }
    f->K->q_nvfp4(x, n, gsc, v + r * n, s + r * (n / 16), u + r * (n / 16));
}

/* A bad row's codes (its output is NaN whatever they are): zeros, so that
 * nothing reads memory no step wrote. */
static void zero_codes(int16_t *q, size_t n, float *s) {
    memset(q, 0, n * sizeof *q);
    *s = 0.0f;
}

/* Row r of the int8 path's codes: of the tokens (down false: xq, H columns)
 * or of the down inputs (aq, I columns), as idot reads it. */
static moeq__i8row codes_of(const fast *f, bool down, size_t r) {
    const size_t n = down ? f->I : f->H;
    const moeq__i8row x = {(down ? f->aq : f->xq) + r * n, (down ? f->aq8 : f->xq8) + r * n,
                           (down ? f->aps : f->xps) + r * (n / 8 + 1)};
    return x;
}

/* Once row r's codes are written: their bytes and prefix sums, made here
 * once for every block idot runs them against. */
static void codes_done(const fast *f, bool down, size_t r) {
    const size_t n = down ? f->I : f->H;
    moeq__i8row_fill((down ? f->aq : f->xq) + r * n, n, (down ? f->aq8 : f->xq8) + r * n,
                     (down ? f->aps : f->xps) + r * (n / 8 + 1));
}

static bool all_finite(const float *x, size_t n) {
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= fabsf(x[i]) <= 3.4028235e38f; /* false for NaN */
    return ok;
}

static bool tensor_kind(int32_t kind) {
    return kind == MOEQ__ACT_INT8_TENSOR || kind == MOEQ__ACT_FP8_TENSOR;
}

static float tensor_scale(int32_t kind, float amax) {
    if (kind == MOEQ__ACT_INT8_TENSOR) return fmaxf(amax, MOEQ__ACT_INT8_EPS) / 127.0f;
    return fmaxf(amax, MOEQ__ACT_FP8_EPS) / MOEQ__E4M3_MAX;
}

/* ---- one 16-row block of a projection ---------------------------------------------- */

/* Scale groups narrower than this keep the float path unless the panels can
 * hold scaled values (scaled_panels): each group's sums need their own
 * tile_bf16 calls and scaling, and with groups of 32 columns (w4a16_mxfp4,
 * T=512, calls alternating) the layer took 1.04-1.05x the float path's time,
 * against 0.79x for groups of 128 (wna16). */
#define BF16_MIN_GROUP 128

static bool grouped_fp8(const fast *f) {
    return f->fp8b && f->l->act_kind == MOEQ__ACT_FP8_GROUP;
}

/* Whether pj's bfloat16 panels hold kv * ks (exact: E8M0 scales in range,
 * pk.bf16_scaled) and its tiles run over all columns at once, as one group
 * of scale 1.  Not with per-group activation scales, which multiply each
 * group's sum. */
static bool scaled_panels(const fast *f, const moeq__proj *pj) {
    return pj->pk.bf16_scaled && !grouped_fp8(f);
}

/* Whether the bfloat16 block serves pj, given bfloat16 rows (codes): packed
 * codes of any kind (every packed code value is a bfloat16) in groups of at
 * least BF16_MIN_GROUP columns (or one group) or with scaled panels, with
 * per-group activation scales only on the weight's own groups. */
static bool bf16_block(const fast *f, const moeq__proj *pj, bool codes) {
    if (!codes || pj->w.kind != MOEQ__QW_PACKED) return false;
    if (scaled_panels(f, pj)) return true;
    if (pj->pk.groups > 1 && pj->pk.gsize < BF16_MIN_GROUP) return false;
    return !grouped_fp8(f) || (size_t)f->l->act_group == pj->pk.gsize;
}

/* A weight-only layer's bf16 input row as tile_bf16 reads it: the same
 * values, but magnitudes below 2^-100 as +0 (then every product of a code
 * value, a multiple of 2^-17, and an input is a multiple of 2^-124, and no
 * sum is subnormal: vdpbf16ps flushes subnormals, the FMAs of the other
 * tables would not), and a bad row all zeros (its output is NaN anyway). */
static void bf16_input_row(const uint16_t *src, size_t n, bool bad, uint16_t *dst) {
    for (size_t i = 0; i < n; i++) {
        const uint16_t u = src[i];
        dst[i] = bad || (u & 0x7FFFu) < 0x0D80u ? 0 : u; /* 0x0D80: 2^-100 */
    }
}

/* FP8 rows (one scale each) on the bfloat16 path: C[m*16 + r] *= xs[m] for m < M. */
static void times_row_scale(const fast *f, const tscratch *t, size_t M, float *C) {
    if (!f->fp8b || grouped_fp8(f)) return;
    for (size_t m = 0; m < M; m++) {
        const float s = t->xbs[m][0]; /* a local: the loop vectorizes */
        for (size_t r = 0; r < 16; r++) C[m * 16 + r] *= s;
    }
}

/* The bfloat16 block (more than MOEQ__GEMV_MAX rows, bf16_block): with
 * S(m, r, g) a scale group's sum of products of code values and inputs
 * (exact products summed in float32 by tile_bf16 over bfloat16 panels of up
 * to KB columns), C[m*16 + r] = sum_g ks(r, g) * S(m, r, g), the groups'
 * terms added in group order (products, then a sum), as the int8 path does;
 * for FP8 activations times xs[m] at the end, or with per-group activation
 * scales each term times xs[m][g].  With scaled panels (kv * ks) the whole
 * row is one sum, C = S.  A token's result does not depend on M. */
static void proj_block_bf16(const fast *f, const tscratch *t, const moeq__proj *pj, size_t b,
                            size_t M, float *C) {
    const bool grouped = grouped_fp8(f), scaled = scaled_panels(f, pj);
    const moeq__packed *pk = &pj->pk;
    const size_t groups = scaled ? 1 : pk->groups, gsize = scaled ? pk->cols : pk->gsize;
    uint16_t *Pb = (uint16_t *)(void *)t->P; /* KB x 16 bfloat16: half of P */
    float *S = scaled ? C : t->Sg; /* scaled: the sums are the result */
    for (size_t g = 0; g < groups; g++) {
        const size_t g0 = g * gsize, g1 = g0 + gsize;
        for (size_t k0 = g0; k0 < g1; k0 += KB) {
            const size_t nk = g1 - k0 < KB ? g1 - k0 : KB;
            /* it fetches the next panel's codes */
            f->K->panel_bf16(pk, b, k0, nk, Pb, scaled);
            for (size_t m = 0; m < M; m++) t->xbo[m] = t->xb[m] + k0;
            f->K->tile_bf16(Pb, nk, M, t->xbo, S, 16, k0 > g0);
        }
        if (scaled) continue;
        f->K->fscale(pk, b, g, M, S, 16, grouped ? t->xbs : NULL, C, 16, g == 0);
    }
    times_row_scale(f, t, M, C);
}

/* Whether gemv_bf16 serves pj's blocks for up to MOEQ__GEMV_MAX rows, given
 * bfloat16 rows (codes, which exist only on the bfloat16 path:
 * vdpbf16ps halves the gemv's operations per weight, while its emulation in
 * FMAs ran at 0.5-0.9x the float gemv's rate; kern_bench, avx2 table, hot).
 * Activation scales per group (FP8_GROUP) stay on the float gemv: its rows
 * hold them already. */
static bool gemv_bf16_block(const fast *f, const moeq__proj *pj, bool codes) {
    return codes && pj->w.kind == MOEQ__QW_PACKED && !grouped_fp8(f);
}

/* What the gemv kernels read per row for pj besides the codes: for I4 codes
 * on the float gemv the rows i4_prep makes of xr, on gemv_bf16 (codes:
 * t->xb holds the rows as bfloat16) the rows' group sums
 * (moeq__bf16_group_sums), in buf (slot 0 or 1 of the thread's xp), pointed
 * to by out; else xr itself.  Made once per work item, they serve all its
 * blocks. */
static const float *const *gemv_rows(const fast *f, const tscratch *t, const moeq__proj *pj,
                                     size_t M, const float *const *xr, bool codes, int slot,
                                     const float **out) {
    const moeq__packed *pk = &pj->pk;
    if (pj->w.kind != MOEQ__QW_PACKED || pk->code != MOEQ__PK_I4 || M > MOEQ__GEMV_MAX) return xr;
    const bool sums = gemv_bf16_block(f, pj, codes);
    float *buf = t->xp + (size_t)slot * MOEQ__GEMV_MAX * xp_stride(f);
    for (size_t m = 0; m < M; m++) {
        out[m] = buf + m * xp_stride(f);
        if (sums) {
            moeq__bf16_group_sums(t->xb[m], pk->cols, pk->gsize, buf + m * xp_stride(f));
        } else {
            f->K->i4_prep(xr[m], pk->cols, pk->gsize, buf + m * xp_stride(f));
        }
    }
    return out;
}

/* C[m*16 nb + 16 i + r] = x_m . w[(b + i)*16 + r] for m < M, i < nb (rows
 * past the weight: anything); nb > 1 only where blocks_per_call says; xg: what
 * the gemv kernels read per row (gemv_rows); codes: t->xb holds the rows as
 * bfloat16 too. */
static void proj_block(const fast *f, const tscratch *t, const moeq__proj *pj, size_t b, size_t nb,
                       size_t M, const float *const *xr, const float *const *xg, float *C,
                       bool codes) {
    const moeq__kern *K = f->K;
    const moeq__qweight *w = &pj->w;
    const size_t cols = w->cols;
    if (w->kind == MOEQ__QW_PACKED && M <= MOEQ__GEMV_MAX) {
        if (!gemv_bf16_block(f, pj, codes)) {
            K->gemv(&pj->pk, b, M, xg, C, 16);
            return;
        }
        K->gemv_bf16(&pj->pk, b, M, t->xb, xg, C, 16);
        times_row_scale(f, t, M, C);
        return;
    }
    if (bf16_block(f, pj, codes)) {
        proj_block_bf16(f, t, pj, b, M, C);
        return;
    }
    if (w->kind != MOEQ__QW_PACKED) {
        size_t r0 = b * 16, nr = w->rows - r0 < 16 ? w->rows - r0 : 16;
        moeq__dequant_ref(w, r0, nr, t->W16);
        memset(t->W16 + nr * cols, 0, (16 - nr) * cols * sizeof(float));
    }
    for (size_t k0 = 0; k0 < cols; k0 += KB) {
        size_t nk = cols - k0 < KB ? cols - k0 : KB;
        if (w->kind == MOEQ__QW_PACKED) {
            for (size_t i = 0; i < nb; i++) { /* each fetches its next panel's codes */
                K->panel(&pj->pk, b + i, k0, nk, t->P + i * nk * 16);
            }
        } else {
            for (size_t k = 0; k < nk; k++) {
                for (size_t r = 0; r < 16; r++) t->P[k * 16 + r] = t->W16[r * cols + k0 + k];
            }
        }
        for (size_t m = 0; m < M; m++) t->xo[m] = xr[m] + k0;
        K->tile(t->P, nk, nb, M, t->xo, C, 16 * nb, k0 > 0);
    }
}

/* The int8 path's blocks b .. b + nb - 1 (nb <= MOEQ__IDOT_BLOCKS):
 * C[m*16 nb + 16 i + r] = sum_g ks(r, g) * S(m, r, g) for block b + i,
 * with S the exact integer sum of one scale group's code products, the
 * groups' terms added in group order (kernels.h, idot_groups; each table
 * walks the groups and windows as its kernels need).  Nothing depends on
 * M, nb or the tiling: a token's result is the same whatever it is batched
 * with. */
static void proj_block_int(const fast *f, const tscratch *t, const moeq__proj *pj, size_t b,
                           size_t nb, size_t M, const moeq__i8row *xc, float *C) {
    f->K->idot_groups(&pj->pk, b, nb, M, xc, C, 16 * nb, t->Ci, 16 * nb);
}

/* A block's outputs, y[r] = c[r] for r < n (n <= 32), copied 64 bytes at a
 * time: fixed-size copies compile to vector moves, where GCC inlines a
 * memcpy of n floats as `rep movsq`, whose start-up cost (with the int8
 * path's scalar scaling loop, below) was about a tenth of the w8a8_int8
 * layer's time at T=2048 on Zen 5. */
static void copy_out(float *restrict y, const float *restrict c, size_t n) {
    size_t r = 0;
    for (; r + 16 <= n; r += 16) memcpy(y + r, c + r, 16 * sizeof(float));
    for (; r < n; r++) y[r] = c[r];
}

/* The int8 path's sums (proj_block_int's C) times their row's activation
 * scale: in place for gate and up; for down as they are copied out, y[r] =
 * c[r] * xsc (+ bias[r]) for r < n.  Loops GCC vectorizes at -O2 (its
 * "very cheap" cost model takes no loop with a scalar tail: hence whole
 * vectors of 16 first). */
static void times_xsc(float *C, const float *xsc, size_t M, size_t ld) {
    for (size_t m = 0; m < M; m++) {
        const float s = xsc[m];
        float *c = C + m * ld;
        for (size_t r = 0; r < ld; r++) c[r] *= s;
    }
}
static void times_xsc_out(float *restrict y, const float *restrict c, float xsc,
                          const float *restrict bias, size_t n) {
    size_t r = 0;
    if (bias) {
        for (; r + 16 <= n; r += 16) {
            for (size_t j = r; j < r + 16; j++) y[j] = c[j] * xsc + bias[j];
        }
        for (; r < n; r++) y[r] = c[r] * xsc + bias[r];
    } else {
        for (; r + 16 <= n; r += 16) {
            for (size_t j = r; j < r + 16; j++) y[j] = c[j] * xsc;
        }
        for (; r < n; r++) y[r] = c[r] * xsc;
    }
}

/* The fp4 path's blocks b .. b + nb - 1 (nb <= MOEQ__FDOT_BLOCKS), C[m*16 nb
 * + 16 i + r]: fdot's sums divided by gdiv * 2^-8 * 4 * the activations'
 * global scale (kernels.h, fdot); as for the int8 path, a token's result
 * does not depend on M or nb. */
static void proj_block_fp4(const fast *f, const moeq__proj *pj, size_t b, size_t nb, size_t M,
                           const moeq__fp4row *x, float *C) {
    const moeq__packed *pk = &pj->pk;
    for (size_t i = 0; i < nb && M > 1; i++) moeq__pk_fetch_cols(pk, b + nb + i, 0, 2 * KB);
    f->K->fdot(pk, b, nb, M, x, C, 16 * nb);
    const float d = pk->gdiv * 0x1p-8f * 4.0f * pj->act_scale;
    for (size_t i = 0; i < M * 16 * nb; i++) C[i] = C[i] / d;
}

/* Blocks per work item for an expert's M rows (more than MOEQ__GEMV_MAX):
 * the int8 path's two (MOEQ__IDOT_BLOCKS), the fp4 path's two, the float
 * tile's two (MOEQ__TILE_BLOCKS).  The scratch's Cg, Cu and Ci hold
 * 16 * MOEQ__IDOT_BLOCKS columns a row. */
_Static_assert(MOEQ__FDOT_BLOCKS <= MOEQ__IDOT_BLOCKS, "fdot's blocks fit the scratch");
_Static_assert(MOEQ__TILE_BLOCKS <= MOEQ__IDOT_BLOCKS, "tile's blocks fit the scratch");
static int32_t item_blocks(const fast *f, size_t M) {
    if (f->int8) return MOEQ__IDOT_BLOCKS;
    if (M <= MOEQ__GEMV_MAX) return 1;
    return f->fp4 ? MOEQ__FDOT_BLOCKS : MOEQ__TILE_BLOCKS;
}

/* Blocks per kernel call on pj: idot as many as the table runs side by side
 * (idot_blocks), fdot two for more than MOEQ__GEMV_MAX rows (with fewer,
 * the AVX2 fdot runs its blocks one at a time anyway: kern_avx2.c,
 * FDOT_PAIR_M), the float tile on packed codes as many as the table runs
 * in one pass (tile_blocks: the avx512 table's two, each token's broadcast
 * serving both blocks' FMAs), the others (gemv, the bfloat16 path,
 * unpacked weights) one.  codes: the rows are bfloat16 too (proj_block's). */
static int32_t blocks_per_call(const fast *f, const moeq__proj *pj, size_t M, bool codes) {
    if (f->int8) return (int32_t)f->K->idot_blocks(pj->pk.code, M);
    if (f->fp4) return item_blocks(f, M);
    if (M <= MOEQ__GEMV_MAX || pj->w.kind != MOEQ__QW_PACKED || bf16_block(f, pj, codes)) return 1;
    return f->K->tile_blocks ? (int32_t)f->K->tile_blocks : 1; /* 0: the table does not say */
}

/* ---- the steps ---------------------------------------------------------------------- */

/* x -> f32 per token (times the router weight on input), the expert-independent
 * activation quantization, partial amax for the per-tensor kinds. */
static void step_tokens(void *arg, int tid, int nt) {
    fast *f = arg;
    const moeq_moe *l = f->l;
    const moeq__apply_io *io = f->io;
    tscratch t = tscratch_get(f, tid);
    (void)nt;
    size_t a, b;
    size_t esz = moeq_dtype_size(io->x_dtype);
    float am = 0.0f;
    bool local_quant = !f->per_row_x && !tensor_kind(l->act_kind);
    while (next_range(f, f->T, &a, &b))
        for (size_t tok = a; tok < b; tok++) {
            float *row = f->xf + tok * f->H;
            const void *src = (const uint8_t *)io->x + tok * f->H * esz;
            if (io->x_dtype == MOEQ_DTYPE_BF16) {
                f->K->bf16_to_f32(src, f->H, row);
            } else {
                moeq__to_f32_ref(io->x_dtype, src, f->H, row);
            }
            f->bad[tok] = !all_finite(row, f->H);
            if (f->int8 && f->bad[tok]) {
                zero_codes(f->xq + tok * f->H, f->H, &f->xs[tok]);
                codes_done(f, false, tok);
            }
            if (f->fp8b && f->bad[tok]) {
                code_row_fp8(f, row, f->H, 0, 0, f->xb + tok * f->H, f->xs + tok * f->nxs, true);
            }
            if (f->bx && !f->fp8b && f->used[tok]) {
                bf16_input_row(src, f->H, f->bad[tok], f->xb + tok * f->H);
            }
            if (!f->used[tok] || f->bad[tok]) continue; /* a bad token's output is NaN */
            if (l->cfg.apply_router_weight_on_input) {  /* top_k == 1 */
                float s = io->weights[tok];
                for (size_t h = 0; h < f->H; h++) row[h] = row[h] * s;
            }
            if (local_quant && f->int8) {
                code_row(f, row, f->H, l->projs[0].act_scale, 1.0f, f->xq + tok * f->H,
                         &f->xs[tok]);
                codes_done(f, false, tok);
            } else if (local_quant) {
                if (f->fp8b) {
                    code_row_fp8(f, row, f->H, l->projs[0].act_scale, 1.0f, f->xb + tok * f->H,
                                 f->xs + tok * f->nxs, false);
                } else {
                    qdq_row(f, &t, row, f->H, l->projs[0].act_scale, 1.0f);
                }
            } else if (tensor_kind(l->act_kind)) {
                float m = f->K->amax(row, f->H);
                am = m > am ? m : am;
            }
        }
    f->partial[tid] = am;
}

/* A linear layer's tokens (l->linear): x [T, I] -> f32 straight into the rows
 * of A (row r is token r), which the down projection's steps then quantize
 * and multiply as they do an expert's activations. */
static void step_linear_in(void *arg, int tid, int nt) {
    fast *f = arg;
    const moeq__apply_io *io = f->io;
    (void)tid;
    (void)nt;
    size_t a, b;
    size_t esz = moeq_dtype_size(io->x_dtype);
    while (next_range(f, f->T, &a, &b))
        for (size_t tok = a; tok < b; tok++) {
            float *row = f->A + tok * f->I;
            const void *src = (const uint8_t *)io->x + tok * f->I * esz;
            if (io->x_dtype == MOEQ_DTYPE_BF16) {
                f->K->bf16_to_f32(src, f->I, row);
            } else {
                moeq__to_f32_ref(io->x_dtype, src, f->I, row);
            }
            f->bad[tok] = !all_finite(row, f->I);
        }
}

/* The per-tensor quantization of the tokens, or NVFP4 rows per pair. */
static void step_tokens2(void *arg, int tid, int nt) {
    fast *f = arg;
    const moeq_moe *l = f->l;
    tscratch t = tscratch_get(f, tid);
    (void)nt;
    size_t a, b;
    if (f->per_row_x) {
        while (next_range(f, f->rows, &a, &b))
            for (size_t r = a; r < b; r++) {
                size_t tok = (size_t)f->order[r] / f->k;
                const moeq__proj *pg = &l->projs[f->row_expert[r] * 3];
                if (f->fp4) {
                    code_row_fp4(f, f->xf + tok * f->H, f->H, pg->act_scale, f->x4v, f->x4s,
                                 f->x4u, r, f->bad[tok]);
                    continue;
                }
                float *dst = f->X + r * f->H;
                memcpy(dst, f->xf + tok * f->H, f->H * sizeof(float));
                if (f->bad[tok]) continue;
                qdq_row(f, &t, dst, f->H, pg->act_scale, f->ts1);
            }
        return;
    }
    while (next_range(f, f->T, &a, &b)) {
        for (size_t tok = a; tok < b; tok++) {
            if (!f->used[tok] || f->bad[tok]) continue;
            if (f->int8) {
                code_row(f, f->xf + tok * f->H, f->H, 1.0f, f->ts1, f->xq + tok * f->H,
                         &f->xs[tok]);
                codes_done(f, false, tok);
            } else {
                if (f->fp8b) {
                    code_row_fp8(f, f->xf + tok * f->H, f->H, 1.0f, f->ts1, f->xb + tok * f->H,
                                 f->xs + tok * f->nxs, false);
                } else {
                    qdq_row(f, &t, f->xf + tok * f->H, f->H, 1.0f, f->ts1);
                }
            }
        }
    }
}

/* C = blocks b .. b + nb - 1 of pj for the item's M rows, C[m*16 nb + j]
 * (nb as blocks_per_call says), by the layer's path (xg: what the gemv
 * kernels read per row for pj, gemv_rows). */
static void block_out(const fast *f, const tscratch *t, const moeq__proj *pj, size_t b, size_t nb,
                      size_t M, const float *const *xg, float *C) {
    if (f->int8) {
        proj_block_int(f, t, pj, b, nb, M, t->xc, C);
        times_xsc(C, t->xsc, M, 16 * nb);
    } else if (f->fp4) {
        proj_block_fp4(f, pj, b, nb, M, t->f4, C);
    } else {
        proj_block(f, t, pj, b, nb, M, t->xr, xg, C, f->bx);
    }
}

static void gemm1_item(fast *f, const tscratch *t, const item *it) {
    const moeq_moe *l = f->l;
    size_t r0 = (size_t)f->starts[it->e], M = (size_t)f->starts[it->e + 1] - r0;
    for (size_t m = 0; m < M; m++) {
        size_t r = r0 + m, tok = (size_t)f->order[r] / f->k;
        /* fp4 keeps no f32 copy of a row (X is NULL): only codes */
        t->xr[m] = !f->per_row_x ? f->xf + tok * f->H : f->X ? f->X + r * f->H : NULL;
        if (f->int8) {
            t->xc[m] = codes_of(f, false, tok);
            t->xsc[m] = f->xs[tok];
        }
        if (f->bx) {
            t->xb[m] = f->xb + tok * f->H;
            t->xbs[m] = f->fp8b ? f->xs + tok * f->nxs : NULL;
        }
        if (f->fp4) t->f4[m] = fp4_row(f->x4v, f->x4s, f->x4u, f->H, r);
    }
    const moeq__proj *pg = &l->projs[it->e * 3 + MOEQ__GATE], *pu = &l->projs[it->e * 3 + MOEQ__UP];
    const float *rows_g[MOEQ__GEMV_MAX], *rows_u[MOEQ__GEMV_MAX];
    const float *const *xg = t->xr, *const *xu = t->xr;
    /* Non-gated experts run up alone, a = act(up): the same blocks, no gate. */
    const bool gated = !l->cfg.non_gated;
    if (!f->int8 && !f->fp4) { /* what the gemv kernels read per row */
        if (!gated) {
            xu = gemv_rows(f, t, pu, M, t->xr, f->bx, 1, rows_u);
        } else {
            xg = xu = gemv_rows(f, t, pg, M, t->xr, f->bx, 0, rows_g);
            if (pu->pk.code != pg->pk.code || pu->pk.gsize != pg->pk.gsize ||
                pu->w.kind != pg->w.kind) {
                xu = gemv_rows(f, t, pu, M, t->xr, f->bx, 1, rows_u);
            }
        }
    }
    /* An expert with few rows has its whole projection in this item: gate's
     * codes are read first, then up's (one stream at a time), gate's outputs
     * waiting in A until up's block comes.  (moe_bench, T=1, 2 threads, calls
     * alternating with the block-by-block order: w8a8_int8 0.91x the time
     * (0.83x with 1 thread), wna16 0.93x, w8a8_fp8 0.93x, w4a16_mxfp4 and
     * w4a4_nvfp4 0.99-1.02x; T=32 0.97-1.00x.) */
    const bool gate_first = gated && M <= MOEQ__GEMV_MAX;
    int32_t step = blocks_per_call(f, pu, M, f->bx), end = it->b0 + it->nb;
    if (gated) { /* one step for both: each call's blocks as the other's allows */
        const int32_t sg = blocks_per_call(f, pg, M, f->bx);
        step = sg < step ? sg : step;
    }
    for (int32_t b = it->b0; gate_first && b < end; b += step) {
        const size_t nb = (size_t)(end - b < step ? end - b : step), ld = 16 * nb;
        block_out(f, t, pg, (size_t)b, nb, M, xg, t->Cg);
        size_t j0 = (size_t)b * 16, nj = f->I - j0 < ld ? f->I - j0 : ld;
        for (size_t m = 0; m < M; m++) {
            copy_out(f->A + (r0 + m) * f->I + j0, t->Cg + m * ld, nj);
        }
    }
    for (int32_t b = it->b0; b < end; b += step) {
        const size_t nb = (size_t)(end - b < step ? end - b : step), ld = 16 * nb;
        if (M > MOEQ__GEMV_MAX && l->all_packed && (f->int8 || f->fp4)) {
            /* up's blocks come next; the following blocks soon after, here or
             * on another core (L3 is shared) */
            for (size_t i = 0; i < nb; i++) {
                moeq__pk_fetch_cols(&pu->pk, (size_t)b + i, 0, 2 * KB);
                if (gated) moeq__pk_fetch_cols(&pg->pk, (size_t)b + nb + i, 0, 2 * KB);
                moeq__pk_fetch_cols(&pu->pk, (size_t)b + nb + i, 0, 2 * KB);
            }
        }
        size_t j0 = (size_t)b * 16, nj = f->I - j0 < ld ? f->I - j0 : ld;
        if (gate_first) {
            for (size_t m = 0; m < M; m++) {
                copy_out(t->Cg + m * ld, f->A + (r0 + m) * f->I + j0, nj);
            }
        } else if (gated) {
            block_out(f, t, pg, (size_t)b, nb, M, xg, t->Cg);
        }
        block_out(f, t, pu, (size_t)b, nb, M, xu, t->Cu);
        for (size_t m = 0; m < M; m++) {
            float *g = t->Cg + m * ld, *u = t->Cu + m * ld;
            if (gated && pg->bias) {
                for (size_t j = 0; j < nj; j++) g[j] += pg->bias[j0 + j];
            }
            if (pu->bias) {
                for (size_t j = 0; j < nj; j++) u[j] += pu->bias[j0 + j];
            }
            float *a = f->A + (r0 + m) * f->I + j0;
            if (gated && l->cfg.activation == MOEQ_ACT_SILU) {
                f->K->silu_mul(g, u, a, nj, l->cfg.swiglu_limit);
            } else {
                moeq__expert_act(&l->cfg, g, u, a, nj);
            }
        }
    }
}

static void gemm2_item(fast *f, const tscratch *t, const item *it) {
    const moeq_moe *l = f->l;
    size_t r0 = (size_t)f->starts[it->e], M = (size_t)f->starts[it->e + 1] - r0;
    for (size_t m = 0; m < M; m++) {
        t->xr[m] = f->A + (r0 + m) * f->I;
        if (f->int8) {
            t->xc[m] = codes_of(f, true, r0 + m);
            t->xsc[m] = f->as[r0 + m];
        }
        if (f->fp8b) {
            t->xb[m] = f->ab + (r0 + m) * f->I;
            t->xbs[m] = f->as + (r0 + m) * f->nas;
        }
        if (f->fp4) t->f4[m] = fp4_row(f->a4v, f->a4s, f->a4u, f->I, r0 + m);
    }
    const moeq__proj *pd = &l->projs[it->e * 3 + MOEQ__DOWN];
    const float *rows[MOEQ__GEMV_MAX];
    const float *const *xg =
        f->int8 || f->fp4 ? t->xr : gemv_rows(f, t, pd, M, t->xr, f->fp8b, 0, rows);
    const int32_t step = blocks_per_call(f, pd, M, f->fp8b), end = it->b0 + it->nb;
    for (int32_t b = it->b0; b < end; b += step) {
        const size_t nb = (size_t)(end - b < step ? end - b : step), ld = 16 * nb;
        if (M > MOEQ__GEMV_MAX && l->all_packed && (f->int8 || f->fp4)) {
            for (size_t i = 0; i < nb; i++) { /* the panels fetch their own */
                moeq__pk_fetch_cols(&pd->pk, (size_t)b + nb + i, 0, 2 * KB);
            }
        }
        if (f->int8) { /* times xsc as it goes out, below */
            proj_block_int(f, t, pd, (size_t)b, nb, M, t->xc, t->Cg);
        } else if (f->fp4) {
            proj_block_fp4(f, pd, (size_t)b, nb, M, t->f4, t->Cg);
        } else {
            proj_block(f, t, pd, (size_t)b, nb, M, t->xr, xg, t->Cg, f->fp8b);
        }
        size_t h0 = (size_t)b * 16, nh = f->H - h0 < ld ? f->H - h0 : ld;
        for (size_t m = 0; m < M; m++) {
            float *y = f->Y + (r0 + m) * f->H + h0;
            const float *c = t->Cg + m * ld;
            if (f->int8) {
                times_xsc_out(y, c, t->xsc[m], pd->bias ? pd->bias + h0 : NULL, nh);
            } else if (pd->bias) {
                for (size_t j = 0; j < nh; j++) y[j] = c[j] + pd->bias[h0 + j];
            } else {
                copy_out(y, c, nh);
            }
        }
    }
}

/* Row r of the down-projection inputs is bad: its token is, or the row is
 * not finite (checked before quantization, which could make it finite). */
static bool check_row_a(fast *f, size_t r) {
    f->row_bad[r] = f->bad[(size_t)f->order[r] / f->k] || !all_finite(f->A + r * f->I, f->I);
    return f->row_bad[r];
}

/* Per-tensor kinds: the bad rows, and the amax of the others (the scale
 * every row is then quantized with). */
static void step_amax_a(void *arg, int tid, int nt) {
    fast *f = arg;
    (void)nt;
    size_t a, b;
    float am = 0.0f;
    while (next_range(f, f->rows, &a, &b))
        for (size_t r = a; r < b; r++) {
            if (check_row_a(f, r)) continue;
            float m = f->K->amax(f->A + r * f->I, f->I);
            am = m > am ? m : am;
        }
    f->partial[tid] = am;
}

/* The activation quantization of down-input row r. */
static void quant_row_a(fast *f, const tscratch *t, size_t r) {
    /* per-tensor kinds found their bad rows in step_amax_a */
    const moeq__proj *pd = &f->l->projs[f->row_expert[r] * 3 + MOEQ__DOWN];
    if (tensor_kind(f->l->act_kind) ? f->row_bad[r] : check_row_a(f, r)) {
        if (f->int8) {
            zero_codes(f->aq + r * f->I, f->I, &f->as[r]);
            codes_done(f, true, r);
        }
        if (f->fp8b) code_row_fp8(f, NULL, f->I, 0, 0, f->ab + r * f->I, f->as + r * f->nas, true);
        if (f->fp4) code_row_fp4(f, NULL, f->I, 0, f->a4v, f->a4s, f->a4u, r, true);
        return;
    }
    if (f->fp4) {
        code_row_fp4(f, f->A + r * f->I, f->I, pd->act_scale, f->a4v, f->a4s, f->a4u, r, false);
    } else if (f->int8) {
        code_row(f, f->A + r * f->I, f->I, pd->act_scale, f->ts2, f->aq + r * f->I, &f->as[r]);
        codes_done(f, true, r);
    } else if (f->fp8b) {
        code_row_fp8(f, f->A + r * f->I, f->I, pd->act_scale, f->ts2, f->ab + r * f->I,
                     f->as + r * f->nas, false);
    } else {
        qdq_row(f, t, f->A + r * f->I, f->I, pd->act_scale, f->ts2);
    }
}

static void step_quant_a(void *arg, int tid, int nt) {
    fast *f = arg;
    tscratch t = tscratch_get(f, tid);
    (void)nt;
    size_t a, b;
    while (next_range(f, f->rows, &a, &b))
        for (size_t r = a; r < b; r++) quant_row_a(f, &t, r);
}

/* The GEMM step: threads take work items from the counter.  With
 * quant_inline, gemm1, quant and gemm2 are this one step (the file's head):
 * items are taken in order, so when a thread takes a gemm2 item every gemm1
 * item has been taken, each by a thread that finishes it without waiting on
 * anything, and the wait below ends.  (moe_bench, 2 threads, calls
 * alternating with the three steps of before, two runs: T=1 0.94-0.99x the
 * time for every scheme, T=32 0.98-1.04x, T=512 0.97-1.03x.  At T=1 the
 * thread done first had waited a median 0.05 ms of 0.74 for the other after
 * gemm1.) */
static void step_gemms(void *arg, int tid, int nt) {
    fast *f = arg;
    (void)nt;
    tscratch t = tscratch_get(f, tid);
    for (;;) {
        size_t i = atomic_fetch_add_explicit(&f->next, 1, memory_order_relaxed);
        if (i >= f->n_items) break;
        const item *it = &f->items[i];
        if (i < f->n_gemm1) {
            gemm1_item(f, &t, it);
            if (atomic_fetch_sub_explicit(&f->left[it->e], 1, memory_order_acq_rel) == 1) {
                if (f->quant_inline && f->l->act_kind != MOEQ__ACT_NONE) {
                    for (int32_t r = f->starts[it->e]; r < f->starts[it->e + 1]; r++) {
                        quant_row_a(f, &t, (size_t)r);
                    }
                }
                atomic_store_explicit(&f->left[it->e], -1, memory_order_release);
            }
        } else {
            for (unsigned spin = 0;
                 atomic_load_explicit(&f->left[it->e], memory_order_acquire) >= 0; spin++) {
                if (spin % 1024 == 1023) {
                    sched_yield(); /* the thread it waits for may need this CPU */
                } else {
                    MOEQ__CPU_RELAX();
                }
            }
            gemm2_item(f, &t, it);
        }
    }
}

static void step_combine(void *arg, int tid, int nt) {
    fast *f = arg;
    const moeq_moe *l = f->l;
    const moeq__apply_io *io = f->io;
    tscratch t = tscratch_get(f, tid);
    (void)nt;
    size_t a, b;
    const size_t H = f->H, k = f->k;
    const size_t osz = moeq_dtype_size(io->out_dtype);
    while (next_range(f, f->T, &a, &b))
        for (size_t tok = a; tok < b; tok++) {
            bool bad = f->bad[tok];
            if (io->pair_out) { /* expert parallelism: each pair's output as it is */
                for (size_t j = 0; j < k; j++) {
                    size_t p = tok * k + j;
                    if (io->pair_out[p] < 0) continue;
                    size_t r = (size_t)f->row_of[p];
                    float *dst = (float *)io->out + (size_t)io->pair_out[p] * H;
                    if (bad || (f->row_bad && f->row_bad[r])) {
                        for (size_t h = 0; h < H; h++) dst[h] = NAN;
                    } else {
                        memcpy(dst, f->Y + r * H, H * sizeof(float));
                    }
                }
                continue;
            }
            for (size_t j = 0; j < k; j++) {
                size_t p = tok * k + j;
                t.yk[j] = f->row_of[p] < 0 ? NULL : f->Y + (size_t)f->row_of[p] * H;
                if (f->row_of[p] >= 0 && f->row_bad && f->row_bad[f->row_of[p]]) bad = true;
            }
            const size_t ld = io->out_stride > 0 ? (size_t)io->out_stride : H;
            float *acc = io->out_dtype == MOEQ_DTYPE_F32 ? (float *)io->out + tok * ld : t.ybuf;
            static const float one = 1.0f; /* a linear layer's one row, unweighted */
            moeq__moe_combine_token(l, io->ctx, k, io->weights ? io->weights + tok * k : &one, t.yk,
                                    bad, acc, io->out_dtype, (uint8_t *)io->out + tok * ld * osz);
        }
}

/* Runs a row/token step on the pool (ranges of about 16K values per grab),
 * or on the caller alone when it is small. */
static void run(moeq__pool *pool, moeq__pool_fn fn, fast *f, size_t work) {
    size_t rows = f->T > f->rows ? f->T : f->rows, per_row = rows ? work / rows : 1;
    f->chunk = per_row ? 16384 / per_row + 1 : 1;
    atomic_store_explicit(&f->next, 0, memory_order_relaxed);
    for (int i = 0; i < f->nt; i++) f->partial[i] = 0.0f;
    if (!pool || work < 32768) {
        fn(f, 0, 1);
    } else {
        moeq__pool_run(pool, fn, f);
    }
}

/* Runs step_gemms over items [0, n) of f->items, the first n1 gemm1's. */
static void run_gemms(moeq__pool *pool, fast *f, size_t n1, size_t n) {
    f->n_gemm1 = n1;
    f->n_items = n;
    atomic_store_explicit(&f->next, 0, memory_order_relaxed);
    if (!pool) {
        step_gemms(f, 0, 1);
    } else {
        moeq__pool_run(pool, step_gemms, f);
    }
}

/* Work items of one GEMM: per expert with rows, blocks of 16 output rows in
 * groups: all of them when the expert has at most MOEQ__GEMV_MAX rows (its
 * codes then stream in one run, and I4 rows are prepared once), one block
 * otherwise.  (moe_bench, 2 threads, calls alternating with items of 4
 * blocks: T=32 0.84-0.96x the time, T=1 0.91-0.95x but one run of w8a8_fp8
 * at 1.03x.) */
static size_t make_items(const fast *f, size_t out_rows, item *items) {
    size_t n = 0, nblk = (out_rows + 15) / 16;
    for (size_t e = 0; e < f->E; e++) {
        size_t M = (size_t)(f->starts[e + 1] - f->starts[e]);
        if (!M) continue;
        size_t per = M <= MOEQ__GEMV_MAX ? nblk : (size_t)item_blocks(f, M);
        /* A linear layer's one "expert" is all the work: its few rows still
         * go to every thread, a few runs of blocks each. */
        if (f->l->linear && M <= MOEQ__GEMV_MAX)
            per = (nblk + 4 * (size_t)f->nt - 1) / (4 * (size_t)f->nt);
        for (size_t b = 0; b < nblk; b += per) {
            items[n].e = (int32_t)e;
            items[n].b0 = (int32_t)b;
            items[n].nb = (int32_t)(nblk - b < per ? nblk - b : per);
            n++;
        }
    }
    return n;
}

/* The head of the scratch, laid out the same before and after it grows:
 * bucketing arrays, per-token and per-row flags, work items, partial amaxes.
 * With p NULL, only the size. */
static size_t carve_head(fast *f, uint8_t *p, size_t nblk, int32_t **fill, item **items) {
    size_t pairs = f->T * f->k;
    size_t sizes[] = {(f->E + 1) * 4,
                      f->E * 4,
                      pairs * 4,
                      pairs * 4,
                      pairs * 4,
                      f->T,
                      f->T,
                      pairs,
                      f->E * nblk * sizeof(item),
                      (size_t)f->nt * sizeof(float),
                      f->E * sizeof(atomic_int)};
    void *at[11];
    size_t off = 0;
    for (int i = 0; i < 11; i++) {
        at[i] = p ? p + off : NULL;
        off += up64(sizes[i]);
    }
    if (p) {
        f->starts = at[0];
        *fill = at[1];
        f->order = at[2];
        f->row_of = at[3];
        f->row_expert = at[4];
        f->used = at[5];
        f->bad = at[6];
        f->row_bad = at[7];
        *items = at[8];
        f->partial = at[9];
        f->left = at[10];
    }
    return off;
}

moeq_status moeq__moe_apply_fast(const moeq_moe *l, moeq__apply_io *io, moeq_error *err) {
    const moeq_moe_config *c = &l->cfg;
    moeq_ctx *ctx = io->ctx;
    fast f;
    memset(&f, 0, sizeof f);
    f.l = l;
    f.K = ctx->kern;
    f.io = io;
    f.T = (size_t)io->tokens;
    f.k = (size_t)io->top_k;
    f.H = (size_t)c->hidden_size;
    f.I = (size_t)c->intermediate_size;
    f.E = (size_t)c->num_local_experts;
    f.maxk = f.H > f.I ? f.H : f.I;
    size_t pairs = f.T * f.k;
    int nt = moeq__pool_threads(ctx->pool);
    f.nt = nt;
    f.per_row_x = l->act_kind == MOEQ__ACT_NVFP4;
    f.int8 = l->int8_dot;
    f.fp4 = l->fp4_dot;

    /* Bucket first (its arrays come first in the scratch) to learn the sizes. */
    size_t nblk = (f.I + 15) / 16 + (f.H + 15) / 16;
    int32_t *fill;
    item *items;
    size_t head = carve_head(&f, NULL, nblk, &fill, &items);
    uint8_t *base = moeq__ctx_scratch(ctx, head);
    if (!base) goto nomem;
    {
        carve_head(&f, base, nblk, &fill, &items);
        memset(f.starts, 0, (f.E + 1) * 4);
        memset(f.used, 0, f.T);
        for (size_t q = 0; q < pairs; q++) {
            int32_t id = l->linear ? 0 : io->ids[q]; /* linear: every token, the one expert */
            int32_t e = id < 0 ? -1 : l->expert_map[id];
            f.row_of[q] = e;
            if (e >= 0) {
                f.starts[e + 1]++;
                f.used[q / f.k] = 1;
            }
        }
        for (size_t e = 0; e < f.E; e++) {
            size_t M = (size_t)f.starts[e + 1];
            if (M > f.mmax) f.mmax = M;
            f.starts[e + 1] += f.starts[e];
        }
        f.rows = (size_t)f.starts[f.E];
        memcpy(fill, f.starts, f.E * 4);
        for (size_t q = 0; q < pairs; q++) {
            int32_t e = f.row_of[q];
            if (e < 0) continue;
            int32_t r = fill[e]++;
            f.order[r] = (int32_t)q;
            f.row_expert[r] = e;
            f.row_of[q] = r;
        }
    }
    /* FP8 activations keep their codes too (bfloat16, with their scales), and
     * a weight-only layer its bf16 input, on the bfloat16 path: by default
     * only on CPUs whose AVX512_BF16 is fast (a property of the CPU, fixed
     * with the context, not of the table, so that the avx2 and avx512 tables
     * give the same bits on one CPU, and not of the batch, so that every
     * rank of expert parallelism decides alike).  Elsewhere tile_bf16 is the
     * AVX2 one, FMAs on ymm registers (two tokens a call, each weight pair
     * split by integer operations), which took 1.5-1.8x the float path's
     * time for wna16, 1.1-1.5x for w6a16_mxfp6 and 1.6-1.8x for w8a8_fp8 and
     * w4a8_fp8 on an AVX2 CPU (T=512, 2 threads; docs/performance.md). */
    const bool bf16_path = ctx->bf16_path;
    f.fp8b = !f.int8 && !f.fp4 && !f.per_row_x && bf16_path &&
             (l->act_kind == MOEQ__ACT_FP8_TOKEN || l->act_kind == MOEQ__ACT_FP8_TENSOR ||
              l->act_kind == MOEQ__ACT_FP8_STATIC || l->act_kind == MOEQ__ACT_FP8_GROUP);
    f.bx = f.fp8b || (!l->linear && !f.int8 && !f.fp4 && !f.per_row_x && bf16_path &&
                      l->act_kind == MOEQ__ACT_NONE && io->x_dtype == MOEQ_DTYPE_BF16 &&
                      !c->apply_router_weight_on_input);
    f.nxs = f.nas = 1;
    if (f.fp8b && l->act_kind == MOEQ__ACT_FP8_GROUP) {
        const size_t gs = (size_t)l->act_group;
        f.nxs = (f.H + gs - 1) / gs;
        f.nas = (f.I + gs - 1) / gs;
    }
    /* The rest of the scratch: buffers, then per-thread pieces. */
    f.tstride = up64(tscratch_size(&f));
    const size_t Tx = l->linear ? 0 : f.T; /* rows of xf (a linear layer's x goes to A) */
    size_t at_xf = head, at_x = at_xf + up64(Tx * f.H * 4);
    size_t at_a = at_x + (f.per_row_x && !f.fp4 ? up64(f.rows * f.H * 4) : 0);
    size_t at_y = at_a + up64(f.rows * f.I * 4);
    size_t at_q = at_y + up64(f.rows * f.H * 4); /* int8: xq, xs, aq, as (bx: xb, ...) */
    const bool a_codes = f.int8 || f.fp8b;
    size_t q_bytes = f.int8 || f.bx ? up64(Tx * f.H * 2) + up64(Tx * f.nxs * 4) : 0;
    if (a_codes) q_bytes += up64(f.rows * f.I * 2) + up64(f.rows * f.nas * 4);
    size_t at_q8 = at_q + q_bytes; /* int8: xq8, xps, aq8, aps */
    if (f.int8) {
        q_bytes += up64(Tx * f.H) + up64(Tx * (f.H / 8 + 1) * 4) + up64(f.rows * f.I) +
                   up64(f.rows * (f.I / 8 + 1) * 4);
    }
    size_t at_q4 = at_q + q_bytes; /* fp4: x4v, a4v, x4s, a4s, x4u, a4u */
    if (f.fp4) {
        q_bytes += up64(f.rows * f.H) + up64(f.rows * f.I) + up64(f.rows * f.H / 16 * 4) +
                   up64(f.rows * f.I / 16 * 4) + up64(f.rows * f.H / 16 * 4) +
                   up64(f.rows * f.I / 16 * 4);
    }
    size_t at_t = at_q + q_bytes;
    size_t total = at_t + (size_t)nt * f.tstride + 64;
    base = moeq__ctx_scratch(ctx, total); /* may move: recompute the head pointers */
    if (!base) goto nomem;
    {
        carve_head(&f, base, nblk, &fill, &items);
        memset(f.bad, 0, f.T);
        memset(f.row_bad, 0, pairs);
        f.xf = (float *)(void *)(base + at_xf);
        f.X = f.per_row_x && !f.fp4 ? (float *)(void *)(base + at_x) : NULL;
        f.A = (float *)(void *)(base + at_a);
        f.Y = (float *)(void *)(base + at_y);
        if (f.int8 || f.bx) { /* xq or xb, xs, then aq or ab, as */
            uint8_t *q = base + at_q;
            if (f.int8) f.xq = (int16_t *)(void *)q;
            if (f.bx) f.xb = (uint16_t *)(void *)q;
            q += up64(Tx * f.H * 2);
            f.xs = (float *)(void *)q;
            q += up64(Tx * f.nxs * 4);
            if (a_codes) {
                if (f.int8) f.aq = (int16_t *)(void *)q;
                if (f.fp8b) f.ab = (uint16_t *)(void *)q;
                q += up64(f.rows * f.I * 2);
                f.as = (float *)(void *)q;
            }
        }
        if (f.int8) {
            uint8_t *q = base + at_q8;
            f.xq8 = (int8_t *)q;
            q += up64(Tx * f.H);
            f.xps = (int32_t *)(void *)q;
            q += up64(Tx * (f.H / 8 + 1) * 4);
            f.aq8 = (int8_t *)q;
            q += up64(f.rows * f.I);
            f.aps = (int32_t *)(void *)q;
        }
        if (f.fp4) {
            uint8_t *q = base + at_q4;
            f.x4v = (int8_t *)q;
            q += up64(f.rows * f.H);
            f.a4v = (int8_t *)q;
            q += up64(f.rows * f.I);
            f.x4s = (float *)(void *)q;
            q += up64(f.rows * f.H / 16 * 4);
            f.a4s = (float *)(void *)q;
            q += up64(f.rows * f.I / 16 * 4);
            f.x4u = (int32_t *)(void *)q;
            q += up64(f.rows * f.H / 16 * 4);
            f.a4u = (int32_t *)(void *)q;
        }
        uint8_t *tb = base + at_t;
        f.tbase = tb + ((64 - ((uintptr_t)tb & 63u)) & 63u);

        moeq__pool *pool = ctx->pool;
#ifdef MOEQ_FAST_PROFILE
        double prof_t = prof_now();
#endif
        if (l->linear) { /* x is the down projection's input: quantize, multiply */
            run(pool, step_linear_in, &f, f.T * f.I);
            if (tensor_kind(l->act_kind)) {
                run(pool, step_amax_a, &f, f.T * f.I);
                float am = 0;
                for (int i = 0; i < nt; i++) am = f.partial[i] > am ? f.partial[i] : am;
                f.ts2 = tensor_scale(l->act_kind, am);
            }
            if (l->act_kind != MOEQ__ACT_NONE) run(pool, step_quant_a, &f, f.T * f.I);
            for (size_t e = 0; e < f.E; e++) atomic_init(&f.left[e], -1);
            f.items = items;
            run_gemms(pool, &f, 0, make_items(&f, f.H, items));
            run(pool, step_combine, &f, f.T * f.H);
            return MOEQ_STATUS_OK;
        }
        /* prep */
        run(pool, step_tokens, &f, f.T * f.H);
        if (tensor_kind(l->act_kind)) {
            float am = 0;
            for (int i = 0; i < nt; i++) {
                am = f.partial[i] > am ? f.partial[i] : am;
            }
            f.ts1 = tensor_scale(l->act_kind, am);
        }
        if (f.per_row_x || tensor_kind(l->act_kind)) {
            run(pool, step_tokens2, &f, (f.per_row_x ? f.rows : f.T) * f.H);
        }
        PROF("prep");
        if (f.rows == 0) {
            run(pool, step_combine, &f, f.T * f.H);
            return MOEQ_STATUS_OK;
        }
        /* gemm1, quant, gemm2: one step unless the down inputs share one
         * per-tensor scale */
        size_t n1 = make_items(&f, f.I, items);
        for (size_t e = 0; e < f.E; e++) atomic_init(&f.left[e], 0); /* then counted */
        for (size_t i = 0; i < n1; i++) {
            atomic_fetch_add_explicit(&f.left[items[i].e], 1, memory_order_relaxed);
        }
        f.items = items;
        f.quant_inline = !tensor_kind(l->act_kind);
        if (f.quant_inline) {
            run_gemms(pool, &f, n1, n1 + make_items(&f, f.H, items + n1));
            PROF("gemms");
        } else {
            run_gemms(pool, &f, n1, n1);
            PROF("gemm1");
            size_t work = f.rows * f.I;
            run(pool, step_amax_a, &f, work);
            float am = 0;
            for (int i = 0; i < nt; i++) {
                am = f.partial[i] > am ? f.partial[i] : am;
            }
            f.ts2 = tensor_scale(l->act_kind, am);
            run(pool, step_quant_a, &f, work);
            PROF("quant");
            run_gemms(pool, &f, 0, make_items(&f, f.H, items)); /* every left[e] is -1 */
            PROF("gemm2");
        }
        run(pool, step_combine, &f, f.T * f.H);
        PROF("combine");
    }
    return MOEQ_STATUS_OK;
nomem:
    return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory (scratch for %lld tokens)",
                       l->prefix ? l->prefix : "MoE layer", (long long)io->tokens);
}

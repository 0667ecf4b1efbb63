/*
 * moe_apply.c - the MoE forward pass: argument checks and the generic apply
 * every scheme's apply slot uses (the context is moe_ctx.c's, the pieces
 * shared with moe_fast.c are moe_act.c's):
 *
 *   1. x -> f32; each (token, k) pair whose expert is held here becomes a row,
 *      grouped by expert;
 *   2. the scheme's activation quantization of those rows;
 *   3. gate = X Wg^T, up = X Wu^T (+ bias), a = act(gate, up);
 *   4. the activation quantization of a; y = a Wd^T (+ bias);
 *   5. out[t] = routed_scaling_factor * sum_k w[t,k] * y[t,k], summed in k
 *      order, so results do not depend on how work was split.
 *
 * Non-finite values: a token whose input row holds a NaN or an infinity, or
 * whose intermediate activations or result come out non-finite, gets an
 * output row of NaN.  Such tokens are left out of the per-call (dynamic
 * per-tensor) activation scales, so the other tokens' outputs are what they
 * would be without it.  moeq_moe_apply_reference follows the same rule.
 */
#include "layer/moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the public entry point ---------------------------------------------------- */

static bool io_dtype(int32_t d) {
    return d == MOEQ_DTYPE_F32 || d == MOEQ_DTYPE_BF16 || d == MOEQ_DTYPE_F16;
}

/* Checks shared by moeq_moe_apply and moeq_moe_apply_reference. */
static moeq_status check_apply(const moeq_moe *l, int32_t x_dtype, const void *x, int64_t tokens,
                               int32_t top_k, const int32_t *topk_ids, const float *topk_weights,
                               int32_t out_dtype, const void *out, moeq_error *err) {
    const char *name = l->prefix ? l->prefix : "MoE layer";
    if (!l->finalized) {
        return moeq__error(err, MOEQ_STATUS_STATE,
                           "%s: not finalized; call moeq_moe_finalize after loading", name);
    }
    if (!io_dtype(x_dtype) || !io_dtype(out_dtype)) {
        return moeq__error(err, MOEQ_STATUS_DTYPE,
                           "%s: x dtype %s / out dtype %s; each must be F32, BF16 or F16", name,
                           moeq_dtype_name(x_dtype), moeq_dtype_name(out_dtype));
    }
    if (tokens < 0 || tokens > (int64_t)INT32_MAX) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: tokens is %lld; must be 0..%d",
                           name, (long long)tokens, INT32_MAX);
    }
    if (top_k < 1 || top_k > l->cfg.num_experts) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%s: top_k is %d; must be 1..num_experts (%d)", name, (int)top_k,
                           (int)l->cfg.num_experts);
    }
    if (l->cfg.apply_router_weight_on_input && top_k != 1) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%s: apply_router_weight_on_input needs top_k == 1, got %d", name,
                           (int)top_k);
    }
    if (tokens * (int64_t)top_k > (int64_t)INT32_MAX) {
        /* Rows are indexed with int32 (and the scratch sizes stay far from
         * overflowing size_t). */
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%s: tokens %lld x top_k %d is over %d (token, expert) pairs; split "
                           "the batch",
                           name, (long long)tokens, (int)top_k, INT32_MAX);
    }
    if (tokens == 0) return MOEQ_STATUS_OK;
    if (!x || !topk_ids || !topk_weights || !out) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: %s is NULL", name,
                           !x              ? "x"
                           : !topk_ids     ? "topk_ids"
                           : !topk_weights ? "topk_weights"
                                           : "out");
    }
    if ((const void *)out == x && out_dtype != x_dtype) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%s: out aliases x but their dtypes differ", name);
    }
    for (int64_t i = 0; i < tokens * top_k; i++) {
        int32_t id = topk_ids[i];
        if (id < -1 || id >= l->cfg.num_experts) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "%s: topk_ids[%lld][%d] is %d; must be -1 or 0..%d", name,
                               (long long)(i / top_k), (int)(i % top_k), (int)id,
                               (int)l->cfg.num_experts - 1);
        }
        if (!isfinite(topk_weights[i])) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "%s: topk_weights[%lld][%d] is not finite", name,
                               (long long)(i / top_k), (int)(i % top_k));
        }
    }
    return MOEQ_STATUS_OK;
}

moeq_status moeq_moe_apply(const moeq_moe *l, moeq_ctx *ctx, int32_t x_dtype, const void *x,
                           int64_t tokens, int32_t top_k, const int32_t *topk_ids,
                           const float *topk_weights, int32_t out_dtype, void *out,
                           moeq_error *err) {
    if (!l || !ctx) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL", !l ? "layer" : "ctx");
    }
    moeq_status st =
        check_apply(l, x_dtype, x, tokens, top_k, topk_ids, topk_weights, out_dtype, out, err);
    if (st != MOEQ_STATUS_OK || tokens == 0) return st;
    moeq__apply_io io = {ctx,          x_dtype,   x,   tokens, top_k, topk_ids,
                         topk_weights, out_dtype, out, NULL,   0};
    return l->scheme->apply(l, &io, err);
}

moeq_status moeq__moe_apply_rows(const moeq_moe *l, moeq_ctx *ctx, int32_t x_dtype, const void *x,
                                 int64_t tokens, int32_t top_k, const int32_t *ids,
                                 const float *weights, const int32_t *pair_out, float *y,
                                 moeq_error *err) {
    moeq_status st =
        check_apply(l, x_dtype, x, tokens, top_k, ids, weights, MOEQ_DTYPE_F32, y, err);
    if (st != MOEQ_STATUS_OK || tokens == 0) return st;
    const int64_t pairs = tokens * top_k;
    for (int64_t p = 0; p < pairs; p++) {
        if ((ids[p] >= 0 && l->expert_map[ids[p]] < 0) || (ids[p] < 0) != (pair_out[p] < 0)) {
            return moeq__error(err, MOEQ_STATUS_INTERNAL,
                               "%s: pair %lld: expert %d, output row %d (not held here, or a "
                               "slot that disagrees with its id)",
                               l->prefix ? l->prefix : "MoE layer", (long long)p, (int)ids[p],
                               (int)pair_out[p]);
        }
    }
    moeq__apply_io io = {ctx,     x_dtype,        x, tokens,   top_k, ids,
                         weights, MOEQ_DTYPE_F32, y, pair_out, 0};
    return l->scheme->apply(l, &io, err);
}

/* ---- activation quantization ----------------------------------------------------- */

/* The per-call scale of the dynamic per-tensor kinds from the amax of the
 * rows that take part. */
static float tensor_scale_from(int32_t kind, float amax) {
    if (kind == MOEQ__ACT_INT8_TENSOR) return fmaxf(amax, MOEQ__ACT_INT8_EPS) / 127.0f;
    if (kind == MOEQ__ACT_FP8_TENSOR) return fmaxf(amax, MOEQ__ACT_FP8_EPS) / MOEQ__E4M3_MAX;
    return 1.0f;
}

/* amax over rows [0, n) of x (cols wide), skipping rows of bad tokens
 * (token of row r: order[r] / k). */
static float rows_amax(const float *x, size_t n, size_t cols, const int32_t *order, size_t k,
                       const uint8_t *bad) {
    float amax = 0;
    for (size_t r = 0; r < n; r++) {
        if (bad[(size_t)order[r] / k]) continue;
        const float *row = x + r * cols;
        for (size_t c = 0; c < cols; c++) amax = fmaxf(amax, fabsf(row[c]));
    }
    return amax;
}

static bool all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return false;
    }
    return true;
}

/* ---- matmul and activation functions ----------------------------------------------- */

/* y[i, r] = sum_c a[i, c] * w[r, c] for i < n, r < w->rows, through `rows_buf`
 * (chunk x cols floats) holding a few dequantized weight rows at a time. */
#define MATMUL_CHUNK 16u
static void matmul_ref(const moeq__qweight *w, const float *a, size_t n, float *y,
                       float *rows_buf) {
    size_t N = w->rows, K = w->cols;
    for (size_t r0 = 0; r0 < N; r0 += MATMUL_CHUNK) {
        size_t nr = N - r0 < MATMUL_CHUNK ? N - r0 : MATMUL_CHUNK;
        moeq__dequant_ref(w, r0, nr, rows_buf);
        for (size_t i = 0; i < n; i++) {
            const float *ai = a + i * K;
            for (size_t r = 0; r < nr; r++) {
                const float *wr = rows_buf + r * K;
                float acc = 0;
                for (size_t c = 0; c < K; c++) acc += ai[c] * wr[c];
                y[i * N + r0 + r] = acc;
            }
        }
    }
}

/* ---- the generic forward ------------------------------------------------------------ */

/* A linear layer's reference forward (l->linear): the down projection's half
 * of the one below, with x [T, I] as its input rows and no combine but the
 * output conversion (a weight of 1).  Scratch as the caller carved it: acc
 * [T, H], A [T, I], Y [T, H]. */
static moeq_status linear_generic(const moeq_moe *l, const moeq__apply_io *io, float *acc, float *A,
                                  float *Y, float *rows_buf, void *codes, float *scales,
                                  uint8_t *bad, moeq_error *err) {
    (void)err;
    size_t T = (size_t)io->tokens, H = (size_t)l->cfg.hidden_size,
           I = (size_t)l->cfg.intermediate_size;
    moeq__to_f32_ref(io->x_dtype, io->x, T * I, A);
    float amax = 0;
    for (size_t t = 0; t < T; t++) {
        bad[t] = !all_finite(A + t * I, I);
        for (size_t c = 0; c < I && !bad[t]; c++) amax = fmaxf(amax, fabsf(A[t * I + c]));
    }
    const moeq__proj *pd = &l->projs[MOEQ__DOWN];
    moeq__act_quant_rows(l->act_kind, l->act_group, A, T, I, tensor_scale_from(l->act_kind, amax),
                         pd->act_scale, codes, scales);
    matmul_ref(&pd->w, A, T, Y, rows_buf);
    const float one = 1.0f;
    const size_t osz = moeq_dtype_size(io->out_dtype);
    const size_t ld = io->out_stride > 0 ? (size_t)io->out_stride : H;
    for (size_t t = 0; t < T; t++) {
        float *y = Y + t * H;
        if (pd->bias) {
            for (size_t h = 0; h < H; h++) y[h] += pd->bias[h];
        }
        moeq__moe_combine_token(l, io->ctx, 1, &one, (const float *const *)&y, bad[t], acc + t * H,
                                io->out_dtype, (uint8_t *)io->out + t * ld * osz);
    }
    return MOEQ_STATUS_OK;
}

moeq_status moeq__moe_apply_generic(const moeq_moe *l, void *io_ptr, moeq_error *err) {
    moeq__apply_io *io = io_ptr;
    if (!io->ctx->force_ref) return moeq__moe_apply_fast(l, io, err);
    const moeq_moe_config *c = &l->cfg;
    size_t T = (size_t)io->tokens, k = (size_t)io->top_k;
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t E = (size_t)c->num_local_experts;
    size_t pairs = T * k;

    /* Scratch: one block carved into aligned pieces. */
    size_t maxK = H > I ? H : I;
    size_t code_bytes = moeq__act_codes_bound(pairs, maxK);
    size_t scale_floats =
        pairs *
        (l->act_kind == MOEQ__ACT_FP8_GROUP ? maxK / (size_t)l->act_group + 2 : maxK / 16 + 2);
    size_t need[] = {
        T * H * 4,  pairs * H * 4,    pairs * I * 4, pairs * I * 4, MATMUL_CHUNK * maxK * 4,
        code_bytes, scale_floats * 4, (E + 1) * 4,   E * 4,         pairs * 4,
        pairs * 4,  T,                k * sizeof(float *)};
    enum { XF, XR, GATE, UP, ROWS, CODES, SCALES, STARTS, FILL, ORDER, ROW_OF, BAD, YP, NPIECES };
    size_t at[NPIECES], total = 0;
    for (int i = 0; i < NPIECES; i++) {
        at[i] = total;
        total += (need[i] + 63) & ~(size_t)63;
    }
    uint8_t *base = moeq__ctx_scratch(io->ctx, total);
    if (!base) {
        return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory (%zu bytes of scratch)",
                           l->prefix ? l->prefix : "MoE layer", total);
    }
    float *xf = (float *)(base + at[XF]);
    float *X = (float *)(base + at[XR]);
    float *gate = (float *)(base + at[GATE]);
    float *up = (float *)(base + at[UP]);
    float *rows_buf = (float *)(base + at[ROWS]);
    void *codes = base + at[CODES];
    float *scales = (float *)(base + at[SCALES]);
    int32_t *starts = (int32_t *)(base + at[STARTS]);
    int32_t *fill = (int32_t *)(base + at[FILL]);
    int32_t *order = (int32_t *)(base + at[ORDER]);
    int32_t *row_of = (int32_t *)(base + at[ROW_OF]);
    uint8_t *bad = base + at[BAD]; /* token t met a non-finite value */
    const float **yp = (const float **)(void *)(base + at[YP]); /* a token's k output rows */

    if (l->linear) return linear_generic(l, io, xf, gate, X, rows_buf, codes, scales, bad, err);
    moeq__to_f32_ref(io->x_dtype, io->x, T * H, xf);
    for (size_t t = 0; t < T; t++) bad[t] = !all_finite(xf + t * H, H);

    /* Bucket the (token, k) pairs by local expert (a counting sort, stable). */
    memset(starts, 0, sizeof(int32_t) * (E + 1));
    for (size_t p = 0; p < pairs; p++) {
        int32_t id = io->ids[p];
        int32_t e = id < 0 ? -1 : l->expert_map[id];
        row_of[p] = e;
        if (e >= 0) starts[e + 1]++;
    }
    for (size_t e = 0; e < E; e++) starts[e + 1] += starts[e];
    size_t rows = (size_t)starts[E];
    /* row_of[p] becomes the pair's row; order[row] = p. */
    memcpy(fill, starts, sizeof(int32_t) * E);
    for (size_t p = 0; p < pairs; p++) {
        int32_t e = row_of[p];
        if (e < 0) continue;
        int32_t r = fill[e]++;
        order[r] = (int32_t)p;
        row_of[p] = r;
    }
    /* GEMM1 input rows. */
    for (size_t r = 0; r < rows; r++) {
        size_t p = (size_t)order[r];
        const float *src = xf + (p / k) * H;
        float s = c->apply_router_weight_on_input ? io->weights[p] : 1.0f;
        for (size_t h = 0; h < H; h++) X[r * H + h] = src[h] * s;
    }
    float ts1 = tensor_scale_from(l->act_kind, rows_amax(X, rows, H, order, k, bad));
    const bool gated = !c->non_gated; /* non-gated: no gate projection, a = act(up) */
    for (size_t e = 0; e < E; e++) {
        size_t r0 = (size_t)starts[e], n = (size_t)starts[e + 1] - r0;
        if (!n) continue;
        const moeq__proj *pg = &l->projs[e * 3 + MOEQ__GATE], *pu = &l->projs[e * 3 + MOEQ__UP];
        float *Xe = X + r0 * H;
        moeq__act_quant_rows(l->act_kind, l->act_group, Xe, n, H, ts1, pg->act_scale, codes,
                             scales);
        if (gated) matmul_ref(&pg->w, Xe, n, gate + r0 * I, rows_buf);
        matmul_ref(&pu->w, Xe, n, up + r0 * I, rows_buf);
        for (size_t i = 0; i < n; i++) {
            float *gi = gate + (r0 + i) * I, *ui = up + (r0 + i) * I;
            if (gated && pg->bias) {
                for (size_t j = 0; j < I; j++) gi[j] += pg->bias[j];
            }
            if (pu->bias) {
                for (size_t j = 0; j < I; j++) ui[j] += pu->bias[j];
            }
            moeq__expert_act(c, gi, ui, gi, I); /* a overwrites gate */
            if (!all_finite(gi, I)) bad[(size_t)order[r0 + i] / k] = 1;
        }
    }
    float *A = gate;
    float ts2 = tensor_scale_from(l->act_kind, rows_amax(A, rows, I, order, k, bad));
    float *Y = X; /* GEMM1 rows are no longer needed */
    for (size_t e = 0; e < E; e++) {
        size_t r0 = (size_t)starts[e], n = (size_t)starts[e + 1] - r0;
        if (!n) continue;
        const moeq__proj *pd = &l->projs[e * 3 + MOEQ__DOWN];
        float *Ae = A + r0 * I;
        moeq__act_quant_rows(l->act_kind, l->act_group, Ae, n, I, ts2, pd->act_scale, codes,
                             scales);
        matmul_ref(&pd->w, Ae, n, Y + r0 * H, rows_buf);
        if (pd->bias) {
            for (size_t i = 0; i < n; i++) {
                for (size_t h = 0; h < H; h++) Y[(r0 + i) * H + h] += pd->bias[h];
            }
        }
    }
    if (io->pair_out) { /* expert parallelism: each pair's output as it is */
        float *o = io->out;
        for (size_t p = 0; p < pairs; p++) {
            if (io->pair_out[p] < 0) continue;
            float *dst = o + (size_t)io->pair_out[p] * H;
            if (bad[p / k]) {
                for (size_t h = 0; h < H; h++) dst[h] = NAN;
            } else {
                memcpy(dst, Y + (size_t)row_of[p] * H, H * sizeof(float));
            }
        }
        return MOEQ_STATUS_OK;
    }
    /* Combine in k order, then scale once (x is no longer needed: out may
     * alias it). */
    const size_t osz = moeq_dtype_size(io->out_dtype);
    for (size_t t = 0; t < T; t++) {
        for (size_t j = 0; j < k; j++) {
            size_t p = t * k + j;
            bool held = io->ids[p] >= 0 && l->expert_map[io->ids[p]] >= 0;
            yp[j] = held ? Y + (size_t)row_of[p] * H : NULL;
        }
        moeq__moe_combine_token(l, io->ctx, k, io->weights + t * k, yp, bad[t], xf + t * H,
                                io->out_dtype, (uint8_t *)io->out + t * H * osz);
    }
    return MOEQ_STATUS_OK;
}

/* ---- the float64 reference ------------------------------------------------------------ */

static double gated_act_f64(const moeq_moe_config *c, double g, double u) {
    double lim = (double)c->swiglu_limit;
    if (c->non_gated) { /* act(up); g is unused */
        switch (c->activation) {
            case MOEQ_ACT_SILU: return u / (1.0 + exp(-u));
            case MOEQ_ACT_GELU: return 0.5 * u * (1.0 + erf(u * 0.70710678118654752));
            case MOEQ_ACT_GELU_TANH:
                return 0.5 * u * (1.0 + tanh(0.79788456080286536 * (u + 0.044715 * u * u * u)));
            default: return u > 0 ? u * u : 0.0; /* RELU2 */
        }
    }
    switch (c->activation) {
        case MOEQ_ACT_SILU:
            if (lim > 0) {
                g = fmin(g, lim);
                u = fmin(fmax(u, -lim), lim);
            }
            return g / (1.0 + exp(-g)) * u;
        case MOEQ_ACT_GELU: return 0.5 * g * (1.0 + erf(g * 0.70710678118654752)) * u;
        case MOEQ_ACT_GELU_TANH:
            return 0.5 * g * (1.0 + tanh(0.79788456080286536 * (g + 0.044715 * g * g * g))) * u;
        default: {
            double L = lim > 0 ? lim : 7.0;
            g = fmin(g, L);
            u = fmin(fmax(u, -L), L);
            return g / (1.0 + exp(-(double)c->swiglu_alpha * g)) * (u + 1.0);
        }
    }
}

/* y[r] = sum_c a[c] * w[r, c] in double, w dequantized to floats. */
static void matvec_f64(const float *w, size_t rows, size_t cols, const float *a, double *y) {
    for (size_t r = 0; r < rows; r++) {
        double acc = 0;
        for (size_t c = 0; c < cols; c++) acc += (double)a[c] * (double)w[r * cols + c];
        y[r] = acc;
    }
}

moeq_status moeq_moe_apply_reference(const moeq_moe *l, int32_t x_dtype, const void *x,
                                     int64_t tokens, int32_t top_k, const int32_t *topk_ids,
                                     const float *topk_weights, double *out, moeq_error *err) {
    if (!l) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "layer is NULL");
    moeq_status st =
        check_apply(l, x_dtype, x, tokens, top_k, topk_ids, topk_weights, MOEQ_DTYPE_F32, out, err);
    if (st != MOEQ_STATUS_OK || tokens == 0) return st;
    const moeq_moe_config *c = &l->cfg;
    size_t T = (size_t)tokens, k = (size_t)top_k, H = (size_t)c->hidden_size,
           I = (size_t)c->intermediate_size, pairs = T * k, maxK = H > I ? H : I;
    float *xf = moeq__malloc(T * H * sizeof(float));
    float *X = moeq__malloc(pairs * H * sizeof(float));
    float *A = moeq__malloc(pairs * I * sizeof(float));
    double *Y = moeq__malloc(pairs * H * sizeof(double));
    double *row = moeq__malloc(2 * maxK * sizeof(double));
    float *W[3] = {moeq__malloc(I * H * sizeof(float)), moeq__malloc(I * H * sizeof(float)),
                   moeq__malloc(H * I * sizeof(float))};
    void *codes = moeq__malloc(moeq__act_codes_bound(1, maxK));
    float *scales = moeq__malloc((maxK + 2) * sizeof(float));
    uint8_t *bad = moeq__calloc(T, 1);
    if (!xf || !X || !A || !Y || !row || !W[0] || !W[1] || !W[2] || !codes || !scales || !bad) {
        st = moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory for the float64 reference");
        goto done;
    }
    moeq__to_f32_ref(x_dtype, x, T * H, xf);
    for (size_t t = 0; t < T; t++) bad[t] = !all_finite(xf + t * H, H);
    for (size_t p = 0; p < pairs; p++) {
        float s = c->apply_router_weight_on_input ? topk_weights[p] : 1.0f;
        for (size_t h = 0; h < H; h++) X[p * H + h] = xf[(p / k) * H + h] * s;
    }
    /* Dynamic per-tensor scales cover every row that reaches a projection. */
    float ts1 = 1.0f;
    {
        float amax = 0;
        for (size_t p = 0; p < pairs; p++) {
            if (topk_ids[p] < 0 || l->expert_map[topk_ids[p]] < 0 || bad[p / k]) continue;
            for (size_t h = 0; h < H; h++) amax = fmaxf(amax, fabsf(X[p * H + h]));
        }
        if (l->act_kind == MOEQ__ACT_INT8_TENSOR) ts1 = fmaxf(amax, MOEQ__ACT_INT8_EPS) / 127.0f;
        if (l->act_kind == MOEQ__ACT_FP8_TENSOR)
            ts1 = fmaxf(amax, MOEQ__ACT_FP8_EPS) / MOEQ__E4M3_MAX;
    }
    const bool gated = !c->non_gated;
    for (int32_t e = 0; e < c->num_local_experts; e++) {
        const moeq__proj *pg = &l->projs[e * 3], *pu = &l->projs[e * 3 + 1];
        bool dequantized = false;
        for (size_t p = 0; p < pairs; p++) {
            if (topk_ids[p] < 0 || l->expert_map[topk_ids[p]] != e) continue;
            if (!dequantized) {
                if (gated) moeq__dequant_ref(&pg->w, 0, I, W[0]);
                moeq__dequant_ref(&pu->w, 0, I, W[1]);
                dequantized = true;
            }
            float *xp = X + p * H;
            moeq__act_quant_rows(l->act_kind, l->act_group, xp, 1, H, ts1, pg->act_scale, codes,
                                 scales);
            if (gated) matvec_f64(W[0], I, H, xp, row);
            matvec_f64(W[1], I, H, xp, row + maxK);
            for (size_t j = 0; j < I; j++) {
                double g = gated ? row[j] + (pg->bias ? (double)pg->bias[j] : 0.0) : 0.0;
                double u = row[maxK + j] + (pu->bias ? (double)pu->bias[j] : 0.0);
                A[p * I + j] = (float)gated_act_f64(c, g, u);
            }
            if (!all_finite(A + p * I, I)) bad[p / k] = 1;
        }
    }
    float ts2 = 1.0f;
    {
        float amax = 0;
        for (size_t p = 0; p < pairs; p++) {
            if (topk_ids[p] < 0 || l->expert_map[topk_ids[p]] < 0 || bad[p / k]) continue;
            for (size_t j = 0; j < I; j++) amax = fmaxf(amax, fabsf(A[p * I + j]));
        }
        if (l->act_kind == MOEQ__ACT_INT8_TENSOR) ts2 = fmaxf(amax, MOEQ__ACT_INT8_EPS) / 127.0f;
        if (l->act_kind == MOEQ__ACT_FP8_TENSOR)
            ts2 = fmaxf(amax, MOEQ__ACT_FP8_EPS) / MOEQ__E4M3_MAX;
    }
    for (int32_t e = 0; e < c->num_local_experts; e++) {
        const moeq__proj *pd = &l->projs[e * 3 + 2];
        bool dequantized = false;
        for (size_t p = 0; p < pairs; p++) {
            if (topk_ids[p] < 0 || l->expert_map[topk_ids[p]] != e) continue;
            if (!dequantized) {
                moeq__dequant_ref(&pd->w, 0, H, W[2]);
                dequantized = true;
            }
            float *ap = A + p * I;
            moeq__act_quant_rows(l->act_kind, l->act_group, ap, 1, I, ts2, pd->act_scale, codes,
                                 scales);
            matvec_f64(W[2], H, I, ap, Y + p * H);
            if (pd->bias) {
                for (size_t h = 0; h < H; h++) Y[p * H + h] += (double)pd->bias[h];
            }
        }
    }
    for (size_t t = 0; t < T; t++) {
        double *o = out + t * H;
        for (size_t h = 0; h < H; h++) o[h] = 0;
        for (size_t j = 0; j < k; j++) {
            size_t p = t * k + j;
            if (topk_ids[p] < 0 || l->expert_map[topk_ids[p]] < 0) continue;
            double w = c->apply_router_weight_on_input ? 1.0 : (double)topk_weights[p];
            for (size_t h = 0; h < H; h++) o[h] += w * Y[p * H + h];
        }
        bool finite = !bad[t];
        for (size_t h = 0; h < H; h++) {
            o[h] *= (double)c->routed_scaling_factor;
            finite = finite && isfinite(o[h]);
        }
        if (!finite) {
            for (size_t h = 0; h < H; h++) o[h] = (double)NAN;
        }
    }
done:
    moeq__free(xf);
    moeq__free(X);
    moeq__free(A);
    moeq__free(Y);
    moeq__free(row);
    for (int i = 0; i < 3; i++) moeq__free(W[i]);
    moeq__free(codes);
    moeq__free(scales);
    moeq__free(bad);
    return st;
}

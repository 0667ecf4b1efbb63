/*
 * moe_combine.c - one token's combine: its k expert outputs added in k
 * order, scaled, checked, converted.  Both forwards (moe_apply.c,
 * moe_fast.c) and expert parallelism (src/parallel/ep.c) call this one
 * function, so that their outputs round alike (docs/parallel.md).
 */
#include "layer/moe.h"

#include <math.h>
#include <string.h>

static bool all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return false;
    }
    return true;
}

void moeq__moe_combine_token(const moeq_moe *l, const moeq_ctx *ctx, size_t k, const float *w,
                             const float *const *y, bool bad, float *acc, int32_t out_dtype,
                             void *dst) {
    const moeq_moe_config *c = &l->cfg;
    const size_t H = (size_t)c->hidden_size;
    const bool ref = ctx->force_ref;
    for (size_t h = 0; h < H; h++) acc[h] = 0;
    for (size_t j = 0; j < k; j++) {
        if (!y[j]) continue;
        float wj = c->apply_router_weight_on_input ? 1.0f : w[j];
        if (ref) {
            for (size_t h = 0; h < H; h++) acc[h] += wj * y[j][h];
        } else {
            ctx->kern->axpy(acc, y[j], wj, H);
        }
    }
    float rsf = c->routed_scaling_factor;
    if (rsf != 1.0f) {
        for (size_t h = 0; h < H; h++) acc[h] *= rsf;
    }
    if (bad || !all_finite(acc, H)) {
        for (size_t h = 0; h < H; h++) acc[h] = NAN;
    }
    if (out_dtype == MOEQ_DTYPE_F32) {
        if ((void *)acc != dst) memcpy(dst, acc, H * sizeof(float));
    } else if (out_dtype == MOEQ_DTYPE_BF16 && !ref) {
        ctx->kern->f32_to_bf16(acc, H, dst);
    } else {
        moeq__from_f32_ref(out_dtype, acc, H, dst);
    }
}

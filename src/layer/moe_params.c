/*
 * moe_params.c - the parameter families MoE schemes declare (integer, FP8
 * and FP4 weights, scales by strategy, zero points, g_idx, weight_shape,
 * global and input scales), with the shapes of sglang-moe-dispatch.md
 * section 13, and the int4 repacks some schemes apply at finalize.
 */
#include "layer/moe_params.h"

#include <stdio.h>
#include <string.h>

static moeq_status add(moeq_moe *l, const char *name, int32_t dtype, int32_t ndim,
                       const int64_t *shape, const char *suffix, int32_t layout,
                       int32_t quant_method, bool transposed, bool required, uint32_t ckpt,
                       moeq_error *err) {
    moeq__param_spec s;
    memset(&s, 0, sizeof s);
    s.name = name;
    s.dtype = dtype;
    s.ndim = ndim;
    for (int32_t i = 0; i < ndim; i++) s.shape[i] = shape[i];
    s.suffix = suffix;
    s.layout = layout;
    s.quant_method = quant_method;
    s.is_transposed = transposed;
    s.required = required;
    s.ckpt_dtypes = ckpt;
    return moeq__moe_add_param(l, &s, err);
}

/* [E, a, b], or [E, b, a] when transposed. */
static moeq_status add3(moeq_moe *l, const char *name, int32_t dtype, int64_t a, int64_t b,
                        const char *suffix, int32_t layout, int32_t qm, bool transposed,
                        bool required, uint32_t ckpt, moeq_error *err) {
    int64_t E = l->cfg.num_local_experts;
    int64_t shape[3] = {E, transposed ? b : a, transposed ? a : b};
    return add(l, name, dtype, 3, shape, suffix, layout, qm, transposed, required, ckpt, err);
}

static int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

bool moeq__moe_legacy_packing(const moeq_moe *l) {
    return (l->cfg.dequant_flags & MOEQ_DEQUANT_LEGACY_PACKING) != 0;
}

int64_t moeq__moe_packed_words(const moeq_moe *l, int64_t n) {
    return (int64_t)moeq__int_packed_words((size_t)n, (int)l->weights.num_bits,
                                           moeq__moe_legacy_packing(l));
}

/* ---- weights -------------------------------------------------------------------- */

moeq_status moeq__moe_add_int_weights(moeq_moe *l, bool transposed, const char *const *names,
                                      moeq_error *err) {
    moeq__dims d = moeq__moe_dims(l);
    bool packed = l->cfg.format == MOEQ_FORMAT_PACK_QUANTIZED;
    const char *n13 = names ? names[0] : packed ? "w13_weight_packed" : "w13_weight";
    const char *n2 = names ? names[1] : packed ? "w2_weight_packed" : "w2_weight";
    if (packed) {
        moeq_status st = add3(l, n13, MOEQ_DTYPE_I32, d.S * d.I, moeq__moe_packed_words(l, d.H),
                              "weight_packed", MOEQ_LAYOUT_SHARDED, -1, transposed, true,
                              MOEQ__DT(I32), err);
        if (st != MOEQ_STATUS_OK) return st;
        st = add3(l, n2, MOEQ_DTYPE_I32, d.H, moeq__moe_packed_words(l, d.I), "weight_packed",
                  MOEQ_LAYOUT_SHARDED, -1, transposed, true, MOEQ__DT(I32), err);
        if (st != MOEQ_STATUS_OK) return st;
        return moeq__moe_add_weight_shape(l, err);
    }
    /* int-quantized / naive-quantized: one int8 per weight, checkpoint orientation. */
    moeq_status st = add3(l, n13, MOEQ_DTYPE_I8, d.S * d.I, d.H, "weight", MOEQ_LAYOUT_SHARDED, -1,
                          false, true, MOEQ__DT(I8), err);
    if (st != MOEQ_STATUS_OK) return st;
    return add3(l, n2, MOEQ_DTYPE_I8, d.H, d.I, "weight", MOEQ_LAYOUT_SHARDED, -1, false, true,
                MOEQ__DT(I8), err);
}

moeq_status moeq__moe_add_weight_shape(moeq_moe *l, moeq_error *err) {
    int64_t shape[2] = {l->cfg.num_local_experts, 2};
    moeq_status st = add(l, "w13_weight_shape", MOEQ_DTYPE_I64, 2, shape, "weight_shape",
                         MOEQ_LAYOUT_SHARED, -1, false, true, MOEQ__DT(I64) | MOEQ__DT(I32), err);
    if (st != MOEQ_STATUS_OK) return st;
    return add(l, "w2_weight_shape", MOEQ_DTYPE_I64, 2, shape, "weight_shape", MOEQ_LAYOUT_SHARED,
               -1, false, true, MOEQ__DT(I64) | MOEQ__DT(I32), err);
}

moeq_status moeq__moe_add_float_weights(moeq_moe *l, int32_t dtype, uint32_t ckpt,
                                        moeq_error *err) {
    moeq__dims d = moeq__moe_dims(l);
    moeq_status st = add3(l, "w13_weight", dtype, d.S * d.I, d.H, "weight", MOEQ_LAYOUT_SHARDED, -1,
                          false, true, ckpt, err);
    if (st != MOEQ_STATUS_OK) return st;
    return add3(l, "w2_weight", dtype, d.H, d.I, "weight", MOEQ_LAYOUT_SHARDED, -1, false, true,
                ckpt, err);
}

moeq_status moeq__moe_add_fp4_weights(moeq_moe *l, moeq_error *err) {
    moeq__dims d = moeq__moe_dims(l);
    if (l->linear && d.I % 2) { /* one projection: only its rows are packed */
        return moeq__error(err, MOEQ_STATUS_SHAPE,
                           "%s: FP4 weights pack two values per byte; in_features (%lld) must "
                           "be even",
                           l->scheme->name, (long long)d.I);
    }
    if (!l->linear && (d.H % 2 || d.I % 2)) {
        return moeq__error(err, MOEQ_STATUS_SHAPE,
                           "%s: FP4 weights pack two values per byte; hidden_size (%lld) and "
                           "intermediate_size (%lld) must be even",
                           l->scheme->name, (long long)d.H, (long long)d.I);
    }
    moeq_status st = add3(l, "w13_weight_packed", MOEQ_DTYPE_U8, d.S * d.I, d.H / 2, "weight_packed",
                          MOEQ_LAYOUT_SHARDED, -1, false, true, MOEQ__DT(U8), err);
    if (st != MOEQ_STATUS_OK) return st;
    return add3(l, "w2_weight_packed", MOEQ_DTYPE_U8, d.H, d.I / 2, "weight_packed",
                MOEQ_LAYOUT_SHARDED, -1, false, true, MOEQ__DT(U8), err);
}

moeq_status moeq__moe_add_fp6_weights(moeq_moe *l, moeq_error *err) {
    moeq__dims d = moeq__moe_dims(l);
    if (l->linear && d.I % 4) { /* one projection: only its rows are packed */
        return moeq__error(err, MOEQ_STATUS_SHAPE,
                           "%s: FP6 weights pack four values in three bytes; in_features (%lld) "
                           "must be a multiple of 4",
                           l->scheme->name, (long long)d.I);
    }
    if (!l->linear && (d.H % 4 || d.I % 4)) {
        return moeq__error(err, MOEQ_STATUS_SHAPE,
                           "%s: FP6 weights pack four values in three bytes; hidden_size (%lld) "
                           "and intermediate_size (%lld) must be multiples of 4",
                           l->scheme->name, (long long)d.H, (long long)d.I);
    }
    moeq_status st = add3(l, "w13_weight_packed", MOEQ_DTYPE_U8, d.S * d.I, d.H / 4 * 3,
                          "weight_packed", MOEQ_LAYOUT_SHARDED, -1, false, true, MOEQ__DT(U8), err);
    if (st != MOEQ_STATUS_OK) return st;
    return add3(l, "w2_weight_packed", MOEQ_DTYPE_U8, d.H, d.I / 4 * 3, "weight_packed",
                MOEQ_LAYOUT_SHARDED, -1, false, true, MOEQ__DT(U8), err);
}

/* ---- scales, zero points, g_idx ------------------------------------------------------ */

moeq_status moeq__moe_add_scales(moeq_moe *l, int32_t dtype, uint32_t ckpt, bool transposed,
                                 moeq_error *err) {
    moeq__dims d = moeq__moe_dims(l);
    const moeq_quant_args *w = &l->weights;
    int32_t qm = w->strategy;
    moeq_status st;
    switch (w->strategy) {
        case MOEQ_STRATEGY_TENSOR: {
            int64_t s13[2] = {d.E, d.S}, s2[1] = {d.E};
            st = add(l, "w13_weight_scale", dtype, 2, s13, "weight_scale", MOEQ_LAYOUT_PER_SHARD,
                     qm, false, true, ckpt, err);
            if (st != MOEQ_STATUS_OK) return st;
            return add(l, "w2_weight_scale", dtype, 1, s2, "weight_scale", MOEQ_LAYOUT_PER_SHARD,
                       qm, false, true, ckpt, err);
        }
        case MOEQ_STRATEGY_CHANNEL:
            st = add3(l, "w13_weight_scale", dtype, d.S * d.I, 1, "weight_scale", MOEQ_LAYOUT_SHARDED,
                      qm, transposed, true, ckpt, err);
            if (st != MOEQ_STATUS_OK) return st;
            return add3(l, "w2_weight_scale", dtype, d.H, 1, "weight_scale", MOEQ_LAYOUT_SHARDED,
                        qm, transposed, true, ckpt, err);
        case MOEQ_STRATEGY_GROUP:
        case MOEQ_STRATEGY_TENSOR_GROUP: {
            int64_t g = w->group_size;
            st = add3(l, "w13_weight_scale", dtype, d.S * d.I, ceil_div(d.H, g), "weight_scale",
                      MOEQ_LAYOUT_SHARDED, qm, transposed, true, ckpt, err);
            if (st != MOEQ_STATUS_OK) return st;
            return add3(l, "w2_weight_scale", dtype, d.H, ceil_div(d.I, g), "weight_scale",
                        MOEQ_LAYOUT_SHARDED, qm, transposed, true, ckpt, err);
        }
        case MOEQ_STRATEGY_BLOCK: {
            int64_t bn = w->block_rows, bk = w->block_cols;
            if (!l->linear && d.I % bn) { /* a linear layer has no gate and up */
                return moeq__error(err, MOEQ_STATUS_SHAPE,
                                   "%s: intermediate_size %lld is not divisible by the weight "
                                   "block's rows (%lld): gate and up would share scale blocks",
                                   l->scheme->name, (long long)d.I, (long long)bn);
            }
            st = add3(l, "w13_weight_scale", dtype, d.S * (d.I / bn), ceil_div(d.H, bk),
                      "weight_scale", MOEQ_LAYOUT_SHARDED, qm, false, true, ckpt, err);
            if (st != MOEQ_STATUS_OK) return st;
            return add3(l, "w2_weight_scale", dtype, ceil_div(d.H, bn), ceil_div(d.I, bk),
                        "weight_scale", MOEQ_LAYOUT_SHARDED, qm, false, true, ckpt, err);
        }
        default:
            return moeq__error(err, MOEQ_STATUS_UNSUPPORTED,
                               "%s: weight strategy %s has no scale "
                               "layout",
                               l->scheme->name, moeq_strategy_name(w->strategy));
    }
}

moeq_status moeq__moe_add_zero_points(moeq_moe *l, bool transposed, moeq_error *err) {
    if (l->weights.symmetric) return MOEQ_STATUS_OK;
    moeq__dims d = moeq__moe_dims(l);
    const moeq_quant_args *w = &l->weights;
    int32_t qm = w->strategy;
    if (w->strategy == MOEQ_STRATEGY_TENSOR) {
        int64_t s13[2] = {d.E, d.S}, s2[1] = {d.E};
        moeq_status st = add(l, "w13_weight_zero_point", MOEQ_DTYPE_I8, 2, s13, "weight_zero_point",
                             MOEQ_LAYOUT_PER_SHARD, qm, false, true, MOEQ__DT(I8), err);
        if (st != MOEQ_STATUS_OK) return st;
        return add(l, "w2_weight_zero_point", MOEQ_DTYPE_I8, 1, s2, "weight_zero_point",
                   MOEQ_LAYOUT_PER_SHARD, qm, false, true, MOEQ__DT(I8), err);
    }
    int64_t g13 = w->strategy == MOEQ_STRATEGY_CHANNEL ? 1 : ceil_div(d.H, w->group_size);
    int64_t g2 = w->strategy == MOEQ_STRATEGY_CHANNEL ? 1 : ceil_div(d.I, w->group_size);
    if (l->cfg.format == MOEQ_FORMAT_PACK_QUANTIZED) {
        /* Packed along the output dimension: each shard packs its own rows. */
        moeq_status st = add3(l, "w13_weight_zero_point", MOEQ_DTYPE_I32,
                              d.S * moeq__moe_packed_words(l, d.I), g13, "weight_zero_point",
                              MOEQ_LAYOUT_SHARDED, qm, transposed, true, MOEQ__DT(I32), err);
        if (st != MOEQ_STATUS_OK) return st;
        return add3(l, "w2_weight_zero_point", MOEQ_DTYPE_I32, moeq__moe_packed_words(l, d.H), g2,
                    "weight_zero_point", MOEQ_LAYOUT_SHARDED, qm, transposed, true, MOEQ__DT(I32),
                    err);
    }
    moeq_status st =
        add3(l, "w13_weight_zero_point", MOEQ_DTYPE_I8, d.S * d.I, g13, "weight_zero_point",
             MOEQ_LAYOUT_SHARDED, qm, false, true, MOEQ__DT(I8), err);
    if (st != MOEQ_STATUS_OK) return st;
    return add3(l, "w2_weight_zero_point", MOEQ_DTYPE_I8, d.H, g2, "weight_zero_point",
                MOEQ_LAYOUT_SHARDED, qm, false, true, MOEQ__DT(I8), err);
}

moeq_status moeq__moe_add_g_idx(moeq_moe *l, moeq_error *err) {
    const moeq_quant_args *w = &l->weights;
    if (w->strategy != MOEQ_STRATEGY_GROUP) return MOEQ_STATUS_OK;
    moeq__dims d = moeq__moe_dims(l);
    bool required = moeq_actorder_is_group(w->actorder);
    int64_t s13[2] = {d.E, d.H}, s2[2] = {d.E, d.I};
    moeq_status st = add(l, "w13_weight_g_idx", MOEQ_DTYPE_I32, 2, s13, "weight_g_idx",
                         MOEQ_LAYOUT_SHARED, -1, false, required, MOEQ__DT(I32), err);
    if (st != MOEQ_STATUS_OK) return st;
    return add(l, "w2_weight_g_idx", MOEQ_DTYPE_I32, 2, s2, "weight_g_idx", MOEQ_LAYOUT_SHARED, -1,
               false, required, MOEQ__DT(I32), err);
}

moeq_status moeq__moe_add_per_shard(moeq_moe *l, const char *base, const char *suffix,
                                    moeq_error *err) {
    moeq__dims d = moeq__moe_dims(l);
    char n13[48], n2[48];
    snprintf(n13, sizeof n13, "w13_%s", base);
    snprintf(n2, sizeof n2, "w2_%s", base);
    int64_t s13[2] = {d.E, d.S}, s2[1] = {d.E};
    moeq_status st = add(l, n13, MOEQ_DTYPE_F32, 2, s13, suffix, MOEQ_LAYOUT_PER_SHARD,
                         MOEQ_STRATEGY_TENSOR, false, true, MOEQ__FLOAT_DTYPES, err);
    if (st != MOEQ_STATUS_OK) return st;
    return add(l, n2, MOEQ_DTYPE_F32, 1, s2, suffix, MOEQ_LAYOUT_PER_SHARD, MOEQ_STRATEGY_TENSOR,
               false, true, MOEQ__FLOAT_DTYPES, err);
}

moeq_status moeq__moe_add_static_input_scales(moeq_moe *l, moeq_error *err) {
    if (!l->has_inputs || l->inputs.dynamic != MOEQ_DYNAMIC_FALSE) return MOEQ_STATUS_OK;
    moeq__dims d = moeq__moe_dims(l);
    int64_t s[1] = {d.E};
    /* gate and up read the same input: one scale they must agree on. */
    moeq_status st =
        add(l, "w13_input_scale", MOEQ_DTYPE_F32, 1, s, "input_scale", MOEQ_LAYOUT_SHARED,
            MOEQ_STRATEGY_TENSOR, false, true, MOEQ__FLOAT_DTYPES, err);
    if (st != MOEQ_STATUS_OK) return st;
    return add(l, "w2_input_scale", MOEQ_DTYPE_F32, 1, s, "input_scale", MOEQ_LAYOUT_SHARED,
               MOEQ_STRATEGY_TENSOR, false, true, MOEQ__FLOAT_DTYPES, err);
}

moeq_status moeq__moe_add_derived(moeq_moe *l, const char *name, int32_t dtype, int64_t a,
                                  int64_t b, moeq_error *err) {
    return add3(l, name, dtype, a, b, "", MOEQ_LAYOUT_DERIVED, -1, false, false, 0, err);
}

/* ---- whole families, shared by several schemes ------------------------------------------ */

moeq_status moeq__moe_add_int8_family(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_add_int_weights(l, false, NULL, err);
    if (st == MOEQ_STATUS_OK)
        st = moeq__moe_add_scales(l, MOEQ_DTYPE_F32, MOEQ__FLOAT_DTYPES, false, err);
    if (st == MOEQ_STATUS_OK) st = moeq__moe_add_static_input_scales(l, err);
    return st;
}

moeq_status moeq__moe_add_nvfp4_family(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_add_fp4_weights(l, err);
    if (st == MOEQ_STATUS_OK)
        st = moeq__moe_add_scales(l, MOEQ_DTYPE_F8_E4M3, MOEQ__DT(F8_E4M3), false, err);
    if (st == MOEQ_STATUS_OK)
        st = moeq__moe_add_per_shard(l, "weight_global_scale", "weight_global_scale", err);
    return st;
}

/* ---- finalize helpers ------------------------------------------------------------------ */

moeq_status moeq__moe_repack_int4(moeq_moe *l, moeq_error *err) {
    size_t n = (size_t)l->cfg.num_local_experts * 3u;
    for (size_t i = 0; i < n; i++) {
        moeq__qweight *w = &l->projs[i].w;
        if (w->kind != MOEQ__QW_INT_PACKED || w->bits != 4) continue;
        size_t stride = (w->cols + 1) / 2;
        uint8_t *bytes = moeq__moe_alloc(l, w->rows * stride);
        if (!bytes) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory repacking int4");
        for (size_t r = 0; r < w->rows; r++) {
            moeq__mxint4_repack_ref((const uint8_t *)w->codes + r * w->row_stride, w->cols,
                                    bytes + r * stride);
        }
        w->kind = MOEQ__QW_INT4_NIBBLES;
        w->codes = bytes;
        w->row_stride = stride;
    }
    return MOEQ_STATUS_OK;
}

moeq_status moeq__moe_finalize_int4_repacked(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_finalize_ct(l, err);
    if (st == MOEQ_STATUS_OK) st = moeq__moe_repack_int4(l, err);
    return st;
}

void moeq__moe_release_transposed(moeq_moe *l) {
    /* finalize copied them back to checkpoint orientation; the kernels never
     * read the transposed buffers again. */
    for (uint32_t i = 0; i < l->n_params; i++) {
        moeq__param *p = &l->params[i];
        if (!p->pub.is_transposed) continue;
        moeq__free(p->pub.data);
        p->pub.data = NULL;
    }
}

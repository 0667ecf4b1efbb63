/* npu_w4a8_int8.c - the Ascend W4A8 layout (int4 pairs in int8), dynamic
 * per-token int8 activations, computed on the CPU.
 *
 * Layout (sglang-moe-dispatch.md 13.7 gives the names and shapes; the byte
 * order is moeq's, stated here): the int4 values are two's-complement
 * nibbles, the even element in the low nibble.
 *   w13_weight I8 [E, I, H]: the [2I, H] int4 matrix (gate rows, then up
 *                rows) with pairs along H, i.e. [2I, H/2] bytes viewed as [I, H]
 *                (non-gated experts: up alone, [E, I, H/2]);
 *   w2_weight  I8 [E, H/2, I]: the [H, I] int4 matrix with pairs along H
 *                (dim 0): byte (r, c) holds elements (2r, c) and (2r+1, c);
 *   w13_weight_scale / w2_weight_scale F32 channel scales [E, N, 1];
 *   w13_weight_offset / w2_weight_offset F32 [E, N, 1], zero (symmetric).
 * Group weights (the common W4A8 config: int4 group 128, which SGLang's
 * _is_dynamic_token_w4a8 accepts as it does channel weights) add the grouped
 * parameters of its NPU W4A8 scheme (13.7, _init_extra_scale_params):
 *   w13_weight_scale_second / w2_weight_scale_second F32 [E, 2I, H/g] /
 *                [E, H, I/g]: the checkpoint's weight_scale (group scales);
 *   w13_weight_offset_second / w2_weight_offset_second F32, same shapes,
 *                zero (symmetric);
 * and the channel scale *_weight_scale is then derived, 1: a weight is
 * q * scale * scale_second[group], the group scale alone as the checkpoint
 * has it.  H and I must be multiples of g (the shapes divide by it).
 * Checkpoints give weight_packed (I32 words) or weight (I8 holding int4
 * values); the loader converts either.  Finalize turns both matrices into
 * the row-major nibble layout the kernels read. */
#include "layer/moe_params.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!in->opts || in->opts->platform != MOEQ_PLATFORM_NPU) {
        return moeq__reject(why, n, "platform is not npu");
    }
    if (!moeq__need_int4_sym_weights(in, why, n)) return false;
    if (!moeq__need_weight_strategy(in, MOEQ__GROUP_OR_CHANNEL, why, n)) return false;
    if (!moeq__need_input_type(in, MOEQ_QTYPE_INT, 8, why, n)) return false;
    if (!moeq__need_input_mode(in, MOEQ__BIT(MOEQ_STRATEGY_TOKEN), false, why, n)) return false;
    return moeq__need_format(in, MOEQ__INT_FORMATS, why, n);
}

/* Reads one checkpoint projection ([rows, cols] int4 values, packed words or
 * int8) into q (rows x cols), checking shape and range. */
static moeq_status read_int4(const moeq_moe *l, const moeq_tensor *t, int64_t rows, int64_t cols,
                             int8_t *q, moeq_error *err) {
    bool packed = t->dtype == MOEQ_DTYPE_I32;
    int64_t want_cols = packed ? (int64_t)moeq__int_packed_words((size_t)cols, 4, false) : cols;
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != want_cols) {
        return moeq__error(err, MOEQ_STATUS_SHAPE,
                           "tensor \"%s\": shape must be [%lld, %lld] (%s of a [%lld, %lld] int4 "
                           "projection)",
                           t->name, (long long)rows, (long long)want_cols,
                           packed ? "int32 words" : "int8 values", (long long)rows,
                           (long long)cols);
    }
    for (int64_t r = 0; r < rows; r++) {
        int8_t *dst = q + r * cols;
        if (packed) {
            moeq__int_unpack_row_ref((const uint8_t *)t->data + (size_t)(r * want_cols) * 4, 0,
                                     (size_t)cols, 4, false, dst);
            continue;
        }
        memcpy(dst, (const int8_t *)t->data + r * cols, (size_t)cols);
        for (int64_t c = 0; c < cols; c++) {
            if (dst[c] < -8 || dst[c] > 7) {
                return moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                                   "tensor \"%s\"[%lld, %lld] = %d is outside the int4 range "
                                   "[-8, 7]",
                                   t->name, (long long)r, (long long)c, (int)dst[c]);
            }
        }
    }
    (void)l;
    return MOEQ_STATUS_OK;
}

static uint8_t nibbles(int8_t lo, int8_t hi) {
    return (uint8_t)(((uint8_t)lo & 0xFu) | (((uint8_t)hi & 0xFu) << 4));
}

/* gate/up -> rows [slot*I, slot*I + I) of the [S*I, H] matrix, pairs along H. */
static moeq_status load_w13(moeq_moe *l, moeq__param *p, int32_t e, int32_t shard,
                            const moeq_tensor *t, moeq_error *err) {
    moeq__dims d = moeq__moe_dims(l);
    int8_t *q = moeq__malloc((size_t)(d.I * d.H) + 1);
    if (!q) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory loading %s", t->name);
    moeq_status st = read_int4(l, t, d.I, d.H, q, err);
    if (st == MOEQ_STATUS_OK) {
        size_t row_bytes = (size_t)d.H / 2;
        uint8_t *dst = (uint8_t *)p->pub.data + (size_t)e * (size_t)d.S * (size_t)d.I * row_bytes +
                       (size_t)moeq__moe_slot(l, shard) * (size_t)d.I * row_bytes;
        for (int64_t r = 0; r < d.I; r++) {
            for (size_t b = 0; b < row_bytes; b++) {
                dst[(size_t)r * row_bytes + b] =
                    nibbles(q[r * d.H + 2 * (int64_t)b], q[r * d.H + 2 * (int64_t)b + 1]);
            }
        }
    }
    moeq__free(q);
    return st;
}

/* down -> [H/2, I] bytes, pairs along H. */
static moeq_status load_w2(moeq_moe *l, moeq__param *p, int32_t e, int32_t shard,
                           const moeq_tensor *t, moeq_error *err) {
    (void)shard;
    moeq__dims d = moeq__moe_dims(l);
    int8_t *q = moeq__malloc((size_t)(d.I * d.H) + 1);
    if (!q) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory loading %s", t->name);
    moeq_status st = read_int4(l, t, d.H, d.I, q, err);
    if (st == MOEQ_STATUS_OK) {
        /* Each expert's slice is [H/2, I] bytes. */
        uint8_t *dst = (uint8_t *)p->pub.data + (size_t)e * (size_t)(d.H / 2) * (size_t)d.I;
        for (int64_t r = 0; r < d.H / 2; r++) {
            for (int64_t c = 0; c < d.I; c++) {
                dst[r * d.I + c] = nibbles(q[(2 * r) * d.I + c], q[(2 * r + 1) * d.I + c]);
            }
        }
    }
    moeq__free(q);
    return st;
}

static bool grouped(const moeq_moe *l) {
    return l->weights.strategy == MOEQ_STRATEGY_GROUP;
}

/* [E, rows, cols] F32. */
static moeq_status add_f32(moeq_moe *l, const char *name, int64_t rows, int64_t cols,
                           const char *suffix, moeq_error *err) {
    const bool derived = suffix == NULL;
    moeq__param_spec ps = {name,
                           MOEQ_DTYPE_F32,
                           3,
                           {l->cfg.num_local_experts, rows, cols},
                           derived ? "" : suffix,
                           derived ? MOEQ_LAYOUT_DERIVED : MOEQ_LAYOUT_SHARDED,
                           derived ? -1 : MOEQ_STRATEGY_GROUP,
                           0,
                           !derived,
                           derived ? 0u : MOEQ__FLOAT_DTYPES,
                           NULL};
    return moeq__moe_add_param(l, &ps, err);
}

/* Group weights: the checkpoint's group scales as *_weight_scale_second, the
 * channel scale and the offsets derived. */
static moeq_status add_grouped_scales(moeq_moe *l, moeq_error *err) {
    moeq__dims d = moeq__moe_dims(l);
    const int64_t g = l->weights.group_size;
    if (g <= 0 || d.H % g || d.I % g) {
        return moeq__error(err, MOEQ_STATUS_SHAPE,
                           "npu_w4a8_int8: hidden_size %lld and intermediate_size %lld must be "
                           "multiples of the weight group_size %lld (the grouped scales are "
                           "[E, 2I, H/g] and [E, H, I/g])",
                           (long long)d.H, (long long)d.I, (long long)g);
    }
    moeq_status st = add_f32(l, "w13_weight_scale_second", d.S * d.I, d.H / g, "weight_scale", err);
    if (st == MOEQ_STATUS_OK)
        st = add_f32(l, "w2_weight_scale_second", d.H, d.I / g, "weight_scale", err);
    if (st == MOEQ_STATUS_OK)
        st = add_f32(l, "w13_weight_offset_second", d.S * d.I, d.H / g, NULL, err);
    if (st == MOEQ_STATUS_OK) st = add_f32(l, "w2_weight_offset_second", d.H, d.I / g, NULL, err);
    if (st == MOEQ_STATUS_OK) st = add_f32(l, "w13_weight_scale", d.S * d.I, 1, NULL, err);
    if (st == MOEQ_STATUS_OK) st = add_f32(l, "w2_weight_scale", d.H, 1, NULL, err);
    return st;
}

static moeq_status create_weights(moeq_moe *l, moeq_error *err) {
    moeq__dims d = moeq__moe_dims(l);
    if (d.H % 2) {
        return moeq__error(err, MOEQ_STATUS_SHAPE,
                           "npu_w4a8_int8: hidden_size %lld must be even (int4 pairs along H)",
                           (long long)d.H);
    }
    uint32_t ckpt = l->cfg.format == MOEQ_FORMAT_PACK_QUANTIZED ? MOEQ__DT(I32) : MOEQ__DT(I8);
    const char *suffix = l->cfg.format == MOEQ_FORMAT_PACK_QUANTIZED ? "weight_packed" : "weight";
    moeq__param_spec w13 = {"w13_weight",
                            MOEQ_DTYPE_I8,
                            3,
                            {d.E, d.I, d.S * d.H / 2},
                            suffix,
                            MOEQ_LAYOUT_SHARDED,
                            -1,
                            0,
                            1,
                            ckpt,
                            load_w13};
    moeq__param_spec w2 = {
        "w2_weight", MOEQ_DTYPE_I8, 3,      {d.E, d.H / 2, d.I}, suffix, MOEQ_LAYOUT_SHARDED, -1, 0,
        1,           ckpt,          load_w2};
    moeq_status st = moeq__moe_add_param(l, &w13, err);
    if (st == MOEQ_STATUS_OK) st = moeq__moe_add_param(l, &w2, err);
    if (st == MOEQ_STATUS_OK && l->cfg.format == MOEQ_FORMAT_PACK_QUANTIZED) {
        st = moeq__moe_add_weight_shape(l, err);
    }
    if (st == MOEQ_STATUS_OK && grouped(l)) {
        st = add_grouped_scales(l, err);
    } else if (st == MOEQ_STATUS_OK) {
        st = moeq__moe_add_scales(l, MOEQ_DTYPE_F32, MOEQ__FLOAT_DTYPES, false, err);
    }
    if (st == MOEQ_STATUS_OK) {
        st = moeq__moe_add_derived(l, "w13_weight_offset", MOEQ_DTYPE_F32, d.S * d.I, 1, err);
    }
    if (st == MOEQ_STATUS_OK) {
        st = moeq__moe_add_derived(l, "w2_weight_offset", MOEQ_DTYPE_F32, d.H, 1, err);
    }
    return st;
}

/* The scales of rows [r0, r0 + n) of an expert (`cols` per row: 1 for
 * channel scales, H/g or I/g for group ones), checked finite. */
static moeq_status take_scales(moeq_moe *l, const char *name, int32_t e, size_t r0, size_t n,
                               size_t cols, float **out, moeq_error *err) {
    moeq__param *p = moeq__moe_param(l, name);
    const size_t per_expert = (size_t)p->pub.shape[1] * cols;
    float *s = moeq__moe_alloc(l, n * cols * sizeof(float));
    if (!s) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory finalizing %s", name);
    moeq__to_f32_ref(MOEQ_DTYPE_F32,
                     (const float *)p->pub.data + (size_t)e * per_expert + r0 * cols, n * cols, s);
    for (size_t i = 0; i < n * cols; i++) {
        if (!isfinite(s[i])) {
            return moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                               "%s: %s of expert %d, row %zu is %g; scales must be finite",
                               l->prefix ? l->prefix : "MoE layer", name,
                               (int)l->local_to_global[e], r0 + i / cols, (double)s[i]);
        }
    }
    *out = s;
    return MOEQ_STATUS_OK;
}

/* Derived channel scales of group weights: 1 (the group scale is the whole scale). */
static void fill_ones(moeq_moe *l, const char *name) {
    moeq__param *p = moeq__moe_param(l, name);
    if (!p || !p->pub.data) return;
    float *v = p->pub.data;
    for (size_t i = 0; i < p->pub.nbytes / sizeof(float); i++) v[i] = 1.0f;
}

static moeq_status finalize(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_act_kind(l, &l->act_kind, &l->act_group, err);
    if (st != MOEQ_STATUS_OK) return st;
    moeq__dims d = moeq__moe_dims(l);
    const moeq__param *w13 = moeq__moe_param(l, "w13_weight");
    const moeq__param *w2 = moeq__moe_param(l, "w2_weight");
    size_t I = (size_t)d.I, H = (size_t)d.H, stride2 = (I + 1) / 2;
    /* group weights: scales per g columns, from *_weight_scale_second */
    const bool grp = grouped(l);
    const size_t g13 = grp ? (size_t)l->weights.group_size : H;
    const size_t g2 = grp ? (size_t)l->weights.group_size : I;
    const char *s13 = grp ? "w13_weight_scale_second" : "w13_weight_scale";
    const char *s2 = grp ? "w2_weight_scale_second" : "w2_weight_scale";
    if (grp) {
        fill_ones(l, "w13_weight_scale");
        fill_ones(l, "w2_weight_scale");
    }
    for (int32_t e = 0; e < l->cfg.num_local_experts; e++) {
        const size_t S = (size_t)d.S;
        /* a linear layer has no w13 (moeq__moe_add_param adds none) */
        const uint8_t *slice13 =
            w13 ? (const uint8_t *)w13->pub.data + (size_t)e * S * I * (H / 2) : NULL;
        for (int32_t shard = 0; shard < 2 && w13; shard++) {
            if (!moeq__moe_has_proj(l, shard)) continue;
            size_t slot = (size_t)moeq__moe_slot(l, shard);
            moeq__proj *pj = &l->projs[e * 3 + shard];
            float *s;
            st = take_scales(l, s13, e, slot * I, I, H / g13, &s, err);
            if (st != MOEQ_STATUS_OK) return st;
            pj->w = (moeq__qweight){.kind = MOEQ__QW_INT4_NIBBLES,
                                    .bits = 4,
                                    .rows = I,
                                    .cols = H,
                                    .codes = slice13 + slot * I * (H / 2),
                                    .row_stride = H / 2,
                                    .grid = {I, H / g13, 1, g13},
                                    .scale = s};
        }
        /* down: pairs along H -> pairs along I, row-major [H, ceil(I/2)] */
        const uint8_t *src = (const uint8_t *)w2->pub.data + (size_t)e * (H / 2) * I;
        uint8_t *dst = moeq__moe_alloc(l, H * stride2);
        if (!dst) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory finalizing w2_weight");
        for (size_t r = 0; r < H; r++) {
            for (size_t c = 0; c < I; c++) {
                uint8_t b = src[(r / 2) * I + c];
                uint8_t nib = (r & 1u) ? (uint8_t)(b >> 4) : (uint8_t)(b & 0xFu);
                dst[r * stride2 + c / 2] |= (uint8_t)(nib << ((c & 1u) * 4));
            }
        }
        float *s;
        st = take_scales(l, s2, e, 0, H, I / g2, &s, err);
        if (st != MOEQ_STATUS_OK) return st;
        l->projs[e * 3 + 2].w = (moeq__qweight){.kind = MOEQ__QW_INT4_NIBBLES,
                                                .bits = 4,
                                                .rows = H,
                                                .cols = I,
                                                .codes = dst,
                                                .row_stride = stride2,
                                                .grid = {H, I / g2, 1, g2},
                                                .scale = s};
    }
    return MOEQ_STATUS_OK;
}

const moeq__scheme moeq__scheme_npu_w4a8_int8 = {
    .id = MOEQ_SCHEME_NPU_W4A8_INT8,
    .name = "npu_w4a8_int8",
    .summary = "Ascend W4A8 layout, channel or group int4 (dynamic per-token int8 inputs), "
               "computed on the CPU",
    .accepts = accepts,
    .create_weights = create_weights,
    .finalize = finalize,
    .apply = moeq__moe_apply_generic,
};

/* npu_w4a16_int4.c - the Ascend W4A16 int4 layout (w13_weight int32
 * [E, 2I, H/8], bf16 scale/offset), computed on the CPU. */
#include "layer/moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!in->opts || in->opts->platform != MOEQ_PLATFORM_NPU) {
        return moeq__reject(why, n, "platform is not npu");
    }
    if (!moeq__need_int4_sym_weights(in, why, n)) return false;
    if (!moeq__need_no_inputs(in, why, n)) return false;
    return moeq__need_format(in, MOEQ__BIT(MOEQ_FORMAT_PACK_QUANTIZED), why, n);
}

/* The Ascend W4A16 names and shapes (sglang-moe-dispatch.md 13.7): the packed
 * words are w13_weight [E, 2I, K/8] (loaded from weight_packed), bf16 scales,
 * and a weight offset of the scale's shape, which finalize leaves at zero
 * (the scheme is symmetric). */
static moeq_status create_weights(moeq_moe *l, moeq_error *err) {
    static const char *const names[2] = {"w13_weight", "w2_weight"};
    moeq_status st = moeq__moe_add_int_weights(l, false, names, err);
    if (st == MOEQ_STATUS_OK)
        st = moeq__moe_add_scales(l, l->cfg.params_dtype, MOEQ__FLOAT_DTYPES, false, err);
    if (st != MOEQ_STATUS_OK) return st;
    moeq__dims d = moeq__moe_dims(l);
    bool channel = l->weights.strategy == MOEQ_STRATEGY_CHANNEL;
    int64_t g13 = channel ? 1 : (d.H + l->weights.group_size - 1) / l->weights.group_size;
    int64_t g2 = channel ? 1 : (d.I + l->weights.group_size - 1) / l->weights.group_size;
    st = moeq__moe_add_derived(l, "w13_weight_offset", l->cfg.params_dtype, d.S * d.I, g13, err);
    if (st == MOEQ_STATUS_OK)
        st = moeq__moe_add_derived(l, "w2_weight_offset", l->cfg.params_dtype, d.H, g2, err);
    return st;
}

const moeq__scheme moeq__scheme_npu_w4a16_int4 = {
    .id = MOEQ_SCHEME_NPU_W4A16_INT4,
    .name = "npu_w4a16_int4",
    .summary = "Ascend W4A16 int4 layout, computed on the CPU",
    .accepts = accepts,
    .create_weights = create_weights,
    .finalize = moeq__moe_finalize_ct,
    .apply = moeq__moe_apply_generic,
};

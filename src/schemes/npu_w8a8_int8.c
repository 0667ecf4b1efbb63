/* npu_w8a8_int8.c - the Ascend W8A8 int8 layout (int8 weights, f32 channel
 * scales, offsets), dynamic per-token int8 activations, computed on the CPU. */
#include "layer/moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!in->opts || in->opts->platform != MOEQ_PLATFORM_NPU) {
        return moeq__reject(why, n, "platform is not npu");
    }
    if (!moeq__need_weights(in, why, n)) return false;
    if (!moeq__need_weight_type(in, MOEQ_QTYPE_INT, 8, 8, why, n)) return false;
    if (!moeq__need_sym_static_weights(in, why, n)) return false;
    if (!moeq__need_weight_strategy(in, MOEQ__BIT(MOEQ_STRATEGY_CHANNEL), why, n)) return false;
    if (!moeq__need_input_type(in, MOEQ_QTYPE_INT, 8, why, n)) return false;
    if (!moeq__need_input_mode(in, MOEQ__BIT(MOEQ_STRATEGY_TOKEN), false, why, n)) return false;
    return moeq__need_format(in, MOEQ__INT_FORMATS, why, n);
}

/* The Ascend W8A8 names and shapes (sglang-moe-dispatch.md 13.7): int8
 * w13_weight [E, 2I, H], f32 channel scales [E, 2I, 1], and the weight offsets
 * SGLang's apply reads but never creates (defect 16): here they exist, zero. */
static moeq_status create_weights(moeq_moe *l, moeq_error *err) {
    static const char *const names[2] = {"w13_weight", "w2_weight"};
    moeq_status st = moeq__moe_add_int_weights(l, false, names, err);
    if (st == MOEQ_STATUS_OK)
        st = moeq__moe_add_scales(l, MOEQ_DTYPE_F32, MOEQ__FLOAT_DTYPES, false, err);
    if (st != MOEQ_STATUS_OK) return st;
    moeq__dims d = moeq__moe_dims(l);
    st = moeq__moe_add_derived(l, "w13_weight_offset", MOEQ_DTYPE_F32, d.S * d.I, 1, err);
    if (st == MOEQ_STATUS_OK)
        st = moeq__moe_add_derived(l, "w2_weight_offset", MOEQ_DTYPE_F32, d.H, 1, err);
    return st;
}

const moeq__scheme moeq__scheme_npu_w8a8_int8 = {
    .id = MOEQ_SCHEME_NPU_W8A8_INT8,
    .name = "npu_w8a8_int8",
    .summary = "Ascend W8A8 int8 layout (dynamic per-token inputs), computed on the CPU",
    .accepts = accepts,
    .create_weights = create_weights,
    .finalize = moeq__moe_finalize_ct,
    .apply = moeq__moe_apply_generic,
};

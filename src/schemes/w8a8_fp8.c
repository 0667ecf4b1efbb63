/* w8a8_fp8.c - FP8 E4M3 weights (tensor, channel or block scales) and FP8
 * activations: dynamic per token, per tensor or per group, or a static
 * per-tensor input_scale (the maximum over experts). */
#include "layer/moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_fp8_weights(in, why, n)) return false;
    if (!moeq__need_input_type(in, MOEQ_QTYPE_FLOAT, 8, why, n)) return false;
    uint32_t dyn = MOEQ__BIT(MOEQ_STRATEGY_TOKEN) | MOEQ__BIT(MOEQ_STRATEGY_TENSOR) |
                   MOEQ__BIT(MOEQ_STRATEGY_GROUP);
    if (!moeq__need_input_mode(in, dyn, true, why, n)) return false;
    return moeq__need_format(in, MOEQ__FP8_FORMATS, why, n);
}

/* As w8a16_fp8, plus static input scales ([E]) when the inputs are static;
 * finalize takes their maximum over experts, as engines do. */
static moeq_status create_weights(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_add_float_weights(l, MOEQ_DTYPE_F8_E4M3, MOEQ__DT(F8_E4M3), err);
    if (st == MOEQ_STATUS_OK)
        st = moeq__moe_add_scales(l, MOEQ_DTYPE_F32, MOEQ__FLOAT_DTYPES, false, err);
    if (st == MOEQ_STATUS_OK) st = moeq__moe_add_static_input_scales(l, err);
    return st;
}

const moeq__scheme moeq__scheme_w8a8_fp8 = {
    .id = MOEQ_SCHEME_W8A8_FP8,
    .name = "w8a8_fp8",
    .summary = "FP8 weights (tensor/channel/block) x FP8 activations (dynamic token/tensor/group "
               "or static)",
    .accepts = accepts,
    .create_weights = create_weights,
    .finalize = moeq__moe_finalize_ct,
    .apply = moeq__moe_apply_generic,
};

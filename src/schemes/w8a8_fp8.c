/* w8a8_fp8.c - FP8 E4M3 weights (tensor, channel or block scales) and FP8
 * activations: dynamic per token, per tensor or per group, or a static
 * per-tensor input_scale (the maximum over experts). */
#include "scheme.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_fp8_weights(in, why, n)) return false;
    if (!moeq__need_input_type(in, MOEQ_QTYPE_FLOAT, 8, why, n)) return false;
    uint32_t dyn = MOEQ__BIT(MOEQ_STRATEGY_TOKEN) | MOEQ__BIT(MOEQ_STRATEGY_TENSOR) |
                   MOEQ__BIT(MOEQ_STRATEGY_GROUP);
    if (!moeq__need_input_mode(in, dyn, true, why, n)) return false;
    return moeq__need_format(in, MOEQ__FP8_FORMATS, why, n);
}

MOEQ__SCHEME_PENDING_SLOTS("w8a8_fp8")

const moeq__scheme moeq__scheme_w8a8_fp8 = {
    .id = MOEQ_SCHEME_W8A8_FP8,
    .name = "w8a8_fp8",
    .summary = "FP8 weights (tensor/channel/block) x FP8 activations (dynamic token/tensor/group "
               "or static)",
    .accepts = accepts,
    .create_weights = pending_create,
    .finalize = pending_finalize,
    .apply = pending_apply,
};

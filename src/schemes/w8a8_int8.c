/* w8a8_int8.c - int8 weights (channel, tensor or group scales) and int8
 * activations: dynamic per token or per tensor, or static per tensor. */
#include "layer/moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_weights(in, why, n)) return false;
    if (!moeq__need_weight_type(in, MOEQ_QTYPE_INT, 8, 8, why, n)) return false;
    if (!moeq__need_sym_static_weights(in, why, n)) return false;
    uint32_t strategies = MOEQ__BIT(MOEQ_STRATEGY_CHANNEL) | MOEQ__BIT(MOEQ_STRATEGY_TENSOR) |
                          MOEQ__BIT(MOEQ_STRATEGY_GROUP);
    if (!moeq__need_weight_strategy(in, strategies, why, n)) return false;
    if (!moeq__need_input_type(in, MOEQ_QTYPE_INT, 8, why, n)) return false;
    if (!moeq__need_input_mode(in, MOEQ__TOKEN_OR_TENSOR, true, why, n)) return false;
    return moeq__need_format(in, MOEQ__INT_FORMATS, why, n);
}

const moeq__scheme moeq__scheme_w8a8_int8 = {
    .id = MOEQ_SCHEME_W8A8_INT8,
    .name = "w8a8_int8",
    .summary = "int8 weights x int8 activations (dynamic token/tensor or static tensor)",
    .accepts = accepts,
    .create_weights = moeq__moe_add_int8_family,
    .finalize = moeq__moe_finalize_ct,
    .apply = moeq__moe_apply_generic,
};

/* npu_w8a8_int8.c - the Ascend W8A8 int8 layout (int8 weights, f32 channel
 * scales, offsets), dynamic per-token int8 activations, computed on the CPU. */
#include "scheme.h"

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

MOEQ__SCHEME_PENDING_SLOTS("npu_w8a8_int8")

const moeq__scheme moeq__scheme_npu_w8a8_int8 = {
    .id = MOEQ_SCHEME_NPU_W8A8_INT8,
    .name = "npu_w8a8_int8",
    .summary = "Ascend W8A8 int8 layout (dynamic per-token inputs), computed on the CPU",
    .accepts = accepts,
    .create_weights = pending_create,
    .finalize = pending_finalize,
    .apply = pending_apply,
};

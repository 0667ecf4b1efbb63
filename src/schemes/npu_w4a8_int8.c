/* npu_w4a8_int8.c - the Ascend W4A8 layout (int4 pairs in int8), dynamic
 * per-token int8 activations, computed on the CPU. */
#include "scheme.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!in->opts || in->opts->platform != MOEQ_PLATFORM_NPU) {
        return moeq__reject(why, n, "platform is not npu");
    }
    if (!moeq__need_int4_sym_weights(in, why, n)) return false;
    if (!moeq__need_input_type(in, MOEQ_QTYPE_INT, 8, why, n)) return false;
    if (!moeq__need_input_mode(in, MOEQ__BIT(MOEQ_STRATEGY_TOKEN), false, why, n)) return false;
    return moeq__need_format(in, MOEQ__INT_FORMATS, why, n);
}

MOEQ__SCHEME_PENDING_SLOTS("npu_w4a8_int8")

const moeq__scheme moeq__scheme_npu_w4a8_int8 = {
    .id = MOEQ_SCHEME_NPU_W4A8_INT8,
    .name = "npu_w4a8_int8",
    .summary = "Ascend W4A8 layout (dynamic per-token int8 inputs), computed on the CPU",
    .accepts = accepts,
    .create_weights = pending_create,
    .finalize = pending_finalize,
    .apply = pending_apply,
};

/* npu_w4a16_int4.c - the Ascend W4A16 int4 layout (w13_weight int32
 * [E, 2I, H/8], bf16 scale/offset), computed on the CPU. */
#include "scheme.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!in->opts || in->opts->platform != MOEQ_PLATFORM_NPU) {
        return moeq__reject(why, n, "platform is not npu");
    }
    if (!moeq__need_int4_sym_weights(in, why, n)) return false;
    if (!moeq__need_no_inputs(in, why, n)) return false;
    return moeq__need_format(in, MOEQ__BIT(MOEQ_FORMAT_PACK_QUANTIZED), why, n);
}

MOEQ__SCHEME_PENDING_SLOTS("npu_w4a16_int4")

const moeq__scheme moeq__scheme_npu_w4a16_int4 = {
    .id = MOEQ_SCHEME_NPU_W4A16_INT4,
    .name = "npu_w4a16_int4",
    .summary = "Ascend W4A16 int4 layout, computed on the CPU",
    .accepts = accepts,
    .create_weights = pending_create,
    .finalize = pending_finalize,
    .apply = pending_apply,
};

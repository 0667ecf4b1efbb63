/* w4a16_nvfp4.c - NVFP4 weights (E2M1 values, FP8 E4M3 group-16 scales, an
 * FP32 global scale per projection) with 16-bit activations. */
#include "scheme.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_nvfp4_weights(in, why, n)) return false;
    if (!moeq__need_no_inputs(in, why, n)) return false;
    return moeq__need_format(in, MOEQ__BIT(MOEQ_FORMAT_NVFP4_PACK_QUANTIZED), why, n);
}

MOEQ__SCHEME_PENDING_SLOTS("w4a16_nvfp4")

const moeq__scheme moeq__scheme_w4a16_nvfp4 = {
    .id = MOEQ_SCHEME_W4A16_NVFP4,
    .name = "w4a16_nvfp4",
    .summary = "NVFP4 weights (E2M1, E4M3 group-16 scales, global scale); 16-bit activations",
    .accepts = accepts,
    .create_weights = pending_create,
    .finalize = pending_finalize,
    .apply = pending_apply,
};

/* w4a16_nvfp4.c - NVFP4 weights (E2M1 values, FP8 E4M3 group-16 scales, an
 * FP32 global scale per projection) with 16-bit activations. */
#include "layer/moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_nvfp4_weights(in, why, n)) return false;
    if (!moeq__need_no_inputs(in, why, n)) return false;
    return moeq__need_format(in, MOEQ__BIT(MOEQ_FORMAT_NVFP4_PACK_QUANTIZED), why, n);
}

/* U8 [E, N, K/2] codes, E4M3 group-16 scales, one F32 global scale per
 * shard ([E, 2] for gate/up: each half keeps its own). */
const moeq__scheme moeq__scheme_w4a16_nvfp4 = {
    .id = MOEQ_SCHEME_W4A16_NVFP4,
    .name = "w4a16_nvfp4",
    .summary = "NVFP4 weights (E2M1, E4M3 group-16 scales, global scale); 16-bit activations",
    .accepts = accepts,
    .create_weights = moeq__moe_add_nvfp4_family,
    .finalize = moeq__moe_finalize_ct,
    .apply = moeq__moe_apply_generic,
};

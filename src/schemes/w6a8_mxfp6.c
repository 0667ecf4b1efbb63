/* w6a8_mxfp6.c - MXFP6 weights and dynamic MXFP8 activations (CT 0.20's
 * MXFP6A8): weights as w6a16_mxfp6, inputs quantized per row in groups of 32
 * as w8a8_mxfp8 does (E8M0 scale from the group's round_to_power_2(amax),
 * E4M3 codes). */
#include "layer/moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_mx_weights(in, 6, MOEQ_FORMAT_MXFP6_PACK_QUANTIZED, "MXFP6", why, n)) {
        return false;
    }
    return moeq__need_mxfp8_inputs(in, why, n);
}

static moeq_status create_weights(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_add_fp6_weights(l, err);
    if (st == MOEQ_STATUS_OK) st = moeq__moe_add_scales(l, MOEQ_DTYPE_U8, MOEQ__DT(U8), false, err);
    return st;
}

const moeq__scheme moeq__scheme_w6a8_mxfp6 = {
    .id = MOEQ_SCHEME_W6A8_MXFP6,
    .name = "w6a8_mxfp6",
    .summary = "MXFP6 weights (E2M3, E8M0 group-32 scales) x dynamic MXFP8 activations",
    .accepts = accepts,
    .create_weights = create_weights,
    .finalize = moeq__moe_finalize_ct,
    .apply = moeq__moe_apply_generic,
};

/* w4a8_mxfp4.c - MXFP4 weights (E2M1, E8M0 group-32 scales) and FP8
 * activations quantized dynamically per token in groups of 128 columns (CT
 * 0.20's MXFP4XFP8 preset; SGLang's W4A8-MXFP4).  Weights as w4a16_mxfp4;
 * each group of 128 inputs gets the scale max(amax, 1e-10) / 448 and E4M3
 * codes, as FP8_BLOCK's inputs do. */
#include "layer/moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_mx_weights(in, 4, MOEQ_FORMAT_MXFP4_PACK_QUANTIZED, "MXFP4", why, n)) {
        return false;
    }
    return moeq__need_fp8_group_inputs(in, 128, why, n);
}

static moeq_status create_weights(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_add_fp4_weights(l, err);
    if (st == MOEQ_STATUS_OK) st = moeq__moe_add_scales(l, MOEQ_DTYPE_U8, MOEQ__DT(U8), false, err);
    return st;
}

const moeq__scheme moeq__scheme_w4a8_mxfp4 = {
    .id = MOEQ_SCHEME_W4A8_MXFP4,
    .name = "w4a8_mxfp4",
    .summary = "MXFP4 weights (E2M1, E8M0 group-32 scales) x dynamic FP8 activations per 128",
    .accepts = accepts,
    .create_weights = create_weights,
    .finalize = moeq__moe_finalize_ct,
    .apply = moeq__moe_apply_generic,
};

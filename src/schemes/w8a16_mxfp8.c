/* w8a16_mxfp8.c - MXFP8 weights (FP8 E4M3 values, E8M0 group-32 scales,
 * mxfp8-quantized; CT's MXFP8A16) with 16-bit activations.  The packed
 * kernels hold the E4M3 codes as they do FP8 weights, with the scale bytes
 * as E8M0. */
#include "layer/moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_mx_weights(in, 8, MOEQ_FORMAT_MXFP8_QUANTIZED, "MXFP8", why, n)) return false;
    return moeq__need_no_inputs(in, why, n);
}

/* F8_E4M3 [E, N, K] codes with U8 (E8M0) group-32 scales. */
static moeq_status create_weights(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_add_float_weights(l, MOEQ_DTYPE_F8_E4M3, MOEQ__DT(F8_E4M3), err);
    if (st == MOEQ_STATUS_OK) st = moeq__moe_add_scales(l, MOEQ_DTYPE_U8, MOEQ__DT(U8), false, err);
    return st;
}

const moeq__scheme moeq__scheme_w8a16_mxfp8 = {
    .id = MOEQ_SCHEME_W8A16_MXFP8,
    .name = "w8a16_mxfp8",
    .summary = "MXFP8 weights (E4M3, E8M0 group-32 scales); 16-bit activations",
    .accepts = accepts,
    .create_weights = create_weights,
    .finalize = moeq__moe_finalize_ct,
    .apply = moeq__moe_apply_generic,
};

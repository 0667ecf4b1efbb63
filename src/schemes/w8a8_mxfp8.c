/* w8a8_mxfp8.c - MXFP8 weights and dynamic MXFP8 activations (CT's MXFP8
 * preset): each row's groups of 32 inputs get an E8M0 scale from their
 * absolute maximum (round_to_power_2, minus 8) and E4M3 codes, as CT's
 * forward quantizes them. */
#include "layer/moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_mx_weights(in, 8, MOEQ_FORMAT_MXFP8_QUANTIZED, "MXFP8", why, n)) return false;
    return moeq__need_mxfp8_inputs(in, why, n);
}

static moeq_status create_weights(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_add_float_weights(l, MOEQ_DTYPE_F8_E4M3, MOEQ__DT(F8_E4M3), err);
    if (st == MOEQ_STATUS_OK) st = moeq__moe_add_scales(l, MOEQ_DTYPE_U8, MOEQ__DT(U8), false, err);
    return st;
}

const moeq__scheme moeq__scheme_w8a8_mxfp8 = {
    .id = MOEQ_SCHEME_W8A8_MXFP8,
    .name = "w8a8_mxfp8",
    .summary = "MXFP8 weights (E4M3, E8M0 group-32 scales) x dynamic MXFP8 activations",
    .accepts = accepts,
    .create_weights = create_weights,
    .finalize = moeq__moe_finalize_ct,
    .apply = moeq__moe_apply_generic,
};

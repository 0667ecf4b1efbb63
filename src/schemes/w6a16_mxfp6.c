/* w6a16_mxfp6.c - MXFP6 weights (FP6 E2M3 values, four codes in three bytes,
 * E8M0 group-32 scales, mxfp6-pack-quantized; CT 0.20's MXFP6A16) with
 * 16-bit activations.  The packed kernels hold each code as the integer
 * 8 * value (the 64-entry E2M3 table, in [-60, 60]) with the scale / 8, so
 * the I8 panels and gemv serve it exactly. */
#include "layer/moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_mx_weights(in, 6, MOEQ_FORMAT_MXFP6_PACK_QUANTIZED, "MXFP6", why, n)) {
        return false;
    }
    return moeq__need_no_inputs(in, why, n);
}

/* U8 [E, N, 3K/4] codes with U8 (E8M0) group-32 scales. */
static moeq_status create_weights(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_add_fp6_weights(l, err);
    if (st == MOEQ_STATUS_OK) st = moeq__moe_add_scales(l, MOEQ_DTYPE_U8, MOEQ__DT(U8), false, err);
    return st;
}

const moeq__scheme moeq__scheme_w6a16_mxfp6 = {
    .id = MOEQ_SCHEME_W6A16_MXFP6,
    .name = "w6a16_mxfp6",
    .summary = "MXFP6 weights (E2M3, E8M0 group-32 scales); 16-bit activations",
    .accepts = accepts,
    .create_weights = create_weights,
    .finalize = moeq__moe_finalize_ct,
    .apply = moeq__moe_apply_generic,
};

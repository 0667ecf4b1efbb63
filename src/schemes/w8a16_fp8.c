/* w8a16_fp8.c - FP8 E4M3 weights (tensor, channel or block scales) with
 * 16-bit activations. */
#include "layer/moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_fp8_weights(in, why, n)) return false;
    if (!moeq__need_no_inputs(in, why, n)) return false;
    return moeq__need_format(in, MOEQ__FP8_FORMATS, why, n);
}

/* F8_E4M3 [E, N, K] weights with F32 scales.  Per-tensor scales stay one per
 * shard ([E, 2]): SGLang requantizes gate and up to their maximum, which a
 * CPU kernel does not need and which would add rounding error. */
static moeq_status create_weights(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_add_float_weights(l, MOEQ_DTYPE_F8_E4M3, MOEQ__DT(F8_E4M3), err);
    if (st == MOEQ_STATUS_OK)
        st = moeq__moe_add_scales(l, MOEQ_DTYPE_F32, MOEQ__FLOAT_DTYPES, false, err);
    return st;
}

const moeq__scheme moeq__scheme_w8a16_fp8 = {
    .id = MOEQ_SCHEME_W8A16_FP8,
    .name = "w8a16_fp8",
    .summary = "FP8 E4M3 weights (tensor/channel/block scales); 16-bit activations",
    .accepts = accepts,
    .create_weights = create_weights,
    .finalize = moeq__moe_finalize_ct,
    .apply = moeq__moe_apply_generic,
};

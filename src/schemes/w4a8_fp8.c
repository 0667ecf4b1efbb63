/* w4a8_fp8.c - int4 weights (group or channel scales, symmetric) and FP8
 * activations (dynamic per token or tensor, or static per tensor). */
#include "moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_int4_sym_weights(in, why, n)) return false;
    if (!moeq__need_input_type(in, MOEQ_QTYPE_FLOAT, 8, why, n)) return false;
    if (!moeq__need_input_mode(in, MOEQ__TOKEN_OR_TENSOR, true, why, n)) return false;
    return moeq__need_format(in, MOEQ__INT_FORMATS, why, n);
}

/* Weights as w4a8_int8; the inputs are quantized to FP8 instead. */
static moeq_status create_weights(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_add_int_weights(l, false, NULL, err);
    if (st == MOEQ_STATUS_OK)
        st = moeq__moe_add_scales(l, MOEQ_DTYPE_F32, MOEQ__FLOAT_DTYPES, false, err);
    if (st == MOEQ_STATUS_OK) st = moeq__moe_add_static_input_scales(l, err);
    return st;
}

static moeq_status finalize(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_finalize_ct(l, err);
    if (st == MOEQ_STATUS_OK) st = moeq__moe_repack_int4(l, err);
    return st;
}

const moeq__scheme moeq__scheme_w4a8_fp8 = {
    .id = MOEQ_SCHEME_W4A8_FP8,
    .name = "w4a8_fp8",
    .summary = "int4 weights x FP8 activations (dynamic token/tensor or static tensor)",
    .accepts = accepts,
    .create_weights = create_weights,
    .finalize = finalize,
    .apply = moeq__moe_apply_generic,
};

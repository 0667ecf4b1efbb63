/* wna16.c - integer weights of 1-8 bits (group or channel scales, symmetric or
 * asymmetric, optional actorder g_idx) with 16-bit activations. */
#include "layer/moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_weights(in, why, n)) return false;
    if (!moeq__need_weight_type(in, MOEQ_QTYPE_INT, 1, 8, why, n)) return false;
    if (in->w->dynamic) return moeq__reject(why, n, "weights are dynamic; needs static");
    if (!moeq__need_weight_strategy(in, MOEQ__GROUP_OR_CHANNEL, why, n)) return false;
    if (!moeq__need_no_inputs(in, why, n)) return false;
    return moeq__need_format(in, MOEQ__INT_FORMATS, why, n);
}

/* pack-quantized weights are stored transposed, [E, words(K), N], with their
 * scales and zero points (as SGLang's Marlin layout); int8 storage keeps the
 * checkpoint orientation. */
static moeq_status create_weights(moeq_moe *l, moeq_error *err) {
    bool t = l->cfg.format == MOEQ_FORMAT_PACK_QUANTIZED;
    moeq_status st = moeq__moe_add_int_weights(l, t, NULL, err);
    if (st == MOEQ_STATUS_OK)
        st = moeq__moe_add_scales(l, l->cfg.params_dtype, MOEQ__FLOAT_DTYPES, t, err);
    if (st == MOEQ_STATUS_OK) st = moeq__moe_add_zero_points(l, t, err);
    if (st == MOEQ_STATUS_OK) st = moeq__moe_add_g_idx(l, err);
    return st;
}

static moeq_status finalize(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_finalize_ct(l, err);
    if (st == MOEQ_STATUS_OK) moeq__moe_release_transposed(l);
    return st;
}

const moeq__scheme moeq__scheme_wna16 = {
    .id = MOEQ_SCHEME_WNA16,
    .name = "wna16",
    .summary = "int1-8 weights, group/channel scales, sym or asym, actorder; 16-bit activations",
    .accepts = accepts,
    .create_weights = create_weights,
    .finalize = finalize,
    .apply = moeq__moe_apply_generic,
};

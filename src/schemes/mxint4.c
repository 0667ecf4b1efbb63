/* mxint4.c - int4 weights in groups of 32 with bf16 scales, symmetric,
 * no actorder (the TRT-LLM MxInt4 layout); chosen over wna16 only on request. */
#include "layer/moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!in->opts || !in->opts->prefer_mxint4) {
        return moeq__reject(why, n, "only with prefer_mxint4 (wna16 runs these weights otherwise)");
    }
    if (!moeq__need_weights(in, why, n)) return false;
    if (!moeq__need_weight_type(in, MOEQ_QTYPE_INT, 4, 4, why, n)) return false;
    if (!moeq__need_sym_static_weights(in, why, n)) return false;
    if (!moeq__need_weight_strategy(in, MOEQ__BIT(MOEQ_STRATEGY_GROUP), why, n)) return false;
    if (!moeq__need_weight_group(in, 32, "mxint4", why, n)) return false;
    if (in->w->actorder != MOEQ_ACTORDER_NONE) {
        return moeq__reject(why, n, "actorder is %s; mxint4 has no g_idx",
                            moeq_actorder_name(in->w->actorder));
    }
    if (!moeq__need_no_inputs(in, why, n)) return false;
    return moeq__need_format(in, MOEQ__BIT(MOEQ_FORMAT_PACK_QUANTIZED), why, n);
}

/* Checkpoint orientation [E, N, K/8] with bf16 group-32 scales; finalize
 * repacks the words into signed int4 nibble pairs (the MxInt4 byte layout). */
static moeq_status create_weights(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_add_int_weights(l, false, NULL, err);
    if (st == MOEQ_STATUS_OK)
        st = moeq__moe_add_scales(l, l->cfg.params_dtype, MOEQ__FLOAT_DTYPES, false, err);
    return st;
}

static moeq_status finalize(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_finalize_ct(l, err);
    if (st == MOEQ_STATUS_OK) st = moeq__moe_repack_int4(l, err);
    return st;
}

const moeq__scheme moeq__scheme_mxint4 = {
    .id = MOEQ_SCHEME_MXINT4,
    .name = "mxint4",
    .summary = "int4 group-32 symmetric weights (MxInt4 layout); 16-bit activations",
    .accepts = accepts,
    .create_weights = create_weights,
    .finalize = finalize,
    .apply = moeq__moe_apply_generic,
};

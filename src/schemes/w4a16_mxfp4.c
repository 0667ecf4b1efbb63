/* w4a16_mxfp4.c - MXFP4 weights (E2M1 values, E8M0 group-32 scales).
 * Activations stay 16-bit unless the config also quantizes inputs to MXFP4
 * (dynamic, group 32), in which case they are quantized exactly so. */
#include "layer/moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_weights(in, why, n)) return false;
    if (!moeq__need_weight_type(in, MOEQ_QTYPE_FLOAT, 4, 4, why, n)) return false;
    if (!moeq__need_sym_static_weights(in, why, n)) return false;
    if (!moeq__need_weight_strategy(in, MOEQ__BIT(MOEQ_STRATEGY_GROUP), why, n)) return false;
    if (!moeq__need_weight_group(in, 32, "MXFP4", why, n)) return false;
    if (!moeq__need_format(in, MOEQ__BIT(MOEQ_FORMAT_MXFP4_PACK_QUANTIZED), why, n)) return false;
    if (!in->a) return true;
    /* An MXFP4 W4A4 config: inputs are quantized to MXFP4 as it says. */
    if (!moeq__need_input_type(in, MOEQ_QTYPE_FLOAT, 4, why, n)) return false;
    if (in->a->strategy != MOEQ_STRATEGY_GROUP || in->a->group_size != 32 ||
        in->a->dynamic != MOEQ_DYNAMIC_TRUE) {
        return moeq__reject(why, n, "input activations must be absent or MXFP4 dynamic group(32)");
    }
    return true;
}

/* U8 [E, N, K/2] codes with U8 (E8M0) group-32 scales. */
static moeq_status create_weights(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_add_fp4_weights(l, err);
    if (st == MOEQ_STATUS_OK) st = moeq__moe_add_scales(l, MOEQ_DTYPE_U8, MOEQ__DT(U8), false, err);
    return st;
}

const moeq__scheme moeq__scheme_w4a16_mxfp4 = {
    .id = MOEQ_SCHEME_W4A16_MXFP4,
    .name = "w4a16_mxfp4",
    .summary = "MXFP4 weights (E2M1, E8M0 group-32 scales); 16-bit or MXFP4 activations",
    .accepts = accepts,
    .create_weights = create_weights,
    .finalize = moeq__moe_finalize_ct,
    .apply = moeq__moe_apply_generic,
};

/* wna16.c - integer weights of 1-8 bits (group or channel scales, symmetric or
 * asymmetric, optional actorder g_idx) with 16-bit activations. */
#include "scheme.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_weights(in, why, n)) return false;
    if (!moeq__need_weight_type(in, MOEQ_QTYPE_INT, 1, 8, why, n)) return false;
    if (in->w->dynamic) return moeq__reject(why, n, "weights are dynamic; needs static");
    if (!moeq__need_weight_strategy(in, MOEQ__GROUP_OR_CHANNEL, why, n)) return false;
    if (!moeq__need_no_inputs(in, why, n)) return false;
    return moeq__need_format(in, MOEQ__INT_FORMATS, why, n);
}

MOEQ__SCHEME_PENDING_SLOTS("wna16")

const moeq__scheme moeq__scheme_wna16 = {
    .id = MOEQ_SCHEME_WNA16,
    .name = "wna16",
    .summary = "int1-8 weights, group/channel scales, sym or asym, actorder; 16-bit activations",
    .accepts = accepts,
    .create_weights = pending_create,
    .finalize = pending_finalize,
    .apply = pending_apply,
};

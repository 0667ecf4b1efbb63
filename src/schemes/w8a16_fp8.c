/* w8a16_fp8.c - FP8 E4M3 weights (tensor, channel or block scales) with
 * 16-bit activations. */
#include "scheme.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_fp8_weights(in, why, n)) return false;
    if (!moeq__need_no_inputs(in, why, n)) return false;
    return moeq__need_format(in, MOEQ__FP8_FORMATS, why, n);
}

MOEQ__SCHEME_PENDING_SLOTS("w8a16_fp8")

const moeq__scheme moeq__scheme_w8a16_fp8 = {
    .id = MOEQ_SCHEME_W8A16_FP8,
    .name = "w8a16_fp8",
    .summary = "FP8 E4M3 weights (tensor/channel/block scales); 16-bit activations",
    .accepts = accepts,
    .create_weights = pending_create,
    .finalize = pending_finalize,
    .apply = pending_apply,
};

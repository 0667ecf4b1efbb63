/* unquantized.c - experts stored in 16/32-bit floats (ignored or unmatched
 * layers, and dense/fakequant formats): plain matmuls. */
#include "layer/moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (in->format == MOEQ_FORMAT_DENSE || in->format == MOEQ_FORMAT_FAKEQUANT) {
        return true; /* weights were stored decompressed */
    }
    if (in->w) return moeq__reject(why, n, "weights are quantized");
    if (in->a) return moeq__reject(why, n, "input activations are quantized but weights are not");
    return true;
}

/* Float experts in the model dtype; checkpoints store them as "weight". */
static moeq_status create_weights(moeq_moe *l, moeq_error *err) {
    l->cfg.format = MOEQ_FORMAT_DENSE; /* whatever the config said, the tensors are plain */
    return moeq__moe_add_float_weights(l, l->cfg.params_dtype, MOEQ__FLOAT_DTYPES, err);
}

const moeq__scheme moeq__scheme_unquantized = {
    .id = MOEQ_SCHEME_UNQUANTIZED,
    .name = "unquantized",
    .summary = "16/32-bit float experts, no quantization",
    .accepts = accepts,
    .create_weights = create_weights,
    .finalize = moeq__moe_finalize_ct,
    .apply = moeq__moe_apply_generic,
};

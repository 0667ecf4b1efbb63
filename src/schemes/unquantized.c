/* unquantized.c - experts stored in 16/32-bit floats (ignored or unmatched
 * layers, and dense/fakequant formats): plain matmuls. */
#include "scheme.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (in->format == MOEQ_FORMAT_DENSE || in->format == MOEQ_FORMAT_FAKEQUANT) {
        return true; /* weights were stored decompressed */
    }
    if (in->w) return moeq__reject(why, n, "weights are quantized");
    if (in->a) return moeq__reject(why, n, "input activations are quantized but weights are not");
    return true;
}

MOEQ__SCHEME_PENDING_SLOTS("unquantized")

const moeq__scheme moeq__scheme_unquantized = {
    .id = MOEQ_SCHEME_UNQUANTIZED,
    .name = "unquantized",
    .summary = "16/32-bit float experts, no quantization",
    .accepts = accepts,
    .create_weights = pending_create,
    .finalize = pending_finalize,
    .apply = pending_apply,
};

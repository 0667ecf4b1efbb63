/* w4a8_int8.c - int4 weights (group or channel scales, symmetric) and int8
 * activations (dynamic per token or tensor, or static per tensor). */
#include "layer/moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_int4_sym_weights(in, why, n)) return false;
    if (!moeq__need_input_type(in, MOEQ_QTYPE_INT, 8, why, n)) return false;
    if (!moeq__need_input_mode(in, MOEQ__TOKEN_OR_TENSOR, true, why, n)) return false;
    return moeq__need_format(in, MOEQ__INT_FORMATS, why, n);
}

/* int4 weights in checkpoint orientation (packed words [E, N, K/8] or int8
 * [E, N, K]) with F32 scales; finalize repacks packed words into signed nibble
 * pairs (SGLang's W4AFP8 layout). */
const moeq__scheme moeq__scheme_w4a8_int8 = {
    .id = MOEQ_SCHEME_W4A8_INT8,
    .name = "w4a8_int8",
    .summary = "int4 weights x int8 activations (dynamic token/tensor or static tensor)",
    .accepts = accepts,
    .create_weights = moeq__moe_add_int8_family,
    .finalize = moeq__moe_finalize_int4_repacked,
    .apply = moeq__moe_apply_generic,
};

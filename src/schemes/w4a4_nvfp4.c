/* w4a4_nvfp4.c - NVFP4 weights and NVFP4 activations: inputs quantized per
 * 16 elements at run time against a static input_global_scale ("local"). */
#include "layer/moe_params.h"

static bool accepts(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_nvfp4_weights(in, why, n)) return false;
    if (!moeq__need_input_type(in, MOEQ_QTYPE_FLOAT, 4, why, n)) return false;
    const moeq_quant_args *a = in->a;
    if (a->strategy != MOEQ_STRATEGY_TENSOR_GROUP || a->group_size != 16) {
        return moeq__reject(why, n, "input activations are %s(%d); needs tensor_group(16)",
                            moeq_strategy_name(a->strategy), (int)a->group_size);
    }
    if (a->dynamic != MOEQ_DYNAMIC_LOCAL) {
        return moeq__reject(why, n,
                            "input activations must be dynamic \"local\" (local scales "
                            "at run time, static input_global_scale)");
    }
    return moeq__need_format(in, MOEQ__BIT(MOEQ_FORMAT_NVFP4_PACK_QUANTIZED), why, n);
}

/* The NVFP4 family plus the static input global scales ([E, 2] / [E]). */
static moeq_status create_weights(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_add_nvfp4_family(l, err);
    if (st == MOEQ_STATUS_OK)
        st = moeq__moe_add_per_shard(l, "input_global_scale", "input_global_scale", err);
    return st;
}

const moeq__scheme moeq__scheme_w4a4_nvfp4 = {
    .id = MOEQ_SCHEME_W4A4_NVFP4,
    .name = "w4a4_nvfp4",
    .summary = "NVFP4 weights and NVFP4 (local, global-scaled) activations",
    .accepts = accepts,
    .create_weights = create_weights,
    .finalize = moeq__moe_finalize_ct,
    .apply = moeq__moe_apply_generic,
};

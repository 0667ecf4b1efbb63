/*
 * registry.c - the static table of scheme vtables and the selection policy.
 *
 * Selection walks k_selection_order and takes the first scheme whose
 * predicate accepts the layer.  The predicates are written to be disjoint
 * (a test enumerates args and checks that at most one accepts), so the order
 * only decides the two deliberate preferences: npu_* layouts first when the
 * platform is npu, and mxint4 before wna16 when prefer_mxint4 is set.
 */
#include "schemes/scheme.h"

#include "config/config.h"

#include <stdio.h>
#include <string.h>

static const moeq__scheme *const k_schemes[MOEQ_SCHEME_COUNT] = {
    [MOEQ_SCHEME_UNQUANTIZED] = &moeq__scheme_unquantized,
    [MOEQ_SCHEME_WNA16] = &moeq__scheme_wna16,
    [MOEQ_SCHEME_MXINT4] = &moeq__scheme_mxint4,
    [MOEQ_SCHEME_W4A16_NVFP4] = &moeq__scheme_w4a16_nvfp4,
    [MOEQ_SCHEME_W4A4_NVFP4] = &moeq__scheme_w4a4_nvfp4,
    [MOEQ_SCHEME_W4A16_MXFP4] = &moeq__scheme_w4a16_mxfp4,
    [MOEQ_SCHEME_W8A16_FP8] = &moeq__scheme_w8a16_fp8,
    [MOEQ_SCHEME_W8A8_FP8] = &moeq__scheme_w8a8_fp8,
    [MOEQ_SCHEME_W8A8_INT8] = &moeq__scheme_w8a8_int8,
    [MOEQ_SCHEME_W4A8_INT8] = &moeq__scheme_w4a8_int8,
    [MOEQ_SCHEME_W4A8_FP8] = &moeq__scheme_w4a8_fp8,
    [MOEQ_SCHEME_NPU_W8A8_INT8] = &moeq__scheme_npu_w8a8_int8,
    [MOEQ_SCHEME_NPU_W4A8_INT8] = &moeq__scheme_npu_w4a8_int8,
    [MOEQ_SCHEME_NPU_W4A16_INT4] = &moeq__scheme_npu_w4a16_int4,
    [MOEQ_SCHEME_W8A16_MXFP8] = &moeq__scheme_w8a16_mxfp8,
    [MOEQ_SCHEME_W8A8_MXFP8] = &moeq__scheme_w8a8_mxfp8,
    [MOEQ_SCHEME_W6A16_MXFP6] = &moeq__scheme_w6a16_mxfp6,
    [MOEQ_SCHEME_W6A8_MXFP6] = &moeq__scheme_w6a8_mxfp6,
    [MOEQ_SCHEME_W4A8_MXFP4] = &moeq__scheme_w4a8_mxfp4,
};

/* The selection policy, in order. */
static const moeq__scheme *const k_selection_order[] = {
    &moeq__scheme_unquantized,
    /* Platform npu: the Ascend layouts where SGLang picks them. */
    &moeq__scheme_npu_w4a16_int4,
    &moeq__scheme_npu_w8a8_int8,
    &moeq__scheme_npu_w4a8_int8,
    /* Opt-in: the MxInt4 layout for int4 group-32 symmetric weights. */
    &moeq__scheme_mxint4,
    &moeq__scheme_wna16,
    &moeq__scheme_w4a16_nvfp4,
    &moeq__scheme_w4a4_nvfp4,
    &moeq__scheme_w4a16_mxfp4,
    &moeq__scheme_w8a16_fp8,
    &moeq__scheme_w8a8_fp8,
    &moeq__scheme_w8a8_int8,
    &moeq__scheme_w4a8_int8,
    &moeq__scheme_w4a8_fp8,
    /* compressed-tensors 0.20's MX presets */
    &moeq__scheme_w8a16_mxfp8,
    &moeq__scheme_w8a8_mxfp8,
    &moeq__scheme_w6a16_mxfp6,
    &moeq__scheme_w6a8_mxfp6,
    &moeq__scheme_w4a8_mxfp4,
};

_Static_assert(MOEQ__ARRAY_LEN(k_selection_order) == MOEQ_SCHEME_COUNT,
               "every scheme appears once in the selection order");

const moeq__scheme *moeq__scheme_get(int32_t id) {
    if (id < 0 || id >= MOEQ_SCHEME_COUNT) return NULL;
    return k_schemes[id];
}

const char *moeq_scheme_name(int32_t scheme) {
    const moeq__scheme *s = moeq__scheme_get(scheme);
    return s ? s->name : NULL;
}

int32_t moeq_scheme_from_name(const char *name) {
    if (!name) return -1;
    for (int32_t i = 0; i < MOEQ_SCHEME_COUNT; i++) {
        if (strcmp(k_schemes[i]->name, name) == 0) return i;
    }
    return -1;
}

const char *moeq_scheme_summary(int32_t scheme) {
    const moeq__scheme *s = moeq__scheme_get(scheme);
    return s ? s->summary : NULL;
}

/* ---- selection ------------------------------------------------------------------ */

static void args_or_none(const moeq_quant_args *a, char *buf, size_t n) {
    if (a) {
        moeq_quant_args_summary(a, buf, n);
    } else {
        snprintf(buf, n, "none");
    }
}

moeq_status moeq_select(const moeq_resolution *res, const char *layer,
                        const moeq_select_options *opts, moeq_selection *out, moeq_error *err) {
    if (!res || !out) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL",
                           !res ? "resolution" : "output selection");
    }
    out->scheme = -1;
    out->reason[0] = '\0';
    moeq_select_options defaults = {MOEQ_PLATFORM_CPU, 0};
    if (!opts) opts = &defaults;
    if (opts->platform != MOEQ_PLATFORM_CPU && opts->platform != MOEQ_PLATFORM_NPU) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "platform %d is not cpu (0) or npu (1)",
                           (int)opts->platform);
    }
    const char *lname = layer ? layer : "(unnamed layer)";
    if (res->status < MOEQ_MATCH_QUANTIZED || res->status > MOEQ_MATCH_UNMATCHED) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "layer %s: resolution status %d is not a moeq_match_status (0..2)",
                           lname, (int)res->status);
    }
    /* The resolution may be the caller's own: its args are checked before a
     * predicate shifts by their enum values. */
    moeq_status st = moeq__quant_args_check(res->weights, "weights", err);
    if (st == MOEQ_STATUS_OK) {
        st = moeq__quant_args_check(res->input_activations, "input_activations", err);
    }
    if (st == MOEQ_STATUS_OK) {
        st = moeq__quant_args_check(res->output_activations, "output_activations", err);
    }
    if (st != MOEQ_STATUS_OK) return moeq__error_prefix(err, st, "layer %s", lname);

    if (res->status != MOEQ_MATCH_QUANTIZED) {
        out->scheme = MOEQ_SCHEME_UNQUANTIZED;
        snprintf(out->reason, sizeof out->reason, "unquantized: layer is %s",
                 res->status == MOEQ_MATCH_IGNORED ? "in the ignore list" : "matched by no target");
        moeq__log(MOEQ_LOG_INFO, "%s: %s", lname, out->reason);
        return MOEQ_STATUS_OK;
    }
    if (res->output_activations) {
        return moeq__error(err, MOEQ_STATUS_UNSUPPORTED,
                           "layer %s (group %s): output_activations quantization is not "
                           "supported for MoE experts; remove it from the group or ignore the "
                           "layer",
                           lname, res->group_name ? res->group_name : "?");
    }

    moeq__select_in in = {res->weights, res->input_activations, res->format, opts};
    moeq__sb tried;
    moeq__sb_init(&tried);
    for (size_t i = 0; i < MOEQ__ARRAY_LEN(k_selection_order); i++) {
        const moeq__scheme *s = k_selection_order[i];
        char why[256] = "";
        if (s->accepts(&in, why, sizeof why)) {
            out->scheme = s->id;
            char w[96], a[96];
            args_or_none(in.w, w, sizeof w);
            args_or_none(in.a, a, sizeof a);
            snprintf(out->reason, sizeof out->reason,
                     "%s: weights %s, input activations %s, format %s (group %s)%s%s", s->name, w,
                     a, moeq_format_name(in.format), res->group_name ? res->group_name : "?",
                     tried.len ? "; tried first: " : "", tried.len ? tried.data : "");
            moeq__sb_free(&tried);
            moeq__log(MOEQ_LOG_INFO, "%s: selected %s", lname, out->reason);
            return MOEQ_STATUS_OK;
        }
        /* Only schemes that came close are worth listing on success; on
         * failure every reason is reported below. */
        moeq__sb_printf(&tried, "%s%s (%s)", tried.len ? ", " : "", s->name, why);
    }
    moeq__sb_free(&tried);

    /* Nothing accepts: list every scheme's reason. */
    moeq__sb msg;
    moeq__sb_init(&msg);
    char w[96], a[96];
    args_or_none(in.w, w, sizeof w);
    args_or_none(in.a, a, sizeof a);
    moeq__sb_printf(&msg,
                    "layer %s (group %s, format %s): no MoE scheme accepts weights %s with "
                    "input activations %s:",
                    lname, res->group_name ? res->group_name : "?",
                    in.format == MOEQ_FORMAT_NONE ? "(none)" : moeq_format_name(in.format), w, a);
    for (size_t i = 0; i < MOEQ__ARRAY_LEN(k_selection_order); i++) {
        const moeq__scheme *s = k_selection_order[i];
        char why[256] = "";
        (void)s->accepts(&in, why, sizeof why);
        moeq__sb_printf(&msg, "\n  %s: %s", s->name, why);
    }
    st = moeq__error(err, MOEQ_STATUS_UNSUPPORTED, "%s",
                     msg.data ? msg.data : "no MoE scheme accepts this layer");
    moeq__sb_free(&msg);
    return st;
}

/*
 * predicates.c - the pieces the schemes' accepts() predicates are made of
 * (scheme.h): each checks one property of the args and writes the reason
 * when it fails.  Kept apart from registry.c so that the scheme files call
 * these and the registry reads the schemes' vtables, never both ways.
 */
#include "schemes/scheme.h"

#include <stdio.h>
#include <string.h>

bool moeq__reject(char *why, size_t why_size, const char *fmt, ...) {
    if (why && why_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_size, fmt, ap);
        va_end(ap);
    }
    return false;
}

static const char *type_name(int32_t type) {
    return type == MOEQ_QTYPE_FLOAT ? "float" : "int";
}

bool moeq__need_weights(const moeq__select_in *in, char *why, size_t n) {
    return in->w != NULL || moeq__reject(why, n, "no weight quantization");
}

bool moeq__need_no_inputs(const moeq__select_in *in, char *why, size_t n) {
    if (!in->a) return true;
    char s[96];
    moeq_quant_args_summary(in->a, s, sizeof s);
    return moeq__reject(why, n, "input activations are quantized (%s)", s);
}

bool moeq__need_weight_type(const moeq__select_in *in, int32_t type, int32_t min_bits,
                            int32_t max_bits, char *why, size_t n) {
    const moeq_quant_args *w = in->w;
    if (w->type == type && w->num_bits >= min_bits && w->num_bits <= max_bits) return true;
    if (min_bits == max_bits) {
        return moeq__reject(why, n, "weights are %s%d; needs %s%d", type_name(w->type),
                            (int)w->num_bits, type_name(type), (int)min_bits);
    }
    return moeq__reject(why, n, "weights are %s%d; needs %s%d..%d", type_name(w->type),
                        (int)w->num_bits, type_name(type), (int)min_bits, (int)max_bits);
}

bool moeq__need_sym_static_weights(const moeq__select_in *in, char *why, size_t n) {
    if (!in->w->symmetric) return moeq__reject(why, n, "weights are asymmetric; needs symmetric");
    if (in->w->dynamic) return moeq__reject(why, n, "weights are dynamic; needs static");
    return true;
}

static void append_names(char *buf, size_t n, uint32_t mask, const char *(*name)(int32_t)) {
    size_t len = strlen(buf);
    bool first = true;
    for (int32_t i = 0; i < 32; i++) {
        if (!(mask & (1u << i))) continue;
        int w = snprintf(buf + len, len < n ? n - len : 0, "%s%s", first ? "" : "/", name(i));
        if (w < 0) return;
        len += (size_t)w;
        first = false;
    }
}

bool moeq__need_weight_strategy(const moeq__select_in *in, uint32_t mask, char *why, size_t n) {
    if (mask & (1u << in->w->strategy)) return true;
    moeq__reject(why, n, "weight strategy is %s; needs ", moeq_strategy_name(in->w->strategy));
    if (why) append_names(why, n, mask, moeq_strategy_name);
    return false;
}

bool moeq__need_format(const moeq__select_in *in, uint32_t mask, char *why, size_t n) {
    if (in->format >= 0 && in->format < 32 && (mask & (1u << in->format))) return true;
    moeq__reject(why, n, "format is %s; needs ",
                 in->format == MOEQ_FORMAT_NONE ? "(none)" : moeq_format_name(in->format));
    if (why) append_names(why, n, mask, moeq_format_name);
    return false;
}

bool moeq__need_input_type(const moeq__select_in *in, int32_t type, int32_t bits, char *why,
                           size_t n) {
    const moeq_quant_args *a = in->a;
    if (!a) {
        return moeq__reject(why, n, "no input-activation quantization; needs %s%d inputs",
                            type_name(type), (int)bits);
    }
    if (a->type != type || a->num_bits != bits) {
        return moeq__reject(why, n, "input activations are %s%d; needs %s%d", type_name(a->type),
                            (int)a->num_bits, type_name(type), (int)bits);
    }
    if (!a->symmetric) return moeq__reject(why, n, "input activations are asymmetric");
    return true;
}

bool moeq__need_input_mode(const moeq__select_in *in, uint32_t dynamic_strategies,
                           bool static_tensor_ok, char *why, size_t n) {
    const moeq_quant_args *a = in->a;
    if (a->dynamic == MOEQ_DYNAMIC_TRUE) {
        if (dynamic_strategies & (1u << a->strategy)) return true;
        moeq__reject(why, n, "dynamic input activations are per-%s; needs per-",
                     moeq_strategy_name(a->strategy));
        if (why) append_names(why, n, dynamic_strategies, moeq_strategy_name);
        return false;
    }
    if (a->dynamic == MOEQ_DYNAMIC_FALSE && static_tensor_ok &&
        a->strategy == MOEQ_STRATEGY_TENSOR) {
        return true;
    }
    if (a->dynamic == MOEQ_DYNAMIC_LOCAL) {
        return moeq__reject(why, n, "input activations are dynamic \"local\"");
    }
    return moeq__reject(why, n, "static input activations are per-%s; needs %s",
                        moeq_strategy_name(a->strategy),
                        static_tensor_ok ? "per-tensor" : "dynamic quantization");
}

bool moeq__need_weight_group(const moeq__select_in *in, int32_t group_size, const char *what,
                             char *why, size_t n) {
    if (in->w->group_size == group_size) return true;
    return moeq__reject(why, n, "weight group_size is %d; %s needs %d", (int)in->w->group_size,
                        what, (int)group_size);
}

bool moeq__need_int4_sym_weights(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_weights(in, why, n)) return false;
    if (!moeq__need_weight_type(in, MOEQ_QTYPE_INT, 4, 4, why, n)) return false;
    if (!moeq__need_sym_static_weights(in, why, n)) return false;
    return moeq__need_weight_strategy(in, MOEQ__GROUP_OR_CHANNEL, why, n);
}

bool moeq__need_nvfp4_weights(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_weights(in, why, n)) return false;
    if (!moeq__need_weight_type(in, MOEQ_QTYPE_FLOAT, 4, 4, why, n)) return false;
    if (!moeq__need_sym_static_weights(in, why, n)) return false;
    if (!moeq__need_weight_strategy(in, MOEQ__BIT(MOEQ_STRATEGY_TENSOR_GROUP), why, n))
        return false;
    return moeq__need_weight_group(in, 16, "NVFP4", why, n);
}

bool moeq__need_fp8_weights(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_weights(in, why, n)) return false;
    if (!moeq__need_weight_type(in, MOEQ_QTYPE_FLOAT, 8, 8, why, n)) return false;
    if (!moeq__need_sym_static_weights(in, why, n)) return false;
    uint32_t strategies = MOEQ__BIT(MOEQ_STRATEGY_TENSOR) | MOEQ__BIT(MOEQ_STRATEGY_CHANNEL) |
                          MOEQ__BIT(MOEQ_STRATEGY_BLOCK);
    return moeq__need_weight_strategy(in, strategies, why, n);
}

bool moeq__need_mx_weights(const moeq__select_in *in, int32_t bits, int32_t format,
                           const char *what, char *why, size_t n) {
    if (!moeq__need_weights(in, why, n)) return false;
    if (!moeq__need_weight_type(in, MOEQ_QTYPE_FLOAT, bits, bits, why, n)) return false;
    if (!moeq__need_sym_static_weights(in, why, n)) return false;
    if (!moeq__need_weight_strategy(in, MOEQ__BIT(MOEQ_STRATEGY_GROUP), why, n)) return false;
    if (!moeq__need_weight_group(in, 32, what, why, n)) return false;
    return moeq__need_format(in, MOEQ__BIT(format), why, n);
}

bool moeq__need_mxfp8_inputs(const moeq__select_in *in, char *why, size_t n) {
    if (!moeq__need_input_type(in, MOEQ_QTYPE_FLOAT, 8, why, n)) return false;
    const moeq_quant_args *a = in->a;
    if (a->dynamic != MOEQ_DYNAMIC_TRUE || a->strategy != MOEQ_STRATEGY_GROUP ||
        a->group_size != 32 || a->scale_dtype != MOEQ_DTYPE_U8) {
        char s[96];
        moeq_quant_args_summary(a, s, sizeof s);
        return moeq__reject(why, n,
                            "input activations are %s; needs MXFP8 (dynamic group(32), "
                            "scale_dtype uint8)", s);
    }
    return true;
}

bool moeq__need_fp8_group_inputs(const moeq__select_in *in, int32_t group_size, char *why,
                                 size_t n) {
    if (!moeq__need_input_type(in, MOEQ_QTYPE_FLOAT, 8, why, n)) return false;
    const moeq_quant_args *a = in->a;
    if (a->dynamic != MOEQ_DYNAMIC_TRUE || a->strategy != MOEQ_STRATEGY_GROUP ||
        a->group_size != group_size || a->scale_dtype == MOEQ_DTYPE_U8) {
        char s[96];
        moeq_quant_args_summary(a, s, sizeof s);
        return moeq__reject(why, n,
                            "input activations are %s; needs FP8 dynamic group(%d) with float "
                            "scales",
                            s, (int)group_size);
    }
    return true;
}

/*
 * config_query.c - what the rest of moeq asks a parsed moeq_config: the
 * public accessors, the one-line summary of quantization args, the range
 * check of args built by callers, and the effective format and version
 * rules.  No JSON here: config.c builds the struct, this file only reads it.
 */
#include "config/config.h"

#include <stdio.h>
#include <string.h>

static const moeq__model_field *find_model_field(const moeq_config *cfg, const char *key) {
    for (uint32_t i = 0; i < cfg->n_model_fields; i++) {
        if (strcmp(cfg->model_fields[i].key, key) == 0) return &cfg->model_fields[i];
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Public: accessors                                                         */
/* ------------------------------------------------------------------------ */

const char *moeq_config_source_key(const moeq_config *cfg) {
    return cfg ? cfg->source_key : NULL;
}

int32_t moeq_config_format(const moeq_config *cfg) {
    return cfg ? cfg->format : MOEQ_FORMAT_NONE;
}

const char *moeq_config_version(const moeq_config *cfg) {
    return cfg ? cfg->version : NULL;
}

const char *moeq_config_quantization_status(const moeq_config *cfg) {
    return cfg ? cfg->quantization_status : NULL;
}

const char *moeq_config_raw(const moeq_config *cfg, const char *key) {
    if (!cfg || !key) return NULL;
    if (strcmp(key, "sparsity_config") == 0) return cfg->raw_sparsity;
    if (strcmp(key, "transform_config") == 0) return cfg->raw_transform;
    if (strcmp(key, "kv_cache_scheme") == 0) return cfg->raw_kv_cache;
    return NULL;
}

const moeq_quant_args *moeq_config_kv_cache_scheme(const moeq_config *cfg) {
    return (cfg && cfg->has_kv_cache) ? &cfg->kv_cache : NULL;
}

uint32_t moeq_config_ignore_count(const moeq_config *cfg) {
    return cfg ? cfg->n_ignore : 0;
}

const char *moeq_config_ignore(const moeq_config *cfg, uint32_t i) {
    return (cfg && i < cfg->n_ignore) ? cfg->ignore[i] : NULL;
}

uint32_t moeq_config_warning_count(const moeq_config *cfg) {
    return cfg ? cfg->n_warnings : 0;
}

const char *moeq_config_warning(const moeq_config *cfg, uint32_t i) {
    return (cfg && i < cfg->n_warnings) ? cfg->warnings[i] : NULL;
}

uint32_t moeq_config_group_count(const moeq_config *cfg) {
    return cfg ? cfg->n_groups : 0;
}

moeq_status moeq_config_group(const moeq_config *cfg, uint32_t i, moeq_group_view *out) {
    if (!cfg || !out || i >= cfg->n_groups) return MOEQ_STATUS_INVALID_ARG;
    const moeq__group *g = &cfg->groups[i];
    out->name = g->name;
    out->index = g->index;
    out->n_targets = g->n_targets;
    out->targets = (const char *const *)g->targets;
    out->weights = g->has_weights ? &g->weights : NULL;
    out->input_activations = g->has_input ? &g->input : NULL;
    out->output_activations = g->has_output ? &g->output : NULL;
    out->format = g->format;
    out->preset = g->preset;
    return MOEQ_STATUS_OK;
}

int32_t moeq_config_group_format(const moeq_config *cfg, uint32_t i) {
    if (!cfg || i >= cfg->n_groups) return MOEQ_FORMAT_NONE;
    return moeq__group_format(cfg, &cfg->groups[i]);
}

moeq_status moeq_config_model_number(const moeq_config *cfg, const char *key, double *out) {
    if (!cfg || !key || !out) return MOEQ_STATUS_INVALID_ARG;
    const moeq__model_field *f = find_model_field(cfg, key);
    if (!f || f->is_string) return MOEQ_STATUS_NO_MATCH;
    *out = f->number;
    return MOEQ_STATUS_OK;
}

const char *moeq_config_model_string(const moeq_config *cfg, const char *key) {
    if (!cfg || !key) return NULL;
    const moeq__model_field *f = find_model_field(cfg, key);
    return (f && f->is_string) ? f->string : NULL;
}

int32_t moeq_config_moe_sparsity(const moeq_config *cfg, uint32_t *n_layers) {
    if (n_layers) *n_layers = cfg ? cfg->n_moe_sparsity : 0;
    return cfg ? cfg->moe_sparsity_method : MOEQ_MOE_SPARSITY_NONE;
}

int32_t moeq_config_moe_sparsity_layer(const moeq_config *cfg, uint32_t layer) {
    if (!cfg || !cfg->moe_sparsity || layer >= cfg->n_moe_sparsity) return -1;
    return cfg->moe_sparsity[layer];
}

/* N of the first "layers.N." (or "layers.N" at the end) of a module name. */
static bool layer_index(const char *name, uint64_t *out) {
    for (const char *p = name; (p = strstr(p, "layers.")) != NULL; p++) {
        if (p != name && p[-1] != '.') continue;
        const char *d = p + 7;
        uint64_t n = 0;
        const char *q = d;
        while (*q >= '0' && *q <= '9' && q - d < 9) n = n * 10u + (uint64_t)(*q++ - '0');
        if (q == d || (*q != '.' && *q != '\0')) continue;
        *out = n;
        return true;
    }
    return false;
}

moeq_status moeq_config_retained_experts(const moeq_config *cfg, const char *prefix,
                                         int32_t *out, moeq_error *err) {
    if (!cfg || !prefix || !out) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "moeq_config_retained_experts: %s is NULL",
                           !cfg ? "cfg" : !prefix ? "prefix" : "out");
    }
    *out = 0;
    if (cfg->moe_sparsity_method == MOEQ_MOE_SPARSITY_NONE) return MOEQ_STATUS_OK;
    uint64_t n;
    if (!layer_index(prefix, &n)) {
        return moeq__error(err, MOEQ_STATUS_NO_MATCH,
                           "%s: no decoder layer index (\"layers.N.\") in the name, so "
                           "%s.num_experts cannot say how many experts it holds",
                           prefix, cfg->moe_sparsity_path);
    }
    if (n >= cfg->n_moe_sparsity) {
        return moeq__error(err, MOEQ_STATUS_NO_MATCH,
                           "%s: decoder layer %llu, but %s.num_experts has %u entries "
                           "(layers 0..%u)",
                           prefix, (unsigned long long)n, cfg->moe_sparsity_path,
                           cfg->n_moe_sparsity, cfg->n_moe_sparsity - 1);
    }
    int32_t k = cfg->moe_sparsity[n];
    if (k == 0) {
        return moeq__error(err, MOEQ_STATUS_NO_MATCH,
                           "%s: %s.num_experts[%llu] is null: decoder layer %llu is dense, it "
                           "has no experts",
                           prefix, cfg->moe_sparsity_path, (unsigned long long)n,
                           (unsigned long long)n);
    }
    if (cfg->moe_sparsity_method == MOEQ_MOE_SPARSITY_NOVICE) {
        /* compressed-tensors 0.20.1 (config/expert_sparsity.py) says only that
         * the novices "remain as a single tensor"; llm-compressor's MoNE
         * modifier writes a different layout (one approx_value per novice at
         * its own expert id, listed in approximate_experts). */
        return moeq__error(err, MOEQ_STATUS_UNSUPPORTED,
                           "%s: decoder layer %llu retains %d experts with method \"novice\" "
                           "(MoNe), whose novice experts return a constant vector; "
                           "compressed-tensors 0.20.1 fixes no on-disk layout for them (it says "
                           "they \"remain as a single tensor\" but names neither that tensor, "
                           "its shape, nor the router ids that reach it), so moeq runs only "
                           "method \"prune\"",
                           prefix, (unsigned long long)n, (int)k);
    }
    *out = k;
    return MOEQ_STATUS_OK;
}

/* "int4 group(64) sym static", "float8 block(128x128) sym static",
 * "float4 tensor_group(16) sym local", "int4 group(128) asym static actorder=group". */
size_t moeq_quant_args_summary(const moeq_quant_args *a, char *buf, size_t n) {
    if (!buf) n = 0;
    int w;
    if (!a) {
        w = snprintf(buf, n, "none");
        return w < 0 ? 0 : (size_t)w;
    }
    char shape[40] = "";
    if (a->strategy == MOEQ_STRATEGY_GROUP || a->strategy == MOEQ_STRATEGY_TENSOR_GROUP) {
        snprintf(shape, sizeof shape, "(%d)", (int)a->group_size);
    } else if (a->strategy == MOEQ_STRATEGY_BLOCK) {
        snprintf(shape, sizeof shape, "(%dx%d)", (int)a->block_rows, (int)a->block_cols);
    }
    const char *dyn = a->dynamic == MOEQ_DYNAMIC_TRUE    ? "dynamic"
                      : a->dynamic == MOEQ_DYNAMIC_LOCAL ? "local"
                                                          : "static";
    bool ao = a->actorder != MOEQ_ACTORDER_NONE;
    w = snprintf(buf, n, "%s%d %s%s %s %s%s%s", a->type == MOEQ_QTYPE_FLOAT ? "float" : "int",
                 (int)a->num_bits, moeq_strategy_name(a->strategy), shape,
                 a->symmetric ? "sym" : "asym", dyn, ao ? " actorder=" : "",
                 ao ? moeq_actorder_name(a->actorder) : "");
    return w < 0 ? 0 : (size_t)w;
}

/* ------------------------------------------------------------------------ */
/* Args built by callers                                                     */
/* ------------------------------------------------------------------------ */

moeq_status moeq__quant_args_check(const moeq_quant_args *a, const char *what, moeq_error *err) {
    if (!a) return MOEQ_STATUS_OK;
    const char *bad = NULL;
    int32_t value = 0;
    const char *want = "";
#define MOEQ_ARG_RANGE_(field, lo, hi, text)                                                       \
    if (!bad && (a->field < (lo) || a->field > (hi))) {                                            \
        bad = #field;                                                                              \
        value = a->field;                                                                          \
        want = text;                                                                               \
    }
    MOEQ_ARG_RANGE_(num_bits, 1, INT32_MAX, "a positive bit width")
    MOEQ_ARG_RANGE_(type, MOEQ_QTYPE_INT, MOEQ_QTYPE_FLOAT, "0 (int) or 1 (float)")
    MOEQ_ARG_RANGE_(symmetric, 0, 1, "0 or 1")
    MOEQ_ARG_RANGE_(group_size, -1, INT32_MAX, "-1, 0 or a positive size")
    MOEQ_ARG_RANGE_(strategy, 0, MOEQ__STRATEGY_COUNT - 1, "a moeq_strategy (0..6)")
    MOEQ_ARG_RANGE_(block_rows, 0, INT32_MAX, "0 or a positive size")
    MOEQ_ARG_RANGE_(block_cols, 0, INT32_MAX, "0 or a positive size")
    MOEQ_ARG_RANGE_(dynamic, MOEQ_DYNAMIC_FALSE, MOEQ_DYNAMIC_LOCAL, "a moeq_dynamic (0..2)")
    MOEQ_ARG_RANGE_(actorder, 0, MOEQ__ACTORDER_COUNT - 1, "a moeq_actorder (0..4)")
    MOEQ_ARG_RANGE_(scale_dtype, 0, MOEQ_DTYPE_COUNT_ - 1, "a moeq_dtype (0 when null)")
    MOEQ_ARG_RANGE_(zp_dtype, 0, MOEQ_DTYPE_COUNT_ - 1, "a moeq_dtype (0 when null)")
#undef MOEQ_ARG_RANGE_
    if (bad) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s.%s is %d; must be %s", what, bad,
                           (int)value, want);
    }
    return MOEQ_STATUS_OK;
}

/* ------------------------------------------------------------------------ */
/* Formats and versions                                                      */
/* ------------------------------------------------------------------------ */

int32_t moeq__infer_format(const moeq_quant_args *w, const moeq_quant_args *in) {
    if (!w) return MOEQ_FORMAT_DENSE;
    bool fl = w->type == MOEQ_QTYPE_FLOAT;
    if (fl && w->num_bits == 4 && w->group_size == 32) return MOEQ_FORMAT_MXFP4_PACK_QUANTIZED;
    if (fl && w->num_bits == 6 && w->group_size == 32) return MOEQ_FORMAT_MXFP6_PACK_QUANTIZED;
    if (fl && w->num_bits == 8 && w->group_size == 32 && w->scale_dtype == MOEQ_DTYPE_U8) {
        return MOEQ_FORMAT_MXFP8_QUANTIZED;
    }
    if (fl && w->num_bits == 4 && w->group_size == 16) return MOEQ_FORMAT_NVFP4_PACK_QUANTIZED;
    if (!fl && in) return MOEQ_FORMAT_INT_QUANTIZED;
    /* pack-quantized also takes int activations, but int-quantized took those. */
    if (!fl && w->num_bits >= 1 && w->num_bits <= 8 && (!in || in->type == MOEQ_QTYPE_INT)) {
        return MOEQ_FORMAT_PACK_QUANTIZED;
    }
    if (fl && in) return MOEQ_FORMAT_FLOAT_QUANTIZED;
    return MOEQ_FORMAT_NAIVE_QUANTIZED;
}

int32_t moeq__group_format(const moeq_config *cfg, const moeq__group *g) {
    if (g->format != MOEQ_FORMAT_NONE) return g->format;
    if (cfg->format != MOEQ_FORMAT_NONE && cfg->format != MOEQ_FORMAT_MIXED_PRECISION) {
        return cfg->format;
    }
    return moeq__infer_format(g->has_weights ? &g->weights : NULL, g->has_input ? &g->input : NULL);
}

bool moeq__config_version_before(const moeq_config *cfg, int major, int minor, int patch) {
    if (!cfg || cfg->version_major < 0) return false;
    if (cfg->version_major != major) return cfg->version_major < major;
    if (cfg->version_minor != minor) return cfg->version_minor < minor;
    return cfg->version_patch < patch;
}

/* LEGACY_PACKING: pack-quantized written before 0.18.0 used floor(32/b)
 * values per int32 word (only 3/5/6/7 bits differ from the dense layout).
 * MXFP4_V013: the MXFP4 compressor of the 0.13 line wrote E8M0 scale bytes 2
 * too small; 0.14.0 fixed it.  Every 0.13.* version is flagged (0.13.0 and any
 * dev/nightly build numbered 0.13.x), and only when a group's effective
 * format is mxfp4-pack-quantized.  Unknown versions get no flag. */
uint32_t moeq_config_dequant_flags(const moeq_config *cfg) {
    if (!cfg || cfg->version_major < 0) return 0;
    uint32_t flags = 0;
    if (moeq__config_version_before(cfg, 0, 18, 0)) flags |= MOEQ_DEQUANT_LEGACY_PACKING;
    if (cfg->version_major == 0 && cfg->version_minor == 13) {
        for (uint32_t i = 0; i < cfg->n_groups; i++) {
            if (moeq__group_format(cfg, &cfg->groups[i]) == MOEQ_FORMAT_MXFP4_PACK_QUANTIZED) {
                flags |= MOEQ_DEQUANT_MXFP4_V013;
                break;
            }
        }
    }
    return flags;
}

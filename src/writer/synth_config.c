/*
 * synth_config.c - config.json of a synthetic checkpoint: the model's
 * hyper-parameters and a quantization_config as compressed-tensors 0.18.0
 * writes it (model_compressor.py:update_config: json.dump(indent=2,
 * sort_keys=True); QuantizationConfig.model_dump without quant_method, which
 * update_config puts back; every QuantizationArgs field, derived).
 *
 * The layout's args are written, read back with moeq's parser (which derives
 * observer, zp_dtype and strategy as CT's validators do) and written again
 * from what it read, so the file holds the derived values CT would dump.
 */
#include "writer/synth.h"
#include "config/config.h"
#include "common/pyjson.h"

#include <stdio.h>
#include <string.h>

/* A dtype field: null or "torch.<name>". */
static moeq__pjv *dtype_json(moeq__pj *d, int32_t dtype) {
    const char *name = moeq__torch_dtype_name(dtype);
    return name ? moeq__pj_string(d, name) : moeq__pj_null(d);
}

/* One QuantizationArgs, every field as QuantizationArgs.model_dump gives it. */
static moeq__pjv *args_json(moeq__pj *d, const moeq_quant_args *a) {
    if (!a) return moeq__pj_null(d);
    moeq__pjv *o = moeq__pj_object(d);
    moeq__pj_set(d, o, "actorder",
                 a->actorder == MOEQ_ACTORDER_NONE
                     ? moeq__pj_null(d)
                     : moeq__pj_string(d, moeq_actorder_name(a->actorder)));
    moeq__pjv *bs = moeq__pj_null(d);
    if (a->block_rows > 0 || a->block_cols > 0) {
        bs = moeq__pj_array(d);
        moeq__pj_push(d, bs, moeq__pj_int(d, a->block_rows));
        moeq__pj_push(d, bs, moeq__pj_int(d, a->block_cols));
    }
    moeq__pj_set(d, o, "block_structure", bs);
    moeq__pj_set(d, o, "dynamic",
                 a->dynamic == MOEQ_DYNAMIC_LOCAL
                     ? moeq__pj_string(d, "local")
                     : moeq__pj_bool(d, a->dynamic == MOEQ_DYNAMIC_TRUE));
    moeq__pj_set(d, o, "group_size",
                 a->group_size ? moeq__pj_int(d, a->group_size) : moeq__pj_null(d));
    moeq__pj_set(d, o, "num_bits", moeq__pj_int(d, a->num_bits));
    moeq__pj_set(d, o, "observer",
                 a->observer ? moeq__pj_string(d, a->observer) : moeq__pj_null(d));
    moeq__pj_set(d, o, "observer_kwargs", moeq__pj_object(d));
    moeq__pj_set(d, o, "scale_dtype", dtype_json(d, a->scale_dtype));
    moeq__pj_set(d, o, "strategy", moeq__pj_string(d, moeq_strategy_name(a->strategy)));
    moeq__pj_set(d, o, "symmetric", moeq__pj_bool(d, a->symmetric != 0));
    moeq__pj_set(d, o, "type", moeq__pj_string(d, a->type == MOEQ_QTYPE_FLOAT ? "float" : "int"));
    /* CT serialises zp_dtype as null whenever symmetric */
    moeq__pj_set(d, o, "zp_dtype", a->symmetric ? moeq__pj_null(d) : dtype_json(d, a->zp_dtype));
    return o;
}

/* A config group as QuantizationScheme.model_dump gives it. */
typedef struct qgroup {
    const char *name;
    uint32_t n_targets;
    const char *const *targets;
    const moeq_quant_args *w, *in, *out;
    int32_t format; /* effective: the group's own or CT's inference */
} qgroup;

static moeq__pjv *scheme_json(moeq__pj *d, const qgroup *g) {
    moeq__pjv *o = moeq__pj_object(d);
    moeq__pj_set(d, o, "format", moeq__pj_string(d, moeq_format_name(g->format)));
    moeq__pj_set(d, o, "input_activations", args_json(d, g->in));
    moeq__pj_set(d, o, "output_activations", args_json(d, g->out));
    moeq__pjv *t = moeq__pj_array(d);
    for (uint32_t i = 0; i < g->n_targets; i++)
        moeq__pj_push(d, t, moeq__pj_string(d, g->targets[i]));
    moeq__pj_set(d, o, "targets", t);
    moeq__pj_set(d, o, "weights", args_json(d, g->w));
    return o;
}

/* infer_model_format's summary: no compressed format -> dense, one -> it,
 * several -> mixed-precision (dense groups do not count). */
static int32_t top_format(const qgroup *g, uint32_t n) {
    int32_t seen = MOEQ_FORMAT_NONE;
    for (uint32_t i = 0; i < n; i++) {
        if (g[i].format == MOEQ_FORMAT_DENSE) continue;
        if (seen == MOEQ_FORMAT_NONE) {
            seen = g[i].format;
        } else if (seen != g[i].format) {
            return MOEQ_FORMAT_MIXED_PRECISION;
        }
    }
    return seen == MOEQ_FORMAT_NONE ? MOEQ_FORMAT_DENSE : seen;
}

static moeq__pjv *quant_config_json(moeq__pj *d, const moeq__synth *s, const qgroup *g,
                                    uint32_t n) {
    moeq__pjv *q = moeq__pj_object(d);
    moeq__pjv *groups = moeq__pj_object(d);
    for (uint32_t i = 0; i < n; i++) moeq__pj_set(d, groups, g[i].name, scheme_json(d, &g[i]));
    moeq__pj_set(d, q, "config_groups", groups);
    moeq__pj_set(d, q, "format", moeq__pj_string(d, moeq_format_name(top_format(g, n))));
    moeq__pj_set(d, q, "global_compression_ratio", moeq__pj_null(d));
    moeq__pjv *ignore = moeq__pj_array(d);
    for (uint32_t i = 0; i < s->L.n_ignore; i++)
        moeq__pj_push(d, ignore, moeq__pj_string(d, s->L.ignore[i]));
    moeq__pj_set(d, q, "ignore", ignore);
    moeq__pj_set(d, q, "kv_cache_scheme", moeq__pj_null(d));
    moeq__pj_set(d, q, "quant_method", moeq__pj_string(d, "compressed-tensors"));
    moeq__pj_set(d, q, "quantization_status", moeq__pj_string(d, "compressed"));
    moeq__pj_set(d, q, "sparsity_config", moeq__pj_object(d));
    moeq__pj_set(d, q, "transform_config", moeq__pj_object(d));
    moeq__pj_set(d, q, "version", moeq__pj_string(d, "0.18.0"));
    return q;
}

static const char *dtype_word(int32_t dtype) {
    return dtype == MOEQ_DTYPE_F16 ? "float16" : dtype == MOEQ_DTYPE_F32 ? "float32" : "bfloat16";
}

/* The model's hyper-parameters, in the spelling of DeepSeek-V3/GLM-4.5 style
 * configs (num_experts too, which Qwen-style readers look for). */
static void model_fields(moeq__pj *d, moeq__pjv *root, const moeq__synth *s) {
    const moeq_synth_layout *L = &s->L;
    moeq__pj_set(d, root, "first_k_dense_replace", moeq__pj_int(d, L->first_dense_layers));
    moeq__pj_set(d, root, "hidden_size", moeq__pj_int(d, L->hidden_size));
    moeq__pj_set(d, root, "intermediate_size", moeq__pj_int(d, L->intermediate_size));
    moeq__pj_set(d, root, "model_type", moeq__pj_string(d, L->model_type));
    moeq__pj_set(d, root, "moe_intermediate_size", moeq__pj_int(d, L->moe_intermediate_size));
    moeq__pj_set(d, root, "n_group", moeq__pj_int(d, L->n_group));
    moeq__pj_set(d, root, "n_routed_experts", moeq__pj_int(d, L->num_experts));
    moeq__pj_set(d, root, "n_shared_experts", moeq__pj_int(d, L->n_shared_experts));
    moeq__pj_set(d, root, "norm_topk_prob", moeq__pj_bool(d, L->norm_topk_prob != 0));
    moeq__pj_set(d, root, "num_experts", moeq__pj_int(d, L->num_experts));
    moeq__pj_set(d, root, "num_experts_per_tok", moeq__pj_int(d, L->top_k));
    moeq__pj_set(d, root, "num_hidden_layers", moeq__pj_int(d, L->num_layers));
    if (L->num_attention_heads > 0) {
        moeq__pj_set(d, root, "head_dim", moeq__pj_int(d, s->head_dim));
        moeq__pj_set(d, root, "num_attention_heads", moeq__pj_int(d, L->num_attention_heads));
        moeq__pj_set(d, root, "num_key_value_heads", moeq__pj_int(d, L->num_key_value_heads));
    }
    moeq__pj_set(d, root, "rms_norm_eps", moeq__pj_float(d, 1e-6, false));
    moeq__pj_set(d, root, "routed_scaling_factor",
                 moeq__pj_float(d, (double)L->routed_scaling_factor, true));
    moeq__pj_set(d, root, "scoring_func",
                 moeq__pj_string(d, L->scoring == MOEQ_SCORING_SIGMOID ? "sigmoid" : "softmax"));
    moeq__pj_set(d, root, "tie_word_embeddings", moeq__pj_bool(d, false));
    moeq__pj_set(d, root, "topk_group", moeq__pj_int(d, L->topk_group));
    moeq__pj_set(d, root, "topk_method",
                 moeq__pj_string(d, L->correction_bias ? "noaux_tc"
                                    : L->n_group > 1   ? "group_limited_greedy"
                                                       : "greedy"));
    moeq__pj_set(d, root, "torch_dtype", moeq__pj_string(d, dtype_word(L->dtype)));
    moeq__pj_set(d, root, "vocab_size", moeq__pj_int(d, L->vocab_size));
    moeq__pjv *prov = moeq__pj_object(d);
    moeq__pj_set(d, prov, "seed", moeq__pj_uint(d, L->seed));
    char writer[64];
    snprintf(writer, sizeof writer, "moeq %s moeq_synth_write", moeq_version());
    moeq__pj_set(d, prov, "writer", moeq__pj_string(d, writer));
    moeq__pj_set(d, root, "moeq_synth", prov);
}

static moeq_status render(const moeq__synth *s, const qgroup *g, uint32_t n, char **text,
                          size_t *len, moeq_error *err) {
    moeq__pj *d = moeq__pj_create();
    if (!d) return moeq__error(err, MOEQ_STATUS_NOMEM, "config.json: out of memory");
    moeq__pjv *root = moeq__pj_object(d);
    model_fields(d, root, s);
    moeq__pj_set(d, root, "quantization_config", quant_config_json(d, s, g, n));
    const char *why = NULL;
    *text = moeq__pj_dump(d, root, len, &why);
    moeq__pj_destroy(d);
    if (*text) return MOEQ_STATUS_OK;
    if (why && strcmp(why, "out of memory") == 0) {
        return moeq__error(err, MOEQ_STATUS_NOMEM, "config.json: out of memory");
    }
    return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                       "layout: a group name, target or ignore entry cannot be written to "
                       "config.json (%s)",
                       why ? why : "unknown reason");
}

/* compressed-tensors rejects unknown keys in args and schemes; so does this. */
static moeq_status parse(const char *text, size_t len, moeq_config **cfg, moeq_error *err) {
    const moeq_config_options opts = {1, 0};
    const moeq_status st = moeq_config_parse(text, len, &opts, cfg, err);
    if (st != MOEQ_STATUS_OK) {
        return moeq__error_prefix(err, st, "layout.groups: config.json is not accepted");
    }
    return MOEQ_STATUS_OK;
}

moeq_status moeq__synth_config(const moeq__synth *s, char **text, size_t *len, moeq_config **cfg,
                               moeq_error *err) {
    qgroup g[MOEQ__SYNTH_MAX_GROUPS];
    const uint32_t n = s->L.n_groups;
    for (uint32_t i = 0; i < n; i++) {
        const moeq_synth_group *lg = &s->L.groups[i];
        g[i] = (qgroup){lg->name, lg->n_targets, lg->targets, lg->weights, lg->input_activations,
                        NULL,     lg->format};
        if (g[i].format == MOEQ_FORMAT_NONE)
            g[i].format = moeq__infer_format(lg->weights, lg->input_activations);
    }
    /* first pass: the args as given; the parser derives the rest */
    char *first = NULL;
    size_t first_len = 0;
    moeq_config *parsed = NULL;
    moeq_status st = render(s, g, n, &first, &first_len, err);
    if (st == MOEQ_STATUS_OK) st = parse(first, first_len, &parsed, err);
    moeq__free(first);
    if (st != MOEQ_STATUS_OK) return st;
    /* second pass: the derived args, in the groups' JSON (= sorted) order */
    const uint32_t np = moeq_config_group_count(parsed);
    for (uint32_t i = 0; i < np; i++) {
        moeq_group_view v;
        moeq_config_group(parsed, i, &v);
        g[i] = (qgroup){v.name,    v.n_targets,         v.targets,
                        v.weights, v.input_activations, v.output_activations,
                        v.format};
    }
    st = render(s, g, np, text, len, err);
    if (st == MOEQ_STATUS_OK) st = parse(*text, *len, cfg, err);
    moeq_config_destroy(parsed);
    if (st != MOEQ_STATUS_OK) {
        moeq__free(*text);
        *text = NULL;
    }
    return st;
}

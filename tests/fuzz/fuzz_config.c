/*
 * fuzz_config.c - bytes -> moeq_config_parse (lenient and strict keys); when
 * a config comes out, every accessor, a few resolutions and moeq_plan (text,
 * JSON, a writer that stops early) over a fixed list of layers.
 *
 * Input: the bytes are the JSON text.  The last byte (when the input is at
 * least 2 bytes long) also picks the regex match limit and plan options, so
 * any config.json is a valid seed as it is.
 */
#include "fuzz_common.h"

static const char k_layers[] =
    "model.layers.0.self_attn.q_proj\n"
    "model.layers.0.self_attn.qkv_proj\n"
    "model.layers.0.mlp.gate_up_proj\n"
    "model.layers.0.mlp.down_proj\n"
    "# a comment\n"
    "\n"
    "model.layers.1.mlp.experts moe 4\n"
    "model.layers.1.block_sparse_moe.experts moe 2 w1,w3,w2\n"
    "lm_head\n"
    "model.layers.3.mlp.gate\n";

static const char *const k_names[] = {
    "model.layers.0.self_attn.o_proj",
    "model.layers.2.mlp.experts.3.up_proj",
    "lm_head",
    "model.embed_tokens",
    "model.layers.0.self_attn.qkv_proj",
};

static const char *const k_model_keys[] = {"num_experts", "n_routed_experts", "hidden_size",
                                           "num_experts_per_tok", "norm_topk_prob"};

/* A writer that gives up after `left` bytes. */
static int32_t stop_after(const char *data, size_t len, void *user) {
    (void)data;
    size_t *left = user;
    if (len > *left) return 1;
    *left -= len;
    return 0;
}

static void touch(const char *s) {
    /* Reading every byte makes ASan check the string is alive and terminated. */
    if (s) FZ_ASSERT(strlen(s) < ((size_t)1 << 40));
}

static void exercise(const moeq_config *cfg, uint8_t knobs) {
    moeq_error err;
    touch(moeq_config_source_key(cfg));
    (void)moeq_config_format(cfg);
    touch(moeq_config_version(cfg));
    touch(moeq_config_quantization_status(cfg));
    touch(moeq_config_raw(cfg, "sparsity_config"));
    touch(moeq_config_raw(cfg, "transform_config"));
    touch(moeq_config_raw(cfg, "kv_cache_scheme"));
    touch(moeq_config_raw(cfg, "bogus"));
    char buf[128];
    const moeq_quant_args *kv = moeq_config_kv_cache_scheme(cfg);
    if (kv) moeq_quant_args_summary(kv, buf, sizeof buf);
    for (uint32_t i = 0; i <= moeq_config_ignore_count(cfg); i++) touch(moeq_config_ignore(cfg, i));
    for (uint32_t i = 0; i <= moeq_config_warning_count(cfg); i++) {
        touch(moeq_config_warning(cfg, i));
    }
    uint32_t n = moeq_config_group_count(cfg);
    for (uint32_t i = 0; i <= n; i++) {
        moeq_group_view v;
        moeq_status st = moeq_config_group(cfg, i, &v);
        FZ_ASSERT((st == MOEQ_STATUS_OK) == (i < n));
        if (st != MOEQ_STATUS_OK) continue;
        touch(v.name);
        for (uint32_t t = 0; t < v.n_targets; t++) touch(v.targets[t]);
        const moeq_quant_args *args[3] = {v.weights, v.input_activations, v.output_activations};
        for (int a = 0; a < 3; a++) {
            if (!args[a]) continue;
            moeq_quant_args_summary(args[a], buf, sizeof buf);
            touch(args[a]->observer);
            (void)moeq_strategy_name(args[a]->strategy);
            (void)moeq_actorder_name(args[a]->actorder);
        }
        (void)moeq_format_name(v.format);
    }
    for (size_t i = 0; i < sizeof k_model_keys / sizeof k_model_keys[0]; i++) {
        double d;
        (void)moeq_config_model_number(cfg, k_model_keys[i], &d);
    }
    touch(moeq_config_model_string(cfg, "model_type"));
    touch(moeq_config_model_string(cfg, "scoring_func"));
    (void)moeq_config_dequant_flags(cfg);

    moeq_resolve_options ro = {(int32_t)(knobs & 1), 0, NULL, (knobs >> 1) & 1};
    for (size_t i = 0; i < sizeof k_names / sizeof k_names[0]; i++) {
        moeq_resolution res;
        for (int32_t kind = 0; kind < 3; kind++) {
            FZ(&err, moeq_resolve(cfg, k_names[i], kind, &ro, &res, &err));
        }
    }
    moeq_resolution res;
    if (FZ(&err, moeq_resolve_moe(cfg, "model.layers.1.mlp.experts", 3, NULL, &ro, &res, &err)) ==
        MOEQ_STATUS_OK) {
        moeq_select_options so = {(knobs >> 2) & 1, (knobs >> 3) & 1};
        moeq_selection sel;
        FZ(&err, moeq_select(&res, "model.layers.1.mlp.experts", &so, &sel, &err));
    }

    moeq_select_options so = {(knobs >> 2) & 1, (knobs >> 3) & 1};
    moeq_plan_options po = {&ro, &so, (knobs >> 4) & 1, 0, NULL};
    char *text = NULL;
    uint32_t errors = 0;
    if (FZ(&err, moeq_plan(cfg, k_layers, sizeof k_layers - 1, &po, &text, &errors, &err)) ==
        MOEQ_STATUS_OK) {
        touch(text);
    }
    moeq_free(text);
    /* Every group listed (no layer file), in the other output form. */
    po.json = !po.json;
    text = NULL;
    if (FZ(&err, moeq_plan(cfg, "", 0, &po, &text, &errors, &err)) == MOEQ_STATUS_OK) touch(text);
    moeq_free(text);
    size_t left = (size_t)(knobs >> 5) * 97;
    FZ(&err, moeq_plan_write(cfg, k_layers, sizeof k_layers - 1, &po, stop_after, &left, &errors,
                             &err));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t knobs = size >= 2 ? data[size - 1] : 0;
    moeq_error err;
    for (int strict = 0; strict < 2; strict++) {
        /* A small limit now and then (a last byte >= 0xC0, never ASCII text),
         * so limits are hit on ordinary names. */
        moeq_config_options opts = {strict, (knobs & 0xC0) == 0xC0 ? 50u : 0u};
        moeq_config *cfg = NULL;
        moeq_status st = FZ(&err, moeq_config_parse((const char *)data, size, &opts, &cfg, &err));
        FZ_ASSERT((st == MOEQ_STATUS_OK) == (cfg != NULL));
        if (cfg) exercise(cfg, knobs);
        moeq_config_destroy(cfg);
    }
    return 0;
}

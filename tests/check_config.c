/*
 * check_config.c - the compressed-tensors config parser: real configs, the
 * QuantizationArgs rules of CT 0.18, presets, malformed input, OOM, warnings,
 * model fields and loading from disk.
 *
 * JSON in this file is written with single quotes for readability; parse_sq()
 * turns them into double quotes before parsing.
 */
#include "test_util.h"
#include "config/config.h"

#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#define CONFIG_DIR MOEQ_TEST_DATA_DIR "/configs/"

/* ck_assert_ok with an error record variable (test_util.h's macro tests its
 * pointer, which warns when given &err directly). */
#define assert_ok_err(expr, errv)             \
    do {                                      \
        const moeq_error *err_p_ = &(errv);   \
        ck_assert_ok((expr), err_p_);         \
    } while (0)

/* ---- helpers ---------------------------------------------------------------- */

/* Copy of `sq` with ' replaced by " (caller frees). */
static char *dq(const char *sq) {
    size_t n = strlen(sq);
    char *s = malloc(n + 1);
    ck_assert_ptr_nonnull(s);
    for (size_t i = 0; i <= n; i++) s[i] = sq[i] == '\'' ? '"' : sq[i];
    return s;
}

static moeq_status parse_sq(const char *sq, const moeq_config_options *opts, moeq_config **out,
                            moeq_error *err) {
    char *json = dq(sq);
    moeq_error_clear(err);
    moeq_status st = moeq_config_parse(json, strlen(json), opts, out, err);
    free(json);
    return st;
}

/* Parses a config that must be accepted. */
static moeq_config *ok_sq(const char *sq) {
    moeq_config *cfg = NULL;
    moeq_error err;
    moeq_status st = parse_sq(sq, NULL, &cfg, &err);
    ck_assert_msg(st == MOEQ_STATUS_OK, "%s: %s\n  in: %s", moeq_status_name(st), err.message, sq);
    ck_assert_ptr_nonnull(cfg);
    return cfg;
}

static moeq_config *load_ok(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s%s", CONFIG_DIR, name);
    moeq_config *cfg = NULL;
    moeq_error err;
    moeq_error_clear(&err);
    moeq_status st = moeq_config_load(path, NULL, &cfg, &err);
    assert_ok_err(st, err);
    return cfg;
}

static moeq_group_view group_of(const moeq_config *cfg, uint32_t i) {
    moeq_group_view g;
    ck_assert_int_eq(moeq_config_group(cfg, i, &g), MOEQ_STATUS_OK);
    return g;
}

/* The group's weights summary, e.g. "int4 group(64) sym static". */
static const char *summary(const moeq_quant_args *a) {
    static char buf[128];
    moeq_quant_args_summary(a, buf, sizeof buf);
    return buf;
}

static bool has_warning(const moeq_config *cfg, const char *needle) {
    for (uint32_t i = 0; i < moeq_config_warning_count(cfg); i++) {
        if (strstr(moeq_config_warning(cfg, i), needle)) return true;
    }
    return false;
}

/* A bare config whose only group "g" targets Linear with these weights. */
static moeq_config *weights_cfg(const char *weights_sq) {
    char buf[2048];
    snprintf(buf, sizeof buf, "{'config_groups': {'g': {'targets': ['Linear'], 'weights': %s}}}",
             weights_sq);
    return ok_sq(buf);
}

static moeq_status weights_status(const char *weights_sq, moeq_error *err) {
    char buf[2048];
    snprintf(buf, sizeof buf, "{'config_groups': {'g': {'targets': ['Linear'], 'weights': %s}}}",
             weights_sq);
    moeq_config *cfg = NULL;
    moeq_status st = parse_sq(buf, NULL, &cfg, err);
    moeq_config_destroy(cfg);
    return st;
}

/* ---- the real configs of shared/configs ----------------------------------- */

START_TEST(test_real_glm) {
    moeq_config *cfg = load_ok("glm-5.3-int4-int8mix-rtn-g64-mixed-regex-no-linear.json");
    ck_assert_str_eq(moeq_config_source_key(cfg), "quantization_config");
    ck_assert_int_eq(moeq_config_format(cfg), MOEQ_FORMAT_PACK_QUANTIZED);
    ck_assert_str_eq(moeq_config_version(cfg), "0.18.0");
    ck_assert_int_eq(cfg->version_major, 0);
    ck_assert_int_eq(cfg->version_minor, 18);
    ck_assert_int_eq(cfg->version_patch, 0);
    ck_assert_str_eq(moeq_config_quantization_status(cfg), "compressed");
    ck_assert(!cfg->has_global_compression_ratio);
    ck_assert_str_eq(moeq_config_raw(cfg, "sparsity_config"), "{}");
    ck_assert_str_eq(moeq_config_raw(cfg, "transform_config"), "{}");
    ck_assert_ptr_null(moeq_config_raw(cfg, "kv_cache_scheme"));
    ck_assert_ptr_null(moeq_config_kv_cache_scheme(cfg));
    ck_assert_uint_eq(moeq_config_ignore_count(cfg), 6);
    ck_assert_str_eq(moeq_config_ignore(cfg, 0), "lm_head");
    ck_assert_str_eq(moeq_config_ignore(cfg, 2), "re:model\\.layers\\.[0-2]\\..*");
    ck_assert_str_eq(moeq_config_ignore(cfg, 5), "re:.*mlp\\.gate$");
    ck_assert_ptr_null(moeq_config_ignore(cfg, 6));
    ck_assert_uint_eq(moeq_config_warning_count(cfg), 0);
    ck_assert_uint_eq(moeq_config_group_count(cfg), 2);

    moeq_group_view g0 = group_of(cfg, 0), g1 = group_of(cfg, 1);
    ck_assert_str_eq(g0.name, "group_0");
    ck_assert_str_eq(g1.name, "group_1");
    ck_assert_uint_eq(g1.index, 1);
    ck_assert_int_eq(g0.format, MOEQ_FORMAT_PACK_QUANTIZED);
    ck_assert_int_eq(g0.preset, 0);
    ck_assert_uint_eq(g0.n_targets, 1);
    static const char g0_start[] = "re:model\\.layers\\.(?:[3-9]|[1-6][0-9]|7[0-7])\\.(?:self_attn";
    ck_assert(strncmp(g0.targets[0], g0_start, strlen(g0_start)) == 0);
    ck_assert(strstr(g1.targets[0], "mlp\\.experts\\.\\d+\\.(?:gate_proj|up_proj|down_proj)$") != NULL);
    ck_assert_ptr_null(g0.input_activations);
    ck_assert_ptr_null(g0.output_activations);
    ck_assert_int_eq(g0.weights->num_bits, 8);
    ck_assert_int_eq(g1.weights->num_bits, 4);
    ck_assert_str_eq(summary(g1.weights), "int4 group(64) sym static");
    ck_assert_int_eq(g1.weights->strategy_given, 1);
    ck_assert_int_eq(g1.weights->scale_dtype, MOEQ_DTYPE_INVALID);
    ck_assert_int_eq(g1.weights->zp_dtype, MOEQ_DTYPE_INVALID); /* symmetric */
    ck_assert_str_eq(g1.weights->observer, "memoryless_minmax");
    ck_assert_ptr_eq(g0.weights->observer, g1.weights->observer); /* interned once */
    ck_assert_int_eq(moeq__group_format(cfg, &cfg->groups[1]), MOEQ_FORMAT_PACK_QUANTIZED);
    ck_assert_uint_eq(moeq_config_dequant_flags(cfg), 0);
    ck_assert_uint_eq(cfg->regex_match_limit, 100000);
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_real_llama_fp8_dynamic) {
    moeq_config *cfg = load_ok("llama-3.1-8b-instruct-fp8-dynamic-channel-token.json");
    ck_assert_str_eq(moeq_config_source_key(cfg), "compression_config");
    ck_assert_int_eq(moeq_config_format(cfg), MOEQ_FORMAT_FLOAT_QUANTIZED);
    ck_assert_str_eq(moeq_config_version(cfg), "0.6.0.20240921");
    ck_assert_int_eq(cfg->version_minor, 6);
    ck_assert_int_eq(cfg->version_patch, 0);
    ck_assert(cfg->has_global_compression_ratio);
    ck_assert(cfg->global_compression_ratio > 1.2392 && cfg->global_compression_ratio < 1.2393);
    ck_assert_ptr_null(moeq_config_raw(cfg, "sparsity_config"));
    moeq_group_view g = group_of(cfg, 0);
    ck_assert_str_eq(g.targets[0], "Linear");
    ck_assert_int_eq(g.format, MOEQ_FORMAT_NONE);
    ck_assert_str_eq(summary(g.weights), "float8 channel sym static");
    ck_assert_str_eq(g.weights->observer, "minmax");
    ck_assert_str_eq(summary(g.input_activations), "float8 token sym dynamic");
    /* dynamic: the old "memoryless" observer becomes null, without a warning */
    ck_assert_ptr_null(g.input_activations->observer);
    ck_assert_uint_eq(moeq_config_warning_count(cfg), 0);
    ck_assert_int_eq(moeq__group_format(cfg, &cfg->groups[0]), MOEQ_FORMAT_FLOAT_QUANTIZED);
    ck_assert_uint_eq(moeq_config_dequant_flags(cfg), MOEQ_DEQUANT_LEGACY_PACKING);
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_real_llama2c_w4a16) {
    moeq_config *cfg = load_ok("llama2c-stories110m-w4a16-g128-pack-quantized.json");
    ck_assert_str_eq(moeq_config_source_key(cfg), "compression_config");
    ck_assert_int_eq(moeq_config_format(cfg), MOEQ_FORMAT_PACK_QUANTIZED);
    ck_assert_str_eq(moeq_config_version(cfg), "0.6.0.20240926");
    moeq_group_view g = group_of(cfg, 0);
    ck_assert_str_eq(summary(g.weights), "int4 group(128) sym static");
    ck_assert_int_eq(g.weights->actorder, MOEQ_ACTORDER_NONE);
    ck_assert_ptr_null(g.input_activations);
    ck_assert_uint_eq(moeq_config_ignore_count(cfg), 1);
    ck_assert_str_eq(moeq_config_ignore(cfg, 0), "lm_head");
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_real_mxfp4_w4a4) {
    moeq_config *cfg = load_ok("meta-llama-3-8b-mxfp4-w4a4-ct-readme.json");
    ck_assert_int_eq(moeq_config_format(cfg), MOEQ_FORMAT_MXFP4_PACK_QUANTIZED);
    ck_assert_str_eq(moeq_config_version(cfg), "0.18.1.dev0+gac8e2ba.d20260813");
    ck_assert_int_eq(cfg->version_minor, 18);
    ck_assert_int_eq(cfg->version_patch, 1);
    moeq_group_view g = group_of(cfg, 0);
    ck_assert_int_eq(g.format, MOEQ_FORMAT_MXFP4_PACK_QUANTIZED);
    ck_assert_str_eq(summary(g.weights), "float4 group(32) sym static");
    ck_assert_int_eq(g.weights->scale_dtype, MOEQ_DTYPE_U8);
    ck_assert_int_eq(g.weights->zp_dtype, MOEQ_DTYPE_INVALID);
    ck_assert_str_eq(summary(g.input_activations), "float4 group(32) sym dynamic");
    ck_assert_int_eq(g.input_activations->scale_dtype, MOEQ_DTYPE_U8);
    ck_assert_ptr_null(g.input_activations->observer);
    ck_assert_uint_eq(moeq_config_dequant_flags(cfg), 0);
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_real_phi3_fp8_static) {
    moeq_config *cfg = load_ok("phi-3-mini-128k-instruct-fp8-static-naive-frozen.json");
    ck_assert_str_eq(moeq_config_source_key(cfg), "compression_config");
    ck_assert_int_eq(moeq_config_format(cfg), MOEQ_FORMAT_NAIVE_QUANTIZED);
    ck_assert_str_eq(moeq_config_quantization_status(cfg), "frozen");
    ck_assert_str_eq(moeq_config_version(cfg), "");
    ck_assert_int_eq(cfg->version_major, -1);
    ck_assert_uint_eq(moeq_config_dequant_flags(cfg), 0); /* unknown version: no guess */
    moeq_group_view g = group_of(cfg, 0);
    /* oldest schema: no actorder key at all */
    ck_assert_str_eq(summary(g.weights), "float8 tensor sym static");
    ck_assert_str_eq(summary(g.input_activations), "float8 tensor sym static");
    ck_assert_str_eq(g.input_activations->observer, "minmax");
    ck_assert_int_eq(g.weights->strategy_given, 1);
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_real_qwen3_w8a8) {
    moeq_config *cfg = load_ok("qwen3-w8a8-int8-mse-observer-v0.13.json");
    ck_assert_int_eq(moeq_config_format(cfg), MOEQ_FORMAT_INT_QUANTIZED);
    ck_assert_str_eq(moeq_config_version(cfg), "0.13.0");
    moeq_group_view g = group_of(cfg, 0);
    ck_assert_int_eq(g.format, MOEQ_FORMAT_INT_QUANTIZED);
    ck_assert_str_eq(summary(g.weights), "int8 channel sym static");
    ck_assert_str_eq(g.weights->observer, "mse");
    ck_assert_str_eq(summary(g.input_activations), "int8 token sym dynamic");
    ck_assert_ptr_null(g.input_activations->observer);
    /* 0.13 but not MXFP4: only the packing flag */
    ck_assert_uint_eq(moeq_config_dequant_flags(cfg), MOEQ_DEQUANT_LEGACY_PACKING);
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_real_qwen35_mxfp4a16) {
    moeq_config *cfg = load_ok("qwen3.5-27b-mxfp4a16-kaitchup-abbrev.json");
    ck_assert_str_eq(moeq_config_version(cfg), "0.14.4.dev54+g704d57b");
    ck_assert_int_eq(cfg->version_minor, 14);
    ck_assert_int_eq(cfg->version_patch, 4);
    ck_assert_uint_eq(moeq_config_ignore_count(cfg), 3);
    ck_assert_str_eq(moeq_config_ignore(cfg, 1), "model.language_model.layers.0.linear_attn.out_proj");
    moeq_group_view g = group_of(cfg, 0);
    ck_assert_str_eq(summary(g.weights), "float4 group(32) sym static");
    ck_assert_int_eq(g.weights->scale_dtype, MOEQ_DTYPE_U8);
    ck_assert_ptr_null(g.input_activations);
    ck_assert_uint_eq(moeq_config_dequant_flags(cfg), MOEQ_DEQUANT_LEGACY_PACKING);
    moeq_config_destroy(cfg);
}
END_TEST

/* Every file in the data folder parses without warnings. */
START_TEST(test_real_all_parse) {
    static const char *const files[] = {
        "glm-5.3-int4-int8mix-rtn-g64-mixed-regex-no-linear.json",
        "llama-3.1-8b-instruct-fp8-dynamic-channel-token.json",
        "llama2c-stories110m-w4a16-g128-pack-quantized.json",
        "meta-llama-3-8b-mxfp4-w4a4-ct-readme.json",
        "phi-3-mini-128k-instruct-fp8-static-naive-frozen.json",
        "qwen3-w8a8-int8-mse-observer-v0.13.json",
        "qwen3.5-27b-mxfp4a16-kaitchup-abbrev.json",
    };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        moeq_config *cfg = load_ok(files[i]);
        ck_assert_msg(moeq_config_warning_count(cfg) == 0, "%s: %s", files[i],
                      moeq_config_warning(cfg, 0));
        ck_assert_uint_ge(moeq_config_group_count(cfg), 1);
        moeq_config_destroy(cfg);
    }
}
END_TEST

/* ---- QuantizationArgs (spec 1.5, CT test_quant_args.py) ------------------------ */

START_TEST(test_args_defaults) {
    moeq_config *cfg = weights_cfg("{}");
    const moeq_quant_args *a = group_of(cfg, 0).weights;
    ck_assert_int_eq(a->num_bits, 8);
    ck_assert_int_eq(a->type, MOEQ_QTYPE_INT);
    ck_assert_int_eq(a->symmetric, 1);
    ck_assert_int_eq(a->strategy, MOEQ_STRATEGY_TENSOR);
    ck_assert_int_eq(a->strategy_given, 0);
    ck_assert_int_eq(a->group_size, 0);
    ck_assert_int_eq(a->block_rows, 0);
    ck_assert_int_eq(a->dynamic, MOEQ_DYNAMIC_FALSE);
    ck_assert_int_eq(a->actorder, MOEQ_ACTORDER_NONE);
    ck_assert_int_eq(a->scale_dtype, MOEQ_DTYPE_INVALID);
    ck_assert_int_eq(a->zp_dtype, MOEQ_DTYPE_INVALID);
    ck_assert_str_eq(a->observer, "memoryless_minmax");
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_args_inference) {
    moeq_config *cfg = weights_cfg("{'group_size': 128}");
    const moeq_quant_args *a = group_of(cfg, 0).weights;
    ck_assert_int_eq(a->strategy, MOEQ_STRATEGY_GROUP);
    ck_assert_int_eq(a->group_size, 128);
    moeq_config_destroy(cfg);

    cfg = weights_cfg("{'group_size': -1}");
    a = group_of(cfg, 0).weights;
    ck_assert_int_eq(a->strategy, MOEQ_STRATEGY_CHANNEL);
    ck_assert_int_eq(a->group_size, -1);
    moeq_config_destroy(cfg);

    cfg = weights_cfg("{'group_size': null, 'strategy': null}");
    ck_assert_int_eq(group_of(cfg, 0).weights->strategy, MOEQ_STRATEGY_TENSOR);
    moeq_config_destroy(cfg);

    moeq_error err;
    ck_assert_int_eq(weights_status("{'strategy': 'group'}", &err), MOEQ_STATUS_SCHEMA);
    ck_assert_int_eq(weights_status("{'strategy': 'tensor', 'group_size': 128}", &err),
                     MOEQ_STATUS_SCHEMA);
}
END_TEST

START_TEST(test_args_case_and_legacy_forms) {
    /* "2x4" -> [2, 4] */
    moeq_config *cfg = weights_cfg("{'strategy': 'block', 'block_structure': '2x4'}");
    const moeq_quant_args *a = group_of(cfg, 0).weights;
    ck_assert_int_eq(a->block_rows, 2);
    ck_assert_int_eq(a->block_cols, 4);
    ck_assert_str_eq(summary(a), "int8 block(2x4) sym static");
    moeq_config_destroy(cfg);

    /* the string is read with Python's int() rules, as CT does */
    static const struct {
        const char *text;
        int rows, cols;
    } rxc[] = {{"' 2 x 4 '", 2, 4}, {"'+16x8'", 16, 8}, {"'\\t1_024x128\\n'", 1024, 128}};
    for (size_t i = 0; i < sizeof rxc / sizeof *rxc; i++) {
        char w[128];
        snprintf(w, sizeof w, "{'strategy': 'block', 'block_structure': %s}", rxc[i].text);
        cfg = weights_cfg(w);
        ck_assert_int_eq(group_of(cfg, 0).weights->block_rows, rxc[i].rows);
        ck_assert_int_eq(group_of(cfg, 0).weights->block_cols, rxc[i].cols);
        moeq_config_destroy(cfg);
    }
    moeq_error err;
    ck_assert_int_eq(weights_status("{'strategy': 'block', 'block_structure': '2X4'}", &err),
                     MOEQ_STATUS_SCHEMA);
    ck_assert_int_eq(weights_status("{'strategy': 'block', 'block_structure': '1__0x4'}", &err),
                     MOEQ_STATUS_SCHEMA);

    cfg = weights_cfg("{'strategy': 'BLOCK', 'block_structure': [128, 64], 'type': 'FLOAT'}");
    ck_assert_str_eq(summary(group_of(cfg, 0).weights), "float8 block(128x64) sym static");
    moeq_config_destroy(cfg);

    /* "InT" and "GROUP" equal their lower-case forms */
    cfg = weights_cfg("{'type': 'InT', 'strategy': 'GROUP', 'group_size': 64, 'num_bits': 4}");
    a = group_of(cfg, 0).weights;
    ck_assert_int_eq(a->type, MOEQ_QTYPE_INT);
    ck_assert_int_eq(a->strategy, MOEQ_STRATEGY_GROUP);
    ck_assert_int_eq(a->strategy_given, 1);
    moeq_config_destroy(cfg);

    /* actorder: true -> group, false -> null, aliases kept, case-insensitive */
    static const struct {
        const char *value;
        int32_t want;
    } ao[] = {{"true", MOEQ_ACTORDER_GROUP},       {"false", MOEQ_ACTORDER_NONE},
              {"null", MOEQ_ACTORDER_NONE},        {"'group'", MOEQ_ACTORDER_GROUP},
              {"'Weight'", MOEQ_ACTORDER_WEIGHT},  {"'DYNAMIC'", MOEQ_ACTORDER_DYNAMIC},
              {"'static'", MOEQ_ACTORDER_STATIC}};
    for (size_t i = 0; i < sizeof ao / sizeof *ao; i++) {
        char w[256];
        snprintf(w, sizeof w, "{'num_bits': 4, 'group_size': 128, 'actorder': %s}", ao[i].value);
        cfg = weights_cfg(w);
        ck_assert_int_eq(group_of(cfg, 0).weights->actorder, ao[i].want);
        /* every form of group (CT 0.20 removed them all) says that 0.20 cannot load it
         * and that moeq still reads it */
        char want[320];
        snprintf(want, sizeof want,
                 "actorder=%s is activation ordering by group (g_idx), which compressed-tensors "
                 "0.20 removed: it no longer writes it and cannot load this config. moeq keeps "
                 "reading such checkpoints",
                 ao[i].value);
        ck_assert_int_eq(has_warning(cfg, want), moeq_actorder_is_group(ao[i].want));
        ck_assert_int_eq(has_warning(cfg, "will be removed"), 0);
        moeq_config_destroy(cfg);
    }
    /* weight actorder goes with any strategy since 0.14 */
    cfg = weights_cfg("{'strategy': 'channel', 'actorder': 'weight'}");
    ck_assert_int_eq(group_of(cfg, 0).weights->actorder, MOEQ_ACTORDER_WEIGHT);
    moeq_config_destroy(cfg);

    cfg = weights_cfg("{'num_bits': 4, 'group_size': 128, 'symmetric': false, 'actorder': 'group'}");
    ck_assert_str_eq(summary(group_of(cfg, 0).weights), "int4 group(128) asym static actorder=group");
    moeq_config_destroy(cfg);

    /* dynamic "LOCAL" is case-insensitive */
    cfg = weights_cfg("{'type': 'float', 'num_bits': 4, 'strategy': 'tensor_group', "
                      "'group_size': 16, 'dynamic': 'LOCAL'}");
    a = group_of(cfg, 0).weights;
    ck_assert_int_eq(a->dynamic, MOEQ_DYNAMIC_LOCAL);
    ck_assert_str_eq(a->observer, "minmax"); /* local + null observer */
    ck_assert_str_eq(summary(a), "float4 tensor_group(16) sym local");
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_args_failures_from_ct_tests) {
    static const char *const bad[] = {
        "{'strategy': 'block', 'block_structure': '2x4x8'}",
        "{'strategy': 'block', 'block_structure': [2, 4, 8]}",
        "{'strategy': 'block', 'block_structure': '2xfoo'}",
        "{'strategy': 'block', 'block_structure': [0, 4]}",
        "{'strategy': 'block', 'block_structure': '4x-1'}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        moeq_error err;
        ck_assert_int_eq(weights_status(bad[i], &err), MOEQ_STATUS_SCHEMA);
        ck_assert_msg(strstr(err.message, "positive") != NULL, "%s", err.message);
        ck_assert_int_eq(err.code, MOEQ_STATUS_SCHEMA);
    }
    moeq_error err;
    ck_assert_int_eq(weights_status("{'group_size': -1, 'actorder': 'group'}", &err),
                     MOEQ_STATUS_SCHEMA);
    ck_assert(strstr(err.message, "Must use group or tensor_group quantization strategy") != NULL);
}
END_TEST

START_TEST(test_args_observer_and_zp) {
    /* dynamic true drops an observer, with CT's warning unless "memoryless" */
    moeq_config *cfg = weights_cfg("{'strategy': 'token', 'dynamic': true, 'observer': 'mse'}");
    ck_assert_ptr_null(group_of(cfg, 0).weights->observer);
    ck_assert(has_warning(cfg, "config_groups.g.weights.observer: No observer is used for "
                               "dynamic quant., setting to None"));
    moeq_config_destroy(cfg);
    cfg = weights_cfg("{'strategy': 'token', 'dynamic': true, 'observer': 'memoryless'}");
    ck_assert_ptr_null(group_of(cfg, 0).weights->observer);
    ck_assert_uint_eq(moeq_config_warning_count(cfg), 0);
    moeq_config_destroy(cfg);

    /* static default: memoryless_minmax, or minmax for writers before 0.14 */
    cfg = ok_sq("{'version': '0.13.0', 'config_groups': {'g': {'targets': ['Linear'], "
                "'weights': {}}}}");
    ck_assert_str_eq(group_of(cfg, 0).weights->observer, "minmax");
    moeq_config_destroy(cfg);
    cfg = ok_sq("{'version': '0.14.0', 'config_groups': {'g': {'targets': ['Linear'], "
                "'weights': {}}}}");
    ck_assert_str_eq(group_of(cfg, 0).weights->observer, "memoryless_minmax");
    moeq_config_destroy(cfg);

    /* zp_dtype derived for asymmetric args, "none" when symmetric */
    static const struct {
        const char *args;
        int32_t zp;
    } zp[] = {
        {"{'num_bits': 4, 'symmetric': false}", MOEQ_DTYPE_I8},
        {"{'num_bits': 8, 'symmetric': false}", MOEQ_DTYPE_I8},
        {"{'num_bits': 12, 'symmetric': false}", MOEQ_DTYPE_I16},
        {"{'num_bits': 16, 'symmetric': false}", MOEQ_DTYPE_I16},
        {"{'num_bits': 32, 'symmetric': false}", MOEQ_DTYPE_I32},
        {"{'num_bits': 8, 'type': 'float', 'symmetric': false}", MOEQ_DTYPE_F8_E4M3},
        {"{'num_bits': 4, 'type': 'float', 'symmetric': false}", MOEQ_DTYPE_F8_E4M3},
        {"{'num_bits': 4, 'symmetric': false, 'zp_dtype': 'torch.int32'}", MOEQ_DTYPE_I32},
        {"{'num_bits': 4, 'symmetric': false, 'zp_dtype': 'uint8'}", MOEQ_DTYPE_U8},
        {"{'num_bits': 4, 'symmetric': true, 'zp_dtype': 'torch.int8'}", MOEQ_DTYPE_INVALID},
        {"{'num_bits': 4, 'type': 'float'}", MOEQ_DTYPE_INVALID},
    };
    for (size_t i = 0; i < sizeof zp / sizeof *zp; i++) {
        cfg = weights_cfg(zp[i].args);
        ck_assert_msg(group_of(cfg, 0).weights->zp_dtype == zp[i].zp, "%s", zp[i].args);
        moeq_config_destroy(cfg);
    }

    /* dtype strings with and without "torch.", and torch's aliases */
    static const struct {
        const char *name;
        int32_t dtype;
    } dt[] = {{"torch.float8_e4m3fn", MOEQ_DTYPE_F8_E4M3}, {"float8_e5m2", MOEQ_DTYPE_F8_E5M2},
              {"torch.uint8", MOEQ_DTYPE_U8},             {"int8", MOEQ_DTYPE_I8},
              {"torch.int16", MOEQ_DTYPE_I16},            {"int32", MOEQ_DTYPE_I32},
              {"torch.int64", MOEQ_DTYPE_I64},            {"half", MOEQ_DTYPE_F16},
              {"torch.float16", MOEQ_DTYPE_F16},          {"bfloat16", MOEQ_DTYPE_BF16},
              {"torch.float", MOEQ_DTYPE_F32},            {"float32", MOEQ_DTYPE_F32},
              {"torch.float64", MOEQ_DTYPE_F64}};
    for (size_t i = 0; i < sizeof dt / sizeof *dt; i++) {
        char w[256];
        snprintf(w, sizeof w, "{'scale_dtype': '%s'}", dt[i].name);
        cfg = weights_cfg(w);
        ck_assert_msg(group_of(cfg, 0).weights->scale_dtype == dt[i].dtype, "%s", dt[i].name);
        moeq_config_destroy(cfg);
    }
}
END_TEST

START_TEST(test_kv_cache_scheme) {
    moeq_config *cfg = ok_sq("{'config_groups': {'g': {'targets': ['Linear']}}, 'kv_cache_scheme': "
                             "{'num_bits': 8, 'type': 'float', 'strategy': 'tensor', 'dynamic': "
                             "false, 'symmetric': true}}");
    const moeq_quant_args *kv = moeq_config_kv_cache_scheme(cfg);
    ck_assert_ptr_nonnull(kv);
    ck_assert_str_eq(summary(kv), "float8 tensor sym static");
    ck_assert_str_eq(moeq_config_raw(cfg, "kv_cache_scheme"),
                     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\",\"dynamic\":false,"
                     "\"symmetric\":true}");
    ck_assert_ptr_null(moeq_config_raw(cfg, "sparsity_config"));
    ck_assert_ptr_null(moeq_config_raw(cfg, "nonsense"));
    /* a group with no args at all is legal (UNQUANTIZED) */
    moeq_group_view g = group_of(cfg, 0);
    ck_assert_ptr_null(g.weights);
    ck_assert_int_eq(moeq__group_format(cfg, &cfg->groups[0]), MOEQ_FORMAT_DENSE);
    moeq_config_destroy(cfg);

    cfg = ok_sq("{'config_groups': {'g': {'targets': ['Linear']}}, 'kv_cache_scheme': "
                "{'num_bits': 8, 'type': 'float', 'strategy': 'attn_head'}}");
    ck_assert_int_eq(moeq_config_kv_cache_scheme(cfg)->strategy, MOEQ_STRATEGY_ATTN_HEAD);
    moeq_config_destroy(cfg);
}
END_TEST

/* ---- presets (spec section 2, CT 0.18) ------------------------------------------- */

typedef struct preset_case {
    const char *name;
    /* weights: bits, type, strategy, group_size, symmetric; block (square) */
    int w_bits, w_type, w_strategy, w_gs, w_sym, w_block, w_scale;
    /* inputs (a_bits 0: none): bits, type, strategy, group_size, dynamic, observer */
    int a_bits, a_type, a_strategy, a_gs, a_dynamic;
    const char *a_observer;
} preset_case;

#define I_ MOEQ_QTYPE_INT
#define F_ MOEQ_QTYPE_FLOAT
#define S_(x) MOEQ_STRATEGY_##x
#define NOD MOEQ_DTYPE_INVALID
#define WxA16(b) {"W" #b "A16", b, I_, S_(GROUP), 128, 1, 0, NOD, 0, 0, 0, 0, 0, NULL}
#define WxAy(b, a) {"W" #b "A" #a, b, I_, S_(GROUP), 128, 1, 0, NOD, a, I_, S_(TOKEN), 0, 1, NULL}

static const preset_case k_preset_cases[] = {
    {"UNQUANTIZED", 0, 0, 0, 0, 0, 0, NOD, 0, 0, 0, 0, 0, NULL},
    {"W4A16_ASYM", 4, I_, S_(GROUP), 128, 0, 0, NOD, 0, 0, 0, 0, 0, NULL},
    {"W8A8", 8, I_, S_(CHANNEL), 0, 1, 0, NOD, 8, I_, S_(TOKEN), 0, 1, NULL},
    {"INT8", 8, I_, S_(CHANNEL), 0, 1, 0, NOD, 8, I_, S_(TOKEN), 0, 1, NULL},
    {"W4AFP8", 4, I_, S_(GROUP), 128, 1, 0, NOD, 8, F_, S_(TOKEN), 0, 1, NULL},
    {"FP8", 8, F_, S_(TENSOR), 0, 1, 0, NOD, 8, F_, S_(TENSOR), 0, 0, "static_minmax"},
    {"FP8_DYNAMIC", 8, F_, S_(CHANNEL), 0, 1, 0, NOD, 8, F_, S_(TOKEN), 0, 1, NULL},
    {"FP8_BLOCK", 8, F_, S_(BLOCK), 0, 1, 128, NOD, 8, F_, S_(GROUP), 128, 1, NULL},
    {"NVFP4A16", 4, F_, S_(TENSOR_GROUP), 16, 1, 0, MOEQ_DTYPE_F8_E4M3, 0, 0, 0, 0, 0, NULL},
    {"NVFP4", 4, F_, S_(TENSOR_GROUP), 16, 1, 0, MOEQ_DTYPE_F8_E4M3, 4, F_, S_(TENSOR_GROUP), 16,
     MOEQ_DYNAMIC_LOCAL, "static_minmax"},
    {"MXFP4A16", 4, F_, S_(GROUP), 32, 1, 0, MOEQ_DTYPE_U8, 0, 0, 0, 0, 0, NULL},
    {"MXFP4", 4, F_, S_(GROUP), 32, 1, 0, MOEQ_DTYPE_U8, 4, F_, S_(GROUP), 32, 1, NULL},
    {"MXFP8A16", 8, F_, S_(GROUP), 32, 1, 0, MOEQ_DTYPE_U8, 0, 0, 0, 0, 0, NULL},
    {"MXFP8", 8, F_, S_(GROUP), 32, 1, 0, MOEQ_DTYPE_U8, 8, F_, S_(GROUP), 32, 1, NULL},
    WxAy(2, 4), WxAy(2, 8), WxA16(2), WxAy(3, 4), WxAy(3, 8), WxA16(3), WxAy(4, 4), WxAy(4, 8),
    WxA16(4), WxAy(5, 8), WxA16(5), WxAy(6, 8), WxA16(6), WxAy(7, 8), WxA16(7), WxA16(8),
};

START_TEST(test_presets_all) {
    ck_assert_uint_eq(sizeof k_preset_cases / sizeof *k_preset_cases, 30);
    for (size_t i = 0; i < sizeof k_preset_cases / sizeof *k_preset_cases; i++) {
        const preset_case *pc = &k_preset_cases[i];
        char json[256];
        snprintf(json, sizeof json, "{'config_groups': {'%s': ['Linear', 're:.*experts.*']}}",
                 pc->name);
        moeq_config *cfg = ok_sq(json);
        moeq_group_view g = group_of(cfg, 0);
        ck_assert_str_eq(g.name, pc->name);
        ck_assert_int_eq(g.preset, 1);
        ck_assert_int_eq(g.format, MOEQ_FORMAT_NONE);
        ck_assert_uint_eq(g.n_targets, 2);
        ck_assert_str_eq(g.targets[1], "re:.*experts.*");
        ck_assert_ptr_null(g.output_activations);
        if (pc->w_bits == 0) {
            ck_assert_ptr_null(g.weights);
        } else {
            const moeq_quant_args *w = g.weights;
            ck_assert_ptr_nonnull(w);
            ck_assert_msg(w->num_bits == pc->w_bits && w->type == pc->w_type &&
                              w->strategy == pc->w_strategy && w->group_size == pc->w_gs &&
                              w->symmetric == pc->w_sym && w->block_rows == pc->w_block &&
                              w->block_cols == pc->w_block && w->scale_dtype == pc->w_scale,
                          "%s weights: %s", pc->name, summary(w));
            ck_assert_int_eq(w->dynamic, MOEQ_DYNAMIC_FALSE);
            ck_assert_str_eq(w->observer, "memoryless_minmax");
            ck_assert_int_eq(w->zp_dtype, pc->w_sym ? MOEQ_DTYPE_INVALID : MOEQ_DTYPE_I8);
        }
        if (pc->a_bits == 0) {
            ck_assert_ptr_null(g.input_activations);
        } else {
            const moeq_quant_args *a = g.input_activations;
            ck_assert_ptr_nonnull(a);
            ck_assert_msg(a->num_bits == pc->a_bits && a->type == pc->a_type &&
                              a->strategy == pc->a_strategy && a->group_size == pc->a_gs &&
                              a->dynamic == pc->a_dynamic && a->symmetric == 1,
                          "%s inputs: %s", pc->name, summary(a));
            if (pc->a_observer) {
                ck_assert_str_eq(a->observer, pc->a_observer);
            } else {
                ck_assert_ptr_null(a->observer);
            }
        }
        ck_assert_uint_eq(moeq_config_warning_count(cfg), 0);
        moeq_config_destroy(cfg);
    }
}
END_TEST

START_TEST(test_presets_spot_checks) {
    /* case-insensitive lookup; the name is kept as written */
    moeq_config *cfg = ok_sq("{'config_groups': {'w4a16': ['Linear'], 'Fp8_Dynamic': ['lm_head']}}");
    moeq_group_view g0 = group_of(cfg, 0), g1 = group_of(cfg, 1);
    ck_assert_str_eq(g0.name, "w4a16");
    ck_assert_str_eq(summary(g0.weights), "int4 group(128) sym static");
    ck_assert_str_eq(summary(g1.weights), "float8 channel sym static");
    ck_assert_str_eq(summary(g1.input_activations), "float8 token sym dynamic");
    ck_assert_int_eq(moeq__group_format(cfg, &cfg->groups[0]), MOEQ_FORMAT_PACK_QUANTIZED);
    ck_assert_int_eq(moeq__group_format(cfg, &cfg->groups[1]), MOEQ_FORMAT_FLOAT_QUANTIZED);
    moeq_config_destroy(cfg);

    cfg = ok_sq("{'config_groups': {'W4A16_ASYM': ['Linear']}}");
    ck_assert_str_eq(summary(group_of(cfg, 0).weights), "int4 group(128) asym static");
    ck_assert_int_eq(group_of(cfg, 0).weights->zp_dtype, MOEQ_DTYPE_I8);
    moeq_config_destroy(cfg);

    /* CT's test_infer_quant: preset -> inferred format */
    static const struct {
        const char *name;
        int32_t format;
    } inf[] = {{"W8A8", MOEQ_FORMAT_INT_QUANTIZED},        {"W8A16", MOEQ_FORMAT_PACK_QUANTIZED},
               {"W4A16", MOEQ_FORMAT_PACK_QUANTIZED},      {"FP8", MOEQ_FORMAT_FLOAT_QUANTIZED},
               {"NVFP4", MOEQ_FORMAT_NVFP4_PACK_QUANTIZED}, {"MXFP4A16", MOEQ_FORMAT_MXFP4_PACK_QUANTIZED},
               {"MXFP8", MOEQ_FORMAT_MXFP8_QUANTIZED},     {"W4AFP8", MOEQ_FORMAT_INT_QUANTIZED},
               {"FP8_BLOCK", MOEQ_FORMAT_FLOAT_QUANTIZED}, {"UNQUANTIZED", MOEQ_FORMAT_DENSE},
               /* 0.20 */
               {"MXFP6A16", MOEQ_FORMAT_MXFP6_PACK_QUANTIZED}, {"MXFP6A8", MOEQ_FORMAT_MXFP6_PACK_QUANTIZED},
               {"MXFP4XFP8", MOEQ_FORMAT_MXFP4_PACK_QUANTIZED}, {"MXFP8A16", MOEQ_FORMAT_MXFP8_QUANTIZED}};
    for (size_t i = 0; i < sizeof inf / sizeof *inf; i++) {
        char json[128];
        snprintf(json, sizeof json, "{'config_groups': {'%s': ['Linear']}}", inf[i].name);
        cfg = ok_sq(json);
        ck_assert_msg(moeq__group_format(cfg, &cfg->groups[0]) == inf[i].format, "%s -> %s",
                      inf[i].name, moeq_format_name(moeq__group_format(cfg, &cfg->groups[0])));
        moeq_config_destroy(cfg);
    }
}
END_TEST

/* ---- malformed configs ---------------------------------------------------------- */

typedef struct bad_case {
    const char *json; /* single-quoted */
    moeq_status status;
    const char *substring;
} bad_case;

/* A bare config whose group "g" has these weights / input_activations. */
#define W(args) "{'config_groups': {'g': {'targets': ['Linear'], 'weights': " args "}}}"
#define IN(args)                                                                              \
    "{'config_groups': {'g': {'targets': ['Linear'], 'weights': {'num_bits': 4, "            \
    "'group_size': 128}, 'input_activations': " args "}}}"
#define TOP(extra) "{'config_groups': {'g': {'targets': ['Linear']}}, " extra "}"
#define WP "config_groups.g.weights."

static const bad_case k_bad[] = {
    /* JSON syntax */
    {"", MOEQ_STATUS_JSON, "JSON syntax error at byte 0 (line 1, column 1): empty input"},
    {"{'config_groups': ", MOEQ_STATUS_JSON,
     "JSON syntax error at byte 18 (line 1, column 19): unexpected end of input"},
    {"{'a': 1", MOEQ_STATUS_JSON, "unexpected end of input"},
    {"{} x", MOEQ_STATUS_JSON, "at byte 3 (line 1, column 4): unexpected text after the JSON value"},
    {"{'a': [1,]}", MOEQ_STATUS_JSON, "JSON syntax error at byte 9 (line 1, column 10)"},
    {"{\n  'a': 1,\n  'b': ?\n}", MOEQ_STATUS_JSON, "(line 3, column 8)"},
    {"{'a': 1]", MOEQ_STATUS_JSON, "at byte 7 (line 1, column 8): invalid JSON"},
    {"[1, 2]", MOEQ_STATUS_SCHEMA, "at the top level, found an array"},
    {"'just a string'", MOEQ_STATUS_SCHEMA, "found a string \"just a string\""},
    /* locating the block, quant_method */
    {"{'model_type': 'llama'}", MOEQ_STATUS_SCHEMA, "no quantization config found"},
    {"{'quantization_config': [1]}", MOEQ_STATUS_SCHEMA,
     "quantization_config: expected a quantization config object, found an array"},
    {"{'quantization_config': null}", MOEQ_STATUS_SCHEMA, "quantization_config: expected"},
    {"{'quantization_config': {'quant_method': 'gptq', 'bits': 4}}", MOEQ_STATUS_UNSUPPORTED,
     "quantization_config.quant_method: quantization method 'gptq' is not supported"},
    {"{'quantization_config': {'quant_method': 'fp8'}}", MOEQ_STATUS_UNSUPPORTED,
     "(quant_method \"compressed-tensors\", or the legacy \"sparseml\")"},
    {"{'quant_method': 5, 'config_groups': {}}", MOEQ_STATUS_SCHEMA,
     "quant_method: expected a string, found the number 5"},
    /* config_groups */
    {"{'quant_method': 'compressed-tensors'}", MOEQ_STATUS_SCHEMA,
     "config_groups: required key is missing"},
    {"{'quantization_config': {'quant_method': 'compressed-tensors'}}", MOEQ_STATUS_SCHEMA,
     "quantization_config.config_groups: required key is missing"},
    {"{'config_groups': {}}", MOEQ_STATUS_SCHEMA, "config_groups: is empty"},
    {"{'config_groups': [{'targets': ['Linear']}]}", MOEQ_STATUS_SCHEMA,
     "config_groups: expected an object mapping group names to schemes, found an array"},
    {"{'config_groups': {'g': 'Linear'}}", MOEQ_STATUS_SCHEMA,
     "config_groups.g: expected a scheme object or a list of target strings"},
    {"{'config_groups': {'g': {'targets': 'Linear'}}}", MOEQ_STATUS_SCHEMA,
     "config_groups.g.targets: expected a list of strings, found a string \"Linear\""},
    {"{'config_groups': {'g': {'weights': {}}}}", MOEQ_STATUS_SCHEMA,
     "config_groups.g.targets: required key is missing"},
    {"{'config_groups': {'g': {'targets': []}}}", MOEQ_STATUS_SCHEMA,
     "config_groups.g.targets: is empty"},
    {"{'config_groups': {'g': {'targets': ['Linear', 3]}}}", MOEQ_STATUS_SCHEMA,
     "config_groups.g.targets[1]: expected a string, found the number 3"},
    {"{'config_groups': {'g': {'targets': ['Linear'], 'weights': [4]}}}", MOEQ_STATUS_SCHEMA,
     "config_groups.g.weights: expected a QuantizationArgs object or null, found an array"},
    {"{'config_groups': {'g': {'targets': ['Linear'], 'weights': 'W4A16'}}}", MOEQ_STATUS_SCHEMA,
     "config_groups.g.weights: expected a QuantizationArgs object or null, found a string"},
    /* QuantizationArgs: wrong JSON types */
    {W("{'num_bits': '4'}"), MOEQ_STATUS_SCHEMA, WP "num_bits: expected an integer, found a string \"4\""},
    {W("{'num_bits': 4.5}"), MOEQ_STATUS_SCHEMA, WP "num_bits: expected an integer, found the number 4.5"},
    {W("{'num_bits': 0.1}"), MOEQ_STATUS_SCHEMA, WP "num_bits: expected an integer, found the number 0.1"},
    {W("{'num_bits': true}"), MOEQ_STATUS_SCHEMA, WP "num_bits: expected an integer, found true"},
    {W("{'num_bits': null}"), MOEQ_STATUS_SCHEMA, WP "num_bits: expected an integer, found null"},
    {W("{'num_bits': 4294967300}"), MOEQ_STATUS_SCHEMA, WP "num_bits: expected an integer within the int32 range"},
    {W("{'type': 4}"), MOEQ_STATUS_SCHEMA, WP "type: expected a string, found the number 4"},
    {W("{'type': 'uint'}"), MOEQ_STATUS_SCHEMA, WP "type: 'uint' is not a valid QuantizationType"},
    {W("{'symmetric': 'yes'}"), MOEQ_STATUS_SCHEMA, WP "symmetric: expected true or false, found a string \"yes\""},
    {W("{'symmetric': 1}"), MOEQ_STATUS_SCHEMA, WP "symmetric: expected true or false, found the number 1"},
    {W("{'group_size': true}"), MOEQ_STATUS_SCHEMA, WP "group_size: expected an integer, found true"},
    {W("{'group_size': '128'}"), MOEQ_STATUS_SCHEMA, WP "group_size: expected an integer, found a string"},
    {W("{'strategy': 'row'}"), MOEQ_STATUS_SCHEMA, WP "strategy: 'row' is not a valid QuantizationStrategy"},
    {W("{'strategy': ['group']}"), MOEQ_STATUS_SCHEMA, WP "strategy: expected a string, found an array"},
    {W("{'dynamic': 'true'}"), MOEQ_STATUS_SCHEMA, WP "dynamic: 'true' is not a valid DynamicType"},
    {W("{'dynamic': 1}"), MOEQ_STATUS_SCHEMA, WP "dynamic: expected true, false or \"local\", found the number 1"},
    {W("{'actorder': 'sometimes'}"), MOEQ_STATUS_SCHEMA, WP "actorder: 'sometimes' is not a valid ActivationOrdering"},
    {W("{'actorder': 1}"), MOEQ_STATUS_SCHEMA, WP "actorder: expected a string, true, false or null"},
    {W("{'observer': 5}"), MOEQ_STATUS_SCHEMA, WP "observer: expected a string, found the number 5"},
    {W("{'observer_kwargs': []}"), MOEQ_STATUS_SCHEMA, WP "observer_kwargs: expected an object, found an array"},
    /* block_structure variants */
    {W("{'strategy': 'block', 'block_structure': '2x4x8'}"), MOEQ_STATUS_SCHEMA,
     WP "block_structure: Invalid block_structure '2x4x8'. Must be a list of positive ints [rows, cols]."},
    {W("{'strategy': 'block', 'block_structure': [2, 4, 8]}"), MOEQ_STATUS_SCHEMA,
     WP "block_structure: Invalid block_structure '[2, 4, 8]'."},
    {W("{'strategy': 'block', 'block_structure': '2xfoo'}"), MOEQ_STATUS_SCHEMA, "Invalid block_structure '2xfoo'"},
    {W("{'strategy': 'block', 'block_structure': [0, 4]}"), MOEQ_STATUS_SCHEMA, "Invalid block_structure '[0, 4]'"},
    {W("{'strategy': 'block', 'block_structure': '4x-1'}"), MOEQ_STATUS_SCHEMA, "Invalid block_structure '4x-1'"},
    {W("{'strategy': 'block', 'block_structure': [2.5, 4]}"), MOEQ_STATUS_SCHEMA, "Invalid block_structure '[2.5, 4]'"},
    {W("{'strategy': 'block', 'block_structure': ['2', 4]}"), MOEQ_STATUS_SCHEMA, "Invalid block_structure '['2', 4]'"},
    {W("{'strategy': 'block', 'block_structure': 128}"), MOEQ_STATUS_SCHEMA, "Invalid block_structure '128'"},
    {W("{'strategy': 'block', 'block_structure': {'rows': 2}}"), MOEQ_STATUS_SCHEMA, "Invalid block_structure '{...}'"},
    /* dtypes */
    {W("{'scale_dtype': 'torch.float7'}"), MOEQ_STATUS_SCHEMA, WP "scale_dtype: No such torch dtype `torch.float7`"},
    {W("{'zp_dtype': 'bf16'}"), MOEQ_STATUS_SCHEMA, WP "zp_dtype: No such torch dtype `torch.bf16`"},
    {W("{'scale_dtype': 'Float16'}"), MOEQ_STATUS_SCHEMA, "No such torch dtype `torch.Float16`"},
    {W("{'scale_dtype': 8}"), MOEQ_STATUS_SCHEMA, WP "scale_dtype: expected a string, found the number 8"},
    {W("{'scale_dtype': 'torch.float8_e8m0fnu'}"), MOEQ_STATUS_UNSUPPORTED,
     WP "scale_dtype: torch.float8_e8m0fnu is a torch dtype moeq has no element type for"},
    /* ranges */
    {W("{'group_size': 0}"), MOEQ_STATUS_SCHEMA,
     WP "group_size: Invalid group size 0. Use group_size > 0 for strategy='group' and group_size = -1 for 'channel'"},
    {W("{'group_size': -2}"), MOEQ_STATUS_SCHEMA, WP "group_size: Invalid group size -2. Use group_size > 0"},
    {W("{'num_bits': 0}"), MOEQ_STATUS_SCHEMA, WP "num_bits: num_bits must be a positive integer, got 0"},
    {W("{'num_bits': -4}"), MOEQ_STATUS_SCHEMA, WP "num_bits: num_bits must be a positive integer, got -4"},
    {W("{'type': 'float', 'num_bits': 5}"), MOEQ_STATUS_SCHEMA, WP "num_bits: Only num_bits in (8) are supported"},
    {W("{'type': 'float', 'num_bits': 16}"), MOEQ_STATUS_SCHEMA, "Only num_bits in (8) are supported (type float, num_bits 16"},
    /* invalid combinations (derivation steps 2-7) */
    {W("{'strategy': 'token'}"), MOEQ_STATUS_SCHEMA,
     WP "strategy: Cannot perform static token quantization, please use `dynamic=True`"},
    {W("{'strategy': 'group'}"), MOEQ_STATUS_SCHEMA,
     WP "group_size: strategy group requires group_size to be set to a positive value (group_size is null)"},
    {W("{'strategy': 'tensor_group', 'group_size': -1}"), MOEQ_STATUS_SCHEMA,
     WP "group_size: strategy tensor_group requires group_size to be set to a positive value (group_size is -1)"},
    {W("{'strategy': 'tensor', 'group_size': 128}"), MOEQ_STATUS_SCHEMA,
     WP "group_size: group_size requires strategy to be set to 'group' (strategy is 'tensor'"},
    {W("{'strategy': 'channel', 'group_size': 64}"), MOEQ_STATUS_SCHEMA,
     "group_size requires strategy to be set to 'group' (strategy is 'channel', group_size 64)"},
    {W("{'strategy': 'block'}"), MOEQ_STATUS_SCHEMA, WP "block_structure: Block strategy requires block structure"},
    {W("{'block_structure': [128, 128]}"), MOEQ_STATUS_SCHEMA,
     WP "block_structure: Block structure requires block strategy (strategy is 'tensor')"},
    {W("{'strategy': 'channel', 'actorder': 'group'}"), MOEQ_STATUS_SCHEMA,
     WP "actorder: Must use group or tensor_group quantization strategy in order to apply group activation ordering"},
    {W("{'actorder': true}"), MOEQ_STATUS_SCHEMA, "in order to apply group activation ordering (strategy is 'tensor')"},
    {W("{'strategy': 'block', 'block_structure': [128, 128], 'dynamic': true}"), MOEQ_STATUS_SCHEMA,
     WP "dynamic: One of (token, tensor, tensor_group, group) must be used for dynamic quant. (strategy is 'block')"},
    {W("{'strategy': 'channel', 'dynamic': true}"), MOEQ_STATUS_SCHEMA,
     "must be used for dynamic quant. (strategy is 'channel')"},
    {W("{'dynamic': 'local', 'group_size': 16}"), MOEQ_STATUS_SCHEMA,
     WP "dynamic: local is only supported for strategy tensor_group (strategy is 'group')"},
    /* scheme rules */
    {IN("{'strategy': 'group', 'group_size': 128, 'dynamic': true, 'actorder': 'weight'}"),
     MOEQ_STATUS_SCHEMA, "config_groups.g.input_activations.actorder: Cannot apply actorder to input activations"},
    {"{'config_groups': {'g': {'targets': ['Linear'], 'output_activations': {'actorder': 'static'}}}}",
     MOEQ_STATUS_SCHEMA, "config_groups.g.output_activations.actorder: Cannot apply actorder to output activations"},
    {IN("{'num_bits': 8, 'strategy': 'channel'}"), MOEQ_STATUS_SCHEMA,
     "config_groups.g.input_activations.strategy: Using channel strategy is not supported for activation quantization"},
    {IN("{'strategy': 'block', 'block_structure': [128, 128]}"), MOEQ_STATUS_SCHEMA,
     "Using block strategy is not supported for activation quantization"},
    {IN("{'strategy': 'token'}"), MOEQ_STATUS_SCHEMA,
     "config_groups.g.input_activations.strategy: Cannot perform static token quantization"},
    {"{'config_groups': {'g': {'targets': ['Linear'], 'format': 'mixed-precision'}}}", MOEQ_STATUS_SCHEMA,
     "config_groups.g.format: mixed-precision cannot be set as a format for a QuantizationScheme"},
    {"{'config_groups': {'g': {'targets': ['Linear'], 'format': 'packed'}}}", MOEQ_STATUS_SCHEMA,
     "config_groups.g.format: 'packed' is not a valid CompressionFormat (expected one of: dense,"},
    {"{'config_groups': {'g': {'targets': ['Linear'], 'format': 'fakequant'}}}", MOEQ_STATUS_SCHEMA,
     "config_groups.g.format: 'fakequant' is not a valid CompressionFormat"},
    {"{'config_groups': {'g': {'targets': ['Linear'], 'format': 'Pack-Quantized'}}}", MOEQ_STATUS_SCHEMA,
     "'Pack-Quantized' is not a valid CompressionFormat"},
    {"{'config_groups': {'g': {'targets': ['Linear'], 'format': 3}}}", MOEQ_STATUS_SCHEMA,
     "config_groups.g.format: expected a string, found the number 3"},
    /* presets */
    {"{'config_groups': {'W4A17': ['Linear']}}", MOEQ_STATUS_SCHEMA,
     "config_groups.W4A17: unknown preset scheme name W4A17, available names: ['UNQUANTIZED', 'W4A16_ASYM',"},
    {"{'config_groups': {'w9a16': ['Linear']}}", MOEQ_STATUS_SCHEMA,
     "config_groups.w9a16: unknown preset scheme name W9A16"},
    {"{'config_groups': {'group_0': ['Linear']}}", MOEQ_STATUS_SCHEMA,
     "unknown preset scheme name GROUP_0"},
    {"{'config_groups': {'W4A16': ['Linear', 1]}}", MOEQ_STATUS_SCHEMA,
     "config_groups.W4A16.targets[1]: expected a string, found the number 1"},
    {"{'config_groups': {'W4A16': []}}", MOEQ_STATUS_SCHEMA, "config_groups.W4A16.targets: is empty"},
    /* other top-level keys */
    {TOP("'ignore': 'lm_head'"), MOEQ_STATUS_SCHEMA, "ignore: expected a list of strings, found a string \"lm_head\""},
    {TOP("'ignore': [1]"), MOEQ_STATUS_SCHEMA, "ignore[0]: expected a string, found the number 1"},
    {TOP("'ignore': ['lm_head', null]"), MOEQ_STATUS_SCHEMA, "ignore[1]: expected a string, found null"},
    {TOP("'format': 5"), MOEQ_STATUS_SCHEMA, "format: expected a string, found the number 5"},
    {TOP("'version': 18"), MOEQ_STATUS_SCHEMA, "version: expected a string, found the number 18"},
    {TOP("'quantization_status': true"), MOEQ_STATUS_SCHEMA, "quantization_status: expected a string, found true"},
    {TOP("'global_compression_ratio': '1.5'"), MOEQ_STATUS_SCHEMA,
     "global_compression_ratio: expected a number or null, found a string"},
    {TOP("'kv_cache_scheme': 'fp8'"), MOEQ_STATUS_SCHEMA,
     "kv_cache_scheme: expected a QuantizationArgs object or null, found a string"},
    {TOP("'kv_cache_scheme': {'strategy': 'token'}"), MOEQ_STATUS_SCHEMA,
     "kv_cache_scheme.strategy: Cannot perform static token quantization"},
    {TOP("'sparsity_config': []"), MOEQ_STATUS_SCHEMA, "sparsity_config: expected an object or null, found an array"},
    {TOP("'transform_config': 3"), MOEQ_STATUS_SCHEMA, "transform_config: expected an object or null"},
    {TOP("'transform_config': {'config_groups': {'u': {'type': 'hadamard', 'apply': [{'targets': "
         "['Linear'], 'location': 'weight_input'}, {'targets': ['Linear'], 'location': 'input'}]}}}"),
     MOEQ_STATUS_UNSUPPORTED,
     "transform_config.config_groups.u.apply[1].location: online transform location 'input' is not supported"},
    {TOP("'transform_config': {'config_groups': {'r': {'type': 'random-hadamard', 'apply': "
         "[{'targets': ['re:.*k_proj$'], 'location': 'k_cache'}]}}}"),
     MOEQ_STATUS_UNSUPPORTED, "online transform location 'k_cache'"},
    {TOP("'transform_config': {'config_groups': {'r': {'apply': [{'location': 'q_attn'}]}}}"),
     MOEQ_STATUS_UNSUPPORTED, "online transform location 'q_attn'"},
    {TOP("'transform_config': {'config_groups': {'r': {'apply': [{'location': 'sideways'}]}}}"),
     MOEQ_STATUS_SCHEMA, "transform_config.config_groups.r.apply[0].location: 'sideways' is not a valid TransformLocation"},
    {TOP("'transform_config': {'config_groups': {'r': {'apply': {'location': 'input'}}}}"),
     MOEQ_STATUS_SCHEMA, "transform_config.config_groups.r.apply: expected a list, found an object"},
    /* paths start at the key the block was found under */
    {"{'text_config': {'quantization_config': {'config_groups': {'g': {'targets': ['x'], "
     "'weights': {'num_bits': 'x'}}}}}}",
     MOEQ_STATUS_SCHEMA,
     "text_config.quantization_config.config_groups.g.weights.num_bits: expected an integer"},
    {"{'compression_config': {'config_groups': {'g': {'targets': ['x'], 'weights': {'group_size': 0}}}}}",
     MOEQ_STATUS_SCHEMA, "compression_config.config_groups.g.weights.group_size: Invalid group size 0"},
};

START_TEST(test_malformed_table) {
    ck_assert_uint_ge(sizeof k_bad / sizeof *k_bad, 45);
    for (size_t i = 0; i < sizeof k_bad / sizeof *k_bad; i++) {
        const bad_case *bc = &k_bad[i];
        moeq_config *cfg = (moeq_config *)&cfg; /* must be reset to NULL */
        moeq_error err;
        moeq_status st = parse_sq(bc->json, NULL, &cfg, &err);
        ck_assert_msg(st == bc->status, "case %zu: status %s, want %s (%s)\n  in: %s", i,
                      moeq_status_name(st), moeq_status_name(bc->status), err.message, bc->json);
        ck_assert_int_eq(err.code, bc->status);
        ck_assert_msg(cfg == NULL, "case %zu: *out not NULL after a failure", i);
        ck_assert_msg(strstr(err.message, bc->substring) != NULL,
                      "case %zu: message\n  %s\nlacks\n  %s", i, err.message, bc->substring);
    }
}
END_TEST

START_TEST(test_bad_arguments) {
    moeq_config *cfg = NULL;
    moeq_error err;
    ck_assert_int_eq(moeq_config_parse("{}", 2, NULL, NULL, &err), MOEQ_STATUS_INVALID_ARG);
    ck_assert_int_eq(moeq_config_parse(NULL, 5, NULL, &cfg, &err), MOEQ_STATUS_INVALID_ARG);
    ck_assert_ptr_null(cfg);
    ck_assert_int_eq(moeq_config_parse(NULL, 0, NULL, &cfg, NULL), MOEQ_STATUS_JSON);
    ck_assert_int_eq(moeq_config_load(NULL, NULL, &cfg, &err), MOEQ_STATUS_INVALID_ARG);
    ck_assert_int_eq(moeq_config_load("x", NULL, NULL, &err), MOEQ_STATUS_INVALID_ARG);
    /* accessors accept NULL */
    moeq_config_destroy(NULL);
    ck_assert_ptr_null(moeq_config_source_key(NULL));
    ck_assert_ptr_null(moeq_config_version(NULL));
    ck_assert_ptr_null(moeq_config_raw(NULL, "kv_cache_scheme"));
    ck_assert_ptr_null(moeq_config_kv_cache_scheme(NULL));
    ck_assert_uint_eq(moeq_config_group_count(NULL), 0);
    ck_assert_uint_eq(moeq_config_ignore_count(NULL), 0);
    ck_assert_uint_eq(moeq_config_warning_count(NULL), 0);
    ck_assert_uint_eq(moeq_config_dequant_flags(NULL), 0);
    moeq_group_view g;
    ck_assert_int_eq(moeq_config_group(NULL, 0, &g), MOEQ_STATUS_INVALID_ARG);
    cfg = ok_sq("{'config_groups': {'g': {'targets': ['Linear']}}}");
    ck_assert_int_eq(moeq_config_group(cfg, 1, &g), MOEQ_STATUS_INVALID_ARG);
    ck_assert_int_eq(moeq_config_group(cfg, 0, NULL), MOEQ_STATUS_INVALID_ARG);
    ck_assert_ptr_null(moeq_config_warning(cfg, 0));
    double d;
    ck_assert_int_eq(moeq_config_model_number(cfg, NULL, &d), MOEQ_STATUS_INVALID_ARG);
    moeq_config_destroy(cfg);
}
END_TEST

/* ---- out of memory -------------------------------------------------------------- */

/* Fails the n-th allocation for n = 0, 1, ... until the parse succeeds: every
 * failure must be NOMEM with *out NULL (valgrind checks that nothing leaks). */
static void oom_loop(const char *json, size_t len) {
    for (long n = 0;; n++) {
        ck_assert_msg(n < 100000, "parse never succeeded");
        moeq_config *cfg = (moeq_config *)&cfg;
        moeq_error err;
        moeq_error_clear(&err);
        moeq__test_fail_alloc_after(n);
        moeq_status st = moeq_config_parse(json, len, NULL, &cfg, &err);
        moeq__test_fail_alloc_after(-1);
        if (st == MOEQ_STATUS_OK) {
            ck_assert_ptr_nonnull(cfg);
            ck_assert_msg(n > 5, "only %ld allocations?", n);
            moeq_config_destroy(cfg);
            return;
        }
        ck_assert_msg(st == MOEQ_STATUS_NOMEM, "n=%ld: %s %s", n, moeq_status_name(st), err.message);
        ck_assert_ptr_null(cfg);
    }
}

START_TEST(test_oom_glm) {
    char *text = NULL;
    size_t len = 0;
    moeq_error err;
    assert_ok_err(moeq__read_file(CONFIG_DIR "glm-5.3-int4-int8mix-rtn-g64-mixed-regex-no-linear.json",
                                 &text, &len, &err), err);
    oom_loop(text, len);
    moeq__free(text);
}
END_TEST

START_TEST(test_oom_everything_else) {
    /* presets, warnings, model fields, kv cache, raw texts, a long ignore list */
    char *json = dq(
        "{'model_type': 'qwen3_moe', 'num_experts': 128, 'text_config': {'hidden_size': 2048, "
        "'scoring_func': 'softmax'}, 'quantization_config': {'quant_method': 'compressed-tensors', "
        "'version': 'x.y', 'format': 'mystery', 'quantization_status': 'odd', 'provider': 'me', "
        "'extra': 1, 'ignore': ['lm_head', 're:.*gate$', 'a', 'b'], "
        "'kv_cache_scheme': {'num_bits': 8, 'type': 'float'}, 'sparsity_config': {'format': 'dense'}, "
        "'transform_config': {'config_groups': {'t': {'apply': [{'location': 'weight_output'}]}}}, "
        "'config_groups': {'NVFP4': ['re:.*experts.*'], 'g': {'targets': ['Linear'], 'weights': "
        "{'num_bits': 4, 'group_size': 64, 'actorder': 'group', 'unknown': 1, 'observer': 'mse'}, "
        "'input_activations': {'num_bits': 8, 'strategy': 'group', 'group_size': 32, 'dynamic': true, "
        "'observer': 'minmax'}}}}}");
    oom_loop(json, strlen(json));
    free(json);
}
END_TEST

/* ---- model fields, loading ----------------------------------------------------------- */

static const char k_vl_config[] =
    "{'architectures': ['Qwen3VLMoeForConditionalGeneration'], 'model_type': 'qwen3_vl_moe', "
    "'hidden_size': 1, 'tie_word_embeddings': false, 'vision_config': {'depth': 27}, "
    "'text_config': {'num_experts': 128, 'num_experts_per_tok': 8, 'norm_topk_prob': true, "
    "'hidden_size': 2048, 'model_type': 'qwen3_vl_moe_text', 'moe_intermediate_size': 768, "
    "'routed_scaling_factor': 2.5, 'scoring_func': 'sigmoid', 'n_group': 8, 'topk_group': 4, "
    "'first_k_dense_replace': 3, 'rope_scaling': {'type': 'mrope'}, 'num_hidden_layers': 48, "
    "'torch_dtype': null, 'quantization_config': {'quant_method': 'compressed-tensors', "
    "'format': 'pack-quantized', 'config_groups': {'group_0': {'targets': ['Linear'], 'weights': "
    "{'num_bits': 4, 'group_size': 32}}}, 'ignore': ['re:.*visual.*']}}}";

START_TEST(test_model_fields) {
    moeq_config *cfg = ok_sq(k_vl_config);
    ck_assert_str_eq(moeq_config_source_key(cfg), "text_config.quantization_config");
    double d = -1;
    ck_assert_int_eq(moeq_config_model_number(cfg, "num_experts", &d), MOEQ_STATUS_OK);
    ck_assert(d == 128.0);
    ck_assert_int_eq(moeq_config_model_number(cfg, "num_experts_per_tok", &d), MOEQ_STATUS_OK);
    ck_assert(d == 8.0);
    ck_assert_int_eq(moeq_config_model_number(cfg, "norm_topk_prob", &d), MOEQ_STATUS_OK);
    ck_assert(d == 1.0);
    ck_assert_int_eq(moeq_config_model_number(cfg, "tie_word_embeddings", &d), MOEQ_STATUS_OK);
    ck_assert(d == 0.0);
    ck_assert_int_eq(moeq_config_model_number(cfg, "routed_scaling_factor", &d), MOEQ_STATUS_OK);
    ck_assert(d == 2.5);
    ck_assert_int_eq(moeq_config_model_number(cfg, "first_k_dense_replace", &d), MOEQ_STATUS_OK);
    ck_assert(d == 3.0);
    /* the top level wins over text_config */
    ck_assert_int_eq(moeq_config_model_number(cfg, "hidden_size", &d), MOEQ_STATUS_OK);
    ck_assert(d == 1.0);
    ck_assert_str_eq(moeq_config_model_string(cfg, "model_type"), "qwen3_vl_moe");
    ck_assert_str_eq(moeq_config_model_string(cfg, "scoring_func"), "sigmoid");
    /* only scalars; strings are not numbers and numbers are not strings */
    ck_assert_int_eq(moeq_config_model_number(cfg, "rope_scaling", &d), MOEQ_STATUS_NO_MATCH);
    ck_assert_int_eq(moeq_config_model_number(cfg, "architectures", &d), MOEQ_STATUS_NO_MATCH);
    ck_assert_int_eq(moeq_config_model_number(cfg, "vision_config", &d), MOEQ_STATUS_NO_MATCH);
    ck_assert_int_eq(moeq_config_model_number(cfg, "torch_dtype", &d), MOEQ_STATUS_NO_MATCH);
    ck_assert_int_eq(moeq_config_model_number(cfg, "scoring_func", &d), MOEQ_STATUS_NO_MATCH);
    ck_assert_int_eq(moeq_config_model_number(cfg, "num_local_experts", &d), MOEQ_STATUS_NO_MATCH);
    ck_assert_ptr_null(moeq_config_model_string(cfg, "num_experts"));
    ck_assert_ptr_null(moeq_config_model_string(cfg, "nope"));
    moeq_config_destroy(cfg);

    /* a bare block has no model around it */
    cfg = ok_sq("{'format': 'dense', 'config_groups': {'g': {'targets': ['Linear']}}}");
    ck_assert_int_eq(moeq_config_model_number(cfg, "format", &d), MOEQ_STATUS_NO_MATCH);
    ck_assert_ptr_null(moeq_config_model_string(cfg, "format"));
    moeq_config_destroy(cfg);

    /* a repeated key: the last one counts, as in Python */
    cfg = ok_sq("{'num_experts': 4, 'num_experts': 8, 'quantization_config': {'config_groups': "
                "{'g': {'targets': ['Linear']}}}}");
    ck_assert_int_eq(moeq_config_model_number(cfg, "num_experts", &d), MOEQ_STATUS_OK);
    ck_assert(d == 8.0);
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_load_paths) {
    char dir[] = "/tmp/moeq_config_test_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char file[256], other[256], bad[256], dir_slash[256];
    snprintf(file, sizeof file, "%s/config.json", dir);
    snprintf(other, sizeof other, "%s/quant.json", dir);
    snprintf(bad, sizeof bad, "%s/bad.json", dir);
    snprintf(dir_slash, sizeof dir_slash, "%s/", dir);
    char *json = dq(k_vl_config);
    moeq_test_write_text(file, json);
    free(json);
    moeq_test_write_text(other, "{\"config_groups\": {\"W8A16\": [\"Linear\"]}}");
    moeq_test_write_text(bad, "{\n  \"config_groups\": {\n    \"g\": {\"targets\": [\"Linear\"], \"weights\": {\"group_size\": 0}}\n  }\n}\n");

    moeq_config *cfg = NULL;
    moeq_error err;
    /* a directory means its config.json */
    assert_ok_err(moeq_config_load(dir, NULL, &cfg, &err), err);
    ck_assert_str_eq(moeq_config_source_key(cfg), "text_config.quantization_config");
    moeq_config_destroy(cfg);
    assert_ok_err(moeq_config_load(dir_slash, NULL, &cfg, &err), err);
    moeq_config_destroy(cfg);
    /* a config.json, or a file holding a bare block */
    assert_ok_err(moeq_config_load(file, NULL, &cfg, &err), err);
    moeq_config_destroy(cfg);
    assert_ok_err(moeq_config_load(other, NULL, &cfg, &err), err);
    ck_assert_str_eq(moeq_config_source_key(cfg), "");
    ck_assert_int_eq(group_of(cfg, 0).preset, 1);
    moeq_config_destroy(cfg);
    /* parse errors carry the file name */
    ck_assert_int_eq(moeq_config_load(bad, NULL, &cfg, &err), MOEQ_STATUS_SCHEMA);
    ck_assert_ptr_null(cfg);
    ck_assert(strncmp(err.message, bad, strlen(bad)) == 0);
    ck_assert(strstr(err.message, ": config_groups.g.weights.group_size: Invalid group size 0") != NULL);

    /* IO errors name the path */
    char missing[256];
    snprintf(missing, sizeof missing, "%s/nope.json", dir);
    ck_assert_int_eq(moeq_config_load(missing, NULL, &cfg, &err), MOEQ_STATUS_IO);
    ck_assert_ptr_null(cfg);
    ck_assert(strstr(err.message, missing) != NULL);
    remove(file);
    ck_assert_int_eq(moeq_config_load(dir, NULL, &cfg, &err), MOEQ_STATUS_IO);
    ck_assert(strstr(err.message, "config.json") != NULL);

    remove(other);
    remove(bad);
    rmdir(dir);
}
END_TEST

/* ---- warnings and strict keys ------------------------------------------------------------ */

static int g_warn_logs;
static void count_warn(int32_t level, const char *msg, void *user) {
    (void)msg;
    (void)user;
    if (level == MOEQ_LOG_WARN) g_warn_logs++;
}

START_TEST(test_unknown_keys_warn) {
    static const char json[] =
        "{'quantization_config': {'quant_method': 'compressed-tensors', 'shiny': true, "
        "'packed_modules_mapping': {}, 'provider': 'x', 'run_compressed': true, "
        "'config_groups': {'g': {'targets': ['Linear'], 'colour': 'red', "
        "'weights': {'num_bits': 4, 'group_size': 128, 'group_sizee': 64}}}}}";
    g_warn_logs = 0;
    moeq_set_log_callback(count_warn, NULL);
    moeq_config *cfg = ok_sq(json);
    moeq_set_log_callback(NULL, NULL);
    ck_assert(has_warning(cfg, "quantization_config.config_groups.g.weights.group_sizee: unknown "
                               "key in QuantizationArgs, ignored (compressed-tensors itself "
                               "rejects unknown keys here; known keys: num_bits,"));
    ck_assert(has_warning(cfg, "quantization_config.config_groups.g.colour: unknown key in config "
                               "group (QuantizationScheme), ignored"));
    ck_assert(has_warning(cfg, "quantization_config.shiny: unknown key in the quantization config, "
                               "ignored (compressed-tensors ignores unknown top-level keys"));
    ck_assert(has_warning(cfg, "quantization_config.packed_modules_mapping: key added by "
                               "inference engines"));
    ck_assert(has_warning(cfg, "quantization_config.provider: key added by inference engines"));
    ck_assert(!has_warning(cfg, "quantization_config.run_compressed:"));
    ck_assert_uint_eq(moeq_config_warning_count(cfg), 5);
    ck_assert_int_eq(g_warn_logs, 5);
    ck_assert_str_eq(summary(group_of(cfg, 0).weights), "int4 group(128) sym static");
    moeq_config_destroy(cfg);

    /* strict_keys turns unknown keys into errors, engine keys stay warnings */
    moeq_config_options opts = {1, 0};
    moeq_error err;
    cfg = NULL;
    ck_assert_int_eq(parse_sq(json, &opts, &cfg, &err), MOEQ_STATUS_SCHEMA);
    ck_assert_ptr_null(cfg);
    ck_assert(strstr(err.message, "quantization_config.shiny: unknown key in the quantization "
                                  "config (rejected because strict_keys is set") != NULL);
    ck_assert_int_eq(parse_sq("{'config_groups': {'g': {'targets': ['Linear'], 'weights': "
                              "{'bits': 4}}}}", &opts, &cfg, &err), MOEQ_STATUS_SCHEMA);
    ck_assert(strstr(err.message, "config_groups.g.weights.bits: unknown key in QuantizationArgs "
                                  "(rejected because strict_keys is set; compressed-tensors itself "
                                  "rejects unknown keys here") != NULL);
    ck_assert_int_eq(parse_sq("{'config_groups': {'g': {'targets': ['Linear'], 'colour': 1}}}",
                              &opts, &cfg, &err), MOEQ_STATUS_SCHEMA);
    ck_assert(strstr(err.message, "config_groups.g.colour: unknown key in config group") != NULL);
    ck_assert_int_eq(parse_sq("{'provider': 'x', 'linear_fp8_config': {}, 'config_groups': {'g': "
                              "{'targets': ['Linear']}}}", &opts, &cfg, &err), MOEQ_STATUS_OK);
    ck_assert_uint_eq(moeq_config_warning_count(cfg), 2);
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_other_warnings) {
    /* sparseml, unknown format and status, unparsable version, repeated keys */
    moeq_config *cfg = ok_sq(
        "{'quant_method': 'sparseml', 'format': 'pack_quantized', 'quantization_status': 'done', "
        "'version': 'nightly', 'config_groups': {'g': {'targets': ['a'], 'weights': {'num_bits': 4, "
        "'num_bits': 8}}, 'h': {'targets': ['b']}, 'g': {'targets': ['c']}}}");
    ck_assert(has_warning(cfg, "quant_method: \"sparseml\" is the name used by very old configs"));
    ck_assert(has_warning(cfg, "format: 'pack_quantized' read as 'pack-quantized' "
                               "(compressed-tensors normalises format names"));
    ck_assert_int_eq(moeq_config_format(cfg), MOEQ_FORMAT_PACK_QUANTIZED);
    ck_assert(has_warning(cfg, "quantization_status: unknown status 'done'"));
    ck_assert_str_eq(moeq_config_quantization_status(cfg), "done");
    ck_assert(has_warning(cfg, "version: cannot read a version number from 'nightly'"));
    ck_assert_int_eq(cfg->version_major, -1);
    ck_assert(has_warning(cfg, "config_groups.g: group name given more than once; the last one is used"));
    /* the repeated group keeps its first place and its last value */
    ck_assert_uint_eq(moeq_config_group_count(cfg), 2);
    moeq_group_view g = group_of(cfg, 0);
    ck_assert_str_eq(g.name, "g");
    ck_assert_str_eq(g.targets[0], "c");
    ck_assert_ptr_null(g.weights);
    ck_assert_str_eq(group_of(cfg, 1).name, "h");
    moeq_config_destroy(cfg);

    cfg = weights_cfg("{'num_bits': 4, 'num_bits': 8}");
    ck_assert_int_eq(group_of(cfg, 0).weights->num_bits, 8);
    ck_assert(has_warning(cfg, "config_groups.g.weights.num_bits: key given more than once; the "
                               "last value is used"));
    moeq_config_destroy(cfg);

    cfg = ok_sq("{'format': 'int4-awq', 'config_groups': {'g': {'targets': ['a'], 'weights': "
                "{'num_bits': 4, 'group_size': 128}}}}");
    ck_assert(has_warning(cfg, "format: unknown compression format 'int4-awq'; each group's "
                               "format will be its own or inferred from its scheme"));
    ck_assert_int_eq(moeq_config_format(cfg), MOEQ_FORMAT_NONE);
    ck_assert_int_eq(moeq__group_format(cfg, &cfg->groups[0]), MOEQ_FORMAT_PACK_QUANTIZED);
    moeq_config_destroy(cfg);

    /* quant_method missing: CT's default, with a warning */
    cfg = ok_sq("{'quantization_config': {'config_groups': {'g': {'targets': ['Linear']}}}}");
    ck_assert(has_warning(cfg, "quantization_config.quant_method: missing; assuming"));
    moeq_config_destroy(cfg);

    /* weights and inputs both group with different sizes, same bits and type (CT's warning) */
    cfg = ok_sq("{'config_groups': {'g': {'targets': ['Linear'], 'weights': {'num_bits': 8, "
                "'group_size': 128}, 'input_activations': {'num_bits': 8, 'group_size': 64, "
                "'dynamic': true}}}}");
    ck_assert(has_warning(cfg, "config_groups.g: Using GROUP strategy for both weights and "
                               "input_activations with different group sizes (128 vs 64) may "
                               "complicate fused kernel implementations."));
    moeq_config_destroy(cfg);
    /* ... but not for inputs of another bit width or type (CT 0.20: MXFP4XFP8 on purpose) */
    static const char *const other_inputs[] = {
        "{'num_bits': 8, 'group_size': 64, 'dynamic': true}",
        "{'num_bits': 4, 'type': 'float', 'group_size': 64, 'dynamic': true}"};
    for (size_t i = 0; i < MOEQ__ARRAY_LEN(other_inputs); i++) {
        char json[512];
        snprintf(json, sizeof json,
                 "{'config_groups': {'g': {'targets': ['Linear'], 'weights': {'num_bits': 4, "
                 "'group_size': 128}, 'input_activations': %s}}}",
                 other_inputs[i]);
        cfg = ok_sq(json);
        ck_assert(!has_warning(cfg, "different group sizes"));
        moeq_config_destroy(cfg);
    }
    cfg = ok_sq("{'config_groups': {'MXFP4XFP8': ['Linear']}}");
    ck_assert_int_eq(moeq_config_warning_count(cfg), 0);
    moeq_config_destroy(cfg);
}
END_TEST

/* ---- formats, versions, flags, summaries ------------------------------------------------ */

START_TEST(test_format_precedence) {
    moeq_config *cfg = ok_sq(
        "{'format': 'mixed-precision', 'config_groups': {"
        "'a': {'targets': ['x'], 'format': 'float-quantized', 'weights': {'num_bits': 8, 'type': 'float'}}, "
        "'b': {'targets': ['y'], 'weights': {'num_bits': 4, 'type': 'float', 'strategy': 'tensor_group', 'group_size': 16}}, "
        "'c': {'targets': ['z'], 'format': null, 'weights': {'num_bits': 4, 'group_size': 32}}}}");
    ck_assert_int_eq(moeq_config_format(cfg), MOEQ_FORMAT_MIXED_PRECISION);
    ck_assert_int_eq(moeq__group_format(cfg, &cfg->groups[0]), MOEQ_FORMAT_FLOAT_QUANTIZED);
    ck_assert_int_eq(moeq__group_format(cfg, &cfg->groups[1]), MOEQ_FORMAT_NVFP4_PACK_QUANTIZED);
    ck_assert_int_eq(moeq__group_format(cfg, &cfg->groups[2]), MOEQ_FORMAT_PACK_QUANTIZED);
    moeq_config_destroy(cfg);

    /* a top-level format applies to groups without their own */
    cfg = ok_sq("{'format': 'naive-quantized', 'config_groups': {'a': {'targets': ['x'], "
                "'weights': {'num_bits': 4, 'group_size': 32}}, 'b': {'targets': ['y'], 'format': "
                "'dense'}}}");
    ck_assert_int_eq(moeq__group_format(cfg, &cfg->groups[0]), MOEQ_FORMAT_NAIVE_QUANTIZED);
    ck_assert_int_eq(moeq__group_format(cfg, &cfg->groups[1]), MOEQ_FORMAT_DENSE);
    moeq_config_destroy(cfg);

    cfg = ok_sq("{'format': 'fakequant', 'config_groups': {'a': {'targets': ['x']}}}");
    ck_assert_int_eq(moeq_config_format(cfg), MOEQ_FORMAT_FAKEQUANT);
    ck_assert_int_eq(moeq__group_format(cfg, &cfg->groups[0]), MOEQ_FORMAT_FAKEQUANT);
    moeq_config_destroy(cfg);

    /* every CompressionFormat value reads back as itself in a group */
    for (int32_t f = MOEQ_FORMAT_DENSE; f < MOEQ_FORMAT_COUNT_; f++) {
        if (f == MOEQ_FORMAT_MIXED_PRECISION || f == MOEQ_FORMAT_FAKEQUANT) continue;
        char json[256];
        snprintf(json, sizeof json, "{'config_groups': {'a': {'targets': ['x'], 'format': '%s'}}}",
                 moeq_format_name(f));
        cfg = ok_sq(json);
        ck_assert_int_eq(group_of(cfg, 0).format, f);
        moeq_config_destroy(cfg);
    }
}
END_TEST

static moeq_quant_args qa(int bits, int type, int gs, int scale) {
    moeq_quant_args a;
    memset(&a, 0, sizeof a);
    a.num_bits = bits;
    a.type = type;
    a.group_size = gs;
    a.strategy = gs > 0 ? MOEQ_STRATEGY_GROUP : MOEQ_STRATEGY_CHANNEL;
    a.symmetric = 1;
    a.scale_dtype = scale;
    return a;
}

START_TEST(test_infer_format) {
    moeq_quant_args f4g32 = qa(4, F_, 32, MOEQ_DTYPE_U8), f8g32 = qa(8, F_, 32, MOEQ_DTYPE_U8);
    moeq_quant_args f8g32bf = qa(8, F_, 32, MOEQ_DTYPE_BF16), f4g16 = qa(4, F_, 16, NOD);
    moeq_quant_args i4 = qa(4, I_, 128, NOD), i8 = qa(8, I_, -1, NOD), i16 = qa(16, I_, -1, NOD);
    moeq_quant_args f8 = qa(8, F_, -1, NOD);
    ck_assert_int_eq(moeq__infer_format(NULL, NULL), MOEQ_FORMAT_DENSE);
    ck_assert_int_eq(moeq__infer_format(&f4g32, NULL), MOEQ_FORMAT_MXFP4_PACK_QUANTIZED);
    ck_assert_int_eq(moeq__infer_format(&f4g32, &f4g32), MOEQ_FORMAT_MXFP4_PACK_QUANTIZED);
    ck_assert_int_eq(moeq__infer_format(&f8g32, NULL), MOEQ_FORMAT_MXFP8_QUANTIZED);
    ck_assert_int_eq(moeq__infer_format(&f8g32bf, NULL), MOEQ_FORMAT_NAIVE_QUANTIZED);
    ck_assert_int_eq(moeq__infer_format(&f8g32bf, &f8), MOEQ_FORMAT_FLOAT_QUANTIZED);
    ck_assert_int_eq(moeq__infer_format(&f4g16, &f4g16), MOEQ_FORMAT_NVFP4_PACK_QUANTIZED);
    ck_assert_int_eq(moeq__infer_format(&i4, NULL), MOEQ_FORMAT_PACK_QUANTIZED);
    ck_assert_int_eq(moeq__infer_format(&i4, &i8), MOEQ_FORMAT_INT_QUANTIZED);
    ck_assert_int_eq(moeq__infer_format(&i4, &f8), MOEQ_FORMAT_INT_QUANTIZED); /* W4AFP8 */
    ck_assert_int_eq(moeq__infer_format(&i16, NULL), MOEQ_FORMAT_NAIVE_QUANTIZED);
    ck_assert_int_eq(moeq__infer_format(&f8, NULL), MOEQ_FORMAT_NAIVE_QUANTIZED);
    ck_assert_int_eq(moeq__infer_format(&f8, &f8), MOEQ_FORMAT_FLOAT_QUANTIZED);
}
END_TEST

/* The format a group's modules are read with: own, top-level, else inferred. */
START_TEST(test_group_format) {
    moeq_config *cfg = ok_sq("{'format': 'mixed-precision', 'config_groups': {"
                             "'a': {'targets': ['x'], 'weights': {'num_bits': 4, 'type': 'int', "
                             "'symmetric': true, 'strategy': 'group', 'group_size': 128}}, "
                             "'b': {'targets': ['y'], 'format': 'naive-quantized', "
                             "'weights': {'num_bits': 8, 'type': 'int', 'symmetric': true, "
                             "'strategy': 'channel'}}}}");
    ck_assert_int_eq(moeq_config_group_format(cfg, 0), MOEQ_FORMAT_PACK_QUANTIZED);
    ck_assert_int_eq(moeq_config_group_format(cfg, 1), MOEQ_FORMAT_NAIVE_QUANTIZED);
    ck_assert_int_eq(moeq_config_group_format(cfg, 2), MOEQ_FORMAT_NONE);
    ck_assert_int_eq(moeq_config_group_format(NULL, 0), MOEQ_FORMAT_NONE);
    moeq_config_destroy(cfg);
    cfg = ok_sq("{'format': 'float-quantized', 'config_groups': {'a': {'targets': ['x'], "
                "'weights': {'num_bits': 8, 'type': 'float', 'symmetric': true, "
                "'strategy': 'channel'}}}}");
    ck_assert_int_eq(moeq_config_group_format(cfg, 0), MOEQ_FORMAT_FLOAT_QUANTIZED);
    moeq_config_destroy(cfg);
}
END_TEST

static moeq_config *version_cfg(const char *version, const char *weights) {
    char json[512];
    snprintf(json, sizeof json, "{'version': '%s', 'config_groups': {'g': {'targets': ['x'], "
                                "'weights': %s}}}", version, weights);
    return ok_sq(json);
}

START_TEST(test_versions_and_flags) {
    static const struct {
        const char *text;
        int major, minor, patch;
    } v[] = {{"0.12.3.a20251013", 0, 12, 3},   {"0.14.4.dev54+g704d57b", 0, 14, 4},
             {"0.6.0.20240921", 0, 6, 0},      {"0.18.1.dev0+gac8e2ba.d20260813", 0, 18, 1},
             {"0.18.0", 0, 18, 0},             {"1.2", 1, 2, 0},
             {"v0.9.3", 0, 9, 3},              {"10.20.30rc1", 10, 20, 30},
             {"abc", -1, -1, -1},              {"7", -1, -1, -1},
             {".1.2", -1, -1, -1}};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        moeq_config *cfg = version_cfg(v[i].text, "null");
        ck_assert_str_eq(moeq_config_version(cfg), v[i].text);
        ck_assert_msg(cfg->version_major == v[i].major && cfg->version_minor == v[i].minor &&
                          cfg->version_patch == v[i].patch,
                      "%s -> %d.%d.%d", v[i].text, cfg->version_major, cfg->version_minor,
                      cfg->version_patch);
        ck_assert_int_eq(has_warning(cfg, "cannot read a version number"), v[i].major < 0);
        moeq_config_destroy(cfg);
    }

    moeq_config *cfg = version_cfg("0.17.1", "null");
    ck_assert(moeq__config_version_before(cfg, 0, 18, 0));
    ck_assert(moeq__config_version_before(cfg, 0, 17, 2));
    ck_assert(!moeq__config_version_before(cfg, 0, 17, 1));
    ck_assert(!moeq__config_version_before(cfg, 0, 9, 9));
    ck_assert(moeq__config_version_before(cfg, 1, 0, 0));
    moeq_config_destroy(cfg);

    const char *mx = "{'num_bits': 4, 'type': 'float', 'group_size': 32, 'scale_dtype': 'torch.uint8'}";
    const char *int4 = "{'num_bits': 4, 'group_size': 32}";
    static const struct {
        const char *version;
        int mxfp4;
        uint32_t flags;
    } fl[] = {
        {"0.13.0", 1, MOEQ_DEQUANT_LEGACY_PACKING | MOEQ_DEQUANT_MXFP4_V013},
        {"0.13.1.dev3", 1, MOEQ_DEQUANT_LEGACY_PACKING | MOEQ_DEQUANT_MXFP4_V013},
        {"0.13.0", 0, MOEQ_DEQUANT_LEGACY_PACKING},
        {"0.14.0", 1, MOEQ_DEQUANT_LEGACY_PACKING},
        {"0.12.3.a20251013", 1, MOEQ_DEQUANT_LEGACY_PACKING},
        {"0.17.1", 0, MOEQ_DEQUANT_LEGACY_PACKING},
        {"0.18.0", 0, 0},
        {"0.18.0", 1, 0},
        {"1.0.0", 0, 0},
        {"unknown", 1, 0},
    };
    for (size_t i = 0; i < sizeof fl / sizeof *fl; i++) {
        cfg = version_cfg(fl[i].version, fl[i].mxfp4 ? mx : int4);
        ck_assert_msg(moeq_config_dequant_flags(cfg) == fl[i].flags, "%s mxfp4=%d: %u",
                      fl[i].version, fl[i].mxfp4, moeq_config_dequant_flags(cfg));
        moeq_config_destroy(cfg);
    }
    /* the MXFP4 flag follows the effective format, not only inference */
    cfg = ok_sq("{'version': '0.13.0', 'format': 'mxfp4-pack-quantized', 'config_groups': {'g': "
                "{'targets': ['x'], 'weights': {'num_bits': 4, 'type': 'float', 'group_size': 16}}}}");
    ck_assert_uint_eq(moeq_config_dequant_flags(cfg),
                      MOEQ_DEQUANT_LEGACY_PACKING | MOEQ_DEQUANT_MXFP4_V013);
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_summary) {
    moeq_config *cfg = ok_sq(
        "{'config_groups': {'g': {'targets': ['x'], 'weights': {'num_bits': 8, 'type': 'float', "
        "'strategy': 'block', 'block_structure': [128, 128]}, 'input_activations': {'num_bits': 8, "
        "'type': 'float', 'strategy': 'token', 'dynamic': true}}}}");
    moeq_group_view g = group_of(cfg, 0);
    char buf[64];
    ck_assert_uint_eq(moeq_quant_args_summary(g.weights, buf, sizeof buf),
                      strlen("float8 block(128x128) sym static"));
    ck_assert_str_eq(buf, "float8 block(128x128) sym static");
    ck_assert_str_eq(summary(g.input_activations), "float8 token sym dynamic");
    /* truncation: always NUL-terminated, returns the length it wanted */
    char small[8];
    ck_assert_uint_eq(moeq_quant_args_summary(g.weights, small, sizeof small), 32);
    ck_assert_str_eq(small, "float8 ");
    ck_assert_uint_eq(moeq_quant_args_summary(g.weights, NULL, 0), 32);
    ck_assert_uint_eq(moeq_quant_args_summary(NULL, buf, sizeof buf), 4);
    ck_assert_str_eq(buf, "none");
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_options_and_raw_texts) {
    moeq_config_options opts = {0, 5};
    moeq_config *cfg = NULL;
    moeq_error err;
    assert_ok_err(parse_sq("{'config_groups': {'g': {'targets': ['Linear']}}, 'transform_config': "
                          "{'config_groups': {'t': {'type': 'hadamard', 'apply': [{'targets': "
                          "['Linear'], 'location': 'weight_input'}, {'targets': ['Linear'], "
                          "'location': 'WEIGHT_OUTPUT', 'inverse': true}]}}}, 'sparsity_config': "
                          "{'format': 'dense', 'global_sparsity': 0.5}, 'run_compressed': [1, 2]}",
                          &opts, &cfg, &err), err);
    ck_assert_uint_eq(cfg->regex_match_limit, 5);
    ck_assert_str_eq(moeq_config_raw(cfg, "sparsity_config"),
                     "{\"format\":\"dense\",\"global_sparsity\":0.5}");
    ck_assert(strstr(moeq_config_raw(cfg, "transform_config"), "\"location\":\"weight_input\"") != NULL);
    ck_assert_uint_eq(moeq_config_warning_count(cfg), 0);
    moeq_config_destroy(cfg);
}
END_TEST

/* compressed-tensors 0.20's moe_sparsity_config: parsed inside the
 * quantization config, the retained count by decoder layer, novice refused
 * by layer, bad values SCHEMA with their JSON path. */
#define MS_QC(ms)                                                                              \
    "{\"num_hidden_layers\": 3, \"quantization_config\": {\"quant_method\": "                 \
    "\"compressed-tensors\", \"config_groups\": {\"g\": {\"targets\": [\"Linear\"], "          \
    "\"weights\": {\"num_bits\": 4}}}, \"moe_sparsity_config\": " ms "}}"

START_TEST(test_moe_sparsity_config) {
    moeq_config *cfg = NULL;
    moeq_error err;
    const char *ok = MS_QC("{\"method\": \"prune\", \"num_experts\": [null, 5, 7]}");
    ck_assert_int_eq(moeq_config_parse(ok, strlen(ok), NULL, &cfg, &err), MOEQ_OK);
    uint32_t n = 0;
    ck_assert_int_eq(moeq_config_moe_sparsity(cfg, &n), MOEQ_MOE_SPARSITY_PRUNE);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(moeq_config_moe_sparsity_layer(cfg, 0), 0);
    ck_assert_int_eq(moeq_config_moe_sparsity_layer(cfg, 2), 7);
    ck_assert_int_eq(moeq_config_moe_sparsity_layer(cfg, 3), -1);
    int32_t k = -1;
    ck_assert_int_eq(moeq_config_retained_experts(cfg, "model.layers.1.mlp.experts", &k, &err),
                     MOEQ_OK);
    ck_assert_int_eq(k, 5);
    ck_assert_int_eq(moeq_config_retained_experts(cfg, "backbone.layers.2.mixer.experts", &k,
                                                  &err),
                     MOEQ_OK);
    ck_assert_int_eq(k, 7);
    ck_assert_int_eq(moeq_config_retained_experts(cfg, "model.layers.0.mlp.experts", &k, &err),
                     MOEQ_STATUS_NO_MATCH);
    ck_assert_msg(strstr(err.message, "dense"), "%s", err.message);
    ck_assert_int_eq(moeq_config_retained_experts(cfg, "model.layers.9.mlp.experts", &k, &err),
                     MOEQ_STATUS_NO_MATCH);
    moeq_config_destroy(cfg);

    const char *nov = MS_QC("{\"method\": \"novice\", \"num_experts\": [null, 5, 7]}");
    ck_assert_int_eq(moeq_config_parse(nov, strlen(nov), NULL, &cfg, &err), MOEQ_OK);
    ck_assert_int_eq(moeq_config_retained_experts(cfg, "model.layers.2.mlp.experts", &k, &err),
                     MOEQ_STATUS_UNSUPPORTED);
    ck_assert_msg(strstr(err.message, "model.layers.2.mlp.experts") &&
                      strstr(err.message, "novice"),
                  "%s", err.message);
    moeq_config_destroy(cfg);

    const char *none = MS_QC("null");
    ck_assert_int_eq(moeq_config_parse(none, strlen(none), NULL, &cfg, &err), MOEQ_OK);
    ck_assert_int_eq(moeq_config_moe_sparsity(cfg, NULL), MOEQ_MOE_SPARSITY_NONE);
    ck_assert_int_eq(moeq_config_retained_experts(cfg, "model.layers.2.mlp.experts", &k, &err),
                     MOEQ_OK);
    ck_assert_int_eq(k, 0);
    /* 0.20 writes the null into every config: no "unknown key" (no warning at all) */
    for (uint32_t i = 0; i < moeq_config_warning_count(cfg); i++) {
        ck_assert_msg(!strstr(moeq_config_warning(cfg, i), "moe_sparsity_config"), "%s",
                      moeq_config_warning(cfg, i));
    }
    moeq_config_destroy(cfg);

    static const struct {
        const char *json, *path;
    } bad[] = {
        {MS_QC("{\"method\": \"drop\", \"num_experts\": [null, 5, 7]}"),
         "quantization_config.moe_sparsity_config.method"},
        {MS_QC("{\"method\": \"prune\", \"num_experts\": [null, 5.5, 7]}"),
         "quantization_config.moe_sparsity_config.num_experts[1]"},
        {MS_QC("{\"method\": \"prune\", \"num_experts\": [null, true, 7]}"),
         "quantization_config.moe_sparsity_config.num_experts[1]"},
        {MS_QC("{\"method\": \"prune\", \"num_experts\": [null, 0, 7]}"),
         "quantization_config.moe_sparsity_config.num_experts[1]"},
        {MS_QC("{\"method\": \"prune\", \"num_experts\": [null, 5]}"), "num_hidden_layers"},
        {MS_QC("{\"method\": \"prune\"}"), "quantization_config.moe_sparsity_config.num_experts"},
        {MS_QC("[1]"), "quantization_config.moe_sparsity_config"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(moeq_config_parse(bad[i].json, strlen(bad[i].json), NULL, &cfg, &err),
                         MOEQ_STATUS_SCHEMA);
        ck_assert_msg(strstr(err.message, bad[i].path), "%zu: %s", i, err.message);
    }
}
END_TEST

static Suite *config_suite(void) {
    Suite *s = suite_create("config");
    TCase *real = tcase_create("real_configs");
    tcase_add_test(real, test_real_glm);
    tcase_add_test(real, test_real_llama_fp8_dynamic);
    tcase_add_test(real, test_real_llama2c_w4a16);
    tcase_add_test(real, test_real_mxfp4_w4a4);
    tcase_add_test(real, test_real_phi3_fp8_static);
    tcase_add_test(real, test_real_qwen3_w8a8);
    tcase_add_test(real, test_real_qwen35_mxfp4a16);
    tcase_add_test(real, test_real_all_parse);
    suite_add_tcase(s, real);

    TCase *args = tcase_create("args");
    tcase_add_test(args, test_args_defaults);
    tcase_add_test(args, test_args_inference);
    tcase_add_test(args, test_args_case_and_legacy_forms);
    tcase_add_test(args, test_args_failures_from_ct_tests);
    tcase_add_test(args, test_args_observer_and_zp);
    tcase_add_test(args, test_kv_cache_scheme);
    suite_add_tcase(s, args);

    TCase *presets = tcase_create("presets");
    tcase_add_test(presets, test_presets_all);
    tcase_add_test(presets, test_presets_spot_checks);
    suite_add_tcase(s, presets);

    TCase *bad = tcase_create("malformed");
    tcase_add_test(bad, test_malformed_table);
    tcase_add_test(bad, test_bad_arguments);
    suite_add_tcase(s, bad);

    TCase *oom = tcase_create("oom");
    tcase_set_timeout(oom, 120);
    tcase_add_test(oom, test_oom_glm);
    tcase_add_test(oom, test_oom_everything_else);
    suite_add_tcase(s, oom);

    TCase *misc = tcase_create("misc");
    tcase_add_test(misc, test_model_fields);
    tcase_add_test(misc, test_load_paths);
    tcase_add_test(misc, test_unknown_keys_warn);
    tcase_add_test(misc, test_other_warnings);
    tcase_add_test(misc, test_format_precedence);
    tcase_add_test(misc, test_infer_format);
    tcase_add_test(misc, test_group_format);
    tcase_add_test(misc, test_versions_and_flags);
    tcase_add_test(misc, test_summary);
    tcase_add_test(misc, test_options_and_raw_texts);
    tcase_add_test(misc, test_moe_sparsity_config);
    suite_add_tcase(s, misc);
    return s;
}

MOEQ_TEST_MAIN(config_suite)

/*
 * check_registry.c - the scheme registry and the selection policy: every
 * scheme fills every slot, each scheme name is selected by the configs it is
 * meant for, predicates do not overlap, and rejections explain themselves.
 */
#include "test_util.h"
#include "schemes/scheme.h"

START_TEST(test_every_slot_filled) {
    for (int32_t id = 0; id < MOEQ_SCHEME_COUNT; id++) {
        const moeq__scheme *s = moeq__scheme_get(id);
        ck_assert_ptr_nonnull(s);
        ck_assert_int_eq(s->id, id);
        ck_assert_ptr_nonnull(s->name);
        ck_assert_ptr_nonnull(s->summary);
        ck_assert_msg(s->accepts && s->create_weights && s->finalize && s->apply,
                      "scheme %s lacks a slot", s->name);
        ck_assert_str_eq(moeq_scheme_name(id), s->name);
        ck_assert_int_eq(moeq_scheme_from_name(s->name), id);
        ck_assert_str_eq(moeq_scheme_summary(id), s->summary);
    }
    ck_assert_ptr_null(moeq_scheme_name(MOEQ_SCHEME_COUNT));
    ck_assert_int_eq(moeq_scheme_from_name("marlin"), -1);
    ck_assert_int_eq(moeq_scheme_from_name(NULL), -1);
}
END_TEST

/* One group -> resolve a MoE layer -> select. */
typedef struct select_case {
    const char *weights;  /* JSON or "null" */
    const char *inputs;   /* JSON or "null" */
    const char *format;   /* group format */
    int32_t platform;
    int32_t prefer_mxint4;
    const char *scheme;   /* expected name, or NULL for UNSUPPORTED */
} select_case;

static const select_case k_cases[] = {
    /* wna16: int4/int8 group/channel, sym/asym, actorder; GLM group_1 */
    {"{\"num_bits\":4,\"group_size\":64,\"strategy\":\"group\"}", "null", "pack-quantized", 0, 0, "wna16"},
    {"{\"num_bits\":8,\"group_size\":-1}", "null", "pack-quantized", 0, 0, "wna16"},
    {"{\"num_bits\":4,\"group_size\":128,\"symmetric\":false}", "null", "pack-quantized", 0, 0, "wna16"},
    {"{\"num_bits\":4,\"group_size\":128,\"actorder\":\"group\"}", "null", "pack-quantized", 0, 0, "wna16"},
    {"{\"num_bits\":3,\"group_size\":128}", "null", "pack-quantized", 0, 0, "wna16"},
    {"{\"num_bits\":8,\"group_size\":128}", "null", "naive-quantized", 0, 0, "wna16"},
    /* mxint4 only on request */
    {"{\"num_bits\":4,\"group_size\":32}", "null", "pack-quantized", 0, 1, "mxint4"},
    {"{\"num_bits\":4,\"group_size\":32}", "null", "pack-quantized", 0, 0, "wna16"},
    {"{\"num_bits\":4,\"group_size\":128}", "null", "pack-quantized", 0, 1, "wna16"},
    /* NVFP4 */
    {"{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\",\"group_size\":16}", "null",
     "nvfp4-pack-quantized", 0, 0, "w4a16_nvfp4"},
    {"{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\",\"group_size\":16}",
     "{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\",\"group_size\":16,\"dynamic\":\"local\"}",
     "nvfp4-pack-quantized", 0, 0, "w4a4_nvfp4"},
    /* MXFP4, weight-only and W4A4 */
    {"{\"num_bits\":4,\"type\":\"float\",\"group_size\":32,\"scale_dtype\":\"torch.uint8\"}", "null",
     "mxfp4-pack-quantized", 0, 0, "w4a16_mxfp4"},
    {"{\"num_bits\":4,\"type\":\"float\",\"group_size\":32}",
     "{\"num_bits\":4,\"type\":\"float\",\"group_size\":32,\"dynamic\":true}", "mxfp4-pack-quantized", 0, 0,
     "w4a16_mxfp4"},
    /* FP8 */
    {"{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}", "null", "naive-quantized", 0, 0, "w8a16_fp8"},
    {"{\"num_bits\":8,\"type\":\"float\"}", "null", "float-quantized", 0, 0, "w8a16_fp8"},
    {"{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"token\",\"dynamic\":true}", "float-quantized", 0, 0,
     "w8a8_fp8"},
    {"{\"num_bits\":8,\"type\":\"float\"}", "{\"num_bits\":8,\"type\":\"float\"}", "naive-quantized", 0, 0,
     "w8a8_fp8"},
    {"{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"block\",\"block_structure\":[128,128]}",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"group\",\"group_size\":128,\"dynamic\":true}",
     "float-quantized", 0, 0, "w8a8_fp8"},
    /* SGLang asserts on these combinations; moeq runs them. */
    {"{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\",\"dynamic\":true}", "float-quantized", 0, 0,
     "w8a8_fp8"},
    /* int8 W8A8 dynamic and static (SGLang: NPU-only / RuntimeError) */
    {"{\"num_bits\":8,\"strategy\":\"channel\"}",
     "{\"num_bits\":8,\"strategy\":\"token\",\"dynamic\":true}", "int-quantized", 0, 0, "w8a8_int8"},
    {"{\"num_bits\":8,\"strategy\":\"channel\"}", "{\"num_bits\":8}", "int-quantized", 0, 0, "w8a8_int8"},
    {"{\"num_bits\":8,\"strategy\":\"channel\"}",
     "{\"num_bits\":8,\"strategy\":\"token\",\"dynamic\":true}", "int-quantized", 1, 0, "npu_w8a8_int8"},
    /* W4A8: int and FP8 activations, pack- or int-quantized, on a mixed-precision config */
    {"{\"num_bits\":4,\"group_size\":128}", "{\"num_bits\":8,\"strategy\":\"token\",\"dynamic\":true}",
     "int-quantized", 0, 0, "w4a8_int8"},
    {"{\"num_bits\":4,\"group_size\":128}",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"token\",\"dynamic\":true}", "pack-quantized", 0, 0,
     "w4a8_fp8"},
    {"{\"num_bits\":4,\"group_size\":-1}", "{\"num_bits\":8,\"strategy\":\"token\",\"dynamic\":true}",
     "int-quantized", 1, 0, "npu_w4a8_int8"},
    /* ... and group weights (SGLang's _is_dynamic_token_w4a8 takes both), with the grouped
     * *_second parameters; per-tensor inputs stay on the CPU scheme */
    {"{\"num_bits\":4,\"group_size\":128}", "{\"num_bits\":8,\"strategy\":\"token\",\"dynamic\":true}",
     "pack-quantized", 1, 0, "npu_w4a8_int8"},
    {"{\"num_bits\":4,\"group_size\":128}", "{\"num_bits\":8,\"strategy\":\"tensor\",\"dynamic\":true}",
     "int-quantized", 1, 0, "w4a8_int8"},
    /* NPU W4A16 */
    {"{\"num_bits\":4,\"group_size\":128}", "null", "pack-quantized", 1, 0, "npu_w4a16_int4"},
    /* NPU platform, config the NPU layouts do not take: the CPU scheme runs
     * (SGLang silently loads it unquantized). */
    {"{\"num_bits\":8,\"group_size\":128,\"symmetric\":false}", "null", "pack-quantized", 1, 0, "wna16"},
    /* compressed-tensors 0.20's MX presets: MXFP8A16, MXFP8 */
    {"{\"num_bits\":8,\"type\":\"float\",\"group_size\":32,\"scale_dtype\":\"torch.uint8\"}", "null",
     "mxfp8-quantized", 0, 0, "w8a16_mxfp8"},
    {"{\"num_bits\":8,\"type\":\"float\",\"group_size\":32,\"scale_dtype\":\"torch.uint8\"}",
     "{\"num_bits\":8,\"type\":\"float\",\"group_size\":32,\"dynamic\":true,\"scale_dtype\":\"torch.uint8\"}",
     "mxfp8-quantized", 0, 0, "w8a8_mxfp8"},
    /* MXFP6A16, MXFP6A8, MXFP4XFP8 (0.20) */
    {"{\"num_bits\":6,\"type\":\"float\",\"group_size\":32,\"scale_dtype\":\"torch.uint8\"}", "null",
     "mxfp6-pack-quantized", 0, 0, "w6a16_mxfp6"},
    {"{\"num_bits\":6,\"type\":\"float\",\"group_size\":32,\"scale_dtype\":\"torch.uint8\"}",
     "{\"num_bits\":8,\"type\":\"float\",\"group_size\":32,\"dynamic\":true,\"scale_dtype\":\"torch.uint8\"}",
     "mxfp6-pack-quantized", 0, 0, "w6a8_mxfp6"},
    {"{\"num_bits\":4,\"type\":\"float\",\"group_size\":32,\"scale_dtype\":\"torch.uint8\"}",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"group\",\"group_size\":128,\"dynamic\":true}",
     "mxfp4-pack-quantized", 0, 0, "w4a8_mxfp4"},
    /* dense format: weights were stored decompressed */
    {"{\"num_bits\":4,\"group_size\":128}", "null", "dense", 0, 0, "unquantized"},
    /* Nothing takes these. */
    {"{\"num_bits\":4}", "null", "pack-quantized", 0, 0, NULL},
    {"{\"num_bits\":8,\"type\":\"float\",\"group_size\":32,\"scale_dtype\":\"torch.uint8\"}",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"token\",\"dynamic\":true}", "mxfp8-quantized", 0, 0,
     NULL},
    {"{\"num_bits\":4,\"group_size\":128,\"symmetric\":false}",
     "{\"num_bits\":8,\"strategy\":\"token\",\"dynamic\":true}", "pack-quantized", 0, 0, NULL},
    /* MX weights with inputs none of their schemes quantize so */
    {"{\"num_bits\":6,\"type\":\"float\",\"group_size\":32,\"scale_dtype\":\"torch.uint8\"}",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"group\",\"group_size\":128,\"dynamic\":true}",
     "mxfp6-pack-quantized", 0, 0, NULL},
    {"{\"num_bits\":4,\"type\":\"float\",\"group_size\":32,\"scale_dtype\":\"torch.uint8\"}",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"group\",\"group_size\":64,\"dynamic\":true}",
     "mxfp4-pack-quantized", 0, 0, NULL},
    {"{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"token\",\"dynamic\":true}", "mxfp4-pack-quantized", 0, 0,
     NULL},
};

static moeq_config *one_group(const select_case *c) {
    char json[4096];
    snprintf(json, sizeof json,
             "{\"quant_method\":\"compressed-tensors\",\"format\":\"mixed-precision\","
             "\"config_groups\":{\"experts\":{\"targets\":[\"re:.*experts.*\"],\"format\":\"%s\","
             "\"weights\":%s,\"input_activations\":%s}}}",
             c->format, c->weights, c->inputs);
    moeq_config *cfg = NULL;
    moeq_error err;
    moeq_status st = moeq_config_parse(json, strlen(json), NULL, &cfg, &err);
    ck_assert_msg(st == MOEQ_OK, "%s: %s", json, err.message);
    return cfg;
}

START_TEST(test_select_cases) {
    const select_case *c = &k_cases[_i];
    moeq_config *cfg = one_group(c);
    moeq_resolution r;
    moeq_error err;
    ck_assert_ok(moeq_resolve_moe(cfg, "model.layers.7.mlp.experts", 4, NULL, NULL, &r, &err), &err);
    moeq_select_options so = {c->platform, c->prefer_mxint4};
    moeq_selection sel;
    moeq_status st = moeq_select(&r, "model.layers.7.mlp.experts", &so, &sel, &err);
    if (c->scheme) {
        ck_assert_msg(st == MOEQ_OK, "case %d: %s", _i, err.message);
        ck_assert_msg(strcmp(moeq_scheme_name(sel.scheme), c->scheme) == 0, "case %d: got %s want %s (%s)",
                      _i, moeq_scheme_name(sel.scheme), c->scheme, sel.reason);
        ck_assert_msg(strncmp(sel.reason, c->scheme, strlen(c->scheme)) == 0, "reason: %s", sel.reason);
    } else {
        ck_assert_msg(st == MOEQ_STATUS_UNSUPPORTED, "case %d: got %s (%s)", _i, moeq_status_name(st),
                      st == MOEQ_OK ? moeq_scheme_name(sel.scheme) : err.message);
        ck_assert_int_eq(sel.scheme, -1);
    }
    moeq_config_destroy(cfg);
}
END_TEST

/* Every scheme's create_weights runs for the args it selects: no scheme
 * lacks a working slot (the MoE suites run load, finalize and apply). */
START_TEST(test_every_case_creates_a_layer) {
    const select_case *c = &k_cases[_i];
    if (!c->scheme) return;
    moeq_config *cfg = one_group(c);
    moeq_resolution r;
    moeq_error err;
    ck_assert_ok(moeq_resolve_moe(cfg, "m.experts", 4, NULL, NULL, &r, &err), &err);
    moeq_select_options so = {c->platform, c->prefer_mxint4};
    moeq_selection sel;
    ck_assert_ok(moeq_select(&r, "m.experts", &so, &sel, &err), &err);
    moeq_moe_config mc;
    memset(&mc, 0, sizeof mc);
    mc.scheme = sel.scheme;
    mc.weights = r.weights;
    mc.input_activations = r.input_activations;
    mc.format = r.format;
    mc.num_experts = 4;
    mc.hidden_size = 256;
    mc.intermediate_size = 128;
    moeq_moe *layer = NULL;
    ck_assert_msg(moeq_moe_create(&mc, &layer, &err) == MOEQ_OK, "case %d (%s): %s", _i, c->scheme,
                  err.message);
    ck_assert_int_eq(moeq_moe_scheme(layer), sel.scheme);
    ck_assert_uint_gt(moeq_moe_param_count(layer), 1);
    moeq_param p;
    ck_assert_ok(moeq_moe_param(layer, 0, &p), &err);
    ck_assert_int_eq(p.shape[0], 4);
    moeq_moe_destroy(layer);
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_every_scheme_selected_somewhere) {
    for (int32_t id = 0; id < MOEQ_SCHEME_COUNT; id++) {
        int seen = 0;
        for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
            if (k_cases[i].scheme && strcmp(k_cases[i].scheme, moeq_scheme_name(id)) == 0) seen = 1;
        }
        ck_assert_msg(seen, "no selection case selects %s", moeq_scheme_name(id));
    }
}
END_TEST

/* ---- every preset of compressed-tensors 0.20.1 ------------------------------------- */

/* PRESET_SCHEMES of compressed-tensors 0.20.1 (quantization/quant_scheme.py), in
 * its order, each used as a config group by name ("config_groups": {"W4A16":
 * [...]}): the MoE scheme moeq selects on the CPU and on platform npu, or for
 * presets no scheme runs the exact first line of the rejection and the
 * reason of the scheme nearest to taking it. */
typedef struct preset_case {
    const char *preset;
    const char *cpu, *npu; /* scheme names, NULL: rejected */
    const char *head;      /* rejected: the message's first line */
    const char *reason;    /* rejected: one scheme's line of it */
} preset_case;

#define REJECT_INT(p, b, a)                                                                        \
    NULL, NULL,                                                                                    \
        "layer model.layers.1.mlp.experts (group " p ", format int-quantized): no MoE scheme "     \
        "accepts weights int" #b " group(128) sym static with input activations int" #a           \
        " token sym dynamic:"

static const preset_case k_presets[] = {
    {"UNQUANTIZED", "unquantized", "unquantized", NULL, NULL},
    {"W4A16_ASYM", "wna16", "wna16", NULL, NULL},
    {"W8A8", "w8a8_int8", "npu_w8a8_int8", NULL, NULL},
    {"INT8", "w8a8_int8", "npu_w8a8_int8", NULL, NULL},
    {"W4AFP8", "w4a8_fp8", "w4a8_fp8", NULL, NULL},
    {"FP8", "w8a8_fp8", "w8a8_fp8", NULL, NULL},
    {"FP8_DYNAMIC", "w8a8_fp8", "w8a8_fp8", NULL, NULL},
    {"FP8_BLOCK", "w8a8_fp8", "w8a8_fp8", NULL, NULL},
    {"NVFP4A16", "w4a16_nvfp4", "w4a16_nvfp4", NULL, NULL},
    {"NVFP4", "w4a4_nvfp4", "w4a4_nvfp4", NULL, NULL},
    {"MXFP4A16", "w4a16_mxfp4", "w4a16_mxfp4", NULL, NULL},
    {"MXFP4", "w4a16_mxfp4", "w4a16_mxfp4", NULL, NULL},
    {"MXFP4XFP8", "w4a8_mxfp4", "w4a8_mxfp4", NULL, NULL},
    {"MXFP6A16", "w6a16_mxfp6", "w6a16_mxfp6", NULL, NULL},
    {"MXFP6A8", "w6a8_mxfp6", "w6a8_mxfp6", NULL, NULL},
    {"MXFP8A16", "w8a16_mxfp8", "w8a16_mxfp8", NULL, NULL},
    {"MXFP8", "w8a8_mxfp8", "w8a8_mxfp8", NULL, NULL},
    {"W2A4", REJECT_INT("W2A4", 2, 4), "wna16: input activations are quantized (int4 token sym dynamic)"},
    {"W2A8", REJECT_INT("W2A8", 2, 8), "w4a8_int8: weights are int2; needs int4"},
    {"W2A16", "wna16", "wna16", NULL, NULL},
    {"W3A4", REJECT_INT("W3A4", 3, 4), "wna16: input activations are quantized (int4 token sym dynamic)"},
    {"W3A8", REJECT_INT("W3A8", 3, 8), "w4a8_int8: weights are int3; needs int4"},
    {"W3A16", "wna16", "wna16", NULL, NULL},
    {"W4A4", REJECT_INT("W4A4", 4, 4), "w4a8_int8: input activations are int4; needs int8"},
    {"W4A8", "w4a8_int8", "npu_w4a8_int8", NULL, NULL},
    {"W4A16", "wna16", "npu_w4a16_int4", NULL, NULL},
    {"W5A8", REJECT_INT("W5A8", 5, 8), "w4a8_int8: weights are int5; needs int4"},
    {"W5A16", "wna16", "wna16", NULL, NULL},
    {"W6A8", REJECT_INT("W6A8", 6, 8), "w8a8_int8: weights are int6; needs int8"},
    {"W6A16", "wna16", "wna16", NULL, NULL},
    {"W7A8", REJECT_INT("W7A8", 7, 8), "w8a8_int8: weights are int7; needs int8"},
    {"W7A16", "wna16", "wna16", NULL, NULL},
    {"W8A16", "wna16", "wna16", NULL, NULL},
};

START_TEST(test_ct_0201_presets) {
    const preset_case *c = &k_presets[_i];
    char json[256];
    snprintf(json, sizeof json,
             "{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"%s\":"
             "[\"re:.*experts.*\"]}}",
             c->preset);
    moeq_config *cfg = NULL;
    moeq_error err;
    ck_assert_msg(moeq_config_parse(json, strlen(json), NULL, &cfg, &err) == MOEQ_OK, "%s: %s",
                  c->preset, err.message);
    for (int32_t platform = 0; platform < 2; platform++) {
        const char *want = platform ? c->npu : c->cpu;
        moeq_resolution r;
        ck_assert_ok(moeq_resolve_moe(cfg, "model.layers.1.mlp.experts", 4, NULL, NULL, &r, &err),
                     &err);
        moeq_select_options so = {platform, 0};
        moeq_selection sel;
        moeq_status st = moeq_select(&r, "model.layers.1.mlp.experts", &so, &sel, &err);
        if (want) {
            ck_assert_msg(st == MOEQ_OK, "%s: %s", c->preset, err.message);
            ck_assert_msg(strcmp(moeq_scheme_name(sel.scheme), want) == 0, "%s (platform %d): %s",
                          c->preset, (int)platform, moeq_scheme_name(sel.scheme));
            continue;
        }
        ck_assert_msg(st == MOEQ_STATUS_UNSUPPORTED, "%s: %s", c->preset, moeq_status_name(st));
        const char *nl = strchr(err.message, '\n');
        ck_assert_ptr_nonnull(nl);
        ck_assert_msg((size_t)(nl - err.message) == strlen(c->head) &&
                          strncmp(err.message, c->head, strlen(c->head)) == 0,
                      "%s: %s", c->preset, err.message);
        char line[160];
        snprintf(line, sizeof line, "\n  %s\n", c->reason);
        ck_assert_msg(strstr(err.message, line) != NULL, "%s: no '%s' in\n%s", c->preset, c->reason,
                      err.message);
    }
    moeq_config_destroy(cfg);
}
END_TEST

/* npu_w4a8_int8 on group weights declares SGLang's grouped NPU parameters
 * (sglang-moe-dispatch.md 13.7): *_weight_scale_second from the checkpoint's
 * weight_scale, [E, 2I, H/g] / [E, H, I/g] F32, offsets and the channel scale derived. */
START_TEST(test_npu_w4a8_grouped_params) {
    select_case c = {"{\"num_bits\":4,\"group_size\":128}",
                     "{\"num_bits\":8,\"strategy\":\"token\",\"dynamic\":true}", "pack-quantized",
                     1, 0, "npu_w4a8_int8"};
    moeq_config *cfg = one_group(&c);
    moeq_resolution r;
    moeq_error err;
    ck_assert_ok(moeq_resolve_moe(cfg, "m.experts", 4, NULL, NULL, &r, &err), &err);
    moeq_select_options so = {MOEQ_PLATFORM_NPU, 0};
    moeq_selection sel;
    ck_assert_ok(moeq_select(&r, "m.experts", &so, &sel, &err), &err);
    ck_assert_int_eq(sel.scheme, MOEQ_SCHEME_NPU_W4A8_INT8);
    moeq_moe_config mc;
    memset(&mc, 0, sizeof mc);
    mc.scheme = sel.scheme;
    mc.weights = r.weights;
    mc.input_activations = r.input_activations;
    mc.format = r.format;
    mc.num_experts = 4;
    mc.hidden_size = 512;
    mc.intermediate_size = 256;
    moeq_moe *layer = NULL;
    ck_assert_ok(moeq_moe_create(&mc, &layer, &err), &err);
    static const struct {
        const char *name;
        int64_t rows, cols;
        int32_t layout;
        const char *suffix;
    } want[] = {
        {"w13_weight_scale_second", 512, 4, MOEQ_LAYOUT_SHARDED, "weight_scale"},
        {"w2_weight_scale_second", 512, 2, MOEQ_LAYOUT_SHARDED, "weight_scale"},
        {"w13_weight_offset_second", 512, 4, MOEQ_LAYOUT_DERIVED, ""},
        {"w2_weight_offset_second", 512, 2, MOEQ_LAYOUT_DERIVED, ""},
        {"w13_weight_scale", 512, 1, MOEQ_LAYOUT_DERIVED, ""},
        {"w2_weight_scale", 512, 1, MOEQ_LAYOUT_DERIVED, ""},
        {"w13_weight_offset", 512, 1, MOEQ_LAYOUT_DERIVED, ""},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        bool found = false;
        for (uint32_t k = 0; k < moeq_moe_param_count(layer); k++) {
            moeq_param p;
            ck_assert_ok(moeq_moe_param(layer, k, &p), &err);
            if (strcmp(p.name, want[i].name) != 0) continue;
            found = true;
            ck_assert_int_eq(p.dtype, MOEQ_DTYPE_F32);
            ck_assert_int_eq(p.ndim, 3);
            ck_assert_int_eq(p.shape[0], 4);
            ck_assert_int_eq(p.shape[1], want[i].rows);
            ck_assert_int_eq(p.shape[2], want[i].cols);
            ck_assert_int_eq(p.layout, want[i].layout);
            ck_assert_str_eq(p.ckpt_suffix ? p.ckpt_suffix : "", want[i].suffix);
        }
        ck_assert_msg(found, "no parameter %s", want[i].name);
    }
    moeq_moe_destroy(layer);
    /* sizes the grouped shapes cannot divide */
    mc.intermediate_size = 192;
    ck_assert_int_eq(moeq_moe_create(&mc, &layer, &err), MOEQ_STATUS_SHAPE);
    ck_assert_msg(strstr(err.message, "multiples of the weight group_size 128"), "%s", err.message);
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_rejection_message) {
    select_case c = {"{\"num_bits\":4}", "null", "pack-quantized", 0, 0, NULL};
    moeq_config *cfg = one_group(&c);
    moeq_resolution r;
    moeq_error err;
    ck_assert_ok(moeq_resolve_moe(cfg, "model.layers.7.mlp.experts", 4, NULL, NULL, &r, &err), &err);
    moeq_selection sel;
    moeq_status st = moeq_select(&r, "model.layers.7.mlp.experts", NULL, &sel, &err);
    ck_assert_status(st, MOEQ_STATUS_UNSUPPORTED, &err);
    /* Names the layer, the group, the args, and every scheme's reason. */
    ck_assert_ptr_nonnull(strstr(err.message, "layer model.layers.7.mlp.experts (group experts"));
    ck_assert_ptr_nonnull(strstr(err.message, "int4 tensor"));
    ck_assert_ptr_nonnull(strstr(err.message, "wna16: weight strategy is tensor; needs channel/group"));
    ck_assert_ptr_nonnull(strstr(err.message, "w8a8_int8: weights are int4; needs int8"));
    ck_assert_ptr_nonnull(strstr(err.message, "npu_w4a16_int4: platform is not npu"));
    for (int32_t id = 0; id < MOEQ_SCHEME_COUNT; id++) {
        char key[64];
        snprintf(key, sizeof key, "\n  %s: ", moeq_scheme_name(id));
        ck_assert_msg(strstr(err.message, key), "message lacks %s", key);
    }
    /* output activations are refused, not ignored */
    select_case o = {"{\"num_bits\":4,\"group_size\":32}", "null", "pack-quantized", 0, 0, NULL};
    moeq_config_destroy(cfg);
    cfg = one_group(&o);
    ck_assert_ok(moeq_resolve_moe(cfg, "m.experts", 1, NULL, NULL, &r, &err), &err);
    moeq_quant_args out_args = *r.weights;
    r.output_activations = &out_args;
    st = moeq_select(&r, "m.experts", NULL, &sel, &err);
    ck_assert_status(st, MOEQ_STATUS_UNSUPPORTED, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "output_activations"));
    ck_assert_status(moeq_select(NULL, "x", NULL, &sel, &err), MOEQ_STATUS_INVALID_ARG, &err);
    moeq_select_options bad = {9, 0};
    ck_assert_status(moeq_select(&r, "x", &bad, &sel, &err), MOEQ_STATUS_INVALID_ARG, &err);
    moeq_config_destroy(cfg);
}
END_TEST

/* Predicates must not overlap: over a grid of args and formats, at most one
 * scheme accepts with default options; the options only add their preferred
 * scheme in front of the one CPU scheme. */
START_TEST(test_predicates_disjoint) {
    static const int32_t bits[] = {4, 6, 8};
    enum { NB = 3 };
    static const struct {
        int32_t strategy, group;
    } wstrat[] = {{MOEQ_STRATEGY_TENSOR, 0}, {MOEQ_STRATEGY_CHANNEL, -1}, {MOEQ_STRATEGY_GROUP, 16},
                  {MOEQ_STRATEGY_GROUP, 32}, {MOEQ_STRATEGY_GROUP, 128}, {MOEQ_STRATEGY_TENSOR_GROUP, 16},
                  {MOEQ_STRATEGY_BLOCK, 0}};
    static const struct {
        int32_t strategy, group, dynamic;
    } astrat[] = {{MOEQ_STRATEGY_TOKEN, 0, 1}, {MOEQ_STRATEGY_TENSOR, 0, 1}, {MOEQ_STRATEGY_TENSOR, 0, 0},
                  {MOEQ_STRATEGY_GROUP, 32, 1}, {MOEQ_STRATEGY_GROUP, 128, 1},
                  {MOEQ_STRATEGY_TENSOR_GROUP, 16, 2}};
    /* scale_dtype: unset, or uint8 (E8M0, the MX presets') */
    static const int32_t sdt[] = {MOEQ_DTYPE_INVALID, MOEQ_DTYPE_U8};
    long combos = 0;
    int accepted[MOEQ_SCHEME_COUNT] = {0};
    for (int wi = -1; wi < 2 * NB * 7 * 2 * 2; wi++) {
        moeq_quant_args w = {0};
        if (wi >= 0) {
            w.type = wi & 1;
            w.num_bits = bits[(wi >> 1) % NB];
            w.strategy = wstrat[(wi / (2 * NB)) % 7].strategy;
            w.group_size = wstrat[(wi / (2 * NB)) % 7].group;
            w.symmetric = (wi / (2 * NB * 7)) % 2 == 0;
            w.scale_dtype = sdt[wi / (2 * NB * 7 * 2)];
            if (w.strategy == MOEQ_STRATEGY_BLOCK) w.block_rows = w.block_cols = 128;
            if (w.type == MOEQ_QTYPE_INT && w.scale_dtype == MOEQ_DTYPE_U8) continue; /* float only */
        }
        for (int ai = -1; ai < 2 * NB * 6 * 2; ai++) {
            moeq_quant_args a = {0};
            if (ai >= 0) {
                a.type = ai & 1;
                a.num_bits = bits[(ai >> 1) % NB];
                a.strategy = astrat[(ai / (2 * NB)) % 6].strategy;
                a.group_size = astrat[(ai / (2 * NB)) % 6].group;
                a.dynamic = astrat[(ai / (2 * NB)) % 6].dynamic;
                a.scale_dtype = sdt[ai / (2 * NB * 6)];
                a.symmetric = 1;
                if (a.type == MOEQ_QTYPE_INT && a.scale_dtype == MOEQ_DTYPE_U8) continue;
            }
            for (int32_t fmt = 0; fmt < MOEQ_FORMAT_COUNT_; fmt++) {
                for (int opt = 0; opt < 3; opt++) {
                    moeq_select_options so = {opt == 1 ? MOEQ_PLATFORM_NPU : MOEQ_PLATFORM_CPU, opt == 2};
                    moeq__select_in in = {wi >= 0 ? &w : NULL, ai >= 0 ? &a : NULL, fmt, &so};
                    int cpu = 0, preferred = 0;
                    char names[512] = "";
                    for (int32_t id = 0; id < MOEQ_SCHEME_COUNT; id++) {
                        const moeq__scheme *s = moeq__scheme_get(id);
                        char why[256];
                        if (!s->accepts(&in, why, sizeof why)) {
                            ck_assert_msg(why[0] != '\0', "%s rejected without a reason", s->name);
                            continue;
                        }
                        accepted[id]++;
                        strcat(names, s->name);
                        strcat(names, " ");
                        bool pref = strncmp(s->name, "npu_", 4) == 0 || id == MOEQ_SCHEME_MXINT4;
                        if (pref) {
                            preferred++;
                        } else {
                            cpu++;
                        }
                    }
                    combos++;
                    ck_assert_msg(cpu <= 1 && preferred <= 1,
                                  "overlapping predicates (w=%d a=%d fmt=%d opt=%d): %s", wi, ai, fmt,
                                  opt, names);
                    if (opt == 0) ck_assert_msg(preferred == 0, "preference without option: %s", names);
                }
            }
        }
    }
    /* the enumeration reaches every scheme, so each one's predicate was tested against the rest */
    for (int32_t id = 0; id < MOEQ_SCHEME_COUNT; id++) {
        ck_assert_msg(accepted[id] > 0, "no combination selects %s", moeq_scheme_name(id));
    }
    printf("checked %ld (weights, inputs, format, options) combinations\n", combos);
}
END_TEST

static Suite *registry_suite(void) {
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_every_slot_filled);
    tcase_add_loop_test(tc, test_select_cases, 0, (int)(sizeof k_cases / sizeof k_cases[0]));
    tcase_add_test(tc, test_every_scheme_selected_somewhere);
    tcase_add_loop_test(tc, test_every_case_creates_a_layer, 0, (int)(sizeof k_cases / sizeof k_cases[0]));
    tcase_add_test(tc, test_rejection_message);
    tcase_add_test(tc, test_npu_w4a8_grouped_params);
    tcase_add_loop_test(tc, test_ct_0201_presets, 0, (int)(sizeof k_presets / sizeof k_presets[0]));
    tcase_add_test(tc, test_predicates_disjoint);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(registry_suite)

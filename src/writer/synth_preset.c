/*
 * synth_preset.c - named layouts for moeq_synth_write: one per MoE scheme
 * family moeq runs, plus "glm-mini" (GLM-5.3's mixed int4/int8 layout with
 * regex-only targets, scaled down) and a mixed-precision NVFP4 + FP8 model.
 *
 * Args are written as compressed-tensors' presets expand them
 * (quantization/quant_scheme.py, 0.18.0); the models are small (256 hidden,
 * 8 experts of 128, two or three layers) so that tests can write every one.
 */
#include "common/internal.h"

#include <stdio.h>
#include <string.h>

#define OBS_W "memoryless_minmax" /* CT's default observer for static args */

/* ---- weights ---------------------------------------------------------------------- */

#define INT_W(bits, gs, strat)                                                                     \
    {                                                                                              \
        .num_bits = (bits), .type = MOEQ_QTYPE_INT, .symmetric = 1, .group_size = (gs),            \
        .strategy = (strat), .strategy_given = 1, .observer = OBS_W                                \
    }

static const moeq_quant_args w_int4_g128 = INT_W(4, 128, MOEQ_STRATEGY_GROUP);
static const moeq_quant_args w_int4_g64 = INT_W(4, 64, MOEQ_STRATEGY_GROUP);
static const moeq_quant_args w_int4_g32 = INT_W(4, 32, MOEQ_STRATEGY_GROUP);
static const moeq_quant_args w_int8_g64 = INT_W(8, 64, MOEQ_STRATEGY_GROUP);
static const moeq_quant_args w_int8_channel = INT_W(8, 0, MOEQ_STRATEGY_CHANNEL);
static const moeq_quant_args w_int4_g128_asym_actorder = {.num_bits = 4,
                                                          .type = MOEQ_QTYPE_INT,
                                                          .symmetric = 0,
                                                          .group_size = 128,
                                                          .strategy = MOEQ_STRATEGY_GROUP,
                                                          .strategy_given = 1,
                                                          .actorder = MOEQ_ACTORDER_GROUP,
                                                          .zp_dtype = MOEQ_DTYPE_I8,
                                                          .observer = OBS_W};

#define FP8_W(strat)                                                                               \
    {                                                                                              \
        .num_bits = 8, .type = MOEQ_QTYPE_FLOAT, .symmetric = 1, .strategy = (strat),              \
        .strategy_given = 1, .observer = OBS_W                                                     \
    }

static const moeq_quant_args w_fp8_tensor = FP8_W(MOEQ_STRATEGY_TENSOR);
static const moeq_quant_args w_fp8_channel = FP8_W(MOEQ_STRATEGY_CHANNEL);
static const moeq_quant_args w_fp8_block = {.num_bits = 8,
                                            .type = MOEQ_QTYPE_FLOAT,
                                            .symmetric = 1,
                                            .strategy = MOEQ_STRATEGY_BLOCK,
                                            .strategy_given = 1,
                                            .block_rows = 128,
                                            .block_cols = 128,
                                            .observer = OBS_W};
static const moeq_quant_args w_nvfp4 = {.num_bits = 4,
                                        .type = MOEQ_QTYPE_FLOAT,
                                        .symmetric = 1,
                                        .group_size = 16,
                                        .strategy = MOEQ_STRATEGY_TENSOR_GROUP,
                                        .strategy_given = 1,
                                        .scale_dtype = MOEQ_DTYPE_F8_E4M3,
                                        .observer = OBS_W};
static const moeq_quant_args w_mxfp4 = {.num_bits = 4,
                                        .type = MOEQ_QTYPE_FLOAT,
                                        .symmetric = 1,
                                        .group_size = 32,
                                        .strategy = MOEQ_STRATEGY_GROUP,
                                        .strategy_given = 1,
                                        .scale_dtype = MOEQ_DTYPE_U8,
                                        .observer = OBS_W};
static const moeq_quant_args w_mxfp6 = {.num_bits = 6,
                                        .type = MOEQ_QTYPE_FLOAT,
                                        .symmetric = 1,
                                        .group_size = 32,
                                        .strategy = MOEQ_STRATEGY_GROUP,
                                        .strategy_given = 1,
                                        .scale_dtype = MOEQ_DTYPE_U8,
                                        .observer = OBS_W};
static const moeq_quant_args w_mxfp8 = {.num_bits = 8,
                                        .type = MOEQ_QTYPE_FLOAT,
                                        .symmetric = 1,
                                        .group_size = 32,
                                        .strategy = MOEQ_STRATEGY_GROUP,
                                        .strategy_given = 1,
                                        .scale_dtype = MOEQ_DTYPE_U8,
                                        .observer = OBS_W};

/* ---- input activations ------------------------------------------------------------- */

static const moeq_quant_args a_int8_token = {.num_bits = 8,
                                             .type = MOEQ_QTYPE_INT,
                                             .symmetric = 1,
                                             .strategy = MOEQ_STRATEGY_TOKEN,
                                             .strategy_given = 1,
                                             .dynamic = MOEQ_DYNAMIC_TRUE};
static const moeq_quant_args a_fp8_token = {.num_bits = 8,
                                            .type = MOEQ_QTYPE_FLOAT,
                                            .symmetric = 1,
                                            .strategy = MOEQ_STRATEGY_TOKEN,
                                            .strategy_given = 1,
                                            .dynamic = MOEQ_DYNAMIC_TRUE};
static const moeq_quant_args a_fp8_group128 = {.num_bits = 8,
                                               .type = MOEQ_QTYPE_FLOAT,
                                               .symmetric = 1,
                                               .group_size = 128,
                                               .strategy = MOEQ_STRATEGY_GROUP,
                                               .strategy_given = 1,
                                               .dynamic = MOEQ_DYNAMIC_TRUE};
static const moeq_quant_args a_mxfp8 = {.num_bits = 8,
                                        .type = MOEQ_QTYPE_FLOAT,
                                        .symmetric = 1,
                                        .group_size = 32,
                                        .strategy = MOEQ_STRATEGY_GROUP,
                                        .strategy_given = 1,
                                        .dynamic = MOEQ_DYNAMIC_TRUE,
                                        .scale_dtype = MOEQ_DTYPE_U8};
static const moeq_quant_args a_fp8_tensor_static = {.num_bits = 8,
                                                    .type = MOEQ_QTYPE_FLOAT,
                                                    .symmetric = 1,
                                                    .strategy = MOEQ_STRATEGY_TENSOR,
                                                    .strategy_given = 1,
                                                    .observer = "static_minmax"};
static const moeq_quant_args a_int8_tensor_static = {.num_bits = 8,
                                                     .type = MOEQ_QTYPE_INT,
                                                     .symmetric = 1,
                                                     .strategy = MOEQ_STRATEGY_TENSOR,
                                                     .strategy_given = 1,
                                                     .observer = "static_minmax"};
static const moeq_quant_args a_nvfp4_local = {.num_bits = 4,
                                              .type = MOEQ_QTYPE_FLOAT,
                                              .symmetric = 1,
                                              .group_size = 16,
                                              .strategy = MOEQ_STRATEGY_TENSOR_GROUP,
                                              .strategy_given = 1,
                                              .dynamic = MOEQ_DYNAMIC_LOCAL,
                                              .scale_dtype = MOEQ_DTYPE_F8_E4M3,
                                              .observer = "static_minmax"};

/* ---- targets and ignore lists ------------------------------------------------------- */

static const char *const t_linear[] = {"Linear"};
static const char *const i_common[] = {"lm_head", "re:.*mlp\\.gate$"};
static const char *const i_experts[] = {"lm_head", "re:.*mlp\\.gate$", "re:.*mlp\\.experts\\..*"};

/* GLM-5.3-Int4-Int8Mix-RTN-g64 (tests/data/configs), scaled to 4 layers with
 * the first one dense: int8 for attention and shared experts, int4 for the
 * routed experts, regex targets only. */
static const char *const t_glm_int8[] = {
    "re:model\\.layers\\.[1-3]\\.(?:self_attn\\.(?:q_proj|k_proj|v_proj|o_proj)|"
    "mlp\\.shared_experts\\.(?:gate_proj|up_proj|down_proj))$"};
static const char *const t_glm_int4[] = {
    "re:model\\.layers\\.[1-3]\\.mlp\\.experts\\.\\d+\\.(?:gate_proj|up_proj|down_proj)$"};
static const char *const i_glm[] = {"lm_head",
                                    "re:.*embed_tokens.*",
                                    "re:model\\.layers\\.0\\..*",
                                    "re:.*self_attn\\.indexer\\..*",
                                    "re:.*norm.*",
                                    "re:.*mlp\\.gate$"};

static const char *const t_mixed_fp8[] = {"re:.*self_attn\\.[qkvo]_proj$",
                                          "re:.*mlp\\.shared_experts\\..*_proj$",
                                          "re:model\\.layers\\.0\\.mlp\\.(?:gate|up|down)_proj$"};
static const char *const t_mixed_nvfp4[] = {"re:.*mlp\\.experts\\.\\d+\\.(?:gate|up|down)_proj$"};

#define N(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))
#define GROUP(w, in, targets, fmt)                                                                 \
    { NULL, N(targets), targets, (w), (in), (fmt) }

static const moeq_synth_group g_wna16_int4[] = {GROUP(&w_int4_g128, NULL, t_linear, 0)};
static const moeq_synth_group g_wna16_int8[] = {GROUP(&w_int8_channel, NULL, t_linear, 0)};
static const moeq_synth_group g_w4a16_actorder[] = {
    GROUP(&w_int4_g128_asym_actorder, NULL, t_linear, 0)};
static const moeq_synth_group g_fp8_dynamic[] = {GROUP(&w_fp8_channel, &a_fp8_token, t_linear, 0)};
static const moeq_synth_group g_fp8_block[] = {GROUP(&w_fp8_block, &a_fp8_group128, t_linear, 0)};
static const moeq_synth_group g_fp8_static[] = {
    GROUP(&w_fp8_tensor, &a_fp8_tensor_static, t_linear, 0)};
static const moeq_synth_group g_w8a8_int8[] = {GROUP(&w_int8_channel, &a_int8_token, t_linear, 0)};
static const moeq_synth_group g_w8a8_int8_static[] = {
    GROUP(&w_int8_channel, &a_int8_tensor_static, t_linear, 0)};
static const moeq_synth_group g_w4a8_int8[] = {GROUP(&w_int4_g128, &a_int8_token, t_linear, 0)};
static const moeq_synth_group g_w4a8_fp8[] = {GROUP(&w_int4_g128, &a_fp8_token, t_linear, 0)};
static const moeq_synth_group g_nvfp4_a16[] = {GROUP(&w_nvfp4, NULL, t_linear, 0)};
static const moeq_synth_group g_nvfp4_a4[] = {GROUP(&w_nvfp4, &a_nvfp4_local, t_linear, 0)};
static const moeq_synth_group g_mxfp4[] = {GROUP(&w_mxfp4, NULL, t_linear, 0)};
static const moeq_synth_group g_mxfp8[] = {GROUP(&w_mxfp8, NULL, t_linear, 0)};
static const moeq_synth_group g_mxfp8_a8[] = {GROUP(&w_mxfp8, &a_mxfp8, t_linear, 0)};
static const moeq_synth_group g_mxfp6[] = {GROUP(&w_mxfp6, NULL, t_linear, 0)};
static const moeq_synth_group g_mxfp6_a8[] = {GROUP(&w_mxfp6, &a_mxfp8, t_linear, 0)};
static const moeq_synth_group g_mxfp4_xfp8[] = {GROUP(&w_mxfp4, &a_fp8_group128, t_linear, 0)};
static const moeq_synth_group g_mxint4[] = {GROUP(&w_int4_g32, NULL, t_linear, 0)};
static const moeq_synth_group g_glm[] = {
    GROUP(&w_int8_g64, NULL, t_glm_int8, MOEQ_FORMAT_PACK_QUANTIZED),
    GROUP(&w_int4_g64, NULL, t_glm_int4, MOEQ_FORMAT_PACK_QUANTIZED)};
static const moeq_synth_group g_mixed[] = {GROUP(&w_fp8_channel, &a_fp8_token, t_mixed_fp8, 0),
                                           GROUP(&w_nvfp4, NULL, t_mixed_nvfp4, 0)};

/* ---- models -------------------------------------------------------------------------- */

/* DeepSeek-V3 style: a dense first layer, shared expert, sigmoid scoring with
 * a correction bias and grouped top-k. */
#define DEEPSEEK(groups_, ignore_)                                                                 \
    .model_type = "deepseek_v3", .num_layers = 3, .first_dense_layers = 1, .num_experts = 8,       \
    .top_k = 2, .hidden_size = 256, .moe_intermediate_size = 128, .intermediate_size = 512,        \
    .n_shared_experts = 1, .scoring = MOEQ_SCORING_SIGMOID, .norm_topk_prob = 1, .n_group = 2,     \
    .topk_group = 1, .routed_scaling_factor = 2.5f, .correction_bias = 1, .vocab_size = 512,       \
    .seed = 20250601, .n_groups = N(groups_), .groups = groups_, .n_ignore = N(ignore_),           \
    .ignore = ignore_

/* Qwen3-MoE style: every layer MoE, softmax scoring, no shared expert. */
#define QWEN(groups_, ignore_)                                                                     \
    .model_type = "qwen3_moe", .num_layers = 2, .num_experts = 8, .top_k = 2, .hidden_size = 256,  \
    .moe_intermediate_size = 128, .scoring = MOEQ_SCORING_SOFTMAX, .norm_topk_prob = 1,            \
    .vocab_size = 512, .seed = 20250602, .n_groups = N(groups_), .groups = groups_,                \
    .n_ignore = N(ignore_), .ignore = ignore_

typedef struct preset {
    const char *name;
    const char *summary;
    moeq_synth_layout layout;
} preset;

static const preset k_presets[] = {
    {"glm-mini",
     "GLM-5.3-like mixed pack-quantized: int8 g64 attention and shared experts, int4 "
     "g64 routed experts, regex-only targets, dense layer 0 ignored",
     {.model_type = "glm4_moe",
      .num_layers = 4,
      .first_dense_layers = 1,
      .num_experts = 8,
      .top_k = 2,
      .hidden_size = 256,
      .moe_intermediate_size = 128,
      .intermediate_size = 512,
      .n_shared_experts = 1,
      .scoring = MOEQ_SCORING_SIGMOID,
      .norm_topk_prob = 1,
      .routed_scaling_factor = 2.5f,
      .correction_bias = 1,
      .num_attention_heads = 4,
      .num_key_value_heads = 2,
      .vocab_size = 512,
      .seed = 20250603,
      .n_groups = N(g_glm),
      .groups = g_glm,
      .n_ignore = N(i_glm),
      .ignore = i_glm}},
    {"wna16-int4-g128",
     "W4A16: int4 group 128 symmetric, pack-quantized",
     {QWEN(g_wna16_int4, i_common)}},
    {"wna16-int8-channel",
     "W8A16: int8 per-channel symmetric, pack-quantized, F16 model",
     {QWEN(g_wna16_int8, i_common), .dtype = MOEQ_DTYPE_F16}},
    {"w4a16-asym-actorder",
     "W4A16_ASYM with actorder group: int4 g128 asymmetric, packed zero "
     "points, weight_g_idx shared by gate and up",
     {DEEPSEEK(g_w4a16_actorder, i_common)}},
    {"w8a8-fp8-channel-token",
     "FP8_DYNAMIC: FP8 per-channel weights, dynamic per-token FP8 inputs",
     {DEEPSEEK(g_fp8_dynamic, i_common)}},
    {"w8a8-fp8-block",
     "FP8_BLOCK: FP8 128x128 block weights, dynamic per-group-128 FP8 inputs",
     {DEEPSEEK(g_fp8_block, i_common)}},
    {"w8a8-fp8-static",
     "FP8: FP8 per-tensor weights and static per-tensor input_scale, with attention",
     {QWEN(g_fp8_static, i_common), .num_attention_heads = 4, .num_key_value_heads = 2}},
    {"w8a8-int8",
     "W8A8: int8 per-channel weights, dynamic per-token int8 inputs, int-quantized",
     {QWEN(g_w8a8_int8, i_common)}},
    {"w8a8-int8-static",
     "W8A8 static: int8 per-channel weights, static per-tensor int8 "
     "input_scale, F32 model",
     {QWEN(g_w8a8_int8_static, i_common), .dtype = MOEQ_DTYPE_F32}},
    {"w4a8-int8",
     "W4A8: int4 g128 weights stored as int8 (int-quantized), dynamic int8 inputs",
     {DEEPSEEK(g_w4a8_int8, i_common)}},
    {"w4a8-fp8",
     "W4AFP8: int4 g128 weights (int-quantized), dynamic per-token FP8 inputs",
     {DEEPSEEK(g_w4a8_fp8, i_common)}},
    {"nvfp4-w4a16",
     "NVFP4A16: FP4 weights, E4M3 scales per 16, global scale shared by gate/up",
     {DEEPSEEK(g_nvfp4_a16, i_common)}},
    {"nvfp4-w4a4",
     "NVFP4: FP4 weights and FP4 inputs with a static input_global_scale",
     {QWEN(g_nvfp4_a4, i_common)}},
    {"mxfp4", "MXFP4A16: FP4 weights with E8M0 scales per 32", {QWEN(g_mxfp4, i_common)}},
    {"mxfp8", "MXFP8A16: FP8 weights with E8M0 scales per 32", {QWEN(g_mxfp8, i_common)}},
    {"mxfp8-a8",
     "MXFP8: FP8 weights and dynamic MXFP8 inputs, E8M0 scales per 32",
     {QWEN(g_mxfp8_a8, i_common)}},
    {"mxfp6",
     "MXFP6A16: FP6 E2M3 weights (four in three bytes) with E8M0 scales per 32",
     {QWEN(g_mxfp6, i_common)}},
    {"mxfp6-a8",
     "MXFP6A8: FP6 E2M3 weights and dynamic MXFP8 inputs, E8M0 scales per 32",
     {QWEN(g_mxfp6_a8, i_common)}},
    {"mxfp4-xfp8",
     "MXFP4XFP8: FP4 weights with E8M0 scales per 32 and dynamic FP8 inputs per 128",
     {QWEN(g_mxfp4_xfp8, i_common)}},
    {"mxint4-g32",
     "int4 group 32 symmetric weight-only (the MxInt4 layout's input)",
     {QWEN(g_mxint4, i_common)}},
    {"mixed-nvfp4-fp8",
     "mixed-precision: FP8 dynamic attention, dense and shared MLPs (float-"
     "quantized), NVFP4 routed experts",
     {DEEPSEEK(g_mixed, i_common), .num_attention_heads = 4, .num_key_value_heads = 2}},
    {"unquantized",
     "routed experts ignored (BF16); attention, dense and shared MLPs FP8 dynamic",
     {DEEPSEEK(g_fp8_dynamic, i_experts), .num_attention_heads = 4, .num_key_value_heads = 2}},
};

#define N_PRESETS (sizeof k_presets / sizeof k_presets[0])

const char *moeq_synth_preset_name(uint32_t i) {
    return i < N_PRESETS ? k_presets[i].name : NULL;
}

const char *moeq_synth_preset_summary(uint32_t i) {
    return i < N_PRESETS ? k_presets[i].summary : NULL;
}

moeq_status moeq_synth_preset(const char *name, moeq_synth_layout *out, moeq_error *err) {
    if (!name || !out) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "moeq_synth_preset: %s is NULL",
                           !name ? "name" : "out");
    }
    for (size_t i = 0; i < N_PRESETS; i++) {
        if (strcmp(k_presets[i].name, name) == 0) {
            *out = k_presets[i].layout;
            return MOEQ_STATUS_OK;
        }
    }
    char names[1024];
    size_t len = 0;
    for (size_t i = 0; i < N_PRESETS && len < sizeof names; i++) {
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "",
                                k_presets[i].name);
    }
    return moeq__error(err, MOEQ_STATUS_NO_MATCH, "moeq_synth_preset: no preset '%s' (known: %s)",
                       name, names);
}

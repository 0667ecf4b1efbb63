/*
 * synth_custom.h - the hand-written synthetic layout check_synth and
 * synth_dump (the compressed-tensors cross-check) both write: int-quantized
 * int4 actorder experts with static asymmetric int8 inputs, FP8 static
 * shared experts plus one router by exact name, NVFP4 W4A4 attention (q/k/v
 * share a global scale), an F16 model in two shards, sigmoid grouped routing.
 */
#ifndef MOEQ_TESTS_SYNTH_CUSTOM_H
#define MOEQ_TESTS_SYNTH_CUSTOM_H

#include <string.h>

#include "moeq/moeq.h"

static const moeq_quant_args c_w_int4_act = {.num_bits = 4,
                                             .type = MOEQ_QTYPE_INT,
                                             .symmetric = 0,
                                             .group_size = 32,
                                             .strategy = MOEQ_STRATEGY_GROUP,
                                             .strategy_given = 1,
                                             .actorder = MOEQ_ACTORDER_GROUP,
                                             .zp_dtype = MOEQ_DTYPE_I8};
static const moeq_quant_args c_a_int8_asym = {.num_bits = 8,
                                              .type = MOEQ_QTYPE_INT,
                                              .symmetric = 0,
                                              .strategy = MOEQ_STRATEGY_TENSOR,
                                              .strategy_given = 1,
                                              .zp_dtype = MOEQ_DTYPE_I8};
static const moeq_quant_args c_w_fp8 = {.num_bits = 8,
                                        .type = MOEQ_QTYPE_FLOAT,
                                        .symmetric = 1,
                                        .strategy = MOEQ_STRATEGY_CHANNEL,
                                        .strategy_given = 1};
static const moeq_quant_args c_a_fp8 = {.num_bits = 8,
                                        .type = MOEQ_QTYPE_FLOAT,
                                        .symmetric = 1,
                                        .strategy = MOEQ_STRATEGY_TENSOR,
                                        .strategy_given = 1};
static const moeq_quant_args c_w_nvfp4 = {.num_bits = 4,
                                          .type = MOEQ_QTYPE_FLOAT,
                                          .symmetric = 1,
                                          .group_size = 16,
                                          .strategy = MOEQ_STRATEGY_TENSOR_GROUP,
                                          .strategy_given = 1,
                                          .scale_dtype = MOEQ_DTYPE_F8_E4M3};
static const moeq_quant_args c_a_nvfp4 = {.num_bits = 4,
                                          .type = MOEQ_QTYPE_FLOAT,
                                          .symmetric = 1,
                                          .group_size = 16,
                                          .strategy = MOEQ_STRATEGY_TENSOR_GROUP,
                                          .strategy_given = 1,
                                          .dynamic = MOEQ_DYNAMIC_LOCAL,
                                          .scale_dtype = MOEQ_DTYPE_F8_E4M3};
static const char *const c_t_experts[] = {"re:.*mlp\\.experts\\..*"};
static const char *const c_t_shared[] = {"re:.*shared_experts.*", "model.layers.0.mlp.gate"};
static const char *const c_t_attn[] = {"re:.*self_attn.*"};
static const char *const c_ignore[] = {"lm_head"};
static const moeq_synth_group c_groups[] = {
    {"experts", 1, c_t_experts, &c_w_int4_act, &c_a_int8_asym, MOEQ_FORMAT_NAIVE_QUANTIZED},
    {"shared", 2, c_t_shared, &c_w_fp8, &c_a_fp8, MOEQ_FORMAT_NONE},
    {"attention", 1, c_t_attn, &c_w_nvfp4, &c_a_nvfp4, MOEQ_FORMAT_NONE}};

static moeq_synth_layout custom_layout(void) {
    moeq_synth_layout L;
    memset(&L, 0, sizeof L);
    L.model_type = "custom_moe";
    L.num_layers = 2;
    L.num_experts = 4;
    L.top_k = 2;
    L.hidden_size = 64;
    L.moe_intermediate_size = 32;
    L.n_shared_experts = 2;
    L.scoring = MOEQ_SCORING_SIGMOID;
    L.correction_bias = 1;
    L.n_group = 2;
    L.topk_group = 2;
    L.num_attention_heads = 4;
    L.num_key_value_heads = 1;
    L.vocab_size = 100;
    L.dtype = MOEQ_DTYPE_F16;
    L.seed = 7;
    L.shards = 2;
    L.calibration_tokens = 17;
    L.weight_std = 0.05f;
    L.n_groups = 3;
    L.groups = c_groups;
    L.n_ignore = 1;
    L.ignore = c_ignore;
    return L;
}

#endif

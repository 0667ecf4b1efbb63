/*
 * family.c - model families as data: for each model_type, what its reference
 * modeling code (transformers) does with a MoE block when config.json does
 * not say, and the config keys and module names it uses.  docs/models.md
 * cites the modeling file of each row.
 *
 * moeq_model_moe_get() reads a config through its row: a key the config
 * carries always wins; a silent one takes the row's value and is listed in
 * `defaults`, so `moeq plan` and `moeq run` can print where each setting came
 * from.  An unknown family takes moeq's defaults and is flagged for a warning.
 */
#include "model/family.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define NO_KEY(v) {NULL, (v)}
#define HF_PROJ {"gate_proj", "up_proj", "down_proj"}
#define W_PROJ {"w1", "w3", "w2"}

/* Rows in alphabetical order of model_type.  Values follow the configuration
 * class defaults and the MoE block of each modeling file (docs/models.md). */
static const moeq__family k_families[] = {
    {.model_type = "deepseek_v2",
     .architecture = "DeepseekV2ForCausalLM",
     .source = "models/deepseek_v2/modeling_deepseek_v2.py (DeepseekV2Moe, DeepseekV2MoEGate)",
     .experts_key = "n_routed_experts",
     .top_k_key = "num_experts_per_tok",
     .intermediate_key = "moe_intermediate_size",
     .scoring = MOEQ_SCORING_SOFTMAX,
     .renormalize = NO_KEY(0), /* norm_topk_prob is not read */
     .group_method = "group_limited_greedy",
     .n_group = {"n_group", 0},
     .topk_group = {"topk_group", 0},
     .routed_scaling_factor = {"routed_scaling_factor", 1.0},
     .activation = MOEQ_ACT_SILU,
     .act_key = "hidden_act",
     .gated = 1,
     .n_shared_experts = {"n_shared_experts", 2},
     .moe_block = "mlp",
     .router = "gate",
     .correction_bias = "",
     .experts = "experts",
     .proj = HF_PROJ},
    {.model_type = "deepseek_v3",
     .architecture = "DeepseekV3ForCausalLM",
     .source = "models/deepseek_v3/modeling_deepseek_v3.py (DeepseekV3MoE, DeepseekV3TopkRouter)",
     .experts_key = "n_routed_experts",
     .top_k_key = "num_experts_per_tok",
     .intermediate_key = "moe_intermediate_size",
     .scoring = MOEQ_SCORING_SIGMOID,
     .renormalize = {"norm_topk_prob", 1},
     .n_group = {"n_group", 8},
     .topk_group = {"topk_group", 4},
     .routed_scaling_factor = {"routed_scaling_factor", 2.5},
     .activation = MOEQ_ACT_SILU,
     .act_key = "hidden_act",
     .gated = 1,
     .n_shared_experts = {"n_shared_experts", 1},
     .moe_block = "mlp",
     .router = "gate",
     .correction_bias = "gate.e_score_correction_bias",
     .experts = "experts",
     .proj = HF_PROJ},
    {.model_type = "ernie4_5_moe",
     .architecture = "Ernie4_5_MoeForCausalLM",
     .source = "models/ernie4_5_moe/modeling_ernie4_5_moe.py (Ernie4_5_MoeSparseMoeBlock)",
     .experts_key = "moe_num_experts",
     .top_k_key = "moe_k",
     .intermediate_key = "moe_intermediate_size",
     .scoring = MOEQ_SCORING_SOFTMAX,
     .renormalize = NO_KEY(1),
     .n_group = NO_KEY(0),
     .topk_group = NO_KEY(0),
     .routed_scaling_factor = NO_KEY(1.0),
     .activation = MOEQ_ACT_SILU,
     .act_key = "hidden_act",
     .gated = 1,
     .n_shared_experts = {"moe_num_shared_experts", 0},
     .moe_block = "mlp",
     .router = "gate",
     .correction_bias = "moe_statics.e_score_correction_bias",
     .experts = "experts",
     .proj = HF_PROJ},
    {.model_type = "glm4_moe",
     .architecture = "Glm4MoeForCausalLM",
     .source = "models/glm4_moe/modeling_glm4_moe.py (Glm4MoeMoE, Glm4MoeTopkRouter)",
     .experts_key = "n_routed_experts",
     .top_k_key = "num_experts_per_tok",
     .intermediate_key = "moe_intermediate_size",
     .scoring = MOEQ_SCORING_SIGMOID,
     .renormalize = {"norm_topk_prob", 1},
     .n_group = {"n_group", 1},
     .topk_group = {"topk_group", 1},
     .routed_scaling_factor = {"routed_scaling_factor", 1.0},
     .activation = MOEQ_ACT_SILU,
     .act_key = "hidden_act",
     .gated = 1,
     .n_shared_experts = {"n_shared_experts", 1},
     .moe_block = "mlp",
     .router = "gate",
     .correction_bias = "gate.e_score_correction_bias",
     .experts = "experts",
     .proj = HF_PROJ},
    {.model_type = "gpt_oss",
     .architecture = "GptOssForCausalLM",
     .source = "models/gpt_oss/modeling_gpt_oss.py (GptOssMLP, GptOssTopKRouter, GptOssExperts)",
     .experts_key = "num_local_experts",
     .top_k_key = "num_experts_per_tok",
     .intermediate_key = "intermediate_size",
     /* top-k of the logits, then softmax over those k: the same weights as
      * softmax over all experts renormalized over the chosen k. */
     .scoring = MOEQ_SCORING_SOFTMAX,
     .renormalize = NO_KEY(1),
     .n_group = NO_KEY(0),
     .topk_group = NO_KEY(0),
     .routed_scaling_factor = NO_KEY(1.0),
     .activation = MOEQ_ACT_SWIGLUOAI,
     .act_key = NULL,
     .swiglu_alpha = {"swiglu_alpha", 1.702},
     .swiglu_limit = {"swiglu_limit", 7.0},
     .gated = 1,
     .expert_bias = 1,
     .n_shared_experts = NO_KEY(0),
     .moe_block = "mlp",
     .router = "router",
     .router_bias = 1,
     .correction_bias = "",
     .experts = "experts",
     .proj = HF_PROJ},
    {.model_type = "granitemoe",
     .architecture = "GraniteMoeForCausalLM",
     .source = "models/granitemoe/modeling_granitemoe.py (GraniteMoeMoE, GraniteMoeTopKGating)",
     .experts_key = "num_local_experts",
     .top_k_key = "num_experts_per_tok",
     .intermediate_key = "intermediate_size",
     /* top-k of the logits, softmax over the k */
     .scoring = MOEQ_SCORING_SOFTMAX,
     .renormalize = NO_KEY(1),
     .n_group = NO_KEY(0),
     .topk_group = NO_KEY(0),
     .routed_scaling_factor = NO_KEY(1.0),
     .activation = MOEQ_ACT_SILU,
     .act_key = "hidden_act",
     .gated = 1,
     .n_shared_experts = NO_KEY(0),
     .moe_block = "block_sparse_moe",
     .router = "router.layer",
     .correction_bias = "",
     .experts = "experts",
     .proj = HF_PROJ},
    {.model_type = "kimi_k2",
     .architecture = "DeepseekV3ForCausalLM",
     .source = "models/deepseek_v3/modeling_deepseek_v3.py (Kimi K2 runs DeepSeek-V3's code)",
     .experts_key = "n_routed_experts",
     .top_k_key = "num_experts_per_tok",
     .intermediate_key = "moe_intermediate_size",
     .scoring = MOEQ_SCORING_SIGMOID,
     .renormalize = {"norm_topk_prob", 1},
     .n_group = {"n_group", 8},
     .topk_group = {"topk_group", 4},
     .routed_scaling_factor = {"routed_scaling_factor", 2.5},
     .activation = MOEQ_ACT_SILU,
     .act_key = "hidden_act",
     .gated = 1,
     .n_shared_experts = {"n_shared_experts", 1},
     .moe_block = "mlp",
     .router = "gate",
     .correction_bias = "gate.e_score_correction_bias",
     .experts = "experts",
     .proj = HF_PROJ},
    {.model_type = "llama4",
     .architecture = "Llama4ForConditionalGeneration",
     .source = "models/llama4/modeling_llama4.py (Llama4TextMoe, Llama4Router)",
     .experts_key = "num_local_experts",
     .top_k_key = "num_experts_per_tok",
     .intermediate_key = "intermediate_size",
     /* top-k of the logits, sigmoid of those k, applied to the input */
     .scoring = MOEQ_SCORING_SIGMOID,
     .renormalize = NO_KEY(0),
     .n_group = NO_KEY(0),
     .topk_group = NO_KEY(0),
     .routed_scaling_factor = NO_KEY(1.0),
     .apply_router_weight_on_input = 1,
     .activation = MOEQ_ACT_SILU,
     .act_key = "hidden_act",
     .gated = 1,
     .n_shared_experts = NO_KEY(1),
     .moe_block = "feed_forward",
     .router = "router",
     .correction_bias = "",
     .experts = "experts",
     .proj = HF_PROJ},
    {.model_type = "llama4_text",
     .architecture = "Llama4ForCausalLM",
     .source = "models/llama4/modeling_llama4.py (Llama4TextMoe, Llama4Router)",
     .experts_key = "num_local_experts",
     .top_k_key = "num_experts_per_tok",
     .intermediate_key = "intermediate_size",
     .scoring = MOEQ_SCORING_SIGMOID,
     .renormalize = NO_KEY(0),
     .n_group = NO_KEY(0),
     .topk_group = NO_KEY(0),
     .routed_scaling_factor = NO_KEY(1.0),
     .apply_router_weight_on_input = 1,
     .activation = MOEQ_ACT_SILU,
     .act_key = "hidden_act",
     .gated = 1,
     .n_shared_experts = NO_KEY(1),
     .moe_block = "feed_forward",
     .router = "router",
     .correction_bias = "",
     .experts = "experts",
     .proj = HF_PROJ},
    {.model_type = "minimax",
     .architecture = "MiniMaxForCausalLM",
     .source = "models/minimax/modeling_minimax.py (MiniMaxSparseMoeBlock)",
     .experts_key = "num_local_experts",
     .top_k_key = "num_experts_per_tok",
     .intermediate_key = "intermediate_size",
     .scoring = MOEQ_SCORING_SOFTMAX,
     .renormalize = NO_KEY(1),
     .n_group = NO_KEY(0),
     .topk_group = NO_KEY(0),
     .routed_scaling_factor = NO_KEY(1.0),
     .activation = MOEQ_ACT_SILU,
     .act_key = "hidden_act",
     .gated = 1,
     .n_shared_experts = NO_KEY(0),
     .moe_block = "block_sparse_moe",
     .router = "gate",
     .correction_bias = "",
     .experts = "experts",
     .proj = W_PROJ},
    {.model_type = "minimax_m2",
     .architecture = "MiniMaxM2ForCausalLM",
     .source = "models/minimax_m2/modeling_minimax_m2.py (MiniMaxM2SparseMoeBlock)",
     .experts_key = "num_local_experts",
     .top_k_key = "num_experts_per_tok",
     .intermediate_key = "intermediate_size",
     .scoring = MOEQ_SCORING_SIGMOID,
     .renormalize = NO_KEY(1),
     .n_group = NO_KEY(0),
     .topk_group = NO_KEY(0),
     .routed_scaling_factor = NO_KEY(1.0),
     .activation = MOEQ_ACT_SILU,
     .act_key = "hidden_act",
     .gated = 1,
     .n_shared_experts = NO_KEY(0),
     .moe_block = "block_sparse_moe",
     .router = "gate",
     .correction_bias = "e_score_correction_bias",
     .experts = "experts",
     .proj = W_PROJ},
    {.model_type = "mixtral",
     .architecture = "MixtralForCausalLM",
     .source = "models/mixtral/modeling_mixtral.py (MixtralSparseMoeBlock)",
     .experts_key = "num_local_experts",
     .top_k_key = "num_experts_per_tok",
     .intermediate_key = "intermediate_size",
     .scoring = MOEQ_SCORING_SOFTMAX,
     .renormalize = NO_KEY(1),
     .n_group = NO_KEY(0),
     .topk_group = NO_KEY(0),
     .routed_scaling_factor = NO_KEY(1.0),
     .activation = MOEQ_ACT_SILU,
     .act_key = "hidden_act",
     .gated = 1,
     .n_shared_experts = NO_KEY(0),
     .moe_block = "block_sparse_moe",
     .router = "gate",
     .correction_bias = "",
     .experts = "experts",
     .proj = W_PROJ},
    {.model_type = "nemotron_h",
     .architecture = "NemotronHForCausalLM",
     .source = "models/nemotron_h/modeling_nemotron_h.py (NemotronHMoE, NemotronHTopkRouter)",
     .experts_key = "n_routed_experts",
     .top_k_key = "num_experts_per_tok",
     .intermediate_key = "moe_intermediate_size",
     .scoring = MOEQ_SCORING_SIGMOID,
     .renormalize = {"norm_topk_prob", 1},
     .n_group = {"n_group", 1},
     .topk_group = {"topk_group", 1},
     .routed_scaling_factor = {"routed_scaling_factor", 1.0},
     .activation = MOEQ_ACT_RELU2,
     .act_key = "mlp_hidden_act",
     .gated = 0,
     .n_shared_experts = NO_KEY(1), /* n_shared_experts is not read */
     .moe_block = "mixer",
     .router = "gate",
     .correction_bias = "gate.e_score_correction_bias",
     .experts = "experts",
     .proj = HF_PROJ},
    {.model_type = "olmoe",
     .architecture = "OlmoeForCausalLM",
     .source = "models/olmoe/modeling_olmoe.py (OlmoeSparseMoeBlock)",
     .experts_key = "num_experts",
     .top_k_key = "num_experts_per_tok",
     .intermediate_key = "intermediate_size",
     .scoring = MOEQ_SCORING_SOFTMAX,
     .renormalize = {"norm_topk_prob", 0},
     .n_group = NO_KEY(0),
     .topk_group = NO_KEY(0),
     .routed_scaling_factor = NO_KEY(1.0),
     .activation = MOEQ_ACT_SILU,
     .act_key = "hidden_act",
     .gated = 1,
     .n_shared_experts = NO_KEY(0),
     .moe_block = "mlp",
     .router = "gate",
     .correction_bias = "",
     .experts = "experts",
     .proj = HF_PROJ},
    {.model_type = "qwen2_moe",
     .architecture = "Qwen2MoeForCausalLM",
     .source = "models/qwen2_moe/modeling_qwen2_moe.py (Qwen2MoeSparseMoeBlock)",
     .experts_key = "num_experts",
     .top_k_key = "num_experts_per_tok",
     .intermediate_key = "moe_intermediate_size",
     .scoring = MOEQ_SCORING_SOFTMAX,
     .renormalize = {"norm_topk_prob", 0},
     .n_group = NO_KEY(0),
     .topk_group = NO_KEY(0),
     .routed_scaling_factor = NO_KEY(1.0),
     .activation = MOEQ_ACT_SILU,
     .act_key = "hidden_act",
     .gated = 1,
     .n_shared_experts = NO_KEY(1),
     .shared_expert_gate = 1,
     .moe_block = "mlp",
     .router = "gate",
     .correction_bias = "",
     .experts = "experts",
     .proj = HF_PROJ},
    {.model_type = "qwen3_moe",
     .architecture = "Qwen3MoeForCausalLM",
     .source = "models/qwen3_moe/modeling_qwen3_moe.py (Qwen3MoeSparseMoeBlock)",
     .experts_key = "num_experts",
     .top_k_key = "num_experts_per_tok",
     .intermediate_key = "moe_intermediate_size",
     .scoring = MOEQ_SCORING_SOFTMAX,
     .renormalize = {"norm_topk_prob", 0},
     .n_group = NO_KEY(0),
     .topk_group = NO_KEY(0),
     .routed_scaling_factor = NO_KEY(1.0),
     .activation = MOEQ_ACT_SILU,
     .act_key = "hidden_act",
     .gated = 1,
     .n_shared_experts = NO_KEY(0),
     .moe_block = "mlp",
     .router = "gate",
     .correction_bias = "",
     .experts = "experts",
     .proj = HF_PROJ},
    {.model_type = "qwen3_next",
     .architecture = "Qwen3NextForCausalLM",
     .source = "models/qwen3_next/modeling_qwen3_next.py (Qwen3NextSparseMoeBlock)",
     .experts_key = "num_experts",
     .top_k_key = "num_experts_per_tok",
     .intermediate_key = "moe_intermediate_size",
     .scoring = MOEQ_SCORING_SOFTMAX,
     .renormalize = {"norm_topk_prob", 1},
     .n_group = NO_KEY(0),
     .topk_group = NO_KEY(0),
     .routed_scaling_factor = NO_KEY(1.0),
     .activation = MOEQ_ACT_SILU,
     .act_key = "hidden_act",
     .gated = 1,
     .n_shared_experts = NO_KEY(1),
     .shared_expert_gate = 1,
     .moe_block = "mlp",
     .router = "gate",
     .correction_bias = "",
     .experts = "experts",
     .proj = HF_PROJ},
};

const moeq__family *moeq__family_at(uint32_t i) {
    return i < MOEQ__ARRAY_LEN(k_families) ? &k_families[i] : NULL;
}

const moeq__family *moeq__family_find(const char *model_type) {
    if (!model_type) return NULL;
    for (size_t i = 0; i < MOEQ__ARRAY_LEN(k_families); i++) {
        if (strcmp(k_families[i].model_type, model_type) == 0) return &k_families[i];
    }
    return NULL;
}

static const moeq__family *find_by_architecture(const char *arch) {
    if (!arch) return NULL;
    for (size_t i = 0; i < MOEQ__ARRAY_LEN(k_families); i++) {
        if (strcmp(k_families[i].architecture, arch) == 0) return &k_families[i];
    }
    return NULL;
}

const char *moeq_model_family_name(uint32_t i) {
    const moeq__family *f = moeq__family_at(i);
    return f ? f->model_type : NULL;
}

const char *moeq_model_family_source(uint32_t i) {
    const moeq__family *f = moeq__family_at(i);
    return f ? f->source : NULL;
}

/* Copies s into a fixed field (always NUL-terminated; the table's names fit). */
static void set_name(char *dst, size_t n, const char *s) {
    snprintf(dst, n, "%s", s ? s : "");
}

/* moeq's choice for a family the table does not know. */
static const moeq__family k_unknown = {
    .model_type = "",
    .architecture = "",
    .source = "",
    .experts_key = NULL,
    .top_k_key = "num_experts_per_tok",
    .intermediate_key = NULL,
    .scoring = MOEQ_SCORING_SOFTMAX,
    .renormalize = {"norm_topk_prob", 1},
    .n_group = {"n_group", 0},
    .topk_group = {"topk_group", 0},
    .routed_scaling_factor = {"routed_scaling_factor", 1.0},
    .activation = MOEQ_ACT_SILU,
    .act_key = "hidden_act",
    .gated = 1,
    .n_shared_experts = {"n_shared_experts", 0},
    .moe_block = "mlp",
    .router = "gate",
    .correction_bias = "gate.e_score_correction_bias",
    .experts = "experts",
    .proj = HF_PROJ,
};

static void fill_row(const moeq__family *f, moeq_model_moe *out) {
    set_name(out->family, sizeof out->family, f->model_type);
    out->scoring = f->scoring;
    out->renormalize = f->renormalize.value != 0;
    out->num_expert_group = (int32_t)f->n_group.value;
    out->topk_group = (int32_t)f->topk_group.value;
    out->routed_scaling_factor = (float)f->routed_scaling_factor.value;
    out->apply_router_weight_on_input = f->apply_router_weight_on_input;
    out->activation = f->activation;
    out->swiglu_alpha = (float)f->swiglu_alpha.value;
    out->swiglu_limit = (float)f->swiglu_limit.value;
    out->gated = f->gated;
    out->expert_bias = f->expert_bias;
    out->n_shared_experts = (int32_t)f->n_shared_experts.value;
    out->shared_expert_gate = f->shared_expert_gate;
    out->params_dtype = MOEQ_DTYPE_BF16;
    set_name(out->moe_block, sizeof out->moe_block, f->moe_block);
    set_name(out->router, sizeof out->router, f->router);
    out->router_bias = f->router_bias;
    set_name(out->correction_bias, sizeof out->correction_bias, f->correction_bias);
    set_name(out->experts, sizeof out->experts, f->experts);
    for (int p = 0; p < 3; p++) set_name(out->proj[p], sizeof out->proj[p], f->proj[p]);
}

moeq_status moeq_model_family(const char *model_type, moeq_model_moe *out, moeq_error *err) {
    if (!model_type || !out) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "moeq_model_family: %s is NULL",
                           !model_type ? "model_type" : "out");
    }
    memset(out, 0, sizeof *out);
    const moeq__family *f = moeq__family_find(model_type);
    if (!f) {
        moeq__sb sb;
        moeq__sb_init(&sb);
        for (size_t i = 0; i < MOEQ__ARRAY_LEN(k_families); i++) {
            moeq__sb_printf(&sb, "%s%s", i ? ", " : "", k_families[i].model_type);
        }
        moeq_status st = moeq__error(err, MOEQ_STATUS_NO_MATCH,
                                     "model_type '%s' is not in the family table; known: %s",
                                     model_type, sb.failed ? "?" : sb.data);
        moeq__sb_free(&sb);
        return st;
    }
    fill_row(f, out);
    set_name(out->model_type, sizeof out->model_type, model_type);
    out->known = 1;
    return MOEQ_STATUS_OK;
}

/* ---- reading a config through a row ------------------------------------------------ */

typedef struct reader {
    const moeq_config *cfg;
    moeq_model_moe *out;
    const char *who; /* "glm4_moe" or "moeq's default" */
    size_t used;     /* bytes of out->defaults */
} reader;

static void note_default(reader *r, const char *what, const char *value) {
    size_t cap = sizeof r->out->defaults;
    if (r->used >= cap - 1) return;
    int w = snprintf(r->out->defaults + r->used, cap - r->used, "%s%s=%s (%s)",
                     r->used ? ", " : "", what, value, r->who);
    if (w > 0) r->used += (size_t)w < cap - r->used ? (size_t)w : cap - 1 - r->used;
}

/* A number from the config under key, else the row's value (noted). */
static moeq_status read_number(reader *r, const char *what, const moeq__family_key *k,
                               double lo, double hi, double *v, moeq_error *err) {
    double got;
    if (k->key && moeq_config_model_number(r->cfg, k->key, &got) == MOEQ_STATUS_OK) {
        if (!isfinite(got) || got < lo || got > hi) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "config.json %s is %g; expected a number in [%g, %g]", k->key, got,
                               lo, hi);
        }
        *v = got;
        return MOEQ_STATUS_OK;
    }
    *v = k->value;
    char text[32];
    snprintf(text, sizeof text, "%g", k->value);
    if (k->key) note_default(r, what, text);
    return MOEQ_STATUS_OK;
}

/* A dimension: the family's key, then the common spellings. */
static int32_t read_dim(const moeq_config *cfg, const char *family_key,
                        const char *const *fallback) {
    double v;
    if (family_key && moeq_config_model_number(cfg, family_key, &v) == MOEQ_STATUS_OK &&
        v >= 1 && v <= 1e9) {
        return (int32_t)v;
    }
    for (const char *const *k = fallback; *k; k++) {
        if (moeq_config_model_number(cfg, *k, &v) == MOEQ_STATUS_OK && v >= 1 && v <= 1e9) {
            return (int32_t)v;
        }
    }
    return 0;
}

/* hidden_act spellings -> moeq_activation; -1 for one moeq cannot run. */
static int32_t activation_of(const char *act) {
    static const struct {
        const char *name;
        int32_t act;
    } k_acts[] = {
        {"silu", MOEQ_ACT_SILU},
        {"swish", MOEQ_ACT_SILU},
        {"gelu", MOEQ_ACT_GELU},
        {"gelu_pytorch_tanh", MOEQ_ACT_GELU_TANH},
        {"gelu_new", MOEQ_ACT_GELU_TANH},
        {"gelu_fast", MOEQ_ACT_GELU_TANH},
        {"relu2", MOEQ_ACT_RELU2},
    };
    for (size_t i = 0; i < MOEQ__ARRAY_LEN(k_acts); i++) {
        if (strcmp(act, k_acts[i].name) == 0) return k_acts[i].act;
    }
    return -1;
}

static const char *activation_name(int32_t act) {
    switch (act) {
        case MOEQ_ACT_SILU: return "silu";
        case MOEQ_ACT_GELU: return "gelu";
        case MOEQ_ACT_GELU_TANH: return "gelu_tanh";
        case MOEQ_ACT_SWIGLUOAI: return "swiglu_oai";
        case MOEQ_ACT_RELU2: return "relu2";
        default: return "?";
    }
}

moeq_status moeq_model_moe_get(const moeq_config *cfg, moeq_model_moe *out, moeq_error *err) {
    if (!cfg || !out) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "moeq_model_moe_get: %s is NULL",
                           !cfg ? "cfg" : "out");
    }
    memset(out, 0, sizeof *out);
    const char *model_type = moeq_config_model_string(cfg, "model_type");
    const moeq__family *f = moeq__family_find(model_type);
    if (!f) f = find_by_architecture(moeq_config_model_string(cfg, "architectures"));
    out->known = f != NULL;
    set_name(out->model_type, sizeof out->model_type, model_type);
    if (!f) f = &k_unknown;
    fill_row(f, out);
    reader r = {cfg, out, f->model_type[0] ? f->model_type : "moeq's default", 0};

    static const char *const k_experts[] = {"num_experts", "n_routed_experts",
                                            "num_local_experts", "moe_num_experts", NULL};
    static const char *const k_top_k[] = {"num_experts_per_tok", "moe_topk", "moe_k",
                                          "experts_per_token", NULL};
    static const char *const k_hidden[] = {"hidden_size", NULL};
    static const char *const k_inter[] = {"moe_intermediate_size", "intermediate_size", NULL};
    out->num_experts = read_dim(cfg, f->experts_key, k_experts);
    out->top_k = read_dim(cfg, f->top_k_key, k_top_k);
    out->hidden_size = read_dim(cfg, NULL, k_hidden);
    out->intermediate_size = read_dim(cfg, f->intermediate_key, k_inter);

    /* scoring_func, where a config has it, names the function whatever the family. */
    const char *scoring = moeq_config_model_string(cfg, "scoring_func");
    if (scoring) {
        if (strcmp(scoring, "softmax") == 0) {
            out->scoring = MOEQ_SCORING_SOFTMAX;
        } else if (strcmp(scoring, "sigmoid") == 0) {
            out->scoring = MOEQ_SCORING_SIGMOID;
        } else {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "config.json scoring_func is '%s'; expected softmax or sigmoid",
                               scoring);
        }
    } else {
        note_default(&r, "scoring", out->scoring == MOEQ_SCORING_SIGMOID ? "sigmoid" : "softmax");
    }

    double v;
    moeq_status st = read_number(&r, "renormalize", &f->renormalize, 0, 1, &v, err);
    if (st != MOEQ_STATUS_OK) return st;
    out->renormalize = v != 0;
    if ((st = read_number(&r, "n_group", &f->n_group, 0, 65536, &v, err)) != MOEQ_STATUS_OK) {
        return st;
    }
    out->num_expert_group = (int32_t)v;
    if ((st = read_number(&r, "topk_group", &f->topk_group, 0, 65536, &v, err)) !=
        MOEQ_STATUS_OK) {
        return st;
    }
    out->topk_group = (int32_t)v;
    /* One group (or none) is no grouping; DeepSeek-V2 groups only under its
     * group_limited_greedy topk_method (its default, greedy, ignores n_group). */
    if (f->group_method) {
        const char *method = moeq_config_model_string(cfg, "topk_method");
        if (!method || strcmp(method, f->group_method) != 0) {
            out->num_expert_group = out->topk_group = 0;
        }
    }
    if (out->num_expert_group <= 1) out->num_expert_group = out->topk_group = 0;
    if ((st = read_number(&r, "routed_scaling_factor", &f->routed_scaling_factor, 0, 1e6, &v,
                          err)) != MOEQ_STATUS_OK) {
        return st;
    }
    out->routed_scaling_factor = (float)v;
    if (out->activation == MOEQ_ACT_SWIGLUOAI) {
        if ((st = read_number(&r, "swiglu_alpha", &f->swiglu_alpha, 0, 1e6, &v, err)) !=
            MOEQ_STATUS_OK) {
            return st;
        }
        out->swiglu_alpha = (float)v;
        if ((st = read_number(&r, "swiglu_limit", &f->swiglu_limit, 0, 1e6, &v, err)) !=
            MOEQ_STATUS_OK) {
            return st;
        }
        out->swiglu_limit = (float)v;
    }
    if ((st = read_number(&r, "n_shared_experts", &f->n_shared_experts, 0, 65536, &v, err)) !=
        MOEQ_STATUS_OK) {
        return st;
    }
    out->n_shared_experts = (int32_t)v;

    const char *act = f->act_key ? moeq_config_model_string(cfg, f->act_key) : NULL;
    if (act) {
        int32_t a = activation_of(act);
        if (a < 0) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "config.json %s is '%s'; moeq runs silu, swish, gelu, "
                               "gelu_pytorch_tanh, gelu_new, gelu_fast and relu2",
                               f->act_key, act);
        }
        out->activation = a;
        if (a == MOEQ_ACT_RELU2) out->gated = 0;
    } else {
        note_default(&r, "activation", activation_name(out->activation));
    }

    /* transformers 5 writes dtype, 4.x torch_dtype. */
    const char *dtype = moeq_config_model_string(cfg, "dtype");
    if (!dtype) dtype = moeq_config_model_string(cfg, "torch_dtype");
    if (dtype) {
        if (strcmp(dtype, "float32") == 0) {
            out->params_dtype = MOEQ_DTYPE_F32;
        } else if (strcmp(dtype, "float16") == 0) {
            out->params_dtype = MOEQ_DTYPE_F16;
        } else if (strcmp(dtype, "bfloat16") == 0) {
            out->params_dtype = MOEQ_DTYPE_BF16;
        } else {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "config.json dtype is '%s'; expected bfloat16, float16 or float32",
                               dtype);
        }
    }
    out->unknown_defaults = !out->known && r.used > 0;
    return MOEQ_STATUS_OK;
}

void moeq_model_moe_route(const moeq_model_moe *m, moeq_route_config *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!m) return;
    out->num_experts = m->num_experts;
    out->top_k = m->top_k;
    out->scoring = m->scoring;
    out->renormalize = m->renormalize;
    out->num_expert_group = m->num_expert_group;
    out->topk_group = m->topk_group;
    out->routed_scaling_factor = m->routed_scaling_factor;
}

size_t moeq_model_moe_summary(const moeq_model_moe *m, char *buf, size_t n) {
    if (!buf) n = 0;
    if (!m) {
        int w = snprintf(buf, n, "none");
        return w < 0 ? 0 : (size_t)w;
    }
    char groups[48] = "";
    if (m->num_expert_group > 1) {
        snprintf(groups, sizeof groups, ", best %d of %d groups", (int)m->topk_group,
                 (int)m->num_expert_group);
    }
    char scale[32] = "";
    if (m->routed_scaling_factor != 1.0f) {
        snprintf(scale, sizeof scale, ", scaled %g", (double)m->routed_scaling_factor);
    }
    int w = snprintf(buf, n, "%s, top-%d of %d%s%s%s%s%s, %s%s%s", 
                     m->scoring == MOEQ_SCORING_SIGMOID ? "sigmoid" : "softmax", (int)m->top_k,
                     (int)m->num_experts, m->renormalize ? ", renormalized" : "", groups, scale,
                     m->correction_bias[0] ? ", correction bias " : "", m->correction_bias,
                     m->gated ? "" : "non-gated ", activation_name(m->activation),
                     m->expert_bias ? ", expert biases" : "");
    return w < 0 ? 0 : (size_t)w;
}

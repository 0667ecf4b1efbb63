/*
 * family.h - the table of model families (family.c): what each family's
 * reference modeling code does with its MoE blocks when config.json is
 * silent, and the config keys and module names it uses.
 *
 * Crosses the boundary: moeq__family rows (read-only, static storage) for the
 * writer, which names tensors and writes config.json keys as each family
 * does; everything else goes through the public moeq_model_* calls.
 */
#ifndef MOEQ_MODEL_FAMILY_H
#define MOEQ_MODEL_FAMILY_H

#include "common/internal.h"

/* A config key a family's code reads, with the value its config class
 * defaults to (written by transformers into every config.json it saves). */
typedef struct moeq__family_key {
    const char *key;    /* NULL: the code has no such setting; `value` is fixed */
    double value;       /* the class default, or the fixed behaviour */
} moeq__family_key;

typedef struct moeq__family {
    const char *model_type;   /* config.json model_type */
    const char *architecture; /* architectures[0] of the causal LM */
    const char *source;       /* the modeling file the row follows */
    /* Dimension keys, first found wins. */
    const char *experts_key;
    const char *top_k_key;
    const char *intermediate_key;
    /* Routing. */
    int32_t scoring; /* moeq_scoring, fixed unless the config has scoring_func */
    moeq__family_key renormalize;
    /* Grouped top-k only when config topk_method names this (DeepSeek-V2's
     * group_limited_greedy); NULL: whenever n_group > 1. */
    const char *group_method;
    moeq__family_key n_group;
    moeq__family_key topk_group;
    moeq__family_key routed_scaling_factor;
    int32_t apply_router_weight_on_input;
    /* Experts. */
    int32_t activation; /* moeq_activation, unless hidden_act (or act_key) says otherwise */
    const char *act_key; /* the key naming the expert activation: "hidden_act", ... */
    moeq__family_key swiglu_alpha;
    moeq__family_key swiglu_limit;
    int32_t gated;
    int32_t expert_bias;
    moeq__family_key n_shared_experts;
    int32_t shared_expert_gate;
    /* Module names. */
    const char *moe_block;
    const char *router;
    int32_t router_bias;
    const char *correction_bias;
    const char *experts;
    const char *proj[3];
} moeq__family;

/* The row for model_type (exact), else NULL. */
const moeq__family *moeq__family_find(const char *model_type);
/* Row i, NULL past the last. */
const moeq__family *moeq__family_at(uint32_t i);

#endif

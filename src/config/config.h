/*
 * config.h - the inside of moeq_config, shared by config.c (which builds it
 * from JSON), config_query.c (which answers questions about it), match.c
 * (which compiles its patterns) and the stages above that read it.
 * Never installed.
 */
#ifndef MOEQ_CONFIG_H
#define MOEQ_CONFIG_H

#include "common/internal.h"

typedef struct moeq__matcher moeq__matcher; /* match.c */

typedef struct moeq__group {
    char *name;
    uint32_t index; /* position in config_groups (JSON order) */
    uint32_t n_targets;
    char **targets; /* as written */
    bool has_weights, has_input, has_output;
    moeq_quant_args weights, input, output;
    int32_t format; /* the group's own "format", MOEQ_FORMAT_NONE when absent/null */
    int32_t preset; /* 1 when expanded from a preset name (value was a target list) */
} moeq__group;

/* A numeric or string field of the model's config.json (num_experts, ...). */
typedef struct moeq__model_field {
    char *key;
    bool is_string;
    double number;
    char *string;
} moeq__model_field;

struct moeq_config {
    char *source_key; /* "quantization_config", ... or "" for a bare block */
    char *quant_method;
    int32_t format; /* top-level format, MOEQ_FORMAT_NONE when absent */
    char *version;  /* "" when absent */
    int version_major, version_minor, version_patch; /* -1 when absent/unparsable */
    char *quantization_status;                       /* "" when absent */
    bool has_global_compression_ratio;
    double global_compression_ratio;

    char *raw_sparsity; /* re-serialised JSON, NULL when absent/null */
    char *raw_transform;
    char *raw_kv_cache;
    bool has_kv_cache;
    moeq_quant_args kv_cache;

    uint32_t n_groups;
    moeq__group *groups;

    uint32_t n_ignore;
    char **ignore; /* as written */

    uint32_t n_warnings;
    char **warnings;

    uint32_t n_model_fields;
    moeq__model_field *model_fields;

    uint32_t n_strings;
    char **strings;            /* owned strings the args point to (observer names), each once */

    /* moe_sparsity_config: the method (moeq_moe_sparsity_method, NONE when
     * absent or null) and, per decoder layer, the experts it retains (0 for
     * a dense layer, written null). */
    int32_t moe_sparsity_method;
    uint32_t n_moe_sparsity;
    int32_t *moe_sparsity;
    char *moe_sparsity_path; /* JSON path of the object, for messages */

    uint32_t regex_match_limit;
    moeq__matcher *matcher; /* compiled targets and ignore entries */
};

/* config_query.c: checks that caller-built QuantizationArgs hold values in
 * range: every enum one of its constants, num_bits >= 1, group_size >= -1,
 * block dims >= 0 (whether they fit the strategy is for the caller to
 * check).  `what` names the args in the message ("weights",
 * "input_activations").
 * @return OK or INVALID_ARG. */
moeq_status moeq__quant_args_check(const moeq_quant_args *a, const char *what, moeq_error *err);

/* Enum value counts (config.c's name lookups, config_query.c's range check). */
#define MOEQ__STRATEGY_COUNT (MOEQ_STRATEGY_ATTN_HEAD + 1)
#define MOEQ__ACTORDER_COUNT (MOEQ_ACTORDER_STATIC + 1)

/* Compressed-tensors format inference for a group without an explicit format
 * (spec: compressed-tensors-format.md section 3.2, 0.18 order). */
int32_t moeq__infer_format(const moeq_quant_args *weights, const moeq_quant_args *input);

/* The effective format of group g: its own format, else the top-level one
 * (unless absent or mixed-precision), else inferred. */
int32_t moeq__group_format(const moeq_config *cfg, const moeq__group *g);

/* 1 when the config's version is known and older than major.minor.patch. */
bool moeq__config_version_before(const moeq_config *cfg, int major, int minor, int patch);

/* match.c: compiles every target and ignore pattern of cfg (called at the end
 * of parsing).  Errors name the pattern, its offset and its JSON path. */
moeq_status moeq__matcher_create(moeq_config *cfg, moeq_error *err);
void moeq__matcher_destroy(moeq__matcher *m);

#endif /* MOEQ_CONFIG_H */

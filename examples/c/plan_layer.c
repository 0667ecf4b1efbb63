/* plan_layer.c - the README's C example: which scheme runs a MoE layer, and why.
 *   plan_layer MODEL_DIR [PREFIX]          (PREFIX: model.layers.1.mlp.experts) */
#include <stdio.h>

#include <moeq/moeq.h>

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    const char *layer = argc > 2 ? argv[2] : "model.layers.1.mlp.experts";
    moeq_error err;
    moeq_config *cfg = NULL;
    moeq_resolution res; /* group, target, format, weight and input args */
    moeq_selection sel;  /* the scheme, and why */
    double experts = 0;  /* from the same config.json; 0 if absent, which resolve rejects */
    if (moeq_config_load(dir, NULL, &cfg, &err) == MOEQ_OK &&
        moeq_config_model_number(cfg, "num_experts", &experts) != MOEQ_OK) {
        experts = 0;
    }
    if (!cfg ||
        moeq_resolve_moe(cfg, layer, (uint32_t)experts, NULL, NULL, &res, &err) != MOEQ_OK ||
        moeq_select(&res, layer, NULL, &sel, &err) != MOEQ_OK) {
        fprintf(stderr, "%s: %s\n", moeq_status_name(err.code), err.message);
        moeq_config_destroy(cfg);
        return 1;
    }
    printf("%s: %s\n", layer, sel.reason);
    moeq_config_destroy(cfg);
    return 0;
}

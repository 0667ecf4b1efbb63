/* Uses the installed header and library: parse a config, resolve a layer. */
#include <moeq/moeq.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    const char *json = "{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"g\":"
                       "{\"targets\":[\"re:.*experts.*\"],\"weights\":{\"num_bits\":4,"
                       "\"group_size\":32}}},\"format\":\"pack-quantized\"}";
    moeq_config *cfg = NULL;
    moeq_error err;
    if (moeq_config_parse(json, strlen(json), NULL, &cfg, &err) != MOEQ_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    moeq_resolution r;
    moeq_selection sel;
    if (moeq_resolve_moe(cfg, "m.experts", 2, NULL, NULL, &r, &err) != MOEQ_OK ||
        moeq_select(&r, "m.experts", NULL, &sel, &err) != MOEQ_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    printf("moeq %s: %s\n", moeq_version(), moeq_scheme_name(sel.scheme));
    moeq_config_destroy(cfg);
    return strcmp(moeq_scheme_name(sel.scheme), "wna16") == 0 ? 0 : 1;
}

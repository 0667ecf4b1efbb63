/*
 * cmd_synth.c - `moeq synth [PRESET] DIR [--experts N] [--hidden N]
 *               [--intermediate N] [--layers N] [--seed S] [--shards N]`:
 * writes a small synthetic compressed-tensors checkpoint (moeq_synth_write).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void synth_usage(FILE *f) {
    fprintf(f, "usage: moeq synth [PRESET] DIR [--experts N] [--top-k N] [--hidden N]\n"
               "                  [--intermediate N] [--layers N] [--seed S] [--shards N]\n\n"
               "Writes a synthetic compressed-tensors MoE checkpoint (config.json and\n"
               "safetensors, exactly as compressed-tensors 0.18 writes them) into DIR.\n"
               "PRESET (default glm-mini) is one of:\n");
    for (uint32_t i = 0; moeq_synth_preset_name(i); i++) {
        fprintf(f, "  %-22s %s\n", moeq_synth_preset_name(i), moeq_synth_preset_summary(i));
    }
}

int cmd_synth(int argc, char **argv) {
    const char *pos[2] = {NULL, NULL};
    int npos = 0;
    long experts = 0, top_k = 0, hidden = 0, inter = 0, layers = 0, seed = -1, shards = 0;
    const struct {
        const char *flag;
        long *value;
        long lo, hi;
    } flags[] = {{"--experts", &experts, 1, 4096}, {"--top-k", &top_k, 1, 4096},
                 {"--hidden", &hidden, 1, 65536},  {"--intermediate", &inter, 1, 65536},
                 {"--layers", &layers, 1, 1024},   {"--seed", &seed, 0, 0x7fffffff},
                 {"--shards", &shards, 1, 1000}};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            synth_usage(stdout);
            return CLI_OK;
        }
        size_t f = 0;
        while (f < sizeof flags / sizeof flags[0] && strcmp(argv[i], flags[f].flag)) f++;
        if (f < sizeof flags / sizeof flags[0]) {
            if (i + 1 >= argc || cli_parse_long("synth", flags[f].flag, argv[++i], flags[f].lo,
                                                flags[f].hi, flags[f].value)) {
                return CLI_USAGE;
            }
        } else if (argv[i][0] == '-' || npos == 2) {
            fprintf(stderr, "moeq synth: unexpected argument '%s'\n\n", argv[i]);
            synth_usage(stderr);
            return CLI_USAGE;
        } else {
            pos[npos++] = argv[i];
        }
    }
    if (npos == 0) {
        synth_usage(stderr);
        return CLI_USAGE;
    }
    const char *preset = npos == 2 ? pos[0] : "glm-mini", *dir = pos[npos - 1];
    moeq_error err;
    moeq_synth_layout layout;
    if (moeq_synth_preset(preset, &layout, &err) != MOEQ_OK) {
        cli_print_error(preset, &err);
        return CLI_USAGE;
    }
    if (experts) layout.num_experts = (int32_t)experts;
    if (top_k) layout.top_k = (int32_t)top_k;
    if (hidden) layout.hidden_size = (int32_t)hidden;
    if (inter) layout.moe_intermediate_size = (int32_t)inter;
    if (layers) layout.num_layers = (int32_t)layers;
    if (seed >= 0) layout.seed = (uint64_t)seed;
    if (shards) layout.shards = (int32_t)shards;
    if (moeq_synth_write(&layout, dir, &err) != MOEQ_OK) {
        cli_print_error(dir, &err);
        return err.code == MOEQ_STATUS_INVALID_ARG ? CLI_USAGE : CLI_FAILED;
    }
    printf("wrote %s: %s, %d layers, %d experts (top-%d), hidden %d, expert intermediate %d\n", dir,
           preset, (int)layout.num_layers, (int)layout.num_experts, (int)layout.top_k,
           (int)layout.hidden_size, (int)layout.moe_intermediate_size);
    return CLI_OK;
}

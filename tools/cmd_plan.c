/*
 * cmd_plan.c - `moeq plan CONFIG [--layers FILE] [--engine-order]
 *              [--platform cpu|npu] [--prefer-mxint4] [--engine SPEC] [--json]`
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void plan_usage(FILE *f) {
    fprintf(f, "usage: moeq plan CONFIG [--layers FILE] [--engine-order] [--platform cpu|npu]\n"
               "                 [--prefer-mxint4] [--engine SPEC] [--json]\n\n"
               "CONFIG is a model directory, its config.json, or a file holding a bare\n"
               "quantization_config.  FILE has one layer per line: NAME (a linear layer) or\n"
               "NAME moe N [GATE,UP,DOWN] (a fused-experts prefix with N experts).  Without\n"
               "--layers, each config group is shown with the MoE scheme it selects.  For a\n"
               "model's config.json the first line says how its MoE blocks route (see\n"
               "'moeq run --help').\n\n"
               "  --engine-order   resolve overlapping targets in config order (vLLM/SGLang)\n"
               "                   instead of compressed-tensors order\n"
               "  --platform P     cpu (default) or npu (use the npu_* layouts where SGLang does)\n"
               "  --prefer-mxint4  int4 group-32 symmetric weights select mxint4, not wna16\n"
               "  --engine SPEC    also say, per MoE line, what an engine's MoE dispatch\n"
               "                   would build or raise, marking (*) where it differs from\n"
               "                   moeq; SPEC = ENGINE[@COMMIT][:PLATFORM[,BACKEND]], e.g.\n"
               "                   sglang, sglang@eba6af385d, vllm:sm100,flashinfer_trtllm\n"
               "                   (needs --layers; docs/engines.md lists the versions)\n"
               "  --json           one JSON object per layer line\n"
               "  --threads N      threads for long layer lists (default: all CPUs)\n\n"
               "exit status: 0 no line in error, 1 some line in error, 2 bad config or usage\n");
}

/* Without --layers: one line per group, with the scheme its MoE experts get. */
static int plan_groups(const moeq_config *cfg, const moeq_select_options *so, int json) {
    int errors = 0;
    if (json) printf("[");
    for (uint32_t i = 0; i < moeq_config_group_count(cfg); i++) {
        moeq_group_view g;
        moeq_error err;
        moeq_config_group(cfg, i, &g);
        moeq_resolution r = {0};
        r.status = MOEQ_MATCH_QUANTIZED;
        r.group_index = (int32_t)i;
        r.group_name = g.name;
        r.weights = g.weights;
        r.input_activations = g.input_activations;
        r.output_activations = g.output_activations;
        r.format = g.format != MOEQ_FORMAT_NONE ? g.format : moeq_config_format(cfg);
        r.ignore_index = r.other_group_index = -1;
        moeq_selection sel;
        moeq_status st = moeq_select(&r, g.name, so, &sel, &err);
        char w[96] = "-", a[96] = "-";
        if (g.weights) moeq_quant_args_summary(g.weights, w, sizeof w);
        if (g.input_activations) moeq_quant_args_summary(g.input_activations, a, sizeof a);
        if (st != MOEQ_OK) errors++;
        if (json) {
            printf("%s\n{\"group\":", i ? "," : "");
            cli_json_string(stdout, g.name);
            printf(",\"targets\":%u,\"scheme\":%s%s%s}", g.n_targets, st == MOEQ_OK ? "\"" : "null",
                   st == MOEQ_OK ? moeq_scheme_name(sel.scheme) : "", st == MOEQ_OK ? "\"" : "");
            continue;
        }
        printf("group %s (%u target%s)\n  weights %s, inputs %s\n", g.name, g.n_targets,
               g.n_targets == 1 ? "" : "s", w, a);
        for (uint32_t t = 0; t < g.n_targets; t++) printf("  target  %s\n", g.targets[t]);
        if (st == MOEQ_OK) {
            printf("  MoE scheme: %s\n", sel.reason);
        } else {
            printf("  MoE scheme: none: %s\n", err.message);
        }
    }
    if (json) printf("\n]\n");
    return errors ? CLI_FAILED : CLI_OK;
}

static int32_t write_stdout(const char *data, size_t len, void *user) {
    (void)user;
    return fwrite(data, 1, len, stdout) == len ? 0 : 1;
}

int cmd_plan(int argc, char **argv) {
    const char *config_path = NULL, *layers_path = NULL, *engine = NULL;
    moeq_resolve_options ro = {0};
    moeq_select_options so = {0};
    int json = 0;
    long threads = sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            plan_usage(stdout);
            return CLI_OK;
        } else if (strcmp(a, "--layers") == 0 && i + 1 < argc) {
            layers_path = argv[++i];
        } else if (strcmp(a, "--engine-order") == 0) {
            ro.precedence = MOEQ_PRECEDENCE_ENGINE;
        } else if (strcmp(a, "--platform") == 0 && i + 1 < argc) {
            if (cli_parse_platform("plan", argv[++i], &so.platform) != 0) return CLI_USAGE;
        } else if (strcmp(a, "--prefer-mxint4") == 0) {
            so.prefer_mxint4 = 1;
        } else if (strcmp(a, "--engine") == 0 && i + 1 < argc) {
            engine = argv[++i];
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--threads") == 0 && i + 1 < argc) {
            if (cli_parse_long("plan", a, argv[++i], 1, 64, &threads) != 0) return CLI_USAGE;
        } else if (a[0] == '-' || config_path) {
            fprintf(stderr, "moeq plan: unexpected argument '%s'\n\n", a);
            plan_usage(stderr);
            return CLI_USAGE;
        } else {
            config_path = a;
        }
    }
    if (!config_path) {
        plan_usage(stderr);
        return CLI_USAGE;
    }
    if (engine && !layers_path) {
        fprintf(stderr, "moeq plan: --engine needs --layers (MoE lines: NAME moe N)\n");
        return CLI_USAGE;
    }
    moeq_error err;
    moeq_config *cfg = cli_load_config(config_path);
    if (!cfg) return CLI_USAGE;
    /* A model's config.json (not a bare quantization_config): how its MoE
     * blocks route, and what the family table supplied. */
    if (!json && moeq_config_model_string(cfg, "model_type")) {
        moeq_model_moe mm;
        if (cli_model_moe(cfg, config_path, &mm) != CLI_OK) {
            moeq_config_destroy(cfg);
            return CLI_USAGE;
        }
        cli_print_routing(stdout, &mm);
    }
    if (!layers_path) {
        int rc = plan_groups(cfg, &so, json);
        moeq_config_destroy(cfg);
        return rc;
    }
    size_t len = 0;
    char *layers = cli_read_file(layers_path, &len);
    if (!layers) {
        moeq_config_destroy(cfg);
        return CLI_USAGE;
    }
    moeq_plan_options po = {&ro, &so, json,
                            (int32_t)(threads < 1    ? 1
                                      : threads > 64 ? 64
                                                     : threads),
                            engine};
    uint32_t errors = 0;
    moeq_status st = moeq_plan_write(cfg, layers, len, &po, write_stdout, NULL, &errors, &err);
    free(layers);
    moeq_config_destroy(cfg);
    if (st != MOEQ_OK) {
        cli_print_error(layers_path, &err);
        return st == MOEQ_STATUS_IO ? CLI_FAILED : CLI_USAGE;
    }
    return errors ? CLI_FAILED : CLI_OK;
}

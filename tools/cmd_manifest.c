/*
 * cmd_manifest.c - `moeq manifest CONFIG --layer PREFIX [...]`: the parameter
 * manifest of one MoE layer (names, dtypes and shapes an engine allocates, and
 * the checkpoint tensors each is loaded from), without any checkpoint.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void manifest_usage(FILE *f) {
    fprintf(f,
            "usage: moeq manifest CONFIG --layer PREFIX [--experts E] [--hidden H]\n"
            "                     [--intermediate I] [--proj GATE,UP,DOWN] [--platform cpu|npu]\n"
            "                     [--prefer-mxint4] [--json]\n\n"
            "Resolves the MoE layer PREFIX (e.g. model.layers.3.mlp.experts), selects its\n"
            "scheme and prints the parameters moeq_moe_create declares for it: name, dtype,\n"
            "shape [experts, ...], the checkpoint tensor each is loaded from, and how\n"
            "(sharded: gate then up along the shard dimension; per_shard: one value per\n"
            "shard; shared: gate and up must agree; derived: computed by finalize).\n"
            "CONFIG is a model directory or its config.json; E, H and I default to its\n"
            "num_experts / n_routed_experts, hidden_size and moe_intermediate_size.\n\n"
            "  --proj G,U,D     projection names (default gate_proj,up_proj,down_proj;\n"
            "                   Mixtral: w1,w3,w2)\n"
            "  --json           one JSON object (layer, scheme, reason, dims, params)\n\n"
            "exit status: 0 printed, 1 the layer does not resolve, no scheme accepts it or\n"
            "the dimensions do not suit the scheme, 2 usage or bad config\n");
}

static const char *const k_layouts[] = {"sharded", "per_shard", "shared", "derived"};

static const char *layout_name(int32_t layout) {
    return layout >= 0 && layout < 4 ? k_layouts[layout] : "?";
}

static int print_manifest(const moeq_moe *moe, const cli_moe_layer *ml, const char *layer,
                          int json) {
    uint32_t n = moeq_moe_param_count(moe);
    const moeq_moe_config *mc = &ml->mc;
    if (json) {
        printf("{\"layer\":");
        cli_json_string(stdout, layer);
        printf(",\"scheme\":\"%s\",\"reason\":", moeq_scheme_name(ml->sel.scheme));
        cli_json_string(stdout, ml->sel.reason);
        printf(",\"group\":");
        cli_json_string(stdout, ml->res.group_name);
        printf(",\"num_experts\":%d,\"hidden_size\":%d,\"intermediate_size\":%d,"
               "\"proj_names\":[",
               (int)mc->num_experts, (int)mc->hidden_size, (int)mc->intermediate_size);
        for (int i = 0; i < 3; i++) {
            if (i) putchar(',');
            cli_json_string(stdout, ml->info.proj[i]);
        }
        printf("],\"params\":[");
    } else {
        printf("%s: %s (group %s), %d experts, hidden %d, intermediate %d\n", layer,
               moeq_scheme_name(ml->sel.scheme), ml->res.group_name ? ml->res.group_name : "-",
               (int)mc->num_experts, (int)mc->hidden_size, (int)mc->intermediate_size);
        printf("  %-24s %-5s %-20s %-38s %s\n", "parameter", "dtype", "shape",
               "loaded from <prefix>.<e>.", "layout");
    }
    for (uint32_t i = 0; i < n; i++) {
        moeq_param p;
        moeq_moe_param(moe, i, &p);
        char shape[96];
        int len = snprintf(shape, sizeof shape, "[");
        for (int32_t d = 0; d < p.ndim; d++) {
            len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%lld", d ? ", " : "",
                            (long long)p.shape[d]);
        }
        snprintf(shape + len, sizeof shape - (size_t)len, "]");
        int w13 = strncmp(p.name, "w13_", 4) == 0;
        if (json) {
            printf("%s\n{\"name\":", i ? "," : "");
            cli_json_string(stdout, p.name);
            printf(",\"dtype\":\"%s\",\"shape\":%s,\"ckpt_suffix\":", moeq_dtype_name(p.dtype),
                   shape);
            if (p.layout == MOEQ_LAYOUT_DERIVED) {
                printf("null");
            } else {
                cli_json_string(stdout, p.ckpt_suffix);
            }
            printf(",\"from\":[");
            if (p.layout != MOEQ_LAYOUT_DERIVED) {
                if (w13) {
                    if (!ml->mc.non_gated) { /* non-gated experts have no gate */
                        cli_json_string(stdout, ml->info.proj[0]);
                        putchar(',');
                    }
                    cli_json_string(stdout, ml->info.proj[1]);
                } else {
                    cli_json_string(stdout, ml->info.proj[2]);
                }
            }
            printf("],\"layout\":\"%s\",\"quant_method\":", layout_name(p.layout));
            if (p.quant_method >= 0) {
                cli_json_string(stdout, moeq_strategy_name(p.quant_method));
            } else {
                printf("null");
            }
            printf(",\"is_transposed\":%s,\"required\":%s,\"nbytes\":%llu}",
                   p.is_transposed ? "true" : "false", p.required ? "true" : "false",
                   (unsigned long long)p.nbytes);
            continue;
        }
        char from[128];
        if (p.layout == MOEQ_LAYOUT_DERIVED) {
            snprintf(from, sizeof from, "(computed by finalize)");
        } else if (w13 && ml->mc.non_gated) {
            snprintf(from, sizeof from, "%s.%s", ml->info.proj[1], p.ckpt_suffix);
        } else if (w13) {
            snprintf(from, sizeof from, "{%s,%s}.%s", ml->info.proj[0], ml->info.proj[1],
                     p.ckpt_suffix);
        } else {
            snprintf(from, sizeof from, "%s.%s", ml->info.proj[2], p.ckpt_suffix);
        }
        printf("  %-24s %-5s %-20s %-38s %s%s%s\n", p.name, moeq_dtype_name(p.dtype), shape, from,
               layout_name(p.layout), p.is_transposed ? ", transposed" : "",
               p.required ? "" : ", optional");
    }
    printf(json ? "\n]}\n" : "");
    return CLI_OK;
}

int cmd_manifest(int argc, char **argv) {
    const char *config_path = NULL, *layer = NULL, *proj_arg = NULL;
    long experts = 0, hidden = 0, inter = 0;
    int json = 0;
    moeq_select_options so = {MOEQ_PLATFORM_CPU, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            manifest_usage(stdout);
            return CLI_OK;
        } else if (!strcmp(a, "--layer") && has) {
            layer = argv[++i];
        } else if (!strcmp(a, "--experts") && has) {
            if (cli_parse_long("manifest", a, argv[++i], 1, 1 << 20, &experts) != 0)
                return CLI_USAGE;
        } else if (!strcmp(a, "--hidden") && has) {
            if (cli_parse_long("manifest", a, argv[++i], 1, 1 << 24, &hidden) != 0)
                return CLI_USAGE;
        } else if (!strcmp(a, "--intermediate") && has) {
            if (cli_parse_long("manifest", a, argv[++i], 1, 1 << 24, &inter) != 0) return CLI_USAGE;
        } else if (!strcmp(a, "--proj") && has) {
            proj_arg = argv[++i];
        } else if (!strcmp(a, "--platform") && has) {
            if (cli_parse_platform("manifest", argv[++i], &so.platform) != 0) return CLI_USAGE;
        } else if (!strcmp(a, "--prefer-mxint4")) {
            so.prefer_mxint4 = 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (a[0] == '-' || config_path) {
            fprintf(stderr, "moeq manifest: unexpected argument '%s'\n\n", a);
            manifest_usage(stderr);
            return CLI_USAGE;
        } else {
            config_path = a;
        }
    }
    if (!config_path || !layer) {
        fprintf(stderr, "moeq manifest: %s\n\n",
                !config_path ? "a CONFIG is required" : "--layer PREFIX is required");
        manifest_usage(stderr);
        return CLI_USAGE;
    }
    /* --proj G,U,D */
    char proj_buf[256];
    const char *proj[3] = {NULL, NULL, NULL};
    if (proj_arg) {
        snprintf(proj_buf, sizeof proj_buf, "%s", proj_arg);
        char *save = NULL, *tok = strtok_r(proj_buf, ",", &save);
        int n = 0;
        while (tok && n < 3) {
            proj[n++] = tok;
            tok = strtok_r(NULL, ",", &save);
        }
        if (n != 3 || tok || strlen(proj_arg) >= sizeof proj_buf) {
            fprintf(stderr, "moeq manifest: --proj takes three names GATE,UP,DOWN, got '%s'\n",
                    proj_arg);
            return CLI_USAGE;
        }
    }

    moeq_error err;
    moeq_config *cfg = cli_load_config(config_path);
    if (!cfg) return CLI_USAGE;
    moeq_model_moe mm;
    if (cli_model_moe(cfg, config_path, &mm) != CLI_OK) {
        moeq_config_destroy(cfg);
        return CLI_FAILED;
    }
    struct {
        long *value;
        int32_t model;
        const char *what, *flag;
    } dims[3] = {{&experts, mm.num_experts, "expert count", "--experts"},
                 {&hidden, mm.hidden_size, "hidden_size", "--hidden"},
                 {&inter, mm.intermediate_size, "expert intermediate size", "--intermediate"}};
    /* a layer moe_sparsity_config prunes holds its retained experts */
    if (cli_layer_experts(cfg, layer, mm.num_experts, &dims[0].model) != CLI_OK) {
        moeq_config_destroy(cfg);
        return CLI_FAILED;
    }
    for (int d = 0; d < 3; d++) {
        if (*dims[d].value) continue;
        if (dims[d].model < 1 || dims[d].model > (1 << 24)) {
            fprintf(stderr, "moeq manifest: %s has no usable %s; give %s\n", config_path,
                    dims[d].what, dims[d].flag);
            moeq_config_destroy(cfg);
            return CLI_USAGE;
        }
        *dims[d].value = dims[d].model;
    }
    int rc = CLI_FAILED;
    cli_moe_layer ml;
    moeq_moe *moe = NULL;
    if (cli_moe_layer_setup(cfg, &mm, layer, proj_arg ? proj : NULL, (int32_t)experts,
                            (int32_t)hidden, (int32_t)inter, -1, &so, &ml) == CLI_OK) {
        if (moeq_moe_create(&ml.mc, &moe, &err) != MOEQ_OK) {
            cli_print_error(layer, &err);
        } else {
            rc = print_manifest(moe, &ml, layer, json);
        }
    }
    moeq_moe_destroy(moe);
    moeq_config_destroy(cfg);
    return rc;
}

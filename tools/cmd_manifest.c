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
            "                     [--prefer-mxint4] [--json]\n"
            "       moeq manifest CONFIG --layer MODULE [--in N --out M[,M2,...]] [--json]\n\n"
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
            "A linear MODULE (model.layers.0.self_attn.o_proj; a fused qkv_proj or\n"
            "gate_up_proj) gets the parameters moeq_linear_create declares, in the names\n"
            "engines give them (weight_packed, weight_scale, input_scale, ...; a fused\n"
            "module's per shard: q_proj.weight_scale): give its sizes with --in N and\n"
            "--out M (a fused module's per shard: --out 4096,512,512), or let them come\n"
            "from the tensors when CONFIG is a model directory that stores MODULE.\n\n"
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

static int print_linear_manifest(const moeq_linear *lin, const cli_linear *cl, int json) {
    const char *layer = cl->lc.name;
    const char *dot = strrchr(layer, '.');
    const char *last = dot ? dot + 1 : layer;
    if (json) {
        printf("{\"layer\":");
        cli_json_string(stdout, layer);
        printf(",\"kind\":\"linear\",\"scheme\":\"%s\",\"reason\":",
               moeq_scheme_name(cl->sel.scheme));
        cli_json_string(stdout, cl->sel.reason);
        printf(",\"group\":");
        cli_json_string(stdout, cl->res.group_name);
        printf(",\"in_features\":%d,\"out_features\":%d,\"shards\":[", (int)cl->lc.in_features,
               (int)cl->lc.out_features);
        for (int j = 0; j < cl->n_shards; j++) {
            printf("%s{\"name\":", j ? "," : "");
            cli_json_string(stdout, cl->shard_names[j]);
            printf(",\"out_features\":%d}", (int)cl->shard_out[j]);
        }
        printf("],\"params\":[");
    } else {
        cli_linear_describe(stdout, cl);
        printf("  %-28s %-7s %-16s %-34s %s\n", "parameter", "dtype", "shape", "loaded from",
               "layout");
    }
    for (uint32_t i = 0; i < moeq_linear_param_count(lin); i++) {
        moeq_param p;
        moeq_linear_param(lin, i, &p);
        char shape[96];
        int len = snprintf(shape, sizeof shape, "[");
        for (int32_t d = 0; d < p.ndim; d++) {
            len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%lld", d ? ", " : "",
                            (long long)p.shape[d]);
        }
        snprintf(shape + len, sizeof shape - (size_t)len, "]");
        /* the checkpoint tensor: <module>.<suffix>, the shard's module when fused */
        char from[160];
        const char *pdot = strchr(p.name, '.');
        if (p.layout == MOEQ_LAYOUT_DERIVED) {
            snprintf(from, sizeof from, "(computed by finalize)");
        } else if (cl->n_shards && pdot) {
            snprintf(from, sizeof from, "%.*s.%s", (int)(pdot - p.name), p.name, p.ckpt_suffix);
        } else {
            snprintf(from, sizeof from, "%s.%s", last, p.ckpt_suffix);
        }
        if (json) {
            printf("%s\n{\"name\":", i ? "," : "");
            cli_json_string(stdout, p.name);
            printf(",\"dtype\":\"%s\",\"shape\":%s,\"from\":", moeq_dtype_name(p.dtype), shape);
            if (p.layout == MOEQ_LAYOUT_DERIVED) {
                printf("null");
            } else {
                cli_json_string(stdout, from);
            }
            printf(",\"is_transposed\":%s,\"required\":%s,\"nbytes\":%llu}",
                   p.is_transposed ? "true" : "false", p.required ? "true" : "false",
                   (unsigned long long)p.nbytes);
            continue;
        }
        printf("  %-28s %-7s %-16s %-34s %s%s\n", p.name, moeq_dtype_name(p.dtype), shape, from,
               p.is_transposed ? "transposed" : "-", p.required ? "" : ", optional");
    }
    printf(json ? "\n]}\n" : "");
    return CLI_OK;
}

/* `moeq manifest` of a linear module: sizes from --in/--out, else from the
 * tensors of the model directory CONFIG.  Returns -1 when LAYER is not one
 * (the MoE manifest then runs). */
static int linear_manifest(const moeq_config *cfg, const char *config_path, const char *layer,
                           long in, const char *out_arg, const moeq_select_options *so, int json) {
    cli_linear cl;
    memset(&cl, 0, sizeof cl);
    if (in || out_arg) {
        if (!in || !out_arg) {
            fprintf(stderr, "moeq manifest: --in and --out go together\n");
            return CLI_USAGE;
        }
        int n = 0;
        long outs[4] = {0, 0, 0, 0};
        char buf[128];
        snprintf(buf, sizeof buf, "%s", out_arg);
        char *save = NULL;
        for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (n == 4 || cli_parse_long("manifest", "--out", tok, 1, 1 << 24, &outs[n]) != 0)
                return CLI_USAGE;
            n++;
        }
        int fused = n > 1 ? cli_linear_fused(layer, &cl) : 0;
        if (n > 1 && fused != n) {
            fprintf(stderr,
                    "moeq manifest: --out %s gives %d shards, but %s is %s (qkv_proj takes 3, "
                    "gate_up_proj 2)\n",
                    out_arg, n, layer, fused ? "another fused name" : "not a fused name");
            return CLI_USAGE;
        }
        if (cli_linear_resolve(cfg, layer, so, &cl) != CLI_OK) return CLI_FAILED;
        cl.lc.in_features = (int32_t)in;
        long sum = 0;
        for (int j = 0; j < n; j++) sum += outs[j];
        cl.lc.out_features = (int32_t)sum;
        if (n > 1) {
            cl.n_shards = n;
            for (int j = 0; j < n; j++) cl.shard_out[j] = (int32_t)outs[j];
            cl.lc.num_shards = n;
            cl.lc.shard_names = cl.shard_names;
            cl.lc.shard_out_features = cl.shard_out;
        }
    } else {
        moeq_checkpoint *ck = NULL;
        moeq_error cerr;
        if (moeq_checkpoint_open(config_path, &ck, &cerr) != MOEQ_OK) return -1;
        int found = cli_linear_find(ck, layer, &cl);
        int rc = found ? cli_linear_setup(cfg, ck, layer, so, &cl) : -1;
        moeq_checkpoint_close(ck);
        if (rc != CLI_OK) return rc;
    }
    moeq_linear *lin = NULL;
    moeq_error err;
    int rc = CLI_FAILED;
    if (moeq_linear_create(&cl.lc, &lin, &err) != MOEQ_OK) {
        cli_print_error(layer, &err);
    } else {
        rc = print_linear_manifest(lin, &cl, json);
    }
    moeq_linear_destroy(lin);
    return rc;
}

int cmd_manifest(int argc, char **argv) {
    const char *config_path = NULL, *layer = NULL, *proj_arg = NULL;
    long experts = 0, hidden = 0, inter = 0, in = 0;
    const char *out_arg = NULL;
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
        } else if (!strcmp(a, "--in") && has) {
            if (cli_parse_long("manifest", a, argv[++i], 1, 1 << 24, &in) != 0) return CLI_USAGE;
        } else if (!strcmp(a, "--out") && has) {
            out_arg = argv[++i];
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
    int lrc = linear_manifest(cfg, config_path, layer, in, out_arg, &so, json);
    if (lrc >= 0) {
        moeq_config_destroy(cfg);
        return lrc;
    }
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
            fprintf(stderr,
                    "moeq manifest: %s has no usable %s; give %s (for a linear module: --in "
                    "and --out)\n",
                    config_path, dims[d].what, dims[d].flag);
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

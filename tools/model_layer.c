/*
 * model_layer.c - one MoE layer of a model as its config.json describes it:
 * the dimensions under their various model_type spellings, the resolution and
 * scheme, and the moeq_moe_config `moeq run` and `moeq manifest` create it with.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

const char *const cli_keys_experts[] = {"num_experts", "n_routed_experts", "num_local_experts",
                                        NULL};
const char *const cli_keys_top_k[] = {"num_experts_per_tok", "moe_topk", NULL};
const char *const cli_keys_hidden[] = {"hidden_size", NULL};
const char *const cli_keys_intermediate[] = {"moe_intermediate_size", "intermediate_size", NULL};

double cli_model_number(const moeq_config *cfg, const char *const *keys, double fallback,
                        int *found) {
    double v;
    for (const char *const *k = keys; *k; k++) {
        if (moeq_config_model_number(cfg, *k, &v) == MOEQ_OK) {
            if (found) *found = 1;
            return v;
        }
    }
    if (found) *found = 0;
    return fallback;
}

int cli_moe_layer_setup(const moeq_config *cfg, const char *layer, const char *const proj[3],
                        int32_t experts, int32_t hidden, int32_t intermediate,
                        const moeq_select_options *so, cli_moe_layer *out) {
    memset(out, 0, sizeof *out);
    static const char *const hf[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int i = 0; i < 3; i++) out->proj[i] = proj ? proj[i] : hf[i];
    moeq_error err;
    if (moeq_resolve_moe(cfg, layer, (uint32_t)experts, out->proj, NULL, &out->res, &err) !=
            MOEQ_OK ||
        moeq_select(&out->res, layer, so, &out->sel, &err) != MOEQ_OK) {
        cli_print_error(layer, &err);
        return CLI_FAILED;
    }
    const char *act = moeq_config_model_string(cfg, "hidden_act");
    const char *dtype = moeq_config_model_string(cfg, "torch_dtype");
    moeq_moe_config *mc = &out->mc;
    if (moeq_moe_config_init(mc, cfg, &out->res, &out->sel, &err) != MOEQ_OK) {
        cli_print_error(layer, &err);
        return CLI_FAILED;
    }
    mc->prefix = layer;
    mc->proj_names = out->proj;
    mc->num_experts = experts;
    mc->hidden_size = hidden;
    mc->intermediate_size = intermediate;
    mc->activation = act && !strcmp(act, "gelu") ? MOEQ_ACT_GELU
                     : act && (!strcmp(act, "gelu_pytorch_tanh") || !strcmp(act, "gelu_new"))
                         ? MOEQ_ACT_GELU_TANH
                         : MOEQ_ACT_SILU;
    mc->params_dtype = dtype && !strcmp(dtype, "float32")   ? MOEQ_DTYPE_F32
                       : dtype && !strcmp(dtype, "float16") ? MOEQ_DTYPE_F16
                                                            : MOEQ_DTYPE_BF16;
    return CLI_OK;
}

void cli_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') {
            fprintf(f, "\\%c", *p);
        } else if (*p == '\n') {
            fputs("\\n", f);
        } else if (*p < 0x20) {
            fprintf(f, "\\u%04x", *p);
        } else {
            fputc(*p, f);
        }
    }
    fputc('"', f);
}

int cli_parse_platform(const char *cmd, const char *text, int32_t *platform) {
    if (!strcmp(text, "cpu")) {
        *platform = MOEQ_PLATFORM_CPU;
    } else if (!strcmp(text, "npu")) {
        *platform = MOEQ_PLATFORM_NPU;
    } else {
        fprintf(stderr, "moeq %s: --platform takes cpu or npu, got '%s'\n", cmd, text);
        return -1;
    }
    return 0;
}

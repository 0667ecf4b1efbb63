/*
 * model_layer.c - one MoE layer of a model as its config.json describes it:
 * the dimensions under their various model_type spellings, the resolution and
 * scheme, and the moeq_moe_config `moeq run` and `moeq manifest` create it with.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cli_model_moe(const moeq_config *cfg, const char *what, moeq_model_moe *mm) {
    moeq_error err;
    if (moeq_model_moe_get(cfg, mm, &err) != MOEQ_OK) {
        cli_print_error(what, &err);
        return CLI_FAILED;
    }
    if (mm->unknown_defaults) {
        fprintf(stderr,
                "moeq: warning: model_type '%s' is not in moeq's family table and config.json "
                "does not say everything; took %s\n",
                mm->model_type[0] ? mm->model_type : "(none)", mm->defaults);
    }
    return CLI_OK;
}

int cli_layer_experts(const moeq_config *cfg, const char *layer, int32_t model, int32_t *out) {
    moeq_error err;
    int32_t k = 0;
    if (moeq_config_retained_experts(cfg, layer, &k, &err) != MOEQ_OK) {
        cli_print_error(layer, &err);
        return CLI_FAILED;
    }
    *out = k > 0 ? k : model;
    return CLI_OK;
}

void cli_print_routing(FILE *f, const moeq_model_moe *mm) {
    char line[256];
    moeq_model_moe_summary(mm, line, sizeof line);
    fprintf(f, "model: %s%s; routing: %s\n",
            mm->family[0] ? mm->family : (mm->model_type[0] ? mm->model_type : "unknown"),
            mm->known ? "" : " (not in the family table)", line);
    if (mm->defaults[0]) fprintf(f, "  not in config.json, taken from the family: %s\n", mm->defaults);
}

int cli_moe_layer_setup(const moeq_config *cfg, const moeq_model_moe *mm, const char *layer,
                        const char *const proj[3], int32_t experts, int32_t hidden,
                        int32_t intermediate, int32_t has_bias, const moeq_select_options *so,
                        cli_moe_layer *out) {
    memset(out, 0, sizeof *out);
    if (strlen(layer) >= sizeof out->info.prefix) {
        fprintf(stderr, "moeq: %s: the layer name is too long\n", layer);
        return CLI_FAILED;
    }
    snprintf(out->info.prefix, sizeof out->info.prefix, "%s", layer);
    out->info.experts = experts;
    out->info.has_bias = has_bias < 0 ? mm->expert_bias : has_bias;
    for (int i = 0; i < 3; i++) out->info.proj[i] = proj ? proj[i] : mm->proj[i];
    moeq_model_moe dims = *mm;
    dims.hidden_size = hidden;
    dims.intermediate_size = intermediate;
    moeq_error err;
    if (moeq_model_layer_config(cfg, &dims, &out->info, so, &out->res, &out->sel, &out->mc, &err) !=
        MOEQ_OK) {
        cli_print_error(layer, &err);
        return CLI_FAILED;
    }
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

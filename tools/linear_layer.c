/*
 * linear_layer.c - one linear module of a checkpoint for `moeq run` and
 * `moeq manifest`: whether LAYER is one (its tensors, as `moeq inspect`
 * groups them: "<LAYER>.<param>" with no expert number in between), its
 * shards when it is a fused name the checkpoint stores split (qkv_proj from
 * q/k/v_proj, gate_up_proj from gate/up_proj, moeq_resolve's default fused
 * names), and its dimensions, which moeq_dequantize reads off the tensors.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* moeq_resolve's default fused names (moeq_resolve_options). */
static const char *const k_qkv[] = {"q_proj", "k_proj", "v_proj"};
static const char *const k_gate_up[] = {"gate_proj", "up_proj"};
static const struct {
    const char *fused;
    int n;
    const char *const *shards;
} k_fused[] = {{"qkv_proj", 3, k_qkv}, {"gate_up_proj", 2, k_gate_up}};

/* The tensors "<module>.<param>" of the checkpoint (params without dots);
 * returns how many (at most max) and whether one is a bias. */
static uint32_t module_tensors(const moeq_checkpoint *ck, const char *module, moeq_tensor *out,
                               uint32_t max, int *bias) {
    size_t len = strlen(module);
    uint32_t n = 0;
    uint64_t count = moeq_checkpoint_tensor_count(ck);
    for (uint64_t i = 0; i < count; i++) {
        moeq_tensor t;
        moeq_checkpoint_tensor(ck, i, &t);
        if (strncmp(t.name, module, len) != 0 || t.name[len] != '.' ||
            strchr(t.name + len + 1, '.')) {
            continue;
        }
        if (strcmp(t.name + len + 1, "bias") == 0) *bias = 1;
        if (n < max) out[n] = t;
        n++;
    }
    return n < max ? n : max;
}

/* [out, in] of one module from its weight tensors (moeq_dequantize's check
 * of them, without dequantizing); prints why not. */
static int module_shape(const moeq_checkpoint *ck, const moeq_resolution *res, uint32_t flags,
                        const char *module, int64_t shape[2], int *bias) {
    moeq_tensor t[16];
    uint32_t n = module_tensors(ck, module, t, 16, bias);
    moeq_error err;
    /* an ignored or unmatched module is stored dense */
    const bool quant = res->status == MOEQ_MATCH_QUANTIZED && res->weights;
    if (moeq_dequantize(quant ? res->weights : NULL, quant ? res->format : MOEQ_FORMAT_DENSE, flags,
                        module, t, n, MOEQ_DTYPE_F32, NULL, 0, shape, &err) != MOEQ_OK) {
        cli_print_error(module, &err);
        return CLI_FAILED;
    }
    if (shape[0] > INT32_MAX || shape[1] > INT32_MAX) {
        fprintf(stderr, "moeq: %s: [%lld, %lld] is too large for a linear layer\n", module,
                (long long)shape[0], (long long)shape[1]);
        return CLI_FAILED;
    }
    return CLI_OK;
}

int cli_linear_find(const moeq_checkpoint *ck, const char *layer, cli_linear *out) {
    memset(out, 0, sizeof *out);
    int bias = 0;
    moeq_tensor t;
    if (module_tensors(ck, layer, &t, 1, &bias) > 0) return 1; /* stored as one module */
    const char *dot = strrchr(layer, '.');
    const char *last = dot ? dot + 1 : layer;
    size_t plen = dot ? (size_t)(dot - layer) + 1 : 0;
    for (size_t f = 0; f < sizeof k_fused / sizeof k_fused[0]; f++) {
        if (strcmp(last, k_fused[f].fused) != 0) continue;
        for (int j = 0; j < k_fused[f].n; j++) {
            char shard[512];
            snprintf(shard, sizeof shard, "%.*s%s", (int)plen, layer, k_fused[f].shards[j]);
            if (module_tensors(ck, shard, &t, 1, &bias) == 0) return 0;
            out->shard_names[j] = k_fused[f].shards[j];
        }
        out->n_shards = k_fused[f].n;
        return 1;
    }
    return 0;
}

int cli_linear_resolve(const moeq_config *cfg, const char *layer, const moeq_select_options *so,
                       cli_linear *cl) {
    moeq_error err;
    if (moeq_resolve(cfg, layer, MOEQ_MODULE_LINEAR, NULL, &cl->res, &err) != MOEQ_OK ||
        moeq_select(&cl->res, layer, so, &cl->sel, &err) != MOEQ_OK ||
        moeq_linear_config_init(&cl->lc, cfg, &cl->res, &cl->sel, &err) != MOEQ_OK) {
        cli_print_error(layer, &err);
        return CLI_FAILED;
    }
    cl->lc.name = layer;
    moeq_model_moe mm; /* the model's dtype for the float parameters, when it says one */
    if (moeq_model_moe_get(cfg, &mm, &err) == MOEQ_OK) cl->lc.params_dtype = mm.params_dtype;
    return CLI_OK;
}

int cli_linear_fused(const char *layer, cli_linear *cl) {
    const char *dot = strrchr(layer, '.');
    const char *last = dot ? dot + 1 : layer;
    for (size_t f = 0; f < sizeof k_fused / sizeof k_fused[0]; f++) {
        if (strcmp(last, k_fused[f].fused) != 0) continue;
        for (int j = 0; j < k_fused[f].n; j++) cl->shard_names[j] = k_fused[f].shards[j];
        return k_fused[f].n;
    }
    return 0;
}

int cli_linear_setup(const moeq_config *cfg, const moeq_checkpoint *ck, const char *layer,
                     const moeq_select_options *so, cli_linear *cl) {
    if (cli_linear_resolve(cfg, layer, so, cl) != CLI_OK) return CLI_FAILED;
    const uint32_t flags = moeq_config_dequant_flags(cfg);
    int bias = 0;
    int64_t shape[2];
    if (cl->n_shards == 0) {
        if (module_shape(ck, &cl->res, flags, layer, shape, &bias) != CLI_OK) return CLI_FAILED;
        cl->lc.out_features = (int32_t)shape[0];
        cl->lc.in_features = (int32_t)shape[1];
    } else {
        int64_t sum = 0;
        for (int j = 0; j < cl->n_shards; j++) {
            char shard[512];
            const char *dot = strrchr(layer, '.');
            snprintf(shard, sizeof shard, "%.*s%s", dot ? (int)(dot - layer) + 1 : 0, layer,
                     cl->shard_names[j]);
            if (module_shape(ck, &cl->res, flags, shard, shape, &bias) != CLI_OK) return CLI_FAILED;
            if (j > 0 && shape[1] != cl->lc.in_features) {
                fprintf(stderr, "moeq: %s: the shards' in_features differ (%s: %lld, %s: %d)\n",
                        layer, cl->shard_names[j], (long long)shape[1], cl->shard_names[0],
                        (int)cl->lc.in_features);
                return CLI_FAILED;
            }
            cl->lc.in_features = (int32_t)shape[1];
            cl->shard_out[j] = (int32_t)shape[0];
            sum += shape[0];
        }
        if (sum > INT32_MAX) {
            fprintf(stderr, "moeq: %s: %lld output features is too many\n", layer, (long long)sum);
            return CLI_FAILED;
        }
        cl->lc.out_features = (int32_t)sum;
        cl->lc.num_shards = cl->n_shards;
        cl->lc.shard_names = cl->shard_names;
        cl->lc.shard_out_features = cl->shard_out;
    }
    cl->lc.has_bias = bias;
    return CLI_OK;
}

void cli_linear_describe(FILE *f, const cli_linear *cl) {
    fprintf(f, "%s: linear, %s (group %s), in %d, out %d", cl->lc.name,
            moeq_scheme_name(cl->sel.scheme), cl->res.group_name ? cl->res.group_name : "-",
            (int)cl->lc.in_features, (int)cl->lc.out_features);
    if (cl->n_shards) {
        fprintf(f, " fused from");
        for (int j = 0; j < cl->n_shards; j++) {
            fprintf(f, "%s %s [%d]", j ? "," : "", cl->shard_names[j], (int)cl->shard_out[j]);
        }
    }
    if (cl->lc.has_bias) fprintf(f, ", with bias");
    fputc('\n', f);
}

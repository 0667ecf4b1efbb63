/*
 * synth_dump.c - writes synthetic checkpoints for the compressed-tensors
 * cross-check (tests/conformance/crosscheck_synth.py), using the public API
 * only.
 *
 *   synth_dump OUTDIR [PRESET...]      (default: every preset, then "custom-mix")
 *
 * "custom-mix" is a layout of its own (check_synth's custom layout): an F16
 * model in two shards with naive-quantized int4 actorder experts and static
 * asymmetric int8 inputs, FP8 static shared experts plus one router by exact
 * name, NVFP4 W4A4 attention (q/k/v share a global scale).
 *
 * For each preset: OUTDIR/<preset>/ (the checkpoint, as moeq_synth_write
 * makes it) and OUTDIR/<preset>.reference.safetensors holding, for every
 * Linear module, "<module>.original" (the F32 weight before compression, from
 * moeq_synth_original), for every quantized one "<module>.moeq"
 * (moeq_dequantize's F32 result) and, for every one with static input
 * tensors, "<module>.calibration" (the batch they were computed from).
 * Prints one line per preset.
 */
#include <moeq/moeq.h>

#include "synth_custom.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, const moeq_error *err) {
    fprintf(stderr, "synth_dump: %s: %s\n", what, err->message);
    return 1;
}

/* A module's tensors from the checkpoint: "<module>.<param>" for every param. */
static uint32_t module_tensors(const moeq_checkpoint *ck, const char *module, moeq_tensor *out) {
    static const char *const params[] = {
        "weight",       "weight_packed", "weight_scale",       "weight_zero_point",
        "weight_g_idx", "weight_shape",  "weight_global_scale"};
    uint32_t n = 0;
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++) {
        char name[600];
        snprintf(name, sizeof name, "%s.%s", module, params[i]);
        if (moeq_checkpoint_find(ck, name, &out[n]) == MOEQ_STATUS_OK) n++;
    }
    return n;
}

static int add_f32(moeq_tensor_set **set, const char *module, const char *what, const float *v,
                   const int64_t shape[2], moeq_error *err) {
    char name[600];
    snprintf(name, sizeof name, "%s.%s", module, what);
    moeq_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.dtype = MOEQ_DTYPE_F32;
    t.ndim = 2;
    t.shape[0] = shape[0];
    t.shape[1] = shape[1];
    t.data = v;
    t.nbytes = (uint64_t)(shape[0] * shape[1]) * 4u;
    return moeq_tensor_set_add(set, &t, err) == MOEQ_STATUS_OK ? 0 : 1;
}

static moeq_status layout_for(const char *name, moeq_synth_layout *L, moeq_error *err) {
    if (strcmp(name, "custom-mix") != 0) return moeq_synth_preset(name, L, err);
    *L = custom_layout();
    return MOEQ_STATUS_OK;
}

static int dump(const char *out, const char *preset) {
    moeq_error err;
    moeq_synth_layout L;
    if (layout_for(preset, &L, &err) != MOEQ_STATUS_OK) return fail(preset, &err);
    char dir[1024], ref[1024];
    snprintf(dir, sizeof dir, "%s/%s", out, preset);
    snprintf(ref, sizeof ref, "%s/%s.reference.safetensors", out, preset);
    if (moeq_synth_write(&L, dir, &err) != MOEQ_STATUS_OK) return fail(dir, &err);
    moeq_config *cfg = NULL;
    moeq_checkpoint *ck = NULL;
    if (moeq_config_load(dir, NULL, &cfg, &err) != MOEQ_STATUS_OK) return fail(dir, &err);
    if (moeq_checkpoint_open(dir, &ck, &err) != MOEQ_STATUS_OK) return fail(dir, &err);
    moeq_tensor_set *set = NULL;
    int rc = 0;
    uint32_t n_modules = 0, n_quantized = 0;
    for (uint64_t i = 0; i < moeq_checkpoint_tensor_count(ck) && rc == 0; i++) {
        moeq_tensor t;
        moeq_checkpoint_tensor(ck, i, &t);
        const char *dot = strrchr(t.name, '.');
        if (!dot || (strcmp(dot, ".weight") != 0 && strcmp(dot, ".weight_packed") != 0)) continue;
        char module[512];
        snprintf(module, sizeof module, "%.*s", (int)(dot - t.name), t.name);
        if (strstr(module, "norm") || strstr(module, "embed_tokens")) continue;
        const int32_t kind =
            strstr(module, ".mlp.experts.") ? MOEQ_MODULE_EXPERT : MOEQ_MODULE_LINEAR;
        char wname[600];
        snprintf(wname, sizeof wname, "%s.weight", module);
        int64_t shape[2], got[2];
        if (moeq_synth_original(&L, wname, NULL, 0, shape, &err) != MOEQ_STATUS_OK)
            return fail(wname, &err);
        const size_t n = (size_t)(shape[0] * shape[1]);
        float *orig = malloc(n * sizeof *orig), *deq = malloc(n * sizeof *deq);
        moeq_synth_original(&L, wname, orig, n, shape, &err);
        rc = add_f32(&set, module, "original", orig, shape, &err);
        moeq_resolution res;
        if (rc == 0 && moeq_resolve(cfg, module, kind, NULL, &res, &err) != MOEQ_STATUS_OK) rc = 1;
        if (rc == 0 && res.status == MOEQ_MATCH_QUANTIZED && res.weights &&
            res.format != MOEQ_FORMAT_DENSE) {
            moeq_tensor mt[8];
            const uint32_t nt = module_tensors(ck, module, mt);
            rc = moeq_dequantize(res.weights, res.format, moeq_config_dequant_flags(cfg), module,
                                 mt, nt, MOEQ_DTYPE_F32, deq, n * sizeof *deq, got,
                                 &err) != MOEQ_STATUS_OK;
            if (rc == 0) rc = add_f32(&set, module, "moeq", deq, shape, &err);
            n_quantized++;
        }
        char probe[600];
        moeq_tensor pt;
        snprintf(probe, sizeof probe, "%s.input_scale", module);
        bool has_input = moeq_checkpoint_find(ck, probe, &pt) == MOEQ_STATUS_OK;
        snprintf(probe, sizeof probe, "%s.input_global_scale", module);
        has_input = has_input || moeq_checkpoint_find(ck, probe, &pt) == MOEQ_STATUS_OK;
        if (rc == 0 && has_input) {
            snprintf(probe, sizeof probe, "%s.input_calibration", module);
            int64_t cshape[2];
            rc = moeq_synth_original(&L, probe, NULL, 0, cshape, &err) != MOEQ_STATUS_OK;
            float *calib = rc ? NULL : malloc((size_t)(cshape[0] * cshape[1]) * sizeof *calib);
            if (rc == 0) {
                rc = moeq_synth_original(&L, probe, calib, (uint64_t)(cshape[0] * cshape[1]),
                                         cshape, &err) != MOEQ_STATUS_OK;
            }
            if (rc == 0) rc = add_f32(&set, module, "calibration", calib, cshape, &err);
            free(calib);
        }
        n_modules++;
        free(orig);
        free(deq);
    }
    if (rc == 0 &&
        moeq_safetensors_write(ref, moeq_tensor_set_get(set, 0), moeq_tensor_set_count(set), NULL,
                               &err) != MOEQ_STATUS_OK) {
        rc = 1;
    }
    if (rc)
        fail(preset, &err);
    else
        printf("%-24s %u modules, %u quantized -> %s\n", preset, n_modules, n_quantized, dir);
    moeq_tensor_set_destroy(set);
    moeq_checkpoint_close(ck);
    moeq_config_destroy(cfg);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: synth_dump OUTDIR [PRESET...]\n");
        return 2;
    }
    int rc = 0;
    if (argc == 2) {
        for (uint32_t i = 0; moeq_synth_preset_name(i) && rc == 0; i++)
            rc = dump(argv[1], moeq_synth_preset_name(i));
        if (rc == 0) rc = dump(argv[1], "custom-mix");
    } else {
        for (int i = 2; i < argc && rc == 0; i++) rc = dump(argv[1], argv[i]);
    }
    return rc;
}

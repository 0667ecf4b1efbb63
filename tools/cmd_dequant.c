/*
 * cmd_dequant.c - `moeq dequant CONFIG SAFETENSORS MODULE [-o OUT.npy]`:
 * resolves MODULE through the config, reads its tensors from the checkpoint
 * and writes the dequantized weight as a float32 .npy [out, in].
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "npy.h"

static void dequant_usage(FILE *f) {
    fprintf(
        f,
        "usage: moeq dequant CONFIG SAFETENSORS MODULE [-o OUT.npy]\n\n"
        "CONFIG is a model directory, its config.json or a bare quantization_config;\n"
        "SAFETENSORS a .safetensors file, an index or a model directory; MODULE a module\n"
        "name such as model.layers.3.mlp.experts.7.up_proj.  Its tensors (MODULE.weight_packed,\n"
        ".weight, .weight_scale, .weight_zero_point, .weight_g_idx, .weight_shape,\n"
        ".weight_global_scale) are read, checked and dequantized with the args MODULE\n"
        "resolves to.  With -o the result is written as a float32 .npy [out, in];\n"
        "otherwise its shape and statistics are printed.\n");
}

/* An expert projection ("...experts.<n>.<proj>") resolves as EXPERT. */
static int32_t kind_of(const char *name) {
    const char *p = strstr(name, "experts.");
    if (!p) return MOEQ_MODULE_LINEAR;
    p += 8;
    if (*p < '0' || *p > '9') return MOEQ_MODULE_LINEAR;
    while (*p >= '0' && *p <= '9') p++;
    return *p == '.' && !strchr(p + 1, '.') ? MOEQ_MODULE_EXPERT : MOEQ_MODULE_LINEAR;
}

int cmd_dequant(int argc, char **argv) {
    const char *pos[3] = {NULL, NULL, NULL}, *out_path = NULL;
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            dequant_usage(stdout);
            return CLI_OK;
        } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            out_path = argv[++i];
        } else if (argv[i][0] == '-' || npos == 3) {
            fprintf(stderr, "moeq dequant: unexpected argument '%s'\n\n", argv[i]);
            dequant_usage(stderr);
            return CLI_USAGE;
        } else {
            pos[npos++] = argv[i];
        }
    }
    if (npos != 3) {
        dequant_usage(stderr);
        return CLI_USAGE;
    }
    const char *module = pos[2];
    moeq_error err;
    moeq_config *cfg = NULL;
    moeq_checkpoint *ckpt = NULL;
    float *data = NULL;
    int rc = CLI_FAILED;
    if (!(cfg = cli_load_config(pos[0]))) return CLI_USAGE;
    if (moeq_checkpoint_open(pos[1], &ckpt, &err) != MOEQ_OK) {
        cli_print_error(pos[1], &err);
        rc = CLI_USAGE;
        goto done;
    }
    moeq_resolution res;
    if (moeq_resolve(cfg, module, kind_of(module), NULL, &res, &err) != MOEQ_OK) {
        cli_print_error(module, &err);
        goto done;
    }
    /* Ignored and unmatched modules hold their weight uncompressed. */
    int32_t format = res.status == MOEQ_MATCH_QUANTIZED ? res.format : MOEQ_FORMAT_DENSE;
    static const char *const params[] = {"weight_packed",      "weight",       "weight_scale",
                                         "weight_zero_point",  "weight_g_idx", "weight_shape",
                                         "weight_global_scale"};
    moeq_tensor tensors[7];
    char names[7][512];
    uint32_t n = 0;
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++) {
        snprintf(names[n], sizeof names[n], "%s.%s", module, params[i]);
        if (moeq_checkpoint_find(ckpt, names[n], &tensors[n]) == MOEQ_OK) n++;
    }
    if (n == 0) {
        fprintf(stderr, "moeq: %s: no tensor named %s.weight* in %s\n", module, module, pos[1]);
        goto done;
    }
    uint32_t flags = moeq_config_dequant_flags(cfg);
    int64_t shape[2];
    if (moeq_dequantize(res.weights, format, flags, module, tensors, n, MOEQ_DTYPE_F32, NULL, 0,
                        shape, &err) != MOEQ_OK) {
        cli_print_error(module, &err);
        goto done;
    }
    uint64_t bytes = (uint64_t)shape[0] * (uint64_t)shape[1] * 4u;
    data = malloc(bytes ? bytes : 1);
    if (!data) {
        fprintf(stderr, "moeq: out of memory (%llu bytes)\n", (unsigned long long)bytes);
        goto done;
    }
    if (moeq_dequantize(res.weights, format, flags, module, tensors, n, MOEQ_DTYPE_F32, data, bytes,
                        shape, &err) != MOEQ_OK) {
        cli_print_error(module, &err);
        goto done;
    }
    char args[128] = "unquantized";
    if (res.weights && format != MOEQ_FORMAT_DENSE) {
        moeq_quant_args_summary(res.weights, args, sizeof args);
    }
    if (out_path) {
        char msg[512];
        if (npy_write(out_path, MOEQ_DTYPE_F32, 2, shape, data, msg, sizeof msg) != 0) {
            fprintf(stderr, "moeq: %s\n", msg);
            goto done;
        }
        printf("%s: %s, %s -> %s float32 [%lld, %lld]\n", module, moeq_format_name(format), args,
               out_path, (long long)shape[0], (long long)shape[1]);
    } else {
        double sum = 0, sq = 0, lo = HUGE_VAL, hi = -HUGE_VAL;
        size_t count = (size_t)(shape[0] * shape[1]);
        for (size_t i = 0; i < count; i++) {
            double v = (double)data[i];
            sum += v;
            sq += v * v;
            lo = fmin(lo, v);
            hi = fmax(hi, v);
        }
        double mean = count ? sum / (double)count : 0;
        printf("%s: %s, %s: [%lld, %lld], min %.6g, max %.6g, mean %.6g, rms %.6g\n", module,
               moeq_format_name(format), args, (long long)shape[0], (long long)shape[1],
               count ? lo : 0, count ? hi : 0, mean, count ? sqrt(sq / (double)count) : 0);
    }
    rc = CLI_OK;
done:
    free(data);
    moeq_checkpoint_close(ckpt);
    moeq_config_destroy(cfg);
    return rc;
}

/*
 * bench_layer.h - what the layer benchmarks (moe_bench, linear_bench,
 * moe_ggml_bench, kern_ab) share: the layer's shape, a xorshift stream,
 * medians, routing draws, and building a moeq
 * layer of a scheme fast (created, parameters filled with random codes and
 * valid scales, finalized; no quantizer runs).  Header-only, static: each
 * benchmark is one program.
 */
#ifndef MOEQ_BENCH_LAYER_H
#define MOEQ_BENCH_LAYER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "kernels.h"
#include "layer/moe.h"
#include "moeq/moeq.h"

enum { TOPK = 8, MAX_REPS = 256, MAX_LAYERS = 8 };
__attribute__((unused)) static int g_E = 128, g_H = 2048, g_I = 768;

__attribute__((unused)) static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

__attribute__((unused)) static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

__attribute__((unused)) static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
__attribute__((unused)) static uint64_t rnd(void) {
    return bench_xorshift(&g_rng);
}
__attribute__((unused)) static double uni(void) {
    return (double)(rnd() >> 11) / 9007199254740992.0;
}

/* ---- routing ----------------------------------------------------------------------- */

__attribute__((unused)) static void draw_routing(int T, int32_t *ids, float *w) {
    for (int t = 0; t < T; t++) {
        float sum = 0;
        for (int j = 0; j < TOPK; j++) {
            int e;
            bool again;
            do {
                e = (int)(uni() * g_E);
                again = false;
                for (int i = 0; i < j; i++) again |= ids[t * TOPK + i] == e;
            } while (again);
            ids[t * TOPK + j] = e;
            w[t * TOPK + j] = (float)(0.1 + uni());
            sum += w[t * TOPK + j];
        }
        for (int j = 0; j < TOPK; j++) w[t * TOPK + j] /= sum;
    }
}

__attribute__((unused)) static int distinct_experts(int T, const int32_t *ids) {
    static uint8_t seen[4096];
    memset(seen, 0, (size_t)g_E);
    int n = 0;
    for (int i = 0; i < T * TOPK; i++) {
        if (!seen[ids[i]]) {
            seen[ids[i]] = 1;
            n++;
        }
    }
    return n;
}

/* ---- building layers ---------------------------------------------------------------- */

typedef struct scheme_def {
    const char *name;
    const char *weights, *inputs, *format;
} scheme_def;

#define BENCH_MX_W(bits)                                                                           \
    "{\"num_bits\":" #bits ",\"type\":\"float\",\"group_size\":32,\"scale_dtype\":\"torch."        \
                           "uint8\"}"
#define BENCH_MX_A8                                                                                \
    "{\"num_bits\":8,\"type\":\"float\",\"group_size\":32,\"dynamic\":true,"                       \
    "\"scale_dtype\":\"torch.uint8\"}"

static const scheme_def k_schemes[] = {
    {"wna16", "{\"num_bits\":4,\"group_size\":128}", "null", "pack-quantized"},
    {"w8a8_int8", "{\"num_bits\":8,\"strategy\":\"channel\"}",
     "{\"num_bits\":8,\"strategy\":\"token\",\"dynamic\":true}", "int-quantized"},
    {"w8a8_fp8", "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"token\",\"dynamic\":true}",
     "float-quantized"},
    {"w4a4_nvfp4",
     "{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\",\"group_size\":16,"
     "\"scale_dtype\":\"torch.float8_e4m3fn\"}",
     "{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\",\"group_size\":16,"
     "\"dynamic\":\"local\"}",
     "nvfp4-pack-quantized"},
    {"w4a16_mxfp4",
     "{\"num_bits\":4,\"type\":\"float\",\"group_size\":32,\"scale_dtype\":\"torch.uint8\"}",
     "null", "mxfp4-pack-quantized"},
    /* beyond the list: int4 weights on int8 and on FP8 activations */
    {"w4a8_int8", "{\"num_bits\":4,\"group_size\":128}",
     "{\"num_bits\":8,\"strategy\":\"token\",\"dynamic\":true}", "pack-quantized"},
    {"w4a8_fp8", "{\"num_bits\":4,\"group_size\":128}",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"token\",\"dynamic\":true}",
     "pack-quantized"},
    /* compressed-tensors 0.20's MX presets (MXFP8A16, MXFP8, MXFP6A16, MXFP6A8, MXFP4XFP8) */
    {"w8a16_mxfp8", BENCH_MX_W(8), "null", "mxfp8-quantized"},
    {"w8a8_mxfp8", BENCH_MX_W(8), BENCH_MX_A8, "mxfp8-quantized"},
    {"w6a16_mxfp6", BENCH_MX_W(6), "null", "mxfp6-pack-quantized"},
    {"w6a8_mxfp6", BENCH_MX_W(6), BENCH_MX_A8, "mxfp6-pack-quantized"},
    {"w4a8_mxfp4", BENCH_MX_W(4),
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"group\",\"group_size\":128,"
     "\"dynamic\":true}",
     "mxfp4-pack-quantized"},
};

/* How many copies of a scheme's layer a benchmark cycles so that each run
 * reads its experts from DRAM: 3 layers of 4- and 6-bit codes (321 MB each
 * for int4), 2 of 8-bit ones, a gigabyte or more either way. */
__attribute__((unused)) static int cold_layers(const scheme_def *s) {
    return strstr(s->name, "w8") ? 2 : 3;
}

/* Resident memory of the process, MB. */
__attribute__((unused)) static double rss_mb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (double)resident * 4096.0 / 1e6;
}

/* The program's name, for die's messages (each benchmark sets its own). */
__attribute__((unused)) static const char *g_prog = "moe_bench";

__attribute__((unused)) static void die(const char *what, const moeq_error *err) {
    fprintf(stderr, "%s: %s: %s\n", g_prog, what, err ? err->message : "");
    exit(1);
}

__attribute__((unused)) static void fill_random_bytes(uint8_t *p, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t r = rnd();
        memcpy(p + i, &r, 8);
    }
    for (; i < n; i++) p[i] = (uint8_t)rnd();
}

/* Random codes and valid scales straight into the parameters. */
__attribute__((unused)) static void fill_params(moeq_moe *layer) {
    moeq_moe *l = layer;
    for (uint32_t i = 0; i < l->n_params; i++) {
        moeq__param *p = &l->params[i];
        moeq_param *q = &p->pub;
        if (!q->required || q->layout == MOEQ_LAYOUT_DERIVED) continue;
        const char *n = p->name;
        bool w13 = strncmp(n, "w13_", 4) == 0;
        size_t count = q->nbytes / moeq_dtype_size(q->dtype);
        if (strstr(n, "weight_shape")) {
            int64_t *v = q->data;
            for (size_t e = 0; e < count / 2; e++) {
                v[2 * e] = w13 ? g_I : g_H;
                v[2 * e + 1] = w13 ? g_H : g_I;
            }
        } else if (strstr(n, "global_scale")) {
            float *v = q->data;
            for (size_t j = 0; j < count; j++) v[j] = strstr(n, "input") ? 200.0f : 1000.0f;
        } else if (strstr(n, "scale")) {
            uint8_t *b = q->data;
            for (size_t j = 0; j < count; j++) {
                float s = (float)(0.002 + 0.01 * uni());
                switch (q->dtype) {
                    case MOEQ_DTYPE_F32: memcpy(b + 4 * j, &s, 4); break;
                    case MOEQ_DTYPE_BF16: {
                        uint16_t h = moeq__f32_to_bf16(s);
                        memcpy(b + 2 * j, &h, 2);
                        break;
                    }
                    case MOEQ_DTYPE_F16: {
                        uint16_t h = moeq__f32_to_f16(s);
                        memcpy(b + 2 * j, &h, 2);
                        break;
                    }
                    case MOEQ_DTYPE_F8_E4M3: b[j] = (uint8_t)(0x28 + rnd() % 0x20); break;
                    case MOEQ_DTYPE_U8: b[j] = (uint8_t)(118 + rnd() % 8); break;
                    default: break;
                }
            }
        } else {
            fill_random_bytes(q->data, q->nbytes);
            if (q->dtype == MOEQ_DTYPE_F8_E4M3) {
                uint8_t *b = q->data;
                for (size_t j = 0; j < q->nbytes; j++) {
                    if ((b[j] & 0x7F) == 0x7F) b[j] ^= 0x01; /* no NaN codes */
                }
            }
        }
        memset(p->loaded, 1, (size_t)l->cfg.num_local_experts * 2);
    }
}

__attribute__((unused)) static moeq_moe *build_layer(const scheme_def *s, moeq_config **cfg_out) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"quant_method\":\"compressed-tensors\",\"format\":\"mixed-precision\","
             "\"config_groups\":{\"experts\":{\"targets\":[\"re:.*experts.*\"],\"format\":"
             "\"%s\",\"weights\":%s,\"input_activations\":%s}}}",
             s->format, s->weights, s->inputs);
    moeq_error err;
    moeq_config *cfg = NULL;
    if (moeq_config_parse(json, strlen(json), NULL, &cfg, &err) != MOEQ_OK) die("config", &err);
    moeq_resolution res;
    if (moeq_resolve_moe(cfg, "model.layers.0.mlp.experts", (uint32_t)g_E, NULL, NULL, &res,
                         &err) != MOEQ_OK)
        die("resolve", &err);
    moeq_selection sel;
    if (moeq_select(&res, "model.layers.0.mlp.experts", NULL, &sel, &err) != MOEQ_OK)
        die("select", &err);
    if (strcmp(moeq_scheme_name(sel.scheme), s->name) != 0) {
        fprintf(stderr, "moe_bench: selected %s, want %s\n", moeq_scheme_name(sel.scheme), s->name);
        exit(1);
    }
    moeq_moe_config mc;
    if (moeq_moe_config_init(&mc, cfg, &res, &sel, &err) != MOEQ_OK) die("config", &err);
    mc.num_experts = g_E;
    mc.hidden_size = g_H;
    mc.intermediate_size = g_I;
    moeq_moe *layer = NULL;
    if (moeq_moe_create(&mc, &layer, &err) != MOEQ_OK) die("create", &err);
    fill_params(layer);
    if (moeq_moe_finalize(layer, &err) != MOEQ_OK) die("finalize", &err);
    *cfg_out = cfg;
    return layer;
}

#endif

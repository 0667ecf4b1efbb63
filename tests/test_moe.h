/*
 * test_moe.h - builds finalized MoE layers for tests that need one to run
 * (concurrency, the bad-input catalogue): a one-group config, resolution,
 * selection, moeq_moe_create, then every required checkpoint tensor made from
 * the public manifest with values a correct checkpoint holds (codes in range,
 * positive finite scales, g_idx below the group count, the right
 * weight_shape), loaded through moeq_moe_load.
 *
 *     moeq_test_layer tl;
 *     moeq_test_layer_make(&tl, &k_test_int8_token, 4, 64, 32, 7);   // E, H, I, seed
 *     ... moeq_test_layer_finalize(&tl) ...
 *     moeq_test_layer_free(&tl);
 *
 * The tensor for one (parameter, expert, shard) is also available on its own
 * (moeq_test_tensor_make) so a test can corrupt it before loading.
 */
#ifndef MOEQ_TEST_MOE_H
#define MOEQ_TEST_MOE_H

#include "param_layout.h"
#include "test_util.h"

#include <stdbool.h>

/* One group's args, format and the selection options that pick the scheme. */
typedef struct moeq_test_scheme_args {
    const char *weights; /* JSON or "null" */
    const char *inputs;  /* JSON or "null" */
    const char *format;
    int32_t platform;
    int32_t prefer_mxint4;
} moeq_test_scheme_args;

typedef struct moeq_test_layer {
    moeq_config *cfg;
    moeq_resolution res;
    moeq_moe_config mc;
    moeq_moe *layer;
    int32_t E, H, I;
    uint32_t seed;
} moeq_test_layer;

/* A checkpoint tensor built for one parameter, expert and shard. */
typedef struct moeq_test_tensor {
    moeq_tensor t;
    char name[256];
    uint8_t *data; /* owned: free with moeq_test_tensor_free */
} moeq_test_tensor;

static inline uint32_t moeq_test_rand(uint32_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

static inline void moeq_test_put_float(int32_t dtype, float v, uint8_t *dst) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if (dtype == MOEQ_DTYPE_F32) {
        memcpy(dst, &u, 4);
    } else if (dtype == MOEQ_DTYPE_BF16) {
        uint16_t h = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
        memcpy(dst, &h, 2);
    } else { /* F16 for finite values in its normal range */
        int32_t e = (int32_t)((u >> 23) & 0xFF) - 127 + 15;
        uint16_t h = e <= 0    ? (uint16_t)((u >> 16) & 0x8000u)
                     : e >= 31 ? (uint16_t)(((u >> 16) & 0x8000u) | 0x7BFFu)
                               : (uint16_t)(((u >> 16) & 0x8000u) | ((uint32_t)e << 10) |
                                            ((u >> 13) & 0x3FFu));
        memcpy(dst, &h, 2);
    }
}

/* The checkpoint dtype and shape of one shard of parameter p (the loader's
 * rule; npu_w4a8_int8's weights take the logical [out, in] int4 matrix). */
static inline int32_t moeq_test_ckpt_shape(const moeq_test_layer *tl, const moeq_param *p,
                                           int shard, int32_t *dtype, int64_t *shape) {
    *dtype = p->dtype;
    const char *suf = p->ckpt_suffix;
    if (tl->mc.scheme == MOEQ_SCHEME_NPU_W4A8_INT8 &&
        (strcmp(suf, "weight") == 0 || strcmp(suf, "weight_packed") == 0)) {
        int64_t out = shard == 2 ? tl->H : tl->I, in = shard == 2 ? tl->I : tl->H;
        bool packed = tl->mc.format == MOEQ_FORMAT_PACK_QUANTIZED;
        *dtype = packed ? MOEQ_DTYPE_I32 : MOEQ_DTYPE_I8;
        shape[0] = out;
        shape[1] = packed ? (in + 7) / 8 : in;
        return 2;
    }
    return moeq_test_shard_shape_of(p, tl->mc.non_gated ? 1 : 2, shape);
}

/* Builds the tensor of parameter `pi` for global expert `g`, shard `shard`
 * (0 gate, 1 up, 2 down; forced to 2 for w2_ parameters). */
static inline void moeq_test_tensor_make(const moeq_test_layer *tl, uint32_t pi, int32_t g,
                                         int shard, moeq_test_tensor *out) {
    moeq_param p;
    ck_assert_int_eq(moeq_moe_param(tl->layer, pi, &p), MOEQ_STATUS_OK);
    if (!moeq_test_is_w13(&p)) shard = 2;
    memset(out, 0, sizeof *out);
    int32_t dtype;
    int32_t ndim = moeq_test_ckpt_shape(tl, &p, shard, &dtype, out->t.shape);
    const char *proj = shard == 0 ? "gate_proj" : shard == 1 ? "up_proj" : "down_proj";
    snprintf(out->name, sizeof out->name, "%s.%d.%s.%s", tl->mc.prefix, (int)g, proj,
             p.ckpt_suffix);
    out->t.name = out->name;
    out->t.dtype = dtype;
    out->t.ndim = ndim;
    uint64_t count = 1;
    for (int32_t i = 0; i < ndim; i++) count *= (uint64_t)out->t.shape[i];
    size_t es = moeq_dtype_size(dtype);
    out->t.nbytes = count * es;
    out->data = calloc(1, (size_t)out->t.nbytes + 8);
    ck_assert_ptr_nonnull(out->data);
    out->t.data = out->data;
    /* gate and up share a SHARED parameter: the same values for both. */
    uint32_t x = tl->seed * 2654435761u + pi * 40503u + (uint32_t)g * 7919u +
                 (p.layout == MOEQ_LAYOUT_SHARED ? 0u : (uint32_t)shard * 104729u) + 1u;
    const char *suf = p.ckpt_suffix;
    const moeq_quant_args *w = tl->mc.weights;
    int bits = w ? w->num_bits : 8;
    bool fl = dtype == MOEQ_DTYPE_F32 || dtype == MOEQ_DTYPE_F16 || dtype == MOEQ_DTYPE_BF16;
    for (uint64_t i = 0; i < count; i++) {
        uint8_t *at = out->data + i * es;
        uint32_t r = moeq_test_rand(&x);
        if (strcmp(suf, "weight_shape") == 0) {
            int64_t v = i == 0 ? (shard == 2 ? tl->H : tl->I) : (shard == 2 ? tl->I : tl->H);
            memcpy(at, &v, 8);
        } else if (strcmp(suf, "weight_g_idx") == 0) {
            int32_t gs = w && w->group_size > 0 ? w->group_size : 1;
            int32_t v = (int32_t)(i / (uint64_t)gs);
            memcpy(at, &v, 4);
        } else if (fl) {
            float v;
            if (strcmp(suf, "weight") == 0) {
                v = ((float)(r % 257) - 128.0f) / 512.0f;
            } else if (strcmp(suf, "bias") == 0) {
                v = ((float)(r % 65) - 32.0f) / 256.0f;
            } else if (strstr(suf, "global_scale")) {
                v = 200.0f + (float)(r % 64);
            } else { /* weight_scale, input_scale */
                v = 0.002f * (float)(1 + r % 16);
            }
            moeq_test_put_float(dtype, v, at);
        } else if (dtype == MOEQ_DTYPE_F8_E4M3) {
            *at = strcmp(suf, "weight_scale") == 0 ? (uint8_t)(0x30 + r % 16)
                                                   : (uint8_t)((r & 0x80u) | (r % 0x70u));
        } else if (dtype == MOEQ_DTYPE_U8 && strcmp(suf, "weight_scale") == 0) {
            *at = (uint8_t)(118 + r % 6);
        } else if (strcmp(suf, "weight_zero_point") == 0) {
            if (dtype == MOEQ_DTYPE_I32) {
                uint32_t v = 0x11111111u * (r % 2u);
                memcpy(at, &v, 4);
            } else {
                *at = (uint8_t)(r % 3);
            }
        } else if (dtype == MOEQ_DTYPE_I8 && bits < 8) {
            *at = (uint8_t)(int8_t)(-(1 << (bits - 1)) + (int)(r % (1u << bits)));
        } else {
            for (size_t b = 0; b < es; b++) at[b] = (uint8_t)(r >> (8 * b));
        }
    }
}

static inline void moeq_test_tensor_free(moeq_test_tensor *t) {
    free(t->data);
    t->data = NULL;
}

/* Parses the one-group config, resolves, selects and creates the layer
 * (prefix "model.layers.3.mlp.experts", default projection names) with
 * `activation`, gated or not (non_gated 1: no gate tensors). */
static inline void moeq_test_layer_create_act(moeq_test_layer *tl,
                                              const moeq_test_scheme_args *a, int32_t E,
                                              int32_t H, int32_t I, uint32_t seed,
                                              int32_t activation, int32_t non_gated) {
    memset(tl, 0, sizeof *tl);
    char json[2048];
    snprintf(json, sizeof json,
             "{\"quant_method\":\"compressed-tensors\",\"format\":\"mixed-precision\","
             "\"config_groups\":{\"g\":{\"targets\":[\"re:.*experts.*\"],\"format\":\"%s\","
             "\"weights\":%s,\"input_activations\":%s}}}",
             a->format, a->weights, a->inputs);
    moeq_error err;
    ck_assert_ok(moeq_config_parse(json, strlen(json), NULL, &tl->cfg, &err), &err);
    ck_assert_ok(moeq_resolve_moe(tl->cfg, "model.layers.3.mlp.experts", (uint32_t)E, NULL, NULL,
                                  &tl->res, &err),
                 &err);
    moeq_select_options so = {a->platform, a->prefer_mxint4};
    moeq_selection sel;
    ck_assert_ok(moeq_select(&tl->res, "model.layers.3.mlp.experts", &so, &sel, &err), &err);
    tl->mc.scheme = sel.scheme;
    tl->mc.weights = tl->res.weights;
    tl->mc.input_activations = tl->res.input_activations;
    tl->mc.format = tl->res.format;
    tl->mc.prefix = "model.layers.3.mlp.experts";
    tl->mc.num_experts = E;
    tl->mc.hidden_size = H;
    tl->mc.intermediate_size = I;
    tl->mc.activation = activation;
    tl->mc.non_gated = non_gated;
    tl->E = E;
    tl->H = H;
    tl->I = I;
    tl->seed = seed;
    ck_assert_ok(moeq_moe_create(&tl->mc, &tl->layer, &err), &err);
}

/* The same, gated silu experts. */
static inline void moeq_test_layer_create(moeq_test_layer *tl, const moeq_test_scheme_args *a,
                                          int32_t E, int32_t H, int32_t I, uint32_t seed) {
    moeq_test_layer_create_act(tl, a, E, H, I, seed, MOEQ_ACT_SILU, 0);
}

/* Loads every required tensor (all experts are local). */
static inline void moeq_test_layer_load(moeq_test_layer *tl) {
    uint32_t n = moeq_moe_param_count(tl->layer);
    for (uint32_t pi = 0; pi < n; pi++) {
        moeq_param p;
        ck_assert_int_eq(moeq_moe_param(tl->layer, pi, &p), MOEQ_STATUS_OK);
        if (!p.required || p.layout == MOEQ_LAYOUT_DERIVED) continue;
        for (int32_t e = 0; e < tl->E; e++) {
            for (int shard = moeq_test_is_w13(&p) ? 0 : 2; shard < 3; shard++) {
                if (moeq_test_is_w13(&p) && shard == 2) break;
                if (shard == 0 && tl->mc.non_gated) continue; /* no gate */
                moeq_test_tensor t;
                moeq_test_tensor_make(tl, pi, e, shard, &t);
                moeq_error err;
                ck_assert_ok(moeq_moe_load(tl->layer, &t.t, NULL, &err), &err);
                moeq_test_tensor_free(&t);
            }
        }
    }
}

/* create + load + finalize. */
static inline void moeq_test_layer_make_act(moeq_test_layer *tl,
                                            const moeq_test_scheme_args *a, int32_t E, int32_t H,
                                            int32_t I, uint32_t seed, int32_t activation,
                                            int32_t non_gated) {
    moeq_test_layer_create_act(tl, a, E, H, I, seed, activation, non_gated);
    moeq_test_layer_load(tl);
    moeq_error err;
    ck_assert_ok(moeq_moe_finalize(tl->layer, &err), &err);
}

static inline void moeq_test_layer_make(moeq_test_layer *tl, const moeq_test_scheme_args *a,
                                        int32_t E, int32_t H, int32_t I, uint32_t seed) {
    moeq_test_layer_create(tl, a, E, H, I, seed);
    moeq_test_layer_load(tl);
    moeq_error err;
    ck_assert_ok(moeq_moe_finalize(tl->layer, &err), &err);
}

static inline void moeq_test_layer_free(moeq_test_layer *tl) {
    moeq_moe_destroy(tl->layer);
    moeq_config_destroy(tl->cfg);
    memset(tl, 0, sizeof *tl);
}

/* The index of the parameter named `name` (fails the test when absent). */
static inline uint32_t moeq_test_param_index(const moeq_test_layer *tl, const char *name) {
    uint32_t n = moeq_moe_param_count(tl->layer);
    for (uint32_t i = 0; i < n; i++) {
        moeq_param p;
        moeq_moe_param(tl->layer, i, &p);
        if (strcmp(p.name, name) == 0) return i;
    }
    ck_abort_msg("no parameter %s", name);
    return 0;
}

/* MX args as CT 0.20's presets write them. */
#define MX_W(bits)                                                                                 \
    "{\"num_bits\":" #bits ",\"type\":\"float\",\"group_size\":32,\"scale_dtype\":\"torch.uint8\"}"
#define MX_A8                                                                                      \
    "{\"num_bits\":8,\"type\":\"float\",\"group_size\":32,\"dynamic\":true,"                    \
    "\"scale_dtype\":\"torch.uint8\"}"

/* Schemes with args that select them (one per scheme). */
static const moeq_test_scheme_args k_test_schemes[] = {
    {"null", "null", "dense", 0, 0},
    {"{\"num_bits\":4,\"group_size\":32,\"symmetric\":false}", "null", "pack-quantized", 0, 0},
    {"{\"num_bits\":4,\"group_size\":32}", "null", "pack-quantized", 0, 1},
    {"{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\",\"group_size\":16}", "null",
     "nvfp4-pack-quantized", 0, 0},
    {"{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\",\"group_size\":16}",
     "{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\",\"group_size\":16,"
     "\"dynamic\":\"local\"}",
     "nvfp4-pack-quantized", 0, 0},
    {"{\"num_bits\":4,\"type\":\"float\",\"group_size\":32}", "null", "mxfp4-pack-quantized", 0,
     0},
    {"{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}", "null", "naive-quantized", 0,
     0},
    {"{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"block\",\"block_structure\":[32,32]}",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"group\",\"group_size\":32,"
     "\"dynamic\":true}",
     "float-quantized", 0, 0},
    {"{\"num_bits\":8,\"strategy\":\"channel\"}",
     "{\"num_bits\":8,\"strategy\":\"token\",\"dynamic\":true}", "int-quantized", 0, 0},
    {"{\"num_bits\":4,\"group_size\":32}", "{\"num_bits\":8,\"strategy\":\"token\",\"dynamic\":true}",
     "int-quantized", 0, 0},
    {"{\"num_bits\":4,\"group_size\":32}",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"token\",\"dynamic\":true}",
     "pack-quantized", 0, 0},
    {"{\"num_bits\":8,\"strategy\":\"channel\"}",
     "{\"num_bits\":8,\"strategy\":\"token\",\"dynamic\":true}", "int-quantized", 1, 0},
    {"{\"num_bits\":4,\"group_size\":-1}", "{\"num_bits\":8,\"strategy\":\"token\",\"dynamic\":true}",
     "int-quantized", 1, 0},
    {"{\"num_bits\":4,\"group_size\":32}", "null", "pack-quantized", 1, 0},
    {MX_W(8), "null", "mxfp8-quantized", 0, 0},
    {MX_W(8), MX_A8, "mxfp8-quantized", 0, 0},
    {MX_W(6), "null", "mxfp6-pack-quantized", 0, 0},
    {MX_W(6), MX_A8, "mxfp6-pack-quantized", 0, 0},
    {MX_W(4), "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"group\",\"group_size\":128,"
              "\"dynamic\":true}",
     "mxfp4-pack-quantized", 0, 0},
};
_Static_assert(sizeof k_test_schemes / sizeof k_test_schemes[0] == MOEQ_SCHEME_COUNT,
               "one entry per scheme, in moeq_scheme_id order");

#endif

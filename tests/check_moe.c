/*
 * check_moe.c - every MoE scheme end to end on the CPU: random weights are
 * quantized with moeq_compress (compressed-tensors' own math), loaded by
 * name, finalized and applied, and the output is compared with a float64
 * reference of the same math built independently here: each expert
 * projection dequantized with moeq_dequantize from the compressed tensors,
 * the activations quantized with the same reference quantizers, every sum
 * in double.  Tolerances are kept in one table (k_cases).
 *
 * Also: bf16/f16 inputs and outputs, biases and activations, routing weight
 * on input and routed scaling, expert parallelism (two halves sum to the
 * whole), and bit-identical results across repeated runs and thread counts.
 *
 * moeq_moe_apply runs the fast path unless the context pins the reference
 * forward (force_ref): every case also compares the two, with few and with
 * many rows per expert (the gemv and the panel kernels), and checks that the
 * fast path gives the same bits with 1, 2 and 3 threads.
 */
#include "test_util.h"
#include "common/internal.h"
#include "kernels.h"
#include "layer/moe.h" /* struct moeq_ctx: a context on the portable kernels */

#include <math.h>

enum { E = 8, H = 256, I = 128, T = 6, K = 2 };

typedef struct moe_case {
    const char *scheme;
    const char *weights; /* JSON, or NULL: unquantized (the experts are ignored) */
    const char *inputs;  /* JSON or "null" */
    const char *format;
    int32_t platform;
    int32_t prefer_mxint4;
    /* max |out - ref| / max |ref| allowed.  Weight-only schemes differ from
     * the float64 reference only by float32 sums (measured <= 6e-7 here);
     * activation-quantized ones may also differ by a code that rounds the
     * other way when a float32 intermediate sits on a rounding boundary its
     * float64 twin does not: one int8/FP8 step is ~1e-3 of the output, one
     * FP4 step up to ~1e-2. */
    double tolerance;
} moe_case;

#define GROUP128 "{\"num_bits\":4,\"group_size\":128}"
#define TOKEN_I8 "{\"num_bits\":8,\"strategy\":\"token\",\"dynamic\":true}"
#define TOKEN_F8 "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"token\",\"dynamic\":true}"
#define NVFP4_W                                                                                    \
    "{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\",\"group_size\":16,"          \
    "\"scale_dtype\":\"torch.float8_e4m3fn\"}"
#define MXFP4_W                                                                                    \
    "{\"num_bits\":4,\"type\":\"float\",\"group_size\":32,\"scale_dtype\":\"torch.uint8\"}"
#define MXFP8_W                                                                                    \
    "{\"num_bits\":8,\"type\":\"float\",\"group_size\":32,\"scale_dtype\":\"torch.uint8\"}"
#define MXFP6_W                                                                                    \
    "{\"num_bits\":6,\"type\":\"float\",\"group_size\":32,\"scale_dtype\":\"torch.uint8\"}"
#define MXFP8_A                                                                                    \
    "{\"num_bits\":8,\"type\":\"float\",\"group_size\":32,\"dynamic\":true,"                    \
    "\"scale_dtype\":\"torch.uint8\"}"

static const moe_case k_cases[] = {
    {"wna16", GROUP128, "null", "pack-quantized", 0, 0, 1e-5},
    {"wna16", "{\"num_bits\":8,\"group_size\":-1}", "null", "pack-quantized", 0, 0, 1e-5},
    {"wna16", "{\"num_bits\":4,\"group_size\":32,\"symmetric\":false}", "null", "pack-quantized", 0,
     0, 1e-5},
    {"wna16", "{\"num_bits\":4,\"group_size\":32,\"actorder\":\"group\"}", "null", "pack-quantized",
     0, 0, 1e-5},
    {"wna16", "{\"num_bits\":3,\"group_size\":64,\"symmetric\":false}", "null", "pack-quantized", 0,
     0, 1e-5},
    {"wna16", "{\"num_bits\":8,\"group_size\":64}", "null", "naive-quantized", 0, 0, 1e-5},
    {"mxint4", "{\"num_bits\":4,\"group_size\":32}", "null", "pack-quantized", 0, 1, 1e-5},
    {"w4a16_nvfp4", NVFP4_W, "null", "nvfp4-pack-quantized", 0, 0, 1e-5},
    {"w4a4_nvfp4", NVFP4_W,
     "{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\",\"group_size\":16,"
     "\"dynamic\":\"local\"}",
     "nvfp4-pack-quantized", 0, 0, 2e-2},
    {"w4a16_mxfp4", MXFP4_W, "null", "mxfp4-pack-quantized", 0, 0, 1e-5},
    {"w4a16_mxfp4", MXFP4_W,
     "{\"num_bits\":4,\"type\":\"float\",\"group_size\":32,\"dynamic\":true}",
     "mxfp4-pack-quantized", 0, 0, 2e-2},
    {"w8a16_fp8", "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}", "null",
     "naive-quantized", 0, 0, 1e-5},
    {"w8a16_fp8",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"block\",\"block_structure\":[128,128]}",
     "null", "float-quantized", 0, 0, 1e-5},
    {"w8a8_fp8", "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}", TOKEN_F8,
     "float-quantized", 0, 0, 2e-3},
    {"w8a8_fp8", "{\"num_bits\":8,\"type\":\"float\"}", "{\"num_bits\":8,\"type\":\"float\"}",
     "naive-quantized", 0, 0, 2e-3},
    {"w8a8_fp8",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"block\",\"block_structure\":[128,128]}",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"group\",\"group_size\":128,\"dynamic\":"
     "true}",
     "float-quantized", 0, 0, 2e-3},
    {"w8a8_fp8", "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\",\"dynamic\":true}",
     "float-quantized", 0, 0, 2e-3},
    {"w8a8_int8", "{\"num_bits\":8,\"strategy\":\"channel\"}", TOKEN_I8, "int-quantized", 0, 0,
     2e-3},
    {"w8a8_int8", "{\"num_bits\":8,\"strategy\":\"channel\"}", "{\"num_bits\":8}", "int-quantized",
     0, 0, 2e-3},
    {"w8a8_int8", "{\"num_bits\":8,\"strategy\":\"channel\"}",
     "{\"num_bits\":8,\"strategy\":\"tensor\",\"dynamic\":true}", "int-quantized", 0, 0, 2e-3},
    {"w8a8_int8", "{\"num_bits\":8,\"strategy\":\"group\",\"group_size\":32}", TOKEN_I8,
     "int-quantized", 0, 0, 2e-3},
    {"w4a8_int8", GROUP128, TOKEN_I8, "pack-quantized", 0, 0, 2e-3},
    {"w4a8_fp8", GROUP128, TOKEN_F8, "int-quantized", 0, 0, 2e-3},
    {"npu_w8a8_int8", "{\"num_bits\":8,\"strategy\":\"channel\"}", TOKEN_I8, "int-quantized", 1, 0,
     2e-3},
    {"npu_w4a8_int8", "{\"num_bits\":4,\"group_size\":-1}", TOKEN_I8, "pack-quantized", 1, 0, 2e-3},
    {"npu_w4a8_int8", GROUP128, TOKEN_I8, "pack-quantized", 1, 0, 2e-3},
    {"npu_w4a8_int8", "{\"num_bits\":4,\"group_size\":64}", TOKEN_I8, "int-quantized", 1, 0, 2e-3},
    {"npu_w4a16_int4", GROUP128, "null", "pack-quantized", 1, 0, 1e-5},
    {"unquantized", NULL, "null", "dense", 0, 0, 1e-5},
    /* compressed-tensors 0.20's MX presets */
    {"w8a16_mxfp8", MXFP8_W, "null", "mxfp8-quantized", 0, 0, 1e-5},
    {"w8a8_mxfp8", MXFP8_W, MXFP8_A, "mxfp8-quantized", 0, 0, 2e-3},
    {"w6a16_mxfp6", MXFP6_W, "null", "mxfp6-pack-quantized", 0, 0, 1e-5},
    {"w6a8_mxfp6", MXFP6_W, MXFP8_A, "mxfp6-pack-quantized", 0, 0, 2e-3},
    {"w4a8_mxfp4", MXFP4_W,
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"group\",\"group_size\":128,\"dynamic\":"
     "true}",
     "mxfp4-pack-quantized", 0, 0, 2e-3},
};

static const char *const k_proj[3] = {"gate_proj", "up_proj", "down_proj"};

/* ---- deterministic random numbers ---------------------------------------------- */

static uint64_t g_rng;
static double uniform(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return ((double)(g_rng >> 11) + 0.5) / 9007199254740992.0;
}
static float gauss(void) {
    return (float)(sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform()));
}
static float bf16(float x) {
    return moeq__bf16_to_f32(moeq__f32_to_bf16(x));
}

/* ---- building a layer ------------------------------------------------------------ */

typedef struct built {
    moeq_config *cfg;
    moeq_resolution res;
    int32_t scheme;
    moeq_moe *layer;
    float *w[E][3];     /* dequantized weights, [rows, cols] */
    float act_scale[3]; /* static input scale (or NVFP4 global) of gate/up, down */
    float *bias[E][3];  /* when the layer has biases */
    moeq_moe_config mc; /* what the layer was created with */
    int32_t act_kind;   /* what the test's reference quantizes activations to */
} built;

enum {
    ACT_NONE,
    ACT_I8_TOKEN,
    ACT_I8_TENSOR,
    ACT_I8_STATIC,
    ACT_F8_TOKEN,
    ACT_F8_TENSOR,
    ACT_F8_GROUP,
    ACT_F8_STATIC,
    ACT_NVFP4,
    ACT_MXFP4,
    ACT_MXFP8
};

static int32_t act_kind_of(const moeq_quant_args *a) {
    if (!a) return ACT_NONE;
    if (a->type == MOEQ_QTYPE_INT) {
        if (!a->dynamic) return ACT_I8_STATIC;
        return a->strategy == MOEQ_STRATEGY_TENSOR ? ACT_I8_TENSOR : ACT_I8_TOKEN;
    }
    if (a->num_bits == 4) return a->dynamic == MOEQ_DYNAMIC_LOCAL ? ACT_NVFP4 : ACT_MXFP4;
    if (!a->dynamic) return ACT_F8_STATIC;
    if (a->strategy == MOEQ_STRATEGY_TOKEN) return ACT_F8_TOKEN;
    if (a->strategy == MOEQ_STRATEGY_GROUP) {
        return a->group_size == 32 && a->scale_dtype == MOEQ_DTYPE_U8 ? ACT_MXFP8 : ACT_F8_GROUP;
    }
    return ACT_F8_TENSOR;
}

static moeq_config *one_group(const moe_case *c) {
    char json[4096];
    if (c->weights) {
        snprintf(json, sizeof json,
                 "{\"quant_method\":\"compressed-tensors\",\"format\":\"mixed-precision\","
                 "\"config_groups\":{\"experts\":{\"targets\":[\"re:.*experts.*\"],\"format\":"
                 "\"%s\",\"weights\":%s,\"input_activations\":%s}}}",
                 c->format, c->weights, c->inputs);
    } else {
        snprintf(json, sizeof json,
                 "{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
                 "\"config_groups\":{\"attn\":{\"targets\":[\"re:.*self_attn.*\"],\"weights\":"
                 "{\"num_bits\":4,\"group_size\":128}}},\"ignore\":[\"re:.*experts.*\"]}");
    }
    moeq_config *cfg = NULL;
    moeq_error err;
    moeq_status st = moeq_config_parse(json, strlen(json), NULL, &cfg, &err);
    ck_assert_msg(st == MOEQ_OK, "%s: %s", json, err.message);
    return cfg;
}

static void load_set(moeq_moe *layer, const moeq_tensor_set *set) {
    for (uint32_t i = 0; i < moeq_tensor_set_count(set); i++) {
        moeq_error err;
        int32_t outcome;
        const moeq_tensor *t = moeq_tensor_set_get(set, i);
        moeq_status st = moeq_moe_load(layer, t, &outcome, &err);
        ck_assert_msg(st == MOEQ_OK, "load %s: %s", t->name, err.message);
    }
}

/* Builds, loads and finalizes the case's layer.  `map`/`local` restrict the
 * experts held (NULL: all).  Every expert's weights come from the same seed,
 * whatever the layer holds, so two halves see the whole layer's weights. */
static void build(const moe_case *c, const int32_t *map, int32_t local,
                  const moeq_moe_config *extra, built *b) {
    memset(b, 0, sizeof *b);
    moeq_error err;
    b->cfg = one_group(c);
    ck_assert_ok(
        moeq_resolve_moe(b->cfg, "model.layers.0.mlp.experts", E, NULL, NULL, &b->res, &err), &err);
    moeq_select_options so = {c->platform, c->prefer_mxint4};
    moeq_selection sel;
    ck_assert_ok(moeq_select(&b->res, "model.layers.0.mlp.experts", &so, &sel, &err), &err);
    ck_assert_msg(strcmp(moeq_scheme_name(sel.scheme), c->scheme) == 0, "selected %s, want %s",
                  moeq_scheme_name(sel.scheme), c->scheme);
    b->scheme = sel.scheme;
    moeq_moe_config mc;
    if (extra) {
        mc = *extra;
    } else {
        memset(&mc, 0, sizeof mc);
    }
    mc.scheme = sel.scheme;
    mc.weights = b->res.weights;
    mc.input_activations = b->res.input_activations;
    mc.format = b->res.format;
    mc.dequant_flags = moeq_config_dequant_flags(b->cfg);
    mc.prefix = "model.layers.0.mlp.experts";
    mc.num_experts = E;
    mc.num_local_experts = local;
    mc.expert_map = map;
    mc.hidden_size = H;
    mc.intermediate_size = I;
    ck_assert_ok(moeq_moe_create(&mc, &b->layer, &err), &err);
    b->mc = mc;
    b->act_kind = act_kind_of(b->res.input_activations);
    const moeq_quant_args *w = b->res.weights;
    int32_t format = c->weights ? b->res.format : MOEQ_FORMAT_DENSE;

    /* Calibration batches: the gate/up inputs and the down inputs. */
    g_rng = 0x1234567u;
    float *cal_x = malloc(sizeof(float) * 32 * H), *cal_a = malloc(sizeof(float) * 32 * I);
    for (int i = 0; i < 32 * H; i++) cal_x[i] = bf16(gauss());
    for (int i = 0; i < 32 * I; i++) cal_a[i] = bf16(0.05f * gauss());
    g_rng = 0xC0FFEEu;
    for (int e = 0; e < E; e++) {
        float *raw[3];
        for (int p = 0; p < 3; p++) {
            int rows = p == 2 ? H : I, cols = p == 2 ? I : H;
            raw[p] = malloc(sizeof(float) * (size_t)(rows * cols));
            for (int i = 0; i < rows * cols; i++) raw[p][i] = bf16(0.05f * gauss());
        }
        float gscale_gu = 0;
        if (w && format == MOEQ_FORMAT_NVFP4_PACK_QUANTIZED) {
            float amax = 0;
            for (int p = 0; p < 2; p++) {
                for (int i = 0; i < I * H; i++) amax = fmaxf(amax, fabsf(raw[p][i]));
            }
            gscale_gu = moeq_nvfp4_global_scale(amax, MOEQ_DTYPE_BF16);
        }
        for (int p = 0; p < 3; p++) {
            int rows = p == 2 ? H : I, cols = p == 2 ? I : H;
            char module[128];
            snprintf(module, sizeof module, "model.layers.0.mlp.experts.%d.%s", e, k_proj[p]);
            int32_t *g_idx = NULL;
            if (w && moeq_actorder_is_group(w->actorder)) {
                /* GPTQ-style: each group holds group_size columns, in a shuffled
                 * order; gate and up see the same inputs, so they share one. */
                static int32_t shared[H];
                g_idx = malloc(sizeof(int32_t) * (size_t)cols);
                if (p != 1) {
                    for (int i = 0; i < cols; i++) g_idx[i] = i / w->group_size;
                    for (int i = cols - 1; i > 0; i--) {
                        int j = (int)(uniform() * (i + 1));
                        int32_t t = g_idx[i];
                        g_idx[i] = g_idx[j];
                        g_idx[j] = t;
                    }
                    if (p == 0) memcpy(shared, g_idx, sizeof(int32_t) * (size_t)cols);
                } else {
                    memcpy(g_idx, shared, sizeof(int32_t) * (size_t)cols);
                }
            }
            moeq_tensor_set *set = NULL;
            ck_assert_ok(moeq_compress(format == MOEQ_FORMAT_DENSE ? NULL : w, format, module,
                                       raw[p], rows, cols, MOEQ_DTYPE_BF16, g_idx,
                                       p < 2 ? gscale_gu : 0.0f, &set, &err),
                         &err);
            free(g_idx);
            if (b->res.input_activations && !b->res.input_activations->dynamic
                    ? 1
                    : b->res.input_activations &&
                          b->res.input_activations->dynamic == MOEQ_DYNAMIC_LOCAL) {
                ck_assert_ok(moeq_compress_input(b->res.input_activations, module,
                                                 p < 2 ? cal_x : cal_a, 32, cols, MOEQ_DTYPE_BF16,
                                                 &set, &err),
                             &err);
            }
            /* The test's reference weight: dequantized from the tensors themselves. */
            b->w[e][p] = malloc(sizeof(float) * (size_t)(rows * cols));
            int64_t shape[2];
            ck_assert_ok(moeq_dequantize(w, format, 0, module, moeq_tensor_set_get(set, 0),
                                         moeq_tensor_set_count(set), MOEQ_DTYPE_F32, b->w[e][p],
                                         sizeof(float) * (size_t)(rows * cols), shape, &err),
                         &err);
            ck_assert(shape[0] == rows && shape[1] == cols);
            char scale_name[160];
            snprintf(scale_name, sizeof scale_name, "%s.%s", module,
                     b->act_kind == ACT_NVFP4 ? "input_global_scale" : "input_scale");
            const moeq_tensor *st = moeq_tensor_set_find(set, scale_name);
            if (st) moeq__to_f32_ref(st->dtype, st->data, 1, &b->act_scale[p == 2 ? 1 : 0]);
            if (mc.has_bias) {
                b->bias[e][p] = malloc(sizeof(float) * (size_t)rows);
                for (int r = 0; r < rows; r++) b->bias[e][p][r] = bf16(0.1f * gauss());
                char bias_name[160];
                snprintf(bias_name, sizeof bias_name, "%s.bias", module);
                moeq_tensor bt = {bias_name, MOEQ_DTYPE_F32, 1,
                                  {rows},    b->bias[e][p],  sizeof(float) * (uint64_t)rows,
                                  NULL};
                ck_assert_ok(moeq_tensor_set_add(&set, &bt, &err), &err);
            }
            load_set(b->layer, set);
            moeq_tensor_set_destroy(set);
        }
        for (int p = 0; p < 3; p++) free(raw[p]);
    }
    free(cal_x);
    free(cal_a);
    ck_assert_ok(moeq_moe_finalize(b->layer, &err), &err);
}

static void free_built(built *b) {
    for (int e = 0; e < E; e++) {
        for (int p = 0; p < 3; p++) {
            free(b->w[e][p]);
            free(b->bias[e][p]);
        }
    }
    moeq_moe_destroy(b->layer);
    moeq_config_destroy(b->cfg);
}

/* ---- the test's own float64 reference ------------------------------------------------ */

/* Quantizes then dequantizes one row as the scheme's activations are
 * (tensor_amax: the largest |value| of all rows, for the per-tensor kinds). */
static void ref_act(const built *b, int which, float *x, size_t k, float tensor_amax) {
    uint8_t codes[2 * H];
    float s[H];
    switch (b->act_kind) {
        case ACT_I8_TOKEN:
            moeq__actq_int8_token_ref(x, 1, k, (int8_t *)codes, s);
            moeq__actdq_int8_ref((int8_t *)codes, 1, k, s, 1, k, NULL, x);
            break;
        case ACT_I8_STATIC:
            moeq__actq_int8_static_ref(x, k, b->act_scale[which], 0, (int8_t *)codes);
            moeq__actdq_int8_ref((int8_t *)codes, 1, k, &b->act_scale[which], 0, k, NULL, x);
            break;
        case ACT_I8_TENSOR: {
            float sc = fmaxf(tensor_amax, MOEQ__ACT_INT8_EPS) / 127.0f;
            moeq__actq_int8_static_ref(x, k, sc, 0, (int8_t *)codes);
            moeq__actdq_int8_ref((int8_t *)codes, 1, k, &sc, 0, k, NULL, x);
            break;
        }
        case ACT_F8_TOKEN:
            moeq__actq_fp8_token_ref(x, 1, k, codes, s);
            moeq__actdq_fp8_ref(codes, 1, k, s, 1, k, x);
            break;
        case ACT_F8_TENSOR:
        case ACT_F8_STATIC: {
            float sc = b->act_kind == ACT_F8_STATIC
                           ? b->act_scale[which]
                           : fmaxf(tensor_amax, MOEQ__ACT_FP8_EPS) / MOEQ__E4M3_MAX;
            moeq__actq_fp8_static_ref(x, k, sc, codes);
            moeq__actdq_fp8_ref(codes, 1, k, &sc, 0, k, x);
            break;
        }
        case ACT_F8_GROUP:
            moeq__actq_fp8_group_ref(x, 1, k, 128, codes, s);
            moeq__actdq_fp8_ref(codes, 1, k, s, (k + 127) / 128, 128, x);
            break;
        case ACT_NVFP4:
            moeq__actq_nvfp4_ref(x, 1, k, b->act_scale[which], codes, codes + k);
            moeq__actdq_nvfp4_ref(codes, 1, k, codes + k, b->act_scale[which], x);
            break;
        case ACT_MXFP4:
            moeq__actq_mxfp4_ref(x, 1, k, codes, codes + k);
            moeq__actdq_mxfp4_ref(codes, 1, k, codes + k, x);
            break;
        case ACT_MXFP8:
            moeq__actq_mxfp8_ref(x, 1, k, codes, codes + k);
            moeq__actdq_mxfp8_ref(codes, 1, k, codes + k, x);
            break;
        default: break;
    }
}

/* The gated activations, written out from their definitions. */
static double act(const moeq_moe_config *c, double g, double u) {
    double lim = c->swiglu_limit;
    switch (c->activation) {
        case MOEQ_ACT_GELU: return 0.5 * g * (1.0 + erf(g / sqrt(2.0))) * u;
        case MOEQ_ACT_GELU_TANH: {
            double inner = sqrt(2.0 / 3.14159265358979323846) * (g + 0.044715 * g * g * g);
            return 0.5 * g * (1.0 + tanh(inner)) * u;
        }
        case MOEQ_ACT_SWIGLUOAI: {
            double alpha = c->swiglu_alpha ? c->swiglu_alpha : 1.702, L = lim ? lim : 7.0;
            g = fmin(g, L);
            u = fmax(-L, fmin(u, L));
            return g / (1.0 + exp(-alpha * g)) * (u + 1.0);
        }
        default:
            if (lim > 0) {
                g = fmin(g, lim);
                u = fmax(-lim, fmin(u, lim));
            }
            return g / (1.0 + exp(-g)) * u;
    }
}

/* out[t] = sum_k w * down(silu(gate x) * up x), activations quantized as the
 * scheme says; only experts with map[e] >= 0 (NULL: all) contribute. */
static void reference(const built *b, const float *x, const int32_t *ids, const float *wts,
                      const int32_t *map, double *out) {
    static float a_rows[T * K][I];
    static float x_rows[T * K][H];
    float amax_x = 0, amax_a = 0;
    for (int p = 0; p < T * K; p++) {
        memcpy(x_rows[p], x + (p / K) * H, sizeof x_rows[p]);
        for (int h = 0; h < H; h++) amax_x = fmaxf(amax_x, fabsf(x_rows[p][h]));
    }
    for (int p = 0; p < T * K; p++) {
        int e = ids[p];
        if (map && map[e] < 0) continue;
        ref_act(b, 0, x_rows[p], H, amax_x);
        for (int j = 0; j < I; j++) {
            double g = b->bias[e][0] ? b->bias[e][0][j] : 0,
                   u = b->bias[e][1] ? b->bias[e][1][j] : 0;
            for (int h = 0; h < H; h++) {
                g += (double)x_rows[p][h] * b->w[e][0][j * H + h];
                u += (double)x_rows[p][h] * b->w[e][1][j * H + h];
            }
            a_rows[p][j] = (float)act(&b->mc, g, u);
            amax_a = fmaxf(amax_a, fabsf(a_rows[p][j]));
        }
    }
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < H; h++) out[t * H + h] = 0;
        for (int k = 0; k < K; k++) {
            int p = t * K + k, e = ids[p];
            if (map && map[e] < 0) continue;
            ref_act(b, 1, a_rows[p], I, amax_a);
            for (int h = 0; h < H; h++) {
                double y = b->bias[e][2] ? b->bias[e][2][h] : 0;
                for (int j = 0; j < I; j++) y += (double)a_rows[p][j] * b->w[e][2][h * I + j];
                out[t * H + h] += (double)wts[p] * y;
            }
        }
    }
}

/* Inputs and routing shared by the tests. */
static float g_x[T * H];
static int32_t g_ids[T * K];
static float g_wts[T * K];

static void make_inputs(void) {
    g_rng = 0xABCDEFu;
    for (int i = 0; i < T * H; i++) g_x[i] = bf16(gauss());
    for (int t = 0; t < T; t++) {
        int a = (int)(uniform() * E), b2 = (a + 1 + (int)(uniform() * (E - 1))) % E;
        g_ids[t * K] = a;
        g_ids[t * K + 1] = b2;
        float w0 = (float)uniform();
        g_wts[t * K] = w0;
        g_wts[t * K + 1] = 1.0f - w0;
    }
}

static double rel_error(const float *got, const double *ref, size_t n) {
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < n; i++) {
        max_err = fmax(max_err, fabs((double)got[i] - ref[i]));
        max_ref = fmax(max_ref, fabs(ref[i]));
    }
    ck_assert(max_ref > 0);
    return max_err / max_ref;
}

START_TEST(test_scheme_against_reference) {
    const moe_case *c = &k_cases[_i];
    built b;
    build(c, NULL, 0, NULL, &b);
    make_inputs();
    moeq_ctx *ctx = NULL;
    moeq_error err;
    ck_assert_ok(moeq_ctx_create(NULL, &ctx, &err), &err);
    static float out[T * H];
    ck_assert_ok(moeq_moe_apply(b.layer, ctx, MOEQ_DTYPE_F32, g_x, T, K, g_ids, g_wts,
                                MOEQ_DTYPE_F32, out, &err),
                 &err);
    static double ref[T * H], lib_ref[T * H];
    reference(&b, g_x, g_ids, g_wts, NULL, ref);
    double e1 = rel_error(out, ref, T * H);
    /* The library's own float64 path agrees too. */
    ck_assert_ok(
        moeq_moe_apply_reference(b.layer, MOEQ_DTYPE_F32, g_x, T, K, g_ids, g_wts, lib_ref, &err),
        &err);
    float lib_ref_f[T * H];
    for (int i = 0; i < T * H; i++) lib_ref_f[i] = (float)lib_ref[i];
    double e2 = rel_error(lib_ref_f, ref, T * H);
    printf("%-15s %-22s rel error %.2e (library float64 path %.2e), tolerance %.0e\n", c->scheme,
           c->format, e1, e2, c->tolerance);
    ck_assert_msg(e1 <= c->tolerance, "%s (case %d): relative error %g > %g", c->scheme, _i, e1,
                  c->tolerance);
    ck_assert_msg(e2 <= c->tolerance, "%s (case %d): float64 path error %g > %g", c->scheme, _i, e2,
                  c->tolerance);
    /* Repeated runs are bit-identical. */
    static float again[T * H];
    ck_assert_ok(moeq_moe_apply(b.layer, ctx, MOEQ_DTYPE_F32, g_x, T, K, g_ids, g_wts,
                                MOEQ_DTYPE_F32, again, &err),
                 &err);
    ck_assert(memcmp(out, again, sizeof out) == 0);
    moeq_ctx_destroy(ctx);
    free_built(&b);
}
END_TEST

/* The fast path against the reference forward (force_ref) on few and many
 * rows per expert; 1, 2 and 3 threads give identical bits; the portable
 * kernels (what CPUs without AVX2 run) agree too.  Int8 activations on int8
 * weights and NVFP4 on NVFP4 take the integer paths, whose token results do
 * not depend on the batch (unless one scale spans the batch). */
START_TEST(test_fast_vs_reference) {
    const moe_case *c = &k_cases[_i];
    built b;
    build(c, NULL, 0, NULL, &b);
    const bool int8_dot = strstr(c->scheme, "a8_int8") != NULL; /* W8A8 and W4A8 */
    const bool fp4_dot = strcmp(c->scheme, "w4a4_nvfp4") == 0;
    ck_assert_msg(b.layer->int8_dot == int8_dot, "%s (case %d): int8_dot %d", c->scheme, _i,
                  (int)b.layer->int8_dot);
    ck_assert_msg(b.layer->fp4_dot == fp4_dot, "%s (case %d): fp4_dot %d", c->scheme, _i,
                  (int)b.layer->fp4_dot);
    const bool batch_invariant =
        (int8_dot && b.layer->act_kind != MOEQ__ACT_INT8_TENSOR) || fp4_dot;
    static float y_first[H];
    enum { TB = 45 };
    static float xb[TB * H];
    static int32_t ids[TB * K];
    static float wts[TB * K];
    g_rng = 0x5EEDu + (uint64_t)_i;
    for (int i = 0; i < TB * H; i++) xb[i] = bf16(gauss());
    for (int t = 0; t < TB; t++) {
        int a = (int)(uniform() * E), b2 = (a + 1 + (int)(uniform() * (E - 1))) % E;
        ids[t * K] = a;
        ids[t * K + 1] = t % 9 == 4 ? -1 : b2; /* an empty slot now and then */
        wts[t * K] = (float)uniform();
        wts[t * K + 1] = 1.0f - wts[t * K];
    }
    moeq_error err;
    moeq_ctx *ref = NULL, *fast[3] = {NULL, NULL, NULL}, *portable = NULL;
    moeq_ctx_options ro = {2, 1}, po = {2, 0};
    ck_assert_ok(moeq_ctx_create(&ro, &ref, &err), &err);
    for (int i = 0; i < 3; i++) {
        moeq_ctx_options fo = {i + 1, 0};
        ck_assert_ok(moeq_ctx_create(&fo, &fast[i], &err), &err);
    }
    ck_assert_ok(moeq_ctx_create(&po, &portable, &err), &err);
    portable->kern = &moeq__kern_portable;
    static const int tokens[] = {1, 3, T, TB};
    for (size_t ti = 0; ti < sizeof tokens / sizeof tokens[0]; ti++) {
        int n = tokens[ti];
        static float y_ref[TB * H], y[3][TB * H];
        static double y64[TB * H];
        ck_assert_ok(moeq_moe_apply(b.layer, ref, MOEQ_DTYPE_F32, xb, n, K, ids, wts,
                                    MOEQ_DTYPE_F32, y_ref, &err),
                     &err);
        for (int i = 0; i < 3; i++) {
            ck_assert_ok(moeq_moe_apply(b.layer, fast[i], MOEQ_DTYPE_F32, xb, n, K, ids, wts,
                                        MOEQ_DTYPE_F32, y[i], &err),
                         &err);
        }
        ck_assert_msg(memcmp(y[0], y[1], sizeof(float) * (size_t)(n * H)) == 0,
                      "%s (case %d, %d tokens): 1 and 2 threads differ", c->scheme, _i, n);
        ck_assert_msg(memcmp(y[0], y[2], sizeof(float) * (size_t)(n * H)) == 0,
                      "%s (case %d, %d tokens): 1 and 3 threads differ", c->scheme, _i, n);
        if (ti == 0) memcpy(y_first, y[0], sizeof y_first);
        if (batch_invariant) {
            ck_assert_msg(memcmp(y_first, y[0], sizeof y_first) == 0,
                          "%s (case %d): token 0 differs alone and among %d tokens", c->scheme, _i,
                          n);
        }
        double ref_d[TB * H];
        for (int i = 0; i < n * H; i++) ref_d[i] = y_ref[i];
        double e = rel_error(y[0], ref_d, (size_t)(n * H));
        ck_assert_ok(
            moeq_moe_apply_reference(b.layer, MOEQ_DTYPE_F32, xb, n, K, ids, wts, y64, &err), &err);
        double e64 = rel_error(y[0], y64, (size_t)(n * H));
        if (ti == sizeof tokens / sizeof tokens[0] - 1) {
            printf("%-15s %-22s fast vs reference forward %.2e, vs float64 %.2e (%d tokens)\n",
                   c->scheme, c->format, e, e64, n);
        }
        ck_assert_msg(e <= c->tolerance, "%s (case %d, %d tokens): fast vs reference %g > %g",
                      c->scheme, _i, n, e, c->tolerance);
        ck_assert_msg(e64 <= c->tolerance, "%s (case %d, %d tokens): fast vs float64 %g > %g",
                      c->scheme, _i, n, e64, c->tolerance);
        static float y_port[TB * H];
        ck_assert_ok(moeq_moe_apply(b.layer, portable, MOEQ_DTYPE_F32, xb, n, K, ids, wts,
                                    MOEQ_DTYPE_F32, y_port, &err),
                     &err);
        double ep = rel_error(y_port, ref_d, (size_t)(n * H));
        ck_assert_msg(ep <= c->tolerance, "%s (case %d, %d tokens): portable vs reference %g > %g",
                      c->scheme, _i, n, ep, c->tolerance);
    }
    moeq_ctx_destroy(portable);
    moeq_ctx_destroy(ref);
    for (int i = 0; i < 3; i++) moeq_ctx_destroy(fast[i]);
    free_built(&b);
}
END_TEST

/* Sizes that are not multiples of the kernels' 16-row blocks (partial blocks)
 * or of 8 columns (no packing: the generic panels): layers filled directly
 * with random codes and scales, the fast path against force_ref and the
 * float64 reference, 1 and 3 threads identical. */
START_TEST(test_odd_sizes) {
    static const struct {
        const char *scheme, *weights, *inputs, *format;
        int32_t h, i;
        int packed;
        double tolerance;
    } v[] = {
        {"w8a8_fp8", "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}", TOKEN_F8,
         "float-quantized", 40, 24, 1, 2e-3},
        {"w8a8_fp8", "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}", TOKEN_F8,
         "float-quantized", 36, 20, 0, 2e-3},
        {"wna16", "{\"num_bits\":4,\"group_size\":8}", "null", "pack-quantized", 56, 40, 1, 1e-5},
        {"wna16", "{\"num_bits\":4,\"group_size\":4}", "null", "pack-quantized", 44, 28, 0, 1e-5},
    };
    moe_case mc_case = {v[_i].scheme, v[_i].weights, v[_i].inputs, v[_i].format, 0, 0, 0};
    moeq_config *cfg = one_group(&mc_case);
    moeq_error err;
    moeq_resolution res;
    ck_assert_ok(moeq_resolve_moe(cfg, "m.experts", E, NULL, NULL, &res, &err), &err);
    moeq_selection sel;
    ck_assert_ok(moeq_select(&res, "m.experts", NULL, &sel, &err), &err);
    moeq_moe_config mc;
    memset(&mc, 0, sizeof mc);
    mc.scheme = sel.scheme;
    mc.weights = res.weights;
    mc.input_activations = res.input_activations;
    mc.format = res.format;
    mc.num_experts = E;
    mc.hidden_size = v[_i].h;
    mc.intermediate_size = v[_i].i;
    mc.has_bias = 1;
    moeq_moe *layer = NULL;
    ck_assert_ok(moeq_moe_create(&mc, &layer, &err), &err);
    g_rng = 0x0DDu + (uint64_t)_i;
    for (uint32_t pi = 0; pi < layer->n_params; pi++) {
        moeq__param *p = &layer->params[pi];
        if (!p->pub.required || p->pub.layout == MOEQ_LAYOUT_DERIVED) continue;
        bool w13 = strncmp(p->name, "w13_", 4) == 0;
        size_t count = p->pub.nbytes / moeq_dtype_size(p->pub.dtype);
        uint8_t *d = p->pub.data;
        if (strstr(p->name, "weight_shape")) {
            int64_t *s = p->pub.data;
            for (size_t e = 0; e < count / 2; e++) {
                s[2 * e] = w13 ? v[_i].i : v[_i].h;
                s[2 * e + 1] = w13 ? v[_i].h : v[_i].i;
            }
        } else if (strstr(p->name, "scale") || strstr(p->name, "bias")) {
            for (size_t j = 0; j < count; j++) {
                float f =
                    strstr(p->name, "bias") ? 0.1f * gauss() : (float)(0.01 + 0.02 * uniform());
                if (p->pub.dtype == MOEQ_DTYPE_F32) {
                    memcpy(d + 4 * j, &f, 4);
                } else {
                    uint16_t h16 = moeq__f32_to_bf16(f);
                    memcpy(d + 2 * j, &h16, 2);
                }
            }
        } else {
            for (size_t j = 0; j < p->pub.nbytes; j++) {
                d[j] = (uint8_t)(uniform() * 256);
                if (p->pub.dtype == MOEQ_DTYPE_F8_E4M3 && (d[j] & 0x7F) == 0x7F) d[j] = 0x30;
            }
        }
        memset(p->loaded, 1, (size_t)E * 2);
    }
    ck_assert_ok(moeq_moe_finalize(layer, &err), &err);
    ck_assert_int_eq(layer->all_packed, v[_i].packed);
    /* The packed projections sit in one arena on a 2 MiB boundary (moe_pack.c),
     * each 64-byte aligned, in order, 64 zero bytes after each. */
    const uint8_t *prev_end = layer->pk_arena;
    for (size_t pi = 0; pi < (size_t)E * 3; pi++) {
        const moeq__proj *pj = &layer->projs[pi];
        if (pj->w.kind != MOEQ__QW_PACKED) continue;
        ck_assert_ptr_nonnull(layer->pk_arena);
        ck_assert_uint_eq((uintptr_t)layer->pk_arena % ((uintptr_t)2 << 20), 0);
        ck_assert_uint_eq((uintptr_t)pj->pk.codes % 64, 0);
        ck_assert(pj->pk.codes >= prev_end);
        ck_assert(pj->pk.scales == pj->pk.codes + pj->pk.blocks * pj->pk.blk_code_bytes);
        const uint8_t *end = pj->pk.scales + pj->pk.blocks * pj->pk.blk_scale_bytes;
        for (int z = 0; z < 64; z++) ck_assert_uint_eq(end[z], 0);
        prev_end = end + 64;
    }
    enum { TO = 21 };
    size_t H2 = (size_t)v[_i].h;
    float *x = malloc(sizeof(float) * TO * H2), *y1 = malloc(sizeof(float) * TO * H2),
          *y3 = malloc(sizeof(float) * TO * H2), *yr = malloc(sizeof(float) * TO * H2);
    double *y64 = malloc(sizeof(double) * TO * H2), *yrd = malloc(sizeof(double) * TO * H2);
    int32_t ids[TO * K];
    float wts[TO * K];
    for (size_t i = 0; i < TO * H2; i++) x[i] = bf16(gauss());
    for (int t = 0; t < TO; t++) {
        ids[t * K] = t % E;
        ids[t * K + 1] = (t < 16 ? 3 : t + 5) % E; /* expert 3 gets many rows: panels */
        if (ids[t * K + 1] == ids[t * K]) ids[t * K + 1] = (ids[t * K] + 1) % E;
        wts[t * K] = 0.7f;
        wts[t * K + 1] = 0.3f;
    }
    moeq_ctx *c1 = NULL, *c3 = NULL, *cr = NULL;
    moeq_ctx_options o1 = {1, 0}, o3 = {3, 0}, orf = {1, 1};
    ck_assert_ok(moeq_ctx_create(&o1, &c1, &err), &err);
    ck_assert_ok(moeq_ctx_create(&o3, &c3, &err), &err);
    ck_assert_ok(moeq_ctx_create(&orf, &cr, &err), &err);
    ck_assert_ok(
        moeq_moe_apply(layer, c1, MOEQ_DTYPE_F32, x, TO, K, ids, wts, MOEQ_DTYPE_F32, y1, &err),
        &err);
    ck_assert_ok(
        moeq_moe_apply(layer, c3, MOEQ_DTYPE_F32, x, TO, K, ids, wts, MOEQ_DTYPE_F32, y3, &err),
        &err);
    ck_assert_ok(
        moeq_moe_apply(layer, cr, MOEQ_DTYPE_F32, x, TO, K, ids, wts, MOEQ_DTYPE_F32, yr, &err),
        &err);
    ck_assert_ok(moeq_moe_apply_reference(layer, MOEQ_DTYPE_F32, x, TO, K, ids, wts, y64, &err),
                 &err);
    ck_assert(memcmp(y1, y3, sizeof(float) * TO * H2) == 0);
    for (size_t i = 0; i < TO * H2; i++) yrd[i] = yr[i];
    double e = rel_error(y1, yrd, TO * H2), e64 = rel_error(y1, y64, TO * H2);
    ck_assert_msg(e <= v[_i].tolerance && e64 <= v[_i].tolerance,
                  "%s %dx%d: fast vs reference %g, vs float64 %g", v[_i].scheme, v[_i].h, v[_i].i,
                  e, e64);
    moeq_ctx_destroy(c1);
    moeq_ctx_destroy(c3);
    moeq_ctx_destroy(cr);
    free(x);
    free(y1);
    free(y3);
    free(yr);
    free(y64);
    free(yrd);
    moeq_moe_destroy(layer);
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_scheme_covered) {
    for (int32_t id = 0; id < MOEQ_SCHEME_COUNT; id++) {
        int seen = 0;
        for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
            if (!strcmp(k_cases[i].scheme, moeq_scheme_name(id))) seen = 1;
        }
        ck_assert_msg(seen, "no end-to-end case runs %s", moeq_scheme_name(id));
    }
}
END_TEST

/* Two layers holding complementary halves of the experts sum to the whole. */
START_TEST(test_expert_parallel_halves) {
    const moe_case *c = &k_cases[_i];
    static const int32_t even[E] = {0, -1, 1, -1, 2, -1, 3, -1};
    static const int32_t odd[E] = {-1, 0, -1, 1, -1, 2, -1, 3};
    built full, a, b;
    build(c, NULL, 0, NULL, &full);
    build(c, even, 4, NULL, &a);
    build(c, odd, 4, NULL, &b);
    make_inputs();
    moeq_ctx *ctx = NULL;
    moeq_error err;
    ck_assert_ok(moeq_ctx_create(NULL, &ctx, &err), &err);
    static float y_full[T * H], y_a[T * H], y_b[T * H];
    ck_assert_ok(moeq_moe_apply(full.layer, ctx, MOEQ_DTYPE_F32, g_x, T, K, g_ids, g_wts,
                                MOEQ_DTYPE_F32, y_full, &err),
                 &err);
    ck_assert_ok(moeq_moe_apply(a.layer, ctx, MOEQ_DTYPE_F32, g_x, T, K, g_ids, g_wts,
                                MOEQ_DTYPE_F32, y_a, &err),
                 &err);
    ck_assert_ok(moeq_moe_apply(b.layer, ctx, MOEQ_DTYPE_F32, g_x, T, K, g_ids, g_wts,
                                MOEQ_DTYPE_F32, y_b, &err),
                 &err);
    double max_err = 0, max_ref = 0;
    for (int i = 0; i < T * H; i++) {
        max_err = fmax(max_err, fabs((double)y_a[i] + (double)y_b[i] - (double)y_full[i]));
        max_ref = fmax(max_ref, fabs((double)y_full[i]));
    }
    /* Each token's k experts sum in one order on the full layer and split in
     * two sums here: float32 rounding apart, the same. */
    ck_assert_msg(max_err <= 1e-5 * max_ref, "%s: halves differ by %g (max %g)", c->scheme, max_err,
                  max_ref);
    moeq_ctx_destroy(ctx);
    free_built(&full);
    free_built(&a);
    free_built(&b);
}
END_TEST

/* bf16 and f16 in and out: the output is the f32 result of the same input
 * rounded once.  (A bf16 input of a weight-only layer may take the bfloat16
 * kernels, whose sums run in another order than the float path's: its f32
 * result is the f32 input's up to float rounding.) */
START_TEST(test_io_dtypes) {
    built b;
    build(&k_cases[0], NULL, 0, NULL, &b);
    make_inputs();
    moeq_ctx *ctx = NULL;
    moeq_error err;
    ck_assert_ok(moeq_ctx_create(NULL, &ctx, &err), &err);
    static float ref[T * H];
    ck_assert_ok(moeq_moe_apply(b.layer, ctx, MOEQ_DTYPE_F32, g_x, T, K, g_ids, g_wts,
                                MOEQ_DTYPE_F32, ref, &err),
                 &err);
    static uint16_t xb[T * H], ob[T * H], xh[T * H], oh[T * H];
    moeq__from_f32_ref(MOEQ_DTYPE_BF16, g_x, T * H, xb); /* g_x holds bf16 values: exact */
    moeq__from_f32_ref(MOEQ_DTYPE_F16, g_x, T * H, xh);
    static float refb[T * H];
    ck_assert_ok(moeq_moe_apply(b.layer, ctx, MOEQ_DTYPE_BF16, xb, T, K, g_ids, g_wts,
                                MOEQ_DTYPE_F32, refb, &err),
                 &err);
    ck_assert_ok(moeq_moe_apply(b.layer, ctx, MOEQ_DTYPE_BF16, xb, T, K, g_ids, g_wts,
                                MOEQ_DTYPE_BF16, ob, &err),
                 &err);
    ck_assert_ok(moeq_moe_apply(b.layer, ctx, MOEQ_DTYPE_BF16, xb, T, K, g_ids, g_wts,
                                MOEQ_DTYPE_F16, oh, &err),
                 &err);
    double max_ref = 0;
    for (int i = 0; i < T * H; i++) max_ref = fmax(max_ref, fabs((double)ref[i]));
    for (int i = 0; i < T * H; i++) {
        ck_assert_uint_eq(ob[i], moeq__f32_to_bf16(refb[i]));
        ck_assert_uint_eq(oh[i], moeq__f32_to_f16(refb[i]));
        ck_assert_msg(fabs((double)refb[i] - (double)ref[i]) <= 1e-5 * max_ref,
                      "bf16 input: element %d %g vs %g", i, (double)refb[i], (double)ref[i]);
    }
    /* f16 input of the same values gives the same output */
    ck_assert_ok(moeq_moe_apply(b.layer, ctx, MOEQ_DTYPE_F16, xh, T, K, g_ids, g_wts,
                                MOEQ_DTYPE_BF16, ob, &err),
                 &err);
    for (int i = 0; i < T * H; i++) ck_assert_uint_eq(ob[i], moeq__f32_to_bf16(ref[i]));
    /* in place (same dtype) */
    static float inplace[T * H];
    memcpy(inplace, g_x, sizeof inplace);
    ck_assert_ok(moeq_moe_apply(b.layer, ctx, MOEQ_DTYPE_F32, inplace, T, K, g_ids, g_wts,
                                MOEQ_DTYPE_F32, inplace, &err),
                 &err);
    ck_assert(memcmp(inplace, ref, sizeof ref) == 0);
    ck_assert_status(moeq_moe_apply(b.layer, ctx, MOEQ_DTYPE_F32, inplace, T, K, g_ids, g_wts,
                                    MOEQ_DTYPE_BF16, inplace, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_status(moeq_moe_apply(b.layer, ctx, MOEQ_DTYPE_I32, g_x, T, K, g_ids, g_wts,
                                    MOEQ_DTYPE_F32, ref, &err),
                     MOEQ_STATUS_DTYPE, &err);
    moeq_ctx_destroy(ctx);
    free_built(&b);
}
END_TEST

/* Routing options the forward applies: scaling, weight on input, -1 ids,
 * out-of-range ids and non-finite weights. */
START_TEST(test_forward_options) {
    built b;
    moeq_moe_config extra;
    memset(&extra, 0, sizeof extra);
    extra.routed_scaling_factor = 2.5f;
    build(&k_cases[0], NULL, 0, &extra, &b);
    built plain;
    build(&k_cases[0], NULL, 0, NULL, &plain);
    make_inputs();
    moeq_ctx *ctx = NULL;
    moeq_error err;
    ck_assert_ok(moeq_ctx_create(NULL, &ctx, &err), &err);
    static float y[T * H], y_plain[T * H];
    ck_assert_ok(moeq_moe_apply(b.layer, ctx, MOEQ_DTYPE_F32, g_x, T, K, g_ids, g_wts,
                                MOEQ_DTYPE_F32, y, &err),
                 &err);
    ck_assert_ok(moeq_moe_apply(plain.layer, ctx, MOEQ_DTYPE_F32, g_x, T, K, g_ids, g_wts,
                                MOEQ_DTYPE_F32, y_plain, &err),
                 &err);
    for (int i = 0; i < T * H; i++) ck_assert_float_eq_tol(y[i], 2.5f * y_plain[i], 1e-6f);
    /* an id of -1 contributes nothing: token 0 with only its first expert */
    int32_t ids[T * K];
    memcpy(ids, g_ids, sizeof ids);
    float wts[T * K];
    memcpy(wts, g_wts, sizeof wts);
    ids[1] = -1;
    wts[0] = 1.0f;
    ck_assert_ok(moeq_moe_apply(plain.layer, ctx, MOEQ_DTYPE_F32, g_x, 1, K, ids, wts,
                                MOEQ_DTYPE_F32, y, &err),
                 &err);
    static double ref[T * H];
    int32_t single[T * K];
    float wsingle[T * K];
    for (int p = 0; p < T * K; p++) {
        single[p] = g_ids[0]; /* every token: the first expert of token 0, weight 1 */
        wsingle[p] = p % K == 0 ? 1.0f : 0.0f;
    }
    reference(&plain, g_x, single, wsingle, NULL, ref);
    ck_assert(rel_error(y, ref, H) < 1e-5);
    ids[1] = E;
    ck_assert_status(moeq_moe_apply(plain.layer, ctx, MOEQ_DTYPE_F32, g_x, 1, K, ids, wts,
                                    MOEQ_DTYPE_F32, y, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "topk_ids[0][1] is 8"));
    ids[1] = 0;
    wts[1] = NAN;
    ck_assert_status(moeq_moe_apply(plain.layer, ctx, MOEQ_DTYPE_F32, g_x, 1, K, ids, wts,
                                    MOEQ_DTYPE_F32, y, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "not finite"));
    /* T = 0 is fine, even with NULL buffers */
    ck_assert_ok(moeq_moe_apply(plain.layer, ctx, MOEQ_DTYPE_F32, NULL, 0, K, NULL, NULL,
                                MOEQ_DTYPE_F32, NULL, &err),
                 &err);
    /* weight on input needs top_k 1 */
    moeq_moe_config on_input;
    memset(&on_input, 0, sizeof on_input);
    on_input.apply_router_weight_on_input = 1;
    built wi;
    build(&k_cases[0], NULL, 0, &on_input, &wi);
    ck_assert_status(moeq_moe_apply(wi.layer, ctx, MOEQ_DTYPE_F32, g_x, T, K, g_ids, g_wts,
                                    MOEQ_DTYPE_F32, y, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    int32_t id1[T];
    float w1[T];
    for (int t = 0; t < T; t++) {
        id1[t] = g_ids[t * K];
        w1[t] = 0.5f;
    }
    /* x * 0.5 through the experts: silu is not linear, so this is not 0.5 * y */
    ck_assert_ok(
        moeq_moe_apply(wi.layer, ctx, MOEQ_DTYPE_F32, g_x, T, 1, id1, w1, MOEQ_DTYPE_F32, y, &err),
        &err);
    static float xs[T * H];
    for (int i = 0; i < T * H; i++) xs[i] = 0.5f * g_x[i];
    float ones[T];
    for (int t = 0; t < T; t++) ones[t] = 1.0f;
    ck_assert_ok(moeq_moe_apply(plain.layer, ctx, MOEQ_DTYPE_F32, xs, T, 1, id1, ones,
                                MOEQ_DTYPE_F32, y_plain, &err),
                 &err);
    for (int i = 0; i < T * H; i++) ck_assert_float_eq_tol(y[i], y_plain[i], 1e-6f);
    moeq_ctx_destroy(ctx);
    free_built(&b);
    free_built(&plain);
    free_built(&wi);
}
END_TEST

/* Activations, their limits, biases and parameter dtypes against the test's
 * own formulas; results identical for any thread count. */
START_TEST(test_activation_variants) {
    static const struct {
        int32_t activation;
        float alpha, limit;
        int32_t bias, params_dtype;
    } v[] = {
        {MOEQ_ACT_SILU, 0, 0, 1, MOEQ_DTYPE_F32},
        {MOEQ_ACT_SILU, 0, 0.05f, 0, MOEQ_DTYPE_F16},
        {MOEQ_ACT_GELU, 0, 0, 1, 0},
        {MOEQ_ACT_GELU_TANH, 0, 0, 0, 0},
        {MOEQ_ACT_SWIGLUOAI, 0, 0, 1, 0},
        {MOEQ_ACT_SWIGLUOAI, 1.2f, 0.03f, 0, 0},
    };
    moeq_moe_config extra;
    memset(&extra, 0, sizeof extra);
    extra.activation = v[_i].activation;
    extra.swiglu_alpha = v[_i].alpha;
    extra.swiglu_limit = v[_i].limit;
    extra.has_bias = v[_i].bias;
    extra.params_dtype = v[_i].params_dtype;
    built b;
    build(&k_cases[2], NULL, 0, &extra, &b); /* wna16 int4 asymmetric */
    make_inputs();
    moeq_error err;
    moeq_ctx *one = NULL, *two = NULL;
    moeq_ctx_options o1 = {1, 0}, o2 = {2, 0};
    ck_assert_ok(moeq_ctx_create(&o1, &one, &err), &err);
    ck_assert_ok(moeq_ctx_create(&o2, &two, &err), &err);
    static float y1[T * H], y2[T * H];
    ck_assert_ok(moeq_moe_apply(b.layer, one, MOEQ_DTYPE_F32, g_x, T, K, g_ids, g_wts,
                                MOEQ_DTYPE_F32, y1, &err),
                 &err);
    ck_assert_ok(moeq_moe_apply(b.layer, two, MOEQ_DTYPE_F32, g_x, T, K, g_ids, g_wts,
                                MOEQ_DTYPE_F32, y2, &err),
                 &err);
    ck_assert(memcmp(y1, y2, sizeof y1) == 0);
    static double ref[T * H];
    reference(&b, g_x, g_ids, g_wts, NULL, ref);
    double e1 = rel_error(y1, ref, T * H);
    ck_assert_msg(e1 < 1e-5, "variant %d: relative error %g", _i, e1);
    /* the parameter dtype is what the manifest says */
    moeq_param p;
    ck_assert_ok(moeq_moe_find_param(b.layer, "w13_weight_scale", &p), &err);
    ck_assert_int_eq(p.dtype, v[_i].params_dtype ? v[_i].params_dtype : MOEQ_DTYPE_BF16);
    if (v[_i].bias) ck_assert_ok(moeq_moe_find_param(b.layer, "w2_bias", &p), &err);
    moeq_ctx_destroy(one);
    moeq_ctx_destroy(two);
    free_built(&b);
}
END_TEST

/* moeq_moe_config_init takes what a resolution and selection decide, and the
 * config's dequant flags (here: an older writer's packing). */
START_TEST(test_config_init) {
    static const char *json =
        "{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", "
        "\"version\": \"0.9.0\", \"config_groups\": {\"g\": {\"targets\": [\"Linear\"], "
        "\"weights\": {\"num_bits\": 4, \"strategy\": \"group\", \"group_size\": 32}}}}";
    moeq_error err;
    moeq_config *cfg = NULL;
    ck_assert_ok(moeq_config_parse(json, strlen(json), NULL, &cfg, &err), &err);
    moeq_resolution res;
    moeq_selection sel;
    ck_assert_ok(moeq_resolve_moe(cfg, "model.layers.0.mlp.experts", 4, NULL, NULL, &res, &err),
                 &err);
    ck_assert_ok(moeq_select(&res, NULL, NULL, &sel, &err), &err);
    moeq_moe_config mc;
    memset(&mc, 0x5A, sizeof mc);
    ck_assert_ok(moeq_moe_config_init(&mc, cfg, &res, &sel, &err), &err);
    ck_assert_int_eq(mc.scheme, sel.scheme);
    ck_assert_str_eq(moeq_scheme_name(mc.scheme), "wna16");
    ck_assert_ptr_eq(mc.weights, res.weights);
    ck_assert_ptr_null(mc.input_activations);
    ck_assert_int_eq(mc.format, MOEQ_FORMAT_PACK_QUANTIZED);
    ck_assert_uint_eq(mc.dequant_flags, MOEQ_DEQUANT_LEGACY_PACKING);
    ck_assert_ptr_null(mc.prefix);
    ck_assert_int_eq(mc.num_experts, 0);
    ck_assert(mc.routed_scaling_factor == 0.0f);
    ck_assert_status(moeq_moe_config_init(&mc, cfg, NULL, &sel, &err), MOEQ_STATUS_INVALID_ARG,
                     &err);
    ck_assert_ptr_nonnull(strstr(err.message, "res is NULL"));
    ck_assert_status(moeq_moe_config_init(NULL, cfg, &res, &sel, &err), MOEQ_STATUS_INVALID_ARG,
                     &err);
    moeq_config_destroy(cfg);
}
END_TEST

static Suite *moe_suite(void) {
    Suite *s = suite_create("moe");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, test_scheme_against_reference, 0,
                        (int)(sizeof k_cases / sizeof k_cases[0]));
    tcase_add_loop_test(tc, test_fast_vs_reference, 0, (int)(sizeof k_cases / sizeof k_cases[0]));
    tcase_add_test(tc, test_scheme_covered);
    tcase_add_loop_test(tc, test_odd_sizes, 0, 4);
    /* a weight-only, an activation-quantized and the NPU pair layout */
    tcase_add_loop_test(tc, test_expert_parallel_halves, 0, 1);
    tcase_add_loop_test(tc, test_expert_parallel_halves, 17, 18);
    tcase_add_loop_test(tc, test_expert_parallel_halves, 22, 23);
    tcase_add_test(tc, test_io_dtypes);
    tcase_add_loop_test(tc, test_activation_variants, 0, 6);
    tcase_add_test(tc, test_forward_options);
    tcase_add_test(tc, test_config_init);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(moe_suite)

/*
 * check_models.c - model families (src/model/family.c): for each family, a
 * small checkpoint in that family's real tensor names and config keys (as
 * transformers writes config.json: no scoring_func, dtype not torch_dtype),
 * its experts compressed as W4A16 (int4 group 32), run through `moeq run`
 * with no hints, against a float64 forward of the family's routing and
 * activation written here from its modeling code (docs/models.md), on the
 * same dequantized weights.  Also the table's reading of config keys:
 * overrides, defaults, DeepSeek-V2's topk_method, unknown families, bad values.
 */
#include "test_util.h"

#include <math.h>
#include <sys/wait.h>

#include "npy.h"
#include "checkpoint/tensor_set.h"

#define E_ 8
#define H_ 64
#define I_ 32
#define T_ 24

enum algo {
    SOFTMAX_TOPK,  /* softmax over all, top-k (+ correction bias for the choice), renormalize? */
    TOPK_SOFTMAX,  /* top-k of the logits, softmax over those k (GPT-OSS, GraniteMoE) */
    SIGMOID_GROUP, /* DeepSeek-V3: sigmoid, + bias, groups by top-2 sum, renorm, scale */
    SIGMOID_TOPK,  /* MiniMax-M2: sigmoid, + bias, top-k, renormalize */
    TOPK_SIGMOID,  /* Llama 4: top-k of the logits, sigmoid, applied to the input */
    SOFTMAX_SCALE, /* DeepSeek-V2: softmax, top-k, scale, never renormalize */
};

typedef struct family_case {
    const char *model_type;
    int algo;
    int top_k;
    int renormalize; /* what the family does with this config */
    int n_group, topk_group;
    double scale;
    int correction_bias;
    const char *extra_keys; /* JSON members the config carries, as transformers writes them */
} family_case;

static const family_case k_cases[] = {
    {"qwen2_moe", SOFTMAX_TOPK, 2, 0, 0, 0, 1.0, 0,
     "\"num_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
     "\"norm_topk_prob\": false, \"shared_expert_intermediate_size\": 64, \"hidden_act\": "
     "\"silu\""},
    {"qwen3_moe", SOFTMAX_TOPK, 2, 1, 0, 0, 1.0, 0,
     /* transformers 5 saves qwen3_moe's expert count as num_local_experts */
     "\"num_local_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
     "\"norm_topk_prob\": true, \"hidden_act\": \"silu\""},
    {"qwen3_next", SOFTMAX_TOPK, 2, 1, 0, 0, 1.0, 0,
     "\"num_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
     "\"norm_topk_prob\": true, \"hidden_act\": \"silu\""},
    {"mixtral", SOFTMAX_TOPK, 2, 1, 0, 0, 1.0, 0,
     "\"num_local_experts\": 8, \"num_experts_per_tok\": 2, \"intermediate_size\": 32, "
     "\"hidden_act\": \"silu\""},
    {"deepseek_v2", SOFTMAX_SCALE, 2, 0, 0, 0, 16.0, 0,
     /* norm_topk_prob true is not read by DeepSeek-V2's gate; greedy ignores n_group */
     "\"n_routed_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
     "\"norm_topk_prob\": true, \"routed_scaling_factor\": 16.0, \"topk_method\": \"greedy\", "
     "\"n_group\": 4, \"topk_group\": 2, \"n_shared_experts\": 2, \"hidden_act\": \"silu\""},
    {"deepseek_v3", SIGMOID_GROUP, 2, 1, 4, 2, 2.5, 1,
     "\"n_routed_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
     "\"norm_topk_prob\": true, \"routed_scaling_factor\": 2.5, \"n_group\": 4, "
     "\"topk_group\": 2, \"n_shared_experts\": 1, \"hidden_act\": \"silu\""},
    {"kimi_k2", SIGMOID_GROUP, 2, 1, 0, 0, 2.827, 1,
     "\"n_routed_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
     "\"norm_topk_prob\": true, \"routed_scaling_factor\": 2.827, \"n_group\": 1, "
     "\"topk_group\": 1, \"hidden_act\": \"silu\""},
    /* GLM4-MoE: the config moeq used to route with softmax */
    {"glm4_moe", SIGMOID_GROUP, 2, 1, 0, 0, 1.0, 1,
     "\"n_routed_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
     "\"norm_topk_prob\": true, \"routed_scaling_factor\": 1.0, \"n_group\": 1, "
     "\"topk_group\": 1, \"n_shared_experts\": 1, \"hidden_act\": \"silu\""},
    {"gpt_oss", TOPK_SOFTMAX, 2, 1, 0, 0, 1.0, 0,
     "\"num_local_experts\": 8, \"num_experts_per_tok\": 2, \"intermediate_size\": 32, "
     "\"swiglu_limit\": 7.0"},
    {"llama4_text", TOPK_SIGMOID, 1, 0, 0, 0, 1.0, 0,
     "\"num_local_experts\": 8, \"num_experts_per_tok\": 1, \"intermediate_size\": 32, "
     "\"hidden_act\": \"silu\""},
    {"olmoe", SOFTMAX_TOPK, 2, 0, 0, 0, 1.0, 0,
     "\"num_experts\": 8, \"num_experts_per_tok\": 2, \"intermediate_size\": 32, "
     "\"norm_topk_prob\": false, \"hidden_act\": \"silu\""},
    {"granitemoe", TOPK_SOFTMAX, 2, 1, 0, 0, 1.0, 0,
     "\"num_local_experts\": 8, \"num_experts_per_tok\": 2, \"intermediate_size\": 32, "
     "\"hidden_act\": \"silu\""},
    {"ernie4_5_moe", SOFTMAX_TOPK, 2, 1, 0, 0, 1.0, 1,
     "\"moe_num_experts\": 8, \"moe_k\": 2, \"moe_intermediate_size\": 32, "
     "\"moe_num_shared_experts\": 2, \"hidden_act\": \"silu\""},
    {"minimax", SOFTMAX_TOPK, 2, 1, 0, 0, 1.0, 0,
     "\"num_local_experts\": 8, \"num_experts_per_tok\": 2, \"intermediate_size\": 32, "
     "\"hidden_act\": \"silu\""},
    {"minimax_m2", SIGMOID_TOPK, 2, 1, 0, 0, 1.0, 1,
     "\"num_local_experts\": 8, \"num_experts_per_tok\": 2, \"intermediate_size\": 32, "
     "\"hidden_act\": \"silu\""},
    /* Nemotron-H: non-gated experts, down(relu2(up x)), under backbone.layers.N.mixer */
    {"nemotron_h", SIGMOID_GROUP, 2, 1, 4, 2, 2.5, 1,
     "\"n_routed_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
     "\"norm_topk_prob\": true, \"routed_scaling_factor\": 2.5, \"n_group\": 4, "
     "\"topk_group\": 2, \"n_shared_experts\": 1, \"mlp_hidden_act\": \"relu2\", "
     "\"moe_latent_size\": null"},
};

/* ---- a checkpoint in the family's names ----------------------------------------------- */

static uint64_t rng_state;
static double uniform(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
}
static float normal(double std) {
    return (float)(std * sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform()));
}

/* Rounds to bfloat16 (to nearest even), as the model dtype stores values. */
static float bf16(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&v, &u, 4);
    return v;
}

typedef struct model {
    char dir[96];
    char block[160];  /* "model.layers.1.mlp" */
    char prefix[200]; /* block + ".experts" */
    moeq_model_moe fam;
    /* dequantized expert weights and plain tensors, float */
    float w[E_][3][I_ > H_ ? I_ *H_ : H_ *I_];
    float b[E_][3][H_ > I_ ? H_ : I_];
    float router[E_ * H_], router_b[E_], corr[E_];
} model;

static void push_plain(moeq_tensor_set *set, const char *name, int32_t dtype, int32_t ndim,
                       const int64_t *shape, const float *v) {
    void *data;
    moeq_error err;
    ck_assert_ok(moeq__tensor_set_push(set, "", name, dtype, ndim, shape, &data, &err), &err);
    int64_t n = shape[0] * (ndim > 1 ? shape[1] : 1);
    for (int64_t i = 0; i < n; i++) {
        if (dtype == MOEQ_DTYPE_F32) {
            ((float *)data)[i] = v[i];
        } else {
            uint32_t u;
            float f = bf16(v[i]);
            memcpy(&u, &f, 4);
            ((uint16_t *)data)[i] = (uint16_t)(u >> 16);
        }
    }
}

/* The module's tensors in the set, as moeq_dequantize takes them. */
static uint32_t module_tensors(const moeq_tensor_set *set, const char *module, moeq_tensor *out,
                               uint32_t cap) {
    uint32_t n = 0;
    size_t len = strlen(module);
    for (uint32_t i = 0; i < moeq_tensor_set_count(set) && n < cap; i++) {
        const moeq_tensor *t = moeq_tensor_set_get(set, i);
        if (strncmp(t->name, module, len) == 0 && t->name[len] == '.' &&
            strcmp(t->name + len + 1, "bias") != 0) {
            out[n++] = *t;
        }
    }
    return n;
}

static const char *k_quant =
    "\"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"format\": "
    "\"pack-quantized\", \"quantization_status\": \"compressed\", \"version\": \"0.20.1\", "
    "\"config_groups\": {\"group_0\": {\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 4, "
    "\"type\": \"int\", \"symmetric\": true, \"strategy\": \"group\", \"group_size\": 32}, "
    "\"input_activations\": null, \"format\": \"pack-quantized\"}}, "
    "\"ignore\": [\"lm_head\", \"re:.*mlp.gate$\", \"re:.*mixer.gate$\", \"re:.*router.*\"]}";

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* experts: the experts' path under the MoE block; NULL: the family's
 * ("experts"), or "experts.experts" as llm-compressor names GPT-OSS's. */
static void build(const family_case *c, const char *quant, const char *experts, model *m) {
    moeq_error err;
    ck_assert_ok(moeq_model_family(c->model_type, &m->fam, &err), &err);
    moeq_test_mkdtemp(m->dir, sizeof m->dir, "moeq_models");
    /* Nemotron-H's decoder layers sit under backbone, the others' under model */
    snprintf(m->block, sizeof m->block, "%s.layers.1.%s",
             strcmp(c->model_type, "nemotron_h") == 0 ? "backbone" : "model", m->fam.moe_block);
    snprintf(m->prefix, sizeof m->prefix, "%s.%s", m->block, experts ? experts : m->fam.experts);
    rng_state = 0x9E3779B97F4A7C15ull ^ (uint64_t)strlen(c->model_type) * 7919u;

    char cfg_json[4096];
    snprintf(cfg_json, sizeof cfg_json,
             "{\"model_type\": \"%s\", \"architectures\": [\"X\"], \"hidden_size\": %d, "
             "\"num_hidden_layers\": 2, \"dtype\": \"bfloat16\", %s, %s}",
             c->model_type, H_, c->extra_keys, quant);
    char path[160];
    snprintf(path, sizeof path, "%s/config.json", m->dir);
    write_text(path, cfg_json);
    moeq_config *cfg = NULL;
    ck_assert_ok(moeq_config_parse(cfg_json, strlen(cfg_json), NULL, &cfg, &err), &err);

    moeq_tensor_set *set = NULL;
    ck_assert_ok(moeq_tensor_set_create(&set, &err), &err);
    static float wf[H_ * I_];
    for (int e = 0; e < E_; e++) {
        for (int p = 0; p < 3; p++) {
            if (p == 0 && !m->fam.gated) continue; /* no gate_proj */
            int64_t rows = p == 2 ? H_ : I_, cols = p == 2 ? I_ : H_;
            for (int64_t i = 0; i < rows * cols; i++) wf[i] = bf16(normal(0.2));
            char module[256];
            snprintf(module, sizeof module, "%s.%d.%s", m->prefix, e, m->fam.proj[p]);
            moeq_resolution res;
            ck_assert_ok(moeq_resolve(cfg, module, MOEQ_MODULE_EXPERT, NULL, &res, &err), &err);
            ck_assert_int_eq(res.status, MOEQ_MATCH_QUANTIZED);
            ck_assert_ok(moeq_compress(res.weights, res.format, module, wf, rows, cols,
                                       MOEQ_DTYPE_BF16, NULL, 0.0f, &set, &err),
                         &err);
            /* the weights the model runs: the checkpoint's, dequantized */
            moeq_tensor ts[8];
            uint32_t nt = module_tensors(set, module, ts, 8);
            int64_t shape[2];
            ck_assert_ok(moeq_dequantize(res.weights, res.format, 0, module, ts, nt, MOEQ_DTYPE_F32,
                                         m->w[e][p], (uint64_t)(rows * cols) * 4u, shape, &err),
                         &err);
            if (m->fam.expert_bias) {
                for (int64_t i = 0; i < rows; i++) m->b[e][p][i] = bf16(normal(0.1));
                char name[300];
                snprintf(name, sizeof name, "%s.bias", module);
                push_plain(set, name, MOEQ_DTYPE_BF16, 1, &rows, m->b[e][p]);
            } else {
                memset(m->b[e][p], 0, sizeof m->b[e][p]);
            }
        }
    }
    for (int i = 0; i < E_ * H_; i++) m->router[i] = bf16(normal(0.3));
    char name[300];
    snprintf(name, sizeof name, "%s.%s.weight", m->block, m->fam.router);
    const int64_t rshape[2] = {E_, H_};
    push_plain(set, name, MOEQ_DTYPE_BF16, 2, rshape, m->router);
    const int64_t e1 = E_;
    memset(m->router_b, 0, sizeof m->router_b);
    if (m->fam.router_bias) {
        for (int i = 0; i < E_; i++) m->router_b[i] = bf16(normal(0.5));
        snprintf(name, sizeof name, "%s.%s.bias", m->block, m->fam.router);
        push_plain(set, name, MOEQ_DTYPE_BF16, 1, &e1, m->router_b);
    }
    memset(m->corr, 0, sizeof m->corr);
    if (c->correction_bias) {
        ck_assert_msg(m->fam.correction_bias[0], "%s has no correction bias name", c->model_type);
        for (int i = 0; i < E_; i++) m->corr[i] = normal(0.05);
        snprintf(name, sizeof name, "%s.%s", m->block, m->fam.correction_bias);
        /* Ernie 4.5 stores moe_statics as [1, E] */
        const int64_t cshape[2] = {1, E_};
        if (strcmp(c->model_type, "ernie4_5_moe") == 0) {
            push_plain(set, name, MOEQ_DTYPE_F32, 2, cshape, m->corr);
        } else {
            push_plain(set, name, MOEQ_DTYPE_F32, 1, &e1, m->corr);
        }
    }
    snprintf(path, sizeof path, "%s/model.safetensors", m->dir);
    ck_assert_ok(moeq_safetensors_write(path, moeq_tensor_set_get(set, 0),
                                        moeq_tensor_set_count(set), NULL, &err),
                 &err);
    moeq_tensor_set_destroy(set);
    moeq_config_destroy(cfg);
}

/* ---- the family's forward, float64 ---------------------------------------------------- */

static double sigm(double v) {
    return 1.0 / (1.0 + exp(-v));
}

/* Indices of the k largest key[i] over allowed[i] (ties: lower index). */
static void top_k(const double *key, const int *allowed, int n, int k, int *out) {
    int used[E_] = {0};
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            if (used[i] || (allowed && !allowed[i])) continue;
            if (best < 0 || key[i] > key[best]) best = i;
        }
        used[best] = 1;
        out[j] = best;
    }
}

static void route(const family_case *c, const model *m, const double *logits, int *ids, double *w) {
    const int k = c->top_k;
    double p[E_], choice[E_];
    int allowed[E_];
    for (int e = 0; e < E_; e++) allowed[e] = 1;
    switch (c->algo) {
        case SOFTMAX_TOPK:
        case SOFTMAX_SCALE: {
            double mx = logits[0], s = 0;
            for (int e = 1; e < E_; e++) mx = fmax(mx, logits[e]);
            for (int e = 0; e < E_; e++) s += p[e] = exp(logits[e] - mx);
            for (int e = 0; e < E_; e++) {
                p[e] /= s;
                choice[e] = p[e] + m->corr[e];
            }
            top_k(choice, NULL, E_, k, ids);
            for (int j = 0; j < k; j++) w[j] = p[ids[j]];
            break;
        }
        case TOPK_SOFTMAX:
        case TOPK_SIGMOID: {
            top_k(logits, NULL, E_, k, ids);
            double s = 0;
            for (int j = 0; j < k; j++) {
                w[j] = c->algo == TOPK_SIGMOID ? sigm(logits[ids[j]]) : exp(logits[ids[j]]);
                s += w[j];
            }
            if (c->algo == TOPK_SOFTMAX) {
                for (int j = 0; j < k; j++) w[j] /= s;
            }
            break;
        }
        case SIGMOID_GROUP:
        case SIGMOID_TOPK: {
            for (int e = 0; e < E_; e++) {
                p[e] = sigm(logits[e]);
                choice[e] = p[e] + m->corr[e];
            }
            if (c->n_group > 1) {
                const int per = E_ / c->n_group;
                double gs[E_];
                for (int g = 0; g < c->n_group; g++) {
                    int two[2];
                    top_k(choice + g * per, NULL, per, 2, two);
                    gs[g] = choice[g * per + two[0]] + choice[g * per + two[1]];
                }
                int keep[E_];
                top_k(gs, NULL, c->n_group, c->topk_group, keep);
                for (int e = 0; e < E_; e++) allowed[e] = 0;
                for (int j = 0; j < c->topk_group; j++) {
                    for (int i = 0; i < per; i++) allowed[keep[j] * per + i] = 1;
                }
            }
            top_k(choice, allowed, E_, k, ids);
            for (int j = 0; j < k; j++) w[j] = p[ids[j]];
            break;
        }
        default: ck_abort_msg("unknown routing");
    }
    if (c->renormalize) {
        double s = 0;
        for (int j = 0; j < k; j++) s += w[j];
        for (int j = 0; j < k; j++) w[j] /= s;
    }
    for (int j = 0; j < k; j++) w[j] *= c->scale;
}

/* E4M3 (finite, max 448) nearest-even rounding of v, for fake-quantized inputs. */
static double e4m3(double v) {
    double a = fabs(v);
    if (a == 0) return 0;
    int ex;
    frexp(a, &ex);      /* a = f * 2^ex, f in [0.5, 1) */
    int e = ex - 1;     /* a in [2^e, 2^(e+1)) */
    if (e < -6) e = -6; /* subnormals: step 2^-9 */
    double step = ldexp(1.0, e - 3);
    double q = nearbyint(a / step) * step; /* the FPU rounds to nearest even */
    return copysign(fmin(q, 448.0), v);
}

/* Dynamic per-token FP8 as the engines do it: scale = amax / 448 per row. */
static void fp8_row(double *v, int n) {
    double amax = 0;
    for (int i = 0; i < n; i++) amax = fmax(amax, fabs(v[i]));
    if (amax == 0) return;
    const double s = (double)(float)(amax / 448.0);
    for (int i = 0; i < n; i++) v[i] = e4m3(v[i] / s) * s;
}

static void forward(const family_case *c, const model *m, const float *x, bool fp8_inputs,
                    double *out) {
    const bool oai = m->fam.activation == MOEQ_ACT_SWIGLUOAI;
    for (int t = 0; t < T_; t++) {
        const float *xt = x + t * H_;
        double logits[E_];
        for (int e = 0; e < E_; e++) {
            double a = m->router_b[e];
            for (int h = 0; h < H_; h++) a += (double)xt[h] * m->router[e * H_ + h];
            logits[e] = a;
        }
        int ids[E_];
        double w[E_];
        route(c, m, logits, ids, w);
        double *o = out + t * H_;
        for (int h = 0; h < H_; h++) o[h] = 0;
        for (int j = 0; j < c->top_k; j++) {
            const int e = ids[j];
            /* Llama 4 scales the expert's input, not its output */
            const double in_scale = c->algo == TOPK_SIGMOID ? w[j] : 1.0;
            const double out_scale = c->algo == TOPK_SIGMOID ? 1.0 : w[j];
            double xin[H_], a[I_];
            for (int h = 0; h < H_; h++) xin[h] = in_scale * xt[h];
            if (fp8_inputs) fp8_row(xin, H_);
            for (int i = 0; i < I_; i++) {
                double g = m->b[e][0][i], u = m->b[e][1][i];
                for (int h = 0; h < H_; h++) {
                    g += xin[h] * m->w[e][0][i * H_ + h];
                    u += xin[h] * m->w[e][1][i * H_ + h];
                }
                if (!m->fam.gated) { /* NemotronHMLP: down(relu(up x)^2), no gate */
                    ck_assert_int_eq(m->fam.activation, MOEQ_ACT_RELU2);
                    a[i] = u > 0 ? u * u : 0.0;
                } else if (oai) { /* GptOssExperts._apply_gate */
                    g = fmin(g, 7.0);
                    u = fmin(fmax(u, -7.0), 7.0);
                    a[i] = (u + 1.0) * g * sigm(1.702 * g);
                } else {
                    a[i] = g * sigm(g) * u;
                }
            }
            if (fp8_inputs) fp8_row(a, I_);
            for (int h = 0; h < H_; h++) {
                double y = m->b[e][2][h];
                for (int i = 0; i < I_; i++) y += a[i] * m->w[e][2][h * I_ + i];
                o[h] += out_scale * y;
            }
        }
    }
}

/* ---- running the tool ------------------------------------------------------------------ */

static int run_tool(const char *args, char *out, size_t cap) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/moeq %s 2>&1", MOEQ_BINARY_DIR, args);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Builds family c's checkpoint with quantization_config `quant`, runs it,
 * and compares with the family's forward within tol relative; `scheme` is
 * the scheme moeq run must print (NULL: any). */
static void check_family(const family_case *c, const char *quant, const char *experts,
                         const char *scheme, bool fp8_inputs, double tol) {
    static model m;
    build(c, quant, experts, &m);
    static float x[T_ * H_];
    for (int i = 0; i < T_ * H_; i++) x[i] = normal(1.0);
    char xin[160], yout[160], msg[256];
    snprintf(xin, sizeof xin, "%s/x.npy", m.dir);
    snprintf(yout, sizeof yout, "%s/y.npy", m.dir);
    const int64_t shape[2] = {T_, H_};
    ck_assert_int_eq(npy_write(xin, MOEQ_DTYPE_F32, 2, shape, x, msg, sizeof msg), 0);

    char args[1024], text[8192];
    snprintf(args, sizeof args, "run %s --layer %s --input %s -o %s --threads 2 --check", m.dir,
             m.prefix, xin, yout);
    int rc = run_tool(args, text, sizeof text);
    ck_assert_msg(rc == 0, "%s: moeq %s exited %d:\n%s", c->model_type, args, rc, text);
    /* no hints needed, none of moeq's defaults taken, and the routing said */
    ck_assert_msg(strstr(text, "warning") == NULL, "%s:\n%s", c->model_type, text);
    char want[64];
    snprintf(want, sizeof want, "model: %s;", c->model_type);
    ck_assert_msg(strstr(text, want) != NULL, "%s:\n%s", c->model_type, text);
    ck_assert_msg(strstr(text, "the router weight") != NULL, "%s:\n%s", c->model_type, text);
    if (scheme) {
        ck_assert_msg(strstr(text, scheme) != NULL, "%s: not %s:\n%s", c->model_type, scheme, text);
    }

    npy_array y = {0};
    ck_assert_int_eq(npy_read(yout, &y, msg, sizeof msg), 0);
    ck_assert_int_eq(y.shape[0], T_);
    ck_assert_int_eq(y.shape[1], H_);
    static double ref[T_ * H_];
    forward(c, &m, x, fp8_inputs, ref);
    double max_err = 0, max_ref = 0;
    for (int i = 0; i < T_ * H_; i++) {
        max_err = fmax(max_err, fabs((double)((float *)y.data)[i] - ref[i]));
        max_ref = fmax(max_ref, fabs(ref[i]));
    }
    npy_free(&y);
    ck_assert_msg(max_ref > 1e-3, "%s: a zero reference proves nothing", c->model_type);
    ck_assert_msg(max_err <= tol * max_ref, "%s: max error %g of max |ref| %g:\n%s", c->model_type,
                  max_err, max_ref, text);
    moeq_test_rmtree(m.dir);
}

START_TEST(test_family_checkpoint) {
    check_family(&k_cases[_i], k_quant, NULL, "wna16", false, 1e-3);
}
END_TEST

/* GPT-OSS's expert biases are parameters of every scheme its checkpoints
 * are quantized with: weight-only int4, FP8, NVFP4 and MXFP4, and FP8 with
 * dynamic per-token FP8 inputs (quantized in the float64 forward as the
 * engines do: amax / 448 per row; 1e-2 for a value next to a rounding
 * boundary landing one E4M3 step apart). */
#define OSS_QUANT(groups, format)                                                                  \
    "\"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"format\": \"" format    \
    "\", \"quantization_status\": \"compressed\", \"config_groups\": {" groups "}, "               \
    "\"ignore\": [\"lm_head\", \"re:.*router.*\"]}"

static const struct {
    const char *quant, *scheme;
    bool fp8_inputs;
    double tol;
} k_oss[] = {
    {OSS_QUANT("\"group_0\": {\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 8, "
               "\"type\": \"float\", \"symmetric\": true, \"strategy\": \"channel\"}}",
               "float-quantized"),
     "w8a16_fp8", false, 1e-3},
    {OSS_QUANT("\"NVFP4A16\": [\"Linear\"]", "nvfp4-pack-quantized"), "w4a16_nvfp4", false, 1e-3},
    {OSS_QUANT("\"MXFP4A16\": [\"Linear\"]", "mxfp4-pack-quantized"), "w4a16_mxfp4", false, 1e-3},
    {OSS_QUANT("\"FP8_DYNAMIC\": [\"Linear\"]", "float-quantized"), "w8a8_fp8", true, 1e-2},
};

START_TEST(test_gpt_oss_schemes) {
    const family_case *c = NULL;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        if (strcmp(k_cases[i].model_type, "gpt_oss") == 0) c = &k_cases[i];
    }
    ck_assert_ptr_nonnull(c);
    check_family(c, k_oss[_i].quant, NULL, k_oss[_i].scheme, k_oss[_i].fp8_inputs, k_oss[_i].tol);
}
END_TEST

/* GPT-OSS as llm-compressor writes it: experts at mlp.experts.experts.<e>.*,
 * the router still at mlp.router.*, which moeq run finds one level up from
 * the experts' parent (no warning, routed by the router weight). */
START_TEST(test_gpt_oss_nested_experts) {
    const family_case *c = NULL;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        if (strcmp(k_cases[i].model_type, "gpt_oss") == 0) c = &k_cases[i];
    }
    ck_assert_ptr_nonnull(c);
    check_family(c, k_quant, "experts.experts", "wna16", false, 1e-3);
}
END_TEST

/* Nemotron-H's experts have no gate: a gate tensor in such a layer is
 * refused by name, relu2 on a gated layer is refused rather than run, and
 * the manifest holds up alone. */
START_TEST(test_non_gated_layer) {
    moeq_model_moe fam;
    moeq_error err;
    ck_assert_ok(moeq_model_family("nemotron_h", &fam, &err), &err);
    ck_assert_int_eq(fam.gated, 0);
    ck_assert_int_eq(fam.activation, MOEQ_ACT_RELU2);
    ck_assert_str_eq(fam.moe_block, "mixer");
    moeq_moe_config mc;
    memset(&mc, 0, sizeof mc);
    mc.scheme = MOEQ_SCHEME_UNQUANTIZED;
    mc.num_experts = 2;
    mc.hidden_size = 16;
    mc.intermediate_size = 8;
    mc.activation = MOEQ_ACT_RELU2;
    moeq_moe *l = NULL;
    ck_assert_int_eq(moeq_moe_create(&mc, &l, &err), MOEQ_STATUS_UNSUPPORTED);
    ck_assert_msg(strstr(err.message, "non_gated"), "%s", err.message);
    mc.non_gated = 1;
    ck_assert_ok(moeq_moe_create(&mc, &l, &err), &err);
    moeq_param p;
    ck_assert_int_eq(moeq_moe_find_param(l, "w13_weight", &p), MOEQ_OK);
    ck_assert_int_eq(p.shape[1], 8); /* up alone: [E, I, H] */
    static uint16_t w[8 * 16];
    moeq_tensor t = {.name = "0.gate_proj.weight",
                     .dtype = MOEQ_DTYPE_BF16,
                     .ndim = 2,
                     .shape = {8, 16},
                     .data = w,
                     .nbytes = sizeof w};
    ck_assert_int_eq(moeq_moe_load(l, &t, NULL, &err), MOEQ_STATUS_NO_MATCH);
    ck_assert_msg(strstr(err.message, "non-gated"), "%s", err.message);
    t.name = "0.up_proj.weight";
    ck_assert_ok(moeq_moe_load(l, &t, NULL, &err), &err);
    moeq_moe_destroy(l);
    /* moeq manifest: w13 sized and sourced from up_proj alone ([E, words(H), I] transposed) */
    char dir[96], path[160], text[8192];
    moeq_test_mkdtemp(dir, sizeof dir, "moeq_models");
    snprintf(path, sizeof path, "%s/config.json", dir);
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\": \"nemotron_h\", \"hidden_size\": 64, \"n_routed_experts\": 8, "
             "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, %s}",
             k_quant);
    write_text(path, cfg);
    snprintf(path, sizeof path, "manifest %s --layer backbone.layers.1.mixer.experts", dir);
    ck_assert_int_eq(run_tool(path, text, sizeof text), 0);
    ck_assert_msg(strstr(text, "w13_weight_packed        I32   [8, 8, 32]") &&
                      strstr(text, " up_proj.weight_packed") && !strstr(text, "gate_proj"),
                  "%s", text);
    moeq_test_rmtree(dir);
}
END_TEST

/* ---- the table's reading of config keys ------------------------------------------------ */

static moeq_config *parse(const char *model_json) {
    char json[4096];
    snprintf(json, sizeof json, "{%s, %s}", model_json, k_quant);
    moeq_config *cfg = NULL;
    moeq_error err;
    ck_assert_ok(moeq_config_parse(json, strlen(json), NULL, &cfg, &err), &err);
    return cfg;
}

START_TEST(test_reading_keys) {
    moeq_model_moe m;
    moeq_error err;
    /* GLM4-MoE as transformers writes it: sigmoid from the table, said so */
    moeq_config *cfg =
        parse("\"model_type\": \"glm4_moe\", \"n_routed_experts\": 128, "
              "\"num_experts_per_tok\": 8, \"moe_intermediate_size\": 1408, "
              "\"hidden_size\": 4096, \"norm_topk_prob\": true, "
              "\"routed_scaling_factor\": 1.0, \"n_group\": 1, \"topk_group\": 1, "
              "\"n_shared_experts\": 1, \"dtype\": \"float16\", \"hidden_act\": \"silu\"");
    ck_assert_ok(moeq_model_moe_get(cfg, &m, &err), &err);
    ck_assert_int_eq(m.known, 1);
    ck_assert_int_eq(m.scoring, MOEQ_SCORING_SIGMOID);
    ck_assert_int_eq(m.num_experts, 128);
    ck_assert_int_eq(m.top_k, 8);
    ck_assert_int_eq(m.intermediate_size, 1408);
    ck_assert_int_eq(m.num_expert_group, 0);
    ck_assert_int_eq(m.params_dtype, MOEQ_DTYPE_F16);
    ck_assert_str_eq(m.defaults, "scoring=sigmoid (glm4_moe)");
    ck_assert_int_eq(m.unknown_defaults, 0);
    moeq_route_config rc;
    moeq_model_moe_route(&m, &rc);
    ck_assert_int_eq(rc.scoring, MOEQ_SCORING_SIGMOID);
    ck_assert_int_eq(rc.renormalize, 1);
    ck_assert_ptr_null(rc.correction_bias);
    moeq_config_destroy(cfg);

    /* explicit keys win over the table */
    cfg = parse("\"model_type\": \"deepseek_v3\", \"scoring_func\": \"softmax\", "
                "\"norm_topk_prob\": false, \"n_group\": 2, \"topk_group\": 1, "
                "\"torch_dtype\": \"float32\"");
    ck_assert_ok(moeq_model_moe_get(cfg, &m, &err), &err);
    ck_assert_int_eq(m.scoring, MOEQ_SCORING_SOFTMAX);
    ck_assert_int_eq(m.renormalize, 0);
    ck_assert_int_eq(m.num_expert_group, 2);
    ck_assert_int_eq(m.topk_group, 1);
    ck_assert_int_eq(m.params_dtype, MOEQ_DTYPE_F32);
    ck_assert_msg(strstr(m.defaults, "routed_scaling_factor=2.5 (deepseek_v3)"), "%s", m.defaults);
    moeq_config_destroy(cfg);

    /* DeepSeek-V2 groups only under group_limited_greedy */
    cfg = parse("\"model_type\": \"deepseek_v2\", \"n_group\": 8, \"topk_group\": 3, "
                "\"topk_method\": \"group_limited_greedy\"");
    ck_assert_ok(moeq_model_moe_get(cfg, &m, &err), &err);
    ck_assert_int_eq(m.num_expert_group, 8);
    ck_assert_int_eq(m.topk_group, 3);
    ck_assert_int_eq(m.renormalize, 0);
    moeq_config_destroy(cfg);

    /* GPT-OSS: the clamped SwiGLU, router bias, expert biases */
    cfg = parse("\"model_type\": \"gpt_oss\", \"swiglu_limit\": 5.0");
    ck_assert_ok(moeq_model_moe_get(cfg, &m, &err), &err);
    ck_assert_int_eq(m.activation, MOEQ_ACT_SWIGLUOAI);
    ck_assert(fabsf(m.swiglu_alpha - 1.702f) < 1e-6f);
    ck_assert(m.swiglu_limit == 5.0f);
    ck_assert_int_eq(m.router_bias, 1);
    ck_assert_int_eq(m.expert_bias, 1);
    ck_assert_str_eq(m.router, "router");
    moeq_config_destroy(cfg);

    /* found by architectures when model_type is one moeq does not know */
    cfg = parse("\"model_type\": \"my_glm\", \"architectures\": [\"Glm4MoeForCausalLM\"]");
    ck_assert_ok(moeq_model_moe_get(cfg, &m, &err), &err);
    ck_assert_int_eq(m.known, 1);
    ck_assert_str_eq(m.family, "glm4_moe");
    ck_assert_str_eq(m.model_type, "my_glm");
    moeq_config_destroy(cfg);

    /* unknown family, silent config: moeq's defaults, flagged */
    cfg = parse("\"model_type\": \"brand_new_moe\"");
    ck_assert_ok(moeq_model_moe_get(cfg, &m, &err), &err);
    ck_assert_int_eq(m.known, 0);
    ck_assert_int_eq(m.unknown_defaults, 1);
    ck_assert_msg(strstr(m.defaults, "scoring=softmax (moeq's default)"), "%s", m.defaults);
    moeq_config_destroy(cfg);

    /* unknown family that says everything: no warning */
    cfg = parse("\"model_type\": \"brand_new_moe\", \"scoring_func\": \"sigmoid\", "
                "\"norm_topk_prob\": true, \"n_group\": 1, \"topk_group\": 1, "
                "\"routed_scaling_factor\": 1.5, \"n_shared_experts\": 0, "
                "\"hidden_act\": \"silu\"");
    ck_assert_ok(moeq_model_moe_get(cfg, &m, &err), &err);
    ck_assert_int_eq(m.unknown_defaults, 0);
    ck_assert_str_eq(m.defaults, "");
    moeq_config_destroy(cfg);

    char line[256];
    ck_assert_ok(moeq_model_family("deepseek_v3", &m, &err), &err);
    m.num_experts = 256;
    m.top_k = 8;
    moeq_model_moe_summary(&m, line, sizeof line);
    ck_assert_msg(strstr(line, "sigmoid, top-8 of 256, renormalized, best 4 of 8 groups, "
                               "scaled 2.5"),
                  "%s", line);
}
END_TEST

START_TEST(test_bad_values) {
    static const struct {
        const char *json, *needle;
    } k_bad[] = {
        {"\"model_type\": \"qwen3_moe\", \"scoring_func\": \"relu\"", "scoring_func is 'relu'"},
        {"\"model_type\": \"qwen3_moe\", \"norm_topk_prob\": 3", "norm_topk_prob is 3"},
        {"\"model_type\": \"deepseek_v3\", \"routed_scaling_factor\": -1",
         "routed_scaling_factor is -1"},
        {"\"model_type\": \"qwen3_moe\", \"hidden_act\": \"tanh\"", "hidden_act is 'tanh'"},
        {"\"model_type\": \"qwen3_moe\", \"dtype\": \"float8\"", "dtype is 'float8'"},
    };
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        moeq_config *cfg = parse(k_bad[i].json);
        moeq_model_moe m;
        moeq_error err;
        ck_assert_int_eq(moeq_model_moe_get(cfg, &m, &err), MOEQ_STATUS_INVALID_ARG);
        ck_assert_msg(strstr(err.message, k_bad[i].needle), "%s", err.message);
        moeq_config_destroy(cfg);
    }
    moeq_model_moe m;
    moeq_error err;
    ck_assert_int_eq(moeq_model_family("nope", &m, &err), MOEQ_STATUS_NO_MATCH);
    ck_assert_msg(strstr(err.message, "glm4_moe") && strstr(err.message, "gpt_oss"), "%s",
                  err.message);
    ck_assert_int_eq(moeq_model_moe_get(NULL, &m, &err), MOEQ_STATUS_INVALID_ARG);
    for (uint32_t i = 0; moeq_model_family_name(i); i++) {
        ck_assert_ok(moeq_model_family(moeq_model_family_name(i), &m, &err), &err);
        ck_assert_ptr_nonnull(strstr(moeq_model_family_source(i), "modeling_"));
    }
}
END_TEST

static Suite *models_suite(void) {
    Suite *s = suite_create("models");
    TCase *tc = tcase_create("families");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_family_checkpoint, 0, (int)(sizeof k_cases / sizeof k_cases[0]));
    tcase_add_loop_test(tc, test_gpt_oss_schemes, 0, (int)(sizeof k_oss / sizeof k_oss[0]));
    tcase_add_test(tc, test_gpt_oss_nested_experts);
    tcase_add_test(tc, test_non_gated_layer);
    tcase_add_test(tc, test_reading_keys);
    tcase_add_test(tc, test_bad_values);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(models_suite)

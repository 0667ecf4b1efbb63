/*
 * synth.c - moeq_synth_write: a small but real compressed-tensors MoE
 * checkpoint from a layout and a seed.
 *
 *   layout --normalize--> checked layout --synth_config.c--> config.json + parsed config
 *          --walk--> blocks of tensors (norms, attention, MLP/experts, router, ...)
 *          --resolve each Linear module, generate, compress--> one tensor set per shard
 *          --moeq_safetensors_write--> shards, index, then config.json
 *
 * Randomness: every tensor's values come from a generator seeded with the
 * layout's seed and the tensor's name (xoshiro256** fed by splitmix64), so a
 * tensor does not depend on which shard it lands in.  Normal-looking values
 * are Irwin-Hall sums of four uniforms (plain double arithmetic, so the bytes
 * are the same on every IEEE-754 platform), with rare 4x outliers so that
 * group maxima differ as in real weights.  Activations are never passed
 * through libm either (det_exp).
 */
#include "writer/synth.h"
#include "kernels.h"
#include "common/pyjson.h"
#include "checkpoint/tensor_set.h"
#include "common/pool.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NAME_SIZE  192
#define SHARD_META "{\"format\":\"pt\"}"

/* ---- random numbers ---------------------------------------------------------------- */

typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t fnv1a64(const char *s) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001B3ull;
    return h;
}

static void rng_seed(rng *r, uint64_t seed, const char *name) {
    uint64_t x = seed ^ fnv1a64(name);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(rng *r) { /* xoshiro256** */
    const uint64_t out = rotl(r->s[1] * 5, 7) * 9;
    const uint64_t t = r->s[1] << 17;
    r->s[2] ^= r->s[0];
    r->s[3] ^= r->s[1];
    r->s[1] ^= r->s[2];
    r->s[0] ^= r->s[3];
    r->s[2] ^= t;
    r->s[3] = rotl(r->s[3], 45);
    return out;
}

static double rng_uniform(rng *r) {
    return (double)(rng_next(r) >> 11) * 0x1p-53;
}

/* Mean 0, variance 1, within +-3.46 (x4 for one value in 256): the
 * Irwin-Hall sum of four 14-bit uniforms from one draw, whose top byte picks
 * the outliers.  Plain double arithmetic, exact, so every platform agrees. */
static double rng_normal(rng *r) {
    const uint64_t x = rng_next(r);
    double sum = 0.0;
    for (int i = 0; i < 4; i++) sum += ((double)((x >> (14 * i)) & 0x3FFFu) + 0.5) * 0x1p-14;
    double z = (sum - 2.0) * 1.7320508075688772;
    if ((x >> 56) == 0) z *= 4.0;
    return z;
}

/* exp(x) without libm, so calibration is the same everywhere: x = k ln2 + r,
 * |r| <= ln2/2, Taylor to r^14 (error far below a bf16 ulp), times 2^k. */
static double det_exp(double x) {
    if (x > 80.0) x = 80.0;
    if (x < -80.0) return 0.0;
    const double k = (double)(long)(x * 1.4426950408889634 + (x >= 0 ? 0.5 : -0.5));
    const double r = x - k * 0.6931471805599453;
    double term = 1.0, sum = 1.0;
    for (int i = 1; i <= 14; i++) {
        term = term * r / (double)i;
        sum += term;
    }
    return ldexp(sum, (int)k);
}

/* ---- the layout ----------------------------------------------------------------------- */

static moeq_status bad(moeq_error *err, const char *fmt, ...) MOEQ__PRINTF(2, 3);
static moeq_status bad(moeq_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const moeq_status st = moeq__verror(err, MOEQ_STATUS_INVALID_ARG, fmt, ap);
    va_end(ap);
    return st;
}

static moeq_status check_range(const char *field, int64_t v, int64_t lo, int64_t hi,
                               moeq_error *err) {
    if (v >= lo && v <= hi) return MOEQ_STATUS_OK;
    return bad(err, "layout.%s is %lld; must be in [%lld, %lld]", field, (long long)v,
               (long long)lo, (long long)hi);
}

/* rows x cols floats must be addressable (the writer holds them in memory). */
static moeq_status check_matrix(const char *what, int64_t rows, int64_t cols, uint64_t *total,
                                moeq_error *err) {
    size_t n;
    if (!moeq__mul_size((size_t)rows, (size_t)cols, &n) || !moeq__mul_size(n, sizeof(float), &n) ||
        *total + (uint64_t)rows * (uint64_t)cols < *total) {
        return bad(err, "layout: %s [%lld, %lld] is too large", what, (long long)rows,
                   (long long)cols);
    }
    *total += (uint64_t)rows * (uint64_t)cols;
    return MOEQ_STATUS_OK;
}

static moeq_status check_groups(moeq__synth *s, moeq_error *err) {
    moeq_synth_layout *L = &s->L;
    if (L->n_groups < 1 || L->n_groups > MOEQ__SYNTH_MAX_GROUPS) {
        return bad(err,
                   "layout.n_groups is %u; must be in [1, %d] (a quantization_config needs a "
                   "config group)",
                   L->n_groups, MOEQ__SYNTH_MAX_GROUPS);
    }
    if (!L->groups) return bad(err, "layout.groups is NULL but n_groups is %u", L->n_groups);
    for (uint32_t i = 0; i < L->n_groups; i++) {
        moeq_synth_group *g = &s->groups[i];
        *g = L->groups[i];
        if (!g->name) {
            snprintf(s->group_names[i], sizeof s->group_names[i], "group_%u", i);
            g->name = s->group_names[i];
        }
        if (!g->name[0]) return bad(err, "layout.groups[%u].name is empty", i);
        for (uint32_t j = 0; j < i; j++) {
            if (strcmp(s->groups[j].name, g->name) == 0) {
                return bad(err, "layout.groups[%u].name '%s' is also the name of groups[%u]", i,
                           g->name, j);
            }
        }
        if (g->n_targets < 1 || !g->targets) {
            return bad(err, "layout.groups[%u].targets: %s; a group needs at least one target", i,
                       g->targets ? "n_targets is 0" : "NULL");
        }
        for (uint32_t t = 0; t < g->n_targets; t++) {
            if (!g->targets[t] || !g->targets[t][0]) {
                return bad(err, "layout.groups[%u].targets[%u] is %s", i, t,
                           g->targets[t] ? "empty" : "NULL");
            }
        }
        if (g->format < 0 || g->format >= MOEQ_FORMAT_COUNT_ ||
            g->format == MOEQ_FORMAT_MIXED_PRECISION || g->format == MOEQ_FORMAT_FAKEQUANT) {
            return bad(err,
                       "layout.groups[%u].format is %d (%s); a group's format must be a "
                       "compressed-tensors CompressionFormat, or NONE to infer it",
                       i, (int)g->format, moeq_format_name(g->format));
        }
    }
    L->groups = s->groups;
    if (L->n_ignore > 0 && !L->ignore)
        return bad(err, "layout.ignore is NULL but n_ignore is %u", L->n_ignore);
    for (uint32_t i = 0; i < L->n_ignore; i++) {
        if (!L->ignore[i] || !L->ignore[i][0]) {
            return bad(err, "layout.ignore[%u] is %s", i, L->ignore[i] ? "empty" : "NULL");
        }
    }
    return MOEQ_STATUS_OK;
}

moeq_status moeq__synth_normalize(const moeq_synth_layout *in, moeq__synth *s, moeq_error *err) {
    memset(s, 0, sizeof *s);
    if (!in) return bad(err, "layout is NULL");
    s->L = *in;
    moeq_synth_layout *L = &s->L;
    moeq_status st;
    if (!L->model_type) L->model_type = "deepseek_v3";
    if (!L->model_type[0]) return bad(err, "layout.model_type is empty");
    if ((st = check_range("num_layers", L->num_layers, 1, 100000, err))) return st;
    if ((st = check_range("first_dense_layers", L->first_dense_layers, 0, L->num_layers, err)))
        return st;
    if ((st = check_range("num_experts", L->num_experts, 1, 1 << 20, err))) return st;
    if ((st = check_range("top_k", L->top_k, 1, L->num_experts, err))) return st;
    if ((st = check_range("hidden_size", L->hidden_size, 1, 1 << 24, err))) return st;
    if ((st = check_range("moe_intermediate_size", L->moe_intermediate_size, 1, 1 << 24, err)))
        return st;
    if (L->intermediate_size == 0) L->intermediate_size = 4 * L->moe_intermediate_size;
    if ((st = check_range("intermediate_size", L->intermediate_size, 1, 1 << 26, err))) return st;
    if ((st = check_range("n_shared_experts", L->n_shared_experts, 0, 1 << 10, err))) return st;
    if ((st = check_range("scoring", L->scoring, MOEQ_SCORING_SOFTMAX, MOEQ_SCORING_SIGMOID, err)))
        return st;
    if ((st = check_range("norm_topk_prob", L->norm_topk_prob, 0, 1, err))) return st;
    if ((st = check_range("correction_bias", L->correction_bias, 0, 1, err))) return st;
    if (L->n_group == 0 && L->topk_group == 0) L->n_group = L->topk_group = 1;
    if ((st = check_range("n_group", L->n_group, 1, L->num_experts, err))) return st;
    if (L->num_experts % L->n_group != 0) {
        return bad(err, "layout.n_group %d does not divide num_experts %d", (int)L->n_group,
                   (int)L->num_experts);
    }
    if ((st = check_range("topk_group", L->topk_group, 1, L->n_group, err))) return st;
    if ((int64_t)L->topk_group * (L->num_experts / L->n_group) < L->top_k) {
        return bad(err,
                   "layout.topk_group %d x %d experts per group < top_k %d: the kept groups "
                   "cannot hold top_k experts",
                   (int)L->topk_group, (int)(L->num_experts / L->n_group), (int)L->top_k);
    }
    if (L->routed_scaling_factor == 0.0f) L->routed_scaling_factor = 1.0f;
    if (!(isfinite(L->routed_scaling_factor) && L->routed_scaling_factor > 0.0f)) {
        return bad(err, "layout.routed_scaling_factor is %g; must be finite and > 0",
                   (double)L->routed_scaling_factor);
    }
    if ((st = check_range("num_attention_heads", L->num_attention_heads, 0, 1 << 16, err)))
        return st;
    if (L->num_attention_heads > 0) {
        if (L->hidden_size % L->num_attention_heads != 0) {
            return bad(err, "layout.num_attention_heads %d does not divide hidden_size %d",
                       (int)L->num_attention_heads, (int)L->hidden_size);
        }
        s->head_dim = L->hidden_size / L->num_attention_heads;
        if (L->num_key_value_heads == 0) L->num_key_value_heads = L->num_attention_heads;
        if ((st = check_range("num_key_value_heads", L->num_key_value_heads, 1,
                              L->num_attention_heads, err)))
            return st;
        if (L->num_attention_heads % L->num_key_value_heads != 0) {
            return bad(err, "layout.num_key_value_heads %d does not divide num_attention_heads %d",
                       (int)L->num_key_value_heads, (int)L->num_attention_heads);
        }
    } else if (L->num_key_value_heads != 0) {
        return bad(err,
                   "layout.num_key_value_heads is %d without attention (num_attention_heads 0)",
                   (int)L->num_key_value_heads);
    }
    if (L->vocab_size == 0) L->vocab_size = 512;
    if ((st = check_range("vocab_size", L->vocab_size, 1, 1 << 24, err))) return st;
    if (L->dtype == 0) L->dtype = MOEQ_DTYPE_BF16;
    if (L->dtype != MOEQ_DTYPE_BF16 && L->dtype != MOEQ_DTYPE_F16 && L->dtype != MOEQ_DTYPE_F32) {
        return bad(err, "layout.dtype is %s (%d); the model dtype must be BF16, F16 or F32",
                   moeq_dtype_name(L->dtype), (int)L->dtype);
    }
    if (L->shards == 0) L->shards = 1;
    if (L->shards < 1 || L->shards > L->num_layers || L->shards > 99999) {
        return bad(err,
                   "layout.shards is %d; must be in [1, num_layers = %d] (every shard holds "
                   "at least one layer) and at most 99999",
                   (int)L->shards, (int)L->num_layers);
    }
    if (L->calibration_tokens == 0) L->calibration_tokens = 64;
    if ((st = check_range("calibration_tokens", L->calibration_tokens, 1, 1 << 20, err))) return st;
    if (L->weight_std == 0.0f) L->weight_std = 0.02f;
    if (!(isfinite(L->weight_std) && L->weight_std > 0.0f && L->weight_std <= 100.0f)) {
        return bad(err, "layout.weight_std is %g; must be in (0, 100]", (double)L->weight_std);
    }
    /* every matrix the writer holds, and the model's total, must fit */
    uint64_t total = 0;
    const int64_t H = L->hidden_size,
                  shared = (int64_t)L->n_shared_experts * L->moe_intermediate_size;
    if ((st = check_matrix("vocab_size x hidden_size", L->vocab_size, H, &total, err))) return st;
    if ((st =
             check_matrix("intermediate_size x hidden_size", L->intermediate_size, H, &total, err)))
        return st;
    if ((st = check_matrix("num_experts x moe_intermediate_size x hidden_size",
                           (int64_t)L->num_experts * L->moe_intermediate_size, H, &total, err)))
        return st;
    if ((st = check_matrix("shared experts x hidden_size", shared, H, &total, err))) return st;
    if ((st = check_matrix("calibration_tokens x intermediate_size", L->calibration_tokens,
                           L->intermediate_size > H ? L->intermediate_size : H, &total, err)))
        return st;
    if (total > UINT64_MAX / 16 / (uint64_t)L->num_layers) {
        return bad(err, "layout: %d layers of this size are too large", (int)L->num_layers);
    }
    return check_groups(s, err);
}

/* ---- walking the model: blocks of tensors -------------------------------------------- */

enum block_type { B_NORMS, B_ATTN, B_MLP, B_ROUTER, B_EMBED, B_FINAL_NORM, B_HEAD };
enum init { INIT_WEIGHT, INIT_NORM, INIT_BIAS };

typedef struct member {
    char name[NAME_SIZE]; /* the tensor: "<module>.weight" or a plain tensor */
    size_t module_len;    /* Linear modules: length of "<module>"; 0 otherwise */
    int64_t rows, cols;   /* cols 0: a 1-D [rows] tensor */
    int32_t kind;         /* moeq_module_kind */
    int32_t init;
} member;

typedef struct block {
    int32_t type;
    char prefix[NAME_SIZE];
    uint32_t n;
    member m[4];
} block;

typedef moeq_status (*block_fn)(void *ctx, const block *b);

/* snprintf into a name buffer: names are bounded by the layout's limits
 * (layer and expert numbers), so a cut would be a bug; the wrapper keeps
 * -Wformat-truncation from guessing at every call. */
static void fmt_name(char *buf, size_t n, const char *fmt, ...) MOEQ__PRINTF(3, 4);
static void fmt_name(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

static member *add_member(block *b, const char *module, const char *param, int64_t rows,
                          int64_t cols, int32_t kind, int32_t init, bool linear) {
    member *m = &b->m[b->n++];
    fmt_name(m->name, sizeof m->name, "%s.%s", module, param);
    m->module_len = linear ? strlen(module) : 0;
    m->rows = rows;
    m->cols = cols;
    m->kind = kind;
    m->init = init;
    return m;
}

static void begin(block *b, int32_t type, const char *prefix) {
    memset(b, 0, sizeof *b);
    b->type = type;
    fmt_name(b->prefix, sizeof b->prefix, "%s", prefix);
}

/* gate, up, down of one MLP (dense, routed expert or shared experts). */
static moeq_status walk_mlp(const char *prefix, int64_t H, int64_t I, int32_t kind, block_fn fn,
                            void *ctx) {
    block b;
    char mod[NAME_SIZE];
    begin(&b, B_MLP, prefix);
    fmt_name(mod, sizeof mod, "%s.gate_proj", prefix);
    add_member(&b, mod, "weight", I, H, kind, INIT_WEIGHT, true);
    fmt_name(mod, sizeof mod, "%s.up_proj", prefix);
    add_member(&b, mod, "weight", I, H, kind, INIT_WEIGHT, true);
    fmt_name(mod, sizeof mod, "%s.down_proj", prefix);
    add_member(&b, mod, "weight", H, I, kind, INIT_WEIGHT, true);
    return fn(ctx, &b);
}

static moeq_status walk_layer(const moeq__synth *s, int32_t l, block_fn fn, void *ctx) {
    const moeq_synth_layout *L = &s->L;
    const int64_t H = L->hidden_size;
    char p[NAME_SIZE], mod[NAME_SIZE];
    block b;
    fmt_name(p, sizeof p, "model.layers.%d", (int)l);
    begin(&b, B_NORMS, p);
    fmt_name(mod, sizeof mod, "%s.input_layernorm", p);
    add_member(&b, mod, "weight", H, 0, MOEQ_MODULE_OTHER, INIT_NORM, false);
    fmt_name(mod, sizeof mod, "%s.post_attention_layernorm", p);
    add_member(&b, mod, "weight", H, 0, MOEQ_MODULE_OTHER, INIT_NORM, false);
    moeq_status st = fn(ctx, &b);
    if (st == MOEQ_STATUS_OK && L->num_attention_heads > 0) {
        const int64_t q = (int64_t)L->num_attention_heads * s->head_dim;
        const int64_t kv = (int64_t)L->num_key_value_heads * s->head_dim;
        char a[NAME_SIZE];
        fmt_name(a, sizeof a, "%s.self_attn", p);
        begin(&b, B_ATTN, a);
        static const char *const names[4] = {"q_proj", "k_proj", "v_proj", "o_proj"};
        for (int i = 0; i < 4; i++) {
            fmt_name(mod, sizeof mod, "%s.%s", a, names[i]);
            add_member(&b, mod, "weight", i == 0 ? q : (i == 3 ? H : kv), i == 3 ? q : H,
                       MOEQ_MODULE_LINEAR, INIT_WEIGHT, true);
        }
        st = fn(ctx, &b);
    }
    char mlp[NAME_SIZE];
    fmt_name(mlp, sizeof mlp, "%s.mlp", p);
    if (st != MOEQ_STATUS_OK) return st;
    if (l < L->first_dense_layers)
        return walk_mlp(mlp, H, L->intermediate_size, MOEQ_MODULE_LINEAR, fn, ctx);
    fmt_name(mod, sizeof mod, "%s.gate", mlp);
    begin(&b, B_ROUTER, mod);
    add_member(&b, mod, "weight", L->num_experts, H, MOEQ_MODULE_LINEAR, INIT_WEIGHT, true);
    if (L->correction_bias) {
        add_member(&b, mod, "e_score_correction_bias", L->num_experts, 0, MOEQ_MODULE_OTHER,
                   INIT_BIAS, false);
    }
    st = fn(ctx, &b);
    for (int32_t e = 0; e < L->num_experts && st == MOEQ_STATUS_OK; e++) {
        fmt_name(mod, sizeof mod, "%s.experts.%d", mlp, (int)e);
        st = walk_mlp(mod, H, L->moe_intermediate_size, MOEQ_MODULE_EXPERT, fn, ctx);
    }
    if (st == MOEQ_STATUS_OK && L->n_shared_experts > 0) {
        fmt_name(mod, sizeof mod, "%s.shared_experts", mlp);
        st = walk_mlp(mod, H, (int64_t)L->n_shared_experts * L->moe_intermediate_size,
                      MOEQ_MODULE_LINEAR, fn, ctx);
    }
    return st;
}

/* Shard k of n: layers [k L / n, (k+1) L / n); the embedding goes first into
 * shard 0, the final norm and lm_head last into shard n-1. */
static moeq_status walk_shard(const moeq__synth *s, int32_t k, int32_t n, block_fn fn, void *ctx) {
    const moeq_synth_layout *L = &s->L;
    const int64_t H = L->hidden_size;
    block b;
    moeq_status st = MOEQ_STATUS_OK;
    if (k == 0) {
        begin(&b, B_EMBED, "model.embed_tokens");
        add_member(&b, "model.embed_tokens", "weight", L->vocab_size, H, MOEQ_MODULE_OTHER,
                   INIT_WEIGHT, false);
        st = fn(ctx, &b);
    }
    const int32_t first = (int32_t)((int64_t)k * L->num_layers / n);
    const int32_t end = (int32_t)((int64_t)(k + 1) * L->num_layers / n);
    for (int32_t l = first; l < end && st == MOEQ_STATUS_OK; l++) st = walk_layer(s, l, fn, ctx);
    if (st == MOEQ_STATUS_OK && k == n - 1) {
        begin(&b, B_FINAL_NORM, "model.norm");
        add_member(&b, "model.norm", "weight", H, 0, MOEQ_MODULE_OTHER, INIT_NORM, false);
        st = fn(ctx, &b);
        if (st == MOEQ_STATUS_OK) {
            begin(&b, B_HEAD, "lm_head");
            add_member(&b, "lm_head", "weight", L->vocab_size, H, MOEQ_MODULE_LINEAR, INIT_WEIGHT,
                       true);
            st = fn(ctx, &b);
        }
    }
    return st;
}

static moeq_status walk_all(const moeq__synth *s, block_fn fn, void *ctx) {
    return walk_shard(s, 0, 1, fn, ctx);
}

/* ---- values ----------------------------------------------------------------------------- */

static size_t count_of(const member *m) {
    return (size_t)m->rows * (size_t)(m->cols ? m->cols : 1);
}

/* The original values of a member: weights N(0, std), norms around 1,
 * biases N(0, 0.02) in F32; all but the bias rounded to the model dtype. */
static void gen_member(const moeq__synth *s, const member *m, float *out) {
    rng r;
    rng_seed(&r, s->L.seed, m->name);
    const size_t n = count_of(m);
    const double std = m->init == INIT_WEIGHT ? (double)s->L.weight_std
                       : m->init == INIT_NORM ? 0.05
                                              : 0.02;
    const double mean = m->init == INIT_NORM ? 1.0 : 0.0;
    for (size_t i = 0; i < n; i++) {
        const float v = (float)(mean + std * rng_normal(&r));
        out[i] = m->init == INIT_BIAS ? v : moeq__round_to_dtype(s->L.dtype, v);
    }
}

/* A calibration batch [tokens, cols] for input site `site`: unit-scale
 * activations in the model dtype. */
static void gen_activations(const moeq__synth *s, const char *site, size_t cols, float *out) {
    char key[NAME_SIZE + 16];
    fmt_name(key, sizeof key, "%s#calibration", site);
    rng r;
    rng_seed(&r, s->L.seed, key);
    const size_t n = (size_t)s->L.calibration_tokens * cols;
    for (size_t i = 0; i < n; i++) out[i] = moeq__round_to_dtype(s->L.dtype, (float)rng_normal(&r));
}

/* A GPTQ-style actorder g_idx for input site `site`: a random column order
 * cut into groups of gs (gate and up, or q, k and v, see the same inputs and
 * so get the same order). */
static void gen_g_idx(const moeq__synth *s, const char *site, size_t cols, size_t gs,
                      int32_t *g_idx, uint32_t *perm) {
    char key[NAME_SIZE + 16];
    fmt_name(key, sizeof key, "%s#actorder", site);
    rng r;
    rng_seed(&r, s->L.seed, key);
    for (size_t i = 0; i < cols; i++) perm[i] = (uint32_t)i;
    for (size_t i = cols - 1; i > 0; i--) {
        const size_t j = (size_t)(rng_uniform(&r) * (double)(i + 1));
        const uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < cols; i++) g_idx[perm[i]] = (int32_t)(i / gs);
}

static moeq_status nomem(moeq_error *err, const char *what) {
    return moeq__error(err, MOEQ_STATUS_NOMEM, "moeq_synth_write: out of memory for %s", what);
}

/* ---- resolving ---------------------------------------------------------------------------- */

/* How one Linear module is stored. */
typedef struct how {
    moeq_resolution res;
    int32_t format;                 /* DENSE when not quantized */
    const moeq_quant_args *weights; /* NULL when stored dense */
    const moeq_quant_args *input;   /* static inputs to calibrate, or NULL */
} how;

static moeq_status resolve_member(const moeq_config *cfg, const member *m, how *h,
                                  moeq_error *err) {
    char module[NAME_SIZE];
    memcpy(module, m->name, m->module_len);
    module[m->module_len] = '\0';
    memset(h, 0, sizeof *h);
    const moeq_status st = moeq_resolve(cfg, module, m->kind, NULL, &h->res, err);
    if (st != MOEQ_STATUS_OK) return st;
    h->format = MOEQ_FORMAT_DENSE;
    if (h->res.status != MOEQ_MATCH_QUANTIZED) return MOEQ_STATUS_OK;
    if (h->res.weights && h->res.format != MOEQ_FORMAT_DENSE) {
        h->weights = h->res.weights;
        h->format = h->res.format;
    }
    const moeq_quant_args *in = h->res.input_activations;
    if (in && in->dynamic != MOEQ_DYNAMIC_TRUE) h->input = in;
    return MOEQ_STATUS_OK;
}

typedef struct plan_ctx {
    const moeq__synth *s;
    const moeq_config *cfg;
    moeq_error *err;
    uint32_t used[MOEQ__SYNTH_MAX_GROUPS]; /* modules per config group (config order) */
    struct {
        int32_t group;
        int64_t rows, cols;
    } tried[128]; /* (group, shape) pairs already compressed once */
    uint32_t n_tried;
} plan_ctx;

/* Compresses zeros of the module's shape once per (group, shape), so that
 * args moeq_compress cannot write, or a shape they do not divide, fail
 * before any file is touched. */
static moeq_status try_compress(plan_ctx *c, const member *m, const char *module, const how *h) {
    if (!h->weights && !h->input) return MOEQ_STATUS_OK;
    for (uint32_t i = 0; i < c->n_tried; i++) {
        if (c->tried[i].group == h->res.group_index && c->tried[i].rows == m->rows &&
            c->tried[i].cols == m->cols) {
            return MOEQ_STATUS_OK;
        }
    }
    if (c->n_tried < MOEQ__ARRAY_LEN(c->tried)) {
        c->tried[c->n_tried].group = h->res.group_index;
        c->tried[c->n_tried].rows = m->rows;
        c->tried[c->n_tried++].cols = m->cols;
    }
    float *zeros = moeq__calloc(count_of(m) + 1, sizeof *zeros);
    if (!zeros) return nomem(c->err, m->name);
    moeq_tensor_set *tmp = NULL;
    moeq_status st = moeq_compress(h->weights, h->format, module, zeros, m->rows, m->cols,
                                   c->s->L.dtype, NULL, 0.0f, &tmp, c->err);
    if (st == MOEQ_STATUS_OK && h->input) {
        st = moeq_compress_input(h->input, module, zeros, 1, m->cols, c->s->L.dtype, &tmp, c->err);
    }
    moeq_tensor_set_destroy(tmp);
    moeq__free(zeros);
    return st;
}

/* Every Linear module must resolve and be writable; the embedding must not be
 * quantized (moeq writes embeddings as they are). */
static moeq_status plan_block(void *vctx, const block *b) {
    plan_ctx *c = vctx;
    for (uint32_t i = 0; i < b->n; i++) {
        const member *m = &b->m[i];
        if (b->type == B_EMBED) {
            moeq_resolution res;
            moeq_status st =
                moeq_resolve(c->cfg, "model.embed_tokens", MOEQ_MODULE_OTHER, NULL, &res, c->err);
            if (st != MOEQ_STATUS_OK) return st;
            if (res.status == MOEQ_MATCH_QUANTIZED) {
                return bad(c->err,
                           "layout.groups: group '%s' (target '%s') matches model.embed_tokens; "
                           "moeq_synth_write quantizes Linear modules only, so add it to "
                           "layout.ignore",
                           res.group_name, res.target);
            }
            continue;
        }
        if (!m->module_len) continue;
        how h;
        moeq_status st = resolve_member(c->cfg, m, &h, c->err);
        if (st != MOEQ_STATUS_OK) return st;
        if (h.res.status != MOEQ_MATCH_QUANTIZED) continue;
        c->used[h.res.group_index]++;
        char module[NAME_SIZE];
        memcpy(module, m->name, m->module_len);
        module[m->module_len] = '\0';
        st = try_compress(c, m, module, &h);
        if (st != MOEQ_STATUS_OK) return st;
    }
    return MOEQ_STATUS_OK;
}

/* Resolves every module once before anything is written; a group that
 * matches nothing would be a config group CT never writes. */
static moeq_status plan(const moeq__synth *s, const moeq_config *cfg, moeq_error *err) {
    plan_ctx c;
    memset(&c, 0, sizeof c);
    c.s = s;
    c.cfg = cfg;
    c.err = err;
    moeq_status st = walk_all(s, plan_block, &c);
    if (st != MOEQ_STATUS_OK) return st;
    for (uint32_t i = 0; i < moeq_config_group_count(cfg); i++) {
        if (c.used[i]) continue;
        moeq_group_view v;
        moeq_config_group(cfg, i, &v);
        uint32_t li = 0;
        while (li < s->L.n_groups && strcmp(s->L.groups[li].name, v.name) != 0) li++;
        return bad(err,
                   "layout.groups[%u] ('%s', first target '%s') matches no module of this "
                   "layout (or every match is ignored); compressed-tensors writes no such group",
                   li, v.name, v.targets[0]);
    }
    return MOEQ_STATUS_OK;
}

/* ---- writing one block ---------------------------------------------------------------- */

typedef struct write_ctx {
    const moeq__synth *s;
    const moeq_config *cfg;
    moeq_tensor_set *set;
    moeq_error *err;
} write_ctx;

/* A tensor stored as generated: norms, biases, the embedding. */
static moeq_status write_plain(write_ctx *c, const member *m) {
    const size_t n = count_of(m);
    float *v = moeq__malloc(n * sizeof *v + 1);
    if (!v) return nomem(c->err, m->name);
    gen_member(c->s, m, v);
    const int32_t dtype = m->init == INIT_BIAS ? MOEQ_DTYPE_F32 : c->s->L.dtype;
    const int64_t shape[2] = {m->rows, m->cols};
    void *data;
    const moeq_status st =
        moeq__tensor_set_push(c->set, "", m->name, dtype, m->cols ? 2 : 1, shape, &data, c->err);
    if (st == MOEQ_STATUS_OK) moeq__from_f32_ref(dtype, v, n, data);
    moeq__free(v);
    return st;
}

/* Fused shards (sharing input, NVFP4 global scale and actorder order):
 * gate/up of an MLP, q/k/v of attention.  Returns how many lead the block. */
static uint32_t fused_count(const block *b) {
    return b->type == B_MLP ? 2u : b->type == B_ATTN ? 3u : 1u;
}

static float amax_of(const float *v, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(v[i]));
    return m;
}

static bool wants_g_idx(const how *h) {
    return h->weights && moeq_actorder_is_group(h->weights->actorder) &&
           h->weights->strategy == MOEQ_STRATEGY_GROUP && h->weights->group_size > 0 &&
           h->format != MOEQ_FORMAT_NVFP4_PACK_QUANTIZED;
}

/* down_proj's calibration input: act(x Wg^T) * (x Wu^T) of its own MLP,
 * silu as the model would (DeepSeek/GLM experts), rounded to the model dtype. */
static void mlp_hidden(const moeq__synth *s, const float *x, const float *wg, const float *wu,
                       size_t I, size_t H, float *h) {
    const size_t T = (size_t)s->L.calibration_tokens;
    for (size_t t = 0; t < T; t++) {
        const float *xt = x + t * H;
        for (size_t i = 0; i < I; i++) {
            double g = 0.0, u = 0.0;
            for (size_t k = 0; k < H; k++) {
                g += (double)xt[k] * (double)wg[i * H + k];
                u += (double)xt[k] * (double)wu[i * H + k];
            }
            g = (double)moeq__round_to_dtype(s->L.dtype, (float)g);
            u = (double)moeq__round_to_dtype(s->L.dtype, (float)u);
            const double act = g / (1.0 + det_exp(-g));
            h[t * I + i] = moeq__round_to_dtype(s->L.dtype, (float)(act * u));
        }
    }
}

/* The calibration batch [tokens, cols] of member i's inputs: its input
 * site's random activations (fused shards share one site, the block's), or
 * for an MLP's down_proj the MLP's own hidden activation on gate/up's batch.
 * wg and wu are gate's and up's original weights (generated when NULL). */
static moeq_status calibration(const moeq__synth *s, const block *b, uint32_t i, const float *wg,
                               const float *wu, float *x, moeq_error *err) {
    const member *m = &b->m[i];
    const uint32_t nf = fused_count(b);
    if (!(b->type == B_MLP && i == 2)) {
        char site[NAME_SIZE];
        fmt_name(site, sizeof site, "%.*s", (int)m->module_len, m->name);
        gen_activations(s, i < nf && nf > 1 ? b->prefix : site, (size_t)m->cols, x);
        return MOEQ_STATUS_OK;
    }
    const size_t T = (size_t)s->L.calibration_tokens, H = (size_t)b->m[0].cols;
    float *xin = moeq__malloc(T * H * sizeof(float) + 1);
    float *g = wg ? NULL : moeq__malloc(count_of(&b->m[0]) * sizeof(float) + 1);
    float *u = wu ? NULL : moeq__malloc(count_of(&b->m[1]) * sizeof(float) + 1);
    moeq_status st = MOEQ_STATUS_OK;
    if (!xin || (!wg && !g) || (!wu && !u)) {
        st = nomem(err, m->name);
    } else {
        if (g) gen_member(s, &b->m[0], g);
        if (u) gen_member(s, &b->m[1], u);
        gen_activations(s, b->prefix, H, xin);
        mlp_hidden(s, xin, wg ? wg : g, wu ? wu : u, (size_t)b->m[0].rows, H, x);
    }
    moeq__free(xin);
    moeq__free(g);
    moeq__free(u);
    return st;
}

static moeq_status write_linear_block(write_ctx *c, const block *b) {
    const moeq__synth *s = c->s;
    const size_t T = (size_t)s->L.calibration_tokens;
    how h[4];
    memset(h, 0, sizeof h);
    float *w[4] = {NULL, NULL, NULL, NULL};
    float *x[4] = {NULL, NULL, NULL, NULL};
    int32_t *g_idx[4] = {NULL, NULL, NULL, NULL};
    float global[4] = {0, 0, 0, 0};
    moeq_status st = MOEQ_STATUS_OK;
    const uint32_t nf = fused_count(b);
    char module[4][NAME_SIZE];
    for (uint32_t i = 0; i < b->n && st == MOEQ_STATUS_OK; i++) {
        const member *m = &b->m[i];
        memcpy(module[i], m->name, m->module_len);
        module[i][m->module_len] = '\0';
        st = resolve_member(c->cfg, m, &h[i], c->err);
        if (st == MOEQ_STATUS_OK && !(w[i] = moeq__malloc(count_of(m) * sizeof(float) + 1))) {
            st = nomem(c->err, m->name);
        }
        if (st == MOEQ_STATUS_OK) gen_member(s, m, w[i]);
    }
    /* NVFP4: fused shards share one global scale, 448*6 / amax of their union */
    bool all_nvfp4 = nf > 1;
    for (uint32_t i = 0; i < nf && i < b->n; i++) {
        all_nvfp4 = all_nvfp4 && h[i].format == MOEQ_FORMAT_NVFP4_PACK_QUANTIZED;
    }
    if (st == MOEQ_STATUS_OK && all_nvfp4) {
        float amax = 0.0f;
        for (uint32_t i = 0; i < nf; i++) amax = fmaxf(amax, amax_of(w[i], count_of(&b->m[i])));
        for (uint32_t i = 0; i < nf; i++) global[i] = moeq_nvfp4_global_scale(amax, s->L.dtype);
    }
    /* actorder and static inputs: per input site (fused shards share one) */
    for (uint32_t i = 0; i < b->n && st == MOEQ_STATUS_OK; i++) {
        const member *m = &b->m[i];
        const size_t cols = (size_t)m->cols;
        const bool fused = i < nf && nf > 1;
        char site[NAME_SIZE];
        snprintf(site, sizeof site, "%s", fused ? b->prefix : module[i]);
        if (wants_g_idx(&h[i])) {
            const size_t gs = (size_t)h[i].weights->group_size;
            g_idx[i] = moeq__malloc(cols * sizeof(int32_t) + 1);
            uint32_t *perm = moeq__malloc(cols * sizeof *perm + 1);
            if (!g_idx[i] || !perm) {
                moeq__free(perm);
                st = nomem(c->err, m->name);
                break;
            }
            if (fused && i > 0 && g_idx[0] && (size_t)h[0].weights->group_size == gs) {
                memcpy(g_idx[i], g_idx[0], cols * sizeof(int32_t)); /* same inputs, same order */
            } else {
                gen_g_idx(s, site, cols, gs, g_idx[i], perm);
            }
            moeq__free(perm);
        }
        if (!h[i].input) continue;
        if (!(x[i] = moeq__malloc(T * cols * sizeof(float) + 1))) {
            st = nomem(c->err, m->name);
        } else {
            st = calibration(s, b, i, w[0], w[1], x[i], c->err);
        }
    }
    for (uint32_t i = 0; i < b->n && st == MOEQ_STATUS_OK; i++) {
        const member *m = &b->m[i];
        st = moeq_compress(h[i].weights, h[i].format, module[i], w[i], m->rows, m->cols, s->L.dtype,
                           g_idx[i], global[i], &c->set, c->err);
        if (st == MOEQ_STATUS_OK && h[i].input) {
            st = moeq_compress_input(h[i].input, module[i], x[i], (int64_t)T, m->cols, s->L.dtype,
                                     &c->set, c->err);
        }
    }
    for (uint32_t i = 0; i < 4; i++) {
        moeq__free(w[i]);
        moeq__free(x[i]);
        moeq__free(g_idx[i]);
    }
    return st;
}

static moeq_status write_block(void *vctx, const block *b) {
    write_ctx *c = vctx;
    if (b->type == B_MLP || b->type == B_ATTN || b->type == B_HEAD) return write_linear_block(c, b);
    if (b->type == B_ROUTER) {
        /* the router weight is a Linear module (usually ignored); its bias is plain */
        block lin = *b;
        lin.n = 1;
        moeq_status st = write_linear_block(c, &lin);
        for (uint32_t i = 1; i < b->n && st == MOEQ_STATUS_OK; i++) st = write_plain(c, &b->m[i]);
        return st;
    }
    moeq_status st = MOEQ_STATUS_OK;
    for (uint32_t i = 0; i < b->n && st == MOEQ_STATUS_OK; i++) st = write_plain(c, &b->m[i]);
    return st;
}

/* ---- files ------------------------------------------------------------------------------ */

static moeq_status path_join(const char *dir, const char *file, char **out, moeq_error *err) {
    moeq__sb sb;
    moeq__sb_init(&sb);
    moeq__sb_puts(&sb, dir);
    if (sb.len && dir[sb.len - 1] != '/') moeq__sb_putc(&sb, '/');
    moeq__sb_puts(&sb, file);
    *out = moeq__sb_take(&sb);
    return *out ? MOEQ_STATUS_OK : nomem(err, file);
}

static moeq_status ensure_dir(const char *dir, moeq_error *err) {
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) return MOEQ_STATUS_OK;
        return moeq__error(err, MOEQ_STATUS_IO, "%s: exists and is not a directory", dir);
    }
    if (errno != ENOENT || mkdir(dir, 0777) != 0) {
        return moeq__error(err, MOEQ_STATUS_IO, "%s: cannot create the directory: %s", dir,
                           strerror(errno));
    }
    return MOEQ_STATUS_OK;
}

static moeq_status remove_file(const char *dir, const char *file, moeq_error *err) {
    char *path = NULL;
    moeq_status st = path_join(dir, file, &path, err);
    if (st == MOEQ_STATUS_OK && unlink(path) != 0 && errno != ENOENT) {
        st = moeq__error(err, MOEQ_STATUS_IO, "%s: cannot remove the stale file: %s", path,
                         strerror(errno));
    }
    moeq__free(path);
    return st;
}

/* "model-00001-of-00004.safetensors": *of = 4. */
static bool is_shard_name(const char *name, long *of) {
    if (strlen(name) != 32 || strncmp(name, "model-", 6) != 0 ||
        strncmp(name + 11, "-of-", 4) != 0 || strcmp(name + 20, ".safetensors") != 0) {
        return false;
    }
    for (int i = 0; i < 5; i++) {
        if (name[6 + i] < '0' || name[6 + i] > '9' || name[15 + i] < '0' || name[15 + i] > '9')
            return false;
    }
    *of = strtol(name + 15, NULL, 10);
    return true;
}

/* Files of another layout an earlier write left: they would confuse readers
 * (an index naming other shards, model.safetensors next to shards). */
static moeq_status remove_stale(const char *dir, int32_t shards, moeq_error *err) {
    moeq_status st = remove_file(dir, "config.json", err);
    if (st == MOEQ_STATUS_OK) {
        st = remove_file(dir, shards > 1 ? "model.safetensors" : "model.safetensors.index.json",
                         err);
    }
    DIR *d = st == MOEQ_STATUS_OK ? opendir(dir) : NULL;
    if (st == MOEQ_STATUS_OK && !d) {
        return moeq__error(err, MOEQ_STATUS_IO, "%s: cannot list the directory: %s", dir,
                           strerror(errno));
    }
    /* collect first: removing while reading a directory is unspecified */
    char **stale = NULL;
    size_t n = 0;
    for (struct dirent *e; st == MOEQ_STATUS_OK && (e = readdir(d)) != NULL;) {
        long of;
        if (!is_shard_name(e->d_name, &of) || (shards > 1 && of == shards)) continue;
        char **grown = moeq__realloc(stale, (n + 1) * sizeof *grown);
        char *copy = grown ? moeq__strdup(e->d_name) : NULL;
        if (grown) stale = grown;
        if (!copy) {
            st = nomem(err, "the directory listing");
            break;
        }
        stale[n++] = copy;
    }
    if (d) closedir(d);
    for (size_t i = 0; i < n; i++) {
        if (st == MOEQ_STATUS_OK) st = remove_file(dir, stale[i], err);
        moeq__free(stale[i]);
    }
    moeq__free(stale);
    return st;
}

/* Writes `text` to dir/file through a temporary file and a rename. */
static moeq_status write_text(const char *dir, const char *file, const char *text, size_t len,
                              moeq_error *err) {
    char *path = NULL, *tmp = NULL;
    moeq_status st = path_join(dir, file, &path, err);
    if (st == MOEQ_STATUS_OK) {
        moeq__sb sb;
        moeq__sb_init(&sb);
        moeq__sb_puts(&sb, path);
        moeq__sb_puts(&sb, ".tmp");
        tmp = moeq__sb_take(&sb);
        if (!tmp) st = nomem(err, file);
    }
    FILE *f = st == MOEQ_STATUS_OK ? fopen(tmp, "wb") : NULL;
    if (st == MOEQ_STATUS_OK && !f) {
        st = moeq__error(err, MOEQ_STATUS_IO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    if (f) {
        const bool ok = fwrite(text, 1, len, f) == len;
        const int saved = errno;
        if (fclose(f) != 0 || !ok) {
            st = moeq__error(err, MOEQ_STATUS_IO, "%s: cannot write: %s", tmp,
                             strerror(ok ? errno : saved));
        } else if (rename(tmp, path) != 0) {
            st = moeq__error(err, MOEQ_STATUS_IO, "%s: cannot rename into place: %s", path,
                             strerror(errno));
        }
        if (st != MOEQ_STATUS_OK) unlink(tmp);
    }
    moeq__free(path);
    moeq__free(tmp);
    return st;
}

/* A shard's blocks, written on every CPU: each block into a tensor set of
 * its own (the generator is seeded per tensor name, so the bytes do not
 * depend on who writes them), then the sets joined in walk order. */
typedef struct shard_job {
    const moeq__synth *s;
    const moeq_config *cfg;
    block *blocks;          /* [n] */
    moeq_tensor_set **sets; /* [n] */
    moeq_error *errs;       /* [n] */
    moeq_status *st;        /* [n] */
    uint32_t n, cap;
    uint32_t next; /* the next block to take (atomic) */
    int failed;    /* a block failed: stop taking (atomic) */
} shard_job;

static moeq_status collect_block(void *vctx, const block *b) {
    shard_job *j = vctx;
    if (j->n == j->cap) {
        const uint32_t cap = j->cap ? j->cap * 2u : 64u;
        block *nb = moeq__realloc(j->blocks, cap * sizeof *nb);
        if (!nb) return MOEQ_STATUS_NOMEM;
        j->blocks = nb;
        j->cap = cap;
    }
    j->blocks[j->n++] = *b;
    return MOEQ_STATUS_OK;
}

static void write_blocks(void *arg, int tid, int nthreads) {
    (void)tid;
    (void)nthreads;
    shard_job *j = arg;
    for (;;) {
        if (__atomic_load_n(&j->failed, __ATOMIC_RELAXED)) return;
        const uint32_t i = __atomic_fetch_add(&j->next, 1u, __ATOMIC_RELAXED);
        if (i >= j->n) return;
        write_ctx c = {j->s, j->cfg, NULL, &j->errs[i]};
        j->st[i] = moeq_tensor_set_create(&c.set, c.err);
        if (j->st[i] == MOEQ_STATUS_OK) j->st[i] = write_block(&c, &j->blocks[i]);
        j->sets[i] = c.set;
        if (j->st[i] != MOEQ_STATUS_OK) __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
    }
}

static moeq_status write_shard_set(const moeq__synth *s, const moeq_config *cfg, int32_t k,
                                   int32_t n, moeq__pool *pool, moeq_tensor_set *set,
                                   moeq_error *err) {
    shard_job j;
    memset(&j, 0, sizeof j);
    j.s = s;
    j.cfg = cfg;
    moeq_status st = walk_shard(s, k, n, collect_block, &j);
    if (st == MOEQ_STATUS_OK && j.n) {
        j.sets = moeq__calloc(j.n, sizeof *j.sets);
        j.errs = moeq__calloc(j.n, sizeof *j.errs);
        j.st = moeq__calloc(j.n, sizeof *j.st);
        if (!j.sets || !j.errs || !j.st) st = MOEQ_STATUS_NOMEM;
    }
    if (st == MOEQ_STATUS_NOMEM) st = nomem(err, "the shard's blocks");
    if (st == MOEQ_STATUS_OK && j.n) {
        if (pool) {
            moeq__pool_run(pool, write_blocks, &j);
        } else {
            write_blocks(&j, 0, 1);
        }
        /* in walk order: the first failure is the one a single thread meets */
        for (uint32_t i = 0; i < j.n && st == MOEQ_STATUS_OK; i++) {
            if (j.st[i] != MOEQ_STATUS_OK) {
                st = j.st[i];
                if (err) *err = j.errs[i];
            } else if (!j.sets[i]) {
                break; /* not reached: an earlier block failed */
            } else {
                st = moeq__tensor_set_absorb(set, j.sets[i], err);
            }
        }
    }
    for (uint32_t i = 0; i < j.n && j.sets; i++) moeq_tensor_set_destroy(j.sets[i]);
    moeq__free(j.sets);
    moeq__free(j.errs);
    moeq__free(j.st);
    moeq__free(j.blocks);
    return st;
}

/* Writes the shards, recording each tensor's file in weight_map. */
static moeq_status write_shards(const moeq__synth *s, const moeq_config *cfg, const char *dir,
                                moeq__pj *doc, moeq__pjv *weight_map, uint64_t *total,
                                moeq_error *err) {
    const int32_t n = s->L.shards;
    moeq_status st = MOEQ_STATUS_OK;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    moeq__pool *pool = NULL;
    if (cpus > 1) {
        pool = moeq__pool_create(cpus > 256 ? 256 : (int)cpus, &st);
        if (!pool) return moeq__error(err, st, "cannot start %ld writer threads", cpus);
    }
    for (int32_t k = 0; k < n && st == MOEQ_STATUS_OK; k++) {
        char file[64];
        if (n == 1) {
            snprintf(file, sizeof file, "model.safetensors");
        } else {
            snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", (int)k + 1, (int)n);
        }
        moeq_tensor_set *set = NULL;
        st = moeq_tensor_set_create(&set, err);
        if (st == MOEQ_STATUS_OK) st = write_shard_set(s, cfg, k, n, pool, set, err);
        char *path = NULL;
        if (st == MOEQ_STATUS_OK) st = path_join(dir, file, &path, err);
        if (st == MOEQ_STATUS_OK) {
            st = moeq_safetensors_write(path, moeq_tensor_set_get(set, 0),
                                        moeq_tensor_set_count(set), SHARD_META, err);
        }
        for (uint32_t i = 0; st == MOEQ_STATUS_OK && i < moeq_tensor_set_count(set); i++) {
            moeq__pj_set(doc, weight_map, moeq_tensor_set_get(set, i)->name,
                         moeq__pj_string(doc, file));
        }
        *total += moeq__tensor_set_bytes(set);
        moeq__free(path);
        moeq_tensor_set_destroy(set);
    }
    moeq__pool_destroy(pool);
    return st;
}

/* model.safetensors.index.json as transformers writes it (plus a newline). */
static moeq_status write_index(const char *dir, moeq__pj *doc, moeq__pjv *weight_map,
                               uint64_t total, moeq_error *err) {
    moeq__pjv *root = moeq__pj_object(doc);
    moeq__pjv *meta = moeq__pj_object(doc);
    moeq__pj_set(doc, meta, "total_size", moeq__pj_uint(doc, total));
    moeq__pj_set(doc, root, "metadata", meta);
    moeq__pj_set(doc, root, "weight_map", weight_map);
    size_t len;
    const char *why = NULL;
    char *text = moeq__pj_dump(doc, root, &len, &why);
    if (!text) return nomem(err, "model.safetensors.index.json");
    char *with_nl = moeq__realloc(text, len + 2);
    if (!with_nl) {
        moeq__free(text);
        return nomem(err, "model.safetensors.index.json");
    }
    with_nl[len] = '\n';
    with_nl[len + 1] = '\0';
    const moeq_status st = write_text(dir, "model.safetensors.index.json", with_nl, len + 1, err);
    moeq__free(with_nl);
    return st;
}

moeq_status moeq_synth_write(const moeq_synth_layout *layout, const char *dir, moeq_error *err) {
    if (!dir || !dir[0]) {
        return bad(err, "moeq_synth_write: dir is %s", dir ? "empty" : "NULL");
    }
    moeq__synth *s = moeq__malloc(sizeof *s);
    if (!s) return nomem(err, "the layout");
    moeq_status st = moeq__synth_normalize(layout, s, err);
    char *config = NULL;
    size_t config_len = 0;
    moeq_config *cfg = NULL;
    if (st == MOEQ_STATUS_OK) st = moeq__synth_config(s, &config, &config_len, &cfg, err);
    if (st == MOEQ_STATUS_OK) st = plan(s, cfg, err);
    if (st == MOEQ_STATUS_OK) st = ensure_dir(dir, err);
    if (st == MOEQ_STATUS_OK) st = remove_stale(dir, s->L.shards, err);
    moeq__pj *doc = st == MOEQ_STATUS_OK ? moeq__pj_create() : NULL;
    moeq__pjv *weight_map = doc ? moeq__pj_object(doc) : NULL;
    if (st == MOEQ_STATUS_OK && !weight_map) st = nomem(err, "the index");
    uint64_t total = 0;
    if (st == MOEQ_STATUS_OK) st = write_shards(s, cfg, dir, doc, weight_map, &total, err);
    if (st == MOEQ_STATUS_OK && s->L.shards > 1) st = write_index(dir, doc, weight_map, total, err);
    if (st == MOEQ_STATUS_OK) st = write_text(dir, "config.json", config, config_len, err);
    moeq__pj_destroy(doc);
    moeq_config_destroy(cfg);
    moeq__free(config);
    moeq__free(s);
    return st;
}

/* ---- the original values ------------------------------------------------------------------ */

typedef struct find_ctx {
    const char *name;
    block blk;    /* the block holding it */
    uint32_t idx; /* which member */
    bool hit;
    bool calib; /* "<module>.input_calibration" */
    int64_t s_tokens;
} find_ctx;

static moeq_status find_block(void *vctx, const block *b) {
    find_ctx *c = vctx;
    for (uint32_t i = 0; i < b->n && !c->hit; i++) {
        const member *m = &b->m[i];
        const size_t ml = m->module_len;
        if (strcmp(m->name, c->name) == 0) {
            c->hit = true;
        } else if (ml && strncmp(m->name, c->name, ml) == 0 &&
                   strcmp(c->name + ml, ".input_calibration") == 0) {
            c->hit = c->calib = true;
        }
        if (c->hit) {
            c->blk = *b;
            c->idx = i;
        }
    }
    return MOEQ_STATUS_OK;
}

moeq_status moeq_synth_original(const moeq_synth_layout *layout, const char *name, float *out,
                                uint64_t out_count, int64_t out_shape[2], moeq_error *err) {
    if (!name || !out_shape) {
        return bad(err, "moeq_synth_original: %s is NULL", !name ? "name" : "out_shape");
    }
    moeq__synth *s = moeq__malloc(sizeof *s);
    if (!s) return nomem(err, "the layout");
    moeq_status st = moeq__synth_normalize(layout, s, err);
    find_ctx c;
    memset(&c, 0, sizeof c);
    c.name = name;
    c.s_tokens = s->L.calibration_tokens;
    if (st == MOEQ_STATUS_OK) st = walk_all(s, find_block, &c);
    if (st == MOEQ_STATUS_OK && !c.hit) {
        st = moeq__error(err, MOEQ_STATUS_NO_MATCH,
                         "moeq_synth_original: the layout's model has no tensor '%s' (Linear "
                         "modules are named as in the checkpoint, plus \".weight\" or "
                         "\".input_calibration\")",
                         name);
    }
    if (st == MOEQ_STATUS_OK) {
        const member *m = &c.blk.m[c.idx];
        out_shape[0] = c.calib ? c.s_tokens : m->rows;
        out_shape[1] = c.calib ? m->cols : (m->cols ? m->cols : 1);
        const size_t n = (size_t)out_shape[0] * (size_t)out_shape[1];
        if (out && out_count < (uint64_t)n) {
            st = bad(err, "moeq_synth_original: %s has %zu values; out_count is %llu", name, n,
                     (unsigned long long)out_count);
        } else if (out && c.calib) {
            st = calibration(s, &c.blk, c.idx, NULL, NULL, out, err);
        } else if (out) {
            gen_member(s, m, out);
        }
    }
    moeq__free(s);
    return st;
}

/*
 * moe.c - the MoE layer object: create (config checks, manifest), load
 * (checkpoint tensor -> parameter, expert, shard), missing, finalize.  The
 * layer's storage is moe_manifest.c's, the finalize helpers the schemes use
 * are moe_finalize.c's, and the forward pass lives in moe_apply.c.
 */
#include "layer/moe.h"

#include "checkpoint/dequant.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

static const char *const k_default_proj[3] = {"gate_proj", "up_proj", "down_proj"};

int32_t moeq_moe_scheme(const moeq_moe *layer) {
    return layer ? layer->cfg.scheme : -1;
}

/* ---- destroy ------------------------------------------------------------------- */

/* Everything create_weights and finalize made; the layer keeps its config. */
static void free_params(moeq_moe *l) {
    for (uint32_t i = 0; i < l->n_params; i++) {
        moeq__free(l->params[i].pub.data);
        moeq__free(l->params[i].loaded);
        moeq__free(l->params[i].borrowed);
    }
    moeq__free(l->params);
    l->params = NULL;
    l->n_params = l->cap_params = 0;
    for (moeq__block *b = l->blocks; b;) {
        moeq__block *next = b->next;
        moeq__free(b);
        b = next;
    }
    l->blocks = NULL;
    moeq__free(l->pk_arena);
    l->pk_arena = NULL;
    moeq__free(l->projs);
    l->projs = NULL;
    l->finalized = l->all_packed = l->int8_dot = l->fp4_dot = false;
    l->act_kind = l->act_group = 0;
}

void moeq_moe_destroy(moeq_moe *l) {
    if (!l) return;
    free_params(l);
    moeq__free(l->prefix);
    for (int i = 0; i < 3; i++) moeq__free(l->proj[i]);
    moeq__free(l->expert_map);
    moeq__free(l->local_to_global);
    moeq__free(l);
}

/* ---- create -------------------------------------------------------------------- */

static moeq_status check_config(const moeq_moe_config *c, moeq_error *err) {
    const moeq__scheme *s = moeq__scheme_get(c->scheme);
    if (!s) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "scheme %d is not a moeq_scheme_id (0..%d)", (int)c->scheme,
                           MOEQ_SCHEME_COUNT - 1);
    }
    if (c->num_experts < 1 || (uint32_t)c->num_experts > MOEQ__MAX_EXPERTS) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "num_experts is %d; must be 1..%u",
                           (int)c->num_experts, MOEQ__MAX_EXPERTS);
    }
    int32_t local = c->num_local_experts ? c->num_local_experts : c->num_experts;
    if (local < 1 || local > c->num_experts) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "num_local_experts is %d; must be 1..num_experts (%d)", (int)local,
                           (int)c->num_experts);
    }
    if (!c->expert_map &&
        (c->first_expert < 0 || (int64_t)c->first_expert + local > c->num_experts)) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "first_expert %d + num_local_experts %d exceeds num_experts %d",
                           (int)c->first_expert, (int)local, (int)c->num_experts);
    }
    if (c->hidden_size < 1 || c->intermediate_size < 1) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "hidden_size (%d) and intermediate_size (%d) must be >= 1",
                           (int)c->hidden_size, (int)c->intermediate_size);
    }
    if (c->non_gated != 0 && c->non_gated != 1) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "non_gated is %d; must be 0 or 1",
                           (int)c->non_gated);
    }
    if (c->activation < MOEQ_ACT_SILU || c->activation > MOEQ_ACT_RELU2) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "activation %d is not silu (0), gelu (1), gelu_tanh (2), "
                           "swigluoai (3) or relu2 (4)",
                           (int)c->activation);
    }
    if (c->activation == MOEQ_ACT_RELU2 && !c->non_gated) {
        return moeq__error(err, MOEQ_STATUS_UNSUPPORTED,
                           "activation relu2 (4) belongs to non-gated experts "
                           "(down(relu2(up x))): set non_gated = 1; gated experts take silu (0), "
                           "gelu (1), gelu_tanh (2) or swigluoai (3)");
    }
    if (c->non_gated && c->activation == MOEQ_ACT_SWIGLUOAI) {
        return moeq__error(err, MOEQ_STATUS_UNSUPPORTED,
                           "activation swigluoai (3) multiplies gate and up; non-gated experts "
                           "take silu (0), gelu (1), gelu_tanh (2) or relu2 (4)");
    }
    if (c->non_gated && c->swiglu_limit != 0) {
        return moeq__error(err, MOEQ_STATUS_UNSUPPORTED,
                           "swiglu_limit %g clamps gate and up of gated experts; non-gated "
                           "experts take 0",
                           (double)c->swiglu_limit);
    }
    if (!isfinite(c->swiglu_alpha) || c->swiglu_alpha < 0 || !isfinite(c->swiglu_limit) ||
        c->swiglu_limit < 0) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "swiglu_alpha (%g) and swiglu_limit (%g) must be finite and >= 0",
                           (double)c->swiglu_alpha, (double)c->swiglu_limit);
    }
    if (c->params_dtype != 0 && c->params_dtype != MOEQ_DTYPE_BF16 &&
        c->params_dtype != MOEQ_DTYPE_F16 && c->params_dtype != MOEQ_DTYPE_F32) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "params_dtype %s is not BF16, F16 or F32",
                           moeq_dtype_name(c->params_dtype));
    }
    if (!isfinite(c->routed_scaling_factor) || c->routed_scaling_factor < 0) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "routed_scaling_factor %g must be finite and >= 0",
                           (double)c->routed_scaling_factor);
    }
    if (c->proj_names) {
        for (int p = 0; p < 3; p++) {
            const char *n = c->proj_names[p];
            if (!n || !n[0] || strchr(n, '.')) {
                return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                                   "proj_names[%d] (%s) must be a non-empty name without dots", p,
                                   n ? n : "NULL");
            }
            for (int q = 0; q < p; q++) {
                if (strcmp(n, c->proj_names[q]) == 0) {
                    return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                                       "proj_names[%d] and [%d] are both \"%s\"", q, p, n);
                }
            }
        }
    }
    moeq_status st = moeq__quant_args_check(c->weights, "weights", err);
    if (st == MOEQ_STATUS_OK) {
        st = moeq__quant_args_check(c->input_activations, "input_activations", err);
    }
    if (st != MOEQ_STATUS_OK) return st;
    const moeq_quant_args *w = c->weights;
    if (w && (w->strategy == MOEQ_STRATEGY_GROUP || w->strategy == MOEQ_STRATEGY_TENSOR_GROUP) &&
        w->group_size <= 0) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "weights: strategy %s with group_size %d; a group strategy needs a "
                           "positive group_size",
                           moeq_strategy_name(w->strategy), (int)w->group_size);
    }
    if (w && w->strategy == MOEQ_STRATEGY_BLOCK && (w->block_rows <= 0 || w->block_cols <= 0)) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "weights: strategy block with block_structure [%d, %d]; both must be "
                           "positive",
                           (int)w->block_rows, (int)w->block_cols);
    }
    /* The args must be ones the scheme runs: an engine could otherwise create
     * a layer whose numbers mean something else. */
    moeq_select_options so = {s->id >= MOEQ_SCHEME_NPU_W8A8_INT8 ? MOEQ_PLATFORM_NPU
                                                                 : MOEQ_PLATFORM_CPU,
                              s->id == MOEQ_SCHEME_MXINT4};
    moeq__select_in in = {c->weights, c->input_activations, c->format, &so};
    char why[256] = "";
    if (!s->accepts(&in, why, sizeof why)) {
        return moeq__error(err, MOEQ_STATUS_UNSUPPORTED,
                           "scheme %s cannot run these args: %s (use moeq_select to choose "
                           "the scheme)",
                           s->name, why);
    }
    return MOEQ_STATUS_OK;
}

static moeq_status build_expert_map(moeq_moe *l, const moeq_moe_config *c, moeq_error *err) {
    int32_t E = c->num_experts, local = l->cfg.num_local_experts;
    l->expert_map = moeq__malloc(sizeof(int32_t) * (size_t)E);
    l->local_to_global = moeq__malloc(sizeof(int32_t) * (size_t)local);
    if (!l->expert_map || !l->local_to_global) {
        return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory creating the expert map");
    }
    for (int32_t i = 0; i < local; i++) l->local_to_global[i] = -1;
    for (int32_t g = 0; g < E; g++) {
        int32_t v;
        if (c->expert_map) {
            v = c->expert_map[g];
            if (v < -1 || v >= local) {
                return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                                   "expert_map[%d] is %d; must be -1 or a local id 0..%d", (int)g,
                                   (int)v, (int)local - 1);
            }
        } else {
            v = g >= c->first_expert && g < c->first_expert + local ? g - c->first_expert : -1;
        }
        l->expert_map[g] = v;
        if (v < 0) continue;
        if (l->local_to_global[v] >= 0) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "expert_map sends experts %d and %d to the same local id %d",
                               (int)l->local_to_global[v], (int)g, (int)v);
        }
        l->local_to_global[v] = g;
    }
    for (int32_t i = 0; i < local; i++) {
        if (l->local_to_global[i] < 0) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "expert_map gives no global expert local id %d (each of 0..%d "
                               "must appear once)",
                               (int)i, (int)local - 1);
        }
    }
    return MOEQ_STATUS_OK;
}

/* What moeq_moe_config and moeq_linear_config share: their first five
 * fields, filled through this one struct. */
typedef struct layer_head {
    int32_t scheme;
    const moeq_quant_args *weights;
    const moeq_quant_args *input_activations;
    int32_t format;
    uint32_t dequant_flags;
} layer_head;

#define HEAD_AT(T, f) (offsetof(T, f) == offsetof(layer_head, f))
#define HEAD_OF(T)                                                                                 \
    (HEAD_AT(T, scheme) && HEAD_AT(T, weights) && HEAD_AT(T, input_activations) &&                 \
     HEAD_AT(T, format) && HEAD_AT(T, dequant_flags) && sizeof(T) >= sizeof(layer_head))
_Static_assert(HEAD_OF(moeq_moe_config), "moeq_moe_config must start with layer_head's fields");
_Static_assert(HEAD_OF(moeq_linear_config),
               "moeq_linear_config must start with layer_head's fields");

moeq_status moeq__layer_config_init(const char *fn, void *out, size_t size, const moeq_config *cfg,
                                    const moeq_resolution *res, const moeq_selection *sel,
                                    moeq_error *err) {
    if (!out || !cfg || !res || !sel) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: %s is NULL", fn,
                           !out   ? "out"
                           : !cfg ? "cfg"
                           : !res ? "res"
                                  : "sel");
    }
    const layer_head h = {sel->scheme, res->weights, res->input_activations, res->format,
                          moeq_config_dequant_flags(cfg)};
    memset(out, 0, size);
    memcpy(out, &h, sizeof h);
    return MOEQ_STATUS_OK;
}

moeq_status moeq_moe_config_init(moeq_moe_config *out, const moeq_config *cfg,
                                 const moeq_resolution *res, const moeq_selection *sel,
                                 moeq_error *err) {
    return moeq__layer_config_init("moeq_moe_config_init", out, sizeof *out, cfg, res, sel, err);
}

/* The parameter manifest: the scheme's, plus the biases when asked. */
static moeq_status add_params(moeq_moe *l, moeq_error *err) {
    moeq_status st = l->scheme->create_weights(l, err);
    if (st != MOEQ_STATUS_OK) return st;
    if (l->cfg.has_bias) {
        moeq__dims d = moeq__moe_dims(l);
        const moeq__param_spec bias[2] = {
            {"w13_bias",
             l->cfg.params_dtype,
             2,
             {d.E, d.S * d.I},
             "bias",
             MOEQ_LAYOUT_SHARDED,
             -1,
             0,
             1,
             MOEQ__FLOAT_DTYPES,
             NULL},
            {"w2_bias",
             l->cfg.params_dtype,
             2,
             {d.E, d.H},
             "bias",
             MOEQ_LAYOUT_SHARDED,
             -1,
             0,
             1,
             MOEQ__FLOAT_DTYPES,
             NULL},
        };
        for (int i = 0; i < 2 && st == MOEQ_STATUS_OK; i++) {
            st = moeq__moe_add_param(l, &bias[i], err);
        }
    }
    return st;
}

moeq_status moeq__moe_reset(moeq_moe *l, moeq_error *err) {
    free_params(l);
    l->borrow = false;
    return add_params(l, err);
}

static moeq_status create_layer(const moeq_moe_config *cfg, bool linear, moeq_moe **out,
                                moeq_error *err) {
    if (out) *out = NULL;
    if (!cfg || !out) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL", !cfg ? "config" : "out");
    }
    moeq_status st = check_config(cfg, err);
    if (st != MOEQ_STATUS_OK) return st;
    moeq_moe *l = moeq__calloc(1, sizeof *l);
    if (!l) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory creating a MoE layer");
    l->cfg = *cfg;
    l->linear = linear;
    if (!l->cfg.num_local_experts) l->cfg.num_local_experts = cfg->num_experts;
    if (!l->cfg.params_dtype) l->cfg.params_dtype = MOEQ_DTYPE_BF16;
    if (l->cfg.swiglu_alpha == 0) l->cfg.swiglu_alpha = 1.702f;
    if (l->cfg.routed_scaling_factor == 0) l->cfg.routed_scaling_factor = 1.0f;
    if (cfg->weights) {
        l->weights = *cfg->weights;
        l->has_weights = true;
    }
    if (cfg->input_activations) {
        l->inputs = *cfg->input_activations;
        l->has_inputs = true;
    }
    /* The args' observer strings belong to the config; the layer keeps none. */
    l->weights.observer = l->inputs.observer = NULL;
    l->cfg.weights = l->has_weights ? &l->weights : NULL;
    l->cfg.input_activations = l->has_inputs ? &l->inputs : NULL;
    l->scheme = moeq__scheme_get(cfg->scheme);
    if (cfg->prefix && cfg->prefix[0]) {
        l->prefix = moeq__strdup(cfg->prefix);
        if (!l->prefix) goto nomem;
    }
    l->cfg.prefix = l->prefix;
    for (int p = 0; p < 3; p++) {
        l->proj[p] = moeq__strdup(cfg->proj_names ? cfg->proj_names[p] : k_default_proj[p]);
        if (!l->proj[p]) goto nomem;
    }
    l->cfg.proj_names = NULL;
    st = build_expert_map(l, cfg, err);
    if (st != MOEQ_STATUS_OK) goto fail;
    l->cfg.expert_map = l->expert_map;
    st = add_params(l, err);
    if (st != MOEQ_STATUS_OK) goto fail;
    *out = l;
    return MOEQ_STATUS_OK;
nomem:
    st = moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory creating a MoE layer");
fail:
    moeq_moe_destroy(l);
    return st;
}

moeq_status moeq_moe_create(const moeq_moe_config *cfg, moeq_moe **out, moeq_error *err) {
    return create_layer(cfg, false, out, err);
}

moeq_status moeq__moe_create_linear(const moeq_moe_config *cfg, moeq_moe **out, moeq_error *err) {
    if (cfg && (cfg->num_experts != 1 || !cfg->non_gated)) {
        return moeq__error(err, MOEQ_STATUS_INTERNAL,
                           "a linear shard is one non-gated expert (num_experts %d, non_gated %d)",
                           (int)cfg->num_experts, (int)cfg->non_gated);
    }
    return create_layer(cfg, true, out, err);
}

/* ---- the public parameter views ------------------------------------------------ */

uint32_t moeq_moe_param_count(const moeq_moe *layer) {
    return layer ? layer->n_params : 0;
}

/* The public view; its strings point into the parameter (the array of
 * parameters moves while the manifest grows, so they are set here). */
static void public_view(const moeq__param *p, moeq_param *out) {
    *out = p->pub;
    out->name = p->name;
    out->ckpt_suffix = p->suffix;
}

moeq_status moeq_moe_param(const moeq_moe *layer, uint32_t i, moeq_param *out) {
    if (!layer || !out || i >= layer->n_params) {
        return MOEQ_STATUS_INVALID_ARG;
    }
    public_view(&layer->params[i], out);
    return MOEQ_STATUS_OK;
}

moeq_status moeq_moe_find_param(const moeq_moe *layer, const char *name, moeq_param *out) {
    if (!layer || !name || !out) return MOEQ_STATUS_INVALID_ARG;
    for (uint32_t i = 0; i < layer->n_params; i++) {
        if (strcmp(layer->params[i].name, name) == 0) {
            public_view(&layer->params[i], out);
            return MOEQ_STATUS_OK;
        }
    }
    return MOEQ_STATUS_NO_MATCH;
}

static bool is_float_dtype(int32_t d) {
    return d == MOEQ_DTYPE_F32 || d == MOEQ_DTYPE_F16 || d == MOEQ_DTYPE_BF16;
}

/* ---- loading ------------------------------------------------------------------------ */

static void shape_text(const int64_t *shape, int32_t ndim, char *buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int32_t i = 0; i < ndim && len < n; i++) {
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
    }
    if (len < n) snprintf(buf + len, n - len, "]");
}

/* The checkpoint shape one shard of `p` has: the expert slice, halved along
 * the shard dimension for gate/up of a sharded parameter, reversed when the
 * parameter is transposed.  A per-shard or scalar slot is [] (or [1]). */
static int32_t expected_ckpt_shape(const moeq_moe *l, const moeq__param *p, int64_t *shape) {
    int32_t k = p->pub.ndim - 1;
    int64_t s[3] = {0, 0, 0};
    for (int32_t i = 0; i < k && i < 3; i++) s[i] = p->pub.shape[i + 1];
    if (p->pub.layout == MOEQ_LAYOUT_PER_SHARD) return 0;
    if (p->pub.layout == MOEQ_LAYOUT_SHARDED && p->w13 && k >= 1) {
        int32_t dim = p->pub.is_transposed && k == 2 ? 1 : 0;
        s[dim] /= moeq__moe_dims(l).S;
    }
    if (p->pub.is_transposed && k == 2) {
        int64_t t = s[0];
        s[0] = s[1];
        s[1] = t;
    }
    for (int32_t i = 0; i < k; i++) shape[i] = s[i];
    return k;
}

/* The layer's sizes for messages, in the words of its kind. */
static void dims_text(const moeq_moe *l, char *buf, size_t n) {
    snprintf(buf, n,
             l->linear ? "out_features %d, in_features %d"
                       : "hidden_size %d, "
                         "intermediate_size %d",
             (int)l->cfg.hidden_size, (int)l->cfg.intermediate_size);
}

static bool shape_matches(const moeq_tensor *t, const int64_t *want, int32_t k) {
    if (k == 0) {
        /* A scalar slot takes [] or [1]. */
        return (t->ndim == 0) || (t->ndim == 1 && t->shape[0] == 1);
    }
    if (t->ndim != k) return false;
    for (int32_t i = 0; i < k; i++) {
        if (t->shape[i] != want[i]) return false;
    }
    return true;
}

static size_t slice_elems(const moeq__param *p) {
    size_t n = 1;
    for (int32_t i = 1; i < p->pub.ndim; i++) n *= (size_t)p->pub.shape[i];
    return n;
}

/* Reads element i of a checkpoint tensor as float (float dtypes only). */
static void read_floats(const moeq_tensor *t, size_t first, size_t n, float *out) {
    moeq__to_f32_ref(t->dtype, (const uint8_t *)t->data + first * moeq_dtype_size(t->dtype), n,
                     out);
}

/* Converts element src_i of t to `dtype` at dst (floats between float
 * dtypes, I32 to I64; otherwise the dtypes are equal). */
static void convert_elem(int32_t dtype, uint8_t *dst, const moeq_tensor *t, size_t src_i) {
    size_t ds = moeq_dtype_size(dtype), ss = moeq_dtype_size(t->dtype);
    const uint8_t *src = (const uint8_t *)t->data + src_i * ss;
    if (dtype == t->dtype) {
        memcpy(dst, src, ds);
        return;
    }
    if (dtype == MOEQ_DTYPE_I64 && t->dtype == MOEQ_DTYPE_I32) { /* weight_shape */
        int64_t v = (int32_t)moeq__load_u32(src, 0);
        memcpy(dst, &v, sizeof v);
        return;
    }
    float v;
    moeq__to_f32_ref(t->dtype, src, 1, &v);
    moeq__from_f32_ref(dtype, &v, 1, dst);
}

/* Copies element src_i of t to element dst_i of p's data, converting it. */
static void copy_elem(moeq__param *p, size_t dst_i, const moeq_tensor *t, size_t src_i) {
    convert_elem(p->pub.dtype, (uint8_t *)p->pub.data + dst_i * moeq_dtype_size(p->pub.dtype), t,
                 src_i);
}

/* An integer element (I8..I64, U8..U64) as a signed 64-bit value, for messages. */
static long long int_value(int32_t dtype, const uint8_t *at) {
    switch (dtype) {
        case MOEQ_DTYPE_I8: return (int8_t)at[0];
        case MOEQ_DTYPE_U8: return at[0];
        case MOEQ_DTYPE_I16: return (int16_t)(at[0] | (at[1] << 8));
        case MOEQ_DTYPE_U16: return at[0] | (at[1] << 8);
        case MOEQ_DTYPE_I32: return (int32_t)moeq__load_u32(at, 0);
        case MOEQ_DTYPE_U32: return moeq__load_u32(at, 0);
        default: return (long long)moeq__load_u64(at, 0);
    }
}

static moeq_status load_generic(moeq_moe *l, moeq__param *p, int32_t e, int32_t shard,
                                const moeq_tensor *t, const char *name, moeq_error *err) {
    size_t slice = slice_elems(p);
    size_t base = (size_t)e * slice;
    int32_t k = p->pub.ndim - 1;
    /* gate and up are w13's slots 0 and 1 of S; a non-gated up is slot 0 of 1 */
    size_t S = (size_t)moeq__moe_dims(l).S, slot = (size_t)moeq__moe_slot(l, shard);
    switch (p->pub.layout) {
        case MOEQ_LAYOUT_PER_SHARD: {
            size_t i = p->w13 ? (size_t)e * S + slot : (size_t)e;
            copy_elem(p, i, t, 0);
            return MOEQ_STATUS_OK;
        }
        case MOEQ_LAYOUT_SHARED: {
            int32_t other = shard == MOEQ__GATE ? MOEQ__UP : MOEQ__GATE;
            if (p->w13 && moeq__moe_has_proj(l, other) &&
                p->loaded[e * 2 + moeq__moe_slot(l, other)]) {
                /* gate and up share one slot: they must agree. */
                size_t pes = moeq_dtype_size(p->pub.dtype);
                for (size_t i = 0; i < slice; i++) {
                    const uint8_t *have = (const uint8_t *)p->pub.data + (base + i) * pes;
                    char got_s[48], have_s[48];
                    if (is_float_dtype(t->dtype)) {
                        float a, b;
                        read_floats(t, i, 1, &a);
                        moeq__to_f32_ref(p->pub.dtype, have, 1, &b);
                        if (fabsf(a - b) <= 1e-5f * fmaxf(1.0f, fabsf(b))) continue;
                        snprintf(got_s, sizeof got_s, "%g", (double)a);
                        snprintf(have_s, sizeof have_s, "%g", (double)b);
                    } else {
                        /* Compared in the parameter's dtype: an I32 weight_shape
                         * is stored as I64. */
                        uint8_t conv[8];
                        convert_elem(p->pub.dtype, conv, t, i);
                        if (memcmp(conv, have, pes) == 0) continue;
                        snprintf(got_s, sizeof got_s, "%lld", int_value(p->pub.dtype, conv));
                        snprintf(have_s, sizeof have_s, "%lld", int_value(p->pub.dtype, have));
                    }
                    return moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                                       "%s: differs from the %s of %s at element %zu (%s vs "
                                       "%s); %s is one value shared by gate and up, so they must "
                                       "be equal",
                                       name, p->suffix, l->proj[other], i, got_s, have_s, p->name);
                }
                return MOEQ_STATUS_OK;
            }
            if (!p->pub.is_transposed || k != 2) {
                for (size_t i = 0; i < slice; i++) copy_elem(p, base + i, t, i);
                return MOEQ_STATUS_OK;
            }
            break; /* transposed: as a sharded w2 slice below */
        }
        case MOEQ_LAYOUT_SHARDED: break;
        default:
            return moeq__error(err, MOEQ_STATUS_NO_MATCH, "%s: parameter %s is not loaded", name,
                               p->name);
    }
    /* Sharded (or transposed shared): a 1-D or 2-D slice. */
    if (k == 1) {
        size_t n = (size_t)p->pub.shape[1];
        size_t off = p->w13 && p->pub.layout == MOEQ_LAYOUT_SHARDED ? slot * (n / S) : 0;
        size_t len = p->w13 && p->pub.layout == MOEQ_LAYOUT_SHARDED ? n / S : n;
        for (size_t i = 0; i < len; i++) copy_elem(p, base + off + i, t, i);
        return MOEQ_STATUS_OK;
    }
    size_t rows = (size_t)p->pub.shape[1], cols = (size_t)p->pub.shape[2];
    bool half = p->w13 && p->pub.layout == MOEQ_LAYOUT_SHARDED;
    if (!p->pub.is_transposed) {
        /* Checkpoint [rows/S, cols] into rows [slot*rows/S, ...). */
        size_t r0 = half ? slot * (rows / S) : 0;
        size_t nr = half ? rows / S : rows;
        if (p->pub.dtype == t->dtype) {
            size_t es = moeq_dtype_size(t->dtype);
            memcpy((uint8_t *)p->pub.data + (base + r0 * cols) * es, t->data, nr * cols * es);
        } else {
            for (size_t i = 0; i < nr * cols; i++) copy_elem(p, base + r0 * cols + i, t, i);
        }
        return MOEQ_STATUS_OK;
    }
    /* Transposed: checkpoint [n, rows] -> slice [rows, cols], columns
     * [slot*n, ...) for gate/up. */
    size_t c0 = half ? slot * (cols / S) : 0;
    size_t nc = half ? cols / S : cols;
    if (p->pub.dtype == t->dtype) { /* the same dtype: a plain transpose */
        const size_t es = moeq_dtype_size(t->dtype);
        moeq__transpose_ref(t->data, nc, rows, rows, (uint8_t *)p->pub.data + (base + c0) * es,
                            cols, es);
        return MOEQ_STATUS_OK;
    }
    for (size_t i = 0; i < nc; i++) {
        for (size_t j = 0; j < rows; j++) copy_elem(p, base + j * cols + c0 + i, t, i * rows + j);
    }
    return MOEQ_STATUS_OK;
}

/* Splits "<prefix>.<e>.<proj>.<suffix>". */
static moeq_status parse_name(const moeq_moe *l, const char *name, int32_t *global, int32_t *shard,
                              const char **suffix, moeq_error *err) {
    size_t n = strlen(name);
    const char *dots[3] = {NULL, NULL, NULL}; /* last three dots, last first */
    int found = 0;
    for (size_t i = n; i > 0 && found < 3; i--) {
        if (name[i - 1] == '.') dots[found++] = name + i - 1;
    }
    if (found < 2) {
        return moeq__error(err, MOEQ_STATUS_NO_MATCH,
                           "tensor \"%s\": expected <prefix>.<expert>.<%s|%s|%s>.<param>", name,
                           l->proj[0], l->proj[1], l->proj[2]);
    }
    *suffix = dots[0] + 1;
    const char *proj = dots[1] + 1;
    size_t proj_len = (size_t)(dots[0] - proj);
    const char *num = found == 3 ? dots[2] + 1 : name;
    size_t num_len = (size_t)(dots[1] - num);
    size_t prefix_len = found == 3 ? (size_t)(dots[2] - name) : 0;
    *shard = -1;
    for (int p = 0; p < 3; p++) {
        if (strlen(l->proj[p]) == proj_len && memcmp(l->proj[p], proj, proj_len) == 0) *shard = p;
    }
    if (*shard == MOEQ__GATE && !moeq__moe_has_proj(l, MOEQ__GATE)) {
        return moeq__error(err, MOEQ_STATUS_NO_MATCH,
                           "tensor \"%s\": the experts of this layer are non-gated "
                           "(down(act(up x))), so they have no %s; only %s and %s load",
                           name, l->proj[0], l->proj[1], l->proj[2]);
    }
    if (*shard < 0) {
        return moeq__error(err, MOEQ_STATUS_NO_MATCH,
                           "tensor \"%s\": projection \"%.*s\" is none of %s, %s, %s (set "
                           "proj_names for other names, e.g. w1,w3,w2)",
                           name, (int)proj_len, proj, l->proj[0], l->proj[1], l->proj[2]);
    }
    int64_t id = 0;
    bool digits = num_len > 0 && num_len <= 9;
    for (size_t i = 0; i < num_len && digits; i++) {
        digits = num[i] >= '0' && num[i] <= '9';
        id = id * 10 + (num[i] - '0');
    }
    if (!digits) {
        return moeq__error(err, MOEQ_STATUS_NO_MATCH,
                           "tensor \"%s\": \"%.*s\" before the projection is not an expert number",
                           name, (int)num_len, num);
    }
    if (l->prefix &&
        (prefix_len != strlen(l->prefix) || memcmp(name, l->prefix, prefix_len) != 0)) {
        return moeq__error(err, MOEQ_STATUS_NO_MATCH,
                           "tensor \"%s\" does not belong to this layer (prefix %s)", name,
                           l->prefix);
    }
    if (id >= l->cfg.num_experts) {
        return moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                           "tensor \"%s\": expert %lld is not below num_experts (%d)", name,
                           (long long)id, (int)l->cfg.num_experts);
    }
    *global = (int32_t)id;
    return MOEQ_STATUS_OK;
}

static void list_suffixes(const moeq_moe *l, bool w13, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < l->n_params && len < n; i++) {
        const moeq__param *p = &l->params[i];
        if (p->w13 != w13 || p->pub.layout == MOEQ_LAYOUT_DERIVED) continue;
        len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? ", " : "", p->suffix);
    }
}

/* The parameter a checkpoint suffix of the w13 or w2 projections loads into. */
static moeq__param *find_loadable(const moeq_moe *l, bool w13, const char *suffix) {
    for (uint32_t i = 0; i < l->n_params; i++) {
        moeq__param *q = &l->params[i];
        if (q->w13 == w13 && q->pub.layout != MOEQ_LAYOUT_DERIVED &&
            strcmp(q->suffix, suffix) == 0) {
            return q;
        }
    }
    return NULL;
}

bool moeq__moe_takes(const moeq_moe *l, bool w13, const char *suffix, char *takes, size_t n) {
    if (find_loadable(l, w13, suffix)) return true;
    if (takes && n) list_suffixes(l, w13, takes, n);
    return false;
}

static void list_dtypes(uint32_t mask, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    for (int32_t d = 1; d < MOEQ_DTYPE_COUNT_ && len < n; d++) {
        if (mask & (1u << d)) {
            len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? "/" : "", moeq_dtype_name(d));
        }
    }
}

/* weight_shape holds the projection's logical [out, in]: check it. */
static moeq_status check_weight_shape(const moeq_moe *l, int32_t shard, const moeq_tensor *t,
                                      const char *name, moeq_error *err) {
    int64_t want[2] = {shard == MOEQ__DOWN ? l->cfg.hidden_size : l->cfg.intermediate_size,
                       shard == MOEQ__DOWN ? l->cfg.intermediate_size : l->cfg.hidden_size};
    int64_t got[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        got[i] = t->dtype == MOEQ_DTYPE_I64   ? (int64_t)moeq__load_u64(t->data, (size_t)i)
                 : t->dtype == MOEQ_DTYPE_I32 ? (int32_t)moeq__load_u32(t->data, (size_t)i)
                                              : -1;
    }
    if (got[0] != want[0] || got[1] != want[1]) {
        char dims[96];
        dims_text(l, dims, sizeof dims);
        return moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                           "%s: weight_shape is [%lld, %lld], but this layer's %s is [%lld, "
                           "%lld] (%s)",
                           name, (long long)got[0], (long long)got[1], l->proj[shard],
                           (long long)want[0], (long long)want[1], dims);
    }
    return MOEQ_STATUS_OK;
}

moeq_status moeq_moe_load(moeq_moe *l, const moeq_tensor *t, int32_t *outcome, moeq_error *err) {
    if (outcome) *outcome = MOEQ_LOAD_SKIPPED;
    if (!l || !t || !t->name) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL",
                           !l   ? "layer"
                           : !t ? "tensor"
                                : "tensor name");
    }
    const char *name = t->name;
    if (l->finalized) {
        return moeq__error(err, MOEQ_STATUS_STATE,
                           "tensor \"%s\": the layer is finalized; load before moeq_moe_finalize",
                           name);
    }
    int32_t global = -1, shard = -1;
    const char *suffix = NULL;
    moeq_status st = parse_name(l, name, &global, &shard, &suffix, err);
    if (st != MOEQ_STATUS_OK) return st;
    return moeq__moe_load_part(l, t, global, shard, suffix, outcome, err);
}

moeq_status moeq__moe_load_part(moeq_moe *l, const moeq_tensor *t, int32_t global, int32_t shard,
                                const char *suffix, int32_t *outcome, moeq_error *err) {
    const char *name = t->name;
    moeq_status st;
    bool w13 = shard != MOEQ__DOWN;
    moeq__param *p = find_loadable(l, w13, suffix);
    char takes[256];
    if (!p && !moeq__moe_takes(l, w13, suffix, takes, sizeof takes)) {
        return moeq__error(err, MOEQ_STATUS_NO_MATCH,
                           "tensor \"%s\": scheme %s has no parameter for \"%s\" of %s (it "
                           "loads: %s)",
                           name, l->scheme->name, suffix, l->proj[shard], takes);
    }
    if (t->ndim < 0 || t->ndim > MOEQ_MAX_DIMS) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "tensor \"%s\": ndim %d is outside 0..%d",
                           name, (int)t->ndim, MOEQ_MAX_DIMS);
    }
    if (t->nbytes > 0 && !t->data) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "tensor \"%s\": data is NULL but nbytes is %llu", name,
                           (unsigned long long)t->nbytes);
    }
    if (t->dtype <= 0 || t->dtype >= MOEQ_DTYPE_COUNT_ || !(p->ckpt_dtypes & (1u << t->dtype))) {
        char want[128];
        list_dtypes(p->ckpt_dtypes, want, sizeof want);
        return moeq__error(err, MOEQ_STATUS_DTYPE, "tensor \"%s\": dtype %s, expected %s (for %s)",
                           name, moeq_dtype_name(t->dtype), want, p->name);
    }
    size_t count = 1;
    for (int32_t i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0) {
            return moeq__error(err, MOEQ_STATUS_SHAPE, "tensor \"%s\": shape[%d] is %lld", name,
                               (int)i, (long long)t->shape[i]);
        }
        if (!moeq__mul_size(count, (size_t)t->shape[i], &count)) {
            return moeq__error(err, MOEQ_STATUS_SHAPE,
                               "tensor \"%s\": the element count overflows at shape[%d]", name,
                               (int)i);
        }
    }
    if (count * moeq_dtype_size(t->dtype) != t->nbytes) {
        return moeq__error(err, MOEQ_STATUS_SHAPE,
                           "tensor \"%s\": %llu bytes for %zu elements of %s", name,
                           (unsigned long long)t->nbytes, count, moeq_dtype_name(t->dtype));
    }
    int32_t e = l->expert_map[global];
    if (e < 0) return MOEQ_STATUS_OK; /* another rank's expert */

    if (!p->load) {
        int64_t want[3];
        int32_t k = expected_ckpt_shape(l, p, want);
        if (!shape_matches(t, want, k)) {
            char got_s[96], want_s[96];
            shape_text(t->shape, t->ndim, got_s, sizeof got_s);
            shape_text(want, k, want_s, sizeof want_s);
            char dims[96];
            dims_text(l, dims, sizeof dims);
            return moeq__error(
                err, MOEQ_STATUS_SHAPE, "tensor \"%s\": shape %s, expected %s (%s is %s%s; %s)",
                name, got_s, k ? want_s : "[] or [1]", p->name,
                p->pub.layout == MOEQ_LAYOUT_PER_SHARD ? "one value per shard" : "sharded",
                p->pub.is_transposed ? ", stored transposed" : "", dims);
        }
    }
    int32_t slot = moeq__moe_slot(l, shard);
    if (p->loaded[e * 2 + slot]) {
        return moeq__error(err, MOEQ_STATUS_CHECKPOINT, "tensor \"%s\" was already loaded", name);
    }
    if (strcmp(suffix, "weight_shape") == 0) {
        st = check_weight_shape(l, shard, t, name, err);
        if (st != MOEQ_STATUS_OK) return st;
    }
    if (l->borrow && !p->load && p->pub.layout == MOEQ_LAYOUT_SHARDED && p->pub.ndim == 3 &&
        p->pub.dtype == t->dtype) {
        /* A 2-D slice as finalize reads it: leave it where it is (moeq__moe_ct_views). */
        if (!p->borrowed) {
            p->borrowed = moeq__calloc((size_t)l->cfg.num_local_experts * 2u, sizeof *p->borrowed);
            if (!p->borrowed)
                return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory loading %s", name);
        }
        p->borrowed[e * 2 + slot] = t->data;
        st = MOEQ_STATUS_OK;
    } else {
        st = p->load ? p->load(l, p, e, shard, t, err) : load_generic(l, p, e, shard, t, name, err);
    }
    if (st != MOEQ_STATUS_OK) return st;
    p->loaded[e * 2 + slot] = 1;
    if (outcome) *outcome = MOEQ_LOAD_LOADED;
    return MOEQ_STATUS_OK;
}

/* ---- missing tensors ---------------------------------------------------------------- */

/* Appends the missing (required) tensors; returns how many. */
static uint32_t collect_missing(const moeq_moe *l, moeq__sb *sb, uint32_t max_listed) {
    uint32_t count = 0;
    for (int32_t e = 0; e < l->cfg.num_local_experts; e++) {
        for (int32_t shard = 0; shard < 3; shard++) {
            if (!moeq__moe_has_proj(l, shard)) continue;
            for (uint32_t i = 0; i < l->n_params; i++) {
                const moeq__param *p = &l->params[i];
                if (!p->pub.required || p->pub.layout == MOEQ_LAYOUT_DERIVED) continue;
                if (p->w13 != (shard != MOEQ__DOWN)) continue;
                if (p->loaded[e * 2 + moeq__moe_slot(l, shard)]) continue;
                if (count < max_listed) {
                    char mod[256];
                    moeq__moe_module_name(l, e, shard, mod, sizeof mod);
                    moeq__sb_printf(sb, "%s%s.%s", count ? "\n" : "", mod, p->suffix);
                }
                count++;
            }
        }
    }
    return count;
}

moeq_status moeq_moe_missing(const moeq_moe *l, char **out_list, uint32_t *out_count,
                             moeq_error *err) {
    if (out_list) *out_list = NULL;
    if (out_count) *out_count = 0;
    if (!l) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "layer is NULL");
    moeq__sb sb;
    moeq__sb_init(&sb);
    uint32_t n = collect_missing(l, &sb, UINT32_MAX);
    if (out_list) {
        char *s = moeq__sb_take(&sb);
        if (!s) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory listing missing tensors");
        *out_list = s;
    } else {
        moeq__sb_free(&sb);
    }
    if (out_count) *out_count = n;
    return MOEQ_STATUS_OK;
}

/* ---- finalize -------------------------------------------------------------------------- */

moeq_status moeq_moe_finalize(moeq_moe *l, moeq_error *err) {
    if (!l) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "layer is NULL");
    if (l->finalized) {
        return moeq__error(err, MOEQ_STATUS_STATE, "%s: the layer is already finalized",
                           l->prefix ? l->prefix : "MoE layer");
    }
    moeq__sb sb;
    moeq__sb_init(&sb);
    uint32_t n = collect_missing(l, &sb, 8);
    if (n) {
        moeq_status st = moeq__error(
            err, MOEQ_STATUS_CHECKPOINT, "%s: %u checkpoint tensor%s missing, e.g.:\n%s%s",
            l->prefix ? l->prefix : "MoE layer", n, n == 1 ? " is" : "s are",
            sb.data ? sb.data : "", n > 8 ? "\n..." : "");
        moeq__sb_free(&sb);
        return st;
    }
    moeq__sb_free(&sb);
    size_t nproj = (size_t)l->cfg.num_local_experts * 3u;
    l->projs = moeq__calloc(nproj, sizeof *l->projs);
    if (!l->projs) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory finalizing");
    moeq_status st = l->scheme->finalize(l, err);
    if (st == MOEQ_STATUS_OK) st = moeq__moe_pack(l, err);
    if (st != MOEQ_STATUS_OK) {
        /* Leave the layer as it was so the caller may fix and retry. */
        for (moeq__block *b = l->blocks; b;) {
            moeq__block *next = b->next;
            moeq__free(b);
            b = next;
        }
        l->blocks = NULL;
        moeq__free(l->pk_arena);
        l->pk_arena = NULL;
        moeq__free(l->projs);
        l->projs = NULL;
        return st;
    }
    l->finalized = true;
#if defined(__GLIBC__)
    /* the parameters and copies finalize freed: back to the system, not kept
     * in malloc's free lists (glibc raises its mmap threshold after freeing
     * large blocks, so later ones come from the heap) */
    malloc_trim(0);
#endif
    return MOEQ_STATUS_OK;
}

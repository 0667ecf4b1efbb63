/*
 * linear.c - the linear layer object (moeq_linear_*): a quantized y = x W^T
 * (+ bias) with moeq_moe's lifecycle, built from the same parts.  Each
 * checkpoint module it reads (the module itself, or each shard of a fused
 * qkv_proj / gate_up_proj) is a layer of one non-gated expert whose only
 * projection is its down projection (moeq__moe_create_linear): the scheme the
 * registry selected declares its parameters, loads, validates and finalizes
 * them as it does an expert's, and the forward passes run that projection
 * with x as its input rows.  So every scheme, and any scheme added to the
 * registry later, runs a linear layer with no code here.
 */
#include "layer/moe.h"

#include "checkpoint/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_SHARDS 8

typedef struct lin_param {
    const moeq_moe *m; /* the shard that holds it */
    uint32_t i;        /* its index there */
    char name[96];     /* "weight_packed", or "q_proj.weight_packed" when fused */
} lin_param;

struct moeq_linear {
    char *name;
    int32_t in, out, scheme;
    int32_t n;         /* shards: 1 for an unfused module */
    moeq_moe **sh;     /* [n] */
    char **module;     /* [n] the checkpoint module each shard loads from */
    int32_t *col0;     /* [n] its first output column */
    lin_param *params; /* the manifest, shard by shard */
    uint32_t n_params;
    bool finalized;
};

/* ---- create / destroy --------------------------------------------------------------- */

void moeq_linear_destroy(moeq_linear *l) {
    if (!l) return;
    for (int32_t j = 0; j < l->n; j++) {
        if (l->sh) moeq_moe_destroy(l->sh[j]);
        if (l->module) moeq__free(l->module[j]);
    }
    moeq__free(l->sh);
    moeq__free(l->module);
    moeq__free(l->col0);
    moeq__free(l->params);
    moeq__free(l->name);
    moeq__free(l);
}

int32_t moeq_linear_scheme(const moeq_linear *l) {
    return l ? l->scheme : -1;
}

moeq_status moeq_linear_config_init(moeq_linear_config *out, const moeq_config *cfg,
                                    const moeq_resolution *res, const moeq_selection *sel,
                                    moeq_error *err) {
    return moeq__layer_config_init("moeq_linear_config_init", out, sizeof *out, cfg, res, sel, err);
}

static moeq_status check_config(const moeq_linear_config *c, moeq_error *err) {
    if (!c->name || !c->name[0]) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "linear layer: name is %s; it must be the module's name "
                           "(\"model.layers.0.self_attn.o_proj\")",
                           c->name ? "empty" : "NULL");
    }
    const char *nm = c->name;
    if (c->in_features < 1 || c->out_features < 1) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%s: in_features (%d) and out_features (%d) must be >= 1", nm,
                           (int)c->in_features, (int)c->out_features);
    }
    if (c->has_bias != 0 && c->has_bias != 1) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: has_bias is %d; must be 0 or 1", nm,
                           (int)c->has_bias);
    }
    if (c->num_shards < 0 || c->num_shards > MAX_SHARDS) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: num_shards is %d; must be 0..%d", nm,
                           (int)c->num_shards, MAX_SHARDS);
    }
    if (c->num_shards == 0) return MOEQ_STATUS_OK;
    if (!c->shard_names || !c->shard_out_features) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%s: num_shards is %d but shard_%s is NULL", nm, (int)c->num_shards,
                           !c->shard_names ? "names" : "out_features");
    }
    int64_t sum = 0;
    for (int32_t j = 0; j < c->num_shards; j++) {
        const char *s = c->shard_names[j];
        if (!s || !s[0] || strchr(s, '.')) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "%s: shard_names[%d] (%s) must be a non-empty name without dots "
                               "(\"q_proj\")",
                               nm, (int)j, s ? s : "NULL");
        }
        for (int32_t q = 0; q < j; q++) {
            if (strcmp(s, c->shard_names[q]) == 0) {
                return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                                   "%s: shard_names[%d] and [%d] are both \"%s\"", nm, (int)q,
                                   (int)j, s);
            }
        }
        if (c->shard_out_features[j] < 1) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "%s: shard_out_features[%d] (%s) is %d; must be >= 1", nm, (int)j, s,
                               (int)c->shard_out_features[j]);
        }
        sum += c->shard_out_features[j];
    }
    if (sum != c->out_features) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%s: the shards' out_features sum to %lld, but out_features is %d", nm,
                           (long long)sum, (int)c->out_features);
    }
    return MOEQ_STATUS_OK;
}

/* The checkpoint module of shard j: `name` itself, or the shard's name as a
 * sibling of it ("a.b.qkv_proj" + "q_proj" -> "a.b.q_proj"). */
static char *shard_module(const moeq_linear_config *c, int32_t j) {
    if (c->num_shards == 0) return moeq__strdup(c->name);
    const char *dot = strrchr(c->name, '.');
    size_t plen = dot ? (size_t)(dot - c->name) + 1 : 0;
    size_t slen = strlen(c->shard_names[j]);
    char *m = moeq__malloc(plen + slen + 1);
    if (!m) return NULL;
    memcpy(m, c->name, plen);
    memcpy(m + plen, c->shard_names[j], slen + 1);
    return m;
}

static moeq_status build_manifest(moeq_linear *l, const moeq_linear_config *c, moeq_error *err) {
    uint32_t total = 0;
    for (int32_t j = 0; j < l->n; j++) total += moeq_moe_param_count(l->sh[j]);
    l->params = moeq__calloc(total ? total : 1, sizeof *l->params);
    if (!l->params) return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory", l->name);
    for (int32_t j = 0; j < l->n; j++) {
        for (uint32_t i = 0; i < moeq_moe_param_count(l->sh[j]); i++) {
            moeq_param p;
            moeq_moe_param(l->sh[j], i, &p);
            lin_param *lp = &l->params[l->n_params++];
            lp->m = l->sh[j];
            lp->i = i;
            /* the engine's name of a down projection's parameter, less "w2_" */
            const char *base = strncmp(p.name, "w2_", 3) == 0 ? p.name + 3 : p.name;
            snprintf(lp->name, sizeof lp->name, "%s%s%s", c->num_shards ? c->shard_names[j] : "",
                     c->num_shards ? "." : "", base);
        }
    }
    return MOEQ_STATUS_OK;
}

moeq_status moeq_linear_create(const moeq_linear_config *c, moeq_linear **out, moeq_error *err) {
    if (out) *out = NULL;
    if (!c || !out) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL", !c ? "config" : "out");
    }
    moeq_status st = check_config(c, err);
    if (st != MOEQ_STATUS_OK) return st;
    moeq_linear *l = moeq__calloc(1, sizeof *l);
    if (!l) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory creating a linear layer");
    l->in = c->in_features;
    l->out = c->out_features;
    l->scheme = c->scheme;
    l->n = c->num_shards ? c->num_shards : 1;
    l->name = moeq__strdup(c->name);
    l->sh = moeq__calloc((size_t)l->n, sizeof *l->sh);
    l->module = moeq__calloc((size_t)l->n, sizeof *l->module);
    l->col0 = moeq__calloc((size_t)l->n, sizeof *l->col0);
    if (!l->name || !l->sh || !l->module || !l->col0) goto nomem;
    int32_t col = 0;
    for (int32_t j = 0; j < l->n; j++) {
        l->module[j] = shard_module(c, j);
        if (!l->module[j]) goto nomem;
        const char *last = strrchr(l->module[j], '.');
        last = last ? last + 1 : l->module[j];
        /* gate and up never load (the shard has no w13); down is the module */
        const char *proj[3] = {"(gate)", "(up)", last};
        moeq_moe_config mc;
        memset(&mc, 0, sizeof mc);
        mc.scheme = c->scheme;
        mc.weights = c->weights;
        mc.input_activations = c->input_activations;
        mc.format = c->format;
        mc.dequant_flags = c->dequant_flags;
        mc.prefix = l->module[j];
        mc.proj_names = proj;
        mc.num_experts = 1;
        mc.hidden_size = c->num_shards ? c->shard_out_features[j] : c->out_features;
        mc.intermediate_size = c->in_features;
        mc.activation = MOEQ_ACT_SILU; /* never applied: no up projection */
        mc.params_dtype = c->params_dtype;
        mc.has_bias = c->has_bias;
        mc.non_gated = 1;
        st = moeq__moe_create_linear(&mc, &l->sh[j], err);
        if (st != MOEQ_STATUS_OK) {
            if (!strstr(err ? err->message : "", l->module[j]))
                moeq__error_prefix(err, st, "%s", l->module[j]);
            goto fail;
        }
        l->col0[j] = col;
        col += mc.hidden_size;
    }
    st = build_manifest(l, c, err);
    if (st != MOEQ_STATUS_OK) goto fail;
    *out = l;
    return MOEQ_STATUS_OK;
nomem:
    st = moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory creating linear layer %s", c->name);
fail:
    moeq_linear_destroy(l);
    return st;
}

uint64_t moeq__linear_bytes(moeq_linear *l) {
    uint64_t b = 0;
    for (int32_t j = 0; j < l->n; j++) b += moeq__moe_expert_bytes(l->sh[j], 0);
    return b;
}

int32_t moeq__linear_shards(const moeq_linear *l) {
    return l->n;
}

moeq_moe *moeq__linear_shard(moeq_linear *l, int32_t j) {
    return j >= 0 && j < l->n ? l->sh[j] : NULL;
}

/* ---- the manifest --------------------------------------------------------------------- */

uint32_t moeq_linear_param_count(const moeq_linear *l) {
    return l ? l->n_params : 0;
}

/* The shard's view without its expert dimension (a shard holds one expert). */
static void linear_view(const lin_param *lp, moeq_param *out) {
    moeq_param p;
    moeq_moe_param(lp->m, lp->i, &p);
    *out = p;
    out->name = lp->name;
    if (p.ndim > 1) {
        out->ndim = p.ndim - 1;
        /* drop the expert dimension: shape[0..2] <- shape[1..3] */
        for (int32_t d = 0; d < 3; d++) out->shape[d] = d + 1 < p.ndim ? p.shape[d + 1] : 0;
        out->shape[3] = 0;
    } else { /* [1]: one value (per-tensor scales) */
        out->ndim = 1;
        out->shape[0] = 1;
    }
}

moeq_status moeq_linear_param(const moeq_linear *l, uint32_t i, moeq_param *out) {
    if (!l || !out || i >= l->n_params) return MOEQ_STATUS_INVALID_ARG;
    linear_view(&l->params[i], out);
    return MOEQ_STATUS_OK;
}

moeq_status moeq_linear_find_param(const moeq_linear *l, const char *name, moeq_param *out) {
    if (!l || !name || !out) return MOEQ_STATUS_INVALID_ARG;
    for (uint32_t i = 0; i < l->n_params; i++) {
        if (strcmp(l->params[i].name, name) == 0) {
            linear_view(&l->params[i], out);
            return MOEQ_STATUS_OK;
        }
    }
    return MOEQ_STATUS_NO_MATCH;
}

/* ---- loading ------------------------------------------------------------------------ */

moeq_status moeq_linear_load(moeq_linear *l, const moeq_tensor *t, int32_t *outcome,
                             moeq_error *err) {
    if (outcome) *outcome = MOEQ_LOAD_SKIPPED;
    if (!l || !t || !t->name) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL",
                           !l   ? "layer"
                           : !t ? "tensor"
                                : "tensor name");
    }
    if (l->finalized) {
        return moeq__error(err, MOEQ_STATUS_STATE,
                           "tensor \"%s\": %s is finalized; load before moeq_linear_finalize",
                           t->name, l->name);
    }
    const char *dot = strrchr(t->name, '.');
    size_t mlen = dot ? (size_t)(dot - t->name) : 0;
    for (int32_t j = 0; dot && j < l->n; j++) {
        if (strlen(l->module[j]) == mlen && memcmp(t->name, l->module[j], mlen) == 0) {
            return moeq__moe_load_part(l->sh[j], t, 0, MOEQ__DOWN, dot + 1, outcome, err);
        }
    }
    moeq__sb sb;
    moeq__sb_init(&sb);
    for (int32_t j = 0; j < l->n; j++) moeq__sb_printf(&sb, "%s%s.*", j ? ", " : "", l->module[j]);
    moeq_status st = moeq__error(err, MOEQ_STATUS_NO_MATCH,
                                 "tensor \"%s\" is not a parameter of linear layer %s (it loads "
                                 "%s)",
                                 t->name, l->name, sb.data ? sb.data : "");
    moeq__sb_free(&sb);
    return st;
}

moeq_status moeq_linear_missing(const moeq_linear *l, char **out_list, uint32_t *out_count,
                                moeq_error *err) {
    if (out_list) *out_list = NULL;
    if (out_count) *out_count = 0;
    if (!l) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "layer is NULL");
    moeq__sb sb;
    moeq__sb_init(&sb);
    uint32_t total = 0;
    for (int32_t j = 0; j < l->n; j++) {
        char *list = NULL;
        uint32_t n = 0;
        moeq_status st = moeq_moe_missing(l->sh[j], &list, &n, err);
        if (st != MOEQ_STATUS_OK) {
            moeq__sb_free(&sb);
            return st;
        }
        if (n) moeq__sb_printf(&sb, "%s%s", total ? "\n" : "", list);
        total += n;
        moeq_free(list);
    }
    if (sb.failed) {
        moeq__sb_free(&sb);
        return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory listing missing tensors");
    }
    if (out_list) {
        char *s = moeq__sb_take(&sb);
        if (!s) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory listing missing tensors");
        *out_list = s;
    } else {
        moeq__sb_free(&sb);
    }
    if (out_count) *out_count = total;
    return MOEQ_STATUS_OK;
}

/* Loads every tensor "<module of shard j>.*" through moeq_linear_load. */
static moeq_status load_shard(moeq_linear *l, int32_t j, const moeq_checkpoint *ckpt,
                              uint64_t *out_loaded, moeq_error *err) {
    uint64_t first = 0;
    uint64_t n = moeq__checkpoint_module_range(ckpt, l->module[j], &first);
    if (n == 0) {
        return moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                           "%s: the checkpoint has no tensor named %s.<param>%s", l->name,
                           l->module[j], l->n > 1 ? " (a shard of this fused module)" : "");
    }
    for (uint64_t i = 0; i < n; i++) {
        const moeq_tensor *t = moeq__checkpoint_tensor_at(ckpt, first + i);
        moeq_status st = moeq_linear_load(l, t, NULL, err);
        if (st != MOEQ_STATUS_OK) {
            if (t->file) moeq__error_prefix(err, st, "%s", t->file);
            return st;
        }
        if (out_loaded) (*out_loaded)++;
    }
    return MOEQ_STATUS_OK;
}

/* CHECKPOINT naming what is missing (of shard j only when j >= 0). */
static moeq_status check_complete(const moeq_linear *l, int32_t j, moeq_error *err) {
    char *missing = NULL;
    uint32_t count = 0;
    moeq_status st = j < 0 ? moeq_linear_missing(l, &missing, &count, err)
                           : moeq_moe_missing(l->sh[j], &missing, &count, err);
    if (st == MOEQ_STATUS_OK && count) {
        st = moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                         "%s: %u tensor%s missing from the checkpoint:\n%s", l->name, count,
                         count == 1 ? " is" : "s are", missing);
    }
    moeq_free(missing);
    return st;
}

moeq_status moeq_linear_load_checkpoint(moeq_linear *l, const moeq_checkpoint *ckpt,
                                        uint64_t *out_loaded, moeq_error *err) {
    if (out_loaded) *out_loaded = 0;
    if (!l || !ckpt) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL", !l ? "layer" : "checkpoint");
    }
    for (int32_t j = 0; j < l->n; j++) {
        moeq_status st = load_shard(l, j, ckpt, out_loaded, err);
        if (st != MOEQ_STATUS_OK) return st;
    }
    return check_complete(l, -1, err);
}

typedef struct shard_load {
    moeq_linear *l;
    const moeq_checkpoint *ckpt;
    int32_t j;
} shard_load;

static moeq_status load_finalize_shard(moeq_moe *sh, void *vp, bool again, moeq_error *err) {
    (void)again;
    const shard_load *a = vp;
    moeq_status st = load_shard(a->l, a->j, a->ckpt, NULL, err);
    if (st == MOEQ_STATUS_OK) st = check_complete(a->l, a->j, err);
    if (st == MOEQ_STATUS_OK) st = moeq_moe_finalize(sh, err);
    return st;
}

moeq_status moeq__linear_load_finalize(moeq_linear *l, const moeq_checkpoint *ckpt, int32_t threads,
                                       moeq_error *err) {
    if (l->finalized) {
        return moeq__error(err, MOEQ_STATUS_STATE, "%s: the layer is already finalized", l->name);
    }
    for (int32_t j = 0; j < l->n; j++) {
        shard_load a = {l, ckpt, j};
        moeq_status st = moeq__moe_load_finalize_with(l->sh[j], ckpt, l->module[j], threads,
                                                      load_finalize_shard, &a, err);
        if (st != MOEQ_STATUS_OK) return st;
    }
    l->finalized = true;
    return MOEQ_STATUS_OK;
}

/* ---- finalize ---------------------------------------------------------------------------- */

moeq_status moeq_linear_finalize(moeq_linear *l, moeq_error *err) {
    if (!l) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "layer is NULL");
    if (l->finalized) {
        return moeq__error(err, MOEQ_STATUS_STATE, "%s: the layer is already finalized", l->name);
    }
    /* Nothing missing anywhere first, so that a fused layer is not left half
     * finalized by an incomplete checkpoint. */
    char *missing = NULL;
    uint32_t count = 0;
    moeq_status st = moeq_linear_missing(l, &missing, &count, err);
    if (st == MOEQ_STATUS_OK && count) {
        st = moeq__error(err, MOEQ_STATUS_CHECKPOINT, "%s: %u checkpoint tensor%s missing:\n%s",
                         l->name, count, count == 1 ? " is" : "s are", missing);
    }
    moeq_free(missing);
    if (st != MOEQ_STATUS_OK) return st;
    for (int32_t j = 0; j < l->n; j++) {
        if (l->sh[j]->finalized) continue; /* an earlier call finalized it */
        st = moeq_moe_finalize(l->sh[j], err);
        if (st != MOEQ_STATUS_OK) return st;
    }
    l->finalized = true;
    return MOEQ_STATUS_OK;
}

/* ---- apply ---------------------------------------------------------------------------- */

static bool io_dtype(int32_t d) {
    return d == MOEQ_DTYPE_F32 || d == MOEQ_DTYPE_BF16 || d == MOEQ_DTYPE_F16;
}

/* out_esize: bytes per element of out (8 for the float64 reference). */
static moeq_status check_apply(const moeq_linear *l, int32_t x_dtype, const void *x, int64_t tokens,
                               int32_t out_dtype, const void *out, size_t out_esize,
                               moeq_error *err) {
    if (!l->finalized) {
        return moeq__error(err, MOEQ_STATUS_STATE,
                           "%s: not finalized; call moeq_linear_finalize after loading", l->name);
    }
    if (!io_dtype(x_dtype) || !io_dtype(out_dtype)) {
        return moeq__error(err, MOEQ_STATUS_DTYPE,
                           "%s: x dtype %s / out dtype %s; each must be F32, BF16 or F16", l->name,
                           moeq_dtype_name(x_dtype), moeq_dtype_name(out_dtype));
    }
    if (tokens < 0 || tokens > (int64_t)INT32_MAX) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: tokens is %lld; must be 0..%d",
                           l->name, (long long)tokens, INT32_MAX);
    }
    if (tokens == 0) return MOEQ_STATUS_OK;
    if (!x || !out) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: %s is NULL", l->name,
                           !x ? "x" : "out");
    }
    const uint8_t *xb = x, *ob = out;
    size_t xn = (size_t)tokens * (size_t)l->in * moeq_dtype_size(x_dtype);
    size_t on = (size_t)tokens * (size_t)l->out * out_esize;
    if (ob < xb + xn && xb < ob + on) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%s: out [%lld, %d] overlaps x [%lld, %d]; give it its own memory",
                           l->name, (long long)tokens, (int)l->out, (long long)tokens, (int)l->in);
    }
    return MOEQ_STATUS_OK;
}

moeq_status moeq_linear_apply(const moeq_linear *l, moeq_ctx *ctx, int32_t x_dtype, const void *x,
                              int64_t tokens, int32_t out_dtype, void *out, moeq_error *err) {
    if (!l || !ctx) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL", !l ? "layer" : "ctx");
    }
    moeq_status st =
        check_apply(l, x_dtype, x, tokens, out_dtype, out, moeq_dtype_size(out_dtype), err);
    if (st != MOEQ_STATUS_OK || tokens == 0) return st;
    const size_t osz = moeq_dtype_size(out_dtype);
    for (int32_t j = 0; j < l->n && st == MOEQ_STATUS_OK; j++) {
        const moeq_moe *m = l->sh[j];
        moeq__apply_io io = {ctx,    x_dtype,   x,
                             tokens, 1,         NULL,
                             NULL,   out_dtype, (uint8_t *)out + (size_t)l->col0[j] * osz,
                             NULL,   l->n > 1 ? l->out : 0};
        st = m->scheme->apply(m, &io, err);
    }
    return st;
}

/* Dynamic per-tensor scales from the amax of the rows that take part. */
static float tensor_scale_of(int32_t kind, float amax) {
    if (kind == MOEQ__ACT_INT8_TENSOR) return fmaxf(amax, MOEQ__ACT_INT8_EPS) / 127.0f;
    if (kind == MOEQ__ACT_FP8_TENSOR) return fmaxf(amax, MOEQ__ACT_FP8_EPS) / MOEQ__E4M3_MAX;
    return 1.0f;
}

#define REF_ROWS 64u /* weight rows dequantized at a time */

moeq_status moeq_linear_apply_reference(const moeq_linear *l, int32_t x_dtype, const void *x,
                                        int64_t tokens, double *out, moeq_error *err) {
    if (!l) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "layer is NULL");
    moeq_status st = check_apply(l, x_dtype, x, tokens, MOEQ_DTYPE_F32, out, sizeof(double), err);
    if (st != MOEQ_STATUS_OK || tokens == 0) return st;
    const size_t T = (size_t)tokens, K = (size_t)l->in, N = (size_t)l->out;
    float *xf = moeq__malloc(T * K * sizeof(float));
    float *xq = moeq__malloc(T * K * sizeof(float));
    float *w = moeq__malloc(REF_ROWS * K * sizeof(float));
    void *codes = moeq__malloc(moeq__act_codes_bound(T, K));
    float *scales = moeq__malloc((T * (K / 16 + 2) + 2) * sizeof(float));
    uint8_t *bad = moeq__calloc(T, 1);
    if (!xf || !xq || !w || !codes || !scales || !bad) {
        st = moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory for the float64 reference",
                         l->name);
        goto done;
    }
    moeq__to_f32_ref(x_dtype, x, T * K, xf);
    float amax = 0;
    for (size_t t = 0; t < T; t++) {
        for (size_t c = 0; c < K && !bad[t]; c++) bad[t] = (uint8_t)!isfinite(xf[t * K + c]);
        for (size_t c = 0; c < K && !bad[t]; c++) amax = fmaxf(amax, fabsf(xf[t * K + c]));
    }
    for (int32_t j = 0; j < l->n; j++) {
        const moeq_moe *m = l->sh[j];
        const moeq__proj *pd = &m->projs[MOEQ__DOWN];
        /* each shard quantizes x as its own module does (its static scale) */
        memcpy(xq, xf, T * K * sizeof(float));
        moeq__act_quant_rows(m->act_kind, m->act_group, xq, T, K,
                             tensor_scale_of(m->act_kind, amax), pd->act_scale, codes, scales);
        const size_t rows = (size_t)m->cfg.hidden_size, c0 = (size_t)l->col0[j];
        for (size_t r0 = 0; r0 < rows; r0 += REF_ROWS) {
            size_t nr = rows - r0 < REF_ROWS ? rows - r0 : REF_ROWS;
            moeq__dequant_ref(&pd->w, r0, nr, w);
            for (size_t t = 0; t < T; t++) {
                for (size_t r = 0; r < nr; r++) {
                    double acc = pd->bias ? (double)pd->bias[r0 + r] : 0.0;
                    const float *wr = w + r * K, *xr = xq + t * K;
                    for (size_t c = 0; c < K; c++) acc += (double)xr[c] * (double)wr[c];
                    out[t * N + c0 + r0 + r] = acc;
                }
            }
        }
    }
    for (size_t t = 0; t < T; t++) {
        bool finite = !bad[t];
        for (size_t o = 0; o < N && finite; o++) finite = isfinite(out[t * N + o]);
        if (!finite) {
            for (size_t o = 0; o < N; o++) out[t * N + o] = (double)NAN;
        }
    }
done:
    moeq__free(xf);
    moeq__free(xq);
    moeq__free(w);
    moeq__free(codes);
    moeq__free(scales);
    moeq__free(bad);
    return st;
}

/*
 * moe_finalize.c - the finalize helpers of the scheme kit (scheme_kit.h):
 * the checkpoint-form views of a layer's parameters, the activation
 * quantization its input args imply, and the usual finalize that builds every
 * expert projection's qweight from those views.  Schemes call these from
 * their finalize slot; moe.c reaches them only through that slot.
 */
#include "layer/moe.h"

#include "checkpoint/dequant.h"
#include "common/pool.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- checkpoint-form views of the parameters (for finalize) ------------------------- */

/* Elements of one expert's slice (every dimension after the expert one);
 * moe.c's loader keeps the same helper. */
static size_t slice_elems(const moeq__param *p) {
    size_t n = 1;
    for (int32_t i = 1; i < p->pub.ndim; i++) n *= (size_t)p->pub.shape[i];
    return n;
}

static size_t esize_of(const moeq__param *p) {
    return moeq_dtype_size(p->pub.dtype);
}

moeq_status moeq__moe_ct_views(moeq_moe *l, int32_t e, int32_t shard, moeq__ct_views *out,
                               moeq_error *err) {
    memset(out, 0, sizeof *out);
    bool w13 = shard != MOEQ__DOWN;
    int32_t slot = moeq__moe_slot(l, shard);
    size_t S = (size_t)moeq__moe_dims(l).S; /* w13 holds S shards of I rows */
    if (!moeq__moe_has_proj(l, shard)) return MOEQ_STATUS_OK;
    for (uint32_t i = 0; i < l->n_params; i++) {
        moeq__param *p = &l->params[i];
        if (p->w13 != w13 || p->pub.layout == MOEQ_LAYOUT_DERIVED || !p->loaded[e * 2 + slot]) {
            continue;
        }
        if (out->n == MOEQ__ARRAY_LEN(out->t)) {
            return moeq__error(err, MOEQ_STATUS_INTERNAL, "too many parameters for one projection");
        }
        moeq_tensor *t = &out->t[out->n];
        snprintf(out->names[out->n], sizeof out->names[0], "%s", p->suffix);
        t->name = out->names[out->n];
        t->dtype = p->pub.dtype;
        size_t es = esize_of(p), slice = slice_elems(p);
        const uint8_t *base = (const uint8_t *)p->pub.data + (size_t)e * slice * es;
        int32_t k = p->pub.ndim - 1;
        bool half = w13 && p->pub.layout == MOEQ_LAYOUT_SHARDED;
        if (p->pub.layout == MOEQ_LAYOUT_PER_SHARD) {
            t->data = (const uint8_t *)p->pub.data +
                      (w13 ? (size_t)e * S + (size_t)slot : (size_t)e) * es;
            t->ndim = 1;
            t->shape[0] = 1;
        } else if (k == 0) {
            t->data = base;
            t->ndim = 1;
            t->shape[0] = 1;
        } else if (k == 1) {
            size_t n = (size_t)p->pub.shape[1];
            t->data = base + (half ? (size_t)slot * (n / S) : 0) * es;
            t->ndim = 1;
            t->shape[0] = (int64_t)(half ? n / S : n);
        } else if (p->borrowed && p->borrowed[e * 2 + slot]) {
            /* left in the checkpoint, as compressed-tensors wrote it */
            size_t rows = (size_t)p->pub.shape[1], cols = (size_t)p->pub.shape[2];
            bool tr = p->pub.is_transposed;
            t->data = p->borrowed[e * 2 + slot];
            t->ndim = 2;
            t->shape[0] = (int64_t)(tr ? (half ? cols / S : cols) : (half ? rows / S : rows));
            t->shape[1] = (int64_t)(tr ? rows : cols);
        } else if (!p->pub.is_transposed) {
            size_t rows = (size_t)p->pub.shape[1], cols = (size_t)p->pub.shape[2];
            size_t nr = half ? rows / S : rows;
            t->data = base + (half ? (size_t)slot * nr * cols : 0) * es;
            t->ndim = 2;
            t->shape[0] = (int64_t)nr;
            t->shape[1] = (int64_t)cols;
        } else {
            /* Stored transposed: copy back to checkpoint orientation. */
            size_t rows = (size_t)p->pub.shape[1], cols = (size_t)p->pub.shape[2];
            size_t nc = half ? cols / S : cols, c0 = half ? (size_t)slot * nc : 0;
            uint8_t *copy = moeq__moe_alloc(l, nc * rows * es);
            if (!copy)
                return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory finalizing %s", p->name);
            moeq__transpose_ref(base + c0 * es, rows, nc, cols, copy, rows, es);
            t->data = copy;
            t->ndim = 2;
            t->shape[0] = (int64_t)nc;
            t->shape[1] = (int64_t)rows;
        }
        size_t count = 1;
        for (int32_t d = 0; d < t->ndim; d++) count *= (size_t)t->shape[d];
        t->nbytes = count * es;
        out->n++;
    }
    return MOEQ_STATUS_OK;
}

/* ---- the usual finalize ------------------------------------------------------------------ */

moeq_status moeq__moe_act_kind(const moeq_moe *l, int32_t *kind, int32_t *group, moeq_error *err) {
    *kind = MOEQ__ACT_NONE;
    *group = 0;
    if (!l->has_inputs) return MOEQ_STATUS_OK;
    const moeq_quant_args *a = &l->inputs;
    bool dyn = a->dynamic == MOEQ_DYNAMIC_TRUE, stat = a->dynamic == MOEQ_DYNAMIC_FALSE;
    if (a->type == MOEQ_QTYPE_INT && a->num_bits == 8) {
        if (dyn && a->strategy == MOEQ_STRATEGY_TOKEN) *kind = MOEQ__ACT_INT8_TOKEN;
        if (dyn && a->strategy == MOEQ_STRATEGY_TENSOR) *kind = MOEQ__ACT_INT8_TENSOR;
        if (stat && a->strategy == MOEQ_STRATEGY_TENSOR) *kind = MOEQ__ACT_INT8_STATIC;
    } else if (a->type == MOEQ_QTYPE_FLOAT && a->num_bits == 8) {
        if (dyn && a->strategy == MOEQ_STRATEGY_TOKEN) *kind = MOEQ__ACT_FP8_TOKEN;
        if (dyn && a->strategy == MOEQ_STRATEGY_TENSOR) *kind = MOEQ__ACT_FP8_TENSOR;
        if (dyn && a->strategy == MOEQ_STRATEGY_GROUP && a->group_size > 0) {
            *kind = MOEQ__ACT_FP8_GROUP;
            *group = a->group_size;
        }
        if (stat && a->strategy == MOEQ_STRATEGY_TENSOR) *kind = MOEQ__ACT_FP8_STATIC;
        /* MX: E8M0 scales per 32 (CT's should_generate_mx_scales) */
        if (dyn && a->strategy == MOEQ_STRATEGY_GROUP && a->group_size == 32 &&
            a->scale_dtype == MOEQ_DTYPE_U8) {
            *kind = MOEQ__ACT_MXFP8;
            *group = 0;
        }
    } else if (a->type == MOEQ_QTYPE_FLOAT && a->num_bits == 4) {
        if (a->dynamic == MOEQ_DYNAMIC_LOCAL && a->strategy == MOEQ_STRATEGY_TENSOR_GROUP &&
            a->group_size == 16) {
            *kind = MOEQ__ACT_NVFP4;
        }
        if (dyn && a->strategy == MOEQ_STRATEGY_GROUP && a->group_size == 32)
            *kind = MOEQ__ACT_MXFP4;
    }
    if (*kind != MOEQ__ACT_NONE) return MOEQ_STATUS_OK;
    char s[96];
    moeq_quant_args_summary(a, s, sizeof s);
    return moeq__error(err, MOEQ_STATUS_UNSUPPORTED, "%s: input activations %s have no kernel",
                       l->prefix ? l->prefix : "MoE layer", s);
}

/* A float parameter value (any float dtype) at element i. */
static float param_float(const moeq__param *p, size_t i) {
    float v;
    moeq__to_f32_ref(p->pub.dtype, (const uint8_t *)p->pub.data + i * esize_of(p), 1, &v);
    return v;
}

static moeq_status positive_scale(const moeq_moe *l, const moeq__param *p, size_t i, float v,
                                  moeq_error *err) {
    if (isfinite(v) && v > 0) return MOEQ_STATUS_OK;
    if (l->linear) {
        return moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                           "%s.%s is %g; it must be positive and finite",
                           l->prefix ? l->prefix : "linear layer", p->suffix, (double)v);
    }
    size_t S = (size_t)moeq__moe_dims(l).S;
    int32_t local =
        p->pub.layout == MOEQ_LAYOUT_PER_SHARD && p->w13 ? (int32_t)(i / S) : (int32_t)i;
    return moeq__error(
        err, MOEQ_STATUS_CHECKPOINT, "%s: %s of expert %d is %g; it must be positive and finite",
        l->prefix ? l->prefix : "MoE layer", p->name, (int)l->local_to_global[local], (double)v);
}

/* Static input scales (max over experts, as engines use one per layer) and
 * NVFP4 input global scales (gate and up share the smaller: one quantization
 * of x feeds both). */
static moeq_status activation_scales(moeq_moe *l, moeq_error *err) {
    int32_t E = l->cfg.num_local_experts;
    bool stat = l->act_kind == MOEQ__ACT_INT8_STATIC || l->act_kind == MOEQ__ACT_FP8_STATIC;
    if (!stat && l->act_kind != MOEQ__ACT_NVFP4) return MOEQ_STATUS_OK;
    const char *n13 = stat ? "w13_input_scale" : "w13_input_global_scale";
    const char *n2 = stat ? "w2_input_scale" : "w2_input_global_scale";
    moeq__param *p13 = moeq__moe_param(l, n13), *p2 = moeq__moe_param(l, n2);
    if (l->linear && p2) { /* the one projection's own scale */
        float d = param_float(p2, 0);
        moeq_status st = positive_scale(l, p2, 0, d, err);
        if (st == MOEQ_STATUS_OK) l->projs[MOEQ__DOWN].act_scale = d;
        return st;
    }
    if (!p13 || !p2) {
        return moeq__error(err, MOEQ_STATUS_INTERNAL, "scheme %s declares no %s/%s",
                           l->scheme->name, n13, n2);
    }
    float max13 = 0, max2 = 0;
    /* A non-gated layer's one w13 shard (up) stands for both: the gate
     * projection's act_scale is then the input scale up quantizes x with. */
    size_t S = (size_t)moeq__moe_dims(l).S, ui = S - 1;
    for (int32_t e = 0; e < E; e++) {
        float g = 0, u = 0, d;
        if (stat) {
            g = u = param_float(p13, (size_t)e);
        } else {
            g = param_float(p13, (size_t)e * S);
            u = param_float(p13, (size_t)e * S + ui);
        }
        d = param_float(p2, (size_t)e);
        moeq_status st = positive_scale(l, p13, stat ? (size_t)e : (size_t)e * S, g, err);
        if (st == MOEQ_STATUS_OK && !stat && S == 2)
            st = positive_scale(l, p13, (size_t)e * S + ui, u, err);
        if (st == MOEQ_STATUS_OK) st = positive_scale(l, p2, (size_t)e, d, err);
        if (st != MOEQ_STATUS_OK) return st;
        if (stat) {
            max13 = fmaxf(max13, g);
            max2 = fmaxf(max2, d);
        } else {
            float gu = fminf(g, u);
            l->projs[e * 3 + MOEQ__GATE].act_scale = gu;
            l->projs[e * 3 + MOEQ__UP].act_scale = gu;
            l->projs[e * 3 + MOEQ__DOWN].act_scale = d;
        }
    }
    if (stat) {
        for (int32_t e = 0; e < E; e++) {
            l->projs[e * 3 + MOEQ__GATE].act_scale = max13;
            l->projs[e * 3 + MOEQ__UP].act_scale = max13;
            l->projs[e * 3 + MOEQ__DOWN].act_scale = max2;
        }
    }
    return MOEQ_STATUS_OK;
}

/* Copies n elements into memory the layer owns (finalized data lives there). */
static void *keep(moeq_moe *l, const void *src, size_t bytes) {
    if (!src) return NULL;
    void *dst = moeq__moe_alloc(l, bytes);
    if (dst) memcpy(dst, src, bytes);
    return dst;
}

/* One expert projection's qweight, bias and owned copies. */
static moeq_status finalize_proj(moeq_moe *l, int32_t e, int32_t shard, moeq_error *err) {
    moeq__ct_views v;
    moeq_status st = moeq__moe_ct_views(l, e, shard, &v, err);
    if (st != MOEQ_STATUS_OK) return st;
    char mod[256];
    moeq__moe_module_name(l, e, shard, mod, sizeof mod);
    moeq__ct_weight cw;
    st = moeq__ct_weight_build(l->has_weights ? &l->weights : NULL, l->cfg.format,
                               l->cfg.dequant_flags, mod, v.t, v.n, &cw, err);
    if (st != MOEQ_STATUS_OK) return st;
    moeq__proj *pj = &l->projs[e * 3 + shard];
    pj->w = cw.qw;
    size_t cells = cw.qw.grid.rows * cw.qw.grid.cols;
    pj->w.scale = keep(l, cw.scale, cells * sizeof(float));
    pj->w.zero_point = keep(l, cw.zp, cells * sizeof(float));
    pj->w.g_idx = keep(l, cw.g_idx, cw.qw.cols * sizeof(int32_t));
    bool lost =
        (cw.scale && !pj->w.scale) || (cw.zp && !pj->w.zero_point) || (cw.g_idx && !pj->w.g_idx);
    moeq__ct_weight_free(&cw);
    if (lost) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory finalizing %s", mod);
    if (pj->w.rows !=
            (size_t)(shard == MOEQ__DOWN ? l->cfg.hidden_size : l->cfg.intermediate_size) ||
        pj->w.cols !=
            (size_t)(shard == MOEQ__DOWN ? l->cfg.intermediate_size : l->cfg.hidden_size)) {
        return moeq__error(err, MOEQ_STATUS_INTERNAL, "%s: built [%zu, %zu]", mod, pj->w.rows,
                           pj->w.cols);
    }
    for (uint32_t i = 0; i < v.n; i++) {
        if (strcmp(v.names[i], "bias") != 0) continue;
        float *b = moeq__moe_alloc(l, pj->w.rows * sizeof(float));
        if (!b) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory finalizing %s", mod);
        moeq__to_f32_ref(v.t[i].dtype, v.t[i].data, pj->w.rows, b);
        for (size_t r = 0; r < pj->w.rows; r++) {
            if (!isfinite(b[r])) {
                return moeq__error(err, MOEQ_STATUS_CHECKPOINT, "%s.bias[%zu] is not finite", mod,
                                   r);
            }
        }
        pj->bias = b;
    }
    return MOEQ_STATUS_OK;
}

/* The experts, split over the layer's workers in contiguous ranges; the
 * error reported is the first expert's that failed, as one thread would. */
typedef struct {
    int32_t fail_e;
    moeq_status st;
    moeq_error err;
} finalize_out;

typedef struct {
    moeq_moe *l;
    finalize_out *out; /* [threads] */
} finalize_job;

static void finalize_range(void *arg, int tid, int nthreads) {
    finalize_job *j = arg;
    moeq_moe *l = j->l;
    finalize_out *o = &j->out[tid];
    const int32_t E = l->cfg.num_local_experts;
    const int32_t e0 = (int32_t)((int64_t)E * tid / nthreads);
    const int32_t e1 = (int32_t)((int64_t)E * (tid + 1) / nthreads);
    o->st = MOEQ_STATUS_OK;
    for (int32_t e = e0; e < e1 && o->st == MOEQ_STATUS_OK; e++) {
        for (int32_t shard = 0; shard < 3 && o->st == MOEQ_STATUS_OK; shard++) {
            if (!moeq__moe_has_proj(l, shard)) continue;
            o->st = finalize_proj(l, e, shard, &o->err);
            o->fail_e = e;
        }
    }
}

moeq_status moeq__moe_finalize_ct(moeq_moe *l, moeq_error *err) {
    moeq_status st = moeq__moe_act_kind(l, &l->act_kind, &l->act_group, err);
    if (st != MOEQ_STATUS_OK) return st;
    const int n = l->workers ? moeq__pool_threads(l->workers) : 1;
    finalize_job j = {l, moeq__calloc((size_t)n, sizeof(finalize_out))};
    if (!j.out) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory finalizing");
    if (n > 1) {
        moeq__pool_run(l->workers, finalize_range, &j);
    } else {
        finalize_range(&j, 0, 1);
    }
    int worst = -1;
    for (int t = 0; t < n; t++) {
        if (j.out[t].st != MOEQ_STATUS_OK && (worst < 0 || j.out[t].fail_e < j.out[worst].fail_e)) {
            worst = t;
        }
    }
    if (worst >= 0) {
        st = j.out[worst].st;
        if (err) *err = j.out[worst].err;
    }
    moeq__free(j.out);
    if (st != MOEQ_STATUS_OK) return st;
    return activation_scales(l, err);
}

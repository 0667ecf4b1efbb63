/*
 * moe_manifest.c - the storage of a MoE layer that the rest of the layer and
 * the schemes build on: its dimensions and module names, the parameter
 * manifest (add and look up parameters), and the memory the layer owns.
 * Calls nothing else in the layer, so moe.c, moe_pack.c and the schemes all
 * call down into it.
 */
#include "layer/moe.h"

#include <stdio.h>
#include <string.h>

moeq__dims moeq__moe_dims(const moeq_moe *l) {
    moeq__dims d = {l->cfg.num_local_experts, l->cfg.hidden_size, l->cfg.intermediate_size,
                    l->linear          ? 0
                    : l->cfg.non_gated ? 1
                                       : 2};
    return d;
}

bool moeq__moe_has_proj(const moeq_moe *l, int32_t shard) {
    if (l->linear) return shard == MOEQ__DOWN;
    return shard != MOEQ__GATE || !l->cfg.non_gated;
}

int32_t moeq__moe_slot(const moeq_moe *l, int32_t shard) {
    return shard == MOEQ__UP && !l->cfg.non_gated ? 1 : 0;
}

void moeq__moe_module_name(const moeq_moe *l, int32_t local_e, int32_t shard, char *buf, size_t n) {
    if (l->linear) { /* one module: the linear layer's shard */
        snprintf(buf, n, "%s", l->prefix ? l->prefix : "linear layer");
        return;
    }
    int32_t g = l->local_to_global[local_e];
    snprintf(buf, n, "%s%s%d.%s", l->prefix ? l->prefix : "", l->prefix ? "." : "", (int)g,
             l->proj[shard]);
}

/* ---- memory owned by the layer ------------------------------------------------ */

void *moeq__moe_alloc(moeq_moe *l, size_t n) {
    size_t total;
    if (!moeq__add_size(sizeof(moeq__block), n, &total)) return NULL;
    moeq__block *b = moeq__calloc(1, total);
    if (!b) return NULL;
    /* finalize's workers allocate at once: push onto the list atomically */
    b->next = __atomic_load_n(&l->blocks, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&l->blocks, &b->next, b, true, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED)) {
    }
    return b->data;
}

/* ---- the manifest ------------------------------------------------------------------ */

static bool is_float_dtype(int32_t d) {
    return d == MOEQ_DTYPE_F32 || d == MOEQ_DTYPE_F16 || d == MOEQ_DTYPE_BF16;
}

moeq_status moeq__moe_add_param(moeq_moe *l, const moeq__param_spec *spec, moeq_error *err) {
    bool w13 = strncmp(spec->name, "w13_", 4) == 0;
    if (!w13 && strncmp(spec->name, "w2_", 3) != 0) {
        return moeq__error(err, MOEQ_STATUS_INTERNAL, "parameter %s is neither w13_ nor w2_",
                           spec->name);
    }
    if (w13 && l->linear) return MOEQ_STATUS_OK; /* a linear layer is one w2 projection */
    if (l->n_params == l->cap_params) {
        uint32_t cap = l->cap_params ? l->cap_params * 2u : 8u;
        moeq__param *p = moeq__realloc(l->params, sizeof *p * cap);
        if (!p) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory adding %s", spec->name);
        l->params = p;
        l->cap_params = cap;
    }
    moeq__param *p = &l->params[l->n_params];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", spec->name);
    snprintf(p->suffix, sizeof p->suffix, "%s", spec->suffix ? spec->suffix : "");
    p->w13 = w13;
    p->ckpt_dtypes = spec->ckpt_dtypes;
    p->load = spec->load;
    p->pub.dtype = spec->dtype;
    p->pub.ndim = spec->ndim;
    p->pub.layout = spec->layout;
    p->pub.quant_method = spec->quant_method;
    p->pub.is_transposed = spec->is_transposed;
    p->pub.required = spec->required;
    size_t count = 1;
    for (int32_t i = 0; i < spec->ndim; i++) {
        if (spec->shape[i] < 0 || !moeq__mul_size(count, (size_t)spec->shape[i], &count)) {
            return moeq__error(err, MOEQ_STATUS_SHAPE, "parameter %s is too large", spec->name);
        }
        p->pub.shape[i] = spec->shape[i];
    }
    size_t bytes;
    if (!moeq__mul_size(count, moeq_dtype_size(spec->dtype), &bytes)) {
        return moeq__error(err, MOEQ_STATUS_SHAPE, "parameter %s is too large", spec->name);
    }
    p->pub.nbytes = bytes;
    p->pub.data = moeq__calloc(1, bytes);
    p->loaded = moeq__calloc((size_t)l->cfg.num_local_experts * 2u, 1);
    if (!p->pub.data || !p->loaded) {
        moeq__free(p->pub.data);
        moeq__free(p->loaded);
        return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory for parameter %s (%zu bytes)",
                           spec->name, bytes);
    }
    /* Per-shard and shared float scales start at 1, as the engines' do. */
    if (is_float_dtype(spec->dtype) &&
        (spec->layout == MOEQ_LAYOUT_PER_SHARD || spec->layout == MOEQ_LAYOUT_SHARED)) {
        float one = 1.0f;
        for (size_t i = 0; i < count; i++) {
            moeq__from_f32_ref(spec->dtype, &one, 1,
                               (uint8_t *)p->pub.data + i * moeq_dtype_size(spec->dtype));
        }
    }
    l->n_params++;
    return MOEQ_STATUS_OK;
}

moeq__param *moeq__moe_param(moeq_moe *l, const char *name) {
    for (uint32_t i = 0; i < l->n_params; i++) {
        if (strcmp(l->params[i].name, name) == 0) return &l->params[i];
    }
    return NULL;
}

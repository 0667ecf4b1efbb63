/*
 * moe_checkpoint.c - loading a MoE layer's experts straight from an open
 * safetensors checkpoint: every tensor under "<prefix>." goes through
 * moeq_moe_load (experts another rank holds are skipped), with progress
 * reports and a complete-or-nothing check at the end.
 */
#include "layer/moe.h"
#include "checkpoint/safetensors.h"
#include "common/pool.h"

#include <stdio.h>
#include <string.h>

moeq_status moeq_moe_load_checkpoint(moeq_moe *l, const moeq_checkpoint *ckpt, const char *prefix,
                                     moeq_progress_fn progress, void *user_data,
                                     uint64_t *out_loaded, uint64_t *out_skipped, moeq_error *err) {
    if (out_loaded) *out_loaded = 0;
    if (out_skipped) *out_skipped = 0;
    if (!l || !ckpt) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL", !l ? "layer" : "checkpoint");
    }
    const char *p = prefix && prefix[0] ? prefix : l->prefix;
    if (!p) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "no prefix: pass one or create the layer with cfg.prefix");
    }
    if (l->finalized) {
        return moeq__error(err, MOEQ_STATUS_STATE, "%s: the layer is already finalized", p);
    }
    uint64_t first = 0;
    uint64_t n = moeq__checkpoint_module_range(ckpt, p, &first);
    if (n == 0) {
        return moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                           "%s: the checkpoint has no tensor named %s.<expert>.<proj>.<param>", p,
                           p);
    }
    for (uint64_t i = 0; i < n; i++) {
        const moeq_tensor *t = moeq__checkpoint_tensor_at(ckpt, first + i);
        int32_t outcome = MOEQ_LOAD_SKIPPED;
        moeq_status st = moeq_moe_load(l, t, &outcome, err);
        if (st != MOEQ_STATUS_OK) {
            if (t->file) moeq__error_prefix(err, st, "%s", t->file);
            return st;
        }
        if (outcome == MOEQ_LOAD_LOADED && out_loaded) (*out_loaded)++;
        if (outcome == MOEQ_LOAD_SKIPPED && out_skipped) (*out_skipped)++;
        if (progress && progress(i + 1, n, user_data) != 0) {
            return moeq__error(err, MOEQ_STATUS_STATE,
                               "%s: loading stopped by the progress callback after %llu of %llu "
                               "tensors",
                               p, (unsigned long long)(i + 1), (unsigned long long)n);
        }
    }
    char *missing = NULL;
    uint32_t count = 0;
    moeq_status st = moeq_moe_missing(l, &missing, &count, err);
    if (st != MOEQ_STATUS_OK) return st;
    if (count) {
        /* Name the first few: the list can be thousands long. */
        char *cut = missing;
        for (int lines = 0; lines < 8 && cut; lines++) {
            cut = strchr(cut, '\n');
            if (cut) cut++;
        }
        if (cut) cut[-1] = '\0';
        st = moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                         "%s: %u tensor%s missing from the checkpoint, e.g.:\n%s%s", p, count,
                         count == 1 ? " is" : "s are", missing, cut ? "\n..." : "");
    }
    moeq_free(missing);
    return st;
}

/* Whether any slice of the layer is left in the checkpoint. */
static bool borrows(const moeq_moe *l) {
    for (uint32_t i = 0; i < l->n_params; i++) {
        if (l->params[i].borrowed) return true;
    }
    return false;
}

/* Gives back the checkpoint pages of every tensor under "<p>.". */
static void drop_pages(const moeq_checkpoint *ckpt, const char *p) {
    uint64_t first = 0;
    uint64_t n = moeq__checkpoint_module_range(ckpt, p, &first);
    for (uint64_t i = 0; i < n; i++) {
        const moeq_tensor *t = moeq__checkpoint_tensor_at(ckpt, first + i);
        moeq__checkpoint_drop(t->data, t->nbytes);
    }
}

typedef struct prefix_load {
    const moeq_checkpoint *ckpt;
    const char *prefix;
    moeq_progress_fn progress;
    void *user_data;
} prefix_load;

static moeq_status load_prefix(moeq_moe *l, void *vp, bool again, moeq_error *err) {
    const prefix_load *a = vp;
    moeq_status st = moeq_moe_load_checkpoint(l, a->ckpt, a->prefix, again ? NULL : a->progress,
                                              again ? NULL : a->user_data, NULL, NULL, err);
    if (st == MOEQ_STATUS_OK) st = moeq_moe_finalize(l, err);
    return st;
}

moeq_status moeq__moe_load_finalize_with(moeq_moe *l, const moeq_checkpoint *ckpt, const char *drop,
                                         int32_t threads, moeq__moe_loader load, void *ctx,
                                         moeq_error *err) {
    moeq_status st = MOEQ_STATUS_OK;
    moeq__pool *pool = NULL;
    if (threads > 1) {
        pool = moeq__pool_create(threads, &st);
        if (!pool) return moeq__error(err, st, "cannot start %d loader threads", (int)threads);
    }
    /* A scheme with a custom loader may read its parameters itself: copy. */
    l->borrow = true;
    for (uint32_t i = 0; i < l->n_params; i++) {
        if (l->params[i].load) l->borrow = false;
    }
    l->workers = pool;
    st = load(l, ctx, false, err);
    if (st == MOEQ_STATUS_OK && !l->all_packed && borrows(l)) {
        /* the unpacked projections read their codes where they lie: copy them in */
        st = moeq__moe_reset(l, err);
        if (st == MOEQ_STATUS_OK) st = load(l, ctx, true, err);
    }
    l->workers = NULL;
    l->borrow = false;
    moeq__pool_destroy(pool);
    if (st != MOEQ_STATUS_OK) {
        /* nothing may point into the checkpoint once the call returns */
        moeq__moe_reset(l, NULL);
        return st;
    }
    for (uint32_t i = 0; i < l->n_params; i++) {
        moeq__free(l->params[i].borrowed);
        l->params[i].borrowed = NULL;
    }
    drop_pages(ckpt, drop);
    return MOEQ_STATUS_OK;
}

moeq_status moeq_moe_load_finalize(moeq_moe *l, const moeq_checkpoint *ckpt, const char *prefix,
                                   int32_t threads, moeq_progress_fn progress, void *user_data,
                                   moeq_error *err) {
    if (!l || !ckpt) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL", !l ? "layer" : "checkpoint");
    }
    if (threads < 0 || threads > 1024) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "threads is %d; expected 0..1024",
                           (int)threads);
    }
    if (l->finalized) {
        return moeq__error(err, MOEQ_STATUS_STATE, "%s: the layer is already finalized",
                           l->prefix ? l->prefix : "MoE layer");
    }
    prefix_load a = {ckpt, prefix, progress, user_data};
    return moeq__moe_load_finalize_with(l, ckpt, prefix && prefix[0] ? prefix : l->prefix, threads,
                                        load_prefix, &a, err);
}

/*
 * moe_checkpoint.c - loading a MoE layer's experts straight from an open
 * safetensors checkpoint: every tensor under "<prefix>." goes through
 * moeq_moe_load (experts another rank holds are skipped), with progress
 * reports and a complete-or-nothing check at the end.
 */
#include "layer/moe.h"
#include "checkpoint/safetensors.h"

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
    moeq__sb dotted;
    moeq__sb_init(&dotted);
    moeq__sb_puts(&dotted, p);
    moeq__sb_putc(&dotted, '.');
    if (dotted.failed) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory");
    uint64_t first = 0;
    uint64_t n = moeq__checkpoint_prefix_range(ckpt, dotted.data, &first);
    moeq__sb_free(&dotted);
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

/*
 * moe_ctx.c - the per-thread context both forwards run with: the kernel
 * table picked for this CPU, the thread pool, and grow-only scratch.
 */
#include "layer/moe.h"
#include "common/pool.h"

#include <stdlib.h>

moeq_status moeq_ctx_create(const moeq_ctx_options *opts, moeq_ctx **out, moeq_error *err) {
    if (out) *out = NULL;
    if (!out) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "out is NULL");
    int32_t threads = opts ? opts->threads : 0;
    if (threads < 0 || threads > 256) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "threads is %d; use 0..256", (int)threads);
    }
    const int kern_cap = moeq__kern_env_cap();
    if (kern_cap < 0) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "MOEQ_KERNELS is '%s'; use portable, avx2 or avx512 (or unset it)",
                           getenv("MOEQ_KERNELS"));
    }
    const int bf16_path = moeq__bf16_path();
    if (bf16_path < 0) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "MOEQ_BF16_PATH is '%s'; use auto, on or off (or unset it)",
                           getenv("MOEQ_BF16_PATH"));
    }
    moeq_ctx *c = moeq__calloc(1, sizeof *c);
    if (!c) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory creating a context");
    c->threads = threads ? threads : 1;
    const char *env = getenv("MOEQ_FORCE_REF");
    c->force_ref = (opts && opts->force_ref) || (env && env[0] == '1');
    c->kern = moeq__kern_level(kern_cap);
    c->bf16_path = bf16_path;
    moeq_status st = MOEQ_STATUS_OK;
    if (!c->force_ref && c->threads > 1) {
        c->pool = moeq__pool_create(c->threads, &st);
        if (!c->pool) {
            moeq__free(c);
            return moeq__error(err, st, "could not start %d threads for a context",
                               (int)threads);
        }
    }
    *out = c;
    return MOEQ_STATUS_OK;
}

void moeq_ctx_destroy(moeq_ctx *c) {
    if (!c) return;
    moeq__pool_destroy(c->pool);
    moeq__free(c->scratch);
    moeq__free(c);
}

const char *moeq_ctx_kernels(const moeq_ctx *ctx) {
    if (!ctx) return NULL;
    return ctx->force_ref ? "reference" : ctx->kern->name;
}

void *moeq__ctx_scratch(moeq_ctx *c, size_t n) {
    if (n <= c->scratch_cap) return c->scratch;
    void *p = moeq__realloc(c->scratch, n);
    if (!p) return NULL;
    c->scratch = p;
    c->scratch_cap = n;
    return p;
}

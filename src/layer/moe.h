/*
 * moe.h - the inside of a MoE layer for the layer's own files: moe.c
 * (create, load, missing, finalize), moe_apply.c and moe_fast.c (the
 * forward passes), moe_pack.c, and the tests and benchmarks.  Everything a
 * scheme sees is in scheme_kit.h, included here; this adds the forward
 * pass's insides (the per-call io, the context, the pieces both forwards
 * share) and packing.  Never installed.
 */
#ifndef MOEQ_MOE_H
#define MOEQ_MOE_H

#include "layer/scheme_kit.h"

/* ---- apply ------------------------------------------------------------------------ */

/* One moeq_moe_apply call, as the scheme's apply slot receives it. */
typedef struct moeq__apply_io {
    moeq_ctx *ctx;
    int32_t x_dtype;
    const void *x;
    int64_t tokens;
    int32_t top_k;
    const int32_t *ids;
    const float *weights;
    int32_t out_dtype;
    void *out;
} moeq__apply_io;

struct moeq__pool;
struct moeq_ctx {
    int32_t threads;
    int32_t force_ref;       /* the reference forward (moe_apply.c) only */
    const moeq__kern *kern;  /* the fast path's kernels, picked for this CPU */
    struct moeq__pool *pool; /* threads - 1 workers; NULL for one thread or force_ref */
    void *scratch;
    size_t scratch_cap;
};

/* Grow-only scratch (moe_ctx.c): at least n bytes, valid until the next call. */
void *moeq__ctx_scratch(moeq_ctx *c, size_t n);

/* The fast forward (moe_fast.c), which moeq__moe_apply_generic runs unless
 * the context pins the reference forward. */
moeq_status moeq__moe_apply_fast(const moeq_moe *l, moeq__apply_io *io, moeq_error *err);

/* Shared by both forwards (moe_act.c). */
void moeq__act_quant_rows(int32_t kind, int32_t group, float *x, size_t m, size_t k,
                          float tensor_scale, float act_scale, void *codes, float *scales);
/* a = act(gate) * up; for non-gated experts (c->non_gated) a = act(up), gate
 * unread (may be NULL).  a may alias gate or up. */
void moeq__expert_act(const moeq_moe_config *c, const float *gate, const float *up, float *a,
                      size_t n);
/* Bytes of activation codes (and FP4 scale bytes) of rows x cols. */
size_t moeq__act_codes_bound(size_t rows, size_t cols);

/* ---- packing (moe_pack.c) ------------------------------------------------------------ */

/* After the scheme's finalize: moves every projection the kernels can stream
 * into the blocked layout (kernels.h, moeq__packed) and, when all of them
 * moved, frees the loaded parameters and the copies finalize made. */
moeq_status moeq__moe_pack(moeq_moe *l, moeq_error *err);
/* Bytes the fast path reads for expert e (codes and scales of its three
 * projections, biases excluded). */
size_t moeq__moe_expert_bytes(const moeq_moe *l, int32_t e);

#endif /* MOEQ_MOE_H */

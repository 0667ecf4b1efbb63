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
    /* Expert parallelism (src/parallel/): non-NULL, [tokens * top_k], the
     * row of out (f32 [rows, H]) that gets pair p's expert output, unweighted
     * and uncombined (a row of NaN where the pair's input or activations are
     * bad), for moeq__moe_combine_token on the token's rank; -1 for pairs
     * that have none (ids of -1). */
    const int32_t *pair_out;
    /* Elements from one row of out to the next; 0: H.  A fused linear layer
     * writes each shard's columns of its rows (linear.c). */
    int64_t out_stride;
} moeq__apply_io;

struct moeq__pool;
struct moeq_ctx {
    int32_t threads;
    int32_t force_ref;       /* the reference forward (moe_apply.c) only */
    const moeq__kern *kern;  /* the fast path's kernels, picked for this CPU */
    int32_t bf16_path;       /* the fast path takes the bfloat16 path (moeq__bf16_path) */
    struct moeq__pool *pool; /* threads - 1 workers; NULL for one thread or force_ref */
    void *scratch;
    size_t scratch_cap;
};

/* A linear layer's shard (linear.c): a layer of one non-gated expert whose
 * only projection is its down projection (cfg.num_experts 1, non_gated 1,
 * hidden_size = out features, intermediate_size = in features); every
 * scheme's create_weights declares it as it declares a down projection.
 * Applied with ids and weights NULL and top_k 1: token t is row t of the
 * projection's input, and out row t its output (+ bias). */
moeq_status moeq__moe_create_linear(const moeq_moe_config *cfg, moeq_moe **out, moeq_error *err);
/* moeq_moe_config_init and moeq_linear_config_init (both configs begin
 * with the same five fields, asserted in moe.c): checks the arguments
 * (messages name `fn`), zeroes the `size` bytes of out, then sets scheme,
 * weights, input_activations, format and dequant_flags from the selection,
 * the resolution and cfg. */
moeq_status moeq__layer_config_init(const char *fn, void *out, size_t size, const moeq_config *cfg,
                                    const moeq_resolution *res, const moeq_selection *sel,
                                    moeq_error *err);
/* A linear layer's shards (linear.c), for benchmarks and tests that fill
 * their parameters directly: the count, and shard j's layer. */
int32_t moeq__linear_shards(const moeq_linear *l);
moeq_moe *moeq__linear_shard(moeq_linear *l, int32_t j);
/* Loads a layer's tensors and finalizes it (again: the second, copying pass). */
typedef moeq_status (*moeq__moe_loader)(moeq_moe *l, void *ctx, bool again, moeq_error *err);
/* What moeq_moe_load_finalize does around the loading (moe_checkpoint.c):
 * load(l, ctx) with 2-D slices borrowed from the checkpoint where the scheme
 * allows, finalize and packing on `threads` threads, load again copying when
 * a projection does not pack, then the borrowed slices released and the
 * pages of the tensors under "<drop>." dropped.  On failure l is reset (no
 * pointer into the checkpoint remains).  Arguments checked by the caller. */
moeq_status moeq__moe_load_finalize_with(moeq_moe *l, const moeq_checkpoint *ckpt, const char *drop,
                                         int32_t threads, moeq__moe_loader load, void *ctx,
                                         moeq_error *err);
/* moeq_linear_load_checkpoint and moeq_linear_finalize, shard by shard the
 * way moeq_moe_load_finalize loads a MoE layer (in place, on `threads`
 * threads).  On failure the layer is left unfinished: destroy it. */
moeq_status moeq__linear_load_finalize(moeq_linear *l, const moeq_checkpoint *ckpt, int32_t threads,
                                       moeq_error *err);
/* Bytes the fast path reads for a finalized linear layer (codes and scales
 * of every shard, biases excluded): moeq__moe_expert_bytes summed. */
uint64_t moeq__linear_bytes(moeq_linear *l);
/* moeq_moe_load after the name is parsed: tensor t (named t->name in
 * messages) is checkpoint parameter `suffix` of global expert `global`'s
 * projection `shard`. */
moeq_status moeq__moe_load_part(moeq_moe *l, const moeq_tensor *t, int32_t global, int32_t shard,
                                const char *suffix, int32_t *outcome, moeq_error *err);

/* Grow-only scratch (moe_ctx.c): at least n bytes, valid until the next call. */
void *moeq__ctx_scratch(moeq_ctx *c, size_t n);

/* The fast forward (moe_fast.c), which moeq__moe_apply_generic runs unless
 * the context pins the reference forward. */
moeq_status moeq__moe_apply_fast(const moeq_moe *l, moeq__apply_io *io, moeq_error *err);

/* One token's combine, shared by both forwards and by expert parallelism so
 * that they round alike (moe_apply.c): acc = sum of w[j] * y[j] over the
 * token's k pairs in j order (y[j] NULL: a pair that contributes nothing; w
 * ignored, as 1, with apply_router_weight_on_input), times
 * routed_scaling_factor, a row of NaN when `bad` or not finite; written to
 * dst as out_dtype.  The arithmetic is the one ctx's forward uses
 * (force_ref: plain float loops; else ctx's kernel table).  acc: H floats of
 * scratch (may be dst when out is F32). */
void moeq__moe_combine_token(const moeq_moe *l, const moeq_ctx *ctx, size_t k, const float *w,
                             const float *const *y, bool bad, float *acc, int32_t out_dtype,
                             void *dst);

/* Expert parallelism's local step (moe_apply.c): tokens [tokens, H] of x
 * (x_dtype), each with top_k (global id, weight) slots, ids held here or -1;
 * writes pair p's expert output to row pair_out[p] of y (f32, NaN rows as in
 * moeq__apply_io.pair_out; pair_out[p] is -1 exactly where ids[p] is).
 * Checks as moeq_moe_apply.
 * @return OK, INVALID_ARG, DTYPE, STATE, NOMEM, INTERNAL (an id not held
 *         here, a slot that disagrees with its id). */
moeq_status moeq__moe_apply_rows(const moeq_moe *l, moeq_ctx *ctx, int32_t x_dtype, const void *x,
                                 int64_t tokens, int32_t top_k, const int32_t *ids,
                                 const float *weights, const int32_t *pair_out, float *y,
                                 moeq_error *err);

/* Shared by both forwards (moe_act.c). */
void moeq__act_quant_rows(int32_t kind, int32_t group, float *x, size_t m, size_t k,
                          float tensor_scale, float act_scale, void *codes, float *scales);
/* a = act(gate) * up; for non-gated experts (c->non_gated) a = act(up), gate
 * unread (may be NULL).  a may alias gate or up. */
void moeq__expert_act(const moeq_moe_config *c, const float *gate, const float *up, float *a,
                      size_t n);
/* Bytes of activation codes (and FP4 scale bytes) of rows x cols. */
size_t moeq__act_codes_bound(size_t rows, size_t cols);

/* Whether the layer has a loadable parameter for checkpoint suffix `suffix`
 * ("weight_scale", "bias") of its gate/up (w13) or down projections; when not,
 * the suffixes it does take go to takes (n bytes, may be NULL).  moeq_moe_load
 * refuses a tensor exactly when this is false, and moeq inspect asks it too. */
bool moeq__moe_takes(const moeq_moe *l, bool w13, const char *suffix, char *takes, size_t n);

/* ---- packing (moe_pack.c) ------------------------------------------------------------ */

/* After the scheme's finalize: moves every projection the kernels can stream
 * into the blocked layout (kernels.h, moeq__packed) and, when all of them
 * moved, frees the loaded parameters and the copies finalize made. */
moeq_status moeq__moe_pack(moeq_moe *l, moeq_error *err);
/* Back to the state create left (moe.c): every parameter, loaded tensor,
 * borrowed slice and finalized projection dropped, the manifest declared
 * anew, l->borrow cleared. */
moeq_status moeq__moe_reset(moeq_moe *l, moeq_error *err);
/* Bytes the fast path reads for expert e (codes and scales of its three
 * projections, biases excluded). */
size_t moeq__moe_expert_bytes(const moeq_moe *l, int32_t e);

#endif /* MOEQ_MOE_H */

/*
 * moeq_ep.h - expert parallelism: one MoE layer split over ranks (processes,
 * machines), each rank holding and loading only its experts, tokens sent to
 * the experts they were routed to and their outputs sent back.
 *
 *   comm       a moeq_ep_comm the host fills (MPI: moeq_mpi.h, built with
 *              -DMOEQ_MPI=ON; or NCCL, torch.distributed, Gloo, threads)
 *   create     moeq_ep_create: the layer for this rank's experts
 *   load       moeq_ep_load_checkpoint: this rank's experts' tensors only
 *   apply      moeq_ep_apply: this rank's tokens in, their outputs out
 *
 * Every function marked "collective" must be called by every rank of the
 * communicator, in the same order, even by a rank that already failed: the
 * ranks agree on a status (an all-reduce) before each exchange, so a failure
 * on one rank (a missing tensor, out of memory, a bad argument) makes every
 * rank return an error instead of leaving the others waiting.  On the ranks
 * that did not fail the message names the rank that did and carries its
 * message.
 *
 * Determinism: moeq_ep_apply's output on each rank is bit-identical to
 * moeq_moe_apply of one layer holding every expert, run on the ranks' tokens
 * concatenated in rank order (with the same context options), whatever the
 * number of ranks and the placement (docs/parallel.md says why).
 *
 * Threads: a moeq_ep is used by one thread at a time (its calls are
 * collectives anyway); its layer is a finalized moeq_moe after loading.
 */
#ifndef MOEQ_EP_H
#define MOEQ_EP_H

#include "moeq.h"

#ifdef __cplusplus
extern "C" {
#endif

/* All-reduce operations of moeq_ep_comm.allreduce_i32. */
typedef enum moeq_ep_reduce { MOEQ_EP_REDUCE_MAX = 0, MOEQ_EP_REDUCE_MIN = 1 } moeq_ep_reduce;

/* The collectives expert parallelism needs, as a vtable the host fills.
 * Each call is made by every rank in the same order.  A slot returns OK or
 * an error status with a message (a transport failure: the layer then
 * reports it; a transport that fails on some ranks only may leave the others
 * waiting, which moeq cannot prevent). */
typedef struct moeq_ep_comm {
    int32_t rank; /* 0..size-1 */
    int32_t size; /* >= 1 */
    void *user_data;
    /* Sends send_counts[r] bytes at send + send_displs[r] to rank r and
     * receives recv_counts[r] bytes from rank r at recv + recv_displs[r], for
     * every r (itself included); counts and displacements are bytes, below
     * 2^31 (moeq_ep_apply refuses larger exchanges), and may be 0. */
    moeq_status (*alltoallv)(void *user_data, const void *send, const int64_t *send_counts,
                             const int64_t *send_displs, void *recv, const int64_t *recv_counts,
                             const int64_t *recv_displs, moeq_error *err);
    /* In place: vals[i] becomes the max (or min, op = moeq_ep_reduce) of
     * vals[i] over every rank, for i < n (n <= 16). */
    moeq_status (*allreduce_i32)(void *user_data, int32_t *vals, int32_t n, int32_t op,
                                 moeq_error *err);
    /* Optional (NULL: an all-reduce stands in): returns when every rank called it. */
    moeq_status (*barrier)(void *user_data, moeq_error *err);
} moeq_ep_comm;

/* Where experts go. */
typedef enum moeq_ep_placement {
    /* Rank r holds a contiguous run of ids: the first E % size ranks hold
     * E / size + 1 experts, the others E / size. */
    MOEQ_EP_CONTIGUOUS = 0,
    /* Expert e goes to rank e % size (local id e / size). */
    MOEQ_EP_ROUND_ROBIN = 1
} moeq_ep_placement;

/* "contiguous", "round-robin"; NULL for an unknown value. Static storage. */
MOEQ_API const char *moeq_ep_placement_name(int32_t placement);
/* The placement for a name; -1 when unknown. */
MOEQ_API int32_t moeq_ep_placement_from_name(const char *name);

/* The expert map of `rank` (moeq_moe_config.expert_map: expert_map[e] is the
 * local id of global expert e on that rank, or -1) and its expert count, for
 * hosts that create the layer themselves.  expert_map: num_experts entries.
 * @return OK, INVALID_ARG (NULL, placement, ranks < 1, rank out of range,
 *         num_experts < ranks: every rank must hold an expert). */
MOEQ_API moeq_status moeq_ep_placement_map(int32_t placement, int32_t num_experts, int32_t ranks,
                                           int32_t rank, int32_t *expert_map,
                                           int32_t *num_local_experts, moeq_error *err);

typedef struct moeq_ep moeq_ep;

/* Collective.  Creates this rank's part of the layer `cfg` describes for
 * every expert (num_experts global; expert_map, first_expert and
 * num_local_experts must be left 0/NULL: the placement sets them).  The comm
 * is copied (its user_data must outlive the layer).  Layers whose
 * activations take one dynamic scale over the whole call (per-tensor dynamic
 * int8/FP8) are refused: that scale would need every rank's rows.
 * @return OK, INVALID_ARG, UNSUPPORTED, the statuses of moeq_moe_create, or
 *         another rank's status.  OUT *out: destroy with moeq_ep_destroy
 *         (on failure NULL on every rank). */
MOEQ_API moeq_status moeq_ep_create(const moeq_moe_config *cfg, const moeq_ep_comm *comm,
                                    int32_t placement, moeq_ep **out, moeq_error *err);
/* Local (not collective).  NULL is a no-op. */
MOEQ_API void moeq_ep_destroy(moeq_ep *ep);

/* This rank's layer (its experts only), e.g. to moeq_moe_load tensors by
 * hand before moeq_ep_finalize.  Owned by ep. */
MOEQ_API moeq_moe *moeq_ep_layer(moeq_ep *ep);

/* Collective.  Loads this rank's experts from the checkpoint
 * (moeq_moe_load_checkpoint: other experts' tensors are skipped, never read),
 * then finalizes the layer.  prefix NULL: the layer's own.
 * @return as moeq_moe_load_checkpoint and moeq_moe_finalize on this rank,
 *         or another rank's status. */
MOEQ_API moeq_status moeq_ep_load_checkpoint(moeq_ep *ep, const moeq_checkpoint *ckpt,
                                             const char *prefix, moeq_progress_fn progress,
                                             void *user_data, moeq_error *err);

/* Collective.  Finalizes this rank's layer after tensors were loaded by hand.
 * @return as moeq_moe_finalize, or another rank's status. */
MOEQ_API moeq_status moeq_ep_finalize(moeq_ep *ep, moeq_error *err);

/* Collective.  Every rank passes its own status; returns OK when every one
 * was OK, else the failing rank's status and message (the lowest failing
 * rank's) on every rank.  For hosts' own steps between the layer's calls. */
MOEQ_API moeq_status moeq_ep_agree(moeq_ep *ep, moeq_status local, moeq_error *err);

/* Collective.  Runs the layer on this rank's `tokens` rows of x ([tokens, H],
 * x_dtype BF16, F16 or F32: the same dtype on every rank) routed to
 * topk_ids/topk_weights ([tokens, top_k], global ids; -1 contributes
 * nothing), writing out ([tokens, H], out_dtype BF16, F16 or F32).  tokens
 * may be 0 (pointers may then be NULL) and top_k may differ between ranks.
 * Each token goes once to every rank holding one of its experts, as its row
 * of x (H x dtype bytes) with max-top_k (id, weight) slots (8 bytes each);
 * each (token, expert) pair's float32 output (H x 4 bytes) comes back and
 * the token's rank adds the k outputs in k order, as moeq_moe_apply does.
 * ctx: this rank's context.
 * @return OK, the statuses of moeq_moe_apply (INVALID_ARG, DTYPE, STATE,
 *         NOMEM), LIMIT (a rank would move 2 GiB or more through one
 *         alltoallv: split the batch), the comm's, or
 *         another rank's status. */
MOEQ_API moeq_status moeq_ep_apply(moeq_ep *ep, moeq_ctx *ctx, int32_t x_dtype, const void *x,
                                   int64_t tokens, int32_t top_k, const int32_t *topk_ids,
                                   const float *topk_weights, int32_t out_dtype, void *out,
                                   moeq_error *err);

/* Collective.  moeq_route(route, logits [tokens, E]) on this rank, then
 * moeq_ep_apply with route->top_k; a routing failure is agreed on like any
 * other.  route->num_experts must be the layer's.
 * @return as moeq_route and moeq_ep_apply. */
MOEQ_API moeq_status moeq_ep_apply_logits(moeq_ep *ep, moeq_ctx *ctx,
                                          const moeq_route_config *route, const float *logits,
                                          int32_t x_dtype, const void *x, int64_t tokens,
                                          int32_t out_dtype, void *out, moeq_error *err);

/* What this rank holds and did (counters add up over calls). */
typedef struct moeq_ep_stats {
    int32_t rank, size;
    int32_t placement;
    int32_t num_local_experts;
    uint64_t tensors_loaded;  /* by moeq_ep_load_checkpoint */
    uint64_t tensors_skipped; /* other ranks' experts */
    uint64_t bytes_loaded;    /* parameter bytes of this rank's experts (before finalize) */
    uint64_t calls;           /* moeq_ep_apply calls that ran */
    uint64_t pairs_sent;      /* (token, expert) pairs dispatched, to itself included */
    uint64_t pairs_received;  /* rows its experts computed */
    uint64_t tokens_sent;     /* token rows dispatched: one per (token, destination rank) */
    uint64_t tokens_received;
    uint64_t bytes_sent;     /* through alltoallv: counts, dispatch and return, to others */
    uint64_t bytes_received; /* likewise, from others */
    double compute_s;        /* local work: bucketing, the experts, the combine */
    double comm_s;           /* inside the comm's calls: agree_s + exchange_s */
    double agree_s;          /* inside allreduce_i32: mostly waiting for slower ranks, as the
                                ranks agree before each exchange */
    double exchange_s;       /* inside alltoallv: moving the bytes (the ranks have just met) */
} moeq_ep_stats;

/* Local.  @return OK, INVALID_ARG (NULL). */
MOEQ_API moeq_status moeq_ep_get_stats(const moeq_ep *ep, moeq_ep_stats *out, moeq_error *err);
/* Local.  Zeroes the call counters and times (not the load figures). */
MOEQ_API void moeq_ep_reset_stats(moeq_ep *ep);

/* Local.  Writes the global ids of this rank's experts in local-id order
 * (n >= their count) and returns the count; -1 for NULL or n too small. */
MOEQ_API int32_t moeq_ep_local_experts(const moeq_ep *ep, int32_t *ids, int32_t n);

#ifdef __cplusplus
}
#endif

#endif /* MOEQ_EP_H */

/*
 * ep.c - expert parallelism over a host-supplied communicator (moeq_ep.h).
 *
 * Each rank holds a moeq_moe of its experts (moeq_moe_config.expert_map
 * from the placement).  One moeq_ep_apply is four phases, each collective
 * step preceded by an all-reduce on the ranks' status so that nobody enters
 * an exchange another rank will not join:
 *
 *   1. route    check the arguments; count this rank's (token, k) pairs per
 *               destination rank and local expert there, and its tokens per
 *               destination; agree (status, x dtype, largest top_k) ->
 *               alltoallv of the counts;
 *   2. dispatch size the buffers;
 *               agree (status, largest buffer) -> alltoallv of the
 *               (id, weight) slots and of the x rows: each token once per
 *               rank holding one of its experts, tokens in order;
 *   3. experts  moeq__moe_apply_rows on the tokens received (in source-rank
 *               order), one float32 output row per (token, expert) pair;
 *               agree (status) -> alltoallv of the outputs back;
 *   4. combine  per token, its k outputs in k order (moeq__moe_combine_token,
 *               the single-process combine itself).
 *
 * Why the bits match one process holding every expert (docs/parallel.md):
 * each expert gets the same rows in the same order (source ranks in rank
 * order, each source's tokens in order: the single-process bucketing of the
 * concatenated batch), the kernels a row takes depend only on its expert's
 * row count and on the CPU, a row's
 * result does not depend on the other rows, and the combine is the same
 * function with the same operands.
 */
#include "moeq/moeq_ep.h"

#include "layer/moe.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define EP_MAX_REDUCE 16

enum {
    B_CNT_SEND, /* int32 [E]: pairs per (destination, its local expert) */
    B_CNT_RECV, /* int32 [size * nloc[rank]] */
    B_A2A,      /* int64 [4 * size]: counts and displacements */
    B_POS,      /* int32 [T * k]: a pair's slot in the send order, or -1 */
    B_SEND_META,
    B_SEND_ROWS,
    B_RECV_META,
    B_RECV_ROWS,
    B_IDS,      /* int32 [Rt * kmax]: received slots */
    B_WTS,      /* float [Rt * kmax] */
    B_Y,        /* float [R, H]: an output row per received pair */
    B_BACK,     /* float [P, H] */
    B_ACC,      /* float [H], then the token's k row pointers */
    B_ROUTE,    /* moeq_ep_apply_logits: ids and weights */
    B_SEEN,     /* int64 [size]: a token's slot per destination */
    B_FILL,     /* int64 [2 * size]: next token slot, next pair place per destination */
    B_PAIR_OUT, /* int32 [slots]: a received slot's output row, or -1 */
    B_COUNT
};

struct moeq_ep {
    moeq_ep_comm comm;
    int32_t rank, size, placement;
    int32_t E, H;
    char *name; /* the layer prefix, for messages */
    moeq_moe *layer;
    int32_t *owner;     /* [E]: the rank holding expert e */
    int32_t *owner_loc; /* [E]: its local id there */
    int32_t *nloc;      /* [size]: experts per rank */
    int32_t *cnt_off;   /* [size + 1]: prefix sums of nloc */
    int32_t *local_ids; /* [nloc[rank]]: global ids of this rank's experts */
    moeq_ep_stats stats;

    /* Grow-only scratch of apply, one block per array. */
    struct ep_buf {
        void *p;
        size_t cap;
    } buf[B_COUNT];
};

typedef struct ep_meta {
    int32_t id;
    float w;
} ep_meta;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* B_ACC: H floats, then (aligned) the token's row pointers. */
static size_t acc_bytes(size_t H) {
    return (H * sizeof(float) + 15) & ~(size_t)15;
}

static void *grow(moeq_ep *ep, int i, size_t n) {
    struct ep_buf *b = &ep->buf[i];
    if (n == 0) n = 1;
    if (n <= b->cap) return b->p;
    void *p = moeq__realloc(b->p, n);
    if (!p) return NULL;
    b->p = p;
    b->cap = n;
    return p;
}

/* ---- placement ------------------------------------------------------------------- */

const char *moeq_ep_placement_name(int32_t placement) {
    return placement == MOEQ_EP_CONTIGUOUS    ? "contiguous"
           : placement == MOEQ_EP_ROUND_ROBIN ? "round-robin"
                                              : NULL;
}

int32_t moeq_ep_placement_from_name(const char *name) {
    if (!name) return -1;
    if (!strcmp(name, "contiguous")) return MOEQ_EP_CONTIGUOUS;
    if (!strcmp(name, "round-robin")) return MOEQ_EP_ROUND_ROBIN;
    return -1;
}

/* Rank and local id of expert e. */
static void place(int32_t placement, int32_t E, int32_t size, int32_t e, int32_t *rank,
                  int32_t *local) {
    if (placement == MOEQ_EP_ROUND_ROBIN) {
        *rank = e % size;
        *local = e / size;
        return;
    }
    int32_t base = E / size, extra = E % size;
    int32_t big = extra * (base + 1); /* experts held by the ranks with one more */
    if (e < big) {
        *rank = e / (base + 1);
        *local = e % (base + 1);
    } else {
        *rank = extra + (e - big) / base;
        *local = (e - big) % base;
    }
}

moeq_status moeq_ep_placement_map(int32_t placement, int32_t num_experts, int32_t ranks,
                                  int32_t rank, int32_t *expert_map, int32_t *num_local_experts,
                                  moeq_error *err) {
    if (!expert_map || !num_local_experts) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL",
                           !expert_map ? "expert_map" : "num_local_experts");
    }
    if (!moeq_ep_placement_name(placement)) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "placement is %d; use MOEQ_EP_CONTIGUOUS (0) or "
                           "MOEQ_EP_ROUND_ROBIN (1)",
                           (int)placement);
    }
    if (ranks < 1 || rank < 0 || rank >= ranks) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "rank %d of %d ranks; need 0 <= rank < ranks", (int)rank, (int)ranks);
    }
    if (num_experts < ranks || (uint32_t)num_experts > MOEQ__MAX_EXPERTS) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%d experts over %d ranks; every rank must hold at least one expert "
                           "(num_experts %d..%u)",
                           (int)num_experts, (int)ranks, (int)ranks, MOEQ__MAX_EXPERTS);
    }
    int32_t n = 0;
    for (int32_t e = 0; e < num_experts; e++) {
        int32_t r, l;
        place(placement, num_experts, ranks, e, &r, &l);
        expert_map[e] = r == rank ? l : -1;
        n += r == rank;
    }
    *num_local_experts = n;
    return MOEQ_STATUS_OK;
}

/* ---- collectives, timed ------------------------------------------------------------- */

static const char *ep_name(const moeq_ep *ep) {
    return ep->name ? ep->name : "MoE layer";
}

static moeq_status c_allreduce(moeq_ep *ep, int32_t *vals, int32_t n, int32_t op, moeq_error *err) {
    double t0 = now_s();
    moeq_status st = ep->comm.allreduce_i32(ep->comm.user_data, vals, n, op, err);
    double dt = now_s() - t0;
    ep->stats.comm_s += dt;
    ep->stats.agree_s += dt;
    if (st != MOEQ_STATUS_OK) {
        moeq__error_prefix(err, st, "%s: expert parallelism, rank %d of %d: all-reduce",
                           ep_name(ep), (int)ep->rank, (int)ep->size);
    }
    return st;
}

/* One alltoallv; a[0..3] are send counts, send displacements, receive counts,
 * receive displacements ([size] each, bytes). */
static moeq_status c_alltoallv(moeq_ep *ep, const void *send, void *recv, const int64_t *a,
                               const char *what, moeq_error *err) {
    static uint8_t dummy[8];
    const int64_t *sc = a, *sd = a + ep->size, *rc = a + 2 * ep->size, *rd = a + 3 * ep->size;
    for (int32_t r = 0; r < ep->size; r++) {
        if (r == ep->rank) continue;
        ep->stats.bytes_sent += (uint64_t)sc[r];
        ep->stats.bytes_received += (uint64_t)rc[r];
    }
    double t0 = now_s();
    moeq_status st = ep->comm.alltoallv(ep->comm.user_data, send ? send : dummy, sc, sd,
                                        recv ? recv : dummy, rc, rd, err);
    double dt = now_s() - t0;
    ep->stats.comm_s += dt;
    ep->stats.exchange_s += dt;
    if (st != MOEQ_STATUS_OK) {
        moeq__error_prefix(err, st, "%s: expert parallelism, rank %d of %d: alltoallv of %s",
                           ep_name(ep), (int)ep->rank, (int)ep->size, what);
    }
    return st;
}

/* The ranks' verdict on a phase.  vals[0..1] are filled here (the max status,
 * size - the lowest failing rank); extra[0..n_extra) are max-reduced along.
 * On failure the lowest failing rank's status and message reach every rank:
 * that rank keeps its own message (in `local_err`), the others get "rank R
 * of N failed: <its message>". */
static moeq_status agree(moeq_ep *ep, moeq_status local, const moeq_error *local_err,
                         int32_t *extra, int32_t n_extra, const char *phase, moeq_error *err) {
    int32_t vals[EP_MAX_REDUCE];
    vals[0] = (int32_t)local;
    vals[1] = local != MOEQ_STATUS_OK ? ep->size - ep->rank : 0;
    for (int32_t i = 0; i < n_extra; i++) vals[2 + i] = extra[i];
    moeq_status st = c_allreduce(ep, vals, 2 + n_extra, MOEQ_EP_REDUCE_MAX, err);
    if (st != MOEQ_STATUS_OK) return st;
    for (int32_t i = 0; i < n_extra; i++) extra[i] = vals[2 + i];
    if (vals[0] == MOEQ_STATUS_OK) return MOEQ_STATUS_OK;
    const int32_t failed = ep->size - vals[1];
    /* The failing rank's status and message reach the others through more
     * all-reduces (max, the others giving INT32_MIN: the result is exactly
     * its value), 64 bytes a round: no buffer to allocate, nothing but the
     * all-reduce that just worked.  Round 0: status and length. */
    const bool me = ep->rank == failed;
    char text[MOEQ_ERROR_MESSAGE_SIZE];
    memset(text, 0, sizeof text);
    if (me && local_err) snprintf(text, sizeof text, "%s", local_err->message);
    int32_t w[16];
    for (int i = 0; i < 16; i++) w[i] = INT32_MIN;
    if (me) {
        w[0] = (int32_t)local;
        w[1] = (int32_t)strlen(text);
    }
    st = c_allreduce(ep, w, 2, MOEQ_EP_REDUCE_MAX, err);
    if (st != MOEQ_STATUS_OK) return st;
    const int32_t code = w[0];
    const size_t len = w[1] > 0 && (size_t)w[1] < sizeof text ? (size_t)w[1] : 0;
    for (size_t off = 0; off < len; off += sizeof w) {
        for (int i = 0; i < 16; i++) w[i] = INT32_MIN;
        if (me) memcpy(w, text + off, sizeof w); /* text is zero-padded past len */
        st = c_allreduce(ep, w, 16, MOEQ_EP_REDUCE_MAX, err);
        if (st != MOEQ_STATUS_OK) return st;
        if (!me)
            memcpy(text + off, w, off + sizeof w <= sizeof text ? sizeof w : sizeof text - off);
    }
    if (me) {
        if (err && local_err) *err = *local_err;
        if (err) err->code = (int32_t)local;
        return local;
    }
    text[len] = '\0';
    moeq_status status =
        code > 0 && code < MOEQ_STATUS_COUNT_ ? (moeq_status)code : MOEQ_STATUS_INTERNAL;
    return moeq__error(err, status, "%s: expert parallelism, %s: rank %d of %d failed: %s",
                       ep_name(ep), phase, (int)failed, (int)ep->size, text);
}

/* ---- create, load, destroy -------------------------------------------------------------- */

static moeq_status check_comm(const moeq_ep_comm *c, moeq_error *err) {
    if (!c) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "comm is NULL");
    if (c->size < 1 || c->rank < 0 || c->rank >= c->size) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "comm has rank %d of size %d; need size >= 1 and 0 <= rank < size",
                           (int)c->rank, (int)c->size);
    }
    if (!c->alltoallv || !c->allreduce_i32) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "comm has no %s function",
                           !c->alltoallv ? "alltoallv" : "allreduce_i32");
    }
    return MOEQ_STATUS_OK;
}

void moeq_ep_destroy(moeq_ep *ep) {
    if (!ep) return;
    moeq_moe_destroy(ep->layer);
    moeq__free(ep->name);
    moeq__free(ep->owner);
    moeq__free(ep->owner_loc);
    moeq__free(ep->nloc);
    moeq__free(ep->cnt_off);
    moeq__free(ep->local_ids);
    for (size_t i = 0; i < MOEQ__ARRAY_LEN(ep->buf); i++) moeq__free(ep->buf[i].p);
    moeq__free(ep);
}

/* This rank's part of moeq_ep_create, before the ranks agree. */
static moeq_status create_local(moeq_ep *ep, const moeq_moe_config *cfg, int32_t placement,
                                moeq_error *err) {
    if (!cfg) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "cfg is NULL");
    const char *name = cfg->prefix ? cfg->prefix : "MoE layer";
    if (cfg->expert_map || cfg->first_expert || cfg->num_local_experts) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%s: expert_map, first_expert and num_local_experts must be left "
                           "NULL/0 for expert parallelism (the placement sets them)",
                           name);
    }
    if (cfg->prefix) {
        size_t n = strlen(cfg->prefix) + 1;
        ep->name = moeq__malloc(n);
        if (!ep->name) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory");
        memcpy(ep->name, cfg->prefix, n);
    }
    const int32_t E = cfg->num_experts, size = ep->size;
    int32_t *map = moeq__malloc(sizeof(int32_t) * (size_t)(E > 0 ? E : 1));
    if (!map) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory");
    int32_t nlocal = 0;
    moeq_status st = moeq_ep_placement_map(placement, E, size, ep->rank, map, &nlocal, err);
    if (st != MOEQ_STATUS_OK) {
        moeq__free(map);
        return moeq__error_prefix(err, st, "%s", name);
    }
    ep->E = E;
    ep->H = cfg->hidden_size;
    ep->owner = moeq__malloc(sizeof(int32_t) * (size_t)E);
    ep->owner_loc = moeq__malloc(sizeof(int32_t) * (size_t)E);
    ep->nloc = moeq__calloc((size_t)size, sizeof(int32_t));
    ep->cnt_off = moeq__calloc((size_t)size + 1, sizeof(int32_t));
    ep->local_ids = moeq__malloc(sizeof(int32_t) * (size_t)nlocal);
    if (!ep->owner || !ep->owner_loc || !ep->nloc || !ep->cnt_off || !ep->local_ids) {
        moeq__free(map);
        return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory");
    }
    for (int32_t e = 0; e < E; e++) {
        place(placement, E, size, e, &ep->owner[e], &ep->owner_loc[e]);
        ep->nloc[ep->owner[e]]++;
        if (ep->owner[e] == ep->rank) ep->local_ids[ep->owner_loc[e]] = e;
    }
    for (int32_t r = 0; r < size; r++) ep->cnt_off[r + 1] = ep->cnt_off[r] + ep->nloc[r];
    moeq_moe_config c = *cfg;
    c.expert_map = map;
    c.num_local_experts = nlocal;
    st = moeq_moe_create(&c, &ep->layer, err);
    moeq__free(map);
    if (st != MOEQ_STATUS_OK) return st;
    int32_t kind = 0, group = 0;
    st = moeq__moe_act_kind(ep->layer, &kind, &group, err);
    if (st != MOEQ_STATUS_OK) return st;
    if (kind == MOEQ__ACT_INT8_TENSOR || kind == MOEQ__ACT_FP8_TENSOR) {
        return moeq__error(err, MOEQ_STATUS_UNSUPPORTED,
                           "%s: its input activations take one dynamic per-tensor scale over the "
                           "whole call, which expert parallelism cannot reproduce rank by rank "
                           "(per-token, per-group and static scales can)",
                           name);
    }
    ep->stats.rank = ep->rank;
    ep->stats.size = size;
    ep->stats.placement = placement;
    ep->stats.num_local_experts = nlocal;
    return MOEQ_STATUS_OK;
}

moeq_status moeq_ep_create(const moeq_moe_config *cfg, const moeq_ep_comm *comm, int32_t placement,
                           moeq_ep **out, moeq_error *err) {
    if (out) *out = NULL;
    moeq_status st = check_comm(comm, err);
    if (st != MOEQ_STATUS_OK) return st; /* no comm to agree over */
    moeq_ep *ep = moeq__calloc(1, sizeof *ep);
    moeq_error le;
    moeq_error_clear(&le);
    if (!ep) {
        /* Still take part in the agreement, through a stand-in. */
        moeq_ep tmp;
        memset(&tmp, 0, sizeof tmp);
        tmp.comm = *comm;
        tmp.rank = comm->rank;
        tmp.size = comm->size;
        moeq__error(&le, MOEQ_STATUS_NOMEM, "out of memory creating an expert-parallel layer");
        return agree(&tmp, MOEQ_STATUS_NOMEM, &le, NULL, 0, "create", err);
    }
    ep->comm = *comm;
    ep->rank = comm->rank;
    ep->size = comm->size;
    ep->placement = placement;
    st = !out ? moeq__error(&le, MOEQ_STATUS_INVALID_ARG, "out is NULL")
              : create_local(ep, cfg, placement, &le);
    st = agree(ep, st, &le, NULL, 0, "create", err);
    if (st != MOEQ_STATUS_OK) {
        moeq_ep_destroy(ep);
        return st;
    }
    *out = ep;
    return MOEQ_STATUS_OK;
}

moeq_moe *moeq_ep_layer(moeq_ep *ep) {
    return ep ? ep->layer : NULL;
}

/* Parameter bytes of this rank's experts (before finalize releases them). */
static uint64_t param_bytes(const moeq_moe *l) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < moeq_moe_param_count(l); i++) {
        moeq_param p;
        if (moeq_moe_param(l, i, &p) == MOEQ_STATUS_OK) n += p.nbytes;
    }
    return n;
}

moeq_status moeq_ep_load_checkpoint(moeq_ep *ep, const moeq_checkpoint *ckpt, const char *prefix,
                                    moeq_progress_fn progress, void *user_data, moeq_error *err) {
    if (!ep) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "ep is NULL");
    moeq_error le;
    moeq_error_clear(&le);
    uint64_t loaded = 0, skipped = 0;
    moeq_status st = moeq_moe_load_checkpoint(ep->layer, ckpt, prefix, progress, user_data, &loaded,
                                              &skipped, &le);
    ep->stats.tensors_loaded = loaded;
    ep->stats.tensors_skipped = skipped;
    if (st == MOEQ_STATUS_OK) {
        ep->stats.bytes_loaded = param_bytes(ep->layer);
        st = moeq_moe_finalize(ep->layer, &le);
    }
    return agree(ep, st, &le, NULL, 0, "load", err);
}

moeq_status moeq_ep_finalize(moeq_ep *ep, moeq_error *err) {
    if (!ep) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "ep is NULL");
    moeq_error le;
    moeq_error_clear(&le);
    if (!ep->layer->finalized) ep->stats.bytes_loaded = param_bytes(ep->layer);
    moeq_status st = moeq_moe_finalize(ep->layer, &le);
    return agree(ep, st, &le, NULL, 0, "finalize", err);
}

moeq_status moeq_ep_agree(moeq_ep *ep, moeq_status local, moeq_error *err) {
    if (!ep) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "ep is NULL");
    moeq_error le;
    moeq_error_clear(&le);
    if (local != MOEQ_STATUS_OK) {
        if (err && err->code == (int32_t)local) {
            le = *err; /* the host's own message */
        } else {
            moeq__error(&le, local, "%s", moeq_status_str((int32_t)local));
        }
    }
    return agree(ep, local, &le, NULL, 0, "host step", err);
}

/* ---- apply ---------------------------------------------------------------------------- */

static bool io_dtype(int32_t d) {
    return d == MOEQ_DTYPE_F32 || d == MOEQ_DTYPE_BF16 || d == MOEQ_DTYPE_F16;
}

/* Phase 1's local part: arguments, and the counts sent to each destination
 * rank r (at cnt_off[r] + r): pairs per local expert there (nloc[r] ints),
 * then the tokens that have a pair there (1 int). */
static moeq_status route_local(moeq_ep *ep, moeq_ctx *ctx, int32_t x_dtype, const void *x,
                               int64_t tokens, int32_t top_k, const int32_t *ids,
                               const float *weights, int32_t out_dtype, const void *out,
                               moeq_error *err) {
    const char *name = ep_name(ep);
    const moeq_moe *l = ep->layer;
    if (!ctx) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: ctx is NULL", name);
    if (!l->finalized) {
        return moeq__error(err, MOEQ_STATUS_STATE,
                           "%s: not finalized; call moeq_ep_load_checkpoint or moeq_ep_finalize "
                           "first",
                           name);
    }
    if (!io_dtype(x_dtype) || !io_dtype(out_dtype)) {
        return moeq__error(err, MOEQ_STATUS_DTYPE,
                           "%s: x dtype %s / out dtype %s; each must be F32, BF16 or F16", name,
                           moeq_dtype_name(x_dtype), moeq_dtype_name(out_dtype));
    }
    if (tokens < 0 || top_k < 1 || top_k > ep->E || tokens * (int64_t)top_k > INT32_MAX) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%s: tokens %lld, top_k %d; need tokens >= 0, 1 <= top_k <= "
                           "num_experts (%d) and tokens x top_k <= %d",
                           name, (long long)tokens, (int)top_k, (int)ep->E, INT32_MAX);
    }
    if (l->cfg.apply_router_weight_on_input && top_k != 1) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%s: apply_router_weight_on_input needs top_k == 1, got %d", name,
                           (int)top_k);
    }
    if (tokens > 0 && (!x || !ids || !weights || !out)) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: %s is NULL", name,
                           !x         ? "x"
                           : !ids     ? "topk_ids"
                           : !weights ? "topk_weights"
                                      : "out");
    }
    const size_t pairs = (size_t)tokens * (size_t)top_k, S = (size_t)ep->size;
    int32_t *cnt = grow(ep, B_CNT_SEND, sizeof(int32_t) * ((size_t)ep->E + S));
    int32_t *pos = grow(ep, B_POS, sizeof(int32_t) * pairs);
    int64_t *seen = grow(ep, B_SEEN, sizeof(int64_t) * S);
    if (!cnt || !pos || !seen)
        return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory", name);
    memset(cnt, 0, sizeof(int32_t) * ((size_t)ep->E + S));
    for (size_t r = 0; r < S; r++) seen[r] = -1;
    for (size_t p = 0; p < pairs; p++) {
        int32_t id = ids[p];
        if (id < -1 || id >= ep->E) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "%s: topk_ids[%zu] (token %zu) is %d; must be -1..%d", name, p,
                               p / (size_t)top_k, (int)id, (int)ep->E - 1);
        }
        if (id >= 0 && !isfinite(weights[p])) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "%s: topk_weights[%zu] (token %zu) is not finite", name, p,
                               p / (size_t)top_k);
        }
        if (id < 0) continue;
        const int32_t r = ep->owner[id];
        const int32_t *off = ep->cnt_off;
        cnt[off[r] + r + ep->owner_loc[id]]++;
        if (seen[r] != (int64_t)(p / (size_t)top_k)) { /* the token's first pair for r */
            seen[r] = (int64_t)(p / (size_t)top_k);
            cnt[off[r] + r + ep->nloc[r]]++;
        }
    }
    return MOEQ_STATUS_OK;
}

/* Per-rank figures of one call: pairs and tokens to and from each rank. */
typedef struct ep_counts {
    int64_t *P, *Tk; /* [S]: pairs, tokens sent to rank r */
    int64_t *R, *Rt; /* [S]: pairs, tokens received from rank r */
} ep_counts;

static moeq_status apply_impl(moeq_ep *ep, moeq_ctx *ctx, moeq_status pre, moeq_error *pre_err,
                              int32_t x_dtype, const void *x, int64_t tokens, int32_t top_k,
                              const int32_t *ids, const float *weights, int32_t out_dtype,
                              void *out, moeq_error *err) {
    const int32_t S = ep->size, me = ep->rank;
    const size_t H = (size_t)ep->H;
    moeq_error le;
    moeq_error_clear(&le);
    if (pre != MOEQ_STATUS_OK && pre_err) le = *pre_err;
    double t0 = now_s(), comm0 = ep->stats.comm_s;
    int64_t *heap = NULL;

    /* 1. route: counts per (destination, local expert) and tokens per destination */
    moeq_status st = pre != MOEQ_STATUS_OK ? pre
                                           : route_local(ep, ctx, x_dtype, x, tokens, top_k, ids,
                                                         weights, out_dtype, out, &le);
    int64_t *a = grow(ep, B_A2A, sizeof(int64_t) * 4 * (size_t)S);
    const int32_t nl = ep->nloc[me], nc = nl + 1; /* ints from each source */
    int32_t *cnt_recv = grow(ep, B_CNT_RECV, sizeof(int32_t) * (size_t)S * (size_t)nc);
    heap = moeq__calloc(4 * (size_t)S, sizeof(int64_t));
    if (st == MOEQ_STATUS_OK && (!a || !cnt_recv || !heap)) {
        st = moeq__error(&le, MOEQ_STATUS_NOMEM, "%s: out of memory", ep_name(ep));
    }
    /* x dtype (equal everywhere: max == -max of the negation), the largest top_k */
    int32_t v1[3] = {st == MOEQ_STATUS_OK ? x_dtype : 0, st == MOEQ_STATUS_OK ? -x_dtype : 0,
                     st == MOEQ_STATUS_OK ? top_k : 1};
    st = agree(ep, st, &le, v1, 3, "routing", err);
    if (st != MOEQ_STATUS_OK) goto out;
    if (v1[0] != -v1[1]) {
        st = moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                         "%s: expert parallelism: the ranks pass x in different dtypes (%s and "
                         "%s); every rank must pass the same",
                         ep_name(ep), moeq_dtype_name(-v1[1]), moeq_dtype_name(v1[0]));
        goto out;
    }
    const int32_t kmax = v1[2]; /* slots per token sent */
    int32_t *cnt = ep->buf[B_CNT_SEND].p;
    for (int32_t r = 0; r < S; r++) {
        a[r] = (int64_t)(ep->nloc[r] + 1) * 4;        /* send counts */
        a[S + r] = (int64_t)(ep->cnt_off[r] + r) * 4; /* send displacements */
        a[2 * S + r] = (int64_t)nc * 4;               /* receive counts */
        a[3 * S + r] = (int64_t)r * (int64_t)nc * 4;  /* receive displacements */
    }
    st = c_alltoallv(ep, cnt, cnt_recv, a, "the counts", err);
    if (st != MOEQ_STATUS_OK) goto out;

    /* 2. dispatch: each token's row once per destination, with kmax (id,
     * weight) slots holding its pairs there in k order, then (-1, 0) */
    const size_t xsz = moeq_dtype_size(x_dtype), rowb = H * xsz;
    const size_t metab = sizeof(ep_meta) * (size_t)kmax;
    ep_counts c = {heap, heap + S, heap + 2 * S, heap + 3 * S};
    int64_t P_all = 0, T_all = 0, R_all = 0, Rt_all = 0;
    for (int32_t r = 0; r < S; r++) {
        c.P[r] = 0;
        for (int32_t j = 0; j < ep->nloc[r]; j++) c.P[r] += cnt[ep->cnt_off[r] + r + j];
        c.Tk[r] = cnt[ep->cnt_off[r] + r + ep->nloc[r]];
        const int32_t *from = cnt_recv + (size_t)r * (size_t)nc;
        c.R[r] = 0;
        for (int32_t j = 0; j < nl; j++) c.R[r] += from[j];
        c.Rt[r] = from[nl];
        P_all += c.P[r];
        T_all += c.Tk[r];
        R_all += c.R[r];
        Rt_all += c.Rt[r];
    }
    if (R_all > INT32_MAX || Rt_all * kmax > INT32_MAX) {
        st = moeq__error(&le, MOEQ_STATUS_LIMIT,
                         "%s: rank %d would take %lld tokens (%lld pairs) in one call; at most "
                         "%d slots; split the batch",
                         ep_name(ep), (int)me, (long long)Rt_all, (long long)R_all, INT32_MAX);
    }
    ep_meta *smeta = NULL, *rmeta = NULL;
    uint8_t *srows = NULL, *rrows = NULL;
    if (st == MOEQ_STATUS_OK) {
        smeta = grow(ep, B_SEND_META, metab * (size_t)T_all);
        srows = grow(ep, B_SEND_ROWS, rowb * (size_t)T_all);
        rmeta = grow(ep, B_RECV_META, metab * (size_t)Rt_all);
        rrows = grow(ep, B_RECV_ROWS, rowb * (size_t)Rt_all);
        size_t slots = (size_t)Rt_all * (size_t)kmax;
        bool ok = grow(ep, B_IDS, sizeof(int32_t) * slots) &&
                  grow(ep, B_WTS, sizeof(float) * slots) &&
                  grow(ep, B_PAIR_OUT, sizeof(int32_t) * slots) &&
                  grow(ep, B_Y, sizeof(float) * H * (size_t)R_all) &&
                  grow(ep, B_BACK, sizeof(float) * H * (size_t)P_all) &&
                  grow(ep, B_ACC, acc_bytes(H) + sizeof(float *) * (size_t)top_k) &&
                  grow(ep, B_FILL, sizeof(int64_t) * 2 * (size_t)S);
        if (!smeta || !srows || !rmeta || !rrows || !ok) {
            st = moeq__error(&le, MOEQ_STATUS_NOMEM,
                             "%s: out of memory for %lld tokens sent and %lld received",
                             ep_name(ep), (long long)T_all, (long long)Rt_all);
        }
    }
    if (st == MOEQ_STATUS_OK) {
        /* Slots: destinations in rank order, tokens in order; a pair's place in
         * the outputs coming back: its destination's pairs in (token, k) order. */
        int64_t *tfill = ep->buf[B_FILL].p, *pfill = tfill + S;
        int64_t *seen = ep->buf[B_SEEN].p; /* the token's slot for rank r, or -1 */
        int64_t toff = 0, poff = 0;
        for (int32_t r = 0; r < S; r++) {
            tfill[r] = toff;
            pfill[r] = poff;
            toff += c.Tk[r];
            poff += c.P[r];
        }
        int32_t *pos = ep->buf[B_POS].p;
        for (int64_t t = 0; t < tokens; t++) {
            for (int32_t r = 0; r < S; r++) seen[r] = -1;
            for (int32_t j = 0; j < top_k; j++) {
                const size_t p = (size_t)t * (size_t)top_k + (size_t)j;
                const int32_t id = ids[p];
                if (id < 0) {
                    pos[p] = -1;
                    continue;
                }
                const int32_t r = ep->owner[id];
                if (seen[r] < 0) {
                    seen[r] = tfill[r]++;
                    ep_meta *m = smeta + (size_t)seen[r] * (size_t)kmax;
                    for (int32_t q = 0; q < kmax; q++) {
                        m[q].id = -1;
                        m[q].w = 0.0f;
                    }
                    memcpy(srows + (size_t)seen[r] * rowb, (const uint8_t *)x + (size_t)t * rowb,
                           rowb);
                }
                ep_meta *m = smeta + (size_t)seen[r] * (size_t)kmax;
                int32_t q = 0;
                while (m[q].id >= 0) q++; /* at most top_k <= kmax pairs per rank */
                m[q].id = id;
                m[q].w = weights[p];
                pos[p] = (int32_t)pfill[r]++;
            }
        }
    }
    /* The largest buffer an exchange touches on this rank, in KiB: every
     * count and displacement must stay below 2^31 bytes (MPI's int). */
    int64_t most = (T_all > Rt_all ? T_all : Rt_all) * (int64_t)(rowb > metab ? rowb : metab);
    int64_t most_y = (P_all > R_all ? P_all : R_all) * (int64_t)(H * sizeof(float));
    most = most > most_y ? most : most_y;
    int64_t kib = (most + 1023) / 1024;
    int32_t vk[1] = {kib > INT32_MAX ? INT32_MAX : (int32_t)kib};
    st = agree(ep, st, &le, vk, 1, "dispatch", err);
    if (st != MOEQ_STATUS_OK) goto out;
    if ((int64_t)vk[0] * 1024 > INT32_MAX) {
        st = moeq__error(err, MOEQ_STATUS_LIMIT,
                         "%s: expert parallelism: a rank would exchange %lld MiB in one "
                         "alltoallv, over the 2 GiB a call may move; split the batch",
                         ep_name(ep), (long long)vk[0] / 1024);
        goto out;
    }
    {
        int64_t so = 0, ro = 0;
        for (int32_t r = 0; r < S; r++) {
            a[r] = c.Tk[r] * (int64_t)metab;
            a[S + r] = so * (int64_t)metab;
            a[2 * S + r] = c.Rt[r] * (int64_t)metab;
            a[3 * S + r] = ro * (int64_t)metab;
            so += c.Tk[r];
            ro += c.Rt[r];
        }
    }
    st = c_alltoallv(ep, smeta, rmeta, a, "expert ids and weights", err);
    if (st != MOEQ_STATUS_OK) goto out;
    for (int32_t r = 0; r < 4 * S; r++) a[r] = a[r] / (int64_t)metab * (int64_t)rowb;
    st = c_alltoallv(ep, srows, rrows, a, "token rows", err);
    if (st != MOEQ_STATUS_OK) goto out;

    /* 3. the local experts: each received token with its kmax slots; a slot's
     * output row is its place among the slots in use, in order (per source,
     * the order its pairs come back in) */
    int32_t *rid = ep->buf[B_IDS].p, *pair_out = ep->buf[B_PAIR_OUT].p;
    float *rw = ep->buf[B_WTS].p, *Y = ep->buf[B_Y].p;
    {
        const size_t slots = (size_t)Rt_all * (size_t)kmax;
        int32_t next = 0;
        for (size_t q = 0; q < slots; q++) {
            rid[q] = rmeta[q].id;
            rw[q] = rmeta[q].w;
            pair_out[q] = rid[q] < 0 ? -1 : next++;
        }
        st = next == R_all
                 ? MOEQ_STATUS_OK
                 : moeq__error(&le, MOEQ_STATUS_INTERNAL, "%s: %d pairs arrived, %lld announced",
                               ep_name(ep), (int)next, (long long)R_all);
    }
    if (st == MOEQ_STATUS_OK) {
        st = moeq__moe_apply_rows(ep->layer, ctx, x_dtype, rrows, Rt_all, kmax, rid, rw, pair_out,
                                  Y, &le);
    }
    st = agree(ep, st, &le, NULL, 0, "experts", err);
    if (st != MOEQ_STATUS_OK) goto out;
    {
        int64_t so = 0, ro = 0;
        const int64_t yb = (int64_t)(H * sizeof(float));
        for (int32_t r = 0; r < S; r++) {
            a[r] = c.R[r] * yb; /* back to where the pairs came from */
            a[S + r] = ro * yb;
            a[2 * S + r] = c.P[r] * yb;
            a[3 * S + r] = so * yb;
            so += c.P[r];
            ro += c.R[r];
        }
    }
    float *back = ep->buf[B_BACK].p;
    st = c_alltoallv(ep, Y, back, a, "expert outputs", err);
    if (st != MOEQ_STATUS_OK) goto out;

    /* 4. combine, in k order */
    {
        float *acc = ep->buf[B_ACC].p;
        const float **yk = (const float **)(void *)((uint8_t *)acc + acc_bytes(H));
        const int32_t *pos = ep->buf[B_POS].p;
        const size_t osz = moeq_dtype_size(out_dtype);
        for (int64_t t = 0; t < tokens; t++) {
            moeq__to_f32_ref(x_dtype, (const uint8_t *)x + (size_t)t * rowb, H, acc);
            bool bad = false;
            for (size_t h = 0; h < H; h++) bad |= !isfinite(acc[h]);
            for (int32_t j = 0; j < top_k; j++) {
                int32_t s = pos[(size_t)t * (size_t)top_k + (size_t)j];
                yk[j] = s < 0 ? NULL : back + (size_t)s * H;
            }
            moeq__moe_combine_token(ep->layer, ctx, (size_t)top_k,
                                    weights + (size_t)t * (size_t)top_k, yk, bad, acc, out_dtype,
                                    (uint8_t *)out + (size_t)t * H * osz);
        }
    }
    ep->stats.calls++;
    ep->stats.pairs_sent += (uint64_t)P_all;
    ep->stats.pairs_received += (uint64_t)R_all;
    ep->stats.tokens_sent += (uint64_t)T_all;
    ep->stats.tokens_received += (uint64_t)Rt_all;
out:
    moeq__free(heap);
    /* compute: the call's time outside the comm's calls */
    ep->stats.compute_s += (now_s() - t0) - (ep->stats.comm_s - comm0);
    return st;
}

moeq_status moeq_ep_apply(moeq_ep *ep, moeq_ctx *ctx, int32_t x_dtype, const void *x,
                          int64_t tokens, int32_t top_k, const int32_t *topk_ids,
                          const float *topk_weights, int32_t out_dtype, void *out,
                          moeq_error *err) {
    if (!ep) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "ep is NULL");
    return apply_impl(ep, ctx, MOEQ_STATUS_OK, NULL, x_dtype, x, tokens, top_k, topk_ids,
                      topk_weights, out_dtype, out, err);
}

moeq_status moeq_ep_apply_logits(moeq_ep *ep, moeq_ctx *ctx, const moeq_route_config *route,
                                 const float *logits, int32_t x_dtype, const void *x,
                                 int64_t tokens, int32_t out_dtype, void *out, moeq_error *err) {
    if (!ep) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "ep is NULL");
    moeq_error le;
    moeq_error_clear(&le);
    moeq_status st = MOEQ_STATUS_OK;
    int32_t k = route ? route->top_k : 1;
    int32_t *ids = NULL;
    float *w = NULL;
    if (!route) {
        st = moeq__error(&le, MOEQ_STATUS_INVALID_ARG, "%s: route is NULL", ep_name(ep));
    } else if (route->num_experts != ep->E) {
        st = moeq__error(&le, MOEQ_STATUS_INVALID_ARG,
                         "%s: route->num_experts is %d; the layer has %d experts", ep_name(ep),
                         (int)route->num_experts, (int)ep->E);
    } else if (tokens < 0 || k < 1 || k > ep->E || tokens * (int64_t)k > INT32_MAX) {
        st = moeq__error(&le, MOEQ_STATUS_INVALID_ARG,
                         "%s: tokens %lld, top_k %d; need tokens >= 0, 1 <= top_k <= %d",
                         ep_name(ep), (long long)tokens, (int)k, (int)ep->E);
    } else {
        size_t pairs = (size_t)tokens * (size_t)k;
        uint8_t *b = grow(ep, B_ROUTE, pairs * (sizeof(int32_t) + sizeof(float)));
        if (!b) {
            st = moeq__error(&le, MOEQ_STATUS_NOMEM, "%s: out of memory", ep_name(ep));
        } else {
            ids = (int32_t *)(void *)b;
            w = (float *)(void *)(b + pairs * sizeof(int32_t));
            double t0 = now_s();
            st = moeq_route(route, logits, tokens, ids, w, &le);
            ep->stats.compute_s += now_s() - t0;
            if (st != MOEQ_STATUS_OK) moeq__error_prefix(&le, st, "%s: routing", ep_name(ep));
        }
    }
    if (st != MOEQ_STATUS_OK) k = 1;
    return apply_impl(ep, ctx, st, &le, x_dtype, x, tokens, k, ids, w, out_dtype, out, err);
}

moeq_status moeq_ep_get_stats(const moeq_ep *ep, moeq_ep_stats *out, moeq_error *err) {
    if (!ep || !out) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL", !ep ? "ep" : "out");
    }
    *out = ep->stats;
    return MOEQ_STATUS_OK;
}

void moeq_ep_reset_stats(moeq_ep *ep) {
    if (!ep) return;
    ep->stats.calls = ep->stats.pairs_sent = ep->stats.pairs_received = 0;
    ep->stats.bytes_sent = ep->stats.bytes_received = 0;
    ep->stats.compute_s = ep->stats.comm_s = ep->stats.agree_s = ep->stats.exchange_s = 0;
}

int32_t moeq_ep_local_experts(const moeq_ep *ep, int32_t *ids, int32_t n) {
    if (!ep || !ids || n < ep->nloc[ep->rank]) return -1;
    memcpy(ids, ep->local_ids, sizeof(int32_t) * (size_t)ep->nloc[ep->rank]);
    return ep->nloc[ep->rank];
}

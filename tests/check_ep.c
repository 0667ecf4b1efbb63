/*
 * check_ep.c - expert parallelism in one process: ranks are threads talking
 * through ep_threads.h's communicator.  For every scheme, 1 to 4 ranks and
 * both placements, the ranks' outputs are bit-identical to moeq_moe_apply of
 * one layer holding every expert on the ranks' tokens concatenated (uneven
 * splits, ranks with no tokens, bfloat16 and float32 inputs, experts busy
 * enough for the tile kernels on some ranks only).  A rank that fails (a
 * missing tensor, a bad argument) makes every rank return an error, with the
 * failing rank's message, and nobody waits forever.  tests/check_ep_mpi.c
 * runs the same checks across processes under mpirun.
 */
#include "ep_threads.h"
#include "test_moe.h"

#include <math.h>
#include <stdlib.h>

/* ---- one rank's work, run in its own thread ---------------------------------------- */

typedef struct rank_job {
    ep_world *w;
    int32_t rank;
    const moeq_moe_config *mc;
    int32_t placement;
    /* loading: tensors by hand, or a checkpoint */
    const moeq_tensor *tensors;
    size_t n_tensors;
    const moeq_checkpoint *ckpt;
    /* this rank's tokens */
    int32_t x_dtype, out_dtype, top_k;
    const void *x;
    int64_t tokens;
    const int32_t *ids;
    const float *weights;
    const moeq_route_config *route; /* apply_logits instead */
    const float *logits;
    void *out;
    moeq_ctx_options co;
    int32_t applies;       /* calls in a row (the same inputs) */
    int32_t fail_apply_at; /* 1-based call that gets a bad id on this rank; 0: none */
    /* results */
    moeq_status st_create, st_load, st_apply, st_after;
    moeq_error err_create, err_load, err_apply;
    moeq_ep_stats stats;
    int32_t local[64];
    int32_t n_local;
} rank_job;

static void *rank_main(void *arg) {
    rank_job *j = arg;
    moeq_ep_comm comm = ep_world_comm(j->w, j->rank);
    moeq_ep *ep = NULL;
    moeq_error_clear(&j->err_create);
    moeq_error_clear(&j->err_load);
    moeq_error_clear(&j->err_apply);
    j->st_load = j->st_apply = j->st_after = MOEQ_STATUS_INTERNAL;
    j->st_create = moeq_ep_create(j->mc, &comm, j->placement, &ep, &j->err_create);
    if (j->st_create != MOEQ_STATUS_OK) return NULL;
    if (j->ckpt) {
        j->st_load = moeq_ep_load_checkpoint(ep, j->ckpt, NULL, NULL, NULL, &j->err_load);
    } else {
        moeq_status st = MOEQ_STATUS_OK;
        for (size_t i = 0; i < j->n_tensors && st == MOEQ_STATUS_OK; i++) {
            int32_t outcome;
            st = moeq_moe_load(moeq_ep_layer(ep), &j->tensors[i], &outcome, &j->err_load);
        }
        j->st_load = st == MOEQ_STATUS_OK ? moeq_ep_finalize(ep, &j->err_load)
                                          : moeq_ep_agree(ep, st, &j->err_load);
    }
    j->n_local = moeq_ep_local_experts(ep, j->local, 64);
    if (j->st_load == MOEQ_STATUS_OK) {
        moeq_ctx *ctx = NULL;
        moeq_error cerr;
        moeq_status cst = moeq_ctx_create(&j->co, &ctx, &cerr);
        int32_t *bad_ids = NULL;
        for (int32_t c = 1; c <= (j->applies ? j->applies : 1); c++) {
            const int32_t *ids = j->ids;
            if (c == j->fail_apply_at && j->tokens > 0) {
                size_t n = (size_t)j->tokens * (size_t)j->top_k;
                bad_ids = malloc(sizeof(int32_t) * n);
                memcpy(bad_ids, j->ids, sizeof(int32_t) * n);
                bad_ids[n - 1] = 1 << 20;
                ids = bad_ids;
            }
            moeq_error *e = c == 1 || c == j->fail_apply_at ? &j->err_apply : &cerr;
            moeq_status st;
            if (j->route) {
                st = moeq_ep_apply_logits(ep, cst == MOEQ_STATUS_OK ? ctx : NULL, j->route,
                                          j->logits, j->x_dtype, j->x, j->tokens, j->out_dtype,
                                          j->out, e);
            } else {
                st = moeq_ep_apply(ep, cst == MOEQ_STATUS_OK ? ctx : NULL, j->x_dtype, j->x,
                                   j->tokens, j->top_k, ids, j->weights, j->out_dtype, j->out, e);
            }
            if (c == 1 || c == j->fail_apply_at) {
                j->st_apply = st;
            } else {
                j->st_after = st;
            }
        }
        free(bad_ids);
        moeq_ctx_destroy(ctx);
    }
    moeq_ep_get_stats(ep, &j->stats, NULL);
    moeq_ep_destroy(ep);
    return NULL;
}

/* Runs jobs[0..size) in threads and waits for all of them. */
static void run_ranks(ep_world *w, rank_job *jobs, int32_t size) {
    pthread_t th[EP_THREADS_MAX];
    for (int32_t r = 0; r < size; r++) {
        jobs[r].w = w;
        jobs[r].rank = r;
        ck_assert_int_eq(pthread_create(&th[r], NULL, rank_main, &jobs[r]), 0);
    }
    for (int32_t r = 0; r < size; r++) pthread_join(th[r], NULL);
}

/* ---- inputs ------------------------------------------------------------------------ */

typedef struct batch {
    int64_t T;
    int32_t k, H, x_dtype, out_dtype;
    void *x;        /* [T, H] */
    float *xf;      /* [T, H] float values */
    int32_t *ids;   /* [T, k] */
    float *weights; /* [T, k] */
} batch;

/* T tokens routed to k distinct experts of E; every third token's first
 * expert is expert 0 (every token's, with `skew`), so that it gets more rows
 * than the gemv takes while others do not (then only some ranks see a busy
 * expert). */
static batch make_batch_skew(int64_t T, int32_t k, int32_t E, int32_t H, int32_t x_dtype,
                             uint32_t seed, bool skew) {
    batch b = {
        T,    k,    H,    x_dtype, x_dtype == MOEQ_DTYPE_F32 ? MOEQ_DTYPE_F32 : MOEQ_DTYPE_BF16,
        NULL, NULL, NULL, NULL};
    size_t es = moeq_dtype_size(x_dtype);
    b.x = calloc((size_t)T * (size_t)H + 1, es);
    b.xf = calloc((size_t)T * (size_t)H + 1, sizeof(float));
    b.ids = calloc((size_t)T * (size_t)k + 1, sizeof(int32_t));
    b.weights = calloc((size_t)T * (size_t)k + 1, sizeof(float));
    uint32_t r = seed * 747796405u + 1u;
    for (int64_t i = 0; i < T * H; i++) {
        float v = ((float)(moeq_test_rand(&r) % 4001) - 2000.0f) / 1000.0f;
        moeq_test_put_float(x_dtype, v, (uint8_t *)b.x + (size_t)i * es);
        b.xf[i] = v;
    }
    for (int64_t t = 0; t < T; t++) {
        for (int32_t j = 0; j < k; j++) {
            int32_t id;
            bool dup;
            do {
                id = j == 0 && (skew || t % 3 == 0) ? 0
                                                    : (int32_t)(moeq_test_rand(&r) % (uint32_t)E);
                dup = false;
                for (int32_t q = 0; q < j; q++) dup |= b.ids[t * k + q] == id;
            } while (dup);
            b.ids[t * k + j] = id;
            b.weights[t * k + j] = 0.05f + (float)(moeq_test_rand(&r) % 1000) / 1000.0f;
        }
    }
    return b;
}

static batch make_batch(int64_t T, int32_t k, int32_t E, int32_t H, int32_t x_dtype,
                        uint32_t seed) {
    return make_batch_skew(T, k, E, H, x_dtype, seed, false);
}

static void free_batch(batch *b) {
    free(b->x);
    free(b->xf);
    free(b->ids);
    free(b->weights);
}

/* Splits a batch over ranks: rank r gets counts[r] tokens, in order. */
static void split_jobs(const batch *b, const int64_t *counts, int32_t size, void *out,
                       rank_job *jobs) {
    int64_t t0 = 0;
    size_t es = moeq_dtype_size(b->x_dtype), os = moeq_dtype_size(b->out_dtype);
    for (int32_t r = 0; r < size; r++) {
        jobs[r].x_dtype = b->x_dtype;
        jobs[r].out_dtype = b->out_dtype;
        jobs[r].top_k = b->k;
        jobs[r].tokens = counts[r];
        jobs[r].x = (uint8_t *)b->x + (size_t)t0 * (size_t)b->H * es;
        jobs[r].ids = b->ids + t0 * b->k;
        jobs[r].weights = b->weights + t0 * b->k;
        jobs[r].out = (uint8_t *)out + (size_t)t0 * (size_t)b->H * os;
        t0 += counts[r];
    }
    ck_assert_int_eq(t0, b->T);
}

/* The tensors of every expert of tl's layer (moeq_test_layer_load's set). */
typedef struct tensor_list {
    moeq_test_tensor *t;
    moeq_tensor *views;
    size_t n;
} tensor_list;

static tensor_list make_tensors(const moeq_test_layer *tl) {
    tensor_list L = {NULL, NULL, 0};
    size_t cap = 0;
    uint32_t n = moeq_moe_param_count(tl->layer);
    for (uint32_t pi = 0; pi < n; pi++) {
        moeq_param p;
        ck_assert_int_eq(moeq_moe_param(tl->layer, pi, &p), MOEQ_STATUS_OK);
        if (!p.required || p.layout == MOEQ_LAYOUT_DERIVED) continue;
        for (int32_t e = 0; e < tl->E; e++) {
            for (int shard = moeq_test_is_w13(&p) ? 0 : 2; shard < 3; shard++) {
                if (moeq_test_is_w13(&p) && shard == 2) break;
                if (L.n == cap) {
                    cap = cap ? 2 * cap : 64;
                    L.t = realloc(L.t, cap * sizeof *L.t);
                }
                moeq_test_tensor_make(tl, pi, e, shard, &L.t[L.n++]);
            }
        }
    }
    L.views = malloc((L.n + 1) * sizeof *L.views);
    for (size_t i = 0; i < L.n; i++) {
        L.t[i].t.name = L.t[i].name; /* the array moved as it grew */
        L.views[i] = L.t[i].t;
    }
    return L;
}

static void free_tensors(tensor_list *L) {
    for (size_t i = 0; i < L->n; i++) moeq_test_tensor_free(&L->t[i]);
    free(L->t);
    free(L->views);
}

/* The single-process output of tl's layer on the whole batch. */
static void *single_process(const moeq_moe *layer, const batch *b, const moeq_ctx_options *co) {
    moeq_ctx *ctx = NULL;
    moeq_error err;
    ck_assert_ok(moeq_ctx_create(co, &ctx, &err), &err);
    void *out = calloc((size_t)b->T * (size_t)b->H + 1, moeq_dtype_size(b->out_dtype));
    ck_assert_ok(moeq_moe_apply(layer, ctx, b->x_dtype, b->x, b->T, b->k, b->ids, b->weights,
                                b->out_dtype, out, &err),
                 &err);
    moeq_ctx_destroy(ctx);
    return out;
}

/* Token splits over `size` ranks (T tokens): even, uneven, with empty ranks. */
static void split_counts(int64_t T, int32_t size, int variant, int64_t *counts) {
    int64_t left = T;
    for (int32_t r = 0; r < size; r++) {
        int64_t c;
        if (r == size - 1) {
            c = left;
        } else if (variant == 0) {
            c = T / size;
        } else if (variant == 1) {
            c = r == 0 ? 0 : (r == 1 ? 1 : left / 2); /* rank 0 empty, rank 1 one token */
        } else {
            c = r % 2 ? 0 : left - (size - 1 - r); /* most on rank 0, odd ranks empty */
            if (c < 0) c = 0;
        }
        if (c > left) c = left;
        counts[r] = c;
        left -= c;
    }
}

static void assert_same_bytes(const void *a, const void *b, size_t n, const char *what) {
    if (memcmp(a, b, n) == 0) return;
    const uint8_t *x = a, *y = b;
    size_t i = 0;
    while (x[i] == y[i]) i++;
    ck_abort_msg("%s: outputs differ from the single-process layer at byte %zu of %zu", what, i, n);
}

/* One scheme, every rank count 1..4, both placements, two token splits;
 * T = 30 tokens (most experts past the gemv's rows), or with `skew` 12
 * (expert 0 has 12 rows, the others 1 to 4). */
static void check_scheme_bits(const moeq_test_scheme_args *a, int32_t scheme, int32_t x_dtype,
                              const moeq_ctx_options *co, uint32_t seed, bool skew) {
    enum { E = 8, H = 64, I = 32, K = 2 };
    const int64_t T = skew ? 12 : 30;
    moeq_test_layer tl;
    moeq_test_layer_make(&tl, a, E, H, I, 11u + seed);
    ck_assert_int_eq(moeq_moe_scheme(tl.layer), scheme);
    tensor_list tens = make_tensors(&tl);
    batch b = make_batch_skew(T, K, E, H, x_dtype, seed + (uint32_t)scheme, skew);
    void *want = single_process(tl.layer, &b, co);
    size_t out_bytes = (size_t)T * H * moeq_dtype_size(b.out_dtype);
    void *got = malloc(out_bytes);
    for (int32_t size = 1; size <= 4; size++) {
        for (int32_t placement = 0; placement < 2; placement++) {
            for (int variant = 0; variant < (size == 1 ? 1 : 2); variant++) {
                ep_world w;
                ep_world_init(&w, size);
                rank_job jobs[EP_THREADS_MAX];
                memset(jobs, 0, sizeof jobs);
                int64_t counts[EP_THREADS_MAX];
                split_counts(T, size, variant + placement, counts);
                memset(got, 0xA5, out_bytes);
                split_jobs(&b, counts, size, got, jobs);
                for (int32_t r = 0; r < size; r++) {
                    jobs[r].mc = &tl.mc;
                    jobs[r].placement = placement;
                    jobs[r].tensors = tens.views;
                    jobs[r].n_tensors = tens.n;
                    jobs[r].co = *co;
                    jobs[r].applies = 2;
                }
                run_ranks(&w, jobs, size);
                char what[160];
                snprintf(what, sizeof what, "%s, %s x, %d ranks, %s, split %d%s",
                         moeq_scheme_name(scheme), moeq_dtype_name(x_dtype), (int)size,
                         moeq_ep_placement_name(placement), variant + placement,
                         skew ? ", skewed" : "");
                int32_t held = 0;
                for (int32_t r = 0; r < size; r++) {
                    ck_assert_msg(jobs[r].st_create == MOEQ_STATUS_OK, "%s: rank %d create: %s",
                                  what, (int)r, jobs[r].err_create.message);
                    ck_assert_msg(jobs[r].st_load == MOEQ_STATUS_OK, "%s: rank %d load: %s", what,
                                  (int)r, jobs[r].err_load.message);
                    ck_assert_msg(jobs[r].st_apply == MOEQ_STATUS_OK, "%s: rank %d apply: %s", what,
                                  (int)r, jobs[r].err_apply.message);
                    ck_assert_msg(jobs[r].st_after == MOEQ_STATUS_OK, "%s: rank %d 2nd apply", what,
                                  (int)r);
                    ck_assert_int_eq(jobs[r].stats.calls, 2);
                    held += jobs[r].stats.num_local_experts;
                }
                ck_assert_int_eq(held, E);
                /* the second call wrote the same bits over the first */
                assert_same_bytes(got, want, out_bytes, what);
                ep_world_destroy(&w);
            }
        }
    }
    free(got);
    free(want);
    free_batch(&b);
    free_tensors(&tens);
    moeq_test_layer_free(&tl);
}

/* ---- tests --------------------------------------------------------------------------- */

START_TEST(test_placement_map) {
    int32_t map[10], n;
    moeq_error err;
    /* contiguous: 10 over 4 ranks is 3, 3, 2, 2 */
    const int32_t want_n[4] = {3, 3, 2, 2}, want_first[4] = {0, 3, 6, 8};
    for (int32_t r = 0; r < 4; r++) {
        ck_assert_ok(moeq_ep_placement_map(MOEQ_EP_CONTIGUOUS, 10, 4, r, map, &n, &err), &err);
        ck_assert_int_eq(n, want_n[r]);
        for (int32_t e = 0; e < 10; e++) {
            bool mine = e >= want_first[r] && e < want_first[r] + want_n[r];
            ck_assert_int_eq(map[e], mine ? e - want_first[r] : -1);
        }
    }
    /* round-robin: expert e on rank e % 4, local id e / 4 */
    for (int32_t r = 0; r < 4; r++) {
        ck_assert_ok(moeq_ep_placement_map(MOEQ_EP_ROUND_ROBIN, 10, 4, r, map, &n, &err), &err);
        ck_assert_int_eq(n, r < 2 ? 3 : 2);
        for (int32_t e = 0; e < 10; e++) ck_assert_int_eq(map[e], e % 4 == r ? e / 4 : -1);
    }
    ck_assert_status(moeq_ep_placement_map(MOEQ_EP_CONTIGUOUS, 3, 4, 0, map, &n, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "every rank must hold at least one expert"));
    ck_assert_status(moeq_ep_placement_map(7, 10, 4, 0, map, &n, &err), MOEQ_STATUS_INVALID_ARG,
                     &err);
    ck_assert_ptr_nonnull(strstr(err.message, "MOEQ_EP_ROUND_ROBIN"));
    ck_assert_status(moeq_ep_placement_map(MOEQ_EP_CONTIGUOUS, 10, 4, 4, map, &n, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_status(moeq_ep_placement_map(MOEQ_EP_CONTIGUOUS, 10, 4, 0, NULL, &n, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_str_eq(moeq_ep_placement_name(MOEQ_EP_ROUND_ROBIN), "round-robin");
    ck_assert_int_eq(moeq_ep_placement_from_name("contiguous"), MOEQ_EP_CONTIGUOUS);
    ck_assert_int_eq(moeq_ep_placement_from_name("round-robin"), MOEQ_EP_ROUND_ROBIN);
    ck_assert_int_eq(moeq_ep_placement_from_name("striped"), -1);
    ck_assert_ptr_null(moeq_ep_placement_name(2));
}
END_TEST

/* Every scheme, float32 inputs (fast kernels, one thread per rank). */
START_TEST(test_every_scheme_bit_identical_f32) {
    moeq_ctx_options co = {1, 0};
    check_scheme_bits(&k_test_schemes[_i], _i, MOEQ_DTYPE_F32, &co, 1, false);
    check_scheme_bits(&k_test_schemes[_i], _i, MOEQ_DTYPE_F32, &co, 5, true);
}
END_TEST

/* bfloat16 inputs and outputs: on CPUs with AVX512_BF16 weight-only layers
 * then multiply bfloat16 rows. */
START_TEST(test_every_scheme_bit_identical_bf16) {
    moeq_ctx_options co = {1, 0};
    check_scheme_bits(&k_test_schemes[_i], _i, MOEQ_DTYPE_BF16, &co, 2, false);
    check_scheme_bits(&k_test_schemes[_i], _i, MOEQ_DTYPE_BF16, &co, 6, true);
}
END_TEST

/* Two threads per rank, and the reference forward (force_ref), for a few
 * schemes: each path's combine is reproduced with its own arithmetic. */
START_TEST(test_threads_and_reference_paths) {
    const int32_t schemes[] = {MOEQ_SCHEME_WNA16, MOEQ_SCHEME_W8A8_FP8, MOEQ_SCHEME_W4A4_NVFP4,
                               MOEQ_SCHEME_W8A8_INT8};
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        moeq_ctx_options threads2 = {2, 0}, ref = {1, 1};
        check_scheme_bits(&k_test_schemes[schemes[i]], schemes[i], MOEQ_DTYPE_BF16, &threads2, 3,
                          false);
        check_scheme_bits(&k_test_schemes[schemes[i]], schemes[i], MOEQ_DTYPE_F32, &ref, 4, true);
    }
}
END_TEST

/* ---- a synthetic checkpoint ----------------------------------------------------------- */

typedef struct synth_model {
    char dir[64];
    moeq_synth_layout L;
    moeq_config *cfg;
    moeq_checkpoint *ckpt;
    moeq_resolution res;
    moeq_selection sel;
    moeq_moe_config mc;
    moeq_moe *full; /* every expert, for the single-process output */
    uint64_t full_bytes, n_tensors;
} synth_model;

#define PREFIX "model.layers.0.mlp.experts"

static void synth_model_make(synth_model *m, const char *preset, int32_t E) {
    memset(m, 0, sizeof *m);
    moeq_error err;
    ck_assert_ok(moeq_synth_preset(preset, &m->L, &err), &err);
    m->L.num_layers = 1;
    m->L.first_dense_layers = 0;
    m->L.num_experts = E;
    m->L.top_k = 3;
    m->L.hidden_size = 128;
    m->L.moe_intermediate_size = 128;
    m->L.num_attention_heads = 0;
    m->L.n_shared_experts = 0;
    m->L.n_group = m->L.topk_group = 0;
    moeq_test_mkdtemp(m->dir, sizeof m->dir, "moeq_ep");
    ck_assert_ok(moeq_synth_write(&m->L, m->dir, &err), &err);
    ck_assert_ok(moeq_config_load(m->dir, NULL, &m->cfg, &err), &err);
    ck_assert_ok(moeq_checkpoint_open(m->dir, &m->ckpt, &err), &err);
    ck_assert_ok(moeq_resolve_moe(m->cfg, PREFIX, (uint32_t)E, NULL, NULL, &m->res, &err), &err);
    ck_assert_ok(moeq_select(&m->res, PREFIX, NULL, &m->sel, &err), &err);
    ck_assert_ok(moeq_moe_config_init(&m->mc, m->cfg, &m->res, &m->sel, &err), &err);
    m->mc.prefix = PREFIX;
    m->mc.num_experts = E;
    m->mc.hidden_size = m->L.hidden_size;
    m->mc.intermediate_size = m->L.moe_intermediate_size;
    m->mc.routed_scaling_factor = m->L.routed_scaling_factor;
    ck_assert_ok(moeq_moe_create(&m->mc, &m->full, &err), &err);
    for (uint32_t i = 0; i < moeq_moe_param_count(m->full); i++) {
        moeq_param p;
        moeq_moe_param(m->full, i, &p);
        m->full_bytes += p.nbytes;
    }
    ck_assert_ok(
        moeq_moe_load_checkpoint(m->full, m->ckpt, NULL, NULL, NULL, &m->n_tensors, NULL, &err),
        &err);
    ck_assert_ok(moeq_moe_finalize(m->full, &err), &err);
}

static void synth_model_free(synth_model *m) {
    moeq_moe_destroy(m->full);
    moeq_checkpoint_close(m->ckpt);
    moeq_config_destroy(m->cfg);
    moeq_test_rmtree(m->dir);
}

/* Loading from a checkpoint: each rank loads only its experts' tensors
 * (the counts and parameter bytes add up to the whole layer's), and routing
 * from logits on each rank gives the single-process bits. */
START_TEST(test_checkpoint_each_rank_loads_its_experts) {
    enum { E = 12, T = 40 };
    synth_model m;
    synth_model_make(&m, "wna16-int4-g128", E);
    const int32_t H = m.L.hidden_size, K = m.L.top_k;
    moeq_route_config route;
    memset(&route, 0, sizeof route);
    route.num_experts = E;
    route.top_k = K;
    route.renormalize = 1;
    route.routed_scaling_factor = 1.0f;
    batch b = make_batch(T, K, E, H, MOEQ_DTYPE_BF16, 9);
    float *logits = malloc(sizeof(float) * T * E);
    uint32_t r = 77u;
    for (int i = 0; i < T * E; i++) logits[i] = (float)(moeq_test_rand(&r) % 2000) / 400.0f;
    moeq_error err;
    ck_assert_ok(moeq_route(&route, logits, T, b.ids, b.weights, &err), &err);
    moeq_ctx_options co = {1, 0};
    void *want = single_process(m.full, &b, &co);
    size_t out_bytes = (size_t)T * (size_t)H * 2;
    void *got = malloc(out_bytes);
    for (int32_t size = 1; size <= 4; size++) {
        for (int32_t placement = 0; placement < 2; placement++) {
            ep_world w;
            ep_world_init(&w, size);
            rank_job jobs[EP_THREADS_MAX];
            memset(jobs, 0, sizeof jobs);
            int64_t counts[EP_THREADS_MAX];
            split_counts(T, size, placement, counts);
            split_jobs(&b, counts, size, got, jobs);
            int64_t t0 = 0;
            for (int32_t q = 0; q < size; q++) {
                jobs[q].mc = &m.mc;
                jobs[q].placement = placement;
                jobs[q].ckpt = m.ckpt;
                jobs[q].co = co;
                jobs[q].route = &route;
                jobs[q].logits = logits + t0 * E;
                t0 += counts[q];
            }
            memset(got, 0, out_bytes);
            run_ranks(&w, jobs, size);
            uint64_t loaded = 0, bytes = 0;
            bool seen[E] = {false};
            for (int32_t q = 0; q < size; q++) {
                ck_assert_msg(jobs[q].st_load == MOEQ_STATUS_OK, "rank %d: %s", (int)q,
                              jobs[q].err_load.message);
                ck_assert_msg(jobs[q].st_apply == MOEQ_STATUS_OK, "rank %d: %s", (int)q,
                              jobs[q].err_apply.message);
                const moeq_ep_stats *s = &jobs[q].stats;
                ck_assert_int_eq(s->rank, q);
                ck_assert_int_eq(s->size, size);
                ck_assert_int_eq(s->num_local_experts, jobs[q].n_local);
                /* only its experts: 1/size of the tensors, give or take one expert's */
                ck_assert_uint_eq(s->tensors_loaded * (uint64_t)E,
                                  m.n_tensors * (uint64_t)jobs[q].n_local);
                ck_assert_uint_eq(s->tensors_loaded + s->tensors_skipped, m.n_tensors);
                ck_assert_uint_eq(s->bytes_loaded * (uint64_t)E,
                                  m.full_bytes * (uint64_t)jobs[q].n_local);
                loaded += s->tensors_loaded;
                bytes += s->bytes_loaded;
                for (int32_t i = 0; i < jobs[q].n_local; i++) {
                    int32_t e = jobs[q].local[i];
                    ck_assert(e >= 0 && e < E && !seen[e]);
                    seen[e] = true;
                    if (placement == MOEQ_EP_ROUND_ROBIN) ck_assert_int_eq(e % size, q);
                }
                ck_assert_uint_eq(s->pairs_sent, (uint64_t)counts[q] * (uint64_t)K);
                /* a token's row goes once to each rank that holds one of its experts */
                ck_assert_uint_le(s->tokens_sent, s->pairs_sent);
                ck_assert_uint_ge(s->tokens_sent, (uint64_t)counts[q]);
                if (size == 1) ck_assert_uint_eq(s->tokens_sent, (uint64_t)counts[q]);
                if (size == 1) ck_assert_uint_eq(s->bytes_sent, 0);
            }
            ck_assert_uint_eq(loaded, m.n_tensors);
            ck_assert_uint_eq(bytes, m.full_bytes);
            char what[96];
            snprintf(what, sizeof what, "checkpoint, %d ranks, %s", (int)size,
                     moeq_ep_placement_name(placement));
            assert_same_bytes(got, want, out_bytes, what);
            ep_world_destroy(&w);
        }
    }
    free(got);
    free(want);
    free(logits);
    free_batch(&b);
    synth_model_free(&m);
}
END_TEST

/* The rank that holds expert e under the placement. */
static int owner_of(int32_t e, int32_t E, int32_t placement, int32_t size) {
    int32_t map[64], n;
    for (int32_t r = 0; r < size; r++) {
        ck_assert_int_eq(moeq_ep_placement_map(placement, E, size, r, map, &n, NULL), 0);
        if (map[e] >= 0) return r;
    }
    return -1;
}

/* A checkpoint that lacks one tensor of expert 5: the rank holding it fails
 * to load, and every rank returns CHECKPOINT (the others with that rank's
 * message), none waiting for the others. */
START_TEST(test_rank_that_fails_to_load_fails_everyone) {
    enum { E = 8 };
    synth_model m;
    synth_model_make(&m, "wna16-int4-g128", E);
    /* the broken copy: every tensor but one, plus the same config.json */
    const char *victim = PREFIX ".5.down_proj.weight_scale";
    uint64_t n = moeq_checkpoint_tensor_count(m.ckpt);
    moeq_tensor *keep = malloc(sizeof *keep * (size_t)n);
    size_t kept = 0;
    for (uint64_t i = 0; i < n; i++) {
        moeq_tensor t;
        moeq_checkpoint_tensor(m.ckpt, i, &t);
        if (strcmp(t.name, victim) != 0) keep[kept++] = t;
    }
    ck_assert_uint_eq(kept + 1, n);
    char dir[64], path[128];
    moeq_test_mkdtemp(dir, sizeof dir, "moeq_ep_broken");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    moeq_error err;
    ck_assert_ok(moeq_safetensors_write(path, keep, (uint32_t)kept, NULL, &err), &err);
    free(keep);
    size_t len;
    char cpath[128];
    snprintf(cpath, sizeof cpath, "%s/config.json", m.dir);
    unsigned char *cfg_text = moeq_test_read_file(cpath, &len);
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    moeq_test_write_file(cpath, cfg_text, len);
    free(cfg_text);
    moeq_checkpoint *broken = NULL;
    ck_assert_ok(moeq_checkpoint_open(dir, &broken, &err), &err);
    for (int32_t size = 2; size <= 4; size += 2) {
        for (int32_t placement = 0; placement < 2; placement++) {
            int32_t owner = owner_of(5, E, placement, size);
            ep_world w;
            ep_world_init(&w, size);
            rank_job jobs[EP_THREADS_MAX];
            memset(jobs, 0, sizeof jobs);
            for (int32_t q = 0; q < size; q++) {
                jobs[q].mc = &m.mc;
                jobs[q].placement = placement;
                jobs[q].ckpt = broken;
            }
            run_ranks(&w, jobs, size);
            ck_assert(!w.broken); /* nobody timed out waiting */
            for (int32_t q = 0; q < size; q++) {
                ck_assert_int_eq(jobs[q].st_create, MOEQ_STATUS_OK);
                ck_assert_msg(jobs[q].st_load == MOEQ_STATUS_CHECKPOINT, "rank %d: %s: %s", (int)q,
                              moeq_status_name(jobs[q].st_load), jobs[q].err_load.message);
                ck_assert_int_eq(jobs[q].err_load.code, MOEQ_STATUS_CHECKPOINT);
                ck_assert_ptr_nonnull(strstr(jobs[q].err_load.message, victim));
                if (q != owner) {
                    char want[64];
                    snprintf(want, sizeof want, "rank %d of %d failed", (int)owner, (int)size);
                    ck_assert_msg(strstr(jobs[q].err_load.message, want) != NULL, "rank %d: %s",
                                  (int)q, jobs[q].err_load.message);
                }
                ck_assert_int_eq(jobs[q].st_apply, MOEQ_STATUS_INTERNAL); /* never ran */
            }
            ep_world_destroy(&w);
        }
    }
    moeq_checkpoint_close(broken);
    moeq_test_rmtree(dir);
    synth_model_free(&m);
}
END_TEST

/* A bad argument on one rank (an expert id out of range) fails the call on
 * every rank; the next call runs and gives the single-process bits. */
START_TEST(test_bad_argument_on_one_rank_fails_everyone) {
    enum { E = 8, H = 64, I = 32, T = 20, K = 2, SIZE = 3 };
    moeq_test_layer tl;
    moeq_test_layer_make(&tl, &k_test_schemes[MOEQ_SCHEME_WNA16], E, H, I, 5);
    tensor_list tens = make_tensors(&tl);
    batch b = make_batch(T, K, E, H, MOEQ_DTYPE_F32, 21);
    moeq_ctx_options co = {1, 0};
    void *want = single_process(tl.layer, &b, &co);
    void *got = calloc((size_t)T * H, sizeof(float));
    ep_world w;
    ep_world_init(&w, SIZE);
    rank_job jobs[EP_THREADS_MAX];
    memset(jobs, 0, sizeof jobs);
    int64_t counts[SIZE] = {7, 6, 7};
    split_jobs(&b, counts, SIZE, got, jobs);
    for (int32_t q = 0; q < SIZE; q++) {
        jobs[q].mc = &tl.mc;
        jobs[q].placement = MOEQ_EP_ROUND_ROBIN;
        jobs[q].tensors = tens.views;
        jobs[q].n_tensors = tens.n;
        jobs[q].co = co;
        jobs[q].applies = 2;
        jobs[q].fail_apply_at = q == 1 ? 1 : 0;
    }
    /* rank 1's first call has a bad id; every rank makes two calls */
    run_ranks(&w, jobs, SIZE);
    ck_assert(!w.broken);
    for (int32_t q = 0; q < SIZE; q++) {
        ck_assert_int_eq(jobs[q].st_load, MOEQ_STATUS_OK);
        ck_assert_msg(jobs[q].st_apply == MOEQ_STATUS_INVALID_ARG, "rank %d: %s", (int)q,
                      jobs[q].err_apply.message);
        ck_assert_ptr_nonnull(strstr(jobs[q].err_apply.message, "topk_ids["));
        if (q != 1) ck_assert_ptr_nonnull(strstr(jobs[q].err_apply.message, "rank 1 of 3 failed"));
        ck_assert_int_eq(jobs[q].st_after, MOEQ_STATUS_OK);
        ck_assert_int_eq(jobs[q].stats.calls, 1);
    }
    assert_same_bytes(got, want, (size_t)T * H * sizeof(float), "after a failed call");
    /* every rank made the same number of collectives */
    for (int32_t q = 1; q < SIZE; q++) ck_assert_uint_eq(w.calls[q], w.calls[0]);
    ep_world_destroy(&w);

    /* ranks passing x in different dtypes: refused everywhere */
    ep_world_init(&w, 2);
    memset(jobs, 0, sizeof jobs);
    int64_t c2[2] = {10, 10};
    split_jobs(&b, c2, 2, got, jobs);
    uint16_t *xb = calloc((size_t)10 * H, 2);
    for (int32_t q = 0; q < 2; q++) {
        jobs[q].mc = &tl.mc;
        jobs[q].tensors = tens.views;
        jobs[q].n_tensors = tens.n;
        jobs[q].co = co;
    }
    jobs[1].x_dtype = MOEQ_DTYPE_BF16;
    jobs[1].x = xb;
    run_ranks(&w, jobs, 2);
    for (int32_t q = 0; q < 2; q++) {
        ck_assert_int_eq(jobs[q].st_apply, MOEQ_STATUS_INVALID_ARG);
        ck_assert_ptr_nonnull(strstr(jobs[q].err_apply.message, "different dtypes"));
    }
    free(xb);
    ep_world_destroy(&w);
    free(got);
    free(want);
    free_batch(&b);
    free_tensors(&tens);
    moeq_test_layer_free(&tl);
}
END_TEST

/* A host's own loading step failing on one rank (a tensor of the wrong
 * shape: moeq_ep_agree stands in for moeq_ep_finalize there), and routing
 * failing on one rank (a NaN logit in moeq_ep_apply_logits): every rank
 * returns that rank's status, with its message. */
START_TEST(test_host_step_and_routing_failures) {
    enum { E = 8, H = 64, I = 32, T = 12, K = 2, SIZE = 2 };
    moeq_test_layer tl;
    moeq_test_layer_make(&tl, &k_test_schemes[MOEQ_SCHEME_WNA16], E, H, I, 8);
    tensor_list tens = make_tensors(&tl);
    /* rank 1's copy of the list: one of its tensors one row short */
    moeq_tensor *bad = malloc(sizeof *bad * tens.n);
    memcpy(bad, tens.views, sizeof *bad * tens.n);
    size_t victim = tens.n;
    for (size_t i = 0; i < tens.n; i++) {
        if (strstr(bad[i].name, ".7.down_proj.") && bad[i].ndim == 2 && bad[i].shape[0] > 1) {
            victim = i;
            break;
        }
    }
    ck_assert_uint_lt(victim, tens.n);
    bad[victim].shape[0]--;
    bad[victim].nbytes -= bad[victim].nbytes / (uint64_t)(bad[victim].shape[0] + 1);
    moeq_ctx_options co = {1, 0};
    batch b = make_batch(T, K, E, H, MOEQ_DTYPE_F32, 31);
    void *got = calloc((size_t)T * H, sizeof(float));
    ep_world w;
    ep_world_init(&w, SIZE);
    rank_job jobs[EP_THREADS_MAX];
    memset(jobs, 0, sizeof jobs);
    int64_t counts[SIZE] = {6, 6};
    split_jobs(&b, counts, SIZE, got, jobs);
    for (int32_t q = 0; q < SIZE; q++) {
        jobs[q].mc = &tl.mc;
        jobs[q].tensors = q == 1 ? bad : tens.views;
        jobs[q].n_tensors = tens.n;
        jobs[q].co = co;
    }
    run_ranks(&w, jobs, SIZE);
    ck_assert(!w.broken);
    for (int32_t q = 0; q < SIZE; q++) {
        ck_assert_msg(jobs[q].st_load == MOEQ_STATUS_SHAPE, "rank %d: %s", (int)q,
                      jobs[q].err_load.message);
        ck_assert_ptr_nonnull(strstr(jobs[q].err_load.message, ".7.down_proj."));
    }
    ck_assert_ptr_nonnull(strstr(jobs[0].err_load.message, "rank 1 of 2 failed"));
    ep_world_destroy(&w);

    /* routing from logits, one NaN on rank 0 */
    moeq_route_config route;
    memset(&route, 0, sizeof route);
    route.num_experts = E;
    route.top_k = K;
    route.renormalize = 1;
    float *logits = malloc(sizeof(float) * T * E);
    for (int i = 0; i < T * E; i++) logits[i] = (float)(i % 7) * 0.25f;
    logits[3 * E + 2] = NAN;
    ep_world_init(&w, SIZE);
    memset(jobs, 0, sizeof jobs);
    split_jobs(&b, counts, SIZE, got, jobs);
    for (int32_t q = 0; q < SIZE; q++) {
        jobs[q].mc = &tl.mc;
        jobs[q].tensors = tens.views;
        jobs[q].n_tensors = tens.n;
        jobs[q].co = co;
        jobs[q].route = &route;
        jobs[q].logits = logits + (size_t)q * 6 * E;
    }
    run_ranks(&w, jobs, SIZE);
    ck_assert(!w.broken);
    for (int32_t q = 0; q < SIZE; q++) {
        ck_assert_int_eq(jobs[q].st_load, MOEQ_STATUS_OK);
        ck_assert_msg(jobs[q].st_apply == MOEQ_STATUS_INVALID_ARG, "rank %d: %s", (int)q,
                      jobs[q].err_apply.message);
        ck_assert_ptr_nonnull(strstr(jobs[q].err_apply.message, "routing"));
    }
    ck_assert_ptr_nonnull(strstr(jobs[1].err_apply.message, "rank 0 of 2 failed"));
    ep_world_destroy(&w);
    free(logits);
    free(got);
    free(bad);
    free_batch(&b);
    free_tensors(&tens);
    moeq_test_layer_free(&tl);
}
END_TEST

/* create refuses what it cannot run, on every rank alike. */
START_TEST(test_create_errors) {
    enum { E = 4, H = 64, I = 32 };
    moeq_test_layer tl;
    moeq_test_layer_create(&tl, &k_test_schemes[MOEQ_SCHEME_WNA16], E, H, I, 1);
    /* more ranks than experts */
    {
        ep_world w;
        ep_world_init(&w, 5);
        rank_job jobs[EP_THREADS_MAX];
        memset(jobs, 0, sizeof jobs);
        for (int q = 0; q < 5; q++) jobs[q].mc = &tl.mc;
        run_ranks(&w, jobs, 5);
        for (int q = 0; q < 5; q++) {
            ck_assert_int_eq(jobs[q].st_create, MOEQ_STATUS_INVALID_ARG);
            ck_assert_ptr_nonnull(strstr(jobs[q].err_create.message, "at least one expert"));
        }
        ep_world_destroy(&w);
    }
    /* an expert_map of the host's own: the placement sets it */
    {
        int32_t map[E] = {0, 1, 2, 3};
        moeq_moe_config mc = tl.mc;
        mc.expert_map = map;
        ep_world w;
        ep_world_init(&w, 2);
        rank_job jobs[EP_THREADS_MAX];
        memset(jobs, 0, sizeof jobs);
        for (int q = 0; q < 2; q++) jobs[q].mc = &mc;
        run_ranks(&w, jobs, 2);
        for (int q = 0; q < 2; q++) {
            ck_assert_int_eq(jobs[q].st_create, MOEQ_STATUS_INVALID_ARG);
            ck_assert_ptr_nonnull(strstr(jobs[q].err_create.message, "expert_map"));
        }
        ep_world_destroy(&w);
    }
    /* one dynamic scale over the whole call: refused */
    {
        moeq_test_scheme_args a = {"{\"num_bits\":8,\"strategy\":\"channel\"}",
                                   "{\"num_bits\":8,\"strategy\":\"tensor\",\"dynamic\":true}",
                                   "int-quantized", 0, 0};
        moeq_test_layer t2;
        moeq_test_layer_create(&t2, &a, E, H, I, 1);
        ep_world w;
        ep_world_init(&w, 2);
        rank_job jobs[EP_THREADS_MAX];
        memset(jobs, 0, sizeof jobs);
        for (int q = 0; q < 2; q++) jobs[q].mc = &t2.mc;
        run_ranks(&w, jobs, 2);
        for (int q = 0; q < 2; q++) {
            ck_assert_int_eq(jobs[q].st_create, MOEQ_STATUS_UNSUPPORTED);
            ck_assert_ptr_nonnull(strstr(jobs[q].err_create.message, "per-tensor"));
        }
        ep_world_destroy(&w);
        moeq_test_layer_free(&t2);
    }
    /* no comm to agree over: fails at once */
    moeq_ep *ep = (moeq_ep *)&tl;
    moeq_error err;
    ck_assert_status(moeq_ep_create(&tl.mc, NULL, 0, &ep, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_ptr_null(ep);
    moeq_ep_comm c;
    memset(&c, 0, sizeof c);
    c.size = 2;
    c.rank = 2;
    ck_assert_status(moeq_ep_create(&tl.mc, &c, 0, &ep, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "rank 2 of size 2"));
    moeq_ep_destroy(NULL);
    moeq_test_layer_free(&tl);
}
END_TEST

static Suite *ep_suite(void) {
    Suite *s = suite_create("ep");
    TCase *tc = tcase_create("ep");
    tcase_set_timeout(tc, 1200);
    tcase_add_test(tc, test_placement_map);
    tcase_add_loop_test(tc, test_every_scheme_bit_identical_f32, 0, MOEQ_SCHEME_COUNT);
    tcase_add_loop_test(tc, test_every_scheme_bit_identical_bf16, 0, MOEQ_SCHEME_COUNT);
    tcase_add_test(tc, test_threads_and_reference_paths);
    tcase_add_test(tc, test_checkpoint_each_rank_loads_its_experts);
    tcase_add_test(tc, test_rank_that_fails_to_load_fails_everyone);
    tcase_add_test(tc, test_bad_argument_on_one_rank_fails_everyone);
    tcase_add_test(tc, test_host_step_and_routing_failures);
    tcase_add_test(tc, test_create_errors);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(ep_suite)

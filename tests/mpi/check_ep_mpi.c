/*
 * check_ep_mpi.c - expert parallelism across processes, run by ctest under
 * `mpirun -np 2` and `mpirun -np 4 --oversubscribe` (tests/CMakeLists.txt,
 * when MPI was found).  The checks of check_ep.c, over libmoeq_mpi: a
 * synthetic checkpoint's layer run by every rank on its share of the tokens
 * gives the bits of one process holding every expert (both placements,
 * uneven splits, a rank with no tokens, f32 and bf16 inputs, routing from
 * logits), each rank loads only its experts, a rank that fails to load or
 * passes a bad argument makes every rank return an error.
 *
 * Check runs in one process here (CK_FORK=no, set by ctest).  So that a
 * failure on one rank cannot leave the others waiting in a collective,
 * checks inside a test are recorded (expect) and every rank learns the
 * verdict at its end (verdict: an all-reduce, then ck_assert).
 */
#include <mpi.h>

#include "moeq/moeq_mpi.h"
#include "test_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>

static int g_rank, g_size;
static char g_fail[1024]; /* this rank's first failed expectation in the current test */

static void expect(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void expect(bool ok, const char *fmt, ...) {
    if (ok || g_fail[0]) return;
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(g_fail, sizeof g_fail, "rank %d: ", g_rank);
    vsnprintf(g_fail + n, sizeof g_fail - (size_t)n, fmt, ap);
    va_end(ap);
}

/* Every rank's verdict on the test so far; fails the test on every rank
 * when one rank's expectation failed. */
static void verdict(void) {
    int mine = g_fail[0] ? 0 : 1, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    char msg[sizeof g_fail];
    snprintf(msg, sizeof msg, "%s", g_fail[0] ? g_fail : "another rank failed (see its output)");
    g_fail[0] = '\0';
    ck_assert_msg(all == 1, "%s", msg);
}

#define PREFIX "model.layers.0.mlp.experts"

/* A synthetic checkpoint that rank 0 writes and every rank opens. */
typedef struct model {
    char dir[64];
    moeq_config *cfg;
    moeq_checkpoint *ckpt;
    moeq_resolution res;
    moeq_selection sel;
    moeq_moe_config mc;
    moeq_moe *full; /* every expert: the single-process output */
    int32_t E, H, K;
    uint64_t n_tensors;
} model;

static void model_open(model *m, const char *preset, int32_t E) {
    memset(m, 0, sizeof *m);
    moeq_synth_layout L;
    moeq_error err;
    ck_assert_ok(moeq_synth_preset(preset, &L, &err), &err);
    L.num_layers = 1;
    L.first_dense_layers = 0;
    L.num_experts = E;
    L.top_k = 3;
    L.hidden_size = 128;
    L.moe_intermediate_size = 128;
    L.num_attention_heads = 0;
    L.n_shared_experts = 0;
    L.n_group = L.topk_group = 0;
    int ok = 1;
    if (g_rank == 0) {
        moeq_test_mkdtemp(m->dir, sizeof m->dir, "moeq_ep_mpi");
        ok = moeq_synth_write(&L, m->dir, &err) == MOEQ_OK;
        if (!ok) fprintf(stderr, "moeq_synth_write: %s\n", err.message);
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(m->dir, sizeof m->dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    ck_assert_msg(ok, "rank 0 could not write the checkpoint");
    m->E = E;
    m->H = L.hidden_size;
    m->K = L.top_k;
    ck_assert_ok(moeq_config_load(m->dir, NULL, &m->cfg, &err), &err);
    ck_assert_ok(moeq_checkpoint_open(m->dir, &m->ckpt, &err), &err);
    ck_assert_ok(moeq_resolve_moe(m->cfg, PREFIX, (uint32_t)E, NULL, NULL, &m->res, &err), &err);
    ck_assert_ok(moeq_select(&m->res, PREFIX, NULL, &m->sel, &err), &err);
    ck_assert_ok(moeq_moe_config_init(&m->mc, m->cfg, &m->res, &m->sel, &err), &err);
    m->mc.prefix = PREFIX;
    m->mc.num_experts = E;
    m->mc.hidden_size = L.hidden_size;
    m->mc.intermediate_size = L.moe_intermediate_size;
    ck_assert_ok(moeq_moe_create(&m->mc, &m->full, &err), &err);
    ck_assert_ok(
        moeq_moe_load_checkpoint(m->full, m->ckpt, NULL, NULL, NULL, &m->n_tensors, NULL, &err),
        &err);
    ck_assert_ok(moeq_moe_finalize(m->full, &err), &err);
}

static void model_close(model *m) {
    moeq_moe_destroy(m->full);
    moeq_checkpoint_close(m->ckpt);
    moeq_config_destroy(m->cfg);
    MPI_Barrier(MPI_COMM_WORLD); /* nobody reads the files any more */
    if (g_rank == 0) moeq_test_rmtree(m->dir);
}

static uint32_t rnd(uint32_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

static void put(int32_t dtype, float v, uint8_t *dst) {
    if (dtype == MOEQ_DTYPE_F32) {
        memcpy(dst, &v, 4);
        return;
    }
    uint32_t u;
    memcpy(&u, &v, 4);
    uint16_t h = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16); /* bf16, round to even */
    memcpy(dst, &h, 2);
}

/* The whole batch, the same on every rank: x, logits, and the routing. */
typedef struct batch {
    int64_t T;
    int32_t x_dtype;
    uint8_t *x;
    float *logits;
    int32_t *ids;
    float *w;
} batch;

static batch make_batch(const model *m, int64_t T, int32_t x_dtype, const moeq_route_config *rc,
                        uint32_t seed) {
    batch b = {T, x_dtype, NULL, NULL, NULL, NULL};
    size_t es = moeq_dtype_size(x_dtype);
    b.x = malloc((size_t)T * (size_t)m->H * es + 1);
    b.logits = malloc((size_t)T * (size_t)m->E * sizeof(float) + 1);
    b.ids = malloc((size_t)T * (size_t)m->K * sizeof(int32_t) + 1);
    b.w = malloc((size_t)T * (size_t)m->K * sizeof(float) + 1);
    uint32_t r = seed * 2654435761u + 7u;
    for (int64_t i = 0; i < T * m->H; i++) {
        put(x_dtype, ((float)(rnd(&r) % 4001) - 2000.0f) / 1000.0f, b.x + (size_t)i * es);
    }
    for (int64_t i = 0; i < T * m->E; i++) {
        /* expert 0 favoured: busier than the others */
        b.logits[i] = (float)(rnd(&r) % 1000) / 250.0f + (i % m->E == 0 ? 2.0f : 0.0f);
    }
    moeq_error err;
    ck_assert_ok(moeq_route(rc, b.logits, T, b.ids, b.w, &err), &err);
    return b;
}

static void free_batch(batch *b) {
    free(b->x);
    free(b->logits);
    free(b->ids);
    free(b->w);
}

/* Token share of each rank: variant 0 even, 1 rank 0 empty and the rest
 * uneven, 2 all on the last rank. */
static void share(int64_t T, int variant, int64_t *t0, int64_t *t1) {
    if (variant == 0) {
        *t0 = T * g_rank / g_size;
        *t1 = T * (g_rank + 1) / g_size;
    } else if (variant == 1) {
        /* rank r > 0 gets weights 1, 2, 3, ... of the tokens; rank 0 none */
        int64_t total = (int64_t)g_size * (g_size - 1) / 2, before = 0;
        for (int r = 1; r < g_rank; r++) before += r;
        *t0 = g_rank == 0 ? 0 : T * before / total;
        *t1 = g_rank == 0 ? 0 : T * (before + g_rank) / total;
    } else {
        *t0 = g_rank == g_size - 1 ? 0 : T;
        *t1 = T;
    }
}

/* The rank that holds expert e under the placement. */
static int owner_of(int32_t e, int32_t E, int32_t placement, int32_t size) {
    int32_t map[64], n;
    for (int32_t r = 0; r < size; r++) {
        ck_assert_int_eq(moeq_ep_placement_map(placement, E, size, r, map, &n, NULL), 0);
        if (map[e] >= 0) return r;
    }
    return -1;
}

/* Runs the batch with expert parallelism and compares this rank's rows with
 * the single-process output. */
static void run_case(const model *m, moeq_ep *ep, const batch *b, const moeq_route_config *rc,
                     int variant, bool logits, const char *what) {
    const int32_t out_dtype = b->x_dtype == MOEQ_DTYPE_F32 ? MOEQ_DTYPE_F32 : MOEQ_DTYPE_BF16;
    const size_t os = moeq_dtype_size(out_dtype), es = moeq_dtype_size(b->x_dtype);
    const size_t H = (size_t)m->H, K = (size_t)m->K;
    moeq_ctx *ctx = NULL;
    moeq_error err;
    moeq_ctx_options co = {1, 0};
    ck_assert_ok(moeq_ctx_create(&co, &ctx, &err), &err);
    uint8_t *want = malloc((size_t)b->T * H * os + 1);
    ck_assert_ok(moeq_moe_apply(m->full, ctx, b->x_dtype, b->x, b->T, m->K, b->ids, b->w, out_dtype,
                                want, &err),
                 &err);
    int64_t t0, t1;
    share(b->T, variant, &t0, &t1);
    const int64_t T = t1 - t0;
    uint8_t *got = malloc((size_t)T * H * os + 1);
    moeq_status st;
    if (logits) {
        st = moeq_ep_apply_logits(ep, ctx, rc, b->logits + (size_t)t0 * (size_t)m->E, b->x_dtype,
                                  b->x + (size_t)t0 * H * es, T, out_dtype, got, &err);
    } else {
        st = moeq_ep_apply(ep, ctx, b->x_dtype, b->x + (size_t)t0 * H * es, T, m->K,
                           b->ids + (size_t)t0 * K, b->w + (size_t)t0 * K, out_dtype, got, &err);
    }
    expect(st == MOEQ_STATUS_OK, "%s: %s: %s", what, moeq_status_name(st), err.message);
    if (st == MOEQ_STATUS_OK) {
        expect(memcmp(got, want + (size_t)t0 * H * os, (size_t)T * H * os) == 0,
               "%s: tokens %lld..%lld differ from the single-process layer's", what, (long long)t0,
               (long long)t1);
    }
    free(got);
    free(want);
    moeq_ctx_destroy(ctx);
}

START_TEST(test_bits_match_one_process) {
    const char *presets[] = {"wna16-int4-g128", "w8a8-int8", "nvfp4-w4a4", "w8a8-fp8-block"};
    for (size_t p = 0; p < sizeof presets / sizeof presets[0]; p++) {
        model m;
        model_open(&m, presets[p], 12);
        moeq_route_config rc;
        memset(&rc, 0, sizeof rc);
        rc.num_experts = m.E;
        rc.top_k = m.K;
        rc.renormalize = 1;
        for (int32_t placement = 0; placement < 2; placement++) {
            moeq_ep_comm *comm = NULL;
            moeq_ep *ep = NULL;
            moeq_error err;
            ck_assert_ok(moeq_ep_comm_mpi_create(MPI_Comm_c2f(MPI_COMM_WORLD), &comm, &err), &err);
            moeq_status st = moeq_ep_create(&m.mc, comm, placement, &ep, &err);
            expect(st == MOEQ_STATUS_OK, "create: %s", err.message);
            if (st == MOEQ_STATUS_OK) {
                st = moeq_ep_load_checkpoint(ep, m.ckpt, NULL, NULL, NULL, &err);
                expect(st == MOEQ_STATUS_OK, "load: %s", err.message);
            }
            if (st == MOEQ_STATUS_OK) { /* the same on every rank: both statuses are agreed */
                moeq_ep_stats s;
                moeq_ep_get_stats(ep, &s, NULL);
                unsigned long long loaded = s.tensors_loaded, sum = 0;
                MPI_Allreduce(&loaded, &sum, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
                expect(sum == m.n_tensors, "tensors loaded over the ranks: %llu of %llu", sum,
                       (unsigned long long)m.n_tensors);
                expect(s.tensors_loaded * (uint64_t)m.E ==
                           m.n_tensors * (uint64_t)s.num_local_experts,
                       "rank loaded %llu tensors for %d experts", loaded, (int)s.num_local_experts);
                for (int variant = 0; variant < 3; variant++) {
                    for (int32_t dt = 0; dt < 2; dt++) {
                        int32_t x_dtype = dt ? MOEQ_DTYPE_BF16 : MOEQ_DTYPE_F32;
                        batch b = make_batch(&m, 37, x_dtype, &rc, (uint32_t)(variant * 2 + dt));
                        char what[128];
                        snprintf(what, sizeof what, "%s, %d ranks, %s, split %d, %s x", presets[p],
                                 g_size, moeq_ep_placement_name(placement), variant,
                                 moeq_dtype_name(x_dtype));
                        run_case(&m, ep, &b, &rc, variant, variant == 1, what);
                        free_batch(&b);
                    }
                }
            }
            moeq_ep_destroy(ep);
            moeq_ep_comm_mpi_destroy(comm);
        }
        model_close(&m);
        verdict();
    }
}
END_TEST

START_TEST(test_rank_that_fails_to_load_fails_everyone) {
    model m;
    model_open(&m, "wna16-int4-g128", 8);
    /* rank 0 writes a copy without one tensor of expert 5 */
    const char *victim = PREFIX ".5.up_proj.weight_packed";
    char dir[64] = "";
    int ok = 1;
    if (g_rank == 0) {
        moeq_test_mkdtemp(dir, sizeof dir, "moeq_ep_mpi_broken");
        uint64_t n = moeq_checkpoint_tensor_count(m.ckpt);
        moeq_tensor *keep = malloc(sizeof *keep * (size_t)n);
        uint32_t kept = 0;
        for (uint64_t i = 0; i < n; i++) {
            moeq_tensor t;
            moeq_checkpoint_tensor(m.ckpt, i, &t);
            if (strcmp(t.name, victim) != 0) keep[kept++] = t;
        }
        char path[128];
        moeq_error err;
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        ok = kept + 1 == n && moeq_safetensors_write(path, keep, kept, NULL, &err) == MOEQ_OK;
        free(keep);
        size_t len;
        snprintf(path, sizeof path, "%s/config.json", m.dir);
        unsigned char *text = moeq_test_read_file(path, &len);
        snprintf(path, sizeof path, "%s/config.json", dir);
        moeq_test_write_file(path, text, len);
        free(text);
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    ck_assert_msg(ok, "rank 0 could not write the broken checkpoint");
    moeq_checkpoint *broken = NULL;
    moeq_error err;
    ck_assert_ok(moeq_checkpoint_open(dir, &broken, &err), &err);
    for (int32_t placement = 0; placement < 2; placement++) {
        int owner = owner_of(5, 8, placement, g_size);
        moeq_ep_comm *comm = NULL;
        moeq_ep *ep = NULL;
        ck_assert_ok(moeq_ep_comm_mpi_create(MPI_Comm_c2f(MPI_COMM_WORLD), &comm, &err), &err);
        moeq_status st = moeq_ep_create(&m.mc, comm, placement, &ep, &err);
        expect(st == MOEQ_STATUS_OK, "create: %s", err.message);
        if (st == MOEQ_STATUS_OK) {
            moeq_error_clear(&err);
            st = moeq_ep_load_checkpoint(ep, broken, NULL, NULL, NULL, &err);
            expect(st == MOEQ_STATUS_CHECKPOINT, "load: %s, want CHECKPOINT: %s",
                   moeq_status_name(st), err.message);
            expect(strstr(err.message, victim) != NULL, "the message lacks %s: %s", victim,
                   err.message);
            char want[64];
            snprintf(want, sizeof want, "rank %d of %d failed", owner, g_size);
            expect(g_rank == owner || strstr(err.message, want) != NULL,
                   "the message does not name rank %d: %s", owner, err.message);
        }
        moeq_ep_destroy(ep);
        moeq_ep_comm_mpi_destroy(comm);
    }
    moeq_checkpoint_close(broken);
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0) moeq_test_rmtree(dir);
    model_close(&m);
    verdict();
}
END_TEST

START_TEST(test_bad_argument_on_one_rank_fails_everyone) {
    model m;
    model_open(&m, "wna16-int4-g128", 8);
    moeq_route_config rc;
    memset(&rc, 0, sizeof rc);
    rc.num_experts = m.E;
    rc.top_k = m.K;
    rc.renormalize = 1;
    moeq_ep_comm *comm = NULL;
    moeq_ep *ep = NULL;
    moeq_error err;
    ck_assert_ok(moeq_ep_comm_mpi_create(MPI_Comm_c2f(MPI_COMM_WORLD), &comm, &err), &err);
    moeq_status st = moeq_ep_create(&m.mc, comm, MOEQ_EP_ROUND_ROBIN, &ep, &err);
    if (st == MOEQ_STATUS_OK) st = moeq_ep_load_checkpoint(ep, m.ckpt, NULL, NULL, NULL, &err);
    expect(st == MOEQ_STATUS_OK, "setup: %s", err.message);
    if (st == MOEQ_STATUS_OK) {
        batch b = make_batch(&m, 16, MOEQ_DTYPE_F32, &rc, 3);
        int64_t t0 = b.T * g_rank / g_size, t1 = b.T * (g_rank + 1) / g_size;
        float *out = malloc((size_t)(t1 - t0) * (size_t)m.H * sizeof(float) + 1);
        int32_t *ids = malloc((size_t)(t1 - t0) * (size_t)m.K * sizeof(int32_t) + 1);
        memcpy(ids, b.ids + t0 * m.K, (size_t)(t1 - t0) * (size_t)m.K * sizeof(int32_t));
        const int bad_rank = g_size - 1;
        if (g_rank == bad_rank) ids[0] = m.E + 3;
        moeq_ctx *ctx = NULL;
        ck_assert_ok(moeq_ctx_create(NULL, &ctx, &err), &err);
        st = moeq_ep_apply(ep, ctx, MOEQ_DTYPE_F32, (const float *)(void *)b.x + t0 * m.H, t1 - t0,
                           m.K, ids, b.w + t0 * m.K, MOEQ_DTYPE_F32, out, &err);
        expect(st == MOEQ_STATUS_INVALID_ARG, "bad id: %s: %s", moeq_status_name(st), err.message);
        expect(strstr(err.message, "topk_ids[0]") != NULL, "message: %s", err.message);
        /* the next call, with good ids, runs on every rank */
        memcpy(ids, b.ids + t0 * m.K, (size_t)(t1 - t0) * (size_t)m.K * sizeof(int32_t));
        st = moeq_ep_apply(ep, ctx, MOEQ_DTYPE_F32, (const float *)(void *)b.x + t0 * m.H, t1 - t0,
                           m.K, ids, b.w + t0 * m.K, MOEQ_DTYPE_F32, out, &err);
        expect(st == MOEQ_STATUS_OK, "after the bad call: %s", err.message);
        moeq_ctx_destroy(ctx);
        free(ids);
        free(out);
        free_batch(&b);
    }
    moeq_ep_destroy(ep);
    moeq_ep_comm_mpi_destroy(comm);
    model_close(&m);
    verdict();
}
END_TEST

static Suite *ep_mpi_suite(void) {
    Suite *s = suite_create("ep_mpi");
    TCase *tc = tcase_create("ep_mpi");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_bits_match_one_process);
    tcase_add_test(tc, test_rank_that_fails_to_load_fails_everyone);
    tcase_add_test(tc, test_bad_argument_on_one_rank_fails_everyone);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    SRunner *sr = srunner_create(ep_mpi_suite());
    srunner_set_fork_status(sr, CK_NOFORK); /* MPI processes must not fork */
    srunner_run_all(sr, g_rank == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    MPI_Finalize();
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/*
 * ep_bench.c - expert parallelism's time per call split per rank between
 * compute (routing the pairs, the local experts, the combine) and
 * communication (inside the comm's alltoallv and all-reduce calls, waiting
 * for slower ranks included), over MPI.  Run it under mpirun with 1, 2, 4
 * ranks (bench/ep_bench.sh does, on a Qwen3-30B-A3B-shaped layer):
 *
 *   mpirun -np N ep_bench MODEL_DIR [--layer PREFIX] [--tokens 1,16,128]
 *          [--reps R] [--placement contiguous|round-robin] [--threads T]
 *          [--baseline] [--json FILE]
 *
 * Every rank makes the same batch of T tokens (bf16 x, softmax top-k routing
 * of random logits) and takes a contiguous share.  Per rank and call: compute
 * (the call's time outside the comm), agree (the all-reduces before each
 * exchange: where a rank waits for slower ones) and exchange (the alltoallv
 * calls); medians over the calls.  --baseline: rank 0 also loads the whole
 * layer and, after each call, times moeq_moe_apply on the whole batch with
 * the threads of all ranks (the others wait at a barrier), the ratio's
 * denominator (meant for -np 1: the same machine, calls alternating).
 * Prints a table per T and, with --json, one JSON object per T.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "moeq/moeq_mpi.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double uniform(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}

static int g_rank, g_size;

static void die(const char *what, const moeq_error *err) {
    fprintf(stderr, "ep_bench: rank %d: %s: %s\n", g_rank, what, err ? err->message : "");
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static double number(const moeq_config *cfg, const char *a, const char *b) {
    double v = 0;
    if (moeq_config_model_number(cfg, a, &v) == MOEQ_OK) return v;
    if (b && moeq_config_model_number(cfg, b, &v) == MOEQ_OK) return v;
    fprintf(stderr, "ep_bench: config.json has no %s\n", a);
    MPI_Abort(MPI_COMM_WORLD, 2);
    return 0;
}

/* One rank's figures for one T, per call (times: medians over the calls). */
typedef struct report {
    int32_t experts, threads;
    int64_t tokens;
    double rows, compute_ms, agree_ms, exchange_ms, sent_kib, recv_kib, bytes_loaded, load_s;
} report;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (v is sorted in place). */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double min_of(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    const char *dir = NULL, *layer = "model.layers.0.mlp.experts", *json_path = NULL;
    char tokens_text[256] = "1,16,128";
    int reps = 10, placement = MOEQ_EP_CONTIGUOUS, threads = 0, baseline = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--layer") && has) {
            layer = argv[++i];
        } else if (!strcmp(a, "--tokens") && has) {
            snprintf(tokens_text, sizeof tokens_text, "%s", argv[++i]);
        } else if (!strcmp(a, "--reps") && has) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(a, "--placement") && has) {
            placement = moeq_ep_placement_from_name(argv[++i]);
        } else if (!strcmp(a, "--threads") && has) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(a, "--baseline")) {
            baseline = 1;
        } else if (!strcmp(a, "--json") && has) {
            json_path = argv[++i];
        } else if (a[0] != '-' && !dir) {
            dir = a;
        } else {
            dir = NULL;
            break;
        }
    }
    if (!dir || reps < 1 || reps > 10000 || placement < 0 || threads < 0 || threads > 256) {
        if (g_rank == 0) {
            fprintf(stderr, "usage: mpirun -np N ep_bench MODEL_DIR [--layer PREFIX] [--tokens "
                            "1,16,128] [--reps R] [--placement contiguous|round-robin] "
                            "[--threads T] [--baseline] [--json FILE]\n");
        }
        MPI_Finalize();
        return 2;
    }
    if (threads == 0) { /* this machine's cores over its ranks */
        MPI_Comm node;
        int local = 1;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
        MPI_Comm_size(node, &local);
        MPI_Comm_free(&node);
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = (int)(cores / local > 0 ? cores / local : 1);
    }

    moeq_error err;
    moeq_config *cfg = NULL;
    moeq_checkpoint *ck = NULL;
    if (moeq_config_load(dir, NULL, &cfg, &err) != MOEQ_OK) die(dir, &err);
    if (moeq_checkpoint_open(dir, &ck, &err) != MOEQ_OK) die(dir, &err);
    const int32_t E = (int32_t)number(cfg, "num_experts", "n_routed_experts");
    const int32_t K = (int32_t)number(cfg, "num_experts_per_tok", NULL);
    const int32_t H = (int32_t)number(cfg, "hidden_size", NULL);
    const int32_t I = (int32_t)number(cfg, "moe_intermediate_size", "intermediate_size");
    moeq_resolution res;
    moeq_selection sel;
    moeq_moe_config mc;
    if (moeq_resolve_moe(cfg, layer, (uint32_t)E, NULL, NULL, &res, &err) != MOEQ_OK ||
        moeq_select(&res, layer, NULL, &sel, &err) != MOEQ_OK ||
        moeq_moe_config_init(&mc, cfg, &res, &sel, &err) != MOEQ_OK) {
        die(layer, &err);
    }
    mc.prefix = layer;
    mc.num_experts = E;
    mc.hidden_size = H;
    mc.intermediate_size = I;

    moeq_ep_comm *comm = NULL;
    moeq_ep *ep = NULL;
    moeq_ctx *ctx = NULL;
    moeq_ctx_options co = {threads, 0};
    if (moeq_ep_comm_mpi_create(MPI_Comm_c2f(MPI_COMM_WORLD), &comm, &err) != MOEQ_OK) {
        die("comm", &err);
    }
    if (moeq_ctx_create(&co, &ctx, &err) != MOEQ_OK) die("ctx", &err);
    double t_load = now_s();
    if (moeq_ep_create(&mc, comm, placement, &ep, &err) != MOEQ_OK ||
        moeq_ep_load_checkpoint(ep, ck, NULL, NULL, NULL, &err) != MOEQ_OK) {
        die("expert-parallel layer", &err);
    }
    t_load = now_s() - t_load;
    moeq_ep_stats st0;
    moeq_ep_get_stats(ep, &st0, NULL);

    /* rank 0's whole layer, for the baseline */
    moeq_moe *full = NULL;
    moeq_ctx *full_ctx = NULL;
    if (baseline && g_rank == 0) {
        moeq_ctx_options fco = {threads * g_size > 256 ? 256 : threads * g_size, 0};
        if (moeq_moe_create(&mc, &full, &err) != MOEQ_OK ||
            moeq_moe_load_checkpoint(full, ck, NULL, NULL, NULL, NULL, NULL, &err) != MOEQ_OK ||
            moeq_moe_finalize(full, &err) != MOEQ_OK ||
            moeq_ctx_create(&fco, &full_ctx, &err) != MOEQ_OK) {
            die("baseline layer", &err);
        }
    }
    FILE *json = NULL;
    if (g_rank == 0 && json_path) {
        json = fopen(json_path, "w");
        if (!json) {
            fprintf(stderr, "ep_bench: cannot write %s\n", json_path);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (g_rank == 0) {
        printf("ep_bench: %s %s, %d experts, H %d, I %d, top-%d; %d ranks x %d threads, %s, "
               "%s kernels\n",
               layer, moeq_scheme_name(sel.scheme), (int)E, (int)H, (int)I, (int)K, g_size, threads,
               moeq_ep_placement_name(placement), moeq_ctx_kernels(ctx));
    }

    for (char *tok = strtok(tokens_text, ","); tok; tok = strtok(NULL, ",")) {
        const int64_t T = atoll(tok);
        if (T < 1) continue;
        /* the same batch on every rank */
        rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)T;
        uint16_t *x = malloc((size_t)T * (size_t)H * 2);
        float *logits = malloc((size_t)T * (size_t)E * sizeof(float));
        int32_t *ids = malloc((size_t)T * (size_t)K * sizeof(int32_t));
        float *w = malloc((size_t)T * (size_t)K * sizeof(float));
        if (!x || !logits || !ids || !w) die("out of memory", NULL);
        for (int64_t i = 0; i < T * H; i++) {
            float v = (float)(uniform() * 2.0 - 1.0);
            uint32_t u;
            memcpy(&u, &v, 4);
            x[i] = (uint16_t)(u >> 16);
        }
        for (int64_t i = 0; i < T * E; i++) logits[i] = (float)(uniform() * 4.0);
        moeq_route_config rc;
        memset(&rc, 0, sizeof rc);
        rc.num_experts = E;
        rc.top_k = K;
        rc.renormalize = 1;
        if (moeq_route(&rc, logits, T, ids, w, &err) != MOEQ_OK) die("route", &err);
        const int64_t t0 = T * g_rank / g_size, t1 = T * (g_rank + 1) / g_size, n = t1 - t0;
        uint16_t *out = malloc((size_t)(n > 0 ? n : 1) * (size_t)H * 2);
        const uint16_t *xs = x + (size_t)t0 * (size_t)H;
        for (int warm = 0; warm < 2; warm++) {
            if (moeq_ep_apply(ep, ctx, MOEQ_DTYPE_BF16, xs, n, K, ids + t0 * K, w + t0 * K,
                              MOEQ_DTYPE_BF16, out, &err) != MOEQ_OK) {
                die("apply", &err);
            }
        }
        /* reps calls, each timed; with --baseline rank 0 runs the whole layer
         * after each (the others wait at a barrier), so that both see the
         * same machine */
        moeq_ep_reset_stats(ep);
        double *t = calloc(5 * (size_t)reps, sizeof(double));
        double *wall = t, *comp = t + reps, *agr = t + 2 * reps, *xch = t + 3 * reps,
               *one = t + 4 * reps;
        uint16_t *o = full ? malloc((size_t)T * (size_t)H * 2) : NULL;
        moeq_ep_stats prev, s;
        moeq_ep_get_stats(ep, &prev, NULL);
        MPI_Barrier(MPI_COMM_WORLD);
        for (int r = 0; r < reps; r++) {
            double a = now_s();
            if (moeq_ep_apply(ep, ctx, MOEQ_DTYPE_BF16, xs, n, K, ids + t0 * K, w + t0 * K,
                              MOEQ_DTYPE_BF16, out, &err) != MOEQ_OK) {
                die("apply", &err);
            }
            wall[r] = now_s() - a;
            moeq_ep_get_stats(ep, &s, NULL);
            comp[r] = s.compute_s - prev.compute_s;
            agr[r] = s.agree_s - prev.agree_s;
            xch[r] = s.exchange_s - prev.exchange_s;
            prev = s;
            if (baseline) {
                MPI_Barrier(MPI_COMM_WORLD);
                if (full) {
                    a = now_s();
                    if (moeq_moe_apply(full, full_ctx, MOEQ_DTYPE_BF16, x, T, K, ids, w,
                                       MOEQ_DTYPE_BF16, o, &err) != MOEQ_OK) {
                        die("baseline apply", &err);
                    }
                    one[r] = now_s() - a;
                }
                MPI_Barrier(MPI_COMM_WORLD);
            }
        }
        free(o);
        const double best = min_of(wall, reps), med = median(wall, reps);
        const double one_best = full ? min_of(one, reps) : 0,
                     one_med = full ? median(one, reps) : 0;
        report mine = {s.num_local_experts,
                       threads,
                       n,
                       (double)s.pairs_received / reps,
                       median(comp, reps) * 1e3,
                       median(agr, reps) * 1e3,
                       median(xch, reps) * 1e3,
                       (double)s.bytes_sent / reps / 1024.0,
                       (double)s.bytes_received / reps / 1024.0,
                       (double)st0.bytes_loaded,
                       t_load};
        free(t);
        report *all = g_rank == 0 ? malloc(sizeof *all * (size_t)g_size) : NULL;
        MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, 0,
                   MPI_COMM_WORLD);
        if (g_rank == 0) {
            printf("\nT = %lld: %.3f ms per call (median of %d; best %.3f)", (long long)T,
                   med * 1e3, reps, best * 1e3);
            if (full) {
                printf("; one process, %d threads, calls alternating: %.3f ms (best %.3f): "
                       "ep / one process %.2fx (best %.2fx)",
                       threads * g_size, one_med * 1e3, one_best * 1e3, med / one_med,
                       best / one_best);
            }
            printf("\nrank  experts  MiB held  tokens  rows/call  compute ms  agree ms  "
                   "exchange ms  sent KiB  recv KiB   (medians per call)\n");
            for (int r = 0; r < g_size; r++) {
                const report *p = &all[r];
                printf("%4d  %7d  %8.1f  %6lld  %9.1f  %10.3f  %8.3f  %11.3f  %8.1f  %8.1f\n", r,
                       (int)p->experts, p->bytes_loaded / 1048576.0, (long long)p->tokens, p->rows,
                       p->compute_ms, p->agree_ms, p->exchange_ms, p->sent_kib, p->recv_kib);
            }
            if (json) {
                fprintf(json,
                        "{\"bench\": \"ep\", \"scheme\": \"%s\", \"experts\": %d, \"hidden\": %d, "
                        "\"intermediate\": %d, \"top_k\": %d, \"ranks\": %d, \"threads\": %d, "
                        "\"placement\": \"%s\", \"tokens\": %lld, \"reps\": %d, "
                        "\"median_ms\": %.4f, \"best_ms\": %.4f, \"single_median_ms\": %.4f, "
                        "\"single_best_ms\": %.4f, \"per_rank\": [",
                        moeq_scheme_name(sel.scheme), (int)E, (int)H, (int)I, (int)K, g_size,
                        threads, moeq_ep_placement_name(placement), (long long)T, reps, med * 1e3,
                        best * 1e3, one_med * 1e3, one_best * 1e3);
                for (int r = 0; r < g_size; r++) {
                    const report *p = &all[r];
                    fprintf(json,
                            "%s{\"rank\": %d, \"experts\": %d, \"bytes_loaded\": %.0f, "
                            "\"tokens\": %lld, \"rows\": %.1f, \"compute_ms\": %.4f, "
                            "\"agree_ms\": %.4f, \"exchange_ms\": %.4f, \"sent_kib\": %.1f, "
                            "\"recv_kib\": %.1f}",
                            r ? ", " : "", r, (int)p->experts, p->bytes_loaded,
                            (long long)p->tokens, p->rows, p->compute_ms, p->agree_ms,
                            p->exchange_ms, p->sent_kib, p->recv_kib);
                }
                fprintf(json, "]}\n");
            }
        }
        free(all);
        free(out);
        free(x);
        free(logits);
        free(ids);
        free(w);
    }
    if (json) fclose(json);
    moeq_ctx_destroy(full_ctx);
    moeq_moe_destroy(full);
    moeq_ctx_destroy(ctx);
    moeq_ep_destroy(ep);
    moeq_ep_comm_mpi_destroy(comm);
    moeq_checkpoint_close(ck);
    moeq_config_destroy(cfg);
    MPI_Finalize();
    return 0;
}

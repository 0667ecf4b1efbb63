/*
 * cmd_run_ep.c - `mpirun -np N moeq run MODEL_DIR --layer PREFIX --ep ...`:
 * the layer split over N ranks with moeq_ep (moeq_ep.h) over MPI
 * (moeq_mpi.h).  Every rank holds the same inputs and routing (cmd_run.c
 * makes them), takes a contiguous share of the tokens and loads only its
 * experts; rank 0 gathers the output, writes it, and prints each rank's
 * experts, bytes loaded and time split between compute and communication.
 * The only file of the tool that includes mpi.h; built without MPI, --ep
 * says how to get it.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

#if defined(MOEQ_CLI_MPI) && MOEQ_CLI_MPI

#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "moeq/moeq_mpi.h"
#include "npy.h"

static int g_started;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int cli_ep_start(void) {
    int init = 0;
    MPI_Initialized(&init);
    if (!init && MPI_Init(NULL, NULL) != MPI_SUCCESS) {
        fprintf(stderr, "moeq run --ep: MPI_Init failed\n");
        return CLI_FAILED;
    }
    g_started = !init;
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) {
        fprintf(stderr, "moeq run --ep: rank %d: cannot silence stdout\n", rank);
    }
    return CLI_OK;
}

int cli_ep_all_ok(int ok) {
    int mine = ok ? 1 : 0, all = 0;
    if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS) return 0;
    return all;
}

void cli_ep_stop(void) {
    if (g_started) MPI_Finalize();
    g_started = 0;
}

static int32_t progress(uint64_t done, uint64_t total, void *user) {
    (void)user;
    if (done == total || done % 64 == 0) {
        fprintf(stderr, "\rrank 0 loading %llu/%llu tensors", (unsigned long long)done,
                (unsigned long long)total);
        if (done == total) fputc('\n', stderr);
    }
    return 0;
}

/* What each rank reports to rank 0. */
typedef struct rank_report {
    moeq_ep_stats s;
    int64_t tokens;
    double load_s;
    double peak_rss_mib; /* VmHWM after the calls; -1 where /proc has none */
    int32_t threads;
    int32_t first_expert, last_expert; /* of its ids, for the table */
} rank_report;

/* This process's peak resident memory (Linux: VmHWM), MiB; -1 if unknown. */
static double peak_rss_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    double kib = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "VmHWM:", 6) == 0) {
            kib = strtod(line + 6, NULL);
            break;
        }
    }
    fclose(f);
    return kib < 0 ? -1 : kib / 1024.0;
}

/* Threads per rank when not given: this machine's cores over its ranks. */
static int32_t default_threads(void) {
    MPI_Comm node;
    int local = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_size(node, &local);
        MPI_Comm_free(&node);
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long t = cores / (local > 0 ? local : 1);
    return t < 1 ? 1 : (int32_t)(t > 256 ? 256 : t);
}

/* Rank 0: the whole layer in one process on the whole batch, against the
 * gathered output, bit for bit. */
static int check_bits(const cli_ep_job *j, int32_t threads, const float *got) {
    moeq_error err;
    moeq_moe *full = NULL;
    moeq_ctx *ctx = NULL;
    float *want = malloc((size_t)j->T * (size_t)j->H * sizeof(float) + 1);
    int rc = CLI_FAILED;
    moeq_ctx_options co = {threads, 0};
    if (!want || moeq_moe_create(j->mc, &full, &err) != MOEQ_OK ||
        moeq_moe_load_checkpoint(full, j->ck, j->layer, NULL, NULL, NULL, NULL, &err) != MOEQ_OK ||
        moeq_moe_finalize(full, &err) != MOEQ_OK || moeq_ctx_create(&co, &ctx, &err) != MOEQ_OK ||
        moeq_moe_apply(full, ctx, MOEQ_DTYPE_F32, j->x, j->T, j->top_k, j->ids, j->weights,
                       MOEQ_DTYPE_F32, want, &err) != MOEQ_OK) {
        if (want) cli_print_error("--check (the whole layer on rank 0)", &err);
        goto done;
    }
    size_t n = (size_t)j->T * (size_t)j->H;
    size_t i = 0;
    while (i < n && memcmp(&got[i], &want[i], sizeof(float)) == 0) i++;
    if (i == n) {
        printf("check against the whole layer in one process: bit-identical (%lld x %d floats)\n",
               (long long)j->T, (int)j->H);
        rc = CLI_OK;
    } else {
        printf("check against the whole layer in one process: FAILED: token %zu, column %zu: "
               "%.9g here, %.9g in one process\n",
               i / (size_t)j->H, i % (size_t)j->H, (double)got[i], (double)want[i]);
    }
done:
    moeq_ctx_destroy(ctx);
    moeq_moe_destroy(full);
    free(want);
    return rc;
}

int cli_ep_run(const cli_ep_job *j) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    moeq_error err;
    moeq_ep_comm *comm = NULL;
    moeq_ep *ep = NULL;
    moeq_ctx *ctx = NULL;
    float *out = NULL, *all = NULL;
    int *counts = NULL, *displs = NULL;
    rank_report *reports = NULL;
    int rc = CLI_FAILED;

    /* This rank's share of the tokens. */
    const int64_t t0 = j->T * rank / size, t1 = j->T * (rank + 1) / size, T = t1 - t0;
    const size_t H = (size_t)j->H;
    const int32_t threads = j->threads > 0 ? (int32_t)j->threads : default_threads();
    moeq_ctx_options co = {threads, 0};
    moeq_status st = moeq_ep_comm_mpi_create(MPI_Comm_c2f(MPI_COMM_WORLD), &comm, &err);
    if (st == MOEQ_OK) st = moeq_ctx_create(&co, &ctx, &err);
    out = malloc((size_t)T * H * sizeof(float) + 1);
    if (st == MOEQ_OK && !out) st = MOEQ_STATUS_NOMEM;
    if (st == MOEQ_OK && (double)j->T * (double)H > (double)INT_MAX) {
        fprintf(stderr, "moeq run --ep: %lld tokens x %zu is over %d floats to gather\n",
                (long long)j->T, H, INT_MAX);
        st = MOEQ_STATUS_LIMIT;
    }
    if (!cli_ep_all_ok(st == MOEQ_OK)) {
        if (st != MOEQ_OK && st != MOEQ_STATUS_LIMIT) cli_print_error("moeq run --ep", &err);
        goto done;
    }

    double a = now_s();
    st = moeq_ep_create(j->mc, comm, j->placement, &ep, &err);
    if (st == MOEQ_OK) {
        st = moeq_ep_load_checkpoint(ep, j->ck, j->layer, rank == 0 && isatty(2) ? progress : NULL,
                                     NULL, &err);
    }
    if (st != MOEQ_OK) {
        if (rank == 0) cli_print_error(j->layer, &err); /* it has the failing rank's message */
        goto done;
    }
    double load_s = now_s() - a;
    const char *mpi = moeq_ep_mpi_library_version();
    printf("%s: %s, %d experts, hidden %d, intermediate %d; expert parallelism over %d ranks "
           "(%.*s), %s placement\n",
           j->layer, j->scheme, (int)j->E, (int)j->H, (int)j->I, size, (int)strcspn(mpi, ","), mpi,
           moeq_ep_placement_name(j->placement));

    /* run and time: rank 0 decides when to stop, so every rank makes the same calls */
    const int32_t *ids = j->ids + t0 * j->top_k;
    const float *w = j->weights + t0 * j->top_k;
    const float *x = j->x + (size_t)t0 * H;
    double best = HUGE_VAL, total = 0;
    int runs = 0;
    for (;;) {
        double b = now_s();
        st = moeq_ep_apply(ep, ctx, MOEQ_DTYPE_F32, x, T, j->top_k, ids, w, MOEQ_DTYPE_F32, out,
                           &err);
        if (st != MOEQ_OK) {
            if (rank == 0) cli_print_error(j->layer, &err);
            goto done;
        }
        double dt = now_s() - b;
        if (runs == 0 && j->repeat != 1) moeq_ep_reset_stats(ep); /* the first call warms up */
        if (runs > 0 || j->repeat == 1) {
            best = fmin(best, dt);
            total += dt;
        }
        runs++;
        int stop = j->repeat ? runs >= j->repeat + (j->repeat > 1)
                             : (runs >= 3 && total > 0.5) || runs >= 50;
        MPI_Bcast(&stop, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (stop) break;
    }
    int timed = j->repeat == 1 ? 1 : runs - 1;

    /* gather the output and the reports on rank 0 */
    rank_report mine;
    memset(&mine, 0, sizeof mine);
    moeq_ep_get_stats(ep, &mine.s, NULL);
    mine.tokens = T;
    mine.load_s = load_s;
    mine.peak_rss_mib = peak_rss_mib();
    mine.threads = threads;
    int32_t local[4096];
    int32_t nl = moeq_ep_local_experts(ep, local, 4096);
    mine.first_expert = nl > 0 ? local[0] : -1;
    mine.last_expert = nl > 0 ? local[nl - 1] : -1;
    if (rank == 0) {
        all = malloc((size_t)j->T * H * sizeof(float) + 1);
        counts = malloc(sizeof(int) * (size_t)size);
        displs = malloc(sizeof(int) * (size_t)size);
        reports = malloc(sizeof *reports * (size_t)size);
        if (!all || !counts || !displs || !reports) {
            fprintf(stderr, "moeq run --ep: out of memory gathering the output\n");
            MPI_Abort(MPI_COMM_WORLD, CLI_FAILED);
        }
        for (int r = 0; r < size; r++) {
            int64_t a0 = j->T * r / size, a1 = j->T * (r + 1) / size;
            counts[r] = (int)((a1 - a0) * (int64_t)H);
            displs[r] = (int)(a0 * (int64_t)H);
        }
    }
    MPI_Gatherv(out, (int)((size_t)T * H), MPI_FLOAT, all, counts, displs, MPI_FLOAT, 0,
                MPI_COMM_WORLD);
    MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, reports, (int)sizeof mine, MPI_BYTE, 0,
               MPI_COMM_WORLD);
    if (rank != 0) {
        rc = CLI_OK;
        goto done;
    }
    printf("apply: %lld tokens over %d ranks, %d threads each, %s kernels: %.3f ms per call "
           "(best of %d; mean %.3f ms), %.3f ms per token\n",
           (long long)j->T, size, (int)threads, moeq_ctx_kernels(ctx), best * 1e3, timed,
           total / timed * 1e3, best * 1e3 / (double)j->T);
    printf("rank  experts  ids         tokens  tensors  loaded MiB  peak RSS MiB  load s  "
           "rows/call  compute ms  comm ms  sent KiB  recv KiB (per call)\n");
    for (int r = 0; r < size; r++) {
        const rank_report *p = &reports[r];
        double calls = p->s.calls ? (double)p->s.calls : 1.0;
        char span[32];
        snprintf(span, sizeof span, "%d..%d%s", (int)p->first_expert, (int)p->last_expert,
                 j->placement == MOEQ_EP_ROUND_ROBIN ? "/rr" : "");
        printf("%4d  %7d  %-10s  %6lld  %7llu  %10.1f  %12.1f  %6.2f  %9.1f  %10.3f  %7.3f  "
               "%8.1f  %8.1f\n",
               r, (int)p->s.num_local_experts, span, (long long)p->tokens,
               (unsigned long long)p->s.tensors_loaded, (double)p->s.bytes_loaded / 1048576.0,
               p->peak_rss_mib, p->load_s, (double)p->s.pairs_received / calls, p->s.compute_s / calls * 1e3,
               p->s.comm_s / calls * 1e3, (double)p->s.bytes_sent / calls / 1024.0,
               (double)p->s.bytes_received / calls / 1024.0);
    }
    rc = CLI_OK;
    if (j->out_path) {
        int64_t shape[2] = {j->T, j->H};
        char msg[512];
        if (npy_write(j->out_path, MOEQ_DTYPE_F32, 2, shape, all, msg, sizeof msg) != 0) {
            fprintf(stderr, "moeq: %s\n", msg);
            rc = CLI_FAILED;
            goto done;
        }
        printf("wrote %s (float32 [%lld, %d])\n", j->out_path, (long long)j->T, (int)j->H);
    }
    if (j->check) rc = check_bits(j, threads, all);
done:
    free(out);
    free(all);
    free(counts);
    free(displs);
    free(reports);
    moeq_ctx_destroy(ctx);
    moeq_ep_destroy(ep);
    moeq_ep_comm_mpi_destroy(comm);
    return rc;
}

#else /* built without MPI */

int cli_ep_start(void) {
    fprintf(stderr, "moeq run --ep: this moeq was built without MPI; install Open MPI (Debian: "
                    "apt-get install libopenmpi-dev openmpi-bin) and rebuild (cmake "
                    "-DMOEQ_MPI=ON)\n");
    return CLI_USAGE;
}

int cli_ep_all_ok(int ok) {
    return ok;
}

int cli_ep_run(const cli_ep_job *job) {
    (void)job;
    return CLI_USAGE;
}

void cli_ep_stop(void) {}

#endif

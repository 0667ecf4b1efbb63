/*
 * load_bench.c - how fast a checkpoint's MoE layers load and finalize
 * (moeq_model_load), from a warm page cache, against a floor measured in the
 * same run: reading the same expert bytes from the mapped files and writing
 * them once into fresh memory (what a load must at least do: the mapped
 * tensors in, the finalized layout out), on the same threads.
 *
 * Without --dir it writes the layer first (moeq_synth_write
 * "wna16-int4-g128": 128 experts, hidden 2048, intermediate 768, one layer,
 * as Qwen3-30B-A3B; --experts/--hidden/--intermediate/--layers change it) into
 * a temporary directory and removes it at the end.
 *
 * Each load and each floor pass runs in a child process (fork) that maps
 * the checkpoint afresh, so both fault the same pages in, and the load's peak
 * resident memory (VmHWM) is its own: reported against the expert bytes, as
 * the peak while loading and as what stays resident after.  Floor and load
 * alternate; per thread count, the median of --reps runs of each.
 *
 * usage: load_bench [--json] [--dir DIR] [--threads N[,N...]] [--reps N]
 *                   [--experts N] [--hidden N] [--intermediate N] [--layers N]
 * Prints figures; asserts nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"
#include "moeq/moeq.h"

#define MAX_REPS 64
#define MAX_THREADS 8

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- the floor: the expert tensors' bytes read from the mapping, written once ---- */

typedef struct {
    const moeq_tensor *t; /* [n] the expert tensors */
    uint64_t n;
    uint8_t *dst;          /* their bytes, back to back */
    const uint64_t *at;    /* [n] offsets in dst */
    int threads;
    int tid;
} floor_job;

static void *floor_run(void *arg) {
    floor_job *j = arg;
    for (uint64_t i = (uint64_t)j->tid; i < j->n; i += (uint64_t)j->threads) {
        memcpy(j->dst + j->at[i], j->t[i].data, (size_t)j->t[i].nbytes);
    }
    return NULL;
}

/* Seconds for one pass with `threads` threads, into fresh memory. */
static double floor_pass(const moeq_tensor *t, uint64_t n, const uint64_t *at, uint64_t bytes,
                         int threads) {
    /* fresh pages, faulted in by the copy: 2 MiB ones where the system gives
     * them, as the finalized layout's arena asks for */
    const size_t huge = (size_t)2 << 20, len = ((size_t)bytes + huge) / huge * huge;
    uint8_t *dst = NULL;
    if (posix_memalign((void **)&dst, huge, len) != 0) return -1;
    (void)madvise(dst, len, MADV_HUGEPAGE);
    floor_job jobs[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    const double t0 = now_s();
    for (int k = 0; k < threads; k++) {
        jobs[k] = (floor_job){t, n, dst, at, threads, k};
        if (k) pthread_create(&tids[k], NULL, floor_run, &jobs[k]);
    }
    floor_run(&jobs[0]);
    for (int k = 1; k < threads; k++) pthread_join(tids[k], NULL);
    const double s = now_s() - t0;
    free(dst);
    return s;
}

/* ---- one load, in a child ------------------------------------------------------------ */

typedef struct {
    int ok;
    moeq_model_load_summary s;
    double floor_s;
    char message[MOEQ_ERROR_MESSAGE_SIZE];
} load_result;

/* The floor in a process of its own, as the load gets: the checkpoint
 * mapped afresh (its pages in the page cache, not yet in this mapping). */
static void floor_child(const char *dir, int threads, load_result *c) {
    moeq_error err;
    moeq_config *cfg = NULL;
    moeq_checkpoint *ck = NULL;
    moeq_model_layer_info *info = NULL;
    uint32_t n_layers = 0;
    if (moeq_config_load(dir, NULL, &cfg, &err) != MOEQ_OK ||
        moeq_checkpoint_open(dir, &ck, &err) != MOEQ_OK ||
        moeq_model_find_layers(cfg, ck, &info, &n_layers, &err) != MOEQ_OK) {
        memcpy(c->message, err.message, sizeof c->message);
        return;
    }
    const uint64_t total = moeq_checkpoint_tensor_count(ck);
    moeq_tensor *t = malloc(sizeof *t * (size_t)total + 1);
    uint64_t *at = malloc(sizeof *at * (size_t)total + 1);
    uint64_t n = 0, bytes = 0;
    for (uint64_t i = 0; t && at && i < total; i++) {
        moeq_checkpoint_tensor(ck, i, &t[n]);
        for (uint32_t l = 0; l < n_layers; l++) {
            const size_t pl = strlen(info[l].prefix);
            if (strncmp(t[n].name, info[l].prefix, pl) == 0 && t[n].name[pl] == '.') {
                at[n] = bytes;
                bytes += t[n].nbytes;
                n++;
                break;
            }
        }
    }
    c->floor_s = t && at ? floor_pass(t, n, at, bytes, threads) : -1;
    c->ok = c->floor_s > 0;
    if (!c->ok) snprintf(c->message, sizeof c->message, "out of memory for the floor's copy");
    free(t);
    free(at);
    moeq_free(info);
    moeq_checkpoint_close(ck);
    moeq_config_destroy(cfg);
}

static load_result in_child(const char *dir, int threads, int floor) {
    load_result r;
    memset(&r, 0, sizeof r);
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(r.message, sizeof r.message, "pipe: %s", strerror(errno));
        return r;
    }
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        load_result c;
        memset(&c, 0, sizeof c);
        if (floor) {
            floor_child(dir, threads, &c);
        } else {
            /* the MoE layers alone: the floor reads their bytes */
            moeq_model_load_options o = {.threads = threads, .moe_only = 1};
            moeq_model *m = NULL;
            moeq_error err;
            if (moeq_model_load(dir, &o, &m, &c.s, &err) == MOEQ_OK) {
                c.ok = 1;
            } else {
                memcpy(c.message, err.message, sizeof c.message);
            }
            moeq_model_destroy(m);
        }
        ssize_t w = write(fds[1], &c, sizeof c);
        _exit(w == (ssize_t)sizeof c ? 0 : 1);
    }
    close(fds[1]);
    if (pid < 0) {
        snprintf(r.message, sizeof r.message, "fork: %s", strerror(errno));
        close(fds[0]);
        return r;
    }
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t k = read(fds[0], (char *)&r + got, sizeof r - got);
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != sizeof r) {
        memset(&r, 0, sizeof r);
        snprintf(r.message, sizeof r.message, "the loading child died (status %d)", status);
    }
    return r;
}

int main(int argc, char **argv) {
    int json = 0, reps = 3, experts = 128, hidden = 2048, inter = 768, layers = 1;
    int threads[MAX_THREADS] = {1, 2}, n_threads = 2;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int has = i + 1 < argc;
        if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--dir") && has) {
            dir = argv[++i];
        } else if (!strcmp(a, "--reps") && has) {
            if (!bench_int_opt("load_bench", a, argv[++i], 1, MAX_REPS, &reps)) return 2;
        } else if (!strcmp(a, "--experts") && has) {
            if (!bench_int_opt("load_bench", a, argv[++i], 1, 4096, &experts)) return 2;
        } else if (!strcmp(a, "--hidden") && has) {
            if (!bench_int_opt("load_bench", a, argv[++i], 8, 1 << 16, &hidden)) return 2;
        } else if (!strcmp(a, "--intermediate") && has) {
            if (!bench_int_opt("load_bench", a, argv[++i], 8, 1 << 16, &inter)) return 2;
        } else if (!strcmp(a, "--layers") && has) {
            if (!bench_int_opt("load_bench", a, argv[++i], 1, 1024, &layers)) return 2;
        } else if (!strcmp(a, "--threads") && has) {
            char *list = argv[++i];
            n_threads = 0;
            for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
                if (n_threads == MAX_THREADS) {
                    fprintf(stderr, "load_bench: at most %d thread counts\n", MAX_THREADS);
                    return 2;
                }
                if (!bench_int_opt("load_bench", "--threads", tok, 1, MAX_THREADS,
                                   &threads[n_threads++]))
                    return 2;
            }
        } else {
            fprintf(stderr,
                    "usage: load_bench [--json] [--dir DIR] [--threads N[,N...]] [--reps N]\n"
                    "                  [--experts N] [--hidden N] [--intermediate N] "
                    "[--layers N]\n");
            return 2;
        }
    }
    moeq_error err;
    char tmp[64] = "";
    if (!dir) {
        snprintf(tmp, sizeof tmp, "/tmp/moeq_load_bench_XXXXXX");
        if (!mkdtemp(tmp)) {
            fprintf(stderr, "load_bench: mkdtemp: %s\n", strerror(errno));
            return 1;
        }
        moeq_synth_layout L;
        moeq_synth_preset("wna16-int4-g128", &L, &err);
        L.num_experts = experts;
        L.top_k = experts < 8 ? experts : 8;
        L.hidden_size = hidden;
        L.moe_intermediate_size = inter;
        L.num_layers = layers;
        L.shards = layers > 1 ? layers : 1;
        const double t0 = now_s();
        if (moeq_synth_write(&L, tmp, &err) != MOEQ_OK) {
            fprintf(stderr, "load_bench: %s\n", err.message);
            return 1;
        }
        if (!json) {
            printf("wrote wna16-int4-g128, %d layer(s) of %d experts, hidden %d, intermediate "
                   "%d, in %.1f s\n",
                   layers, experts, hidden, inter, now_s() - t0);
        }
        dir = tmp;
    }
    /* the expert tensors, as moeq_model_load finds them */
    moeq_config *cfg = NULL;
    moeq_checkpoint *ck = NULL;
    moeq_model_layer_info *info = NULL;
    uint32_t n_layers = 0;
    if (moeq_config_load(dir, NULL, &cfg, &err) != MOEQ_OK ||
        moeq_checkpoint_open(dir, &ck, &err) != MOEQ_OK ||
        moeq_model_find_layers(cfg, ck, &info, &n_layers, &err) != MOEQ_OK) {
        fprintf(stderr, "load_bench: %s\n", err.message);
        return 1;
    }
    const uint64_t total = moeq_checkpoint_tensor_count(ck);
    moeq_tensor *t = malloc(sizeof *t * (size_t)total);
    uint64_t *at = malloc(sizeof *at * (size_t)total);
    uint64_t n = 0, bytes = 0;
    for (uint64_t i = 0; i < total; i++) {
        moeq_checkpoint_tensor(ck, i, &t[n]);
        for (uint32_t l = 0; l < n_layers; l++) {
            const size_t pl = strlen(info[l].prefix);
            if (strncmp(t[n].name, info[l].prefix, pl) == 0 && t[n].name[pl] == '.') {
                at[n] = bytes;
                bytes += t[n].nbytes;
                n++;
                break;
            }
        }
    }
    /* warm the page cache (and this process's first mapping) */
    (void)floor_pass(t, n, at, bytes, 1);
    if (!json) {
        printf("%s: %u MoE layer(s), %llu expert tensors, %.3f GB\n", dir, n_layers,
               (unsigned long long)n, (double)bytes * 1e-9);
        printf("%4s %9s %9s %10s %10s %7s %9s %9s\n", "thr", "load s", "GB/s", "floor s",
               "floor GB/s", "x floor", "peak/B", "after/B");
    }
    for (int ti = 0; ti < n_threads; ti++) {
        const int th = threads[ti];
        double fl[MAX_REPS], ld[MAX_REPS], peak[MAX_REPS], after[MAX_REPS];
        for (int r = 0; r < reps; r++) {
            load_result fr = in_child(dir, th, 1), lr = in_child(dir, th, 0);
            if (!fr.ok || !lr.ok) {
                fprintf(stderr, "load_bench: %s\n", !fr.ok ? fr.message : lr.message);
                return 1;
            }
            fl[r] = fr.floor_s;
            ld[r] = lr.s.seconds;
            /* the load's own memory: what the child held before the call is not its */
            peak[r] = (double)(lr.s.peak_rss - lr.s.rss_before) / (double)bytes;
            after[r] = (double)(lr.s.rss_after - lr.s.rss_before) / (double)bytes;
        }
        const double f = median(fl, reps), l = median(ld, reps);
        const double p = median(peak, reps), a = median(after, reps);
        const double gb = (double)bytes * 1e-9;
        if (json) {
            printf("{\"bench\": \"load\", \"dir\": \"%s\", \"layers\": %u, \"bytes\": %llu, "
                   "\"threads\": %d, \"reps\": %d, \"load_s\": %.5f, \"load_gbps\": %.4f, "
                   "\"floor_s\": %.5f, \"floor_gbps\": %.4f, \"x_floor\": %.3f, "
                   "\"peak_rss_x\": %.3f, \"rss_after_x\": %.3f}\n",
                   tmp[0] ? "(synthetic)" : dir, n_layers, (unsigned long long)bytes, th, reps, l,
                   gb / l, f, gb / f, l / f, p, a);
        } else {
            printf("%4d %9.4f %9.3f %10.4f %10.3f %7.2f %9.2f %9.2f\n", th, l, gb / l, f, gb / f,
                   l / f, p, a);
        }
    }
    free(t);
    free(at);
    moeq_free(info);
    moeq_checkpoint_close(ck);
    moeq_config_destroy(cfg);
    if (tmp[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
        if (system(cmd) != 0) fprintf(stderr, "load_bench: could not remove %s\n", tmp);
    }
    return 0;
}

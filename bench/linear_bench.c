/*
 * linear_bench.c - linear layers (moeq_linear) per scheme, on two shapes:
 *   q_proj  Qwen3-30B-A3B's attention q_proj, in 2048 -> out 4096;
 *   o_proj  DeepSeek-V3's o_proj, in 16384 (128 heads x 128) -> out 7168;
 * at T = 1, 32 and 512 tokens (bfloat16 in and out), with cold weights:
 * enough copies of the layer are built and cycled that every run reads its
 * weights from DRAM (the copies together exceed bench_cold_bytes: twice the
 * largest cache the CPU reports, at least 64 MiB).
 * Measured in the same run, for the ratios (bench_probe.h, as moe_bench):
 *   - read bandwidth and the FP32 FMA peak at the thread count;
 *   - OpenBLAS: cblas_sgemm on the same shape and tokens with the weight
 *     pre-dequantized to fp32 (cold as the layers are: copies cycled past
 *     bench_cold_bytes), on the case's thread count, as moe_bench's baseline.
 * Per case: median time, GB/s of weight bytes read (codes and scales as stored
 * after finalize), GFLOP/s (2 T in out), and the ratios of the time to the
 * memory floor (bytes / bandwidth), to the compute floor (flops / peak) and
 * to OpenBLAS's time (openblas_ratio < 1: faster than the fp32 sgemm):
 * at T = 1 a layer is a weight stream, and its time against the memory floor
 * is the figure that matters.  The floors are sampled at the start, before
 * every scheme and shape and at the end; the ratios use the medians of all
 * samples.  Each case (and each OpenBLAS case) is measured when the machine
 * is whole (bench_probe.h's machine_whole), again up to MAX_ATTEMPTS times
 * where it was not, and marked (`*`, JSON "contended") where its probes fail
 * against the run's final figures, as moe_bench's cases are.
 *
 * Layers are built fast: created, parameters filled with random codes and
 * valid scales (bench_layer.h's fill_params on each shard), finalized.
 *
 * usage: linear_bench [--json] [--quick] [--scheme NAME] [--shape q_proj|o_proj]
 *                     [--tokens T] [--threads N] [--reps N]
 * Prints figures; asserts nothing.
 */
#ifdef __linux__
#define _GNU_SOURCE /* pthread_setaffinity_np, sched_getaffinity: bench_probe.h */
#endif
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_layer.h"
#include "bench_probe.h"

/* OpenBLAS's own symbols (kernels/blas.c is the one file that includes cblas.h). */
void openblas_set_num_threads(int n);
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);

typedef struct shape {
    const char *name, *model;
    int in, out;
} shape;

static const shape k_shapes[] = {
    {"q_proj", "Qwen3-30B-A3B self_attn.q_proj", 2048, 4096},
    {"o_proj", "DeepSeek-V3 self_attn.o_proj", 16384, 7168},
};

/* ---- the OpenBLAS baseline ------------------------------------------------------------ */

enum { N_TOKENS = 3, MAX_COPIES = 4096 };

/* How many copies of `bytes` bytes of weights to cycle for cold reads. */
static int copies_for(size_t bytes, bool quick) {
    if (quick) return 1;
    const size_t n = bench_cold_bytes() / bytes + 1;
    return n > MAX_COPIES ? MAX_COPIES : (int)n;
}
static const int k_tokens[N_TOKENS] = {1, 32, 512};

static int reps_for(int reps, bool quick, int T) {
    int n = reps ? reps : quick ? 3 : T >= 512 ? 8 : 40;
    return n > MAX_REPS ? MAX_REPS : n;
}

static double g_blas_waited; /* seconds, every OpenBLAS case (await_whole) */

/* ms[ti]: the median time of y [T, out] = x [T, in] W^T by cblas_sgemm in
 * fp32, W [out, in] as a pre-dequantized layer holds it, for each token
 * count (only_T: that one; the others stay NaN) on `threads` OpenBLAS
 * threads; cold weights, cycled as the layers are.  false: out of memory. */
static bool blas_times(const shape *sh, int only_T, int threads, int reps, bool quick,
                       double ms[N_TOKENS]) {
    const size_t wn = (size_t)sh->in * (size_t)sh->out;
    const int copies = copies_for(wn * sizeof(float), quick);
    float **w = calloc((size_t)copies, sizeof *w);
    const size_t maxT = (size_t)k_tokens[N_TOKENS - 1];
    float *x = malloc(maxT * (size_t)sh->in * sizeof(float));
    float *y = malloc(maxT * (size_t)sh->out * sizeof(float));
    bool ok = w && x && y;
    for (int c = 0; ok && c < copies; c++) {
        w[c] = malloc(wn * sizeof(float));
        ok = w[c] != NULL;
        for (size_t i = 0; ok && i < wn; i++) w[c][i] = (float)((int)(i % 61) - 30) * 1e-3f;
    }
    for (size_t i = 0; ok && i < maxT * (size_t)sh->in; i++) x[i] = (float)(uni() * 2 - 1);
    openblas_set_num_threads(threads);
    for (int ti = 0; ok && ti < N_TOKENS; ti++) {
        const int T = k_tokens[ti];
        ms[ti] = (double)NAN;
        if (only_T && T != only_T) continue;
        const int n = reps_for(reps, quick, T);
        double t[MAX_REPS];
        for (int attempt = 1;; attempt++) { /* as the layers' cases (main) */
            probe pr;
            const bool before = await_whole(&pr, &g_blas_waited);
            for (int r = -1; r < n; r++) { /* one warm-up run */
                double a = bench_now();
                cblas_sgemm(101 /* row major */, 111 /* x as is */, 112 /* W transposed */, T,
                            sh->out, sh->in, 1.0f, x, sh->in, w[(r + 1) % copies], sh->in, 0.0f, y,
                            sh->out);
                if (r >= 0) t[r] = bench_now() - a;
            }
            if ((machine_whole(&pr) && before) || attempt == MAX_ATTEMPTS) break;
        }
        ms[ti] = median(t, n) * 1e3;
    }
    openblas_set_num_threads(1);
    for (int c = 0; w && c < copies; c++) free(w[c]);
    free(w);
    free(x);
    free(y);
    return ok;
}

/* One case's runs (the kept attempt) and its probes (bench_probe.h). */
typedef struct result {
    const char *scheme;
    const shape *sh;
    int ti; /* k_tokens[ti] */
    size_t bytes;
    int copies, n, attempts;
    bool contended;
    probe probe[2]; /* the kept attempt's probes, before and after */
    double waited;  /* seconds waiting for the machine (await_whole), all attempts */
    double t[MAX_REPS];
} result;

/* ---- layers ------------------------------------------------------------------------- */

static moeq_linear *build_linear(const scheme_def *s, const shape *sh, moeq_config **cfg_out) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"quant_method\":\"compressed-tensors\",\"format\":\"mixed-precision\","
             "\"config_groups\":{\"linear\":{\"targets\":[\"Linear\"],\"format\":"
             "\"%s\",\"weights\":%s,\"input_activations\":%s}}}",
             s->format, s->weights, s->inputs);
    moeq_error err;
    moeq_config *cfg = NULL;
    if (moeq_config_parse(json, strlen(json), NULL, &cfg, &err) != MOEQ_OK) die("config", &err);
    const char *name = "model.layers.0.self_attn.o_proj";
    moeq_resolution res;
    if (moeq_resolve(cfg, name, MOEQ_MODULE_LINEAR, NULL, &res, &err) != MOEQ_OK)
        die("resolve", &err);
    moeq_selection sel;
    if (moeq_select(&res, name, NULL, &sel, &err) != MOEQ_OK) die("select", &err);
    if (strcmp(moeq_scheme_name(sel.scheme), s->name) != 0) {
        fprintf(stderr, "linear_bench: selected %s, want %s\n", moeq_scheme_name(sel.scheme),
                s->name);
        exit(1);
    }
    moeq_linear_config lc;
    if (moeq_linear_config_init(&lc, cfg, &res, &sel, &err) != MOEQ_OK) die("config", &err);
    lc.name = name;
    lc.in_features = sh->in;
    lc.out_features = sh->out;
    moeq_linear *l = NULL;
    if (moeq_linear_create(&lc, &l, &err) != MOEQ_OK) die("create", &err);
    /* fill_params sizes weight_shape from g_H (out) and g_I (in) */
    g_H = sh->out;
    g_I = sh->in;
    for (int32_t j = 0; j < moeq__linear_shards(l); j++) fill_params(moeq__linear_shard(l, j));
    if (moeq_linear_finalize(l, &err) != MOEQ_OK) die("finalize", &err);
    *cfg_out = cfg;
    return l;
}

int main(int argc, char **argv) {
    g_prog = "linear_bench";
    bool json = false, quick = false;
    const char *only_scheme = NULL, *only_shape = NULL;
    int only_T = 0, threads = 2, reps = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--quick")) {
            quick = true;
        } else if (!strcmp(a, "--scheme") && v) {
            only_scheme = argv[++i];
        } else if (!strcmp(a, "--shape") && v) {
            only_shape = argv[++i];
        } else if (!strcmp(a, "--tokens")) {
            if (!bench_int_opt("linear_bench", a, v, 1, 512, &only_T)) return 2;
            i++;
            if (only_T != 1 && only_T != 32 && only_T != 512) {
                fprintf(stderr, "linear_bench: --tokens %d: the cases are 1, 32 and 512\n", only_T);
                return 2;
            }
        } else if (!strcmp(a, "--threads")) {
            if (!bench_int_opt("linear_bench", a, v, 1, 16, &threads)) return 2;
            i++;
        } else if (!strcmp(a, "--reps")) {
            if (!bench_int_opt("linear_bench", a, v, 1, MAX_REPS, &reps)) return 2;
            i++;
        } else {
            fprintf(stderr, "usage: linear_bench [--json] [--quick] [--scheme NAME] [--shape "
                            "q_proj|o_proj] [--tokens T] [--threads N] [--reps N]\n");
            return 2;
        }
    }
    /* 512 MiB with --quick too: the read probes need PROBE_SPAN regions, and
     * the smoke test runs them (without waiting: g_wait_s). */
    if (quick) g_wait_s = 0;
    if (!probes_init(512)) {
        fprintf(stderr, "linear_bench: out of memory for the 512 MiB read probe\n");
        return 1;
    }
    const int floor_reps = quick ? 1 : 5;
    sample_limits(threads, floor_reps);
    whole_init();
    moeq_ctx_options co = {threads, 0};
    moeq_ctx *ctx = NULL;
    moeq_error err;
    if (moeq_ctx_create(&co, &ctx, &err) != MOEQ_OK) die("context", &err);
    /* the OpenBLAS times, per shape, before the layers take their memory */
    double blas[sizeof k_shapes / sizeof k_shapes[0]][N_TOKENS];
    for (size_t hi = 0; hi < sizeof k_shapes / sizeof k_shapes[0]; hi++) {
        for (int ti = 0; ti < N_TOKENS; ti++) blas[hi][ti] = (double)NAN;
        if ((only_shape && strcmp(only_shape, k_shapes[hi].name) != 0) || (quick && hi > 0)) {
            continue;
        }
        if (!blas_times(&k_shapes[hi], only_T, threads, reps, quick, blas[hi])) {
            fprintf(stderr, "linear_bench: out of memory for the OpenBLAS baseline\n");
            return 1;
        }
    }
    enum { MAX_RESULTS = sizeof k_schemes / sizeof k_schemes[0] * 2 * N_TOKENS };
    static result results[MAX_RESULTS];
    int nres = 0;
    for (size_t si = 0; si < sizeof k_schemes / sizeof k_schemes[0]; si++) {
        const scheme_def *s = &k_schemes[si];
        if (only_scheme && strcmp(only_scheme, s->name) != 0) continue;
        for (size_t hi = 0; hi < sizeof k_shapes / sizeof k_shapes[0]; hi++) {
            const shape *sh = &k_shapes[hi];
            if (only_shape && strcmp(only_shape, sh->name) != 0) continue;
            if (quick && hi > 0) continue; /* --quick: the small shape */
            moeq_config *cfg0 = NULL;
            moeq_linear *lay0 = build_linear(s, sh, &cfg0);
            const size_t bytes = (size_t)moeq__linear_bytes(lay0);
            const int copies = copies_for(bytes, quick);
            moeq_config **cfg = calloc((size_t)copies, sizeof *cfg);
            moeq_linear **lay = calloc((size_t)copies, sizeof *lay);
            if (!cfg || !lay) {
                fprintf(stderr, "linear_bench: out of memory for %d copies of %s\n", copies,
                        sh->name);
                return 1;
            }
            cfg[0] = cfg0;
            lay[0] = lay0;
            for (int c = 1; c < copies; c++) lay[c] = build_linear(s, sh, &cfg[c]);
            sample_limits(threads, quick ? 1 : 2);
            for (int ti = 0; ti < N_TOKENS; ti++) {
                const int T = k_tokens[ti];
                if (only_T && T != only_T) continue;
                uint16_t *x = malloc((size_t)T * (size_t)sh->in * 2);
                uint16_t *y = malloc((size_t)T * (size_t)sh->out * 2);
                if (!x || !y) return 1;
                for (size_t i = 0; i < (size_t)T * (size_t)sh->in; i++) {
                    x[i] = moeq__f32_to_bf16((float)(uni() * 2 - 1));
                }
                result *r = &results[nres++];
                *r = (result){.scheme = s->name,
                              .sh = sh,
                              .ti = ti,
                              .bytes = bytes,
                              .copies = copies,
                              .n = reps_for(reps, quick, T)};
                for (r->attempts = 1;; r->attempts++) {
                    const bool before = await_whole(&r->probe[0], &r->waited);
                    for (int rep = -1; rep < r->n; rep++) { /* one warm-up run */
                        moeq_linear *l = lay[(rep + 1) % copies];
                        double a = bench_now();
                        if (moeq_linear_apply(l, ctx, MOEQ_DTYPE_BF16, x, T, MOEQ_DTYPE_BF16, y,
                                              &err) != MOEQ_OK)
                            die("apply", &err);
                        if (rep >= 0) r->t[rep] = bench_now() - a;
                    }
                    r->contended = !(machine_whole(&r->probe[1]) && before);
                    if (!r->contended || r->attempts == MAX_ATTEMPTS) break;
                }
                free(x);
                free(y);
            }
            for (int c = 0; c < copies; c++) {
                moeq_linear_destroy(lay[c]);
                moeq_config_destroy(cfg[c]);
            }
            free(lay);
            free(cfg);
        }
    }
    sample_limits(threads, floor_reps);
    const double bw = sample_median(&g_bw[threads]), peak = sample_median(&g_peak[threads]);
    if (!json) {
        printf("linear layers, %d threads, %s kernels, bf16 in and out; weights cycled over "
               "%zu MiB (largest cache %zu MiB); floors measured in this run: read %.2f GB/s, "
               "FP32 FMA peak %.1f GFLOP/s (medians of %d and %d samples)\n",
               threads, moeq_ctx_kernels(ctx), bench_cold_bytes() >> 20,
               bench_largest_cache() >> 20, bw, peak, g_bw[threads].n, g_peak[threads].n);
        printf("%-12s %-7s %5s %10s %8s %9s %9s %10s %11s %10s %9s\n", "scheme", "shape", "T", "ms",
               "GB/s", "GFLOP/s", "weight MB", "mem floor", "comp floor", "blas ms", "x blas");
    } else {
        printf("[");
    }
    int retried = 0, marked = 0;
    double waited = g_blas_waited;
    for (int i = 0; i < nres; i++) {
        result *r = &results[i];
        const shape *sh = r->sh;
        const int T = k_tokens[r->ti];
        /* judged again against the run's final read-probe median */
        r->contended = !(probe_whole(&r->probe[0], probe_bw_ref()) &&
                         probe_whole(&r->probe[1], probe_bw_ref()));
        retried += r->attempts > 1;
        marked += r->contended;
        waited += r->waited;
        const double flops = 2.0 * T * sh->in * sh->out;
        const double sec = median(r->t, r->n);
        const double mem_x = sec / ((double)r->bytes / (bw * 1e9));
        const double comp_x = sec / (flops / (peak * 1e9));
        const double blas_ms = blas[r->sh - k_shapes][r->ti], blas_x = sec * 1e3 / blas_ms;
        if (json) {
            printf("%s\n{\"scheme\": \"%s\", \"shape\": \"%s\", \"in\": %d, \"out\": %d, "
                   "\"tokens\": %d, \"threads\": %d, \"ms\": %.4f, \"weight_bytes\": "
                   "%zu, \"gbps\": %.2f, \"gflops\": %.2f, \"bw_gbps\": %.2f, "
                   "\"peak_gflops\": %.2f, \"mem_floor_ratio\": %.4f, "
                   "\"compute_floor_ratio\": %.4f, \"openblas_ratio\": %.4f, "
                   "\"openblas_ms\": %.4f, \"copies\": %d, \"attempts\": %d, "
                   "\"contended\": %s, \"probe_gflops\": [%.1f, %.1f], "
                   "\"probe_gbps\": [%.1f, %.1f], \"waited_s\": %.2f}",
                   i ? "," : "", r->scheme, sh->name, sh->in, sh->out, T, threads, sec * 1e3,
                   r->bytes, (double)r->bytes / sec / 1e9, flops / sec / 1e9, bw, peak, mem_x,
                   comp_x, blas_x, blas_ms, r->copies, r->attempts, r->contended ? "true" : "false",
                   r->probe[0].gflops, r->probe[1].gflops, r->probe[0].gbps, r->probe[1].gbps,
                   r->waited);
        } else {
            printf("%-12s %-7s %5d %10.3f %8.2f %9.2f %9.2f %9.2fx %10.2fx %10.3f %8.2fx%s\n",
                   r->scheme, sh->name, T, sec * 1e3, (double)r->bytes / sec / 1e9,
                   flops / sec / 1e9, (double)r->bytes / 1e6, mem_x, comp_x, blas_ms, blas_x,
                   case_mark(r->attempts, r->contended));
        }
    }
    if (json) {
        printf("\n]\n");
    } else {
        print_probe_summary(waited, retried, marked);
    }
    moeq_ctx_destroy(ctx);
    free(g_stream);
    return 0;
}

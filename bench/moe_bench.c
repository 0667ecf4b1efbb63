/*
 * moe_bench.c - one Qwen3-30B-A3B-shaped MoE layer (128 experts, top-8,
 * hidden 2048, intermediate 768) per scheme, with cold weights: several
 * layers are built and cycled, and the routing is redrawn for every run, so
 * the experts a run touches come from DRAM (each layer is far above the
 * 32 MiB L3).  Measured in the same run, for the ratios:
 *   - read bandwidth and the peak of every instruction the kernels' inner
 *     loops run on this CPU (bench_probe.h: FP32 FMA, vdpbf16ps, vpdpbusd,
 *     or the AVX2 sequences), 1 and 2 threads, so that each case is also
 *     reported against the peak of its own instruction (case_ins);
 *   - OpenBLAS sgemm on the same shapes with weights already dequantized to
 *     fp32 (per expert: M = the rows routed to it; gate, up and down; the
 *     same routing draws), its thread count set to the case's.
 * Bandwidth and peaks are sampled before every scheme and at the end; the
 * ratios use the medians of all samples.
 *
 * Each case (and each OpenBLAS case) is measured when the machine is as the
 * floors describe it (bench_probe.h's machine_whole: a short 2-thread FMA
 * probe and a 64 MiB 2-thread read).  Before a case the probe is repeated
 * every 50 ms, up to g_wait_s seconds (--quick: not at all), until the
 * machine is whole; where it still is not, or the probe after the case finds
 * it not whole, the case is measured again, up to MAX_ATTEMPTS times.  The
 * decisions rest on the probes alone, never on the case's own times.  At the
 * end every case's last probes are judged again against the run's final
 * read-probe median (probe_bw_ref); a case whose probes fail is
 * marked (JSON "contended": true, a `*` in the table).  JSON "attempts"
 * counts a case's runs, "waited_s" its time waiting, "probe_gflops" and
 * "probe_gbps" what its probes read before and after the kept attempt.
 *
 * Per case: median time per layer, GB/s of weight bytes read (distinct
 * experts touched x bytes per expert, scales included, as stored after
 * finalize), GFLOP/s (2 T k 3 H I), and the ratios of the time to the memory
 * floor (bytes / bandwidth at that thread count), the compute floor
 * (flops / FP32 FMA peak), the instruction floor (gate and up at gemm1's
 * instruction peak, down at gemm2's) and the OpenBLAS time.  Per-run ratios,
 * then medians.
 *
 * Layers are built fast: created, parameters filled with random codes and
 * valid scales, finalized (no quantizer runs).
 *
 * usage: moe_bench [--json] [--quick] [--scheme NAME] [--tokens T] [--threads N]
 *                  [--reps N] [--layers N]
 * Prints figures; asserts nothing.
 */
#ifdef __linux__
#define _GNU_SOURCE /* pthread_setaffinity_np, sched_getaffinity: bench_probe.h */
#endif
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"
#include "kernels.h"
#include "layer/moe.h"
#include "moeq/moeq.h"

void openblas_set_num_threads(int n);
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);

#include "bench_layer.h"
#include "bench_probe.h"

/* ---- the instruction of each case ---------------------------------------------- */

/* The instruction a projection's inner loop runs (gemm1: gate and up, the
 * bfloat16 input of weight-only layers, or the activations' codes; gemm2:
 * down, on the float32 intermediate, quantized again where the scheme
 * quantizes activations), as src/layer/moe_fast.c picks them: int8
 * activations -> idot (vpdpbusd; AVX2: vpmaddwd on int8 codes as int16,
 * vpmaddubsw on int4 codes), NVFP4 activations -> fdot (vpdpbusd; AVX2:
 * vpmaddubsw), bfloat16 rows (FP8 activation codes, weight-only gemm1) ->
 * tile_bf16 / gemv_bf16 where the context takes the bfloat16 path
 * (moeq__bf16_path: vdpbf16ps), FP32 FMA elsewhere, float32 rows
 * (weight-only gemm2) -> the FP32 tile and gemv (zmm FMAs under the avx512
 * table: fma_f32_zmm, ymm ones elsewhere).
 * The choice does not depend on T (the gemv and the tiles of a path run the
 * same instruction). */
static ins_id case_ins(const char *scheme, bool gemm2) {
    const bool avx512 = strcmp(moeq__kern_best(false)->name, "avx512") == 0;
    if (strstr(scheme, "a8_int8"))
        return avx512 ? INS_DPBUSD : strncmp(scheme, "w4", 2) == 0 ? INS_MADDUBS : INS_MADDWD;
    if (strstr(scheme, "a4_nvfp4")) return avx512 ? INS_DPBUSD : INS_MADDUBS;
    const ins_id fma = avx512 ? INS_FMA512 : INS_FMA; /* the float path's vector width */
    /* the bfloat16 path, where contexts take it: vdpbf16ps, or the AVX2
     * tile_bf16's ymm FMAs on CPUs without it (MOEQ_BF16_PATH=on) */
    const bool bf16 = moeq__bf16_path() == 1;
    const ins_id bins = avx512 && moeq__cpu_avx512bf16() ? INS_DPBF16 : INS_FMA;
    /* MXFP8 inputs, and FP8 inputs per 128 on MXFP4's groups of 32: float rows */
    if (strstr(scheme, "a8_mxfp") || strstr(scheme, "w4a8_mxfp4")) return fma;
    if (strstr(scheme, "a8_fp8")) return bf16 ? bins : fma;
    /* E4M3 codes in groups of 32: bfloat16 panels would need kv * ks, which
     * moeq__pk_bf16_scaled rules out for E4M3, and groups under
     * BF16_MIN_GROUP stay on the float path */
    if (strstr(scheme, "w8a16_mxfp8")) return fma;
    return bf16 && !gemm2 ? bins : fma; /* weight-only */
}

/* ---- cases -------------------------------------------------------------------------- */

typedef struct opts {
    int json, quick, reps, layers;
    const char *scheme;
    int tokens, threads;
} opts;

typedef struct result {
    const char *scheme;
    int T, threads;
    int attempts;   /* runs of the case (machine_whole) */
    bool contended; /* the kept attempt's probes fail probe_whole against the run's final
                       read-probe median */
    probe probe[2]; /* what the last attempt's probes read, before and after */
    double waited;  /* seconds spent waiting for the machine (await_whole), all attempts */
    double ms, ms_min, ms_max, gbps, gflops, bytes_med;
    double t[MAX_REPS];
    double bytes[MAX_REPS];
    int n;
} result;

static int reps_for(const opts *o, int T) {
    if (o->reps) return o->reps;
    if (o->quick) return 3;
    return T == 1 ? 201 : T == 32 ? 15 : T == 128 ? 7 : 5;
}

static uint16_t *make_x(int T) {
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)T * (size_t)g_H);
    for (size_t i = 0; i < (size_t)T * (size_t)g_H; i++) {
        x[i] = moeq__f32_to_bf16((float)(2 * uni() - 1));
    }
    return x;
}

/* The OpenBLAS baseline of one routing draw: per expert, gate, up and down
 * sgemms over its rows (inputs gathered before the clock starts). */
typedef struct blas_layer {
    float *w[3]; /* [E][rows][cols] */
} blas_layer;

static double blas_run(const blas_layer *bl, int T, const int32_t *ids, float *X, float *G,
                       float *U, float *Y) {
    (void)U;
    int *count = calloc((size_t)g_E, sizeof(int)), *start = calloc((size_t)g_E + 1, sizeof(int));
    for (int i = 0; i < T * TOPK; i++) count[ids[i]]++;
    for (int e = 0; e < g_E; e++) start[e + 1] = start[e] + count[e];
    double t0 = bench_now();
    const size_t H = (size_t)g_H, I = (size_t)g_I;
    for (int e = 0; e < g_E; e++) {
        int M = count[e];
        if (!M) continue;
        const float *x = X + (size_t)start[e] * H;
        float *g = G + (size_t)start[e] * I, *u = U + (size_t)start[e] * I;
        cblas_sgemm(101, 111, 112, M, g_I, g_H, 1.0f, x, g_H, bl->w[0] + (size_t)e * I * H, g_H,
                    0.0f, g, g_I);
        cblas_sgemm(101, 111, 112, M, g_I, g_H, 1.0f, x, g_H, bl->w[1] + (size_t)e * I * H, g_H,
                    0.0f, u, g_I);
        cblas_sgemm(101, 111, 112, M, g_H, g_I, 1.0f, g, g_I, bl->w[2] + (size_t)e * I * H, g_I,
                    0.0f, Y + (size_t)start[e] * H, g_H);
    }
    double dt = bench_now() - t0;
    free(count);
    free(start);
    return dt;
}

int main(int argc, char **argv) {
    opts o;
    memset(&o, 0, sizeof o);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            o.json = 1;
        else if (!strcmp(argv[i], "--quick"))
            o.quick = 1;
        else if (!strcmp(argv[i], "--scheme") && i + 1 < argc)
            o.scheme = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) {
            if (!bench_int_opt("moe_bench", argv[i], argv[i + 1], 1, 512, &o.tokens)) return 2;
            i++;
            if (o.tokens != 1 && o.tokens != 32 && o.tokens != 128 && o.tokens != 512) {
                fprintf(stderr, "moe_bench: --tokens %d: the cases are 1, 32, 128 and 512\n",
                        o.tokens);
                return 2;
            }
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (!bench_int_opt("moe_bench", argv[i], argv[i + 1], 1, 2, &o.threads)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            if (!bench_int_opt("moe_bench", argv[i], argv[i + 1], 1, MAX_REPS, &o.reps)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--layers") && i + 1 < argc) {
            if (!bench_int_opt("moe_bench", argv[i], argv[i + 1], 1, MAX_LAYERS, &o.layers))
                return 2;
            i++;
        } else {
            fprintf(stderr, "usage: moe_bench [--json] [--quick] [--scheme NAME] [--tokens T] "
                            "[--threads N] [--reps N] [--layers N]\n");
            return 2;
        }
    }
    if (o.scheme) {
        size_t si = 0, n = sizeof k_schemes / sizeof k_schemes[0];
        while (si < n && strcmp(o.scheme, k_schemes[si].name) != 0) si++;
        if (si == n) {
            fprintf(stderr, "moe_bench: no scheme '%s'; the schemes:", o.scheme);
            for (si = 0; si < n; si++) fprintf(stderr, " %s", k_schemes[si].name);
            fprintf(stderr, "\n");
            return 2;
        }
    }
    if (o.quick && o.tokens >= 128) {
        fprintf(stderr, "moe_bench: --quick runs T = 1 and 32 only\n");
        return 2;
    }
    if (o.quick) g_E = 16;
    const int Ts_full[] = {1, 32, 128, 512}, Ts_quick[] = {1, 32};
    const int *Ts = o.quick ? Ts_quick : Ts_full;
    int nT = o.quick ? 2 : 4;
    int maxT = 0;
    for (int i = 0; i < nT; i++) maxT = Ts[i] > maxT ? Ts[i] : maxT;

    /* 512 MiB with --quick too: the read probes need PROBE_SPAN regions, and
     * the smoke test runs them (without waiting: g_wait_s). */
    if (o.quick) g_wait_s = 0;
    if (!probes_init(512)) {
        fprintf(stderr, "moe_bench: out of memory for the 512 MiB read probe\n");
        return 1;
    }
    sample_limits(1, o.quick ? 1 : 5);
    sample_limits(2, o.quick ? 1 : 5);
    whole_init();

    /* Routing draws shared by every scheme and the baseline. */
    int max_reps = 0;
    for (int i = 0; i < nT; i++)
        max_reps = reps_for(&o, Ts[i]) > max_reps ? reps_for(&o, Ts[i]) : max_reps;
    int draws = max_reps + 2;
    int32_t *ids[4];
    float *wts[4];
    for (int ti = 0; ti < nT; ti++) {
        ids[ti] = malloc(sizeof(int32_t) * (size_t)(Ts[ti] * TOPK * draws));
        wts[ti] = malloc(sizeof(float) * (size_t)(Ts[ti] * TOPK * draws));
        for (int d = 0; d < draws; d++) {
            draw_routing(Ts[ti], ids[ti] + d * Ts[ti] * TOPK, wts[ti] + d * Ts[ti] * TOPK);
        }
    }
    uint16_t *x = make_x(maxT);
    uint16_t *out = malloc(sizeof(uint16_t) * (size_t)maxT * (size_t)g_H);

    /* OpenBLAS baseline: one fp32 layer (far above L3), same draws. */
    double blas_ms[4][3];
    int blas_attempts[4][3] = {{0}};
    double blas_waited = 0; /* seconds, every OpenBLAS case (await_whole) */
    for (int i = 0; i < 4; i++) blas_ms[i][0] = blas_ms[i][1] = blas_ms[i][2] = (double)NAN;
    {
        blas_layer bl;
        size_t per = (size_t)g_E * (size_t)g_I * (size_t)g_H;
        for (int p = 0; p < 3; p++) {
            bl.w[p] = malloc(per * sizeof(float));
            for (size_t i = 0; i < per; i++) bl.w[p][i] = (float)((int)(i % 61) - 30) * 1e-3f;
        }
        size_t rows = (size_t)maxT * TOPK;
        float *X = malloc(rows * (size_t)g_H * 4), *G = malloc(rows * (size_t)g_I * 4),
              *U = malloc(rows * (size_t)g_I * 4), *Y = malloc(rows * (size_t)g_H * 4);
        for (size_t i = 0; i < rows * (size_t)g_H; i++) X[i] = (float)(uni() - 0.5);
        for (int threads = 1; threads <= 2; threads++) {
            if (o.threads && o.threads != threads) continue;
            openblas_set_num_threads(threads);
            for (int ti = 0; ti < nT; ti++) {
                int T = Ts[ti], reps = reps_for(&o, T);
                if (o.tokens && o.tokens != T) continue;
                double v[256];
                for (int attempt = 1;; attempt++) {
                    probe pr;
                    double waited = 0;
                    const bool before = await_whole(&pr, &waited);
                    for (int r = 0; r < reps + 2; r++) {
                        double dt = blas_run(&bl, T, ids[ti] + r * T * TOPK, X, G, U, Y);
                        if (r >= 2) v[r - 2] = dt;
                    }
                    const bool whole = machine_whole(&pr) && before;
                    blas_waited += waited;
                    if (whole || attempt == MAX_ATTEMPTS) {
                        blas_attempts[ti][threads] = attempt;
                        break;
                    }
                }
                blas_ms[ti][threads] = median(v, reps) * 1e3;
            }
        }
        openblas_set_num_threads(1);
        for (int p = 0; p < 3; p++) free(bl.w[p]);
        free(X);
        free(G);
        free(U);
        free(Y);
    }

    int nl = o.layers ? o.layers : o.quick ? 1 : 0;
    /* one result per scheme, thread count (1, 2) and token count */
    const size_t max_results = sizeof k_schemes / sizeof k_schemes[0] * 2 * (size_t)nT;
    result *results = calloc(max_results, sizeof(result));
    if (!results) {
        fprintf(stderr, "moe_bench: out of memory for %zu results\n", max_results);
        return 1;
    }
    int nres = 0;
    for (size_t si = 0; si < sizeof k_schemes / sizeof k_schemes[0]; si++) {
        const scheme_def *s = &k_schemes[si];
        if (o.scheme && strcmp(o.scheme, s->name) != 0) continue;
        sample_limits(1, o.quick ? 1 : 3);
        sample_limits(2, o.quick ? 1 : 3);
        int layers = nl ? nl : cold_layers(s);
        moeq_moe *L[MAX_LAYERS];
        moeq_config *C[MAX_LAYERS];
        double tb = bench_now(), rss0 = rss_mb();
        for (int i = 0; i < layers; i++) L[i] = build_layer(s, &C[i]);
        double expert_bytes = (double)moeq__moe_expert_bytes(L[0], 0);
        if (!o.json) {
            fprintf(stderr,
                    "%s: %d layers built in %.1f s, %.3f MB per expert (%.4f bytes/weight); "
                    "resident %.0f MB per layer (its weights: %.0f MB)\n",
                    s->name, layers, bench_now() - tb, expert_bytes / 1e6,
                    expert_bytes / (3.0 * g_H * g_I), (rss_mb() - rss0) / layers,
                    expert_bytes * g_E / 1e6);
        }
        for (int threads = 1; threads <= 2; threads++) {
            if (o.threads && o.threads != threads) continue;
            moeq_ctx *ctx = NULL;
            moeq_ctx_options co = {threads, 0};
            moeq_error err;
            if (moeq_ctx_create(&co, &ctx, &err) != MOEQ_OK) die("ctx", &err);
            for (int ti = 0; ti < nT; ti++) {
                int T = Ts[ti], reps = reps_for(&o, T);
                if (o.tokens && o.tokens != T) continue;
                result *r = &results[nres++];
                r->scheme = s->name;
                r->T = T;
                r->threads = threads;
                r->n = reps;
                for (r->attempts = 1;; r->attempts++) {
                    const bool before = await_whole(&r->probe[0], &r->waited);
                    for (int rep = 0; rep < reps + 2; rep++) {
                        const int32_t *id = ids[ti] + rep * T * TOPK;
                        const float *w = wts[ti] + rep * T * TOPK;
                        moeq_moe *layer = L[rep % layers];
                        double t0 = bench_now();
                        if (moeq_moe_apply(layer, ctx, MOEQ_DTYPE_BF16, x, T, TOPK, id, w,
                                           MOEQ_DTYPE_BF16, out, &err) != MOEQ_OK)
                            die("apply", &err);
                        double dt = bench_now() - t0;
                        if (rep >= 2) {
                            r->t[rep - 2] = dt;
                            r->bytes[rep - 2] = distinct_experts(T, id) * expert_bytes;
                        }
                    }
                    r->contended = !(machine_whole(&r->probe[1]) && before);
                    if (!r->contended || r->attempts == MAX_ATTEMPTS) break;
                }
            }
            moeq_ctx_destroy(ctx);
        }
        for (int i = 0; i < layers; i++) {
            moeq_moe_destroy(L[i]);
            moeq_config_destroy(C[i]);
        }
    }
    sample_limits(1, o.quick ? 1 : 5);
    sample_limits(2, o.quick ? 1 : 5);

    double bw[3], peak[3], ipeak[N_INS][3];
    for (int t = 1; t <= 2; t++) {
        bw[t] = sample_median(&g_bw[t]);
        peak[t] = sample_median(&g_peak[t]);
        for (int k = 0; k < N_INS; k++) ipeak[k][t] = sample_median(&g_ipeak[k][t]);
    }
    if (!o.json) {
        printf("machine: read bandwidth %.1f GB/s (1 thread), %.1f GB/s (2 threads); FP32 FMA peak "
               "%.1f GFLOP/s (1), %.1f GFLOP/s (2); kernels: %s\n",
               bw[1], bw[2], peak[1], peak[2], moeq__kern_best(false)->name);
        printf("instruction peaks, GOP/s (1 thread, 2 threads; a thread pinned to each CPU):");
        for (int k = 0; k < N_INS; k++) {
            if (g_ipeak[k][1].n) printf("  %s %.1f, %.1f", k_ins[k].name, ipeak[k][1], ipeak[k][2]);
        }
        printf("\n");
        printf("layer: %d experts, top-%d, hidden %d, intermediate %d; bf16 in/out\n", g_E, TOPK,
               g_H, g_I);
        printf("%-12s %5s %3s %9s %19s %8s %8s %8s %8s %8s %6s %s\n", "scheme", "T", "thr", "ms",
               "(min..max)", "GB/s", "GFLOP/s", "mem_x", "comp_x", "blas_x", "%peak",
               "instruction (gate+up/down)");
    }
    int retried = 0, contended = 0;
    double waited = blas_waited;
    for (int i = 0; i < nres; i++) {
        result *r = &results[i];
        /* Judged again against the run's final read-probe median (the
         * attempts were judged against the median so far). */
        r->contended = !(probe_whole(&r->probe[0], probe_bw_ref()) &&
                         probe_whole(&r->probe[1], probe_bw_ref()));
        int ti = 0;
        while (Ts[ti] != r->T) ti++;
        double flops = 2.0 * r->T * TOPK * 3.0 * g_H * g_I;
        double gb[MAX_REPS], memx[MAX_REPS], tt[MAX_REPS], bytes_sum = 0;
        double tmin = 1e300, tmax = 0;
        for (int j = 0; j < r->n; j++) {
            gb[j] = r->bytes[j] / r->t[j] / 1e9;
            memx[j] = r->t[j] / (r->bytes[j] / (bw[r->threads] * 1e9));
            tt[j] = r->t[j];
            bytes_sum += r->bytes[j];
            tmin = r->t[j] < tmin ? r->t[j] : tmin;
            tmax = r->t[j] > tmax ? r->t[j] : tmax;
        }
        double ms = median(tt, r->n) * 1e3;
        double gbps = median(gb, r->n), mem_x = median(memx, r->n);
        double gflops = flops / (ms * 1e-3) / 1e9;
        double comp_x = (ms * 1e-3) / (flops / (peak[r->threads] * 1e9));
        double blas_x = ms / blas_ms[ti][r->threads];
        /* The instruction floor: gate and up (2/3 of the flops) at the peak of
         * gemm1's instruction, down (1/3) at gemm2's (case_ins). */
        const ins_id i1 = case_ins(r->scheme, false), i2 = case_ins(r->scheme, true);
        const double p1 = ipeak[i1][r->threads], p2 = ipeak[i2][r->threads];
        const double ins_floor_s = (flops * 2 / 3) / (p1 * 1e9) + (flops / 3) / (p2 * 1e9);
        const double ins_x = (ms * 1e-3) / ins_floor_s;
        const bool ins_ok = isfinite(ins_x);
        if (o.json) {
            printf("{\"scheme\": \"%s\", \"tokens\": %d, \"threads\": %d, \"ms\": %.4f, "
                   "\"ms_min\": %.4f, \"ms_max\": %.4f, \"weight_gbps\": %.3f, \"gflops\": %.3f, "
                   "\"mem_floor_ratio\": %.4f, \"compute_floor_ratio\": %.4f, "
                   "\"openblas_ratio\": %.4f, \"openblas_ms\": %.4f, \"weight_bytes\": %.0f, "
                   "\"bandwidth_gbps\": %.3f, \"peak_gflops\": %.3f, \"kernels\": \"%s\", "
                   "\"attempts\": %d, \"contended\": %s, \"openblas_attempts\": %d, "
                   "\"probe_gflops\": [%.1f, %.1f], \"probe_gbps\": [%.1f, %.1f], "
                   "\"waited_s\": %.2f, ",
                   r->scheme, r->T, r->threads, ms, tmin * 1e3, tmax * 1e3, gbps, gflops, mem_x,
                   comp_x, blas_x, blas_ms[ti][r->threads], bytes_sum / r->n, bw[r->threads],
                   peak[r->threads], moeq__kern_best(false)->name, r->attempts,
                   r->contended ? "true" : "false", blas_attempts[ti][r->threads],
                   r->probe[0].gflops, r->probe[1].gflops, r->probe[0].gbps, r->probe[1].gbps,
                   r->waited);
            if (ins_ok) {
                printf("\"instr\": \"%s\", \"instr_peak_gops\": %.3f, \"instr_down\": \"%s\", "
                       "\"instr_down_peak_gops\": %.3f, \"instr_floor_ratio\": %.4f, "
                       "\"instr_peak_fraction\": %.4f}\n",
                       k_ins[i1].name, p1, k_ins[i2].name, p2, ins_x, 1 / ins_x);
            } else {
                printf("\"instr\": null, \"instr_peak_gops\": null, \"instr_down\": null, "
                       "\"instr_down_peak_gops\": null, \"instr_floor_ratio\": null, "
                       "\"instr_peak_fraction\": null}\n");
            }
        } else {
            char range[64];
            snprintf(range, sizeof range, "(%.3f..%.3f)", tmin * 1e3, tmax * 1e3);
            char insn[48] = "-";
            if (ins_ok && i1 == i2) snprintf(insn, sizeof insn, "%s", k_ins[i1].name);
            if (ins_ok && i1 != i2)
                snprintf(insn, sizeof insn, "%s/%s", k_ins[i1].name, k_ins[i2].name);
            printf("%-12s %5d %3d %9.3f %19s %8.2f %8.1f %8.2f %8.2f %8.2f %5.0f%% %s%s\n",
                   r->scheme, r->T, r->threads, ms, range, gbps, gflops, mem_x, comp_x, blas_x,
                   ins_ok ? 100 / ins_x : (double)NAN, insn, case_mark(r->attempts, r->contended));
            retried += r->attempts > 1;
            contended += r->contended;
            waited += r->waited;
        }
    }
    if (!o.json) {
        print_probe_summary(waited, retried, contended);
        printf("openblas (fp32, pre-dequantized) ms:");
        for (int ti = 0; ti < nT; ti++) {
            printf("  T=%d: %.3f (1 thr) %.3f (2 thr)", Ts[ti], blas_ms[ti][1], blas_ms[ti][2]);
        }
        printf("\n");
    }
    free(results);
    free(x);
    free(out);
    for (int ti = 0; ti < nT; ti++) {
        free(ids[ti]);
        free(wts[ti]);
    }
    free(g_stream);
    return 0;
}

/*
 * moe_bench.c - one Qwen3-30B-A3B-shaped MoE layer (128 experts, top-8,
 * hidden 2048, intermediate 768) per scheme, with cold weights: several
 * layers are built and cycled, and the routing is redrawn for every run, so
 * the experts a run touches come from DRAM (each layer is far above the
 * 32 MiB L3).  Measured in the same run, for the ratios:
 *   - read bandwidth: AVX2 loads folded by XOR (bench_read_sum) over 512 MiB, 1 and 2 threads;
 *   - the FP32 FMA peak: 12 independent ymm FMA chains per thread;
 *   - the peak of every instruction the kernels' inner loops run on this CPU
 *     (k_ins: vdpbf16ps, vpdpbusd, or the AVX2 sequences), 12 chains per
 *     thread, threads pinned, so that each case is also reported against the
 *     peak of its own instruction (case_ins);
 *   - OpenBLAS sgemm on the same shapes with weights already dequantized to
 *     fp32 (per expert: M = the rows routed to it; gate, up and down; the
 *     same routing draws), its thread count set to the case's.
 * Bandwidth and peak are sampled before every scheme and at the end; the
 * ratios use the medians of all samples.
 *
 * Each case (and each OpenBLAS case) is measured when the machine is as the
 * floors describe it (machine_whole): a short 2-thread FMA probe, then a
 * 64 MiB 2-thread read, a thread pinned to each CPU.  On this shared VM the
 * two vCPUs at times deliver one CPU's worth for seconds on end, and the
 * 2-thread read bandwidth moves between about 33 and 55 GB/s for tens of
 * seconds at a time (most likely the host placing the vCPUs on one core
 * complex or two); a case measured then says nothing about the code against
 * the run's floors.  The machine is whole when the FMA probe reads 80% or
 * more of twice the run's 1-thread peak and the read 90-115% of the run's
 * 2-thread bandwidth median.  Before a case the probe is repeated every
 * 50 ms, up to g_wait_s seconds (--quick: not at all), until the machine is
 * whole; where it still is not, or the probe after the case finds it not
 * whole, the case is measured again, up to MAX_ATTEMPTS times.  The decisions rest on the
 * probes alone, never on the case's own times.  At the end every case's
 * last probes are judged again against the run's final bandwidth median
 * (the one the ratios use); a case whose probes fail is marked (JSON
 * "contended": true, a `*` in the table).  JSON "attempts" counts a case's
 * runs, "waited_s" its time waiting, "probe_gflops" and "probe_gbps" what
 * its probes read before and after the kept attempt.
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
#define _GNU_SOURCE /* pthread_setaffinity_np, sched_getaffinity: machine_whole's probe */
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


/* ---- machine limits ------------------------------------------------------------ */

typedef struct thr_arg {
    const float *p;
    size_t n;
    long iters;
    double out;
    pthread_barrier_t *bar;
    double t0, t1;
    bool pinned; /* the thread runs on CPU cpu alone (machine_whole, the peaks) */
    int cpu;
    int ins; /* ins_thread: which instruction (k_ins) */
} thr_arg;

/* Pins the calling thread to cpu (Linux; elsewhere nothing). */
static void pin_to(int cpu) {
#ifdef __linux__
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET((size_t)cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
#else
    (void)cpu;
#endif
}

static void *bw_thread(void *vp) {
    thr_arg *a = vp;
    if (a->pinned) pin_to(a->cpu);
    pthread_barrier_wait(a->bar);
    a->t0 = bench_now();
    a->out = (double)bench_read_sum(a->p, a->n * sizeof(float));
    a->t1 = bench_now();
    return NULL;
}

static void *fma_thread(void *vp) {
    thr_arg *a = vp;
    if (a->pinned) pin_to(a->cpu);
    pthread_barrier_wait(a->bar);
    a->t0 = bench_now();
    a->out = bench_fma_loop(a->iters);
    a->t1 = bench_now();
    return NULL;
}

/* ---- instruction peaks --------------------------------------------------------------- */

/* The instructions the kernels' inner loops run, each with its peak probe
 * (bench_common.h: 12 independent chains per thread).  Peaks are in GOP/s,
 * a multiply-add counting 2, as the cases' GFLOP/s count them. */
typedef enum ins_id { INS_FMA, INS_MADDWD, INS_MADDUBS, INS_DPBF16, INS_DPBUSD, N_INS } ins_id;
typedef struct ins_def {
    const char *name;
    double ops_per_iter;
    double (*loop)(long iters);
} ins_def;

#if HAVE_X86_BENCH && defined(MOEQ_HAVE_AVX512) && MOEQ_HAVE_AVX512
#define BENCH_AVX512_LOOP(f) f
#else
#define BENCH_AVX512_LOOP(f) NULL
#endif
#if HAVE_X86_BENCH
#define BENCH_AVX2_LOOP(f) f
#else
#define BENCH_AVX2_LOOP(f) NULL
#endif

static const ins_def k_ins[N_INS] = {
    [INS_FMA] = {"fma_f32", BENCH_FMA_FLOPS_PER_ITER, bench_fma_loop},
    [INS_MADDWD] = {"vpmaddwd", BENCH_AVX2_LOOP(BENCH_MADDWD_OPS_PER_ITER),
                    BENCH_AVX2_LOOP(bench_maddwd_loop)},
    [INS_MADDUBS] = {"vpmaddubsw", BENCH_AVX2_LOOP(BENCH_MADDUBS_OPS_PER_ITER),
                     BENCH_AVX2_LOOP(bench_maddubs_loop)},
    [INS_DPBF16] = {"vdpbf16ps", BENCH_AVX512_LOOP(BENCH_DPBF16_OPS_PER_ITER),
                    BENCH_AVX512_LOOP(bench_dpbf16_loop)},
    [INS_DPBUSD] = {"vpdpbusd", BENCH_AVX512_LOOP(BENCH_DPBUSD_OPS_PER_ITER),
                    BENCH_AVX512_LOOP(bench_dpbusd_loop)},
};

/* Whether this CPU, under the kernel table that runs (moeq__kern_best),
 * runs instruction i: the AVX-512 ones where the table is avx512 (vdpbf16ps
 * where the CPU has AVX512_BF16 too), the AVX2 ones where it is avx2. */
static bool ins_runs(ins_id i) {
    if (!k_ins[i].loop) return false;
    const char *kern = moeq__kern_best(false)->name;
    const bool avx512 = strcmp(kern, "avx512") == 0, avx2 = strcmp(kern, "avx2") == 0;
    switch (i) {
        case INS_FMA: return true;
        case INS_MADDWD:
        case INS_MADDUBS: return avx2;
        case INS_DPBF16: return avx512 && moeq__cpu_avx512bf16();
        case INS_DPBUSD: return avx512;
        default: return false;
    }
}

/* The instruction a projection's inner loop runs (gemm1: gate and up, the
 * bfloat16 input of weight-only layers, or the activations' codes; gemm2:
 * down, on the float32 intermediate, quantized again where the scheme
 * quantizes activations), as src/layer/moe_fast.c picks them: int8
 * activations -> idot (vpdpbusd; AVX2: vpmaddwd on int8 codes as int16,
 * vpmaddubsw on int4 codes), NVFP4 activations -> fdot (vpdpbusd; AVX2:
 * vpmaddubsw), bfloat16 rows (FP8 activation codes, weight-only gemm1) ->
 * tile_bf16 / gemv_bf16 (vdpbf16ps where the CPU has it, FP32 FMA
 * elsewhere), float32 rows (weight-only gemm2) -> the FP32 tile and gemv.
 * The choice does not depend on T (the gemv and the tiles of a path run the
 * same instruction). */
static ins_id case_ins(const char *scheme, bool gemm2) {
    const bool avx512 = strcmp(moeq__kern_best(false)->name, "avx512") == 0;
    if (strstr(scheme, "a8_int8"))
        return avx512 ? INS_DPBUSD : strncmp(scheme, "w4", 2) == 0 ? INS_MADDUBS : INS_MADDWD;
    if (strstr(scheme, "a4_nvfp4")) return avx512 ? INS_DPBUSD : INS_MADDUBS;
    const bool bf16 = avx512 && moeq__cpu_avx512bf16();
    /* MXFP8 inputs, and FP8 inputs per 128 on MXFP4's groups of 32: float rows */
    if (strstr(scheme, "a8_mxfp") || strstr(scheme, "w4a8_mxfp4")) return INS_FMA;
    if (strstr(scheme, "a8_fp8")) return bf16 ? INS_DPBF16 : INS_FMA;
    return bf16 && !gemm2 ? INS_DPBF16 : INS_FMA; /* weight-only */
}

static void *ins_thread(void *vp) {
    thr_arg *a = vp;
    if (a->pinned) pin_to(a->cpu);
    pthread_barrier_wait(a->bar);
    a->t0 = bench_now();
    a->out = k_ins[a->ins].loop(a->iters);
    a->t1 = bench_now();
    return NULL;
}

/* One sample of `threads` threads running fn; returns the wall time. */
static double run_threads(int threads, void *(*fn)(void *), thr_arg *args) {
    pthread_t tid[8];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++) {
        args[i].bar = &bar;
        pthread_create(&tid[i], NULL, fn, &args[i]);
    }
    double t0 = 1e300, t1 = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
        t0 = args[i].t0 < t0 ? args[i].t0 : t0;
        t1 = args[i].t1 > t1 ? args[i].t1 : t1;
    }
    pthread_barrier_destroy(&bar);
    return t1 - t0;
}

enum { MAX_SAMPLES = 512 };
typedef struct samples {
    double v[MAX_SAMPLES];
    int n;
} samples;
static samples g_bw[3], g_peak[3]; /* by thread count */
static samples g_ipeak[N_INS][3];  /* instruction peaks, GOP/s, by thread count */
static float *g_stream;
static size_t g_stream_n;
/* The CPUs the probes' threads are pinned to (probe_cpus_init; Linux;
 * unpinned, two new threads often start on one CPU and share it for the
 * whole probe, before the scheduler moves one). */
static int g_probe_cpu[2];
static bool g_probe_pinned;

static void probe_cpus_init(void) {
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++) {
        if (CPU_ISSET((size_t)c, &set)) g_probe_cpu[n++] = c;
    }
    g_probe_pinned = n == 2;
#endif
}

static void sample_limits(int reps) {
    for (int threads = 1; threads <= 2; threads++) {
        for (int r = 0; r < reps; r++) {
            thr_arg a[2];
            memset(a, 0, sizeof a);
            for (int i = 0; i < threads; i++) {
                a[i].p = g_stream + g_stream_n / (size_t)threads * (size_t)i;
                a[i].n = g_stream_n / (size_t)threads;
            }
            double dt = run_threads(threads, bw_thread, a);
            if (g_bw[threads].n < MAX_SAMPLES)
                g_bw[threads].v[g_bw[threads].n++] = (double)g_stream_n * 4 / dt / 1e9;
            /* the peaks: each instruction this CPU runs, a thread pinned to each CPU */
            for (int k = 0; k < N_INS; k++) {
                if (!ins_runs((ins_id)k)) continue;
                /* about 7 ms per sample at the FP32 FMA loop's rate (two FMAs a cycle) */
                long iters = (long)(4000000.0 * BENCH_FMA_FLOPS_PER_ITER / k_ins[k].ops_per_iter);
                for (int i = 0; i < threads; i++) {
                    a[i].iters = iters;
                    a[i].ins = k;
                    a[i].pinned = g_probe_pinned;
                    a[i].cpu = g_probe_cpu[i];
                }
                dt = run_threads(threads, ins_thread, a);
                samples *sm = &g_ipeak[k][threads];
                if (sm->n < MAX_SAMPLES)
                    sm->v[sm->n++] = (double)iters * k_ins[k].ops_per_iter * threads / dt / 1e9;
                if (k == INS_FMA && g_peak[threads].n < MAX_SAMPLES)
                    g_peak[threads].v[g_peak[threads].n++] = sm->v[sm->n - 1];
            }
        }
    }
}

static double sample_median(const samples *s) {
    double tmp[MAX_SAMPLES];
    memcpy(tmp, s->v, sizeof(double) * (size_t)s->n);
    return s->n ? median(tmp, s->n) : (double)NAN;
}

/* machine_whole's references: twice the run's 1-thread FMA peak, GFLOP/s (the
 * 1-thread median: a sample taken while the two vCPUs were short would pull
 * a 2-thread reference down with it), 0 where the process has fewer than two
 * CPUs; and the median of the run's 2-thread read-bandwidth samples so far
 * (sample_limits), where g_stream holds at least PROBE_SPAN read probes
 * (g_probe_reads). */
static double g_whole_ref;
static bool g_probe_reads;
static size_t g_probe_at; /* where in g_stream the next read probe starts (floats) */
enum { MAX_ATTEMPTS = 3, PROBE_SPAN = 8 };
static double g_wait_s = 3;                  /* await_whole's limit: 0 with --quick (one probe) */
#define PROBE_READ_FLOATS ((size_t)16 << 20) /* 64 MiB per read probe: twice the L3 */

static void whole_init(void) {
    g_whole_ref = 0;
#ifdef __linux__
    if (!g_probe_pinned) return;
#else
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) return;
#endif
    g_whole_ref = 2 * sample_median(&g_peak[1]);
    g_probe_reads = g_stream_n >= PROBE_SPAN * PROBE_READ_FLOATS;
}

/* What one probe read: 2-thread FMA GFLOP/s and read GB/s (0: not run). */
typedef struct probe {
    double gflops, gbps;
} probe;

/* Whether a probe's figures describe the machine the floors describe: FMA at
 * 80% or more of g_whole_ref, read bandwidth (where measured) within 90-115%
 * of bw_ref (file head). */
static bool probe_whole(const probe *p, double bw_ref) {
    if (g_whole_ref <= 0) return true;
    return p->gflops >= 0.8 * g_whole_ref &&
           (p->gbps == 0 || (p->gbps >= 0.9 * bw_ref && p->gbps <= 1.15 * bw_ref));
}

/* Whether the machine is as the floors describe it now (probe_whole against
 * the median of the run's 2-thread read samples so far): one 2-thread FMA
 * probe (about 4 ms), then, where g_probe_reads, one 2-thread read of the 64
 * MiB of g_stream after the previous probe's (about 2 ms; the region comes
 * round again after PROBE_SPAN probes, long out of the L3), a thread pinned
 * to each CPU.  *got: what it read. */
static bool machine_whole(probe *got) {
    *got = (probe){0, 0};
    if (g_whole_ref <= 0) return true;
    thr_arg a[2];
    memset(a, 0, sizeof a);
    const long iters = 2000000;
    a[0].iters = a[1].iters = iters;
    for (int i = 0; i < 2; i++) {
        a[i].pinned = g_probe_pinned;
        a[i].cpu = g_probe_cpu[i];
    }
    double dt = run_threads(2, fma_thread, a);
    got->gflops = (double)iters * BENCH_FMA_FLOPS_PER_ITER * 2 / dt / 1e9;
    if (g_probe_reads) {
        if (g_probe_at + PROBE_READ_FLOATS > g_stream_n) g_probe_at = 0;
        for (int i = 0; i < 2; i++) {
            a[i].p = g_stream + g_probe_at + PROBE_READ_FLOATS / 2 * (size_t)i;
            a[i].n = PROBE_READ_FLOATS / 2;
        }
        g_probe_at += PROBE_READ_FLOATS;
        dt = run_threads(2, bw_thread, a);
        got->gbps = (double)PROBE_READ_FLOATS * 4 / dt / 1e9;
    }
    return probe_whole(got, sample_median(&g_bw[2]));
}

/* Probes until the machine is whole (machine_whole), every 50 ms for up to
 * g_wait_s seconds after the first probe; *got: the last probe's figures;
 * *waited: that time added.  Returns whether it became whole. */
static bool await_whole(probe *got, double *waited) {
    if (machine_whole(got)) return true;
    const double t0 = bench_now();
    bool whole = false;
    while (!whole && bench_now() - t0 < g_wait_s) {
        nanosleep(&(struct timespec){0, 50000000}, NULL);
        whole = machine_whole(got);
    }
    *waited += bench_now() - t0;
    return whole;
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
                       bandwidth median */
    probe probe[2]; /* what the last attempt's probes read, before and after */
    double waited;  /* seconds spent waiting for the machine (await_whole), all attempts */
    double ms, ms_min, ms_max, gbps, gflops, bytes_med;
    double t[MAX_REPS];
    double bytes[MAX_REPS];
    int n;
} result;

/* An option's integer in [lo, hi], or false after saying what was wrong. */
static bool int_opt(const char *opt, const char *arg, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (errno || end == arg || *end || v < lo || v > hi) {
        fprintf(stderr, "moe_bench: %s '%s': expected an integer from %d to %d\n", opt, arg, lo,
                hi);
        return false;
    }
    *out = (int)v;
    return true;
}

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
            if (!int_opt(argv[i], argv[i + 1], 1, 512, &o.tokens)) return 2;
            i++;
            if (o.tokens != 1 && o.tokens != 32 && o.tokens != 128 && o.tokens != 512) {
                fprintf(stderr, "moe_bench: --tokens %d: the cases are 1, 32, 128 and 512\n",
                        o.tokens);
                return 2;
            }
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (!int_opt(argv[i], argv[i + 1], 1, 2, &o.threads)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            if (!int_opt(argv[i], argv[i + 1], 1, MAX_REPS, &o.reps)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--layers") && i + 1 < argc) {
            if (!int_opt(argv[i], argv[i + 1], 1, MAX_LAYERS, &o.layers)) return 2;
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
    g_stream_n = (size_t)512 << 18;
    if (o.quick) g_wait_s = 0;
    g_stream = aligned_alloc(64, g_stream_n * 4);
    for (size_t i = 0; i < g_stream_n; i++) g_stream[i] = (float)(i & 1023);
    probe_cpus_init();
    sample_limits(o.quick ? 1 : 5);
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
        sample_limits(o.quick ? 1 : 3);
        int layers = nl ? nl : (strstr(s->name, "w8") ? 2 : 3);
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
    sample_limits(o.quick ? 1 : 5);

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
        /* Judged again against the run's final bandwidth median, the one the
         * ratios use (the attempts were judged against the median so far). */
        r->contended = !(probe_whole(&r->probe[0], bw[2]) && probe_whole(&r->probe[1], bw[2]));
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
                   ins_ok ? 100 / ins_x : (double)NAN, insn,
                   r->contended      ? " *"
                   : r->attempts > 1 ? " (again)"
                                     : "");
            retried += r->attempts > 1;
            contended += r->contended;
            waited += r->waited;
        }
    }
    if (!o.json) {
        printf("probes (a CPU short, or read bandwidth outside 90-115%% of the run's): waited "
               "%.1f s in all for the machine; measured again (up to %d times): %d case(s); "
               "marked (*, probes outside the run's final figures): %d\n",
               waited, MAX_ATTEMPTS, retried, contended);
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

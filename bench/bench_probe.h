/*
 * bench_probe.h - the machine's floors, sampled in the benchmark's own run,
 * and whether the machine is as they describe it when a case runs: what
 * moe_bench and linear_bench share.
 *
 * Floors (sample_limits, at a thread count; medians of all samples):
 *   - read bandwidth: bench_read_sum over a 512 MiB stream (g_stream), the
 *     threads each reading their share, timed from a barrier to the last
 *     thread's end;
 *   - the peak of every instruction the kernels' inner loops run on this CPU
 *     (k_ins: FP32 FMA in ymm and, under avx512, in zmm; vdpbf16ps,
 *     vpdpbusd, or the AVX2 sequences), 12 chains per thread, a thread
 *     pinned to each CPU.
 *
 * Whole machine (machine_whole): a short 2-thread FMA probe, then a 64 MiB
 * 2-thread read, a thread pinned to each CPU.  On a shared VM the two vCPUs
 * at times deliver one CPU's worth for seconds on end, and the read
 * bandwidth moves by tens of percent for tens of seconds at a time (most
 * likely the host placing the vCPUs on one core complex or two); a case
 * measured then says nothing about the code against the run's floors.  The machine is whole
 * when the FMA probe reads 80% or more of twice the run's 1-thread peak and
 * the read 90-115% of the median of the run's read probes so far.
 * await_whole repeats the probe every 50 ms, up to g_wait_s seconds, until
 * the machine is whole.  The benchmarks measure a case again (up to
 * MAX_ATTEMPTS times) where it was not whole before or after, and mark the
 * cases whose probes fail against the run's final figures.
 *
 * Header-only, static: each benchmark is one program.  Its file defines
 * _GNU_SOURCE before its first #include (Linux: pthread_setaffinity_np,
 * sched_getaffinity).
 */
#ifndef MOEQ_BENCH_PROBE_H
#define MOEQ_BENCH_PROBE_H

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"
#include "bench_layer.h"
#include "kernels.h"

enum { BENCH_MAX_THREADS = 16 };

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
typedef enum ins_id {
    INS_FMA,
    INS_FMA512,
    INS_MADDWD,
    INS_MADDUBS,
    INS_DPBF16,
    INS_DPBUSD,
    N_INS
} ins_id;
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
    [INS_FMA512] = {"fma_f32_zmm", BENCH_AVX512_LOOP(BENCH_FMA512_FLOPS_PER_ITER),
                    BENCH_AVX512_LOOP(bench_fma512_loop)},
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
        case INS_FMA512: return avx512;
        case INS_MADDWD:
        case INS_MADDUBS: return avx2;
        case INS_DPBF16: return avx512 && moeq__cpu_avx512bf16();
        case INS_DPBUSD: return avx512;
        default: return false;
    }
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
    pthread_t tid[BENCH_MAX_THREADS];
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
/* by thread count (1 to BENCH_MAX_THREADS) */
static samples g_bw[BENCH_MAX_THREADS + 1], g_peak[BENCH_MAX_THREADS + 1];
static samples g_ipeak[N_INS][BENCH_MAX_THREADS + 1]; /* instruction peaks, GOP/s */
static float *g_stream;
static size_t g_stream_n;
/* The CPUs the probes' threads are pinned to (probe_cpus_init; Linux;
 * unpinned, two new threads often start on one CPU and share it for the
 * whole probe, before the scheduler moves one): the process's first
 * g_probe_ncpu CPUs (0 elsewhere: no pinning). */
static int g_probe_cpu[BENCH_MAX_THREADS];
static int g_probe_ncpu;

static void probe_cpus_init(void) {
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    for (int c = 0; c < CPU_SETSIZE && g_probe_ncpu < BENCH_MAX_THREADS; c++) {
        if (CPU_ISSET((size_t)c, &set)) g_probe_cpu[g_probe_ncpu++] = c;
    }
#endif
}

/* Allocates and fills g_stream (`mib` MiB: 512 for the floors, the read
 * probes need PROBE_SPAN x 64 MiB) and finds the probes' CPUs; false: out of
 * memory. */
static bool probes_init(size_t mib) {
    g_stream_n = mib << 18;
    g_stream = aligned_alloc(64, g_stream_n * sizeof(float));
    if (!g_stream) return false;
    for (size_t i = 0; i < g_stream_n; i++) g_stream[i] = (float)(i & 1023);
    probe_cpus_init();
    return true;
}

/* `reps` samples at `threads` threads (1 to BENCH_MAX_THREADS) of the read
 * bandwidth (unpinned) and of each instruction's peak (a thread pinned to
 * each CPU where the process has that many). */
static void sample_limits(int threads, int reps) {
    if (threads < 1 || threads > BENCH_MAX_THREADS) return;
    for (int r = 0; r < reps; r++) {
        thr_arg a[BENCH_MAX_THREADS];
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
                a[i].pinned = threads <= g_probe_ncpu;
                a[i].cpu = a[i].pinned ? g_probe_cpu[i] : 0;
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

static double sample_median(const samples *s) {
    double tmp[MAX_SAMPLES];
    memcpy(tmp, s->v, sizeof(double) * (size_t)s->n);
    return s->n ? median(tmp, s->n) : (double)NAN;
}

/* machine_whole's references: twice the run's 1-thread FMA peak, GFLOP/s (the
 * 1-thread median: a sample taken while the two vCPUs were short would pull
 * a 2-thread reference down with it), 0 where the process has fewer than two
 * CPUs, whole_init taking 3 samples where the benchmark has taken none; and
 * the median of the run's read probes so far (g_probe_bw, probe_bw_ref),
 * where g_stream holds at least PROBE_SPAN of them (g_probe_reads), with 5
 * taken by whole_init.  A probe's short read is judged against other short
 * reads, not against the floor's 512 MiB samples: on a Zen 5 VM the 64 MiB
 * read ran at 0.75-0.85 of those throughout, which marked every case. */
static double g_whole_ref;
static bool g_probe_reads;
static samples g_probe_bw; /* the last MAX_SAMPLES read probes' GB/s */
static size_t g_probe_reads_done;
static size_t g_probe_at; /* where in g_stream the next read probe starts (floats) */
enum { MAX_ATTEMPTS = 3, PROBE_SPAN = 8 };
static double g_wait_s = 3;                  /* await_whole's limit: 0 with --quick (one probe) */
#define PROBE_READ_FLOATS ((size_t)16 << 20) /* 64 MiB per read probe: twice the L3 */

/* One read probe: a 2-thread read of the 64 MiB of g_stream after the
 * previous probe's (about 2 ms; the region comes round again after
 * PROBE_SPAN probes, long out of the L3), a thread pinned to each CPU;
 * GB/s, kept in g_probe_bw. */
static double probe_read(void) {
    thr_arg a[2];
    memset(a, 0, sizeof a);
    if (g_probe_at + PROBE_READ_FLOATS > g_stream_n) g_probe_at = 0;
    for (int i = 0; i < 2; i++) {
        a[i].pinned = g_probe_ncpu >= 2;
        a[i].cpu = a[i].pinned ? g_probe_cpu[i] : 0;
        a[i].p = g_stream + g_probe_at + PROBE_READ_FLOATS / 2 * (size_t)i;
        a[i].n = PROBE_READ_FLOATS / 2;
    }
    g_probe_at += PROBE_READ_FLOATS;
    const double gbps = (double)PROBE_READ_FLOATS * 4 / run_threads(2, bw_thread, a) / 1e9;
    g_probe_bw.v[g_probe_reads_done++ % MAX_SAMPLES] = gbps;
    if (g_probe_bw.n < MAX_SAMPLES) g_probe_bw.n++;
    return gbps;
}

static void whole_init(void) {
    g_whole_ref = 0;
#ifdef __linux__
    if (g_probe_ncpu < 2) return;
#else
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) return;
#endif
    /* the references' samples, where the benchmark has not taken them */
    if (!g_peak[1].n) sample_limits(1, 3);
    if (!g_bw[2].n) sample_limits(2, 3);
    g_whole_ref = 2 * sample_median(&g_peak[1]);
    g_probe_reads = g_stream_n >= PROBE_SPAN * PROBE_READ_FLOATS;
    for (int i = 0; i < 5 && g_probe_reads; i++) probe_read();
}

/* The reference a probe's read is judged against: the median of the run's
 * read probes so far. */
static double probe_bw_ref(void) {
    return sample_median(&g_probe_bw);
}

/* What one probe read: 2-thread FMA GFLOP/s and read GB/s (0: not run). */
typedef struct probe {
    double gflops, gbps;
} probe;

/* Whether a probe's figures describe the machine the floors describe: FMA at
 * 80% or more of g_whole_ref, read bandwidth (where measured) within 90-115%
 * of bw_ref. */
static bool probe_whole(const probe *p, double bw_ref) {
    if (g_whole_ref <= 0) return true;
    return p->gflops >= 0.8 * g_whole_ref &&
           (p->gbps == 0 || (p->gbps >= 0.9 * bw_ref && p->gbps <= 1.15 * bw_ref));
}

/* Whether the machine is as the floors describe it now (probe_whole against
 * probe_bw_ref): one 2-thread FMA probe (about 4 ms), a thread pinned to each
 * CPU, then, where g_probe_reads, one read probe (probe_read).  *got: what
 * it read. */
static bool machine_whole(probe *got) {
    *got = (probe){0, 0};
    if (g_whole_ref <= 0) return true;
    thr_arg a[2];
    memset(a, 0, sizeof a);
    const long iters = 2000000;
    a[0].iters = a[1].iters = iters;
    for (int i = 0; i < 2; i++) {
        a[i].pinned = g_probe_ncpu >= 2;
        a[i].cpu = a[i].pinned ? g_probe_cpu[i] : 0;
    }
    double dt = run_threads(2, fma_thread, a);
    got->gflops = (double)iters * BENCH_FMA_FLOPS_PER_ITER * 2 / dt / 1e9;
    const double ref = probe_bw_ref(); /* the reads before this one */
    if (g_probe_reads) got->gbps = probe_read();
    return probe_whole(got, ref);
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

/* A table row's mark: " *" where the case's probes failed (contended),
 * " (again)" where it was measured more than once, else nothing. */
static const char *case_mark(int attempts, bool contended) {
    return contended ? " *" : attempts > 1 ? " (again)" : "";
}

/* The table's last line: the time spent waiting for the machine, the cases
 * measured again and the cases marked. */
static void print_probe_summary(double waited, int retried, int marked) {
    printf("probes (a CPU short, or a read outside 90-115%% of the run's reads): waited %.1f s "
           "in all for the machine; measured again (up to %d times): %d case(s); marked (*, "
           "probes outside the run's final figures): %d\n",
           waited, MAX_ATTEMPTS, retried, marked);
}

#endif

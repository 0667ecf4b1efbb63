/*
 * bench_common.h - what the benchmarks share: the clock, a xorshift
 * generator, the FP32 FMA loop that measures the machine's peak and the
 * loads-only loop that measures read bandwidth, and how many bytes of weights
 * a benchmark cycles through for them to come from DRAM.
 * Header-only (bench/CMakeLists.txt makes one program of each .c file).
 */
#ifndef MOEQ_BENCH_COMMON_H
#define MOEQ_BENCH_COMMON_H

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define HAVE_X86_BENCH 1
#else
#define HAVE_X86_BENCH 0
#endif

static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* An option's integer in [lo, hi] (the whole of arg, decimal), or false
 * after "PROG: OPT 'ARG': expected an integer from LO to HI" on stderr. */
static inline bool bench_int_opt(const char *prog, const char *opt, const char *arg, int lo, int hi,
                                 int *out) {
    char *end = NULL;
    errno = 0;
    long v = arg ? strtol(arg, &end, 10) : 0;
    if (!arg || errno || end == arg || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: %s '%s': expected an integer from %d to %d\n", prog, opt,
                arg ? arg : "", lo, hi);
        return false;
    }
    *out = (int)v;
    return true;
}

static inline uint64_t bench_xorshift(uint64_t *state) {
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

/* FLOPs one bench_fma_loop iteration does: 12 FMAs of 8 lanes, 2 flops each. */
#define BENCH_FMA_FLOPS_PER_ITER (12.0 * 8 * 2)

#if HAVE_X86_BENCH
/* 12 independent chains of ymm FMAs: 2 per cycle at most on this core. */
__attribute__((target("avx2,fma"), unused)) static double bench_fma_loop(long iters) {
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps(0.f), a1 = _mm256_set1_ps(1.f), a2 = _mm256_set1_ps(2.f),
           a3 = _mm256_set1_ps(3.f), a4 = _mm256_set1_ps(4.f), a5 = _mm256_set1_ps(5.f),
           a6 = _mm256_set1_ps(6.f), a7 = _mm256_set1_ps(7.f), a8 = _mm256_set1_ps(8.f),
           a9 = _mm256_set1_ps(9.f), a10 = _mm256_set1_ps(10.f), a11 = _mm256_set1_ps(11.f);
    for (long it = 0; it < iters; it++) {
        __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5));
        a0 = _mm256_fmadd_ps(a0, m, c);
        a1 = _mm256_fmadd_ps(a1, m, c);
        a2 = _mm256_fmadd_ps(a2, m, c);
        a3 = _mm256_fmadd_ps(a3, m, c);
        a4 = _mm256_fmadd_ps(a4, m, c);
        a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c);
        a7 = _mm256_fmadd_ps(a7, m, c);
        a8 = _mm256_fmadd_ps(a8, m, c);
        a9 = _mm256_fmadd_ps(a9, m, c);
        a10 = _mm256_fmadd_ps(a10, m, c);
        a11 = _mm256_fmadd_ps(a11, m, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float l[8];
    _mm256_storeu_ps(l, s);
    return (double)l[0];
}

/* The instruction peaks moe_bench compares each case with: loops of 12
 * independent chains of one instruction (or of the short sequence the AVX2
 * kernels use where AVX-512 has one accumulating instruction), each chain's
 * operand coming from its own result so that no step can be hoisted.
 * BENCH_*_OPS_PER_ITER: operations per iteration, a multiply-add counting 2.
 *   vpmaddwd + vpaddd (ymm): 8 lanes of 2 int16 products (AVX2 idot);
 *   vpmaddubsw + vpmaddwd + vpaddd (ymm): 16 pairs of u8 x s8 products
 *     widened and added into 8 int32 lanes (AVX2 fdot);
 *   vdpbf16ps (zmm): 16 lanes of 2 bfloat16 products;
 *   vpdpbusd (zmm): 16 lanes of 4 u8 x s8 products. */
#define BENCH_MADDWD_OPS_PER_ITER  (12.0 * 8 * 2 * 2)
#define BENCH_MADDUBS_OPS_PER_ITER (12.0 * 16 * 2 * 2)
#define BENCH_DPBF16_OPS_PER_ITER  (12.0 * 16 * 2 * 2)
#define BENCH_DPBUSD_OPS_PER_ITER  (12.0 * 16 * 4 * 2)

#define BENCH_CHAINS12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
/* iters steps of each of the 12 chains a0..a11, an empty asm on every chain
 * first so that no step can be hoisted: R is the register constraint, "+x"
 * for ymm chains, "+v" for zmm ones (the caller defines STEP(i)) */
#define BENCH_RUN_CHAINS12(iters, R)                                                               \
    for (long it = 0; it < (iters); it++) {                                                        \
        __asm__ volatile("" : R(a0), R(a1), R(a2), R(a3), R(a4), R(a5));                           \
        __asm__ volatile("" : R(a6), R(a7), R(a8), R(a9), R(a10), R(a11));                         \
        BENCH_CHAINS12(STEP)                                                                       \
    }
#define BENCH_YMM(a) "+x"(a)
#define BENCH_ZMM(a) "+v"(a)

__attribute__((target("avx2"), unused)) static double bench_maddwd_loop(long iters) {
    const __m256i x = _mm256_set1_epi16(3), c = _mm256_set1_epi32(1);
#define DECL(i) __m256i a##i = _mm256_set1_epi32(i);
    BENCH_CHAINS12(DECL)
#undef DECL
#define STEP(i) a##i = _mm256_add_epi32(_mm256_madd_epi16(a##i, x), c);
    BENCH_RUN_CHAINS12(iters, BENCH_YMM)
#undef STEP
    __m256i s = a0;
#define SUM(i) s = _mm256_xor_si256(s, a##i);
    BENCH_CHAINS12(SUM)
#undef SUM
    return (double)_mm256_extract_epi32(s, 0);
}

__attribute__((target("avx2"), unused)) static double bench_maddubs_loop(long iters) {
    const __m256i x = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1), c = _mm256_set1_epi32(1);
#define DECL(i) __m256i a##i = _mm256_set1_epi32(i);
    BENCH_CHAINS12(DECL)
#undef DECL
#define STEP(i) a##i = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(a##i, x), ones), c);
    BENCH_RUN_CHAINS12(iters, BENCH_YMM)
#undef STEP
    __m256i s = a0;
#define SUM(i) s = _mm256_xor_si256(s, a##i);
    BENCH_CHAINS12(SUM)
#undef SUM
    return (double)_mm256_extract_epi32(s, 0);
}

#if defined(MOEQ_HAVE_AVX512) && MOEQ_HAVE_AVX512
/* bench_fma_loop's chains in zmm: what the avx512 table's float tiles and
 * gemv run.  Zen 4 splits a zmm FMA in two (the ymm loop's flops); Zen 5
 * and Intel's two-FMA-port cores run it whole (twice them). */
#define BENCH_FMA512_FLOPS_PER_ITER (12.0 * 16 * 2)
__attribute__((target("avx512f"), unused)) static double bench_fma512_loop(long iters) {
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
#define DECL(i) __m512 a##i = _mm512_set1_ps((float)(i));
    BENCH_CHAINS12(DECL)
#undef DECL
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, m, c);
    BENCH_RUN_CHAINS12(iters, BENCH_ZMM)
#undef STEP
    __m512 s = a0;
#define SUM(i) s = _mm512_add_ps(s, a##i);
    BENCH_CHAINS12(SUM)
#undef SUM
    return (double)_mm512_reduce_add_ps(s);
}

/* Run only where the CPU has AVX512_BF16 (moeq__cpu_avx512bf16). */
__attribute__((target("avx512f,avx512bf16"), unused)) static double bench_dpbf16_loop(long iters) {
    const __m512i w = _mm512_set1_epi32(0x3F7F3F7F), x = _mm512_set1_epi32(0x33803380);
#define DECL(i) __m512 a##i = _mm512_set1_ps((float)(i));
    BENCH_CHAINS12(DECL)
#undef DECL
#define STEP(i) a##i = _mm512_dpbf16_ps(a##i, (__m512bh)w, (__m512bh)x);
    BENCH_RUN_CHAINS12(iters, BENCH_ZMM)
#undef STEP
    __m512 s = a0;
#define SUM(i) s = _mm512_add_ps(s, a##i);
    BENCH_CHAINS12(SUM)
#undef SUM
    return (double)_mm512_reduce_add_ps(s);
}

/* Run only at moeq__cpu_level() 2 (AVX-512 with VNNI). */
__attribute__((target("avx512f,avx512vnni"), unused)) static double bench_dpbusd_loop(long iters) {
    const __m512i w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(-2);
#define DECL(i) __m512i a##i = _mm512_set1_epi32(i);
    BENCH_CHAINS12(DECL)
#undef DECL
#define STEP(i) a##i = _mm512_dpbusd_epi32(a##i, w, x);
    BENCH_RUN_CHAINS12(iters, BENCH_ZMM)
#undef STEP
    __m512i s = a0;
#define SUM(i) s = _mm512_xor_si512(s, a##i);
    BENCH_CHAINS12(SUM)
#undef SUM
    return (double)_mm512_reduce_add_epi32(s);
}
#endif

/* Streams bench_read_sum reads at once.  The floor is the fastest the
 * machine reads, and a core's prefetchers keep more lines in flight for
 * several streams than for one (a Zen 3, one thread: 16 GB/s from one
 * stream, 19-21 from 2-16; software prefetches ahead of one stream did not
 * close the gap). */
#define BENCH_READ_STREAMS 8

/* Reads `bytes` bytes at p (32-byte aligned; a multiple of 128 is read) with
 * four independent chains of integer XORs, whatever the bits are: the read
 * bandwidth when p is far larger than the caches.  The bytes are read as
 * BENCH_READ_STREAMS equal parts, 128 bytes of each in turn (then what
 * the parts leave). */
__attribute__((target("avx2,fma"), unused)) static uint64_t bench_read_sum(const void *p,
                                                                           size_t bytes) {
    const char *b = p;
    const size_t part = bytes / BENCH_READ_STREAMS / 128 * 128;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t o = 0; o < part; o += 128) {
        for (int s = 0; s < BENCH_READ_STREAMS; s++) {
            const __m256i *v = (const __m256i *)(const void *)(b + (size_t)s * part + o);
            a0 = _mm256_xor_si256(a0, _mm256_load_si256(v));
            a1 = _mm256_xor_si256(a1, _mm256_load_si256(v + 1));
            a2 = _mm256_xor_si256(a2, _mm256_load_si256(v + 2));
            a3 = _mm256_xor_si256(a3, _mm256_load_si256(v + 3));
        }
    }
    const __m256i *v = (const __m256i *)(const void *)(b + BENCH_READ_STREAMS * part);
    for (size_t i = 0; i + 4 <= (bytes - BENCH_READ_STREAMS * part) / 32; i += 4) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256(v + i));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256(v + i + 1));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256(v + i + 2));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256(v + i + 3));
    }
    const __m256i s = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    uint64_t l[4];
    _mm256_storeu_si256((__m256i *)(void *)l, s);
    return l[0] ^ l[1] ^ l[2] ^ l[3];
}
#else
__attribute__((unused)) static uint64_t bench_read_sum(const void *p, size_t bytes) {
    const uint64_t *w = p;
    uint64_t s = 0;
    for (size_t i = 0; i < bytes / 8; i++) s ^= w[i];
    return s;
}

__attribute__((unused)) static double bench_fma_loop(long iters) {
    float a[96];
    for (int i = 0; i < 96; i++) a[i] = (float)i;
    for (long it = 0; it < iters; it++) {
        for (int i = 0; i < 96; i++) a[i] = fmaf(a[i], 0.999999f, 1e-7f);
    }
    return (double)a[0];
}
#endif

/* The largest cache the CPU reports (Linux sysfs, cpu0's cache/index*), in
 * bytes; 0 where none is reported. */
__attribute__((unused)) static size_t bench_largest_cache(void) {
    size_t best = 0;
    for (int i = 0; i < 8; i++) {
        char path[64];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        unsigned long v = 0;
        char unit = 0;
        if (fscanf(f, "%lu%c", &v, &unit) >= 1) {
            size_t b = unit == 'K' ? (size_t)v << 10 : unit == 'M' ? (size_t)v << 20 : (size_t)v;
            if (b > best) best = b;
        }
        fclose(f);
    }
    return best;
}

/* Bytes of weights to cycle through so that every run reads its own from
 * DRAM: twice the largest cache, and at least 64 MiB (a host whose L3 is
 * 300 MiB needs 600, not the 64 that a 32 MiB L3 does). */
__attribute__((unused)) static size_t bench_cold_bytes(void) {
    const size_t twice = 2 * bench_largest_cache(), least = (size_t)64 << 20;
    return twice > least ? twice : least;
}

#endif

/*
 * cpu.c - picks the kernel table at run time.  Compiled for the baseline ISA
 * (never with -mavx2): it only asks the CPU what it can do.
 *
 * Tables, each needing what the one before needs and more: portable (any
 * C11 compiler), avx2 (AVX2 + FMA + F16C), avx512 (the avx2 table with gemv,
 * idot, fdot and the E4M3 panel replaced by AVX-512 F/BW/VL + VNNI + VBMI ones,
 * kern_avx512.c, and tile_bf16 and gemv_bf16 by vdpbf16ps ones where the
 * CPU has AVX512_BF16).  All give the same bits.  MOEQ_KERNELS=portable, avx2 or
 * avx512 caps the choice (a name the CPU cannot run means the best table
 * below it).
 */
#include "kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(MOEQ_HAVE_X86) && MOEQ_HAVE_X86
#include <cpuid.h>

/* XCR0: which register states the OS saves (bit 1 SSE, bit 2 AVX, bits 5-7
 * the AVX-512 opmask and upper ZMM registers). */
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static int cpu_level(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const bool fma = (c >> 12) & 1u, osxsave = (c >> 27) & 1u, avx = (c >> 28) & 1u,
               f16c = (c >> 29) & 1u;
    if (!(fma && osxsave && avx && f16c)) return 0;
    const uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 6u) != 6u) return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if (!((b >> 5) & 1u)) return 0; /* AVX2 */
#if defined(MOEQ_HAVE_AVX512) && MOEQ_HAVE_AVX512
    const bool f = (b >> 16) & 1u, bw = (b >> 30) & 1u, vl = (b >> 31) & 1u, vbmi = (c >> 1) & 1u,
               vnni = (c >> 11) & 1u;
    if (f && bw && vl && vbmi && vnni && (xcr0 & 0xE6u) == 0xE6u) return 2;
#endif
    return 1;
}
#else
static int cpu_level(void) {
    return 0;
}
#endif

#if defined(MOEQ_HAVE_AVX512) && MOEQ_HAVE_AVX512
static bool cpu_avx512bf16(void) {
    unsigned a, b, c, d;
    /* leaf 7's subleaf 1 exists when subleaf 0's EAX (the last subleaf) >= 1 */
    if (moeq__cpu_level() < 2 || !__get_cpuid_count(7, 0, &a, &b, &c, &d) || a < 1) return false;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    return (a >> 5) & 1u; /* AVX512_BF16 */
}
#else
static bool cpu_avx512bf16(void) {
    return false;
}
#endif

bool moeq__cpu_avx512bf16(void) {
    static atomic_int have = -1;
    int v = atomic_load_explicit(&have, memory_order_relaxed);
    if (v < 0) {
        v = cpu_avx512bf16();
        atomic_store_explicit(&have, v, memory_order_relaxed);
    }
    return v;
}

/* Whether the CPU's vdpbf16ps multiplies and adds at least at the rate of
 * the zmm FMAs the float path runs.  On AMD's cores it does (Zen 4: twice
 * the FMA's multiply-adds at its rate; Zen 5: 946 GOP/s against 512 GFLOP/s
 * of zmm FMAs, 2 threads).  Intel's run it at half the zmm FMAs'
 * multiply-adds (an Intel Xeon with AMX and AVX512_FP16: 219 GOP/s against
 * 445 GFLOP/s; earlier Xeon VMs: 140-167 GOP/s against 129-189 GFLOP/s of
 * ymm FMAs), and there the float path took 0.77-0.87x the bfloat16 path's
 * time at T=512, 0.90-1.01x at T=1 to 128 (kern_ab --bf16-path;
 * docs/kernels.md).  So: not on Intel's cores. */
#if defined(MOEQ_HAVE_X86) && MOEQ_HAVE_X86
static bool cpu_bf16_fast(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    const bool intel = b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu; /* GenuineIntel */
    return !intel;
}
#else
static bool cpu_bf16_fast(void) {
    return false;
}
#endif

int moeq__bf16_path(void) {
    const char *env = getenv("MOEQ_BF16_PATH");
    if (!env || !env[0] || !strcmp(env, "auto")) {
        return moeq__cpu_avx512bf16() && cpu_bf16_fast();
    }
    if (!strcmp(env, "on")) return 1;
    if (!strcmp(env, "off")) return 0;
    return -1;
}

int moeq__cpu_level(void) {
    static atomic_int level = -1; /* every thread computes the same answer */
    int v = atomic_load_explicit(&level, memory_order_relaxed);
    if (v < 0) {
        v = cpu_level();
        atomic_store_explicit(&level, v, memory_order_relaxed);
    }
    return v;
}

static const char *const level_names[] = {"portable", "avx2", "avx512"};

int moeq__kern_env_cap(void) {
    const char *env = getenv("MOEQ_KERNELS");
    if (!env || !env[0]) return 2;
    for (int i = 0; i < 3; i++) {
        if (!strcmp(env, level_names[i])) return i;
    }
    return -1;
}

#if defined(MOEQ_HAVE_AVX512) && MOEQ_HAVE_AVX512
static moeq__kern avx512_table;
static pthread_once_t avx512_once = PTHREAD_ONCE_INIT;
static void avx512_build(void) {
    avx512_table = moeq__kern_avx2;
    moeq__kern_avx512_fill(&avx512_table, moeq__cpu_avx512bf16());
}
#endif

const moeq__kern *moeq__kern_level(int level) {
#if defined(MOEQ_HAVE_X86) && MOEQ_HAVE_X86
    const int have = moeq__cpu_level();
    if (level > have) level = have;
#if defined(MOEQ_HAVE_AVX512) && MOEQ_HAVE_AVX512
    if (level >= 2) {
        pthread_once(&avx512_once, avx512_build);
        return &avx512_table;
    }
#endif
    if (level >= 1) return &moeq__kern_avx2;
#else
    (void)level;
#endif
    return &moeq__kern_portable;
}

const moeq__kern *moeq__kern_best(bool portable_only) {
    const int cap = moeq__kern_env_cap();
    return moeq__kern_level(portable_only ? 0 : cap < 0 ? 2 : cap);
}

/*
 * cpu.c - picks the kernel table at run time.  Compiled for the baseline ISA
 * (never with -mavx2): it only asks the CPU what it can do.
 */
#include "kernels.h"

#include <stdatomic.h>

#if defined(MOEQ_HAVE_X86) && MOEQ_HAVE_X86
#include <cpuid.h>

/* XCR0: which register states the OS saves (bit 1 SSE, bit 2 AVX). */
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

bool moeq__cpu_has_avx2(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    const bool fma = (c >> 12) & 1u, osxsave = (c >> 27) & 1u, avx = (c >> 28) & 1u,
               f16c = (c >> 29) & 1u;
    if (!(fma && osxsave && avx && f16c)) return false;
    if ((xgetbv0() & 6u) != 6u) return false;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return (b >> 5) & 1u; /* AVX2 */
}
#else
bool moeq__cpu_has_avx2(void) {
    return false;
}
#endif

const moeq__kern *moeq__kern_best(bool portable_only) {
#if defined(MOEQ_HAVE_X86) && MOEQ_HAVE_X86
    static atomic_int has = -1; /* every thread computes the same answer */
    int h = atomic_load_explicit(&has, memory_order_relaxed);
    if (h < 0) {
        h = moeq__cpu_has_avx2() ? 1 : 0;
        atomic_store_explicit(&has, h, memory_order_relaxed);
    }
    if (!portable_only && h) return &moeq__kern_avx2;
#else
    (void)portable_only;
#endif
    return &moeq__kern_portable;
}

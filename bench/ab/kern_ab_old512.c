/*
 * kern_ab_old512.c - the "old" AVX-512 kernels of kern_ab --avx512: the
 * kern_avx512.c named by MOEQ_AB_KERNELS512 (CMake; default the tree's own),
 * its fill function renamed so that it links beside the library's.
 */
#define moeq__kern_avx512_fill moeq__kern_ab_old512_fill
#include MOEQ_AB_KERNELS512_FILE

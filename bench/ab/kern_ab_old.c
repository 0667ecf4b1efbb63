/*
 * kern_ab_old.c - the "old" AVX2 kernel table of kern_ab: the kern_avx2.c
 * named by MOEQ_AB_KERNELS (CMake; default the tree's own), its table renamed
 * so that it links beside the library's.
 */
#define moeq__kern_avx2 moeq__kern_ab_old
#include MOEQ_AB_KERNELS_FILE

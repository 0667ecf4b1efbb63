/*
 * moe_params.h - parameter families for MoE schemes (moe_params.c).
 * Each adds the w13_ and w2_ parameters of one family to a layer being
 * created, sized from its dims and weight args.  Never installed.
 */
#ifndef MOEQ_MOE_PARAMS_H
#define MOEQ_MOE_PARAMS_H

#include "layer/scheme_kit.h"

/* True when packed ints use the <= 0.17 word layout. */
bool moeq__moe_legacy_packing(const moeq_moe *l);
/* int32 words holding n values of the layer's weight bit width. */
int64_t moeq__moe_packed_words(const moeq_moe *l, int64_t n);

/* Integer weights: pack-quantized -> *_weight_packed I32 [E, N, words(K)]
 * (transposed: [E, words(K), N]) plus *_weight_shape I64 [E, 2];
 * int/naive-quantized -> *_weight I8 [E, N, K].  `names` overrides the
 * parameter names ({w13, w2}); NULL keeps the defaults. */
moeq_status moeq__moe_add_int_weights(moeq_moe *l, bool transposed, const char *const *names,
                                      moeq_error *err);
/* *_weight_shape I64 [E, 2] (gate and up share one). */
moeq_status moeq__moe_add_weight_shape(moeq_moe *l, moeq_error *err);
/* Float-coded weights stored one per element: *_weight `dtype` [E, N, K]. */
moeq_status moeq__moe_add_float_weights(moeq_moe *l, int32_t dtype, uint32_t ckpt, moeq_error *err);
/* FP4 weights: *_weight_packed U8 [E, N, K/2]. */
moeq_status moeq__moe_add_fp4_weights(moeq_moe *l, moeq_error *err);
/* U8 [E, N, 3K/4]: four FP6 E2M3 codes in three bytes (MXFP6). */
moeq_status moeq__moe_add_fp6_weights(moeq_moe *l, moeq_error *err);
/* *_weight_scale by weight strategy: tensor [E, 2] / [E], channel [E, N, 1],
 * group [E, N, ceil(K/g)], block [E, 2 I/bn, ceil(H/bk)] / [E, ceil(H/bn),
 * ceil(I/bk)] (transposed: the last two swapped). */
moeq_status moeq__moe_add_scales(moeq_moe *l, int32_t dtype, uint32_t ckpt, bool transposed,
                                 moeq_error *err);
/* *_weight_zero_point when asymmetric: packed along N for pack-quantized,
 * int8 on the scale grid otherwise. */
moeq_status moeq__moe_add_zero_points(moeq_moe *l, bool transposed, moeq_error *err);
/* *_weight_g_idx I32 [E, K] for group strategies (required with actorder group). */
moeq_status moeq__moe_add_g_idx(moeq_moe *l, moeq_error *err);
/* w13_<base> F32 [E, 2] and w2_<base> F32 [E], one value per shard
 * (weight_global_scale, input_global_scale). */
moeq_status moeq__moe_add_per_shard(moeq_moe *l, const char *base, const char *suffix,
                                    moeq_error *err);
/* w13_input_scale / w2_input_scale F32 [E] when the inputs are static. */
moeq_status moeq__moe_add_static_input_scales(moeq_moe *l, moeq_error *err);
/* A parameter finalize fills (never loaded): [E, a, b]. */
moeq_status moeq__moe_add_derived(moeq_moe *l, const char *name, int32_t dtype, int64_t a,
                                  int64_t b, moeq_error *err);

/* Families several schemes declare alike.
 * int8: integer weights in checkpoint orientation (I8 [E, N, K] or packed
 * words [E, N, words(K)]), F32 scales, static input scales when the inputs
 * are static (w8a8_int8, w4a8_int8, w4a8_fp8).
 * nvfp4: U8 [E, N, K/2] codes, E4M3 group-16 scales, one F32 global scale
 * per shard ([E, 2] for gate/up: each half keeps its own). */
moeq_status moeq__moe_add_int8_family(moeq_moe *l, moeq_error *err);
moeq_status moeq__moe_add_nvfp4_family(moeq_moe *l, moeq_error *err);

/* Finalize helpers: int4 packed words -> signed nibble bytes (the MxInt4 and
 * W4AFP8 repack); drop transposed parameter buffers once copied back. */
moeq_status moeq__moe_repack_int4(moeq_moe *l, moeq_error *err);
/* moeq__moe_finalize_ct, then moeq__moe_repack_int4 (w4a8_int8, w4a8_fp8). */
moeq_status moeq__moe_finalize_int4_repacked(moeq_moe *l, moeq_error *err);
void moeq__moe_release_transposed(moeq_moe *l);

#endif /* MOEQ_MOE_PARAMS_H */

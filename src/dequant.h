/*
 * dequant.h - building a kernel-ready weight from one module's
 * compressed-tensors tensors, with every check moeq_dequantize makes.  Used by
 * moeq_dequantize and by MoE layers at finalize.  Never installed.
 */
#ifndef MOEQ_DEQUANT_H
#define MOEQ_DEQUANT_H

#include "internal.h"
#include "kernels.h"

/* A module's weight, ready for the kernels: qw.codes points into the tensors
 * it was built from (which must outlive it); scale, zero points and g_idx are
 * decoded copies it owns. */
typedef struct moeq__ct_weight {
    moeq__qweight qw;
    float *scale;
    float *zp;
    int32_t *g_idx;
} moeq__ct_weight;

/* Checks the tensors a module of `format` stores under `weights` (presence,
 * dtypes, shapes, finite scales, g_idx range, FP8 NaN bytes) and builds the
 * qweight.  Messages name `module` and the tensor.
 * @return OK, INVALID_ARG, SHAPE, DTYPE, CHECKPOINT, UNSUPPORTED, NOMEM. */
moeq_status moeq__ct_weight_build(const moeq_quant_args *weights, int32_t format, uint32_t flags,
                                  const char *module, const moeq_tensor *tensors,
                                  uint32_t n_tensors, moeq__ct_weight *out, moeq_error *err);
void moeq__ct_weight_free(moeq__ct_weight *w);

#endif /* MOEQ_DEQUANT_H */

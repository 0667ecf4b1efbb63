/*
 * dequant.h - building a kernel-ready weight from one module's
 * compressed-tensors tensors, with every check moeq_dequantize makes.  Used by
 * moeq_dequantize and by MoE layers at finalize.  Never installed.
 */
#ifndef MOEQ_DEQUANT_H
#define MOEQ_DEQUANT_H

#include "common/internal.h"
#include "config/config.h"
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

/* ---- which tensors a module stores (spec §1.6-1.8, §3.3) -------------------
 *
 * One table of parameter names, and the rules that say which of them a
 * quantized module has.  moeq__ct_weight_build checks presence with
 * moeq__ct_expected_params, and `moeq inspect` accounts checkpoint tensors
 * with the same functions, so the two cannot drift apart. */

#define MOEQ__CT_PARAM_MAP(X)                                                   \
    X(WEIGHT, "weight")                                                         \
    X(WEIGHT_PACKED, "weight_packed")                                           \
    X(WEIGHT_SCALE, "weight_scale")                                             \
    X(WEIGHT_ZERO_POINT, "weight_zero_point")                                   \
    X(WEIGHT_G_IDX, "weight_g_idx")                                             \
    X(WEIGHT_SHAPE, "weight_shape")                                             \
    X(WEIGHT_GLOBAL_SCALE, "weight_global_scale")                               \
    X(INPUT_SCALE, "input_scale")                                               \
    X(INPUT_ZERO_POINT, "input_zero_point")                                     \
    X(INPUT_GLOBAL_SCALE, "input_global_scale")                                 \
    X(OUTPUT_SCALE, "output_scale")                                             \
    X(OUTPUT_ZERO_POINT, "output_zero_point")                                   \
    X(OUTPUT_GLOBAL_SCALE, "output_global_scale")

typedef enum moeq__ct_param {
#define MOEQ_X_(name, text) MOEQ__CT_##name,
    MOEQ__CT_PARAM_MAP(MOEQ_X_)
#undef MOEQ_X_
    MOEQ__CT_PARAM_COUNT
} moeq__ct_param;

/* The weight parameters are the first ones (moeq__ct_weight_build reads only these). */
#define MOEQ__CT_WEIGHT_PARAM_COUNT (MOEQ__CT_WEIGHT_GLOBAL_SCALE + 1)
#define MOEQ__CT_BIT(p) (1u << (p))

/* "weight_packed", ...; NULL outside the table. */
const char *moeq__ct_param_name(int32_t p);
/* The parameter named by the `n` bytes at `s`; -1 when it is not one. */
int32_t moeq__ct_param_from_name(const char *s, size_t n);

/* Sets of parameters, one bit (MOEQ__CT_BIT) each. */
typedef struct moeq__ct_params {
    uint32_t required; /* a module without one of these is incomplete */
    uint32_t optional; /* read when present (weight_g_idx of group strategies) */
} moeq__ct_params;

/* The weight parameters a module of `format` stores under `weights`:
 *   dense, fakequant        weight
 *   pack-quantized          weight_packed, weight_shape, weight_scale
 *   naive/int/float-q.      weight, weight_scale
 *   nvfp4-pack-quantized    weight_packed, weight_scale (+ weight_global_scale for tensor_group)
 *   mxfp4-pack-quantized    weight_packed, weight_scale
 *   mxfp8-quantized         weight, weight_scale
 * plus, for the integer formats, weight_zero_point when asymmetric and
 * weight_g_idx when actorder is group (optional for other group strategies:
 * compressed-tensors reads it when it is there).  Rejects the args a format
 * cannot hold with the messages moeq_dequantize gives; `module` names the
 * place.  @return OK, INVALID_ARG (no format, no args), UNSUPPORTED. */
moeq_status moeq__ct_expected_params(const moeq_quant_args *weights, int32_t format,
                                     const char *module, moeq__ct_params *out, moeq_error *err);

/* The activation parameters of `args` (NULL: none): static args store
 * <prefix>_scale (+ <prefix>_zero_point when asymmetric, + the global scale for
 * tensor_group); "local" args (NVFP4 inputs) only <prefix>_global_scale;
 * dynamic args nothing.  `output` picks output_* instead of input_*. */
moeq__ct_params moeq__ct_activation_params(const moeq_quant_args *args, bool output);

/* Writes the names in `set` as "weight_packed, weight_shape and weight_scale"
 * (zero point and g_idx marked "(asymmetric)" / "(actorder group)"). */
void moeq__ct_params_text(uint32_t set, char *buf, size_t n);

#endif /* MOEQ_DEQUANT_H */

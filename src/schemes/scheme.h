/*
 * scheme.h - the scheme vtable.  One scheme per file under src/schemes/, each
 * exporting one const moeq__scheme with every slot filled; registry.c lists
 * them and holds the selection order.
 */
#ifndef MOEQ_SCHEME_H
#define MOEQ_SCHEME_H

#include "common/internal.h"

struct moeq_moe;

/* What selection looks at. */
typedef struct moeq__select_in {
    const moeq_quant_args *w; /* weight args, NULL when absent */
    const moeq_quant_args *a; /* input-activation args, NULL when absent */
    int32_t format;           /* effective format */
    const moeq_select_options *opts;
} moeq__select_in;

typedef struct moeq__scheme {
    int32_t id;          /* moeq_scheme_id; registry index */
    const char *name;    /* stable public name */
    const char *summary; /* one line: what it computes */

    /* Selection predicate: true when this scheme runs the layer; otherwise
     * writes the reason it does not into why[0..why_size). */
    bool (*accepts)(const moeq__select_in *in, char *why, size_t why_size);

    /* create_weights: declare the parameter manifest of a new layer. */
    moeq_status (*create_weights)(struct moeq_moe *layer, moeq_error *err);
    /* finalize (process_weights_after_loading): turn loaded tensors into the
     * layout the kernels use. */
    moeq_status (*finalize)(struct moeq_moe *layer, moeq_error *err);
    /* apply: run the experts of a finalized layer (see moe.h). */
    moeq_status (*apply)(const struct moeq_moe *layer, void *io, moeq_error *err);
} moeq__scheme;

/* Writes a reason and returns false, for use in accepts():
 *     if (w->num_bits != 4) return moeq__reject(why, n, "weights are int%d", ...); */
bool moeq__reject(char *why, size_t why_size, const char *fmt, ...) MOEQ__PRINTF(3, 4);

/* Shared predicate pieces (predicates.c); each writes a reason when false. */
bool moeq__need_weights(const moeq__select_in *in, char *why, size_t n);
bool moeq__need_no_inputs(const moeq__select_in *in, char *why, size_t n);
/* Weights of `type` with a bit width in [min_bits, max_bits]. */
bool moeq__need_weight_type(const moeq__select_in *in, int32_t type, int32_t min_bits,
                            int32_t max_bits, char *why, size_t n);
/* Symmetric static weights. */
bool moeq__need_sym_static_weights(const moeq__select_in *in, char *why, size_t n);
/* The weight strategy is one of the `mask` bits (1 << moeq_strategy). */
bool moeq__need_weight_strategy(const moeq__select_in *in, uint32_t mask, char *why, size_t n);
/* The effective format is one of the `mask` bits (1 << moeq_format). */
bool moeq__need_format(const moeq__select_in *in, uint32_t mask, char *why, size_t n);
/* Input activations of `type` and `bits`, symmetric. */
bool moeq__need_input_type(const moeq__select_in *in, int32_t type, int32_t bits, char *why,
                           size_t n);

/* Input activations are dynamic with one of the `dynamic_strategies` bits, or
 * (when static_tensor_ok) static per-tensor.  `dynamic` "local" never passes. */
bool moeq__need_input_mode(const moeq__select_in *in, uint32_t dynamic_strategies,
                           bool static_tensor_ok, char *why, size_t n);
/* A specific group size for the weights ("NVFP4 needs 16"). */
bool moeq__need_weight_group(const moeq__select_in *in, int32_t group_size, const char *what,
                             char *why, size_t n);

#define MOEQ__BIT(x) (1u << (x))

/* Integer weights stored packed (pack-quantized) or as int8 (int/naive-quantized). */
#define MOEQ__INT_FORMATS                                                                          \
    (MOEQ__BIT(MOEQ_FORMAT_PACK_QUANTIZED) | MOEQ__BIT(MOEQ_FORMAT_INT_QUANTIZED) |                \
     MOEQ__BIT(MOEQ_FORMAT_NAIVE_QUANTIZED))
/* FP8 weights stored as F8_E4M3 "weight" tensors. */
#define MOEQ__FP8_FORMATS                                                                          \
    (MOEQ__BIT(MOEQ_FORMAT_FLOAT_QUANTIZED) | MOEQ__BIT(MOEQ_FORMAT_NAIVE_QUANTIZED))
#define MOEQ__GROUP_OR_CHANNEL (MOEQ__BIT(MOEQ_STRATEGY_GROUP) | MOEQ__BIT(MOEQ_STRATEGY_CHANNEL))
#define MOEQ__TOKEN_OR_TENSOR  (MOEQ__BIT(MOEQ_STRATEGY_TOKEN) | MOEQ__BIT(MOEQ_STRATEGY_TENSOR))

/* Weight families several schemes share. */
/* NVFP4: float4, tensor_group with 16-element groups, symmetric, static. */
bool moeq__need_nvfp4_weights(const moeq__select_in *in, char *why, size_t n);
/* FP8 E4M3 with tensor, channel or block scales, symmetric, static. */
bool moeq__need_fp8_weights(const moeq__select_in *in, char *why, size_t n);
/* int4 with group or channel scales, symmetric, static. */
bool moeq__need_int4_sym_weights(const moeq__select_in *in, char *why, size_t n);
/* MX weights: float `bits`, group 32, symmetric, static, stored in `format`
 * (E8M0 scales); `what` names them in reasons ("MXFP8"). */
bool moeq__need_mx_weights(const moeq__select_in *in, int32_t bits, int32_t format,
                           const char *what, char *why, size_t n);
/* MXFP8 inputs: float8, dynamic, group 32 with scale_dtype uint8 (E8M0). */
bool moeq__need_mxfp8_inputs(const moeq__select_in *in, char *why, size_t n);
/* FP8 inputs quantized per token in groups of `group_size` columns, dynamic,
 * float scales (CT's FP8_BLOCK / MXFP4XFP8 inputs). */
bool moeq__need_fp8_group_inputs(const moeq__select_in *in, int32_t group_size, char *why,
                                 size_t n);

/* Every scheme. */
extern const moeq__scheme moeq__scheme_unquantized;
extern const moeq__scheme moeq__scheme_wna16;
extern const moeq__scheme moeq__scheme_mxint4;
extern const moeq__scheme moeq__scheme_w4a16_nvfp4;
extern const moeq__scheme moeq__scheme_w4a4_nvfp4;
extern const moeq__scheme moeq__scheme_w4a16_mxfp4;
extern const moeq__scheme moeq__scheme_w8a16_fp8;
extern const moeq__scheme moeq__scheme_w8a8_fp8;
extern const moeq__scheme moeq__scheme_w8a8_int8;
extern const moeq__scheme moeq__scheme_w4a8_int8;
extern const moeq__scheme moeq__scheme_w4a8_fp8;
extern const moeq__scheme moeq__scheme_w8a16_mxfp8;
extern const moeq__scheme moeq__scheme_w8a8_mxfp8;
extern const moeq__scheme moeq__scheme_w6a16_mxfp6;
extern const moeq__scheme moeq__scheme_w6a8_mxfp6;
extern const moeq__scheme moeq__scheme_w4a8_mxfp4;
extern const moeq__scheme moeq__scheme_npu_w8a8_int8;
extern const moeq__scheme moeq__scheme_npu_w4a8_int8;
extern const moeq__scheme moeq__scheme_npu_w4a16_int4;

/* The registry (registry.c): indexed by moeq_scheme_id. */
const moeq__scheme *moeq__scheme_get(int32_t id);

#endif /* MOEQ_SCHEME_H */

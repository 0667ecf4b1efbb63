/*
 * engine_sglang_eba6af385d.c - SGLang's compressed-tensors MoE dispatch at
 * eba6af385d (2026-02-16, "[2/N] Quantization Refactor: Compressed tensors
 * MoE schemes", #17503): the seed era.  Source: shared/spec/sglang-moe-
 * dispatch.md, section 17 (history): the snapshot's chain (d315eb725) with
 * the later commits taken out:
 *   - no MXFP4 bypass (abddb1c7e9, 2026-08-04);
 *   - ignore entries match by case-insensitive substring and only the
 *     top-level format decides whether input args are kept (f69af7b7ad #32736);
 *   - pack-quantized keeps no input args and there is no W4AFP8 branch e
 *     (bff489284b #25763);
 *   - the WNA16 constructors read target_scheme_map["Linear"] (KeyError
 *     'Linear' without one, the Linear group's args otherwise: eb75d990f7 #29761);
 *   - _is_wNa16_group_channel still requires symmetric weights (88a9d513e0 #25292);
 *   - no backend-triton branch a3 (8da1cfb30d #21858);
 *   - CompressedTensorsMxInt4MoE lacks apply_weights, so instantiating it
 *     raises TypeError (fixed by fe9d85d93c #19726).
 *
 * Rows are tried in order; the first whose conditions all hold decides.
 * A scheme class whose constructor raises for some args is preceded by rows
 * for those args (the "ctor" rows).  How to read a row: docs/engines.md.
 */
#include "report/engine.h"

#define B(n)    MOEQ__BIT(n)
#define T_INT   MOEQ__BIT(MOEQ_QTYPE_INT)
#define T_FLOAT MOEQ__BIT(MOEQ_QTYPE_FLOAT)
#define S(x)    MOEQ__BIT(MOEQ_STRATEGY_##x)
#define S_ALL                                                                                      \
    (S(TENSOR) | S(CHANNEL) | S(GROUP) | S(BLOCK) | S(TOKEN) | S(TENSOR_GROUP) | S(ATTN_HEAD))
#define F(x)      MOEQ__BIT(MOEQ_FORMAT_##x)
#define P(x)      MOEQ__BIT(MOEQ__EP_##x)
#define P_ALL     (P(SM90) | P(SM80) | P(SM100) | P(ROCM) | P(NPU))
#define P_NOT_NPU (P_ALL & ~P(NPU))
#define BE(x)     MOEQ__BIT(MOEQ__EB_##x)
#define YES       MOEQ__EC_YES
#define NO        MOEQ__EC_NO

/* _is_wNa16_group_channel: channel/group, static (no type, bits or symmetry check). */
#define WNA16_W .strategies = S(CHANNEL) | S(GROUP), .dynamic = NO
/* _is_mxint4a16 on top of it: int4, group 32, symmetric. */
#define MXINT4_W WNA16_W, .bits = B(4), .types = T_INT, .group_size = 32, .symmetric = YES
/* _is_fp4a4_nvfp4: both sides fp4 tensor_group 16 symmetric. */
#define NVFP4_ARGS                                                                                 \
    .bits = B(4), .types = T_FLOAT, .strategies = S(TENSOR_GROUP), .group_size = 16,               \
    .symmetric = YES
/* _is_fp8_w8a8, weight side (num_bits is not checked). */
#define FP8_W0 .types = T_FLOAT, .symmetric = YES, .dynamic = NO
#define FP8_W  FP8_W0, .strategies = S(TENSOR) | S(CHANNEL) | S(BLOCK)
/* _is_dynamic_token_w8a8 (type not checked). */
#define W8A8_TOKEN_W0 .bits = B(8), .symmetric = YES, .dynamic = NO
#define W8A8_TOKEN_W  W8A8_TOKEN_W0, .strategies = S(TENSOR) | S(CHANNEL)
#define TOKEN_DYN_A8  .bits = B(8), .strategies = S(TOKEN), .dynamic = YES
/* _is_wint4afp8 (top-level format pack-quantized is a row condition). */
#define W4AFP8_W .bits = B(4), .types = T_INT, .symmetric = YES, .dynamic = NO
#define W4AFP8_A .bits = B(8), .types = T_INT | T_FLOAT, .dynamic = YES
/* _is_dynamic_token_w4a8. */
#define W4A8_TOKEN_W                                                                               \
    .bits = B(4), .strategies = S(GROUP) | S(CHANNEL), .symmetric = YES, .dynamic = NO

#define SCHEME(c, m)  .effect = MOEQ__EE_SCHEME, .cls = c, .moeq_scheme = m
#define RAISE(x, msg) .effect = MOEQ__EE_RAISE, .exception = x, .message = msg, .moeq_scheme = -1

#define WNA16_CTOR_MSG                                                                             \
    "('For Fused MoE layers, only ', 'pack-quantized ', 'is supported for the following bits: ', " \
    "'[4, 8]')"

/* The seed era's predicate required symmetric weights. */
#define WNA16_SEED_W WNA16_W, .symmetric = YES

static const moeq__engine_row k_rows[] = {
    /* a1: the class is abstract (no apply_weights): instantiation fails
     * before its constructor runs. */
    {.branch = "a1: abstract class",
     .w = {MXINT4_W},
     .input = NO,
     .platforms = P_NOT_NPU,
     .backends = BE(FLASHINFER_TRTLLM),
     RAISE("TypeError", "Can't instantiate abstract class CompressedTensorsMxInt4MoE with "
                        "abstract method apply_weights")},
    /* a2/a4: the constructor reads the "Linear" group's weights. */
    {.branch = "a2/a4 ctor: target_scheme_map[\"Linear\"]",
     .w = {WNA16_SEED_W},
     .input = NO,
     .platforms = P_NOT_NPU,
     .linear = NO,
     RAISE("KeyError", "'Linear'")},
    {.branch = "a2/a4 ctor: top-level format",
     .w = {WNA16_SEED_W},
     .input = NO,
     .platforms = P_NOT_NPU,
     .not_top_format = F(PACK_QUANTIZED),
     RAISE("ValueError", WNA16_CTOR_MSG)},
    {.branch = "a2/a4 ctor: bits",
     .w = {WNA16_SEED_W, .bits = ~(B(4) | B(8))},
     .input = NO,
     .platforms = P_NOT_NPU,
     RAISE("ValueError", WNA16_CTOR_MSG)},
    {.branch = "a2 (ROCm)",
     .w = {WNA16_SEED_W},
     .input = NO,
     .platforms = P(ROCM),
     .effect = MOEQ__EE_LINEAR_ARGS,
     .cls = "CompressedTensorsWNA16TritonMoE",
     .moeq_scheme = MOEQ_SCHEME_WNA16},
    {.branch = "a4 (Marlin)",
     .w = {WNA16_SEED_W},
     .input = NO,
     .platforms = P_NOT_NPU,
     .effect = MOEQ__EE_LINEAR_ARGS,
     .cls = "CompressedTensorsWNA16MoE",
     .moeq_scheme = MOEQ_SCHEME_WNA16},
    {.branch = "a' (NPU, _is_dynamic_token_w4)",
     .w = {WNA16_SEED_W, .bits = B(4)},
     .input = NO,
     .platforms = P(NPU),
     SCHEME("NPUCompressedTensorsW4A16Int4DynamicMoE", MOEQ_SCHEME_NPU_W4A16_INT4)},
    {.branch = "a'' (NPU, falls through: None)",
     .w = {WNA16_SEED_W},
     .input = NO,
     .platforms = P(NPU),
     .effect = MOEQ__EE_UNQUANTIZED,
     .cls = "UnquantizedFusedMoEMethod",
     .moeq_scheme = MOEQ_SCHEME_UNQUANTIZED},

    {.branch = "b ctor: Blackwell",
     .w = {NVFP4_ARGS},
     .input = YES,
     .a = {NVFP4_ARGS},
     .platforms = P_ALL & ~P(SM100),
     RAISE(
         "ValueError",
         "Current platform does not support NVFP4 quantization. Please use Blackwell and above.")},
    {.branch = "b",
     .w = {NVFP4_ARGS},
     .input = YES,
     .a = {NVFP4_ARGS},
     SCHEME("CompressedTensorsW4A4Nvfp4MoE", MOEQ_SCHEME_W4A4_NVFP4)},

    {.branch = "c ctor: tensor weights, dynamic non-tensor inputs",
     .w = {FP8_W0, .strategies = S(TENSOR)},
     .input = YES,
     .a = {.types = T_FLOAT, .dynamic = YES, .strategies = S_ALL & ~S(TENSOR)},
     RAISE("AssertionError", "")},
    {.branch = "c ctor: channel weights, dynamic non-token inputs",
     .w = {FP8_W0, .strategies = S(CHANNEL)},
     .input = YES,
     .a = {.types = T_FLOAT, .dynamic = YES, .strategies = S_ALL & ~S(TOKEN)},
     RAISE("AssertionError", "")},
    {.branch = "c ctor: channel weights, static per-tensor inputs",
     .w = {FP8_W0, .strategies = S(CHANNEL)},
     .input = YES,
     .a = {.types = T_FLOAT, .dynamic = NO, .symmetric = YES, .strategies = S(TENSOR)},
     RAISE("AssertionError", "")},
    {.branch = "c (dynamic inputs)",
     .w = {FP8_W},
     .input = YES,
     .a = {.types = T_FLOAT, .dynamic = YES},
     SCHEME("CompressedTensorsW8A8Fp8MoE", MOEQ_SCHEME_W8A8_FP8)},
    {.branch = "c (static symmetric per-tensor inputs)",
     .w = {FP8_W},
     .input = YES,
     .a = {.types = T_FLOAT, .dynamic = NO, .symmetric = YES, .strategies = S(TENSOR)},
     SCHEME("CompressedTensorsW8A8Fp8MoE", MOEQ_SCHEME_W8A8_FP8)},

    {.branch = "d: _is_dynamic_token_w8a8 on input None",
     .input = NO,
     RAISE("AttributeError", "'NoneType' object has no attribute 'num_bits'")},
    {.branch = "d ctor (NPU): channel weights required",
     .w = {W8A8_TOKEN_W0, .strategies = S(TENSOR)},
     .input = YES,
     .a = {TOKEN_DYN_A8},
     .platforms = P(NPU),
     RAISE("ValueError", "For INT8 Fused MoE layers, we require channelwise, dynamic per token "
                         "quantization. Found {W}, {A}")},
    {.branch = "d (NPU)",
     .w = {W8A8_TOKEN_W},
     .input = YES,
     .a = {TOKEN_DYN_A8},
     .platforms = P(NPU),
     SCHEME("NPUCompressedTensorsW8A8Int8DynamicMoE", MOEQ_SCHEME_NPU_W8A8_INT8)},
    {.branch = "d",
     .w = {W8A8_TOKEN_W},
     .input = YES,
     .a = {TOKEN_DYN_A8},
     RAISE("NotImplementedError",
           "The W8A8Int8 Fused MoE scheme is implemented only for NPU for now.")},

    {.branch = "f (NPU): ctor calls .get on the config",
     .w = {W4A8_TOKEN_W},
     .input = YES,
     .a = {TOKEN_DYN_A8},
     .platforms = P(NPU),
     RAISE("AttributeError", "'CompressedTensorsConfig' object has no attribute 'get'")},
    {.branch = "f",
     .w = {W4A8_TOKEN_W},
     .input = YES,
     .a = {TOKEN_DYN_A8},
     RAISE("NotImplementedError",
           "The W4A8Int8 Fused MoE scheme is implemented only for NPU for now.")},

    {.branch = "g", RAISE("RuntimeError", "Unsupported FusedMoe scheme: {W}, {A}")},
};

const moeq__engine_table moeq__engine_sglang_eba6af385d = {
    .name = "sglang@eba6af385d",
    .engine = "sglang",
    .commit = "eba6af385d",
    .commit_full = "eba6af385d",
    .date = "2026-02-16",
    .read = "2026-02-16, the seed era (#17503); the d315eb725 chain less the later commits "
            "listed in shared/spec/sglang-moe-dispatch.md section 17",
    .ignore_rule = MOEQ__EI_CONTAINS,
    .group_format = 0,
    .fill_format = 0,
    .act_formats =
        F(NAIVE_QUANTIZED) | F(INT_QUANTIZED) | F(FLOAT_QUANTIZED) | F(NVFP4_PACK_QUANTIZED),
    .keep_declared = 0,
    .int_weight_only = 1,
    .platforms = P_ALL,
    .backends = BE(AUTO) | BE(MARLIN) | BE(FLASHINFER_TRTLLM),
    .rows = k_rows,
    .n_rows = (uint32_t)MOEQ__ARRAY_LEN(k_rows),
};

/*
 * engine_vllm_003a19308.c - vLLM's compressed-tensors MoE dispatch at
 * 003a1930801d (vllm-project/vllm), as data.  Read:
 *   vllm/model_executor/layers/quantization/compressed_tensors/
 *     compressed_tensors_moe.py at 003a1930801d: get_moe_method and the
 *       constructors of the MoE method classes;
 *     compressed_tensors.py (the version carrying _is_fp8_w4a8_sm90, _is_mxfp4
 *       and per-group formats): the _is_* predicates, from_config and
 *       get_scheme_dict (a dict without a format gets the top-level one).
 * Not read, so taken as described in docs/engines.md: the default of
 * VLLM_WNA16_MOE_BACKEND (taken as marlin), is_flashinfer_mxint4_moe_available
 * (taken as Blackwell + backend flashinfer_trtllm), check_moe_marlin_supports_layer
 * (taken as channel or group 32/64/128), and the activation formats of
 * utils.is_activation_quantization_format (naive, int, float,
 * nvfp4-pack-quantized).
 *
 * Rows are tried in order; the first whose conditions all hold decides.
 */
#include "report/engine.h"

#define B(n)    MOEQ__BIT(n)
#define T_INT   MOEQ__BIT(MOEQ_QTYPE_INT)
#define T_FLOAT MOEQ__BIT(MOEQ_QTYPE_FLOAT)
#define S(x)    MOEQ__BIT(MOEQ_STRATEGY_##x)
#define S_ALL                                                                                      \
    (S(TENSOR) | S(CHANNEL) | S(GROUP) | S(BLOCK) | S(TOKEN) | S(TENSOR_GROUP) | S(ATTN_HEAD))
#define F(x)   MOEQ__BIT(MOEQ_FORMAT_##x)
#define P(x)   MOEQ__BIT(MOEQ__EP_##x)
#define P_ALL  (P(SM90) | P(SM80) | P(SM100) | P(ROCM) | P(CPU))
#define P_CUDA (P(SM90) | P(SM80) | P(SM100))
#define BE(x)  MOEQ__BIT(MOEQ__EB_##x)
#define YES    MOEQ__EC_YES
#define NO     MOEQ__EC_NO

/* _is_wNa16_group_channel: channel/group, static, no input (no type, bits or symmetry check). */
#define WNA16_W0 .dynamic = NO
#define WNA16_W  WNA16_W0, .strategies = S(CHANNEL) | S(GROUP)
/* The Marlin path: CUDA, and a group size check_moe_marlin_supports_layer takes. */
#define MARLIN_BE BE(AUTO) | BE(MARLIN) | BE(CUTLASS) | BE(FLASHINFER_TRTLLM)
/* _is_nvfp4_format. */
#define NVFP4_ARGS                                                                                 \
    .bits = B(4), .types = T_FLOAT, .strategies = S(TENSOR_GROUP), .group_size = 16,               \
    .symmetric = YES
#define FP8_W0        .types = T_FLOAT, .symmetric = YES, .dynamic = NO
#define FP8_W         FP8_W0, .strategies = S(TENSOR) | S(CHANNEL) | S(BLOCK)
#define W8A8_TOKEN_W0 .bits = B(8), .symmetric = YES, .dynamic = NO
#define W8A8_TOKEN_W  W8A8_TOKEN_W0, .strategies = S(TENSOR) | S(CHANNEL)
#define TOKEN_DYN_A8  .bits = B(8), .strategies = S(TOKEN), .dynamic = YES
#define W4A8_TOKEN_W                                                                               \
    .bits = B(4), .strategies = S(GROUP) | S(CHANNEL), .symmetric = YES, .dynamic = NO

#define SCHEME(c, m)  .effect = MOEQ__EE_SCHEME, .cls = c, .moeq_scheme = m
#define RAISE(x, msg) .effect = MOEQ__EE_RAISE, .exception = x, .message = msg, .moeq_scheme = -1

/* The message prints "pack-quantized" as the format it got, whatever it got. */
#define WNA16_MSG                                                                                  \
    "('For Fused MoE layers, only format: ', 'pack-quantized ', ' and bits: [4, 8] is "            \
    "supported ', 'but got format: pack-quantized  and bits: {bits}')"
#define MARLIN_SYM_MSG "Only symmetric quantization is supported for MoE"

static const moeq__engine_row k_rows[] = {
    {.branch = "_is_mxfp4 (weights only; inputs not looked at)",
     .w = {.bits = B(4),
           .types = T_FLOAT,
           .strategies = S(GROUP),
           .group_size = 32,
           .symmetric = YES},
     SCHEME("CompressedTensorsW4A4Mxfp4MoEMethod", MOEQ_SCHEME_W4A16_MXFP4)},

    /* WNA16: format and bits first, then the backend ladder
     * flashinfer mxint4 > cutlass (SM90) > marlin (CUDA) > triton. */
    {.branch = "wNa16: bits",
     .w = {WNA16_W, .bits = ~(B(4) | B(8))},
     .input = NO,
     RAISE("ValueError", WNA16_MSG)},
    {.branch = "wNa16: format",
     .w = {WNA16_W},
     .input = NO,
     .dict_format = ~F(PACK_QUANTIZED),
     RAISE("ValueError", WNA16_MSG)},
    {.branch = "wNa16: flashinfer mxint4, ctor: symmetric",
     .w = {WNA16_W, .bits = B(4), .group_size = 32, .symmetric = NO},
     .input = NO,
     .platforms = P(SM100),
     .backends = BE(FLASHINFER_TRTLLM),
     RAISE("AssertionError", MARLIN_SYM_MSG)},
    {.branch = "wNa16: flashinfer mxint4",
     .w = {WNA16_W, .bits = B(4), .group_size = 32},
     .input = NO,
     .platforms = P(SM100),
     .backends = BE(FLASHINFER_TRTLLM),
     SCHEME("CompressedTensorsWNA16MarlinMoEMethod", MOEQ_SCHEME_MXINT4)},
    {.branch = "wNa16: cutlass (SM90), ctor: symmetric",
     .w = {WNA16_W, .bits = B(4), .group_multiple = 64, .symmetric = NO},
     .input = NO,
     .platforms = P(SM90),
     .backends = BE(CUTLASS),
     RAISE("AssertionError", "Only symmetric quantization is supported for W4A16 MoE")},
    {.branch = "wNa16: cutlass (SM90), ctor: actorder != \"group\"",
     .w = {WNA16_W, .bits = B(4), .group_multiple = 64, .actorder = MOEQ__EC_GROUP_WRITTEN},
     .input = NO,
     .platforms = P(SM90),
     .backends = BE(CUTLASS),
     RAISE("AssertionError", "")},
    {.branch = "wNa16: cutlass (SM90)",
     .w = {WNA16_W, .bits = B(4), .group_multiple = 64},
     .input = NO,
     .platforms = P(SM90),
     .backends = BE(CUTLASS),
     SCHEME("CompressedTensorsW4A16CutlassMoEMethod", MOEQ_SCHEME_WNA16)},
    {.branch = "wNa16: marlin (channel), ctor: symmetric",
     .w = {WNA16_W0, .strategies = S(CHANNEL), .symmetric = NO},
     .input = NO,
     .platforms = P_CUDA,
     .backends = MARLIN_BE,
     RAISE("AssertionError", MARLIN_SYM_MSG)},
    {.branch = "wNa16: marlin (group 32), ctor: symmetric",
     .w = {WNA16_W, .group_size = 32, .symmetric = NO},
     .input = NO,
     .platforms = P_CUDA,
     .backends = MARLIN_BE,
     RAISE("AssertionError", MARLIN_SYM_MSG)},
    {.branch = "wNa16: marlin (group 64), ctor: symmetric",
     .w = {WNA16_W, .group_size = 64, .symmetric = NO},
     .input = NO,
     .platforms = P_CUDA,
     .backends = MARLIN_BE,
     RAISE("AssertionError", MARLIN_SYM_MSG)},
    {.branch = "wNa16: marlin (group 128), ctor: symmetric",
     .w = {WNA16_W, .group_size = 128, .symmetric = NO},
     .input = NO,
     .platforms = P_CUDA,
     .backends = MARLIN_BE,
     RAISE("AssertionError", MARLIN_SYM_MSG)},
    {.branch = "wNa16: marlin (channel)",
     .w = {WNA16_W0, .strategies = S(CHANNEL)},
     .input = NO,
     .platforms = P_CUDA,
     .backends = MARLIN_BE,
     SCHEME("CompressedTensorsWNA16MarlinMoEMethod", MOEQ_SCHEME_WNA16)},
    {.branch = "wNa16: marlin (group 32)",
     .w = {WNA16_W, .group_size = 32},
     .input = NO,
     .platforms = P_CUDA,
     .backends = MARLIN_BE,
     SCHEME("CompressedTensorsWNA16MarlinMoEMethod", MOEQ_SCHEME_WNA16)},
    {.branch = "wNa16: marlin (group 64)",
     .w = {WNA16_W, .group_size = 64},
     .input = NO,
     .platforms = P_CUDA,
     .backends = MARLIN_BE,
     SCHEME("CompressedTensorsWNA16MarlinMoEMethod", MOEQ_SCHEME_WNA16)},
    {.branch = "wNa16: marlin (group 128)",
     .w = {WNA16_W, .group_size = 128},
     .input = NO,
     .platforms = P_CUDA,
     .backends = MARLIN_BE,
     SCHEME("CompressedTensorsWNA16MarlinMoEMethod", MOEQ_SCHEME_WNA16)},
    {.branch = "wNa16: triton, actorder group/dynamic",
     .w = {WNA16_W0, .strategies = S(GROUP), .actorder = MOEQ__EC_GROUPLIKE},
     .input = NO,
     RAISE("ValueError", "WNA16MoE is not supported with actorder=group/dynamic.")},
    {.branch = "wNa16: triton",
     .w = {WNA16_W},
     .input = NO,
     SCHEME("CompressedTensorsWNA16MoEMethod", MOEQ_SCHEME_WNA16)},

    /* NVFP4 weights: inputs NVFP4 or none. */
    {.branch = "nvfp4 (A16)",
     .w = {NVFP4_ARGS},
     .input = NO,
     SCHEME("CompressedTensorsW4A4Nvfp4MoEMethod", MOEQ_SCHEME_W4A16_NVFP4)},
    {.branch = "nvfp4",
     .w = {NVFP4_ARGS},
     .input = YES,
     .a = {NVFP4_ARGS},
     SCHEME("CompressedTensorsW4A4Nvfp4MoEMethod", MOEQ_SCHEME_W4A4_NVFP4)},
    {.branch = "nvfp4: other inputs",
     .w = {NVFP4_ARGS},
     .input = YES,
     RAISE("ValueError", "('For NVFP4 weights, input quantization must also be NVFP4 format ', "
                         "'or None for NVFP4A16, found {A}')")},

    /* FP8 W8A8 (SM90/SM100 variants take the same class); the constructor
     * asserts per-tensor/per-tensor, channel/token or block weights. */
    {.branch = "fp8_w8a8 ctor: tensor weights, dynamic non-tensor inputs",
     .w = {FP8_W0, .strategies = S(TENSOR)},
     .input = YES,
     .a = {.types = T_FLOAT, .dynamic = YES, .strategies = S_ALL & ~S(TENSOR)},
     RAISE("AssertionError", "")},
    {.branch = "fp8_w8a8 ctor: channel weights, dynamic non-token inputs",
     .w = {FP8_W0, .strategies = S(CHANNEL)},
     .input = YES,
     .a = {.types = T_FLOAT, .dynamic = YES, .strategies = S_ALL & ~S(TOKEN)},
     RAISE("AssertionError", "")},
    {.branch = "fp8_w8a8 ctor: channel weights, static per-tensor inputs",
     .w = {FP8_W0, .strategies = S(CHANNEL)},
     .input = YES,
     .a = {.types = T_FLOAT, .dynamic = NO, .symmetric = YES, .strategies = S(TENSOR)},
     RAISE("AssertionError", "")},
    {.branch = "fp8_w8a8 (dynamic inputs)",
     .w = {FP8_W},
     .input = YES,
     .a = {.types = T_FLOAT, .dynamic = YES},
     SCHEME("CompressedTensorsW8A8Fp8MoEMethod", MOEQ_SCHEME_W8A8_FP8)},
    {.branch = "fp8_w8a8 (static symmetric per-tensor inputs)",
     .w = {FP8_W},
     .input = YES,
     .a = {.types = T_FLOAT, .dynamic = NO, .symmetric = YES, .strategies = S(TENSOR)},
     SCHEME("CompressedTensorsW8A8Fp8MoEMethod", MOEQ_SCHEME_W8A8_FP8)},

    /* _is_dynamic_token_w8a8 dereferences the input args. */
    {.branch = "dynamic_token_w8a8 on input None",
     .input = NO,
     RAISE("AttributeError", "'NoneType' object has no attribute 'num_bits'")},
    {.branch = "dynamic_token_w8a8 ctor: channel weights",
     .w = {W8A8_TOKEN_W0, .strategies = S(TENSOR)},
     .input = YES,
     .a = {TOKEN_DYN_A8},
     RAISE("ValueError", "For INT8 Fused MoE layers, we require channelwise, dynamic per token "
                         "quantization. Found {W}, {A}")},
    {.branch = "dynamic_token_w8a8",
     .w = {W8A8_TOKEN_W},
     .input = YES,
     .a = {TOKEN_DYN_A8},
     SCHEME("CompressedTensorsW8A8Int8MoEMethod", MOEQ_SCHEME_W8A8_INT8)},

    /* _is_fp8_w4a8_sm90: capability exactly 9.0; the input type is not checked. */
    {.branch = "fp8_w4a8_sm90",
     .w = {.bits = B(4), .strategies = S(GROUP), .symmetric = YES, .dynamic = NO},
     .input = YES,
     .a = {TOKEN_DYN_A8, .symmetric = YES},
     .platforms = P(SM90),
     SCHEME("CompressedTensorsW4A8Fp8MoEMethod", MOEQ_SCHEME_W4A8_FP8)},
    {.branch = "dynamic_token_w4a8_int ctor: CPU only",
     .w = {W4A8_TOKEN_W},
     .input = YES,
     .a = {TOKEN_DYN_A8},
     .platforms = P_ALL & ~P(CPU),
     RAISE("ValueError", "CompressedTensorsW4A8Int8MoEMethod is CPU-only.")},
    {.branch = "dynamic_token_w4a8_int",
     .w = {W4A8_TOKEN_W},
     .input = YES,
     .a = {TOKEN_DYN_A8},
     SCHEME("CompressedTensorsW4A8Int8MoEMethod", MOEQ_SCHEME_W4A8_INT8)},

    {.branch = "else", RAISE("RuntimeError", "Unsupported FusedMoe scheme: {W}, {A}")},
};

const moeq__engine_table moeq__engine_vllm_003a19308 = {
    .name = "vllm@003a19308",
    .engine = "vllm",
    .commit = "003a19308",
    .commit_full = "003a1930801d92fec3a2e519d3400a220681b19a",
    .date = "commit date not recorded",
    .read = "compressed_tensors_moe.py at 003a1930801d (get_moe_method, the MoE method "
            "constructors); compressed_tensors.py of the same generation (the _is_* "
            "predicates, from_config, get_scheme_dict)",
    .ignore_rule = MOEQ__EI_EXACT,
    .group_format = 1,
    .fill_format = 1,
    .act_formats =
        F(NAIVE_QUANTIZED) | F(INT_QUANTIZED) | F(FLOAT_QUANTIZED) | F(NVFP4_PACK_QUANTIZED),
    .keep_declared = 1,
    .int_weight_only = 0,
    .skip_attention = 1,
    .platforms = P_ALL,
    .backends = BE(AUTO) | BE(MARLIN) | BE(TRITON) | BE(CUTLASS) | BE(FLASHINFER_TRTLLM),
    .rows = k_rows,
    .n_rows = (uint32_t)MOEQ__ARRAY_LEN(k_rows),
};

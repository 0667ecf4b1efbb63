/*
 * engine_sglang_d315eb725.c - SGLang's compressed-tensors MoE dispatch at
 * upstream main d315eb725 (2026-08-22), as data.  Source: the behavioural
 * spec shared/spec/sglang-moe-dispatch.md (sections 3-6, 13, 16), which
 * describes python/sglang/srt/layers/quantization/compressed_tensors/
 * compressed_tensors.py (get_quant_method, get_moe_scheme, the _is_*
 * predicates) and the scheme constructors at that commit.
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

static const moeq__engine_row k_rows[] = {
    /* get_quant_method: the MXFP4 bypass, before any probing, ignore list unread. */
    {.branch = "4.1 _is_mxfp4_moe: \"mxfp4\" in the top-level format",
     .stage = MOEQ__ES_CONFIG,
     .top_format = F(MXFP4_PACK_QUANTIZED),
     SCHEME("Mxfp4MoEMethod", MOEQ_SCHEME_W4A16_MXFP4)},
    {.branch = "4.1 _is_mxfp4_moe: FusedMoE/Linear weights fp4 group 32 symmetric",
     .stage = MOEQ__ES_CONFIG,
     .w = {.bits = B(4),
           .types = T_FLOAT,
           .strategies = S(GROUP),
           .group_size = 32,
           .symmetric = YES},
     SCHEME("Mxfp4MoEMethod", MOEQ_SCHEME_W4A16_MXFP4)},

    /* a1: MxInt4 under flashinfer_trtllm; its constructor's checks first. */
    {.branch = "a1 ctor: actorder",
     .w = {MXINT4_W, .actorder = YES},
     .input = NO,
     .platforms = P_NOT_NPU,
     .backends = BE(FLASHINFER_TRTLLM),
     RAISE("AssertionError", "Actorder is not supported by flashinfer_trtllm backend")},
    {.branch = "a1 ctor: top-level format",
     .w = {MXINT4_W},
     .input = NO,
     .platforms = P_NOT_NPU,
     .backends = BE(FLASHINFER_TRTLLM),
     .not_top_format = F(PACK_QUANTIZED),
     RAISE("ValueError", "For Fused MoE layers, only pack-quantized is supported for the mxint4")},
    {.branch = "a1",
     .w = {MXINT4_W},
     .input = NO,
     .platforms = P_NOT_NPU,
     .backends = BE(FLASHINFER_TRTLLM),
     SCHEME("CompressedTensorsMxInt4MoE", MOEQ_SCHEME_MXINT4)},

    /* a2-a4 share the WNA16 constructor: top-level pack-quantized, 4 or 8 bits. */
    {.branch = "a2-a4 ctor: top-level format",
     .w = {WNA16_W},
     .input = NO,
     .platforms = P_NOT_NPU,
     .not_top_format = F(PACK_QUANTIZED),
     RAISE("ValueError", WNA16_CTOR_MSG)},
    {.branch = "a2-a4 ctor: bits",
     .w = {WNA16_W, .bits = ~(B(4) | B(8))},
     .input = NO,
     .platforms = P_NOT_NPU,
     RAISE("ValueError", WNA16_CTOR_MSG)},
    {.branch = "a2 (ROCm)",
     .w = {WNA16_W},
     .input = NO,
     .platforms = P(ROCM),
     SCHEME("CompressedTensorsWNA16TritonMoE", MOEQ_SCHEME_WNA16)},
    {.branch = "a3 (backend triton)",
     .w = {WNA16_W},
     .input = NO,
     .platforms = P_NOT_NPU,
     .backends = BE(TRITON),
     SCHEME("CompressedTensorsWNA16TritonMoE", MOEQ_SCHEME_WNA16)},
    {.branch = "a4 (Marlin)",
     .w = {WNA16_W},
     .input = NO,
     .platforms = P_NOT_NPU,
     SCHEME("CompressedTensorsWNA16MoE", MOEQ_SCHEME_WNA16)},
    /* a' / a'': on NPU only 4-bit symmetric weight-only is taken; the rest
     * falls off the chain and loads unquantized, silently. */
    {.branch = "a' (NPU, _is_dynamic_token_w4)",
     .w = {WNA16_W, .bits = B(4), .symmetric = YES},
     .input = NO,
     .platforms = P(NPU),
     SCHEME("NPUCompressedTensorsW4A16Int4DynamicMoE", MOEQ_SCHEME_NPU_W4A16_INT4)},
    {.branch = "a'' (NPU, falls through: None)",
     .w = {WNA16_W},
     .input = NO,
     .platforms = P(NPU),
     .effect = MOEQ__EE_UNQUANTIZED,
     .cls = "UnquantizedFusedMoEMethod",
     .moeq_scheme = MOEQ_SCHEME_UNQUANTIZED},

    /* b: NVFP4; the constructor wants Blackwell. */
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

    /* c: FP8 W8A8.  The predicate takes any dynamic input, or static
     * symmetric per-tensor input; the constructor then asserts (no message)
     * per-tensor/per-tensor, channel/token, or block weights. */
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

    /* d dereferences the input args: weight-only configs that got here crash. */
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

    /* e: W4AFP8, gated on the top-level format. */
    {.branch = "e (NPU, dynamic-token W4A8): ctor calls .get on the config",
     .w = {W4AFP8_W, .strategies = S(GROUP) | S(CHANNEL)},
     .input = YES,
     .a = {W4AFP8_A, .strategies = S(TOKEN)},
     .top_format = F(PACK_QUANTIZED),
     .platforms = P(NPU),
     RAISE("AttributeError", "'CompressedTensorsConfig' object has no attribute 'get'")},
    {.branch = "e ctor: reads target_scheme_map[\"Linear\"]",
     .w = {W4AFP8_W},
     .input = YES,
     .a = {W4AFP8_A},
     .top_format = F(PACK_QUANTIZED),
     .linear = NO,
     RAISE("KeyError", "'Linear'")},
    {.branch = "e",
     .w = {W4AFP8_W},
     .input = YES,
     .a = {W4AFP8_A},
     .top_format = F(PACK_QUANTIZED),
     .effect = MOEQ__EE_LINEAR_ARGS,
     .cls = "CompressedTensorsW4AFP8MoE",
     .moeq_scheme = MOEQ_SCHEME_W4A8_FP8},

    /* f: dynamic-token W4A8 outside pack-quantized. */
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

const moeq__engine_table moeq__engine_sglang_d315eb725 = {
    .name = "sglang@d315eb725",
    .engine = "sglang",
    .commit = "d315eb725",
    .commit_full = "d315eb725044e435b146c85488b7c6d9222f7fec",
    .date = "2026-08-22",
    .read = "upstream main of 2026-08-22; read through shared/spec/sglang-moe-dispatch.md "
            "(compressed_tensors.py get_quant_method, get_moe_scheme, the _is_* predicates; "
            "schemes/*_moe.py constructors)",
    .ignore_rule = MOEQ__EI_SUFFIX,
    .group_format = 1,
    .fill_format = 0,
    .act_formats = F(NAIVE_QUANTIZED) | F(INT_QUANTIZED) | F(FLOAT_QUANTIZED) |
                   F(NVFP4_PACK_QUANTIZED) | F(PACK_QUANTIZED),
    .keep_declared = 0,
    .int_weight_only = 1,
    .platforms = P_ALL,
    .backends = BE(AUTO) | BE(TRITON) | BE(MARLIN) | BE(FLASHINFER_TRTLLM),
    .rows = k_rows,
    .n_rows = (uint32_t)MOEQ__ARRAY_LEN(k_rows),
};

/*
 * check_engine.c - the engine dispatch tables (src/report/engine*.c): for a
 * table of (config, MoE layer, engine spec), the class the engine builds or
 * the exception it raises, and what differs from moeq; every seed failure
 * of the project is one of the cases.  Also: spec parsing, the shape every
 * table must have, and `moeq_plan` with an engine.
 */
#include "test_util.h"

#include "report/engine.h"

#include <dirent.h>

/* Configs, as quantization_config blocks. */
#define ARGS_INT4_G128                                                                             \
    "{\"num_bits\":4,\"type\":\"int\",\"symmetric\":true,\"strategy\":\"group\",\"group_size\":"   \
    "128}"
#define ARGS_INT4_G32                                                                              \
    "{\"num_bits\":4,\"type\":\"int\",\"symmetric\":true,\"strategy\":\"group\",\"group_size\":"   \
    "32}"
#define ARGS_INT8_TOKEN                                                                            \
    "{\"num_bits\":8,\"type\":\"int\",\"symmetric\":true,\"strategy\":\"token\",\"dynamic\":true}"
#define ARGS_FP8_TOKEN                                                                             \
    "{\"num_bits\":8,\"type\":\"float\",\"symmetric\":true,\"strategy\":\"token\",\"dynamic\":"    \
    "true}"
#define ARGS_FP8_CHANNEL                                                                           \
    "{\"num_bits\":8,\"type\":\"float\",\"symmetric\":true,\"strategy\":\"channel\"}"
#define ARGS_FP8_TENSOR                                                                            \
    "{\"num_bits\":8,\"type\":\"float\",\"symmetric\":true,\"strategy\":\"tensor\"}"
#define ARGS_NVFP4_W                                                                               \
    "{\"num_bits\":4,\"type\":\"float\",\"symmetric\":true,\"strategy\":\"tensor_group\",\"group_" \
    "size\":16}"
#define ARGS_NVFP4_A                                                                               \
    "{\"num_bits\":4,\"type\":\"float\",\"symmetric\":true,\"strategy\":\"tensor_group\",\"group_" \
    "size\":16,\"dynamic\":\"local\"}"

#define ONE_GROUP(fmt, targets, w, a, ignore)                                                      \
    "{\"quant_method\":\"compressed-tensors\",\"format\":\"" fmt "\",\"config_groups\":{"          \
    "\"group_0\":{\"targets\":" targets ",\"weights\":" w ",\"input_activations\":" a "}},"        \
    "\"ignore\":" ignore "}"

/* The no-Linear WNA16 config of SGLang's own test (spec section 18). */
static const char k_regex_wna16[] =
    ONE_GROUP("pack-quantized", "[\"re:.*mlp.experts.*\"]", ARGS_INT4_G128, "null",
              "[\"lm_head\",\"re:.*self_attn.*\",\"re:.*mlp.gate$\"]");
/* Kimi-K2-style INT4 group-32 weight-only (MxInt4 under flashinfer_trtllm). */
static const char k_int4_g32[] =
    ONE_GROUP("pack-quantized", "[\"Linear\"]", ARGS_INT4_G32, "null", "[\"lm_head\"]");
/* W4A8 INT8 (dynamic per-token int8 activations) outside pack-quantized. */
static const char k_w4a8_int[] =
    ONE_GROUP("int-quantized", "[\"Linear\"]", ARGS_INT4_G128, ARGS_INT8_TOKEN, "[\"lm_head\"]");
static const char k_w4a8_mixed[] =
    "{\"quant_method\":\"compressed-tensors\",\"format\":\"mixed-precision\",\"config_groups\":{"
    "\"group_0\":{\"targets\":[\"Linear\"],\"format\":\"int-quantized\",\"weights\":" ARGS_INT4_G128
    ",\"input_activations\":" ARGS_INT8_TOKEN "}},\"ignore\":[\"lm_head\"]}";
/* W4AFP8 on the experts only (no "Linear" target), and with one. */
static const char k_w4afp8_regex[] =
    ONE_GROUP("pack-quantized", "[\"re:.*mlp\\\\.experts\\\\..*\"]", ARGS_INT4_G128, ARGS_FP8_TOKEN,
              "[\"lm_head\"]");
static const char k_w4afp8_linear[] =
    ONE_GROUP("pack-quantized", "[\"Linear\"]", ARGS_INT4_G128, ARGS_FP8_TOKEN, "[\"lm_head\"]");
static const char k_w8a8_int[] =
    ONE_GROUP("int-quantized", "[\"Linear\"]",
              "{\"num_bits\":8,\"type\":\"int\",\"symmetric\":true,\"strategy\":\"channel\"}",
              ARGS_INT8_TOKEN, "[\"lm_head\"]");
static const char k_fp8_dynamic[] =
    ONE_GROUP("float-quantized", "[\"Linear\"]", ARGS_FP8_CHANNEL, ARGS_FP8_TOKEN, "[\"lm_head\"]");
static const char k_fp8_weight_only_tensor[] =
    ONE_GROUP("float-quantized", "[\"Linear\"]", ARGS_FP8_TENSOR, "null", "[\"lm_head\"]");
static const char k_fp8_weight_only_channel[] =
    ONE_GROUP("float-quantized", "[\"Linear\"]", ARGS_FP8_CHANNEL, "null", "[\"lm_head\"]");
static const char k_fp8_channel_static_tensor[] = ONE_GROUP(
    "float-quantized", "[\"Linear\"]", ARGS_FP8_CHANNEL,
    "{\"num_bits\":8,\"type\":\"float\",\"symmetric\":true,\"strategy\":\"tensor\"}", "[]");
static const char k_nvfp4[] =
    ONE_GROUP("nvfp4-pack-quantized", "[\"Linear\"]", ARGS_NVFP4_W, ARGS_NVFP4_A, "[\"lm_head\"]");
static const char k_int8_static_tensor[] =
    ONE_GROUP("int-quantized", "[\"Linear\"]",
              "{\"num_bits\":8,\"type\":\"int\",\"symmetric\":true,\"strategy\":\"tensor\"}",
              "{\"num_bits\":8,\"type\":\"int\",\"symmetric\":true,\"strategy\":\"tensor\"}", "[]");
static const char k_asym_wna16[] = ONE_GROUP("pack-quantized", "[\"Linear\"]",
                                             "{\"num_bits\":4,\"type\":\"int\",\"symmetric\":false,"
                                             "\"strategy\":\"group\",\"group_size\":128}",
                                             "null", "[]");
static const char k_int3[] = ONE_GROUP("pack-quantized", "[\"Linear\"]",
                                       "{\"num_bits\":3,\"type\":\"int\",\"symmetric\":true,"
                                       "\"strategy\":\"group\",\"group_size\":128}",
                                       "null", "[]");
/* A plain ignore entry that is a substring of the expert names. */
static const char k_ignore_substring[] =
    ONE_GROUP("pack-quantized", "[\"Linear\"]", ARGS_INT4_G128, "null", "[\"mlp.experts\"]");
/* No target reaches the experts. */
static const char k_attention_only[] =
    ONE_GROUP("pack-quantized", "[\"re:.*self_attn.*\"]", ARGS_INT4_G128, "null", "[]");
/* gate_proj in one group, up/down in another with other args. */
static const char k_split_projections[] =
    "{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\",\"config_groups\":{"
    "\"g_gate\":{\"targets\":[\"re:.*gate_proj$\"],\"weights\":" ARGS_INT4_G32 "},"
    "\"g_rest\":{\"targets\":[\"re:.*(up|down)_proj$\"],\"weights\":" ARGS_INT4_G128 "}}}";
/* Two overlapping regex targets: config order (engines) and compressed-
 * tensors order (lexicographic) pick different groups. */
static const char k_overlap[] =
    "{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\",\"config_groups\":{"
    "\"int8\":{\"targets\":[\"re:model.*experts.*\"],\"weights\":{\"num_bits\":8,\"type\":\"int\","
    "\"symmetric\":true,\"strategy\":\"group\",\"group_size\":128}},"
    "\"int4\":{\"targets\":[\"re:.*experts.*\"],\"weights\":" ARGS_INT4_G128 "}}}";
/* A mixed-precision W4A16 MoE + FP8 dense checkpoint: the experts' group
 * says pack-quantized, the top level mixed-precision. */
static const char k_mixed_wna16[] =
    "{\"quant_method\":\"compressed-tensors\",\"format\":\"mixed-precision\",\"config_groups\":{"
    "\"dense\":{\"targets\":[\"re:.*self_attn.*\"],\"format\":\"float-quantized\","
    "\"weights\":" ARGS_FP8_CHANNEL ",\"input_activations\":" ARGS_FP8_TOKEN "},"
    "\"experts\":{\"targets\":[\"re:.*mlp\\\\.experts.*\"],\"format\":\"pack-quantized\","
    "\"weights\":" ARGS_INT4_G128 "}}}";

/* int4 weight-only in naive-quantized: vLLM asserts float weights. */
static const char k_naive_int4[] =
    ONE_GROUP("naive-quantized", "[\"Linear\"]", ARGS_INT4_G128, "null", "[]");

/* An attention-only group vLLM drops before reading it (int8 weights
 * without inputs in int-quantized would otherwise assert). */
static const char k_attention_group[] =
    "{\"quant_method\":\"compressed-tensors\",\"format\":\"int-quantized\",\"config_groups\":{"
    "\"attn\":{\"targets\":[\"LlamaAttention\"],\"weights\":{\"num_bits\":8,\"type\":\"int\","
    "\"symmetric\":true,\"strategy\":\"tensor\"}},"
    "\"moe\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":8,\"type\":\"int\","
    "\"symmetric\":true,\"strategy\":\"channel\"},\"input_activations\":" ARGS_INT8_TOKEN "}}}";

typedef struct engine_case {
    const char *config; /* JSON, or a file under tests/data/configs when it ends in .json */
    const char *layer;  /* MoE prefix */
    const char *engine;
    const char *want;    /* class name, or a substring of "Type: message" */
    const char *differs; /* the differs words ("" none) */
} engine_case;

#define MLP "model.layers.3.mlp.experts"

static const engine_case k_cases[] = {
    /* Seed failures, seed era: KeyError 'Linear' on a regex-only WNA16
     * config, and the abstract MxInt4 class. */
    {k_regex_wna16, MLP, "sglang@eba6af385d", "KeyError: 'Linear'", "error"},
    {k_int4_g32, MLP, "sglang@eba6af385d:sm100,flashinfer_trtllm",
     "TypeError: Can't instantiate abstract class CompressedTensorsMxInt4MoE with abstract method "
     "apply_weights",
     "error"},
    /* Seed failures, snapshot: W4A8 int8 on CUDA, W4AFP8 without Linear. */
    {k_w4a8_int, MLP, "sglang@d315eb725",
     "NotImplementedError: The W4A8Int8 Fused MoE scheme is implemented only for NPU for now.",
     "error"},
    {k_w4a8_mixed, MLP, "sglang@d315eb725", "NotImplementedError: The W4A8Int8", "error"},
    {k_w4afp8_regex, MLP, "sglang@d315eb725", "KeyError: 'Linear'", "error"},
    /* The same configs where the engines get them right. */
    {k_regex_wna16, MLP, "sglang@d315eb725", "CompressedTensorsWNA16MoE", ""},
    {k_regex_wna16, MLP, "sglang", "CompressedTensorsWNA16MoE", ""},
    {k_regex_wna16, MLP, "sglang:rocm", "CompressedTensorsWNA16TritonMoE", ""},
    {k_regex_wna16, MLP, "sglang:sm90,triton", "CompressedTensorsWNA16TritonMoE", ""},
    {k_int4_g32, MLP, "sglang@d315eb725:sm100,flashinfer_trtllm", "CompressedTensorsMxInt4MoE",
     "scheme"},
    {k_int4_g32, MLP, "sglang@eba6af385d", "CompressedTensorsWNA16MoE", ""},
    {k_w4afp8_linear, MLP, "sglang@d315eb725", "CompressedTensorsW4AFP8MoE", ""},
    {k_w4a8_int, MLP, "sglang@d315eb725:npu", "AttributeError: 'CompressedTensorsConfig'", "error"},
    /* Before W4AFP8 existed, pack-quantized dropped the input args. */
    {k_w4afp8_linear, MLP, "sglang@eba6af385d", "CompressedTensorsWNA16MoE", "scheme"},
    /* INT8 W8A8: NPU only. */
    {k_w8a8_int, MLP, "sglang", "NotImplementedError: The W8A8Int8 Fused MoE scheme", "error"},
    /* NPU classes compare equal to moeq's scheme of the same computation. */
    {k_w8a8_int, MLP, "sglang:npu", "NPUCompressedTensorsW8A8Int8DynamicMoE", ""},
    {k_int8_static_tensor, MLP, "sglang",
     "RuntimeError: Unsupported FusedMoe scheme: num_bits=8 "
     "type='int' symmetric=True group_size=None strategy='tensor'",
     "error"},
    /* FP8. */
    {k_fp8_dynamic, MLP, "sglang", "CompressedTensorsW8A8Fp8MoE", ""},
    {k_fp8_channel_static_tensor, MLP, "sglang", "AssertionError", "error"},
    {k_fp8_weight_only_tensor, MLP, "sglang",
     "AttributeError: 'NoneType' object has no attribute 'num_bits'", "error"},
    {k_fp8_weight_only_channel, MLP, "sglang",
     "ValueError: ('For Fused MoE layers, only ', 'pack-quantized '", "error"},
    /* NVFP4 wants Blackwell. */
    {k_nvfp4, MLP, "sglang", "ValueError: Current platform does not support NVFP4", "error"},
    {k_nvfp4, MLP, "sglang:sm100", "CompressedTensorsW4A4Nvfp4MoE", ""},
    /* Asymmetric WNA16: taken since #25292, not in the seed era. */
    {k_asym_wna16, MLP, "sglang", "CompressedTensorsWNA16MoE", ""},
    {k_asym_wna16, MLP, "sglang@eba6af385d", "AttributeError: 'NoneType'", "error"},
    {k_int3, MLP, "sglang", "ValueError: ('For Fused MoE layers", "error"},
    /* WNA16 on NPU: 4-bit symmetric only, the rest silently unquantized. */
    {k_int4_g32, MLP, "sglang:npu", "NPUCompressedTensorsW4A16Int4DynamicMoE", ""},
    {k_asym_wna16, MLP, "sglang:npu", "UnquantizedFusedMoEMethod", "unquantized"},
    /* Mixed-precision top-level format: the WNA16 constructor reads it. */
    {k_mixed_wna16, MLP, "sglang", "ValueError: ('For Fused MoE layers, only ', 'pack-quantized '",
     "error"},
    /* MXFP4: the bypass (snapshot) ignores the ignore list. */
    {"qwen3.5-27b-mxfp4a16-kaitchup-abbrev.json", "model.language_model.layers.0.mlp.experts",
     "sglang", "Mxfp4MoEMethod", ""},
    {"qwen3.5-27b-mxfp4a16-kaitchup-abbrev.json", "model.language_model.layers.0.mlp.experts",
     "sglang@eba6af385d", "ValueError: ('For Fused MoE layers, only ', 'pack-quantized '", "error"},
    {"glm-5.3-int4-int8mix-rtn-g64-mixed-regex-no-linear.json", "model.layers.1.mlp.experts",
     "sglang", "UnquantizedFusedMoEMethod", ""},
    {"glm-5.3-int4-int8mix-rtn-g64-mixed-regex-no-linear.json", "model.layers.5.mlp.experts",
     "sglang@eba6af385d", "KeyError: 'Linear'", "error"},
    {"qwen3-w8a8-int8-mse-observer-v0.13.json", MLP, "sglang", "NotImplementedError", "error"},
    /* Ignore matching: substring in the seed era, dotted suffix later. */
    {k_ignore_substring, MLP, "sglang@eba6af385d", "UnquantizedFusedMoEMethod", "unquantized"},
    {k_ignore_substring, MLP, "sglang@d315eb725", "CompressedTensorsWNA16MoE", ""},
    /* Probing. */
    {k_attention_only, MLP, "sglang",
     "ValueError: Unable to find matching target for model.layers.3.mlp.experts.0.gate_proj in "
     "the compressed-tensors config.",
     "error"},
    {k_split_projections, MLP, "sglang",
     "ValueError: All MoE projections need to have same quantization scheme but found multiple",
     "error"},
    /* Precedence: the engine takes the first target in config order. */
    {k_overlap, MLP, "sglang", "CompressedTensorsWNA16MoE", "group"},
    {k_overlap, MLP, "vllm", "CompressedTensorsWNA16MarlinMoEMethod", "group"},

    /* vLLM 003a19308. */
    {k_regex_wna16, MLP, "vllm", "CompressedTensorsWNA16MarlinMoEMethod", ""},
    {k_regex_wna16, MLP, "vllm@003a1930801d:rocm", "CompressedTensorsWNA16MoEMethod", ""},
    {k_regex_wna16, MLP, "vllm:sm90,cutlass", "CompressedTensorsW4A16CutlassMoEMethod", ""},
    {k_asym_wna16, MLP, "vllm", "AssertionError: Only symmetric quantization is supported for MoE",
     "error"},
    {k_asym_wna16, MLP, "vllm:rocm", "CompressedTensorsWNA16MoEMethod", ""},
    {k_int4_g32, MLP, "vllm:sm100,flashinfer_trtllm", "CompressedTensorsWNA16MarlinMoEMethod",
     "scheme"},
    {k_int3, MLP, "vllm", "but got format: pack-quantized  and bits: 3')", "error"},
    {k_mixed_wna16, MLP, "vllm", "CompressedTensorsWNA16MarlinMoEMethod", ""},
    {k_ignore_substring, MLP, "vllm", "CompressedTensorsWNA16MarlinMoEMethod", ""},
    /* _is_fp8_w4a8_sm90 does not check the input type: INT8 inputs take
     * the FP8 W4A8 class on SM90; elsewhere the INT8 class is CPU-only. */
    {k_w4a8_int, MLP, "vllm", "CompressedTensorsW4A8Fp8MoEMethod", "scheme"},
    {k_w4a8_int, MLP, "vllm:sm80", "ValueError: CompressedTensorsW4A8Int8MoEMethod is CPU-only.",
     "error"},
    {k_w4a8_int, MLP, "vllm:cpu", "CompressedTensorsW4A8Int8MoEMethod", ""},
    {k_w4afp8_regex, MLP, "vllm", "CompressedTensorsW4A8Fp8MoEMethod", ""},
    {k_w4afp8_regex, MLP, "vllm:sm100",
     "ValueError: CompressedTensorsW4A8Int8MoEMethod is CPU-only", "error"},
    {k_w8a8_int, MLP, "vllm", "CompressedTensorsW8A8Int8MoEMethod", ""},
    {k_int8_static_tensor, MLP, "vllm", "RuntimeError: Unsupported FusedMoe scheme", "error"},
    {k_fp8_dynamic, MLP, "vllm", "CompressedTensorsW8A8Fp8MoEMethod", ""},
    {k_fp8_weight_only_tensor, MLP, "vllm",
     "AttributeError: 'NoneType' object has no attribute "
     "'num_bits'",
     "error"},
    {k_nvfp4, MLP, "vllm", "CompressedTensorsW4A4Nvfp4MoEMethod", ""},
    {k_naive_int4, MLP, "vllm", "AssertionError", "error"},
    {k_naive_int4, MLP, "sglang", "ValueError: ('For Fused MoE layers", "error"},
    {"qwen3.5-27b-mxfp4a16-kaitchup-abbrev.json", "model.language_model.layers.0.mlp.experts",
     "vllm", "CompressedTensorsW4A4Mxfp4MoEMethod", ""},
    {k_attention_only, MLP, "vllm", "ValueError: Unable to find matching target", "error"},
    {k_attention_group, MLP, "vllm", "CompressedTensorsW8A8Int8MoEMethod", ""},
    {k_naive_int4, "model.layers.0.mlp.experts", "vllm", "AssertionError", "error"},
};

static moeq_config *load(const char *config) {
    moeq_config *cfg = NULL;
    moeq_error err;
    moeq_status st;
    size_t n = strlen(config);
    if (n > 5 && strcmp(config + n - 5, ".json") == 0) {
        char path[512];
        snprintf(path, sizeof path, "%s/configs/%s", MOEQ_TEST_DATA_DIR, config);
        st = moeq_config_load(path, NULL, &cfg, &err);
    } else {
        st = moeq_config_parse(config, n, NULL, &cfg, &err);
    }
    ck_assert_msg(st == MOEQ_OK, "%s: %s", config, err.message);
    return cfg;
}

/* Judges one case; returns "Class" or "Type: message" and the differs words. */
static void judge(const engine_case *c, char *out, size_t n, char *differs, size_t dn) {
    moeq_config *cfg = load(c->config);
    moeq_error err;
    moeq__engine *e = NULL;
    ck_assert_status(moeq__engine_create(c->engine, cfg, &e, &err), MOEQ_OK, &err);
    moeq__match_scratch *s = NULL;
    ck_assert_status(moeq__match_scratch_create(cfg->matcher, &s, &err), MOEQ_OK, &err);
    moeq_resolution r;
    moeq_selection sel;
    bool failed = moeq_resolve_moe(cfg, c->layer, 8, NULL, NULL, &r, &err) != MOEQ_OK;
    int32_t scheme = -1;
    if (!failed) {
        failed = moeq_select(&r, c->layer, NULL, &sel, &err) != MOEQ_OK;
        if (!failed) scheme = sel.scheme;
    }
    moeq__engine_verdict v;
    ck_assert_status(moeq__engine_judge(e, s, c->layer, strlen(c->layer), failed ? NULL : &r,
                                        scheme, failed, &v, &err),
                     MOEQ_OK, &err);
    ck_assert_ptr_nonnull(v.row);
    moeq__sb sb;
    moeq__sb_init(&sb);
    const char *cls = moeq__engine_verdict_scheme(&v);
    if (cls) {
        moeq__sb_puts(&sb, cls);
    } else {
        moeq__engine_verdict_error(&v, c->layer, strlen(c->layer), &sb);
    }
    ck_assert(!sb.failed);
    snprintf(out, n, "%.*s", (int)sb.len, sb.data);
    sb.len = 0;
    moeq__engine_differs_words(v.differs, ",", &sb);
    snprintf(differs, dn, "%.*s", (int)sb.len, sb.len ? sb.data : "");
    moeq__sb_free(&sb);
    moeq__match_scratch_destroy(s);
    moeq__engine_destroy(e);
    moeq_config_destroy(cfg);
}

START_TEST(test_engine_cases) {
    const engine_case *c = &k_cases[_i];
    char got[2048], differs[128];
    judge(c, got, sizeof got, differs, sizeof differs);
    ck_assert_msg(strstr(got, c->want) != NULL, "case %d (%s on %s): want \"%s\", got \"%s\"", _i,
                  c->engine, c->layer, c->want, got);
    ck_assert_msg(strcmp(differs, c->differs) == 0, "case %d (%s): differs \"%s\", want \"%s\"", _i,
                  c->engine, differs, c->differs);
}
END_TEST

/* Every table ends with a catch-all row, so every layer gets a verdict;
 * every row names its outcome fully. */
START_TEST(test_engine_tables_shape) {
    ck_assert_uint_ge(moeq__engine_table_count(), 2);
    for (uint32_t i = 0; i < moeq__engine_table_count(); i++) {
        const moeq__engine_table *t = moeq__engine_table_at(i);
        ck_assert_ptr_nonnull(t);
        ck_assert_uint_gt(t->n_rows, 0);
        ck_assert_msg(strncmp(t->commit_full, t->commit, strlen(t->commit)) == 0, "%s", t->commit);
        const moeq__engine_row *last = &t->rows[t->n_rows - 1];
        ck_assert_msg(last->stage == MOEQ__ES_LAYER && last->input == MOEQ__EC_ANY &&
                          !last->w.bits && !last->w.types && !last->w.strategies &&
                          !last->top_format && !last->not_top_format && !last->platforms &&
                          !last->backends && last->linear == MOEQ__EC_ANY,
                      "%s@%s: the last row is not a catch-all", t->engine, t->commit);
        for (uint32_t k = 0; k < t->n_rows; k++) {
            const moeq__engine_row *r = &t->rows[k];
            ck_assert_ptr_nonnull(r->branch);
            if (r->effect == MOEQ__EE_RAISE) {
                ck_assert_msg(r->exception && r->message && r->moeq_scheme == -1, "%s row %u",
                              t->engine, k);
            } else {
                ck_assert_msg(r->cls && moeq_scheme_name(r->moeq_scheme) != NULL, "%s row %u",
                              t->engine, k);
            }
        }
    }
}
END_TEST

typedef struct bad_spec {
    const char *spec;
    const char *want;
} bad_spec;

static const bad_spec k_bad_specs[] = {
    {"tensorrt", "not modelled"},
    {"sglang@0000000", "not modelled"},
    {"sglang@d3", "not modelled"}, /* prefixes need 4 characters */
    {"sglang:tpu", "platform \"tpu\" is not modelled"},
    {"sglang:sm90,deep_gemm", "MoE backend \"deep_gemm\" is not modelled"},
    {"sglang@eba6:sm90,triton", "MoE backend \"triton\""},
    {"vllm:npu", "platform \"npu\" is not modelled for vllm@003a19308"},
};

START_TEST(test_engine_bad_specs) {
    moeq_config *cfg = load(k_regex_wna16);
    moeq__engine *e = (moeq__engine *)1;
    moeq_error err;
    moeq_status st = moeq__engine_create(k_bad_specs[_i].spec, cfg, &e, &err);
    ck_assert_int_eq(st, MOEQ_STATUS_INVALID_ARG);
    ck_assert_ptr_null(e);
    ck_assert_msg(strstr(err.message, k_bad_specs[_i].want) != NULL, "%s: %s", k_bad_specs[_i].spec,
                  err.message);
    /* An unknown version lists the modelled ones. */
    if (strcmp(k_bad_specs[_i].want, "not modelled") == 0) {
        ck_assert_ptr_nonnull(strstr(err.message, "sglang@d315eb725 (2026-08-22)"));
    }
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_engine_labels) {
    moeq_config *cfg = load(k_regex_wna16);
    moeq_error err;
    moeq__engine *e = NULL;
    ck_assert_status(moeq__engine_create("sglang", cfg, &e, &err), MOEQ_OK, &err);
    ck_assert_str_eq(moeq__engine_label(e), "sglang@d315eb725:sm90,auto");
    moeq__engine_destroy(e);
    ck_assert_status(moeq__engine_create("sglang@eba6af:blackwell,trtllm", cfg, &e, &err), MOEQ_OK,
                     &err);
    ck_assert_str_eq(moeq__engine_label(e), "sglang@eba6af385d:sm100,flashinfer_trtllm");
    moeq__engine_destroy(e);
    moeq_config_destroy(cfg);
}
END_TEST

/* The public API: the list of versions and moeq_engine_judge. */
START_TEST(test_engine_public_api) {
    ck_assert_uint_eq(moeq_engine_count(), moeq__engine_table_count());
    ck_assert_str_eq(moeq_engine_name(0), "sglang@d315eb725");
    ck_assert_ptr_nonnull(strstr(moeq_engine_summary(0), "2026-08-22"));
    for (uint32_t i = 0; i < moeq_engine_count(); i++) {
        const moeq__engine_table *t = moeq__engine_table_at(i);
        char want[64];
        snprintf(want, sizeof want, "%s@%s", t->engine, t->commit);
        ck_assert_str_eq(moeq_engine_name(i), want);
    }
    ck_assert_ptr_null(moeq_engine_name(moeq_engine_count()));
    ck_assert_ptr_null(moeq_engine_summary(moeq_engine_count()));

    moeq_config *cfg = load(k_w4afp8_regex);
    moeq_engine_verdict v;
    moeq_error err;
    ck_assert_ok(moeq_engine_judge(cfg, "sglang", MLP, 8, NULL, NULL, NULL, &v, &err), &err);
    ck_assert_str_eq(v.engine, "sglang@d315eb725:sm90,auto");
    ck_assert_str_eq(v.scheme, "");
    ck_assert_str_eq(v.error, "KeyError: 'Linear'");
    ck_assert_ptr_nonnull(strstr(v.branch, "Linear"));
    ck_assert_int_eq(v.group_index, 0);
    ck_assert_uint_eq(v.differs, MOEQ_ENGINE_DIFFERS_ERROR);
    ck_assert_int_eq(v.moeq_scheme, MOEQ_SCHEME_W4A8_FP8);
    ck_assert_ok(moeq_engine_judge(cfg, "vllm", MLP, 8, NULL, NULL, NULL, &v, &err), &err);
    ck_assert_str_eq(v.scheme, "CompressedTensorsW4A8Fp8MoEMethod");
    ck_assert_str_eq(v.error, "");
    ck_assert_uint_eq(v.differs, 0);
    /* Engines probe gate_proj/up_proj/down_proj whatever the model calls them. */
    const char *proj[3] = {"w1", "w3", "w2"};
    ck_assert_ok(moeq_engine_judge(cfg, "vllm", "model.layers.3.block_sparse_moe", 4, proj, NULL,
                                   NULL, &v, &err),
                 &err);
    ck_assert_str_eq(v.error, "ValueError: Unable to find matching target for "
                              "model.layers.3.block_sparse_moe.0.gate_proj in the "
                              "compressed-tensors config.");
    ck_assert_int_eq(moeq_engine_judge(cfg, "sglang@ffff", MLP, 8, NULL, NULL, NULL, &v, &err),
                     MOEQ_STATUS_INVALID_ARG);
    ck_assert_int_eq(moeq_engine_judge(cfg, "sglang", MLP, 0, NULL, NULL, NULL, &v, &err),
                     MOEQ_STATUS_INVALID_ARG);
    ck_assert_int_eq(moeq_engine_judge(NULL, "sglang", MLP, 8, NULL, NULL, NULL, &v, &err),
                     MOEQ_STATUS_INVALID_ARG);
    ck_assert_int_eq(moeq_engine_judge(cfg, "sglang", MLP, 8, NULL, NULL, NULL, NULL, &err),
                     MOEQ_STATUS_INVALID_ARG);
    moeq_config_destroy(cfg);
}
END_TEST

/* moeq_plan with an engine: the JSON keys and the table's ENGINE column. */
START_TEST(test_engine_plan) {
    moeq_config *cfg = load(k_w4afp8_regex);
    const char *lines = "model.layers.3.mlp.experts moe 4\nmodel.layers.3.self_attn.o_proj\n";
    moeq_plan_options po = {NULL, NULL, 1, 1, "sglang@d315eb725"};
    char *text = NULL;
    uint32_t errors = 0;
    moeq_error err;
    ck_assert_status(moeq_plan(cfg, lines, strlen(lines), &po, &text, &errors, &err), MOEQ_OK,
                     &err);
    ck_assert_ptr_nonnull(strstr(text,
                                 "{\"layer\":\"model.layers.3.mlp.experts\",\"engine\":"
                                 "\"sglang@d315eb725:sm90,auto\",\"engine_scheme\":null,"
                                 "\"engine_error\":\"KeyError: 'Linear'\",\"engine_group\":"
                                 "\"group_0\",\"engine_differs\":[\"error\"],\"kind\":\"moe\""));
    ck_assert_ptr_nonnull(strstr(text, "{\"layer\":\"model.layers.3.self_attn.o_proj\",\"engine\":"
                                       "\"sglang@d315eb725:sm90,auto\",\"engine_scheme\":null,"
                                       "\"engine_error\":null,\"engine_group\":null,"
                                       "\"engine_differs\":[],\"kind\":\"linear\""));
    moeq_free(text);
    po.json = 0;
    ck_assert_status(moeq_plan(cfg, lines, strlen(lines), &po, &text, &errors, &err), MOEQ_OK,
                     &err);
    ck_assert_ptr_nonnull(strstr(text, "engine sglang@d315eb725:sm90,auto\nLAYER"));
    ck_assert_ptr_nonnull(strstr(text, "KeyError *"));
    ck_assert_ptr_nonnull(strstr(text, "    engine: KeyError: 'Linear' [differs: error]\n"));
    moeq_free(text);
    po.engine = "nope";
    ck_assert_int_eq(moeq_plan(cfg, lines, strlen(lines), &po, &text, &errors, &err),
                     MOEQ_STATUS_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err.message, "engine \"nope\": not modelled"));
    moeq_config_destroy(cfg);
}
END_TEST

/* Every synth preset: written small, inspected with each engine; every MoE
 * row carries exactly one of a class and an exception.  The first MoE
 * row's verdict is printed (ctest -V shows the whole matrix). */
static const char *const k_engines[] = {"sglang", "sglang@eba6af385d", "vllm",
                                        "sglang:sm100,flashinfer_trtllm"};

/* What the first MoE layer of each preset gets, per engine of k_engines
 * (NULL: only checked for being one class or one exception). */
static const struct {
    const char *preset;
    const char *want[4];
} k_preset_wants[] = {
    {"glm-mini",
     {"CompressedTensorsWNA16MoE", "KeyError: 'Linear'", "CompressedTensorsWNA16MarlinMoEMethod",
      NULL}},
    {"w4a16-asym-actorder",
     {"CompressedTensorsWNA16MoE", "AttributeError: 'NoneType'", "AssertionError: Only symmetric",
      NULL}},
    {"w8a8-int8",
     {"NotImplementedError: The W8A8Int8", NULL, "CompressedTensorsW8A8Int8MoEMethod", NULL}},
    {"w8a8-int8-static",
     {"RuntimeError: Unsupported FusedMoe scheme", NULL,
      "RuntimeError: Unsupported FusedMoe scheme", NULL}},
    {"w4a8-int8",
     {"NotImplementedError: The W4A8Int8", NULL, "CompressedTensorsW4A8Fp8MoEMethod", NULL}},
    {"w4a8-fp8",
     {"NotImplementedError: The W4A8Int8", NULL, "CompressedTensorsW4A8Fp8MoEMethod", NULL}},
    {"nvfp4-w4a16",
     {"AttributeError: 'NoneType'", NULL, "CompressedTensorsW4A4Nvfp4MoEMethod", NULL}},
    {"nvfp4-w4a4",
     {"ValueError: Current platform does not support NVFP4", NULL,
      "CompressedTensorsW4A4Nvfp4MoEMethod", "CompressedTensorsW4A4Nvfp4MoE"}},
    {"mxfp4",
     {"Mxfp4MoEMethod", "ValueError: ('For Fused MoE layers", "CompressedTensorsW4A4Mxfp4MoEMethod",
      "Mxfp4MoEMethod"}},
    {"mxint4-g32",
     {"CompressedTensorsWNA16MoE", NULL, "CompressedTensorsWNA16MarlinMoEMethod",
      "CompressedTensorsMxInt4MoE"}},
    {"unquantized", {"UnquantizedFusedMoEMethod", NULL, "UnquantizedFusedMoEMethod", NULL}},
};

START_TEST(test_engine_synth_presets) {
    const char *preset = moeq_synth_preset_name((uint32_t)_i);
    ck_assert_ptr_nonnull(preset);
    char dir[64];
    moeq_test_mkdtemp(dir, sizeof dir, "moeq_engine");
    moeq_error err;
    moeq_synth_layout L;
    ck_assert_ok(moeq_synth_preset(preset, &L, &err), &err);
    L.num_layers = L.first_dense_layers + 2;
    L.num_experts = 4;
    L.top_k = 2;
    ck_assert_ok(moeq_synth_write(&L, dir, &err), &err);
    moeq_config *cfg = NULL;
    ck_assert_ok(moeq_config_load(dir, NULL, &cfg, &err), &err);
    moeq_checkpoint *ck = NULL;
    ck_assert_ok(moeq_checkpoint_open(dir, &ck, &err), &err);
    for (size_t k = 0; k < MOEQ__ARRAY_LEN(k_engines); k++) {
        moeq_inspect_options o = {NULL, NULL, 1, 1, k_engines[k]};
        char *text = NULL;
        moeq_inspect_summary sum;
        ck_assert_ok(moeq_inspect(cfg, ck, &o, &text, &sum, &err), &err);
        ck_assert_uint_gt(sum.moe_layers, 0);
        uint64_t moe_rows = 0;
        const char *first = NULL;
        for (const char *line = text; (line = strstr(line, "\n{\"layer\":")) != NULL; line++) {
            const char *end = strchr(line + 1, '\n');
            size_t len = end ? (size_t)(end - line) : strlen(line);
            char *row = strndup(line + 1, len - 1);
            ck_assert_ptr_nonnull(strstr(row, "\"engine\":\""));
            if (strstr(row, "\"kind\":\"moe\"")) {
                moe_rows++;
                bool cls = strstr(row, "\"engine_scheme\":null") == NULL;
                bool exc = strstr(row, "\"engine_error\":null") == NULL;
                ck_assert_msg(cls != exc, "%s/%s: %s", preset, k_engines[k], row);
                if (!first) first = line + 1;
            } else {
                ck_assert_ptr_nonnull(strstr(row, "\"engine_scheme\":null,\"engine_error\":null"));
            }
            free(row);
        }
        ck_assert_uint_eq(moe_rows, sum.moe_layers);
        const char *v = strstr(first, "\"engine_scheme\"");
        const char *e = strstr(first, ",\"kind\"");
        printf("%-24s %-34s %.*s\n", preset, k_engines[k], (int)(e - v), v);
        for (size_t w = 0; w < MOEQ__ARRAY_LEN(k_preset_wants); w++) {
            const char *want = k_preset_wants[w].want[k];
            if (strcmp(k_preset_wants[w].preset, preset) != 0 || !want) continue;
            char *row = strndup(v, (size_t)(e - v));
            ck_assert_msg(strstr(row, want) != NULL, "%s/%s: want \"%s\", got %s", preset,
                          k_engines[k], want, row);
            free(row);
        }
        moeq_free(text);
    }
    moeq_checkpoint_close(ck);
    moeq_config_destroy(cfg);
    moeq_test_rmtree(dir);
}
END_TEST

/* Every config under tests/data/configs (the shared configs): each MoE line
 * gets one verdict per modelled version, and a plan with threads gives the
 * same text as one without. */
START_TEST(test_engine_shared_configs) {
    DIR *d = opendir(MOEQ_TEST_DATA_DIR "/configs");
    ck_assert_ptr_nonnull(d);
    const char *lines = "model.layers.3.mlp.experts moe 8\n"
                        "model.layers.1.mlp.experts moe 8\n"
                        "model.language_model.layers.1.mlp.experts moe 4\n"
                        "model.layers.3.self_attn.o_proj\n";
    uint32_t n_configs = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        size_t n = strlen(ent->d_name);
        if (n < 6 || strcmp(ent->d_name + n - 5, ".json") != 0) continue;
        moeq_config *cfg = load(ent->d_name);
        n_configs++;
        for (uint32_t i = 0; i < moeq_engine_count(); i++) {
            moeq_plan_options po = {NULL, NULL, 1, 1, moeq_engine_name(i)};
            char *one = NULL, *four = NULL;
            uint32_t errors = 0;
            moeq_error err;
            ck_assert_ok(moeq_plan(cfg, lines, strlen(lines), &po, &one, &errors, &err), &err);
            po.threads = 4;
            ck_assert_ok(moeq_plan(cfg, lines, strlen(lines), &po, &four, &errors, &err), &err);
            ck_assert_str_eq(one, four);
            /* Three MoE rows with exactly one of a class and an exception. */
            uint32_t judged = 0;
            for (const char *p = one; (p = strstr(p, "\"engine_scheme\":")) != NULL; p++) {
                bool cls = strncmp(p, "\"engine_scheme\":null", 20) != 0;
                bool exc = strstr(p, "\"engine_error\":null") != strstr(p, "\"engine_error\":");
                if (cls || exc) judged++;
                ck_assert_msg(!(cls && exc), "%s %s", ent->d_name, moeq_engine_name(i));
            }
            ck_assert_msg(judged == 3, "%s under %s: %u MoE verdicts", ent->d_name,
                          moeq_engine_name(i), judged);
            moeq_free(one);
            moeq_free(four);
        }
        moeq_config_destroy(cfg);
    }
    closedir(d);
    ck_assert_uint_ge(n_configs, 7);
}
END_TEST

static Suite *engine_suite(void) {
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, test_engine_cases, 0, (int)MOEQ__ARRAY_LEN(k_cases));
    tcase_add_test(tc, test_engine_tables_shape);
    tcase_add_loop_test(tc, test_engine_bad_specs, 0, (int)MOEQ__ARRAY_LEN(k_bad_specs));
    tcase_add_test(tc, test_engine_labels);
    tcase_add_test(tc, test_engine_plan);
    tcase_add_test(tc, test_engine_public_api);
    tcase_add_test(tc, test_engine_shared_configs);
    uint32_t n_presets = 0;
    while (moeq_synth_preset_name(n_presets)) n_presets++;
    tcase_add_loop_test(tc, test_engine_synth_presets, 0, (int)n_presets);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(engine_suite)

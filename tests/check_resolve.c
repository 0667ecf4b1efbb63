/*
 * check_resolve.c - target/ignore matching and layer resolution: the worked
 * cases of compressed-tensors-format.md section 5 and the GLM cases of
 * section 6, precedence orders, fused shards, MoE layers, regex limits.
 */
#include "test_util.h"
#include "common/internal.h"

/* A one-group config whose group has the given targets (JSON list text) and
 * ignore list (JSON list text). */
static moeq_config *config_with(const char *targets, const char *ignore) {
    char json[4096];
    snprintf(json, sizeof json,
             "{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
             "\"config_groups\":{\"group_0\":{\"targets\":%s,\"weights\":{\"num_bits\":4,"
             "\"group_size\":128}}},\"ignore\":%s}",
             targets, ignore ? ignore : "[]");
    moeq_config *cfg = NULL;
    moeq_error err;
    moeq_status st = moeq_config_parse(json, strlen(json), NULL, &cfg, &err);
    ck_assert_msg(st == MOEQ_OK, "parse failed: %s (%s)", err.message, json);
    return cfg;
}

static moeq_config *parse_json(const char *json) {
    moeq_config *cfg = NULL;
    moeq_error err;
    moeq_status st = moeq_config_parse(json, strlen(json), NULL, &cfg, &err);
    ck_assert_msg(st == MOEQ_OK, "parse failed: %s", err.message);
    return cfg;
}

static int32_t resolve_status(const moeq_config *cfg, const char *name, int32_t kind) {
    moeq_resolution r;
    moeq_error err;
    moeq_status st = moeq_resolve(cfg, name, kind, NULL, &r, &err);
    ck_assert_msg(st == MOEQ_OK, "resolve %s: %s", name, err.message);
    return r.status;
}

/* spec 5.1: match_name cases from compressed-tensors' test_match.py */
static const struct {
    const char *name;
    const char *target;
    int matches;
} k_name_cases[] = {
    {"layer1", "layer1", 1},
    {"layer1", "re:layer.*", 1},
    {"layer1", "re:^layer1$", 1},
    {"layer1", "re:layer2", 0},
    {"transformer.layers.0.self_attn.q_proj", "re:.*q_proj", 1},
    {"transformer.layers.0.self_attn.q_proj",
     "re:transformer\\\\.layers\\\\.\\\\d+\\\\.self_attn\\\\..*_proj$", 1},
    {"", "", 1},
    {"layer1", "", 0},
    {"layer.1", "re:layer.1", 1},
    /* Anchored at the start only, like Python re.match. */
    {"model.layers.0.mlp.gate_proj", "re:.*mlp.gate", 1},
    {"model.layers.0.mlp.gate_proj", "re:.*mlp.gate$", 0},
    {"lm_head_extra", "re:lm_head", 1},
    {"model.lm_head", "re:lm_head", 0},
    {"model.lm_head", "lm_head", 0}, /* exact names are whole names */
    {"Model.Layers.0", "re:model", 0},  /* case-sensitive */
    {"model.layers.12.mlp", "re:model\\\\.layers\\\\.(?:[3-9]|1[0-9])\\\\.mlp$", 1},
    {"model.layers.2.mlp", "re:model\\\\.layers\\\\.(?:[3-9]|1[0-9])\\\\.mlp$", 0},
    {"a.b", "re:a(?![.\\\\w])", 0}, /* look-ahead, as in real configs */
    {"a", "re:a(?![.\\\\w])", 1},
    {"x.q_proj", "re:(?P<m>x)\\\\.q_proj", 1}, /* Python named groups */
    /* The literal prefilter must never reject a real match. */
    {"ac", "re:ab?c", 1},
    {"abc", "re:ab?c", 1},
    {"aab", "re:a{2}b", 1},
    {"ab", "re:a{2}b", 0},
    {"aaab", "re:a+b", 1},
    {"zb", "re:a*b", 0},
    {"b", "re:a*b", 1},
    {"b", "re:a|b", 1},
    {"x.mlp", "re:x[.]mlp", 1},
    {"xymlp", "re:x[.]mlp", 0},
    {"ABC", "re:(?i)abc", 1},
    {"m.Gate", "re:.*(?i:gate)", 1},
    {"x]y", "re:x[]]y", 1},
    {"x(y", "re:x\\\\(y", 1},
    {"a.b.c", "re:a\\\\.b\\\\.c$", 1},
    {"a.b.cd", "re:a\\\\.b\\\\.c$", 0},
    {"layer.17.up", "re:layer\\\\.\\\\d+\\\\.up", 1},
    {"tab\\tx", "re:tab\\\\\\\\tx", 1},
    {"caf\u00e9.x", "re:caf\u00e9\\\\.x", 1},
    {"xaay", "re:x(?:a)+y", 1},
    {"abd", "re:ab*?d", 1},
};

START_TEST(test_match_name_cases) {
    char targets[512];
    snprintf(targets, sizeof targets, "[\"%s\"]", k_name_cases[_i].target);
    moeq_config *cfg = config_with(targets, NULL);
    int32_t st = resolve_status(cfg, k_name_cases[_i].name, MOEQ_MODULE_OTHER);
    ck_assert_msg((st == MOEQ_MATCH_QUANTIZED) == k_name_cases[_i].matches,
                  "name \"%s\" target %s: got status %d", k_name_cases[_i].name,
                  k_name_cases[_i].target, st);
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_class_targets) {
    moeq_config *cfg = config_with("[\"Linear\"]", NULL);
    ck_assert_int_eq(resolve_status(cfg, "a.q_proj", MOEQ_MODULE_LINEAR), MOEQ_MATCH_QUANTIZED);
    /* Linear reaches expert projections too, as engines alias it to FusedMoE. */
    ck_assert_int_eq(resolve_status(cfg, "a.experts.0.up_proj", MOEQ_MODULE_EXPERT),
                     MOEQ_MATCH_QUANTIZED);
    ck_assert_int_eq(resolve_status(cfg, "a.norm", MOEQ_MODULE_OTHER), MOEQ_MATCH_UNMATCHED);
    moeq_config_destroy(cfg);

    cfg = config_with("[\"FusedMoE\"]", NULL);
    ck_assert_int_eq(resolve_status(cfg, "a.q_proj", MOEQ_MODULE_LINEAR), MOEQ_MATCH_UNMATCHED);
    ck_assert_int_eq(resolve_status(cfg, "a.experts.0.up_proj", MOEQ_MODULE_EXPERT),
                     MOEQ_MATCH_QUANTIZED);
    moeq_config_destroy(cfg);

    cfg = config_with("[\"RoutedExperts\"]", NULL);
    ck_assert_int_eq(resolve_status(cfg, "a.experts.3.down_proj", MOEQ_MODULE_EXPERT),
                     MOEQ_MATCH_QUANTIZED);
    moeq_config_destroy(cfg);

    /* An unknown class name only matches a module of exactly that name, and
     * the config says so in a warning. */
    cfg = config_with("[\"LlamaAttention\"]", NULL);
    ck_assert_int_eq(resolve_status(cfg, "a.q_proj", MOEQ_MODULE_LINEAR), MOEQ_MATCH_UNMATCHED);
    int found = 0;
    for (uint32_t i = 0; i < moeq_config_warning_count(cfg); i++) {
        if (strstr(moeq_config_warning(cfg, i), "LlamaAttention")) found = 1;
    }
    ck_assert_msg(found, "expected a warning about the unknown class name");
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_ignore_wins) {
    /* spec 5.3: ignore always wins, however specifically a module is targeted */
    moeq_config *cfg = config_with("[\"re:.*self_attn.*q_proj\"]", "[\"re:.*self_attn.*\"]");
    moeq_resolution r;
    moeq_error err;
    ck_assert_ok(moeq_resolve(cfg, "model.layers.0.self_attn.q_proj", MOEQ_MODULE_LINEAR, NULL, &r,
                              &err),
                 &err);
    ck_assert_int_eq(r.status, MOEQ_MATCH_IGNORED);
    ck_assert_int_eq(r.ignore_index, 0);
    ck_assert_str_eq(r.target, "re:.*self_attn.*");
    ck_assert_int_eq(r.group_index, -1);
    moeq_config_destroy(cfg);

    /* test_match.py: regex targets minus regex ignore entries */
    cfg = config_with("[\"re:model.layers.[01].self_attn.q_proj\"]",
                      "[\"re:model.layers.1.self_attn.q_proj\"]");
    ck_assert_int_eq(resolve_status(cfg, "model.layers.0.self_attn.q_proj", 0), 0);
    ck_assert_int_eq(resolve_status(cfg, "model.layers.1.self_attn.q_proj", 0), 1);
    ck_assert_int_eq(resolve_status(cfg, "model.layers.2.self_attn.q_proj", 0), 2);
    moeq_config_destroy(cfg);

    cfg = config_with("[\"re:model.layers.*.self_attn.q_proj\"]",
                      "[\"re:model.layers.[01].self_attn.q_proj\"]");
    for (int l = 0; l < 6; l++) {
        char name[64];
        snprintf(name, sizeof name, "model.layers.%d.self_attn.q_proj", l);
        ck_assert_int_eq(resolve_status(cfg, name, 0),
                         l < 2 ? MOEQ_MATCH_IGNORED : MOEQ_MATCH_QUANTIZED);
    }
    moeq_config_destroy(cfg);

    /* Exact and class ignore entries. */
    cfg = config_with("[\"Linear\"]", "[\"lm_head\", \"Linear\"]");
    ck_assert_int_eq(resolve_status(cfg, "lm_head", MOEQ_MODULE_OTHER), MOEQ_MATCH_IGNORED);
    ck_assert_int_eq(resolve_status(cfg, "a.b", MOEQ_MODULE_LINEAR), MOEQ_MATCH_IGNORED);
    moeq_config_destroy(cfg);
}
END_TEST

static const char *k_prioritization =
    "{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\",\"config_groups\":{"
    "\"g8\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":8,\"group_size\":128}},"
    "\"g4\":{\"targets\":[\"re:.*down_proj\"],\"weights\":{\"num_bits\":4,\"group_size\":128}},"
    "\"g2\":{\"targets\":[\"model.layers.0.mlp.down_proj\"],\"weights\":{\"num_bits\":2,"
    "\"group_size\":128}}}}";

START_TEST(test_ct_precedence) {
    /* spec 5.4, test_target_prioritization: exact > regex > class */
    moeq_config *cfg = parse_json(k_prioritization);
    moeq_resolution r;
    moeq_error err;
    ck_assert_ok(moeq_resolve(cfg, "model.layers.0.mlp.down_proj", 0, NULL, &r, &err), &err);
    ck_assert_str_eq(r.group_name, "g2");
    ck_assert_int_eq(r.weights->num_bits, 2);
    ck_assert_ok(moeq_resolve(cfg, "model.layers.1.mlp.down_proj", 0, NULL, &r, &err), &err);
    ck_assert_str_eq(r.group_name, "g4");
    ck_assert_str_eq(r.target, "re:.*down_proj");
    ck_assert_ok(moeq_resolve(cfg, "model.layers.1.mlp.up_proj", 0, NULL, &r, &err), &err);
    ck_assert_str_eq(r.group_name, "g8");
    ck_assert_str_eq(r.target, "Linear");
    /* The engine order agrees here: class targets come after name matches. */
    moeq_resolve_options eng = {MOEQ_PRECEDENCE_ENGINE, 0, NULL, 0};
    ck_assert_ok(moeq_resolve(cfg, "model.layers.1.mlp.down_proj", 0, &eng, &r, &err), &err);
    ck_assert_str_eq(r.group_name, "g4");
    ck_assert_uint_eq(r.flags & MOEQ_RESOLVE_ORDER_DISAGREES, 0);
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_precedence_trap) {
    /* spec 5.4 trap: "re:.*mlp.*" sorts before "re:.*mlp.experts.*" ('*' < 'e'),
     * so compressed-tensors gives experts group A while config order gives B. */
    moeq_config *cfg = parse_json(
        "{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\",\"config_groups\":{"
        "\"B\":{\"targets\":[\"re:.*mlp.experts.*\"],\"weights\":{\"num_bits\":4,"
        "\"group_size\":32}},"
        "\"A\":{\"targets\":[\"re:.*mlp.*\"],\"weights\":{\"num_bits\":8,\"group_size\":32}}}}");
    moeq_resolution r;
    moeq_error err;
    ck_assert_ok(moeq_resolve(cfg, "m.layers.0.mlp.experts.3.up_proj", MOEQ_MODULE_EXPERT, NULL,
                              &r, &err),
                 &err);
    ck_assert_str_eq(r.group_name, "A");
    ck_assert_uint_eq(r.flags & MOEQ_RESOLVE_ORDER_DISAGREES, MOEQ_RESOLVE_ORDER_DISAGREES);
    ck_assert_int_eq(r.other_group_index, 0);
    moeq_resolve_options eng = {MOEQ_PRECEDENCE_ENGINE, 0, NULL, 0};
    ck_assert_ok(moeq_resolve(cfg, "m.layers.0.mlp.experts.3.up_proj", MOEQ_MODULE_EXPERT, &eng,
                              &r, &err),
                 &err);
    ck_assert_str_eq(r.group_name, "B");
    ck_assert_int_eq(r.other_group_index, 1);
    /* Not an expert: both orders agree on A. */
    ck_assert_ok(moeq_resolve(cfg, "m.layers.0.mlp.gate", MOEQ_MODULE_LINEAR, NULL, &r, &err),
                 &err);
    ck_assert_str_eq(r.group_name, "A");
    ck_assert_uint_eq(r.flags, 0);
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_duplicate_target_later_group_wins) {
    moeq_config *cfg = parse_json(
        "{\"quant_method\":\"compressed-tensors\",\"config_groups\":{"
        "\"first\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":8}},"
        "\"second\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":4,\"group_size\":64}}}}");
    moeq_resolution r;
    moeq_error err;
    ck_assert_ok(moeq_resolve(cfg, "x", MOEQ_MODULE_LINEAR, NULL, &r, &err), &err);
    ck_assert_str_eq(r.group_name, "second");
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_fused_names) {
    moeq_config *cfg = config_with("[\"Linear\"]", "[\"re:.*k_proj$\"]");
    moeq_resolution r;
    moeq_error err;
    /* Shards disagree: q_proj/v_proj quantized, k_proj ignored. */
    moeq_status st = moeq_resolve(cfg, "m.layers.0.self_attn.qkv_proj", 0, NULL, &r, &err);
    ck_assert_status(st, MOEQ_STATUS_AMBIGUOUS, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "m.layers.0.self_attn.qkv_proj"));
    ck_assert_ptr_nonnull(strstr(err.message, "k_proj -> ignored by ignore[0]"));
    ck_assert_ptr_nonnull(strstr(err.message, "q_proj -> group group_0"));
    /* gate_up_proj: both shards quantized alike. */
    ck_assert_ok(moeq_resolve(cfg, "m.layers.0.mlp.gate_up_proj", 0, NULL, &r, &err), &err);
    ck_assert_int_eq(r.status, MOEQ_MATCH_QUANTIZED);
    ck_assert_uint_eq(r.flags & MOEQ_RESOLVE_FUSED, MOEQ_RESOLVE_FUSED);
    /* Only the last component counts: "my_qkv_proj" is not fused. */
    ck_assert_ok(moeq_resolve(cfg, "m.my_qkv_proj", 0, NULL, &r, &err), &err);
    ck_assert_uint_eq(r.flags & MOEQ_RESOLVE_FUSED, 0);
    /* Fused handling can be switched off. */
    moeq_resolve_options off = {0, 0, NULL, 1};
    ck_assert_ok(moeq_resolve(cfg, "m.layers.0.self_attn.qkv_proj", 0, &off, &r, &err), &err);
    ck_assert_int_eq(r.status, MOEQ_MATCH_QUANTIZED);
    moeq_config_destroy(cfg);

    /* Caller-defined fused names (Mixtral-style w1/w3). */
    cfg = config_with("[\"re:.*w1$\", \"re:.*w3$\"]", NULL);
    static const char *const shards[] = {"w1", "w3"};
    moeq_fused_name rule = {"w13", 2, shards};
    moeq_resolve_options custom = {0, 1, &rule, 0};
    ck_assert_ok(moeq_resolve(cfg, "m.experts.0.w13", 1, &custom, &r, &err), &err);
    ck_assert_int_eq(r.status, MOEQ_MATCH_QUANTIZED);
    ck_assert_uint_eq(r.flags & MOEQ_RESOLVE_FUSED, MOEQ_RESOLVE_FUSED);
    moeq_config_destroy(cfg);

    /* compressed-tensors' own test ("dummy.qkv_proj" vs "re:.*k_proj") counts
     * a fused name as matched when ANY shard matches; moeq requires all
     * shards to agree, as vLLM does, and says which shard differs. */
    cfg = config_with("[\"re:.*k_proj\"]", NULL);
    st = moeq_resolve(cfg, "dummy.qkv_proj", 0, NULL, &r, &err);
    ck_assert_status(st, MOEQ_STATUS_AMBIGUOUS, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "q_proj -> unmatched"));
    moeq_config_destroy(cfg);
}
END_TEST

static const char *k_glm_path = MOEQ_TEST_DATA_DIR "/configs/glm-5.3-int4-int8mix-rtn-g64-mixed-regex-no-linear.json";

START_TEST(test_glm_cases) {
    /* spec section 6: the GLM config, checked against Python re.match. */
    moeq_config *cfg = NULL;
    moeq_error err;
    ck_assert_ok(moeq_config_load(k_glm_path, NULL, &cfg, &err), &err);
    static const struct {
        const char *name;
        int32_t kind;
        int32_t status;
        const char *group;
        int bits;
    } cases[] = {
        {"model.layers.3.self_attn.q_a_proj", 0, MOEQ_MATCH_QUANTIZED, "group_0", 8},
        {"model.layers.77.mlp.shared_experts.down_proj", 0, MOEQ_MATCH_QUANTIZED, "group_0", 8},
        {"model.layers.10.mlp.experts.255.up_proj", 1, MOEQ_MATCH_QUANTIZED, "group_1", 4},
        {"model.layers.2.mlp.experts.0.gate_proj", 1, MOEQ_MATCH_IGNORED, NULL, 0},
        {"model.layers.5.mlp.gate", 0, MOEQ_MATCH_IGNORED, NULL, 0},
        {"model.layers.5.self_attn.indexer.wk", 0, MOEQ_MATCH_IGNORED, NULL, 0},
        {"model.layers.40.self_attn.kv_a_layernorm", 2, MOEQ_MATCH_IGNORED, NULL, 0},
        {"lm_head", 0, MOEQ_MATCH_IGNORED, NULL, 0},
        {"model.layers.78.mlp.experts.0.up_proj", 1, MOEQ_MATCH_UNMATCHED, NULL, 0},
        {"model.layers.3.mlp.experts.0.down_proj", 1, MOEQ_MATCH_QUANTIZED, "group_1", 4},
        {"model.layers.3.mlp.experts.0.down_proj_x", 1, MOEQ_MATCH_UNMATCHED, NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        moeq_resolution r;
        ck_assert_ok(moeq_resolve(cfg, cases[i].name, cases[i].kind, NULL, &r, &err), &err);
        ck_assert_msg(r.status == cases[i].status, "%s: status %d want %d", cases[i].name,
                      r.status, cases[i].status);
        if (cases[i].group) {
            ck_assert_str_eq(r.group_name, cases[i].group);
            ck_assert_int_eq(r.weights->num_bits, cases[i].bits);
            ck_assert_int_eq(r.weights->group_size, 64);
            ck_assert_int_eq(r.format, MOEQ_FORMAT_PACK_QUANTIZED);
            ck_assert_ptr_null(r.input_activations);
        }
    }
    /* Every expert of a MoE layer: group_1 int4 -> wna16. */
    moeq_resolution r;
    ck_assert_ok(moeq_resolve_moe(cfg, "model.layers.10.mlp.experts", 256, NULL, NULL, &r, &err),
                 &err);
    ck_assert_str_eq(r.group_name, "group_1");
    moeq_selection sel;
    ck_assert_ok(moeq_select(&r, "model.layers.10.mlp.experts", NULL, &sel, &err), &err);
    ck_assert_str_eq(moeq_scheme_name(sel.scheme), "wna16");
    /* Dense layer 2: ignored -> unquantized; MTP layer 78: unmatched -> unquantized. */
    ck_assert_ok(moeq_resolve_moe(cfg, "model.layers.2.mlp.experts", 256, NULL, NULL, &r, &err),
                 &err);
    ck_assert_int_eq(r.status, MOEQ_MATCH_IGNORED);
    ck_assert_ok(moeq_select(&r, "x", NULL, &sel, &err), &err);
    ck_assert_int_eq(sel.scheme, MOEQ_SCHEME_UNQUANTIZED);
    moeq_config_destroy(cfg);
}
END_TEST

/* The seed regression: SGLang's "no Linear group" tests, moeq's way. */
START_TEST(test_no_linear_group_seed) {
    static const int bits[] = {4, 8};
    for (int b = 0; b < 2; b++) {
        char json[2048];
        snprintf(json, sizeof json,
                 "{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
                 "\"config_groups\":{\"group_0\":{\"targets\":[\"re:.*mlp.experts.*\"],"
                 "\"weights\":{\"num_bits\":%d,\"type\":\"int\",\"symmetric\":true,"
                 "\"strategy\":\"group\",\"group_size\":128},\"input_activations\":null}},"
                 "\"ignore\":[\"lm_head\",\"re:.*self_attn.*\",\"re:.*mlp.gate$\"]}",
                 bits[b]);
        moeq_config *cfg = parse_json(json);
        moeq_resolution r;
        moeq_selection sel;
        moeq_error err;
        ck_assert_ok(moeq_resolve_moe(cfg, "model.layers.0.mlp.experts", 8, NULL, NULL, &r, &err),
                     &err);
        ck_assert_ok(moeq_select(&r, "model.layers.0.mlp.experts", NULL, &sel, &err), &err);
        ck_assert_int_eq(sel.scheme, MOEQ_SCHEME_WNA16);
        ck_assert_int_eq(r.weights->num_bits, bits[b]);
        ck_assert_int_eq(r.weights->group_size, 128);
        moeq_config_destroy(cfg);
    }
    /* Per-layer FQN targets: every expert's projections named exactly. */
    char json[8192];
    int n = snprintf(json, sizeof json,
                     "{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
                     "\"config_groups\":{\"group_0\":{\"targets\":[");
    for (int e = 0; e < 4; e++) {
        n += snprintf(json + n, sizeof json - (size_t)n,
                      "%s\"model.layers.0.mlp.experts.%d.gate_proj\","
                      "\"model.layers.0.mlp.experts.%d.up_proj\","
                      "\"model.layers.0.mlp.experts.%d.down_proj\"",
                      e ? "," : "", e, e, e);
    }
    snprintf(json + n, sizeof json - (size_t)n,
             "],\"weights\":{\"num_bits\":4,\"group_size\":128}}},\"ignore\":[\"lm_head\"]}");
    moeq_config *cfg = parse_json(json);
    moeq_resolution r;
    moeq_selection sel;
    moeq_error err;
    ck_assert_ok(moeq_resolve_moe(cfg, "model.layers.0.mlp.experts", 4, NULL, NULL, &r, &err),
                 &err);
    ck_assert_ok(moeq_select(&r, NULL, NULL, &sel, &err), &err);
    ck_assert_int_eq(sel.scheme, MOEQ_SCHEME_WNA16);
    ck_assert_int_eq(r.weights->num_bits, 4);
    /* Checking only expert 0 would miss that experts 4-7 are not targeted. */
    moeq_status st = moeq_resolve_moe(cfg, "model.layers.0.mlp.experts", 8, NULL, NULL, &r, &err);
    ck_assert_status(st, MOEQ_STATUS_AMBIGUOUS, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "unmatched (not quantized): gate_proj of experts 4-7"));
    ck_assert_ptr_nonnull(strstr(err.message, "gate_proj of experts 0-3"));
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_moe_projection_disagreement) {
    /* down_proj int8 while gate/up are int4: reported per projection. */
    moeq_config *cfg = parse_json(
        "{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\",\"config_groups\":{"
        "\"up\":{\"targets\":[\"re:.*experts.*(gate|up)_proj$\"],\"weights\":{\"num_bits\":4,"
        "\"group_size\":32}},"
        "\"down\":{\"targets\":[\"re:.*experts.*down_proj$\"],\"weights\":{\"num_bits\":8,"
        "\"group_size\":32}}}}");
    moeq_resolution r;
    moeq_error err;
    moeq_status st = moeq_resolve_moe(cfg, "m.layers.1.experts", 16, NULL, NULL, &r, &err);
    ck_assert_status(st, MOEQ_STATUS_AMBIGUOUS, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "m.layers.1.experts"));
    ck_assert_ptr_nonnull(strstr(err.message, "group up (int4"));
    ck_assert_ptr_nonnull(strstr(err.message, "gate_proj of experts 0-15 up_proj of experts 0-15"));
    ck_assert_ptr_nonnull(strstr(err.message, "down_proj of experts 0-15"));
    /* Mixtral-style projection names. */
    static const char *const w[] = {"w1", "w3", "w2"};
    ck_assert_ok(moeq_resolve_moe(cfg, "m.layers.1.experts", 2, w, NULL, &r, &err), &err);
    ck_assert_int_eq(r.status, MOEQ_MATCH_UNMATCHED);
    static const char *const bad[] = {"w1", "w.3", "w2"};
    st = moeq_resolve_moe(cfg, "m", 2, bad, NULL, &r, &err);
    ck_assert_status(st, MOEQ_STATUS_INVALID_ARG, &err);
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_regex_errors_and_limits) {
    moeq_config *cfg = NULL;
    moeq_error err;
    const char *bad =
        "{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"g\":{\"targets\":"
        "[\"Linear\",\"re:model.(layers\"],\"weights\":{\"num_bits\":8}}}}";
    moeq_status st = moeq_config_parse(bad, strlen(bad), NULL, &cfg, &err);
    ck_assert_status(st, MOEQ_STATUS_REGEX, &err);
    ck_assert_ptr_null(cfg);
    ck_assert_ptr_nonnull(strstr(err.message, "config_groups.g.targets[1]"));
    ck_assert_ptr_nonnull(strstr(err.message, "re:model.(layers"));
    ck_assert_ptr_nonnull(strstr(err.message, "offset"));

    const char *bad_ignore =
        "{\"quant_method\":\"compressed-tensors\",\"config_groups\":{\"g\":{\"targets\":"
        "[\"Linear\"],\"weights\":{\"num_bits\":8}}},\"ignore\":[\"lm_head\",\"re:[a-\"]}";
    st = moeq_config_parse(bad_ignore, strlen(bad_ignore), NULL, &cfg, &err);
    ck_assert_status(st, MOEQ_STATUS_REGEX, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "ignore[1]"));

    /* Catastrophic backtracking is bounded: LIMIT, not a hang. */
    cfg = config_with("[\"re:(a+)+$\"]", NULL);
    char name[64];
    memset(name, 'a', 40);
    strcpy(name + 40, "!");
    moeq_resolution r;
    st = moeq_resolve(cfg, name, 0, NULL, &r, &err);
    ck_assert_status(st, MOEQ_STATUS_LIMIT, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "(a+)+$"));
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_bad_arguments) {
    moeq_config *cfg = config_with("[\"Linear\"]", NULL);
    moeq_resolution r;
    moeq_error err;
    ck_assert_status(moeq_resolve(NULL, "x", 0, NULL, &r, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_status(moeq_resolve(cfg, NULL, 0, NULL, &r, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_status(moeq_resolve(cfg, "x", 0, NULL, NULL, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_status(moeq_resolve(cfg, "x", 7, NULL, &r, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "module kind 7"));
    moeq_resolve_options bad = {5, 0, NULL, 0};
    ck_assert_status(moeq_resolve(cfg, "x", 0, &bad, &r, &err), MOEQ_STATUS_INVALID_ARG, &err);
    moeq_resolve_options badf = {0, 2, NULL, 0};
    ck_assert_status(moeq_resolve(cfg, "x", 0, &badf, &r, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "n_fused is 2 but fused is NULL"));
    /* A fused rule with a NULL shard is refused by resolve, plan and inspect alike. */
    static const char *const holes[] = {"q_proj", NULL};
    const moeq_fused_name hole = {"qk_proj", 2, holes};
    moeq_resolve_options badh = {0, 1, &hole, 0};
    ck_assert_status(moeq_resolve(cfg, "qk_proj", 0, &badh, &r, &err), MOEQ_STATUS_INVALID_ARG,
                     &err);
    ck_assert_str_eq(err.message, "fused[0].shards[1] is NULL");
    moeq_plan_options po;
    memset(&po, 0, sizeof po);
    po.resolve = &badh;
    char *text = NULL;
    ck_assert_status(moeq_plan(cfg, "qk_proj\n", 8, &po, &text, NULL, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_ptr_null(text);
    ck_assert_str_eq(err.message, "fused[0].shards[1] is NULL");
    ck_assert_status(moeq_resolve(cfg, "bad\xff", 0, NULL, &r, &err), MOEQ_STATUS_INVALID_ARG,
                     &err);
    ck_assert_ptr_nonnull(strstr(err.message, "UTF-8"));
    ck_assert_status(moeq_resolve_moe(cfg, "x", 0, NULL, NULL, &r, &err), MOEQ_STATUS_INVALID_ARG,
                     &err);
    moeq_config_destroy(cfg);
}
END_TEST

/* Resolution allocates per call: an OOM anywhere must come back as NOMEM. */
START_TEST(test_resolve_out_of_memory) {
    moeq_config *cfg = config_with("[\"re:.*experts.*\"]", "[\"re:.*gate$\"]");
    for (long n = 0; n < 200; n++) {
        moeq_resolution r;
        moeq_error err;
        moeq__test_fail_alloc_after(n);
        moeq_status st = moeq_resolve_moe(cfg, "m.experts", 4, NULL, NULL, &r, &err);
        moeq__test_fail_alloc_after(-1);
        ck_assert_msg(st == MOEQ_OK || st == MOEQ_STATUS_NOMEM, "n=%ld: %s", n, err.message);
        if (st == MOEQ_OK) break;
    }
    moeq_config_destroy(cfg);
}
END_TEST

/* Every real config in tests/data/configs resolves, and its MoE experts
 * select the scheme the config describes. */
static const struct {
    const char *file;
    const char *scheme;
} k_real_configs[] = {
    {"glm-5.3-int4-int8mix-rtn-g64-mixed-regex-no-linear.json", "wna16"},
    {"llama-3.1-8b-instruct-fp8-dynamic-channel-token.json", "w8a8_fp8"},
    {"llama2c-stories110m-w4a16-g128-pack-quantized.json", "wna16"},
    {"meta-llama-3-8b-mxfp4-w4a4-ct-readme.json", "w4a16_mxfp4"},
    {"phi-3-mini-128k-instruct-fp8-static-naive-frozen.json", "w8a8_fp8"},
    {"qwen3-w8a8-int8-mse-observer-v0.13.json", "w8a8_int8"},
    {"qwen3.5-27b-mxfp4a16-kaitchup-abbrev.json", "w4a16_mxfp4"},
};

START_TEST(test_real_configs_resolve) {
    char path[512];
    snprintf(path, sizeof path, "%s/configs/%s", MOEQ_TEST_DATA_DIR, k_real_configs[_i].file);
    moeq_config *cfg = NULL;
    moeq_error err;
    ck_assert_ok(moeq_config_load(path, NULL, &cfg, &err), &err);
    /* The GLM targets name layers 3-77; the others use "Linear". */
    const char *layer = strstr(path, "glm") ? "model.layers.10" : "model.layers.0";
    char prefix[128], name[160];
    snprintf(prefix, sizeof prefix, "%s.mlp.experts", layer);
    moeq_resolution r;
    ck_assert_ok(moeq_resolve_moe(cfg, prefix, 8, NULL, NULL, &r, &err), &err);
    ck_assert_int_eq(r.status, MOEQ_MATCH_QUANTIZED);
    moeq_selection sel;
    ck_assert_ok(moeq_select(&r, prefix, NULL, &sel, &err), &err);
    ck_assert_str_eq(moeq_scheme_name(sel.scheme), k_real_configs[_i].scheme);
    ck_assert_ok(moeq_resolve(cfg, "lm_head", MOEQ_MODULE_LINEAR, NULL, &r, &err), &err);
    ck_assert_int_eq(r.status, MOEQ_MATCH_IGNORED);
    snprintf(name, sizeof name, "%s.self_attn.o_proj", strstr(path, "glm") ? "model.layers.3" : layer);
    ck_assert_ok(moeq_resolve(cfg, name, MOEQ_MODULE_LINEAR, NULL, &r, &err), &err);
    ck_assert_int_eq(r.status, MOEQ_MATCH_QUANTIZED);
    moeq_config_destroy(cfg);
}
END_TEST

static Suite *resolve_suite(void) {
    Suite *s = suite_create("resolve");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, test_match_name_cases, 0,
                        (int)(sizeof k_name_cases / sizeof k_name_cases[0]));
    tcase_add_test(tc, test_class_targets);
    tcase_add_test(tc, test_ignore_wins);
    tcase_add_test(tc, test_ct_precedence);
    tcase_add_test(tc, test_precedence_trap);
    tcase_add_test(tc, test_duplicate_target_later_group_wins);
    tcase_add_test(tc, test_fused_names);
    tcase_add_test(tc, test_glm_cases);
    tcase_add_test(tc, test_no_linear_group_seed);
    tcase_add_test(tc, test_moe_projection_disagreement);
    tcase_add_test(tc, test_regex_errors_and_limits);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_resolve_out_of_memory);
    tcase_add_loop_test(tc, test_real_configs_resolve, 0,
                        (int)(sizeof k_real_configs / sizeof k_real_configs[0]));
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(resolve_suite)

/*
 * check_plan.c - moeq_plan: layer-list parsing, the JSON shape `moeq plan
 * --json` promises, the text table, warnings and per-line errors.
 */
#include "test_util.h"

static moeq_config *glm(void) {
    moeq_config *cfg = NULL;
    moeq_error err;
    moeq_status st = moeq_config_load(
        MOEQ_TEST_DATA_DIR "/configs/glm-5.3-int4-int8mix-rtn-g64-mixed-regex-no-linear.json", NULL,
        &cfg, &err);
    ck_assert_msg(st == MOEQ_OK, "%s", err.message);
    return cfg;
}

static char *plan(const moeq_config *cfg, const char *lines, int json, uint32_t *errors,
                  moeq_status want) {
    moeq_plan_options po = {NULL, NULL, json, 1, NULL};
    char *text = NULL;
    moeq_error err;
    moeq_status st = moeq_plan(cfg, lines, strlen(lines), &po, &text, errors, &err);
    ck_assert_status(st, want, &err);
    return text;
}

START_TEST(test_plan_json_shape) {
    moeq_config *cfg = glm();
    uint32_t errors = 99;
    char *text = plan(cfg,
                      "# comment line\n"
                      "model.layers.3.self_attn.q_a_proj\n"
                      "\n"
                      "  model.layers.10.mlp.experts moe 256  \n"
                      "model.layers.5.mlp.gate\n"
                      "model.layers.78.mlp.experts moe 8\n"
                      "model.layers.78.mlp.experts.0.up_proj\n",
                      1, &errors, MOEQ_OK);
    ck_assert_uint_eq(errors, 0);
    ck_assert_ptr_nonnull(strstr(
        text, "{\"layer\":\"model.layers.3.self_attn.q_a_proj\",\"kind\":\"linear\",\"status\":"
              "\"quantized\",\"group\":\"group_0\",\"target\":\"re:model\\\\.layers\\\\."));
    ck_assert_ptr_nonnull(strstr(text,
                                 "\"format\":\"pack-quantized\",\"scheme\":\"wna16\",\"weights\":{"
                                 "\"actorder\":null,\"block_structure\":null,\"dynamic\":false,"
                                 "\"group_size\":64,\"num_bits\":8,\"observer\":"
                                 "\"memoryless_minmax\",\"scale_dtype\":null,\"strategy\":"
                                 "\"group\",\"symmetric\":true,\"type\":\"int\",\"zp_dtype\":null},"
                                 "\"input_activations\":null,\"warnings\":[],\"error\":null}"));
    ck_assert_ptr_nonnull(strstr(text,
                                 "{\"layer\":\"model.layers.10.mlp.experts\",\"kind\":\"moe\","
                                 "\"status\":\"quantized\",\"group\":\"group_1\""));
    ck_assert_ptr_nonnull(strstr(text, "\"scheme\":\"wna16\",\"weights\":{"));
    ck_assert_ptr_nonnull(
        strstr(text, "{\"layer\":\"model.layers.5.mlp.gate\",\"kind\":\"linear\","
                     "\"status\":\"ignored\",\"group\":null,\"target\":"
                     "\"re:.*mlp\\\\.gate$\",\"format\":null,\"scheme\":\"unquantized\","
                     "\"weights\":null"));
    ck_assert_ptr_nonnull(strstr(text,
                                 "{\"layer\":\"model.layers.78.mlp.experts\",\"kind\":\"moe\","
                                 "\"status\":\"unmatched\",\"group\":null,\"target\":null,"
                                 "\"format\":null,\"scheme\":\"unquantized\""));
    /* one object per line, in order */
    const char *a = strstr(text, "layers.3.self_attn"), *b = strstr(text, "layers.10.mlp"),
               *c = strstr(text, "layers.5.mlp.gate");
    ck_assert(a && b && c && a < b && b < c);
    ck_assert_int_eq(text[0], '[');
    moeq_free(text);
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_plan_errors_and_warnings) {
    moeq_config *cfg = NULL;
    moeq_error err;
    const char *json =
        "{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\",\"config_groups\":{"
        "\"B\":{\"targets\":[\"re:.*mlp.experts.*\"],\"weights\":{\"num_bits\":4,\"group_size\":32}"
        "},"
        "\"A\":{\"targets\":[\"re:.*mlp.*\"],\"weights\":{\"num_bits\":4}}},"
        "\"ignore\":[\"re:.*k_proj$\"]}";
    ck_assert_ok(moeq_config_parse(json, strlen(json), NULL, &cfg, &err), &err);
    uint32_t errors = 0;
    char *text = plan(cfg,
                      "m.layers.0.mlp.experts moe 4\n"
                      "m.layers.0.mlp.qkv_proj\n"
                      "m.layers.0.mlp.down_proj\n",
                      1, &errors, MOEQ_OK);
    /* experts: A wins in compressed-tensors order (int4 tensor: no scheme). */
    ck_assert_uint_eq(errors, 2);
    ck_assert_ptr_nonnull(strstr(text, "\"status\":\"error\""));
    ck_assert_ptr_nonnull(strstr(text, "no MoE scheme accepts"));
    ck_assert_ptr_nonnull(strstr(text, "precedence: compressed-tensors order picks group A, but "
                                       "vLLM/SGLang (config order) pick group B"));
    ck_assert_ptr_nonnull(strstr(text, "its shards resolve differently"));
    moeq_free(text);

    /* Engine order: B -> wna16, with the mirror-image warning. */
    moeq_resolve_options ro = {MOEQ_PRECEDENCE_ENGINE, 0, NULL, 0};
    moeq_plan_options po = {&ro, NULL, 0, 1, NULL};
    const char *one = "m.layers.0.mlp.experts moe 4\n";
    ck_assert_ok(moeq_plan(cfg, one, strlen(one), &po, &text, &errors, &err), &err);
    ck_assert_uint_eq(errors, 0);
    ck_assert_ptr_nonnull(strstr(text, "wna16"));
    ck_assert_ptr_nonnull(strstr(text, "warning: precedence: engine (config) order picks group B"));
    moeq_free(text);

    /* Malformed lines are a usage error naming the line. */
    static const char *bad[] = {
        "a b c\n", "x moe\n", "x moe 0\n", "x moe 4 g,u\n", "x moe 4 g,u,d extra\n", "x moe 12x\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *t = NULL;
        moeq_status st = moeq_plan(cfg, bad[i], strlen(bad[i]), NULL, &t, &errors, &err);
        ck_assert_status(st, MOEQ_STATUS_INVALID_ARG, &err);
        ck_assert_ptr_nonnull(strstr(err.message, "line 1"));
        ck_assert_ptr_null(t);
    }
    ck_assert_status(moeq_plan(NULL, "", 0, NULL, &text, NULL, &err), MOEQ_STATUS_INVALID_ARG,
                     &err);
    ck_assert_status(moeq_plan(cfg, "", 0, NULL, NULL, NULL, &err), MOEQ_STATUS_INVALID_ARG, &err);
    /* An empty list is an empty plan. */
    ck_assert_ok(
        moeq_plan(cfg, "", 0, &(moeq_plan_options){NULL, NULL, 1, 1, NULL}, &text, &errors, &err),
        &err);
    ck_assert_str_eq(text, "[]\n");
    moeq_free(text);
    moeq_config_destroy(cfg);
}
END_TEST

START_TEST(test_plan_table) {
    moeq_config *cfg = glm();
    uint32_t errors = 0;
    char *text = plan(cfg,
                      "model.layers.3.mlp.experts moe 256\n"
                      "model.layers.3.mlp.shared_experts.up_proj\n"
                      "lm_head\n"
                      "model.layers.4.mlp.experts moe 256 w1,w3,w2\n",
                      0, &errors, MOEQ_OK);
    ck_assert_uint_eq(errors, 0);
    ck_assert(strncmp(text, "LAYER", 5) == 0);
    ck_assert_ptr_nonnull(strstr(text, "SCHEME"));
    ck_assert_ptr_nonnull(strstr(text, "model.layers.3.mlp.experts (256 experts)"));
    ck_assert_ptr_nonnull(strstr(text, "int4 group(64) sym static"));
    ck_assert_ptr_nonnull(strstr(text, "ignored by ignore[0] \"lm_head\""));
    /* custom projection names: w1/w3/w2 do not match the GLM regex */
    const char *l4 = strstr(text, "model.layers.4.mlp.experts (256 experts)");
    ck_assert_ptr_nonnull(l4);
    const char *eol = strchr(l4, '\n');
    ck_assert_ptr_nonnull(eol);
    const char *uq = strstr(l4, "unmatched");
    ck_assert(uq && uq < eol);
    uq = strstr(l4, "unquantized");
    ck_assert(uq && uq < eol);
    ck_assert_ptr_nonnull(strstr(text, "INPUTS\n"));
    moeq_free(text);
    moeq_config_destroy(cfg);
}
END_TEST

/* Threads change nothing in the output, however the lines fall into chunks. */
START_TEST(test_plan_threads_identical) {
    moeq_config *cfg = glm();
    char *lines = malloc(8u << 20);
    size_t n = 0;
    for (int l = 0; l < 79; l++) {
        n += (size_t)sprintf(lines + n, "model.layers.%d.mlp.experts moe 256\n", l);
        n += (size_t)sprintf(lines + n, "model.layers.%d.self_attn.qkv_proj\n", l);
        for (int e = 0; e < 256; e++) {
            n += (size_t)sprintf(lines + n, "model.layers.%d.mlp.experts.%d.down_proj\n", l, e);
        }
    }
    char *ref = NULL;
    uint32_t ref_errors = 0;
    for (int json = 0; json < 2; json++) {
        for (int32_t t = 1; t <= 5; t += 2) {
            moeq_plan_options po = {NULL, NULL, json, t, NULL};
            char *text = NULL;
            uint32_t errors = 0;
            moeq_error err;
            ck_assert_ok(moeq_plan(cfg, lines, n, &po, &text, &errors, &err), &err);
            if (t == 1) {
                moeq_free(ref);
                ref = text;
                ref_errors = errors;
                continue;
            }
            ck_assert_uint_eq(errors, ref_errors);
            ck_assert_msg(strcmp(ref, text) == 0, "threads=%d json=%d differs", t, json);
            moeq_free(text);
        }
    }
    moeq_free(ref);
    moeq_plan_options bad = {NULL, NULL, 1, -1, NULL};
    char *text = NULL;
    moeq_error err;
    ck_assert_status(moeq_plan(cfg, "x\n", 2, &bad, &text, NULL, &err), MOEQ_STATUS_INVALID_ARG,
                     &err);
    free(lines);
    moeq_config_destroy(cfg);
}
END_TEST

static Suite *plan_suite(void) {
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_plan_json_shape);
    tcase_add_test(tc, test_plan_errors_and_warnings);
    tcase_add_test(tc, test_plan_table);
    tcase_add_test(tc, test_plan_threads_identical);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(plan_suite)

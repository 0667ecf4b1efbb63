/*
 * check_pipeline.c - writer -> reader -> inspect -> run, for every synthetic
 * preset: moeq_synth_write a model (sharded for one of them), open it as an
 * engine would, account for every tensor with moeq_inspect, then load each
 * MoE layer from the checkpoint, finalize, route with the model's own router
 * weight and config, apply, and compare with the float64 reference; then
 * load the same layer with moeq_moe_load_finalize (read in place, 2 threads)
 * and check that it applies bit for bit as the two-step path's.
 */
#include "test_util.h"

#include <math.h>
#include <unistd.h>

static char g_dir[64];

static void setup(void) {
    moeq_test_mkdtemp(g_dir, sizeof g_dir, "moeq_pipeline");
}

static void teardown(void) {
    moeq_test_rmtree(g_dir);
}

static double number(const moeq_config *cfg, const char *key) {
    double v = 0;
    moeq_config_model_number(cfg, key, &v);
    return v;
}

/* Router logits from the dense router weight mlp.gate.weight [E, H]. */
static void router_logits(const moeq_checkpoint *ck, int layer, const float *x, int T, int E, int H,
                          float *logits) {
    char name[128];
    snprintf(name, sizeof name, "model.layers.%d.mlp.gate.weight", layer);
    moeq_tensor w;
    moeq_error err;
    ck_assert_ok(moeq_checkpoint_find(ck, name, &w), &err);
    float *wf = malloc(sizeof(float) * (size_t)(E * H));
    int64_t shape[2];
    moeq_tensor t = w;
    t.name = "weight";
    ck_assert_ok(moeq_dequantize(NULL, MOEQ_FORMAT_DENSE, 0, name, &t, 1, MOEQ_DTYPE_F32, wf,
                                 sizeof(float) * (uint64_t)(E * H), shape, &err),
                 &err);
    for (int i = 0; i < T; i++) {
        for (int e = 0; e < E; e++) {
            double acc = 0;
            for (int h = 0; h < H; h++) acc += (double)x[i * H + h] * (double)wf[e * H + h];
            logits[i * E + e] = (float)acc;
        }
    }
    free(wf);
}

START_TEST(test_preset_pipeline) {
    const char *preset = moeq_synth_preset_name((uint32_t)_i);
    ck_assert_ptr_nonnull(preset);
    moeq_error err;
    moeq_synth_layout layout;
    ck_assert_ok(moeq_synth_preset(preset, &layout, &err), &err);
    if (_i == 1) layout.shards = 2; /* one preset through an index and shards */
    ck_assert_ok(moeq_synth_write(&layout, g_dir, &err), &err);

    moeq_config *cfg = NULL;
    moeq_checkpoint *ck = NULL;
    ck_assert_ok(moeq_config_load(g_dir, NULL, &cfg, &err), &err);
    ck_assert_ok(moeq_checkpoint_open(g_dir, &ck, &err), &err);

    /* Every tensor accounted for. */
    moeq_inspect_summary sum;
    char *report = NULL;
    ck_assert_ok(moeq_inspect(cfg, ck, NULL, &report, &sum, &err), &err);
    ck_assert_msg(sum.unconsumed == 0 && sum.missing == 0, "%s:\n%s", preset, report);
    moeq_free(report);
    int E = (int)number(cfg, "n_routed_experts"), H = (int)number(cfg, "hidden_size");
    int I = (int)number(cfg, "moe_intermediate_size"), K = (int)number(cfg, "num_experts_per_tok");
    int layers = (int)number(cfg, "num_hidden_layers"),
        dense = (int)number(cfg, "first_k_dense_replace");
    ck_assert_uint_eq(sum.moe_layers, (uint64_t)(layers - dense));
    const char *scoring = moeq_config_model_string(cfg, "scoring_func");

    int ran = 0;
    for (int layer = dense; layer < layers; layer++) {
        char prefix[96];
        snprintf(prefix, sizeof prefix, "model.layers.%d.mlp.experts", layer);
        moeq_resolution res;
        moeq_selection sel;
        ck_assert_ok(moeq_resolve_moe(cfg, prefix, (uint32_t)E, NULL, NULL, &res, &err), &err);
        /* every preset's experts have a scheme */
        ck_assert_ok(moeq_select(&res, prefix, NULL, &sel, &err), &err);
        moeq_moe_config mc;
        ck_assert_ok(moeq_moe_config_init(&mc, cfg, &res, &sel, &err), &err);
        mc.prefix = prefix;
        mc.num_experts = E;
        mc.hidden_size = H;
        mc.intermediate_size = I;
        moeq_moe *moe = NULL;
        ck_assert_ok(moeq_moe_create(&mc, &moe, &err), &err);
        uint64_t loaded = 0, skipped = 7;
        ck_assert_ok(moeq_moe_load_checkpoint(moe, ck, NULL, NULL, NULL, &loaded, &skipped, &err),
                     &err);
        ck_assert_uint_gt(loaded, 0);
        ck_assert_uint_eq(skipped, 0);
        ck_assert_ok(moeq_moe_finalize(moe, &err), &err);

        enum { T = 5 };
        float *x = malloc(sizeof(float) * (size_t)(T * H)),
              *logits = malloc(sizeof(float) * (size_t)(T * E));
        for (int i = 0; i < T * H; i++) x[i] = sinf(0.7f * (float)i + (float)layer);
        router_logits(ck, layer, x, T, E, H, logits);
        moeq_route_config rc;
        memset(&rc, 0, sizeof rc);
        rc.num_experts = E;
        rc.top_k = K;
        rc.scoring =
            scoring && !strcmp(scoring, "sigmoid") ? MOEQ_SCORING_SIGMOID : MOEQ_SCORING_SOFTMAX;
        rc.renormalize = number(cfg, "norm_topk_prob") != 0;
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(T * K));
        float *w = malloc(sizeof(float) * (size_t)(T * K)),
              *out = malloc(sizeof(float) * (size_t)(T * H));
        double *ref = malloc(sizeof(double) * (size_t)(T * H));
        ck_assert_ok(moeq_route(&rc, logits, T, ids, w, &err), &err);
        moeq_ctx *ctx = NULL;
        ck_assert_ok(moeq_ctx_create(NULL, &ctx, &err), &err);
        ck_assert_ok(
            moeq_moe_apply(moe, ctx, MOEQ_DTYPE_F32, x, T, K, ids, w, MOEQ_DTYPE_F32, out, &err),
            &err);
        ck_assert_ok(moeq_moe_apply_reference(moe, MOEQ_DTYPE_F32, x, T, K, ids, w, ref, &err),
                     &err);
        double max_err = 0, max_ref = 0;
        for (int i = 0; i < T * H; i++) {
            ck_assert(isfinite(out[i]));
            max_err = fmax(max_err, fabs((double)out[i] - ref[i]));
            max_ref = fmax(max_ref, fabs(ref[i]));
        }
        ck_assert_msg(max_ref > 0 && max_err <= 2e-2 * max_ref, "%s %s: %g vs %g", preset, prefix,
                      max_err, max_ref);
        /* The one-step load (weights read in place, finalize on 2 threads):
         * the same layer, bit for bit. */
        moeq_moe *fast = NULL;
        ck_assert_ok(moeq_moe_create(&mc, &fast, &err), &err);
        ck_assert_ok(moeq_moe_load_finalize(fast, ck, NULL, 2, NULL, NULL, &err), &err);
        float *out2 = malloc(sizeof(float) * (size_t)(T * H));
        double *ref2 = malloc(sizeof(double) * (size_t)(T * H));
        ck_assert_ok(
            moeq_moe_apply(fast, ctx, MOEQ_DTYPE_F32, x, T, K, ids, w, MOEQ_DTYPE_F32, out2, &err),
            &err);
        ck_assert_ok(moeq_moe_apply_reference(fast, MOEQ_DTYPE_F32, x, T, K, ids, w, ref2, &err),
                     &err);
        ck_assert_msg(memcmp(out, out2, sizeof(float) * (size_t)(T * H)) == 0,
                      "%s %s: moeq_moe_load_finalize's layer applies differently", preset, prefix);
        ck_assert_msg(memcmp(ref, ref2, sizeof(double) * (size_t)(T * H)) == 0,
                      "%s %s: moeq_moe_load_finalize's layer differs from the reference's", preset,
                      prefix);
        free(out2);
        free(ref2);
        moeq_moe_destroy(fast);
        ran++;
        moeq_ctx_destroy(ctx);
        moeq_moe_destroy(moe);
        free(x);
        free(logits);
        free(ids);
        free(w);
        free(out);
        free(ref);
    }
    ck_assert_int_gt(ran, 0);
    moeq_checkpoint_close(ck);
    moeq_config_destroy(cfg);
}
END_TEST

static Suite *pipeline_suite(void) {
    Suite *s = suite_create("pipeline");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    uint32_t n = 0;
    while (moeq_synth_preset_name(n)) n++;
    tcase_add_loop_test(tc, test_preset_pipeline, 0, (int)n);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(pipeline_suite)

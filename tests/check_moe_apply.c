/*
 * check_moe_apply.c - every scheme with several experts: load, finalize and
 * apply, against the float64 reference forward.  Every expert of the layer
 * is used, so a parameter laid out with the wrong per-expert stride shows up
 * here (npu_w4a8_int8 once wrote its w2 slices I*H bytes apart instead of
 * H/2*I: a heap overflow from the second expert on).  The SIMD kernel tables
 * give the same bits for every scheme.
 */
#include "test_moe.h"
#include "kernels.h"
#include "layer/moe.h"

#include <math.h>
#include <stdlib.h>

START_TEST(test_every_scheme_matches_reference) {
    const int32_t scheme = _i;
    enum { E = 5, H = 64, I = 32, T = 6, K = 2 };
    moeq_test_layer tl;
    moeq_test_layer_make(&tl, &k_test_schemes[scheme], E, H, I, 3u + (uint32_t)scheme);
    ck_assert_int_eq(moeq_moe_scheme(tl.layer), scheme);
    float x[T * H], w[T * K], out[T * H];
    double ref[T * H];
    int32_t ids[T * K];
    uint32_t r = 99u + (uint32_t)scheme;
    for (int i = 0; i < T * H; i++) x[i] = ((float)(moeq_test_rand(&r) % 2001) - 1000.0f) / 500.0f;
    for (int t = 0; t < T; t++) {
        /* Every expert, the last ones included. */
        ids[t * K] = (E - 1 - t + E) % E;
        ids[t * K + 1] = (t * 2 + 1) % E;
        w[t * K] = 0.6f;
        w[t * K + 1] = 0.4f;
    }
    moeq_ctx *ctx = NULL;
    moeq_error err;
    ck_assert_ok(moeq_ctx_create(NULL, &ctx, &err), &err);
    ck_assert_ok(moeq_moe_apply(tl.layer, ctx, MOEQ_DTYPE_F32, x, T, K, ids, w, MOEQ_DTYPE_F32, out,
                                &err),
                 &err);
    ck_assert_ok(moeq_moe_apply_reference(tl.layer, MOEQ_DTYPE_F32, x, T, K, ids, w, ref, &err),
                 &err);
    double amax = 0, dmax = 0;
    for (int i = 0; i < T * H; i++) {
        ck_assert_msg(isfinite(out[i]), "%s: out[%d] = %g", moeq_scheme_name(scheme), i,
                      (double)out[i]);
        amax = fmax(amax, fabs(ref[i]));
        dmax = fmax(dmax, fabs((double)out[i] - ref[i]));
    }
    ck_assert_msg(amax > 0, "%s: all-zero output", moeq_scheme_name(scheme));
    /* float32 sums against float64 ones over at most 64 terms. */
    ck_assert_msg(dmax <= 1e-4 * amax + 1e-6, "%s: max |apply - reference| = %g (max |ref| %g)",
                  moeq_scheme_name(scheme), dmax, amax);
    moeq_ctx_destroy(ctx);
    moeq_test_layer_free(&tl);
}
END_TEST

/* MOEQ_KERNELS picks the table a context runs (moeq_ctx_kernels says which,
 * a table the CPU lacks giving the best one below it); the avx2 and avx512
 * tables give the same bits, with enough tokens that experts get rows for
 * the gemv, tile and idot paths alike, with float32 inputs and with bf16
 * ones (which weight-only layers multiply as bfloat16, tiny values
 * included), and every table is within float32 sums of the float64
 * reference.  All of it on the float path and on the bfloat16 path alike
 * (MOEQ_BF16_PATH off and on: on a CPU without AVX512_BF16 the latter runs
 * the AVX2 tile_bf16 and gemv_bf16).  (The portable table's silu_mul uses
 * expf, so its outputs are not compared bit for bit.) */
static void tables_agree_act(const moeq_test_scheme_args *a, int32_t scheme, int32_t H, int32_t I,
                             bool bf16_in, uint32_t seed, int32_t activation, int32_t non_gated) {
    enum { E = 5, T = 24, K = 2 };
    moeq_test_layer tl;
    moeq_test_layer_make_act(&tl, a, E, H, I, 7u + seed, activation, non_gated);
    ck_assert_int_eq(moeq_moe_scheme(tl.layer), scheme);
    float *x = malloc(sizeof(float) * T * H), *out[3];
    for (int i = 0; i < 3; i++) out[i] = malloc(sizeof(float) * T * H);
    uint16_t *xh = malloc(sizeof(uint16_t) * T * H);
    double *ref64 = malloc(sizeof(double) * T * H);
    float w[T * K];
    int32_t ids[T * K];
    uint32_t r = 5u + seed;
    for (int i = 0; i < T * H; i++) x[i] = ((float)(moeq_test_rand(&r) % 2001) - 1000.0f) / 500.0f;
    if (bf16_in) {
        x[3] = 0x1p-101f; /* below 2^-100: counts as zero where inputs are bfloat16 */
        x[4] = -0x1p-99f;
        x[5] = 0x1p-130f; /* subnormal */
        for (int i = 0; i < T * H; i++) xh[i] = moeq__f32_to_bf16(x[i]);
    }
    const void *xin = bf16_in ? (const void *)xh : (const void *)x;
    const moeq_dtype xdt = bf16_in ? MOEQ_DTYPE_BF16 : MOEQ_DTYPE_F32;
    for (int t = 0; t < T; t++) {
        ids[t * K] = (int32_t)(moeq_test_rand(&r) % E);
        ids[t * K + 1] = (ids[t * K] + 1 + (int32_t)(moeq_test_rand(&r) % (E - 1))) % E;
        w[t * K] = 0.7f;
        w[t * K + 1] = 0.3f;
    }
    moeq_error rerr;
    ck_assert_ok(moeq_moe_apply_reference(tl.layer, xdt, xin, T, K, ids, w, ref64, &rerr), &rerr);
    static const char *const names[3] = {"portable", "avx2", "avx512"};
    static const char *const paths[2] = {"off", "on"};
    const int have = moeq__cpu_level();
    for (int path = 0; path < 2; path++) {
        for (int level = 0; level < 3; level++) {
            setenv("MOEQ_KERNELS", names[level], 1);
            setenv("MOEQ_BF16_PATH", paths[path], 1);
            moeq_ctx *ctx = NULL;
            moeq_error err;
            ck_assert_ok(moeq_ctx_create(NULL, &ctx, &err), &err);
            unsetenv("MOEQ_KERNELS");
            unsetenv("MOEQ_BF16_PATH");
            ck_assert_str_eq(moeq_ctx_kernels(ctx), names[level <= have ? level : have]);
            ck_assert_int_eq(ctx->bf16_path, path);
            ck_assert_ok(moeq_moe_apply(tl.layer, ctx, xdt, xin, T, K, ids, w, MOEQ_DTYPE_F32,
                                        out[level], &err),
                         &err);
            moeq_ctx_destroy(ctx);
        }
        for (int level = 0; level < 3; level++) {
            double amax = 0, dmax = 0;
            for (int i = 0; i < T * H; i++) {
                amax = fmax(amax, fabs(ref64[i]));
                dmax = fmax(dmax, fabs((double)out[level][i] - ref64[i]));
            }
            ck_assert_msg(amax > 0 && dmax <= 1e-4 * amax + 1e-6,
                          "%s (H %d, %s in, %s, bfloat16 path %s, activation %d%s): "
                          "max |apply - reference| = %g (max |ref| %g)",
                          moeq_scheme_name(scheme), H, bf16_in ? "bf16" : "f32", names[level],
                          paths[path], (int)activation, non_gated ? " non-gated" : "", dmax, amax);
        }
        if (have >= 2) {
            for (int i = 0; i < T * H; i++) {
                ck_assert_msg(memcmp(&out[1][i], &out[2][i], sizeof(float)) == 0,
                              "%s (H %d, %s in, bfloat16 path %s): out[%d] avx2 %a, avx512 %a",
                              moeq_scheme_name(scheme), H, bf16_in ? "bf16" : "f32", paths[path], i,
                              (double)out[1][i], (double)out[2][i]);
            }
        }
    }
    free(x);
    free(xh);
    free(ref64);
    for (int i = 0; i < 3; i++) free(out[i]);
    moeq_test_layer_free(&tl);
}

static void tables_agree(const moeq_test_scheme_args *a, int32_t scheme, int32_t H, int32_t I,
                         bool bf16_in, uint32_t seed) {
    tables_agree_act(a, scheme, H, I, bf16_in, seed, MOEQ_ACT_SILU, 0);
}

START_TEST(test_kernel_tables_agree) {
    const int32_t scheme = _i / 2;
    tables_agree(&k_test_schemes[scheme], scheme, 64, 32, _i % 2, (uint32_t)scheme);
    if (_i == 0 && moeq__cpu_level() < 2) {
        fprintf(stderr, "check_moe_apply: no avx512 table on this CPU; avx2 and avx512 "
                        "outputs not compared\n");
    }
    moeq_ctx_options fo = {1, 1};
    moeq_ctx *ref = NULL;
    moeq_error err;
    ck_assert_ok(moeq_ctx_create(&fo, &ref, &err), &err);
    ck_assert_str_eq(moeq_ctx_kernels(ref), "reference");
    moeq_ctx_destroy(ref);
    ck_assert_ptr_null(moeq_ctx_kernels(NULL));
}
END_TEST

/* The bfloat16 tiles take scale groups of 128 columns or more (or one per
 * row), or E8M0 scales folded into the panels (w4a16_mxfp4, groups of 32):
 * such layers, wider than the ones above, in every table (w4a8_fp8: int4
 * codes times FP8 activation codes). */
static const struct {
    moeq_test_scheme_args a;
    int32_t scheme;
} k_bf16_cases[] = {
    {{"{\"num_bits\":4,\"group_size\":128}", "null", "pack-quantized", 0, 0},
     MOEQ_SCHEME_WNA16},
    {{"{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}", "null",
      "float-quantized", 0, 0},
     MOEQ_SCHEME_W8A16_FP8},
    {{"{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}",
      "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"token\",\"dynamic\":true}",
      "float-quantized", 0, 0},
     MOEQ_SCHEME_W8A8_FP8},
    {{"{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}",
      "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\",\"dynamic\":true}",
      "float-quantized", 0, 0},
     MOEQ_SCHEME_W8A8_FP8},
    {{"{\"num_bits\":4,\"group_size\":128}",
      "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"token\",\"dynamic\":true}",
      "pack-quantized", 0, 0},
     MOEQ_SCHEME_W4A8_FP8},
    {{"{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"block\",\"block_structure\":[128,"
      "128]}",
      "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"group\",\"group_size\":128,"
      "\"dynamic\":true}",
      "float-quantized", 0, 0},
     MOEQ_SCHEME_W8A8_FP8},
    {{"{\"num_bits\":4,\"type\":\"float\",\"group_size\":32}", "null",
      "mxfp4-pack-quantized", 0, 0},
     MOEQ_SCHEME_W4A16_MXFP4},
};

START_TEST(test_bf16_tiles_tables_agree) {
    const int c = _i / 2;
    tables_agree(&k_bf16_cases[c].a, k_bf16_cases[c].scheme, 256, 128, _i % 2,
                 100u + (uint32_t)_i);
}
END_TEST

/* Non-gated experts, down(act(up x)), in every scheme: w13 holds up alone,
 * and every kernel table agrees with the float64 reference, for relu2
 * (Nemotron-H) and, scheme by scheme in turn, silu, gelu and gelu_tanh. */
START_TEST(test_non_gated_every_scheme) {
    const int32_t scheme = _i / 2;
    static const int32_t acts[3] = {MOEQ_ACT_SILU, MOEQ_ACT_GELU, MOEQ_ACT_GELU_TANH};
    const int32_t act = _i % 2 ? acts[scheme % 3] : MOEQ_ACT_RELU2;
    moeq_test_layer tl;
    moeq_test_layer_create_act(&tl, &k_test_schemes[scheme], 5, 64, 32, 11u, act, 1);
    moeq_param p;
    for (uint32_t i = 0; i < moeq_moe_param_count(tl.layer); i++) {
        ck_assert_int_eq(moeq_moe_param(tl.layer, i, &p), MOEQ_OK);
        /* w13 is sized for up alone: [E, I, ...] (per-shard [E, 1]) */
        if (strncmp(p.name, "w13_", 4) == 0 && p.layout == MOEQ_LAYOUT_SHARDED &&
            !p.is_transposed && strcmp(p.ckpt_suffix, "weight_g_idx") != 0 &&
            scheme != MOEQ_SCHEME_NPU_W4A8_INT8) {
            ck_assert_msg(p.shape[1] == 32 || p.shape[1] == 1 /* block scales: 32/32 */,
                          "%s: %s shape[1] %lld", moeq_scheme_name(scheme), p.name,
                          (long long)p.shape[1]);
        }
        if (p.layout == MOEQ_LAYOUT_PER_SHARD && strncmp(p.name, "w13_", 4) == 0) {
            ck_assert_int_eq(p.ndim, 2);
            ck_assert_int_eq(p.shape[1], 1);
        }
    }
    moeq_test_layer_free(&tl);
    tables_agree_act(&k_test_schemes[scheme], scheme, 64, 32, false, 40u + (uint32_t)_i, act, 1);
}
END_TEST

/* The non-gated forward itself, against one written here from the loaded
 * float weights: y = sum_k w_k * down_e(relu(up_e x)^2). */
START_TEST(test_non_gated_relu2_by_hand) {
    enum { E = 3, H = 32, I = 16, T = 4, K = 2 };
    moeq_test_layer tl;
    moeq_test_layer_create_act(&tl, &k_test_schemes[MOEQ_SCHEME_UNQUANTIZED], E, H, I, 21u,
                               MOEQ_ACT_RELU2, 1);
    moeq_test_layer_load(&tl);
    moeq_param up, down;
    ck_assert_int_eq(moeq_moe_find_param(tl.layer, "w13_weight", &up), MOEQ_OK);
    ck_assert_int_eq(moeq_moe_find_param(tl.layer, "w2_weight", &down), MOEQ_OK);
    ck_assert_int_eq(up.shape[1], I);
    static float wu[E * I * H], wd[E * H * I];
    for (int i = 0; i < E * I * H; i++) {
        uint16_t h;
        memcpy(&h, (const uint8_t *)up.data + 2 * i, 2);
        uint32_t u = (uint32_t)h << 16;
        memcpy(&wu[i], &u, 4);
        memcpy(&h, (const uint8_t *)down.data + 2 * i, 2);
        u = (uint32_t)h << 16;
        memcpy(&wd[i], &u, 4);
    }
    moeq_error err;
    ck_assert_ok(moeq_moe_finalize(tl.layer, &err), &err);
    float x[T * H], w[T * K], out[T * H];
    int32_t ids[T * K];
    uint32_t r = 3u;
    for (int i = 0; i < T * H; i++) x[i] = ((float)(moeq_test_rand(&r) % 2001) - 1000.0f) / 100.0f;
    for (int t = 0; t < T; t++) {
        ids[t * K] = t % E;
        ids[t * K + 1] = (t + 1) % E;
        w[t * K] = 0.75f;
        w[t * K + 1] = 0.25f;
    }
    moeq_ctx *ctx = NULL;
    ck_assert_ok(moeq_ctx_create(NULL, &ctx, &err), &err);
    ck_assert_ok(moeq_moe_apply(tl.layer, ctx, MOEQ_DTYPE_F32, x, T, K, ids, w, MOEQ_DTYPE_F32, out,
                                &err),
                 &err);
    double amax = 0, dmax = 0;
    int negatives = 0;
    for (int t = 0; t < T; t++) {
        double y[H] = {0};
        for (int j = 0; j < K; j++) {
            const int e = ids[t * K + j];
            double a[I];
            for (int i = 0; i < I; i++) {
                double u = 0;
                for (int h = 0; h < H; h++) u += (double)x[t * H + h] * wu[(e * I + i) * H + h];
                negatives += u < 0;
                a[i] = u > 0 ? u * u : 0.0;
            }
            for (int h = 0; h < H; h++) {
                double d = 0;
                for (int i = 0; i < I; i++) d += a[i] * wd[(e * H + h) * I + i];
                y[h] += w[t * K + j] * d;
            }
        }
        for (int h = 0; h < H; h++) {
            amax = fmax(amax, fabs(y[h]));
            dmax = fmax(dmax, fabs((double)out[t * H + h] - y[h]));
        }
    }
    ck_assert_msg(negatives > 0, "relu2 never clipped: the case proves nothing");
    ck_assert_msg(amax > 0 && dmax <= 1e-4 * amax, "max |apply - by hand| %g of %g", dmax, amax);
    moeq_ctx_destroy(ctx);
    moeq_test_layer_free(&tl);
}
END_TEST

static Suite *moe_apply_suite(void) {
    Suite *s = suite_create("moe_apply");
    TCase *tc = tcase_create("schemes");
    tcase_add_loop_test(tc, test_every_scheme_matches_reference, 0, MOEQ_SCHEME_COUNT);
    tcase_add_loop_test(tc, test_kernel_tables_agree, 0, 2 * MOEQ_SCHEME_COUNT);
    tcase_add_loop_test(tc, test_bf16_tiles_tables_agree, 0,
                        2 * (int)(sizeof k_bf16_cases / sizeof k_bf16_cases[0]));
    tcase_add_loop_test(tc, test_non_gated_every_scheme, 0, 2 * MOEQ_SCHEME_COUNT);
    tcase_add_test(tc, test_non_gated_relu2_by_hand);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(moe_apply_suite)

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

#include <math.h>

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
 * tables give the same bits for every scheme, with enough tokens that
 * experts get rows for the gemv, tile and idot paths alike.  (The portable
 * table's silu_mul uses expf, so its outputs are not compared bit for bit.) */
START_TEST(test_kernel_tables_agree) {
    const int32_t scheme = _i;
    enum { E = 5, H = 64, I = 32, T = 24, K = 2 };
    moeq_test_layer tl;
    moeq_test_layer_make(&tl, &k_test_schemes[scheme], E, H, I, 7u + (uint32_t)scheme);
    float x[T * H], w[T * K], out[3][T * H];
    int32_t ids[T * K];
    uint32_t r = 5u + (uint32_t)scheme;
    for (int i = 0; i < T * H; i++) x[i] = ((float)(moeq_test_rand(&r) % 2001) - 1000.0f) / 500.0f;
    for (int t = 0; t < T; t++) {
        ids[t * K] = (int32_t)(moeq_test_rand(&r) % E);
        ids[t * K + 1] = (ids[t * K] + 1 + (int32_t)(moeq_test_rand(&r) % (E - 1))) % E;
        w[t * K] = 0.7f;
        w[t * K + 1] = 0.3f;
    }
    static const char *const names[3] = {"portable", "avx2", "avx512"};
    const int have = moeq__cpu_level();
    for (int level = 0; level < 3; level++) {
        setenv("MOEQ_KERNELS", names[level], 1);
        moeq_ctx *ctx = NULL;
        moeq_error err;
        ck_assert_ok(moeq_ctx_create(NULL, &ctx, &err), &err);
        unsetenv("MOEQ_KERNELS");
        ck_assert_str_eq(moeq_ctx_kernels(ctx), names[level <= have ? level : have]);
        ck_assert_ok(moeq_moe_apply(tl.layer, ctx, MOEQ_DTYPE_F32, x, T, K, ids, w, MOEQ_DTYPE_F32,
                                    out[level], &err),
                     &err);
        moeq_ctx_destroy(ctx);
    }
    if (have >= 2) {
        for (int i = 0; i < T * H; i++) {
            ck_assert_msg(memcmp(&out[1][i], &out[2][i], sizeof(float)) == 0,
                          "%s: out[%d] avx2 %a, avx512 %a", moeq_scheme_name(scheme), i,
                          (double)out[1][i], (double)out[2][i]);
        }
    } else if (scheme == 0) {
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
    moeq_test_layer_free(&tl);
}
END_TEST

static Suite *moe_apply_suite(void) {
    Suite *s = suite_create("moe_apply");
    TCase *tc = tcase_create("schemes");
    tcase_add_loop_test(tc, test_every_scheme_matches_reference, 0, MOEQ_SCHEME_COUNT);
    tcase_add_loop_test(tc, test_kernel_tables_agree, 0, MOEQ_SCHEME_COUNT);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(moe_apply_suite)

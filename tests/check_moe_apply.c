/*
 * check_moe_apply.c - every scheme with several experts: load, finalize and
 * apply, against the float64 reference forward.  Every expert of the layer
 * is used, so a parameter laid out with the wrong per-expert stride shows up
 * here (npu_w4a8_int8 once wrote its w2 slices I*H bytes apart instead of
 * H/2*I: a heap overflow from the second expert on).
 */
#include "test_moe.h"

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

static Suite *moe_apply_suite(void) {
    Suite *s = suite_create("moe_apply");
    TCase *tc = tcase_create("schemes");
    tcase_add_loop_test(tc, test_every_scheme_matches_reference, 0, MOEQ_SCHEME_COUNT);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(moe_apply_suite)

/* check_route.c - MoE routing: scores, top-k order and ties, correction bias,
 * grouped top-k, renormalization and scaling, validation messages, and a
 * random cross-check against a sort-everything reference. */
#include "test_util.h"
#include "common/internal.h"

#include <float.h>
#include <math.h>
#include <stdint.h>

/* Tolerances, in one place: float32 scores against double-precision
 * expectations, and the routed weights against the float reference. */
#define TOL_WEIGHT    1e-6
#define TOL_REFERENCE 1e-6

static double sigmoid_d(double x) {
    return 1.0 / (1.0 + exp(-x));
}

static moeq_route_config plain(int32_t experts, int32_t k, int32_t scoring, int32_t renormalize) {
    moeq_route_config c;
    memset(&c, 0, sizeof c);
    c.num_experts = experts;
    c.top_k = k;
    c.scoring = scoring;
    c.renormalize = renormalize;
    return c;
}

/* Routes one token and checks its ids exactly and its weights to TOL_WEIGHT. */
static void expect_route(const moeq_route_config *c, const float *logits, const int32_t *want_ids,
                         const double *want_w) {
    int32_t ids[64];
    float w[64];
    moeq_error err;
    moeq_error_clear(&err);
    ck_assert_int_le(c->top_k, 64);
    ck_assert_ok(moeq_route(c, logits, 1, ids, w, &err), &err);
    for (int32_t i = 0; i < c->top_k; i++) {
        ck_assert_msg(ids[i] == want_ids[i], "slot %d: id %d, want %d", (int)i, (int)ids[i],
                      (int)want_ids[i]);
        ck_assert_msg(fabs((double)w[i] - want_w[i]) <= TOL_WEIGHT,
                      "slot %d: weight %.9g, want %.9g", (int)i, (double)w[i], want_w[i]);
    }
}

START_TEST(test_softmax_top2) {
    const float x[4] = {1.0f, 3.0f, 2.0f, 0.0f};
    const double sum = exp(1.0) + exp(3.0) + exp(2.0) + exp(0.0);
    const int32_t ids[2] = {1, 2};

    moeq_route_config c = plain(4, 2, MOEQ_SCORING_SOFTMAX, 0);
    const double raw[2] = {exp(3.0) / sum, exp(2.0) / sum}; /* 0.6652, 0.2447 */
    expect_route(&c, x, ids, raw);

    c.renormalize = 1;
    const double renorm[2] = {exp(3.0) / (exp(3.0) + exp(2.0)), exp(2.0) / (exp(3.0) + exp(2.0))};
    expect_route(&c, x, ids, renorm);
}
END_TEST

START_TEST(test_sigmoid_top2) {
    const float x[4] = {-1.0f, 2.0f, 0.5f, 1.0f};
    const int32_t ids[2] = {1, 3};
    moeq_route_config c = plain(4, 2, MOEQ_SCORING_SIGMOID, 0);
    const double raw[2] = {sigmoid_d(2.0), sigmoid_d(1.0)}; /* 0.8808, 0.7311 */
    expect_route(&c, x, ids, raw);

    c.renormalize = 1;
    const double s = sigmoid_d(2.0) + sigmoid_d(1.0);
    const double renorm[2] = {sigmoid_d(2.0) / s, sigmoid_d(1.0) / s};
    expect_route(&c, x, ids, renorm);
}
END_TEST

START_TEST(test_ties_go_to_lower_ids) {
    const float same[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    moeq_route_config c = plain(4, 3, MOEQ_SCORING_SOFTMAX, 0);
    const int32_t ids3[3] = {0, 1, 2};
    const double quarter[3] = {0.25, 0.25, 0.25};
    expect_route(&c, same, ids3, quarter);

    /* Ties among the best and at the cut-off, offered in every order. */
    const float x[5] = {1.0f, 2.0f, 2.0f, 1.0f, 2.0f};
    const double sum = 3.0 * exp(2.0) + 2.0 * exp(1.0);
    c = plain(5, 2, MOEQ_SCORING_SOFTMAX, 0);
    const int32_t ids2[2] = {1, 2};
    const double w2[2] = {exp(2.0) / sum, exp(2.0) / sum};
    expect_route(&c, x, ids2, w2);
    c.top_k = 4;
    const int32_t ids4[4] = {1, 2, 4, 0};
    const double w4[4] = {exp(2.0) / sum, exp(2.0) / sum, exp(2.0) / sum, exp(1.0) / sum};
    expect_route(&c, x, ids4, w4);

    /* Sigmoid ties too, and the tie at the boundary decided by the id. */
    const float y[6] = {0.0f, 1.0f, 0.0f, 1.0f, 0.0f, -1.0f};
    c = plain(6, 3, MOEQ_SCORING_SIGMOID, 0);
    const int32_t ids_y[3] = {1, 3, 0};
    const double w_y[3] = {sigmoid_d(1.0), sigmoid_d(1.0), 0.5};
    expect_route(&c, y, ids_y, w_y);
}
END_TEST

START_TEST(test_bias_chooses_but_does_not_weigh) {
    /* sigmoid: 0.8808 0.7311 0.5 0.2689; + bias: 0.8808 0.7311 1.0 1.2689 */
    const float x[4] = {2.0f, 1.0f, 0.0f, -1.0f};
    const float bias[4] = {0.0f, 0.0f, 0.5f, 1.0f};
    moeq_route_config c = plain(4, 2, MOEQ_SCORING_SIGMOID, 0);
    const int32_t unbiased_ids[2] = {0, 1};
    const double unbiased_w[2] = {sigmoid_d(2.0), sigmoid_d(1.0)};
    expect_route(&c, x, unbiased_ids, unbiased_w);

    c.correction_bias = bias;
    const int32_t ids[2] = {3, 2};
    const double w[2] = {sigmoid_d(-1.0), 0.5};
    expect_route(&c, x, ids, w);

    c.renormalize = 1;
    const double s = sigmoid_d(-1.0) + 0.5;
    const double wr[2] = {sigmoid_d(-1.0) / s, 0.5 / s};
    expect_route(&c, x, ids, wr);

    /* With softmax scoring the bias works the same way. */
    const float y[3] = {1.0f, 0.0f, 0.0f};
    const float b2[3] = {0.0f, 0.0f, 0.9f};
    c = plain(3, 1, MOEQ_SCORING_SOFTMAX, 0);
    c.correction_bias = b2;
    const int32_t id1[1] = {2};
    const double w1[1] = {1.0 / (exp(1.0) + 2.0)};
    expect_route(&c, y, id1, w1);
}
END_TEST

START_TEST(test_grouped_without_bias) {
    /* 4 groups of 2: group maxima 5, 4, 3, 0 -> groups 0 and 1 kept.  With
     * max-scored groups and topk_group >= top_k the plain top-k is always in
     * the kept groups, so top_k 3 > topk_group 2 shows the restriction. */
    const float x[8] = {5.0f, 1.0f, 4.0f, 0.5f, 3.0f, 0.0f, 0.0f, -1.0f};
    double sum = 0.0;
    for (int i = 0; i < 8; i++) sum += exp((double)x[i]);

    moeq_route_config c = plain(8, 3, MOEQ_SCORING_SOFTMAX, 0);
    const int32_t plain_ids[3] = {0, 2, 4};
    const double plain_w[3] = {exp(5.0) / sum, exp(4.0) / sum, exp(3.0) / sum};
    expect_route(&c, x, plain_ids, plain_w);

    c.num_expert_group = 4;
    c.topk_group = 2;
    const int32_t ids[3] = {0, 2, 1};
    const double w[3] = {exp(5.0) / sum, exp(4.0) / sum, exp(1.0) / sum};
    expect_route(&c, x, ids, w);

    /* One group kept (topk_group 1) with top_k 2. */
    c.top_k = 2;
    c.topk_group = 1;
    const int32_t ids1[2] = {0, 1};
    const double w1[2] = {exp(5.0) / sum, exp(1.0) / sum};
    expect_route(&c, x, ids1, w1);

    /* Sigmoid scoring: groups score by their best sigmoid. */
    c = plain(8, 3, MOEQ_SCORING_SIGMOID, 1);
    c.num_expert_group = 4;
    c.topk_group = 2;
    const double s = sigmoid_d(5.0) + sigmoid_d(4.0) + sigmoid_d(1.0);
    const double ws[3] = {sigmoid_d(5.0) / s, sigmoid_d(4.0) / s, sigmoid_d(1.0) / s};
    expect_route(&c, x, ids, ws);
}
END_TEST

START_TEST(test_grouped_with_bias) {
    /* sigmoid:        .8808 .1192 | .8176 .0474 | .5744 .5498 | .5250 .5000
     * + bias (choice): .8808 .1192 | .8176 .0474 | .6744 .6498 | .7250 .7000
     * top-2 sums:      1.0000      |  .8650      | 1.3242      | 1.4250
     * Groups 3 and 2 are kept, so the two best single experts (0 and 2) are
     * out: DeepSeek-V3's biased grouped top-k picks 6 and 7. */
    const float x[8] = {2.0f, -2.0f, 1.5f, -3.0f, 0.3f, 0.2f, 0.1f, 0.0f};
    const float bias[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.1f, 0.1f, 0.2f, 0.2f};
    moeq_route_config c = plain(8, 2, MOEQ_SCORING_SIGMOID, 0);
    c.correction_bias = bias;
    const int32_t plain_ids[2] = {0, 2};
    const double plain_w[2] = {sigmoid_d(2.0), sigmoid_d(1.5)};
    expect_route(&c, x, plain_ids, plain_w);

    c.num_expert_group = 4;
    c.topk_group = 2;
    const int32_t ids[2] = {6, 7};
    const double w[2] = {sigmoid_d(0.1), 0.5};
    expect_route(&c, x, ids, w);

    /* Renormalized and scaled by 2.5, as DeepSeek-V3 runs it. */
    c.renormalize = 1;
    c.routed_scaling_factor = 2.5f;
    const double s = sigmoid_d(0.1) + 0.5;
    const double ws[2] = {2.5 * sigmoid_d(0.1) / s, 2.5 * 0.5 / s};
    expect_route(&c, x, ids, ws);

    /* A group with one strong expert loses to a group with two good ones,
     * although max-scoring would keep it: the sum of the top two decides. */
    const float y[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const float b2[4] = {3.0f, -3.0f, 1.0f, 1.0f};
    c = plain(4, 1, MOEQ_SCORING_SIGMOID, 0);
    c.correction_bias = b2;
    c.num_expert_group = 2;
    c.topk_group = 1;
    const int32_t id2[1] = {2};
    const double w2[1] = {0.5};
    expect_route(&c, y, id2, w2);
}
END_TEST

START_TEST(test_routed_scaling_factor) {
    const float x[4] = {1.0f, 3.0f, 2.0f, 0.0f};
    const int32_t ids[2] = {1, 2};
    const double pair = exp(3.0) + exp(2.0);
    moeq_route_config c = plain(4, 2, MOEQ_SCORING_SOFTMAX, 1);
    c.routed_scaling_factor = 2.5f;
    const double w[2] = {2.5 * exp(3.0) / pair, 2.5 * exp(2.0) / pair};
    expect_route(&c, x, ids, w);

    /* 0 means 1. */
    c.routed_scaling_factor = 0.0f;
    const double w1[2] = {exp(3.0) / pair, exp(2.0) / pair};
    expect_route(&c, x, ids, w1);

    /* Applied without renormalization too. */
    const double sum = exp(1.0) + exp(3.0) + exp(2.0) + exp(0.0);
    c.renormalize = 0;
    c.routed_scaling_factor = 0.5f;
    const double w2[2] = {0.5 * exp(3.0) / sum, 0.5 * exp(2.0) / sum};
    expect_route(&c, x, ids, w2);
}
END_TEST

START_TEST(test_top_k_equals_experts) {
    const float x[5] = {0.1f, -0.2f, 0.3f, 0.3f, 0.0f};
    double sum = 0.0;
    for (int i = 0; i < 5; i++) sum += exp((double)x[i]);
    moeq_route_config c = plain(5, 5, MOEQ_SCORING_SOFTMAX, 0);
    const int32_t ids[5] = {2, 3, 0, 4, 1};
    double w[5];
    for (int i = 0; i < 5; i++) w[i] = exp((double)x[ids[i]]) / sum;
    expect_route(&c, x, ids, w);
    /* Renormalizing a full softmax changes nothing. */
    c.renormalize = 1;
    expect_route(&c, x, ids, w);
}
END_TEST

START_TEST(test_single_expert) {
    const float x[1] = {-7.0f};
    const int32_t id0[1] = {0};
    moeq_route_config c = plain(1, 1, MOEQ_SCORING_SOFTMAX, 0);
    const double one[1] = {1.0};
    expect_route(&c, x, id0, one);

    c.scoring = MOEQ_SCORING_SIGMOID;
    const double s[1] = {sigmoid_d(-7.0)};
    expect_route(&c, x, id0, s);
    c.renormalize = 1;
    expect_route(&c, x, id0, one);

    /* Grouping with a single group of one. */
    c = plain(1, 1, MOEQ_SCORING_SOFTMAX, 1);
    c.num_expert_group = 1;
    c.topk_group = 1;
    expect_route(&c, x, id0, one);
}
END_TEST

START_TEST(test_large_logits) {
    /* exp(1e4) overflows float32 (and double); the max is subtracted first. */
    const float x[4] = {1e4f, -1e4f, 9999.0f, 0.0f};
    const double sum = 1.0 + exp(-1.0);
    moeq_route_config c = plain(4, 2, MOEQ_SCORING_SOFTMAX, 0);
    const int32_t ids[2] = {0, 2};
    const double w[2] = {1.0 / sum, exp(-1.0) / sum};
    expect_route(&c, x, ids, w);

    /* The extreme finite values still give finite weights. */
    const float y[3] = {FLT_MAX, -FLT_MAX, FLT_MAX};
    c = plain(3, 3, MOEQ_SCORING_SOFTMAX, 1);
    const int32_t ids_y[3] = {0, 2, 1};
    const double w_y[3] = {0.5, 0.5, 0.0};
    expect_route(&c, y, ids_y, w_y);

    /* Sigmoid saturates to 1 and 0; renormalizing chosen weights that all
     * underflowed to 0 gives 0, not NaN (the 1e-20 in the denominator). */
    const float z[2] = {-1e4f, -1e4f};
    c = plain(2, 2, MOEQ_SCORING_SIGMOID, 1);
    const int32_t ids_z[2] = {0, 1};
    const double zero[2] = {0.0, 0.0};
    expect_route(&c, z, ids_z, zero);
    const float u[2] = {1e4f, -1e4f};
    const double w_u[2] = {1.0, 0.0};
    expect_route(&c, u, ids_z, w_u);
}
END_TEST

START_TEST(test_several_tokens_and_empty_batch) {
    const float x[3][4] = {
        {1.0f, 3.0f, 2.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 9.0f}, {-1.0f, -2.0f, -3.0f, -4.0f}};
    moeq_route_config c = plain(4, 2, MOEQ_SCORING_SOFTMAX, 1);
    int32_t ids[3][2];
    float w[3][2];
    moeq_error err;
    moeq_error_clear(&err);
    ck_assert_ok(moeq_route(&c, &x[0][0], 3, &ids[0][0], &w[0][0], &err), &err);
    const int32_t want[3][2] = {{1, 2}, {3, 0}, {0, 1}};
    for (int t = 0; t < 3; t++) {
        for (int i = 0; i < 2; i++) ck_assert_int_eq(ids[t][i], want[t][i]);
        ck_assert(fabs((double)w[t][0] + (double)w[t][1] - 1.0) <= TOL_WEIGHT);
    }
    ck_assert(fabs((double)w[2][0] - 1.0 / (1.0 + exp(-1.0))) <= TOL_WEIGHT);

    /* tokens == 0 accepts NULL arrays and writes nothing. */
    ck_assert_ok(moeq_route(&c, NULL, 0, NULL, NULL, &err), &err);
    ids[0][0] = -7;
    w[0][0] = -7.0f;
    ck_assert_ok(moeq_route(&c, &x[0][0], 0, &ids[0][0], &w[0][0], NULL), &err);
    ck_assert_int_eq(ids[0][0], -7);
    ck_assert(w[0][0] == -7.0f);
    /* ...but still checks the config. */
    c.top_k = 0;
    ck_assert_status(moeq_route(&c, NULL, 0, NULL, NULL, &err), MOEQ_STATUS_INVALID_ARG, &err);
}
END_TEST

START_TEST(test_bad_logits_stop_at_the_token) {
    float x[3][4] = {{1.0f, 3.0f, 2.0f, 0.0f}, {0.0f, 0.0f, NAN, 0.0f}, {1.0f, 2.0f, 3.0f, 4.0f}};
    moeq_route_config c = plain(4, 2, MOEQ_SCORING_SOFTMAX, 0);
    int32_t ids[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
    float w[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
    moeq_error err;
    moeq_error_clear(&err);
    ck_assert_status(moeq_route(&c, &x[0][0], 3, &ids[0][0], &w[0][0], &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_int_eq(err.code, MOEQ_STATUS_INVALID_ARG);
    ck_assert_msg(strstr(err.message, "token 1, expert 2") && strstr(err.message, "nan"), "%s",
                  err.message);
    /* Row 0 was routed; rows 1 and 2 are untouched. */
    ck_assert_int_eq(ids[0][0], 1);
    ck_assert_int_eq(ids[0][1], 2);
    for (int t = 1; t < 3; t++) {
        ck_assert_int_eq(ids[t][0], -1);
        ck_assert(w[t][1] == -1.0f);
    }

    x[1][2] = -INFINITY;
    c.scoring = MOEQ_SCORING_SIGMOID;
    ck_assert_status(moeq_route(&c, &x[0][0], 3, &ids[0][0], &w[0][0], &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_msg(strstr(err.message, "token 1, expert 2: logit is -inf"), "%s", err.message);
    /* No error record is fine too. */
    ck_assert_int_eq(moeq_route(&c, &x[0][0], 3, &ids[0][0], &w[0][0], NULL),
                     MOEQ_STATUS_INVALID_ARG);
}
END_TEST

/* ---- invalid arguments ---------------------------------------------------------- */

typedef struct bad_case {
    const char *name;
    int32_t experts, k, scoring, renormalize, groups, topk_group;
    int bias; /* 0 none, 1 finite, 2 NaN at [3], 3 +inf at [3] */
    float scaling;
    int64_t tokens;
    int null_arg; /* 0 none, 1 logits, 2 ids, 3 weights, 4 cfg */
    const char *want;
} bad_case;

static const bad_case bad_cases[] = {
    {"null cfg", 8, 2, 0, 0, 0, 0, 0, 0.0f, 1, 4, "cfg is NULL"},
    {"null logits", 8, 2, 0, 0, 0, 0, 0, 0.0f, 1, 1, "logits is NULL with tokens = 1"},
    {"null ids", 8, 2, 0, 0, 0, 0, 0, 0.0f, 2, 2, "topk_ids is NULL with tokens = 2"},
    {"null weights", 8, 2, 0, 0, 0, 0, 0, 0.0f, 1, 3, "topk_weights is NULL"},
    {"negative tokens", 8, 2, 0, 0, 0, 0, 0, 0.0f, -1, 0, "tokens is -1; want >= 0"},
    {"no experts", 0, 1, 0, 0, 0, 0, 0, 0.0f, 1, 0, "num_experts is 0; want at least 1"},
    {"top_k 0", 8, 0, 0, 0, 0, 0, 0, 0.0f, 1, 0, "top_k is 0; want 1..num_experts (8)"},
    {"top_k > E", 8, 9, 0, 0, 0, 0, 0, 0.0f, 1, 0, "top_k is 9; want 1..num_experts (8)"},
    {"scoring", 8, 2, 7, 0, 0, 0, 0, 0.0f, 1, 0, "scoring is 7; want MOEQ_SCORING_SOFTMAX (0)"},
    {"renormalize", 8, 2, 0, 2, 0, 0, 0, 0.0f, 1, 0, "renormalize is 2; want 0 or 1"},
    {"groups only", 8, 2, 0, 0, 4, 0, 0, 0.0f, 1, 0,
     "num_expert_group is 4 but topk_group is 0; set both"},
    {"topk_group only", 8, 2, 0, 0, 0, 2, 0, 0.0f, 1, 0,
     "num_expert_group is 0 but topk_group is 2"},
    {"negative groups", 8, 2, 0, 0, -4, 2, 0, 0.0f, 1, 0,
     "num_expert_group is -4 and topk_group 2"},
    {"groups do not divide", 8, 2, 0, 0, 3, 1, 0, 0.0f, 1, 0,
     "num_expert_group 3 does not divide num_experts 8"},
    {"topk_group > groups", 8, 2, 0, 0, 4, 5, 0, 0.0f, 1, 0,
     "topk_group is 5; want 1..num_expert_group (4)"},
    {"kept groups too small", 8, 3, 0, 0, 4, 1, 0, 0.0f, 1, 0,
     "topk_group 1 groups of 2 experts hold 2 experts, fewer than top_k 3"},
    {"bias with groups of one", 8, 2, 1, 0, 8, 4, 1, 0.0f, 1, 0,
     "num_expert_group 8 leaves 1 expert per group"},
    {"bias NaN", 8, 2, 1, 0, 0, 0, 2, 0.0f, 1, 0, "correction_bias[3] is nan; want finite"},
    {"bias inf", 8, 2, 1, 0, 0, 0, 3, 0.0f, 1, 0, "correction_bias[3] is inf"},
    {"negative scaling", 8, 2, 0, 1, 0, 0, 0, -1.0f, 1, 0,
     "routed_scaling_factor is -1; want a finite value >= 0"},
    {"infinite scaling", 8, 2, 0, 1, 0, 0, 0, INFINITY, 1, 0, "routed_scaling_factor is inf"},
    {"NaN scaling", 8, 2, 0, 1, 0, 0, 0, NAN, 1, 0, "routed_scaling_factor is nan"},
};

START_TEST(test_invalid_arguments) {
    const bad_case *bc = &bad_cases[_i];
    float bias[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (bc->bias == 2) bias[3] = NAN;
    if (bc->bias == 3) bias[3] = INFINITY;
    moeq_route_config c = plain(bc->experts, bc->k, bc->scoring, bc->renormalize);
    c.num_expert_group = bc->groups;
    c.topk_group = bc->topk_group;
    c.correction_bias = bc->bias ? bias : NULL;
    c.routed_scaling_factor = bc->scaling;
    float logits[2][8] = {{0}};
    int32_t ids[2][8];
    float w[2][8];
    moeq_error err;
    moeq_error_clear(&err);
    moeq_status st = moeq_route(
        bc->null_arg == 4 ? NULL : &c, bc->null_arg == 1 ? NULL : &logits[0][0], bc->tokens,
        bc->null_arg == 2 ? NULL : &ids[0][0], bc->null_arg == 3 ? NULL : &w[0][0], &err);
    ck_assert_msg(st == MOEQ_STATUS_INVALID_ARG, "%s: status %s (%s)", bc->name,
                  moeq_status_name(st), err.message);
    ck_assert_int_eq(err.code, MOEQ_STATUS_INVALID_ARG);
    ck_assert_msg(strstr(err.message, bc->want) != NULL, "%s: message \"%s\" lacks \"%s\"",
                  bc->name, err.message, bc->want);
    ck_assert_msg(strncmp(err.message, "moeq_route: ", 12) == 0, "%s", err.message);
}
END_TEST

/* ---- random cross-check ----------------------------------------------------------- */

/* A sort-everything reference, written for clarity: the same float32 scores,
 * then qsort of groups and of candidates by (value desc, id asc). */
typedef struct ref_item {
    float v;
    int32_t id;
} ref_item;

static int ref_cmp(const void *pa, const void *pb) {
    const ref_item *a = pa, *b = pb;
    if (a->v != b->v) return a->v > b->v ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static void ref_route(const moeq_route_config *c, const float *x, int32_t *ids, double *w) {
    const int32_t n = c->num_experts;
    float *s = malloc(sizeof(float) * (size_t)n);
    ref_item *items = malloc(sizeof(ref_item) * (size_t)n);
    ck_assert(s && items);
    float mx = x[0];
    for (int32_t e = 1; e < n; e++) mx = x[e] > mx ? x[e] : mx;
    if (c->scoring == MOEQ_SCORING_SOFTMAX) {
        float sum = 0.0f;
        for (int32_t e = 0; e < n; e++) {
            s[e] = expf(x[e] - mx);
            sum += s[e];
        }
        for (int32_t e = 0; e < n; e++) s[e] /= sum;
    } else {
        for (int32_t e = 0; e < n; e++) s[e] = 1.0f / (1.0f + expf(-x[e]));
    }
    const float *b = c->correction_bias;
    int32_t groups = c->num_expert_group ? c->num_expert_group : 1;
    int32_t per = n / groups;
    int32_t keep_n = c->num_expert_group ? c->topk_group : 1;
    ref_item gs[512];
    ck_assert_int_le(groups, 512);
    for (int32_t g = 0; g < groups; g++) {
        for (int32_t j = 0; j < per; j++) {
            items[j].v = s[g * per + j] + (b ? b[g * per + j] : 0.0f);
            items[j].id = g * per + j;
        }
        qsort(items, (size_t)per, sizeof *items, ref_cmp);
        gs[g].v = b ? items[0].v + items[1].v : items[0].v;
        gs[g].id = g;
    }
    qsort(gs, (size_t)groups, sizeof *gs, ref_cmp);
    int32_t m = 0;
    for (int32_t e = 0; e < n; e++) {
        int kept = 0;
        for (int32_t i = 0; i < keep_n; i++) kept |= gs[i].id == e / per;
        if (!kept) continue;
        items[m].v = s[e] + (b ? b[e] : 0.0f);
        items[m].id = e;
        m++;
    }
    qsort(items, (size_t)m, sizeof *items, ref_cmp);
    double sum = 0.0;
    for (int32_t i = 0; i < c->top_k; i++) {
        ids[i] = items[i].id;
        w[i] = (double)s[items[i].id];
        sum += w[i];
    }
    double scale = c->routed_scaling_factor == 0.0f ? 1.0 : (double)c->routed_scaling_factor;
    for (int32_t i = 0; i < c->top_k; i++) w[i] = w[i] / (c->renormalize ? sum : 1.0) * scale;
    free(s);
    free(items);
}

static uint64_t rng_state;
static float rng_uniform(void) { /* [-1, 1) */
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(rng_state >> 40) / (double)(1ULL << 24) * 2.0 - 1.0);
}

/* Routes `tokens` random rows and compares every id and weight with ref_route. */
static void cross_check(const moeq_route_config *c, int64_t tokens, float logit_scale) {
    const size_t n = (size_t)c->num_experts, k = (size_t)c->top_k;
    float *x = malloc(sizeof(float) * n * (size_t)tokens);
    int32_t *ids = malloc(sizeof(int32_t) * k * (size_t)tokens);
    float *w = malloc(sizeof(float) * k * (size_t)tokens);
    int32_t *rids = malloc(sizeof(int32_t) * k);
    double *rw = malloc(sizeof(double) * k);
    ck_assert(x && ids && w && rids && rw);
    for (size_t i = 0; i < n * (size_t)tokens; i++) x[i] = logit_scale * rng_uniform();
    moeq_error err;
    moeq_error_clear(&err);
    ck_assert_ok(moeq_route(c, x, tokens, ids, w, &err), &err);
    for (int64_t t = 0; t < tokens; t++) {
        ref_route(c, x + (size_t)t * n, rids, rw);
        for (size_t i = 0; i < k; i++) {
            ck_assert_msg(ids[(size_t)t * k + i] == rids[i], "token %lld slot %zu: id %d, want %d",
                          (long long)t, i, (int)ids[(size_t)t * k + i], (int)rids[i]);
            ck_assert_msg(fabs((double)w[(size_t)t * k + i] - rw[i]) <= TOL_REFERENCE,
                          "token %lld slot %zu: weight %.9g, want %.9g", (long long)t, i,
                          (double)w[(size_t)t * k + i], rw[i]);
        }
    }
    free(x);
    free(ids);
    free(w);
    free(rids);
    free(rw);
}

START_TEST(test_random_deepseek_v3_shape) {
    /* DeepSeek-V3: 256 experts, top 8, 8 groups of which 4 are kept, sigmoid,
     * correction bias, renormalized, scaled by 2.5. */
    rng_state = 42;
    float bias[256];
    for (int i = 0; i < 256; i++) bias[i] = 0.1f * rng_uniform();
    moeq_route_config c = plain(256, 8, MOEQ_SCORING_SIGMOID, 1);
    c.num_expert_group = 8;
    c.topk_group = 4;
    c.correction_bias = bias;
    c.routed_scaling_factor = 2.5f;
    cross_check(&c, 200, 4.0f);

    /* Does the group restriction matter on this data?  It must for the test
     * to mean anything: compare with ungrouped routing on one row. */
    float x[256];
    for (int i = 0; i < 256; i++) x[i] = 4.0f * rng_uniform();
    int32_t g_ids[8], u_ids[8];
    float g_w[8], u_w[8];
    ck_assert_ok(moeq_route(&c, x, 1, g_ids, g_w, NULL), NULL);
    moeq_route_config u = c;
    u.num_expert_group = 0;
    u.topk_group = 0;
    ck_assert_ok(moeq_route(&u, x, 1, u_ids, u_w, NULL), NULL);
    ck_assert_msg(memcmp(g_ids, u_ids, sizeof g_ids) != 0, "grouping changed nothing");
}
END_TEST

START_TEST(test_random_other_shapes) {
    rng_state = 7;
    /* Softmax, grouped without bias (DeepSeek-V2: 160 experts, 8 groups, 3 kept, top 6). */
    moeq_route_config c = plain(160, 6, MOEQ_SCORING_SOFTMAX, 0);
    c.num_expert_group = 8;
    c.topk_group = 3;
    cross_check(&c, 100, 3.0f);
    /* Softmax, ungrouped (Qwen3-MoE: 128 experts, top 8, renormalized). */
    c = plain(128, 8, MOEQ_SCORING_SOFTMAX, 1);
    cross_check(&c, 100, 3.0f);
    /* Sigmoid with bias, one group (Kimi K2: 384 experts, top 8). */
    float bias[384];
    for (int i = 0; i < 384; i++) bias[i] = 0.05f * rng_uniform();
    c = plain(384, 8, MOEQ_SCORING_SIGMOID, 1);
    c.num_expert_group = 1;
    c.topk_group = 1;
    c.correction_bias = bias;
    c.routed_scaling_factor = 2.827f;
    cross_check(&c, 100, 3.0f);
    /* Exact ties everywhere. */
    c = plain(64, 16, MOEQ_SCORING_SOFTMAX, 1);
    cross_check(&c, 50, 0.0f); /* all logits 0: every score ties */
    /* Top-k of all experts, grouped. */
    c = plain(32, 32, MOEQ_SCORING_SIGMOID, 1);
    c.num_expert_group = 4;
    c.topk_group = 4;
    cross_check(&c, 20, 5.0f);
}
END_TEST

START_TEST(test_scratch_allocation) {
    /* Up to 4096 experts and 64 groups: nothing is allocated. */
    rng_state = 99;
    moeq_route_config c = plain(4096, 8, MOEQ_SCORING_SIGMOID, 1);
    c.num_expert_group = 64;
    c.topk_group = 8;
    moeq__test_fail_alloc_after(0);
    cross_check(&c, 3, 2.0f);
    moeq__test_fail_alloc_after(-1);

    /* More experts, or more groups: one block per call, and NOMEM if refused. */
    c = plain(5000, 8, MOEQ_SCORING_SOFTMAX, 1);
    cross_check(&c, 5, 2.0f);
    float bias[256];
    for (int i = 0; i < 256; i++) bias[i] = 0.1f * rng_uniform();
    moeq_route_config g = plain(256, 8, MOEQ_SCORING_SIGMOID, 1);
    g.num_expert_group = 128;
    g.topk_group = 100;
    g.correction_bias = bias;
    cross_check(&g, 5, 2.0f);

    float x[256] = {0};
    int32_t ids[8];
    float w[8];
    moeq_error err;
    moeq_error_clear(&err);
    moeq__test_fail_alloc_after(0);
    moeq_status st = moeq_route(&g, x, 1, ids, w, &err);
    moeq__test_fail_alloc_after(-1);
    ck_assert_status(st, MOEQ_STATUS_NOMEM, &err);
    ck_assert_msg(strstr(err.message, "moeq_route: out of memory") &&
                      strstr(err.message, "num_expert_group 128"),
                  "%s", err.message);
}
END_TEST

static Suite *route_suite(void) {
    Suite *s = suite_create("route");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_softmax_top2);
    tcase_add_test(tc, test_sigmoid_top2);
    tcase_add_test(tc, test_ties_go_to_lower_ids);
    tcase_add_test(tc, test_bias_chooses_but_does_not_weigh);
    tcase_add_test(tc, test_grouped_without_bias);
    tcase_add_test(tc, test_grouped_with_bias);
    tcase_add_test(tc, test_routed_scaling_factor);
    tcase_add_test(tc, test_top_k_equals_experts);
    tcase_add_test(tc, test_single_expert);
    tcase_add_test(tc, test_large_logits);
    tcase_add_test(tc, test_several_tokens_and_empty_batch);
    tcase_add_test(tc, test_bad_logits_stop_at_the_token);
    tcase_add_loop_test(tc, test_invalid_arguments, 0, (int)MOEQ__ARRAY_LEN(bad_cases));
    tcase_add_test(tc, test_random_deepseek_v3_shape);
    tcase_add_test(tc, test_random_other_shapes);
    tcase_add_test(tc, test_scratch_allocation);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(route_suite)

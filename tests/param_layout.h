/*
 * param_layout.h - how one shard of a MoE parameter looks in a checkpoint,
 * from the manifest's description of it (moeq_param): the rule the loader
 * applies, written out for the tests and the loader fuzz target (which do
 * not link Check, so nothing here asserts).
 */
#ifndef MOEQ_TESTS_PARAM_LAYOUT_H
#define MOEQ_TESTS_PARAM_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "moeq/moeq.h"

/* w13_* parameters hold gate then up; w2_* hold down. */
static inline bool moeq_test_is_w13(const moeq_param *p) {
    return strncmp(p->name, "w13_", 4) == 0;
}

/* The shape of one expert's shard of p as a checkpoint stores it: the
 * parameter's shape without the expert dimension, halved along the shard
 * dimension for gate/up, un-transposed.  Returns the rank (0 for per-shard
 * scalars).  npu_w4a8_int8's weights are an exception the callers handle. */
/* w13 holds `shards` projections: 2 (gate, up), 1 (up of non-gated experts). */
static inline int32_t moeq_test_shard_shape_of(const moeq_param *p, int shards, int64_t *shape) {
    if (p->layout == MOEQ_LAYOUT_PER_SHARD) return 0;
    int32_t k = p->ndim - 1;
    int64_t d[3] = {0, 0, 0};
    for (int32_t i = 0; i < k && i < 3; i++) d[i] = p->shape[i + 1];
    if (p->layout == MOEQ_LAYOUT_SHARDED && moeq_test_is_w13(p) && k >= 1) {
        d[p->is_transposed && k == 2 ? 1 : 0] /= shards;
    }
    if (p->is_transposed && k == 2) {
        int64_t t = d[0];
        d[0] = d[1];
        d[1] = t;
    }
    for (int32_t i = 0; i < k; i++) shape[i] = d[i];
    return k;
}

static inline int32_t moeq_test_shard_shape(const moeq_param *p, int64_t *shape) {
    return moeq_test_shard_shape_of(p, 2, shape);
}

#endif

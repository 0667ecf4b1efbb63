/*
 * grid.c - the scale grid of a weight: which scale covers element (r, c)
 * for each strategy (spec §1.6).  Shared by dequantization, the quantizers
 * and src/dequant.c's shape checks, so all three agree on ceil sizes.
 */
#include "kernels.h"

static size_t ceil_div(size_t a, size_t b) {
    return a / b + (a % b != 0);
}

static size_t at_least_1(size_t v) {
    return v ? v : 1;
}

bool moeq__scale_grid(int32_t strategy, size_t rows, size_t cols, size_t group_size,
                      size_t block_rows, size_t block_cols, moeq__grid *out) {
    switch (strategy) {
        case MOEQ_STRATEGY_TENSOR:
            *out = (moeq__grid){1, 1, at_least_1(rows), at_least_1(cols)};
            return true;
        case MOEQ_STRATEGY_CHANNEL:
            *out = (moeq__grid){rows, 1, 1, at_least_1(cols)};
            return true;
        case MOEQ_STRATEGY_GROUP:
        case MOEQ_STRATEGY_TENSOR_GROUP:
            if (group_size == 0) return false;
            *out = (moeq__grid){rows, ceil_div(cols, group_size), 1, group_size};
            return true;
        case MOEQ_STRATEGY_BLOCK:
            if (block_rows == 0 || block_cols == 0) return false;
            *out = (moeq__grid){ceil_div(rows, block_rows), ceil_div(cols, block_cols),
                                block_rows, block_cols};
            return true;
        default:
            return false;
    }
}

/*
 * plan.h - the rows of a plan and how they are written (aligned table or
 * JSON objects), shared by plan.c (`moeq plan`) and inspect.c
 * (`moeq inspect`, which prints the same table for a checkpoint's modules).
 * Never installed.
 */
#ifndef MOEQ_PLAN_H
#define MOEQ_PLAN_H

#include "report/engine.h"
#include "resolve/resolve.h"

/* What a row stands for: the KIND column ("linear", "moe", "other"). */
typedef enum moeq__row_kind {
    MOEQ__ROW_LINEAR = 0, /* one layer resolved by its name */
    MOEQ__ROW_MOE = 1,    /* a fused-experts prefix: every expert projection resolved */
    MOEQ__ROW_OTHER = 2   /* a module that is not a linear layer (norms, embeddings, ...) */
} moeq__row_kind;

/* One row.  The strings belong to whoever fills the row; the writers below
 * only read them. */
typedef struct moeq__plan_row {
    const char *name; /* not NUL-terminated */
    size_t name_len;
    int32_t kind;         /* moeq__row_kind */
    uint32_t num_experts; /* MOE rows */
    char *proj[3];        /* MOE rows: gate, up, down names (NULL: the defaults) */
    moeq_resolution res;
    int32_t scheme; /* MOE rows: the selected scheme, -1 when none */
    char *error;    /* NULL when fine */
    char *warning;  /* NULL when none */
    /* What an engine would do: .engine NULL when none was asked, .row NULL
     * for rows it does not judge (linear layers). */
    moeq__engine_verdict engine;
} moeq__plan_row;

/* "quantized", "ignored", "unmatched" or "error". */
const char *moeq__plan_status_word(const moeq__plan_row *row);

/* The warning for a resolution whose two precedence orders pick different
 * groups (NULL when they agree, or out of memory: check res->flags). */
char *moeq__plan_order_warning(const moeq_config *cfg, const moeq_resolution *r,
                               int32_t precedence);

/* QuantizationArgs as compressed-tensors writes them (keys sorted); "null" for NULL. */
void moeq__plan_json_args(moeq__sb *sb, const moeq_quant_args *a);

/* State for writing rows as JSON: the args of every group, serialised once,
 * and a cache of the row tails many rows share (tens of thousands of expert
 * projections resolve a handful of ways).  One per thread. */
typedef struct moeq__plan_json {
    const moeq_config *cfg;
    char *const *weights_json; /* [n_groups], shared between threads */
    char *const *input_json;
    /* NULL: rows carry no engine keys. */
    const moeq__engine *engine;
    struct {
        int32_t kind, status, group, ignore, scheme;
        uint32_t experts;
        const char *target;
        char *text;
        size_t len;
    } cache[32];
    uint32_t n_cache;
    uint32_t last; /* the entry the previous row used (neighbours mostly share one) */
} moeq__plan_json;

/* Serialises every group's weight and input args (free with
 * moeq__plan_args_json_free).  @return OK, NOMEM. */
moeq_status moeq__plan_args_json(const moeq_config *cfg, char ***weights, char ***inputs);
void moeq__plan_args_json_free(const moeq_config *cfg, char **weights, char **inputs);

/* Appends "\n{...}" (first) or ",\n{...}": the row as one JSON object with
 * keys layer, kind, status, group, target, format, scheme, weights,
 * input_activations, warnings, error, and for MoE rows experts (plus the
 * engine_* keys of moeq__engine_json when pj->engine is set).  Failures
 * are recorded in sb. */
void moeq__plan_json_row(moeq__plan_json *pj, const moeq__plan_row *row, bool first, moeq__sb *sb);
void moeq__plan_json_free(moeq__plan_json *pj);

/* Appends the aligned table: a header line, one line per row, and the
 * "ignored by", "warning:" and "error:" lines under the rows they concern. */
void moeq__plan_table(const moeq__plan_row *rows, uint32_t n, moeq__sb *sb);

#endif /* MOEQ_PLAN_H */

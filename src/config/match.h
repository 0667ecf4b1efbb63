/*
 * match.h - target and ignore matching (match.c, the only file that includes
 * pcre2.h).  The matcher is built once when a config is parsed and never
 * changes afterwards, so any number of threads may use it; each thread brings
 * its own moeq__match_scratch.
 */
#ifndef MOEQ_MATCH_H
#define MOEQ_MATCH_H

#include "config/config.h"

/* How a target string matches. */
typedef enum moeq__target_kind {
    MOEQ__TARGET_EXACT = 0, /* full dotted module name (also tried as a class) */
    MOEQ__TARGET_REGEX = 1  /* "re:<python regex>", applied like Python re.match */
} moeq__target_kind;

/* Bit i set = the target/ignore entry matches module kind i (moeq_module_kind)
 * as a class name ("Linear", "FusedMoE", ...). */
typedef uint32_t moeq__kind_mask;

/* Per-thread (or per-call) matching state.  Create, use for any number of
 * matches on one matcher, destroy. */
typedef struct moeq__match_scratch moeq__match_scratch;

moeq_status moeq__match_scratch_create(const moeq__matcher *m, moeq__match_scratch **out,
                                       moeq_error *err);
void moeq__match_scratch_destroy(moeq__match_scratch *s);

/* Index of the first ignore entry (config order) that matches `name` by exact
 * name, by regex, or as a class of `kind`; -1 when none does.
 * @return OK, LIMIT (a regex hit the match limit: the message names it). */
moeq_status moeq__match_ignore(const moeq__matcher *m, moeq__match_scratch *s, const char *name,
                               size_t len, int32_t kind, int32_t *out_index, moeq_error *err);

/* The winning group for `name` under both precedence orders:
 *   ct:     exact name > regex (lexicographic by target text) > class target
 *   engine: first target in config order matching by name > first class target
 * Each out value is the effective-target index (moeq__matcher_target) or -1.
 * @return OK, LIMIT. */
moeq_status moeq__match_targets(const moeq__matcher *m, moeq__match_scratch *s, const char *name,
                                size_t len, int32_t kind, int32_t *out_ct, int32_t *out_engine,
                                moeq_error *err);

/* The effective target map: distinct target strings in first-insertion order;
 * a target repeated in a later group belongs to that later group (the rule of
 * compressed-tensors, vLLM and SGLang). */
typedef struct moeq__target_info {
    const char *text;            /* as written, "re:" included */
    uint32_t group;              /* index into cfg->groups */
    uint32_t position;           /* insertion position (config order) */
    int32_t kind;                /* moeq__target_kind */
    moeq__kind_mask class_kinds; /* module kinds it matches as a class name */
} moeq__target_info;

uint32_t moeq__matcher_target_count(const moeq__matcher *m);
const moeq__target_info *moeq__matcher_target(const moeq__matcher *m, uint32_t i);

#endif /* MOEQ_MATCH_H */

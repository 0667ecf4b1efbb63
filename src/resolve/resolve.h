/*
 * resolve.h - internal entry points of resolve.c, for callers that resolve
 * many names with one match scratch (plan.c).
 */
#ifndef MOEQ_RESOLVE_H
#define MOEQ_RESOLVE_H

#include "config/match.h"

/* Checks caller-built resolve options (NULL is fine): precedence, fused rules. */
moeq_status moeq__resolve_options_check(const moeq_resolve_options *opts, moeq_error *err);

/* Resolves `name` (len bytes), handling fused names.  Caller validated args. */
moeq_status moeq__resolve_name(const moeq_config *cfg, moeq__match_scratch *s, const char *name,
                               size_t len, int32_t kind, const moeq_resolve_options *opts,
                               moeq_resolution *out, moeq_error *err);

/* Resolves one plain name (no fused handling). */
moeq_status moeq__resolve_one(const moeq_config *cfg, moeq__match_scratch *s, const char *name,
                              size_t len, int32_t kind, int32_t precedence, moeq_resolution *out,
                              moeq_error *err);

/* Resolves a MoE layer: every projection of every expert must agree. */
moeq_status moeq__resolve_moe(const moeq_config *cfg, moeq__match_scratch *s, const char *prefix,
                              uint32_t num_experts, const char *const *proj_names,
                              const moeq_resolve_options *opts, moeq_resolution *out,
                              moeq_error *err);

/* moeq_resolve's default fused names (qkv_proj from q/k/v_proj,
 * gate_up_proj from gate/up_proj): *n rules, static storage. */
const moeq_fused_name *moeq__resolve_default_fused(uint32_t *n);

/* Field-wise equality of two args (actorder aliases compare equal). */
bool moeq__args_equal(const moeq_quant_args *a, const moeq_quant_args *b);

/* Two resolutions give the same scheme inputs (both unquantized, or equal
 * weights, input args and format). */
bool moeq__resolutions_agree(const moeq_resolution *a, const moeq_resolution *b);

#endif /* MOEQ_RESOLVE_H */

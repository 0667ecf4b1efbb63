/*
 * engine_api.c - the public face of the engine dispatch models (engine.h):
 * the list of modelled versions and moeq_engine_judge for one MoE layer.
 */
#include "report/engine.h"

#include <string.h>

uint32_t moeq_engine_count(void) {
    return moeq__engine_table_count();
}

const char *moeq_engine_name(uint32_t i) {
    const moeq__engine_table *t = moeq__engine_table_at(i);
    return t ? t->name : NULL;
}

const char *moeq_engine_summary(uint32_t i) {
    const moeq__engine_table *t = moeq__engine_table_at(i);
    return t ? t->read : NULL;
}

static void copy(char *dst, size_t n, const char *src, size_t len) {
    if (len >= n) len = n - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

moeq_status moeq_engine_judge(const moeq_config *cfg, const char *engine, const char *prefix,
                              uint32_t num_experts, const char *const *proj_names,
                              const moeq_resolve_options *ropts, const moeq_select_options *sopts,
                              moeq_engine_verdict *out, moeq_error *err) {
    if (!cfg || !engine || !prefix || !out) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL",
                           !cfg      ? "config"
                           : !engine ? "engine"
                           : !prefix ? "prefix"
                                     : "out");
    }
    memset(out, 0, sizeof *out);
    out->group_index = out->args_group_index = out->moeq_scheme = -1;
    if (num_experts == 0) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "num_experts is 0; a MoE layer has 1 or more");
    }
    if (!cfg->matcher) return moeq__error(err, MOEQ_STATUS_STATE, "config has no matcher");
    moeq__engine *e = NULL;
    moeq_status st = moeq__engine_create(engine, cfg, &e, err);
    if (st != MOEQ_STATUS_OK) return st;
    /* moeq's side: a failure there is part of the answer, not an error. */
    moeq_resolution res;
    moeq_selection sel;
    moeq_error merr;
    bool mfailed = true;
    st = moeq_resolve_moe(cfg, prefix, num_experts, proj_names, ropts, &res, &merr);
    if (st == MOEQ_STATUS_OK) {
        st = moeq_select(&res, prefix, sopts, &sel, &merr);
        if (st == MOEQ_STATUS_OK) {
            mfailed = false;
            out->moeq_scheme = sel.scheme;
        }
    }
    if (st == MOEQ_STATUS_NOMEM) {
        moeq__engine_destroy(e);
        if (err) *err = merr;
        return st;
    }
    moeq__match_scratch *s = NULL;
    st = moeq__match_scratch_create(cfg->matcher, &s, err);
    moeq__engine_verdict v;
    if (st == MOEQ_STATUS_OK) {
        st = moeq__engine_judge(e, s, prefix, strlen(prefix), mfailed ? NULL : &res,
                                out->moeq_scheme, mfailed, &v, err);
    }
    if (st == MOEQ_STATUS_OK) {
        const char *label = moeq__engine_label(e);
        copy(out->engine, sizeof out->engine, label, strlen(label));
        copy(out->branch, sizeof out->branch, v.row->branch, strlen(v.row->branch));
        const char *cls = moeq__engine_verdict_scheme(&v);
        if (cls) {
            copy(out->scheme, sizeof out->scheme, cls, strlen(cls));
        } else {
            moeq__sb sb;
            moeq__sb_init(&sb);
            moeq__engine_verdict_error(&v, prefix, strlen(prefix), &sb);
            if (sb.failed) {
                st = moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory");
            } else {
                copy(out->error, sizeof out->error, sb.data ? sb.data : "", sb.len);
            }
            moeq__sb_free(&sb);
        }
        out->group_index = v.group;
        out->args_group_index = v.args_group;
        out->differs = v.differs;
    }
    moeq__match_scratch_destroy(s);
    moeq__engine_destroy(e);
    return st;
}

/* match.c - placeholder until the PCRE2 matcher lands: compiles nothing. */
#include "config.h"

moeq_status moeq__matcher_create(moeq_config *cfg, moeq_error *err) {
    (void)err;
    cfg->matcher = NULL;
    return MOEQ_STATUS_OK;
}

void moeq__matcher_destroy(moeq__matcher *m) {
    (void)m;
}

/*
 * modules.c - a checkpoint module's kind from its name and tensors
 * (modules.h), shared by `moeq inspect` and moeq_model_load.
 */
#include "checkpoint/modules.h"

#include "checkpoint/dequant.h"

#include <string.h>

const char *moeq__last_component(const char *name, size_t n, size_t *len) {
    size_t s = n;
    while (s > 0 && name[s - 1] != '.') s--;
    *len = n - s;
    return name + s;
}

bool moeq__name_contains(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++) {
        if (memcmp(s + i, needle, k) == 0) return true;
    }
    return false;
}

void moeq__module_note(moeq__module_traits *tr, const char *param, int32_t ndim) {
    const int32_t p = moeq__ct_param_from_name(param, strlen(param));
    if (p > MOEQ__CT_WEIGHT && p < MOEQ__CT_WEIGHT_PARAM_COUNT) tr->payload = true;
    if (strcmp(param, "weight") == 0 && ndim == 2) tr->weight2d = true;
    if (strcmp(param, "bias") == 0) tr->bias = true;
}

/* "P.<e>.<proj>" with P ending in "experts": sets *prefix_len and *id. */
static bool expert_name(const char *name, size_t len, size_t *prefix_len, uint32_t *id) {
    size_t plen;
    moeq__last_component(name, len, &plen);
    if (plen == 0 || plen >= len) return false;
    size_t id_end = len - plen - 1; /* the dot before <proj> */
    size_t s = id_end;
    while (s > 0 && name[s - 1] != '.') s--;
    if (s == 0 || s == id_end || id_end - s > 7) return false;
    if (name[s] == '0' && id_end - s > 1) return false; /* canonical ids only */
    uint32_t v = 0;
    for (size_t i = s; i < id_end; i++) {
        if (name[i] < '0' || name[i] > '9') return false;
        v = v * 10u + (uint32_t)(name[i] - '0');
    }
    if (v > MOEQ__MAX_EXPERT_ID) return false;
    size_t pl = s - 1; /* the prefix ends before the dot */
    size_t clen;
    const char *comp = moeq__last_component(name, pl, &clen);
    if (clen < 7 || memcmp(comp + clen - 7, "experts", 7) != 0) return false;
    *prefix_len = pl;
    *id = v;
    return true;
}

int32_t moeq__module_kind(const char *name, size_t len, const moeq__module_traits *tr,
                          size_t *prefix_len, uint32_t *id) {
    size_t pl = 0;
    uint32_t e = 0;
    if (expert_name(name, len, &pl, &e)) {
        if (prefix_len) *prefix_len = pl;
        if (id) *id = e;
        return MOEQ_MODULE_EXPERT;
    }
    size_t clen;
    const char *comp = moeq__last_component(name, len, &clen);
    if (moeq__name_contains(comp, clen, "embed")) return MOEQ_MODULE_OTHER;
    return tr->payload || tr->weight2d ? MOEQ_MODULE_LINEAR : MOEQ_MODULE_OTHER;
}

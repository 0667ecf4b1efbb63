/*
 * modules.h - what kind of module a checkpoint's tensors make, told from the
 * module's name and its tensors: the one rule `moeq inspect` (report/) and
 * moeq_model_load (load/) both go by.  Never installed.
 */
#ifndef MOEQ_MODULES_H
#define MOEQ_MODULES_H

#include "common/internal.h"

/* The highest expert id a name may carry ("experts.<id>."). */
#define MOEQ__MAX_EXPERT_ID 1000000u

/* What a module's tensors say about it, gathered with moeq__module_note. */
typedef struct moeq__module_traits {
    bool payload;  /* stores a weight_* quantization parameter */
    bool bias;     /* stores a bias */
    bool weight2d; /* stores a 2-D "weight" */
} moeq__module_traits;

/* Adds one tensor of the module: its parameter name (what follows the
 * module's name and the dot) and its number of dimensions. */
void moeq__module_note(moeq__module_traits *tr, const char *param, int32_t ndim);

/* The kind (moeq_module_kind) of module name[0..len) holding tensors tr:
 *  - MOEQ_MODULE_EXPERT: "P.<e>.<proj>" where P's last component ends in
 *    "experts" and e is a decimal id (no leading zeros) up to
 *    MOEQ__MAX_EXPERT_ID; *prefix_len gets P's length and *id e;
 *  - MOEQ_MODULE_OTHER: its last component contains "embed", or it stores
 *    neither a weight_* payload nor a 2-D weight (norms, scalars);
 *  - MOEQ_MODULE_LINEAR: anything else.
 * prefix_len and id may be NULL. */
int32_t moeq__module_kind(const char *name, size_t len, const moeq__module_traits *tr,
                          size_t *prefix_len, uint32_t *id);

/* The last dotted component of name[0..n) and its length. */
const char *moeq__last_component(const char *name, size_t n, size_t *len);

/* Whether s[0..n) contains needle. */
bool moeq__name_contains(const char *s, size_t n, const char *needle);

#endif /* MOEQ_MODULES_H */

/*
 * inspect.h - the model of one `moeq inspect` run, shared by inspect.c (which
 * builds it: modules from tensor names, plan rows, the accounting of every
 * tensor) and inspect_write.c (which writes it out as text or JSON).  Only
 * those two files include it.  Never installed.
 */
#ifndef MOEQ_INSPECT_H
#define MOEQ_INSPECT_H

#include "report/plan.h"

#include <string.h>

#define MAX_PROJ      8 /* distinct projection names remembered per MoE layer */

/* A name that is not NUL-terminated where it ends. */
typedef struct strref {
    const char *p;
    uint32_t n;
} strref;

typedef struct imod {
    const char *name; /* NUL-terminated, in the arena */
    uint32_t len;
    uint32_t first, count; /* its tensors: members[first .. first + count) */
    int32_t kind;          /* moeq_module_kind */
    bool payload;          /* stores a weight_* quantization parameter */
    bool bias;             /* stores a bias */
    bool attn_named;       /* its last name component contains "attn" */
    int32_t layer;         /* MoE layer, -1 for none */
    uint32_t expert;       /* expert id (layer >= 0) */
    int32_t proj;          /* slot in the layer's projection list, -1 when it overflowed */
    int32_t row;           /* plan row (not for experts), -1 */
} imod;

typedef struct ilayer {
    char *prefix; /* NUL-terminated, owned */
    uint32_t len;
    uint32_t *ids; /* expert ids seen (sorted and made unique later) */
    uint32_t n_ids, cap_ids;
    uint32_t max_id;
    const char *proj[MAX_PROJ]; /* distinct projection names (point into the arena) */
    uint32_t proj_len[MAX_PROJ];
    uint32_t n_proj;
    int32_t triple[3]; /* gate, up, down slots; -1 when not recognised */
    bool res_ok;       /* res is the common resolution of every expert projection */
    bool sparse;       /* ids run far past the experts present: absent ones not enumerated */
    moeq_resolution res;
} ilayer;

/* A line of the unconsumed, missing or error list. */
typedef struct issue {
    char *name; /* tensor (unconsumed, missing) or module (errors) */
    char *text;
    int32_t status; /* errors only */
} issue;

/* Each list keeps at most MAX_LISTED entries and counts the rest: a
 * 200-byte checkpoint naming experts 0 and 999999 has millions of missing
 * tensors, and listing them all took gigabytes. */
#define MAX_LISTED 10000u

typedef struct issue_list {
    issue *v;
    uint32_t n, cap;
    uint64_t unlisted; /* issues found after the list was full */
} issue_list;

typedef struct inspect {
    const moeq_config *cfg;
    const moeq_checkpoint *ckpt;
    const moeq_inspect_options *opts;
    const moeq_resolve_options *ro;
    const moeq_select_options *so;
    moeq_error *err;
    moeq__match_scratch *scratch;
    moeq__engine *engine; /* opts->engine, prepared for cfg; NULL when not asked */
    uint32_t flags; /* moeq_config_dequant_flags */
    const moeq_quant_args *kv;

    uint32_t n_tensors;
    uint32_t *mod_of;  /* [n_tensors] */
    uint32_t *members; /* [n_tensors] tensor indices grouped by module */

    imod *mods;
    uint32_t n_mods;
    char *arena;
    uint32_t *mod_slots; /* hash: module index + 1, 0 = empty */
    uint32_t mod_mask;

    ilayer *layers;
    uint32_t n_layers, cap_layers;
    /* Attention modules (CT: they hold k_proj, v_proj, qkv_proj or kv_b_proj),
     * which need not have tensors of their own: names point into the arena. */
    strref *attn;
    uint32_t n_attn;
    uint32_t *layer_slots;
    uint32_t layer_mask;

    moeq__plan_row *rows;
    uint32_t n_rows;

    issue_list unconsumed, missing, errors;
    moeq_inspect_summary sum;
} inspect;

static inline moeq_status nomem(inspect *in) {
    return moeq__error(in->err, MOEQ_STATUS_NOMEM, "out of memory while inspecting the checkpoint");
}

/* Length of the module part of a tensor name (0 when it has no dot). */
static inline size_t module_len(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot ? (size_t)(dot - name) : 0;
}

/* inspect_write.c: writes the report (text or JSON, as in->opts says) to `write`. */
moeq_status moeq__inspect_emit(inspect *in, moeq_write_fn write, void *user);

#endif /* MOEQ_INSPECT_H */

/*
 * engine.c - evaluates the engine dispatch tables (engine.h): reads a config
 * the way one engine version does, probes a MoE layer's expert 0 as the
 * engines do, and picks the first table row whose conditions hold.
 */
#include "report/engine.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const moeq__engine_table *const k_tables[] = {
    &moeq__engine_sglang_d315eb725,
    &moeq__engine_sglang_eba6af385d,
    &moeq__engine_vllm_003a19308,
};

uint32_t moeq__engine_table_count(void) {
    return (uint32_t)MOEQ__ARRAY_LEN(k_tables);
}

const moeq__engine_table *moeq__engine_table_at(uint32_t i) {
    return i < MOEQ__ARRAY_LEN(k_tables) ? k_tables[i] : NULL;
}

static const char *const k_platform_names[MOEQ__EP_COUNT] = {"sm90", "sm80", "sm100",
                                                             "rocm", "npu",  "cpu"};
static const char *const k_backend_names[MOEQ__EB_COUNT] = {"auto", "triton", "marlin",
                                                            "flashinfer_trtllm", "cutlass"};

/* Outcomes every engine shares (the probing code, not the dispatch). */
static const moeq__engine_row k_unquantized = {
    .branch = "ignored: every probe ignored or unmatched by a target map that is empty",
    .effect = MOEQ__EE_UNQUANTIZED,
    .cls = "UnquantizedFusedMoEMethod",
    .moeq_scheme = MOEQ_SCHEME_UNQUANTIZED,
};
static const moeq__engine_row k_no_target = {
    .branch = "find_matched_target",
    .effect = MOEQ__EE_RAISE,
    .exception = "ValueError",
    .message = "Unable to find matching target for {name} in the compressed-tensors config.",
    .moeq_scheme = -1,
};
static const moeq__engine_row k_mixed = {
    .branch = "probe consistency",
    .effect = MOEQ__EE_RAISE,
    .exception = "ValueError",
    .message = "All MoE projections need to have same quantization scheme but found multiple",
    .moeq_scheme = -1,
};
static const moeq__engine_row k_no_weights = {
    .branch = "config: QuantizationArgs.model_validate(None)",
    .effect = MOEQ__EE_RAISE,
    .exception = "ValidationError",
    .message = "1 validation error for QuantizationArgs: Input should be a valid dictionary or "
               "instance of QuantizationArgs",
    .moeq_scheme = -1,
};
static const moeq__engine_row k_input_assert = {
    .branch = "config: activation format without input_activations, weights not float",
    .effect = MOEQ__EE_RAISE,
    .exception = "AssertionError",
    .message = "",
    .moeq_scheme = -1,
};
static const moeq__engine_row k_no_row = {
    .branch = "no row",
    .effect = MOEQ__EE_RAISE,
    .exception = "moeq",
    .message = "no row of the engine table matches (the table lacks its catch-all row)",
    .moeq_scheme = -1,
};

/* The engine's view of one group. */
typedef struct egroup {
    const moeq_quant_args *w; /* NULL: no weights */
    const moeq_quant_args *a; /* NULL: no input args kept */
    int32_t format;           /* the scheme dict's "format" (MOEQ_FORMAT_NONE: None) */
} egroup;

struct moeq__engine {
    const moeq__engine_table *t;
    const moeq_config *cfg;
    int32_t platform, backend;
    char label[128];
    egroup *groups;
    const moeq__engine_row *config_error; /* raised while reading the config, or NULL */
    int32_t config_error_group;
    int32_t linear_target;   /* index of the "Linear" target, -1 */
    int32_t fusedmoe_target; /* index of the "FusedMoE" target, -1 */
};

const char *moeq__engine_label(const moeq__engine *e) {
    return e ? e->label : "";
}

const char *moeq__engine_group_name(const moeq__engine *e, int32_t g) {
    return e && g >= 0 && (uint32_t)g < e->cfg->n_groups ? e->cfg->groups[g].name : NULL;
}

/* ---- parsing a spec ---------------------------------------------------------- */

static int32_t find_word(const char *const *names, int32_t n, const char *s, size_t len) {
    for (int32_t i = 0; i < n; i++) {
        if (strlen(names[i]) == len && strncmp(names[i], s, len) == 0) return i;
    }
    return -1;
}

static void list_tables(char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < MOEQ__ARRAY_LEN(k_tables) && used < n; i++) {
        int k = snprintf(buf + used, n - used, "%s%s@%s (%s)", i ? ", " : "", k_tables[i]->engine,
                         k_tables[i]->commit, k_tables[i]->date);
        if (k < 0) break;
        used += (size_t)k;
    }
}

static moeq_status parse_spec(const char *spec, moeq__engine *e, moeq_error *err) {
    char known[512];
    list_tables(known, sizeof known);
    const char *at = strchr(spec, '@');
    const char *colon = strchr(spec, ':');
    if (at && colon && colon < at) at = NULL;
    size_t name_len = at ? (size_t)(at - spec) : colon ? (size_t)(colon - spec) : strlen(spec);
    const char *commit = at ? at + 1 : NULL;
    size_t commit_len = commit ? (colon ? (size_t)(colon - commit) : strlen(commit)) : 0;
    const moeq__engine_table *hit = NULL;
    uint32_t hits = 0;
    for (uint32_t i = 0; i < MOEQ__ARRAY_LEN(k_tables); i++) {
        const moeq__engine_table *t = k_tables[i];
        if (strlen(t->engine) != name_len || strncmp(t->engine, spec, name_len) != 0) continue;
        if (!commit) { /* the newest modelled version: the first listed */
            if (!hit) hit = t;
            hits = 1;
            continue;
        }
        if (commit_len >= 4 && commit_len <= strlen(t->commit_full) &&
            strncmp(t->commit_full, commit, commit_len) == 0) {
            hit = t;
            hits++;
        }
    }
    if (!hit || hits != 1) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "engine \"%s\": %s; use ENGINE[@COMMIT][:PLATFORM[,BACKEND]] with one "
                           "of the modelled versions: %s (a commit prefix of 4+ characters is "
                           "enough; no commit = the newest)",
                           spec, hits > 1 ? "the commit prefix is ambiguous" : "not modelled",
                           known);
    }
    e->t = hit;
    e->platform = MOEQ__EP_SM90;
    e->backend = MOEQ__EB_AUTO;
    if (colon) {
        const char *p = colon + 1;
        const char *comma = strchr(p, ',');
        size_t plen = comma ? (size_t)(comma - p) : strlen(p);
        int32_t pl = find_word(k_platform_names, MOEQ__EP_COUNT, p, plen);
        if (pl < 0 && plen == 4 && strncmp(p, "cuda", 4) == 0) pl = MOEQ__EP_SM90;
        if (pl < 0 && plen == 9 && strncmp(p, "blackwell", 9) == 0) pl = MOEQ__EP_SM100;
        if (pl < 0 || !(hit->platforms & (1u << pl))) {
            char ok[128] = "";
            for (int32_t i = 0; i < MOEQ__EP_COUNT; i++) {
                if (!(hit->platforms & (1u << i))) continue;
                strncat(ok, ok[0] ? ", " : "", sizeof ok - strlen(ok) - 1);
                strncat(ok, k_platform_names[i], sizeof ok - strlen(ok) - 1);
            }
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "engine \"%s\": platform \"%.*s\" is not modelled for %s@%s; use "
                               "one of %s",
                               spec, (int)plen, p, hit->engine, hit->commit, ok);
        }
        e->platform = pl;
        if (comma) {
            const char *b = comma + 1;
            int32_t be = find_word(k_backend_names, MOEQ__EB_COUNT, b, strlen(b));
            if (be < 0 && strcmp(b, "trtllm") == 0) be = MOEQ__EB_FLASHINFER_TRTLLM;
            if (be < 0 || !(hit->backends & (1u << be))) {
                char ok[160] = "";
                for (int32_t i = 0; i < MOEQ__EB_COUNT; i++) {
                    if (!(hit->backends & (1u << i))) continue;
                    strncat(ok, ok[0] ? ", " : "", sizeof ok - strlen(ok) - 1);
                    strncat(ok, k_backend_names[i], sizeof ok - strlen(ok) - 1);
                }
                return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                                   "engine \"%s\": MoE backend \"%s\" is not modelled for %s@%s; "
                                   "use one of %s",
                                   spec, b, hit->engine, hit->commit, ok);
            }
            e->backend = be;
        }
    }
    snprintf(e->label, sizeof e->label, "%s@%s:%s,%s", hit->engine, hit->commit,
             k_platform_names[e->platform], k_backend_names[e->backend]);
    return MOEQ_STATUS_OK;
}

/* ---- the engine's view of the config ---------------------------------------- */

static bool format_in(uint32_t mask, int32_t format) {
    return format >= 0 && format < 32 && (mask >> format) & 1u;
}

static void read_groups(moeq__engine *e) {
    const moeq_config *cfg = e->cfg;
    const moeq__engine_table *t = e->t;
    e->config_error = NULL;
    e->config_error_group = -1;
    for (uint32_t g = 0; g < cfg->n_groups; g++) {
        const moeq__group *grp = &cfg->groups[g];
        egroup *eg = &e->groups[g];
        eg->w = grp->has_weights ? &grp->weights : NULL;
        eg->a = NULL;
        eg->format = t->group_format ? grp->format : MOEQ_FORMAT_NONE;
        if (t->fill_format && eg->format == MOEQ_FORMAT_NONE) eg->format = cfg->format;
        size_t n0 = grp->n_targets == 1 ? strlen(grp->targets[0]) : 0;
        if (t->skip_attention && n0 >= 9 && strcmp(grp->targets[0] + n0 - 9, "Attention") == 0) {
            /* vLLM drops such a group before reading it; its one target
             * (a class name) can match no expert projection. */
            continue;
        }
        if (!eg->w) {
            if (!e->config_error) {
                e->config_error = &k_no_weights;
                e->config_error_group = (int32_t)g;
            }
            continue;
        }
        int32_t fmt =
            t->group_format && grp->format != MOEQ_FORMAT_NONE ? grp->format : cfg->format;
        bool keep = format_in(t->act_formats, fmt) || (t->keep_declared && grp->has_input);
        if (!keep) continue;
        if (grp->has_input) {
            eg->a = &grp->input;
        } else if (!(eg->w->type == MOEQ_QTYPE_INT && t->int_weight_only) &&
                   eg->w->type != MOEQ_QTYPE_FLOAT && !e->config_error) {
            e->config_error = &k_input_assert;
            e->config_error_group = (int32_t)g;
        }
    }
    e->linear_target = e->fusedmoe_target = -1;
    uint32_t n = moeq__matcher_target_count(cfg->matcher);
    for (uint32_t i = 0; i < n; i++) {
        const moeq__target_info *ti = moeq__matcher_target(cfg->matcher, i);
        if (strcmp(ti->text, "Linear") == 0) e->linear_target = (int32_t)i;
        if (strcmp(ti->text, "FusedMoE") == 0) e->fusedmoe_target = (int32_t)i;
    }
}

moeq_status moeq__engine_create(const char *spec, const moeq_config *cfg, moeq__engine **out,
                                moeq_error *err) {
    *out = NULL;
    if (!spec || !cfg) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL", !spec ? "engine" : "config");
    }
    moeq__engine *e = moeq__calloc(1, sizeof *e);
    if (!e) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory");
    moeq_status st = parse_spec(spec, e, err);
    if (st != MOEQ_STATUS_OK) {
        moeq__free(e);
        return st;
    }
    e->cfg = cfg;
    e->groups = moeq__calloc(cfg->n_groups ? cfg->n_groups : 1, sizeof *e->groups);
    if (!e->groups) {
        moeq__free(e);
        return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory");
    }
    read_groups(e);
    *out = e;
    return MOEQ_STATUS_OK;
}

void moeq__engine_destroy(moeq__engine *e) {
    if (!e) return;
    moeq__free(e->groups);
    moeq__free(e);
}

/* ---- probing ----------------------------------------------------------------- */

static bool ends_with_dotted(const char *name, size_t len, const char *entry) {
    size_t k = strlen(entry);
    return k < len && name[len - k - 1] == '.' && memcmp(name + len - k, entry, k) == 0;
}

static bool contains_nocase(const char *hay, size_t len, const char *needle) {
    size_t k = strlen(needle);
    if (k > len) return false;
    for (size_t i = 0; i + k <= len; i++) {
        size_t j = 0;
        while (j < k && tolower((unsigned char)hay[i + j]) == tolower((unsigned char)needle[j]))
            j++;
        if (j == k) return true;
    }
    return false;
}

static moeq_status probe_ignored(const moeq__engine *e, moeq__match_scratch *s, const char *name,
                                 size_t len, bool *out, moeq_error *err) {
    const moeq_config *cfg = e->cfg;
    int32_t hit = -1;
    /* Exact and "re:" entries (kind -1: no class matching, engines do none). */
    moeq_status st = moeq__match_ignore(cfg->matcher, s, name, len, -1, &hit, err);
    if (st != MOEQ_STATUS_OK) return st;
    *out = hit >= 0;
    for (uint32_t i = 0; !*out && i < cfg->n_ignore; i++) {
        const char *entry = cfg->ignore[i];
        if (strncmp(entry, "re:", 3) == 0) continue;
        if (e->t->ignore_rule == MOEQ__EI_SUFFIX) *out = ends_with_dotted(name, len, entry);
        if (e->t->ignore_rule == MOEQ__EI_CONTAINS) *out = contains_nocase(name, len, entry);
    }
    return MOEQ_STATUS_OK;
}

/* The target a probe resolves to: by name in config order, then by the
 * FusedMoE class name (regex, or case-insensitive containment), then the
 * "Linear" alias the engines append.  -1 when nothing matches. */
static moeq_status probe_target(const moeq__engine *e, moeq__match_scratch *s, const char *name,
                                size_t len, int32_t *out, moeq_error *err) {
    const moeq__matcher *m = e->cfg->matcher;
    int32_t ct = -1, by_name = -1, by_class = -1;
    moeq_status st = moeq__match_targets(m, s, name, len, -1, &ct, &by_name, err);
    if (st != MOEQ_STATUS_OK) return st;
    if (by_name >= 0) {
        *out = by_name;
        return MOEQ_STATUS_OK;
    }
    static const char k_class[] = "FusedMoE";
    st = moeq__match_targets(m, s, k_class, sizeof k_class - 1, -1, &ct, &by_class, err);
    if (st != MOEQ_STATUS_OK) return st;
    uint32_t n = moeq__matcher_target_count(m);
    for (uint32_t i = 0; i < n; i++) {
        if (by_class >= 0 && (int32_t)i >= by_class) break;
        const moeq__target_info *ti = moeq__matcher_target(m, i);
        if (ti->kind == MOEQ__TARGET_EXACT &&
            contains_nocase(k_class, sizeof k_class - 1, ti->text)) {
            by_class = (int32_t)i;
        }
    }
    if (by_class < 0 && e->linear_target >= 0 && e->fusedmoe_target < 0)
        by_class = e->linear_target;
    *out = by_class;
    return MOEQ_STATUS_OK;
}

static bool dicts_equal(const moeq__engine *e, int32_t g1, int32_t g2) {
    if (g1 == g2) return true;
    if (g1 < 0 || g2 < 0) return false;
    const egroup *a = &e->groups[g1], *b = &e->groups[g2];
    return moeq__args_equal(a->w, b->w) && moeq__args_equal(a->a, b->a) && a->format == b->format;
}

/* ---- rows -------------------------------------------------------------------- */

static bool tri_ok(int32_t cond, bool value) {
    return cond == MOEQ__EC_ANY || (cond == MOEQ__EC_YES) == value;
}

static bool args_ok(const moeq__args_cond *c, const moeq_quant_args *a) {
    if (c->bits && (a->num_bits < 0 || a->num_bits > 31 || !((c->bits >> a->num_bits) & 1u))) {
        return false;
    }
    if (c->types && !((c->types >> a->type) & 1u)) return false;
    if (c->strategies && !((c->strategies >> a->strategy) & 1u)) return false;
    if (c->group_size && a->group_size != c->group_size) return false;
    if (c->group_multiple && (a->group_size <= 0 || a->group_size % c->group_multiple != 0)) {
        return false;
    }
    bool actorder_ok = c->actorder == MOEQ__EC_GROUPLIKE ? moeq_actorder_is_group(a->actorder) != 0
                       : c->actorder == MOEQ__EC_GROUP_WRITTEN
                           ? a->actorder == MOEQ_ACTORDER_GROUP
                           : tri_ok(c->actorder, a->actorder != MOEQ_ACTORDER_NONE);
    return actorder_ok && tri_ok(c->symmetric, a->symmetric != 0) &&
           tri_ok(c->dynamic, a->dynamic != MOEQ_DYNAMIC_FALSE);
}

static bool cond_empty(const moeq__args_cond *c) {
    return !c->bits && !c->types && !c->strategies && !c->symmetric && !c->dynamic &&
           !c->group_size && !c->group_multiple && !c->actorder;
}

static bool row_ok(const moeq__engine *e, const moeq__engine_row *r, int32_t stage,
                   const moeq_quant_args *w, const moeq_quant_args *a, int32_t dict_format) {
    if (r->stage != stage) return false;
    if (!w) return false;
    if (!args_ok(&r->w, w)) return false;
    if (!tri_ok(r->input, a != NULL)) return false;
    if (!cond_empty(&r->a) && (!a || !args_ok(&r->a, a))) return false;
    int32_t top = e->cfg->format;
    if (r->top_format && !format_in(r->top_format, top)) return false;
    if (r->not_top_format && format_in(r->not_top_format, top)) return false;
    if (r->dict_format && !format_in(r->dict_format, dict_format)) return false;
    if (r->platforms && !((r->platforms >> e->platform) & 1u)) return false;
    if (r->backends && !((r->backends >> e->backend) & 1u)) return false;
    return tri_ok(r->linear, e->linear_target >= 0);
}

static const moeq__engine_row *first_row(const moeq__engine *e, int32_t stage,
                                         const moeq_quant_args *w, const moeq_quant_args *a,
                                         int32_t dict_format) {
    for (uint32_t i = 0; i < e->t->n_rows; i++) {
        if (row_ok(e, &e->t->rows[i], stage, w, a, dict_format)) return &e->t->rows[i];
    }
    return NULL;
}

/* ---- judging ------------------------------------------------------------------ */

/* Schemes that compute the same thing in another weight layout compare
 * equal: SGLang's NPU classes against moeq's CPU choice and back. */
static int32_t scheme_family(int32_t scheme) {
    switch (scheme) {
        case MOEQ_SCHEME_NPU_W8A8_INT8: return MOEQ_SCHEME_W8A8_INT8;
        case MOEQ_SCHEME_NPU_W4A8_INT8: return MOEQ_SCHEME_W4A8_INT8;
        case MOEQ_SCHEME_NPU_W4A16_INT4: return MOEQ_SCHEME_WNA16;
        default: return scheme;
    }
}

/* The group's args, as moeq reads them, are those of the moeq resolution. */
static bool same_args(const moeq_config *cfg, int32_t g, const moeq_resolution *r) {
    if (g == r->group_index) return true;
    if (g < 0 || r->group_index < 0) return false;
    const moeq__group *grp = &cfg->groups[g];
    return moeq__group_format(cfg, grp) == r->format &&
           moeq__args_equal(grp->has_weights ? &grp->weights : NULL, r->weights) &&
           moeq__args_equal(grp->has_input ? &grp->input : NULL, r->input_activations);
}

static void set_differs(const moeq__engine *e, moeq__engine_verdict *v, const moeq_resolution *mres,
                        int32_t mscheme, bool mfailed) {
    const moeq__engine_row *r = v->row;
    v->differs = 0;
    if (r->effect == MOEQ__EE_RAISE) {
        v->differs = MOEQ__ED_ERROR;
        return;
    }
    if (mfailed || !mres) {
        v->differs = MOEQ__ED_MOEQ_FAILS;
        return;
    }
    bool mquant = mres->status == MOEQ_MATCH_QUANTIZED;
    bool equant = r->effect != MOEQ__EE_UNQUANTIZED;
    if (mquant && !equant) {
        v->differs = MOEQ__ED_UNQUANTIZED;
    } else if (!mquant && equant) {
        v->differs = MOEQ__ED_QUANTIZED;
    } else if (mquant) {
        if (v->group >= 0 && !same_args(e->cfg, v->group, mres)) v->differs |= MOEQ__ED_GROUP;
        if (r->effect == MOEQ__EE_LINEAR_ARGS && !same_args(e->cfg, v->args_group, mres)) {
            v->differs |= MOEQ__ED_ARGS;
        }
        if (r->moeq_scheme >= 0 && mscheme >= 0 &&
            scheme_family(r->moeq_scheme) != scheme_family(mscheme)) {
            v->differs |= MOEQ__ED_SCHEME;
        }
    }
}

moeq_status moeq__engine_judge(const moeq__engine *e, moeq__match_scratch *s, const char *prefix,
                               size_t len, const moeq_resolution *mres, int32_t mscheme,
                               bool mfailed, moeq__engine_verdict *out, moeq_error *err) {
    memset(out, 0, sizeof *out);
    out->engine = e;
    out->group = out->args_group = -1;
    if (e->config_error) {
        out->row = e->config_error;
        out->group = out->args_group = e->config_error_group;
        set_differs(e, out, mres, mscheme, mfailed);
        return MOEQ_STATUS_OK;
    }
    /* Config stage: the args of the "FusedMoE" entry, else "Linear"'s. */
    int32_t cfg_target = e->fusedmoe_target >= 0 ? e->fusedmoe_target : e->linear_target;
    if (cfg_target >= 0) {
        uint32_t g = moeq__matcher_target(e->cfg->matcher, (uint32_t)cfg_target)->group;
        const moeq__engine_row *r =
            first_row(e, MOEQ__ES_CONFIG, e->groups[g].w, e->groups[g].a, e->groups[g].format);
        if (r) {
            out->row = r;
            out->group = out->args_group = (int32_t)g;
            set_differs(e, out, mres, mscheme, mfailed);
            return MOEQ_STATUS_OK;
        }
    } else {
        /* A top-level-format row needs no entry (SGLang tests the format
         * string first); try it with no args. */
        for (uint32_t i = 0; i < e->t->n_rows; i++) {
            const moeq__engine_row *r = &e->t->rows[i];
            if (r->stage == MOEQ__ES_CONFIG && r->top_format && cond_empty(&r->w) &&
                format_in(r->top_format, e->cfg->format)) {
                out->row = r;
                set_differs(e, out, mres, mscheme, mfailed);
                return MOEQ_STATUS_OK;
            }
        }
    }
    /* Probe expert 0's three projections. */
    static const char *const k_probe[3] = {".0.gate_proj", ".0.up_proj", ".0.down_proj"};
    int32_t groups[3];
    char stack[512];
    char *name = len + 16 < sizeof stack ? stack : moeq__malloc(len + 16);
    if (!name) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory");
    moeq_status st = MOEQ_STATUS_OK;
    out->row = NULL;
    for (int p = 0; p < 3 && st == MOEQ_STATUS_OK && !out->row; p++) {
        size_t k = strlen(k_probe[p]);
        memcpy(name, prefix, len);
        memcpy(name + len, k_probe[p], k + 1);
        bool ignored = false;
        st = probe_ignored(e, s, name, len + k, &ignored, err);
        groups[p] = -1;
        if (st != MOEQ_STATUS_OK || ignored || e->cfg->n_groups == 0) continue;
        int32_t ti = -1;
        st = probe_target(e, s, name, len + k, &ti, err);
        if (st != MOEQ_STATUS_OK) break;
        if (ti < 0) {
            out->row = &k_no_target;
            out->probe = p;
            break;
        }
        groups[p] = (int32_t)moeq__matcher_target(e->cfg->matcher, (uint32_t)ti)->group;
    }
    if (name != stack) moeq__free(name);
    if (st != MOEQ_STATUS_OK) return st;
    if (!out->row) {
        if (!dicts_equal(e, groups[0], groups[1]) || !dicts_equal(e, groups[0], groups[2])) {
            out->row = &k_mixed;
        } else if (groups[0] < 0) {
            out->row = &k_unquantized;
        } else {
            const egroup *eg = &e->groups[groups[0]];
            out->group = out->args_group = groups[0];
            out->row = first_row(e, MOEQ__ES_LAYER, eg->w, eg->a, eg->format);
            if (!out->row) out->row = &k_no_row;
            if (out->row->effect == MOEQ__EE_LINEAR_ARGS && e->linear_target >= 0) {
                out->args_group =
                    (int32_t)moeq__matcher_target(e->cfg->matcher, (uint32_t)e->linear_target)
                        ->group;
            }
        }
    }
    set_differs(e, out, mres, mscheme, mfailed);
    return MOEQ_STATUS_OK;
}

/* ---- output -------------------------------------------------------------------- */

const char *moeq__engine_verdict_scheme(const moeq__engine_verdict *v) {
    if (!v || !v->engine || !v->row || v->row->effect == MOEQ__EE_RAISE) return NULL;
    return v->row->cls;
}

/* QuantizationArgs as pydantic prints them (the fields SGLang and vLLM messages show). */
static void repr_args(moeq__sb *sb, const moeq_quant_args *a) {
    if (!a) {
        moeq__sb_puts(sb, "None");
        return;
    }
    moeq__sb_printf(sb, "num_bits=%d type='%s' symmetric=%s group_size=", (int)a->num_bits,
                    a->type == MOEQ_QTYPE_FLOAT ? "float" : "int", a->symmetric ? "True" : "False");
    if (a->group_size == 0) {
        moeq__sb_puts(sb, "None");
    } else {
        moeq__sb_printf(sb, "%d", (int)a->group_size);
    }
    moeq__sb_printf(sb, " strategy='%s' block_structure=", moeq_strategy_name(a->strategy));
    if (a->block_rows > 0) {
        moeq__sb_printf(sb, "[%d, %d]", (int)a->block_rows, (int)a->block_cols);
    } else {
        moeq__sb_puts(sb, "None");
    }
    moeq__sb_puts(sb, " dynamic=");
    moeq__sb_puts(sb, a->dynamic == MOEQ_DYNAMIC_LOCAL ? "'local'" : a->dynamic ? "True" : "False");
    moeq__sb_puts(sb, " actorder=");
    if (a->actorder == MOEQ_ACTORDER_NONE) {
        moeq__sb_puts(sb, "None");
    } else {
        moeq__sb_printf(sb, "'%s'", moeq_actorder_name(a->actorder));
    }
    if (a->observer) moeq__sb_printf(sb, " observer='%s'", a->observer);
}

void moeq__engine_verdict_error(const moeq__engine_verdict *v, const char *prefix, size_t len,
                                moeq__sb *sb) {
    if (!v || !v->engine || !v->row || v->row->effect != MOEQ__EE_RAISE) return;
    const moeq__engine *e = v->engine;
    const moeq__engine_row *r = v->row;
    moeq__sb_puts(sb, r->exception);
    if (!r->message || !r->message[0]) return;
    moeq__sb_puts(sb, ": ");
    const egroup *eg = v->group >= 0 ? &e->groups[v->group] : NULL;
    for (const char *p = r->message; *p;) {
        if (strncmp(p, "{W}", 3) == 0) {
            repr_args(sb, eg ? eg->w : NULL);
            p += 3;
        } else if (strncmp(p, "{A}", 3) == 0) {
            repr_args(sb, eg ? eg->a : NULL);
            p += 3;
        } else if (strncmp(p, "{bits}", 6) == 0) {
            moeq__sb_printf(sb, "%d", eg && eg->w ? (int)eg->w->num_bits : 0);
            p += 6;
        } else if (strncmp(p, "{fmt}", 5) == 0) {
            const char *f = moeq_format_name(e->cfg->format);
            moeq__sb_puts(sb, f[0] ? f : "None");
            p += 5;
        } else if (strncmp(p, "{name}", 6) == 0) {
            static const char *const k_probe[3] = {".0.gate_proj", ".0.up_proj", ".0.down_proj"};
            moeq__sb_append(sb, prefix, len);
            moeq__sb_puts(sb, k_probe[v->probe >= 0 && v->probe < 3 ? v->probe : 0]);
            p += 6;
        } else {
            moeq__sb_putc(sb, *p++);
        }
    }
}

void moeq__engine_differs_words(uint32_t differs, const char *sep, moeq__sb *sb) {
    static const struct {
        uint32_t bit;
        const char *word;
    } k_words[] = {
        {MOEQ__ED_ERROR, "error"},           {MOEQ__ED_SCHEME, "scheme"},
        {MOEQ__ED_GROUP, "group"},           {MOEQ__ED_UNQUANTIZED, "unquantized"},
        {MOEQ__ED_QUANTIZED, "quantized"},   {MOEQ__ED_ARGS, "args"},
        {MOEQ__ED_MOEQ_FAILS, "moeq_fails"},
    };
    bool first = true;
    for (size_t i = 0; i < MOEQ__ARRAY_LEN(k_words); i++) {
        if (!(differs & k_words[i].bit)) continue;
        if (!first) moeq__sb_puts(sb, sep);
        moeq__sb_puts(sb, k_words[i].word);
        first = false;
    }
}

void moeq__engine_json(const moeq__engine *e, const moeq__engine_verdict *v, const char *prefix,
                       size_t len, moeq__sb *sb) {
    bool has = v && v->engine && v->row;
    moeq__sb_puts(sb, ",\"engine\":");
    moeq__sb_json_string(sb, moeq__engine_label(e));
    moeq__sb_puts(sb, ",\"engine_scheme\":");
    const char *cls = has ? moeq__engine_verdict_scheme(v) : NULL;
    if (cls) {
        moeq__sb_json_string(sb, cls);
    } else {
        moeq__sb_puts(sb, "null");
    }
    moeq__sb_puts(sb, ",\"engine_error\":");
    if (has && v->row->effect == MOEQ__EE_RAISE) {
        moeq__sb msg;
        moeq__sb_init(&msg);
        moeq__engine_verdict_error(v, prefix, len, &msg);
        char *text = moeq__sb_take(&msg);
        if (!text) {
            sb->failed = true;
            return;
        }
        moeq__sb_json_string(sb, text);
        moeq__free(text);
    } else {
        moeq__sb_puts(sb, "null");
    }
    moeq__sb_puts(sb, ",\"engine_group\":");
    if (has && v->group >= 0) {
        moeq__sb_json_string(sb, e->cfg->groups[v->group].name);
    } else {
        moeq__sb_puts(sb, "null");
    }
    moeq__sb_puts(sb, ",\"engine_differs\":[");
    if (has && v->differs) {
        moeq__sb_putc(sb, '"');
        moeq__engine_differs_words(v->differs, "\",\"", sb);
        moeq__sb_putc(sb, '"');
    }
    moeq__sb_putc(sb, ']');
}

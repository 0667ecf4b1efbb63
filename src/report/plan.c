/*
 * plan.c - `moeq plan`: for every layer line, which group, target, format,
 * args and (for MoE layers) scheme apply, and why; as a text table or JSON.
 */
#include "report/plan.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One input line after planning (its warning, if any: the precedence disagreement). */
typedef moeq__plan_row plan_line;

/* One input line as read (names point into the caller's text). */
typedef struct plan_input {
    const char *name;
    size_t name_len;
    int32_t kind;
    uint32_t num_experts;
    char *proj[3]; /* owned */
} plan_input;

typedef struct plan_state {
    const moeq_config *cfg;
    plan_input *lines;
    uint32_t n_lines, cap_lines;
    plan_line *rows; /* the table's rows, every line's (JSON rows live per chunk) */
    /* Per-group JSON of the weight and input args, built once. */
    char **weights_json;
    char **input_json;
    moeq__engine *engine; /* --engine: what that engine would do, NULL if not asked */
} plan_state;

static void json_dtype(moeq__sb *sb, int32_t d) {
    const char *t = moeq__torch_dtype_name(d);
    if (t) {
        moeq__sb_json_string(sb, t);
    } else {
        moeq__sb_puts(sb, "null");
    }
}

/* QuantizationArgs as compressed-tensors writes them (keys sorted). */
void moeq__plan_json_args(moeq__sb *sb, const moeq_quant_args *a) {
    if (!a) {
        moeq__sb_puts(sb, "null");
        return;
    }
    moeq__sb_puts(sb, "{\"actorder\":");
    if (a->actorder == MOEQ_ACTORDER_NONE) {
        moeq__sb_puts(sb, "null");
    } else {
        moeq__sb_json_string(sb, moeq_actorder_name(a->actorder));
    }
    moeq__sb_puts(sb, ",\"block_structure\":");
    if (a->block_rows > 0) {
        moeq__sb_printf(sb, "[%d,%d]", (int)a->block_rows, (int)a->block_cols);
    } else {
        moeq__sb_puts(sb, "null");
    }
    moeq__sb_puts(sb, ",\"dynamic\":");
    moeq__sb_puts(sb, a->dynamic == MOEQ_DYNAMIC_LOCAL ? "\"local\""
                      : a->dynamic                     ? "true"
                                                       : "false");
    moeq__sb_puts(sb, ",\"group_size\":");
    if (a->group_size == 0) {
        moeq__sb_puts(sb, "null");
    } else {
        moeq__sb_printf(sb, "%d", (int)a->group_size);
    }
    moeq__sb_printf(sb, ",\"num_bits\":%d,\"observer\":", (int)a->num_bits);
    if (a->observer) {
        moeq__sb_json_string(sb, a->observer);
    } else {
        moeq__sb_puts(sb, "null");
    }
    moeq__sb_puts(sb, ",\"scale_dtype\":");
    json_dtype(sb, a->scale_dtype);
    moeq__sb_puts(sb, ",\"strategy\":");
    moeq__sb_json_string(sb, moeq_strategy_name(a->strategy));
    moeq__sb_printf(sb, ",\"symmetric\":%s,\"type\":\"%s\",\"zp_dtype\":",
                    a->symmetric ? "true" : "false", a->type == MOEQ_QTYPE_FLOAT ? "float" : "int");
    json_dtype(sb, a->zp_dtype);
    moeq__sb_putc(sb, '}');
}

static char *args_json_string(const moeq_quant_args *a) {
    moeq__sb sb;
    moeq__sb_init(&sb);
    moeq__plan_json_args(&sb, a);
    return moeq__sb_take(&sb);
}

moeq_status moeq__plan_args_json(const moeq_config *cfg, char ***weights, char ***inputs) {
    *weights = moeq__calloc(cfg->n_groups ? cfg->n_groups : 1, sizeof(char *));
    *inputs = moeq__calloc(cfg->n_groups ? cfg->n_groups : 1, sizeof(char *));
    if (!*weights || !*inputs) return MOEQ_STATUS_NOMEM;
    for (uint32_t g = 0; g < cfg->n_groups; g++) {
        const moeq__group *grp = &cfg->groups[g];
        (*weights)[g] = args_json_string(grp->has_weights ? &grp->weights : NULL);
        (*inputs)[g] = args_json_string(grp->has_input ? &grp->input : NULL);
        if (!(*weights)[g] || !(*inputs)[g]) return MOEQ_STATUS_NOMEM;
    }
    return MOEQ_STATUS_OK;
}

void moeq__plan_args_json_free(const moeq_config *cfg, char **weights, char **inputs) {
    for (uint32_t g = 0; weights && g < cfg->n_groups; g++) moeq__free(weights[g]);
    for (uint32_t g = 0; inputs && g < cfg->n_groups; g++) moeq__free(inputs[g]);
    moeq__free(weights);
    moeq__free(inputs);
}

static void free_state(plan_state *ps) {
    for (uint32_t i = 0; i < ps->n_lines; i++) {
        for (int p = 0; p < 3; p++) moeq__free(ps->lines[i].proj[p]);
        if (ps->rows) {
            moeq__free(ps->rows[i].error);
            moeq__free(ps->rows[i].warning);
        }
    }
    moeq__free(ps->lines);
    moeq__free(ps->rows);
    moeq__plan_args_json_free(ps->cfg, ps->weights_json, ps->input_json);
    moeq__engine_destroy(ps->engine);
}

/* ---- parsing the layer list ------------------------------------------------ */

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\r';
}

static moeq_status parse_moe_tail(plan_input *ln, const char *p, const char *end, uint32_t lineno,
                                  moeq_error *err) {
    /* p points after "moe": " N [GATE,UP,DOWN]" */
    while (p < end && is_space(*p)) p++;
    const char *num = p;
    uint64_t n = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        n = n * 10u + (uint64_t)(*p - '0');
        if (n > MOEQ__MAX_EXPERTS) break;
        p++;
    }
    if (p == num || n == 0 || n > MOEQ__MAX_EXPERTS || (p < end && !is_space(*p))) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "layers line %u: \"moe\" must be followed by the number of experts "
                           "(1..1000000)",
                           lineno);
    }
    ln->num_experts = (uint32_t)n;
    while (p < end && is_space(*p)) p++;
    if (p == end) return MOEQ_STATUS_OK;
    const char *names = p;
    while (p < end && !is_space(*p)) p++;
    const char *names_end = p;
    while (p < end && is_space(*p)) p++;
    if (p != end) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "layers line %u: unexpected text after the projection names", lineno);
    }
    const char *q = names;
    for (int k = 0; k < 3; k++) {
        const char *start = q;
        while (q < names_end && *q != ',') q++;
        if (q == start || (k < 2 && q == names_end) || (k == 2 && q != names_end)) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "layers line %u: projection names must be GATE,UP,DOWN (three "
                               "comma-separated names), got \"%.*s\"",
                               lineno, (int)(names_end - names), names);
        }
        ln->proj[k] = moeq__strndup(start, (size_t)(q - start));
        if (!ln->proj[k]) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory");
        q++;
    }
    return MOEQ_STATUS_OK;
}

static moeq_status parse_lines(plan_state *ps, const char *text, size_t len, moeq_error *err) {
    const char *p = text, *end = text + len;
    uint32_t lineno = 0;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        lineno++;
        const char *a = p, *b = eol;
        p = eol < end ? eol + 1 : end;
        while (a < b && is_space(*a)) a++;
        while (b > a && is_space(b[-1])) b--;
        if (a == b || *a == '#') continue;
        if (ps->n_lines == ps->cap_lines) {
            uint32_t cap = ps->cap_lines ? ps->cap_lines * 2u : 256u;
            plan_input *nl = moeq__realloc(ps->lines, sizeof *nl * cap);
            if (!nl) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory reading layers");
            ps->lines = nl;
            ps->cap_lines = cap;
        }
        plan_input *ln = &ps->lines[ps->n_lines++];
        memset(ln, 0, sizeof *ln);
        const char *name_end = a;
        while (name_end < b && !is_space(*name_end)) name_end++;
        ln->name = a;
        ln->name_len = (size_t)(name_end - a);
        const char *rest = name_end;
        while (rest < b && is_space(*rest)) rest++;
        if (rest == b) continue;
        if (b - rest >= 3 && memcmp(rest, "moe", 3) == 0 && (b - rest == 3 || is_space(rest[3]))) {
            ln->kind = MOEQ__ROW_MOE;
            moeq_status st = parse_moe_tail(ln, rest + 3, b, lineno, err);
            if (st != MOEQ_STATUS_OK) return st;
            continue;
        }
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "layers line %u: expected \"NAME\" or \"NAME moe N [GATE,UP,DOWN]\", "
                           "got \"%.*s\"",
                           lineno, (int)(b - a), a);
    }
    return MOEQ_STATUS_OK;
}

/* ---- planning ----------------------------------------------------------------- */

char *moeq__plan_order_warning(const moeq_config *cfg, const moeq_resolution *r,
                               int32_t precedence) {
    if (!(r->flags & MOEQ_RESOLVE_ORDER_DISAGREES) || r->other_group_index < 0) return NULL;
    const char *mine = r->group_name ? r->group_name : "?";
    const char *other = cfg->groups[r->other_group_index].name;
    char buf[512];
    if (precedence == MOEQ_PRECEDENCE_ENGINE) {
        snprintf(buf, sizeof buf,
                 "precedence: engine (config) order picks group %s, compressed-tensors order "
                 "(exact > regex lexicographic > class) picks group %s; the checkpoint was "
                 "written with the latter",
                 mine, other);
    } else {
        snprintf(buf, sizeof buf,
                 "precedence: compressed-tensors order picks group %s, but vLLM/SGLang (config "
                 "order) pick group %s: engines may load this layer with the wrong args",
                 mine, other);
    }
    return moeq__strdup(buf);
}

static moeq_status plan_one(plan_state *ps, moeq__match_scratch *s, plan_line *ln,
                            const moeq_plan_options *opts) {
    const moeq_resolve_options *ro = opts ? opts->resolve : NULL;
    const moeq_select_options *so = opts ? opts->select : NULL;
    int32_t precedence = ro ? ro->precedence : MOEQ_PRECEDENCE_CT;
    moeq_error e;
    moeq_error_clear(&e);
    moeq_status st;
    /* Names are copied so they are NUL-terminated for messages. */
    char stack_name[512];
    char *name =
        ln->name_len < sizeof stack_name ? stack_name : moeq__strndup(ln->name, ln->name_len);
    if (!name) return MOEQ_STATUS_NOMEM;
    if (name == stack_name) {
        memcpy(stack_name, ln->name, ln->name_len);
        stack_name[ln->name_len] = '\0';
    }
    /* A layer moe_sparsity_config prunes holds its retained experts: planned
     * with that count, said in a warning when the input line gave another. */
    char sparsity_note[256] = "";
    st = MOEQ_STATUS_OK;
    if (ln->kind == MOEQ__ROW_MOE) {
        int32_t k = 0;
        st = moeq_config_retained_experts(ps->cfg, name, &k, &e);
        if (st == MOEQ_STATUS_OK && k > 0 && (uint32_t)k != ln->num_experts) {
            snprintf(sparsity_note, sizeof sparsity_note,
                     "moe_sparsity_config (prune): this layer retains %d of %u experts; planned "
                     "with %d",
                     (int)k, ln->num_experts, (int)k);
            ln->num_experts = (uint32_t)k;
        }
    }
    if (st != MOEQ_STATUS_OK) {
        /* refused by moe_sparsity_config: the row is in error */
    } else if (ln->kind == MOEQ__ROW_MOE) {
        const char *proj[3] = {ln->proj[0], ln->proj[1], ln->proj[2]};
        st = moeq__resolve_moe(ps->cfg, s, name, ln->num_experts, ln->proj[0] ? proj : NULL, ro,
                               &ln->res, &e);
    } else {
        st = moeq__resolve_name(ps->cfg, s, name, ln->name_len, MOEQ_MODULE_LINEAR, ro, &ln->res,
                                &e);
    }
    /* The precedence warning matters most when the layer then fails. */
    if (st == MOEQ_STATUS_OK && (ln->res.flags & MOEQ_RESOLVE_ORDER_DISAGREES)) {
        ln->warning = moeq__plan_order_warning(ps->cfg, &ln->res, precedence);
        if (!ln->warning) st = MOEQ_STATUS_NOMEM;
    }
    if (st == MOEQ_STATUS_OK && ln->kind == MOEQ__ROW_MOE) {
        moeq_selection sel;
        st = moeq_select(&ln->res, name, so, &sel, &e);
        if (st == MOEQ_STATUS_OK) ln->scheme = sel.scheme;
    } else if (st == MOEQ_STATUS_OK && ln->kind == MOEQ__ROW_LINEAR) {
        /* The scheme moeq_linear runs it with, by the same selection.  A
         * linear line no scheme accepts still resolves: the reason is a
         * warning, not an error of the plan. */
        moeq_selection sel;
        moeq_error se;
        moeq_status sst = moeq_select(&ln->res, name, so, &sel, &se);
        if (sst == MOEQ_STATUS_OK) {
            ln->scheme = sel.scheme;
        } else if (sst == MOEQ_STATUS_NOMEM) {
            st = sst;
        } else if (!ln->warning) {
            ln->warning = moeq__strdup(se.message);
            if (!ln->warning) st = MOEQ_STATUS_NOMEM;
        }
    }
    if (name != stack_name) moeq__free(name);
    if (st == MOEQ_STATUS_NOMEM) return st;
    if (sparsity_note[0]) {
        moeq__sb sb;
        moeq__sb_init(&sb);
        moeq__sb_puts(&sb, sparsity_note);
        if (ln->warning) moeq__sb_printf(&sb, "; %s", ln->warning);
        moeq__free(ln->warning);
        ln->warning = moeq__sb_take(&sb);
        if (!ln->warning) return MOEQ_STATUS_NOMEM;
    }
    if (st != MOEQ_STATUS_OK) {
        ln->error = moeq__strdup(e.message);
        if (!ln->error) return MOEQ_STATUS_NOMEM;
    }
    ln->engine.engine = ps->engine;
    if (ps->engine && ln->kind == MOEQ__ROW_MOE) {
        moeq_status est = moeq__engine_judge(ps->engine, s, ln->name, ln->name_len, &ln->res,
                                             ln->scheme, ln->error != NULL, &ln->engine, &e);
        if (est == MOEQ_STATUS_NOMEM) return est;
        if (est != MOEQ_STATUS_OK && !ln->error) { /* a regex limit: the row is in error */
            ln->error = moeq__strdup(e.message);
            if (!ln->error) return MOEQ_STATUS_NOMEM;
        }
    }
    return MOEQ_STATUS_OK;
}

/* ---- output ----------------------------------------------------------------- */

const char *moeq__plan_status_word(const moeq__plan_row *ln) {
    if (ln->error) return "error";
    switch (ln->res.status) {
        case MOEQ_MATCH_QUANTIZED: return "quantized";
        case MOEQ_MATCH_IGNORED: return "ignored";
        default: return "unmatched";
    }
}

static const char *kind_word(int32_t kind) {
    return kind == MOEQ__ROW_MOE ? "moe" : kind == MOEQ__ROW_OTHER ? "other" : "linear";
}

/* A layer name as a JSON string (input names are not NUL-terminated). */
static void json_name(moeq__sb *sb, const char *name, size_t len) {
    bool plain = true;
    for (size_t i = 0; i < len && plain; i++) {
        unsigned char c = (unsigned char)name[i];
        plain = c >= 0x20 && c != '"' && c != '\\';
    }
    if (plain) {
        moeq__sb_putc(sb, '"');
        moeq__sb_append(sb, name, len);
        moeq__sb_putc(sb, '"');
        return;
    }
    char *copy = moeq__strndup(name, len);
    if (!copy) {
        sb->failed = true;
        return;
    }
    moeq__sb_json_string(sb, copy);
    moeq__free(copy);
}

static void json_or_null(moeq__sb *sb, bool present, const char *s) {
    if (present) {
        moeq__sb_json_string(sb, s);
    } else {
        moeq__sb_puts(sb, "null");
    }
}

/* Everything after "layer" in a row's JSON object. */
static void json_tail(const moeq__plan_json *pj, const moeq__plan_row *ln, moeq__sb *sb) {
    const moeq_resolution *r = &ln->res;
    bool ok = !ln->error;
    bool quant = ok && r->status == MOEQ_MATCH_QUANTIZED;
    bool moe = ln->kind == MOEQ__ROW_MOE;
    moeq__sb_puts(sb, ",\"kind\":\"");
    moeq__sb_puts(sb, kind_word(ln->kind));
    moeq__sb_puts(sb, "\",\"status\":\"");
    moeq__sb_puts(sb, moeq__plan_status_word(ln));
    moeq__sb_puts(sb, "\",\"group\":");
    json_or_null(sb, quant, r->group_name);
    moeq__sb_puts(sb, ",\"target\":");
    json_or_null(sb, ok && r->target, r->target);
    moeq__sb_puts(sb, ",\"format\":");
    json_or_null(sb, quant, moeq_format_name(r->format));
    moeq__sb_puts(sb, ",\"scheme\":");
    json_or_null(sb, ln->scheme >= 0, moeq_scheme_name(ln->scheme));
    moeq__sb_puts(sb, ",\"weights\":");
    moeq__sb_puts(sb, quant && r->weights ? pj->weights_json[r->group_index] : "null");
    moeq__sb_puts(sb, ",\"input_activations\":");
    moeq__sb_puts(sb, quant && r->input_activations ? pj->input_json[r->group_index] : "null");
    moeq__sb_puts(sb, ",\"warnings\":[");
    if (ln->warning) moeq__sb_json_string(sb, ln->warning);
    moeq__sb_puts(sb, "],\"error\":");
    json_or_null(sb, ln->error != NULL, ln->error);
    if (moe) moeq__sb_printf(sb, ",\"experts\":%u", ln->num_experts);
    moeq__sb_putc(sb, '}');
}

/* Rows without warnings or errors share their tail with every row that
 * resolved the same way, so each distinct tail is built once. */
static const char *cached_tail(moeq__plan_json *pj, const moeq__plan_row *ln, size_t *len) {
    if (ln->error || ln->warning) return NULL;
    const moeq_resolution *r = &ln->res;
    for (uint32_t k = 0; k < pj->n_cache; k++) {
        uint32_t i = k == 0 ? pj->last : k <= pj->last ? k - 1 : k; /* the last hit first */
        if (pj->cache[i].kind == ln->kind && pj->cache[i].status == r->status &&
            pj->cache[i].group == r->group_index && pj->cache[i].ignore == r->ignore_index &&
            pj->cache[i].scheme == ln->scheme && pj->cache[i].target == r->target &&
            pj->cache[i].experts == ln->num_experts) {
            pj->last = i;
            *len = pj->cache[i].len;
            return pj->cache[i].text;
        }
    }
    if (pj->n_cache == MOEQ__ARRAY_LEN(pj->cache)) return NULL;
    moeq__sb sb;
    moeq__sb_init(&sb);
    json_tail(pj, ln, &sb);
    size_t n = sb.len;
    char *text = moeq__sb_take(&sb);
    if (!text) return NULL;
    uint32_t k = pj->n_cache++;
    pj->last = k;
    pj->cache[k].kind = ln->kind;
    pj->cache[k].status = r->status;
    pj->cache[k].group = r->group_index;
    pj->cache[k].ignore = r->ignore_index;
    pj->cache[k].scheme = ln->scheme;
    pj->cache[k].target = r->target;
    pj->cache[k].experts = ln->num_experts;
    pj->cache[k].text = text;
    pj->cache[k].len = n;
    *len = n;
    return text;
}

void moeq__plan_json_row(moeq__plan_json *pj, const moeq__plan_row *ln, bool first, moeq__sb *sb) {
    moeq__sb_puts(sb, first ? "\n{\"layer\":" : ",\n{\"layer\":");
    json_name(sb, ln->name, ln->name_len);
    if (pj->engine) moeq__engine_json(pj->engine, &ln->engine, ln->name, ln->name_len, sb);
    size_t tlen = 0;
    const char *tail = cached_tail(pj, ln, &tlen);
    if (tail) {
        moeq__sb_append(sb, tail, tlen);
    } else {
        json_tail(pj, ln, sb);
    }
}

void moeq__plan_json_free(moeq__plan_json *pj) {
    for (uint32_t i = 0; i < pj->n_cache; i++) moeq__free(pj->cache[i].text);
    pj->n_cache = 0;
    pj->last = 0;
}

static void pad(moeq__sb *sb, size_t have, size_t want) {
    static const char spaces[] = "                                                                ";
    while (have < want) {
        size_t k = want - have < sizeof spaces - 1 ? want - have : sizeof spaces - 1;
        moeq__sb_append(sb, spaces, k);
        have += k;
    }
}

static void cell(moeq__sb *sb, const char *s, size_t len, size_t width) {
    moeq__sb_append(sb, s, len);
    pad(sb, len, width + 2);
}

/* The ENGINE column: the class the engine builds, or the exception it
 * raises, with " *" where that differs from moeq's choice; "-" for rows
 * the engine model does not judge (linear layers). */
static const char *engine_cell_text(const moeq__engine_verdict *v) {
    if (!v->row) return "-";
    const char *cls = moeq__engine_verdict_scheme(v);
    return cls ? cls : v->row->exception;
}

static size_t engine_cell_len(const moeq__engine_verdict *v) {
    return strlen(engine_cell_text(v)) + (v->differs ? 2 : 0);
}

static void engine_cell(moeq__sb *sb, const moeq__engine_verdict *v, size_t width) {
    const char *t = engine_cell_text(v);
    moeq__sb_puts(sb, t);
    if (v->differs) moeq__sb_puts(sb, " *");
    pad(sb, engine_cell_len(v), width + 2);
}

/* Under a row: the engine's exception, and what differs from moeq. */
static void engine_line(moeq__sb *sb, const moeq__plan_row *ln) {
    const moeq__engine_verdict *v = &ln->engine;
    if (!v->row || (!v->differs && v->row->effect != MOEQ__EE_RAISE)) return;
    moeq__sb_puts(sb, "    engine: ");
    if (v->row->effect == MOEQ__EE_RAISE) {
        moeq__engine_verdict_error(v, ln->name, ln->name_len, sb);
    } else {
        moeq__sb_puts(sb, v->row->cls);
        if (v->group >= 0) {
            moeq__sb_printf(sb, " with group %s", moeq__engine_group_name(v->engine, v->group));
        }
        if (v->args_group >= 0 && v->args_group != v->group) {
            moeq__sb_printf(sb, " (args of group %s)",
                            moeq__engine_group_name(v->engine, v->args_group));
        }
    }
    if (v->differs) {
        moeq__sb_puts(sb, " [differs: ");
        moeq__engine_differs_words(v->differs, ",", sb);
        moeq__sb_putc(sb, ']');
    }
    moeq__sb_putc(sb, '\n');
}

void moeq__plan_table(const moeq__plan_row *rows, uint32_t n, moeq__sb *sb) {
    enum {
        C_LAYER,
        C_KIND,
        C_STATUS,
        C_GROUP,
        C_FORMAT,
        C_SCHEME,
        C_ENGINE,
        C_WEIGHTS,
        C_INPUTS,
        NCOL
    };
    static const char *const heads[NCOL] = {"LAYER",  "KIND",   "STATUS",  "GROUP", "FORMAT",
                                            "SCHEME", "ENGINE", "WEIGHTS", "INPUTS"};
    const moeq__engine *engine = n ? rows[0].engine.engine : NULL;
    size_t width[NCOL];
    for (int c = 0; c < NCOL; c++) width[c] = strlen(heads[c]);
    if (!engine) width[C_ENGINE] = 0;
    char(*wsum)[96] = moeq__calloc(n ? n : 1, sizeof *wsum);
    char(*asum)[96] = moeq__calloc(n ? n : 1, sizeof *asum);
    if (!wsum || !asum) {
        moeq__free(wsum);
        moeq__free(asum);
        sb->failed = true;
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        const moeq__plan_row *ln = &rows[i];
        bool quant = !ln->error && ln->res.status == MOEQ_MATCH_QUANTIZED;
        bool moe = ln->kind == MOEQ__ROW_MOE;
        strcpy(wsum[i], "-");
        strcpy(asum[i], "-");
        if (quant && ln->res.weights) moeq_quant_args_summary(ln->res.weights, wsum[i], 96);
        if (quant && ln->res.input_activations) {
            moeq_quant_args_summary(ln->res.input_activations, asum[i], 96);
        }
        size_t w[NCOL] = {ln->name_len,
                          strlen(kind_word(ln->kind)),
                          strlen(moeq__plan_status_word(ln)),
                          quant ? strlen(ln->res.group_name) : 1,
                          quant ? strlen(moeq_format_name(ln->res.format)) : 1,
                          ln->scheme >= 0 ? strlen(moeq_scheme_name(ln->scheme)) : 1,
                          engine ? engine_cell_len(&ln->engine) : 0,
                          strlen(wsum[i]),
                          strlen(asum[i])};
        if (moe) w[C_LAYER] += 20; /* " (256 experts)" */
        for (int c = 0; c < NCOL; c++) {
            if (w[c] > width[c]) width[c] = w[c];
        }
    }
    if (engine) moeq__sb_printf(sb, "engine %s\n", moeq__engine_label(engine));
    for (int c = 0; c < NCOL - 1; c++) {
        if (c == C_ENGINE && !engine) continue;
        cell(sb, heads[c], strlen(heads[c]), width[c]);
    }
    moeq__sb_puts(sb, heads[NCOL - 1]);
    moeq__sb_putc(sb, '\n');
    for (uint32_t i = 0; i < n; i++) {
        const moeq__plan_row *ln = &rows[i];
        bool quant = !ln->error && ln->res.status == MOEQ_MATCH_QUANTIZED;
        bool moe = ln->kind == MOEQ__ROW_MOE;
        char layer[600];
        int k = snprintf(layer, sizeof layer, "%.*s", (int)ln->name_len, ln->name);
        if (moe && k >= 0 && (size_t)k < sizeof layer) {
            snprintf(layer + k, sizeof layer - (size_t)k, " (%u experts)", ln->num_experts);
        }
        cell(sb, layer, strlen(layer), width[C_LAYER]);
        const char *kw = kind_word(ln->kind);
        cell(sb, kw, strlen(kw), width[C_KIND]);
        const char *st = moeq__plan_status_word(ln);
        cell(sb, st, strlen(st), width[C_STATUS]);
        const char *g = quant ? ln->res.group_name : "-";
        cell(sb, g, strlen(g), width[C_GROUP]);
        const char *f = quant ? moeq_format_name(ln->res.format) : "-";
        cell(sb, f, strlen(f), width[C_FORMAT]);
        const char *sc = ln->scheme >= 0 ? moeq_scheme_name(ln->scheme) : "-";
        cell(sb, sc, strlen(sc), width[C_SCHEME]);
        if (engine) engine_cell(sb, &ln->engine, width[C_ENGINE]);
        cell(sb, wsum[i], strlen(wsum[i]), width[C_WEIGHTS]);
        moeq__sb_puts(sb, asum[i]);
        moeq__sb_putc(sb, '\n');
        if (ln->res.status == MOEQ_MATCH_IGNORED && !ln->error) {
            moeq__sb_printf(sb, "    ignored by ignore[%d] \"%s\"\n", ln->res.ignore_index,
                            ln->res.target);
        }
        if (ln->warning) moeq__sb_printf(sb, "    warning: %s\n", ln->warning);
        if (ln->error) moeq__sb_printf(sb, "    error: %s\n", ln->error);
        if (engine) engine_line(sb, ln);
    }
    moeq__free(wsum);
    moeq__free(asum);
}

/* Planning runs as a pipeline over chunks of PLAN_CHUNK lines: threads take
 * the next chunk from a counter and plan it (for JSON, into the output
 * buffer of its ring slot), while the calling thread writes finished chunks
 * in line order and plans chunks itself whenever no thread has taken the
 * next one.  A thread may run at most PLAN_RING chunks ahead of the writer,
 * so memory stays bounded whatever the number of lines. */
#define PLAN_CHUNK       1024u
#define PLAN_RING        8u
#define PLAN_MAX_THREADS 64

typedef struct plan_slot {
    moeq__sb sb; /* the chunk's JSON */
    uint32_t errors;
    bool done;
    moeq_status status;
} plan_slot;

typedef struct plan_pipe plan_pipe;

/* What one thread owns: its match scratch and its cache of JSON tails. */
typedef struct plan_worker {
    plan_pipe *pipe;
    moeq__match_scratch *scratch;
    moeq__plan_json pj;
    plan_line *rows; /* JSON: the rows of the chunk being planned [PLAN_CHUNK] */
} plan_worker;

struct plan_pipe {
    plan_state *ps;
    const moeq_plan_options *opts;
    bool json;
    uint32_t n_chunks;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t next;    /* the next chunk nobody has taken */
    uint32_t written; /* chunks handed to the writer */
    bool stop;        /* the writer failed: take no more chunks */
    plan_slot slots[PLAN_RING];
};

/* Plans chunk c into its slot. */
static void plan_chunk(plan_worker *w, uint32_t c) {
    plan_pipe *pp = w->pipe;
    plan_state *ps = pp->ps;
    plan_slot *slot = &pp->slots[c % PLAN_RING];
    uint32_t begin = c * PLAN_CHUNK;
    uint32_t end = ps->n_lines - begin < PLAN_CHUNK ? ps->n_lines : begin + PLAN_CHUNK;
    slot->sb.len = 0;
    slot->errors = 0;
    slot->status = MOEQ_STATUS_OK;
    for (uint32_t i = begin; i < end; i++) {
        const plan_input *in = &ps->lines[i];
        plan_line *ln = pp->json ? &w->rows[i - begin] : &ps->rows[i];
        memset(ln, 0, sizeof *ln);
        ln->name = in->name;
        ln->name_len = in->name_len;
        ln->kind = in->kind;
        ln->num_experts = in->num_experts;
        memcpy(ln->proj, in->proj, sizeof ln->proj); /* borrowed */
        ln->scheme = -1;
        if (plan_one(ps, w->scratch, ln, pp->opts) != MOEQ_STATUS_OK) {
            slot->status = MOEQ_STATUS_NOMEM;
            if (pp->json) { /* table rows are freed with the state */
                moeq__free(ln->error);
                moeq__free(ln->warning);
            }
            return;
        }
        if (ln->error) slot->errors++;
        if (!pp->json) continue; /* the table needs every line for its widths */
        /* JSON streams: plan, render, forget. */
        moeq__plan_json_row(&w->pj, ln, i == 0, &slot->sb);
        moeq__free(ln->error);
        moeq__free(ln->warning);
        ln->error = ln->warning = NULL;
    }
    if (slot->sb.failed) slot->status = MOEQ_STATUS_NOMEM;
}

/* Takes the next chunk if the ring has room for it; UINT32_MAX when there
 * is none to take (all taken, or stopped).  Called with the mutex held. */
static uint32_t take_chunk(plan_pipe *pp, bool wait) {
    for (;;) {
        if (pp->stop || pp->next >= pp->n_chunks) return UINT32_MAX;
        if (pp->next < pp->written + PLAN_RING) return pp->next++;
        if (!wait) return UINT32_MAX;
        pthread_cond_wait(&pp->cv, &pp->mu);
    }
}

static void finish_chunk(plan_pipe *pp, uint32_t c) {
    pthread_mutex_lock(&pp->mu);
    pp->slots[c % PLAN_RING].done = true;
    pthread_cond_broadcast(&pp->cv);
    pthread_mutex_unlock(&pp->mu);
}

static void *plan_thread(void *arg) {
    plan_worker *w = arg;
    plan_pipe *pp = w->pipe;
    for (;;) {
        pthread_mutex_lock(&pp->mu);
        uint32_t c = take_chunk(pp, true);
        pthread_mutex_unlock(&pp->mu);
        if (c == UINT32_MAX) break;
        plan_chunk(w, c);
        finish_chunk(pp, c);
    }
    return NULL;
}

/* Hands `sb` to the writer and empties it. */
static moeq_status flush(moeq__sb *sb, moeq_write_fn write, void *user, moeq_error *err) {
    if (sb->failed) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory while planning");
    if (sb->len == 0) return MOEQ_STATUS_OK;
    int32_t rc = write(sb->data, sb->len, user);
    sb->len = 0;
    if (rc != 0) {
        return moeq__error(err, MOEQ_STATUS_IO, "the plan writer stopped with code %d", (int)rc);
    }
    return MOEQ_STATUS_OK;
}

/* The calling thread's part: chunks in order, planned here when nobody has
 * taken them yet, written once done. */
static moeq_status write_chunks(plan_pipe *pp, plan_worker *self, moeq_write_fn write, void *user,
                                uint32_t *errors, moeq_error *err) {
    for (uint32_t c = 0; c < pp->n_chunks; c++) {
        plan_slot *slot = &pp->slots[c % PLAN_RING];
        pthread_mutex_lock(&pp->mu);
        while (!slot->done) {
            /* Plan the chunk itself if nobody has taken it (or another one
             * while waiting, so that the calling thread is never idle). */
            uint32_t mine = take_chunk(pp, false);
            if (mine == UINT32_MAX) {
                pthread_cond_wait(&pp->cv, &pp->mu);
                continue;
            }
            pthread_mutex_unlock(&pp->mu);
            plan_chunk(self, mine);
            finish_chunk(pp, mine);
            pthread_mutex_lock(&pp->mu);
        }
        pthread_mutex_unlock(&pp->mu);
        moeq_status st = slot->status;
        if (st != MOEQ_STATUS_OK) {
            return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory while planning");
        }
        *errors += slot->errors;
        if (pp->json && (st = flush(&slot->sb, write, user, err)) != MOEQ_STATUS_OK) return st;
        pthread_mutex_lock(&pp->mu);
        slot->done = false;
        pp->written = c + 1;
        pthread_cond_broadcast(&pp->cv);
        pthread_mutex_unlock(&pp->mu);
    }
    return MOEQ_STATUS_OK;
}

moeq_status moeq_plan_write(const moeq_config *cfg, const char *layers, size_t len,
                            const moeq_plan_options *opts, moeq_write_fn write, void *user,
                            uint32_t *out_errors, moeq_error *err) {
    if (out_errors) *out_errors = 0;
    if (!cfg || (!layers && len) || !write) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL",
                           !cfg     ? "config"
                           : !write ? "write"
                                    : "layers");
    }
    if (!cfg->matcher) return moeq__error(err, MOEQ_STATUS_STATE, "config has no matcher");
    if (opts) {
        moeq_status ost = moeq__resolve_options_check(opts->resolve, err);
        if (ost != MOEQ_STATUS_OK) return ost;
    }
    if (opts && (opts->threads < 0 || opts->threads > PLAN_MAX_THREADS)) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "threads is %d; use 0..%d",
                           (int)opts->threads, PLAN_MAX_THREADS);
    }
    plan_state ps;
    memset(&ps, 0, sizeof ps);
    ps.cfg = cfg;
    plan_pipe pp;
    memset(&pp, 0, sizeof pp);
    pp.ps = &ps;
    pp.opts = opts;
    pp.json = opts && opts->json;
    pthread_mutex_init(&pp.mu, NULL);
    pthread_cond_init(&pp.cv, NULL);
    for (uint32_t i = 0; i < PLAN_RING; i++) moeq__sb_init(&pp.slots[i].sb);
    plan_worker workers[PLAN_MAX_THREADS];
    pthread_t tid[PLAN_MAX_THREADS];
    uint32_t n_workers = opts && opts->threads > 1 ? (uint32_t)opts->threads : 1u, started = 0;
    memset(workers, 0, sizeof workers[0] * n_workers);
    moeq__sb out;
    moeq__sb_init(&out);
    uint32_t errors = 0;
    moeq_status st = parse_lines(&ps, layers ? layers : "", len, err);
    if (st != MOEQ_STATUS_OK) goto done;
    pp.n_chunks = (ps.n_lines + PLAN_CHUNK - 1) / PLAN_CHUNK;
    /* No more threads than chunks. */
    if (n_workers > pp.n_chunks) n_workers = pp.n_chunks ? pp.n_chunks : 1u;
    if (moeq__plan_args_json(cfg, &ps.weights_json, &ps.input_json) != MOEQ_STATUS_OK) goto nomem;
    if (opts && opts->engine) {
        st = moeq__engine_create(opts->engine, cfg, &ps.engine, err);
        if (st != MOEQ_STATUS_OK) goto done;
    }
    if (!pp.json && ps.n_lines) {
        ps.rows = moeq__calloc(ps.n_lines, sizeof *ps.rows);
        if (!ps.rows) goto nomem;
    }
    for (uint32_t t = 0; t < n_workers; t++) {
        if (pp.json) {
            workers[t].rows = moeq__malloc(PLAN_CHUNK * sizeof *workers[t].rows);
            if (!workers[t].rows) goto nomem;
        }
        workers[t].pipe = &pp;
        workers[t].pj.cfg = cfg;
        workers[t].pj.weights_json = ps.weights_json;
        workers[t].pj.input_json = ps.input_json;
        workers[t].pj.engine = ps.engine;
        st = moeq__match_scratch_create(cfg->matcher, &workers[t].scratch, err);
        if (st != MOEQ_STATUS_OK) goto done;
    }
    if (pp.json) {
        moeq__sb_puts(&out, "[");
        if ((st = flush(&out, write, user, err)) != MOEQ_STATUS_OK) goto done;
    }
    /* Helper threads; if one cannot be started, the others (and the calling
     * thread) do its share. */
    for (uint32_t t = 1; t < n_workers; t++) {
        if (pthread_create(&tid[started + 1], NULL, plan_thread, &workers[t]) == 0) started++;
    }
    st = write_chunks(&pp, &workers[0], write, user, &errors, err);
    pthread_mutex_lock(&pp.mu);
    pp.stop = true; /* after a failure, helpers take nothing more */
    pthread_cond_broadcast(&pp.cv);
    pthread_mutex_unlock(&pp.mu);
    for (uint32_t t = 1; t <= started; t++) pthread_join(tid[t], NULL);
    if (st != MOEQ_STATUS_OK) goto done;
    if (pp.json) {
        moeq__sb_puts(&out, ps.n_lines ? "\n]\n" : "]\n");
    } else {
        moeq__plan_table(ps.rows, ps.n_lines, &out);
    }
    st = flush(&out, write, user, err);
    if (st == MOEQ_STATUS_OK && out_errors) *out_errors = errors;
    goto done;
nomem:
    st = moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory while planning");
done:
    for (uint32_t t = 0; t < n_workers; t++) {
        moeq__free(workers[t].rows);
        moeq__plan_json_free(&workers[t].pj);
        moeq__match_scratch_destroy(workers[t].scratch);
    }
    for (uint32_t i = 0; i < PLAN_RING; i++) moeq__sb_free(&pp.slots[i].sb);
    pthread_cond_destroy(&pp.cv);
    pthread_mutex_destroy(&pp.mu);
    moeq__sb_free(&out);
    free_state(&ps);
    return st;
}

static int32_t append_to_sb(const char *data, size_t len, void *user) {
    moeq__sb *sb = user;
    moeq__sb_append(sb, data, len);
    return sb->failed ? 1 : 0;
}

moeq_status moeq_plan(const moeq_config *cfg, const char *layers, size_t len,
                      const moeq_plan_options *opts, char **out_text, uint32_t *out_errors,
                      moeq_error *err) {
    if (out_text) *out_text = NULL;
    if (out_errors) *out_errors = 0;
    if (!out_text) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "out_text is NULL");
    moeq__sb sb;
    moeq__sb_init(&sb);
    moeq_status st = moeq_plan_write(cfg, layers, len, opts, append_to_sb, &sb, out_errors, err);
    if (st == MOEQ_STATUS_IO && sb.failed) {
        st = moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory while planning");
    }
    if (st != MOEQ_STATUS_OK) {
        moeq__sb_free(&sb);
        if (out_errors) *out_errors = 0;
        return st;
    }
    char *text = moeq__sb_take(&sb);
    if (!text) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory while planning");
    *out_text = text;
    return MOEQ_STATUS_OK;
}

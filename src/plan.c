/*
 * plan.c - `moeq plan`: for every layer line, which group, target, format,
 * args and (for MoE layers) scheme apply, and why; as a text table or JSON.
 */
#include "resolve.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One input line after planning. */
typedef struct plan_line {
    const char *name;
    size_t name_len;
    bool moe;
    uint32_t num_experts;
    char *proj[3]; /* custom projection names (NULL: defaults) */
    moeq_resolution res;
    int32_t scheme; /* MoE lines: selected scheme, -1 on error */
    char *error;    /* NULL when fine */
    char *warning;  /* at most one warning today: precedence disagreement */
} plan_line;

typedef struct plan_state {
    const moeq_config *cfg;
    plan_line *lines;
    uint32_t n_lines, cap_lines;
    /* Per-group JSON of the weight and input args, built once. */
    char **weights_json;
    char **input_json;
} plan_state;

static const char *torch_dtype(int32_t d) {
    switch (d) {
        case MOEQ_DTYPE_F64:
            return "torch.float64";
        case MOEQ_DTYPE_F32:
            return "torch.float32";
        case MOEQ_DTYPE_F16:
            return "torch.float16";
        case MOEQ_DTYPE_BF16:
            return "torch.bfloat16";
        case MOEQ_DTYPE_F8_E4M3:
            return "torch.float8_e4m3fn";
        case MOEQ_DTYPE_F8_E5M2:
            return "torch.float8_e5m2";
        case MOEQ_DTYPE_I8:
            return "torch.int8";
        case MOEQ_DTYPE_U8:
            return "torch.uint8";
        case MOEQ_DTYPE_I16:
            return "torch.int16";
        case MOEQ_DTYPE_U16:
            return "torch.uint16";
        case MOEQ_DTYPE_I32:
            return "torch.int32";
        case MOEQ_DTYPE_U32:
            return "torch.uint32";
        case MOEQ_DTYPE_I64:
            return "torch.int64";
        case MOEQ_DTYPE_U64:
            return "torch.uint64";
        case MOEQ_DTYPE_BOOL:
            return "torch.bool";
        default:
            return NULL;
    }
}

static void json_dtype(moeq__sb *sb, int32_t d) {
    const char *t = torch_dtype(d);
    if (t) {
        moeq__sb_json_string(sb, t);
    } else {
        moeq__sb_puts(sb, "null");
    }
}

/* QuantizationArgs as compressed-tensors writes them (keys sorted). */
static void json_args(moeq__sb *sb, const moeq_quant_args *a) {
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
    json_args(&sb, a);
    return moeq__sb_take(&sb);
}

static void free_state(plan_state *ps) {
    for (uint32_t i = 0; i < ps->n_lines; i++) {
        for (int p = 0; p < 3; p++) moeq__free(ps->lines[i].proj[p]);
        moeq__free(ps->lines[i].error);
        moeq__free(ps->lines[i].warning);
    }
    moeq__free(ps->lines);
    if (ps->weights_json) {
        for (uint32_t g = 0; g < ps->cfg->n_groups; g++) moeq__free(ps->weights_json[g]);
    }
    if (ps->input_json) {
        for (uint32_t g = 0; g < ps->cfg->n_groups; g++) moeq__free(ps->input_json[g]);
    }
    moeq__free(ps->weights_json);
    moeq__free(ps->input_json);
}

/* ---- parsing the layer list ------------------------------------------------ */

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\r';
}

static moeq_status parse_moe_tail(plan_line *ln, const char *p, const char *end, uint32_t lineno,
                                  moeq_error *err) {
    /* p points after "moe": " N [GATE,UP,DOWN]" */
    while (p < end && is_space(*p)) p++;
    const char *num = p;
    uint64_t n = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        n = n * 10u + (uint64_t)(*p - '0');
        if (n > 1000000u) break;
        p++;
    }
    if (p == num || n == 0 || n > 1000000u || (p < end && !is_space(*p))) {
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
            plan_line *nl = moeq__realloc(ps->lines, sizeof *nl * cap);
            if (!nl) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory reading layers");
            ps->lines = nl;
            ps->cap_lines = cap;
        }
        plan_line *ln = &ps->lines[ps->n_lines++];
        memset(ln, 0, sizeof *ln);
        ln->scheme = -1;
        const char *name_end = a;
        while (name_end < b && !is_space(*name_end)) name_end++;
        ln->name = a;
        ln->name_len = (size_t)(name_end - a);
        const char *rest = name_end;
        while (rest < b && is_space(*rest)) rest++;
        if (rest == b) continue;
        if (b - rest >= 3 && memcmp(rest, "moe", 3) == 0 && (b - rest == 3 || is_space(rest[3]))) {
            ln->moe = true;
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

static char *order_warning(const moeq_config *cfg, const moeq_resolution *r, int32_t precedence) {
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
    if (ln->moe) {
        const char *proj[3] = {ln->proj[0], ln->proj[1], ln->proj[2]};
        st = moeq__resolve_moe(ps->cfg, s, name, ln->num_experts, ln->proj[0] ? proj : NULL, ro,
                               &ln->res, &e);
        if (st == MOEQ_STATUS_OK) {
            moeq_selection sel;
            st = moeq_select(&ln->res, name, so, &sel, &e);
            if (st == MOEQ_STATUS_OK) ln->scheme = sel.scheme;
        }
    } else {
        st = moeq__resolve_name(ps->cfg, s, name, ln->name_len, MOEQ_MODULE_LINEAR, ro, &ln->res,
                                &e);
    }
    if (name != stack_name) moeq__free(name);
    if (st == MOEQ_STATUS_NOMEM) return st;
    if (st != MOEQ_STATUS_OK) {
        ln->error = moeq__strdup(e.message);
        if (!ln->error) return MOEQ_STATUS_NOMEM;
        return MOEQ_STATUS_OK;
    }
    if (ln->res.flags & MOEQ_RESOLVE_ORDER_DISAGREES) {
        ln->warning = order_warning(ps->cfg, &ln->res, precedence);
        if (!ln->warning) return MOEQ_STATUS_NOMEM;
    }
    return MOEQ_STATUS_OK;
}

static const char *status_word(const plan_line *ln) {
    if (ln->error) return "error";
    switch (ln->res.status) {
        case MOEQ_MATCH_QUANTIZED:
            return "quantized";
        case MOEQ_MATCH_IGNORED:
            return "ignored";
        default:
            return "unmatched";
    }
}

/* ---- output ----------------------------------------------------------------- */

/* A layer name as a JSON string (names are not NUL-terminated in the input). */
static void json_name(moeq__sb *sb, const char *name, size_t len) {
    char tmp[512];
    if (len < sizeof tmp) {
        memcpy(tmp, name, len);
        tmp[len] = '\0';
        moeq__sb_json_string(sb, tmp);
        return;
    }
    char *heap = moeq__strndup(name, len);
    if (!heap) {
        sb->failed = true;
        return;
    }
    moeq__sb_json_string(sb, heap);
    moeq__free(heap);
}

static void emit_json(plan_state *ps, moeq__sb *sb) {
    moeq__sb_puts(sb, "[");
    for (uint32_t i = 0; i < ps->n_lines; i++) {
        const plan_line *ln = &ps->lines[i];
        const moeq_resolution *r = &ln->res;
        bool ok = !ln->error;
        bool quant = ok && r->status == MOEQ_MATCH_QUANTIZED;
        moeq__sb_puts(sb, i ? ",\n{\"layer\":" : "\n{\"layer\":");
        json_name(sb, ln->name, ln->name_len);
        moeq__sb_puts(sb, ln->moe ? ",\"kind\":\"moe\",\"status\":\""
                                  : ",\"kind\":\"linear\",\"status\":\"");
        moeq__sb_puts(sb, status_word(ln));
        moeq__sb_puts(sb, "\",\"group\":");
        if (quant) {
            moeq__sb_json_string(sb, r->group_name);
        } else {
            moeq__sb_puts(sb, "null");
        }
        moeq__sb_puts(sb, ",\"target\":");
        if (ok && r->target) {
            moeq__sb_json_string(sb, r->target);
        } else {
            moeq__sb_puts(sb, "null");
        }
        moeq__sb_puts(sb, ",\"format\":");
        if (quant) {
            moeq__sb_json_string(sb, moeq_format_name(r->format));
        } else {
            moeq__sb_puts(sb, "null");
        }
        moeq__sb_puts(sb, ",\"scheme\":");
        if (ln->moe && ln->scheme >= 0) {
            moeq__sb_json_string(sb, moeq_scheme_name(ln->scheme));
        } else {
            moeq__sb_puts(sb, "null");
        }
        moeq__sb_puts(sb, ",\"weights\":");
        moeq__sb_puts(sb, quant && r->weights ? ps->weights_json[r->group_index] : "null");
        moeq__sb_puts(sb, ",\"input_activations\":");
        moeq__sb_puts(sb, quant && r->input_activations ? ps->input_json[r->group_index] : "null");
        moeq__sb_puts(sb, ",\"warnings\":[");
        if (ln->warning) moeq__sb_json_string(sb, ln->warning);
        moeq__sb_puts(sb, "],\"error\":");
        if (ln->error) {
            moeq__sb_json_string(sb, ln->error);
        } else {
            moeq__sb_puts(sb, "null");
        }
        moeq__sb_putc(sb, '}');
    }
    moeq__sb_puts(sb, ps->n_lines ? "\n]\n" : "]\n");
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

static void emit_table(plan_state *ps, moeq__sb *sb) {
    enum { C_LAYER, C_KIND, C_STATUS, C_GROUP, C_FORMAT, C_SCHEME, C_WEIGHTS, C_INPUTS, NCOL };
    static const char *const heads[NCOL] = {"LAYER",  "KIND",   "STATUS",  "GROUP",
                                            "FORMAT", "SCHEME", "WEIGHTS", "INPUTS"};
    size_t width[NCOL];
    for (int c = 0; c < NCOL; c++) width[c] = strlen(heads[c]);
    char(*wsum)[96] = moeq__calloc(ps->n_lines ? ps->n_lines : 1, sizeof *wsum);
    char(*asum)[96] = moeq__calloc(ps->n_lines ? ps->n_lines : 1, sizeof *asum);
    if (!wsum || !asum) {
        moeq__free(wsum);
        moeq__free(asum);
        sb->failed = true;
        return;
    }
    for (uint32_t i = 0; i < ps->n_lines; i++) {
        const plan_line *ln = &ps->lines[i];
        bool quant = !ln->error && ln->res.status == MOEQ_MATCH_QUANTIZED;
        strcpy(wsum[i], "-");
        strcpy(asum[i], "-");
        if (quant && ln->res.weights) moeq_quant_args_summary(ln->res.weights, wsum[i], 96);
        if (quant && ln->res.input_activations) {
            moeq_quant_args_summary(ln->res.input_activations, asum[i], 96);
        }
        size_t w[NCOL] = {ln->name_len,
                          ln->moe ? 3 : 6,
                          strlen(status_word(ln)),
                          quant ? strlen(ln->res.group_name) : 1,
                          quant ? strlen(moeq_format_name(ln->res.format)) : 1,
                          ln->moe && ln->scheme >= 0 ? strlen(moeq_scheme_name(ln->scheme)) : 1,
                          strlen(wsum[i]),
                          strlen(asum[i])};
        if (ln->moe) w[C_LAYER] += 20; /* " (256 experts)" */
        for (int c = 0; c < NCOL; c++) {
            if (w[c] > width[c]) width[c] = w[c];
        }
    }
    for (int c = 0; c < NCOL; c++)
        cell(sb, heads[c], strlen(heads[c]), c == NCOL - 1 ? 0 : width[c]);
    sb->len -= 2; /* no trailing spaces */
    moeq__sb_putc(sb, '\n');
    for (uint32_t i = 0; i < ps->n_lines; i++) {
        const plan_line *ln = &ps->lines[i];
        bool quant = !ln->error && ln->res.status == MOEQ_MATCH_QUANTIZED;
        char layer[600];
        int n = snprintf(layer, sizeof layer, "%.*s", (int)ln->name_len, ln->name);
        if (ln->moe) {
            n += snprintf(layer + n, sizeof layer - (size_t)n, " (%u experts)", ln->num_experts);
        }
        cell(sb, layer, strlen(layer), width[C_LAYER]);
        cell(sb, ln->moe ? "moe" : "linear", ln->moe ? 3 : 6, width[C_KIND]);
        const char *st = status_word(ln);
        cell(sb, st, strlen(st), width[C_STATUS]);
        const char *g = quant ? ln->res.group_name : "-";
        cell(sb, g, strlen(g), width[C_GROUP]);
        const char *f = quant ? moeq_format_name(ln->res.format) : "-";
        cell(sb, f, strlen(f), width[C_FORMAT]);
        const char *sc = ln->moe && ln->scheme >= 0 ? moeq_scheme_name(ln->scheme) : "-";
        cell(sb, sc, strlen(sc), width[C_SCHEME]);
        cell(sb, wsum[i], strlen(wsum[i]), width[C_WEIGHTS]);
        moeq__sb_puts(sb, asum[i]);
        moeq__sb_putc(sb, '\n');
        if (ln->res.status == MOEQ_MATCH_IGNORED && !ln->error) {
            moeq__sb_printf(sb, "    ignored by ignore[%d] \"%s\"\n", ln->res.ignore_index,
                            ln->res.target);
        }
        if (ln->warning) moeq__sb_printf(sb, "    warning: %s\n", ln->warning);
        if (ln->error) moeq__sb_printf(sb, "    error: %s\n", ln->error);
    }
    moeq__free(wsum);
    moeq__free(asum);
}

moeq_status moeq_plan(const moeq_config *cfg, const char *layers, size_t len,
                      const moeq_plan_options *opts, char **out_text, uint32_t *out_errors,
                      moeq_error *err) {
    if (out_text) *out_text = NULL;
    if (out_errors) *out_errors = 0;
    if (!cfg || (!layers && len) || !out_text) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL",
                           !cfg        ? "config"
                           : !out_text ? "out_text"
                                       : "layers");
    }
    if (!cfg->matcher) return moeq__error(err, MOEQ_STATUS_STATE, "config has no matcher");
    if (opts && opts->resolve) {
        const moeq_resolve_options *ro = opts->resolve;
        if (ro->precedence != MOEQ_PRECEDENCE_CT && ro->precedence != MOEQ_PRECEDENCE_ENGINE) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "precedence %d is not CT (0) or ENGINE (1)", (int)ro->precedence);
        }
    }
    plan_state ps;
    memset(&ps, 0, sizeof ps);
    ps.cfg = cfg;
    moeq__match_scratch *s = NULL;
    moeq_status st = parse_lines(&ps, layers ? layers : "", len, err);
    if (st == MOEQ_STATUS_OK) st = moeq__match_scratch_create(cfg->matcher, &s, err);
    if (st != MOEQ_STATUS_OK) goto done;

    ps.weights_json = moeq__calloc(cfg->n_groups ? cfg->n_groups : 1, sizeof(char *));
    ps.input_json = moeq__calloc(cfg->n_groups ? cfg->n_groups : 1, sizeof(char *));
    if (!ps.weights_json || !ps.input_json) goto nomem;
    for (uint32_t g = 0; g < cfg->n_groups; g++) {
        const moeq__group *grp = &cfg->groups[g];
        ps.weights_json[g] = args_json_string(grp->has_weights ? &grp->weights : NULL);
        ps.input_json[g] = args_json_string(grp->has_input ? &grp->input : NULL);
        if (!ps.weights_json[g] || !ps.input_json[g]) goto nomem;
    }

    uint32_t errors = 0;
    for (uint32_t i = 0; i < ps.n_lines; i++) {
        if (plan_one(&ps, s, &ps.lines[i], opts) != MOEQ_STATUS_OK) goto nomem;
        if (ps.lines[i].error) errors++;
    }

    moeq__sb sb;
    moeq__sb_init(&sb);
    if (opts && opts->json) {
        emit_json(&ps, &sb);
    } else {
        emit_table(&ps, &sb);
    }
    char *text = moeq__sb_take(&sb);
    if (!text) goto nomem;
    *out_text = text;
    if (out_errors) *out_errors = errors;
    st = MOEQ_STATUS_OK;
    goto done;
nomem:
    st = moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory while planning");
done:
    moeq__match_scratch_destroy(s);
    free_state(&ps);
    return st;
}

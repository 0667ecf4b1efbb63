/*
 * resolve.c - layer name -> group, weight args, input args, format.
 *
 * One name: ignore first (ignore always wins), then the winning target under
 * the chosen precedence (compressed-tensors or engine order; the other order
 * is computed too, and a disagreement is flagged).  Fused names (qkv_proj,
 * gate_up_proj) resolve each shard, and the shards must agree.  A MoE layer
 * resolves every projection of every expert, not only expert 0.
 */
#include "resolve/resolve.h"

#include "config/match.h"

#include <stdio.h>
#include <string.h>

static const char *const k_default_qkv[] = {"q_proj", "k_proj", "v_proj"};
static const char *const k_default_gate_up[] = {"gate_proj", "up_proj"};
static const moeq_fused_name k_default_fused[] = {
    {"qkv_proj", 3, k_default_qkv},
    {"gate_up_proj", 2, k_default_gate_up},
};

const moeq_fused_name *moeq__resolve_default_fused(uint32_t *n) {
    *n = (uint32_t)MOEQ__ARRAY_LEN(k_default_fused);
    return k_default_fused;
}

static const char *const k_default_proj[3] = {"gate_proj", "up_proj", "down_proj"};

/* Python-compatible module names are UTF-8; PCRE2 runs with the UTF check
 * off, so the check happens here, once per name. */
static bool valid_utf8(const unsigned char *s, size_t n) {
    size_t i = 0;
    /* Module names are nearly always ASCII: check 8 bytes at a time. */
    while (i + 8 <= n) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        /* high bit set, or a zero byte */
        if ((w & 0x8080808080808080ull) ||
            ((w - 0x0101010101010101ull) & ~w & 0x8080808080808080ull)) {
            break;
        }
        i += 8;
    }
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            if (c == 0) return false;
            i++;
            continue;
        }
        size_t len;
        uint32_t cp;
        if ((c & 0xE0) == 0xC0) {
            len = 2;
            cp = c & 0x1Fu;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3;
            cp = c & 0x0Fu;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4;
            cp = c & 0x07u;
        } else {
            return false;
        }
        if (i + len > n) return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i + k] & 0x3Fu);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return false;
        }
        i += len;
    }
    return true;
}

static void fill_group(const moeq_config *cfg, int32_t target, moeq_resolution *out) {
    const moeq__target_info *t = moeq__matcher_target(cfg->matcher, (uint32_t)target);
    const moeq__group *g = &cfg->groups[t->group];
    out->status = MOEQ_MATCH_QUANTIZED;
    out->group_index = (int32_t)t->group;
    out->group_name = g->name;
    out->target = t->text;
    out->format = moeq__group_format(cfg, g);
    out->weights = g->has_weights ? &g->weights : NULL;
    out->input_activations = g->has_input ? &g->input : NULL;
    out->output_activations = g->has_output ? &g->output : NULL;
}

static void clear_resolution(moeq_resolution *out) {
    memset(out, 0, sizeof *out);
    out->status = MOEQ_MATCH_UNMATCHED;
    out->group_index = -1;
    out->ignore_index = -1;
    out->other_group_index = -1;
    out->format = MOEQ_FORMAT_NONE;
}

moeq_status moeq__resolve_one(const moeq_config *cfg, moeq__match_scratch *s, const char *name,
                              size_t len, int32_t kind, int32_t precedence, moeq_resolution *out,
                              moeq_error *err) {
    clear_resolution(out);
    int32_t ign = -1;
    moeq_status st = moeq__match_ignore(cfg->matcher, s, name, len, kind, &ign, err);
    if (st != MOEQ_STATUS_OK) return st;
    if (ign >= 0) {
        out->status = MOEQ_MATCH_IGNORED;
        out->ignore_index = ign;
        out->target = cfg->ignore[ign];
        return MOEQ_STATUS_OK;
    }
    int32_t ct = -1, engine = -1;
    st = moeq__match_targets(cfg->matcher, s, name, len, kind, &ct, &engine, err);
    if (st != MOEQ_STATUS_OK) return st;
    int32_t chosen = precedence == MOEQ_PRECEDENCE_ENGINE ? engine : ct;
    int32_t other = precedence == MOEQ_PRECEDENCE_ENGINE ? ct : engine;
    if (chosen < 0) return MOEQ_STATUS_OK; /* unmatched */
    fill_group(cfg, chosen, out);
    if (other >= 0) {
        uint32_t og = moeq__matcher_target(cfg->matcher, (uint32_t)other)->group;
        if ((int32_t)og != out->group_index) {
            out->flags |= MOEQ_RESOLVE_ORDER_DISAGREES;
            out->other_group_index = (int32_t)og;
        }
    }
    return MOEQ_STATUS_OK;
}

bool moeq__args_equal(const moeq_quant_args *a, const moeq_quant_args *b) {
    if (!a || !b) return a == b;
    return a->num_bits == b->num_bits && a->type == b->type && a->symmetric == b->symmetric &&
           a->group_size == b->group_size && a->strategy == b->strategy &&
           a->block_rows == b->block_rows && a->block_cols == b->block_cols &&
           a->dynamic == b->dynamic &&
           moeq_actorder_is_group(a->actorder) == moeq_actorder_is_group(b->actorder) &&
           (a->actorder == MOEQ_ACTORDER_NONE) == (b->actorder == MOEQ_ACTORDER_NONE) &&
           a->scale_dtype == b->scale_dtype && a->zp_dtype == b->zp_dtype;
}

bool moeq__resolutions_agree(const moeq_resolution *a, const moeq_resolution *b) {
    bool qa = a->status == MOEQ_MATCH_QUANTIZED, qb = b->status == MOEQ_MATCH_QUANTIZED;
    if (qa != qb) return false;
    if (!qa) return true; /* ignored and unmatched both mean "not quantized" */
    if (a->group_index == b->group_index) return true;
    return a->format == b->format && moeq__args_equal(a->weights, b->weights) &&
           moeq__args_equal(a->input_activations, b->input_activations);
}

/* Short description of an outcome for error lists: "group_1", "ignored by
 * ignore[3] \"re:...\"", "unmatched". */
static void describe(const moeq_config *cfg, const moeq_resolution *r, char *buf, size_t n) {
    if (r->status == MOEQ_MATCH_QUANTIZED) {
        char args[96] = "no weights";
        if (r->weights) moeq_quant_args_summary(r->weights, args, sizeof args);
        snprintf(buf, n, "group %s (%s, %s)", r->group_name, args, moeq_format_name(r->format));
    } else if (r->status == MOEQ_MATCH_IGNORED) {
        snprintf(buf, n, "ignored by ignore[%d] \"%s\"", r->ignore_index,
                 cfg->ignore[r->ignore_index]);
    } else {
        snprintf(buf, n, "unmatched (not quantized)");
    }
}

static const moeq_fused_name *find_fused(const moeq_resolve_options *opts, const char *name,
                                         size_t len, size_t *suffix_at) {
    if (opts && opts->no_fused) return NULL;
    const moeq_fused_name *rules = k_default_fused;
    uint32_t n = (uint32_t)MOEQ__ARRAY_LEN(k_default_fused);
    if (opts && opts->n_fused > 0 && opts->fused) {
        rules = opts->fused;
        n = opts->n_fused;
    }
    /* The last dotted component must equal the fused name exactly. */
    size_t start = len;
    while (start > 0 && name[start - 1] != '.') start--;
    for (uint32_t i = 0; i < n; i++) {
        const char *f = rules[i].fused;
        if (!f || rules[i].n_shards == 0 || !rules[i].shards) continue;
        if (strlen(f) == len - start && memcmp(name + start, f, len - start) == 0) {
            *suffix_at = start;
            return &rules[i];
        }
    }
    return NULL;
}

static moeq_status resolve_fused(const moeq_config *cfg, moeq__match_scratch *s, const char *name,
                                 int32_t kind, int32_t precedence, const moeq_fused_name *rule,
                                 size_t at, moeq_resolution *out, moeq_error *err) {
    moeq__sb nm;
    moeq__sb_init(&nm);
    moeq_resolution first;
    bool agree = true;
    moeq_status st = MOEQ_STATUS_OK;
    moeq_resolution *each = moeq__calloc(rule->n_shards, sizeof *each);
    if (!each) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory resolving %s", name);
    for (uint32_t i = 0; i < rule->n_shards; i++) {
        nm.len = 0;
        moeq__sb_append(&nm, name, at);
        moeq__sb_puts(&nm, rule->shards[i] ? rule->shards[i] : "");
        if (nm.failed) {
            st = moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory resolving %s", name);
            goto done;
        }
        st = moeq__resolve_one(cfg, s, nm.data, nm.len, kind, precedence, &each[i], err);
        if (st != MOEQ_STATUS_OK) goto done;
        if (i == 0)
            first = each[0];
        else if (!moeq__resolutions_agree(&first, &each[i]))
            agree = false;
    }
    if (!agree) {
        moeq__sb msg;
        moeq__sb_init(&msg);
        for (uint32_t i = 0; i < rule->n_shards; i++) {
            char d[256];
            describe(cfg, &each[i], d, sizeof d);
            moeq__sb_printf(&msg, "%s%s -> %s", i ? "; " : "", rule->shards[i], d);
        }
        st = moeq__error(err, MOEQ_STATUS_AMBIGUOUS,
                         "fused layer \"%s\": its shards resolve differently (%s); a fused "
                         "layer needs one scheme for all of them",
                         name, msg.data ? msg.data : "");
        moeq__sb_free(&msg);
        goto done;
    }
    *out = first;
    out->flags |= MOEQ_RESOLVE_FUSED;
done:
    moeq__free(each);
    moeq__sb_free(&nm);
    return st;
}

moeq_status moeq__resolve_name(const moeq_config *cfg, moeq__match_scratch *s, const char *name,
                               size_t len, int32_t kind, const moeq_resolve_options *opts,
                               moeq_resolution *out, moeq_error *err) {
    int32_t precedence = opts ? opts->precedence : MOEQ_PRECEDENCE_CT;
    if (!valid_utf8((const unsigned char *)name, len)) {
        clear_resolution(out);
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "layer name is not valid UTF-8 (or contains a NUL byte)");
    }
    size_t at = 0;
    const moeq_fused_name *rule = find_fused(opts, name, len, &at);
    if (rule) return resolve_fused(cfg, s, name, kind, precedence, rule, at, out, err);
    return moeq__resolve_one(cfg, s, name, len, kind, precedence, out, err);
}

moeq_status moeq__resolve_options_check(const moeq_resolve_options *opts, moeq_error *err) {
    if (!opts) return MOEQ_STATUS_OK;
    if (opts->precedence != MOEQ_PRECEDENCE_CT && opts->precedence != MOEQ_PRECEDENCE_ENGINE) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "precedence %d is not CT (0) or ENGINE (1)", (int)opts->precedence);
    }
    if (opts->n_fused > 0 && !opts->fused) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "n_fused is %u but fused is NULL",
                           opts->n_fused);
    }
    for (uint32_t i = 0; i < opts->n_fused; i++) {
        const moeq_fused_name *f = &opts->fused[i];
        for (uint32_t k = 0; f->shards && k < f->n_shards; k++) {
            if (!f->shards[k]) {
                return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "fused[%u].shards[%u] is NULL", i,
                                   k);
            }
        }
    }
    return MOEQ_STATUS_OK;
}

static moeq_status check_args(const moeq_config *cfg, const void *name, int32_t kind,
                              const moeq_resolve_options *opts, const moeq_resolution *out,
                              moeq_error *err) {
    if (!cfg || !name || !out) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL",
                           !cfg    ? "config"
                           : !name ? "layer name"
                                   : "output resolution");
    }
    if (kind < MOEQ_MODULE_LINEAR || kind > MOEQ_MODULE_OTHER) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "module kind %d is not one of LINEAR (0), EXPERT (1), OTHER (2)",
                           (int)kind);
    }
    moeq_status st = moeq__resolve_options_check(opts, err);
    if (st != MOEQ_STATUS_OK) return st;
    if (!cfg->matcher) {
        return moeq__error(err, MOEQ_STATUS_STATE, "config has no compiled matcher");
    }
    return MOEQ_STATUS_OK;
}

moeq_status moeq_resolve(const moeq_config *cfg, const char *name, int32_t kind,
                         const moeq_resolve_options *opts, moeq_resolution *out, moeq_error *err) {
    moeq_status st = check_args(cfg, name, kind, opts, out, err);
    if (st != MOEQ_STATUS_OK) return st;
    moeq__match_scratch *s = NULL;
    st = moeq__match_scratch_create(cfg->matcher, &s, err);
    if (st != MOEQ_STATUS_OK) return st;
    st = moeq__resolve_name(cfg, s, name, strlen(name), kind, opts, out, err);
    moeq__match_scratch_destroy(s);
    if (st != MOEQ_STATUS_OK) moeq__error_prefix(err, st, "layer \"%s\"", name);
    return st;
}

/* ---- MoE layers ------------------------------------------------------------ */

/* Distinct outcomes seen over a layer's experts, for the error report. */
typedef struct outcome {
    moeq_resolution res;
    uint32_t count;
} outcome;

static void append_ranges(moeq__sb *sb, const uint8_t *hit, uint32_t n) {
    bool first = true;
    for (uint32_t e = 0; e < n;) {
        if (!hit[e]) {
            e++;
            continue;
        }
        uint32_t f = e;
        while (e + 1 < n && hit[e + 1]) e++;
        moeq__sb_printf(sb, first ? "%u" : ",%u", f);
        if (e > f) moeq__sb_printf(sb, "-%u", e);
        first = false;
        e++;
    }
}

moeq_status moeq__resolve_moe(const moeq_config *cfg, moeq__match_scratch *s, const char *prefix,
                              uint32_t num_experts, const char *const *proj_names,
                              const moeq_resolve_options *opts, moeq_resolution *out,
                              moeq_error *err) {
    const char *const *proj = proj_names ? proj_names : k_default_proj;
    for (int p = 0; p < 3; p++) {
        if (!proj[p] || !proj[p][0] || strchr(proj[p], '.')) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "MoE layer \"%s\": projection name %d (%s) must be a non-empty "
                               "name without dots",
                               prefix, p, proj[p] ? proj[p] : "NULL");
        }
    }
    if (num_experts == 0) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "MoE layer \"%s\": num_experts must be at least 1", prefix);
    }
    if (num_experts > MOEQ__MAX_EXPERTS) {
        /* Three resolutions per expert: a huge count would run for hours. */
        return moeq__error(err, MOEQ_STATUS_LIMIT,
                           "MoE layer \"%s\": num_experts %u is over the limit of %u", prefix,
                           num_experts, MOEQ__MAX_EXPERTS);
    }
    int32_t precedence = opts ? opts->precedence : MOEQ_PRECEDENCE_CT;
    size_t plen = strlen(prefix);
    if (!valid_utf8((const unsigned char *)prefix, plen)) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "MoE prefix is not valid UTF-8");
    }

    enum { MAX_OUTCOMES = 16 };
    outcome outs[MAX_OUTCOMES];
    uint32_t n_out = 0;
    /* which[e*3+p] = outcome index of expert e, projection p */
    uint8_t *which = moeq__malloc((size_t)num_experts * 3u);
    moeq__sb nm;
    moeq__sb_init(&nm);
    if (!which) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory resolving %s", prefix);
    moeq_status st = MOEQ_STATUS_OK;
    bool overflow = false;
    uint32_t order_flags = 0;
    int32_t other_group = -1;
    for (uint32_t e = 0; e < num_experts; e++) {
        for (int p = 0; p < 3; p++) {
            nm.len = 0;
            moeq__sb_append(&nm, prefix, plen);
            moeq__sb_printf(&nm, ".%u.%s", e, proj[p]);
            if (nm.failed) {
                st = moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory resolving %s", prefix);
                goto done;
            }
            moeq_resolution r;
            st =
                moeq__resolve_one(cfg, s, nm.data, nm.len, MOEQ_MODULE_EXPERT, precedence, &r, err);
            if (st != MOEQ_STATUS_OK) {
                moeq__error_prefix(err, st, "layer \"%s\"", nm.data);
                goto done;
            }
            if (r.flags & MOEQ_RESOLVE_ORDER_DISAGREES) {
                order_flags |= MOEQ_RESOLVE_ORDER_DISAGREES;
                if (other_group < 0) other_group = r.other_group_index;
            }
            uint32_t k = 0;
            while (k < n_out && !moeq__resolutions_agree(&outs[k].res, &r)) k++;
            if (k == n_out) {
                if (n_out == MAX_OUTCOMES) {
                    overflow = true;
                    k = MAX_OUTCOMES - 1;
                } else {
                    outs[n_out].res = r;
                    outs[n_out].count = 0;
                    n_out++;
                }
            }
            outs[k].count++;
            which[(size_t)e * 3u + (size_t)p] = (uint8_t)k;
        }
    }
    if (n_out == 1) {
        *out = outs[0].res;
        /* The precedence warning holds if any expert projection disagrees. */
        out->flags |= order_flags;
        if (out->other_group_index < 0) out->other_group_index = other_group;
        goto done;
    }
    {
        moeq__sb msg;
        moeq__sb_init(&msg);
        uint8_t *hit = moeq__calloc(num_experts, 1);
        if (!hit) {
            moeq__sb_free(&msg);
            st = moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory resolving %s", prefix);
            goto done;
        }
        for (uint32_t k = 0; k < n_out; k++) {
            char d[256];
            describe(cfg, &outs[k].res, d, sizeof d);
            moeq__sb_printf(&msg, "%s%s:", k ? "; " : "", d);
            for (int p = 0; p < 3; p++) {
                uint32_t cnt = 0;
                for (uint32_t e = 0; e < num_experts; e++) {
                    hit[e] = which[(size_t)e * 3u + (size_t)p] == k;
                    cnt += hit[e];
                }
                if (!cnt) continue;
                moeq__sb_printf(&msg, " %s of expert%s ", proj[p], cnt > 1 ? "s" : "");
                append_ranges(&msg, hit, num_experts);
            }
        }
        moeq__free(hit);
        st = moeq__error(err, MOEQ_STATUS_AMBIGUOUS,
                         "MoE layer \"%s\": its %u experts' projections do not share one "
                         "quantization scheme: %s%s; every projection of every expert must "
                         "resolve to the same weight args, input args and format",
                         prefix, num_experts, msg.data ? msg.data : "",
                         overflow ? " (and more)" : "");
        moeq__sb_free(&msg);
    }
done:
    moeq__free(which);
    moeq__sb_free(&nm);
    return st;
}

moeq_status moeq_resolve_moe(const moeq_config *cfg, const char *prefix, uint32_t num_experts,
                             const char *const *proj_names, const moeq_resolve_options *opts,
                             moeq_resolution *out, moeq_error *err) {
    moeq_status st = check_args(cfg, prefix, MOEQ_MODULE_EXPERT, opts, out, err);
    if (st != MOEQ_STATUS_OK) return st;
    clear_resolution(out);
    moeq__match_scratch *s = NULL;
    st = moeq__match_scratch_create(cfg->matcher, &s, err);
    if (st != MOEQ_STATUS_OK) return st;
    st = moeq__resolve_moe(cfg, s, prefix, num_experts, proj_names, opts, out, err);
    moeq__match_scratch_destroy(s);
    return st;
}

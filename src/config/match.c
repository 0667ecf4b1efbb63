/*
 * match.c - compiles and applies target and ignore patterns.  The only file
 * that includes pcre2.h.
 *
 * Semantics follow compressed-tensors (spec: compressed-tensors-format.md 5):
 * - "re:<pattern>" is a Python regex applied with re.match: anchored at the
 *   start of the module name only (compiled with PCRE2_ANCHORED);
 * - any other string is an exact, full module name, and is also tried as a
 *   class name against the module kind the caller states (Linear, FusedMoE,
 *   ...), since a C library has no module classes to look at.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "config/match.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Class names moeq understands, and the module kinds they stand for.
 * "Linear" covers expert projections too: in Hugging Face models every
 * expert projection is an nn.Linear, and engines map Linear onto FusedMoE. */
static const struct {
    const char *name;
    moeq__kind_mask kinds;
} k_classes[] = {
    {"Linear", (1u << MOEQ_MODULE_LINEAR) | (1u << MOEQ_MODULE_EXPERT)},
    {"FusedMoE", 1u << MOEQ_MODULE_EXPERT},
    {"RoutedExperts", 1u << MOEQ_MODULE_EXPERT},
    {"DeepEPMoE", 1u << MOEQ_MODULE_EXPERT},
};

/* Literal text a pattern's matches must contain, found when it is compiled;
 * checking it first lets most names skip the regex engine. */
#define MOEQ__LITERAL_MAX 64

typedef struct pattern {
    pcre2_code *code; /* NULL for exact entries */
    const char *text; /* as written (owned by the config) */
    bool jit;         /* JIT-compiled: call pcre2_jit_match directly */
    size_t prefix_len, required_len;
    char prefix[MOEQ__LITERAL_MAX];   /* every match starts with this */
    char required[MOEQ__LITERAL_MAX]; /* every match contains this */
} pattern;

/* Open-addressing hash set of exact strings -> first entry index. */
typedef struct exact_table {
    uint32_t cap; /* power of two, 0 when empty */
    size_t min_len, max_len; /* names outside [min_len, max_len] cannot be in it */
    int32_t *slots;
    const char *const *keys; /* entry index -> string */
} exact_table;

struct moeq__matcher {
    uint32_t n_targets;
    moeq__target_info *targets; /* effective map, insertion order */
    pattern *target_patterns;   /* parallel to targets */
    uint32_t *regex_ct_order;   /* regex target indices sorted by text */
    uint32_t n_regex;
    uint32_t *class_order; /* class-capable targets, insertion order */
    uint32_t n_class;
    const char **target_keys; /* exact texts for the hash table */
    exact_table target_exact;

    uint32_t n_ignore;
    pattern *ignore;
    moeq__kind_mask *ignore_class_kinds;
    uint32_t *ignore_regex; /* indices of regex ignore entries, config order */
    uint32_t n_ignore_regex;
    const char **ignore_keys;
    exact_table ignore_exact;

    pcre2_match_context *mctx;
};

struct moeq__match_scratch {
    pcre2_match_data *md;
};

/* ---- exact-name hash table ---------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static moeq_status exact_table_build(exact_table *t, const char *const *keys, uint32_t n,
                                     const bool *use) {
    t->cap = 0;
    t->slots = NULL;
    t->keys = keys;
    uint32_t count = 0;
    for (uint32_t i = 0; i < n; i++) count += use[i] ? 1u : 0u;
    if (count == 0) return MOEQ_STATUS_OK;
    uint32_t cap = 8;
    while (cap < count * 2u) cap *= 2u;
    t->slots = moeq__malloc(sizeof(int32_t) * cap);
    if (!t->slots) return MOEQ_STATUS_NOMEM;
    for (uint32_t i = 0; i < cap; i++) t->slots[i] = -1;
    t->cap = cap;
    t->min_len = SIZE_MAX;
    t->max_len = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!use[i]) continue;
        size_t len = strlen(keys[i]);
        if (len < t->min_len) t->min_len = len;
        if (len > t->max_len) t->max_len = len;
        uint32_t slot = (uint32_t)hash_bytes(keys[i], len) & (cap - 1u);
        for (;;) {
            int32_t cur = t->slots[slot];
            if (cur < 0) {
                t->slots[slot] = (int32_t)i;
                break;
            }
            if (strcmp(keys[cur], keys[i]) == 0) break; /* keep the first */
            slot = (slot + 1u) & (cap - 1u);
        }
    }
    return MOEQ_STATUS_OK;
}

static int32_t exact_table_find(const exact_table *t, const char *name, size_t len) {
    if (t->cap == 0 || len < t->min_len || len > t->max_len) return -1;
    uint32_t slot = (uint32_t)hash_bytes(name, len) & (t->cap - 1u);
    for (;;) {
        int32_t cur = t->slots[slot];
        if (cur < 0) return -1;
        const char *k = t->keys[cur];
        if (strncmp(k, name, len) == 0 && k[len] == '\0') return cur;
        slot = (slot + 1u) & (t->cap - 1u);
    }
}

/* ---- building ---------------------------------------------------------- */

static bool is_regex(const char *text) {
    return strncmp(text, "re:", 3) == 0;
}

static moeq__kind_mask class_kinds_of(const char *text) {
    for (size_t i = 0; i < MOEQ__ARRAY_LEN(k_classes); i++) {
        if (strcmp(text, k_classes[i].name) == 0) return k_classes[i].kinds;
    }
    return 0;
}

/* Looks like a Python class name (CamelCase, no dots) that moeq does not know. */
static bool looks_like_unknown_class(const char *text) {
    if (text[0] < 'A' || text[0] > 'Z') return false;
    for (const char *p = text; *p; p++) {
        if (*p == '.' || *p == ':' || *p == '*') return false;
    }
    return class_kinds_of(text) == 0;
}

/* Conservatively finds literal text every match of the Python regex `re`
 * must contain: the longest run of plain characters at the top level of a
 * pattern without top-level alternation (groups, classes, escapes such as \d
 * and quantified atoms only end a run), and the run it starts with, if any.
 * Dropping a literal is always safe; inventing one never happens: inline
 * flags, \Q, braces and non-ASCII text switch the search off. */
static void extract_literals(pattern *p, const char *re) {
    p->prefix_len = p->required_len = 0;
    for (const char *q = re; *q; q++) {
        if ((unsigned char)*q >= 0x80) return;
        if (q[0] == '(' && q[1] == '?' &&
            ((q[2] >= 'a' && q[2] <= 'z') || (q[2] >= 'A' && q[2] <= 'Z' && q[2] != 'P'))) {
            return; /* inline flags such as (?i) change what literals mean */
        }
        if (q[0] == '\\' && q[1] == 'Q') return;
        if (q[0] == '\\' && q[1]) q++;
    }
    char run[MOEQ__LITERAL_MAX];
    size_t run_len = 0;
    bool run_at_start = true; /* the current run began at the start of the pattern */
    const char *q = re;
    if (*q == '^') q++;
    bool first_run = true;
#define END_RUN()                                                                                  \
    do {                                                                                           \
        if (first_run && run_at_start && run_len > p->prefix_len) {                                \
            memcpy(p->prefix, run, run_len);                                                       \
            p->prefix_len = run_len;                                                               \
        }                                                                                          \
        if (run_len > p->required_len) {                                                           \
            memcpy(p->required, run, run_len);                                                     \
            p->required_len = run_len;                                                             \
        }                                                                                          \
        first_run = false;                                                                         \
        run_at_start = false;                                                                      \
        run_len = 0;                                                                               \
    } while (0)
    while (*q) {
        char c = *q;
        if (c == '|') { /* top-level alternation: nothing is required */
            p->prefix_len = p->required_len = 0;
            return;
        }
        if (c == '(' || c == '[') {
            END_RUN();
            /* Skip the group or class; its content is not relied on. */
            int depth = 0;
            bool in_class = false;
            for (; *q; q++) {
                if (*q == '\\' && q[1]) {
                    q++;
                    continue;
                }
                if (in_class) {
                    if (*q == ']') in_class = false;
                    if (!in_class && depth == 0) break;
                    continue;
                }
                if (*q == '[') {
                    in_class = true;
                    if (q[1] == '^') q++;
                    if (q[1] == ']') q++; /* a leading ] is literal inside a class */
                } else if (*q == '(') {
                    depth++;
                } else if (*q == ')') {
                    if (--depth == 0) break;
                }
            }
            if (*q) q++;
            continue;
        }
        if (c == '*' || c == '?' || c == '{') {
            /* The atom before is optional or repeated: it was added to the
             * run, take it back. */
            if (run_len > 0) run_len--;
            END_RUN();
            if (c == '{') {
                while (*q && *q != '}') q++;
            }
            if (*q) q++;
            continue;
        }
        if (c == '+') { /* at least once: keep the atom, but the run ends */
            END_RUN();
            q++;
            continue;
        }
        char lit;
        if (c == '\\') {
            char e = q[1];
            if ((e >= '0' && e <= '9') || (e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
                END_RUN(); /* \d, \w, \b, \x41, ...: not a plain character */
                q += 2;
                continue;
            }
            lit = e;
            q += 2;
        } else if (c == '.' || c == '^' || c == '$' || c == ')') {
            END_RUN();
            q++;
            continue;
        } else {
            lit = c;
            q++;
        }
        if (run_len < sizeof run) {
            run[run_len++] = lit;
        } else {
            END_RUN();
        }
    }
    END_RUN();
#undef END_RUN
}

static moeq_status compile_pattern(pattern *p, const char *text, const char *path,
                                   moeq_error *err) {
    p->text = text;
    p->code = NULL;
    if (!is_regex(text)) return MOEQ_STATUS_OK;
    const char *re = text + 3;
    int errcode = 0;
    PCRE2_SIZE erroffset = 0;
    /* Python's re.match anchors at the start only: PCRE2_ANCHORED, no $ added.
     * UTF mode so multi-byte characters count as one, as in Python. */
    p->code = pcre2_compile((PCRE2_SPTR)re, strlen(re), PCRE2_ANCHORED | PCRE2_UTF, &errcode,
                            &erroffset, NULL);
    if (!p->code) {
        PCRE2_UCHAR msg[256];
        if (pcre2_get_error_message(errcode, msg, sizeof msg) < 0) {
            strcpy((char *)msg, "unknown error");
        }
        if (errcode == PCRE2_ERROR_NOMEMORY || errcode == PCRE2_ERROR_HEAPLIMIT) {
            return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory compiling \"%s\"", path,
                               text);
        }
        return moeq__error(err, MOEQ_STATUS_REGEX,
                           "%s: bad regular expression \"%s\" at offset %zu: %s", path, text,
                           (size_t)erroffset, (const char *)msg);
    }
    /* JIT is an optimisation: when it is unavailable the interpreter runs.
     * MOEQ_NO_JIT=1 turns it off for memory checkers: JIT code scans
     * subjects with SIMD loads that read past their end (within the page),
     * which valgrind reports as uses of uninitialised bytes. */
    const char *no_jit = getenv("MOEQ_NO_JIT");
    size_t jit_size = 0;
    p->jit = !(no_jit && no_jit[0] == '1') &&
             pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE) == 0 &&
             pcre2_pattern_info(p->code, PCRE2_INFO_JITSIZE, &jit_size) == 0 && jit_size > 0;
    extract_literals(p, re);
    return MOEQ_STATUS_OK;
}

typedef struct raw_target {
    const char *text;
    uint32_t group;
    uint32_t order;    /* position among all (group, target) pairs */
    uint32_t in_group; /* index inside its group's list, for paths */
} raw_target;

static int cmp_raw_by_text(const void *a, const void *b) {
    const raw_target *x = a, *y = b;
    int c = strcmp(x->text, y->text);
    if (c != 0) return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int cmp_raw_by_order(const void *a, const void *b) {
    const raw_target *x = a, *y = b;
    return x->order < y->order ? -1 : x->order > y->order;
}

static moeq_status add_warning(moeq_config *cfg, const char *text) {
    char **w = moeq__realloc(cfg->warnings, sizeof(char *) * (cfg->n_warnings + 1u));
    if (!w) return MOEQ_STATUS_NOMEM;
    cfg->warnings = w;
    w[cfg->n_warnings] = moeq__strdup(text);
    if (!w[cfg->n_warnings]) return MOEQ_STATUS_NOMEM;
    cfg->n_warnings++;
    return MOEQ_STATUS_OK;
}

static moeq_status warn_unknown_class(moeq_config *cfg, const char *path, const char *text,
                                      moeq_error *err) {
    char buf[512];
    snprintf(buf, sizeof buf,
             "%s: \"%s\" looks like a class name moeq does not know (known: Linear, FusedMoE, "
             "RoutedExperts, DeepEPMoE); it matches only a module named exactly \"%s\"",
             path, text, text);
    if (add_warning(cfg, buf) != MOEQ_STATUS_OK) {
        return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory recording a warning");
    }
    return MOEQ_STATUS_OK;
}

static moeq_status build_targets(moeq__matcher *m, moeq_config *cfg, moeq_error *err) {
    uint32_t total = 0;
    for (uint32_t g = 0; g < cfg->n_groups; g++) total += cfg->groups[g].n_targets;
    size_t n_alloc = total ? total : 1;
    raw_target *raw = moeq__calloc(n_alloc, sizeof *raw);
    m->targets = moeq__calloc(n_alloc, sizeof *m->targets);
    m->target_patterns = moeq__calloc(n_alloc, sizeof *m->target_patterns);
    m->regex_ct_order = moeq__calloc(n_alloc, sizeof(uint32_t));
    m->class_order = moeq__calloc(n_alloc, sizeof(uint32_t));
    m->target_keys = moeq__calloc(n_alloc, sizeof(char *));
    bool *exact_use = moeq__calloc(n_alloc, sizeof(bool));
    moeq_status st = MOEQ_STATUS_OK;
    if (!raw || !m->targets || !m->target_patterns || !m->regex_ct_order || !m->class_order ||
        !m->target_keys || !exact_use) {
        st = moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory building the target map");
        goto done;
    }

    /* Effective map: one entry per distinct target text, at the position of
     * its first occurrence, belonging to the group of its last occurrence. */
    uint32_t k = 0;
    for (uint32_t g = 0; g < cfg->n_groups; g++) {
        for (uint32_t t = 0; t < cfg->groups[g].n_targets; t++, k++) {
            raw[k] = (raw_target){cfg->groups[g].targets[t], g, k, t};
        }
    }
    qsort(raw, total, sizeof *raw, cmp_raw_by_text);
    uint32_t n_distinct = 0;
    for (uint32_t i = 0; i < total;) {
        uint32_t j = i;
        while (j + 1 < total && strcmp(raw[j + 1].text, raw[i].text) == 0) j++;
        raw_target first = raw[i];
        first.group = raw[j].group;
        raw[n_distinct++] = first;
        i = j + 1;
    }
    qsort(raw, n_distinct, sizeof *raw, cmp_raw_by_order);

    for (uint32_t i = 0; i < n_distinct; i++) {
        const char *text = raw[i].text;
        moeq__target_info *ti = &m->targets[i];
        ti->text = text;
        ti->group = raw[i].group;
        ti->position = i;
        ti->kind = is_regex(text) ? MOEQ__TARGET_REGEX : MOEQ__TARGET_EXACT;
        ti->class_kinds = ti->kind == MOEQ__TARGET_EXACT ? class_kinds_of(text) : 0;
        m->target_keys[i] = text;
        exact_use[i] = ti->kind == MOEQ__TARGET_EXACT;
        m->n_targets = i + 1; /* patterns [0, n_targets) are freed on failure */

        /* Paths name where the text was first written. */
        char path[320];
        uint32_t first_group = 0, acc = 0;
        for (uint32_t g = 0; g < cfg->n_groups; g++) {
            if (raw[i].order < acc + cfg->groups[g].n_targets) {
                first_group = g;
                break;
            }
            acc += cfg->groups[g].n_targets;
        }
        snprintf(path, sizeof path, "config_groups.%s.targets[%u]", cfg->groups[first_group].name,
                 raw[i].in_group);
        st = compile_pattern(&m->target_patterns[i], text, path, err);
        if (st != MOEQ_STATUS_OK) goto done;
        if (ti->kind == MOEQ__TARGET_EXACT && looks_like_unknown_class(text)) {
            st = warn_unknown_class(cfg, path, text, err);
            if (st != MOEQ_STATUS_OK) goto done;
        }
        if (ti->kind == MOEQ__TARGET_REGEX) m->regex_ct_order[m->n_regex++] = i;
        if (ti->class_kinds) m->class_order[m->n_class++] = i;
    }

    /* compressed-tensors precedence among regexes: lexicographic by text.
     * Reuse raw[] as (text, index) pairs to sort with qsort. */
    for (uint32_t r = 0; r < m->n_regex; r++) {
        raw[r] = (raw_target){m->targets[m->regex_ct_order[r]].text, 0, m->regex_ct_order[r], 0};
    }
    qsort(raw, m->n_regex, sizeof *raw, cmp_raw_by_text);
    for (uint32_t r = 0; r < m->n_regex; r++) m->regex_ct_order[r] = raw[r].order;

    st = exact_table_build(&m->target_exact, m->target_keys, m->n_targets, exact_use);
    if (st != MOEQ_STATUS_OK) st = moeq__error(err, st, "out of memory building the target table");
done:
    moeq__free(raw);
    moeq__free(exact_use);
    return st;
}

static moeq_status build_ignore(moeq__matcher *m, moeq_config *cfg, moeq_error *err) {
    uint32_t n = cfg->n_ignore;
    m->n_ignore = n;
    m->ignore = moeq__calloc(n ? n : 1, sizeof *m->ignore);
    m->ignore_class_kinds = moeq__calloc(n ? n : 1, sizeof *m->ignore_class_kinds);
    m->ignore_regex = moeq__calloc(n ? n : 1, sizeof(uint32_t));
    m->ignore_keys = moeq__calloc(n ? n : 1, sizeof(char *));
    bool *exact_use = moeq__calloc(n ? n : 1, sizeof(bool));
    if (!m->ignore || !m->ignore_class_kinds || !m->ignore_regex || !m->ignore_keys || !exact_use) {
        moeq__free(exact_use);
        return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory building the ignore list");
    }
    for (uint32_t i = 0; i < n; i++) {
        const char *text = cfg->ignore[i];
        char path[64];
        snprintf(path, sizeof path, "ignore[%u]", i);
        moeq_status st = compile_pattern(&m->ignore[i], text, path, err);
        if (st != MOEQ_STATUS_OK) {
            moeq__free(exact_use);
            return st;
        }
        m->ignore_keys[i] = text;
        if (is_regex(text)) {
            m->ignore_regex[m->n_ignore_regex++] = i;
        } else {
            exact_use[i] = true;
            m->ignore_class_kinds[i] = class_kinds_of(text);
            if (looks_like_unknown_class(text)) {
                st = warn_unknown_class(cfg, path, text, err);
                if (st != MOEQ_STATUS_OK) {
                    moeq__free(exact_use);
                    return st;
                }
            }
        }
    }
    moeq_status st = exact_table_build(&m->ignore_exact, m->ignore_keys, n, exact_use);
    moeq__free(exact_use);
    if (st != MOEQ_STATUS_OK) {
        return moeq__error(err, st, "out of memory building the ignore table");
    }
    return MOEQ_STATUS_OK;
}

moeq_status moeq__matcher_create(moeq_config *cfg, moeq_error *err) {
    cfg->matcher = NULL;
    moeq__matcher *m = moeq__calloc(1, sizeof *m);
    if (!m) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory creating the matcher");

    m->mctx = pcre2_match_context_create(NULL);
    if (!m->mctx) {
        moeq__matcher_destroy(m);
        return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory creating a match context");
    }
    /* Bounds on the work one match may do, so a hostile pattern such as
     * "re:(a+)+$" fails with MOEQ_STATUS_LIMIT instead of hanging the caller. */
    uint32_t limit = cfg->regex_match_limit ? cfg->regex_match_limit : 100000u;
    pcre2_set_match_limit(m->mctx, limit);
    pcre2_set_depth_limit(m->mctx, limit < 10000u ? limit : 10000u);
    pcre2_set_heap_limit(m->mctx, 20000u); /* KiB */

    moeq_status st = build_targets(m, cfg, err);
    if (st == MOEQ_STATUS_OK) st = build_ignore(m, cfg, err);
    if (st != MOEQ_STATUS_OK) {
        moeq__matcher_destroy(m);
        return st;
    }
    cfg->matcher = m;
    return MOEQ_STATUS_OK;
}

void moeq__matcher_destroy(moeq__matcher *m) {
    if (!m) return;
    if (m->target_patterns) {
        for (uint32_t i = 0; i < m->n_targets; i++) pcre2_code_free(m->target_patterns[i].code);
    }
    if (m->ignore) {
        for (uint32_t i = 0; i < m->n_ignore; i++) pcre2_code_free(m->ignore[i].code);
    }
    pcre2_match_context_free(m->mctx);
    moeq__free(m->targets);
    moeq__free(m->target_patterns);
    moeq__free(m->regex_ct_order);
    moeq__free(m->class_order);
    moeq__free(m->target_keys);
    moeq__free(m->target_exact.slots);
    moeq__free(m->ignore);
    moeq__free(m->ignore_class_kinds);
    moeq__free(m->ignore_regex);
    moeq__free(m->ignore_keys);
    moeq__free(m->ignore_exact.slots);
    moeq__free(m);
}

/* ---- matching ------------------------------------------------------------- */

moeq_status moeq__match_scratch_create(const moeq__matcher *m, moeq__match_scratch **out,
                                       moeq_error *err) {
    (void)m;
    *out = NULL;
    moeq__match_scratch *s = moeq__calloc(1, sizeof *s);
    if (s) s->md = pcre2_match_data_create(1, NULL);
    if (!s || !s->md) {
        moeq__match_scratch_destroy(s);
        return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory creating match data");
    }
    *out = s;
    return MOEQ_STATUS_OK;
}

void moeq__match_scratch_destroy(moeq__match_scratch *s) {
    if (!s) return;
    pcre2_match_data_free(s->md);
    moeq__free(s);
}

/* Whether `hay` (n bytes) contains `needle` (m > 0 bytes). */
static bool contains(const char *hay, size_t n, const char *needle, size_t m) {
    if (m > n) return false;
    const char *end = hay + (n - m) + 1;
    for (const char *p = hay; p < end;) {
        p = memchr(p, needle[0], (size_t)(end - p));
        if (!p) return false;
        if (memcmp(p, needle, m) == 0) return true;
        p++;
    }
    return false;
}

/* 1 = match, 0 = no match, or a negative moeq_status after filling err. */
static int regex_match(const moeq__matcher *m, moeq__match_scratch *s, const pattern *p,
                       const char *name, size_t len, moeq_error *err) {
    /* Literal prefilter: most names fail here without entering PCRE2. */
    if (p->prefix_len && (len < p->prefix_len || memcmp(name, p->prefix, p->prefix_len) != 0)) {
        return 0;
    }
    if (p->required_len && !contains(name, len, p->required, p->required_len)) return 0;
    /* Names were checked for valid UTF-8 by the caller (resolve.c). */
    int rc =
        p->jit
            ? pcre2_jit_match(p->code, (PCRE2_SPTR)name, len, 0, PCRE2_NO_UTF_CHECK, s->md, m->mctx)
            : pcre2_match(p->code, (PCRE2_SPTR)name, len, 0, PCRE2_NO_UTF_CHECK, s->md, m->mctx);
    if (rc >= 0) return 1;
    if (rc == PCRE2_ERROR_NOMATCH || rc == PCRE2_ERROR_PARTIAL) return 0;
    if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
        rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        moeq__error(err, MOEQ_STATUS_LIMIT,
                    "pattern \"%s\" hit its backtracking limit on \"%.*s\" (catastrophic "
                    "backtracking?); simplify the pattern or raise regex_match_limit",
                    p->text, (int)(len > 200 ? 200 : len), name);
        return -(int)MOEQ_STATUS_LIMIT;
    }
    if (rc == PCRE2_ERROR_NOMEMORY) {
        moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory matching \"%s\"", p->text);
        return -(int)MOEQ_STATUS_NOMEM;
    }
    PCRE2_UCHAR msg[256];
    if (pcre2_get_error_message(rc, msg, sizeof msg) < 0) strcpy((char *)msg, "unknown");
    moeq__error(err, MOEQ_STATUS_INTERNAL, "matching \"%s\" failed: %s", p->text,
                (const char *)msg);
    return -(int)MOEQ_STATUS_INTERNAL;
}

moeq_status moeq__match_ignore(const moeq__matcher *m, moeq__match_scratch *s, const char *name,
                               size_t len, int32_t kind, int32_t *out_index, moeq_error *err) {
    int32_t best = exact_table_find(&m->ignore_exact, name, len);
    /* Regex entries only matter if they come before the exact hit. */
    for (uint32_t k = 0; k < m->n_ignore_regex; k++) {
        uint32_t i = m->ignore_regex[k];
        if (best >= 0 && (int32_t)i > best) break;
        int r = regex_match(m, s, &m->ignore[i], name, len, err);
        if (r < 0) return (moeq_status)(-r);
        if (r == 1) {
            best = (int32_t)i;
            break;
        }
    }
    if (best < 0 && kind >= 0 && kind < 32) {
        for (uint32_t i = 0; i < m->n_ignore; i++) {
            if (m->ignore_class_kinds[i] & (1u << kind)) {
                best = (int32_t)i;
                break;
            }
        }
    }
    *out_index = best;
    return MOEQ_STATUS_OK;
}

moeq_status moeq__match_targets(const moeq__matcher *m, moeq__match_scratch *s, const char *name,
                                size_t len, int32_t kind, int32_t *out_ct, int32_t *out_engine,
                                moeq_error *err) {
    int32_t exact = exact_table_find(&m->target_exact, name, len);
    int32_t ct = exact;
    int32_t engine = exact; /* config-order winner among name matches */

    /* Regex targets in lexicographic order.  The first match is the CT
     * winner (unless an exact name already won); the engine winner is the
     * match with the smallest insertion position, so keep scanning only
     * while an earlier-positioned match could still appear. */
    for (uint32_t k = 0; k < m->n_regex; k++) {
        uint32_t i = m->regex_ct_order[k];
        if (engine >= 0 && (int32_t)i > engine && ct >= 0) continue;
        int r = regex_match(m, s, &m->target_patterns[i], name, len, err);
        if (r < 0) return (moeq_status)(-r);
        if (r == 0) continue;
        if (ct < 0) ct = (int32_t)i;
        if (engine < 0 || (int32_t)i < engine) engine = (int32_t)i;
    }
    if (kind >= 0 && kind < 32) {
        int32_t cls = -1;
        for (uint32_t k = 0; k < m->n_class; k++) {
            uint32_t i = m->class_order[k];
            if (m->targets[i].class_kinds & (1u << kind)) {
                cls = (int32_t)i;
                break;
            }
        }
        if (ct < 0) ct = cls;
        if (engine < 0) engine = cls;
    }
    *out_ct = ct;
    *out_engine = engine;
    return MOEQ_STATUS_OK;
}

uint32_t moeq__matcher_target_count(const moeq__matcher *m) {
    return m ? m->n_targets : 0;
}

const moeq__target_info *moeq__matcher_target(const moeq__matcher *m, uint32_t i) {
    return (m && i < m->n_targets) ? &m->targets[i] : NULL;
}

/*
 * config.c - compressed-tensors quantization_config JSON -> immutable moeq_config.
 *
 * The keys, defaults, derivation order and error texts are those of
 * compressed-tensors ("CT") 0.18 (shared/spec/compressed-tensors-format.md
 * sections 1-3).  CT's own messages are kept word for word after a
 * "<json path>: " prefix, so a user can search for them; where CT's message
 * does not say which value was wrong, the value follows in parentheses.
 *
 * This is the only library file (with safetensors.c) that includes cJSON:
 * the tree is parsed, copied into moeq-owned structs and freed before
 * moeq_config_parse returns.  cJSON's own allocations do not go through
 * moeq__malloc (its hooks are process-wide and may belong to the caller).
 * What the parsed config answers (accessors, formats, versions) is
 * config_query.c's.
 */
#include "config/config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* JSON paths are built on the stack; a longer path is cut with "...". */
#define PATH_SIZE 512

/* Default PCRE2 match limit for target/ignore patterns. */
#define DEFAULT_REGEX_MATCH_LIMIT 100000u

/* ------------------------------------------------------------------------ */
/* Small string helpers                                                      */
/* ------------------------------------------------------------------------ */

static char ascii_lower(char c) {
    return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

static char ascii_upper(char c) {
    return (c >= 'a' && c <= 'z') ? (char)(c - 'a' + 'A') : c;
}

static bool ascii_case_equal(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        if (ascii_lower(*a) != ascii_lower(*b)) return false;
    }
    return *a == *b;
}

/* Index of `s` in `names` (case-insensitive: CT lower-cases enum strings), or -1. */
static int lookup_ci(const char *s, const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (ascii_case_equal(s, names[i])) return (int)i;
    }
    return -1;
}

static int lookup_exact(const char *s, const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (strcmp(s, names[i]) == 0) return (int)i;
    }
    return -1;
}

/* Marks a cut snprintf result with "..." so a truncated path is visible. */
static void mark_cut(char *buf, size_t size, int written) {
    if (written >= 0 && (size_t)written >= size && size >= 4) memcpy(buf + size - 4, "...", 4);
}

/* out = "base.key" (or "key" at the root). */
static void path_key(char *out, const char *base, const char *key) {
    int n = base[0] ? snprintf(out, PATH_SIZE, "%s.%s", base, key)
                    : snprintf(out, PATH_SIZE, "%s", key);
    mark_cut(out, PATH_SIZE, n);
}

/* out = "base[i]". */
static void path_index(char *out, const char *base, size_t i) {
    int n = snprintf(out, PATH_SIZE, "%s[%zu]", base, i);
    mark_cut(out, PATH_SIZE, n);
}

/* The shortest text that reads back as d ("4.5", not "4.5000000000000000"). */
static const char *number_text(double d, char *buf, size_t n) {
    snprintf(buf, n, "%.15g", d);
    if (strtod(buf, NULL) != d) snprintf(buf, n, "%.17g", d);
    return buf;
}

/* A short description of a JSON value for "expected X, found Y" messages. */
static const char *describe(const cJSON *v, char *buf, size_t n) {
    if (!v) {
        snprintf(buf, n, "nothing");
    } else if (cJSON_IsString(v)) {
        bool long_text = strlen(v->valuestring) > 80;
        snprintf(buf, n, "a string \"%.80s%s\"", v->valuestring, long_text ? "..." : "");
    } else if (cJSON_IsNumber(v)) {
        char num[32];
        snprintf(buf, n, "the number %s", number_text(v->valuedouble, num, sizeof num));
    } else if (cJSON_IsTrue(v)) {
        snprintf(buf, n, "true");
    } else if (cJSON_IsFalse(v)) {
        snprintf(buf, n, "false");
    } else if (cJSON_IsNull(v)) {
        snprintf(buf, n, "null");
    } else if (cJSON_IsArray(v)) {
        snprintf(buf, n, "an array");
    } else if (cJSON_IsObject(v)) {
        snprintf(buf, n, "an object");
    } else {
        snprintf(buf, n, "an invalid value");
    }
    return buf;
}

/* Appends a Python-like rendering of v (what CT prints in its messages). */
static void render_value(const cJSON *v, char *buf, size_t n, size_t *pos) {
    if (*pos >= n) return;
    int w;
    if (cJSON_IsString(v)) {
        w = snprintf(buf + *pos, n - *pos, "'%s'", v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        char num[32];
        w = snprintf(buf + *pos, n - *pos, "%s", number_text(v->valuedouble, num, sizeof num));
    } else if (cJSON_IsBool(v)) {
        w = snprintf(buf + *pos, n - *pos, "%s", cJSON_IsTrue(v) ? "True" : "False");
    } else if (cJSON_IsNull(v)) {
        w = snprintf(buf + *pos, n - *pos, "None");
    } else if (cJSON_IsArray(v)) {
        w = snprintf(buf + *pos, n - *pos, "[");
        if (w > 0) *pos += (size_t)w;
        for (const cJSON *c = v->child; c && *pos < n; c = c->next) {
            render_value(c, buf, n, pos);
            if (c->next && *pos < n) {
                w = snprintf(buf + *pos, n - *pos, ", ");
                if (w > 0) *pos += (size_t)w;
            }
        }
        w = *pos < n ? snprintf(buf + *pos, n - *pos, "]") : 0;
    } else {
        w = snprintf(buf + *pos, n - *pos, "{...}");
    }
    if (w > 0) *pos += (size_t)w;
    if (*pos >= n) *pos = n;
}

/* Python-like text of v: the string itself for a string, [a, b] for a list. */
static const char *python_text(const cJSON *v, char *buf, size_t n) {
    if (cJSON_IsString(v)) {
        snprintf(buf, n, "%s", v->valuestring);
        return buf;
    }
    size_t pos = 0;
    buf[0] = '\0';
    render_value(v, buf, n, &pos);
    return buf;
}

/* ------------------------------------------------------------------------ */
/* Name tables (all in the order of the public enums)                        */
/* ------------------------------------------------------------------------ */

static const char *const k_qtype_names[] = {"int", "float"};
/* Strategy and actorder spellings come from status.c (moeq_strategy_name,
 * moeq_actorder_name), whose tables follow the enum values. */
static const char *const k_status_names[] = {"initialized", "calibration", "frozen", "compressed",
                                             "decompressed"};
static const char *const k_online_locations[] = {"input", "output", "k_cache", "q_attn"};
static const char *const k_offline_locations[] = {"weight_input", "weight_output"};

/* torch dtype names (after removing "torch.") that moeq represents. */
static const struct {
    const char *name;
    int32_t dtype;
} k_torch_dtypes[] = {
    {"float8_e4m3fn", MOEQ_DTYPE_F8_E4M3}, {"float8_e5m2", MOEQ_DTYPE_F8_E5M2},
    {"uint8", MOEQ_DTYPE_U8},              {"int8", MOEQ_DTYPE_I8},
    {"int16", MOEQ_DTYPE_I16},             {"short", MOEQ_DTYPE_I16},
    {"int32", MOEQ_DTYPE_I32},             {"int", MOEQ_DTYPE_I32},
    {"int64", MOEQ_DTYPE_I64},             {"long", MOEQ_DTYPE_I64},
    {"uint16", MOEQ_DTYPE_U16},            {"uint32", MOEQ_DTYPE_U32},
    {"uint64", MOEQ_DTYPE_U64},            {"float16", MOEQ_DTYPE_F16},
    {"half", MOEQ_DTYPE_F16},              {"bfloat16", MOEQ_DTYPE_BF16},
    {"float32", MOEQ_DTYPE_F32},           {"float", MOEQ_DTYPE_F32},
    {"float64", MOEQ_DTYPE_F64},           {"double", MOEQ_DTYPE_F64},
    {"bool", MOEQ_DTYPE_BOOL},
};

/* Real torch dtypes moeq has no element type for: UNSUPPORTED, not SCHEMA. */
static const char *const k_torch_dtypes_unrepresentable[] = {
    "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2",
    "complex32",       "complex64",       "complex128",     "chalf",
    "cfloat",          "cdouble",         "qint8",          "quint8",
    "qint32",          "quint4x2",        "quint2x4",
};

/* Every CompressionFormat value of CT 0.20 (config/base.py; mixed-precision only at the top), i.e. what a
 * group's "format" may say.  The top level additionally accepts "fakequant". */
static int32_t format_from_name(const char *s, bool allow_fakequant) {
#define MOEQ_X_(name, value, text)                                                   \
    if (value != MOEQ_FORMAT_NONE && strcmp(s, text) == 0) {                          \
        if (value == MOEQ_FORMAT_FAKEQUANT && !allow_fakequant) return MOEQ_FORMAT_NONE; \
        return value;                                                                 \
    }
    MOEQ_FORMAT_MAP(MOEQ_X_)
#undef MOEQ_X_
    return MOEQ_FORMAT_NONE;
}

#define GROUP_FORMATS_TEXT                                                                     \
    "dense, sparse-bitmask, sparse-24-bitmask, int-quantized, float-quantized, "               \
    "naive-quantized, pack-quantized, marlin-24, nvfp4-pack-quantized, mxfp4-pack-quantized, " \
    "mxfp6-pack-quantized, mxfp8-quantized"

/* ------------------------------------------------------------------------ */
/* Parse context: errors, warnings, owned strings                            */
/* ------------------------------------------------------------------------ */

typedef struct parse_ctx {
    moeq_config *cfg;
    bool strict;
    moeq_error *err;
} parse_ctx;

static moeq_status nomem(parse_ctx *ctx) {
    return moeq__error(ctx->err, MOEQ_STATUS_NOMEM, "out of memory while parsing the quantization config");
}

static moeq_status type_error(parse_ctx *ctx, const char *path, const char *expected,
                              const cJSON *found) {
    char what[160];
    return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA, "%s: expected %s, found %s", path, expected,
                       describe(found, what, sizeof what));
}

/* Records a warning (logged once parsing succeeds).  Returns NOMEM on failure. */
static moeq_status warn(parse_ctx *ctx, const char *fmt, ...) MOEQ__PRINTF(2, 3);
static moeq_status warn(parse_ctx *ctx, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) buf[0] = '\0';
    mark_cut(buf, sizeof buf, n);
    moeq_config *cfg = ctx->cfg;
    char *msg = moeq__strdup(buf);
    if (!msg) return nomem(ctx);
    char **grown = moeq__realloc(cfg->warnings, (cfg->n_warnings + 1u) * sizeof *grown);
    if (!grown) {
        moeq__free(msg);
        return nomem(ctx);
    }
    cfg->warnings = grown;
    cfg->warnings[cfg->n_warnings++] = msg;
    return MOEQ_STATUS_OK;
}

/* Returns a config-owned copy of s, shared with any equal string already kept
 * (observer names repeat across groups). */
static moeq_status intern(parse_ctx *ctx, const char *s, const char **out) {
    moeq_config *cfg = ctx->cfg;
    for (uint32_t i = 0; i < cfg->n_strings; i++) {
        if (strcmp(cfg->strings[i], s) == 0) {
            *out = cfg->strings[i];
            return MOEQ_STATUS_OK;
        }
    }
    char *copy = moeq__strdup(s);
    if (!copy) return nomem(ctx);
    char **grown = moeq__realloc(cfg->strings, (cfg->n_strings + 1u) * sizeof *grown);
    if (!grown) {
        moeq__free(copy);
        return nomem(ctx);
    }
    cfg->strings = grown;
    cfg->strings[cfg->n_strings++] = copy;
    *out = copy;
    return MOEQ_STATUS_OK;
}

/* ------------------------------------------------------------------------ */
/* Typed access to the cJSON tree                                            */
/* ------------------------------------------------------------------------ */

/* Python's json keeps the last of duplicated keys; so do we. */
static const cJSON *get_item(const cJSON *obj, const char *key) {
    const cJSON *found = NULL;
    for (const cJSON *c = obj->child; c; c = c->next) {
        if (c->string && strcmp(c->string, key) == 0) found = c;
    }
    return found;
}

/* True when an earlier member of the same object has c's key. */
static bool is_repeated_key(const cJSON *obj, const cJSON *c) {
    for (const cJSON *p = obj->child; p && p != c; p = p->next) {
        if (p->string && strcmp(p->string, c->string) == 0) return true;
    }
    return false;
}

static size_t count_children(const cJSON *v) {
    size_t n = 0;
    for (const cJSON *c = v->child; c; c = c->next) n++;
    return n;
}

/* An exact integer within int32 (cJSON cannot tell 4 from 4.0; both are 4). */
static moeq_status want_int(parse_ctx *ctx, const char *path, const cJSON *v, int32_t *out) {
    if (!cJSON_IsNumber(v)) return type_error(ctx, path, "an integer", v);
    double d = v->valuedouble;
    if (!(d >= -2147483648.0 && d <= 2147483647.0)) {
        return type_error(ctx, path, "an integer within the int32 range", v);
    }
    int32_t i = (int32_t)d;
    if ((double)i != d) return type_error(ctx, path, "an integer", v);
    *out = i;
    return MOEQ_STATUS_OK;
}

static moeq_status want_bool(parse_ctx *ctx, const char *path, const cJSON *v, bool *out) {
    if (!cJSON_IsBool(v)) return type_error(ctx, path, "true or false", v);
    *out = cJSON_IsTrue(v) != 0;
    return MOEQ_STATUS_OK;
}

/* A string; the pointer is borrowed from the tree. */
static moeq_status want_string(parse_ctx *ctx, const char *path, const cJSON *v, const char **out) {
    if (!cJSON_IsString(v) || !v->valuestring) return type_error(ctx, path, "a string", v);
    *out = v->valuestring;
    return MOEQ_STATUS_OK;
}

/* A list of strings, copied into a new array of n owned strings.  The array
 * and its count are stored before the copies are made, so that a failure
 * half-way leaves something destroy can free. */
static moeq_status want_string_list(parse_ctx *ctx, const char *path, const cJSON *v,
                                    uint32_t *n_out, char ***out) {
    if (!cJSON_IsArray(v)) return type_error(ctx, path, "a list of strings", v);
    size_t n = count_children(v);
    if (n > UINT32_MAX) return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA, "%s: too many entries", path);
    char path_i[PATH_SIZE];
    size_t i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        if (!cJSON_IsString(c)) {
            path_index(path_i, path, i);
            return type_error(ctx, path_i, "a string", c);
        }
    }
    char **list = moeq__calloc(n, sizeof *list);
    if (!list) return nomem(ctx);
    *out = list;
    *n_out = (uint32_t)n;
    i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        list[i] = moeq__strdup(c->valuestring);
        if (!list[i]) return nomem(ctx);
    }
    return MOEQ_STATUS_OK;
}

/* Re-serialises v compactly into a moeq-owned string (NULL for null). */
static moeq_status keep_raw(parse_ctx *ctx, const cJSON *v, char **out) {
    if (cJSON_IsNull(v)) return MOEQ_STATUS_OK;
    char *text = cJSON_PrintUnformatted(v);
    if (!text) return nomem(ctx);
    *out = moeq__strdup(text);
    cJSON_free(text);
    return *out ? MOEQ_STATUS_OK : nomem(ctx);
}

/* ------------------------------------------------------------------------ */
/* Unknown and duplicated keys                                               */
/* ------------------------------------------------------------------------ */

typedef struct key_set {
    const char *what;        /* "QuantizationArgs" */
    const char *ct_behavior; /* what CT does with an unknown key here */
    const char *const *keys;
    size_t n_keys;
    const char *keys_text;   /* the same keys, for messages */
} key_set;

static const char *const k_args_keys[] = {
    "num_bits", "type",     "symmetric", "group_size", "strategy", "block_structure",
    "dynamic",  "actorder", "scale_dtype", "zp_dtype", "observer", "observer_kwargs"};
static const key_set k_args_key_set = {
    "QuantizationArgs", "compressed-tensors itself rejects unknown keys here",
    k_args_keys, MOEQ__ARRAY_LEN(k_args_keys),
    "num_bits, type, symmetric, group_size, strategy, block_structure, dynamic, actorder, "
    "scale_dtype, zp_dtype, observer, observer_kwargs"};

static const char *const k_scheme_keys[] = {"targets", "weights", "input_activations",
                                            "output_activations", "format"};
static const key_set k_scheme_key_set = {
    "config group (QuantizationScheme)", "compressed-tensors itself rejects unknown keys here",
    k_scheme_keys, MOEQ__ARRAY_LEN(k_scheme_keys),
    "targets, weights, input_activations, output_activations, format"};

static const char *const k_top_keys[] = {
    "config_groups", "format",          "quant_method",     "quantization_status",
    "global_compression_ratio", "ignore", "kv_cache_scheme", "sparsity_config",
    "transform_config", "version",     "run_compressed", "moe_sparsity_config"};
static const key_set k_top_key_set = {
    "the quantization config", "compressed-tensors ignores unknown top-level keys",
    k_top_keys, MOEQ__ARRAY_LEN(k_top_keys),
    "config_groups, format, quant_method, quantization_status, global_compression_ratio, "
    "ignore, kv_cache_scheme, sparsity_config, transform_config, version, run_compressed, "
    "moe_sparsity_config"};

/* Keys that inference engines add to the block (never in a checkpoint as
 * written by CT): always a warning, even with strict_keys. */
static const char *const k_engine_keys[] = {"packed_modules_mapping", "linear_fp8_config",
                                            "provider", "total_num_heads", "total_num_kv_heads"};

static moeq_status unknown_key(parse_ctx *ctx, const char *path, const char *key,
                               const key_set *ks) {
    char p[PATH_SIZE];
    path_key(p, path, key);
    if (ctx->strict) {
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: unknown key in %s (rejected because strict_keys is set; %s; "
                           "known keys: %s)",
                           p, ks->what, ks->ct_behavior, ks->keys_text);
    }
    return warn(ctx, "%s: unknown key in %s, ignored (%s; known keys: %s)", p, ks->what,
                ks->ct_behavior, ks->keys_text);
}

/* Warns about (or, strictly, rejects) unknown keys and warns about repeated ones. */
static moeq_status check_keys(parse_ctx *ctx, const cJSON *obj, const char *path,
                              const key_set *ks) {
    for (const cJSON *c = obj->child; c; c = c->next) {
        moeq_status st = MOEQ_STATUS_OK;
        char p[PATH_SIZE];
        if (is_repeated_key(obj, c)) {
            path_key(p, path, c->string);
            st = warn(ctx, "%s: key given more than once; the last value is used (as Python's "
                           "json module does)", p);
        } else if (lookup_exact(c->string, ks->keys, ks->n_keys) < 0) {
            if (ks == &k_top_key_set &&
                lookup_exact(c->string, k_engine_keys, MOEQ__ARRAY_LEN(k_engine_keys)) >= 0) {
                path_key(p, path, c->string);
                st = warn(ctx, "%s: key added by inference engines, not by compressed-tensors; "
                               "ignored", p);
            } else {
                st = unknown_key(ctx, path, c->string, ks);
            }
        }
        if (st != MOEQ_STATUS_OK) return st;
    }
    return MOEQ_STATUS_OK;
}

/* ------------------------------------------------------------------------ */
/* QuantizationArgs                                                          */
/* ------------------------------------------------------------------------ */

/* The fields of one QuantizationArgs as given (before derivation). */
typedef struct raw_args {
    int32_t num_bits;
    int32_t type;
    bool symmetric;
    bool has_group_size;
    int32_t group_size;
    bool has_strategy;
    int32_t strategy;
    bool has_block;
    int32_t block_rows, block_cols;
    int32_t dynamic;
    int32_t actorder;
    int32_t scale_dtype; /* MOEQ_DTYPE_INVALID when null */
    int32_t zp_dtype;    /* MOEQ_DTYPE_INVALID when null */
    const char *observer; /* borrowed; NULL when null */
} raw_args;

/* CT's field defaults (quant_args.py). */
static raw_args raw_args_defaults(void) {
    raw_args r;
    memset(&r, 0, sizeof r);
    r.num_bits = 8;
    r.type = MOEQ_QTYPE_INT;
    r.symmetric = true;
    r.strategy = MOEQ_STRATEGY_TENSOR;
    r.dynamic = MOEQ_DYNAMIC_FALSE;
    r.actorder = MOEQ_ACTORDER_NONE;
    r.scale_dtype = MOEQ_DTYPE_INVALID;
    r.zp_dtype = MOEQ_DTYPE_INVALID;
    return r;
}

static moeq_status read_num_bits(parse_ctx *ctx, const char *p, const cJSON *v, raw_args *r) {
    moeq_status st = want_int(ctx, p, v, &r->num_bits);
    if (st != MOEQ_STATUS_OK) return st;
    /* CT has no range check; a bit width of 0 or less is never meaningful. */
    if (r->num_bits <= 0) {
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: num_bits must be a positive integer, got %d", p, (int)r->num_bits);
    }
    return MOEQ_STATUS_OK;
}

static moeq_status read_type(parse_ctx *ctx, const char *p, const cJSON *v, raw_args *r) {
    const char *s = NULL;
    moeq_status st = want_string(ctx, p, v, &s);
    if (st != MOEQ_STATUS_OK) return st;
    int i = lookup_ci(s, k_qtype_names, MOEQ__ARRAY_LEN(k_qtype_names));
    if (i < 0) {
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: '%s' is not a valid QuantizationType (expected \"int\" or \"float\")",
                           p, s);
    }
    r->type = i;
    return MOEQ_STATUS_OK;
}

static moeq_status read_group_size(parse_ctx *ctx, const char *p, const cJSON *v, raw_args *r) {
    if (cJSON_IsNull(v)) return MOEQ_STATUS_OK;
    moeq_status st = want_int(ctx, p, v, &r->group_size);
    if (st != MOEQ_STATUS_OK) return st;
    if (r->group_size < -1) {
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: Invalid group size %d. Use group_size > 0 for strategy='group' and "
                           "group_size = -1 for 'channel'",
                           p, (int)r->group_size);
    }
    r->has_group_size = true;
    return MOEQ_STATUS_OK;
}

static moeq_status read_strategy(parse_ctx *ctx, const char *p, const cJSON *v, raw_args *r) {
    if (cJSON_IsNull(v)) return MOEQ_STATUS_OK;
    const char *s = NULL;
    moeq_status st = want_string(ctx, p, v, &s);
    if (st != MOEQ_STATUS_OK) return st;
    int i = MOEQ__STRATEGY_COUNT - 1;
    while (i >= 0 && !ascii_case_equal(s, moeq_strategy_name(i))) i--;
    if (i < 0) {
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: '%s' is not a valid QuantizationStrategy (expected one of: tensor, "
                           "channel, group, block, token, tensor_group, attn_head)",
                           p, s);
    }
    r->strategy = i;
    r->has_strategy = true;
    return MOEQ_STATUS_OK;
}

static bool is_python_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Python's int() of one "RxC" part: blanks around, an optional sign, then
 * decimal digits, single underscores allowed between digits ("1_024"). */
static bool parse_python_int(const char *s, size_t len, long *out) {
    size_t i = 0;
    while (i < len && is_python_space(s[i])) i++;
    bool neg = false;
    if (i < len && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    size_t digits = 0;
    long value = 0;
    while (i < len) {
        if (s[i] == '_' && digits > 0 && i + 1 < len && s[i + 1] >= '0' && s[i + 1] <= '9') {
            i++;
            continue;
        }
        if (s[i] < '0' || s[i] > '9') break;
        value = value * 10 + (s[i] - '0');
        if (value > INT32_MAX) return false; /* moeq keeps block sizes in int32 */
        i++;
        digits++;
    }
    while (i < len && is_python_space(s[i])) i++;
    if (digits == 0 || i != len) return false;
    *out = neg ? -value : value;
    return true;
}

/* block_structure: [rows, cols] of positive ints, or the legacy "RxC" string. */
static moeq_status read_block_structure(parse_ctx *ctx, const char *p, const cJSON *v,
                                        raw_args *r) {
    if (cJSON_IsNull(v)) return MOEQ_STATUS_OK;
    long dims[2] = {0, 0};
    bool ok = false;
    if (cJSON_IsString(v)) {
        /* Like CT: split on "x", every part must be an int, then 2 positive ints. */
        const char *s = v->valuestring;
        size_t parts = 0;
        ok = true;
        for (const char *start = s;; parts++) {
            const char *x = strchr(start, 'x');
            size_t len = x ? (size_t)(x - start) : strlen(start);
            long value;
            if (!parse_python_int(start, len, &value)) ok = false;
            if (ok && parts < 2) dims[parts] = value;
            if (!x) break;
            start = x + 1;
        }
        parts++;
        ok = ok && parts == 2;
    } else if (cJSON_IsArray(v) && count_children(v) == 2) {
        ok = true;
        size_t i = 0;
        for (const cJSON *c = v->child; c; c = c->next, i++) {
            /* Positive exact integers only (the range check keeps the cast defined). */
            double d = cJSON_IsNumber(c) ? c->valuedouble : 0.0;
            if (!(d >= 1.0 && d <= 2147483647.0) || (double)(long)d != d) {
                ok = false;
                break;
            }
            dims[i] = (long)d;
        }
    }
    ok = ok && dims[0] > 0 && dims[1] > 0 && dims[0] <= INT32_MAX && dims[1] <= INT32_MAX;
    if (!ok) {
        char text[160];
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: Invalid block_structure '%s'. Must be a list of positive ints "
                           "[rows, cols].",
                           p, python_text(v, text, sizeof text));
    }
    r->has_block = true;
    r->block_rows = (int32_t)dims[0];
    r->block_cols = (int32_t)dims[1];
    return MOEQ_STATUS_OK;
}

static moeq_status read_dynamic(parse_ctx *ctx, const char *p, const cJSON *v, raw_args *r) {
    if (cJSON_IsBool(v)) {
        r->dynamic = cJSON_IsTrue(v) ? MOEQ_DYNAMIC_TRUE : MOEQ_DYNAMIC_FALSE;
        return MOEQ_STATUS_OK;
    }
    if (!cJSON_IsString(v)) return type_error(ctx, p, "true, false or \"local\"", v);
    /* CT lower-cases the string and requires "local": the string "true" is invalid. */
    if (!ascii_case_equal(v->valuestring, "local")) {
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: '%s' is not a valid DynamicType (expected true, false or "
                           "\"local\")",
                           p, v->valuestring);
    }
    r->dynamic = MOEQ_DYNAMIC_LOCAL;
    return MOEQ_STATUS_OK;
}

/* actorder 'group' (true, "group", "dynamic"): compressed-tensors 0.20 removed
 * it (its QuantizationArgs raise "has been removed") and no longer writes or
 * reads such configs; checkpoints written before carry g_idx, which moeq
 * still applies. */
static moeq_status warn_actorder_group(parse_ctx *ctx, const char *p, const char *given,
                                       bool quoted) {
    const char *q = quoted ? "'" : "";
    return warn(ctx,
                "%s: actorder=%s%s%s is activation ordering by group (g_idx), which "
                "compressed-tensors 0.20 removed: it no longer writes it and cannot load this "
                "config. moeq keeps reading such checkpoints (their g_idx is applied); new "
                "checkpoints use actorder='weight' or null.",
                p, q, given, q);
}

static moeq_status read_actorder(parse_ctx *ctx, const char *p, const cJSON *v, raw_args *r) {
    if (cJSON_IsNull(v)) return MOEQ_STATUS_OK;
    if (cJSON_IsBool(v)) {
        r->actorder = cJSON_IsTrue(v) ? MOEQ_ACTORDER_GROUP : MOEQ_ACTORDER_NONE;
        return cJSON_IsTrue(v) ? warn_actorder_group(ctx, p, "true", false) : MOEQ_STATUS_OK;
    }
    if (!cJSON_IsString(v)) return type_error(ctx, p, "a string, true, false or null", v);
    int i = MOEQ__ACTORDER_COUNT - 1; /* index 0 is "none", which is not a valid string */
    while (i > MOEQ_ACTORDER_NONE && !ascii_case_equal(v->valuestring, moeq_actorder_name(i))) i--;
    if (i == MOEQ_ACTORDER_NONE) {
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: '%s' is not a valid ActivationOrdering (expected one of: group, "
                           "weight, dynamic, static, true, false, null)",
                           p, v->valuestring);
    }
    r->actorder = i;
    if (moeq_actorder_is_group(r->actorder))
        return warn_actorder_group(ctx, p, v->valuestring, true);
    return MOEQ_STATUS_OK;
}

/* A torch dtype string ("torch.uint8" or "uint8") or null. */
static moeq_status read_dtype(parse_ctx *ctx, const char *p, const cJSON *v, int32_t *out) {
    if (cJSON_IsNull(v)) return MOEQ_STATUS_OK;
    const char *s = NULL;
    moeq_status st = want_string(ctx, p, v, &s);
    if (st != MOEQ_STATUS_OK) return st;
    if (strncmp(s, "torch.", 6) == 0) s += 6;
    for (size_t i = 0; i < MOEQ__ARRAY_LEN(k_torch_dtypes); i++) {
        if (strcmp(s, k_torch_dtypes[i].name) == 0) {
            *out = k_torch_dtypes[i].dtype;
            return MOEQ_STATUS_OK;
        }
    }
    if (lookup_exact(s, k_torch_dtypes_unrepresentable,
                     MOEQ__ARRAY_LEN(k_torch_dtypes_unrepresentable)) >= 0) {
        return moeq__error(ctx->err, MOEQ_STATUS_UNSUPPORTED,
                           "%s: torch.%s is a torch dtype moeq has no element type for (supported: "
                           "float8_e4m3fn, float8_e5m2, uint8..uint64, int8..int64, float16, "
                           "bfloat16, float32, float64, bool)",
                           p, s);
    }
    return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA, "%s: No such torch dtype `torch.%s`", p, s);
}

static moeq_status read_observer(parse_ctx *ctx, const char *p, const cJSON *v, raw_args *r) {
    if (cJSON_IsNull(v)) return MOEQ_STATUS_OK;
    return want_string(ctx, p, v, &r->observer);
}

static moeq_status read_observer_kwargs(parse_ctx *ctx, const char *p, const cJSON *v,
                                        raw_args *r) {
    (void)r; /* calibration-only: checked for type, then dropped */
    if (cJSON_IsNull(v) || cJSON_IsObject(v)) return MOEQ_STATUS_OK;
    return type_error(ctx, p, "an object", v);
}

static moeq_status read_symmetric(parse_ctx *ctx, const char *p, const cJSON *v, raw_args *r) {
    return want_bool(ctx, p, v, &r->symmetric);
}

static moeq_status read_scale_dtype(parse_ctx *ctx, const char *p, const cJSON *v, raw_args *r) {
    return read_dtype(ctx, p, v, &r->scale_dtype);
}

static moeq_status read_zp_dtype(parse_ctx *ctx, const char *p, const cJSON *v, raw_args *r) {
    return read_dtype(ctx, p, v, &r->zp_dtype);
}

/* Field readers in CT's declaration order (the order its errors come in). */
static const struct {
    const char *key;
    moeq_status (*read)(parse_ctx *, const char *, const cJSON *, raw_args *);
} k_args_fields[] = {
    {"num_bits", read_num_bits},           {"type", read_type},
    {"symmetric", read_symmetric},         {"group_size", read_group_size},
    {"strategy", read_strategy},           {"block_structure", read_block_structure},
    {"dynamic", read_dynamic},             {"actorder", read_actorder},
    {"scale_dtype", read_scale_dtype},     {"zp_dtype", read_zp_dtype},
    {"observer", read_observer},           {"observer_kwargs", read_observer_kwargs},
};

static moeq_status read_raw_args(parse_ctx *ctx, const char *path, const cJSON *obj,
                                 raw_args *r) {
    *r = raw_args_defaults();
    /* Unknown keys first: a misspelt "group_sizee" explains what follows. */
    moeq_status st = check_keys(ctx, obj, path, &k_args_key_set);
    for (size_t i = 0; st == MOEQ_STATUS_OK && i < MOEQ__ARRAY_LEN(k_args_fields); i++) {
        const cJSON *v = get_item(obj, k_args_fields[i].key);
        if (!v) continue;
        char p[PATH_SIZE];
        path_key(p, path, k_args_fields[i].key);
        st = k_args_fields[i].read(ctx, p, v, r);
    }
    return st;
}

static bool is_group_like(int32_t strategy) {
    return strategy == MOEQ_STRATEGY_GROUP || strategy == MOEQ_STRATEGY_TENSOR_GROUP;
}

static moeq_status args_error(parse_ctx *ctx, const char *path, const char *field,
                              const char *fmt, ...) MOEQ__PRINTF(4, 5);
static moeq_status args_error(parse_ctx *ctx, const char *path, const char *field,
                              const char *fmt, ...) {
    char p[PATH_SIZE];
    char msg[768];
    path_key(p, path, field);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mark_cut(msg, sizeof msg, n);
    return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA, "%s: %s", p, msg);
}

/* Steps 1-6 of CT's model validator: infer the strategy and check how
 * strategy, group_size, block_structure and actorder go together. */
static moeq_status derive_strategy(parse_ctx *ctx, const char *path, const raw_args *r,
                                   int32_t *strategy_out) {
    int32_t strategy = r->strategy;
    const int32_t gs = r->group_size;
    /* 1. infer the strategy from group_size */
    if (!r->has_strategy) {
        if (!r->has_group_size) {
            strategy = MOEQ_STRATEGY_TENSOR;
        } else if (gs > 0) {
            strategy = MOEQ_STRATEGY_GROUP;
        } else if (gs == -1) {
            strategy = MOEQ_STRATEGY_CHANNEL;
        } else {
            return args_error(ctx, path, "group_size",
                              "Invalid group size %d. Use group_size > 0 for strategy='group' and "
                              "group_size = -1 for 'channel'", (int)gs);
        }
    }
    const char *sname = moeq_strategy_name(strategy);
    /* 2. token needs dynamic */
    if (strategy == MOEQ_STRATEGY_TOKEN && r->dynamic == MOEQ_DYNAMIC_FALSE) {
        return args_error(ctx, path, "strategy",
                          "Cannot perform static token quantization, please use `dynamic=True`");
    }
    /* 3. group strategies need a positive group_size */
    if (is_group_like(strategy) && (!r->has_group_size || gs <= 0)) {
        char got[32];
        if (r->has_group_size) {
            snprintf(got, sizeof got, "%d", (int)gs);
        } else {
            snprintf(got, sizeof got, "null");
        }
        return args_error(ctx, path, "group_size",
                          "strategy %s requires group_size to be set to a positive value "
                          "(group_size is %s)", sname, got);
    }
    /* 4. a positive group_size needs a group strategy */
    if (r->has_group_size && gs > 0 && !is_group_like(strategy)) {
        return args_error(ctx, path, "group_size",
                          "group_size requires strategy to be set to 'group' (strategy is '%s', "
                          "group_size %d)", sname, (int)gs);
    }
    /* 5. block strategy <=> block_structure */
    if (strategy == MOEQ_STRATEGY_BLOCK && !r->has_block) {
        return args_error(ctx, path, "block_structure", "Block strategy requires block structure");
    }
    if (r->has_block && strategy != MOEQ_STRATEGY_BLOCK) {
        return args_error(ctx, path, "block_structure",
                          "Block structure requires block strategy (strategy is '%s')", sname);
    }
    /* 6. group activation ordering needs a group strategy ('weight' goes with any) */
    if (moeq_actorder_is_group(r->actorder) && !is_group_like(strategy)) {
        return args_error(ctx, path, "actorder",
                          "Must use group or tensor_group quantization strategy in order to apply "
                          "group activation ordering (strategy is '%s')", sname);
    }
    *strategy_out = strategy;
    return MOEQ_STATUS_OK;
}

/* Step 7: dynamic quantization's strategies and the observer defaults. */
static moeq_status derive_observer(parse_ctx *ctx, const char *path, const raw_args *r,
                                   int32_t strategy, const char **observer_out) {
    const char *observer = r->observer;
    const char *sname = moeq_strategy_name(strategy);
    if (r->dynamic != MOEQ_DYNAMIC_FALSE) {
        if (strategy != MOEQ_STRATEGY_TOKEN && strategy != MOEQ_STRATEGY_TENSOR &&
            strategy != MOEQ_STRATEGY_TENSOR_GROUP && strategy != MOEQ_STRATEGY_GROUP) {
            return args_error(ctx, path, "dynamic",
                              "One of (token, tensor, tensor_group, group) must be used for "
                              "dynamic quant. (strategy is '%s')", sname);
        }
        if (r->dynamic == MOEQ_DYNAMIC_LOCAL && strategy != MOEQ_STRATEGY_TENSOR_GROUP) {
            return args_error(ctx, path, "dynamic",
                              "local is only supported for strategy tensor_group (strategy is "
                              "'%s')", sname);
        }
        if (observer && r->dynamic == MOEQ_DYNAMIC_TRUE) {
            /* CT stays quiet for "memoryless", which old configs wrote. */
            if (strcmp(observer, "memoryless") != 0) {
                char p[PATH_SIZE];
                path_key(p, path, "observer");
                moeq_status st =
                    warn(ctx, "%s: No observer is used for dynamic quant., setting to None "
                              "(was '%s')", p, observer);
                if (st != MOEQ_STATUS_OK) return st;
            }
            observer = NULL;
        } else if (!observer && r->dynamic == MOEQ_DYNAMIC_LOCAL) {
            observer = "minmax";
        }
    } else if (!observer) {
        /* The static default changed in 0.14 (spec section 0.1). */
        observer = moeq__config_version_before(ctx->cfg, 0, 14, 0) ? "minmax" : "memoryless_minmax";
    }
    *observer_out = observer;
    return MOEQ_STATUS_OK;
}

/* Step 8: the zero-point dtype (CT's pytorch_dtype), stored as "none" when
 * symmetric, which is how CT serialises it. */
static moeq_status derive_zp_dtype(parse_ctx *ctx, const char *path, const raw_args *r,
                                   int32_t *zp_out) {
    /* CT defaults zp_dtype to F8_E4M3 for float 4 and 6 (FP4 E2M1, FP6 E2M3)
     * before asking pytorch_dtype, which knows only float 8. */
    if (r->type == MOEQ_QTYPE_FLOAT && r->num_bits != 4 && r->num_bits != 6 && r->num_bits != 8) {
        return args_error(ctx, path, "num_bits",
                          "Only num_bits in (8) are supported (type float, num_bits %d; float "
                          "quantization has 4, 6 or 8 bits)", (int)r->num_bits);
    }
    int32_t zp = r->zp_dtype;
    if (zp == MOEQ_DTYPE_INVALID) {
        if (r->type == MOEQ_QTYPE_FLOAT) {
            zp = MOEQ_DTYPE_F8_E4M3; /* float4, float6 and float8 alike */
        } else if (r->num_bits <= 8) {
            zp = MOEQ_DTYPE_I8;
        } else if (r->num_bits <= 16) {
            zp = MOEQ_DTYPE_I16;
        } else {
            zp = MOEQ_DTYPE_I32;
        }
    }
    *zp_out = r->symmetric ? MOEQ_DTYPE_INVALID : zp;
    return MOEQ_STATUS_OK;
}

/* Runs CT's derivation steps 1-8, in order, and fills `out`. */
static moeq_status derive_args(parse_ctx *ctx, const char *path, const raw_args *r,
                               moeq_quant_args *out) {
    int32_t strategy = MOEQ_STRATEGY_TENSOR;
    const char *observer = NULL;
    int32_t zp = MOEQ_DTYPE_INVALID;
    moeq_status st = derive_strategy(ctx, path, r, &strategy);
    if (st == MOEQ_STATUS_OK) st = derive_observer(ctx, path, r, strategy, &observer);
    if (st == MOEQ_STATUS_OK) st = derive_zp_dtype(ctx, path, r, &zp);
    if (st == MOEQ_STATUS_OK && observer) st = intern(ctx, observer, &observer);
    if (st != MOEQ_STATUS_OK) return st;
    memset(out, 0, sizeof *out);
    out->num_bits = r->num_bits;
    out->type = r->type;
    out->symmetric = r->symmetric ? 1 : 0;
    out->group_size = r->has_group_size ? r->group_size : 0;
    out->strategy = strategy;
    out->strategy_given = r->has_strategy ? 1 : 0;
    out->block_rows = r->has_block ? r->block_rows : 0;
    out->block_cols = r->has_block ? r->block_cols : 0;
    out->dynamic = r->dynamic;
    out->actorder = r->actorder;
    out->scale_dtype = r->scale_dtype;
    out->zp_dtype = zp;
    out->observer = observer;
    return MOEQ_STATUS_OK;
}

/* Parses one QuantizationArgs value: an object, or null (has = false). */
static moeq_status parse_args(parse_ctx *ctx, const char *path, const cJSON *v, bool *has,
                              moeq_quant_args *out) {
    *has = false;
    if (!v || cJSON_IsNull(v)) return MOEQ_STATUS_OK;
    if (!cJSON_IsObject(v)) return type_error(ctx, path, "a QuantizationArgs object or null", v);
    raw_args r;
    moeq_status st = read_raw_args(ctx, path, v, &r);
    if (st == MOEQ_STATUS_OK) st = derive_args(ctx, path, &r, out);
    if (st == MOEQ_STATUS_OK) *has = true;
    return st;
}

/* ------------------------------------------------------------------------ */
/* Preset schemes (CT 0.18 quant_scheme.py PRESET_SCHEMES, in its order)     */
/* ------------------------------------------------------------------------ */

typedef struct preset_args {
    bool present;
    int8_t num_bits;
    int8_t type;
    int8_t strategy;
    int16_t group_size; /* 0: null */
    bool symmetric;
    int8_t dynamic;
    int16_t block;      /* 0: none, else [block, block] */
    int8_t scale_dtype;
    const char *observer;
} preset_args;

typedef struct preset {
    const char *name;
    preset_args weights;
    preset_args input;
} preset;

/* The zp_dtype some presets set (F8_E4M3 for NVFP4, U8 for MX) is left out:
 * they are all symmetric, so it is stored as "none" anyway. */
#define P_NONE {false, 0, 0, 0, 0, false, 0, 0, MOEQ_DTYPE_INVALID, NULL}
#define P_INT_G128(b, sym) \
    {true, b, MOEQ_QTYPE_INT, MOEQ_STRATEGY_GROUP, 128, sym, MOEQ_DYNAMIC_FALSE, 0, MOEQ_DTYPE_INVALID, NULL}
#define P_INT_TOKEN(b) \
    {true, b, MOEQ_QTYPE_INT, MOEQ_STRATEGY_TOKEN, 0, true, MOEQ_DYNAMIC_TRUE, 0, MOEQ_DTYPE_INVALID, NULL}
#define P_INT8_CHANNEL \
    {true, 8, MOEQ_QTYPE_INT, MOEQ_STRATEGY_CHANNEL, 0, true, MOEQ_DYNAMIC_FALSE, 0, MOEQ_DTYPE_INVALID, NULL}
#define P_FP8(strategy, observer) \
    {true, 8, MOEQ_QTYPE_FLOAT, strategy, 0, true, MOEQ_DYNAMIC_FALSE, 0, MOEQ_DTYPE_INVALID, observer}
#define P_FP8_TOKEN \
    {true, 8, MOEQ_QTYPE_FLOAT, MOEQ_STRATEGY_TOKEN, 0, true, MOEQ_DYNAMIC_TRUE, 0, MOEQ_DTYPE_INVALID, NULL}
#define P_FP8_BLOCK128 \
    {true, 8, MOEQ_QTYPE_FLOAT, MOEQ_STRATEGY_BLOCK, 0, true, MOEQ_DYNAMIC_FALSE, 128, MOEQ_DTYPE_INVALID, NULL}
#define P_FP8_G128_DYN \
    {true, 8, MOEQ_QTYPE_FLOAT, MOEQ_STRATEGY_GROUP, 128, true, MOEQ_DYNAMIC_TRUE, 0, MOEQ_DTYPE_INVALID, NULL}
#define P_NVFP4_W \
    {true, 4, MOEQ_QTYPE_FLOAT, MOEQ_STRATEGY_TENSOR_GROUP, 16, true, MOEQ_DYNAMIC_FALSE, 0, MOEQ_DTYPE_F8_E4M3, NULL}
#define P_NVFP4_A \
    {true, 4, MOEQ_QTYPE_FLOAT, MOEQ_STRATEGY_TENSOR_GROUP, 16, true, MOEQ_DYNAMIC_LOCAL, 0, MOEQ_DTYPE_F8_E4M3, "static_minmax"}
#define P_MX(b, dyn) \
    {true, b, MOEQ_QTYPE_FLOAT, MOEQ_STRATEGY_GROUP, 32, true, dyn, 0, MOEQ_DTYPE_U8, NULL}

static const preset k_presets[] = {
    {"UNQUANTIZED", P_NONE, P_NONE},
    {"W4A16_ASYM", P_INT_G128(4, false), P_NONE},
    {"W8A8", P_INT8_CHANNEL, P_INT_TOKEN(8)},
    {"INT8", P_INT8_CHANNEL, P_INT_TOKEN(8)},
    {"W4AFP8", P_INT_G128(4, true), P_FP8_TOKEN},
    {"FP8", P_FP8(MOEQ_STRATEGY_TENSOR, NULL), P_FP8(MOEQ_STRATEGY_TENSOR, "static_minmax")},
    {"FP8_DYNAMIC", P_FP8(MOEQ_STRATEGY_CHANNEL, NULL), P_FP8_TOKEN},
    {"FP8_BLOCK", P_FP8_BLOCK128, P_FP8_G128_DYN},
    {"NVFP4A16", P_NVFP4_W, P_NONE},
    {"NVFP4", P_NVFP4_W, P_NVFP4_A},
    {"MXFP4A16", P_MX(4, MOEQ_DYNAMIC_FALSE), P_NONE},
    {"MXFP4", P_MX(4, MOEQ_DYNAMIC_FALSE), P_MX(4, MOEQ_DYNAMIC_TRUE)},
    {"MXFP4XFP8", P_MX(4, MOEQ_DYNAMIC_FALSE), P_FP8_G128_DYN},
    {"MXFP6A16", P_MX(6, MOEQ_DYNAMIC_FALSE), P_NONE},
    {"MXFP6A8", P_MX(6, MOEQ_DYNAMIC_FALSE), P_MX(8, MOEQ_DYNAMIC_TRUE)},
    {"MXFP8A16", P_MX(8, MOEQ_DYNAMIC_FALSE), P_NONE},
    {"MXFP8", P_MX(8, MOEQ_DYNAMIC_FALSE), P_MX(8, MOEQ_DYNAMIC_TRUE)},
    /* The W{w}A{a} family (w in 2..8, a in {4, 8, 16}, w <= a), sorted by name as CT does. */
    {"W2A4", P_INT_G128(2, true), P_INT_TOKEN(4)},
    {"W2A8", P_INT_G128(2, true), P_INT_TOKEN(8)},
    {"W2A16", P_INT_G128(2, true), P_NONE},
    {"W3A4", P_INT_G128(3, true), P_INT_TOKEN(4)},
    {"W3A8", P_INT_G128(3, true), P_INT_TOKEN(8)},
    {"W3A16", P_INT_G128(3, true), P_NONE},
    {"W4A4", P_INT_G128(4, true), P_INT_TOKEN(4)},
    {"W4A8", P_INT_G128(4, true), P_INT_TOKEN(8)},
    {"W4A16", P_INT_G128(4, true), P_NONE},
    {"W5A8", P_INT_G128(5, true), P_INT_TOKEN(8)},
    {"W5A16", P_INT_G128(5, true), P_NONE},
    {"W6A8", P_INT_G128(6, true), P_INT_TOKEN(8)},
    {"W6A16", P_INT_G128(6, true), P_NONE},
    {"W7A8", P_INT_G128(7, true), P_INT_TOKEN(8)},
    {"W7A16", P_INT_G128(7, true), P_NONE},
    {"W8A16", P_INT_G128(8, true), P_NONE},
};

#define PRESET_NAMES_TEXT                                                                       \
    "['UNQUANTIZED', 'W4A16_ASYM', 'W8A8', 'INT8', 'W4AFP8', 'FP8', 'FP8_DYNAMIC', 'FP8_BLOCK', " \
    "'NVFP4A16', 'NVFP4', 'MXFP4A16', 'MXFP4', 'MXFP4XFP8', 'MXFP6A16', 'MXFP6A8', 'MXFP8A16', " \
    "'MXFP8', 'W2A4', 'W2A8', 'W2A16', "                                                         \
    "'W3A4', 'W3A8', 'W3A16', 'W4A4', 'W4A8', 'W4A16', 'W5A8', 'W5A16', 'W6A8', 'W6A16', "      \
    "'W7A8', 'W7A16', 'W8A16']"

static const preset *find_preset(const char *name) {
    for (size_t i = 0; i < MOEQ__ARRAY_LEN(k_presets); i++) {
        if (ascii_case_equal(name, k_presets[i].name)) return &k_presets[i];
    }
    return NULL;
}

/* Builds a preset's args the way CT does: through the same derivation. */
static moeq_status expand_preset_args(parse_ctx *ctx, const char *path, const preset_args *pa,
                                      bool *has, moeq_quant_args *out) {
    *has = false;
    if (!pa->present) return MOEQ_STATUS_OK;
    raw_args r = raw_args_defaults();
    r.num_bits = pa->num_bits;
    r.type = pa->type;
    r.symmetric = pa->symmetric;
    r.has_strategy = true;
    r.strategy = pa->strategy;
    r.has_group_size = pa->group_size != 0;
    r.group_size = pa->group_size;
    r.has_block = pa->block != 0;
    r.block_rows = r.block_cols = pa->block;
    r.dynamic = pa->dynamic;
    r.scale_dtype = pa->scale_dtype;
    r.observer = pa->observer;
    moeq_status st = derive_args(ctx, path, &r, out);
    if (st == MOEQ_STATUS_OK) *has = true;
    return st;
}

/* ------------------------------------------------------------------------ */
/* config_groups                                                             */
/* ------------------------------------------------------------------------ */

static moeq_status read_targets(parse_ctx *ctx, const char *gpath, const cJSON *v,
                                moeq__group *g) {
    char p[PATH_SIZE];
    path_key(p, gpath, "targets");
    if (!v) {
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: required key is missing (a list of module names, re: patterns "
                           "or class names)", p);
    }
    moeq_status st = want_string_list(ctx, p, v, &g->n_targets, &g->targets);
    if (st == MOEQ_STATUS_OK && g->n_targets == 0) {
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: is empty; a group needs at least one target", p);
    }
    return st;
}

/* CT's QuantizationScheme model validator (after each args is validated). */
static moeq_status validate_scheme(parse_ctx *ctx, const char *gpath, const moeq__group *g) {
    char p[PATH_SIZE];
    if (g->has_input) {
        int32_t s = g->input.strategy;
        if (s != MOEQ_STRATEGY_TOKEN && s != MOEQ_STRATEGY_TENSOR && s != MOEQ_STRATEGY_GROUP &&
            s != MOEQ_STRATEGY_TENSOR_GROUP && s != MOEQ_STRATEGY_ATTN_HEAD) {
            path_key(p, gpath, "input_activations.strategy");
            return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                               "%s: Using %s strategy is not supported for activation "
                               "quantization (use token, tensor, group, tensor_group or "
                               "attn_head)", p, moeq_strategy_name(s));
        }
        if (g->input.actorder != MOEQ_ACTORDER_NONE) {
            path_key(p, gpath, "input_activations.actorder");
            return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                               "%s: Cannot apply actorder to input activations", p);
        }
    }
    if (g->has_output && g->output.actorder != MOEQ_ACTORDER_NONE) {
        path_key(p, gpath, "output_activations.actorder");
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: Cannot apply actorder to output activations", p);
    }
    if (g->format == MOEQ_FORMAT_MIXED_PRECISION) {
        path_key(p, gpath, "format");
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: mixed-precision cannot be set as a format for a "
                           "QuantizationScheme", p);
    }
    if (g->has_input && g->has_weights && g->weights.strategy == MOEQ_STRATEGY_GROUP &&
        g->input.strategy == MOEQ_STRATEGY_GROUP && g->weights.group_size != g->input.group_size &&
        /* CT 0.20: inputs of another bit width or type (MXFP4XFP8) differ on purpose */
        g->weights.num_bits == g->input.num_bits && g->weights.type == g->input.type) {
        return warn(ctx, "%s: Using GROUP strategy for both weights and input_activations with "
                         "different group sizes (%d vs %d) may complicate fused kernel "
                         "implementations. Consider using TENSOR_GROUP strategy for both or "
                         "matching group sizes.",
                    gpath, (int)g->weights.group_size, (int)g->input.group_size);
    }
    return MOEQ_STATUS_OK;
}

static moeq_status read_group_format(parse_ctx *ctx, const char *gpath, const cJSON *v,
                                     moeq__group *g) {
    g->format = MOEQ_FORMAT_NONE;
    if (!v || cJSON_IsNull(v)) return MOEQ_STATUS_OK;
    char p[PATH_SIZE];
    path_key(p, gpath, "format");
    const char *s = NULL;
    moeq_status st = want_string(ctx, p, v, &s);
    if (st != MOEQ_STATUS_OK) return st;
    /* A group's format must be an exact CompressionFormat value ("fakequant" is not one). */
    g->format = format_from_name(s, false);
    if (g->format == MOEQ_FORMAT_NONE) {
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: '%s' is not a valid CompressionFormat (expected one of: "
                           GROUP_FORMATS_TEXT ")", p, s);
    }
    return MOEQ_STATUS_OK;
}

/* A group written as a QuantizationScheme object. */
static moeq_status parse_scheme_group(parse_ctx *ctx, const char *gpath, const cJSON *obj,
                                      moeq__group *g) {
    char p[PATH_SIZE];
    moeq_status st = check_keys(ctx, obj, gpath, &k_scheme_key_set);
    if (st == MOEQ_STATUS_OK) st = read_targets(ctx, gpath, get_item(obj, "targets"), g);
    if (st == MOEQ_STATUS_OK) {
        path_key(p, gpath, "weights");
        st = parse_args(ctx, p, get_item(obj, "weights"), &g->has_weights, &g->weights);
    }
    if (st == MOEQ_STATUS_OK) {
        path_key(p, gpath, "input_activations");
        st = parse_args(ctx, p, get_item(obj, "input_activations"), &g->has_input, &g->input);
    }
    if (st == MOEQ_STATUS_OK) {
        path_key(p, gpath, "output_activations");
        st = parse_args(ctx, p, get_item(obj, "output_activations"), &g->has_output, &g->output);
    }
    if (st == MOEQ_STATUS_OK) st = read_group_format(ctx, gpath, get_item(obj, "format"), g);
    if (st == MOEQ_STATUS_OK) st = validate_scheme(ctx, gpath, g);
    return st;
}

/* A group written as "PRESET": [targets...]. */
static moeq_status parse_preset_group(parse_ctx *ctx, const char *gpath, const char *name,
                                      const cJSON *list, moeq__group *g) {
    const preset *ps = find_preset(name);
    if (!ps) {
        char upper[128];
        size_t i = 0;
        for (; name[i] && i + 1 < sizeof upper; i++) upper[i] = ascii_upper(name[i]);
        upper[i] = '\0';
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: unknown preset scheme name %s, available names: " PRESET_NAMES_TEXT
                           " (a config group given as a list of targets is named after a preset)",
                           gpath, upper);
    }
    g->preset = 1;
    g->format = MOEQ_FORMAT_NONE;
    moeq_status st = read_targets(ctx, gpath, list, g);
    char p[PATH_SIZE];
    if (st == MOEQ_STATUS_OK) {
        path_key(p, gpath, "weights");
        st = expand_preset_args(ctx, p, &ps->weights, &g->has_weights, &g->weights);
    }
    if (st == MOEQ_STATUS_OK) {
        path_key(p, gpath, "input_activations");
        st = expand_preset_args(ctx, p, &ps->input, &g->has_input, &g->input);
    }
    return st;
}

static moeq_status parse_groups(parse_ctx *ctx, const char *block_path, const cJSON *v) {
    char path[PATH_SIZE];
    path_key(path, block_path, "config_groups");
    if (!v) {
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: required key is missing (an object mapping group names to "
                           "schemes)", path);
    }
    if (!cJSON_IsObject(v)) {
        return type_error(ctx, path, "an object mapping group names to schemes", v);
    }
    /* A repeated group name keeps its first position and its last value,
     * as a Python dict built from JSON does. */
    size_t n = 0;
    for (const cJSON *c = v->child; c; c = c->next) {
        if (!is_repeated_key(v, c)) n++;
    }
    if (n == 0) {
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: is empty; at least one config group is needed", path);
    }
    moeq_config *cfg = ctx->cfg;
    cfg->groups = moeq__calloc(n, sizeof *cfg->groups);
    if (!cfg->groups) return nomem(ctx);
    cfg->n_groups = (uint32_t)n;
    uint32_t index = 0;
    for (const cJSON *c = v->child; c; c = c->next) {
        char gpath[PATH_SIZE];
        path_key(gpath, path, c->string);
        if (is_repeated_key(v, c)) {
            moeq_status st = warn(ctx, "%s: group name given more than once; the last one is "
                                       "used", gpath);
            if (st != MOEQ_STATUS_OK) return st;
            continue;
        }
        moeq__group *g = &cfg->groups[index];
        g->index = index++;
        g->name = moeq__strdup(c->string);
        if (!g->name) return nomem(ctx);
        const cJSON *value = get_item(v, c->string);
        moeq_status st;
        if (cJSON_IsObject(value)) {
            st = parse_scheme_group(ctx, gpath, value, g);
        } else if (cJSON_IsArray(value)) {
            st = parse_preset_group(ctx, gpath, c->string, value, g);
        } else {
            st = type_error(ctx, gpath,
                            "a scheme object or a list of target strings (for a preset name)",
                            value);
        }
        if (st != MOEQ_STATUS_OK) return st;
    }
    return MOEQ_STATUS_OK;
}

/* ------------------------------------------------------------------------ */
/* Other top-level keys                                                      */
/* ------------------------------------------------------------------------ */

/* "0.12.3.a20251013", "0.14.4.dev54+g704d57b", "0.6.0.20240921", "v1.2": the
 * leading release numbers (PEP 440); a missing patch reads as 0. */
static bool parse_version_numbers(const char *s, int out[3]) {
    if (*s == 'v' || *s == 'V') s++;
    int parts = 0;
    while (parts < 3) {
        if (*s < '0' || *s > '9') break;
        long value = 0;
        while (*s >= '0' && *s <= '9') {
            if (value > 100000000L) return false;
            value = value * 10 + (*s++ - '0');
        }
        out[parts++] = (int)value;
        if (*s != '.' || s[1] < '0' || s[1] > '9') break;
        s++;
    }
    if (parts < 2) return false;
    if (parts == 2) out[2] = 0;
    return true;
}

static moeq_status parse_version(parse_ctx *ctx, const char *block_path, const cJSON *v) {
    moeq_config *cfg = ctx->cfg;
    cfg->version_major = cfg->version_minor = cfg->version_patch = -1;
    const char *s = "";
    char p[PATH_SIZE];
    path_key(p, block_path, "version");
    if (v && !cJSON_IsNull(v)) {
        moeq_status st = want_string(ctx, p, v, &s);
        if (st != MOEQ_STATUS_OK) return st;
    }
    cfg->version = moeq__strdup(s);
    if (!cfg->version) return nomem(ctx);
    if (!s[0]) return MOEQ_STATUS_OK;
    int parts[3];
    if (!parse_version_numbers(s, parts)) {
        return warn(ctx, "%s: cannot read a version number from '%s'; version-dependent "
                         "compatibility rules assume the newest writer", p, s);
    }
    cfg->version_major = parts[0];
    cfg->version_minor = parts[1];
    cfg->version_patch = parts[2];
    return MOEQ_STATUS_OK;
}

static moeq_status parse_quant_method(parse_ctx *ctx, const char *block_path, const cJSON *v) {
    char p[PATH_SIZE];
    path_key(p, block_path, "quant_method");
    const char *s = "compressed-tensors";
    moeq_status st = MOEQ_STATUS_OK;
    if (!v) {
        /* CT's default.  Only worth a word inside a config.json, where loaders
         * choose the quantizer by this key; bare blocks are often hand-written. */
        if (block_path[0]) {
            st = warn(ctx, "%s: missing; assuming \"compressed-tensors\" (compressed-tensors' "
                           "default)", p);
        }
    } else {
        st = want_string(ctx, p, v, &s);
    }
    if (st != MOEQ_STATUS_OK) return st;
    if (strcmp(s, "sparseml") == 0) {
        st = warn(ctx, "%s: \"sparseml\" is the name used by very old configs; read as "
                       "\"compressed-tensors\"", p);
    } else if (strcmp(s, "compressed-tensors") != 0) {
        return moeq__error(ctx->err, MOEQ_STATUS_UNSUPPORTED,
                           "%s: quantization method '%s' is not supported; moeq reads "
                           "compressed-tensors checkpoints (quant_method \"compressed-tensors\", "
                           "or the legacy \"sparseml\")", p, s);
    }
    if (st != MOEQ_STATUS_OK) return st;
    ctx->cfg->quant_method = moeq__strdup(s);
    return ctx->cfg->quant_method ? MOEQ_STATUS_OK : nomem(ctx);
}

/* Top-level "format": a plain string CT does not validate.  An unknown value
 * is kept as NONE (so formats are inferred per group) with a warning. */
static moeq_status parse_top_format(parse_ctx *ctx, const char *block_path, const cJSON *v) {
    ctx->cfg->format = MOEQ_FORMAT_NONE;
    if (!v || cJSON_IsNull(v)) return MOEQ_STATUS_OK;
    char p[PATH_SIZE];
    path_key(p, block_path, "format");
    const char *s = NULL;
    moeq_status st = want_string(ctx, p, v, &s);
    if (st != MOEQ_STATUS_OK) return st;
    ctx->cfg->format = format_from_name(s, true);
    if (ctx->cfg->format != MOEQ_FORMAT_NONE) return MOEQ_STATUS_OK;
    /* CT's compressor registry lower-cases and turns '_' into '-', so
     * "Pack_Quantized" still loads there (vLLM compares exactly). */
    char norm[64];
    size_t i = 0;
    for (; s[i] && i + 1 < sizeof norm; i++) norm[i] = s[i] == '_' ? '-' : ascii_lower(s[i]);
    norm[i] = '\0';
    ctx->cfg->format = s[i] ? MOEQ_FORMAT_NONE : format_from_name(norm, true);
    if (ctx->cfg->format != MOEQ_FORMAT_NONE) {
        return warn(ctx, "%s: '%s' read as '%s' (compressed-tensors normalises format names; "
                         "write the exact name)", p, s, norm);
    }
    return warn(ctx, "%s: unknown compression format '%s'; each group's format will be its own "
                     "or inferred from its scheme (known: " GROUP_FORMATS_TEXT
                     ", mixed-precision, fakequant)", p, s);
}

static moeq_status parse_status(parse_ctx *ctx, const char *block_path, const cJSON *v) {
    const char *s = "";
    char p[PATH_SIZE];
    path_key(p, block_path, "quantization_status");
    moeq_status st = MOEQ_STATUS_OK;
    if (v && !cJSON_IsNull(v)) st = want_string(ctx, p, v, &s);
    if (st != MOEQ_STATUS_OK) return st;
    ctx->cfg->quantization_status = moeq__strdup(s);
    if (!ctx->cfg->quantization_status) return nomem(ctx);
    if (s[0] && lookup_exact(s, k_status_names, MOEQ__ARRAY_LEN(k_status_names)) < 0) {
        return warn(ctx, "%s: unknown status '%s' (compressed-tensors knows initialized, "
                         "calibration, frozen, compressed, decompressed); kept as written", p, s);
    }
    return MOEQ_STATUS_OK;
}

static moeq_status parse_ratio(parse_ctx *ctx, const char *block_path, const cJSON *v) {
    if (!v || cJSON_IsNull(v)) return MOEQ_STATUS_OK;
    char p[PATH_SIZE];
    path_key(p, block_path, "global_compression_ratio");
    if (!cJSON_IsNumber(v)) return type_error(ctx, p, "a number or null", v);
    ctx->cfg->has_global_compression_ratio = true;
    ctx->cfg->global_compression_ratio = v->valuedouble;
    return MOEQ_STATUS_OK;
}

static moeq_status parse_ignore(parse_ctx *ctx, const char *block_path, const cJSON *v) {
    if (!v || cJSON_IsNull(v)) return MOEQ_STATUS_OK; /* CT: ignore may be null */
    char p[PATH_SIZE];
    path_key(p, block_path, "ignore");
    return want_string_list(ctx, p, v, &ctx->cfg->n_ignore, &ctx->cfg->ignore);
}

static moeq_status parse_kv_cache(parse_ctx *ctx, const char *block_path, const cJSON *v) {
    if (!v || cJSON_IsNull(v)) return MOEQ_STATUS_OK;
    char p[PATH_SIZE];
    path_key(p, block_path, "kv_cache_scheme");
    moeq_status st = parse_args(ctx, p, v, &ctx->cfg->has_kv_cache, &ctx->cfg->kv_cache);
    if (st == MOEQ_STATUS_OK) st = keep_raw(ctx, v, &ctx->cfg->raw_kv_cache);
    return st;
}

static moeq_status parse_sparsity(parse_ctx *ctx, const char *block_path, const cJSON *v) {
    if (!v || cJSON_IsNull(v)) return MOEQ_STATUS_OK;
    char p[PATH_SIZE];
    path_key(p, block_path, "sparsity_config");
    if (!cJSON_IsObject(v)) return type_error(ctx, p, "an object or null", v);
    return keep_raw(ctx, v, &ctx->cfg->raw_sparsity);
}

/* compressed-tensors 0.20's ExpertSparsityConfig: {"method": "prune" |
 * "novice", "num_experts": [null | int, ...]}, one entry per decoder layer
 * (null: a dense layer).  A count must be a positive integer (not a float,
 * not a bool); with num_hidden_layers in the model config the list must
 * have that many entries. */
static moeq_status parse_moe_sparsity(parse_ctx *ctx, const char *path, const cJSON *v) {
    if (!v || cJSON_IsNull(v)) return MOEQ_STATUS_OK;
    moeq_config *cfg = ctx->cfg;
    if (!cJSON_IsObject(v)) return type_error(ctx, path, "an object or null", v);
    char p[PATH_SIZE];
    for (const cJSON *c = v->child; c; c = c->next) {
        if (c->string && strcmp(c->string, "method") != 0 &&
            strcmp(c->string, "num_experts") != 0) {
            path_key(p, path, c->string);
            return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                               "%s: unknown key in moe_sparsity_config (ExpertSparsityConfig "
                               "takes method and num_experts)",
                               p);
        }
    }
    const cJSON *m = get_item(v, "method");
    path_key(p, path, "method");
    if (!m) {
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: missing; moe_sparsity_config needs \"prune\" or \"novice\"", p);
    }
    if (!cJSON_IsString(m)) return type_error(ctx, p, "\"prune\" or \"novice\"", m);
    if (strcmp(m->valuestring, "prune") == 0) {
        cfg->moe_sparsity_method = MOEQ_MOE_SPARSITY_PRUNE;
    } else if (strcmp(m->valuestring, "novice") == 0) {
        cfg->moe_sparsity_method = MOEQ_MOE_SPARSITY_NOVICE;
    } else {
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: '%s' is not a MoESparsityMethod (expected \"prune\" or "
                           "\"novice\")",
                           p, m->valuestring);
    }
    const cJSON *n = get_item(v, "num_experts");
    path_key(p, path, "num_experts");
    if (!n) {
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: missing; moe_sparsity_config needs one entry per decoder layer "
                           "(null for a dense layer)",
                           p);
    }
    if (!cJSON_IsArray(n)) return type_error(ctx, p, "a list (one entry per decoder layer)", n);
    uint32_t count = (uint32_t)cJSON_GetArraySize(n);
    if (count == 0) {
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "%s: empty; it needs one entry per decoder layer", p);
    }
    cfg->moe_sparsity = moeq__calloc(count, sizeof *cfg->moe_sparsity);
    cfg->moe_sparsity_path = moeq__strdup(path);
    if (!cfg->moe_sparsity || !cfg->moe_sparsity_path) return nomem(ctx);
    cfg->n_moe_sparsity = count;
    uint32_t i = 0;
    for (const cJSON *e = n->child; e; e = e->next, i++) {
        char pi[PATH_SIZE];
        path_index(pi, p, i);
        if (cJSON_IsNull(e)) continue; /* a dense layer: 0 */
        /* StrictInt: an integer (true is not one), and a layer keeps an expert */
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble)) {
            return type_error(ctx, pi, "an integer expert count or null (a dense layer)", e);
        }
        if (e->valuedouble < 1 || e->valuedouble > MOEQ__MAX_EXPERTS) {
            return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                               "%s: %g experts; a MoE layer retains 1..%u (null marks a dense "
                               "layer)",
                               pi, e->valuedouble, MOEQ__MAX_EXPERTS);
        }
        cfg->moe_sparsity[i] = (int32_t)e->valuedouble;
    }
    return MOEQ_STATUS_OK;
}

/* With num_hidden_layers known (config.json), the list has one entry per
 * decoder layer. */
static moeq_status check_moe_sparsity_layers(parse_ctx *ctx) {
    moeq_config *cfg = ctx->cfg;
    double layers;
    if (!cfg->moe_sparsity ||
        moeq_config_model_number(cfg, "num_hidden_layers", &layers) != MOEQ_STATUS_OK ||
        layers == (double)cfg->n_moe_sparsity) {
        return MOEQ_STATUS_OK;
    }
    return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                       "%s.num_experts: %u entries, but num_hidden_layers is %g; it needs one "
                       "per decoder layer (null for a dense layer)",
                       cfg->moe_sparsity_path, cfg->n_moe_sparsity, layers);
}

/* One transform "apply" entry: offline (weight_*) locations are folded into
 * the stored weights; online ones need run-time rotations moeq does not do. */
static moeq_status check_transform_location(parse_ctx *ctx, const char *apath, const cJSON *a) {
    char p[PATH_SIZE];
    if (!cJSON_IsObject(a)) return type_error(ctx, apath, "an object", a);
    const cJSON *loc = get_item(a, "location");
    if (!loc) return MOEQ_STATUS_OK;
    path_key(p, apath, "location");
    const char *s = NULL;
    moeq_status st = want_string(ctx, p, loc, &s);
    if (st != MOEQ_STATUS_OK) return st;
    if (lookup_ci(s, k_offline_locations, MOEQ__ARRAY_LEN(k_offline_locations)) >= 0) {
        return MOEQ_STATUS_OK;
    }
    if (lookup_ci(s, k_online_locations, MOEQ__ARRAY_LEN(k_online_locations)) >= 0) {
        return moeq__error(ctx->err, MOEQ_STATUS_UNSUPPORTED,
                           "%s: online transform location '%s' is not supported: it needs a "
                           "rotation applied at run time, which moeq does not do (only "
                           "weight_input and weight_output transforms, folded into the stored "
                           "weights, are accepted)", p, s);
    }
    return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                       "%s: '%s' is not a valid TransformLocation (expected one of: input, "
                       "weight_input, weight_output, output, k_cache, q_attn)", p, s);
}

static moeq_status parse_transform(parse_ctx *ctx, const char *block_path, const cJSON *v) {
    if (!v || cJSON_IsNull(v)) return MOEQ_STATUS_OK;
    char p[PATH_SIZE];
    path_key(p, block_path, "transform_config");
    if (!cJSON_IsObject(v)) return type_error(ctx, p, "an object or null", v);
    const cJSON *groups = get_item(v, "config_groups");
    char gp[PATH_SIZE];
    path_key(gp, p, "config_groups");
    if (groups && !cJSON_IsNull(groups)) {
        if (!cJSON_IsObject(groups)) return type_error(ctx, gp, "an object", groups);
        for (const cJSON *g = groups->child; g; g = g->next) {
            char tp[PATH_SIZE], ap[PATH_SIZE], ip[PATH_SIZE];
            path_key(tp, gp, g->string);
            if (!cJSON_IsObject(g)) return type_error(ctx, tp, "a transform scheme object", g);
            const cJSON *apply = get_item(g, "apply");
            if (!apply || cJSON_IsNull(apply)) continue;
            path_key(ap, tp, "apply");
            if (!cJSON_IsArray(apply)) return type_error(ctx, ap, "a list", apply);
            size_t i = 0;
            for (const cJSON *a = apply->child; a; a = a->next, i++) {
                path_index(ip, ap, i);
                moeq_status st = check_transform_location(ctx, ip, a);
                if (st != MOEQ_STATUS_OK) return st;
            }
        }
    }
    return keep_raw(ctx, v, &ctx->cfg->raw_transform);
}

/* ------------------------------------------------------------------------ */
/* Model fields (num_experts, hidden_size, ... of the whole config.json)     */
/* ------------------------------------------------------------------------ */

/* architectures ["Glm4MoeForCausalLM"] is kept as its first name, a string. */
static const cJSON *model_value(const cJSON *c) {
    if (c->string && strcmp(c->string, "architectures") == 0 && cJSON_IsArray(c)) {
        return cJSON_IsString(c->child) ? c->child : NULL;
    }
    return c;
}

static bool is_model_scalar(const cJSON *c) {
    const cJSON *v = model_value(c);
    return c->string && v && (cJSON_IsNumber(v) || cJSON_IsBool(v) || cJSON_IsString(v));
}

/* Sets (or overwrites) one field.  The array was sized for every candidate. */
static moeq_status set_model_field(parse_ctx *ctx, const cJSON *named) {
    moeq_config *cfg = ctx->cfg;
    const cJSON *c = model_value(named);
    moeq__model_field *f = NULL;
    for (uint32_t i = 0; i < cfg->n_model_fields && !f; i++) {
        if (strcmp(cfg->model_fields[i].key, named->string) == 0) f = &cfg->model_fields[i];
    }
    char *string = NULL;
    if (cJSON_IsString(c)) {
        string = moeq__strdup(c->valuestring);
        if (!string) return nomem(ctx);
    }
    if (!f) {
        char *key = moeq__strdup(named->string);
        if (!key) {
            moeq__free(string);
            return nomem(ctx);
        }
        f = &cfg->model_fields[cfg->n_model_fields++];
        f->key = key;
    }
    moeq__free(f->string);
    f->string = string;
    f->is_string = string != NULL;
    f->number = cJSON_IsNumber(c) ? c->valuedouble : (cJSON_IsTrue(c) ? 1.0 : 0.0);
    return MOEQ_STATUS_OK;
}

/* text_config first, then the top level, so that the top level wins and,
 * within one level, the last of repeated keys wins. */
static moeq_status record_model_fields(parse_ctx *ctx, const cJSON *root) {
    const cJSON *text = get_item(root, "text_config");
    if (text && !cJSON_IsObject(text)) text = NULL;
    size_t n = 0;
    const cJSON *levels[2] = {text, root};
    for (size_t l = 0; l < 2; l++) {
        if (!levels[l]) continue;
        for (const cJSON *c = levels[l]->child; c; c = c->next) n += is_model_scalar(c) ? 1u : 0u;
    }
    if (n == 0) return MOEQ_STATUS_OK;
    moeq_config *cfg = ctx->cfg;
    cfg->model_fields = moeq__calloc(n, sizeof *cfg->model_fields);
    if (!cfg->model_fields) return nomem(ctx);
    for (size_t l = 0; l < 2; l++) {
        if (!levels[l]) continue;
        for (const cJSON *c = levels[l]->child; c; c = c->next) {
            if (!is_model_scalar(c)) continue;
            moeq_status st = set_model_field(ctx, c);
            if (st != MOEQ_STATUS_OK) return st;
        }
    }
    return MOEQ_STATUS_OK;
}

/* ------------------------------------------------------------------------ */
/* Locating the block and building the config                                */
/* ------------------------------------------------------------------------ */

/* CT's cascade (utils/safetensors_load.py): a key's presence decides. */
static moeq_status locate_block(parse_ctx *ctx, const cJSON *root, const cJSON **block,
                                const char **source_key) {
    const cJSON *v = NULL;
    const cJSON *text = get_item(root, "text_config");
    if ((v = get_item(root, "quantization_config")) != NULL) {
        *source_key = "quantization_config";
    } else if (text && cJSON_IsObject(text) &&
               (v = get_item(text, "quantization_config")) != NULL) {
        *source_key = "text_config.quantization_config";
    } else if ((v = get_item(root, "compression_config")) != NULL) {
        *source_key = "compression_config";
    } else if (get_item(root, "config_groups") || get_item(root, "quant_method")) {
        v = root;
        *source_key = "";
    } else {
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "no quantization config found: expected a \"quantization_config\", "
                           "\"text_config.quantization_config\" or \"compression_config\" object, "
                           "or a bare quantization config with \"config_groups\"");
    }
    if (!cJSON_IsObject(v)) {
        return type_error(ctx, *source_key, "a quantization config object", v);
    }
    *block = v;
    return MOEQ_STATUS_OK;
}

static moeq_status build_config(parse_ctx *ctx, const cJSON *root) {
    moeq_config *cfg = ctx->cfg;
    if (!cJSON_IsObject(root)) {
        char what[160];
        return moeq__error(ctx->err, MOEQ_STATUS_SCHEMA,
                           "expected a JSON object (a config.json or a quantization config) at "
                           "the top level, found %s", describe(root, what, sizeof what));
    }
    const cJSON *block = NULL;
    const char *key = "";
    moeq_status st = locate_block(ctx, root, &block, &key);
    if (st != MOEQ_STATUS_OK) return st;
    cfg->source_key = moeq__strdup(key);
    if (!cfg->source_key) return nomem(ctx);
    const char *bp = cfg->source_key; /* every JSON path starts here */

    /* The method first: a GPTQ or FP8 config should not be reported for the
     * keys it lacks.  The version next: derivation defaults depend on it. */
    st = parse_quant_method(ctx, bp, get_item(block, "quant_method"));
    if (st == MOEQ_STATUS_OK) st = check_keys(ctx, block, bp, &k_top_key_set);
    if (st == MOEQ_STATUS_OK) st = parse_version(ctx, bp, get_item(block, "version"));
    if (st == MOEQ_STATUS_OK) st = parse_top_format(ctx, bp, get_item(block, "format"));
    if (st == MOEQ_STATUS_OK) st = parse_status(ctx, bp, get_item(block, "quantization_status"));
    if (st == MOEQ_STATUS_OK) st = parse_ratio(ctx, bp, get_item(block, "global_compression_ratio"));
    if (st == MOEQ_STATUS_OK) st = parse_ignore(ctx, bp, get_item(block, "ignore"));
    if (st == MOEQ_STATUS_OK) st = parse_sparsity(ctx, bp, get_item(block, "sparsity_config"));
    if (st == MOEQ_STATUS_OK) st = parse_transform(ctx, bp, get_item(block, "transform_config"));
    if (st == MOEQ_STATUS_OK) st = parse_kv_cache(ctx, bp, get_item(block, "kv_cache_scheme"));
    if (st == MOEQ_STATUS_OK) st = parse_groups(ctx, bp, get_item(block, "config_groups"));
    /* moe_sparsity_config: a field of CT's QuantizationConfig (inside the
     * block); taken from the top level of config.json too when the block
     * lacks it. */
    if (st == MOEQ_STATUS_OK) {
        const cJSON *ms = get_item(block, "moe_sparsity_config");
        char p[PATH_SIZE];
        path_key(p, bp, "moe_sparsity_config");
        if ((!ms || cJSON_IsNull(ms)) && block != root) {
            ms = get_item(root, "moe_sparsity_config");
            snprintf(p, sizeof p, "moe_sparsity_config");
        }
        st = parse_moe_sparsity(ctx, p, ms);
    }
    /* run_compressed is accepted and dropped, as CT does. */
    if (st == MOEQ_STATUS_OK && block != root) st = record_model_fields(ctx, root);
    if (st == MOEQ_STATUS_OK) st = check_moe_sparsity_layers(ctx);
    return st;
}

/* ------------------------------------------------------------------------ */
/* JSON syntax                                                               */
/* ------------------------------------------------------------------------ */

static moeq_status syntax_error(moeq_error *err, const char *json, size_t len, size_t off,
                                const char *what) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < off && i < len; i++) {
        if (json[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    /* A few bytes of context, printable ASCII only. */
    char near[24];
    size_t k = 0;
    for (size_t i = off; i < len && k < 16; i++) {
        unsigned char c = (unsigned char)json[i];
        if (c == '\n') break;
        near[k++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    near[k] = '\0';
    return moeq__error(err, MOEQ_STATUS_JSON,
                       "JSON syntax error at byte %zu (line %zu, column %zu): %s%s%s%s", off, line,
                       col, what, k ? " near '" : "", near, k ? "'" : "");
}

/* cJSON reports the last byte both when the input stops early and when the
 * last byte itself is wrong.  Parsing again with one more blank tells them
 * apart: only a truncated input then fails past the original end. */
static bool input_ends_early(const char *json, size_t len) {
    char *padded = moeq__malloc(len + 1);
    if (!padded) return false;
    memcpy(padded, json, len);
    padded[len] = ' ';
    const char *end = NULL;
    moeq__json_lock();
    cJSON *again = cJSON_ParseWithLengthOpts(padded, len + 1, &end, 0);
    moeq__json_unlock();
    bool early = !again && end && (size_t)(end - padded) >= len;
    cJSON_Delete(again);
    moeq__free(padded);
    return early;
}

static moeq_status parse_json(const char *json, size_t len, cJSON **out, moeq_error *err) {
    *out = NULL;
    if (len == 0) return syntax_error(err, json, 0, 0, "empty input");
    const char *end = NULL;
    moeq__json_lock();
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    moeq__json_unlock();
    if (!root) {
        size_t off = (end && end >= json) ? (size_t)(end - json) : 0;
        if (off > len) off = len;
        if (off + 1 >= len && input_ends_early(json, len)) {
            return syntax_error(err, json, len, len, "unexpected end of input (truncated?)");
        }
        return syntax_error(err, json, len, off, "invalid JSON");
    }
    size_t off = (size_t)(end - json);
    while (off < len && (json[off] == ' ' || json[off] == '\t' || json[off] == '\n' ||
                         json[off] == '\r')) {
        off++;
    }
    if (off < len) {
        cJSON_Delete(root);
        return syntax_error(err, json, len, off, "unexpected text after the JSON value");
    }
    *out = root;
    return MOEQ_STATUS_OK;
}

/* ------------------------------------------------------------------------ */
/* Public: parse, load, destroy                                              */
/* ------------------------------------------------------------------------ */

static void free_string_list(char **list, uint32_t n) {
    if (!list) return;
    for (uint32_t i = 0; i < n; i++) moeq__free(list[i]);
    moeq__free(list);
}

void moeq_config_destroy(moeq_config *cfg) {
    if (!cfg) return;
    moeq__matcher_destroy(cfg->matcher);
    for (uint32_t i = 0; i < cfg->n_groups; i++) {
        moeq__free(cfg->groups[i].name);
        free_string_list(cfg->groups[i].targets, cfg->groups[i].n_targets);
    }
    moeq__free(cfg->groups);
    free_string_list(cfg->ignore, cfg->n_ignore);
    free_string_list(cfg->warnings, cfg->n_warnings);
    free_string_list(cfg->strings, cfg->n_strings);
    for (uint32_t i = 0; i < cfg->n_model_fields; i++) {
        moeq__free(cfg->model_fields[i].key);
        moeq__free(cfg->model_fields[i].string);
    }
    moeq__free(cfg->model_fields);
    moeq__free(cfg->source_key);
    moeq__free(cfg->quant_method);
    moeq__free(cfg->version);
    moeq__free(cfg->quantization_status);
    moeq__free(cfg->raw_sparsity);
    moeq__free(cfg->raw_transform);
    moeq__free(cfg->raw_kv_cache);
    moeq__free(cfg->moe_sparsity);
    moeq__free(cfg->moe_sparsity_path);
    moeq__free(cfg);
}

moeq_status moeq_config_parse(const char *json, size_t len, const moeq_config_options *opts,
                              moeq_config **out, moeq_error *err) {
    if (!out) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "moeq_config_parse: out is NULL");
    *out = NULL;
    if (!json && len > 0) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "moeq_config_parse: json is NULL");
    }
    cJSON *root = NULL;
    moeq_status st = parse_json(json, len, &root, err);
    if (st != MOEQ_STATUS_OK) return st;

    moeq_config *cfg = moeq__calloc(1, sizeof *cfg);
    if (!cfg) {
        cJSON_Delete(root);
        return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory while parsing the quantization config");
    }
    cfg->version_major = cfg->version_minor = cfg->version_patch = -1;
    parse_ctx ctx = {cfg, opts && opts->strict_keys, err};
    st = build_config(&ctx, root);
    cJSON_Delete(root);
    if (st == MOEQ_STATUS_OK) {
        cfg->regex_match_limit = (opts && opts->regex_match_limit) ? opts->regex_match_limit
                                                                  : DEFAULT_REGEX_MATCH_LIMIT;
        st = moeq__matcher_create(cfg, err);
    }
    if (st != MOEQ_STATUS_OK) {
        moeq_config_destroy(cfg);
        return st;
    }
    for (uint32_t i = 0; i < cfg->n_warnings; i++) moeq__log(MOEQ_LOG_WARN, "%s", cfg->warnings[i]);
    *out = cfg;
    return MOEQ_STATUS_OK;
}

moeq_status moeq_config_load(const char *path, const moeq_config_options *opts,
                             moeq_config **out, moeq_error *err) {
    if (!out) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "moeq_config_load: out is NULL");
    *out = NULL;
    if (!path) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "moeq_config_load: path is NULL");
    /* A model directory means its config.json. */
    char *file;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        size_t n = strlen(path);
        bool slash = n > 0 && path[n - 1] == '/';
        moeq__sb b;
        moeq__sb_init(&b);
        moeq__sb_puts(&b, path);
        moeq__sb_puts(&b, slash ? "config.json" : "/config.json");
        file = moeq__sb_take(&b);
    } else {
        file = moeq__strdup(path);
    }
    if (!file) return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory", path);
    char *text = NULL;
    size_t len = 0;
    moeq_status st = moeq__read_file(file, &text, &len, err);
    if (st == MOEQ_STATUS_OK) {
        st = moeq_config_parse(text, len, opts, out, err);
        if (st != MOEQ_STATUS_OK) moeq__error_prefix(err, st, "%s", file);
    }
    moeq__free(text);
    moeq__free(file);
    return st;
}

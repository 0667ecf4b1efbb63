/*
 * check_inspect.c - moeq_inspect over small model directories written here
 * (config.json + model.safetensors in a mkdtemp directory): a clean
 * mixed-precision MoE model, then one defect at a time, each asserting the
 * exact tensor in the right list; the JSON shape; the `moeq inspect` exit codes.
 */
#include "test_util.h"
#include "common/internal.h"
#include "kernels.h"

#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- strings --------------------------------------------------------------------- */

static bool has_sub(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++) {
        if (memcmp(s + i, needle, k) == 0) return true;
    }
    return false;
}

/* Check truncates long messages: the report goes to stderr instead. */
#define ck_assert_report(cond, report, ...)                                              \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "---- report ----\n%s---- end ----\n", (report));            \
            ck_abort_msg(__VA_ARGS__);                                                    \
        }                                                                                 \
    } while (0)

/* The table row of `layer`, its cells joined by single spaces, starts with `cells`. */
static void assert_row(const char *text, const char *layer, const char *cells) {
    char needle[300];
    snprintf(needle, sizeof needle, "\n%s ", layer);
    const char *at = strstr(text, needle);
    ck_assert_report(at != NULL, text, "no row %s", layer);
    at++;
    char row[1024];
    size_t n = 0;
    for (const char *p = at; *p && *p != '\n' && n + 1 < sizeof row; p++) {
        if (*p == ' ' && n > 0 && row[n - 1] == ' ') continue;
        row[n++] = *p;
    }
    row[n] = '\0';
    char want[1024];
    snprintf(want, sizeof want, "%s %s", layer, cells);
    ck_assert_report(strncmp(row, want, strlen(want)) == 0, text, "row '%s', want '%s'", row, want);
}

/* Inserts `text` into buf (size n) after the first `after`. */
static void insert_after(char *buf, size_t n, const char *after, const char *text) {
    char *at = strstr(buf, after);
    ck_assert_ptr_nonnull(at);
    at += strlen(after);
    size_t k = strlen(text);
    ck_assert_uint_lt(strlen(buf) + k, n);
    memmove(at + k, at, strlen(at) + 1);
    memcpy(at, text, k);
}

/* ---- a model directory ------------------------------------------------------------ */

#define MAX_TENSORS 512

typedef struct model {
    char dir[64];
    moeq_tensor t[MAX_TENSORS];
    char *names[MAX_TENSORS];
    void *data[MAX_TENSORS];
    uint32_t n;
} model;

static void model_init(model *m) {
    memset(m, 0, sizeof *m);
    snprintf(m->dir, sizeof m->dir, "/tmp/moeq_inspect_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(m->dir));
}

static int find_index(const model *m, const char *name) {
    for (uint32_t i = 0; i < m->n; i++) {
        if (strcmp(m->names[i], name) == 0) return (int)i;
    }
    return -1;
}

/* Adds (or replaces) a tensor; data NULL means zeros. */
static moeq_tensor *put(model *m, const char *name, int32_t dtype, int32_t ndim, const int64_t *shape,
                        const void *data) {
    int i = find_index(m, name);
    if (i < 0) {
        ck_assert_uint_lt(m->n, MAX_TENSORS);
        i = (int)m->n++;
        m->names[i] = strdup(name);
    } else {
        free(m->data[i]);
    }
    size_t bytes = moeq_dtype_size(dtype);
    moeq_tensor *t = &m->t[i];
    memset(t, 0, sizeof *t);
    t->ndim = ndim;
    for (int32_t d = 0; d < ndim; d++) {
        t->shape[d] = shape[d];
        bytes *= (size_t)shape[d];
    }
    m->data[i] = calloc(1, bytes + 1);
    if (data) memcpy(m->data[i], data, bytes);
    t->name = m->names[i];
    t->dtype = dtype;
    t->data = m->data[i];
    t->nbytes = bytes;
    return t;
}

static moeq_tensor *putf(model *m, int32_t dtype, int32_t ndim, const int64_t *shape,
                         const void *data, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static moeq_tensor *putf(model *m, int32_t dtype, int32_t ndim, const int64_t *shape,
                         const void *data, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return put(m, name, dtype, ndim, shape, data);
}

static void drop(model *m, const char *name) {
    int i = find_index(m, name);
    ck_assert_msg(i >= 0, "no tensor %s to drop", name);
    free(m->names[i]);
    free(m->data[i]);
    m->n--;
    m->names[i] = m->names[m->n];
    m->data[i] = m->data[m->n];
    m->t[i] = m->t[m->n];
}

/* Drops every tensor whose name starts with prefix. */
static void drop_prefix(model *m, const char *prefix) {
    for (uint32_t i = 0; i < m->n;) {
        if (strncmp(m->names[i], prefix, strlen(prefix)) == 0) {
            drop(m, m->names[i]);
        } else {
            i++;
        }
    }
}

static void model_write(const model *m, const char *config) {
    char path[128];
    snprintf(path, sizeof path, "%s/config.json", m->dir);
    moeq_test_write_text(path, config);
    snprintf(path, sizeof path, "%s/model.safetensors", m->dir);
    moeq_error err;
    ck_assert_ok(moeq_safetensors_write(path, m->t, m->n, NULL, &err), &err);
}

/* MOEQ_TEST_KEEP=1 keeps the directories (their paths go to stderr) to try
 * `moeq inspect` on them by hand. */
static void model_free(model *m) {
    if (getenv("MOEQ_TEST_KEEP")) {
        fprintf(stderr, "kept %s\n", m->dir);
        for (uint32_t i = 0; i < m->n; i++) {
            free(m->names[i]);
            free(m->data[i]);
        }
        m->n = 0;
        return;
    }
    char path[128];
    snprintf(path, sizeof path, "%s/config.json", m->dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", m->dir);
    unlink(path);
    rmdir(m->dir);
    for (uint32_t i = 0; i < m->n; i++) {
        free(m->names[i]);
        free(m->data[i]);
    }
    m->n = 0;
}

/* ---- weights --------------------------------------------------------------------- */

static uint32_t g_seed = 12345;

static float rnd(void) {
    g_seed = g_seed * 1664525u + 1013904223u;
    return moeq__round_to_dtype(MOEQ_DTYPE_BF16, (float)((g_seed >> 8) & 0xFFFF) / 32768.0f - 1.0f);
}

static float *random_matrix(int64_t rows, int64_t cols) {
    float *w = malloc(sizeof *w * (size_t)(rows * cols));
    for (int64_t i = 0; i < rows * cols; i++) w[i] = rnd();
    return w;
}

static void put_bf16(model *m, const char *name, int32_t ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int32_t d = 0; d < ndim; d++) n *= shape[d];
    uint16_t *v = malloc(sizeof *v * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = moeq__f32_to_bf16(rnd());
    put(m, name, MOEQ_DTYPE_BF16, ndim, shape, v);
    free(v);
}

static void put_bf16_2d(model *m, const char *name, int64_t rows, int64_t cols) {
    const int64_t s[2] = {rows, cols};
    put_bf16(m, name, 2, s);
}

static void put_bf16_1d(model *m, const char *name, int64_t n) {
    put_bf16(m, name, 1, &n);
}

static void put_scales(model *m, const char *name, const float *s, int64_t rows, int64_t cols) {
    uint16_t *v = malloc(sizeof *v * (size_t)(rows * cols));
    for (int64_t i = 0; i < rows * cols; i++) v[i] = moeq__f32_to_bf16(s[i]);
    const int64_t shape[2] = {rows, cols};
    put(m, name, MOEQ_DTYPE_BF16, 2, shape, v);
    free(v);
}

/* Module `mod` as compressed-tensors pack-quantized int<bits>, group gs
 * (0: channel), symmetric, from the kernels' own quantizer and packer. */
static void add_pack(model *m, const char *mod, int64_t rows, int64_t cols, int bits, int gs) {
    float *w = random_matrix(rows, cols);
    moeq__wquant a = {MOEQ_QTYPE_INT, bits, 1, gs ? MOEQ_STRATEGY_GROUP : MOEQ_STRATEGY_CHANNEL,
                      gs, 0, 0, MOEQ_DTYPE_BF16};
    int64_t g = gs ? cols / gs : 1;
    float *scale = malloc(sizeof *scale * (size_t)(rows * g));
    int8_t *q = malloc((size_t)(rows * cols));
    moeq__quantize_int_ref(&a, w, (size_t)rows, (size_t)cols, NULL, scale, NULL, q);
    size_t words = moeq__int_packed_words((size_t)cols, bits, false);
    uint32_t *packed = calloc((size_t)rows * words, sizeof *packed);
    for (int64_t r = 0; r < rows; r++) {
        moeq__int_pack_row_ref(q + r * cols, (size_t)cols, bits, false, packed + (size_t)r * words);
    }
    char name[320];
    const int64_t ps[2] = {rows, (int64_t)words}, two = 2, logical[2] = {rows, cols};
    snprintf(name, sizeof name, "%s.weight_packed", mod);
    put(m, name, MOEQ_DTYPE_I32, 2, ps, packed);
    snprintf(name, sizeof name, "%s.weight_shape", mod);
    put(m, name, MOEQ_DTYPE_I64, 1, &two, logical);
    snprintf(name, sizeof name, "%s.weight_scale", mod);
    put_scales(m, name, scale, rows, g);
    free(w);
    free(scale);
    free(q);
    free(packed);
}

/* Module `mod` as int-quantized int8 channel symmetric (weight I8 [out, in]). */
static void add_int8(model *m, const char *mod, int64_t rows, int64_t cols) {
    float *w = random_matrix(rows, cols);
    moeq__wquant a = {MOEQ_QTYPE_INT, 8, 1, MOEQ_STRATEGY_CHANNEL, 0, 0, 0, MOEQ_DTYPE_BF16};
    float *scale = malloc(sizeof *scale * (size_t)rows);
    int8_t *q = malloc((size_t)(rows * cols));
    moeq__quantize_int_ref(&a, w, (size_t)rows, (size_t)cols, NULL, scale, NULL, q);
    char name[320];
    const int64_t s[2] = {rows, cols};
    snprintf(name, sizeof name, "%s.weight", mod);
    put(m, name, MOEQ_DTYPE_I8, 2, s, q);
    snprintf(name, sizeof name, "%s.weight_scale", mod);
    put_scales(m, name, scale, rows, 1);
    free(w);
    free(scale);
    free(q);
}

/* Module `mod` as nvfp4-pack-quantized (tensor_group 16). */
static void add_nvfp4(model *m, const char *mod, int64_t rows, int64_t cols) {
    float *w = random_matrix(rows, cols);
    float amax = 0.0f;
    for (int64_t i = 0; i < rows * cols; i++) amax = fabsf(w[i]) > amax ? fabsf(w[i]) : amax;
    float global = moeq__nvfp4_global_scale_ref(amax, MOEQ_DTYPE_BF16);
    moeq__wquant a = {MOEQ_QTYPE_FLOAT, 4, 1, MOEQ_STRATEGY_TENSOR_GROUP, 16, 0, 0, MOEQ_DTYPE_BF16};
    uint8_t *scale = malloc((size_t)(rows * cols / 16));
    uint8_t *packed = malloc((size_t)(rows * cols / 2));
    moeq__quantize_nvfp4_ref(&a, w, (size_t)rows, (size_t)cols, global, scale, packed);
    char name[320];
    const int64_t ps[2] = {rows, cols / 2}, ss[2] = {rows, cols / 16}, one = 1;
    snprintf(name, sizeof name, "%s.weight_packed", mod);
    put(m, name, MOEQ_DTYPE_U8, 2, ps, packed);
    snprintf(name, sizeof name, "%s.weight_scale", mod);
    put(m, name, MOEQ_DTYPE_F8_E4M3, 2, ss, scale);
    snprintf(name, sizeof name, "%s.weight_global_scale", mod);
    put(m, name, MOEQ_DTYPE_F32, 1, &one, &global);
    free(w);
    free(scale);
    free(packed);
}

static void put_f32_scalar(model *m, const char *name, float v) {
    const int64_t one = 1;
    put(m, name, MOEQ_DTYPE_F32, 1, &one, &v);
}

/* ---- the clean model --------------------------------------------------------------- */

#define H  64 /* hidden */
#define I  32 /* moe intermediate */
#define E  4  /* experts */
#define L  2  /* layers */
#define V  32 /* vocabulary */

static const char *const k_proj3[3] = {"gate_proj", "up_proj", "down_proj"};

/* int4 group-32 experts (pack-quantized), int8 W8A8 shared expert
 * (int-quantized, dynamic token inputs), 16-bit attention (no target),
 * ignored router, lm_head and embeddings, norms. */
static const char *k_config_fmt =
    "{\"architectures\":[\"Qwen2MoeForCausalLM\"],\"model_type\":\"qwen2_moe\","
    "\"hidden_size\":64,\"moe_intermediate_size\":32,\"num_experts\":4,%s"
    "\"quantization_config\":{\"quant_method\":\"compressed-tensors\","
    "\"format\":\"mixed-precision\",\"version\":\"0.18.0\",\"quantization_status\":\"compressed\","
    "\"config_groups\":{"
    "\"group_0\":{\"targets\":[\"re:.*mlp\\\\.experts\\\\.\\\\d+\\\\.(gate|up|down)_proj$\"],"
    "\"weights\":{\"num_bits\":4,\"type\":\"int\",\"symmetric\":true,\"strategy\":\"group\","
    "\"group_size\":32%s},\"format\":\"pack-quantized\"},"
    "\"group_1\":{\"targets\":[\"re:.*shared_expert\\\\.(gate|up|down)_proj$\"],"
    "\"weights\":{\"num_bits\":8,\"type\":\"int\",\"symmetric\":true,\"strategy\":\"channel\"},"
    "\"input_activations\":%s,\"format\":\"int-quantized\"}},"
    "\"ignore\":[\"lm_head\",\"re:.*mlp\\\\.gate$\",\"re:.*embed_tokens$\"]%s}}";

static const char *k_dynamic_token =
    "{\"num_bits\":8,\"type\":\"int\",\"symmetric\":true,\"strategy\":\"token\",\"dynamic\":true}";
static const char *k_static_tensor =
    "{\"num_bits\":8,\"type\":\"int\",\"symmetric\":true,\"strategy\":\"tensor\",\"dynamic\":false}";
static const char *k_kv_fp8 =
    ",\"kv_cache_scheme\":{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\","
    "\"dynamic\":false,\"symmetric\":true}";

static char g_config[4096];

static const char *config(const char *extra_model, const char *weight_extra, const char *inputs,
                          const char *extra_quant) {
    snprintf(g_config, sizeof g_config, k_config_fmt, extra_model, weight_extra, inputs, extra_quant);
    return g_config;
}

static const char *clean_config(void) {
    return config("", "", k_dynamic_token, "");
}

static void build_clean(model *m) {
    model_init(m);
    put_bf16_2d(m, "model.embed_tokens.weight", V, H);
    put_bf16_1d(m, "model.norm.weight", H);
    put_bf16_2d(m, "lm_head.weight", V, H);
    char name[256];
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        put_bf16_1d(m, name, H);
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
        put_bf16_1d(m, name, H);
        static const char *const attn[4] = {"q_proj", "k_proj", "v_proj", "o_proj"};
        for (int a = 0; a < 4; a++) {
            snprintf(name, sizeof name, "model.layers.%d.self_attn.%s.weight", l, attn[a]);
            put_bf16_2d(m, name, H, H);
        }
        snprintf(name, sizeof name, "model.layers.%d.mlp.gate.weight", l);
        put_bf16_2d(m, name, E, H);
        const int64_t e = E;
        float bias[E] = {0.1f, -0.2f, 0.3f, 0.0f};
        putf(m, MOEQ_DTYPE_F32, 1, &e, bias, "model.layers.%d.mlp.gate.e_score_correction_bias", l);
        for (int x = 0; x < E; x++) {
            for (int p = 0; p < 3; p++) {
                snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.%s", l, x, k_proj3[p]);
                add_pack(m, name, p == 2 ? H : I, p == 2 ? I : H, 4, 32);
            }
        }
        for (int p = 0; p < 3; p++) {
            snprintf(name, sizeof name, "model.layers.%d.mlp.shared_expert.%s", l, k_proj3[p]);
            add_int8(m, name, p == 2 ? H : I, p == 2 ? I : H);
        }
    }
}

#define CLEAN_TENSORS (3 + L * (2 + 4 + 2 + E * 3 * 3 + 3 * 2))
#define CLEAN_MODULES (3 + L * (2 + 4 + 1 + E * 3 + 3))

/* ---- running it ------------------------------------------------------------------- */

typedef struct result {
    char *text;
    moeq_inspect_summary sum;
} result;

static result run_opts(const model *m, const moeq_inspect_options *opts) {
    moeq_error err;
    moeq_config *cfg = NULL;
    moeq_checkpoint *ck = NULL;
    ck_assert_ok(moeq_config_load(m->dir, NULL, &cfg, &err), &err);
    ck_assert_ok(moeq_checkpoint_open(m->dir, &ck, &err), &err);
    result r;
    memset(&r, 0, sizeof r);
    ck_assert_ok(moeq_inspect(cfg, ck, opts, &r.text, &r.sum, &err), &err);
    moeq_checkpoint_close(ck);
    moeq_config_destroy(cfg);
    return r;
}

static result run(const model *m, const char *cfg_text) {
    model_write(m, cfg_text);
    return run_opts(m, NULL);
}

static void result_free(result *r) {
    moeq_free(r->text);
    r->text = NULL;
}

/* The text of one list ("unconsumed tensors", ...) of a text report. */
static const char *section(const result *r, const char *title) {
    const char *s = strstr(r->text, title);
    ck_assert_report(s != NULL, r->text, "no section '%s'", title);
    return s;
}

/* The entry of `tensor` in a list: its line and the reason after it. */
static void assert_listed(const result *r, const char *title, const char *tensor, const char *why) {
    const char *s = section(r, title);
    const char *end = strstr(s + 1, "\n\n");
    char needle[512];
    snprintf(needle, sizeof needle, "\n  %s\n      ", tensor);
    const char *at = strstr(s, needle);
    ck_assert_report(at && (!end || at < end), r->text, "%s not listed under '%s'", tensor, title);
    const char *reason = at + strlen(needle);
    const char *eol = strchr(reason, '\n');
    ck_assert_msg(eol && has_sub(reason, (size_t)(eol - reason), why),
                  "%s: reason '%.*s' lacks '%s'", tensor, (int)(eol ? eol - reason : 80), reason, why);
}

static void assert_counts(const result *r, uint64_t unconsumed, uint64_t missing, uint64_t errors) {
    ck_assert_report(r->sum.unconsumed == unconsumed && r->sum.missing == missing &&
                         r->sum.errors == errors,
                     r->text, "unconsumed %llu missing %llu errors %llu, want %llu %llu %llu",
                     (unsigned long long)r->sum.unconsumed, (unsigned long long)r->sum.missing,
                     (unsigned long long)r->sum.errors, (unsigned long long)unconsumed,
                     (unsigned long long)missing, (unsigned long long)errors);
}

/* ---- tests ------------------------------------------------------------------------ */

START_TEST(test_clean_model) {
    model m;
    build_clean(&m);
    result r = run(&m, clean_config());
    assert_counts(&r, 0, 0, 0);
    ck_assert_uint_eq(r.sum.tensors, CLEAN_TENSORS);
    ck_assert_uint_eq(r.sum.modules, CLEAN_MODULES);
    ck_assert_uint_eq(r.sum.moe_layers, L);
    ck_assert_uint_eq(r.sum.expert_modules, L * E * 3);
    ck_assert_uint_eq(r.sum.quantized, L * (E * 3 + 3));
    ck_assert_uint_eq(r.sum.ignored, 2 + L); /* lm_head, embed_tokens, routers */
    ck_assert_uint_eq(r.sum.unmatched, 1 + L * (2 + 4));
    ck_assert_uint_eq(r.sum.warnings, 0);
    /* the plan: MoE layers as one row each, in natural order */
    ck_assert_ptr_nonnull(strstr(r.text, "LAYER"));
    assert_row(r.text, "model.layers.0.mlp.experts",
               "(4 experts) moe quantized group_0 pack-quantized wna16 int4 group(32) sym static -");
    assert_row(r.text, "model.layers.1.mlp.experts", "(4 experts) moe quantized group_0");
    assert_row(r.text, "model.layers.0.mlp.shared_expert.up_proj",
               "linear quantized group_1 int-quantized - int8 channel sym static int8 token sym dynamic");
    ck_assert_ptr_null(strstr(r.text, "experts.0.up_proj")); /* no expert rows */
    assert_row(r.text, "model.layers.0.mlp.gate", "linear ignored - - - - -");
    ck_assert_ptr_nonnull(strstr(r.text, "\n    ignored by ignore[1] \"re:.*mlp\\.gate$\"\n"));
    assert_row(r.text, "model.embed_tokens", "other ignored");
    assert_row(r.text, "model.layers.0.input_layernorm", "other unmatched");
    assert_row(r.text, "lm_head", "linear ignored");
    assert_row(r.text, "model.layers.0.self_attn.q_proj", "linear unmatched");
    const char *l0 = strstr(r.text, "model.layers.0.input"), *l1 = strstr(r.text, "model.layers.1.input"),
               *norm = strstr(r.text, "model.norm");
    ck_assert(l0 && l1 && norm && l0 < l1 && l1 < norm);
    ck_assert_ptr_nonnull(strstr(r.text, "\nunconsumed tensors: 0\n"));
    ck_assert_ptr_nonnull(strstr(r.text, "\nmissing tensors: 0\n"));
    ck_assert_ptr_nonnull(strstr(r.text, "\nmodule errors: 0\n"));
    ck_assert_ptr_nonnull(strstr(r.text, "\nsummary: 103 tensors, 47 modules (2 MoE layers of 24 "
                                         "expert modules; 30 quantized, 4 ignored, 13 unmatched); "
                                         "0 unconsumed, 0 missing, 0 module errors, 0 warnings\n"));
    result_free(&r);

    /* names_only reads no data and finds the same */
    model_write(&m, clean_config());
    moeq_inspect_options o = {NULL, NULL, 0, 1, NULL};
    r = run_opts(&m, &o);
    assert_counts(&r, 0, 0, 0);
    result_free(&r);
    model_free(&m);
}
END_TEST

/* compressed-tensors 0.20's moe_sparsity_config: a pruned layer's tensors must
 * name exactly its retained experts 0..k-1; novice layers are refused. */
static const char *sparsity_config(const char *ms) {
    static char extra[256];
    snprintf(extra, sizeof extra, ",\"moe_sparsity_config\":%s", ms);
    return config("\"num_hidden_layers\":2,", "", k_dynamic_token, extra);
}

START_TEST(test_moe_sparsity) {
    model m;
    build_clean(&m);
    /* every layer keeps its 4 experts: clean */
    result r = run(&m, sparsity_config("{\"method\":\"prune\",\"num_experts\":[4,4]}"));
    assert_counts(&r, 0, 0, 0);
    result_free(&r);
    /* layer 1 retains 3, but its tensors hold 4 experts */
    r = run(&m, sparsity_config("{\"method\":\"prune\",\"num_experts\":[4,3]}"));
    ck_assert_report(r.sum.errors == 1, r.text, "errors %llu", (unsigned long long)r.sum.errors);
    ck_assert_report(strstr(r.text, "MoE layer \"model.layers.1.mlp.experts\": moe_sparsity_config "
                                    "(prune) says it retains 3 experts (ids 0..2), but its tensors "
                                    "name 4 experts with ids up to 3") != NULL,
                     r.text, "no disagreement reported");
    ck_assert_ptr_null(strstr(r.text, "\"model.layers.0.mlp.experts\": moe_sparsity_config"));
    result_free(&r);
    /* pruned on disk as the config says: clean again */
    drop_prefix(&m, "model.layers.1.mlp.experts.3.");
    r = run(&m, sparsity_config("{\"method\":\"prune\",\"num_experts\":[4,3]}"));
    assert_counts(&r, 0, 0, 0);
    result_free(&r);
    /* ... and the config that does not prune it finds expert 3 missing */
    r = run(&m, sparsity_config("{\"method\":\"prune\",\"num_experts\":[4,4]}"));
    ck_assert_report(r.sum.errors == 1, r.text, "errors %llu", (unsigned long long)r.sum.errors);
    ck_assert_report(strstr(r.text, "retains 4 experts (ids 0..3), but its tensors name 3 experts "
                                    "with ids up to 2") != NULL,
                     r.text, "no disagreement reported");
    result_free(&r);
    /* novice: refused, naming the layer */
    r = run(&m, sparsity_config("{\"method\":\"novice\",\"num_experts\":[4,3]}"));
    ck_assert_report(r.sum.errors == 2, r.text, "errors %llu", (unsigned long long)r.sum.errors);
    ck_assert_report(strstr(r.text, "model.layers.1.mlp.experts") && strstr(r.text, "novice"),
                     r.text, "novice not refused");
    result_free(&r);
    model_free(&m);
}
END_TEST

/* One defect per case: what to change, the list, the tensor, the reason. */
typedef struct defect {
    const char *what;
    void (*mutate)(model *m);
    const char *cfg; /* NULL: the clean config */
    const char *list;
    const char *tensor;
    const char *why;
    uint64_t unconsumed, missing, errors;
} defect;

static void d_scale_on_ignored(model *m) {
    const int64_t s[2] = {E, 1};
    put(m, "model.layers.0.mlp.gate.weight_scale", MOEQ_DTYPE_BF16, 2, s, NULL);
}
static void d_zero_point_symmetric(model *m) {
    const int64_t s[2] = {4, 2};
    put(m, "model.layers.1.mlp.experts.2.up_proj.weight_zero_point", MOEQ_DTYPE_I32, 2, s, NULL);
}
static void d_weight_next_to_packed(model *m) {
    put_bf16_2d(m, "model.layers.0.mlp.experts.0.down_proj.weight", H, I);
}
static void d_input_scale_dynamic(model *m) {
    put_f32_scalar(m, "model.layers.0.mlp.shared_expert.up_proj.input_scale", 0.5f);
}
static void d_unknown_param(model *m) {
    put_f32_scalar(m, "model.layers.1.mlp.experts.3.gate_proj.smooth_factor", 1.0f);
}
static void d_unknown_param_unquantized(model *m) {
    put_f32_scalar(m, "model.layers.0.self_attn.o_proj.alpha", 1.0f);
}
static void d_no_weight_shape(model *m) { drop(m, "model.layers.1.mlp.experts.3.gate_proj.weight_shape"); }
static void d_no_expert_scale(model *m) { drop(m, "model.layers.0.mlp.experts.2.down_proj.weight_scale"); }
static void d_bias_without_weight(model *m) {
    /* (a module with no tensor at all is invisible: the bias keeps it) */
    put_bf16_1d(m, "model.layers.1.self_attn.k_proj.bias", H);
    drop(m, "model.layers.1.self_attn.k_proj.weight");
}
/* lm_head is ignored but stored quantized */
static void d_ignored_but_quantized(model *m) {
    drop(m, "lm_head.weight");
    add_pack(m, "lm_head", V, H, 4, 32);
}
static void d_no_expert_projection(model *m) { drop_prefix(m, "model.layers.1.mlp.experts.1.up_proj."); }
static void d_expert_gap(model *m) { drop_prefix(m, "model.layers.0.mlp.experts.2."); }
static void d_kv_without_scheme(model *m) { put_f32_scalar(m, "model.layers.0.self_attn.k_scale", 0.1f); }
static void d_scale_shape(model *m) {
    const int64_t s[2] = {I, 3};
    put(m, "model.layers.1.mlp.experts.0.up_proj.weight_scale", MOEQ_DTYPE_BF16, 2, s, NULL);
}
static void d_packed_dtype(model *m) {
    moeq_tensor *t = &m->t[find_index(m, "model.layers.0.mlp.shared_expert.down_proj.weight")];
    t->dtype = MOEQ_DTYPE_U8; /* same size as I8 */
}
static void d_nan_scale(model *m) {
    moeq_tensor *t = &m->t[find_index(m, "model.layers.0.mlp.experts.3.gate_proj.weight_scale")];
    uint16_t nan = 0x7FC0;
    memcpy((void *)(uintptr_t)t->data, &nan, 2);
}
/* actorder group: every expert projection gets its g_idx but one */
static void d_g_idx(model *m) {
    int32_t gidx[H];
    int32_t gidx_down[I];
    for (int c = 0; c < H; c++) gidx[c] = c / 32;
    for (int c = 0; c < I; c++) gidx_down[c] = 0;
    for (int l = 0; l < L; l++) {
        for (int x = 0; x < E; x++) {
            for (int p = 0; p < 3; p++) {
                if (l == 1 && x == 2 && p == 1) continue;
                const int64_t n = p == 2 ? I : H;
                putf(m, MOEQ_DTYPE_I32, 1, &n, p == 2 ? gidx_down : gidx,
                     "model.layers.%d.mlp.experts.%d.%s.weight_g_idx", l, x, k_proj3[p]);
            }
        }
    }
}
/* static input scales on the shared experts, one missing */
static void d_static_inputs(model *m) {
    for (int l = 0; l < L; l++) {
        for (int p = 0; p < 3; p++) {
            if (l == 0 && p == 2) continue;
            char name[128];
            snprintf(name, sizeof name, "model.layers.%d.mlp.shared_expert.%s.input_scale", l, k_proj3[p]);
            put_f32_scalar(m, name, 0.02f);
        }
    }
}
static void d_static_input_bad(model *m) {
    d_static_inputs(m);
    const int64_t two = 2;
    float v[2] = {0.1f, 0.2f};
    put(m, "model.layers.0.mlp.shared_expert.down_proj.input_scale", MOEQ_DTYPE_F32, 1, &two, v);
}
/* kv-cache scales on layer 0 only */
static void d_kv_layer0(model *m) {
    put_f32_scalar(m, "model.layers.0.self_attn.k_scale", 0.1f);
    put_f32_scalar(m, "model.layers.0.self_attn.v_scale", 0.1f);
}
/* legacy kv scales on layer 1: k_proj.output_scale / v_proj.output_scale */
static void d_kv_legacy(model *m) {
    d_kv_layer0(m);
    put_f32_scalar(m, "model.layers.1.self_attn.k_proj.output_scale", 0.1f);
    put_f32_scalar(m, "model.layers.1.self_attn.v_proj.output_scale", 0.1f);
    put_f32_scalar(m, "model.layers.1.self_attn.q_scale", 0.1f);
}
static void d_kv_not_attention(model *m) {
    d_kv_legacy(m);
    put_f32_scalar(m, "model.layers.1.mlp.gate.k_scale", 0.1f);
}

static char g_cfg_actorder[4096], g_cfg_static[4096], g_cfg_kv[4096];

static const defect k_defects[] = {
    {"weight_scale on an ignored module", d_scale_on_ignored, NULL, "unconsumed tensors",
     "model.layers.0.mlp.gate.weight_scale",
     "module is ignored by ignore[1] \"re:.*mlp\\.gate$\": nothing reads weight_scale", 1, 0, 0},
    {"weight_zero_point under a symmetric config", d_zero_point_symmetric, NULL,
     "unconsumed tensors", "model.layers.1.mlp.experts.2.up_proj.weight_zero_point",
     "pack-quantized int4 group(32) sym static weights are symmetric: nothing reads a zero point",
     1, 0, 1 /* and the layer: wna16 has no parameter for it, as moeq run says */},
    {"weight next to weight_packed", d_weight_next_to_packed, NULL, "unconsumed tensors",
     "model.layers.0.mlp.experts.0.down_proj.weight",
     "store the weight as weight_packed: nothing reads weight", 1, 0, 1},
    {"input_scale with dynamic inputs", d_input_scale_dynamic, NULL, "unconsumed tensors",
     "model.layers.0.mlp.shared_expert.up_proj.input_scale",
     "input activations are dynamic (int8 token sym dynamic): nothing reads input_scale", 1, 0, 0},
    {"unknown parameter of a quantized module", d_unknown_param, NULL, "unconsumed tensors",
     "model.layers.1.mlp.experts.3.gate_proj.smooth_factor",
     "smooth_factor is not a parameter of a quantized module", 1, 0, 1},
    {"unknown parameter of an unquantized module", d_unknown_param_unquantized, NULL,
     "unconsumed tensors", "model.layers.0.self_attn.o_proj.alpha",
     "alpha is not a parameter moeq reads", 1, 0, 0},
    {"kv scale without a kv_cache_scheme", d_kv_without_scheme, NULL, "unconsumed tensors",
     "model.layers.0.self_attn.k_scale", "the config has no kv_cache_scheme: nothing reads k_scale",
     1, 0, 0},
    {"weight_shape of pack-quantized", d_no_weight_shape, NULL, "missing tensors",
     "model.layers.1.mlp.experts.3.gate_proj.weight_shape",
     "pack-quantized int4 group(32) sym static weights need weight_packed, weight_shape and "
     "weight_scale",
     0, 1, 0},
    {"one expert's down_proj.weight_scale", d_no_expert_scale, NULL, "missing tensors",
     "model.layers.0.mlp.experts.2.down_proj.weight_scale", "weights need weight_packed", 0, 1, 0},
    {"weight of an ignored layer stored quantized", d_ignored_but_quantized, NULL,
     "missing tensors", "lm_head.weight",
     "module is ignored by ignore[0] \"lm_head\": a linear layer that is not quantized needs weight",
     3, 1, 0},
    {"the payload of an ignored layer stored quantized", d_ignored_but_quantized, NULL,
     "unconsumed tensors", "lm_head.weight_packed",
     "module is ignored by ignore[0] \"lm_head\": nothing reads weight_packed", 3, 1, 0},
    {"weight next to a bias", d_bias_without_weight, NULL, "missing tensors",
     "model.layers.1.self_attn.k_proj.weight",
     "no config target matches the module (not quantized): a module with a bias needs weight", 0,
     1, 0},
    {"a whole expert projection", d_no_expert_projection, NULL, "missing tensors",
     "model.layers.1.mlp.experts.1.up_proj.weight_shape",
     "expert 1 of MoE layer model.layers.1.mlp.experts has no up_proj tensors", 0, 3, 0},
    {"an expert id gap", d_expert_gap, NULL, "missing tensors",
     "model.layers.0.mlp.experts.2.down_proj.weight_packed",
     "MoE layer model.layers.0.mlp.experts has no expert 2 (its experts run 0..3", 0, 9, 0},
    {"weight_g_idx under actorder group", d_g_idx, g_cfg_actorder, "missing tensors",
     "model.layers.1.mlp.experts.2.up_proj.weight_g_idx",
     "need weight_packed, weight_shape, weight_scale and weight_g_idx (actorder group)", 0, 1, 0},
    {"input_scale of static inputs", d_static_inputs, g_cfg_static, "missing tensors",
     "model.layers.0.mlp.shared_expert.down_proj.input_scale",
     "static input activations (int8 tensor sym static) need input_scale", 0, 1, 0},
    {"kv scales of a static kv_cache_scheme", d_kv_layer0, g_cfg_kv, "missing tensors",
     "model.layers.1.self_attn.v_scale",
     "kv_cache_scheme (float8 tensor sym static) needs k_scale and v_scale", 0, 2, 0},
    {"kv scale on a module that is not attention", d_kv_not_attention, g_cfg_kv,
     "unconsumed tensors", "model.layers.1.mlp.gate.k_scale",
     "not an attention module (no k_proj, v_proj, qkv_proj or kv_b_proj inside)", 1, 0, 0},
};

static const struct {
    const char *what;
    void (*mutate)(model *m);
    const char *cfg;
    const char *module;
    const char *status;
    const char *message;
} k_errors[] = {
    {"scale shape", d_scale_shape, NULL, "model.layers.1.mlp.experts.0.up_proj", "SHAPE",
     "model.layers.1.mlp.experts.0.up_proj.weight_scale: shape [32, 3], expected [32, 2] (out, "
     "ceil(in/group_size=32))"},
    {"int8 weight stored as U8", d_packed_dtype, NULL, "model.layers.0.mlp.shared_expert.down_proj",
     "DTYPE", "model.layers.0.mlp.shared_expert.down_proj.weight: dtype U8, expected I8"},
    {"NaN scale", d_nan_scale, NULL, "model.layers.0.mlp.experts.3.gate_proj", "CHECKPOINT",
     "model.layers.0.mlp.experts.3.gate_proj.weight_scale[0, 0] = nan: scales must be finite"},
    {"input_scale of two values", d_static_input_bad, g_cfg_static,
     "model.layers.0.mlp.shared_expert.down_proj", "SHAPE",
     "model.layers.0.mlp.shared_expert.down_proj.input_scale: shape [2], expected [1] (tensor "
     "strategy)"},
};

static void make_configs(void) {
    snprintf(g_cfg_actorder, sizeof g_cfg_actorder, "%s",
             config("", ",\"actorder\":\"group\"", k_dynamic_token, ""));
    snprintf(g_cfg_static, sizeof g_cfg_static, "%s", config("", "", k_static_tensor, ""));
    snprintf(g_cfg_kv, sizeof g_cfg_kv, "%s", config("", "", k_dynamic_token, k_kv_fp8));
}

START_TEST(test_defect) {
    make_configs();
    const defect *d = &k_defects[_i];
    model m;
    build_clean(&m);
    d->mutate(&m);
    result r = run(&m, d->cfg ? d->cfg : clean_config());
    ck_assert_report(r.sum.unconsumed == d->unconsumed && r.sum.missing == d->missing &&
                         r.sum.errors == d->errors,
                     r.text, "%s: unconsumed %llu missing %llu errors %llu", d->what,
                     (unsigned long long)r.sum.unconsumed, (unsigned long long)r.sum.missing,
                     (unsigned long long)r.sum.errors);
    assert_listed(&r, d->list, d->tensor, d->why);
    result_free(&r);
    model_free(&m);
}
END_TEST

START_TEST(test_module_error) {
    make_configs();
    model m;
    build_clean(&m);
    k_errors[_i].mutate(&m);
    result r = run(&m, k_errors[_i].cfg ? k_errors[_i].cfg : clean_config());
    ck_assert_report(r.sum.errors == 1 && r.sum.missing == 0 && r.sum.unconsumed == 0, r.text,
                     "%s", k_errors[_i].what);
    char line[1024];
    snprintf(line, sizeof line, "\n  %s: %s: ", k_errors[_i].module, k_errors[_i].status);
    const char *at = strstr(section(&r, "module errors"), line);
    ck_assert_report(at != NULL, r.text, "%s: no line '%s'", k_errors[_i].what, line);
    const char *eol = strchr(at + 1, '\n');
    ck_assert_msg(has_sub(at, (size_t)(eol - at), k_errors[_i].message),
                  "%s: '%.*s' lacks '%s'", k_errors[_i].what, (int)(eol - at), at, k_errors[_i].message);
    result_free(&r);
    /* names_only skips the checks */
    model_write(&m, k_errors[_i].cfg ? k_errors[_i].cfg : clean_config());
    moeq_inspect_options o = {NULL, NULL, 0, 1, NULL};
    r = run_opts(&m, &o);
    assert_counts(&r, 0, 0, 0);
    result_free(&r);
    model_free(&m);
}
END_TEST

/* A format moeq cannot read: the layer cannot be planned and no expert's
 * tensors can be accounted; each says so. */
START_TEST(test_unreadable_format) {
    model m;
    build_clean(&m);
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", clean_config());
    char *f = strstr(buf, "\"format\":\"pack-quantized\"");
    ck_assert_ptr_nonnull(f);
    memmove(f, f + 25, strlen(f + 25) + 1);
    insert_after(buf, sizeof buf, "\"group_size\":32},", "\"format\":\"marlin-24\"");
    result r = run(&m, buf);
    assert_counts(&r, 0, 0, (uint64_t)(L + L * E * 3));
    ck_assert_ptr_nonnull(strstr(r.text, "\n  model.layers.0.mlp.experts.1.up_proj: UNSUPPORTED: "
                                         "model.layers.0.mlp.experts.1.up_proj: format 'marlin-24' "
                                         "(8) cannot be dequantized"));
    ck_assert_ptr_nonnull(strstr(r.text, "; its 3 tensors are not accounted\n"));
    assert_row(r.text, "model.layers.0.mlp.experts", "(4 experts) moe error");
    result_free(&r);
    model_free(&m);
}
END_TEST

START_TEST(test_kv_legacy_and_q_scale) {
    make_configs();
    model m;
    build_clean(&m);
    d_kv_legacy(&m);
    result r = run(&m, g_cfg_kv);
    assert_counts(&r, 0, 0, 0);
    result_free(&r);
    model_free(&m);
}
END_TEST

/* NVFP4 W4A4 experts: weight_global_scale and input_global_scale ("local" inputs). */
static const char *k_nvfp4_config =
    "{\"quantization_config\":{\"quant_method\":\"compressed-tensors\","
    "\"format\":\"nvfp4-pack-quantized\",\"version\":\"0.18.0\","
    "\"config_groups\":{\"group_0\":{\"targets\":[\"Linear\"],"
    "\"weights\":{\"num_bits\":4,\"type\":\"float\",\"symmetric\":true,\"strategy\":\"tensor_group\","
    "\"group_size\":16,\"dynamic\":false,\"scale_dtype\":\"torch.float8_e4m3fn\"},"
    "\"input_activations\":{\"num_bits\":4,\"type\":\"float\",\"symmetric\":true,"
    "\"strategy\":\"tensor_group\",\"group_size\":16,\"dynamic\":\"local\"}}},"
    "\"ignore\":[\"lm_head\",\"re:.*mlp\\\\.gate$\"]}}";

START_TEST(test_nvfp4) {
    model m;
    model_init(&m);
    char name[256];
    put_bf16_2d(&m, "model.layers.0.mlp.gate.weight", 2, H);
    for (int x = 0; x < 2; x++) {
        for (int p = 0; p < 3; p++) {
            snprintf(name, sizeof name, "model.layers.0.mlp.experts.%d.%s", x, k_proj3[p]);
            add_nvfp4(&m, name, p == 2 ? H : I, p == 2 ? I : H);
            char in_name[300];
            snprintf(in_name, sizeof in_name, "%s.input_global_scale", name);
            put_f32_scalar(&m, in_name, 100.0f);
        }
    }
    result r = run(&m, k_nvfp4_config);
    assert_counts(&r, 0, 0, 0);
    assert_row(r.text, "model.layers.0.mlp.experts",
               "(2 experts) moe quantized group_0 nvfp4-pack-quantized w4a4_nvfp4");
    result_free(&r);

    drop(&m, "model.layers.0.mlp.experts.1.up_proj.weight_global_scale");
    drop(&m, "model.layers.0.mlp.experts.0.down_proj.input_global_scale");
    r = run(&m, k_nvfp4_config);
    assert_counts(&r, 0, 2, 0);
    assert_listed(&r, "missing tensors", "model.layers.0.mlp.experts.1.up_proj.weight_global_scale",
                  "nvfp4-pack-quantized float4 tensor_group(16) sym static weights need "
                  "weight_packed, weight_scale and weight_global_scale");
    assert_listed(&r, "missing tensors", "model.layers.0.mlp.experts.0.down_proj.input_global_scale",
                  "\"local\" input activations (float4 tensor_group(16) sym local) need "
                  "input_global_scale");
    result_free(&r);
    model_free(&m);
}
END_TEST

/* Mixtral names (w1/w3/w2), a class target, an embedding and a module kind
 * check; then projection names nothing recognises. */
START_TEST(test_mixtral_names_and_kinds) {
    const char *cfg =
        "{\"quantization_config\":{\"quant_method\":\"compressed-tensors\",\"format\":"
        "\"pack-quantized\",\"version\":\"0.18.0\",\"config_groups\":{\"group_0\":{\"targets\":"
        "[\"Linear\"],\"weights\":{\"num_bits\":4,\"type\":\"int\",\"symmetric\":true,"
        "\"strategy\":\"group\",\"group_size\":32}}},\"ignore\":[\"lm_head\","
        "\"re:.*block_sparse_moe\\\\.gate$\"]}}";
    model m;
    model_init(&m);
    char name[256];
    put_bf16_2d(&m, "model.embed_tokens.weight", V, H);
    put_bf16_2d(&m, "lm_head.weight", V, H);
    put_bf16_2d(&m, "model.layers.0.block_sparse_moe.gate.weight", 3, H);
    static const char *const w[3] = {"w1", "w3", "w2"};
    for (int x = 0; x < 3; x++) {
        for (int p = 0; p < 3; p++) {
            snprintf(name, sizeof name, "model.layers.0.block_sparse_moe.experts.%d.%s", x, w[p]);
            add_pack(&m, name, p == 2 ? H : I, p == 2 ? I : H, 4, 32);
        }
    }
    add_pack(&m, "model.layers.0.self_attn.o_proj", H, H, 4, 32);
    result r = run(&m, cfg);
    assert_counts(&r, 0, 0, 0);
    assert_row(r.text, "model.layers.0.block_sparse_moe.experts",
               "(3 experts) moe quantized group_0 pack-quantized wna16");
    assert_row(r.text, "model.embed_tokens", "other unmatched");
    assert_row(r.text, "model.layers.0.self_attn.o_proj", "linear quantized group_0");
    result_free(&r);

    /* the embedding stored quantized: an OTHER module with a payload counts as
     * quantized only when a target matches it ("Linear" does not) */
    add_pack(&m, "model.embed_tokens", V, H, 4, 32);
    drop(&m, "model.embed_tokens.weight");
    r = run(&m, cfg);
    assert_counts(&r, 3, 0, 0);
    assert_listed(&r, "unconsumed tensors", "model.embed_tokens.weight_packed",
                  "no config target matches the module (not quantized): nothing reads weight_packed");
    result_free(&r);
    drop_prefix(&m, "model.embed_tokens.");
    put_bf16_2d(&m, "model.embed_tokens.weight", V, H);

    /* expert projections named in a way nothing recognises */
    for (int x = 0; x < 3; x++) {
        snprintf(name, sizeof name, "model.layers.0.block_sparse_moe.experts.%d.w3.", x);
        drop_prefix(&m, name);
    }
    r = run(&m, cfg);
    ck_assert_uint_eq(r.sum.errors, 1);
    ck_assert_uint_eq(r.sum.unconsumed + r.sum.missing, 0);
    ck_assert_ptr_nonnull(strstr(r.text, "model.layers.0.block_sparse_moe.experts: UNSUPPORTED: MoE "
                                         "layer \"model.layers.0.block_sparse_moe.experts\": expert "
                                         "projections w1, w2; expected gate_proj, up_proj and "
                                         "down_proj (or w1, w3 and w2)"));
    result_free(&r);
    model_free(&m);
}
END_TEST

/* Experts that do not share one scheme: the layer row is in error and every
 * projection is still accounted with its own resolution. */
START_TEST(test_experts_disagree) {
    model m;
    build_clean(&m);
    const char *cfg = config("", "", k_dynamic_token, "");
    /* expert 3 of layer 1 is ignored ... and stored unquantized */
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", cfg);
    insert_after(buf, sizeof buf, "\"ignore\":[", "\"re:model\\\\.layers\\\\.1\\\\..*experts\\\\.3\\\\..*\",");
    for (int p = 0; p < 3; p++) {
        char name[128];
        snprintf(name, sizeof name, "model.layers.1.mlp.experts.3.%s.", k_proj3[p]);
        drop_prefix(&m, name);
        snprintf(name, sizeof name, "model.layers.1.mlp.experts.3.%s.weight", k_proj3[p]);
        put_bf16_2d(&m, name, p == 2 ? H : I, p == 2 ? I : H);
    }
    result r = run(&m, buf);
    assert_counts(&r, 0, 0, 1);
    ck_assert_ptr_nonnull(strstr(r.text, "model.layers.1.mlp.experts: AMBIGUOUS: MoE layer "
                                         "\"model.layers.1.mlp.experts\": its 4 experts' projections "
                                         "do not share one quantization scheme"));
    assert_row(r.text, "model.layers.1.mlp.experts", "(4 experts) moe error - - - - -");
    result_free(&r);
    model_free(&m);
}
END_TEST

START_TEST(test_json_shape) {
    model m;
    build_clean(&m);
    d_scale_on_ignored(&m);
    d_no_expert_scale(&m);
    d_scale_shape(&m);
    model_write(&m, clean_config());
    moeq_inspect_options o = {NULL, NULL, 1, 0, NULL};
    result r = run_opts(&m, &o);
    assert_counts(&r, 1, 1, 1);
    const char *t = r.text;
    static const char head[] = "{\"modules\":[\n{\"layer\":\"lm_head\",\"kind\":\"linear\","
                               "\"status\":\"ignored\",\"group\":null,\"target\":\"lm_head\"";
    ck_assert_report(strncmp(t, head, sizeof head - 1) == 0, t, "JSON head");
    ck_assert_report(strstr(t, "{\"layer\":\"model.layers.0.mlp.experts\",\"kind\":\"moe\","
                                    "\"status\":\"quantized\",\"group\":\"group_0\",\"target\":") != NULL, t, "JSON");
    ck_assert_report(strstr(t, "\"scheme\":\"wna16\",\"weights\":{\"actorder\":null,"
                                    "\"block_structure\":null,\"dynamic\":false,\"group_size\":32,"
                                    "\"num_bits\":4,") != NULL, t, "JSON");
    ck_assert_report(strstr(t, "\"warnings\":[],\"error\":null,\"experts\":4}") != NULL, t, "JSON");
    ck_assert_report(strstr(t, "{\"layer\":\"model.norm\",\"kind\":\"other\",\"status\":"
                                    "\"unmatched\",\"group\":null,\"target\":null,\"format\":null,"
                                    "\"scheme\":null,\"weights\":null,\"input_activations\":null,"
                                    "\"warnings\":[],\"error\":null}") != NULL, t, "JSON");
    ck_assert_report(strstr(t, "\n],\n\"unconsumed\":[\n{\"tensor\":\"model.layers.0.mlp.gate."
                                    "weight_scale\",\"module\":\"model.layers.0.mlp.gate\","
                                    "\"reason\":\"module is ignored by ignore[1] \\\"re:.*mlp\\\\.gate$"
                                    "\\\": nothing reads weight_scale\"}\n],\n\"missing\":[\n"
                                    "{\"tensor\":\"model.layers.0.mlp.experts.2.down_proj."
                                    "weight_scale\",\"module\":\"model.layers.0.mlp.experts.2."
                                    "down_proj\",\"reason\":\"pack-quantized int4 group(32) sym "
                                    "static weights need weight_packed, weight_shape and "
                                    "weight_scale\"}\n],\n\"errors\":[\n{\"module\":\"model.layers.1."
                                    "mlp.experts.0.up_proj\",\"status\":\"SHAPE\",\"message\":"
                                    "\"model.layers.1.mlp.experts.0.up_proj.weight_scale: shape "
                                    "[32, 3], expected [32, 2]") != NULL, t, "JSON");
    ck_assert_report(strstr(t, "\n],\n\"summary\":{\"tensors\":103,\"modules\":47,"
                                    "\"moe_layers\":2,\"expert_modules\":24,\"quantized\":30,"
                                    "\"ignored\":4,\"unmatched\":13,\"unconsumed\":1,\"missing\":1,"
                                    "\"errors\":1,\"warnings\":0}}\n") != NULL, t, "JSON");
    result_free(&r);

    /* the JSON and the summary agree with the streaming writer's pieces */
    moeq_error err;
    moeq_config *cfg = NULL;
    moeq_checkpoint *ck = NULL;
    ck_assert_ok(moeq_config_load(m.dir, NULL, &cfg, &err), &err);
    ck_assert_ok(moeq_checkpoint_open(m.dir, &ck, &err), &err);
    moeq_inspect_summary s;
    ck_assert_status(moeq_inspect(NULL, ck, &o, &r.text, &s, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "config is NULL"));
    ck_assert_status(moeq_inspect(cfg, NULL, &o, &r.text, &s, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_status(moeq_inspect(cfg, ck, &o, NULL, &s, &err), MOEQ_STATUS_INVALID_ARG, &err);
    moeq_resolve_options ro = {7, 0, NULL, 0};
    moeq_inspect_options bad = {&ro, NULL, 0, 0, NULL};
    ck_assert_status(moeq_inspect(cfg, ck, &bad, &r.text, &s, &err), MOEQ_STATUS_INVALID_ARG, &err);
    moeq_checkpoint_close(ck);
    moeq_config_destroy(cfg);
    model_free(&m);
}
END_TEST

static int32_t stop_writer(const char *data, size_t len, void *user) {
    (void)data;
    (void)len;
    return ++*(int *)user > 1 ? 5 : 0;
}

START_TEST(test_writer_stops_and_nomem) {
    model m;
    build_clean(&m);
    d_no_expert_scale(&m);
    model_write(&m, clean_config());
    moeq_error err;
    moeq_config *cfg = NULL;
    moeq_checkpoint *ck = NULL;
    ck_assert_ok(moeq_config_load(m.dir, NULL, &cfg, &err), &err);
    ck_assert_ok(moeq_checkpoint_open(m.dir, &ck, &err), &err);
    int calls = 0;
    moeq_inspect_summary s;
    ck_assert_status(moeq_inspect_write(cfg, ck, NULL, stop_writer, &calls, &s, &err),
                     MOEQ_STATUS_IO, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "stopped with code 5"));
    /* every allocation failing in turn: NOMEM, never a crash or a leak */
    char *text = NULL;
    for (long k = 0;; k++) {
        moeq__test_fail_alloc_after(k);
        moeq_status st = moeq_inspect(cfg, ck, NULL, &text, &s, &err);
        moeq__test_fail_alloc_after(-1);
        if (st == MOEQ_OK) {
            ck_assert_uint_eq(s.missing, 1);
            moeq_free(text);
            break;
        }
        ck_assert_status(st, MOEQ_STATUS_NOMEM, &err);
        ck_assert_ptr_null(text);
        ck_assert_uint_lt(k, 100000);
    }
    moeq_checkpoint_close(ck);
    moeq_config_destroy(cfg);
    model_free(&m);
}
END_TEST

/* ---- the tool --------------------------------------------------------------------- */

#ifdef MOEQ_TOOL_PATH
static int tool(const char *args) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s inspect %s >/dev/null 2>&1", MOEQ_TOOL_PATH, args);
    int rc = system(cmd);
    ck_assert_msg(rc != -1 && WIFEXITED(rc), "could not run %s", cmd);
    return WEXITSTATUS(rc);
}

/* inspect and run agree: a tensor the selected scheme's layer cannot load is
 * a layer error in inspect, with the message moeq run stops on. */
START_TEST(test_agrees_with_run) {
    model m;
    build_clean(&m);
    d_unknown_param(&m);
    const char *cfg_text = config("\"num_experts_per_tok\":2,", "", k_dynamic_token, "");
    model_write(&m, cfg_text);
    result r = run(&m, cfg_text);
    const char *needle = "has no parameter for \"smooth_factor\" of gate_proj";
    ck_assert_report(strstr(section(&r, "module errors"), needle) != NULL, r.text, "inspect");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s run %s --layer model.layers.1.mlp.experts 2>&1", MOEQ_TOOL_PATH,
             m.dir);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char out[8192];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int rc = pclose(p);
    ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "moeq run: %s", out);
    ck_assert_msg(strstr(out, needle) != NULL, "moeq run: %s", out);
    result_free(&r);
    model_free(&m);
}
END_TEST

START_TEST(test_cli_exit_codes) {
    model m;
    build_clean(&m);
    model_write(&m, clean_config());
    char args[256];
    ck_assert_int_eq(tool(m.dir), 0);
    snprintf(args, sizeof args, "%s --json --engine-order --platform npu --prefer-mxint4", m.dir);
    ck_assert_int_eq(tool(args), 0);
    d_no_weight_shape(&m);
    model_write(&m, clean_config());
    ck_assert_int_eq(tool(m.dir), 1);
    snprintf(args, sizeof args, "%s --names-only", m.dir);
    ck_assert_int_eq(tool(args), 1);
    ck_assert_int_eq(tool("/nonexistent/moeq/model"), 2);
    ck_assert_int_eq(tool(""), 2);
    snprintf(args, sizeof args, "%s --platform gpu", m.dir);
    ck_assert_int_eq(tool(args), 2);
    /* a directory with a config and no safetensors */
    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors", m.dir);
    unlink(path);
    ck_assert_int_eq(tool(m.dir), 2);
    model_free(&m);
}
END_TEST
#endif

Suite *inspect_suite(void);
Suite *inspect_suite(void) {
    Suite *s = suite_create("inspect");
    TCase *tc = tcase_create("inspect");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_clean_model);
    tcase_add_test(tc, test_moe_sparsity);
    tcase_add_loop_test(tc, test_defect, 0, (int)(sizeof k_defects / sizeof k_defects[0]));
    tcase_add_loop_test(tc, test_module_error, 0, (int)(sizeof k_errors / sizeof k_errors[0]));
    tcase_add_test(tc, test_kv_legacy_and_q_scale);
    tcase_add_test(tc, test_unreadable_format);
    tcase_add_test(tc, test_nvfp4);
    tcase_add_test(tc, test_mixtral_names_and_kinds);
    tcase_add_test(tc, test_experts_disagree);
    tcase_add_test(tc, test_json_shape);
    tcase_add_test(tc, test_writer_stops_and_nomem);
#ifdef MOEQ_TOOL_PATH
    tcase_add_test(tc, test_cli_exit_codes);
    tcase_add_test(tc, test_agrees_with_run);
#endif
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(inspect_suite)

/*
 * check_synth.c - synthetic checkpoints (moeq_synth_write, _original, _preset).
 *
 * Every preset is written to a fresh directory under /tmp and read back the
 * way an engine would: moeq_config_load (no warnings but CT's own actorder
 * deprecation), moeq_checkpoint_open, every module resolved, every quantized
 * module dequantized within the format's error of the weight it came from
 * (moeq_synth_original), every unquantized one bit-identical to it, the static
 * input tensors and fused-shard sharing where the args call for them, and the
 * MoE scheme each preset is meant to select.  Plus: byte-identical rewrites,
 * sharded output through its index (same tensors as one file), stale files of
 * the other layout removed, a custom mixed layout, and tables of bad layouts
 * and bad directories.
 */
#include "test_util.h"

#include "synth_custom.h"
#include "common/internal.h"
#include "checkpoint/dequant.h"
#include "kernels.h"
#include "tolerance.h"

#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

/* The MoE scheme moeq_select picks for each preset's routed experts
 * (NULL: no scheme runs them, the preset is a reader test). */
static const struct {
    const char *preset;
    const char *scheme;
} k_expect[] = {
    {"glm-mini", "wna16"},
    {"wna16-int4-g128", "wna16"},
    {"wna16-int8-channel", "wna16"},
    {"w4a16-asym-actorder", "wna16"},
    {"w8a8-fp8-channel-token", "w8a8_fp8"},
    {"w8a8-fp8-block", "w8a8_fp8"},
    {"w8a8-fp8-static", "w8a8_fp8"},
    {"w8a8-int8", "w8a8_int8"},
    {"w8a8-int8-static", "w8a8_int8"},
    {"w4a8-int8", "w4a8_int8"},
    {"w4a8-fp8", "w4a8_fp8"},
    {"nvfp4-w4a16", "w4a16_nvfp4"},
    {"nvfp4-w4a4", "w4a4_nvfp4"},
    {"mxfp4", "w4a16_mxfp4"},
    {"mxfp8", "w8a16_mxfp8"},
    {"mxfp8-a8", "w8a8_mxfp8"},
    {"mxfp6", "w6a16_mxfp6"},
    {"mxfp6-a8", "w6a8_mxfp6"},
    {"mxfp4-xfp8", "w4a8_mxfp4"},
    {"mxint4-g32", "wna16"},
    {"mixed-nvfp4-fp8", "w4a16_nvfp4"},
    {"unquantized", "unquantized"},
};
#define N_EXPECT ((int)(sizeof k_expect / sizeof k_expect[0]))

/* ---- directories -------------------------------------------------------------------- */

static char *make_tmp(void) {
    char tmpl[64];
    moeq_test_mkdtemp(tmpl, sizeof tmpl, "moeq_synth");
    return strdup(tmpl);
}

static void rm_dir(char *dir) {
    moeq_test_rmtree(dir);
    free(dir);
}

static bool exists(const char *dir, const char *file) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    struct stat sb;
    return stat(path, &sb) == 0;
}

static char *slurp(const char *dir, const char *file, size_t *len) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    *len = fread(buf, 1, (size_t)n, f);
    buf[*len] = '\0';
    fclose(f);
    return buf;
}

static moeq_synth_layout preset(const char *name) {
    moeq_synth_layout L;
    moeq_error err;
    ck_assert_ok(moeq_synth_preset(name, &L, &err), &err);
    return L;
}

/* ---- reading a checkpoint back -------------------------------------------------------- */

static const char *const k_params[] = {
    "weight",           "weight_packed",      "weight_scale",           "weight_zero_point",
    "weight_g_idx",     "weight_shape",       "weight_global_scale",    "input_scale",
    "input_zero_point", "input_global_scale", "e_score_correction_bias"};
#define N_PARAMS 11

typedef struct module_tensors {
    moeq_tensor t[N_PARAMS];
    bool has[N_PARAMS];
    moeq_tensor list[N_PARAMS];
    uint32_t n;
} module_tensors;

static int param_index(const char *p) {
    for (int i = 0; i < N_PARAMS; i++) {
        if (!strcmp(k_params[i], p)) return i;
    }
    return -1;
}

static void gather(const moeq_checkpoint *ck, const char *module, module_tensors *m) {
    memset(m, 0, sizeof *m);
    for (int i = 0; i < N_PARAMS; i++) {
        char name[256];
        snprintf(name, sizeof name, "%s.%s", module, k_params[i]);
        if (moeq_checkpoint_find(ck, name, &m->t[i]) == MOEQ_STATUS_OK) {
            m->has[i] = true;
            m->list[m->n++] = m->t[i];
        }
    }
}

static bool has(const module_tensors *m, const char *p) {
    return m->has[param_index(p)];
}

static const moeq_tensor *get(const module_tensors *m, const char *p) {
    const int i = param_index(p);
    ck_assert_msg(m->has[i], "missing %s", p);
    return &m->t[i];
}

static float *original(const moeq_synth_layout *L, const char *tensor, int64_t shape[2]) {
    moeq_error err;
    ck_assert_ok(moeq_synth_original(L, tensor, NULL, 0, shape, &err), &err);
    const size_t n = (size_t)(shape[0] * shape[1]);
    float *v = malloc(n * sizeof *v + 4);
    ck_assert_ok(moeq_synth_original(L, tensor, v, n, shape, &err), &err);
    return v;
}

/* A tensor holding exactly the original values, in `dtype`. */
static void assert_plain(const moeq_synth_layout *L, const moeq_tensor *t, int32_t dtype) {
    int64_t shape[2];
    float *want = original(L, t->name, shape);
    const size_t n = (size_t)(shape[0] * shape[1]);
    ck_assert_msg(t->dtype == dtype, "%s: dtype %s, want %s", t->name, moeq_dtype_name(t->dtype),
                  moeq_dtype_name(dtype));
    ck_assert_int_eq(t->shape[0], shape[0]);
    ck_assert_uint_eq(t->nbytes, n * moeq_dtype_size(dtype));
    float *got = malloc(n * sizeof *got + 4);
    moeq__to_f32_ref(t->dtype, t->data, n, got);
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&got[i], &want[i], 4) != 0) {
            ck_abort_msg("%s[%zu] = %.9g, original %.9g", t->name, i, (double)got[i],
                         (double)want[i]);
        }
    }
    free(got);
    free(want);
}

typedef struct stats {
    uint32_t modules, quantized, dense, inputs, g_idx, shared_checks;
} stats;

/* Dequantizes a module and compares it with its original weight. */
static void assert_quantized(const moeq_synth_layout *L, const moeq_config *cfg, const char *module,
                             const moeq_resolution *res, const module_tensors *m) {
    char name[320];
    snprintf(name, sizeof name, "%s.weight", module);
    int64_t shape[2], got_shape[2];
    float *want = original(L, name, shape);
    const size_t n = (size_t)(shape[0] * shape[1]);
    float *got = malloc(n * sizeof *got);
    moeq_error err;
    const uint32_t flags = moeq_config_dequant_flags(cfg);
    ck_assert_ok(moeq_dequantize(res->weights, res->format, flags, module, m->list, m->n,
                                 MOEQ_DTYPE_F32, got, n * sizeof *got, got_shape, &err),
                 &err);
    ck_assert_int_eq(got_shape[0], shape[0]);
    ck_assert_int_eq(got_shape[1], shape[1]);
    moeq__ct_weight cw;
    ck_assert_ok(
        moeq__ct_weight_build(res->weights, res->format, flags, module, m->list, m->n, &cw, &err),
        &err);
    const moeq__qweight *q = &cw.qw;
    const size_t cols = (size_t)shape[1];
    for (size_t r = 0; r < (size_t)shape[0]; r++) {
        for (size_t c = 0; c < cols; c++) {
            const size_t gc = q->g_idx ? (size_t)q->g_idx[c] : c / q->grid.col_block;
            const size_t cell = (r / q->grid.row_block) * q->grid.cols + gc;
            const double s = q->scale[cell];
            const double x = want[r * cols + c];
            const double v = x / s + (q->zero_point ? q->zero_point[cell] : 0.0);
            const double tol =
                moeq_test_tolerance(res->weights, L->dtype ? L->dtype : MOEQ_DTYPE_BF16, v, s);
            if (!(fabs(got[r * cols + c] - x) <=
                  tol)) { /* no ck_assert per element: each one writes */
                ck_abort_msg(
                    "%s[%zu, %zu]: original %.9g, dequantized %.9g (scale %.6g, tolerance %.3g)",
                    module, r, c, x, (double)got[r * cols + c], s, tol);
            }
        }
    }
    moeq__ct_weight_free(&cw);
    free(got);
    free(want);
}

/* Tensors `p` of two modules must be byte-identical (fused shards). */
static void assert_same(const module_tensors *a, const module_tensors *b, const char *p) {
    ck_assert_int_eq(has(a, p), has(b, p));
    if (!has(a, p)) return;
    const moeq_tensor *x = get(a, p), *y = get(b, p);
    ck_assert_uint_eq(x->nbytes, y->nbytes);
    ck_assert_msg(memcmp(x->data, y->data, x->nbytes) == 0, "%s and %s differ", x->name, y->name);
}

static int32_t kind_of(const char *module) {
    if (strstr(module, ".mlp.experts.")) return MOEQ_MODULE_EXPERT;
    if (strstr(module, "norm") || strstr(module, "embed_tokens")) return MOEQ_MODULE_OTHER;
    return MOEQ_MODULE_LINEAR;
}

static void check_module(const moeq_synth_layout *L, const moeq_config *cfg,
                         const moeq_checkpoint *ck, const char *module, stats *st) {
    module_tensors m;
    gather(ck, module, &m);
    st->modules++;
    const int32_t kind = kind_of(module);
    const int32_t dtype = L->dtype ? L->dtype : MOEQ_DTYPE_BF16;
    if (has(&m, "e_score_correction_bias")) {
        assert_plain(L, get(&m, "e_score_correction_bias"), MOEQ_DTYPE_F32);
    }
    if (kind == MOEQ_MODULE_OTHER) {
        ck_assert_uint_eq(m.n, 1);
        assert_plain(L, get(&m, "weight"), dtype);
        return;
    }
    moeq_resolution res;
    moeq_error err;
    ck_assert_ok(moeq_resolve(cfg, module, kind, NULL, &res, &err), &err);
    const bool quantized =
        res.status == MOEQ_MATCH_QUANTIZED && res.weights && res.format != MOEQ_FORMAT_DENSE;
    if (quantized) {
        st->quantized++;
        assert_quantized(L, cfg, module, &res, &m);
        ck_assert_int_eq(has(&m, "weight_g_idx"), moeq_actorder_is_group(res.weights->actorder));
        st->g_idx += has(&m, "weight_g_idx");
    } else {
        st->dense++;
        assert_plain(L, get(&m, "weight"), dtype);
        for (int i = 1; i < 7; i++)
            ck_assert_msg(!m.has[i], "%s: dense but has %s", module, k_params[i]);
    }
    /* static inputs: input_scale (+ zero point) or NVFP4's input_global_scale */
    const moeq_quant_args *in = res.status == MOEQ_MATCH_QUANTIZED ? res.input_activations : NULL;
    const bool want_scale = in && in->dynamic == MOEQ_DYNAMIC_FALSE;
    const bool want_global = in && in->dynamic == MOEQ_DYNAMIC_LOCAL;
    ck_assert_msg(has(&m, "input_scale") == want_scale, "%s: input_scale", module);
    ck_assert_msg(has(&m, "input_zero_point") == (want_scale && !in->symmetric),
                  "%s: input_zero_point", module);
    ck_assert_msg(has(&m, "input_global_scale") == want_global, "%s: input_global_scale", module);
    if (want_scale) {
        const moeq_tensor *t = get(&m, "input_scale");
        ck_assert_int_eq(t->dtype, dtype);
        ck_assert_int_eq(t->ndim, 1);
        float v;
        moeq__to_f32_ref(t->dtype, t->data, 1, &v);
        ck_assert(isfinite(v) && v > 0.0f);
        st->inputs++;
    }
    if (want_global) {
        const moeq_tensor *t = get(&m, "input_global_scale");
        ck_assert_int_eq(t->dtype, MOEQ_DTYPE_F32);
        st->inputs++;
    }
    /* fused shards: up shares gate's inputs, actorder order and NVFP4 global
     * scale; k and v share q's */
    const size_t len = strlen(module);
    const char *sib = NULL;
    if (len > 9 && !strcmp(module + len - 9, "gate_proj")) sib = "up_proj";
    if (len > 6 && !strcmp(module + len - 6, "q_proj")) sib = "k_proj";
    if (sib) {
        char other[256];
        snprintf(other, sizeof other, "%.*s%s", (int)(len - (sib[0] == 'u' ? 9 : 6)), module, sib);
        moeq_resolution ores;
        ck_assert_ok(moeq_resolve(cfg, other, kind, NULL, &ores, &err), &err);
        if (ores.group_index == res.group_index && ores.status == res.status) {
            module_tensors o;
            gather(ck, other, &o);
            assert_same(&m, &o, "input_scale");
            assert_same(&m, &o, "input_global_scale");
            assert_same(&m, &o, "weight_g_idx");
            assert_same(&m, &o, "weight_global_scale");
            st->shared_checks++;
        }
    }
}

/* Everything a reader checks; `scheme` "*" skips the MoE selection check. */
static stats check_checkpoint(const moeq_synth_layout *L, const char *dir, const char *scheme) {
    stats st;
    memset(&st, 0, sizeof st);
    moeq_error err;
    moeq_config *cfg = NULL;
    ck_assert_ok(moeq_config_load(dir, NULL, &cfg, &err), &err);
    for (uint32_t i = 0; i < moeq_config_warning_count(cfg); i++) {
        /* compressed-tensors itself logs this one for actorder "group" */
        ck_assert_msg(strstr(moeq_config_warning(cfg, i), "actorder='group'") != NULL,
                      "config.json warning: %s", moeq_config_warning(cfg, i));
    }
    ck_assert_str_eq(moeq_config_version(cfg), "0.18.0");
    ck_assert_str_eq(moeq_config_quantization_status(cfg), "compressed");
    ck_assert_str_eq(moeq_config_source_key(cfg), "quantization_config");
    double v;
    ck_assert_ok(moeq_config_model_number(cfg, "num_experts", &v), NULL);
    ck_assert_int_eq((int)v, L->num_experts);
    ck_assert_ok(moeq_config_model_number(cfg, "n_routed_experts", &v), NULL);
    ck_assert_int_eq((int)v, L->num_experts);
    ck_assert_ok(moeq_config_model_number(cfg, "num_experts_per_tok", &v), NULL);
    ck_assert_int_eq((int)v, L->top_k);
    ck_assert_ok(moeq_config_model_number(cfg, "hidden_size", &v), NULL);
    ck_assert_int_eq((int)v, L->hidden_size);
    ck_assert_ok(moeq_config_model_number(cfg, "moe_intermediate_size", &v), NULL);
    ck_assert_int_eq((int)v, L->moe_intermediate_size);
    ck_assert_ok(moeq_config_model_number(cfg, "num_hidden_layers", &v), NULL);
    ck_assert_int_eq((int)v, L->num_layers);
    ck_assert_ok(moeq_config_model_number(cfg, "norm_topk_prob", &v), NULL);
    ck_assert_int_eq((int)v, L->norm_topk_prob);
    ck_assert_ok(moeq_config_model_number(cfg, "routed_scaling_factor", &v), NULL);
    ck_assert_float_eq((float)v, L->routed_scaling_factor ? L->routed_scaling_factor : 1.0f);
    ck_assert_str_eq(moeq_config_model_string(cfg, "scoring_func"),
                     L->scoring == MOEQ_SCORING_SIGMOID ? "sigmoid" : "softmax");
    ck_assert_str_eq(moeq_config_model_string(cfg, "torch_dtype"),
                     L->dtype == MOEQ_DTYPE_F16   ? "float16"
                     : L->dtype == MOEQ_DTYPE_F32 ? "float32"
                                                  : "bfloat16");

    moeq_checkpoint *ck = NULL;
    ck_assert_ok(moeq_checkpoint_open(dir, &ck, &err), &err);
    /* every module once: the tensors holding its weight */
    for (uint64_t i = 0; i < moeq_checkpoint_tensor_count(ck); i++) {
        moeq_tensor t;
        ck_assert_ok(moeq_checkpoint_tensor(ck, i, &t), NULL);
        const char *dot = strrchr(t.name, '.');
        ck_assert_ptr_nonnull(dot);
        ck_assert_msg(param_index(dot + 1) >= 0, "unexpected tensor %s", t.name);
        if (strcmp(dot + 1, "weight") != 0 && strcmp(dot + 1, "weight_packed") != 0) continue;
        char module[256];
        snprintf(module, sizeof module, "%.*s", (int)(dot - t.name), t.name);
        check_module(L, cfg, ck, module, &st);
    }
    /* the routed experts of every MoE layer resolve together and select the scheme */
    for (int32_t l = L->first_dense_layers; l < L->num_layers; l++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "model.layers.%d.mlp.experts", (int)l);
        moeq_resolution res;
        ck_assert_ok(
            moeq_resolve_moe(cfg, prefix, (uint32_t)L->num_experts, NULL, NULL, &res, &err), &err);
        if (scheme && !strcmp(scheme, "*")) continue;
        moeq_selection sel;
        const moeq_status s = moeq_select(&res, prefix, NULL, &sel, &err);
        if (scheme) {
            ck_assert_ok(s, &err);
            ck_assert_str_eq(moeq_scheme_name(sel.scheme), scheme);
        } else {
            ck_assert_status(s, MOEQ_STATUS_UNSUPPORTED, &err);
        }
    }
    moeq_checkpoint_close(ck);
    moeq_config_destroy(cfg);
    return st;
}

/* ---- every preset ------------------------------------------------------------------------- */

START_TEST(test_preset_round_trip) {
    const char *name = k_expect[_i].preset;
    moeq_synth_layout L = preset(name);
    char *dir = make_tmp();
    moeq_error err;
    ck_assert_ok(moeq_synth_write(&L, dir, &err), &err);
    ck_assert(exists(dir, "config.json"));
    ck_assert(exists(dir, "model.safetensors"));
    ck_assert(!exists(dir, "model.safetensors.index.json"));
    const stats st = check_checkpoint(&L, dir, k_expect[_i].scheme);
    ck_assert_uint_gt(st.quantized, 0);
    ck_assert_uint_gt(st.dense, 0); /* lm_head is always ignored in the presets */
    if (!strcmp(name, "w4a16-asym-actorder")) ck_assert_uint_gt(st.g_idx, 0);
    if (!strcmp(name, "w8a8-fp8-static") || !strcmp(name, "w8a8-int8-static") ||
        !strcmp(name, "nvfp4-w4a4")) {
        ck_assert_uint_gt(st.inputs, 0);
    }
    ck_assert_uint_gt(st.shared_checks, 0);
    /* the config text is CT's: indent 2, sorted keys, no trailing newline */
    size_t len;
    char *text = slurp(dir, "config.json", &len);
    ck_assert(strncmp(text, "{\n  \"first_k_dense_replace\": ", 29) == 0);
    ck_assert(text[len - 1] == '}');
    ck_assert_ptr_nonnull(strstr(text, "\n    \"version\": \"0.18.0\"\n  },\n"));
    free(text);
    rm_dir(dir);
}
END_TEST

START_TEST(test_presets_listed) {
    uint32_t n = 0;
    while (moeq_synth_preset_name(n)) {
        ck_assert_ptr_nonnull(moeq_synth_preset_summary(n));
        bool expected = false;
        for (int i = 0; i < N_EXPECT; i++)
            expected |= !strcmp(k_expect[i].preset, moeq_synth_preset_name(n));
        ck_assert_msg(expected, "preset %s has no expectation here", moeq_synth_preset_name(n));
        n++;
    }
    ck_assert_int_eq((int)n, N_EXPECT);
    ck_assert_ptr_null(moeq_synth_preset_summary(n));
    moeq_synth_layout L;
    moeq_error err;
    ck_assert_status(moeq_synth_preset("glm-maxi", &L, &err), MOEQ_STATUS_NO_MATCH, &err);
    ck_assert_ptr_nonnull(
        strstr(err.message, "no preset 'glm-maxi' (known: glm-mini, wna16-int4-g128"));
    ck_assert_status(moeq_synth_preset(NULL, &L, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_status(moeq_synth_preset("glm-mini", NULL, &err), MOEQ_STATUS_INVALID_ARG, &err);
}
END_TEST

/* ---- determinism, shards, stale files -------------------------------------------------- */

static void assert_same_file(const char *a, const char *b, const char *file) {
    size_t la, lb;
    char *x = slurp(a, file, &la), *y = slurp(b, file, &lb);
    ck_assert_uint_eq(la, lb);
    ck_assert_msg(memcmp(x, y, la) == 0, "%s differs between two writes", file);
    free(x);
    free(y);
}

START_TEST(test_deterministic) {
    moeq_synth_layout L = preset("w4a16-asym-actorder");
    char *a = make_tmp(), *b = make_tmp();
    moeq_error err;
    ck_assert_ok(moeq_synth_write(&L, a, &err), &err);
    ck_assert_ok(moeq_synth_write(&L, b, &err), &err);
    assert_same_file(a, b, "config.json");
    assert_same_file(a, b, "model.safetensors");
    /* writing again over the same directory changes nothing either */
    ck_assert_ok(moeq_synth_write(&L, b, &err), &err);
    assert_same_file(a, b, "model.safetensors");
    /* another seed, other weights; the config only differs in the seed */
    L.seed++;
    ck_assert_ok(moeq_synth_write(&L, b, &err), &err);
    size_t la, lb;
    char *x = slurp(a, "model.safetensors", &la), *y = slurp(b, "model.safetensors", &lb);
    ck_assert_uint_eq(la, lb);
    ck_assert(memcmp(x, y, la) != 0);
    free(x);
    free(y);
    rm_dir(a);
    rm_dir(b);
}
END_TEST

/* The first bytes of a tensor's values, for a stable fingerprint across runs. */
START_TEST(test_known_values) {
    moeq_synth_layout L = preset("glm-mini");
    int64_t shape[2];
    float v[512];
    moeq_error err;
    ck_assert_ok(moeq_synth_original(&L, "model.layers.1.mlp.experts.3.up_proj.weight", NULL, 0,
                                     shape, &err),
                 &err);
    ck_assert_int_eq(shape[0], 128);
    ck_assert_int_eq(shape[1], 256);
    ck_assert_ok(moeq_synth_original(&L, "model.norm.weight", v, 512, shape, &err), &err);
    ck_assert_int_eq(shape[0], 256);
    ck_assert_int_eq(shape[1], 1);
    double mean = 0.0;
    for (int i = 0; i < 256; i++) mean += v[i];
    ck_assert(fabs(mean / 256 - 1.0) < 0.02); /* norms sit around 1 */
    ck_assert_ok(moeq_synth_original(&L, "model.layers.2.mlp.gate.e_score_correction_bias", v, 8,
                                     shape, &err),
                 &err);
    ck_assert_int_eq(shape[0], 8);
    /* weights: N(0, 0.02)-like, bf16 values */
    float *w = malloc(128 * 256 * sizeof *w);
    ck_assert_ok(moeq_synth_original(&L, "model.layers.1.mlp.experts.3.up_proj.weight", w,
                                     128 * 256, shape, &err),
                 &err);
    double ss = 0.0;
    for (int i = 0; i < 128 * 256; i++) {
        if (w[i] != moeq__round_to_dtype(MOEQ_DTYPE_BF16, w[i]))
            ck_abort_msg("w[%d] is not a bf16 value", i);
        ss += (double)w[i] * w[i];
    }
    const double std = sqrt(ss / (128 * 256));
    ck_assert_msg(std > 0.018 && std < 0.026, "std %g", std);
    free(w);
    /* errors */
    ck_assert_status(
        moeq_synth_original(&L, "model.layers.9.mlp.gate.weight", NULL, 0, shape, &err),
        MOEQ_STATUS_NO_MATCH, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "no tensor 'model.layers.9.mlp.gate.weight'"));
    ck_assert_status(moeq_synth_original(&L, "model.norm.weight", v, 255, shape, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_str_eq(err.message,
                     "moeq_synth_original: model.norm.weight has 256 values; out_count is 255");
    ck_assert_status(moeq_synth_original(&L, NULL, v, 255, shape, &err), MOEQ_STATUS_INVALID_ARG,
                     &err);
    ck_assert_status(moeq_synth_original(NULL, "model.norm.weight", v, 255, shape, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
}
END_TEST

START_TEST(test_sharded) {
    moeq_synth_layout L = preset("glm-mini"); /* 4 layers */
    char *one = make_tmp(), *many = make_tmp();
    moeq_error err;
    ck_assert_ok(moeq_synth_write(&L, one, &err), &err);
    L.shards = 3;
    ck_assert_ok(moeq_synth_write(&L, many, &err), &err);
    ck_assert(!exists(many, "model.safetensors"));
    ck_assert(exists(many, "model-00001-of-00003.safetensors"));
    ck_assert(exists(many, "model-00003-of-00003.safetensors"));
    ck_assert(exists(many, "model.safetensors.index.json"));
    /* the same tensors, byte for byte, whichever shard holds them */
    moeq_checkpoint *a = NULL, *b = NULL;
    ck_assert_ok(moeq_checkpoint_open(one, &a, &err), &err);
    ck_assert_ok(moeq_checkpoint_open(many, &b, &err), &err);
    ck_assert_uint_eq(moeq_checkpoint_tensor_count(a), moeq_checkpoint_tensor_count(b));
    uint64_t total = 0;
    for (uint64_t i = 0; i < moeq_checkpoint_tensor_count(a); i++) {
        moeq_tensor x, y;
        ck_assert_ok(moeq_checkpoint_tensor(a, i, &x), NULL);
        ck_assert_ok(moeq_checkpoint_tensor(b, i, &y), NULL);
        ck_assert_str_eq(x.name, y.name);
        ck_assert_int_eq(x.dtype, y.dtype);
        ck_assert_uint_eq(x.nbytes, y.nbytes);
        ck_assert(memcmp(x.data, y.data, x.nbytes) == 0);
        total += x.nbytes;
    }
    moeq_tensor t;
    ck_assert_ok(moeq_checkpoint_find(b, "model.embed_tokens.weight", &t), NULL);
    ck_assert_ptr_nonnull(strstr(t.file, "model-00001-of-00003.safetensors"));
    ck_assert_ok(moeq_checkpoint_find(b, "lm_head.weight", &t), NULL);
    ck_assert_ptr_nonnull(strstr(t.file, "model-00003-of-00003.safetensors"));
    moeq_checkpoint_close(a);
    moeq_checkpoint_close(b);
    /* the index as transformers writes it */
    size_t len;
    char *index = slurp(many, "model.safetensors.index.json", &len);
    char head[128];
    snprintf(head, sizeof head,
             "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {\n",
             (unsigned long long)total);
    ck_assert_msg(strncmp(index, head, strlen(head)) == 0, "index starts with %.120s", index);
    ck_assert(index[len - 1] == '\n' && index[len - 2] == '}');
    free(index);
    assert_same_file(one, many, "config.json");
    check_checkpoint(&L, many, "wna16");
    /* rewriting with another layout removes the files of the old one */
    L.shards = 2;
    ck_assert_ok(moeq_synth_write(&L, many, &err), &err);
    ck_assert(!exists(many, "model-00001-of-00003.safetensors"));
    ck_assert(exists(many, "model-00002-of-00002.safetensors"));
    L.shards = 1;
    ck_assert_ok(moeq_synth_write(&L, many, &err), &err);
    ck_assert(!exists(many, "model-00001-of-00002.safetensors"));
    ck_assert(!exists(many, "model.safetensors.index.json"));
    assert_same_file(one, many, "model.safetensors");
    rm_dir(one);
    rm_dir(many);
}
END_TEST

START_TEST(test_custom_layout) {
    moeq_synth_layout L = custom_layout();
    char *dir = make_tmp();
    moeq_error err;
    ck_assert_ok(moeq_synth_write(&L, dir, &err), &err);
    const stats st = check_checkpoint(&L, dir, "*");
    ck_assert_uint_gt(st.g_idx, 0);
    ck_assert_uint_gt(st.inputs, 0);
    moeq_checkpoint *ck = NULL;
    ck_assert_ok(moeq_checkpoint_open(dir, &ck, &err), &err);
    moeq_tensor t;
    /* the router of layer 0 is quantized by its exact name; layer 1's is unmatched */
    ck_assert_ok(moeq_checkpoint_find(ck, "model.layers.0.mlp.gate.weight", &t), NULL);
    ck_assert_int_eq(t.dtype, MOEQ_DTYPE_F8_E4M3);
    ck_assert_ok(moeq_checkpoint_find(ck, "model.layers.1.mlp.gate.weight", &t), NULL);
    ck_assert_int_eq(t.dtype, MOEQ_DTYPE_F16);
    ck_assert_ok(
        moeq_checkpoint_find(ck, "model.layers.1.mlp.experts.2.down_proj.input_zero_point", &t),
        NULL);
    ck_assert_int_eq(t.dtype, MOEQ_DTYPE_I8);
    ck_assert_ok(moeq_checkpoint_find(ck, "model.layers.1.mlp.experts.2.down_proj.weight", &t),
                 NULL);
    ck_assert_int_eq(t.dtype, MOEQ_DTYPE_I8); /* naive-quantized int4 */
    /* q, k and v share one global scale */
    moeq_tensor q, k, v;
    ck_assert_ok(
        moeq_checkpoint_find(ck, "model.layers.1.self_attn.q_proj.weight_global_scale", &q), NULL);
    ck_assert_ok(
        moeq_checkpoint_find(ck, "model.layers.1.self_attn.k_proj.weight_global_scale", &k), NULL);
    ck_assert_ok(
        moeq_checkpoint_find(ck, "model.layers.1.self_attn.v_proj.weight_global_scale", &v), NULL);
    ck_assert(memcmp(q.data, k.data, 4) == 0 && memcmp(q.data, v.data, 4) == 0);
    moeq_checkpoint_close(ck);
    size_t len;
    char *text = slurp(dir, "config.json", &len);
    ck_assert_ptr_nonnull(strstr(text, "\"format\": \"mixed-precision\""));
    ck_assert_ptr_nonnull(strstr(text, "\"format\": \"naive-quantized\""));
    ck_assert_ptr_nonnull(strstr(text, "\"format\": \"float-quantized\""));
    ck_assert_ptr_nonnull(strstr(text, "\"format\": \"nvfp4-pack-quantized\""));
    ck_assert_ptr_nonnull(strstr(text, "\"observer\": \"memoryless_minmax\"")); /* derived */
    ck_assert_ptr_nonnull(strstr(text, "\"zp_dtype\": \"torch.int8\""));
    ck_assert_ptr_nonnull(strstr(text, "\"dynamic\": \"local\""));
    ck_assert_ptr_nonnull(strstr(text, "\"torch_dtype\": \"float16\""));
    free(text);
    rm_dir(dir);
}
END_TEST

/* ---- bad layouts and directories ----------------------------------------------------------- */

static const char *const b_none[] = {"re:.*nothing_here.*"};
static const char *const b_embed[] = {"re:.*embed_tokens.*", "Linear"};
static const char *const b_null_target[] = {NULL};
static const char *const b_regex[] = {"re:model\\.layers\\.(["};
static const char *const b_linear[] = {"Linear"};
static const char *const b_ignore[] = {"lm_head", "re:.*mlp\\.gate$"};
static const char *const b_ignore_null[] = {"lm_head", NULL};
static const moeq_quant_args b_w4 = {.num_bits = 4,
                                     .type = MOEQ_QTYPE_INT,
                                     .symmetric = 1,
                                     .group_size = 128,
                                     .strategy = MOEQ_STRATEGY_GROUP,
                                     .strategy_given = 1};
static const moeq_quant_args b_nvfp4_no_scale_dtype = {.num_bits = 4,
                                                       .type = MOEQ_QTYPE_FLOAT,
                                                       .symmetric = 1,
                                                       .group_size = 16,
                                                       .strategy = MOEQ_STRATEGY_TENSOR_GROUP,
                                                       .strategy_given = 1};
static const moeq_quant_args b_group_no_size = {.num_bits = 4,
                                                .type = MOEQ_QTYPE_INT,
                                                .symmetric = 1,
                                                .strategy = MOEQ_STRATEGY_GROUP,
                                                .strategy_given = 1};
static const moeq_quant_args b_w4_g96 = {.num_bits = 4,
                                         .type = MOEQ_QTYPE_INT,
                                         .symmetric = 1,
                                         .group_size = 96,
                                         .strategy = MOEQ_STRATEGY_GROUP,
                                         .strategy_given = 1};
static moeq_synth_group b_groups[2];

typedef struct bad_layout {
    const char *what;
    moeq_status status;
    const char *message;
} bad_layout;

static const bad_layout k_bad[] = {
    {"layout NULL", MOEQ_STATUS_INVALID_ARG, "layout is NULL"},
    {"num_layers 0", MOEQ_STATUS_INVALID_ARG, "layout.num_layers is 0; must be in [1, 100000]"},
    {"first_dense too many", MOEQ_STATUS_INVALID_ARG,
     "layout.first_dense_layers is 3; must be in [0, 2]"},
    {"top_k > experts", MOEQ_STATUS_INVALID_ARG, "layout.top_k is 9; must be in [1, 8]"},
    {"hidden 0", MOEQ_STATUS_INVALID_ARG, "layout.hidden_size is 0"},
    {"scoring 2", MOEQ_STATUS_INVALID_ARG, "layout.scoring is 2; must be in [0, 1]"},
    {"n_group not dividing", MOEQ_STATUS_INVALID_ARG,
     "layout.n_group 3 does not divide num_experts 8"},
    {"topk_group too few", MOEQ_STATUS_INVALID_ARG,
     "layout.topk_group 1 x 1 experts per group < top_k 2"},
    {"scaling negative", MOEQ_STATUS_INVALID_ARG,
     "layout.routed_scaling_factor is -1; must be finite and > 0"},
    {"scaling NaN", MOEQ_STATUS_INVALID_ARG, "layout.routed_scaling_factor is nan"},
    {"heads not dividing", MOEQ_STATUS_INVALID_ARG,
     "layout.num_attention_heads 3 does not divide hidden_size 256"},
    {"kv not dividing", MOEQ_STATUS_INVALID_ARG,
     "layout.num_key_value_heads 3 does not divide num_attention_heads 4"},
    {"kv without heads", MOEQ_STATUS_INVALID_ARG,
     "layout.num_key_value_heads is 2 without attention"},
    {"dtype I8", MOEQ_STATUS_INVALID_ARG,
     "layout.dtype is I8 (7); the model dtype must be BF16, F16 or F32"},
    {"shards > layers", MOEQ_STATUS_INVALID_ARG,
     "layout.shards is 3; must be in [1, num_layers = 2]"},
    {"weight_std inf", MOEQ_STATUS_INVALID_ARG, "layout.weight_std is inf"},
    {"too large", MOEQ_STATUS_INVALID_ARG,
     "layout: num_experts x moe_intermediate_size x hidden_size [17592186044416, 16777216] is too "
     "large"},
    {"model_type empty", MOEQ_STATUS_INVALID_ARG, "layout.model_type is empty"},
    {"no groups", MOEQ_STATUS_INVALID_ARG, "layout.n_groups is 0; must be in [1, 64]"},
    {"groups NULL", MOEQ_STATUS_INVALID_ARG, "layout.groups is NULL but n_groups is 1"},
    {"target NULL", MOEQ_STATUS_INVALID_ARG, "layout.groups[0].targets[0] is NULL"},
    {"no targets", MOEQ_STATUS_INVALID_ARG, "layout.groups[0].targets: n_targets is 0"},
    {"duplicate names", MOEQ_STATUS_INVALID_ARG,
     "layout.groups[1].name 'group_0' is also the name of groups[0]"},
    {"group mixed-precision", MOEQ_STATUS_INVALID_ARG,
     "layout.groups[0].format is 9 (mixed-precision)"},
    {"ignore NULL", MOEQ_STATUS_INVALID_ARG, "layout.ignore[1] is NULL"},
    {"group matches nothing", MOEQ_STATUS_INVALID_ARG,
     "layout.groups[1] ('group_1', first target 're:.*nothing_here.*') matches no module"},
    {"group matches embedding", MOEQ_STATUS_INVALID_ARG,
     "matches model.embed_tokens; moeq_synth_write quantizes Linear modules only"},
    {"bad regex", MOEQ_STATUS_REGEX, "layout.groups: config.json is not accepted"},
    {"group without group_size", MOEQ_STATUS_SCHEMA,
     "strategy group requires group_size to be set to a positive value"},
    {"nvfp4 without scale_dtype", MOEQ_STATUS_UNSUPPORTED,
     "model.layers.0.mlp.experts.0.gate_proj: nvfp4-pack-quantized weights (float4 "
     "tensor_group(16)"},
    {"group size not dividing", MOEQ_STATUS_SHAPE, "cols 256 is not a multiple of group_size 96"},
};

static void mutate(moeq_synth_layout *L, const moeq_synth_layout **lp, const char *what) {
    b_groups[0] = L->groups[0];
    b_groups[1] = L->groups[0];
    if (!strcmp(what, "layout NULL"))
        *lp = NULL;
    else if (!strcmp(what, "num_layers 0"))
        L->num_layers = 0;
    else if (!strcmp(what, "first_dense too many"))
        L->first_dense_layers = 3;
    else if (!strcmp(what, "top_k > experts"))
        L->top_k = 9;
    else if (!strcmp(what, "hidden 0"))
        L->hidden_size = 0;
    else if (!strcmp(what, "scoring 2"))
        L->scoring = 2;
    else if (!strcmp(what, "n_group not dividing"))
        L->n_group = 3, L->topk_group = 1;
    else if (!strcmp(what, "topk_group too few"))
        L->n_group = 8, L->topk_group = 1;
    else if (!strcmp(what, "scaling negative"))
        L->routed_scaling_factor = -1.0f;
    else if (!strcmp(what, "scaling NaN"))
        L->routed_scaling_factor = NAN;
    else if (!strcmp(what, "heads not dividing"))
        L->num_attention_heads = 3;
    else if (!strcmp(what, "kv not dividing"))
        L->num_attention_heads = 4, L->num_key_value_heads = 3;
    else if (!strcmp(what, "kv without heads"))
        L->num_key_value_heads = 2;
    else if (!strcmp(what, "dtype I8"))
        L->dtype = MOEQ_DTYPE_I8;
    else if (!strcmp(what, "shards > layers"))
        L->shards = 3;
    else if (!strcmp(what, "weight_std inf"))
        L->weight_std = INFINITY;
    else if (!strcmp(what, "too large")) {
        L->num_experts = 1 << 20;
        L->moe_intermediate_size = 1 << 24;
        L->hidden_size = 1 << 24;
    } else if (!strcmp(what, "model_type empty"))
        L->model_type = "";
    else if (!strcmp(what, "no groups"))
        L->n_groups = 0;
    else if (!strcmp(what, "groups NULL"))
        L->groups = NULL;
    else if (!strcmp(what, "target NULL"))
        b_groups[0].targets = b_null_target, L->groups = b_groups;
    else if (!strcmp(what, "no targets"))
        b_groups[0].n_targets = 0, L->groups = b_groups;
    else if (!strcmp(what, "duplicate names")) {
        b_groups[0].name = NULL; /* becomes group_0 */
        b_groups[1].name = "group_0";
        L->groups = b_groups;
        L->n_groups = 2;
    } else if (!strcmp(what, "group mixed-precision")) {
        b_groups[0].format = MOEQ_FORMAT_MIXED_PRECISION;
        L->groups = b_groups;
    } else if (!strcmp(what, "ignore NULL"))
        L->ignore = b_ignore_null;
    else if (!strcmp(what, "group matches nothing")) {
        b_groups[1].targets = b_none;
        L->groups = b_groups;
        L->n_groups = 2;
    } else if (!strcmp(what, "group matches embedding")) {
        b_groups[0].targets = b_embed;
        b_groups[0].n_targets = 2;
        L->groups = b_groups;
    } else if (!strcmp(what, "bad regex"))
        b_groups[0].targets = b_regex, L->groups = b_groups;
    else if (!strcmp(what, "group without group_size"))
        b_groups[0].weights = &b_group_no_size, L->groups = b_groups;
    else if (!strcmp(what, "nvfp4 without scale_dtype")) {
        b_groups[0].weights = &b_nvfp4_no_scale_dtype;
        L->groups = b_groups;
    } else if (!strcmp(what, "group size not dividing"))
        b_groups[0].weights = &b_w4_g96, L->groups = b_groups;
    else
        ck_abort_msg("no mutation '%s'", what);
}

static moeq_synth_layout base_layout(void) {
    static const moeq_synth_group g = {NULL, 1, b_linear, &b_w4, NULL, MOEQ_FORMAT_NONE};
    moeq_synth_layout L;
    memset(&L, 0, sizeof L);
    L.num_layers = 2;
    L.num_experts = 8;
    L.top_k = 2;
    L.hidden_size = 256;
    L.moe_intermediate_size = 128;
    L.n_groups = 1;
    L.groups = &g;
    L.n_ignore = 2;
    L.ignore = b_ignore;
    return L;
}

START_TEST(test_bad_layouts) {
    const bad_layout *b = &k_bad[_i];
    moeq_synth_layout L = base_layout();
    const moeq_synth_layout *lp = &L;
    mutate(&L, &lp, b->what);
    char *dir = make_tmp();
    moeq_error err;
    moeq_error_clear(&err);
    const moeq_status st = moeq_synth_write(lp, dir, &err);
    ck_assert_msg(st == b->status, "%s: status %s, want %s (%s)", b->what, moeq_status_name(st),
                  moeq_status_name(b->status), err.message);
    ck_assert_msg(strstr(err.message, b->message) != NULL, "%s: message '%s' lacks '%s'", b->what,
                  err.message, b->message);
    /* every error is found before a file is written */
    DIR *d = opendir(dir);
    int entries = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) entries += e->d_name[0] != '.';
    closedir(d);
    ck_assert_int_eq(entries, 0);
    rm_dir(dir);
}
END_TEST

/* The base layout is fine: the table's failures are the mutations'. */
START_TEST(test_base_layout_ok) {
    moeq_synth_layout L = base_layout();
    char *dir = make_tmp();
    moeq_error err;
    ck_assert_ok(moeq_synth_write(&L, dir, &err), &err);
    check_checkpoint(&L, dir, "wna16");
    rm_dir(dir);
}
END_TEST

START_TEST(test_bad_dirs) {
    moeq_synth_layout L = base_layout();
    moeq_error err;
    ck_assert_status(moeq_synth_write(&L, NULL, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_str_eq(err.message, "moeq_synth_write: dir is NULL");
    ck_assert_status(moeq_synth_write(&L, "", &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_status(moeq_synth_write(&L, "/nonexistent-moeq-parent/ckpt", &err), MOEQ_STATUS_IO,
                     &err);
    ck_assert_ptr_nonnull(
        strstr(err.message, "/nonexistent-moeq-parent/ckpt: cannot create the directory: "));
    char *dir = make_tmp();
    char file[512];
    snprintf(file, sizeof file, "%s/config.json", dir);
    FILE *f = fopen(file, "w");
    fclose(f);
    ck_assert_status(moeq_synth_write(&L, file, &err), MOEQ_STATUS_IO, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "config.json: exists and is not a directory"));
    /* a directory that does not exist yet is created (its parent exists) */
    char sub[512];
    snprintf(sub, sizeof sub, "%s/new", dir);
    ck_assert_ok(moeq_synth_write(&L, sub, &err), &err);
    ck_assert(exists(sub, "config.json"));
    char *subdup = strdup(sub);
    rm_dir(subdup);
    rm_dir(dir);
}
END_TEST

Suite *synth_suite(void);
Suite *synth_suite(void) {
    Suite *s = suite_create("synth");
    TCase *p = tcase_create("presets");
    tcase_set_timeout(p, 120);
    tcase_add_loop_test(p, test_preset_round_trip, 0, N_EXPECT);
    tcase_add_test(p, test_presets_listed);
    suite_add_tcase(s, p);
    TCase *f = tcase_create("files");
    tcase_set_timeout(f, 120);
    tcase_add_test(f, test_deterministic);
    tcase_add_test(f, test_known_values);
    tcase_add_test(f, test_sharded);
    tcase_add_test(f, test_custom_layout);
    suite_add_tcase(s, f);
    TCase *b = tcase_create("bad");
    tcase_set_timeout(b, 60);
    tcase_add_loop_test(b, test_bad_layouts, 0, (int)(sizeof k_bad / sizeof k_bad[0]));
    tcase_add_test(b, test_base_layout_ok);
    tcase_add_test(b, test_bad_dirs);
    suite_add_tcase(s, b);
    return s;
}

MOEQ_TEST_MAIN(synth_suite)

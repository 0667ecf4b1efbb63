/*
 * check_conformance.c - moeq against compressed-tensors itself.
 *
 * tests/data/conformance/ (CT 0.18.0) and tests/data/conformance_0.20/ (CT
 * 0.20.1: MXFP6 added, actorder "group" gone) hold, per case, the tensors that
 * CT's own compressors wrote for a small random weight, the weight itself
 * (weight_orig) and CT's decompressed result (expected); see
 * tests/conformance/README.md.  For every case:
 *  1. moeq_dequantize, with output in CT's output dtype, must equal
 *     `expected` bit for bit;
 *  2. the writer-side quantizers, run on weight_orig, must reproduce every
 *     compressed tensor byte for byte.
 * A tiny safetensors reader lives here so that this test needs nothing but
 * the committed files (no torch, no checkpoint module).
 */
#include "test_util.h"
#include "common/internal.h"
#include "kernels.h"

#include <cJSON.h>
#include <math.h>

/* The fixture sets, one per compressed-tensors version that wrote them. */
static const char *const conf_dirs[] = {MOEQ_TEST_DATA_DIR "/conformance",
                                        MOEQ_TEST_DATA_DIR "/conformance_0.20"};
#define N_DIRS (sizeof conf_dirs / sizeof conf_dirs[0])
#define MAX_CASES 128
#define MAX_TENSORS 16

/* ---- files ---------------------------------------------------------------------- */

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 65536;
            char *p = realloc(buf, cap + 1);
            if (!p) break;
            buf = p;
        }
        const size_t got = fread(buf + n, 1, cap - n, f);
        if (got == 0) break;
        n += got;
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    *len = n;
    return buf;
}

/* ---- a minimal safetensors reader: u64 LE header length, JSON header, data ---- */

typedef struct st_file {
    char *buf;
    size_t len;
    uint32_t n;
    moeq_tensor t[MAX_TENSORS];
    char names[MAX_TENSORS][160];
} st_file;

static void st_load(const char *path, st_file *f) {
    memset(f, 0, sizeof *f);
    f->buf = read_all(path, &f->len);
    ck_assert_msg(f->buf != NULL, "cannot read %s", path);
    ck_assert_uint_ge(f->len, 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | (uint8_t)f->buf[i];
    ck_assert_msg(hlen <= f->len - 8, "%s: header length %llu beyond the file", path,
                  (unsigned long long)hlen);
    cJSON *h = cJSON_ParseWithLength(f->buf + 8, (size_t)hlen);
    ck_assert_msg(h && cJSON_IsObject(h), "%s: header is not a JSON object", path);
    const size_t data0 = 8 + (size_t)hlen;
    for (const cJSON *e = h->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        ck_assert_uint_lt(f->n, MAX_TENSORS);
        moeq_tensor *t = &f->t[f->n];
        snprintf(f->names[f->n], sizeof f->names[f->n], "%s", e->string);
        t->name = f->names[f->n];
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        ck_assert(cJSON_IsString(dt) && cJSON_IsArray(sh) && cJSON_GetArraySize(off) == 2);
        t->dtype = moeq_dtype_from_name(dt->valuestring);
        ck_assert_msg(t->dtype != MOEQ_DTYPE_INVALID, "%s: dtype %s", e->string, dt->valuestring);
        t->ndim = cJSON_GetArraySize(sh);
        ck_assert_int_le(t->ndim, MOEQ_MAX_DIMS);
        uint64_t numel = 1;
        for (int32_t d = 0; d < t->ndim; d++) {
            t->shape[d] = (int64_t)cJSON_GetArrayItem(sh, d)->valuedouble;
            numel *= (uint64_t)t->shape[d];
        }
        const uint64_t b = (uint64_t)cJSON_GetArrayItem(off, 0)->valuedouble;
        const uint64_t end = (uint64_t)cJSON_GetArrayItem(off, 1)->valuedouble;
        ck_assert_msg(b <= end && end <= f->len - data0, "%s: offsets out of the file", e->string);
        t->nbytes = end - b;
        ck_assert_uint_eq(t->nbytes, numel * moeq_dtype_size(t->dtype));
        t->data = f->buf + data0 + b;
        f->n++;
    }
    cJSON_Delete(h);
}

static const moeq_tensor *st_get(const st_file *f, const char *name) {
    for (uint32_t i = 0; i < f->n; i++) {
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    }
    return NULL;
}

/* The module's tensor `param` ("<module>.<param>"), or NULL. */
static const moeq_tensor *param(const st_file *f, const char *module, const char *p) {
    char name[200];
    snprintf(name, sizeof name, "%s.%s", module, p);
    return st_get(f, name);
}

/* ---- case description -------------------------------------------------------------- */

typedef struct conf_case {
    char name[96];
    char module[160];
    int32_t format;
    int32_t weight_dtype;
    int32_t expected_dtype;
    moeq_quant_args args;
} conf_case;

static int32_t enum_index(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++) {
        if (strcmp(s, names[i]) == 0) return i;
    }
    ck_abort_msg("unknown value '%s'", s);
    return -1;
}

static int32_t dtype_of_torch(const cJSON *v) {
    if (!cJSON_IsString(v)) return MOEQ_DTYPE_INVALID;
    static const struct {
        const char *torch;
        int32_t dtype;
    } map[] = {{"torch.float8_e4m3fn", MOEQ_DTYPE_F8_E4M3}, {"torch.uint8", MOEQ_DTYPE_U8},
               {"torch.int8", MOEQ_DTYPE_I8},           {"torch.bfloat16", MOEQ_DTYPE_BF16},
               {"torch.float16", MOEQ_DTYPE_F16},       {"torch.float32", MOEQ_DTYPE_F32}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (strcmp(v->valuestring, map[i].torch) == 0) return map[i].dtype;
    }
    ck_abort_msg("unknown torch dtype %s", v->valuestring);
    return MOEQ_DTYPE_INVALID;
}

static const char *json_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(cJSON_IsString(v), "JSON key %s is not a string", key);
    return v->valuestring;
}

static void load_case(const char *dir, const char *name, conf_case *c) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    size_t len;
    char *text = read_all(path, &len);
    ck_assert_msg(text != NULL, "cannot read %s", path);
    cJSON *j = cJSON_ParseWithLength(text, len);
    ck_assert_msg(j != NULL, "%s: bad JSON", path);
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    snprintf(c->module, sizeof c->module, "%s", json_str(j, "module"));
    c->format = -1;
    for (int32_t f = 1; f < MOEQ_FORMAT_COUNT_; f++) {
        if (strcmp(moeq_format_name(f), json_str(j, "format")) == 0) c->format = f;
    }
    ck_assert_int_ge(c->format, 1);
    c->weight_dtype = moeq_dtype_from_name(json_str(j, "weight_dtype"));
    c->expected_dtype = moeq_dtype_from_name(json_str(j, "expected_dtype"));
    ck_assert_msg(strcmp(json_str(j, "compare"), "exact") == 0, "%s: only exact comparisons", name);

    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "args");
    moeq_quant_args *qa = &c->args;
    qa->num_bits = (int32_t)cJSON_GetObjectItemCaseSensitive(a, "num_bits")->valuedouble;
    qa->type = strcmp(json_str(a, "type"), "float") == 0 ? MOEQ_QTYPE_FLOAT : MOEQ_QTYPE_INT;
    qa->symmetric = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "symmetric"));
    const cJSON *gs = cJSON_GetObjectItemCaseSensitive(a, "group_size");
    qa->group_size = cJSON_IsNumber(gs) ? (int32_t)gs->valuedouble : 0;
    static const char *const strategies[] = {"tensor", "channel", "group", "block",
                                             "token", "tensor_group", "attn_head"};
    qa->strategy = enum_index(json_str(a, "strategy"), strategies, 7);
    qa->strategy_given = 1;
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(a, "block_structure");
    if (cJSON_IsArray(bs)) {
        qa->block_rows = (int32_t)cJSON_GetArrayItem(bs, 0)->valuedouble;
        qa->block_cols = (int32_t)cJSON_GetArrayItem(bs, 1)->valuedouble;
    }
    const cJSON *ao = cJSON_GetObjectItemCaseSensitive(a, "actorder");
    static const char *const actorders[] = {"none", "group", "weight", "dynamic", "static"};
    qa->actorder = cJSON_IsString(ao) ? enum_index(ao->valuestring, actorders, 5) : MOEQ_ACTORDER_NONE;
    qa->scale_dtype = dtype_of_torch(cJSON_GetObjectItemCaseSensitive(a, "scale_dtype"));
    qa->zp_dtype = dtype_of_torch(cJSON_GetObjectItemCaseSensitive(a, "zp_dtype"));
    cJSON_Delete(j);
    free(text);
}

/* ---- the cases --------------------------------------------------------------------- */

static char case_names[MAX_CASES][96];
static const char *case_dirs[MAX_CASES];
static int n_cases, n_dir_cases[N_DIRS];

static void load_index(void) {
    for (size_t d = 0; d < N_DIRS; d++) {
        char path[512];
        snprintf(path, sizeof path, "%s/index.json", conf_dirs[d]);
        size_t len;
        char *text = read_all(path, &len);
        if (!text) continue; /* test_index reports it */
        cJSON *j = cJSON_ParseWithLength(text, len);
        const cJSON *cases = cJSON_GetObjectItemCaseSensitive(j, "cases");
        for (const cJSON *e = cases ? cases->child : NULL; e && n_cases < MAX_CASES; e = e->next) {
            if (!cJSON_IsString(e)) continue;
            case_dirs[n_cases] = conf_dirs[d];
            snprintf(case_names[n_cases++], sizeof case_names[0], "%s", e->valuestring);
            n_dir_cases[d]++;
        }
        cJSON_Delete(j);
        free(text);
    }
}

START_TEST(test_index) {
    /* the fixtures are committed: the suite must see all of them (0.18: 19
     * cases; 0.20.1: 22, its actorder "group" cases skipped, 3 MXFP6 added) */
    ck_assert_int_ge(n_dir_cases[0], 19);
    ck_assert_int_ge(n_dir_cases[1], 22);
}
END_TEST

/* Converts f32 values to dtype bytes (BF16/F16/F32). */
static void *to_dtype(int32_t dtype, const float *v, size_t n) {
    void *out = malloc(n * moeq_dtype_size(dtype) + 1);
    ck_assert_ptr_nonnull(out);
    moeq__from_f32_ref(dtype, v, n, out);
    return out;
}

/* Compares bytes, naming the first differing element. */
static void assert_same_bytes(const char *what, const void *got, const void *want, size_t n,
                              size_t esize) {
    const uint8_t *g = got, *w = want;
    for (size_t i = 0; i < n; i++) {
        if (g[i] != w[i]) {
            ck_abort_msg("%s: element %zu differs (byte %zu: 0x%02x, want 0x%02x)", what, i / esize, i,
                         g[i], w[i]);
        }
    }
}

/* 1: moeq_dequantize against CT's decompressed weight. */
START_TEST(test_dequantize_matches_ct) {
    conf_case c;
    load_case(case_dirs[_i], case_names[_i], &c);
    char path[512];
    snprintf(path, sizeof path, "%s/%s.safetensors", case_dirs[_i], c.name);
    st_file f;
    st_load(path, &f);
    const moeq_tensor *expected = st_get(&f, "expected");
    ck_assert_ptr_nonnull(expected);
    ck_assert_int_eq(expected->dtype, MOEQ_DTYPE_F32);
    const size_t n = (size_t)(expected->shape[0] * expected->shape[1]);
    float *want = malloc(n * sizeof *want);
    moeq__to_f32_ref(MOEQ_DTYPE_F32, expected->data, n, want);

    /* only the module's own tensors, under their full names */
    moeq_tensor mt[MAX_TENSORS];
    uint32_t nm = 0;
    for (uint32_t i = 0; i < f.n; i++) {
        if (strncmp(f.t[i].name, c.module, strlen(c.module)) == 0) mt[nm++] = f.t[i];
    }
    moeq_error err;
    int64_t shape[2];
    const size_t osize = moeq_dtype_size(c.expected_dtype);
    void *out = malloc(n * osize);
    const moeq_status st = moeq_dequantize(&c.args, c.format, 0, c.module, mt, nm, c.expected_dtype,
                                           out, n * osize, shape, &err);
    ck_assert_msg(st == MOEQ_STATUS_OK, "%s: %s", c.name, err.message);
    ck_assert_int_eq(shape[0], expected->shape[0]);
    ck_assert_int_eq(shape[1], expected->shape[1]);
    void *want_bytes = to_dtype(c.expected_dtype, want, n);
    /* `expected` holds values of the expected dtype exactly */
    float *back = malloc(n * sizeof *back);
    moeq__to_f32_ref(c.expected_dtype, want_bytes, n, back);
    ck_assert_mem_eq(back, want, n * sizeof *back);
    char what[160];
    snprintf(what, sizeof what, "%s: moeq_dequantize vs CT decompress", c.name);
    assert_same_bytes(what, out, want_bytes, n * osize, osize);

    /* F32 output rounds to the same values once */
    float *f32 = malloc(n * sizeof *f32);
    ck_assert_int_eq(moeq_dequantize(&c.args, c.format, 0, c.module, mt, nm, MOEQ_DTYPE_F32, f32,
                                     n * sizeof *f32, shape, &err),
                     MOEQ_STATUS_OK);
    void *rounded = to_dtype(c.expected_dtype, f32, n);
    snprintf(what, sizeof what, "%s: F32 output rounded to %s", c.name, moeq_dtype_name(c.expected_dtype));
    assert_same_bytes(what, rounded, want_bytes, n * osize, osize);

    free(want);
    free(out);
    free(want_bytes);
    free(back);
    free(f32);
    free(rounded);
    free(f.buf);
}
END_TEST

/* Scale values (f32 holding dtype values) as the stored tensor's bytes. */
static void check_float_tensor(const char *what, const moeq_tensor *t, const float *v, size_t n) {
    ck_assert_msg(t != NULL, "%s: missing", what);
    ck_assert_uint_eq(t->nbytes, n * moeq_dtype_size(t->dtype));
    void *b = to_dtype(t->dtype, v, n);
    assert_same_bytes(what, b, t->data, t->nbytes, moeq_dtype_size(t->dtype));
    free(b);
}

/* 2: the writer-side quantizers against CT's compressed tensors. */
START_TEST(test_quantizers_match_ct) {
    conf_case c;
    load_case(case_dirs[_i], case_names[_i], &c);
    char path[512], what[200];
    snprintf(path, sizeof path, "%s/%s.safetensors", case_dirs[_i], c.name);
    st_file f;
    st_load(path, &f);
    const moeq_tensor *orig = st_get(&f, "weight_orig");
    ck_assert_ptr_nonnull(orig);
    ck_assert_int_eq(orig->dtype, c.weight_dtype);
    const size_t rows = (size_t)orig->shape[0], cols = (size_t)orig->shape[1], n = rows * cols;
    float *w = malloc(n * sizeof *w);
    moeq__to_f32_ref(orig->dtype, orig->data, n, w);
    const moeq_quant_args *a = &c.args;
    const moeq__wquant wq = {a->type, a->num_bits, a->symmetric, a->strategy, a->group_size,
                             a->block_rows, a->block_cols, c.weight_dtype};
    moeq__grid g;
    ck_assert(moeq__scale_grid(a->strategy, rows, cols, (size_t)(a->group_size > 0 ? a->group_size : 0),
                               (size_t)a->block_rows, (size_t)a->block_cols, &g));
    const size_t ncell = g.rows * g.cols;
    float *scale = malloc(ncell * sizeof *scale);
    int8_t *zp = malloc(ncell + 1);
    uint8_t *sb = malloc(ncell + 1);
    uint8_t *codes = malloc(n + 1);
    const moeq_tensor *t_scale = param(&f, c.module, "weight_scale");

    snprintf(what, sizeof what, "%s: weight_scale", c.name);
    if (c.format == MOEQ_FORMAT_PACK_QUANTIZED || c.format == MOEQ_FORMAT_INT_QUANTIZED) {
        const moeq_tensor *t_gidx = param(&f, c.module, "weight_g_idx");
        int32_t *g_idx = NULL;
        if (t_gidx) {
            g_idx = malloc(cols * sizeof *g_idx);
            for (size_t i = 0; i < cols; i++) g_idx[i] = (int32_t)moeq__load_u32(t_gidx->data, i);
        }
        moeq__quantize_int_ref(&wq, w, rows, cols, g_idx, scale, a->symmetric ? NULL : zp, (int8_t *)codes);
        check_float_tensor(what, t_scale, scale, ncell);
        if (c.format == MOEQ_FORMAT_PACK_QUANTIZED) {
            const size_t nw = moeq__int_packed_words(cols, a->num_bits, false);
            uint32_t *words = malloc(rows * nw * 4 + 4);
            for (size_t r = 0; r < rows; r++) {
                moeq__int_pack_row_ref((int8_t *)codes + r * cols, cols, a->num_bits, false, words + r * nw);
            }
            const moeq_tensor *t = param(&f, c.module, "weight_packed");
            ck_assert_uint_eq(t->nbytes, rows * nw * 4);
            snprintf(what, sizeof what, "%s: weight_packed", c.name);
            assert_same_bytes(what, words, t->data, t->nbytes, 4);
            free(words);
        } else {
            const moeq_tensor *t = param(&f, c.module, "weight");
            snprintf(what, sizeof what, "%s: weight", c.name);
            assert_same_bytes(what, codes, t->data, n, 1);
        }
        if (!a->symmetric) {
            const moeq_tensor *t = param(&f, c.module, "weight_zero_point");
            snprintf(what, sizeof what, "%s: weight_zero_point", c.name);
            if (t->dtype == MOEQ_DTYPE_I32) {
                const size_t zr = moeq__int_packed_words(g.rows, a->num_bits, false);
                uint32_t *zw = malloc(zr * g.cols * 4 + 4);
                moeq__int_pack_cols_ref(zp, g.rows, g.cols, a->num_bits, false, zw);
                ck_assert_uint_eq(t->nbytes, zr * g.cols * 4);
                assert_same_bytes(what, zw, t->data, t->nbytes, 4);
                free(zw);
            } else {
                ck_assert_uint_eq(t->nbytes, ncell);
                assert_same_bytes(what, zp, t->data, ncell, 1);
            }
        }
        free(g_idx);
    } else if (c.format == MOEQ_FORMAT_FLOAT_QUANTIZED) {
        moeq__quantize_fp8_ref(&wq, w, rows, cols, scale, codes);
        check_float_tensor(what, t_scale, scale, ncell);
        snprintf(what, sizeof what, "%s: weight", c.name);
        assert_same_bytes(what, codes, param(&f, c.module, "weight")->data, n, 1);
    } else if (c.format == MOEQ_FORMAT_NVFP4_PACK_QUANTIZED) {
        float amax = 0.0f;
        for (size_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(w[i]));
        const float global = moeq__nvfp4_global_scale_ref(amax, c.weight_dtype);
        snprintf(what, sizeof what, "%s: weight_global_scale", c.name);
        check_float_tensor(what, param(&f, c.module, "weight_global_scale"), &global, 1);
        moeq__quantize_nvfp4_ref(&wq, w, rows, cols, global, sb, codes);
        snprintf(what, sizeof what, "%s: weight_scale", c.name);
        assert_same_bytes(what, sb, t_scale->data, ncell, 1);
        snprintf(what, sizeof what, "%s: weight_packed", c.name);
        assert_same_bytes(what, codes, param(&f, c.module, "weight_packed")->data, n / 2, 1);
    } else if (c.format == MOEQ_FORMAT_MXFP4_PACK_QUANTIZED) {
        moeq__quantize_mxfp4_ref(&wq, w, rows, cols, sb, codes);
        assert_same_bytes(what, sb, t_scale->data, ncell, 1);
        snprintf(what, sizeof what, "%s: weight_packed", c.name);
        assert_same_bytes(what, codes, param(&f, c.module, "weight_packed")->data, n / 2, 1);
    } else if (c.format == MOEQ_FORMAT_MXFP6_PACK_QUANTIZED) {
        memset(codes, 0, n);
        moeq__quantize_mxfp6_ref(&wq, w, rows, cols, sb, codes);
        assert_same_bytes(what, sb, t_scale->data, ncell, 1);
        snprintf(what, sizeof what, "%s: weight_packed", c.name);
        assert_same_bytes(what, codes, param(&f, c.module, "weight_packed")->data, n / 4 * 3, 1);
    } else if (c.format == MOEQ_FORMAT_MXFP8_QUANTIZED) {
        moeq__quantize_mxfp8_ref(&wq, w, rows, cols, sb, codes);
        assert_same_bytes(what, sb, t_scale->data, ncell, 1);
        snprintf(what, sizeof what, "%s: weight", c.name);
        assert_same_bytes(what, codes, param(&f, c.module, "weight")->data, n, 1);
    } else {
        ck_abort_msg("%s: no quantizer for format %s", c.name, moeq_format_name(c.format));
    }
    free(w);
    free(scale);
    free(zp);
    free(sb);
    free(codes);
    free(f.buf);
}
END_TEST

Suite *conformance_suite(void);
Suite *conformance_suite(void) {
    load_index();
    Suite *s = suite_create("conformance");
    TCase *tc = tcase_create("ct_0_18_and_0_20");
    tcase_add_test(tc, test_index);
    tcase_add_loop_test(tc, test_dequantize_matches_ct, 0, n_cases);
    tcase_add_loop_test(tc, test_quantizers_match_ct, 0, n_cases);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(conformance_suite)

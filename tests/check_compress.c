/*
 * check_compress.c - the writer side: moeq_tensor_set, moeq_compress,
 * moeq_compress_input, moeq_nvfp4_global_scale.
 *
 *  1. Against compressed-tensors: for every fixture in tests/data/conformance
 *     (written by CT 0.18.0's own compressors, see tests/conformance/README.md),
 *     moeq_compress of the fixture's weight_orig must give exactly CT's
 *     tensors: the same names, dtypes, shapes and bytes.
 *  2. Round trips: every format x strategy x sym/asym x actorder x dtype,
 *     compress then moeq_dequantize, each element within half a quantization
 *     step of the weight (plus the rounding slack of the weight dtype; the
 *     tolerances are in tests/tolerance.h, shared with check_synth).
 *  3. Static activation tensors and the NVFP4 global scale, on worked values.
 *  4. A table of bad inputs: status and a substring of the message; failures
 *     leave the set as it was, also when allocations fail.
 */
#include "test_util.h"
#include "common/internal.h"
#include "kernels.h"
#include "checkpoint/dequant.h"
#include "tolerance.h"

#include <cJSON.h>
#include <math.h>

#define CONF_DIR MOEQ_TEST_DATA_DIR "/conformance"
#define MODULE   "model.layers.0.mlp.experts.3.up_proj"

/* ---- helpers ---------------------------------------------------------------------- */

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!buf) {
        fclose(f);
        return NULL;
    }
    *len = fread(buf, 1, (size_t)n, f);
    buf[*len] = '\0';
    fclose(f);
    return buf;
}

/* xorshift64* and Box-Muller: deterministic test weights. */
static uint64_t rng_state;
static double rng_uniform(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) * 0x1p-53;
}
static float rng_normal(void) {
    const double u1 = rng_uniform() + 0x1p-54, u2 = rng_uniform();
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* N(0, 0.05) with a few outliers and, when there is room, an all-zero group. */
static float *random_weight(size_t rows, size_t cols, uint64_t seed) {
    rng_state = seed * 0x9E3779B97F4A7C15ull + 1;
    float *w = malloc(rows * cols * sizeof *w);
    ck_assert_ptr_nonnull(w);
    for (size_t i = 0; i < rows * cols; i++) {
        w[i] = 0.05f * rng_normal();
        if (rng_uniform() < 0.01) w[i] *= 8.0f;
    }
    if (rows > 1 && cols >= 32) memset(w + cols, 0, 32 * sizeof *w);
    return w;
}

/* A GPTQ-style g_idx: a random permutation cut into groups of gs. */
static int32_t *random_g_idx(size_t cols, size_t gs, uint64_t seed) {
    rng_state = seed * 0xD1B54A32D192ED03ull + 7;
    size_t *perm = malloc(cols * sizeof *perm);
    int32_t *g = malloc(cols * sizeof *g);
    for (size_t i = 0; i < cols; i++) perm[i] = i;
    for (size_t i = cols - 1; i > 0; i--) {
        const size_t j = (size_t)(rng_uniform() * (double)(i + 1));
        const size_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < cols; i++) g[perm[i]] = (int32_t)(i / gs);
    free(perm);
    return g;
}

static moeq_quant_args qargs(int32_t type, int bits, int sym, int32_t strategy, int gs) {
    moeq_quant_args a;
    memset(&a, 0, sizeof a);
    a.num_bits = bits;
    a.type = type;
    a.symmetric = sym;
    a.strategy = strategy;
    a.strategy_given = 1;
    a.group_size = gs;
    a.scale_dtype = MOEQ_DTYPE_INVALID;
    a.zp_dtype =
        sym ? MOEQ_DTYPE_INVALID : (type == MOEQ_QTYPE_INT ? MOEQ_DTYPE_I8 : MOEQ_DTYPE_F8_E4M3);
    a.observer = "memoryless_minmax";
    return a;
}

/* ---- 1. byte for byte against the CT fixtures -------------------------------------- */

#define MAX_CASES 64
static char case_names[MAX_CASES][96];
static int n_cases;

static void load_index(void) {
    size_t len;
    char *text = read_all(CONF_DIR "/index.json", &len);
    if (!text) return;
    cJSON *j = cJSON_ParseWithLength(text, len);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(j, "cases");
    for (const cJSON *e = cases ? cases->child : NULL; e && n_cases < MAX_CASES; e = e->next) {
        if (cJSON_IsString(e))
            snprintf(case_names[n_cases++], sizeof case_names[0], "%s", e->valuestring);
    }
    cJSON_Delete(j);
    free(text);
}

/* The case's QuantizationArgs, read by moeq's own parser from a one-group
 * config built around the fixture's "args" object. */
static moeq_config *case_config(const cJSON *args) {
    char *a = cJSON_PrintUnformatted(args);
    char json[2048];
    snprintf(json, sizeof json,
             "{\"config_groups\": {\"g\": {\"targets\": [\"Linear\"], \"weights\": %s}}}", a);
    free(a);
    moeq_config *cfg = NULL;
    moeq_error err;
    ck_assert_ok(moeq_config_parse(json, strlen(json), NULL, &cfg, &err), &err);
    return cfg;
}

START_TEST(test_matches_ct_fixtures) {
    ck_assert_int_ge(n_cases, 19);
    const char *name = case_names[_i];
    char path[512];
    snprintf(path, sizeof path, "%s/%s.json", CONF_DIR, name);
    size_t len;
    char *text = read_all(path, &len);
    ck_assert_msg(text != NULL, "cannot read %s", path);
    cJSON *j = cJSON_ParseWithLength(text, len);
    ck_assert_ptr_nonnull(j);
    const char *module = cJSON_GetObjectItemCaseSensitive(j, "module")->valuestring;
    const char *fmt = cJSON_GetObjectItemCaseSensitive(j, "format")->valuestring;
    int32_t format = MOEQ_FORMAT_NONE;
    for (int32_t f = 1; f < MOEQ_FORMAT_COUNT_; f++) {
        if (strcmp(moeq_format_name(f), fmt) == 0) format = f;
    }
    const int32_t dtype =
        moeq_dtype_from_name(cJSON_GetObjectItemCaseSensitive(j, "weight_dtype")->valuestring);
    moeq_config *cfg = case_config(cJSON_GetObjectItemCaseSensitive(j, "args"));
    moeq_group_view g;
    ck_assert_ok(moeq_config_group(cfg, 0, &g), NULL);

    snprintf(path, sizeof path, "%s/%s.safetensors", CONF_DIR, name);
    moeq_checkpoint *ck = NULL;
    moeq_error err;
    ck_assert_ok(moeq_checkpoint_open(path, &ck, &err), &err);
    moeq_tensor orig;
    ck_assert_ok(moeq_checkpoint_find(ck, "weight_orig", &orig), NULL);
    ck_assert_int_eq(orig.dtype, dtype);
    const size_t rows = (size_t)orig.shape[0], cols = (size_t)orig.shape[1];
    float *w = malloc(rows * cols * sizeof *w);
    moeq__to_f32_ref(orig.dtype, orig.data, rows * cols, w);
    char gname[256];
    snprintf(gname, sizeof gname, "%s.weight_g_idx", module);
    moeq_tensor gt;
    const int32_t *g_idx = NULL;
    int32_t *gbuf = NULL;
    if (moeq_checkpoint_find(ck, gname, &gt) == MOEQ_STATUS_OK) {
        gbuf = malloc(cols * sizeof *gbuf);
        for (size_t c = 0; c < cols; c++) gbuf[c] = (int32_t)moeq__load_u32(gt.data, c);
        g_idx = gbuf;
    }

    moeq_tensor_set *set = NULL;
    ck_assert_ok(moeq_compress(g.weights, format, module, w, (int64_t)rows, (int64_t)cols, dtype,
                               g_idx, 0.0f, &set, &err),
                 &err);
    /* every tensor CT wrote for the module, and nothing else */
    uint32_t n_ct = 0;
    for (uint64_t i = 0; i < moeq_checkpoint_tensor_count(ck); i++) {
        moeq_tensor t;
        ck_assert_ok(moeq_checkpoint_tensor(ck, i, &t), NULL);
        if (strncmp(t.name, module, strlen(module)) != 0) continue;
        n_ct++;
        const moeq_tensor *m = moeq_tensor_set_find(set, t.name);
        ck_assert_msg(m != NULL, "%s: moeq did not write %s", name, t.name);
        ck_assert_msg(m->dtype == t.dtype, "%s: %s is %s, CT wrote %s", name, t.name,
                      moeq_dtype_name(m->dtype), moeq_dtype_name(t.dtype));
        ck_assert_int_eq(m->ndim, t.ndim);
        for (int32_t d = 0; d < t.ndim; d++) ck_assert_int_eq(m->shape[d], t.shape[d]);
        ck_assert_uint_eq(m->nbytes, t.nbytes);
        const uint8_t *a = m->data, *b = t.data;
        for (uint64_t k = 0; k < t.nbytes; k++) {
            if (a[k] != b[k]) {
                ck_abort_msg("%s: %s byte %llu is 0x%02x, CT wrote 0x%02x", name, t.name,
                             (unsigned long long)k, a[k], b[k]);
            }
        }
    }
    ck_assert_uint_eq(moeq_tensor_set_count(set), n_ct);
    moeq_tensor_set_destroy(set);
    moeq_checkpoint_close(ck);
    moeq_config_destroy(cfg);
    free(w);
    free(gbuf);
    cJSON_Delete(j);
    free(text);
}
END_TEST

/* ---- 2. round trips ------------------------------------------------------------------- */

typedef struct rt_case {
    char name[96];
    int32_t format;
    moeq_quant_args args;
    int32_t dtype;
    size_t rows, cols;
    int g_idx; /* 1: a random actorder g_idx; 0: none (-1s with actorder group) */
} rt_case;

#define MAX_RT 128
static rt_case rt[MAX_RT];
static int n_rt;

static const int32_t k_dtypes[3] = {MOEQ_DTYPE_BF16, MOEQ_DTYPE_F16, MOEQ_DTYPE_F32};

static void rt_add(const char *name, int32_t format, moeq_quant_args a, size_t rows, size_t cols,
                   int g_idx) {
    if (n_rt >= MAX_RT) return; /* test_round_trip_count notices */
    rt_case *c = &rt[n_rt];
    c->format = format;
    c->args = a;
    c->dtype = k_dtypes[n_rt % 3];
    c->rows = rows;
    c->cols = cols;
    c->g_idx = g_idx;
    snprintf(c->name, sizeof c->name, "%s %s", name, moeq_dtype_name(c->dtype));
    n_rt++;
}

static void build_rt_cases(void) {
    static const int bits[] = {2, 3, 4, 8};
    static const int32_t strategies[] = {MOEQ_STRATEGY_TENSOR, MOEQ_STRATEGY_CHANNEL,
                                         MOEQ_STRATEGY_GROUP, MOEQ_STRATEGY_BLOCK};
    char name[96];
    for (size_t b = 0; b < 4; b++) {
        for (size_t s = 0; s < 4; s++) {
            for (int sym = 0; sym <= 1; sym++) {
                moeq_quant_args a = qargs(MOEQ_QTYPE_INT, bits[b], sym, strategies[s],
                                          strategies[s] == MOEQ_STRATEGY_GROUP ? 32 : 0);
                if (strategies[s] == MOEQ_STRATEGY_BLOCK) a.block_rows = 16, a.block_cols = 32;
                snprintf(name, sizeof name, "pack int%d %s %s", bits[b],
                         moeq_strategy_name(strategies[s]), sym ? "sym" : "asym");
                rt_add(name, MOEQ_FORMAT_PACK_QUANTIZED, a, 40, 96, 0);
            }
        }
    }
    for (int sym = 0; sym <= 1; sym++) {
        moeq_quant_args a = qargs(MOEQ_QTYPE_INT, 4, sym, MOEQ_STRATEGY_GROUP, 32);
        a.actorder = MOEQ_ACTORDER_GROUP;
        rt_add(sym ? "pack int4 g32 actorder sym" : "pack int4 g32 actorder asym",
               MOEQ_FORMAT_PACK_QUANTIZED, a, 24, 128, 1);
        rt_add(sym ? "pack int4 g32 actorder -1 sym" : "pack int4 g32 actorder -1 asym",
               MOEQ_FORMAT_PACK_QUANTIZED, a, 24, 128, 0);
        a.num_bits = 8;
        a.group_size = 64;
        rt_add(sym ? "pack int8 g64 actorder sym" : "pack int8 g64 actorder asym",
               MOEQ_FORMAT_PACK_QUANTIZED, a, 16, 128, 1);
        a = qargs(MOEQ_QTYPE_INT, 4, sym, MOEQ_STRATEGY_GROUP, 16);
        a.actorder = MOEQ_ACTORDER_WEIGHT;
        rt_add(sym ? "pack int4 g16 actorder weight sym" : "pack int4 g16 actorder weight asym",
               MOEQ_FORMAT_PACK_QUANTIZED, a, 16, 64, 0);
    }
    rt_add("int-q int8 channel sym", MOEQ_FORMAT_INT_QUANTIZED,
           qargs(MOEQ_QTYPE_INT, 8, 1, MOEQ_STRATEGY_CHANNEL, 0), 32, 64, 0);
    rt_add("int-q int8 tensor asym", MOEQ_FORMAT_INT_QUANTIZED,
           qargs(MOEQ_QTYPE_INT, 8, 0, MOEQ_STRATEGY_TENSOR, 0), 8, 48, 0);
    rt_add("int-q int4 g128 sym", MOEQ_FORMAT_INT_QUANTIZED,
           qargs(MOEQ_QTYPE_INT, 4, 1, MOEQ_STRATEGY_GROUP, 128), 16, 256, 0);
    rt_add("int-q int4 g32 asym", MOEQ_FORMAT_INT_QUANTIZED,
           qargs(MOEQ_QTYPE_INT, 4, 0, MOEQ_STRATEGY_GROUP, 32), 16, 96, 0);
    moeq_quant_args ao = qargs(MOEQ_QTYPE_INT, 4, 1, MOEQ_STRATEGY_GROUP, 32);
    ao.actorder = MOEQ_ACTORDER_DYNAMIC;
    rt_add("naive int4 g32 actorder(dynamic) sym", MOEQ_FORMAT_NAIVE_QUANTIZED, ao, 16, 96, 1);
    rt_add("naive int8 block asym", MOEQ_FORMAT_NAIVE_QUANTIZED,
           (moeq_quant_args){8, MOEQ_QTYPE_INT, 0, 0, MOEQ_STRATEGY_BLOCK, 1, 8, 16, 0, 0,
                             MOEQ_DTYPE_INVALID, MOEQ_DTYPE_I8, "memoryless_minmax"},
           20, 40, 0);
    static const int32_t fstrat[] = {MOEQ_STRATEGY_TENSOR, MOEQ_STRATEGY_CHANNEL,
                                     MOEQ_STRATEGY_GROUP, MOEQ_STRATEGY_BLOCK};
    for (size_t s = 0; s < 4; s++) {
        moeq_quant_args a =
            qargs(MOEQ_QTYPE_FLOAT, 8, 1, fstrat[s], fstrat[s] == MOEQ_STRATEGY_GROUP ? 32 : 0);
        if (fstrat[s] == MOEQ_STRATEGY_BLOCK) a.block_rows = 16, a.block_cols = 32;
        snprintf(name, sizeof name, "float-q fp8 %s", moeq_strategy_name(fstrat[s]));
        rt_add(name, MOEQ_FORMAT_FLOAT_QUANTIZED, a, 40,
               72 + (fstrat[s] == MOEQ_STRATEGY_GROUP) * 24, 0);
    }
    rt_add("naive fp8 channel", MOEQ_FORMAT_NAIVE_QUANTIZED,
           qargs(MOEQ_QTYPE_FLOAT, 8, 1, MOEQ_STRATEGY_CHANNEL, 0), 16, 64, 0);
    for (int k = 0; k < 3; k++) {
        moeq_quant_args a = qargs(MOEQ_QTYPE_FLOAT, 4, 1, MOEQ_STRATEGY_TENSOR_GROUP, 16);
        a.scale_dtype = MOEQ_DTYPE_F8_E4M3;
        a.zp_dtype = MOEQ_DTYPE_INVALID;
        rt_add("nvfp4", MOEQ_FORMAT_NVFP4_PACK_QUANTIZED, a, 16 + 8 * (size_t)k, 64, 0);
        a = qargs(MOEQ_QTYPE_FLOAT, 4, 1, MOEQ_STRATEGY_GROUP, 32);
        a.scale_dtype = MOEQ_DTYPE_U8;
        rt_add("mxfp4", MOEQ_FORMAT_MXFP4_PACK_QUANTIZED, a, 16, 128, 0);
        a.num_bits = 8;
        rt_add("mxfp8", MOEQ_FORMAT_MXFP8_QUANTIZED, a, 8, 64, 0);
    }
    rt_add("dense", MOEQ_FORMAT_DENSE, qargs(MOEQ_QTYPE_INT, 4, 1, MOEQ_STRATEGY_GROUP, 32), 8, 64,
           0);
    rt_add("fakequant", MOEQ_FORMAT_FAKEQUANT, qargs(MOEQ_QTYPE_INT, 4, 1, MOEQ_STRATEGY_GROUP, 32),
           8, 32, 0);
}

START_TEST(test_round_trip_count) {
    ck_assert_int_lt(n_rt, MAX_RT);
    ck_assert_int_ge(n_rt, 60);
}
END_TEST

START_TEST(test_round_trip) {
    const rt_case *c = &rt[_i];
    float *w = random_weight(c->rows, c->cols, (uint64_t)_i + 1);
    int32_t *g_idx =
        c->g_idx ? random_g_idx(c->cols, (size_t)c->args.group_size, (uint64_t)_i) : NULL;
    moeq_tensor_set *set = NULL;
    moeq_error err;
    ck_assert_ok(moeq_compress(&c->args, c->format, MODULE, w, (int64_t)c->rows, (int64_t)c->cols,
                               c->dtype, g_idx, 0.0f, &set, &err),
                 &err);
    const uint32_t n = moeq_tensor_set_count(set);
    float *out = malloc(c->rows * c->cols * sizeof *out);
    int64_t shape[2];
    ck_assert_ok(moeq_dequantize(&c->args, c->format, 0, MODULE, moeq_tensor_set_get(set, 0), n,
                                 MOEQ_DTYPE_F32, out, c->rows * c->cols * sizeof *out, shape, &err),
                 &err);
    ck_assert_int_eq(shape[0], (int64_t)c->rows);
    ck_assert_int_eq(shape[1], (int64_t)c->cols);
    if (c->format == MOEQ_FORMAT_DENSE || c->format == MOEQ_FORMAT_FAKEQUANT) {
        ck_assert_uint_eq(n, 1);
        for (size_t i = 0; i < c->rows * c->cols; i++) {
            if (out[i] != moeq__round_to_dtype(c->dtype, w[i]))
                ck_abort_msg("%s: element %zu", c->name, i);
        }
    } else {
        /* the scale grid as the reader decodes it, for the step of each element */
        moeq__ct_weight cw;
        ck_assert_ok(moeq__ct_weight_build(&c->args, c->format, 0, MODULE,
                                           moeq_tensor_set_get(set, 0), n, &cw, &err),
                     &err);
        const moeq__qweight *q = &cw.qw;
        double worst = 0.0;
        for (size_t r = 0; r < c->rows; r++) {
            for (size_t col = 0; col < c->cols; col++) {
                const size_t gc = q->g_idx ? (size_t)q->g_idx[col] : col / q->grid.col_block;
                const size_t cell = (r / q->grid.row_block) * q->grid.cols + gc;
                const double s = q->scale[cell];
                const double x = moeq__round_to_dtype(c->dtype, w[r * c->cols + col]);
                const double v = x / s + (q->zero_point ? q->zero_point[cell] : 0.0);
                const double e = fabs(out[r * c->cols + col] - x);
                const double tol = moeq_test_tolerance(&c->args, c->dtype, v, s);
                if (!(e <= tol)) { /* no ck_assert per element: each one writes to Check's log */
                    ck_abort_msg(
                        "%s: [%zu, %zu] = %.9g dequantizes to %.9g (scale %.6g, error %.3g "
                        "steps > %.3g)",
                        c->name, r, col, x, (double)out[r * c->cols + col], s, e / s, tol / s);
                }
                if (s > 0 && e / s > worst) worst = e / s;
            }
        }
        ck_assert(worst > 0.0); /* the weights really were quantized */
        moeq__ct_weight_free(&cw);
    }
    /* g_idx is stored exactly when actorder is group */
    char name[200];
    snprintf(name, sizeof name, "%s.weight_g_idx", MODULE);
    const moeq_tensor *gt = moeq_tensor_set_find(set, name);
    const bool want_gidx = moeq_actorder_is_group(c->args.actorder) &&
                           c->format != MOEQ_FORMAT_DENSE && c->format != MOEQ_FORMAT_FAKEQUANT;
    ck_assert_int_eq(gt != NULL, want_gidx);
    if (gt) {
        for (size_t col = 0; col < c->cols; col++) {
            if (((const int32_t *)gt->data)[col] != (g_idx ? g_idx[col] : -1))
                ck_abort_msg("g_idx[%zu]", col);
        }
    }
    moeq_tensor_set_destroy(set);
    free(out);
    free(w);
    free(g_idx);
}
END_TEST

/* Which tensors each format stores, with dtypes and shapes (24 x 128 weight). */
START_TEST(test_stored_tensors) {
    static const struct {
        int32_t format;
        int32_t type, bits, sym, strategy, gs;
        int32_t scale_dtype;
        const char *want; /* "param:DTYPE[shape]" separated by spaces, in set order */
    } cases[] = {
        {MOEQ_FORMAT_PACK_QUANTIZED, MOEQ_QTYPE_INT, 4, 1, MOEQ_STRATEGY_GROUP, 32, 0,
         "weight_packed:I32[24,16] weight_scale:BF16[24,4] weight_shape:I64[2]"},
        {MOEQ_FORMAT_PACK_QUANTIZED, MOEQ_QTYPE_INT, 4, 0, MOEQ_STRATEGY_GROUP, 32, 0,
         "weight_packed:I32[24,16] weight_scale:BF16[24,4] weight_zero_point:I32[3,4] "
         "weight_shape:I64[2]"},
        {MOEQ_FORMAT_PACK_QUANTIZED, MOEQ_QTYPE_INT, 3, 0, MOEQ_STRATEGY_CHANNEL, 0, 0,
         "weight_packed:I32[24,12] weight_scale:BF16[24,1] weight_zero_point:I32[3,1] "
         "weight_shape:I64[2]"},
        {MOEQ_FORMAT_PACK_QUANTIZED, MOEQ_QTYPE_INT, 8, 0, MOEQ_STRATEGY_TENSOR, 0, 0,
         "weight_packed:I32[24,32] weight_scale:BF16[1] weight_zero_point:I8[1] "
         "weight_shape:I64[2]"},
        {MOEQ_FORMAT_INT_QUANTIZED, MOEQ_QTYPE_INT, 4, 0, MOEQ_STRATEGY_GROUP, 64, 0,
         "weight:I8[24,128] weight_scale:BF16[24,2] weight_zero_point:I8[24,2]"},
        {MOEQ_FORMAT_FLOAT_QUANTIZED, MOEQ_QTYPE_FLOAT, 8, 1, MOEQ_STRATEGY_CHANNEL, 0, 0,
         "weight:F8_E4M3[24,128] weight_scale:BF16[24,1]"},
        {MOEQ_FORMAT_NVFP4_PACK_QUANTIZED, MOEQ_QTYPE_FLOAT, 4, 1, MOEQ_STRATEGY_TENSOR_GROUP, 16,
         MOEQ_DTYPE_F8_E4M3,
         "weight_packed:U8[24,64] weight_scale:F8_E4M3[24,8] weight_global_scale:F32[1]"},
        {MOEQ_FORMAT_MXFP4_PACK_QUANTIZED, MOEQ_QTYPE_FLOAT, 4, 1, MOEQ_STRATEGY_GROUP, 32,
         MOEQ_DTYPE_U8, "weight_packed:U8[24,64] weight_scale:U8[24,4]"},
        {MOEQ_FORMAT_MXFP8_QUANTIZED, MOEQ_QTYPE_FLOAT, 8, 1, MOEQ_STRATEGY_GROUP, 32,
         MOEQ_DTYPE_U8, "weight:F8_E4M3[24,128] weight_scale:U8[24,4]"},
        {MOEQ_FORMAT_DENSE, MOEQ_QTYPE_INT, 4, 1, MOEQ_STRATEGY_GROUP, 32, 0,
         "weight:BF16[24,128]"},
    };
    float *w = random_weight(24, 128, 5);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        moeq_quant_args a =
            qargs(cases[k].type, cases[k].bits, cases[k].sym, cases[k].strategy, cases[k].gs);
        a.scale_dtype = cases[k].scale_dtype;
        moeq_tensor_set *set = NULL;
        moeq_error err;
        ck_assert_ok(moeq_compress(&a, cases[k].format, "m", w, 24, 128, MOEQ_DTYPE_BF16, NULL,
                                   0.0f, &set, &err),
                     &err);
        char got[512] = "";
        size_t len = 0;
        for (uint32_t i = 0; i < moeq_tensor_set_count(set); i++) {
            const moeq_tensor *t = moeq_tensor_set_get(set, i);
            ck_assert_str_eq(t->file ? "file" : "", "");
            len += (size_t)snprintf(got + len, sizeof got - len, "%s%s:%s[", i ? " " : "",
                                    t->name + 2, moeq_dtype_name(t->dtype));
            for (int32_t d = 0; d < t->ndim; d++) {
                len += (size_t)snprintf(got + len, sizeof got - len, "%s%lld", d ? "," : "",
                                        (long long)t->shape[d]);
            }
            len += (size_t)snprintf(got + len, sizeof got - len, "]");
        }
        ck_assert_msg(strcmp(got, cases[k].want) == 0, "case %zu: got %s, want %s", k, got,
                      cases[k].want);
        moeq_tensor_set_destroy(set);
    }
    free(w);
}
END_TEST

/* Two modules into one set; the weight_shape holds [rows, cols]. */
START_TEST(test_set_accumulates) {
    float *w = random_weight(8, 64, 9);
    const moeq_quant_args a = qargs(MOEQ_QTYPE_INT, 4, 1, MOEQ_STRATEGY_GROUP, 32);
    moeq_tensor_set *set = NULL;
    moeq_error err;
    ck_assert_ok(moeq_compress(&a, MOEQ_FORMAT_PACK_QUANTIZED, "a.gate_proj", w, 8, 64,
                               MOEQ_DTYPE_BF16, NULL, 0.0f, &set, &err),
                 &err);
    ck_assert_ok(moeq_compress(&a, MOEQ_FORMAT_PACK_QUANTIZED, "a.up_proj", w, 4, 128,
                               MOEQ_DTYPE_BF16, NULL, 0.0f, &set, &err),
                 &err);
    ck_assert_uint_eq(moeq_tensor_set_count(set), 6);
    const moeq_tensor *t = moeq_tensor_set_find(set, "a.up_proj.weight_shape");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(((const int64_t *)t->data)[0], 4);
    ck_assert_int_eq(((const int64_t *)t->data)[1], 128);
    ck_assert_ptr_eq(moeq_tensor_set_get(set, 0) + 5, moeq_tensor_set_get(set, 5));
    ck_assert_ptr_null(moeq_tensor_set_get(set, 6));
    ck_assert_ptr_null(moeq_tensor_set_find(set, "a.up_proj"));
    /* the same module again: refused, the set unchanged */
    ck_assert_status(moeq_compress(&a, MOEQ_FORMAT_PACK_QUANTIZED, "a.up_proj", w, 4, 128,
                                   MOEQ_DTYPE_BF16, NULL, 0.0f, &set, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_ptr_nonnull(
        strstr(err.message, "a.up_proj.weight_packed: a tensor of that name is already"));
    ck_assert_uint_eq(moeq_tensor_set_count(set), 6);
    /* and it still finds everything after the failed attempt */
    ck_assert_ptr_nonnull(moeq_tensor_set_find(set, "a.gate_proj.weight_scale"));
    moeq_tensor_set_destroy(set);
    free(w);
}
END_TEST

/* NVFP4: a given global scale is used as is (fused gate/up share one). */
START_TEST(test_nvfp4_shared_global) {
    float *gate = random_weight(16, 64, 11);
    float *up = random_weight(16, 64, 12);
    up[5] = 0.9f; /* up holds the larger amax */
    moeq_quant_args a = qargs(MOEQ_QTYPE_FLOAT, 4, 1, MOEQ_STRATEGY_TENSOR_GROUP, 16);
    a.scale_dtype = MOEQ_DTYPE_F8_E4M3;
    float amax = 0.0f;
    for (size_t i = 0; i < 16 * 64; i++) {
        amax = fmaxf(amax, fmaxf(fabsf(moeq__round_to_dtype(MOEQ_DTYPE_BF16, gate[i])),
                                 fabsf(moeq__round_to_dtype(MOEQ_DTYPE_BF16, up[i]))));
    }
    const float global = moeq_nvfp4_global_scale(amax, MOEQ_DTYPE_BF16);
    moeq_tensor_set *set = NULL;
    moeq_error err;
    ck_assert_ok(moeq_compress(&a, MOEQ_FORMAT_NVFP4_PACK_QUANTIZED, "e.gate_proj", gate, 16, 64,
                               MOEQ_DTYPE_BF16, NULL, global, &set, &err),
                 &err);
    ck_assert_ok(moeq_compress(&a, MOEQ_FORMAT_NVFP4_PACK_QUANTIZED, "e.up_proj", up, 16, 64,
                               MOEQ_DTYPE_BF16, NULL, 0.0f, &set, &err),
                 &err);
    float g1, g2;
    memcpy(&g1, moeq_tensor_set_find(set, "e.gate_proj.weight_global_scale")->data, 4);
    memcpy(&g2, moeq_tensor_set_find(set, "e.up_proj.weight_global_scale")->data, 4);
    ck_assert_float_eq(g1, global);
    ck_assert_float_eq(g2, global); /* up's own amax is the union's */
    moeq_tensor_set_destroy(set);
    free(gate);
    free(up);
}
END_TEST

/* ---- 3. activations and the global scale --------------------------------------------- */

START_TEST(test_global_scale_values) {
    /* spec §3.6's example, as compressed-tensors computes it: 2688 * f32(1 / 2.9) */
    ck_assert_float_eq(moeq_nvfp4_global_scale(2.9f, MOEQ_DTYPE_F32), 926.896484375f);
    ck_assert_float_eq(moeq_nvfp4_global_scale(0.55078125f, MOEQ_DTYPE_BF16), 4864.0f);
    ck_assert_float_eq(moeq_nvfp4_global_scale(NAN, MOEQ_DTYPE_BF16), 1.0f);
    ck_assert_float_eq(moeq_nvfp4_global_scale(0.0f, MOEQ_DTYPE_F32), 1.0f); /* 2688/tiny = inf */
    ck_assert_float_eq(moeq_nvfp4_global_scale(7.0f, MOEQ_DTYPE_BF16), 384.0f);
    ck_assert_float_eq(moeq_nvfp4_global_scale(1.0f, MOEQ_DTYPE_I8), 0.0f);
}
END_TEST

static float tensor_f32(const moeq_tensor *t) {
    float v;
    moeq__to_f32_ref(t->dtype, t->data, 1, &v);
    return v;
}

START_TEST(test_input_tensors) {
    /* spec §4.4's FP8 row: amax 3.5 -> 3.5 / 448 = 0.0078125 */
    const float x[8] = {0.5f, -1.75f, 0.0078125f, 3.5f, 0, 1, -2, 0.25f};
    moeq_quant_args fp8 = qargs(MOEQ_QTYPE_FLOAT, 8, 1, MOEQ_STRATEGY_TENSOR, 0);
    fp8.observer = "static_minmax";
    moeq_tensor_set *set = NULL;
    moeq_error err;
    ck_assert_ok(moeq_compress_input(&fp8, "l.q_proj", x, 2, 4, MOEQ_DTYPE_BF16, &set, &err), &err);
    const moeq_tensor *t = moeq_tensor_set_find(set, "l.q_proj.input_scale");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, MOEQ_DTYPE_BF16);
    ck_assert_int_eq(t->ndim, 1);
    ck_assert_int_eq(t->shape[0], 1);
    ck_assert_float_eq(tensor_f32(t), 0.0078125f);
    /* int8 symmetric: amax / 127.5, in F32 */
    moeq_quant_args i8 = qargs(MOEQ_QTYPE_INT, 8, 1, MOEQ_STRATEGY_TENSOR, 0);
    ck_assert_ok(moeq_compress_input(&i8, "l.k_proj", x, 2, 4, MOEQ_DTYPE_F32, &set, &err), &err);
    ck_assert_float_eq(tensor_f32(moeq_tensor_set_find(set, "l.k_proj.input_scale")),
                       3.5f / 127.5f);
    ck_assert_ptr_null(moeq_tensor_set_find(set, "l.k_proj.input_zero_point"));
    /* int8 asymmetric: (max - min) / 255 = 5.5 / 255, zp = -128 - (-2 / s) = -35.27 -> -35 */
    i8.symmetric = 0;
    i8.zp_dtype = MOEQ_DTYPE_I8;
    ck_assert_ok(moeq_compress_input(&i8, "l.v_proj", x, 2, 4, MOEQ_DTYPE_F32, &set, &err), &err);
    ck_assert_float_eq(tensor_f32(moeq_tensor_set_find(set, "l.v_proj.input_scale")),
                       5.5f / 255.0f);
    t = moeq_tensor_set_find(set, "l.v_proj.input_zero_point");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, MOEQ_DTYPE_I8);
    ck_assert_int_eq(((const int8_t *)t->data)[0], -35);
    /* NVFP4 "local": input_global_scale = 2688 / 3.5 = 768 */
    moeq_quant_args nv = qargs(MOEQ_QTYPE_FLOAT, 4, 1, MOEQ_STRATEGY_TENSOR_GROUP, 16);
    nv.dynamic = MOEQ_DYNAMIC_LOCAL;
    nv.scale_dtype = MOEQ_DTYPE_F8_E4M3;
    ck_assert_ok(moeq_compress_input(&nv, "l.o_proj", x, 2, 4, MOEQ_DTYPE_BF16, &set, &err), &err);
    t = moeq_tensor_set_find(set, "l.o_proj.input_global_scale");
    ck_assert_int_eq(t->dtype, MOEQ_DTYPE_F32);
    ck_assert_float_eq(tensor_f32(t), 768.0f);
    ck_assert_uint_eq(moeq_tensor_set_count(set), 5);
    /* dynamic inputs and no input args store nothing (x may be NULL) */
    moeq_quant_args dyn = qargs(MOEQ_QTYPE_FLOAT, 8, 1, MOEQ_STRATEGY_TOKEN, 0);
    dyn.dynamic = MOEQ_DYNAMIC_TRUE;
    ck_assert_ok(moeq_compress_input(&dyn, "l.x", NULL, 0, 0, MOEQ_DTYPE_BF16, &set, &err), &err);
    ck_assert_ok(moeq_compress_input(NULL, "l.x", NULL, 0, 0, MOEQ_DTYPE_BF16, &set, &err), &err);
    ck_assert_uint_eq(moeq_tensor_set_count(set), 5);
    moeq_tensor_set *none = NULL;
    ck_assert_ok(moeq_compress_input(NULL, "l.x", NULL, 0, 0, MOEQ_DTYPE_BF16, &none, &err), &err);
    ck_assert_ptr_null(none);
    /* an all-zero batch: eps scale (bf16 eps = 2^-7) */
    const float zeros[4] = {0, 0, 0, 0};
    ck_assert_ok(moeq_compress_input(&fp8, "z", zeros, 1, 4, MOEQ_DTYPE_BF16, &set, &err), &err);
    ck_assert_float_eq(tensor_f32(moeq_tensor_set_find(set, "z.input_scale")), 0.0078125f);
    moeq_tensor_set_destroy(set);
}
END_TEST

/* ---- 4. bad inputs ---------------------------------------------------------------------- */

typedef struct bad_case {
    const char *what;
    moeq_status status;
    const char *message; /* substring */
} bad_case;

/* Mutations of a valid pack-quantized int4 g32 call. */
typedef struct call {
    moeq_quant_args args;
    const moeq_quant_args *argsp;
    int32_t format;
    const char *module;
    const float *weight;
    int64_t rows, cols;
    int32_t dtype;
    const int32_t *g_idx;
    float global;
    moeq_tensor_set **setp;
} call;

static float g_w[16 * 96];
static int32_t g_bad_gidx[96];

static call base_call(moeq_tensor_set **set) {
    call c;
    memset(&c, 0, sizeof c);
    c.args = qargs(MOEQ_QTYPE_INT, 4, 1, MOEQ_STRATEGY_GROUP, 32);
    c.format = MOEQ_FORMAT_PACK_QUANTIZED;
    c.module = MODULE;
    c.weight = g_w;
    c.rows = 16;
    c.cols = 96;
    c.dtype = MOEQ_DTYPE_BF16;
    c.setp = set;
    return c;
}

static const bad_case k_bad[] = {
    {"module NULL", MOEQ_STATUS_INVALID_ARG, "moeq_compress: module is NULL"},
    {"module empty", MOEQ_STATUS_INVALID_ARG, "moeq_compress: module is empty"},
    {"set NULL", MOEQ_STATUS_INVALID_ARG, MODULE ": set is NULL"},
    {"weight NULL", MOEQ_STATUS_INVALID_ARG, MODULE ": weight is NULL"},
    {"rows 0", MOEQ_STATUS_INVALID_ARG, "rows 0 and cols 96; both must be >= 1"},
    {"cols negative", MOEQ_STATUS_INVALID_ARG, "rows 16 and cols -4"},
    {"size overflows", MOEQ_STATUS_SHAPE, "[4611686018427387904, 96] is too large"},
    {"dtype I8", MOEQ_STATUS_INVALID_ARG, "dtype I8 (7); expected F32, BF16 or F16"},
    {"NaN weight", MOEQ_STATUS_INVALID_ARG, MODULE ": weight[3, 7] = nan; values must be finite"},
    {"inf weight", MOEQ_STATUS_INVALID_ARG, MODULE ": weight[0, 95] = -inf"},
    {"F16 overflow", MOEQ_STATUS_INVALID_ARG,
     "weight[1, 2] = 70000 overflows F16 (its largest finite value is 65504)"},
    {"format NONE", MOEQ_STATUS_INVALID_ARG, "no compression format given"},
    {"mixed-precision", MOEQ_STATUS_INVALID_ARG, "mixed-precision is a top-level format"},
    {"sparse", MOEQ_STATUS_UNSUPPORTED, "moeq does not write format 'sparse-bitmask'"},
    {"args NULL", MOEQ_STATUS_INVALID_ARG,
     "format pack-quantized needs the weight quantization args, got NULL"},
    {"pack float", MOEQ_STATUS_UNSUPPORTED, "must be int (pack-quantized packs integers)"},
    {"pack 9 bits", MOEQ_STATUS_UNSUPPORTED, "must be int with 1..8 bits"},
    {"group not dividing", MOEQ_STATUS_SHAPE, "cols 96 is not a multiple of group_size 64"},
    {"group size 0", MOEQ_STATUS_INVALID_ARG, "strategy group with group_size 0"},
    {"block 0", MOEQ_STATUS_INVALID_ARG, "block_structure [0, 32]; expected positive sizes"},
    {"token weights", MOEQ_STATUS_UNSUPPORTED, "have no weight scale layout for this strategy"},
    {"dynamic weights", MOEQ_STATUS_UNSUPPORTED, "are dynamic; stored weights are static"},
    {"scale dtype F32", MOEQ_STATUS_UNSUPPORTED,
     "have scale_dtype F32; moeq writes int and FP8 scales in the weight dtype (BF16)"},
    {"g_idx without actorder", MOEQ_STATUS_INVALID_ARG, "g_idx given but actorder is none"},
    {"g_idx out of range", MOEQ_STATUS_INVALID_ARG,
     "g_idx[5] = 3; expected a group index in [0, 3)"},
    {"g_idx uneven groups", MOEQ_STATUS_INVALID_ARG,
     "g_idx gives group 0 33 columns; actorder needs exactly group_size (32)"},
    {"actorder channel", MOEQ_STATUS_UNSUPPORTED, "use actorder group without the group strategy"},
    {"global for int", MOEQ_STATUS_INVALID_ARG, "global_scale 2 given for format pack-quantized"},
    {"fp8 asym", MOEQ_STATUS_UNSUPPORTED, "are asymmetric FP8"},
    {"fp8 actorder", MOEQ_STATUS_UNSUPPORTED, "use actorder group with FP8"},
    {"nvfp4 int", MOEQ_STATUS_UNSUPPORTED, "nvfp4-pack-quantized weights (int4 group(32)"},
    {"nvfp4 no scale dtype", MOEQ_STATUS_UNSUPPORTED, "need scale_dtype torch.float8_e4m3fn"},
    {"nvfp4 group strategy", MOEQ_STATUS_UNSUPPORTED, "need strategy tensor_group"},
    {"nvfp4 odd cols", MOEQ_STATUS_SHAPE, "cols 97 is odd; FP4 packs two columns per byte"},
    {"nvfp4 negative global", MOEQ_STATUS_INVALID_ARG,
     "global_scale -1; expected 0 (compute it) or a positive finite value"},
    {"nvfp4 actorder", MOEQ_STATUS_UNSUPPORTED, "quantizes in column order"},
    {"mxfp4 group 16", MOEQ_STATUS_UNSUPPORTED, "need strategy group with group_size 32"},
    {"mxfp4 no scale dtype", MOEQ_STATUS_UNSUPPORTED, "need scale_dtype torch.uint8"},
    {"mxfp8 4 bits", MOEQ_STATUS_UNSUPPORTED, "must be float with 8 bits"},
    {"dense g_idx", MOEQ_STATUS_INVALID_ARG, "g_idx given for format dense"},
};

static void mutate(call *c, const char *what) {
    if (!strcmp(what, "module NULL"))
        c->module = NULL;
    else if (!strcmp(what, "module empty"))
        c->module = "";
    else if (!strcmp(what, "set NULL"))
        c->setp = NULL;
    else if (!strcmp(what, "weight NULL"))
        c->weight = NULL;
    else if (!strcmp(what, "rows 0"))
        c->rows = 0;
    else if (!strcmp(what, "cols negative"))
        c->cols = -4;
    else if (!strcmp(what, "size overflows"))
        c->rows = (int64_t)1 << 62;
    else if (!strcmp(what, "dtype I8"))
        c->dtype = MOEQ_DTYPE_I8;
    else if (!strcmp(what, "NaN weight"))
        g_w[3 * 96 + 7] = NAN;
    else if (!strcmp(what, "inf weight"))
        g_w[95] = -INFINITY;
    else if (!strcmp(what, "F16 overflow"))
        c->dtype = MOEQ_DTYPE_F16, g_w[96 + 2] = 70000.0f;
    else if (!strcmp(what, "format NONE"))
        c->format = MOEQ_FORMAT_NONE;
    else if (!strcmp(what, "mixed-precision"))
        c->format = MOEQ_FORMAT_MIXED_PRECISION;
    else if (!strcmp(what, "sparse"))
        c->format = MOEQ_FORMAT_SPARSE_BITMASK;
    else if (!strcmp(what, "args NULL"))
        c->argsp = NULL;
    else if (!strcmp(what, "pack float"))
        c->args.type = MOEQ_QTYPE_FLOAT, c->args.num_bits = 8;
    else if (!strcmp(what, "pack 9 bits"))
        c->args.num_bits = 9;
    else if (!strcmp(what, "group not dividing"))
        c->args.group_size = 64;
    else if (!strcmp(what, "group size 0"))
        c->args.group_size = 0;
    else if (!strcmp(what, "block 0"))
        c->args.strategy = MOEQ_STRATEGY_BLOCK, c->args.block_cols = 32;
    else if (!strcmp(what, "token weights"))
        c->args.strategy = MOEQ_STRATEGY_TOKEN;
    else if (!strcmp(what, "dynamic weights"))
        c->args.dynamic = MOEQ_DYNAMIC_TRUE;
    else if (!strcmp(what, "scale dtype F32"))
        c->args.scale_dtype = MOEQ_DTYPE_F32;
    else if (!strcmp(what, "g_idx without actorder"))
        c->g_idx = g_bad_gidx;
    else if (!strcmp(what, "g_idx out of range")) {
        c->args.actorder = MOEQ_ACTORDER_GROUP;
        g_bad_gidx[5] = 3;
        c->g_idx = g_bad_gidx;
    } else if (!strcmp(what, "g_idx uneven groups")) {
        c->args.actorder = MOEQ_ACTORDER_GROUP;
        g_bad_gidx[40] = 0;
        c->g_idx = g_bad_gidx;
    } else if (!strcmp(what, "actorder channel")) {
        c->args.actorder = MOEQ_ACTORDER_GROUP;
        c->args.strategy = MOEQ_STRATEGY_CHANNEL;
    } else if (!strcmp(what, "global for int"))
        c->global = 2.0f;
    else if (!strcmp(what, "fp8 asym")) {
        c->format = MOEQ_FORMAT_FLOAT_QUANTIZED;
        c->args = qargs(MOEQ_QTYPE_FLOAT, 8, 0, MOEQ_STRATEGY_CHANNEL, 0);
    } else if (!strcmp(what, "fp8 actorder")) {
        c->format = MOEQ_FORMAT_FLOAT_QUANTIZED;
        c->args = qargs(MOEQ_QTYPE_FLOAT, 8, 1, MOEQ_STRATEGY_GROUP, 32);
        c->args.actorder = MOEQ_ACTORDER_GROUP;
    } else if (!strncmp(what, "nvfp4", 5)) {
        c->format = MOEQ_FORMAT_NVFP4_PACK_QUANTIZED;
        if (strcmp(what, "nvfp4 int") != 0) {
            c->args = qargs(MOEQ_QTYPE_FLOAT, 4, 1, MOEQ_STRATEGY_TENSOR_GROUP, 16);
            c->args.scale_dtype = MOEQ_DTYPE_F8_E4M3;
        }
        if (!strcmp(what, "nvfp4 no scale dtype")) c->args.scale_dtype = MOEQ_DTYPE_INVALID;
        if (!strcmp(what, "nvfp4 group strategy")) c->args.strategy = MOEQ_STRATEGY_GROUP;
        if (!strcmp(what, "nvfp4 odd cols")) c->args.group_size = 1, c->cols = 97, c->rows = 15;
        if (!strcmp(what, "nvfp4 negative global")) c->global = -1.0f;
        if (!strcmp(what, "nvfp4 actorder")) c->args.actorder = MOEQ_ACTORDER_GROUP;
    } else if (!strncmp(what, "mxfp", 4)) {
        c->format =
            strstr(what, "mxfp8") ? MOEQ_FORMAT_MXFP8_QUANTIZED : MOEQ_FORMAT_MXFP4_PACK_QUANTIZED;
        c->args = qargs(MOEQ_QTYPE_FLOAT, 4, 1, MOEQ_STRATEGY_GROUP, 32);
        c->args.scale_dtype = MOEQ_DTYPE_U8;
        if (!strcmp(what, "mxfp4 group 16")) c->args.group_size = 16;
        if (!strcmp(what, "mxfp4 no scale dtype")) c->args.scale_dtype = MOEQ_DTYPE_INVALID;
    } else if (!strcmp(what, "dense g_idx")) {
        c->format = MOEQ_FORMAT_DENSE;
        c->g_idx = g_bad_gidx;
    } else {
        ck_abort_msg("no mutation '%s'", what);
    }
}

START_TEST(test_bad_inputs) {
    const bad_case *b = &k_bad[_i];
    for (size_t i = 0; i < 16 * 96; i++) g_w[i] = 0.01f * (float)((int)(i % 37) - 18);
    for (size_t i = 0; i < 96; i++) g_bad_gidx[i] = (int32_t)(i / 32);
    /* a set that already holds something: a failure must leave it as it was */
    moeq_tensor_set *set = NULL;
    moeq_error err;
    const moeq_tensor keep = {"keep", MOEQ_DTYPE_F32, 1, {1}, g_w, 4, NULL};
    ck_assert_ok(moeq_tensor_set_add(&set, &keep, &err), &err);
    call c = base_call(&set);
    c.argsp = &c.args;
    mutate(&c, b->what);
    moeq_error_clear(&err);
    const moeq_status st = moeq_compress(c.argsp, c.format, c.module, c.weight, c.rows, c.cols,
                                         c.dtype, c.g_idx, c.global, c.setp, &err);
    ck_assert_msg(st == b->status, "%s: status %s, want %s (%s)", b->what, moeq_status_name(st),
                  moeq_status_name(b->status), err.message);
    ck_assert_msg(strstr(err.message, b->message) != NULL, "%s: message '%s' lacks '%s'", b->what,
                  err.message, b->message);
    ck_assert_uint_eq(moeq_tensor_set_count(set), 1);
    ck_assert_ptr_nonnull(moeq_tensor_set_find(set, "keep"));
    moeq_tensor_set_destroy(set);
    /* and a NULL set stays NULL */
    if (c.setp) {
        moeq_tensor_set *none = NULL;
        c.setp = &none;
        ck_assert_int_eq(moeq_compress(c.argsp, c.format, c.module, c.weight, c.rows, c.cols,
                                       c.dtype, c.g_idx, c.global, c.setp, NULL),
                         b->status);
        ck_assert_ptr_null(none);
    }
}
END_TEST

START_TEST(test_bad_input_args) {
    const float x[4] = {1, 2, 3, NAN};
    moeq_quant_args fp8 = qargs(MOEQ_QTYPE_FLOAT, 8, 1, MOEQ_STRATEGY_TENSOR, 0);
    moeq_tensor_set *set = NULL;
    moeq_error err;
    ck_assert_status(moeq_compress_input(&fp8, "m", x, 1, 4, MOEQ_DTYPE_BF16, &set, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_str_eq(err.message, "m: x[0, 3] = nan; values must be finite");
    ck_assert_status(moeq_compress_input(&fp8, "m", NULL, 1, 4, MOEQ_DTYPE_BF16, &set, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_str_eq(err.message, "m: x is NULL");
    ck_assert_status(moeq_compress_input(&fp8, "m", x, 0, 4, MOEQ_DTYPE_BF16, &set, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "tokens 0 and cols 4"));
    ck_assert_status(moeq_compress_input(&fp8, NULL, x, 1, 4, MOEQ_DTYPE_BF16, &set, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_status(moeq_compress_input(&fp8, "m", x, 1, 3, MOEQ_DTYPE_BF16, NULL, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_str_eq(err.message, "m: set is NULL");
    moeq_quant_args grp = qargs(MOEQ_QTYPE_FLOAT, 8, 1, MOEQ_STRATEGY_GROUP, 128);
    ck_assert_status(moeq_compress_input(&grp, "m", x, 1, 3, MOEQ_DTYPE_BF16, &set, &err),
                     MOEQ_STATUS_UNSUPPORTED, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "m: input activations (float8 group(128)"));
    moeq_quant_args loc = qargs(MOEQ_QTYPE_FLOAT, 8, 1, MOEQ_STRATEGY_TENSOR_GROUP, 16);
    loc.dynamic = MOEQ_DYNAMIC_LOCAL;
    ck_assert_status(moeq_compress_input(&loc, "m", x, 1, 3, MOEQ_DTYPE_BF16, &set, &err),
                     MOEQ_STATUS_UNSUPPORTED, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "only for NVFP4"));
    ck_assert_ptr_null(set);
}
END_TEST

START_TEST(test_tensor_set_add) {
    moeq_tensor_set *set = NULL;
    moeq_error err;
    const float v[3] = {1, 2, 3};
    moeq_tensor t = {"a", MOEQ_DTYPE_F32, 1, {3}, v, 12, "ignored.safetensors"};
    ck_assert_ok(moeq_tensor_set_add(&set, &t, &err), &err);
    const moeq_tensor *got = moeq_tensor_set_find(set, "a");
    ck_assert_ptr_null(got->file);
    ck_assert_ptr_ne(got->data, v);
    ck_assert_mem_eq(got->data, v, 12);
    ck_assert_status(moeq_tensor_set_add(&set, &t, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_str_eq(err.message, "a: a tensor of that name is already in the set");
    t.name = "b";
    t.nbytes = 8;
    ck_assert_status(moeq_tensor_set_add(&set, &t, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_str_eq(err.message, "b: nbytes 8 does not equal shape x 4 bytes of F32");
    t.nbytes = 12;
    t.data = NULL;
    ck_assert_status(moeq_tensor_set_add(&set, &t, &err), MOEQ_STATUS_INVALID_ARG, &err);
    t.data = v;
    t.dtype = 99;
    ck_assert_status(moeq_tensor_set_add(&set, &t, &err), MOEQ_STATUS_INVALID_ARG, &err);
    t.dtype = MOEQ_DTYPE_F32;
    t.ndim = 9;
    ck_assert_status(moeq_tensor_set_add(&set, &t, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_status(moeq_tensor_set_add(NULL, &t, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_status(moeq_tensor_set_add(&set, NULL, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_status(moeq_tensor_set_create(NULL, &err), MOEQ_STATUS_INVALID_ARG, &err);
    /* a scalar and an empty tensor */
    moeq_tensor s = {"s", MOEQ_DTYPE_F32, 0, {0}, v, 4, NULL};
    ck_assert_ok(moeq_tensor_set_add(&set, &s, &err), &err);
    moeq_tensor e = {"e", MOEQ_DTYPE_F32, 1, {0}, NULL, 0, NULL};
    ck_assert_ok(moeq_tensor_set_add(&set, &e, &err), &err);
    ck_assert_ptr_nonnull(moeq_tensor_set_find(set, "e")->data);
    /* many names: the hash grows and keeps finding them */
    char name[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "t%d", i);
        s.name = name;
        ck_assert_ok(moeq_tensor_set_add(&set, &s, &err), &err);
    }
    ck_assert_uint_eq(moeq_tensor_set_count(set), 1003);
    for (int i = 0; i < 1000; i += 37) {
        snprintf(name, sizeof name, "t%d", i);
        ck_assert_str_eq(moeq_tensor_set_find(set, name)->name, name);
    }
    ck_assert_ptr_null(moeq_tensor_set_find(set, "t1000"));
    ck_assert_ptr_null(moeq_tensor_set_find(NULL, "a"));
    ck_assert_uint_eq(moeq_tensor_set_count(NULL), 0);
    ck_assert_ptr_null(moeq_tensor_set_get(NULL, 0));
    moeq_tensor_set_destroy(set);
    moeq_tensor_set_destroy(NULL);
}
END_TEST

/* Every allocation failing in turn: NOMEM, nothing appended, nothing leaked. */
START_TEST(test_out_of_memory) {
    float *w = random_weight(16, 64, 3);
    moeq_quant_args a = qargs(MOEQ_QTYPE_INT, 4, 0, MOEQ_STRATEGY_GROUP, 32);
    a.actorder = MOEQ_ACTORDER_GROUP;
    bool succeeded = false;
    for (long k = 0; k < 200 && !succeeded; k++) {
        moeq_tensor_set *set = NULL;
        moeq_error err;
        const moeq_tensor keep = {"keep", MOEQ_DTYPE_F32, 1, {1}, w, 4, NULL};
        ck_assert_ok(moeq_tensor_set_add(&set, &keep, &err), &err);
        moeq__test_fail_alloc_after(k);
        const moeq_status st = moeq_compress(&a, MOEQ_FORMAT_PACK_QUANTIZED, "m", w, 16, 64,
                                             MOEQ_DTYPE_BF16, NULL, 0.0f, &set, &err);
        moeq__test_fail_alloc_after(-1);
        if (st == MOEQ_STATUS_OK) {
            succeeded = true;
            ck_assert_uint_eq(moeq_tensor_set_count(set), 6);
        } else {
            ck_assert_status(st, MOEQ_STATUS_NOMEM, &err);
            ck_assert_uint_eq(moeq_tensor_set_count(set), 1);
        }
        moeq_tensor_set_destroy(set);
    }
    ck_assert(succeeded);
    free(w);
}
END_TEST

Suite *compress_suite(void);
Suite *compress_suite(void) {
    load_index();
    build_rt_cases();
    Suite *s = suite_create("compress");
    TCase *ct = tcase_create("ct_fixtures");
    tcase_add_loop_test(ct, test_matches_ct_fixtures, 0, n_cases > 0 ? n_cases : 1);
    suite_add_tcase(s, ct);
    TCase *r = tcase_create("round_trip");
    tcase_add_test(r, test_round_trip_count);
    tcase_add_loop_test(r, test_round_trip, 0, n_rt);
    tcase_add_test(r, test_stored_tensors);
    tcase_add_test(r, test_set_accumulates);
    tcase_add_test(r, test_nvfp4_shared_global);
    suite_add_tcase(s, r);
    TCase *in = tcase_create("inputs");
    tcase_add_test(in, test_global_scale_values);
    tcase_add_test(in, test_input_tensors);
    suite_add_tcase(s, in);
    TCase *bad = tcase_create("bad_inputs");
    tcase_add_loop_test(bad, test_bad_inputs, 0, (int)(sizeof k_bad / sizeof k_bad[0]));
    tcase_add_test(bad, test_bad_input_args);
    tcase_add_test(bad, test_tensor_set_add);
    tcase_add_test(bad, test_out_of_memory);
    suite_add_tcase(s, bad);
    return s;
}

MOEQ_TEST_MAIN(compress_suite)

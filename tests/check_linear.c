/*
 * check_linear.c - the linear layer (moeq_linear_*): every registered scheme
 * (one args set each, test_moe.h's table) on a module compressed by
 * moeq_compress, unfused and fused (q/k/v shards with their own scales), with
 * and without bias: the fast forward against the float64 reference and
 * against an independent one (moeq_dequantize's weight, the engines' input
 * quantization), bit-identical across thread counts; then the bad inputs,
 * each with its status and a message naming the layer or tensor.
 */
#include "test_moe.h"

#include <math.h>
#include <pthread.h>

#define NAME "model.layers.0.self_attn.o_proj"
#define QKV  "model.layers.0.self_attn.qkv_proj"

typedef struct lin_fixture {
    moeq_config *cfg;
    moeq_resolution res;
    moeq_linear_config lc;
    moeq_linear *layer;
    moeq_tensor_set *set; /* every tensor of the module(s) */
    float *w;             /* [out, in] the weights before compression */
    int32_t in, out;
} lin_fixture;

static const char *const k_qkv[3] = {"q_proj", "k_proj", "v_proj"};
static const int32_t k_qkv_out[3] = {32, 16, 16};

static float frand(uint32_t *s) {
    return ((float)(moeq_test_rand(s) >> 8) / 16777216.0f - 0.5f) * 2.0f;
}

/* Parses a one-group config for args `a` targeting Linear, resolves `name`,
 * selects and creates the layer (fused: the q/k/v shards of k_qkv). */
static void fixture_create(lin_fixture *f, const moeq_test_scheme_args *a, const char *name,
                           int32_t in, bool fused, bool bias) {
    memset(f, 0, sizeof *f);
    char json[2048];
    snprintf(json, sizeof json,
             "{\"quant_method\":\"compressed-tensors\",\"format\":\"mixed-precision\","
             "\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],\"format\":\"%s\","
             "\"weights\":%s,\"input_activations\":%s}}}",
             a->format, a->weights, a->inputs);
    moeq_error err;
    ck_assert_ok(moeq_config_parse(json, strlen(json), NULL, &f->cfg, &err), &err);
    ck_assert_ok(moeq_resolve(f->cfg, name, MOEQ_MODULE_LINEAR, NULL, &f->res, &err), &err);
    moeq_select_options so = {a->platform, a->prefer_mxint4};
    moeq_selection sel;
    ck_assert_ok(moeq_select(&f->res, name, &so, &sel, &err), &err);
    ck_assert_ok(moeq_linear_config_init(&f->lc, f->cfg, &f->res, &sel, &err), &err);
    f->in = in;
    f->out = fused ? 64 : 48;
    f->lc.name = name;
    f->lc.in_features = in;
    f->lc.out_features = f->out;
    f->lc.has_bias = bias;
    if (fused) {
        f->lc.num_shards = 3;
        f->lc.shard_names = k_qkv;
        f->lc.shard_out_features = k_qkv_out;
    }
    ck_assert_ok(moeq_linear_create(&f->lc, &f->layer, &err), &err);
    ck_assert_int_eq(moeq_linear_scheme(f->layer), sel.scheme);
}

/* The module name of shard j ("...o_proj", or "...q_proj" of a fused layer). */
static void shard_module(const lin_fixture *f, int32_t j, char *buf, size_t n) {
    if (!f->lc.num_shards) {
        snprintf(buf, n, "%s", f->lc.name);
    } else {
        snprintf(buf, n, "model.layers.0.self_attn.%s", k_qkv[j]);
    }
}

/* Random weights compressed by moeq_compress (and static input tensors by
 * moeq_compress_input, a bias when asked) into f->set. */
static void fixture_compress(lin_fixture *f, uint32_t seed) {
    moeq_error err;
    f->w = malloc((size_t)f->out * (size_t)f->in * sizeof(float));
    ck_assert_ptr_nonnull(f->w);
    uint32_t s = seed * 2654435761u + 1u;
    for (size_t i = 0; i < (size_t)f->out * (size_t)f->in; i++) {
        /* bf16 values (the model dtype) */
        float v = frand(&s) * 0.05f;
        uint16_t h;
        moeq_test_put_float(MOEQ_DTYPE_BF16, v, (uint8_t *)&h);
        uint32_t u = (uint32_t)h << 16;
        memcpy(&f->w[i], &u, 4);
    }
    float xcal[16 * 256];
    for (int i = 0; i < 16 * f->in; i++) xcal[i] = frand(&s);
    int32_t n = f->lc.num_shards ? f->lc.num_shards : 1;
    int32_t row = 0;
    for (int32_t j = 0; j < n; j++) {
        char mod[128];
        shard_module(f, j, mod, sizeof mod);
        int32_t rows = f->lc.num_shards ? k_qkv_out[j] : f->out;
        const float *wj = f->w + (size_t)row * (size_t)f->in;
        ck_assert_ok(moeq_compress(f->res.weights, f->res.format, mod, wj, rows, f->in,
                                   MOEQ_DTYPE_BF16, NULL, 0.0f, &f->set, &err),
                     &err);
        /* each shard's inputs are calibrated on their own batch, so static
         * scales differ between the shards */
        for (int i = 0; i < 16 * f->in; i++) xcal[i] *= 1.0f + 0.25f * (float)j;
        ck_assert_ok(moeq_compress_input(f->res.input_activations, mod, xcal, 16, f->in,
                                         MOEQ_DTYPE_BF16, &f->set, &err),
                     &err);
        if (f->lc.has_bias) {
            float b[64];
            for (int32_t r = 0; r < rows; r++) b[r] = frand(&s) * 0.1f;
            char bn[160];
            snprintf(bn, sizeof bn, "%s.bias", mod);
            moeq_tensor t = {bn, MOEQ_DTYPE_F32, 1, {rows}, b, (uint64_t)rows * 4u, NULL};
            ck_assert_ok(moeq_tensor_set_add(&f->set, &t, &err), &err);
        }
        row += rows;
    }
}

static void fixture_load(lin_fixture *f) {
    moeq_error err;
    for (uint32_t i = 0; i < moeq_tensor_set_count(f->set); i++) {
        int32_t outcome = -1;
        ck_assert_ok(moeq_linear_load(f->layer, moeq_tensor_set_get(f->set, i), &outcome, &err),
                     &err);
        ck_assert_int_eq(outcome, MOEQ_LOAD_LOADED);
    }
}

static void fixture_free(lin_fixture *f) {
    moeq_linear_destroy(f->layer);
    moeq_tensor_set_destroy(f->set);
    moeq_config_destroy(f->cfg);
    free(f->w);
    memset(f, 0, sizeof *f);
}

/* Tolerance of the fast forward against the float64 reference, relative to
 * the largest |reference| of the row: float32 sums only.  Against the
 * independent reference: by the bits of the input quantization (a code that
 * rounds the other way moves an input by one step). */
static double input_tolerance(const moeq_quant_args *a) {
    if (!a) return 1e-4;
    return a->num_bits >= 8 ? 1e-2 : 5e-2;
}

/* The engines' input quantization of one row, independently of moeq's
 * kernels, for the kinds the independent check covers: dynamic per-token
 * int8 (amax/127, round half even) and FP8 per token; others return false. */
static bool quantize_row_engine(const moeq_quant_args *a, float *x, int32_t n) {
    if (!a) return true;
    if (a->dynamic != MOEQ_DYNAMIC_TRUE || a->strategy != MOEQ_STRATEGY_TOKEN) return false;
    float amax = 0;
    for (int32_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    if (a->type == MOEQ_QTYPE_INT && a->num_bits == 8) {
        float s = fmaxf(amax, 1e-10f) / 127.0f;
        for (int32_t i = 0; i < n; i++) {
            float q = nearbyintf(x[i] / s);
            x[i] = fminf(fmaxf(q, -128.0f), 127.0f) * s;
        }
        return true;
    }
    return false;
}

static void check_scheme(int scheme, bool fused, bool bias, int32_t in) {
    lin_fixture f;
    const moeq_test_scheme_args *a = &k_test_schemes[scheme];
    /* moeq_compress writes FP4 scales only with the scale_dtype CT's presets
     * give them (NVFP4: E4M3, MXFP4: E8M0) */
    static const moeq_test_scheme_args nvfp4_a16 = {
        "{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\",\"group_size\":16,"
        "\"scale_dtype\":\"torch.float8_e4m3fn\"}",
        "null", "nvfp4-pack-quantized", 0, 0};
    static const moeq_test_scheme_args nvfp4_a4 = {
        "{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\",\"group_size\":16,"
        "\"scale_dtype\":\"torch.float8_e4m3fn\"}",
        "{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\",\"group_size\":16,"
        "\"dynamic\":\"local\",\"scale_dtype\":\"torch.float8_e4m3fn\"}",
        "nvfp4-pack-quantized", 0, 0};
    static const moeq_test_scheme_args mxfp4 = {MX_W(4), "null", "mxfp4-pack-quantized", 0, 0};
    if (scheme == MOEQ_SCHEME_W4A16_NVFP4) a = &nvfp4_a16;
    if (scheme == MOEQ_SCHEME_W4A4_NVFP4) a = &nvfp4_a4;
    if (scheme == MOEQ_SCHEME_W4A16_MXFP4) a = &mxfp4;
    fixture_create(&f, a, fused ? QKV : NAME, in, fused, bias);
    ck_assert_int_eq(moeq_linear_scheme(f.layer), scheme);
    fixture_compress(&f, (uint32_t)scheme * 7u + (fused ? 3u : 0u) + (bias ? 1u : 0u));
    /* the manifest: engine names, no expert dimension */
    moeq_param p;
    char want[64];
    snprintf(want, sizeof want, "%sweight%s", fused ? "k_proj." : "",
             strstr(a->format, "pack") ? "_packed" : "");
    if (scheme != MOEQ_SCHEME_NPU_W8A8_INT8 && scheme != MOEQ_SCHEME_NPU_W4A8_INT8 &&
        scheme != MOEQ_SCHEME_NPU_W4A16_INT4) {
        ck_assert_msg(moeq_linear_find_param(f.layer, want, &p) == MOEQ_STATUS_OK,
                      "scheme %d: no parameter %s", scheme, want);
        ck_assert_int_eq(p.shape[p.is_transposed ? 1 : 0], fused ? 16 : 48);
    }
    ck_assert_int_ge(moeq_linear_param_count(f.layer), 1);
    for (uint32_t i = 0; i < moeq_linear_param_count(f.layer); i++) {
        ck_assert_int_eq(moeq_linear_param(f.layer, i, &p), MOEQ_STATUS_OK);
        ck_assert_msg(strncmp(p.name, "w2_", 3) != 0 && strncmp(p.name, "w13_", 4) != 0,
                      "MoE name %s in a linear manifest", p.name);
    }
    fixture_load(&f);
    moeq_error err;
    uint32_t missing = 99;
    ck_assert_ok(moeq_linear_missing(f.layer, NULL, &missing, &err), &err);
    ck_assert_uint_eq(missing, 0);
    ck_assert_ok(moeq_linear_finalize(f.layer, &err), &err);

    enum { T = 9 };
    float x[T * 256];
    uint32_t s = 99u + (uint32_t)scheme;
    for (int i = 0; i < T * in; i++) x[i] = frand(&s);
    double *ref = malloc(sizeof(double) * T * (size_t)f.out);
    float *y1 = malloc(sizeof(float) * T * (size_t)f.out);
    float *y2 = malloc(sizeof(float) * T * (size_t)f.out);
    float *yr = malloc(sizeof(float) * T * (size_t)f.out);
    float *wd = malloc(sizeof(float) * (size_t)f.out * (size_t)in);
    ck_assert_ptr_nonnull(ref);
    ck_assert_ptr_nonnull(y1);
    ck_assert_ptr_nonnull(y2);
    ck_assert_ptr_nonnull(yr);
    ck_assert_ptr_nonnull(wd);
    ck_assert_ok(moeq_linear_apply_reference(f.layer, MOEQ_DTYPE_F32, x, T, ref, &err), &err);
    moeq_ctx *c1, *c2, *cr;
    moeq_ctx_options o1 = {1, 0}, o2 = {3, 0}, orf = {1, 1};
    ck_assert_ok(moeq_ctx_create(&o1, &c1, &err), &err);
    ck_assert_ok(moeq_ctx_create(&o2, &c2, &err), &err);
    ck_assert_ok(moeq_ctx_create(&orf, &cr, &err), &err);
    /* several batch sizes: 1 row (gemv), 9 rows (tiles) */
    for (int t0 = 0; t0 < 2; t0++) {
        int64_t Tn = t0 ? T : 1;
        ck_assert_ok(
            moeq_linear_apply(f.layer, c1, MOEQ_DTYPE_F32, x, Tn, MOEQ_DTYPE_F32, y1, &err), &err);
        ck_assert_ok(
            moeq_linear_apply(f.layer, c2, MOEQ_DTYPE_F32, x, Tn, MOEQ_DTYPE_F32, y2, &err), &err);
        ck_assert_msg(memcmp(y1, y2, sizeof(float) * (size_t)Tn * (size_t)f.out) == 0,
                      "scheme %d: 1 and 3 threads differ", scheme);
        ck_assert_ok(
            moeq_linear_apply(f.layer, cr, MOEQ_DTYPE_F32, x, Tn, MOEQ_DTYPE_F32, yr, &err), &err);
        for (int64_t t = 0; t < Tn; t++) {
            double scale = 0;
            for (int32_t o = 0; o < f.out; o++) scale = fmax(scale, fabs(ref[t * f.out + o]));
            for (int32_t o = 0; o < f.out; o++) {
                double r = ref[t * f.out + o];
                ck_assert_msg(fabs(y1[t * f.out + o] - r) <= 1e-4 * scale + 1e-6,
                              "scheme %d fused %d: y[%lld][%d] = %g, reference %g", scheme,
                              (int)fused, (long long)t, (int)o, (double)y1[t * f.out + o], r);
                ck_assert_msg(fabs(yr[t * f.out + o] - r) <= 1e-4 * scale + 1e-6,
                              "scheme %d fused %d: generic y[%lld][%d] = %g, reference %g", scheme,
                              (int)fused, (long long)t, (int)o, (double)yr[t * f.out + o], r);
            }
        }
    }
    /* bf16 in, bf16 out: the same numbers rounded */
    uint16_t xb[T * 256], yb[T * 64];
    for (int i = 0; i < T * in; i++) moeq_test_put_float(MOEQ_DTYPE_BF16, x[i], (uint8_t *)&xb[i]);
    ck_assert_ok(moeq_linear_apply(f.layer, c2, MOEQ_DTYPE_BF16, xb, T, MOEQ_DTYPE_BF16, yb, &err),
                 &err);
    for (int i = 0; i < T * f.out; i++) {
        uint32_t u = (uint32_t)yb[i] << 16;
        float v;
        memcpy(&v, &u, 4);
        ck_assert_msg(isfinite(v), "scheme %d: bf16 output %d is not finite", scheme, i);
    }
    /* independent reference: moeq_dequantize of each shard's tensors, the
     * engines' quantization of x, sums in double */
    int32_t n = f.lc.num_shards ? f.lc.num_shards : 1, row = 0;
    bool independent = true;
    for (int32_t j = 0; j < n && independent; j++) {
        char mod[128];
        shard_module(&f, j, mod, sizeof mod);
        moeq_tensor ts[12];
        uint32_t nt = 0;
        for (uint32_t i = 0; i < moeq_tensor_set_count(f.set); i++) {
            const moeq_tensor *t = moeq_tensor_set_get(f.set, i);
            size_t ml = strlen(mod);
            if (strncmp(t->name, mod, ml) == 0 && t->name[ml] == '.' &&
                strncmp(t->name + ml + 1, "weight", 6) == 0) {
                ts[nt++] = *t;
            }
        }
        int32_t rows = f.lc.num_shards ? k_qkv_out[j] : f.out;
        int64_t shape[2];
        moeq_status st =
            moeq_dequantize(f.res.weights, f.res.format, moeq_config_dequant_flags(f.cfg), mod, ts,
                            nt, MOEQ_DTYPE_F32, wd + (size_t)row * (size_t)in,
                            (uint64_t)rows * (uint64_t)in * 4u, shape, &err);
        independent = st == MOEQ_STATUS_OK; /* the NPU layouts: not a CT format */
        row += rows;
    }
    float xq[256];
    for (int64_t t = 0; t < T && independent && !bias; t++) {
        memcpy(xq, x + t * in, sizeof(float) * (size_t)in);
        if (!quantize_row_engine(f.res.input_activations, xq, in)) break;
        double scale = 0, worst = 0;
        for (int32_t o = 0; o < f.out; o++) {
            double acc = 0;
            for (int32_t c = 0; c < in; c++) acc += (double)xq[c] * wd[(size_t)o * in + c];
            scale = fmax(scale, fabs(acc));
            worst = fmax(worst, fabs(acc - (double)y1[t * f.out + o]));
        }
        ck_assert_msg(worst <= input_tolerance(f.res.input_activations) * scale + 1e-6,
                      "scheme %d: row %lld differs from the independent reference by %g (max "
                      "|y| %g)",
                      scheme, (long long)t, worst, scale);
    }
    moeq_ctx_destroy(c1);
    moeq_ctx_destroy(c2);
    moeq_ctx_destroy(cr);
    free(ref);
    free(y1);
    free(y2);
    free(yr);
    free(wd);
    fixture_free(&f);
}

START_TEST(test_every_scheme) {
    check_scheme(_i, false, false, 128);
}
END_TEST

START_TEST(test_every_scheme_fused_bias) {
    check_scheme(_i, true, true, 64);
}
END_TEST

/* A linear layer has no gate and up: in_features need not be a multiple of
 * the weight block's rows (MoE layers need it of intermediate_size). */
START_TEST(test_block_not_dividing_in_features) {
    check_scheme(MOEQ_SCHEME_W8A8_FP8, false, false, 80);
}
END_TEST

/* ---- bad inputs ------------------------------------------------------------------------ */

static const moeq_test_scheme_args k_fp8_static = {
    "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\"}",
    "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\",\"dynamic\":false}",
    "float-quantized", 0, 0};

static void expect(moeq_status got, moeq_status want, const moeq_error *err, const char *a,
                   const char *b) {
    ck_assert_status(got, want, err);
    ck_assert_msg(strstr(err->message, a) != NULL, "message \"%s\" lacks \"%s\"", err->message, a);
    if (b) {
        ck_assert_msg(strstr(err->message, b) != NULL, "message \"%s\" lacks \"%s\"", err->message,
                      b);
    }
}

/* A copy of tensor `name` of the set with its data changed by fn. */
static const moeq_tensor *find(const lin_fixture *f, const char *name) {
    const moeq_tensor *t = moeq_tensor_set_find(f->set, name);
    ck_assert_msg(t != NULL, "no tensor %s", name);
    return t;
}

START_TEST(test_bad_config) {
    lin_fixture f;
    fixture_create(&f, &k_fp8_static, NAME, 64, false, false);
    moeq_linear_config c = f.lc;
    moeq_linear *l = NULL;
    moeq_error err;
    c.in_features = 0;
    expect(moeq_linear_create(&c, &l, &err), MOEQ_STATUS_INVALID_ARG, &err, NAME, "in_features");
    ck_assert_ptr_null(l);
    c = f.lc;
    c.name = NULL;
    expect(moeq_linear_create(&c, &l, &err), MOEQ_STATUS_INVALID_ARG, &err, "name is NULL", NULL);
    c = f.lc;
    c.num_shards = 3;
    c.shard_names = k_qkv;
    c.shard_out_features = k_qkv_out; /* 64, not 48 */
    expect(moeq_linear_create(&c, &l, &err), MOEQ_STATUS_INVALID_ARG, &err, "sum to 64",
           "out_features is 48");
    const char *const dotted[3] = {"q.proj", "k_proj", "v_proj"};
    c.shard_names = dotted;
    c.out_features = 64;
    expect(moeq_linear_create(&c, &l, &err), MOEQ_STATUS_INVALID_ARG, &err, "shard_names[0]",
           "q.proj");
    fixture_free(&f);
}
END_TEST

START_TEST(test_bad_tensors) {
    lin_fixture f;
    fixture_create(&f, &k_fp8_static, QKV, 64, true, false);
    fixture_compress(&f, 5);
    moeq_error err;
    /* a tensor of another module */
    moeq_tensor t = *find(&f, "model.layers.0.self_attn.q_proj.weight");
    t.name = "model.layers.0.self_attn.o_proj.weight";
    expect(moeq_linear_load(f.layer, &t, NULL, &err), MOEQ_STATUS_NO_MATCH, &err,
           "model.layers.0.self_attn.o_proj.weight", "q_proj.*");
    /* a parameter the scheme has none for */
    t.name = "model.layers.0.self_attn.q_proj.weight_packed";
    expect(moeq_linear_load(f.layer, &t, NULL, &err), MOEQ_STATUS_NO_MATCH, &err, "weight_packed",
           "it loads");
    /* wrong shape: k_proj's weight as q_proj's */
    t = *find(&f, "model.layers.0.self_attn.k_proj.weight");
    t.name = "model.layers.0.self_attn.q_proj.weight";
    expect(moeq_linear_load(f.layer, &t, NULL, &err), MOEQ_STATUS_SHAPE, &err,
           "model.layers.0.self_attn.q_proj.weight", "out_features 32");
    /* wrong dtype */
    t = *find(&f, "model.layers.0.self_attn.q_proj.weight");
    t.dtype = MOEQ_DTYPE_I8;
    expect(moeq_linear_load(f.layer, &t, NULL, &err), MOEQ_STATUS_DTYPE, &err,
           "model.layers.0.self_attn.q_proj.weight", "F8_E4M3");
    /* a missing shard: everything but k_proj's */
    for (uint32_t i = 0; i < moeq_tensor_set_count(f.set); i++) {
        const moeq_tensor *ti = moeq_tensor_set_get(f.set, i);
        if (strstr(ti->name, ".k_proj.")) continue;
        ck_assert_ok(moeq_linear_load(f.layer, ti, NULL, &err), &err);
    }
    /* a duplicate */
    expect(
        moeq_linear_load(f.layer, find(&f, "model.layers.0.self_attn.v_proj.weight"), NULL, &err),
        MOEQ_STATUS_CHECKPOINT, &err, "v_proj.weight", "already loaded");
    float x[64] = {0}, y[64];
    moeq_ctx *ctx;
    ck_assert_ok(moeq_ctx_create(NULL, &ctx, &err), &err);
    expect(moeq_linear_apply(f.layer, ctx, MOEQ_DTYPE_F32, x, 1, MOEQ_DTYPE_F32, y, &err),
           MOEQ_STATUS_STATE, &err, QKV, "not finalized");
    expect(moeq_linear_finalize(f.layer, &err), MOEQ_STATUS_CHECKPOINT, &err,
           "model.layers.0.self_attn.k_proj.weight", QKV);
    char *list = NULL;
    uint32_t n = 0;
    ck_assert_ok(moeq_linear_missing(f.layer, &list, &n, &err), &err);
    ck_assert_uint_eq(n, 3); /* weight, weight_scale, input_scale */
    ck_assert_ptr_nonnull(strstr(list, "model.layers.0.self_attn.k_proj.input_scale"));
    moeq_free(list);
    /* k_proj with a NaN weight scale */
    for (uint32_t i = 0; i < moeq_tensor_set_count(f.set); i++) {
        const moeq_tensor *ti = moeq_tensor_set_get(f.set, i);
        if (!strstr(ti->name, ".k_proj.")) continue;
        moeq_tensor c = *ti;
        uint8_t buf[8];
        if (strstr(c.name, "weight_scale")) {
            ck_assert_uint_le(c.nbytes, sizeof buf);
            float nan = NAN;
            moeq_test_put_float(c.dtype, nan, buf);
            if (c.dtype != MOEQ_DTYPE_F32) { /* bf16/f16 NaN */
                uint16_t h = c.dtype == MOEQ_DTYPE_BF16 ? 0x7FC0u : 0x7E00u;
                memcpy(buf, &h, 2);
            }
            c.data = buf;
        }
        ck_assert_ok(moeq_linear_load(f.layer, &c, NULL, &err), &err);
    }
    expect(moeq_linear_finalize(f.layer, &err), MOEQ_STATUS_CHECKPOINT, &err,
           "model.layers.0.self_attn.k_proj", "weight_scale");
    ck_assert_msg(strstr(err.message, "nan") || strstr(err.message, "NaN") ||
                      strstr(err.message, "finite"),
                  "message \"%s\" does not say what is wrong", err.message);
    moeq_ctx_destroy(ctx);
    fixture_free(&f);
}
END_TEST

START_TEST(test_bad_input_scale) {
    lin_fixture f;
    fixture_create(&f, &k_fp8_static, NAME, 64, false, false);
    fixture_compress(&f, 6);
    moeq_error err;
    for (uint32_t i = 0; i < moeq_tensor_set_count(f.set); i++) {
        moeq_tensor c = *moeq_tensor_set_get(f.set, i);
        uint8_t buf[8];
        if (strstr(c.name, "input_scale")) {
            moeq_test_put_float(c.dtype, -1.0f, buf);
            c.data = buf;
        }
        ck_assert_ok(moeq_linear_load(f.layer, &c, NULL, &err), &err);
    }
    expect(moeq_linear_finalize(f.layer, &err), MOEQ_STATUS_CHECKPOINT, &err, NAME ".input_scale",
           "positive and finite");
    fixture_free(&f);
}
END_TEST

START_TEST(test_bad_apply) {
    lin_fixture f;
    fixture_create(&f, &k_test_schemes[MOEQ_SCHEME_W8A8_INT8], NAME, 64, false, false);
    fixture_compress(&f, 8);
    fixture_load(&f);
    moeq_error err;
    ck_assert_ok(moeq_linear_finalize(f.layer, &err), &err);
    expect(moeq_linear_finalize(f.layer, &err), MOEQ_STATUS_STATE, &err, NAME, "already finalized");
    expect(moeq_linear_load(f.layer, moeq_tensor_set_get(f.set, 0), NULL, &err), MOEQ_STATUS_STATE,
           &err, NAME, "finalized");
    moeq_ctx *ctx;
    ck_assert_ok(moeq_ctx_create(NULL, &ctx, &err), &err);
    float x[3 * 64], y[3 * 48];
    uint32_t s = 3;
    for (int i = 0; i < 3 * 64; i++) x[i] = frand(&s);
    expect(moeq_linear_apply(f.layer, ctx, MOEQ_DTYPE_I8, x, 3, MOEQ_DTYPE_F32, y, &err),
           MOEQ_STATUS_DTYPE, &err, NAME, "I8");
    expect(moeq_linear_apply(f.layer, ctx, MOEQ_DTYPE_F32, x, -1, MOEQ_DTYPE_F32, y, &err),
           MOEQ_STATUS_INVALID_ARG, &err, NAME, "tokens is -1");
    expect(moeq_linear_apply(f.layer, ctx, MOEQ_DTYPE_F32, NULL, 3, MOEQ_DTYPE_F32, y, &err),
           MOEQ_STATUS_INVALID_ARG, &err, NAME, "x is NULL");
    expect(moeq_linear_apply(f.layer, ctx, MOEQ_DTYPE_F32, x, 3, MOEQ_DTYPE_F32, x + 8, &err),
           MOEQ_STATUS_INVALID_ARG, &err, NAME, "overlaps x");
    ck_assert_ok(moeq_linear_apply(f.layer, ctx, MOEQ_DTYPE_F32, x, 0, MOEQ_DTYPE_F32, NULL, &err),
                 &err);
    /* a NaN row gives a NaN row and leaves the others as they were */
    ck_assert_ok(moeq_linear_apply(f.layer, ctx, MOEQ_DTYPE_F32, x, 3, MOEQ_DTYPE_F32, y, &err),
                 &err);
    float y2[3 * 48];
    x[64 + 5] = NAN;
    ck_assert_ok(moeq_linear_apply(f.layer, ctx, MOEQ_DTYPE_F32, x, 3, MOEQ_DTYPE_F32, y2, &err),
                 &err);
    for (int o = 0; o < 48; o++) {
        ck_assert_msg(isnan(y2[48 + o]), "row 1 is not NaN");
        ck_assert_msg(y2[o] == y[o] && y2[96 + o] == y[96 + o], "rows 0, 2 changed");
    }
    moeq_ctx_destroy(ctx);
    fixture_free(&f);
}
END_TEST

START_TEST(test_load_checkpoint) {
    /* the tensors written to a safetensors file and loaded back by module */
    lin_fixture f;
    fixture_create(&f, &k_test_schemes[MOEQ_SCHEME_WNA16], QKV, 64, true, true);
    fixture_compress(&f, 9);
    char dir[256], path[300];
    moeq_test_mkdtemp(dir, sizeof dir, "moeq_linear");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    moeq_error err;
    ck_assert_ok(moeq_safetensors_write(path, moeq_tensor_set_get(f.set, 0),
                                        moeq_tensor_set_count(f.set), NULL, &err),
                 &err);
    moeq_checkpoint *ck;
    ck_assert_ok(moeq_checkpoint_open(dir, &ck, &err), &err);
    uint64_t loaded = 0;
    ck_assert_ok(moeq_linear_load_checkpoint(f.layer, ck, &loaded, &err), &err);
    ck_assert_uint_eq(loaded, moeq_tensor_set_count(f.set));
    ck_assert_ok(moeq_linear_finalize(f.layer, &err), &err);
    /* another module's layer finds nothing */
    moeq_linear *o;
    moeq_linear_config c = f.lc;
    c.name = NAME;
    c.num_shards = 0;
    ck_assert_ok(moeq_linear_create(&c, &o, &err), &err);
    expect(moeq_linear_load_checkpoint(o, ck, NULL, &err), MOEQ_STATUS_CHECKPOINT, &err, NAME,
           "no tensor");
    moeq_linear_destroy(o);
    moeq_checkpoint_close(ck);
    moeq_test_rmtree(dir);
    fixture_free(&f);
}
END_TEST

/* One finalized layer, four threads each with its own context (two of them
 * pooled): every call gives the bits a lone call gives. */
typedef struct conc_arg {
    const moeq_linear *l;
    const float *x;
    const float *want;
    int32_t T, out, threads;
    int ok;
} conc_arg;

static void *conc_thread(void *vp) {
    conc_arg *a = vp;
    moeq_ctx_options o = {a->threads, 0};
    moeq_ctx *ctx = NULL;
    moeq_error err;
    a->ok = moeq_ctx_create(&o, &ctx, &err) == MOEQ_OK;
    float *y = malloc(sizeof(float) * (size_t)a->T * (size_t)a->out);
    for (int r = 0; r < 20 && a->ok && y; r++) {
        a->ok = moeq_linear_apply(a->l, ctx, MOEQ_DTYPE_F32, a->x, a->T, MOEQ_DTYPE_F32, y, &err) ==
                    MOEQ_OK &&
                memcmp(y, a->want, sizeof(float) * (size_t)a->T * (size_t)a->out) == 0;
    }
    free(y);
    moeq_ctx_destroy(ctx);
    return NULL;
}

START_TEST(test_concurrent_apply) {
    lin_fixture f;
    fixture_create(&f, &k_test_schemes[MOEQ_SCHEME_W8A8_INT8], QKV, 64, true, true);
    fixture_compress(&f, 12);
    fixture_load(&f);
    moeq_error err;
    ck_assert_ok(moeq_linear_finalize(f.layer, &err), &err);
    enum { T = 6 };
    float x[T * 64], want[T * 64];
    uint32_t s = 17;
    for (int i = 0; i < T * 64; i++) x[i] = frand(&s);
    moeq_ctx *ctx;
    ck_assert_ok(moeq_ctx_create(NULL, &ctx, &err), &err);
    ck_assert_ok(moeq_linear_apply(f.layer, ctx, MOEQ_DTYPE_F32, x, T, MOEQ_DTYPE_F32, want, &err),
                 &err);
    moeq_ctx_destroy(ctx);
    pthread_t tid[4];
    conc_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (conc_arg){f.layer, x, want, T, f.out, i < 2 ? 1 : 2, 0};
        ck_assert_int_eq(pthread_create(&tid[i], NULL, conc_thread, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(tid[i], NULL);
        ck_assert_msg(args[i].ok, "thread %d: a call failed or differed", i);
    }
    fixture_free(&f);
}
END_TEST

static Suite *linear_suite(void) {
    Suite *s = suite_create("linear");
    TCase *tc = tcase_create("schemes");
    tcase_add_loop_test(tc, test_every_scheme, 0, MOEQ_SCHEME_COUNT);
    tcase_add_loop_test(tc, test_every_scheme_fused_bias, 0, MOEQ_SCHEME_COUNT);
    tcase_add_test(tc, test_block_not_dividing_in_features);
    suite_add_tcase(s, tc);
    TCase *bad = tcase_create("bad_inputs");
    tcase_add_test(bad, test_bad_config);
    tcase_add_test(bad, test_bad_tensors);
    tcase_add_test(bad, test_bad_input_scale);
    tcase_add_test(bad, test_bad_apply);
    tcase_add_test(bad, test_load_checkpoint);
    tcase_add_test(bad, test_concurrent_apply);
    suite_add_tcase(s, bad);
    return s;
}

MOEQ_TEST_MAIN(linear_suite)

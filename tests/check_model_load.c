/*
 * check_model_load.c - moeq_model_load (src/load/): a synthetic checkpoint's
 * MoE layers found, loaded and finalized in one call, each giving what the
 * two-step path (moeq_moe_load_checkpoint + moeq_moe_finalize) gives, bit for
 * bit; its quantized linear modules too (attention and shared experts, q/k/v
 * and gate/up fused), each giving what its modules loaded one by one give;
 * the progress callback's reports and its stop; and a corrupt tensor in the
 * last MoE layer or in a linear layer failing the call with nothing left
 * allocated (the ASan and valgrind passes see any leak of the earlier layers).
 */
#include "test_util.h"

#include <fcntl.h>
#include <math.h>
#include <unistd.h>

static char g_dir[64];

static void setup(void) {
    moeq_test_mkdtemp(g_dir, sizeof g_dir, "moeq_model_load");
}

static void teardown(void) {
    moeq_test_rmtree(g_dir);
}

/* A 3-layer Qwen3-style int4 checkpoint (every layer MoE). */
static void write_model(const char *preset, int layers) {
    moeq_error err;
    moeq_synth_layout L;
    ck_assert_ok(moeq_synth_preset(preset, &L, &err), &err);
    L.num_layers = layers;
    ck_assert_ok(moeq_synth_write(&L, g_dir, &err), &err);
}

typedef struct {
    uint32_t calls, stop_after;
    uint64_t last_bytes;
    double last_s;
    char names[32][96];
    uint32_t linear;
} progress_log;

static int32_t on_progress(const moeq_model_progress *p, void *user) {
    progress_log *g = user;
    ck_assert_uint_eq(p->layers_done, g->calls + 1);
    ck_assert_uint_ge(p->bytes_done, g->last_bytes);
    ck_assert_uint_le(p->bytes_done, p->bytes);
    ck_assert(p->seconds >= g->last_s);
    if (g->calls < 32) snprintf(g->names[g->calls], sizeof g->names[0], "%s", p->layer);
    g->linear += p->linear == 1;
    g->last_bytes = p->bytes_done;
    g->last_s = p->seconds;
    g->calls++;
    return g->stop_after && g->calls >= g->stop_after;
}

/* Options that log progress into *log (zeroed) on `threads` threads. */
static moeq_model_load_options logged(progress_log *log, int32_t threads) {
    memset(log, 0, sizeof *log);
    moeq_model_load_options o = {.threads = threads, .progress = on_progress, .user_data = log};
    return o;
}

/* Writes `preset` with `layers` layers and loads it whole on 2 threads. */
static moeq_model *load_logged(const char *preset, int layers, progress_log *log,
                               moeq_model_load_summary *s) {
    write_model(preset, layers);
    moeq_error err;
    moeq_model_load_options o = logged(log, 2);
    moeq_model *m = NULL;
    ck_assert_ok(moeq_model_load(g_dir, &o, &m, s, &err), &err);
    return m;
}

/* Runs tokens through a layer (fast forward and the reference). */
static void apply(const moeq_moe *moe, int E, int H, int K, float *out, double *ref) {
    enum { T = 6 };
    float x[T * 512];
    int32_t ids[T * 8];
    float w[T * 8];
    ck_assert_int_le(H, 512);
    ck_assert_int_le(K, 8);
    for (int i = 0; i < T * H; i++) x[i] = sinf(0.37f * (float)i);
    for (int t = 0; t < T; t++) {
        for (int k = 0; k < K; k++) {
            ids[t * K + k] = (t * 3 + k * 5) % E;
            w[t * K + k] = 1.0f / (float)(k + 1);
        }
    }
    moeq_error err;
    moeq_ctx *ctx = NULL;
    moeq_ctx_options co = {2, 0};
    ck_assert_ok(moeq_ctx_create(&co, &ctx, &err), &err);
    ck_assert_ok(
        moeq_moe_apply(moe, ctx, MOEQ_DTYPE_F32, x, T, K, ids, w, MOEQ_DTYPE_F32, out, &err), &err);
    ck_assert_ok(moeq_moe_apply_reference(moe, MOEQ_DTYPE_F32, x, T, K, ids, w, ref, &err), &err);
    moeq_ctx_destroy(ctx);
}

START_TEST(test_whole_model) {
    moeq_error err;
    progress_log log;
    moeq_model_load_summary s;
    moeq_model *m = load_logged("wna16-int4-g128", 3, &log, &s);
    ck_assert_uint_eq(moeq_model_layer_count(m), 3);
    ck_assert_uint_eq(s.layers, 3);
    ck_assert_uint_eq(log.calls, 3);
    /* this preset quantizes the experts alone */
    ck_assert_uint_eq(moeq_model_linear_count(m), 0);
    ck_assert_uint_eq(s.linear_layers, 0);
    ck_assert_uint_eq(log.linear, 0);
    ck_assert_uint_eq(log.last_bytes, s.bytes);
    ck_assert(s.seconds > 0 && s.gb_per_s > 0);
    ck_assert_uint_gt(s.resident, 0);

    /* what the summary counts: every tensor under each prefix */
    moeq_checkpoint *ck = NULL;
    ck_assert_ok(moeq_checkpoint_open(g_dir, &ck, &err), &err);
    uint64_t bytes = 0, tensors = 0;
    for (uint64_t i = 0; i < moeq_checkpoint_tensor_count(ck); i++) {
        moeq_tensor t;
        moeq_checkpoint_tensor(ck, i, &t);
        if (strstr(t.name, ".mlp.experts.")) {
            bytes += t.nbytes;
            tensors++;
        }
    }
    ck_assert_uint_eq(s.bytes, bytes);
    ck_assert_uint_eq(s.tensors, tensors);

    /* each layer, in layer order, as the two-step path builds it: the same outputs */
    const moeq_config *cfg = moeq_model_config(m);
    moeq_model_moe mm;
    ck_assert_ok(moeq_model_moe_get(cfg, &mm, &err), &err);
    for (uint32_t i = 0; i < 3; i++) {
        const char *prefix = NULL;
        const moeq_moe *fast = moeq_model_layer(m, i, &prefix);
        char want[64];
        snprintf(want, sizeof want, "model.layers.%u.mlp.experts", i);
        ck_assert_str_eq(prefix, want);
        ck_assert_str_eq(log.names[i], want);
        moeq_model_layer_info info;
        memset(&info, 0, sizeof info);
        snprintf(info.prefix, sizeof info.prefix, "%s", prefix);
        info.experts = mm.num_experts;
        for (int k = 0; k < 3; k++) info.proj[k] = mm.proj[k];
        moeq_resolution res;
        moeq_selection sel;
        moeq_moe_config mc;
        ck_assert_ok(moeq_model_layer_config(cfg, &mm, &info, NULL, &res, &sel, &mc, &err), &err);
        moeq_moe *slow = NULL;
        ck_assert_ok(moeq_moe_create(&mc, &slow, &err), &err);
        ck_assert_ok(moeq_moe_load_checkpoint(slow, ck, NULL, NULL, NULL, NULL, NULL, &err), &err);
        ck_assert_ok(moeq_moe_finalize(slow, &err), &err);
        const int H = mm.hidden_size, E = mm.num_experts, K = mm.top_k;
        float *a = malloc(sizeof(float) * 6 * (size_t)H),
              *b = malloc(sizeof(float) * 6 * (size_t)H);
        double *ra = malloc(sizeof(double) * 6 * (size_t)H),
               *rb = malloc(sizeof(double) * 6 * (size_t)H);
        apply(fast, E, H, K, a, ra);
        apply(slow, E, H, K, b, rb);
        ck_assert_msg(memcmp(a, b, sizeof(float) * 6 * (size_t)H) == 0, "%s: outputs differ",
                      prefix);
        ck_assert_msg(memcmp(ra, rb, sizeof(double) * 6 * (size_t)H) == 0,
                      "%s: reference outputs differ", prefix);
        double top = 0;
        for (int j = 0; j < 6 * H; j++) top = fmax(top, fabs(rb[j]));
        ck_assert(top > 0);
        free(a);
        free(b);
        free(ra);
        free(rb);
        moeq_moe_destroy(slow);
    }
    ck_assert_ptr_null(moeq_model_layer(m, 3, NULL));
    moeq_checkpoint_close(ck);
    moeq_model_destroy(m);
}
END_TEST

/* Module `name` of the checkpoint as one linear layer, built with the public
 * API alone (resolve, select, shapes from moeq_dequantize), loaded and
 * finalized. */
static moeq_linear *single_linear(const moeq_config *cfg, const moeq_checkpoint *ck,
                                  const char *name, int32_t *in, int32_t *out) {
    moeq_error err;
    moeq_tensor t[16];
    uint32_t n = 0;
    int32_t bias = 0;
    const size_t len = strlen(name);
    for (uint64_t i = 0; i < moeq_checkpoint_tensor_count(ck); i++) {
        moeq_tensor x;
        moeq_checkpoint_tensor(ck, i, &x);
        if (strncmp(x.name, name, len) != 0 || x.name[len] != '.' ||
            strchr(x.name + len + 1, '.')) {
            continue;
        }
        bias |= strcmp(x.name + len + 1, "bias") == 0;
        ck_assert_uint_lt(n, 16);
        t[n++] = x;
    }
    ck_assert_uint_gt(n, 0);
    moeq_resolution res;
    moeq_selection sel;
    moeq_linear_config lc;
    ck_assert_ok(moeq_resolve(cfg, name, MOEQ_MODULE_LINEAR, NULL, &res, &err), &err);
    ck_assert_int_eq(res.status, MOEQ_MATCH_QUANTIZED);
    ck_assert_ok(moeq_select(&res, name, NULL, &sel, &err), &err);
    ck_assert_ok(moeq_linear_config_init(&lc, cfg, &res, &sel, &err), &err);
    int64_t shape[2];
    ck_assert_ok(moeq_dequantize(res.weights, res.format, moeq_config_dequant_flags(cfg), name, t,
                                 n, MOEQ_DTYPE_F32, NULL, 0, shape, &err),
                 &err);
    moeq_model_moe mm;
    ck_assert_ok(moeq_model_moe_get(cfg, &mm, &err), &err);
    lc.name = name;
    lc.out_features = (int32_t)shape[0];
    lc.in_features = (int32_t)shape[1];
    lc.has_bias = bias;
    lc.params_dtype = mm.params_dtype;
    moeq_linear *l = NULL;
    ck_assert_ok(moeq_linear_create(&lc, &l, &err), &err);
    ck_assert_ok(moeq_linear_load_checkpoint(l, ck, NULL, &err), &err);
    ck_assert_ok(moeq_linear_finalize(l, &err), &err);
    *in = lc.in_features;
    *out = lc.out_features;
    return l;
}

/* out [T, out_features] = l(x) for T rows of a fixed x [T, in]. */
enum { LT = 5 };
static float *linear_out(const moeq_linear *l, int32_t in, int32_t out) {
    float *x = malloc(sizeof(float) * LT * (size_t)in);
    float *y = malloc(sizeof(float) * LT * (size_t)out);
    for (int32_t i = 0; i < LT * in; i++) x[i] = sinf(0.61f * (float)i) * 0.5f;
    moeq_error err;
    moeq_ctx *ctx = NULL;
    moeq_ctx_options co = {2, 0};
    ck_assert_ok(moeq_ctx_create(&co, &ctx, &err), &err);
    ck_assert_ok(moeq_linear_apply(l, ctx, MOEQ_DTYPE_F32, x, LT, MOEQ_DTYPE_F32, y, &err), &err);
    moeq_ctx_destroy(ctx);
    free(x);
    return y;
}

/* glm-mini: layer 0 dense (ignored), layers 1-3 MoE with int8 attention and
 * shared experts: every quantized linear module loads, q/k/v and gate/up
 * fused, in layer order, counted in the summary; each gives what its modules
 * loaded one by one give, bit for bit. */
START_TEST(test_linear_layers) {
    moeq_error err;
    progress_log log;
    moeq_model_load_summary s;
    moeq_model *m = load_logged("glm-mini", 4, &log, &s);
    /* per MoE layer: qkv_proj, o_proj, shared gate_up_proj and down_proj */
    ck_assert_uint_eq(moeq_model_layer_count(m), 3);
    ck_assert_uint_eq(moeq_model_linear_count(m), 12);
    ck_assert_uint_eq(s.layers, 3);
    ck_assert_uint_eq(s.linear_layers, 12);
    ck_assert_uint_eq(log.calls, 15);
    ck_assert_uint_eq(log.linear, 12);
    ck_assert_uint_eq(log.last_bytes, s.bytes);
    /* layer order: layer 1's experts, then its linear layers (names sort) */
    ck_assert_str_eq(log.names[0], "model.layers.1.mlp.experts");
    ck_assert_str_eq(log.names[1], "model.layers.1.mlp.shared_experts.down_proj");
    ck_assert_str_eq(log.names[2], "model.layers.1.mlp.shared_experts.gate_up_proj");
    ck_assert_str_eq(log.names[3], "model.layers.1.self_attn.o_proj");
    ck_assert_str_eq(log.names[4], "model.layers.1.self_attn.qkv_proj");
    ck_assert_str_eq(log.names[5], "model.layers.2.mlp.experts");

    /* the counts: every tensor of the modules loaded, told apart by name here */
    moeq_checkpoint *ck = NULL;
    ck_assert_ok(moeq_checkpoint_open(g_dir, &ck, &err), &err);
    uint64_t moe_b = 0, moe_t = 0, lin_b = 0, lin_t = 0;
    for (uint64_t i = 0; i < moeq_checkpoint_tensor_count(ck); i++) {
        moeq_tensor t;
        moeq_checkpoint_tensor(ck, i, &t);
        if (strstr(t.name, ".mlp.experts.")) {
            moe_b += t.nbytes;
            moe_t++;
        } else if (strncmp(t.name, "model.layers.0.", 15) != 0 &&
                   (strstr(t.name, ".self_attn.") || strstr(t.name, ".shared_experts."))) {
            lin_b += t.nbytes;
            lin_t++;
        }
    }
    ck_assert_uint_gt(lin_t, 0);
    ck_assert_uint_eq(s.linear_tensors, lin_t);
    ck_assert_uint_eq(s.linear_bytes, lin_b);
    ck_assert_uint_eq(s.tensors, moe_t + lin_t);
    ck_assert_uint_eq(s.bytes, moe_b + lin_b);
    ck_assert_uint_gt(s.linear_resident, 0);
    ck_assert_uint_lt(s.linear_resident, s.resident);

    /* fused layers against their modules one by one; o_proj and down_proj alike */
    const moeq_config *cfg = moeq_model_config(m);
    static const struct {
        const char *fused;
        int n;
        const char *shards[3];
    } k_check[] = {
        {"self_attn.qkv_proj", 3, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
        {"mlp.shared_experts.gate_up_proj",
         2,
         {"mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj"}},
        {"self_attn.o_proj", 1, {"self_attn.o_proj"}},
        {"mlp.shared_experts.down_proj", 1, {"mlp.shared_experts.down_proj"}},
    };
    uint32_t checked = 0;
    for (uint32_t i = 0; i < moeq_model_linear_count(m); i++) {
        const char *name = NULL;
        const moeq_linear *fast = moeq_model_linear(m, i, &name);
        ck_assert_ptr_nonnull(fast);
        ck_assert_ptr_null(strstr(name, ".q_proj"));
        ck_assert_ptr_null(strstr(name, ".gate_proj"));
        if (strncmp(name, "model.layers.2.", 15) != 0) continue;
        for (size_t c = 0; c < sizeof k_check / sizeof k_check[0]; c++) {
            if (strcmp(name + 15, k_check[c].fused) != 0) continue;
            moeq_linear *one[3] = {NULL, NULL, NULL};
            float *y[3] = {NULL, NULL, NULL};
            int32_t in = 0, outs[3] = {0, 0, 0}, out = 0;
            for (int j = 0; j < k_check[c].n; j++) {
                char mod[128];
                snprintf(mod, sizeof mod, "model.layers.2.%s", k_check[c].shards[j]);
                one[j] = single_linear(cfg, ck, mod, &in, &outs[j]);
                y[j] = linear_out(one[j], in, outs[j]);
                out += outs[j];
            }
            float *yf = linear_out(fast, in, out);
            double top = 0;
            for (int t = 0, col0 = 0; t < LT; t++, col0 = 0) {
                for (int j = 0; j < k_check[c].n; col0 += outs[j++]) {
                    const float *a = yf + (size_t)t * (size_t)out + col0;
                    const float *b = y[j] + (size_t)t * (size_t)outs[j];
                    ck_assert_msg(memcmp(a, b, sizeof(float) * (size_t)outs[j]) == 0,
                                  "%s: row %d, shard %s differs from %s alone", name, t,
                                  k_check[c].shards[j], k_check[c].shards[j]);
                    for (int q = 0; q < outs[j]; q++) top = fmax(top, fabs((double)b[q]));
                }
            }
            ck_assert(top > 0);
            free(yf);
            for (int j = 0; j < k_check[c].n; j++) {
                free(y[j]);
                moeq_linear_destroy(one[j]);
            }
            checked++;
        }
    }
    ck_assert_uint_eq(checked, 4);
    moeq_checkpoint_close(ck);
    moeq_model_destroy(m);

    /* moe_only: the MoE layers alone */
    moeq_model_load_options o = logged(&log, 2);
    o.moe_only = 1;
    ck_assert_ok(moeq_model_load(g_dir, &o, &m, &s, &err), &err);
    ck_assert_uint_eq(moeq_model_layer_count(m), 3);
    ck_assert_uint_eq(moeq_model_linear_count(m), 0);
    ck_assert_uint_eq(s.linear_layers, 0);
    ck_assert_uint_eq(s.bytes, moe_b);
    ck_assert_uint_eq(log.calls, 3);
    moeq_model_destroy(m);
    o.moe_only = 2;
    ck_assert_status(moeq_model_load(g_dir, &o, &m, &s, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_ptr_null(m);
}
END_TEST

START_TEST(test_progress_stops) {
    write_model("wna16-int4-g128", 3);
    moeq_error err;
    progress_log log;
    moeq_model_load_options o = logged(&log, 1);
    log.stop_after = 2;
    moeq_model *m = (moeq_model *)&log; /* overwritten with NULL */
    ck_assert_status(moeq_model_load(g_dir, &o, &m, NULL, &err), MOEQ_STATUS_STATE, &err);
    ck_assert_ptr_null(m);
    ck_assert_uint_eq(log.calls, 2);
    ck_assert_msg(strstr(err.message, "after 2 of 3"), "%s", err.message);
}
END_TEST

/* Overwrites the bytes of tensor `name` in its file with `fill` (a 2-byte pattern). */
static void corrupt(const char *name, uint16_t fill) {
    moeq_error err;
    moeq_checkpoint *ck = NULL;
    ck_assert_ok(moeq_checkpoint_open(g_dir, &ck, &err), &err);
    moeq_tensor t;
    ck_assert_ok(moeq_checkpoint_find(ck, name, &t), &err);
    ck_assert_uint_ge(t.nbytes, 16);
    /* where its bytes sit in the file: find them */
    char path[512];
    snprintf(path, sizeof path, "%s", t.file);
    size_t n = 0;
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *all = malloc(n);
    ck_assert_uint_eq(fread(all, 1, n, f), n);
    fclose(f);
    size_t at = SIZE_MAX;
    for (size_t i = 0; i + t.nbytes <= n; i++) {
        if (memcmp(all + i, t.data, (size_t)t.nbytes) == 0) {
            at = i;
            break;
        }
    }
    ck_assert_msg(at != SIZE_MAX, "%s not found in %s", name, path);
    moeq_checkpoint_close(ck);
    for (size_t i = 0; i + 1 < t.nbytes; i += 2) memcpy(all + at + i, &fill, 2);
    int fd = open(path, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, all + at, (size_t)t.nbytes, (off_t)at), (ssize_t)t.nbytes);
    close(fd);
    free(all);
}

START_TEST(test_corrupt_last_layer) {
    write_model("wna16-int4-g128", 3);
    /* a NaN scale (bf16 0x7FC0) in the last expert of the last layer */
    corrupt("model.layers.2.mlp.experts.7.down_proj.weight_scale", 0x7FC0);
    moeq_error err;
    progress_log log;
    moeq_model_load_options o = logged(&log, 2);
    moeq_model *m = NULL;
    moeq_status st = moeq_model_load(g_dir, &o, &m, NULL, &err);
    ck_assert_int_ne(st, MOEQ_STATUS_OK);
    ck_assert_int_eq(err.code, st);
    ck_assert_ptr_null(m);
    ck_assert_uint_eq(log.calls, 2); /* the first two finished, then were freed */
    ck_assert_msg(strstr(err.message, "MoE layer 3 of 3 (model.layers.2.mlp.experts)") &&
                      strstr(err.message, "model.layers.2.mlp.experts.7.down_proj"),
                  "%s", err.message);
}
END_TEST

/* A NaN scale in a linear layer of the last layer: the call fails naming it,
 * after the MoE and linear layers before it were made (and freed). */
START_TEST(test_corrupt_linear) {
    write_model("glm-mini", 4);
    corrupt("model.layers.3.self_attn.o_proj.weight_scale", 0x7FC0);
    moeq_error err;
    progress_log log;
    moeq_model_load_options o = logged(&log, 2);
    moeq_model *m = NULL;
    moeq_status st = moeq_model_load(g_dir, &o, &m, NULL, &err);
    ck_assert_msg(st == MOEQ_STATUS_CHECKPOINT, "%s", err.message);
    ck_assert_int_eq(err.code, st);
    ck_assert_ptr_null(m);
    /* layers 1 and 2 (5 each), then layer 3's experts, down_proj and gate_up_proj */
    ck_assert_msg(log.calls == 13, "%u calls: %s", log.calls, err.message);
    ck_assert_uint_eq(log.linear, 10);
    ck_assert_msg(strstr(err.message, "linear layer 11 of 12 (model.layers.3.self_attn.o_proj)") &&
                      strstr(err.message, "weight_scale"),
                  "%s", err.message);
}
END_TEST

START_TEST(test_bad_args) {
    moeq_error err;
    moeq_model *m = NULL;
    ck_assert_status(moeq_model_load(NULL, NULL, &m, NULL, &err), MOEQ_STATUS_INVALID_ARG, &err);
    moeq_model_load_options o = {.threads = -1};
    ck_assert_status(moeq_model_load(g_dir, &o, &m, NULL, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_ptr_null(m);
    /* a directory without a checkpoint */
    ck_assert_int_ne(moeq_model_load(g_dir, NULL, &m, NULL, &err), MOEQ_STATUS_OK);
    ck_assert_ptr_null(m);
    moeq_model_destroy(NULL);
    ck_assert_uint_eq(moeq_model_layer_count(NULL), 0);
}
END_TEST

static Suite *model_load_suite(void) {
    Suite *s = suite_create("model_load");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_whole_model);
    tcase_add_test(tc, test_linear_layers);
    tcase_add_test(tc, test_progress_stops);
    tcase_add_test(tc, test_corrupt_linear);
    tcase_add_test(tc, test_corrupt_last_layer);
    tcase_add_test(tc, test_bad_args);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(model_load_suite)

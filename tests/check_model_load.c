/*
 * check_model_load.c - moeq_model_load (src/load/): a synthetic checkpoint's
 * MoE layers found, loaded and finalized in one call, each giving what the
 * two-step path (moeq_moe_load_checkpoint + moeq_moe_finalize) gives, bit for
 * bit; the progress callback's reports and its stop; and a corrupt tensor in
 * the last layer failing the call with nothing left allocated (the ASan and
 * valgrind passes see any leak of the earlier layers).
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
    char names[8][96];
} progress_log;

static int32_t on_progress(const moeq_model_progress *p, void *user) {
    progress_log *g = user;
    ck_assert_uint_eq(p->layers_done, g->calls + 1);
    ck_assert_uint_ge(p->bytes_done, g->last_bytes);
    ck_assert_uint_le(p->bytes_done, p->bytes);
    ck_assert(p->seconds >= g->last_s);
    if (g->calls < 8) snprintf(g->names[g->calls], sizeof g->names[0], "%s", p->layer);
    g->last_bytes = p->bytes_done;
    g->last_s = p->seconds;
    g->calls++;
    return g->stop_after && g->calls >= g->stop_after;
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
    write_model("wna16-int4-g128", 3);
    moeq_error err;
    progress_log log;
    memset(&log, 0, sizeof log);
    moeq_model_load_options o = {2, NULL, on_progress, &log};
    moeq_model *m = NULL;
    moeq_model_load_summary s;
    ck_assert_ok(moeq_model_load(g_dir, &o, &m, &s, &err), &err);
    ck_assert_uint_eq(moeq_model_layer_count(m), 3);
    ck_assert_uint_eq(s.layers, 3);
    ck_assert_uint_eq(log.calls, 3);
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

START_TEST(test_progress_stops) {
    write_model("wna16-int4-g128", 3);
    moeq_error err;
    progress_log log;
    memset(&log, 0, sizeof log);
    log.stop_after = 2;
    moeq_model_load_options o = {1, NULL, on_progress, &log};
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
    memset(&log, 0, sizeof log);
    moeq_model_load_options o = {2, NULL, on_progress, &log};
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

START_TEST(test_bad_args) {
    moeq_error err;
    moeq_model *m = NULL;
    ck_assert_status(moeq_model_load(NULL, NULL, &m, NULL, &err), MOEQ_STATUS_INVALID_ARG, &err);
    moeq_model_load_options o = {-1, NULL, NULL, NULL};
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
    tcase_add_test(tc, test_progress_stops);
    tcase_add_test(tc, test_corrupt_last_layer);
    tcase_add_test(tc, test_bad_args);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(model_load_suite)

/*
 * check_concurrency.c - what README "Guarantees" promises about threads:
 * a parsed config, an open checkpoint and a finalized layer are shared by
 * any number of threads, each thread bringing its own moeq_ctx, and results
 * are bit-identical to a single-threaded run.
 *
 * Eight threads at a time: resolving layer names on one shared config;
 * parsing configs and opening checkpoints at the same moment (cJSON's parser
 * is serialised inside the library); applying one finalized layer of every
 * scheme on the same inputs.  Contexts ask for 1 to 4 worker threads, so the
 * test holds whether apply runs on the calling thread only or on a pool.
 * Run it under MOEQ_SANITIZE=thread to check for data races.
 */
#include "test_moe.h"

#include <pthread.h>

#define N_THREADS 8

/* ---- resolving names on a shared config --------------------------------------------- */

static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = '\0';
    *len = (size_t)n;
    return buf;
}

#define N_NAMES 600

typedef struct resolve_job {
    const moeq_config *cfg;
    char (*names)[96];
    const moeq_resolution *want; /* [N_NAMES * 2]: resolve, then resolve_moe */
    int rounds;
    int offset; /* each thread starts somewhere else in the list */
    int mismatches;
} resolve_job;

static bool same_resolution(const moeq_resolution *a, const moeq_resolution *b) {
    return a->status == b->status && a->group_index == b->group_index &&
           a->target == b->target && a->format == b->format && a->weights == b->weights &&
           a->input_activations == b->input_activations && a->ignore_index == b->ignore_index &&
           a->flags == b->flags && a->other_group_index == b->other_group_index;
}

static void resolve_all(const moeq_config *cfg, char (*names)[96], int i, moeq_resolution out[2]) {
    moeq_error err;
    int32_t kind = strstr(names[i], "experts.") ? MOEQ_MODULE_EXPERT : MOEQ_MODULE_LINEAR;
    moeq_status st = moeq_resolve(cfg, names[i], kind, NULL, &out[0], &err);
    if (st != MOEQ_STATUS_OK) memset(&out[0], 0xEE, sizeof out[0]);
    st = moeq_resolve_moe(cfg, names[i], 1 + (uint32_t)(i % 4), NULL, NULL, &out[1], &err);
    if (st != MOEQ_STATUS_OK) memset(&out[1], 0xEE, sizeof out[1]);
}

static void *resolve_thread(void *arg) {
    resolve_job *job = arg;
    for (int r = 0; r < job->rounds; r++) {
        for (int k = 0; k < N_NAMES; k++) {
            int i = (k + job->offset) % N_NAMES;
            moeq_resolution got[2];
            resolve_all(job->cfg, job->names, i, got);
            if (!same_resolution(&got[0], &job->want[2 * i]) ||
                !same_resolution(&got[1], &job->want[2 * i + 1])) {
                job->mismatches++;
            }
        }
    }
    return NULL;
}

START_TEST(test_resolve_shared_config) {
    size_t len;
    char *json = read_text(MOEQ_TEST_DATA_DIR
                           "/configs/glm-5.3-int4-int8mix-rtn-g64-mixed-regex-no-linear.json",
                           &len);
    moeq_config *cfg = NULL;
    moeq_error err;
    ck_assert_ok(moeq_config_parse(json, len, NULL, &cfg, &err), &err);
    free(json);
    static const char *const k_parts[] = {
        "self_attn.q_a_proj", "self_attn.kv_b_proj", "self_attn.o_proj",  "mlp.gate_proj",
        "mlp.down_proj",      "mlp.shared_experts.up_proj", "mlp.experts", "mlp.experts.%d.gate_proj",
        "mlp.experts.%d.down_proj", "mlp.gate", "self_attn.qkv_proj", "mlp.gate_up_proj"};
    char(*names)[96] = calloc(N_NAMES, sizeof *names);
    ck_assert_ptr_nonnull(names);
    for (int i = 0; i < N_NAMES; i++) {
        char part[64];
        snprintf(part, sizeof part, k_parts[i % 12], i % 256);
        snprintf(names[i], sizeof names[i], "model.layers.%d.%s", (i / 12) % 80, part);
    }
    moeq_resolution *want = calloc(2 * N_NAMES, sizeof *want);
    ck_assert_ptr_nonnull(want);
    for (int i = 0; i < N_NAMES; i++) resolve_all(cfg, names, i, &want[2 * i]);
    pthread_t th[N_THREADS];
    resolve_job jobs[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        jobs[t] = (resolve_job){cfg, names, want, 3, t * 37, 0};
        ck_assert_int_eq(pthread_create(&th[t], NULL, resolve_thread, &jobs[t]), 0);
    }
    for (int t = 0; t < N_THREADS; t++) {
        pthread_join(th[t], NULL);
        ck_assert_msg(jobs[t].mismatches == 0, "thread %d: %d resolutions differ", t,
                      jobs[t].mismatches);
    }
    free(want);
    free(names);
    moeq_config_destroy(cfg);
}
END_TEST

/* ---- parsing and opening at the same time --------------------------------------------- */

typedef struct parse_job {
    int index;
    int failures;
    uint32_t groups;
    uint64_t tensors;
} parse_job;

static const char *const k_configs[] = {
    "glm-5.3-int4-int8mix-rtn-g64-mixed-regex-no-linear.json",
    "llama-3.1-8b-instruct-fp8-dynamic-channel-token.json",
    "meta-llama-3-8b-mxfp4-w4a4-ct-readme.json",
    "qwen3-w8a8-int8-mse-observer-v0.13.json",
};
static const char *const k_checkpoints[] = {"int4_group32_asym_bf16", "nvfp4_bf16", "mxfp4_bf16",
                                            "fp8_block_nondivisible_bf16"};

static void *parse_thread(void *arg) {
    parse_job *job = arg;
    char path[512];
    for (int r = 0; r < 20; r++) {
        snprintf(path, sizeof path, "%s/configs/%s", MOEQ_TEST_DATA_DIR, k_configs[job->index % 4]);
        moeq_config *cfg = NULL;
        moeq_error err;
        if (moeq_config_load(path, NULL, &cfg, &err) != MOEQ_STATUS_OK) {
            job->failures++;
        } else {
            job->groups = moeq_config_group_count(cfg);
        }
        moeq_config_destroy(cfg);
        /* A config that fails, so the parser's error path runs concurrently too. */
        const char bad[] = "{\"config_groups\": {\"g\": [1, 2,";
        if (moeq_config_parse(bad, sizeof bad - 1, NULL, &cfg, &err) != MOEQ_STATUS_JSON) {
            job->failures++;
        }
        snprintf(path, sizeof path, "%s/conformance/%s.safetensors", MOEQ_TEST_DATA_DIR,
                 k_checkpoints[job->index % 4]);
        moeq_checkpoint *ck = NULL;
        if (moeq_checkpoint_open(path, &ck, &err) != MOEQ_STATUS_OK) {
            job->failures++;
        } else {
            job->tensors = moeq_checkpoint_tensor_count(ck);
        }
        moeq_checkpoint_close(ck);
    }
    return NULL;
}

START_TEST(test_parse_and_open_concurrently) {
    pthread_t th[N_THREADS];
    parse_job jobs[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        jobs[t] = (parse_job){t, 0, 0, 0};
        ck_assert_int_eq(pthread_create(&th[t], NULL, parse_thread, &jobs[t]), 0);
    }
    for (int t = 0; t < N_THREADS; t++) {
        pthread_join(th[t], NULL);
        ck_assert_msg(jobs[t].failures == 0, "thread %d: %d failures", t, jobs[t].failures);
        /* Threads that read the same files saw the same things. */
        ck_assert_uint_eq(jobs[t].groups, jobs[t % 4].groups);
        ck_assert_uint_eq(jobs[t].tensors, jobs[t % 4].tensors);
        ck_assert_uint_gt(jobs[t].tensors, 0);
    }
}
END_TEST

/* ---- applying one finalized layer from many threads ---------------------------------------- */

#define E_ 4
#define H_ 64
#define I_ 32
#define T_ 5
#define K_ 2

typedef struct apply_job {
    const moeq_moe *layer;
    int32_t threads; /* the context's worker threads */
    const float *x;
    const int32_t *ids;
    const float *w;
    const float *want; /* [T_, H_], single-threaded */
    int rounds;
    int failures;
    char message[256];
} apply_job;

static void *apply_thread(void *arg) {
    apply_job *job = arg;
    moeq_ctx_options o = {job->threads, 0};
    moeq_ctx *ctx = NULL;
    moeq_error err;
    if (moeq_ctx_create(&o, &ctx, &err) != MOEQ_STATUS_OK) {
        job->failures++;
        return NULL;
    }
    float out[T_ * H_];
    for (int r = 0; r < job->rounds; r++) {
        /* Fewer tokens in some rounds: the scratch space is reused and resized. */
        int64_t tokens = r % 3 == 2 ? 2 : T_;
        memset(out, 0xA5, sizeof out);
        moeq_status st = moeq_moe_apply(job->layer, ctx, MOEQ_DTYPE_F32, job->x, tokens, K_,
                                        job->ids, job->w, MOEQ_DTYPE_F32, out, &err);
        if (st != MOEQ_STATUS_OK) {
            snprintf(job->message, sizeof job->message, "%.200s", err.message);
            job->failures++;
        } else if (tokens == T_ && memcmp(out, job->want, sizeof out) != 0) {
            snprintf(job->message, sizeof job->message, "output differs from one thread's");
            job->failures++;
        }
    }
    moeq_ctx_destroy(ctx);
    return NULL;
}

START_TEST(test_apply_shared_layer) {
    const int32_t scheme = _i;
    moeq_test_layer tl;
    moeq_test_layer_make(&tl, &k_test_schemes[scheme], E_, H_, I_, 11u + (uint32_t)scheme);
    ck_assert_int_eq(moeq_moe_scheme(tl.layer), scheme);
    float x[T_ * H_], w[T_ * K_], want[T_ * H_];
    int32_t ids[T_ * K_];
    uint32_t r = 12345u + (uint32_t)scheme;
    for (int i = 0; i < T_ * H_; i++) x[i] = ((float)(moeq_test_rand(&r) % 2001) - 1000.0f) / 400.0f;
    for (int t = 0; t < T_; t++) {
        ids[t * K_] = t % E_;
        ids[t * K_ + 1] = t == 3 ? -1 : (t + 1 + t / 2) % E_; /* -1: an absent expert */
        w[t * K_] = 0.75f;
        w[t * K_ + 1] = 0.25f;
    }
    moeq_ctx *ctx = NULL;
    moeq_error err;
    ck_assert_ok(moeq_ctx_create(NULL, &ctx, &err), &err);
    ck_assert_ok(moeq_moe_apply(tl.layer, ctx, MOEQ_DTYPE_F32, x, T_, K_, ids, w, MOEQ_DTYPE_F32,
                                want, &err),
                 &err);
    moeq_ctx_destroy(ctx);
    pthread_t th[N_THREADS];
    apply_job jobs[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        jobs[t] = (apply_job){tl.layer, 1 + t % 4, x, ids, w, want, 6, 0, ""};
        ck_assert_int_eq(pthread_create(&th[t], NULL, apply_thread, &jobs[t]), 0);
    }
    for (int t = 0; t < N_THREADS; t++) {
        pthread_join(th[t], NULL);
        ck_assert_msg(jobs[t].failures == 0, "%s, thread %d (%d worker threads): %d failures: %s",
                      moeq_scheme_name(scheme), t, jobs[t].threads, jobs[t].failures,
                      jobs[t].message);
    }
    moeq_test_layer_free(&tl);
}
END_TEST

static Suite *concurrency_suite(void) {
    Suite *s = suite_create("concurrency");
    TCase *tc = tcase_create("threads");
    tcase_add_test(tc, test_resolve_shared_config);
    tcase_add_test(tc, test_parse_and_open_concurrently);
    tcase_add_loop_test(tc, test_apply_shared_layer, 0, MOEQ_SCHEME_COUNT);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(concurrency_suite)

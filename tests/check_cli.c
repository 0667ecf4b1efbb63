/*
 * check_cli.c - the moeq tool as users run it: exit codes, `plan --json`
 * matching the library, `dequant -o` writing what compressed-tensors
 * computes (the conformance fixtures' "expected" tensors), and
 * `synth` -> `run` with .npy inputs and routing matching the library's apply.
 */
#include "test_util.h"

#include <math.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#include "npy.h"

static const char *tool(void) {
    return MOEQ_BINARY_DIR "/moeq";
}

/* Runs a shell command; returns its exit status, output in *out (malloc'd). */
static int run(const char *cmd, char **out) {
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (len + 1 == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
    }
    buf[len] = '\0';
    int st = pclose(p);
    if (out) {
        *out = buf;
    } else {
        free(buf);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char tmpdir[64];

static void setup(void) {
    moeq_test_mkdtemp(tmpdir, sizeof tmpdir, "moeq_cli");
}

static void teardown(void) {
    moeq_test_rmtree(tmpdir);
}

#define GLM MOEQ_TEST_DATA_DIR "/configs/glm-5.3-int4-int8mix-rtn-g64-mixed-regex-no-linear.json"

START_TEST(test_exit_codes) {
    char cmd[1024], layers[128], bad_layers[128], bad_cfg[128];
    snprintf(layers, sizeof layers, "%s/ok.txt", tmpdir);
    snprintf(bad_layers, sizeof bad_layers, "%s/bad.txt", tmpdir);
    snprintf(bad_cfg, sizeof bad_cfg, "%s/bad.json", tmpdir);
    moeq_test_write_text(layers, "model.layers.3.mlp.experts moe 256\nlm_head\n");
    moeq_test_write_text(bad_layers, "model.layers.3.mlp.experts moe\n");
    moeq_test_write_text(
        bad_cfg, "{\"quant_method\": \"compressed-tensors\", \"config_groups\": {\"g\": 1}}");
    snprintf(cmd, sizeof cmd, "%s plan %s --layers %s >/dev/null 2>&1", tool(), GLM, layers);
    ck_assert_int_eq(run(cmd, NULL), 0);
    snprintf(cmd, sizeof cmd, "%s plan %s --layers %s >/dev/null 2>&1", tool(), GLM, bad_layers);
    ck_assert_int_eq(run(cmd, NULL), 2);
    snprintf(cmd, sizeof cmd, "%s plan %s --layers %s >/dev/null 2>&1", tool(), bad_cfg, layers);
    ck_assert_int_eq(run(cmd, NULL), 2);
    snprintf(cmd, sizeof cmd, "%s plan %s --layers %s/missing.txt >/dev/null 2>&1", tool(), GLM,
             tmpdir);
    ck_assert_int_eq(run(cmd, NULL), 2);
    /* A line in error: int4 tensor-strategy experts have no scheme. */
    char cfg[128], err_layers[128];
    snprintf(cfg, sizeof cfg, "%s/tensor.json", tmpdir);
    snprintf(err_layers, sizeof err_layers, "%s/err.txt", tmpdir);
    moeq_test_write_text(
        cfg, "{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\","
             "\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],\"weights\":{\"num_bits\":4}}}}");
    moeq_test_write_text(err_layers, "m.experts moe 4\n");
    snprintf(cmd, sizeof cmd, "%s plan %s --layers %s 2>&1", tool(), cfg, err_layers);
    char *out = NULL;
    ck_assert_int_eq(run(cmd, &out), 1);
    ck_assert_ptr_nonnull(strstr(out, "error: layer m.experts"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s frobnicate >/dev/null 2>&1", tool());
    ck_assert_int_eq(run(cmd, NULL), 2);
    snprintf(cmd, sizeof cmd, "%s plan --help", tool());
    ck_assert_int_eq(run(cmd, &out), 0);
    ck_assert_ptr_nonnull(strstr(out, "--engine-order"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s demo", tool());
    ck_assert_int_eq(run(cmd, &out), 0);
    ck_assert_ptr_nonnull(strstr(out, "wna16"));
    free(out);
}
END_TEST

/* plan/inspect --engine: the ENGINE column and its detail line, JSON keys,
 * the exit status for a bad spec or a missing --layers. */
START_TEST(test_engine_option) {
    char cmd[1024], layers[128], model[128];
    snprintf(layers, sizeof layers, "%s/moe.txt", tmpdir);
    moeq_test_write_text(layers,
                         "model.layers.5.mlp.experts moe 8\nmodel.layers.5.self_attn.o_proj\n");
    char *out = NULL;
    snprintf(cmd, sizeof cmd, "%s plan %s --layers %s --engine sglang@eba6af385d", tool(), GLM,
             layers);
    ck_assert_int_eq(run(cmd, &out), 0); /* moeq itself plans every line */
    ck_assert_ptr_nonnull(strstr(out, "engine sglang@eba6af385d:sm90,auto\nLAYER"));
    ck_assert_ptr_nonnull(strstr(out, "KeyError *"));
    ck_assert_ptr_nonnull(strstr(out, "    engine: KeyError: 'Linear' [differs: error]\n"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s plan %s --layers %s --engine vllm --json", tool(), GLM, layers);
    ck_assert_int_eq(run(cmd, &out), 0);
    ck_assert_ptr_nonnull(strstr(out,
                                 "\"engine\":\"vllm@003a19308:sm90,auto\",\"engine_scheme\":"
                                 "\"CompressedTensorsWNA16MarlinMoEMethod\",\"engine_error\":null,"
                                 "\"engine_group\":\"group_1\",\"engine_differs\":[]"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s plan %s --layers %s --engine trt 2>&1", tool(), GLM, layers);
    ck_assert_int_eq(run(cmd, &out), 2);
    ck_assert_ptr_nonnull(strstr(out, "engine \"trt\": not modelled"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s plan %s --engine sglang 2>&1", tool(), GLM);
    ck_assert_int_eq(run(cmd, &out), 2);
    ck_assert_ptr_nonnull(strstr(out, "--engine needs --layers"));
    free(out);
    snprintf(model, sizeof model, "%s/w4a8", tmpdir);
    snprintf(cmd, sizeof cmd, "%s synth w4a8-int8 %s --experts 4 --layers 2 >/dev/null 2>&1",
             tool(), model);
    ck_assert_int_eq(run(cmd, NULL), 0);
    snprintf(cmd, sizeof cmd, "%s inspect %s --names-only --engine sglang@d315eb725", tool(),
             model);
    ck_assert_int_eq(run(cmd, &out), 0);
    ck_assert_ptr_nonnull(strstr(out, "NotImplementedError *"));
    ck_assert_ptr_nonnull(strstr(out,
                                 "    engine: NotImplementedError: The W4A8Int8 Fused MoE scheme "
                                 "is implemented only for NPU for now. [differs: error]\n"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s inspect %s --names-only --json --engine sglang:npu", tool(),
             model);
    ck_assert_int_eq(run(cmd, &out), 0);
    ck_assert_ptr_nonnull(strstr(out,
                                 "\"engine_error\":\"AttributeError: 'CompressedTensorsConfig' "
                                 "object has no attribute 'get'\""));
    free(out);
}
END_TEST

START_TEST(test_plan_json_matches_library) {
    const char *lines = "model.layers.3.mlp.experts moe 256\nmodel.layers.5.mlp.gate\n"
                        "model.layers.4.self_attn.o_proj\nlm_head\n";
    char path[128], cmd[1024];
    snprintf(path, sizeof path, "%s/l.txt", tmpdir);
    moeq_test_write_text(path, lines);
    snprintf(cmd, sizeof cmd, "%s plan %s --layers %s --json", tool(), GLM, path);
    char *out = NULL;
    ck_assert_int_eq(run(cmd, &out), 0);
    moeq_config *c = NULL;
    moeq_error err;
    ck_assert_ok(moeq_config_load(GLM, NULL, &c, &err), &err);
    moeq_plan_options po = {NULL, NULL, 1, 1, NULL};
    char *text = NULL;
    ck_assert_ok(moeq_plan(c, lines, strlen(lines), &po, &text, NULL, &err), &err);
    ck_assert_str_eq(out, text);
    moeq_free(text);
    free(out);
    moeq_config_destroy(c);
}
END_TEST

/* Every conformance fixture through `moeq dequant -o`: the .npy holds CT's
 * dequantized values (in CT's output dtype, widened to float32). */
static const char *k_fixtures[] = {
    "int4_group32_sym_bf16",
    "int4_group32_asym_bf16",
    "int3_group32_asym_bf16",
    "int4_group16_actorder_sym_bf16",
    "int8_int_quantized_channel_sym_bf16",
    "fp8_block_nondivisible_bf16",
    "nvfp4_bf16",
    "mxfp4_bf16",
};

START_TEST(test_dequant_fixtures) {
    const char *name = k_fixtures[_i];
    char json_path[512], st_path[512], cfg_path[256], npy_path[256], cmd[2048];
    snprintf(json_path, sizeof json_path, "%s/conformance/%s.json", MOEQ_TEST_DATA_DIR, name);
    snprintf(st_path, sizeof st_path, "%s/conformance/%s.safetensors", MOEQ_TEST_DATA_DIR, name);
    snprintf(cfg_path, sizeof cfg_path, "%s/%s.cfg.json", tmpdir, name);
    snprintf(npy_path, sizeof npy_path, "%s/%s.npy", tmpdir, name);
    /* The fixture's args and format as a one-group config. */
    FILE *f = fopen(json_path, "r");
    ck_assert_ptr_nonnull(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *args = strstr(buf, "\"args\": ");
    const char *fmt = strstr(buf, "\"format\": \"");
    ck_assert(args && fmt);
    const char *args_end = strchr(args, '}');
    char format[64], out_dtype[16] = "F32";
    sscanf(fmt + 11, "%63[^\"]", format);
    const char *od = strstr(buf, "\"expected_dtype\": \"");
    if (od) sscanf(od + 19, "%15[^\"]", out_dtype);
    bool to_bf16 = strcmp(out_dtype, "BF16") == 0;
    FILE *c = fopen(cfg_path, "w");
    fprintf(c,
            "{\"quant_method\":\"compressed-tensors\",\"format\":\"%s\",\"config_groups\":"
            "{\"g\":{\"targets\":[\"re:.*\"],\"weights\":%.*s}}}",
            format, (int)(args_end - args - 8 + 1), args + 8);
    fclose(c);
    snprintf(cmd, sizeof cmd, "%s dequant %s %s model.layers.0.mlp.experts.0.up_proj -o %s 2>&1",
             tool(), cfg_path, st_path, npy_path);
    char *out = NULL;
    int rc = run(cmd, &out);
    ck_assert_msg(rc == 0, "%s: %s", name, out);
    free(out);
    npy_array a;
    char msg[256];
    ck_assert_msg(npy_read(npy_path, &a, msg, sizeof msg) == 0, "%s", msg);
    ck_assert_int_eq(a.dtype, MOEQ_DTYPE_F32);
    moeq_checkpoint *ck = NULL;
    moeq_error err;
    ck_assert_ok(moeq_checkpoint_open(st_path, &ck, &err), &err);
    moeq_tensor exp;
    ck_assert_ok(moeq_checkpoint_find(ck, "expected", &exp), &err);
    ck_assert_int_eq(a.ndim, 2);
    ck_assert_int_eq(a.shape[0], exp.shape[0]);
    ck_assert_int_eq(a.shape[1], exp.shape[1]);
    size_t count = (size_t)(a.shape[0] * a.shape[1]);
    const float *got = a.data;
    for (size_t i = 0; i < count; i++) {
        float want;
        if (exp.dtype == MOEQ_DTYPE_BF16) {
            uint32_t bits = (uint32_t)((const uint16_t *)exp.data)[i] << 16;
            memcpy(&want, &bits, 4);
        } else {
            ck_assert_int_eq(exp.dtype, MOEQ_DTYPE_F32);
            want = ((const float *)exp.data)[i];
        }
        /* float32 output vs CT's output dtype: equal once rounded to it. */
        uint32_t gb;
        memcpy(&gb, &got[i], 4);
        if (to_bf16) {
            uint32_t r = gb + 0x7FFFu + ((gb >> 16) & 1u);
            gb = r & 0xFFFF0000u;
        }
        float g;
        memcpy(&g, &gb, 4);
        ck_assert_msg(g == want, "%s[%zu]: %g vs %g", name, i, (double)g, (double)want);
    }
    moeq_checkpoint_close(ck);
    npy_free(&a);
}
END_TEST

/* moeq synth writes a model; moeq run loads a layer of it with the input and
 * routing given as .npy files and writes what moeq_moe_apply computes. */
START_TEST(test_run_layer) {
    char dir[128], x_path[160], ids_path[160], w_path[160], out_path[160], cmd[1024];
    snprintf(dir, sizeof dir, "%s/model", tmpdir);
    snprintf(x_path, sizeof x_path, "%s/x.npy", tmpdir);
    snprintf(ids_path, sizeof ids_path, "%s/ids.npy", tmpdir);
    snprintf(w_path, sizeof w_path, "%s/w.npy", tmpdir);
    snprintf(out_path, sizeof out_path, "%s/out.npy", tmpdir);
    snprintf(cmd, sizeof cmd,
             "%s synth w8a8-int8 %s --experts 8 --top-k 2 --hidden 64 --intermediate 32 "
             "--layers 1 2>&1",
             tool(), dir);
    char *out = NULL;
    ck_assert_msg(run(cmd, &out) == 0, "%s", out);
    free(out);

    enum { T = 5, H = 64, K = 2, E = 8 };
    float x[T * H], w[T * K];
    int32_t ids[T * K];
    for (int i = 0; i < T * H; i++) x[i] = sinf(0.37f * (float)i);
    for (int t = 0; t < T; t++) {
        ids[t * K] = (t * 3) % E;
        ids[t * K + 1] = (t * 3 + 5) % E;
        w[t * K] = 0.75f;
        w[t * K + 1] = 0.25f;
    }
    char msg[256];
    int64_t xs[2] = {T, H}, rs[2] = {T, K};
    ck_assert_msg(npy_write(x_path, MOEQ_DTYPE_F32, 2, xs, x, msg, sizeof msg) == 0, "%s", msg);
    ck_assert_msg(npy_write(ids_path, MOEQ_DTYPE_I32, 2, rs, ids, msg, sizeof msg) == 0, "%s", msg);
    ck_assert_msg(npy_write(w_path, MOEQ_DTYPE_F32, 2, rs, w, msg, sizeof msg) == 0, "%s", msg);

    const char *layer = "model.layers.0.mlp.experts";
    snprintf(cmd, sizeof cmd,
             "%s run %s --layer %s --input %s --topk-ids %s --topk-weights %s -o %s --check "
             "--repeat 1 2>&1",
             tool(), dir, layer, x_path, ids_path, w_path, out_path);
    ck_assert_msg(run(cmd, &out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "w8a8_int8, 8 experts, hidden 64, intermediate 32"), "%s", out);
    ck_assert_msg(strstr(out, ": ok (tolerance"), "%s", out);
    ck_assert_msg(strstr(out, " kernels: ") &&
                      (strstr(out, "avx512 kernels") || strstr(out, "avx2 kernels") ||
                       strstr(out, "portable kernels")),
                  "%s", out);
    free(out);

    /* The same layer through the library. */
    moeq_error err;
    moeq_config *cfg = NULL;
    moeq_checkpoint *ck = NULL;
    ck_assert_ok(moeq_config_load(dir, NULL, &cfg, &err), &err);
    ck_assert_ok(moeq_checkpoint_open(dir, &ck, &err), &err);
    moeq_resolution res;
    moeq_selection sel;
    ck_assert_ok(moeq_resolve_moe(cfg, layer, E, NULL, NULL, &res, &err), &err);
    ck_assert_ok(moeq_select(&res, layer, NULL, &sel, &err), &err);
    moeq_moe_config mc;
    ck_assert_ok(moeq_moe_config_init(&mc, cfg, &res, &sel, &err), &err);
    mc.prefix = layer;
    mc.num_experts = E;
    mc.hidden_size = H;
    mc.intermediate_size = 32;
    moeq_moe *moe = NULL;
    ck_assert_ok(moeq_moe_create(&mc, &moe, &err), &err);
    ck_assert_ok(moeq_moe_load_checkpoint(moe, ck, NULL, NULL, NULL, NULL, NULL, &err), &err);
    ck_assert_ok(moeq_moe_finalize(moe, &err), &err);
    float want[T * H];
    moeq_ctx *ctx = NULL;
    ck_assert_ok(moeq_ctx_create(NULL, &ctx, &err), &err);
    ck_assert_ok(
        moeq_moe_apply(moe, ctx, MOEQ_DTYPE_F32, x, T, K, ids, w, MOEQ_DTYPE_F32, want, &err),
        &err);
    npy_array got;
    ck_assert_msg(npy_read(out_path, &got, msg, sizeof msg) == 0, "%s", msg);
    ck_assert_int_eq(got.dtype, MOEQ_DTYPE_F32);
    ck_assert_int_eq(got.ndim, 2);
    ck_assert_int_eq(got.shape[0], T);
    ck_assert_int_eq(got.shape[1], H);
    double max_want = 0;
    for (int i = 0; i < T * H; i++) max_want = fmax(max_want, fabs((double)want[i]));
    ck_assert(max_want > 0);
    for (int i = 0; i < T * H; i++) {
        double d = fabs((double)((const float *)got.data)[i] - (double)want[i]);
        ck_assert_msg(d <= 1e-6 * max_want, "out[%d]: %g vs %g", i,
                      (double)((const float *)got.data)[i], (double)want[i]);
    }
    npy_free(&got);
    moeq_ctx_destroy(ctx);
    moeq_moe_destroy(moe);
    moeq_checkpoint_close(ck);
    moeq_config_destroy(cfg);

    /* An expert id out of range: exit 1, naming the token and the id. */
    ids[3 * K + 1] = E;
    ck_assert_msg(npy_write(ids_path, MOEQ_DTYPE_I32, 2, rs, ids, msg, sizeof msg) == 0, "%s", msg);
    snprintf(cmd, sizeof cmd,
             "%s run %s --layer %s --input %s --topk-ids %s --topk-weights %s 2>&1", tool(), dir,
             layer, x_path, ids_path, w_path);
    ck_assert_int_eq(run(cmd, &out), 1);
    ck_assert_msg(strstr(out, "topk_ids[3][1] is 8; must be -1 or 0..7"), "%s", out);
    free(out);

    /* An input of the wrong width: exit 1, with the shape wanted and the one given. */
    int64_t bad[2] = {T * H / 32, 32};
    ck_assert_msg(npy_write(x_path, MOEQ_DTYPE_F32, 2, bad, x, msg, sizeof msg) == 0, "%s", msg);
    snprintf(cmd, sizeof cmd, "%s run %s --layer %s --input %s 2>&1", tool(), dir, layer, x_path);
    ck_assert_int_eq(run(cmd, &out), 1);
    ck_assert_msg(strstr(out, "must be F32 [any, 64], got F32 [10, 32]"), "%s", out);
    free(out);

    /* Usage errors: exit 2 with the reason. */
    snprintf(cmd, sizeof cmd, "%s run %s --layer %s --topk-ids %s 2>&1", tool(), dir, layer,
             ids_path);
    ck_assert_int_eq(run(cmd, &out), 2);
    ck_assert_msg(strstr(out, "--topk-ids and --topk-weights go together"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s run %s --layer %s --tokens 4x 2>&1", tool(), dir, layer);
    ck_assert_int_eq(run(cmd, &out), 2);
    ck_assert_msg(strstr(out, "--tokens takes 1..1000000, got '4x'"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s run %s --layer model.layers.7.mlp.experts 2>&1", tool(), dir);
    ck_assert_int_eq(run(cmd, &out), 1);
    ck_assert_msg(strstr(out, "no tensor named model.layers.7.mlp.experts.<expert>.<proj>.*"), "%s",
                  out);
    free(out);
}
END_TEST

/* `moeq load`: every MoE layer, a progress line per layer when stderr is no
 * terminal, the summary (plain and --json), and exit 1 naming the layer
 * when one fails; then a checkpoint with quantized attention and shared
 * experts, whose linear layers load too (fused), or not with --moe-only. */
START_TEST(test_load_model) {
    char dir[128], cmd[1024];
    snprintf(dir, sizeof dir, "%s/model", tmpdir);
    snprintf(cmd, sizeof cmd,
             "%s synth wna16-int4-g128 %s --experts 8 --top-k 2 --hidden 256 --intermediate 128 "
             "--layers 3 2>&1",
             tool(), dir);
    char *out = NULL;
    ck_assert_msg(run(cmd, &out) == 0, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s load %s --threads 2 2>&1", tool(), dir);
    ck_assert_msg(run(cmd, &out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "loaded model.layers.0.mlp.experts (1/3)") &&
                      strstr(out, "loaded model.layers.2.mlp.experts (3/3)") &&
                      strstr(out, "loaded 3 MoE layers (24 experts) and 0 linear layers") &&
                      strstr(out, "memory: finalized "),
                  "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s load %s --json 2>/dev/null", tool(), dir);
    ck_assert_msg(run(cmd, &out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "\"layers\": 3, \"experts\": 24,") && strstr(out, "\"peak_rss\": "),
                  "%s", out);
    free(out);
    /* no checkpoint there; no directory given */
    snprintf(cmd, sizeof cmd, "%s load %s/nowhere 2>&1", tool(), tmpdir);
    ck_assert_int_eq(run(cmd, NULL), 2);
    snprintf(cmd, sizeof cmd, "%s load 2>&1", tool());
    ck_assert_int_eq(run(cmd, NULL), 2);
    /* a config whose expert size disagrees with the tensors: the first layer fails */
    char cfg_path[160];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    size_t n = 0;
    char *text = (char *)moeq_test_read_file(cfg_path, &n);
    char *at = strstr(text, "\"moe_intermediate_size\": 128");
    ck_assert_ptr_nonnull(at);
    memcpy(at, "\"moe_intermediate_size\": 256", 28);
    moeq_test_write_text(cfg_path, text);
    free(text);
    snprintf(cmd, sizeof cmd, "%s load %s 2>&1", tool(), dir);
    ck_assert_int_eq(run(cmd, &out), 1);
    ck_assert_msg(strstr(out, "MoE layer 1 of 3 (model.layers.0.mlp.experts)"), "%s", out);
    free(out);
    /* quantized attention and shared experts load too, fused, unless --moe-only */
    snprintf(dir, sizeof dir, "%s/glm", tmpdir);
    snprintf(cmd, sizeof cmd, "%s synth glm-mini %s 2>&1", tool(), dir);
    ck_assert_msg(run(cmd, &out) == 0, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s load %s --threads 2 2>&1", tool(), dir);
    ck_assert_msg(run(cmd, &out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "loaded model.layers.1.self_attn.qkv_proj [linear] (5/15)") &&
                      strstr(out, "loaded model.layers.3.mlp.shared_experts.gate_up_proj "
                                  "[linear] (13/15)") &&
                      strstr(out, "loaded 3 MoE layers (24 experts) and 12 linear layers") &&
                      !strstr(out, "q_proj"),
                  "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s load %s --json --moe-only 2>/dev/null", tool(), dir);
    ck_assert_msg(run(cmd, &out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "\"layers\": 3,") && strstr(out, "\"linear_layers\": 0,"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s load %s --json 2>/dev/null", tool(), dir);
    ck_assert_msg(run(cmd, &out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "\"linear_layers\": 12,"), "%s", out);
    free(out);
}
END_TEST

/* `moeq run` and `moeq manifest` of linear modules: an attention projection,
 * a fused qkv_proj from its q/k/v shards, an ignored (bf16) one; the output
 * equals moeq_linear_apply's through the library. */
START_TEST(test_run_linear) {
    char dir[128], x_path[160], out_path[160], cmd[1024];
    snprintf(dir, sizeof dir, "%s/model", tmpdir);
    snprintf(x_path, sizeof x_path, "%s/x.npy", tmpdir);
    snprintf(out_path, sizeof out_path, "%s/out.npy", tmpdir);
    snprintf(cmd, sizeof cmd,
             "%s synth w8a8-fp8-static %s --experts 4 --top-k 2 --hidden 64 --intermediate 32 "
             "--layers 1 2>&1",
             tool(), dir);
    char *out = NULL;
    ck_assert_msg(run(cmd, &out) == 0, "%s", out);
    free(out);
    enum { T = 3, H = 64 };
    float x[T * H];
    for (int i = 0; i < T * H; i++) x[i] = cosf(0.21f * (float)i);
    char msg[256];
    int64_t xs[2] = {T, H};
    ck_assert_msg(npy_write(x_path, MOEQ_DTYPE_F32, 2, xs, x, msg, sizeof msg) == 0, "%s", msg);
    const char *layer = "model.layers.0.self_attn.o_proj";
    snprintf(cmd, sizeof cmd, "%s run %s --layer %s --input %s -o %s --check --repeat 1 2>&1",
             tool(), dir, layer, x_path, out_path);
    ck_assert_msg(run(cmd, &out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "o_proj: linear, w8a8_fp8 (group group_0), in 64, out 64"), "%s",
                  out);
    ck_assert_msg(strstr(out, ": ok (tolerance 1e-02"), "%s", out);
    free(out);
    /* the library gives the same numbers */
    moeq_error err;
    moeq_config *cfg = NULL;
    moeq_checkpoint *ck = NULL;
    ck_assert_ok(moeq_config_load(dir, NULL, &cfg, &err), &err);
    ck_assert_ok(moeq_checkpoint_open(dir, &ck, &err), &err);
    moeq_resolution res;
    moeq_selection sel;
    moeq_linear_config lc;
    ck_assert_ok(moeq_resolve(cfg, layer, MOEQ_MODULE_LINEAR, NULL, &res, &err), &err);
    ck_assert_ok(moeq_select(&res, layer, NULL, &sel, &err), &err);
    ck_assert_ok(moeq_linear_config_init(&lc, cfg, &res, &sel, &err), &err);
    lc.name = layer;
    lc.in_features = H;
    lc.out_features = H;
    moeq_linear *lin = NULL;
    ck_assert_ok(moeq_linear_create(&lc, &lin, &err), &err);
    ck_assert_ok(moeq_linear_load_checkpoint(lin, ck, NULL, &err), &err);
    ck_assert_ok(moeq_linear_finalize(lin, &err), &err);
    moeq_ctx *ctx = NULL;
    ck_assert_ok(moeq_ctx_create(NULL, &ctx, &err), &err);
    float want[T * H];
    ck_assert_ok(moeq_linear_apply(lin, ctx, MOEQ_DTYPE_F32, x, T, MOEQ_DTYPE_F32, want, &err),
                 &err);
    npy_array got;
    ck_assert_msg(npy_read(out_path, &got, msg, sizeof msg) == 0, "%s", msg);
    ck_assert_int_eq(got.shape[0], T);
    ck_assert_int_eq(got.shape[1], H);
    /* The same numbers, to the rounding of a different summation order: on a
     * CPU with AVX512_BF16 `moeq run` sums the FP8 products on the bfloat16
     * path, while this process, when valgrind runs it (valgrind reports no
     * AVX-512), takes the float path; both sum exact products in float32. */
    const float *g = got.data;
    float big = 0.0f;
    for (int i = 0; i < T * H; i++) big = fmaxf(big, fabsf(want[i]));
    for (int i = 0; i < T * H; i++) {
        ck_assert_msg(fabsf(g[i] - want[i]) <= 1e-5f * big,
                      "moeq run and the library differ at %d: %.9g vs %.9g", i, (double)g[i],
                      (double)want[i]);
    }
    npy_free(&got);
    moeq_ctx_destroy(ctx);
    moeq_linear_destroy(lin);
    moeq_checkpoint_close(ck);
    moeq_config_destroy(cfg);
    /* fused from shards, and its manifest */
    snprintf(cmd, sizeof cmd, "%s run %s --layer model.layers.0.self_attn.qkv_proj --check 2>&1",
             tool(), dir);
    ck_assert_msg(run(cmd, &out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "fused from q_proj [64], k_proj [32], v_proj [32]"), "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s manifest %s --layer model.layers.0.self_attn.qkv_proj 2>&1",
             tool(), dir);
    ck_assert_msg(run(cmd, &out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "k_proj.input_scale") && strstr(out, "v_proj.weight "), "%s", out);
    free(out);
    /* ignored lm_head: plain bf16 */
    snprintf(cmd, sizeof cmd, "%s run %s --layer lm_head --tokens 2 --check 2>&1", tool(), dir);
    ck_assert_msg(run(cmd, &out) == 0, "%s", out);
    ck_assert_msg(strstr(out, "lm_head: linear, unquantized"), "%s", out);
    free(out);
    /* a name that is neither */
    snprintf(cmd, sizeof cmd, "%s run %s --layer model.layers.0.self_attn.x_proj 2>&1", tool(),
             dir);
    ck_assert_int_eq(run(cmd, &out), 1);
    ck_assert_msg(strstr(out, "model.layers.0.self_attn.x_proj.<param> (a linear module)"), "%s",
                  out);
    free(out);
    /* MoE-only options */
    snprintf(cmd, sizeof cmd, "%s run %s --layer %s --router-logits %s 2>&1", tool(), dir, layer,
             x_path);
    ck_assert_int_eq(run(cmd, &out), 2);
    ck_assert_msg(strstr(out, "is a linear module"), "%s", out);
    free(out);
}
END_TEST

static Suite *cli_suite(void) {
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_exit_codes);
    tcase_add_test(tc, test_plan_json_matches_library);
    tcase_add_test(tc, test_engine_option);
    tcase_add_test(tc, test_run_layer);
    tcase_add_test(tc, test_run_linear);
    tcase_add_test(tc, test_load_model);
    tcase_add_loop_test(tc, test_dequant_fixtures, 0,
                        (int)(sizeof k_fixtures / sizeof k_fixtures[0]));
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(cli_suite)

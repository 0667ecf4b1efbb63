/*
 * cmd_run.c - `moeq run MODEL_DIR --layer PREFIX ...`: load one MoE layer of a
 * checkpoint, route tokens the way the model's config.json says, run it, time
 * it, optionally check it against the float64 reference.
 */
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "npy.h"

static void run_usage(FILE *f) {
    fprintf(f, "usage: moeq run MODEL_DIR --layer PREFIX|MODULE [--tokens T] [--input X.npy]\n"
               "                [--router-logits R.npy | --topk-ids I.npy --topk-weights W.npy]\n"
               "                [-o OUT.npy] [--threads N] [--check] [--seed S] [--repeat N]\n"
               "                [--platform cpu|npu] [--prefer-mxint4]\n"
               "                [--ep [contiguous|round-robin]]\n\n"
               "Loads the MoE layer PREFIX (e.g. model.layers.3.mlp.experts) from MODEL_DIR\n"
               "(config.json + safetensors), runs it on X ([T, H] float32; random when absent)\n"
               "and writes OUT as float32 [T, H].  Routing and the experts' activation follow\n"
               "the model as its family's code runs it (model_type in moeq's family table;\n"
               "keys config.json carries win over the table): scoring, top-k, renormalizing,\n"
               "groups, scaling, the correction bias tensor, SwiGLU limits, expert biases.\n"
               "Logits come from R (float32 [T, E]), else from the family's router\n"
               "(<parent>.gate or <parent>.router: weight and bias; one level up for experts\n"
               "nested as mlp.experts.experts.<e>), else are random (with a warning); or\n"
               "routing is given as I (int32 [T, k]) and W (float32 [T, k]).\n"
               "The routing used is printed, with the settings taken from the family table.\n"
               "Prints the time per token.  --check compares the output with the float64\n"
               "reference of the same math and fails past 1e-4 relative (1e-2 with 8-bit\n"
               "quantized inputs, 5e-2 with 4-bit ones).\n\n"
               "--platform and --prefer-mxint4 choose the scheme as for 'moeq plan'.\n\n"
               "A linear MODULE (tensors MODULE.weight*, e.g. model.layers.0.self_attn.o_proj,\n"
               "or a fused qkv_proj / gate_up_proj whose shards the checkpoint stores) runs\n"
               "y = x W^T (+ bias) on X ([T, in] float32) and writes OUT [T, out]; its scheme\n"
               "is selected as for MoE layers and its sizes come from its tensors.\n\n"
               "--ep runs the layer with expert parallelism over MPI: start it as\n"
               "'mpirun -np N moeq run ... --ep'.  Each rank loads only its experts (contiguous\n"
               "runs of ids, the default, or round-robin) and takes a contiguous share of the\n"
               "tokens; rank 0 prints the timing per rank (experts, bytes loaded, compute and\n"
               "communication) and writes OUT.  With --check rank 0 also runs the whole layer\n"
               "in one process and checks that the bits are the same.  Needs a moeq built with\n"
               "MPI (-DMOEQ_MPI=ON).\n\n"
               "exit status: 0 ran (and checked), 1 load, routing, apply or check failed,\n"
               "2 usage or unreadable model directory\n");
}

/* ---- small helpers --------------------------------------------------------------- */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double uniform01(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
}
static float normal(void) {
    return (float)(sqrt(-2.0 * log(uniform01())) * cos(6.283185307179586 * uniform01()));
}

static int progress_bar(uint64_t done, uint64_t total, void *user) {
    (void)user;
    if (done == total || done % 64 == 0) {
        int width = 40, fill = (int)((double)done / (double)total * width);
        fprintf(stderr, "\rloading [%.*s%*s] %llu/%llu tensors", fill,
                "########################################", width - fill, "",
                (unsigned long long)done, (unsigned long long)total);
        if (done == total) fputc('\n', stderr);
    }
    return 0;
}

static int32_t progress_cb(uint64_t done, uint64_t total, void *user) {
    return progress_bar(done, total, user);
}

static int read_npy(const char *path, int32_t want, int64_t d0, int64_t d1, npy_array *a,
                    const char *what) {
    char msg[512];
    if (npy_read(path, a, msg, sizeof msg) != 0) {
        fprintf(stderr, "moeq: %s\n", msg);
        return -1;
    }
    if (a->dtype != want || a->ndim != 2 || (d0 >= 0 && a->shape[0] != d0) ||
        (d1 >= 0 && a->shape[1] != d1)) {
        char dims[2][24];
        snprintf(dims[0], sizeof dims[0], d0 >= 0 ? "%lld" : "any", (long long)d0);
        snprintf(dims[1], sizeof dims[1], d1 >= 0 ? "%lld" : "any", (long long)d1);
        char got[96];
        int n = snprintf(got, sizeof got, "%s [", moeq_dtype_name(a->dtype));
        for (int32_t i = 0; i < a->ndim && n < (int)sizeof got - 24; i++) {
            n += snprintf(got + n, sizeof got - (size_t)n, "%s%lld", i ? ", " : "",
                          (long long)a->shape[i]);
        }
        snprintf(got + n, sizeof got - (size_t)n, "]");
        fprintf(stderr, "moeq: %s: %s must be %s [%s, %s], got %s\n", path, what,
                moeq_dtype_name(want), dims[0], dims[1], got);
        npy_free(a);
        return -1;
    }
    return 0;
}

/* The projection names the checkpoint uses for PREFIX, and the expert count. */
/* LAYER's projection names, experts found and biases, as moeq_model_find_layers
 * sees them; -1 when the checkpoint has no MoE layer of that name. */
static int scan_experts(const moeq_config *cfg, const moeq_checkpoint *ck, const char *prefix,
                        const char **proj, int32_t *count, int32_t *has_bias) {
    moeq_model_layer_info *v = NULL;
    uint32_t n = 0;
    moeq_error err;
    int rc = -1;
    if (moeq_model_find_layers(cfg, ck, &v, &n, &err) != MOEQ_OK) {
        cli_print_error(prefix, &err);
        return -1;
    }
    for (uint32_t i = 0; i < n && rc != 0; i++) {
        if (strcmp(v[i].prefix, prefix) != 0) continue;
        for (int k = 0; k < 3; k++) proj[k] = v[i].proj[k]; /* static storage */
        *count = v[i].found_experts;
        *has_bias = v[i].has_bias;
        rc = 0;
    }
    moeq_free(v);
    return rc;
}

/* A float vector tensor [n] of the checkpoint as float32 (malloc'ed); NULL
 * with *bad = 1 (and a message) when it exists but is not one, NULL with
 * *bad = 0 when it is absent. */
static float *read_vector(const moeq_checkpoint *ck, const char *name, int32_t n, int *bad) {
    moeq_tensor t;
    *bad = 0;
    if (moeq_checkpoint_find(ck, name, &t) != MOEQ_OK) return NULL;
    int64_t shape[2];
    moeq_tensor bt = t;
    bt.name = "weight";
    bt.ndim = 2;
    bt.shape[0] = 1;
    /* [n], or [1, n] as Ernie 4.5 stores its moe_statics */
    bt.shape[1] = t.ndim == 1 ? t.shape[0] : t.ndim == 2 && t.shape[0] == 1 ? t.shape[1] : -1;
    float *v = malloc((size_t)n * sizeof(float));
    moeq_error err;
    if (!v || bt.shape[1] != n ||
        moeq_dequantize(NULL, MOEQ_FORMAT_DENSE, 0, name, &bt, 1, MOEQ_DTYPE_F32, v,
                        (uint64_t)n * 4u, shape, &err) != MOEQ_OK) {
        fprintf(stderr, "moeq: %s is not a float [%d] vector\n", name, (int)n);
        free(v);
        *bad = 1;
        return NULL;
    }
    return v;
}

/* Where the router sits: parent (the experts' parent, "model.layers.0.mlp")
 * when it holds <parent>.<router>.weight, else one level up when that does,
 * for experts nested one level deeper (llm-compressor's GPT-OSS:
 * mlp.experts.experts.<e>.*, router at mlp.router.*): parent is cut there.
 * Returns whether either holds it (parent unchanged when not). */
static bool router_parent(const moeq_checkpoint *ck, char *parent, const char *router) {
    char name[600];
    moeq_tensor t;
    snprintf(name, sizeof name, "%s.%s.weight", parent, router);
    if (moeq_checkpoint_find(ck, name, &t) == MOEQ_OK) return true;
    char *dot = strrchr(parent, '.');
    if (!dot) return false;
    snprintf(name, sizeof name, "%.*s.%s.weight", (int)(dot - parent), parent, router);
    if (moeq_checkpoint_find(ck, name, &t) != MOEQ_OK) return false;
    *dot = '\0';
    return true;
}

/* logits[t, e] = x[t] . W[e] (+ b[e]) with the dense router weight [E, H]
 * <parent>.<router>.weight and, where the family has one, its bias. */
static int router_logits(const moeq_checkpoint *ck, const char *parent, const char *router,
                         const float *x, int64_t T, int32_t E, int32_t H, float *logits,
                         int *with_bias) {
    char name[600];
    snprintf(name, sizeof name, "%s.%s.weight", parent, router);
    moeq_tensor w;
    if (moeq_checkpoint_find(ck, name, &w) != MOEQ_OK) return 0;
    if (w.ndim != 2 || w.shape[0] != E || w.shape[1] != H ||
        (w.dtype != MOEQ_DTYPE_F32 && w.dtype != MOEQ_DTYPE_BF16 && w.dtype != MOEQ_DTYPE_F16)) {
        fprintf(stderr, "moeq: %s is %s with %d dims; expected a float [%d, %d] router weight\n",
                name, moeq_dtype_name(w.dtype), (int)w.ndim, (int)E, (int)H);
        return -1;
    }
    /* Dequantize the router through the public API: a dense module. */
    float *wf = malloc((size_t)E * (size_t)H * sizeof(float));
    if (!wf) return -1;
    moeq_error err;
    int64_t shape[2];
    moeq_tensor t = w;
    t.name = "weight";
    if (moeq_dequantize(NULL, MOEQ_FORMAT_DENSE, 0, name, &t, 1, MOEQ_DTYPE_F32, wf,
                        (uint64_t)E * (uint64_t)H * 4u, shape, &err) != MOEQ_OK) {
        cli_print_error(name, &err);
        free(wf);
        return -1;
    }
    char bias_name[600];
    snprintf(bias_name, sizeof bias_name, "%s.%s.bias", parent, router);
    int bad;
    float *b = read_vector(ck, bias_name, E, &bad);
    if (bad) {
        free(wf);
        return -1;
    }
    *with_bias = b != NULL;
    for (int64_t i = 0; i < T; i++) {
        for (int32_t e = 0; e < E; e++) {
            double acc = b ? (double)b[e] : 0.0;
            for (int32_t h = 0; h < H; h++) {
                acc += (double)x[i * H + h] * (double)wf[(size_t)e * (size_t)H + (size_t)h];
            }
            logits[i * E + e] = (float)acc;
        }
    }
    free(wf);
    free(b);
    return 1;
}

/* The float64 check of an output: prints the errors and returns whether they
 * are within the tolerance the layer's inputs allow.  The kernels and the
 * reference do the same math in float32 and float64; where inputs are
 * quantized a value next to a rounding boundary can land one step apart,
 * hence the wider tolerances. */
static bool check_output(const float *out, const double *ref, int64_t n,
                         const moeq_quant_args *in_args) {
    double max_err = 0, max_ref = 0, se = 0, sr = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)out[i] - ref[i]);
        max_err = fmax(max_err, d);
        max_ref = fmax(max_ref, fabs(ref[i]));
        se += d * d;
        sr += ref[i] * ref[i];
    }
    double tol = !in_args ? 1e-4 : in_args->num_bits <= 4 ? 5e-2 : 1e-2;
    double rel = max_ref > 0 ? max_err / max_ref : max_err;
    bool ok = isfinite(max_err) && rel <= tol;
    printf("check against the float64 reference: max abs error %.3g (max |ref| %.3g, "
           "relative %.3g), rms relative %.3g: %s (tolerance %.0e relative)\n",
           max_err, max_ref, rel, sr > 0 ? sqrt(se / sr) : 0.0, ok ? "ok" : "FAILED", tol);
    return ok;
}

/* What `moeq run` was asked, for a linear module. */
typedef struct run_args {
    const char *dir, *layer, *in_path, *out_path;
    long tokens, threads, repeat;
    int check;
    const moeq_select_options *so;
} run_args;

/* `moeq run` of a linear module: y = x W^T (+ bias) for x [T, in]. */
static int run_linear(const run_args *ra, const moeq_config *cfg, const moeq_checkpoint *ck,
                      cli_linear *cl) {
    int rc = CLI_FAILED;
    moeq_error err;
    moeq_linear *lin = NULL;
    moeq_ctx *ctx = NULL;
    npy_array xin = {0};
    float *x = NULL, *out = NULL;
    double *ref = NULL;
    const char *layer = ra->layer;
    if (cli_linear_setup(cfg, ck, layer, ra->so, cl) != CLI_OK) goto done;
    const int32_t IN = cl->lc.in_features, OUT = cl->lc.out_features;
    double t0 = now_s();
    if (moeq_linear_create(&cl->lc, &lin, &err) != MOEQ_OK ||
        moeq_linear_load_checkpoint(lin, ck, NULL, &err) != MOEQ_OK ||
        moeq_linear_finalize(lin, &err) != MOEQ_OK) {
        cli_print_error(layer, &err);
        goto done;
    }
    cli_linear_describe(stdout, cl);
    printf("loaded in %.2f s\n", now_s() - t0);
    int64_t T = ra->tokens;
    if (ra->in_path) {
        if (read_npy(ra->in_path, MOEQ_DTYPE_F32, -1, IN, &xin, "the input") != 0) goto done;
        T = xin.shape[0];
        x = xin.data;
    } else {
        x = malloc((size_t)T * (size_t)IN * sizeof(float));
        if (!x) goto done;
        for (int64_t i = 0; i < T * IN; i++) x[i] = normal();
    }
    moeq_ctx_options co = {(int32_t)ra->threads, 0};
    if (moeq_ctx_create(&co, &ctx, &err) != MOEQ_OK) {
        cli_print_error("context", &err);
        goto done;
    }
    out = malloc((size_t)T * (size_t)OUT * sizeof(float));
    if (!out) goto done;
    double best = HUGE_VAL, total = 0;
    int runs = 0;
    for (;;) {
        double a = now_s();
        if (moeq_linear_apply(lin, ctx, MOEQ_DTYPE_F32, x, T, MOEQ_DTYPE_F32, out, &err) !=
            MOEQ_OK) {
            cli_print_error(layer, &err);
            goto done;
        }
        double dt = now_s() - a;
        if (runs > 0 || ra->repeat == 1) { /* the first run warms caches */
            best = fmin(best, dt);
            total += dt;
        }
        runs++;
        if (ra->repeat ? runs >= ra->repeat + (ra->repeat > 1)
                       : (runs >= 3 && total > 0.5) || runs >= 50)
            break;
    }
    int timed = ra->repeat == 1 ? 1 : runs - 1;
    printf("apply: %lld tokens, %ld threads, %s kernels: %.3f ms per call (best of %d), %.3f ms "
           "per token\n",
           (long long)T, ra->threads, moeq_ctx_kernels(ctx), best * 1e3, timed,
           best * 1e3 / (double)T);
    if (ra->out_path) {
        int64_t shape[2] = {T, OUT};
        char msg[512];
        if (npy_write(ra->out_path, MOEQ_DTYPE_F32, 2, shape, out, msg, sizeof msg) != 0) {
            fprintf(stderr, "moeq: %s\n", msg);
            goto done;
        }
        printf("wrote %s (float32 [%lld, %d])\n", ra->out_path, (long long)T, (int)OUT);
    }
    if (ra->check) {
        ref = malloc((size_t)T * (size_t)OUT * sizeof(double));
        if (!ref) goto done;
        if (moeq_linear_apply_reference(lin, MOEQ_DTYPE_F32, x, T, ref, &err) != MOEQ_OK) {
            cli_print_error(layer, &err);
            goto done;
        }
        if (!check_output(out, ref, T * OUT, cl->res.input_activations)) goto done;
    }
    rc = CLI_OK;
done:
    if (!ra->in_path) free(x);
    npy_free(&xin);
    free(out);
    free(ref);
    moeq_ctx_destroy(ctx);
    moeq_linear_destroy(lin);
    return rc;
}

int cmd_run(int argc, char **argv) {
    const char *dir = NULL, *layer = NULL, *in_path = NULL, *logits_path = NULL, *ids_path = NULL,
               *w_path = NULL, *out_path = NULL;
    long tokens = 4, threads = sysconf(_SC_NPROCESSORS_ONLN), repeat = 0;
    long seed = 1;
    int check = 0, ep = 0, threads_given = 0;
    int32_t placement = MOEQ_EP_CONTIGUOUS;
    moeq_select_options so = {MOEQ_PLATFORM_CPU, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            run_usage(stdout);
            return CLI_OK;
        } else if (!strcmp(a, "--layer") && has) {
            layer = argv[++i];
        } else if (!strcmp(a, "--tokens") && has) {
            if (cli_parse_long("run", a, argv[++i], 1, 1000000, &tokens) != 0) return CLI_USAGE;
        } else if (!strcmp(a, "--input") && has) {
            in_path = argv[++i];
        } else if (!strcmp(a, "--router-logits") && has) {
            logits_path = argv[++i];
        } else if (!strcmp(a, "--topk-ids") && has) {
            ids_path = argv[++i];
        } else if (!strcmp(a, "--topk-weights") && has) {
            w_path = argv[++i];
        } else if (!strcmp(a, "-o") && has) {
            out_path = argv[++i];
        } else if (!strcmp(a, "--threads") && has) {
            if (cli_parse_long("run", a, argv[++i], 1, 256, &threads) != 0) return CLI_USAGE;
            threads_given = 1;
        } else if (!strcmp(a, "--repeat") && has) {
            if (cli_parse_long("run", a, argv[++i], 0, 1000000, &repeat) != 0) return CLI_USAGE;
        } else if (!strcmp(a, "--seed") && has) {
            if (cli_parse_long("run", a, argv[++i], 0, LONG_MAX, &seed) != 0) return CLI_USAGE;
        } else if (!strcmp(a, "--check")) {
            check = 1;
        } else if (!strcmp(a, "--platform") && has) {
            if (cli_parse_platform("run", argv[++i], &so.platform) != 0) return CLI_USAGE;
        } else if (!strcmp(a, "--prefer-mxint4")) {
            so.prefer_mxint4 = 1;
        } else if (!strcmp(a, "--ep")) {
            ep = 1;
            if (has && moeq_ep_placement_from_name(argv[i + 1]) >= 0) {
                placement = moeq_ep_placement_from_name(argv[++i]);
            }
        } else if (a[0] == '-' || dir) {
            fprintf(stderr, "moeq run: unexpected argument '%s'\n\n", a);
            run_usage(stderr);
            return CLI_USAGE;
        } else {
            dir = a;
        }
    }
    const char *problem = !dir                     ? "a MODEL_DIR is required"
                          : !layer                 ? "--layer PREFIX is required"
                          : !!ids_path != !!w_path ? "--topk-ids and --topk-weights go together"
                          : logits_path && ids_path
                              ? "give --router-logits or --topk-ids/--topk-weights, not both"
                              : NULL;
    if (problem) {
        fprintf(stderr, "moeq run: %s\n\n", problem);
        run_usage(stderr);
        return CLI_USAGE;
    }
    rng_state ^= (uint64_t)seed * 0xD1B54A32D192ED03ull;
    /* --ep: every rank prepares the same inputs and routing, then the ranks
     * agree that all of them could (cli_ep_all_ok) before the layer's
     * collectives; a rank that fails earlier says so at `done`. */
    int ep_agreed = 0;
    if (ep) {
        int r = cli_ep_start();
        if (r != CLI_OK) return r;
    }

    int rc = CLI_FAILED;
    moeq_error err;
    moeq_config *cfg = NULL;
    moeq_checkpoint *ck = NULL;
    moeq_moe *moe = NULL;
    moeq_ctx *ctx = NULL;
    npy_array xin = {0}, rl = {0}, ids_in = {0}, w_in = {0};
    float *x = NULL, *logits = NULL, *weights = NULL, *out = NULL;
    int32_t *ids = NULL;
    double *ref = NULL;
    if (!(cfg = cli_load_config(dir))) {
        rc = CLI_USAGE;
        goto done;
    }
    if (moeq_checkpoint_open(dir, &ck, &err) != MOEQ_OK) {
        cli_print_error(dir, &err);
        rc = CLI_USAGE;
        goto done;
    }
    const char *proj[3];
    int32_t found_experts = 0, has_bias = 0;
    if (scan_experts(cfg, ck, layer, proj, &found_experts, &has_bias) != 0) {
        /* not experts: a linear module, as moeq inspect tells them apart */
        cli_linear cl;
        if (!cli_linear_find(ck, layer, &cl)) {
            fprintf(stderr,
                    "moeq: %s: no tensor named %s.<expert>.<proj>.* (a MoE layer) or "
                    "%s.<param> (a linear module) in %s\n",
                    layer, layer, layer, dir);
            goto done;
        }
        if (ep || logits_path || ids_path) {
            fprintf(stderr,
                    "moeq run: %s is a linear module; --ep, --router-logits and "
                    "--topk-ids/--topk-weights are for MoE layers\n",
                    layer);
            rc = CLI_USAGE;
            goto done;
        }
        run_args ra = {dir, layer, in_path, out_path, tokens, threads, repeat, check, &so};
        rc = run_linear(&ra, cfg, ck, &cl);
        goto done;
    }
    moeq_model_moe mm;
    if (cli_model_moe(cfg, dir, &mm) != CLI_OK) goto done;
    int32_t E = mm.num_experts ? mm.num_experts : found_experts;
    /* a layer moe_sparsity_config prunes holds (and routes to) its retained experts */
    if (cli_layer_experts(cfg, layer, E, &E) != CLI_OK) goto done;
    if (E != (mm.num_experts ? mm.num_experts : found_experts)) {
        printf("moe_sparsity_config (prune): %s retains %d of %d experts\n", layer, (int)E,
               (int)(mm.num_experts ? mm.num_experts : found_experts));
    }
    int32_t top_k = mm.top_k, H = mm.hidden_size, I = mm.intermediate_size;
    if (!H || !I || (!top_k && !ids_path)) {
        fprintf(stderr,
                "moeq: %s/config.json lacks the hidden size, the experts' intermediate size or "
                "the experts per token (for %s: hidden_size, %s, %s)\n",
                dir, mm.family[0] ? mm.family : "this model", "moe_intermediate_size",
                "num_experts_per_tok");
        rc = CLI_USAGE;
        goto done;
    }
    if (E != found_experts) {
        fprintf(stderr,
                "moeq: warning: config.json says %d experts, the checkpoint holds %d for %s\n",
                (int)E, (int)found_experts, layer);
    }
    cli_print_routing(stdout, &mm);

    cli_moe_layer ml;
    if (cli_moe_layer_setup(cfg, &mm, layer, proj, E, H, I, has_bias, &so, &ml) != CLI_OK) {
        goto done;
    }
    ml.mc.apply_router_weight_on_input = mm.apply_router_weight_on_input;

    /* input */
    int64_t T = tokens;
    if (in_path) {
        if (read_npy(in_path, MOEQ_DTYPE_F32, -1, H, &xin, "the input") != 0) goto done;
        T = xin.shape[0];
        x = xin.data;
    } else {
        x = malloc((size_t)T * (size_t)H * sizeof(float));
        if (!x) goto done;
        for (int64_t i = 0; i < T * H; i++) x[i] = normal();
    }
    /* routing */
    if (ids_path) {
        if (read_npy(ids_path, MOEQ_DTYPE_I32, T, -1, &ids_in, "topk ids") != 0 ||
            read_npy(w_path, MOEQ_DTYPE_F32, T, ids_in.shape[1], &w_in, "topk weights") != 0) {
            goto done;
        }
        top_k = (int32_t)ids_in.shape[1];
        ids = ids_in.data;
        weights = w_in.data;
    } else {
        logits = malloc((size_t)T * (size_t)E * sizeof(float));
        ids = malloc((size_t)T * (size_t)top_k * sizeof(int32_t));
        weights = malloc((size_t)T * (size_t)top_k * sizeof(float));
        if (!logits || !ids || !weights) goto done;
        const char *source = "random";
        char parent[512];
        snprintf(parent, sizeof parent, "%s", layer);
        char *dot = strrchr(parent, '.');
        if (dot) *dot = '\0';
        const bool has_router = router_parent(ck, parent, mm.router);
        if (logits_path) {
            if (read_npy(logits_path, MOEQ_DTYPE_F32, T, E, &rl, "router logits") != 0) goto done;
            memcpy(logits, rl.data, (size_t)T * (size_t)E * sizeof(float));
            source = logits_path;
        } else {
            int with_bias = 0;
            int r = has_router
                        ? router_logits(ck, parent, mm.router, x, T, E, H, logits, &with_bias)
                        : 0;
            if (r < 0) goto done;
            if (r > 0) {
                source = with_bias ? "the router weight and bias" : "the router weight";
            } else {
                fprintf(stderr,
                        "moeq: warning: %s has no router %s.%s.weight (nor one level up); "
                        "routing random logits (give --router-logits R.npy)\n",
                        dir, parent, mm.router);
                for (int64_t i = 0; i < T * E; i++) logits[i] = normal();
            }
        }
        moeq_route_config rc_route;
        moeq_model_moe_route(&mm, &rc_route);
        rc_route.num_experts = E;
        rc_route.top_k = top_k;
        float *bias_f = NULL;
        if (mm.correction_bias[0]) {
            char bias_name[600];
            snprintf(bias_name, sizeof bias_name, "%s.%s", parent, mm.correction_bias);
            int bad;
            bias_f = read_vector(ck, bias_name, E, &bad);
            if (bad) goto done;
            rc_route.correction_bias = bias_f;
        }
        moeq_status st = moeq_route(&rc_route, logits, T, ids, weights, &err);
        free(bias_f);
        if (st != MOEQ_OK) {
            cli_print_error("routing", &err);
            goto done;
        }
        printf("routing: %s logits, %s, top-%d%s%s%s\n", source,
               rc_route.scoring ? "sigmoid" : "softmax", (int)top_k,
               rc_route.renormalize ? ", renormalized" : "",
               rc_route.correction_bias ? ", correction bias" : "",
               mm.apply_router_weight_on_input ? ", weight applied to the input" : "");
    }

    if (ep) {
        ep_agreed = 1;
        if (!cli_ep_all_ok(1)) goto done;
        cli_ep_job job = {layer,
                          ck,
                          &ml.mc,
                          placement,
                          moeq_scheme_name(ml.sel.scheme),
                          E,
                          H,
                          I,
                          x,
                          T,
                          top_k,
                          ids,
                          weights,
                          threads_given ? threads : 0,
                          repeat,
                          out_path,
                          check};
        rc = cli_ep_run(&job);
        goto done;
    }
    double t0 = now_s();
    if (moeq_moe_create(&ml.mc, &moe, &err) != MOEQ_OK ||
        moeq_moe_load_finalize(moe, ck, layer, (int32_t)threads, isatty(2) ? progress_cb : NULL,
                               NULL, &err) != MOEQ_OK) {
        cli_print_error(layer, &err);
        goto done;
    }
    double load_s = now_s() - t0;
    printf("%s: %s, %d experts, hidden %d, intermediate %d, loaded in %.2f s\n", layer,
           moeq_scheme_name(ml.sel.scheme), (int)E, (int)H, (int)I, load_s);

    /* run and time */
    moeq_ctx_options co = {(int32_t)threads, 0};
    if (moeq_ctx_create(&co, &ctx, &err) != MOEQ_OK) {
        cli_print_error("context", &err);
        goto done;
    }
    out = malloc((size_t)T * (size_t)H * sizeof(float));
    if (!out) goto done;
    double best = HUGE_VAL, total = 0;
    int runs = 0;
    for (;;) {
        double a = now_s();
        if (moeq_moe_apply(moe, ctx, MOEQ_DTYPE_F32, x, T, top_k, ids, weights, MOEQ_DTYPE_F32, out,
                           &err) != MOEQ_OK) {
            cli_print_error(layer, &err);
            goto done;
        }
        double dt = now_s() - a;
        if (runs > 0 || repeat == 1) { /* the first run warms caches */
            best = fmin(best, dt);
            total += dt;
        }
        runs++;
        if (repeat ? runs >= repeat + (repeat > 1) : (runs >= 3 && total > 0.5) || runs >= 50)
            break;
    }
    int timed = repeat == 1 ? 1 : runs - 1;
    printf("apply: %lld tokens, %ld threads, %s kernels: %.3f ms per call (best of %d), %.3f ms "
           "per token\n",
           (long long)T, threads, moeq_ctx_kernels(ctx), best * 1e3, timed, best * 1e3 / (double)T);
    if (out_path) {
        int64_t shape[2] = {T, H};
        char msg[512];
        if (npy_write(out_path, MOEQ_DTYPE_F32, 2, shape, out, msg, sizeof msg) != 0) {
            fprintf(stderr, "moeq: %s\n", msg);
            goto done;
        }
        printf("wrote %s (float32 [%lld, %d])\n", out_path, (long long)T, (int)H);
    }
    if (check) {
        ref = malloc((size_t)T * (size_t)H * sizeof(double));
        if (!ref) goto done;
        if (moeq_moe_apply_reference(moe, MOEQ_DTYPE_F32, x, T, top_k, ids, weights, ref, &err) !=
            MOEQ_OK) {
            cli_print_error(layer, &err);
            goto done;
        }
        if (!check_output(out, ref, T * H, ml.res.input_activations)) goto done;
    }
    rc = CLI_OK;
done:
    if (ep) {
        if (!ep_agreed) cli_ep_all_ok(0); /* the others wait for this rank's word */
        cli_ep_stop();
    }
    if (!in_path) free(x);
    npy_free(&xin);
    npy_free(&rl);
    npy_free(&ids_in);
    npy_free(&w_in);
    if (!ids_path) {
        free(ids);
        free(weights);
    }
    free(logits);
    free(out);
    free(ref);
    moeq_ctx_destroy(ctx);
    moeq_moe_destroy(moe);
    moeq_checkpoint_close(ck);
    moeq_config_destroy(cfg);
    return rc;
}

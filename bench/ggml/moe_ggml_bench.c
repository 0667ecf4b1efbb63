/*
 * moe_ggml_bench.c - moeq's MoE layer side by side with llama.cpp's ggml on
 * the same layer (moe_bench's: 128 experts, top-8, hidden 2048,
 * intermediate 768), in one process, the two interleaved call by call.
 *
 * Pairs (the nearest ggml format to each moeq scheme):
 *   q4_0, q4_K  vs wna16 (int4, groups of 128, bf16 activations)
 *   q8_0        vs w8a8_int8 (int8 per channel, int8 per-token activations)
 *   mxfp4       vs w4a16_mxfp4
 *   nvfp4       vs w4a4_nvfp4 (where this ggml has the type)
 * ggml runs its expert FFN as llama.cpp builds it: mul_mat_id for up and
 * gate, swiglu, mul_mat_id for down, the top-k outputs weighted and added.
 * Its weights sit where llama.cpp puts them by default: the CPU backend's
 * repack buffer (GGML_CPU_REPACK) where that buffer runs mul_mat_id on the
 * type, the plain CPU buffer elsewhere (the "buffer" column).  Its
 * activations are f32 (ggml's), moeq's bf16 (its API's); both write their
 * own output type.
 *
 * Cold weights for both: two layers of each are cycled (each far above the
 * L3) and every call has its own routing draw, the same draw for the two
 * libraries.  Calls alternate (moeq first on even reps, ggml first on odd),
 * each after a 5 ms sleep so that neither library's spinning workers (ggml:
 * OpenMP's) take the other's CPUs.  Figures: median ms per layer call,
 * and moeq's median over ggml's (< 1: moeq faster).
 *
 * ggml weights: a few distinct experts quantized by ggml_quantize_chunk from
 * random floats, copied round the 128 experts.  moeq weights: random codes
 * and valid scales (bench_layer.h).
 *
 * usage: moe_ggml_bench [--json] [--threads N] [--tokens T] [--pair NAME] [--reps N]
 *                       [--no-repack]  (ggml's weights in the plain CPU buffer always)
 * Prints figures; asserts nothing.
 */
#include <errno.h>
#include <math.h>
#include <time.h>

#include "bench_layer.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

typedef struct pair_def {
    const char *ggml_type; /* ggml_type_name */
    const char *scheme;    /* k_schemes */
} pair_def;

static const pair_def k_pairs[] = {
    {"q4_0", "wna16"},         {"q4_K", "wna16"},       {"q8_0", "w8a8_int8"},
    {"mxfp4", "w4a16_mxfp4"}, {"nvfp4", "w4a4_nvfp4"},
};

enum { LAYERS = 2, NDIST = 4 };

static bool ggml_type_by_name(const char *name, enum ggml_type *out) {
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const char *n = ggml_type_name((enum ggml_type)t);
        if (n && strcmp(n, name) == 0 && ggml_get_type_traits((enum ggml_type)t)->blck_size > 0) {
            *out = (enum ggml_type)t;
            return true;
        }
    }
    return false;
}

typedef struct glayer {
    struct ggml_context *ctx;
    ggml_backend_buffer_t buf;
    struct ggml_tensor *gate, *up, *down;
    bool repack;
} glayer;

/* The CPU device's repack buffer type (an extra buffer type named
 * CPU_REPACK), or NULL. */
static bool g_no_repack; /* --no-repack */

static ggml_backend_buffer_type_t repack_buft(void) {
    if (g_no_repack) return NULL;
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    ggml_backend_reg_t reg = dev ? ggml_backend_dev_backend_reg(dev) : NULL;
    if (!reg) return NULL;
    void *fn = ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    if (!fn) return NULL;
    ggml_backend_dev_get_extra_bufts_t get; /* ISO C: no cast from object to function pointer */
    memcpy(&get, &fn, sizeof get);
    for (ggml_backend_buffer_type_t *b = get(dev); b && *b; b++) {
        if (strstr(ggml_backend_buft_name(*b), "REPACK")) return *b;
    }
    return NULL;
}

/* Fills t ([cols, rows, E]) with NDIST experts quantized from random floats,
 * copied round the experts, in one set (a repack buffer takes whole tensors). */
static void fill_tensor(struct ggml_tensor *t) {
    const int64_t cols = t->ne[0], rows = t->ne[1], E = t->ne[2];
    const size_t per = ggml_row_size(t->type, cols) * (size_t)rows;
    uint8_t *all = malloc(per * (size_t)E);
    float *f = malloc(sizeof(float) * (size_t)(cols * rows));
    if (!all || !f) {
        fprintf(stderr, "moe_ggml_bench: out of memory for %s\n", ggml_get_name(t));
        exit(1);
    }
    for (int d = 0; d < NDIST && d < E; d++) {
        for (int64_t i = 0; i < cols * rows; i++) f[i] = (float)(0.04 * (uni() - 0.5));
        ggml_quantize_chunk(t->type, f, all + per * (size_t)d, 0, rows, cols, NULL);
    }
    for (int64_t e = NDIST; e < E; e++) memcpy(all + per * (size_t)e, all + per * (size_t)(e % NDIST), per);
    ggml_backend_tensor_set(t, all, 0, per * (size_t)E);
    free(f);
    free(all);
}

static void glayer_alloc(glayer *g, enum ggml_type type, ggml_backend_buffer_type_t buft) {
    struct ggml_init_params ip = {8 * ggml_tensor_overhead(), NULL, true};
    g->ctx = ggml_init(ip);
    g->gate = ggml_new_tensor_3d(g->ctx, type, g_H, g_I, g_E);
    g->up = ggml_new_tensor_3d(g->ctx, type, g_H, g_I, g_E);
    g->down = ggml_new_tensor_3d(g->ctx, type, g_I, g_H, g_E);
    ggml_set_name(g->gate, "gate_exps");
    ggml_set_name(g->up, "up_exps");
    ggml_set_name(g->down, "down_exps");
    g->buf = ggml_backend_alloc_ctx_tensors_from_buft(g->ctx, buft);
    if (!g->buf) {
        fprintf(stderr, "moe_ggml_bench: could not allocate a %s layer\n", ggml_type_name(type));
        exit(1);
    }
    ggml_backend_buffer_set_usage(g->buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
}

static void glayer_free(glayer *g) {
    ggml_backend_buffer_free(g->buf);
    ggml_free(g->ctx);
}

/* One call's graph on layer g for T tokens. */
typedef struct ggraph {
    struct ggml_context *ctx;
    struct ggml_cgraph *gf;
    ggml_gallocr_t alloc;
    struct ggml_tensor *x, *ids, *w, *out;
    struct ggml_tensor *mm[3];
} ggraph;

static void ggraph_build(ggraph *G, const glayer *g, int T) {
    struct ggml_init_params ip = {64 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true};
    G->ctx = ggml_init(ip);
    struct ggml_context *c = G->ctx;
    G->x = ggml_new_tensor_2d(c, GGML_TYPE_F32, g_H, T);
    G->ids = ggml_new_tensor_2d(c, GGML_TYPE_I32, TOPK, T);
    G->w = ggml_new_tensor_3d(c, GGML_TYPE_F32, 1, TOPK, T);
    ggml_set_input(G->x);
    ggml_set_input(G->ids);
    ggml_set_input(G->w);
    struct ggml_tensor *cur = ggml_reshape_3d(c, G->x, g_H, 1, T);
    struct ggml_tensor *up = ggml_mul_mat_id(c, g->up, cur, G->ids);     /* [I, k, T] */
    struct ggml_tensor *gate = ggml_mul_mat_id(c, g->gate, cur, G->ids); /* [I, k, T] */
    struct ggml_tensor *act = ggml_swiglu_split(c, gate, up);
    struct ggml_tensor *down = ggml_mul_mat_id(c, g->down, act, G->ids); /* [H, k, T] */
    G->mm[0] = up;
    G->mm[1] = gate;
    G->mm[2] = down;
    down = ggml_mul(c, down, G->w);
    struct ggml_tensor *sum = NULL;
    for (int k = 0; k < TOPK; k++) {
        struct ggml_tensor *v = ggml_view_2d(c, down, g_H, T, down->nb[2], (size_t)k * down->nb[1]);
        sum = sum ? ggml_add(c, sum, v) : v;
    }
    G->out = sum;
    ggml_set_output(sum);
    G->gf = ggml_new_graph(c);
    ggml_build_forward_expand(G->gf, sum);
    G->alloc = ggml_gallocr_new(ggml_backend_cpu_buffer_type());
    if (!ggml_gallocr_alloc_graph(G->alloc, G->gf)) {
        fprintf(stderr, "moe_ggml_bench: could not allocate a graph (T=%d)\n", T);
        exit(1);
    }
}

static void ggraph_free(ggraph *G) {
    ggml_gallocr_free(G->alloc);
    ggml_free(G->ctx);
}

/* Builds a layer of `type` in the repack buffer where the CPU backend runs
 * its mul_mat_id from there (as llama.cpp places weights), else in the
 * plain CPU buffer. */
static void glayer_build(glayer *g, enum ggml_type type, ggml_backend_t be) {
    ggml_backend_buffer_type_t rb = repack_buft();
    if (rb) {
        glayer_alloc(g, type, rb);
        ggraph G;
        ggraph_build(&G, g, 32);
        bool ok = true;
        for (int i = 0; i < 3; i++) ok &= ggml_backend_supports_op(be, G.mm[i]);
        ggraph_free(&G);
        if (ok) {
            g->repack = true;
            fill_tensor(g->gate);
            fill_tensor(g->up);
            fill_tensor(g->down);
            return;
        }
        glayer_free(g);
    }
    glayer_alloc(g, type, ggml_backend_cpu_buffer_type());
    g->repack = false;
    fill_tensor(g->gate);
    fill_tensor(g->up);
    fill_tensor(g->down);
}

static bool int_arg(const char *opt, const char *arg, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (errno || end == arg || *end || v < lo || v > hi) {
        fprintf(stderr, "moe_ggml_bench: %s '%s': expected an integer from %d to %d\n", opt, arg,
                lo, hi);
        return false;
    }
    *out = (int)v;
    return true;
}

static void nap(void) {
    nanosleep(&(struct timespec){0, 5000000}, NULL);
}

int main(int argc, char **argv) {
    g_prog = "moe_ggml_bench";
    int json = 0, threads = 2, tokens = 0, reps_opt = 0;
    const char *pair = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (!int_arg(argv[i], argv[i + 1], 1, 64, &threads)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) {
            if (!int_arg(argv[i], argv[i + 1], 1, 512, &tokens)) return 2;
            i++;
            if (tokens != 1 && tokens != 32 && tokens != 512) {
                fprintf(stderr, "moe_ggml_bench: --tokens %d: the cases are 1, 32 and 512\n",
                        tokens);
                return 2;
            }
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            if (!int_arg(argv[i], argv[i + 1], 1, MAX_REPS, &reps_opt)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--no-repack")) {
            g_no_repack = true;
        } else if (!strcmp(argv[i], "--pair") && i + 1 < argc) {
            pair = argv[++i];
        } else {
            fprintf(stderr, "usage: moe_ggml_bench [--json] [--threads N] [--tokens T] "
                            "[--pair GGML_TYPE] [--reps N] [--no-repack]\n");
            return 2;
        }
    }
    const size_t npairs = sizeof k_pairs / sizeof k_pairs[0];
    if (pair) {
        size_t p = 0;
        while (p < npairs && strcmp(pair, k_pairs[p].ggml_type) != 0) p++;
        if (p == npairs) {
            fprintf(stderr, "moe_ggml_bench: no pair '%s'; the pairs (by ggml type):", pair);
            for (p = 0; p < npairs; p++) fprintf(stderr, " %s", k_pairs[p].ggml_type);
            fprintf(stderr, "\n");
            return 2;
        }
    }
    ggml_backend_t be = ggml_backend_cpu_init();
    if (!be) {
        fprintf(stderr, "moe_ggml_bench: ggml's CPU backend did not start\n");
        return 1;
    }
    ggml_backend_cpu_set_n_threads(be, threads);
    moeq_ctx *mctx = NULL;
    moeq_ctx_options co = {threads, 0};
    moeq_error err;
    if (moeq_ctx_create(&co, &mctx, &err) != MOEQ_OK) die("ctx", &err);

    const int Ts[] = {1, 32, 512};
    const int maxT = 512;
    float *xf = malloc(sizeof(float) * (size_t)maxT * (size_t)g_H);
    uint16_t *xb = malloc(sizeof(uint16_t) * (size_t)maxT * (size_t)g_H);
    uint16_t *out = malloc(sizeof(uint16_t) * (size_t)maxT * (size_t)g_H);
    for (size_t i = 0; i < (size_t)maxT * (size_t)g_H; i++) {
        xb[i] = moeq__f32_to_bf16((float)(2 * uni() - 1));
        xf[i] = moeq__bf16_to_f32(xb[i]);
    }
    if (!json) {
        printf("layer: %d experts, top-%d, hidden %d, intermediate %d; %d threads; moeq kernels "
               "%s; ggml %s\n",
               g_E, TOPK, g_H, g_I, threads, moeq__kern_best(false)->name,
               ggml_cpu_has_avx512() ? "avx512" : ggml_cpu_has_avx2() ? "avx2" : "scalar");
        printf("%-6s %-12s %-7s %5s %10s %10s %8s %10s %10s\n", "ggml", "moeq", "buffer", "T",
               "ggml_ms", "moeq_ms", "ratio", "ggml_B/w", "moeq_B/w");
    }
    for (size_t p = 0; p < npairs; p++) {
        const pair_def *pd = &k_pairs[p];
        if (pair && strcmp(pair, pd->ggml_type) != 0) continue;
        enum ggml_type type;
        if (!ggml_type_by_name(pd->ggml_type, &type) ||
            !ggml_get_type_traits_cpu(type)->vec_dot) {
            fprintf(stderr, "moe_ggml_bench: this ggml has no CPU %s; pair skipped\n",
                    pd->ggml_type);
            continue;
        }
        const scheme_def *s = NULL;
        for (size_t i = 0; i < sizeof k_schemes / sizeof k_schemes[0]; i++) {
            if (!strcmp(k_schemes[i].name, pd->scheme)) s = &k_schemes[i];
        }
        glayer G[LAYERS];
        moeq_moe *L[LAYERS];
        moeq_config *C[LAYERS];
        for (int i = 0; i < LAYERS; i++) {
            glayer_build(&G[i], type, be);
            L[i] = build_layer(s, &C[i]);
        }
        const double gbpw = (double)ggml_row_size(type, g_H) / g_H;
        const double mbpw = (double)moeq__moe_expert_bytes(L[0], 0) / (3.0 * g_H * g_I);
        for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
            const int T = Ts[ti];
            if (tokens && tokens != T) continue;
            const int reps = reps_opt ? reps_opt : T == 1 ? 51 : T == 32 ? 9 : 3;
            ggraph GG[LAYERS];
            for (int i = 0; i < LAYERS; i++) ggraph_build(&GG[i], &G[i], T);
            int32_t *ids = malloc(sizeof(int32_t) * (size_t)T * TOPK);
            float *wts = malloc(sizeof(float) * (size_t)T * TOPK);
            double tg[MAX_REPS + 2], tm[MAX_REPS + 2];
            for (int r = 0; r < reps + 2; r++) {
                draw_routing(T, ids, wts);
                const int li = r % LAYERS;
                ggraph *gg = &GG[li];
                ggml_backend_tensor_set(gg->x, xf, 0, sizeof(float) * (size_t)T * (size_t)g_H);
                ggml_backend_tensor_set(gg->ids, ids, 0, sizeof(int32_t) * (size_t)T * TOPK);
                ggml_backend_tensor_set(gg->w, wts, 0, sizeof(float) * (size_t)T * TOPK);
                for (int k = 0; k < 2; k++) {
                    const bool ggml_now = (k == 0) == (r % 2 == 1);
                    nap();
                    const double t0 = bench_now();
                    if (ggml_now) {
                        if (ggml_backend_graph_compute(be, gg->gf) != GGML_STATUS_SUCCESS) {
                            fprintf(stderr, "moe_ggml_bench: ggml compute failed\n");
                            return 1;
                        }
                        tg[r] = bench_now() - t0;
                    } else {
                        if (moeq_moe_apply(L[li], mctx, MOEQ_DTYPE_BF16, xb, T, TOPK, ids, wts,
                                           MOEQ_DTYPE_BF16, out, &err) != MOEQ_OK)
                            die("apply", &err);
                        tm[r] = bench_now() - t0;
                    }
                }
            }
            const double gms = median(tg + 2, reps) * 1e3, mms = median(tm + 2, reps) * 1e3;
            if (json) {
                printf("{\"ggml_type\": \"%s\", \"scheme\": \"%s\", \"ggml_buffer\": \"%s\", "
                       "\"tokens\": %d, \"threads\": %d, \"ggml_ms\": %.4f, \"moeq_ms\": %.4f, "
                       "\"moeq_over_ggml\": %.4f, \"ggml_bytes_per_weight\": %.4f, "
                       "\"moeq_bytes_per_weight\": %.4f, \"reps\": %d}\n",
                       pd->ggml_type, pd->scheme, G[0].repack ? "repack" : "cpu", T, threads, gms,
                       mms, mms / gms, gbpw, mbpw, reps);
            } else {
                printf("%-6s %-12s %-7s %5d %10.3f %10.3f %8.2f %10.4f %10.4f\n", pd->ggml_type,
                       pd->scheme, G[0].repack ? "repack" : "cpu", T, gms, mms, mms / gms, gbpw,
                       mbpw);
            }
            fflush(stdout);
            for (int i = 0; i < LAYERS; i++) ggraph_free(&GG[i]);
            free(ids);
            free(wts);
        }
        for (int i = 0; i < LAYERS; i++) {
            glayer_free(&G[i]);
            moeq_moe_destroy(L[i]);
            moeq_config_destroy(C[i]);
        }
    }
    moeq_ctx_destroy(mctx);
    ggml_backend_free(be);
    free(xf);
    free(xb);
    free(out);
    return 0;
}

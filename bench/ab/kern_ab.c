/*
 * kern_ab.c - one MoE layer on two kernel tables, call by call in one
 * process: the library's ("new") and one built from another kernel file
 * ("old").  By default the tables are avx2 ones, the old one built from the
 * kern_avx2.c CMake's MOEQ_AB_KERNELS names; with --avx512 they are avx512
 * ones, the old one the library's AVX2 table with the AVX-512 kernels of the
 * kern_avx512.c MOEQ_AB_KERNELS512 names (as the library builds its own).
 * Both default to the tree's own files: an A/A run.  An old file must
 * define every entry the table has now: a kern_avx2.c from before
 * idot_blocks and idot_groups leaves them NULL (add the two, as
 * kernels.h describes them, to compare it); a kern_avx512.c without them
 * leaves the AVX2 table's, whose int8 path runs the AVX2 idot.  Two
 * contexts run the same layers, each with its table; the calls alternate,
 * and which table goes first alternates too, so that the host's drift
 * falls on both.  The tables must agree bit for bit (kernels.h), so after
 * every pair the two outputs are compared.
 *
 * With --bf16-path both contexts run the library's best table and the
 * driver's two paths are compared instead: "old" takes the bfloat16 path
 * (MOEQ_BF16_PATH=on), "new" the float path (off).  Their sums are rounded
 * in other orders, and where the scheme quantizes the intermediate again
 * (FP8 activations) an element can round to the next code, so the outputs
 * are compared within 2^-5 of the largest |output|, not bit for bit
 * (w8a8_fp8 on an Intel Xeon: up to 0.01; weight-only: 0.004).
 *
 * usage: kern_ab [--avx512 | --bf16-path] SCHEME T [THREADS [PAIRS]]
 *        (THREADS default 2, PAIRS 9)
 *
 * Prints the median time of each table and the quartiles of the per-pair
 * ratios new / old.  Exit status 0; 1 when the outputs differed or a step
 * failed (stderr says which); 2 on bad arguments; 77 where this CPU (or,
 * for --avx512, this build) has no such table.  No timing is asserted.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_layer.h"

extern const moeq__kern moeq__kern_ab_old;
#if defined(MOEQ_HAVE_AVX512) && MOEQ_HAVE_AVX512
void moeq__kern_ab_old512_fill(moeq__kern *t, bool bf16);
#endif

int main(int argc, char **argv) {
    g_prog = "kern_ab";
    const bool avx512 = argc > 1 && !strcmp(argv[1], "--avx512");
    const bool paths = argc > 1 && !strcmp(argv[1], "--bf16-path");
    if (avx512 || paths) {
        argc--;
        argv++;
    }
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: kern_ab [--avx512 | --bf16-path] SCHEME T [THREADS [PAIRS]]\n");
        return 2;
    }
    const scheme_def *s = NULL;
    for (size_t i = 0; i < sizeof k_schemes / sizeof k_schemes[0]; i++) {
        if (!strcmp(k_schemes[i].name, argv[1])) s = &k_schemes[i];
    }
    if (!s) {
        fprintf(stderr, "kern_ab: no scheme '%s'; the schemes:", argv[1]);
        for (size_t i = 0; i < sizeof k_schemes / sizeof k_schemes[0]; i++)
            fprintf(stderr, " %s", k_schemes[i].name);
        fprintf(stderr, "\n");
        return 2;
    }
    int T, threads = 2, pairs = 9;
    if (!bench_int_opt("kern_ab", "T", argv[2], 1, 4096, &T) ||
        (argc > 3 && !bench_int_opt("kern_ab", "THREADS", argv[3], 1, 256, &threads)) ||
        (argc > 4 && !bench_int_opt("kern_ab", "PAIRS", argv[4], 1, MAX_REPS, &pairs)))
        return 2;
    const moeq__kern *tabs[2] = {&moeq__kern_ab_old, moeq__kern_level(1)};
    if (avx512) {
#if defined(MOEQ_HAVE_AVX512) && MOEQ_HAVE_AVX512
        static moeq__kern old512;
        old512 = moeq__kern_avx2;
        moeq__kern_ab_old512_fill(&old512, moeq__cpu_avx512bf16());
        tabs[0] = &old512;
        tabs[1] = moeq__kern_level(2);
#else
        fprintf(stderr, "kern_ab: this build has no avx512 table\n");
        return 77;
#endif
    }
    if (paths) tabs[0] = tabs[1] = moeq__kern_best(false);
    if (!paths && strcmp(tabs[1]->name, avx512 ? "avx512" : "avx2") != 0) {
        fprintf(stderr, "kern_ab: this CPU does not run the %s table\n",
                avx512 ? "avx512" : "avx2");
        return 77;
    }

    /* Cold weights: the layers are cycled, as moe_bench does. */
    const int layers = cold_layers(s);
    moeq_moe *L[MAX_LAYERS];
    moeq_config *C[MAX_LAYERS];
    for (int i = 0; i < layers; i++) L[i] = build_layer(s, &C[i]);
    moeq_ctx *ctx[2];
    moeq_error err;
    const moeq_ctx_options co = {threads, 0};
    for (int v = 0; v < 2; v++) {
        if (moeq_ctx_create(&co, &ctx[v], &err) != MOEQ_OK) die("ctx", &err);
        ctx[v]->kern = tabs[v];
        if (paths) ctx[v]->bf16_path = v == 0;
    }

    const int draws = pairs + 2; /* the first two pairs warm up */
    const size_t n_out = (size_t)T * (size_t)g_H;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(T * TOPK * draws));
    float *wts = malloc(sizeof(float) * (size_t)(T * TOPK * draws));
    uint16_t *x = malloc(sizeof(uint16_t) * n_out);
    uint16_t *out[2] = {malloc(sizeof(uint16_t) * n_out), malloc(sizeof(uint16_t) * n_out)};
    double *t[2] = {malloc(sizeof(double) * (size_t)pairs), malloc(sizeof(double) * (size_t)pairs)};
    double *ratio = malloc(sizeof(double) * (size_t)pairs);
    if (!ids || !wts || !x || !out[0] || !out[1] || !t[0] || !t[1] || !ratio) {
        fprintf(stderr, "kern_ab: out of memory\n");
        return 1;
    }
    for (int d = 0; d < draws; d++) draw_routing(T, ids + d * T * TOPK, wts + d * T * TOPK);
    for (size_t i = 0; i < n_out; i++) x[i] = moeq__f32_to_bf16((float)(2 * uni() - 1));

    int differ = 0;
    double dmax = 0; /* --bf16-path: the largest |new - old| / max |old| of a pair */
    for (int d = 0; d < draws; d++) {
        moeq_moe *layer = L[d % layers];
        for (int k = 0; k < 2; k++) {
            const int v = (k + d) % 2;
            const double t0 = bench_now();
            if (moeq_moe_apply(layer, ctx[v], MOEQ_DTYPE_BF16, x, T, TOPK, ids + d * T * TOPK,
                               wts + d * T * TOPK, MOEQ_DTYPE_BF16, out[v], &err) != MOEQ_OK)
                die("apply", &err);
            if (d >= 2) t[v][d - 2] = bench_now() - t0;
        }
        if (paths) {
            double amax = 0, d_ = 0;
            for (size_t i = 0; i < n_out; i++) {
                const double a = (double)moeq__bf16_to_f32(out[0][i]);
                const double b = (double)moeq__bf16_to_f32(out[1][i]);
                amax = fmax(amax, fabs(a));
                d_ = fmax(d_, fabs(b - a));
            }
            const double rel = amax > 0 ? d_ / amax : d_;
            dmax = fmax(dmax, rel);
            if (!(rel <= 0x1p-5)) differ++;
        } else if (memcmp(out[0], out[1], sizeof(uint16_t) * n_out) != 0) {
            differ++;
        }
        if (d >= 2) ratio[d - 2] = t[1][d - 2] / t[0][d - 2];
    }
    const double m_old = median(t[0], pairs), m_new = median(t[1], pairs);
    qsort(ratio, (size_t)pairs, sizeof *ratio, cmp_double);
    char agree[64];
    if (paths) {
        snprintf(agree, sizeof agree, "%s (largest |float - bf16| %.2g of max |out|)",
                 differ ? "DIFFER" : "agree", dmax);
    } else {
        snprintf(agree, sizeof agree, "%s", differ ? "DIFFER" : "equal bit for bit");
    }
    printf("%s T=%d, %d thread%s, %d pairs%s: old %.3f ms, new %.3f ms (medians); new/old per "
           "pair %.3f / %.3f / %.3f (quartiles); outputs %s\n",
           s->name, T, threads, threads == 1 ? "" : "s", pairs,
           paths ? " (old: bfloat16 path, new: float path)" : "", 1e3 * m_old, 1e3 * m_new,
           ratio[pairs / 4], median(ratio, pairs), ratio[(3 * pairs) / 4], agree);
    if (differ) fprintf(stderr, "kern_ab: the outputs differed in %d of %d pairs\n", differ, draws);

    for (int v = 0; v < 2; v++) {
        moeq_ctx_destroy(ctx[v]);
        free(out[v]);
        free(t[v]);
    }
    for (int i = 0; i < layers; i++) {
        moeq_moe_destroy(L[i]);
        moeq_config_destroy(C[i]);
    }
    free(ids);
    free(wts);
    free(x);
    free(ratio);
    return differ ? 1 : 0;
}

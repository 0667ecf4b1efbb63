/*
 * kern_bench.c - throughput of the fast kernels alone, one thread: gemv
 * (M = 1..4 tokens; gemv_bf16 on the same rows as bfloat16 next to it),
 * the float and bfloat16 panel decodes and the f32 tile (and the bfloat16
 * path's tile_bf16), for each code kind, on a weight that stays in L2 ("hot") and
 * on one far above L3 ("cold"), with the cold weight's read rate by loads
 * alone next to gemv's; the panel and
 * tile steps in situ (32 tokens) for int4 and E4M3 codes, and the int8
 * path's idot_groups in situ for I8 codes (hot and cold).  With the avx512
 * table, panel, panel_bf16, gemv, idot and fdot also run for the AVX2 table in
 * the same loops.
 * Prints figures; asserts nothing.
 *
 * usage: kern_bench [portable]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"
#include "kernels.h"

static uint64_t g_rng = 88172645463325252ull;
static uint64_t rnd(void) {
    return bench_xorshift(&g_rng);
}

typedef struct wt {
    moeq__packed pk;
    uint8_t *mem;
} wt;

static float g_gdiv; /* > 0: NVFP4-style scales e4m3(b) / g_gdiv; < 0: MX powers of two */

/* A packed [rows, cols] weight of `kind` with random codes and scales. */
static void make(int kind, size_t rows, size_t cols, size_t gs, wt *w) {
    moeq__qweight q;
    memset(&q, 0, sizeof q);
    q.rows = rows;
    q.cols = cols;
    size_t cb = kind == MOEQ__QW_INT4_NIBBLES || kind == MOEQ__QW_E2M1 ? cols / 2 : cols;
    uint8_t *codes = malloc(rows * cb);
    for (size_t i = 0; i < rows * cb; i++) codes[i] = (uint8_t)rnd();
    if (kind == MOEQ__QW_E4M3) {
        for (size_t i = 0; i < rows * cb; i++) {
            if ((codes[i] & 0x7F) == 0x7F) codes[i] = 0x10;
        }
    }
    q.kind = kind;
    q.codes = codes;
    q.row_stride = cb;
    q.grid.rows = rows;
    q.grid.cols = cols / gs;
    q.grid.row_block = 1;
    q.grid.col_block = gs;
    float *scale = malloc(sizeof(float) * rows * (cols / gs));
    for (size_t i = 0; i < rows * (cols / gs); i++) {
        if (g_gdiv > 0) {
            scale[i] = moeq__e4m3_to_f32((uint8_t)(0x20 + rnd() % 0x40)) / g_gdiv;
        } else if (g_gdiv < 0) {
            scale[i] = ldexpf(1.0f, -(int)(rnd() % 10));
        } else {
            scale[i] = moeq__bf16_to_f32(moeq__f32_to_bf16((float)(rnd() % 1000 + 1) * 1e-4f));
        }
    }
    q.scale = scale;
    if (!moeq__pk_plan(&q, g_gdiv > 0 ? g_gdiv : 0.0f, &w->pk)) {
        fprintf(stderr, "cannot pack\n");
        exit(1);
    }
    size_t total = w->pk.blocks * (w->pk.blk_code_bytes + w->pk.blk_scale_bytes);
    w->mem = aligned_alloc(64, (total + 63) & ~(size_t)63);
    uint8_t *buf = malloc(cols);
    moeq__pk_fill(&q, &w->pk, w->mem, w->mem + w->pk.blocks * w->pk.blk_code_bytes, buf);
    w->pk.codes = w->mem;
    w->pk.scales = w->mem + w->pk.blocks * w->pk.blk_code_bytes;
    free(buf);
    free(codes);
    free(scale);
}

/* One thread's FP32 FMA rate now, GFLOP/s. */
static double fma_peak(void) {
    const long iters = 20000000;
    double t0 = bench_now();
    volatile double sink = bench_fma_loop(iters);
    (void)sink;
    return (double)iters * BENCH_FMA_FLOPS_PER_ITER / (bench_now() - t0) / 1e9;
}

/* The AVX2 table's rate next to the avx512 one's, when both ran (ntab 2). */
static int ntab = 1;
static void print_base(size_t weights, const double best[2]) {
    if (ntab > 1) {
        printf("  (avx2 %7.2f Gweights/s: x%.2f)", (double)weights / best[1] / 1e9,
               best[1] / best[0]);
    }
    printf("\n");
}

/* The integer dot kernels, each table in the same loop, for 1..MOEQ__IDOT_MAX
 * rows: fdot on NVFP4 activation codes (f4, into y) or idot on int8 ones (xq,
 * into yi), blocks in pairs as the forward runs them. */
static void dot_rates(const char *name, int cold, const moeq__packed *pk, double bytes,
                      const moeq__kern *const tabs[2], const moeq__fp4row *f4,
                      const moeq__i8row *xq, float *y, int32_t *yi) {
    const size_t weights = pk->rows * pk->cols;
    for (size_t M = 1; M <= MOEQ__IDOT_MAX; M++) {
        int reps = cold ? 3 : 200;
        double best[2] = {1e300, 1e300};
        for (int r = 0; r < reps; r++) {
            for (int v = 0; v < ntab; v++) {
                double t0 = bench_now();
                const size_t per = f4 ? MOEQ__FDOT_BLOCKS : MOEQ__IDOT_BLOCKS;
                for (size_t b = 0; b < pk->blocks; b += per) {
                    const size_t nb = pk->blocks - b < per ? pk->blocks - b : per;
                    if (f4) {
                        tabs[v]->fdot(pk, b, nb, M, f4, y, 16 * nb);
                    } else {
                        tabs[v]->idot(pk, b, nb, 0, pk->cols, M, xq, yi, 16 * nb, 0);
                    }
                }
                double dt = bench_now() - t0;
                best[v] = dt < best[v] ? dt : best[v];
            }
        }
        printf("%-5s %-4s %s M=%zu: %7.2f Gweights/s  %6.2f GB/s  %6.1f GOP/s", name,
               cold ? "cold" : "hot", f4 ? "fdot" : "idot", M, (double)weights / best[0] / 1e9,
               bytes / best[0] / 1e9, 2.0 * (double)M * (double)weights / best[0] / 1e9);
        print_base(weights, best);
    }
}

/* Best of 200 passes of every 256-column panel of pk, for each table (ntab):
 * the float panel (bf16 0) or the bfloat16 one (bf16 1, scaled as given),
 * into P (16 x 256 floats). */
static void time_panels(const moeq__kern *const *tabs, const moeq__packed *pk, int bf16, int scaled,
                        float *P, double best[2]) {
    best[0] = best[1] = 1e300;
    for (int r = 0; r < 200; r++) {
        for (int v = 0; v < ntab; v++) {
            double t0 = bench_now();
            for (size_t b = 0; b < pk->blocks; b++) {
                for (size_t k0 = 0; k0 < pk->cols; k0 += 256) {
                    if (bf16) {
                        tabs[v]->panel_bf16(pk, b, k0, 256, (uint16_t *)(void *)P, scaled);
                    } else {
                        tabs[v]->panel(pk, b, k0, 256, P);
                    }
                }
            }
            double dt = bench_now() - t0;
            best[v] = dt < best[v] ? dt : best[v];
        }
    }
}

int main(int argc, char **argv) {
    const moeq__kern *K = moeq__kern_best(argc > 1 && !strcmp(argv[1], "portable"));
    /* the kernels the avx512 table replaces (panel, panel_bf16, gemv, idot, fdot) run for the
     * AVX2 table as well, alternating with them in the same loop */
    const moeq__kern *tabs[2] = {K, moeq__kern_level(1)};
    if (!strcmp(K->name, "avx512")) ntab = 2;
    double pk = fma_peak();
    for (int i = 0; i < 4; i++) printf("peak sample %.1f\n", fma_peak());
    printf("kernels: %s; FMA peak now %.1f GFLOP/s (= %.2f GHz at 32 flop/cycle)\n", K->name, pk,
           pk / 32);
    const int kinds[] = {MOEQ__QW_INT4_NIBBLES, MOEQ__QW_E2M1, MOEQ__QW_I8,
                         MOEQ__QW_E4M3,         MOEQ__QW_E2M1, MOEQ__QW_E2M1};
    const char *names[] = {"int4", "e2m1", "i8", "e4m3", "nvfp4", "mxfp4"};
    const size_t cols = 2048;
    float *x = malloc(sizeof(float) * 4 * cols);
    for (size_t i = 0; i < 4 * cols; i++) x[i] = (float)((int)(rnd() % 2001) - 1000) * 1e-3f;
    const float *xp[6] = {x, x + cols, x + 2 * cols, x + 3 * cols, x, x + cols};
    float y[MOEQ__IDOT_MAX * 16 * MOEQ__FDOT_BLOCKS];
    uint16_t *xb16 = malloc(sizeof(uint16_t) * 4 * cols);
    K->f32_to_bf16(x, 4 * cols, xb16);
    const uint16_t *xbp[4] = {xb16, xb16 + cols, xb16 + 2 * cols, xb16 + 3 * cols};
    float *xprep = malloc(sizeof(float) * 4 * (cols + cols / 8));
    const float *xprep_rows[4];
    for (size_t m = 0; m < 4; m++) xprep_rows[m] = xprep + m * (cols + cols / 8);
    float *P = aligned_alloc(64, MOEQ__TILE_BLOCKS * 256 * 16 * sizeof(float));
    enum { MQ = MOEQ__IDOT_MAX };
    int16_t *xq = malloc(sizeof(int16_t) * MQ * cols);
    int8_t *xq8 = malloc(MQ * cols);
    int32_t *xps = malloc(sizeof(int32_t) * MQ * (cols / 8 + 1));
    for (size_t i = 0; i < MQ * cols; i++) xq[i] = (int16_t)((int)(rnd() % 255) - 127);
    moeq__i8row xq_rows[MQ];
    for (size_t m = 0; m < MQ; m++) {
        moeq__i8row_fill(xq + m * cols, cols, xq8 + m * cols, xps + m * (cols / 8 + 1));
        xq_rows[m] = (moeq__i8row){xq + m * cols, xq8 + m * cols, xps + m * (cols / 8 + 1)};
    }
    int32_t yi[MQ * 16 * MOEQ__IDOT_BLOCKS];
    int8_t *f4v = malloc(6 * cols);
    float *f4s = malloc(sizeof(float) * 6 * (cols / 16));
    int32_t *f4sum = malloc(sizeof(int32_t) * 6 * (cols / 16));
    moeq__fp4row f4[MQ]; /* 6 quantized rows, repeated */
    for (size_t m = 0; m < 6; m++) {
        K->q_nvfp4(xp[m], cols, 1000.0f, f4v + m * cols, f4s + m * (cols / 16),
                   f4sum + m * (cols / 16));
    }
    for (size_t m = 0; m < MQ; m++) {
        f4[m].v = f4v + m % 6 * cols;
        f4[m].sc = f4s + m % 6 * (cols / 16);
        f4[m].sum12 = f4sum + m % 6 * (cols / 16);
    }
    for (size_t ki = 0; ki < 6; ki++) {
        int kind = kinds[ki];
        size_t gs = ki == 4 ? 16 : ki == 5 ? 32 : 128;
        g_gdiv = ki == 4 ? 1234.5f : ki == 5 ? -1.0f : 0.0f;
        double gemv1[2] = {0, 0}; /* gemv M=1, GB/s: hot, cold */
        for (int cold = 0; cold < 2; cold++) {
            size_t rows =
                cold ? (size_t)(kind == MOEQ__QW_I8 || kind == MOEQ__QW_E4M3 ? 131072 : 262144)
                     : 256;
            wt w;
            make(kind, rows, cols, gs, &w);
            double bytes =
                (double)w.pk.blocks * (double)(w.pk.blk_code_bytes + w.pk.blk_scale_bytes);
            for (size_t M = 1; M <= 4; M++) {
                int reps = cold ? 3 : 200;
                double best[2] = {1e300, 1e300}, best_b = 1e300;
                /* I4 reads rows made by i4_prep (gemv) or group sums (gemv_bf16); the
                 * forward makes them once per work item, an expert's blocks when it
                 * has at most 4 rows, and so does this loop every 48 blocks (768
                 * rows, moe_bench's intermediate size) */
                const bool i4 = w.pk.code == MOEQ__PK_I4;
                for (int r = 0; r < reps; r++) {
                    /* gemv_bf16 on the same x as bfloat16, in the same loop */
                    double t0b = bench_now();
                    for (size_t b = 0; b < w.pk.blocks; b++) {
                        if (i4 && b % 48 == 0) {
                            for (size_t m = 0; m < M; m++) {
                                moeq__bf16_group_sums(xbp[m], cols, gs,
                                                      xprep + m * (cols + cols / 8));
                            }
                        }
                        K->gemv_bf16(&w.pk, b, M, xbp, xprep_rows, y, 16);
                    }
                    double dtb = bench_now() - t0b;
                    best_b = dtb < best_b ? dtb : best_b;
                    for (int v = 0; v < ntab; v++) {
                        double t0 = bench_now();
                        for (size_t b = 0; b < w.pk.blocks; b++) {
                            if (i4 && b % 48 == 0) {
                                for (size_t m = 0; m < M; m++) {
                                    K->i4_prep(xp[m], cols, gs, xprep + m * (cols + cols / 8));
                                }
                            }
                            tabs[v]->gemv(&w.pk, b, M, i4 ? xprep_rows : xp, y, 16);
                        }
                        double dt = bench_now() - t0;
                        best[v] = dt < best[v] ? dt : best[v];
                    }
                }
                if (M == 1) gemv1[cold] = bytes / best[0] / 1e9;
                printf("%-5s %-4s gemv M=%zu: %7.2f Gweights/s  %6.2f GB/s  %6.1f GFLOP/s",
                       names[ki], cold ? "cold" : "hot", M, (double)(rows * cols) / best[0] / 1e9,
                       bytes / best[0] / 1e9, 2.0 * (double)(M * rows * cols) / best[0] / 1e9);
                print_base(rows * cols, best);
                printf("%-5s %-4s gemv_bf16 M=%zu: %7.2f Gweights/s  %6.2f GB/s  (x%.2f gemv's "
                       "rate)\n",
                       names[ki], cold ? "cold" : "hot", M, (double)(rows * cols) / best_b / 1e9,
                       bytes / best_b / 1e9, best[0] / best_b);
            }
            if (cold) {
                /* the same bytes read by loads alone: whether gemv's decode and FMAs
                 * overlap the memory traffic (cold = min(hot, read)) or add to it
                 * (cold = 1 / (1/hot + 1/read)) */
                double best = 1e300;
                volatile uint64_t sink = 0;
                for (int r = 0; r < 3; r++) {
                    double t0 = bench_now();
                    sink ^= bench_read_sum(w.mem, (size_t)bytes);
                    double dt = bench_now() - t0;
                    best = dt < best ? dt : best;
                }
                (void)sink;
                const double rd = bytes / best / 1e9;
                printf("%-5s cold read (loads only): %6.2f GB/s; gemv M=1 %.2f GB/s vs %.2f if "
                       "overlapped, %.2f if serial\n",
                       names[ki], rd, gemv1[1], gemv1[0] < rd ? gemv1[0] : rd,
                       1.0 / (1.0 / gemv1[0] + 1.0 / rd));
            }
            if (ki == 4) { /* NVFP4 activation codes, integer group sums */
                dot_rates(names[ki], cold, &w.pk, bytes, tabs, f4, NULL, y, NULL);
            }
            if (w.pk.code == MOEQ__PK_I8 || w.pk.code == MOEQ__PK_I4) { /* int8 activation codes */
                dot_rates(names[ki], cold, &w.pk, bytes, tabs, NULL, xq_rows, NULL, yi);
            }
            if (!cold) {
                double best[2];
                time_panels(tabs, &w.pk, 0, 0, P, best);
                printf("%-5s hot  panel:    %7.2f Gweights/s", names[ki],
                       (double)(rows * cols) / best[0] / 1e9);
                print_base(rows * cols, best);
                /* the bfloat16 panel, and with `scaled` kv * ks where the codes and
                 * scales allow it (this loop's MXFP4 scales do) */
                for (int scaled = 0; scaled <= (int)moeq__pk_bf16_scaled(&w.pk); scaled++) {
                    time_panels(tabs, &w.pk, 1, scaled, P, best);
                    printf("%-5s hot  panel_bf16%s: %7.2f Gweights/s", names[ki],
                           scaled ? " scaled" : "", (double)(rows * cols) / best[0] / 1e9);
                    print_base(rows * cols, best);
                }
            }
            free(w.mem);
        }
    }
    /* tile: one or two 256-column panels (nb blocks side by side) against M
     * tokens (1 to 12: the avx512 table's register tile; rows repeat xp's 6) */
    for (size_t i = 0; i < MOEQ__TILE_BLOCKS * 256 * 16; i++) P[i] = (float)(rnd() % 100) * 0.01f;
    const float *xt[12];
    for (size_t m = 0; m < 12; m++) xt[m] = xp[m % 6];
    for (size_t nb = 1; nb <= MOEQ__TILE_BLOCKS; nb++) {
        for (size_t M = 1; M <= 12; M++) {
            double best = 1e300;
            for (int r = 0; r < 2000; r++) {
                double t0 = bench_now();
                for (int i = 0; i < 16; i++) K->tile(P, 256, nb, M, xt, y, 16 * nb, i > 0);
                double dt = bench_now() - t0;
                best = dt < best ? dt : best;
            }
            printf("tile nb=%zu M=%zu: %6.1f GFLOP/s\n", nb, M,
                   16.0 * 2.0 * (double)(nb * M) * 256 * 16 / best / 1e9);
        }
    }
    /* tile_bf16 (the bfloat16 path): a panel of bfloat16 pairs against bfloat16 rows */
    {
        static uint16_t Pb[256 * 16], xbr[6][256];
        for (size_t i = 0; i < 256 * 16; i++) Pb[i] = (uint16_t)(0x3C00u + rnd() % 0x400u);
        for (size_t m = 0; m < 6; m++) {
            for (size_t k = 0; k < 256; k++) xbr[m][k] = (uint16_t)(0x3E00u + rnd() % 0x200u);
        }
        const uint16_t *xb[12]; /* 1 to 12 rows (the avx512 register tile), repeating 6 */
        for (size_t m = 0; m < 12; m++) xb[m] = xbr[m % 6];
        for (size_t M = 1; M <= 12; M++) {
            double best = 1e300;
            for (int r = 0; r < 2000; r++) {
                double t0 = bench_now();
                for (int i = 0; i < 16; i++) K->tile_bf16(Pb, 256, M, xb, y, 16, i > 0);
                double dt = bench_now() - t0;
                best = dt < best ? dt : best;
            }
            printf("tile_bf16 M=%zu: %6.1f GFLOP/s\n", M,
                   16.0 * 2.0 * (double)M * 256 * 16 / best / 1e9);
        }
    }
    /* in situ: 32 tokens, 48 blocks of 16 rows x 2048 (an expert's gate), panels of 256;
     * int4 groups of 128 (wna16) and E4M3 channel scales (w8a8_fp8) */
    for (int ik = 0; ik < 2; ik++) {
        const int kind = ik ? MOEQ__QW_E4M3 : MOEQ__QW_INT4_NIBBLES;
        const size_t gs = ik ? cols : 128;
        const char *kn = ik ? "e4m3" : "int4";
        wt w;
        g_gdiv = 0;
        make(kind, 768, cols, gs, &w);
        size_t M = 32;
        float *X = malloc(sizeof(float) * M * cols);
        for (size_t i = 0; i < M * cols; i++) X[i] = (float)(rnd() % 100) * 0.01f;
        const float *xr[32], *xo[32];
        for (size_t m = 0; m < M; m++) xr[m] = X + m * cols;
        float *C = malloc(sizeof(float) * M * 16 * MOEQ__TILE_BLOCKS);
        const size_t nb = MOEQ__TILE_BLOCKS; /* blocks per tile call, as moe_fast.c's */
        for (int variant = 0; variant < 2; variant++) {
            double best = 1e300;
            for (int r = 0; r < 20; r++) {
                double t0 = bench_now();
                for (size_t b = 0; b < w.pk.blocks; b += nb) {
                    for (size_t k0 = 0; k0 < cols; k0 += 256) {
                        for (size_t i = 0; i < nb && (variant == 0 || b == 0); i++) {
                            K->panel(&w.pk, b + i, k0, 256, P + i * 256 * 16);
                        }
                        for (size_t m = 0; m < M; m++) xo[m] = xr[m] + k0;
                        K->tile(P, 256, nb, M, xo, C, 16 * nb, k0 > 0);
                    }
                }
                double dt = bench_now() - t0;
                best = dt < best ? dt : best;
            }
            printf("%s in situ M=32 %s: %6.1f GFLOP/s\n", kn,
                   variant ? "tiles only" : "panel+tiles",
                   2.0 * (double)(M * 768 * cols) / best / 1e9);
        }
        /* cold: 64 experts' worth of weights, each used once per pass */
        {
            wt big;
            make(kind, 768 * 64, cols, gs, &big);
            double best = 1e300;
            for (int r = 0; r < 3; r++) {
                double t0 = bench_now();
                for (size_t b = 0; b < big.pk.blocks; b += nb) {
                    for (size_t k0 = 0; k0 < cols; k0 += 256) {
                        for (size_t i = 0; i < nb; i++) { /* each fetches its next panel's codes */
                            K->panel(&big.pk, b + i, k0, 256, P + i * 256 * 16);
                        }
                        for (size_t m = 0; m < M; m++) xo[m] = xr[m] + k0;
                        K->tile(P, 256, nb, M, xo, C, 16 * nb, k0 > 0);
                    }
                }
                double dt = bench_now() - t0;
                best = dt < best ? dt : best;
            }
            printf("%s in situ M=32 cold weights: %6.1f GFLOP/s\n", kn,
                   2.0 * (double)(M * 768 * 64 * cols) / best / 1e9);
            free(big.mem);
        }
        free(X);
        free(C);
        free(w.mem);
    }
    /* the int8 path in situ: 32 tokens' int8 codes (xq's 12 rows, repeated)
     * against an expert's gate of I8 codes with channel scales (w8a8_int8),
     * idot_groups two blocks a call as the driver calls it; hot (one expert,
     * in L2) and cold (64 experts' worth, each used once per pass) */
    {
        enum { MI = 32 };
        moeq__i8row xi[MI];
        for (size_t m = 0; m < MI; m++) xi[m] = xq_rows[m % MQ];
        float *Ci = malloc(sizeof(float) * MI * 16 * MOEQ__IDOT_BLOCKS);
        int32_t *Si = malloc(sizeof(int32_t) * MI * 16 * MOEQ__IDOT_BLOCKS);
        const size_t ld = 16 * MOEQ__IDOT_BLOCKS;
        for (int cold = 0; cold < 2; cold++) {
            wt w;
            g_gdiv = 0;
            make(MOEQ__QW_I8, 768 * (cold ? 64 : 1), cols, cols, &w);
            double best = 1e300;
            for (int r = 0; r < (cold ? 3 : 20); r++) {
                double t0 = bench_now();
                for (size_t b = 0; b < w.pk.blocks; b += MOEQ__IDOT_BLOCKS) {
                    K->idot_groups(&w.pk, b, MOEQ__IDOT_BLOCKS, MI, xi, Ci, ld, Si, ld);
                }
                double dt = bench_now() - t0;
                best = dt < best ? dt : best;
            }
            printf("i8 in situ M=32 idot_groups %s: %6.1f GOP/s\n", cold ? "cold" : "hot",
                   2.0 * (double)(MI * w.pk.rows * cols) / best / 1e9);
            free(w.mem);
        }
        free(Ci);
        free(Si);
    }
    free(P);
    free(x);
    free(xb16);
    free(xq);
    free(xq8);
    free(xps);
    free(f4v);
    free(f4s);
    free(f4sum);
    free(xprep);
    return 0;
}

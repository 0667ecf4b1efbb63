/*
 * bench_synth.c - how long moeq_synth_write takes per preset and how large
 * the checkpoints are, and moeq_compress's throughput per format.  Prints
 * figures; asserts nothing.
 *
 * usage: bench_synth [EXPERTS [HIDDEN [MOE_INTERMEDIATE]]]
 *   (default: the presets' own sizes, 8 experts, 256 hidden, 128 per expert)
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "moeq/moeq.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Total size of the files in dir, and removes them. */
static double dir_mb(const char *dir, int remove) {
    double total = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (stat(path, &sb) == 0) total += (double)sb.st_size;
        if (remove) unlink(path);
    }
    if (d) closedir(d);
    return total / 1e6;
}

static void bench_presets(int experts, int hidden, int inter) {
    char tmpl[] = "/tmp/moeq_bench_synth_XXXXXX";
    if (!mkdtemp(tmpl)) return;
    printf("%-24s %8s %9s %8s\n", "preset", "seconds", "MB", "MB/s");
    for (uint32_t i = 0; moeq_synth_preset_name(i); i++) {
        moeq_synth_layout L;
        moeq_error err;
        moeq_synth_preset(moeq_synth_preset_name(i), &L, &err);
        if (experts) L.num_experts = experts, L.top_k = L.top_k < experts ? L.top_k : experts;
        if (hidden) L.hidden_size = hidden;
        if (inter) L.moe_intermediate_size = inter, L.intermediate_size = 4 * inter;
        if (L.n_group > 1 && L.num_experts % L.n_group) L.n_group = L.topk_group = 0;
        const double t0 = now();
        const moeq_status st = moeq_synth_write(&L, tmpl, &err);
        const double dt = now() - t0;
        const double mb = dir_mb(tmpl, 1);
        if (st != MOEQ_STATUS_OK) {
            printf("%-24s failed: %s\n", moeq_synth_preset_name(i), err.message);
            continue;
        }
        printf("%-24s %8.3f %9.2f %8.1f\n", moeq_synth_preset_name(i), dt, mb, mb / dt);
    }
    rmdir(tmpl);
}

static void bench_compress(void) {
    enum { ROWS = 2048, COLS = 2048 };
    float *w = malloc(sizeof(float) * ROWS * COLS);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < (size_t)ROWS * COLS; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        w[i] = (float)((double)(x >> 11) * 0x1p-53 - 0.5) * 0.05f;
    }
    static const struct {
        const char *name;
        int32_t format;
        moeq_quant_args a;
    } cases[] = {
        {"int4 g128 pack",
         MOEQ_FORMAT_PACK_QUANTIZED,
         {.num_bits = 4,
          .type = MOEQ_QTYPE_INT,
          .symmetric = 1,
          .group_size = 128,
          .strategy = MOEQ_STRATEGY_GROUP}},
        {"int4 g128 asym pack",
         MOEQ_FORMAT_PACK_QUANTIZED,
         {.num_bits = 4,
          .type = MOEQ_QTYPE_INT,
          .symmetric = 0,
          .group_size = 128,
          .strategy = MOEQ_STRATEGY_GROUP,
          .zp_dtype = MOEQ_DTYPE_I8}},
        {"int8 channel",
         MOEQ_FORMAT_INT_QUANTIZED,
         {.num_bits = 8,
          .type = MOEQ_QTYPE_INT,
          .symmetric = 1,
          .strategy = MOEQ_STRATEGY_CHANNEL}},
        {"fp8 block 128",
         MOEQ_FORMAT_FLOAT_QUANTIZED,
         {.num_bits = 8,
          .type = MOEQ_QTYPE_FLOAT,
          .symmetric = 1,
          .strategy = MOEQ_STRATEGY_BLOCK,
          .block_rows = 128,
          .block_cols = 128}},
        {"nvfp4",
         MOEQ_FORMAT_NVFP4_PACK_QUANTIZED,
         {.num_bits = 4,
          .type = MOEQ_QTYPE_FLOAT,
          .symmetric = 1,
          .group_size = 16,
          .strategy = MOEQ_STRATEGY_TENSOR_GROUP,
          .scale_dtype = MOEQ_DTYPE_F8_E4M3}},
        {"mxfp4",
         MOEQ_FORMAT_MXFP4_PACK_QUANTIZED,
         {.num_bits = 4,
          .type = MOEQ_QTYPE_FLOAT,
          .symmetric = 1,
          .group_size = 32,
          .strategy = MOEQ_STRATEGY_GROUP,
          .scale_dtype = MOEQ_DTYPE_U8}},
    };
    printf("\nmoeq_compress, one [%d, %d] BF16 weight:\n", ROWS, COLS);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        moeq_tensor_set *set = NULL;
        moeq_error err;
        const double t0 = now();
        const moeq_status st = moeq_compress(&cases[i].a, cases[i].format, "m", w, ROWS, COLS,
                                             MOEQ_DTYPE_BF16, NULL, 0.0f, &set, &err);
        const double dt = now() - t0;
        if (st != MOEQ_STATUS_OK) {
            printf("  %-22s failed: %s\n", cases[i].name, err.message);
        } else {
            printf("  %-22s %7.1f ms  %6.1f Mparams/s\n", cases[i].name, dt * 1e3,
                   (double)ROWS * COLS / dt / 1e6);
        }
        moeq_tensor_set_destroy(set);
    }
    free(w);
}

int main(int argc, char **argv) {
    const int experts = argc > 1 ? atoi(argv[1]) : 0;
    const int hidden = argc > 2 ? atoi(argv[2]) : 0;
    const int inter = argc > 3 ? atoi(argv[3]) : 0;
    bench_presets(experts, hidden, inter);
    bench_compress();
    return 0;
}

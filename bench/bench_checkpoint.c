/*
 * bench_checkpoint.c - how long opening a checkpoint with many tensors takes,
 * and how long a lookup by name takes.  Prints figures; asserts nothing.
 *
 * usage: bench_checkpoint [N_TENSORS]   (default 100000, the size of a large
 * MoE checkpoint's tensor list)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "moeq/moeq.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    unsigned n = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 100000u;
    if (n == 0) n = 1;
    char(*names)[64] = calloc(n, sizeof *names);
    moeq_tensor *t = calloc(n, sizeof *t);
    static const int32_t value = 7;
    for (unsigned i = 0; i < n; i++) {
        snprintf(names[i], sizeof names[i], "model.layers.%u.mlp.experts.%u.down_proj.weight",
                 i / 768, i % 768);
        t[i] = (moeq_tensor){.name = names[i],
                             .dtype = MOEQ_DTYPE_I32,
                             .ndim = 1,
                             .shape = {1},
                             .data = &value,
                             .nbytes = 4};
    }
    char path[64];
    snprintf(path, sizeof path, "/tmp/moeq-bench-%ld.safetensors", (long)getpid());
    moeq_error err;
    double t0 = now();
    if (moeq_safetensors_write(path, t, n, NULL, &err) != MOEQ_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    double t1 = now();
    moeq_checkpoint *ck;
    if (moeq_checkpoint_open(path, &ck, &err) != MOEQ_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    double t2 = now();
    unsigned found = 0;
    for (unsigned i = 0; i < n; i++) {
        moeq_tensor out;
        found += moeq_checkpoint_find(ck, names[(i * 7919u) % n], &out) == MOEQ_OK;
    }
    double t3 = now();
    printf("%u tensors: write %.1f ms, open %.1f ms (%.2f us/tensor), find %.3f us/lookup "
           "(%u found)\n",
           n, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t2 - t1) * 1e6 / n, (t3 - t2) * 1e6 / n, found);
    moeq_checkpoint_close(ck);
    unlink(path);
    free(t);
    free(names);
    return found == n ? 0 : 1;
}

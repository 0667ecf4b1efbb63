/*
 * replay_main.c - runs a fuzz target's LLVMFuzzerTestOneInput on files,
 * without libFuzzer, so the committed corpus (seeds and every input that
 * once found a bug) is an ordinary ctest test in every build:
 *
 *     fuzz_replay_config tests/fuzz/corpus/fuzz_config [more files or dirs]
 *
 * Directories are read in name order.  A target that finds a problem aborts,
 * which fails the test; the file being run is printed first so the failing
 * input is named.
 */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    if (!buf) abort();
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            uint8_t *p = realloc(buf, cap);
            if (!p) abort();
            buf = p;
        }
    }
    fclose(f);
    /* An exact-size copy, so reads past the end are caught by the sanitizers. */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) abort();
    memcpy(exact, buf, n);
    free(buf);
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_path(const char *path, unsigned *count) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: no such file or directory: %s\n", path);
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        (*count)++;
        return run_file(path);
    }
    DIR *d = opendir(path);
    if (!d) return 1;
    char **names = NULL;
    size_t n = 0, cap = 0;
    const struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **p = realloc(names, cap * sizeof *names);
            if (!p) abort();
            names = p;
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        names[n] = malloc(len);
        if (!names[n]) abort();
        snprintf(names[n], len, "%s/%s", path, e->d_name);
        n++;
    }
    closedir(d);
    if (n > 1) qsort(names, n, sizeof *names, cmp_names);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        rc |= run_path(names[i], count);
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 2;
    }
    unsigned count = 0;
    int rc = 0;
    for (int i = 1; i < argc; i++) rc |= run_path(argv[i], &count);
    printf("replayed %u input%s\n", count, count == 1 ? "" : "s");
    if (count == 0) {
        fprintf(stderr, "replay: no inputs found\n");
        return 1;
    }
    return rc;
}

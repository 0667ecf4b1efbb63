/*
 * fuzz_common.h - what every fuzz target shares: the one oracle (a known
 * status, and a non-empty message whose code matches on failure) and a byte
 * reader that never runs past the input.
 *
 * A target asserts nothing else: crashes, leaks, undefined behaviour and
 * hangs are the sanitizers' and libFuzzer's to find.  The same files build
 * twice: with libFuzzer (tests/fuzz/CMakeLists.txt, clang, ASan+UBSan) and
 * with the normal compiler into replay drivers that run the committed corpus
 * as ctest tests (replay_main.c).
 */
#ifndef MOEQ_FUZZ_COMMON_H
#define MOEQ_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moeq/moeq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* For the harness's own byte loops: coverage of filling a buffer steers
 * nothing and costs most of the time of an execution. */
#if defined(__clang__) && __clang_major__ >= 13
#define FZ_NO_COVERAGE __attribute__((no_sanitize("coverage"), noinline))
#else
#define FZ_NO_COVERAGE
#endif

/* Aborts (a crash libFuzzer records) with the place and the reason. */
static inline void fz_fail(const char *file, int line, const char *what, moeq_status st,
                           const moeq_error *err) {
    fprintf(stderr, "%s:%d: %s (status %d %s, message \"%s\")\n", file, line, what, (int)st,
            moeq_status_name((int32_t)st), err ? err->message : "");
    abort();
}

/* The oracle: the status is one of the list; a failure fills err with that
 * status and a message. */
static inline moeq_status fz_check_status(moeq_status st, const moeq_error *err,
                                          const char *file, int line) {
    if ((int)st < 0 || (int)st >= (int)MOEQ_STATUS_COUNT_) {
        fz_fail(file, line, "status outside the known set", st, err);
    }
    if (st != MOEQ_STATUS_OK && err) {
        if (err->message[0] == '\0') fz_fail(file, line, "failure with an empty message", st, err);
        if (err->code != (int32_t)st) fz_fail(file, line, "err->code differs from the status", st, err);
        if (memchr(err->message, '\0', sizeof err->message) == NULL) {
            fz_fail(file, line, "message not NUL-terminated", st, err);
        }
    }
    return st;
}

/* Clears err, runs the call, checks it. */
#define FZ(err, call) (moeq_error_clear(err), fz_check_status((call), (err), __FILE__, __LINE__))

#define FZ_ASSERT(cond)                                                                  \
    do {                                                                                 \
        if (!(cond)) fz_fail(__FILE__, __LINE__, "assertion failed: " #cond, 0, NULL);   \
    } while (0)

/* Reads bytes from the input; past the end (or from a NULL reader) every
 * read gives zeros. */
typedef struct fz_reader {
    const uint8_t *p;
    size_t n;
} fz_reader;

static inline uint8_t fz_u8(fz_reader *r) {
    if (!r || r->n == 0) return 0;
    r->n--;
    return *r->p++;
}

static inline uint32_t fz_u32(fz_reader *r) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)fz_u8(r) << (8 * i);
    return v;
}

static inline float fz_f32(fz_reader *r) {
    uint32_t u = fz_u32(r);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Up to n bytes (fewer at the end of the input); returns how many. */
static inline size_t fz_take(fz_reader *r, size_t n, const uint8_t **out) {
    if (!r) {
        *out = NULL;
        return 0;
    }
    if (n > r->n) n = r->n;
    *out = r->p;
    r->p += n;
    r->n -= n;
    return n;
}

/* A NUL-terminated copy of data[0..n) (the caller frees it). */
static inline char *fz_strndup(const uint8_t *data, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    if (n) memcpy(s, data, n);
    s[n] = '\0';
    return s;
}

#endif /* MOEQ_FUZZ_COMMON_H */

/*
 * test_util.h - helpers shared by the Check suites.  Each tests/check_<module>.c
 * defines `Suite *<module>_suite(void)` and ends with MOEQ_TEST_MAIN(<module>_suite).
 */
#ifndef MOEQ_TEST_UTIL_H
#define MOEQ_TEST_UTIL_H

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moeq/moeq.h"

/* Check's ck_assert_msg (and every ck_assert_* built on it) records the
 * location of each assertion that passes, one write to its message file per
 * assertion: millions of writes in the table-driven suites, which is most of
 * their time and made them crawl under ASan and valgrind.  Here only failures
 * are reported; a test that crashes is still named, and the sanitizers give
 * its stack. */
#undef ck_assert_msg
#define ck_assert_msg(expr, ...)                                                       \
    ((expr) ? (void)0                                                                  \
            : _ck_assert_failed(__FILE__, __LINE__, "Assertion '" #expr "' failed",    \
                                ##__VA_ARGS__))

#ifndef MOEQ_TEST_DATA_DIR
#define MOEQ_TEST_DATA_DIR "tests/data"
#endif

/* The message of an error record that may be NULL (a function, so that
 * passing &err does not warn that the address is never NULL). */
static inline const char *moeq_test_message(const moeq_error *err) {
    return err ? err->message : "";
}

/* Asserts a status, printing the error message when it differs. */
#define ck_assert_status(got, want, errp)                                              \
    ck_assert_msg((int)(got) == (int)(want), "status %s, want %s: %s",                 \
                  moeq_status_name((int)(got)), moeq_status_name((int)(want)),          \
                  moeq_test_message(errp))

#define ck_assert_ok(got, errp) ck_assert_status(got, MOEQ_STATUS_OK, errp)

/* A new, empty directory "/tmp/<stem>_XXXXXX", its path in buf. */
static inline void moeq_test_mkdtemp(char *buf, size_t size, const char *stem) {
    int n = snprintf(buf, size, "/tmp/%s_XXXXXX", stem);
    ck_assert_msg(n > 0 && (size_t)n < size, "temporary directory name too long");
    ck_assert_msg(mkdtemp(buf) != NULL, "mkdtemp %s failed", buf);
}

/* Removes dir and everything below it (links are removed, not followed). */
static inline void moeq_test_rmtree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char path[1024];
        int n = snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (n < 0 || (size_t)n >= sizeof path) continue; /* never a truncated path */
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            moeq_test_rmtree(path);
        } else {
            unlink(path);
        }
    }
    closedir(d);
    rmdir(dir);
}

/* Writes n bytes to path (asserted). */
static inline void moeq_test_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_msg(fwrite(data, 1, n, f) == n, "short write to %s", path);
    ck_assert_msg(fclose(f) == 0, "cannot close %s", path);
}

static inline void moeq_test_write_text(const char *path, const char *text) {
    moeq_test_write_file(path, text, strlen(text));
}

/* The whole file (malloc'd, NUL-terminated after its *n bytes). */
static inline unsigned char *moeq_test_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    ck_assert_int_ge(len, 0);
    ck_assert_int_eq(fseek(f, 0, SEEK_SET), 0);
    unsigned char *buf = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    buf[len] = '\0';
    *n = (size_t)len;
    return buf;
}

#define MOEQ_TEST_MAIN(suite_fn)                                                       \
    int main(void) {                                                                    \
        SRunner *sr = srunner_create(suite_fn());                                       \
        srunner_run_all(sr, CK_NORMAL);                                                 \
        int failed = srunner_ntests_failed(sr);                                         \
        srunner_free(sr);                                                               \
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;                               \
    }

#endif

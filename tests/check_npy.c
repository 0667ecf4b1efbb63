/*
 * check_npy.c - the tool's .npy reader and writer (tools/npy.c).
 *
 * `check_npy --copy IN OUT` reads IN and writes it again as OUT; the numpy
 * cross-check (npy_numpy.py) drives it.
 */
#include "test_util.h"
#include "npy.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[64];
static char g_path[128];

static void make_dir(void) {
    moeq_test_mkdtemp(g_dir, sizeof g_dir, "moeq-npy");
    snprintf(g_path, sizeof g_path, "%s/a.npy", g_dir);
}

static void remove_dir(void) {
    unlink(g_path);
    rmdir(g_dir);
}

/* What numpy 2.x writes for np.save(path, np.zeros((2, 3), np.float32)):
 * the dict, spaces, and '\n' as byte 127. */
START_TEST(test_numpy_header_bytes) {
    float data[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    char err[256];
    ck_assert_int_eq(npy_write(g_path, MOEQ_DTYPE_F32, 2, shape, data, err, sizeof err), 0);
    size_t n;
    unsigned char *got = moeq_test_read_file(g_path, &n);
    static const char dict[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    ck_assert_uint_eq(n, 128 + sizeof data);
    ck_assert_int_eq(memcmp(got, "\x93NUMPY\x01\x00v\x00", 10), 0);
    ck_assert_int_eq(memcmp(got + 10, dict, strlen(dict)), 0);
    for (size_t i = 10 + strlen(dict); i < 127; i++) ck_assert_int_eq(got[i], ' ');
    ck_assert_int_eq(got[127], '\n');
    ck_assert_int_eq(memcmp(got + 128, data, sizeof data), 0);
    free(got);

    /* Scalars and 1-d arrays use Python's tuple spelling. */
    int64_t five = 5;
    int64_t v[5] = {0};
    ck_assert_int_eq(npy_write(g_path, MOEQ_DTYPE_I64, 1, &five, v, err, sizeof err), 0);
    got = moeq_test_read_file(g_path, &n);
    ck_assert_ptr_nonnull(strstr((const char *)got + 10, "'shape': (5,), }"));
    ck_assert_int_eq(got[8], 118);
    free(got);
    double d = 2.5;
    ck_assert_int_eq(npy_write(g_path, MOEQ_DTYPE_F64, 0, NULL, &d, err, sizeof err), 0);
    got = moeq_test_read_file(g_path, &n);
    /* As numpy writes np.float64(2.5): 66 bytes of header round up to 128. */
    static const char scalar[] = "{'descr': '<f8', 'fortran_order': False, 'shape': (), }";
    ck_assert_int_eq(memcmp(got + 10, scalar, strlen(scalar)), 0);
    ck_assert_uint_eq(n, 128 + 8);
    ck_assert_int_eq(got[127], '\n');
    ck_assert_int_eq(memcmp(got + 128, "\0\0\0\0\0\0\x04@", 8), 0);
    free(got);
}
END_TEST

/* Every dtype and shapes from a scalar to MOEQ_MAX_DIMS dimensions. */
START_TEST(test_round_trips) {
    static const int64_t shapes[][MOEQ_MAX_DIMS + 1] = {
        /* ndim, dims... */
        {0}, {1, 5}, {1, 0}, {2, 2, 3}, {3, 4, 0, 2}, {8, 1, 2, 1, 2, 1, 2, 1, 2},
    };
    char err[256];
    for (int32_t dtype = 1; dtype < MOEQ_DTYPE_COUNT_; dtype++) {
        int32_t want = dtype == MOEQ_DTYPE_BF16                                     ? MOEQ_DTYPE_U16
                       : dtype == MOEQ_DTYPE_F8_E4M3 || dtype == MOEQ_DTYPE_F8_E5M2 ? MOEQ_DTYPE_U8
                                                                                    : dtype;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int32_t ndim = (int32_t)shapes[s][0];
            const int64_t *shape = &shapes[s][1];
            size_t nbytes = moeq_dtype_size(dtype);
            for (int32_t i = 0; i < ndim; i++) nbytes *= (size_t)shape[i];
            unsigned char *data = malloc(nbytes + 1);
            for (size_t i = 0; i < nbytes; i++) data[i] = (unsigned char)(i * 13 + (size_t)dtype);
            ck_assert_msg(npy_write(g_path, dtype, ndim, shape, data, err, sizeof err) == 0, "%s",
                          err);
            npy_array a;
            ck_assert_msg(npy_read(g_path, &a, err, sizeof err) == 0, "%s", err);
            ck_assert_int_eq(a.dtype, want);
            ck_assert_int_eq(a.ndim, ndim);
            for (int32_t i = 0; i < ndim; i++) ck_assert_int_eq(a.shape[i], shape[i]);
            ck_assert_uint_eq(a.nbytes, nbytes);
            ck_assert_ptr_nonnull(a.data);
            ck_assert_int_eq(memcmp(a.data, data, nbytes), 0);
            /* The data starts 64-byte aligned, as numpy arranges. */
            struct stat st;
            ck_assert_int_eq(stat(g_path, &st), 0);
            ck_assert_uint_eq(((uint64_t)st.st_size - nbytes) % 64, 0);
            npy_free(&a);
            ck_assert_ptr_null(a.data);
            free(data);
        }
    }
    npy_free(NULL);
}
END_TEST

/* A .npy image: magic, version, header length (2 or 4 bytes), header, and
 * data_len bytes of data. */
static unsigned char *npy_image(unsigned major, unsigned minor, const char *header, size_t data_len,
                                size_t *n) {
    size_t hlen = strlen(header), pre = major == 1 ? 10 : 12;
    *n = pre + hlen + data_len;
    unsigned char *buf = malloc(*n + 1);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = (unsigned char)minor;
    for (size_t i = 0; i < pre - 8; i++) buf[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + pre, header, hlen);
    for (size_t i = 0; i < data_len; i++) buf[pre + hlen + i] = (unsigned char)(i + 1);
    return buf;
}

/* Headers numpy (old and new), Python 2 and hand-written tools produce. */
START_TEST(test_read_variants) {
    static const struct {
        unsigned major;
        const char *header;
        int32_t dtype, ndim;
        int64_t shape[3];
    } cases[] = {
        {2,
         "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }   \n",
         MOEQ_DTYPE_F32,
         2,
         {2, 3}},
        {3, "{'descr': '<i2', 'fortran_order': False, 'shape': (4,), }\n", MOEQ_DTYPE_I16, 1, {4}},
        {1,
         "{\"shape\": (3,), \"fortran_order\": False, \"descr\": \"|u1\"}\n",
         MOEQ_DTYPE_U8,
         1,
         {3}},
        {1,
         "{'descr': '<i8', 'fortran_order': False, 'shape': (2L, 1L), }\n",
         MOEQ_DTYPE_I64,
         2,
         {2, 1}},
        {1, "{'descr':'<f2','fortran_order':False,'shape':(1,2,3)}", MOEQ_DTYPE_F16, 3, {1, 2, 3}},
        {1, "{'descr': '|b1', 'fortran_order': False, 'shape': (), }", MOEQ_DTYPE_BOOL, 0, {0}},
        {1, "{'descr': '<u2', 'fortran_order': False, 'shape': ( 2 , ), }", MOEQ_DTYPE_U16, 1, {2}},
    };
    char err[256];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t elems = 1;
        for (int32_t i = 0; i < cases[k].ndim; i++) elems *= (size_t)cases[k].shape[i];
        size_t nbytes = elems * moeq_dtype_size(cases[k].dtype), n;
        unsigned char *img = npy_image(cases[k].major, 0, cases[k].header, nbytes, &n);
        moeq_test_write_file(g_path, img, n);
        npy_array a;
        ck_assert_msg(npy_read(g_path, &a, err, sizeof err) == 0, "case %zu: %s", k, err);
        ck_assert_int_eq(a.dtype, cases[k].dtype);
        ck_assert_int_eq(a.ndim, cases[k].ndim);
        for (int32_t i = 0; i < a.ndim; i++) ck_assert_int_eq(a.shape[i], cases[k].shape[i]);
        ck_assert_uint_eq(a.nbytes, nbytes);
        ck_assert_int_eq(memcmp(a.data, img + n - nbytes, nbytes), 0);
        npy_free(&a);
        free(img);
    }
}
END_TEST

#define H(descr, fortran, shape)                                                                   \
    "{'descr': " descr ", 'fortran_order': " fortran ", 'shape': " shape ", }\n"

static const struct bad_case {
    const char *label;
    unsigned major, minor;
    const char *header; /* NULL: the file is `data_len` bytes of "\x93NUMPY..." */
    size_t data_len;
    const char *want;
} k_bad[] = {
    {"empty file", 0, 0, NULL, 0, "file is 0 bytes, too short"},
    {"9 bytes", 0, 0, NULL, 9, "file is 9 bytes, too short"},
    {"bad magic", 0, 0, NULL, 16, "no \\x93NUMPY magic"},
    {"version 4.0", 4, 0, H("'<f4'", "False", "()"), 4, "version 4.0 is not supported"},
    {"version 1.1", 1, 1, H("'<f4'", "False", "()"), 4, "version 1.1 is not supported"},
    {"version 0.0", 0, 0, H("'<f4'", "False", "()"), 4, "version 0.0 is not supported"},
    {"fortran order", 1, 0, H("'<f4'", "True", "(2, 2)"), 16, "fortran_order is True"},
    {"fortran order neither", 1, 0, H("'<f4'", "1", "(2, 2)"), 16,
     "expected True or False at byte 34 of the header"},
    {"big-endian", 1, 0, H("'>f4'", "False", "(2,)"), 8, "big-endian data ('>f4')"},
    {"complex", 1, 0, H("'<c8'", "False", "(2,)"), 16, "unsupported descr '<c8' (supported: <f8"},
    {"structured", 1, 0, H("[('a', '<f4')]", "False", "(2,)"), 8, "structured dtypes"},
    {"descr not a string", 1, 0, H("4", "False", "(2,)"), 8, "expected a quoted descr"},
    {"escape in descr", 1, 0, H("'<f\\4'", "False", "(2,)"), 8, "expected a quoted descr"},
    {"no shape", 1, 0, "{'descr': '<f4', 'fortran_order': False}", 4, "header has no 'shape'"},
    {"no descr", 1, 0, "{'fortran_order': False, 'shape': ()}", 4, "header has no 'descr'"},
    {"no fortran_order", 1, 0, "{'descr': '<f4', 'shape': ()}", 4, "header has no 'fortran_order'"},
    {"extra key", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}", 4,
     "unexpected key 'x'"},
    {"key twice", 1, 0, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}", 4,
     "key 'descr' appears twice"},
    {"shape not a tuple", 1, 0, H("'<f4'", "False", "(5)"), 20, "shape (5) is not a tuple"},
    {"shape a list", 1, 0, H("'<f4'", "False", "[5]"), 20, "expected a shape tuple '('"},
    {"negative dimension", 1, 0, H("'<f4'", "False", "(2, -1)"), 0, "negative dimension"},
    {"nine dimensions", 1, 0, H("'|u1'", "False", "(1, 1, 1, 1, 1, 1, 1, 1, 1)"), 1,
     "more than 8 dimensions"},
    {"dimension past 2^63", 1, 0, H("'|u1'", "False", "(9223372036854775808,)"), 1,
     "expected a dimension below 2^63"},
    {"size overflow", 1, 0, H("'<f4'", "False", "(4611686018427387904, 4)"), 1,
     "shape (4611686018427387904, 4) is too large"},
    {"empty dimension", 1, 0, H("'<f4'", "False", "(2,,3)"), 24, "expected a dimension"},
    {"missing comma in shape", 1, 0, H("'<f4'", "False", "(2 3)"), 24,
     "expected ',' or ')' in the shape"},
    {"missing comma", 1, 0, "{'descr': '<f4' 'fortran_order': False, 'shape': ()}", 4,
     "expected ',' or '}'"},
    {"missing colon", 1, 0, "{'descr' '<f4', 'fortran_order': False, 'shape': ()}", 4,
     "expected ':' at byte 9"},
    {"unterminated key", 1, 0, "{'descr", 4, "expected a quoted key"},
    {"not a dict", 1, 0, "('<f4', False, ())", 4, "expected '{' at byte 0"},
    {"bytes after the dict", 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': ()} x", 4,
     "expected only padding after '}'"},
    {"truncated data", 1, 0, H("'<f4'", "False", "(2, 3)"), 20,
     "shape (2, 3) of '<f4' needs 24 bytes of data but the file holds 20 (truncated?)"},
    {"trailing data", 1, 0, H("'<f4'", "False", "(2, 3)"), 28,
     "needs 24 bytes of data but the file holds 28"},
    {"scalar without data", 1, 0, H("'<f8'", "False", "()"), 0, "needs 8 bytes"},
};

static unsigned char *bad_image(const struct bad_case *c, size_t *n) {
    if (c->header) return npy_image(c->major, c->minor, c->header, c->data_len, n);
    unsigned char *buf = malloc(c->data_len + 1);
    for (size_t i = 0; i < c->data_len; i++) buf[i] = (unsigned char)"\x93NUMPZ\x01\x00"[i % 8];
    *n = c->data_len;
    return buf;
}

START_TEST(test_bad_files) {
    char err[512];
    for (size_t k = 0; k < sizeof k_bad / sizeof k_bad[0]; k++) {
        size_t n;
        unsigned char *img = bad_image(&k_bad[k], &n);
        moeq_test_write_file(g_path, img, n);
        free(img);
        npy_array a;
        err[0] = '\0';
        ck_assert_msg(npy_read(g_path, &a, err, sizeof err) == -1, "%s: read", k_bad[k].label);
        ck_assert_msg(strstr(err, k_bad[k].want) && strstr(err, g_path),
                      "%s: message \"%s\" lacks \"%s\" or the path", k_bad[k].label, err,
                      k_bad[k].want);
        ck_assert_ptr_null(a.data);
        ck_assert_int_eq(a.ndim, 0);
    }
    /* Header lengths that run past the file or past any sane size. */
    static const unsigned char long_v1[] = "\x93NUMPY\x01\x00\xf4\x01{}";
    moeq_test_write_file(g_path, long_v1, sizeof long_v1 - 1);
    npy_array a;
    ck_assert_int_eq(npy_read(g_path, &a, err, sizeof err), -1);
    ck_assert_ptr_nonnull(
        strstr(err, "header length 500 runs past the end of the file (12 bytes)"));
    static const unsigned char huge_v2[] = "\x93NUMPY\x02\x00\xff\xff\xff\xff{}";
    moeq_test_write_file(g_path, huge_v2, sizeof huge_v2 - 1);
    ck_assert_int_eq(npy_read(g_path, &a, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "header length 4294967295 exceeds the limit"));
    /* No file, or a directory. */
    char missing[160];
    snprintf(missing, sizeof missing, "%s/missing.npy", g_dir);
    ck_assert_int_eq(npy_read(missing, &a, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "missing.npy: cannot open: "));
    ck_assert_int_eq(npy_read(g_dir, &a, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "not a regular file"));
    /* A NULL error buffer is fine. */
    ck_assert_int_eq(npy_read(missing, &a, NULL, 0), -1);
}
END_TEST

/* A good file and every bad one cut at every length: an error, never a crash. */
START_TEST(test_truncated_files) {
    char err[512];
    float data[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    ck_assert_int_eq(npy_write(g_path, MOEQ_DTYPE_F32, 2, shape, data, err, sizeof err), 0);
    size_t n;
    unsigned char *good = moeq_test_read_file(g_path, &n);
    const size_t n_bad = sizeof k_bad / sizeof k_bad[0];
    for (size_t k = 0; k <= n_bad; k++) {
        size_t len = n;
        unsigned char *img = k < n_bad ? bad_image(&k_bad[k], &len) : good;
        /* Cutting the extra bytes off "trailing data" makes a good file. */
        bool trailing = k < n_bad && strcmp(k_bad[k].label, "trailing data") == 0;
        for (size_t cut = 0; cut < len; cut++) {
            moeq_test_write_file(g_path, img, cut);
            npy_array a;
            if (npy_read(g_path, &a, err, sizeof err) == 0) {
                ck_assert_msg(trailing && cut == len - 4, "case %zu cut at %zu reads", k, cut);
                npy_free(&a);
                continue;
            }
            ck_assert_ptr_null(a.data);
        }
        if (img != good) free(img);
    }
    free(good);
}
END_TEST

START_TEST(test_write_errors) {
    char err[512];
    int64_t shape[MOEQ_MAX_DIMS + 1] = {2, 2, 1, 1, 1, 1, 1, 1, 1};
    float data[4] = {0};
    ck_assert_int_eq(npy_write(g_path, MOEQ_DTYPE_INVALID, 1, shape, data, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "dtype invalid has no .npy equivalent"));
    ck_assert_int_eq(npy_write(g_path, 99, 1, shape, data, err, sizeof err), -1);
    ck_assert_int_eq(npy_write(g_path, MOEQ_DTYPE_F32, 9, shape, data, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "ndim 9 is outside 0..8"));
    ck_assert_int_eq(npy_write(g_path, MOEQ_DTYPE_F32, -1, shape, data, err, sizeof err), -1);
    ck_assert_int_eq(npy_write(g_path, MOEQ_DTYPE_F32, 1, NULL, data, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "shape is NULL"));
    int64_t negative[1] = {-4};
    ck_assert_int_eq(npy_write(g_path, MOEQ_DTYPE_F32, 1, negative, data, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "negative dimension"));
    ck_assert_int_eq(npy_write(g_path, MOEQ_DTYPE_F32, 2, shape, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "data is NULL"));
    ck_assert_int_ne(access(g_path, F_OK), 0);
    char missing[160];
    snprintf(missing, sizeof missing, "%s/no/dir/x.npy", g_dir);
    ck_assert_int_eq(npy_write(missing, MOEQ_DTYPE_F32, 2, shape, data, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "x.npy: cannot create: "));
    /* An empty array needs no data. */
    int64_t empty[2] = {0, 3};
    ck_assert_int_eq(npy_write(g_path, MOEQ_DTYPE_F32, 2, empty, NULL, err, sizeof err), 0);
    ck_assert_str_eq(npy_descr(MOEQ_DTYPE_BF16), "<u2");
    ck_assert_str_eq(npy_descr(MOEQ_DTYPE_F8_E4M3), "|u1");
    ck_assert_ptr_null(npy_descr(MOEQ_DTYPE_INVALID));
}
END_TEST

static Suite *npy_suite(void) {
    Suite *s = suite_create("npy");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, make_dir, remove_dir);
    tcase_add_test(tc, test_numpy_header_bytes);
    tcase_add_test(tc, test_round_trips);
    tcase_add_test(tc, test_read_variants);
    tcase_add_test(tc, test_bad_files);
    tcase_add_test(tc, test_truncated_files);
    tcase_add_test(tc, test_write_errors);
    suite_add_tcase(s, tc);
    return s;
}

/* Reads IN and writes it to OUT (for npy_numpy.py). */
static int copy_npy(const char *in, const char *out) {
    char err[512];
    npy_array a;
    if (npy_read(in, &a, err, sizeof err) != 0 ||
        npy_write(out, a.dtype, a.ndim, a.shape, a.data, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        npy_free(&a);
        return EXIT_FAILURE;
    }
    npy_free(&a);
    return EXIT_SUCCESS;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--copy") == 0) return copy_npy(argv[2], argv[3]);
    SRunner *sr = srunner_create(npy_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

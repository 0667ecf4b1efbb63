/*
 * check_pyjson.c - the JSON writer behind config.json and the safetensors
 * index: its text must be byte for byte Python's
 * json.dumps(value, indent=2, sort_keys=True) (the expected strings below
 * were printed by CPython 3).
 */
#include "test_util.h"
#include "common/internal.h"
#include "common/pyjson.h"

static const struct {
    double v;
    bool single;
    const char *want; /* repr(v) */
} k_floats[] = {
    {2.5, false, "2.5"},
    {1.0, false, "1.0"},
    {100.0, false, "100.0"},
    {0.1, false, "0.1"},
    {(double)0.1f, true, "0.1"}, /* a float32 given as 0.1f */
    {(double)0.1f, false, "0.10000000149011612"},
    {1e-06, false, "1e-06"},
    {0.0001, false, "0.0001"},
    {0.00001, false, "1e-05"},
    {1.5e-07, false, "1.5e-07"},
    {1e16, false, "1e+16"},
    {1234567890123456.0, false, "1234567890123456.0"},
    {123456789012345680.0, false, "1.2345678901234568e+17"},
    {1e22, false, "1e+22"},
    {5e-324, false, "5e-324"},
    {1.7976931348623157e308, false, "1.7976931348623157e+308"},
    {2.0383694171905518, false, "2.0383694171905518"},
    {-0.0, false, "-0.0"},
    {0.0, false, "0.0"},
    {-2.5, false, "-2.5"},
    {-1e-06, false, "-1e-06"},
};

START_TEST(test_float_repr) {
    char buf[64];
    moeq__py_float_repr(k_floats[_i].v, k_floats[_i].single, buf, sizeof buf);
    ck_assert_str_eq(buf, k_floats[_i].want);
}
END_TEST

START_TEST(test_document) {
    moeq__pj *d = moeq__pj_create();
    ck_assert_ptr_nonnull(d);
    moeq__pjv *root = moeq__pj_object(d);
    moeq__pjv *b = moeq__pj_array(d);
    moeq__pj_push(d, b, moeq__pj_int(d, 1));
    moeq__pjv *inner = moeq__pj_object(d);
    moeq__pj_set(d, inner, "z", moeq__pj_null(d));
    moeq__pj_set(d, inner, "a", moeq__pj_array(d));
    moeq__pj_push(d, b, inner);
    moeq__pj_set(d, root, "b", b);
    moeq__pj_set(d, root, "a",
                 moeq__pj_string(d, "\b\f\x01\x7f\xc3\xa9\xf0\x9f\x98\x80\"\\/\t\n\r"));
    moeq__pj_set(d, root, "c", moeq__pj_object(d));
    moeq__pj_set(d, root, "\xc3\xa9k", moeq__pj_bool(d, true));
    moeq__pj_set(d, root, "Z", moeq__pj_float(d, 1.5, false));
    size_t len;
    const char *why = NULL;
    char *text = moeq__pj_dump(d, root, &len, &why);
    ck_assert_ptr_nonnull(text);
    ck_assert_str_eq(text,
                     "{\n"
                     "  \"Z\": 1.5,\n"
                     "  \"a\": \"\\b\\f\\u0001\\u007f\\u00e9\\ud83d\\ude00\\\"\\\\/\\t\\n\\r\",\n"
                     "  \"b\": [\n"
                     "    1,\n"
                     "    {\n"
                     "      \"a\": [],\n"
                     "      \"z\": null\n"
                     "    }\n"
                     "  ],\n"
                     "  \"c\": {},\n"
                     "  \"\\u00e9k\": true\n"
                     "}");
    ck_assert_uint_eq(len, strlen(text));
    moeq__free(text);
    moeq__pj_destroy(d);
}
END_TEST

START_TEST(test_failures) {
    const char *why = NULL;
    size_t len;
    /* a string that is not UTF-8 */
    moeq__pj *d = moeq__pj_create();
    moeq__pjv *root = moeq__pj_object(d);
    moeq__pj_set(d, root, "k", moeq__pj_string(d, "bad \xff byte"));
    ck_assert_ptr_null(moeq__pj_dump(d, root, &len, &why));
    ck_assert_str_eq(why, "a string is not valid UTF-8");
    moeq__pj_destroy(d);
    /* NaN is not JSON; the failure sticks */
    d = moeq__pj_create();
    root = moeq__pj_object(d);
    moeq__pj_set(d, root, "x", moeq__pj_float(d, 0.0 / 0.0, false));
    moeq__pj_set(d, root, "y", moeq__pj_int(d, 1));
    ck_assert_ptr_null(moeq__pj_dump(d, root, &len, &why));
    ck_assert_str_eq(why, "a float is not finite");
    moeq__pj_destroy(d);
    /* allocation failures: reported as out of memory, nothing leaks */
    bool done = false;
    for (long k = 0; k < 100 && !done; k++) {
        moeq__test_fail_alloc_after(k);
        d = moeq__pj_create();
        char *text = NULL;
        if (d) {
            root = moeq__pj_object(d);
            moeq__pjv *a = moeq__pj_array(d);
            moeq__pj_push(d, a, moeq__pj_uint(d, 18446744073709551615ull));
            moeq__pj_set(d, root, "list", a);
            moeq__pj_set(d, root, "s", moeq__pj_string(d, "x"));
            text = moeq__pj_dump(d, root, &len, &why);
        }
        moeq__test_fail_alloc_after(-1);
        if (text) {
            ck_assert_str_eq(text,
                             "{\n  \"list\": [\n    18446744073709551615\n  ],\n  \"s\": \"x\"\n}");
            done = true;
        } else if (d) {
            ck_assert_str_eq(why, "out of memory");
        }
        moeq__free(text);
        moeq__pj_destroy(d);
    }
    ck_assert(done);
}
END_TEST

Suite *pyjson_suite(void);
Suite *pyjson_suite(void) {
    Suite *s = suite_create("pyjson");
    TCase *tc = tcase_create("pyjson");
    tcase_add_loop_test(tc, test_float_repr, 0, (int)(sizeof k_floats / sizeof k_floats[0]));
    tcase_add_test(tc, test_document);
    tcase_add_test(tc, test_failures);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(pyjson_suite)

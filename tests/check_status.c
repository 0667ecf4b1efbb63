/* check_status.c - status codes, dtype/format names, error records, string builder. */
#include "test_util.h"
#include "common/internal.h"

START_TEST(test_status_names) {
    ck_assert_str_eq(moeq_status_name(MOEQ_STATUS_OK), "OK");
    ck_assert_str_eq(moeq_status_name(MOEQ_STATUS_REGEX), "REGEX");
    ck_assert_str_eq(moeq_status_name(MOEQ_STATUS_LIMIT), "LIMIT");
    ck_assert_str_eq(moeq_status_name(999), "UNKNOWN");
    ck_assert_str_eq(moeq_status_str(MOEQ_STATUS_NOMEM), "out of memory");
    /* Values are part of the ABI. */
    ck_assert_int_eq(MOEQ_STATUS_INTERNAL, 14);
    for (int s = 0; s < MOEQ_STATUS_COUNT_; s++) {
        ck_assert_str_ne(moeq_status_name(s), "UNKNOWN");
        ck_assert(strlen(moeq_status_str(s)) > 0);
    }
}
END_TEST

START_TEST(test_dtypes) {
    ck_assert_int_eq(moeq_dtype_from_name("BF16"), MOEQ_DTYPE_BF16);
    ck_assert_int_eq(moeq_dtype_from_name("F8_E4M3"), MOEQ_DTYPE_F8_E4M3);
    ck_assert_int_eq(moeq_dtype_from_name("bf16"), MOEQ_DTYPE_INVALID);
    ck_assert_int_eq(moeq_dtype_from_name("invalid"), MOEQ_DTYPE_INVALID);
    ck_assert_uint_eq(moeq_dtype_size(MOEQ_DTYPE_I64), 8);
    ck_assert_uint_eq(moeq_dtype_size(MOEQ_DTYPE_BOOL), 1);
    ck_assert_uint_eq(moeq_dtype_size(77), 0);
    ck_assert_str_eq(moeq_format_name(MOEQ_FORMAT_NVFP4_PACK_QUANTIZED), "nvfp4-pack-quantized");
    ck_assert_str_eq(moeq_format_name(MOEQ_FORMAT_NONE), "");
}
END_TEST

START_TEST(test_error_truncation) {
    moeq_error err;
    moeq_error_clear(&err);
    ck_assert_int_eq(err.code, 0);
    char big[4000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ck_assert_int_eq(moeq__error(&err, MOEQ_STATUS_SCHEMA, "%s", big), MOEQ_STATUS_SCHEMA);
    ck_assert_int_eq(err.code, MOEQ_STATUS_SCHEMA);
    size_t len = strlen(err.message);
    ck_assert_uint_eq(len, sizeof err.message - 1);
    ck_assert_str_eq(err.message + len - 3, "...");
    moeq__error(&err, MOEQ_STATUS_SHAPE, "tensor %s: want %d", "w", 3);
    moeq__error_prefix(&err, MOEQ_STATUS_SHAPE, "layer %s", "L");
    ck_assert_str_eq(err.message, "layer L: tensor w: want 3");
    ck_assert_int_eq(moeq__error(NULL, MOEQ_STATUS_IO, "x"), MOEQ_STATUS_IO);
}
END_TEST

START_TEST(test_string_builder) {
    moeq__sb sb;
    moeq__sb_init(&sb);
    moeq__sb_puts(&sb, "a");
    moeq__sb_printf(&sb, "%d-%s", 42, "b");
    moeq__sb_json_string(&sb, "q\"\\\n\x01");
    char *s = moeq__sb_take(&sb);
    ck_assert_str_eq(s, "a42-b\"q\\\"\\\\\\n\\u0001\"");
    moeq__free(s);
    /* A failed allocation poisons the builder instead of crashing. */
    moeq__sb_init(&sb);
    moeq__test_fail_alloc_after(0);
    moeq__sb_puts(&sb, "abc");
    moeq__test_fail_alloc_after(-1);
    ck_assert(sb.failed);
    ck_assert_ptr_null(moeq__sb_take(&sb));
}
END_TEST

static int log_calls;
static void count_log(int32_t level, const char *msg, void *user) {
    (void)level;
    (void)msg;
    *(int *)user += 1;
}

START_TEST(test_log_callback) {
    log_calls = 0;
    moeq__log(MOEQ_LOG_INFO, "dropped");
    moeq_set_log_callback(count_log, &log_calls);
    moeq__log(MOEQ_LOG_WARN, "seen %d", 1);
    moeq_set_log_callback(NULL, NULL);
    moeq__log(MOEQ_LOG_WARN, "dropped");
    ck_assert_int_eq(log_calls, 1);
}
END_TEST

START_TEST(test_version) {
    ck_assert_int_eq(moeq_version_number(), MOEQ_VERSION_NUMBER);
    ck_assert_str_eq(moeq_version(), "0.1.0");
}
END_TEST

static Suite *status_suite(void) {
    Suite *s = suite_create("status");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_status_names);
    tcase_add_test(tc, test_dtypes);
    tcase_add_test(tc, test_error_truncation);
    tcase_add_test(tc, test_string_builder);
    tcase_add_test(tc, test_log_callback);
    tcase_add_test(tc, test_version);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(status_suite)

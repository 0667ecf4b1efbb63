/*
 * status.c - status, dtype, format and strategy names; error records; the log
 * callback; allocation and string-builder helpers shared by every module.
 */
#define _DEFAULT_SOURCE /* madvise */
#include "common/internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#ifndef MOEQ_VERSION_STRING
#define MOEQ_VERSION_STRING "0.0.0"
#endif

const char *moeq_version(void) {
    return MOEQ_VERSION_STRING;
}

int32_t moeq_version_number(void) {
    return MOEQ_VERSION_NUMBER;
}

/* ---- status ------------------------------------------------------------ */

const char *moeq_status_name(int32_t status) {
    switch (status) {
#define MOEQ_X_(name, value, text)                                                                 \
    case value: return #name;
        MOEQ_STATUS_MAP(MOEQ_X_)
#undef MOEQ_X_
        default: return "UNKNOWN";
    }
}

const char *moeq_status_str(int32_t status) {
    switch (status) {
#define MOEQ_X_(name, value, text)                                                                 \
    case value: return text;
        MOEQ_STATUS_MAP(MOEQ_X_)
#undef MOEQ_X_
        default: return "unknown status";
    }
}

/* ---- dtypes and formats --------------------------------------------------- */

const char *moeq_dtype_name(int32_t dtype) {
    switch (dtype) {
#define MOEQ_X_(name, value, text, size)                                                           \
    case value: return text;
        MOEQ_DTYPE_MAP(MOEQ_X_)
#undef MOEQ_X_
        default: return "invalid";
    }
}

size_t moeq_dtype_size(int32_t dtype) {
    switch (dtype) {
#define MOEQ_X_(name, value, text, size)                                                           \
    case value: return size;
        MOEQ_DTYPE_MAP(MOEQ_X_)
#undef MOEQ_X_
        default: return 0;
    }
}

int32_t moeq_dtype_from_name(const char *name) {
    if (!name) return MOEQ_DTYPE_INVALID;
#define MOEQ_X_(name_, value, text, size)                                                          \
    if (value != 0 && strcmp(name, text) == 0) return value;
    MOEQ_DTYPE_MAP(MOEQ_X_)
#undef MOEQ_X_
    return MOEQ_DTYPE_INVALID;
}

const char *moeq__torch_dtype_name(int32_t dtype) {
    switch (dtype) {
        case MOEQ_DTYPE_F64: return "torch.float64";
        case MOEQ_DTYPE_F32: return "torch.float32";
        case MOEQ_DTYPE_F16: return "torch.float16";
        case MOEQ_DTYPE_BF16: return "torch.bfloat16";
        case MOEQ_DTYPE_F8_E4M3: return "torch.float8_e4m3fn";
        case MOEQ_DTYPE_F8_E5M2: return "torch.float8_e5m2";
        case MOEQ_DTYPE_I8: return "torch.int8";
        case MOEQ_DTYPE_U8: return "torch.uint8";
        case MOEQ_DTYPE_I16: return "torch.int16";
        case MOEQ_DTYPE_U16: return "torch.uint16";
        case MOEQ_DTYPE_I32: return "torch.int32";
        case MOEQ_DTYPE_U32: return "torch.uint32";
        case MOEQ_DTYPE_I64: return "torch.int64";
        case MOEQ_DTYPE_U64: return "torch.uint64";
        case MOEQ_DTYPE_BOOL: return "torch.bool";
        default: return NULL;
    }
}

const char *moeq_format_name(int32_t format) {
    switch (format) {
#define MOEQ_X_(name, value, text)                                                                 \
    case value: return text;
        MOEQ_FORMAT_MAP(MOEQ_X_)
#undef MOEQ_X_
        default: return "";
    }
}

const char *moeq_strategy_name(int32_t strategy) {
    static const char *const names[] = {"tensor", "channel",      "group",    "block",
                                        "token",  "tensor_group", "attn_head"};
    if (strategy < 0 || (size_t)strategy >= MOEQ__ARRAY_LEN(names)) return "unknown";
    return names[strategy];
}

const char *moeq_actorder_name(int32_t actorder) {
    static const char *const names[] = {"none", "group", "weight", "dynamic", "static"};
    if (actorder < 0 || (size_t)actorder >= MOEQ__ARRAY_LEN(names)) return "unknown";
    return names[actorder];
}

int32_t moeq_actorder_is_group(int32_t actorder) {
    return actorder == MOEQ_ACTORDER_GROUP || actorder == MOEQ_ACTORDER_DYNAMIC;
}

/* ---- errors ---------------------------------------------------------------- */

void moeq_error_clear(moeq_error *err) {
    if (!err) return;
    err->code = MOEQ_STATUS_OK;
    err->message[0] = '\0';
}

static void mark_truncated(char *buf, size_t size, int written) {
    if (written >= 0 && (size_t)written >= size && size >= 4) {
        memcpy(buf + size - 4, "...", 4);
    }
}

moeq_status moeq__verror(moeq_error *err, moeq_status code, const char *fmt, va_list ap) {
    if (!err) return code;
    err->code = (int32_t)code;
    int n = vsnprintf(err->message, sizeof err->message, fmt, ap);
    if (n < 0) err->message[0] = '\0';
    mark_truncated(err->message, sizeof err->message, n);
    return code;
}

moeq_status moeq__error(moeq_error *err, moeq_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    moeq__verror(err, code, fmt, ap);
    va_end(ap);
    return code;
}

moeq_status moeq__error_prefix(moeq_error *err, moeq_status code, const char *fmt, ...) {
    if (!err) return code;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    if (n < 0) return (moeq_status)err->code;
    mark_truncated(prefix, sizeof prefix, n);
    char old[MOEQ_ERROR_MESSAGE_SIZE];
    memcpy(old, err->message, sizeof old);
    old[sizeof old - 1] = '\0';
    int m = snprintf(err->message, sizeof err->message, "%s: %s", prefix, old);
    mark_truncated(err->message, sizeof err->message, m);
    if (err->code == MOEQ_STATUS_OK) err->code = (int32_t)code;
    return (moeq_status)err->code;
}

/* ---- logging --------------------------------------------------------------- */

/* The callback and its user data are swapped together under a tiny spin lock
 * so a logging thread never sees a new function with old user data. */
static moeq_log_fn g_log_fn;
static void *g_log_user;
static atomic_flag g_log_lock = ATOMIC_FLAG_INIT;

void moeq_set_log_callback(moeq_log_fn fn, void *user_data) {
    while (atomic_flag_test_and_set_explicit(&g_log_lock, memory_order_acquire)) {
    }
    g_log_fn = fn;
    g_log_user = user_data;
    atomic_flag_clear_explicit(&g_log_lock, memory_order_release);
}

bool moeq__log_enabled(void) {
    while (atomic_flag_test_and_set_explicit(&g_log_lock, memory_order_acquire)) {
    }
    bool on = g_log_fn != NULL;
    atomic_flag_clear_explicit(&g_log_lock, memory_order_release);
    return on;
}

void moeq__log(int32_t level, const char *fmt, ...) {
    while (atomic_flag_test_and_set_explicit(&g_log_lock, memory_order_acquire)) {
    }
    moeq_log_fn fn = g_log_fn;
    void *user = g_log_user;
    atomic_flag_clear_explicit(&g_log_lock, memory_order_release);
    if (!fn) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    mark_truncated(buf, sizeof buf, n);
    fn(level, buf, user);
}

/* ---- the cJSON parser lock ---------------------------------------------------- */

static pthread_mutex_t g_json_lock = PTHREAD_MUTEX_INITIALIZER;

void moeq__json_lock(void) {
    pthread_mutex_lock(&g_json_lock);
}

void moeq__json_unlock(void) {
    pthread_mutex_unlock(&g_json_lock);
}

/* ---- allocation ---------------------------------------------------------- */

static long g_fail_after = -1;

void moeq__test_fail_alloc_after(long n) {
    g_fail_after = n;
}

static bool alloc_allowed(void) {
    if (g_fail_after < 0) return true;
    if (g_fail_after == 0) return false;
    g_fail_after--;
    return true;
}

void *moeq__malloc(size_t n) {
    if (!alloc_allowed()) return NULL;
    return malloc(n ? n : 1);
}

void *moeq__calloc(size_t count, size_t size) {
    if (!alloc_allowed()) return NULL;
    if (count == 0 || size == 0) return calloc(1, 1);
    return calloc(count, size);
}

void *moeq__realloc(void *p, size_t n) {
    if (!alloc_allowed()) return NULL;
    return realloc(p, n ? n : 1);
}

void moeq__free(void *p) {
    free(p);
}

void *moeq__malloc_huge(size_t n) {
    if (!alloc_allowed()) return NULL;
    const size_t huge = (size_t)2 << 20;
    if (n > SIZE_MAX - huge) return NULL;
    const size_t len = (n + huge - 1) / huge * huge; /* whole huge pages: the last one too */
    void *p = NULL;
    if (posix_memalign(&p, huge, len ? len : huge) != 0) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* advice only: where THP is off, or the kernel declines, 4 KiB pages it is */
    (void)madvise(p, len, MADV_HUGEPAGE);
#endif
    return p;
}

void moeq_free(void *p) {
    free(p);
}

char *moeq__strndup(const char *s, size_t n) {
    char *d = moeq__malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *moeq__strdup(const char *s) {
    return s ? moeq__strndup(s, strlen(s)) : NULL;
}

bool moeq__mul_size(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return false;
    *out = a * b;
    return true;
}

bool moeq__add_size(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a) return false;
    *out = a + b;
    return true;
}

/* ---- string builder -------------------------------------------------------- */

void moeq__sb_init(moeq__sb *sb) {
    sb->data = NULL;
    sb->len = 0;
    sb->cap = 0;
    sb->failed = false;
}

void moeq__sb_free(moeq__sb *sb) {
    moeq__free(sb->data);
    moeq__sb_init(sb);
}

static bool sb_reserve(moeq__sb *sb, size_t extra) {
    if (sb->failed) return false;
    size_t need;
    if (!moeq__add_size(sb->len, extra, &need) || !moeq__add_size(need, 1, &need)) {
        sb->failed = true;
        return false;
    }
    if (need <= sb->cap) return true;
    size_t cap = sb->cap ? sb->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    char *p = moeq__realloc(sb->data, cap);
    if (!p) {
        sb->failed = true;
        return false;
    }
    sb->data = p;
    sb->cap = cap;
    return true;
}

void moeq__sb_reserve(moeq__sb *sb, size_t extra) {
    (void)sb_reserve(sb, extra);
}

void moeq__sb_append(moeq__sb *sb, const char *s, size_t n) {
    if (!sb_reserve(sb, n)) return;
    memcpy(sb->data + sb->len, s, n);
    sb->len += n;
    sb->data[sb->len] = '\0';
}

void moeq__sb_puts(moeq__sb *sb, const char *s) {
    moeq__sb_append(sb, s, strlen(s));
}

void moeq__sb_putc(moeq__sb *sb, char c) {
    moeq__sb_append(sb, &c, 1);
}

void moeq__sb_printf(moeq__sb *sb, const char *fmt, ...) {
    if (sb->failed) return;
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        sb->failed = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        moeq__sb_append(sb, small, (size_t)n);
        return;
    }
    if (!sb_reserve(sb, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb->len += (size_t)n;
}

void moeq__sb_json_string(moeq__sb *sb, const char *s) {
    static const char hex[] = "0123456789abcdef";
    moeq__sb_putc(sb, '"');
    const char *run = s;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        moeq__sb_append(sb, run, (size_t)(p - run));
        run = p + 1;
        switch (c) {
            case '"': moeq__sb_append(sb, "\\\"", 2); break;
            case '\\': moeq__sb_append(sb, "\\\\", 2); break;
            case '\n': moeq__sb_append(sb, "\\n", 2); break;
            case '\r': moeq__sb_append(sb, "\\r", 2); break;
            case '\t': moeq__sb_append(sb, "\\t", 2); break;
            default: {
                char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
                moeq__sb_append(sb, esc, 6);
            }
        }
    }
    moeq__sb_append(sb, run, strlen(run));
    moeq__sb_putc(sb, '"');
}

char *moeq__sb_take(moeq__sb *sb) {
    if (sb->failed) {
        moeq__sb_free(sb);
        return NULL;
    }
    if (!sb->data && !sb_reserve(sb, 0)) return NULL;
    if (sb->len == 0) sb->data[0] = '\0';
    char *p = sb->data;
    moeq__sb_init(sb);
    return p;
}

/* ---- files ------------------------------------------------------------------ */

moeq_status moeq__read_file(const char *path, char **out, size_t *out_len, moeq_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        return moeq__error(err, MOEQ_STATUS_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    /* Only regular files: a FIFO or a device such as /dev/zero would block
     * or never end. */
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return moeq__error(err, MOEQ_STATUS_IO, "%s: not a regular file", path);
    }
    if ((uintmax_t)st.st_size > MOEQ__MAX_TEXT_FILE) {
        fclose(f);
        return moeq__error(err, MOEQ_STATUS_LIMIT,
                           "%s: %lld bytes; JSON files over %u bytes are refused", path,
                           (long long)st.st_size, MOEQ__MAX_TEXT_FILE);
    }
    moeq__sb sb;
    moeq__sb_init(&sb);
    char buf[65536];
    size_t n;
    /* The cap holds even if the file grows while it is read. */
    while ((n = fread(buf, 1, sizeof buf, f)) > 0 && sb.len <= MOEQ__MAX_TEXT_FILE) {
        moeq__sb_append(&sb, buf, n);
    }
    if (sb.len > MOEQ__MAX_TEXT_FILE) {
        fclose(f);
        moeq__sb_free(&sb);
        return moeq__error(err, MOEQ_STATUS_LIMIT, "%s: grew past %u bytes while being read", path,
                           MOEQ__MAX_TEXT_FILE);
    }
    bool read_error = ferror(f) != 0;
    fclose(f);
    if (read_error) {
        moeq__sb_free(&sb);
        return moeq__error(err, MOEQ_STATUS_IO, "%s: read error", path);
    }
    size_t len = sb.len;
    char *data = moeq__sb_take(&sb);
    if (!data) return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory reading file", path);
    *out = data;
    if (out_len) *out_len = len;
    return MOEQ_STATUS_OK;
}

/*
 * internal.h - helpers shared by the library's source files.  Never installed.
 * Internal cross-file names use the moeq__ prefix.
 */
#ifndef MOEQ_INTERNAL_H
#define MOEQ_INTERNAL_H

#include "moeq/moeq.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MOEQ__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#if defined(__GNUC__)
#define MOEQ__PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define MOEQ__PRINTF(fmt_idx, arg_idx)
#endif

/* Fills `err` (if not NULL) with `code` and the formatted message; returns code.
 * Long messages are truncated with "...". */
moeq_status moeq__error(moeq_error *err, moeq_status code, const char *fmt, ...) MOEQ__PRINTF(3, 4);
moeq_status moeq__verror(moeq_error *err, moeq_status code, const char *fmt, va_list ap)
    MOEQ__PRINTF(3, 0);

/* Prepends "<prefix>: " to an error message already in `err` (used to add the
 * layer or file name as an error travels up).  Returns err->code (or the
 * given code when err is NULL). */
moeq_status moeq__error_prefix(moeq_error *err, moeq_status code, const char *fmt, ...)
    MOEQ__PRINTF(3, 4);

/* Sends a message to the user's log callback (if any). */
/* torch's name of a dtype ("torch.float8_e4m3fn"); NULL when it has none. */
const char *moeq__torch_dtype_name(int32_t dtype);

void moeq__log(int32_t level, const char *fmt, ...) MOEQ__PRINTF(2, 3);
bool moeq__log_enabled(void);

/* cJSON 1.7's parser writes a process-wide error record (global_error) on
 * every call: config.c and safetensors.c hold this lock around each
 * cJSON_Parse*, so concurrent moeq_config_parse / moeq_checkpoint_open calls
 * do not race on it.  Printing and reading parsed trees need no lock. */
void moeq__json_lock(void);
void moeq__json_unlock(void);

/* Allocation.  All library allocations go through these so that tests can
 * make the n-th allocation fail (moeq__test_fail_alloc_after). */
void *moeq__malloc(size_t n);
void *moeq__calloc(size_t count, size_t size);
void *moeq__realloc(void *p, size_t n);
void moeq__free(void *p);
/* n bytes (uninitialized, freed with moeq__free) in whole 2 MiB pages on a
 * 2 MiB boundary, on Linux advised MADV_HUGEPAGE: a layer's packed weights,
 * which one token streams 8 experts at a time, so that where transparent huge
 * pages are set to "madvise" the kernel backs them with 2 MiB pages (far
 * fewer TLB misses). */
void *moeq__malloc_huge(size_t n);
char *moeq__strdup(const char *s);
char *moeq__strndup(const char *s, size_t n);
/* Test hook: after `n` more successful allocations, every allocation fails;
 * a negative n disables the hook.  Not thread-safe; tests only. */
void moeq__test_fail_alloc_after(long n);

/* Overflow-checked size arithmetic: returns false on overflow. */
bool moeq__mul_size(size_t a, size_t b, size_t *out);
bool moeq__add_size(size_t a, size_t b, size_t *out);

/* A growable NUL-terminated string.  On allocation failure `failed` is set
 * and later appends are ignored, so callers check once at the end. */
typedef struct moeq__sb {
    char *data;
    size_t len;
    size_t cap;
    bool failed;
} moeq__sb;

void moeq__sb_init(moeq__sb *sb);
void moeq__sb_free(moeq__sb *sb);
void moeq__sb_append(moeq__sb *sb, const char *s, size_t n);
/* Makes room for `extra` more bytes up front (a hint; failure is recorded). */
void moeq__sb_reserve(moeq__sb *sb, size_t extra);
void moeq__sb_puts(moeq__sb *sb, const char *s);
void moeq__sb_putc(moeq__sb *sb, char c);
void moeq__sb_printf(moeq__sb *sb, const char *fmt, ...) MOEQ__PRINTF(2, 3);
/* Appends `s` as a JSON string literal (quotes and escapes included). */
void moeq__sb_json_string(moeq__sb *sb, const char *s);
/* Hands the buffer over (caller frees with moeq__free); NULL if it failed. */
char *moeq__sb_take(moeq__sb *sb);

/* Most experts a MoE layer may have (moeq_resolve_moe, moeq_moe_create, the
 * "moe N" lines of moeq_plan). */
#define MOEQ__MAX_EXPERTS 1000000u

/* Largest config.json or safetensors index moeq__read_file accepts. */
#define MOEQ__MAX_TEXT_FILE (256u << 20)

/* Reads a whole regular file into a NUL-terminated buffer (free with
 * moeq__free).  Errors name the path: IO (cannot open, not a regular file,
 * read error), LIMIT (over MOEQ__MAX_TEXT_FILE bytes), NOMEM. */
moeq_status moeq__read_file(const char *path, char **out, size_t *out_len, moeq_error *err);

#endif /* MOEQ_INTERNAL_H */

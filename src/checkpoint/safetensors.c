/*
 * safetensors.c - the checkpoint reader and the .safetensors writer.
 *
 * A .safetensors file is: an 8-byte little-endian header length N, N bytes of
 * UTF-8 JSON (tensor name -> {"dtype", "shape", "data_offsets"}, plus an
 * optional "__metadata__" object of strings), then the data region that the
 * offsets point into.  Sharded checkpoints add model.safetensors.index.json,
 * whose "weight_map" names the shard of every tensor.
 *
 * Files are mapped read-only and never read in full: opening costs the
 * headers, not the weights.  Every header is validated before any tensor is
 * handed out, and every error names the file (and the tensor).
 */
#define _DEFAULT_SOURCE /* madvise, MADV_DONTNEED (moeq__checkpoint_drop) */
#include "checkpoint/safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define INDEX_NAME  "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
#define SUFFIX      ".safetensors"

/* JSON numbers reach us as doubles; integers above 2^53 cannot be told apart. */
#define MAX_EXACT_INT 9007199254740992.0

typedef struct st_file {
    char *path;
    void *map; /* the whole file, PROT_READ */
    size_t size;
    const unsigned char *data; /* start of the data region */
    size_t data_size;
    char *strings;     /* tensor names, then metadata keys and values */
    const char **meta; /* key, value, key, value, ... into `strings` */
    uint32_t n_meta;
} st_file;

struct moeq_checkpoint {
    char *path; /* as given to moeq_checkpoint_open */
    st_file *files;
    uint32_t n_files;
    moeq_tensor *tensors; /* name order once open returns */
    uint64_t n_tensors;
    uint64_t cap_tensors;
};

/* ---- small helpers ---------------------------------------------------------- */

static bool has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* "<dir>/<name>", or a copy of `name` when dir is NULL. */
static char *path_join(const char *dir, const char *name) {
    if (!dir) return moeq__strdup(name);
    moeq__sb sb;
    moeq__sb_init(&sb);
    moeq__sb_puts(&sb, dir);
    if (sb.len > 0 && sb.data[sb.len - 1] != '/') moeq__sb_putc(&sb, '/');
    moeq__sb_puts(&sb, name);
    return moeq__sb_take(&sb);
}

static uint64_t read_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void write_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Offset of the first byte of s[0..n) that is not well-formed UTF-8 (overlong
 * forms and surrogates included), or n when all of it is. */
static size_t utf8_invalid_at(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2, cp = c & 0x1Fu, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, cp = c & 0x0Fu, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, cp = c & 0x07u, min = 0x10000;
        } else {
            return i;
        }
        if (n - i < len) return i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3Fu);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += len;
    }
    return n;
}

static const char *json_type(const cJSON *item) {
    if (cJSON_IsObject(item)) return "object";
    if (cJSON_IsArray(item)) return "array";
    if (cJSON_IsString(item)) return "string";
    if (cJSON_IsNumber(item)) return "number";
    if (cJSON_IsBool(item)) return "boolean";
    if (cJSON_IsNull(item)) return "null";
    return "value";
}

/* An exact non-negative integer (cJSON stores every number as a double). */
static bool json_uint(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item)) return false;
    double v = item->valuedouble;
    if (!(v >= 0.0 && v <= MAX_EXACT_INT)) return false;
    uint64_t u = (uint64_t)v;
    if ((double)u != v) return false;
    *out = u;
    return true;
}

/* "F64, F32, ..., BOOL" (what a dtype tag may be) into buf. */
static const char *known_dtypes(char *buf, size_t size) {
    size_t len = 0;
    buf[0] = '\0';
    for (int32_t d = 1; d < MOEQ_DTYPE_COUNT_ && len < size; d++) {
        int n = snprintf(buf + len, size - len, "%s%s", d > 1 ? ", " : "", moeq_dtype_name(d));
        if (n < 0) break;
        len += (size_t)n;
    }
    return buf;
}

/* "[2, 3]" into buf. */
static const char *shape_str(const int64_t *shape, int32_t ndim, char *buf, size_t size) {
    size_t len = 0;
    buf[0] = '\0';
    for (int32_t i = 0; i < ndim && len < size; i++) {
        int n = snprintf(buf + len, size - len, "%s%" PRId64, i ? ", " : "[", shape[i]);
        if (n < 0) break;
        len += (size_t)n;
    }
    if (len < size) snprintf(buf + len, size - len, "%s", ndim ? "]" : "[]");
    return buf;
}

/* product(shape) x element size; false on overflow. */
static bool tensor_bytes(const int64_t *shape, int32_t ndim, size_t elem, uint64_t *out) {
    size_t n = elem;
    for (int32_t i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (uint64_t)shape[i] > SIZE_MAX) return false;
        if (!moeq__mul_size(n, (size_t)shape[i], &n)) return false;
    }
    *out = n;
    return true;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const moeq_tensor *)a)->name, ((const moeq_tensor *)b)->name);
}

/* Binary search over the name-sorted tensors. */
static bool find_index(const moeq_checkpoint *ck, const char *name, uint64_t *index) {
    uint64_t lo = 0, hi = ck->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ck->tensors[mid].name, name);
        if (c == 0) {
            *index = mid;
            return true;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

/* ---- one file ------------------------------------------------------------------ */

static moeq_status map_file(st_file *f, moeq_error *err) {
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return moeq__error(err, MOEQ_STATUS_IO, "%s: cannot open: %s", f->path, strerror(errno));
    }
    struct stat st;
    moeq_status rc = MOEQ_STATUS_OK;
    if (fstat(fd, &st) != 0) {
        rc = moeq__error(err, MOEQ_STATUS_IO, "%s: cannot stat: %s", f->path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = moeq__error(err, MOEQ_STATUS_IO, "%s: not a regular file", f->path);
    } else if (st.st_size < 8) {
        rc = moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                         "%s: file is %lld bytes long, too short for the 8-byte header length",
                         f->path, (long long)st.st_size);
    } else if ((uintmax_t)st.st_size > SIZE_MAX) {
        rc = moeq__error(err, MOEQ_STATUS_LIMIT, "%s: file of %lld bytes cannot be mapped", f->path,
                         (long long)st.st_size);
    } else {
        f->size = (size_t)st.st_size;
        void *p = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            rc = moeq__error(err, MOEQ_STATUS_IO, "%s: cannot map %zu bytes: %s", f->path, f->size,
                             strerror(errno));
        } else {
            f->map = p;
        }
    }
    close(fd);
    return rc;
}

/* Validates one header entry and fills *t (name and file are set by the caller). */
static moeq_status parse_entry(const st_file *f, const char *name, const cJSON *entry,
                               moeq_tensor *t, moeq_error *err) {
    const moeq_status bad = MOEQ_STATUS_CHECKPOINT;
    if (!cJSON_IsObject(entry)) {
        return moeq__error(err, bad,
                           "%s: tensor '%s': entry is a JSON %s, not an object with dtype, shape "
                           "and data_offsets",
                           f->path, name, json_type(entry));
    }
    const cJSON *dtype = NULL, *shape = NULL, *offsets = NULL;
    for (const cJSON *k = entry->child; k; k = k->next) {
        const cJSON **slot = strcmp(k->string, "dtype") == 0          ? &dtype
                             : strcmp(k->string, "shape") == 0        ? &shape
                             : strcmp(k->string, "data_offsets") == 0 ? &offsets
                                                                      : NULL;
        if (!slot) {
            return moeq__error(err, bad,
                               "%s: tensor '%s': unexpected key '%s' (an entry holds exactly "
                               "dtype, shape and data_offsets)",
                               f->path, name, k->string);
        }
        if (*slot) {
            return moeq__error(err, bad, "%s: tensor '%s': key '%s' appears twice", f->path, name,
                               k->string);
        }
        *slot = k;
    }
    const char *missing = !dtype ? "dtype" : !shape ? "shape" : !offsets ? "data_offsets" : NULL;
    if (missing) {
        return moeq__error(err, bad, "%s: tensor '%s': entry has no '%s'", f->path, name, missing);
    }

    if (!cJSON_IsString(dtype)) {
        return moeq__error(err, bad, "%s: tensor '%s': dtype is a JSON %s, not a string", f->path,
                           name, json_type(dtype));
    }
    t->dtype = moeq_dtype_from_name(dtype->valuestring);
    if (t->dtype == MOEQ_DTYPE_INVALID) {
        char known[256];
        return moeq__error(err, bad, "%s: tensor '%s': unknown dtype '%s' (known: %s)", f->path,
                           name, dtype->valuestring, known_dtypes(known, sizeof known));
    }

    if (!cJSON_IsArray(shape)) {
        return moeq__error(err, bad, "%s: tensor '%s': shape is a JSON %s, not an array", f->path,
                           name, json_type(shape));
    }
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > MOEQ_MAX_DIMS) {
        return moeq__error(err, bad, "%s: tensor '%s': shape has %d dimensions, at most %d allowed",
                           f->path, name, ndim, MOEQ_MAX_DIMS);
    }
    t->ndim = (int32_t)ndim;
    int32_t d = 0;
    for (const cJSON *v = shape->child; v; v = v->next, d++) {
        uint64_t u;
        if (!json_uint(v, &u)) {
            return moeq__error(err, bad,
                               "%s: tensor '%s': shape[%d] is not a non-negative integer "
                               "(at most 2^53)",
                               f->path, name, (int)d);
        }
        t->shape[d] = (int64_t)u;
    }

    uint64_t begin, end;
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
        !json_uint(offsets->child, &begin) || !json_uint(offsets->child->next, &end)) {
        return moeq__error(err, bad,
                           "%s: tensor '%s': data_offsets must be [begin, end], two non-negative "
                           "integers",
                           f->path, name);
    }
    if (begin > end) {
        return moeq__error(err, bad,
                           "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] are reversed",
                           f->path, name, begin, end);
    }
    if (end > f->data_size) {
        return moeq__error(err, bad,
                           "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                           "] end past the data region of %zu bytes (file truncated?)",
                           f->path, name, begin, end, f->data_size);
    }
    char dims[256];
    if (!tensor_bytes(t->shape, t->ndim, moeq_dtype_size(t->dtype), &t->nbytes)) {
        return moeq__error(err, bad, "%s: tensor '%s': %s x %s elements overflow", f->path, name,
                           moeq_dtype_name(t->dtype),
                           shape_str(t->shape, t->ndim, dims, sizeof dims));
    }
    if (end - begin != t->nbytes) {
        return moeq__error(err, bad,
                           "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                           " bytes but %s %s needs %" PRIu64,
                           f->path, name, begin, end, end - begin, moeq_dtype_name(t->dtype),
                           shape_str(t->shape, t->ndim, dims, sizeof dims), t->nbytes);
    }
    t->data = f->data + begin;
    return MOEQ_STATUS_OK;
}

static int cmp_tensor_data(const void *a, const void *b) {
    const moeq_tensor *x = a, *y = b;
    const unsigned char *p = x->data, *q = y->data;
    if (p != q) return p < q ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Two tensors overlap when their byte ranges share a byte.  Empty tensors
 * share none, and gaps between tensors are allowed. */
static moeq_status check_overlaps(const st_file *f, moeq_tensor *t, size_t n, moeq_error *err) {
    if (n > 1) qsort(t, n, sizeof *t, cmp_tensor_data);
    const moeq_tensor *reach = NULL; /* the non-empty tensor that ends furthest so far */
    size_t reach_end = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i].nbytes == 0) continue;
        size_t begin = (size_t)((const unsigned char *)t[i].data - f->data);
        size_t end = begin + (size_t)t[i].nbytes;
        if (reach && begin < reach_end) {
            size_t rbegin = (size_t)((const unsigned char *)reach->data - f->data);
            return moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                               "%s: tensors '%s' (bytes %zu..%zu) and '%s' (bytes %zu..%zu) "
                               "overlap",
                               f->path, reach->name, rbegin, reach_end, t[i].name, begin, end);
        }
        if (!reach || end > reach_end) {
            reach = &t[i];
            reach_end = end;
        }
    }
    return MOEQ_STATUS_OK;
}

/* First pass over the header: checks __metadata__ and sizes the string arena. */
static moeq_status survey_header(const st_file *f, const cJSON *root, size_t *n_tensors,
                                 uint32_t *n_meta, size_t *string_bytes, moeq_error *err) {
    const cJSON *meta = NULL;
    size_t bytes = 0, tensors = 0, pairs = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") != 0) {
            tensors++;
            bytes += strlen(c->string) + 1;
            continue;
        }
        if (meta) {
            return moeq__error(err, MOEQ_STATUS_CHECKPOINT, "%s: '__metadata__' appears twice",
                               f->path);
        }
        meta = c;
        if (!cJSON_IsObject(meta)) {
            return moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                               "%s: '__metadata__' is a JSON %s, not an object of strings", f->path,
                               json_type(meta));
        }
        for (const cJSON *kv = meta->child; kv; kv = kv->next) {
            if (!cJSON_IsString(kv)) {
                return moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                                   "%s: '__metadata__' value of '%s' is a JSON %s, not a string",
                                   f->path, kv->string, json_type(kv));
            }
            pairs++;
            bytes += strlen(kv->string) + strlen(kv->valuestring) + 2;
        }
    }
    if (pairs > UINT32_MAX) {
        return moeq__error(err, MOEQ_STATUS_LIMIT, "%s: too many '__metadata__' entries", f->path);
    }
    *n_tensors = tensors;
    *n_meta = (uint32_t)pairs;
    *string_bytes = bytes;
    return MOEQ_STATUS_OK;
}

static char *arena_put(char **cursor, const char *s) {
    size_t n = strlen(s) + 1;
    char *at = *cursor;
    memcpy(at, s, n);
    *cursor += n;
    return at;
}

static bool reserve_tensors(moeq_checkpoint *ck, size_t more) {
    uint64_t need = ck->n_tensors + more;
    if (need <= ck->cap_tensors) return true;
    uint64_t cap = ck->cap_tensors ? ck->cap_tensors : 64;
    while (cap < need) cap *= 2;
    size_t bytes;
    if (cap > SIZE_MAX || !moeq__mul_size((size_t)cap, sizeof(moeq_tensor), &bytes)) return false;
    moeq_tensor *p = moeq__realloc(ck->tensors, bytes);
    if (!p) return false;
    ck->tensors = p;
    ck->cap_tensors = cap;
    return true;
}

/* Validates the parsed header of f and appends its tensors to ck->tensors. */
static moeq_status add_tensors(moeq_checkpoint *ck, st_file *f, const cJSON *root,
                               moeq_error *err) {
    size_t n = 0, bytes = 0;
    moeq_status rc = survey_header(f, root, &n, &f->n_meta, &bytes, err);
    if (rc != MOEQ_STATUS_OK) return rc;
    f->strings = moeq__malloc(bytes);
    f->meta = moeq__calloc(2 * (size_t)f->n_meta, sizeof *f->meta);
    if (!f->strings || !f->meta || !reserve_tensors(ck, n)) {
        return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory for %zu tensors", f->path, n);
    }
    char *cursor = f->strings;
    moeq_tensor *first = ck->tensors + ck->n_tensors;
    size_t i = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            uint32_t j = 0;
            for (const cJSON *kv = c->child; kv; kv = kv->next, j++) {
                f->meta[2 * j] = arena_put(&cursor, kv->string);
                f->meta[2 * j + 1] = arena_put(&cursor, kv->valuestring);
            }
            continue;
        }
        moeq_tensor *t = &first[i];
        memset(t, 0, sizeof *t);
        t->name = arena_put(&cursor, c->string);
        t->file = f->path;
        rc = parse_entry(f, t->name, c, t, err);
        if (rc != MOEQ_STATUS_OK) return rc;
        i++;
    }
    ck->n_tensors += n;
    return check_overlaps(f, first, n, err);
}

/* Checks the header length, then parses and validates the header of f. */
static moeq_status read_header(moeq_checkpoint *ck, st_file *f, moeq_error *err) {
    const moeq_status bad = MOEQ_STATUS_CHECKPOINT;
    uint64_t n = read_le64(f->map);
    if (n < 2) {
        return moeq__error(err, bad, "%s: header length %" PRIu64 " is below the minimum of 2",
                           f->path, n);
    }
    if (n > MOEQ__SAFETENSORS_MAX_HEADER) {
        return moeq__error(err, bad, "%s: header length %" PRIu64 " exceeds the limit of %u bytes",
                           f->path, n, MOEQ__SAFETENSORS_MAX_HEADER);
    }
    if (n > f->size - 8) {
        return moeq__error(
            err, bad, "%s: header length %" PRIu64 " runs past the end of the file (%zu bytes)",
            f->path, n, f->size);
    }
    const char *text = (const char *)f->map + 8;
    size_t len = (size_t)n;
    f->data = (const unsigned char *)f->map + 8 + len;
    f->data_size = f->size - 8 - len;

    const char *nul = memchr(text, '\0', len);
    if (nul) {
        return moeq__error(err, bad, "%s: header has a NUL byte at offset %zu", f->path,
                           (size_t)(nul - text));
    }
    size_t bad_utf8 = utf8_invalid_at((const unsigned char *)text, len);
    if (bad_utf8 < len) {
        return moeq__error(err, bad, "%s: header is not valid UTF-8 (byte %zu of the header)",
                           f->path, bad_utf8);
    }
    /* cJSON gets a NUL-terminated copy so that nothing it does can read past
     * the header. */
    char *copy = moeq__strndup(text, len);
    if (!copy) {
        return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory for the %zu-byte header",
                           f->path, len);
    }
    const char *end = NULL;
    moeq__json_lock();
    cJSON *root = cJSON_ParseWithLengthOpts(copy, len, &end, 0);
    moeq__json_unlock();
    moeq_status rc = MOEQ_STATUS_OK;
    if (!root) {
        size_t at = end ? (size_t)(end - copy) : 0;
        rc = moeq__error(err, bad, "%s: header is not valid JSON (error near byte %zu: \"%.24s\")",
                         f->path, at, copy + (at < len ? at : len));
    } else if (!cJSON_IsObject(root)) {
        rc = moeq__error(err, bad, "%s: header is a JSON %s, not an object", f->path,
                         json_type(root));
    } else {
        /* The writer pads the header with spaces; anything else after the
         * object is garbage. */
        size_t at = (size_t)(end - copy);
        while (at < len && strchr(" \t\r\n", copy[at])) at++;
        if (at < len) {
            rc = moeq__error(err, bad, "%s: header has bytes after the JSON object (byte %zu)",
                             f->path, at);
        } else {
            rc = add_tensors(ck, f, root, err);
        }
    }
    cJSON_Delete(root);
    moeq__free(copy);
    return rc;
}

/* Maps and validates the files "<dir>/<names[i]>" (or names[i] when dir is
 * NULL), then sorts every tensor by name and rejects duplicates. */
static moeq_status load_files(moeq_checkpoint *ck, const char *dir, const char *const *names,
                              uint32_t n, moeq_error *err) {
    ck->files = moeq__calloc(n, sizeof *ck->files);
    if (!ck->files) return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory", ck->path);
    for (uint32_t i = 0; i < n; i++) {
        st_file *f = &ck->files[i];
        f->path = path_join(dir, names[i]);
        if (!f->path) return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory", ck->path);
        ck->n_files = i + 1;
        moeq_status rc = map_file(f, err);
        if (rc == MOEQ_STATUS_OK) rc = read_header(ck, f, err);
        if (rc != MOEQ_STATUS_OK) return rc;
    }
    if (ck->n_tensors > 0)
        qsort(ck->tensors, (size_t)ck->n_tensors, sizeof *ck->tensors, cmp_tensor_name);
    for (uint64_t i = 1; i < ck->n_tensors; i++) {
        const moeq_tensor *a = &ck->tensors[i - 1], *b = &ck->tensors[i];
        if (strcmp(a->name, b->name) != 0) continue;
        if (a->file == b->file) {
            return moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                               "%s: tensor '%s' appears twice in the header", a->file, a->name);
        }
        return moeq__error(err, MOEQ_STATUS_CHECKPOINT, "tensor '%s' is in two files: %s and %s",
                           a->name, a->file, b->file);
    }
    return MOEQ_STATUS_OK;
}

/* ---- sharded checkpoints ------------------------------------------------------------ */

typedef struct wm_entry {
    const char *tensor;
    const char *shard;
} wm_entry;

static int cmp_entry_tensor(const void *a, const void *b) {
    return strcmp(((const wm_entry *)a)->tensor, ((const wm_entry *)b)->tensor);
}

static int cmp_entry_shard(const void *a, const void *b) {
    const wm_entry *x = a, *y = b;
    int c = strcmp(x->shard, y->shard);
    return c ? c : strcmp(x->tensor, y->tensor);
}

/* A shard must be a plain file name next to the index. */
static bool plain_file_name(const char *s) {
    return s[0] != '\0' && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* The directory part of `path` ("." when it has none); NULL on OOM. */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return moeq__strdup(".");
    return moeq__strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

/* Reads weight_map into entries (sorted by tensor name, duplicates rejected). */
static moeq_status read_weight_map(const char *index, const cJSON *root, wm_entry **out,
                                   size_t *out_n, moeq_error *err) {
    const moeq_status bad = MOEQ_STATUS_CHECKPOINT;
    const cJSON *wm = NULL;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "weight_map") == 0) {
            if (wm) return moeq__error(err, bad, "%s: 'weight_map' appears twice", index);
            wm = c;
        } else if (strcmp(c->string, "metadata") == 0 && !cJSON_IsObject(c) && !cJSON_IsNull(c)) {
            return moeq__error(err, bad, "%s: 'metadata' is a JSON %s, not an object", index,
                               json_type(c));
        }
    }
    if (!wm) return moeq__error(err, bad, "%s: index has no 'weight_map'", index);
    if (!cJSON_IsObject(wm)) {
        return moeq__error(err, bad, "%s: 'weight_map' is a JSON %s, not an object", index,
                           json_type(wm));
    }
    size_t n = 0;
    for (const cJSON *c = wm->child; c; c = c->next) n++;
    if (n == 0) return moeq__error(err, bad, "%s: 'weight_map' lists no tensors", index);
    wm_entry *e = moeq__calloc(n, sizeof *e);
    if (!e) return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory", index);
    size_t i = 0;
    for (const cJSON *c = wm->child; c; c = c->next, i++) {
        if (!cJSON_IsString(c)) {
            moeq__free(e);
            return moeq__error(err, bad,
                               "%s: weight_map: tensor '%s' maps to a JSON %s, not a shard name",
                               index, c->string, json_type(c));
        }
        if (!plain_file_name(c->valuestring)) {
            moeq__error(err, bad,
                        "%s: weight_map: tensor '%s' is in shard '%s', which is not a plain "
                        "file name next to the index (no '/', '.' or '..')",
                        index, c->string, c->valuestring);
            moeq__free(e);
            return bad;
        }
        e[i].tensor = c->string;
        e[i].shard = c->valuestring;
    }
    qsort(e, n, sizeof *e, cmp_entry_tensor);
    for (i = 1; i < n; i++) {
        if (strcmp(e[i - 1].tensor, e[i].tensor) == 0) {
            moeq__error(err, bad, "%s: weight_map lists tensor '%s' twice", index, e[i].tensor);
            moeq__free(e);
            return bad;
        }
    }
    *out = e;
    *out_n = n;
    return MOEQ_STATUS_OK;
}

/* Every weight_map entry must be in the shard it names; ck->files[k] is
 * shards[k].  Tensors the shards hold beyond weight_map stay available; the
 * log says how many. */
static moeq_status check_weight_map(const moeq_checkpoint *ck, const char *index, const wm_entry *e,
                                    size_t n, const char *const *shards, moeq_error *err) {
    for (size_t i = 0; i < n; i++) {
        uint64_t at;
        if (!find_index(ck, e[i].tensor, &at)) {
            return moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                               "%s: weight_map puts tensor '%s' in shard '%s', which does not "
                               "hold it",
                               index, e[i].tensor, e[i].shard);
        }
        const char *const *k = bsearch(&e[i].shard, shards, ck->n_files, sizeof *shards, cmp_str);
        const char *file = ck->tensors[at].file;
        if (!k || ck->files[k - shards].path != file) {
            return moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                               "%s: weight_map puts tensor '%s' in shard '%s', but it is in %s",
                               index, e[i].tensor, e[i].shard, file);
        }
    }
    if (ck->n_tensors > n && moeq__log_enabled()) {
        const char *example = "";
        for (uint64_t i = 0; i < ck->n_tensors && !example[0]; i++) {
            wm_entry key = {ck->tensors[i].name, NULL};
            if (!bsearch(&key, e, n, sizeof *e, cmp_entry_tensor)) example = key.tensor;
        }
        moeq__log(MOEQ_LOG_WARN,
                  "%s: the shards hold %" PRIu64
                  " tensors that weight_map does not list (such as '%s'); they are "
                  "available all the same",
                  index, ck->n_tensors - n, example);
    }
    return MOEQ_STATUS_OK;
}

static moeq_status open_index(moeq_checkpoint *ck, const char *index, moeq_error *err) {
    char *text = NULL;
    size_t len = 0;
    moeq_status rc = moeq__read_file(index, &text, &len, err);
    if (rc != MOEQ_STATUS_OK) return rc;
    cJSON *root = NULL;
    wm_entry *e = NULL;
    const char **shards = NULL;
    char *dir = NULL;
    size_t n = 0;
    const char *end = NULL;
    if (strlen(text) != len) {
        rc = moeq__error(err, MOEQ_STATUS_CHECKPOINT, "%s: index has a NUL byte at offset %zu",
                         index, strlen(text));
        goto done;
    }
    moeq__json_lock();
    root = cJSON_ParseWithOpts(text, &end, 1);
    moeq__json_unlock();
    if (!root) {
        size_t at = end ? (size_t)(end - text) : 0;
        rc = moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                         "%s: index is not valid JSON (error near byte %zu: \"%.24s\")", index, at,
                         text + (at < len ? at : len));
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        rc = moeq__error(err, MOEQ_STATUS_CHECKPOINT, "%s: index is a JSON %s, not an object",
                         index, json_type(root));
        goto done;
    }
    rc = read_weight_map(index, root, &e, &n, err);
    if (rc != MOEQ_STATUS_OK) goto done;

    /* The distinct shards, in name order, each opened once. */
    wm_entry *by_shard = moeq__calloc(n, sizeof *by_shard);
    shards = moeq__calloc(n, sizeof *shards);
    dir = dir_of(index);
    if (!by_shard || !shards || !dir) {
        moeq__free(by_shard);
        rc = moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory", index);
        goto done;
    }
    memcpy(by_shard, e, n * sizeof *e);
    qsort(by_shard, n, sizeof *by_shard, cmp_entry_shard);
    uint32_t n_shards = 0;
    for (size_t i = 0; i < n && rc == MOEQ_STATUS_OK; i++) {
        if (n_shards > 0 && strcmp(shards[n_shards - 1], by_shard[i].shard) == 0) continue;
        shards[n_shards++] = by_shard[i].shard;
        char *path = path_join(dir, by_shard[i].shard);
        struct stat st;
        if (!path) {
            rc = moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory", index);
        } else if (stat(path, &st) != 0 && errno == ENOENT) {
            rc = moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                             "%s: weight_map puts tensor '%s' in shard '%s', but %s does not "
                             "exist",
                             index, by_shard[i].tensor, by_shard[i].shard, path);
        }
        moeq__free(path);
    }
    moeq__free(by_shard);
    if (rc == MOEQ_STATUS_OK) rc = load_files(ck, dir, shards, n_shards, err);
    if (rc == MOEQ_STATUS_OK) rc = check_weight_map(ck, index, e, n, shards, err);
done:
    moeq__free(dir);
    moeq__free(shards);
    moeq__free(e);
    cJSON_Delete(root);
    moeq__free(text);
    return rc;
}

/* ---- directories ---------------------------------------------------------------- */

static bool is_file(const char *dir, const char *name, bool *oom) {
    char *path = path_join(dir, name);
    if (!path) {
        *oom = true;
        return false;
    }
    struct stat st;
    bool yes = stat(path, &st) == 0 && S_ISREG(st.st_mode);
    moeq__free(path);
    return yes;
}

/* Every regular *.safetensors file of a directory that has neither an index
 * nor model.safetensors, in name order. */
static moeq_status open_dir_files(moeq_checkpoint *ck, const char *dir, moeq_error *err) {
    DIR *d = opendir(dir);
    if (!d) {
        return moeq__error(err, MOEQ_STATUS_IO, "%s: cannot list directory: %s", dir,
                           strerror(errno));
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    bool oom = false;
    const struct dirent *ent;
    while (!oom && (ent = readdir(d)) != NULL) {
        const char *name = ent->d_name;
        if (!has_suffix(name, SUFFIX) || strlen(name) == strlen(SUFFIX)) continue;
        if (!is_file(dir, name, &oom)) continue;
        if (n == cap) {
            size_t new_cap = cap ? 2 * cap : 16;
            char **p = moeq__realloc(names, new_cap * sizeof *names);
            if (!p) {
                oom = true;
                break;
            }
            names = p;
            cap = new_cap;
        }
        names[n] = moeq__strdup(name);
        if (!names[n])
            oom = true;
        else
            n++;
    }
    closedir(d);
    moeq_status rc;
    if (oom) {
        rc = moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory listing the directory", dir);
    } else if (n == 0) {
        rc = moeq__error(
            err, MOEQ_STATUS_CHECKPOINT,
            "%s: no " INDEX_NAME ", " SINGLE_NAME " or *" SUFFIX " file in this directory", dir);
    } else if (n > UINT32_MAX) {
        rc = moeq__error(err, MOEQ_STATUS_LIMIT, "%s: too many files", dir);
    } else {
        qsort(names, n, sizeof *names, cmp_str);
        rc = load_files(ck, dir, (const char *const *)names, (uint32_t)n, err);
    }
    for (size_t i = 0; i < n; i++) moeq__free(names[i]);
    moeq__free(names);
    return rc;
}

static moeq_status open_dir(moeq_checkpoint *ck, const char *dir, moeq_error *err) {
    bool oom = false;
    moeq_status rc;
    if (is_file(dir, INDEX_NAME, &oom)) {
        char *index = path_join(dir, INDEX_NAME);
        if (!index) return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory", dir);
        rc = open_index(ck, index, err);
        moeq__free(index);
        return rc;
    }
    if (!oom && is_file(dir, SINGLE_NAME, &oom)) {
        const char *name = SINGLE_NAME;
        return load_files(ck, dir, &name, 1, err);
    }
    if (oom) return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory", dir);
    return open_dir_files(ck, dir, err);
}

/* ---- public reader API ------------------------------------------------------------ */

moeq_status moeq_checkpoint_open(const char *path, moeq_checkpoint **out, moeq_error *err) {
    if (out) *out = NULL;
    if (!path || !out) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "moeq_checkpoint_open: path and out must not be NULL");
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        return moeq__error(err, MOEQ_STATUS_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    moeq_checkpoint *ck = moeq__calloc(1, sizeof *ck);
    if (ck) ck->path = moeq__strdup(path);
    if (!ck || !ck->path) {
        moeq__free(ck);
        return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory", path);
    }
    moeq_status rc;
    if (S_ISDIR(st.st_mode)) {
        rc = open_dir(ck, path, err);
    } else if (has_suffix(path, ".json")) {
        rc = open_index(ck, path, err);
    } else {
        rc = load_files(ck, NULL, &path, 1, err);
    }
    if (rc != MOEQ_STATUS_OK) {
        moeq_checkpoint_close(ck);
        return rc;
    }
    *out = ck;
    return MOEQ_STATUS_OK;
}

void moeq_checkpoint_close(moeq_checkpoint *ck) {
    if (!ck) return;
    for (uint32_t i = 0; i < ck->n_files; i++) {
        st_file *f = &ck->files[i];
        if (f->map) munmap(f->map, f->size);
        moeq__free(f->path);
        moeq__free(f->strings);
        moeq__free(f->meta);
    }
    moeq__free(ck->files);
    moeq__free(ck->tensors);
    moeq__free(ck->path);
    moeq__free(ck);
}

uint64_t moeq_checkpoint_tensor_count(const moeq_checkpoint *ck) {
    return ck ? ck->n_tensors : 0;
}

moeq_status moeq_checkpoint_tensor(const moeq_checkpoint *ck, uint64_t i, moeq_tensor *out) {
    if (!ck || !out || i >= ck->n_tensors) return MOEQ_STATUS_INVALID_ARG;
    *out = ck->tensors[i];
    return MOEQ_STATUS_OK;
}

moeq_status moeq_checkpoint_find(const moeq_checkpoint *ck, const char *name, moeq_tensor *out) {
    if (!ck || !name || !out) return MOEQ_STATUS_INVALID_ARG;
    uint64_t i;
    if (!find_index(ck, name, &i)) return MOEQ_STATUS_NO_MATCH;
    *out = ck->tensors[i];
    return MOEQ_STATUS_OK;
}

/* ---- internal API --------------------------------------------------------------- */

uint32_t moeq__checkpoint_file_count(const moeq_checkpoint *ck) {
    return ck ? ck->n_files : 0;
}

const char *moeq__checkpoint_file_path(const moeq_checkpoint *ck, uint32_t i) {
    return ck && i < ck->n_files ? ck->files[i].path : NULL;
}

uint64_t moeq__checkpoint_file_size(const moeq_checkpoint *ck, uint32_t i) {
    return ck && i < ck->n_files ? ck->files[i].size : 0;
}

uint32_t moeq__checkpoint_metadata_count(const moeq_checkpoint *ck, uint32_t file) {
    return ck && file < ck->n_files ? ck->files[file].n_meta : 0;
}

bool moeq__checkpoint_metadata_pair(const moeq_checkpoint *ck, uint32_t file, uint32_t j,
                                    const char **key, const char **value) {
    if (j >= moeq__checkpoint_metadata_count(ck, file)) return false;
    *key = ck->files[file].meta[2 * (size_t)j];
    *value = ck->files[file].meta[2 * (size_t)j + 1];
    return true;
}

const moeq_tensor *moeq__checkpoint_tensor_at(const moeq_checkpoint *ck, uint64_t i) {
    return ck && i < ck->n_tensors ? &ck->tensors[i] : NULL;
}

bool moeq__checkpoint_index_of(const moeq_checkpoint *ck, const char *name, uint64_t *index) {
    return ck && name && index && find_index(ck, name, index);
}

/* name against the prefix "<module>." (module: m[0..n)): < 0 before it, 0
 * when name starts with it, > 0 after it, in name order. */
static int cmp_module(const char *name, const char *m, size_t n) {
    int c = strncmp(name, m, n);
    return c ? c : (int)(unsigned char)name[n] - '.';
}

uint64_t moeq__checkpoint_module_range(const moeq_checkpoint *ck, const char *module,
                                       uint64_t *first) {
    *first = 0;
    if (!ck || !module) return 0;
    const size_t n = strlen(module);
    /* Names with the prefix form one run in name order: find its two ends. */
    uint64_t lo = 0, hi = ck->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (cmp_module(ck->tensors[mid].name, module, n) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *first = lo;
    hi = ck->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (cmp_module(ck->tensors[mid].name, module, n) == 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - *first;
}

/* ---- writer ---------------------------------------------------------------------- */

/* The safetensors package lays data out by dtype, widest first, then by name:
 * every tensor is then naturally aligned with no padding between tensors. */
static int layout_rank(int32_t dtype) {
    static const int8_t rank[MOEQ_DTYPE_COUNT_] = {
        [MOEQ_DTYPE_U64] = 15, [MOEQ_DTYPE_I64] = 14,    [MOEQ_DTYPE_F64] = 13,
        [MOEQ_DTYPE_F32] = 12, [MOEQ_DTYPE_U32] = 11,    [MOEQ_DTYPE_I32] = 10,
        [MOEQ_DTYPE_BF16] = 9, [MOEQ_DTYPE_F16] = 8,     [MOEQ_DTYPE_U16] = 7,
        [MOEQ_DTYPE_I16] = 6,  [MOEQ_DTYPE_F8_E4M3] = 5, [MOEQ_DTYPE_F8_E5M2] = 4,
        [MOEQ_DTYPE_I8] = 3,   [MOEQ_DTYPE_U8] = 2,      [MOEQ_DTYPE_BOOL] = 1,
    };
    return rank[dtype];
}

static int cmp_ptr_name(const void *a, const void *b) {
    const moeq_tensor *x = *(const moeq_tensor *const *)a, *y = *(const moeq_tensor *const *)b;
    return strcmp(x->name, y->name);
}

static int cmp_ptr_layout(const void *a, const void *b) {
    const moeq_tensor *x = *(const moeq_tensor *const *)a, *y = *(const moeq_tensor *const *)b;
    int rx = layout_rank(x->dtype), ry = layout_rank(y->dtype);
    return rx != ry ? ry - rx : strcmp(x->name, y->name);
}

static moeq_status check_tensor(const char *path, const moeq_tensor *t, uint32_t i,
                                moeq_error *err) {
    const moeq_status bad = MOEQ_STATUS_INVALID_ARG;
    if (!t->name || !t->name[0]) {
        return moeq__error(err, bad, "%s: tensors[%u] has no name", path, i);
    }
    const char *name = t->name;
    if (strcmp(name, "__metadata__") == 0) {
        return moeq__error(err, bad, "%s: tensors[%u]: the name '__metadata__' is reserved", path,
                           i);
    }
    if (utf8_invalid_at((const unsigned char *)name, strlen(name)) != strlen(name)) {
        return moeq__error(err, bad, "%s: tensors[%u]: name is not valid UTF-8", path, i);
    }
    if (moeq_dtype_size(t->dtype) == 0 || t->dtype == MOEQ_DTYPE_INVALID) {
        return moeq__error(err, bad, "%s: tensor '%s': unknown dtype %d", path, name,
                           (int)t->dtype);
    }
    if (t->ndim < 0 || t->ndim > MOEQ_MAX_DIMS) {
        return moeq__error(err, bad, "%s: tensor '%s': ndim %d is outside 0..%d", path, name,
                           (int)t->ndim, MOEQ_MAX_DIMS);
    }
    for (int32_t d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0 || t->shape[d] > (int64_t)1 << 53) {
            return moeq__error(err, bad,
                               "%s: tensor '%s': shape[%d] = %" PRId64 " is outside 0..2^53", path,
                               name, (int)d, t->shape[d]);
        }
    }
    char dims[256];
    uint64_t need;
    if (!tensor_bytes(t->shape, t->ndim, moeq_dtype_size(t->dtype), &need)) {
        return moeq__error(err, bad, "%s: tensor '%s': %s x %s elements overflow", path, name,
                           moeq_dtype_name(t->dtype),
                           shape_str(t->shape, t->ndim, dims, sizeof dims));
    }
    if (t->nbytes != need) {
        return moeq__error(err, bad,
                           "%s: tensor '%s': nbytes is %" PRIu64 " but %s %s needs %" PRIu64, path,
                           name, t->nbytes, moeq_dtype_name(t->dtype),
                           shape_str(t->shape, t->ndim, dims, sizeof dims), need);
    }
    if (t->nbytes > 0 && !t->data) {
        return moeq__error(err, bad, "%s: tensor '%s': data is NULL", path, name);
    }
    return MOEQ_STATUS_OK;
}

/* Appends "__metadata__":{...} from the caller's JSON text. */
static moeq_status put_metadata(moeq__sb *sb, const char *path, const char *json, moeq_error *err) {
    const moeq_status bad = MOEQ_STATUS_INVALID_ARG;
    size_t len = strlen(json);
    size_t bad_utf8 = utf8_invalid_at((const unsigned char *)json, len);
    if (bad_utf8 < len) {
        return moeq__error(err, bad, "%s: metadata is not valid UTF-8 (byte %zu)", path, bad_utf8);
    }
    const char *end = NULL;
    moeq__json_lock();
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    moeq__json_unlock();
    moeq_status rc = MOEQ_STATUS_OK;
    if (!root) {
        rc = moeq__error(err, bad, "%s: metadata is not valid JSON (error near byte %zu)", path,
                         end ? (size_t)(end - json) : 0);
    } else if (!cJSON_IsObject(root)) {
        rc = moeq__error(err, bad, "%s: metadata is a JSON %s, not an object of strings", path,
                         json_type(root));
    }
    for (const cJSON *c = root ? root->child : NULL; c && rc == MOEQ_STATUS_OK; c = c->next) {
        if (!cJSON_IsString(c)) {
            rc = moeq__error(err, bad, "%s: metadata value of '%s' is a JSON %s, not a string",
                             path, c->string, json_type(c));
        }
        /* Metadata is a handful of pairs: a quadratic duplicate check is fine. */
        for (const cJSON *p = root->child; p != c && rc == MOEQ_STATUS_OK; p = p->next) {
            if (strcmp(p->string, c->string) == 0) {
                rc = moeq__error(err, bad, "%s: metadata key '%s' appears twice", path, c->string);
            }
        }
    }
    if (rc == MOEQ_STATUS_OK) {
        moeq__sb_puts(sb, "\"__metadata__\":{");
        for (const cJSON *c = root->child; c; c = c->next) {
            moeq__sb_json_string(sb, c->string);
            moeq__sb_putc(sb, ':');
            moeq__sb_json_string(sb, c->valuestring);
            if (c->next) moeq__sb_putc(sb, ',');
        }
        moeq__sb_putc(sb, '}');
    }
    cJSON_Delete(root);
    return rc;
}

/* The header for tensors in `order`, padded with spaces to a multiple of 8. */
static moeq_status build_header(moeq__sb *sb, const char *path, const moeq_tensor *const *order,
                                uint32_t n, const char *metadata_json, moeq_error *err) {
    moeq__sb_putc(sb, '{');
    if (metadata_json) {
        moeq_status rc = put_metadata(sb, path, metadata_json, err);
        if (rc != MOEQ_STATUS_OK) return rc;
        if (n > 0) moeq__sb_putc(sb, ',');
    }
    uint64_t offset = 0;
    for (uint32_t i = 0; i < n; i++) {
        const moeq_tensor *t = order[i];
        if (i > 0) moeq__sb_putc(sb, ',');
        moeq__sb_json_string(sb, t->name);
        moeq__sb_printf(sb, ":{\"dtype\":\"%s\",\"shape\":[", moeq_dtype_name(t->dtype));
        for (int32_t d = 0; d < t->ndim; d++) {
            moeq__sb_printf(sb, "%s%" PRId64, d ? "," : "", t->shape[d]);
        }
        moeq__sb_printf(sb, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", offset,
                        offset + t->nbytes);
        offset += t->nbytes;
    }
    moeq__sb_putc(sb, '}');
    while (!sb->failed && sb->len % 8 != 0) moeq__sb_putc(sb, ' ');
    if (sb->failed) return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory", path);
    if (sb->len > MOEQ__SAFETENSORS_MAX_HEADER) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%s: header would be %zu bytes, over the %u-byte limit of readers", path,
                           sb->len, MOEQ__SAFETENSORS_MAX_HEADER);
    }
    return MOEQ_STATUS_OK;
}

static bool write_all(int fd, const void *buf, uint64_t n) {
    const unsigned char *p = buf;
    while (n > 0) {
        size_t chunk = n < (1u << 30) ? (size_t)n : (1u << 30);
        ssize_t w = write(fd, p, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (uint64_t)w;
    }
    return true;
}

/* Writes the file to "<path>.tmp" and renames it over `path`, so that `path`
 * never holds a partial file. */
static moeq_status write_file(const char *path, const moeq__sb *header,
                              const moeq_tensor *const *order, uint32_t n, moeq_error *err) {
    moeq__sb tmp;
    moeq__sb_init(&tmp);
    moeq__sb_puts(&tmp, path);
    moeq__sb_puts(&tmp, ".tmp");
    if (tmp.failed) return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory", path);
    int fd = open(tmp.data, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        moeq__error(err, MOEQ_STATUS_IO, "%s: cannot create: %s", tmp.data, strerror(errno));
        moeq__sb_free(&tmp);
        return MOEQ_STATUS_IO;
    }
    unsigned char len[8];
    write_le64(len, header->len);
    bool ok = write_all(fd, len, sizeof len) && write_all(fd, header->data, header->len);
    for (uint32_t i = 0; ok && i < n; i++) ok = write_all(fd, order[i]->data, order[i]->nbytes);
    int saved = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (ok && rename(tmp.data, path) != 0) {
        moeq__error(err, MOEQ_STATUS_IO, "%s: cannot rename %s into place: %s", path, tmp.data,
                    strerror(errno));
        unlink(tmp.data);
        moeq__sb_free(&tmp);
        return MOEQ_STATUS_IO;
    }
    if (!ok) {
        moeq__error(err, MOEQ_STATUS_IO, "%s: cannot write: %s", tmp.data,
                    saved ? strerror(saved) : "short write");
        unlink(tmp.data);
    }
    moeq__sb_free(&tmp);
    return ok ? MOEQ_STATUS_OK : MOEQ_STATUS_IO;
}

moeq_status moeq_safetensors_write(const char *path, const moeq_tensor *tensors, uint32_t n,
                                   const char *metadata_json, moeq_error *err) {
    if (!path || (!tensors && n > 0)) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "moeq_safetensors_write: path and tensors must not be NULL");
    }
    for (uint32_t i = 0; i < n; i++) {
        moeq_status rc = check_tensor(path, &tensors[i], i, err);
        if (rc != MOEQ_STATUS_OK) return rc;
    }
    const moeq_tensor **order = moeq__calloc(n, sizeof *order);
    if (!order) return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory", path);
    for (uint32_t i = 0; i < n; i++) order[i] = &tensors[i];
    moeq_status rc = MOEQ_STATUS_OK;
    if (n > 0) qsort(order, n, sizeof *order, cmp_ptr_name);
    for (uint32_t i = 1; i < n && rc == MOEQ_STATUS_OK; i++) {
        if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
            rc = moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: tensor '%s' is given twice", path,
                             order[i]->name);
        }
    }
    if (n > 0) qsort(order, n, sizeof *order, cmp_ptr_layout);
    moeq__sb header;
    moeq__sb_init(&header);
    if (rc == MOEQ_STATUS_OK) rc = build_header(&header, path, order, n, metadata_json, err);
    if (rc == MOEQ_STATUS_OK) rc = write_file(path, &header, order, n, err);
    moeq__sb_free(&header);
    moeq__free(order);
    return rc;
}

void moeq__checkpoint_drop(const void *data, uint64_t nbytes) {
#if defined(__linux__) && defined(MADV_DONTNEED)
    const long page = sysconf(_SC_PAGESIZE);
    const uintptr_t ps = page > 0 ? (uintptr_t)page : 4096u;
    const uintptr_t a = ((uintptr_t)data + ps - 1) / ps * ps;
    const uintptr_t b = ((uintptr_t)data + (uintptr_t)nbytes) / ps * ps;
    /* a read-only private file mapping: its pages come back from the file */
    if (data && b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
#else
    (void)data;
    (void)nbytes;
#endif
}

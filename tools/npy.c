/*
 * npy.c - numpy .npy reader and writer (format versions 1.0 to 3.0).
 *
 * A .npy file is: "\x93NUMPY", major and minor version bytes, the header
 * length (2 bytes little-endian in 1.0, 4 bytes in 2.0 and 3.0), the header -
 * a Python dict literal such as
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and a final '\n' so that the data starts at a multiple
 * of 64 - and then the raw array data.
 */
#include "npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAGIC       "\x93NUMPY"
#define MAGIC_LEN   6
#define ARRAY_ALIGN 64
/* numpy leaves room for the first dimension to grow to this many digits. */
#define GROWTH_AXIS_MAX_DIGITS 21
/* numpy refuses longer headers by default; ours are far shorter. */
#define MAX_HEADER 10000

static const struct {
    const char *descr;
    int32_t dtype;
} k_types[] = {
    {"<f8", MOEQ_DTYPE_F64}, {"<f4", MOEQ_DTYPE_F32}, {"<f2", MOEQ_DTYPE_F16},
    {"<i8", MOEQ_DTYPE_I64}, {"<i4", MOEQ_DTYPE_I32}, {"<i2", MOEQ_DTYPE_I16},
    {"|i1", MOEQ_DTYPE_I8},  {"<u8", MOEQ_DTYPE_U64}, {"<u4", MOEQ_DTYPE_U32},
    {"<u2", MOEQ_DTYPE_U16}, {"|u1", MOEQ_DTYPE_U8},  {"|b1", MOEQ_DTYPE_BOOL},
};

#define N_TYPES (sizeof k_types / sizeof k_types[0])

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int fail(char *err, size_t size, const char *fmt, ...) {
    if (err && size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, size, fmt, ap);
        va_end(ap);
    }
    return -1;
}

const char *npy_descr(int32_t dtype) {
    /* Types numpy lacks travel as raw bits of the same width. */
    if (dtype == MOEQ_DTYPE_BF16) dtype = MOEQ_DTYPE_U16;
    if (dtype == MOEQ_DTYPE_F8_E4M3 || dtype == MOEQ_DTYPE_F8_E5M2) dtype = MOEQ_DTYPE_U8;
    for (size_t i = 0; i < N_TYPES; i++) {
        if (k_types[i].dtype == dtype) return k_types[i].descr;
    }
    return NULL;
}

/* product(shape) * elem; false on overflow or a negative dimension. */
static bool array_bytes(const int64_t *shape, int32_t ndim, uint64_t elem, uint64_t *out) {
    uint64_t n = elem;
    for (int32_t i = 0; i < ndim; i++) {
        if (shape[i] < 0) return false;
        uint64_t d = (uint64_t)shape[i];
        if (d != 0 && n > UINT64_MAX / d) return false;
        n *= d;
    }
    *out = n;
    return true;
}

/* Python's repr of the shape tuple: "()", "(5,)", "(2, 3)". */
static void shape_repr(const int64_t *shape, int32_t ndim, char *buf, size_t size) {
    size_t len = (size_t)snprintf(buf, size, "(");
    for (int32_t i = 0; i < ndim && len < size; i++) {
        len +=
            (size_t)snprintf(buf + len, size - len, "%s%lld", i ? ", " : "", (long long)shape[i]);
    }
    if (len < size) snprintf(buf + len, size - len, ndim == 1 ? ",)" : ")");
}

/* ---- writer ------------------------------------------------------------------ */

int npy_write(const char *path, int32_t dtype, int32_t ndim, const int64_t *shape, const void *data,
              char *err, size_t err_size) {
    if (!path) return fail(err, err_size, "npy_write: no path");
    const char *descr = npy_descr(dtype);
    if (!descr) {
        return fail(err, err_size, "%s: dtype %s has no .npy equivalent", path,
                    moeq_dtype_name(dtype));
    }
    if (ndim < 0 || ndim > MOEQ_MAX_DIMS) {
        return fail(err, err_size, "%s: ndim %d is outside 0..%d", path, (int)ndim, MOEQ_MAX_DIMS);
    }
    if (ndim > 0 && !shape) return fail(err, err_size, "%s: shape is NULL", path);
    uint64_t nbytes;
    if (!array_bytes(shape, ndim, moeq_dtype_size(dtype), &nbytes) || nbytes > SIZE_MAX) {
        return fail(err, err_size, "%s: shape has a negative dimension or is too large", path);
    }
    if (nbytes > 0 && !data) return fail(err, err_size, "%s: data is NULL", path);

    /* The header exactly as numpy's _write_array_header builds it. */
    char shape_text[256];
    shape_repr(shape, ndim, shape_text, sizeof shape_text);
    char header[512];
    int len = snprintf(header, sizeof header,
                       "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape_text);
    if (ndim > 0) {
        char first[32];
        int digits = snprintf(first, sizeof first, "%lld", (long long)shape[0]);
        for (int i = digits; i < GROWTH_AXIS_MAX_DIGITS; i++) header[len++] = ' ';
    }
    /* Spaces and a final newline up to the next multiple of 64 (a whole extra
     * 64 when already aligned, as numpy does). */
    int pad = ARRAY_ALIGN - (MAGIC_LEN + 2 + 2 + len + 1) % ARRAY_ALIGN;
    for (int i = 0; i < pad; i++) header[len++] = ' ';
    header[len++] = '\n';
    unsigned char prefix[10] = {0x93,
                                'N',
                                'U',
                                'M',
                                'P',
                                'Y',
                                1,
                                0,
                                (unsigned char)(len & 0xff),
                                (unsigned char)(len >> 8)};

    FILE *f = fopen(path, "wb");
    if (!f) return fail(err, err_size, "%s: cannot create: %s", path, strerror(errno));
    bool ok = fwrite(prefix, 1, sizeof prefix, f) == sizeof prefix &&
              fwrite(header, 1, (size_t)len, f) == (size_t)len &&
              (nbytes == 0 || fwrite(data, 1, (size_t)nbytes, f) == nbytes);
    int saved = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (!ok) {
        remove(path);
        return fail(err, err_size, "%s: write failed: %s", path, strerror(saved));
    }
    return 0;
}

/* ---- header parser ------------------------------------------------------------------ */

/* A cursor over the header text; errors go to err. */
typedef struct parser {
    const char *start, *p, *end;
    const char *path;
    char *err;
    size_t err_size;
} parser;

static int syntax(const parser *ps, const char *what) {
    return fail(ps->err, ps->err_size, "%s: header: expected %s at byte %zu of the header",
                ps->path, what, (size_t)(ps->p - ps->start));
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\t' || *ps->p == '\r'))
        ps->p++;
}

static bool accept(parser *ps, char c) {
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == c) {
        ps->p++;
        return true;
    }
    return false;
}

static bool peek(parser *ps, char c) {
    skip_ws(ps);
    return ps->p < ps->end && *ps->p == c;
}

/* 'text' or "text", without escapes, into buf. */
static bool parse_string(parser *ps, char *buf, size_t size) {
    skip_ws(ps);
    if (ps->p >= ps->end || (*ps->p != '\'' && *ps->p != '"')) return false;
    const char *s = ps->p + 1, *q = s;
    while (q < ps->end && *q != ps->p[0]) {
        if (*q == '\\' || (size_t)(q - s) + 1 >= size) return false;
        q++;
    }
    if (q >= ps->end) return false;
    memcpy(buf, s, (size_t)(q - s));
    buf[q - s] = '\0';
    ps->p = q + 1;
    return true;
}

/* True or False; *value gets 1 or 0. */
static bool parse_bool(parser *ps, int *value) {
    skip_ws(ps);
    size_t left = (size_t)(ps->end - ps->p);
    if (left >= 4 && memcmp(ps->p, "True", 4) == 0) {
        *value = 1;
        ps->p += 4;
        return true;
    }
    if (left >= 5 && memcmp(ps->p, "False", 5) == 0) {
        *value = 0;
        ps->p += 5;
        return true;
    }
    return false;
}

/* A non-negative decimal below 2^63 (an 'L' suffix from Python 2 is fine). */
static bool parse_dim(parser *ps, int64_t *out) {
    skip_ws(ps);
    const char *s = ps->p;
    uint64_t v = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        unsigned d = (unsigned)(*ps->p - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10) return false;
        v = v * 10 + d;
        ps->p++;
    }
    if (ps->p == s) return false;
    if (ps->p < ps->end && *ps->p == 'L') ps->p++;
    *out = (int64_t)v;
    return true;
}

static int parse_shape(parser *ps, npy_array *a) {
    if (!accept(ps, '(')) return syntax(ps, "a shape tuple '('");
    int32_t n = 0;
    bool comma = false;
    while (!accept(ps, ')')) {
        if (n > 0 && !comma) return syntax(ps, "',' or ')' in the shape");
        if (n == MOEQ_MAX_DIMS) {
            return fail(ps->err, ps->err_size, "%s: shape has more than %d dimensions", ps->path,
                        MOEQ_MAX_DIMS);
        }
        if (peek(ps, '-')) {
            return fail(ps->err, ps->err_size, "%s: shape has a negative dimension", ps->path);
        }
        if (!parse_dim(ps, &a->shape[n])) return syntax(ps, "a dimension below 2^63");
        n++;
        comma = accept(ps, ',');
    }
    if (n == 1 && !comma) {
        return fail(ps->err, ps->err_size,
                    "%s: header: shape (%lld) is not a tuple (numpy writes (%lld,))", ps->path,
                    (long long)a->shape[0], (long long)a->shape[0]);
    }
    a->ndim = n;
    return 0;
}

/* The dict: exactly 'descr', 'fortran_order' and 'shape', in any order. */
static int parse_header(parser *ps, npy_array *a) {
    char descr[32] = "";
    int fortran = 0;
    bool seen[3] = {false, false, false};
    if (!accept(ps, '{')) return syntax(ps, "'{'");
    bool comma = true;
    while (!accept(ps, '}')) {
        if (!comma) return syntax(ps, "',' or '}'");
        char key[32];
        if (!parse_string(ps, key, sizeof key)) return syntax(ps, "a quoted key");
        if (!accept(ps, ':')) return syntax(ps, "':'");
        int k = strcmp(key, "descr") == 0           ? 0
                : strcmp(key, "fortran_order") == 0 ? 1
                : strcmp(key, "shape") == 0         ? 2
                                                    : -1;
        if (k < 0) {
            return fail(ps->err, ps->err_size,
                        "%s: header: unexpected key '%s' (a .npy header has exactly descr, "
                        "fortran_order and shape)",
                        ps->path, key);
        }
        if (seen[k]) {
            return fail(ps->err, ps->err_size, "%s: header: key '%s' appears twice", ps->path, key);
        }
        seen[k] = true;
        if (k == 0 && peek(ps, '[')) {
            return fail(ps->err, ps->err_size, "%s: structured dtypes are not supported", ps->path);
        }
        if (k == 0 && !parse_string(ps, descr, sizeof descr)) {
            return syntax(ps, "a quoted descr such as '<f4'");
        }
        if (k == 1 && !parse_bool(ps, &fortran)) return syntax(ps, "True or False");
        if (k == 2 && parse_shape(ps, a) != 0) return -1;
        comma = accept(ps, ',');
    }
    skip_ws(ps);
    if (ps->p != ps->end) return syntax(ps, "only padding after '}'");
    static const char *const names[3] = {"descr", "fortran_order", "shape"};
    for (int k = 0; k < 3; k++) {
        if (!seen[k]) {
            return fail(ps->err, ps->err_size, "%s: header has no '%s'", ps->path, names[k]);
        }
    }
    if (fortran) {
        return fail(ps->err, ps->err_size,
                    "%s: fortran_order is True (column-major data is not supported; save "
                    "np.ascontiguousarray(a))",
                    ps->path);
    }
    for (size_t i = 0; i < N_TYPES; i++) {
        if (strcmp(descr, k_types[i].descr) == 0) {
            a->dtype = k_types[i].dtype;
            return 0;
        }
    }
    if (descr[0] == '>') {
        return fail(ps->err, ps->err_size, "%s: big-endian data ('%s') is not supported", ps->path,
                    descr);
    }
    return fail(ps->err, ps->err_size,
                "%s: unsupported descr '%s' (supported: <f8 <f4 <f2 <i8 <i4 <i2 |i1 <u8 <u4 "
                "<u2 |u1 |b1)",
                ps->path, descr);
}

/* ---- reader ------------------------------------------------------------------------------- */

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int read_array(FILE *f, const char *path, uint64_t size, npy_array *a, char *err,
                      size_t err_size) {
    unsigned char pre[12];
    if (size < 10 || fread(pre, 1, 10, f) != 10) {
        return fail(err, err_size, "%s: file is %llu bytes, too short for a .npy file", path,
                    (unsigned long long)size);
    }
    if (memcmp(pre, MAGIC, MAGIC_LEN) != 0) {
        return fail(err, err_size, "%s: not a .npy file (no \\x93NUMPY magic)", path);
    }
    unsigned major = pre[6], minor = pre[7];
    if (major < 1 || major > 3 || minor != 0) {
        return fail(err, err_size,
                    "%s: .npy format version %u.%u is not supported (1.0, 2.0 and 3.0 are)", path,
                    major, minor);
    }
    uint64_t start = 10, hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8;
    if (major > 1) {
        if (size < 12 || fread(pre + 10, 1, 2, f) != 2) {
            return fail(err, err_size, "%s: file is %llu bytes, too short for a .npy file", path,
                        (unsigned long long)size);
        }
        start = 12;
        hlen = le32(pre + 8);
    }
    if (hlen > MAX_HEADER) {
        return fail(err, err_size, "%s: header length %llu exceeds the limit of %d bytes", path,
                    (unsigned long long)hlen, MAX_HEADER);
    }
    if (start + hlen > size) {
        return fail(err, err_size,
                    "%s: header length %llu runs past the end of the file (%llu bytes)", path,
                    (unsigned long long)hlen, (unsigned long long)size);
    }
    char header[MAX_HEADER];
    if (fread(header, 1, (size_t)hlen, f) != hlen) {
        return fail(err, err_size, "%s: read error in the header", path);
    }
    parser ps = {header, header, header + hlen, path, err, err_size};
    if (parse_header(&ps, a) != 0) return -1;

    uint64_t nbytes, data_len = size - start - hlen;
    char shape_text[256];
    shape_repr(a->shape, a->ndim, shape_text, sizeof shape_text);
    if (!array_bytes(a->shape, a->ndim, moeq_dtype_size(a->dtype), &nbytes) || nbytes > SIZE_MAX) {
        return fail(err, err_size, "%s: shape %s is too large", path, shape_text);
    }
    if (data_len != nbytes) {
        return fail(err, err_size,
                    "%s: shape %s of '%s' needs %llu bytes of data but the file holds %llu%s", path,
                    shape_text, npy_descr(a->dtype), (unsigned long long)nbytes,
                    (unsigned long long)data_len, data_len < nbytes ? " (truncated?)" : "");
    }
    a->data = malloc(nbytes ? (size_t)nbytes : 1);
    if (!a->data) {
        return fail(err, err_size, "%s: out of memory for %llu bytes", path,
                    (unsigned long long)nbytes);
    }
    if (nbytes > 0 && fread(a->data, 1, (size_t)nbytes, f) != nbytes) {
        return fail(err, err_size, "%s: read error in the data", path);
    }
    a->nbytes = nbytes;
    return 0;
}

int npy_read(const char *path, npy_array *out, char *err, size_t err_size) {
    if (!out) return fail(err, err_size, "npy_read: out is NULL");
    memset(out, 0, sizeof *out);
    if (!path) return fail(err, err_size, "npy_read: no path");
    FILE *f = fopen(path, "rb");
    if (!f) return fail(err, err_size, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    int rc;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = fail(err, err_size, "%s: not a regular file", path);
    } else {
        rc = read_array(f, path, (uint64_t)st.st_size, out, err, err_size);
    }
    fclose(f);
    if (rc != 0) npy_free(out);
    return rc;
}

void npy_free(npy_array *a) {
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

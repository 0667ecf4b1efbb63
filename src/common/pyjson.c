/*
 * pyjson.c - JSON text exactly as Python's json.dumps(indent=2,
 * sort_keys=True) writes it (ensure_ascii: every non-ASCII character as
 * \uXXXX, surrogate pairs above U+FFFF; floats as repr(); "{}" and "[]" for
 * empty containers; ",\n" between items and ": " after keys).
 */
#include "common/pyjson.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind { K_OBJECT, K_ARRAY, K_STRING, K_RAW };

struct moeq__pjv {
    enum kind kind;
    char *text;        /* K_STRING: the string; K_RAW: its JSON text */
    char **keys;       /* K_OBJECT */
    moeq__pjv **items; /* K_OBJECT values, K_ARRAY items */
    size_t n, cap;
    moeq__pjv *next_alloc;
};

struct moeq__pj {
    moeq__pjv *all; /* every value, for destroy */
    bool failed;
    const char *why;
};

moeq__pj *moeq__pj_create(void) {
    return moeq__calloc(1, sizeof(moeq__pj));
}

static void fail(moeq__pj *d, const char *why) {
    if (!d->failed) d->why = why;
    d->failed = true;
}

void moeq__pj_destroy(moeq__pj *d) {
    if (!d) return;
    for (moeq__pjv *v = d->all; v;) {
        moeq__pjv *next = v->next_alloc;
        for (size_t i = 0; v->keys && i < v->n; i++) moeq__free(v->keys[i]);
        moeq__free(v->keys);
        moeq__free(v->items);
        moeq__free(v->text);
        moeq__free(v);
        v = next;
    }
    moeq__free(d);
}

static moeq__pjv *new_value(moeq__pj *d, enum kind k, const char *text) {
    if (d->failed) return NULL;
    moeq__pjv *v = moeq__calloc(1, sizeof *v);
    if (v && text && !(v->text = moeq__strdup(text))) {
        moeq__free(v);
        v = NULL;
    }
    if (!v) {
        fail(d, "out of memory");
        return NULL;
    }
    v->kind = k;
    v->next_alloc = d->all;
    d->all = v;
    return v;
}

moeq__pjv *moeq__pj_object(moeq__pj *d) {
    return new_value(d, K_OBJECT, NULL);
}
moeq__pjv *moeq__pj_array(moeq__pj *d) {
    return new_value(d, K_ARRAY, NULL);
}
moeq__pjv *moeq__pj_bool(moeq__pj *d, bool v) {
    return new_value(d, K_RAW, v ? "true" : "false");
}
moeq__pjv *moeq__pj_null(moeq__pj *d) {
    return new_value(d, K_RAW, "null");
}

moeq__pjv *moeq__pj_string(moeq__pj *d, const char *s) {
    if (!s) {
        fail(d, "a string is NULL");
        return NULL;
    }
    return new_value(d, K_STRING, s);
}

moeq__pjv *moeq__pj_int(moeq__pj *d, int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return new_value(d, K_RAW, buf);
}

moeq__pjv *moeq__pj_uint(moeq__pj *d, uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return new_value(d, K_RAW, buf);
}

moeq__pjv *moeq__pj_float(moeq__pj *d, double v, bool single) {
    if (!(v - v == 0.0)) { /* NaN and infinities are not JSON */
        fail(d, "a float is not finite");
        return NULL;
    }
    char buf[40];
    moeq__py_float_repr(v, single, buf, sizeof buf);
    return new_value(d, K_RAW, buf);
}

static bool grow(moeq__pj *d, moeq__pjv *c) {
    if (c->n < c->cap) return true;
    const size_t cap = c->cap ? c->cap * 2 : 8;
    moeq__pjv **items = moeq__realloc(c->items, cap * sizeof *items);
    if (!items) return false;
    c->items = items;
    if (c->kind == K_OBJECT) {
        char **keys = moeq__realloc(c->keys, cap * sizeof *keys);
        if (!keys) return false;
        c->keys = keys;
    }
    c->cap = cap;
    (void)d;
    return true;
}

void moeq__pj_set(moeq__pj *d, moeq__pjv *obj, const char *key, moeq__pjv *v) {
    if (d->failed) return;
    if (!obj || !v || !key || obj->kind != K_OBJECT) {
        fail(d, "a value is missing");
        return;
    }
    char *k = moeq__strdup(key);
    if (!k || !grow(d, obj)) {
        moeq__free(k);
        fail(d, "out of memory");
        return;
    }
    obj->keys[obj->n] = k;
    obj->items[obj->n++] = v;
}

void moeq__pj_push(moeq__pj *d, moeq__pjv *arr, moeq__pjv *v) {
    if (d->failed) return;
    if (!arr || !v || arr->kind != K_ARRAY) {
        fail(d, "a value is missing");
        return;
    }
    if (!grow(d, arr)) {
        fail(d, "out of memory");
        return;
    }
    arr->items[arr->n++] = v;
}

/* ---- floats: Python's repr ------------------------------------------------------- */

/* The shortest %e rendering of v that reads back as v: its digits (no dot)
 * and the decimal exponent of the first digit. */
static void shortest_digits(double v, bool single, char *digits, int *exp10) {
    char buf[48];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, v);
        const double back = strtod(buf, NULL);
        if (single ? (float)back == (float)v : back == v) break;
    }
    /* "d.ddde+XX", whatever the locale's decimal point: keep the digits */
    size_t n = 0;
    const char *p = buf;
    for (; *p && *p != 'e' && *p != 'E'; p++) {
        if (*p >= '0' && *p <= '9') digits[n++] = *p;
    }
    while (n > 1 && digits[n - 1] == '0') n--; /* repr never shows trailing zeros */
    digits[n] = '\0';
    *exp10 = *p ? atoi(p + 1) : 0;
}

void moeq__py_float_repr(double v, bool single, char *buf, size_t n) {
    if (v == 0.0) {
        snprintf(buf, n, "%s", (1.0 / v) < 0 ? "-0.0" : "0.0");
        return;
    }
    const bool neg = v < 0;
    char digits[24];
    int e;
    shortest_digits(neg ? -v : v, single, digits, &e);
    const int nd = (int)strlen(digits);
    const int decpt = e + 1; /* digits before the decimal point */
    char out[64];
    size_t len = 0;
    if (neg) out[len++] = '-';
    if (decpt <= -4 || decpt > 16) {
        /* exponent form: d[.ddd]e[+-]XX */
        out[len++] = digits[0];
        if (nd > 1) {
            out[len++] = '.';
            for (int i = 1; i < nd; i++) out[len++] = digits[i];
        }
        len += (size_t)snprintf(out + len, sizeof out - len, "e%c%02d", e < 0 ? '-' : '+',
                                e < 0 ? -e : e);
    } else if (decpt <= 0) {
        out[len++] = '0';
        out[len++] = '.';
        for (int i = 0; i < -decpt; i++) out[len++] = '0';
        for (int i = 0; i < nd; i++) out[len++] = digits[i];
    } else {
        for (int i = 0; i < decpt; i++) out[len++] = i < nd ? digits[i] : '0';
        out[len++] = '.';
        if (nd > decpt) {
            for (int i = decpt; i < nd; i++) out[len++] = digits[i];
        } else {
            out[len++] = '0';
        }
    }
    out[len] = '\0';
    snprintf(buf, n, "%s", out);
}

/* ---- dumping --------------------------------------------------------------------- */

/* Decodes one UTF-8 sequence at s; returns its length, 0 when invalid. */
static size_t utf8_decode(const unsigned char *s, uint32_t *cp) {
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    size_t len;
    uint32_t c, min;
    if ((s[0] & 0xE0) == 0xC0)
        len = 2, c = s[0] & 0x1Fu, min = 0x80;
    else if ((s[0] & 0xF0) == 0xE0)
        len = 3, c = s[0] & 0x0Fu, min = 0x800;
    else if ((s[0] & 0xF8) == 0xF0)
        len = 4, c = s[0] & 0x07u, min = 0x10000;
    else
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3Fu);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return len;
}

static bool put_string(moeq__sb *sb, const char *s) {
    moeq__sb_putc(sb, '"');
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        uint32_t cp;
        const size_t len = utf8_decode(p, &cp);
        if (len == 0) return false;
        p += len;
        switch (cp) {
            case '"': moeq__sb_puts(sb, "\\\""); continue;
            case '\\': moeq__sb_puts(sb, "\\\\"); continue;
            case '\n': moeq__sb_puts(sb, "\\n"); continue;
            case '\r': moeq__sb_puts(sb, "\\r"); continue;
            case '\t': moeq__sb_puts(sb, "\\t"); continue;
            case '\b': moeq__sb_puts(sb, "\\b"); continue;
            case '\f': moeq__sb_puts(sb, "\\f"); continue;
            default: break;
        }
        if (cp >= 0x20 && cp < 0x7F) {
            moeq__sb_putc(sb, (char)cp);
        } else if (cp < 0x10000) { /* DEL too: ensure_ascii keeps only ' '..'~' */
            moeq__sb_printf(sb, "\\u%04x", (unsigned)cp);
        } else {
            const uint32_t v = cp - 0x10000;
            moeq__sb_printf(sb, "\\u%04x\\u%04x", (unsigned)(0xD800 + (v >> 10)),
                            (unsigned)(0xDC00 + (v & 0x3FF)));
        }
    }
    moeq__sb_putc(sb, '"');
    return true;
}

static void indent(moeq__sb *sb, int depth) {
    moeq__sb_putc(sb, '\n');
    for (int i = 0; i < depth; i++) moeq__sb_puts(sb, "  ");
}

typedef struct keyed {
    const char *key;
    const moeq__pjv *v;
} keyed;

static int cmp_keyed(const void *a, const void *b) {
    return strcmp(((const keyed *)a)->key, ((const keyed *)b)->key);
}

static bool dump(moeq__pj *d, moeq__sb *sb, const moeq__pjv *v, int depth) {
    switch (v->kind) {
        case K_RAW: moeq__sb_puts(sb, v->text); return true;
        case K_STRING:
            if (put_string(sb, v->text)) return true;
            fail(d, "a string is not valid UTF-8");
            return false;
        case K_ARRAY:
            if (v->n == 0) {
                moeq__sb_puts(sb, "[]");
                return true;
            }
            moeq__sb_putc(sb, '[');
            for (size_t i = 0; i < v->n; i++) {
                if (i) moeq__sb_putc(sb, ',');
                indent(sb, depth + 1);
                if (!dump(d, sb, v->items[i], depth + 1)) return false;
            }
            indent(sb, depth);
            moeq__sb_putc(sb, ']');
            return true;
        case K_OBJECT: break;
    }
    if (v->n == 0) {
        moeq__sb_puts(sb, "{}");
        return true;
    }
    keyed *k = moeq__malloc(v->n * sizeof *k);
    if (!k) {
        fail(d, "out of memory");
        return false;
    }
    for (size_t i = 0; i < v->n; i++) k[i] = (keyed){v->keys[i], v->items[i]};
    qsort(k, v->n, sizeof *k, cmp_keyed); /* byte order of UTF-8 = code point order */
    bool ok = true;
    moeq__sb_putc(sb, '{');
    for (size_t i = 0; i < v->n && ok; i++) {
        if (i) moeq__sb_putc(sb, ',');
        indent(sb, depth + 1);
        ok = put_string(sb, k[i].key);
        if (!ok) fail(d, "a key is not valid UTF-8");
        moeq__sb_puts(sb, ": ");
        if (ok) ok = dump(d, sb, k[i].v, depth + 1);
    }
    moeq__free(k);
    if (!ok) return false;
    indent(sb, depth);
    moeq__sb_putc(sb, '}');
    return true;
}

char *moeq__pj_dump(moeq__pj *d, const moeq__pjv *v, size_t *len, const char **why) {
    if (!d->failed && !v) fail(d, "a value is missing");
    if (d->failed) {
        *why = d->why;
        return NULL;
    }
    moeq__sb sb;
    moeq__sb_init(&sb);
    const bool ok = dump(d, &sb, v, 0);
    if (!ok || sb.failed) {
        *why = ok ? "out of memory" : d->why;
        moeq__sb_free(&sb);
        return NULL;
    }
    *len = sb.len;
    return moeq__sb_take(&sb);
}

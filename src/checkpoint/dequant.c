/*
 * dequant.c - moeq_dequantize: checks every tensor a compression format needs
 * (presence, dtype, shape, scale values) against the weight args, decodes the
 * small tensors (scales, zero points, g_idx) and runs the reference kernels
 * over the codes in place.
 *
 * Tensors per format (spec §3.3):
 *   dense, fakequant      weight F32/F16/BF16/F64 [out, in]
 *   pack-quantized        weight_packed I32 [out, words(in)], weight_shape I64 [2],
 *                         weight_scale float [grid], weight_zero_point (asymmetric:
 *                         I32 packed along dim 0 [words(out), G] or I8 [grid]),
 *                         weight_g_idx I32 [in] (optional)
 *   naive/int/float-q.    weight I8/I16/I32 (int) or F8_E4M3 (float 8) [out, in],
 *                         weight_scale float [grid], weight_zero_point int [grid]
 *                         (asymmetric), weight_g_idx (optional)
 *   nvfp4-pack-quantized  weight_packed U8 [out, in/2], weight_scale F8_E4M3
 *                         [out, ceil(in/gs)], weight_global_scale F32 [1]
 *   mxfp4-pack-quantized  weight_packed U8 [out, in/2], weight_scale U8 [out, ceil(in/gs)]
 *   mxfp6-pack-quantized  weight_packed U8 [out, 3*in/4] (four E2M3 codes little-endian
 *                         in three bytes), weight_scale U8 [out, ceil(in/gs)]
 *   mxfp8-quantized       weight F8_E4M3 [out, in], weight_scale U8 [out, ceil(in/gs)]
 */
#include "checkpoint/dequant.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The weight parameters, by their place in the shared table (dequant.h). */
enum param {
    P_WEIGHT = MOEQ__CT_WEIGHT,
    P_PACKED = MOEQ__CT_WEIGHT_PACKED,
    P_SCALE = MOEQ__CT_WEIGHT_SCALE,
    P_ZP = MOEQ__CT_WEIGHT_ZERO_POINT,
    P_GIDX = MOEQ__CT_WEIGHT_G_IDX,
    P_SHAPE = MOEQ__CT_WEIGHT_SHAPE,
    P_GLOBAL = MOEQ__CT_WEIGHT_GLOBAL_SCALE,
    P_COUNT = MOEQ__CT_WEIGHT_PARAM_COUNT
};

static const char *const param_names[MOEQ__CT_PARAM_COUNT] = {
#define MOEQ_X_(name, text) text,
    MOEQ__CT_PARAM_MAP(MOEQ_X_)
#undef MOEQ_X_
};

/* Everything one call works on.  Owned buffers are freed by dq_free. */
typedef struct dq {
    const moeq_quant_args *args;
    int32_t format;
    uint32_t flags;
    const char *mod; /* "model.layers.0.mlp.experts.3.up_proj" or "" */
    const char *dot; /* "." or "" */
    moeq_error *err;
    const moeq_tensor *t[P_COUNT];
    size_t rows, cols;  /* the logical [out, in] */
    moeq__qweight qw;
    float *scale;   /* owned, [grid] */
    float *zp;      /* owned, [grid] or NULL */
    int32_t *g_idx; /* owned, [in] or NULL */
} dq;

#define TN(d, p) (d)->mod, (d)->dot, param_names[p] /* for "%s%s%s" */

static void dq_free(dq *d) {
    moeq__free(d->scale);
    moeq__free(d->zp);
    moeq__free(d->g_idx);
}

/* "[768, 15]" */
static const char *shape_str(const moeq_tensor *t, char *buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int32_t i = 0; i < t->ndim && len < n; i++) {
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    }
    if (len < n) snprintf(buf + len, n - len, "]");
    return buf;
}

static moeq_status nomem(dq *d) {
    return moeq__error(d->err, MOEQ_STATUS_NOMEM, "%s: out of memory while dequantizing",
                       d->mod[0] ? d->mod : "moeq_dequantize");
}

/* ---- finding and checking tensors ------------------------------------------- */

static bool has_suffix(const char *name, const char *param) {
    const size_t n = strlen(name), p = strlen(param);
    if (n == p) return strcmp(name, param) == 0;
    return n > p && name[n - p - 1] == '.' && strcmp(name + n - p, param) == 0;
}

/* The view must describe itself consistently (nbytes = shape x dtype size). */
static moeq_status check_view(dq *d, int p) {
    const moeq_tensor *t = d->t[p];
    const size_t esize = moeq_dtype_size(t->dtype);
    if (esize == 0) {
        return moeq__error(d->err, MOEQ_STATUS_DTYPE, "%s%s%s: unknown dtype %d", TN(d, p),
                           (int)t->dtype);
    }
    if (t->ndim < 0 || t->ndim > MOEQ_MAX_DIMS) {
        return moeq__error(d->err, MOEQ_STATUS_SHAPE, "%s%s%s: ndim %d, expected 0..%d",
                           TN(d, p), (int)t->ndim, MOEQ_MAX_DIMS);
    }
    size_t n = esize;
    for (int32_t i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0 || (uint64_t)t->shape[i] > SIZE_MAX ||
            !moeq__mul_size(n, (size_t)t->shape[i], &n)) {
            char sb[160];
            return moeq__error(d->err, MOEQ_STATUS_SHAPE, "%s%s%s: shape %s is negative or too large",
                               TN(d, p), shape_str(t, sb, sizeof sb));
        }
    }
    if (t->nbytes != (uint64_t)n) {
        char sb[160];
        return moeq__error(d->err, MOEQ_STATUS_INVALID_ARG,
                           "%s%s%s: nbytes %llu, expected %zu (shape %s x %zu bytes of %s)",
                           TN(d, p), (unsigned long long)t->nbytes, n,
                           shape_str(t, sb, sizeof sb), esize, moeq_dtype_name(t->dtype));
    }
    if (n > 0 && !t->data) {
        return moeq__error(d->err, MOEQ_STATUS_INVALID_ARG, "%s%s%s: data is NULL", TN(d, p));
    }
    return MOEQ_STATUS_OK;
}

static moeq_status collect(dq *d, const moeq_tensor *tensors, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        const moeq_tensor *t = &tensors[i];
        if (!t->name) {
            return moeq__error(d->err, MOEQ_STATUS_INVALID_ARG, "%s: tensors[%u] has no name",
                               d->mod[0] ? d->mod : "moeq_dequantize", i);
        }
        for (int p = 0; p < P_COUNT; p++) {
            if (!has_suffix(t->name, param_names[p])) continue;
            if (d->t[p]) {
                return moeq__error(d->err, MOEQ_STATUS_INVALID_ARG,
                                   "%s%s%s: given twice ('%s' and '%s')", TN(d, p),
                                   d->t[p]->name, t->name);
            }
            d->t[p] = t;
        }
    }
    for (int p = 0; p < P_COUNT; p++) {
        if (!d->t[p]) continue;
        const moeq_status st = check_view(d, p);
        if (st != MOEQ_STATUS_OK) return st;
    }
    return MOEQ_STATUS_OK;
}

/* dtype in a MOEQ_DTYPE_INVALID-terminated list; `expected` says it in words. */
static moeq_status expect_dtype(dq *d, int p, const int32_t *ok, const char *expected) {
    for (const int32_t *o = ok; *o != MOEQ_DTYPE_INVALID; o++) {
        if (d->t[p]->dtype == *o) return MOEQ_STATUS_OK;
    }
    return moeq__error(d->err, MOEQ_STATUS_DTYPE, "%s%s%s: dtype %s, expected %s", TN(d, p),
                       moeq_dtype_name(d->t[p]->dtype), expected);
}

static const int32_t float_scale_dtypes[] = {MOEQ_DTYPE_F32, MOEQ_DTYPE_F16, MOEQ_DTYPE_BF16,
                                             MOEQ_DTYPE_INVALID};
#define FLOAT_SCALE_TEXT "F32, F16 or BF16"

static bool shape_is(const moeq_tensor *t, int32_t ndim, const int64_t *dims) {
    if (t->ndim != ndim) return false;
    for (int32_t i = 0; i < ndim; i++) {
        if (t->shape[i] != dims[i]) return false;
    }
    return true;
}

static moeq_status shape_error(dq *d, int p, const char *fmt, ...) MOEQ__PRINTF(3, 4);
static moeq_status shape_error(dq *d, int p, const char *fmt, ...) {
    char want[400], sb[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(want, sizeof want, fmt, ap);
    va_end(ap);
    return moeq__error(d->err, MOEQ_STATUS_SHAPE, "%s%s%s: shape %s, expected %s", TN(d, p),
                       shape_str(d->t[p], sb, sizeof sb), want);
}

/* A 2-D [out, in] payload: sets d->rows and d->cols (cols = in / per_col). */
static moeq_status take_matrix(dq *d, int p, size_t per_col) {
    const moeq_tensor *t = d->t[p];
    if (t->ndim != 2) {
        return shape_error(d, p, "2 dimensions [out, in%s] (one module, not a stacked 3-D tensor)",
                           per_col == 2 ? "/2" : "");
    }
    d->rows = (size_t)t->shape[0];
    d->cols = (size_t)t->shape[1];
    if (per_col > 1 && !moeq__mul_size(d->cols, per_col, &d->cols)) {
        return shape_error(d, p, "a smaller tensor");
    }
    return MOEQ_STATUS_OK;
}

/* ---- weight args --------------------------------------------------------------- */

static moeq_status need_args(dq *d) {
    if (d->args) return MOEQ_STATUS_OK;
    return moeq__error(d->err, MOEQ_STATUS_INVALID_ARG,
                       "%s: format %s needs the weight quantization args, got NULL",
                       d->mod[0] ? d->mod : "moeq_dequantize", moeq_format_name(d->format));
}

/* "int4 group(128) asym": enough to recognise the args in a message. */
static void args_text(const moeq_quant_args *a, char *buf, size_t n) {
    char detail[48] = "";
    if (a->strategy == MOEQ_STRATEGY_GROUP || a->strategy == MOEQ_STRATEGY_TENSOR_GROUP) {
        snprintf(detail, sizeof detail, "(%d)", (int)a->group_size);
    } else if (a->strategy == MOEQ_STRATEGY_BLOCK) {
        snprintf(detail, sizeof detail, "(%dx%d)", (int)a->block_rows, (int)a->block_cols);
    }
    snprintf(buf, n, "%s%d %s%s %s", a->type == MOEQ_QTYPE_FLOAT ? "float" : "int",
             (int)a->num_bits, moeq_strategy_name(a->strategy), detail,
             a->symmetric ? "sym" : "asym");
}

static moeq_status unsupported_args(dq *d, const char *what) {
    char summary[128];
    args_text(d->args, summary, sizeof summary);
    return moeq__error(d->err, MOEQ_STATUS_UNSUPPORTED, "%s: %s weights (%s) %s",
                       d->mod[0] ? d->mod : "moeq_dequantize", moeq_format_name(d->format),
                       summary, what);
}

/* The scale grid of the weight, from the args' strategy. */
static moeq_status weight_grid(dq *d, moeq__grid *g) {
    const moeq_quant_args *a = d->args;
    if ((a->strategy == MOEQ_STRATEGY_GROUP || a->strategy == MOEQ_STRATEGY_TENSOR_GROUP) &&
        a->group_size <= 0) {
        return moeq__error(d->err, MOEQ_STATUS_INVALID_ARG,
                           "%s: strategy %s with group_size %d, expected a positive group_size",
                           d->mod[0] ? d->mod : "moeq_dequantize", moeq_strategy_name(a->strategy),
                           (int)a->group_size);
    }
    if (a->strategy == MOEQ_STRATEGY_BLOCK && (a->block_rows <= 0 || a->block_cols <= 0)) {
        return moeq__error(d->err, MOEQ_STATUS_INVALID_ARG,
                           "%s: block strategy with block_structure [%d, %d], expected positive sizes",
                           d->mod[0] ? d->mod : "moeq_dequantize", (int)a->block_rows,
                           (int)a->block_cols);
    }
    const size_t gs = a->group_size > 0 ? (size_t)a->group_size : 0;
    const size_t bh = a->block_rows > 0 ? (size_t)a->block_rows : 0;
    const size_t bw = a->block_cols > 0 ? (size_t)a->block_cols : 0;
    if (!moeq__scale_grid(a->strategy, d->rows, d->cols, gs, bh, bw, g)) {
        return unsupported_args(d, "have no weight scale layout for this strategy");
    }
    return MOEQ_STATUS_OK;
}

/* How the expected scale shape comes about, for messages. */
static void grid_why(const dq *d, const moeq__grid *g, char *buf, size_t n) {
    const moeq_quant_args *a = d->args;
    switch (a->strategy) {
        case MOEQ_STRATEGY_TENSOR:
            snprintf(buf, n, "[1] (tensor strategy)");
            break;
        case MOEQ_STRATEGY_CHANNEL:
            snprintf(buf, n, "[%zu, 1] (out, 1: channel strategy)", g->rows);
            break;
        case MOEQ_STRATEGY_BLOCK:
            snprintf(buf, n, "[%zu, %zu] (ceil(out/%d), ceil(in/%d))", g->rows, g->cols,
                     (int)a->block_rows, (int)a->block_cols);
            break;
        default:
            snprintf(buf, n, "[%zu, %zu] (out, ceil(in/group_size=%d))", g->rows, g->cols,
                     (int)a->group_size);
            break;
    }
}

/* A tensor laid out on the scale grid ([] or [1] accepted for tensor strategy). */
static moeq_status expect_grid_shape(dq *d, int p, const moeq__grid *g) {
    const moeq_tensor *t = d->t[p];
    if (d->args->strategy == MOEQ_STRATEGY_TENSOR) {
        if (t->ndim == 0 || (t->ndim == 1 && t->shape[0] == 1)) return MOEQ_STATUS_OK;
    } else {
        const int64_t dims[2] = {(int64_t)g->rows, (int64_t)g->cols};
        if (shape_is(t, 2, dims)) return MOEQ_STATUS_OK;
    }
    char why[200];
    grid_why(d, g, why, sizeof why);
    return shape_error(d, p, "%s", why);
}

/* ---- scales, zero points, g_idx --------------------------------------------------- */

/* Decodes weight_scale (already shape-checked) to f32 and rejects NaN/inf.
 * E8M0 bytes (U8) are decoded as 2^(e-127), plus 2 for 0.13.0 MXFP4. */
static moeq_status decode_scale(dq *d, const moeq__grid *g) {
    const moeq_tensor *t = d->t[P_SCALE];
    const size_t n = g->rows * g->cols;
    d->scale = moeq__malloc(n * sizeof *d->scale);
    if (!d->scale) return nomem(d);
    const uint8_t *bytes = t->data;
    if (t->dtype == MOEQ_DTYPE_U8) {
        /* 0.13.0 wrote MXFP4 exponents 2 too small: 2^(e+2-127), exactly 4x */
        const float bump = (d->flags & MOEQ_DEQUANT_MXFP4_V013) &&
                                   d->format == MOEQ_FORMAT_MXFP4_PACK_QUANTIZED
                               ? 4.0f
                               : 1.0f;
        for (size_t i = 0; i < n; i++) d->scale[i] = moeq__e8m0_to_f32(bytes[i]) * bump;
    } else {
        moeq__to_f32_ref(t->dtype, t->data, n, d->scale);
    }
    for (size_t i = 0; i < n; i++) {
        if (isfinite(d->scale[i])) continue;
        char raw[48] = "";
        if (t->dtype == MOEQ_DTYPE_U8 || t->dtype == MOEQ_DTYPE_F8_E4M3) {
            snprintf(raw, sizeof raw, " (byte 0x%02X)", bytes[i]);
        }
        return moeq__error(d->err, MOEQ_STATUS_CHECKPOINT,
                           "%s%s%s[%zu, %zu] = %g%s: scales must be finite", TN(d, P_SCALE),
                           i / g->cols, i % g->cols, (double)d->scale[i], raw);
    }
    return MOEQ_STATUS_OK;
}

/* g_idx (optional, group strategies only): any -1 means "not initialised",
 * ignore it (CT); otherwise every value must name a scale column. */
static moeq_status load_g_idx(dq *d, const moeq__grid *g) {
    const moeq_tensor *t = d->t[P_GIDX];
    if (!t) return MOEQ_STATUS_OK;
    if (d->args->strategy != MOEQ_STRATEGY_GROUP && d->args->strategy != MOEQ_STRATEGY_TENSOR_GROUP) {
        return MOEQ_STATUS_OK; /* CT reads g_idx only for group strategies */
    }
    static const int32_t ok[] = {MOEQ_DTYPE_I32, MOEQ_DTYPE_INVALID};
    moeq_status st = expect_dtype(d, P_GIDX, ok, "I32");
    if (st != MOEQ_STATUS_OK) return st;
    const int64_t dims[1] = {(int64_t)d->cols};
    if (!shape_is(t, 1, dims)) return shape_error(d, P_GIDX, "[%zu] (in)", d->cols);
    for (size_t c = 0; c < d->cols; c++) {
        if ((int32_t)moeq__load_u32(t->data, c) == -1) return MOEQ_STATUS_OK;
    }
    d->g_idx = moeq__malloc(d->cols * sizeof *d->g_idx + 1);
    if (!d->g_idx) return nomem(d);
    for (size_t c = 0; c < d->cols; c++) {
        const int32_t v = (int32_t)moeq__load_u32(t->data, c);
        if (v < 0 || (size_t)v >= g->cols) {
            return moeq__error(d->err, MOEQ_STATUS_CHECKPOINT,
                               "%s%s%s[%zu] = %d, expected a group index in [0, %zu) or -1 everywhere",
                               TN(d, P_GIDX), c, (int)v, g->cols);
        }
        d->g_idx[c] = v;
    }
    return MOEQ_STATUS_OK;
}

/* Chooses the word layout of a pack-quantized tensor from its packed width
 * `got` for n values: MOEQ_DEQUANT_LEGACY_PACKING forces legacy; otherwise
 * dense unless only the legacy width matches.  Returns -1 when neither fits. */
static int choose_layout(const dq *d, size_t n, int bits, int64_t got) {
    const size_t dense = moeq__int_packed_words(n, bits, false);
    const size_t legacy = moeq__int_packed_words(n, bits, true);
    if (d->flags & MOEQ_DEQUANT_LEGACY_PACKING) return got == (int64_t)legacy ? 1 : -1;
    if (got == (int64_t)dense) return 0;
    if (got == (int64_t)legacy) return 1;
    return -1;
}

/* What choose_layout accepts, as expected shapes: the packed dimension is
 * the second one (weights, dim0 = 0) or the first one (zero points, dim0 = 1);
 * `other` is the size of the other dimension. */
static void layout_why(const dq *d, size_t n, int bits, bool dim0, size_t other, char *buf,
                       size_t len) {
    const size_t dense = moeq__int_packed_words(n, bits, false);
    const size_t legacy = moeq__int_packed_words(n, bits, true);
    const char *what = dim0 ? "out" : "in";
    char a[64], b[64];
#define SHAPE_OF(buf_, words_)                                                          \
    (dim0 ? snprintf(buf_, sizeof buf_, "[%zu, %zu]", (words_), other)                  \
          : snprintf(buf_, sizeof buf_, "[%zu, %zu]", other, (words_)))
    SHAPE_OF(a, dense);
    SHAPE_OF(b, legacy);
#undef SHAPE_OF
    if (d->flags & MOEQ_DEQUANT_LEGACY_PACKING) {
        snprintf(buf, len, "%s (legacy <= 0.17 layout forced by MOEQ_DEQUANT_LEGACY_PACKING: %s=%zu, %d values per word)",
                 b, what, n, 32 / bits);
    } else if (dense == legacy) {
        snprintf(buf, len, "%s (%sceil(%s=%zu x %d bits / 32)%s)", a, dim0 ? "" : "out, ", what, n,
                 bits, dim0 ? ", groups" : "");
    } else {
        snprintf(buf, len, "%s (%sceil(%s=%zu x %d bits / 32)%s) or %s (legacy <= 0.17 layout, %d values per word)",
                 a, dim0 ? "" : "out, ", what, n, bits, dim0 ? ", groups" : "", b, 32 / bits);
    }
}

/* Asymmetric integer zero points.  `packed_ok`: pack-quantized group/channel,
 * where CT >= 0.9.4 packs them along dim 0 into I32. */
static moeq_status load_int_zero_point(dq *d, const moeq__grid *g, bool packed_ok, int bits) {
    const moeq_tensor *t = d->t[P_ZP];
    const size_t n = g->rows * g->cols;
    d->zp = moeq__malloc(n * sizeof *d->zp + 1);
    if (!d->zp) return nomem(d);
    if (packed_ok && t->dtype == MOEQ_DTYPE_I32) {
        const int layout = t->ndim == 2 && t->shape[1] == (int64_t)g->cols
                               ? choose_layout(d, g->rows, bits, t->shape[0])
                               : -1;
        if (layout < 0) {
            char why[320];
            layout_why(d, g->rows, bits, true, g->cols, why, sizeof why);
            return shape_error(d, P_ZP, "%s packed along dim 0, or I8 [%zu, %zu]", why, g->rows,
                               g->cols);
        }
        int8_t *tmp = moeq__malloc(n + 1);
        if (!tmp) return nomem(d);
        moeq__int_unpack_cols_ref(t->data, g->rows, g->cols, bits, layout == 1, tmp);
        for (size_t i = 0; i < n; i++) d->zp[i] = tmp[i];
        moeq__free(tmp);
        return MOEQ_STATUS_OK;
    }
    static const int32_t ints[] = {MOEQ_DTYPE_I8, MOEQ_DTYPE_I16, MOEQ_DTYPE_I32, MOEQ_DTYPE_INVALID};
    static const int32_t i8[] = {MOEQ_DTYPE_I8, MOEQ_DTYPE_INVALID};
    moeq_status s2 = packed_ok || d->format == MOEQ_FORMAT_PACK_QUANTIZED
                         ? expect_dtype(d, P_ZP, i8, packed_ok ? "I32 (packed) or I8" : "I8")
                         : expect_dtype(d, P_ZP, ints, "I8, I16 or I32");
    if (s2 != MOEQ_STATUS_OK) return s2;
    s2 = expect_grid_shape(d, P_ZP, g);
    if (s2 != MOEQ_STATUS_OK) return s2;
    moeq__to_f32_ref(t->dtype, t->data, n, d->zp);
    return MOEQ_STATUS_OK;
}

/* weight_scale for int and FP8 weights: float dtype on the grid. */
static moeq_status load_float_scale(dq *d, const moeq__grid *g) {
    moeq_status st = expect_dtype(d, P_SCALE, float_scale_dtypes, FLOAT_SCALE_TEXT);
    if (st == MOEQ_STATUS_OK) st = expect_grid_shape(d, P_SCALE, g);
    if (st == MOEQ_STATUS_OK) st = decode_scale(d, g);
    return st;
}

/* ---- formats ---------------------------------------------------------------------- */

static bool int_strategy(int32_t s) {
    return s == MOEQ_STRATEGY_TENSOR || s == MOEQ_STRATEGY_CHANNEL || s == MOEQ_STRATEGY_GROUP ||
           s == MOEQ_STRATEGY_BLOCK;
}

static moeq_status prepare_dense(dq *d) {
    static const int32_t ok[] = {MOEQ_DTYPE_F32, MOEQ_DTYPE_F16, MOEQ_DTYPE_BF16, MOEQ_DTYPE_F64,
                                 MOEQ_DTYPE_INVALID};
    moeq_status st = expect_dtype(d, P_WEIGHT, ok, "F32, F16, BF16 or F64 (not compressed)");
    if (st == MOEQ_STATUS_OK) st = take_matrix(d, P_WEIGHT, 1);
    if (st != MOEQ_STATUS_OK) return st;
    const int32_t dt = d->t[P_WEIGHT]->dtype;
    d->qw.kind = dt == MOEQ_DTYPE_F32   ? MOEQ__QW_F32
                 : dt == MOEQ_DTYPE_F16 ? MOEQ__QW_F16
                 : dt == MOEQ_DTYPE_BF16 ? MOEQ__QW_BF16
                                         : MOEQ__QW_F64;
    d->qw.codes = d->t[P_WEIGHT]->data;
    d->qw.row_stride = d->cols * moeq_dtype_size(dt);
    d->qw.grid = (moeq__grid){1, 1, d->rows ? d->rows : 1, d->cols ? d->cols : 1};
    /* No scale: the values are the weights (F64 rounds through f32).  A NaN
     * or infinite weight is a broken checkpoint, as an FP8 NaN code is. */
    const uint8_t *b = d->qw.codes;
    const size_t n = d->rows * d->cols;
    for (size_t i = 0; i < n; i++) {
        bool bad;
        if (dt == MOEQ_DTYPE_F32) {
            bad = (moeq__load_u32(b, i) & 0x7F800000u) == 0x7F800000u;
        } else if (dt == MOEQ_DTYPE_F64) {
            bad = (moeq__load_u64(b, i) & 0x7FF0000000000000ull) == 0x7FF0000000000000ull;
        } else {
            const uint16_t h = (uint16_t)(b[2 * i] | (b[2 * i + 1] << 8));
            bad = dt == MOEQ_DTYPE_BF16 ? (h & 0x7F80u) == 0x7F80u : (h & 0x7C00u) == 0x7C00u;
        }
        if (bad) {
            return moeq__error(d->err, MOEQ_STATUS_CHECKPOINT,
                               "%s%s%s[%zu, %zu] is not finite; weights must be finite",
                               TN(d, P_WEIGHT), i / d->cols, i % d->cols);
        }
    }
    return MOEQ_STATUS_OK;
}

static moeq_status prepare_pack(dq *d) {
    const moeq_quant_args *a = d->args;
    const int bits = (int)a->num_bits;
    static const int32_t i32[] = {MOEQ_DTYPE_I32, MOEQ_DTYPE_INVALID};
    static const int32_t shape_types[] = {MOEQ_DTYPE_I64, MOEQ_DTYPE_I32, MOEQ_DTYPE_INVALID};
    moeq_status st = expect_dtype(d, P_PACKED, i32, "I32");
    if (st == MOEQ_STATUS_OK) st = expect_dtype(d, P_SHAPE, shape_types, "I64 (or I32)");
    if (st != MOEQ_STATUS_OK) return st;
    const moeq_tensor *sh = d->t[P_SHAPE];
    if (!(sh->ndim == 1 && sh->shape[0] == 2)) return shape_error(d, P_SHAPE, "[2] (out, in)");
    int64_t logical[2];
    for (size_t i = 0; i < 2; i++) {
        logical[i] = sh->dtype == MOEQ_DTYPE_I64 ? (int64_t)moeq__load_u64(sh->data, i)
                                                 : (int64_t)(int32_t)moeq__load_u32(sh->data, i);
    }
    const moeq_tensor *pk = d->t[P_PACKED];
    if (pk->ndim != 2) return shape_error(d, P_PACKED, "2 dimensions [out, words(in)]");
    if (logical[0] != pk->shape[0] || logical[1] < 0 || (uint64_t)logical[1] > SIZE_MAX / 8) {
        return moeq__error(d->err, MOEQ_STATUS_SHAPE,
                           "%s%s%s = [%lld, %lld], expected [%lld, in >= 0] (rows of weight_packed)",
                           TN(d, P_SHAPE), (long long)logical[0], (long long)logical[1],
                           (long long)pk->shape[0]);
    }
    d->rows = (size_t)logical[0];
    d->cols = (size_t)logical[1];
    const int layout = choose_layout(d, d->cols, bits, pk->shape[1]);
    if (layout < 0) {
        char why[320];
        layout_why(d, d->cols, bits, false, d->rows, why, sizeof why);
        return shape_error(d, P_PACKED, "%s", why);
    }
    moeq__grid g;
    st = weight_grid(d, &g);
    if (st == MOEQ_STATUS_OK) st = load_float_scale(d, &g);
    if (st == MOEQ_STATUS_OK && !a->symmetric) {
        const bool packed_ok = a->strategy == MOEQ_STRATEGY_GROUP || a->strategy == MOEQ_STRATEGY_CHANNEL;
        st = load_int_zero_point(d, &g, packed_ok, bits);
    }
    if (st == MOEQ_STATUS_OK) st = load_g_idx(d, &g);
    if (st != MOEQ_STATUS_OK) return st;
    d->qw.kind = MOEQ__QW_INT_PACKED;
    d->qw.bits = bits;
    d->qw.legacy = layout;
    d->qw.codes = pk->data;
    d->qw.row_stride = (size_t)pk->shape[1] * 4;
    d->qw.grid = g;
    return MOEQ_STATUS_OK;
}

static moeq_status prepare_naive(dq *d) {
    const moeq_quant_args *a = d->args;
    int32_t want;
    int32_t kind;
    if (a->type == MOEQ_QTYPE_INT && a->num_bits >= 1 && a->num_bits <= 8) {
        want = MOEQ_DTYPE_I8, kind = MOEQ__QW_I8;
    } else if (a->type == MOEQ_QTYPE_INT && a->num_bits >= 9 && a->num_bits <= 16) {
        want = MOEQ_DTYPE_I16, kind = MOEQ__QW_I16;
    } else if (a->type == MOEQ_QTYPE_INT && a->num_bits >= 17 && a->num_bits <= 32) {
        want = MOEQ_DTYPE_I32, kind = MOEQ__QW_I32;
    } else if (a->type == MOEQ_QTYPE_FLOAT && a->num_bits == 8) {
        want = MOEQ_DTYPE_F8_E4M3, kind = MOEQ__QW_E4M3;
    } else {
        /* tensor_set rejected these args already */
        return unsupported_args(d, "must be int with 1..32 bits or float with 8 bits");
    }
    const int32_t ok[] = {want, MOEQ_DTYPE_INVALID};
    char text[64];
    snprintf(text, sizeof text, "%s for %s %d-bit weights", moeq_dtype_name(want),
             a->type == MOEQ_QTYPE_INT ? "int" : "float", (int)a->num_bits);
    moeq_status st = expect_dtype(d, P_WEIGHT, ok, text);
    if (st == MOEQ_STATUS_OK) st = take_matrix(d, P_WEIGHT, 1);
    moeq__grid g;
    if (st == MOEQ_STATUS_OK) st = weight_grid(d, &g);
    if (st == MOEQ_STATUS_OK) st = load_float_scale(d, &g);
    if (st == MOEQ_STATUS_OK && !a->symmetric) st = load_int_zero_point(d, &g, false, 8);
    if (st == MOEQ_STATUS_OK) st = load_g_idx(d, &g);
    if (st != MOEQ_STATUS_OK) return st;
    d->qw.kind = kind;
    d->qw.codes = d->t[P_WEIGHT]->data;
    d->qw.row_stride = d->cols * moeq_dtype_size(want);
    d->qw.grid = g;
    return MOEQ_STATUS_OK;
}

/* FP4 payload shared by NVFP4 and MXFP4: U8 [out, in/2]. */
static moeq_status take_fp4(dq *d) {
    static const int32_t u8[] = {MOEQ_DTYPE_U8, MOEQ_DTYPE_INVALID};
    moeq_status st = expect_dtype(d, P_PACKED, u8, "U8 (two FP4 codes per byte)");
    if (st == MOEQ_STATUS_OK) st = take_matrix(d, P_PACKED, 2);
    if (st != MOEQ_STATUS_OK) return st;
    d->qw.kind = MOEQ__QW_E2M1;
    d->qw.codes = d->t[P_PACKED]->data;
    d->qw.row_stride = d->cols / 2;
    return MOEQ_STATUS_OK;
}

static moeq_status prepare_nvfp4(dq *d) {
    moeq_status st = take_fp4(d);
    moeq__grid g;
    if (st == MOEQ_STATUS_OK) st = weight_grid(d, &g);
    static const int32_t sdt[] = {MOEQ_DTYPE_F8_E4M3, MOEQ_DTYPE_F32, MOEQ_DTYPE_F16,
                                  MOEQ_DTYPE_BF16, MOEQ_DTYPE_INVALID};
    if (st == MOEQ_STATUS_OK) st = expect_dtype(d, P_SCALE, sdt, "F8_E4M3 (or F32, F16, BF16)");
    if (st == MOEQ_STATUS_OK) st = expect_grid_shape(d, P_SCALE, &g);
    if (st == MOEQ_STATUS_OK) st = decode_scale(d, &g);
    if (st != MOEQ_STATUS_OK) return st;
    const moeq_tensor *gt = d->t[P_GLOBAL];
    if (gt) {
        static const int32_t f32[] = {MOEQ_DTYPE_F32, MOEQ_DTYPE_INVALID};
        st = expect_dtype(d, P_GLOBAL, f32, "F32");
        if (st != MOEQ_STATUS_OK) return st;
        if (!(gt->ndim == 0 || (gt->ndim == 1 && gt->shape[0] == 1))) {
            return shape_error(d, P_GLOBAL, "[1]");
        }
        float global;
        moeq__to_f32_ref(MOEQ_DTYPE_F32, gt->data, 1, &global);
        if (!(isfinite(global) && global > 0.0f)) {
            return moeq__error(d->err, MOEQ_STATUS_CHECKPOINT,
                               "%s%s%s = %g, expected a positive finite number (448*6/amax)",
                               TN(d, P_GLOBAL), (double)global);
        }
        /* CT: scale = scale / global_scale, in f32, before anything else */
        for (size_t i = 0; i < g.rows * g.cols; i++) d->scale[i] = d->scale[i] / global;
    }
    d->qw.grid = g;
    return MOEQ_STATUS_OK;
}

/* MX scales: U8 E8M0 [out, ceil(in/gs)]. */
static moeq_status load_mx_scale(dq *d, moeq__grid *g) {
    moeq_status st = weight_grid(d, g);
    static const int32_t u8[] = {MOEQ_DTYPE_U8, MOEQ_DTYPE_INVALID};
    if (st == MOEQ_STATUS_OK) st = expect_dtype(d, P_SCALE, u8, "U8 (E8M0 exponents)");
    if (st == MOEQ_STATUS_OK) st = expect_grid_shape(d, P_SCALE, g);
    if (st == MOEQ_STATUS_OK) st = decode_scale(d, g);
    return st;
}

static moeq_status prepare_mxfp4(dq *d) {
    moeq_status st = take_fp4(d);
    if (st == MOEQ_STATUS_OK) st = load_mx_scale(d, &d->qw.grid);
    return st;
}

/* FP6 payload: U8 [out, 3*in/4], four codes in three bytes. */
static moeq_status prepare_mxfp6(dq *d) {
    static const int32_t u8[] = {MOEQ_DTYPE_U8, MOEQ_DTYPE_INVALID};
    moeq_status st = expect_dtype(d, P_PACKED, u8, "U8 (four FP6 codes in three bytes)");
    if (st != MOEQ_STATUS_OK) return st;
    const moeq_tensor *t = d->t[P_PACKED];
    if (t->ndim != 2 || t->shape[1] % 3 != 0) {
        return shape_error(d, P_PACKED, "2 dimensions [out, 3*in/4] (a multiple of 3 bytes per row)");
    }
    d->rows = (size_t)t->shape[0];
    d->cols = (size_t)t->shape[1] / 3 * 4;
    st = load_mx_scale(d, &d->qw.grid);
    if (st != MOEQ_STATUS_OK) return st;
    d->qw.kind = MOEQ__QW_E2M3;
    d->qw.codes = t->data;
    d->qw.row_stride = (size_t)t->shape[1];
    return MOEQ_STATUS_OK;
}

static moeq_status prepare_mxfp8(dq *d) {
    static const int32_t e4m3[] = {MOEQ_DTYPE_F8_E4M3, MOEQ_DTYPE_INVALID};
    moeq_status st = expect_dtype(d, P_WEIGHT, e4m3, "F8_E4M3");
    if (st == MOEQ_STATUS_OK) st = take_matrix(d, P_WEIGHT, 1);
    if (st == MOEQ_STATUS_OK) st = load_mx_scale(d, &d->qw.grid);
    if (st != MOEQ_STATUS_OK) return st;
    d->qw.kind = MOEQ__QW_E4M3;
    d->qw.codes = d->t[P_WEIGHT]->data;
    d->qw.row_stride = d->cols;
    return MOEQ_STATUS_OK;
}

/* FP8 weight bytes 0x7F/0xFF are NaN: a broken checkpoint, not a weight. */
static moeq_status check_fp8_codes(dq *d) {
    if (d->qw.kind != MOEQ__QW_E4M3) return MOEQ_STATUS_OK;
    const uint8_t *b = d->qw.codes;
    const size_t n = d->rows * d->cols;
    for (size_t i = 0; i < n; i++) {
        if ((b[i] & 0x7Fu) != MOEQ__E4M3_NAN) continue;
        return moeq__error(d->err, MOEQ_STATUS_CHECKPOINT, "%s%s%s[%zu, %zu] is NaN (byte 0x%02X)",
                           TN(d, P_WEIGHT), i / d->cols, i % d->cols, b[i]);
    }
    return MOEQ_STATUS_OK;
}

/* ---- the tensor set of a module ------------------------------------------------ */

static bool group_strategy(int32_t s) {
    return s == MOEQ_STRATEGY_GROUP || s == MOEQ_STRATEGY_TENSOR_GROUP;
}

/* Which weight parameters d->format stores under d->args, with the checks on
 * the args that decide it (the single place both moeq_dequantize and
 * `moeq inspect` learn it from). */
static moeq_status tensor_set(dq *d, moeq__ct_params *out) {
    out->required = out->optional = 0;
    switch (d->format) {
        case MOEQ_FORMAT_DENSE:
        case MOEQ_FORMAT_FAKEQUANT:
            out->required = MOEQ__CT_BIT(P_WEIGHT);
            return MOEQ_STATUS_OK;
        case MOEQ_FORMAT_NONE:
            return moeq__error(d->err, MOEQ_STATUS_INVALID_ARG,
                               "%s: no compression format given; pass the format moeq_resolve returns",
                               d->mod[0] ? d->mod : "moeq_dequantize");
        default:
            break;
    }
    moeq_status st = need_args(d);
    if (st != MOEQ_STATUS_OK) return st;
    const moeq_quant_args *a = d->args;
    switch (d->format) {
        case MOEQ_FORMAT_PACK_QUANTIZED:
            if (a->type != MOEQ_QTYPE_INT || a->num_bits < 1 || a->num_bits > 8) {
                return unsupported_args(d, "must be int with 1..8 bits");
            }
            if (!int_strategy(a->strategy)) {
                return unsupported_args(d, "need strategy tensor, channel, group or block");
            }
            out->required = MOEQ__CT_BIT(P_PACKED) | MOEQ__CT_BIT(P_SHAPE) | MOEQ__CT_BIT(P_SCALE);
            break;
        case MOEQ_FORMAT_NAIVE_QUANTIZED:
        case MOEQ_FORMAT_INT_QUANTIZED:
        case MOEQ_FORMAT_FLOAT_QUANTIZED:
            if (!(a->type == MOEQ_QTYPE_INT && a->num_bits >= 1 && a->num_bits <= 32) &&
                !(a->type == MOEQ_QTYPE_FLOAT && a->num_bits == 8)) {
                return unsupported_args(d, "must be int with 1..32 bits or float with 8 bits");
            }
            if (!int_strategy(a->strategy)) {
                return unsupported_args(d, "need strategy tensor, channel, group or block");
            }
            if (a->type == MOEQ_QTYPE_FLOAT && !a->symmetric) return unsupported_args(d, "are asymmetric FP8");
            out->required = MOEQ__CT_BIT(P_WEIGHT) | MOEQ__CT_BIT(P_SCALE);
            break;
        case MOEQ_FORMAT_NVFP4_PACK_QUANTIZED:
            if (a->type != MOEQ_QTYPE_FLOAT || a->num_bits != 4) return unsupported_args(d, "must be float with 4 bits");
            if (!group_strategy(a->strategy)) return unsupported_args(d, "need strategy tensor_group");
            if (!a->symmetric) return unsupported_args(d, "are asymmetric (CT: not supported for FP4)");
            out->required = MOEQ__CT_BIT(P_PACKED) | MOEQ__CT_BIT(P_SCALE);
            /* group strategy: a global scale is applied when it is there */
            if (a->strategy == MOEQ_STRATEGY_TENSOR_GROUP) {
                out->required |= MOEQ__CT_BIT(P_GLOBAL);
            } else {
                out->optional |= MOEQ__CT_BIT(P_GLOBAL);
            }
            return MOEQ_STATUS_OK; /* no zero point, no g_idx */
        case MOEQ_FORMAT_MXFP4_PACK_QUANTIZED:
            if (a->type != MOEQ_QTYPE_FLOAT || a->num_bits != 4) return unsupported_args(d, "must be float with 4 bits");
            if (a->strategy != MOEQ_STRATEGY_GROUP) return unsupported_args(d, "need strategy group");
            if (!a->symmetric) return unsupported_args(d, "are asymmetric (CT: not supported for FP4)");
            out->required = MOEQ__CT_BIT(P_PACKED) | MOEQ__CT_BIT(P_SCALE);
            return MOEQ_STATUS_OK;
        case MOEQ_FORMAT_MXFP6_PACK_QUANTIZED:
            if (a->type != MOEQ_QTYPE_FLOAT || a->num_bits != 6) return unsupported_args(d, "must be float with 6 bits");
            if (a->strategy != MOEQ_STRATEGY_GROUP) return unsupported_args(d, "need strategy group");
            if (!a->symmetric) return unsupported_args(d, "are asymmetric (CT: not supported for FP6)");
            out->required = MOEQ__CT_BIT(P_PACKED) | MOEQ__CT_BIT(P_SCALE);
            return MOEQ_STATUS_OK;
        case MOEQ_FORMAT_MXFP8_QUANTIZED:
            if (a->type != MOEQ_QTYPE_FLOAT || a->num_bits != 8) return unsupported_args(d, "must be float with 8 bits");
            if (a->strategy != MOEQ_STRATEGY_GROUP) return unsupported_args(d, "need strategy group");
            out->required = MOEQ__CT_BIT(P_WEIGHT) | MOEQ__CT_BIT(P_SCALE);
            return MOEQ_STATUS_OK;
        default:
            return moeq__error(d->err, MOEQ_STATUS_UNSUPPORTED,
                               "%s: format '%s' (%d) cannot be dequantized (supported: dense, "
                               "pack-quantized, naive/int/float-quantized, nvfp4-pack-quantized, "
                               "mxfp4-pack-quantized, mxfp6-pack-quantized, mxfp8-quantized)",
                               d->mod[0] ? d->mod : "moeq_dequantize",
                               moeq_format_name(d->format), (int)d->format);
    }
    /* The integer (and naive FP8) formats: zero points of asymmetric args;
     * g_idx of group strategies, which actorder "group" cannot do without. */
    if (!a->symmetric) out->required |= MOEQ__CT_BIT(P_ZP);
    if (group_strategy(a->strategy)) {
        if (moeq_actorder_is_group(a->actorder)) {
            out->required |= MOEQ__CT_BIT(P_GIDX);
        } else {
            out->optional |= MOEQ__CT_BIT(P_GIDX);
        }
    }
    return MOEQ_STATUS_OK;
}

/* The order names are listed in: payload, shape, scales, zero point, g_idx. */
static const int8_t text_order[MOEQ__CT_PARAM_COUNT] = {
    MOEQ__CT_WEIGHT,           MOEQ__CT_WEIGHT_PACKED,       MOEQ__CT_WEIGHT_SHAPE,
    MOEQ__CT_WEIGHT_SCALE,     MOEQ__CT_WEIGHT_GLOBAL_SCALE, MOEQ__CT_WEIGHT_ZERO_POINT,
    MOEQ__CT_WEIGHT_G_IDX,     MOEQ__CT_INPUT_SCALE,         MOEQ__CT_INPUT_GLOBAL_SCALE,
    MOEQ__CT_INPUT_ZERO_POINT, MOEQ__CT_OUTPUT_SCALE,        MOEQ__CT_OUTPUT_GLOBAL_SCALE,
    MOEQ__CT_OUTPUT_ZERO_POINT,
};

void moeq__ct_params_text(uint32_t set, char *buf, size_t n) {
    if (n == 0) return;
    buf[0] = '\0';
    uint32_t left = 0;
    for (int i = 0; i < MOEQ__CT_PARAM_COUNT; i++) left += (set >> i) & 1u;
    size_t len = 0;
    uint32_t k = 0;
    for (int i = 0; i < MOEQ__CT_PARAM_COUNT && len < n; i++) {
        const int p = text_order[i];
        if (!(set & MOEQ__CT_BIT(p))) continue;
        const char *sep = k == 0 ? "" : k + 1 == left ? " and " : ", ";
        const char *note = p == MOEQ__CT_WEIGHT_ZERO_POINT || p == MOEQ__CT_INPUT_ZERO_POINT ||
                                   p == MOEQ__CT_OUTPUT_ZERO_POINT
                               ? " (asymmetric)"
                           : p == MOEQ__CT_WEIGHT_G_IDX ? " (actorder group)"
                                                        : "";
        int w = snprintf(buf + len, n - len, "%s%s%s", sep, param_names[p], note);
        if (w < 0) break;
        len += (size_t)w;
        k++;
    }
}

/* Every required tensor is there (checked before any dtype or shape). */
static moeq_status check_present(dq *d, uint32_t required) {
    for (int i = 0; i < MOEQ__CT_PARAM_COUNT; i++) {
        const int p = text_order[i];
        if (p >= P_COUNT || !(required & MOEQ__CT_BIT(p)) || d->t[p]) continue;
        char needs[256];
        moeq__ct_params_text(required, needs, sizeof needs);
        return moeq__error(d->err, MOEQ_STATUS_CHECKPOINT, "%s%s%s: missing; %s weights need %s",
                           TN(d, p), moeq_format_name(d->format), needs);
    }
    return MOEQ_STATUS_OK;
}

static moeq_status prepare(dq *d) {
    moeq__ct_params set;
    moeq_status st = tensor_set(d, &set);
    if (st == MOEQ_STATUS_OK) st = check_present(d, set.required);
    if (st != MOEQ_STATUS_OK) return st;
    switch (d->format) {
        case MOEQ_FORMAT_PACK_QUANTIZED: return prepare_pack(d);
        case MOEQ_FORMAT_NAIVE_QUANTIZED:
        case MOEQ_FORMAT_INT_QUANTIZED:
        case MOEQ_FORMAT_FLOAT_QUANTIZED: return prepare_naive(d);
        case MOEQ_FORMAT_NVFP4_PACK_QUANTIZED: return prepare_nvfp4(d);
        case MOEQ_FORMAT_MXFP4_PACK_QUANTIZED: return prepare_mxfp4(d);
        case MOEQ_FORMAT_MXFP6_PACK_QUANTIZED: return prepare_mxfp6(d);
        case MOEQ_FORMAT_MXFP8_QUANTIZED: return prepare_mxfp8(d);
        default: return prepare_dense(d); /* dense and fakequant */
    }
}

/* ---- the shared table, for `moeq inspect` ----------------------------------------- */

const char *moeq__ct_param_name(int32_t p) {
    return p >= 0 && p < MOEQ__CT_PARAM_COUNT ? param_names[p] : NULL;
}

int32_t moeq__ct_param_from_name(const char *s, size_t n) {
    for (int32_t p = 0; p < MOEQ__CT_PARAM_COUNT; p++) {
        if (strlen(param_names[p]) == n && memcmp(param_names[p], s, n) == 0) return p;
    }
    return -1;
}

moeq_status moeq__ct_expected_params(const moeq_quant_args *weights, int32_t format,
                                     const char *module, moeq__ct_params *out, moeq_error *err) {
    dq d;
    memset(&d, 0, sizeof d);
    d.args = weights;
    d.format = format;
    d.mod = module ? module : "";
    d.dot = module && module[0] ? "." : "";
    d.err = err;
    return tensor_set(&d, out);
}

_Static_assert(MOEQ__CT_INPUT_ZERO_POINT == MOEQ__CT_INPUT_SCALE + 1 &&
                   MOEQ__CT_INPUT_GLOBAL_SCALE == MOEQ__CT_INPUT_SCALE + 2 &&
                   MOEQ__CT_OUTPUT_ZERO_POINT == MOEQ__CT_OUTPUT_SCALE + 1 &&
                   MOEQ__CT_OUTPUT_GLOBAL_SCALE == MOEQ__CT_OUTPUT_SCALE + 2,
               "activation parameters are laid out scale, zero point, global scale");
_Static_assert(MOEQ__CT_PARAM_COUNT <= 32, "parameter sets are 32-bit masks");

moeq__ct_params moeq__ct_activation_params(const moeq_quant_args *args, bool output) {
    moeq__ct_params set = {0, 0};
    if (!args || args->dynamic == MOEQ_DYNAMIC_TRUE) return set; /* dynamic: nothing stored */
    const int base = output ? MOEQ__CT_OUTPUT_SCALE : MOEQ__CT_INPUT_SCALE;
    const int zp = base + 1, global = base + 2;
    if (args->dynamic == MOEQ_DYNAMIC_LOCAL) {
        set.required = MOEQ__CT_BIT(global); /* NVFP4 inputs: only the global scale is static */
        return set;
    }
    set.required = MOEQ__CT_BIT(base);
    if (!args->symmetric) set.required |= MOEQ__CT_BIT(zp);
    if (args->strategy == MOEQ_STRATEGY_TENSOR_GROUP) set.required |= MOEQ__CT_BIT(global);
    return set;
}

/* ---- the entry point ------------------------------------------------------------ */

static moeq_status run(const moeq__qweight *qw, int32_t out_dtype, void *out, dq *d) {
    /* An empty matrix writes nothing: no walk over 2^40 rows of zero columns
     * (shapes such as [2^40, 0] are valid and hold no bytes). */
    if (qw->rows == 0 || qw->cols == 0) return MOEQ_STATUS_OK;
    const size_t osize = moeq_dtype_size(out_dtype);
    float *row = moeq__malloc(qw->cols * sizeof *row + 1);
    if (!row) return nomem(d);
    uint8_t *dst = out;
    for (size_t r = 0; r < qw->rows; r++) {
        moeq__dequant_ref(qw, r, 1, row);
        moeq__from_f32_ref(out_dtype, row, qw->cols, dst + r * qw->cols * osize);
    }
    moeq__free(row);
    return MOEQ_STATUS_OK;
}

/* ---- the builder moeq_dequantize and the MoE layers share ---------------------- */

moeq_status moeq__ct_weight_build(const moeq_quant_args *weights, int32_t format, uint32_t flags,
                                  const char *module, const moeq_tensor *tensors,
                                  uint32_t n_tensors, moeq__ct_weight *out, moeq_error *err) {
    memset(out, 0, sizeof *out);
    const char *where = module && module[0] ? module : "moeq_dequantize";
    if (!tensors && n_tensors > 0) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: tensors is NULL but n_tensors is %u",
                           where, n_tensors);
    }
    dq d;
    memset(&d, 0, sizeof d);
    d.args = weights;
    d.format = format;
    d.flags = flags;
    d.mod = module ? module : "";
    d.dot = module && module[0] ? "." : "";
    d.err = err;
    moeq_status st = collect(&d, tensors, n_tensors);
    if (st == MOEQ_STATUS_OK) st = prepare(&d);
    size_t count;
    if (st == MOEQ_STATUS_OK && !moeq__mul_size(d.rows, d.cols, &count)) {
        st = moeq__error(err, MOEQ_STATUS_SHAPE, "%s: [%zu, %zu] is too large", where, d.rows,
                         d.cols);
    }
    if (st == MOEQ_STATUS_OK) st = check_fp8_codes(&d);
    if (st != MOEQ_STATUS_OK) {
        dq_free(&d);
        return st;
    }
    d.qw.rows = d.rows;
    d.qw.cols = d.cols;
    d.qw.scale = d.scale;
    d.qw.zero_point = d.zp;
    d.qw.g_idx = d.g_idx;
    out->qw = d.qw;
    out->scale = d.scale;
    out->zp = d.zp;
    out->g_idx = d.g_idx;
    return MOEQ_STATUS_OK;
}

void moeq__ct_weight_free(moeq__ct_weight *w) {
    if (!w) return;
    moeq__free(w->scale);
    moeq__free(w->zp);
    moeq__free(w->g_idx);
    memset(w, 0, sizeof *w);
}

moeq_status moeq_dequantize(const moeq_quant_args *weights, int32_t format, uint32_t flags,
                            const char *module, const moeq_tensor *tensors, uint32_t n_tensors,
                            int32_t out_dtype, void *out, uint64_t out_bytes, int64_t out_shape[2],
                            moeq_error *err) {
    const char *where = module && module[0] ? module : "moeq_dequantize";
    if (!out_shape) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: out_shape is NULL", where);
    if (out_dtype != MOEQ_DTYPE_F32 && out_dtype != MOEQ_DTYPE_BF16 && out_dtype != MOEQ_DTYPE_F16) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: out_dtype %s, expected F32, BF16 or F16",
                           where, moeq_dtype_name(out_dtype));
    }
    moeq_status st = moeq__quant_args_check(weights, "weights", err);
    if (st != MOEQ_STATUS_OK) return moeq__error_prefix(err, st, "%s", where);
    moeq__ct_weight w;
    st = moeq__ct_weight_build(weights, format, flags, module, tensors, n_tensors, &w, err);
    if (st != MOEQ_STATUS_OK) return st;
    size_t need_bytes;
    if (!moeq__mul_size(w.qw.rows, w.qw.cols, &need_bytes) ||
        !moeq__mul_size(need_bytes, moeq_dtype_size(out_dtype), &need_bytes)) {
        st = moeq__error(err, MOEQ_STATUS_SHAPE, "%s: [%zu, %zu] is too large", where, w.qw.rows,
                         w.qw.cols);
    } else if (out && out_bytes < (uint64_t)need_bytes) {
        st = moeq__error(err, MOEQ_STATUS_SHAPE,
                         "%s: out_bytes %llu, expected at least %zu ([%zu, %zu] x %s)", where,
                         (unsigned long long)out_bytes, need_bytes, w.qw.rows, w.qw.cols,
                         moeq_dtype_name(out_dtype));
    }
    if (st == MOEQ_STATUS_OK && out) {
        dq d; /* only for the out-of-memory message */
        memset(&d, 0, sizeof d);
        d.mod = module ? module : "";
        d.err = err;
        st = run(&w.qw, out_dtype, out, &d);
    }
    if (st == MOEQ_STATUS_OK) {
        out_shape[0] = (int64_t)w.qw.rows;
        out_shape[1] = (int64_t)w.qw.cols;
    }
    moeq__ct_weight_free(&w);
    return st;
}

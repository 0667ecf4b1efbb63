/*
 * compress.c - the writer side: moeq_compress quantizes one module's float
 * weight into exactly the tensors compressed-tensors 0.18 stores for it;
 * moeq_compress_input computes the static activation tensors that calibration
 * leaves next to them.  The numbers come from the reference quantizers in
 * kernels/ref/quantize.c (verified bit for bit against CT); this file checks
 * the arguments, lays the results out as CT's compressors do (spec §3.3-3.7)
 * and names them.
 */
#include "checkpoint/tensor_set.h"
#include "kernels.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* One call of moeq_compress. */
typedef struct cw {
    const moeq_quant_args *a;
    int32_t format;
    const char *mod;
    moeq_error *err;
    size_t rows, cols;
    int32_t dtype; /* the weight's dtype: F32, BF16 or F16 */
    float *w;      /* owned: the weight rounded to dtype */
    moeq_tensor_set *set;
} cw;

static moeq_status nomem(const char *mod, moeq_error *err) {
    return moeq__error(err, MOEQ_STATUS_NOMEM, "%s: out of memory while compressing", mod);
}

static bool float_dtype(int32_t d) {
    return d == MOEQ_DTYPE_F32 || d == MOEQ_DTYPE_BF16 || d == MOEQ_DTYPE_F16;
}

/* "int4 group(128) asym static" for messages. */
static const char *args_text(const moeq_quant_args *a, char *buf, size_t n) {
    moeq_quant_args_summary(a, buf, n);
    return buf;
}

/* Checks what every entry point shares: a module name, a set, sizes and a dtype. */
static moeq_status check_call(const char *fn, const char *mod, moeq_tensor_set **set,
                              const void *data, const char *data_name, int64_t rows,
                              const char *rows_name, int64_t cols, int32_t dtype, moeq_error *err) {
    if (!mod || !mod[0]) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%s: module is %s; pass the module's name "
                           "(\"model.layers.0.mlp.experts.3.up_proj\")",
                           fn, mod ? "empty" : "NULL");
    }
    if (!set) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: set is NULL", mod);
    if (!data) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: %s is NULL", mod, data_name);
    if (rows < 1 || cols < 1) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%s: %s %lld and cols %lld; both must be >= 1", mod, rows_name,
                           (long long)rows, (long long)cols);
    }
    size_t n;
    if ((uint64_t)rows > SIZE_MAX || (uint64_t)cols > SIZE_MAX ||
        !moeq__mul_size((size_t)rows, (size_t)cols, &n) || !moeq__mul_size(n, sizeof(float), &n)) {
        return moeq__error(err, MOEQ_STATUS_SHAPE, "%s: [%lld, %lld] is too large", mod,
                           (long long)rows, (long long)cols);
    }
    if (!float_dtype(dtype)) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%s: dtype %s (%d); expected F32, BF16 or F16, the model's dtype", mod,
                           moeq_dtype_name(dtype), (int)dtype);
    }
    return MOEQ_STATUS_OK;
}

/* A copy of v [rows, cols] rounded to dtype; every element must stay finite. */
static moeq_status rounded_copy(const char *mod, const char *what, const float *v, size_t rows,
                                size_t cols, int32_t dtype, float **out, moeq_error *err) {
    const size_t n = rows * cols;
    float *r = moeq__malloc(n * sizeof *r);
    if (!r) return nomem(mod, err);
    for (size_t i = 0; i < n; i++) {
        r[i] = moeq__round_to_dtype(dtype, v[i]);
        if (isfinite(r[i])) continue;
        moeq_status st;
        if (!isfinite(v[i])) {
            st = moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                             "%s: %s[%zu, %zu] = %g; values must be finite", mod, what, i / cols,
                             i % cols, (double)v[i]);
        } else {
            st = moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                             "%s: %s[%zu, %zu] = %g overflows %s (its largest finite value is %g)",
                             mod, what, i / cols, i % cols, (double)v[i], moeq_dtype_name(dtype),
                             dtype == MOEQ_DTYPE_F16 ? 65504.0 : 3.3895313892515355e38);
        }
        moeq__free(r);
        return st;
    }
    *out = r;
    return MOEQ_STATUS_OK;
}

static moeq_status push(cw *c, const char *param, int32_t dtype, int32_t ndim, const int64_t *shape,
                        void **data) {
    return moeq__tensor_set_push(c->set, c->mod, param, dtype, ndim, shape, data, c->err);
}

/* ---- argument checks ------------------------------------------------------------ */

static moeq_status unsupported(const cw *c, const char *why) {
    char text[128];
    return moeq__error(c->err, MOEQ_STATUS_UNSUPPORTED, "%s: %s weights (%s) %s", c->mod,
                       moeq_format_name(c->format), args_text(c->a, text, sizeof text), why);
}

/* cols must split into whole groups (CT's _process_group raises otherwise). */
static moeq_status check_groups(const cw *c) {
    const moeq_quant_args *a = c->a;
    if (a->group_size <= 0) {
        return moeq__error(c->err, MOEQ_STATUS_INVALID_ARG,
                           "%s: strategy %s with group_size %d; expected a positive group_size",
                           c->mod, moeq_strategy_name(a->strategy), (int)a->group_size);
    }
    if (c->cols % (size_t)a->group_size != 0) {
        return moeq__error(c->err, MOEQ_STATUS_SHAPE,
                           "%s: cols %zu is not a multiple of group_size %d (compressed-tensors: "
                           "tensor column shape must be divisible by the given group_size)",
                           c->mod, c->cols, (int)a->group_size);
    }
    return MOEQ_STATUS_OK;
}

/* What every quantized format asks of the args: static weights on a weight grid. */
static moeq_status check_weight_args(const cw *c) {
    const moeq_quant_args *a = c->a;
    if (a->dynamic != MOEQ_DYNAMIC_FALSE)
        return unsupported(c, "are dynamic; stored weights are static");
    switch (a->strategy) {
        case MOEQ_STRATEGY_TENSOR:
        case MOEQ_STRATEGY_CHANNEL: return MOEQ_STATUS_OK;
        case MOEQ_STRATEGY_GROUP:
        case MOEQ_STRATEGY_TENSOR_GROUP: return check_groups(c);
        case MOEQ_STRATEGY_BLOCK:
            if (a->block_rows > 0 && a->block_cols > 0) return MOEQ_STATUS_OK;
            return moeq__error(
                c->err, MOEQ_STATUS_INVALID_ARG,
                "%s: block strategy with block_structure [%d, %d]; expected positive sizes", c->mod,
                (int)a->block_rows, (int)a->block_cols);
        default:
            return unsupported(c, "have no weight scale layout for this strategy (token and "
                                  "attn_head are for activations)");
    }
}

/* int and FP8 scales are stored in the weight's dtype: a different scale_dtype
 * makes CT compute in a mix of dtypes moeq does not reproduce. */
static moeq_status check_plain_scale_dtype(const cw *c) {
    const int32_t sd = c->a->scale_dtype;
    if (sd == MOEQ_DTYPE_INVALID || sd == c->dtype) return MOEQ_STATUS_OK;
    char why[160];
    snprintf(why, sizeof why,
             "have scale_dtype %s; moeq writes int and FP8 scales in the weight "
             "dtype (%s), so leave scale_dtype null",
             moeq_dtype_name(sd), moeq_dtype_name(c->dtype));
    return unsupported(c, why);
}

/* g_idx: only with actorder group, one group index per column, each group
 * holding exactly group_size columns (CT permutes the columns by argsort and
 * cuts contiguous groups of group_size, which is only "column c uses group
 * g_idx[c]" under that condition). */
static moeq_status check_g_idx(const cw *c, const int32_t *g_idx) {
    const moeq_quant_args *a = c->a;
    const bool group_order = a && moeq_actorder_is_group(a->actorder);
    if (!g_idx) return MOEQ_STATUS_OK;
    if (!group_order) {
        return moeq__error(c->err, MOEQ_STATUS_INVALID_ARG,
                           "%s: g_idx given but actorder is %s; compressed-tensors stores "
                           "weight_g_idx only with actorder group",
                           c->mod, a ? moeq_actorder_name(a->actorder) : "unset (no weight args)");
    }
    const size_t gs = (size_t)a->group_size, groups = c->cols / gs;
    uint32_t *count = moeq__calloc(groups, sizeof *count);
    if (!count) return nomem(c->mod, c->err);
    moeq_status st = MOEQ_STATUS_OK;
    for (size_t col = 0; col < c->cols && st == MOEQ_STATUS_OK; col++) {
        if (g_idx[col] < 0 || (size_t)g_idx[col] >= groups) {
            st = moeq__error(c->err, MOEQ_STATUS_INVALID_ARG,
                             "%s: g_idx[%zu] = %d; expected a group index in [0, %zu)", c->mod, col,
                             (int)g_idx[col], groups);
        } else {
            count[g_idx[col]]++;
        }
    }
    for (size_t g = 0; g < groups && st == MOEQ_STATUS_OK; g++) {
        if (count[g] != gs) {
            st = moeq__error(c->err, MOEQ_STATUS_INVALID_ARG,
                             "%s: g_idx gives group %zu %u columns; actorder needs exactly "
                             "group_size (%zu) columns in every group",
                             c->mod, g, (unsigned)count[g], gs);
        }
    }
    moeq__free(count);
    return st;
}

/* ---- the tensors -------------------------------------------------------------------- */

/* The scale grid of the args over [rows, cols] and the stored shape of a
 * tensor on it ([1] for tensor strategy). */
static moeq__grid grid_of(const cw *c, int32_t *ndim, int64_t shape[2]) {
    const moeq_quant_args *a = c->a;
    moeq__grid g = {1, 1, c->rows, c->cols};
    (void)moeq__scale_grid(a->strategy, c->rows, c->cols,
                           a->group_size > 0 ? (size_t)a->group_size : 0,
                           (size_t)(a->block_rows > 0 ? a->block_rows : 0),
                           (size_t)(a->block_cols > 0 ? a->block_cols : 0), &g);
    if (a->strategy == MOEQ_STRATEGY_TENSOR) {
        *ndim = 1;
        shape[0] = 1;
    } else {
        *ndim = 2;
        shape[0] = (int64_t)g.rows;
        shape[1] = (int64_t)g.cols;
    }
    return g;
}

static moeq__wquant wquant_of(const cw *c) {
    const moeq_quant_args *a = c->a;
    const moeq__wquant wq = {a->type,
                             a->num_bits,
                             a->symmetric,
                             a->strategy,
                             a->group_size > 0 ? a->group_size : 0,
                             a->block_rows > 0 ? a->block_rows : 0,
                             a->block_cols > 0 ? a->block_cols : 0,
                             c->dtype};
    return wq;
}

static moeq_status write_dense(cw *c) {
    const int64_t shape[2] = {(int64_t)c->rows, (int64_t)c->cols};
    void *data;
    const moeq_status st = push(c, "weight", c->dtype, 2, shape, &data);
    if (st == MOEQ_STATUS_OK) moeq__from_f32_ref(c->dtype, c->w, c->rows * c->cols, data);
    return st;
}

/* weight_scale in the weight's dtype. */
static moeq_status write_float_scale(cw *c, const float *scale, size_t n, int32_t ndim,
                                     const int64_t *shape) {
    void *data;
    const moeq_status st = push(c, "weight_scale", c->dtype, ndim, shape, &data);
    if (st == MOEQ_STATUS_OK) moeq__from_f32_ref(c->dtype, scale, n, data);
    return st;
}

/* weight_g_idx [cols]: the caller's, or CT's initial -1s. */
static moeq_status write_g_idx(cw *c, const int32_t *g_idx) {
    const int64_t shape[1] = {(int64_t)c->cols};
    void *data;
    const moeq_status st = push(c, "weight_g_idx", MOEQ_DTYPE_I32, 1, shape, &data);
    if (st != MOEQ_STATUS_OK) return st;
    int32_t *out = data;
    for (size_t i = 0; i < c->cols; i++) out[i] = g_idx ? g_idx[i] : -1;
    return MOEQ_STATUS_OK;
}

/* Integer weights: pack-quantized (packed) or naive/int-quantized (I8). */
static moeq_status write_int(cw *c, bool packed, const int32_t *g_idx) {
    const moeq_quant_args *a = c->a;
    const int bits = (int)a->num_bits;
    int32_t sdim;
    int64_t sshape[2];
    const moeq__grid g = grid_of(c, &sdim, sshape);
    const size_t ncell = g.rows * g.cols, n = c->rows * c->cols;
    float *scale = moeq__malloc(ncell * sizeof *scale);
    int8_t *zp = moeq__malloc(ncell);
    int8_t *q = moeq__malloc(n);
    moeq_status st = MOEQ_STATUS_OK;
    if (!scale || !zp || !q) st = nomem(c->mod, c->err);
    if (st == MOEQ_STATUS_OK) {
        const moeq__wquant wq = wquant_of(c);
        moeq__quantize_int_ref(&wq, c->w, c->rows, c->cols, g_idx, scale, a->symmetric ? NULL : zp,
                               q);
    }
    void *data;
    if (st == MOEQ_STATUS_OK && packed) {
        const size_t words = moeq__int_packed_words(c->cols, bits, false);
        const int64_t shape[2] = {(int64_t)c->rows, (int64_t)words};
        st = push(c, "weight_packed", MOEQ_DTYPE_I32, 2, shape, &data);
        for (size_t r = 0; st == MOEQ_STATUS_OK && r < c->rows; r++) {
            moeq__int_pack_row_ref(q + r * c->cols, c->cols, bits, false,
                                   (uint32_t *)data + r * words);
        }
    } else if (st == MOEQ_STATUS_OK) {
        const int64_t shape[2] = {(int64_t)c->rows, (int64_t)c->cols};
        st = push(c, "weight", MOEQ_DTYPE_I8, 2, shape, &data);
        if (st == MOEQ_STATUS_OK) memcpy(data, q, n);
    }
    if (st == MOEQ_STATUS_OK) st = write_float_scale(c, scale, ncell, sdim, sshape);
    if (st == MOEQ_STATUS_OK && !a->symmetric) {
        /* 0.9.4+: group and channel zero points are packed along dim 0 */
        if (packed &&
            (a->strategy == MOEQ_STRATEGY_GROUP || a->strategy == MOEQ_STRATEGY_CHANNEL)) {
            const int64_t shape[2] = {(int64_t)moeq__int_packed_words(g.rows, bits, false),
                                      (int64_t)g.cols};
            st = push(c, "weight_zero_point", MOEQ_DTYPE_I32, 2, shape, &data);
            if (st == MOEQ_STATUS_OK)
                moeq__int_pack_cols_ref(zp, g.rows, g.cols, bits, false, data);
        } else {
            st = push(c, "weight_zero_point", MOEQ_DTYPE_I8, sdim, sshape, &data);
            if (st == MOEQ_STATUS_OK) memcpy(data, zp, ncell);
        }
    }
    if (st == MOEQ_STATUS_OK && moeq_actorder_is_group(a->actorder)) st = write_g_idx(c, g_idx);
    if (st == MOEQ_STATUS_OK && packed) {
        const int64_t one[1] = {2};
        st = push(c, "weight_shape", MOEQ_DTYPE_I64, 1, one, &data);
        if (st == MOEQ_STATUS_OK) {
            const int64_t logical[2] = {(int64_t)c->rows, (int64_t)c->cols};
            memcpy(data, logical, sizeof logical);
        }
    }
    moeq__free(scale);
    moeq__free(zp);
    moeq__free(q);
    return st;
}

/* FP8 E4M3 weights (naive, int- or float-quantized), scales in the weight dtype. */
static moeq_status write_fp8(cw *c) {
    int32_t sdim;
    int64_t sshape[2];
    const moeq__grid g = grid_of(c, &sdim, sshape);
    const size_t ncell = g.rows * g.cols;
    float *scale = moeq__malloc(ncell * sizeof *scale);
    if (!scale) return nomem(c->mod, c->err);
    const int64_t shape[2] = {(int64_t)c->rows, (int64_t)c->cols};
    void *data;
    moeq_status st = push(c, "weight", MOEQ_DTYPE_F8_E4M3, 2, shape, &data);
    if (st == MOEQ_STATUS_OK) {
        const moeq__wquant wq = wquant_of(c);
        moeq__quantize_fp8_ref(&wq, c->w, c->rows, c->cols, scale, data);
        st = write_float_scale(c, scale, ncell, sdim, sshape);
    }
    moeq__free(scale);
    return st;
}

static float amax_of(const float *v, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(v[i]));
    return m;
}

static moeq_status write_nvfp4(cw *c, float global) {
    const size_t gs = (size_t)c->a->group_size;
    if (global == 0.0f)
        global = moeq__nvfp4_global_scale_ref(amax_of(c->w, c->rows * c->cols), c->dtype);
    const int64_t pshape[2] = {(int64_t)c->rows, (int64_t)(c->cols / 2)};
    const int64_t sshape[2] = {(int64_t)c->rows, (int64_t)(c->cols / gs)};
    const int64_t one[1] = {1};
    void *packed, *scale, *gdata;
    moeq_status st = push(c, "weight_packed", MOEQ_DTYPE_U8, 2, pshape, &packed);
    if (st == MOEQ_STATUS_OK) st = push(c, "weight_scale", MOEQ_DTYPE_F8_E4M3, 2, sshape, &scale);
    if (st == MOEQ_STATUS_OK) st = push(c, "weight_global_scale", MOEQ_DTYPE_F32, 1, one, &gdata);
    if (st != MOEQ_STATUS_OK) return st;
    const moeq__wquant wq = wquant_of(c);
    moeq__quantize_nvfp4_ref(&wq, c->w, c->rows, c->cols, global, scale, packed);
    memcpy(gdata, &global, sizeof global);
    return MOEQ_STATUS_OK;
}

static moeq_status write_mx(cw *c, int elem_bits) {
    const size_t gs = (size_t)c->a->group_size;
    const size_t wcols = elem_bits == 4 ? c->cols / 2 : elem_bits == 6 ? c->cols / 4 * 3 : c->cols;
    const int64_t wshape[2] = {(int64_t)c->rows, (int64_t)wcols};
    const int64_t sshape[2] = {(int64_t)c->rows, (int64_t)(c->cols / gs)};
    void *codes, *scale;
    moeq_status st = elem_bits != 8 ? push(c, "weight_packed", MOEQ_DTYPE_U8, 2, wshape, &codes)
                                    : push(c, "weight", MOEQ_DTYPE_F8_E4M3, 2, wshape, &codes);
    if (st == MOEQ_STATUS_OK) st = push(c, "weight_scale", MOEQ_DTYPE_U8, 2, sshape, &scale);
    if (st != MOEQ_STATUS_OK) return st;
    const moeq__wquant wq = wquant_of(c);
    if (elem_bits == 4) {
        moeq__quantize_mxfp4_ref(&wq, c->w, c->rows, c->cols, scale, codes);
    } else if (elem_bits == 6) {
        memset(codes, 0, c->rows * wcols);
        moeq__quantize_mxfp6_ref(&wq, c->w, c->rows, c->cols, scale, codes);
    } else {
        moeq__quantize_mxfp8_ref(&wq, c->w, c->rows, c->cols, scale, codes);
    }
    return MOEQ_STATUS_OK;
}

/* ---- formats ------------------------------------------------------------------------ */

static moeq_status compress_int_like(cw *c, bool packed, const int32_t *g_idx) {
    const moeq_quant_args *a = c->a;
    moeq_status st = check_weight_args(c);
    if (st != MOEQ_STATUS_OK) return st;
    if (a->type == MOEQ_QTYPE_INT) {
        if (a->num_bits < 1 || a->num_bits > 8) {
            return unsupported(c, packed ? "must be int with 1..8 bits"
                                         : "must be int with 1..8 bits (moeq writes I8 weights) "
                                           "or float with 8 bits");
        }
        if (a->strategy == MOEQ_STRATEGY_TENSOR_GROUP) {
            return unsupported(c, "use tensor_group, which is for NVFP4 (float 4-bit) weights");
        }
        if (moeq_actorder_is_group(a->actorder) && a->strategy != MOEQ_STRATEGY_GROUP) {
            return unsupported(c, "use actorder group without the group strategy");
        }
        st = check_plain_scale_dtype(c);
        if (st == MOEQ_STATUS_OK) st = check_g_idx(c, g_idx);
        if (st == MOEQ_STATUS_OK) st = write_int(c, packed, g_idx);
        return st;
    }
    if (packed) return unsupported(c, "must be int (pack-quantized packs integers)");
    if (a->num_bits != 8) return unsupported(c, "must be float with 8 bits (FP8 E4M3) or int");
    if (!a->symmetric) return unsupported(c, "are asymmetric FP8");
    if (a->strategy == MOEQ_STRATEGY_TENSOR_GROUP)
        return unsupported(c, "use tensor_group with FP8");
    if (moeq_actorder_is_group(a->actorder)) return unsupported(c, "use actorder group with FP8");
    st = check_plain_scale_dtype(c);
    if (st == MOEQ_STATUS_OK) st = check_g_idx(c, g_idx);
    if (st == MOEQ_STATUS_OK) st = write_fp8(c);
    return st;
}

static moeq_status compress_nvfp4(cw *c, float global) {
    const moeq_quant_args *a = c->a;
    if (a->type != MOEQ_QTYPE_FLOAT || a->num_bits != 4)
        return unsupported(c, "must be float with 4 bits");
    if (a->strategy != MOEQ_STRATEGY_TENSOR_GROUP)
        return unsupported(c, "need strategy tensor_group");
    if (!a->symmetric)
        return unsupported(c, "are asymmetric (compressed-tensors: not supported for FP4)");
    if (moeq_actorder_is_group(a->actorder)) {
        return unsupported(c, "use actorder group (CT 0.18's NVFP4 compressor stores g_idx but "
                              "quantizes in column order)");
    }
    if (a->scale_dtype != MOEQ_DTYPE_F8_E4M3) {
        return unsupported(c,
                           "need scale_dtype torch.float8_e4m3fn (without it CT's calibration "
                           "does not round the local scales that its compressor stores as E4M3)");
    }
    moeq_status st = check_weight_args(c);
    if (st != MOEQ_STATUS_OK) return st;
    if (c->cols % 2 != 0) {
        return moeq__error(c->err, MOEQ_STATUS_SHAPE,
                           "%s: cols %zu is odd; FP4 packs two columns per byte", c->mod, c->cols);
    }
    if (!(isfinite(global) && global >= 0.0f)) {
        return moeq__error(
            c->err, MOEQ_STATUS_INVALID_ARG,
            "%s: global_scale %g; expected 0 (compute it) or a positive finite value", c->mod,
            (double)global);
    }
    return write_nvfp4(c, global);
}

static moeq_status compress_mx(cw *c, int elem_bits) {
    const moeq_quant_args *a = c->a;
    if (a->type != MOEQ_QTYPE_FLOAT || a->num_bits != elem_bits) {
        return unsupported(c, elem_bits == 4   ? "must be float with 4 bits"
                              : elem_bits == 6 ? "must be float with 6 bits"
                                               : "must be float with 8 bits");
    }
    if (a->strategy != MOEQ_STRATEGY_GROUP || a->group_size != 32) {
        return unsupported(c, "need strategy group with group_size 32 (MX blocks)");
    }
    if (!a->symmetric) return unsupported(c, "are asymmetric (MX formats are symmetric)");
    if (moeq_actorder_is_group(a->actorder)) return unsupported(c, "use actorder group");
    if (a->scale_dtype != MOEQ_DTYPE_U8) {
        return unsupported(c, "need scale_dtype torch.uint8 (E8M0); without it CT calibrates "
                              "scales that are not powers of two");
    }
    moeq_status st = check_weight_args(c);
    if (st == MOEQ_STATUS_OK && elem_bits == 4 && c->cols % 2 != 0) {
        st = moeq__error(c->err, MOEQ_STATUS_SHAPE,
                         "%s: cols %zu is odd; FP4 packs two columns per byte", c->mod, c->cols);
    }
    if (st == MOEQ_STATUS_OK && elem_bits == 6 && c->cols % 4 != 0) {
        st = moeq__error(c->err, MOEQ_STATUS_SHAPE,
                         "%s: cols %zu is not a multiple of 4; FP6 packs four columns in three "
                         "bytes (CT: 'tensor must have a multiple of 4 columns for fp6 packing')",
                         c->mod, c->cols);
    }
    if (st == MOEQ_STATUS_OK && elem_bits == 6 && c->cols % 4 != 0) {
        st = moeq__error(c->err, MOEQ_STATUS_SHAPE,
                         "%s: cols %zu is not a multiple of 4; FP6 packs four columns in three "
                         "bytes (CT: 'tensor must have a multiple of 4 columns for fp6 packing')",
                         c->mod, c->cols);
    }
    if (st == MOEQ_STATUS_OK) st = write_mx(c, elem_bits);
    return st;
}

static moeq_status dispatch(cw *c, const int32_t *g_idx, float global) {
    const int32_t f = c->format;
    if (global != 0.0f && f != MOEQ_FORMAT_NVFP4_PACK_QUANTIZED) {
        return moeq__error(c->err, MOEQ_STATUS_INVALID_ARG,
                           "%s: global_scale %g given for format %s; only nvfp4-pack-quantized "
                           "weights have a global scale (pass 0)",
                           c->mod, (double)global, moeq_format_name(f));
    }
    if (f == MOEQ_FORMAT_DENSE || f == MOEQ_FORMAT_FAKEQUANT) {
        if (g_idx) {
            return moeq__error(c->err, MOEQ_STATUS_INVALID_ARG,
                               "%s: g_idx given for format %s, which stores the weight as is",
                               c->mod, moeq_format_name(f));
        }
        return write_dense(c);
    }
    switch (f) {
        case MOEQ_FORMAT_NONE:
            return moeq__error(
                c->err, MOEQ_STATUS_INVALID_ARG,
                "%s: no compression format given; pass the format moeq_resolve returns", c->mod);
        case MOEQ_FORMAT_MIXED_PRECISION:
            return moeq__error(c->err, MOEQ_STATUS_INVALID_ARG,
                               "%s: mixed-precision is a top-level format; pass the module's own "
                               "(the group's format, as moeq_resolve returns it)",
                               c->mod);
        case MOEQ_FORMAT_PACK_QUANTIZED:
        case MOEQ_FORMAT_NAIVE_QUANTIZED:
        case MOEQ_FORMAT_INT_QUANTIZED:
        case MOEQ_FORMAT_FLOAT_QUANTIZED:
        case MOEQ_FORMAT_NVFP4_PACK_QUANTIZED:
        case MOEQ_FORMAT_MXFP4_PACK_QUANTIZED:
        case MOEQ_FORMAT_MXFP6_PACK_QUANTIZED:
        case MOEQ_FORMAT_MXFP8_QUANTIZED: break;
        default:
            return moeq__error(c->err, MOEQ_STATUS_UNSUPPORTED,
                               "%s: moeq does not write format '%s' (%d); it writes dense, "
                               "pack-quantized, naive/int/float-quantized, nvfp4-pack-quantized, "
                               "mxfp4-pack-quantized, mxfp6-pack-quantized and mxfp8-quantized",
                               c->mod, moeq_format_name(f), (int)f);
    }
    if (!c->a) {
        return moeq__error(c->err, MOEQ_STATUS_INVALID_ARG,
                           "%s: format %s needs the weight quantization args, got NULL", c->mod,
                           moeq_format_name(f));
    }
    switch (f) {
        case MOEQ_FORMAT_PACK_QUANTIZED: return compress_int_like(c, true, g_idx);
        case MOEQ_FORMAT_NVFP4_PACK_QUANTIZED: return compress_nvfp4(c, global);
        case MOEQ_FORMAT_MXFP4_PACK_QUANTIZED: return compress_mx(c, 4);
        case MOEQ_FORMAT_MXFP6_PACK_QUANTIZED: return compress_mx(c, 6);
        case MOEQ_FORMAT_MXFP8_QUANTIZED: return compress_mx(c, 8);
        default: return compress_int_like(c, false, g_idx);
    }
}

moeq_status moeq_compress(const moeq_quant_args *weights, int32_t format, const char *module,
                          const float *weight, int64_t rows, int64_t cols, int32_t weight_dtype,
                          const int32_t *g_idx, float global_scale, moeq_tensor_set **set,
                          moeq_error *err) {
    moeq_status st = check_call("moeq_compress", module, set, weight, "weight", rows, "rows", cols,
                                weight_dtype, err);
    if (st != MOEQ_STATUS_OK) return st;
    cw c = {weights, format, module, err, (size_t)rows, (size_t)cols, weight_dtype, NULL, *set};
    if (!c.set) {
        st = moeq_tensor_set_create(&c.set, err);
        if (st != MOEQ_STATUS_OK) return st;
    }
    const uint32_t n0 = moeq_tensor_set_count(c.set);
    st = rounded_copy(module, "weight", weight, c.rows, c.cols, weight_dtype, &c.w, err);
    if (st == MOEQ_STATUS_OK) st = dispatch(&c, g_idx, global_scale);
    moeq__free(c.w);
    if (st != MOEQ_STATUS_OK) {
        if (c.set != *set) {
            moeq_tensor_set_destroy(c.set);
        } else {
            moeq__tensor_set_truncate(c.set, n0);
        }
        return st;
    }
    *set = c.set;
    return MOEQ_STATUS_OK;
}

/* ---- static activation tensors ------------------------------------------------------ */

/* input_scale (+ input_zero_point): one tensor-strategy cell over the whole
 * batch, which is what the weight quantizers compute for a tensor-strategy
 * "weight" (calculate_qparams on the observed min/max, in x's dtype). */
static moeq_status input_scale(const moeq_quant_args *in, const char *mod, const float *x,
                               size_t tokens, size_t cols, int32_t dtype, moeq_tensor_set *set,
                               moeq_error *err) {
    const moeq__wquant wq = {in->type, in->num_bits, in->symmetric, MOEQ_STRATEGY_TENSOR, 0, 0,
                             0,        dtype};
    float scale;
    int8_t zp = 0;
    uint8_t *q = moeq__malloc(tokens * cols);
    if (!q) return nomem(mod, err);
    if (in->type == MOEQ_QTYPE_INT) {
        moeq__quantize_int_ref(&wq, x, tokens, cols, NULL, &scale, in->symmetric ? NULL : &zp,
                               (int8_t *)q);
    } else {
        moeq__quantize_fp8_ref(&wq, x, tokens, cols, &scale, q);
    }
    moeq__free(q);
    const int64_t one[1] = {1};
    void *data;
    moeq_status st = moeq__tensor_set_push(set, mod, "input_scale", dtype, 1, one, &data, err);
    if (st == MOEQ_STATUS_OK) moeq__from_f32_ref(dtype, &scale, 1, data);
    if (st == MOEQ_STATUS_OK && !in->symmetric) {
        st = moeq__tensor_set_push(set, mod, "input_zero_point", MOEQ_DTYPE_I8, 1, one, &data, err);
        if (st == MOEQ_STATUS_OK) memcpy(data, &zp, 1);
    }
    return st;
}

static moeq_status input_unsupported(const moeq_quant_args *in, const char *mod, const char *why,
                                     moeq_error *err) {
    char text[128];
    return moeq__error(err, MOEQ_STATUS_UNSUPPORTED, "%s: input activations (%s) %s", mod,
                       args_text(in, text, sizeof text), why);
}

/* What static input args moeq calibrates. */
static moeq_status check_input_args(const moeq_quant_args *in, const char *mod, moeq_error *err) {
    if (in->dynamic == MOEQ_DYNAMIC_LOCAL) {
        if (in->strategy != MOEQ_STRATEGY_TENSOR_GROUP || in->type != MOEQ_QTYPE_FLOAT ||
            in->num_bits != 4) {
            return input_unsupported(in, mod,
                                     "are dynamic \"local\"; moeq calibrates that only for "
                                     "NVFP4 (float 4-bit, tensor_group)",
                                     err);
        }
        return MOEQ_STATUS_OK;
    }
    if (in->strategy != MOEQ_STRATEGY_TENSOR) {
        return input_unsupported(in, mod,
                                 "are static with a strategy other than tensor; moeq "
                                 "calibrates static per-tensor input scales only",
                                 err);
    }
    if (in->type == MOEQ_QTYPE_INT && (in->num_bits < 1 || in->num_bits > 8)) {
        return input_unsupported(in, mod, "must be int with 1..8 bits or float with 8 bits", err);
    }
    if (in->type == MOEQ_QTYPE_FLOAT && (in->num_bits != 8 || !in->symmetric)) {
        return input_unsupported(in, mod, "must be symmetric float with 8 bits or int", err);
    }
    if (!in->symmetric && in->zp_dtype != MOEQ_DTYPE_INVALID && in->zp_dtype != MOEQ_DTYPE_I8) {
        return input_unsupported(in, mod, "have a zp_dtype other than int8", err);
    }
    return MOEQ_STATUS_OK;
}

moeq_status moeq_compress_input(const moeq_quant_args *input, const char *module, const float *x,
                                int64_t tokens, int64_t cols, int32_t x_dtype,
                                moeq_tensor_set **set, moeq_error *err) {
    if (!module || !module[0] || !set) {
        return check_call("moeq_compress_input", module, set, x, "x", tokens, "tokens", cols,
                          x_dtype, err);
    }
    if (!input || input->dynamic == MOEQ_DYNAMIC_TRUE) return MOEQ_STATUS_OK; /* nothing stored */
    moeq_status st = check_call("moeq_compress_input", module, set, x, "x", tokens, "tokens", cols,
                                x_dtype, err);
    if (st == MOEQ_STATUS_OK) st = check_input_args(input, module, err);
    if (st != MOEQ_STATUS_OK) return st;
    float *r = NULL;
    st = rounded_copy(module, "x", x, (size_t)tokens, (size_t)cols, x_dtype, &r, err);
    if (st != MOEQ_STATUS_OK) return st;
    moeq_tensor_set *s = *set;
    if (!s) st = moeq_tensor_set_create(&s, err);
    const uint32_t n0 = moeq_tensor_set_count(s);
    if (st == MOEQ_STATUS_OK && input->dynamic == MOEQ_DYNAMIC_LOCAL) {
        const float global =
            moeq__nvfp4_global_scale_ref(amax_of(r, (size_t)tokens * (size_t)cols), x_dtype);
        const int64_t one[1] = {1};
        void *data;
        st = moeq__tensor_set_push(s, module, "input_global_scale", MOEQ_DTYPE_F32, 1, one, &data,
                                   err);
        if (st == MOEQ_STATUS_OK) memcpy(data, &global, sizeof global);
    } else if (st == MOEQ_STATUS_OK) {
        st = input_scale(input, module, r, (size_t)tokens, (size_t)cols, x_dtype, s, err);
    }
    moeq__free(r);
    if (st != MOEQ_STATUS_OK) {
        if (s != *set) {
            moeq_tensor_set_destroy(s);
        } else {
            moeq__tensor_set_truncate(s, n0);
        }
        return st;
    }
    *set = s;
    return MOEQ_STATUS_OK;
}

float moeq_nvfp4_global_scale(float amax, int32_t dtype) {
    if (!float_dtype(dtype)) return 0.0f;
    return moeq__nvfp4_global_scale_ref(amax, dtype);
}

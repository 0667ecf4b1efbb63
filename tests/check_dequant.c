/*
 * check_dequant.c - moeq_dequantize over the worked vectors (E1 sym, asym,
 * actorder; E2; E3; MXFP4) and a table of bad inputs, each with the exact
 * status and a substring of the message.
 */
#include "test_util.h"
#include "common/internal.h"
#include "kernels.h"
#include "checkpoint/dequant.h"

#include <math.h>

#define MODULE "model.layers.0.mlp.experts.3.up_proj"

/* ---- fixture: a module's tensors, built from a base case and mutated ------- */

#define MAX_T 8
#define MAX_DATA 512

typedef struct fixture {
    moeq_quant_args args;
    const moeq_quant_args *argsp;
    int32_t format;
    uint32_t flags;
    const char *module;
    moeq_tensor t[MAX_T];
    uint32_t n;
    const moeq_tensor *tp;
    _Alignas(8) uint8_t data[MAX_T][MAX_DATA + 1];
    char names[MAX_T][160];
    int32_t out_dtype;
    _Alignas(8) uint8_t out[4096];
    void *outp;
    uint64_t out_bytes;
    int64_t shape[2];
    int64_t *shapep;
} fixture;

static fixture F;

static moeq_tensor *add(fixture *f, const char *param, int32_t dtype, int32_t ndim,
                        const int64_t *shape, const void *data) {
    ck_assert_uint_lt(f->n, MAX_T);
    const uint32_t i = f->n++;
    moeq_tensor *t = &f->t[i];
    memset(t, 0, sizeof *t);
    snprintf(f->names[i], sizeof f->names[i], "%s.%s", MODULE, param);
    t->name = f->names[i];
    t->dtype = dtype;
    t->ndim = ndim;
    size_t n = moeq_dtype_size(dtype);
    for (int32_t d = 0; d < ndim; d++) {
        t->shape[d] = shape[d];
        n *= (size_t)shape[d];
    }
    ck_assert_uint_le(n, MAX_DATA);
    /* +1: data deliberately misaligned, as in an mmapped file */
    memcpy(f->data[i] + 1, data, n);
    t->data = f->data[i] + 1;
    t->nbytes = n;
    return t;
}

static moeq_tensor *find(fixture *f, const char *param) {
    for (uint32_t i = 0; i < f->n; i++) {
        const size_t ln = strlen(f->t[i].name), lp = strlen(param);
        if (ln >= lp && strcmp(f->t[i].name + ln - lp, param) == 0 &&
            (ln == lp || f->t[i].name[ln - lp - 1] == '.')) {
            return &f->t[i];
        }
    }
    ck_abort_msg("no tensor %s", param);
    return NULL;
}

static void drop(fixture *f, const char *param) {
    moeq_tensor *t = find(f, param);
    const uint32_t i = (uint32_t)(t - f->t);
    f->t[i] = f->t[f->n - 1];
    f->n--;
}

static void reset(fixture *f, int32_t format, moeq_quant_args args) {
    memset(f, 0, sizeof *f);
    f->args = args;
    f->argsp = &f->args;
    f->format = format;
    f->module = MODULE;
    f->tp = f->t;
    f->out_dtype = MOEQ_DTYPE_F32;
    f->outp = f->out;
    f->out_bytes = sizeof f->out;
    f->shapep = f->shape;
}

static moeq_status call(fixture *f, moeq_error *err) {
    moeq_error_clear(err);
    return moeq_dequantize(f->argsp, f->format, f->flags, f->module, f->tp, f->n, f->out_dtype,
                           f->outp, f->out_bytes, f->shapep, err);
}

static moeq_quant_args int_args(int bits, int sym, int32_t strategy, int gs) {
    moeq_quant_args a;
    memset(&a, 0, sizeof a);
    a.num_bits = bits;
    a.type = MOEQ_QTYPE_INT;
    a.symmetric = sym;
    a.strategy = strategy;
    a.group_size = gs;
    a.scale_dtype = MOEQ_DTYPE_INVALID;
    a.zp_dtype = sym ? MOEQ_DTYPE_INVALID : MOEQ_DTYPE_I8;
    return a;
}

static moeq_quant_args float_args(int bits, int32_t strategy, int gs) {
    moeq_quant_args a = int_args(bits, 1, strategy, gs);
    a.type = MOEQ_QTYPE_FLOAT;
    return a;
}

static void bf16_array(const float *v, size_t n, uint16_t *out) {
    for (size_t i = 0; i < n; i++) out[i] = moeq__f32_to_bf16(v[i]);
}

static float out_f32(const fixture *f, size_t i) {
    float v;
    memcpy(&v, f->out + 4 * i, sizeof v);
    return v;
}

static uint16_t out_u16(const fixture *f, size_t i) {
    uint16_t v;
    memcpy(&v, f->out + 2 * i, sizeof v);
    return v;
}

#define ck_assert_f32_bits(got, want)                                                   \
    do {                                                                                  \
        const float g_ = (got), w_ = (want);                                              \
        ck_assert_msg(memcmp(&g_, &w_, 4) == 0, "%s = %.9g, want %.9g", #got, (double)g_, \
                      (double)w_);                                                        \
    } while (0)

/* ---- base cases ------------------------------------------------------------------ */

/* E1: pack-quantized W4 group 8, out=2, in=16. */
static const uint32_t e1_packed[4] = {0x2D5B780Fu, 0x4567CBA9u, 0x76543210u, 0xFEDCBA98u};
static const float e1_scale[4] = {0.25f, 0.125f, 0.5f, 0.0625f};
static const float e1_sym[32] = {1.75f, -2, 0, -0.25f, 0.75f, -0.75f, 1.25f, -1.5f,
                                 0.125f, 0.25f, 0.375f, 0.5f, -0.125f, -0.25f, -0.375f, -0.5f,
                                 -4, -3.5f, -3, -2.5f, -2, -1.5f, -1, -0.5f,
                                 0, 0.0625f, 0.125f, 0.1875f, 0.25f, 0.3125f, 0.375f, 0.4375f};
static const float e1_asym[32] = {2.75f, -1, 1, 0.75f, 1.75f, 0.25f, 2.25f, -0.5f,
                                  0, 0.125f, 0.25f, 0.375f, -0.25f, -0.375f, -0.5f, -0.625f,
                                  -4, -3.5f, -3, -2.5f, -2, -1.5f, -1, -0.5f,
                                  0.5f, 0.5625f, 0.625f, 0.6875f, 0.75f, 0.8125f, 0.875f, 0.9375f};
static const float e1_act_row0[16] = {0.875f, -2, 0, -0.25f, 0.375f, -0.75f, 0.625f, -1.5f,
                                      0.25f, 0.25f, 0.75f, 0.5f, -0.25f, -0.25f, -0.75f, -0.5f};
static const int32_t e1_g_idx[16] = {1, 0, 1, 0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1, 0, 1};

static void base_pack(fixture *f, int sym) {
    reset(f, MOEQ_FORMAT_PACK_QUANTIZED, int_args(4, sym, MOEQ_STRATEGY_GROUP, 8));
    const int64_t s22[2] = {2, 2}, s2[1] = {2}, s12[2] = {1, 2};
    const int64_t shape_vals[2] = {2, 16};
    uint16_t sc[4];
    bf16_array(e1_scale, 4, sc);
    add(f, "weight_packed", MOEQ_DTYPE_I32, 2, s22, e1_packed);
    add(f, "weight_shape", MOEQ_DTYPE_I64, 1, s2, shape_vals);
    add(f, "weight_scale", MOEQ_DTYPE_BF16, 2, s22, sc);
    if (!sym) {
        const uint32_t zp[2] = {0x84u, 0x09u};
        add(f, "weight_zero_point", MOEQ_DTYPE_I32, 2, s12, zp);
    }
}

/* E2: float-quantized FP8 block [2, 4], weight 3 x 5. */
static const uint8_t e2_bytes[15] = {0x38, 0x40, 0xB8, 0x30, 0x7E, 0x00, 0x48, 0xC0,
                                     0x34, 0x3C, 0x38, 0x38, 0x38, 0x38, 0xF6};
static const float e2_want[15] = {0.5f, 1, -0.5f, 0.25f, 896, 0, 2, -1, 0.375f, 3,
                                  0.25f, 0.25f, 0.25f, 0.25f, -224};

static void base_fp8_block(fixture *f) {
    moeq_quant_args a = float_args(8, MOEQ_STRATEGY_BLOCK, 0);
    a.block_rows = 2;
    a.block_cols = 4;
    reset(f, MOEQ_FORMAT_FLOAT_QUANTIZED, a);
    const int64_t s35[2] = {3, 5}, s22[2] = {2, 2};
    const float sc[4] = {0.5f, 2, 0.25f, 1};
    add(f, "weight", MOEQ_DTYPE_F8_E4M3, 2, s35, e2_bytes);
    add(f, "weight_scale", MOEQ_DTYPE_F32, 2, s22, sc);
}

/* E3: NVFP4, 1 x 32. */
static const uint8_t e3_packed[16] = {0xA0, 0x40, 0x0C, 0x82, 0x96, 0x63, 0x1F, 0x38,
                                      0xA1, 0xB2, 0xC4, 0xD5, 0xE5, 0xE6, 0xF7, 0xF7};
static const float e3_q[32] = {0, -1, 0, 2, -2, 0, 1, -0.0f, 4, -0.5f, 1.5f, 4, -6, 0.5f, -0.0f, 1.5f,
                               0.5f, -1, 1, -1.5f, 2, -2, 3, -3, 3, -4, 4, -4, 6, -6, 6, -6};
static const float e3_global = 926.89654541015625f;

static void base_nvfp4(fixture *f) {
    moeq_quant_args a = float_args(4, MOEQ_STRATEGY_TENSOR_GROUP, 16);
    a.scale_dtype = MOEQ_DTYPE_F8_E4M3;
    reset(f, MOEQ_FORMAT_NVFP4_PACK_QUANTIZED, a);
    const int64_t s116[2] = {1, 16}, s12[2] = {1, 2}, s1[1] = {1};
    const uint8_t sc[2] = {0x7E, 0x5C};
    add(f, "weight_packed", MOEQ_DTYPE_U8, 2, s116, e3_packed);
    add(f, "weight_scale", MOEQ_DTYPE_F8_E4M3, 2, s12, sc);
    add(f, "weight_global_scale", MOEQ_DTYPE_F32, 1, s1, &e3_global);
}

/* MXFP4 test vector: FP4 [0.5, 1, 1.5, 2], groups of 2, scales [0.25, 0.5]. */
static void base_mxfp4(fixture *f) {
    moeq_quant_args a = float_args(4, MOEQ_STRATEGY_GROUP, 2);
    a.scale_dtype = MOEQ_DTYPE_U8;
    reset(f, MOEQ_FORMAT_MXFP4_PACK_QUANTIZED, a);
    const int64_t s12[2] = {1, 2};
    const uint8_t packed[2] = {0x21, 0x43}; /* codes 1, 2, 3, 4 */
    const uint8_t sc[2] = {125, 126};
    add(f, "weight_packed", MOEQ_DTYPE_U8, 2, s12, packed);
    add(f, "weight_scale", MOEQ_DTYPE_U8, 2, s12, sc);
}

/* MXFP8: 2 x 32, one group per row. */
static void base_mxfp8(fixture *f) {
    moeq_quant_args a = float_args(8, MOEQ_STRATEGY_GROUP, 32);
    a.scale_dtype = MOEQ_DTYPE_U8;
    reset(f, MOEQ_FORMAT_MXFP8_QUANTIZED, a);
    const int64_t s232[2] = {2, 32}, s21[2] = {2, 1};
    uint8_t w[64];
    for (int i = 0; i < 64; i++) w[i] = (uint8_t)(i * 3 % 0x7E);
    const uint8_t sc[2] = {120, 130};
    add(f, "weight", MOEQ_DTYPE_F8_E4M3, 2, s232, w);
    add(f, "weight_scale", MOEQ_DTYPE_U8, 2, s21, sc);
}

/* ---- valid inputs ------------------------------------------------------------------ */

START_TEST(test_e1_symmetric) {
    moeq_error err_storage, *err = &err_storage;
    base_pack(&F, 1);
    ck_assert_ok(call(&F, err), err);
    ck_assert_int_eq(F.shape[0], 2);
    ck_assert_int_eq(F.shape[1], 16);
    for (int i = 0; i < 32; i++) ck_assert_f32_bits(out_f32(&F, (size_t)i), e1_sym[i]);
    /* BF16 and F16 outputs: the values are exact there */
    F.out_dtype = MOEQ_DTYPE_BF16;
    ck_assert_ok(call(&F, err), err);
    for (int i = 0; i < 32; i++) ck_assert_uint_eq(out_u16(&F, (size_t)i), moeq__f32_to_bf16(e1_sym[i]));
    F.out_dtype = MOEQ_DTYPE_F16;
    ck_assert_ok(call(&F, err), err);
    for (int i = 0; i < 32; i++) ck_assert_uint_eq(out_u16(&F, (size_t)i), moeq__f32_to_f16(e1_sym[i]));
    /* a symmetric config ignores a stray zero point */
    F.out_dtype = MOEQ_DTYPE_F32;
    const int64_t s12[2] = {1, 2};
    const uint32_t zp[2] = {0x84u, 0x09u};
    add(&F, "weight_zero_point", MOEQ_DTYPE_I32, 2, s12, zp);
    ck_assert_ok(call(&F, err), err);
    for (int i = 0; i < 32; i++) ck_assert_f32_bits(out_f32(&F, (size_t)i), e1_sym[i]);
}
END_TEST

START_TEST(test_e1_short_names_and_shape_only) {
    moeq_error err_storage, *err = &err_storage;
    base_pack(&F, 1);
    for (uint32_t i = 0; i < F.n; i++) F.t[i].name = strrchr(F.t[i].name, '.') + 1;
    F.module = NULL;
    ck_assert_ok(call(&F, err), err);
    for (int i = 0; i < 32; i++) ck_assert_f32_bits(out_f32(&F, (size_t)i), e1_sym[i]);
    /* out == NULL: only the shape */
    F.outp = NULL;
    F.out_bytes = 0;
    F.shape[0] = F.shape[1] = -1;
    ck_assert_ok(call(&F, err), err);
    ck_assert_int_eq(F.shape[0], 2);
    ck_assert_int_eq(F.shape[1], 16);
    /* unrelated tensors of the module are ignored */
    base_pack(&F, 1);
    const int64_t s1[1] = {1};
    const float one = 1.0f;
    add(&F, "input_scale", MOEQ_DTYPE_F32, 1, s1, &one);
    add(&F, "bias", MOEQ_DTYPE_F32, 1, s1, &one);
    ck_assert_ok(call(&F, err), err);
}
END_TEST

START_TEST(test_e1_asymmetric) {
    moeq_error err_storage, *err = &err_storage;
    base_pack(&F, 0);
    ck_assert_ok(call(&F, err), err);
    for (int i = 0; i < 32; i++) ck_assert_f32_bits(out_f32(&F, (size_t)i), e1_asym[i]);
    /* the <= 0.9.3 form: unpacked I8 [out, G] */
    drop(&F, "weight_zero_point");
    const int64_t s22[2] = {2, 2};
    const int8_t zp[4] = {-4, 1, 0, -8};
    add(&F, "weight_zero_point", MOEQ_DTYPE_I8, 2, s22, zp);
    ck_assert_ok(call(&F, err), err);
    for (int i = 0; i < 32; i++) ck_assert_f32_bits(out_f32(&F, (size_t)i), e1_asym[i]);
}
END_TEST

START_TEST(test_e1_actorder) {
    moeq_error err_storage, *err = &err_storage;
    base_pack(&F, 1);
    F.args.actorder = MOEQ_ACTORDER_GROUP;
    const int64_t s16[1] = {16};
    add(&F, "weight_g_idx", MOEQ_DTYPE_I32, 1, s16, e1_g_idx);
    ck_assert_ok(call(&F, err), err);
    for (int i = 0; i < 16; i++) ck_assert_f32_bits(out_f32(&F, (size_t)i), e1_act_row0[i]);
    /* a g_idx holding -1 is "not initialised": plain column order */
    int32_t unset[16];
    memcpy(unset, e1_g_idx, sizeof unset);
    unset[5] = -1;
    memcpy(F.data[F.n - 1] + 1, unset, sizeof unset);
    ck_assert_ok(call(&F, err), err);
    for (int i = 0; i < 32; i++) ck_assert_f32_bits(out_f32(&F, (size_t)i), e1_sym[i]);
}
END_TEST

START_TEST(test_legacy_packing) {
    /* 3-bit, 32 columns: dense 3 words, legacy 4 words */
    static const int8_t q[32] = {-4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2, -1, 0, 1, 2, 3,
                                 -4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2, -1, 0, 1, 2, 3};
    static const uint32_t dense[3] = {0x88FAC688u, 0xC688FAC6u, 0xFAC688FAu};
    static const uint32_t legacy[4] = {0x08FAC688u, 0x1A23EB1Au, 0x2C688FACu, 0x0000003Eu};
    moeq_error err_storage, *err = &err_storage;
    for (int form = 0; form < 2; form++) {
        reset(&F, MOEQ_FORMAT_PACK_QUANTIZED, int_args(3, 1, MOEQ_STRATEGY_CHANNEL, -1));
        const int64_t sp[2] = {1, form ? 4 : 3}, s2[1] = {2}, s11[2] = {1, 1};
        const int64_t shape_vals[2] = {1, 32};
        const float sc = 0.5f;
        add(&F, "weight_packed", MOEQ_DTYPE_I32, 2, sp, form ? (const void *)legacy : (const void *)dense);
        add(&F, "weight_shape", MOEQ_DTYPE_I64, 1, s2, shape_vals);
        add(&F, "weight_scale", MOEQ_DTYPE_F32, 2, s11, &sc);
        /* detected from the width */
        ck_assert_ok(call(&F, err), err);
        for (int i = 0; i < 32; i++) ck_assert_f32_bits(out_f32(&F, (size_t)i), 0.5f * q[i]);
        /* forced legacy: fine for the legacy words, a shape error for dense ones */
        F.flags = MOEQ_DEQUANT_LEGACY_PACKING;
        if (form) {
            ck_assert_ok(call(&F, err), err);
            for (int i = 0; i < 32; i++) ck_assert_f32_bits(out_f32(&F, (size_t)i), 0.5f * q[i]);
        } else {
            ck_assert_status(call(&F, err), MOEQ_STATUS_SHAPE, err);
            ck_assert_ptr_nonnull(strstr(err->message,
                "weight_packed: shape [1, 3], expected [1, 4] (legacy <= 0.17 layout forced by "
                "MOEQ_DEQUANT_LEGACY_PACKING: in=32, 10 values per word)"));
        }
    }
    /* a width matching neither layout names both */
    find(&F, "weight_packed")->shape[1] = 2;
    find(&F, "weight_packed")->nbytes = 8;
    F.flags = 0;
    ck_assert_status(call(&F, err), MOEQ_STATUS_SHAPE, err);
    ck_assert_ptr_nonnull(strstr(err->message,
        "shape [1, 2], expected [1, 3] (out, ceil(in=32 x 3 bits / 32)) or [1, 4] (legacy <= 0.17 "
        "layout, 10 values per word)"));
}
END_TEST

START_TEST(test_e2_fp8_block) {
    moeq_error err_storage, *err = &err_storage;
    base_fp8_block(&F);
    ck_assert_ok(call(&F, err), err);
    ck_assert_int_eq(F.shape[0], 3);
    ck_assert_int_eq(F.shape[1], 5);
    for (int i = 0; i < 15; i++) ck_assert_f32_bits(out_f32(&F, (size_t)i), e2_want[i]);
    /* naive-quantized reads the same tensors */
    F.format = MOEQ_FORMAT_NAIVE_QUANTIZED;
    ck_assert_ok(call(&F, err), err);
    for (int i = 0; i < 15; i++) ck_assert_f32_bits(out_f32(&F, (size_t)i), e2_want[i]);
}
END_TEST

START_TEST(test_e3_nvfp4) {
    moeq_error err_storage, *err = &err_storage;
    base_nvfp4(&F);
    ck_assert_ok(call(&F, err), err);
    ck_assert_int_eq(F.shape[1], 32);
    const float eff0 = 448.0f / e3_global, eff1 = 24.0f / e3_global;
    for (int i = 0; i < 32; i++) {
        ck_assert_f32_bits(out_f32(&F, (size_t)i), e3_q[i] * (i < 16 ? eff0 : eff1));
    }
    ck_assert_float_eq_tol(out_f32(&F, 1), -0.483333f, 1e-6f);
    ck_assert_float_eq_tol(out_f32(&F, 12), -2.9f, 1e-6f);
    /* CT decompresses NVFP4 to BF16: one rounding of the f32 product */
    F.out_dtype = MOEQ_DTYPE_BF16;
    ck_assert_ok(call(&F, err), err);
    for (int i = 0; i < 32; i++) {
        ck_assert_uint_eq(out_u16(&F, (size_t)i), moeq__f32_to_bf16(e3_q[i] * (i < 16 ? eff0 : eff1)));
    }
}
END_TEST

START_TEST(test_mxfp4_vector) {
    moeq_error err_storage, *err = &err_storage;
    base_mxfp4(&F);
    ck_assert_ok(call(&F, err), err);
    ck_assert_f32_bits(out_f32(&F, 0), 0.125f);
    ck_assert_f32_bits(out_f32(&F, 1), 0.25f);
    ck_assert_f32_bits(out_f32(&F, 2), 0.75f);
    ck_assert_f32_bits(out_f32(&F, 3), 1.0f);
    /* 0.13.0 checkpoints: exponent bytes 2 too small, read back 4x larger */
    F.flags = MOEQ_DEQUANT_MXFP4_V013;
    ck_assert_ok(call(&F, err), err);
    ck_assert_f32_bits(out_f32(&F, 0), 0.5f);
    ck_assert_f32_bits(out_f32(&F, 3), 4.0f);
}
END_TEST

START_TEST(test_mxfp8_and_dense) {
    moeq_error err_storage, *err = &err_storage;
    base_mxfp8(&F);
    ck_assert_ok(call(&F, err), err);
    const uint8_t *w = find(&F, "weight")->data;
    for (int i = 0; i < 64; i++) {
        const float s = i < 32 ? 0x1p-7f : 0x1p3f;
        ck_assert_f32_bits(out_f32(&F, (size_t)i), moeq__e4m3_to_f32(w[i]) * s);
    }
    /* the 0.13.0 flag concerns MXFP4 only */
    F.flags = MOEQ_DEQUANT_MXFP4_V013;
    ck_assert_ok(call(&F, err), err);
    ck_assert_f32_bits(out_f32(&F, 40), moeq__e4m3_to_f32(w[40]) * 8.0f);

    /* dense BF16 weight, any args (ignored) */
    reset(&F, MOEQ_FORMAT_DENSE, int_args(4, 1, MOEQ_STRATEGY_GROUP, 8));
    F.argsp = NULL;
    const float v[6] = {1.5f, -2.0f, 0.1f, 3.0f, -0.0f, 65536.0f};
    uint16_t b[6];
    bf16_array(v, 6, b);
    const int64_t s23[2] = {2, 3};
    add(&F, "weight", MOEQ_DTYPE_BF16, 2, s23, b);
    ck_assert_ok(call(&F, err), err);
    for (int i = 0; i < 6; i++) ck_assert_f32_bits(out_f32(&F, (size_t)i), moeq__bf16_to_f32(b[i]));
    F.out_dtype = MOEQ_DTYPE_F16;
    F.format = MOEQ_FORMAT_FAKEQUANT;
    ck_assert_ok(call(&F, err), err);
    ck_assert_uint_eq(out_u16(&F, 5), 0x7C00); /* 65536 overflows f16 */
}
END_TEST

/* Quantize random weights with the writer-side kernels, pack them, and check
 * that moeq_dequantize returns exactly what the dequant kernel computes. */
START_TEST(test_quantize_pack_dequantize) {
    static const struct {
        int bits, sym;
        int32_t strategy;
        int gs, bh, bw;
        int32_t sdtype;
    } cases[] = {
        {4, 1, MOEQ_STRATEGY_GROUP, 16, 0, 0, MOEQ_DTYPE_BF16},
        {4, 0, MOEQ_STRATEGY_GROUP, 16, 0, 0, MOEQ_DTYPE_BF16},
        {8, 0, MOEQ_STRATEGY_CHANNEL, -1, 0, 0, MOEQ_DTYPE_F16},
        {3, 0, MOEQ_STRATEGY_GROUP, 8, 0, 0, MOEQ_DTYPE_F32},
        {5, 1, MOEQ_STRATEGY_TENSOR, 0, 0, 0, MOEQ_DTYPE_F32},
        {2, 1, MOEQ_STRATEGY_BLOCK, 0, 4, 8, MOEQ_DTYPE_BF16},
    };
    enum { R = 9, C = 40 };
    uint64_t seed = 99;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        float w[R * C], scale[R * 5];
        int8_t q[R * C], zp[R * 5];
        uint32_t words[R * 10], zpw[5 * 5];
        for (int i = 0; i < R * C; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            w[i] = moeq__round_to_dtype(cases[k].sdtype, (float)((int64_t)(seed >> 33) % 2001 - 1000) / 700.0f);
        }
        moeq__wquant a = {MOEQ_QTYPE_INT, cases[k].bits, cases[k].sym, cases[k].strategy,
                          cases[k].gs, cases[k].bh, cases[k].bw, cases[k].sdtype};
        moeq__quantize_int_ref(&a, w, R, C, NULL, scale, zp, q);
        moeq__grid g;
        ck_assert(moeq__scale_grid(cases[k].strategy, R, C, cases[k].gs > 0 ? (size_t)cases[k].gs : 0,
                                   (size_t)cases[k].bh, (size_t)cases[k].bw, &g));
        const size_t nw = moeq__int_packed_words(C, cases[k].bits, false);
        for (int r = 0; r < R; r++) moeq__int_pack_row_ref(q + r * C, C, cases[k].bits, false, words + r * nw);

        moeq_quant_args args = int_args(cases[k].bits, cases[k].sym, cases[k].strategy, cases[k].gs);
        args.block_rows = cases[k].bh;
        args.block_cols = cases[k].bw;
        reset(&F, MOEQ_FORMAT_PACK_QUANTIZED, args);
        const int64_t sp[2] = {R, (int64_t)nw}, s2[1] = {2}, sg[2] = {(int64_t)g.rows, (int64_t)g.cols};
        const int64_t sv[2] = {R, C}, s1[1] = {1};
        uint8_t sbuf[R * 5 * 4];
        moeq__from_f32_ref(cases[k].sdtype, scale, g.rows * g.cols, sbuf);
        add(&F, "weight_packed", MOEQ_DTYPE_I32, 2, sp, words);
        add(&F, "weight_shape", MOEQ_DTYPE_I64, 1, s2, sv);
        if (cases[k].strategy == MOEQ_STRATEGY_TENSOR) {
            add(&F, "weight_scale", cases[k].sdtype, 1, s1, sbuf);
        } else {
            add(&F, "weight_scale", cases[k].sdtype, 2, sg, sbuf);
        }
        float zpf[R * 5];
        if (!cases[k].sym) {
            const size_t zrows = moeq__int_packed_words(g.rows, cases[k].bits, false);
            moeq__int_pack_cols_ref(zp, g.rows, g.cols, cases[k].bits, false, zpw);
            const int64_t sz[2] = {(int64_t)zrows, (int64_t)g.cols};
            add(&F, "weight_zero_point", MOEQ_DTYPE_I32, 2, sz, zpw);
            for (size_t i = 0; i < g.rows * g.cols; i++) zpf[i] = zp[i];
        }
        moeq_error err_storage, *err = &err_storage;
        ck_assert_ok(call(&F, err), err);
        float ref[R * C];
        moeq__qweight qw;
        memset(&qw, 0, sizeof qw);
        qw.kind = MOEQ__QW_INT_PACKED;
        qw.bits = cases[k].bits;
        qw.rows = R;
        qw.cols = C;
        qw.codes = words;
        qw.row_stride = nw * 4;
        qw.grid = g;
        qw.scale = scale;
        qw.zero_point = cases[k].sym ? NULL : zpf;
        moeq__dequant_ref(&qw, 0, R, ref);
        for (int i = 0; i < R * C; i++) ck_assert_f32_bits(out_f32(&F, (size_t)i), ref[i]);
        /* and once rounded to the scale dtype */
        if (cases[k].sdtype != MOEQ_DTYPE_F32) {
            F.out_dtype = cases[k].sdtype;
            ck_assert_ok(call(&F, err), err);
            uint8_t want[R * C * 2];
            moeq__from_f32_ref(cases[k].sdtype, ref, R * C, want);
            ck_assert_mem_eq(F.out, want, sizeof want);
        }
    }
}
END_TEST

/* ---- bad inputs ------------------------------------------------------------------------ */

typedef enum base_kind { B_PACK_ASYM, B_PACK_SYM, B_FP8_BLOCK, B_NVFP4, B_MXFP4, B_MXFP8 } base_kind;

typedef struct bad_case {
    const char *name;
    base_kind base;
    void (*mutate)(fixture *f);
    moeq_status want;
    const char *substr;
} bad_case;

static void set_dtype(fixture *f, const char *param, int32_t dtype) {
    moeq_tensor *t = find(f, param);
    const size_t old = moeq_dtype_size(t->dtype), now = moeq_dtype_size(dtype);
    t->dtype = dtype;
    t->nbytes = t->nbytes / old * now;
}

static void set_shape2(fixture *f, const char *param, int64_t a, int64_t b) {
    moeq_tensor *t = find(f, param);
    const size_t esize = moeq_dtype_size(t->dtype);
    t->ndim = 2;
    t->shape[0] = a;
    t->shape[1] = b;
    t->nbytes = (uint64_t)(a * b) * esize;
}

static void put_u16(fixture *f, const char *param, size_t i, uint16_t v) {
    memcpy((uint8_t *)(uintptr_t)find(f, param)->data + 2 * i, &v, 2);
}

static void put_u8(fixture *f, const char *param, size_t i, uint8_t v) {
    ((uint8_t *)(uintptr_t)find(f, param)->data)[i] = v;
}

static void put_i32(fixture *f, const char *param, size_t i, int32_t v) {
    memcpy((uint8_t *)(uintptr_t)find(f, param)->data + 4 * i, &v, 4);
}

static void add_g_idx(fixture *f) {
    const int64_t s16[1] = {16};
    add(f, "weight_g_idx", MOEQ_DTYPE_I32, 1, s16, e1_g_idx);
}

static void m_no_scale(fixture *f) { drop(f, "weight_scale"); }
static void m_no_packed(fixture *f) { drop(f, "weight_packed"); }
static void m_actorder_group(fixture *f) { f->args.actorder = MOEQ_ACTORDER_GROUP; }
static void m_no_shape(fixture *f) { drop(f, "weight_shape"); }
static void m_no_zp(fixture *f) { drop(f, "weight_zero_point"); }
static void m_packed_i8(fixture *f) { set_dtype(f, "weight_packed", MOEQ_DTYPE_I8); }
static void m_scale_i32(fixture *f) { set_dtype(f, "weight_scale", MOEQ_DTYPE_I32); }
static void m_scale_f64(fixture *f) {
    set_dtype(f, "weight_scale", MOEQ_DTYPE_F64);
    find(f, "weight_scale")->nbytes = 32; /* fits the fixture's buffer */
}
static void m_scale_cols(fixture *f) { set_shape2(f, "weight_scale", 2, 3); }
static void m_scale_1d(fixture *f) {
    moeq_tensor *t = find(f, "weight_scale");
    t->ndim = 1;
    t->shape[0] = 4;
}
static void m_packed_cols(fixture *f) { set_shape2(f, "weight_packed", 2, 3); }
static void m_packed_3d(fixture *f) {
    moeq_tensor *t = find(f, "weight_packed");
    t->ndim = 3;
    t->shape[0] = 1;
    t->shape[1] = 2;
    t->shape[2] = 2;
}
static void m_shape_rows(fixture *f) {
    const int64_t v[2] = {3, 16};
    memcpy((uint8_t *)(uintptr_t)find(f, "weight_shape")->data, v, sizeof v);
}
static void m_shape_negative(fixture *f) {
    const int64_t v[2] = {2, -16};
    memcpy((uint8_t *)(uintptr_t)find(f, "weight_shape")->data, v, sizeof v);
}
static void m_shape_len3(fixture *f) {
    moeq_tensor *t = find(f, "weight_shape");
    t->shape[0] = 3;
    t->nbytes = 24;
}
static void m_shape_f32(fixture *f) { set_dtype(f, "weight_shape", MOEQ_DTYPE_F32); find(f, "weight_shape")->nbytes = 8; }
static void m_nan_scale(fixture *f) { put_u16(f, "weight_scale", 2, 0x7FC0); }
static void m_inf_scale(fixture *f) { put_u16(f, "weight_scale", 1, 0xFF80); }
static void m_gidx_range(fixture *f) {
    add_g_idx(f);
    put_i32(f, "weight_g_idx", 3, 2);
}
static void m_gidx_negative(fixture *f) {
    add_g_idx(f);
    put_i32(f, "weight_g_idx", 7, -2);
}
static void m_gidx_dtype(fixture *f) {
    add_g_idx(f);
    set_dtype(f, "weight_g_idx", MOEQ_DTYPE_I16);
}
static void m_gidx_len(fixture *f) {
    add_g_idx(f);
    moeq_tensor *t = find(f, "weight_g_idx");
    t->shape[0] = 15;
    t->nbytes = 60;
}
static void m_zp_shape(fixture *f) { set_shape2(f, "weight_zero_point", 2, 1); }
static void m_zp_f32(fixture *f) { set_dtype(f, "weight_zero_point", MOEQ_DTYPE_F32); }
static void m_zp_i8_shape(fixture *f) {
    set_dtype(f, "weight_zero_point", MOEQ_DTYPE_I8);
    find(f, "weight_zero_point")->nbytes = 2;
}
static void m_out_small(fixture *f) { f->out_bytes = 2 * 16 * 4 - 1; }
static void m_out_small_bf16(fixture *f) {
    f->out_dtype = MOEQ_DTYPE_BF16;
    f->out_bytes = 2 * 16 * 2 - 2;
}
static void m_null_shape(fixture *f) { f->shapep = NULL; }
static void m_null_tensors(fixture *f) { f->tp = NULL; }
static void m_null_args(fixture *f) { f->argsp = NULL; }
static void m_out_i8(fixture *f) { f->out_dtype = MOEQ_DTYPE_I8; }
static void m_format_none(fixture *f) { f->format = MOEQ_FORMAT_NONE; }
static void m_format_marlin(fixture *f) { f->format = MOEQ_FORMAT_MARLIN_24; }
static void m_format_sparse(fixture *f) { f->format = MOEQ_FORMAT_SPARSE_BITMASK; }
static void m_args_float(fixture *f) { f->args.type = MOEQ_QTYPE_FLOAT; }
static void m_args_bits9(fixture *f) { f->args.num_bits = 9; }
static void m_args_token(fixture *f) { f->args.strategy = MOEQ_STRATEGY_TOKEN; }
static void m_args_gs0(fixture *f) { f->args.group_size = 0; }
static void m_args_block0(fixture *f) { f->args.block_cols = 0; }
static void m_nbytes(fixture *f) { find(f, "weight_scale")->nbytes = 7; }
static void m_null_data(fixture *f) { find(f, "weight_scale")->data = NULL; }
static void m_duplicate(fixture *f) {
    f->t[f->n] = *find(f, "weight_scale");
    f->t[f->n].name = "weight_scale";
    f->n++;
}
static void m_unnamed(fixture *f) { f->t[1].name = NULL; }
static void m_bad_dtype(fixture *f) { find(f, "weight_scale")->dtype = 99; }
static void m_neg_dim(fixture *f) { find(f, "weight_scale")->shape[1] = -2; }
static void m_nomem(fixture *f) {
    (void)f;
    moeq__test_fail_alloc_after(0);
}
static void m_nomem_late(fixture *f) {
    (void)f;
    moeq__test_fail_alloc_after(2);
}
/* FP8 / naive */
static void m_fp8_nan_weight(fixture *f) { put_u8(f, "weight", 7, 0xFF); }
static void m_fp8_weight_i8(fixture *f) { set_dtype(f, "weight", MOEQ_DTYPE_I8); }
static void m_fp8_block_grid(fixture *f) { set_shape2(f, "weight_scale", 1, 2); }
static void m_fp8_no_weight(fixture *f) { drop(f, "weight"); }
static void m_fp8_int4_i32(fixture *f) {
    f->args.type = MOEQ_QTYPE_INT;
    f->args.num_bits = 4;
    f->format = MOEQ_FORMAT_INT_QUANTIZED;
}
static void m_fp8_asym(fixture *f) { f->args.symmetric = 0; }
static void m_fp8_tensor_scale(fixture *f) { f->args.strategy = MOEQ_STRATEGY_TENSOR; }
/* NVFP4 */
static void m_nv_no_global(fixture *f) { drop(f, "weight_global_scale"); }
static void m_nv_global_zero(fixture *f) {
    const float z = 0.0f;
    memcpy((uint8_t *)(uintptr_t)find(f, "weight_global_scale")->data, &z, 4);
}
static void m_nv_global_nan(fixture *f) {
    const float z = NAN;
    memcpy((uint8_t *)(uintptr_t)find(f, "weight_global_scale")->data, &z, 4);
}
static void m_nv_global_bf16(fixture *f) {
    set_dtype(f, "weight_global_scale", MOEQ_DTYPE_BF16);
}
static void m_nv_global_shape(fixture *f) { set_shape2(f, "weight_global_scale", 1, 1); }
static void m_nv_scale_u8(fixture *f) { set_dtype(f, "weight_scale", MOEQ_DTYPE_U8); }
static void m_nv_scale_nan(fixture *f) { put_u8(f, "weight_scale", 1, 0x7F); }
static void m_nv_scale_cols(fixture *f) { set_shape2(f, "weight_scale", 1, 3); }
static void m_nv_packed_i32(fixture *f) { set_dtype(f, "weight_packed", MOEQ_DTYPE_I32); find(f, "weight_packed")->nbytes = 64; set_shape2(f, "weight_packed", 1, 4); }
static void m_nv_asym(fixture *f) { f->args.symmetric = 0; }
static void m_nv_int(fixture *f) { f->args.type = MOEQ_QTYPE_INT; }
/* MX */
static void m_mx_byte255(fixture *f) { put_u8(f, "weight_scale", 1, 255); }
static void m_mx_v013_overflow(fixture *f) {
    put_u8(f, "weight_scale", 0, 254);
    f->flags = MOEQ_DEQUANT_MXFP4_V013;
}
static void m_mx_scale_bf16(fixture *f) { set_dtype(f, "weight_scale", MOEQ_DTYPE_BF16); }
static void m_mx_scale_shape(fixture *f) { set_shape2(f, "weight_scale", 1, 1); }
static void m_mx_strategy(fixture *f) { f->args.strategy = MOEQ_STRATEGY_TENSOR_GROUP; }
static void m_mx8_nan(fixture *f) { put_u8(f, "weight", 33, 0x7F); }
static void m_mx8_bits(fixture *f) { f->args.num_bits = 4; }

#define W MODULE "."
static const bad_case bad_cases[] = {
    {"missing scale", B_PACK_ASYM, m_no_scale, MOEQ_STATUS_CHECKPOINT,
     W "weight_scale: missing; pack-quantized weights need weight_packed, weight_shape, weight_scale "
       "and weight_zero_point (asymmetric)"},
    {"missing packed", B_PACK_ASYM, m_no_packed, MOEQ_STATUS_CHECKPOINT,
     W "weight_packed: missing; pack-quantized weights need weight_packed, weight_shape, weight_scale"},
    {"missing packed sym", B_PACK_SYM, m_no_packed, MOEQ_STATUS_CHECKPOINT,
     W "weight_packed: missing; pack-quantized weights need weight_packed, weight_shape and weight_scale"},
    {"missing g_idx under actorder group", B_PACK_SYM, m_actorder_group, MOEQ_STATUS_CHECKPOINT,
     W "weight_g_idx: missing; pack-quantized weights need weight_packed, weight_shape, weight_scale "
       "and weight_g_idx (actorder group)"},
    {"missing shape", B_PACK_ASYM, m_no_shape, MOEQ_STATUS_CHECKPOINT, W "weight_shape: missing"},
    {"missing zero point", B_PACK_ASYM, m_no_zp, MOEQ_STATUS_CHECKPOINT,
     W "weight_zero_point: missing; pack-quantized weights need weight_packed, weight_shape, "
       "weight_scale and weight_zero_point (asymmetric)"},
    {"packed I8", B_PACK_ASYM, m_packed_i8, MOEQ_STATUS_DTYPE, W "weight_packed: dtype I8, expected I32"},
    {"scale I32", B_PACK_ASYM, m_scale_i32, MOEQ_STATUS_DTYPE,
     W "weight_scale: dtype I32, expected F32, F16 or BF16"},
    {"scale F64", B_PACK_SYM, m_scale_f64, MOEQ_STATUS_DTYPE, "dtype F64, expected F32, F16 or BF16"},
    {"scale columns", B_PACK_ASYM, m_scale_cols, MOEQ_STATUS_SHAPE,
     W "weight_scale: shape [2, 3], expected [2, 2] (out, ceil(in/group_size=8))"},
    {"scale 1-D", B_PACK_SYM, m_scale_1d, MOEQ_STATUS_SHAPE, "weight_scale: shape [4], expected [2, 2]"},
    {"packed width", B_PACK_ASYM, m_packed_cols, MOEQ_STATUS_SHAPE,
     W "weight_packed: shape [2, 3], expected [2, 2] (out, ceil(in=16 x 4 bits / 32))"},
    {"packed 3-D", B_PACK_SYM, m_packed_3d, MOEQ_STATUS_SHAPE, "weight_packed: shape [1, 2, 2], expected 2 dimensions"},
    {"weight_shape rows", B_PACK_ASYM, m_shape_rows, MOEQ_STATUS_SHAPE,
     W "weight_shape = [3, 16], expected [2, in >= 0]"},
    {"weight_shape negative", B_PACK_SYM, m_shape_negative, MOEQ_STATUS_SHAPE, "weight_shape = [2, -16]"},
    {"weight_shape length", B_PACK_ASYM, m_shape_len3, MOEQ_STATUS_SHAPE,
     W "weight_shape: shape [3], expected [2] (out, in)"},
    {"weight_shape F32", B_PACK_SYM, m_shape_f32, MOEQ_STATUS_DTYPE, "weight_shape: dtype F32, expected I64 (or I32)"},
    {"NaN scale", B_PACK_ASYM, m_nan_scale, MOEQ_STATUS_CHECKPOINT,
     W "weight_scale[1, 0] = nan: scales must be finite"},
    {"inf scale", B_PACK_SYM, m_inf_scale, MOEQ_STATUS_CHECKPOINT, W "weight_scale[0, 1] = -inf"},
    {"g_idx out of range", B_PACK_SYM, m_gidx_range, MOEQ_STATUS_CHECKPOINT,
     W "weight_g_idx[3] = 2, expected a group index in [0, 2) or -1 everywhere"},
    {"g_idx negative", B_PACK_SYM, m_gidx_negative, MOEQ_STATUS_CHECKPOINT, W "weight_g_idx[7] = -2"},
    {"g_idx dtype", B_PACK_SYM, m_gidx_dtype, MOEQ_STATUS_DTYPE, W "weight_g_idx: dtype I16, expected I32"},
    {"g_idx length", B_PACK_SYM, m_gidx_len, MOEQ_STATUS_SHAPE, W "weight_g_idx: shape [15], expected [16] (in)"},
    {"zero point shape", B_PACK_ASYM, m_zp_shape, MOEQ_STATUS_SHAPE,
     W "weight_zero_point: shape [2, 1], expected [1, 2] (ceil(out=2 x 4 bits / 32), groups) packed along dim 0, or I8 [2, 2]"},
    {"zero point F32", B_PACK_ASYM, m_zp_f32, MOEQ_STATUS_DTYPE,
     W "weight_zero_point: dtype F32, expected I32 (packed) or I8"},
    {"zero point I8 shape", B_PACK_ASYM, m_zp_i8_shape, MOEQ_STATUS_SHAPE,
     W "weight_zero_point: shape [1, 2], expected [2, 2] (out, ceil(in/group_size=8))"},
    {"out too small", B_PACK_ASYM, m_out_small, MOEQ_STATUS_SHAPE,
     MODULE ": out_bytes 127, expected at least 128 ([2, 16] x F32)"},
    {"out too small bf16", B_PACK_ASYM, m_out_small_bf16, MOEQ_STATUS_SHAPE, "out_bytes 62, expected at least 64"},
    {"NULL out_shape", B_PACK_ASYM, m_null_shape, MOEQ_STATUS_INVALID_ARG, MODULE ": out_shape is NULL"},
    {"NULL tensors", B_PACK_ASYM, m_null_tensors, MOEQ_STATUS_INVALID_ARG, "tensors is NULL but n_tensors is 4"},
    {"NULL args", B_PACK_ASYM, m_null_args, MOEQ_STATUS_INVALID_ARG,
     MODULE ": format pack-quantized needs the weight quantization args, got NULL"},
    {"out dtype I8", B_PACK_ASYM, m_out_i8, MOEQ_STATUS_INVALID_ARG, "out_dtype I8, expected F32, BF16 or F16"},
    {"format none", B_PACK_ASYM, m_format_none, MOEQ_STATUS_INVALID_ARG, "no compression format given"},
    {"format marlin-24", B_PACK_ASYM, m_format_marlin, MOEQ_STATUS_UNSUPPORTED, "format 'marlin-24' (8) cannot be dequantized"},
    {"format sparse", B_PACK_ASYM, m_format_sparse, MOEQ_STATUS_UNSUPPORTED, "format 'sparse-bitmask'"},
    {"pack float args", B_PACK_ASYM, m_args_float, MOEQ_STATUS_UNSUPPORTED,
     MODULE ": pack-quantized weights (float4 group(8) asym) must be int with 1..8 bits"},
    {"pack 9 bits", B_PACK_SYM, m_args_bits9, MOEQ_STATUS_UNSUPPORTED, "(int9 group(8) sym) must be int with 1..8 bits"},
    {"token strategy", B_PACK_SYM, m_args_token, MOEQ_STATUS_UNSUPPORTED, "need strategy tensor, channel, group or block"},
    {"group size 0", B_PACK_SYM, m_args_gs0, MOEQ_STATUS_INVALID_ARG,
     "strategy group with group_size 0, expected a positive group_size"},
    {"block size 0", B_FP8_BLOCK, m_args_block0, MOEQ_STATUS_INVALID_ARG, "block_structure [2, 0], expected positive sizes"},
    {"nbytes mismatch", B_PACK_ASYM, m_nbytes, MOEQ_STATUS_INVALID_ARG,
     W "weight_scale: nbytes 7, expected 8 (shape [2, 2] x 2 bytes of BF16)"},
    {"NULL data", B_PACK_ASYM, m_null_data, MOEQ_STATUS_INVALID_ARG, W "weight_scale: data is NULL"},
    {"duplicate", B_PACK_ASYM, m_duplicate, MOEQ_STATUS_INVALID_ARG,
     W "weight_scale: given twice ('" W "weight_scale' and 'weight_scale')"},
    {"unnamed", B_PACK_ASYM, m_unnamed, MOEQ_STATUS_INVALID_ARG, MODULE ": tensors[1] has no name"},
    {"unknown dtype", B_PACK_ASYM, m_bad_dtype, MOEQ_STATUS_DTYPE, W "weight_scale: unknown dtype 99"},
    {"negative dim", B_PACK_ASYM, m_neg_dim, MOEQ_STATUS_SHAPE, "shape [2, -2] is negative or too large"},
    {"no memory", B_PACK_ASYM, m_nomem, MOEQ_STATUS_NOMEM, MODULE ": out of memory"},
    {"no memory later", B_PACK_ASYM, m_nomem_late, MOEQ_STATUS_NOMEM, "out of memory"},
    {"FP8 NaN weight", B_FP8_BLOCK, m_fp8_nan_weight, MOEQ_STATUS_CHECKPOINT, W "weight[1, 2] is NaN (byte 0xFF)"},
    {"FP8 weight I8", B_FP8_BLOCK, m_fp8_weight_i8, MOEQ_STATUS_DTYPE,
     W "weight: dtype I8, expected F8_E4M3 for float 8-bit weights"},
    {"FP8 block grid", B_FP8_BLOCK, m_fp8_block_grid, MOEQ_STATUS_SHAPE,
     W "weight_scale: shape [1, 2], expected [2, 2] (ceil(out/2), ceil(in/4))"},
    {"FP8 missing weight", B_FP8_BLOCK, m_fp8_no_weight, MOEQ_STATUS_CHECKPOINT,
     W "weight: missing; float-quantized weights need weight and weight_scale"},
    {"int4 int-quantized in F8", B_FP8_BLOCK, m_fp8_int4_i32, MOEQ_STATUS_DTYPE,
     "weight: dtype F8_E4M3, expected I8 for int 4-bit weights"},
    {"FP8 asymmetric", B_FP8_BLOCK, m_fp8_asym, MOEQ_STATUS_UNSUPPORTED, "are asymmetric FP8"},
    {"FP8 tensor scale shape", B_FP8_BLOCK, m_fp8_tensor_scale, MOEQ_STATUS_SHAPE,
     W "weight_scale: shape [2, 2], expected [1] (tensor strategy)"},
    {"NVFP4 no global", B_NVFP4, m_nv_no_global, MOEQ_STATUS_CHECKPOINT,
     W "weight_global_scale: missing; nvfp4-pack-quantized weights need weight_packed, weight_scale and weight_global_scale"},
    {"NVFP4 global zero", B_NVFP4, m_nv_global_zero, MOEQ_STATUS_CHECKPOINT,
     W "weight_global_scale = 0, expected a positive finite number"},
    {"NVFP4 global NaN", B_NVFP4, m_nv_global_nan, MOEQ_STATUS_CHECKPOINT, "weight_global_scale = nan"},
    {"NVFP4 global BF16", B_NVFP4, m_nv_global_bf16, MOEQ_STATUS_DTYPE, "weight_global_scale: dtype BF16, expected F32"},
    {"NVFP4 global shape", B_NVFP4, m_nv_global_shape, MOEQ_STATUS_SHAPE, "weight_global_scale: shape [1, 1], expected [1]"},
    {"NVFP4 scale U8", B_NVFP4, m_nv_scale_u8, MOEQ_STATUS_DTYPE,
     W "weight_scale: dtype U8, expected F8_E4M3 (or F32, F16, BF16)"},
    {"NVFP4 scale NaN", B_NVFP4, m_nv_scale_nan, MOEQ_STATUS_CHECKPOINT,
     W "weight_scale[0, 1] = nan (byte 0x7F): scales must be finite"},
    {"NVFP4 scale columns", B_NVFP4, m_nv_scale_cols, MOEQ_STATUS_SHAPE,
     "weight_scale: shape [1, 3], expected [1, 2] (out, ceil(in/group_size=16))"},
    {"NVFP4 packed I32", B_NVFP4, m_nv_packed_i32, MOEQ_STATUS_DTYPE,
     W "weight_packed: dtype I32, expected U8 (two FP4 codes per byte)"},
    {"NVFP4 asymmetric", B_NVFP4, m_nv_asym, MOEQ_STATUS_UNSUPPORTED, "are asymmetric (CT: not supported for FP4)"},
    {"NVFP4 int args", B_NVFP4, m_nv_int, MOEQ_STATUS_UNSUPPORTED, "(int4 tensor_group(16) sym) must be float with 4 bits"},
    {"MXFP4 byte 255", B_MXFP4, m_mx_byte255, MOEQ_STATUS_CHECKPOINT,
     W "weight_scale[0, 1] = inf (byte 0xFF): scales must be finite"},
    {"MXFP4 0.13 overflow", B_MXFP4, m_mx_v013_overflow, MOEQ_STATUS_CHECKPOINT, "weight_scale[0, 0] = inf (byte 0xFE)"},
    {"MXFP4 scale BF16", B_MXFP4, m_mx_scale_bf16, MOEQ_STATUS_DTYPE, "weight_scale: dtype BF16, expected U8 (E8M0 exponents)"},
    {"MXFP4 scale shape", B_MXFP4, m_mx_scale_shape, MOEQ_STATUS_SHAPE,
     "weight_scale: shape [1, 1], expected [1, 2] (out, ceil(in/group_size=2))"},
    {"MXFP4 strategy", B_MXFP4, m_mx_strategy, MOEQ_STATUS_UNSUPPORTED, "need strategy group"},
    {"MXFP8 NaN weight", B_MXFP8, m_mx8_nan, MOEQ_STATUS_CHECKPOINT, W "weight[1, 1] is NaN (byte 0x7F)"},
    {"MXFP8 bits", B_MXFP8, m_mx8_bits, MOEQ_STATUS_UNSUPPORTED, "mxfp8-quantized weights (float4 group(32) sym) must be float with 8 bits"},
};
#undef W
#define N_BAD (sizeof bad_cases / sizeof bad_cases[0])

START_TEST(test_bad_input) {
    const bad_case *bc = &bad_cases[_i];
    switch (bc->base) {
        case B_PACK_ASYM: base_pack(&F, 0); break;
        case B_PACK_SYM: base_pack(&F, 1); break;
        case B_FP8_BLOCK: base_fp8_block(&F); break;
        case B_NVFP4: base_nvfp4(&F); break;
        case B_MXFP4: base_mxfp4(&F); break;
        case B_MXFP8: base_mxfp8(&F); break;
    }
    moeq_error err_storage, *err = &err_storage;
    /* the unmutated base is valid */
    ck_assert_ok(call(&F, err), err);
    bc->mutate(&F);
    F.shape[0] = F.shape[1] = 77;
    const moeq_status st = call(&F, err);
    moeq__test_fail_alloc_after(-1);
    ck_assert_msg((int)st == (int)bc->want, "%s: status %s, want %s: %s", bc->name,
                  moeq_status_name(st), moeq_status_name(bc->want), err->message);
    ck_assert_int_eq(err->code, bc->want);
    if (getenv("MOEQ_TEST_VERBOSE")) printf("%-28s %s\n", bc->name, err->message);
    ck_assert_msg(strstr(err->message, bc->substr) != NULL, "%s: message '%s' lacks '%s'", bc->name,
                  err->message, bc->substr);
    if (F.shapep) {
        ck_assert_int_eq(F.shape[0], 77); /* untouched on failure */
        ck_assert_int_eq(F.shape[1], 77);
    }
}
END_TEST

START_TEST(test_nomem_everywhere) {
    /* every allocation of a successful call, made to fail in turn */
    for (long k = 0;; k++) {
        base_pack(&F, 0);
        add_g_idx(&F);
        moeq_error err_storage, *err = &err_storage;
        moeq__test_fail_alloc_after(k);
        const moeq_status st = call(&F, err);
        moeq__test_fail_alloc_after(-1);
        if (st == MOEQ_STATUS_OK) {
            ck_assert_int_ge(k, 3);
            break;
        }
        ck_assert_status(st, MOEQ_STATUS_NOMEM, err);
    }
}
END_TEST

/* ---- the tensor-set table moeq_dequantize and `moeq inspect` share ---------------- */

#define B(p) MOEQ__CT_BIT(MOEQ__CT_##p)

START_TEST(test_tensor_sets) {
    static const struct {
        int32_t format;
        int bits, sym, strategy, gs, actorder, is_float;
        uint32_t required, optional;
        const char *text;
    } cases[] = {
        {MOEQ_FORMAT_PACK_QUANTIZED, 4, 1, MOEQ_STRATEGY_GROUP, 32, MOEQ_ACTORDER_NONE, 0,
         B(WEIGHT_PACKED) | B(WEIGHT_SHAPE) | B(WEIGHT_SCALE), B(WEIGHT_G_IDX),
         "weight_packed, weight_shape and weight_scale"},
        {MOEQ_FORMAT_PACK_QUANTIZED, 4, 0, MOEQ_STRATEGY_GROUP, 32, MOEQ_ACTORDER_DYNAMIC, 0,
         B(WEIGHT_PACKED) | B(WEIGHT_SHAPE) | B(WEIGHT_SCALE) | B(WEIGHT_ZERO_POINT) | B(WEIGHT_G_IDX),
         0,
         "weight_packed, weight_shape, weight_scale, weight_zero_point (asymmetric) and "
         "weight_g_idx (actorder group)"},
        {MOEQ_FORMAT_PACK_QUANTIZED, 8, 1, MOEQ_STRATEGY_CHANNEL, -1, MOEQ_ACTORDER_NONE, 0,
         B(WEIGHT_PACKED) | B(WEIGHT_SHAPE) | B(WEIGHT_SCALE), 0, NULL},
        {MOEQ_FORMAT_INT_QUANTIZED, 8, 1, MOEQ_STRATEGY_CHANNEL, -1, MOEQ_ACTORDER_NONE, 0,
         B(WEIGHT) | B(WEIGHT_SCALE), 0, "weight and weight_scale"},
        {MOEQ_FORMAT_FLOAT_QUANTIZED, 8, 1, MOEQ_STRATEGY_BLOCK, 0, MOEQ_ACTORDER_NONE, 1,
         B(WEIGHT) | B(WEIGHT_SCALE), 0, NULL},
        {MOEQ_FORMAT_NVFP4_PACK_QUANTIZED, 4, 1, MOEQ_STRATEGY_TENSOR_GROUP, 16, MOEQ_ACTORDER_NONE,
         1, B(WEIGHT_PACKED) | B(WEIGHT_SCALE) | B(WEIGHT_GLOBAL_SCALE), 0,
         "weight_packed, weight_scale and weight_global_scale"},
        {MOEQ_FORMAT_NVFP4_PACK_QUANTIZED, 4, 1, MOEQ_STRATEGY_GROUP, 16, MOEQ_ACTORDER_NONE, 1,
         B(WEIGHT_PACKED) | B(WEIGHT_SCALE), B(WEIGHT_GLOBAL_SCALE), NULL},
        {MOEQ_FORMAT_MXFP4_PACK_QUANTIZED, 4, 1, MOEQ_STRATEGY_GROUP, 32, MOEQ_ACTORDER_NONE, 1,
         B(WEIGHT_PACKED) | B(WEIGHT_SCALE), 0, NULL},
        {MOEQ_FORMAT_MXFP8_QUANTIZED, 8, 1, MOEQ_STRATEGY_GROUP, 32, MOEQ_ACTORDER_NONE, 1,
         B(WEIGHT) | B(WEIGHT_SCALE), 0, NULL},
        {MOEQ_FORMAT_DENSE, 4, 1, MOEQ_STRATEGY_GROUP, 32, MOEQ_ACTORDER_NONE, 0, B(WEIGHT), 0,
         "weight"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        moeq_quant_args a = cases[i].is_float
                                ? float_args(cases[i].bits, cases[i].strategy, cases[i].gs)
                                : int_args(cases[i].bits, cases[i].sym, cases[i].strategy, cases[i].gs);
        a.actorder = cases[i].actorder;
        moeq__ct_params set;
        moeq_error err;
        ck_assert_ok(moeq__ct_expected_params(&a, cases[i].format, MODULE, &set, &err), &err);
        ck_assert_msg(set.required == cases[i].required && set.optional == cases[i].optional,
                      "case %zu: required 0x%x optional 0x%x", i, set.required, set.optional);
        if (cases[i].text) {
            char text[256];
            moeq__ct_params_text(set.required, text, sizeof text);
            ck_assert_str_eq(text, cases[i].text);
        }
    }
    /* args a format cannot hold, and no format at all */
    moeq_quant_args f4 = float_args(4, MOEQ_STRATEGY_GROUP, 32);
    moeq__ct_params set;
    moeq_error err;
    ck_assert_status(moeq__ct_expected_params(&f4, MOEQ_FORMAT_PACK_QUANTIZED, MODULE, &set, &err),
                     MOEQ_STATUS_UNSUPPORTED, &err);
    ck_assert_ptr_nonnull(strstr(err.message, MODULE ": pack-quantized weights (float4 group(32) sym) "
                                              "must be int with 1..8 bits"));
    ck_assert_status(moeq__ct_expected_params(&f4, MOEQ_FORMAT_NONE, MODULE, &set, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_status(moeq__ct_expected_params(NULL, MOEQ_FORMAT_PACK_QUANTIZED, MODULE, &set, &err),
                     MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_status(moeq__ct_expected_params(&f4, MOEQ_FORMAT_SPARSE_24_BITMASK, "", &set, &err),
                     MOEQ_STATUS_UNSUPPORTED, &err);

    /* activation extras */
    moeq_quant_args in = float_args(8, MOEQ_STRATEGY_TENSOR, 0);
    ck_assert_uint_eq(moeq__ct_activation_params(&in, false).required, B(INPUT_SCALE));
    ck_assert_uint_eq(moeq__ct_activation_params(&in, true).required, B(OUTPUT_SCALE));
    in = int_args(8, 0, MOEQ_STRATEGY_TENSOR, 0);
    ck_assert_uint_eq(moeq__ct_activation_params(&in, false).required,
                      B(INPUT_SCALE) | B(INPUT_ZERO_POINT));
    in.dynamic = MOEQ_DYNAMIC_TRUE;
    ck_assert_uint_eq(moeq__ct_activation_params(&in, false).required, 0);
    in = float_args(4, MOEQ_STRATEGY_TENSOR_GROUP, 16);
    in.dynamic = MOEQ_DYNAMIC_LOCAL;
    ck_assert_uint_eq(moeq__ct_activation_params(&in, false).required, B(INPUT_GLOBAL_SCALE));
    ck_assert_uint_eq(moeq__ct_activation_params(NULL, false).required, 0);

    /* the names */
    for (int32_t p = 0; p < MOEQ__CT_PARAM_COUNT; p++) {
        const char *name = moeq__ct_param_name(p);
        ck_assert_int_eq(moeq__ct_param_from_name(name, strlen(name)), p);
    }
    ck_assert_ptr_null(moeq__ct_param_name(MOEQ__CT_PARAM_COUNT));
    ck_assert_int_eq(moeq__ct_param_from_name("weight_scal", 11), -1);
    ck_assert_int_eq(moeq__ct_param_from_name("k_scale", 7), -1);
}
END_TEST

#undef B

Suite *dequant_suite(void);
Suite *dequant_suite(void) {
    Suite *s = suite_create("dequant");
    TCase *tc = tcase_create("vectors");
    tcase_add_test(tc, test_e1_symmetric);
    tcase_add_test(tc, test_e1_short_names_and_shape_only);
    tcase_add_test(tc, test_e1_asymmetric);
    tcase_add_test(tc, test_e1_actorder);
    tcase_add_test(tc, test_legacy_packing);
    tcase_add_test(tc, test_e2_fp8_block);
    tcase_add_test(tc, test_e3_nvfp4);
    tcase_add_test(tc, test_mxfp4_vector);
    tcase_add_test(tc, test_mxfp8_and_dense);
    tcase_add_test(tc, test_quantize_pack_dequantize);
    tcase_add_test(tc, test_tensor_sets);
    suite_add_tcase(s, tc);
    tc = tcase_create("bad_input");
    tcase_add_loop_test(tc, test_bad_input, 0, (int)N_BAD);
    tcase_add_test(tc, test_nomem_everywhere);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(dequant_suite)

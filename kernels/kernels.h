/*
 * kernels.h - pure compute kernels: number formats, packing, dequantization,
 * activation quantizers, writer-side weight quantizers and matmul.
 *
 * Rules for everything declared here:
 * - No allocation, no globals, no failure paths.  Callers (src/) validate
 *   shapes, dtypes and values first; a kernel's preconditions are written at
 *   its declaration and only checked with assert().
 * - Tensor data read from checkpoints is taken as `const void *` and read
 *   byte by byte as little-endian, so it may have any alignment.
 * - Reference kernels end in `_ref`.  SIMD twins (kernels/x86/) keep the same
 *   signatures and are tested against them.
 * - Matrices are row-major.  A weight is [rows = out, cols = in].
 *
 * The numeric rules are those of compressed-tensors 0.18 ("CT"); the
 * paragraph of shared/spec/compressed-tensors-format.md is given where it
 * matters.
 */
#ifndef MOEQ_KERNELS_H
#define MOEQ_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "moeq/moeq.h" /* moeq_dtype, moeq_strategy, moeq_qtype */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
/* Loads below are byte-order free, but float reinterpretation via memcpy and
 * the writer-side uint32_t words assume a little-endian host. */
#error "moeq kernels assume a little-endian host"
#endif

_Static_assert(sizeof(float) == 4, "float must be IEEE-754 binary32");
_Static_assert(sizeof(double) == 8, "double must be IEEE-754 binary64");

/* ------------------------------------------------------------------------ */
/* Little-endian loads from tensors of any alignment                          */
/* ------------------------------------------------------------------------ */

static inline uint16_t moeq__load_u16(const void *p, size_t i) {
    const uint8_t *b = (const uint8_t *)p + 2 * i;
    return (uint16_t)(b[0] | (b[1] << 8));
}

static inline uint32_t moeq__load_u32(const void *p, size_t i) {
    const uint8_t *b = (const uint8_t *)p + 4 * i;
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
           ((uint32_t)b[3] << 24);
}

static inline uint64_t moeq__load_u64(const void *p, size_t i) {
    const uint8_t *b = (const uint8_t *)p + 8 * i;
    return (uint64_t)moeq__load_u32(b, 0) | ((uint64_t)moeq__load_u32(b, 1) << 32);
}

/* A float's bits and back (memcpy: no aliasing questions). */
static inline uint32_t moeq__f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float moeq__bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ------------------------------------------------------------------------ */
/* half.c: f32 <-> bf16 / f16, generic narrow float rounding                  */
/* ------------------------------------------------------------------------ */

/* Rounds the magnitude of a finite |x| to a float format with `ebits`
 * exponent bits (IEEE bias 2^(ebits-1)-1, subnormals) and `mbits` mantissa
 * bits, round to nearest even.  Returns the magnitude code
 * (exponent << mbits | mantissa) without sign; it may exceed the format's
 * largest finite code (the caller decides between inf, NaN and saturation).
 * Precondition: x finite, 2 <= ebits <= 8, 1 <= mbits <= 10. */
uint32_t moeq__f32_to_minifloat_mag(float x, int ebits, int mbits);
/* Value of a magnitude code of that format (exponent field not all-ones
 * unless the caller knows it is finite there, as for E4M3FN). */
float moeq__minifloat_mag_to_f32(uint32_t mag, int ebits, int mbits);

/* Inline: the writers convert element by element, and a call per element
 * was a fifth of their time. */
static inline float moeq__bf16_to_f32(uint16_t h) {
    return moeq__bits_f32((uint32_t)h << 16);
}
/* Round to nearest even; NaN stays NaN (quiet, sign kept); overflow -> inf. */
static inline uint16_t moeq__f32_to_bf16(float x) {
    const uint32_t u = moeq__f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    /* Round to nearest even on the low 16 bits; a carry into the exponent
     * gives the next binade or inf, which is what IEEE rounding wants. */
    const uint32_t lsb = (u >> 16) & 1u;
    return (uint16_t)((u + 0x7FFFu + lsb) >> 16);
}
float moeq__f16_to_f32(uint16_t h);
/* Round to nearest even, subnormals exact, overflow -> inf, NaN stays NaN. */
uint16_t moeq__f32_to_f16(float x);

/* ------------------------------------------------------------------------ */
/* fp8.c: FP8 E4M3FN and E5M2                                                 */
/* ------------------------------------------------------------------------ */

#define MOEQ__E4M3_MAX 448.0f
#define MOEQ__E4M3_NAN 0x7Fu

/* All 256 codes: bias 7, subnormals, no infinities, 0x7F/0xFF NaN. */
float moeq__e4m3_to_f32(uint8_t b);
/* CT's encoding: clamp to [-448, 448], then round to nearest even.  So
 * +-inf and anything beyond 448 saturate to 0x7E/0xFE.  NaN -> 0x7F with the
 * sign bit kept (0xFF for a negative NaN), as torch does.  -0 -> 0x80. */
uint8_t moeq__f32_to_e4m3(float x);
/* Bias 15, 0x7C/0xFC infinities, 0x7D..0x7F/0xFD..0xFF NaN. */
float moeq__e5m2_to_f32(uint8_t b);
/* Round to nearest even, overflow -> inf (as torch), NaN -> 0x7F|sign. */
uint8_t moeq__f32_to_e5m2(float x);

/* ------------------------------------------------------------------------ */
/* convert.c: arrays of any float dtype <-> f32                               */
/* ------------------------------------------------------------------------ */

/* dst[i] = f32(src[i]) for dtype F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I8,
 * U8, I16, U16, I32.  F64 and I32 round to nearest even. */
void moeq__to_f32_ref(int32_t dtype, const void *src, size_t n, float *dst);
/* Writes n elements of dtype F64, F32, F16, BF16, F8_E4M3 or F8_E5M2 (each
 * with the rounding of its scalar converter) to dst, any alignment. */
void moeq__from_f32_ref(int32_t dtype, const float *src, size_t n, void *dst);
/* dst[j][i] = src[i][j] for i < rows, j < cols, elements of es bytes (any
 * alignment); src rows are src_ld elements apart, dst rows dst_ld.  In
 * 32 x 32 tiles: the loaders' transposed parameters. */
void moeq__transpose_ref(const void *src, size_t rows, size_t cols, size_t src_ld, void *dst,
                         size_t dst_ld, size_t es);
/* x rounded to dtype (F32: unchanged; BF16, F16: round to nearest even) and
 * widened back: what torch stores after an op on tensors of that dtype.
 * Inline, as the bf16 conversions (per element in the writers). */
static inline float moeq__round_to_dtype(int32_t dtype, float x) {
    switch (dtype) {
        case MOEQ_DTYPE_BF16: return moeq__bf16_to_f32(moeq__f32_to_bf16(x));
        case MOEQ_DTYPE_F16: return moeq__f16_to_f32(moeq__f32_to_f16(x));
        default: return x;
    }
}
/* torch.finfo(dtype).eps for F32, BF16, F16: CT's substitute for zero scales. */
float moeq__dtype_eps(int32_t dtype);
/* torch.round: nearest integer, ties to even, whatever the FPU rounding mode;
 * NaN and +-inf are returned unchanged; negative x that round to zero give +0.
 * Inline and branch-free (the quantizers call it per element, on data whose
 * fractions no branch predictor guesses).  The conversion truncates toward
 * zero in any mode, and below 2^23 both i and the fraction x - i are exact. */
static inline float moeq__round_half_even(float x) {
    const uint32_t ax = moeq__f32_bits(x) & 0x7FFFFFFFu;
    if (ax >= 0x4B000000u || ax == 0) return x; /* |x| >= 2^23 (an integer), NaN/inf, +-0 */
    const int32_t i = (int32_t)x;
    const float frac = x - (float)i; /* in (-1, 1), the sign of x */
    const int32_t odd = i & 1;
    const int32_t up = (frac > 0.5f) | ((frac == 0.5f) & odd);
    const int32_t down = (frac < -0.5f) | ((frac == -0.5f) & odd);
    return (float)(i + up - down);
}

/* ------------------------------------------------------------------------ */
/* fp4.c: E2M1, nibble packing, E8M0, round_to_power_2                        */
/* ------------------------------------------------------------------------ */

#define MOEQ__E2M1_MAX 6.0f

/* Code 0..15: bit 3 = sign, bits 0..2 index {0, .5, 1, 1.5, 2, 3, 4, 6}. */
float moeq__e2m1_to_f32(uint8_t code);
/* CT's cast_to_fp4 (eager path): round |x| on the E2M1 grid with the
 * boundaries of spec §4.2 (0.25, 1.25, 2.5, 5 round down; 0.75, 1.75, 3.5
 * round up; > 5 -> 6), times torch.sign(x).  Consequences kept on purpose:
 * a small negative gives -0.0, but an input of -0.0 gives +0.0 (sign(-0) is
 * 0); NaN stays NaN. */
float moeq__fp4_round_ref(float x);
/* CT's pack_fp4_to_uint8 code of a value already on the E2M1 grid: sign from
 * the sign bit (so -0.0 -> 0x8), magnitude from trunc(|2x|) by equality
 * (1,2,3,4,6,8 -> 1..6, >= 12 -> 7, anything else, NaN included -> 0). */
uint8_t moeq__fp4_code_ref(float v);
/* out[k] = codes[2k] | codes[2k+1] << 4 (even element in the LOW nibble);
 * for odd n the last high nibble is 0.  Writes ceil(n/2) bytes. */
void moeq__fp4_pack_ref(const uint8_t *codes, size_t n, uint8_t *out);
/* Stores code (0..15) as element c of a packed row, keeping the other nibble. */
void moeq__fp4_set_ref(uint8_t *packed, size_t c, uint8_t code);
/* Decodes elements [first, first+n) of a packed row to floats. */
void moeq__fp4_unpack_ref(const void *packed, size_t first, size_t n, float *out);

/* fp6.c: FP6 E2M3 (MXFP6), four codes little-endian in three bytes */
#define MOEQ__E2M3_MAX 7.5f
/* Code 0..63: bit 5 = sign, bits 3..4 exponent (bias 1), bits 0..2 mantissa:
 * m/8 when the exponent is 0, else (1 + m/8) * 2^(e-1); max 7.5. */
float moeq__e2m3_to_f32(uint8_t code);
/* 8 * the value of a code: an integer in [-60, 60] (-0 -> 0). */
int8_t moeq__e2m3_times8(uint8_t code);
/* CT's cast_to_fp6: step 2^(max(floor(log2|x|), 0) - 3), |x| rounded to a
 * multiple of it (ties to even), at most 7.5, with the sign of x (so -0.0
 * stays -0.0); NaN stays NaN. */
float moeq__fp6_round_ref(float x);
/* CT's pack_fp6_to_uint8 code of a value on the E2M3 grid: magnitude index by
 * searchsorted on the 32 magnitudes, sign from the sign bit (-0.0 -> 0x20). */
uint8_t moeq__fp6_code_ref(float v);
/* Code c of a packed row: byte triple c/4 read as a little-endian 24-bit word,
 * bits 6 (c % 4) .. +5.  set keeps the other codes. */
uint8_t moeq__fp6_get(const uint8_t *row, size_t c);
void moeq__fp6_set_ref(uint8_t *row, size_t c, uint8_t code);
/* Decodes elements [first, first+n) of a packed row to floats. */
void moeq__fp6_unpack_ref(const void *packed, size_t first, size_t n, float *out);

/* 2^(e-127) exactly (e = 0 gives the f32 subnormal 2^-127, e = 255 gives inf,
 * as CT's bf16 decode does). */
float moeq__e8m0_to_f32(uint8_t e);
/* CT's compress_mx_scale: 127 + floor(log2(scale)), clamped to [0, 255]
 * (CT's uint8 cast would wrap; calibrated scales never get there).  NaN or
 * scale <= 0 -> 0, +inf -> 255. */
uint8_t moeq__e8m0_from_scale(float scale);
/* CT's round_to_power_2 on the f32 bit pattern: add 2^21 (a quarter of the
 * mantissa), keep sign and exponent.  So 1.7 -> 1, 1.75 -> 2, 6 -> 4; f32
 * subnormals -> 0. */
float moeq__round_to_power_2_ref(float x);
/* The MX scale exponent byte of a group whose absolute maximum is amax
 * (spec §3.7): clamp(127 + floor(log2(round_to_power_2(amax))) - elem_emax,
 * 0, 255); elem_emax is 2 for FP4 elements, 8 for FP8.  amax 0 -> 0, NaN -> 0,
 * inf -> 255. */
uint8_t moeq__mx_scale_byte_ref(float amax, int elem_emax);
/* The same for FP6 E2M3 elements (CT 0.20): round_to_power_2 at E2M3's 3
 * mantissa bits (add 2^19), so only a group max that would round past 7.5
 * bumps the exponent; elem_emax 2. */
uint8_t moeq__mx6_scale_byte_ref(float amax);

/* ------------------------------------------------------------------------ */
/* pack.c: pack-quantized integers (spec §3.4)                                */
/* ------------------------------------------------------------------------ */

/* int32 words holding n b-bit values: dense (0.18, ceil(n*b/32)) or legacy
 * (<= 0.17, floor(32/b) values per word, ceil(n / floor(32/b))). */
size_t moeq__int_packed_words(size_t n, int bits, bool legacy);
/* Packs one row of n signed values q in [-2^(b-1), 2^(b-1)-1]: offset by
 * +2^(b-1), LSB first; dense values may straddle words.  Writes exactly
 * moeq__int_packed_words(n, bits, legacy) words, unused bits zero. */
void moeq__int_pack_row_ref(const int8_t *q, size_t n, int bits, bool legacy,
                            uint32_t *words);
/* Unpacks elements [first, first+n) of one packed row (int32 words,
 * little-endian, any alignment) and subtracts 2^(b-1). */
void moeq__int_unpack_row_ref(const void *words, size_t first, size_t n, int bits,
                              bool legacy, int8_t *q);
/* Zero points [rows, cols] packed along dim 0 (spec §3.4: transpose, pack
 * each row, transpose back): out is [words(rows), cols]. */
void moeq__int_pack_cols_ref(const int8_t *v, size_t rows, size_t cols, int bits,
                             bool legacy, uint32_t *out);
/* Inverse of moeq__int_pack_cols_ref: packed [words(rows), cols] -> v [rows, cols]. */
void moeq__int_unpack_cols_ref(const void *packed, size_t rows, size_t cols, int bits,
                               bool legacy, int8_t *v);
/* SGLang's MxInt4 repack (sglang spec §13.3): n int4 values of one
 * pack-quantized row (4-bit words) -> ceil(n/2) bytes, two's-complement
 * nibbles, even element in the low nibble. */
void moeq__mxint4_repack_ref(const void *words, size_t n, uint8_t *bytes);
/* Inverse: signed nibble bytes -> pack-quantized 4-bit words (ceil(n/8)). */
void moeq__mxint4_unrepack_ref(const uint8_t *bytes, size_t n, uint32_t *words);

/* ------------------------------------------------------------------------ */
/* grid.c: which scale covers element (r, c)                                  */
/* ------------------------------------------------------------------------ */

/* The scale grid of a [rows, cols] weight (spec §1.6): element (r, c) uses
 * scale[(r / row_block) * cols_of_grid + c / col_block] (or g_idx[c] for the
 * column with actorder).  row_block and col_block are never 0. */
typedef struct moeq__grid {
    size_t rows, cols;           /* grid shape */
    size_t row_block, col_block; /* weight rows / cols per scale */
} moeq__grid;

/* TENSOR: 1x1.  CHANNEL: [rows, 1].  GROUP, TENSOR_GROUP: [rows,
 * ceil(cols/gs)].  BLOCK: [ceil(rows/bh), ceil(cols/bw)].  Returns false for
 * TOKEN and ATTN_HEAD (no weight grid) or a zero group/block size. */
bool moeq__scale_grid(int32_t strategy, size_t rows, size_t cols, size_t group_size,
                      size_t block_rows, size_t block_cols, moeq__grid *out);

/* ------------------------------------------------------------------------ */
/* dequant.c: quantized weight -> f32                                          */
/* ------------------------------------------------------------------------ */

/* How the codes of a weight are stored. */
typedef enum moeq__qw_kind {
    MOEQ__QW_INT_PACKED = 0,   /* pack-quantized int32 words, `bits` per value */
    MOEQ__QW_I8 = 1,           /* one signed integer per element */
    MOEQ__QW_I16 = 2,
    MOEQ__QW_I32 = 3,
    MOEQ__QW_E4M3 = 4,         /* one FP8 E4M3FN byte per element */
    MOEQ__QW_E2M1 = 5,         /* two FP4 codes per byte, even element low */
    MOEQ__QW_INT4_NIBBLES = 6, /* MxInt4 repack: two signed int4 per byte, even low */
    MOEQ__QW_F32 = 7,          /* unquantized weights: the value itself, scale NULL */
    MOEQ__QW_F16 = 8,
    MOEQ__QW_BF16 = 9,
    MOEQ__QW_F64 = 10,
    MOEQ__QW_PACKED = 11, /* the kernels' blocked layout (moeq__packed, see packed.c) */
    MOEQ__QW_E2M3 = 12    /* FP6 E2M3 codes, four in three bytes (moeq__fp6_get) */
} moeq__qw_kind;

struct moeq__packed;

/* A quantized weight ready for the kernel: codes in place, scales already
 * decoded to f32 (bf16/f16 widened, E4M3 decoded, E8M0 -> 2^(e-127), NVFP4
 * local scale divided by the global scale in f32 as CT does). */
typedef struct moeq__qweight {
    int32_t kind;            /* moeq__qw_kind */
    int32_t bits;            /* INT_PACKED: 1..8 */
    int32_t legacy;          /* INT_PACKED: 1 for the <= 0.17 word layout */
    size_t rows, cols;       /* logical [out, in] */
    const void *codes;       /* little-endian, any alignment */
    size_t row_stride;       /* bytes from one row of codes to the next */
    moeq__grid grid;         /* scale grid (moeq__scale_grid) */
    const float *scale;      /* [grid.rows * grid.cols]; NULL for the float kinds */
    const float *zero_point; /* NULL (symmetric) or [grid.rows * grid.cols] integers */
    const int32_t *g_idx;    /* NULL, or [cols] scale column per weight column, < grid.cols */
    const struct moeq__packed *pk; /* PACKED: codes and scales live here (scale, zero_point,
                                      g_idx and codes are unused) */
} moeq__qweight;

/* Decodes codes [first, first+n) of row r to floats, before scaling
 * (integers as floats, FP8/FP4 values). */
void moeq__decode_row_ref(const moeq__qweight *w, size_t r, size_t first, size_t n,
                          float *out);
/* out[i*cols + c] = (code(row0+i, c) - zp[g]) * scale[g] in f32, for
 * i < nrows, where g is the scale cell of (row0+i, c).  For BF16/F16 scales
 * and codes of at most 8 bits the f32 product is exact, so rounding it once
 * to the scale dtype reproduces CT's result (spec §4.2). */
void moeq__dequant_ref(const moeq__qweight *w, size_t row0, size_t nrows, float *out);

/* ------------------------------------------------------------------------ */
/* actquant.c: activation quantizers as inference engines apply them         */
/* ------------------------------------------------------------------------ */

/* Each quantizer has a dequantize twin so callers can build "same math"
 * references.  x is row-major [m, k] f32.  Division (x / s), not
 * multiplication by 1/s, is used throughout. */

#define MOEQ__ACT_INT8_EPS 1e-10f  /* lower bound of amax, dynamic int8 */
#define MOEQ__ACT_FP8_EPS 1e-12f   /* lower bound of amax, dynamic FP8 per token/tensor */
#define MOEQ__ACT_FP8_GROUP_EPS 1e-10f /* per-token-group FP8 (SGLang's eps) */

/* Dynamic per-token symmetric int8: s[i] = max(amax_i, 1e-10) / 127,
 * q = clamp(round_half_even(x / s), -128, 127) (|q| <= 127 in practice);
 * NaN -> 0. */
void moeq__actq_int8_token_ref(const float *x, size_t m, size_t k, int8_t *q, float *s);
/* Static int8 with a given scale and zero point (0 for symmetric):
 * q = clamp(round_half_even(x / s + zp), -128, 127); NaN -> zp. */
void moeq__actq_int8_static_ref(const float *x, size_t n, float s, int32_t zp, int8_t *q);
/* out = (q - zp) * s[i * s_stride + c / gs]: s_stride 1 and gs = k for per
 * token, s_stride 0 and gs = k for per tensor (zp_row NULL = 0; else zp per row). */
void moeq__actdq_int8_ref(const int8_t *q, size_t m, size_t k, const float *s,
                          size_t s_stride, size_t gs, const int32_t *zp_row, float *out);

/* Dynamic per-token FP8: s[i] = max(amax_i, 1e-12) / 448,
 * q = e4m3(clamp(x / s, -448, 448)). */
void moeq__actq_fp8_token_ref(const float *x, size_t m, size_t k, uint8_t *q, float *s);
/* Dynamic per-tensor FP8 over all n values; returns the scale. */
float moeq__actq_fp8_tensor_ref(const float *x, size_t n, uint8_t *q);
/* Dynamic per-token-group FP8 (1 x gs groups, the last may be partial):
 * s[i * ceil(k/gs) + j] = max(amax_ij, 1e-10) / 448. */
void moeq__actq_fp8_group_ref(const float *x, size_t m, size_t k, size_t gs, uint8_t *q,
                              float *s);
/* Static FP8 with a given scale: q = e4m3(clamp(x / s, -448, 448)). */
void moeq__actq_fp8_static_ref(const float *x, size_t n, float s, uint8_t *q);
/* out = e4m3(q) * s[i * s_stride + c / gs] (see moeq__actdq_int8_ref). */
void moeq__actdq_fp8_ref(const uint8_t *q, size_t m, size_t k, const float *s,
                         size_t s_stride, size_t gs, float *out);

/* NVFP4 "local" activations (CT fake-quant with input_global_scale gsc,
 * groups of 16 along k): sf = e4m3(gsc * (amax_block / 6)) with 0 -> 0.125
 * (CT's eps for an E4M3 scale), eff = f32(sf) / gsc,
 * q = cast_to_fp4(clamp(x / eff, -6, 6)).  packed [m, k/2] (k even),
 * sf [m, ceil(k/16)] E4M3 bytes. */
void moeq__actq_nvfp4_ref(const float *x, size_t m, size_t k, float gsc, uint8_t *packed,
                          uint8_t *sf);
/* out = e2m1 * (f32(sf) / gsc). */
void moeq__actdq_nvfp4_ref(const uint8_t *packed, size_t m, size_t k, const uint8_t *sf,
                           float gsc, float *out);
/* Dynamic MXFP4 (groups of 32): e = moeq__mx_scale_byte_ref(amax, 2),
 * q = cast_to_fp4(clamp(x / 2^(e-127), -6, 6)).  packed [m, k/2], e [m, ceil(k/32)]. */
void moeq__actq_mxfp4_ref(const float *x, size_t m, size_t k, uint8_t *packed, uint8_t *e);
void moeq__actdq_mxfp4_ref(const uint8_t *packed, size_t m, size_t k, const uint8_t *e,
                           float *out);
/* Dynamic MXFP8 (groups of 32, CT 0.20's MXFP8 / MXFP6A8 inputs):
 * e = moeq__mx_scale_byte_ref(amax, 8), s = 2^(e-127),
 * q = e4m3(clamp(x / s, +-448)), one byte per value; e [m, ceil(k/32)]. */
void moeq__actq_mxfp8_ref(const float *x, size_t m, size_t k, uint8_t *q, uint8_t *e);
void moeq__actdq_mxfp8_ref(const uint8_t *q, size_t m, size_t k, const uint8_t *e, float *out);

/* ------------------------------------------------------------------------ */
/* quantize.c: writer-side weight quantizers reproducing CT §4.3              */
/* ------------------------------------------------------------------------ */

/* What to quantize to.  `dtype` is the weight's dtype (F32, BF16 or F16):
 * CT computes the observer min/max, the scale and the quantized value in it
 * (the scale parameter has the weight's dtype), so every step is rounded to
 * it as torch does (moeq__round_to_dtype).  Weights are passed as f32
 * holding values of that dtype. */
typedef struct moeq__wquant {
    int32_t type;       /* MOEQ_QTYPE_INT or MOEQ_QTYPE_FLOAT */
    int32_t bits;       /* int: 1..8; float: 8 (E4M3) or 4 (E2M1) */
    int32_t symmetric;  /* int only; float is symmetric */
    int32_t strategy;   /* TENSOR, CHANNEL, GROUP, BLOCK (int/FP8); TENSOR_GROUP (NVFP4);
                           GROUP (MX) */
    int32_t group_size;
    int32_t block_rows, block_cols;
    int32_t dtype;      /* F32, BF16 or F16 */
} moeq__wquant;

/* Integer weights (pack/naive/int-quantized).  Per scale cell (grid of
 * moeq__scale_grid; with g_idx the cell of group g is every column c with
 * g_idx[c] == g): min/max forced to include 0; symmetric
 * s = amax / ((2^b - 1) / 2), zp = 0; asymmetric s = (max - min) / (2^b - 1),
 * zp = clamp(-2^(b-1) - min / s) rounded half-even (from the unrounded s);
 * zero scales become eps(dtype); q = round_half_even(clamp(x / s + zp)).
 * scale [grid], zp [grid] (NULL when symmetric), q [rows, cols]. */
void moeq__quantize_int_ref(const moeq__wquant *a, const float *w, size_t rows, size_t cols,
                            const int32_t *g_idx, float *scale, int8_t *zp, int8_t *q);
/* FP8 E4M3 weights, symmetric: s = amax / 448, zero -> eps(dtype),
 * q = e4m3(clamp(x / s, +-448)).  scale [grid], q [rows, cols] bytes. */
void moeq__quantize_fp8_ref(const moeq__wquant *a, const float *w, size_t rows, size_t cols,
                            float *scale, uint8_t *q);
/* CT's generate_gparam: 448 * 6 / max(amax, tiny(dtype)) in dtype, computed as
 * torch does it, round(round(1 / amax) * 2688) (a Python scalar divided by a
 * tensor is a reciprocal and a product); NaN/inf -> 1; returned as f32. */
float moeq__nvfp4_global_scale_ref(float amax, int32_t dtype);
/* NVFP4 weights (tensor_group, group_size from `a`, usually 16): local
 * s = e4m3(global * (amax_g / 6)), 0 -> 0.125; eff = f32(s) / global;
 * q = cast_to_fp4(clamp(x / eff, +-6)).  scale [rows, ceil(cols/gs)] E4M3
 * bytes, packed [rows, cols/2] (cols even). */
void moeq__quantize_nvfp4_ref(const moeq__wquant *a, const float *w, size_t rows,
                              size_t cols, float global, uint8_t *scale, uint8_t *packed);
/* MXFP4 weights (group 32): e = moeq__mx_scale_byte_ref(amax_g, 2),
 * s = 2^(e-127) in dtype (0 -> 1), q = cast_to_fp4(clamp(x / s, +-6)).
 * scale [rows, ceil(cols/gs)] E8M0 bytes (compress_mx_scale of s), packed
 * [rows, cols/2] (cols even). */
void moeq__quantize_mxfp4_ref(const moeq__wquant *a, const float *w, size_t rows,
                              size_t cols, uint8_t *scale, uint8_t *packed);
/* MXFP6 weights: as MXFP4 with round_to_power_2 at E2M3's mantissa (add 2^19
 * to the f32 pattern) and q = cast_to_fp6(clamp(x / s, +-7.5)); packed
 * [rows, 3*cols/4] (cols a multiple of 4). */
void moeq__quantize_mxfp6_ref(const moeq__wquant *a, const float *w, size_t rows,
                              size_t cols, uint8_t *scale, uint8_t *packed);
/* MXFP8 weights: as MXFP4 with elem_emax 8 and q = e4m3(clamp(x / s, +-448)). */
void moeq__quantize_mxfp8_ref(const moeq__wquant *a, const float *w, size_t rows,
                              size_t cols, uint8_t *scale, uint8_t *q);

/* ------------------------------------------------------------------------ */
/* gemm.c and blas.c: matmul                                                  */
/* ------------------------------------------------------------------------ */

/* y[m, n] = x[m, k] . w[n, k]^T, accumulating in double, rounded once. */
void moeq__matmul_f64_ref(const float *x, const float *w, size_t m, size_t n, size_t k,
                          float *y);
/* c[m, n] = a[m, k] . b[n, k]^T with OpenBLAS cblas_sgemm (row-major, b
 * transposed; OpenBLAS is loaded on first use), or moeq__sgemm_nt_plain when
 * it cannot be loaded.  Precondition: m, n, k <= INT_MAX. */
void moeq__sgemm_nt(const float *a, const float *b, size_t m, size_t n, size_t k, float *c);
/* The same product by a plain loop (each c element summed in k order). */
void moeq__sgemm_nt_plain(const float *a, const float *b, size_t m, size_t n, size_t k,
                          float *c);
/* Whether OpenBLAS was (or now can be) loaded. */
bool moeq__blas_available(void);
/* The reference matmul path: dequantize w to f32 into w_f32 [rows * cols]
 * (caller's buffer), then y[m, rows] = x[m, cols] . w^T with sgemm. */
void moeq__matmul_dequant_ref(const moeq__qweight *w, const float *x, size_t m,
                              float *w_f32, float *y);

/* ------------------------------------------------------------------------ */
/* packed.c: the blocked weight layout the fast kernels stream                */
/* ------------------------------------------------------------------------ */

/* Rows are grouped in blocks of 16 (the last block padded with zero codes and
 * scales).  Inside a block the codes of one column k for all 16 rows are
 * adjacent, so one load feeds 16 output rows:
 *   NIB  (4-bit codes, decoded through lut[16]): 32-byte chunks of 4 columns;
 *        byte i of the chunk of columns 4j..4j+3 (q = i & 15) holds, in its low
 *        nibble, column 4j + (q >> 3), row 8 * (q & 1) + ((q >> 1) & 3) +
 *        4 * (i >> 4), and in its high nibble the same row at column
 *        4j + 2 + (q >> 3) (the order the AVX2 decode produces);
 *   I4   (4-bit integer codes whose scales are all >= 2^-114,
 *        stored as n = q + 8 in 0..15): 64-byte chunks of 8 columns; the
 *        little-endian 32-bit word 8 * (r >> 3) + (r & 7) of the chunk of
 *        columns 8j..8j+7 (row r) holds column 8j + i in bits 4i..4i+3 (the
 *        SIMD decode masks a nibble and converts the integer, no table);
 *   I8, E4M3 (one byte per code): 16 bytes per column, row r at byte r.
 * Scales: one per (row, group of gsize columns), stored [block][group][16] in
 * the narrowest form that holds every value exactly (scale_kind).
 * Values are kept in "kernel units": code value kv and scale ks with
 * kv * ks == the reference's code * scale exactly (E4M3 codes are read as
 * value * 2^-8 and their scales as scale * 2^8, which is how the SIMD kernels
 * decode them through F16C). */
#define MOEQ__PK_ROWS 16
#define MOEQ__PK_KALIGN 8 /* cols and gsize are multiples of this */

typedef enum moeq__pk_code {
    MOEQ__PK_NIB = 0,
    MOEQ__PK_I8 = 1,
    MOEQ__PK_E4M3 = 2,
    MOEQ__PK_I4 = 3
} moeq__pk_code;
/* Bytes of one column's codes in a block (16 rows): 4-bit or 8-bit codes. */
#define MOEQ__PK_COL_BYTES(code) ((code) == MOEQ__PK_NIB || (code) == MOEQ__PK_I4 ? 8u : 16u)
typedef enum moeq__pk_scale {
    MOEQ__PS_F32 = 0,
    MOEQ__PS_F16 = 1,
    MOEQ__PS_BF16 = 2,
    MOEQ__PS_E4M3_DIV = 3, /* e4m3(byte) / gdiv, in f32 (NVFP4's local / global) */
    MOEQ__PS_E8M0 = 4      /* 2^(byte - 127) */
} moeq__pk_scale;

typedef struct moeq__packed {
    int32_t code;       /* moeq__pk_code */
    int32_t scale_kind; /* moeq__pk_scale */
    size_t rows, cols;
    size_t blocks;        /* ceil(rows / 16) */
    size_t gsize, groups; /* cols == gsize * groups */
    size_t blk_code_bytes, blk_scale_bytes;
    const uint8_t *codes;  /* [blocks][blk_code_bytes] */
    const uint8_t *scales; /* [blocks][groups][16] of scale_kind */
    float gdiv;            /* E4M3_DIV divisor */
    float scale_mul;       /* ks = decoded scale * scale_mul (256 for E4M3 codes, else 1) */
    float scale_fold;      /* stored scale = reference scale * scale_fold: 1/8 for E2M3
                              codes (stored as I8 codes 8 * value), else 1; exact */
    float lut[16];         /* NIB: kernel value of each nibble */
    uint8_t lut_bf16[2][16]; /* NIB: low and high byte of the bfloat16 of lut[i] (exact) */
    bool bf16_scaled;        /* every kv * ks is zero or a normal bfloat16 (exact): set after
                                moeq__pk_fill by moeq__pk_bf16_scaled */
} moeq__packed;

/* Asks for the codes of columns [k0, k0 + nk) of block b ahead of use (clipped
 * to the weight; nothing past its last block): the int8 and fp4 paths read
 * codes once, from DRAM, between long runs of integer products. */
static inline void moeq__pk_fetch_cols(const moeq__packed *pk, size_t b, size_t k0, size_t nk) {
    if (b >= pk->blocks || k0 >= pk->cols) return;
    if (k0 + nk > pk->cols) nk = pk->cols - k0;
    const size_t per = MOEQ__PK_COL_BYTES(pk->code);
    const uint8_t *p = pk->codes + b * pk->blk_code_bytes + k0 * per;
    for (size_t o = 0; o < nk * per; o += 64) __builtin_prefetch(p + o, 0, 2);
}

/* Bytes per element of a scale kind.  Inline: the SIMD kernels ask once per
 * scale group, and a call there would clobber every vector register. */
static inline size_t moeq__pk_scale_size(int32_t scale_kind) {
    return scale_kind == MOEQ__PS_F32 ? 4u : scale_kind <= MOEQ__PS_BF16 ? 2u : 1u;
}
/* Plans the packed form of w (codes of kind INT_PACKED <= 8 bits, INT4_NIBBLES,
 * E2M1, I8, E2M3 (as I8: 8 * value, scales / 8) or E4M3; no zero point or g_idx; cols and the scale group a
 * multiple of 8; scales exactly representable in one of the kinds above).
 * gdiv_hint > 0 proposes the E4M3_DIV divisor.  Fills everything but the
 * codes/scales pointers.  Returns false when w cannot be packed. */
bool moeq__pk_plan(const moeq__qweight *w, float gdiv_hint, moeq__packed *out);
/* Whether every scaled value kv * ks of a filled pk (its real rows) is zero or
 * a normal bfloat16, exactly, and a multiple of 2^-19 (so that its products
 * with tile_bf16's inputs are multiples of 2^-126, as unscaled code values'
 * are): I4, NIB or I8 codes (at most 8 significant bits) with E8M0 scales
 * (powers of two) whose exponents keep every product within those bounds.
 * Then panel_bf16 may scale. */
bool moeq__pk_bf16_scaled(const moeq__packed *pk);
/* Writes the codes ([blocks * blk_code_bytes]) and scales
 * ([blocks * blk_scale_bytes]) of a planned w.  row_buf: cols bytes. */
void moeq__pk_fill(const moeq__qweight *w, const moeq__packed *pk, uint8_t *codes,
                   uint8_t *scales, uint8_t *row_buf);
/* The group sums gemv_bf16 reads with I4 codes: out[g] = the sum of the
 * bfloat16 values x[k] of group g (cols a multiple of gsize, both multiples
 * of 8) in 8 float lanes (k % 8, in k order) added as ((l0+l4)+(l2+l6)) +
 * ((l1+l5)+(l3+l7)), as i4_prep sums its float rows.  Portable C shared by
 * every table, so their gemv_bf16 outputs agree. */
void moeq__bf16_group_sums(const uint16_t *x, size_t cols, size_t gsize, float *out);
/* Kernel units of one element / one scale (row r, column c, group g). */
float moeq__pk_kv(const moeq__packed *pk, size_t r, size_t c);
float moeq__pk_ks(const moeq__packed *pk, size_t r, size_t g);
/* The reference decode of a packed weight: the code's true value (before
 * scaling), and out[i*cols + c] = kv * ks for rows row0.. (what
 * moeq__dequant_ref returns for a PACKED qweight). */
void moeq__pk_decode_row_ref(const moeq__packed *pk, size_t r, size_t first, size_t n,
                             float *out);
void moeq__pk_dequant_ref(const moeq__packed *pk, size_t row0, size_t nrows, float *out);

/* ------------------------------------------------------------------------ */
/* The fast kernels: a table per instruction set (ref/kern_portable.c is     */
/* portable C, x86/kern_avx2.c needs AVX2+FMA+F16C, x86/kern_avx512.c adds    */
/* AVX-512 VNNI+VBMI kernels to the AVX2 table).  Each entry of every SIMD    */
/* table is tested against the portable one (tests/check_simd.c).            */
/* ------------------------------------------------------------------------ */

#define MOEQ__GEMV_MAX 4 /* tokens per gemv call */

/* The SIMD gemv kernels' dispatch, for the pk and M in scope: F(code, m)
 * with pk->code and M (1, 2, 3, or 4 for more) as compile-time constants. */
#define MOEQ__GEMV_DISPATCH(F)                                                                     \
    switch (pk->code) {                                                                            \
        case MOEQ__PK_I4: MOEQ__GEMV_ROWS(F, MOEQ__PK_I4) break;                                    \
        case MOEQ__PK_NIB: MOEQ__GEMV_ROWS(F, MOEQ__PK_NIB) break;                                  \
        case MOEQ__PK_E4M3: MOEQ__GEMV_ROWS(F, MOEQ__PK_E4M3) break;                                \
        default: MOEQ__GEMV_ROWS(F, MOEQ__PK_I8) break;                                             \
    }
#define MOEQ__GEMV_ROWS(F, code)                                                                   \
    switch (M) {                                                                                   \
        case 1: F(code, 1); break;                                                                 \
        case 2: F(code, 2); break;                                                                 \
        case 3: F(code, 3); break;                                                                 \
        default: F(code, 4); break;                                                                \
    }
#define MOEQ__TILE_MAX    6      /* tokens per register tile of the AVX2 tile and int8 idot */
#define MOEQ__TILE_Z_MAX  12     /* tokens per register tile of the avx512 tile and tile_bf16 */
#define MOEQ__TILE_BLOCKS 2      /* most tile_blocks of a table (callers hold that many panels) */
#define MOEQ__IDOT_MAX    12     /* tokens per register tile of the avx512 idot */
#define MOEQ__IDOT_BLOCKS 2      /* most blocks per idot call (idot_blocks) */
#define MOEQ__FDOT_BLOCKS 2      /* blocks per fdot call in moe_fast.c (any number is valid) */
#define MOEQ__IDOT_KMAX   131070 /* columns per idot call: the int32 sums cannot overflow */

/* How a table that tiles an expert's M rows (tile, tile_bf16, idot) splits
 * them into tiles of at most max rows, as even as they come: moeq__ntiles
 * tiles, tile t holding moeq__tile_rows of them.  A row's result does not
 * depend on the tile it is in. */
static inline size_t moeq__ntiles(size_t M, size_t max) {
    return (M + max - 1) / max;
}
static inline size_t moeq__tile_rows(size_t M, size_t ntile, size_t t) {
    return M / ntile + (t < M % ntile);
}

/* A row of int8 activation codes as idot reads it (cols a multiple of 8),
 * the same codes in two widths so that each kernel loads the one it
 * multiplies, made once per row (moeq__i8row_fill) for every block. */
typedef struct moeq__i8row {
    const int16_t *w;  /* [cols]: the codes, in [-128, 127] */
    const int8_t *b;   /* [cols]: the same codes as bytes */
    const int32_t *ps; /* [cols / 8 + 1]: ps[j] = the sum of the codes of columns < 8 j */
} moeq__i8row;
/* b and ps of a row of cols codes q (cols a multiple of 8).  Portable C
 * shared by every table. */
void moeq__i8row_fill(const int16_t *q, size_t cols, int8_t *b, int32_t *ps);

/* idot_groups by a table's own idot and iscale: each group's columns in
 * windows of at most MOEQ__IDOT_WIN (a window of the blocks stays in L1
 * across the table's tiles of rows), into S, then scaled into C.  For more
 * than MOEQ__TILE_MAX rows the codes of the windows two ahead are asked for
 * first: between long runs of products they come from DRAM once.  Shared by
 * the tables whose idot has no fused form for pk. */
#define MOEQ__IDOT_WIN 256
typedef void moeq__idot_fn(const moeq__packed *pk, size_t blk, size_t nb, size_t k0, size_t nk,
                           size_t M, const moeq__i8row *x, int32_t *C, size_t ldc, int accumulate);
typedef void moeq__iscale_fn(const moeq__packed *pk, size_t blk, size_t g, size_t M,
                             const int32_t *S, size_t lds, float *C, size_t ldc, int first);
void moeq__idot_groups_by(moeq__idot_fn *idot, moeq__iscale_fn *iscale, const moeq__packed *pk,
                          size_t blk, size_t nb, size_t M, const moeq__i8row *x, float *C,
                          size_t ldc, int32_t *S, size_t lds);

/* A row of NVFP4 activation codes as fdot reads it (cols a multiple of 16). */
typedef struct moeq__fp4row {
    const int8_t *v;      /* [cols]: 2 * the E2M1 value of each code, in [-12, 12], column k
                             at v[moeq__fp4_pos(k)] */
    const float *sc;      /* [cols / 16]: the E4M3 value of each group's local scale */
    const int32_t *sum12; /* [cols / 16]: 12 * the sum of the group's v */
} moeq__fp4row;

/* Where column k sits in a moeq__fp4row's v: within each 8 columns the order
 * is 0, 1, 4, 5, 2, 3, 6, 7 (bits 1 and 2 of k swapped, a map that is its
 * own inverse), the order in which the SIMD fdot kernels meet a NIB block's
 * codes: the low nibbles of two 4-column chunks, then their high nibbles. */
static inline size_t moeq__fp4_pos(size_t k) {
    return (k & ~(size_t)6) | ((k & 2u) << 1) | ((k & 4u) >> 1);
}

typedef struct moeq__kern {
    const char *name;
    /* P[k - k0][r] = kv * ks of row blk*16 + r, column k, for k in [k0, k0 + nk);
     * k0 and nk multiples of 8.  Exact: equal to moeq__pk_dequant_ref. */
    void (*panel)(const moeq__packed *pk, size_t blk, size_t k0, size_t nk, float *P);
    /* y[m*ldy + r] = sum_k x[m][k] * w(blk*16 + r, k) for m < M <= 4, r < 16, in
     * a fixed order: per scale group, partial sums of kv*x over k in `phases`
     * interleaved chains (4 for M = 1, 2 for M = 2, else 1) added pairwise,
     * then total = fma(partial, ks, total).  E4M3_DIV scales enter undivided
     * (e4m3(b) * 2^-8 * scale_mul) and the totals are divided once by
     * gdiv * 2^-8 at the end.  I4 codes: x[m] is a row made by i4_prep, the
     * chains sum (n * 2^(4i)) * xp[k] with the stored n = kv + 8 and
     * i = k % 4, which is n * x[k] exactly (unless x[k] * 2^-12 is
     * subnormal), and a group's partial is then partial - 8 * S_g.
     * Bit-identical across tables. */
    void (*gemv)(const moeq__packed *pk, size_t blk, size_t M, const float *const *x, float *y,
                 size_t ldy);
    /* The row an I4 gemv reads for one token x[cols] (gsize: the weight's scale
     * group, cols a multiple of it, both multiples of 8): out[k] = x[k] *
     * 2^(-4 (k % 4)) for k < cols, then out[cols + g] = S_g, the sum of the
     * x[k] of group g in 8 lanes (k % 8, in k order) added as
     * ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).  Bit-identical across tables. */
    void (*i4_prep)(const float *x, size_t cols, size_t gsize, float *out);
    /* For nb >= 1 blocks side by side, block i's panel at P + i * nk * 16
     * (panel's layout, nk columns each):
     * C[m*ldc + 16 i + r] = (accumulate ? C : 0) + sum_{k < nk} x[m][k] *
     * P[i*nk*16 + k*16 + r] for m < M (any number: each table tiles the
     * tokens as its registers allow), each element one fused multiply-add
     * chain in k order, whatever nb is. */
    void (*tile)(const float *P, size_t nk, size_t nb, size_t M, const float *const *x, float *C,
                 size_t ldc, int accumulate);
    /* How many blocks (1 .. MOEQ__TILE_BLOCKS) the caller should hand this
     * table's tile per call: the number it runs in one pass over the panels
     * (more would only make the caller decode panels that wait in L1 while
     * the first block runs); 0 (a table that does not say, as kern_ab's
     * old files may be) counts as 1.  Speed only: tile takes any nb. */
    size_t tile_blocks;
    /* Products of bfloat16 inputs (FP8 activation codes, or bf16 inputs of
     * weight-only layers) and code values, exact in float32: every packed
     * code value kv is a bfloat16 (integers up to 8 bits, E2M1 and NIB
     * tables, E4M3 * 2^-8).  panel_bf16: for k in [k0, k0 + nk),
     * Pb[((k - k0) / 2) * 32 + 2 r + k % 2] = bfloat16 of kv(blk*16 + r, k),
     * or with `scaled` (only where pk->bf16_scaled) of kv * ks (the scale of
     * k's group, moeq__pk_ks); k0, nk multiples of 8.  Exact. */
    void (*panel_bf16)(const moeq__packed *pk, size_t blk, size_t k0, size_t nk, uint16_t *Pb,
                       int scaled);
    /* C[m*ldc + r] = (accumulate ? C + S : S) for m < M (any number: each
     * table tiles the tokens as its registers allow), r < 16, where,
     * with w the bfloat16 panel above (nk columns, a multiple of 4) and x[m] a
     * row of bfloat16 values (none subnormal, and every product a multiple of
     * a power of two no smaller than 2^-126, so that no sum is subnormal
     * either: vdpbf16ps would flush it), the column pairs p = 0 .. nk/2 - 1 go
     * into two float32 chains, e (even p) and o (odd p), each pair adding
     * w(2p+1) * x(2p+1) and then w(2p) * x(2p) (each product exact, each
     * sum rounded: what vdpbf16ps does per lane), and S = e + o.
     * Bit-identical across tables. */
    void (*tile_bf16)(const uint16_t *Pb, size_t nk, size_t M, const uint16_t *const *x, float *C,
                      size_t ldc, int accumulate);
    /* gemv for rows of bfloat16 values (tile_bf16's x: none subnormal, and
     * every product a multiple of a power of two no smaller than 2^-126):
     * y[m*ldy + r] = sum_k x[m][k] * w(blk*16 + r, k) for m < M <= 4, r < 16,
     * codes decoded in registers.  Per scale group, its column pairs
     * (2p, 2p + 1), p counted from the group's start, go into C chains (4
     * for M = 1, else 2), pair p into chain p % C, each pair adding
     * kv(2p+1) * x(2p+1) and then kv(2p) * x(2p) (exact products, rounded
     * sums: one vdpbf16ps lane); the group's partial is (c0 + c1) +
     * (c2 + c3), or c0 + c1, and total = fma(partial, ks, total) with gemv's
     * scales (E4M3_DIV undivided, the totals divided once by gdiv * 2^-8 at
     * the end).  I4 codes: the chains take u = 1 + n/16 (n the stored
     * nibble, u a bfloat16 that two bit operations make, where kv = n - 8
     * needs a table lookup) in place of kv, and the group's partial is then
     * fma(-24, S_g, 16 * partial), S_g = xsum[m][g] from
     * moeq__bf16_group_sums (16u - 24 = kv: the same sum, its terms 16 + n
     * instead of n - 8 costing about two bits of the float32 sums'
     * precision).  xsum: I4 only (other codes: may be NULL).
     * Bit-identical across tables. */
    void (*gemv_bf16)(const moeq__packed *pk, size_t blk, size_t M, const uint16_t *const *x,
                      const float *const *xsum, float *y, size_t ldy);
    /* Integer products for int8 activations on I8 or I4 codes (W8A8, W4A8),
     * for nb <= MOEQ__IDOT_BLOCKS consecutive blocks blk .. blk + nb - 1:
     * C[m*ldc + 16 i + r] = (accumulate ? C : 0)
     *                       + sum_{k0 <= k < k0 + nk} q((blk + i)*16 + r, k) * x[m][k]
     * in int32 for m < M (any number: each table tiles the tokens as its
     * registers need), i < nb, r < 16 (ldc >= 16 nb), where q is the code's
     * integer (I8: the stored byte, I4: the stored n - 8) and x[m] a row of
     * activation codes.  k0 and nk multiples of 8, nk <= MOEQ__IDOT_KMAX, so
     * every sum is exact and the same in any order. */
    void (*idot)(const moeq__packed *pk, size_t blk, size_t nb, size_t k0, size_t nk, size_t M,
                 const moeq__i8row *x, int32_t *C, size_t ldc, int accumulate);
    /* How many consecutive blocks (1 .. MOEQ__IDOT_BLOCKS) the caller should
     * hand this table's idot_groups per call for codes `code` (I8 or I4) and
     * M rows: the number its kernels run fastest as measured (one makes
     * walking the scale groups read a block's codes from DRAM in order,
     * one stream, instead of alternating between blocks every group; more
     * share each activation load among the blocks).  Speed only:
     * idot and idot_groups take any nb and give the same results. */
    size_t (*idot_blocks)(int32_t code, size_t M);
    /* idot and iscale over all of the blocks' scale groups in one call:
     * for nb <= MOEQ__IDOT_BLOCKS consecutive blocks, m < M, i < nb, r < 16,
     * C[m*ldc + 16 i + r] = sum over the groups g in order of float(S_g) *
     * ks((blk + i)*16 + r, g), the first group's term assigned and each
     * later one added (a product, then a sum), where S_g is the exact
     * integer sum idot gives over group g's columns: the same bits as idot
     * on each group (in windows of any width) followed by iscale, group
     * after group.  gsize <= MOEQ__IDOT_KMAX.  S: M rows of lds >= 16 nb
     * int32, scratch the kernel may use. */
    void (*idot_groups)(const moeq__packed *pk, size_t blk, size_t nb, size_t M,
                        const moeq__i8row *x, float *C, size_t ldc, int32_t *S, size_t lds);
    /* idot's sums into floats, one scale group g at a time: for m < M, r < 16,
     * t = float(S[m*lds + r]) * ks(blk*16 + r, g) (the kernel-unit scale, as
     * moeq__pk_ks), C[m*ldc + r] = first ? t : C[m*ldc + r] + t (a product,
     * then a sum).  Bit-identical across tables. */
    void (*iscale)(const moeq__packed *pk, size_t blk, size_t g, size_t M, const int32_t *S,
                   size_t lds, float *C, size_t ldc, int first);
    /* iscale for float sums (tile_bf16's, one scale group g at a time), each
     * row with its own factor: for m < M, r < 16, t = (S[m*lds + r] *
     * ks(blk*16 + r, g)) * (xs ? xs[m][g] : 1), C[m*ldc + r] = first ? t :
     * C[m*ldc + r] + t (two products, then a sum).  Bit-identical across
     * tables. */
    void (*fscale)(const moeq__packed *pk, size_t blk, size_t g, size_t M, const float *S,
                   size_t lds, const float *const *xs, float *C, size_t ldc, int first);
    /* Integer products for NVFP4 activations on NVFP4 weights (W4A4): pk holds
     * E2M1 codes (NIB, lut = the E2M1 values) with E4M3_DIV scales and
     * gsize 16.  For each of the nb (any number) consecutive blocks
     * blk + i, m < M (any number), r < 16 (ldy >= 16 nb):
     *   y[m*ldy + 16 i + r] = acc after, for each group g in order,
     *   acc = fma(float(S_g), ws_g * x[m].sc[g], acc) from acc = 0,
     * where S_g = sum over the group's k of (2 * kv) * x[m].v[moeq__fp4_pos(k)], exact in
     * integers, and ws_g = e4m3(b) * 2^-8 (the scale gemv applies undivided).
     * The caller divides by gdiv * 2^-8 * 4 * (the activations' global scale).
     * Bit-identical across tables, and a block's result does not depend on
     * nb (tables may share the activations' loads between blocks). */
    void (*fdot)(const moeq__packed *pk, size_t blk, size_t nb, size_t M, const moeq__fp4row *x,
                 float *y, size_t ldy);
    /* One row of n values (n a multiple of 16) quantized to NVFP4 with global
     * scale gsc exactly as moeq__actq_nvfp4_ref does, written as fdot reads
     * it: v[moeq__fp4_pos(k)] = 2 * e2m1(code k), sc[g] = e4m3(scale byte
     * g), sum12[g]. */
    void (*q_nvfp4)(const float *x, size_t n, float gsc, int8_t *v, float *sc, int32_t *sum12);
    /* q[i] = clamp(round_half_even(x[i] / s), -128, 127), NaN -> 0: the int8
     * code qdq_int8 multiplies by s (moeq__actq_int8_static_ref, zero point 0). */
    void (*q_int8)(const float *x, size_t n, float s, int16_t *q);
    /* b[i] = the bfloat16 of e4m3(clamp(x[i] / s, +-448)), NaN -> +0: the
     * code value qdq_fp8 multiplies by s (moeq__actq_fp8_static_ref). */
    void (*q_fp8_bf16)(const float *x, size_t n, float s, uint16_t *b);
    /* max |x[i]| (NaN ignored); the activation quantize-dequantize steps
     * exactly as moeq__actq_*_ref followed by moeq__actdq_*_ref. */
    float (*amax)(const float *x, size_t n);
    void (*qdq_int8)(const float *x, size_t n, float s, float *out);
    void (*qdq_fp8)(const float *x, size_t n, float s, float *out);
    /* one row of n values (n a multiple of 16), NVFP4 with global scale gsc */
    void (*qdq_nvfp4)(const float *x, size_t n, float gsc, float *out);
    /* a[i] = silu(g) * u with g = min(g[i], limit), u = clamp(u[i], +-limit) when
     * limit > 0; silu(g) = g / (1 + exp(-g)).  The SIMD tables use their own
     * exp (within 2 ulp of expf), so this one entry is not bit-exact. */
    void (*silu_mul)(const float *g, const float *u, float *a, size_t n, float limit);
    /* acc[i] = acc[i] + w * y[i] (a product, then a sum: no fused multiply-add) */
    void (*axpy)(float *acc, const float *y, float w, size_t n);
    /* bf16 <-> f32 (moeq__bf16_to_f32 / moeq__f32_to_bf16 element by element) */
    void (*bf16_to_f32)(const uint16_t *src, size_t n, float *dst);
    void (*f32_to_bf16)(const float *src, size_t n, uint16_t *dst);
} moeq__kern;

extern const moeq__kern moeq__kern_portable;
#if defined(MOEQ_HAVE_X86) && MOEQ_HAVE_X86
extern const moeq__kern moeq__kern_avx2;
#endif
#if defined(MOEQ_HAVE_AVX512) && MOEQ_HAVE_AVX512
/* kern_avx512.c: turns a copy of the AVX2 table into the AVX-512 one; with
 * `bf16` (the CPU runs AVX512_BF16, as cpu.c found) also its vdpbf16ps
 * kernels.  The dispatcher passes the feature down, so this file never
 * calls back into cpu.c. */
void moeq__kern_avx512_fill(moeq__kern *t, bool bf16);
#endif
/* cpu.c: what this CPU and OS run: 0 (portable only), 1 (AVX2 + FMA + F16C)
 * or 2 (also AVX-512 F, BW, VL, VNNI and VBMI, when the build has them). */
int moeq__cpu_level(void);
/* Whether this CPU and OS run AVX512_BF16 (vdpbf16ps) too, at level 2. */
bool moeq__cpu_avx512bf16(void);
/* Whether a context's forwards take the bfloat16 path (tile_bf16,
 * gemv_bf16) for FP8 activations and weight-only layers' bf16 inputs: 1 or
 * 0 as MOEQ_BF16_PATH says (on, off), by default (unset, empty or auto)
 * where the CPU has AVX512_BF16 and its vdpbf16ps is not slower than the
 * float path's FMAs; -1 when MOEQ_BF16_PATH names none of these. */
int moeq__bf16_path(void);
/* The table of a level (0 portable, 1 avx2, 2 avx512), or of the highest
 * level at or below it that this CPU runs. */
const moeq__kern *moeq__kern_level(int level);
/* The level MOEQ_KERNELS names (portable, avx2, avx512); 2 when it is unset
 * or empty, -1 when it names none of these. */
int moeq__kern_env_cap(void);
/* The best table this CPU runs under MOEQ_KERNELS (portable when
 * `portable_only`; an unknown MOEQ_KERNELS caps nothing here). */
const moeq__kern *moeq__kern_best(bool portable_only);

#endif /* MOEQ_KERNELS_H */

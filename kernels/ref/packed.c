/*
 * packed.c - the blocked weight layout of the fast kernels (kernels.h,
 * "packed.c"): planning, filling, and the reference reads of it.
 *
 * Packing changes where codes and scales are stored, never their values: for
 * every element, kv * ks equals the reference's code * scale bit for bit, so
 * moeq__dequant_ref of a PACKED weight returns what it returned before.
 */
#include "kernels.h"

#include <assert.h>
#include <math.h>
#include <string.h>

static bool same_bits(float a, float b) {
    return moeq__f32_bits(a) == moeq__f32_bits(b);
}

static float e8m0_value(uint8_t e) {
    return e ? moeq__bits_f32((uint32_t)e << 23) : moeq__bits_f32(0x00400000u);
}

/* ---- scale storage ---------------------------------------------------------------- */

static float decode_scale(const moeq__packed *pk, const uint8_t *p) {
    switch (pk->scale_kind) {
        case MOEQ__PS_F32: return moeq__bits_f32(moeq__load_u32(p, 0));
        case MOEQ__PS_F16: return moeq__f16_to_f32(moeq__load_u16(p, 0));
        case MOEQ__PS_BF16: return moeq__bf16_to_f32(moeq__load_u16(p, 0));
        case MOEQ__PS_E4M3_DIV: return moeq__e4m3_to_f32(p[0]) / pk->gdiv;
        default: return e8m0_value(p[0]);
    }
}

/* Encodes s in the kind; false when it does not hold s exactly. */
static bool encode_scale(int32_t kind, float gdiv, float s, uint8_t *out) {
    switch (kind) {
        case MOEQ__PS_F32: {
            const uint32_t u = moeq__f32_bits(s);
            for (int i = 0; i < 4; i++) out[i] = (uint8_t)(u >> (8 * i));
            return true;
        }
        case MOEQ__PS_F16: {
            const uint16_t h = moeq__f32_to_f16(s);
            out[0] = (uint8_t)h;
            out[1] = (uint8_t)(h >> 8);
            return same_bits(moeq__f16_to_f32(h), s);
        }
        case MOEQ__PS_BF16: { /* exact iff the low 16 bits are zero (and s is no NaN) */
            const uint32_t u = moeq__f32_bits(s);
            if ((u & 0xFFFFu) || (u & 0x7F800000u) == 0x7F800000u) return false;
            out[0] = (uint8_t)(u >> 16);
            out[1] = (uint8_t)(u >> 24);
            return true;
        }
        case MOEQ__PS_E4M3_DIV: {
            if (!(gdiv > 0.0f) || !isfinite(s)) return false;
            const uint8_t b0 = moeq__f32_to_e4m3(s * gdiv);
            /* s came from f32(b) / gdiv: b is the rounded product or a neighbour */
            for (int d = -1; d <= 1; d++) {
                const int b = (int)b0 + d;
                if (b < 0 || b > 255 || (b & 0x7F) == 0x7F) continue;
                if (same_bits(moeq__e4m3_to_f32((uint8_t)b) / gdiv, s)) {
                    out[0] = (uint8_t)b;
                    return true;
                }
            }
            return false;
        }
        default: { /* E8M0 */
            const uint32_t u = moeq__f32_bits(s);
            if (u == 0x00400000u) {
                out[0] = 0;
                return true;
            }
            if ((u & 0x807FFFFFu) || u == 0 || (u >> 23) == 0xFF) return false;
            out[0] = (uint8_t)(u >> 23);
            return true;
        }
    }
}

/* The scales of row r.  The reference scale of element (r, c) is
 * scale[(r / row_block) * grid cols + c / col_block]; in a packable weight the
 * scale groups along the columns are the packed groups (gsize is col_block,
 * or cols when col_block >= cols, and cols is a multiple of it), so group gi
 * of row r reads [gi] of this row. */
static const float *scale_row(const moeq__qweight *w, size_t r) {
    return w->scale + (r / w->grid.row_block) * w->grid.cols;
}

/* ---- planning ---------------------------------------------------------------------- */

/* The I4 kernels scale each scale by 2^-12 and back (kernels.h, "I4"): exact
 * for every scale in [2^-114, inf).  A zero or negative scale could also give
 * a zero of the other sign than kv * ks; such weights keep the NIB layout. */
static bool i4_scales_ok(const moeq__qweight *w, const moeq__packed *pk) {
    for (size_t r = 0; r < w->rows; r += w->grid.row_block) {
        const float *sr = scale_row(w, r);
        for (size_t gi = 0; gi < pk->groups; gi++) {
            if (!(sr[gi] >= 0x1p-114f)) return false;
        }
    }
    return true;
}

bool moeq__pk_plan(const moeq__qweight *w, float gdiv_hint, moeq__packed *pk) {
    memset(pk, 0, sizeof *pk);
    if (!w->scale || w->zero_point || w->g_idx || w->rows == 0) return false;
    if (w->cols == 0 || w->cols % MOEQ__PK_KALIGN) return false;
    pk->rows = w->rows;
    pk->cols = w->cols;
    pk->blocks = (w->rows + MOEQ__PK_ROWS - 1) / MOEQ__PK_ROWS;
    pk->scale_mul = 1.0f;
    pk->scale_fold = 1.0f;
    switch (w->kind) {
        case MOEQ__QW_INT_PACKED:
            if (w->bits < 1 || w->bits > 8) return false;
            pk->code = w->bits <= 4 ? MOEQ__PK_NIB : MOEQ__PK_I8;
            for (int n = 0; n < 16; n++) pk->lut[n] = (float)(n - 8);
            break;
        case MOEQ__QW_INT4_NIBBLES:
            pk->code = MOEQ__PK_NIB;
            for (int n = 0; n < 16; n++) pk->lut[n] = (float)((n ^ 8) - 8);
            break;
        case MOEQ__QW_E2M1:
            pk->code = MOEQ__PK_NIB;
            for (int n = 0; n < 16; n++) pk->lut[n] = moeq__e2m1_to_f32((uint8_t)n);
            break;
        case MOEQ__QW_I8: pk->code = MOEQ__PK_I8; break;
        case MOEQ__QW_E2M3: /* 8 * value, an integer in [-60, 60], with the scale / 8
                               (exact; only code 0x20, -0.0, packs as +0.0) */
            pk->code = MOEQ__PK_I8;
            pk->scale_fold = 0.125f;
            break;
        case MOEQ__QW_E4M3:
            pk->code = MOEQ__PK_E4M3;
            pk->scale_mul = 256.0f;
            break;
        default: return false;
    }
    if (pk->code == MOEQ__PK_NIB) {
        for (int n = 0; n < 16; n++) {
            const uint16_t h = moeq__f32_to_bf16(pk->lut[n]);
            if (!same_bits(moeq__bf16_to_f32(h), pk->lut[n])) return false;
            pk->lut_bf16[0][n] = (uint8_t)h;
            pk->lut_bf16[1][n] = (uint8_t)(h >> 8);
        }
    }
    /* Scale groups along the columns: every (row, column) must read the scale
     * of cell (r / row_block, c / gsize). */
    const moeq__grid *g = &w->grid;
    const size_t gsize = g->col_block >= w->cols ? w->cols : g->col_block;
    if (gsize == 0 || w->cols % gsize || gsize % MOEQ__PK_KALIGN) return false;
    pk->gsize = gsize;
    pk->groups = w->cols / gsize;
    /* The narrowest exact scale storage. */
    static const int32_t order[] = {MOEQ__PS_E8M0, MOEQ__PS_E4M3_DIV, MOEQ__PS_BF16, MOEQ__PS_F16,
                                    MOEQ__PS_F32};
    pk->scale_kind = -1;
    for (size_t o = 0; o < sizeof order / sizeof order[0] && pk->scale_kind < 0; o++) {
        if (order[o] == MOEQ__PS_E4M3_DIV && !(gdiv_hint > 0.0f)) continue;
        bool ok = true;
        for (size_t r = 0; r < w->rows && ok; r += g->row_block) {
            const float *sr = scale_row(w, r);
            for (size_t gi = 0; gi < pk->groups && ok; gi++) {
                const float s = sr[gi] * pk->scale_fold;
                uint8_t tmp[4];
                ok = isfinite(s) && isfinite(s * pk->scale_mul) &&
                     encode_scale(order[o], gdiv_hint, s, tmp);
            }
        }
        if (ok) pk->scale_kind = order[o];
    }
    if (pk->scale_kind < 0) return false;
    pk->gdiv = pk->scale_kind == MOEQ__PS_E4M3_DIV ? gdiv_hint : 0.0f;
    /* 4-bit integers: I4 (its sums of n = q + 8 lose about 2 bits to the offset
     * -8 * S; with 2 or 3 bits, where |q| is smaller still, they stay NIB) */
    const bool int4 =
        w->kind == MOEQ__QW_INT4_NIBBLES || (w->kind == MOEQ__QW_INT_PACKED && w->bits == 4);
    if (pk->code == MOEQ__PK_NIB && int4 && i4_scales_ok(w, pk)) {
        pk->code = MOEQ__PK_I4;
    }
    pk->blk_code_bytes = w->cols * MOEQ__PK_COL_BYTES(pk->code);
    pk->blk_scale_bytes = pk->groups * MOEQ__PK_ROWS * moeq__pk_scale_size(pk->scale_kind);
    return true;
}

/* ---- filling ----------------------------------------------------------------------- */

/* Position of (row-in-block r, column k) among a NIB block's codes. */
static size_t nib_byte(size_t r, size_t k, unsigned *shift) {
    const size_t j = k >> 2, kk = k & 3u, rr = r & 7u;
    *shift = kk >= 2 ? 4u : 0u;
    return j * 32 + (rr >> 2) * 16 + ((kk & 1u) << 3) + ((rr & 3u) << 1) + (r >> 3);
}

/* Position of (row-in-block r, column k) among an I4 block's codes: the
 * little-endian word of row r in the 64-byte chunk of columns k & ~7, nibble
 * k & 7. */
static size_t i4_byte(size_t r, size_t k, unsigned *shift) {
    *shift = (k & 1u) ? 4u : 0u;
    return (k >> 3) * 64 + (r >> 3) * 32 + (r & 7u) * 4 + ((k & 7u) >> 1);
}

/* The raw codes of row r as nibbles (0..15) or bytes. */
static void row_codes(const moeq__qweight *w, const moeq__packed *pk, size_t r, uint8_t *out) {
    const uint8_t *row = (const uint8_t *)w->codes + r * w->row_stride;
    const size_t n = w->cols;
    switch (w->kind) {
        case MOEQ__QW_INT_PACKED: {
            if (w->bits == 8) { /* one value per byte, either layout: u = q + 128 */
                for (size_t c = 0; c < n; c++) out[c] = (uint8_t)(row[c] ^ 0x80u);
            } else if (w->bits == 4) { /* two per byte, low nibble first: u = q + 8 */
                for (size_t c = 0; c < n; c++) {
                    const unsigned u = (c & 1u) ? row[c >> 1] >> 4 : row[c >> 1] & 0xFu;
                    out[c] = (uint8_t)(u - 8u);
                }
            } else {
                moeq__int_unpack_row_ref(row, 0, n, w->bits, w->legacy != 0, (int8_t *)out);
            }
            if (pk->code == MOEQ__PK_NIB || pk->code == MOEQ__PK_I4) {
                for (size_t c = 0; c < n; c++) out[c] = (uint8_t)((int8_t)out[c] + 8);
            }
            break;
        }
        case MOEQ__QW_INT4_NIBBLES:
        case MOEQ__QW_E2M1:
            for (size_t c = 0; c < n; c++) {
                out[c] = (uint8_t)((c & 1u) ? row[c >> 1] >> 4 : row[c >> 1] & 0xFu);
            }
            if (pk->code == MOEQ__PK_I4) { /* two's complement q -> q + 8 */
                for (size_t c = 0; c < n; c++) out[c] ^= 8u;
            }
            break;
        case MOEQ__QW_E2M3:
            for (size_t c = 0; c < n; c++) out[c] = (uint8_t)moeq__e2m3_times8(moeq__fp6_get(row, c));
            break;
        default: memcpy(out, row, n); break; /* I8, E4M3 */
    }
}

/* I4 codes straight from 4-bit words: word j of row r (columns 8j..8j+7 in
 * bits 4i, LSB first) is, as stored or with every nibble's sign bit flipped,
 * the I4 word of (r, chunk j) - pack-quantized rows hold n = q + 8 already
 * (both layouts put 8 values in a word), INT4_NIBBLES rows two's-complement q.
 * Rows past w->rows stay as the caller preset them. */
static void fill_i4_words(const moeq__qweight *w, size_t b, uint8_t *bc) {
    const uint32_t flip = w->kind == MOEQ__QW_INT4_NIBBLES ? 0x88888888u : 0u;
    const size_t words = w->cols / 8;
    for (size_t rr = 0; rr < MOEQ__PK_ROWS; rr++) {
        const size_t r = b * MOEQ__PK_ROWS + rr;
        if (r >= w->rows) break;
        const uint8_t *row = (const uint8_t *)w->codes + r * w->row_stride;
        uint8_t *dst = bc + rr * 4;
        for (size_t j = 0; j < words; j++) {
            uint32_t v;
            memcpy(&v, row + j * 4, 4); /* little-endian hosts (kernels.h) */
            v ^= flip;
            memcpy(dst + j * 64, &v, 4);
        }
    }
}

void moeq__pk_fill(const moeq__qweight *w, const moeq__packed *pk, uint8_t *codes, uint8_t *scales,
                   uint8_t *row_buf) {
    const size_t ss = moeq__pk_scale_size(pk->scale_kind);
    uint8_t zero_nib = 0;
    if (pk->code == MOEQ__PK_NIB) {
        for (int n = 0; n < 16; n++) {
            if (same_bits(pk->lut[n], 0.0f)) {
                zero_nib = (uint8_t)n;
                break;
            }
        }
    }
    const bool i4_words =
        pk->code == MOEQ__PK_I4 &&
        (w->kind == MOEQ__QW_INT4_NIBBLES || (w->kind == MOEQ__QW_INT_PACKED && w->bits == 4));
    const size_t full = w->rows / MOEQ__PK_ROWS;         /* blocks without padding rows */
    memset(scales, 0, pk->blocks * pk->blk_scale_bytes); /* padding rows: scale 0 (E8M0: tiny) */
    for (size_t b = 0; b < pk->blocks; b++) {
        uint8_t *bc = codes + b * pk->blk_code_bytes;
        uint8_t *bs = scales + b * pk->blk_scale_bytes;
        if (b < full && (i4_words || pk->code == MOEQ__PK_I8 || pk->code == MOEQ__PK_E4M3)) {
            /* every code of the block is written below */
        } else if (pk->code == MOEQ__PK_NIB) {
            memset(bc, (int)(zero_nib | (zero_nib << 4)), pk->blk_code_bytes);
        } else if (pk->code == MOEQ__PK_I4) {
            memset(bc, 0x88, pk->blk_code_bytes); /* n = 8: value 0 */
        } else {
            memset(bc, 0, pk->blk_code_bytes);
        }
        if (i4_words) fill_i4_words(w, b, bc);
        for (size_t rr = 0; rr < MOEQ__PK_ROWS; rr++) {
            const size_t r = b * MOEQ__PK_ROWS + rr;
            if (r >= w->rows) break;
            if (!i4_words) {
                row_codes(w, pk, r, row_buf);
                if (pk->code == MOEQ__PK_NIB || pk->code == MOEQ__PK_I4) {
                    for (size_t k = 0; k < w->cols; k++) {
                        unsigned sh;
                        const size_t at =
                            pk->code == MOEQ__PK_NIB ? nib_byte(rr, k, &sh) : i4_byte(rr, k, &sh);
                        bc[at] = (uint8_t)((bc[at] & ~(0xFu << sh)) | ((unsigned)row_buf[k] << sh));
                    }
                } else {
                    for (size_t k = 0; k < w->cols; k++) bc[k * MOEQ__PK_ROWS + rr] = row_buf[k];
                }
            }
            const float *sr = scale_row(w, r);
            for (size_t gi = 0; gi < pk->groups; gi++) {
                const bool ok = encode_scale(pk->scale_kind, pk->gdiv, sr[gi] * pk->scale_fold,
                                             bs + (gi * MOEQ__PK_ROWS + rr) * ss);
                assert(ok);
                (void)ok;
            }
        }
    }
}

/* ---- reading ----------------------------------------------------------------------- */

void moeq__bf16_group_sums(const uint16_t *x, size_t cols, size_t gsize, float *out) {
    for (size_t g = 0; g * gsize < cols; g++) {
        float l[8] = {0};
        for (size_t k = g * gsize; k < (g + 1) * gsize; k += 8) {
            for (size_t j = 0; j < 8; j++) l[j] += moeq__bits_f32((uint32_t)x[k + j] << 16);
        }
        out[g] = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    }
}

void moeq__i8row_fill(const int16_t *q, size_t cols, int8_t *b, int32_t *ps) {
    /* unsigned: a sum wraps as int32 arithmetic would; idot takes differences
     * of them, which are exact (kernels.h, MOEQ__IDOT_KMAX) */
    uint32_t run = 0;
    ps[0] = 0;
    for (size_t j = 0; j < cols / 8; j++) {
        int32_t s = 0;
        for (size_t i = 0; i < 8; i++) {
            b[8 * j + i] = (int8_t)q[8 * j + i];
            s += q[8 * j + i];
        }
        run += (uint32_t)s;
        ps[j + 1] = (int32_t)run;
    }
}

void moeq__idot_groups_by(moeq__idot_fn *idot, moeq__iscale_fn *iscale, const moeq__packed *pk,
                          size_t blk, size_t nb, size_t M, const moeq__i8row *x, float *C,
                          size_t ldc, int32_t *S, size_t lds) {
    const size_t W = MOEQ__IDOT_WIN;
    const bool ahead = M > MOEQ__TILE_MAX;
    for (size_t i = 0; i < nb && ahead; i++) moeq__pk_fetch_cols(pk, blk + i, 0, 2 * W);
    for (size_t g = 0; g < pk->groups; g++) {
        const size_t g0 = g * pk->gsize, g1 = g0 + pk->gsize;
        for (size_t k0 = g0; k0 < g1; k0 += W) {
            const size_t nk = g1 - k0 < W ? g1 - k0 : W;
            for (size_t i = 0; i < nb && ahead; i++)
                moeq__pk_fetch_cols(pk, blk + i, k0 + 2 * W, W);
            idot(pk, blk, nb, k0, nk, M, x, S, lds, k0 > g0);
        }
        for (size_t i = 0; i < nb; i++) {
            iscale(pk, blk + i, g, M, S + 16 * i, lds, C + 16 * i, ldc, g == 0);
        }
    }
}

float moeq__pk_kv(const moeq__packed *pk, size_t r, size_t c) {
    const uint8_t *bc = pk->codes + (r / MOEQ__PK_ROWS) * pk->blk_code_bytes;
    const size_t rr = r % MOEQ__PK_ROWS;
    switch (pk->code) {
        case MOEQ__PK_NIB: {
            unsigned sh;
            const size_t at = nib_byte(rr, c, &sh);
            return pk->lut[(bc[at] >> sh) & 0xFu];
        }
        case MOEQ__PK_I4: {
            unsigned sh;
            const size_t at = i4_byte(rr, c, &sh);
            return (float)((int)((bc[at] >> sh) & 0xFu) - 8);
        }
        case MOEQ__PK_I8: return (float)(int8_t)bc[c * MOEQ__PK_ROWS + rr];
        default: return moeq__e4m3_to_f32(bc[c * MOEQ__PK_ROWS + rr]) * 0x1p-8f;
    }
}

float moeq__pk_ks(const moeq__packed *pk, size_t r, size_t g) {
    const size_t ss = moeq__pk_scale_size(pk->scale_kind);
    const uint8_t *p = pk->scales + (r / MOEQ__PK_ROWS) * pk->blk_scale_bytes +
                       (g * MOEQ__PK_ROWS + r % MOEQ__PK_ROWS) * ss;
    return decode_scale(pk, p) * pk->scale_mul;
}

void moeq__pk_decode_row_ref(const moeq__packed *pk, size_t r, size_t first, size_t n, float *out) {
    /* E4M3 codes are stored as value * 2^-8, E2M3 as 8 * value (scale_fold 1/8) */
    const float unit = pk->code == MOEQ__PK_E4M3 ? 256.0f : pk->scale_fold;
    for (size_t i = 0; i < n; i++) out[i] = moeq__pk_kv(pk, r, first + i) * unit;
}

void moeq__pk_dequant_ref(const moeq__packed *pk, size_t row0, size_t nrows, float *out) {
    for (size_t i = 0; i < nrows; i++) {
        const size_t r = row0 + i;
        for (size_t g = 0; g < pk->groups; g++) {
            const float ks = moeq__pk_ks(pk, r, g);
            for (size_t c = g * pk->gsize; c < (g + 1) * pk->gsize; c++) {
                out[i * pk->cols + c] = moeq__pk_kv(pk, r, c) * ks;
            }
        }
    }
}

bool moeq__pk_bf16_scaled(const moeq__packed *pk) {
    if (pk->scale_kind != MOEQ__PS_E8M0 || pk->code == MOEQ__PK_E4M3 || !pk->scales) return false;
    /* the exponents (floor of log2) of the smallest and largest nonzero |kv|,
     * and of the finest unit every kv is a multiple of */
    int kmin = 0, kmax = 0, kunit = 0;
    if (pk->code == MOEQ__PK_I4) {
        kmax = 3; /* |n - 8| <= 8, integers */
    } else if (pk->code == MOEQ__PK_I8) {
        kmax = 7; /* |q| <= 128, integers */
    } else {
        bool any = false;
        for (int n = 0; n < 16; n++) {
            if (pk->lut[n] == 0.0f) continue;
            int x;
            const float m = frexpf(pk->lut[n], &x); /* |m| in [0.5, 1), 24 bits */
            int u = x - 24;
            for (uint32_t i = (uint32_t)fabsf(ldexpf(m, 24)); !(i & 1u); i >>= 1) u++;
            kmin = any && kmin < x - 1 ? kmin : x - 1;
            kmax = any && kmax > x - 1 ? kmax : x - 1;
            kunit = any && kunit < u ? kunit : u;
            any = true;
        }
        if (!any) return true; /* every value is zero */
    }
    /* the scales' exponents (E8M0 byte e: 2^(e - 127), e = 0 the subnormal 2^-127) */
    int emin = 255, emax = 0;
    for (size_t r = 0; r < pk->rows; r++) {
        const uint8_t *p =
            pk->scales + (r / MOEQ__PK_ROWS) * pk->blk_scale_bytes + r % MOEQ__PK_ROWS;
        for (size_t g = 0; g < pk->groups; g++) {
            const int e = p[g * MOEQ__PK_ROWS];
            emin = e < emin ? e : emin;
            emax = e > emax ? e : emax;
        }
    }
    /* normal bfloat16s, and multiples of 2^-19: tile_bf16's inputs (bf16
     * values of at least 2^-100, multiples of 2^-107, or E4M3 codes) then
     * make products that are multiples of 2^-126, and no sum is subnormal */
    return pk->rows == 0 || (kmin + emin - 127 >= -126 && kmax + emax - 127 <= 127 &&
                             kunit + emin - 127 >= -19);
}

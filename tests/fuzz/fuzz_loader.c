/*
 * fuzz_loader.c - a small MoE layer of any of the 14 schemes, fed a sequence
 * of checkpoint tensors decoded from the input: moeq_moe_create (with args
 * the input may corrupt), moeq_moe_load, moeq_moe_missing, moeq_moe_finalize,
 * then moeq_moe_apply (twice, with contexts of 1 and 4 threads, which must
 * agree bit for bit) and moeq_moe_apply_reference on a few tokens with fuzzed
 * ids, weights and inputs (out-of-range ids, NaN weights and inputs), the ids
 * and weights coming from moeq_route on fuzzed logits when the input says so.
 *
 * Input layout (every field is a byte unless said otherwise; the input may
 * end anywhere, later reads give zeros):
 *   variant   which of k_variants (scheme, weight/input args, format)
 *   dims      bits 0-1 experts-1, 2-3 hidden, 4-5 intermediate, 6 bias
 *   layer     bits 0-1 activation, 2-3 params dtype, 4 no prefix,
 *             5 w1/w3/w2 names, 6 routed scaling 2.5, 7 router weight on input
 *   corrupt   bit 7: overwrite one args field (bits 0-3 which, bit 6 inputs)
 *             with the next u32
 *   fill      bits 0-1: how missing tensors are filled after the records
 *             (0/3 sane values, 1 raw input bytes, 2 not at all); bit 2 legacy
 *             packing flag; bit 3 swiglu limit; bits 4-5 expert placement
 *             (all, first_expert 1, a reversed expert_map, a map with a -1)
 *   records   count (bits 0-4), then per record an op and its fields (see
 *             run_record)
 *   apply     tokens/dtypes, top_k, ids, weights, x
 * Sane values are those a correct checkpoint holds (codes in range, positive
 * finite scales, g_idx below the group count, the right weight_shape), so
 * most inputs reach finalize and apply; records and raw fills bring the rest.
 */
#include "fuzz_common.h"
#include "../param_layout.h"

#include <math.h>
#include <stdbool.h>

typedef struct variant {
    const char *scheme; /* expected selection */
    const char *weights;
    const char *inputs;
    const char *format;
    int32_t platform, prefer_mxint4;
} variant;

#define INT4_G32 "{\"num_bits\":4,\"group_size\":32}"
#define INT8_TOKEN "{\"num_bits\":8,\"strategy\":\"token\",\"dynamic\":true}"
#define FP8_TOKEN "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"token\",\"dynamic\":true}"
#define NVFP4_W "{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\",\"group_size\":16}"

static const variant k_variants[] = {
    {"unquantized", "null", "null", "dense", 0, 0},
    {"unquantized", INT4_G32, "null", "dense", 0, 0},
    {"wna16", INT4_G32, "null", "pack-quantized", 0, 0},
    {"wna16", "{\"num_bits\":4,\"group_size\":32,\"symmetric\":false}", "null", "pack-quantized",
     0, 0},
    {"wna16", "{\"num_bits\":8,\"group_size\":-1}", "null", "pack-quantized", 0, 0},
    {"wna16", "{\"num_bits\":4,\"group_size\":16,\"actorder\":\"group\"}", "null",
     "pack-quantized", 0, 0},
    {"wna16", "{\"num_bits\":3,\"group_size\":32,\"symmetric\":false}", "null", "pack-quantized",
     0, 0},
    {"wna16", "{\"num_bits\":8,\"group_size\":32}", "null", "naive-quantized", 0, 0},
    {"wna16", "{\"num_bits\":4,\"strategy\":\"channel\",\"symmetric\":false}", "null",
     "int-quantized", 0, 0},
    {"mxint4", INT4_G32, "null", "pack-quantized", 0, 1},
    {"w4a16_nvfp4", NVFP4_W, "null", "nvfp4-pack-quantized", 0, 0},
    {"w4a4_nvfp4", NVFP4_W,
     "{\"num_bits\":4,\"type\":\"float\",\"strategy\":\"tensor_group\",\"group_size\":16,"
     "\"dynamic\":\"local\"}",
     "nvfp4-pack-quantized", 0, 0},
    {"w4a16_mxfp4", "{\"num_bits\":4,\"type\":\"float\",\"group_size\":32}", "null",
     "mxfp4-pack-quantized", 0, 0},
    {"w4a16_mxfp4", "{\"num_bits\":4,\"type\":\"float\",\"group_size\":32}",
     "{\"num_bits\":4,\"type\":\"float\",\"group_size\":32,\"dynamic\":true}",
     "mxfp4-pack-quantized", 0, 0},
    {"w8a16_fp8", "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}", "null",
     "naive-quantized", 0, 0},
    {"w8a16_fp8", "{\"num_bits\":8,\"type\":\"float\"}", "null", "float-quantized", 0, 0},
    {"w8a8_fp8", "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}", FP8_TOKEN,
     "float-quantized", 0, 0},
    {"w8a8_fp8", "{\"num_bits\":8,\"type\":\"float\"}", "{\"num_bits\":8,\"type\":\"float\"}",
     "float-quantized", 0, 0},
    {"w8a8_fp8",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"block\",\"block_structure\":[32,32]}",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"group\",\"group_size\":32,"
     "\"dynamic\":true}",
     "float-quantized", 0, 0},
    {"w8a8_fp8", "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}",
     "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\",\"dynamic\":true}",
     "float-quantized", 0, 0},
    {"w8a8_int8", "{\"num_bits\":8,\"strategy\":\"channel\"}", INT8_TOKEN, "int-quantized", 0, 0},
    {"w8a8_int8", "{\"num_bits\":8,\"strategy\":\"channel\"}", "{\"num_bits\":8}",
     "int-quantized", 0, 0},
    {"w8a8_int8", "{\"num_bits\":8,\"group_size\":32}",
     "{\"num_bits\":8,\"strategy\":\"tensor\",\"dynamic\":true}", "pack-quantized", 0, 0},
    {"w4a8_int8", INT4_G32, INT8_TOKEN, "int-quantized", 0, 0},
    {"w4a8_int8", "{\"num_bits\":4,\"group_size\":-1}", "{\"num_bits\":8}", "pack-quantized", 0,
     0},
    {"w4a8_fp8", INT4_G32, FP8_TOKEN, "pack-quantized", 0, 0},
    {"npu_w8a8_int8", "{\"num_bits\":8,\"strategy\":\"channel\"}", INT8_TOKEN, "int-quantized", 1,
     0},
    {"npu_w4a8_int8", "{\"num_bits\":4,\"group_size\":-1}", INT8_TOKEN, "int-quantized", 1, 0},
    {"npu_w4a8_int8", "{\"num_bits\":4,\"group_size\":-1}", INT8_TOKEN, "pack-quantized", 1, 0},
    {"npu_w4a16_int4", INT4_G32, "null", "pack-quantized", 1, 0},
};
#define N_VARIANTS (sizeof k_variants / sizeof k_variants[0])

typedef struct prepared {
    moeq_config *cfg;
    moeq_resolution res;
    int32_t scheme;
} prepared;

static prepared g_prep[N_VARIANTS];
static int g_ready;

static void cleanup(void) {
    for (size_t i = 0; i < N_VARIANTS; i++) moeq_config_destroy(g_prep[i].cfg);
}

static void setup(void) {
    if (g_ready) return;
    g_ready = 1;
    for (size_t i = 0; i < N_VARIANTS; i++) {
        const variant *v = &k_variants[i];
        char json[1024];
        snprintf(json, sizeof json,
                 "{\"quant_method\":\"compressed-tensors\",\"format\":\"mixed-precision\","
                 "\"config_groups\":{\"g\":{\"targets\":[\"re:.*experts.*\"],\"format\":\"%s\","
                 "\"weights\":%s,\"input_activations\":%s}}}",
                 v->format, v->weights, v->inputs);
        moeq_error err;
        moeq_selection sel;
        moeq_select_options so = {v->platform, v->prefer_mxint4};
        if (moeq_config_parse(json, strlen(json), NULL, &g_prep[i].cfg, &err) != MOEQ_STATUS_OK ||
            moeq_resolve_moe(g_prep[i].cfg, "m.experts", 1, NULL, NULL, &g_prep[i].res, &err) !=
                MOEQ_STATUS_OK ||
            moeq_select(&g_prep[i].res, "m.experts", &so, &sel, &err) != MOEQ_STATUS_OK) {
            fprintf(stderr, "fuzz_loader: variant %zu: %s\n", i, err.message);
            abort();
        }
        if (strcmp(moeq_scheme_name(sel.scheme), v->scheme) != 0) {
            fprintf(stderr, "fuzz_loader: variant %zu selects %s, not %s\n", i,
                    moeq_scheme_name(sel.scheme), v->scheme);
            abort();
        }
        g_prep[i].scheme = sel.scheme;
    }
    atexit(cleanup);
}

/* ---- the layer under test --------------------------------------------------------- */

typedef struct state {
    moeq_moe *layer;
    const moeq_moe_config *mc;
    int32_t E, E_local, H, I;
    int32_t local_to_global[8];
    const char *prefix; /* "" when none */
    const char *proj[3];
    int32_t bits, group;
} state;

static const char *suffix_of(const moeq_param *p) {
    return p->ckpt_suffix ? p->ckpt_suffix : "";
}

/* The checkpoint shape of one shard of p (moe.c's rule, from the public
 * manifest); the npu_w4a8_int8 weights, which have their own loader, take
 * the logical [out, in] int4 matrix as I8 values or I32 words. */
static int32_t ckpt_shape(const state *s, const moeq_param *p, int shard, int32_t dtype,
                          int64_t *shape) {
    const char *suf = suffix_of(p);
    if (s->mc->scheme == MOEQ_SCHEME_NPU_W4A8_INT8 &&
        (strcmp(suf, "weight") == 0 || strcmp(suf, "weight_packed") == 0)) {
        int64_t out = shard == 2 ? s->H : s->I, in = shard == 2 ? s->I : s->H;
        shape[0] = out;
        shape[1] = dtype == MOEQ_DTYPE_I32 ? (in + 7) / 8 : in;
        return 2;
    }
    return moeq_test_shard_shape(p, shape);
}

static void put_float(int32_t dtype, float v, uint8_t *dst) {
    if (dtype == MOEQ_DTYPE_F32) {
        memcpy(dst, &v, 4);
        return;
    }
    uint32_t u;
    memcpy(&u, &v, 4);
    uint16_t h;
    if (dtype == MOEQ_DTYPE_BF16) {
        h = (uint16_t)(u >> 16);
    } else { /* F16, for the small positive values used here */
        int32_t e = (int32_t)((u >> 23) & 0xFF) - 127 + 15;
        if (e <= 0) {
            h = 0;
        } else if (e >= 31) {
            h = 0x7BFF;
        } else {
            h = (uint16_t)(((u >> 16) & 0x8000u) | ((uint32_t)e << 10) | ((u >> 13) & 0x3FFu));
        }
    }
    memcpy(dst, &h, 2);
}

/* What a checkpoint parameter holds, for the sane fills. */
enum { K_OTHER, K_WEIGHT, K_BIAS, K_SCALE, K_GLOBAL, K_INPUT_SCALE, K_ZP, K_G_IDX, K_SHAPE };

static int kind_of(const char *suf) {
    static const struct {
        const char *suffix;
        int kind;
    } k[] = {{"weight", K_WEIGHT},           {"weight_packed", K_WEIGHT},
             {"bias", K_BIAS},               {"weight_scale", K_SCALE},
             {"weight_global_scale", K_GLOBAL}, {"input_global_scale", K_GLOBAL},
             {"input_scale", K_INPUT_SCALE}, {"weight_zero_point", K_ZP},
             {"weight_g_idx", K_G_IDX},      {"weight_shape", K_SHAPE}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        if (strcmp(suf, k[i].suffix) == 0) return k[i].kind;
    }
    return K_OTHER;
}

/* Fills t's data: raw input bytes, or the values a correct checkpoint holds. */
FZ_NO_COVERAGE
static void fill_data(const state *s, fz_reader *r, const moeq_param *p, int shard, int raw,
                      uint8_t *data, size_t nbytes, int32_t dtype, const int64_t *shape,
                      int32_t ndim) {
    /* Raw: input bytes (repeated).  Sane: a pseudo-random stream from one
     * seed byte (none when r is NULL), then fixed up below. */
    const uint8_t *src = NULL;
    size_t got = 0;
    /* gate and up must agree on a shared parameter: same stream for both. */
    int stream = p->layout == MOEQ_LAYOUT_SHARED ? 0 : shard;
    uint32_t x = 0x9E3779B9u ^ (uint32_t)stream * 0x85EBCA6Bu;
    if (raw) {
        got = fz_take(r, nbytes < 64 ? nbytes : 64, &src);
    } else if (r) {
        x ^= (uint32_t)fz_u8(r) * 0x01000193u;
    }
    if (got) {
        for (size_t i = 0; i < nbytes; i++) data[i] = src[i % got];
    } else {
        for (size_t i = 0; i < nbytes; i++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            data[i] = (uint8_t)(x >> 24);
        }
    }
    if (raw) return;
    int kind = kind_of(suffix_of(p));
    size_t es = moeq_dtype_size(dtype), n = es ? nbytes / es : 0;
    bool fl = dtype == MOEQ_DTYPE_F32 || dtype == MOEQ_DTYPE_F16 || dtype == MOEQ_DTYPE_BF16;
    if (kind == K_SHAPE && (dtype == MOEQ_DTYPE_I64 || dtype == MOEQ_DTYPE_I32)) {
        int64_t v[2] = {shard == 2 ? s->H : s->I, shard == 2 ? s->I : s->H};
        for (size_t i = 0; i < n && i < 2; i++) {
            if (dtype == MOEQ_DTYPE_I64) {
                memcpy(data + 8 * i, &v[i], 8);
            } else {
                int32_t w = (int32_t)v[i];
                memcpy(data + 4 * i, &w, 4);
            }
        }
        return;
    }
    if (kind == K_G_IDX && dtype == MOEQ_DTYPE_I32) {
        int32_t in = (int32_t)(ndim >= 1 ? shape[0] : 1);
        int32_t groups = s->group > 0 ? (in + s->group - 1) / s->group : 1;
        for (size_t i = 0; i < n; i++) {
            int32_t v = (int32_t)(data[i * 4] % (uint32_t)groups);
            memcpy(data + 4 * i, &v, 4);
        }
        return;
    }
    int lo = s->bits > 0 && s->bits < 8 ? -(1 << (s->bits - 1)) : 0;
    int span = s->bits > 0 && s->bits < 8 ? 1 << s->bits : 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t *at = data + i * es;
        uint8_t b = *at;
        if (fl) {
            float v;
            if (kind == K_WEIGHT || kind == K_BIAS) {
                v = ((float)b - 128.0f) / 64.0f;
            } else if (kind == K_GLOBAL) {
                v = 64.0f + (float)b;
            } else { /* weight_scale, input_scale */
                v = 0.001f * (float)(1 + b % 32);
            }
            memset(at, 0, es);
            put_float(dtype, v, at);
        } else if (dtype == MOEQ_DTYPE_F8_E4M3) {
            if (kind == K_SCALE) {
                *at = (uint8_t)(0x30 + b % 16); /* NVFP4 group scales: positive normals */
            } else if ((b & 0x7F) == 0x7F) {
                *at = (uint8_t)(b ^ 1); /* never the NaN code */
            }
        } else if (dtype == MOEQ_DTYPE_U8 && kind == K_SCALE) {
            *at = (uint8_t)(120 + b % 8); /* E8M0 around 1 */
        } else if (dtype == MOEQ_DTYPE_I8 && kind == K_ZP) {
            *at = (uint8_t)(b % 4);
        } else if (dtype == MOEQ_DTYPE_I32 && kind == K_ZP) {
            uint32_t w = 0x11111111u & ((uint32_t)b * 0x01010101u);
            memcpy(at, &w, 4);
        } else if (dtype == MOEQ_DTYPE_I8 && span) {
            *at = (uint8_t)(int8_t)(lo + b % span);
        }
    }
}

/* Loads one tensor of parameter p for global expert g, shard `shard`.
 * mutate: 0 none; else one mistake (see below).  Returns the status. */
static moeq_status load_guided(state *s, fz_reader *r, uint32_t pi, int32_t g, int shard,
                               uint8_t dtype_pick, uint8_t mutate, int raw) {
    moeq_param p;
    if (moeq_moe_param(s->layer, pi, &p) != MOEQ_STATUS_OK || p.layout == MOEQ_LAYOUT_DERIVED) {
        return MOEQ_STATUS_OK;
    }
    if (!moeq_test_is_w13(&p)) shard = 2;
    if (moeq_test_is_w13(&p) && shard == 2) shard = dtype_pick & 1;
    int32_t dtype = p.dtype;
    bool fl = dtype == MOEQ_DTYPE_F32 || dtype == MOEQ_DTYPE_F16 || dtype == MOEQ_DTYPE_BF16;
    if (fl) {
        static const int32_t k_fl[3] = {MOEQ_DTYPE_F32, MOEQ_DTYPE_BF16, MOEQ_DTYPE_F16};
        dtype = k_fl[(dtype_pick >> 1) % 3];
    } else if (strcmp(suffix_of(&p), "weight_shape") == 0 && (dtype_pick & 8)) {
        dtype = MOEQ_DTYPE_I32;
    } else if (s->mc->scheme == MOEQ_SCHEME_NPU_W4A8_INT8 &&
               (strcmp(suffix_of(&p), "weight") == 0 || strcmp(suffix_of(&p), "weight_packed") == 0)) {
        dtype = s->mc->format == MOEQ_FORMAT_PACK_QUANTIZED ? MOEQ_DTYPE_I32 : MOEQ_DTYPE_I8;
    }
    moeq_tensor t;
    memset(&t, 0, sizeof t);
    int64_t shape[MOEQ_MAX_DIMS] = {0};
    int32_t ndim = ckpt_shape(s, &p, shard, dtype, shape);
    if (ndim == 0 && (dtype_pick & 0x10)) {
        ndim = 1;
        shape[0] = 1;
    }
    char name[256];
    int32_t expert = g;
    const char *proj = s->proj[shard];
    const char *suffix = suffix_of(&p);
    const char *prefix = s->prefix;
    switch (mutate % 12) {
        case 1: dtype = (int32_t)(fz_u8(r) % 17); break;        /* any dtype, invalid ones too */
        case 2: if (ndim > 0) shape[fz_u8(r) % (uint32_t)ndim] += 1; break;
        case 3: if (ndim > 0) shape[0] = 0; break;
        case 4: expert = s->E + (int32_t)(fz_u8(r) % 3); break; /* out of range */
        case 5: proj = "bogus_proj"; break;
        case 6: suffix = "weight_bogus"; break;
        case 7: prefix = "other.experts"; break;
        case 8: ndim = (int32_t)(fz_u8(r) % 10); break;         /* 9 is past MOEQ_MAX_DIMS */
        case 9: if (ndim == 2) { int64_t x = shape[0]; shape[0] = shape[1]; shape[1] = x; } break;
        default: break;
    }
    if (prefix[0]) {
        snprintf(name, sizeof name, "%s.%d.%s.%s", prefix, (int)expert, proj, suffix);
    } else {
        snprintf(name, sizeof name, "%d.%s.%s", (int)expert, proj, suffix);
    }
    t.name = name;
    t.dtype = dtype;
    t.ndim = ndim;
    uint64_t count = 1;
    int32_t dims = ndim < 0 ? 0 : ndim > MOEQ_MAX_DIMS ? MOEQ_MAX_DIMS : ndim;
    for (int32_t i = 0; i < dims; i++) {
        t.shape[i] = shape[i];
        count *= (uint64_t)shape[i];
    }
    size_t es = moeq_dtype_size(dtype);
    uint64_t nbytes = count * es;
    if (nbytes > (1u << 20)) return MOEQ_STATUS_OK;
    t.nbytes = nbytes + (mutate % 12 == 10 ? 1 : 0); /* size disagreeing with the shape */
    uint8_t *data = malloc(t.nbytes ? (size_t)t.nbytes : 1);
    if (!data) abort();
    fill_data(s, r, &p, shard, raw, data, (size_t)nbytes, dtype, shape, ndim);
    if (t.nbytes > nbytes) data[nbytes] = 0;
    t.data = (mutate % 12 == 11 && t.nbytes) ? NULL : data;
    moeq_error err;
    int32_t outcome = -1;
    moeq_status st = FZ(&err, moeq_moe_load(s->layer, &t, &outcome, &err));
    FZ_ASSERT(outcome == MOEQ_LOAD_LOADED || outcome == MOEQ_LOAD_SKIPPED);
    free(data);
    return st;
}

/* A tensor made of input bytes: name, dtype, ndim, shape, data. */
static void load_raw(state *s, fz_reader *r) {
    const uint8_t *bytes;
    size_t len = fz_take(r, fz_u8(r) % 96, &bytes);
    char *name = fz_strndup(bytes, len);
    moeq_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.dtype = (int32_t)(fz_u8(r) % 17);
    t.ndim = (int32_t)(fz_u8(r) % 10);
    uint64_t count = 1;
    for (int32_t i = 0; i < t.ndim && i < MOEQ_MAX_DIMS; i++) {
        uint8_t b = fz_u8(r);
        t.shape[i] = b == 0xFF ? -1 : (int64_t)(b % 80);
        if (t.shape[i] > 0) count *= (uint64_t)t.shape[i];
    }
    uint64_t nbytes = count * moeq_dtype_size(t.dtype);
    uint8_t flags = fz_u8(r);
    /* Larger claims are checked against the shape before any byte is read. */
    if (nbytes > (1u << 16)) nbytes = 1u << 16;
    t.nbytes = (flags & 1) ? nbytes + (flags >> 1) : nbytes;
    uint8_t *data = calloc(1, t.nbytes ? (size_t)t.nbytes : 1);
    if (!data) abort();
    const uint8_t *src;
    size_t got = fz_take(r, (size_t)t.nbytes < 256 ? (size_t)t.nbytes : 256, &src);
    for (size_t i = 0; got && i < t.nbytes; i += got) {
        memcpy(data + i, src, t.nbytes - i < got ? (size_t)(t.nbytes - i) : got);
    }
    t.data = (flags & 0x80) ? NULL : data;
    moeq_error err;
    FZ(&err, moeq_moe_load(s->layer, &t, NULL, &err));
    free(data);
    free(name);
}

/* Engines may write parameter data directly before finalize. */
static void poke(state *s, fz_reader *r) {
    uint32_t n = moeq_moe_param_count(s->layer);
    moeq_param p;
    if (n == 0 || moeq_moe_param(s->layer, fz_u8(r) % n, &p) != MOEQ_STATUS_OK || !p.data ||
        p.nbytes == 0) {
        return;
    }
    size_t off = fz_u32(r) % p.nbytes;
    const uint8_t *src;
    size_t len = fz_take(r, fz_u8(r) % 16, &src);
    if (len > p.nbytes - off) len = (size_t)(p.nbytes - off);
    memcpy((uint8_t *)p.data + off, src, len);
}

static void run_record(state *s, fz_reader *r, uint32_t *last) {
    moeq_error err;
    uint8_t op = fz_u8(r);
    uint32_t n = moeq_moe_param_count(s->layer);
    switch (op % 7) {
        case 0:
        case 1: { /* a tensor from the manifest, maybe with a mistake */
            uint32_t pi = n ? fz_u8(r) % n : 0;
            int32_t g = (int32_t)(fz_u8(r) % (uint32_t)s->E);
            int shard = fz_u8(r) % 3;
            uint8_t pick = fz_u8(r), mutate = fz_u8(r);
            *last = pi;
            load_guided(s, r, pi, g, shard, pick, op % 7 == 0 ? 0 : mutate, (pick >> 5) & 1);
            break;
        }
        case 2: load_raw(s, r); break;
        case 3: poke(s, r); break;
        case 4: {
            char *list = NULL;
            uint32_t count = 0;
            if (FZ(&err, moeq_moe_missing(s->layer, &list, &count, &err)) == MOEQ_STATUS_OK) {
                FZ_ASSERT(list != NULL && (count == 0) == (list[0] == '\0'));
            }
            moeq_free(list);
            break;
        }
        case 5: { /* NULL tensor, NULL name */
            moeq_tensor t;
            memset(&t, 0, sizeof t);
            FZ_ASSERT(FZ(&err, moeq_moe_load(s->layer, NULL, NULL, &err)) ==
                      MOEQ_STATUS_INVALID_ARG);
            FZ_ASSERT(FZ(&err, moeq_moe_load(s->layer, &t, NULL, &err)) ==
                      MOEQ_STATUS_INVALID_ARG);
            break;
        }
        default: /* the same tensor again: a duplicate */
            load_guided(s, r, *last, 0, 0, 0, 0, 0);
            load_guided(s, r, *last, 0, 0, 0, 0, 0);
            break;
    }
}

static void fill_missing(state *s, fz_reader *r, int raw) {
    uint32_t n = moeq_moe_param_count(s->layer);
    for (uint32_t pi = 0; pi < n; pi++) {
        moeq_param p;
        if (moeq_moe_param(s->layer, pi, &p) != MOEQ_STATUS_OK || !p.required) continue;
        for (int32_t e = 0; e < s->E_local; e++) {
            int32_t g = s->local_to_global[e];
            /* Sane fills read nothing from the input: it is kept for apply. */
            fz_reader *src = raw ? r : NULL;
            if (moeq_test_is_w13(&p)) {
                load_guided(s, src, pi, g, 0, 0, 0, raw);
                load_guided(s, src, pi, g, 1, 1, 0, raw);
            } else {
                load_guided(s, src, pi, g, 2, 0, 0, raw);
            }
        }
    }
}

/* Converts float inputs to the dtype (F32, BF16 by truncation, F16 via raw
 * bits: any pattern is a valid input). */
FZ_NO_COVERAGE
static void *make_x(fz_reader *r, int32_t dtype, size_t n, uint8_t style) {
    size_t es = dtype == MOEQ_DTYPE_F32 ? 4 : 2;
    uint8_t *x = malloc(n * es + 1);
    if (!x) abort();
    for (size_t i = 0; i < n; i++) {
        float v = (style & 1) ? fz_f32(r) : ((float)fz_u8(r) - 128.0f) / 32.0f;
        if ((style & 2) && i == 0) v = NAN;
        if ((style & 4) && i == 1) v = -INFINITY;
        uint32_t u;
        memcpy(&u, &v, 4);
        if (es == 4) {
            memcpy(x + 4 * i, &u, 4);
        } else {
            uint16_t h = (uint16_t)(u >> 16);
            if (dtype == MOEQ_DTYPE_F16 && !(style & 1)) {
                /* small values: reinterpret through BF16's top bits is fine for
                 * fuzzing, but give F16 real numbers too */
                h = (uint16_t)(0x3C00u + (u >> 19 & 0x3FFu)) ^ (uint16_t)(u >> 16 & 0x8000u);
            }
            memcpy(x + 2 * i, &h, 2);
        }
    }
    return x;
}

static void run_apply(state *s, fz_reader *r) {
    static const int32_t k_x[4] = {MOEQ_DTYPE_F32, MOEQ_DTYPE_BF16, MOEQ_DTYPE_F16, MOEQ_DTYPE_I8};
    static const int32_t k_o[4] = {MOEQ_DTYPE_F32, MOEQ_DTYPE_BF16, MOEQ_DTYPE_F16,
                                   MOEQ_DTYPE_F32};
    uint8_t a = fz_u8(r), b = fz_u8(r), style = fz_u8(r);
    int64_t T = a % 5;
    int32_t xd = k_x[(a >> 3) & 3], od = k_o[(a >> 5) & 3];
    int alias = (a >> 7) & 1;
    int32_t kmax = s->E < 4 ? s->E : 4;
    int32_t top_k = 1 + (int32_t)(b % (uint32_t)kmax);
    if (b & 0x80) top_k = (b & 0x40) ? 0 : s->E + 1;
    if (s->mc->apply_router_weight_on_input && !(b & 0x20)) top_k = 1;
    size_t pairs = (size_t)T * (size_t)(top_k > 0 ? top_k : 1);
    int32_t *ids = malloc(pairs * sizeof *ids + 4);
    float *w = malloc(pairs * sizeof *w + 4);
    if (!ids || !w) abort();
    for (size_t i = 0; i < pairs; i++) {
        uint8_t v = fz_u8(r);
        ids[i] = (v & 0x80) ? (int32_t)(v % (uint32_t)(s->E + 3)) - 2 : (int32_t)(v % (uint32_t)s->E);
        w[i] = (style & 8) ? fz_f32(r) : (float)fz_u8(r) / 255.0f;
    }
    if ((style & 0x10) && top_k >= 1) {
        /* Ids and weights from moeq_route on fuzzed logits, as engines get them. */
        size_t nl = (size_t)T * (size_t)s->E;
        float *logits = malloc(nl * sizeof *logits + 4), bias[8];
        if (!logits) abort();
        for (size_t i = 0; i < nl; i++) {
            logits[i] = (style & 0x20) ? fz_f32(r) : ((float)fz_u8(r) - 128.0f) / 16.0f;
        }
        for (int32_t e = 0; e < s->E; e++) bias[e] = ((float)fz_u8(r) - 128.0f) / 64.0f;
        uint8_t rk = fz_u8(r);
        static const int32_t k_groups[4] = {0, 1, 2, 4};
        int32_t groups = k_groups[(rk >> 4) & 3];
        moeq_route_config rc = {s->E,
                                top_k,
                                rk % 3, /* 2: not a scoring function */
                                (rk >> 2) % 3,
                                groups,
                                groups ? 1 + (int32_t)(fz_u8(r) % (uint32_t)groups) : 0,
                                (rk & 0x80) ? bias : NULL,
                                (rk & 0x40) ? fz_f32(r) : 0.0f};
        moeq_error rerr;
        FZ(&rerr, moeq_route(&rc, logits, T, ids, w, &rerr));
        free(logits);
    }
    size_t H = (size_t)s->H, n = (size_t)T * H;
    void *x = make_x(r, xd, n, style);
    size_t oes = od == MOEQ_DTYPE_F32 ? 4 : 2;
    uint8_t *out1 = malloc(n * oes + 1), *out2 = malloc(n * oes + 1);
    double *ref = malloc(n * sizeof(double) + 8);
    if (!out1 || !out2 || !ref) abort();
    moeq_error err;
    moeq_ctx *c1 = NULL, *c4 = NULL;
    moeq_ctx_options o1 = {1, 0}, o4 = {4, 0};
    FZ_ASSERT(FZ(&err, moeq_ctx_create(&o1, &c1, &err)) == MOEQ_STATUS_OK);
    FZ_ASSERT(FZ(&err, moeq_ctx_create(&o4, &c4, &err)) == MOEQ_STATUS_OK);
    if (alias) {
        /* out aliases x: a copy of x per call, since the call overwrites it. */
        size_t xes = xd == MOEQ_DTYPE_F32 ? 4 : xd == MOEQ_DTYPE_I8 ? 1 : 2;
        uint8_t *xa = malloc(n * (xes > oes ? xes : oes) + 1), *xb = malloc(n * (xes > oes ? xes : oes) + 1);
        if (!xa || !xb) abort();
        memcpy(xa, x, n * xes);
        memcpy(xb, x, n * xes);
        moeq_status s1 = FZ(&err, moeq_moe_apply(s->layer, c1, xd, xa, T, top_k, ids, w, od, xa, &err));
        moeq_status s2 = FZ(&err, moeq_moe_apply(s->layer, c4, xd, xb, T, top_k, ids, w, od, xb, &err));
        FZ_ASSERT(s1 == s2);
        if (s1 == MOEQ_STATUS_OK) FZ_ASSERT(memcmp(xa, xb, n * oes) == 0);
        free(xa);
        free(xb);
    } else {
        moeq_status s1 = FZ(&err, moeq_moe_apply(s->layer, c1, xd, x, T, top_k, ids, w, od, out1, &err));
        moeq_status s2 = FZ(&err, moeq_moe_apply(s->layer, c4, xd, x, T, top_k, ids, w, od, out2, &err));
        FZ_ASSERT(s1 == s2);
        /* Same inputs, bit-identical outputs, whatever the thread count. */
        if (s1 == MOEQ_STATUS_OK) FZ_ASSERT(memcmp(out1, out2, n * oes) == 0);
        FZ(&err, moeq_moe_apply_reference(s->layer, xd, x, T, top_k, ids, w, ref, &err));
    }
    /* NULL arguments with tokens > 0 are refused. */
    if (T > 0) {
        FZ(&err, moeq_moe_apply(s->layer, c1, xd, NULL, T, top_k, ids, w, od, out1, &err));
        FZ(&err, moeq_moe_apply(s->layer, c1, xd, x, T, top_k, NULL, w, od, out1, &err));
    }
    moeq_ctx_destroy(c1);
    moeq_ctx_destroy(c4);
    free(ids);
    free(w);
    free(x);
    free(out1);
    free(out2);
    free(ref);
}

static void corrupt_args(fz_reader *r, uint8_t c, moeq_moe_config *mc, moeq_quant_args *w,
                         moeq_quant_args *in) {
    if (!(c & 0x80)) return;
    int32_t v = (int32_t)fz_u32(r);
    moeq_quant_args *a = ((c & 0x40) && in) ? in : w;
    switch (c & 0x0F) {
        case 0: if (a) a->num_bits = v; break;
        case 1: if (a) a->type = v; break;
        case 2: if (a) a->symmetric = v; break;
        case 3: if (a) a->group_size = v; break;
        case 4: if (a) a->strategy = v; break;
        case 5: if (a) a->block_rows = v; break;
        case 6: if (a) a->block_cols = v; break;
        case 7: if (a) a->dynamic = v; break;
        case 8: if (a) a->actorder = v; break;
        case 9: if (a) a->scale_dtype = v; break;
        case 10: if (a) a->zp_dtype = v; break;
        case 11: mc->format = v; break;
        case 12: mc->scheme = v; break;
        case 13: mc->dequant_flags = (uint32_t)v; break;
        case 14: mc->input_activations = NULL; break;
        default: mc->weights = NULL; break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    fz_reader r = {data, size};
    const prepared *pv = &g_prep[fz_u8(&r) % N_VARIANTS];
    uint8_t dims = fz_u8(&r), lk = fz_u8(&r), corrupt = fz_u8(&r), fill = fz_u8(&r);
    static const int32_t k_sizes[4] = {32, 64, 96, 128};
    static const int32_t k_pdt[4] = {0, MOEQ_DTYPE_BF16, MOEQ_DTYPE_F16, MOEQ_DTYPE_F32};
    static const char *const k_w13[3] = {"w1", "w3", "w2"};
    static const char *const k_def[3] = {"gate_proj", "up_proj", "down_proj"};

    moeq_quant_args w, in;
    if (pv->res.weights) w = *pv->res.weights;
    if (pv->res.input_activations) in = *pv->res.input_activations;
    moeq_moe_config mc;
    memset(&mc, 0, sizeof mc);
    mc.scheme = pv->scheme;
    mc.weights = pv->res.weights ? &w : NULL;
    mc.input_activations = pv->res.input_activations ? &in : NULL;
    mc.format = pv->res.format;
    mc.dequant_flags = (fill & 4) ? MOEQ_DEQUANT_LEGACY_PACKING : 0;
    mc.prefix = (lk & 0x10) ? NULL : "model.layers.3.mlp.experts";
    mc.proj_names = (lk & 0x20) ? k_w13 : NULL;
    mc.num_experts = 1 + (dims & 3);
    mc.hidden_size = k_sizes[(dims >> 2) & 3];
    mc.intermediate_size = k_sizes[(dims >> 4) & 3];
    mc.has_bias = (dims >> 6) & 1;
    mc.activation = lk & 3;
    mc.params_dtype = k_pdt[(lk >> 2) & 3];
    mc.routed_scaling_factor = (lk & 0x40) ? 2.5f : 0.0f;
    mc.apply_router_weight_on_input = (lk >> 7) & 1;
    mc.swiglu_limit = (fill & 8) ? 3.0f : 0.0f;
    int32_t map[8];
    state s;
    memset(&s, 0, sizeof s);
    s.E = mc.num_experts;
    s.E_local = s.E;
    for (int32_t e = 0; e < s.E; e++) s.local_to_global[e] = e;
    switch ((fill >> 4) & 3) {
        case 1:
            if (s.E > 1) {
                mc.num_local_experts = s.E - 1;
                mc.first_expert = 1;
                s.E_local = s.E - 1;
                for (int32_t e = 0; e < s.E_local; e++) s.local_to_global[e] = e + 1;
            }
            break;
        case 2:
            for (int32_t g = 0; g < s.E; g++) {
                map[g] = s.E - 1 - g;
                s.local_to_global[s.E - 1 - g] = g;
            }
            mc.expert_map = map;
            break;
        case 3:
            if (s.E > 1) {
                map[0] = -1;
                for (int32_t g = 1; g < s.E; g++) {
                    map[g] = g - 1;
                    s.local_to_global[g - 1] = g;
                }
                mc.num_local_experts = s.E - 1;
                mc.expert_map = map;
                s.E_local = s.E - 1;
            }
            break;
        default: break;
    }
    corrupt_args(&r, corrupt, &mc, pv->res.weights ? &w : NULL,
                 pv->res.input_activations ? &in : NULL);

    moeq_error err;
    moeq_moe *layer = NULL;
    moeq_status st = FZ(&err, moeq_moe_create(&mc, &layer, &err));
    FZ_ASSERT((st == MOEQ_STATUS_OK) == (layer != NULL));
    if (!layer) return 0;
    s.layer = layer;
    s.mc = &mc;
    s.H = mc.hidden_size;
    s.I = mc.intermediate_size;
    s.prefix = mc.prefix ? mc.prefix : "";
    for (int i = 0; i < 3; i++) s.proj[i] = mc.proj_names ? k_w13[i] : k_def[i];
    s.bits = mc.weights ? mc.weights->num_bits : 0;
    s.group = mc.weights ? mc.weights->group_size : 0;
    FZ_ASSERT(moeq_moe_scheme(layer) == mc.scheme);

    uint32_t n_records = fz_u8(&r) % 32u, last = 0;
    for (uint32_t i = 0; i < n_records; i++) run_record(&s, &r, &last);
    if ((fill & 3) != 2) fill_missing(&s, &r, (fill & 3) == 1);

    char *list = NULL;
    uint32_t count = 0;
    FZ(&err, moeq_moe_missing(layer, &list, &count, &err));
    moeq_free(list);
    st = FZ(&err, moeq_moe_finalize(layer, &err));
    if (st == MOEQ_STATUS_OK) {
        /* Finalized: immutable from here on. */
        moeq_tensor t;
        memset(&t, 0, sizeof t);
        t.name = "model.layers.3.mlp.experts.0.gate_proj.weight";
        FZ_ASSERT(FZ(&err, moeq_moe_load(layer, &t, NULL, &err)) == MOEQ_STATUS_STATE);
        FZ_ASSERT(FZ(&err, moeq_moe_finalize(layer, &err)) == MOEQ_STATUS_STATE);
        run_apply(&s, &r);
        run_apply(&s, &r);
    } else {
        /* Not finalized: apply refuses. */
        moeq_ctx *ctx = NULL;
        FZ_ASSERT(FZ(&err, moeq_ctx_create(NULL, &ctx, &err)) == MOEQ_STATUS_OK);
        float x[128] = {0}, out[128];
        int32_t id = 0;
        float wt = 1;
        FZ_ASSERT(FZ(&err, moeq_moe_apply(layer, ctx, MOEQ_DTYPE_F32, x, 1, 1, &id, &wt,
                                          MOEQ_DTYPE_F32, out, &err)) == MOEQ_STATUS_STATE);
        moeq_ctx_destroy(ctx);
    }
    moeq_moe_destroy(layer);
    return 0;
}

/*
 * check_moe_load.c - MoE layer creation, the parameter manifest and the
 * loader: config checks, every naming, dtype and shape mistake, duplicates,
 * gate/up agreement, expert parallelism (skipped experts), missing tensors,
 * finalize refusing to run early, and the state rules.
 */
#include "test_util.h"
#include "common/internal.h"
#include "kernels.h"

#include <unistd.h>

#define E  4
#define H  64
#define I  32
#define GS 32

/* A wna16 int4 group-32 symmetric pack-quantized config. */
static const char *k_cfg =
    "{\"quant_method\":\"compressed-tensors\",\"format\":\"pack-quantized\",\"config_groups\":"
    "{\"g\":{\"targets\":[\"re:.*experts.*\"],\"weights\":{\"num_bits\":4,\"group_size\":32}}}}";

typedef struct fixture {
    moeq_config *cfg;
    moeq_resolution res;
    moeq_moe_config mc;
    moeq_moe *layer;
} fixture;

static void make_layer(fixture *f, const int32_t *expert_map, int32_t local) {
    moeq_error err;
    ck_assert_ok(moeq_config_parse(k_cfg, strlen(k_cfg), NULL, &f->cfg, &err), &err);
    ck_assert_ok(moeq_resolve_moe(f->cfg, "m.experts", E, NULL, NULL, &f->res, &err), &err);
    memset(&f->mc, 0, sizeof f->mc);
    f->mc.scheme = MOEQ_SCHEME_WNA16;
    f->mc.weights = f->res.weights;
    f->mc.format = f->res.format;
    f->mc.prefix = "m.experts";
    f->mc.num_experts = E;
    f->mc.num_local_experts = local;
    f->mc.expert_map = expert_map;
    f->mc.hidden_size = H;
    f->mc.intermediate_size = I;
    ck_assert_ok(moeq_moe_create(&f->mc, &f->layer, &err), &err);
}

static void free_fixture(fixture *f) {
    moeq_moe_destroy(f->layer);
    moeq_config_destroy(f->cfg);
}

/* The checkpoint tensors of one projection (all-zero codes, unit scales). */
typedef struct proj_tensors {
    char names[3][128];
    uint32_t packed[H * H];
    uint16_t scale[H * 2];
    int64_t shape[2];
    moeq_tensor t[3];
} proj_tensors;

static void make_proj(proj_tensors *p, int e, const char *proj) {
    int rows = strcmp(proj, "down_proj") == 0 ? H : I, cols = rows == H ? I : H;
    int words = cols / 8, groups = cols / GS;
    memset(p->packed, 0x88, sizeof p->packed); /* 8 + value: all zeros */
    for (int i = 0; i < rows * groups; i++) p->scale[i] = moeq__f32_to_bf16(0.01f);
    p->shape[0] = rows;
    p->shape[1] = cols;
    snprintf(p->names[0], sizeof p->names[0], "m.experts.%d.%s.weight_packed", e, proj);
    snprintf(p->names[1], sizeof p->names[1], "m.experts.%d.%s.weight_scale", e, proj);
    snprintf(p->names[2], sizeof p->names[2], "m.experts.%d.%s.weight_shape", e, proj);
    p->t[0] = (moeq_tensor){p->names[0],   MOEQ_DTYPE_I32, 2,
                            {rows, words}, p->packed,      (uint64_t)rows * (uint64_t)words * 4,
                            NULL};
    p->t[1] = (moeq_tensor){p->names[1], MOEQ_DTYPE_BF16,
                            2,           {rows, groups},
                            p->scale,    (uint64_t)rows * (uint64_t)groups * 2,
                            NULL};
    p->t[2] = (moeq_tensor){p->names[2], MOEQ_DTYPE_I64, 1, {2}, p->shape, 16, NULL};
}

static const char *k_proj[3] = {"gate_proj", "up_proj", "down_proj"};

static void load_all(fixture *f, int skip_e, int skip_p, int skip_t) {
    for (int e = 0; e < E; e++) {
        for (int p = 0; p < 3; p++) {
            proj_tensors pt;
            make_proj(&pt, e, k_proj[p]);
            for (int k = 0; k < 3; k++) {
                if (e == skip_e && p == skip_p && k == skip_t) continue;
                moeq_error err;
                int32_t outcome = -1;
                ck_assert_ok(moeq_moe_load(f->layer, &pt.t[k], &outcome, &err), &err);
            }
        }
    }
}

START_TEST(test_manifest_shapes) {
    fixture f;
    make_layer(&f, NULL, 0);
    moeq_param p;
    moeq_error err;
    /* wna16 keeps SGLang's Marlin orientation: [E, K/8, N]. */
    ck_assert_ok(moeq_moe_find_param(f.layer, "w13_weight_packed", &p), &err);
    ck_assert_int_eq(p.dtype, MOEQ_DTYPE_I32);
    ck_assert_int_eq(p.ndim, 3);
    ck_assert(p.shape[0] == E && p.shape[1] == H / 8 && p.shape[2] == 2 * I);
    ck_assert_int_eq(p.is_transposed, 1);
    ck_assert_str_eq(p.ckpt_suffix, "weight_packed");
    ck_assert_int_eq(p.layout, MOEQ_LAYOUT_SHARDED);
    ck_assert_ok(moeq_moe_find_param(f.layer, "w2_weight_scale", &p), &err);
    ck_assert(p.shape[0] == E && p.shape[1] == I / GS && p.shape[2] == H);
    ck_assert_int_eq(p.dtype, MOEQ_DTYPE_BF16);
    ck_assert_int_eq(p.quant_method, MOEQ_STRATEGY_GROUP);
    ck_assert_ok(moeq_moe_find_param(f.layer, "w13_weight_shape", &p), &err);
    ck_assert_int_eq(p.layout, MOEQ_LAYOUT_SHARED);
    ck_assert_ok(moeq_moe_find_param(f.layer, "w13_weight_g_idx", &p), &err);
    ck_assert_int_eq(p.required, 0); /* only needed with actorder group */
    ck_assert_int_eq(moeq_moe_find_param(f.layer, "w13_weight_zero_point", &p),
                     MOEQ_STATUS_NO_MATCH);
    /* Engines may write the buffers directly. */
    ck_assert_ptr_nonnull(p.data);
    free_fixture(&f);
}
END_TEST

START_TEST(test_load_and_missing) {
    fixture f;
    make_layer(&f, NULL, 0);
    char *list = NULL;
    uint32_t count = 0;
    moeq_error err;
    ck_assert_ok(moeq_moe_missing(f.layer, &list, &count, &err), &err);
    ck_assert_uint_eq(count, E * 3 * 3);
    ck_assert_ptr_nonnull(strstr(list, "m.experts.0.gate_proj.weight_packed"));
    ck_assert_ptr_nonnull(strstr(list, "m.experts.3.down_proj.weight_shape"));
    moeq_free(list);
    /* Everything but expert 2's down_proj scale. */
    load_all(&f, 2, 2, 1);
    ck_assert_ok(moeq_moe_missing(f.layer, &list, &count, &err), &err);
    ck_assert_uint_eq(count, 1);
    ck_assert_str_eq(list, "m.experts.2.down_proj.weight_scale");
    moeq_free(list);
    /* finalize refuses, naming it */
    moeq_status st = moeq_moe_finalize(f.layer, &err);
    ck_assert_status(st, MOEQ_STATUS_CHECKPOINT, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "1 checkpoint tensor is missing"));
    ck_assert_ptr_nonnull(strstr(err.message, "m.experts.2.down_proj.weight_scale"));
    /* apply refuses before finalize */
    moeq_ctx *ctx = NULL;
    ck_assert_ok(moeq_ctx_create(NULL, &ctx, &err), &err);
    float x[H] = {0}, out[H];
    int32_t id = 0;
    float w = 1;
    st = moeq_moe_apply(f.layer, ctx, MOEQ_DTYPE_F32, x, 1, 1, &id, &w, MOEQ_DTYPE_F32, out, &err);
    ck_assert_status(st, MOEQ_STATUS_STATE, &err);
    /* the last tensor, then finalize; then loading is refused */
    proj_tensors pt;
    make_proj(&pt, 2, "down_proj");
    ck_assert_ok(moeq_moe_load(f.layer, &pt.t[1], NULL, &err), &err);
    ck_assert_ok(moeq_moe_finalize(f.layer, &err), &err);
    ck_assert_status(moeq_moe_load(f.layer, &pt.t[1], NULL, &err), MOEQ_STATUS_STATE, &err);
    ck_assert_status(moeq_moe_finalize(f.layer, &err), MOEQ_STATUS_STATE, &err);
    /* all-zero weights: the output is zero */
    ck_assert_ok(
        moeq_moe_apply(f.layer, ctx, MOEQ_DTYPE_F32, x, 1, 1, &id, &w, MOEQ_DTYPE_F32, out, &err),
        &err);
    for (int h = 0; h < H; h++) ck_assert(out[h] == 0.0f);
    moeq_ctx_destroy(ctx);
    free_fixture(&f);
}
END_TEST

/* One bad tensor per row: the status and a substring of the message. */
typedef struct bad_load {
    const char *name;   /* NULL: keep the good name */
    int which;          /* 0 weight_packed, 1 weight_scale, 2 weight_shape */
    int32_t dtype;      /* 0: keep */
    int64_t dim0, dim1; /* -1: keep */
    int64_t shape_val0; /* weight_shape value, -1: keep */
    moeq_status status;
    const char *substring;
} bad_load;

static const bad_load k_bad[] = {
    {"m.experts.1.gate_proj.weight_bogus", 0, 0, -1, -1, -1, MOEQ_STATUS_NO_MATCH,
     "has no parameter for \"weight_bogus\" of gate_proj (it loads: weight_packed"},
    {"m.experts.1.gate.weight_packed", 0, 0, -1, -1, -1, MOEQ_STATUS_NO_MATCH,
     "projection \"gate\" is none of gate_proj, up_proj, down_proj"},
    {"m.experts.x.gate_proj.weight_packed", 0, 0, -1, -1, -1, MOEQ_STATUS_NO_MATCH,
     "\"x\" before the projection is not an expert number"},
    {"other.experts.1.gate_proj.weight_packed", 0, 0, -1, -1, -1, MOEQ_STATUS_NO_MATCH,
     "does not belong to this layer (prefix m.experts)"},
    {"m.experts.9.gate_proj.weight_packed", 0, 0, -1, -1, -1, MOEQ_STATUS_CHECKPOINT,
     "expert 9 is not below num_experts (4)"},
    {"weight_packed", 0, 0, -1, -1, -1, MOEQ_STATUS_NO_MATCH, "expected <prefix>.<expert>"},
    {"m.experts.1.w1.weight_packed", 0, 0, -1, -1, -1, MOEQ_STATUS_NO_MATCH, "set proj_names"},
    {NULL, 0, MOEQ_DTYPE_I8, -1, -1, -1, MOEQ_STATUS_DTYPE,
     "dtype I8, expected I32 (for w13_weight_packed)"},
    {NULL, 1, MOEQ_DTYPE_I32, -1, -1, -1, MOEQ_STATUS_DTYPE, "expected F32/F16/BF16"},
    {NULL, 0, 0, 16, -1, -1, MOEQ_STATUS_SHAPE, "shape [16, 8], expected [32, 8]"},
    {NULL, 0, 0, -1, 9, -1, MOEQ_STATUS_SHAPE, "stored transposed"},
    {NULL, 1, 0, -1, 4, -1, MOEQ_STATUS_SHAPE, "shape [32, 4], expected [32, 2]"},
    {NULL, 2, 0, -1, -1, 48, MOEQ_STATUS_CHECKPOINT,
     "weight_shape is [48, 64], but this layer's gate_proj is [32, 64]"},
};

START_TEST(test_bad_loads) {
    const bad_load *b = &k_bad[_i];
    fixture f;
    make_layer(&f, NULL, 0);
    proj_tensors pt;
    make_proj(&pt, 1, "gate_proj");
    moeq_tensor t = pt.t[b->which];
    if (b->name) t.name = b->name;
    if (b->dtype) {
        t.dtype = b->dtype;
        t.nbytes = t.nbytes / 4u * moeq_dtype_size(b->dtype) * (b->which == 1 ? 2u : 1u);
        if (b->which == 1)
            t.nbytes = (uint64_t)(t.shape[0] * t.shape[1]) * moeq_dtype_size(b->dtype);
        if (b->which == 0)
            t.nbytes = (uint64_t)(t.shape[0] * t.shape[1]) * moeq_dtype_size(b->dtype);
    }
    if (b->dim0 >= 0 || b->dim1 >= 0) {
        if (b->dim0 >= 0) t.shape[0] = b->dim0;
        if (b->dim1 >= 0) t.shape[1] = b->dim1;
        t.nbytes = (uint64_t)(t.shape[0] * t.shape[1]) * moeq_dtype_size(t.dtype);
    }
    if (b->shape_val0 >= 0) pt.shape[0] = b->shape_val0;
    moeq_error err;
    int32_t outcome = 7;
    moeq_status st = moeq_moe_load(f.layer, &t, &outcome, &err);
    ck_assert_msg(st == b->status, "case %d: got %s: %s", _i, moeq_status_name(st), err.message);
    ck_assert_msg(strstr(err.message, b->substring), "case %d: \"%s\" lacks \"%s\"", _i,
                  err.message, b->substring);
    ck_assert_int_eq(outcome, MOEQ_LOAD_SKIPPED);
    free_fixture(&f);
}
END_TEST

START_TEST(test_duplicates_and_bad_arguments) {
    fixture f;
    make_layer(&f, NULL, 0);
    proj_tensors pt;
    make_proj(&pt, 0, "up_proj");
    moeq_error err;
    ck_assert_ok(moeq_moe_load(f.layer, &pt.t[0], NULL, &err), &err);
    ck_assert_status(moeq_moe_load(f.layer, &pt.t[0], NULL, &err), MOEQ_STATUS_CHECKPOINT, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "was already loaded"));
    /* nbytes that does not match the shape */
    moeq_tensor t = pt.t[1];
    t.nbytes -= 2;
    ck_assert_status(moeq_moe_load(f.layer, &t, NULL, &err), MOEQ_STATUS_SHAPE, &err);
    t = pt.t[1];
    t.data = NULL;
    ck_assert_status(moeq_moe_load(f.layer, &t, NULL, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_status(moeq_moe_load(NULL, &pt.t[1], NULL, &err), MOEQ_STATUS_INVALID_ARG, &err);
    ck_assert_status(moeq_moe_load(f.layer, NULL, NULL, &err), MOEQ_STATUS_INVALID_ARG, &err);
    /* gate and up must agree on what they share (weight_shape here: both [I, H]) */
    proj_tensors gate;
    make_proj(&gate, 0, "gate_proj");
    ck_assert_ok(moeq_moe_load(f.layer, &gate.t[2], NULL, &err), &err);
    ck_assert_ok(moeq_moe_load(f.layer, &pt.t[2], NULL, &err), &err);
    free_fixture(&f);
}
END_TEST

START_TEST(test_expert_parallel_skips) {
    /* This rank holds global experts 1 and 3 as local 0 and 1. */
    const int32_t map[E] = {-1, 0, -1, 1};
    fixture f;
    make_layer(&f, map, 2);
    moeq_param p;
    moeq_error err;
    ck_assert_ok(moeq_moe_find_param(f.layer, "w13_weight_packed", &p), &err);
    ck_assert_int_eq(p.shape[0], 2);
    int loaded = 0, skipped = 0;
    for (int e = 0; e < E; e++) {
        for (int j = 0; j < 3; j++) {
            proj_tensors pt;
            make_proj(&pt, e, k_proj[j]);
            for (int k = 0; k < 3; k++) {
                int32_t outcome = -1;
                ck_assert_ok(moeq_moe_load(f.layer, &pt.t[k], &outcome, &err), &err);
                if (outcome == MOEQ_LOAD_LOADED) loaded++;
                if (outcome == MOEQ_LOAD_SKIPPED) skipped++;
            }
        }
    }
    ck_assert_int_eq(loaded, 2 * 9);
    ck_assert_int_eq(skipped, 2 * 9);
    ck_assert_ok(moeq_moe_finalize(f.layer, &err), &err);
    free_fixture(&f);
}
END_TEST

/* Create-time checks: each row a broken config field. */
START_TEST(test_create_checks) {
    moeq_config *cfg = NULL;
    moeq_resolution r;
    moeq_error err;
    ck_assert_ok(moeq_config_parse(k_cfg, strlen(k_cfg), NULL, &cfg, &err), &err);
    ck_assert_ok(moeq_resolve_moe(cfg, "m.experts", E, NULL, NULL, &r, &err), &err);
    moeq_moe_config good;
    memset(&good, 0, sizeof good);
    good.scheme = MOEQ_SCHEME_WNA16;
    good.weights = r.weights;
    good.format = r.format;
    good.num_experts = E;
    good.hidden_size = H;
    good.intermediate_size = I;
    static const int32_t dup_map[E] = {0, 0, 1, -1};
    static const int32_t bad_map[E] = {0, 5, 1, 2};
    static const char *const same[3] = {"w1", "w1", "w2"};
    static const char *const dotted[3] = {"w1", "w.3", "w2"};
    struct {
        const char *what;
        moeq_status status;
        const char *substring;
    } cases[] = {
        {"scheme", MOEQ_STATUS_INVALID_ARG, "is not a moeq_scheme_id"},
        {"num_experts", MOEQ_STATUS_INVALID_ARG, "num_experts is 0"},
        {"local", MOEQ_STATUS_INVALID_ARG, "num_local_experts is 9"},
        {"first_expert", MOEQ_STATUS_INVALID_ARG, "first_expert 3 + num_local_experts 2"},
        {"hidden", MOEQ_STATUS_INVALID_ARG, "hidden_size (0)"},
        {"activation", MOEQ_STATUS_INVALID_ARG, "activation 9"},
        {"alpha", MOEQ_STATUS_INVALID_ARG, "swiglu_alpha"},
        {"dtype", MOEQ_STATUS_INVALID_ARG, "params_dtype I32"},
        {"scaling", MOEQ_STATUS_INVALID_ARG, "routed_scaling_factor"},
        {"proj_same", MOEQ_STATUS_INVALID_ARG, "are both \"w1\""},
        {"proj_dot", MOEQ_STATUS_INVALID_ARG, "proj_names[1] (w.3)"},
        {"map_dup", MOEQ_STATUS_INVALID_ARG, "to the same local id 0"},
        {"map_range", MOEQ_STATUS_INVALID_ARG, "expert_map[1] is 5"},
        {"wrong_scheme", MOEQ_STATUS_UNSUPPORTED, "scheme w8a8_fp8 cannot run these args"},
        {"groups", MOEQ_STATUS_UNSUPPORTED, "weight strategy"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        moeq_moe_config c = good;
        moeq_quant_args w = *r.weights;
        const char *k = cases[i].what;
        if (!strcmp(k, "scheme")) c.scheme = 99;
        if (!strcmp(k, "num_experts")) c.num_experts = 0;
        if (!strcmp(k, "local")) c.num_local_experts = 9;
        if (!strcmp(k, "first_expert")) c.num_local_experts = 2, c.first_expert = 3;
        if (!strcmp(k, "hidden")) c.hidden_size = 0;
        if (!strcmp(k, "activation")) c.activation = 9;
        if (!strcmp(k, "alpha")) c.swiglu_alpha = -1;
        if (!strcmp(k, "dtype")) c.params_dtype = MOEQ_DTYPE_I32;
        if (!strcmp(k, "scaling")) c.routed_scaling_factor = -2;
        if (!strcmp(k, "proj_same")) c.proj_names = same;
        if (!strcmp(k, "proj_dot")) c.proj_names = dotted;
        if (!strcmp(k, "map_dup")) c.expert_map = dup_map, c.num_local_experts = 2;
        if (!strcmp(k, "map_range")) c.expert_map = bad_map, c.num_local_experts = 3;
        if (!strcmp(k, "wrong_scheme")) c.scheme = MOEQ_SCHEME_W8A8_FP8;
        if (!strcmp(k, "groups")) {
            w.strategy = MOEQ_STRATEGY_TENSOR;
            w.group_size = 0;
            c.weights = &w;
        }
        moeq_moe *l = (moeq_moe *)&cases; /* must be reset to NULL on failure */
        moeq_status st = moeq_moe_create(&c, &l, &err);
        ck_assert_msg(st == cases[i].status, "%s: %s: %s", k, moeq_status_name(st), err.message);
        ck_assert_msg(strstr(err.message, cases[i].substring), "%s: \"%s\" lacks \"%s\"", k,
                      err.message, cases[i].substring);
        ck_assert_ptr_null(l);
    }
    ck_assert_status(moeq_moe_create(NULL, NULL, &err), MOEQ_STATUS_INVALID_ARG, &err);
    moeq_moe_destroy(NULL);
    moeq_config_destroy(cfg);
}
END_TEST

/* Every allocation of create/load/finalize may fail: NOMEM, no leak, no crash. */
START_TEST(test_out_of_memory) {
    for (long n = 0; n < 400; n++) {
        fixture f;
        memset(&f, 0, sizeof f);
        moeq_error err;
        ck_assert_ok(moeq_config_parse(k_cfg, strlen(k_cfg), NULL, &f.cfg, &err), &err);
        ck_assert_ok(moeq_resolve_moe(f.cfg, "m.experts", E, NULL, NULL, &f.res, &err), &err);
        memset(&f.mc, 0, sizeof f.mc);
        f.mc.scheme = MOEQ_SCHEME_WNA16;
        f.mc.weights = f.res.weights;
        f.mc.format = f.res.format;
        f.mc.num_experts = E;
        f.mc.hidden_size = H;
        f.mc.intermediate_size = I;
        moeq__test_fail_alloc_after(n);
        moeq_status st = moeq_moe_create(&f.mc, &f.layer, &err);
        bool done = false;
        if (st == MOEQ_OK) {
            for (int e = 0; e < E && st == MOEQ_OK; e++) {
                for (int p = 0; p < 3 && st == MOEQ_OK; p++) {
                    proj_tensors pt;
                    make_proj(&pt, e, k_proj[p]);
                    for (int k = 0; k < 3 && st == MOEQ_OK; k++) {
                        st = moeq_moe_load(f.layer, &pt.t[k], NULL, &err);
                    }
                }
            }
            if (st == MOEQ_OK) st = moeq_moe_finalize(f.layer, &err);
            done = st == MOEQ_OK;
        }
        moeq__test_fail_alloc_after(-1);
        ck_assert_msg(st == MOEQ_OK || st == MOEQ_STATUS_NOMEM, "n=%ld: %s: %s", n,
                      moeq_status_name(st), err.message);
        free_fixture(&f);
        if (done) break;
    }
}
END_TEST

static int32_t count_progress(uint64_t done, uint64_t total, void *user) {
    int *calls = user;
    (*calls)++;
    ck_assert_uint_le(done, total);
    return 0;
}

static int32_t stop_at_5(uint64_t done, uint64_t total, void *user) {
    (void)total;
    (void)user;
    return done >= 5;
}

/* Writes the fixture's tensors (minus one, optionally) plus extra tensors to
 * a safetensors file. */
static void write_checkpoint(const char *path, int skip, const moeq_tensor *extra) {
    static proj_tensors pts[E * 3];
    moeq_tensor all[E * 9 + 2];
    uint32_t n = 0;
    for (int e = 0; e < E; e++) {
        for (int p = 0; p < 3; p++) {
            proj_tensors *pt = &pts[e * 3 + p];
            make_proj(pt, e, k_proj[p]);
            for (int k = 0; k < 3; k++) {
                if ((int)n == skip) {
                    skip = -2; /* skip this one only */
                    continue;
                }
                all[n++] = pt->t[k];
            }
        }
    }
    if (extra) all[n++] = *extra;
    moeq_error err;
    ck_assert_ok(moeq_safetensors_write(path, all, n, NULL, &err), &err);
}

START_TEST(test_load_checkpoint) {
    char dir[] = "/tmp/moeq_ckpt_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    moeq_error err;
    moeq_checkpoint *ck = NULL;

    /* complete: loads with progress, then finalizes */
    write_checkpoint(path, -1, NULL);
    ck_assert_ok(moeq_checkpoint_open(path, &ck, &err), &err);
    fixture f;
    make_layer(&f, NULL, 0);
    int calls = 0;
    ck_assert_ok(
        moeq_moe_load_checkpoint(f.layer, ck, NULL, count_progress, &calls, NULL, NULL, &err),
        &err);
    ck_assert_int_eq(calls, E * 9);
    ck_assert_ok(moeq_moe_finalize(f.layer, &err), &err);
    free_fixture(&f);
    /* the callback stops it */
    make_layer(&f, NULL, 0);
    moeq_status st =
        moeq_moe_load_checkpoint(f.layer, ck, "m.experts", stop_at_5, NULL, NULL, NULL, &err);
    ck_assert_status(st, MOEQ_STATUS_STATE, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "after 5 of 36 tensors"));
    free_fixture(&f);
    /* a wrong prefix finds nothing */
    make_layer(&f, NULL, 0);
    st = moeq_moe_load_checkpoint(f.layer, ck, "model.layers.0.mlp.experts", NULL, NULL, NULL, NULL,
                                  &err);
    ck_assert_status(st, MOEQ_STATUS_CHECKPOINT, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "has no tensor named"));
    free_fixture(&f);
    moeq_checkpoint_close(ck);

    /* one tensor missing: named */
    write_checkpoint(path, 13, NULL);
    ck_assert_ok(moeq_checkpoint_open(path, &ck, &err), &err);
    make_layer(&f, NULL, 0);
    st = moeq_moe_load_checkpoint(f.layer, ck, NULL, NULL, NULL, NULL, NULL, &err);
    ck_assert_status(st, MOEQ_STATUS_CHECKPOINT, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "1 tensor is missing"));
    ck_assert_msg(strstr(err.message, "m.experts.1.up_proj.weight_scale"), "%s", err.message);
    free_fixture(&f);
    moeq_checkpoint_close(ck);

    /* a stray tensor under the prefix: the file and tensor are named */
    float junk[4] = {0};
    moeq_tensor extra = {
        "m.experts.2.up_proj.weight_zero_point", MOEQ_DTYPE_F32, 1, {4}, junk, 16, NULL};
    write_checkpoint(path, -1, &extra);
    ck_assert_ok(moeq_checkpoint_open(path, &ck, &err), &err);
    make_layer(&f, NULL, 0);
    st = moeq_moe_load_checkpoint(f.layer, ck, NULL, NULL, NULL, NULL, NULL, &err);
    ck_assert_status(st, MOEQ_STATUS_NO_MATCH, &err);
    ck_assert_ptr_nonnull(strstr(err.message, "model.safetensors"));
    ck_assert_ptr_nonnull(strstr(err.message, "\"weight_zero_point\" of up_proj"));
    free_fixture(&f);
    moeq_checkpoint_close(ck);
    moeq_test_rmtree(dir);
}
END_TEST

static Suite *moe_load_suite(void) {
    Suite *s = suite_create("moe_load");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_manifest_shapes);
    tcase_add_test(tc, test_load_and_missing);
    tcase_add_loop_test(tc, test_bad_loads, 0, (int)(sizeof k_bad / sizeof k_bad[0]));
    tcase_add_test(tc, test_duplicates_and_bad_arguments);
    tcase_add_test(tc, test_expert_parallel_skips);
    tcase_add_test(tc, test_create_checks);
    tcase_add_test(tc, test_out_of_memory);
    tcase_add_test(tc, test_load_checkpoint);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(moe_load_suite)

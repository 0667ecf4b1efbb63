/*
 * fuzz_resolve.c - a config and a layer name -> moeq_resolve, moeq_resolve_moe
 * (a few experts), moeq_select, and moeq_moe_create with what was selected.
 *
 * Input: byte 0 = flags, byte 1 = MoE knobs, then the config JSON up to the
 * first NUL byte, then the layer name (up to the end or the next NUL).
 *   flags: bits 0-1 module kind (3 is invalid on purpose), bit 2 engine
 *          precedence, bit 3 no_fused, bit 4 caller fused rules (bit 5: one
 *          of them with a NULL shard), bit 6 platform npu, bit 7 prefer_mxint4;
 *   knobs: bits 0-2 experts - 1, bits 3-4 projection names (default,
 *          w1/w3/w2, a dotted name, a NULL entry), bits 5-7 layer dims.
 * Hostile patterns ("re:(a+)+$" on "aaaa...b") must come back as
 * MOEQ_STATUS_LIMIT well inside libFuzzer's -timeout.  The name bytes are
 * also handed to moeq_plan as a layer list (unless a "moe N" line asks for
 * 10,000 experts or more, which is slow by design, not a hang).
 */
#include "fuzz_common.h"

#include <stdbool.h>

static const char *const k_w13[] = {"w1", "w3", "w2"};
static const char *const k_dotted[] = {"gate_proj", "up.proj", "down_proj"};
static const char *const k_null[] = {"gate_proj", NULL, "down_proj"};

static const char *const k_gu[] = {"gate", "up"};
static const char *const k_gu_null[] = {"gate", NULL};

static void try_create(const moeq_resolution *res, const moeq_selection *sel, uint32_t experts,
                       const char *const *proj, uint8_t dims) {
    static const int32_t k_dims[8][2] = {{64, 32},  {128, 64}, {32, 32},  {256, 128},
                                         {64, 48},  {30, 20},  {16, 16},  {128, 128}};
    moeq_moe_config mc;
    memset(&mc, 0, sizeof mc);
    mc.scheme = sel->scheme;
    mc.weights = res->weights;
    mc.input_activations = res->input_activations;
    mc.format = res->format;
    mc.prefix = "m.experts";
    mc.proj_names = proj;
    mc.num_experts = (int32_t)experts;
    mc.hidden_size = k_dims[dims & 7][0];
    mc.intermediate_size = k_dims[dims & 7][1];
    mc.has_bias = dims & 1;
    moeq_error err;
    moeq_moe *layer = NULL;
    moeq_status st = FZ(&err, moeq_moe_create(&mc, &layer, &err));
    FZ_ASSERT((st == MOEQ_STATUS_OK) == (layer != NULL));
    if (layer) {
        char *missing = NULL;
        uint32_t count = 0;
        if (FZ(&err, moeq_moe_missing(layer, &missing, &count, &err)) == MOEQ_STATUS_OK) {
            FZ_ASSERT(missing != NULL);
        }
        moeq_free(missing);
        /* Not loaded: finalize must refuse (or there is nothing to load). */
        FZ(&err, moeq_moe_finalize(layer, &err));
    }
    moeq_moe_destroy(layer);
}

/* A writer that keeps nothing. */
static int32_t discard(const char *data, size_t len, void *user) {
    (void)data;
    (void)len;
    (void)user;
    return 0;
}

/* True when a "moe" is followed by a number of 5 digits or more. */
static bool asks_many_experts(const char *s) {
    for (const char *p = strstr(s, "moe"); p; p = strstr(p + 1, "moe")) {
        const char *q = p + 3;
        while (*q == ' ' || *q == '\t') q++;
        size_t digits = 0;
        while (q[digits] >= '0' && q[digits] <= '9') digits++;
        if (digits >= 5) return true;
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    uint8_t flags = data[0], knobs = data[1];
    const uint8_t *rest = data + 2;
    size_t n = size - 2;
    const uint8_t *nul = memchr(rest, 0, n);
    size_t cfg_len = nul ? (size_t)(nul - rest) : n;
    char *name = nul ? fz_strndup(nul + 1, n - cfg_len - 1) : fz_strndup((const uint8_t *)"", 0);

    moeq_error err;
    moeq_config *cfg = NULL;
    if (FZ(&err, moeq_config_parse((const char *)rest, cfg_len, NULL, &cfg, &err)) !=
        MOEQ_STATUS_OK) {
        free(name);
        return 0;
    }
    int32_t kind = flags & 3;
    moeq_fused_name rules[2] = {{"gate_up", 2, (flags & 0x20) ? k_gu_null : k_gu},
                                {"qkv_proj", 0, NULL}};
    moeq_resolve_options ro = {(flags >> 2) & 1, (flags & 0x10) ? 2u : 0u,
                               (flags & 0x10) ? rules : NULL, (flags >> 3) & 1};
    moeq_select_options so = {(flags >> 6) & 1, (flags >> 7) & 1};
    uint32_t experts = 1u + (knobs & 7u);
    const char *const *proj = NULL;
    switch ((knobs >> 3) & 3) {
        case 1: proj = k_w13; break;
        case 2: proj = k_dotted; break;
        case 3: proj = k_null; break;
        default: break;
    }

    moeq_resolution res;
    moeq_selection sel;
    if (FZ(&err, moeq_resolve(cfg, name, kind, &ro, &res, &err)) == MOEQ_STATUS_OK) {
        FZ_ASSERT(res.status >= MOEQ_MATCH_QUANTIZED && res.status <= MOEQ_MATCH_UNMATCHED);
        if (res.target) FZ_ASSERT(strlen(res.target) < 1u << 30);
        FZ(&err, moeq_select(&res, name, &so, &sel, &err));
    }
    if (FZ(&err, moeq_resolve_moe(cfg, name, experts, proj, &ro, &res, &err)) == MOEQ_STATUS_OK) {
        if (FZ(&err, moeq_select(&res, name, &so, &sel, &err)) == MOEQ_STATUS_OK) {
            FZ_ASSERT(sel.scheme >= 0 && sel.scheme < MOEQ_SCHEME_COUNT);
            FZ_ASSERT(memchr(sel.reason, '\0', sizeof sel.reason) != NULL);
            try_create(&res, &sel, experts, proj, (uint8_t)(knobs >> 5));
        }
    }
    if (!asks_many_experts(name)) {
        moeq_plan_options po = {&ro, &so, (flags >> 1) & 1, 0, NULL};
        uint32_t errors = 0;
        FZ(&err, moeq_plan_write(cfg, name, strlen(name), &po, discard, NULL, &errors, &err));
    }
    moeq_config_destroy(cfg);
    free(name);
    return 0;
}

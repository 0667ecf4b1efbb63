/*
 * route.c - MoE routing: router logits -> each token's top-k expert ids and
 * weights (softmax or sigmoid scores, correction bias, grouped top-k).
 *
 * The semantics follow SGLang python/sglang/srt/layers/moe/topk.py
 * (fused_topk_torch_native, grouped_topk_gpu, biased_grouped_topk_impl,
 * _RENORMALIZE_SUM_EPSILON), vLLM's grouped_topk and DeepSeek-V3's
 * Gate.forward, which they all reproduce:
 *
 *   scores  = softmax(x) or sigmoid(x), in float32
 *   choice  = scores + bias                      (selection only)
 *   group   = max(choice) without a bias, sum of the top two with one
 *   keep the topk_group best groups; the others' experts cannot be chosen
 *   ids     = top_k of choice; weights = scores[ids]
 *   weights /= sum(weights) + 1e-20              (renormalize)
 *   weights *= routed_scaling_factor
 *
 * Where the engines differ we take the consistent reading: the scoring
 * function is honoured in grouped mode too (SGLang's grouped_topk always uses
 * softmax and biased_grouped_topk always sigmoid; vLLM honours scoring_func),
 * and the scaling factor applies with or without renormalization (SGLang
 * applies it on output only inside its renormalize branch).  The engines mask
 * dropped groups to -inf (SGLang's unbiased path: 0.0) before one torch.topk;
 * we skip those groups, which is the same whenever the kept groups hold at
 * least top_k experts, as validated.  torch.topk leaves the order of equal
 * values open; we send ties to the lower expert (or group) id.
 */
#include "common/internal.h"

#include <math.h>
#include <string.h>

/* Scratch that lives on the stack; larger shapes get one block per call. */
#define ROUTE_STACK_EXPERTS 4096
#define ROUTE_STACK_GROUPS  64

/* SGLang's _RENORMALIZE_SUM_EPSILON: keeps 0 / 0 (every chosen sigmoid score
 * underflowed) at 0 instead of NaN; it vanishes next to any ordinary sum. */
#define ROUTE_RENORMALIZE_EPSILON 1e-20f

/* ---- bounded top-n selection ----------------------------------------------- */

/* The total order of candidates: higher value first, then lower id. */
static inline bool better(float ka, int32_t ia, float kb, int32_t ib) {
    return ka > kb || (ka == kb && ia < ib);
}

/* Keeps the best `cap` of the (key, id) pairs offered, in a heap whose root
 * is the worst one kept, so a candidate that cannot enter costs one
 * comparison: O(n log cap) for n offers, no allocation.  The arrays belong to
 * the caller (for experts they are the output row itself). */
typedef struct topn {
    float *key;
    int32_t *id;
    int32_t cap;
    int32_t n;
} topn;

static void topn_sift_down(float *key, int32_t *id, int32_t n, int32_t i) {
    const float k = key[i];
    const int32_t d = id[i];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && better(key[c], id[c], key[c + 1], id[c + 1])) c++; /* the worse child */
        if (!better(k, d, key[c], id[c])) break;
        key[i] = key[c];
        id[i] = id[c];
        i = c;
    }
    key[i] = k;
    id[i] = d;
}

static inline void topn_offer(topn *h, float k, int32_t d) {
    if (h->n < h->cap) {
        int32_t i = h->n++;
        while (i > 0) {
            const int32_t p = (i - 1) / 2;
            if (!better(h->key[p], h->id[p], k, d)) break;
            h->key[i] = h->key[p];
            h->id[i] = h->id[p];
            i = p;
        }
        h->key[i] = k;
        h->id[i] = d;
    } else if (better(k, d, h->key[0], h->id[0])) {
        h->key[0] = k;
        h->id[0] = d;
        topn_sift_down(h->key, h->id, h->n, 0);
    }
}

/* Heap sort in place: afterwards key[0], id[0] is the best. */
static void topn_sort(topn *h) {
    for (int32_t n = h->n; n > 1; n--) {
        const float k = h->key[0];
        const int32_t d = h->id[0];
        h->key[0] = h->key[n - 1];
        h->id[0] = h->id[n - 1];
        h->key[n - 1] = k;
        h->id[n - 1] = d;
        topn_sift_down(h->key, h->id, n - 1, 0);
    }
}

/* ---- validation ------------------------------------------------------------------ */

static moeq_status check_config(const moeq_route_config *cfg, moeq_error *err) {
    const int32_t e = cfg->num_experts;
    if (e < 1) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "moeq_route: num_experts is %d; want at least 1", (int)e);
    }
    if (cfg->top_k < 1 || cfg->top_k > e) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "moeq_route: top_k is %d; want 1..num_experts (%d)", (int)cfg->top_k,
                           (int)e);
    }
    if (cfg->scoring != MOEQ_SCORING_SOFTMAX && cfg->scoring != MOEQ_SCORING_SIGMOID) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "moeq_route: scoring is %d; want MOEQ_SCORING_SOFTMAX (0) or "
                           "MOEQ_SCORING_SIGMOID (1)",
                           (int)cfg->scoring);
    }
    if (cfg->renormalize != 0 && cfg->renormalize != 1) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "moeq_route: renormalize is %d; want 0 or 1", (int)cfg->renormalize);
    }

    const int32_t g = cfg->num_expert_group;
    const int32_t tg = cfg->topk_group;
    if (g < 0 || tg < 0) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "moeq_route: num_expert_group is %d and topk_group %d; want both 0 "
                           "(no grouping) or both positive",
                           (int)g, (int)tg);
    }
    if ((g == 0) != (tg == 0)) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "moeq_route: num_expert_group is %d but topk_group is %d; set both "
                           "(grouped top-k) or neither",
                           (int)g, (int)tg);
    }
    if (g > 0) {
        if (e % g != 0) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "moeq_route: num_expert_group %d does not divide num_experts %d; "
                               "want equal groups",
                               (int)g, (int)e);
        }
        const int32_t per_group = e / g;
        if (tg > g) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "moeq_route: topk_group is %d; want 1..num_expert_group (%d)",
                               (int)tg, (int)g);
        }
        if ((int64_t)tg * per_group < cfg->top_k) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "moeq_route: topk_group %d groups of %d experts hold %d experts, "
                               "fewer than top_k %d",
                               (int)tg, (int)per_group, (int)(tg * per_group), (int)cfg->top_k);
        }
        if (cfg->correction_bias && per_group < 2) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "moeq_route: num_expert_group %d leaves 1 expert per group, but "
                               "with a correction_bias a group scores as the sum of its best two "
                               "experts; want groups of at least 2",
                               (int)g);
        }
    }

    if (cfg->correction_bias) {
        for (int32_t i = 0; i < e; i++) {
            if (!isfinite(cfg->correction_bias[i])) {
                return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                                   "moeq_route: correction_bias[%d] is %g; want finite values",
                                   (int)i, (double)cfg->correction_bias[i]);
            }
        }
    }
    const float rsf = cfg->routed_scaling_factor;
    if (!isfinite(rsf) || rsf < 0.0f) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "moeq_route: routed_scaling_factor is %g; want a finite value >= 0 "
                           "(0 means 1)",
                           (double)rsf);
    }
    return MOEQ_STATUS_OK;
}

/* ---- one token -------------------------------------------------------------------- */

typedef struct route_scratch {
    float *scores;       /* [E] unbiased scores */
    float *group_key;    /* [topk_group] */
    int32_t *group_id;   /* [topk_group] */
    unsigned char *keep; /* [num_expert_group] 1 for the kept groups */
} route_scratch;

static inline float choice_of(const float *scores, const float *bias, int32_t e) {
    return bias ? scores[e] + bias[e] : scores[e];
}

/* A group's score: its best choice value, or with a bias the sum of its best
 * two (DeepSeek-V3's biased_grouped_topk). */
static float group_score(const float *scores, const float *bias, int32_t first, int32_t size) {
    if (!bias) {
        float best = scores[first];
        for (int32_t e = first + 1; e < first + size; e++) {
            if (scores[e] > best) best = scores[e];
        }
        return best;
    }
    float best = -INFINITY, second = -INFINITY;
    for (int32_t e = first; e < first + size; e++) {
        const float v = scores[e] + bias[e];
        if (v > best) {
            second = best;
            best = v;
        } else if (v > second) {
            second = v;
        }
    }
    return best + second;
}

static moeq_status route_token(const moeq_route_config *cfg, const float *x, int64_t token,
                               const route_scratch *s, int32_t *ids, float *weights,
                               moeq_error *err) {
    const int32_t n_experts = cfg->num_experts;
    const float *bias = cfg->correction_bias;
    float *scores = s->scores;

    float max = x[0];
    for (int32_t e = 0; e < n_experts; e++) {
        if (!isfinite(x[e])) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "moeq_route: token %lld, expert %d: logit is %g; want finite "
                               "router logits",
                               (long long)token, (int)e, (double)x[e]);
        }
        if (x[e] > max) max = x[e];
    }
    if (cfg->scoring == MOEQ_SCORING_SOFTMAX) {
        /* x - max <= 0, so exp never overflows, and the max contributes 1 to
         * the sum, so it is never 0. */
        float sum = 0.0f;
        for (int32_t e = 0; e < n_experts; e++) {
            scores[e] = expf(x[e] - max);
            sum += scores[e];
        }
        for (int32_t e = 0; e < n_experts; e++) scores[e] /= sum;
    } else {
        for (int32_t e = 0; e < n_experts; e++) scores[e] = 1.0f / (1.0f + expf(-x[e]));
    }

    const bool grouped = cfg->num_expert_group > 0;
    const int32_t n_groups = grouped ? cfg->num_expert_group : 1;
    const int32_t per_group = n_experts / n_groups;
    if (grouped) {
        topn gh = {s->group_key, s->group_id, cfg->topk_group, 0};
        for (int32_t g = 0; g < n_groups; g++) {
            topn_offer(&gh, group_score(scores, bias, g * per_group, per_group), g);
        }
        memset(s->keep, 0, (size_t)n_groups);
        for (int32_t i = 0; i < gh.n; i++) s->keep[s->group_id[i]] = 1;
    }

    /* The output row is the selection's storage: keys in `weights`, then the
     * weights replace them. */
    topn h = {weights, ids, cfg->top_k, 0};
    for (int32_t g = 0; g < n_groups; g++) {
        if (grouped && !s->keep[g]) continue;
        for (int32_t e = g * per_group; e < (g + 1) * per_group; e++) {
            topn_offer(&h, choice_of(scores, bias, e), e);
        }
    }
    topn_sort(&h);

    float sum = 0.0f;
    for (int32_t i = 0; i < h.n; i++) {
        weights[i] = scores[ids[i]];
        sum += weights[i];
    }
    const float scale = cfg->routed_scaling_factor == 0.0f ? 1.0f : cfg->routed_scaling_factor;
    const float denom = cfg->renormalize ? sum + ROUTE_RENORMALIZE_EPSILON : 1.0f;
    for (int32_t i = 0; i < h.n; i++) weights[i] = weights[i] / denom * scale;
    return MOEQ_STATUS_OK;
}

/* ---- entry point -------------------------------------------------------------------- */

moeq_status moeq_route(const moeq_route_config *cfg, const float *logits, int64_t tokens,
                       int32_t *topk_ids, float *topk_weights, moeq_error *err) {
    if (!cfg) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "moeq_route: cfg is NULL");
    moeq_status st = check_config(cfg, err);
    if (st != MOEQ_STATUS_OK) return st;
    if (tokens < 0) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "moeq_route: tokens is %lld; want >= 0",
                           (long long)tokens);
    }
    if (tokens == 0) return MOEQ_STATUS_OK;
    const char *null_arg = !logits         ? "logits"
                           : !topk_ids     ? "topk_ids"
                           : !topk_weights ? "topk_weights"
                                           : NULL;
    if (null_arg) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "moeq_route: %s is NULL with tokens = %lld; only tokens == 0 accepts "
                           "NULL arrays",
                           null_arg, (long long)tokens);
    }
    const size_t n_experts = (size_t)cfg->num_experts;
    const size_t k = (size_t)cfg->top_k;
    size_t cells;
    if ((uint64_t)tokens > SIZE_MAX || !moeq__mul_size((size_t)tokens, n_experts, &cells)) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "moeq_route: tokens %lld * num_experts %d overflows the address space",
                           (long long)tokens, (int)cfg->num_experts);
    }

    const size_t n_groups = (size_t)cfg->num_expert_group;
    const size_t topk_group = (size_t)cfg->topk_group;
    float stack_scores[ROUTE_STACK_EXPERTS];
    float stack_group_key[ROUTE_STACK_GROUPS];
    int32_t stack_group_id[ROUTE_STACK_GROUPS];
    unsigned char stack_keep[ROUTE_STACK_GROUPS];
    route_scratch s = {stack_scores, stack_group_key, stack_group_id, stack_keep};
    void *block = NULL;
    if (n_experts > ROUTE_STACK_EXPERTS || n_groups > ROUTE_STACK_GROUPS) {
        /* [E] floats, [topk_group] floats, [topk_group] int32, [groups] bytes;
         * everything before the bytes is 4-byte aligned. */
        const size_t words = n_experts + 2 * topk_group;
        const size_t bytes = words * 4 + n_groups;
        block = moeq__malloc(bytes);
        if (!block) {
            return moeq__error(err, MOEQ_STATUS_NOMEM,
                               "moeq_route: out of memory for %zu bytes of scratch "
                               "(num_experts %d, num_expert_group %d)",
                               bytes, (int)cfg->num_experts, (int)cfg->num_expert_group);
        }
        unsigned char *p = block;
        s.scores = (float *)(void *)p;
        s.group_key = (float *)(void *)(p + 4 * n_experts);
        s.group_id = (int32_t *)(void *)(p + 4 * (n_experts + topk_group));
        s.keep = p + 4 * words;
    }

    for (int64_t t = 0; t < tokens; t++) {
        const size_t row = (size_t)t;
        st = route_token(cfg, logits + row * n_experts, t, &s, topk_ids + row * k,
                         topk_weights + row * k, err);
        if (st != MOEQ_STATUS_OK) break;
    }
    moeq__free(block);
    return st;
}

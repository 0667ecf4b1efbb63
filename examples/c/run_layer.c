/*
 * run_layer.c - embedding moeq the way an engine does: config -> plan ->
 * create -> load from the checkpoint -> finalize -> route -> apply, for a MoE
 * layer, then the same for a linear layer (the attention's o_proj) next to it.
 *
 *   run_layer MODEL_DIR [PREFIX]     (PREFIX: model.layers.1.mlp.experts)
 *
 * Build against an installed moeq: cc run_layer.c $(pkg-config --cflags --libs moeq) -lm
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <moeq/moeq.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != MOEQ_OK) {                                                                   \
            fprintf(stderr, "%s: %s\n", moeq_status_name(err.code), err.message);                  \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static double number(const moeq_config *cfg, const char *key) {
    double v = 0;
    return moeq_config_model_number(cfg, key, &v) == MOEQ_OK ? v : 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL_DIR [PREFIX]\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    const char *prefix = argc > 2 ? argv[2] : "model.layers.1.mlp.experts";
    moeq_error err;

    /* 1. The quantization config, and the model's shape from the same config.json. */
    moeq_config *cfg;
    CHECK(moeq_config_load(dir, NULL, &cfg, &err));
    int32_t E = (int32_t)number(cfg, "n_routed_experts");
    if (!E) E = (int32_t)number(cfg, "num_experts");
    int32_t H = (int32_t)number(cfg, "hidden_size");
    int32_t I = (int32_t)number(cfg, "moe_intermediate_size");
    int32_t top_k = (int32_t)number(cfg, "num_experts_per_tok");

    /* 2. Which group and scheme run this layer, and why. */
    moeq_resolution res;
    moeq_selection sel;
    CHECK(moeq_resolve_moe(cfg, prefix, (uint32_t)E, NULL, NULL, &res, &err));
    CHECK(moeq_select(&res, prefix, NULL, &sel, &err));
    printf("%s -> %s\n", prefix, sel.reason);

    /* 3. Create the layer, load its experts, finalize. */
    moeq_moe_config mc;
    CHECK(moeq_moe_config_init(&mc, cfg, &res, &sel, &err));
    mc.prefix = prefix;
    mc.num_experts = E;
    mc.hidden_size = H;
    mc.intermediate_size = I;
    moeq_moe *layer;
    CHECK(moeq_moe_create(&mc, &layer, &err));
    moeq_checkpoint *ckpt;
    CHECK(moeq_checkpoint_open(dir, &ckpt, &err));
    uint64_t loaded = 0;
    CHECK(moeq_moe_load_checkpoint(layer, ckpt, NULL, NULL, NULL, &loaded, NULL, &err));
    CHECK(moeq_moe_finalize(layer, &err));
    printf("loaded %llu tensors into %u parameters\n", (unsigned long long)loaded,
           moeq_moe_param_count(layer));

    /* 4. Route 4 tokens and run the experts. */
    enum { T = 4 };
    float *x = malloc(sizeof(float) * T * (size_t)H),
          *logits = malloc(sizeof(float) * T * (size_t)E);
    float *out = malloc(sizeof(float) * T * (size_t)H),
          *w = malloc(sizeof(float) * T * (size_t)top_k);
    int32_t *ids = malloc(sizeof(int32_t) * T * (size_t)top_k);
    for (int i = 0; i < T * H; i++) x[i] = sinf(0.37f * (float)i);
    for (int i = 0; i < T * E; i++) logits[i] = cosf(1.3f * (float)i);
    moeq_route_config rc = {0};
    rc.num_experts = E;
    rc.top_k = top_k;
    rc.renormalize = 1;
    CHECK(moeq_route(&rc, logits, T, ids, w, &err));
    moeq_ctx *ctx;
    CHECK(moeq_ctx_create(NULL, &ctx, &err));
    CHECK(
        moeq_moe_apply(layer, ctx, MOEQ_DTYPE_F32, x, T, top_k, ids, w, MOEQ_DTYPE_F32, out, &err));
    double norm = 0;
    for (int i = 0; i < T * H; i++) norm += (double)out[i] * (double)out[i];
    printf("out: %d x %d, norm %.6g\n", T, (int)H, sqrt(norm));

    /* 5. A linear layer of the same checkpoint: resolve, select, create, load,
     *    finalize, apply.  The synthetic model's o_proj is [H, H]; an engine
     *    takes in/out features from the model (num_attention_heads * head_dim). */
    const char *o_proj = "model.layers.1.self_attn.o_proj";
    moeq_resolution lres;
    moeq_selection lsel;
    CHECK(moeq_resolve(cfg, o_proj, MOEQ_MODULE_LINEAR, NULL, &lres, &err));
    CHECK(moeq_select(&lres, o_proj, NULL, &lsel, &err));
    moeq_linear_config lc;
    CHECK(moeq_linear_config_init(&lc, cfg, &lres, &lsel, &err));
    lc.name = o_proj;
    lc.in_features = H;
    lc.out_features = H;
    moeq_linear *lin;
    CHECK(moeq_linear_create(&lc, &lin, &err));
    CHECK(moeq_linear_load_checkpoint(lin, ckpt, NULL, &err));
    CHECK(moeq_linear_finalize(lin, &err));
    CHECK(moeq_linear_apply(lin, ctx, MOEQ_DTYPE_F32, out, T, MOEQ_DTYPE_F32, x, &err));
    norm = 0;
    for (int i = 0; i < T * H; i++) norm += (double)x[i] * (double)x[i];
    printf("%s (%s): y %d x %d, norm %.6g\n", o_proj, moeq_scheme_name(lsel.scheme), T, (int)H,
           sqrt(norm));

    moeq_linear_destroy(lin);
    moeq_ctx_destroy(ctx);
    moeq_checkpoint_close(ckpt);
    moeq_moe_destroy(layer);
    moeq_config_destroy(cfg);
    free(x);
    free(logits);
    free(out);
    free(w);
    free(ids);
    return 0;
}

/*
 * moe_act.c - the activation pieces both forwards share (moe_apply.c's
 * reference forward and moe_fast.c), so that they quantize and activate
 * bit for bit alike: the activation quantization of rows, the gated
 * activation, and the scratch size of activation codes.
 */
#include "layer/moe.h"

#include <math.h>

/* Quantizes rows [0, m) of x (k columns) as the layer's scheme does and writes
 * the dequantized values back in place.  `tensor_scale` is the per-call scale
 * of the TENSOR kinds; `act_scale` the static scale or NVFP4 global scale.
 * codes/scales: scratch of at least m*k bytes and m*ceil(k/16) floats. */
void moeq__act_quant_rows(int32_t kind, int32_t group, float *x, size_t m, size_t k,
                          float tensor_scale, float act_scale, void *codes, float *scales) {
    switch (kind) {
        case MOEQ__ACT_NONE: return;
        case MOEQ__ACT_INT8_TOKEN:
            moeq__actq_int8_token_ref(x, m, k, codes, scales);
            moeq__actdq_int8_ref(codes, m, k, scales, 1, k, NULL, x);
            return;
        case MOEQ__ACT_INT8_TENSOR:
        case MOEQ__ACT_INT8_STATIC: {
            float s = kind == MOEQ__ACT_INT8_STATIC ? act_scale : tensor_scale;
            moeq__actq_int8_static_ref(x, m * k, s, 0, codes);
            moeq__actdq_int8_ref(codes, m, k, &s, 0, k, NULL, x);
            return;
        }
        case MOEQ__ACT_FP8_TOKEN:
            moeq__actq_fp8_token_ref(x, m, k, codes, scales);
            moeq__actdq_fp8_ref(codes, m, k, scales, 1, k, x);
            return;
        case MOEQ__ACT_FP8_TENSOR:
        case MOEQ__ACT_FP8_STATIC: {
            float s = kind == MOEQ__ACT_FP8_STATIC ? act_scale : tensor_scale;
            moeq__actq_fp8_static_ref(x, m * k, s, codes);
            moeq__actdq_fp8_ref(codes, m, k, &s, 0, k, x);
            return;
        }
        case MOEQ__ACT_FP8_GROUP: {
            size_t gs = (size_t)group, ng = (k + gs - 1) / gs;
            moeq__actq_fp8_group_ref(x, m, k, gs, codes, scales);
            moeq__actdq_fp8_ref(codes, m, k, scales, ng, gs, x);
            return;
        }
        case MOEQ__ACT_NVFP4: {
            uint8_t *sf = (uint8_t *)codes + m * k;
            moeq__actq_nvfp4_ref(x, m, k, act_scale, codes, sf);
            moeq__actdq_nvfp4_ref(codes, m, k, sf, act_scale, x);
            return;
        }
        case MOEQ__ACT_MXFP4: {
            uint8_t *e = (uint8_t *)codes + m * k;
            moeq__actq_mxfp4_ref(x, m, k, codes, e);
            moeq__actdq_mxfp4_ref(codes, m, k, e, x);
            return;
        }
        case MOEQ__ACT_MXFP8: {
            uint8_t *e = (uint8_t *)codes + m * k;
            moeq__actq_mxfp8_ref(x, m, k, codes, e);
            moeq__actdq_mxfp8_ref(codes, m, k, e, x);
            return;
        }
        default: return;
    }
}
static float silu(float x) {
    return x / (1.0f + expf(-x));
}

static float gelu(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

static float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}

static float relu2(float x) {
    return x > 0 ? x * x : 0.0f;
}

/* a[j] = act(gate[j]) * up[j], or act(up[j]) for non-gated experts. */
void moeq__expert_act(const moeq_moe_config *c, const float *gate, const float *up, float *a,
                      size_t n) {
    float lim = c->swiglu_limit;
    if (c->non_gated) {
        for (size_t j = 0; j < n; j++) {
            float u = up[j];
            switch (c->activation) {
                case MOEQ_ACT_SILU: a[j] = silu(u); break;
                case MOEQ_ACT_GELU: a[j] = gelu(u); break;
                case MOEQ_ACT_GELU_TANH: a[j] = gelu_tanh(u); break;
                default: a[j] = relu2(u); /* RELU2; create refused the others */
            }
        }
        return;
    }
    for (size_t j = 0; j < n; j++) {
        float g = gate[j], u = up[j];
        switch (c->activation) {
            case MOEQ_ACT_SILU:
                if (lim > 0) {
                    g = fminf(g, lim);
                    u = fminf(fmaxf(u, -lim), lim);
                }
                a[j] = silu(g) * u;
                break;
            case MOEQ_ACT_GELU: a[j] = gelu(g) * u; break;
            case MOEQ_ACT_GELU_TANH: a[j] = gelu_tanh(g) * u; break;
            default: { /* SWIGLUOAI */
                float L = lim > 0 ? lim : 7.0f;
                g = fminf(g, L);
                u = fminf(fmaxf(u, -L), L);
                a[j] = g / (1.0f + expf(-c->swiglu_alpha * g)) * (u + 1.0f);
            }
        }
    }
}

/* Activation codes of up to `rows` rows of `cols` values: one byte each
 * (int8/FP8), or half a byte plus a scale byte per 16 (FP4). */
size_t moeq__act_codes_bound(size_t rows, size_t cols) {
    return rows * (cols + cols / 16 + 2) + 64;
}

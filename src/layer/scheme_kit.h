/*
 * scheme_kit.h - what a scheme may use of the layer: the plugin interface of
 * src/layer/ for src/schemes/.  The layer object and its parameters (the
 * struct a scheme's slots receive), the manifest calls of create_weights,
 * the finalize helpers, and the generic apply slot.  moe_params.h adds the
 * parameter families on top.  A scheme file includes "layer/moe_params.h"
 * and nothing else of the layer; the forward pass's insides (moe.h) stay
 * out of its sight.  Never installed.
 *
 * Life of a layer:
 *   create    moe.c checks the config, the scheme's create_weights slot
 *             declares the parameter manifest (moeq__moe_add_param);
 *   load      moe.c maps each checkpoint tensor to (parameter, expert, shard)
 *             and copies it in, following the parameter's layout attributes;
 *   finalize  the scheme's finalize slot turns the parameters into one
 *             moeq__proj per expert projection (gate, up, down): a kernels.h
 *             moeq__qweight plus the activation quantization to apply;
 *   apply     moe_apply.c routes tokens to experts and runs the projections.
 */
#ifndef MOEQ_SCHEME_KIT_H
#define MOEQ_SCHEME_KIT_H

#include "common/internal.h"
#include "kernels.h"
#include "schemes/scheme.h"

/* Shards: gate (w1) and up (w3) fill w13, down (w2) fills w2. */
enum { MOEQ__GATE = 0, MOEQ__UP = 1, MOEQ__DOWN = 2 };

/* A custom loader for a parameter whose layout is not one of the generic
 * ones: validates `t` and writes it into expert `e` (local id), shard `shard`. */
struct moeq__param;
typedef moeq_status (*moeq__load_fn)(moeq_moe *l, struct moeq__param *p, int32_t e, int32_t shard,
                                     const moeq_tensor *t, moeq_error *err);

typedef struct moeq__param {
    moeq_param pub; /* what moeq_moe_param hands out */
    char name[48];
    char suffix[32];
    bool w13;             /* true: fed by gate and up; false: fed by down */
    uint32_t ckpt_dtypes; /* bit i set: checkpoint dtype i accepted (floats convert) */
    uint8_t *loaded;      /* [E_local * 2]: expert e, shard s loaded (s: 0 gate/down, 1 up) */
    moeq__load_fn load;   /* NULL: the generic loader */
    const uint8_t **borrowed; /* [E_local * 2] or NULL: a slice left in the caller's checkpoint
                                 (moeq_moe_load_finalize), in checkpoint orientation and the
                                 parameter's dtype; moeq__moe_ct_views reads it in place, and
                                 pub.data holds nothing for it */
} moeq__param;

/* The activation quantization a projection applies to its input rows. */
typedef enum moeq__act_kind {
    MOEQ__ACT_NONE = 0,    /* 16/32-bit activations */
    MOEQ__ACT_INT8_TOKEN,  /* dynamic, one scale per row */
    MOEQ__ACT_INT8_TENSOR, /* dynamic, one scale over every row of the call */
    MOEQ__ACT_INT8_STATIC, /* static per-tensor scale */
    MOEQ__ACT_FP8_TOKEN,
    MOEQ__ACT_FP8_TENSOR,
    MOEQ__ACT_FP8_GROUP, /* dynamic, one scale per row per act_group columns */
    MOEQ__ACT_FP8_STATIC,
    MOEQ__ACT_NVFP4, /* local E4M3 group-16 scales against a static global scale */
    MOEQ__ACT_MXFP4, /* dynamic E8M0 group-32 scales */
    MOEQ__ACT_MXFP8  /* dynamic E8M0 group-32 scales, E4M3 codes */
} moeq__act_kind;

/* One projection of one expert, ready for the kernels. */
typedef struct moeq__proj {
    moeq__qweight w;   /* [rows = out, cols = in]; PACKED points at pk */
    moeq__packed pk;   /* the blocked layout, when w.kind is PACKED */
    float act_scale;   /* STATIC kinds: the input scale; NVFP4: the input global scale */
    const float *bias; /* [rows] or NULL */
} moeq__proj;

/* A block of memory the layer owns after finalize (freed with it). */
typedef struct moeq__block {
    struct moeq__block *next;
    max_align_t data[];
} moeq__block;

struct moeq_moe {
    moeq_moe_config cfg; /* copied; pointers below point at owned copies */
    moeq_quant_args weights, inputs;
    bool has_weights, has_inputs;
    char *prefix; /* NULL: any */
    char *proj[3];
    int32_t *expert_map;      /* [num_experts] global -> local or -1 */
    int32_t *local_to_global; /* [num_local_experts] */
    const moeq__scheme *scheme;
    bool finalized;
    bool linear; /* one projection, no experts: a moeq_linear shard (linear.c).  Only the
                    down (w2) projection exists: w13 parameters are never added, dims.S is
                    0, hidden_size is out_features and intermediate_size in_features */

    moeq__param *params;
    uint32_t n_params, cap_params;

    /* After finalize. */
    int32_t act_kind;  /* moeq__act_kind, the same for every projection */
    int32_t act_group; /* FP8_GROUP: columns per scale */
    moeq__proj *projs; /* [E_local * 3]: gate, up, down of each expert */
    bool all_packed;   /* every projection is PACKED (moe_pack.c) */
    bool int8_dot;     /* int8 activations, every projection I8- or I4-packed: the fast
                          forward multiplies codes in integers (moe_fast.c) */
    bool fp4_dot;      /* NVFP4 activations and weights (E2M1, E4M3 / global scales,
                          groups of 16) throughout: likewise, with fdot */
    moeq__block *blocks;
    uint8_t *pk_arena; /* the packed projections' codes and scales (moe_pack.c) */

    /* While loading and finalizing (moeq_moe_load_finalize). */
    bool borrow;                /* moeq_moe_load leaves 2-D slices in the checkpoint */
    struct moeq__pool *workers; /* finalize's threads; NULL: the caller alone */
};

/* ---- for schemes: building the manifest (moe_manifest.c) ------------------- */

/* Dimensions schemes size their parameters with. */
typedef struct moeq__dims {
    int64_t E; /* local experts */
    int64_t H; /* hidden size */
    int64_t I; /* intermediate size per partition */
    int64_t S; /* shards of w13: 2 (gate, up) for gated experts, 1 (up) for non-gated;
                  w13 parameters are sized S * I, per-shard ones [E, S] */
} moeq__dims;

moeq__dims moeq__moe_dims(const moeq_moe *l);

/* Whether the layer has projection `shard` (non-gated layers have no gate);
 * loops over an expert's three projections skip the ones it lacks. */
bool moeq__moe_has_proj(const moeq_moe *l, int32_t shard);
/* Where a projection sits in its parameter: gate 0 and up 1 of w13 (up 0
 * when non-gated), down 0 of w2.  The loaded[] flags use the same slot. */
int32_t moeq__moe_slot(const moeq_moe *l, int32_t shard);

/* One parameter to declare.  shape[0] is the local expert count. */
typedef struct moeq__param_spec {
    const char *name; /* "w13_weight_packed" */
    int32_t dtype;
    int32_t ndim;
    int64_t shape[4];
    const char *suffix;   /* checkpoint parameter: "weight_packed" */
    int32_t layout;       /* moeq_param_layout */
    int32_t quant_method; /* moeq_strategy or -1 */
    int32_t is_transposed;
    int32_t required;
    uint32_t ckpt_dtypes; /* accepted checkpoint dtypes (bit per moeq_dtype) */
    moeq__load_fn load;   /* NULL: generic */
} moeq__param_spec;

#define MOEQ__DT(d)        (1u << MOEQ_DTYPE_##d)
#define MOEQ__FLOAT_DTYPES (MOEQ__DT(F32) | MOEQ__DT(F16) | MOEQ__DT(BF16))

/* Adds a parameter (zero-filled; float parameters of a per-shard or shared
 * scale start at 1).  The name must start with "w13_" or "w2_".  A linear
 * layer (l->linear) has no w13 projections: its w13_ parameters are not
 * added (OK is returned), so every scheme declares a linear layer as it
 * declares an expert's down projection. */
moeq_status moeq__moe_add_param(moeq_moe *l, const moeq__param_spec *spec, moeq_error *err);
moeq__param *moeq__moe_param(moeq_moe *l, const char *name);

/* ---- for schemes: finalize (moe_finalize.c; moeq__moe_alloc: moe_manifest.c) */

/* Allocates memory owned by the layer (zeroed), freed with it.  Thread-safe
 * against itself (finalize's workers). */
void *moeq__moe_alloc(moeq_moe *l, size_t n);

/* The checkpoint-form tensors of one expert projection, rebuilt from the
 * parameters (un-transposed and un-sharded): "weight_packed", "weight_scale",
 * ... as compressed-tensors writes them for one module.  Views point into
 * the parameters or into layer-owned copies. */
typedef struct moeq__ct_views {
    moeq_tensor t[12];
    char names[12][32];
    uint32_t n;
} moeq__ct_views;

moeq_status moeq__moe_ct_views(moeq_moe *l, int32_t e, int32_t shard, moeq__ct_views *out,
                               moeq_error *err);

/* The usual finalize: for every expert projection, rebuild the CT tensors and
 * build its qweight with the same validation moeq_dequantize applies; then
 * set the activation quantization from the input args.  Schemes whose
 * parameters are in checkpoint form use it directly as their finalize slot.
 * Experts are spread over l->workers when set (moeq__moe_alloc is safe to
 * call from them).
 * A scheme whose finalize reads the 2-D parameters' data other than through
 * moeq__moe_ct_views must give them a custom loader (moeq__param.load): a
 * layer with one never borrows checkpoint slices. */
moeq_status moeq__moe_finalize_ct(moeq_moe *l, moeq_error *err);

/* The activation quantization implied by input args (NULL: none). */
moeq_status moeq__moe_act_kind(const moeq_moe *l, int32_t *kind, int32_t *group, moeq_error *err);

/* The name of an expert's projection for messages: "<prefix>.<e>.<proj>". */
void moeq__moe_module_name(const moeq_moe *l, int32_t local_e, int32_t shard, char *buf, size_t n);

/* ---- for schemes: apply ---------------------------------------------------- */

/* The generic apply slot (moe_apply.c): the fast path (moe_fast.c) unless
 * the context pins the reference forward.  `io` is a moeq__apply_io (moe.h). */
moeq_status moeq__moe_apply_generic(const moeq_moe *l, void *io, moeq_error *err);

#endif /* MOEQ_SCHEME_KIT_H */

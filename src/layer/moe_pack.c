/*
 * moe_pack.c - the last step of finalize: every expert projection whose
 * weight the fast kernels can stream is copied into the blocked layout
 * (kernels.h, moeq__packed), and its qweight becomes a PACKED view of it, so
 * the reference forward and moeq_moe_apply_reference read the very same
 * bytes (packing keeps every code * scale product bit for bit).
 *
 * Memory: when every projection was packed, nothing reads the loaded
 * parameters or finalize's copies (transposed-back codes, f32 scale grids)
 * any more, and they are freed: a packed layer holds one copy of its weights,
 * with scales in their narrowest exact form (1 byte for NVFP4 and MXFP4, 2
 * for bf16/f16 group scales), all in one arena of 2 MiB pages (moe_bench,
 * 2 threads, layers with and without them alternating in one run:
 * 0.96-0.98x the time at T=1 for wna16, w8a8_int8 and w8a8_fp8, 0.97x at
 * T=32).  Otherwise (some projection has zero points, g_idx, sizes that are
 * not multiples of 8, ...) the originals stay for the projections that need
 * them and the packed copies come on top.
 *
 * A layer with int8 activations whose projections all packed as I8 or I4 is
 * marked int8_dot, one with NVFP4 activations and NVFP4 weights fp4_dot: its
 * fast forward keeps activations as codes and multiplies them with the
 * weight codes in integers.
 */
#include "layer/moe.h"

#include "common/pool.h"

#include <string.h>

/* Frees a block moeq__moe_alloc returned; false when p is not one. */
static bool release_block(moeq_moe *l, const void *p) {
    if (!p) return false;
    for (moeq__block **at = &l->blocks; *at; at = &(*at)->next) {
        if ((const void *)(*at)->data == p) {
            moeq__block *b = *at;
            *at = b->next;
            moeq__free(b);
            return true;
        }
    }
    return false;
}

/* NVFP4's per-projection global scale: the E4M3_DIV divisor. */
static float global_scale_hint(moeq_moe *l, int32_t e, int32_t shard) {
    moeq__param *p = moeq__moe_param(l, shard == MOEQ__DOWN ? "w2_weight_global_scale"
                                                            : "w13_weight_global_scale");
    if (!p || !p->pub.data || p->pub.dtype != MOEQ_DTYPE_F32) return 0.0f;
    size_t i = shard == MOEQ__DOWN
                   ? (size_t)e
                   : (size_t)e * (size_t)moeq__moe_dims(l).S + (size_t)moeq__moe_slot(l, shard);
    float g;
    memcpy(&g, (const uint8_t *)p->pub.data + i * sizeof(float), sizeof g);
    return g;
}

/* Plans (arena NULL) or fills the projections [n * tid / nt, n * (tid + 1) / nt)
 * on one of the layer's workers. */
typedef struct {
    moeq_moe *l;
    bool *packed; /* [E * 3] */
    size_t *at;   /* [E * 3]: offset in the arena */
    uint8_t *arena;
    size_t maxk;
    bool nomem; /* a worker had no row buffer */
} pack_job;

static void pack_range(void *arg, int tid, int nt) {
    pack_job *j = arg;
    moeq_moe *l = j->l;
    const size_t n = (size_t)l->cfg.num_local_experts * 3u;
    const size_t i0 = n * (size_t)tid / (size_t)nt, i1 = n * (size_t)(tid + 1) / (size_t)nt;
    if (!j->arena) {
        for (size_t i = i0; i < i1; i++) {
            moeq__proj *pj = &l->projs[i];
            int32_t e = (int32_t)(i / 3), shard = (int32_t)(i % 3);
            if (!moeq__moe_has_proj(l, shard)) continue; /* nothing to pack, not unpacked */
            moeq__packed pk;
            if (!moeq__pk_plan(&pj->w, global_scale_hint(l, e, shard), &pk)) continue;
            pj->pk = pk;
            j->packed[i] = true;
        }
        return;
    }
    uint8_t *row_buf = moeq__malloc(j->maxk);
    if (!row_buf) {
        __atomic_store_n(&j->nomem, true, __ATOMIC_RELAXED);
        return;
    }
    for (size_t i = i0; i < i1; i++) {
        if (!j->packed[i]) continue;
        moeq__proj *pj = &l->projs[i];
        moeq__packed *pk = &pj->pk;
        const size_t cb = pk->blocks * pk->blk_code_bytes, sb = pk->blocks * pk->blk_scale_bytes;
        uint8_t *codes = j->arena + j->at[i];
        moeq__pk_fill(&pj->w, pk, codes, codes + cb, row_buf);
        memset(codes + cb + sb, 0, 64);
        pk->codes = codes;
        pk->scales = codes + cb;
        pk->bf16_scaled = moeq__pk_bf16_scaled(pk);
    }
    moeq__free(row_buf);
}

static void pack_run(moeq_moe *l, pack_job *j) {
    if (l->workers && moeq__pool_threads(l->workers) > 1) {
        moeq__pool_run(l->workers, pack_range, j);
    } else {
        pack_range(j, 0, 1);
    }
}

moeq_status moeq__moe_pack(moeq_moe *l, moeq_error *err) {
    int32_t E = l->cfg.num_local_experts;
    size_t n = (size_t)E * 3u;
    pack_job j = {l,
                  moeq__calloc(n, sizeof(bool)),
                  moeq__calloc(n, sizeof(size_t)),
                  NULL,
                  (size_t)(l->cfg.hidden_size > l->cfg.intermediate_size
                               ? l->cfg.hidden_size
                               : l->cfg.intermediate_size),
                  false};
    bool *packed = j.packed;
    if (!j.packed || !j.at) {
        moeq__free(j.packed);
        moeq__free(j.at);
        return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory packing weights");
    }
    /* Plan every projection, then lay the packed ones out in one arena, each
     * on a 64-byte boundary with 64 zero bytes after it (as a block of its own
     * had): huge pages where the system allows (moeq__malloc_huge). */
    pack_run(l, &j);
    bool all = true;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (!moeq__moe_has_proj(l, (int32_t)(i % 3))) continue;
        if (!packed[i]) {
            all = false;
            continue;
        }
        const moeq__packed *pk = &l->projs[i].pk;
        const size_t bytes = pk->blocks * (pk->blk_code_bytes + pk->blk_scale_bytes);
        j.at[i] = total;
        if (!moeq__add_size(total, (bytes + 64 + 63) / 64 * 64, &total)) {
            moeq__free(j.packed);
            moeq__free(j.at);
            return moeq__error(err, MOEQ_STATUS_NOMEM,
                               "packing weights: the packed projections' sizes overflow size_t");
        }
    }
    uint8_t *arena = total ? moeq__malloc_huge(total) : NULL;
    if (total && !arena) {
        moeq__free(j.packed);
        moeq__free(j.at);
        return moeq__error(err, MOEQ_STATUS_NOMEM,
                           "out of memory packing weights (%zu bytes in one arena)", total);
    }
    if (arena) {
        j.arena = arena;
        pack_run(l, &j);
    }
    moeq__free(j.at);
    if (j.nomem) {
        /* the projections' pk point into the arena: forget them with it */
        for (size_t i = 0; i < n; i++) memset(&l->projs[i].pk, 0, sizeof l->projs[i].pk);
        moeq__free(arena);
        moeq__free(j.packed);
        return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory packing weights");
    }
    moeq__free(l->pk_arena);
    l->pk_arena = arena;
    /* Switch the packed projections over; free what nobody reads any more. */
    for (size_t i = 0; i < n; i++) {
        if (!packed[i]) continue;
        moeq__proj *pj = &l->projs[i];
        const void *old_codes = pj->w.codes;
        const float *old_scale = pj->w.scale;
        pj->w.kind = MOEQ__QW_PACKED;
        pj->w.pk = &pj->pk;
        pj->w.codes = NULL;
        pj->w.row_stride = 0;
        pj->w.scale = NULL;
        if (all) {
            release_block(l, old_codes);
            release_block(l, old_scale);
        }
    }
    moeq__free(packed);
    l->all_packed = all;
    /* Int8 activations on int8 or int4 codes: integer products (kernels.h, idot). */
    bool int8_act = l->act_kind == MOEQ__ACT_INT8_TOKEN || l->act_kind == MOEQ__ACT_INT8_TENSOR ||
                    l->act_kind == MOEQ__ACT_INT8_STATIC;
    l->int8_dot = all && int8_act;
    for (size_t i = 0; i < n && l->int8_dot; i++) {
        if (!moeq__moe_has_proj(l, (int32_t)(i % 3))) continue;
        const moeq__packed *pk = &l->projs[i].pk;
        l->int8_dot =
            (pk->code == MOEQ__PK_I8 || pk->code == MOEQ__PK_I4) && pk->gsize <= MOEQ__IDOT_KMAX;
    }
    /* NVFP4 on NVFP4 (kernels.h, fdot). */
    l->fp4_dot = all && l->act_kind == MOEQ__ACT_NVFP4;
    for (size_t i = 0; i < n && l->fp4_dot; i++) {
        if (!moeq__moe_has_proj(l, (int32_t)(i % 3))) continue;
        const moeq__packed *pk = &l->projs[i].pk;
        l->fp4_dot = pk->code == MOEQ__PK_NIB && pk->scale_kind == MOEQ__PS_E4M3_DIV &&
                     pk->gsize == 16;
        for (uint8_t c = 0; c < 16 && l->fp4_dot; c++) {
            l->fp4_dot = pk->lut[c] == moeq__e2m1_to_f32(c);
        }
    }
    if (all) {
        for (uint32_t i = 0; i < l->n_params; i++) {
            moeq__free(l->params[i].pub.data);
            l->params[i].pub.data = NULL;
        }
    }
    return MOEQ_STATUS_OK;
}

size_t moeq__moe_expert_bytes(const moeq_moe *l, int32_t e) {
    size_t total = 0;
    for (int32_t s = 0; s < 3; s++) {
        if (!moeq__moe_has_proj(l, s)) continue;
        const moeq__proj *pj = &l->projs[e * 3 + s];
        const moeq__qweight *w = &pj->w;
        if (w->kind == MOEQ__QW_PACKED) {
            total += pj->pk.blocks * (pj->pk.blk_code_bytes + pj->pk.blk_scale_bytes);
        } else {
            total += w->rows * w->row_stride;
            if (w->scale) total += w->grid.rows * w->grid.cols * sizeof(float);
            if (w->zero_point) total += w->grid.rows * w->grid.cols * sizeof(float);
        }
    }
    return total;
}

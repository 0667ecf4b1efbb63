/*
 * model_load.c - a whole checkpoint's MoE and linear layers in one call: find
 * the MoE layers by their tensor names, and the quantized linear modules as
 * `moeq inspect` tells a module's kind (checkpoint/modules.h), fusing q/k/v
 * and gate/up siblings; give each layer the config `moeq run` gives it
 * (resolution, scheme, the model family's dimensions and activation, or the
 * module's shapes), then create, load and finalize them one after the other
 * in layer order (MoE layers through moeq_moe_load_finalize on the loader
 * threads: weights read in place from the mapped files and packed straight
 * into the kernels' layout), with progress after each layer.  On any failure
 * every layer made so far is destroyed.
 */
#include "checkpoint/modules.h"
#include "checkpoint/safetensors.h"
#include "layer/moe.h"
#include "resolve/resolve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct moeq_model {
    moeq_config *cfg;
    uint32_t n;
    char **prefix;  /* [n] */
    moeq_moe **moe; /* [n] */
    uint32_t n_lin;
    char **lin_name;   /* [n_lin] */
    moeq_linear **lin; /* [n_lin] */
};

/* ---- finding the layers ------------------------------------------------------------ */

static const char *const k_hf[3] = {"gate_proj", "up_proj", "down_proj"};
static const char *const k_mixtral[3] = {"w1", "w3", "w2"};

/* Whether `s` (up to the next '.') is one of the projection names; sets the style. */
static bool proj_name(const char *s, size_t n, int *style) {
    for (int i = 0; i < 3; i++) {
        if (strlen(k_hf[i]) == n && memcmp(s, k_hf[i], n) == 0) {
            *style = 1;
            return true;
        }
        if (strlen(k_mixtral[i]) == n && memcmp(s, k_mixtral[i], n) == 0) {
            *style = 2;
            return true;
        }
    }
    return false;
}

/* Splits "<prefix>.<digits>.<proj>.<param>": the prefix length and expert id. */
static bool expert_tensor(const char *name, size_t *plen, long *id, int *style, bool *bias) {
    const char *last = strrchr(name, '.');
    if (!last || last == name) return false;
    const char *p = last;
    do {
        p--;
    } while (p > name && *p != '.');
    if (p == name) return false;
    const char *proj = p + 1;
    if (!proj_name(proj, (size_t)(last - proj), style)) return false;
    const char *d = p;
    do {
        d--;
    } while (d > name && *d != '.');
    if (d == name) return false;
    const char *num = d + 1;
    if (num == p || p - num > 9) return false;
    long v = 0;
    for (const char *c = num; c < p; c++) {
        if (*c < '0' || *c > '9') return false;
        v = v * 10 + (*c - '0');
    }
    *plen = (size_t)(d - name);
    *id = v;
    *bias = strcmp(last + 1, "bias") == 0;
    return true;
}

/* Orders prefixes with their numbers compared as numbers (layers.2 < layers.10). */
static int natural_cmp(const char *a, const char *b) {
    while (*a && *b) {
        if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
            const char *ea = a, *eb = b;
            while (*ea == '0' && ea[1] >= '0' && ea[1] <= '9') ea++;
            while (*eb == '0' && eb[1] >= '0' && eb[1] <= '9') eb++;
            a = ea;
            b = eb;
            while (*ea >= '0' && *ea <= '9') ea++;
            while (*eb >= '0' && *eb <= '9') eb++;
            if (ea - a != eb - b) return ea - a < eb - b ? -1 : 1;
            int c = strncmp(a, b, (size_t)(ea - a));
            if (c) return c;
            a = ea;
            b = eb;
        } else if (*a != *b) {
            return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
        } else {
            a++;
            b++;
        }
    }
    return *a ? 1 : *b ? -1 : 0;
}

static int info_cmp(const void *x, const void *y) {
    return natural_cmp(((const moeq_model_layer_info *)x)->prefix,
                       ((const moeq_model_layer_info *)y)->prefix);
}

moeq_status moeq_model_find_layers(const moeq_config *cfg, const moeq_checkpoint *ckpt,
                                   moeq_model_layer_info **out, uint32_t *count, moeq_error *err) {
    if (out) *out = NULL;
    if (count) *count = 0;
    if (!ckpt || !out || !count) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL",
                           !ckpt  ? "checkpoint"
                           : !out ? "out"
                                  : "count");
    }
    moeq_model_layer_info *v = NULL;
    uint8_t *styles = NULL; /* [cap]: bit 1 gate_proj/up_proj/down_proj seen, bit 2 w1/w3/w2 */
    uint32_t n = 0, cap = 0;
    uint64_t total = moeq_checkpoint_tensor_count(ckpt);
    /* Tensors are in name order, so the tensors under "<prefix>." are one run. */
    for (uint64_t i = 0; i < total; i++) {
        const moeq_tensor *t = moeq__checkpoint_tensor_at(ckpt, i);
        size_t plen;
        long id;
        int style = 0;
        bool bias;
        if (!expert_tensor(t->name, &plen, &id, &style, &bias)) continue;
        if (plen >= sizeof v[0].prefix) continue;
        moeq_model_layer_info *L = NULL;
        if (n && strlen(v[n - 1].prefix) == plen && memcmp(v[n - 1].prefix, t->name, plen) == 0) {
            L = &v[n - 1];
        }
        if (!L) {
            if (n == cap) {
                uint32_t nc = cap ? cap * 2 : 16;
                moeq_model_layer_info *nv = moeq__realloc(v, nc * sizeof *nv);
                if (nv) v = nv;
                uint8_t *ns = nv ? moeq__realloc(styles, nc) : NULL;
                if (!ns) {
                    moeq__free(v);
                    moeq__free(styles);
                    return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory listing MoE layers");
                }
                styles = ns;
                cap = nc;
            }
            L = &v[n];
            styles[n++] = 0;
            memset(L, 0, sizeof *L);
            memcpy(L->prefix, t->name, plen);
            L->prefix[plen] = '\0';
        }
        if (id + 1 > L->found_experts) L->found_experts = (int32_t)(id + 1);
        L->has_bias |= bias;
        styles[L - v] |= (uint8_t)style;
    }
    /* the projection names: gate_proj/... unless only w1/w3/w2 appear;
     * every tensor under the prefix counts (the loader reads all of them) */
    for (uint32_t k = 0; k < n; k++) {
        moeq_model_layer_info *L = &v[k];
        const char *const *use = styles[k] == 2 ? k_mixtral : k_hf;
        for (int i = 0; i < 3; i++) L->proj[i] = use[i];
        uint64_t first = 0;
        L->tensors = moeq__checkpoint_module_range(ckpt, L->prefix, &first);
        for (uint64_t i = 0; i < L->tensors; i++) {
            L->bytes += moeq__checkpoint_tensor_at(ckpt, first + i)->nbytes;
        }
        L->experts = L->found_experts;
    }
    moeq__free(styles);
    if (cfg) {
        moeq_model_moe mm;
        moeq_error e2;
        int32_t model_e = moeq_model_moe_get(cfg, &mm, &e2) == MOEQ_OK ? mm.num_experts : 0;
        for (uint32_t k = 0; k < n; k++) {
            int32_t kept = 0;
            if (model_e) v[k].experts = model_e;
            /* a layer moe_sparsity_config prunes holds its retained experts */
            if (moeq_config_retained_experts(cfg, v[k].prefix, &kept, &e2) == MOEQ_OK && kept > 0) {
                v[k].experts = kept;
            }
        }
    }
    if (n > 1) qsort(v, n, sizeof *v, info_cmp);
    *out = v;
    *count = n;
    return MOEQ_STATUS_OK;
}

/* ---- finding the linear modules --------------------------------------------------- */

#define MAX_FUSED 8

/* One linear layer to load: a module, or the fused shards of siblings. */
typedef struct lin_info {
    char name[256]; /* the module, or "<parent>.<fused>" */
    moeq_resolution res;
    int32_t has_bias;
    int32_t n_shards; /* 0: the module itself */
    const char *shard_names[MAX_FUSED];
    uint64_t tensors, bytes;
    bool fused_away; /* a shard of a fused entry */
} lin_info;

/* A tensor by its module: the bytes of its name before the last dot. */
typedef struct mod_ref {
    const char *name;
    uint32_t len;
    uint32_t t;
} mod_ref;

static int mod_ref_cmp(const void *x, const void *y) {
    const mod_ref *a = x, *b = y;
    int c = memcmp(a->name, b->name, a->len < b->len ? a->len : b->len);
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return a->t < b->t ? -1 : a->t > b->t;
}

static int lin_cmp(const void *x, const void *y) {
    return strcmp(((const lin_info *)x)->name, ((const lin_info *)y)->name);
}

static int lin_natural_cmp(const void *x, const void *y) {
    return natural_cmp(((const lin_info *)x)->name, ((const lin_info *)y)->name);
}

typedef struct lin_list {
    lin_info *v;
    uint32_t n, cap;
} lin_list;

static lin_info *lin_push(lin_list *l) {
    if (l->n == l->cap) {
        uint32_t nc = l->cap ? l->cap * 2 : 16;
        lin_info *nv = moeq__realloc(l->v, nc * sizeof *nv);
        if (!nv) return NULL;
        l->v = nv;
        l->cap = nc;
    }
    lin_info *L = &l->v[l->n++];
    memset(L, 0, sizeof *L);
    return L;
}

static bool under_moe(const char *name, size_t len, const moeq_model_layer_info *moe, uint32_t n) {
    for (uint32_t k = 0; k < n; k++) {
        size_t pl = strlen(moe[k].prefix);
        if (len > pl && name[pl] == '.' && memcmp(name, moe[k].prefix, pl) == 0) return true;
    }
    return false;
}

/* Module r[0..count) (its tensors, one module): a lin_info when it is a
 * linear module whose resolution quantizes its weight.  Its shape is read
 * when it loads (module_shape). */
static moeq_status add_module(const moeq_config *cfg, const moeq_checkpoint *ck, const mod_ref *r,
                              uint32_t count, lin_list *out, moeq_error *err) {
    moeq__module_traits tr = {false, false, false};
    uint64_t bytes = 0;
    for (uint32_t k = 0; k < count; k++) {
        const moeq_tensor *t = moeq__checkpoint_tensor_at(ck, r[k].t);
        moeq__module_note(&tr, t->name + r->len + 1, t->ndim);
        bytes += t->nbytes;
    }
    if (moeq__module_kind(r->name, r->len, &tr, NULL, NULL) != MOEQ_MODULE_LINEAR) {
        return MOEQ_STATUS_OK;
    }
    char name[256];
    if (r->len >= sizeof name) return MOEQ_STATUS_OK; /* no engine names a module so */
    memcpy(name, r->name, r->len);
    name[r->len] = '\0';
    moeq_resolution res;
    moeq_status st = moeq_resolve(cfg, name, MOEQ_MODULE_LINEAR, NULL, &res, err);
    if (st != MOEQ_STATUS_OK) return moeq__error_prefix(err, st, "linear module %s", name);
    if (res.status != MOEQ_MATCH_QUANTIZED || !res.weights) return MOEQ_STATUS_OK;
    lin_info *L = lin_push(out);
    if (!L) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory listing linear modules");
    memcpy(L->name, name, r->len + 1);
    L->res = res;
    L->has_bias = tr.bias;
    L->tensors = count;
    L->bytes = bytes;
    return MOEQ_STATUS_OK;
}

/* Folds complete sets of fused siblings (q/k/v_proj, gate/up_proj: moeq_resolve's
 * default fused names) into one entry each, when they resolve alike and all
 * or none have a bias.  l->v is in strcmp order. */
static moeq_status fuse(const moeq_config *cfg, lin_list *l, moeq_error *err) {
    uint32_t n_rules = 0;
    const moeq_fused_name *rules = moeq__resolve_default_fused(&n_rules);
    const uint32_t n = l->n;
    for (uint32_t i = 0; i < n; i++) {
        const char *dot = strrchr(l->v[i].name, '.');
        const size_t plen = dot ? (size_t)(dot - l->v[i].name) + 1 : 0;
        for (uint32_t f = 0; f < n_rules; f++) {
            const moeq_fused_name *R = &rules[f];
            if (R->n_shards > MAX_FUSED || strcmp(l->v[i].name + plen, R->shards[0]) != 0) {
                continue;
            }
            uint32_t at[MAX_FUSED];
            bool all = true;
            for (uint32_t j = 0; j < R->n_shards && all; j++) {
                lin_info key;
                if (plen + strlen(R->shards[j]) >= sizeof key.name) {
                    all = false;
                    break;
                }
                snprintf(key.name, sizeof key.name, "%.*s%s", (int)plen, l->v[i].name,
                         R->shards[j]);
                const lin_info *hit = bsearch(&key, l->v, n, sizeof *l->v, lin_cmp);
                all = hit && !hit->fused_away && hit->has_bias == l->v[i].has_bias;
                if (all) at[j] = (uint32_t)(hit - l->v);
            }
            char fused[256];
            if (!all || plen + strlen(R->fused) >= sizeof fused) continue;
            snprintf(fused, sizeof fused, "%.*s%s", (int)plen, l->v[i].name, R->fused);
            moeq_resolution res;
            moeq_error e2;
            if (moeq_resolve(cfg, fused, MOEQ_MODULE_LINEAR, NULL, &res, &e2) != MOEQ_STATUS_OK ||
                res.status != MOEQ_MATCH_QUANTIZED || !res.weights) {
                continue; /* shards that resolve differently load one by one */
            }
            lin_info *F = lin_push(l);
            if (!F) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory fusing %s", fused);
            snprintf(F->name, sizeof F->name, "%s", fused);
            F->res = res;
            F->has_bias = l->v[i].has_bias;
            F->n_shards = (int32_t)R->n_shards;
            for (uint32_t j = 0; j < R->n_shards; j++) {
                lin_info *S = &l->v[at[j]];
                S->fused_away = true;
                F->shard_names[j] = R->shards[j];
                F->tensors += S->tensors;
                F->bytes += S->bytes;
            }
        }
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < l->n; i++) {
        if (!l->v[i].fused_away) l->v[k++] = l->v[i];
    }
    l->n = k;
    return MOEQ_STATUS_OK;
}

/* The quantized linear modules of the checkpoint, those under a MoE layer
 * (moe[0..n_moe)) left out, fused siblings folded: *out (free with
 * moeq__free) of *count entries. */
static moeq_status find_linear(const moeq_config *cfg, const moeq_checkpoint *ck,
                               const moeq_model_layer_info *moe, uint32_t n_moe, lin_info **out,
                               uint32_t *count, moeq_error *err) {
    *out = NULL;
    *count = 0;
    const uint64_t total = moeq_checkpoint_tensor_count(ck);
    if (total > UINT32_MAX) {
        return moeq__error(err, MOEQ_STATUS_LIMIT, "%llu tensors; at most 2^32 - 1 are listed",
                           (unsigned long long)total);
    }
    mod_ref *refs = moeq__malloc((total ? total : 1) * sizeof *refs);
    lin_list l = {NULL, 0, 0};
    moeq_status st =
        refs ? MOEQ_STATUS_OK
             : moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory listing linear modules");
    uint32_t n = 0;
    for (uint64_t i = 0; st == MOEQ_STATUS_OK && i < total; i++) {
        const char *name = moeq__checkpoint_tensor_at(ck, i)->name;
        const char *dot = strrchr(name, '.');
        if (!dot || dot == name || (size_t)(dot - name) > UINT32_MAX) continue;
        refs[n++] = (mod_ref){name, (uint32_t)(dot - name), (uint32_t)i};
    }
    if (st == MOEQ_STATUS_OK && n > 1) qsort(refs, n, sizeof *refs, mod_ref_cmp);
    for (uint32_t i = 0, j; st == MOEQ_STATUS_OK && i < n; i = j) {
        for (j = i + 1; j < n && refs[j].len == refs[i].len &&
                        memcmp(refs[j].name, refs[i].name, refs[i].len) == 0;
             j++) {
        }
        if (under_moe(refs[i].name, refs[i].len, moe, n_moe)) continue;
        st = add_module(cfg, ck, &refs[i], j - i, &l, err);
    }
    moeq__free(refs);
    if (st == MOEQ_STATUS_OK && l.n > 1) qsort(l.v, l.n, sizeof *l.v, lin_cmp);
    if (st == MOEQ_STATUS_OK) st = fuse(cfg, &l, err);
    /* load order, which the messages' "linear layer i of n" count in */
    if (st == MOEQ_STATUS_OK && l.n > 1) qsort(l.v, l.n, sizeof *l.v, lin_natural_cmp);
    if (st != MOEQ_STATUS_OK) {
        moeq__free(l.v);
        return st;
    }
    *out = l.v;
    *count = l.n;
    return MOEQ_STATUS_OK;
}

/* ---- one layer's config ------------------------------------------------------------ */

moeq_status moeq_model_layer_config(const moeq_config *cfg, const moeq_model_moe *mm,
                                    const moeq_model_layer_info *info,
                                    const moeq_select_options *select, moeq_resolution *res,
                                    moeq_selection *sel, moeq_moe_config *out, moeq_error *err) {
    if (!cfg || !mm || !info || !res || !sel || !out) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "a NULL argument to moeq_model_layer_config");
    }
    if (!mm->hidden_size || !mm->intermediate_size) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%s: config.json lacks the %s (for %s: hidden_size, "
                           "moe_intermediate_size or the family's name for it)",
                           info->prefix,
                           !mm->hidden_size ? "hidden size" : "experts' intermediate size",
                           mm->family[0] ? mm->family : "this model");
    }
    moeq_status st =
        moeq_resolve_moe(cfg, info->prefix, (uint32_t)info->experts, info->proj, NULL, res, err);
    if (st == MOEQ_STATUS_OK) st = moeq_select(res, info->prefix, select, sel, err);
    if (st == MOEQ_STATUS_OK) st = moeq_moe_config_init(out, cfg, res, sel, err);
    if (st != MOEQ_STATUS_OK) return st;
    out->prefix = info->prefix;
    out->proj_names = info->proj;
    out->num_experts = info->experts;
    out->hidden_size = mm->hidden_size;
    out->intermediate_size = mm->intermediate_size;
    out->activation = mm->activation;
    out->swiglu_alpha = mm->swiglu_alpha;
    out->swiglu_limit = mm->swiglu_limit;
    out->params_dtype = mm->params_dtype;
    out->has_bias = info->has_bias;
    out->non_gated = !mm->gated; /* down(act(up x)): no gate tensors (Nemotron-H) */
    out->apply_router_weight_on_input = mm->apply_router_weight_on_input;
    return MOEQ_STATUS_OK;
}

/* ---- the whole model --------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A "VmRSS:"/"VmHWM:" line of /proc/self/status in bytes; 0 where unknown. */
static uint64_t proc_status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    uint64_t v = 0;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kl) == 0) {
            v = strtoull(line + kl, NULL, 10) * 1024u;
            break;
        }
    }
    fclose(f);
    return v;
}

void moeq_model_destroy(moeq_model *m) {
    if (!m) return;
    for (uint32_t i = 0; i < m->n; i++) {
        if (m->moe) moeq_moe_destroy(m->moe[i]);
        if (m->prefix) moeq__free(m->prefix[i]);
    }
    for (uint32_t i = 0; i < m->n_lin; i++) {
        if (m->lin) moeq_linear_destroy(m->lin[i]);
        if (m->lin_name) moeq__free(m->lin_name[i]);
    }
    moeq__free(m->moe);
    moeq__free(m->prefix);
    moeq__free(m->lin);
    moeq__free(m->lin_name);
    moeq_config_destroy(m->cfg);
    moeq__free(m);
}

const moeq_config *moeq_model_config(const moeq_model *m) {
    return m ? m->cfg : NULL;
}

uint32_t moeq_model_layer_count(const moeq_model *m) {
    return m ? m->n : 0;
}

const moeq_moe *moeq_model_layer(const moeq_model *m, uint32_t i, const char **prefix) {
    if (!m || i >= m->n) {
        if (prefix) *prefix = NULL;
        return NULL;
    }
    if (prefix) *prefix = m->prefix[i];
    return m->moe[i];
}

uint32_t moeq_model_linear_count(const moeq_model *m) {
    return m ? m->n_lin : 0;
}

const moeq_linear *moeq_model_linear(const moeq_model *m, uint32_t i, const char **name) {
    if (!m || i >= m->n_lin) {
        if (name) *name = NULL;
        return NULL;
    }
    if (name) *name = m->lin_name[i];
    return m->lin[i];
}

/* What load_layers has to make: the MoE layers and the linear modules. */
typedef struct to_load {
    const moeq_model_layer_info *moe;
    uint32_t n_moe;
    lin_info *lin;
    uint32_t n_lin;
} to_load;

/* One layer in load order: MoE layer i, or linear layer i. */
typedef struct load_item {
    const char *name;
    bool linear;
    uint32_t i;
} load_item;

static int item_cmp(const void *x, const void *y) {
    return natural_cmp(((const load_item *)x)->name, ((const load_item *)y)->name);
}

/* [out, in] of checkpoint module `module` from its weight tensors
 * ("<module>.<param>"), as moeq_dequantize checks them (values included). */
static moeq_status module_shape(const moeq_config *cfg, const moeq_checkpoint *ck,
                                const moeq_resolution *res, const char *module, int64_t shape[2],
                                moeq_error *err) {
    uint64_t first = 0;
    const uint64_t n = moeq__checkpoint_module_range(ck, module, &first);
    const size_t len = strlen(module) + 1;
    moeq_tensor *t = moeq__malloc((n ? n : 1) * sizeof *t);
    if (!t) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory");
    uint32_t k = 0;
    for (uint64_t i = 0; i < n && k < UINT32_MAX; i++) {
        const moeq_tensor *x = moeq__checkpoint_tensor_at(ck, first + i);
        if (!strchr(x->name + len, '.')) t[k++] = *x; /* not a child's */
    }
    moeq_status st = moeq_dequantize(res->weights, res->format, moeq_config_dequant_flags(cfg),
                                     module, t, k, MOEQ_DTYPE_F32, NULL, 0, shape, err);
    moeq__free(t);
    if (st == MOEQ_STATUS_OK && (shape[0] > INT32_MAX || shape[1] > INT32_MAX)) {
        st = moeq__error(err, MOEQ_STATUS_SHAPE,
                         "%s: [%lld, %lld]: a linear layer holds at most 2^31 - 1 rows and "
                         "columns",
                         module, (long long)shape[0], (long long)shape[1]);
    }
    return st;
}

/* Creates, loads and finalizes linear layer L into *out: its features (each
 * shard's) from the weight tensors, then moeq_linear_create and
 * moeq__linear_load_finalize (in place, on the loader threads). */
static moeq_status load_linear(const moeq_config *cfg, const moeq_checkpoint *ck, const lin_info *L,
                               const moeq_select_options *select, int32_t params_dtype,
                               int32_t threads, moeq_linear **out, moeq_error *err) {
    moeq_selection sel;
    moeq_linear_config lc;
    moeq_status st = moeq_select(&L->res, L->name, select, &sel, err);
    if (st == MOEQ_STATUS_OK) st = moeq_linear_config_init(&lc, cfg, &L->res, &sel, err);
    if (st != MOEQ_STATUS_OK) return st;
    int32_t shard_out[MAX_FUSED];
    int64_t in = -1, rows = 0, shape[2];
    const char *dot = strrchr(L->name, '.');
    const int plen = dot ? (int)(dot - L->name) + 1 : 0;
    for (int32_t j = 0; j < (L->n_shards ? L->n_shards : 1); j++) {
        char module[300];
        if (L->n_shards) {
            snprintf(module, sizeof module, "%.*s%s", plen, L->name, L->shard_names[j]);
        } else {
            snprintf(module, sizeof module, "%s", L->name);
        }
        st = module_shape(cfg, ck, &L->res, module, shape, err);
        if (st != MOEQ_STATUS_OK) return st;
        if (in >= 0 && shape[1] != in) {
            return moeq__error(err, MOEQ_STATUS_SHAPE,
                               "%s: in_features %lld, but %s has %lld; fused shards share "
                               "their input",
                               module, (long long)shape[1], L->shard_names[0], (long long)in);
        }
        in = shape[1];
        shard_out[j] = (int32_t)shape[0];
        rows += shape[0];
    }
    if (rows > INT32_MAX) {
        return moeq__error(err, MOEQ_STATUS_SHAPE, "%s: %lld output features is too many", L->name,
                           (long long)rows);
    }
    lc.name = L->name;
    lc.in_features = (int32_t)in;
    lc.out_features = (int32_t)rows;
    lc.has_bias = L->has_bias;
    lc.params_dtype = params_dtype;
    lc.num_shards = L->n_shards;
    lc.shard_names = L->shard_names;
    lc.shard_out_features = shard_out;
    st = moeq_linear_create(&lc, out, err);
    if (st == MOEQ_STATUS_OK) st = moeq__linear_load_finalize(*out, ck, threads, err);
    return st;
}

static moeq_status load_layers(moeq_model *m, const moeq_checkpoint *ck, const to_load *w,
                               const moeq_model_load_options *o, int32_t threads, double t0,
                               moeq_model_load_summary *sum, moeq_error *err) {
    moeq_model_moe mm;
    moeq_error e2;
    moeq_status st = MOEQ_STATUS_OK;
    if (w->n_moe) {
        st = moeq_model_moe_get(m->cfg, &mm, err);
    } else if (moeq_model_moe_get(m->cfg, &mm, &e2) != MOEQ_STATUS_OK) {
        memset(&mm, 0, sizeof mm); /* a dense model: linear layers need only params_dtype */
    }
    if (st != MOEQ_STATUS_OK) return st;
    const uint32_t n = w->n_moe + w->n_lin;
    load_item *items = moeq__malloc((n ? n : 1) * sizeof *items);
    if (!items) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory");
    uint64_t bytes = 0, done = 0;
    for (uint32_t i = 0; i < w->n_moe; i++) {
        items[i] = (load_item){w->moe[i].prefix, false, i};
        bytes += w->moe[i].bytes;
    }
    for (uint32_t i = 0; i < w->n_lin; i++) {
        items[w->n_moe + i] = (load_item){w->lin[i].name, true, i};
        bytes += w->lin[i].bytes;
    }
    if (n > 1) qsort(items, n, sizeof *items, item_cmp);
    for (uint32_t k = 0; k < n && st == MOEQ_STATUS_OK; k++) {
        const uint32_t i = items[k].i;
        uint64_t b = 0;
        if (items[k].linear) {
            const lin_info *L = &w->lin[i];
            m->lin_name[i] = moeq__strdup(L->name);
            if (!m->lin_name[i]) {
                st = moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory");
                break;
            }
            st = load_linear(m->cfg, ck, L, o->select, mm.params_dtype, threads, &m->lin[i], err);
            if (st != MOEQ_STATUS_OK) {
                st = moeq__error_prefix(err, st, "linear layer %u of %u (%s)", i + 1, w->n_lin,
                                        L->name);
                break;
            }
            b = L->bytes;
            const uint64_t res = moeq__linear_bytes(m->lin[i]);
            sum->linear_layers++;
            sum->linear_tensors += L->tensors;
            sum->linear_bytes += L->bytes;
            sum->linear_resident += res;
            sum->tensors += L->tensors;
            sum->resident += res;
        } else {
            const moeq_model_layer_info *L = &w->moe[i];
            moeq_resolution res;
            moeq_selection sel;
            moeq_moe_config mc;
            m->prefix[i] = moeq__strdup(L->prefix);
            if (!m->prefix[i]) {
                st = moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory");
                break;
            }
            st = moeq_model_layer_config(m->cfg, &mm, L, o->select, &res, &sel, &mc, err);
            if (st == MOEQ_STATUS_OK) st = moeq_moe_create(&mc, &m->moe[i], err);
            if (st == MOEQ_STATUS_OK) {
                st = moeq_moe_load_finalize(m->moe[i], ck, L->prefix, threads, NULL, NULL, err);
            }
            if (st != MOEQ_STATUS_OK) {
                st = moeq__error_prefix(err, st, "MoE layer %u of %u (%s)", i + 1, w->n_moe,
                                        L->prefix);
                break;
            }
            b = L->bytes;
            sum->layers++;
            sum->experts += (uint64_t)L->experts;
            sum->tensors += L->tensors;
            for (int32_t e = 0; e < mc.num_experts; e++) {
                sum->resident += moeq__moe_expert_bytes(m->moe[i], e);
            }
        }
        done += b;
        sum->bytes += b;
        if (o->progress) {
            moeq_model_progress p = {k + 1,          n, done, bytes, now_s() - t0, items[k].name,
                                     items[k].linear};
            if (o->progress(&p, o->user_data) != 0) {
                st = moeq__error(err, MOEQ_STATUS_STATE,
                                 "loading stopped by the progress callback after %u of %u layers",
                                 k + 1, n);
            }
        }
    }
    moeq__free(items);
    return st;
}

moeq_status moeq_model_load(const char *dir, const moeq_model_load_options *opts, moeq_model **out,
                            moeq_model_load_summary *summary, moeq_error *err) {
    if (out) *out = NULL;
    if (!dir || !out) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL", !dir ? "dir" : "out");
    }
    moeq_model_load_options o;
    memset(&o, 0, sizeof o);
    if (opts) o = *opts;
    if (o.threads < 0 || o.threads > 1024) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "opts.threads is %d; expected 0..1024",
                           (int)o.threads);
    }
    if (o.moe_only != 0 && o.moe_only != 1) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "opts.moe_only is %d; expected 0 or 1",
                           (int)o.moe_only);
    }
    int32_t threads = o.threads;
    if (!threads) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n < 1 ? 1 : n > 1024 ? 1024 : (int32_t)n;
    }
    moeq_model_load_summary sum;
    memset(&sum, 0, sizeof sum);
    sum.rss_before = proc_status_kb("VmRSS:");
    const double t0 = now_s();
    moeq_model *m = moeq__calloc(1, sizeof *m);
    if (!m) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory");
    moeq_checkpoint *ck = NULL;
    moeq_model_layer_info *info = NULL;
    lin_info *lin = NULL;
    uint32_t n = 0, n_lin = 0;
    moeq_status st = moeq_config_load(dir, NULL, &m->cfg, err);
    if (st == MOEQ_STATUS_OK) st = moeq_checkpoint_open(dir, &ck, err);
    if (st == MOEQ_STATUS_OK) st = moeq_model_find_layers(m->cfg, ck, &info, &n, err);
    if (st == MOEQ_STATUS_OK && !o.moe_only) {
        st = find_linear(m->cfg, ck, info, n, &lin, &n_lin, err);
    }
    if (st == MOEQ_STATUS_OK && n == 0 && n_lin == 0) {
        st = moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                         "%s: no MoE layer (no tensor is named "
                         "<prefix>.<expert>.<gate_proj|up_proj|down_proj|w1|w2|w3>.<param>)%s",
                         dir, o.moe_only ? "" : " and no quantized linear module");
    }
    if (st == MOEQ_STATUS_OK) {
        /* every slot NULL until its layer is made: destroy frees what was */
        m->prefix = moeq__calloc(n ? n : 1, sizeof *m->prefix);
        m->moe = moeq__calloc(n ? n : 1, sizeof *m->moe);
        m->lin_name = moeq__calloc(n_lin ? n_lin : 1, sizeof *m->lin_name);
        m->lin = moeq__calloc(n_lin ? n_lin : 1, sizeof *m->lin);
        if (!m->prefix || !m->moe || !m->lin_name || !m->lin) {
            st = moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory");
        }
        m->n = n;
        m->n_lin = n_lin;
    }
    if (st == MOEQ_STATUS_OK) {
        const to_load w = {info, n, lin, n_lin};
        st = load_layers(m, ck, &w, &o, threads, t0, &sum, err);
    }
    moeq__free(info);
    moeq__free(lin);
    moeq_checkpoint_close(ck);
    if (st != MOEQ_STATUS_OK) {
        moeq_model_destroy(m);
        return st;
    }
    sum.seconds = now_s() - t0;
    sum.gb_per_s = sum.seconds > 0 ? (double)sum.bytes / sum.seconds * 1e-9 : 0;
    sum.rss_after = proc_status_kb("VmRSS:");
    sum.peak_rss = proc_status_kb("VmHWM:");
    if (summary) *summary = sum;
    *out = m;
    return MOEQ_STATUS_OK;
}

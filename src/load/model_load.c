/*
 * model_load.c - a whole checkpoint's MoE layers in one call: find the
 * layers by their tensor names, give each the config `moeq run` gives it
 * (resolution, scheme, the model family's dimensions and activation), then
 * create, load and finalize them one after the other on the loader threads
 * (moeq_moe_load_finalize: weights read in place from the mapped files and
 * packed straight into the kernels' layout), with progress after each layer.
 * On any failure every layer made so far is destroyed.
 */
#include "checkpoint/safetensors.h"
#include "layer/moe.h"

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
        char dotted[sizeof L->prefix + 1];
        snprintf(dotted, sizeof dotted, "%s.", L->prefix);
        uint64_t first = 0;
        L->tensors = moeq__checkpoint_prefix_range(ckpt, dotted, &first);
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
        moeq_moe_destroy(m->moe[i]);
        moeq__free(m->prefix[i]);
    }
    moeq__free(m->moe);
    moeq__free(m->prefix);
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

static moeq_status load_layers(moeq_model *m, const moeq_checkpoint *ck,
                               const moeq_model_layer_info *info, uint32_t n,
                               const moeq_model_load_options *o, int32_t threads, double t0,
                               moeq_model_load_summary *sum, moeq_error *err) {
    moeq_model_moe mm;
    moeq_status st = moeq_model_moe_get(m->cfg, &mm, err);
    if (st != MOEQ_STATUS_OK) return st;
    uint64_t bytes = 0, done = 0;
    for (uint32_t i = 0; i < n; i++) bytes += info[i].bytes;
    for (uint32_t i = 0; i < n; i++) {
        const moeq_model_layer_info *L = &info[i];
        moeq_resolution res;
        moeq_selection sel;
        moeq_moe_config mc;
        moeq_moe *moe = NULL;
        m->prefix[i] = moeq__strdup(L->prefix);
        if (!m->prefix[i]) return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory");
        st = moeq_model_layer_config(m->cfg, &mm, L, o->select, &res, &sel, &mc, err);
        if (st == MOEQ_STATUS_OK) st = moeq_moe_create(&mc, &moe, err);
        if (st == MOEQ_STATUS_OK) {
            m->moe[i] = moe;
            m->n = i + 1;
            st = moeq_moe_load_finalize(moe, ck, L->prefix, threads, NULL, NULL, err);
        }
        if (st != MOEQ_STATUS_OK) {
            return moeq__error_prefix(err, st, "MoE layer %u of %u (%s)", i + 1, n, L->prefix);
        }
        if (m->n < i + 1) m->n = i + 1;
        done += L->bytes;
        sum->layers++;
        sum->experts += (uint64_t)L->experts;
        sum->tensors += L->tensors;
        sum->bytes += L->bytes;
        for (int32_t e = 0; e < mc.num_experts; e++) {
            sum->resident += moeq__moe_expert_bytes(moe, e);
        }
        if (o->progress) {
            moeq_model_progress p = {i + 1, n, done, bytes, now_s() - t0, L->prefix};
            if (o->progress(&p, o->user_data) != 0) {
                return moeq__error(err, MOEQ_STATUS_STATE,
                                   "loading stopped by the progress callback after %u of %u MoE "
                                   "layers",
                                   i + 1, n);
            }
        }
    }
    return MOEQ_STATUS_OK;
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
    uint32_t n = 0;
    moeq_status st = moeq_config_load(dir, NULL, &m->cfg, err);
    if (st == MOEQ_STATUS_OK) st = moeq_checkpoint_open(dir, &ck, err);
    if (st == MOEQ_STATUS_OK) st = moeq_model_find_layers(m->cfg, ck, &info, &n, err);
    if (st == MOEQ_STATUS_OK && n == 0) {
        st = moeq__error(err, MOEQ_STATUS_CHECKPOINT,
                         "%s: no MoE layer: no tensor is named "
                         "<prefix>.<expert>.<gate_proj|up_proj|down_proj|w1|w2|w3>.<param>",
                         dir);
    }
    if (st == MOEQ_STATUS_OK) {
        m->prefix = moeq__calloc(n, sizeof *m->prefix);
        m->moe = moeq__calloc(n, sizeof *m->moe);
        if (!m->prefix || !m->moe) st = moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory");
    }
    if (st == MOEQ_STATUS_OK) st = load_layers(m, ck, info, n, &o, threads, t0, &sum, err);
    moeq__free(info);
    moeq_checkpoint_close(ck);
    if (st != MOEQ_STATUS_OK) {
        /* prefixes past m->n were allocated too */
        for (uint32_t i = m->n; i < n && m->prefix; i++) moeq__free(m->prefix[i]);
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

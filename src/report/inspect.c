/*
 * inspect.c - `moeq inspect`: a checkpoint's modules, planned, and every
 * tensor accounted for.
 *
 *   tensor names --split at the last '.'--> modules (hash map by name)
 *   modules      --"...experts.<e>.<proj>"--> MoE layers (hash map by prefix)
 *   modules, layers --resolve/select--> plan rows (plan.h prints them)
 *   each module  --expected tensor set (dequant.h's table)--> unconsumed,
 *                  missing; quantized modules --moeq__ct_weight_build--> errors
 *
 * Nothing here reads tensor data except the validation of quantized modules
 * (scales, zero points, g_idx, FP8 codes), which names_only turns off.  The
 * run's model is inspect.h's; inspect_write.c writes it out.
 */
#include "report/inspect.h"

#include "checkpoint/dequant.h"
#include "checkpoint/modules.h"
#include "checkpoint/safetensors.h"
#include "layer/moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers ----------------------------------------------------------------- */

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

static bool eq(const char *a, size_t an, const char *b, size_t bn) {
    return an == bn && memcmp(a, b, an) == 0;
}

/* Natural order: digit runs compare as numbers, so layers.2 < layers.10. */
static int natcmp(const char *a, size_t an, const char *b, size_t bn) {
    size_t i = 0, j = 0;
    while (i < an && j < bn) {
        unsigned char ca = (unsigned char)a[i], cb = (unsigned char)b[j];
        if (ca >= '0' && ca <= '9' && cb >= '0' && cb <= '9') {
            size_t si = i, sj = j;
            while (si < an && a[si] == '0') si++;
            while (sj < bn && b[sj] == '0') sj++;
            size_t ei = si, ej = sj;
            while (ei < an && a[ei] >= '0' && a[ei] <= '9') ei++;
            while (ej < bn && b[ej] >= '0' && b[ej] <= '9') ej++;
            if (ei - si != ej - sj) return ei - si < ej - sj ? -1 : 1;
            int c = memcmp(a + si, b + sj, ei - si);
            if (c) return c;
            if ((ei - i) != (ej - j)) return (ei - i) < (ej - j) ? -1 : 1; /* fewer zeros first */
            i = ei;
            j = ej;
            continue;
        }
        if (ca != cb) return ca < cb ? -1 : 1;
        i++;
        j++;
    }
    return (an - i) == (bn - j) ? 0 : (an - i) < (bn - j) ? -1 : 1;
}

static void shape_text(const moeq_tensor *t, char *buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int32_t i = 0; i < t->ndim && len < n; i++) {
        len +=
            (size_t)snprintf(buf + len, n - len, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    }
    if (len < n) snprintf(buf + len, n - len, "]");
}

static moeq_status add_issue(inspect *in, issue_list *l, const char *name, size_t name_len,
                             const char *suffix, int32_t status, const char *fmt, ...)
    MOEQ__PRINTF(7, 8);
static moeq_status add_issue(inspect *in, issue_list *l, const char *name, size_t name_len,
                             const char *suffix, int32_t status, const char *fmt, ...) {
    if (l->n >= MAX_LISTED) {
        l->unlisted++;
        return MOEQ_STATUS_OK;
    }
    if (l->n == l->cap) {
        uint32_t cap = l->cap ? l->cap * 2u : 64u;
        issue *v = moeq__realloc(l->v, sizeof *v * cap);
        if (!v) return nomem(in);
        l->v = v;
        l->cap = cap;
    }
    moeq__sb nm, tx;
    moeq__sb_init(&nm);
    moeq__sb_init(&tx);
    moeq__sb_append(&nm, name, name_len);
    if (suffix) {
        moeq__sb_putc(&nm, '.');
        moeq__sb_puts(&nm, suffix);
    }
    char small[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    moeq__sb_puts(&tx, small);
    issue *it = &l->v[l->n];
    it->name = moeq__sb_take(&nm);
    it->text = moeq__sb_take(&tx);
    it->status = status;
    if (!it->name || !it->text) {
        moeq__free(it->name);
        moeq__free(it->text);
        return nomem(in);
    }
    l->n++;
    return MOEQ_STATUS_OK;
}

static void free_list(issue_list *l) {
    for (uint32_t i = 0; i < l->n; i++) {
        moeq__free(l->v[i].name);
        moeq__free(l->v[i].text);
    }
    moeq__free(l->v);
}

/* ---- modules from tensor names --------------------------------------------------- */

static int64_t find_module(const inspect *in, const char *name, size_t len) {
    uint32_t h = hash_bytes(name, len) & in->mod_mask;
    while (in->mod_slots[h]) {
        const imod *m = &in->mods[in->mod_slots[h] - 1];
        if (eq(m->name, m->len, name, len)) return in->mod_slots[h] - 1;
        h = (h + 1) & in->mod_mask;
    }
    return -1;
}

static const char *tensor_name(const inspect *in, uint32_t t) {
    return moeq__checkpoint_tensor_at(in->ckpt, t)->name;
}

static const char *param_of(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot ? dot + 1 : name;
}

static moeq_status collect_modules(inspect *in) {
    uint64_t cap = 16; /* at most 2^32 (n <= 2^30): a 32-bit hash indexes it */
    while (cap < 2u * (uint64_t)in->n_tensors + 1u) cap *= 2u;
    in->mod_mask = (uint32_t)(cap - 1u);
    in->mod_slots = moeq__calloc((size_t)cap, sizeof *in->mod_slots);
    in->mod_of = moeq__malloc(sizeof *in->mod_of * (in->n_tensors ? in->n_tensors : 1u));
    in->members = moeq__malloc(sizeof *in->members * (in->n_tensors ? in->n_tensors : 1u));
    /* Modules first point into the tensor names; the arena copies them below. */
    in->mods = moeq__calloc(in->n_tensors ? in->n_tensors : 1u, sizeof *in->mods);
    if (!in->mod_slots || !in->mod_of || !in->members || !in->mods) return nomem(in);
    size_t arena = 0;
    for (uint32_t t = 0; t < in->n_tensors; t++) {
        const char *name = tensor_name(in, t);
        size_t len = module_len(name);
        uint32_t h = hash_bytes(name, len) & in->mod_mask;
        while (in->mod_slots[h]) {
            const imod *m = &in->mods[in->mod_slots[h] - 1];
            if (eq(m->name, m->len, name, len)) break;
            h = (h + 1) & in->mod_mask;
        }
        if (!in->mod_slots[h]) {
            imod *m = &in->mods[in->n_mods];
            m->name = name;
            m->len = (uint32_t)len;
            m->layer = -1;
            m->proj = -1;
            m->row = -1;
            in->mod_slots[h] = ++in->n_mods;
            arena += len + 1;
        }
        uint32_t mi = in->mod_slots[h] - 1;
        in->mod_of[t] = mi;
        in->mods[mi].count++;
    }
    in->arena = moeq__malloc(arena ? arena : 1);
    if (!in->arena) return nomem(in);
    size_t at = 0;
    uint32_t first = 0;
    for (uint32_t i = 0; i < in->n_mods; i++) {
        imod *m = &in->mods[i];
        memcpy(in->arena + at, m->name, m->len);
        in->arena[at + m->len] = '\0';
        m->name = in->arena + at;
        at += m->len + 1;
        m->first = first;
        first += m->count;
        m->count = 0;
    }
    for (uint32_t t = 0; t < in->n_tensors; t++) {
        imod *m = &in->mods[in->mod_of[t]];
        in->members[m->first + m->count++] = t;
    }
    return MOEQ_STATUS_OK;
}

static moeq_status add_layer(inspect *in, const char *prefix, size_t len, uint32_t *out) {
    uint32_t h = hash_bytes(prefix, len) & in->layer_mask;
    while (in->layer_slots[h]) {
        const ilayer *l = &in->layers[in->layer_slots[h] - 1];
        if (eq(l->prefix, l->len, prefix, len)) {
            *out = in->layer_slots[h] - 1;
            return MOEQ_STATUS_OK;
        }
        h = (h + 1) & in->layer_mask;
    }
    if (in->n_layers == in->cap_layers) {
        uint32_t cap = in->cap_layers ? in->cap_layers * 2u : 16u;
        ilayer *v = moeq__realloc(in->layers, sizeof *v * cap);
        if (!v) return nomem(in);
        in->layers = v;
        in->cap_layers = cap;
    }
    ilayer *l = &in->layers[in->n_layers];
    memset(l, 0, sizeof *l);
    l->prefix = moeq__strndup(prefix, len);
    if (!l->prefix) return nomem(in);
    l->len = (uint32_t)len;
    l->triple[0] = l->triple[1] = l->triple[2] = -1;
    *out = in->n_layers;
    in->layer_slots[h] = ++in->n_layers;
    return MOEQ_STATUS_OK;
}

static int cmp_strref(const void *a, const void *b) {
    const strref *x = a, *y = b;
    return natcmp(x->p, x->n, y->p, y->n);
}

static bool is_attention(const inspect *in, const char *name, size_t len) {
    uint32_t lo = 0, hi = in->n_attn;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = natcmp(in->attn[mid].p, in->attn[mid].n, name, len);
        if (c == 0) return true;
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return false;
}

static moeq_status classify(inspect *in) {
    in->layer_mask = in->mod_mask;
    in->layer_slots = moeq__calloc((size_t)in->mod_mask + 1u, sizeof *in->layer_slots);
    if (!in->layer_slots) return nomem(in);
    for (uint32_t i = 0; i < in->n_mods; i++) {
        imod *m = &in->mods[i];
        moeq__module_traits tr = {false, false, false};
        for (uint32_t k = 0; k < m->count; k++) {
            const moeq_tensor *t = moeq__checkpoint_tensor_at(in->ckpt, in->members[m->first + k]);
            moeq__module_note(&tr, param_of(t->name), t->ndim);
        }
        m->payload = tr.payload;
        m->bias = tr.bias;
        size_t plen = 0;
        uint32_t id = 0;
        m->kind = moeq__module_kind(m->name, m->len, &tr, &plen, &id);
        if (m->kind == MOEQ_MODULE_EXPERT) {
            uint32_t li = 0;
            moeq_status st = add_layer(in, m->name, plen, &li);
            if (st != MOEQ_STATUS_OK) return st;
            ilayer *l = &in->layers[li];
            if (l->n_ids == l->cap_ids) {
                uint32_t cap = l->cap_ids ? l->cap_ids * 2u : 64u;
                uint32_t *v = moeq__realloc(l->ids, sizeof *v * cap);
                if (!v) return nomem(in);
                l->ids = v;
                l->cap_ids = cap;
            }
            l->ids[l->n_ids++] = id;
            if (id > l->max_id) l->max_id = id;
            const char *proj = m->name + plen + 1;
            while (*proj != '.') proj++;
            proj++;
            size_t pjl = m->len - (size_t)(proj - m->name);
            uint32_t s = 0;
            while (s < l->n_proj && !eq(l->proj[s], l->proj_len[s], proj, pjl)) s++;
            if (s == l->n_proj && s < MAX_PROJ) {
                l->proj[s] = proj;
                l->proj_len[s] = (uint32_t)pjl;
                l->n_proj++;
            }
            m->layer = (int32_t)li;
            m->expert = id;
            m->proj = s < l->n_proj ? (int32_t)s : -1;
            in->sum.expert_modules++;
        }
    }
    /* Attention modules: the parents of k_proj, v_proj, qkv_proj and kv_b_proj. */
    static const char *const kv_children[] = {"k_proj", "v_proj", "qkv_proj", "kv_b_proj"};
    in->attn = moeq__malloc(sizeof *in->attn * (in->n_mods ? in->n_mods : 1u));
    if (!in->attn) return nomem(in);
    for (uint32_t i = 0; i < in->n_mods; i++) {
        imod *m = &in->mods[i];
        size_t clen;
        const char *comp = moeq__last_component(m->name, m->len, &clen);
        if (moeq__name_contains(comp, clen, "attn")) m->attn_named = true;
        if (clen == m->len) continue;
        for (size_t k = 0; k < MOEQ__ARRAY_LEN(kv_children); k++) {
            if (eq(comp, clen, kv_children[k], strlen(kv_children[k]))) {
                in->attn[in->n_attn].p = m->name;
                in->attn[in->n_attn++].n = (uint32_t)(m->len - clen - 1);
                break;
            }
        }
    }
    /* Distinct parents, sorted for is_attention. */
    qsort(in->attn, in->n_attn, sizeof *in->attn, cmp_strref);
    uint32_t n = 0;
    for (uint32_t i = 0; i < in->n_attn; i++) {
        if (n > 0 && eq(in->attn[n - 1].p, in->attn[n - 1].n, in->attn[i].p, in->attn[i].n))
            continue;
        in->attn[n++] = in->attn[i];
    }
    in->n_attn = n;
    return MOEQ_STATUS_OK;
}

/* ---- planning -------------------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static moeq_status row_error(inspect *in, moeq__plan_row *row, const moeq_error *e) {
    row->error = moeq__strdup(e->message);
    if (!row->error) return nomem(in);
    return add_issue(in, &in->errors, row->name, row->name_len, NULL, e->code, "%s", e->message);
}

/* Appends a warning to a row ("; " between two). */
static moeq_status row_warn(inspect *in, moeq__plan_row *row, const char *w) {
    if (!w) return nomem(in);
    if (!row->warning) {
        row->warning = moeq__strdup(w);
    } else {
        moeq__sb sb;
        moeq__sb_init(&sb);
        moeq__sb_puts(&sb, row->warning);
        moeq__sb_puts(&sb, "; ");
        moeq__sb_puts(&sb, w);
        moeq__free(row->warning);
        row->warning = moeq__sb_take(&sb);
    }
    return row->warning ? MOEQ_STATUS_OK : nomem(in);
}

static const char *const k_gate_up_down[3] = {"gate_proj", "up_proj", "down_proj"};
static const char *const k_w1_w3_w2[3] = {"w1", "w3", "w2"};

/* What moeq run would refuse, inspect reports: every tensor of the layer's
 * experts must be one the selected scheme's layer loads (moeq__moe_takes,
 * the loader's own rule).  The layer is made for one expert with the
 * model's dimensions and activation (moeq_model_moe_get) and biases when the
 * experts have any, as moeq run makes it; without the dimensions in the
 * config, or for a layer that cannot be made so, nothing is checked here. */
static moeq_status check_loadable(inspect *in, ilayer *l, const moeq_selection *sel,
                                  const char *const proj[3], moeq__plan_row *row) {
    moeq_model_moe mm;
    if (moeq_model_moe_get(in->cfg, &mm, NULL) != MOEQ_STATUS_OK || !mm.hidden_size ||
        !mm.intermediate_size || !mm.gated) {
        return MOEQ_STATUS_OK;
    }
    const int32_t li = (int32_t)(l - in->layers);
    bool bias = false;
    for (uint32_t m = 0; m < in->n_mods && !bias; m++) {
        bias = in->mods[m].layer == li && in->mods[m].bias;
    }
    moeq_moe_config mc;
    moeq_moe_config_init(&mc, in->cfg, &l->res, sel, NULL);
    mc.proj_names = proj;
    mc.num_experts = 1;
    mc.hidden_size = mm.hidden_size;
    mc.intermediate_size = mm.intermediate_size;
    mc.activation = mm.activation;
    mc.swiglu_alpha = mm.swiglu_alpha;
    mc.swiglu_limit = mm.swiglu_limit;
    mc.params_dtype = mm.params_dtype;
    mc.has_bias = bias;
    moeq_moe *layer = NULL;
    moeq_error e;
    moeq_status st = moeq_moe_create(&mc, &layer, &e);
    if (st == MOEQ_STATUS_NOMEM) return nomem(in);
    if (st != MOEQ_STATUS_OK) return MOEQ_STATUS_OK;
    bool refused = false; /* one error per layer: its first refused tensor */
    for (uint32_t m = 0; m < in->n_mods && !refused; m++) {
        const imod *md = &in->mods[m];
        if (md->layer != li || md->proj < 0 ||
            (md->proj != l->triple[0] && md->proj != l->triple[1] && md->proj != l->triple[2])) {
            continue;
        }
        const bool w13 = md->proj != l->triple[2];
        for (uint32_t k = 0; k < md->count && !refused; k++) {
            const char *name = tensor_name(in, in->members[md->first + k]);
            char takes[256];
            if (moeq__moe_takes(layer, w13, param_of(name), takes, sizeof takes)) continue;
            moeq__error(&e, MOEQ_STATUS_NO_MATCH,
                        "tensor \"%s\": scheme %s has no parameter for \"%s\" of %s (it loads: "
                        "%s)",
                        name, moeq_scheme_name(sel->scheme), param_of(name),
                        proj[w13 ? (md->proj == l->triple[0] ? 0 : 1) : 2], takes);
            refused = true;
        }
    }
    moeq_moe_destroy(layer);
    return refused ? row_error(in, row, &e) : MOEQ_STATUS_OK;
}

static moeq_status plan_layer(inspect *in, ilayer *l, moeq__plan_row *row) {
    qsort(l->ids, l->n_ids, sizeof *l->ids, cmp_u32);
    uint32_t n = 0;
    for (uint32_t i = 0; i < l->n_ids; i++) {
        if (n == 0 || l->ids[n - 1] != l->ids[i]) l->ids[n++] = l->ids[i];
    }
    l->n_ids = n;
    row->name = l->prefix;
    row->name_len = l->len;
    row->kind = MOEQ__ROW_MOE;
    row->num_experts = n;
    row->scheme = -1;
    const char *const *sets[2] = {k_gate_up_down, k_w1_w3_w2};
    for (int s = 0; s < 2 && l->triple[0] < 0; s++) {
        int32_t slot[3] = {-1, -1, -1};
        for (int k = 0; k < 3; k++) {
            for (uint32_t j = 0; j < l->n_proj; j++) {
                if (eq(l->proj[j], l->proj_len[j], sets[s][k], strlen(sets[s][k])))
                    slot[k] = (int32_t)j;
            }
        }
        if (slot[0] >= 0 && slot[1] >= 0 && slot[2] >= 0) memcpy(l->triple, slot, sizeof slot);
    }
    moeq_error e;
    moeq_error_clear(&e);
    if (l->triple[0] < 0) {
        moeq__sb found;
        moeq__sb_init(&found);
        for (uint32_t j = 0; j < l->n_proj; j++) {
            moeq__sb_printf(&found, "%s%.*s", j ? ", " : "", (int)l->proj_len[j], l->proj[j]);
        }
        moeq__error(&e, MOEQ_STATUS_UNSUPPORTED,
                    "MoE layer \"%s\": expert projections %s%s; expected gate_proj, up_proj and "
                    "down_proj (or w1, w3 and w2)",
                    l->prefix, found.data ? found.data : "",
                    l->n_proj == MAX_PROJ ? " and more" : "");
        moeq__sb_free(&found);
        return row_error(in, row, &e);
    }
    /* Names copied so that they are NUL-terminated for the resolver. */
    char names[3][64];
    const char *proj[3];
    for (int k = 0; k < 3; k++) {
        snprintf(names[k], sizeof names[k], "%.*s", (int)l->proj_len[l->triple[k]],
                 l->proj[l->triple[k]]);
        proj[k] = names[k];
    }
    /* Experts 0..max_id are resolved and each absent one accounted: ids far
     * past the experts present (one tensor naming expert 999999) would make
     * a tiny file cost seconds of work per layer, so such a layer is an
     * error and its absent experts are not enumerated. */
    if ((uint64_t)l->max_id + 1u > 8u * (uint64_t)n + 64u) {
        l->sparse = true;
        moeq__error(&e, MOEQ_STATUS_LIMIT,
                    "MoE layer \"%s\": expert ids run to %u but only %u experts have tensors; "
                    "absent experts are not listed for a layer with more than 8 ids per expert "
                    "present (+64)",
                    l->prefix, l->max_id, n);
        return row_error(in, row, &e);
    }
    /* moe_sparsity_config: a pruned layer holds exactly its retained experts,
     * 0..k-1 (left-shifted); novice layers are refused as moeq run refuses them */
    int32_t keep = 0;
    moeq_status st = moeq_config_retained_experts(in->cfg, l->prefix, &keep, &e);
    if (st == MOEQ_STATUS_NOMEM) return nomem(in);
    if (st == MOEQ_STATUS_UNSUPPORTED) return row_error(in, row, &e);
    if (st == MOEQ_STATUS_OK && keep > 0 && (n != (uint32_t)keep || l->max_id + 1u != n)) {
        moeq__error(&e, MOEQ_STATUS_SHAPE,
                    "MoE layer \"%s\": moe_sparsity_config (prune) says it retains %d experts "
                    "(ids 0..%d), but its tensors name %u experts with ids up to %u",
                    l->prefix, (int)keep, (int)keep - 1, n, l->max_id);
        return row_error(in, row, &e);
    }
    st = moeq__resolve_moe(in->cfg, in->scratch, l->prefix, l->max_id + 1u, proj, in->ro, &l->res,
                           &e);
    if (st == MOEQ_STATUS_NOMEM) return nomem(in);
    row->res = l->res;
    if (st != MOEQ_STATUS_OK) return row_error(in, row, &e);
    l->res_ok = true;
    if (l->res.flags & MOEQ_RESOLVE_ORDER_DISAGREES) {
        char *w = moeq__plan_order_warning(in->cfg, &l->res, in->ro ? in->ro->precedence : 0);
        st = row_warn(in, row, w);
        moeq__free(w);
        if (st != MOEQ_STATUS_OK) return st;
    }
    moeq_selection sel;
    st = moeq_select(&l->res, l->prefix, in->so, &sel, &e);
    if (st == MOEQ_STATUS_NOMEM) return nomem(in);
    if (st != MOEQ_STATUS_OK) return row_error(in, row, &e);
    row->scheme = sel.scheme;
    return check_loadable(in, l, &sel, proj, row);
}

/* Quantized for the accounting: the resolution says so and, for modules
 * that are not linear layers, there is something quantized to read. */
static bool accounted_quantized(const imod *m, const moeq_resolution *r) {
    return r->status == MOEQ_MATCH_QUANTIZED && (m->kind != MOEQ_MODULE_OTHER || m->payload);
}

static moeq_status plan_module(inspect *in, imod *m, moeq__plan_row *row) {
    row->name = m->name;
    row->name_len = m->len;
    row->kind = m->kind == MOEQ_MODULE_OTHER ? MOEQ__ROW_OTHER : MOEQ__ROW_LINEAR;
    row->scheme = -1;
    moeq_error e;
    moeq_error_clear(&e);
    moeq_status st =
        moeq__resolve_name(in->cfg, in->scratch, m->name, m->len, m->kind, in->ro, &row->res, &e);
    if (st == MOEQ_STATUS_NOMEM) return nomem(in);
    if (st != MOEQ_STATUS_OK) return row_error(in, row, &e);
    if (row->res.flags & MOEQ_RESOLVE_ORDER_DISAGREES) {
        char *w = moeq__plan_order_warning(in->cfg, &row->res, in->ro ? in->ro->precedence : 0);
        st = row_warn(in, row, w);
        moeq__free(w);
        if (st != MOEQ_STATUS_OK) return st;
    }
    if (row->res.status == MOEQ_MATCH_QUANTIZED && !accounted_quantized(m, &row->res)) {
        char w[512];
        snprintf(w, sizeof w,
                 "target \"%s\" (group %s) matches this module, but it stores no quantized weight "
                 "(no weight_packed, weight_scale, ...): read as not quantized",
                 row->res.target, row->res.group_name);
        st = row_warn(in, row, w);
        if (st != MOEQ_STATUS_OK) return st;
    }
    return MOEQ_STATUS_OK;
}

static int cmp_rows(const void *a, const void *b) {
    const moeq__plan_row *x = a, *y = b;
    return natcmp(x->name, x->name_len, y->name, y->name_len);
}

static moeq_status plan_rows(inspect *in) {
    uint32_t n = in->n_layers;
    for (uint32_t i = 0; i < in->n_mods; i++) n += in->mods[i].layer < 0;
    in->rows = moeq__calloc(n ? n : 1, sizeof *in->rows);
    if (!in->rows) return nomem(in);
    for (uint32_t i = 0; i < in->n_layers; i++) {
        moeq__plan_row *row = &in->rows[in->n_rows++];
        moeq_status st = plan_layer(in, &in->layers[i], row);
        if (st != MOEQ_STATUS_OK) return st;
    }
    for (uint32_t i = 0; i < in->n_mods; i++) {
        if (in->mods[i].layer >= 0) continue;
        moeq__plan_row *row = &in->rows[in->n_rows++];
        moeq_status st = plan_module(in, &in->mods[i], row);
        if (st != MOEQ_STATUS_OK) return st;
    }
    qsort(in->rows, in->n_rows, sizeof *in->rows, cmp_rows);
    for (uint32_t r = 0; r < in->n_rows; r++) {
        moeq__plan_row *row = &in->rows[r];
        row->engine.engine = in->engine;
        if (in->engine && row->kind == MOEQ__ROW_MOE) {
            moeq_status st =
                moeq__engine_judge(in->engine, in->scratch, row->name, row->name_len, &row->res,
                                   row->scheme, row->error != NULL, &row->engine, in->err);
            if (st != MOEQ_STATUS_OK) return st;
        }
        if (row->warning) in->sum.warnings++;
        if (row->kind != MOEQ__ROW_MOE) {
            int64_t mi = find_module(in, row->name, row->name_len);
            if (mi >= 0) in->mods[mi].row = (int32_t)r;
        }
    }
    return MOEQ_STATUS_OK;
}

/* ---- accounting ------------------------------------------------------------------ */

/* Parameters every module may hold besides its weight: biases of routers and
 * layers, attention sinks (gpt-oss), rotary buffers of older checkpoints and
 * the state parameters of state-space / linear-attention layers. */
static const char *const k_extras[] = {
    "bias", "e_score_correction_bias", "expert_bias", "sinks", "inv_freq", "A_log", "dt_bias", "D"};

/* kv-cache scales on attention modules (spec §1.7-1.8). */
static const char *const k_kv_scales[] = {"k_scale", "v_scale", "q_scale"};
static const char *const k_kv_zero_points[] = {"k_zero_point", "v_zero_point", "q_zero_point"};

static int name_in(const char *p, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (strcmp(p, list[i]) == 0) return (int)i;
    }
    return -1;
}

/* What one module expects. */
typedef struct acct {
    const imod *m;
    const moeq_resolution *res; /* NULL: resolution failed, nothing is accounted */
    bool quantized;
    bool known;          /* the tensor set is known (quantized: the format holds the args) */
    moeq__ct_params w;   /* weight parameters (quantized) */
    moeq__ct_params act; /* input_ and output_ extras */
    uint32_t required, allowed;
    const char *why_not; /* unquantized: why, for messages */
    char where[400];     /* "ignored by ignore[3] \"lm_head\"", ... */
} acct;

static void args_text(const moeq_quant_args *a, char *buf, size_t n) {
    moeq_quant_args_summary(a, buf, n);
}

static moeq_status expect(inspect *in, const imod *m, const moeq_resolution *r, acct *a) {
    memset(a, 0, sizeof *a);
    a->m = m;
    a->res = r;
    if (!r) return MOEQ_STATUS_OK;
    a->quantized = accounted_quantized(m, r);
    if (!a->quantized) {
        a->known = true;
        a->allowed = MOEQ__CT_BIT(MOEQ__CT_WEIGHT);
        /* Linear layers have a weight; so has any module with a bias. */
        if (m->kind != MOEQ_MODULE_OTHER || m->bias) a->required = MOEQ__CT_BIT(MOEQ__CT_WEIGHT);
        if (r->status == MOEQ_MATCH_IGNORED) {
            snprintf(a->where, sizeof a->where, "module is ignored by ignore[%d] \"%s\"",
                     (int)r->ignore_index, r->target);
        } else if (r->status == MOEQ_MATCH_QUANTIZED) {
            snprintf(a->where, sizeof a->where,
                     "module stores no quantized weight, so it is read as not quantized");
        } else {
            snprintf(a->where, sizeof a->where,
                     "no config target matches the module (not quantized)");
        }
        return MOEQ_STATUS_OK;
    }
    moeq_error e;
    moeq_error_clear(&e);
    moeq_status st = moeq__ct_expected_params(r->weights, r->format, m->name, &a->w, &e);
    if (st != MOEQ_STATUS_OK) {
        if (st == MOEQ_STATUS_NOMEM) return nomem(in);
        /* The tensors cannot be accounted: the error says why. */
        return add_issue(in, &in->errors, m->name, m->len, NULL, e.code,
                         "%s; its %u tensors are not accounted", e.message, m->count);
    }
    a->known = true;
    moeq__ct_params ip = moeq__ct_activation_params(r->input_activations, false);
    moeq__ct_params op = moeq__ct_activation_params(r->output_activations, true);
    a->act.required = ip.required | op.required;
    a->required = a->w.required | a->act.required;
    a->allowed = a->required | a->w.optional;
    char args[96];
    args_text(r->weights, args, sizeof args);
    snprintf(a->where, sizeof a->where, "%s %s weights", moeq_format_name(r->format), args);
    return MOEQ_STATUS_OK;
}

/* Why a compressed-tensors parameter the module holds is not read. */
static void why_unconsumed(const acct *a, int32_t p, char *buf, size_t n) {
    const char *pn = moeq__ct_param_name(p);
    if (!a->quantized) {
        snprintf(buf, n, "%s: nothing reads %s", a->where, pn);
        return;
    }
    const moeq_resolution *r = a->res;
    char have[256], args[96];
    if (p < MOEQ__CT_WEIGHT_PARAM_COUNT) {
        const moeq_quant_args *w = r->weights;
        moeq__ct_params_text(a->w.required | a->w.optional, have, sizeof have);
        if (p == MOEQ__CT_WEIGHT_ZERO_POINT && w && w->symmetric) {
            snprintf(buf, n, "%s are symmetric: nothing reads a zero point", a->where);
        } else if (p == MOEQ__CT_WEIGHT && (a->w.required & MOEQ__CT_BIT(MOEQ__CT_WEIGHT_PACKED))) {
            snprintf(buf, n, "%s store the weight as weight_packed: nothing reads weight",
                     a->where);
        } else if (p == MOEQ__CT_WEIGHT_G_IDX) {
            snprintf(buf, n, "%s have no g_idx (only group strategies read one)", a->where);
        } else {
            snprintf(buf, n, "%s store %s: nothing reads %s", a->where, have, pn);
        }
        return;
    }
    bool output = p >= MOEQ__CT_OUTPUT_SCALE;
    const char *which = output ? "output" : "input";
    const moeq_quant_args *act = output ? r->output_activations : r->input_activations;
    if (!act) {
        snprintf(buf, n, "group %s has no %s_activations: nothing reads %s", r->group_name, which,
                 pn);
        return;
    }
    args_text(act, args, sizeof args);
    moeq__ct_params set = moeq__ct_activation_params(act, output);
    if (act->dynamic == MOEQ_DYNAMIC_TRUE) {
        snprintf(buf, n, "%s activations are dynamic (%s): nothing reads %s", which, args, pn);
    } else if ((p == MOEQ__CT_INPUT_ZERO_POINT || p == MOEQ__CT_OUTPUT_ZERO_POINT) &&
               act->symmetric) {
        snprintf(buf, n, "%s activations are symmetric (%s): nothing reads %s", which, args, pn);
    } else {
        moeq__ct_params_text(set.required, have, sizeof have);
        snprintf(buf, n, "%s activations (%s) store %s: nothing reads %s", which, args, have, pn);
    }
}

/* A consumed scale or global scale: a float scalar (tensor strategy) that is
 * finite (the value is read only when validating values). */
static moeq_status check_scalar(inspect *in, const moeq_tensor *t, bool need_f32, bool scalar) {
    bool fl = t->dtype == MOEQ_DTYPE_F32 ||
              (!need_f32 && (t->dtype == MOEQ_DTYPE_F16 || t->dtype == MOEQ_DTYPE_BF16));
    if (!fl) {
        return add_issue(in, &in->errors, t->name, module_len(t->name), NULL, MOEQ_STATUS_DTYPE,
                         "%s: dtype %s, expected %s", t->name, moeq_dtype_name(t->dtype),
                         need_f32 ? "F32" : "F32, F16 or BF16");
    }
    uint64_t numel = 1;
    for (int32_t d = 0; d < t->ndim; d++) numel *= (uint64_t)t->shape[d];
    if (scalar && numel != 1) {
        char sh[160];
        shape_text(t, sh, sizeof sh);
        return add_issue(in, &in->errors, t->name, module_len(t->name), NULL, MOEQ_STATUS_SHAPE,
                         "%s: shape %s, expected [1] (tensor strategy)", t->name, sh);
    }
    if (scalar) {
        float v;
        moeq__to_f32_ref(t->dtype, t->data, 1, &v);
        if (!isfinite(v)) {
            return add_issue(in, &in->errors, t->name, module_len(t->name), NULL,
                             MOEQ_STATUS_CHECKPOINT, "%s = %g: scales must be finite", t->name,
                             (double)v);
        }
    }
    return MOEQ_STATUS_OK;
}

/* The consumed activation and kv tensors of a module, checked from their headers. */
static moeq_status check_extra(inspect *in, const acct *a, const moeq_tensor *t, int32_t p) {
    if (in->opts && in->opts->names_only) return MOEQ_STATUS_OK;
    if (p == MOEQ__CT_INPUT_SCALE || p == MOEQ__CT_OUTPUT_SCALE) {
        const moeq_quant_args *act =
            p == MOEQ__CT_INPUT_SCALE ? a->res->input_activations : a->res->output_activations;
        return check_scalar(in, t, false, act && act->strategy == MOEQ_STRATEGY_TENSOR);
    }
    if (p == MOEQ__CT_INPUT_GLOBAL_SCALE || p == MOEQ__CT_OUTPUT_GLOBAL_SCALE) {
        return check_scalar(in, t, true, true);
    }
    return MOEQ_STATUS_OK;
}

/* Runs the weight builder on a quantized module's weight tensors: every
 * check moeq_dequantize makes, without the dequantization. */
static moeq_status validate(inspect *in, const acct *a, const moeq_tensor *const *wt) {
    moeq_tensor views[MOEQ__CT_WEIGHT_PARAM_COUNT];
    uint32_t n = 0;
    for (int p = 0; p < MOEQ__CT_WEIGHT_PARAM_COUNT; p++) {
        if (wt[p] && (a->allowed & MOEQ__CT_BIT(p))) views[n++] = *wt[p];
    }
    moeq__ct_weight w;
    moeq_error e;
    moeq_error_clear(&e);
    moeq_status st = moeq__ct_weight_build(a->res->weights, a->res->format, in->flags, a->m->name,
                                           views, n, &w, &e);
    if (st == MOEQ_STATUS_OK) {
        moeq__ct_weight_free(&w);
        return MOEQ_STATUS_OK;
    }
    if (st == MOEQ_STATUS_NOMEM) return nomem(in);
    return add_issue(in, &in->errors, a->m->name, a->m->len, NULL, (int32_t)st, "%s", e.message);
}

static moeq_status account_module(inspect *in, const imod *m, const moeq_resolution *r) {
    acct a;
    moeq_status st = expect(in, m, r, &a);
    if (st != MOEQ_STATUS_OK || !a.known) return st;
    if (a.quantized) {
        in->sum.quantized++;
    } else if (r->status == MOEQ_MATCH_IGNORED) {
        in->sum.ignored++;
    } else {
        in->sum.unmatched++;
    }
    const moeq_tensor *wt[MOEQ__CT_PARAM_COUNT] = {NULL};
    uint32_t present = 0;
    char why[1024];
    for (uint32_t k = 0; k < m->count; k++) {
        const moeq_tensor *t = moeq__checkpoint_tensor_at(in->ckpt, in->members[m->first + k]);
        const char *pn = param_of(t->name);
        int32_t p = moeq__ct_param_from_name(pn, strlen(pn));
        if (p >= 0) {
            present |= MOEQ__CT_BIT(p);
            wt[p] = t;
            if (a.allowed & MOEQ__CT_BIT(p)) {
                st = check_extra(in, &a, t, p);
            } else if (p == MOEQ__CT_OUTPUT_SCALE && in->kv && a.res->output_activations == NULL) {
                /* legacy kv-cache scales: k_proj.output_scale / v_proj.output_scale */
                size_t cl;
                const char *c = moeq__last_component(m->name, m->len, &cl);
                if (eq(c, cl, "k_proj", 6) || eq(c, cl, "v_proj", 6)) continue;
                why_unconsumed(&a, p, why, sizeof why);
                st = add_issue(in, &in->unconsumed, t->name, strlen(t->name), NULL, 0, "%s", why);
            } else {
                why_unconsumed(&a, p, why, sizeof why);
                st = add_issue(in, &in->unconsumed, t->name, strlen(t->name), NULL, 0, "%s", why);
            }
            if (st != MOEQ_STATUS_OK) return st;
            continue;
        }
        if (name_in(pn, k_extras, MOEQ__ARRAY_LEN(k_extras)) >= 0) continue;
        int kv = name_in(pn, k_kv_scales, MOEQ__ARRAY_LEN(k_kv_scales));
        int kz = name_in(pn, k_kv_zero_points, MOEQ__ARRAY_LEN(k_kv_zero_points));
        if (kv >= 0 || kz >= 0) {
            if (!in->kv) {
                snprintf(why, sizeof why, "the config has no kv_cache_scheme: nothing reads %s",
                         pn);
            } else if (!m->attn_named && !is_attention(in, m->name, m->len)) {
                snprintf(why, sizeof why,
                         "not an attention module (no k_proj, v_proj, qkv_proj or kv_b_proj "
                         "inside): nothing reads %s",
                         pn);
            } else if (kz >= 0 && in->kv->symmetric) {
                snprintf(why, sizeof why, "kv_cache_scheme is symmetric: nothing reads %s", pn);
            } else {
                if (kv >= 0 && !(in->opts && in->opts->names_only)) {
                    st = check_scalar(in, t, false, in->kv->strategy == MOEQ_STRATEGY_TENSOR);
                    if (st != MOEQ_STATUS_OK) return st;
                }
                continue;
            }
        } else if (a.quantized) {
            snprintf(why, sizeof why,
                     "%s is not a parameter of a quantized module (%s): nothing reads it", pn,
                     a.where);
        } else {
            snprintf(why, sizeof why,
                     "%s is not a parameter moeq reads (weight, bias, quantization and kv-cache "
                     "parameters, router and state-space extras)",
                     pn);
        }
        st = add_issue(in, &in->unconsumed, t->name, strlen(t->name), NULL, 0, "%s", why);
        if (st != MOEQ_STATUS_OK) return st;
    }
    /* Required tensors that are not there. */
    uint32_t absent = a.required & ~present;
    for (int p = 0; p < MOEQ__CT_PARAM_COUNT && absent; p++) {
        if (!(absent & MOEQ__CT_BIT(p))) continue;
        char need[256];
        const char *pn = moeq__ct_param_name(p);
        if (!a.quantized) {
            st = add_issue(in, &in->missing, m->name, m->len, pn, 0, "%s: %s needs weight", a.where,
                           m->kind == MOEQ_MODULE_OTHER ? "a module with a bias"
                                                        : "a linear layer that is not quantized");
        } else if (p < MOEQ__CT_WEIGHT_PARAM_COUNT) {
            moeq__ct_params_text(a.w.required, need, sizeof need);
            st = add_issue(in, &in->missing, m->name, m->len, pn, 0, "%s need %s", a.where, need);
        } else {
            bool output = p >= MOEQ__CT_OUTPUT_SCALE;
            const moeq_quant_args *act = output ? r->output_activations : r->input_activations;
            char args[96];
            args_text(act, args, sizeof args);
            moeq__ct_params set = moeq__ct_activation_params(act, output);
            moeq__ct_params_text(set.required, need, sizeof need);
            st = add_issue(in, &in->missing, m->name, m->len, pn, 0,
                           "%s %s activations (%s) need %s",
                           act->dynamic == MOEQ_DYNAMIC_LOCAL ? "\"local\"" : "static",
                           output ? "output" : "input", args, need);
        }
        if (st != MOEQ_STATUS_OK) return st;
    }
    /* dtype, shape and values of the weight tensors, once they are all there */
    bool complete = (a.w.required & ~present) == 0;
    if (a.quantized && complete && !(in->opts && in->opts->names_only)) {
        st = validate(in, &a, wt);
        if (st != MOEQ_STATUS_OK) return st;
    }
    return MOEQ_STATUS_OK;
}

/* The resolution an expert projection is accounted with: its layer's when
 * the layer resolved and the projection is one of the three, else its own. */
static moeq_status expert_resolution(inspect *in, const char *name, size_t len, const ilayer *l,
                                     int32_t proj, moeq_resolution *out, bool *ok) {
    *ok = false;
    if (l->res_ok && proj >= 0 &&
        (proj == l->triple[0] || proj == l->triple[1] || proj == l->triple[2])) {
        *out = l->res;
        *ok = true;
        return MOEQ_STATUS_OK;
    }
    moeq_error e;
    moeq_error_clear(&e);
    moeq_status st =
        moeq__resolve_name(in->cfg, in->scratch, name, len, MOEQ_MODULE_EXPERT, in->ro, out, &e);
    if (st == MOEQ_STATUS_NOMEM) return nomem(in);
    if (st != MOEQ_STATUS_OK) {
        /* The layer row already carries an error when its experts disagree;
         * a projection outside the three reports its own. */
        return add_issue(in, &in->errors, name, len, NULL, e.code, "%s", e.message);
    }
    *ok = true;
    return MOEQ_STATUS_OK;
}

/* Every expert 0..max of a layer has its three projections: the required
 * tensors of each absent one are missing. */
static moeq_status missing_experts(inspect *in, const ilayer *l) {
    if (l->triple[0] < 0 || l->sparse) return MOEQ_STATUS_OK;
    moeq__sb nm;
    moeq__sb_init(&nm);
    moeq_status st = MOEQ_STATUS_OK;
    uint32_t next_id = 0; /* index into the sorted ids */
    for (uint32_t e = 0; e <= l->max_id && st == MOEQ_STATUS_OK; e++) {
        while (next_id < l->n_ids && l->ids[next_id] < e) next_id++;
        bool have_expert = next_id < l->n_ids && l->ids[next_id] == e;
        for (int k = 0; k < 3 && st == MOEQ_STATUS_OK; k++) {
            int32_t s = l->triple[k];
            nm.len = 0;
            moeq__sb_printf(&nm, "%s.%u.%.*s", l->prefix, e, (int)l->proj_len[s], l->proj[s]);
            if (nm.failed) {
                st = nomem(in);
                break;
            }
            if (have_expert && find_module(in, nm.data, nm.len) >= 0) continue;
            moeq_resolution r;
            bool ok;
            st = expert_resolution(in, nm.data, nm.len, l, s, &r, &ok);
            if (st != MOEQ_STATUS_OK || !ok) break;
            imod ghost;
            memset(&ghost, 0, sizeof ghost);
            ghost.name = nm.data;
            ghost.len = (uint32_t)nm.len;
            ghost.kind = MOEQ_MODULE_EXPERT;
            acct a;
            st = expect(in, &ghost, &r, &a);
            if (st != MOEQ_STATUS_OK || !a.known) break;
            char need[256] = "";
            /* Once the list is full the text is not kept: skip making it. */
            if (in->missing.n < MAX_LISTED) moeq__ct_params_text(a.required, need, sizeof need);
            for (int p = 0; p < MOEQ__CT_PARAM_COUNT && st == MOEQ_STATUS_OK; p++) {
                if (!(a.required & MOEQ__CT_BIT(p))) continue;
                const char *pn = moeq__ct_param_name(p);
                if (have_expert) {
                    st = add_issue(in, &in->missing, nm.data, nm.len, pn, 0,
                                   "expert %u of MoE layer %s has no %.*s tensors (%s need %s)", e,
                                   l->prefix, (int)l->proj_len[s], l->proj[s], a.where, need);
                } else {
                    st = add_issue(
                        in, &in->missing, nm.data, nm.len, pn, 0,
                        "MoE layer %s has no expert %u (its experts run 0..%u; %s need %s)",
                        l->prefix, e, l->max_id, a.where, need);
                }
            }
        }
    }
    moeq__sb_free(&nm);
    return st;
}

/* Whether module `mi` (-1: no such module) holds parameter `param`. */
static bool holds(const inspect *in, int64_t mi, const char *param) {
    if (mi < 0) return false;
    const imod *m = &in->mods[mi];
    for (uint32_t k = 0; k < m->count; k++) {
        if (strcmp(param_of(tensor_name(in, in->members[m->first + k])), param) == 0) return true;
    }
    return false;
}

/* A static kv_cache_scheme needs k_scale and v_scale (and zero points when
 * asymmetric) on every attention module; legacy checkpoints hold them as
 * k_proj.output_scale / v_proj.output_scale instead. */
static moeq_status missing_kv(inspect *in) {
    if (!in->kv || in->kv->dynamic != MOEQ_DYNAMIC_FALSE) return MOEQ_STATUS_OK;
    char args[96];
    args_text(in->kv, args, sizeof args);
    moeq__sb nm;
    moeq__sb_init(&nm);
    moeq_status st = MOEQ_STATUS_OK;
    static const char *const legacy[2] = {"k_proj", "v_proj"};
    static const char *const scale[2] = {"k_scale", "v_scale"};
    static const char *const zp[2] = {"k_zero_point", "v_zero_point"};
    for (uint32_t i = 0; i < in->n_attn && st == MOEQ_STATUS_OK; i++) {
        int64_t mi = find_module(in, in->attn[i].p, in->attn[i].n);
        for (int w = 0; w < 2 && st == MOEQ_STATUS_OK; w++) {
            bool have = holds(in, mi, scale[w]);
            if (!have) {
                nm.len = 0;
                moeq__sb_printf(&nm, "%.*s.%s", (int)in->attn[i].n, in->attn[i].p, legacy[w]);
                if (nm.failed) {
                    st = nomem(in);
                    break;
                }
                have = holds(in, find_module(in, nm.data, nm.len), "output_scale");
            }
            if (!have) {
                st = add_issue(in, &in->missing, in->attn[i].p, in->attn[i].n, scale[w], 0,
                               "kv_cache_scheme (%s) needs k_scale and v_scale on every attention "
                               "module",
                               args);
            }
            if (st == MOEQ_STATUS_OK && !in->kv->symmetric && !holds(in, mi, zp[w])) {
                st = add_issue(in, &in->missing, in->attn[i].p, in->attn[i].n, zp[w], 0,
                               "kv_cache_scheme (%s) is asymmetric: it needs k_zero_point and "
                               "v_zero_point on every attention module",
                               args);
            }
        }
    }
    moeq__sb_free(&nm);
    return st;
}

static moeq_status account(inspect *in) {
    for (uint32_t i = 0; i < in->n_mods; i++) {
        imod *m = &in->mods[i];
        moeq_status st;
        if (m->layer >= 0) {
            moeq_resolution r;
            bool ok;
            st = expert_resolution(in, m->name, m->len, &in->layers[m->layer], m->proj, &r, &ok);
            if (st == MOEQ_STATUS_OK && ok) st = account_module(in, m, &r);
        } else {
            const moeq__plan_row *row = &in->rows[m->row];
            st = row->error ? MOEQ_STATUS_OK : account_module(in, m, &row->res);
        }
        if (st != MOEQ_STATUS_OK) return st;
    }
    for (uint32_t i = 0; i < in->n_layers; i++) {
        moeq_status st = missing_experts(in, &in->layers[i]);
        if (st != MOEQ_STATUS_OK) return st;
    }
    return missing_kv(in);
}

static int cmp_issues(const void *a, const void *b) {
    const issue *x = a, *y = b;
    int c = natcmp(x->name, strlen(x->name), y->name, strlen(y->name));
    return c ? c : strcmp(x->text, y->text);
}

static void sort_list(issue_list *l) {
    if (l->n > 1) qsort(l->v, l->n, sizeof *l->v, cmp_issues); /* v is NULL while empty */
}

/* ---- entry points ---------------------------------------------------------------- */

static void free_inspect(inspect *in) {
    for (uint32_t r = 0; r < in->n_rows; r++) {
        moeq__free(in->rows[r].error);
        moeq__free(in->rows[r].warning);
    }
    moeq__free(in->rows);
    for (uint32_t i = 0; i < in->n_layers; i++) {
        moeq__free(in->layers[i].prefix);
        moeq__free(in->layers[i].ids);
    }
    moeq__free(in->layers);
    moeq__free(in->layer_slots);
    moeq__free(in->mods);
    moeq__free(in->attn);
    moeq__free(in->arena);
    moeq__free(in->mod_slots);
    moeq__free(in->mod_of);
    moeq__free(in->members);
    free_list(&in->unconsumed);
    free_list(&in->missing);
    free_list(&in->errors);
    moeq__match_scratch_destroy(in->scratch);
    moeq__engine_destroy(in->engine);
}

moeq_status moeq_inspect_write(const moeq_config *cfg, const moeq_checkpoint *ckpt,
                               const moeq_inspect_options *opts, moeq_write_fn write, void *user,
                               moeq_inspect_summary *summary, moeq_error *err) {
    if (summary) memset(summary, 0, sizeof *summary);
    if (!cfg || !ckpt || !write) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s is NULL",
                           !cfg    ? "config"
                           : !ckpt ? "checkpoint"
                                   : "write");
    }
    if (!cfg->matcher) return moeq__error(err, MOEQ_STATUS_STATE, "config has no matcher");
    if (opts) {
        moeq_status ost = moeq__resolve_options_check(opts->resolve, err);
        if (ost != MOEQ_STATUS_OK) return ost;
    }
    uint64_t n = moeq_checkpoint_tensor_count(ckpt);
    if (n > (1u << 30)) { /* the module hash table has 2n slots of 32 bits */
        return moeq__error(err, MOEQ_STATUS_LIMIT,
                           "the checkpoint has %llu tensors; moeq inspect handles up to 2^30",
                           (unsigned long long)n);
    }
    inspect in;
    memset(&in, 0, sizeof in);
    in.cfg = cfg;
    in.ckpt = ckpt;
    in.opts = opts;
    in.ro = opts ? opts->resolve : NULL;
    in.so = opts ? opts->select : NULL;
    in.err = err;
    in.flags = moeq_config_dequant_flags(cfg);
    in.kv = moeq_config_kv_cache_scheme(cfg);
    in.n_tensors = (uint32_t)n;
    in.sum.tensors = n;
    moeq_status st = moeq__match_scratch_create(cfg->matcher, &in.scratch, err);
    if (st == MOEQ_STATUS_OK && opts && opts->engine) {
        st = moeq__engine_create(opts->engine, cfg, &in.engine, err);
    }
    if (st == MOEQ_STATUS_OK) st = collect_modules(&in);
    if (st == MOEQ_STATUS_OK) st = classify(&in);
    if (st == MOEQ_STATUS_OK) st = plan_rows(&in);
    if (st == MOEQ_STATUS_OK) st = account(&in);
    if (st == MOEQ_STATUS_OK) {
        sort_list(&in.unconsumed);
        sort_list(&in.missing);
        sort_list(&in.errors);
        in.sum.modules = in.n_mods;
        in.sum.moe_layers = in.n_layers;
        in.sum.unconsumed = in.unconsumed.n + in.unconsumed.unlisted;
        in.sum.missing = in.missing.n + in.missing.unlisted;
        in.sum.errors = in.errors.n + in.errors.unlisted;
        st = moeq__inspect_emit(&in, write, user);
    }
    if (st == MOEQ_STATUS_OK && summary) *summary = in.sum;
    free_inspect(&in);
    return st;
}

static int32_t append_to_sb(const char *data, size_t len, void *user) {
    moeq__sb *sb = user;
    moeq__sb_append(sb, data, len);
    return sb->failed ? 1 : 0;
}

moeq_status moeq_inspect(const moeq_config *cfg, const moeq_checkpoint *ckpt,
                         const moeq_inspect_options *opts, char **out_text,
                         moeq_inspect_summary *summary, moeq_error *err) {
    if (out_text) *out_text = NULL;
    if (summary) memset(summary, 0, sizeof *summary);
    if (!out_text) return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "out_text is NULL");
    moeq__sb sb;
    moeq__sb_init(&sb);
    moeq_inspect_summary s;
    moeq_status st = moeq_inspect_write(cfg, ckpt, opts, append_to_sb, &sb, &s, err);
    if (st == MOEQ_STATUS_IO && sb.failed) {
        st = moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory while inspecting the checkpoint");
    }
    if (st != MOEQ_STATUS_OK) {
        moeq__sb_free(&sb);
        return st;
    }
    char *text = moeq__sb_take(&sb);
    if (!text)
        return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory while inspecting the checkpoint");
    *out_text = text;
    if (summary) *summary = s;
    return MOEQ_STATUS_OK;
}

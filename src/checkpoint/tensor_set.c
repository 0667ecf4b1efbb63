/*
 * tensor_set.c - moeq_tensor_set: tensors the library made (compressed
 * weights, synthetic checkpoints), owning their names and data.
 *
 * Each tensor lives in one allocation: its data first (so it is as aligned as
 * malloc makes it), then its NUL-terminated name.  The moeq_tensor views sit
 * in one array, so the whole set can go to moeq_safetensors_write as is; a
 * hash of the names keeps adding O(1) with the duplicate check.
 */
#include "checkpoint/tensor_set.h"

#include <string.h>

struct moeq_tensor_set {
    moeq_tensor *t; /* [n], views into blocks */
    void **blocks;  /* [n], what each view points into */
    uint32_t n, cap;
    uint32_t *slots;  /* open addressing: tensor index + 1, 0 = empty */
    uint32_t n_slots; /* power of two, >= 2 * n, or 0 */
};

/* FNV-1a: names are short and hashing is not where the time goes. */
static uint32_t name_hash(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

/* The slot holding `name`, or the empty slot where it would go. */
static uint32_t *slot_of(const moeq_tensor_set *s, const char *name) {
    const uint32_t mask = s->n_slots - 1u;
    for (uint32_t i = name_hash(name) & mask;; i = (i + 1u) & mask) {
        const uint32_t v = s->slots[i];
        if (v == 0 || strcmp(s->t[v - 1u].name, name) == 0) return &s->slots[i];
    }
}

/* Re-hashes the first s->n tensors into a table of n_slots slots. */
static bool rehash(moeq_tensor_set *s, uint32_t n_slots) {
    uint32_t *slots = moeq__calloc(n_slots, sizeof *slots);
    if (!slots) return false;
    moeq__free(s->slots);
    s->slots = slots;
    s->n_slots = n_slots;
    for (uint32_t i = 0; i < s->n; i++) *slot_of(s, s->t[i].name) = i + 1u;
    return true;
}

/* Room for one more tensor (views, blocks and hash slots). */
static bool reserve_one(moeq_tensor_set *s) {
    if (s->n == UINT32_MAX / 4u) return false;
    if (s->n == s->cap) {
        const uint32_t cap = s->cap ? s->cap * 2u : 16u;
        moeq_tensor *t = moeq__realloc(s->t, cap * sizeof *t);
        if (!t) return false;
        s->t = t;
        void **b = moeq__realloc(s->blocks, cap * sizeof *b);
        if (!b) return false;
        s->blocks = b;
        s->cap = cap;
    }
    if (2u * (s->n + 1u) > s->n_slots) return rehash(s, s->n_slots ? s->n_slots * 2u : 32u);
    return true;
}

moeq_status moeq_tensor_set_create(moeq_tensor_set **out, moeq_error *err) {
    if (!out)
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "moeq_tensor_set_create: out is NULL");
    *out = moeq__calloc(1, sizeof **out);
    if (!*out) return moeq__error(err, MOEQ_STATUS_NOMEM, "moeq_tensor_set_create: out of memory");
    return MOEQ_STATUS_OK;
}

void moeq_tensor_set_destroy(moeq_tensor_set *set) {
    if (!set) return;
    for (uint32_t i = 0; i < set->n; i++) moeq__free(set->blocks[i]);
    moeq__free(set->t);
    moeq__free(set->blocks);
    moeq__free(set->slots);
    moeq__free(set);
}

uint32_t moeq_tensor_set_count(const moeq_tensor_set *set) {
    return set ? set->n : 0;
}

const moeq_tensor *moeq_tensor_set_get(const moeq_tensor_set *set, uint32_t i) {
    return set && i < set->n ? &set->t[i] : NULL;
}

const moeq_tensor *moeq_tensor_set_find(const moeq_tensor_set *set, const char *name) {
    if (!set || !name || set->n == 0) return NULL;
    const uint32_t v = *slot_of(set, name);
    return v ? &set->t[v - 1u] : NULL;
}

uint64_t moeq__tensor_set_bytes(const moeq_tensor_set *set) {
    uint64_t total = 0;
    for (uint32_t i = 0; set && i < set->n; i++) total += set->t[i].nbytes;
    return total;
}

void moeq__tensor_set_truncate(moeq_tensor_set *set, uint32_t n) {
    if (!set || n >= set->n) return;
    for (uint32_t i = n; i < set->n; i++) moeq__free(set->blocks[i]);
    set->n = n;
    /* removing from linear probing is fiddly; this is an error path */
    memset(set->slots, 0, set->n_slots * sizeof *set->slots);
    for (uint32_t i = 0; i < set->n; i++) *slot_of(set, set->t[i].name) = i + 1u;
}

moeq_status moeq__tensor_set_absorb(moeq_tensor_set *into, moeq_tensor_set *from, moeq_error *err) {
    for (uint32_t i = 0; i < from->n; i++) {
        if (into->n && *slot_of(into, from->t[i].name) != 0) {
            return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                               "%s: a tensor of that name is already in the set", from->t[i].name);
        }
    }
    const uint32_t n0 = into->n;
    for (uint32_t i = 0; i < from->n; i++) {
        if (!reserve_one(into)) {
            into->n = n0; /* the blocks still belong to `from` */
            memset(into->slots, 0, into->n_slots * sizeof *into->slots);
            for (uint32_t k = 0; k < into->n; k++) *slot_of(into, into->t[k].name) = k + 1u;
            return moeq__error(err, MOEQ_STATUS_NOMEM, "out of memory merging tensor sets");
        }
        into->t[into->n] = from->t[i];
        into->blocks[into->n] = from->blocks[i];
        *slot_of(into, from->t[i].name) = ++into->n;
    }
    from->n = 0;
    memset(from->slots, 0, from->n_slots * sizeof *from->slots);
    return MOEQ_STATUS_OK;
}

/* Appends a tensor whose name is prefix + sep + param, with `nbytes` zeroed bytes. */
static moeq_status push(moeq_tensor_set *s, const char *prefix, const char *sep, const char *param,
                        int32_t dtype, int32_t ndim, const int64_t *shape, size_t nbytes,
                        void **data, moeq_error *err) {
    const size_t lp = strlen(prefix), ls = strlen(sep), lq = strlen(param);
    const size_t data_room = (nbytes + 7u) & ~(size_t)7u;
    size_t total;
    if (data_room < nbytes || !moeq__add_size(data_room, lp + ls + lq + 1u, &total)) {
        return moeq__error(err, MOEQ_STATUS_SHAPE, "%s%s%s: %zu bytes is too large", prefix, sep,
                           param, nbytes);
    }
    if (!reserve_one(s)) {
        return moeq__error(err, MOEQ_STATUS_NOMEM, "%s%s%s: out of memory", prefix, sep, param);
    }
    uint8_t *block = moeq__calloc(1, total);
    if (!block) {
        return moeq__error(err, MOEQ_STATUS_NOMEM, "%s%s%s: out of memory for %zu bytes", prefix,
                           sep, param, nbytes);
    }
    char *name = (char *)block + data_room;
    memcpy(name, prefix, lp);
    memcpy(name + lp, sep, ls);
    memcpy(name + lp + ls, param, lq + 1u);
    uint32_t *slot = slot_of(s, name);
    if (*slot != 0) {
        moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: a tensor of that name is already in the set",
                    name);
        moeq__free(block);
        return MOEQ_STATUS_INVALID_ARG;
    }
    moeq_tensor *t = &s->t[s->n];
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int32_t d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->data = block;
    t->nbytes = nbytes;
    s->blocks[s->n] = block;
    *slot = ++s->n;
    *data = block;
    return MOEQ_STATUS_OK;
}

/* shape x dtype size, or false when it overflows. */
static bool tensor_bytes(int32_t dtype, int32_t ndim, const int64_t *shape, size_t *out) {
    size_t n = moeq_dtype_size(dtype);
    for (int32_t d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (uint64_t)shape[d] > SIZE_MAX ||
            !moeq__mul_size(n, (size_t)shape[d], &n)) {
            return false;
        }
    }
    *out = n;
    return true;
}

moeq_status moeq__tensor_set_push(moeq_tensor_set *set, const char *module, const char *param,
                                  int32_t dtype, int32_t ndim, const int64_t *shape, void **data,
                                  moeq_error *err) {
    size_t nbytes;
    const char *sep = module[0] ? "." : "";
    if (!tensor_bytes(dtype, ndim, shape, &nbytes)) {
        return moeq__error(err, MOEQ_STATUS_SHAPE, "%s%s%s: the tensor is too large", module, sep,
                           param);
    }
    return push(set, module, sep, param, dtype, ndim, shape, nbytes, data, err);
}

moeq_status moeq_tensor_set_add(moeq_tensor_set **set, const moeq_tensor *tensor, moeq_error *err) {
    if (!set || !tensor) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "moeq_tensor_set_add: %s is NULL",
                           !set ? "set" : "tensor");
    }
    const moeq_tensor *t = tensor;
    if (!t->name || !t->name[0]) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "moeq_tensor_set_add: the tensor has no name");
    }
    if (moeq_dtype_size(t->dtype) == 0) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: dtype %d is not a moeq_dtype",
                           t->name, (int)t->dtype);
    }
    if (t->ndim < 0 || t->ndim > MOEQ_MAX_DIMS) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: ndim %d, expected 0..%d", t->name,
                           (int)t->ndim, MOEQ_MAX_DIMS);
    }
    size_t nbytes;
    if (!tensor_bytes(t->dtype, t->ndim, t->shape, &nbytes) || nbytes != t->nbytes) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG,
                           "%s: nbytes %llu does not equal shape x %zu bytes of %s", t->name,
                           (unsigned long long)t->nbytes, moeq_dtype_size(t->dtype),
                           moeq_dtype_name(t->dtype));
    }
    if (nbytes > 0 && !t->data) {
        return moeq__error(err, MOEQ_STATUS_INVALID_ARG, "%s: data is NULL", t->name);
    }
    moeq_tensor_set *s = *set;
    if (!s) {
        const moeq_status st = moeq_tensor_set_create(&s, err);
        if (st != MOEQ_STATUS_OK) return st;
    }
    void *data;
    const moeq_status st =
        push(s, "", "", t->name, t->dtype, t->ndim, t->shape, nbytes, &data, err);
    if (st != MOEQ_STATUS_OK) {
        if (s != *set) moeq_tensor_set_destroy(s);
        return st;
    }
    if (nbytes > 0) memcpy(data, t->data, nbytes);
    *set = s;
    return MOEQ_STATUS_OK;
}

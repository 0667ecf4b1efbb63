/*
 * tensor_set.h - what the writers (compress.c, synth.c) use of a
 * moeq_tensor_set beyond the public API.  Never installed.
 */
#ifndef MOEQ_TENSOR_SET_H
#define MOEQ_TENSOR_SET_H

#include "common/internal.h"

/* Appends the tensor "<module>.<param>" (just `param` when module is "")
 * with zeroed room for its data and returns that room in *data, to be
 * filled in place.  Errors name the tensor.
 * @return OK, INVALID_ARG (the name is taken), SHAPE (the size overflows), NOMEM. */
moeq_status moeq__tensor_set_push(moeq_tensor_set *set, const char *module, const char *param,
                                  int32_t dtype, int32_t ndim, const int64_t *shape, void **data,
                                  moeq_error *err);

/* Drops every tensor from index n on (n <= count): undoes pushes after a failure. */
void moeq__tensor_set_truncate(moeq_tensor_set *set, uint32_t n);

/* Moves every tensor of `from` to the end of `into`, in order, without
 * copying data; `from` is left empty.  On failure (a name `into` already
 * holds: INVALID_ARG; NOMEM) nothing moved. */
moeq_status moeq__tensor_set_absorb(moeq_tensor_set *into, moeq_tensor_set *from, moeq_error *err);

/* Total bytes of tensor data in the set. */
uint64_t moeq__tensor_set_bytes(const moeq_tensor_set *set);

#endif /* MOEQ_TENSOR_SET_H */

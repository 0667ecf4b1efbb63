/*
 * npy.h - numpy .npy files for the moeq tool: write what numpy writes, read
 * what numpy writes.  Uses only the public API; errors are strings that name
 * the file and the problem.
 *
 * Element types are moeq_dtype values.  numpy has no bfloat16 or float8: a
 * BF16 array is written as raw 16-bit words ('<u2') and F8_E4M3/F8_E5M2 as
 * raw bytes ('|u1'); reading gives U16/U8 back and the caller reinterprets.
 */
#ifndef MOEQ_TOOLS_NPY_H
#define MOEQ_TOOLS_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "moeq/moeq.h"

/* An array read from a .npy file: C order, little-endian. */
typedef struct npy_array {
    int32_t dtype; /* moeq_dtype: F64 F32 F16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL */
    int32_t ndim;  /* 0..MOEQ_MAX_DIMS */
    int64_t shape[MOEQ_MAX_DIMS];
    void *data;      /* malloc'd (never NULL after a successful read); npy_free frees it */
    uint64_t nbytes; /* product(shape) * element size */
} npy_array;

/* numpy's descr for a dtype ("<f4", "|u1", ...); NULL for an unknown value. */
const char *npy_descr(int32_t dtype);

/* Writes `data` (product(shape) elements of `dtype`, C order) to `path` as
 * .npy version 1.0 with exactly the header numpy writes.  Returns 0, or -1
 * with a message in err (err_size bytes, may be NULL). */
int npy_write(const char *path, int32_t dtype, int32_t ndim, const int64_t *shape, const void *data,
              char *err, size_t err_size);

/* Reads a .npy file of version 1.0, 2.0 or 3.0 holding a C-order
 * little-endian array of one of the types above with at most MOEQ_MAX_DIMS
 * dimensions.  The header and the file length are checked against each
 * other.  Returns 0 and fills *out (free with npy_free), or -1 with a message
 * in err and *out zeroed. */
int npy_read(const char *path, npy_array *out, char *err, size_t err_size);

/* Frees out->data and zeroes *a.  NULL is a no-op. */
void npy_free(npy_array *a);

#endif /* MOEQ_TOOLS_NPY_H */

/*
 * safetensors.h - what other library modules (MoE loading, inspection) may see
 * of an open moeq_checkpoint beyond the public API.  Never installed.
 *
 * Everything returned here is borrowed from the checkpoint: it lives until
 * moeq_checkpoint_close and may be read from any number of threads.
 */
#ifndef MOEQ_SAFETENSORS_H
#define MOEQ_SAFETENSORS_H

#include "common/internal.h"

/* Largest header a file may declare (the safetensors package's own limit). */
#define MOEQ__SAFETENSORS_MAX_HEADER 100000000u

/* Files the checkpoint mapped: index shards in shard-name order, a directory's
 * *.safetensors files in name order, or the one file that was opened. */
uint32_t moeq__checkpoint_file_count(const moeq_checkpoint *ckpt);
/* Path of file i as opened ("<dir>/<shard>"); NULL when i is out of range.
 * The same pointer is the `file` of every moeq_tensor that lives in it. */
const char *moeq__checkpoint_file_path(const moeq_checkpoint *ckpt, uint32_t i);
/* Size of file i in bytes; 0 when i is out of range. */
uint64_t moeq__checkpoint_file_size(const moeq_checkpoint *ckpt, uint32_t i);

/* The "__metadata__" pairs of file i, in header order.  _count is 0 when the
 * file has none or i is out of range; _pair returns false when j is out of
 * range and otherwise stores the key and value (NUL-terminated UTF-8). */
uint32_t moeq__checkpoint_metadata_count(const moeq_checkpoint *ckpt, uint32_t file);
bool moeq__checkpoint_metadata_pair(const moeq_checkpoint *ckpt, uint32_t file, uint32_t j,
                                    const char **key, const char **value);

/* Tensor i in name order (as moeq_checkpoint_tensor, without the copy);
 * NULL when i is out of range. */
const moeq_tensor *moeq__checkpoint_tensor_at(const moeq_checkpoint *ckpt, uint64_t i);
/* Position of the tensor named `name` in name order; false when absent. */
bool moeq__checkpoint_index_of(const moeq_checkpoint *ckpt, const char *name, uint64_t *index);
/* The tensors named "<module>.<anything>" (every tensor under module
 * `module`, its children's included: "model.layers.3.mlp.experts" gives
 * every expert's) are [*first, *first + count) in name order.  Returns count;
 * *first is where they would be when count is 0. */
uint64_t moeq__checkpoint_module_range(const moeq_checkpoint *ckpt, const char *module,
                                       uint64_t *first);

/* Drops the pages of [data, data + nbytes) (inside a mapped checkpoint file)
 * from this process's resident memory: they stay in the page cache and are
 * read again if touched.  The whole pages inside the range only. */
void moeq__checkpoint_drop(const void *data, uint64_t nbytes);

#endif /* MOEQ_SAFETENSORS_H */

/*
 * synth.h - shared by the synthetic checkpoint writer's files: synth.c (the
 * model's tensors and files), synth_config.c (config.json).  Never installed.
 */
#ifndef MOEQ_SYNTH_H
#define MOEQ_SYNTH_H

#include "common/internal.h"

#define MOEQ__SYNTH_MAX_GROUPS 64

/* A layout after the defaults were applied and every field was checked. */
typedef struct moeq__synth {
    moeq_synth_layout L; /* no zero defaults left; groups point at `groups` */
    moeq_synth_group groups[MOEQ__SYNTH_MAX_GROUPS];
    char group_names[MOEQ__SYNTH_MAX_GROUPS][24]; /* "group_<i>" for unnamed groups */
    int32_t head_dim; /* hidden_size / num_attention_heads (0 without attention) */
} moeq__synth;

/* Applies the defaults and validates the layout.  Messages name the field
 * ("layout.groups[1].targets[0] is NULL").
 * @return OK, INVALID_ARG. */
moeq_status moeq__synth_normalize(const moeq_synth_layout *in, moeq__synth *out, moeq_error *err);

/* config.json for the layout: the model fields and the quantization_config
 * as compressed-tensors 0.18 writes it (its QuantizationArgs derived the way
 * CT derives them on load, so observer and zp_dtype are filled in).  *text
 * (free with moeq__free) and the parsed config *cfg (destroy with
 * moeq_config_destroy), which the writer resolves modules with.
 * @return OK, SCHEMA/REGEX/UNSUPPORTED (the parser's verdict on a group,
 *         prefixed with the layout field), INVALID_ARG, NOMEM. */
moeq_status moeq__synth_config(const moeq__synth *s, char **text, size_t *len, moeq_config **cfg,
                               moeq_error *err);

#endif /* MOEQ_SYNTH_H */

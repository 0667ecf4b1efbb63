/*
 * pyjson.h - a small JSON document builder whose text is byte for byte what
 * Python's json.dumps(value, indent=2, sort_keys=True) writes, which is how
 * compressed-tensors (config.json) and transformers (the safetensors index)
 * write their files.  Used by the synthetic checkpoint writer.  Never installed.
 *
 * Values belong to their document and are freed with it.  Builders never
 * fail loudly: an allocation failure (or a string that is not UTF-8) is
 * recorded in the document, later calls become no-ops, and moeq__pj_dump
 * reports it once.
 */
#ifndef MOEQ_PYJSON_H
#define MOEQ_PYJSON_H

#include "common/internal.h"

typedef struct moeq__pj moeq__pj;   /* a document */
typedef struct moeq__pjv moeq__pjv; /* a value in it */

moeq__pj *moeq__pj_create(void);
void moeq__pj_destroy(moeq__pj *doc);

/* Constructors; NULL after a failure (the document remembers it). */
moeq__pjv *moeq__pj_object(moeq__pj *doc);
moeq__pjv *moeq__pj_array(moeq__pj *doc);
moeq__pjv *moeq__pj_string(moeq__pj *doc, const char *s); /* copied */
moeq__pjv *moeq__pj_int(moeq__pj *doc, int64_t v);
moeq__pjv *moeq__pj_uint(moeq__pj *doc, uint64_t v);
/* A finite float, written as Python's repr: the shortest digits that read
 * back as the same double (or, with single = true, as the same float32,
 * which is how a value given as float32 is meant: 0.1f is "0.1"). */
moeq__pjv *moeq__pj_float(moeq__pj *doc, double v, bool single);
moeq__pjv *moeq__pj_bool(moeq__pj *doc, bool v);
moeq__pjv *moeq__pj_null(moeq__pj *doc);

/* obj[key] = v (key copied; keys must be unique, the dump sorts them). */
void moeq__pj_set(moeq__pj *doc, moeq__pjv *obj, const char *key, moeq__pjv *v);
/* arr.append(v) */
void moeq__pj_push(moeq__pj *doc, moeq__pjv *arr, moeq__pjv *v);

/* The text of v (NUL-terminated, *len bytes, no trailing newline), or NULL
 * when the document failed; *why then says how ("out of memory", "a string
 * is not valid UTF-8: ..."). Free with moeq__free. */
char *moeq__pj_dump(moeq__pj *doc, const moeq__pjv *v, size_t *len, const char **why);

/* Python's repr() of a finite double (or float32 when single), into buf
 * (at least 32 bytes).  Exposed for tests. */
void moeq__py_float_repr(double v, bool single, char *buf, size_t n);

#endif /* MOEQ_PYJSON_H */

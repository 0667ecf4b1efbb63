/*
 * moeq.h - the whole public C API of moeq.
 *
 * moeq makes quantized Mixture-of-Experts checkpoints in the compressed-tensors
 * format run on any CPU.  Data flows one way:
 *
 *   quantization_config --moeq_config_parse--> moeq_config (immutable)
 *   layer name          --moeq_resolve-------> group, weight/input args, format
 *   resolved args       --moeq_select--------> scheme (with the reasons)
 *   scheme + dims       --moeq_moe_create----> MoE layer: manifest, load, finalize
 *   tokens              --moeq_moe_apply-----> routed, fused expert forward
 *
 * Conventions (hold for every declaration below):
 * - Functions that can fail return moeq_status and, when `err` is not NULL,
 *   fill it with the status and a message naming the place (JSON path, layer,
 *   group, tensor, failing check, what would be accepted).
 * - Objects are opaque and created by *_parse / *_load / *_create / *_open,
 *   which write the new object to an OUT pointer only on success (NULL
 *   otherwise).  *_destroy(NULL) is a no-op.
 * - Strings returned by the library are owned by the object they came from and
 *   live as long as it does, unless stated otherwise.
 * - The library never prints, never exits and never aborts on caller input.
 * - Thread safety: moeq_config, moeq_checkpoint and a finalized moeq_moe are
 *   immutable and may be shared by any number of threads.  A moeq_ctx
 *   (scratch space, thread pool) belongs to one calling thread at a time.
 *
 * All structs crossing the ABI hold fixed-width integers, floats and pointers
 * only (no bitfields, no by-value structs), so ctypes/cffi can mirror them.
 */
#ifndef MOEQ_H
#define MOEQ_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#  if defined(MOEQ_BUILDING_LIBRARY)
#    define MOEQ_API __declspec(dllexport)
#  elif defined(MOEQ_SHARED)
#    define MOEQ_API __declspec(dllimport)
#  else
#    define MOEQ_API
#  endif
#else
#  define MOEQ_API __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                   */
/* ------------------------------------------------------------------------ */

#define MOEQ_VERSION_MAJOR 0
#define MOEQ_VERSION_MINOR 1
#define MOEQ_VERSION_PATCH 0
#define MOEQ_VERSION_NUMBER \
    (MOEQ_VERSION_MAJOR * 10000 + MOEQ_VERSION_MINOR * 100 + MOEQ_VERSION_PATCH)

/* "0.1.0": the library's version (compare with the header's MOEQ_VERSION_*). */
MOEQ_API const char *moeq_version(void);
/* MOEQ_VERSION_NUMBER of the library that was linked. */
MOEQ_API int32_t moeq_version_number(void);

/* ------------------------------------------------------------------------ */
/* Status codes and errors                                                   */
/* ------------------------------------------------------------------------ */

/* One list drives the enum, moeq_status_name() and moeq_status_str().
 * Values are fixed once released; new codes are only appended. */
#define MOEQ_STATUS_MAP(X)                                                      \
    X(OK, 0, "success")                                                         \
    X(NOMEM, 1, "out of memory")                                                \
    X(INVALID_ARG, 2, "invalid argument")                                       \
    X(JSON, 3, "malformed JSON")                                                \
    X(SCHEMA, 4, "config does not follow the compressed-tensors schema")        \
    X(REGEX, 5, "bad regular expression")                                       \
    X(NO_MATCH, 6, "nothing matches")                                           \
    X(AMBIGUOUS, 7, "ambiguous or inconsistent match")                          \
    X(UNSUPPORTED, 8, "not supported")                                          \
    X(SHAPE, 9, "wrong shape")                                                  \
    X(DTYPE, 10, "wrong dtype")                                                 \
    X(IO, 11, "input/output error")                                             \
    X(CHECKPOINT, 12, "malformed or incomplete checkpoint")                     \
    X(STATE, 13, "object is in the wrong state for this call")                  \
    X(INTERNAL, 14, "internal error")                                           \
    X(LIMIT, 15, "resource limit exceeded")

typedef enum moeq_status {
#define MOEQ_X_(name, value, text) MOEQ_STATUS_##name = value,
    MOEQ_STATUS_MAP(MOEQ_X_)
#undef MOEQ_X_
    MOEQ_STATUS_COUNT_
} moeq_status;

#define MOEQ_OK MOEQ_STATUS_OK

/* "OK", "NOMEM", ...; "UNKNOWN" for a value outside the list. Static storage. */
MOEQ_API const char *moeq_status_name(int32_t status);
/* One-line human description ("out of memory"). Static storage. */
MOEQ_API const char *moeq_status_str(int32_t status);

#define MOEQ_ERROR_MESSAGE_SIZE 2048

/* Caller-provided error record.  On failure the library stores the status in
 * `code` and a NUL-terminated message in `message` (truncated with "..." when
 * longer than the buffer).  On success it is left untouched. */
typedef struct moeq_error {
    int32_t code;
    char message[MOEQ_ERROR_MESSAGE_SIZE];
} moeq_error;

/* Resets `err` to {MOEQ_STATUS_OK, ""}. NULL is accepted. */
MOEQ_API void moeq_error_clear(moeq_error *err);

/* Log messages: selection decisions (level INFO) and warnings (WARN).
 * The callback is process-wide, called from whatever thread logs, and must be
 * thread-safe.  NULL (the default) discards every message. */
typedef enum moeq_log_level {
    MOEQ_LOG_DEBUG = 0,
    MOEQ_LOG_INFO = 1,
    MOEQ_LOG_WARN = 2
} moeq_log_level;
typedef void (*moeq_log_fn)(int32_t level, const char *message, void *user_data);
MOEQ_API void moeq_set_log_callback(moeq_log_fn fn, void *user_data);

/* ------------------------------------------------------------------------ */
/* Element types                                                             */
/* ------------------------------------------------------------------------ */

/* Tensor element types (the safetensors set).  Values are stable. */
#define MOEQ_DTYPE_MAP(X)                                                       \
    X(INVALID, 0, "invalid", 0)                                                 \
    X(F64, 1, "F64", 8)                                                         \
    X(F32, 2, "F32", 4)                                                         \
    X(F16, 3, "F16", 2)                                                         \
    X(BF16, 4, "BF16", 2)                                                       \
    X(F8_E4M3, 5, "F8_E4M3", 1)                                                 \
    X(F8_E5M2, 6, "F8_E5M2", 1)                                                 \
    X(I8, 7, "I8", 1)                                                           \
    X(U8, 8, "U8", 1)                                                           \
    X(I16, 9, "I16", 2)                                                         \
    X(U16, 10, "U16", 2)                                                        \
    X(I32, 11, "I32", 4)                                                        \
    X(U32, 12, "U32", 4)                                                        \
    X(I64, 13, "I64", 8)                                                        \
    X(U64, 14, "U64", 8)                                                        \
    X(BOOL, 15, "BOOL", 1)

typedef enum moeq_dtype {
#define MOEQ_X_(name, value, text, size) MOEQ_DTYPE_##name = value,
    MOEQ_DTYPE_MAP(MOEQ_X_)
#undef MOEQ_X_
    MOEQ_DTYPE_COUNT_
} moeq_dtype;

/* Safetensors spelling ("BF16"); "invalid" for unknown values. Static storage. */
MOEQ_API const char *moeq_dtype_name(int32_t dtype);
/* Bytes per element; 0 for unknown values. */
MOEQ_API size_t moeq_dtype_size(int32_t dtype);
/* Parses a safetensors dtype tag; MOEQ_DTYPE_INVALID when unknown. */
MOEQ_API int32_t moeq_dtype_from_name(const char *name);

/* ------------------------------------------------------------------------ */
/* Quantization args (read-only views of a parsed config)                    */
/* ------------------------------------------------------------------------ */

typedef enum moeq_qtype { MOEQ_QTYPE_INT = 0, MOEQ_QTYPE_FLOAT = 1 } moeq_qtype;

typedef enum moeq_strategy {
    MOEQ_STRATEGY_TENSOR = 0,
    MOEQ_STRATEGY_CHANNEL = 1,
    MOEQ_STRATEGY_GROUP = 2,
    MOEQ_STRATEGY_BLOCK = 3,
    MOEQ_STRATEGY_TOKEN = 4,
    MOEQ_STRATEGY_TENSOR_GROUP = 5,
    MOEQ_STRATEGY_ATTN_HEAD = 6
} moeq_strategy;

typedef enum moeq_dynamic {
    MOEQ_DYNAMIC_FALSE = 0,
    MOEQ_DYNAMIC_TRUE = 1,
    MOEQ_DYNAMIC_LOCAL = 2 /* "local": NVFP4 inputs, static global scale */
} moeq_dynamic;

/* actorder as written.  DYNAMIC is an alias of GROUP and STATIC of WEIGHT;
 * the alias is kept so that plans print what the config says. */
typedef enum moeq_actorder {
    MOEQ_ACTORDER_NONE = 0,
    MOEQ_ACTORDER_GROUP = 1,
    MOEQ_ACTORDER_WEIGHT = 2,
    MOEQ_ACTORDER_DYNAMIC = 3,
    MOEQ_ACTORDER_STATIC = 4
} moeq_actorder;

/* One QuantizationArgs object after compressed-tensors' defaults and
 * derivation rules (strategy inference, actorder aliases, zp_dtype, ...). */
typedef struct moeq_quant_args {
    int32_t num_bits;
    int32_t type;            /* moeq_qtype */
    int32_t symmetric;       /* 0 or 1 */
    int32_t group_size;      /* 0 when null, -1 for channel, > 0 otherwise */
    int32_t strategy;        /* moeq_strategy, always set (inferred if null) */
    int32_t strategy_given;  /* 1 when the JSON named the strategy */
    int32_t block_rows;      /* block_structure [rows, cols]; 0 when null */
    int32_t block_cols;
    int32_t dynamic;         /* moeq_dynamic */
    int32_t actorder;        /* moeq_actorder */
    int32_t scale_dtype;     /* moeq_dtype; MOEQ_DTYPE_INVALID when null */
    int32_t zp_dtype;        /* moeq_dtype (derived when null), INVALID if symmetric */
    const char *observer;    /* after derivation; NULL when null */
} moeq_quant_args;

/* 1 when actorder is GROUP or its alias DYNAMIC. */
MOEQ_API int32_t moeq_actorder_is_group(int32_t actorder);
/* Lower-case compressed-tensors spellings ("group", "tensor_group", ...). */
MOEQ_API const char *moeq_strategy_name(int32_t strategy);
MOEQ_API const char *moeq_actorder_name(int32_t actorder);

/* Writes a short summary such as "int4 group(64) sym static" into buf
 * (always NUL-terminated when n > 0).  Returns the length it wanted. */
MOEQ_API size_t moeq_quant_args_summary(const moeq_quant_args *args, char *buf, size_t n);

/* Compression formats.  NONE means "not given" (a group without its own
 * format, a config without a top-level format). */
#define MOEQ_FORMAT_MAP(X)                                                      \
    X(NONE, 0, "")                                                              \
    X(DENSE, 1, "dense")                                                        \
    X(SPARSE_BITMASK, 2, "sparse-bitmask")                                      \
    X(SPARSE_24_BITMASK, 3, "sparse-24-bitmask")                                \
    X(INT_QUANTIZED, 4, "int-quantized")                                        \
    X(FLOAT_QUANTIZED, 5, "float-quantized")                                    \
    X(NAIVE_QUANTIZED, 6, "naive-quantized")                                    \
    X(PACK_QUANTIZED, 7, "pack-quantized")                                      \
    X(MARLIN_24, 8, "marlin-24")                                                \
    X(MIXED_PRECISION, 9, "mixed-precision")                                    \
    X(NVFP4_PACK_QUANTIZED, 10, "nvfp4-pack-quantized")                         \
    X(MXFP4_PACK_QUANTIZED, 11, "mxfp4-pack-quantized")                         \
    X(MXFP8_QUANTIZED, 12, "mxfp8-quantized")                                   \
    X(FAKEQUANT, 13, "fakequant")                                               \
    X(MXFP6_PACK_QUANTIZED, 14, "mxfp6-pack-quantized")

typedef enum moeq_format {
#define MOEQ_X_(name, value, text) MOEQ_FORMAT_##name = value,
    MOEQ_FORMAT_MAP(MOEQ_X_)
#undef MOEQ_X_
    MOEQ_FORMAT_COUNT_
} moeq_format;

/* "pack-quantized", ...; "" for NONE or unknown values. Static storage. */
MOEQ_API const char *moeq_format_name(int32_t format);

/* ------------------------------------------------------------------------ */
/* Config                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct moeq_config moeq_config;

/* Options for parsing; pass NULL for the defaults. */
typedef struct moeq_config_options {
    /* 1: reject unknown keys (compressed-tensors' own strictness) instead of
     * recording a warning.  Default 0. */
    int32_t strict_keys;
    /* PCRE2 match limit for every target/ignore pattern (0 = default 100000):
     * a hostile pattern fails with MOEQ_STATUS_LIMIT instead of hanging. */
    uint32_t regex_match_limit;
} moeq_config_options;

/* Parses `json` (len bytes, no NUL needed).  Accepts a whole config.json (the
 * block is taken from quantization_config, text_config.quantization_config or
 * the legacy compression_config, in that order) or a bare
 * quantization_config object.  Every target and ignore pattern is compiled
 * here, once.
 * @return OK, NOMEM, INVALID_ARG, JSON, SCHEMA, REGEX, UNSUPPORTED.
 * OUT *out: destroy with moeq_config_destroy. Immutable and thread-safe. */
MOEQ_API moeq_status moeq_config_parse(const char *json, size_t len,
                                       const moeq_config_options *opts,
                                       moeq_config **out, moeq_error *err);

/* Like moeq_config_parse, reading `path`: a model directory (its config.json),
 * a config.json, or a file holding a bare quantization_config object.
 * @return as moeq_config_parse, plus IO. */
MOEQ_API moeq_status moeq_config_load(const char *path, const moeq_config_options *opts,
                                      moeq_config **out, moeq_error *err);

MOEQ_API void moeq_config_destroy(moeq_config *cfg);

/* Where the block was found: "quantization_config",
 * "text_config.quantization_config", "compression_config" or "" (bare). */
MOEQ_API const char *moeq_config_source_key(const moeq_config *cfg);
/* Top-level "format" (MOEQ_FORMAT_NONE when absent). */
MOEQ_API int32_t moeq_config_format(const moeq_config *cfg);
/* The writer's "version" string, "" when absent. */
MOEQ_API const char *moeq_config_version(const moeq_config *cfg);
/* quantization_status ("" when absent). */
MOEQ_API const char *moeq_config_quantization_status(const moeq_config *cfg);
/* The raw JSON text of a top-level object the parser keeps but does not
 * interpret: key is "sparsity_config", "transform_config" or
 * "kv_cache_scheme".  NULL when absent or null. */
MOEQ_API const char *moeq_config_raw(const moeq_config *cfg, const char *key);
/* kv_cache_scheme as parsed QuantizationArgs; NULL when absent or null. */
MOEQ_API const moeq_quant_args *moeq_config_kv_cache_scheme(const moeq_config *cfg);

MOEQ_API uint32_t moeq_config_ignore_count(const moeq_config *cfg);
/* i-th ignore entry as written ("lm_head", "re:.*mlp\\.gate$"); NULL if out of range. */
MOEQ_API const char *moeq_config_ignore(const moeq_config *cfg, uint32_t i);

/* Warnings recorded while parsing (unknown keys, deprecated forms, ...). */
MOEQ_API uint32_t moeq_config_warning_count(const moeq_config *cfg);
MOEQ_API const char *moeq_config_warning(const moeq_config *cfg, uint32_t i);

/* One config group, in JSON order.  Pointers live as long as the config. */
typedef struct moeq_group_view {
    const char *name;                         /* "group_0", or a preset name */
    uint32_t index;                           /* position in config_groups */
    uint32_t n_targets;
    const char *const *targets;               /* as written */
    const moeq_quant_args *weights;           /* NULL when null/absent */
    const moeq_quant_args *input_activations; /* NULL when null/absent */
    const moeq_quant_args *output_activations;/* NULL when null/absent */
    int32_t format;                           /* the group's own format, or NONE */
    int32_t preset;                           /* 1 when expanded from a preset name */
} moeq_group_view;

MOEQ_API uint32_t moeq_config_group_count(const moeq_config *cfg);
/* @return OK, INVALID_ARG (NULL or i out of range). */
MOEQ_API moeq_status moeq_config_group(const moeq_config *cfg, uint32_t i,
                                       moeq_group_view *out);
/* The format group i's modules are read with, as moeq_resolve reports it:
 * the group's own, else the top-level one (unless mixed-precision), else
 * inferred from its args as compressed-tensors does.  NONE when i is out of
 * range. */
MOEQ_API int32_t moeq_config_group_format(const moeq_config *cfg, uint32_t i);

/* Model hyper-parameters from the same config.json (looked up first at the top
 * level, then under text_config): "num_experts", "n_routed_experts",
 * "num_experts_per_tok", "hidden_size", "moe_intermediate_size",
 * "norm_topk_prob", "n_group", "topk_group", "routed_scaling_factor", ...
 * Booleans read as 0/1.  @return OK, NO_MATCH (absent or not a number/bool). */
MOEQ_API moeq_status moeq_config_model_number(const moeq_config *cfg, const char *key,
                                              double *out);
/* A string-valued model field ("scoring_func", "model_type"); NULL if absent. */
MOEQ_API const char *moeq_config_model_string(const moeq_config *cfg, const char *key);

/* Expert sparsity (compressed-tensors 0.20's moe_sparsity_config, a field of
 * the quantization config; also read from the top level of config.json):
 * {"method": "prune" | "novice", "num_experts": [null, 129, 253, ...]}, one
 * entry per decoder layer, null for a dense layer. */
typedef enum moeq_moe_sparsity_method {
    MOEQ_MOE_SPARSITY_NONE = 0,  /* no moe_sparsity_config, or null */
    MOEQ_MOE_SPARSITY_PRUNE = 1, /* REAP: experts removed; the retained ones left-shifted
                                    (ids 0..n-1), the router's rows alike */
    MOEQ_MOE_SPARSITY_NOVICE = 2 /* MoNe: experts collapsed into constant novices; refused,
                                    the on-disk layout of the novices is not fixed */
} moeq_moe_sparsity_method;

/* The method (moeq_moe_sparsity_method); *n_layers (optional) gets the
 * number of per-layer entries (0 for NONE). */
MOEQ_API int32_t moeq_config_moe_sparsity(const moeq_config *cfg, uint32_t *n_layers);
/* Entry `layer` of num_experts: the experts that decoder layer retains, 0 for
 * a dense layer (null), -1 without moe_sparsity_config or past its end. */
MOEQ_API int32_t moeq_config_moe_sparsity_layer(const moeq_config *cfg, uint32_t layer);
/* The experts the MoE layer `prefix` holds under moe_sparsity_config, its
 * decoder layer taken from "layers.N." in the name
 * ("model.layers.3.mlp.experts", "backbone.layers.1.mixer.experts").
 * *out = 0 when the config has no moe_sparsity_config: the model's own
 * count stands.  @return OK, NO_MATCH (no "layers.N." in the name, N past the
 * list, or a layer the list marks dense), UNSUPPORTED (method novice: the
 * message names the layer and what is missing), INVALID_ARG (NULL). */
MOEQ_API moeq_status moeq_config_retained_experts(const moeq_config *cfg, const char *prefix,
                                                  int32_t *out, moeq_error *err);

/* ------------------------------------------------------------------------ */
/* Resolving layer names                                                     */
/* ------------------------------------------------------------------------ */

/* What a module is: class targets depend on it ("Linear" matches LINEAR and,
 * as engines do, EXPERT projections; "FusedMoE"/"RoutedExperts" match
 * EXPERT projections and MoE layers). */
typedef enum moeq_module_kind {
    MOEQ_MODULE_LINEAR = 0, /* an nn.Linear: attention, dense or shared-expert MLP */
    MOEQ_MODULE_EXPERT = 1, /* one projection of one routed expert */
    MOEQ_MODULE_OTHER = 2   /* norms, embeddings, routers treated as non-linear */
} moeq_module_kind;

typedef enum moeq_precedence {
    /* compressed-tensors: exact name > regex (lexicographic by target text)
     * > class target. */
    MOEQ_PRECEDENCE_CT = 0,
    /* vLLM/SGLang: first target in config order that matches by name, then
     * class targets. */
    MOEQ_PRECEDENCE_ENGINE = 1
} moeq_precedence;

/* One fused-name rule: a layer named "...<fused>" stands for its shards. */
typedef struct moeq_fused_name {
    const char *fused;          /* "qkv_proj" */
    uint32_t n_shards;
    const char *const *shards;  /* {"q_proj", "k_proj", "v_proj"} */
} moeq_fused_name;

/* Options for moeq_resolve*; NULL means all defaults. */
typedef struct moeq_resolve_options {
    int32_t precedence;                /* moeq_precedence, default CT */
    /* Fused names; n_fused == 0 and fused == NULL give the defaults
     * qkv_proj -> q/k/v_proj and gate_up_proj -> gate/up_proj.  To disable
     * fused handling, set no_fused = 1. */
    uint32_t n_fused;
    const moeq_fused_name *fused;
    int32_t no_fused;
} moeq_resolve_options;

typedef enum moeq_match_status {
    MOEQ_MATCH_QUANTIZED = 0, /* a group matched and the module is not ignored */
    MOEQ_MATCH_IGNORED = 1,   /* an ignore entry matched (ignore always wins) */
    MOEQ_MATCH_UNMATCHED = 2  /* no target matched: the module is not quantized */
} moeq_match_status;

/* Flags in moeq_resolution.flags. */
#define MOEQ_RESOLVE_ORDER_DISAGREES 0x1u /* the other precedence picks another group */
#define MOEQ_RESOLVE_FUSED 0x2u           /* resolved through fused shards */

/* Result of resolving one name.  Pointers live as long as the config. */
typedef struct moeq_resolution {
    int32_t status;                           /* moeq_match_status */
    int32_t group_index;                      /* -1 unless QUANTIZED */
    const char *group_name;                   /* NULL unless QUANTIZED */
    const char *target;                       /* the winning target text */
    int32_t format;                           /* effective format (group > top-level > inferred) */
    const moeq_quant_args *weights;           /* NULL when the group has none */
    const moeq_quant_args *input_activations;
    const moeq_quant_args *output_activations;
    int32_t ignore_index;                     /* which ignore entry matched, or -1 */
    uint32_t flags;                           /* MOEQ_RESOLVE_* */
    int32_t other_group_index;                /* group the other precedence picks (-1: none) */
} moeq_resolution;

/* Resolves one module name.  A name ending in a fused suffix (qkv_proj,
 * gate_up_proj, ...) resolves its shards, which must agree.
 * Thread-safe on a shared config.
 * @return OK (also for IGNORED/UNMATCHED), INVALID_ARG, AMBIGUOUS (fused
 *         shards disagree), LIMIT (regex match limit hit), NOMEM. */
MOEQ_API moeq_status moeq_resolve(const moeq_config *cfg, const char *name, int32_t kind,
                                  const moeq_resolve_options *opts, moeq_resolution *out,
                                  moeq_error *err);

/* Resolves a fused-experts layer: `prefix` such as "model.layers.3.mlp.experts"
 * with `num_experts` experts whose projections are named proj_names[0..2]
 * (gate, up, down; NULL means gate_proj, up_proj, down_proj).  Every expert's
 * three projections are resolved (kind EXPERT, name "<prefix>.<e>.<proj>");
 * they must all be ignored/unmatched, or all carry equal weight args, input
 * args and format.  The result is the common resolution (of expert 0's gate).
 * @return OK, INVALID_ARG, AMBIGUOUS (with the list of which experts and
 *         projections resolve to which groups), LIMIT, NOMEM. */
MOEQ_API moeq_status moeq_resolve_moe(const moeq_config *cfg, const char *prefix,
                                      uint32_t num_experts, const char *const *proj_names,
                                      const moeq_resolve_options *opts, moeq_resolution *out,
                                      moeq_error *err);

/* ------------------------------------------------------------------------ */
/* Schemes and selection                                                     */
/* ------------------------------------------------------------------------ */

/* MoE schemes.  Names are stable (plan output, bindings and tests use them). */
#define MOEQ_SCHEME_MAP(X)                                                      \
    X(UNQUANTIZED, 0, "unquantized")                                            \
    X(WNA16, 1, "wna16")                                                        \
    X(MXINT4, 2, "mxint4")                                                      \
    X(W4A16_NVFP4, 3, "w4a16_nvfp4")                                            \
    X(W4A4_NVFP4, 4, "w4a4_nvfp4")                                              \
    X(W4A16_MXFP4, 5, "w4a16_mxfp4")                                            \
    X(W8A16_FP8, 6, "w8a16_fp8")                                                \
    X(W8A8_FP8, 7, "w8a8_fp8")                                                  \
    X(W8A8_INT8, 8, "w8a8_int8")                                                \
    X(W4A8_INT8, 9, "w4a8_int8")                                                \
    X(W4A8_FP8, 10, "w4a8_fp8")                                                 \
    X(NPU_W8A8_INT8, 11, "npu_w8a8_int8")                                       \
    X(NPU_W4A8_INT8, 12, "npu_w4a8_int8")                                       \
    X(NPU_W4A16_INT4, 13, "npu_w4a16_int4")                                    \
    X(W8A16_MXFP8, 14, "w8a16_mxfp8")                                           \
    X(W8A8_MXFP8, 15, "w8a8_mxfp8")                                             \
    X(W6A16_MXFP6, 16, "w6a16_mxfp6")                                           \
    X(W6A8_MXFP6, 17, "w6a8_mxfp6")                                             \
    X(W4A8_MXFP4, 18, "w4a8_mxfp4")

typedef enum moeq_scheme_id {
#define MOEQ_X_(name, value, text) MOEQ_SCHEME_##name = value,
    MOEQ_SCHEME_MAP(MOEQ_X_)
#undef MOEQ_X_
    MOEQ_SCHEME_COUNT
} moeq_scheme_id;

/* "wna16", ...; NULL for an unknown id. Static storage. */
MOEQ_API const char *moeq_scheme_name(int32_t scheme);
/* The id for a name; -1 when unknown. */
MOEQ_API int32_t moeq_scheme_from_name(const char *name);
/* One-line description of what the scheme computes. Static storage. */
MOEQ_API const char *moeq_scheme_summary(int32_t scheme);

typedef enum moeq_platform {
    MOEQ_PLATFORM_CPU = 0, /* default: every scheme runs on the CPU */
    MOEQ_PLATFORM_NPU = 1  /* pick the npu_* layouts where SGLang does on Ascend */
} moeq_platform;

typedef struct moeq_select_options {
    int32_t platform;      /* moeq_platform */
    int32_t prefer_mxint4; /* int4 group-32 symmetric weight-only -> mxint4, not wna16 */
} moeq_select_options;

#define MOEQ_SELECT_REASON_SIZE 2048

/* The choice and its explanation. */
typedef struct moeq_selection {
    int32_t scheme; /* moeq_scheme_id, or -1 when nothing accepts */
    /* Why: the accepting predicate, then one line per scheme tried before it
     * ("wna16: rejected: input_activations present"). */
    char reason[MOEQ_SELECT_REASON_SIZE];
} moeq_selection;

/* Selects the MoE scheme for a resolution (from moeq_resolve_moe).  An
 * ignored or unmatched resolution selects "unquantized".  `layer` is only used
 * in messages and may be NULL.  Logs the decision at INFO level.
 * @return OK, INVALID_ARG, UNSUPPORTED (nothing accepts: the message names
 *         the layer, the group, the args and each scheme's rejection). */
MOEQ_API moeq_status moeq_select(const moeq_resolution *res, const char *layer,
                                 const moeq_select_options *opts, moeq_selection *out,
                                 moeq_error *err);

/* ------------------------------------------------------------------------ */
/* Plans                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct moeq_plan_options {
    const moeq_resolve_options *resolve; /* NULL: defaults */
    const moeq_select_options *select;   /* NULL: defaults */
    int32_t json;                        /* 1: JSON array, 0: aligned text table */
    int32_t threads;                     /* 0 or 1: the calling thread only; N > 1: up
                                            to N threads for long layer lists */
    /* NULL, or "ENGINE[@COMMIT][:PLATFORM[,BACKEND]]" ("sglang",
     * "sglang@eba6af385d", "vllm:sm100"): MoE rows also say what that
     * engine's compressed-tensors MoE dispatch would do (moeq_engine_judge);
     * the table gains an ENGINE column, JSON rows the keys engine,
     * engine_scheme, engine_error, engine_group and engine_differs. */
    const char *engine;
} moeq_plan_options;

/* Plans every line of `layers` (len bytes): one layer per line, either
 * "NAME" (a linear layer) or "NAME moe N [GATE,UP,DOWN]" (a fused-experts
 * prefix with N experts).  Blank lines and lines starting with '#' are
 * skipped.  Writes the table or JSON text to *out_text (NUL-terminated,
 * free with moeq_free) and the number of lines in error to *out_errors.
 * JSON: an array with one object per layer line, keys layer, kind, status,
 * group, target, format, scheme, weights, input_activations, warnings, error,
 * and for MoE lines experts (N).
 * @return OK (even when some lines are in error), INVALID_ARG (a malformed
 *         line: the message gives its number), NOMEM. */
MOEQ_API moeq_status moeq_plan(const moeq_config *cfg, const char *layers, size_t len,
                               const moeq_plan_options *opts, char **out_text,
                               uint32_t *out_errors, moeq_error *err);

/* A sink for text the library produces: called with consecutive pieces;
 * returns 0 to go on, anything else to stop (the call then fails with IO). */
typedef int32_t (*moeq_write_fn)(const char *data, size_t len, void *user_data);

/* moeq_plan, streaming: the text goes to `write` in pieces as it is made
 * (JSON line by line), so plans of any size need little memory.
 * @return as moeq_plan, plus IO when the writer stops. */
MOEQ_API moeq_status moeq_plan_write(const moeq_config *cfg, const char *layers, size_t len,
                                     const moeq_plan_options *opts, moeq_write_fn write,
                                     void *user_data, uint32_t *out_errors, moeq_error *err);

/* Frees memory the library handed out (plan text, lists). NULL is a no-op. */
MOEQ_API void moeq_free(void *p);

/* ------------------------------------------------------------------------ */
/* What inference engines would do with a MoE layer                          */
/* ------------------------------------------------------------------------ */

/* The modelled engine versions, "sglang@d315eb725", "sglang@eba6af385d",
 * "vllm@003a19308" (newest first within an engine; a spec without @COMMIT
 * takes the first).  NULL past the last.  Static storage.  docs/engines.md
 * says what each models and how its table is read. */
MOEQ_API uint32_t moeq_engine_count(void);
MOEQ_API const char *moeq_engine_name(uint32_t i);
/* "2026-08-22; read: <the source files>". Static storage. */
MOEQ_API const char *moeq_engine_summary(uint32_t i);

/* Bits of moeq_engine_verdict.differs: where the engine parts from moeq. */
#define MOEQ_ENGINE_DIFFERS_ERROR 0x1u       /* the engine raises */
#define MOEQ_ENGINE_DIFFERS_SCHEME 0x2u      /* another scheme */
#define MOEQ_ENGINE_DIFFERS_GROUP 0x4u       /* another group with other args (precedence) */
#define MOEQ_ENGINE_DIFFERS_UNQUANTIZED 0x8u /* loads unquantized what moeq quantizes */
#define MOEQ_ENGINE_DIFFERS_QUANTIZED 0x10u  /* quantizes what moeq leaves unquantized */
#define MOEQ_ENGINE_DIFFERS_ARGS 0x20u       /* builds its class with another group's args */
#define MOEQ_ENGINE_DIFFERS_MOEQ_FAILS 0x40u /* moeq rejects the layer, the engine builds it */

typedef struct moeq_engine_verdict {
    char engine[128];  /* the spec, resolved: "sglang@d315eb725:sm90,auto" */
    char scheme[128];  /* the class the engine constructs; "" when it raises */
    char error[MOEQ_ERROR_MESSAGE_SIZE]; /* "KeyError: 'Linear'"; "" when it builds */
    char branch[128];  /* the table row (upstream branch) that decided */
    int32_t group_index;      /* the group the engine resolves, -1 none */
    int32_t args_group_index; /* the group whose args the class gets, -1 none */
    uint32_t differs;         /* MOEQ_ENGINE_DIFFERS_* */
    int32_t moeq_scheme;      /* moeq's own choice (moeq_scheme_id), -1 when it fails */
} moeq_engine_verdict;

/* What `engine` ("ENGINE[@COMMIT][:PLATFORM[,BACKEND]]", as in
 * moeq_plan_options.engine) would do with the MoE layer `prefix`: the
 * class its compressed-tensors MoE dispatch constructs or the exception it
 * raises, and where that differs from moeq's choice for the same layer
 * (moeq_resolve_moe over num_experts experts named proj_names, then
 * moeq_select, with ropts/sopts; NULL = defaults).  Engines probe expert 0's
 * gate_proj/up_proj/down_proj only, whatever proj_names says.
 * Thread-safe on a shared config.
 * @return OK (also when the engine would raise: see out->error),
 *         INVALID_ARG (NULL, unknown engine/platform/backend: the message
 *         lists the modelled ones), LIMIT (a regex match limit), NOMEM. */
MOEQ_API moeq_status moeq_engine_judge(const moeq_config *cfg, const char *engine,
                                       const char *prefix, uint32_t num_experts,
                                       const char *const *proj_names,
                                       const moeq_resolve_options *ropts,
                                       const moeq_select_options *sopts,
                                       moeq_engine_verdict *out, moeq_error *err);

/* ------------------------------------------------------------------------ */
/* Inspecting a checkpoint                                                   */
/* ------------------------------------------------------------------------ */

typedef struct moeq_checkpoint moeq_checkpoint; /* see "Tensors, checkpoints" below */

typedef struct moeq_inspect_options {
    const moeq_resolve_options *resolve; /* NULL: defaults */
    const moeq_select_options *select;   /* NULL: defaults */
    int32_t json;                        /* 1: one JSON object, 0: text report */
    /* 1: account tensors by name only, skipping every dtype, shape and value
     * check (then no tensor data is read at all).  Default 0: each quantized
     * module is validated as moeq_dequantize would (headers, scales, zero
     * points, g_idx, FP8 codes), without dequantizing it. */
    int32_t names_only;
    /* NULL, or an engine spec as in moeq_plan_options.engine: MoE rows also
     * say what that engine's MoE dispatch would build or raise. */
    const char *engine;
} moeq_inspect_options;

/* Counts of one inspection. */
typedef struct moeq_inspect_summary {
    uint64_t tensors;        /* tensors in the checkpoint */
    uint64_t modules;        /* distinct module names (every expert projection counts) */
    uint64_t moe_layers;     /* fused-experts prefixes ("...mlp.experts") */
    uint64_t expert_modules; /* modules that are one projection of one expert */
    uint64_t quantized;      /* modules accounted as quantized */
    uint64_t ignored;        /* modules an ignore entry matched */
    uint64_t unmatched;      /* modules no target matched (or without a quantized weight) */
    uint64_t unconsumed;     /* tensors nothing reads */
    uint64_t missing;        /* tensors a module needs that are not there */
    uint64_t errors;         /* modules in error (resolution, selection, dtype/shape/values) */
    uint64_t warnings;       /* rows with a warning */
} moeq_inspect_summary;

/* Inspects a checkpoint against its config: finds the modules from the
 * tensor names, plans them as moeq_plan does, and accounts for every tensor.
 *
 * Modules: a tensor "A.B.param" belongs to module "A.B" (name.rpartition('.')).
 * A module "P.<e>.<proj>" whose P ends in "experts" and <e> is a decimal
 * expert id (0..1000000, no leading zeros) is one projection of one expert;
 * the experts of one P form a MoE layer, planned as one row ("P moe N", N =
 * distinct ids) with moeq_resolve_moe over ids 0..max and the projections
 * present (gate_proj/up_proj/down_proj, else w1/w3/w2), then moeq_select.
 * Any other module is LINEAR when it stores a quantization payload
 * (weight_packed, weight_scale, weight_zero_point, weight_g_idx, weight_shape,
 * weight_global_scale) or a 2-D weight and its last name component does not
 * contain "embed"; else OTHER (norms, embeddings, containers of extras).
 *
 * Accounting (the tensor sets come from the tables moeq_dequantize uses):
 * - a quantized module (resolution QUANTIZED; an OTHER module also needs a
 *   quantization payload) expects its format's weight tensors for its weight
 *   args, the activation extras of static input/output args (input_scale,
 *   + input_zero_point when asymmetric; input_global_scale for NVFP4 "local"
 *   inputs) and an optional bias;
 * - any other module expects weight (required for LINEAR and expert modules
 *   and for modules with a bias) and an optional bias;
 * - every module may also hold e_score_correction_bias, expert_bias, sinks,
 *   inv_freq, A_log, dt_bias and D (routers, attention sinks, rotary buffers,
 *   state-space layers);
 * - with a kv_cache_scheme, k_scale, v_scale and q_scale (and their zero
 *   points when asymmetric) are read on attention modules (modules with a
 *   k_proj, v_proj, qkv_proj or kv_b_proj inside, or whose last name component
 *   contains "attn"), as are legacy k_proj/v_proj output_scale tensors; a
 *   static kv_cache_scheme requires k_scale and v_scale on every attention
 *   module;
 * - every expert 0..max of a MoE layer must have all three projections
 *   (a layer whose ids run past 8 x the experts present + 64 is an error,
 *   LIMIT, and its absent experts are not enumerated).
 * A tensor no rule reads is UNCONSUMED; a required tensor that is absent is
 * MISSING; both are listed with the full tensor name and why.  Resolution and
 * selection errors, tensor sets a format cannot hold and dtype/shape/value
 * problems are module errors.
 *
 * The text report is the plan table (moeq plan's columns, one row per module
 * in natural name order, MoE layers as one row) followed by the unconsumed,
 * missing and error lists and a summary line.  JSON: an object with keys
 * "modules" (moeq_plan's row objects; MoE rows add "experts"), "unconsumed"
 * and "missing" (arrays of {tensor, module, reason}), "errors" (array of
 * {module, status, message}) and "summary" (the counts of
 * moeq_inspect_summary, same names).
 * The unconsumed, missing and error lists hold at most 10,000 entries each
 * (the first found, then sorted; the text report says how many more there
 * are); the summary counts them all.
 * `summary` may be NULL.  Thread-safe on a shared config and checkpoint.
 * Limits: a module with no tensor at all is invisible (a checkpoint that lacks
 * every tensor of a layer shows nothing missing), except expert projections,
 * whose ids 0..max are known from their siblings.
 * @return OK (also when tensors are unconsumed or missing: see the summary),
 *         INVALID_ARG, STATE (config without a matcher), LIMIT (more than
 *         2^30 tensors), NOMEM.
 * OUT *out_text: free with moeq_free. */
MOEQ_API moeq_status moeq_inspect(const moeq_config *cfg, const moeq_checkpoint *ckpt,
                                  const moeq_inspect_options *opts, char **out_text,
                                  moeq_inspect_summary *summary, moeq_error *err);

/* moeq_inspect, streaming the text to `write` in pieces.
 * @return as moeq_inspect, plus IO when the writer stops. */
MOEQ_API moeq_status moeq_inspect_write(const moeq_config *cfg, const moeq_checkpoint *ckpt,
                                        const moeq_inspect_options *opts, moeq_write_fn write,
                                        void *user_data, moeq_inspect_summary *summary,
                                        moeq_error *err);

/* ------------------------------------------------------------------------ */
/* Tensors, checkpoints (safetensors) and dequantization                     */
/* ------------------------------------------------------------------------ */

#define MOEQ_MAX_DIMS 8

/* A view of one tensor: row-major (C order), little-endian, dense. */
typedef struct moeq_tensor {
    const char *name;      /* full name ("model.layers.3.mlp.experts.7.up_proj.weight_packed") */
    int32_t dtype;         /* moeq_dtype */
    int32_t ndim;          /* 0..MOEQ_MAX_DIMS */
    int64_t shape[MOEQ_MAX_DIMS];
    const void *data;
    uint64_t nbytes;       /* product(shape) * dtype size */
    const char *file;      /* the file it lives in (checkpoint tensors), else NULL */
} moeq_tensor;

typedef struct moeq_checkpoint moeq_checkpoint;

/* Opens a safetensors checkpoint: a model directory (its
 * model.safetensors.index.json with the shards it names, else
 * model.safetensors, else every *.safetensors file in it), a single
 * .safetensors file, or an index file (*.json).  Files are memory-mapped;
 * every header is validated (length bounds, JSON, dtypes, offsets in range and
 * not overlapping, size = shape x dtype size) and errors name the file and the
 * tensor.  Tensors a shard holds beyond the index's weight_map are available
 * too (a WARN log message says how many).  Tensor data points into the mapping: it is aligned to its element
 * size in files laid out as the safetensors package (and moeq) write them, and
 * may be unaligned in others.
 * @return OK, INVALID_ARG, IO, CHECKPOINT, NOMEM, LIMIT (a file too large to
 *         map on this platform).
 * OUT *out: close with moeq_checkpoint_close.  Immutable and thread-safe. */
MOEQ_API moeq_status moeq_checkpoint_open(const char *path, moeq_checkpoint **out,
                                          moeq_error *err);
MOEQ_API void moeq_checkpoint_close(moeq_checkpoint *ckpt);

/* Number of tensors over all files. */
MOEQ_API uint64_t moeq_checkpoint_tensor_count(const moeq_checkpoint *ckpt);
/* The i-th tensor in name order.  @return OK, INVALID_ARG. */
MOEQ_API moeq_status moeq_checkpoint_tensor(const moeq_checkpoint *ckpt, uint64_t i,
                                            moeq_tensor *out);
/* Finds a tensor by exact name.  @return OK, NO_MATCH, INVALID_ARG. */
MOEQ_API moeq_status moeq_checkpoint_find(const moeq_checkpoint *ckpt, const char *name,
                                          moeq_tensor *out);

/* Writes `n` tensors to a new .safetensors file at `path`, laid out as the
 * safetensors package does: data ordered by dtype (widest first) then name,
 * so that every tensor is aligned to its element size, and the header padded
 * with spaces so the data starts 8-byte aligned.  `metadata_json` is an
 * optional JSON object of string values for "__metadata__" (NULL for none).
 * The file is written to "<path>.tmp" and renamed over `path`.
 * @return OK, INVALID_ARG, IO, NOMEM. */
MOEQ_API moeq_status moeq_safetensors_write(const char *path, const moeq_tensor *tensors,
                                            uint32_t n, const char *metadata_json,
                                            moeq_error *err);

/* Flags for moeq_dequantize (see moeq_config_dequant_flags). */
#define MOEQ_DEQUANT_LEGACY_PACKING 0x1u /* pack-quantized written by compressed-tensors < 0.18:
                                            floor(32/b) values per int32 word */
#define MOEQ_DEQUANT_MXFP4_V013 0x2u     /* mxfp4 scales written by 0.13.0 (2 too small) */

/* The flags a checkpoint written by this config's version needs. */
MOEQ_API uint32_t moeq_config_dequant_flags(const moeq_config *cfg);

/* Dequantizes one module's weight.  `weights` and `format` come from
 * moeq_resolve; `tensors` are the module's tensors (names may be full or just
 * the parameter: "weight_packed", "weight_scale", "weight_zero_point",
 * "weight_g_idx", "weight_shape", "weight_global_scale", "weight").  `module`
 * names the module in messages.  Writes the [out_features, in_features]
 * matrix in out_dtype (F32, BF16 or F16) to `out` (out_bytes large) and its
 * shape to out_shape.  With out == NULL only out_shape is computed.
 * Every tensor's presence, dtype and shape is checked first.
 * @return OK, INVALID_ARG, SHAPE, DTYPE, CHECKPOINT (a tensor is missing),
 *         UNSUPPORTED (format/args combination), NOMEM. */
MOEQ_API moeq_status moeq_dequantize(const moeq_quant_args *weights, int32_t format,
                                     uint32_t flags, const char *module,
                                     const moeq_tensor *tensors, uint32_t n_tensors,
                                     int32_t out_dtype, void *out, uint64_t out_bytes,
                                     int64_t out_shape[2], moeq_error *err);

/* ------------------------------------------------------------------------ */
/* Compressing weights (the writer side)                                     */
/* ------------------------------------------------------------------------ */

/* Tensors the library made: it owns their names and data.  Tensors keep the
 * order they were added in; names are unique within a set.  Not thread-safe
 * while it is being added to; immutable sets may be read by any thread. */
typedef struct moeq_tensor_set moeq_tensor_set;

/* @return OK, INVALID_ARG, NOMEM.  OUT *out: destroy with moeq_tensor_set_destroy. */
MOEQ_API moeq_status moeq_tensor_set_create(moeq_tensor_set **out, moeq_error *err);
MOEQ_API void moeq_tensor_set_destroy(moeq_tensor_set *set);
/* Number of tensors; 0 for NULL. */
MOEQ_API uint32_t moeq_tensor_set_count(const moeq_tensor_set *set);
/* The i-th tensor, NULL when i is out of range.  All count() tensors are one
 * array starting at moeq_tensor_set_get(set, 0), ready for
 * moeq_safetensors_write.  Pointers stay valid until the set is added to or
 * destroyed. */
MOEQ_API const moeq_tensor *moeq_tensor_set_get(const moeq_tensor_set *set, uint32_t i);
/* The tensor named `name`, or NULL. */
MOEQ_API const moeq_tensor *moeq_tensor_set_find(const moeq_tensor_set *set, const char *name);
/* Copies `tensor` (name, dtype, shape, data; `file` is not kept) into *set,
 * which is created when NULL.  On failure *set is left as it was.
 * @return OK, INVALID_ARG (NULL, a name already in the set, nbytes that
 *         disagree with shape x dtype size), NOMEM. */
MOEQ_API moeq_status moeq_tensor_set_add(moeq_tensor_set **set, const moeq_tensor *tensor,
                                         moeq_error *err);

/* Quantizes one module's weight exactly as compressed-tensors 0.18 compresses
 * it (with llm-compressor's default memoryless min/max observer, i.e.
 * round-to-nearest) and appends the tensors CT stores, named
 * "<module>.<param>", to *set (created when NULL; on failure nothing is
 * appended and a set created here is not kept).
 *
 * weight [rows, cols] (row-major, out x in) is float32 holding values of
 * weight_dtype (F32, BF16 or F16: the model's dtype, which is also the dtype
 * CT computes and stores scales in); other values are first rounded to it.
 * `weights` and `format` are what moeq_resolve gives for the module.  Stored:
 *   dense, fakequant       weight [rows, cols] in weight_dtype (args unused, may be NULL)
 *   pack-quantized         int 1..8 bits, strategy tensor/channel/group/block, sym or asym:
 *                          weight_packed I32 [rows, ceil(cols*b/32)] (dense 0.18 layout),
 *                          weight_shape I64 [2], weight_scale in weight_dtype,
 *                          weight_zero_point (asym: I32 packed along dim 0 for group and
 *                          channel, I8 otherwise), weight_g_idx I32 [cols] (actorder group)
 *   int-, naive-quantized  int 1..8 bits: weight I8; float 8 bits: weight F8_E4M3; scales
 *   float-quantized        and zero points (I8) as above, weight_g_idx (actorder group)
 *   nvfp4-pack-quantized   float 4, tensor_group, scale_dtype float8_e4m3fn: weight_packed
 *                          U8 [rows, cols/2], weight_scale F8_E4M3, weight_global_scale F32 [1]
 *   mxfp4-pack-quantized   float 4, group 32, scale_dtype uint8: weight_packed U8,
 *                          weight_scale U8 (E8M0)
 *   mxfp6-pack-quantized   float 6, group 32, scale_dtype uint8: weight_packed U8
 *                          [rows, 3*cols/4] (four E2M3 codes little-endian in three bytes),
 *                          weight_scale U8 (E8M0)
 *   mxfp8-quantized        float 8, group 32, scale_dtype uint8: weight F8_E4M3, weight_scale U8
 * Group strategies need cols % group_size == 0 (CT raises otherwise); block
 * strategies pad with zeros for the math as CT does.
 * g_idx: [cols] group index of every column for actorder group (each group
 * must hold exactly group_size columns, as GPTQ assigns them), or NULL, which
 * stores the -1s CT initialises it with (meaning column order).  Only allowed
 * with actorder group.
 * global_scale: NVFP4 only; 0 computes CT's 448*6/amax from this weight, any
 * other value (finite, > 0) is used as is, e.g. the one moeq_nvfp4_global_scale
 * gives for the union of gate_proj and up_proj (llm-compressor shares it
 * between fused shards).
 * @return OK, INVALID_ARG (NULL pointers, sizes < 1, a dtype other than F32,
 *         BF16 or F16, a NaN, infinite or out-of-range weight element (the
 *         message names the module and [row, col]), a bad g_idx or
 *         global_scale, a name already in the set), SHAPE (sizes that overflow,
 *         cols not divisible as the format needs), UNSUPPORTED (a format/args
 *         combination CT cannot compress or moeq does not write), NOMEM. */
MOEQ_API moeq_status moeq_compress(const moeq_quant_args *weights, int32_t format,
                                   const char *module, const float *weight, int64_t rows,
                                   int64_t cols, int32_t weight_dtype, const int32_t *g_idx,
                                   float global_scale, moeq_tensor_set **set, moeq_error *err);

/* The static activation tensors CT stores for a module's inputs, calibrated
 * as llm-compressor does it (static_minmax observer) over the batch x
 * [tokens, cols] of input activations (float32 holding values of x_dtype, the
 * model dtype, F32, BF16 or F16), appended to *set as "<module>.<param>":
 *   input NULL or dynamic true    nothing (x may be NULL)
 *   dynamic false, tensor          input_scale [1] in x_dtype: amax / (bit_range / 2)
 *                                  (FP8: amax/448, int8: amax/127.5), zero -> eps; plus
 *                                  input_zero_point I8 [1] when asymmetric (CT §4.3)
 *   dynamic "local", tensor_group  input_global_scale F32 [1]: 448*6/amax (NVFP4 inputs)
 * Gate and up projections see the same inputs, so they get equal tensors.
 * @return OK, INVALID_ARG (NULL, sizes, dtype, non-finite x), SHAPE,
 *         UNSUPPORTED (static strategies other than tensor), NOMEM. */
MOEQ_API moeq_status moeq_compress_input(const moeq_quant_args *input, const char *module,
                                         const float *x, int64_t tokens, int64_t cols,
                                         int32_t x_dtype, moeq_tensor_set **set,
                                         moeq_error *err);

/* CT's generate_gparam: 448*6 / max(amax, tiny) computed in `dtype` (the
 * dtype amax was observed in: F32, BF16 or F16), NaN or infinite results
 * replaced by 1.  amax is the largest |value| of the weight(s) the global
 * scale covers.  Returns 0 for any other dtype. */
MOEQ_API float moeq_nvfp4_global_scale(float amax, int32_t dtype);

/* ------------------------------------------------------------------------ */
/* Synthetic checkpoints (tests, demos, benchmarks)                          */
/* ------------------------------------------------------------------------ */

/* One config group of a synthetic checkpoint.  Pointers are borrowed for the
 * duration of the call that reads the layout. */
typedef struct moeq_synth_group {
    const char *name;                         /* "group_0"; NULL: "group_<index>" */
    uint32_t n_targets;                       /* >= 1 */
    const char *const *targets;               /* as written: names, "re:" regexes, "Linear" */
    const moeq_quant_args *weights;           /* NULL: the group quantizes no weights */
    const moeq_quant_args *input_activations; /* NULL: 16-bit inputs */
    int32_t format;                           /* moeq_format; NONE: inferred as CT 0.18 does */
} moeq_synth_group;

/* A small DeepSeek-V3-style MoE model.  Per layer l (prefix model.layers.l):
 * input_layernorm and post_attention_layernorm; with attention,
 * self_attn.{q,k,v,o}_proj; layers before first_dense_layers have a dense
 * mlp.{gate,up,down}_proj of intermediate_size, the others the router
 * mlp.gate (weight [E, H], e_score_correction_bias F32 [E] when asked),
 * routed experts mlp.experts.<e>.{gate,up,down}_proj of moe_intermediate_size
 * and, when n_shared_experts > 0, mlp.shared_experts.{gate,up,down}_proj of
 * n_shared_experts x moe_intermediate_size.  Plus model.embed_tokens,
 * model.norm and lm_head.  Every Linear module is compressed as moeq_resolve
 * resolves it under the config written from `groups` and `ignore`; ignored
 * and unmatched ones (and embeddings and norms) are stored in the model dtype.
 * Zero-initialise and set what applies; 0 means the default where one is said. */
typedef struct moeq_synth_layout {
    const char *model_type;        /* config.json model_type; NULL: "deepseek_v3" */
    int32_t num_layers;            /* num_hidden_layers, >= 1 */
    int32_t first_dense_layers;    /* first_k_dense_replace, 0..num_layers */
    int32_t num_experts;           /* routed experts per MoE layer, >= 1 */
    int32_t top_k;                 /* num_experts_per_tok, 1..num_experts */
    int32_t hidden_size;           /* H, >= 1 */
    int32_t moe_intermediate_size; /* per expert, >= 1 */
    int32_t intermediate_size;     /* dense MLP width; 0: 4 x moe_intermediate_size */
    int32_t n_shared_experts;      /* 0: none */
    int32_t scoring;               /* moeq_scoring: scoring_func "softmax" or "sigmoid" */
    int32_t norm_topk_prob;        /* 0 or 1 */
    int32_t n_group, topk_group;   /* grouped top-k; 0 and 0: none (written as 1 and 1) */
    float routed_scaling_factor;   /* > 0, finite; 0: 1.0 */
    int32_t correction_bias;       /* 1: mlp.gate.e_score_correction_bias (topk_method noaux_tc) */
    int32_t num_attention_heads;   /* 0: no attention projections */
    int32_t num_key_value_heads;   /* 0: num_attention_heads */
    int32_t vocab_size;            /* 0: 512 */
    int32_t dtype;                 /* model dtype BF16 (0 means BF16), F16 or F32 */
    uint64_t seed;                 /* everything random derives from it and the tensor name */
    int32_t shards;                /* 0 or 1: model.safetensors; N > 1: N shard files + index */
    int32_t calibration_tokens;    /* rows of the calibration batches; 0: 64 */
    float weight_std;              /* std of the random weights; 0: 0.02 */
    uint32_t n_groups;             /* config_groups, >= 1 */
    const moeq_synth_group *groups;
    uint32_t n_ignore;
    const char *const *ignore;     /* as written: names and "re:" regexes */
} moeq_synth_layout;

/* Writes a synthetic compressed-tensors checkpoint into `dir` (created when
 * missing; its parent must exist): config.json (model fields plus the
 * quantization_config exactly as compressed-tensors 0.18.0 writes it: sorted
 * keys, indent 2, full QuantizationArgs, per-group formats, top-level format
 * or "mixed-precision", status "compressed") and model.safetensors, or
 * model-0000k-of-0000N.safetensors and model.safetensors.index.json.  Weights
 * are seeded random values of a realistic scale (deterministic: the same
 * layout gives the same bytes on every platform), rounded to the model dtype,
 * then compressed with moeq_compress; fused shards (gate/up, q/k/v) share
 * NVFP4 global scales and actorder g_idx as llm-compressor makes them.
 * Static input scales come from seeded calibration batches through
 * moeq_compress_input (down_proj sees act(gate) * up of its own expert).
 * Files of the other layout (single file vs shards) left in `dir` by an
 * earlier write are removed, and so is an old config.json before the shards
 * are written: config.json is written last, so a failed write never leaves a
 * config next to tensors it does not describe.
 * Everything is checked before the directory is touched: the layout, the
 * config (parsed back strictly), every module's resolution, and one
 * moeq_compress per group and shape.
 * Example:
 *   moeq_synth_layout L;
 *   moeq_synth_preset("nvfp4-w4a4", &L, &err);
 *   L.num_experts = 64;
 *   L.shards = 2;
 *   moeq_synth_write(&L, "/tmp/nvfp4-64e", &err);
 * @return OK, INVALID_ARG (the layout: the message names the field, e.g.
 *         "layout.groups[1].targets[0]"; a group that matches no module),
 *         SCHEMA/REGEX (a group the config parser rejects), UNSUPPORTED or
 *         SHAPE (a module moeq_compress cannot write as its group says: the
 *         message names it), IO (the directory or a file), NOMEM. */
MOEQ_API moeq_status moeq_synth_write(const moeq_synth_layout *layout, const char *dir,
                                      moeq_error *err);

/* The values moeq_synth_write started from for tensor `name` of the layout's
 * model, e.g. "model.layers.1.mlp.experts.3.up_proj.weight" (before
 * compression), a norm weight or "...mlp.gate.e_score_correction_bias":
 * rounded to the model dtype (the bias is F32).  For "<module>.input_calibration"
 * it is the calibration batch [calibration_tokens, in] the module's static
 * input tensors were computed from (the same for gate and up; down_proj's is
 * silu(x Wg^T) * (x Wu^T) of its own MLP).  Writes the shape to out_shape
 * (1-D tensors: [n, 1]) and, when out is not NULL, the values (out_count
 * floats at least).
 * @return OK, INVALID_ARG (layout, NULL, out_count too small), NO_MATCH (no
 *         such tensor in this layout), NOMEM. */
MOEQ_API moeq_status moeq_synth_original(const moeq_synth_layout *layout, const char *name,
                                         float *out, uint64_t out_count, int64_t out_shape[2],
                                         moeq_error *err);

/* Fills *out with a named layout (pointers into static storage): "glm-mini",
 * "wna16-int4-g128", "w8a8-fp8-block", "nvfp4-w4a4", "unquantized", ... (see
 * moeq_synth_preset_name).  Adjust fields (seed, shards, sizes) before writing.
 * @return OK, INVALID_ARG (NULL), NO_MATCH (unknown name: the message lists them). */
MOEQ_API moeq_status moeq_synth_preset(const char *name, moeq_synth_layout *out,
                                       moeq_error *err);
/* Name and one-line description of preset i; NULL past the last one. Static storage. */
MOEQ_API const char *moeq_synth_preset_name(uint32_t i);
MOEQ_API const char *moeq_synth_preset_summary(uint32_t i);

/* ------------------------------------------------------------------------ */
/* Routing                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum moeq_scoring {
    MOEQ_SCORING_SOFTMAX = 0, /* softmax over all experts, then top-k */
    MOEQ_SCORING_SIGMOID = 1  /* sigmoid per expert (DeepSeek-V3 style), then top-k */
} moeq_scoring;

typedef struct moeq_route_config {
    int32_t num_experts;      /* E: logits per token, >= 1 */
    int32_t top_k;            /* experts per token, 1..E */
    int32_t scoring;          /* moeq_scoring */
    int32_t renormalize;      /* 0 or 1: the k weights are divided by (their sum + 1e-20) */
    /* Grouped top-k (DeepSeek-V3): experts form num_expert_group contiguous
     * equal groups; a group scores as its best expert (no bias) or as the sum
     * of its best two (with a correction bias, so groups then need >= 2
     * experts); only the topk_group best groups compete, and they must hold
     * at least top_k experts.  0 and 0 disable grouping. */
    int32_t num_expert_group;
    int32_t topk_group;
    /* [E] finite values added to the scores to choose experts and groups,
     * never to the returned weights (e_score_correction_bias); NULL for none. */
    const float *correction_bias;
    /* Multiplies the returned weights (after renormalization, whether or not
     * it is on); finite and >= 0; 0 means 1. */
    float routed_scaling_factor;
} moeq_route_config;

/* Routes `tokens` rows of router logits ([tokens, E] float32, row-major):
 * writes each token's expert ids (int32, [tokens, top_k], best first) and
 * weights (float32, [tokens, top_k]).  Per token, in float32:
 *   scores  = softmax(logits) (max subtracted first) or 1 / (1 + exp(-logits));
 *   choice  = scores + correction_bias (or scores without a bias);
 *   groups (if any): keep the topk_group best groups by their choice values;
 *   ids     = the top_k experts of the kept groups by choice, best first;
 *             equal values go to the lower id (torch leaves that order open);
 *   weights = scores[ids] (never the biased values), renormalized and scaled.
 * logits, topk_ids and topk_weights may be NULL only when tokens == 0, which
 * checks cfg and writes nothing.  NaN or infinite logits are an error naming
 * the token and expert; the rows of earlier tokens have then been written and
 * later rows are untouched.
 * Thread-safe; allocates nothing when E <= 4096 and num_expert_group <= 64
 * (one scratch block per call otherwise).
 * @return OK, INVALID_ARG (NULL pointers, sizes, top_k > E, unknown scoring,
 *         renormalize not 0/1, groups that do not divide E,
 *         topk_group * (E / groups) < top_k, non-finite values), NOMEM. */
MOEQ_API moeq_status moeq_route(const moeq_route_config *cfg, const float *logits,
                                int64_t tokens, int32_t *topk_ids, float *topk_weights,
                                moeq_error *err);

/* ------------------------------------------------------------------------ */
/* MoE layers: create, load, finalize, apply                                 */
/* ------------------------------------------------------------------------ */

typedef struct moeq_moe moeq_moe;
typedef struct moeq_ctx moeq_ctx;

typedef enum moeq_activation {
    MOEQ_ACT_SILU = 0,      /* silu(gate) * up */
    MOEQ_ACT_GELU = 1,      /* gelu(gate) * up (erf form) */
    MOEQ_ACT_GELU_TANH = 2, /* gelu(gate) * up (tanh approximation) */
    MOEQ_ACT_SWIGLUOAI = 3, /* GPT-OSS: g = min(gate, L), u = clamp(up, -L, L),
                               g * sigmoid(alpha * g) * (u + 1) */
    MOEQ_ACT_RELU2 = 4      /* relu(x)^2 of non-gated experts (Nemotron-H): down(relu2(up x));
                               a layer takes it with moeq_moe_config.non_gated = 1 */
} moeq_activation;

/* Everything a layer needs to know when it is created.  Zero-initialise and
 * set what applies; pointers are copied, so they need not outlive the call. */
typedef struct moeq_moe_config {
    int32_t scheme;                           /* moeq_scheme_id, from moeq_select */
    const moeq_quant_args *weights;           /* from moeq_resolve_moe; NULL for unquantized */
    const moeq_quant_args *input_activations; /* NULL when inputs stay 16-bit */
    int32_t format;                           /* effective format of the resolution */
    uint32_t dequant_flags;                   /* moeq_config_dequant_flags() */
    const char *prefix;        /* "model.layers.3.mlp.experts": checked by the loader, used
                                  in messages; NULL accepts any prefix */
    const char *const *proj_names; /* gate, up, down; NULL: gate_proj, up_proj, down_proj */
    int32_t num_experts;       /* global routed experts (ids in topk_ids are global) */
    int32_t num_local_experts; /* experts held by this layer; 0 means num_experts */
    /* [num_experts]: global id -> local id (0..num_local_experts-1) or -1 for
     * experts another rank holds.  NULL: local id = global id - first_expert. */
    const int32_t *expert_map;
    int32_t first_expert;      /* with expert_map == NULL: first global id held here */
    int32_t hidden_size;       /* H */
    int32_t intermediate_size; /* I: per partition */
    int32_t activation;        /* moeq_activation */
    float swiglu_alpha;        /* SWIGLUOAI alpha (0 means 1.702) */
    float swiglu_limit;        /* SWIGLUOAI limit, or for SILU the swiglu_limit clamp:
                                  silu(min(gate, L)) * clamp(up, -L, L); 0 = none */
    int32_t params_dtype;      /* BF16 (default when 0), F16 or F32: float parameters */
    int32_t has_bias;          /* 1: w13_bias [E, 2I] and w2_bias [E, H] */
    float routed_scaling_factor;          /* multiplies the combined output; 0 means 1 */
    int32_t apply_router_weight_on_input; /* scale x by the weight before the experts
                                             (needs top_k == 1) instead of after */
    /* 1: non-gated experts, down(act(up x)) (Nemotron-H: relu2); the
     * manifest then has no gate: w13_* hold up alone ([E, I, ...], per-shard
     * values [E, 1]) and gate tensors are refused.  Activation silu, gelu,
     * gelu_tanh or relu2; swiglu_limit must be 0.  0 (the zeroed default):
     * gated, down(act(gate x) * up x). */
    int32_t non_gated;
} moeq_moe_config;

/* Starts a layer config from a resolution and the selection made for it:
 * zeroes *out, then sets scheme, weights, input_activations, format and
 * dequant_flags (of `cfg`, the config `res` came from; the flags decide how
 * older checkpoints' packing is read).  Set the dimensions and options next.
 * `res` must outlive the moeq_moe_create call (out points at its args).
 * @return OK, INVALID_ARG (a NULL argument). */
MOEQ_API moeq_status moeq_moe_config_init(moeq_moe_config *out, const moeq_config *cfg,
                                          const moeq_resolution *res,
                                          const moeq_selection *sel, moeq_error *err);

/* Creates a layer and its parameter manifest (the checkpoint still has to be
 * loaded).  Validates the config against the scheme (divisibility of the
 * dimensions by group, block and pack sizes, args the scheme cannot run).
 * @return OK, INVALID_ARG, UNSUPPORTED, SHAPE, NOMEM.
 * OUT *out: destroy with moeq_moe_destroy. */
MOEQ_API moeq_status moeq_moe_create(const moeq_moe_config *cfg, moeq_moe **out,
                                     moeq_error *err);
MOEQ_API void moeq_moe_destroy(moeq_moe *layer);

/* The scheme the layer runs. */
MOEQ_API int32_t moeq_moe_scheme(const moeq_moe *layer);

/* How the loader places checkpoint tensors into a parameter. */
typedef enum moeq_param_layout {
    /* w13: gate fills the first half of the shard dimension, up the second;
     * w2: the whole expert slice. */
    MOEQ_LAYOUT_SHARDED = 0,
    /* One value per shard: [E, 2] (column 0 gate, column 1 up) or [E] for w2. */
    MOEQ_LAYOUT_PER_SHARD = 1,
    /* gate and up write the same slot and must agree (input_scale,
     * weight_shape, g_idx). */
    MOEQ_LAYOUT_SHARED = 2,
    /* Filled by finalize, never loaded (offsets of the NPU layouts, ...). */
    MOEQ_LAYOUT_DERIVED = 3
} moeq_param_layout;

/* One parameter of the manifest.  Engines may read and write `data`
 * directly before finalize (it is `nbytes` long, C order, little-endian). */
typedef struct moeq_param {
    const char *name;        /* "w13_weight_packed", "w2_weight_scale", ... */
    int32_t dtype;           /* moeq_dtype */
    int32_t ndim;
    int64_t shape[4];        /* [E_local, ...] */
    void *data;              /* NULL after finalize released it */
    uint64_t nbytes;
    const char *ckpt_suffix; /* checkpoint parameter it is loaded from ("weight_packed") */
    int32_t layout;          /* moeq_param_layout */
    int32_t quant_method;    /* moeq_strategy of the scale it holds, -1 for none */
    int32_t is_transposed;   /* 2-D checkpoint tensors are transposed when loaded */
    int32_t required;        /* 1: finalize refuses to run until every expert has it */
} moeq_param;

MOEQ_API uint32_t moeq_moe_param_count(const moeq_moe *layer);
/* @return OK, INVALID_ARG (i out of range). */
MOEQ_API moeq_status moeq_moe_param(const moeq_moe *layer, uint32_t i, moeq_param *out);
/* @return OK, NO_MATCH, INVALID_ARG. */
MOEQ_API moeq_status moeq_moe_find_param(const moeq_moe *layer, const char *name,
                                         moeq_param *out);

/* What moeq_moe_load did with a tensor. */
typedef enum moeq_load_outcome {
    MOEQ_LOAD_LOADED = 0,  /* copied into its parameter */
    MOEQ_LOAD_SKIPPED = 1  /* an expert this layer does not hold */
} moeq_load_outcome;

/* Loads one checkpoint tensor named "<prefix>.<e>.<proj>.<param>", e.g.
 * "model.layers.3.mlp.experts.7.up_proj.weight_scale": maps it to its
 * parameter, expert and shard, converts float dtypes to the parameter's, and
 * copies it in (transposed where the parameter says so).  Before finalize only.
 * @return OK, INVALID_ARG, NO_MATCH (a name no parameter takes), DTYPE, SHAPE,
 *         CHECKPOINT (a duplicate, values gate and up must share that differ,
 *         a weight_shape that disagrees with the layer), STATE. */
MOEQ_API moeq_status moeq_moe_load(moeq_moe *layer, const moeq_tensor *tensor,
                                   int32_t *outcome, moeq_error *err);

/* The checkpoint tensors still missing, one full name per line ("" when
 * none); *out_count gets their number.  *out_list: free with moeq_free.
 * @return OK, INVALID_ARG, NOMEM. */
MOEQ_API moeq_status moeq_moe_missing(const moeq_moe *layer, char **out_list,
                                      uint32_t *out_count, moeq_error *err);

/* Progress reports for long loads: called after each tensor with the count
 * done and the total; return 0 to go on, anything else to stop. */
typedef int32_t (*moeq_progress_fn)(uint64_t done, uint64_t total, void *user_data);

/* Loads every tensor of the checkpoint named "<prefix>.<e>.<proj>.<param>"
 * (prefix NULL: the layer's own) through moeq_moe_load; experts this layer
 * does not hold are skipped.  Fails on the first tensor the layer cannot
 * take, and when anything required is still missing at the end (the message
 * lists the first ones).  *out_loaded / *out_skipped (either may be NULL)
 * get the tensors loaded and skipped.
 * @return OK, INVALID_ARG, CHECKPOINT, and the statuses of moeq_moe_load;
 *         STATE when the callback stopped it or the layer is finalized. */
MOEQ_API moeq_status moeq_moe_load_checkpoint(moeq_moe *layer, const moeq_checkpoint *ckpt,
                                              const char *prefix, moeq_progress_fn progress,
                                              void *user_data, uint64_t *out_loaded,
                                              uint64_t *out_skipped, moeq_error *err);

/* process_weights_after_loading: checks that nothing required is missing,
 * validates values (finite scales, g_idx in range, ...), and converts the
 * loaded parameters into the layout the kernels use.  Afterwards the layer
 * is immutable and may be shared by threads; parameter data is released.
 * @return OK, CHECKPOINT (missing tensors: the message lists them; bad
 *         values), STATE (already finalized), NOMEM. */
MOEQ_API moeq_status moeq_moe_finalize(moeq_moe *layer, moeq_error *err);

/* [load] moeq_moe_load_checkpoint and moeq_moe_finalize in one step, the
 * fast way: the layer reads weights and scales in place from the mapped
 * checkpoint instead of copying them into its parameters first (where the
 * checkpoint's dtype is the parameter's), and finalize packs them straight
 * into the kernels' layout on `threads` threads (0 or 1: the caller alone);
 * then the checkpoint pages it read are given back (they stay in the page
 * cache).  The checkpoint only has to stay open during the call.  The result
 * is bit for bit what the two-step path gives.  A layer some of whose
 * projections do not pack (zero points, actorder, ...) is loaded again the
 * two-step way.  On failure the layer is as created (nothing loaded).
 * @return as moeq_moe_load_checkpoint and moeq_moe_finalize; INVALID_ARG for
 *         threads outside 0..1024. */
MOEQ_API moeq_status moeq_moe_load_finalize(moeq_moe *layer, const moeq_checkpoint *ckpt,
                                            const char *prefix, int32_t threads,
                                            moeq_progress_fn progress, void *user_data,
                                            moeq_error *err);

/* Per-thread scratch space and thread pool for moeq_moe_apply. */
typedef struct moeq_ctx_options {
    int32_t threads;   /* worker threads for apply; 0 or 1: the calling thread only */
    int32_t force_ref; /* 1: scalar reference kernels only (also: env MOEQ_FORCE_REF=1) */
} moeq_ctx_options;

/* The fast kernels are the best table this CPU runs ("avx512", "avx2" or
 * "portable"); env MOEQ_KERNELS=portable|avx2|avx512 caps the choice.
 * Whether FP8 activations and weight-only layers' bf16 inputs take the
 * bfloat16 path is fixed here too: by default where the CPU has a fast
 * AVX512_BF16 (docs/kernels.md), env MOEQ_BF16_PATH=auto|on|off.
 * @return OK, INVALID_ARG (also: MOEQ_KERNELS or MOEQ_BF16_PATH names no
 * choice), NOMEM.
 * OUT *out: destroy with moeq_ctx_destroy. */
MOEQ_API moeq_status moeq_ctx_create(const moeq_ctx_options *opts, moeq_ctx **out,
                                     moeq_error *err);
MOEQ_API void moeq_ctx_destroy(moeq_ctx *ctx);
/* The kernels apply runs in this context: "reference" under force_ref, else
 * the fast table's name ("avx512", "avx2" or "portable"); NULL for NULL. */
MOEQ_API const char *moeq_ctx_kernels(const moeq_ctx *ctx);

/* Runs the layer on `tokens` rows of x ([tokens, H], x_dtype BF16, F16 or
 * F32) routed to topk_ids/topk_weights ([tokens, top_k], global expert ids;
 * -1 or an expert another rank holds contributes nothing), writing
 * out ([tokens, H], out_dtype BF16, F16 or F32; it may alias x only when the
 * dtypes match).  Activations are quantized exactly as the scheme defines
 * (dynamic per-token int8/FP8, per-group FP8, NVFP4 local, static scales).
 * Concurrent calls on one finalized layer with different contexts are safe,
 * and results are bit-identical whatever the context's thread count.
 * Non-finite inputs: a token whose row of x holds a NaN or an infinity (or
 * whose activations overflow to one) gets an all-NaN row of out; it is left
 * out of per-call activation scales, so the other tokens come out as they
 * would were its row zeros.  Results can differ in the last bits between
 * calls that batch a token with different tokens (the kernels are chosen by
 * rows per expert); moeq_moe_apply_reference is batch-invariant.
 * @return OK, INVALID_ARG (NULL, tokens < 0, more than 2^31-1 token-expert
 *         pairs, ids out of range, non-finite weights, top_k > 1 with
 *         apply_router_weight_on_input), DTYPE, STATE (not finalized), NOMEM. */
MOEQ_API moeq_status moeq_moe_apply(const moeq_moe *layer, moeq_ctx *ctx, int32_t x_dtype,
                                    const void *x, int64_t tokens, int32_t top_k,
                                    const int32_t *topk_ids, const float *topk_weights,
                                    int32_t out_dtype, void *out, moeq_error *err);

/* The same forward computed the slow, plain way, for checks: weights
 * dequantized to float, activations quantized exactly as apply does (the
 * quantized values are the same numbers), every sum in float64.  out is
 * float64 [tokens, H].  Arguments as moeq_moe_apply.
 * @return as moeq_moe_apply. */
MOEQ_API moeq_status moeq_moe_apply_reference(const moeq_moe *layer, int32_t x_dtype,
                                              const void *x, int64_t tokens, int32_t top_k,
                                              const int32_t *topk_ids, const float *topk_weights,
                                              double *out, moeq_error *err);

/* ------------------------------------------------------------------------ */
/* Linear layers: create, load, finalize, apply                              */
/* ------------------------------------------------------------------------ */

/* A quantized (or plain 16/32-bit) linear layer: y = x W^T (+ bias), for the
 * attention projections, shared experts, dense MLPs and lm_head of a
 * checkpoint.  The lifecycle and guarantees are moeq_moe's, and so is the
 * machinery: the scheme moeq_select picks for the module's resolution
 * (moeq_resolve), its parameter families and finalize, and the same kernels,
 * a linear layer being the down projection of one expert.  A fused module
 * (qkv_proj, gate_up_proj) stacks the rows of several checkpoint modules
 * ("shards"), each keeping its own scales; its output columns are the shards'
 * in order. */
typedef struct moeq_linear moeq_linear;

typedef struct moeq_linear_config {
    int32_t scheme;                           /* moeq_scheme_id, from moeq_select */
    const moeq_quant_args *weights;           /* from moeq_resolve; NULL for unquantized */
    const moeq_quant_args *input_activations; /* NULL when inputs stay 16-bit */
    int32_t format;                           /* effective format of the resolution */
    uint32_t dequant_flags;                   /* moeq_config_dequant_flags() */
    /* The module as engines name it: "model.layers.0.self_attn.o_proj", or a
     * fused one, "model.layers.0.self_attn.qkv_proj".  Required. */
    const char *name;
    int32_t in_features;
    /* Rows of W: an unfused module's own, a fused one's summed over shards. */
    int32_t out_features;
    int32_t has_bias;     /* 1: each shard has a bias [its out_features] */
    int32_t params_dtype; /* BF16 (default when 0), F16 or F32: float parameters */
    /* Fused modules: num_shards > 0 checkpoint modules, siblings of `name`
     * (shard_names {"q_proj", "k_proj", "v_proj"} for
     * "model.layers.0.self_attn.qkv_proj" load
     * "model.layers.0.self_attn.q_proj.*", ...), with their rows
     * (shard_out_features, summing to out_features).  0: the module itself. */
    int32_t num_shards;
    const char *const *shard_names;
    const int32_t *shard_out_features;
} moeq_linear_config;

/* Starts a linear config from the module's resolution (moeq_resolve) and the
 * selection made for it (moeq_select): zeroes *out, then sets scheme,
 * weights, input_activations, format and dequant_flags.  `res` must outlive
 * the moeq_linear_create call.  @return OK, INVALID_ARG (a NULL argument). */
MOEQ_API moeq_status moeq_linear_config_init(moeq_linear_config *out, const moeq_config *cfg,
                                             const moeq_resolution *res,
                                             const moeq_selection *sel, moeq_error *err);

/* Creates a layer and its parameter manifest, validating the config against
 * the scheme as moeq_moe_create does (group, block and pack sizes must divide
 * the features; args the scheme cannot run are refused with its reason).
 * @return OK, INVALID_ARG, UNSUPPORTED, SHAPE, NOMEM.
 * OUT *out: destroy with moeq_linear_destroy (NULL: no-op). */
MOEQ_API moeq_status moeq_linear_create(const moeq_linear_config *cfg, moeq_linear **out,
                                        moeq_error *err);
MOEQ_API void moeq_linear_destroy(moeq_linear *layer);

/* The scheme the layer runs; -1 for NULL. */
MOEQ_API int32_t moeq_linear_scheme(const moeq_linear *layer);

/* The parameter manifest in the names engines give a linear module's
 * parameters ("weight_packed", "weight_scale", "input_scale", "bias", ...;
 * a fused module's prefixed by shard: "q_proj.weight_scale").  Shapes are
 * the module's (no expert dimension); the strings live as long as the layer.
 * @return OK, INVALID_ARG (i out of range); find_param: NO_MATCH too. */
MOEQ_API uint32_t moeq_linear_param_count(const moeq_linear *layer);
MOEQ_API moeq_status moeq_linear_param(const moeq_linear *layer, uint32_t i, moeq_param *out);
MOEQ_API moeq_status moeq_linear_find_param(const moeq_linear *layer, const char *name,
                                            moeq_param *out);

/* Loads one checkpoint tensor "<module>.<param>" (the layer's module, or one
 * of its shards' for a fused layer), converting float dtypes.  Before
 * finalize only.  *outcome (may be NULL): MOEQ_LOAD_LOADED.
 * @return OK, INVALID_ARG, NO_MATCH (another module, or a parameter the
 *         scheme has none for: the message lists what it loads), DTYPE,
 *         SHAPE, CHECKPOINT (a duplicate, a weight_shape that disagrees),
 *         STATE. */
MOEQ_API moeq_status moeq_linear_load(moeq_linear *layer, const moeq_tensor *tensor,
                                      int32_t *outcome, moeq_error *err);

/* The checkpoint tensors still missing, one full name per line ("" when
 * none).  *out_list: free with moeq_free.  @return OK, INVALID_ARG, NOMEM. */
MOEQ_API moeq_status moeq_linear_missing(const moeq_linear *layer, char **out_list,
                                         uint32_t *out_count, moeq_error *err);

/* Loads every tensor of the module (of each shard, when fused) from an open
 * checkpoint through moeq_linear_load, then checks that nothing required is
 * missing (the message names the first tensors that are).  *out_loaded (may
 * be NULL) gets the count.
 * @return OK, INVALID_ARG, CHECKPOINT, and the statuses of moeq_linear_load. */
MOEQ_API moeq_status moeq_linear_load_checkpoint(moeq_linear *layer, const moeq_checkpoint *ckpt,
                                                 uint64_t *out_loaded, moeq_error *err);

/* process_weights_after_loading, as moeq_moe_finalize: missing tensors,
 * value checks (finite positive scales, g_idx in range, ...), kernel layout.
 * Afterwards the layer is immutable and may be shared by threads.
 * @return OK, CHECKPOINT, STATE (already finalized), NOMEM. */
MOEQ_API moeq_status moeq_linear_finalize(moeq_linear *layer, moeq_error *err);

/* y = x W^T (+ bias) for `tokens` rows of x ([tokens, in_features], x_dtype
 * BF16, F16 or F32) into out ([tokens, out_features], BF16, F16 or F32; it
 * must not overlap x).  Input activations are quantized exactly as the
 * scheme defines (dynamic per-token int8 with amax/127, FP8, NVFP4, MX,
 * static scales), over output rows on the context's threads.  Concurrent
 * calls on one finalized layer with different contexts are safe; results are
 * bit-identical whatever the thread count.  A row of x holding a NaN or an
 * infinity (or whose output overflows) gives a row of NaN and stays out of
 * the per-call scales of the other rows.
 * @return OK, INVALID_ARG (NULL, tokens outside 0..2^31-1, out overlapping
 *         x), DTYPE, STATE (not finalized), NOMEM. */
MOEQ_API moeq_status moeq_linear_apply(const moeq_linear *layer, moeq_ctx *ctx, int32_t x_dtype,
                                       const void *x, int64_t tokens, int32_t out_dtype,
                                       void *out, moeq_error *err);

/* The same forward the plain way, for checks: weights dequantized to float,
 * activations quantized exactly as apply does, sums in float64; out float64
 * [tokens, out_features].  @return as moeq_linear_apply. */
MOEQ_API moeq_status moeq_linear_apply_reference(const moeq_linear *layer, int32_t x_dtype,
                                                 const void *x, int64_t tokens, double *out,
                                                 moeq_error *err);

/* ------------------------------------------------------------------------ */
/* Model families                                                            */
/* ------------------------------------------------------------------------ */

/* How a model's MoE blocks route and activate, as its family's reference
 * modeling code (transformers) does it.  config.json often leaves these out
 * (GLM4-MoE and DeepSeek-V3 configs have no scoring_func, yet both score with
 * sigmoid), so moeq keeps one table of families, keyed by model_type (then by
 * architectures[0]), that says what the code does when the config is silent;
 * every key the config does carry overrides the table.  A model_type the
 * table does not know takes moeq's defaults (softmax, renormalized, SiLU,
 * gate/up/down) and `defaults` says so: callers should warn with it.
 * Strings are fixed arrays (no ownership); the struct is plain data. */
typedef struct moeq_model_moe {
    char family[32];     /* the table row used ("glm4_moe"); "" when none matched */
    char model_type[32]; /* config.json model_type as written; "" when absent */
    int32_t known;       /* 1: a table row matched */
    /* Dimensions, from the family's config keys; 0 when the config lacks one. */
    int32_t num_experts;       /* routed experts (num_experts, n_routed_experts, ...) */
    int32_t top_k;             /* experts per token */
    int32_t hidden_size;
    int32_t intermediate_size; /* per routed expert */
    /* Routing (moeq_model_moe_route fills a moeq_route_config from these). */
    int32_t scoring;           /* moeq_scoring */
    int32_t renormalize;       /* 0 or 1 */
    int32_t num_expert_group;  /* grouped top-k; 0 when off */
    int32_t topk_group;
    float routed_scaling_factor;          /* 1 when the family does not scale */
    int32_t apply_router_weight_on_input; /* Llama 4: x * weight before the experts */
    /* Experts. */
    int32_t activation;        /* moeq_activation */
    float swiglu_alpha;        /* MOEQ_ACT_SWIGLUOAI: 1.702 (GPT-OSS) */
    float swiglu_limit;        /* MOEQ_ACT_SWIGLUOAI: 7.0 (GPT-OSS); 0 none */
    int32_t gated;             /* 1: down(act(gate x) * up x); 0: down(act(up x)) */
    int32_t expert_bias;       /* 1: every expert projection has a bias */
    int32_t n_shared_experts;  /* shared experts beside the routed ones (not run by moeq_moe) */
    int32_t shared_expert_gate;/* 1: a sigmoid gate scales the shared experts' output */
    int32_t params_dtype;      /* dtype or torch_dtype: BF16 (default), F16 or F32 */
    /* Module names under a decoder layer (prefix "model.layers.<n>."). */
    char moe_block[32];        /* "mlp", "block_sparse_moe", "feed_forward", "mixer" */
    char router[32];           /* router module under the block: "gate", "router" */
    int32_t router_bias;       /* 1: the router has a bias */
    char correction_bias[64];  /* tensor under the block ("gate.e_score_correction_bias");
                                  used when present; "" when the family has none */
    char experts[32];          /* container of the routed experts: "experts" */
    char proj[3][16];          /* gate, up, down: gate_proj/up_proj/down_proj or w1/w3/w2 */
    /* What came from the table or moeq's defaults rather than the config:
     * "scoring=sigmoid (glm4_moe), renormalize=1 (glm4_moe)"; "" when the
     * config said everything. */
    char defaults[512];
    int32_t unknown_defaults;  /* 1: an unknown family took moeq's defaults: warn */
} moeq_model_moe;

/* Reads cfg's model fields (config.json) through the family table.
 * @return OK, INVALID_ARG (NULL; a config value of the wrong kind or range,
 *         the message names the key). */
MOEQ_API moeq_status moeq_model_moe_get(const moeq_config *cfg, moeq_model_moe *out,
                                        moeq_error *err);
/* The table row for a model_type alone (what its code does with a silent
 * config; dimensions 0).  @return OK, NO_MATCH (unknown: the message lists
 * the families), INVALID_ARG. */
MOEQ_API moeq_status moeq_model_family(const char *model_type, moeq_model_moe *out,
                                       moeq_error *err);
/* Family i's model_type and the modeling file its row follows; NULL past the last. */
MOEQ_API const char *moeq_model_family_name(uint32_t i);
MOEQ_API const char *moeq_model_family_source(uint32_t i);
/* Zeroes *out and fills num_experts, top_k, scoring, renormalize, groups
 * and routed_scaling_factor from m (correction_bias stays NULL). */
MOEQ_API void moeq_model_moe_route(const moeq_model_moe *m, moeq_route_config *out);
/* "sigmoid, top-8 of 128, renormalized, 1 of 1 groups, scaled 2.5, correction bias"
 * style one-line summary of the routing into buf (n bytes); returns the length
 * it needed, as snprintf. */
MOEQ_API size_t moeq_model_moe_summary(const moeq_model_moe *m, char *buf, size_t n);

/* ------------------------------------------------------------------------ */
/* [load] A whole checkpoint's MoE and linear layers (src/load/)            */
/* ------------------------------------------------------------------------ */

/* Every MoE layer and quantized linear module of a checkpoint directory,
 * loaded and finalized (docs/loading.md). */
typedef struct moeq_model moeq_model;

/* One MoE layer of a checkpoint as moeq_model_load finds and creates it. */
typedef struct moeq_model_layer_info {
    char prefix[256];      /* "model.layers.3.mlp.experts" */
    int32_t experts;       /* routed experts it holds (config.json, or the retained ones
                              moe_sparsity_config names; else the highest id + 1 found) */
    int32_t found_experts; /* the highest expert id in the checkpoint + 1 */
    int32_t has_bias;      /* 1: its expert projections have biases */
    const char *proj[3];   /* gate, up, down as the tensors name them (static storage: the
                              gate_proj/up_proj/down_proj or w1/w3/w2 names) */
    uint64_t tensors;      /* checkpoint tensors under "<prefix>." */
    uint64_t bytes;        /* their bytes in the checkpoint */
} moeq_model_layer_info;

/* The MoE layers of an open checkpoint: the prefixes of tensors named
 * "<prefix>.<expert>.<proj>.<param>" (proj: gate_proj/up_proj/down_proj or
 * w1/w3/w2), in layer order (numbers compared as numbers).  *out: an array of
 * *count entries, free with moeq_free (NULL when none).
 * @return OK, INVALID_ARG (NULL), NOMEM. */
MOEQ_API moeq_status moeq_model_find_layers(const moeq_config *cfg, const moeq_checkpoint *ckpt,
                                            moeq_model_layer_info **out, uint32_t *count,
                                            moeq_error *err);

/* The moeq_moe_config a layer is created with, as `moeq run` and
 * moeq_model_load create it: resolution and scheme for the layer, the
 * model's dimensions, activation, biases and gating (moeq_model_moe_get),
 * prefix and projection names (pointing into *info and *res, which must
 * outlive the moeq_moe_create call).  A caller may fill *info itself
 * (prefix, experts, has_bias, proj; the counts are not read).
 * @return OK, INVALID_ARG (config.json lacks a dimension: the message names the
 *         keys), and the statuses of moeq_resolve_moe and moeq_select. */
MOEQ_API moeq_status moeq_model_layer_config(const moeq_config *cfg, const moeq_model_moe *mm,
                                             const moeq_model_layer_info *info,
                                             const moeq_select_options *select,
                                             moeq_resolution *res, moeq_selection *sel,
                                             moeq_moe_config *out, moeq_error *err);

/* Progress of moeq_model_load, after each layer. */
typedef struct moeq_model_progress {
    uint32_t layers_done, layers; /* layers (MoE and linear) finalized so far, and in all */
    uint64_t bytes_done, bytes;   /* their checkpoint bytes so far, and in all */
    double seconds;               /* since the load began */
    const char *layer;            /* the layer just finalized (valid during the call) */
    int32_t linear;               /* 1: that layer is a linear module, 0: a MoE layer */
} moeq_model_progress;
/* Return 0 to go on, anything else to stop (moeq_model_load then fails with STATE). */
typedef int32_t (*moeq_model_progress_fn)(const moeq_model_progress *p, void *user_data);

typedef struct moeq_model_load_options {
    int32_t threads;                   /* loader threads; 0: one per online CPU */
    const moeq_select_options *select; /* NULL: the defaults */
    moeq_model_progress_fn progress;   /* NULL: none */
    void *user_data;
    int32_t moe_only; /* 1: the MoE layers alone, no linear module */
} moeq_model_load_options;

typedef struct moeq_model_load_summary {
    uint32_t layers;     /* MoE layers loaded */
    uint64_t experts;    /* experts over all of them */
    uint64_t tensors;    /* checkpoint tensors read (MoE and linear layers) */
    uint64_t bytes;      /* their bytes in the checkpoint */
    uint64_t resident;   /* bytes the finalized layers hold (packed codes and scales) */
    double seconds;      /* wall time of the whole call */
    double gb_per_s;     /* bytes / seconds / 1e9 */
    uint64_t rss_before; /* the process's resident bytes when the call began (0: unknown) */
    uint64_t rss_after;  /* ... when it returned */
    uint64_t peak_rss;   /* the process's peak resident bytes (VmHWM) at the end */
    uint32_t linear_layers;   /* linear layers loaded (a fused one counts once) */
    uint64_t linear_tensors;  /* the linear layers' share of tensors, */
    uint64_t linear_bytes;    /* ... of bytes */
    uint64_t linear_resident; /* ... and of resident */
} moeq_model_load_summary;

/* Opens the checkpoint directory `dir` (config.json and safetensors),
 * finds its MoE layers (moeq_model_find_layers) and, unless opts->moe_only,
 * its quantized linear modules (the modules `moeq inspect` calls linear whose
 * resolution is quantized: attention projections, shared experts, dense
 * MLPs, a quantized lm_head), and creates, loads and finalizes each in layer
 * order (MoE layers through moeq_moe_load_finalize on opts->threads
 * threads), reporting progress after each layer.  A module's q/k/v_proj (or
 * gate/up_proj) siblings that are all present, resolve alike and share
 * in_features load as one fused layer, "<parent>.qkv_proj" ("gate_up_proj")
 * with those shards; otherwise each loads alone.  The checkpoint is closed
 * before it returns.  *summary (may be NULL) is filled on success.  On
 * failure nothing stays allocated and the message names the layer (and the
 * tensor, where one is at fault).  OUT *out: destroy with moeq_model_destroy.
 * @return OK, INVALID_ARG, IO, CHECKPOINT (no MoE layer nor quantized linear
 *         module; a layer's tensors), STATE (the callback stopped it), and
 *         the statuses of moeq_config_load, moeq_checkpoint_open,
 *         moeq_model_layer_config, moeq_moe_load_finalize, moeq_resolve,
 *         moeq_dequantize (a linear module's shapes), moeq_linear_create,
 *         moeq_linear_load_checkpoint and moeq_linear_finalize. */
MOEQ_API moeq_status moeq_model_load(const char *dir, const moeq_model_load_options *opts,
                                     moeq_model **out, moeq_model_load_summary *summary,
                                     moeq_error *err);
MOEQ_API void moeq_model_destroy(moeq_model *model);
/* The model's config (owned by the model). */
MOEQ_API const moeq_config *moeq_model_config(const moeq_model *model);
MOEQ_API uint32_t moeq_model_layer_count(const moeq_model *model);
/* Layer i (finalized; owned by the model) and its prefix; NULL past the last. */
MOEQ_API const moeq_moe *moeq_model_layer(const moeq_model *model, uint32_t i, const char **prefix);
MOEQ_API uint32_t moeq_model_linear_count(const moeq_model *model);
/* Linear layer i (finalized; owned by the model) and its name (the fused
 * name for a fused layer), in layer order; NULL past the last. */
MOEQ_API const moeq_linear *moeq_model_linear(const moeq_model *model, uint32_t i,
                                              const char **name);
/* [/load] */

#ifdef __cplusplus
}
#endif

#endif /* MOEQ_H */

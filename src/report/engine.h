/*
 * engine.h - what an inference engine (SGLang, vLLM) would do with a MoE
 * layer of a compressed-tensors checkpoint: which scheme class its MoE
 * dispatch constructs, or which exception it raises.  Never installed.
 *
 * The dispatch of each modelled engine version is data: one table file per
 * version (engine_<engine>_<commit>.c) holding a moeq__engine_table, i.e. the
 * version's config-reading rules (flags) and an ordered list of rows, each a
 * conjunction of conditions over the resolved weight/input args, the formats,
 * the "Linear" target, the platform and the MoE backend, leading to one
 * outcome (a class, or an exception with its message).  engine.c is the only
 * code: it reads the config the way the engine does (target map, ignore rule,
 * which inputs are kept), probes expert 0 as the engines do, and takes the
 * first row whose conditions hold.  docs/engines.md says how to add a table.
 */
#ifndef MOEQ_ENGINE_H
#define MOEQ_ENGINE_H

#include "resolve/resolve.h"

/* A bit of a row mask: MOEQ__BIT(MOEQ_FORMAT_PACK_QUANTIZED), MOEQ__BIT(4). */
#define MOEQ__BIT(x) (1u << (x))

/* Tri-state condition: 0 = any (so that designated initializers leave the
 * fields a row does not test at "any"). */
enum { MOEQ__EC_ANY = 0, MOEQ__EC_YES = 1, MOEQ__EC_NO = 2 };
/* actorder only: written "group" or its alias "dynamic"; written "group". */
enum { MOEQ__EC_GROUPLIKE = 3, MOEQ__EC_GROUP_WRITTEN = 4 };

/* Platforms and MoE runner backends a table can distinguish (bit masks of
 * these values in rows; 0 = any). */
typedef enum moeq__eplatform {
    MOEQ__EP_SM90 = 0,  /* CUDA Hopper (default) */
    MOEQ__EP_SM80 = 1,  /* CUDA Ampere */
    MOEQ__EP_SM100 = 2, /* CUDA Blackwell */
    MOEQ__EP_ROCM = 3,  /* AMD */
    MOEQ__EP_NPU = 4,   /* Ascend */
    MOEQ__EP_CPU = 5,   /* vLLM's CPU backend */
    MOEQ__EP_COUNT
} moeq__eplatform;

typedef enum moeq__ebackend {
    MOEQ__EB_AUTO = 0,              /* the engine's default */
    MOEQ__EB_TRITON = 1,            /* SGLang --moe-runner-backend triton, vLLM triton */
    MOEQ__EB_MARLIN = 2,            /* marlin */
    MOEQ__EB_FLASHINFER_TRTLLM = 3, /* SGLang flashinfer_trtllm, vLLM FLASHINFER_MOE_INT4 */
    MOEQ__EB_CUTLASS = 4,           /* vLLM VLLM_WNA16_MOE_BACKEND=cutlass */
    MOEQ__EB_COUNT
} moeq__ebackend;

/* Conditions on one QuantizationArgs (all zero: any args). */
typedef struct moeq__args_cond {
    uint32_t bits;          /* bit n: num_bits == n accepted; 0 any */
    uint32_t types;         /* bit MOEQ_QTYPE_*; 0 any */
    uint32_t strategies;    /* bit MOEQ_STRATEGY_*; 0 any */
    int32_t symmetric;      /* MOEQ__EC_* */
    int32_t dynamic;        /* MOEQ__EC_*: YES = truthy (true or "local") */
    int32_t group_size;     /* 0 any, else must equal (-1: channel) */
    int32_t group_multiple; /* 0 any, else group_size > 0 and a multiple of it */
    int32_t actorder;       /* MOEQ__EC_*: YES = any actorder set, GROUPLIKE, GROUP_WRITTEN */
} moeq__args_cond;

/* Where a row applies. */
typedef enum moeq__estage {
    /* After expert 0's projections resolved to one scheme dict (W, A). */
    MOEQ__ES_LAYER = 0,
    /* Before any probing, on the args of the "FusedMoE" entry, else the
     * "Linear" one (SGLang's MXFP4 bypass); the layer name plays no part. */
    MOEQ__ES_CONFIG = 1
} moeq__estage;

/* What a row leads to. */
typedef enum moeq__eeffect {
    MOEQ__EE_SCHEME = 0,      /* the class is constructed with the layer's args */
    MOEQ__EE_RAISE = 1,       /* the exception is raised */
    MOEQ__EE_UNQUANTIZED = 2, /* the layer silently loads unquantized */
    MOEQ__EE_LINEAR_ARGS = 3  /* the class is constructed with the "Linear" group's args */
} moeq__eeffect;

typedef struct moeq__engine_row {
    const char *branch; /* the upstream branch it stands for ("a1", "e: ctor"), for docs */
    int32_t stage;      /* moeq__estage */
    moeq__args_cond w;
    int32_t input; /* MOEQ__EC_YES: input args present, NO: absent, ANY */
    moeq__args_cond a;
    uint32_t top_format;     /* bit MOEQ_FORMAT_*: the top-level format is one of these; 0 any */
    uint32_t not_top_format; /* bit: the top-level format is none of these */
    uint32_t dict_format;    /* bit: the scheme dict's format (group's, see table) */
    uint32_t platforms;      /* bit moeq__eplatform; 0 any */
    uint32_t backends;       /* bit moeq__ebackend; 0 any */
    int32_t linear;          /* MOEQ__EC_YES: a "Linear" target exists */
    /* outcome */
    int32_t effect;        /* moeq__eeffect */
    const char *cls;       /* class constructed (SCHEME, UNQUANTIZED, LINEAR_ARGS) */
    const char *exception; /* RAISE: "KeyError", ... */
    /* RAISE: the message; {W} and {A} stand for the weight/input args as
     * pydantic prints them, {fmt} for the top-level format, {name} for the
     * probed projection name, {bits} for the weights' num_bits. */
    const char *message;
    int32_t moeq_scheme; /* the moeq scheme the class corresponds to; -1 none */
} moeq__engine_row;

/* How ignore entries match a probe name. */
typedef enum moeq__eignore {
    MOEQ__EI_EXACT = 0,   /* equal, or "re:" re.match */
    MOEQ__EI_SUFFIX = 1,  /* equal, name ends with "." + entry, or "re:" re.match */
    MOEQ__EI_CONTAINS = 2 /* case-insensitive substring, or "re:" re.match */
} moeq__eignore;

/* One modelled engine version. */
typedef struct moeq__engine_table {
    const char *name;        /* "sglang@d315eb725": engine@commit */
    const char *engine;      /* "sglang", "vllm" */
    const char *commit;      /* short hash, as in --engine sglang@<commit> */
    const char *commit_full; /* the full hash read */
    const char *date;        /* commit date */
    const char *read;        /* the commit's date and which files were read, one line */
    int32_t ignore_rule;     /* moeq__eignore */
    /* 1: a group's own "format" is stored in its scheme dict and decides
     * whether its input args are kept; 0: only the top-level format counts. */
    int32_t group_format;
    /* 1: a scheme dict without a format gets the top-level one (vLLM). */
    int32_t fill_format;
    uint32_t act_formats;    /* bit MOEQ_FORMAT_*: formats that keep input args */
    int32_t keep_declared;   /* 1: declared input args are kept in any format */
    int32_t int_weight_only; /* 1: missing input args with INT weights are fine there */
    int32_t skip_attention;  /* 1: groups whose one target ends in "Attention" are dropped */
    uint32_t platforms;      /* platforms the table knows */
    uint32_t backends;       /* backends the table knows */
    const moeq__engine_row *rows;
    uint32_t n_rows;
} moeq__engine_table;

/* Every modelled version, newest first within each engine. */
extern const moeq__engine_table moeq__engine_sglang_d315eb725;
extern const moeq__engine_table moeq__engine_sglang_eba6af385d;
extern const moeq__engine_table moeq__engine_vllm_003a19308;

uint32_t moeq__engine_table_count(void);
const moeq__engine_table *moeq__engine_table_at(uint32_t i);

/* A parsed engine spec "ENGINE[@COMMIT][:PLATFORM[,BACKEND]]", prepared
 * for one config (the engine's view of every group).  Immutable once made:
 * share it between threads. */
typedef struct moeq__engine moeq__engine;

/* @return OK, INVALID_ARG (unknown engine, commit, platform or backend: the
 *         message lists the modelled ones), NOMEM. */
moeq_status moeq__engine_create(const char *spec, const moeq_config *cfg, moeq__engine **out,
                                moeq_error *err);
void moeq__engine_destroy(moeq__engine *e);
/* The name of group g of the config, NULL when g < 0. */
const char *moeq__engine_group_name(const moeq__engine *e, int32_t g);
/* "sglang@d315eb725:sm90,auto" */
const char *moeq__engine_label(const moeq__engine *e);

/* Differences from moeq's own choice (bits of moeq__engine_verdict.differs):
 * the public MOEQ_ENGINE_DIFFERS_* values. */
#define MOEQ__ED_ERROR       MOEQ_ENGINE_DIFFERS_ERROR
#define MOEQ__ED_SCHEME      MOEQ_ENGINE_DIFFERS_SCHEME
#define MOEQ__ED_GROUP       MOEQ_ENGINE_DIFFERS_GROUP
#define MOEQ__ED_UNQUANTIZED MOEQ_ENGINE_DIFFERS_UNQUANTIZED
#define MOEQ__ED_QUANTIZED   MOEQ_ENGINE_DIFFERS_QUANTIZED
#define MOEQ__ED_ARGS        MOEQ_ENGINE_DIFFERS_ARGS
#define MOEQ__ED_MOEQ_FAILS  MOEQ_ENGINE_DIFFERS_MOEQ_FAILS

/* The verdict for one MoE layer. */
typedef struct moeq__engine_verdict {
    const moeq__engine *engine;  /* NULL: no verdict */
    const moeq__engine_row *row; /* the outcome (a table row or a built-in one) */
    int32_t group;               /* the group the engine resolves, -1 none */
    int32_t args_group;          /* the group whose args the class gets, -1 none */
    int32_t probe;               /* 0..2: the probe a matching error names */
    uint32_t differs;            /* MOEQ__ED_* */
} moeq__engine_verdict;

/* Judges the MoE layer `prefix` (len bytes).  The moeq side (its resolution,
 * selected scheme or -1, whether planning the row failed) fills `differs`.
 * @return OK, LIMIT (a regex hit its match limit), NOMEM. */
moeq_status moeq__engine_judge(const moeq__engine *e, moeq__match_scratch *s, const char *prefix,
                               size_t len, const moeq_resolution *mres, int32_t mscheme,
                               bool mfailed, moeq__engine_verdict *out, moeq_error *err);

/* The class name, NULL when the engine raises. */
const char *moeq__engine_verdict_scheme(const moeq__engine_verdict *v);
/* Appends "Type: message" (nothing when the engine builds a class). */
void moeq__engine_verdict_error(const moeq__engine_verdict *v, const char *prefix, size_t len,
                                moeq__sb *sb);
/* Appends the names of the differs bits, comma-separated ("error,group"). */
void moeq__engine_differs_words(uint32_t differs, const char *sep, moeq__sb *sb);
/* Appends ,"engine":...,"engine_scheme":...,"engine_error":...,
 * "engine_group":...,"engine_differs":[...] for a row (all null/[] for a
 * row without a verdict: linear layers). */
void moeq__engine_json(const moeq__engine *e, const moeq__engine_verdict *v, const char *prefix,
                       size_t len, moeq__sb *sb);

#endif /* MOEQ_ENGINE_H */

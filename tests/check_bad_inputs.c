/*
 * check_bad_inputs.c - the bad-input catalogue: one table, one row per
 * mistake a caller or a file can make, each with the exact status and a piece
 * of the message that must come back.  Rows are grouped by what they feed:
 *
 *   CONFIG / STRICT   JSON text -> moeq_config_parse (strict_keys 0 / 1)
 *   CONFIG_FILE       a path -> moeq_config_load
 *   RESOLVE           config + layer name -> moeq_resolve (regex limits, UTF-8)
 *   RESOLVE_MOE       config + prefix + expert count -> moeq_resolve_moe
 *   SELECT            a resolution, possibly corrupted -> moeq_select
 *   OPEN              safetensors header (+ data bytes) -> moeq_checkpoint_open
 *   OPEN_PATH         a path -> moeq_checkpoint_open
 *   INDEX             model.safetensors.index.json next to one valid shard
 *   LOAD              one tensor of a wna16 layer, with one mistake -> moeq_moe_load
 *   CREATE            a moeq_moe_config with one mistake -> moeq_moe_create
 *   FINALIZE          a loaded layer with one value poked -> moeq_moe_finalize
 *   APPLY             one argument of moeq_moe_apply wrong
 *   ROUTE             one field or argument of moeq_route wrong
 *   DEQUANT           one module's tensors (pack-quantized int4 group 32, [8, 64]) with
 *                     one mistake -> moeq_dequantize
 *   NAN               non-finite inputs: apply succeeds, the token's row is all
 *                     NaN and the other tokens' rows are exactly as without it
 *
 * JSON in the table is written with single quotes, turned into double quotes
 * before use.  An empty substring means the call must succeed.
 */
#include "test_moe.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

typedef enum row_kind {
    CONFIG,
    STRICT,
    CONFIG_FILE,
    RESOLVE,
    RESOLVE_MOE,
    SELECT,
    OPEN,
    OPEN_PATH,
    INDEX,
    LOAD,
    CREATE,
    FINALIZE,
    APPLY,
    ROUTE,
    DEQUANT,
    NAN_ROW
} row_kind;

typedef struct bad_row {
    row_kind kind;
    const char *a; /* per kind: JSON, path, header, parameter, mutation */
    const char *b; /* per kind: layer name, variant, value */
    int64_t n;     /* per kind: module kind, data bytes, expert, scheme */
    moeq_status want;
    const char *sub; /* in the message; "" when the call succeeds */
} bad_row;

#define GROUP(w) "{'config_groups':{'g':{'targets':['re:.*experts.*','Linear'],'weights':" w "}}}"
#define W4 "{'num_bits':4,'group_size':32}"
#define TARGET(t) "{'config_groups':{'g':{'targets':['" t "'],'weights':" W4 "}}}"
#define IGNORE(t) "{'ignore':['" t "'],'config_groups':{'g':{'targets':['Linear'],'weights':" W4 "}}}"
#define A40 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

static const bad_row k_rows[] = {
    /* ---- config syntax ---------------------------------------------------------------- */
    {CONFIG, "", NULL, 0, MOEQ_STATUS_JSON, "at byte 0 (line 1, column 1): empty input"},
    {CONFIG, "{'config_groups': {", NULL, 0, MOEQ_STATUS_JSON, "unexpected end of input (truncated?)"},
    {CONFIG, "{} {}", NULL, 0, MOEQ_STATUS_JSON, "unexpected text after the JSON value"},
    {CONFIG, "{'a': [1,]}", NULL, 0, MOEQ_STATUS_JSON, "at byte 9 (line 1, column 10)"},
    {CONFIG, "{'a': tru}", NULL, 0, MOEQ_STATUS_JSON, "invalid JSON"},
    {CONFIG, "{'a': '\\u12'}", NULL, 0, MOEQ_STATUS_JSON, "JSON syntax error"},
    {CONFIG, "[1, 2]", NULL, 0, MOEQ_STATUS_SCHEMA, "at the top level, found an array"},
    {CONFIG, "{'model_type': 'llama'}", NULL, 0, MOEQ_STATUS_SCHEMA, "no quantization config found"},
    /* ---- config types ------------------------------------------------------------------- */
    {CONFIG, "{'quant_method': 5, 'config_groups': {}}", NULL, 0, MOEQ_STATUS_SCHEMA, "quant_method"},
    {CONFIG, "{'config_groups': [1]}", NULL, 0, MOEQ_STATUS_SCHEMA, "config_groups"},
    {CONFIG, "{'config_groups': {'g': {'targets': 'Linear'}}}", NULL, 0, MOEQ_STATUS_SCHEMA,
     "config_groups.g.targets"},
    {CONFIG, "{'config_groups': {'g': {'targets': ['Linear', 3]}}}", NULL, 0, MOEQ_STATUS_SCHEMA,
     "targets[1]"},
    {CONFIG, GROUP("{'num_bits': '4'}"), NULL, 0, MOEQ_STATUS_SCHEMA, "weights.num_bits"},
    {CONFIG, GROUP("{'num_bits': 4.5}"), NULL, 0, MOEQ_STATUS_SCHEMA, "weights.num_bits"},
    {CONFIG, GROUP("{'num_bits': 1e400}"), NULL, 0, MOEQ_STATUS_SCHEMA, "weights.num_bits"},
    {CONFIG, GROUP("{'num_bits': 4, 'symmetric': 'yes'}"), NULL, 0, MOEQ_STATUS_SCHEMA,
     "weights.symmetric"},
    {CONFIG, "{'ignore': 'lm_head', 'config_groups': {'g': {'targets': ['Linear']}}}", NULL, 0,
     MOEQ_STATUS_SCHEMA, "ignore"},
    {CONFIG, "{'config_groups': {'g': {'targets': ['Linear'], 'format': 'zip-quantized'}}}", NULL, 0,
     MOEQ_STATUS_SCHEMA, "config_groups.g.format"},
    {CONFIG, "{'format': 'zip-quantized', 'config_groups': {'g': {'targets': ['Linear']}}}", NULL, 0,
     MOEQ_STATUS_OK, ""}, /* top level: a warning, as compressed-tensors does */
    /* ---- config ranges and combinations ----------------------------------------------------- */
    {CONFIG, GROUP("{'num_bits': 0}"), NULL, 0, MOEQ_STATUS_SCHEMA,
     "num_bits must be a positive integer, got 0"},
    {CONFIG, GROUP("{'num_bits': 4, 'group_size': -2}"), NULL, 0, MOEQ_STATUS_SCHEMA,
     "Invalid group size -2"},
    {CONFIG, GROUP("{'num_bits': 4, 'strategy': 'rows'}"), NULL, 0, MOEQ_STATUS_SCHEMA,
     "'rows' is not a valid QuantizationStrategy"},
    {CONFIG, GROUP("{'num_bits': 4, 'type': 'bf16'}"), NULL, 0, MOEQ_STATUS_SCHEMA,
     "'bf16' is not a valid QuantizationType"},
    {CONFIG, GROUP("{'num_bits': 4, 'strategy': 'group'}"), NULL, 0, MOEQ_STATUS_SCHEMA,
     "strategy group requires group_size to be set to a positive value"},
    {CONFIG, GROUP("{'num_bits': 4, 'strategy': 'channel', 'group_size': 64}"), NULL, 0,
     MOEQ_STATUS_SCHEMA, "group_size requires strategy to be set to 'group'"},
    {CONFIG, GROUP("{'num_bits': 8, 'type': 'float', 'strategy': 'block'}"), NULL, 0,
     MOEQ_STATUS_SCHEMA, "Block strategy requires block structure"},
    {CONFIG, GROUP("{'num_bits': 8, 'type': 'float', 'strategy': 'block', 'block_structure': [0, 128]}"),
     NULL, 0, MOEQ_STATUS_SCHEMA, "Invalid block_structure"},
    {CONFIG, GROUP("{'num_bits': 8, 'type': 'float', 'strategy': 'block', 'block_structure': '128x'}"),
     NULL, 0, MOEQ_STATUS_SCHEMA, "Invalid block_structure"},
    {CONFIG, GROUP("{'num_bits': 4, 'strategy': 'channel', 'actorder': 'group'}"), NULL, 0,
     MOEQ_STATUS_SCHEMA, "Must use group or tensor_group quantization strategy"},
    {CONFIG, GROUP("{'num_bits': 8, 'strategy': 'token'}"), NULL, 0, MOEQ_STATUS_SCHEMA,
     "Cannot perform static token quantization"},
    {CONFIG, GROUP("{'num_bits': 8, 'dynamic': 'yes'}"), NULL, 0, MOEQ_STATUS_SCHEMA,
     "'yes' is not a valid DynamicType"},
    {CONFIG, GROUP("{'num_bits': 4, 'group_size': 32, 'dynamic': 'local'}"), NULL, 0,
     MOEQ_STATUS_SCHEMA, "local is only supported for strategy tensor_group"},
    {CONFIG, GROUP("{'num_bits': 5, 'type': 'float'}"), NULL, 0, MOEQ_STATUS_SCHEMA,
     "Only num_bits in (8) are supported"},
    {CONFIG, GROUP("{'num_bits': 8, 'scale_dtype': 'torch.complex64'}"), NULL, 0,
     MOEQ_STATUS_UNSUPPORTED, "torch.complex64 is a torch dtype moeq has no element type for"},
    {CONFIG, GROUP("{'num_bits': 8, 'scale_dtype': 'torch.float7'}"), NULL, 0, MOEQ_STATUS_SCHEMA,
     "No such torch dtype `torch.float7`"},
    {CONFIG, "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
             "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
     "deep", 0, MOEQ_STATUS_JSON, "JSON syntax error"},
    {STRICT, GROUP("{'num_bits': 4, 'group_sizee': 32}"), NULL, 0, MOEQ_STATUS_SCHEMA, "group_sizee"},
    {CONFIG, GROUP("{'num_bits': 4, 'group_size': 32, 'group_sizee': 32}"), NULL, 0, MOEQ_STATUS_OK,
     ""},
    /* ---- regexes in configs ---------------------------------------------------------------- */
    {CONFIG, TARGET("re:model.(layers"), NULL, 0, MOEQ_STATUS_REGEX,
     "config_groups.g.targets[0]: bad regular expression \"re:model.(layers\" at offset 13: missing "
     "closing parenthesis"},
    {CONFIG, IGNORE("re:[a-"), NULL, 0, MOEQ_STATUS_REGEX, "ignore[0]: bad regular expression"},
    {CONFIG, TARGET("re:(?<=a+)b"), NULL, 0, MOEQ_STATUS_REGEX, "lookbehind"},
    {CONFIG, TARGET("re:\xff\xfe"), NULL, 0, MOEQ_STATUS_REGEX, "UTF-8 error"},
    {CONFIG, TARGET("re:a{2,1}"), NULL, 0, MOEQ_STATUS_REGEX, "out of order"},
    /* ---- config files ---------------------------------------------------------------------------- */
    {CONFIG_FILE, "/dev/zero", NULL, 0, MOEQ_STATUS_IO, "/dev/zero: not a regular file"},
    {CONFIG_FILE, "/nonexistent/moeq/config.json", NULL, 0, MOEQ_STATUS_IO, "cannot open"},
    {CONFIG_FILE, "/", NULL, 0, MOEQ_STATUS_IO, "/config.json: cannot open"},
    {CONFIG_FILE, NULL, NULL, 0, MOEQ_STATUS_INVALID_ARG, "path is NULL"},
    /* ---- resolving: match limits, names ------------------------------------------------------ */
    {RESOLVE, TARGET("re:(a+)+$"), A40 "b", 0, MOEQ_STATUS_LIMIT,
     "pattern \"re:(a+)+$\" hit its backtracking limit"},
    {RESOLVE, TARGET("re:(a|aa)+$"), A40 A40 "!", 0, MOEQ_STATUS_LIMIT, "catastrophic backtracking"},
    {RESOLVE, TARGET("re:(.*a){12}$"), A40 "!", 0, MOEQ_STATUS_LIMIT, "hit its backtracking limit"},
    {RESOLVE, TARGET("re:(x+x+)+y$"), "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxy!", 0,
     MOEQ_STATUS_LIMIT, "raise regex_match_limit"},
    {RESOLVE, IGNORE("re:(\\\\w+\\\\s?)*$"), "model layers experts gate up down proj weights!", 0,
     MOEQ_STATUS_LIMIT, "hit its backtracking limit"},
    {RESOLVE, TARGET("re:(a+)+$"), "aaaaab", 0, MOEQ_STATUS_OK, ""}, /* short names are fine */
    {RESOLVE, GROUP(W4), "model.\xff.experts.0.up_proj", 1, MOEQ_STATUS_INVALID_ARG,
     "layer name is not valid UTF-8"},
    {RESOLVE, GROUP(W4), "model.\xc0\xae.x", 0, MOEQ_STATUS_INVALID_ARG, "not valid UTF-8"},
    {RESOLVE, GROUP(W4), "model.\xed\xa0\x80.x", 0, MOEQ_STATUS_INVALID_ARG, "not valid UTF-8"},
    {RESOLVE, GROUP(W4), "model.x\xe2\x82", 0, MOEQ_STATUS_INVALID_ARG, "not valid UTF-8"},
    {RESOLVE, GROUP(W4), "model.layers.0.q_proj", 7, MOEQ_STATUS_INVALID_ARG,
     "module kind 7 is not one of LINEAR (0), EXPERT (1), OTHER (2)"},
    {RESOLVE, GROUP(W4), NULL, 0, MOEQ_STATUS_INVALID_ARG, "layer name is NULL"},
    {RESOLVE, "{'config_groups':{'a':{'targets':['re:.*q_proj'],'weights':" W4 "},"
              "'b':{'targets':['re:.*[kv]_proj'],'weights':{'num_bits':8}}}}",
     "model.layers.0.self_attn.qkv_proj", 0, MOEQ_STATUS_AMBIGUOUS,
     "its shards resolve differently"},
    {RESOLVE_MOE, "{'config_groups':{'a':{'targets':['re:.*experts\\\\.[0-3]\\\\..*'],'weights':" W4
                  "},'b':{'targets':['re:.*experts\\\\.[4-9]\\\\..*'],"
                  "'weights':{'num_bits':8,'group_size':-1}}}}",
     "model.layers.0.mlp.experts", 8, MOEQ_STATUS_AMBIGUOUS,
     "gate_proj of experts 0-3"},
    {RESOLVE_MOE, GROUP(W4), "model.layers.0.mlp.experts", 0, MOEQ_STATUS_INVALID_ARG,
     "num_experts must be at least 1"},
    {RESOLVE_MOE, GROUP(W4), "model.layers.0.mlp.experts", 2000000, MOEQ_STATUS_LIMIT,
     "num_experts 2000000 is over the limit of 1000000"},
    {RESOLVE_MOE, GROUP(W4), "model.\xff.experts", 4, MOEQ_STATUS_INVALID_ARG, "not valid UTF-8"},
    /* ---- selection ------------------------------------------------------------------------------ */
    {SELECT, GROUP("{'num_bits': 4}"), "none", 0, MOEQ_STATUS_UNSUPPORTED, "no MoE scheme accepts"},
    {SELECT, GROUP(W4), "strategy", 99, MOEQ_STATUS_INVALID_ARG, "weights.strategy is 99"},
    {SELECT, GROUP(W4), "type", -1, MOEQ_STATUS_INVALID_ARG, "weights.type is -1"},
    {SELECT, GROUP(W4), "scale_dtype", 77, MOEQ_STATUS_INVALID_ARG, "weights.scale_dtype is 77"},
    {SELECT, GROUP(W4), "status", 9, MOEQ_STATUS_INVALID_ARG, "resolution status 9"},
    /* ---- safetensors files ----------------------------------------------------------------------------- */
    {OPEN, "", "cut=5", 0, MOEQ_STATUS_CHECKPOINT, "too short for the 8-byte header length"},
    {OPEN, "{}", "len=1", 0, MOEQ_STATUS_CHECKPOINT, "header length 1 is below the minimum of 2"},
    {OPEN, "{}", "len=1099511627776", 0, MOEQ_STATUS_CHECKPOINT, "exceeds the limit of 100000000 bytes"},
    {OPEN, "{}", "len=4096", 0, MOEQ_STATUS_CHECKPOINT, "runs past the end of the file"},
    {OPEN, "{'a': ", NULL, 0, MOEQ_STATUS_CHECKPOINT, "header is not valid JSON"},
    {OPEN, "[1]", NULL, 0, MOEQ_STATUS_CHECKPOINT, "header is a JSON array, not an object"},
    {OPEN, "{} x", NULL, 0, MOEQ_STATUS_CHECKPOINT, "header has bytes after the JSON object"},
    {OPEN, "{}\x01\x01", "nul", 0, MOEQ_STATUS_CHECKPOINT, "header has a NUL byte at offset 2"},
    {OPEN, "{'\xc3\x28': 1}", NULL, 0, MOEQ_STATUS_CHECKPOINT, "header is not valid UTF-8"},
    {OPEN, "{'a': 5}", NULL, 0, MOEQ_STATUS_CHECKPOINT, "tensor 'a': entry is a JSON number"},
    {OPEN, "{'a': {'shape': [1], 'data_offsets': [0, 4]}}", NULL, 4, MOEQ_STATUS_CHECKPOINT,
     "tensor 'a': entry has no 'dtype'"},
    {OPEN, "{'a': {'dtype': 'F128', 'shape': [1], 'data_offsets': [0, 4]}}", NULL, 4,
     MOEQ_STATUS_CHECKPOINT, "unknown dtype 'F128'"},
    {OPEN, "{'a': {'dtype': 'F32', 'shape': [1], 'data_offsets': [0, 4], 'extra': 1}}", NULL, 4,
     MOEQ_STATUS_CHECKPOINT, "unexpected key 'extra'"},
    {OPEN, "{'a': {'dtype': 'F32', 'shape': [-1], 'data_offsets': [0, 4]}}", NULL, 4,
     MOEQ_STATUS_CHECKPOINT, "shape[0] is not a non-negative integer"},
    {OPEN, "{'a': {'dtype': 'F32', 'shape': [1,1,1,1,1,1,1,1,1], 'data_offsets': [0, 4]}}", NULL, 4,
     MOEQ_STATUS_CHECKPOINT, "shape has 9 dimensions, at most 8 allowed"},
    {OPEN, "{'a': {'dtype': 'F32', 'shape': [1], 'data_offsets': [4, 0]}}", NULL, 4,
     MOEQ_STATUS_CHECKPOINT, "data_offsets [4, 0] are reversed"},
    {OPEN, "{'a': {'dtype': 'F32', 'shape': [4], 'data_offsets': [0, 16]}}", NULL, 8,
     MOEQ_STATUS_CHECKPOINT, "end past the data region of 8 bytes (file truncated?)"},
    {OPEN, "{'a': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 4]}}", NULL, 8,
     MOEQ_STATUS_CHECKPOINT, "hold 4 bytes but F32 [2] needs 8"},
    {OPEN, "{'a': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]}, "
           "'b': {'dtype': 'F32', 'shape': [2], 'data_offsets': [4, 12]}}",
     NULL, 12, MOEQ_STATUS_CHECKPOINT, "overlap"},
    {OPEN, "{'a': {'dtype': 'F64', 'shape': [1099511627776, 1099511627776], 'data_offsets': [0, 0]}}",
     NULL, 0, MOEQ_STATUS_CHECKPOINT, "elements overflow"},
    {OPEN, "{'a': {'dtype': 'F32', 'shape': [1], 'data_offsets': [0, 4]}, "
           "'a': {'dtype': 'F32', 'shape': [1], 'data_offsets': [4, 8]}}",
     NULL, 8, MOEQ_STATUS_CHECKPOINT, "tensor 'a' appears twice in the header"},
    {OPEN, "{'__metadata__': {'format': 5}}", NULL, 0, MOEQ_STATUS_CHECKPOINT,
     "'__metadata__' value of 'format' is a JSON number"},
    {OPEN, "{'a': {'dtype': 'BF16', 'shape': [], 'data_offsets': [0, 2]}}", NULL, 2, MOEQ_STATUS_OK,
     ""},
    {OPEN_PATH, "/nonexistent/moeq.safetensors", NULL, 0, MOEQ_STATUS_IO, "cannot open"},
    {OPEN_PATH, "/dev/null", NULL, 0, MOEQ_STATUS_IO, "not a regular file"},
    {OPEN_PATH, "@emptydir", NULL, 0, MOEQ_STATUS_CHECKPOINT,
     "no model.safetensors.index.json, model.safetensors or *.safetensors file"},
    {OPEN_PATH, NULL, NULL, 0, MOEQ_STATUS_INVALID_ARG, "path and out must not be NULL"},
    {INDEX, "{'weight_map': ", NULL, 0, MOEQ_STATUS_CHECKPOINT, "index is not valid JSON"},
    {INDEX, "{'metadata': {}}", NULL, 0, MOEQ_STATUS_CHECKPOINT, "index has no 'weight_map'"},
    {INDEX, "{'weight_map': {}}", NULL, 0, MOEQ_STATUS_CHECKPOINT, "'weight_map' lists no tensors"},
    {INDEX, "{'weight_map': {'x': 3}}", NULL, 0, MOEQ_STATUS_CHECKPOINT, "maps to a JSON number"},
    {INDEX, "{'weight_map': {'x': '../a.safetensors'}}", NULL, 0, MOEQ_STATUS_CHECKPOINT,
     "which is not a plain file name next to the index"},
    {INDEX, "{'weight_map': {'x': 'b.safetensors'}}", NULL, 0, MOEQ_STATUS_CHECKPOINT,
     "weight_map puts tensor 'x' in shard 'b.safetensors', but"},
    {INDEX, "{'weight_map': {'z': 'a.safetensors'}}", NULL, 0, MOEQ_STATUS_CHECKPOINT,
     "weight_map puts tensor 'z' in shard 'a.safetensors', which does not hold it"},
    {INDEX, "{'weight_map': {'x': 'a.safetensors', 'x': 'a.safetensors'}}", NULL, 0,
     MOEQ_STATUS_CHECKPOINT, "weight_map lists tensor 'x' twice"},
    {INDEX, "{'weight_map': {'x': 'a.safetensors'}}", NULL, 0, MOEQ_STATUS_OK, ""},
    /* ---- the loader (a wna16 int4 group-32 layer, 4 experts, H 64, I 32) ------------------------ */
    {LOAD, "w13_weight_packed", "dtype=I8", 0, MOEQ_STATUS_DTYPE,
     "dtype I8, expected I32 (for w13_weight_packed)"},
    {LOAD, "w13_weight_scale", "dtype=I32", 0, MOEQ_STATUS_DTYPE, "expected F32/F16/BF16"},
    {LOAD, "w13_weight_packed", "dim0+1", 0, MOEQ_STATUS_SHAPE, "shape [33, 8], expected [32, 8]"},
    {LOAD, "w2_weight_scale", "dim1+1", 0, MOEQ_STATUS_SHAPE, "shape [64, 2], expected [64, 1]"},
    {LOAD, "w13_weight_packed", "ndim=9", 0, MOEQ_STATUS_INVALID_ARG, "ndim 9 is outside 0..8"},
    {LOAD, "w13_weight_packed", "data=NULL", 0, MOEQ_STATUS_INVALID_ARG,
     "data is NULL but nbytes is 1024"},
    {LOAD, "w13_weight_packed", "nbytes+1", 0, MOEQ_STATUS_SHAPE, "1025 bytes for 256 elements of I32"},
    {LOAD, "w13_weight_packed", "dim0=-1", 0, MOEQ_STATUS_SHAPE, "shape[0] is -1"},
    {LOAD, "w13_weight_packed", "twice", 0, MOEQ_STATUS_CHECKPOINT, "was already loaded"},
    {LOAD, "w13_weight_packed", "name=model.layers.3.mlp.experts.9.gate_proj.weight_packed", 0,
     MOEQ_STATUS_CHECKPOINT, "expert 9 is not below num_experts (4)"},
    {LOAD, "w13_weight_packed", "name=model.layers.3.mlp.experts.1.gate_proj.weight_bogus", 0,
     MOEQ_STATUS_NO_MATCH, "has no parameter for \"weight_bogus\" of gate_proj"},
    {LOAD, "w13_weight_packed", "name=model.layers.4.mlp.experts.1.gate_proj.weight_packed", 0,
     MOEQ_STATUS_NO_MATCH, "does not belong to this layer (prefix model.layers.3.mlp.experts)"},
    {LOAD, "w13_weight_packed", "name=model.layers.3.mlp.experts.x1.gate_proj.weight_packed", 0,
     MOEQ_STATUS_NO_MATCH, "\"x1\" before the projection is not an expert number"},
    {LOAD, "w13_weight_packed", "name=model.layers.3.mlp.experts.1.w1.weight_packed", 0,
     MOEQ_STATUS_NO_MATCH, "projection \"w1\" is none of gate_proj, up_proj, down_proj"},
    {LOAD, "w13_weight_packed", "name=\xff\xfe", 0, MOEQ_STATUS_NO_MATCH,
     "expected <prefix>.<expert>.<gate_proj|up_proj|down_proj>.<param>"},
    {LOAD, "w13_weight_shape", "value0=7", 0, MOEQ_STATUS_CHECKPOINT,
     "weight_shape is [7, 64], but this layer's gate_proj is [32, 64]"},
    {LOAD, "w13_weight_shape", "i32-gate-and-up", 0, MOEQ_STATUS_OK, ""},
    {LOAD, "w13_weight_g_idx", "up-differs", 0, MOEQ_STATUS_CHECKPOINT,
     "is one value shared by gate and up, so they must be equal"},
    {LOAD, NULL, "tensor=NULL", 0, MOEQ_STATUS_INVALID_ARG, "tensor is NULL"},
    {LOAD, NULL, "name=NULL", 0, MOEQ_STATUS_INVALID_ARG, "tensor name is NULL"},
    {LOAD, "w13_weight_packed", "layer=NULL", 0, MOEQ_STATUS_INVALID_ARG, "layer is NULL"},
    {LOAD, "w13_weight_packed", "after-finalize", 0, MOEQ_STATUS_STATE, "the layer is finalized"},
    /* ---- creating layers ----------------------------------------------------------------------------- */
    {CREATE, "num_experts", NULL, 0, MOEQ_STATUS_INVALID_ARG, "num_experts is 0; must be 1..1000000"},
    {CREATE, "num_experts", NULL, 2000000, MOEQ_STATUS_INVALID_ARG, "num_experts is 2000000"},
    {CREATE, "hidden_size", NULL, -4, MOEQ_STATUS_INVALID_ARG, "hidden_size (-4)"},
    {CREATE, "hidden_size", NULL, 48, MOEQ_STATUS_OK, ""}, /* not a multiple of the group */
    {CREATE, "scheme", NULL, 99, MOEQ_STATUS_INVALID_ARG, "scheme 99 is not a moeq_scheme_id"},
    {CREATE, "scheme", NULL, MOEQ_SCHEME_W8A8_FP8, MOEQ_STATUS_UNSUPPORTED,
     "scheme w8a8_fp8 cannot run these args"},
    {CREATE, "weights.strategy", NULL, 1000, MOEQ_STATUS_INVALID_ARG, "weights.strategy is 1000"},
    {CREATE, "weights.group_size", NULL, 0, MOEQ_STATUS_INVALID_ARG,
     "strategy group with group_size 0"},
    {CREATE, "weights.num_bits", NULL, -3, MOEQ_STATUS_INVALID_ARG, "weights.num_bits is -3"},
    {CREATE, "expert_map", NULL, 0, MOEQ_STATUS_INVALID_ARG, "expert_map[1] is 7"},
    {CREATE, "first_expert", NULL, 3, MOEQ_STATUS_INVALID_ARG,
     "first_expert 3 + num_local_experts 4 exceeds num_experts 4"},
    {CREATE, "swiglu_limit", NULL, 0, MOEQ_STATUS_INVALID_ARG, "must be finite and >= 0"},
    {CREATE, "routed_scaling_factor", NULL, 0, MOEQ_STATUS_INVALID_ARG,
     "routed_scaling_factor nan must be finite"},
    {CREATE, "proj_names", NULL, 0, MOEQ_STATUS_INVALID_ARG, "proj_names[1] (up.proj)"},
    {CREATE, "activation", NULL, 9, MOEQ_STATUS_INVALID_ARG, "activation 9 is not silu (0)"},
    {CREATE, "params_dtype", NULL, MOEQ_DTYPE_I8, MOEQ_STATUS_INVALID_ARG,
     "params_dtype I8 is not BF16, F16 or F32"},
    /* ---- finalize: values a checkpoint must not hold (n: scheme) ----------------------------------- */
    {FINALIZE, "w13_weight_scale", "nan", MOEQ_SCHEME_WNA16, MOEQ_STATUS_CHECKPOINT,
     "scales must be finite"},
    {FINALIZE, "w2_weight_scale", "inf", MOEQ_SCHEME_WNA16, MOEQ_STATUS_CHECKPOINT,
     "scales must be finite"},
    {FINALIZE, "w13_weight_scale", "-inf", MOEQ_SCHEME_W8A8_INT8, MOEQ_STATUS_CHECKPOINT,
     "scales must be finite"},
    {FINALIZE, "w13_input_scale", "nan", MOEQ_SCHEME_W8A8_INT8, MOEQ_STATUS_CHECKPOINT,
     "w13_input_scale of expert 0 is nan; it must be positive and finite"},
    {FINALIZE, "w2_input_scale", "-1", MOEQ_SCHEME_W8A8_INT8, MOEQ_STATUS_CHECKPOINT,
     "w2_input_scale of expert 0 is -1"},
    {FINALIZE, "w13_weight_global_scale", "inf", MOEQ_SCHEME_W4A16_NVFP4, MOEQ_STATUS_CHECKPOINT,
     "expected a positive finite number"},
    {FINALIZE, "w13_input_global_scale", "nan", MOEQ_SCHEME_W4A4_NVFP4, MOEQ_STATUS_CHECKPOINT,
     "it must be positive and finite"},
    {FINALIZE, "w2_input_global_scale", "0", MOEQ_SCHEME_W4A4_NVFP4, MOEQ_STATUS_CHECKPOINT,
     "w2_input_global_scale of expert 0 is 0; it must be positive and finite"},
    {FINALIZE, "w13_weight", "0x7f", MOEQ_SCHEME_W8A16_FP8, MOEQ_STATUS_CHECKPOINT,
     "is NaN (byte 0x7F)"},
    {FINALIZE, "w13_weight_scale", "nan", MOEQ_SCHEME_NPU_W4A8_INT8, MOEQ_STATUS_CHECKPOINT,
     "model.layers.3.mlp.experts: w13_weight_scale of expert 0, row 0 is nan; scales must be finite"},
    {FINALIZE, "w13_weight", "nan", MOEQ_SCHEME_UNQUANTIZED, MOEQ_STATUS_CHECKPOINT, "not finite"},
    {FINALIZE, "w2_weight", "inf", MOEQ_SCHEME_UNQUANTIZED, MOEQ_STATUS_CHECKPOINT, "not finite"},
    {FINALIZE, "w13_weight_scale", "missing", MOEQ_SCHEME_WNA16, MOEQ_STATUS_CHECKPOINT,
     "1 checkpoint tensor is missing, e.g.:\nmodel.layers.3.mlp.experts.2.up_proj.weight_scale"},
    /* ---- apply (a w8a8_int8 layer: 4 experts, H 64, I 32; 3 tokens, top-2) ---------------------- */
    {APPLY, "tokens=0, NULL pointers", NULL, 0, MOEQ_STATUS_OK, ""},
    {APPLY, "x=NULL", NULL, 0, MOEQ_STATUS_INVALID_ARG, "x is NULL"},
    {APPLY, "ids=NULL", NULL, 0, MOEQ_STATUS_INVALID_ARG, "topk_ids is NULL"},
    {APPLY, "weights=NULL", NULL, 0, MOEQ_STATUS_INVALID_ARG, "topk_weights is NULL"},
    {APPLY, "out=NULL", NULL, 0, MOEQ_STATUS_INVALID_ARG, "out is NULL"},
    {APPLY, "ctx=NULL", NULL, 0, MOEQ_STATUS_INVALID_ARG, "ctx is NULL"},
    {APPLY, "layer=NULL", NULL, 0, MOEQ_STATUS_INVALID_ARG, "layer is NULL"},
    {APPLY, "tokens=-1", NULL, 0, MOEQ_STATUS_INVALID_ARG, "tokens is -1; must be 0..2147483647"},
    {APPLY, "top_k=0", NULL, 0, MOEQ_STATUS_INVALID_ARG, "top_k is 0; must be 1..num_experts (4)"},
    {APPLY, "tokens=2^30", NULL, 0, MOEQ_STATUS_INVALID_ARG,
     "tokens 1073741824 x top_k 2 is over 2147483647 (token, expert) pairs; split the batch"},
    {APPLY, "top_k=5", NULL, 0, MOEQ_STATUS_INVALID_ARG, "top_k is 5"},
    {APPLY, "id=4", NULL, 0, MOEQ_STATUS_INVALID_ARG, "topk_ids[1][0] is 4; must be -1 or 0..3"},
    {APPLY, "id=-2", NULL, 0, MOEQ_STATUS_INVALID_ARG, "topk_ids[1][0] is -2"},
    {APPLY, "id=-1", NULL, 0, MOEQ_STATUS_OK, ""}, /* an expert nobody holds contributes nothing */
    {APPLY, "weight=nan", NULL, 0, MOEQ_STATUS_INVALID_ARG, "topk_weights[2][1] is not finite"},
    {APPLY, "weight=-inf", NULL, 0, MOEQ_STATUS_INVALID_ARG, "topk_weights[2][1] is not finite"},
    {APPLY, "x_dtype=I8", NULL, 0, MOEQ_STATUS_DTYPE, "x dtype I8 / out dtype F32"},
    {APPLY, "out_dtype=F64", NULL, 0, MOEQ_STATUS_DTYPE, "each must be F32, BF16 or F16"},
    {APPLY, "alias, dtypes differ", NULL, 0, MOEQ_STATUS_INVALID_ARG,
     "out aliases x but their dtypes differ"},
    {APPLY, "alias, same dtype", NULL, 0, MOEQ_STATUS_OK, ""},
    {APPLY, "not finalized", NULL, 0, MOEQ_STATUS_STATE, "not finalized"},
    {APPLY, "reference, top_k=9", NULL, 0, MOEQ_STATUS_INVALID_ARG, "top_k is 9"},
    {APPLY, "ctx threads=-1", NULL, 0, MOEQ_STATUS_INVALID_ARG, "threads is -1; use 0..256"},
    {APPLY, "ctx MOEQ_KERNELS=avx9", NULL, 0, MOEQ_STATUS_INVALID_ARG,
     "MOEQ_KERNELS is 'avx9'; use portable, avx2 or avx512 (or unset it)"},
    {APPLY, "ctx MOEQ_BF16_PATH=yes", NULL, 0, MOEQ_STATUS_INVALID_ARG,
     "MOEQ_BF16_PATH is 'yes'; use auto, on or off (or unset it)"},
    /* ---- routing (8 experts, top-2, 3 tokens) ----------------------------------------------------------- */
    {ROUTE, "logit=nan", NULL, 0, MOEQ_STATUS_INVALID_ARG,
     "token 1, expert 5: logit is nan; want finite router logits"},
    {ROUTE, "logit=inf", NULL, 0, MOEQ_STATUS_INVALID_ARG, "token 1, expert 5: logit is inf"},
    {ROUTE, "top_k=9", NULL, 0, MOEQ_STATUS_INVALID_ARG, "top_k is 9; want 1..num_experts (8)"},
    {ROUTE, "num_experts=0", NULL, 0, MOEQ_STATUS_INVALID_ARG, "num_experts is 0"},
    {ROUTE, "groups=3", NULL, 0, MOEQ_STATUS_INVALID_ARG, "num_expert_group 3 does not divide num_experts 8"},
    {ROUTE, "topk_group=0", NULL, 0, MOEQ_STATUS_INVALID_ARG, "set both (grouped top-k) or neither"},
    {ROUTE, "bias=inf", NULL, 0, MOEQ_STATUS_INVALID_ARG, "correction_bias[3] is inf; want finite values"},
    {ROUTE, "scaling=-1", NULL, 0, MOEQ_STATUS_INVALID_ARG, "routed_scaling_factor is -1"},
    {ROUTE, "scoring=7", NULL, 0, MOEQ_STATUS_INVALID_ARG, "scoring is 7"},
    {ROUTE, "logits=NULL", NULL, 0, MOEQ_STATUS_INVALID_ARG, "logits is NULL with tokens = 3"},
    {ROUTE, "tokens=0, NULL arrays", NULL, 0, MOEQ_STATUS_OK, ""},
    {ROUTE, "tokens=-5", NULL, 0, MOEQ_STATUS_INVALID_ARG, "tokens is -5; want >= 0"},
    /* ---- dequantizing one module (a: the weight args) ------------------------------------------------- */
    {DEQUANT, W4, "none", 0, MOEQ_STATUS_OK, ""},
    {DEQUANT, W4, "no weight_scale", 0, MOEQ_STATUS_CHECKPOINT, "m.weight_scale: missing; pack-quantized"},
    {DEQUANT, W4, "scale dtype I32", 0, MOEQ_STATUS_DTYPE,
     "m.weight_scale: dtype I32, expected F32, F16 or BF16"},
    {DEQUANT, W4, "packed cols+1", 0, MOEQ_STATUS_SHAPE,
     "m.weight_packed: shape [8, 9], expected [8, 8]"},
    {DEQUANT, W4, "out_bytes-1", 0, MOEQ_STATUS_SHAPE, "out_bytes 1023, expected at least 1024"},
    {DEQUANT, W4, "out_dtype I8", 0, MOEQ_STATUS_INVALID_ARG, "out_dtype I8, expected F32, BF16 or F16"},
    {DEQUANT, W4, "out_shape NULL", 0, MOEQ_STATUS_INVALID_ARG, "out_shape is NULL"},
    {DEQUANT, W4, "scale nan", 0, MOEQ_STATUS_CHECKPOINT, "scales must be finite"},
    {DEQUANT, W4, "weight_shape [9, 64]", 0, MOEQ_STATUS_SHAPE,
     "m.weight_shape = [9, 64], expected [8, in >= 0]"},
    {DEQUANT, "{'num_bits':40,'group_size':32}", "none", 0, MOEQ_STATUS_UNSUPPORTED,
     "(int40 group(32) sym) must be int with 1..8 bits"},
    {DEQUANT, W4, "strategy 77", 0, MOEQ_STATUS_INVALID_ARG, "weights.strategy is 77"},
    {DEQUANT, W4, "2^40 rows of 0 columns", 0, MOEQ_STATUS_OK, ""}, /* at once, not 2^40 rows */
    /* ---- non-finite inputs (n: scheme) --------------------------------------------------------------- */
    {NAN_ROW, "nan", NULL, MOEQ_SCHEME_W8A8_INT8, MOEQ_STATUS_OK, ""},
    {NAN_ROW, "inf", NULL, MOEQ_SCHEME_W8A8_INT8, MOEQ_STATUS_OK, ""},
    {NAN_ROW, "nan", "per-tensor", MOEQ_SCHEME_W8A8_FP8, MOEQ_STATUS_OK, ""},
    {NAN_ROW, "-inf", "per-tensor", MOEQ_SCHEME_W8A8_FP8, MOEQ_STATUS_OK, ""},
    {NAN_ROW, "huge", NULL, MOEQ_SCHEME_W8A8_INT8, MOEQ_STATUS_OK, ""},
    {NAN_ROW, "nan", NULL, MOEQ_SCHEME_W4A4_NVFP4, MOEQ_STATUS_OK, ""},
    {NAN_ROW, "nan", NULL, MOEQ_SCHEME_UNQUANTIZED, MOEQ_STATUS_OK, ""},
    {NAN_ROW, "inf", NULL, MOEQ_SCHEME_WNA16, MOEQ_STATUS_OK, ""},
};
#define N_ROWS ((int)(sizeof k_rows / sizeof k_rows[0]))

/* ---- helpers ----------------------------------------------------------------------------------- */

/* Single quotes -> double quotes (the table's JSON). */
static char *dq(const char *s) {
    char *d = strdup(s);
    ck_assert_ptr_nonnull(d);
    for (char *p = d; *p; p++) {
        if (*p == '\'') *p = '"';
    }
    return d;
}

static char g_dir[256];

static void make_dir(void) {
    moeq_test_mkdtemp(g_dir, sizeof g_dir, "moeq_bad_inputs");
}

static void remove_dir(void) {
    moeq_test_rmtree(g_dir);
}

static moeq_config *parse_or_fail(const char *json_sq) {
    char *json = dq(json_sq);
    moeq_config *cfg = NULL;
    moeq_error err;
    moeq_status st = moeq_config_parse(json, strlen(json), NULL, &cfg, &err);
    ck_assert_msg(st == MOEQ_STATUS_OK, "%s: %s", json, err.message);
    free(json);
    return cfg;
}

/* ---- the kinds ---------------------------------------------------------------------------------- */

static moeq_status run_config(const bad_row *r, moeq_error *err) {
    char *json = dq(r->a);
    moeq_config_options opts = {r->kind == STRICT, 0};
    moeq_config *cfg = NULL;
    size_t len = strlen(json);
    char *deep = NULL;
    if (r->b && strcmp(r->b, "deep") == 0) { /* 5000 nested arrays */
        deep = malloc(10001);
        ck_assert_ptr_nonnull(deep);
        memset(deep, '[', 5000);
        memset(deep + 5000, ']', 5000);
        deep[10000] = '\0';
        free(json);
        json = deep;
        len = 10000;
        /* cJSON's nesting limit (1000) reports the error at the 1001st bracket. */
    }
    moeq_status st = moeq_config_parse(json, len, &opts, &cfg, err);
    ck_assert_msg((st == MOEQ_STATUS_OK) == (cfg != NULL), "OUT pointer and status disagree");
    moeq_config_destroy(cfg);
    free(json);
    return st;
}

static moeq_status run_config_file(const bad_row *r, moeq_error *err) {
    moeq_config *cfg = NULL;
    moeq_status st = moeq_config_load(r->a, NULL, &cfg, err);
    ck_assert_msg((st == MOEQ_STATUS_OK) == (cfg != NULL), "OUT pointer and status disagree");
    moeq_config_destroy(cfg);
    return st;
}

static moeq_status run_resolve(const bad_row *r, moeq_error *err) {
    moeq_config *cfg = parse_or_fail(r->a);
    moeq_resolution res;
    moeq_status st;
    if (r->kind == RESOLVE) {
        st = moeq_resolve(cfg, r->b, (int32_t)r->n, NULL, &res, err);
    } else {
        st = moeq_resolve_moe(cfg, r->b, (uint32_t)r->n, NULL, NULL, &res, err);
    }
    moeq_config_destroy(cfg);
    return st;
}

static moeq_status run_select(const bad_row *r, moeq_error *err) {
    moeq_config *cfg = parse_or_fail(r->a);
    moeq_resolution res;
    moeq_error e2;
    ck_assert_ok(moeq_resolve_moe(cfg, "m.experts", 2, NULL, NULL, &res, &e2), &e2);
    moeq_quant_args w = res.weights ? *res.weights : (moeq_quant_args){0};
    res.weights = &w;
    if (strcmp(r->b, "strategy") == 0) w.strategy = (int32_t)r->n;
    if (strcmp(r->b, "type") == 0) w.type = (int32_t)r->n;
    if (strcmp(r->b, "scale_dtype") == 0) w.scale_dtype = (int32_t)r->n;
    if (strcmp(r->b, "status") == 0) res.status = (int32_t)r->n;
    moeq_selection sel;
    moeq_status st = moeq_select(&res, "m.experts", NULL, &sel, err);
    moeq_config_destroy(cfg);
    return st;
}

/* A safetensors file: 8-byte length, the header (table JSON), n zero bytes.
 * Variants: "len=N" writes N as the length; "cut=K" keeps K bytes; "nul"
 * turns the header's \x01 bytes into NULs. */
static moeq_status run_open(const bad_row *r, moeq_error *err) {
    char *header = dq(r->a);
    size_t hl = strlen(header);
    if (r->b && strcmp(r->b, "nul") == 0) {
        for (size_t i = 0; i < hl; i++) {
            if (header[i] == '\x01') header[i] = '\0';
        }
    }
    size_t total = 8 + hl + (size_t)r->n;
    unsigned char *file = calloc(1, total);
    ck_assert_ptr_nonnull(file);
    uint64_t len = hl;
    if (r->b && strncmp(r->b, "len=", 4) == 0) len = strtoull(r->b + 4, NULL, 10);
    for (int i = 0; i < 8; i++) file[i] = (unsigned char)(len >> (8 * i));
    memcpy(file + 8, header, hl);
    if (r->b && strncmp(r->b, "cut=", 4) == 0) total = strtoull(r->b + 4, NULL, 10);
    char path[400];
    snprintf(path, sizeof path, "%s/t.safetensors", g_dir);
    moeq_test_write_file(path, file, total);
    moeq_checkpoint *ck = NULL;
    moeq_status st = moeq_checkpoint_open(path, &ck, err);
    ck_assert_msg((st == MOEQ_STATUS_OK) == (ck != NULL), "OUT pointer and status disagree");
    if (ck) {
        /* Whatever opened is readable. */
        for (uint64_t i = 0; i < moeq_checkpoint_tensor_count(ck); i++) {
            moeq_tensor t;
            ck_assert_int_eq(moeq_checkpoint_tensor(ck, i, &t), MOEQ_STATUS_OK);
            volatile unsigned sum = 0;
            for (uint64_t b = 0; b < t.nbytes; b++) sum += ((const unsigned char *)t.data)[b];
            (void)sum;
        }
    }
    moeq_checkpoint_close(ck);
    free(file);
    free(header);
    return st;
}

static moeq_status run_open_path(const bad_row *r, moeq_error *err) {
    char path[400];
    const char *p = r->a;
    if (p && strcmp(p, "@emptydir") == 0) {
        snprintf(path, sizeof path, "%s/empty", g_dir);
        ck_assert_int_eq(mkdir(path, 0700), 0);
        p = path;
    }
    moeq_checkpoint *ck = NULL;
    moeq_status st = moeq_checkpoint_open(p, p ? &ck : NULL, err);
    moeq_checkpoint_close(ck);
    return st;
}

/* model.safetensors.index.json (the row's JSON) next to a.safetensors,
 * which holds tensors "x" and "y". */
static moeq_status run_index(const bad_row *r, moeq_error *err) {
    static const float v[2] = {1, 2};
    char path[400];
    snprintf(path, sizeof path, "%s/a.safetensors", g_dir);
    moeq_tensor t[2] = {{"x", MOEQ_DTYPE_F32, 1, {2}, v, 8, NULL},
                        {"y", MOEQ_DTYPE_F32, 1, {2}, v, 8, NULL}};
    moeq_error e2;
    ck_assert_ok(moeq_safetensors_write(path, t, 2, NULL, &e2), &e2);
    char *index = dq(r->a);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", g_dir);
    moeq_test_write_file(path, index, strlen(index));
    free(index);
    moeq_checkpoint *ck = NULL;
    moeq_status st = moeq_checkpoint_open(g_dir, &ck, err);
    moeq_checkpoint_close(ck);
    return st;
}

/* The wna16 layer LOAD rows feed. */
static const moeq_test_scheme_args k_wna16 = {"{\"num_bits\":4,\"group_size\":32,\"actorder\":\"group\"}",
                                              "null", "pack-quantized", 0, 0};

static moeq_status run_load(const bad_row *r, moeq_error *err) {
    moeq_test_layer tl;
    moeq_test_layer_create(&tl, &k_wna16, 4, 64, 32, 5);
    const char *m = r->b;
    moeq_status st;
    if (strcmp(m, "tensor=NULL") == 0) {
        st = moeq_moe_load(tl.layer, NULL, NULL, err);
    } else if (strcmp(m, "name=NULL") == 0) {
        moeq_tensor t;
        memset(&t, 0, sizeof t);
        st = moeq_moe_load(tl.layer, &t, NULL, err);
    } else {
        uint32_t pi = moeq_test_param_index(&tl, r->a);
        moeq_test_tensor t;
        moeq_test_tensor_make(&tl, pi, (int32_t)r->n, 0, &t);
        moeq_moe *target = tl.layer;
        if (strcmp(m, "dtype=I8") == 0) t.t.dtype = MOEQ_DTYPE_I8;
        if (strcmp(m, "dtype=I32") == 0) t.t.dtype = MOEQ_DTYPE_I32;
        if (strncmp(m, "dim", 3) == 0 && strstr(m, "+1")) {
            /* One more row or column, with the bytes to match. */
            t.t.shape[m[3] - '0']++;
            uint64_t count = 1;
            for (int32_t i = 0; i < t.t.ndim; i++) count *= (uint64_t)t.t.shape[i];
            t.t.nbytes = count * moeq_dtype_size(t.t.dtype);
            t.data = realloc(t.data, (size_t)t.t.nbytes);
            ck_assert_ptr_nonnull(t.data);
            t.t.data = t.data;
        }
        if (strcmp(m, "dim0=-1") == 0) t.t.shape[0] = -1;
        if (strcmp(m, "ndim=9") == 0) t.t.ndim = 9;
        if (strcmp(m, "data=NULL") == 0) t.t.data = NULL;
        if (strcmp(m, "nbytes+1") == 0) t.t.nbytes++;
        if (strcmp(m, "layer=NULL") == 0) target = NULL;
        if (strncmp(m, "name=", 5) == 0) t.t.name = m + 5;
        if (strcmp(m, "value0=7") == 0) ((int64_t *)t.data)[0] = 7;
        if (strcmp(m, "twice") == 0) {
            moeq_error e2;
            ck_assert_ok(moeq_moe_load(tl.layer, &t.t, NULL, &e2), &e2);
        }
        if (strcmp(m, "i32-gate-and-up") == 0) {
            /* weight_shape as I32, for gate and then up: they must agree. */
            int32_t v[2] = {32, 64};
            t.t.dtype = MOEQ_DTYPE_I32;
            t.t.nbytes = 8;
            t.t.data = v;
            moeq_error e2;
            ck_assert_ok(moeq_moe_load(tl.layer, &t.t, NULL, &e2), &e2);
            snprintf(t.name, sizeof t.name, "model.layers.3.mlp.experts.0.up_proj.weight_shape");
            st = moeq_moe_load(tl.layer, &t.t, NULL, err);
            moeq_test_tensor_free(&t);
            moeq_test_layer_free(&tl);
            return st;
        }
        if (strcmp(m, "up-differs") == 0) {
            moeq_error e2;
            ck_assert_ok(moeq_moe_load(tl.layer, &t.t, NULL, &e2), &e2);
            snprintf(t.name, sizeof t.name, "model.layers.3.mlp.experts.0.up_proj.weight_g_idx");
            ((int32_t *)t.data)[5] ^= 1;
        }
        if (strcmp(m, "after-finalize") == 0) {
            moeq_test_layer_load(&tl);
            moeq_error e2;
            ck_assert_ok(moeq_moe_finalize(tl.layer, &e2), &e2);
        }
        int32_t outcome = -1;
        st = moeq_moe_load(target, &t.t, &outcome, err);
        ck_assert_int_eq(outcome, st == MOEQ_STATUS_OK ? MOEQ_LOAD_LOADED : MOEQ_LOAD_SKIPPED);
        moeq_test_tensor_free(&t);
    }
    moeq_test_layer_free(&tl);
    return st;
}

static moeq_status run_create(const bad_row *r, moeq_error *err) {
    moeq_config *cfg = parse_or_fail(GROUP(W4));
    moeq_resolution res;
    moeq_error e2;
    ck_assert_ok(moeq_resolve_moe(cfg, "m.experts", 4, NULL, NULL, &res, &e2), &e2);
    moeq_quant_args w = *res.weights;
    static const char *const k_dotted[3] = {"gate_proj", "up.proj", "down_proj"};
    int32_t map[4] = {0, 7, 2, 3};
    moeq_moe_config mc;
    memset(&mc, 0, sizeof mc);
    mc.scheme = MOEQ_SCHEME_WNA16;
    mc.weights = &w;
    mc.format = res.format;
    mc.num_experts = 4;
    mc.hidden_size = 64;
    mc.intermediate_size = 32;
    const char *f = r->a;
    int32_t v = (int32_t)r->n;
    if (strcmp(f, "num_experts") == 0) mc.num_experts = v;
    if (strcmp(f, "hidden_size") == 0) mc.hidden_size = v;
    if (strcmp(f, "scheme") == 0) mc.scheme = v;
    if (strcmp(f, "weights.strategy") == 0) w.strategy = v;
    if (strcmp(f, "weights.group_size") == 0) w.group_size = v;
    if (strcmp(f, "weights.num_bits") == 0) w.num_bits = v;
    if (strcmp(f, "expert_map") == 0) mc.expert_map = map;
    if (strcmp(f, "first_expert") == 0) mc.first_expert = v;
    if (strcmp(f, "swiglu_limit") == 0) mc.swiglu_limit = -INFINITY;
    if (strcmp(f, "routed_scaling_factor") == 0) mc.routed_scaling_factor = NAN;
    if (strcmp(f, "proj_names") == 0) mc.proj_names = k_dotted;
    if (strcmp(f, "activation") == 0) mc.activation = v;
    if (strcmp(f, "params_dtype") == 0) mc.params_dtype = v;
    moeq_moe *layer = NULL;
    moeq_status st = moeq_moe_create(&mc, &layer, err);
    ck_assert_msg((st == MOEQ_STATUS_OK) == (layer != NULL), "OUT pointer and status disagree");
    moeq_moe_destroy(layer);
    moeq_config_destroy(cfg);
    return st;
}

/* Static-input args for the FINALIZE rows of input scales. */
static const moeq_test_scheme_args k_int8_static = {"{\"num_bits\":8,\"strategy\":\"channel\"}",
                                                    "{\"num_bits\":8}", "int-quantized", 0, 0};

static moeq_status run_finalize(const bad_row *r, moeq_error *err) {
    moeq_test_layer tl;
    const moeq_test_scheme_args *a = &k_test_schemes[r->n];
    if (strstr(r->a, "input_scale")) a = &k_int8_static;
    moeq_test_layer_create(&tl, a, 3, 64, 32, 17);
    if (strcmp(r->b, "missing") == 0) {
        /* Everything but expert 2's up_proj weight_scale. */
        uint32_t skip = moeq_test_param_index(&tl, r->a);
        uint32_t n = moeq_moe_param_count(tl.layer);
        for (uint32_t pi = 0; pi < n; pi++) {
            moeq_param p;
            moeq_moe_param(tl.layer, pi, &p);
            if (!p.required) continue;
            for (int32_t e = 0; e < 3; e++) {
                for (int shard = 0; shard < 3; shard++) {
                    if (moeq_test_is_w13(&p) == (shard == 2)) continue;
                    if (pi == skip && e == 2 && shard == 1) continue;
                    moeq_test_tensor t;
                    moeq_test_tensor_make(&tl, pi, e, shard, &t);
                    moeq_error e2;
                    ck_assert_ok(moeq_moe_load(tl.layer, &t.t, NULL, &e2), &e2);
                    moeq_test_tensor_free(&t);
                }
            }
        }
    } else {
        moeq_test_layer_load(&tl);
        /* Engines may write parameters before finalize: poke element 0. */
        moeq_param p;
        moeq_error e2;
        ck_assert_ok(moeq_moe_find_param(tl.layer, r->a, &p), &e2);
        float v = strcmp(r->b, "nan") == 0    ? NAN
                  : strcmp(r->b, "inf") == 0  ? INFINITY
                  : strcmp(r->b, "-inf") == 0 ? -INFINITY
                                              : (float)atof(r->b);
        if (strcmp(r->b, "0x7f") == 0) {
            ((uint8_t *)p.data)[0] = 0x7F;
        } else if (p.dtype == MOEQ_DTYPE_F32 || p.dtype == MOEQ_DTYPE_BF16 ||
                   p.dtype == MOEQ_DTYPE_F16) {
            moeq_test_put_float(p.dtype, v, p.data);
            if (p.dtype == MOEQ_DTYPE_F16 && isnan(v)) ((uint16_t *)p.data)[0] = 0x7E00;
            if (p.dtype == MOEQ_DTYPE_F16 && isinf(v)) ((uint16_t *)p.data)[0] = v > 0 ? 0x7C00 : 0xFC00;
        } else {
            ck_abort_msg("%s: cannot poke dtype %s", r->a, moeq_dtype_name(p.dtype));
        }
    }
    moeq_status st = moeq_moe_finalize(tl.layer, err);
    moeq_test_layer_free(&tl);
    return st;
}

enum { AT = 3, AK = 2, AH = 64 };

static moeq_status run_apply(const bad_row *r, moeq_error *err) {
    moeq_test_layer tl;
    const char *m = r->a;
    if (strcmp(m, "not finalized") == 0) {
        moeq_test_layer_create(&tl, &k_test_schemes[MOEQ_SCHEME_W8A8_INT8], 4, AH, 32, 3);
    } else {
        moeq_test_layer_make(&tl, &k_test_schemes[MOEQ_SCHEME_W8A8_INT8], 4, AH, 32, 3);
    }
    float x[AT * AH], out[AT * AH], w[AT * AK] = {0.5f, 0.5f, 0.7f, 0.3f, 0.9f, 0.1f};
    int32_t ids[AT * AK] = {0, 1, 2, 3, 1, 0};
    double ref[AT * AH];
    for (int i = 0; i < AT * AH; i++) x[i] = (float)((i * 37) % 101 - 50) / 25.0f;
    moeq_ctx_options o = {0, 0};
    if (strcmp(m, "ctx threads=-1") == 0) o.threads = -1;
    moeq_ctx *ctx = NULL;
    const bool bad_kern = strcmp(m, "ctx MOEQ_KERNELS=avx9") == 0;
    const bool bad_bf16 = strcmp(m, "ctx MOEQ_BF16_PATH=yes") == 0;
    if (bad_kern) setenv("MOEQ_KERNELS", "avx9", 1);
    if (bad_bf16) setenv("MOEQ_BF16_PATH", "yes", 1);
    moeq_status st = moeq_ctx_create(&o, &ctx, err);
    if (bad_kern) unsetenv("MOEQ_KERNELS");
    if (bad_bf16) unsetenv("MOEQ_BF16_PATH");
    if (st != MOEQ_STATUS_OK) {
        ck_assert_ptr_null(ctx);
        moeq_test_layer_free(&tl);
        return st;
    }
    const moeq_moe *layer = tl.layer;
    moeq_ctx *c = ctx;
    const void *xp = x;
    void *op = out;
    const int32_t *ip = ids;
    const float *wp = w;
    int64_t T = AT;
    int32_t K = AK, xd = MOEQ_DTYPE_F32, od = MOEQ_DTYPE_F32;
    if (strcmp(m, "tokens=0, NULL pointers") == 0) {
        T = 0;
        xp = op = NULL;
        ip = NULL;
        wp = NULL;
    }
    if (strcmp(m, "x=NULL") == 0) xp = NULL;
    if (strcmp(m, "ids=NULL") == 0) ip = NULL;
    if (strcmp(m, "weights=NULL") == 0) wp = NULL;
    if (strcmp(m, "out=NULL") == 0) op = NULL;
    if (strcmp(m, "ctx=NULL") == 0) c = NULL;
    if (strcmp(m, "layer=NULL") == 0) layer = NULL;
    if (strcmp(m, "tokens=-1") == 0) T = -1;
    if (strcmp(m, "tokens=2^30") == 0) T = (int64_t)1 << 30; /* refused before x is read */
    if (strcmp(m, "top_k=0") == 0) K = 0;
    if (strcmp(m, "top_k=5") == 0) K = 5;
    if (strcmp(m, "id=4") == 0) ids[2] = 4;
    if (strcmp(m, "id=-2") == 0) ids[2] = -2;
    if (strcmp(m, "id=-1") == 0) ids[2] = -1;
    if (strcmp(m, "weight=nan") == 0) w[5] = NAN;
    if (strcmp(m, "weight=-inf") == 0) w[5] = -INFINITY;
    if (strcmp(m, "x_dtype=I8") == 0) xd = MOEQ_DTYPE_I8;
    if (strcmp(m, "out_dtype=F64") == 0) od = MOEQ_DTYPE_F64;
    if (strcmp(m, "alias, dtypes differ") == 0) {
        op = x;
        od = MOEQ_DTYPE_BF16;
    }
    if (strcmp(m, "alias, same dtype") == 0) op = x;
    if (strcmp(m, "reference, top_k=9") == 0) {
        st = moeq_moe_apply_reference(layer, xd, xp, T, 9, ip, wp, ref, err);
    } else {
        st = moeq_moe_apply(layer, c, xd, xp, T, K, ip, wp, od, op, err);
    }
    if (st == MOEQ_STATUS_OK && T > 0) {
        for (int i = 0; i < AT * AH; i++) {
            ck_assert_msg(isfinite(((float *)op)[i]), "%s: out[%d] not finite", m, i);
        }
    }
    moeq_ctx_destroy(ctx);
    moeq_test_layer_free(&tl);
    return st;
}

static moeq_status run_route(const bad_row *r, moeq_error *err) {
    enum { RE = 8, RK = 2, RT = 3 };
    float logits[RT * RE], bias[RE], w[RT * RK];
    int32_t ids[RT * RK];
    for (int i = 0; i < RT * RE; i++) logits[i] = (float)((i * 7) % 11) / 4.0f;
    for (int i = 0; i < RE; i++) bias[i] = 0.01f * (float)i;
    moeq_route_config rc = {RE, RK, MOEQ_SCORING_SIGMOID, 1, 0, 0, NULL, 0};
    const float *lp = logits;
    int64_t T = RT;
    const char *m = r->a;
    if (strcmp(m, "logit=nan") == 0) logits[RE + 5] = NAN;
    if (strcmp(m, "logit=inf") == 0) logits[RE + 5] = INFINITY;
    if (strcmp(m, "top_k=9") == 0) rc.top_k = 9;
    if (strcmp(m, "num_experts=0") == 0) rc.num_experts = 0;
    if (strcmp(m, "groups=3") == 0) rc.num_expert_group = rc.topk_group = 3;
    if (strcmp(m, "topk_group=0") == 0) rc.num_expert_group = 4;
    if (strcmp(m, "bias=inf") == 0) {
        bias[3] = INFINITY;
        rc.correction_bias = bias;
    }
    if (strcmp(m, "scaling=-1") == 0) rc.routed_scaling_factor = -1.0f;
    if (strcmp(m, "scoring=7") == 0) rc.scoring = 7;
    if (strcmp(m, "logits=NULL") == 0) lp = NULL;
    if (strcmp(m, "tokens=-5") == 0) T = -5;
    if (strcmp(m, "tokens=0, NULL arrays") == 0) {
        return moeq_route(&rc, NULL, 0, NULL, NULL, err);
    }
    return moeq_route(&rc, lp, T, ids, w, err);
}

/* A pack-quantized int4 group-32 module of [8, 64] (all-zero codes, unit
 * scales), with the row's mistake, dequantized to F32. */
static moeq_status run_dequant(const bad_row *r, moeq_error *err) {
    char *json = dq("{'config_groups':{'g':{'targets':['re:.*'],'format':'pack-quantized',"
                    "'weights':%s}}}");
    char buf[512], *args = dq(r->a);
    snprintf(buf, sizeof buf, json, args);
    free(json);
    free(args);
    moeq_config *cfg = NULL;
    moeq_error e2;
    ck_assert_ok(moeq_config_parse(buf, strlen(buf), NULL, &cfg, &e2), &e2);
    moeq_resolution res;
    ck_assert_ok(moeq_resolve(cfg, "m", MOEQ_MODULE_LINEAR, NULL, &res, &e2), &e2);
    moeq_quant_args w = *res.weights;
    int32_t packed[8 * 8 + 1];
    uint16_t scale[8 * 2];
    int64_t shape[2] = {8, 64};
    memset(packed, 0x88, sizeof packed); /* int4 codes 8: the value 0 */
    for (int i = 0; i < 16; i++) scale[i] = 0x3F80; /* BF16 1.0 */
    moeq_tensor t[3] = {
        {"m.weight_packed", MOEQ_DTYPE_I32, 2, {8, 8}, packed, 8 * 8 * 4, NULL},
        {"m.weight_scale", MOEQ_DTYPE_BF16, 2, {8, 2}, scale, 16 * 2, NULL},
        {"m.weight_shape", MOEQ_DTYPE_I64, 1, {2}, shape, 16, NULL},
    };
    uint32_t n = 3;
    float out[8 * 64];
    uint64_t out_bytes = sizeof out;
    int32_t od = MOEQ_DTYPE_F32;
    int64_t out_shape[2], *osp = out_shape;
    const char *m = r->b;
    if (strcmp(m, "no weight_scale") == 0) t[1] = t[2], n = 2;
    if (strcmp(m, "scale dtype I32") == 0) t[1].dtype = MOEQ_DTYPE_I32, t[1].shape[1] = 1;
    if (strcmp(m, "packed cols+1") == 0) t[0].shape[1] = 9, t[0].nbytes += 32;
    if (strcmp(m, "out_bytes-1") == 0) out_bytes = 1023, od = MOEQ_DTYPE_F16;
    if (strcmp(m, "out_dtype I8") == 0) od = MOEQ_DTYPE_I8;
    if (strcmp(m, "out_shape NULL") == 0) osp = NULL;
    if (strcmp(m, "scale nan") == 0) scale[3] = 0x7FC0;
    if (strcmp(m, "weight_shape [9, 64]") == 0) shape[0] = 9;
    if (strcmp(m, "strategy 77") == 0) w.strategy = 77;
    if (strcmp(m, "2^40 rows of 0 columns") == 0) {
        const int64_t R = (int64_t)1 << 40;
        t[0].shape[0] = t[1].shape[0] = R;
        t[0].shape[1] = t[1].shape[1] = 0;
        t[0].nbytes = t[1].nbytes = 0;
        shape[0] = R;
        shape[1] = 0;
    }
    moeq_status st = moeq_dequantize(&w, res.format, 0, "m", t, n, od, out, out_bytes, osp, err);
    if (st == MOEQ_STATUS_OK && strcmp(m, "none") == 0) {
        ck_assert(out_shape[0] == 8 && out_shape[1] == 64);
        for (int i = 0; i < 8 * 64; i++) ck_assert(out[i] == 0.0f);
    }
    moeq_config_destroy(cfg);
    return st;
}

/* Non-finite inputs: token 1 of 3 holds the bad value; its output row is
 * all NaN, and tokens 0 and 2 are bit for bit what they are when token 1 is
 * a row of zeros (same routing, so the fast path sums in the same order; a
 * zero row moves no per-tensor scale), and in the float64 reference what
 * they are in a call without token 1. */
static const moeq_test_scheme_args k_fp8_tensor = {
    "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"channel\"}",
    "{\"num_bits\":8,\"type\":\"float\",\"strategy\":\"tensor\",\"dynamic\":true}",
    "float-quantized", 0, 0};

static moeq_status run_nan(const bad_row *r, moeq_error *err) {
    moeq_test_layer tl;
    const moeq_test_scheme_args *a =
        r->b && strcmp(r->b, "per-tensor") == 0 ? &k_fp8_tensor : &k_test_schemes[r->n];
    moeq_test_layer_make(&tl, a, 4, AH, 32, 23);
    float x[AT * AH], out[AT * AH], x2[2 * AH], xz[AT * AH], outz[AT * AH];
    float w[AT * AK] = {0.5f, 0.5f, 0.7f, 0.3f, 0.9f, 0.1f}, w2[2 * AK];
    int32_t ids[AT * AK] = {0, 1, 2, 3, 1, 2}, ids2[2 * AK];
    double ref[AT * AH], ref2[2 * AH];
    for (int i = 0; i < AT * AH; i++) x[i] = (float)((i * 53) % 97 - 48) / 20.0f;
    float bad = strcmp(r->a, "nan") == 0    ? NAN
                : strcmp(r->a, "inf") == 0  ? INFINITY
                : strcmp(r->a, "-inf") == 0 ? -INFINITY
                                            : 3e38f; /* finite, but overflows on the way */
    if (strcmp(r->a, "huge") == 0) {
        for (int h = 0; h < AH; h++) x[AH + h] = bad;
    } else {
        x[AH + 7] = bad;
    }
    for (int t = 0, u = 0; t < AT; t++) {
        if (t == 1) continue;
        memcpy(x2 + u * AH, x + t * AH, sizeof(float) * AH);
        memcpy(ids2 + u * AK, ids + t * AK, sizeof(int32_t) * AK);
        memcpy(w2 + u * AK, w + t * AK, sizeof(float) * AK);
        u++;
    }
    memcpy(xz, x, sizeof xz);
    memset(xz + AH, 0, sizeof(float) * AH);
    moeq_ctx *ctx = NULL;
    moeq_error e2;
    ck_assert_ok(moeq_ctx_create(NULL, &ctx, &e2), &e2);
    moeq_status st =
        moeq_moe_apply(tl.layer, ctx, MOEQ_DTYPE_F32, x, AT, AK, ids, w, MOEQ_DTYPE_F32, out, err);
    if (st == MOEQ_STATUS_OK) {
        ck_assert_ok(moeq_moe_apply(tl.layer, ctx, MOEQ_DTYPE_F32, xz, AT, AK, ids, w,
                                    MOEQ_DTYPE_F32, outz, &e2),
                     &e2);
        ck_assert_ok(moeq_moe_apply_reference(tl.layer, MOEQ_DTYPE_F32, x, AT, AK, ids, w, ref, &e2),
                     &e2);
        ck_assert_ok(moeq_moe_apply_reference(tl.layer, MOEQ_DTYPE_F32, x2, 2, AK, ids2, w2, ref2,
                                              &e2),
                     &e2);
        for (int h = 0; h < AH; h++) {
            ck_assert_msg(isnan(out[AH + h]), "%s: token 1 out[%d] = %g, want NaN", r->a, h,
                          (double)out[AH + h]);
            ck_assert_msg(isnan(ref[AH + h]), "%s: reference token 1 [%d] = %g, want NaN", r->a, h,
                          ref[AH + h]);
        }
        ck_assert_msg(memcmp(out, outz, sizeof(float) * AH) == 0 &&
                          memcmp(out + 2 * AH, outz + 2 * AH, sizeof(float) * AH) == 0,
                      "%s: the other tokens changed", r->a);
        ck_assert_msg(memcmp(ref, ref2, sizeof(double) * AH) == 0 &&
                          memcmp(ref + 2 * AH, ref2 + AH, sizeof(double) * AH) == 0,
                      "%s: the other tokens changed in the reference", r->a);
        for (int h = 0; h < AH; h++) ck_assert(isfinite(out[h]) && isfinite(out[2 * AH + h]));
    }
    moeq_ctx_destroy(ctx);
    moeq_test_layer_free(&tl);
    return st;
}

START_TEST(test_catalogue) {
    const bad_row *r = &k_rows[_i];
    moeq_error err;
    moeq_error_clear(&err);
    moeq_status st = MOEQ_STATUS_INTERNAL;
    make_dir();
    switch (r->kind) {
        case CONFIG:
        case STRICT: st = run_config(r, &err); break;
        case CONFIG_FILE: st = run_config_file(r, &err); break;
        case RESOLVE:
        case RESOLVE_MOE: st = run_resolve(r, &err); break;
        case SELECT: st = run_select(r, &err); break;
        case OPEN: st = run_open(r, &err); break;
        case OPEN_PATH: st = run_open_path(r, &err); break;
        case INDEX: st = run_index(r, &err); break;
        case LOAD: st = run_load(r, &err); break;
        case CREATE: st = run_create(r, &err); break;
        case FINALIZE: st = run_finalize(r, &err); break;
        case APPLY: st = run_apply(r, &err); break;
        case ROUTE: st = run_route(r, &err); break;
        case DEQUANT: st = run_dequant(r, &err); break;
        case NAN_ROW: st = run_nan(r, &err); break;
    }
    remove_dir();
    /* MOEQ_CATALOGUE_PRINT=1 shows every row's message (to review them). */
    const char *print = getenv("MOEQ_CATALOGUE_PRINT");
    if (print && print[0] == '1') printf("row %d: %s: %s\n", _i, moeq_status_name(st), err.message);
    ck_assert_msg(st == r->want, "row %d (%s %s): status %s, want %s: %s", _i, r->a ? r->a : "NULL",
                  r->b ? r->b : "", moeq_status_name(st), moeq_status_name(r->want), err.message);
    if (r->want != MOEQ_STATUS_OK) {
        ck_assert_int_eq(err.code, r->want);
        ck_assert_msg(strstr(err.message, r->sub) != NULL, "row %d: message \"%s\" lacks \"%s\"", _i,
                      err.message, r->sub);
    }
}
END_TEST

/* A 200-byte checkpoint naming experts 0 and 999999 of one layer: inspect
 * used to account a million absent experts (9,000,000 missing tensors, 5 GB
 * and 80 s); the layer is now an error row and nothing is enumerated. */
START_TEST(test_inspect_sparse_expert_ids) {
    make_dir();
    static const uint16_t one = 0x3F80;
    moeq_tensor t[4] = {
        {"m.experts.0.gate_proj.weight", MOEQ_DTYPE_BF16, 1, {1}, &one, 2, NULL},
        {"m.experts.0.up_proj.weight", MOEQ_DTYPE_BF16, 1, {1}, &one, 2, NULL},
        {"m.experts.0.down_proj.weight", MOEQ_DTYPE_BF16, 1, {1}, &one, 2, NULL},
        {"m.experts.999999.gate_proj.weight", MOEQ_DTYPE_BF16, 1, {1}, &one, 2, NULL},
    };
    char path[400];
    snprintf(path, sizeof path, "%s/model.safetensors", g_dir);
    moeq_error err;
    ck_assert_ok(moeq_safetensors_write(path, t, 4, NULL, &err), &err);
    moeq_checkpoint *ck = NULL;
    ck_assert_ok(moeq_checkpoint_open(path, &ck, &err), &err);
    moeq_config *cfg = parse_or_fail(GROUP(W4));
    char *text = NULL;
    moeq_inspect_summary sum;
    ck_assert_ok(moeq_inspect(cfg, ck, NULL, &text, &sum, &err), &err);
    ck_assert_ptr_nonnull(strstr(text, "m.experts: LIMIT: MoE layer \"m.experts\": expert ids run to "
                                       "999999 but only 2 experts have tensors"));
    ck_assert_uint_eq(sum.errors, 1);
    ck_assert_uint_lt(sum.missing, 100);
    moeq_free(text);
    moeq_config_destroy(cfg);
    moeq_checkpoint_close(ck);
    remove_dir();
}
END_TEST

/* The catalogue covers what the brief of the hardening work asked for. */
START_TEST(test_catalogue_size) {
    int kinds[NAN_ROW + 1] = {0};
    for (int i = 0; i < N_ROWS; i++) kinds[k_rows[i].kind]++;
    ck_assert_int_ge(N_ROWS, 80);
    for (int k = 0; k <= NAN_ROW; k++) ck_assert_msg(kinds[k] > 0, "no rows of kind %d", k);
    printf("bad-input catalogue: %d rows\n", N_ROWS);
}
END_TEST

static Suite *bad_inputs_suite(void) {
    Suite *s = suite_create("bad_inputs");
    TCase *tc = tcase_create("catalogue");
    tcase_add_loop_test(tc, test_catalogue, 0, N_ROWS);
    tcase_add_test(tc, test_catalogue_size);
    tcase_add_test(tc, test_inspect_sparse_expert_ids);
    suite_add_tcase(s, tc);
    return s;
}

MOEQ_TEST_MAIN(bad_inputs_suite)

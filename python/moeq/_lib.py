"""Loading libmoeq and declaring its C API for ctypes.

Everything ctypes needs to know about moeq.h lives in this file: the struct
mirrors (field for field, same fixed-width types) and one table of function
prototypes.  The rest of the package calls ``lib.moeq_*`` and never declares a
type of its own.

Where the library comes from, first match wins:

1. ``MOEQ_LIBRARY``: the full path of a libmoeq shared library.  When it is
   set and cannot be loaded, importing fails (no silent fallback to another
   copy).
2. A copy inside this package directory (``libmoeq.so``, ``libmoeq.so.0``, ...):
   ``pip install ./python`` builds libmoeq and installs it there as
   ``libmoeq.so`` (python/CMakeLists.txt).
3. The system loader: ``ctypes.util.find_library("moeq")``, then
   ``libmoeq.so.0``.
"""

import ctypes
import ctypes.util
import os
import sys

from ._version import __version__

# The package speaks to the library of its own major.minor version.
EXPECTED_VERSION = tuple(int(part) for part in __version__.split(".")[:2])

MOEQ_ERROR_MESSAGE_SIZE = 2048
MOEQ_SELECT_REASON_SIZE = 2048
MOEQ_MAX_DIMS = 8

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_PACKAGED_NAMES = ("libmoeq.so", "libmoeq.so.0", "libmoeq.dylib", "libmoeq.0.dylib", "moeq.dll")


# --------------------------------------------------------------------------
# Struct mirrors of moeq.h (keep in the header's order; tests compare every
# offset and size with the C compiler's).
# --------------------------------------------------------------------------

c_int32_p = ctypes.POINTER(ctypes.c_int32)
c_float_p = ctypes.POINTER(ctypes.c_float)


class moeq_error(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_int32),
        ("message", ctypes.c_char * MOEQ_ERROR_MESSAGE_SIZE),
    ]


class moeq_quant_args(ctypes.Structure):
    _fields_ = [
        ("num_bits", ctypes.c_int32),
        ("type", ctypes.c_int32),
        ("symmetric", ctypes.c_int32),
        ("group_size", ctypes.c_int32),
        ("strategy", ctypes.c_int32),
        ("strategy_given", ctypes.c_int32),
        ("block_rows", ctypes.c_int32),
        ("block_cols", ctypes.c_int32),
        ("dynamic", ctypes.c_int32),
        ("actorder", ctypes.c_int32),
        ("scale_dtype", ctypes.c_int32),
        ("zp_dtype", ctypes.c_int32),
        ("observer", ctypes.c_char_p),
    ]


moeq_quant_args_p = ctypes.POINTER(moeq_quant_args)


class moeq_config_options(ctypes.Structure):
    _fields_ = [
        ("strict_keys", ctypes.c_int32),
        ("regex_match_limit", ctypes.c_uint32),
    ]


class moeq_group_view(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("index", ctypes.c_uint32),
        ("n_targets", ctypes.c_uint32),
        ("targets", ctypes.POINTER(ctypes.c_char_p)),
        ("weights", moeq_quant_args_p),
        ("input_activations", moeq_quant_args_p),
        ("output_activations", moeq_quant_args_p),
        ("format", ctypes.c_int32),
        ("preset", ctypes.c_int32),
    ]


class moeq_fused_name(ctypes.Structure):
    _fields_ = [
        ("fused", ctypes.c_char_p),
        ("n_shards", ctypes.c_uint32),
        ("shards", ctypes.POINTER(ctypes.c_char_p)),
    ]


class moeq_resolve_options(ctypes.Structure):
    _fields_ = [
        ("precedence", ctypes.c_int32),
        ("n_fused", ctypes.c_uint32),
        ("fused", ctypes.POINTER(moeq_fused_name)),
        ("no_fused", ctypes.c_int32),
    ]


class moeq_resolution(ctypes.Structure):
    _fields_ = [
        ("status", ctypes.c_int32),
        ("group_index", ctypes.c_int32),
        ("group_name", ctypes.c_char_p),
        ("target", ctypes.c_char_p),
        ("format", ctypes.c_int32),
        ("weights", moeq_quant_args_p),
        ("input_activations", moeq_quant_args_p),
        ("output_activations", moeq_quant_args_p),
        ("ignore_index", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("other_group_index", ctypes.c_int32),
    ]


class moeq_select_options(ctypes.Structure):
    _fields_ = [
        ("platform", ctypes.c_int32),
        ("prefer_mxint4", ctypes.c_int32),
    ]


class moeq_selection(ctypes.Structure):
    _fields_ = [
        ("scheme", ctypes.c_int32),
        ("reason", ctypes.c_char * MOEQ_SELECT_REASON_SIZE),
    ]


class moeq_plan_options(ctypes.Structure):
    _fields_ = [
        ("resolve", ctypes.POINTER(moeq_resolve_options)),
        ("select", ctypes.POINTER(moeq_select_options)),
        ("json", ctypes.c_int32),
        ("threads", ctypes.c_int32),
        ("engine", ctypes.c_char_p),
    ]


class moeq_tensor(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MOEQ_MAX_DIMS),
        ("data", ctypes.c_void_p),
        ("nbytes", ctypes.c_uint64),
        ("file", ctypes.c_char_p),
    ]


class moeq_route_config(ctypes.Structure):
    _fields_ = [
        ("num_experts", ctypes.c_int32),
        ("top_k", ctypes.c_int32),
        ("scoring", ctypes.c_int32),
        ("renormalize", ctypes.c_int32),
        ("num_expert_group", ctypes.c_int32),
        ("topk_group", ctypes.c_int32),
        ("correction_bias", c_float_p),
        ("routed_scaling_factor", ctypes.c_float),
    ]


class moeq_model_moe(ctypes.Structure):
    _fields_ = [
        ("family", ctypes.c_char * 32),
        ("model_type", ctypes.c_char * 32),
        ("known", ctypes.c_int32),
        ("num_experts", ctypes.c_int32),
        ("top_k", ctypes.c_int32),
        ("hidden_size", ctypes.c_int32),
        ("intermediate_size", ctypes.c_int32),
        ("scoring", ctypes.c_int32),
        ("renormalize", ctypes.c_int32),
        ("num_expert_group", ctypes.c_int32),
        ("topk_group", ctypes.c_int32),
        ("routed_scaling_factor", ctypes.c_float),
        ("apply_router_weight_on_input", ctypes.c_int32),
        ("activation", ctypes.c_int32),
        ("swiglu_alpha", ctypes.c_float),
        ("swiglu_limit", ctypes.c_float),
        ("gated", ctypes.c_int32),
        ("expert_bias", ctypes.c_int32),
        ("n_shared_experts", ctypes.c_int32),
        ("shared_expert_gate", ctypes.c_int32),
        ("params_dtype", ctypes.c_int32),
        ("moe_block", ctypes.c_char * 32),
        ("router", ctypes.c_char * 32),
        ("router_bias", ctypes.c_int32),
        ("correction_bias", ctypes.c_char * 64),
        ("experts", ctypes.c_char * 32),
        ("proj", (ctypes.c_char * 16) * 3),
        ("defaults", ctypes.c_char * 512),
        ("unknown_defaults", ctypes.c_int32),
    ]


class moeq_moe_config(ctypes.Structure):
    _fields_ = [
        ("scheme", ctypes.c_int32),
        ("weights", moeq_quant_args_p),
        ("input_activations", moeq_quant_args_p),
        ("format", ctypes.c_int32),
        ("dequant_flags", ctypes.c_uint32),
        ("prefix", ctypes.c_char_p),
        ("proj_names", ctypes.POINTER(ctypes.c_char_p)),
        ("num_experts", ctypes.c_int32),
        ("num_local_experts", ctypes.c_int32),
        ("expert_map", c_int32_p),
        ("first_expert", ctypes.c_int32),
        ("hidden_size", ctypes.c_int32),
        ("intermediate_size", ctypes.c_int32),
        ("activation", ctypes.c_int32),
        ("swiglu_alpha", ctypes.c_float),
        ("swiglu_limit", ctypes.c_float),
        ("params_dtype", ctypes.c_int32),
        ("has_bias", ctypes.c_int32),
        ("routed_scaling_factor", ctypes.c_float),
        ("apply_router_weight_on_input", ctypes.c_int32),
        ("non_gated", ctypes.c_int32),
    ]


class moeq_linear_config(ctypes.Structure):
    _fields_ = [
        ("scheme", ctypes.c_int32),
        ("weights", moeq_quant_args_p),
        ("input_activations", moeq_quant_args_p),
        ("format", ctypes.c_int32),
        ("dequant_flags", ctypes.c_uint32),
        ("name", ctypes.c_char_p),
        ("in_features", ctypes.c_int32),
        ("out_features", ctypes.c_int32),
        ("has_bias", ctypes.c_int32),
        ("params_dtype", ctypes.c_int32),
        ("num_shards", ctypes.c_int32),
        ("shard_names", ctypes.POINTER(ctypes.c_char_p)),
        ("shard_out_features", c_int32_p),
    ]


class moeq_param(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * 4),
        ("data", ctypes.c_void_p),
        ("nbytes", ctypes.c_uint64),
        ("ckpt_suffix", ctypes.c_char_p),
        ("layout", ctypes.c_int32),
        ("quant_method", ctypes.c_int32),
        ("is_transposed", ctypes.c_int32),
        ("required", ctypes.c_int32),
    ]


class moeq_ctx_options(ctypes.Structure):
    _fields_ = [
        ("threads", ctypes.c_int32),
        ("force_ref", ctypes.c_int32),
    ]


class moeq_inspect_options(ctypes.Structure):
    _fields_ = [
        ("resolve", ctypes.POINTER(moeq_resolve_options)),
        ("select", ctypes.POINTER(moeq_select_options)),
        ("json", ctypes.c_int32),
        ("names_only", ctypes.c_int32),
        ("engine", ctypes.c_char_p),
    ]


class moeq_engine_verdict(ctypes.Structure):
    _fields_ = [
        ("engine", ctypes.c_char * 128),
        ("scheme", ctypes.c_char * 128),
        ("error", ctypes.c_char * MOEQ_ERROR_MESSAGE_SIZE),
        ("branch", ctypes.c_char * 128),
        ("group_index", ctypes.c_int32),
        ("args_group_index", ctypes.c_int32),
        ("differs", ctypes.c_uint32),
        ("moeq_scheme", ctypes.c_int32),
    ]


class moeq_inspect_summary(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "tensors", "modules", "moe_layers", "expert_modules", "quantized", "ignored",
        "unmatched", "unconsumed", "missing", "errors", "warnings")]


class moeq_synth_group(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("n_targets", ctypes.c_uint32),
        ("targets", ctypes.POINTER(ctypes.c_char_p)),
        ("weights", moeq_quant_args_p),
        ("input_activations", moeq_quant_args_p),
        ("format", ctypes.c_int32),
    ]


class moeq_synth_layout(ctypes.Structure):
    _fields_ = [
        ("model_type", ctypes.c_char_p),
        ("num_layers", ctypes.c_int32),
        ("first_dense_layers", ctypes.c_int32),
        ("num_experts", ctypes.c_int32),
        ("top_k", ctypes.c_int32),
        ("hidden_size", ctypes.c_int32),
        ("moe_intermediate_size", ctypes.c_int32),
        ("intermediate_size", ctypes.c_int32),
        ("n_shared_experts", ctypes.c_int32),
        ("scoring", ctypes.c_int32),
        ("norm_topk_prob", ctypes.c_int32),
        ("n_group", ctypes.c_int32),
        ("topk_group", ctypes.c_int32),
        ("routed_scaling_factor", ctypes.c_float),
        ("correction_bias", ctypes.c_int32),
        ("num_attention_heads", ctypes.c_int32),
        ("num_key_value_heads", ctypes.c_int32),
        ("vocab_size", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("seed", ctypes.c_uint64),
        ("shards", ctypes.c_int32),
        ("calibration_tokens", ctypes.c_int32),
        ("weight_std", ctypes.c_float),
        ("n_groups", ctypes.c_uint32),
        ("groups", ctypes.POINTER(moeq_synth_group)),
        ("n_ignore", ctypes.c_uint32),
        ("ignore", ctypes.POINTER(ctypes.c_char_p)),
    ]


# [load] moeq_model_load (src/load/)
class moeq_model_layer_info(ctypes.Structure):
    _fields_ = [
        ("prefix", ctypes.c_char * 256),
        ("experts", ctypes.c_int32),
        ("found_experts", ctypes.c_int32),
        ("has_bias", ctypes.c_int32),
        ("proj", ctypes.c_char_p * 3),
        ("tensors", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
    ]


class moeq_model_progress(ctypes.Structure):
    _fields_ = [
        ("layers_done", ctypes.c_uint32),
        ("layers", ctypes.c_uint32),
        ("bytes_done", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("seconds", ctypes.c_double),
        ("layer", ctypes.c_char_p),
        ("linear", ctypes.c_int32),
    ]


MODEL_PROGRESS_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(moeq_model_progress),
                                     ctypes.c_void_p)


class moeq_model_load_options(ctypes.Structure):
    _fields_ = [
        ("threads", ctypes.c_int32),
        ("select", ctypes.c_void_p),
        ("progress", MODEL_PROGRESS_FN),
        ("user_data", ctypes.c_void_p),
        ("moe_only", ctypes.c_int32),
    ]


class moeq_model_load_summary(ctypes.Structure):
    _fields_ = [
        ("layers", ctypes.c_uint32),
        ("experts", ctypes.c_uint64),
        ("tensors", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("resident", ctypes.c_uint64),
        ("seconds", ctypes.c_double),
        ("gb_per_s", ctypes.c_double),
        ("rss_before", ctypes.c_uint64),
        ("rss_after", ctypes.c_uint64),
        ("peak_rss", ctypes.c_uint64),
        ("linear_layers", ctypes.c_uint32),
        ("linear_tensors", ctypes.c_uint64),
        ("linear_bytes", ctypes.c_uint64),
        ("linear_resident", ctypes.c_uint64),
    ]


# Every struct above, by its C name (the ABI layout test walks this).
STRUCTS = {
    cls.__name__: cls
    for cls in (
        moeq_error, moeq_quant_args, moeq_config_options, moeq_group_view, moeq_fused_name,
        moeq_resolve_options, moeq_resolution, moeq_select_options, moeq_selection,
        moeq_plan_options, moeq_tensor, moeq_route_config, moeq_model_moe, moeq_moe_config,
        moeq_linear_config, moeq_param,
        moeq_ctx_options, moeq_inspect_options, moeq_inspect_summary, moeq_synth_group,
        moeq_synth_layout, moeq_engine_verdict,
        moeq_model_layer_info, moeq_model_progress, moeq_model_load_options,
        moeq_model_load_summary,
    )
}

PROGRESS_FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p)

LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_char_p, ctypes.c_void_p)

# --------------------------------------------------------------------------
# Function prototypes: name -> (restype, argtypes, required).
# Functions still being written elsewhere (moeq_inspect, moeq_compress,
# moeq_synth_write, ...) go in with required=False: the package imports
# without them and its wrapper raises UnsupportedError until the library has
# the symbol (call _core.require(name) first).
# --------------------------------------------------------------------------

_st = ctypes.c_int32  # moeq_status
_h = ctypes.c_void_p  # an opaque handle
_hp = ctypes.POINTER(ctypes.c_void_p)  # OUT handle
_e = ctypes.POINTER(moeq_error)
_s = ctypes.c_char_p
_u32 = ctypes.c_uint32
_i32 = ctypes.c_int32
_i64 = ctypes.c_int64
_u64 = ctypes.c_uint64
_sz = ctypes.c_size_t
_tp = ctypes.POINTER(moeq_tensor)

PROTOTYPES = {
    # version, status, dtypes, names
    "moeq_version": (_s, [], True),
    "moeq_version_number": (_i32, [], True),
    "moeq_status_name": (_s, [_i32], True),
    "moeq_status_str": (_s, [_i32], True),
    "moeq_error_clear": (None, [_e], True),
    "moeq_set_log_callback": (None, [LOG_FN, ctypes.c_void_p], True),
    "moeq_dtype_name": (_s, [_i32], True),
    "moeq_dtype_size": (_sz, [_i32], True),
    "moeq_dtype_from_name": (_i32, [_s], True),
    "moeq_actorder_is_group": (_i32, [_i32], True),
    "moeq_strategy_name": (_s, [_i32], True),
    "moeq_actorder_name": (_s, [_i32], True),
    "moeq_quant_args_summary": (_sz, [moeq_quant_args_p, ctypes.c_char_p, _sz], True),
    "moeq_format_name": (_s, [_i32], True),
    "moeq_free": (None, [ctypes.c_void_p], True),
    # config
    "moeq_config_parse": (
        _st, [ctypes.c_void_p, _sz, ctypes.POINTER(moeq_config_options), _hp, _e], True),
    "moeq_config_load": (_st, [_s, ctypes.POINTER(moeq_config_options), _hp, _e], True),
    "moeq_config_destroy": (None, [_h], True),
    "moeq_config_source_key": (_s, [_h], True),
    "moeq_config_format": (_i32, [_h], True),
    "moeq_config_version": (_s, [_h], True),
    "moeq_config_quantization_status": (_s, [_h], True),
    "moeq_config_raw": (_s, [_h, _s], True),
    "moeq_config_kv_cache_scheme": (moeq_quant_args_p, [_h], True),
    "moeq_config_ignore_count": (_u32, [_h], True),
    "moeq_config_ignore": (_s, [_h, _u32], True),
    "moeq_config_warning_count": (_u32, [_h], True),
    "moeq_config_warning": (_s, [_h, _u32], True),
    "moeq_config_group_count": (_u32, [_h], True),
    "moeq_config_group": (_st, [_h, _u32, ctypes.POINTER(moeq_group_view)], True),
    "moeq_config_group_format": (_i32, [_h, _u32], True),
    "moeq_config_model_number": (_st, [_h, _s, ctypes.POINTER(ctypes.c_double)], True),
    "moeq_config_model_string": (_s, [_h, _s], True),
    "moeq_config_moe_sparsity": (_i32, [_h, ctypes.POINTER(_u32)], True),
    "moeq_config_moe_sparsity_layer": (_i32, [_h, _u32], True),
    "moeq_config_retained_experts": (_st, [_h, _s, ctypes.POINTER(_i32), _e], True),
    "moeq_model_moe_get": (_st, [_h, ctypes.POINTER(moeq_model_moe), _e], True),
    "moeq_model_family": (_st, [_s, ctypes.POINTER(moeq_model_moe), _e], True),
    "moeq_model_family_name": (_s, [ctypes.c_uint32], True),
    "moeq_model_family_source": (_s, [ctypes.c_uint32], True),
    "moeq_model_moe_summary": (
        ctypes.c_size_t, [ctypes.POINTER(moeq_model_moe), ctypes.c_char_p, ctypes.c_size_t],
        True),
    "moeq_config_dequant_flags": (_u32, [_h], True),
    # resolve, select, plan
    "moeq_resolve": (
        _st, [_h, _s, _i32, ctypes.POINTER(moeq_resolve_options),
              ctypes.POINTER(moeq_resolution), _e], True),
    "moeq_resolve_moe": (
        _st, [_h, _s, _u32, ctypes.POINTER(ctypes.c_char_p),
              ctypes.POINTER(moeq_resolve_options), ctypes.POINTER(moeq_resolution), _e], True),
    "moeq_scheme_name": (_s, [_i32], True),
    "moeq_scheme_from_name": (_i32, [_s], True),
    "moeq_scheme_summary": (_s, [_i32], True),
    "moeq_select": (
        _st, [ctypes.POINTER(moeq_resolution), _s, ctypes.POINTER(moeq_select_options),
              ctypes.POINTER(moeq_selection), _e], True),
    "moeq_plan": (
        _st, [_h, ctypes.c_void_p, _sz, ctypes.POINTER(moeq_plan_options), _hp,
              ctypes.POINTER(_u32), _e], True),
    # checkpoints, dequantization
    "moeq_checkpoint_open": (_st, [_s, _hp, _e], True),
    "moeq_checkpoint_close": (None, [_h], True),
    "moeq_checkpoint_tensor_count": (_u64, [_h], True),
    "moeq_checkpoint_tensor": (_st, [_h, _u64, _tp], True),
    "moeq_checkpoint_find": (_st, [_h, _s, _tp], True),
    "moeq_safetensors_write": (_st, [_s, _tp, _u32, _s, _e], True),
    "moeq_dequantize": (
        _st, [moeq_quant_args_p, _i32, _u32, _s, _tp, _u32, _i32, ctypes.c_void_p, _u64,
              ctypes.POINTER(_i64), _e], True),
    # routing
    "moeq_route": (
        _st, [ctypes.POINTER(moeq_route_config), c_float_p, _i64, c_int32_p, c_float_p, _e],
        True),
    # MoE layers
    "moeq_moe_create": (_st, [ctypes.POINTER(moeq_moe_config), _hp, _e], True),
    "moeq_moe_destroy": (None, [_h], True),
    "moeq_moe_scheme": (_i32, [_h], True),
    "moeq_moe_param_count": (_u32, [_h], True),
    "moeq_moe_param": (_st, [_h, _u32, ctypes.POINTER(moeq_param)], True),
    "moeq_moe_find_param": (_st, [_h, _s, ctypes.POINTER(moeq_param)], True),
    "moeq_moe_load": (_st, [_h, _tp, c_int32_p, _e], True),
    "moeq_moe_missing": (_st, [_h, _hp, ctypes.POINTER(_u32), _e], True),
    "moeq_moe_finalize": (_st, [_h, _e], True),
    "moeq_ctx_create": (_st, [ctypes.POINTER(moeq_ctx_options), _hp, _e], True),
    "moeq_ctx_destroy": (None, [_h], True),
    "moeq_ctx_kernels": (_s, [_h], True),
    "moeq_moe_apply": (
        _st, [_h, _h, _i32, ctypes.c_void_p, _i64, _i32, c_int32_p, c_float_p, _i32,
              ctypes.c_void_p, _e], True),
    "moeq_moe_apply_reference": (
        _st, [_h, _i32, ctypes.c_void_p, _i64, _i32, c_int32_p, c_float_p,
              ctypes.POINTER(ctypes.c_double), _e], True),
    "moeq_moe_load_checkpoint": (
        _st, [_h, _h, _s, PROGRESS_FN, ctypes.c_void_p, ctypes.POINTER(_u64),
              ctypes.POINTER(_u64), _e], True),
    # linear layers
    "moeq_linear_create": (_st, [ctypes.POINTER(moeq_linear_config), _hp, _e], True),
    "moeq_linear_destroy": (None, [_h], True),
    "moeq_linear_scheme": (_i32, [_h], True),
    "moeq_linear_param_count": (_u32, [_h], True),
    "moeq_linear_param": (_st, [_h, _u32, ctypes.POINTER(moeq_param)], True),
    "moeq_linear_find_param": (_st, [_h, _s, ctypes.POINTER(moeq_param)], True),
    "moeq_linear_load": (_st, [_h, _tp, c_int32_p, _e], True),
    "moeq_linear_missing": (_st, [_h, _hp, ctypes.POINTER(_u32), _e], True),
    "moeq_linear_load_checkpoint": (_st, [_h, _h, ctypes.POINTER(_u64), _e], True),
    "moeq_linear_finalize": (_st, [_h, _e], True),
    "moeq_linear_apply": (
        _st, [_h, _h, _i32, ctypes.c_void_p, _i64, _i32, ctypes.c_void_p, _e], True),
    "moeq_linear_apply_reference": (
        _st, [_h, _i32, ctypes.c_void_p, _i64, ctypes.POINTER(ctypes.c_double), _e], True),
    # [load] one layer in one step; every MoE layer of a checkpoint directory
    "moeq_moe_load_finalize": (
        _st, [_h, _h, _s, ctypes.c_int32, PROGRESS_FN, ctypes.c_void_p, _e], True),
    "moeq_model_load": (
        _st, [_s, ctypes.POINTER(moeq_model_load_options), _hp,
              ctypes.POINTER(moeq_model_load_summary), _e], True),
    "moeq_model_destroy": (None, [_h], True),
    "moeq_model_config": (_h, [_h], True),
    "moeq_model_layer_count": (ctypes.c_uint32, [_h], True),
    "moeq_model_layer": (_h, [_h, ctypes.c_uint32, ctypes.POINTER(ctypes.c_char_p)], True),
    "moeq_model_linear_count": (ctypes.c_uint32, [_h], True),
    "moeq_model_linear": (_h, [_h, ctypes.c_uint32, ctypes.POINTER(ctypes.c_char_p)], True),
    # the writer side: compressing weights, synthetic checkpoints
    "moeq_tensor_set_create": (_st, [_hp, _e], True),
    "moeq_tensor_set_destroy": (None, [_h], True),
    "moeq_tensor_set_count": (_u32, [_h], True),
    "moeq_tensor_set_get": (_tp, [_h, _u32], True),
    "moeq_compress": (
        _st, [moeq_quant_args_p, _i32, _s, c_float_p, _i64, _i64, _i32, c_int32_p,
              ctypes.c_float, _hp, _e], True),
    "moeq_compress_input": (
        _st, [moeq_quant_args_p, _s, c_float_p, _i64, _i64, _i32, _hp, _e], True),
    "moeq_nvfp4_global_scale": (ctypes.c_float, [ctypes.c_float, _i32], True),
    "moeq_synth_write": (_st, [ctypes.POINTER(moeq_synth_layout), _s, _e], True),
    "moeq_synth_original": (
        _st, [ctypes.POINTER(moeq_synth_layout), _s, c_float_p, _u64, ctypes.POINTER(_i64), _e],
        True),
    "moeq_synth_preset": (_st, [_s, ctypes.POINTER(moeq_synth_layout), _e], True),
    "moeq_synth_preset_name": (_s, [_u32], True),
    "moeq_synth_preset_summary": (_s, [_u32], True),
    # inspecting a checkpoint
    "moeq_inspect": (
        _st, [_h, _h, ctypes.POINTER(moeq_inspect_options), _hp,
              ctypes.POINTER(moeq_inspect_summary), _e], True),
    # engine dispatch models
    "moeq_engine_count": (_u32, [], True),
    "moeq_engine_name": (_s, [_u32], True),
    "moeq_engine_summary": (_s, [_u32], True),
    "moeq_engine_judge": (
        _st, [_h, _s, _s, _u32, ctypes.POINTER(ctypes.c_char_p),
              ctypes.POINTER(moeq_resolve_options), ctypes.POINTER(moeq_select_options),
              ctypes.POINTER(moeq_engine_verdict), _e], True),
}


def _candidates():
    """(path or soname, where it came from) in search order."""
    env = os.environ.get("MOEQ_LIBRARY")
    if env:
        return [(env, "MOEQ_LIBRARY")]
    found = []
    for name in _PACKAGED_NAMES:
        path = os.path.join(_PACKAGE_DIR, name)
        if os.path.exists(path):
            found.append((path, "package directory"))
    system = ctypes.util.find_library("moeq")
    if system:
        found.append((system, "ctypes.util.find_library"))
    if sys.platform.startswith("linux"):
        found.append(("libmoeq.so.0", "system loader"))
    return found


def _load():
    tried = []
    for path, origin in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as exc:
            if origin == "MOEQ_LIBRARY":
                raise ImportError(
                    f"moeq: MOEQ_LIBRARY={path!r} cannot be loaded: {exc}") from exc
            tried.append(f"{path} ({origin}: {exc})")
    raise ImportError(
        "moeq: libmoeq was not found.  Install the package with `pip install ./python` "
        "(which builds libmoeq into it), set MOEQ_LIBRARY to the full path of libmoeq.so "
        "(e.g. build/libmoeq.so), or install libmoeq where the system loader finds it." + ("  Tried: " + "; ".join(tried) if tried else ""))


def _declare(cdll, path):
    missing_required, available = [], set()
    for name, (restype, argtypes, required) in PROTOTYPES.items():
        try:
            fn = getattr(cdll, name)
        except AttributeError:
            if required:
                missing_required.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
        available.add(name)
    if missing_required:
        raise ImportError(f"moeq: {path} lacks {', '.join(missing_required)}: it is not a "
                          f"libmoeq this package can use")
    return available


def _check_version(cdll, path):
    try:
        cdll.moeq_version_number.restype = ctypes.c_int32
        cdll.moeq_version_number.argtypes = []
        cdll.moeq_version.restype = ctypes.c_char_p
        cdll.moeq_version.argtypes = []
    except AttributeError as exc:
        raise ImportError(f"moeq: {path} is not libmoeq: {exc}") from exc
    number = cdll.moeq_version_number()
    have = (number // 10000, number // 100 % 100)
    if have != EXPECTED_VERSION:
        raise ImportError(
            f"moeq: {path} is libmoeq {cdll.moeq_version().decode()} (version number "
            f"{number}); this package needs {EXPECTED_VERSION[0]}.{EXPECTED_VERSION[1]}.x")


lib, path = _load()
_check_version(lib, path)  # first: a library of another version may lack symbols
_available = _declare(lib, path)


def has(name):
    """True when the loaded library exports `name` (for optional functions)."""
    return name in _available

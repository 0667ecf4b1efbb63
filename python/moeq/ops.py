"""Stateless operations: dequantize one module's weight, route tokens to experts."""

import ctypes

import numpy as np

from . import _errors
from ._core import (cstr, dtype_value, float32_array, format_value, int32, lookup, out_buffer,
                    tensor_array, to_torch, torch_dtype_name, wants_torch)
from ._lib import lib, moeq_route_config
from .config import args_pointer

# Flags for dequantize() (see moeq_config_dequant_flags / Config.dequant_flags).
DEQUANT_LEGACY_PACKING = 0x1
DEQUANT_MXFP4_V013 = 0x2

OUT_DTYPES = {"F32": np.dtype("<f4"), "BF16": np.dtype("<u2"), "F16": np.dtype("<f2")}
SCORINGS = {"softmax": 0, "sigmoid": 1}


def _float_array(x, what, ndim):
    return float32_array(x, what, ndim)


def dequantize(weights_args, format, tensors, module="", flags=0, out_dtype="F32"):
    """Dequantizes one module's weight -> ndarray [out_features, in_features].

    weights_args: QuantArgs (e.g. resolution["weights"]) or a dict of
    QuantizationArgs keys; None for dense formats.  format: its name
    ("pack-quantized").  tensors: {name: ndarray or (dtype, ndarray)} with
    full or bare parameter names ("weight_packed", "weight_scale", ...); CPU torch
    tensors are read in place (torch.bfloat16 scales as BF16).  out_dtype: "F32",
    "BF16" (returned as uint16 bits) or "F16", or a torch dtype.  With any torch
    tensor among `tensors` the result is a torch tensor (BF16 as torch.bfloat16)."""
    torch_result = wants_torch(tensors)
    out_dtype = torch_dtype_name(out_dtype) or out_dtype
    args, keep_args = args_pointer(weights_args, "weights_args")
    fmt = format_value(format)
    if out_dtype not in OUT_DTYPES:
        _errors.fail("DTYPE", f"out_dtype {out_dtype!r} is not one of {sorted(OUT_DTYPES)}")
    items = list(tensors.items()) if isinstance(tensors, dict) else list(tensors)
    arr, keep = tensor_array(items)
    mod = cstr(module or "", "module")
    shape = (ctypes.c_int64 * 2)()
    common = (args, fmt, int32(flags, "flags", unsigned=True), mod, arr, len(items), dtype_value(out_dtype))
    _errors.call(lib.moeq_dequantize, *common, None, 0, shape)
    out, ptr = out_buffer((shape[0], shape[1]), OUT_DTYPES[out_dtype])
    _errors.call(lib.moeq_dequantize, *common, ptr, out.nbytes, shape)
    del keep, keep_args
    return to_torch(out, out_dtype) if torch_result else out


def route(logits, top_k, scoring="softmax", renormalize=True, num_expert_group=0, topk_group=0,
          correction_bias=None, routed_scaling_factor=0.0):
    """Routes tokens: logits [T, E] -> (ids int32 [T, top_k], weights float32 [T, top_k]).

    scoring: "softmax" or "sigmoid".  Grouped top-k (DeepSeek-V3) with
    num_expert_group/topk_group; correction_bias [E] chooses experts but is
    not added to the weights.  routed_scaling_factor 0 means 1.  Floating
    inputs are converted to float32 (a float32 ndarray or CPU torch tensor is read
    in place).  Given a torch tensor, returns torch tensors (ids torch.int32)."""
    torch_result = wants_torch(logits)
    x = _float_array(logits, "logits [T, E]", 2)
    tokens, experts = x.shape
    cfg = moeq_route_config()
    cfg.num_experts = experts
    cfg.top_k = int32(top_k, "top_k")
    cfg.scoring = lookup(SCORINGS, scoring, "scoring")
    cfg.renormalize = 1 if renormalize else 0
    cfg.num_expert_group = int32(num_expert_group, "num_expert_group")
    cfg.topk_group = int32(topk_group, "topk_group")
    cfg.routed_scaling_factor = float(routed_scaling_factor)
    bias = None
    if correction_bias is not None:
        bias = _float_array(correction_bias, "correction_bias [E]", 1)
        if bias.shape[0] != experts:
            _errors.fail("SHAPE", f"correction_bias has {bias.shape[0]} values, logits "
                                  f"{experts} experts")
        cfg.correction_bias = bias.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    # tokens == 0 checks the config alone: a bad top_k fails before anything is allocated.
    _errors.call(lib.moeq_route, ctypes.byref(cfg), None, 0, None, None)
    k = cfg.top_k
    ids = np.empty((tokens, k), np.int32)
    weights = np.empty((tokens, k), np.float32)
    f32p = ctypes.POINTER(ctypes.c_float)
    i32p = ctypes.POINTER(ctypes.c_int32)
    _errors.call(lib.moeq_route, ctypes.byref(cfg),
                 x.ctypes.data_as(f32p) if tokens else None, tokens,
                 ids.ctypes.data_as(i32p) if tokens else None,
                 weights.ctypes.data_as(f32p) if tokens else None)
    del bias
    if torch_result:
        return to_torch(ids), to_torch(weights)
    return ids, weights

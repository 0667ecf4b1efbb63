"""The writer side: quantizing weights as compressed-tensors does, and
writing small synthetic checkpoints (moeq_compress, moeq_compress_input,
moeq_synth_*)."""

import ctypes

import numpy as np

from . import _errors
from ._core import cstr, dtype_name, dtype_value, format_value, numpy_dtype, view
from ._lib import lib, moeq_synth_layout
from .config import args_pointer


def _take_set(handle):
    """A moeq_tensor_set -> {name: ndarray copy}, then frees it."""
    try:
        out = {}
        for i in range(lib.moeq_tensor_set_count(handle)):
            t = lib.moeq_tensor_set_get(handle, i).contents
            arr, _ = view(t.data, numpy_dtype(t.dtype), t.shape[:t.ndim], True, None)
            out[t.name.decode()] = (dtype_name(t.dtype), np.array(arr, copy=True))
        return out
    finally:
        lib.moeq_tensor_set_destroy(handle)


def _float_rows(x, what, cols=None):
    a = np.ascontiguousarray(x, dtype="<f4")
    if a.ndim != 2 or (cols is not None and a.shape[1] != cols):
        _errors.fail("SHAPE", f"{what} has shape {a.shape}, expected a 2-D [rows, cols] array")
    return a


def compress(weights_args, format, module, weight, weight_dtype="BF16", g_idx=None,
             global_scale=0.0):
    """Quantizes weight [out, in] as compressed-tensors 0.18 stores a module
    (moeq_compress) -> {"<module>.<param>": (dtype name, ndarray)}."""
    w = _float_rows(weight, "weight")
    ptr, keep = args_pointer(weights_args, "weights_args")
    gi = None
    if g_idx is not None:
        gi = np.ascontiguousarray(g_idx, dtype="<i4")
        if gi.shape != (w.shape[1],):
            _errors.fail("SHAPE", f"g_idx has shape {gi.shape}, expected ({w.shape[1]},)")
    handle = ctypes.c_void_p()
    _errors.call(lib.moeq_compress, ptr, format_value(format), cstr(module, "module"),
                 w.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), w.shape[0], w.shape[1],
                 dtype_value(weight_dtype),
                 gi.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)) if gi is not None else None,
                 float(global_scale), ctypes.byref(handle))
    del keep
    return _take_set(handle)


def compress_input(input_args, module, x, x_dtype="BF16"):
    """The static activation tensors CT stores for a module's inputs,
    calibrated on x [tokens, in] (moeq_compress_input) -> {name: (dtype, ndarray)}."""
    a = _float_rows(x, "x")
    ptr, keep = args_pointer(input_args, "input_args")
    handle = ctypes.c_void_p()
    _errors.call(lib.moeq_compress_input, ptr, cstr(module, "module"),
                 a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), a.shape[0], a.shape[1],
                 dtype_value(x_dtype), ctypes.byref(handle))
    del keep
    return _take_set(handle) if handle.value else {}


def nvfp4_global_scale(amax, dtype="BF16"):
    """compressed-tensors' NVFP4 global scale 448*6/amax, computed in `dtype`."""
    return float(lib.moeq_nvfp4_global_scale(float(amax), dtype_value(dtype)))


def synth_presets():
    """[(name, description)] of the synthetic checkpoint layouts."""
    out, i = [], 0
    while True:
        name = lib.moeq_synth_preset_name(i)
        if not name:
            return out
        out.append((name.decode(), lib.moeq_synth_preset_summary(i).decode()))
        i += 1


# Scalar fields of moeq_synth_layout a caller may override on a preset.
_SCALARS = {name for name, ctype in moeq_synth_layout._fields_
            if ctype in (ctypes.c_int32, ctypes.c_uint64, ctypes.c_float)
            and name not in ("n_groups", "n_ignore")}


def _layout(preset, overrides):
    layout = moeq_synth_layout()
    _errors.call(lib.moeq_synth_preset, cstr(preset, "preset"), ctypes.byref(layout))
    for key, value in overrides.items():
        if key == "dtype":
            value = dtype_value(value)
        elif key == "scoring":
            value = {"softmax": 0, "sigmoid": 1}.get(value, value)
        if key not in _SCALARS:
            _errors.fail("INVALID_ARG", f"{key!r} is not a layout field that can be set "
                                        f"(one of {sorted(_SCALARS)})")
        setattr(layout, key, value)
    return layout


def synth_write(directory, preset="glm-mini", **fields):
    """Writes a synthetic compressed-tensors checkpoint (moeq_synth_write) for a
    named layout, with scalar fields overridden (num_experts=16, seed=3,
    shards=2, hidden_size=..., ...)."""
    layout = _layout(preset, fields)
    _errors.call(lib.moeq_synth_write, ctypes.byref(layout), cstr(str(directory), "directory"))


def synth_original(name, preset="glm-mini", **fields):
    """The float values the synthetic writer quantized for tensor `name` (or a
    module's "<module>.input_calibration" batch), as float32 [rows, cols]."""
    layout = _layout(preset, fields)
    shape = (ctypes.c_int64 * 2)()
    nb = cstr(name, "name")
    _errors.call(lib.moeq_synth_original, ctypes.byref(layout), nb, None, 0, shape)
    out = np.empty((shape[0], shape[1]), np.float32)
    _errors.call(lib.moeq_synth_original, ctypes.byref(layout), nb,
                 out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), out.size, shape)
    return out

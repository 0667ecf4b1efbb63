"""Linear layers (moeq_linear_*): a quantized y = x W^T (+ bias), mirroring MoELayer."""

import ctypes

import numpy as np

from . import _errors
from ._core import (SCHEMES, as_c_array, cstr, dtype_value, format_value, int32, lookup,
                    name_of, to_torch, torch_dtype_name, wants_torch)
from ._lib import lib, moeq_linear_config
from .config import args_pointer
from .moe import IO_DTYPES, _default_context, _Layer, _out_array


class Linear(_Layer):
    """One linear module (mirrors moeq_linear_config): y [T, out] = x [T, in] W^T (+ bias).

    Create, load() its checkpoint tensors ("<name>.weight_packed", ...; for a
    fused module its shards', "<parent>.q_proj.weight_scale", ...) or write
    through param_array(), finalize(), then apply() from any number of threads,
    each with its own Context.  scheme: a name from moeq.schemes() (from
    Config.select of Config.resolve(name)); weights_args/input_args: QuantArgs
    or dicts; format: the resolution's format name.  shards: for a fused module
    (qkv_proj from q/k/v_proj) a list of (shard name, out features), whose
    rows stack in that order.  Linear.from_config does all of that."""

    _what = "linear layer"
    _c = "linear"

    def __init__(self, scheme, weights_args, input_args, format, in_features, out_features, *,
                 name, dequant_flags=0, has_bias=False, params_dtype=None, shards=None):
        c = moeq_linear_config()
        c.scheme = lookup(SCHEMES, scheme, "scheme")
        c.weights, keep_w = args_pointer(weights_args, "weights_args")
        c.input_activations, keep_a = args_pointer(input_args, "input_args")
        c.format = format_value(format)
        c.dequant_flags = int32(dequant_flags, "dequant_flags", unsigned=True)
        c.name = cstr(name, "name")
        c.in_features = int32(in_features, "in_features")
        c.out_features = int32(out_features, "out_features")
        c.has_bias = 1 if has_bias else 0
        c.params_dtype = 0 if params_dtype is None else dtype_value(params_dtype)
        names = outs = None
        if shards:
            shards = list(shards)
            names = (ctypes.c_char_p * len(shards))(*[cstr(n, "shard name") for n, _ in shards])
            outs = (ctypes.c_int32 * len(shards))(*[int32(o, "shard out_features")
                                                    for _, o in shards])
            c.num_shards = len(shards)
            c.shard_names = names
            c.shard_out_features = outs
        out = ctypes.c_void_p()
        _errors.call(lib.moeq_linear_create, ctypes.byref(c), ctypes.byref(out))
        del keep_w, keep_a, names, outs  # the library copied what it keeps
        self._own(out.value, lib.moeq_linear_destroy)
        self.name = name
        self.in_features = c.in_features
        self.out_features = c.out_features

    @classmethod
    def from_config(cls, config, name, in_features, out_features, shards=None, precedence="ct",
                    platform="cpu", prefer_mxint4=False, **options):
        """Resolves module `name` in `config`, selects its scheme and creates the layer.

        For a fused name (qkv_proj, gate_up_proj) give `shards` [(name, out), ...];
        out_features may then be None (the sum)."""
        res = config.resolve(name, kind="linear", precedence=precedence)
        scheme, _ = config.select(res, platform=platform, prefer_mxint4=prefer_mxint4)
        if out_features is None and shards:
            out_features = sum(o for _, o in shards)
        return cls(scheme, res["weights"], res["input_activations"], res["format"], in_features,
                   out_features, name=name, dequant_flags=config.dequant_flags, shards=shards,
                   **options)

    @property
    def scheme(self):
        """The scheme the layer runs."""
        return name_of(SCHEMES, self._call(lib.moeq_linear_scheme))

    @property
    def _label(self):
        return self.name

    # ---- loading --------------------------------------------------------------

    def load_checkpoint(self, checkpoint, names=None):
        """Loads the module's tensors (its shards', when fused) from `checkpoint`, straight
        from the mapping; strict: stray or missing tensors raise.  With `names`: just
        those.  Returns {"loaded": n}."""
        h = self._live()
        keep = checkpoint._live()
        if names is None:
            loaded = ctypes.c_uint64()
            with self._lock:
                _errors.call(lib.moeq_linear_load_checkpoint, h.ptr, keep.ptr,
                             ctypes.byref(loaded))
            del keep
            return {"loaded": loaded.value}
        n_loaded = 0
        for n in names:
            t = checkpoint._tensor_view(n)
            if t is None:
                _errors.fail("NO_MATCH", f"{checkpoint.path}: no tensor named {n!r}")
            self._load_view(h, t)
            n_loaded += 1
        del keep
        return {"loaded": n_loaded}

    # ---- the forward pass -----------------------------------------------------

    def _x(self, x):
        x_dt, xa = as_c_array(x, what="x")
        if x_dt == "U16":
            x_dt = "BF16"
        if x_dt not in IO_DTYPES:
            _errors.fail("DTYPE", f"x is {x_dt}; expected F32, F16 or BF16 (uint16)")
        if xa.ndim != 2 or xa.shape[1] != self.in_features:
            _errors.fail("SHAPE", f"x has shape {xa.shape}, expected [tokens, "
                                  f"{self.in_features}]")
        return x_dt, xa

    def apply(self, x, ctx=None, out_dtype=None, out=None):
        """out [T, out_features] = x [T, in_features] W^T (+ bias).

        x: float32, float16 or BF16 (torch.bfloat16, or uint16 bits), an ndarray or a
        CPU torch tensor, read in place when contiguous.  out_dtype: "F32", "F16",
        "BF16" or a torch dtype (default: x's).  out: an array or tensor to write into
        (returned as is; it must not overlap x); otherwise a new one, a torch tensor when
        x is one."""
        h = self._live()
        torch_result = wants_torch(x)
        x_dt, xa = self._x(x)
        out_dt = x_dt if out_dtype is None else (torch_dtype_name(out_dtype) or out_dtype)
        if out_dt not in IO_DTYPES:
            _errors.fail("DTYPE", f"out_dtype {out_dtype!r} is not F32, F16 or BF16")
        result, out_arr = _out_array(out, (xa.shape[0], self.out_features), out_dt,
                                     torch_result)
        ctx = _default_context() if ctx is None else ctx
        ch = ctx._live()
        args = (h.ptr, ch.ptr, dtype_value(x_dt), xa.ctypes.data, xa.shape[0],
                dtype_value(out_dt), out_arr.ctypes.data)
        with ctx._lock:
            if self._finalized:
                _errors.call(lib.moeq_linear_apply, *args)
            else:
                with self._lock:  # not finalized: the library answers STATE
                    _errors.call(lib.moeq_linear_apply, *args)
        return result

    def apply_reference(self, x):
        """The same forward computed plainly in float64 (moeq_linear_apply_reference):
        float64 [T, out_features] (a torch tensor when x is one)."""
        h = self._live()
        torch_result = wants_torch(x)
        x_dt, xa = self._x(x)
        out = np.empty((xa.shape[0], self.out_features), np.float64)
        _errors.call(lib.moeq_linear_apply_reference, h.ptr, dtype_value(x_dt), xa.ctypes.data,
                     xa.shape[0], out.ctypes.data_as(ctypes.POINTER(ctypes.c_double)))
        return to_torch(out) if torch_result else out

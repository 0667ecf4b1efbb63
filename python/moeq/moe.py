"""MoE layers (create, manifest, load, finalize, apply) and per-thread contexts."""

import ctypes
import threading
import weakref

import numpy as np

from . import _errors
from ._core import (Handle, Owner, SCHEMES, STRATEGIES, as_c_array, c_list, cstr, dtype_name,
                    dtype_value, fill_tensor, float32_array, format_value, int32, int32_array,
                    is_torch, lookup, name_of, numpy_dtype, text, to_torch, torch_as_numpy,
                    torch_dtype_name, view, wants_torch)
from . import _lib
from ._lib import lib, moeq_ctx_options, moeq_moe_config, moeq_param, moeq_tensor
from .config import _proj_array, args_pointer

# Names as MoELayer takes them; "swiglu_oai" and "relu2" are the names Config.model_moe()
# gives (the library refuses relu2's non-gated experts for now, saying so).
ACTIVATIONS = {"silu": 0, "gelu": 1, "gelu_tanh": 2, "swigluoai": 3, "swiglu_oai": 3, "relu2": 4}
LAYOUTS = ("sharded", "per_shard", "shared", "derived")
LOAD_OUTCOMES = ("loaded", "skipped")
IO_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}


class Context(Owner):
    """Scratch space and worker threads for MoELayer.apply.

    A context serves one call at a time (a lock here enforces it); give each
    thread its own, or let apply() use the calling thread's default one."""

    _what = "context"

    def __init__(self, threads=0, force_ref=False):
        opts = moeq_ctx_options()
        opts.threads = int32(threads, "threads")
        opts.force_ref = 1 if force_ref else 0
        out = ctypes.c_void_p()
        _errors.call(lib.moeq_ctx_create, ctypes.byref(opts), ctypes.byref(out))
        self._handle = Handle(out.value, lib.moeq_ctx_destroy)
        self._lock = threading.Lock()

    @property
    def kernels(self):
        """The kernels apply runs here: "reference" (force_ref), else the fast
        table, "avx512", "avx2" or "portable" (env MOEQ_KERNELS caps it)."""
        return text(self._call(lib.moeq_ctx_kernels))


_thread_contexts = threading.local()


def _default_context():
    ctx = getattr(_thread_contexts, "ctx", None)
    if ctx is None:
        ctx = _thread_contexts.ctx = Context()
    return ctx


def _param_dict(p):
    return {
        "name": text(p.name),
        "dtype": dtype_name(p.dtype),
        "shape": tuple(p.shape[i] for i in range(p.ndim)),
        "nbytes": p.nbytes,
        "ckpt_suffix": text(p.ckpt_suffix),
        "layout": LAYOUTS[p.layout] if 0 <= p.layout < len(LAYOUTS) else p.layout,
        "quant_method": None if p.quant_method < 0 else name_of(STRATEGIES, p.quant_method),
        "is_transposed": bool(p.is_transposed),
        "required": bool(p.required),
        "has_data": p.data is not None,  # False once finalize released the buffer
    }


def _out_array(out, shape, out_dt, torch_result):
    """(result object, C-contiguous ndarray over its memory) for apply's output."""
    if out is None:
        arr = np.empty(shape, IO_DTYPES[out_dt])
        return (to_torch(arr, out_dt) if torch_result else arr), arr
    if is_torch(out):
        name, arr = torch_as_numpy(out, "out")
        if not out.is_contiguous():
            _errors.fail("INVALID_ARG", "out must be a contiguous tensor (apply writes it "
                                        "in place)")
    else:
        if not isinstance(out, np.ndarray) or not out.flags.c_contiguous or \
                not out.flags.writeable:
            _errors.fail("INVALID_ARG", "out must be a writable C-contiguous ndarray or a "
                                        "contiguous CPU torch tensor")
        name, arr = ("BF16" if out.dtype == np.dtype("<u2") else
                     {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16"}.get(out.dtype, str(out.dtype))), out
    if name != out_dt:
        _errors.fail("DTYPE", f"out is {name}, the output dtype is {out_dt}")
    if arr.shape != tuple(shape):
        _errors.fail("SHAPE", f"out has shape {tuple(arr.shape)}, expected {tuple(shape)}")
    return out, arr


class _Layer(Owner):
    """What MoELayer and Linear share: the manifest, loading one tensor, missing() and
    finalize(), over the library's moeq_<_c>_* functions.  A subclass sets _c ("moe",
    "linear") and _label (the layer's name in messages) and calls _own() once created."""

    _c = None

    def _own(self, ptr, destroy):
        self._handle = Handle(ptr, destroy)
        self._finalized = False
        self._lock = threading.Lock()  # load/missing/finalize change or read unfinished state
        self._views = weakref.WeakSet()  # live param_array() views, checked by finalize

    def _fn(self, verb):
        return getattr(lib, f"moeq_{self._c}_{verb}")

    # ---- the manifest -----------------------------------------------------------

    def params(self):
        """The parameter manifest in engine names: one dict per parameter (name, dtype,
        shape, ...)."""
        h = self._live()
        return [_param_dict(p)
                for p in c_list(h, self._fn("param_count"), self._fn("param"), moeq_param)]

    def param_array(self, name):
        """A writable ndarray over a parameter's buffer (before finalize only).

        finalize() refuses to run while such a view is alive, since it
        releases the buffers."""
        h = self._live()
        p = moeq_param()
        if self._fn("find_param")(h.ptr, cstr(name, "name"), ctypes.byref(p)) != 0:
            _errors.fail("NO_MATCH", f"{self._label}: no parameter named {name!r}")
        if not p.data:
            _errors.fail("STATE", f"{self._label}: parameter {name!r} has no buffer (released "
                                  f"by finalize)")
        arr, holder = view(p.data, numpy_dtype(p.dtype), p.shape[:p.ndim], False, h)
        if holder is not None:
            self._views.add(holder)
        return arr

    # ---- loading --------------------------------------------------------------

    def _load_view(self, h, tensor):
        outcome = ctypes.c_int32()
        with self._lock:
            _errors.call(self._fn("load"), h.ptr, ctypes.byref(tensor), ctypes.byref(outcome))
        return LOAD_OUTCOMES[outcome.value]

    def load(self, name, array, dtype=None):
        """Loads one checkpoint tensor -> "loaded" (or "skipped": an expert another rank
        holds).

        `array`: ndarray, CPU torch tensor (its dtype names itself: torch.bfloat16 is
        BF16) or (dtype, ndarray); dtype overrides (e.g. "BF16" for uint16 bits)."""
        h = self._live()
        nb = cstr(name, "name")
        dt, arr = as_c_array(array, dtype, what=f"tensor {name!r}")
        t = moeq_tensor()
        fill_tensor(t, nb, dt, arr)
        return self._load_view(h, t)

    def missing(self):
        """Full names of the checkpoint tensors not loaded yet."""
        h = self._live()
        out = ctypes.c_void_p()
        count = ctypes.c_uint32()
        with self._lock:
            _errors.call(self._fn("missing"), h.ptr, ctypes.byref(out), ctypes.byref(count))
        try:
            listing = ctypes.string_at(out.value).decode("utf-8", "replace") if out.value else ""
        finally:
            lib.moeq_free(out)
        return [line for line in listing.split("\n") if line]

    def finalize(self):
        """Checks completeness and converts the parameters for the kernels; the layer is then
        immutable and apply() may run concurrently."""
        h = self._live()
        with self._lock:
            if len(self._views):
                _errors.fail("STATE", f"{self._label}: {len(self._views)} param_array() views "
                                      f"are still alive; finalize releases their buffers "
                                      f"(delete them first)")
            _errors.call(self._fn("finalize"), h.ptr)
            self._finalized = True


class MoELayer(_Layer):
    """One fused MoE layer (mirrors moeq_moe_config).

    Create, fill the parameters (load() checkpoint tensors, or write through
    param_array()), finalize(), then apply() from any number of threads,
    each with its own Context.  scheme: a name from moeq.schemes() (usually
    from Config.select); weights_args/input_args: QuantArgs (from a
    resolution) or dicts; format: the resolution's format name."""

    _what = "MoE layer"
    _c = "moe"

    def __init__(self, scheme, weights_args, input_args, format, num_experts, hidden_size,
                 intermediate_size, *, dequant_flags=0, prefix=None, proj_names=None,
                 num_local_experts=0, expert_map=None, first_expert=0, activation="silu",
                 swiglu_alpha=0.0, swiglu_limit=0.0, params_dtype=None, has_bias=False,
                 routed_scaling_factor=0.0, apply_router_weight_on_input=False):
        c = moeq_moe_config()
        c.scheme = lookup(SCHEMES, scheme, "scheme")
        c.weights, keep_w = args_pointer(weights_args, "weights_args")
        c.input_activations, keep_a = args_pointer(input_args, "input_args")
        c.format = format_value(format)
        c.dequant_flags = int32(dequant_flags, "dequant_flags", unsigned=True)
        c.prefix = cstr(prefix, "prefix") if prefix is not None else None
        projs = _proj_array(proj_names)
        c.proj_names = projs
        c.num_experts = int32(num_experts, "num_experts")
        c.num_local_experts = int32(num_local_experts, "num_local_experts")
        emap = None
        if expert_map is not None:
            emap = np.ascontiguousarray(expert_map, dtype="<i4")
            if emap.shape != (c.num_experts,):
                _errors.fail("SHAPE", f"expert_map has shape {emap.shape}, expected "
                                      f"({c.num_experts},)")
            c.expert_map = emap.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        c.first_expert = int32(first_expert, "first_expert")
        c.hidden_size = int32(hidden_size, "hidden_size")
        c.intermediate_size = int32(intermediate_size, "intermediate_size")
        c.activation = lookup(ACTIVATIONS, activation, "activation")
        c.swiglu_alpha = float(swiglu_alpha)
        c.swiglu_limit = float(swiglu_limit)
        c.params_dtype = 0 if params_dtype is None else dtype_value(params_dtype)
        c.has_bias = 1 if has_bias else 0
        c.routed_scaling_factor = float(routed_scaling_factor)
        c.apply_router_weight_on_input = 1 if apply_router_weight_on_input else 0
        out = ctypes.c_void_p()
        _errors.call(lib.moeq_moe_create, ctypes.byref(c), ctypes.byref(out))
        del keep_w, keep_a, projs, emap  # the library copied what it keeps
        self._own(out.value, lib.moeq_moe_destroy)
        self.prefix = prefix
        self.num_experts = c.num_experts
        self.hidden_size = c.hidden_size

    @classmethod
    def from_config(cls, config, prefix, num_experts, hidden_size, intermediate_size,
                    proj_names=None, precedence="ct", platform="cpu", prefer_mxint4=False,
                    **options):
        """Resolves `prefix` in `config`, selects its scheme and creates the layer."""
        res = config.resolve_moe(prefix, num_experts, proj_names=proj_names,
                                 precedence=precedence)
        scheme, _ = config.select(res, platform=platform, prefer_mxint4=prefer_mxint4)
        return cls(scheme, res["weights"], res["input_activations"], res["format"], num_experts,
                   hidden_size, intermediate_size, dequant_flags=config.dequant_flags,
                   prefix=prefix, proj_names=proj_names, **options)

    @property
    def scheme(self):
        """The scheme the layer runs."""
        return name_of(SCHEMES, self._call(lib.moeq_moe_scheme))

    @property
    def _label(self):
        return self.prefix or "MoE layer"

    # ---- loading --------------------------------------------------------------

    def load_checkpoint(self, checkpoint, names=None, progress=None):
        """Loads this layer's tensors from `checkpoint`, straight from the mapping.

        Without `names`: every tensor under the layer's prefix, through
        moeq_moe_load_checkpoint (strict: stray or missing tensors raise), with
        `progress(done, total)` called after each tensor (return True to stop).
        With `names`: just those tensors.  Returns {"loaded": n, "skipped": m}
        (skipped: experts another rank holds)."""
        h = self._live()
        keep = checkpoint._live()  # the mapping stays while its views are passed on
        if names is None:
            cb = _lib.PROGRESS_FN(0)
            if progress is not None:
                cb = _lib.PROGRESS_FN(lambda done, total, user: 1 if progress(done, total) else 0)
            loaded, skipped = ctypes.c_uint64(), ctypes.c_uint64()
            with self._lock:
                _errors.call(lib.moeq_moe_load_checkpoint, h.ptr, keep.ptr, None, cb, None,
                             ctypes.byref(loaded), ctypes.byref(skipped))
            del keep
            return {"loaded": loaded.value, "skipped": skipped.value}
        counts = {"loaded": 0, "skipped": 0}
        for n in names:
            t = checkpoint._tensor_view(n)
            if t is None:
                _errors.fail("NO_MATCH", f"{checkpoint.path}: no tensor named {n!r}")
            counts[self._load_view(h, t)] += 1
        del keep
        return counts

    # ---- the forward pass -----------------------------------------------------

    def _apply_inputs(self, x, topk_ids, topk_weights):
        """x as a C-ordered array with its dtype name, ids and weights as int32/float32
        [T, k]; wrong dtypes or shapes raise the library's DTYPE/SHAPE errors.  Contiguous
        inputs of those dtypes (ndarrays or CPU torch tensors) are passed in place."""
        x_dt, xa = as_c_array(x, what="x")
        if x_dt == "U16":
            x_dt = "BF16"
        if x_dt not in IO_DTYPES:
            _errors.fail("DTYPE", f"x is {x_dt}; expected F32, F16 or BF16 (uint16)")
        if xa.ndim != 2 or xa.shape[1] != self.hidden_size:
            _errors.fail("SHAPE", f"x has shape {xa.shape}, expected [tokens, {self.hidden_size}]")
        ids = int32_array(topk_ids, "topk_ids")
        wts = float32_array(topk_weights, "topk_weights")
        if ids.ndim != 2 or ids.shape[0] != xa.shape[0] or wts.shape != ids.shape:
            _errors.fail("SHAPE", f"topk_ids {ids.shape} and topk_weights {wts.shape} must "
                                  f"both be [{xa.shape[0]}, top_k]")
        return x_dt, xa, ids, wts

    def _out_array(self, out, shape, out_dt, torch_result):
        return _out_array(out, shape, out_dt, torch_result)

    def apply(self, x, topk_ids, topk_weights, ctx=None, out_dtype=None, out=None):
        """out [T, H] = the routed experts applied to x [T, H].

        x: float32, float16 or BF16 (a torch.bfloat16 tensor, or uint16 bits), an ndarray
        or a CPU torch tensor (read in place when contiguous).  topk_ids int32 [T, k]
        (global ids; -1 contributes nothing; other integer dtypes are converted),
        topk_weights float32 [T, k] (e.g. from moeq.route).  out_dtype: "F32", "F16" or
        "BF16", or a torch dtype (default: x's).  out: an array or tensor to write the
        result into (returned as is); otherwise a new one, a torch tensor when x is one."""
        h = self._live()
        torch_result = wants_torch(x)
        x_dt, xa, ids, wts = self._apply_inputs(x, topk_ids, topk_weights)
        out_dt = x_dt if out_dtype is None else (torch_dtype_name(out_dtype) or out_dtype)
        if out_dt not in IO_DTYPES:
            _errors.fail("DTYPE", f"out_dtype {out_dtype!r} is not F32, F16 or BF16")
        result, out_arr = self._out_array(out, xa.shape, out_dt, torch_result)
        ctx = _default_context() if ctx is None else ctx
        ch = ctx._live()
        args = (h.ptr, ch.ptr, dtype_value(x_dt), xa.ctypes.data, xa.shape[0], ids.shape[1],
                ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                wts.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), dtype_value(out_dt),
                out_arr.ctypes.data)
        with ctx._lock:
            if self._finalized:
                _errors.call(lib.moeq_moe_apply, *args)
            else:
                with self._lock:  # not finalized: the library answers STATE
                    _errors.call(lib.moeq_moe_apply, *args)
        return result

    def apply_reference(self, x, topk_ids, topk_weights):
        """The same forward computed plainly in float64 (moeq_moe_apply_reference):
        float64 [T, H] (a torch tensor when x is one), for checking apply()."""
        h = self._live()
        torch_result = wants_torch(x)
        x_dt, xa, ids, wts = self._apply_inputs(x, topk_ids, topk_weights)
        out = np.empty(xa.shape, np.float64)
        _errors.call(lib.moeq_moe_apply_reference, h.ptr, dtype_value(x_dt), xa.ctypes.data,
                     xa.shape[0], ids.shape[1], ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                     wts.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                     out.ctypes.data_as(ctypes.POINTER(ctypes.c_double)))
        return to_torch(out) if torch_result else out

"""Pieces every module of the package shares: handles, names, dtypes, arrays.

Handles.  Each C object (config, checkpoint, layer, context) is owned by one
``Handle``; the C destroy function runs when the last Python reference to it
goes (``weakref.finalize``).  Wrappers, numpy views into C memory and results
that point into a config (resolutions, args) all hold the handle, so
``close()`` on a wrapper only drops the wrapper's reference: memory a view
still uses is released when that view goes, never under it.  Calls take a
local reference for their duration, so a ``close()`` from another thread cannot
free an object while a call uses it.

Arrays.  numpy arrays cross the ABI as C-contiguous little-endian buffers:
arrays already laid out so are passed by pointer, others are copied once with
a C-order copy.  The caller's objects stay referenced until the call returns.
BF16 travels as uint16 bits and the FP8 types as uint8 (numpy has no such
types): pass ("BF16", array.view(np.uint16)).

torch tensors.  Wherever an array goes in, a CPU torch tensor may go instead
(torch is never imported here: a tensor can only exist once the caller has
imported it).  A contiguous tensor is viewed as an ndarray over its own memory,
so the library reads it in place; bfloat16 and float8 tensors keep their dtype
(BF16, F8_E4M3, F8_E5M2) and are viewed as their bits.  Results come back as
torch tensors when the inputs were (see ``wants_torch`` and ``to_torch``).
"""

import ctypes
import sys
import weakref

import numpy as np

from . import _errors
from ._lib import MOEQ_MAX_DIMS, has, lib, moeq_tensor, path


class Handle:
    """Owns one C object; `destroy(ptr)` runs when the last reference goes."""

    __slots__ = ("ptr", "_finalizer", "__weakref__")

    def __init__(self, ptr, destroy):
        self.ptr = ptr
        self._finalizer = weakref.finalize(self, destroy, ptr)


class Owner:
    """Base of the wrappers: close(), context manager, StateError once closed."""

    _handle = None
    _what = "object"

    def _live(self):
        h = self._handle
        if h is None:
            _errors.fail("STATE", f"the {self._what} is closed")
        return h

    def _call(self, fn, *args):
        """fn(ptr, *args), holding the handle for the duration of the call."""
        h = self._live()
        return fn(h.ptr, *args)

    @property
    def closed(self):
        return self._handle is None

    def close(self):
        """Releases the C object (once nothing else, e.g. an array view, still uses it)."""
        self._handle = None

    def __enter__(self):
        self._live()
        return self

    def __exit__(self, *exc):
        self.close()


# --------------------------------------------------------------------------
# Names <-> enum values
# --------------------------------------------------------------------------


def cstr(value, what):
    """str/bytes -> NUL-free bytes for a `const char *` argument."""
    if isinstance(value, str):
        value = value.encode("utf-8")
    elif not isinstance(value, (bytes, bytearray)):
        raise TypeError(f"{what} must be str, not {type(value).__name__}")
    if b"\0" in value:
        _errors.fail("INVALID_ARG", f"{what} contains a NUL character")
    return bytes(value)


def text(ptr):
    """A `const char *` result (bytes or None) -> str or None."""
    return None if ptr is None else ptr.decode("utf-8", "replace")


def _enumerate(name_fn, start, stop_when):
    names = {}
    for value in range(start, 256):
        name = name_fn(value)
        if stop_when(name):
            break
        names[name.decode()] = value
    return names


# The library's own tables, read once.
FORMATS = _enumerate(lib.moeq_format_name, 1, lambda n: not n)
SCHEMES = _enumerate(lib.moeq_scheme_name, 0, lambda n: n is None)
STRATEGIES = _enumerate(lib.moeq_strategy_name, 0, lambda n: n == b"unknown")
ACTORDERS = _enumerate(lib.moeq_actorder_name, 0, lambda n: n == b"unknown")
DTYPES = _enumerate(lib.moeq_dtype_name, 1, lambda n: n == b"invalid")


def lookup(table, value, what):
    """A name (or already a value) from `table` -> its int value."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be a name, not a bool")
    if isinstance(value, int):
        if value not in table.values():
            _errors.fail("INVALID_ARG", f"{what} {value} is not one of {sorted(table)}")
        return value
    if value not in table:
        _errors.fail("INVALID_ARG", f"{what} {value!r} is not one of {sorted(table)}")
    return table[value]


def c_list(h, count_fn, get_fn, struct_cls):
    """Every item of a counted C list: count_fn(ptr) items, get_fn(ptr, i, &item) each."""
    items = []
    for i in range(count_fn(h.ptr)):
        item = struct_cls()
        if get_fn(h.ptr, i, ctypes.byref(item)) != 0:
            _errors.fail("INTERNAL", f"{get_fn.__name__}({i}) failed for an index below its count")
        items.append(item)
    return items


def int32(value, what, unsigned=False):
    """An int argument checked against the C type's range (ctypes would wrap it silently)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if not (isinstance(value, (float, np.floating)) and float(value).is_integer()):
            raise TypeError(f"{what} must be an integer, not {value!r}")
    v = int(value)
    lo, hi = (0, 2**32 - 1) if unsigned else (-2**31, 2**31 - 1)
    if not lo <= v <= hi:
        _errors.fail("INVALID_ARG", f"{what} is {v}, outside the C type's range {lo}..{hi}")
    return v


def name_of(table, value):
    for name, v in table.items():
        if v == value:
            return name
    return None


def format_value(fmt):
    """Format name ('pack-quantized') or value -> value; None/'' -> NONE (0)."""
    if fmt is None or fmt == "":
        return 0
    return lookup(FORMATS, fmt, "format")


def format_name(value):
    """Format value -> name, None for NONE."""
    name = lib.moeq_format_name(value).decode()
    return name or None


# --------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------

# safetensors dtype name -> the numpy dtype its data is viewed as.
NUMPY_OF = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"), "F8_E4M3": np.dtype("u1"), "F8_E5M2": np.dtype("u1"),
    "I8": np.dtype("i1"), "U8": np.dtype("u1"), "I16": np.dtype("<i2"), "U16": np.dtype("<u2"),
    "I32": np.dtype("<i4"), "U32": np.dtype("<u4"), "I64": np.dtype("<i8"),
    "U64": np.dtype("<u8"), "BOOL": np.dtype("?"),
}
# numpy dtype -> the safetensors name an array of it is taken as by default.
_DEFAULT_OF = {
    np.dtype("f8"): "F64", np.dtype("f4"): "F32", np.dtype("f2"): "F16",
    np.dtype("i1"): "I8", np.dtype("u1"): "U8", np.dtype("i2"): "I16", np.dtype("u2"): "U16",
    np.dtype("i4"): "I32", np.dtype("u4"): "U32", np.dtype("i8"): "I64", np.dtype("u8"): "U64",
    np.dtype("?"): "BOOL",
}


def dtype_value(name):
    """safetensors dtype name ('BF16') or value -> value."""
    return lookup(DTYPES, name, "dtype")


def dtype_name(value):
    return lib.moeq_dtype_name(value).decode()


def numpy_dtype(name_or_value):
    name = name_or_value if isinstance(name_or_value, str) else dtype_name(name_or_value)
    if name not in NUMPY_OF:
        _errors.fail("DTYPE", f"dtype {name} has no numpy equivalent")
    return NUMPY_OF[name]


# --------------------------------------------------------------------------
# torch tensors (optional: nothing here imports torch)
# --------------------------------------------------------------------------

_TORCH_NAMES = None  # torch dtype -> safetensors name, built on first use
# Held as bits: numpy has no such dtype.
_BIT_DTYPES = ("BF16", "F8_E4M3", "F8_E5M2", "U16", "U32", "U64")


def _torch():
    return sys.modules.get("torch")


def is_torch(x):
    """True for a torch.Tensor (False whenever torch has not been imported)."""
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def wants_torch(*values):
    """True when any of `values` (or any value of a dict/list among them) is a torch tensor:
    results then come back as torch tensors."""
    if _torch() is None:
        return False
    for v in values:
        if isinstance(v, dict):
            v = list(v.values())
        if isinstance(v, (list, tuple)):
            if any(wants_torch(item) for item in v):
                return True
        elif is_torch(v):
            return True
    return False


def _torch_names(torch):
    global _TORCH_NAMES
    if _TORCH_NAMES is None:
        names = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
                 torch.bfloat16: "BF16", torch.int8: "I8", torch.uint8: "U8",
                 torch.int16: "I16", torch.int32: "I32", torch.int64: "I64", torch.bool: "BOOL"}
        for attr, name in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2"),
                           ("uint16", "U16"), ("uint32", "U32"), ("uint64", "U64")):
            if hasattr(torch, attr):
                names[getattr(torch, attr)] = name
        _TORCH_NAMES = names
    return _TORCH_NAMES


def torch_dtype_name(dtype):
    """A torch dtype -> its safetensors name ("BF16"), None when it has none."""
    torch = _torch()
    return None if torch is None else _torch_names(torch).get(dtype)


def torch_dtype_of(name):
    """safetensors name -> torch dtype."""
    for dt, n in _torch_names(_torch()).items():
        if n == name:
            return dt
    _errors.fail("DTYPE", f"dtype {name} has no torch equivalent")


def torch_as_numpy(t, what="tensor"):
    """(dtype name, ndarray over t's memory) for a CPU tensor; a non-contiguous tensor is
    copied once into C order (the only copy)."""
    torch = _torch()
    if t.device.type != "cpu":
        _errors.fail("INVALID_ARG", f"{what} is on {t.device}; moeq runs on the CPU "
                                    f"(move it with .cpu())")
    name = _torch_names(torch).get(t.dtype)
    if name is None:
        _errors.fail("DTYPE", f"{what}: torch dtype {t.dtype} has no safetensors equivalent")
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    if name in _BIT_DTYPES:
        carrier = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        return name, t.view(carrier[t.element_size()]).numpy().view(NUMPY_OF[name])
    return name, t.numpy()


def to_torch(array, name=None):
    """An ndarray (owning its memory, or viewing memory something keeps alive) as a torch
    tensor over the same memory; `name` (e.g. "BF16") gives the dtype for arrays of bits."""
    torch = _torch()
    if name in _BIT_DTYPES:
        signed = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}[array.dtype.itemsize]
        return torch.from_numpy(array.view(signed)).view(torch_dtype_of(name))
    return torch.from_numpy(array)


def float32_array(x, what, ndim=None):
    """x (ndarray, torch tensor or sequence) as a C-contiguous float32 ndarray; a float32
    contiguous input is not copied."""
    if is_torch(x):
        if not x.is_floating_point():
            _errors.fail("DTYPE", f"{what} must hold floats, got {x.dtype}")
        if x.device.type == "cpu" and x.dtype != _torch().float32:
            x = x.detach().float()  # bfloat16/float16 -> float32 (the one copy)
        x = torch_as_numpy(x, what)[1]
    else:
        x = np.asarray(x)
        if x.dtype.kind != "f":
            _errors.fail("DTYPE", f"{what} must hold floats, got {x.dtype}")
    if ndim is not None and x.ndim != ndim:
        _errors.fail("SHAPE", f"{what} must have {ndim} dimension(s), got shape {x.shape}")
    return np.ascontiguousarray(x, dtype="<f4")


def int32_array(x, what):
    """x (ndarray, torch tensor or sequence) of integers as a C-contiguous int32 ndarray; an
    int32 contiguous input is not copied (int64 ids from torch.topk are converted)."""
    if is_torch(x):
        if x.is_floating_point() or x.is_complex():
            _errors.fail("DTYPE", f"{what} must hold integers, got {x.dtype}")
        x = torch_as_numpy(x, what)[1]
    else:
        x = np.asarray(x)
    return np.ascontiguousarray(x, dtype="<i4")


def as_c_array(array, dtype=None, what="array"):
    """(dtype name, C-contiguous little-endian ndarray) for `array`.

    `array` may be an ndarray (or anything np.asarray takes) or a
    (dtype name, ndarray) pair; `dtype` overrides the name.  A BF16/F8 array
    must hold raw bits: uint16 / uint8.  A CPU torch tensor is viewed in place
    (torch.bfloat16 as BF16, torch.float8_e4m3fn as F8_E4M3, ...)."""
    if isinstance(array, tuple):
        if len(array) != 2:
            raise TypeError(f"{what}: expected ndarray or (dtype, ndarray)")
        if dtype is None:
            dtype = array[0]
        array = array[1]
    if is_torch(array):
        torch_name, array = torch_as_numpy(array, what)
        if dtype is None:
            dtype = torch_name
    array = np.asarray(array)
    if dtype is not None and torch_dtype_name(dtype) is not None:
        dtype = torch_dtype_name(dtype)
    if dtype is None:
        dtype = _DEFAULT_OF.get(array.dtype.newbyteorder("="))
        if dtype is None:
            _errors.fail("DTYPE", f"{what}: numpy dtype {array.dtype} has no safetensors "
                                  f"equivalent; pass (dtype_name, array of its bits)")
    elif not isinstance(dtype, str):
        dtype = dtype_name(dtype_value(dtype))
    if dtype not in NUMPY_OF:
        _errors.fail("DTYPE", f"{what}: unknown dtype {dtype!r}; use one of {sorted(NUMPY_OF)}")
    want = NUMPY_OF[dtype]
    if array.dtype.newbyteorder("=") != want.newbyteorder("="):
        _errors.fail("DTYPE", f"{what}: {dtype} data must be a {want.name} array, not "
                              f"{array.dtype}")
    if array.dtype.byteorder == ">" or (array.dtype.byteorder == "=" and
                                        not np.little_endian):
        array = array.astype(want)
    # Not np.ascontiguousarray: it turns a 0-d array into a 1-d one.
    return dtype, array if array.flags.c_contiguous else array.copy(order="C")


def fill_tensor(t, name_bytes, dtype, array):
    """Fills a moeq_tensor view of `array` (already C-contiguous little-endian)."""
    if array.ndim > MOEQ_MAX_DIMS:
        _errors.fail("SHAPE", f"tensor {name_bytes.decode(errors='replace')}: {array.ndim} "
                              f"dimensions, at most {MOEQ_MAX_DIMS}")
    t.name = name_bytes
    t.dtype = dtype_value(dtype)
    t.ndim = array.ndim
    for i, n in enumerate(array.shape):
        t.shape[i] = n
    t.data = array.ctypes.data if array.size else None
    t.nbytes = array.nbytes


def tensor_array(specs):
    """[(name, ndarray or (dtype, ndarray))] -> (moeq_tensor array, keep-alive list)."""
    keep = []
    tensors = (moeq_tensor * max(len(specs), 1))()
    for i, (name, value) in enumerate(specs):
        nb = cstr(name, "tensor name")
        dtype, arr = as_c_array(value, what=f"tensor {name!r}")
        fill_tensor(tensors[i], nb, dtype, arr)
        keep.append((nb, arr))
    return tensors, keep


class _View:
    """Exposes C memory to numpy through __array_interface__ and keeps its owner alive."""

    __slots__ = ("__array_interface__", "owner", "__weakref__")

    def __init__(self, address, dtype, shape, readonly, owner):
        self.owner = owner
        self.__array_interface__ = {
            "version": 3, "shape": tuple(shape), "typestr": dtype.str,
            "data": (address, readonly), "strides": None,
        }


def view(address, dtype, shape, readonly, owner):
    """An ndarray over C memory at `address` that keeps `owner` referenced."""
    shape = tuple(int(n) for n in shape)
    if 0 in shape:
        arr = np.zeros(shape, dtype)  # an empty tensor may have no data pointer
        arr.flags.writeable = not readonly
        return arr, None
    if not address:
        _errors.fail("INTERNAL", f"NULL data for a {dtype} array of shape {shape}")
    holder = _View(address, dtype, shape, readonly, owner)
    return np.asarray(holder), holder


def out_buffer(shape, dtype):
    arr = np.empty(shape, dtype)
    return arr, ctypes.c_void_p(arr.ctypes.data if arr.size else None)


def require(name):
    """Raises UnsupportedError unless the loaded library exports `name` (for functions
    declared optional in _lib.PROTOTYPES)."""
    if not has(name):
        _errors.fail("UNSUPPORTED", f"{path} has no {name}: it predates that function")

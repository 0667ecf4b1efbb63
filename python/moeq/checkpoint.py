"""safetensors checkpoints: memory-mapped reading, writing."""

import ctypes
import json
import os

from . import _errors
from ._core import Handle, Owner, c_list, cstr, dtype_name, numpy_dtype, tensor_array, text, view
from ._lib import lib, moeq_tensor


class Checkpoint(Owner):
    """A memory-mapped safetensors checkpoint (immutable, thread-safe).

    `path`: a model directory (index + shards, model.safetensors or every
    *.safetensors), one .safetensors file, or an index .json.  Tensors come
    back as read-only numpy arrays over the mapping, without a copy (BF16 as
    uint16, F8 as uint8); they keep the mapping alive after close()."""

    _what = "checkpoint"

    def __init__(self, path):
        self.path = os.fspath(path)
        out = ctypes.c_void_p()
        _errors.call(lib.moeq_checkpoint_open, cstr(self.path, "path"), ctypes.byref(out))
        self._handle = Handle(out.value, lib.moeq_checkpoint_close)

    def __repr__(self):
        state = "closed" if self.closed else f"{len(self)} tensors"
        return f"Checkpoint({self.path!r}, {state})"

    def __len__(self):
        return self._call(lib.moeq_checkpoint_tensor_count)

    def names(self):
        """Every tensor name, in name order."""
        h = self._live()
        return [text(t.name) for t in c_list(h, lib.moeq_checkpoint_tensor_count,
                                              lib.moeq_checkpoint_tensor, moeq_tensor)]

    def __iter__(self):
        return iter(self.names())

    def _find(self, h, name):
        t = moeq_tensor()
        st = lib.moeq_checkpoint_find(h.ptr, cstr(name, "name"), ctypes.byref(t))
        return t if st == 0 else None

    def _tensor_view(self, name):
        """The C view (moeq_tensor) of a tensor, or None; its data pointer is only good
        while the caller holds this checkpoint's handle."""
        return self._find(self._live(), name)

    def __contains__(self, name):
        return isinstance(name, (str, bytes)) and self._find(self._live(), name) is not None

    def _need(self, h, name):
        t = self._find(h, name)
        if t is None:
            _errors.fail("NO_MATCH", f"{self.path}: no tensor named {name!r}")
        return t

    def info(self, name):
        """{"name", "dtype", "shape", "nbytes", "file"} of one tensor."""
        t = self._need(self._live(), name)
        return {"name": text(t.name), "dtype": dtype_name(t.dtype),
                "shape": tuple(t.shape[i] for i in range(t.ndim)), "nbytes": t.nbytes,
                "file": text(t.file)}

    def tensor(self, name):
        """A read-only ndarray viewing the tensor's bytes in the mapping (no copy)."""
        h = self._live()
        t = self._need(h, name)
        arr, _ = view(t.data, numpy_dtype(t.dtype), t.shape[:t.ndim], True, h)
        return arr

    __getitem__ = tensor


def safetensors_write(path, tensors, metadata=None):
    """Writes `tensors` ({name: ndarray or (dtype name, ndarray)}) to a .safetensors file.

    BF16 and F8 data go as ("BF16", uint16 array) / ("F8_E4M3", uint8 array).
    `metadata`: {str: str} for "__metadata__".  The file is written beside
    `path` and renamed over it."""
    items = list(tensors.items()) if isinstance(tensors, dict) else list(tensors)
    if len(items) >= 2**32:
        _errors.fail("LIMIT", "too many tensors")
    arr, keep = tensor_array(items)
    meta = None
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise TypeError("metadata must be a dict of str -> str")
        meta = cstr(json.dumps(metadata), "metadata")
    _errors.call(lib.moeq_safetensors_write, cstr(os.fspath(path), "path"), arr, len(items),
                 meta)
    del keep

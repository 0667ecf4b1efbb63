"""Checkpoint (memory-mapped safetensors) and safetensors_write."""

import json
import os
import struct

import numpy as np
import pytest

import moeq

from conftest import CONFORMANCE


def sample_tensors():
    rng = np.random.default_rng(7)
    return {
        "model.layers.0.mlp.experts.0.up_proj.weight_packed":
            rng.integers(-2**31, 2**31 - 1, (4, 2), dtype=np.int64).astype(np.int32),
        "model.layers.0.mlp.experts.0.up_proj.weight_scale":
            ("BF16", rng.integers(0, 2**16, (4, 1), dtype=np.uint16)),
        "model.layers.0.mlp.experts.0.up_proj.weight_shape": np.array([4, 16], np.int64),
        "fp8": ("F8_E4M3", np.arange(12, dtype=np.uint8).reshape(3, 4)),
        "f64": np.linspace(-1, 1, 5),
        "f16": np.arange(6, dtype=np.float16).reshape(1, 2, 3),
        "flags": np.array([True, False, True]),
        "scalar": np.array(3.5, np.float32),
        "empty": np.zeros((0, 4), np.float32),
        "u64": np.array([2**64 - 1], np.uint64),
    }


@pytest.fixture
def written(tmp_path):
    path = str(tmp_path / "model.safetensors")
    tensors = sample_tensors()
    moeq.safetensors_write(path, tensors, metadata={"format": "pt", "who": "moeq"})
    return path, tensors


def raw_of(value):
    return value[1] if isinstance(value, tuple) else np.asarray(value)


def test_round_trip(written):
    path, tensors = written
    with moeq.Checkpoint(path) as ckpt:
        assert len(ckpt) == len(tensors)
        assert ckpt.names() == sorted(tensors)
        assert list(ckpt) == sorted(tensors)
        for name, value in tensors.items():
            assert name in ckpt
            got = ckpt.tensor(name)
            want = raw_of(value)
            assert got.dtype == want.dtype.newbyteorder("<") or got.dtype == want.dtype
            assert got.shape == want.shape
            np.testing.assert_array_equal(got, want)
            info = ckpt.info(name)
            want_dtype = value[0] if isinstance(value, tuple) else {
                "int32": "I32", "int64": "I64", "float64": "F64", "float16": "F16",
                "bool": "BOOL", "float32": "F32", "uint64": "U64"}[want.dtype.name]
            assert info == {"name": name, "dtype": want_dtype, "shape": want.shape,
                            "nbytes": want.nbytes, "file": path}
        assert "absent" not in ckpt and 3 not in ckpt


def test_file_layout_and_metadata(written):
    path, _ = written
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    assert (8 + n) % 8 == 0
    assert header["__metadata__"] == {"format": "pt", "who": "moeq"}
    assert header["fp8"]["dtype"] == "F8_E4M3"


def test_tensors_are_zero_copy_read_only_views(written):
    path, _ = written
    ckpt = moeq.Checkpoint(path)
    a = ckpt.tensor("f64")
    b = ckpt["f64"]
    assert not a.flags.writeable and not a.flags.owndata
    assert a.ctypes.data == b.ctypes.data  # the same mapped bytes, no copy
    assert a.ctypes.data % 8 == 0  # aligned to its element size, as written
    with pytest.raises(ValueError):
        a[0] = 1.0


def test_views_keep_the_mapping_alive_after_close(written):
    path, tensors = written
    ckpt = moeq.Checkpoint(path)
    view = ckpt.tensor("f64")[1:4]
    ckpt.close()
    assert ckpt.closed
    with pytest.raises(moeq.StateError, match="checkpoint is closed"):
        ckpt.tensor("f64")
    with pytest.raises(moeq.StateError):
        len(ckpt)
    np.testing.assert_array_equal(view, tensors["f64"][1:4])


def test_missing_names_and_files(written, tmp_path):
    path, _ = written
    with moeq.Checkpoint(path) as ckpt:
        with pytest.raises(moeq.NoMatchError, match="'nope'"):
            ckpt.tensor("nope")
        with pytest.raises(moeq.NoMatchError):
            ckpt.info("nope")
    with pytest.raises(moeq.IOFailure):
        moeq.Checkpoint(tmp_path / "absent.safetensors")


def test_a_model_directory_and_the_conformance_files():
    with moeq.Checkpoint(os.path.join(CONFORMANCE, "fp8_channel_bf16.safetensors")) as ckpt:
        names = ckpt.names()
        assert "expected" in names and "weight_orig" in names
        w = [n for n in names if n.endswith(".weight")][0]
        assert ckpt.info(w)["dtype"] == "F8_E4M3"
        assert ckpt.tensor(w).dtype == np.uint8


def test_write_conversions_and_checks(tmp_path):
    path = str(tmp_path / "x.safetensors")
    big = np.arange(6, dtype=">i4").reshape(2, 3)
    strided = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    moeq.safetensors_write(path, [("big", big), ("strided", strided)])
    with moeq.Checkpoint(path) as ckpt:
        np.testing.assert_array_equal(ckpt["big"], big)
        assert ckpt["big"].dtype == np.dtype("<i4")
        np.testing.assert_array_equal(ckpt["strided"], strided)
    with pytest.raises(moeq.DTypeError, match="BF16"):
        moeq.safetensors_write(path, {"x": ("BF16", np.zeros(2, np.float32))})
    with pytest.raises(moeq.DTypeError, match="complex"):
        moeq.safetensors_write(path, {"x": np.zeros(2, np.complex64)})
    with pytest.raises(moeq.DTypeError, match="unknown dtype"):
        moeq.safetensors_write(path, {"x": ("F4", np.zeros(2, np.uint8))})
    with pytest.raises(moeq.InvalidArgumentError):
        moeq.safetensors_write(path, {"a": np.zeros(1), "a\0b": np.zeros(1)})
    with pytest.raises(moeq.Error):
        moeq.safetensors_write(str(tmp_path / "no" / "dir" / "x.safetensors"),
                               {"x": np.zeros(1)})

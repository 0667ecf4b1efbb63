"""moeq.Linear: a synthetic checkpoint's attention projections (one module, and a fused
qkv_proj whose columns are its shards') against the float64 reference; the manifest's
engine names; argument checks; numpy and CPU torch inputs read in place."""

import ctypes

import numpy as np
import pytest

import moeq
from moeq import _lib

PRESET = "w8a8-fp8-static"  # FP8 weights, static FP8 input scales, with attention
O_PROJ = "model.layers.1.self_attn.o_proj"
QKV = "model.layers.1.self_attn.qkv_proj"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """(config, checkpoint, hidden size) of a synthetic checkpoint with attention."""
    d = tmp_path_factory.mktemp("synth")
    moeq.synth_write(str(d), PRESET)
    cfg = moeq.Config.load(str(d))
    ckpt = moeq.Checkpoint(str(d))
    yield cfg, ckpt, int(cfg.model_number("hidden_size"))
    ckpt.close()
    cfg.close()


def make(model, name, shards=None, out=None):
    cfg, ckpt, H = model
    out = sum(o for _, o in shards) if shards else out or H
    layer = moeq.Linear.from_config(cfg, name, H, out, shards=shards)
    assert layer.load_checkpoint(ckpt)["loaded"] > 0
    assert layer.missing() == []
    layer.finalize()
    return layer


def qkv_shards(model):
    cfg, _, H = model
    heads = int(cfg.model_number("num_attention_heads"))
    kv = int(cfg.model_number("num_key_value_heads"))
    head_dim = H // heads
    return [("q_proj", heads * head_dim), ("k_proj", kv * head_dim), ("v_proj", kv * head_dim)]


def test_manifest_names_are_the_engines(model):
    cfg, _, H = model
    layer = moeq.Linear.from_config(cfg, O_PROJ, H, H)
    names = [p["name"] for p in layer.params()]
    assert names == ["weight", "weight_scale", "input_scale"]
    assert layer.params()[0]["shape"] == (H, H)
    assert layer.scheme == "w8a8_fp8"
    fused = moeq.Linear.from_config(cfg, QKV, H, None, shards=qkv_shards(model))
    assert [p["name"] for p in fused.params()][:3] == ["q_proj.weight", "q_proj.weight_scale",
                                                      "q_proj.input_scale"]
    assert len(fused.params()) == 9
    layer.close()
    fused.close()


@pytest.mark.parametrize("name", [O_PROJ, QKV])
def test_apply_matches_the_reference(model, name):
    shards = qkv_shards(model) if name == QKV else None
    layer = make(model, name, shards)
    H = model[2]
    x = np.random.default_rng(1).standard_normal((5, H)).astype(np.float32)
    y = layer.apply(x)
    ref = layer.apply_reference(x)
    assert y.shape == (5, layer.out_features) and y.dtype == np.float32
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    # threads: the same bits
    with moeq.Context(threads=3) as ctx:
        assert np.array_equal(layer.apply(x, ctx=ctx), y)
    # BF16 in and out (uint16 bits)
    xb = (x.view(np.uint32) >> 16).astype(np.uint16)
    yb = layer.apply(xb, out_dtype="BF16")
    assert yb.dtype == np.uint16 and yb.shape == y.shape
    layer.close()


def test_fused_columns_are_the_shards(model):
    """qkv_proj's columns are q_proj's, k_proj's and v_proj's outputs, in order."""
    shards = qkv_shards(model)
    fused = make(model, QKV, shards)
    H = model[2]
    x = np.random.default_rng(2).standard_normal((3, H)).astype(np.float32)
    y = fused.apply(x)
    col = 0
    for shard, out in shards:  # each shard on its own: the same numbers, bit for bit
        one = make(model, f"model.layers.1.self_attn.{shard}", out=out)
        assert np.array_equal(one.apply(x), y[:, col:col + out]), shard
        one.close()
        col += out
    assert col == fused.out_features
    ref = fused.apply_reference(x)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    fused.close()


def test_bad_arguments(model):
    cfg, ckpt, H = model
    with pytest.raises(moeq.InvalidArgumentError, match="in_features"):
        moeq.Linear.from_config(cfg, O_PROJ, 0, H)
    with pytest.raises(moeq.InvalidArgumentError, match="sum to"):
        moeq.Linear.from_config(cfg, QKV, H, 7, shards=qkv_shards(model))
    layer = moeq.Linear.from_config(cfg, O_PROJ, H, H)
    x = np.zeros((2, H), np.float32)
    with pytest.raises(moeq.StateError, match="not finalized"):
        layer.apply(x)
    with pytest.raises(moeq.NoMatchError, match="is not a parameter of linear layer"):
        layer.load("model.layers.1.self_attn.q_proj.weight",
                   np.zeros((H, H), np.uint8), dtype="F8_E4M3")
    with pytest.raises(moeq.CheckpointError, match="missing"):
        layer.finalize()
    layer.load_checkpoint(ckpt)
    layer.finalize()
    with pytest.raises(moeq.ShapeError, match=r"expected \[tokens, "):
        layer.apply(np.zeros((2, H + 1), np.float32))
    with pytest.raises(moeq.DTypeError, match="x is I8"):
        layer.apply(np.zeros((2, H), np.float64).astype(np.int8))
    layer.close()


def address(arg):
    if isinstance(arg, int):
        return arg
    return ctypes.cast(arg, ctypes.c_void_p).value


def test_numpy_and_torch_are_read_in_place(model, monkeypatch):
    layer = make(model, O_PROJ)
    H = model[2]
    calls = []
    original = _lib.lib.moeq_linear_apply

    def spy(*args):
        calls.append(args)
        return original(*args)

    monkeypatch.setattr(_lib.lib, "moeq_linear_apply", spy)
    x = np.random.default_rng(3).standard_normal((4, H)).astype(np.float32)
    out = np.empty((4, H), np.float32)
    assert layer.apply(x, out=out) is out
    assert address(calls[-1][3]) == x.ctypes.data and address(calls[-1][6]) == out.ctypes.data
    torch = pytest.importorskip("torch", reason="torch is not installed: the torch half of "
                                                "this test needs it")
    xt = torch.from_numpy(x).to(torch.bfloat16)
    ot = torch.empty((4, H), dtype=torch.bfloat16)
    assert layer.apply(xt, out=ot) is ot
    assert address(calls[-1][3]) == xt.data_ptr() and address(calls[-1][6]) == ot.data_ptr()
    fresh = layer.apply(xt)
    assert isinstance(fresh, torch.Tensor) and fresh.dtype == torch.bfloat16
    assert address(calls[-1][6]) == fresh.data_ptr()
    assert torch.equal(fresh.view(torch.int16), ot.view(torch.int16))
    ref = layer.apply_reference(torch.from_numpy(x))
    assert isinstance(ref, torch.Tensor) and ref.dtype == torch.float64
    layer.close()

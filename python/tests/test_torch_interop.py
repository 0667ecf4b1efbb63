"""CPU torch tensors through apply, route, dequantize and MoELayer.load: same results as
the numpy path, torch results for torch inputs, and no copies (checked by pointer
identity at the C call) where the dtype and layout allow it."""

import ctypes

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the torch interop "
                                            "tests need it (pip install torch)")

import moeq  # noqa: E402
from moeq import _lib  # noqa: E402

PRESET = "wna16-int4-g128"
PREFIX = "model.layers.1.mlp.experts"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A synthetic qwen3_moe checkpoint: (dir, config, checkpoint, finalized layer, dims)."""
    d = tmp_path_factory.mktemp("synth")
    moeq.synth_write(str(d), PRESET)
    cfg = moeq.Config.load(str(d))
    ckpt = moeq.Checkpoint(str(d))
    E, H, I, K = (int(cfg.model_number(k)) for k in (
        "num_experts", "hidden_size", "moe_intermediate_size", "num_experts_per_tok"))
    layer = moeq.MoELayer.from_config(cfg, PREFIX, E, H, I)
    layer.load_checkpoint(ckpt)
    layer.finalize()
    yield d, cfg, ckpt, layer, (E, H, I, K)
    layer.close()
    ckpt.close()
    cfg.close()


class Spy:
    """Wraps one library function and records the arguments of each call."""

    def __init__(self, monkeypatch, name):
        self.calls = []
        original = getattr(_lib.lib, name)

        def wrapper(*args):
            self.calls.append(args)
            return original(*args)

        monkeypatch.setattr(_lib.lib, name, wrapper)


def address(arg):
    """The address a ctypes argument (int, c_void_p or pointer) carries."""
    if isinstance(arg, int):
        return arg
    return ctypes.cast(arg, ctypes.c_void_p).value


def routed(model, tokens=7, seed=0):
    E, H, _, K = model[4]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, H, generator=g)
    logits = torch.randn(tokens, E, generator=g)
    ids, weights = moeq.route(logits, K)
    return x, ids, weights


def test_route_takes_and_returns_tensors(model):
    E, _, _, K = model[4]
    logits = torch.randn(9, E)
    ids, weights = moeq.route(logits, K, scoring="sigmoid")
    assert isinstance(ids, torch.Tensor) and ids.dtype == torch.int32
    assert weights.dtype == torch.float32 and ids.shape == weights.shape == (9, K)
    np_ids, np_weights = moeq.route(logits.numpy(), K, scoring="sigmoid")
    assert isinstance(np_ids, np.ndarray)
    np.testing.assert_array_equal(ids.numpy(), np_ids)
    np.testing.assert_array_equal(weights.numpy(), np_weights)
    # bfloat16 logits are widened to float32 first: the same routing as the float32 values.
    bf = logits.to(torch.bfloat16)
    ids_bf, w_bf = moeq.route(bf, K)
    ids_f, w_f = moeq.route(bf.float(), K)
    assert torch.equal(ids_bf, ids_f) and torch.equal(w_bf, w_f)


def test_route_reads_float32_logits_in_place(model, monkeypatch):
    E, _, _, K = model[4]
    logits = torch.randn(5, E)
    bias = torch.randn(E) * 0.1
    spy = Spy(monkeypatch, "moeq_route")
    ids, weights = moeq.route(logits, K, scoring="sigmoid", correction_bias=bias)
    cfg, x, _, ids_out, weights_out = spy.calls[-1][:5]
    assert address(x) == logits.data_ptr()
    assert address(cfg._obj.correction_bias) == bias.data_ptr()
    # The returned tensors own the very buffers the library wrote.
    assert address(ids_out) == ids.data_ptr() and address(weights_out) == weights.data_ptr()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_apply_matches_numpy(model, dtype):
    layer = model[3]
    x, ids, weights = routed(model)
    x = x.to(dtype)
    out = layer.apply(x, ids, weights)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.shape == x.shape
    # The numpy path on the same bits (BF16 as uint16) gives the same bits.
    x_np = x.view(torch.int16).numpy().view(np.uint16) if dtype == torch.bfloat16 else x.numpy()
    out_np = layer.apply(x_np, ids.numpy(), weights.numpy())
    assert isinstance(out_np, np.ndarray)
    got = out.view(torch.int16).numpy().view(np.uint16) if dtype == torch.bfloat16 else out.numpy()
    np.testing.assert_array_equal(got, out_np)
    ref = layer.apply_reference(x, ids, weights)
    assert isinstance(ref, torch.Tensor) and ref.dtype == torch.float64
    tol = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype]
    err = (out.double() - ref).abs().max() / ref.abs().max()
    assert err < tol, err


def test_apply_out_dtype_and_int64_ids(model):
    layer = model[3]
    x, ids, weights = routed(model, seed=1)
    out = layer.apply(x, ids.long(), weights, out_dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16
    ref = layer.apply(x, ids, weights, out_dtype="BF16")
    assert torch.equal(out.view(torch.int16), ref.view(torch.int16))


def test_apply_is_zero_copy(model, monkeypatch):
    """x, ids, weights and out reach the library as the caller's own memory."""
    layer = model[3]
    x, ids, weights = routed(model, seed=2)
    x = x.to(torch.bfloat16)
    out = torch.empty(x.shape, dtype=torch.bfloat16)
    spy = Spy(monkeypatch, "moeq_moe_apply")
    result = layer.apply(x, ids, weights, out=out)
    assert result is out
    args = spy.calls[-1]
    assert address(args[3]) == x.data_ptr()
    assert address(args[6]) == ids.data_ptr()
    assert address(args[7]) == weights.data_ptr()
    assert address(args[9]) == out.data_ptr()
    # A returned tensor (no out=) owns the very buffer the library wrote.
    fresh = layer.apply(x, ids, weights)
    assert address(spy.calls[-1][9]) == fresh.data_ptr()
    assert torch.equal(fresh.view(torch.int16), out.view(torch.int16))


def test_apply_copies_only_what_it_must(model, monkeypatch):
    layer = model[3]
    x, ids, weights = routed(model, seed=3)
    wide = torch.cat([x, x], dim=1)[:, ::2]  # a strided view: copied once, same values
    assert not wide.is_contiguous()
    spy = Spy(monkeypatch, "moeq_moe_apply")
    out = layer.apply(wide, ids, weights)
    assert address(spy.calls[-1][3]) != wide.data_ptr()
    assert torch.equal(out, layer.apply(wide.contiguous(), ids, weights))


def test_apply_rejects_what_it_cannot_take(model):
    layer = model[3]
    x, ids, weights = routed(model)
    with pytest.raises(moeq.DTypeError, match="float64|F64"):
        layer.apply(x.double(), ids, weights)
    with pytest.raises(moeq.DTypeError, match="out is F32, the output dtype is BF16"):
        layer.apply(x.bfloat16(), ids, weights, out=torch.empty(x.shape))
    with pytest.raises(moeq.ShapeError, match="out has shape"):
        layer.apply(x, ids, weights, out=torch.empty(2, 3))
    with pytest.raises(moeq.InvalidArgumentError, match="contiguous"):
        layer.apply(x, ids, weights, out=torch.empty(x.shape[1], x.shape[0]).t())
    with pytest.raises(moeq.DTypeError, match="integers"):
        layer.apply(x, weights, weights)
    meta = torch.empty(x.shape, device="meta")
    with pytest.raises(moeq.InvalidArgumentError, match="moeq runs on the CPU"):
        layer.apply(meta, ids, weights)


def test_requires_grad_inputs_are_read_without_copy(model, monkeypatch):
    layer = model[3]
    x, ids, weights = routed(model, seed=4)
    x.requires_grad_(True)
    spy = Spy(monkeypatch, "moeq_moe_apply")
    out = layer.apply(x, ids, weights)
    assert address(spy.calls[-1][3]) == x.data_ptr() and not out.requires_grad


def expert_tensors(ckpt, module):
    return {n[len(module) + 1:]: ckpt.tensor(n) for n in ckpt.names()
            if n.startswith(module + ".")}


def as_torch(dtype, arr):
    """A checkpoint tensor (read-only ndarray of `dtype`) as a torch tensor of its own."""
    t = torch.from_numpy(np.array(arr))  # a writable copy: the mapping is read-only
    return t.view(torch.bfloat16) if dtype == "BF16" else t


def test_dequantize_takes_tensors_in_place(model, monkeypatch):
    _, cfg, ckpt, _, _ = model
    module = PREFIX + ".3.down_proj"
    res = cfg.resolve(module)
    np_tensors = {}
    for bare, arr in expert_tensors(ckpt, module).items():
        dtype = ckpt.info(module + "." + bare)["dtype"]
        np_tensors[bare] = (dtype, arr)
    t_tensors = {bare: as_torch(dtype, arr) for bare, (dtype, arr) in np_tensors.items()}
    assert t_tensors["weight_scale"].dtype == torch.bfloat16
    spy = Spy(monkeypatch, "moeq_dequantize")
    out = moeq.dequantize(res["weights"], res["format"], t_tensors, module=module)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    # The moeq_tensor array the library read points at the tensors' own memory.
    arr, n = spy.calls[-1][4], spy.calls[-1][5]
    seen = {ctypes.string_at(arr[i].name).decode(): arr[i].data for i in range(n)}
    for bare, t in t_tensors.items():
        assert seen[bare] == t.data_ptr(), bare
    # The returned tensor owns the very buffer the library wrote.
    assert address(spy.calls[-1][7]) == out.data_ptr()
    ref = moeq.dequantize(res["weights"], res["format"], np_tensors, module=module)
    np.testing.assert_array_equal(out.numpy(), ref)
    bf = moeq.dequantize(res["weights"], res["format"], t_tensors, module=module,
                         out_dtype=torch.bfloat16)
    assert bf.dtype == torch.bfloat16
    assert torch.equal(bf, out.to(torch.bfloat16))


def test_layer_loads_torch_tensors(model):
    _, cfg, ckpt, finished, (E, H, I, K) = model
    layer = moeq.MoELayer.from_config(cfg, PREFIX, E, H, I)
    for name in ckpt.names():
        if name.startswith(PREFIX + "."):
            dtype = ckpt.info(name)["dtype"]
            assert layer.load(name, as_torch(dtype, ckpt.tensor(name))) == "loaded", name
    assert layer.missing() == []
    layer.finalize()
    x, ids, weights = routed(model, seed=5)
    assert torch.equal(layer.apply(x, ids, weights), finished.apply(x, ids, weights))

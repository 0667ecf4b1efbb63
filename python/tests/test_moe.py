"""MoELayer and Context: argument checks, and the lifecycle (manifest, load,
finalize, apply) of a wna16 layer against a numpy forward."""

import threading

import numpy as np
import pytest

import moeq

from test_dequant import bf16_bits_to_f32, f32_to_bf16_bits, pack_rows

# apply() against the numpy forward on the same dequantized weights (weight-only
# int4: only float32 summation order differs), and its BF16 output (one BF16
# rounding, 2^-8 relative).
APPLY_TOL = {"rtol": 1e-4, "atol": 1e-5}
APPLY_TOL_BF16 = {"rtol": 2.0**-8, "atol": 1e-5}

E, H, I, GROUP = 4, 64, 32, 32
PREFIX = "model.layers.3.mlp.experts"
INT4_G32 = {"num_bits": 4, "strategy": "group", "group_size": GROUP, "symmetric": True}


# ---- contexts and argument checks ---------------------------------------------------


def test_context():
    with moeq.Context(threads=4, force_ref=True) as ctx:
        assert not ctx.closed
        assert ctx.kernels == "reference"
    assert ctx.closed
    with pytest.raises(moeq.InvalidArgumentError, match="threads is -1"):
        moeq.Context(threads=-1)


def test_context_kernels(monkeypatch):
    with moeq.Context() as ctx:
        assert ctx.kernels in ("avx512", "avx2", "portable")
    monkeypatch.setenv("MOEQ_KERNELS", "portable")
    with moeq.Context() as ctx:
        assert ctx.kernels == "portable"
    monkeypatch.setenv("MOEQ_KERNELS", "sse9")
    with pytest.raises(moeq.InvalidArgumentError, match="MOEQ_KERNELS is 'sse9'"):
        moeq.Context()


def test_create_checks_the_config_first():
    with pytest.raises(moeq.InvalidArgumentError, match="num_experts is 0"):
        moeq.MoELayer("wna16", INT4_G32, None, "pack-quantized", 0, H, I)
    with pytest.raises(moeq.InvalidArgumentError, match="hidden_size"):
        moeq.MoELayer("wna16", INT4_G32, None, "pack-quantized", E, 0, I)
    with pytest.raises(moeq.InvalidArgumentError, match="num_local_experts"):
        moeq.MoELayer("wna16", INT4_G32, None, "pack-quantized", E, H, I, num_local_experts=5)
    with pytest.raises(moeq.InvalidArgumentError, match="expert_map"):
        moeq.MoELayer("wna16", INT4_G32, None, "pack-quantized", E, H, I, num_local_experts=2,
                      expert_map=[0, 0, -1, -1])
    with pytest.raises(moeq.InvalidArgumentError, match=r"proj_names\[2\]"):
        moeq.MoELayer("wna16", INT4_G32, None, "pack-quantized", E, H, I,
                      proj_names=["w1", "w3", "a.b"])
    with pytest.raises(moeq.UnsupportedError, match="scheme w8a8_fp8 cannot run these args"):
        moeq.MoELayer("w8a8_fp8", INT4_G32, None, "pack-quantized", E, H, I)


def test_python_side_argument_checks():
    with pytest.raises(moeq.InvalidArgumentError, match="scheme 'w3a3'"):
        moeq.MoELayer("w3a3", INT4_G32, None, "pack-quantized", E, H, I)
    with pytest.raises(moeq.InvalidArgumentError, match="activation 'relu'"):
        moeq.MoELayer("wna16", INT4_G32, None, "pack-quantized", E, H, I, activation="relu")
    with pytest.raises(moeq.ShapeError, match="expert_map"):
        moeq.MoELayer("wna16", INT4_G32, None, "pack-quantized", E, H, I, expert_map=[0, 1])
    with pytest.raises(moeq.InvalidArgumentError, match="proj_names"):
        moeq.MoELayer("wna16", INT4_G32, None, "pack-quantized", E, H, I, proj_names=["a"])
    with pytest.raises(TypeError):
        moeq.MoELayer("wna16", "int4", None, "pack-quantized", E, H, I)


# ---- the lifecycle -------------------------------------------------------------------


def make_checkpoint(rng):
    """{name: tensor} for E experts of gate/up [I, H] and down [H, I], int4 group 32,
    and the float32 weights they dequantize to."""
    tensors, dense = {}, {}
    for e in range(E):
        for proj, (rows, cols) in (("gate_proj", (I, H)), ("up_proj", (I, H)),
                                   ("down_proj", (H, I))):
            q = rng.integers(-8, 8, (rows, cols))
            scale = f32_to_bf16_bits(rng.uniform(0.01, 0.05, (rows, cols // GROUP)))
            base = f"{PREFIX}.{e}.{proj}"
            tensors[f"{base}.weight_packed"] = pack_rows(q, 4)
            tensors[f"{base}.weight_scale"] = ("BF16", scale)
            tensors[f"{base}.weight_shape"] = np.array([rows, cols], np.int64)
            dense[(e, proj)] = (q * np.repeat(bf16_bits_to_f32(scale), GROUP, axis=1)).astype(
                np.float32)
    return tensors, dense


def reference_moe(x, ids, weights, dense):
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        for e, w in zip(ids[t], weights[t]):
            g = x[t] @ dense[(e, "gate_proj")].T
            u = x[t] @ dense[(e, "up_proj")].T
            a = g / (1 + np.exp(-g)) * u
            out[t] += w * (a @ dense[(e, "down_proj")].T)
    return out


@pytest.fixture
def layer_and_data(tmp_path):
    rng = np.random.default_rng(5)
    tensors, dense = make_checkpoint(rng)
    cfg = moeq.Config.parse({"quant_method": "compressed-tensors", "format": "pack-quantized",
                             "config_groups": {"experts": {"targets": ["re:.*experts.*"],
                                                           "weights": INT4_G32}}})
    res = cfg.resolve_moe(PREFIX, E)
    scheme, _ = cfg.select(res)
    assert scheme == "wna16"
    layer = moeq.MoELayer(scheme, res["weights"], res["input_activations"], res["format"], E, H,
                           I, prefix=PREFIX, dequant_flags=cfg.dequant_flags)
    return layer, tensors, dense, rng


def test_manifest_load_finalize_apply(layer_and_data):
    layer, tensors, dense, rng = layer_and_data
    assert layer.scheme == "wna16"
    params = layer.params()
    assert params and all(p["shape"][0] == E for p in params)
    names = {p["name"] for p in params}
    assert all(p["ckpt_suffix"] for p in params)
    view = layer.param_array(params[0]["name"])
    assert view.flags.writeable and view.shape == params[0]["shape"]
    del view

    missing = layer.missing()
    assert missing and all(m.startswith(PREFIX + ".") for m in missing)
    assert set(missing) <= set(tensors)
    with pytest.raises(moeq.StateError):
        layer.apply(np.zeros((1, H), np.float32), [[0]], [[1.0]])
    with pytest.raises(moeq.CheckpointError):
        layer.finalize()  # nothing loaded yet: the message lists what is missing

    for name, value in tensors.items():
        assert layer.load(name, value) == "loaded"
    assert layer.missing() == []
    with pytest.raises(moeq.NoMatchError):
        layer.load(PREFIX + ".0.gate_proj.weight_nothing", np.zeros(1, np.float32))

    kept = layer.param_array(sorted(names)[0])
    with pytest.raises(moeq.StateError, match="views are still alive"):
        layer.finalize()
    del kept
    layer.finalize()
    with pytest.raises(moeq.StateError):
        layer.finalize()

    x = bf16_bits_to_f32(f32_to_bf16_bits(rng.standard_normal((9, H))))
    ids, weights = moeq.route(rng.standard_normal((9, E)).astype(np.float32), 2)
    want = reference_moe(x, ids, weights, dense)
    got = layer.apply(x, ids, weights)
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, want, rtol=APPLY_TOL["rtol"],
                               atol=APPLY_TOL["atol"] * np.abs(want).max())
    bf16 = layer.apply(f32_to_bf16_bits(x), ids, weights, out_dtype="BF16")
    assert bf16.dtype == np.uint16
    np.testing.assert_allclose(bf16_bits_to_f32(bf16), want, rtol=APPLY_TOL_BF16["rtol"],
                               atol=APPLY_TOL_BF16["atol"] * np.abs(want).max())

    # out=: the result is written into the caller's array, which comes back as is.
    buf = np.full(x.shape, np.nan, np.float32)
    assert layer.apply(x, ids, weights, out=buf) is buf
    np.testing.assert_array_equal(buf, got)
    bits = np.empty(x.shape, np.uint16)
    assert layer.apply(x, ids, weights, out_dtype="BF16", out=bits) is bits
    np.testing.assert_array_equal(bits, layer.apply(x, ids, weights, out_dtype="BF16"))
    with pytest.raises(moeq.DTypeError, match="out is F16, the output dtype is F32"):
        layer.apply(x, ids, weights, out=np.empty(x.shape, np.float16))
    with pytest.raises(moeq.ShapeError, match="out has shape"):
        layer.apply(x, ids, weights, out=np.empty((1, H), np.float32))
    with pytest.raises(moeq.InvalidArgumentError, match="C-contiguous"):
        layer.apply(x, ids, weights, out=np.empty((H, x.shape[0]), np.float32).T)

    # A finalized layer serves threads at once, each with its own context.
    results, errors = {}, []

    def worker(i):
        try:
            with moeq.Context() as ctx:
                results[i] = layer.apply(x, ids, weights, ctx=ctx)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for r in results.values():
        np.testing.assert_array_equal(r, got)


def test_load_checkpoint_from_a_file(layer_and_data, tmp_path):
    layer, tensors, _, _ = layer_and_data
    path = str(tmp_path / "model.safetensors")
    moeq.safetensors_write(path, dict(tensors, **{"model.norm.weight": np.ones(H, np.float32)}))
    with moeq.Checkpoint(path) as ckpt:
        assert layer.load_checkpoint(ckpt) == {"loaded": len(tensors), "skipped": 0}
    assert layer.missing() == []
    layer.finalize()


def test_experts_of_another_rank_are_skipped(tmp_path):
    tensors, _ = make_checkpoint(np.random.default_rng(9))
    layer = moeq.MoELayer("wna16", INT4_G32, None, "pack-quantized", E, H, I, prefix=PREFIX,
                           num_local_experts=2, first_expert=2)
    outcomes = [layer.load(n, v) for n, v in tensors.items()]
    assert outcomes.count("skipped") == outcomes.count("loaded") == len(tensors) // 2
    assert layer.missing() == []

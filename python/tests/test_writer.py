"""The writer side from Python: compress -> dequantize round trips, synthetic
checkpoints -> inspect, and a MoE layer from a written checkpoint checked
against the library's float64 path."""

import numpy as np
import pytest

import moeq


def test_compress_round_trip():
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((64, 128)) * 0.05).astype(np.float32)
    args = {"num_bits": 4, "group_size": 32}
    tensors = moeq.compress(args, "pack-quantized", "m.experts.0.up_proj", w, weight_dtype="F32")
    assert set(tensors) == {"m.experts.0.up_proj." + p for p in
                            ("weight_packed", "weight_shape", "weight_scale")}
    assert tensors["m.experts.0.up_proj.weight_packed"][0] == "I32"
    deq = moeq.dequantize(moeq.quant_args(args), "pack-quantized",
                          {k.rsplit(".", 1)[1]: v for k, v in tensors.items()})
    # int4 symmetric: within half a step (amax / 7.5 / 2) of each group's amax
    step = np.abs(w).reshape(64, 4, 32).max(axis=2, keepdims=True) / 7.5
    assert np.all(np.abs(deq - w).reshape(64, 4, 32) <= step / 2 * 1.001 + 1e-7)


def test_compress_rejects_bad_weights():
    w = np.zeros((4, 32), np.float32)
    w[1, 3] = np.nan
    with pytest.raises(moeq.InvalidArgumentError, match=r"\[1, 3\]"):
        moeq.compress({"num_bits": 4, "group_size": 32}, "pack-quantized", "m.x", w)


def test_presets_and_inspect(tmp_path):
    names = [n for n, _ in moeq.synth_presets()]
    assert "glm-mini" in names and "nvfp4-w4a4" in names
    moeq.synth_write(tmp_path, "glm-mini", seed=7)
    with moeq.Config.load(str(tmp_path)) as cfg, moeq.Checkpoint(str(tmp_path)) as ck:
        report, summary = moeq.inspect(cfg, ck)
    assert summary["unconsumed"] == 0 and summary["missing"] == 0 and summary["errors"] == 0
    assert summary["moe_layers"] >= 1
    with pytest.raises(moeq.NoMatchError):
        moeq.synth_write(tmp_path / "x", "no-such-preset")
    with pytest.raises(moeq.InvalidArgumentError):
        moeq.synth_write(tmp_path / "y", "glm-mini", groups=3)


def test_layer_from_written_checkpoint(tmp_path):
    moeq.synth_write(tmp_path, "w8a8-fp8-channel-token", seed=3)
    with moeq.Config.load(str(tmp_path)) as cfg, moeq.Checkpoint(str(tmp_path)) as ck:
        prefix = next(n for n in ck.names() if ".mlp.experts." in n).split(".mlp.experts.")[0]
        prefix += ".mlp.experts"
        experts = int(cfg.model_number("n_routed_experts") or cfg.model_number("num_experts"))
        hidden = int(cfg.model_number("hidden_size"))
        inter = int(cfg.model_number("moe_intermediate_size"))
        layer = moeq.MoELayer.from_config(cfg, prefix, experts, hidden, inter)
        counts = layer.load_checkpoint(ck)
        assert counts["loaded"] > 0 and counts["skipped"] == 0
        layer.finalize()
        rng = np.random.default_rng(1)
        x = rng.standard_normal((5, hidden)).astype(np.float32)
        ids, wts = moeq.route(rng.standard_normal((5, experts)).astype(np.float32), 2)
        out = layer.apply(x, ids, wts)
        ref = layer.apply_reference(x, ids, wts)
        assert np.max(np.abs(out - ref)) <= 2e-3 * np.max(np.abs(ref))

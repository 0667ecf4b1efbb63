"""`moeq manifest --json` for every synthetic preset is valid JSON and lists
exactly the parameters the library's layer declares (names, dtypes, shapes,
checkpoint suffixes, layouts), for the scheme the binding selects."""

import json
import subprocess

import pytest

import moeq

PRESETS = [name for name, _ in moeq.synth_presets()]


@pytest.mark.parametrize("preset", PRESETS)
def test_manifest_matches_binding(tmp_path, cli, preset):
    moeq.synth_write(tmp_path, preset)
    cfg = moeq.Config.load(str(tmp_path))
    experts = int(cfg.model_number("n_routed_experts"))
    hidden = int(cfg.model_number("hidden_size"))
    inter = int(cfg.model_number("moe_intermediate_size"))
    layer = f"model.layers.{int(cfg.model_number('first_k_dense_replace'))}.mlp.experts"
    params_dtype = {"float32": "F32", "float16": "F16"}.get(cfg.model_string("torch_dtype"),
                                                           "BF16")
    run = subprocess.run([cli, "manifest", str(tmp_path), "--layer", layer, "--json"],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    want = moeq.MoELayer.from_config(cfg, layer, experts, hidden, inter,
                                     params_dtype=params_dtype)
    assert got["scheme"] == want.scheme
    assert (got["num_experts"], got["hidden_size"], got["intermediate_size"]) == \
        (experts, hidden, inter)
    assert got["reason"].startswith(want.scheme + ":")
    params = want.params()
    assert [p["name"] for p in got["params"]] == [p["name"] for p in params]
    for g, w in zip(got["params"], params):
        assert g["dtype"] == w["dtype"], g["name"]
        assert tuple(g["shape"]) == tuple(w["shape"]), g["name"]
        assert g["layout"] == w["layout"], g["name"]
        assert g["required"] == w["required"] and g["is_transposed"] == w["is_transposed"]
        assert g["nbytes"] == w["nbytes"]
        if w["layout"] != "derived":
            assert g["ckpt_suffix"] == w["ckpt_suffix"]
            assert g["from"] == (["gate_proj", "up_proj"] if g["name"].startswith("w13_")
                                 else ["down_proj"])


def test_manifest_errors(tmp_path, cli):
    moeq.synth_write(tmp_path, "nvfp4-w4a4", num_layers=1, first_dense_layers=0)
    layer = "model.layers.0.mlp.experts"

    def manifest(*args):
        return subprocess.run([cli, "manifest", str(tmp_path), "--layer", layer, *args],
                              capture_output=True, text=True, check=False)

    # An odd hidden size cannot be packed two FP4 values per byte: the scheme says so.
    bad = manifest("--hidden", "201")
    assert bad.returncode == 1
    assert f"{layer}: SHAPE: w4a4_nvfp4: FP4 weights pack two values per byte; " \
           "hidden_size (201)" in bad.stderr
    bad = manifest("--proj", "w1,w3")
    assert bad.returncode == 2 and "three names GATE,UP,DOWN" in bad.stderr
    bad = manifest("--experts", "0")
    assert bad.returncode == 2 and "--experts takes 1..1048576, got '0'" in bad.stderr
    # Mixtral names: the manifest says which checkpoint tensors feed it.
    ok = manifest("--proj", "w1,w3,w2")
    assert ok.returncode == 0, ok.stderr
    assert "{w1,w3}.weight_packed" in ok.stdout and "w2.weight_scale" in ok.stdout

"""Config.plan(engine=...): what SGLang / vLLM would build or raise per MoE layer."""

import json
import os
import subprocess

import pytest

import moeq

from conftest import config_paths

LINES = [
    "model.layers.3.mlp.experts moe 8",
    "model.layers.1.mlp.experts moe 8",
    "model.language_model.layers.1.mlp.experts moe 4",
    "model.layers.3.self_attn.o_proj",
    "lm_head",
]

ENGINE_KEYS = {"engine", "engine_scheme", "engine_error", "engine_group", "engine_differs"}


def int4(group_size=128):
    return {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
            "group_size": group_size}


INT8_TOKEN = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token",
              "dynamic": True}
FP8_TOKEN = dict(INT8_TOKEN, type="float")


def config(fmt, targets, weights, inputs=None, ignore=("lm_head",)):
    return moeq.Config.parse({"quant_method": "compressed-tensors", "format": fmt,
                              "config_groups": {"group_0": {"targets": list(targets),
                                                            "weights": weights,
                                                            "input_activations": inputs}},
                              "ignore": list(ignore)})


def moe_row(cfg, engine):
    rows = cfg.plan(["model.layers.3.mlp.experts moe 8"], engine=engine)
    return rows[0]


# The project's seed failures, as predictions: (config, engine, error substring).
SEEDS = [
    (lambda: config("pack-quantized", ["re:.*mlp.experts.*"], int4(),
                    ignore=["lm_head", "re:.*self_attn.*", "re:.*mlp.gate$"]),
     "sglang@eba6af385d", "KeyError: 'Linear'"),
    (lambda: config("pack-quantized", ["Linear"], int4(32)),
     "sglang@eba6af385d:sm100,flashinfer_trtllm",
     "TypeError: Can't instantiate abstract class CompressedTensorsMxInt4MoE"),
    (lambda: config("int-quantized", ["Linear"], int4(), INT8_TOKEN),
     "sglang@d315eb725", "NotImplementedError: The W4A8Int8 Fused MoE scheme is implemented "
                         "only for NPU for now."),
    (lambda: config("pack-quantized", [r"re:.*mlp\.experts\..*"], int4(), FP8_TOKEN),
     "sglang@d315eb725", "KeyError: 'Linear'"),
]


@pytest.mark.parametrize("make,engine,error", SEEDS)
def test_seed_failures_are_predicted(make, engine, error):
    with make() as cfg:
        row = moe_row(cfg, engine)
    assert row["engine_scheme"] is None
    assert error in row["engine_error"]
    assert row["engine_differs"] == ["error"]
    assert row["error"] is None  # moeq itself plans the layer


def test_newest_version_is_the_default_and_fixes_the_seed_era():
    with SEEDS[0][0]() as cfg:
        row = moe_row(cfg, "sglang")
    assert row["engine"] == "sglang@d315eb725:sm90,auto"
    assert (row["engine_scheme"], row["engine_error"]) == ("CompressedTensorsWNA16MoE", None)
    assert (row["engine_group"], row["engine_differs"]) == ("group_0", [])


def test_unknown_engine_lists_the_modelled_versions():
    with SEEDS[0][0]() as cfg:
        with pytest.raises(moeq.InvalidArgumentError, match="sglang@eba6af385d"):
            moe_row(cfg, "sglang@ffff0000")
        with pytest.raises(TypeError):
            moe_row(cfg, 3)


def cli_plan(cli, path, tmp_path, engine):
    layers = tmp_path / "layers.txt"
    layers.write_text("\n".join(LINES) + "\n")
    proc = subprocess.run([cli, "plan", path, "--layers", str(layers), "--json",
                           "--engine", engine], capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("engine", ["sglang", "sglang@eba6af385d", "sglang:npu", "vllm",
                                    "vllm:sm100,flashinfer_trtllm"])
@pytest.mark.parametrize("path", config_paths(), ids=os.path.basename)
def test_every_config_gets_a_verdict(path, engine, cli, tmp_path):
    with moeq.Config.load(path) as cfg:
        rows = cfg.plan(LINES, engine=engine)
    assert rows == cli_plan(cli, path, tmp_path, engine)
    for r in rows:
        assert ENGINE_KEYS <= set(r)
        if r["kind"] == "moe":
            # Exactly one of a class and an exception.
            assert (r["engine_scheme"] is None) != (r["engine_error"] is None), r
            assert r["engine_differs"] == [] or set(r["engine_differs"]) <= {
                "error", "scheme", "group", "unquantized", "quantized", "args", "moeq_fails"}
        else:
            assert r["engine_scheme"] is None and r["engine_error"] is None
            assert r["engine_differs"] == []


def test_text_table_has_the_engine_column():
    with SEEDS[3][0]() as cfg:
        table = cfg.plan(["model.layers.3.mlp.experts moe 8"], json=False, engine="sglang")
    lines = table.splitlines()
    assert lines[0] == "engine sglang@d315eb725:sm90,auto"
    assert lines[1].split()[:7] == ["LAYER", "KIND", "STATUS", "GROUP", "FORMAT", "SCHEME",
                                    "ENGINE"]
    assert "KeyError *" in lines[2]
    assert "    engine: KeyError: 'Linear' [differs: error]" in lines


def test_vllm_reads_the_group_format():
    """A mixed-precision checkpoint: vLLM takes the experts' own pack-quantized
    format, SGLang's WNA16 constructor the top-level one."""
    cfg = moeq.Config.parse({
        "quant_method": "compressed-tensors", "format": "mixed-precision",
        "config_groups": {"experts": {"targets": [r"re:.*mlp\.experts.*"],
                                      "format": "pack-quantized", "weights": int4()}}})
    with cfg:
        vllm = moe_row(cfg, "vllm")
        sglang = moe_row(cfg, "sglang")
    assert vllm["engine"] == "vllm@003a19308:sm90,auto"
    assert vllm["engine_scheme"] == "CompressedTensorsWNA16MarlinMoEMethod"
    assert vllm["engine_differs"] == []
    assert sglang["engine_error"].startswith("ValueError: ('For Fused MoE layers, only ', "
                                             "'pack-quantized '")


@pytest.mark.parametrize("preset", [name for name, _ in moeq.synth_presets()])
def test_inspect_gives_every_synth_preset_a_verdict(preset, tmp_path):
    moeq.synth_write(tmp_path, preset, num_experts=4, top_k=2)
    with moeq.Config.load(str(tmp_path)) as cfg, moeq.Checkpoint(str(tmp_path)) as ck:
        for engine in ("sglang", "sglang@eba6af385d", "vllm"):
            report, summary = moeq.inspect(cfg, ck, names_only=True, engine=engine)
            moe = [m for m in report["modules"] if m["kind"] == "moe"]
            assert len(moe) == summary["moe_layers"] > 0
            for m in moe:
                assert m["engine"].startswith(engine.split(":")[0])
                assert (m["engine_scheme"] is None) != (m["engine_error"] is None), m
            for m in report["modules"]:
                if m["kind"] != "moe":
                    assert m["engine_scheme"] is None and m["engine_differs"] == []


def test_inspect_predicts_the_w4a8_seed_failure(tmp_path):
    moeq.synth_write(tmp_path, "w4a8-int8", num_experts=4, top_k=2)
    with moeq.Config.load(str(tmp_path)) as cfg, moeq.Checkpoint(str(tmp_path)) as ck:
        report, _ = moeq.inspect(cfg, ck, names_only=True, engine="sglang@d315eb725")
        text, _ = moeq.inspect(cfg, ck, json=False, names_only=True, engine="sglang")
    moe = [m for m in report["modules"] if m["kind"] == "moe"]
    assert all(m["engine_error"].startswith("NotImplementedError: The W4A8Int8") for m in moe)
    assert all(m["engine_differs"] == ["error"] and m["scheme"] == "w4a8_int8" for m in moe)
    assert "engine sglang@d315eb725:sm90,auto" in text


def test_engines_lists_the_modelled_versions():
    names = [name for name, _ in moeq.engines()]
    assert names[:2] == ["sglang@d315eb725", "sglang@eba6af385d"]
    assert "vllm@003a19308" in names
    assert all(summary for _, summary in moeq.engines())


@pytest.mark.parametrize("make,engine,error", SEEDS)
def test_engine_verdict_matches_the_plan(make, engine, error):
    with make() as cfg:
        v = cfg.engine_verdict("model.layers.3.mlp.experts", 8, engine=engine)
        row = moe_row(cfg, engine)
    assert error in v["error"] and v["scheme"] is None
    assert (v["engine"], v["error"], v["group"], v["differs"]) == (
        row["engine"], row["engine_error"], row["engine_group"], row["engine_differs"])
    assert v["moeq_scheme"] == row["scheme"]
    assert v["branch"]


def test_engine_verdict_linear_args_and_bad_input():
    # W4AFP8 with a "Linear" target builds; its constructor reads the Linear group.
    with config("pack-quantized", ["Linear"], int4(), FP8_TOKEN) as cfg:
        v = cfg.engine_verdict("model.layers.3.mlp.experts", 8)
        assert (v["scheme"], v["error"], v["args_group"], v["differs"]) == (
            "CompressedTensorsW4AFP8MoE", None, "group_0", [])
        assert v["moeq_scheme"] == "w4a8_fp8"
        with pytest.raises(moeq.InvalidArgumentError, match="num_experts"):
            cfg.engine_verdict("model.layers.3.mlp.experts", 0)
        with pytest.raises(moeq.InvalidArgumentError, match="not modelled"):
            cfg.engine_verdict("model.layers.3.mlp.experts", 8, engine="tensorrt-llm")

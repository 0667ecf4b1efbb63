"""Config.plan: every config in tests/data/configs, against `moeq plan --json`."""

import json
import os
import subprocess

import pytest

import moeq

from conftest import config_paths

# Layer names covering the configs' targets and ignore lists: attention,
# fused names, dense MLP, routers, MoE layers with default and custom
# projection names, GLM's layer ranges, Qwen3.5's language_model names.
LINES = [
    "# comment lines and blank lines are skipped",
    "",
    "model.embed_tokens",
    "model.layers.0.self_attn.q_proj",
    "model.layers.0.self_attn.k_proj",
    "model.layers.0.self_attn.o_proj",
    "model.layers.0.self_attn.qkv_proj",
    "model.layers.0.mlp.gate_up_proj",
    "model.layers.0.mlp.down_proj",
    "model.layers.3.self_attn.q_a_proj",
    "model.layers.3.self_attn.kv_b_proj",
    "model.layers.3.self_attn.indexer.wk",
    "model.layers.3.input_layernorm",
    "model.layers.3.mlp.gate",
    "model.layers.3.mlp.shared_experts.gate_proj",
    "model.layers.3.mlp.experts moe 8",
    "model.layers.3.mlp.experts.5.down_proj",
    "model.layers.77.mlp.experts moe 256",
    "model.layers.78.mlp.experts moe 4",
    "model.layers.1.block_sparse_moe.experts moe 4 w1,w3,w2",
    "model.language_model.layers.0.linear_attn.out_proj",
    "model.language_model.layers.1.mlp.experts moe 4",
    "model.visual.blocks.0.attn.qkv",
    "lm_head",
]

# Per config (file prefix): what a few rows must say.
#   moe row "model.layers.3.mlp.experts": (status, group, format, scheme)
EXPECT_MOE = {
    "glm": ("quantized", "group_1", "pack-quantized", "wna16"),
    "llama-3.1": ("quantized", "group_0", "float-quantized", "w8a8_fp8"),
    "llama2c": ("quantized", "group_0", "pack-quantized", "wna16"),
    # MXFP4 inputs too: w4a16_mxfp4 quantizes them as the config says.
    "meta-llama-3": ("quantized", "group_0", "mxfp4-pack-quantized", "w4a16_mxfp4"),
    "phi-3": ("quantized", "group_0", "naive-quantized", "w8a8_fp8"),
    "qwen3-w8a8": ("quantized", "group_0", "int-quantized", "w8a8_int8"),
    "qwen3.5": ("quantized", "group_0", "mxfp4-pack-quantized", "w4a16_mxfp4"),
}


def prefix_of(path):
    base = os.path.basename(path)
    return next(k for k in sorted(EXPECT_MOE, key=len, reverse=True) if base.startswith(k))


def cli_plan(cli, config, tmp_path, extra=()):
    layers = tmp_path / "layers.txt"
    layers.write_text("\n".join(LINES) + "\n")
    proc = subprocess.run([cli, "plan", config, "--layers", str(layers), "--json", *extra],
                          capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr  # 1: some line in error
    return json.loads(proc.stdout)


@pytest.mark.parametrize("path", config_paths(), ids=os.path.basename)
def test_plan_matches_the_cli(path, cli, tmp_path):
    with moeq.Config.load(path) as cfg:
        rows = cfg.plan(LINES)
        assert rows == cli_plan(cli, path, tmp_path)
        # Threads change nothing; a string and a list of lines are the same input.
        assert cfg.plan("\n".join(LINES), threads=4) == rows
        engine = cfg.plan(LINES, precedence="engine", platform="npu", prefer_mxint4=True)
        assert engine == cli_plan(cli, path, tmp_path,
                                  ("--engine-order", "--platform", "npu", "--prefer-mxint4"))


@pytest.mark.parametrize("path", config_paths(), ids=os.path.basename)
def test_plan_rows(path):
    with moeq.Config.load(path) as cfg:
        rows = cfg.plan(LINES)
    named = [line.split()[0] for line in LINES if line and not line.startswith("#")]
    assert [r["layer"] for r in rows] == named
    by_layer = {r["layer"]: r for r in rows}
    for r in rows:
        keys = {"layer", "kind", "status", "group", "target", "format", "scheme", "weights",
                "input_activations", "warnings", "error"}
        assert set(r) == (keys | {"experts"} if r["kind"] == "moe" else keys)
        assert r["kind"] == ("moe" if r["layer"].endswith("experts") else "linear")
        if r["kind"] == "linear":  # the scheme moeq.Linear runs it with, or why none
            assert r["scheme"] is not None or r["warnings"] or r["error"], r
    lm_head = by_layer["lm_head"]
    assert (lm_head["status"], lm_head["target"]) == ("ignored", "lm_head")
    moe = by_layer["model.layers.3.mlp.experts"]
    assert (moe["status"], moe["group"], moe["format"], moe["scheme"]) == EXPECT_MOE[
        prefix_of(path)]
    assert moe["error"] is None


def test_glm_plan_details(glm):
    rows = {r["layer"]: r for r in glm.plan(LINES)}
    # Layers 0-2 are ignored as a whole, layer 78 is beyond both groups' ranges.
    assert rows["model.layers.0.self_attn.q_proj"]["status"] == "ignored"
    assert rows["model.layers.78.mlp.experts"]["status"] == "unmatched"
    assert rows["model.layers.78.mlp.experts"]["scheme"] == "unquantized"
    assert rows["model.layers.3.mlp.gate"]["target"] == r"re:.*mlp\.gate$"
    assert rows["model.layers.3.input_layernorm"]["status"] == "ignored"
    assert rows["model.layers.3.self_attn.indexer.wk"]["status"] == "ignored"
    attn = rows["model.layers.3.self_attn.q_a_proj"]
    assert (attn["group"], attn["weights"]["num_bits"]) == ("group_0", 8)
    # The plan's args are the group's QuantArgs, key for key.
    assert attn["weights"] == glm.groups[0]["weights"]
    assert rows["model.layers.77.mlp.experts"]["weights"] == glm.groups[1]["weights"]


def test_plan_text_table(glm):
    table = glm.plan(["lm_head", "model.layers.3.mlp.experts moe 8"], json=False)
    lines = table.splitlines()
    assert lines[0].split()[:6] == ["LAYER", "KIND", "STATUS", "GROUP", "FORMAT", "SCHEME"]
    assert any(line.startswith("model.layers.3.mlp.experts (8 experts)") and "wna16" in line
               for line in lines)
    assert 'ignored by ignore[0] "lm_head"' in table


def test_plan_input_errors(glm):
    with pytest.raises(moeq.InvalidArgumentError, match="line 2"):
        glm.plan(["lm_head", "x moe 0"])
    with pytest.raises(moeq.InvalidArgumentError, match="newline"):
        glm.plan(["lm_head\nx"])
    assert glm.plan([]) == []


def test_a_line_in_error_keeps_the_others():
    cfg = moeq.Config.parse({"quant_method": "compressed-tensors", "ignore": ["re:.*k_proj$"],
                             "config_groups": {"g": {"targets": ["Linear"],
                                                     "weights": {"num_bits": 8}}}})
    rows = cfg.plan(["m.layers.0.self_attn.qkv_proj", "m.layers.0.self_attn.q_proj"])
    assert "k_proj -> ignored by ignore[0]" in rows[0]["error"]
    assert rows[1]["status"] == "quantized" and rows[1]["error"] is None


def test_plan_with_many_lines_and_threads(glm):
    lines = [f"model.layers.{layer}.mlp.experts moe 16" for layer in range(80)]
    lines += [f"model.layers.{layer}.self_attn.o_proj" for layer in range(80)]
    one = glm.plan(lines, threads=1)
    assert glm.plan(lines, threads=8) == one
    assert sum(r["scheme"] == "wna16" and r["kind"] == "moe" for r in one) == 75  # layers 3..77

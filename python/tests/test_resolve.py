"""resolve, resolve_moe and select."""

import os

import pytest

import moeq

from conftest import CONFIGS


def test_glm_experts_select_wna16(glm):
    res = glm.resolve_moe("model.layers.10.mlp.experts", 256)
    assert isinstance(res, moeq.Resolution)
    assert (res["status"], res["group"], res["group_index"], res["format"]) == (
        "quantized", "group_1", 1, "pack-quantized")
    w = res["weights"]
    assert (w["num_bits"], w["group_size"], w["strategy"], w["symmetric"]) == (4, 64, "group", True)
    assert res["input_activations"] is None
    scheme, reason = glm.select(res)
    assert scheme == "wna16"
    assert reason.startswith("wna16: weights int4 group(64) sym static")
    assert "mxint4 (only with prefer_mxint4" in reason


def test_glm_prefer_mxint4_and_npu(glm):
    res = glm.resolve_moe("model.layers.10.mlp.experts", 8)
    # mxint4 takes int4 group-32 symmetric weights only; these are group 64.
    assert glm.select(res, prefer_mxint4=True)[0] == "wna16"
    assert glm.select(res, platform="npu")[0] == "npu_w4a16_int4"
    with pytest.raises(moeq.InvalidArgumentError, match="platform 'gpu'"):
        glm.select(res, platform="gpu")


def test_glm_ignored_and_unmatched(glm):
    lm_head = glm.resolve("lm_head")
    assert (lm_head["status"], lm_head["ignore_index"], lm_head["target"]) == (
        "ignored", 0, "lm_head")
    assert lm_head["group"] is None and lm_head["weights"] is None
    router = glm.resolve("model.layers.5.mlp.gate", kind="other")
    assert (router["status"], router["ignore_index"]) == ("ignored", 5)
    dense = glm.resolve_moe("model.layers.1.mlp.experts", 4)  # layers 0-2 are ignored
    assert dense["status"] == "ignored"
    assert glm.select(dense)[0] == "unquantized"
    late = glm.resolve_moe("model.layers.78.mlp.experts", 4)
    assert (late["status"], late["group"]) == ("unmatched", None)
    assert glm.select(late)[0] == "unquantized"


def test_glm_attention_int8(glm):
    res = glm.resolve("model.layers.3.self_attn.kv_a_proj_with_mqa")
    assert (res["group"], res["weights"]["num_bits"]) == ("group_0", 8)
    shared = glm.resolve("model.layers.40.mlp.shared_experts.down_proj")
    assert shared["group"] == "group_0"
    # An expert projection named on its own resolves as kind "expert".
    one = glm.resolve("model.layers.40.mlp.experts.17.up_proj", kind="expert")
    assert one["group"] == "group_1"


def test_class_targets_depend_on_the_kind():
    cfg = moeq.Config.parse({
        "quant_method": "compressed-tensors",
        "config_groups": {"experts": {"targets": ["FusedMoE"], "weights": {"num_bits": 4}},
                          "dense": {"targets": ["Linear"], "weights": {"num_bits": 8}}}})
    assert cfg.resolve("m.layers.0.mlp.experts.3.up_proj", kind="expert")["group"] == "experts"
    assert cfg.resolve("m.layers.0.self_attn.o_proj", kind="linear")["group"] == "dense"
    assert cfg.resolve("m.layers.0.input_layernorm", kind="other")["status"] == "unmatched"


def test_precedence_ct_versus_engine():
    # compressed-tensors sorts regex targets by text; engines take config order.
    cfg = moeq.Config.parse({
        "quant_method": "compressed-tensors",
        "config_groups": {"wide": {"targets": ["re:.*proj$"], "weights": {"num_bits": 8}},
                          "narrow": {"targets": ["re:.*o_proj$"], "weights": {"num_bits": 4}}}})
    ct = cfg.resolve("m.o_proj")
    engine = cfg.resolve("m.o_proj", precedence="engine")
    assert {ct["group"], engine["group"]} == {"wide", "narrow"}
    assert ct["group"] != engine["group"]
    assert ct["order_disagrees"] and engine["order_disagrees"]
    assert cfg.groups[ct["other_group_index"]]["name"] == engine["group"]


def test_fused_names():
    cfg = moeq.Config.parse({
        "quant_method": "compressed-tensors", "ignore": ["re:.*k_proj$"],
        "config_groups": {"g": {"targets": ["re:.*w1$", "re:.*w3$", "Linear"],
                                "weights": {"num_bits": 8}}}})
    with pytest.raises(moeq.AmbiguousError, match="q_proj -> group g"):
        cfg.resolve("m.self_attn.qkv_proj")
    off = cfg.resolve("m.self_attn.qkv_proj", fused=False)
    assert off["status"] == "quantized" and not off["fused"]
    assert cfg.resolve("m.self_attn.qkv_proj", fused={})["fused"] is False
    up = cfg.resolve("m.mlp.gate_up_proj")
    assert up["fused"] and up["status"] == "quantized"
    custom = cfg.resolve("m.experts.0.w13", kind="expert", fused={"w13": ["w1", "w3"]})
    assert custom["fused"] and custom["group"] == "g"
    with pytest.raises(TypeError):
        cfg.resolve("m.x", fused="w13")


def test_resolve_moe_with_projection_names_and_disagreement():
    cfg = moeq.Config.parse({
        "quant_method": "compressed-tensors",
        "config_groups": {"g": {"targets": ["re:.*experts\\.[0-3]\\.w[123]$"],
                                "weights": {"num_bits": 4, "group_size": 32}}}})
    res = cfg.resolve_moe("m.experts", 4, proj_names=("w1", "w3", "w2"))
    assert res["group"] == "g"
    with pytest.raises(moeq.AmbiguousError, match="m.experts"):
        cfg.resolve_moe("m.experts", 8, proj_names=["w1", "w3", "w2"])
    with pytest.raises(moeq.InvalidArgumentError, match="proj_names"):
        cfg.resolve_moe("m.experts", 4, proj_names=["w1", "w3"])


def test_select_needs_a_resolution_of_the_same_config(glm):
    other = moeq.Config.load(os.path.join(CONFIGS, "llama2c-stories110m-w4a16-g128-pack-quantized.json"))
    res = other.resolve_moe("model.layers.0.mlp.experts", 2)
    with pytest.raises(TypeError):
        glm.select(res)
    with pytest.raises(TypeError):
        glm.select(dict(res))
    assert moeq.select(res) == other.select(res)


def test_select_unsupported_names_every_rejection():
    cfg = moeq.Config.parse({
        "quant_method": "compressed-tensors",
        "config_groups": {"g": {"targets": ["Linear"],
                                "weights": {"num_bits": 16}}}})
    res = cfg.resolve_moe("m.experts", 2)
    with pytest.raises(moeq.UnsupportedError) as info:
        cfg.select(res)
    assert "no MoE scheme accepts weights int16" in info.value.message
    for scheme in moeq.schemes():
        assert f"\n  {scheme}: " in info.value.message, scheme


def test_qwen35_language_model_names():
    with moeq.Config.load(os.path.join(CONFIGS, "qwen3.5-27b-mxfp4a16-kaitchup-abbrev.json")) as cfg:
        res = cfg.resolve("model.language_model.layers.0.linear_attn.out_proj")
        assert (res["status"], res["ignore_index"]) == ("ignored", 1)
        res = cfg.resolve("model.language_model.layers.1.linear_attn.out_proj")
        assert (res["status"], res["format"]) == ("quantized", "mxfp4-pack-quantized")
        assert cfg.select(cfg.resolve_moe("model.language_model.layers.1.mlp.experts", 4))[0] == \
            "w4a16_mxfp4"

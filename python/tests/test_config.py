"""Config: parsing, properties, groups, model fields, QuantArgs."""

import json
import os

import pytest

import moeq

from conftest import CONFIGS, GLM, config_paths


def cfg_of(name):
    return moeq.Config.load(os.path.join(CONFIGS, name))


def test_glm_properties(glm):
    assert glm.source_key == "quantization_config"
    assert glm.format == "pack-quantized"
    assert glm.version == "0.18.0"
    assert glm.quantization_status == "compressed"
    assert glm.kv_cache_scheme is None
    assert glm.ignore == ["lm_head", "re:.*embed_tokens.*", r"re:model\.layers\.[0-2]\..*",
                          r"re:.*self_attn\.indexer\..*", "re:.*norm.*", r"re:.*mlp\.gate$"]
    assert glm.warnings == []
    assert glm.dequant_flags == 0
    assert moeq.dequant_flags(glm) == 0
    assert glm.raw("sparsity_config") == "{}"
    assert glm.raw("kv_cache_scheme") is None


def test_groups_mirror_the_json(glm):
    with open(GLM) as f:
        block = json.load(f)["quantization_config"]
    groups = glm.groups
    assert [g["name"] for g in groups] == list(block["config_groups"])
    for i, g in enumerate(groups):
        src = block["config_groups"][g["name"]]
        assert g["index"] == i
        assert g["targets"] == src["targets"]
        assert g["format"] == src["format"]
        assert g["input_activations"] is None and g["output_activations"] is None
        assert g["preset"] is False
        w = g["weights"]
        assert isinstance(w, moeq.QuantArgs)
        # Every key the source gives (bar observer_kwargs) reads back as written.
        for key, value in src["weights"].items():
            if key != "observer_kwargs":
                assert w[key] == value, key
    assert groups[1]["weights"].summary == "int4 group(64) sym static"


def test_sources_versions_and_flags_of_every_config():
    expected = {  # file prefix: (source key, format, version, status, dequant flags)
        "glm": ("quantization_config", "pack-quantized", "0.18.0", "compressed", 0),
        "llama-3.1": ("compression_config", "float-quantized", "0.6.0.20240921", "compressed",
                      moeq.DEQUANT_LEGACY_PACKING),
        "llama2c": ("compression_config", "pack-quantized", "0.6.0.20240926", "compressed",
                    moeq.DEQUANT_LEGACY_PACKING),
        "meta-llama-3": ("quantization_config", "mxfp4-pack-quantized",
                         "0.18.1.dev0+gac8e2ba.d20260813", "compressed", 0),
        "phi-3": ("compression_config", "naive-quantized", "", "frozen", 0),
        "qwen3-w8a8": ("quantization_config", "int-quantized", "0.13.0", "compressed",
                       moeq.DEQUANT_LEGACY_PACKING),
        "qwen3.5": ("quantization_config", "mxfp4-pack-quantized", "0.14.4.dev54+g704d57b",
                    "compressed", moeq.DEQUANT_LEGACY_PACKING),
    }
    paths = config_paths()
    assert len(paths) == len(expected)
    for path in paths:
        key = next(k for k in expected if os.path.basename(path).startswith(k))
        with moeq.Config.load(path) as cfg:
            got = (cfg.source_key, cfg.format, cfg.version, cfg.quantization_status,
                   cfg.dequant_flags)
            assert got == expected[key], path


def test_parse_accepts_str_bytes_dict_and_bare_blocks():
    block = {"quant_method": "compressed-tensors", "format": "pack-quantized",
             "config_groups": {"g": {"targets": ["Linear"],
                                     "weights": {"num_bits": 4, "group_size": 32}}}}
    for src in (json.dumps(block), json.dumps(block).encode(), block,
                {"quantization_config": block}, {"text_config": {"quantization_config": block}}):
        with moeq.Config.parse(src) as cfg:
            assert cfg.groups[0]["weights"]["group_size"] == 32
    assert moeq.Config.parse(block).source_key == ""
    nested = moeq.Config.parse({"text_config": {"quantization_config": block}})
    assert nested.source_key == "text_config.quantization_config"
    with pytest.raises(TypeError):
        moeq.Config.parse(42)


def test_unknown_keys_warn_or_fail_with_strict_keys():
    block = {"quant_method": "compressed-tensors", "surprise": 1,
             "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8}}}}
    cfg = moeq.Config.parse(block)
    assert any("surprise" in w for w in cfg.warnings), cfg.warnings
    with pytest.raises(moeq.SchemaError, match="surprise"):
        moeq.Config.parse(block, strict_keys=True)


def test_model_fields():
    cfg = moeq.Config.parse({
        "model_type": "deepseek_v3", "n_routed_experts": 256, "norm_topk_prob": True,
        "routed_scaling_factor": 2.5, "text_config": {"hidden_size": 7168},
        "quantization_config": {"quant_method": "compressed-tensors", "config_groups": {
            "g": {"targets": ["Linear"], "weights": {"num_bits": 8}}}}})
    assert cfg.model_number("n_routed_experts") == 256
    assert cfg.model_number("norm_topk_prob") == 1
    assert cfg.model_number("routed_scaling_factor") == 2.5
    assert cfg.model_number("hidden_size") == 7168  # from text_config
    assert cfg.model_number("absent") is None
    assert cfg.model_number("absent", default=-1) == -1
    assert cfg.model_number("model_type") is None  # a string, not a number
    assert cfg.model_string("model_type") == "deepseek_v3"
    assert cfg.model_string("absent", "x") == "x"


def test_moe_sparsity_config():
    def cfg_with(ms):
        return moeq.Config.parse({
            "num_hidden_layers": 3,
            "quantization_config": {"quant_method": "compressed-tensors", "config_groups": {
                "g": {"targets": ["Linear"], "weights": {"num_bits": 4}}},
                "moe_sparsity_config": ms}})

    cfg = cfg_with({"method": "prune", "num_experts": [None, 5, 7]})
    assert cfg.moe_sparsity == {"method": "prune", "num_experts": [None, 5, 7]}
    assert cfg.retained_experts("model.layers.1.mlp.experts") == 5
    assert cfg.retained_experts("backbone.layers.2.mixer.experts") == 7
    with pytest.raises(moeq.NoMatchError, match="dense"):
        cfg.retained_experts("model.layers.0.mlp.experts")
    novice = cfg_with({"method": "novice", "num_experts": [None, 5, 7]})
    assert novice.moe_sparsity["method"] == "novice"
    with pytest.raises(moeq.UnsupportedError, match="model.layers.2.mlp.experts"):
        novice.retained_experts("model.layers.2.mlp.experts")
    # compressed-tensors 0.20 writes null into every config: no sparsity, no warning
    none = cfg_with(None)
    assert none.moe_sparsity is None
    assert none.retained_experts("model.layers.2.mlp.experts") == 0
    assert not any("moe_sparsity_config" in w for w in none.warnings), none.warnings
    with pytest.raises(moeq.SchemaError, match="moe_sparsity_config.num_experts"):
        cfg_with({"method": "prune", "num_experts": [None, 0, 7]})


def test_kv_cache_scheme_and_raw():
    block = {"quant_method": "compressed-tensors",
             "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8}}},
             "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor",
                                 "dynamic": False, "symmetric": True}}
    cfg = moeq.Config.parse(block)
    kv = cfg.kv_cache_scheme
    assert (kv["num_bits"], kv["type"], kv["strategy"]) == (8, "float", "tensor")
    assert json.loads(cfg.raw("kv_cache_scheme")) == block["kv_cache_scheme"]


def test_quant_args_apply_compressed_tensors_derivations():
    a = moeq.quant_args({"num_bits": 4, "group_size": 128})
    assert a["strategy"] == "group"  # inferred from group_size
    assert a["symmetric"] is True and a["type"] == "int" and a["dynamic"] is False
    assert moeq.quant_args({"num_bits": 8, "type": "int", "symmetric": False,
                            "strategy": "channel"})["zp_dtype"] == "torch.int8"
    assert moeq.quant_args({"num_bits": 4, "group_size": 16, "actorder": "dynamic"})[
        "actorder"] == "dynamic"  # the alias is kept as written
    # A QuantArgs round-trips through its dict form, and is returned as it is.
    assert moeq.quant_args(dict(a)) == a
    assert moeq.quant_args(a) is a
    with pytest.raises(moeq.SchemaError, match="num_bitz"):
        moeq.quant_args({"num_bitz": 4})


def test_closed_config_refuses_calls_but_its_results_stay_valid():
    cfg = moeq.Config.load(GLM)
    res = cfg.resolve_moe("model.layers.3.mlp.experts", 8)
    weights = cfg.groups[1]["weights"]
    cfg.close()
    assert cfg.closed
    with pytest.raises(moeq.StateError):
        cfg.groups
    with pytest.raises(moeq.StateError):
        with cfg:
            pass
    # The resolution still holds the config: its pointers are good.
    assert moeq.select(res)[0] == "wna16"
    assert weights.summary == "int4 group(64) sym static"


def test_results_are_read_only_and_pickle(glm):
    import pickle

    res = glm.resolve_moe("model.layers.3.mlp.experts", 4)
    w = res["weights"]
    for change in (lambda: w.__setitem__("num_bits", 8), lambda: w.update(num_bits=8),
                   lambda: w.pop("num_bits"), lambda: res.__setitem__("group", "x")):
        with pytest.raises(TypeError, match="read-only"):
            change()
    assert w["num_bits"] == 4
    again = pickle.loads(pickle.dumps(w))
    assert isinstance(again, moeq.QuantArgs) and again == w
    assert again.summary == w.summary
    assert pickle.loads(pickle.dumps(res)) == dict(res)
    edited = dict(w, num_bits=8)  # the way to change one: a new dict
    assert moeq.quant_args(edited).summary == "int8 group(64) sym static"

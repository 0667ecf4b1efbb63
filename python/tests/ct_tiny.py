"""Tiny randomly initialised transformers MoE models, quantized with compressed-tensors.

make_model(arch, directory) builds a small model of one architecture with
random weights, saves it (bfloat16, transformers' own save), then rewrites its
routed experts' weights as compressed-tensors does: CT's calculate_qparams over
a min/max of each group (the memoryless observer llm-compressor's RTN uses) and
CT's pack-quantized compressor, with a quantization_config made by CT's
QuantizationConfig model.  Used by test_torch_swap.py; needs torch,
transformers, compressed-tensors and safetensors.
"""

import json
import os
import re

import torch
from compressed_tensors.compressors.base import BaseCompressor
from compressed_tensors.quantization import (QuantizationArgs, QuantizationConfig,
                                             QuantizationScheme, QuantizationStatus)
from compressed_tensors.quantization.utils import calculate_qparams
from safetensors.torch import load_file, save_file

COMMON = dict(vocab_size=256, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)


def _configs():
    import transformers as tf
    return {
        "qwen3_moe": (tf.Qwen3MoeConfig(intermediate_size=256, moe_intermediate_size=64,
                                        num_experts=8, num_experts_per_tok=2, head_dim=32,
                                        norm_topk_prob=True, **COMMON),
                      tf.Qwen3MoeForCausalLM),
        "mixtral": (tf.MixtralConfig(intermediate_size=64, num_local_experts=8,
                                     num_experts_per_tok=2, head_dim=32, **COMMON),
                    tf.MixtralForCausalLM),
        "deepseek_v3": (tf.DeepseekV3Config(intermediate_size=256, moe_intermediate_size=64,
                                            n_routed_experts=8, num_experts_per_tok=2,
                                            n_shared_experts=1, n_group=2, topk_group=1,
                                            first_k_dense_replace=1, kv_lora_rank=32,
                                            q_lora_rank=32, qk_rope_head_dim=16,
                                            qk_nope_head_dim=16, v_head_dim=32,
                                            rope_scaling=None, **COMMON),
                        tf.DeepseekV3ForCausalLM),
    }


ARCHES = ("qwen3_moe", "mixtral", "deepseek_v3")
# The routed experts' linear layers, by checkpoint name.
EXPERT_WEIGHT = re.compile(r"\.experts\.\d+\.(gate_proj|up_proj|down_proj|w1|w2|w3)\.weight$")
W4A16_G32 = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group",
                             group_size=32)


def _quantize(weight, args):
    """{weight_packed, weight_scale, weight_shape} for one [out, in] bfloat16 weight."""
    rows, cols = weight.shape
    groups = weight.float().reshape(rows, cols // args.group_size, args.group_size)
    mn, mx = groups.amin(dim=-1).to(weight.dtype), groups.amax(dim=-1).to(weight.dtype)
    scale, _ = calculate_qparams(mn, mx, args)
    scheme = QuantizationScheme(targets=["Linear"], weights=args, format="pack-quantized")
    compressor = BaseCompressor.get_value_from_registry("pack-quantized")
    return compressor.compress({"weight": weight, "weight_scale": scale.to(weight.dtype)}, scheme)


def make_model(arch, directory, seed=0):
    """Writes a tiny `arch` model with W4A16 group-32 routed experts; returns its config."""
    config, cls = _configs()[arch]
    torch.manual_seed(seed)
    model = cls(config).to(torch.bfloat16).eval()
    # transformers' init leaves some tensors at zero or one (norms, biases): give the
    # routers and experts spread so that routing and outputs differ between tokens.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "gate" in name or "experts" in name or "router" in name:
                p.normal_(0.0, 0.1)
            if name.endswith("e_score_correction_bias"):
                p.normal_(0.0, 0.05)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.normal_(0.0, 0.05)
    model.save_pretrained(directory)
    path = os.path.join(directory, "model.safetensors")
    tensors = load_file(path)
    out, targets = {}, set()
    for name, t in tensors.items():
        if EXPERT_WEIGHT.search(name):
            module = name[:-len(".weight")]
            for key, value in _quantize(t, W4A16_G32).items():
                out[f"{module}.{key}"] = value.contiguous()
            targets.add(module.rsplit(".", 1)[1])
        else:
            out[name] = t
    save_file(out, path, metadata={"format": "pt"})
    proj = "|".join(sorted(targets))
    qc = QuantizationConfig(
        config_groups={"group_0": QuantizationScheme(
            targets=[rf"re:.*\.experts\.\d+\.({proj})$"], weights=W4A16_G32)},
        format="pack-quantized", quantization_status=QuantizationStatus.COMPRESSED)
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = qc.model_dump(mode="json") | {
        "quant_method": "compressed-tensors"}
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return config

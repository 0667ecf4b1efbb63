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


# model_type -> (config class, model class, the architecture's own sizes)
_ARCH = {
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                  dict(intermediate_size=256, moe_intermediate_size=64, num_experts=8,
                       num_experts_per_tok=2, head_dim=32, norm_topk_prob=True)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                dict(intermediate_size=64, num_local_experts=8, num_experts_per_tok=2,
                     head_dim=32)),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                    dict(intermediate_size=256, moe_intermediate_size=64, n_routed_experts=8,
                         num_experts_per_tok=2, n_shared_experts=1, n_group=2, topk_group=1,
                         first_k_dense_replace=1, kv_lora_rank=32, q_lora_rank=32,
                         qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=32,
                         rope_scaling=None)),
}


def _config(arch, overrides):
    import transformers as tf
    config_cls, model_cls, sizes = _ARCH[arch]
    config = getattr(tf, config_cls)(**{**COMMON, **sizes, **overrides})
    return config, getattr(tf, model_cls)


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


def make_model(arch, directory, seed=0, **overrides):
    """Writes a tiny `arch` model with W4A16 group-32 routed experts; returns its config.
    `overrides`: config fields (hidden_size=1024, num_experts=32, ...)."""
    config, cls = _config(arch, overrides)
    torch.manual_seed(seed)
    model = cls(config).to(torch.bfloat16).eval()
    # transformers' init (std 0.02, some tensors zero) leaves the routers and experts
    # near zero: give them a unit-gain spread (std 1/sqrt(fan-in)) so that routing and
    # outputs differ between tokens while activations keep their scale.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "gate" in name or "experts" in name or "router" in name:
                p.normal_(0.0, p.shape[-1] ** -0.5 if p.dim() >= 2 else 0.1)
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


# model_type -> (block name in the checkpoint, gate/up/down projection names)
CHECKPOINT_NAMES = {"qwen3_moe": ("mlp", ("gate_proj", "up_proj", "down_proj")),
                    "mixtral": ("block_sparse_moe", ("w1", "w3", "w2")),
                    "deepseek_v3": ("mlp", ("gate_proj", "up_proj", "down_proj"))}


def exact_experts(model, arch, directory):
    """Replaces the decompressed experts of a transformers model with CT's dequantization
    done in float32 (CT's unpack_from_int32 and dequantize with the scales widened
    first): the checkpoint's values exactly, where transformers' loader leaves them
    in the scales' bfloat16 (q * scale rounded) even in a float32 model."""
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    block_name, projs = CHECKPOINT_NAMES[arch]
    tensors = load_file(os.path.join(directory, "model.safetensors"))

    def weight(module):
        q = unpack_from_int32(tensors[module + ".weight_packed"], W4A16_G32.num_bits,
                              torch.Size(tensors[module + ".weight_shape"].tolist()))
        return dequantize(q, tensors[module + ".weight_scale"].float(), None, W4A16_G32,
                          dtype=torch.float32)

    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            experts = getattr(layer.mlp, "experts", None)
            if experts is None or not hasattr(experts, "gate_up_proj"):
                continue
            gate_up, down = [], []
            for e in range(experts.gate_up_proj.shape[0]):
                base = f"model.layers.{i}.{block_name}.experts.{e}."
                g, u, dn = (weight(base + p) for p in projs)
                gate_up.append(torch.cat([g, u], dim=0))
                down.append(dn)
            # New float32 parameters: the loaded ones keep the scales' bfloat16.
            experts.gate_up_proj = torch.nn.Parameter(torch.stack(gate_up), requires_grad=False)
            experts.down_proj = torch.nn.Parameter(torch.stack(down), requires_grad=False)

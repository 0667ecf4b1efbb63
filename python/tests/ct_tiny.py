"""Tiny randomly initialised transformers MoE models, quantized with compressed-tensors.

make_model(arch, directory) builds a small model of one architecture with
random weights, saves it (bfloat16, transformers' own save), then rewrites its
routed experts' weights as compressed-tensors does: CT's calculate_qparams over
a min/max of each group (the memoryless observer llm-compressor's RTN uses) and
CT's pack-quantized compressor, with a quantization_config made by CT's
QuantizationConfig model.  Used by test_torch_swap.py; needs torch,
transformers, compressed-tensors and safetensors.

Transformers 5 holds every family's experts as fused 3-D parameters, and
compressed-tensors quantizes nn.Linear modules only, so the experts reach the
checkpoint one Linear per projection and expert:
- Qwen3-MoE, Mixtral, DeepSeek-V3: transformers' own save splits the fused
  parameters back into the hub's per-expert names (its conversion mapping run
  in reverse), `mlp.experts.E.gate_proj.weight`, ...; those are quantized.
- GPT-OSS has no such mapping (its hub checkpoint is fused, MXFP4): it is
  saved fused, `mlp.experts.gate_up_proj` [E, H, 2I] with gate and up
  interleaved in the last dimension, `down_proj` [E, I, H], and a bias for
  each.  llm-compressor quantizes it after convert_model_for_quantization_gptoss
  has replaced each `mlp.experts` by a LinearExperts module holding a ModuleList
  `experts` of per-expert gate_proj/up_proj/down_proj nn.Linear with biases
  (gate = columns 0::2, up = 1::2, weights transposed to [out, in]); the
  checkpoint then names them `mlp.experts.experts.E.gate_proj.weight_packed`,
  `...gate_proj.bias` (biases stay bfloat16, unquantized).  linearize_gpt_oss
  does that split on the saved tensors.
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
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM",
                dict(intermediate_size=64, num_local_experts=8, num_experts_per_tok=2, head_dim=32,
                     sliding_window=8,  # layer 0 slides, layer 1 attends to all
                     # the hub's YaRN settings, scaled to the tiny context
                     rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0,
                                          beta_fast=32.0, beta_slow=1.0, truncate=False,
                                          original_max_position_embeddings=8))),
}


def _config(arch, overrides):
    import transformers as tf
    config_cls, model_cls, sizes = _ARCH[arch]
    config = getattr(tf, config_cls)(**{**COMMON, **sizes, **overrides})
    return config, getattr(tf, model_cls)


ARCHES = ("qwen3_moe", "mixtral", "deepseek_v3", "gpt_oss")
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


def linearize_gpt_oss(tensors, experts="experts.experts"):
    """GPT-OSS's fused expert tensors as llm-compressor's LinearExperts holds them.

    {name: tensor} as transformers saves a GptOss model -> the same with each
    `<block>.experts.{gate_up_proj,down_proj}[_bias]` replaced by per-expert
    `<block>.<experts>.E.{gate_proj,up_proj,down_proj}.{weight,bias}`: gate = the
    columns 0::2 of gate_up_proj, up = 1::2, weights transposed to nn.Linear's
    [out, in] (convert_model_for_quantization_gptoss's copy_from_fused_weights).
    `experts`: "experts.experts" (llm-compressor's module tree) or "experts" (the
    names moeq's family table gives: one level)."""
    fused = re.compile(r"^(.*\.mlp)\.experts\.(gate_up_proj|down_proj)(_bias)?$")
    out = {}
    for name, t in tensors.items():
        m = fused.match(name)
        if not m:
            out[name] = t
            continue
        block, which, bias = m.groups()
        leaf = ".bias" if bias else ".weight"
        for e in range(t.shape[0]):
            base = f"{block}.{experts}.{e}."
            if which == "down_proj":
                out[base + "down_proj" + leaf] = (t[e] if bias else t[e].t()).contiguous()
                continue
            for proj, cols in (("gate_proj", slice(0, None, 2)), ("up_proj", slice(1, None, 2))):
                out[base + proj + leaf] = (t[e][cols] if bias else t[e][:, cols].t()).contiguous()
    return out


def _init(model, arch):
    """transformers' init (std 0.02, some tensors zero) leaves the routers and experts
    near zero: give them a unit-gain spread (std 1/sqrt(fan-in)) so that routing and
    outputs differ between tokens while activations keep their scale.  GPT-OSS's
    experts are [E, in, out] (fan-in: dim 1) and its gate_up spread is 3x wider, so
    that some gate and up values pass the SwiGLU clamp (7) and the clamp is tested."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "gate" in name or "experts" in name or "router" in name:
                if p.dim() < 2 or name.endswith("_bias"):
                    p.normal_(0.0, 0.1)
                elif arch == "gpt_oss" and p.dim() == 3:
                    gain = 3.0 if name.endswith("gate_up_proj") else 1.0
                    p.normal_(0.0, gain * p.shape[-2] ** -0.5)
                else:
                    p.normal_(0.0, p.shape[-1] ** -0.5)
            if name.endswith("e_score_correction_bias"):
                p.normal_(0.0, 0.05)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.normal_(0.0, 0.05)


def make_model(arch, directory, seed=0, experts=None, **overrides):
    """Writes a tiny `arch` model with W4A16 group-32 routed experts; returns its config.
    `overrides`: config fields (hidden_size=1024, num_experts=32, ...).  `experts`
    (GPT-OSS only): the experts' container in the names, EXPERTS[arch] by default
    (see linearize_gpt_oss)."""
    config, cls = _config(arch, overrides)
    torch.manual_seed(seed)
    model = cls(config).to(torch.bfloat16).eval()
    _init(model, arch)
    model.save_pretrained(directory)
    path = os.path.join(directory, "model.safetensors")
    tensors = load_file(path)
    if arch == "gpt_oss":
        tensors = linearize_gpt_oss(tensors, experts or EXPERTS[arch])
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
                    "deepseek_v3": ("mlp", ("gate_proj", "up_proj", "down_proj")),
                    "gpt_oss": ("mlp", ("gate_proj", "up_proj", "down_proj"))}
# model_type -> the experts' container under the block, where it is not "experts"
EXPERTS = {"gpt_oss": "experts.experts"}


def _expert_prefix(tensors, block):
    """`<block>.experts` or `<block>.experts.experts`: whichever the checkpoint names."""
    for prefix in (f"{block}.experts.experts", f"{block}.experts"):
        if f"{prefix}.0.gate_proj.weight_packed" in tensors or \
                f"{prefix}.0.w1.weight_packed" in tensors:
            return prefix
    raise KeyError(f"no experts under {block} in the checkpoint")


def exact_experts(model, arch, directory, dtype=torch.float32):
    """Sets the experts of a transformers model to the checkpoint's, decompressed by CT
    (its unpack_from_int32, and dequantize with the scales widened to float32 first)
    and fused as the model holds them, in `dtype` (a single rounding of the exact
    q * scale; float32: exact).  Transformers' loader leaves the weights it decompresses
    in the scales' bfloat16 even in a float32 model, and cannot load GPT-OSS's
    per-expert names at all (the fused GptOssExperts parameters stay unset): this is the
    checkpoint as the model's own modules run it."""
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    block_name, projs = CHECKPOINT_NAMES[arch]
    tensors = load_file(os.path.join(directory, "model.safetensors"))

    def weight(module):
        q = unpack_from_int32(tensors[module + ".weight_packed"], W4A16_G32.num_bits,
                              torch.Size(tensors[module + ".weight_shape"].tolist()))
        return dequantize(q, tensors[module + ".weight_scale"].float(), None, W4A16_G32,
                          dtype=torch.float32)

    def param(value):
        return torch.nn.Parameter(value.to(dtype), requires_grad=False)

    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            experts = getattr(layer.mlp, "experts", None)
            if experts is None or not hasattr(experts, "gate_up_proj"):
                continue
            prefix = _expert_prefix(tensors, f"model.layers.{i}.{block_name}")
            gate_up, down, gate_up_bias, down_bias = [], [], [], []
            for e in range(experts.gate_up_proj.shape[0]):
                base = f"{prefix}.{e}."
                g, u, dn = (weight(base + p) for p in projs)
                if arch != "gpt_oss":
                    gate_up.append(torch.cat([g, u], dim=0))  # [2I, H]: gate rows first
                    down.append(dn)
                    continue
                # GptOssExperts: [H, 2I] with gate/up interleaved, [I, H], and biases
                gu = torch.empty(g.shape[1], 2 * g.shape[0])
                gu[:, 0::2], gu[:, 1::2] = g.t(), u.t()
                gate_up.append(gu)
                down.append(dn.t())
                b = torch.empty(2 * g.shape[0])
                b[0::2] = tensors[base + projs[0] + ".bias"].float()
                b[1::2] = tensors[base + projs[1] + ".bias"].float()
                gate_up_bias.append(b)
                down_bias.append(tensors[base + projs[2] + ".bias"].float())
            # New parameters: the loaded ones keep the scales' bfloat16.
            experts.gate_up_proj = param(torch.stack(gate_up))
            experts.down_proj = param(torch.stack(down))
            if gate_up_bias:
                experts.gate_up_proj_bias = param(torch.stack(gate_up_bias))
                experts.down_proj_bias = param(torch.stack(down_bias))

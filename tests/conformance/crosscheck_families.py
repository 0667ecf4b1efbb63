#!/usr/bin/env python3
"""moeq run against transformers' own MoE blocks, one family at a time.

For each family in moeq's table: transformers writes the config.json
(its config class, tiny dimensions, save_pretrained: the keys as it writes
them, no scoring_func), the family's MoE block class (from its modeling file)
gets random weights, the routed experts are compressed as W4A16 (int4 group
32) into a checkpoint in the per-expert names llm-compressor writes, the block
takes the dequantized weights back (fused the way the block holds them), and
`moeq run DIR --layer PREFIX --input x.npy -o y.npy` must match the block's
forward within 1e-3 relative (shared experts zeroed: they are linear layers
outside the routed-expert layer).

Needs torch and transformers (>= 5) in the interpreter that runs it, plus the
moeq binding (MOEQ_LIBRARY or an installed package) and the moeq tool
(argv[1]).  Prints one line per family and exits 77 (skipped) when torch or
transformers is missing, 1 when a family disagrees.

    python tests/conformance/crosscheck_families.py build/moeq
"""

import importlib
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import transformers
    from transformers import CONFIG_MAPPING
except ImportError as e:  # optional dependencies
    print(f"crosscheck_families: skipped: {e.name} is not installed")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import moeq  # noqa: E402

E, H, I, T = 8, 64, 32, 24

# family -> (modeling module, block class, config keys, layout of the fused experts)
#   "rows":   gate_up_proj [E, 2I, H] gate rows first, down_proj [E, H, I]
#   "cols":   gate_up_proj [E, H, 2I] gate columns first, down_proj [E, I, H] (Llama 4)
#   "oai":    gate_up_proj [E, H, 2I] gate/up interleaved, biases, down_proj [E, I, H]
#   "up":     up_proj [E, I, H], down_proj [E, H, I]: non-gated experts (Nemotron-H)
CASES = {
    "qwen2_moe": ("qwen2_moe", "Qwen2MoeSparseMoeBlock", "rows",
                  dict(num_experts=E, num_experts_per_tok=2, norm_topk_prob=False)),
    "qwen3_moe": ("qwen3_moe", "Qwen3MoeSparseMoeBlock", "rows",
                  dict(num_experts=E, num_experts_per_tok=2, norm_topk_prob=True)),
    "qwen3_next": ("qwen3_next", "Qwen3NextSparseMoeBlock", "rows",
                   dict(num_experts=E, num_experts_per_tok=2, norm_topk_prob=True,
                        shared_expert_intermediate_size=I)),
    "mixtral": ("mixtral", "MixtralSparseMoeBlock", "rows",
                dict(num_local_experts=E, num_experts_per_tok=2)),
    "deepseek_v2": ("deepseek_v2", "DeepseekV2Moe", "rows",
                    dict(n_routed_experts=E, num_experts_per_tok=2, routed_scaling_factor=16.0,
                         n_shared_experts=1)),
    "deepseek_v3": ("deepseek_v3", "DeepseekV3MoE", "rows",
                    dict(n_routed_experts=E, num_experts_per_tok=2, n_group=4, topk_group=2,
                         n_shared_experts=1)),
    "glm4_moe": ("glm4_moe", "Glm4MoeMoE", "rows",
                 dict(n_routed_experts=E, num_experts_per_tok=2, routed_scaling_factor=2.5)),
    "gpt_oss": ("gpt_oss", "GptOssMLP", "oai", dict(num_local_experts=E, num_experts_per_tok=2)),
    "llama4_text": ("llama4", "Llama4TextMoe", "cols",
                    dict(num_local_experts=E, num_experts_per_tok=1, intermediate_size_mlp=2 * I)),
    "olmoe": ("olmoe", "OlmoeSparseMoeBlock", "rows",
              dict(num_experts=E, num_experts_per_tok=2, norm_topk_prob=False)),
    "granitemoe": ("granitemoe", "GraniteMoeMoE", "rows",
                   dict(num_local_experts=E, num_experts_per_tok=2)),
    "ernie4_5_moe": ("ernie4_5_moe", "Ernie4_5_MoeSparseMoeBlock", "rows",
                     dict(moe_num_experts=E, moe_k=2, moe_num_shared_experts=1)),
    "minimax": ("minimax", "MiniMaxSparseMoeBlock", "rows",
                dict(num_local_experts=E, num_experts_per_tok=2)),
    "minimax_m2": ("minimax_m2", "MiniMaxM2SparseMoeBlock", "rows",
                   dict(num_local_experts=E, num_experts_per_tok=2)),
    # down(relu2(up x)); moe_latent_size None: no latent projections around the experts
    "nemotron_h": ("nemotron_h", "NemotronHMoE", "up",
                   dict(n_routed_experts=E, num_experts_per_tok=2, n_group=4, topk_group=2,
                        routed_scaling_factor=2.5, moe_latent_size=None,
                        moe_shared_expert_intermediate_size=I)),
}

# decoder layers' parent module where it is not "model"
ROOT = {"nemotron_h": "backbone"}

QUANT = {
    "quant_method": "compressed-tensors", "format": "pack-quantized",
    "quantization_status": "compressed", "version": "0.20.1",
    "config_groups": {"group_0": {
        "targets": ["Linear"], "format": "pack-quantized", "input_activations": None,
        "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                    "group_size": 32}}},
    "ignore": ["lm_head", "re:.*mlp.gate$", "re:.*mixer.gate$", "re:.*router.*", "re:.*shared_expert.*"],
}


def check(family, tool, workdir):
    module, cls_name, layout, keys = CASES[family]
    mod = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    cfg = CONFIG_MAPPING[family](hidden_size=H, intermediate_size=I, moe_intermediate_size=I,
                                 num_attention_heads=4, num_key_value_heads=2, **keys)
    cfg.save_pretrained(workdir)  # config.json as transformers writes it
    with open(os.path.join(workdir, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = QUANT
    config["dtype"] = "float32"
    with open(os.path.join(workdir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)

    torch.manual_seed(sum(map(ord, family)))
    block = getattr(mod, cls_name)(cfg).float().eval()
    state = block.state_dict()
    for name, p in state.items():
        std = 0.3 if ("gate.weight" in name or "router" in name) else 0.1 if "bias" in name else 0.2
        if "e_score_correction_bias" in name:
            std = 0.05
        with torch.no_grad():
            p.copy_(torch.randn(p.shape) * std)
            if "shared_expert" in name:
                p.zero_()  # shared experts aside
    fam = moeq.model_family(family)
    qcfg = moeq.Config.load(workdir)
    block_name = f"{ROOT.get(family, 'model')}.layers.0.{fam['moe_block']}"
    prefix = f"{block_name}.{fam['experts']}"
    tensors = {}

    def put(name, value):
        tensors[name] = np.ascontiguousarray(value.detach().numpy().astype(np.float32))

    gu = state["experts.up_proj" if layout == "up" else "experts.gate_up_proj"]
    down = state["experts.down_proj"]
    new_gu, new_down = gu.clone(), down.clone()
    projs = [1, 2] if layout == "up" else [0, 1, 2]  # non-gated: no gate_proj
    for e in range(E):
        if layout == "up":
            w = [None, gu[e], down[e]]
        elif layout == "rows":
            w = [gu[e, :I, :], gu[e, I:, :], down[e]]
        elif layout == "cols":
            w = [gu[e, :, :I].T, gu[e, :, I:].T, down[e].T]
        else:
            w = [gu[e, :, 0::2].T, gu[e, :, 1::2].T, down[e].T]
        deq = []
        for p in projs:
            wp = w[p]
            name = f"{prefix}.{e}.{fam['proj'][p]}"
            res = qcfg.resolve(name, kind="expert")
            out = moeq.compress(res["weights"], res["format"], name,
                                wp.contiguous().numpy().astype(np.float32), weight_dtype="F32")
            tensors.update(out)
            deq.append(torch.from_numpy(moeq.dequantize(res["weights"], res["format"], out,
                                                        module=name)))
        if layout == "up":
            new_gu[e], new_down[e] = deq[0], deq[1]
        elif layout == "rows":
            new_gu[e, :I, :], new_gu[e, I:, :], new_down[e] = deq[0], deq[1], deq[2]
        elif layout == "cols":
            new_gu[e, :, :I], new_gu[e, :, I:], new_down[e] = deq[0].T, deq[1].T, deq[2].T
        else:
            new_gu[e, :, 0::2], new_gu[e, :, 1::2], new_down[e] = deq[0].T, deq[1].T, deq[2].T
            b, bd = state["experts.gate_up_proj_bias"][e], state["experts.down_proj_bias"][e]
            put(f"{prefix}.{e}.{fam['proj'][0]}.bias", b[0::2])
            put(f"{prefix}.{e}.{fam['proj'][1]}.bias", b[1::2])
            put(f"{prefix}.{e}.{fam['proj'][2]}.bias", bd)
    with torch.no_grad():
        state["experts.up_proj" if layout == "up" else "experts.gate_up_proj"].copy_(new_gu)
        state["experts.down_proj"].copy_(new_down)
    router = "gate.weight" if "gate.weight" in state else "router.weight"
    put(f"{block_name}.{fam['router']}.weight", state[router])
    if "router.bias" in state:
        put(f"{block_name}.{fam['router']}.bias", state["router.bias"])
    for name in state:
        if name.endswith("e_score_correction_bias"):
            put(f"{block_name}.{fam['correction_bias']}", state[name])
    moeq.safetensors_write(os.path.join(workdir, "model.safetensors"), tensors)

    x = torch.randn(T, H)
    with torch.no_grad():
        y = block(x.unsqueeze(0))
    y = (y[0] if isinstance(y, tuple) else y).reshape(T, H).numpy().astype(np.float64)
    np.save(os.path.join(workdir, "x.npy"), x.numpy())
    run = subprocess.run([tool, "run", workdir, "--layer", prefix, "--input",
                          os.path.join(workdir, "x.npy"), "-o", os.path.join(workdir, "y.npy")],
                         capture_output=True, text=True)
    if run.returncode != 0:
        return False, f"moeq run exited {run.returncode}: {run.stderr.strip()}"
    got = np.load(os.path.join(workdir, "y.npy")).astype(np.float64)
    scale = np.abs(y).max()
    err = np.abs(got - y).max() / scale
    warned = "warning" in run.stdout + run.stderr
    ok = err <= 1e-3 and scale > 1e-3 and not warned
    return ok, f"max error {err:.2e} relative (max |y| {scale:.3g}){', WARNED' if warned else ''}"


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = sys.argv[1]
    print(f"crosscheck_families: transformers {transformers.__version__}, torch "
          f"{torch.__version__}")
    failed = 0
    for family in CASES:
        with tempfile.TemporaryDirectory(prefix=f"moeq_xf_{family}_") as d:
            try:
                ok, msg = check(family, tool, d)
            except Exception as e:  # report every family, then fail
                ok, msg = False, f"{type(e).__name__}: {e}"
        failed += not ok
        print(f"  {family:14s} {'ok  ' if ok else 'FAIL'} {msg}")
    print(f"{len(CASES) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

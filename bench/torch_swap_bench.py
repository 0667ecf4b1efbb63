#!/usr/bin/env python3
"""Greedy generation with transformers alone vs moeq.torch, on one small MoE model.

    MOEQ_LIBRARY=build/libmoeq.so PYTHONPATH=python \\
        python bench/torch_swap_bench.py [--dir DIR] [--new-tokens 32] [--prompt 16]

Makes (or reuses, --dir) a randomly initialised Qwen3-MoE model (by default
hidden 1024, 32 experts of 512, top-4, 4 layers, vocab 8192), its routed experts
quantized W4A16 group 32 with compressed-tensors (python/tests/ct_tiny.py), then
runs each side in its own process:

  transformers  AutoModelForCausalLM, CompressedTensorsConfig(dequantize=True):
                the experts decompressed to bfloat16
  moeq          moeq.torch.from_pretrained: the experts packed, on moeq's kernels

and prints, for each, load time, resident memory after loading and its peak
(VmRSS / VmHWM), and decode speed (new tokens / s of a greedy generate after a
warm-up), with the moeq / transformers ratios, and how many greedy tokens agree
(in bfloat16 the two round the experts differently and a random model's
near-ties can then send the greedy paths apart; --dtype float32 runs both in
float32, transformers' experts set to the checkpoint's exact values).  Figures only: nothing is asserted.  Needs torch, transformers,
compressed-tensors.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = dict(hidden_size=1024, moe_intermediate_size=512, num_experts=32, num_experts_per_tok=4,
             num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4, head_dim=128,
             vocab_size=8192, intermediate_size=2048)


def memory():
    """(VmRSS, VmHWM) of this process in MiB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024
    return out["VmRSS"], out["VmHWM"]


def run_side(side, d, new_tokens, prompt_len, dtype_name):
    import torch
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    if side == "transformers":
        import warnings
        from transformers import AutoModelForCausalLM
        from transformers.utils.quantization_config import CompressedTensorsConfig
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = AutoModelForCausalLM.from_pretrained(
                d, dtype=dtype,
                quantization_config=CompressedTensorsConfig(dequantize=True)).eval()
        if dtype == torch.float32:
            # The loader leaves the experts rounded to the scales' bfloat16; give the
            # float32 run the checkpoint's exact values, as moeq has them.
            sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
            import ct_tiny
            ct_tiny.exact_experts(model, "qwen3_moe", d)
    else:
        import moeq.torch as mt
        model, _ = mt.from_pretrained(d, dtype=dtype)
    load_s = time.perf_counter() - t0
    rss, _ = memory()
    ids = torch.randint(0, model.config.vocab_size, (1, prompt_len),
                        generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False)  # warm-up
        t0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             do_sample=False)
        gen_s = time.perf_counter() - t0
    _, peak = memory()
    return {"side": side, "load_s": load_s, "rss_mib": rss, "peak_mib": peak,
            "tokens_per_s": new_tokens / gen_s, "threads": torch.get_num_threads(),
            "tokens": out[0, prompt_len:].tolist()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", help="model directory (made when missing or empty)")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    ap.add_argument("--side", choices=["transformers", "moeq"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side:
        print(json.dumps(run_side(a.side, a.dir, a.new_tokens, a.prompt, a.dtype)))
        return
    d = a.dir or tempfile.mkdtemp(prefix="moeq-swap-bench-")
    if not os.path.exists(os.path.join(d, "config.json")):
        sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
        import ct_tiny
        t0 = time.perf_counter()
        ct_tiny.make_model("qwen3_moe", d, **SIZES)
        print(f"model: {d} (made in {time.perf_counter() - t0:.0f} s)")
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    files = sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d)
                if n.endswith(".safetensors"))
    print(f"qwen3_moe: hidden {c['hidden_size']}, {c.get('num_experts', c.get('num_local_experts'))} experts of "
          f"{c['moe_intermediate_size']}, top-{c['num_experts_per_tok']}, "
          f"{c['num_hidden_layers']} layers, vocab {c['vocab_size']}; checkpoint "
          f"{files / 2**20:.0f} MiB (experts W4A16 g32)")
    print(f"greedy generate: prompt {a.prompt}, {a.new_tokens} new tokens, batch 1, {a.dtype}")
    results = {}
    for side in ("transformers", "moeq"):
        proc = subprocess.run([sys.executable, __file__, "--side", side, "--dir", d,
                               "--new-tokens", str(a.new_tokens), "--prompt", str(a.prompt),
                               "--dtype", a.dtype],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"{side} failed:\n{proc.stderr}")
        results[side] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{'':14}{'load s':>8}{'RSS MiB':>10}{'peak MiB':>10}{'tok/s':>9}")
    for side, r in results.items():
        print(f"{side:14}{r['load_s']:8.1f}{r['rss_mib']:10.0f}{r['peak_mib']:10.0f}"
              f"{r['tokens_per_s']:9.1f}")
    t, m = results["transformers"], results["moeq"]
    print(f"moeq / transformers: RSS {m['rss_mib'] / t['rss_mib']:.2f}, peak "
          f"{m['peak_mib'] / t['peak_mib']:.2f}, tok/s {m['tokens_per_s'] / t['tokens_per_s']:.2f}"
          f" (torch threads {t['threads']})")
    first = next((i for i, (x, y) in enumerate(zip(t["tokens"], m["tokens"])) if x != y),
                 len(t["tokens"]))
    print(f"greedy tokens equal before the paths part: {first} of {len(t['tokens'])}")


if __name__ == "__main__":
    main()
